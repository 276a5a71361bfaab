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
mod events;
mod inner;
mod metrics;
mod port;
#[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
mod sasl;
mod session;
mod supervisor;
mod watcher;

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
use self::events::Events;
use self::events::{dispatch_listeners, EVENTS_CAPACITY};
pub(crate) use self::inner::Inner;
pub use self::metrics::Metrics;
pub(crate) use self::port::{BuilderExtensions, Extensions, SessionPort};
pub use self::session::Session;
pub use self::watcher::StateWatcher;
use crate::error::{Error, Result};
use crate::listener::{ConnectionStateListener, ListenerHandle, Listeners};
use crate::state::{ConnectionState, ErrorPolicy};

pub(super) const LATENT: u8 = 0;
pub(super) const STARTED: u8 = 1;
pub(super) const CLOSED: u8 = 2;

/// The longest `close()` waits for the server to confirm the session's end.
const SESSION_END_WAIT_MAX: Duration = Duration::from_secs(3);
/// Extra time the background tasks get to stop, beyond the final flush.
const TASKS_GRACE: Duration = Duration::from_millis(500);

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
/// # async fn demo() -> zk_curator::Result<()> {
/// use std::time::Duration;
/// use zk_curator::Framework;
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

    fn from_config(config: Config, extensions: Extensions) -> Framework {
        let extensions = Arc::new(extensions);
        let (cleanup_tx, cleanup_rx) = mpsc::unbounded_channel();
        let (events_tx, _) = broadcast::channel(EVENTS_CAPACITY);
        let inner = Inner {
            config,
            status: AtomicU8::new(LATENT),
            session_tx: watch::Sender::new(None),
            state_tx: watch::Sender::new(None),
            events: Mutex::new(Events {
                tx: Some(events_tx),
                losses: 0,
            }),
            closed_tx: watch::Sender::new(false),
            closing_session: Mutex::new(None),
            closing_watcher: Mutex::new(None),
            listeners: Arc::new(Listeners::default()),
            cleanup_tx,
            cleanup_rx: Mutex::new(Some(cleanup_rx)),
            pending_cleanups: watch::Sender::new(0),
            tasks: Mutex::new(Vec::new()),
            loss_epoch: AtomicU64::new(0),
            metrics: Metrics {
                extensions: extensions.clone(),
                ..Metrics::default()
            },
            extensions,
            connect_failure: Arc::new(watch::Sender::new(None)),
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
        // Subscribed before the supervisor runs, so listeners hear every change.
        let events = inner.subscribe_events();
        let mut tasks = inner.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.push(runtime.spawn(supervisor::run(inner.clone())));
        tasks.push(runtime.spawn(dispatch_listeners(inner.clone(), events)));
        if let Some(rx) = cleanup_rx {
            tasks.push(runtime.spawn(cleanup::run(inner.clone(), rx)));
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = inner.config.tls.clone() {
            tasks.push(runtime.spawn(reload_tls(inner.clone(), tls)));
        }
        tracing::info!(connect = %inner.config.connect_string, namespace = ?inner.config.namespace, "framework started");
        Ok(())
    }

    /// Closes the framework and ends its session, then returns.
    ///
    /// In order: new work is refused and work in progress is interrupted
    /// (it fails with [`Error::Closed`]); the state stream and the listener
    /// dispatch end; the background cleaner tries every pending delete once
    /// more on the still-open session (the final flush, at most 2 s or the
    /// connection timeout if shorter; this is what removes persistent nodes
    /// handed to it); the framework drops every client of the session it
    /// holds, which sends the server a close request; finally `close()`
    /// waits until the session reports its end. When it returns, the server
    /// has confirmed the close, so ephemeral nodes are gone and a process may
    /// exit at once. If the server cannot be reached, each of the two waits
    /// is bounded (the wait for the session's end by the connection timeout,
    /// capped at 3 s), and the session then ends on the server by timing
    /// out.
    ///
    /// A `zk::Client` obtained from [`Framework::client`] and still kept by
    /// the caller keeps the session open: `close()` then returns after the
    /// bounded wait and the session ends when that client is dropped.
    ///
    /// Every later operation fails with [`Error::Closed`]. Idempotent: a
    /// second call waits for the same end.
    ///
    /// # Cancel safety
    /// Closing takes effect at the first poll. Dropping the future only skips
    /// the waiting: the final flush and the end of the session still happen
    /// in the background.
    pub async fn close(&self) {
        self.close_by(None).await;
    }

    /// [`close`](Self::close), bounded as a whole by `limit`: for shutdown
    /// paths that must not wait on a server that is gone. Whatever is not
    /// done by then is given up: pending background deletes are dropped
    /// (the session's end removes its ephemeral nodes) and the session ends
    /// on the server by timing out if the close request cannot reach it.
    /// Returns whether the server confirmed the session's end in time.
    ///
    /// # Cancel safety
    /// As [`close`](Self::close).
    pub async fn close_within(&self, limit: Duration) -> bool {
        self.close_by(Some(Instant::now() + limit)).await
    }

    async fn close_by(&self, limit: Option<Instant>) -> bool {
        let inner = self.inner();
        let started = Instant::now();
        let cap = |deadline: Instant| limit.map_or(deadline, |limit| deadline.min(limit));
        inner.shut_down();
        let watcher = inner
            .closing_watcher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let end_limit = inner.config.connection_timeout.min(SESSION_END_WAIT_MAX);
        let tasks: Vec<_> =
            std::mem::take(&mut *inner.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        let tasks_deadline =
            cap(started + cleanup::FLUSH_LIMIT.min(inner.config.connection_timeout) + TASKS_GRACE);
        for mut task in tasks {
            if tokio::time::timeout_at(tasks_deadline, &mut task)
                .await
                .is_err()
            {
                tracing::warn!("a background task did not stop in time; aborted");
                task.abort();
            }
        }
        // Normally the cleaner took and dropped it after its flush.
        drop(inner.take_closing_session());
        let Some(mut watcher) = watcher else {
            tracing::info!(took = ?started.elapsed(), "framework closed (no session)");
            return true;
        };
        let ended = tokio::time::timeout_at(cap(Instant::now() + end_limit), async {
            loop {
                let state = watcher.peek_state();
                if state.is_terminated() {
                    return state;
                }
                watcher.changed().await;
            }
        })
        .await;
        match ended {
            Ok(state) => {
                tracing::info!(?state, took = ?started.elapsed(), "framework closed; session ended");
                true
            }
            Err(_) => {
                tracing::warn!(
                    ?end_limit,
                    took = ?started.elapsed(),
                    "framework closed; the server did not confirm the session's end in time"
                );
                false
            }
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
    /// [`Error::Timeout`] when `timeout` passes first, or
    /// [`Error::Connect`] in its place when the attempts failed for a reason
    /// to act on (a certificate, the wrong port, nothing listening:
    /// [`ConnectFailure::ConnectionRefused`](crate::ConnectFailure::ConnectionRefused),
    /// told at the timeout, as a server may be restarting). It comes at
    /// once, before the timeout, for refused credentials, and when the last
    /// attempt on every host of the ensemble was refused for a reason
    /// retrying cannot change (our certificate refused, the server's
    /// untrusted or expired, a port that does not speak TLS or speaks only
    /// TLS), the latest of them since this wait began; the framework
    /// keeps trying in the background all the same, for whoever waits
    /// again. [`Error::Closed`] if the framework is closed or not started.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes state.
    pub async fn block_until_connected(&self, timeout: Duration) -> Result<()> {
        let inner = self.inner();
        let mut states = inner.state_tx.subscribe();
        inner
            .wait_for(timeout, &mut states, |state| {
                state
                    .is_some_and(ConnectionState::is_connected)
                    .then_some(())
            })
            .await
    }

    /// The current connection state, `None` before the first connection.
    pub fn state(&self) -> Option<ConnectionState> {
        *self.inner().state_tx.borrow()
    }

    /// A watch on the connection state (`None` before the first
    /// connection). It hands out copies of the state, so nothing a caller
    /// keeps can hold up the framework's next change.
    pub fn state_watcher(&self) -> StateWatcher {
        StateWatcher::new(self.inner().state_tx.subscribe())
    }

    /// Every state change from now on, as a stream; it ends once the
    /// framework is closed (at once if it already is).
    ///
    /// A consumer that falls more than 64 changes behind skips the oldest
    /// ones, with one exception: if a skipped change was
    /// [`ConnectionState::Lost`], the consumer receives `Lost` before the
    /// next change it does get. A loss is never lost to lag.
    pub fn state_changes(&self) -> impl Stream<Item = ConnectionState> + Send + 'static {
        let events = self.inner().subscribe_events();
        futures::stream::unfold(events, |mut events| async move {
            let state = events.recv().await?;
            Some((state, events))
        })
    }

    /// Registers a callback for every state change; it stays registered
    /// while the returned handle lives.
    pub fn add_listener(&self, listener: impl ConnectionStateListener) -> ListenerHandle {
        self.inner().listeners.add(Arc::new(listener))
    }

    /// The identity participant nodes carry when a recipe gives no data of
    /// its own (`None` when turned off with
    /// [`FrameworkBuilder::holder_identity`]).
    pub fn holder_identity(&self) -> Option<&crate::HolderIdentity> {
        self.inner().config.identity.as_ref()
    }

    /// The data of participant nodes created without data of their own:
    /// the [`holder_identity`](Self::holder_identity) as JSON, or nothing.
    pub fn default_node_data(&self) -> &[u8] {
        &self.inner().config.default_node_data
    }

    /// The error policy recipes apply to held locks.
    pub fn error_policy(&self) -> ErrorPolicy {
        self.inner().config.error_policy
    }

    /// The longest request sent (see
    /// [`FrameworkBuilder::max_packet_size`]).
    pub fn max_packet_size(&self) -> usize {
        self.inner().config.max_packet_size
    }

    /// The bytes the namespace adds to every path on the wire.
    pub(crate) fn namespace_len(&self) -> usize {
        self.namespace().map_or(0, str::len)
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

    /// Counters (the lock engine's among them).
    pub fn metrics(&self) -> &Metrics {
        &self.inner().metrics
    }

    /// The current session, if one is established (it may be suspended).
    pub fn current_session(&self) -> Option<Session> {
        self.inner().current_session()
    }

    /// The current session, waiting up to the connection timeout for one.
    ///
    /// # Errors
    /// [`Error::Closed`] if the framework is closed, [`Error::NotStarted`]
    /// if it was never started; [`Error::Timeout`] if no session appears
    /// within the connection timeout, or [`Error::Connect`] in its place
    /// (at once for refused credentials, and for a refusal retrying cannot
    /// change by every host; see
    /// [`block_until_connected`](Self::block_until_connected)).
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
    /// through connection loss, with backoff, without giving up) while the
    /// framework is open, and tries once more in the final flush of
    /// [`Framework::close`]. The same path handed over twice is one job.
    /// Missing nodes count as deleted.
    pub fn delete_in_background(&self, path: impl Into<String>) {
        self.inner()
            .schedule_cleanup(CleanupJob::Node { path: path.into() });
    }

    /// Waits until the background cleaner has no work left, or `timeout`
    /// passes. Returns whether it is idle. Deletes of releases that returned
    /// before their answer (see
    /// [`FrameworkBuilder::release_before_reply`](crate::FrameworkBuilder::release_before_reply))
    /// count as its work until they are answered.
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

/// Reads the TLS files again every reload interval while the framework
/// runs (they are also read before each session is built).
#[cfg(feature = "tls")]
async fn reload_tls(inner: Arc<Inner>, tls: Arc<crate::tls::LiveTls>) {
    let mut closed = inner.closed_tx.subscribe();
    let every = tls.config().reload_every();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => tls.reload(),
            _ = closed.wait_for(|c| *c) => return,
        }
    }
}
