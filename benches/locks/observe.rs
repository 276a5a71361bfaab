//! The observe workload (issue 25): how long after a leader's loss the
//! election's observers report the new leader, set against the time the
//! participants themselves take to fail over, and what a change of leader
//! costs each observer session.
//!
//! P participants (zk-curator `LeaderLatch`, a session each) take part in
//! one election; N observers (`LeaderObserver::changes()`, one stream each)
//! follow it from S sessions of their own, the observers spread over them
//! evenly (observer i on session i mod S). Every session, participant or
//! observer, reaches the server through a counting proxy of its own
//! (`zk_curator_testing::FaultProxy`). Each change:
//!
//! 1. the leader is found, the other participants wait in
//!    `await_leadership`, and every observer has reported that leader;
//! 2. the leader is lost the way the failover workload loses it
//!    (`failover.rs`): its proxy stops forwarding either way, and this
//!    program closes its session on the server through a second connection
//!    (`close_granted_session`); t0 is taken just before that close;
//! 3. failover = t0 until the first other participant's `await_leadership`
//!    returns; an observer's report = t0 until its stream yields the new
//!    leader (the participant that took over, by session). Both are read
//!    on the wall clock in this one process;
//! 4. the old leader's proxy forwards again and the change is over once it
//!    has queued again (the server's ephemeral node and watch counts back
//!    to before, as in the failover workload). What each observer session's
//!    proxy carried over the whole change is its cost: watch notifications
//!    (replies with xid -1), listings (`getChildren`, `getChildren2`), data
//!    reads (`getData`) and any other request.
//!
//! ZooKeeper keeps one watch per node and session, so however many streams
//! watch the leader's node through one session, the leader's loss sends
//! that session one notification. What the streams then send is the
//! library's business: the table shows, per session, whether a change
//! costs one listing and one read per session or one per observer.

use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use tokio::sync::mpsc;
use zk_curator::{Framework, LeaderObserver, Observation};
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::{FaultProxy, Traffic};

use super::contenders::Contender;
use super::failover::{
    kill_leader, leader_grant, start_proxies, whole_again, Election, Killed, KILL_LIMIT,
    NEXT_LIMIT, NOTIFICATION_XID, WHOLE_WITHOUT_MNTR,
};
use super::findings::Findings;
use super::limits::{within, BoxError, Measured, Scoped, CLOSE_LIMIT};
use super::mntr::{counters, first_host};
use super::options::Config;
use super::reps::settle;
use super::sessions::{framework, Tune};
use super::stats::Spread;
use super::target::Target;

/// Waiting for every observer to report the leader before a loss.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(30);
/// Observer sessions listed one by one in the cost table.
const SESSION_ROWS: usize = 8;

/// What an observer last reported, reduced to what the workload compares.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// A leader, by its session.
    Leader(i64),
    NoLeader,
    Unknown,
}

impl Seen {
    fn of(observation: &Observation) -> Seen {
        match observation {
            Observation::Leader(leader) => Seen::Leader(leader.session),
            Observation::NoLeader => Seen::NoLeader,
            // `Observation` may grow; anything else counts as not knowing.
            _ => Seen::Unknown,
        }
    }
}

/// One report of one observer's stream: which observer, what, and when.
struct Report {
    observer: usize,
    seen: Seen,
    at: SystemTime,
}

/// The observers' streams, each consumed by a task of its own that sends
/// every item it yields, stamped as soon as it is yielded.
struct Observers {
    /// The observer sessions.
    frameworks: Vec<Framework>,
    /// The tasks, aborted when dropped.
    tasks: Scoped<()>,
    reports: mpsc::UnboundedReceiver<Report>,
    /// The last report of each observer.
    latest: Vec<Option<Seen>>,
}

impl Observers {
    /// `count` observers of `path`, observer i on `frameworks[i % len]`.
    fn start(frameworks: Vec<Framework>, path: &str, count: usize) -> Result<Observers, BoxError> {
        if frameworks.is_empty() {
            return Err("no observer session".into());
        }
        let (report, reports) = mpsc::unbounded_channel();
        let mut tasks = Scoped(Vec::with_capacity(count));
        for i in 0..count {
            let observer = LeaderObserver::new(frameworks[i % frameworks.len()].clone(), path)?;
            let report = report.clone();
            tasks.0.push(tokio::spawn(async move {
                let mut changes = std::pin::pin!(observer.changes());
                while let Some(observation) = changes.next().await {
                    let at = SystemTime::now();
                    let seen = Seen::of(&observation);
                    if report
                        .send(Report {
                            observer: i,
                            seen,
                            at,
                        })
                        .is_err()
                    {
                        return;
                    }
                }
            }));
        }
        Ok(Observers {
            frameworks,
            tasks,
            reports,
            latest: vec![None; count],
        })
    }

    /// Takes in every report sent so far.
    fn take_sent(&mut self) {
        while let Ok(report) = self.reports.try_recv() {
            self.note(&report);
        }
    }

    fn note(&mut self, report: &Report) {
        if let Some(slot) = self.latest.get_mut(report.observer) {
            *slot = Some(report.seen.clone());
        }
    }

    /// Waits until every observer's last report is `want`, for at most
    /// `limit`.
    async fn catch_up(&mut self, want: &Seen, limit: Duration) -> Measured<()> {
        let until = Instant::now() + limit;
        loop {
            self.take_sent();
            let behind = self
                .latest
                .iter()
                .filter(|seen| seen.as_ref() != Some(want))
                .count();
            if behind == 0 {
                return Ok(());
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "{behind} of {} observers had not reported {want:?} after {limit:?}",
                    self.latest.len()
                ));
            }
            match tokio::time::timeout(left, self.reports.recv()).await {
                Ok(Some(report)) => self.note(&report),
                Ok(None) => return Err("every observer's stream ended".to_owned()),
                Err(_) => {}
            }
        }
    }

    /// When each observer first reported `want` at or after `since`, waiting
    /// at most `limit` for all of them; also how many other reports came in
    /// between (a leader other than `want`, nobody, or unknown).
    async fn reported(
        &mut self,
        want: &Seen,
        since: SystemTime,
        limit: Duration,
    ) -> Measured<(Vec<SystemTime>, usize)> {
        let until = Instant::now() + limit;
        let mut first: Vec<Option<SystemTime>> = vec![None; self.latest.len()];
        let mut detours = 0;
        loop {
            let missing = first.iter().filter(|at| at.is_none()).count();
            if missing == 0 {
                return Ok((first.into_iter().flatten().collect(), detours));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "{missing} of {} observers did not report the new leader within {limit:?}",
                    first.len()
                ));
            }
            let report = match tokio::time::timeout(left, self.reports.recv()).await {
                Ok(Some(report)) => report,
                Ok(None) => return Err("every observer's stream ended".to_owned()),
                Err(_) => continue,
            };
            self.note(&report);
            if report.at < since {
                continue;
            }
            match first.get_mut(report.observer) {
                Some(slot @ None) if &report.seen == want => *slot = Some(report.at),
                Some(None) => detours += 1,
                _ => {}
            }
        }
    }

    async fn stop(self) {
        // The streams go first, then their sessions.
        drop(self.tasks);
        let closing = self.frameworks.into_iter().map(|fw| async move {
            let _ = tokio::time::timeout(CLOSE_LIMIT, fw.close()).await;
        });
        futures::future::join_all(closing).await;
    }
}

/// What one observer session's proxy carried over one change.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    notifications: usize,
    listings: usize,
    reads: usize,
    other: usize,
}

impl Counts {
    fn of(proxy: &FaultProxy) -> Counts {
        let mut counts = Counts::default();
        for frame in proxy.traffic() {
            match frame {
                Traffic::Reply { xid, .. } if xid == NOTIFICATION_XID => counts.notifications += 1,
                Traffic::Reply { .. } => {}
                Traffic::Request { opcode, .. } => match opcode {
                    opcode::GET_CHILDREN | opcode::GET_CHILDREN2 => counts.listings += 1,
                    opcode::GET_DATA => counts.reads += 1,
                    _ => counts.other += 1,
                },
            }
        }
        counts
    }

    fn add(&mut self, other: &Counts) {
        self.notifications += other.notifications;
        self.listings += other.listings;
        self.reads += other.reads;
        self.other += other.other;
    }
}

/// One change of leader.
struct Change {
    failover_ms: f64,
    /// Each observer's report time, sorted.
    observers_ms: Vec<f64>,
    /// Reports other than the new leader before it (should be none).
    detours: usize,
    /// Per observer session.
    counts: Vec<Counts>,
}

impl Change {
    fn observers_median(&self) -> Option<f64> {
        Spread::of(&self.observers_ms).map(|s| s.median)
    }

    fn observers_max(&self) -> Option<f64> {
        self.observers_ms.last().copied()
    }
}

/// The proxies of one run: the participants' and the observer sessions'.
struct Proxies {
    participants: Vec<FaultProxy>,
    observers: Vec<FaultProxy>,
}

async fn change(
    election: &mut Election<'_>,
    observers: &mut Observers,
    target: &Target,
    proxies: &Proxies,
) -> Measured<Change> {
    let armed = election.arm().await?;
    let old_leader = Seen::Leader(armed.session_id);
    let leader_proxy = proxies
        .participants
        .get(armed.leader)
        .ok_or("the leader has no proxy")?;
    let grant = leader_grant(std::slice::from_ref(leader_proxy), &armed)?;
    observers.catch_up(&old_leader, CATCH_UP_LIMIT).await?;
    // The waits park, and the previous change's tail is over.
    settle().await;
    observers.take_sent();
    let addr = target.four_letter.as_deref();
    let before = counters(addr).await;
    for proxy in proxies.participants.iter().chain(&proxies.observers) {
        proxy.clear_traffic();
    }
    let Killed {
        next,
        led_at,
        started,
        killed_at,
    } = kill_leader(
        election,
        armed,
        target,
        std::slice::from_ref(leader_proxy),
        &grant,
    )
    .await?;
    let new_session = match election {
        Election::Rust(Some(rust)) => {
            let fw = rust.frameworks.get(next).ok_or("no such participant")?;
            within(KILL_LIMIT, fw.session())
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?
                .id()
        }
        _ => return Err("not a zk-curator election".to_owned()),
    };
    let (reported, detours) = observers
        .reported(&Seen::Leader(new_session), killed_at, NEXT_LIMIT)
        .await?;
    let since = |at: SystemTime| {
        at.duration_since(killed_at)
            .map(|d| d.as_secs_f64() * 1e3)
            .map_err(|_| "the wall clock went back during a change".to_owned())
    };
    let failover_ms = since(led_at)?;
    let mut observers_ms = reported
        .into_iter()
        .map(since)
        .collect::<Result<Vec<f64>, String>>()?;
    observers_ms.sort_by(f64::total_cmp);
    match before {
        Some(before) => {
            whole_again(addr, &before, started).await?;
        }
        None => tokio::time::sleep(WHOLE_WITHOUT_MNTR).await,
    }
    Ok(Change {
        failover_ms,
        observers_ms,
        detours,
        counts: proxies.observers.iter().map(Counts::of).collect(),
    })
}

/// One rep: the median over its changes of each figure.
struct RepFigures {
    failover_ms: f64,
    observers_median_ms: f64,
    observers_max_ms: f64,
    median_ratio: f64,
    max_ratio: f64,
}

impl RepFigures {
    fn of(changes: &[Change]) -> Option<RepFigures> {
        let median = |f: &dyn Fn(&Change) -> Option<f64>| {
            let values: Vec<f64> = changes.iter().filter_map(f).collect();
            Spread::of(&values).map(|s| s.median)
        };
        Some(RepFigures {
            failover_ms: median(&|c| Some(c.failover_ms))?,
            observers_median_ms: median(&|c| c.observers_median())?,
            observers_max_ms: median(&|c| c.observers_max())?,
            median_ratio: median(&|c| Some(c.observers_median()? / c.failover_ms))?,
            max_ratio: median(&|c| Some(c.observers_max()? / c.failover_ms))?,
        })
    }
}

/// How many of `count` observers are on session `session` (observer i on
/// session i mod `sessions`).
fn observers_on(session: usize, count: usize, sessions: usize) -> usize {
    (0..count).filter(|i| i % sessions == session).count()
}

pub(crate) async fn observe_phase(
    config: &Config,
    target: &Target,
    root: &str,
    _contenders: &mut [Contender],
    _idle: f64,
    _findings: &mut Findings,
) {
    let p = config.observe_participants;
    let n = config.observers;
    let s = config.observer_sessions.min(n).max(1);
    println!();
    println!(
        "== Observe: {n} LeaderObserver streams over {s} sessions follow ONE election of P = {p} LeaderLatch participants (a session each); {} changes a rep ==",
        config.observe_failovers
    );
    println!("   each change: the leader dies as in the failover workload (its proxy stops forwarding, its session is");
    println!("   closed on the server); t0 = just before that close. failover = t0 until another participant's");
    println!("   await_leadership returns; report = t0 until an observer's changes() stream yields the new leader");
    println!("   (wall clock, one process). Counts: what each observer session's proxy carried over the change");
    println!("   (notifications = watch events received; listings = getChildren(2) sent; reads = getData sent)");
    let Some(upstream) = first_host(&target.connect) else {
        println!("n/a (no host in {})", target.connect);
        return;
    };
    let (proxy_runtime, mut participants) = match start_proxies(upstream, p + s).await {
        Ok(started) => started,
        Err(err) => {
            println!("n/a (proxies: {err})");
            return;
        }
    };
    let observer_proxies = participants.split_off(p);
    let proxies = Proxies {
        participants,
        observers: observer_proxies,
    };
    let path = format!("{root}/observe/election");
    let mut election = Election::Rust(None);
    let connects: Vec<String> = proxies
        .participants
        .iter()
        .map(FaultProxy::connect_string)
        .collect();
    let started = async {
        election.start(&connects, &path).await?;
        let mut frameworks = Vec::with_capacity(s);
        for proxy in &proxies.observers {
            frameworks.push(
                framework(&proxy.connect_string(), Tune::Plain)
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        Observers::start(frameworks, &path, n).map_err(|e| e.to_string())
    }
    .await;
    let mut observers = match started {
        Ok(observers) => Some(observers),
        Err(reason) => {
            println!("n/a (did not start: {reason})");
            None
        }
    };
    if let Some(observers) = observers.as_mut() {
        run(config, target, &mut election, observers, &proxies, s).await;
    }
    if let Some(observers) = observers {
        observers.stop().await;
    }
    election.stop().await;
    drop(proxies);
    proxy_runtime.shutdown_background();
}

async fn run(
    config: &Config,
    target: &Target,
    election: &mut Election<'_>,
    observers: &mut Observers,
    proxies: &Proxies,
    sessions: usize,
) {
    let n = config.observers;
    let warm = async {
        let mut times = Vec::new();
        for _ in 0..config.observe_warmup_kills {
            times.push(change(election, observers, target, proxies).await?);
        }
        Ok::<_, String>(times)
    }
    .await;
    match warm {
        Ok(changes) => println!(
            "warm-up: {} unmeasured change(s): failover {}; observers' slowest {}",
            changes.len(),
            changes
                .iter()
                .map(|c| format!("{:.1} ms", c.failover_ms))
                .collect::<Vec<_>>()
                .join(", "),
            changes
                .iter()
                .map(|c| c
                    .observers_max()
                    .map_or_else(|| "n/a".to_owned(), |m| format!("{m:.1} ms")))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Err(reason) => {
            println!("n/a (warm-up: {reason})");
            return;
        }
    }
    let mut reps: Vec<Measured<RepFigures>> = Vec::with_capacity(config.reps);
    let mut totals = vec![Counts::default(); sessions];
    let mut measured = 0usize;
    let mut detours = 0usize;
    let mut worst_ms: Option<f64> = None;
    for _ in 0..config.reps {
        let mut changes = Vec::with_capacity(config.observe_failovers);
        let mut failed = None;
        for _ in 0..config.observe_failovers {
            match change(election, observers, target, proxies).await {
                Ok(c) => changes.push(c),
                Err(reason) => {
                    failed = Some(reason);
                    break;
                }
            }
        }
        for c in &changes {
            for (total, counts) in totals.iter_mut().zip(&c.counts) {
                total.add(counts);
            }
            measured += 1;
            detours += c.detours;
            if let Some(max) = c.observers_max() {
                worst_ms = Some(worst_ms.map_or(max, |w| w.max(max)));
            }
        }
        reps.push(match failed {
            Some(reason) => Err(reason),
            None => RepFigures::of(&changes).ok_or_else(|| "no change".to_owned()),
        });
    }

    let spread = |f: &dyn Fn(&RepFigures) -> f64| {
        let values: Vec<f64> = reps.iter().filter_map(|r| r.as_ref().ok()).map(f).collect();
        Spread::of(&values)
    };
    let show = |label: &str, value: Option<Spread>, unit: &str| match value {
        Some(v) => println!(
            "  {label:<44} {:>9.2} {unit:<2} {:>17}",
            v.median,
            v.range(2)
        ),
        None => println!("  {label:<44} {:>9}", "n/a"),
    };
    println!(
        "  {:<44} {:>9}    {:>17}",
        "(median over the reps of each rep's median)", "median", "min–max"
    );
    show("participants' failover", spread(&|r| r.failover_ms), "ms");
    show(
        &format!("observers' median report (of {n})"),
        spread(&|r| r.observers_median_ms),
        "ms",
    );
    show(
        &format!("observers' slowest report (max of {n})"),
        spread(&|r| r.observers_max_ms),
        "ms",
    );
    show(
        "observers' median / failover",
        spread(&|r| r.median_ratio),
        "x",
    );
    show(
        "observers' slowest / failover",
        spread(&|r| r.max_ratio),
        "x",
    );
    if let Some(worst) = worst_ms {
        println!("  slowest report of all {measured} measured changes: {worst:.1} ms");
    }
    let failures: Vec<&String> = reps.iter().filter_map(|r| r.as_ref().err()).collect();
    if let Some(first) = failures.first() {
        println!(
            "  {} of {} reps failed: {first}",
            failures.len(),
            reps.len()
        );
    }
    if detours > 0 {
        println!(
            "  note: {detours} report(s) other than the new leader came first (nobody, unknown, or another leader)"
        );
    }
    if measured == 0 {
        return;
    }
    let m = measured as f64;
    println!("per change of leader, through each observer session's proxy (mean over {measured} changes):");
    println!(
        "  {:<12} {:>9} {:>14} {:>9} {:>7} {:>15}",
        "session", "observers", "notifications", "listings", "reads", "other requests"
    );
    let mut all = Counts::default();
    for total in &totals {
        all.add(total);
    }
    // A row per session up to `SESSION_ROWS`; beyond that, the range over
    // the sessions of each column.
    if sessions <= SESSION_ROWS {
        for (i, total) in totals.iter().enumerate() {
            println!(
                "  {:<12} {:>9} {:>14.2} {:>9.2} {:>7.2} {:>15.2}",
                format!("{}", i + 1),
                observers_on(i, n, sessions),
                total.notifications as f64 / m,
                total.listings as f64 / m,
                total.reads as f64 / m,
                total.other as f64 / m
            );
        }
    } else {
        let range = |f: &dyn Fn(&Counts) -> usize| {
            let values: Vec<f64> = totals.iter().map(|t| f(t) as f64 / m).collect();
            Spread::of(&values).map_or_else(|| "n/a".to_owned(), |s| s.range(2))
        };
        let on: Vec<f64> = (0..sessions)
            .map(|i| observers_on(i, n, sessions) as f64)
            .collect();
        println!(
            "  {:<12} {:>9} {:>14} {:>9} {:>7} {:>15}   (min–max over the {sessions} sessions)",
            "each",
            Spread::of(&on).map_or_else(|| "n/a".to_owned(), |s| s.range(0)),
            range(&|t| t.notifications),
            range(&|t| t.listings),
            range(&|t| t.reads),
            range(&|t| t.other)
        );
    }
    println!(
        "  {:<12} {:>9} {:>14.2} {:>9.2} {:>7.2} {:>15.2}",
        "all",
        n,
        all.notifications as f64 / m,
        all.listings as f64 / m,
        all.reads as f64 / m,
        all.other as f64 / m
    );
    for (label, over) in [("per session", sessions), ("per observer", n)] {
        let per = |count: usize| count as f64 / m / over as f64;
        println!(
            "  {:<12} {:>9} {:>14.2} {:>9.2} {:>7.2} {:>15.2}",
            label,
            "",
            per(all.notifications),
            per(all.listings),
            per(all.reads),
            per(all.other)
        );
    }
    println!(
        "  (the contract: 1 notification, listing and read per observer SESSION and change, not per observer)"
    );
}
