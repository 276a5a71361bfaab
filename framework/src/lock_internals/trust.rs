//! The rules that decide whether a hold of a node can still be trusted (see
//! `Hold::check` for the whole list), asked by the hold itself and by an
//! acquire before it makes one. They look at the framework and the node
//! only, never at a hold.

use zookeeper_client as zk;

use super::node::AcquiredNode;
use crate::{ConnectionState, Framework, LockLoss, Session};

/// Why a hold of `node`, granted at loss epoch `epoch`, could not be
/// trusted now, if it could not (see [`Hold::check`]). Asked before a hold
/// is made, too, so that a grant found lost on arrival never counts as a
/// hold.
pub(crate) fn loss_of(framework: &Framework, node: &AcquiredNode, epoch: u64) -> Option<LockLoss> {
    if framework.is_closed() {
        return Some(LockLoss::Closed);
    }
    if !node.is_ephemeral() {
        // A persistent node does not depend on any session: only its
        // deletion (seen by `lost`, a fence or a release) ends the hold.
        return None;
    }
    let Some(session) = session_of(framework, node) else {
        return Some(LockLoss::SessionReplaced);
    };
    // The lease (see `Hold::check`): looked at before the connection state,
    // so that a process resuming from a pause gives this reason, whatever
    // its client may have noticed since.
    if unheard_too_long(session.client()) {
        return Some(LockLoss::Stale);
    }
    let policy = framework.error_policy();
    let state = framework.state();
    if let Some(state) = state.filter(|s| policy.is_error_state(*s)) {
        return Some(LockLoss::ConnectionState(state));
    }
    // The client knows of a broken connection a moment before the
    // framework's state follows (a request failing with `ConnectionLoss`,
    // say): from then on the hold is not trusted either.
    let suspended = ConnectionState::Suspended;
    if policy.is_error_state(suspended)
        && session.client().state() == zk::SessionState::Disconnected
    {
        return Some(LockLoss::ConnectionState(suspended));
    }
    if framework.loss_epoch() != epoch {
        // An error state came and went since the grant; with the same
        // session still current it can only have been a suspension.
        return Some(LockLoss::ConnectionState(ConnectionState::Suspended));
    }
    None
}

/// Whether more than the session timeout has passed since the server was
/// last heard from on `client`'s session, on tokio's clock (`std`'s
/// monotonic clock unless tokio's test clock is paused; see
/// [`Hold::check`]).
fn unheard_too_long(client: &zk::Client) -> bool {
    let now = tokio::time::Instant::now();
    now.saturating_duration_since(last_heard(client)) > client.session_timeout()
}

/// When the server was last heard from on `client`'s session: when the
/// request behind the newest answer was sent (an answer read late, after a
/// process stop, renews nothing past its request's sending). The client
/// reads it on tokio's clock, as every time it keeps (the vendored client's
/// tokio-clock.patch), and hands it out as a `std` `Instant`, its public
/// type: back on tokio's clock here, so that the lease compares, and sleeps
/// until, times of one clock, paused or not.
pub(crate) fn last_heard(client: &zk::Client) -> tokio::time::Instant {
    tokio::time::Instant::from_std(client.last_heard())
}

/// The framework's current session if it created `node` (any session for a
/// persistent node).
pub(crate) fn session_of(framework: &Framework, node: &AcquiredNode) -> Option<Session> {
    let session = framework.current_session()?;
    (!node.is_ephemeral() || session.generation() == node.generation()).then_some(session)
}
