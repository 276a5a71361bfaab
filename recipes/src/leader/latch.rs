//! [`LeaderLatch`]: Curator's leader latch on the lock engine.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};

use futures::{Stream, StreamExt};
use tokio::task::JoinHandle;
use tracing::Instrument;
use zk_curator_framework::{Error, Framework, Result};

use super::election::{Candidate, Election, Next};
use super::sealed::Sealed as _;
use super::term::{LeaderTerm, Leadership};
use super::LeaderElection;
use crate::layout::{Layout, LATCH_NAME};

/// How [`LeaderLatch::close_with`] tells the latch's listeners and streams
/// (Curator's `CloseMode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CloseMode {
    /// Nobody is told: listeners get no last
    /// [`not_leader`](LeaderLatchListener::not_leader), and streams end
    /// without a last [`Leadership::NotLeader`] (the default, as in Curator).
    /// The term itself still ends: its [`lost`](crate::Hold::lost) completes.
    #[default]
    Silent,
    /// A leader's listeners get [`not_leader`](LeaderLatchListener::not_leader)
    /// and its streams a last [`Leadership::NotLeader`] before they end.
    NotifyLeader,
}

impl CloseMode {
    /// Whether a leader's streams end with a last [`Leadership::NotLeader`].
    fn notifies_leader(self) -> bool {
        self == CloseMode::NotifyLeader
    }
}

/// Where a latch is in its life (Curator's `LeaderLatch.State`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LatchState {
    /// Made, not started.
    Latent,
    /// Taking part in the election.
    Started,
    /// Closed (by [`LeaderLatch::close`], by dropping every handle, or
    /// because its framework was closed); it cannot start again.
    Closed,
}

/// Told of a latch's leadership changes (Curator's `LeaderLatchListener`).
///
/// Calls come one after another, in order, from a task of the latch's own,
/// never from the election itself: a slow listener delays other listeners,
/// not the election. Keep them short (spawn a task for slow work); a
/// panicking listener is logged and does not stop the others.
///
/// A closure `Fn(Leadership)` is a listener too.
pub trait LeaderLatchListener: Send + Sync + 'static {
    /// The latch became leader, for `term`.
    fn is_leader(&self, term: LeaderTerm);
    /// The latch is no longer leader (its term ended).
    fn not_leader(&self);
}

impl<F> LeaderLatchListener for F
where
    F: Fn(Leadership) + Send + Sync + 'static,
{
    fn is_leader(&self, term: LeaderTerm) {
        self(Leadership::Leader(term));
    }

    fn not_leader(&self) {
        self(Leadership::NotLeader);
    }
}

type Entry = (u64, Arc<dyn LeaderLatchListener>);

/// The registered listeners of one latch.
#[derive(Default)]
struct Listeners {
    entries: Mutex<(u64, Vec<Entry>)>,
}

impl Listeners {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, Vec<Entry>)> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn add(self: &Arc<Self>, listener: Arc<dyn LeaderLatchListener>) -> LatchListenerHandle {
        let mut entries = self.lock();
        entries.0 += 1;
        let id = entries.0;
        entries.1.push((id, listener));
        LatchListenerHandle {
            id,
            listeners: Arc::downgrade(self),
            detached: false,
        }
    }

    fn remove(&self, id: u64) {
        self.lock().1.retain(|(entry, _)| *entry != id);
    }

    fn notify(&self, change: &Leadership) {
        let listeners: Vec<Arc<dyn LeaderLatchListener>> =
            self.lock().1.iter().map(|(_, l)| l.clone()).collect();
        for listener in listeners {
            let call = std::panic::AssertUnwindSafe(|| match change {
                Leadership::Leader(term) => listener.is_leader(term.clone()),
                Leadership::NotLeader => listener.not_leader(),
            });
            if std::panic::catch_unwind(call).is_err() {
                tracing::warn!("a leader latch listener panicked");
            }
        }
    }
}

/// Keeps a latch listener registered; dropping it unregisters the listener
/// (use [`LatchListenerHandle::detach`] to keep it for the latch's life).
#[must_use = "dropping the handle unregisters the listener"]
#[derive(Debug)]
pub struct LatchListenerHandle {
    id: u64,
    listeners: Weak<Listeners>,
    detached: bool,
}

impl LatchListenerHandle {
    /// Keeps the listener registered for as long as the latch lives.
    pub fn detach(mut self) {
        self.detached = true;
    }
}

impl Drop for LatchListenerHandle {
    fn drop(&mut self) {
        if self.detached {
            return;
        }
        if let Some(listeners) = self.listeners.upgrade() {
            listeners.remove(self.id);
        }
    }
}

/// What the latch's tasks share.
struct Core {
    election: Election,
    listeners: Arc<Listeners>,
}

/// What the handles share: dropping the last handle closes the latch.
struct Inner {
    core: Arc<Core>,
    task: Mutex<Option<JoinHandle<Result<()>>>>,
}

impl Inner {
    fn take_task(&self) -> Option<JoinHandle<Result<()>>> {
        self.task
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The election task sees the close, and gives up the node itself.
        if self
            .core
            .election
            .mark_closed(CloseMode::Silent.notifies_leader())
        {
            tracing::debug!(path = %self.core.election.path(), "last handle of a leader latch dropped; it closes");
        }
    }
}

/// A participant in a leader election that stays a candidate until closed
/// (Curator's `LeaderLatch`, on its node layout, so Rust and JVM services
/// take part in one election).
///
/// # Layout
///
/// Each started latch keeps one protected ephemeral sequential node
/// `<path>/_c_<uuid>-latch-<seq>` whose data is the latch's id (or, with an
/// empty id, the framework's
/// [holder identity](zk_curator_framework::Framework::default_node_data)).
/// The first node in sequence order leads; every other waits for the node
/// right ahead of it only, so a departure wakes one participant (no herd).
/// It is the lock engine's queue
/// ([`LockInternals`](zk_curator_framework::lock_internals::LockInternals)),
/// with one node per latch even for several latches of one framework.
///
/// # Terms
///
/// Each time the latch leads it gets a [`LeaderTerm`], a lock hold with
/// [`lost`](crate::Hold::lost), [`is_valid`](crate::Hold::is_valid),
/// [`fence`](crate::Hold::fence) and [`fencing_token`](crate::Hold::fencing_token)
/// under the framework's error policy (the guide's "Safety" chapter,
/// `docs/guide/safety.md`). A term once lost
/// is never trusted again: its [`lost`](crate::Hold::lost) completes and its
/// fence refuses, whatever happens next.
///
/// What the latch does next depends on what ended the term:
///
/// * **The connection** (`Suspended` under the standard policy, or the
///   lease run out): the latch *keeps its place*, as Curator's does. Its
///   node stays; once the connection is back on the **same session**, if
///   the node is still first, a **new term** begins on the same node, with
///   a greater [fencing token](crate::Hold::fencing_token) (the node's zxid,
///   the next per-node count, as a cohort hand-off gives); if it is not
///   first, the latch waits in its place. So a network blip shorter than
///   the session timeout leaves the same leader, with a new term, instead
///   of handing leadership to another participant. Why the old term's
///   writes are all applied before the new term's is written down on
///   [`LockInternals::resume`](zk_curator_framework::lock_internals::LockInternals::resume).
/// * **The session expired, the node was deleted** (or the place could not
///   be kept): the latch withdraws that node and queues a new one at the
///   back, on the framework's next session if the old one is gone, for as
///   long as it is not closed.
///
/// # Life
///
/// [`start`](Self::start) begins taking part (in a task of its own);
/// [`close`](Self::close) gives leadership up and leaves the election (so
/// does dropping every handle, in the background). A closed latch cannot
/// start again: make a new one.
///
/// Cheap to clone: clones are one participant.
///
/// # Examples
/// ```no_run
/// # async fn demo(framework: zk_curator::Framework) -> zk_curator::Result<()> {
/// use zk_curator::{LeaderElection, LeaderLatch};
///
/// let latch = LeaderLatch::new(framework, "/services/compactor/leader", "host-7")?;
/// latch.start()?;
/// let term = latch.await_leadership().await?;
/// tokio::select! {
///     loss = term.lost() => eprintln!("no longer leader: {loss}"),
///     () = async {
///         // ... lead; ZooKeeper writes through term.fence()? ...
///     } => {}
/// }
/// latch.close().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaderLatch {
    inner: Arc<Inner>,
}

impl fmt::Debug for LeaderLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderLatch")
            .field("election", &self.inner.core.election)
            .finish()
    }
}

impl LeaderLatch {
    /// A latch on `path` for the participant `id` (its node data; Curator's
    /// participant id). With an empty id, the node carries the framework's
    /// [holder identity](zk_curator_framework::Framework::holder_identity)
    /// instead, which [`participants`](Self::participants) reads back.
    /// Nothing is sent until [`start`](Self::start).
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a path that breaks ZooKeeper's rules, is
    /// `/`, or lies in the server's reserved `/zookeeper` tree;
    /// [`Error::RequestTooLarge`] for an id too long for the framework's
    /// packet limit. Nothing is sent.
    pub fn new(framework: Framework, path: &str, id: impl Into<String>) -> Result<Self> {
        Self::with_layout(framework, path, id, Layout::Curator)
    }

    /// As [`new`](Self::new), in `layout`. In [`Layout::Kazoo`] the latch
    /// is a participant of kazoo's `Election` (its nodes are a kazoo
    /// `Lock`'s, `<uuid hex>__lock__<seq>`): a Python service's `Election`
    /// on the same path and this latch lead one at a time.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_layout(
        framework: Framework,
        path: &str,
        id: impl Into<String>,
        layout: Layout,
    ) -> Result<Self> {
        let election = Election::new(framework, path, layout, LATCH_NAME, id.into())?;
        Ok(LeaderLatch {
            inner: Arc::new(Inner {
                core: Arc::new(Core {
                    election,
                    listeners: Arc::default(),
                }),
                task: Mutex::new(None),
            }),
        })
    }

    /// Where the latch is in its life.
    pub fn state(&self) -> LatchState {
        let status = self.election().status();
        match (status.closed, status.started) {
            (true, _) => LatchState::Closed,
            (false, true) => LatchState::Started,
            (false, false) => LatchState::Latent,
        }
    }

    /// Starts taking part in the election, in a task of the latch's own: it
    /// queues the latch's node (waiting for the framework's session if
    /// need be), reports each term, and queues again after a term ends,
    /// until the latch is closed. Returns at once.
    ///
    /// # Errors
    /// [`Error::Closed`] for a closed latch; [`Error::InvalidArgument`] if
    /// the latch was already started, or when called outside a tokio
    /// runtime.
    pub fn start(&self) -> Result<()> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::InvalidArgument("LeaderLatch::start needs a tokio runtime".into())
        })?;
        self.election().mark_started("leader latch")?;
        let core = &self.inner.core;
        let span = tracing::info_span!("leader.latch", path = %core.election.path(), id = %core.election.id());
        let task = runtime.spawn(run(core.clone()).instrument(span.clone()));
        *self
            .inner
            .task
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(task);
        runtime.spawn(dispatch(core.clone()).instrument(span));
        Ok(())
    }

    /// The latch's leadership now, then each change: a
    /// [`Leadership::Leader`] per term, a [`Leadership::NotLeader`] when it
    /// ends. Changes that come faster than they are read are merged, but a
    /// term is always followed by a `NotLeader` before the next term. The
    /// stream ends when the latch is closed (with a last `NotLeader` for a
    /// leader closed with [`CloseMode::NotifyLeader`]). Values, not borrows:
    /// holding one never holds the latch up.
    pub fn leadership_changes(&self) -> impl Stream<Item = Leadership> + Send + 'static {
        self.election().changes()
    }

    /// Registers a listener for leadership changes from now on; it stays
    /// registered while the handle lives (see [`LeaderLatchListener`]).
    pub fn add_listener(&self, listener: impl LeaderLatchListener) -> LatchListenerHandle {
        self.inner.core.listeners.add(Arc::new(listener))
    }

    /// [`close_with`](Self::close_with) [`CloseMode::Silent`] (Curator's
    /// default).
    ///
    /// # Errors
    /// As [`close_with`](Self::close_with).
    ///
    /// # Cancel safety
    /// As [`close_with`](Self::close_with).
    pub async fn close(&self) -> Result<()> {
        self.close_with(CloseMode::Silent).await
    }

    /// Leaves the election: the latch stops reporting leadership at once
    /// (so [`has_leadership`](LeaderElection::has_leadership) is false before anyone
    /// else can lead), then its node is deleted: a leader's before this
    /// returns (its term ends; the next participant leads), a waiting one's
    /// in the background, and so is the node of a term already lost (this
    /// then returns at once, whatever the connection does: it never waits
    /// for a reconnection). `mode` says whether listeners and streams hear
    /// of it. Closing a closed latch does nothing.
    ///
    /// # Errors
    /// Errors no retry can fix while deleting a leader's node, such as
    /// [`Error::NoAuth`]. A term already lost, or a framework already
    /// closed, is no error.
    ///
    /// # Cancel safety
    /// The latch is closed from the first poll on; a dropped close lets the
    /// latch's task delete the node on its own.
    pub async fn close_with(&self, mode: CloseMode) -> Result<()> {
        let span = tracing::info_span!("leader.latch.close", path = %self.path(), ?mode);
        if self.election().mark_closed(mode.notifies_leader()) {
            tracing::info!(parent: &span, "leader latch closing");
        }
        let Some(task) = self.inner.take_task() else {
            return Ok(());
        };
        match task.instrument(span).await {
            Ok(result) => result,
            Err(join) => {
                tracing::error!(%join, "the leader latch task failed");
                Ok(())
            }
        }
    }
}

impl super::sealed::Sealed for LeaderLatch {
    fn election(&self) -> &Election {
        &self.inner.core.election
    }
}

impl LeaderElection for LeaderLatch {}

/// The latch's election: campaign, lead until the term ends, give the node
/// back, again, until closed. Returns the last resignation's outcome.
async fn run(core: Arc<Core>) -> Result<()> {
    let mut candidate: &Core = &core;
    core.election.run(&mut candidate).await
}

/// A latch stays a candidate until it is closed.
impl Candidate for &Core {
    /// A latch closed with its framework tells its leader's streams
    /// ([`CloseMode::NotifyLeader`]).
    fn notify_leader_when_framework_closes(&self) -> bool {
        CloseMode::NotifyLeader.notifies_leader()
    }

    fn campaign_again_after(&mut self, _err: &Error, _give_up: impl FnOnce()) -> bool {
        true
    }

    /// A latch keeps its place through a suspension its session survives,
    /// as Curator's does (see [`LeaderLatch`], "Terms").
    fn keeps_place(&self) -> bool {
        true
    }

    fn lead(&mut self, term: LeaderTerm) -> impl Future<Output = Next> + Send + '_ {
        let stopped = self.election.stopped();
        async move {
            tokio::select! {
                loss = term.lost() => {
                    tracing::info!(node = %term.node().path(), %loss, "leadership lost");
                    Next::Campaign
                }
                () = stopped => Next::Stop,
            }
        }
    }
}

/// Calls the listeners with each change, until the latch is closed.
async fn dispatch(core: Arc<Core>) {
    let mut changes = Box::pin(core.election.changes());
    let mut first = true;
    while let Some(change) = changes.next().await {
        // The state at start is not a change.
        if std::mem::take(&mut first) && change == Leadership::NotLeader {
            continue;
        }
        core.listeners.notify(&change);
    }
}

impl LeaderLatch {
    /// Sets the value this latch proclaims at the start of each of its
    /// terms (see [`LeaderTerm::proclaim`]), as its id is set at its
    /// creation: for use before [`start`](Self::start), as a builder.
    /// [`LeaderElection::proclaim`](super::LeaderElection::proclaim)
    /// changes it later.
    #[must_use]
    pub fn with_value(self, value: impl Into<Vec<u8>>) -> Self {
        self.election().proclaimer().set(value.into());
        self
    }

    /// Makes the latch step down when asked (the revocation protocol of
    /// elections; `zk-curator revoke PATH`, or
    /// [`Revoker::attempt_revoke`](crate::Revoker::attempt_revoke)
    /// on the leader's node): its term ends with [`LockLoss::Revoked`](crate::LockLoss::Revoked)
    /// (its fence refuses from then on), its node goes, the next
    /// participant leads, and the latch queues again at the back. From now
    /// on (the current term included) until
    /// [`clear_revocable`](Self::clear_revocable). Off by default. A
    /// request written into the node while the latch waits is acted on
    /// when it leads.
    pub fn make_revocable(&self) {
        self.election().set_revocable(true);
    }

    /// Stops stepping down on request, from the next term on.
    pub fn clear_revocable(&self) {
        self.election().set_revocable(false);
    }
}
