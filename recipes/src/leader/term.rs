//! [`LeaderTerm`]: one participant's leadership, from its grant to its loss;
//! and [`Leadership`], what a leadership stream reports.

use std::fmt;
use std::future::Future;

use zk_curator_framework::lock_internals::Hold;
use zk_curator_framework::path::split;
use zk_curator_framework::{Error, Result};

use super::data::{encode, encode_request, Proclaimed};

/// One term of leadership: the election node that was first in the queue,
/// held as a lock hold is.
///
/// A term *is* a [`Hold`] (and derefs to one), so it follows the rules of
/// the guide's "Safety" chapter (`docs/guide/safety.md`) under the framework's
/// [`ErrorPolicy`](zk_curator_framework::ErrorPolicy): once the connection
/// is in an error state, the session that created the node is gone, the
/// node was deleted, or the framework was closed, the term is over for good
/// ([`is_valid`](Hold::is_valid) stays false and [`lost`](Hold::lost)
/// completes at once). A term given up (the latch closed, the selector's
/// function returned or was cancelled) ends the same way, with
/// [`LockLoss::NotHeld`](crate::LockLoss::NotHeld), before its node is deleted: no clone of it is
/// still valid once someone else can lead. A participant that stays a
/// candidate is given a *new* term (a new, greater fencing token) when it
/// leads again: on a new node, or, for a latch whose term was lost to a
/// suspension its session survived, on the same node once it is back
/// (the token then counts one more hold of that node; see
/// [`LeaderLatch`](super::LeaderLatch), "Terms").
///
/// Work done as leader belongs beside [`lost`](Hold::lost) in a `select!`;
/// ZooKeeper writes go through [`fence`](Hold::fence), so that the server
/// itself refuses them once the term's node is gone; outside stores get
/// [`fencing_token`](Hold::fencing_token), which grows strictly from one
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
            .field("node", &self.hold.node().path())
            .field("token", &self.hold.fencing_token())
            .field("valid", &self.hold.is_valid())
            .finish()
    }
}

impl LeaderTerm {
    pub(crate) fn new(hold: Hold) -> Self {
        LeaderTerm { hold }
    }
}

/// Two handles are equal when they are clones of one term.
impl PartialEq for LeaderTerm {
    fn eq(&self, other: &Self) -> bool {
        self.hold.same_hold(&other.hold)
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
        split(self.node().path()).0
    }

    /// Proclaims `value` as what this leader advertises (an address, a
    /// shard map): observers ([`LeaderObserver`](crate::LeaderObserver))
    /// report it as the leader's [`value`](crate::ObservedLeader::value)
    /// from then on. The write goes through the term's [`fence`](Hold::fence),
    /// so it is applied only while the term's node exists: a leader whose
    /// term has ended cannot overwrite what its successor proclaims. The
    /// value is kept in the election path's data, never in the node's, so
    /// Curator participants still read the leader's id (the guide,
    /// `docs/guide/leader-election.md#proclaiming-a-value`).
    ///
    /// A revocation request waiting for this term in that data is kept
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
        let (path, node) = (self.election_path(), self.node().name());
        let pass = self.fencing_token().pass();
        loop {
            // A revocation request for this term, waiting in the path's data,
            // is kept (the write is made on the version read).
            let (now, version) = match fence.client()?.get_data(path).await {
                Ok((now, stat)) => (now, Some(stat.version)),
                // Gone with the term's node: the fence refuses below.
                Err(zk_curator_framework::zk::Error::NoNode) => (Vec::new(), None),
                Err(err) => return Err(err.into()),
            };
            let asked = Proclaimed::decode(&now).and_then(|p| p.revoke);
            let data = match asked.filter(|target| target == node) {
                Some(target) => {
                    let mine = Proclaimed {
                        node: node.to_owned(),
                        pass,
                        value: value.to_vec(),
                        revoke: None,
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
        tracing::info!(node = %self.node().path(), bytes = value.len(), "value proclaimed");
        Ok(())
    }
}
