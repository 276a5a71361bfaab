//! [`LockInternals`]: the acquire loop every lock recipe shares (Curator's
//! `LockInternals`), generic over a [`LockInternalsDriver`].
//!
//! # How an acquire works
//!
//! 1. A *protected* node `<path>/_c_<uuid>-<lock name><sequence>` is
//!    created, and the children of `<path>` are listed **in the same breath**:
//!    both requests are sent back to back before waiting for either answer.
//!    ZooKeeper answers a session's requests in order, so the listing already
//!    contains the new node; an uncontended acquire costs one round trip
//!    (Curator's costs two, the create and then the listing), and a whole
//!    acquire-release cycle two (Curator's three).
//! 2. The driver decides, from the sorted children, whether we hold the lock
//!    or which single node to watch (the predecessor for a mutex: one release
//!    wakes one waiter, no herd).
//! 3. If the watched node is already gone, the children are listed again at
//!    once; otherwise we wait for its deletion, then list again.
//!
//! # Failures
//!
//! * A connection loss during the create leaves the outcome unknown. The
//!   `_c_<uuid>-` prefix lets the retry list the parent and adopt the node
//!   if the create happened, instead of creating a second one.
//! * Every acquire holds a [`ContenderGuard`] from before the create is sent:
//!   an error, a timeout or a dropped future hands our node (or its prefix)
//!   to the background cleaner.
//! * A session lost while waiting (or our node deleted by someone else)
//!   restarts the acquire on the framework's next session, at the back of
//!   the queue, as long as the retry policy allows. Work is never carried
//!   silently from one session to the next: a node always belongs to the
//!   session that created it.

mod create;
mod deadline;
mod driver;
mod engine;
mod fence;
mod fencing;
mod guard;
mod hold;
mod local_queue;
mod release;
mod revocation;
mod shared_node;
mod wait;

use std::fmt;
use std::sync::Arc;

use tracing::Instrument;

pub use self::deadline::Wait;
pub use self::driver::{
    standard_gets_the_lock, standard_sort_key, LockInternalsDriver, ParticipantNode,
    PredicateResults, SortKey, StandardLockInternalsDriver,
};
use self::engine::Engine;
pub use self::fence::{Fence, FencedMulti};
pub use self::fencing::FencingToken;
pub use self::guard::ContenderGuard;
pub use self::hold::Hold;
use self::local_queue::LocalTurn;
pub use self::revocation::{
    Revocation, RevocationListener, RevocationSetting, Revoker, REVOKE_MESSAGE,
};
pub use crate::LockLoss;
use crate::{path, Error, Framework, Result, Session};

/// The longest participant node name: the protection prefix
/// (`_c_` + a UUID + `-`), the lock name and a ten-digit sequence.
const PROTECTED_NAME_EXTRA: usize = 3 + 36 + 1 + 10;

/// A participant node that holds the lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquiredNode {
    path: String,
    czxid: i64,
    session_id: i64,
    generation: u64,
    ephemeral: bool,
}

impl AcquiredNode {
    /// The node's full path (relative to the framework's namespace).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The node's name (last path component).
    pub fn name(&self) -> &str {
        path::split(&self.path).1
    }

    /// The fencing token: the zxid of the transaction that created the node.
    /// ZooKeeper's zxids grow strictly, and a holder's node is created after
    /// the previous holder's, so successive holders of one lock path get
    /// strictly increasing tokens. Hand it to the storage you protect, and
    /// let it refuse writes carrying a smaller token than it has seen.
    pub fn fencing_token(&self) -> i64 {
        self.czxid
    }

    /// The id of the session that created the node.
    pub fn session_id(&self) -> i64 {
        self.session_id
    }

    /// The framework session generation the node was created in.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether the node dies with its session.
    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral
    }
}

/// The shared acquire/release machinery of the lock recipes.
#[derive(Clone)]
pub struct LockInternals {
    framework: Framework,
    base_path: Arc<str>,
    lock_name: Arc<str>,
    max_leases: u32,
    driver: Arc<dyn LockInternalsDriver>,
}

impl fmt::Debug for LockInternals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockInternals")
            .field("base_path", &self.base_path)
            .field("lock_name", &self.lock_name)
            .field("max_leases", &self.max_leases)
            .field("driver", &self.driver)
            .finish()
    }
}

impl LockInternals {
    /// Machinery for participants named `lock_name` under `base_path`, of
    /// which `max_leases` may hold the lock at once.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a bad `base_path` (including `/` and the
    /// server's reserved `/zookeeper` tree) or a bad `lock_name`;
    /// [`Error::InvalidArgument`] for zero `max_leases`.
    pub fn new(
        framework: Framework,
        base_path: &str,
        lock_name: &str,
        max_leases: u32,
        driver: Arc<dyn LockInternalsDriver>,
    ) -> Result<Self> {
        path::validate_recipe_path(base_path)?;
        path::validate_node_name(lock_name)?;
        if max_leases == 0 {
            return Err(Error::InvalidArgument(
                "max_leases must be at least 1".into(),
            ));
        }
        Ok(LockInternals {
            framework,
            base_path: base_path.into(),
            lock_name: lock_name.into(),
            max_leases,
            driver,
        })
    }

    /// The framework this lock runs on.
    pub fn framework(&self) -> &Framework {
        &self.framework
    }

    /// The lock's path.
    pub fn base_path(&self) -> &str {
        &self.base_path
    }

    /// The name participants carry after their protection prefix.
    pub fn lock_name(&self) -> &str {
        &self.lock_name
    }

    /// How many participants may hold the lock at once.
    pub fn max_leases(&self) -> u32 {
        self.max_leases
    }

    /// Checks that a participant node carrying `data` can be created: its
    /// create must fit in the framework's
    /// [`max_packet_size`](crate::FrameworkBuilder::max_packet_size).
    /// Nothing is sent.
    ///
    /// # Errors
    /// [`Error::RequestTooLarge`], naming the create's size and the limit.
    pub fn check_node_data(&self, data: &[u8]) -> Result<()> {
        let name = "x".repeat(PROTECTED_NAME_EXTRA + self.lock_name.len());
        let node = path::join(&self.base_path, &name);
        let acl = self.framework.acl_for_path(&node);
        let create = crate::packet::Op::create_with(
            self.framework.namespace_len(),
            &node,
            data.len(),
            &acl,
            false,
        );
        crate::packet::check(create.alone(), self.framework.max_packet_size())
    }

    /// The driver.
    pub fn driver(&self) -> &Arc<dyn LockInternalsDriver> {
        &self.driver
    }

    /// Acquires as `request` says: creates a participant node carrying its
    /// data and waits, as long as its [`Wait`] allows, until the node holds
    /// the lock. Returns `Ok(None)` when the wait ends first: a
    /// [`Wait::Try`] that found the lock taken (our node is deleted again
    /// before this returns, in the background only if ZooKeeper cannot be
    /// reached within the connection timeout), or a [`Wait::Until`] whose
    /// deadline passed (the node is deleted in the background). A
    /// [`Wait::Forever`] ends only with a hold or an error (see
    /// [`until_held`]). A deadline already past when this begins still gets
    /// one try.
    ///
    /// With a [`Revocation`], our node is watched from the moment it exists
    /// (waiting or holding) and the listener called whenever a [`Revoker`]
    /// asks for the lock; the watch ends by itself once the node is gone.
    ///
    /// # Errors
    /// [`Error::Closed`] if the framework is closed; [`Error::RequestTooLarge`]
    /// for data too large for the packet limit (nothing is sent); ZooKeeper
    /// errors that retrying could not overcome (for example
    /// [`Error::NoAuth`], or [`Error::ConnectionLoss`] once the retry policy
    /// gives up); [`Error::Timeout`] if no session could be had within the
    /// connection timeout. A session lost during a try is returned as
    /// [`Error::SessionExpired`], not retried; so is, with a pinned session
    /// ([`Acquire::on_session`]), the end of that session.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future at any point deletes our node in the
    /// background (or, if the create's outcome is still unknown, finds it by
    /// its unique prefix and deletes it). Nothing else changes. An acquire
    /// that shares a waiting node with others of this process (see
    /// [`LockInternalsDriver::shares_node`]) leaves the share instead; the
    /// node goes when its last waiter leaves.
    pub async fn acquire(&self, request: Acquire<'_>) -> Result<Option<Hold>> {
        self.check_node_data(request.data)?;
        self.framework.check_open()?;
        let request = Acquire {
            wait: request.wait.for_attempt(),
            ..request
        };
        let wait = request.wait;
        let span = tracing::info_span!("lock.acquire", path = %self.base_path, lock = %self.lock_name, ?wait);
        let waiting = crate::telemetry::Waiting::start(&self.framework, &self.base_path);
        let acquire = async {
            if let Some(key) = self.share_key(&request) {
                let engine = Engine::of(&self.framework);
                return engine.shared_nodes.acquire(self, key).await.map(Some);
            }
            let turn = match self.local_turn(wait).await {
                LocalTurnOutcome::Taken => return Ok(None),
                LocalTurnOutcome::Turn(turn) => turn,
            };
            let hold = self.acquire_restarting(&request).await?;
            if let Some(hold) = &hold {
                hold.keep_turn(turn);
            }
            Ok(hold)
        }
        .instrument(span.clone());
        let result = wait.bound(acquire).await.unwrap_or(Ok(None));
        waiting.finish(match &result {
            Ok(Some(_)) => "acquired",
            Ok(None) => "timed_out",
            Err(_) => "failed",
        });
        span.in_scope(|| match &result {
            Ok(Some(hold)) => {
                tracing::info!(node = %hold.path(), token = %hold.fencing_token(), "lock acquired")
            }
            Ok(None) => tracing::info!("lock not acquired in time"),
            Err(err) => tracing::info!(%err, "lock acquire failed"),
        });
        result
    }

    /// The key of the shared node this acquire may join, if the driver and
    /// the request allow sharing (see [`LockInternalsDriver::shares_node`]).
    fn share_key(&self, request: &Acquire<'_>) -> Option<shared_node::ShareKey> {
        let shareable = Engine::options(&self.framework).local_queue
            && self.driver.shares_node()
            && !request.wait.is_try()
            && request.revocation.is_none()
            && request.session.is_none();
        if !shareable {
            return None;
        }
        let data = match request.data {
            [] => self.framework.default_node_data(),
            data => data,
        };
        Some((self.base_path.clone(), self.lock_name.clone(), data.into()))
    }

    /// Waits for this acquire's turn in the framework's in-process queue, if
    /// the driver wants one (see [`LockInternalsDriver::local_turns`]).
    async fn local_turn(&self, wait: Wait) -> LocalTurnOutcome {
        if !Engine::options(&self.framework).local_queue {
            return LocalTurnOutcome::Turn(None);
        }
        let Some(turns) = self.driver.local_turns(self.max_leases) else {
            return LocalTurnOutcome::Turn(None);
        };
        let turns = turns.max(1);
        let key = (self.base_path.clone(), self.lock_name.clone(), turns);
        let engine = Engine::of(&self.framework);
        let queues = &engine.local_queues;
        if !wait.is_try() {
            tracing::debug!(turns, "waiting for our turn in this process");
            return LocalTurnOutcome::Turn(Some(queues.turn(key).await));
        }
        match queues.try_turn(key) {
            Some(turn) => LocalTurnOutcome::Turn(Some(turn)),
            // Every turn is out: as many participants of this process hold
            // the lock or wait for holders as the lock admits.
            None if turns >= self.max_leases => {
                tracing::debug!("every local turn is out; the lock is taken");
                LocalTurnOutcome::Taken
            }
            // Fewer turns than holders: a try may still get in; it only
            // needs a node for as long as it takes to ask.
            None => LocalTurnOutcome::Turn(None),
        }
    }

    /// Sorts child names with the driver's sort key.
    pub fn sort_children(&self, mut children: Vec<String>) -> Vec<String> {
        children.sort_by_cached_key(|name| self.driver.sort_key(name, &self.lock_name));
        children
    }

    /// The full paths of all participants, sorted (the first `max_leases`
    /// hold the lock). Empty if the lock path does not exist.
    ///
    /// # Errors
    /// ZooKeeper errors that retrying could not overcome; [`Error::Closed`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn participant_nodes(&self) -> Result<Vec<String>> {
        let base = self.base_path.to_string();
        let children = self
            .framework
            .call_with_retry(|client| {
                let base = base.clone();
                async move { client.list_children(&base).await }
            })
            .await;
        let children = match children {
            Ok(children) => children,
            Err(Error::NoNode { .. }) => return Ok(Vec::new()),
            Err(err) => return Err(err),
        };
        Ok(self
            .sort_children(children)
            .into_iter()
            .map(|name| path::join(&self.base_path, &name))
            .collect())
    }
}

/// Runs `acquire` (an acquire without a timeout) until it returns a hold.
///
/// Such an acquire ends only with a hold or an error; its `Ok(None)` means
/// "not in time", which cannot happen, and is simply asked again rather than
/// turned into a made-up error.
///
/// # Errors
/// The first error `acquire` returns.
///
/// # Cancel safety
/// As cancel safe as `acquire`.
pub async fn until_held<T, F, Fut>(mut acquire: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    loop {
        if let Some(held) = acquire().await? {
            return Ok(held);
        }
    }
}

/// What to acquire and how (see [`LockInternals::acquire`]).
#[derive(Clone, Copy, Debug)]
pub struct Acquire<'a> {
    data: &'a [u8],
    wait: Wait,
    revocation: Option<&'a Revocation>,
    session: Option<&'a Session>,
}

impl<'a> Acquire<'a> {
    /// No data, [`Wait::Forever`], not revocable, on the framework's
    /// current session (and its successors).
    pub fn new() -> Self {
        Acquire {
            data: &[],
            wait: Wait::Forever,
            revocation: None,
            session: None,
        }
    }

    /// The participant node's data.
    pub fn data(mut self, data: &'a [u8]) -> Self {
        self.data = data;
        self
    }

    /// How long to wait in all (see [`Wait`]).
    pub fn wait(mut self, wait: Wait) -> Self {
        self.wait = wait;
        self
    }

    /// Watch the node for revocation requests.
    pub fn revocation(mut self, revocation: Option<&'a Revocation>) -> Self {
        self.revocation = revocation;
        self
    }

    /// Acquire on this session only: if it ends, the acquire fails with
    /// [`Error::SessionExpired`] instead of starting over on the next one
    /// (for a step that is only valid under something else held on that
    /// session, such as the semaphore's internal mutex).
    pub fn on_session(mut self, session: &'a Session) -> Self {
        self.session = Some(session);
        self
    }
}

impl Default for Acquire<'_> {
    fn default() -> Self {
        Acquire::new()
    }
}

/// The in-process turn of one acquire: `Turn(None)` when it needs none.
enum LocalTurnOutcome {
    Turn(Option<LocalTurn>),
    /// A try found every turn out: the lock is taken.
    Taken,
}
