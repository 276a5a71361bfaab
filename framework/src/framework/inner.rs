//! The framework's shared state: its status, the current session, the
//! connection state (changed in one place) and the background cleaner's
//! queue.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;
use zookeeper_client as zk;

use super::events::Events;
use super::events::{StateChange, StateEvents};
use super::{CleanupJob, Config, Extensions, Metrics, Session, CLOSED, LATENT, STARTED};
use crate::connect_failure::{speaks_tls, ConnectFailure, Refusals};
use crate::error::{Error, Result};
use crate::listener::Listeners;
use crate::retry::RetryLoop;
use crate::state::{next_state, ConnectionState, StateEvent};

/// The framework's shared state, behind every handle's `Arc`.
pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(super) status: AtomicU8,
    pub(super) session_tx: watch::Sender<Option<Session>>,
    pub(super) state_tx: watch::Sender<Option<ConnectionState>>,
    /// The broadcast of state changes; dropped on close, which ends every
    /// stream and the listener dispatch.
    pub(super) events: Mutex<Events>,
    pub(super) closed_tx: watch::Sender<bool>,
    /// The session being closed, taken out of `session_tx` by
    /// [`Inner::shut_down`] for the cleaner's final flush. Whoever takes it
    /// last drops the last client clone, which ends the session.
    pub(super) closing_session: Mutex<Option<Session>>,
    /// The state of the session being closed, for `close()` to wait on.
    pub(super) closing_watcher: Mutex<Option<zk::StateWatcher>>,
    pub(super) listeners: Arc<Listeners>,
    pub(super) cleanup_tx: mpsc::UnboundedSender<CleanupJob>,
    pub(super) cleanup_rx: Mutex<Option<mpsc::UnboundedReceiver<CleanupJob>>>,
    pub(super) pending_cleanups: watch::Sender<usize>,
    pub(super) tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Entries into an error state under the error policy (see
    /// [`Framework::loss_epoch`]).
    pub(super) loss_epoch: AtomicU64,
    pub(crate) metrics: Metrics,
    /// State and settings of the layers above (the lock engine's), kept
    /// without knowing their types.
    pub(crate) extensions: Arc<Extensions>,
    /// The last failure to connect that a person must act on, since the
    /// last usable connection (see `connect_failure.rs`).
    pub(crate) connect_failure: Arc<watch::Sender<Option<LastConnectFailure>>>,
}

/// A [`ConnectFailure`] and the endpoint it happened on.
#[derive(Clone, Debug)]
pub(crate) struct LastConnectFailure {
    pub(crate) endpoint: String,
    pub(crate) reason: ConnectFailure,
    /// Every host's last attempt was refused for a reason retrying cannot
    /// change: waiting for the connection timeout cannot help.
    pub(crate) everywhere: bool,
    /// When it was noted: a wait for a connection fails at once only on
    /// refusals that came after it began (the world may have been fixed
    /// since older ones: a certificate replaced, a server reconfigured).
    pub(crate) at: Instant,
}

impl LastConnectFailure {
    pub(crate) fn to_error(&self) -> Error {
        Error::Connect {
            endpoint: self.endpoint.clone(),
            reason: self.reason.clone(),
        }
    }
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inner")
            .field("connect_string", &self.config.connect_string)
            .field("status", &self.status.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Inner {
    pub(crate) fn check_open(&self) -> Result<()> {
        match self.status.load(Ordering::Acquire) {
            STARTED => Ok(()),
            LATENT => Err(Error::NotStarted),
            _ => Err(Error::Closed),
        }
    }

    /// Marks the framework closed (once): refuses new work and new
    /// sessions, moves the current session aside for the cleaner's final
    /// flush, wakes everything waiting on `closed`, ends the state
    /// broadcast. Does not wait; see [`Framework::close`].
    pub(super) fn shut_down(&self) {
        if self.status.swap(CLOSED, Ordering::AcqRel) == CLOSED {
            return;
        }
        tracing::info!("framework closing");
        // The status is CLOSED before this swap: the supervisor publishes a
        // session only while the status is not (see `publish_session`), so
        // no session can appear after this.
        if let Some(session) = self.session_tx.send_replace(None) {
            *self
                .closing_watcher
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(session.client.state_watcher());
            *self
                .closing_session
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(session);
        }
        self.closed_tx.send_replace(true);
        self.events.lock().unwrap_or_else(|e| e.into_inner()).tx = None;
        // Never started: nobody will read the handovers.
        drop(
            self.cleanup_rx
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
    }

    /// Makes `session` the current one, unless the framework is closed.
    /// Returns whether it was published.
    pub(crate) fn publish_session(&self, session: Session) -> bool {
        let mut published = false;
        self.session_tx.send_if_modified(|current| {
            if self.status.load(Ordering::Acquire) == CLOSED {
                return false;
            }
            *current = Some(session);
            published = true;
            true
        });
        published
    }

    /// The session set aside by [`Inner::shut_down`], if nobody took it yet.
    pub(crate) fn take_closing_session(&self) -> Option<Session> {
        self.closing_session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// The current session, if any and not terminated (no waiting).
    pub(crate) fn current_session(&self) -> Option<Session> {
        self.session_tx
            .borrow()
            .clone()
            .filter(|s| !s.is_terminated())
    }

    /// A receiver of every state change from now on (ended at once if the
    /// framework is closed).
    pub(crate) fn subscribe_events(&self) -> StateEvents {
        let events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        StateEvents {
            rx: events.tx.as_ref().map(broadcast::Sender::subscribe),
            seen_losses: events.losses,
            pending: None,
        }
    }

    /// The one place where the connection state changes. Serialised by the
    /// events lock, so the broadcast carries the changes in order.
    pub(crate) fn change_state(&self, event: StateEvent) {
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        let current = *self.state_tx.borrow();
        if let Some(next) = next_state(current, event) {
            tracing::info!(from = ?current, to = %next, ?event, "connection state changed");
            crate::telemetry::state_change(next.to_string());
            if self.config.error_policy.is_error_state(next) {
                self.loss_epoch.fetch_add(1, Ordering::AcqRel);
            }
            if next == ConnectionState::Lost {
                events.losses += 1;
            }
            self.state_tx.send_replace(Some(next));
            let losses = events.losses;
            if let Some(tx) = &events.tx {
                let _ = tx.send(StateChange {
                    state: next,
                    losses,
                });
            }
        }
    }

    pub(crate) async fn session(&self) -> Result<Session> {
        let mut sessions = self.session_tx.subscribe();
        self.wait_for(self.config.connection_timeout, &mut sessions, |session| {
            session.as_ref().filter(|s| !s.is_terminated()).cloned()
        })
        .await
    }

    /// Waits until `ready` finds what the caller waits for in the value of
    /// `changes` (looked at now and after each change), at most `timeout`.
    /// The one wait for a connection: it fails at once with
    /// [`Error::Closed`] when the framework closes, and with the refusal
    /// when one comes that waiting cannot cure (see
    /// [`check_immediate_failure`](Self::check_immediate_failure)); at the
    /// timeout, with why the attempts failed if that is known.
    pub(crate) async fn wait_for<W, T>(
        &self,
        timeout: std::time::Duration,
        changes: &mut watch::Receiver<W>,
        mut ready: impl FnMut(&W) -> Option<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + timeout;
        let mut closed = self.closed_tx.subscribe();
        let mut failures = self.connect_failure.subscribe();
        let since = Instant::now();
        loop {
            self.check_open()?;
            if let Some(found) = ready(&changes.borrow_and_update()) {
                return Ok(found);
            }
            self.check_immediate_failure(&mut failures, since)?;
            tokio::select! {
                _ = changes.changed() => {}
                _ = closed.changed() => {}
                _ = failures.changed() => {}
                _ = tokio::time::sleep_until(deadline) => return Err(self.timed_out(timeout)),
            }
        }
    }

    /// Fails a wait for a connection at once when the last attempt's
    /// failure is one waiting cannot cure: refused credentials, or a
    /// definitive refusal by every host of the ensemble. (The framework
    /// keeps trying in the background all the same.)
    pub(crate) fn check_immediate_failure(
        &self,
        failures: &mut watch::Receiver<Option<LastConnectFailure>>,
        since: Instant,
    ) -> Result<()> {
        match &*failures.borrow_and_update() {
            Some(failure) if failure.reason.is_immediate() => Err(failure.to_error()),
            Some(failure) if failure.everywhere && failure.at >= since => Err(failure.to_error()),
            _ => Ok(()),
        }
    }

    /// The error of a wait for a connection that timed out: why the
    /// attempts failed, when that is known and worth acting on.
    pub(crate) fn timed_out(&self, timeout: std::time::Duration) -> Error {
        match &*self.connect_failure.borrow() {
            Some(failure) => failure.to_error(),
            None => Error::Timeout(timeout),
        }
    }

    /// Remembers why an attempt to reach `endpoint` failed, if it is worth
    /// telling; see [`ConnectFailure::classify`]. A plaintext attempt the
    /// server closed without a word has its port probed for TLS once (in
    /// the background, see [`speaks_tls`]): a port that speaks only TLS
    /// is a definitive refusal from then on.
    pub(crate) fn note_connect_failure(
        failures: &Arc<watch::Sender<Option<LastConnectFailure>>>,
        refusals: &Arc<Refusals>,
        endpoint: &str,
        err: &zk::Error,
    ) {
        let mut reason = ConnectFailure::classify(endpoint, err);
        let closed_unanswered = reason.is_none()
            && endpoint.starts_with("tcp://")
            && matches!(err, zk::Error::ConnectionLoss);
        if closed_unanswered {
            match refusals.probe_once(endpoint) {
                Some(true) => reason = Some(ConnectFailure::OnlyTls),
                Some(false) => {}
                None => {
                    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                        let (failures, refusals) = (failures.clone(), refusals.clone());
                        let endpoint = endpoint.to_owned();
                        runtime.spawn(async move {
                            if speaks_tls(&endpoint).await {
                                refusals.found_only_tls(&endpoint);
                                Self::record_connect_failure(
                                    &failures,
                                    &refusals,
                                    &endpoint,
                                    Some(ConnectFailure::OnlyTls),
                                );
                            }
                        });
                    }
                }
            }
        }
        Self::record_connect_failure(failures, refusals, endpoint, reason);
    }

    /// Records how the last attempt on `endpoint` failed (`None`: for no
    /// reason worth telling).
    fn record_connect_failure(
        failures: &watch::Sender<Option<LastConnectFailure>>,
        refusals: &Refusals,
        endpoint: &str,
        reason: Option<ConnectFailure>,
    ) {
        let definitive = reason.as_ref().is_some_and(ConnectFailure::is_definitive);
        let everywhere = refusals.note(endpoint, definitive);
        match reason {
            Some(reason) => {
                tracing::warn!(%endpoint, %reason, everywhere, "cannot connect");
                failures.send_replace(Some(LastConnectFailure {
                    endpoint: endpoint.to_owned(),
                    reason,
                    everywhere,
                    at: Instant::now(),
                }));
            }
            // A host that may yet answer: no longer refused everywhere.
            None => {
                failures.send_if_modified(|last| match last {
                    Some(last) if last.everywhere => {
                        last.everywhere = false;
                        true
                    }
                    _ => false,
                });
            }
        }
    }

    /// A usable connection: earlier failures are history.
    pub(crate) fn clear_connect_failure(&self) {
        self.connect_failure
            .send_if_modified(|last| last.take().is_some());
    }

    pub(crate) async fn retry_on<T, F, Fut>(&self, session: &Session, mut op: F) -> Result<T>
    where
        F: FnMut(zk::Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        let mut retry = RetryLoop::new(&*self.config.retry_policy);
        loop {
            self.check_open()?;
            let err = match op(session.client.clone()).await {
                Ok(value) => return Ok(value),
                Err(err) => session.map_err(err),
            };
            if !err.is_retryable() {
                return Err(err);
            }
            tracing::debug!(%err, "retrying on the same session");
            let mut closed = self.closed_tx.subscribe();
            retry
                .next(err, async move {
                    let _ = closed.wait_for(|c| *c).await;
                })
                .await?;
        }
    }

    /// Hands a delete to the cleaner. Accepted until the cleaner's final
    /// flush is over (work interrupted by `close()` still gets its node
    /// deleted); after that, dropped with a debug line: the session's end
    /// removes ephemeral nodes.
    pub(crate) fn schedule_cleanup(&self, job: CleanupJob) {
        self.pending_cleanups.send_modify(|n| *n += 1);
        if let Err(refused) = self.cleanup_tx.send(job) {
            tracing::debug!(job = ?refused.0, "background cleaner stopped; delete skipped");
            self.pending_cleanups
                .send_modify(|n| *n = n.saturating_sub(1));
        }
    }
}
