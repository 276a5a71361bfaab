//! The bounds workload (issue 46, "Numbers"): what a hold bound costs and
//! how soon the next holder gets a lock whose holder is stuck.
//!
//! * **From the end of the bound to the next holder's grant.** Two sessions
//!   of zk-curator's row (frameworks A and B, so two processes as far as
//!   ZooKeeper can tell) on one path. In a *bounded* round A takes
//!   `lock_bounded(HoldBounds::new().silence(S))` and hands the guard to a
//!   task that blocks for good on a channel that never sends: it never says
//!   progress and never releases. B's `lock()` is started at once, and the
//!   round goes on only once B's node is among the participants before the
//!   bound passes (a round where it is not is left out and counted). The
//!   figure is B's grant (its `lock()` returning) minus the bound's end: the
//!   bound's own start (`Hold::last_progress()` of a hold that never said
//!   progress, taken at or just before `lock_bounded` returns) plus S. In an
//!   *ordinary* round A takes a plain `lock()`, B queues the same way, and
//!   A calls `release()` at its grant plus S: the figure is B's grant minus
//!   that call. The two kinds alternate round by round (which goes first
//!   alternates too), after unmeasured rounds of each, on the same two
//!   sessions. Goal (the issue's): no more than one ordinary hand-off
//!   beyond the bound, judged on the medians: p50(bound → grant) −
//!   p50(ordinary) ≤ p50(ordinary).
//! * **A hold given no bound behaves exactly as today.** Requests per
//!   uncontended acquire+release cycle (one session), per queued hand-off
//!   (two sessions, each hand-off to a waiter started 25 ms before the
//!   release) and per free-running hand-off (two sessions, one task each,
//!   one path: the contended workload's shape) for an unbounded mutex and
//!   for a bounded one whose bounds never pass (10 minutes of hold and of
//!   silence): the cycle's acquire is `lock_bounded(bounds)`, the
//!   hand-offs' mutexes have `set_hold_bounds(bounds)` and use `lock()`.
//!   Counted as every request count of the bench is (`mntr`, less the idle
//!   ping rate), the two variants interleaved in the same reps, the order
//!   alternating from rep to rep. Cycles are judged on their medians (the
//!   same within 0.05 request), hand-offs, slower and so with a larger
//!   share of the other sessions' pings, by the noise rule.
//!
//! * **Publication of progress** on the holder's node: see
//!   [`super::publication`].

use std::time::{Duration, Instant};

use zk_curator::{Bound, Framework, HoldBounds, InterProcessMutex, LockLoss};

use super::contenders::{Contender, ZK_CURATOR};
use super::figures::{per, Cycles, Handoffs};
use super::findings::Findings;
use super::in_process::{contended_rust, LockHandle};
use super::limits::{bounded, within, BoxError, Measured, ACQUIRE_LIMIT};
use super::mntr::counting;
use super::options::Config;
use super::reps::settle;
use super::stats::Spread;
use super::target::Target;

/// The silence bound of a bounded round.
const SILENCE: Duration = Duration::from_millis(200);
/// Bounds that never pass during a measurement (part 2).
const NEVER: Duration = Duration::from_secs(600);
/// How often a round looks whether the waiter has queued.
const POLL: Duration = Duration::from_millis(2);
/// How long a stuck holder's loss may take to show once the next holder
/// has the lock.
const LOSS_LIMIT: Duration = Duration::from_secs(5);

/// Measured rounds of each kind, and unmeasured ones of each before.
fn rounds(config: &Config) -> (usize, usize) {
    if config.quick {
        (20, 3)
    } else {
        (200, 10)
    }
}

/// The two kinds of round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The holder is stuck; its silence bound ends the hold.
    Bounded,
    /// The holder releases at its grant plus [`SILENCE`].
    Ordinary,
}

/// One round's outcome.
struct Round {
    /// From the holder's grant plus S (its `lock_bounded` returning; for an
    /// ordinary round the release call) to the waiter's grant, in ms;
    /// negative if the waiter got the lock before (a bug).
    gap_ms: f64,
    /// The same from the bound's own end (its start plus S), which is at or
    /// before the holder's grant plus S (bounded rounds; ordinary rounds:
    /// as `gap_ms`).
    from_bound_ms: f64,
    /// The waiter was not seen among the participants before the bound's
    /// end (or the release): the round is left out.
    queued_late: bool,
    /// Bounded rounds: the stuck hold's loss, if it was reported.
    loss: Option<LockLoss>,
    /// Bounded rounds: from the bound's own end to `lost()` firing, in ms.
    loss_ms: Option<f64>,
    /// Bounded rounds: how long before `lock_bounded` returned the bound
    /// started counting, in ms.
    start_lead_ms: f64,
}

pub(crate) async fn bounds_phase(
    config: &Config,
    target: &Target,
    root: &str,
    contenders: &mut [Contender],
    idle: f64,
    _findings: &mut Findings,
) {
    println!();
    println!("== Bounds (issue 46): the next holder's grant after a stuck holder's bound passes; requests with bounds set ==");
    let sessions = match contenders.get_mut(ZK_CURATOR) {
        Some(zkc) => zkc.frameworks(&target.connect, 2).await,
        None => Err("no zk-curator row".to_owned()),
    };
    let (a, b) = match sessions.as_deref() {
        Ok([a, b, ..]) => (a.clone(), b.clone()),
        Ok(_) => {
            println!("bounds workload: n/a (fewer than two sessions)");
            return;
        }
        Err(reason) => {
            println!("bounds workload: n/a ({reason})");
            return;
        }
    };
    handoff_part(config, root, &a, &b).await;
    requests_part(config, target, root, &a, &b, idle).await;
    super::publication::publication_part(config, target, root, &a, &b, idle).await;
}

/// Part 1: from the end of the bound to the next holder's grant, against an
/// ordinary hand-off.
async fn handoff_part(config: &Config, root: &str, a: &Framework, b: &Framework) {
    let (measured, warm) = rounds(config);
    let reps = config.reps.clamp(1, measured);
    println!();
    println!(
        "-- From the end of the bound to the next holder's grant: silence bound {} ms, {measured} rounds of each kind \
         ({} reps), after {warm} unmeasured of each --",
        SILENCE.as_millis(),
        reps
    );
    println!("   bounded:  A holds with lock_bounded(silence {} ms) and is stuck (never progress, never release);", SILENCE.as_millis());
    println!("             B (another session) is queued before the bound passes; figure = B's grant - (bound start + S)");
    println!("   ordinary: A holds with lock(), B queued the same way, A calls release() at its grant + S;");
    println!("             figure = B's grant - the release call. The kinds alternate round by round, same sessions.");
    let path = format!("{root}/bounds/handoff");
    let (ma, mb) = match (
        InterProcessMutex::new(a.clone(), &path),
        InterProcessMutex::new(b.clone(), &path),
    ) {
        (Ok(ma), Ok(mb)) => (ma, mb),
        (Err(err), _) | (_, Err(err)) => {
            println!("n/a ({err})");
            return;
        }
    };
    // Unmeasured rounds of each kind.
    for i in 0..warm {
        for kind in order(i) {
            if let Err(err) = round(kind, &ma, &mb).await {
                println!("warm-up round failed: {err}");
                return;
            }
        }
    }
    let mut bounded_rounds: Vec<Vec<Round>> = (0..reps).map(|_| Vec::new()).collect();
    let mut ordinary_rounds: Vec<Vec<Round>> = (0..reps).map(|_| Vec::new()).collect();
    let mut failed = Vec::new();
    let started = Instant::now();
    for i in 0..measured {
        let rep = i * reps / measured;
        if i > 0 && rep != (i - 1) * reps / measured {
            settle().await;
        }
        for kind in order(i) {
            match round(kind, &ma, &mb).await {
                Ok(r) if kind == Kind::Bounded => bounded_rounds[rep].push(r),
                Ok(r) => ordinary_rounds[rep].push(r),
                Err(err) => failed.push(format!("{kind:?}: {err}")),
            }
        }
    }
    println!(
        "{} rounds in {:.1} s",
        2 * measured,
        started.elapsed().as_secs_f64()
    );
    if let Some(first) = failed.first() {
        println!("{} round(s) failed; the first: {first}", failed.len());
    }
    let bounded_fig = Gaps::of(&bounded_rounds, |r| r.gap_ms);
    let from_bound_fig = Gaps::of(&bounded_rounds, |r| r.from_bound_ms);
    let ordinary_fig = Gaps::of(&ordinary_rounds, |r| r.gap_ms);
    println!(
        "{:<44} {:>6} {:>8} {:>17} {:>8} {:>8} {:>8}  left out",
        "round", "rounds", "p50 ms", "reps' p50 min–max", "p99 ms", "max ms", "min ms"
    );
    for (label, fig) in [
        (
            "bound passed -> next grant (holder's grant+S)",
            &bounded_fig,
        ),
        ("  the same, from the bound's own start+S", &from_bound_fig),
        ("ordinary release -> next grant", &ordinary_fig),
    ] {
        match fig {
            Some(g) => println!(
                "{label:<44} {:>6} {:>8.2} {:>17} {:>8.2} {:>8.2} {:>8.2}  {}",
                g.count,
                g.p50,
                g.rep_p50.map_or_else(|| "-".to_owned(), |s| s.range(2)),
                g.p99,
                g.max,
                g.min,
                g.left_out
            ),
            None => println!("{label:<44} n/a (no round measured)"),
        }
    }
    println!("(ms to the next holder's lock() returning from: the stuck holder's lock_bounded returning + S; the bound's own");
    println!(" start (Hold::last_progress, never said) + S, the bound's true end, at or before that; the release call.");
    println!(" Nearest-rank percentiles over all rounds; reps' p50 = the p50 of each rep's rounds; left out = rounds where");
    println!(" B was not seen among the participants before the bound's end or the release)");
    let all: Vec<&Round> = bounded_rounds.iter().flatten().collect();
    let wrong_loss = all
        .iter()
        .filter(|r| r.loss != Some(LockLoss::BoundPassed(Bound::Silence)))
        .count();
    let early = all.iter().filter(|r| r.gap_ms < 0.0).count();
    let mut losses: Vec<f64> = all.iter().filter_map(|r| r.loss_ms).collect();
    losses.sort_by(f64::total_cmp);
    if !losses.is_empty() {
        println!(
            "where the bounded rounds' time goes: from the bound's own end to lost() firing (the enforcing task's wake-up) \
             p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; the rest is the background delete and the waiter's wake-up",
            nearest_rank(&losses, 0.5),
            nearest_rank(&losses, 0.99),
            losses[losses.len() - 1]
        );
    }
    let mut leads: Vec<f64> = all.iter().map(|r| r.start_lead_ms).collect();
    leads.sort_by(f64::total_cmp);
    let lead = if leads.is_empty() {
        "n/a".to_owned()
    } else {
        format!(
            "p50 {:.3} ms, max {:.3} ms",
            nearest_rank(&leads, 0.5),
            leads[leads.len() - 1]
        )
    };
    println!(
        "bounded rounds: {} of {} stuck holds lost with BoundPassed(Silence); next grant before the bound's end: {early}; \
         the bound started before lock_bounded returned by {lead}",
        all.len() - wrong_loss,
        all.len()
    );
    match (bounded_fig, ordinary_fig) {
        (Some(bf), Some(of)) => {
            let beyond = bf.p50 - of.p50;
            println!(
                "verdict (goal: no more than one ordinary hand-off beyond the bound, on the medians: \
                 p50(bound -> grant) - p50(ordinary) <= p50(ordinary)):"
            );
            println!(
                "  {:.2} - {:.2} = {beyond:.2} ms {} {:.2} ms: {}",
                bf.p50,
                of.p50,
                if beyond <= of.p50 { "<=" } else { ">" },
                of.p50,
                if beyond <= of.p50 { "MET" } else { "NOT MET" }
            );
            if let Some(tf) = from_bound_fig {
                let beyond = tf.p50 - of.p50;
                println!(
                    "  from the bound's own end: {:.2} - {:.2} = {beyond:.2} ms {} {:.2} ms: {}",
                    tf.p50,
                    of.p50,
                    if beyond <= of.p50 { "<=" } else { ">" },
                    of.p50,
                    if beyond <= of.p50 { "MET" } else { "NOT MET" }
                );
            }
            println!(
                "  (p99, for the tail, not judged: bound -> grant {:.2} ms against ordinary {:.2} ms, {:+.2} ms)",
                bf.p99,
                of.p99,
                bf.p99 - of.p99
            );
        }
        _ => println!("verdict: n/a (a kind of round has no figure)"),
    }
}

/// The kinds of round `i`, in the order they run: alternating which goes
/// first.
fn order(i: usize) -> [Kind; 2] {
    if i % 2 == 0 {
        [Kind::Bounded, Kind::Ordinary]
    } else {
        [Kind::Ordinary, Kind::Bounded]
    }
}

/// One round of `kind`: A (on `ma`) holds, B (on `mb`) queues behind it and
/// gets the lock once A's hold ends, then releases.
async fn round(
    kind: Kind,
    ma: &InterProcessMutex,
    mb: &InterProcessMutex,
) -> Result<Round, BoxError> {
    let ordinary_round = kind == Kind::Ordinary;
    let guard = match kind {
        Kind::Bounded => {
            within(
                ACQUIRE_LIMIT,
                ma.lock_bounded(HoldBounds::new().silence(SILENCE)),
            )
            .await??
        }
        Kind::Ordinary => within(ACQUIRE_LIMIT, ma.lock()).await??,
    };
    let granted = Instant::now();
    // The bound counts from its own start (the hold's last progress, never
    // said); an ordinary hold releases at its grant plus S.
    let start = match kind {
        Kind::Bounded => guard
            .last_progress()
            .map(tokio::time::Instant::into_std)
            .ok_or("a bounded hold without bounds")?,
        Kind::Ordinary => granted,
    };
    let end = start + SILENCE;
    let granted_end = granted + SILENCE;
    let start_lead_ms = granted.saturating_duration_since(start).as_secs_f64() * 1e3;
    // A bounded hold goes at once to the stuck task: it keeps the guard,
    // never says progress, never returns on its own (until the round ends
    // it). An ordinary one stays here, to be released at its grant plus S.
    let (ordinary, lost, stuck) = match kind {
        Kind::Bounded => {
            // The loss, timed as it fires.
            let lost = guard.lost();
            let lost = Abort(tokio::spawn(async move {
                let reason = lost.await;
                (Instant::now(), reason)
            }));
            let (never, blocked) = tokio::sync::oneshot::channel::<()>();
            let stuck = tokio::spawn(async move {
                let _guard = guard;
                let _ = blocked.await;
            });
            (None, Some(lost), Some((never, stuck)))
        }
        Kind::Ordinary => (Some(guard), None, None),
    };
    let waiter_mutex = mb.clone();
    let mut waiter = Abort(tokio::spawn(async move {
        let held = within(ACQUIRE_LIMIT, waiter_mutex.lock()).await;
        (Instant::now(), held)
    }));
    // Wait until B's node is among the participants (bounded by the end).
    let mut queued_late = true;
    while Instant::now() < end {
        if ma.participant_nodes().await?.len() >= 2 {
            queued_late = false;
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let from = match ordinary {
        None => granted_end,
        Some(guard) => {
            tokio::time::sleep_until(tokio::time::Instant::from_std(end)).await;
            let called = Instant::now();
            within(ACQUIRE_LIMIT, guard.release()).await??;
            called
        }
    };
    let (got, held) = within(ACQUIRE_LIMIT + SILENCE, &mut waiter.0).await??;
    let held = held??;
    let gap_ms = ms_after_end(got, from);
    let from_bound_ms = if ordinary_round {
        gap_ms
    } else {
        ms_after_end(got, end)
    };
    let (loss, loss_ms) = match lost {
        Some(mut lost) => match within(LOSS_LIMIT, &mut lost.0).await {
            Ok(Ok((at, reason))) => (Some(reason), Some(ms_after_end(at, end))),
            _ => (None, None),
        },
        None => (None, None),
    };
    within(ACQUIRE_LIMIT, held.release()).await??;
    if let Some((never, stuck)) = stuck {
        drop(never);
        within(LOSS_LIMIT, stuck).await??;
    }
    Ok(Round {
        loss_ms,
        gap_ms,
        from_bound_ms,
        queued_late,
        loss,
        start_lead_ms,
    })
}

/// `at` minus `end` in ms, negative if `at` came first.
fn ms_after_end(at: Instant, end: Instant) -> f64 {
    match at.checked_duration_since(end) {
        Some(d) => d.as_secs_f64() * 1e3,
        None => -(end.duration_since(at).as_secs_f64() * 1e3),
    }
}

/// A task aborted when dropped (a round cut short leaves no waiter behind).
struct Abort<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Abort<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The figures of one kind of round over all reps.
#[derive(Clone, Copy)]
struct Gaps {
    count: usize,
    p50: f64,
    p99: f64,
    max: f64,
    min: f64,
    /// The p50 of each rep's rounds.
    rep_p50: Option<Spread>,
    left_out: usize,
}

impl Gaps {
    fn of(reps: &[Vec<Round>], figure: fn(&Round) -> f64) -> Option<Gaps> {
        let kept = |rounds: &[Round]| -> Vec<f64> {
            let mut gaps: Vec<f64> = rounds
                .iter()
                .filter(|r| !r.queued_late)
                .map(figure)
                .collect();
            gaps.sort_by(f64::total_cmp);
            gaps
        };
        let mut gaps: Vec<f64> = reps.iter().flat_map(|r| kept(r)).collect();
        gaps.sort_by(f64::total_cmp);
        if gaps.is_empty() {
            return None;
        }
        let per_rep: Vec<f64> = reps
            .iter()
            .map(|r| kept(r))
            .filter(|g| !g.is_empty())
            .map(|g| nearest_rank(&g, 0.5))
            .collect();
        Some(Gaps {
            count: gaps.len(),
            p50: nearest_rank(&gaps, 0.5),
            p99: nearest_rank(&gaps, 0.99),
            max: gaps[gaps.len() - 1],
            min: gaps[0],
            rep_p50: Spread::of(&per_rep),
            left_out: reps.iter().flatten().filter(|r| r.queued_late).count(),
        })
    }
}

/// Nearest-rank percentile of sorted values (as `figures::percentile`).
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The two variants of part 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Unbounded,
    Bounded,
}

impl Variant {
    fn label(self, what: &str) -> String {
        match self {
            Variant::Unbounded => format!("{what}, no bound"),
            Variant::Bounded => format!("{what}, bounds set (never passing)"),
        }
    }
}

/// Bounds that never pass within a measurement.
fn never() -> HoldBounds {
    HoldBounds::new().duration(NEVER).silence(NEVER)
}

/// The measures of part 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
    /// Uncontended acquire+release cycles on one session.
    Cycle,
    /// Hand-offs between two sessions, each one to a waiter queued before
    /// the release.
    Queued,
    /// Two sessions, one task each, looping acquire -> release for a window
    /// (the contended workload's shape).
    Free,
}

impl Measure {
    fn label(self) -> &'static str {
        match self {
            Measure::Cycle => "per cycle (acquire+release)",
            Measure::Queued => "per queued hand-off",
            Measure::Free => "per free-running hand-off",
        }
    }
}

/// Part 2: requests per acquire and per hand-off, with no bound and with
/// bounds that never pass.
async fn requests_part(
    config: &Config,
    target: &Target,
    root: &str,
    a: &Framework,
    b: &Framework,
    idle: f64,
) {
    let addr = target.four_letter.as_deref();
    let queued = queued_handoffs(config);
    println!();
    println!(
        "-- A hold given no bound behaves as today: requests, no bound against bounds of {} s hold and silence (never passing) --",
        NEVER.as_secs()
    );
    println!(
        "   cycle = {} acquire+release cycles on one session (lock() against lock_bounded(bounds));",
        config.cycles
    );
    println!(
        "   queued hand-off = {queued} hand-offs between 2 sessions, each to a waiter started {} ms before the release",
        QUEUE_WAIT.as_millis()
    );
    println!(
        "   (set_hold_bounds(bounds) on both mutexes); free-running = 2 sessions, one task each, acquire->release for {} s",
        config.contend.as_secs()
    );
    println!("   (set_hold_bounds; the contended workload's count, whose mix of waits varies from run to run)");
    let measures = [Measure::Cycle, Measure::Queued, Measure::Free];
    let variants = [Variant::Unbounded, Variant::Bounded];
    // The two sessions' own packets (`cons`), beside the server's totals.
    let sessions: Vec<i64> = [a, b]
        .iter()
        .filter_map(|fw| fw.current_session().map(|s| s.id()))
        .collect();
    // [measure][variant] -> per rep: (requests per unit, units/s).
    let mut reps: Vec<[Vec<Measured<Counted>>; 2]> =
        measures.iter().map(|_| [Vec::new(), Vec::new()]).collect();
    for rep in 0..config.reps {
        let turn: [usize; 2] = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
        for (m, measure) in measures.iter().enumerate() {
            for &v in &turn {
                let path = format!("{root}/bounds/{measure:?}-{v}").to_lowercase();
                settle().await;
                let run = async {
                    Ok::<_, BoxError>(match measure {
                        Measure::Cycle => {
                            let c = cycles(a, &path, variants[v], config.cycles).await?;
                            (c.cycles as f64, c.per_s)
                        }
                        Measure::Queued => {
                            let secs = queued_run(a, b, &path, variants[v], queued).await?;
                            (queued as f64, queued as f64 / secs)
                        }
                        Measure::Free => {
                            let h = handoffs(a, b, &path, variants[v], config.contend).await?;
                            (h.releases as f64, h.per_s)
                        }
                    })
                };
                let (result, traffic, own, _) =
                    counting(addr, &sessions, idle, bounded(config.limit(), run)).await;
                reps[m][v].push(result.map(|(units, rate)| {
                    (
                        per(traffic.map(|t| t.requests), units),
                        per(own, units),
                        rate,
                    )
                }));
            }
        }
    }
    println!(
        "{:<62} {:>8} {:>15} {:>8} {:>15} {:>7} {:>11}  note",
        "variant", "req", "min–max", "own", "min–max", "per s", "min–max"
    );
    let mut verdicts = Vec::new();
    let mut own_verdicts = Vec::new();
    for (m, measure) in measures.iter().enumerate() {
        let req: Vec<Option<Spread>> = reps[m]
            .iter()
            .map(|r| {
                Spread::of(
                    &r.iter()
                        .filter_map(|x| x.as_ref().ok()?.0)
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        let own: Vec<Option<Spread>> = reps[m]
            .iter()
            .map(|r| {
                Spread::of(
                    &r.iter()
                        .filter_map(|x| x.as_ref().ok()?.1)
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        let rate: Vec<Option<Spread>> = reps[m]
            .iter()
            .map(|r| {
                Spread::of(
                    &r.iter()
                        .filter_map(|x| Some(x.as_ref().ok()?.2))
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        for (v, variant) in variants.iter().enumerate() {
            let failed: Vec<&String> = reps[m][v].iter().filter_map(|x| x.as_ref().err()).collect();
            let note = failed
                .first()
                .map(|f| format!("{} of {} reps failed: {f}", failed.len(), reps[m][v].len()))
                .unwrap_or_default();
            let cols = |s: Option<Spread>, d: usize| match s {
                Some(s) => (format!("{:.*}", d, s.median), s.range(d)),
                None => ("n/a".to_owned(), String::new()),
            };
            let (rq, rq_range) = cols(req[v], 3);
            let (ow, ow_range) = cols(own[v], 3);
            let (rt, rt_range) = cols(rate[v], 0);
            println!(
                "{:<62} {rq:>8} {rq_range:>15} {ow:>8} {ow_range:>15} {rt:>7} {rt_range:>11}  {note}",
                variant.label(measure.label())
            );
        }
        verdicts.push((*measure, req[0], req[1]));
        own_verdicts.push((*measure, own[0], own[1]));
    }
    println!("(req = requests the server received, less the idle ping rate, per cycle or hand-off (free-running: per");
    println!(" release); own = the packets of the two sessions alone (`cons`: no other session's, no idle rate to take");
    println!(
        " off); median and min–max over the reps; per s = cycles/s or hand-offs/s, for context)"
    );
    println!(
        "verdict (goal: bounds add no request): cycles are \"same\" when the medians differ by less than {SAME} request"
    );
    println!(
        "(1,000 cycles a second keep the idle pings' share small); hand-offs, slower, whose counts carry the other"
    );
    println!(
        "sessions' pings (the idle rate is an average), are \"within noise\" when the reps' ranges overlap"
    );
    for (measure, unbounded, bounded) in verdicts {
        match (unbounded, bounded) {
            (Some(u), Some(b)) => {
                let diff = b.median - u.median;
                let overlap = u.within_noise(&b);
                let noise = match overlap {
                    Some(true) => "the reps' ranges overlap",
                    Some(false) => "the reps' ranges do not overlap",
                    None => "1 rep: no noise estimate",
                };
                let verdict = match measure {
                    Measure::Cycle if diff.abs() < SAME => "same",
                    Measure::Cycle => "DIFFERENT",
                    _ => match overlap {
                        Some(true) => "within noise",
                        Some(false) => "DIFFERENT",
                        None => "no verdict",
                    },
                };
                println!(
                    "  {}: bounded {:.3} - unbounded {:.3} = {diff:+.3}: {verdict} ({noise})",
                    measure.label(),
                    b.median,
                    u.median,
                );
            }
            _ => println!("  {}: n/a", measure.label()),
        }
    }
    println!(
        "verdict on the sessions' own packets (no one else's, nothing to take off): \"same\" when the medians differ by"
    );
    println!(
        "less than {SAME} request; the free-running count also carries its mix of waits, which varies from run to run"
    );
    for (measure, unbounded, bounded) in own_verdicts {
        match (unbounded, bounded) {
            (Some(u), Some(b)) => {
                let diff = b.median - u.median;
                let verdict = if diff.abs() < SAME {
                    "same"
                } else {
                    "DIFFERENT"
                };
                let noise = match u.within_noise(&b) {
                    Some(true) => "the reps' ranges overlap",
                    Some(false) => "the reps' ranges do not overlap",
                    None => "1 rep",
                };
                println!(
                    "  {} (own): bounded {:.3} - unbounded {:.3} = {diff:+.3}: {verdict} ({noise})",
                    measure.label(),
                    b.median,
                    u.median,
                );
            }
            _ => println!("  {} (own): n/a (cons did not answer)", measure.label()),
        }
    }
}

/// One measurement of part 2: requests per cycle or hand-off (if the
/// server's counts were read), the two sessions' own packets per cycle or
/// hand-off (if `cons` answered), and cycles or hand-offs per second.
type Counted = (Option<f64>, Option<f64>, f64);

/// Two request counts per uncontended cycle are "the same" when they
/// differ by less than this: an added request would add 1 per acquire;
/// less is the error of the idle ping rate over a run of 1,000 cycles a
/// second. Hand-offs, at tens a second, carry a larger share of the other
/// sessions' pings and are judged by the noise rule instead.
const SAME: f64 = 0.05;

/// How long a queued hand-off gives the waiter to queue before the release.
const QUEUE_WAIT: Duration = Duration::from_millis(25);

/// The queued hand-offs of one measurement.
fn queued_handoffs(config: &Config) -> usize {
    if config.quick {
        20
    } else {
        100
    }
}

/// `n` hand-offs between A and B, each one to a waiter started
/// [`QUEUE_WAIT`] before the holder's release; the seconds it took.
async fn queued_run(
    a: &Framework,
    b: &Framework,
    path: &str,
    variant: Variant,
    n: usize,
) -> Result<f64, BoxError> {
    let mut mutexes = Vec::with_capacity(2);
    for fw in [a, b] {
        let mutex = InterProcessMutex::new(fw.clone(), path)?;
        if variant == Variant::Bounded {
            mutex.set_hold_bounds(never())?;
        }
        mutexes.push(mutex);
    }
    let started = Instant::now();
    let mut holder = within(ACQUIRE_LIMIT, mutexes[0].lock()).await??;
    for i in 0..n {
        let next = mutexes[(i + 1) % 2].clone();
        let mut waiter = Abort(tokio::spawn(async move {
            within(ACQUIRE_LIMIT, next.lock()).await
        }));
        tokio::time::sleep(QUEUE_WAIT).await;
        within(ACQUIRE_LIMIT, holder.release()).await??;
        holder = within(ACQUIRE_LIMIT, &mut waiter.0).await????;
    }
    within(ACQUIRE_LIMIT, holder.release()).await??;
    Ok(started.elapsed().as_secs_f64())
}

/// `n` acquire+release cycles on one session.
async fn cycles(
    fw: &Framework,
    path: &str,
    variant: Variant,
    n: usize,
) -> Result<Cycles, BoxError> {
    let mutex = InterProcessMutex::new(fw.clone(), path)?;
    let mut samples = Vec::with_capacity(n);
    let mut acquires = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let t0 = Instant::now();
        let guard = match variant {
            Variant::Unbounded => within(ACQUIRE_LIMIT, mutex.lock()).await??,
            Variant::Bounded => within(ACQUIRE_LIMIT, mutex.lock_bounded(never())).await??,
        };
        acquires.push(t0.elapsed());
        within(ACQUIRE_LIMIT, guard.release()).await??;
        samples.push(t0.elapsed());
    }
    Ok(Cycles::from_samples(samples, acquires, started.elapsed()))
}

/// Two sessions, one task each, handing one lock around for `window`.
async fn handoffs(
    a: &Framework,
    b: &Framework,
    path: &str,
    variant: Variant,
    window: Duration,
) -> Result<Handoffs, BoxError> {
    let mut handles = Vec::with_capacity(2);
    for fw in [a, b] {
        let mutex = InterProcessMutex::new(fw.clone(), path)?;
        if variant == Variant::Bounded {
            mutex.set_hold_bounds(never())?;
        }
        handles.push(LockHandle::Mutex(mutex));
    }
    contended_rust(handles, 2, window).await
}
