//! Step down on request: the revocation protocol of elections (Curator's
//! `Revoker` / `__REVOKE__`, which locks answer with `make_revocable`;
//! Curator's own elections have none, CURATOR-171).
//!
//! A participant made revocable watches, while it leads, the election
//! path's data for a step-down request naming its node
//! ([`LeaderObserver::ask_leader_to_step_down`](crate::LeaderObserver::ask_leader_to_step_down),
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
use std::time::Duration;

use zk_curator_framework::lock_internals::REVOKE_MESSAGE;
use zk_curator_framework::retry::Backoff;
use zk_curator_framework::{zk, LockLoss};

use super::data::Proclaimed;
use super::term::LeaderTerm;

/// The pause before the watch reads the node again after a failed read.
const REREAD: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(500));

/// Whether a participant steps down on request.
#[derive(Debug, Default)]
pub(crate) struct StepDown {
    revocable: AtomicBool,
}

impl StepDown {
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
            tracing::info!(node = %term.node_path(), "stepping down");
        }
        ended
    }
}

/// Ends `term` as a step-down: [`LockLoss::Revoked`], unless it already
/// ended. Whether it was the one to end it.
fn end(term: &LeaderTerm) -> bool {
    term.is_valid() && term.hold().mark_lost(LockLoss::Revoked) == LockLoss::Revoked
}

fn spawn_watch(term: LeaderTerm) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(node = %term.node_path(), "no tokio runtime: no step-down watch");
        return;
    };
    let asked = term.clone();
    runtime.spawn(async move {
        let lost = term.lost();
        tokio::select! {
            () = watch(&term) => {}
            _ = lost => {}
        }
    });
    runtime.spawn(async move {
        let lost = asked.lost();
        tokio::select! {
            () = watch_requests(&asked) => {}
            _ = lost => {}
        }
    });
}

/// Watches the election path's data for a step-down request naming the
/// term's node ([`LeaderObserver::ask_leader_to_step_down`](crate::LeaderObserver::ask_leader_to_step_down)),
/// until one comes (the term then ends) or the term can no longer send.
async fn watch_requests(term: &LeaderTerm) {
    let mut pauses = REREAD.start();
    loop {
        let Ok(client) = term.fence().and_then(|fence| fence.client()) else {
            return;
        };
        let read = client.get_and_watch_data(term.election_path()).await;
        drop(client);
        match read {
            Ok((data, _, watcher)) => {
                pauses.reset();
                let request = Proclaimed::decode(&data).and_then(|p| p.step_down);
                if request.as_deref() == Some(term.node_name()) {
                    if end(term) {
                        tracing::info!(node = %term.node_path(), token = %term.fencing_token(), "asked to step down; leadership handed on");
                    }
                    return;
                }
                watcher.changed().await;
            }
            // The election path is gone, and the term's node with it.
            Err(zk::Error::NoNode) => return,
            Err(err) => {
                tracing::debug!(%err, path = %term.election_path(), "the step-down watch reads again");
                tokio::time::sleep(pauses.next_pause()).await;
            }
        }
    }
}

/// Watches the term's node until a request comes (the term then ends), the
/// node goes, or the term can no longer send (lost: the caller stops it).
async fn watch(term: &LeaderTerm) {
    let mut pauses = REREAD.start();
    loop {
        let Ok(client) = term.fence().and_then(|fence| fence.client()) else {
            return;
        };
        let read = client.get_and_watch_data(term.node_path()).await;
        // The session is not kept while waiting.
        drop(client);
        match read {
            Ok((data, _, watcher)) => {
                pauses.reset();
                if data == REVOKE_MESSAGE {
                    if end(term) {
                        tracing::info!(node = %term.node_path(), token = %term.fencing_token(), "asked to step down; leadership handed on");
                    }
                    return;
                }
                let event = watcher.changed().await;
                if event.event_type == zk::EventType::NodeDeleted {
                    return;
                }
            }
            Err(zk::Error::NoNode) => return,
            Err(err) => {
                tracing::debug!(%err, node = %term.node_path(), "the step-down watch reads again");
                tokio::time::sleep(pauses.next_pause()).await;
            }
        }
    }
}
