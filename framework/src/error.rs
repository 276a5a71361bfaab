//! The one error type of the framework and the recipes built on it.
//!
//! ZooKeeper's result codes that callers act on get variants of their own
//! ([`Error::NoNode`], [`Error::SessionExpired`], …); everything the
//! framework itself refuses or detects (bad paths, a release by a non-owner,
//! a closed framework, a lost lock) has a variant too. Two classification
//! methods answer the questions every retry loop and recipe asks:
//! [`Error::is_retryable`] ("may I simply try again on this session?") and
//! [`Error::is_session_terminal`] ("is this session gone for good?").

use std::time::Duration;

use zookeeper_client as zk;

use crate::connect_failure::ConnectFailure;
use crate::loss::LockLoss;
use crate::path::PathError;
use crate::retry::InvalidRetryPolicy;

/// A specialised `Result` for framework and recipe operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the framework or a recipe.
#[non_exhaustive]
#[derive(thiserror::Error, Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The connection broke while a request was in flight: the request may or
    /// may not have been applied. Retryable on the same session.
    #[error("connection to ZooKeeper lost; the outcome of the request is unknown")]
    ConnectionLoss,
    /// The session expired (or was declared lost); every ephemeral node it
    /// owned is gone.
    #[error("ZooKeeper session expired")]
    SessionExpired,
    /// The session moved to another server while a request was in flight.
    #[error("ZooKeeper session moved to another server")]
    SessionMoved,
    /// The server is overloaded and throttled the request.
    #[error("request throttled by the ZooKeeper server")]
    Throttled,
    /// The node (or its parent) does not exist.
    #[error("node does not exist{}", at(.path))]
    NoNode {
        /// The node the request named, when the framework knows it (empty
        /// for the result of a request of your own, e.g. through
        /// [`Framework::call_with_retry`](crate::Framework::call_with_retry)).
        path: String,
    },
    /// The node already exists.
    #[error("node already exists{}", at(.path))]
    NodeExists {
        /// The node the request named, when the framework knows it (as for
        /// [`Error::NoNode`]).
        path: String,
    },
    /// The node still has children.
    #[error("node has children")]
    NotEmpty,
    /// The node's version did not match the expected one.
    #[error("node version does not match")]
    BadVersion,
    /// The session lacks the permission the ACL requires.
    #[error("not authorised by the node's ACL")]
    NoAuth,
    /// Authentication was refused; the session is unusable.
    #[error("authentication failed")]
    AuthFailed,
    /// Ephemeral nodes cannot have children.
    #[error("ephemeral nodes cannot have children")]
    NoChildrenForEphemerals,
    /// The ACL is empty or malformed.
    #[error("invalid ACL")]
    InvalidAcl,
    /// Any other error reported by `zookeeper-client`.
    #[error("ZooKeeper error: {0}")]
    Zk(zk::Error),
    /// A path broke ZooKeeper's rules; nothing was sent.
    #[error(transparent)]
    InvalidPath(#[from] PathError),
    /// An argument was refused before anything was sent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The framework could not build a session within the connection timeout,
    /// or an operation's deadline passed.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// No session could be built, for a reason a person must act on: a
    /// certificate the server or we refused, a port that does not speak
    /// TLS, credentials the server refused. Returned to whoever waits for a
    /// session in place of [`Error::Timeout`] (at once for refused
    /// credentials); the framework keeps trying in the background.
    #[error("cannot connect to {endpoint}: {reason}")]
    Connect {
        /// The host it failed on, as `tcp://host:port` or `tcp+tls://host:port`.
        endpoint: String,
        /// Why.
        reason: ConnectFailure,
    },
    /// `release()` was called by someone who does not hold the lock: another
    /// task than the owner of a task-owned hold, or nobody holds it at all.
    #[error("the caller does not hold this lock")]
    NotOwner,
    /// A hold could not be trusted any more, or a lock's node vanished
    /// (session expiry, deleted by someone else) while it was held or being
    /// acquired.
    #[error("the lock {path} was lost: {reason}")]
    LockLost {
        /// The node that was held or waited on (or the lock's path when
        /// that itself is gone).
        path: String,
        /// Why it can no longer be trusted.
        reason: LockLoss,
    },
    /// A request would exceed ZooKeeper's packet limit (`jute.maxbuffer`,
    /// 1 MiB by default; see
    /// [`FrameworkBuilder::max_packet_size`](crate::FrameworkBuilder::max_packet_size)).
    /// The server would drop the connection on it, and with it every hold
    /// of the session, so it is refused before anything is sent.
    #[error("a request of {size} bytes exceeds ZooKeeper's packet limit of {limit} bytes; nothing was sent")]
    RequestTooLarge {
        /// The request's size as sent (its serialised form).
        size: usize,
        /// The framework's limit.
        limit: usize,
    },
    /// An owner holding a read lock asked for the write lock of the same
    /// read-write lock: its write node would queue behind its own read node
    /// forever, so the request is refused at once. Release the read lock
    /// first.
    #[error("cannot upgrade a read lock to the write lock; release the read lock first")]
    UpgradeNotSupported,
    /// The current task asked a lock for a hold while it already holds the
    /// same lock through that instance in another form: a task-bound hold
    /// (`acquire`) while a guard it took is alive, or a guard (`lock`)
    /// while it holds the task-bound hold. Waiting would mean waiting for
    /// itself, so the request is refused at once; release the other hold
    /// first, or keep to one form. (A guard counts for the task that took
    /// it, even if it was moved to another task since.)
    #[error("this task already holds {path} in another form (a guard, or a task-bound hold); waiting for it again would wait for itself")]
    WouldDeadlock {
        /// The lock's path.
        path: String,
    },
    /// The lock's path holds participants of another family of nodes
    /// (another library's layout, or another recipe) that cannot see ours,
    /// nor we theirs: queueing there could give two holders, so the acquire
    /// gave its node back and failed at once. Retrying cannot change it
    /// while they are there. See
    /// [`lock_internals::layout`](crate::lock_internals::layout).
    #[error("{path} has participants of {theirs} (e.g. {node}), which would not see ours, {ours}, nor we theirs: not queueing beside them; {fix}")]
    LayoutConflict {
        /// The lock's path.
        path: String,
        /// What our lock is (its recipe and layout).
        ours: String,
        /// The family of the participants found.
        theirs: crate::lock_internals::layout::Family,
        /// One of their nodes (its name).
        node: String,
        /// What to do about it.
        fix: String,
    },
    /// The framework was closed.
    #[error("the framework is closed")]
    Closed,
    /// The framework was never started: call
    /// [`Framework::start`](crate::Framework::start) first.
    #[error("the framework is not started; call start() first")]
    NotStarted,
}

impl Error {
    /// Whether the operation may be tried again on the same session: the
    /// connection broke with the outcome unknown, the server throttled the
    /// request, or the session moved.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::ConnectionLoss | Error::Throttled | Error::SessionMoved
        )
    }

    /// Whether the failure says nothing about the request itself, only that
    /// ZooKeeper could not be reached well enough right now: retryable
    /// errors, a session that ended (work can go on on the next one), or a
    /// wait for a session that timed out or could not connect. Background work (deleting a node,
    /// say) keeps trying after these and gives up on anything else.
    pub fn is_transient(&self) -> bool {
        self.is_retryable()
            || self.is_session_terminal()
            || matches!(self, Error::Timeout(_) | Error::Connect { .. })
    }

    /// Whether the session that produced this error is gone for good (its
    /// ephemeral nodes included).
    pub fn is_session_terminal(&self) -> bool {
        matches!(self, Error::SessionExpired | Error::AuthFailed)
    }

    /// Maps a `zookeeper-client` error, knowing the state of the session that
    /// returned it.
    ///
    /// Requests in flight when a connection breaks usually fail with
    /// `zk::Error::Custom(..)` (an I/O error or "no response") rather than
    /// `ConnectionLoss`; while the session is alive both mean "connection
    /// broke, outcome unknown".
    pub fn from_zk(err: zk::Error, session_state: zk::SessionState) -> Error {
        let terminal = session_state.is_terminated();
        match err {
            zk::Error::ConnectionLoss | zk::Error::Custom(_) if !terminal => Error::ConnectionLoss,
            zk::Error::ConnectionLoss | zk::Error::Custom(_) | zk::Error::SessionExpired => {
                match session_state {
                    zk::SessionState::Closed => Error::Closed,
                    zk::SessionState::AuthFailed => Error::AuthFailed,
                    _ => Error::SessionExpired,
                }
            }
            zk::Error::ClientClosed => Error::Closed,
            zk::Error::SessionMoved => Error::SessionMoved,
            zk::Error::Throttled => Error::Throttled,
            zk::Error::NoNode => Error::NoNode {
                path: String::new(),
            },
            zk::Error::NodeExists => Error::NodeExists {
                path: String::new(),
            },
            zk::Error::NotEmpty => Error::NotEmpty,
            zk::Error::BadVersion => Error::BadVersion,
            zk::Error::NoAuth => Error::NoAuth,
            zk::Error::AuthFailed => Error::AuthFailed,
            zk::Error::NoChildrenForEphemerals => Error::NoChildrenForEphemerals,
            zk::Error::InvalidAcl => Error::InvalidAcl,
            other => Error::Zk(other),
        }
    }
}

/// ": <path>" when the path is known.
fn at(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(": {path}")
    }
}

impl Error {
    /// Names `path` in an error about a node that does not name one yet
    /// ([`Error::NoNode`], [`Error::NodeExists`]); other errors are
    /// returned as they are.
    pub fn at_path(self, path: &str) -> Error {
        match self {
            Error::NoNode { path: known } if known.is_empty() => Error::NoNode {
                path: path.to_owned(),
            },
            Error::NodeExists { path: known } if known.is_empty() => Error::NodeExists {
                path: path.to_owned(),
            },
            other => other,
        }
    }

    /// [`Error::LockLost`] for `path`.
    pub fn lock_lost(path: impl Into<String>, reason: LockLoss) -> Error {
        Error::LockLost {
            path: path.into(),
            reason,
        }
    }
}

impl From<InvalidRetryPolicy> for Error {
    fn from(err: InvalidRetryPolicy) -> Self {
        Error::InvalidArgument(err.to_string())
    }
}

impl From<zk::Error> for Error {
    /// Maps without knowing the session state; prefer [`Error::from_zk`].
    fn from(err: zk::Error) -> Self {
        Error::from_zk(err, zk::SessionState::SyncConnected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn error_is_send_sync() {
        assert_send_sync::<Error>();
    }

    #[test]
    fn broken_connections_are_retryable_while_the_session_lives() {
        // `zk::Error::Custom` cannot be built outside zookeeper-client; its
        // mapping shares the arm with `ConnectionLoss`.
        let lost = zk::Error::ConnectionLoss;
        let err = Error::from_zk(lost.clone(), zk::SessionState::Disconnected);
        assert_eq!(err, Error::ConnectionLoss);
        assert!(err.is_retryable());
        let err = Error::from_zk(lost, zk::SessionState::Expired);
        assert_eq!(err, Error::SessionExpired);
        assert!(err.is_session_terminal());
        assert!(!err.is_retryable());
    }

    #[test]
    fn semantic_errors_are_not_retryable() {
        for e in [
            zk::Error::NoNode,
            zk::Error::NodeExists,
            zk::Error::BadVersion,
            zk::Error::NoAuth,
        ] {
            let err = Error::from(e);
            assert!(!err.is_retryable(), "{err}");
            assert!(!err.is_session_terminal(), "{err}");
        }
        assert_eq!(
            Error::from_zk(zk::Error::ClientClosed, zk::SessionState::Closed),
            Error::Closed
        );
    }
}
