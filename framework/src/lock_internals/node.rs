//! [`AcquiredNode`]: a participant node that holds the lock (what a grant
//! hands to a hold).

use crate::path;

/// A participant node that holds the lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquiredNode {
    pub(super) path: String,
    pub(super) czxid: i64,
    /// Whether the acquire's multi made the lock path with this node: its
    /// release may remove the path too (see [`lock_path`](super::lock_path)).
    pub(super) made_path: bool,
    pub(super) session_id: i64,
    pub(super) generation: u64,
    pub(super) ephemeral: bool,
}

impl AcquiredNode {
    /// The node's full path (relative to the framework's namespace).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The node's name (last path component).
    pub fn name(&self) -> &str {
        path::split(&self.path).1
    }

    /// The fencing token: the zxid of the transaction that created the node.
    /// ZooKeeper's zxids grow strictly, and a holder's node is created after
    /// the previous holder's, so successive holders of one lock path get
    /// strictly increasing tokens. Hand it to the storage you protect, and
    /// let it refuse writes carrying a smaller token than it has seen.
    pub fn fencing_token(&self) -> i64 {
        self.czxid
    }

    /// The id of the session that created the node.
    pub fn session_id(&self) -> i64 {
        self.session_id
    }

    /// The framework session generation the node was created in.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether the node dies with its session.
    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral
    }
}
