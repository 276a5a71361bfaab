//! [`Framework`]: the long-lived handle a service keeps (Curator's
//! `CuratorFramework`).
//!
//! # Why it owns the session
//!
//! A `zookeeper-client` [`Client`](zk::Client) is bound to one session: once
//! that session expires, the client and all its clones fail for good. A
//! service that must run for months cannot hand such a client around. The
//! framework therefore keeps *the* current session itself, watches it from
//! one background task (the supervisor), and builds a fresh session whenever
//! the old one is lost. Recipes ask the framework for the current session
//! each time they start something, so nothing holds a dead client for long.
//!
//! The supervisor is also the only place where the [`ConnectionState`]
//! changes (through [`next_state`]); listeners and streams see its changes
//! in order.

mod builder;
mod cleanup;
mod supervisor;

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;
use zookeeper_client as zk;

pub(crate) use self::builder::Config;
pub use self::builder::FrameworkBuilder;
pub(crate) use self::cleanup::CleanupJob;
use crate::error::{Error, Result};
use crate::listener::{ConnectionStateListener, ListenerHandle, Listeners};
use crate::state::{next_state, ConnectionState, ErrorPolicy, StateEvent};

const LATENT: u8 = 0;
const STARTED: u8 = 1;
const CLOSED: u8 = 2;

/// One ZooKeeper session of a framework: the client bound to it and the
/// framework's generation counter at the time it was built.
#[derive(Clone)]
pub struct Session {
    client: zk::Client,
    generation: u64,
}

impl Session {
    /// The client bound to this session (cheap to clone).
    pub fn client(&self) -> &zk::Client {
        &self.client
    }

    /// The server-assigned session id (compare with a node's
    /// `ephemeral_owner`).
    pub fn id(&self) -> i64 {
        self.client.session_id().0
    }

    /// Counts the sessions this framework built: 1 for the first, then one
    /// more after every loss.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether the session is gone for good (expired, closed or refused).
    pub fn is_terminated(&self) -> bool {
        self.client.state().is_terminated()
    }

    /// Maps an error of this session's client, knowing its state.
    pub fn map_err(&self, err: zk::Error) -> Error {
        Error::from_zk(err, self.client.state())
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &format_args!("{:#x}", self.id()))
            .field("generation", &self.generation)
            .field("state", &self.client.state())
            .finish()
    }
}

/// Counters the framework keeps about its locks, for tests, benchmarks and
/// monitoring.
#[derive(Debug, Default)]
pub struct Metrics {
    lock_wakeups: AtomicU64,
    background_deletes: AtomicU64,
}

impl Metrics {
    /// How many times a waiting lock participant was woken by a watch on the
    /// node ahead of it. With no herd effect, one release wakes one waiter.
    pub fn lock_wakeups(&self) -> u64 {
        self.lock_wakeups.load(Ordering::Relaxed)
    }

    /// How many nodes the background cleaner deleted (cancelled acquires,
    /// releases during connection loss, dropped guards).
    pub fn background_deletes(&self) -> u64 {
        self.background_deletes.load(Ordering::Relaxed)
    }

    pub(crate) fn add_lock_wakeup(&self) {
        self.lock_wakeups.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    status: AtomicU8,
    session_tx: watch::Sender<Option<Session>>,
    state_tx: watch::Sender<Option<ConnectionState>>,
    events_tx: broadcast::Sender<ConnectionState>,
    closed_tx: watch::Sender<bool>,
    listeners: Arc<Listeners>,
    cleanup_tx: mpsc::UnboundedSender<CleanupJob>,
    cleanup_rx: Mutex<Option<mpsc::UnboundedReceiver<CleanupJob>>>,
    pending_cleanups: watch::Sender<usize>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Entries into an error state under the error policy (see
    /// [`Framework::loss_epoch`]).
    loss_epoch: AtomicU64,
    pub(crate) metrics: Metrics,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inner")
            .field("connect_string", &self.config.connect_string)
            .field("status", &self.status.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Closes the framework when the last user handle goes away.
struct Handle {
    inner: Arc<Inner>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.inner.shut_down();
    }
}

/// The entry point: a ZooKeeper session that survives connection loss and
/// session expiry, with a retry policy, connection-state listeners and the
/// settings recipes share (namespace, ACL, error policy).
///
/// Cheap to clone; all clones share one session. The framework closes when
/// [`Framework::close`] is called or the last clone is dropped.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> zk_curator_framework::Result<()> {
/// use std::time::Duration;
/// use zk_curator_framework::Framework;
///
/// let framework = Framework::builder()
///     .connect_string("127.0.0.1:2181")
///     .namespace("my-service")
///     .build()?;
/// framework.start()?;
/// framework.block_until_connected(Duration::from_secs(10)).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Framework {
    handle: Arc<Handle>,
}

impl fmt::Debug for Framework {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Framework")
            .field("connect_string", &self.inner().config.connect_string)
            .field("namespace", &self.inner().config.namespace)
            .field("state", &self.state())
            .finish()
    }
}

impl Framework {
    /// Starts building a framework.
    pub fn builder() -> FrameworkBuilder {
        FrameworkBuilder::new()
    }

    fn from_config(config: Config) -> Framework {
        let (cleanup_tx, cleanup_rx) = mpsc::unbounded_channel();
        let (events_tx, _) = broadcast::channel(64);
        let inner = Inner {
            config,
            status: AtomicU8::new(LATENT),
            session_tx: watch::Sender::new(None),
            state_tx: watch::Sender::new(None),
            events_tx,
            closed_tx: watch::Sender::new(false),
            listeners: Arc::new(Listeners::default()),
            cleanup_tx,
            cleanup_rx: Mutex::new(Some(cleanup_rx)),
            pending_cleanups: watch::Sender::new(0),
            tasks: Mutex::new(Vec::new()),
            loss_epoch: AtomicU64::new(0),
            metrics: Metrics::default(),
        };
        Framework {
            handle: Arc::new(Handle {
                inner: Arc::new(inner),
            }),
        }
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.handle.inner
    }

    /// Starts the background tasks (session supervisor, listener dispatch,
    /// background cleaner) on the current tokio runtime and begins
    /// connecting. Returns at once; see [`Framework::block_until_connected`].
    ///
    /// # Errors
    /// [`Error::Closed`] if the framework was closed, [`Error::InvalidArgument`]
    /// if it was already started or no tokio runtime is running.
    pub fn start(&self) -> Result<()> {
        let inner = self.inner();
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::InvalidArgument("start() needs a running tokio runtime".into()))?;
        match inner
            .status
            .compare_exchange(LATENT, STARTED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {}
            Err(CLOSED) => return Err(Error::Closed),
            Err(_) => {
                return Err(Error::InvalidArgument(
                    "the framework is already started".into(),
                ))
            }
        }
        let cleanup_rx = inner
            .cleanup_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let mut tasks = inner.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.push(runtime.spawn(supervisor::run(inner.clone())));
        tasks.push(runtime.spawn(dispatch_listeners(inner.clone())));
        if let Some(rx) = cleanup_rx {
            tasks.push(runtime.spawn(cleanup::run(inner.clone(), rx)));
        }
        tracing::info!(connect = %inner.config.connect_string, namespace = ?inner.config.namespace, "framework started");
        Ok(())
    }

    /// Closes the framework: stops the background tasks and closes the
    /// session (its ephemeral nodes go with it). Every later operation fails
    /// with [`Error::Closed`]. Idempotent.
    ///
    /// # Cancel safety
    /// Closing takes effect at the first poll; dropping the future only skips
    /// waiting for the background tasks to finish.
    pub async fn close(&self) {
        let inner = self.inner();
        inner.shut_down();
        let tasks: Vec<_> =
            std::mem::take(&mut *inner.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for task in tasks {
            let _ = task.await;
        }
    }

    /// Whether two handles are clones of one framework.
    pub fn same_framework(&self, other: &Framework) -> bool {
        Arc::ptr_eq(self.inner(), other.inner())
    }

    /// Whether [`Framework::close`] was called (or the last handle dropped).
    pub fn is_closed(&self) -> bool {
        self.inner().status.load(Ordering::Acquire) == CLOSED
    }

    /// Waits until the framework is connected (state `Connected`,
    /// `Reconnected` or `ReadOnly`).
    ///
    /// # Errors
    /// [`Error::Timeout`] when `timeout` passes first; [`Error::Closed`] if the
    /// framework is closed or not started.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes state.
    pub async fn block_until_connected(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let inner = self.inner();
        let mut state = inner.state_tx.subscribe();
        let mut closed = inner.closed_tx.subscribe();
        loop {
            inner.check_open()?;
            if state
                .borrow_and_update()
                .is_some_and(ConnectionState::is_connected)
            {
                return Ok(());
            }
            tokio::select! {
                _ = state.changed() => {}
                _ = closed.changed() => {}
                _ = tokio::time::sleep_until(deadline) => return Err(Error::Timeout(timeout)),
            }
        }
    }

    /// The current connection state, `None` before the first connection.
    pub fn state(&self) -> Option<ConnectionState> {
        *self.inner().state_tx.borrow()
    }

    /// A watch on the connection state (`None` before the first connection).
    pub fn state_watcher(&self) -> watch::Receiver<Option<ConnectionState>> {
        self.inner().state_tx.subscribe()
    }

    /// Every state change from now on, as a stream. A consumer that falls
    /// more than 64 changes behind skips the oldest ones.
    pub fn state_changes(&self) -> impl Stream<Item = ConnectionState> + Send + 'static {
        let rx = self.inner().events_tx.subscribe();
        futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(state) => return Some((state, rx)),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(skipped = n, "state stream lagged");
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
    }

    /// Registers a callback for every state change; it stays registered
    /// while the returned handle lives.
    pub fn add_listener(&self, listener: impl ConnectionStateListener) -> ListenerHandle {
        self.inner().listeners.add(Arc::new(listener))
    }

    /// The error policy recipes apply to held locks.
    pub fn error_policy(&self) -> ErrorPolicy {
        self.inner().config.error_policy
    }

    /// The namespace (chroot) every path is relative to, if any.
    pub fn namespace(&self) -> Option<&str> {
        self.inner().config.namespace.as_deref()
    }

    /// The ACL given to created nodes without a rule of their own.
    pub fn default_acl(&self) -> Vec<zk::Acl> {
        self.inner().config.acl_provider.default_acl()
    }

    /// The ACL given to a node created at `path` (relative to the namespace).
    pub fn acl_for_path(&self, path: &str) -> Vec<zk::Acl> {
        self.inner().config.acl_provider.acl_for_path(path)
    }

    /// The configured retry policy.
    pub fn retry_policy(&self) -> &Arc<dyn crate::retry::RetryPolicy> {
        &self.inner().config.retry_policy
    }

    /// The connection timeout (how long operations wait for a session).
    pub fn connection_timeout(&self) -> Duration {
        self.inner().config.connection_timeout
    }

    /// How many times the connection state has entered an error state under
    /// the [`ErrorPolicy`] (for the standard policy: every `Suspended` and
    /// every `Lost`). A hold records the value when it is granted; a larger
    /// value later means the hold went through a possible loss, even if the
    /// connection came back since. Counted before the state is announced, so
    /// whoever sees the new state also sees the new epoch.
    pub fn loss_epoch(&self) -> u64 {
        self.inner().loss_epoch.load(Ordering::Acquire)
    }

    /// Lock counters.
    pub fn metrics(&self) -> &Metrics {
        &self.inner().metrics
    }

    /// The current session, if one is established (it may be suspended).
    pub fn current_session(&self) -> Option<Session> {
        self.inner()
            .session_tx
            .borrow()
            .clone()
            .filter(|s| !s.is_terminated())
    }

    /// The current session, waiting up to the connection timeout for one.
    ///
    /// # Errors
    /// [`Error::Closed`] if the framework is closed or was never started;
    /// [`Error::Timeout`] if no session appears within the connection timeout.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes state.
    pub async fn session(&self) -> Result<Session> {
        self.inner().session().await
    }

    /// The client of the current session, waiting up to the connection
    /// timeout for one. The client is bound to that session: keep it for one
    /// piece of work, then ask again.
    ///
    /// # Errors
    /// As [`Framework::session`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes state.
    pub async fn client(&self) -> Result<zk::Client> {
        Ok(self.session().await?.client)
    }

    /// Runs `op` on the current session and retries it under the retry
    /// policy while it fails with a retryable error (connection loss with
    /// the outcome unknown, throttling, session moved). A session expiry is
    /// returned, never retried on a new session: work bound to a session
    /// does not silently move to the next one.
    ///
    /// # Errors
    /// The last error of `op`, mapped to [`Error`]; [`Error::Closed`] and
    /// [`Error::Timeout`] as in [`Framework::session`].
    ///
    /// # Cancel safety
    /// Dropping the future stops retrying; a request already sent may still
    /// be applied by the server.
    pub async fn call_with_retry<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: FnMut(zk::Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        let session = self.session().await?;
        self.inner().retry_on(&session, op).await
    }

    /// Runs `op` on the given session with the retry policy (see
    /// [`Framework::call_with_retry`]); fails with [`Error::SessionExpired`]
    /// once that session is gone.
    ///
    /// # Errors
    /// As [`Framework::call_with_retry`].
    ///
    /// # Cancel safety
    /// As [`Framework::call_with_retry`].
    pub async fn call_on_session<T, F, Fut>(&self, session: &Session, op: F) -> Result<T>
    where
        F: FnMut(zk::Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        self.inner().retry_on(session, op).await
    }

    /// Hands a node to the background cleaner, which deletes it (retrying
    /// through connection loss) while the framework is open. Missing nodes
    /// count as deleted.
    pub fn delete_in_background(&self, path: impl Into<String>) {
        self.inner()
            .schedule_cleanup(CleanupJob::Node { path: path.into() });
    }

    /// Waits until the background cleaner has no work left, or `timeout`
    /// passes. Returns whether it is idle.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes state.
    pub async fn wait_for_background_cleanup(&self, timeout: Duration) -> bool {
        let mut rx = self.inner().pending_cleanups.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|n| *n == 0))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// A future that completes once the framework is closed (at once if it
    /// already is). Useful beside a wait of your own in a `select!`.
    pub fn closed(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.inner().closed_tx.subscribe();
        async move {
            let _ = rx.wait_for(|c| *c).await;
        }
    }

    /// A future that completes once `session` is no longer the framework's
    /// current one (lost, replaced, or the framework closed). Work bound to
    /// that session (its ephemeral nodes, its watches) is over by then.
    pub fn session_gone(&self, session: &Session) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.inner().session_tx.subscribe();
        let generation = session.generation;
        async move {
            let _ = rx
                .wait_for(|s| s.as_ref().map(|s| s.generation) != Some(generation))
                .await;
        }
    }
}

impl Inner {
    pub(crate) fn check_open(&self) -> Result<()> {
        match self.status.load(Ordering::Acquire) {
            STARTED => Ok(()),
            _ => Err(Error::Closed),
        }
    }

    fn shut_down(&self) {
        if self.status.swap(CLOSED, Ordering::AcqRel) != CLOSED {
            tracing::info!("framework closing");
            self.closed_tx.send_replace(true);
            self.session_tx.send_replace(None);
        }
    }

    /// The one place where the connection state changes.
    pub(crate) fn change_state(&self, event: StateEvent) {
        let current = *self.state_tx.borrow();
        if let Some(next) = next_state(current, event) {
            tracing::info!(from = ?current, to = %next, ?event, "connection state changed");
            if self.config.error_policy.is_error_state(next) {
                self.loss_epoch.fetch_add(1, Ordering::AcqRel);
            }
            self.state_tx.send_replace(Some(next));
            let _ = self.events_tx.send(next);
        }
    }

    pub(crate) async fn session(&self) -> Result<Session> {
        self.check_open()?;
        let timeout = self.config.connection_timeout;
        let deadline = Instant::now() + timeout;
        let mut rx = self.session_tx.subscribe();
        let mut closed = self.closed_tx.subscribe();
        loop {
            self.check_open()?;
            if let Some(session) = rx.borrow_and_update().clone() {
                if !session.is_terminated() {
                    return Ok(session);
                }
            }
            tokio::select! {
                _ = rx.changed() => {}
                _ = closed.changed() => {}
                _ = tokio::time::sleep_until(deadline) => return Err(Error::Timeout(timeout)),
            }
        }
    }

    pub(crate) async fn retry_on<T, F, Fut>(&self, session: &Session, mut op: F) -> Result<T>
    where
        F: FnMut(zk::Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        let started = std::time::Instant::now();
        let mut retries = 0u32;
        loop {
            self.check_open()?;
            let err = match op(session.client.clone()).await {
                Ok(value) => return Ok(value),
                Err(err) => session.map_err(err),
            };
            if !err.is_retryable() {
                return Err(err);
            }
            let Some(delay) = self
                .config
                .retry_policy
                .allow_retry(retries, started.elapsed())
            else {
                tracing::debug!(%err, retries, "retry policy gave up");
                return Err(err);
            };
            retries += 1;
            tracing::debug!(%err, retries, ?delay, "retrying");
            let mut closed = self.closed_tx.subscribe();
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = closed.wait_for(|c| *c) => return Err(Error::Closed),
            }
        }
    }

    pub(crate) fn schedule_cleanup(&self, job: CleanupJob) {
        if self.status.load(Ordering::Acquire) == CLOSED {
            // Closing the session removes its ephemeral nodes.
            tracing::debug!(?job, "framework closed; background cleanup skipped");
            return;
        }
        self.pending_cleanups.send_modify(|n| *n += 1);
        if self.cleanup_tx.send(job).is_err() {
            self.pending_cleanups
                .send_modify(|n| *n = n.saturating_sub(1));
        }
    }
}

async fn dispatch_listeners(inner: Arc<Inner>) {
    let mut rx = inner.events_tx.subscribe();
    let mut closed = inner.closed_tx.subscribe();
    loop {
        tokio::select! {
            event = rx.recv() => match event {
                Ok(state) => inner.listeners.notify(state),
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(skipped = n, "listener dispatch lagged");
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = closed.wait_for(|c| *c) => return,
        }
    }
}
