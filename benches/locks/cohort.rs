//! Cohort hand-off (issue 24): the curve over `max_passes` and the other
//! session's wait.
//!
//! The tasks workload has a "zk-curator (cohort, 16/50 ms)" row beside plain
//! zk-curator and Curator (same server, same run, reps interleaved). This
//! module adds what only the cohort has:
//!
//! * **The curve.** T tasks on one session (one framework with
//!   `cohort(CohortPolicy::new(max_passes, 1 s))`, one `InterProcessMutex`
//!   shared by the tasks), one path, for `max_passes` in {1, 4, 16, 64,
//!   256}, and the default policy (16 passes or 50 ms) beside them. The
//!   1 s `max_hold` is there not to bind: the "passes/run" column shows
//!   which bound ended the runs (equal to `max_passes` when the passes did).
//!   Each point is a framework (session) of its own, kept for the whole
//!   curve; the points take turns in a rotating order, as the contenders do.
//! * **The other session's wait.** The same T tasks, and on a second
//!   framework (another session, no cohort, on a tokio runtime of its own
//!   so that it is not scheduled behind the T tasks, as another process
//!   would not be) ONE task looping acquire ->
//!   release on the same path: its longest wait (from calling `lock()` to
//!   it returning) and the cohort passes the first framework made during
//!   that wait (its `lock_passes()` before and after). A run ends after
//!   `max_passes` passes, and the outsider's node is then next; its wait
//!   also spans its create's round trip, during which the first framework
//!   may begin one more run ahead of it.

use std::time::{Duration, Instant};

use zk_curator::{CohortPolicy, Framework, InterProcessMutex};

use super::apart::Apart;
use super::figures::per;
use super::findings::{CohortPoint, Findings};
use super::in_process::{contended_rust, LockHandle};
use super::limits::{bounded, within, BoxError, Measured, ACQUIRE_LIMIT, CLOSE_LIMIT};
use super::mntr::{counters, Traffic};
use super::options::{Config, LONG_HOLD};
use super::reps::{rotation, settle};
use super::sessions::{framework, Tune};
use super::stats::{ratio, Spread};
use super::table::opt;
use super::target::Target;

/// One rep of one point, the T tasks alone.
struct Alone {
    per_s: f64,
    requests: Option<f64>,
    fsyncs: Option<f64>,
    /// Passes per hand-off, and per run (a run: a node's holds from its
    /// create to its delete).
    passes: f64,
    per_run: f64,
    gap_ms: Option<(f64, f64)>,
}

/// The reps of one point: alone, and with the other session's task.
type PointReps = (Vec<Measured<Alone>>, Vec<Measured<Shared>>);

/// One rep of one point, with the other session's task.
struct Shared {
    per_s: f64,
    outsider_holds: u64,
    /// Longest wait (ms) and the passes during it.
    longest: (f64, u64),
    most_passes: u64,
    /// Waits during which more than `max_passes` passes were made.
    over: u64,
}

pub(crate) async fn curve(
    config: &Config,
    target: &Target,
    root: &str,
    idle: f64,
    findings: &mut Findings,
) {
    let (t, window) = (config.tasks, config.curve_window);
    println!();
    println!(
        "Cohort curve: {t} tasks on ONE session (cohort on), one path, {:.1} s a rep; max_hold {} s (does not bind)",
        window.as_secs_f64(),
        LONG_HOLD.as_secs()
    );
    println!("   except the last row, the default policy (16 passes or 50 ms); each point a session of its own,");
    println!("   points interleaved in a rotating order; then the same with a second session's task contending");
    let addr = target.four_letter.as_deref();
    let mut frameworks = Vec::new();
    for policy in &config.cohort_curve {
        match framework(&target.connect, Tune::Cohort(*policy)).await {
            Ok(fw) => frameworks.push(fw),
            Err(err) => {
                println!("n/a (connect: {err})");
                return close(frameworks).await;
            }
        }
    }
    let outsider = match Outsider::start(&target.connect).await {
        Ok(outsider) => outsider,
        Err(err) => {
            println!("n/a (connect: {err})");
            return close(frameworks).await;
        }
    };
    let paths: Vec<String> = (0..frameworks.len())
        .map(|i| format!("{root}/cohort-curve/p{i}"))
        .collect();
    if !config.quick {
        // A short unmeasured run on every point's new session.
        for (fw, path) in frameworks.iter().zip(&paths) {
            let _ = alone(fw, path, t, Duration::from_millis(500), config, addr, idle).await;
        }
    }
    let count = frameworks.len();
    let mut reps: Vec<PointReps> = (0..count).map(|_| (Vec::new(), Vec::new())).collect();
    for rep in 0..config.reps {
        for i in rotation(rep, count) {
            let (fw, path) = (&frameworks[i], &paths[i]);
            reps[i]
                .0
                .push(alone(fw, path, t, window, config, addr, idle).await);
            reps[i].1.push(
                shared(
                    config.cohort_curve[i],
                    fw,
                    &outsider,
                    path,
                    t,
                    window,
                    config,
                )
                .await,
            );
        }
    }
    println!(
        "{:>10} {:>8} {:>11} {:>17} {:>8} {:>10} {:>7} {:>7} {:>10} {:>8} {:>8}  note",
        "max_passes",
        "max_hold",
        "hand-offs/s",
        "min–max",
        "req",
        "5/p + 0.1",
        "fsyncs",
        "passes",
        "passes/run",
        "p50 ms",
        "p99 ms"
    );
    let mut points = Vec::new();
    for (i, policy) in config.cohort_curve.iter().enumerate() {
        let ok: Vec<&Alone> = reps[i].0.iter().filter_map(|r| r.as_ref().ok()).collect();
        let of = |f: &dyn Fn(&Alone) -> Option<f64>| {
            Spread::of(&ok.iter().filter_map(|a| f(a)).collect::<Vec<_>>())
        };
        let rate = of(&|a| Some(a.per_s));
        let requests = of(&|a| a.requests);
        let failed = reps[i].0.iter().filter_map(|r| r.as_ref().err()).next();
        println!(
            "{:>10} {:>8} {:>11} {:>17} {:>8} {:>10.2} {:>7} {:>7} {:>10} {:>8} {:>8}  {}",
            policy.max_passes,
            hold(policy.max_hold),
            rate.map_or_else(|| "n/a".to_owned(), |r| format!("{:.0}", r.median)),
            rate.map_or_else(String::new, |r| r.range(0)),
            opt(requests, 3),
            5.0 / policy.max_passes as f64 + 0.1,
            opt(of(&|a| a.fsyncs), 3),
            opt(of(&|a| Some(a.passes)), 3),
            opt(of(&|a| Some(a.per_run)), 1),
            opt(of(&|a| a.gap_ms.map(|g| g.0)), 3),
            opt(of(&|a| a.gap_ms.map(|g| g.1)), 3),
            failed
                .map(|f| format!("a rep failed: {f}"))
                .unwrap_or_default()
        );
        let shared: Vec<&Shared> = reps[i].1.iter().filter_map(|r| r.as_ref().ok()).collect();
        points.push(CohortPoint {
            policy: *policy,
            rate,
            requests,
            longest_wait: shared
                .iter()
                .map(|s| s.longest)
                .max_by(|a, b| a.0.total_cmp(&b.0)),
            most_passes: shared.iter().map(|s| s.most_passes).max(),
        });
    }
    println!("(req, fsyncs = the server's requests and log fsyncs per hand-off; 5/p + 0.1 = issue 24's bound on req;");
    println!(" passes = passes per hand-off; passes/run = passes per node (a run ends at max_passes or max_hold);");
    println!(
        " p50/p99 = hand-off latency, from the start of a release to the next acquire returning)"
    );

    println!();
    println!("With ONE task of a second session (no cohort) looping acquire -> release on the same path:");
    println!(
        "{:>10} {:>8} {:>11} {:>15} {:>16} {:>13} {:>16}  note",
        "max_passes",
        "max_hold",
        "hand-offs/s",
        "outsider holds",
        "longest wait ms",
        "passes in it",
        "most in a wait"
    );
    for (i, point) in points.iter().enumerate() {
        let ok: Vec<&Shared> = reps[i].1.iter().filter_map(|r| r.as_ref().ok()).collect();
        let rate = Spread::of(&ok.iter().map(|s| s.per_s).collect::<Vec<_>>());
        let holds: u64 = ok.iter().map(|s| s.outsider_holds).sum();
        let over: u64 = ok.iter().map(|s| s.over).sum();
        let failed = reps[i].1.iter().filter_map(|r| r.as_ref().err()).next();
        let within = match point.most_passes {
            Some(m) if m <= point.policy.max_passes as u64 => "within max_passes".to_owned(),
            Some(_) => format!("{over} of {holds} waits saw more than max_passes"),
            None => String::new(),
        };
        println!(
            "{:>10} {:>8} {:>11} {:>15} {:>16} {:>13} {:>16}  {}{}",
            point.policy.max_passes,
            hold(point.policy.max_hold),
            rate.map_or_else(|| "n/a".to_owned(), |r| format!("{:.0}", r.median)),
            holds,
            point
                .longest_wait
                .map_or_else(|| "n/a".to_owned(), |w| format!("{:.2}", w.0)),
            point
                .longest_wait
                .map_or_else(|| "n/a".to_owned(), |w| w.1.to_string()),
            point
                .most_passes
                .map_or_else(|| "n/a".to_owned(), |m| m.to_string()),
            within,
            failed
                .map(|f| format!(" a rep failed: {f}"))
                .unwrap_or_default()
        );
    }
    println!("(outsider holds = its holds over all reps; longest wait = the longest of its lock() calls over all reps,");
    println!(" and the first session's passes during it; most in a wait = the most passes during any one of its waits.");
    println!(" A wait spans the outsider's create: a run the first session begins before that create arrives comes first)");
    findings.cohort_curve = points;
    outsider.close().await;
    close(frameworks).await;
}

/// The other session: a framework on a runtime of its own ([`Apart`]), so
/// that its task and its connection are not scheduled behind the first
/// session's tasks on this runtime's two workers, as another process's
/// would not be.
struct Outsider {
    apart: Apart,
    framework: Framework,
}

impl Outsider {
    async fn start(connect: &str) -> Result<Outsider, BoxError> {
        let apart = Apart::new("outsider")?;
        let connect = connect.to_owned();
        let framework = apart
            .run(async move { framework(&connect, Tune::Plain).await })
            .await??;
        Ok(Outsider { apart, framework })
    }

    async fn close(self) {
        let fw = self.framework.clone();
        let _ = self
            .apart
            .run(async move { tokio::time::timeout(CLOSE_LIMIT, fw.close()).await })
            .await;
    }
}

fn hold(max_hold: Duration) -> String {
    if max_hold >= Duration::from_secs(1) {
        format!("{} s", max_hold.as_secs())
    } else {
        format!("{} ms", max_hold.as_millis())
    }
}

async fn close(frameworks: Vec<Framework>) {
    let closing = frameworks.into_iter().map(|fw| async move {
        let _ = tokio::time::timeout(CLOSE_LIMIT, fw.close()).await;
    });
    futures::future::join_all(closing).await;
}

/// T tasks on `fw` alone, with the server's counts read around them.
async fn alone(
    fw: &Framework,
    path: &str,
    tasks: usize,
    window: Duration,
    config: &Config,
    addr: Option<&str>,
    idle: f64,
) -> Measured<Alone> {
    let mutex = InterProcessMutex::new(fw.clone(), path).map_err(|e| e.to_string())?;
    settle().await;
    let before = counters(addr).await;
    let passes = fw.metrics().lock_passes();
    let started = Instant::now();
    let result = bounded(
        config.limit(),
        contended_rust(vec![LockHandle::Mutex(mutex)], tasks, window),
    )
    .await?;
    let elapsed = started.elapsed();
    let after = counters(addr).await;
    let passes = (fw.metrics().lock_passes() - passes) as f64;
    let traffic = Traffic::between(before, after, elapsed, idle);
    let releases = result.releases as f64;
    // Every release either passes the node or deletes it: the deletes are
    // the runs.
    let runs = (releases - passes).max(1.0);
    Ok(Alone {
        per_s: result.per_s,
        requests: per(traffic.map(|t| t.requests), releases),
        fsyncs: per(traffic.and_then(|t| t.fsyncs), releases),
        passes: passes / releases.max(1.0),
        per_run: passes / runs,
        gap_ms: result.gap_ms,
    })
}

/// T tasks on `fw`, and one task of `outsider` (on its own runtime) on the
/// same path.
async fn shared(
    policy: CohortPolicy,
    fw: &Framework,
    outsider: &Outsider,
    path: &str,
    tasks: usize,
    window: Duration,
    config: &Config,
) -> Measured<Shared> {
    let mutex = InterProcessMutex::new(fw.clone(), path).map_err(|e| e.to_string())?;
    let other =
        InterProcessMutex::new(outsider.framework.clone(), path).map_err(|e| e.to_string())?;
    settle().await;
    let deadline = Instant::now() + window;
    let loop_fw = fw.clone();
    let max_passes = u64::from(policy.max_passes);
    let outsider_loop = outsider.apart.handle().spawn(async move {
        let (mut holds, mut longest, mut most, mut over) = (0u64, (0.0f64, 0u64), 0u64, 0u64);
        while Instant::now() < deadline {
            let passes = loop_fw.metrics().lock_passes();
            let t0 = Instant::now();
            let guard = within(ACQUIRE_LIMIT, other.lock()).await??;
            let waited = t0.elapsed().as_secs_f64() * 1e3;
            let during = loop_fw.metrics().lock_passes() - passes;
            holds += 1;
            most = most.max(during);
            over += u64::from(during > max_passes);
            if waited > longest.0 {
                longest = (waited, during);
            }
            within(ACQUIRE_LIMIT, guard.release()).await??;
        }
        Ok::<_, BoxError>((holds, longest, most, over))
    });
    let run = async {
        futures::try_join!(
            contended_rust(vec![LockHandle::Mutex(mutex)], tasks, window),
            async { outsider_loop.await? }
        )
    };
    let (result, (holds, longest, most, over)) = bounded(config.limit(), run).await?;
    Ok(Shared {
        per_s: result.per_s,
        outsider_holds: holds,
        longest,
        most_passes: most,
        over,
    })
}

/// Issue 24's targets, from the tasks workload and the curve.
pub(crate) fn print_targets(config: &Config, f: &Findings) {
    if f.cohort_row.is_none() && f.cohort_curve.is_empty() {
        return;
    }
    let verdict = |ok: Option<bool>| match ok {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "n/a",
    };
    if let Some(row) = f.cohort_row {
        let curator = f.tasks_curator;
        println!(
            "cohort (16 passes/50 ms), {} tasks on one session: {:.0} hand-offs/s = {} Curator's {} (target >= 20x): {}; {} requests/hand-off (target <= 5/16 + 0.1 = 0.41): {}; {} fsyncs/hand-off; hand-off p50 {} ms, p99 {} ms",
            config.tasks,
            row.rate.map_or(f64::NAN, |r| r.median),
            ratio(row.rate.as_ref(), curator.as_ref()),
            curator.map_or_else(|| "n/a".to_owned(), |c| format!("{:.0}", c.median)),
            verdict(row.rate.zip(curator).map(|(a, b)| a.median >= 20.0 * b.median)),
            opt(row.requests, 3),
            verdict(row.requests.map(|r| r.median <= 5.0 / 16.0 + 0.1)),
            opt(row.fsyncs, 3),
            opt(row.p50, 3),
            opt(row.p99, 3),
        );
    }
    for p in &f.cohort_curve {
        let bound = 5.0 / p.policy.max_passes as f64 + 0.1;
        println!(
            "cohort curve, max_passes {} (max_hold {}): {} hand-offs/s, {} requests/hand-off (target <= {bound:.2}): {}; other session's longest wait {} with {} passes in it, at most {} passes in one wait (max_passes {})",
            p.policy.max_passes,
            hold(p.policy.max_hold),
            p.rate.map_or_else(|| "n/a".to_owned(), |r| format!("{:.0}", r.median)),
            opt(p.requests, 3),
            verdict(p.requests.map(|r| r.median <= bound)),
            p.longest_wait.map_or_else(|| "n/a".to_owned(), |w| format!("{:.2} ms", w.0)),
            p.longest_wait.map_or_else(|| "n/a".to_owned(), |w| w.1.to_string()),
            p.most_passes.map_or_else(|| "n/a".to_owned(), |m| m.to_string()),
            p.policy.max_passes,
        );
    }
}
