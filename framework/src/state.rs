//! Connection state, with Curator's meaning, and the error policy.
//!
//! ZooKeeper distinguishes a broken *connection* (the session may still be
//! alive on the server, and every ephemeral node with it) from a dead
//! *session* (every ephemeral node is gone). Lock holders care about the
//! difference: while [`ConnectionState::Suspended`] nobody can tell whether
//! the lock is still ours; once [`ConnectionState::Lost`] it certainly is
//! not. The framework therefore declares `Lost` itself once `Suspended` has
//! lasted the negotiated session timeout, instead of waiting for the
//! server's "expired" answer, which only arrives after reconnecting.
//!
//! All state changes go through one pure function, [`next_state`], so that
//! the rules live in one place and are unit tested without a server.

use std::fmt;

use zookeeper_client as zk;

/// The framework's view of its connection to ZooKeeper.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnectionState {
    /// Intermediate state: the first session of this framework is connected.
    /// Reported at most once.
    Connected,
    /// Intermediate state: the connection broke; the session may still be
    /// alive. Holders must treat their locks as possibly lost (the standard
    /// [`ErrorPolicy`]).
    Suspended,
    /// Intermediate state: connected again after [`Suspended`] (same session)
    /// or after [`Lost`] (a new session built by the framework; locks taken
    /// in the old session are gone).
    ///
    /// [`Suspended`]: ConnectionState::Suspended
    /// [`Lost`]: ConnectionState::Lost
    Reconnected,
    /// The session is gone: the server expired it, or the connection stayed
    /// down for the whole session timeout. Every ephemeral node of the
    /// session must be considered deleted. Terminal for that session; the
    /// framework then builds a new session and reports [`Reconnected`].
    ///
    /// [`Reconnected`]: ConnectionState::Reconnected
    Lost,
    /// Intermediate state: connected to a read-only server (writes fail).
    ReadOnly,
}

impl ConnectionState {
    /// Whether requests can currently reach a server.
    pub fn is_connected(self) -> bool {
        matches!(
            self,
            ConnectionState::Connected | ConnectionState::Reconnected | ConnectionState::ReadOnly
        )
    }
}

impl fmt::Display for ConnectionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            ConnectionState::Connected => "CONNECTED",
            ConnectionState::Suspended => "SUSPENDED",
            ConnectionState::Reconnected => "RECONNECTED",
            ConnectionState::Lost => "LOST",
            ConnectionState::ReadOnly => "READ_ONLY",
        };
        f.write_str(name)
    }
}

/// What moves the state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateEvent {
    /// The current `zookeeper-client` session reported a new state.
    Session(zk::SessionState),
    /// `Suspended` lasted the negotiated session timeout.
    SuspendedTooLong,
    /// The framework built a new session after the old one was lost.
    NewSession,
}

/// The one place where connection-state rules live.
///
/// `current` is `None` before the first connection. Returns the new state,
/// or `None` when the event changes nothing (repeats are suppressed).
pub fn next_state(current: Option<ConnectionState>, event: StateEvent) -> Option<ConnectionState> {
    use ConnectionState::*;
    let next = match (current, event) {
        (None, StateEvent::Session(zk::SessionState::SyncConnected)) => Connected,
        (None, StateEvent::NewSession) => Connected,
        (None, StateEvent::Session(zk::SessionState::ConnectedReadOnly)) => ReadOnly,
        (None, _) => return None,
        // A new session always follows a lost one.
        (Some(_), StateEvent::NewSession) => Reconnected,
        (Some(Suspended), StateEvent::Session(zk::SessionState::SyncConnected)) => Reconnected,
        (Some(ReadOnly), StateEvent::Session(zk::SessionState::SyncConnected)) => Reconnected,
        (Some(_), StateEvent::Session(zk::SessionState::SyncConnected)) => return None,
        (Some(Lost), StateEvent::Session(_)) => return None,
        (Some(_), StateEvent::Session(zk::SessionState::Disconnected)) => Suspended,
        (Some(_), StateEvent::Session(zk::SessionState::ConnectedReadOnly)) => ReadOnly,
        (Some(_), StateEvent::Session(s)) if s.is_terminated() => Lost,
        (Some(Suspended), StateEvent::SuspendedTooLong) => Lost,
        (Some(_), _) => return None,
    };
    (current != Some(next)).then_some(next)
}

/// Decides which connection states count as "the lock may be lost" for a
/// holder (Curator's `ConnectionStateErrorPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ErrorPolicy {
    /// `Suspended` and `Lost` are errors: a holder stops trusting its lock as
    /// soon as the connection breaks. The safe default.
    #[default]
    Standard,
    /// Only `Lost` is an error: a holder keeps its lock through short
    /// connection blips, accepting that it may have been lost already.
    Session,
}

impl ErrorPolicy {
    /// Whether `state` means a held lock can no longer be trusted.
    pub fn is_error_state(self, state: ConnectionState) -> bool {
        match self {
            ErrorPolicy::Standard => {
                matches!(state, ConnectionState::Suspended | ConnectionState::Lost)
            }
            ErrorPolicy::Session => state == ConnectionState::Lost,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ConnectionState::*;
    use super::*;

    fn session(s: zk::SessionState) -> StateEvent {
        StateEvent::Session(s)
    }

    #[test]
    fn first_connection_then_blip() {
        let mut state = None;
        let steps = [
            (session(zk::SessionState::SyncConnected), Some(Connected)),
            (session(zk::SessionState::SyncConnected), None),
            (session(zk::SessionState::Disconnected), Some(Suspended)),
            (session(zk::SessionState::Disconnected), None),
            (session(zk::SessionState::SyncConnected), Some(Reconnected)),
            (session(zk::SessionState::SyncConnected), None),
        ];
        for (event, expected) in steps {
            let next = next_state(state, event);
            assert_eq!(next, expected, "{state:?} + {event:?}");
            state = next.or(state);
        }
    }

    #[test]
    fn suspended_too_long_is_lost_and_lost_is_sticky_until_a_new_session() {
        let s = next_state(Some(Connected), session(zk::SessionState::Disconnected));
        assert_eq!(s, Some(Suspended));
        assert_eq!(
            next_state(Some(Suspended), StateEvent::SuspendedTooLong),
            Some(Lost)
        );
        // The timer firing while connected changes nothing.
        assert_eq!(
            next_state(Some(Reconnected), StateEvent::SuspendedTooLong),
            None
        );
        // The old client reporting anything after Lost is ignored.
        for s in [
            zk::SessionState::SyncConnected,
            zk::SessionState::Disconnected,
            zk::SessionState::Expired,
        ] {
            assert_eq!(next_state(Some(Lost), session(s)), None);
        }
        assert_eq!(
            next_state(Some(Lost), StateEvent::NewSession),
            Some(Reconnected)
        );
    }

    #[test]
    fn expiry_and_auth_failure_are_lost() {
        for s in [
            zk::SessionState::Expired,
            zk::SessionState::AuthFailed,
            zk::SessionState::Closed,
        ] {
            assert_eq!(next_state(Some(Connected), session(s)), Some(Lost));
            assert_eq!(next_state(Some(Suspended), session(s)), Some(Lost));
        }
        assert_eq!(next_state(None, session(zk::SessionState::Expired)), None);
    }

    #[test]
    fn read_only() {
        assert_eq!(
            next_state(None, session(zk::SessionState::ConnectedReadOnly)),
            Some(ReadOnly)
        );
        assert_eq!(
            next_state(Some(ReadOnly), session(zk::SessionState::SyncConnected)),
            Some(Reconnected)
        );
    }

    #[test]
    fn error_policies() {
        assert!(ErrorPolicy::Standard.is_error_state(Suspended));
        assert!(ErrorPolicy::Standard.is_error_state(Lost));
        assert!(!ErrorPolicy::Standard.is_error_state(Reconnected));
        assert!(!ErrorPolicy::Session.is_error_state(Suspended));
        assert!(ErrorPolicy::Session.is_error_state(Lost));
    }
}
