//! [`LeaderSelector`]: Curator's leader selector on the lock engine: a
//! function of the user's runs while leader and is cancelled when the term
//! ends.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::{FutureExt, Stream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;
use zk_curator_framework::{Error, Framework, LockLoss, Result};

use super::election::{Candidate, Election, Next};
use super::sealed::Sealed as _;
use super::term::{LeaderTerm, Leadership};
use super::LeaderElection;
use crate::layout::Layout;
use crate::mutex::LOCK_NAME;

/// Whether a selector's streams end with a last [`Leadership::NotLeader`]
/// when it is closed while leader: no (the latch's
/// [`CloseMode`](super::CloseMode) asks; a selector has no such choice).
const NOTIFY_LEADER_ON_CLOSE: bool = false;

/// The work a [`LeaderSelector`] runs while leader (Curator's
/// `LeaderSelectorListener.takeLeadership`).
///
/// The returned future runs for as long as the term lasts. When it
/// completes, leadership is given up. When the term ends first (its
/// [`lost`](crate::Hold::lost) fires), or the selector is closed, or
/// [`interrupt_leadership`](LeaderSelector::interrupt_leadership) is called,
/// the future is dropped at its current await point: cancelled, the way
/// Curator interrupts the leader's thread. Keep what must not be cut short
/// behind ZooKeeper writes fenced by the term
/// ([`Hold::fence`](crate::Hold::fence)), or let a drop guard clean up.
///
/// A closure `Fn(LeaderTerm) -> impl Future<Output = ()>` is a listener too.
pub trait LeaderSelectorListener: Send + Sync + 'static {
    /// The work of one term.
    fn take_leadership(&self, term: LeaderTerm) -> BoxFuture<'static, ()>;
}

impl<F, Fut> LeaderSelectorListener for F
where
    F: Fn(LeaderTerm) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    fn take_leadership(&self, term: LeaderTerm) -> BoxFuture<'static, ()> {
        Box::pin(self(term))
    }
}

/// Whether a task is queued (campaigning or leading), and its handle.
#[derive(Default)]
struct Run {
    running: bool,
    task: Option<JoinHandle<()>>,
}

/// What the selector's task shares.
struct Core {
    election: Election,
    listener: Arc<dyn LeaderSelectorListener>,
    auto_requeue: AtomicBool,
    /// Counts calls of `interrupt_leadership`.
    interrupts: watch::Sender<u64>,
    run: Mutex<Run>,
}

impl Core {
    fn run_slot(&self) -> std::sync::MutexGuard<'_, Run> {
        self.run
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues a task unless one is queued: whether it did.
    fn queue(self: &Arc<Self>, runtime: &tokio::runtime::Handle) -> bool {
        let mut slot = self.run_slot();
        if slot.running {
            return false;
        }
        slot.running = true;
        // A new campaign: an earlier one's failure no longer answers.
        self.election.clear_failure();
        let span = tracing::info_span!("leader.selector", path = %self.election.path(), id = %self.election.id());
        slot.task = Some(runtime.spawn(run(self.clone()).instrument(span)));
        true
    }
}

/// What the handles share: dropping the last handle closes the selector.
struct Inner {
    core: Arc<Core>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.core.election.mark_closed(NOTIFY_LEADER_ON_CLOSE) {
            tracing::debug!(path = %self.core.election.path(), "last handle of a leader selector dropped; it closes");
        }
    }
}

/// Why a term of the selector ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// The leader's function returned.
    Returned,
    /// The leader's function panicked.
    Panicked,
    /// The term was lost.
    Lost(LockLoss),
    /// `interrupt_leadership` was called.
    Interrupted,
    /// The selector was closed.
    Closed,
}

/// Runs a function of yours while this participant leads an election
/// (Curator's `LeaderSelector`, on its node layout: Rust and JVM selectors
/// on one path take part in one election).
///
/// # Layout
///
/// Participants queue as an
/// [`InterProcessMutex`](crate::InterProcessMutex) does on the path
/// (protected ephemeral sequential `<path>/_c_<uuid>-lock-<seq>` nodes, each
/// waiter watching only the node right ahead of it), the node data being
/// the participant id (or the framework's holder identity without one).
///
/// # Terms
///
/// When the selector leads, the listener's
/// [`take_leadership`](LeaderSelectorListener::take_leadership) gets the
/// [`LeaderTerm`] and its future runs. Leadership ends, and the node is
/// deleted, when the future completes, or when it is cancelled (dropped):
/// the term is lost (error policy, session, node; see [`LeaderTerm`]),
/// [`interrupt_leadership`](Self::interrupt_leadership) is called, or the
/// selector is closed. Then the selector queues again if
/// [`auto_requeue`](Self::auto_requeue) is on, and otherwise waits for
/// [`requeue`](Self::requeue).
///
/// Cheap to clone: clones are one participant.
///
/// # Examples
/// ```no_run
/// # async fn demo(framework: zk_curator::Framework) -> zk_curator::Result<()> {
/// use zk_curator::{LeaderSelector, LeaderTerm};
///
/// let selector = LeaderSelector::with_id(framework, "/services/scheduler/leader", "host-7",
///     |term: LeaderTerm| async move {
///         println!("leading with token {}", term.fencing_token());
///         // ... the leader's work: dropped if the term is lost ...
///     },
/// )?;
/// selector.auto_requeue(true);
/// selector.start()?;
/// // ...
/// selector.close().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaderSelector {
    inner: Arc<Inner>,
}

impl fmt::Debug for LeaderSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderSelector")
            .field("election", &self.inner.core.election)
            .field("auto_requeue", &self.is_auto_requeue())
            .field("queued", &self.inner.core.run_slot().running)
            .finish()
    }
}

impl LeaderSelector {
    /// A selector on `path` running `listener` while leader; its node
    /// carries the framework's
    /// [holder identity](zk_curator_framework::Framework::holder_identity).
    /// Nothing is sent until [`start`](Self::start).
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a path that breaks ZooKeeper's rules, is
    /// `/`, or lies in the server's reserved `/zookeeper` tree. Nothing is
    /// sent.
    pub fn new(
        framework: Framework,
        path: &str,
        listener: impl LeaderSelectorListener,
    ) -> Result<Self> {
        Self::with_id(framework, path, "", listener)
    }

    /// As [`new`](Self::new), for the participant `id` (the node data;
    /// Curator's `setId`).
    ///
    /// # Errors
    /// As [`new`](Self::new); [`Error::RequestTooLarge`] for an id too long
    /// for the framework's packet limit.
    pub fn with_id(
        framework: Framework,
        path: &str,
        id: impl Into<String>,
        listener: impl LeaderSelectorListener,
    ) -> Result<Self> {
        Self::with_layout(framework, path, id, Layout::Curator, listener)
    }

    /// As [`with_id`](Self::with_id), in `layout`. In [`Layout::Kazoo`] the
    /// selector is a participant of kazoo's `Election` (its nodes are a
    /// kazoo `Lock`'s): a Python service's `Election` on the same path and
    /// this selector lead one at a time.
    ///
    /// # Errors
    /// As [`with_id`](Self::with_id).
    pub fn with_layout(
        framework: Framework,
        path: &str,
        id: impl Into<String>,
        layout: Layout,
        listener: impl LeaderSelectorListener,
    ) -> Result<Self> {
        let election = Election::new(framework, path, layout, LOCK_NAME, id.into())?;
        Ok(LeaderSelector {
            inner: Arc::new(Inner {
                core: Arc::new(Core {
                    election,
                    listener: Arc::new(listener),
                    auto_requeue: AtomicBool::new(false),
                    interrupts: watch::Sender::new(0),
                    run: Mutex::default(),
                }),
            }),
        })
    }

    /// Whether the selector queues again by itself after each term
    /// (Curator's `autoRequeue`); also whether it keeps trying after a
    /// failure to queue. Off by default; may be changed at any time (it is
    /// read when a term ends).
    pub fn auto_requeue(&self, enabled: bool) {
        self.inner
            .core
            .auto_requeue
            .store(enabled, Ordering::Release);
    }

    /// Whether [`auto_requeue`](Self::auto_requeue) is on.
    pub fn is_auto_requeue(&self) -> bool {
        self.inner.core.auto_requeue.load(Ordering::Acquire)
    }

    /// Starts: queues for leadership in a task of the selector's own.
    /// Returns at once.
    ///
    /// # Errors
    /// [`Error::Closed`] for a closed selector; [`Error::InvalidArgument`]
    /// if already started, or when called outside a tokio runtime.
    pub fn start(&self) -> Result<()> {
        let runtime = runtime("start")?;
        self.election().mark_started("leader selector")?;
        self.inner.core.queue(&runtime);
        Ok(())
    }

    /// Queues for leadership again, unless the selector is queued already
    /// or leads (Curator's `requeue`): whether it queued.
    ///
    /// # Errors
    /// [`Error::NotStarted`] before [`start`](Self::start);
    /// [`Error::Closed`] once closed; [`Error::InvalidArgument`] outside a
    /// tokio runtime.
    pub fn requeue(&self) -> Result<bool> {
        let runtime = runtime("requeue")?;
        let status = self.election().status();
        if status.closed {
            return Err(Error::Closed);
        }
        if !status.started {
            return Err(Error::NotStarted);
        }
        Ok(self.inner.core.queue(&runtime))
    }

    /// Ends the current term, if the selector leads: its function is
    /// cancelled (dropped), its node deleted; it queues again if
    /// [`auto_requeue`](Self::auto_requeue) is on. Returns at once.
    pub fn interrupt_leadership(&self) {
        if self.has_leadership() {
            tracing::info!(path = %self.path(), "leadership interrupted");
            self.inner.core.interrupts.send_modify(|count| *count += 1);
        }
    }

    /// The selector's leadership now, then each change (as
    /// [`LeaderLatch::leadership_changes`](super::LeaderLatch::leadership_changes);
    /// a closed selector's streams end without a last `NotLeader`).
    pub fn leadership_changes(&self) -> impl Stream<Item = Leadership> + Send + 'static {
        self.election().changes()
    }

    /// Leaves the election: a running function is cancelled (dropped), a
    /// leader's node deleted before this returns, a waiting one's in the
    /// background, and so is the node of a term already lost (this then
    /// returns at once, whatever the connection does). Closing a closed selector does nothing; a closed
    /// selector cannot start again.
    ///
    /// # Errors
    /// Errors no retry can fix while deleting a leader's node, such as
    /// [`Error::NoAuth`] (logged; the node goes with its session). A term
    /// already lost, or a framework already closed, is no error.
    ///
    /// # Cancel safety
    /// The selector is closed from the first poll on; a dropped close lets
    /// the selector's task finish on its own.
    pub async fn close(&self) -> Result<()> {
        let span = tracing::info_span!("leader.selector.close", path = %self.path());
        if self.election().mark_closed(NOTIFY_LEADER_ON_CLOSE) {
            tracing::info!(parent: &span, "leader selector closing");
        }
        let task = self.inner.core.run_slot().task.take();
        if let Some(task) = task {
            if let Err(join) = task.instrument(span).await {
                tracing::error!(%join, "the leader selector task failed");
            }
        }
        Ok(())
    }
}

impl super::sealed::Sealed for LeaderSelector {
    fn election(&self) -> &Election {
        &self.inner.core.election
    }
}

impl LeaderElection for LeaderSelector {}

/// The current runtime, for spawning the selector's task.
fn runtime(what: &str) -> Result<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current().map_err(|_| {
        Error::InvalidArgument(format!("LeaderSelector::{what} needs a tokio runtime"))
    })
}

/// One queued selector: campaign, run the function for the term, give the
/// node back; again while auto-requeue is on.
async fn run(core: Arc<Core>) {
    let mut queued = Queued {
        core: &core,
        dequeued: false,
    };
    if let Err(err) = core.election.run(&mut queued).await {
        tracing::warn!(%err, "the term's node could not be deleted");
    }
    if !queued.dequeued {
        core.run_slot().running = false;
    }
}

/// The campaigns of one queued task.
struct Queued<'a> {
    core: &'a Core,
    /// Whether the task already said, under the slot's lock, that it no
    /// longer runs (a later task may have been queued since).
    dequeued: bool,
}

impl Candidate for Queued<'_> {
    fn notify_leader_when_framework_closes(&self) -> bool {
        NOTIFY_LEADER_ON_CLOSE
    }

    /// A selector keeps trying only with auto-requeue on; otherwise
    /// `requeue` tries again. The task stops counting as queued before the
    /// failure is recorded, both under the slot's lock: a `requeue` made on
    /// seeing the failure queues a new task (and clears the failure), and
    /// one made just before finds this task still queued, the failure not
    /// yet shown.
    fn campaign_again_after(&mut self, _err: &Error, give_up: impl FnOnce()) -> bool {
        let mut slot = self.core.run_slot();
        if self.core.auto_requeue.load(Ordering::Acquire) {
            return true;
        }
        slot.running = false;
        self.dequeued = true;
        give_up();
        false
    }

    fn lead(&mut self, term: LeaderTerm) -> impl Future<Output = Next> + Send + '_ {
        // Interrupts asked for before the term began are not for it.
        let interrupts = *self.core.interrupts.borrow();
        async move {
            let core = self.core;
            let end = lead(core, &term, interrupts).await;
            tracing::info!(node = %term.node().path(), ?end, "leadership given up");
            if end == End::Closed {
                return Next::Stop;
            }
            // Whether to queue again is decided, under the slot's lock,
            // before the end of the term shows (leadership no longer
            // reported, the node gone): whoever sees it and calls `requeue`
            // finds this task either going on (auto-requeue) or done, never
            // about to stop.
            let mut slot = core.run_slot();
            if !core.election.is_closed() && core.auto_requeue.load(Ordering::Acquire) {
                return Next::Campaign;
            }
            slot.running = false;
            self.dequeued = true;
            Next::Stop
        }
    }
}

/// Runs the listener's function for `term` until it returns or the term
/// ends otherwise (the function is then dropped).
async fn lead(core: &Core, term: &LeaderTerm, interrupts_before: u64) -> End {
    let listener = &core.listener;
    let work =
        std::panic::catch_unwind(AssertUnwindSafe(|| listener.take_leadership(term.clone())));
    let work = match work {
        Ok(work) => AssertUnwindSafe(work).catch_unwind(),
        Err(_) => {
            tracing::error!("the leader's function panicked");
            return End::Panicked;
        }
    };
    let mut interrupts = core.interrupts.subscribe();
    let interrupted = async move {
        if interrupts
            .wait_for(|count| *count != interrupts_before)
            .await
            .is_err()
        {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        biased;
        () = core.election.stopped() => End::Closed,
        loss = term.lost() => End::Lost(loss),
        () = interrupted => End::Interrupted,
        done = work => match done {
            Ok(()) => End::Returned,
            Err(_) => {
                tracing::error!("the leader's function panicked");
                End::Panicked
            }
        },
    }
}

impl LeaderSelector {
    /// Sets the value this selector proclaims at the start of each of its
    /// terms (as [`LeaderLatch::with_value`](crate::LeaderLatch::with_value)).
    #[must_use]
    pub fn with_value(self, value: impl Into<Vec<u8>>) -> Self {
        self.election().proclaimer().set(value.into());
        self
    }

    /// Makes the selector step down when asked (as
    /// [`LeaderLatch::make_revocable`](crate::LeaderLatch::make_revocable)): its function is cancelled, its
    /// term ends with [`LockLoss::Revoked`], and it requeues if
    /// [`auto_requeue`](Self::auto_requeue) is on.
    pub fn make_revocable(&self) {
        self.election().set_revocable(true);
    }

    /// Stops stepping down on request, from the next term on.
    pub fn clear_revocable(&self) {
        self.election().set_revocable(false);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A selector without auto-requeue whose campaign fails for good: by the
    /// time the campaign loop has given up and the failure shows, the
    /// selector no longer counts as queued, so a `requeue` made on seeing
    /// the failure queues again. The framework is never started, so every
    /// campaign fails at once with `NotStarted`; the loop is driven here
    /// without the task's epilogue, which would otherwise hide the order.
    #[tokio::test]
    async fn a_campaign_given_up_leaves_the_selector_free_to_requeue() {
        let framework = Framework::builder()
            .connect_string("127.0.0.1:2181")
            .build()
            .unwrap();
        let selector =
            LeaderSelector::with_id(framework, "/gave-up", "a", |_term: LeaderTerm| async {})
                .unwrap();
        selector.election().mark_started("leader selector").unwrap();
        let core = &selector.inner.core;
        // As `Core::queue` leaves it for the task it spawns.
        core.run_slot().running = true;

        let mut queued = Queued {
            core,
            dequeued: false,
        };
        core.election.run(&mut queued).await.unwrap();

        // The failure shows...
        let seen = selector.await_leadership().await;
        assert_eq!(seen.err(), Some(Error::NotStarted));
        // ...and asking to queue again, right then, does.
        assert!(
            selector.requeue().unwrap(),
            "the failed campaign still counted as queued"
        );
        assert!(core.run_slot().running);
        selector.close().await.unwrap();
    }
}
