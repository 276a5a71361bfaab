//! Cooperative revocation (Curator's `Revocable` / `Revoker`).
//!
//! A participant that agreed to be revocable watches the data of its own
//! node. Anyone may ask it to give the lock up by writing [`REVOKE_MESSAGE`]
//! into that node ([`Revoker::attempt_revoke`]); the participant's
//! [`RevocationListener`] is then called. Nothing is forced: the listener
//! decides (typically it tells the owning task to release). The protocol and
//! the payload are Curator's, so a JVM service can revoke a Rust holder and
//! the other way round.
//!
//! The watch runs on a task of its own, never on `zookeeper-client`'s event
//! path, and ends by itself when the node is deleted (released, cancelled or
//! gone with its session) or the framework closes.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use zookeeper_client as zk;

use crate::retry::Backoff;
use crate::{path, Error, Framework, Result, Session, SessionPort};

/// The pause before the watch reads its node again after a retryable
/// failure (the connection is down, say): a fixed 100 ms, so that a request
/// written while the connection was down is seen soon after it comes back.
/// The watch ends by itself with its session, so it cannot spin for long.
const REREAD_BACKOFF: Backoff = Backoff::new(
    std::time::Duration::from_millis(100),
    std::time::Duration::from_millis(100),
);

/// The data a revoker writes into a participant's node (Curator's value).
pub const REVOKE_MESSAGE: &[u8] = b"__REVOKE__";

/// Told when someone asks this participant to give its lock up.
pub trait RevocationListener: Send + Sync + 'static {
    /// Called (on a task of its own) each time a revocation request is
    /// written to `node_path`, our participant node. Release the lock from
    /// here, or signal the task that owns it.
    fn revocation_requested(&self, node_path: &str);
}

impl<F> RevocationListener for F
where
    F: Fn(&str) + Send + Sync + 'static,
{
    fn revocation_requested(&self, node_path: &str) {
        self(node_path)
    }
}

/// A registered listener, cheap to clone.
#[derive(Clone)]
pub struct Revocation(pub(crate) Arc<dyn RevocationListener>);

impl Revocation {
    /// Wraps a listener.
    pub fn new(listener: impl RevocationListener) -> Self {
        Revocation(Arc::new(listener))
    }
}

impl fmt::Debug for Revocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Revocation(..)")
    }
}

/// A lock's "make later acquires revocable" switch, shared by the lock's
/// clones: [`set`](Self::set) by `make_revocable` / `clear_revocable`,
/// read by every acquire.
#[derive(Debug, Default)]
pub struct RevocationSetting(std::sync::Mutex<Option<Revocation>>);

impl RevocationSetting {
    /// Later acquires watch their nodes for revocation requests and call
    /// this listener (`None`: they no longer do; holds already revocable
    /// stay so).
    pub fn set(&self, revocation: Option<Revocation>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = revocation;
    }

    /// The listener for an acquire starting now, if any.
    pub fn current(&self) -> Option<Revocation> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Asks the holder of a participant node to give it up.
#[derive(Clone, Copy, Debug, Default)]
pub struct Revoker;

impl Revoker {
    /// Writes the revocation request into `node_path` (a participant node,
    /// e.g. from `participant_nodes()`). A node that no longer exists is not
    /// an error: there is nothing left to revoke.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a bad path (nothing sent); ZooKeeper errors
    /// retrying could not overcome (e.g. [`Error::NoAuth`]); [`Error::Closed`].
    ///
    /// # Cancel safety
    /// The request may or may not have been written when the future is dropped.
    pub async fn attempt_revoke(framework: &Framework, node_path: &str) -> Result<()> {
        path::validate_path(node_path)?;
        let target = node_path.to_owned();
        let written = framework
            .call_with_retry(|client| {
                let target = target.clone();
                async move { client.set_data(&target, REVOKE_MESSAGE, None).await }
            })
            .await;
        match written {
            Ok(_) | Err(Error::NoNode { .. }) => Ok(()),
            Err(err) => Err(err),
        }
    }
}

/// Watches our own node until it goes away, calling the listener on every
/// revocation request (see [`watch_data`]).
pub(crate) fn spawn_watch(
    framework: Framework,
    session: Session,
    node_path: String,
    revocation: Revocation,
) {
    let node = node_path.clone();
    watch_data(
        &framework,
        session,
        node_path,
        std::future::pending(),
        move |data| {
            if data == REVOKE_MESSAGE {
                tracing::info!(%node, "revocation requested");
                crate::telemetry::revocation(path::split(&node).0);
                revocation.0.revocation_requested(&node);
            }
            false
        },
    );
}

/// Watches the data of the node at `path` on `session`, on a task of its
/// own: `seen` is given the data now and after each change, and ends the
/// watch by returning `true`. The watch also ends when the node is deleted,
/// the session ends, the framework closes, `stop` completes, or a read fails
/// in a way retrying cannot mend; a read that fails for a while (the
/// connection is down) is made again after a short pause, so a change made
/// meanwhile is seen soon after the connection comes back.
///
/// The one watch of a node's data for a request: the locks' revocation
/// ([`REVOKE_MESSAGE`]) and an election's revocation requests use it. The
/// task keeps neither a framework handle nor the session while it waits: it
/// asks for the session before each read, so it never delays the end of the
/// session in `close()`.
pub fn watch_data(
    framework: &Framework,
    session: Session,
    path: String,
    stop: impl Future<Output = ()> + Send + 'static,
    mut seen: impl FnMut(&[u8]) -> bool + Send + 'static,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(node = %path, "no tokio runtime: the watch of the node was not started");
        return;
    };
    let closed = framework.closed();
    let gone = framework.session_gone(&session);
    let port = framework.port();
    let generation = session.generation();
    drop(session);
    runtime.spawn(async move {
        tokio::select! {
            () = watch_loop(&port, generation, &path, &mut seen) => {}
            () = stop => {}
            _ = closed => {}
            _ = gone => {}
        }
        tracing::debug!(node = %path, "watch of the node's data ended");
    });
}

async fn watch_loop(
    port: &SessionPort,
    generation: u64,
    node_path: &str,
    seen: &mut (impl FnMut(&[u8]) -> bool + Send),
) {
    let mut pauses = REREAD_BACKOFF.start();
    loop {
        let read = {
            let Some(session) = port
                .current_session()
                .filter(|s| s.generation() == generation)
            else {
                return;
            };
            match session.client().get_and_watch_data(node_path).await {
                Ok((data, _, watcher)) => Ok((data, watcher)),
                Err(err) => Err((session.map_err(err.clone()).is_retryable(), err)),
            }
        };
        let (data, watcher) = match read {
            Ok(found) => {
                pauses.reset();
                found
            }
            Err((_, zk::Error::NoNode)) => return,
            Err((true, _)) => {
                tokio::time::sleep(pauses.next_pause()).await;
                continue;
            }
            Err((false, err)) => {
                tracing::debug!(%err, node = %node_path, "revocation watch stopped");
                return;
            }
        };
        if seen(&data) {
            return;
        }
        let event = watcher.changed().await;
        match event.event_type {
            zk::EventType::NodeDeleted => return,
            zk::EventType::Session if event.session_state.is_terminated() => return,
            _ => {}
        }
    }
}
