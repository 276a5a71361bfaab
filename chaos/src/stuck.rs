//! Stuck holders (issue 46): contenders whose holds are bounded
//! ([`HoldBounds`]: a silence bound, sometimes a hold bound too), who say
//! progress while they work, and who now and then become stuck: after a
//! read they stop saying progress and stop doing anything, while their
//! process, framework and session live on (not a crash, not a pause of the
//! host). See "Stuck holders" in the crate's notes for the rules, and
//! `verdict.rs` for them as functions (rules 8 and 9).
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
use zk_curator::{Fence, HoldBounds};

use crate::config::{Config, Draw, Kind, MAX_HOLD_BOUND};
use crate::place::{now, server_stalls};
use crate::records::Judged;
use crate::shared::{LostSlot, Shared, StuckHold};
use crate::verdict::deadlines;

/// The bounds of contender `who`'s holds of `kind`, if it takes bounded
/// holds: every other contender (0, 2, ...) when stuck holders are on, on
/// every lock kind (the elections' terms are left out). A silence bound of
/// 200 to 800 ms, and one time in three a hold bound of 1.5 to 4 s too (the
/// harness's critical sections take 5 to 120 ms and a round trip or two).
/// From a generator of their own: the contender's other draws are not
/// moved.
pub(crate) fn bounds_of(config: &Config, who: usize, kind: Kind) -> Option<HoldBounds> {
    if !config.stuck || kind.is_election() || who % 2 == 1 {
        return None;
    }
    let mut rng = fastrand::Rng::with_seed(
        config.seed ^ 0x57c4_b0d5_0000_0000 ^ ((who as u64 + 1) << 24) ^ ((kind as u64 + 1) << 8),
    );
    let mut bounds = HoldBounds::new().silence(rng.millis(200, 800));
    if rng.below(3) == 0 {
        bounds = bounds.duration(rng.millis(1500, MAX_HOLD_BOUND.as_millis() as u64));
    }
    Some(bounds)
}

/// The generator of a bounded seat's choice to get stuck (its own, so an
/// unbounded contender's draws are those of a run without stuck holders).
pub(crate) fn stuck_rng(config: &Config, who: usize, task: usize, kind: Kind) -> fastrand::Rng {
    fastrand::Rng::with_seed(
        config.seed
            ^ 0x0057_0c4e_d000_0000
            ^ ((who as u64 + 1) << 40)
            ^ ((task as u64) << 20)
            ^ (kind as u64 + 1),
    )
}

/// One time in this many, a bounded holder's critical section gets stuck
/// after its read.
pub(crate) const STUCK_ONE_IN: u64 = 3;

/// The longest a stuck task waits for the checker's verdict before it wakes
/// anyway (the checker's deadlines are seconds; this only keeps the wait
/// bounded if the checker is gone).
const STUCK_CAP: Duration = Duration::from_secs(120);

/// Starts watching a stuck hold from where its holder runs (the caller's
/// runtime): when its `lost()` fires (the first of its holds', for a
/// multi-lock), recorded in the slot. Ends with the hold (a release ends
/// `lost()` too).
pub(crate) fn watch_loss(fence: &Fence) -> LostSlot {
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
pub(crate) fn feed_by_timer(fence: &Fence, silence: Duration, stop: Arc<AtomicBool>) {
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
pub(crate) async fn stay_stuck(done: oneshot::Receiver<()>) {
    let _ = tokio::time::timeout(STUCK_CAP, done).await;
}

/// The checker: judges each stuck hold it is handed, on the harness's
/// runtime and with its own session (`raw`: straight to the server), until
/// every sender is gone and every check has ended.
pub(crate) async fn checker(
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
            &server_stalls(),
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
