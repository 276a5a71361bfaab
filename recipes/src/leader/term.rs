//! [`LeaderTerm`]: one participant's leadership, from its grant to its loss;
//! and [`Leadership`], what a leadership stream reports.

use std::fmt;
use std::future::Future;

use zk_curator_framework::lock_internals::{Fence, FencingToken, Hold, LockLoss};
use zk_curator_framework::path::split;
use zk_curator_framework::{Error, Result};

use super::data::{encode, encode_request, Proclaimed};

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

impl LeaderTerm {
    /// The election path: the parent of the term's node.
    pub fn election_path(&self) -> &str {
        split(self.node_path()).0
    }

    /// Proclaims `value` as what this leader advertises (an address, a
    /// shard map): observers ([`LeaderObserver`](crate::LeaderObserver))
    /// report it as the leader's [`value`](crate::ObservedLeader::value)
    /// from then on. The write goes through the term's [`fence`](Self::fence),
    /// so it is applied only while the term's node exists: a leader whose
    /// term has ended cannot overwrite what its successor proclaims. The
    /// value is kept in the election path's data, never in the node's, so
    /// Curator participants still read the leader's id (the README,
    /// "Proclaiming a value").
    ///
    /// A step-down request waiting for this term in that data is kept
    /// (the write is made on the version read, and made again if the data
    /// changed meanwhile).
    ///
    /// This proclaims for this term only; to keep a value for every term of
    /// a participant, use [`LeaderElection::proclaim`](super::LeaderElection::proclaim)
    /// or set it before the start (`with_value`).
    ///
    /// # Errors
    /// [`Error::LockLost`](crate::Error::LockLost) if the term is known to be over (nothing is
    /// sent) or the server found its node gone (nothing written);
    /// [`Error::RequestTooLarge`](crate::Error::RequestTooLarge) for a value too long for one request
    /// (nothing sent); [`Error::ConnectionLoss`](crate::Error::ConnectionLoss) when the outcome is
    /// unknown; [`Error::NoAuth`](crate::Error::NoAuth) without permission to write the election
    /// path.
    ///
    /// # Cancel safety
    /// The write is sent when first polled; dropping the future afterwards
    /// leaves it unknown whether the value was written.
    ///
    /// The value is taken as [`LeaderElection::proclaim`](super::LeaderElection::proclaim)
    /// takes it: anything that becomes bytes (`&str`, `String`, `&[u8]`,
    /// `Vec<u8>`, a byte string literal).
    pub fn proclaim(
        &self,
        value: impl Into<Vec<u8>>,
    ) -> impl Future<Output = Result<()>> + Send + '_ {
        let value = value.into();
        async move { self.proclaim_bytes(&value).await }
    }

    /// [`proclaim`](Self::proclaim), on bytes at hand.
    pub(crate) async fn proclaim_bytes(&self, value: &[u8]) -> Result<()> {
        let fence = self.fence()?;
        let (path, node) = (self.election_path(), self.node_name());
        let pass = self.fencing_token().pass();
        loop {
            // A step-down request for this term, waiting in the path's data,
            // is kept (the write is made on the version read).
            let (now, version) = match fence.client()?.get_data(path).await {
                Ok((now, stat)) => (now, Some(stat.version)),
                // Gone with the term's node: the fence refuses below.
                Err(zk_curator_framework::zk::Error::NoNode) => (Vec::new(), None),
                Err(err) => return Err(err.into()),
            };
            let asked = Proclaimed::decode(&now).and_then(|p| p.step_down);
            let data = match asked.filter(|target| target == node) {
                Some(target) => {
                    let mine = Proclaimed {
                        node: node.to_owned(),
                        pass,
                        value: value.to_vec(),
                        step_down: None,
                    };
                    encode_request(&target, Some(&mine))
                }
                None => encode(node, pass, value),
            };
            match fence.set_data(path, &data, version).await {
                Ok(_) => break,
                Err(Error::BadVersion) => continue,
                Err(err) => return Err(err),
            }
        }
        tracing::info!(node = %self.node_path(), bytes = value.len(), "value proclaimed");
        Ok(())
    }
}
