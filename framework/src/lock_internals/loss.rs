//! The lock-loss signal: a future that completes when a hold can no longer
//! be trusted.
//!
//! Curator leaves this to every user (add a connection-state listener, treat
//! `SUSPENDED` as "maybe lost"), and most get it wrong. Here a holder simply
//! awaits [`LockInternals::lost`](super::LockInternals::lost) next to its
//! work, e.g. in a `select!`, and stops when it fires.

use std::fmt;

use zookeeper_client as zk;

use super::AcquiredNode;
use crate::framework::Framework;
use crate::state::ConnectionState;

/// Why a hold can no longer be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockLoss {
    /// The connection state became an error state under the framework's
    /// [`ErrorPolicy`](crate::ErrorPolicy): `Suspended` (the lock may be
    /// gone) or `Lost` (it is gone).
    ConnectionState(ConnectionState),
    /// The session that created the (ephemeral) node is no longer the
    /// framework's session: the node died with it.
    SessionReplaced,
    /// The node was deleted by someone else (or released meanwhile).
    NodeDeleted,
    /// The framework was closed.
    Closed,
}

impl fmt::Display for LockLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockLoss::ConnectionState(state) => write!(f, "connection state {state}"),
            LockLoss::SessionReplaced => f.write_str("the session that held the lock is gone"),
            LockLoss::NodeDeleted => f.write_str("the lock node was deleted"),
            LockLoss::Closed => f.write_str("the framework was closed"),
        }
    }
}

/// Checks the conditions that need no I/O.
pub(crate) fn check_now(framework: &Framework, node: &AcquiredNode) -> Option<LockLoss> {
    if framework.is_closed() {
        return Some(LockLoss::Closed);
    }
    if let Some(state) = framework.state() {
        if framework.error_policy().is_error_state(state) {
            return Some(LockLoss::ConnectionState(state));
        }
    }
    if node.is_ephemeral()
        && framework.current_session().map(|s| s.generation()) != Some(node.generation())
    {
        return Some(LockLoss::SessionReplaced);
    }
    None
}

/// Completes with the first reason the hold of `node` is lost.
pub(crate) async fn wait(framework: Framework, node: AcquiredNode) -> LockLoss {
    let mut states = framework.state_watcher();
    let closed = framework.closed();
    tokio::pin!(closed);
    loop {
        states.borrow_and_update();
        if let Some(loss) = check_now(&framework, &node) {
            return loss;
        }
        // Watch the node itself (a suspended session queues the request
        // until it reconnects, so this never spins). The session is held for
        // the request only, never while waiting for the watch: a hold kept
        // by the caller must not keep the session open after `close()`.
        let deleted = async {
            loop {
                let watched = {
                    let Some(session) = framework.current_session() else {
                        return std::future::pending::<()>().await;
                    };
                    session.client().check_and_watch_stat(node.path()).await
                };
                match watched {
                    Ok((None, _)) => return,
                    Ok((Some(_), watcher)) => {
                        let event = watcher.changed().await;
                        match event.event_type {
                            zk::EventType::NodeDeleted => return,
                            zk::EventType::Session => return std::future::pending().await,
                            _ => continue, // data changed (e.g. a revocation request): watch again
                        }
                    }
                    Err(_) => {
                        // Connection trouble shows up as a state change; wait for it.
                        return std::future::pending().await;
                    }
                }
            }
        };
        tokio::select! {
            _ = deleted => return LockLoss::NodeDeleted,
            _ = states.changed() => {}
            _ = &mut closed => return LockLoss::Closed,
        }
    }
}
