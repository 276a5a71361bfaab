//! The contenders: each a framework of its own behind links of its own
//! ([`Contender`]: a fault proxy per server in real time, a simulated link
//! in the simulator, its process at its link's place), the lock of each
//! kind it takes ([`Lock`]), and the loop each of its tasks runs on one
//! kind ([`contend`]): take the lock by a deadline, live the hold
//! (`section.rs`; a latch's term, `elections.rs`), release it, and now and
//! then write once more through a fence taken before the release.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use zk_curator::recipes::layout::Layout;
use zk_curator::recipes::InterProcessMultiLock;
use zk_curator::{
    CohortPolicy, Framework, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2,
    LeaderElection, WriteLock,
};
use zk_curator_testing::FaultProxy;

use crate::config::{counter_path, Config, Draw, Kind};
use crate::elections::{lead_term, LatchSlot};
use crate::place::{now, run_at, since, spawn_at, Link, Place, Target};
use crate::records::Wait;
use crate::section::{loss_signal, section, GiveUp, Record, Seat, Taken};
use crate::shared::Shared;
use crate::stuck;

/// A contender (or an observer): its framework, the links it reaches the
/// server through, and where it runs.
pub(crate) struct Contender {
    /// One fault proxy per server (in member order): the client's faults
    /// are on all of them at once.
    pub(crate) proxies: Vec<Box<dyn Link>>,
    pub(crate) framework: Framework,
    /// Where its framework and the tasks that use it run (its link's).
    pub(crate) place: Option<Arc<dyn Place>>,
    /// The faults that want its links silent now (see [`Contender::blackhole`]).
    silencers: Mutex<u32>,
}

impl Contender {
    /// A started framework, connected through fault proxies of its own, one
    /// per server of `target` (the client picks among them as it would
    /// among the servers).
    pub(crate) async fn connect(
        target: Target<'_>,
        config: &Config,
        cohort: Option<CohortPolicy>,
    ) -> Contender {
        let mut proxies: Vec<Box<dyn Link>> = Vec::new();
        for address in target.addresses() {
            proxies.push(Box::new(FaultProxy::start(address).await.unwrap()));
        }
        if let Target::Sim(sim) = target {
            proxies.push(sim.link());
        }
        let connect = proxies
            .iter()
            .map(|p| p.connect_string())
            .collect::<Vec<_>>()
            .join(",");
        // On an ensemble, a silent server is given up sooner, so that a
        // session moves within the faults' windows.
        let connection_timeout = match target {
            Target::Server(_) | Target::Sim(_) => Duration::from_secs(3),
            Target::Ensemble(_) => Duration::from_secs(1),
        };
        let session_timeout = config.session_timeout;
        let place = proxies.iter().find_map(|p| p.place());
        // Started where it runs: its session task is spawned by `start`.
        let framework = run_at(place.as_ref(), async move {
            let framework = Framework::builder()
                .connect_string(connect)
                .session_timeout(session_timeout)
                .connection_timeout(connection_timeout)
                .cohort(cohort)
                .build()
                .unwrap();
            framework.start().unwrap();
            framework
                .block_until_connected(Duration::from_secs(20))
                .await
                .unwrap();
            framework
        })
        .await
        .expect("the contender's place dropped its start");
        Contender {
            proxies,
            framework,
            place,
            silencers: Mutex::new(0),
        }
    }

    /// Starts `task` where the contender runs; its output comes through
    /// the receiver (an error if it was dropped unfinished).
    pub(crate) fn spawn<T: Send + 'static>(
        &self,
        task: impl Future<Output = T> + Send + 'static,
    ) -> oneshot::Receiver<T> {
        spawn_at(self.place.as_ref(), task)
    }

    /// Runs `task` where the contender runs, and waits for it.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        task: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        run_at(self.place.as_ref(), task).await
    }

    /// Silence on every server's link (`true`), or traffic again once no
    /// other fault wants silence: faults on one contender may overlap (a
    /// blackhole begun before a pause still runs when the pause's expiry
    /// silences the links), and the end of one must not lift another's
    /// silence. (It did: seed 4083's session was expired while its client,
    /// heard again, held a lock, which ZooKeeper never does.)
    pub(crate) fn blackhole(&self, on: bool) {
        let mut silencers = self.silencers.lock().unwrap();
        *silencers = if on {
            *silencers + 1
        } else {
            silencers.saturating_sub(1)
        };
        let silent = *silencers > 0;
        self.proxies.iter().for_each(|p| p.blackhole(silent));
    }

    /// Traffic again on every link, whatever faults wanted silence (the
    /// network heals).
    pub(crate) fn heal(&self) {
        *self.silencers.lock().unwrap() = 0;
        self.proxies.iter().for_each(|p| p.blackhole(false));
    }

    /// Closes every connection through its links.
    pub(crate) fn drop_connections(&self) {
        self.proxies.iter().for_each(|p| p.drop_connections());
    }
}

/// A lock of one kind, as one contender sees it.
#[derive(Clone)]
pub(crate) enum Lock {
    Mutex(InterProcessMutex),
    Write(WriteLock),
    Semaphore(InterProcessSemaphoreV2),
    Multi(InterProcessMultiLock),
    Latch(Arc<LatchSlot>),
}

impl Lock {
    /// `None` on timeout.
    pub(crate) async fn take(
        &self,
        kind: Kind,
        timeout: Duration,
    ) -> zk_curator::Result<Option<Taken>> {
        Ok(match (self, kind) {
            (Lock::Mutex(m), Kind::MutexTask) => m
                .acquire_timeout(timeout)
                .await?
                .then(|| Taken::Task(m.clone())),
            (Lock::Mutex(m), _) => m.try_lock_for(timeout).await?.map(Taken::Guard),
            (Lock::Write(w), _) => w.try_lock_for(timeout).await?.map(Taken::Write),
            (Lock::Semaphore(s), _) => s.acquire_timeout(timeout).await?.map(Taken::Lease),
            (Lock::Multi(m), _) => m
                .acquire_timeout(timeout)
                .await?
                .then(|| Taken::Multi(m.clone())),
            (Lock::Latch(slot), _) => slot
                .latch()
                .await_leadership_timeout(timeout)
                .await?
                .map(|term| Taken::Term(term, Some(slot.clone() as Arc<dyn GiveUp>))),
        })
    }
}

/// The lock of `kind` contender `who` takes, on `framework`, bounded if
/// it is a stuck holder.
pub(crate) fn lock_of(
    shared: &Arc<Shared>,
    framework: &Framework,
    root: &str,
    kind: Kind,
    who: usize,
) -> Lock {
    let fw = framework.clone();
    // A stuck holder's lock bounds its holds by default (see "Stuck
    // holders"); a semaphore's lease is bounded once granted.
    let bounds = stuck::bounds_of(&shared.config, who, kind).unwrap_or_default();
    let mutex = |mutex: InterProcessMutex| {
        mutex.set_hold_bounds(bounds).unwrap();
        Lock::Mutex(mutex)
    };
    let write = |rw: InterProcessReadWriteLock| {
        rw.set_hold_bounds(bounds).unwrap();
        Lock::Write(rw.write_lock())
    };
    match kind {
        Kind::MutexGuard => {
            mutex(InterProcessMutex::new(fw, &format!("{root}/mutex-guard")).unwrap())
        }
        Kind::MutexTask => {
            mutex(InterProcessMutex::new(fw, &format!("{root}/mutex-task")).unwrap())
        }
        Kind::WriteLock => {
            write(InterProcessReadWriteLock::new(fw, &format!("{root}/rw")).unwrap())
        }
        Kind::Semaphore2 => {
            Lock::Semaphore(InterProcessSemaphoreV2::new(fw, &format!("{root}/sem"), 2).unwrap())
        }
        Kind::MultiLock => {
            let multi = InterProcessMultiLock::from_paths(
                fw,
                &[&format!("{root}/multi-b"), &format!("{root}/multi-a")],
            )
            .unwrap();
            multi.set_hold_bounds(bounds).unwrap();
            Lock::Multi(multi)
        }
        Kind::KazooMutex => mutex(
            InterProcessMutex::with_layout(fw, &format!("{root}/kazoo-mutex"), Layout::Kazoo)
                .unwrap(),
        ),
        Kind::KazooWrite => write(
            InterProcessReadWriteLock::with_layout(
                fw,
                &format!("{root}/kazoo-rw"),
                Layout::Kazoo,
                format!("contender-{who}").as_bytes(),
            )
            .unwrap(),
        ),
        Kind::Latch => Lock::Latch(LatchSlot::start(
            shared,
            framework,
            &format!("{root}/latch"),
            format!("contender-{who}"),
        )),
        Kind::Selector => unreachable!("a selector runs its own critical sections"),
    }
}

/// A contender's task on one kind: takes the lock, lives the hold (a
/// critical section, or a latch's term), releases it, and now and then
/// writes once more through a fence taken before the release, until the
/// run stops; then (the faults over) until it has had the lock once more
/// by an acquire begun after the stop, each such acquire given a deadline
/// past the liveness bound, and recorded for rule 10 (see "Liveness").
pub(crate) async fn contend(
    shared: Arc<Shared>,
    (who, task): (usize, usize),
    kind: Kind,
    framework: Framework,
    lock: Lock,
    mut rng: fastrand::Rng,
    root: String,
) {
    let during_faults = 3 * shared.config.session_timeout;
    let bound = shared.config.liveness_bound();
    // After the stop: a waiter that is never woken overruns the bound
    // before its deadline.
    let after_faults = bound + Duration::from_secs(2);
    // The latest a pause or a stop of a place begun before the stop ends,
    // then the bound, and more: a task that has not had the lock by then
    // gives up (rule 10 has found it).
    let give_up = 3 * shared.config.session_timeout + bound + Duration::from_secs(2);
    let counter = counter_path(&root, kind);
    let seat = Seat {
        bounds: stuck::bounds_of(&shared.config, who, kind),
        stuck_rng: Mutex::new((stuck::stuck_rng(&shared.config, who, task, kind), 0)),
        shared,
        who,
        task,
        kind,
        framework,
        counter,
    };
    let shared = &seat.shared;
    // When this task first saw the stop (it goes on until it has had the
    // lock by an acquire begun after, or gives up).
    let mut stopped: Option<tokio::time::Instant> = None;
    loop {
        let stop = shared.stop.load(Ordering::SeqCst);
        if stop {
            let since_stop = *stopped.get_or_insert_with(now);
            if since(since_stop) > give_up {
                break;
            }
        }
        let asked = now();
        let deadline = if stop { after_faults } else { during_faults };
        let taken = lock.take(kind, deadline).await;
        let waited = since(asked);
        if shared.stop.load(Ordering::SeqCst) {
            let granted = matches!(taken, Ok(Some(_)));
            let ended = now();
            shared.log(kind, |log| {
                log.waits.push(Wait {
                    who,
                    task,
                    asked,
                    ended,
                    granted,
                })
            });
        }
        // (A stop of the place lets no deadline fire until it ends.)
        if waited > deadline + Duration::from_millis(1500) && !shared.host_paused_since(who, asked)
        {
            shared.log(kind, |log| log.late_acquires.push(waited));
        }
        let taken = match taken {
            Ok(Some(Taken::Lease(lease))) => {
                // A lease is bounded from its grant on (a semaphore has no
                // default bounds).
                if let Some(bounds) = seat.bounds {
                    lease.bound(bounds).unwrap();
                }
                Taken::Lease(lease)
            }
            Ok(Some(taken)) => taken,
            Ok(None) => {
                shared.log(kind, |log| log.timed_out += 1);
                continue;
            }
            Err(err) => {
                tracing::debug!(?kind, who, %err, "acquire failed");
                shared.log(kind, |log| log.acquire_errors += 1);
                tokio::time::sleep(rng.millis(50, 200)).await;
                continue;
            }
        };
        let watch_loss = !shared.config.break_loss;
        // No pause once the faults are over (see "Liveness"), nor in a run
        // whose profile has them off.
        let calm = shared.stop.load(Ordering::SeqCst) || !shared.config.profile.pauses;
        if kind == Kind::Latch {
            let pause = rng.below(8) == 0 && !calm;
            lead_term(&seat, &taken, Some(asked), &mut rng, watch_loss, pause).await;
        } else {
            // A pause expires the contender's session: as often per
            // contender with several tasks as with one.
            let pause =
                kind.holders() == 1 && rng.below(12 * shared.config.tasks as u64) == 0 && !calm;
            let mut record = Record::begin(&seat, &taken, Some(asked));
            let mut lost = loss_signal(&taken, watch_loss);
            section(&seat, &taken, &mut record, &mut lost, &mut rng, pause).await;
            record.finished = true;
        }
        // Now and then, a holder that writes once more after its release,
        // through a fence it took before: the server must never see it
        // (with cohorting, the release may have passed the node on).
        let late = (!kind.is_election() && rng.below(4) == 0)
            .then(|| taken.fence().ok())
            .flatten();
        let lost = taken.loss().is_some();
        // Lost and not connected: the release answers at once and leaves
        // the delete to the background (it never waits for the server).
        let offline = lost
            && !kind.is_election()
            && !seat
                .framework
                .state()
                .is_some_and(|state| state.is_connected());
        let releasing = now();
        taken.release().await;
        let took = since(releasing);
        if offline && shared.config.loss_seen_at_once && took > Duration::ZERO {
            shared.log(kind, |log| log.offline_releases.push(took));
        }
        // A multi-lock releases its two locks one after the other.
        let locks = if kind == Kind::MultiLock { 2 } else { 1 };
        if lost
            && took > crate::config::host_timed(shared.config.release_bound * locks)
            && !shared.host_paused_since(who, releasing)
        {
            shared.log(kind, |log| log.slow_releases.push(took));
        }
        if let Some(fence) = late {
            let late_path = format!("{root}/data/late");
            let accepted = fence.set_data(&late_path, b"late", None).await.is_ok();
            shared.log(kind, |log| {
                log.late_writes += 1;
                log.late_accepted += u64::from(accepted);
            });
        }
        // Had the lock by an acquire begun after the stop: done.
        if stop {
            break;
        }
    }
}
