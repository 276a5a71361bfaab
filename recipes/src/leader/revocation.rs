//! Step down on request: the revocation protocol of elections (Curator's
//! `Revoker` / `__REVOKE__`, which locks answer with `make_revocable`;
//! Curator's own elections have none, CURATOR-171).
//!
//! A participant made revocable watches, while it leads, the election
//! path's data for a revocation request naming its node
//! ([`LeaderObserver::revoke_leader`](crate::LeaderObserver::revoke_leader),
//! `zk-curator revoke PATH`), and the data of its own node for
//! [`REVOKE_MESSAGE`] (the locks' protocol:
//! [`Revoker::attempt_revoke`](crate::Revoker::attempt_revoke), or Curator's
//! `Revoker` from a JVM). The first channel leaves the participants' nodes
//! alone, which matters beside Curator's `LeaderLatch`: a Curator latch
//! queued right behind the leader acts only on its predecessor's deletion,
//! and a change of that node's data (a `__REVOKE__` written into it) uses
//! up its watch, so it would not take over. On either request the term
//! ends at once with [`LockLoss::Revoked`] (its fence refuses from then
//! on), its node goes, and the next participant leads. The latch queues
//! again at the back; the selector requeues if auto-requeue is on. Only a
//! leader's node is watched: a request written into the node of a
//! participant that does not lead yet stays there (as its node's data, in
//! place of its id) and takes effect when it leads.

use std::sync::atomic::{AtomicBool, Ordering};

use zk_curator_framework::lock_internals::{watch_data, REVOKE_MESSAGE};
use zk_curator_framework::LockLoss;

use super::data::Proclaimed;
use super::term::LeaderTerm;

/// Whether a participant steps down on request.
#[derive(Debug, Default)]
pub(crate) struct Revocation {
    revocable: AtomicBool,
}

impl Revocation {
    /// A term begins (it is published already): watches its node for a
    /// request, if the participant is revocable.
    pub(crate) fn on_term(&self, term: &LeaderTerm) {
        if self.revocable.load(Ordering::Acquire) {
            spawn_watch(term.clone());
        }
    }

    /// Whether the participant steps down on request, from now on: for
    /// `current`, its term now (if it leads), at once.
    pub(crate) fn set_revocable(&self, revocable: bool, current: Option<LeaderTerm>) {
        self.revocable.store(revocable, Ordering::Release);
        if let (true, Some(term)) = (revocable, current) {
            spawn_watch(term);
        }
    }

    /// Ends `term` now, as the participant's own `step_down()`: whether it
    /// was the one to end it.
    pub(crate) fn now(term: &LeaderTerm) -> bool {
        let ended = end(term);
        if ended {
            tracing::info!(node = %term.node().path(), "stepping down");
        }
        ended
    }
}

/// Ends `term` as a step-down: [`LockLoss::Revoked`], unless it already
/// ended. Whether it was the one to end it.
fn end(term: &LeaderTerm) -> bool {
    term.is_valid() && term.mark_lost(LockLoss::Revoked) == LockLoss::Revoked
}

/// Watches, through the engine's one watch of a node's data
/// ([`watch_data`]), the term's node for [`REVOKE_MESSAGE`] and the
/// election path's data for a revocation request naming the term's node
/// ([`LeaderObserver::revoke_leader`](crate::LeaderObserver::revoke_leader)),
/// until a request comes (the term then ends) or the term ends.
fn spawn_watch(term: LeaderTerm) {
    let Some(session) = term.session() else {
        // Lost already: nothing to step down from.
        return;
    };
    let watches = [
        (term.node().path().to_owned(), Channel::Node),
        (term.election_path().to_owned(), Channel::ElectionPath),
    ];
    for (path, channel) in watches {
        let asked = term.clone();
        let stop = {
            let lost = term.lost();
            async move {
                lost.await;
            }
        };
        watch_data(term.framework(), session.clone(), path, stop, move |data| {
            if !channel.asks(data, asked.node().name()) {
                return false;
            }
            if end(&asked) {
                tracing::info!(node = %asked.node().path(), token = %asked.fencing_token(), "asked to step down; leadership handed on");
            }
            true
        });
    }
}

/// Where a revocation request is written.
#[derive(Clone, Copy, Debug)]
enum Channel {
    /// The term's own node, as the locks' revocation writes it.
    Node,
    /// The election path's data, naming the node (leaves the participants'
    /// nodes, and a Curator latch's watch on them, alone).
    ElectionPath,
}

impl Channel {
    /// Whether `data`, read from this channel, asks the term on `node` to
    /// step down.
    fn asks(self, data: &[u8], node: &str) -> bool {
        match self {
            Channel::Node => data == REVOKE_MESSAGE,
            Channel::ElectionPath => {
                Proclaimed::decode(data).and_then(|p| p.revoke).as_deref() == Some(node)
            }
        }
    }
}
