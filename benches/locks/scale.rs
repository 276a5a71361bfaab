//! The scale workload: K tasks parked on one held mutex (or K readers
//! behind a held write lock) over a few sessions, in a fresh process (this bench binary again, with
//! `--scale-child`), so that its RSS is the waiters' alone.
//!
//! Parked means: every task's `lock()` has been polled once (it is waiting)
//! and the server has gone quiet (the client sends nothing more; every
//! waiter that keeps a node has set its watch). That works whether a waiter
//! keeps a node of its own (before issue 9) or waits in the in-process queue
//! in front of ZooKeeper (after it). Then the holder releases and the queue
//! drains, every task taking the lock once.
//!
//! Every wait is bounded; the child stops itself when its RSS passes a cap
//! (before issue 9 a waiter costs ~190 KB of listings, so 50,000 of them
//! would take the machine's memory) or the server stops answering.
//!
//! Both sides live here: the child ([`child`], from `main`) and the run's
//! side ([`scale_phase`]), which starts a child for each K and variant,
//! prints what it reports, starts a fresh server if ours died, and then
//! measures the peers' memory per parked waiter.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use zk_curator::{Framework, InterProcessMutex, InterProcessReadWriteLock};

use super::findings::{Findings, ScaleFigures};
use super::limits::{within, BoxError, Measured, Scoped, ACQUIRE_LIMIT, CLOSE_LIMIT};
use super::mntr::counters;
use super::options::Config;
use super::peers::{self, field, PeerSetup};
use super::reps::settle;
use super::sessions::{framework, Tune};
use super::target::Target;

/// The hidden first argument that makes this binary the scale child:
/// `locks --scale-child <connect> <four-letter addr> <path> <sessions> <waiters>
/// <park limit secs> <drain limit secs> <rss cap MiB> <plain|per-task-node|readers>`
/// (`readers`: the waiters are readers behind a held write lock).
pub(crate) const SCALE_CHILD: &str = "--scale-child";

/// Runs the child; prints one `RESULT` or `FAILED:` line; the exit status.
pub(crate) async fn child(args: &[String]) -> i32 {
    let parsed = match args {
        [connect, addr, path, sessions, waiters, park, drain, cap, variant] => {
            match (
                sessions.parse(),
                waiters.parse(),
                park.parse(),
                drain.parse(),
                cap.parse(),
            ) {
                (Ok(s), Ok(w), Ok(p), Ok(d), Ok(c)) => Some((
                    connect,
                    addr,
                    path,
                    s,
                    w,
                    (Duration::from_secs(p), Duration::from_secs(d)),
                    c,
                    variant,
                )),
                _ => None,
            }
        }
        _ => None,
    };
    let Some((connect, addr, path, sessions, waiters, limit, cap, variant)) = parsed else {
        eprintln!("FAILED: usage: locks {SCALE_CHILD} <connect> <addr> <path> <sessions> <waiters> <park s> <drain s> <cap MiB> <variant>");
        return 2;
    };
    let tune = if variant == "per-task-node" {
        Tune::PerTaskNode
    } else {
        Tune::Plain
    };
    let kind = if variant == "readers" {
        Kind::Readers
    } else {
        Kind::Mutex
    };
    let started = Instant::now();
    match park_and_drain(
        connect, addr, path, sessions, waiters, limit, cap, tune, kind,
    )
    .await
    {
        Ok(line) => {
            println!("RESULT kind=scale {line}");
            0
        }
        Err(err) => {
            println!(
                "FAILED: {err} (after {:.1} s; client RSS {} MiB)",
                started.elapsed().as_secs_f64(),
                status_kib("VmRSS:").unwrap_or(0) / 1024
            );
            1
        }
    }
}

/// Ends once the lock has been released (after waiting for it, for a
/// waiter).
type Cycle = BoxFuture<'static, zk_curator::Result<()>>;

/// The most waiters a run drains (each takes the lock once); more are
/// cancelled instead, and the drain time is the time to cancel them all.
pub(crate) const DRAIN_UP_TO: usize = 100_000;

/// Makes one waiter's [`Cycle`].
type Waiter = Arc<dyn Fn() -> Cycle + Send + Sync>;

/// What the waiters wait for.
#[derive(Clone, Copy)]
enum Kind {
    /// A mutex somebody holds.
    Mutex,
    /// The read half of a read-write lock whose write half somebody holds.
    Readers,
}

impl Kind {
    /// Takes the lock exclusively; the future releases it.
    async fn hold(self, framework: &Framework, path: &str) -> Result<Cycle, BoxError> {
        Ok(match self {
            Kind::Mutex => {
                let mutex = InterProcessMutex::new(framework.clone(), path)?;
                let guard = within(ACQUIRE_LIMIT, mutex.lock()).await??;
                guard.release().boxed()
            }
            Kind::Readers => {
                let lock = InterProcessReadWriteLock::new(framework.clone(), path)?;
                let guard = within(ACQUIRE_LIMIT, lock.write_lock().lock()).await??;
                guard.release().boxed()
            }
        })
    }

    /// One waiter's lock factory per framework: each call waits for the
    /// lock, then releases it.
    fn waiter(self, framework: &Framework, path: &str) -> Result<Waiter, BoxError> {
        Ok(match self {
            Kind::Mutex => {
                let mutex = InterProcessMutex::new(framework.clone(), path)?;
                Arc::new(move || {
                    let mutex = mutex.clone();
                    async move { mutex.lock().await?.release().await }.boxed()
                })
            }
            Kind::Readers => {
                let read = InterProcessReadWriteLock::new(framework.clone(), path)?.read_lock();
                Arc::new(move || {
                    let read = read.clone();
                    async move { read.lock().await?.release().await }.boxed()
                })
            }
        })
    }
}

#[allow(clippy::too_many_arguments)]
async fn park_and_drain(
    connect: &str,
    addr: &str,
    path: &str,
    sessions: usize,
    waiters: usize,
    (park_limit, drain_limit): (Duration, Duration),
    cap_mib: i64,
    tune: Tune,
    kind: Kind,
) -> Result<String, BoxError> {
    let holder_fw = framework(connect, Tune::Plain).await?;
    let mut frameworks = Vec::new();
    for _ in 0..sessions.max(1) {
        frameworks.push(framework(connect, tune).await?);
    }
    let mutexes = frameworks
        .iter()
        .map(|fw| kind.waiter(fw, path))
        .collect::<Result<Vec<_>, _>>()?;
    let release = kind.hold(&holder_fw, path).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_before = status_kib("VmRSS:").ok_or("VmRSS not readable")?;
    let at_start = counters(Some(addr))
        .await
        .ok_or("the server does not answer mntr")?;

    let polled = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let failure: Arc<Mutex<Option<String>>> = Arc::default();
    let park_started = Instant::now();
    let mut tasks = Scoped(Vec::with_capacity(waiters));
    for i in 0..waiters {
        let mutex = mutexes[i % mutexes.len()].clone();
        let (polled, done, failure) = (polled.clone(), done.clone(), failure.clone());
        tasks.0.push(tokio::spawn(async move {
            let mut first = true;
            let mut lock = mutex();
            let result = std::future::poll_fn(|cx| {
                let poll = lock.as_mut().poll(cx);
                if first {
                    first = false;
                    polled.fetch_add(1, Ordering::Relaxed);
                }
                poll
            })
            .await;
            if let Err(err) = result {
                failure
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(err.to_string());
            }
            done.fetch_add(1, Ordering::Relaxed);
        }));
    }
    let failed =
        |failure: &Mutex<Option<String>>| failure.lock().unwrap_or_else(|e| e.into_inner()).clone();

    // Park: all polled, then the server quiet (at most a few pings) for two
    // samples in a row; the park time is when the quiet began.
    let sample = Duration::from_millis(250);
    let quiet_packets = (sessions + 4) as f64;
    let mut last = at_start;
    let mut quiet_since: Option<Duration> = None;
    let mut quiet_samples = 0;
    let mut unanswered = 0;
    let park_secs = loop {
        tokio::time::sleep(sample).await;
        let elapsed = park_started.elapsed();
        if let Some(err) = failed(&failure) {
            return Err(format!("a waiter failed while parking: {err}").into());
        }
        let rss = status_kib("VmRSS:").unwrap_or(0);
        if rss / 1024 > cap_mib {
            return Err(format!(
                "client RSS {} MiB passed the cap of {cap_mib} MiB while parking; stopped",
                rss / 1024
            )
            .into());
        }
        let Some(now) = counters(Some(addr)).await else {
            unanswered += 1;
            if unanswered >= 3 {
                return Err("server died (stopped answering mntr) while parking".into());
            }
            continue;
        };
        unanswered = 0;
        let all_polled = polled.load(Ordering::Relaxed) >= waiters;
        if all_polled && now.packets - last.packets - 1.0 <= quiet_packets {
            quiet_since.get_or_insert(elapsed.saturating_sub(sample));
            quiet_samples += 1;
            if quiet_samples >= 2 {
                break quiet_since.unwrap_or(elapsed).as_secs_f64();
            }
        } else {
            quiet_since = None;
            quiet_samples = 0;
        }
        last = now;
        if elapsed > park_limit {
            return Err(format!(
                "not parked within {park_limit:?} ({} of {waiters} polled)",
                polled.load(Ordering::Relaxed)
            )
            .into());
        }
    };
    let rss_after = status_kib("VmRSS:").ok_or("VmRSS not readable")?;
    let parked = counters(Some(addr))
        .await
        .ok_or("server died (no mntr answer) once parked")?;
    let wakeups_before: u64 = frameworks
        .iter()
        .map(|fw| fw.metrics().lock_wakeups())
        .sum();

    // Drain (or, past `DRAIN_UP_TO` waiters, cancel: every task takes the
    // lock once at about a thousand hand-offs a second, which for a million
    // waiters is a quarter of an hour).
    let drain_started = Instant::now();
    let cancel = waiters > DRAIN_UP_TO;
    if cancel {
        drop(tasks);
        loop {
            let queued: usize = frameworks.iter().map(|fw| fw.locally_queued(path)).sum();
            if queued == 0 {
                break;
            }
            if drain_started.elapsed() > drain_limit {
                return Err(format!(
                    "{queued} waiters still queued {drain_limit:?} after the cancel"
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        within(ACQUIRE_LIMIT, release).await??;
        done.store(waiters, Ordering::Relaxed);
    } else {
        within(ACQUIRE_LIMIT, release).await??;
    }
    loop {
        if done.load(Ordering::Relaxed) >= waiters {
            break;
        }
        if let Some(err) = failed(&failure) {
            return Err(format!("a waiter failed while draining: {err}").into());
        }
        if drain_started.elapsed() > drain_limit {
            return Err(format!(
                "not drained within {drain_limit:?} ({} of {waiters} done)",
                done.load(Ordering::Relaxed)
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let drain_secs = drain_started.elapsed().as_secs_f64();
    let drained = counters(Some(addr))
        .await
        .ok_or("server died (no mntr answer) after the drain")?;
    let wakeups: u64 = frameworks
        .iter()
        .map(|fw| fw.metrics().lock_wakeups())
        .sum::<u64>()
        - wakeups_before;
    let hwm = status_kib("VmHWM:").unwrap_or(0);
    let _ = tokio::time::timeout(CLOSE_LIMIT, holder_fw.close()).await;
    for fw in frameworks {
        let _ = tokio::time::timeout(CLOSE_LIMIT, fw.close()).await;
    }
    Ok(format!(
        "waiters={waiters} rss_kib_before={rss_before} rss_kib_after={rss_after} hwm_kib={hwm} \
         park_secs={park_secs:.3} nodes={} park_requests={} drain_secs={drain_secs:.3} \
         drain_requests={} drain_watches={} wakeups={wakeups} cancelled={}",
        parked.ephemerals - at_start.ephemerals,
        parked.packets - at_start.packets - 2.0,
        drained.packets - parked.packets - 1.0,
        (drained.deleted + drained.children) - (parked.deleted + parked.children),
        u8::from(cancel),
    ))
}

/// A `/proc/self/status` line's value in KiB (`VmRSS:`, `VmHWM:`).
pub(crate) fn status_kib(key: &str) -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|line| line.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

// ---------------------------------------------------------------------------
// The run's side: a child per K and variant, then the peers' memory
// ---------------------------------------------------------------------------

pub(crate) async fn scale_phase(
    config: &Config,
    target: &mut Target,
    root: &str,
    java: &Measured<PeerSetup>,
    python: &Measured<PeerSetup>,
    findings: &mut Findings,
) {
    let sessions = config.scale_sessions;
    println!();
    println!(
        "== Scale: K tasks parked on one held mutex over {sessions} sessions (zk-curator, a fresh process each) =="
    );
    println!("   (the readers row: K readers parked behind a held write lock)");
    println!("   RSS = the child's VmRSS growth from before the waiters to parked (HWM = its peak over the run);");
    println!("   park = until every lock() is polled and the server is quiet; nodes = waiters' nodes in ZooKeeper;");
    println!("   drain = release, until every task took and released the lock once; server = alive after the run");
    println!(
        "{:<28} {:>6} {:>9} {:>9} {:>9} {:>8} {:>7} {:>8} {:>8} {:>9} {:>6}",
        "variant",
        "K",
        "RSS MiB",
        "per wait",
        "HWM MiB",
        "park s",
        "nodes",
        "req/w",
        "drain s",
        "drain/s",
        "server"
    );
    let me = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"));
    // (label, the child's variant argument)
    let mut variants = vec![("zk-curator", "plain")];
    if Tune::PerTaskNode.available() {
        variants.push(("zk-curator (per-task node)", "per-task-node"));
    }
    // Readers waiting behind a held write lock.
    variants.push(("zk-curator, readers", "readers"));
    for (label, variant) in variants {
        let mut skip: Option<String> = None;
        for &k in &config.scale {
            if variant == "per-task-node" && k > DRAIN_UP_TO && skip.is_none() {
                // A node per waiter: the server's heap goes first (a
                // million waiters' nodes exhaust a 1 GB heap).
                skip = Some(format!("a node per waiter, more than {}", DRAIN_UP_TO));
            }
            if let Some(reason) = &skip {
                println!("{label:<28} {k:>6} skipped ({reason})");
                findings
                    .scale
                    .push((k, label, Err(format!("skipped ({reason})"))));
                continue;
            }
            let Some(addr) = target.four_letter.clone() else {
                println!("{label:<28} {k:>6} n/a (no host for mntr in the connect string)");
                continue;
            };
            settle().await;
            // Parking is bounded in time (before issue 9 it grows with the
            // square of K: 10,000 waiters took ~25 s here); the drain's bound
            // grows with K (50,000 at a few hundred hand-offs/s take minutes).
            let park_limit = Duration::from_secs(if config.quick { 60 } else { 180 });
            let drain_limit = Duration::from_secs(60 + k as u64 / 100);
            let path = format!("{root}/scale-{k}/{variant}");
            let outcome = match &me {
                Ok(me) => {
                    let mut command = tokio::process::Command::new(me);
                    command.arg(SCALE_CHILD).args([
                        target.connect.as_str(),
                        addr.as_str(),
                        path.as_str(),
                        &sessions.to_string(),
                        &k.to_string(),
                        &park_limit.as_secs().to_string(),
                        &drain_limit.as_secs().to_string(),
                        &config.scale_rss_cap_mib.to_string(),
                        variant,
                    ]);
                    let limit = park_limit + drain_limit + Duration::from_secs(120);
                    match peers::run_process(&mut command, limit).await {
                        Ok(output) => peers::parse_result(&output),
                        Err(reason) => Err(reason),
                    }
                }
                Err(reason) => Err(reason.clone()),
            };
            let alive = target.alive().await;
            let figures = outcome.and_then(|r| {
                Ok(ScaleFigures {
                    rss_before_kib: field(&r, "rss_kib_before")?,
                    rss_after_kib: field(&r, "rss_kib_after")?,
                    hwm_kib: field(&r, "hwm_kib")?,
                    park_secs: field(&r, "park_secs")?,
                    nodes: field(&r, "nodes")?,
                    park_requests: field(&r, "park_requests")?,
                    drain_secs: field(&r, "drain_secs")?,
                    drain_requests: field(&r, "drain_requests")?,
                    drain_watches: field(&r, "drain_watches")?,
                    server_alive: alive,
                })
            });
            match &figures {
                Ok(f) => println!(
                    "{label:<28} {k:>6} {:>9.1} {:>6.1} KB {:>9.1} {:>8.2} {:>7.0} {:>8.2} {:>8.2} {:>9.0} {:>6}",
                    f.rss_after_kib / 1024.0,
                    (f.rss_after_kib - f.rss_before_kib) / k as f64,
                    f.hwm_kib / 1024.0,
                    f.park_secs,
                    f.nodes,
                    f.park_requests / k as f64,
                    f.drain_secs,
                    k as f64 / f.drain_secs,
                    if alive { "alive" } else { "DIED" }
                ),
                Err(reason) => println!(
                    "{label:<28} {k:>6} n/a ({reason}); server {}",
                    if alive { "alive" } else { "DIED" }
                ),
            }
            match &figures {
                // The readers are granted together: one hand-off in all.
                Ok(_) if k > DRAIN_UP_TO => println!(
                    "{:<28} {:>6} (more than {} waiters: cancelled, not drained; drain s = the time to cancel them all)",
                    "", "", DRAIN_UP_TO
                ),
                Ok(f) if variant == "readers" => println!(
                    "{:<28} {:>6} drain: {:.0} requests and {:.0} watch notifications in all",
                    "", "", f.drain_requests, f.drain_watches
                ),
                Ok(f) => println!(
                    "{:<28} {:>6} drain: {:.2} requests and {:.2} watch notifications per hand-off",
                    "",
                    "",
                    f.drain_requests / (k as f64 + 1.0),
                    f.drain_watches / (k as f64 + 1.0)
                ),
                Err(_) => {}
            }
            if !alive {
                let why = target
                    .server
                    .as_ref()
                    .map(|s| s.log_tail())
                    .unwrap_or_else(|| "no answer to ruok".to_owned());
                println!("{:<28} {:>6} server died: {why}", "", "");
                skip = Some(format!("the server died at K = {k}"));
                if target.server.is_some() {
                    match tokio::task::spawn_blocking(Target::start_own).await {
                        Ok(Ok(fresh)) => {
                            println!(
                                "{:<28} {:>6} (a fresh server was started for what follows)",
                                "", ""
                            );
                            *target = fresh;
                        }
                        Ok(Err(err)) => {
                            println!("cannot restart the server: {err}");
                            return;
                        }
                        Err(err) => {
                            println!("cannot restart the server: {err}");
                            return;
                        }
                    }
                }
            } else if figures.is_err() {
                skip = Some(format!("K = {k} failed"));
            }
            findings.scale.push((
                k,
                label,
                figures.map(|mut f| {
                    f.server_alive = alive;
                    f
                }),
            ));
        }
    }
    peers_memory(config, target, root, java, python).await;
}

/// RSS per parked waiter of the peers, at the smallest K, each in a fresh
/// process (one thread per waiter: that is how they wait).
async fn peers_memory(
    config: &Config,
    target: &Target,
    root: &str,
    java: &Measured<PeerSetup>,
    python: &Measured<PeerSetup>,
) {
    let Some(&k) = config.scale.first() else {
        return;
    };
    println!();
    println!(
        "peers, K = {k} waiters over {} sessions, a thread each (RSS growth of a fresh process):",
        config.scale_sessions
    );
    for (label, setup, dir) in [
        ("Apache Curator InterProcessMutex", java, "curator"),
        ("kazoo Lock", python, "kazoo"),
    ] {
        let path = format!("{root}/scale-peers/{dir}");
        let (sessions, count) = (config.scale_sessions.to_string(), k.to_string());
        let args = ["memory", target.connect.as_str(), &path, &sessions, &count];
        settle().await;
        let result = match setup {
            Ok(setup) => setup.run_once(&args, config.limit()).await,
            Err(reason) => Err(reason.clone()),
        };
        match result.and_then(|r| {
            Ok((
                field::<f64>(&r, "rss_kib_before")?,
                field::<f64>(&r, "rss_kib_after")?,
            ))
        }) {
            Ok((before, after)) => println!(
                "  {label:<34} RSS {:.1} MiB parked, {:.1} KB per waiter",
                after / 1024.0,
                (after - before) / k as f64
            ),
            Err(reason) => println!("  {label:<34} n/a ({reason})"),
        }
    }
}
