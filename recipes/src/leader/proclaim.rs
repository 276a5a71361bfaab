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
//! (A revocation request, `leader::revocation`, puts ` step-down <node name>`
//! at the end of the first line and keeps the rest.)
//!
//! The write is a multi: a check that the term's node still exists, then
//! the set-data of the election path ([`Hold::fence`](crate::Hold::fence)). While that
//! node exists it is first in the queue, so nobody else leads, and once it
//! is gone the write is refused: only the current leader can proclaim.
//! An observer takes the value only if it names the node that leads now;
//! a value left by an earlier leader is ignored, and the leader's node data
//! (its id) stands in as its value until it proclaims one. A Curator
//! participant in the same election still reads every id unchanged.
//!
//! Proclaiming needs permission to write the election path's data (as well
//! as to create nodes under it).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use zk_curator_framework::retry::Backoff;
use zk_curator_framework::Result;

use super::term::LeaderTerm;

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
                            tracing::warn!(%err, node = %term.node().path(), "the value could not be proclaimed");
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
    pub(crate) async fn proclaim(
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
