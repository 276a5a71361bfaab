//! The tree workload's hand-offs (issue 45), after the observer's cold
//! start and memory (`tree.rs`):
//!
//! * **Per entity**: T tasks (`--entities`, 1,000) on ONE session, task i
//!   on a lock path of its own (`<base>/e<i>`), the way services take
//!   locks: one lock per entity. Each task loops acquire → release on its
//!   own path for the window; no task ever waits for another. A hand-off
//!   here is one hold of an entity after the last one ended: the entity's
//!   lock freed (a delete) and taken again (a create), which is what a
//!   hand-off to another process costs the server too, without the waiter's
//!   watch. Every contender in the same reps, plus zk-curator with a
//!   `TreeObserver` (on a session of its own) over the entities' root, plus
//!   the server's create+delete ceiling (`ceiling.rs`: pipelined
//!   zookeeper-client sessions) and the same pairs in flight on one of
//!   those sessions alone (every contender has one session: what one
//!   session carries bounds its row first), interleaved in a rotating
//!   order. Requests
//!   and notifications per hand-off are the server's counts (`mntr`), all
//!   kinds of notification (a persistent recursive watch is told of
//!   creations too). ZooKeeper 3.8 counts a persistent recursive watch's
//!   `NodeDeleted` twice, once sent and once suppressed (the watch sits in
//!   both of its watch tables): 10 creates and deletes under one such watch
//!   read `zk_sum_node_deleted_watch_count` 20 and `..._created_...` 10,
//!   while the watching client got 10 of each (zkCli's `addWatch -m
//!   PERSISTENT_RECURSIVE`, ZooKeeper 3.8.0, 2026-12-05). So an observed
//!   hand-off reads 3 notifications where the observer receives 2, which
//!   its `events` column shows.
//! * **Contended, observed**: zk-curator's contended workload (N sessions,
//!   one task each, one path) without an observer, and with a
//!   `TreeObserver` over the path's parent on the contenders' runtime and
//!   on a runtime of its own (`apart.rs`), and with the floor of any
//!   observer that follows every hand-off with one watch (a raw session's
//!   persistent recursive watch that only counts its events), in the same
//!   rep, in a rotating order; each one's cost per rep, and over the
//!   medians.
//!
//! Both tables show the CPU spent per hand-off (`cpu.rs`): the server's
//! process, this process, the observer's thread when it runs apart, and
//! how busy the machine was.
//!
//! The observer is started (its cold start) before the server's counts are
//! read and the window opens, and closed with its session after; before
//! the counts are read again the bench waits until it has applied the
//! run's events (two per hand-off: the node's creation and its deletion),
//! so its reads are counted with the run that caused them. It runs in this
//! process, on the same two cores as the contenders and the server: the
//! cost measured is the client's CPU as well as the server's notifications.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zk_curator::framework::zk;
use zk_curator::recipes::tree::TreeObserver;
use zk_curator::Framework;

use super::apart::Apart;
use super::ceiling;
use super::contenders::{Contender, CURATOR, ZK_CURATOR};
use super::cpu::{CpuPer, CpuReading};
use super::figures::{per, Handoffs};
use super::findings::{EntityFindings, Findings, ObservedFindings, ObservedWith};
use super::limits::{within, BoxError, Measured, CLOSE_LIMIT};
use super::mntr::{counters, Counters, Traffic};
use super::options::Config;
use super::reps::{rotation, settle, spread};
use super::sessions::{framework, raw_client, Tune};
use super::stats::{ratio, Spread};
use super::table::{lead_columns, lead_header, noise_note, opt, percent};
use super::target::Target;

/// Bounds on an observer's cold start, and on its catching up with a run.
const COLD_LIMIT: Duration = Duration::from_secs(60);
const CATCH_UP_LIMIT: Duration = Duration::from_secs(20);
/// The name of an observer's runtime thread, when apart (its CPU is read).
const OBSERVER_THREAD: &str = "observer";
/// The label of the per-entity row with an observer.
const OBSERVED_LABEL: &str = "zk-curator + TreeObserver";

/// One row of the per-entity table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Row {
    Contender(usize),
    /// zk-curator, with an observer over the entities' root.
    Observed,
    /// The server's create+delete pairs, pipelined.
    Ceiling,
    /// The same pairs in flight, all on one of the ceiling's sessions: what
    /// one session carries, as every contender here has one.
    OneSession,
}

impl Row {
    fn is_ceiling(self) -> bool {
        matches!(self, Row::Ceiling | Row::OneSession)
    }
}

/// One measurement of one row, its figures per hand-off (per pair for the
/// ceiling).
struct Rep {
    per_s: f64,
    requests: Option<f64>,
    notifications: Option<f64>,
    /// Events the observer applied (observed rows).
    events: Option<f64>,
    /// CPU per hand-off (per pair for the ceiling).
    cpu: CpuPer,
}

/// Where an observer runs: on the contenders' runtime (an observer a
/// service runs in its own process), or on a runtime of its own (as the
/// dashboard, a process of its own, attaches to a running system).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    Shared,
    Apart,
}

/// What follows the observed path in an observed run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Follower {
    /// A `TreeObserver`, placed so.
    Tree(Placement),
    /// The floor of any observer that follows every hand-off with one
    /// watch: a raw session's persistent recursive watch on a runtime of
    /// its own, which counts its events and reads nothing, keeps no tree
    /// and publishes nothing. What it costs is the server's notifications
    /// and their delivery, which every such observer pays.
    BareWatch,
}

/// What follows the path: a `TreeObserver` on a framework of its own, or a
/// bare watch on a raw session.
enum Following {
    Tree {
        framework: Framework,
        observer: TreeObserver,
    },
    Bare {
        /// Dropped (its session closed) on the bare watch's runtime.
        client: zk::Client,
        /// The watch's events so far, counted by `task`.
        events: Arc<AtomicU64>,
        task: tokio::task::JoinHandle<()>,
    },
}

/// An observer (or a bare watch) on a session of its own, its view current.
struct Attached {
    following: Following,
    /// Its runtime, when apart.
    apart: Option<Apart>,
}

impl Attached {
    async fn start(
        connect: &str,
        root: &str,
        max_paths: usize,
        follower: Follower,
    ) -> Result<Attached, BoxError> {
        match follower {
            Follower::Tree(placement) => Self::tree(connect, root, max_paths, placement).await,
            Follower::BareWatch => Self::bare(connect, root).await,
        }
    }

    async fn tree(
        connect: &str,
        root: &str,
        max_paths: usize,
        placement: Placement,
    ) -> Result<Attached, BoxError> {
        let (connect, root) = (connect.to_owned(), root.to_owned());
        let start = async move {
            let framework = framework(&connect, Tune::Plain).await?;
            let observer = match TreeObserver::new(framework.clone(), &root, max_paths) {
                Ok(observer) => observer,
                Err(err) => {
                    let _ = within(CLOSE_LIMIT, framework.close()).await;
                    return Err(err.into());
                }
            };
            // Started here: its task runs where its session does.
            if let Err(err) = observer.start() {
                observer.close().await;
                let _ = within(CLOSE_LIMIT, framework.close()).await;
                return Err(err.into());
            }
            Ok::<_, BoxError>((framework, observer))
        };
        let (apart, started) = match placement {
            Placement::Shared => (None, start.await),
            Placement::Apart => {
                let apart = Apart::new(OBSERVER_THREAD)?;
                let started = apart.run(start).await.and_then(|started| started);
                (Some(apart), started)
            }
        };
        let (framework, observer) = started?;
        let mut changes = observer.changes();
        let attached = Attached {
            following: Following::Tree {
                framework,
                observer,
            },
            apart,
        };
        let current = within(COLD_LIMIT, async {
            while !changes.borrow_and_update().current {
                if changes.changed().await.is_err() {
                    break;
                }
            }
        })
        .await;
        match current {
            Ok(()) => Ok(attached),
            Err(err) => {
                attached.close().await;
                Err(err)
            }
        }
    }

    /// A raw session on a runtime of its own, with a persistent recursive
    /// watch on `root` (in place once this returns) counting its events.
    async fn bare(connect: &str, root: &str) -> Result<Attached, BoxError> {
        let apart = Apart::new(OBSERVER_THREAD)?;
        let (connect, root) = (connect.to_owned(), root.to_owned());
        let events = Arc::new(AtomicU64::new(0));
        let counted = events.clone();
        let started = apart
            .run(async move {
                let client = raw_client(&connect).await?;
                let mut watcher = within(
                    COLD_LIMIT,
                    client.watch(&root, zk::AddWatchMode::PersistentRecursive),
                )
                .await??;
                let task = tokio::spawn(async move {
                    loop {
                        let event = watcher.changed().await;
                        if event.event_type == zk::EventType::Session {
                            if event.session_state.is_terminated() {
                                return;
                            }
                        } else {
                            counted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
                Ok::<_, BoxError>((client, task))
            })
            .await
            .and_then(|started| started);
        let (client, task) = started?;
        Ok(Attached {
            following: Following::Bare {
                client,
                events,
                task,
            },
            apart: Some(apart),
        })
    }

    /// The name of its runtime's thread, when apart.
    fn thread(&self) -> Option<&'static str> {
        self.apart.as_ref().map(|_| OBSERVER_THREAD)
    }

    fn events(&self) -> u64 {
        match &self.following {
            Following::Tree { observer, .. } => observer.view().events,
            Following::Bare { events, .. } => events.load(Ordering::Relaxed),
        }
    }

    /// Waits until the view is current and `events` more than `from` were
    /// applied (for a bare watch: received).
    async fn caught_up(&self, from: u64, events: u64) -> Result<(), BoxError> {
        let waited = within(CATCH_UP_LIMIT, async {
            match &self.following {
                Following::Tree { observer, .. } => {
                    let mut changes = observer.changes();
                    loop {
                        let view = changes.borrow_and_update().clone();
                        if view.current && view.events >= from + events {
                            return;
                        }
                        if changes.changed().await.is_err() {
                            return;
                        }
                    }
                }
                // The count is read, not published: a bare watch does no
                // more than receive (polled here, after the window).
                Following::Bare { events: seen, .. } => {
                    while seen.load(Ordering::Relaxed) < from + events {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
        })
        .await;
        waited.map_err(|_| {
            format!(
                "the observer applied {} of the run's {events} events within {CATCH_UP_LIMIT:?}",
                self.events().saturating_sub(from)
            )
            .into()
        })
    }

    async fn close(self) {
        let Attached { following, apart } = self;
        let close = async move {
            match following {
                Following::Tree {
                    framework,
                    observer,
                } => {
                    observer.close().await;
                    let _ = within(CLOSE_LIMIT, framework.close()).await;
                }
                Following::Bare { client, task, .. } => {
                    task.abort();
                    drop(client);
                }
            }
        };
        match &apart {
            Some(apart) => {
                let _ = apart.run(close).await;
            }
            None => close.await,
        }
    }
}

/// What every measurement needs.
struct Ctx<'a> {
    connect: &'a str,
    addr: Option<&'a str>,
    idle: f64,
    limit: Duration,
    /// The server's process, when the run started it (its CPU is read).
    server: Option<u32>,
}

/// The server's counts and the CPU times, read around one run.
struct Around {
    counters: Option<Counters>,
    cpu: CpuReading,
    started: Instant,
    /// The threads whose CPU is read apart (an observer on its own runtime).
    thread: Option<&'static str>,
}

/// What one run cost: the server's traffic, and the CPU between the two
/// readings.
struct Spent {
    traffic: Option<Traffic>,
    cpu: (CpuReading, CpuReading),
}

impl Spent {
    /// The CPU per one of `count` (hand-offs, or pairs).
    fn cpu_per(&self, count: f64) -> CpuPer {
        self.cpu.0.per(self.cpu.1, count)
    }
}

impl Around {
    async fn start(ctx: &Ctx<'_>, thread: Option<&'static str>) -> Around {
        Around {
            counters: counters(ctx.addr).await,
            cpu: CpuReading::now(ctx.server, thread),
            started: Instant::now(),
            thread,
        }
    }

    async fn end(self, ctx: &Ctx<'_>) -> Spent {
        let cpu = CpuReading::now(ctx.server, self.thread);
        let traffic = Traffic::between(
            self.counters,
            counters(ctx.addr).await,
            self.started.elapsed(),
            ctx.idle,
        );
        Spent {
            traffic,
            cpu: (self.cpu, cpu),
        }
    }
}

pub(crate) async fn entities_phase(
    config: &Config,
    target: &Target,
    root: &str,
    contenders: &mut [Contender],
    idle: f64,
    findings: &mut Findings,
) {
    per_entity(config, target, root, contenders, idle, findings).await;
    observed(config, target, root, contenders, idle, findings).await;
}

async fn per_entity(
    config: &Config,
    target: &Target,
    root: &str,
    contenders: &mut [Contender],
    idle: f64,
    findings: &mut Findings,
) {
    let (tasks, window) = (config.entity_tasks, config.entity_window);
    println!();
    println!(
        "== Per entity: {tasks} tasks on ONE session, each on a lock path of its own, {:.1} s a rep ==",
        window.as_secs_f64()
    );
    println!("   the way services take locks: one lock per entity. Each task loops acquire -> release on its own path;");
    println!("   no task waits for another. hand-off = one hold of an entity begun within the window (its lock freed");
    println!("   by the last hold's delete and taken again by a create, as a hand-off to another process, without");
    println!("   the waiter's watch); per second, all entities together. Peers: {tasks} threads on one session.");
    println!(
        "   {OBSERVED_LABEL}: the zk-curator row with a TreeObserver (a session of its own) over the entities' root."
    );
    println!(
        "   ceiling: create+delete pairs/s of {} pipelined zookeeper-client session(s), {} pairs in flight each (ceiling.rs);",
        config.ceiling_sessions, config.ceiling_depth
    );
    println!(
        "   ceiling on one session: the same {} pairs in flight, all on one of those sessions (every contender has one).",
        config.ceiling_sessions * config.ceiling_depth
    );
    println!("   req, notif = requests the server received and watch notifications it sent (all kinds), per hand-off");
    println!("   (ZooKeeper 3.8 counts a persistent recursive watch's NodeDeleted twice: an observed hand-off's notif reads");
    println!("   3 where the observer receives 2, its events column)");
    println!("   (ceiling: per pair); events = the observer's events applied per hand-off; srv µs = the server's CPU per");
    println!("   hand-off (per pair), in microseconds; busy = the share of the machine's cores busy; every row warmed first");
    let ctx = Ctx {
        connect: &target.connect,
        addr: target.four_letter.as_deref(),
        idle,
        limit: config.limit(),
        server: target.server.as_ref().map(|s| s.pid()),
    };
    let base = format!("{root}/entities");
    let clients = open_ceiling(config, &ctx, &base).await;
    let rows: Vec<Row> = (0..contenders.len())
        .map(Row::Contender)
        .chain([Row::Observed, Row::Ceiling, Row::OneSession])
        .collect();
    let label = |row: Row| match row {
        Row::Contender(i) => contenders[i].label,
        Row::Observed => OBSERVED_LABEL,
        Row::Ceiling => "ceiling (create+delete pairs/s)",
        Row::OneSession => "ceiling on one session",
    };
    let labels: Vec<&'static str> = rows.iter().map(|&r| label(r)).collect();

    // Unmeasured: every row once (the entities' parents made, the peers'
    // code for this shape compiled).
    for (&row, label) in rows.iter().zip(&labels) {
        let warm = measure(
            row,
            &ctx,
            &base,
            tasks,
            config.entity_warmup,
            contenders,
            &clients,
            config.ceiling_depth,
        )
        .await;
        if let Err(reason) = warm {
            println!("  warm-up of {label}: n/a ({reason})");
        }
    }
    let mut reps: Vec<Vec<Measured<Rep>>> = rows.iter().map(|_| Vec::new()).collect();
    for rep in 0..config.reps {
        for i in rotation(rep, rows.len()) {
            settle().await;
            let result = measure(
                rows[i],
                &ctx,
                &base,
                tasks,
                window,
                contenders,
                &clients,
                config.ceiling_depth,
            )
            .await;
            reps[i].push(result);
        }
    }
    if let Ok(clients) = clients {
        drop(clients);
    }

    let rates: Vec<Option<Spread>> = reps.iter().map(|r| spread(r, |x| Some(x.per_s))).collect();
    let rate_of = |wanted: Row| {
        rows.iter()
            .position(|&row| row == wanted)
            .and_then(|i| rates[i])
    };
    let (ceiling, one_session) = (rate_of(Row::Ceiling), rate_of(Row::OneSession));
    let share_of = |rate: Option<Spread>, ceiling: Option<Spread>| match (rate, ceiling) {
        (Some(r), Some(c)) if c.median > 0.0 => format!(
            "{:.0}% ({:.0}–{:.0})",
            100.0 * r.median / c.median,
            100.0 * r.min / c.median,
            100.0 * r.max / c.median
        ),
        _ => "n/a".to_owned(),
    };
    let share = |rate: Option<Spread>| share_of(rate, ceiling);
    println!(
        "{} {:>15} {:>6} {:>6} {:>6} {:>7} {:>5}  note",
        lead_header("hand-offs/s"),
        "% ceiling",
        "req",
        "notif",
        "events",
        "srv µs",
        "busy"
    );
    for (i, (&row, label)) in rows.iter().zip(&labels).enumerate() {
        let requests = spread(&reps[i], |x| x.requests);
        let notifications = spread(&reps[i], |x| x.notifications);
        let events = spread(&reps[i], |x| x.events);
        let lead = if row.is_ceiling() {
            match rates[i] {
                Some(s) => format!("{:>10.0} {:>17} {:>9} {:>9}", s.median, s.range(0), "", ""),
                None => format!("{:>10} {:>17} {:>9} {:>9}", "n/a", "", "", ""),
            }
        } else {
            lead_columns(&rates, i, 0)
        };
        let note = if row.is_ceiling() {
            String::new()
        } else if row == Row::Observed {
            // The observed row: against the same contender without it.
            match (rates[i], rates[ZK_CURATOR]) {
                (Some(a), Some(b)) => match a.within_noise(&b) {
                    Some(true) => "within noise of zk-curator".to_owned(),
                    Some(false) => String::new(),
                    None => "1 rep: no noise estimate".to_owned(),
                },
                _ => String::new(),
            }
        } else {
            noise_note(&rates, i)
        };
        println!(
            "{:<34} {lead} {:>15} {:>6} {:>6} {:>6} {:>7} {:>5}  {note}{}",
            label,
            if row == Row::Ceiling {
                String::new()
            } else {
                share(rates[i])
            },
            opt(requests, 2),
            opt(notifications, 2),
            if events.is_some() {
                opt(events, 2)
            } else {
                String::new()
            },
            opt(spread(&reps[i], |x| x.cpu.server_us), 0),
            percent(spread(&reps[i], |x| x.cpu.busy)),
            failed(&reps[i])
                .map(|f| format!(" {f}"))
                .unwrap_or_default()
        );
    }
    println!(
        "(% ceiling = hand-offs/s as a share of the ceiling's median, median (min–max); vs Cur. / vs zkc = ratio of medians)"
    );
    // Every contender has one session: what one session carries is the
    // bound that its row meets first.
    println!(
        "zk-curator's hand-offs/s as a share of the ceiling on one session: {}",
        share_of(rates[ZK_CURATOR], one_session)
    );
    findings.entities = Some(EntityFindings {
        tasks,
        zk_curator: rates[ZK_CURATOR],
        curator: rates.get(CURATOR).copied().flatten(),
        ceiling,
    });
}

/// The ceiling's sessions and their parent node, or why not.
async fn open_ceiling(config: &Config, ctx: &Ctx<'_>, base: &str) -> Measured<Vec<zk::Client>> {
    let opened = async {
        let mut clients = Vec::with_capacity(config.ceiling_sessions);
        for _ in 0..config.ceiling_sessions {
            clients.push(raw_client(ctx.connect).await?);
        }
        if let Some(first) = clients.first() {
            ceiling::create_parents(first, &format!("{base}/ceiling/x")).await?;
        }
        Ok::<_, BoxError>(clients)
    };
    opened.await.map_err(|e| format!("connect: {e}"))
}

/// One run of one row, with the server's counts read around it.
#[allow(clippy::too_many_arguments)]
async fn measure(
    row: Row,
    ctx: &Ctx<'_>,
    base: &str,
    tasks: usize,
    window: Duration,
    contenders: &mut [Contender],
    clients: &Measured<Vec<zk::Client>>,
    depth: usize,
) -> Measured<Rep> {
    match row {
        Row::Ceiling | Row::OneSession => {
            let clients = clients.as_ref().map_err(|e| e.clone())?;
            // One session keeps in flight what all of them did.
            let (clients, depth) = match row {
                Row::OneSession => (&clients[..clients.len().min(1)], depth * clients.len()),
                _ => (&clients[..], depth),
            };
            let around = Around::start(ctx, None).await;
            let done = ceiling::pairs(
                clients,
                &format!("{base}/ceiling"),
                depth,
                window,
                ctx.limit,
            )
            .await;
            let spent = around.end(ctx).await;
            let (within, all) = done?;
            let traffic = spent.traffic;
            Ok(Rep {
                per_s: within as f64 / window.as_secs_f64(),
                requests: per(traffic.map(|t| t.requests), all as f64),
                notifications: per(traffic.and_then(|t| t.notifications), all as f64),
                events: None,
                cpu: spent.cpu_per(all as f64),
            })
        }
        Row::Contender(i) => {
            let c = &mut contenders[i];
            let path = format!("{base}/{}", c.short);
            let around = Around::start(ctx, None).await;
            let result = c
                .entities(ctx.connect, &path, tasks, window, ctx.limit)
                .await;
            let spent = around.end(ctx).await;
            Ok(figures(result?, &spent, None))
        }
        Row::Observed => {
            // The zk-curator row's paths, observed.
            let c = &mut contenders[ZK_CURATOR];
            let path = format!("{base}/{}", c.short);
            let attached = Attached::start(
                ctx.connect,
                &path,
                tasks + 10,
                Follower::Tree(Placement::Shared),
            )
            .await
            .map_err(|e| format!("observer: {e}"))?;
            let from = attached.events();
            let around = Around::start(ctx, attached.thread()).await;
            let result = c
                .entities(ctx.connect, &path, tasks, window, ctx.limit)
                .await;
            let caught = match &result {
                Ok(h) => attached.caught_up(from, 2 * h.releases).await,
                Err(_) => Ok(()),
            };
            let spent = around.end(ctx).await;
            let events = attached.events().saturating_sub(from);
            attached.close().await;
            let handoffs = result?;
            caught.map_err(|e| e.to_string())?;
            Ok(figures(handoffs, &spent, Some(events as f64)))
        }
    }
}

/// A run's figures per hand-off (per release: the drain's holds, begun
/// after the window, cost requests too).
fn figures(h: Handoffs, spent: &Spent, events: Option<f64>) -> Rep {
    let releases = h.releases as f64;
    let traffic = spent.traffic;
    Rep {
        per_s: h.per_s,
        requests: per(traffic.map(|t| t.requests), releases),
        notifications: per(traffic.and_then(|t| t.notifications), releases),
        events: events.and_then(|e| per(Some(e), releases)),
        cpu: spent.cpu_per(releases),
    }
}

/// Why a row's reps failed, if any did.
fn failed<T>(reps: &[Measured<T>]) -> Option<String> {
    let failed: Vec<&String> = reps.iter().filter_map(|r| r.as_ref().err()).collect();
    let first = failed.first()?;
    Some(if failed.len() == reps.len() {
        format!("n/a ({first})")
    } else {
        format!("{} of {} reps failed: {first}", failed.len(), reps.len())
    })
}

/// The observed workload's rows: without an observer, then with one on
/// each [`Placement`], and the floor: a bare recursive watch.
const OBSERVED_ROWS: [(Option<Follower>, &str); 4] = [
    (None, "without an observer"),
    (
        Some(Follower::Tree(Placement::Shared)),
        "with a TreeObserver, same runtime",
    ),
    (
        Some(Follower::Tree(Placement::Apart)),
        "with a TreeObserver, own runtime",
    ),
    (Some(Follower::BareWatch), "with a bare recursive watch"),
];

/// Contended hand-offs/s of zk-curator on one path, with an observer over
/// its parent against without, interleaved.
async fn observed(
    config: &Config,
    target: &Target,
    root: &str,
    contenders: &mut [Contender],
    idle: f64,
    findings: &mut Findings,
) {
    let (n, window, k) = (
        config.observed_sessions,
        config.observed_window,
        config.observed_reps,
    );
    let Some(c) = contenders.get_mut(ZK_CURATOR) else {
        return;
    };
    println!();
    println!(
        "== Contended, observed: {} with N = {n} sessions (one task each) on ONE path, {k} rep(s) of {:.1} s,",
        c.label,
        window.as_secs_f64()
    );
    println!("   without an observer and with a TreeObserver (a session of its own, in this process) over the path's parent:");
    println!("   on the contenders' runtime (as a service would run one in its own process), and on a runtime of its own");
    println!("   (one worker thread: as the dashboard, a process of its own, attaches to a running system); and the floor");
    println!("   of any observer with one watch: a bare persistent recursive watch on a raw session and a runtime of its own,");
    println!(
        "   counting its events, reading nothing; every row in each rep, in a rotating order =="
    );
    println!("   req, notif = requests the server received and watch notifications it sent (all kinds), per hand-off;");
    println!("   events = the observer's events applied per hand-off; cost = 1 - with / without, the runs of one rep;");
    println!("   srv µs, proc µs, obs µs = CPU per hand-off in microseconds: the server's, this whole process's (contenders");
    println!("   and observer), the observer's runtime thread's (own runtime only); busy = the share of the machine's cores busy");
    let ctx = Ctx {
        connect: &target.connect,
        addr: target.four_letter.as_deref(),
        idle,
        limit: config.limit(),
        server: target.server.as_ref().map(|s| s.pid()),
    };
    let base = format!("{root}/observed");
    let path = format!("{base}/lock");
    // Unmeasured: once each (the path made, the observer's code warm).
    for (placement, name) in OBSERVED_ROWS {
        if let Err(reason) =
            contended_run(c, &ctx, &base, &path, n, config.entity_warmup, placement).await
        {
            println!("  warm-up {name}: n/a ({reason})");
        }
    }
    let rows = OBSERVED_ROWS.len();
    let mut reps: Vec<Vec<Measured<Rep>>> = (0..rows).map(|_| Vec::new()).collect();
    // Each observed row's cost, per rep.
    let mut costs: Vec<Vec<f64>> = vec![Vec::new(); rows - 1];
    // And the CPU each adds per hand-off (the server's and this
    // process's), in microseconds, per rep.
    let mut added: Vec<Vec<f64>> = vec![Vec::new(); rows - 1];
    for rep in 0..k {
        let mut rates = vec![None; rows];
        let mut cpu = vec![None; rows];
        for row in rotation(rep, rows) {
            settle().await;
            let result =
                contended_run(c, &ctx, &base, &path, n, window, OBSERVED_ROWS[row].0).await;
            rates[row] = result.as_ref().ok().map(|r| r.per_s);
            cpu[row] = result
                .as_ref()
                .ok()
                .and_then(|r| r.cpu.server_us.zip(r.cpu.process_us))
                .map(|(server, process)| server + process);
            reps[row].push(result);
        }
        for (row, (cost, added)) in costs.iter_mut().zip(added.iter_mut()).enumerate() {
            if let (Some(without), Some(with)) = (rates[0], rates[row + 1]) {
                if without > 0.0 {
                    cost.push(1.0 - with / without);
                }
            }
            if let (Some(without), Some(with)) = (cpu[0], cpu[row + 1]) {
                added.push(with - without);
            }
        }
    }
    let rates: Vec<Option<Spread>> = reps.iter().map(|r| spread(r, |x| Some(x.per_s))).collect();
    println!(
        "{:<34} {:>10} {:>17} {:>6} {:>6} {:>6} {:>7} {:>7} {:>7} {:>5}  note",
        "",
        "hand-offs/s",
        "min–max",
        "req",
        "notif",
        "events",
        "srv µs",
        "proc µs",
        "obs µs",
        "busy"
    );
    for (i, (_, name)) in OBSERVED_ROWS.iter().enumerate() {
        let requests = spread(&reps[i], |x| x.requests);
        let notifications = spread(&reps[i], |x| x.notifications);
        let events = spread(&reps[i], |x| x.events);
        let observer = spread(&reps[i], |x| x.cpu.named_us);
        let lead = match rates[i] {
            Some(s) => format!("{:>10.0} {:>17}", s.median, s.range(0)),
            None => format!("{:>10} {:>17}", "n/a", ""),
        };
        println!(
            "{name:<34} {lead} {:>6} {:>6} {:>6} {:>7} {:>7} {:>7} {:>5}  {}",
            opt(requests, 2),
            opt(notifications, 2),
            if events.is_some() {
                opt(events, 2)
            } else {
                String::new()
            },
            opt(spread(&reps[i], |x| x.cpu.server_us), 0),
            opt(spread(&reps[i], |x| x.cpu.process_us), 0),
            if observer.is_some() {
                opt(observer, 0)
            } else {
                String::new()
            },
            percent(spread(&reps[i], |x| x.cpu.busy)),
            failed(&reps[i]).unwrap_or_default()
        );
    }
    // The CPU each observed row adds per hand-off (the server's and this
    // process's medians), against the row without.
    let cpu = |i: usize| {
        spread(&reps[i], |x| x.cpu.server_us)
            .zip(spread(&reps[i], |x| x.cpu.process_us))
            .map(|(server, process)| (server.median, process.median))
    };
    let mut placements = Vec::new();
    for (i, (_, name)) in OBSERVED_ROWS.iter().enumerate().skip(1) {
        let cost = Spread::of(&costs[i - 1]);
        let noise = match (rates[0], rates[i]) {
            (Some(a), Some(b)) => match a.within_noise(&b) {
                Some(true) => "within noise of the row without",
                Some(false) => "its range and the row without's do not overlap",
                None => "1 rep: no noise estimate",
            },
            _ => "",
        };
        println!(
            "cost {name}: {} of hand-offs/s over the medians (with / without = {}); per rep: median {}, min–max {}; {noise}",
            match (rates[0], rates[i]) {
                (Some(a), Some(b)) if a.median > 0.0 => format!("{:.1}%", 100.0 * (1.0 - b.median / a.median)),
                _ => "n/a".to_owned(),
            },
            ratio(rates[i].as_ref(), rates[0].as_ref()),
            cost.map_or_else(|| "n/a".to_owned(), |c| format!("{:.1}%", 100.0 * c.median)),
            cost.map_or_else(
                || "n/a".to_owned(),
                |c| format!("{:.1}%–{:.1}%", 100.0 * c.min, 100.0 * c.max)
            ),
        );
        if let (Some((server, process)), Some((with_server, with_process))) = (cpu(0), cpu(i)) {
            let before = server + process;
            let over_medians = (with_server - server) + (with_process - process);
            let per_rep = Spread::of(&added[i - 1]).map_or_else(
                || "n/a".to_owned(),
                |a| {
                    format!(
                        "median {:+.0}, min–max {:+.0} to {:+.0}",
                        a.median, a.min, a.max
                    )
                },
            );
            println!(
                "   CPU {name}: {over_medians:+.0} µs per hand-off over the medians (server {:+.0}, this process {:+.0}): {:+.1}% of the {before:.0} µs a hand-off takes of both without; per rep: {per_rep}",
                with_server - server,
                with_process - process,
                if before > 0.0 { 100.0 * over_medians / before } else { 0.0 },
            );
        }
        placements.push(ObservedWith {
            name,
            floor: OBSERVED_ROWS[i].0 == Some(Follower::BareWatch),
            rate: rates[i],
            cost,
        });
    }
    findings.observed = Some(ObservedFindings {
        sessions: n,
        without: rates[0],
        with: placements,
    });
}

/// One contended run of zk-curator on `path`, with an observer over `base`
/// placed as `observe` says, if any.
async fn contended_run(
    c: &mut Contender,
    ctx: &Ctx<'_>,
    base: &str,
    path: &str,
    n: usize,
    window: Duration,
    observe: Option<Follower>,
) -> Measured<Rep> {
    let attached = match observe {
        Some(placement) => Some(
            Attached::start(ctx.connect, base, 10, placement)
                .await
                .map_err(|e| format!("observer: {e}"))?,
        ),
        None => None,
    };
    let from = attached.as_ref().map_or(0, Attached::events);
    let around = Around::start(ctx, attached.as_ref().and_then(Attached::thread)).await;
    let result = c
        .contended(ctx.connect, path, n, n, window, ctx.limit)
        .await;
    let caught = match (&attached, &result) {
        (Some(a), Ok(h)) => a.caught_up(from, 2 * h.releases).await,
        _ => Ok(()),
    };
    let spent = around.end(ctx).await;
    let events = attached
        .as_ref()
        .map(|a| a.events().saturating_sub(from) as f64);
    if let Some(a) = attached {
        a.close().await;
    }
    let handoffs = result?;
    caught.map_err(|e| e.to_string())?;
    Ok(figures(handoffs, &spent, events))
}
