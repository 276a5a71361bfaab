//! [`LockLoss`]: why a hold can no longer be trusted.
//!
//! Curator leaves loss detection to every user (add a connection-state
//! listener, treat `SUSPENDED` as "maybe lost"), and most get it wrong. Here
//! every hold answers [`Hold::lost`](crate::lock_internals::Hold::lost) and
//! [`Hold::is_valid`](crate::lock_internals::Hold::is_valid) with the reasons below.

use std::fmt;

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
    /// Nothing is held (the caller holds no such lock, or it was released).
    NotHeld,
    /// The server was not heard from on the hold's session for longer than
    /// the session timeout (on the monotonic clock): the session may have
    /// expired on the server, and the node with it, even though nothing has
    /// told this process yet, as after a long pause (a GC, SIGSTOP, a
    /// stopped VM). The hold is a lease (the guide's "Safety" chapter,
    /// `docs/guide/safety.md#a-hold-is-a-lease-as-in-chubby`).
    Stale,
    /// The holder gave the hold up because someone asked it to (a leader
    /// that steps down on a revocation request: the revocation protocol of
    /// elections).
    Revoked,
    /// A bound given to the hold passed (see
    /// [`HoldBounds`](crate::lock_internals::HoldBounds)): it lasted its
    /// longest, or went too long without progress. Its node was deleted by
    /// the library.
    BoundPassed(Bound),
}

/// Which bound of a hold passed (see
/// [`HoldBounds`](crate::lock_internals::HoldBounds)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Bound {
    /// [`HoldBounds::duration`](crate::lock_internals::HoldBounds::duration):
    /// the hold lasted its longest.
    Duration,
    /// [`HoldBounds::silence`](crate::lock_internals::HoldBounds::silence):
    /// no progress was reported for that long.
    Silence,
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Bound::Duration => "its hold bound (the longest it may last)",
            Bound::Silence => "its silence bound (the longest it may go without progress)",
        })
    }
}

impl fmt::Display for LockLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockLoss::ConnectionState(state) => write!(f, "connection state {state}"),
            LockLoss::SessionReplaced => f.write_str("the session that held the lock is gone"),
            LockLoss::NodeDeleted => f.write_str("the lock node was deleted"),
            LockLoss::Closed => f.write_str("the framework was closed"),
            LockLoss::NotHeld => f.write_str("nothing is held"),
            LockLoss::Revoked => f.write_str("given up at a revocation request"),
            LockLoss::BoundPassed(bound) => write!(f, "the hold passed {bound}; its node was deleted"),
            LockLoss::Stale => f.write_str(
                "the server was not heard from for longer than the session timeout: the session may have expired",
            ),
        }
    }
}
