//! [`LeaderTerm`]: one participant's leadership, from its grant to its loss;
//! and [`Leadership`], what a leadership stream reports.

use std::fmt;
use std::future::Future;

use zk_curator_framework::lock_internals::{Fence, FencingToken, Hold, LockLoss};
use zk_curator_framework::Result;

/// One term of leadership: the election node that was first in the queue,
/// held as a lock hold is.
///
/// A term *is* a [`Hold`] (and derefs to one), so it follows the rules of
/// the README's "Safety" section under the framework's
/// [`ErrorPolicy`](zk_curator_framework::ErrorPolicy): once the connection
/// is in an error state, the session that created the node is gone, the
/// node was deleted, or the framework was closed, the term is over for good
/// ([`is_valid`](Self::is_valid) stays false and [`lost`](Self::lost)
/// completes at once). A term given up (the latch closed, the selector's
/// function returned or was cancelled) ends the same way, with
/// [`LockLoss::NotHeld`], before its node is deleted: no clone of it is
/// still valid once someone else can lead. A participant that stays a
/// candidate is given a *new* term (a new, greater fencing token) when it
/// leads again: on a new node, or, for a latch whose term was lost to a
/// suspension its session survived, on the same node once it is back
/// (the token then counts one more hold of that node; see
/// [`LeaderLatch`](super::LeaderLatch), "Terms").
///
/// Work done as leader belongs beside [`lost`](Self::lost) in a `select!`;
/// ZooKeeper writes go through [`fence`](Self::fence), so that the server
/// itself refuses them once the term's node is gone; outside stores get
/// [`fencing_token`](Self::fencing_token), which grows strictly from one
/// term to the next on one election path.
///
/// Cheap to clone: clones share the loss latch.
#[derive(Clone)]
pub struct LeaderTerm {
    hold: Hold,
}

impl fmt::Debug for LeaderTerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderTerm")
            .field("node", &self.hold.path())
            .field("token", &self.hold.fencing_token())
            .field("valid", &self.hold.is_valid())
            .finish()
    }
}

impl LeaderTerm {
    pub(crate) fn new(hold: Hold) -> Self {
        LeaderTerm { hold }
    }

    /// The hold behind the term.
    pub fn hold(&self) -> &Hold {
        &self.hold
    }

    /// Completes when the term is over, with the reason (see [`Hold::lost`]).
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    pub fn lost(&self) -> impl Future<Output = LockLoss> + Send + 'static {
        self.hold.lost()
    }

    /// Whether the term can still be trusted, without I/O (see
    /// [`Hold::is_valid`]).
    pub fn is_valid(&self) -> bool {
        self.hold.is_valid()
    }

    /// Why the term ended, if it is known to have ended.
    pub fn loss(&self) -> Option<LockLoss> {
        self.hold.loss()
    }

    /// A [`Fence`] over the term's node: writes sent through it are applied
    /// by ZooKeeper only while the node exists.
    ///
    /// # Errors
    /// [`Error::LockLost`](zk_curator_framework::Error::LockLost) if the term
    /// is already known to be over.
    pub fn fence(&self) -> Result<Fence> {
        self.hold.fence()
    }

    /// The term's fencing token: the creation zxid of its election node,
    /// with the count of the terms on that node before this one (a latch
    /// that kept its node through a suspension). Successive terms on one
    /// election path get strictly increasing tokens.
    pub fn fencing_token(&self) -> FencingToken {
        self.hold.fencing_token()
    }

    /// The full path of the term's election node (relative to the
    /// framework's namespace).
    pub fn node_path(&self) -> &str {
        self.hold.path()
    }

    /// The name of the term's election node (`_c_<uuid>-latch-<seq>` for a
    /// latch, `_c_<uuid>-lock-<seq>` for a selector).
    pub fn node_name(&self) -> &str {
        self.hold.node().name()
    }

    /// Whether two handles are clones of one term.
    pub fn same_term(&self, other: &LeaderTerm) -> bool {
        self.hold.same_hold(&other.hold)
    }
}

impl PartialEq for LeaderTerm {
    fn eq(&self, other: &Self) -> bool {
        self.same_term(other)
    }
}

impl Eq for LeaderTerm {}

impl std::ops::Deref for LeaderTerm {
    type Target = Hold;

    fn deref(&self) -> &Hold {
        &self.hold
    }
}

/// Where a participant stands in its election, as reported by
/// [`LeaderLatch::leadership_changes`](super::LeaderLatch::leadership_changes)
/// and [`LeaderSelector::leadership_changes`](super::LeaderSelector::leadership_changes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// Leader, for this term.
    Leader(LeaderTerm),
    /// Not leader (waiting in the queue, re-entering it, or not started).
    NotLeader,
}

impl Leadership {
    /// The term, when leader.
    pub fn term(&self) -> Option<&LeaderTerm> {
        match self {
            Leadership::Leader(term) => Some(term),
            Leadership::NotLeader => None,
        }
    }

    /// Whether this says "leader".
    pub fn is_leader(&self) -> bool {
        matches!(self, Leadership::Leader(_))
    }
}
