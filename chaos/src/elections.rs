//! The elections: each contender's [`LeaderLatch`] (in a slot that
//! replaces it with a new one when the contender gives leadership up) and
//! its [`LeaderSelector`], a leader's term (critical sections back to back,
//! recorded as one hold), and the reader of each participant's
//! leadership-changes stream, which records every term it hands out that
//! had already ended. The elections' observers are in `observers.rs`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;
use zk_curator::{Framework, LeaderLatch, LeaderSelector, LeaderTerm, Leadership, LockLoss};

use crate::config::{counter_path, value_of, Draw, Kind};
use crate::place::{now, since};
use crate::section::{loss_signal, section, GiveUp, Record, Seat, Taken};
use crate::shared::Shared;

/// A contender's latch, started, and replaced by a new started one when
/// the contender gives leadership up (a closed latch cannot start again).
/// A term that is lost is not given up: the latch queues again by itself.
pub(crate) struct LatchSlot {
    pub(crate) shared: Arc<Shared>,
    pub(crate) framework: Framework,
    pub(crate) path: String,
    pub(crate) id: String,
    pub(crate) current: Mutex<LeaderLatch>,
}

impl LatchSlot {
    pub(crate) fn start(
        shared: &Arc<Shared>,
        framework: &Framework,
        path: &str,
        id: String,
    ) -> Arc<LatchSlot> {
        let latch = LeaderLatch::new(framework.clone(), path, id.clone())
            .unwrap()
            .with_value(value_of(&id));
        latch.start().unwrap();
        let watched = latch.clone();
        watch_leadership(shared.clone(), Kind::Latch, move || {
            watched.leadership_changes()
        });
        Arc::new(LatchSlot {
            shared: shared.clone(),
            framework: framework.clone(),
            path: path.to_owned(),
            id,
            current: Mutex::new(latch),
        })
    }

    /// The latch started now.
    pub(crate) fn latch(&self) -> LeaderLatch {
        self.current.lock().unwrap().clone()
    }
}

impl GiveUp for LatchSlot {
    /// Closes the latch (its node goes before this returns; a close that
    /// fails leaves the node to its session) and queues a new one.
    fn give_up(&self) -> BoxFuture<'_, ()> {
        async move {
            let _ = self.latch().close().await;
            let next = LeaderLatch::new(self.framework.clone(), &self.path, self.id.clone())
                .unwrap()
                .with_value(value_of(&self.id));
            next.start().unwrap();
            let watched = next.clone();
            watch_leadership(self.shared.clone(), Kind::Latch, move || {
                watched.leadership_changes()
            });
            *self.current.lock().unwrap() = next;
        }
        .boxed()
    }
}

/// A leader's term: critical sections back to back, from the moment it
/// leads until a length of its choosing has passed (it then gives
/// leadership up) or, with `watch_loss`, until the term is lost. Recorded
/// as one interval. With `pause`, its first section has a process pause.
pub(crate) async fn lead_term(
    seat: &Seat,
    taken: &Taken,
    asked: Option<Instant>,
    rng: &mut fastrand::Rng,
    watch_loss: bool,
    pause: bool,
) {
    let length = rng.millis(200, 2000);
    let mut record = Record::begin(seat, taken, asked);
    let mut lost = loss_signal(taken, watch_loss);
    let mut pause = pause;
    while since(record.interval.start) < length && !seat.shared.stop.load(Ordering::SeqCst) {
        let paused = std::mem::take(&mut pause);
        if section(seat, taken, &mut record, &mut lost, rng, paused).await {
            break;
        }
    }
    record.finished = true;
}

/// Starts a contender's selector on the election path, with auto-requeue:
/// each of its terms is a [`lead_term`]. The term does not watch its loss
/// itself: the selector cancels it when the term ends. A term with a
/// process pause, or every term under `ZK_CHAOS_BREAK=loss`, runs in a task
/// of its own, which the selector cannot cancel.
pub(crate) fn start_selector(
    shared: Arc<Shared>,
    who: usize,
    framework: Framework,
    rng: fastrand::Rng,
    root: &str,
) -> LeaderSelector {
    let seat_shared = shared.clone();
    let seat = Arc::new(Seat {
        shared,
        who,
        task: 0,
        kind: Kind::Selector,
        framework: framework.clone(),
        counter: counter_path(root, Kind::Selector),
        bounds: None,
        stuck_rng: Mutex::new((fastrand::Rng::with_seed(1), 0)),
    });
    let rng = Mutex::new(rng);
    // When the contender last began to want leadership: the selector's
    // start, then each term's end (the selector queues again after it). The
    // library's checks before a term come after it, so a stop of the
    // contender's place since then may fall between them and the term's
    // first instant: the term is then seen late (as a latch's is, from its
    // `await_leadership`), and left out of the token order.
    let queued = Arc::new(Mutex::new(now()));
    let lead = move |term: LeaderTerm| {
        let seat = seat.clone();
        let mut rng = rng.lock().unwrap().fork();
        let queued = queued.clone();
        async move {
            let asked = Some(*queued.lock().unwrap());
            // The term's end, however it ends (the selector may drop it).
            let _requeued = Requeued(queued);
            if seat.shared.stop.load(Ordering::SeqCst) {
                // The run is over: lead no more, until closed.
                return std::future::pending().await;
            }
            let taken = Taken::Term(term, None);
            let pause = rng.below(8) == 0
                && !seat.shared.stop.load(Ordering::SeqCst)
                && seat.shared.config.profile.pauses;
            let break_loss = seat.shared.config.break_loss;
            if pause || break_loss {
                let detached = async move {
                    lead_term(&seat, &taken, asked, &mut rng, !break_loss, pause).await;
                };
                let _ = tokio::spawn(detached).await;
            } else {
                lead_term(&seat, &taken, asked, &mut rng, false, false).await;
            }
        }
    };
    let path = format!("{root}/selector");
    let id = format!("contender-{who}");
    let selector = LeaderSelector::with_id(framework, &path, id.clone(), lead)
        .unwrap()
        .with_value(value_of(&id));
    selector.auto_requeue(true);
    selector.start().unwrap();
    let watched = selector.clone();
    watch_leadership(seat_shared, Kind::Selector, move || {
        watched.leadership_changes()
    });
    selector
}

/// Stamps, when dropped, the instant a selector's term ended: the
/// contender wants leadership again from then on.
struct Requeued(Arc<Mutex<Instant>>);

impl Drop for Requeued {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = now();
    }
}

/// Reads a participant's leadership-changes stream to its end, slowly (a pause
/// after each value, so that changes pile up between two reads), and with
/// [`Config::probe_leadership`](crate::Config::probe_leadership) now and then
/// the first value of a fresh one: a term handed out must not have ended
/// already. Its end by a lease gone stale
/// ([`LockLoss::Stale`]) is left out: it follows
/// from time alone, and real time passes between the stream's look and this
/// one.
pub(crate) fn watch_leadership<S>(
    shared: Arc<Shared>,
    kind: Kind,
    changes: impl Fn() -> S + Send + 'static,
) where
    S: futures::Stream<Item = Leadership> + Send + 'static,
{
    let check = move |shared: &Shared, change: Option<Leadership>, from: &str| {
        let Some(Leadership::Leader(term)) = change else {
            return;
        };
        let ended = term.loss().filter(|loss| *loss != LockLoss::Stale);
        shared.log(kind, |log| {
            log.handed_out += 1;
            if let Some(loss) = ended {
                log.ended_handouts
                    .push(format!("{} ended by {loss:?} ({from})", term.node().path()));
            }
        });
    };
    let stream = changes();
    let reader = shared.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(change) = stream.next().await {
            check(&reader, Some(change), "stream");
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..40))).await;
        }
    });
    if !shared.config.probe_leadership {
        return;
    }
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(fastrand::u64(50..400))).await;
            if shared.stop.load(Ordering::SeqCst) {
                return;
            }
            let mut fresh = std::pin::pin!(changes());
            match fresh.next().await {
                None => return,
                change => check(&shared, change, "probe"),
            }
        }
    });
}
