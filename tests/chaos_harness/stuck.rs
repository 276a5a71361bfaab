//! Stuck holders (issue 46): contenders whose holds are bounded
//! ([`HoldBounds`]: a silence bound, sometimes a hold bound too), who say
//! progress while they work, and who now and then become stuck: after a
//! read they stop saying progress and stop doing anything, while their
//! process, framework and session live on (not a crash, not a pause of the
//! host). See "Stuck holders" in the harness's notes for the rules.
//!
//! A stuck holder hands its hold to the checker here, on the harness's own
//! runtime and session, and waits (doing nothing) until the checker has
//! judged it. The checker waits until its loss has been seen and the
//! deletion of every node of it told (a watch of its own session), or
//! until the hold's deadlines, then judges: did its `lost()` fire in time
//! (a watcher beside the stuck task records when, and why), and was its
//! node gone in time (told of the deletion by then, or a read at the
//! deadline, synced first, does not find it)? Then the stuck task wakes
//! and writes once through the fence it took before it got stuck: the
//! server must never see that write if the hold was lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use zk_curator::framework::zk;
use zk_curator::{Bound, Fence, HoldBounds, LockLoss};

use super::{now, Config, Kind, Rng, Shared};

/// The bounds of contender `who`'s holds of `kind`, if it takes bounded
/// holds: every other contender (0, 2, ...) when stuck holders are on, on
/// every lock kind (the elections' terms are left out). A silence bound of
/// 200 to 800 ms, and one time in three a hold bound of 1.5 to 4 s too (the
/// harness's critical sections take 5 to 120 ms and a round trip or two).
/// From a generator of their own: the contender's other draws are not
/// moved.
pub(super) fn bounds_of(config: &Config, who: usize, kind: Kind) -> Option<HoldBounds> {
    if !config.stuck || kind.is_election() || who % 2 == 1 {
        return None;
    }
    let mut rng = Rng((config.seed
        ^ 0x57c4_b0d5_0000_0000
        ^ ((who as u64 + 1) << 24)
        ^ ((kind as u64 + 1) << 8))
        | 1);
    let mut bounds = HoldBounds::new().silence(rng.millis(200, 800));
    if rng.below(3) == 0 {
        bounds = bounds.duration(rng.millis(1500, 4000));
    }
    Some(bounds)
}

/// The generator of a bounded seat's choice to get stuck (its own, so an
/// unbounded contender's draws are those of a run without stuck holders).
pub(super) fn stuck_rng(config: &Config, who: usize, task: usize, kind: Kind) -> Rng {
    Rng((config.seed
        ^ 0x0057_0c4e_d000_0000
        ^ ((who as u64 + 1) << 40)
        ^ ((task as u64) << 20)
        ^ (kind as u64 + 1))
        | 1)
}

/// One time in this many, a bounded holder's critical section gets stuck
/// after its read.
pub(super) const STUCK_ONE_IN: u64 = 3;

/// The longest a stuck task waits for the checker's verdict before it wakes
/// anyway (the checker's deadlines are seconds; this only keeps the wait
/// bounded if the checker is gone).
const STUCK_CAP: Duration = Duration::from_secs(120);

/// When and why the stuck hold's `lost()` fired, as seen beside it.
pub(super) type LostSlot = Arc<Mutex<Option<(LockLoss, Instant)>>>;

/// A stuck hold, handed to the checker.
pub(super) struct StuckHold {
    pub who: usize,
    pub task: usize,
    pub kind: Kind,
    /// The hold's nodes (two for a multi-lock).
    pub nodes: Vec<String>,
    /// When it got stuck (just after its last progress).
    pub stuck_at: Instant,
    /// When its first bound passes at the latest (from the harness's
    /// stamps, each taken just after the library's own instant: the grant
    /// or the bounding call, the last progress).
    pub end: Instant,
    pub lost: LostSlot,
    /// Sent once judged: the stuck task may wake.
    pub done: oneshot::Sender<()>,
}

/// What the checker found of one stuck hold.
#[derive(Clone, Debug)]
pub(super) struct Judged {
    pub who: usize,
    pub task: usize,
    pub stuck_at: Instant,
    pub end: Instant,
    /// `lost()` had to fire by this instant: `end` (or the end of a stop
    /// of the holder's host in force then) plus [`Config::wake_slack`].
    pub lost_by: Instant,
    /// Its nodes had to be gone by this instant (see the notes, rule 8).
    pub gone_by: Instant,
    /// The bound's end as the enforcer could see it: `end`, or the end of
    /// a stop of the host in force then.
    pub end_seen: Instant,
    pub lost: Option<(LockLoss, Instant)>,
    /// When the harness's session was told each node was deleted (`None`:
    /// not told by `gone_by`).
    pub gone_at: Vec<Option<Instant>>,
    /// Nodes that a read at `gone_by` (synced first) still found.
    pub left: Vec<String>,
}

/// Starts watching a stuck hold from where its holder runs (the caller's
/// runtime): when its `lost()` fires (the first of its holds', for a
/// multi-lock), recorded in the slot. Ends with the hold (a release ends
/// `lost()` too).
pub(super) fn watch_loss(fence: &Fence) -> LostSlot {
    let slot: LostSlot = Arc::new(Mutex::new(None));
    let losses: Vec<_> = fence
        .holds()
        .iter()
        .map(|hold| hold.lost().boxed())
        .collect();
    let record = slot.clone();
    tokio::spawn(async move {
        let (loss, _, _) = futures::future::select_all(losses).await;
        record.lock().unwrap().get_or_insert((loss, now()));
    });
    slot
}

/// `ZK_CHAOS_BREAK=bound`, the planted bug: a ticker says progress for the
/// stuck holder (a watchdog fed by a timer instead of by the work, as a
/// lease renewed by a client library is), every quarter of the silence
/// bound, until `stop`. The checks must then find a stuck hold that does
/// not end.
pub(super) fn feed_by_timer(fence: &Fence, silence: Duration, stop: Arc<AtomicBool>) {
    let holds = fence.holds().to_vec();
    let every = (silence / 4).max(Duration::from_millis(1));
    tokio::spawn(async move {
        // Bounded: the stuck task stops it when it wakes (at most
        // `STUCK_CAP` later).
        for _ in 0..(STUCK_CAP.as_millis() as u64 / every.as_millis().max(1) as u64 + 1) {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            holds.iter().for_each(|hold| hold.progress());
            tokio::time::sleep(every).await;
        }
    });
}

/// Waits (doing nothing, as a stuck task does) until the checker has judged
/// the hold, at most [`STUCK_CAP`].
pub(super) async fn stay_stuck(done: oneshot::Receiver<()>) {
    let _ = tokio::time::timeout(STUCK_CAP, done).await;
}

/// The checker: judges each stuck hold it is handed, on the harness's
/// runtime and with its own session (`raw`: straight to the server), until
/// every sender is gone and every check has ended.
pub(super) async fn checker(
    shared: Arc<Shared>,
    raw: zk::Client,
    mut holds: mpsc::UnboundedReceiver<StuckHold>,
) {
    let mut checks = FuturesUnordered::new();
    loop {
        tokio::select! {
            hold = holds.recv() => match hold {
                Some(hold) => checks.push(judge(shared.clone(), raw.clone(), hold)),
                None => break,
            },
            Some(()) = checks.next(), if !checks.is_empty() => {}
        }
    }
    while checks.next().await.is_some() {}
}

/// The deadlines of a stuck hold whose bound ends at `end`, given the stops
/// of its holder's host known now: `(end_seen, lost_by, gone_by)`, or
/// `None` while a stop that counts has not ended yet.
///
/// A stopped host runs nothing, the enforcer included: a stop in force at
/// `end` moves the end as the enforcer sees it to the stop's end. A stop
/// between that and `gone_by` holds the delete up (the link is on the same
/// host), so `gone_by` is at least its end plus the slack.
fn deadlines(
    pauses: &[(usize, Instant, Option<Instant>)],
    who: usize,
    end: Instant,
    wake: Duration,
    slack: Duration,
) -> Option<(Instant, Instant, Instant)> {
    let mut mine: Vec<(Instant, Option<Instant>)> = pauses
        .iter()
        .filter(|p| p.0 == who)
        .map(|p| (p.1, p.2))
        .collect();
    mine.sort_by_key(|p| p.0);
    let mut seen = end;
    for &(start, stop) in &mine {
        if start <= seen && stop.is_none_or(|stop| stop >= seen) {
            seen = stop?;
        }
    }
    let mut gone_by = seen + slack;
    for &(start, stop) in &mine {
        if start <= gone_by && stop.is_none_or(|stop| stop >= seen) {
            gone_by = gone_by.max(stop? + slack);
        }
    }
    Some((seen, seen + wake, gone_by))
}

/// Judges one stuck hold (see the notes, rule 8): waits until its
/// deadlines (moved by stops of its host), watching its nodes on the
/// harness's session; then reads each node not seen deleted, and records
/// what it found. Then lets the stuck task wake.
async fn judge(shared: Arc<Shared>, raw: zk::Client, hold: StuckHold) {
    let config = &shared.config;
    let slack = config.session_timeout + config.stuck_slack + config.read_lag;
    let mut gone_at: Vec<Option<Instant>> = vec![None; hold.nodes.len()];
    let mut watches = FuturesUnordered::new();
    for (i, node) in hold.nodes.iter().enumerate() {
        match raw.check_and_watch_stat(node).await {
            Ok((None, _)) => gone_at[i] = Some(now()),
            Ok((Some(_), watch)) => watches.push(async move { (i, watch.changed().await) }),
            Err(_) => {}
        }
    }
    // Bounded: each turn waits until a deadline or a deletion, and a stop
    // of the host lasts at most twice the session timeout.
    let mut known = None;
    for _ in 0..10_000 {
        let found = deadlines(
            &shared.host_pauses.lock().unwrap(),
            hold.who,
            hold.end,
            config.wake_slack,
            slack,
        );
        // Judged as soon as what decides it is known: its loss seen, and
        // every node's deletion told (the stuck task then wakes sooner, but
        // only after both).
        let settled = hold.lost.lock().unwrap().is_some() && gone_at.iter().all(Option::is_some);
        let wait_until = match found {
            Some((_, _, gone_by)) if now() >= gone_by || settled => {
                known = found;
                break;
            }
            Some((_, _, gone_by)) => gone_by,
            // A stop not ended yet: look again shortly.
            None => now() + Duration::from_millis(50),
        };
        tokio::select! {
            () = tokio::time::sleep_until(wait_until) => {}
            Some((i, event)) = watches.next(), if !watches.is_empty() => {
                if event.event_type == zk::EventType::NodeDeleted {
                    gone_at[i] = Some(now());
                }
            }
        }
    }
    let (end_seen, lost_by, gone_by) = known.unwrap_or((hold.end, hold.end, now()));
    let mut left = Vec::new();
    for (i, node) in hold.nodes.iter().enumerate() {
        if gone_at[i].is_some_and(|at| at <= gone_by) {
            continue;
        }
        gone_at[i] = None;
        // As of now: on an ensemble, the harness's server may lag.
        let _ = raw.sync(node).await;
        if let Ok(Some(_)) = raw.check_stat(node).await {
            left.push(node.clone());
        }
    }
    let lost = *hold.lost.lock().unwrap();
    let judged = Judged {
        who: hold.who,
        task: hold.task,
        stuck_at: hold.stuck_at,
        end: hold.end,
        lost_by,
        gone_by,
        end_seen,
        lost,
        gone_at,
        left,
    };
    shared.log(hold.kind, |log| log.stuck.push(judged));
    let _ = hold.done.send(());
}

/// Whether a stuck hold was lost otherwise (a connection state, a stale
/// lease) before its bound's end: the library then leaves its node to the
/// holder's release (`bounds::enforce` stops at any other loss), which a
/// stuck holder never makes (see "Stuck holders", rule 8 (b)).
pub(super) fn lost_otherwise_first(j: &Judged) -> bool {
    j.lost.is_some_and(|(loss, when)| {
        !matches!(
            loss,
            LockLoss::BoundPassed(_) | LockLoss::NodeDeleted | LockLoss::SessionReplaced
        ) && when < j.end_seen
    })
}

/// What is wrong with the stuck holds of one kind (rule 8 of the notes),
/// each in words with instants since `zero`. `exact`: a loss is seen the
/// instant it is latched (one thread: the simulator), so one seen at or
/// after the bound's end must be the bound's. `strict`: a node left by a
/// hold lost otherwise first counts too (see [`lost_otherwise_first`]).
pub(super) fn violations(
    judged: &[Judged],
    zero: Instant,
    exact: bool,
    strict: bool,
) -> Vec<String> {
    let at = |i: Instant| i.saturating_duration_since(zero);
    let mut late = Vec::new();
    let mut reason = Vec::new();
    let mut left = Vec::new();
    for j in judged {
        let name = format!(
            "#{}/{} stuck at {:?}, bound's end {:?} (as its host saw it {:?})",
            j.who,
            j.task,
            at(j.stuck_at),
            at(j.end),
            at(j.end_seen)
        );
        match j.lost {
            Some((_, when)) if when <= j.lost_by => {}
            Some((loss, when)) => late.push(format!(
                "{name}: lost() fired at {:?} ({loss:?}), after {:?}",
                at(when),
                at(j.lost_by)
            )),
            None => late.push(format!(
                "{name}: lost() had not fired by {:?}",
                at(j.lost_by)
            )),
        }
        if let Some((loss, when)) = j.lost {
            if exact && when >= j.end_seen && !matches!(loss, LockLoss::BoundPassed(_)) {
                reason.push(format!("{name}: lost at {:?} with {loss:?}", at(when)));
            }
        }
        if !j.left.is_empty() && (strict || !lost_otherwise_first(j)) {
            left.push(format!(
                "{name}, lost {:?}: {:?} still there at {:?}",
                j.lost.map(|(loss, when)| (loss, at(when))),
                j.left,
                at(j.gone_by)
            ));
        }
    }
    let mut found = Vec::new();
    for (what, list) in [
        ("stuck hold(s) whose lost() did not fire by the bound's end plus the enforcer's wake-up", late),
        ("stuck hold(s) lost after the bound's end with another reason than BoundPassed", reason),
        ("stuck hold(s) whose node outlived the bound's end plus the slack", left),
    ] {
        if !list.is_empty() {
            let shown: Vec<&String> = list.iter().take(4).collect();
            found.push(format!("{} {what}: {shown:?}", list.len()));
        }
    }
    found
}

/// The stuck holds lost otherwise first whose node outlived the bound's
/// end plus the slack (the library's gap of rule 8 (b)), in words.
pub(super) fn left_after_other_loss(judged: &[Judged], zero: Instant) -> Vec<String> {
    let at = |i: Instant| i.saturating_duration_since(zero);
    judged
        .iter()
        .filter(|j| !j.left.is_empty() && lost_otherwise_first(j))
        .map(|j| {
            format!(
                "#{}/{} stuck at {:?}, lost {:?} at {:?}, bound's end {:?}: {:?} still there at {:?}",
                j.who,
                j.task,
                at(j.stuck_at),
                j.lost.map(|(loss, _)| loss),
                j.lost.map(|(_, when)| at(when)),
                at(j.end_seen),
                j.left,
                at(j.gone_by)
            )
        })
        .collect()
}

/// The figures of one kind's stuck holds: how many, lost by a bound / lost
/// otherwise first, and the longest from the bound's end (as the host saw
/// it) to the loss and to the node's deletion as told to the harness.
pub(super) fn figures(judged: &[Judged]) -> (usize, usize, usize, Duration, Duration) {
    let by_bound = judged
        .iter()
        .filter(|j| matches!(j.lost, Some((LockLoss::BoundPassed(_), _))))
        .count();
    let otherwise = judged
        .iter()
        .filter(|j| {
            j.lost
                .is_some_and(|(l, _)| !matches!(l, LockLoss::BoundPassed(_)))
        })
        .count();
    let lost_after = judged
        .iter()
        .filter_map(|j| {
            j.lost
                .map(|(_, when)| when.saturating_duration_since(j.end_seen))
        })
        .max()
        .unwrap_or_default();
    let gone_after = judged
        .iter()
        .flat_map(|j| {
            j.gone_at
                .iter()
                .flatten()
                .map(|g| g.saturating_duration_since(j.end_seen))
        })
        .max()
        .unwrap_or_default();
    (judged.len(), by_bound, otherwise, lost_after, gone_after)
}

/// A bound that passed too early: a hold lost with [`LockLoss::BoundPassed`]
/// at `at`, its holder having asked at `asked` and said progress at each of
/// `progress` (each stamp taken just after the call). The silence bound
/// passes only after a stretch of `silence` without progress, and the hold
/// bound only once `duration` has passed since the acquire began.
pub(super) fn early(
    bounds: HoldBounds,
    bound: Bound,
    asked: Instant,
    progress: &[Instant],
    at: Instant,
) -> Option<String> {
    // The stamps come just after the library's own instants (in real time,
    // by microseconds): this much is forgiven.
    let tolerance = Duration::from_millis(5);
    match bound {
        Bound::Silence => {
            let silence = bounds.max_silence()?;
            let mut stamps: Vec<Instant> = vec![asked];
            stamps.extend_from_slice(progress);
            stamps.push(at);
            let longest = stamps
                .windows(2)
                .map(|w| w[1].saturating_duration_since(w[0]))
                .max()
                .unwrap_or_default();
            (longest + tolerance < silence).then(|| {
                format!("silence bound {silence:?} passed, yet the longest stretch without progress was {longest:?}")
            })
        }
        Bound::Duration => {
            let duration = bounds.max_duration()?;
            let lasted = at.saturating_duration_since(asked);
            (lasted + tolerance < duration).then(|| {
                format!("hold bound {duration:?} passed {lasted:?} after the acquire began")
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stop of the host in force at the bound's end moves it to the
    /// stop's end; a later stop within the slack moves `gone_by`; another
    /// contender's stop, or one before, changes nothing; one not ended
    /// yet leaves the deadlines unknown.
    #[test]
    fn deadlines_follow_the_stops_of_the_holders_host() {
        let zero = Instant::now();
        let at = |ms: u64| zero + Duration::from_millis(ms);
        let (wake, slack) = (Duration::from_millis(10), Duration::from_millis(1000));
        let none = deadlines(&[], 0, at(500), wake, slack).unwrap();
        assert_eq!(none, (at(500), at(510), at(1500)));
        let others = [(1, at(400), Some(at(3000))), (0, at(100), Some(at(300)))];
        assert_eq!(deadlines(&others, 0, at(500), wake, slack).unwrap(), none);
        let over_end = [(0, at(400), Some(at(2000)))];
        assert_eq!(
            deadlines(&over_end, 0, at(500), wake, slack).unwrap(),
            (at(2000), at(2010), at(3000))
        );
        let within = [(0, at(1200), Some(at(2500)))];
        assert_eq!(
            deadlines(&within, 0, at(500), wake, slack).unwrap(),
            (at(500), at(510), at(3500))
        );
        let running = [(0, at(1200), None)];
        assert!(deadlines(&running, 0, at(500), wake, slack).is_none());
    }

    /// A silence bound that passed after a stretch without progress as long
    /// as the bound is fine; one that passed sooner is early; so is a hold
    /// bound that passed before its length since the acquire began.
    #[test]
    fn a_bound_that_passed_early_is_found() {
        let zero = Instant::now();
        let at = |ms: u64| zero + Duration::from_millis(ms);
        let bounds = HoldBounds::new()
            .silence(Duration::from_millis(300))
            .duration(Duration::from_millis(2000));
        let progress = [at(100), at(250), at(400)];
        assert!(early(bounds, Bound::Silence, at(0), &progress, at(700)).is_none());
        assert!(early(bounds, Bound::Silence, at(0), &progress, at(600)).is_some());
        // Gaps of 100, 250 and 10 ms: none as long as the bound.
        assert!(early(bounds, Bound::Silence, at(0), &[at(100), at(350)], at(360)).is_some());
        assert!(early(bounds, Bound::Duration, at(0), &progress, at(2000)).is_none());
        assert!(early(bounds, Bound::Duration, at(0), &progress, at(1900)).is_some());
    }
}
