//! Proclaim: the value a leader advertises (an address, a shard map), set
//! through its term's fence, so that a leader whose term has ended cannot
//! overwrite it (etcd's `Proclaim`).
//!
//! # Where the value lives
//!
//! On Curator's layouts the data of a participant's node *is* its id:
//! Curator's `getLeader()` and `getParticipants()` read it as text, and
//! [`Revoker`](crate::Revoker) overwrites it with
//! `__REVOKE__`. The value therefore does not go there. It goes into the
//! data of the **election path itself** (the parent of the participants'
//! nodes), which neither Curator's recipes nor ours otherwise use (Curator
//! creates it empty and never reads it), prefixed with the name of the node
//! of the term that wrote it:
//!
//! ```text
//! zk-curator proclaim 1\n<leader node name>[ <term count>]\n<value bytes>
//! ```
//!
//! The term count is the node's per-node count of terms (the `pass` of
//! the term's [`FencingToken`](crate::FencingToken)), written when it is
//! not 0: a latch that [keeps its place](crate::LeaderLatch) through a
//! suspension leads again on the same node with a new term, count 1, and
//! proclaims its value again at that term's start, so observers read the
//! new term's token whole (without a value proclaimed, an observer can
//! only give the node's creation zxid).
//!
//! (A step-down request, `leader::step_down`, puts ` step-down <node name>`
//! at the end of the first line and keeps the rest.)
//!
//! The write is a multi: a check that the term's node still exists, then
//! the set-data of the election path ([`LeaderTerm::fence`]). While that
//! node exists it is first in the queue, so nobody else leads, and once it
//! is gone the write is refused: only the current leader can proclaim.
//! An observer takes the value only if it names the node that leads now;
//! a value left by an earlier leader is ignored, and the leader's node data
//! (its id) stands in as its value until it proclaims one. A Curator
//! participant in the same election still reads every id unchanged.
//!
//! Proclaiming needs permission to write the election path's data (as well
//! as to create nodes under it).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zk_curator_framework::path::split;
use zk_curator_framework::retry::Backoff;
use zk_curator_framework::{Error, Result};

use super::election::Election;
use super::latch::LeaderLatch;
use super::selector::LeaderSelector;
use super::term::LeaderTerm;

/// The first line of a proclaimed value in the election path's data.
const MAGIC: &[u8] = b"zk-curator proclaim 1\n";
/// The first line's start, when a step-down request follows on it.
const MAGIC_ASKING: &[u8] = b"zk-curator proclaim 1 step-down ";

/// The data the election path holds once the term numbered `pass` on
/// `node` proclaimed `value`.
pub(crate) fn encode(node: &str, pass: u32, value: &[u8]) -> Vec<u8> {
    let mut data = MAGIC.to_vec();
    push_node(&mut data, node, pass);
    data.extend_from_slice(value);
    data
}

/// Appends the line naming the term: its node, and its count if not 0.
fn push_node(data: &mut Vec<u8>, node: &str, pass: u32) {
    data.extend_from_slice(node.as_bytes());
    if pass > 0 {
        data.extend_from_slice(format!(" {pass}").as_bytes());
    }
    data.push(b'\n');
}

/// The election path's data that asks the leader on node `target` to step
/// down, keeping the value proclaimed in `now` (if any).
pub(crate) fn encode_request(target: &str, now: Option<&Proclaimed>) -> Vec<u8> {
    let (node, pass, value) = now.map_or(("", 0, &[][..]), |p| {
        (p.node.as_str(), p.pass, &p.value[..])
    });
    let mut data = MAGIC_ASKING.to_vec();
    data.extend_from_slice(target.as_bytes());
    data.push(b'\n');
    push_node(&mut data, node, pass);
    data.extend_from_slice(value);
    data
}

/// A value proclaimed in an election path's data: by which node, what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Proclaimed {
    /// The name of the node whose term wrote it.
    pub(crate) node: String,
    /// That term's count on its node (the `pass` of its token).
    pub(crate) pass: u32,
    pub(crate) value: Vec<u8>,
    /// The node whose leader is asked to step down, if any.
    pub(crate) step_down: Option<String>,
}

impl Proclaimed {
    /// Reads an election path's data: `None` unless it is a proclaimed
    /// value (an empty path, say, as Curator and the engine create it).
    pub(crate) fn decode(data: &[u8]) -> Option<Proclaimed> {
        let line = |data: &[u8]| -> Option<(String, usize)> {
            let end = data.iter().position(|&b| b == b'\n')?;
            Some((std::str::from_utf8(&data[..end]).ok()?.to_owned(), end + 1))
        };
        let (step_down, rest) = match data.strip_prefix(MAGIC) {
            Some(rest) => (None, rest),
            None => {
                let asking = data.strip_prefix(MAGIC_ASKING)?;
                let (target, used) = line(asking)?;
                (Some(target), &asking[used..])
            }
        };
        let (named, used) = line(rest)?;
        // Node names have no spaces: a space starts the term's count.
        let (node, pass) = match named.split_once(' ') {
            Some((node, pass)) => (node.to_owned(), pass.parse().ok()?),
            None => (named, 0),
        };
        Some(Proclaimed {
            step_down,
            node,
            pass,
            value: rest[used..].to_vec(),
        })
    }

    /// What the term on the node named `node` proclaimed, if it did: the
    /// term's count and the value.
    pub(crate) fn of(this: Option<&Proclaimed>, node: &str) -> Option<(u32, Vec<u8>)> {
        this.filter(|p| p.node == node)
            .map(|p| (p.pass, p.value.clone()))
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
    async fn proclaim_bytes(&self, value: &[u8]) -> Result<()> {
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

/// The pauses between attempts to proclaim a term's first value.
const RETRY: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));

/// A participant's value, proclaimed at the start of each of its terms.
/// One writer at a time (`writing`), so that the last value set is the last
/// one written, whether it is set while leading or while a term begins.
#[derive(Debug, Default)]
pub(crate) struct Proclaimer {
    value: Mutex<Option<Arc<[u8]>>>,
    writing: tokio::sync::Mutex<()>,
}

impl Proclaimer {
    fn get(&self) -> Option<Arc<[u8]>> {
        self.value
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub(crate) fn set(&self, value: Vec<u8>) {
        *self
            .value
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(value.into());
    }

    /// A term begins (it is published already): proclaims the value, if
    /// the participant has one, in the background, trying again after
    /// transient failures while the term lasts.
    pub(crate) fn on_term(self: &Arc<Self>, term: &LeaderTerm) {
        if self.get().is_none() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = Arc::clone(self);
        let term = term.clone();
        runtime.spawn(async move {
            let mut pauses = RETRY.start();
            loop {
                let written = {
                    let _writing = this.writing.lock().await;
                    let Some(value) = this.get() else { return };
                    term.proclaim_bytes(&value).await
                };
                match written {
                    Ok(()) => return,
                    Err(err) if term.is_valid() && err.is_transient() => {
                        tracing::debug!(%err, "proclaiming the value failed; trying again");
                        tokio::time::sleep(pauses.next_pause()).await;
                    }
                    Err(err) => {
                        if term.is_valid() {
                            tracing::warn!(%err, node = %term.node_path(), "the value could not be proclaimed");
                        }
                        return;
                    }
                }
            }
        });
    }

    /// Sets the value, and proclaims it through `term` if one is given by
    /// `leading` (read under the writers' lock, so that a term that begins
    /// meanwhile proclaims the new value itself).
    async fn proclaim(
        &self,
        value: Vec<u8>,
        leading: impl FnOnce() -> Option<LeaderTerm>,
    ) -> Result<()> {
        let _writing = self.writing.lock().await;
        self.set(value);
        let Some(term) = leading() else {
            return Ok(());
        };
        let Some(value) = self.get() else {
            return Ok(());
        };
        term.proclaim_bytes(&value).await
    }
}

impl Election {
    /// Sets the participant's value and proclaims it if it leads (see
    /// [`LeaderElection::proclaim`](super::LeaderElection::proclaim)).
    pub(crate) async fn proclaim(&self, value: Vec<u8>) -> Result<()> {
        self.proclaimer().proclaim(value, || self.term()).await
    }
}

impl LeaderLatch {
    /// Sets the value this latch proclaims at the start of each of its
    /// terms (see [`LeaderTerm::proclaim`]), as its id is set at its
    /// creation: for use before [`start`](Self::start), as a builder.
    /// [`LeaderElection::proclaim`](super::LeaderElection::proclaim)
    /// changes it later.
    #[must_use]
    pub fn with_value(self, value: impl Into<Vec<u8>>) -> Self {
        use super::sealed::Sealed as _;
        self.election().proclaimer().set(value.into());
        self
    }
}

impl LeaderSelector {
    /// Sets the value this selector proclaims at the start of each of its
    /// terms (as [`LeaderLatch::with_value`]).
    #[must_use]
    pub fn with_value(self, value: impl Into<Vec<u8>>) -> Self {
        use super::sealed::Sealed as _;
        self.election().proclaimer().set(value.into());
        self
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_proclaimed_value_reads_back_with_its_node() {
        let data = encode("_c_x-latch-0000000003", 0, b"10.0.0.7:80\nline two");
        let read = Proclaimed::decode(&data).unwrap();
        assert_eq!(read.node, "_c_x-latch-0000000003");
        assert_eq!(read.value, b"10.0.0.7:80\nline two");
        assert_eq!(
            Proclaimed::of(Some(&read), "_c_x-latch-0000000003"),
            Some((0, b"10.0.0.7:80\nline two".to_vec()))
        );
        assert_eq!(Proclaimed::of(Some(&read), "_c_y-latch-0000000004"), None);
    }

    #[test]
    fn a_later_term_on_the_same_node_writes_its_count() {
        let data = encode("_c_x-latch-0000000003", 2, b"v");
        assert!(data.starts_with(b"zk-curator proclaim 1\n_c_x-latch-0000000003 2\nv"));
        let read = Proclaimed::decode(&data).unwrap();
        assert_eq!(
            (read.node.as_str(), read.pass),
            ("_c_x-latch-0000000003", 2)
        );
        assert_eq!(
            Proclaimed::of(Some(&read), "_c_x-latch-0000000003"),
            Some((2, b"v".to_vec()))
        );
        // A request keeps the count.
        let asked = encode_request("_c_x-latch-0000000003", Some(&read));
        assert_eq!(Proclaimed::decode(&asked).unwrap().pass, 2);
        // A count that is not a number is no proclaimed value.
        assert_eq!(Proclaimed::decode(b"zk-curator proclaim 1\nn x\nv"), None);
    }

    #[test]
    fn a_step_down_request_keeps_the_value() {
        let now = Proclaimed::decode(&encode("_c_x-latch-0000000003", 0, b"v")).unwrap();
        let asked = encode_request("_c_x-latch-0000000003", Some(&now));
        let read = Proclaimed::decode(&asked).unwrap();
        assert_eq!(read.step_down.as_deref(), Some("_c_x-latch-0000000003"));
        assert_eq!(
            (read.node.as_str(), &read.value[..]),
            ("_c_x-latch-0000000003", &b"v"[..])
        );
        // Nothing proclaimed: a request, and no value for anyone.
        let read = Proclaimed::decode(&encode_request("_c_y-lock-0000000001", None)).unwrap();
        assert_eq!(read.step_down.as_deref(), Some("_c_y-lock-0000000001"));
        assert_eq!(Proclaimed::of(Some(&read), "_c_y-lock-0000000001"), None);
        assert_eq!(read.node, "");
    }

    #[test]
    fn other_data_is_no_proclaimed_value() {
        assert_eq!(Proclaimed::decode(b""), None);
        assert_eq!(Proclaimed::decode(b"some data"), None);
        assert_eq!(Proclaimed::decode(MAGIC), None);
    }
}
