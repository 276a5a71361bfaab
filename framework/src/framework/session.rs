//! [`Session`]: one ZooKeeper session of a framework.

use std::fmt;

use zookeeper_client as zk;

use crate::error::Error;

/// One ZooKeeper session of a framework: the client bound to it and the
/// framework's generation counter at the time it was built.
#[derive(Clone)]
pub struct Session {
    pub(super) client: zk::Client,
    pub(super) generation: u64,
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
