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

mod driver;
mod engine;
mod fence;
mod guard;
mod hold;
mod local_queue;
mod revocation;
mod shared_node;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;
use zookeeper_client as zk;

pub use self::driver::{
    standard_gets_the_lock, standard_sort_key, LockInternalsDriver, ParticipantNode,
    PredicateResults, SortKey, StandardLockInternalsDriver,
};
use self::engine::Engine;
pub use self::fence::{Fence, FencedMulti, FencingToken};
pub use self::guard::ContenderGuard;
pub use self::hold::Hold;
use self::local_queue::LocalTurn;
pub use self::revocation::{
    Revocation, RevocationListener, RevocationSetting, Revoker, REVOKE_MESSAGE,
};
use crate::retry::RetryLoop;
pub use crate::LockLoss;
use crate::{path, Error, Framework, Result, Session};

/// How many times one create may find the lock path missing and create its
/// parents before the retry policy is asked (a parent reaped by the server
/// between two creates). Creating parents is part of the first acquire on a
/// path, not a failure, so it does not spend the retry budget.
const PARENT_ROUNDS: u32 = 3;

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

    /// Creates a participant node carrying `data` and waits until it holds
    /// the lock, for at most `timeout` (forever with `None`). Returns
    /// `Ok(None)` on timeout (the node is then deleted in the background). A
    /// zero timeout is a [`try_acquire`](Self::try_acquire).
    ///
    /// # Errors
    /// [`Error::Closed`] if the framework is closed; [`Error::RequestTooLarge`]
    /// for data too large for the packet limit (nothing is sent); ZooKeeper errors that retrying could
    /// not overcome (for example [`Error::NoAuth`], or [`Error::ConnectionLoss`]
    /// once the retry policy gives up); [`Error::Timeout`] if no session could
    /// be had within the connection timeout.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future at any point deletes our node in the
    /// background (or, if the create's outcome is still unknown, finds it by
    /// its unique prefix and deletes it). Nothing else changes. An acquire
    /// that shares a waiting node with others of this process (see
    /// [`LockInternalsDriver::shares_node`]) leaves the share instead; the
    /// node goes when its last waiter leaves.
    pub async fn acquire(&self, data: &[u8], timeout: Option<Duration>) -> Result<Option<Hold>> {
        self.acquire_with(Acquire::new().data(data).timeout(timeout))
            .await
    }

    /// Like [`LockInternals::acquire`], and if `revocation` is given, watches
    /// our node from the moment it exists (waiting or holding) and calls the
    /// listener whenever a [`Revoker`] asks for the lock. The watch ends by
    /// itself once the node is gone.
    ///
    /// # Errors
    /// As [`LockInternals::acquire`].
    ///
    /// # Cancel safety
    /// As [`LockInternals::acquire`].
    pub async fn acquire_revocable(
        &self,
        data: &[u8],
        timeout: Option<Duration>,
        revocation: Option<&Revocation>,
    ) -> Result<Option<Hold>> {
        self.acquire_with(
            Acquire::new()
                .data(data)
                .timeout(timeout)
                .revocation(revocation),
        )
        .await
    }

    /// Waits as long as it takes (no timeout) and returns the hold.
    ///
    /// # Errors
    /// As [`LockInternals::acquire`].
    ///
    /// # Cancel safety
    /// As [`LockInternals::acquire`].
    pub async fn acquire_held(&self, data: &[u8], revocation: Option<&Revocation>) -> Result<Hold> {
        until_held(|| self.acquire_with(Acquire::new().data(data).revocation(revocation))).await
    }

    /// Tries once, without waiting: the create and the listing go out
    /// together (one round trip), then either the lock is held or our node
    /// is deleted again before this returns (in the background only if
    /// ZooKeeper cannot be reached within the connection timeout).
    ///
    /// # Errors
    /// As [`LockInternals::acquire`]; a session lost during the try is
    /// returned as [`Error::SessionExpired`], not retried.
    ///
    /// # Cancel safety
    /// As [`LockInternals::acquire`].
    pub async fn try_acquire(&self, data: &[u8]) -> Result<Option<Hold>> {
        self.acquire_with(Acquire::new().data(data).timeout(Some(Duration::ZERO)))
            .await
    }

    /// The general form of [`acquire`](Self::acquire): data, timeout,
    /// revocation, and optionally the one session the acquire must happen
    /// on (see [`Acquire::on_session`]).
    ///
    /// # Errors
    /// As [`LockInternals::acquire`]; with a pinned session,
    /// [`Error::SessionExpired`] once that session is no longer current.
    ///
    /// # Cancel safety
    /// As [`LockInternals::acquire`].
    pub async fn acquire_with(&self, request: Acquire<'_>) -> Result<Option<Hold>> {
        self.check_node_data(request.data)?;
        self.framework.check_open()?;
        let timeout = request.timeout;
        let try_only = timeout == Some(Duration::ZERO);
        let span = tracing::info_span!("lock.acquire", path = %self.base_path, lock = %self.lock_name, try_only);
        let waiting = crate::telemetry::Waiting::start(&self.framework, &self.base_path);
        let acquire = async {
            if let Some(key) = self.share_key(&request, try_only) {
                let engine = Engine::of(&self.framework);
                return engine.shared_nodes.acquire(self, key).await.map(Some);
            }
            let turn = match self.local_turn(try_only).await {
                LocalTurnOutcome::Taken => return Ok(None),
                LocalTurnOutcome::Turn(turn) => turn,
            };
            let hold = self.acquire_restarting(&request, try_only).await?;
            if let Some(hold) = &hold {
                hold.keep_turn(turn);
            }
            Ok(hold)
        }
        .instrument(span.clone());
        let result = match timeout {
            Some(timeout) if !try_only => tokio::time::timeout(timeout, acquire)
                .await
                .unwrap_or(Ok(None)),
            _ => acquire.await,
        };
        waiting.finish(match &result {
            Ok(Some(_)) => "acquired",
            Ok(None) => "timed_out",
            Err(_) => "failed",
        });
        span.in_scope(|| match &result {
            Ok(Some(hold)) => {
                tracing::info!(node = %hold.path(), token = %hold.fencing_token(), "lock acquired")
            }
            Ok(None) => tracing::info!(?timeout, "lock not acquired in time"),
            Err(err) => tracing::info!(%err, "lock acquire failed"),
        });
        result
    }

    /// The key of the shared node this acquire may join, if the driver and
    /// the request allow sharing (see [`LockInternalsDriver::shares_node`]).
    fn share_key(&self, request: &Acquire<'_>, try_only: bool) -> Option<shared_node::ShareKey> {
        let shareable = Engine::options(&self.framework).local_queue
            && self.driver.shares_node()
            && !try_only
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
    async fn local_turn(&self, try_only: bool) -> LocalTurnOutcome {
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
        if !try_only {
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

    async fn acquire_restarting(
        &self,
        request: &Acquire<'_>,
        try_only: bool,
    ) -> Result<Option<Hold>> {
        let mut restarts = RetryLoop::new(&**self.framework.retry_policy());
        loop {
            let session = match request.session {
                Some(pinned) => {
                    let current = self.framework.current_session();
                    if current.map(|s| s.generation()) != Some(pinned.generation()) {
                        return Err(Error::SessionExpired);
                    }
                    pinned.clone()
                }
                None => self.framework.session().await?,
            };
            // Without data of its own, a participant carries its creator's
            // identity.
            let data = match request.data {
                [] => self.framework.default_node_data(),
                data => data,
            };
            let err = match self
                .attempt(&session, data, request.revocation, try_only)
                .await
            {
                Ok(hold) => return Ok(hold),
                Err(Failure::Fail(err)) => return Err(err),
                Err(Failure::Restart(err)) if try_only => return Err(err),
                Err(Failure::Restart(err)) => err,
            };
            tracing::warn!(%err, restarts = restarts.retries() + 1, "our participant node is gone; starting over at the back of the queue");
            restarts.next(err, self.framework.closed()).await?;
        }
    }

    /// One acquire on one session: `Ok(None)` only for a try that found the
    /// lock taken (our node is deleted again by then).
    async fn attempt(
        &self,
        session: &Session,
        data: &[u8],
        revocation: Option<&Revocation>,
        try_only: bool,
    ) -> Result<Option<Hold>, Failure> {
        let node_kind = self.driver.participant_node();
        let name_prefix = format!(
            "{}{}-{}",
            path::PROTECTED_PREFIX,
            uuid::Uuid::new_v4(),
            self.lock_name
        );
        let (create_name, mode) = match &node_kind {
            ParticipantNode::EphemeralSequential => {
                (name_prefix.clone(), zk::CreateMode::EphemeralSequential)
            }
            ParticipantNode::PersistentSequential => {
                (name_prefix.clone(), zk::CreateMode::PersistentSequential)
            }
            ParticipantNode::EphemeralWithSequence(seq) => {
                (format!("{name_prefix}{seq}"), zk::CreateMode::Ephemeral)
            }
        };
        // Armed before anything is sent: from here on, any exit cleans up.
        let mut guard = ContenderGuard::protected(&self.framework, &self.base_path, &name_prefix);
        let created = self
            .create_participant(session, &create_name, &name_prefix, mode, data)
            .await?;
        let our_path = path::join(&self.base_path, &created.name);
        guard.set_node(&our_path);
        tracing::debug!(node = %our_path, "participant node created");
        if let Some(revocation) = revocation {
            revocation::spawn_watch(
                self.framework.clone(),
                session.clone(),
                our_path.clone(),
                revocation.clone(),
            );
        }

        let mut children = created.children;
        loop {
            self.framework.check_open()?;
            let sorted = self.sort_children(children);
            if !sorted.contains(&created.name) {
                // Our node is gone (deleted by someone, or its session died).
                return Err(Failure::Restart(Error::lock_lost(
                    our_path,
                    LockLoss::NodeDeleted,
                )));
            }
            // A driver's own refusal ends the acquire; it is not restarted.
            let decision = self
                .driver
                .gets_the_lock(&sorted, &created.name, self.max_leases)
                .map_err(Failure::Fail)?;
            if decision.holds_lock {
                let epoch = self.framework.loss_epoch();
                let node = AcquiredNode {
                    path: our_path.clone(),
                    czxid: created.czxid,
                    session_id: session.id(),
                    generation: session.generation(),
                    ephemeral: node_kind.is_ephemeral(),
                };
                // Never hand out a hold that is already lost (the session
                // went, or the connection broke, while the answer was on its
                // way): our node goes to the cleaner and we start over.
                if let Some(loss) = hold::loss_of(&self.framework, &node, epoch) {
                    return Err(Failure::Restart(Error::lock_lost(our_path, loss)));
                }
                let hold = Hold::new(self.framework.clone(), node, epoch);
                guard.disarm();
                return Ok(Some(hold));
            }
            if try_only {
                self.withdraw(session, guard, &our_path).await;
                return Ok(None);
            }
            let fresh = if decision.watch_children {
                self.wait_for_children_change(session, &sorted).await?
            } else {
                let Some(watch_name) = decision.path_to_watch else {
                    return Err(Failure::Fail(Error::InvalidArgument(
                        "the lock driver neither granted the lock nor named a node to watch".into(),
                    )));
                };
                // A parked waiter keeps nothing but its watch: holding on to
                // the listing would cost every waiter a copy of the queue.
                drop(sorted);
                // Whatever woke us, we list again: the deletion of the node
                // ahead does not prove that ours still exists (someone may
                // have deleted it meanwhile, and a later arrival would then
                // hold beside us).
                self.wait_for_node_ahead(session, &watch_name).await?;
                None
            };
            children = match fresh {
                Some(fresh) => fresh,
                None => self.list_children_on(session).await?,
            };
        }
    }

    /// Waits until the node `watch_name` ahead of ours changes (at once if it
    /// is already gone).
    async fn wait_for_node_ahead(
        &self,
        session: &Session,
        watch_name: &str,
    ) -> Result<(), Failure> {
        let watch_path = path::join(&self.base_path, watch_name);
        tracing::debug!(watch = %watch_path, "waiting for the node ahead");
        let watched = self
            .framework
            .call_on_session(session, |client| {
                let watch_path = watch_path.clone();
                async move { client.get_and_watch_data(&watch_path).await }
            })
            .await;
        match watched {
            Ok((_, _, watcher)) => self.wait_event(session, watcher).await,
            // Already gone: look again at once.
            Err(Error::NoNode { .. }) => Ok(()),
            Err(err) => Err(err.into()),
        }
    }

    /// Watches the children list; returns a fresh listing at once if it
    /// differs from `sorted` (something changed since the last look), or
    /// `None` once a change has been notified.
    async fn wait_for_children_change(
        &self,
        session: &Session,
        sorted: &[String],
    ) -> Result<Option<Vec<String>>, Failure> {
        let base = self.base_path.to_string();
        let watched = self
            .framework
            .call_on_session(session, |client| {
                let base = base.clone();
                async move { client.list_and_watch_children(&base).await }
            })
            .await;
        let (fresh, watcher) = match watched {
            Ok(found) => found,
            Err(Error::NoNode { .. }) => {
                return Err(Failure::Restart(Error::lock_lost(
                    &*self.base_path,
                    LockLoss::NodeDeleted,
                )))
            }
            Err(err) => return Err(err.into()),
        };
        if self.sort_children(fresh.clone()) != sorted {
            // Changed between our listing and the watch: decide again first.
            return Ok(Some(fresh));
        }
        tracing::debug!("waiting for a change among the participants");
        self.wait_event(session, watcher).await?;
        Ok(None)
    }

    /// Waits for one watch event, the session's end or the framework's close.
    async fn wait_event(
        &self,
        session: &Session,
        watcher: zk::OneshotWatcher,
    ) -> Result<(), Failure> {
        tokio::select! {
            event = watcher.changed() => {
                if event.event_type == zk::EventType::Session {
                    if event.session_state.is_terminated() {
                        return Err(Error::from_zk(zk::Error::SessionExpired, event.session_state).into());
                    }
                } else {
                    Engine::of(&self.framework).add_wakeup();
                }
                Ok(())
            }
            _ = self.framework.session_gone(session) => Err(Error::SessionExpired.into()),
            _ = self.framework.closed() => Err(Error::Closed.into()),
        }
    }

    /// Deletes the node of a try that did not get the lock, before returning
    /// (in the background if ZooKeeper cannot be reached in time).
    async fn withdraw(&self, session: &Session, guard: ContenderGuard, our_path: &str) {
        let node_path = our_path.to_owned();
        let delete = self.framework.call_on_session(session, |client| {
            let node_path = node_path.clone();
            async move {
                match client.delete(&node_path, None).await {
                    Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                    Err(err) => Err(err),
                }
            }
        });
        match tokio::time::timeout(self.framework.connection_timeout(), delete).await {
            Ok(Ok(())) => {
                guard.disarm();
                tracing::debug!(node = %our_path, "lock taken; our node is withdrawn");
            }
            _ => drop(guard),
        }
    }

    /// Sends the protected create and the children listing back to back.
    async fn create_participant(
        &self,
        session: &Session,
        create_name: &str,
        name_prefix: &str,
        mode: zk::CreateMode,
        data: &[u8],
    ) -> Result<Created> {
        let create_path = path::join(&self.base_path, create_name);
        let acl = self.framework.acl_for_path(&create_path);
        let options = mode.with_acls(zk::Acls::new(&acl));
        let sequential = matches!(
            mode,
            zk::CreateMode::EphemeralSequential | zk::CreateMode::PersistentSequential
        );
        let mut retry = RetryLoop::new(&**self.framework.retry_policy());
        let mut parent_rounds = 0u32;
        let mut maybe_created = false;
        loop {
            self.framework.check_open()?;
            if maybe_created {
                // The last create may have been applied with its reply lost:
                // adopt our node rather than create a second one.
                let children = match self.list_children_on(session).await {
                    Ok(children) => children,
                    Err(Error::LockLost { .. }) => Vec::new(), // parent missing: nothing was created
                    Err(err) => return Err(err),
                };
                if let Some(name) = children
                    .iter()
                    .find(|c| c.starts_with(name_prefix))
                    .cloned()
                {
                    let czxid = self.adopt(session, &name, mode).await?;
                    tracing::info!(node = %name, "adopted the node of a create whose reply was lost");
                    return Ok(Created {
                        name,
                        czxid,
                        children,
                    });
                }
            }
            let client = session.client();
            // Both requests are queued here, in this order, before either is awaited.
            let create = client.create(&create_path, data, &options);
            let list = client.list_children(&self.base_path);
            let (created, listed) = futures::join!(create, list);
            let err = match created {
                Ok((stat, sequence)) => {
                    let name = if sequential {
                        format!("{create_name}{sequence}")
                    } else {
                        create_name.to_owned()
                    };
                    let children = match listed {
                        Ok(children) if children.contains(&name) => children,
                        _ => self.list_children_on(session).await?,
                    };
                    return Ok(Created {
                        name,
                        czxid: stat.czxid,
                        children,
                    });
                }
                Err(zk::Error::NoNode) => {
                    // The lock path (or a level reaped by the server between
                    // two creates) is missing: create it and go again, outside
                    // the retry budget for the first few rounds.
                    match self.create_parents(session).await {
                        Ok(()) | Err(Error::NoNode { .. }) => {}
                        Err(err) => return Err(err),
                    }
                    parent_rounds += 1;
                    if parent_rounds > PARENT_ROUNDS {
                        // Parents keep vanishing: each round now counts as a
                        // retry (without a pause: the parents were just made).
                        retry.allow(Error::NoNode {
                            path: self.base_path.to_string(),
                        })?;
                    }
                    continue;
                }
                Err(err) => {
                    let err = session.map_err(err);
                    if !err.is_retryable() {
                        return Err(err);
                    }
                    maybe_created = true;
                    err
                }
            };
            tracing::debug!(%err, "create failed; retrying");
            retry.next(err, self.framework.closed()).await?;
        }
    }

    /// Reads the stat of a node found by its prefix, checking that it belongs
    /// to this session when it is ephemeral.
    async fn adopt(&self, session: &Session, name: &str, mode: zk::CreateMode) -> Result<i64> {
        let node_path = path::join(&self.base_path, name);
        let stat = self
            .framework
            .call_on_session(session, |client| {
                let node_path = node_path.clone();
                async move { client.check_stat(&node_path).await }
            })
            .await?;
        match stat {
            Some(stat)
                if !matches!(
                    mode,
                    zk::CreateMode::Ephemeral | zk::CreateMode::EphemeralSequential
                ) || stat.ephemeral_owner == session.id() =>
            {
                Ok(stat.czxid)
            }
            // Not ours: the node we created died with our session.
            Some(_) => Err(Error::lock_lost(node_path, LockLoss::SessionReplaced)),
            // Vanished before it could be adopted.
            None => Err(Error::lock_lost(node_path, LockLoss::NodeDeleted)),
        }
    }

    /// Creates the lock path's missing ancestors as container nodes (the
    /// server removes them once their last child goes).
    async fn create_parents(&self, session: &Session) -> Result<()> {
        // Walk up with `exists` to the deepest existing ancestor (no read or
        // create permission is needed above it), then create downwards, each
        // level with its own ACL.
        let levels: Vec<&str> = path::parents(&self.base_path)
            .chain(std::iter::once(&*self.base_path))
            .collect();
        let mut missing_from = levels.len();
        for (index, level) in levels.iter().enumerate().rev() {
            let level = level.to_string();
            let exists = self
                .framework
                .call_on_session(session, |client| {
                    let level = level.clone();
                    async move { client.check_stat(&level).await }
                })
                .await?;
            if exists.is_some() {
                break;
            }
            missing_from = index;
        }
        for level in &levels[missing_from..] {
            let level = level.to_string();
            let acl = self.framework.acl_for_path(&level);
            self.framework
                .call_on_session(session, |client| {
                    let (level, acl) = (level.clone(), acl.clone());
                    async move {
                        let options = zk::CreateMode::Container.with_acls(zk::Acls::new(&acl));
                        match client.create(&level, &[], &options).await {
                            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                            Err(err) => Err(err),
                        }
                    }
                })
                .await?;
        }
        Ok(())
    }

    /// Lists the lock's children on `session`; a missing lock path means our
    /// node cannot exist ([`Error::LockLost`]).
    async fn list_children_on(&self, session: &Session) -> Result<Vec<String>> {
        let base = self.base_path.to_string();
        let result = self
            .framework
            .call_on_session(session, |client| {
                let base = base.clone();
                async move { client.list_children(&base).await }
            })
            .await;
        match result {
            Err(Error::NoNode { .. }) => {
                Err(Error::lock_lost(&*self.base_path, LockLoss::NodeDeleted))
            }
            other => other,
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

    /// Releases a hold: deletes its node. If the connection is down (or the
    /// delete does not finish within the connection timeout), the delete
    /// continues in the background and this returns: the lock is released as
    /// far as this process is concerned, and the node goes as soon as
    /// ZooKeeper can be reached (or with its session). A node already gone
    /// counts as deleted. A share of a node held together (readers, see
    /// [`LockInternalsDriver::shares_node`]) only leaves it, without a
    /// request, unless it is the last share.
    ///
    /// A hold that was already lost is released without waiting for a new
    /// session: if its (ephemeral) node died with its session, there is
    /// nothing to delete; otherwise the node is deleted now if connected, in
    /// the background if not. Either way the result is [`Error::LockLost`],
    /// so the caller learns that the hold did not last until the release.
    ///
    /// With [`FrameworkBuilder::release_before_reply`](crate::FrameworkBuilder::release_before_reply),
    /// the release of a hold that is not lost, with an ephemeral node,
    /// returns as soon as its delete is queued on the session; the answer is
    /// handled in the background as described there.
    ///
    /// # Errors
    /// [`Error::LockLost`] for a hold found lost (see above; nothing is left
    /// to do); [`Error::Closed`] if the framework is closed (ephemeral nodes
    /// went with its session); errors no retry can fix, such as
    /// [`Error::NoAuth`] (logged instead when the answer is not awaited).
    ///
    /// # Cancel safety
    /// Cancel safe: once polled, dropping the future hands the delete to the
    /// background cleaner.
    pub async fn release(&self, hold: &Hold) -> Result<()> {
        let before_reply = Engine::options(&self.framework).release_before_reply;
        self.release_as(hold, before_reply).await
    }

    /// Like [`release`](Self::release), but returning as soon as the delete
    /// is queued whatever the framework's
    /// [`release_before_reply`](crate::FrameworkBuilder::release_before_reply)
    /// says (a hold already lost, or with a persistent node, still waits for
    /// the answer). Meant for a recipe's internal lock, such as the
    /// semaphore's mutex: its node is not the user's, and whoever waits for
    /// it gets it as soon as the server has applied the delete, after every
    /// request this framework sent under the lock.
    ///
    /// # Errors
    /// As [`release`](Self::release); an error in the answer is logged.
    ///
    /// # Cancel safety
    /// As [`release`](Self::release).
    pub async fn release_before_reply(&self, hold: &Hold) -> Result<()> {
        self.release_as(hold, true).await
    }

    /// A release that returns before the answer if `before_reply` (and the
    /// hold is not lost, and its node is ephemeral).
    async fn release_as(&self, hold: &Hold, before_reply: bool) -> Result<()> {
        let span = tracing::info_span!("lock.release", node = %hold.path());
        let result = async {
            let lost = |loss: LockLoss| Error::lock_lost(hold.path(), loss);
            let last_share = hold.leave_share();
            self.framework.check_open()?;
            if !last_share {
                tracing::info!("other acquires of this process still hold the shared node; it stays");
                return hold.check().map_err(lost);
            }
            let loss = hold.check().err();
            let Some(session) = hold.session() else {
                tracing::info!("the node died with its session; nothing to delete");
                return Err(lost(loss.unwrap_or(LockLoss::SessionReplaced)));
            };
            let guard = ContenderGuard::node(&self.framework, hold.path());
            if let Some(loss) = loss {
                let connected = self
                    .framework
                    .state()
                    .is_some_and(crate::ConnectionState::is_connected);
                if !connected {
                    tracing::info!(%loss, "lost hold released while disconnected; deleting in the background");
                    drop(guard);
                    return Err(lost(loss));
                }
            }
            let node_path = hold.path().to_owned();
            let framework = self.framework.clone();
            let limit = self.framework.connection_timeout();
            let mut delete = Box::pin(async move {
                let delete = framework.call_on_session(&session, |client| {
                    let node_path = node_path.clone();
                    async move {
                        match client.delete(&node_path, None).await {
                            Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                            Err(err) => Err(err),
                        }
                    }
                });
                tokio::time::timeout(limit, delete).await
            });
            // The first poll puts the delete on the wire; only then does the
            // next task of this process get its turn, so its create follows
            // our delete on the session and finds the lock free (one round
            // trip per local hand-off).
            let first = futures::poll!(delete.as_mut());
            hold.give_turn_back();
            // Only an ephemeral node's hold can be lost while its delete is
            // on the way (a persistent one ends with its deletion alone).
            let trusted = loss.is_none() && hold.node().is_ephemeral();
            let deleted = match first {
                std::task::Poll::Ready(deleted) => deleted,
                std::task::Poll::Pending if before_reply && trusted => {
                    // See `FrameworkBuilder::release_before_reply`.
                    self.settle_in_background(delete, guard, limit);
                    return Ok(());
                }
                std::task::Poll::Pending if trusted => {
                    tokio::select! {
                        deleted = &mut delete => deleted,
                        // Lost while the answer was awaited (the link broke,
                        // say): the caller hears it now, as it would from a
                        // release begun after the loss, and the node goes
                        // with the session or by the delete still on its way.
                        loss = hold.loss_without_node_watch() => {
                            tracing::info!(%loss, "hold lost with its release in flight; the delete goes on in the background");
                            self.settle_in_background(delete, guard, limit);
                            return Err(lost(loss));
                        }
                    }
                }
                std::task::Poll::Pending => delete.await,
            };
            let outcome = settle_delete(deleted, guard, limit);
            match loss {
                Some(loss) => outcome.and(Err(lost(loss))),
                None => outcome,
            }
        }
        .instrument(span)
        .await;
        // Whatever happened, the hold no longer occupies a turn.
        hold.give_turn_back();
        result
    }
}

impl LockInternals {
    /// Lets a release's delete finish without the caller: its answer is
    /// settled by a task of its own, and counts as background work (see
    /// [`Framework::wait_for_background_cleanup`]) until then.
    fn settle_in_background<F>(&self, delete: F, guard: ContenderGuard, limit: Duration)
    where
        F: std::future::Future<
                Output = std::result::Result<Result<()>, tokio::time::error::Elapsed>,
            > + Send
            + 'static,
    {
        let pending = self.framework.background_work();
        let settling = async move {
            match settle_delete(delete.await, guard, limit) {
                Ok(()) => {}
                // The node goes with the session being closed.
                Err(Error::Closed) => tracing::debug!("framework closed during the release"),
                Err(err) => tracing::warn!(%err, "the release's delete failed"),
            }
            drop(pending);
        };
        tokio::spawn(settling.in_current_span());
    }
}

/// What a release's delete came to: `Ok` once the node is gone, or handed
/// to the background cleaner (with `guard`) when ZooKeeper could not be
/// reached within `limit`.
fn settle_delete(
    deleted: std::result::Result<Result<()>, tokio::time::error::Elapsed>,
    guard: ContenderGuard,
    limit: Duration,
) -> Result<()> {
    match deleted {
        Ok(Ok(())) => {
            guard.disarm();
            tracing::info!("lock released");
            Ok(())
        }
        Ok(Err(Error::Closed)) => {
            guard.disarm();
            Err(Error::Closed)
        }
        Ok(Err(err)) if err.is_transient() => {
            tracing::warn!(%err, "release could not reach ZooKeeper; deleting in the background");
            drop(guard);
            Ok(())
        }
        Ok(Err(err)) => {
            guard.disarm();
            Err(err)
        }
        Err(_) => {
            tracing::warn!(?limit, "release timed out; deleting in the background");
            drop(guard);
            Ok(())
        }
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

/// What to acquire and how (see [`LockInternals::acquire_with`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Acquire<'a> {
    data: &'a [u8],
    timeout: Option<Duration>,
    revocation: Option<&'a Revocation>,
    session: Option<&'a Session>,
}

impl<'a> Acquire<'a> {
    /// No data, no timeout, not revocable, on the framework's current
    /// session (and its successors).
    pub fn new() -> Self {
        Acquire::default()
    }

    /// The participant node's data.
    pub fn data(mut self, data: &'a [u8]) -> Self {
        self.data = data;
        self
    }

    /// How long to wait in all (`None`: forever; zero: a single try).
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
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

/// The in-process turn of one acquire: `Turn(None)` when it needs none.
enum LocalTurnOutcome {
    Turn(Option<LocalTurn>),
    /// A try found every turn out: the lock is taken.
    Taken,
}

/// Why one attempt failed: `Restart` when our node (or its session) is gone
/// and a fresh attempt at the back of the queue may succeed.
enum Failure {
    Restart(Error),
    Fail(Error),
}

impl From<Error> for Failure {
    fn from(err: Error) -> Self {
        if err.is_session_terminal() || matches!(err, Error::LockLost { .. }) {
            Failure::Restart(err)
        } else {
            Failure::Fail(err)
        }
    }
}

struct Created {
    name: String,
    czxid: i64,
    children: Vec<String>,
}
