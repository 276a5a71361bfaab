//! [`Participant`]: one node of an election, as anyone can read it.

use zk_curator_framework::lock_internals::{FencingToken, LockInternals};
use zk_curator_framework::{Error, HolderIdentity, Result};

use crate::layout::read_nodes;

/// A participant of an election (Curator's `Participant`), read from its
/// node: the id is the node's data as text.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Participant {
    /// The participant id: the node data as UTF-8 text (invalid bytes
    /// replaced). For a participant created without an id, this is the
    /// holder identity JSON the framework writes by default (see
    /// [`Framework::default_node_data`](zk_curator_framework::Framework::default_node_data)),
    /// or empty (a Curator participant without an id).
    pub id: String,
    /// Whether this participant is the leader: the first participant of the
    /// queue that still existed when read.
    pub is_leader: bool,
    /// The full path of the participant's node.
    pub node_path: String,
    /// The creating process, when the node data is a
    /// [`HolderIdentity`] (no id was given).
    pub identity: Option<HolderIdentity>,
    /// The fencing token of the participant's term, were it to lead: its
    /// node's creation zxid (what [`Hold::fencing_token`](crate::Hold::fencing_token)
    /// hands out while it leads).
    pub token: FencingToken,
}

impl Participant {
    fn from_node(node_path: String, data: &[u8], czxid: i64, is_leader: bool) -> Self {
        Participant {
            id: String::from_utf8_lossy(data).into_owned(),
            is_leader,
            identity: HolderIdentity::parse(data),
            node_path,
            token: FencingToken::new(czxid),
        }
    }
}

/// Reads every participant of the election run by `internals`, in queue
/// order: one listing, then every node's data in one round trip
/// ([`read_nodes`]). Nodes gone between the listing and the read are left
/// out; the first one read is the leader.
pub(crate) async fn read_participants(internals: &LockInternals) -> Result<Vec<Participant>> {
    let nodes = internals.participant_nodes().await?;
    let read = match read_nodes(internals.framework(), &nodes).await {
        Ok(read) => read,
        // The election path vanished (its last participant left).
        Err(Error::NoNode { .. }) => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let mut participants = Vec::with_capacity(nodes.len());
    for (node, read) in nodes.into_iter().zip(read) {
        if let Some((data, stat)) = read {
            let is_leader = participants.is_empty();
            participants.push(Participant::from_node(node, &data, stat.czxid, is_leader));
        }
    }
    Ok(participants)
}
