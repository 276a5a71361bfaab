//! Shared participant nodes: the blocking acquires of a *shared* lock (a
//! read lock; see [`LockInternalsDriver::shares_node`]) within one
//! [`Framework`] wait together behind one participant node, so that many
//! waiting readers of a process cost the server one node and one watch.
//!
//! The acquires that share a node form a *generation*. A generation is open
//! (new acquires join it) only while its node waits; the moment it is
//! granted it closes, and the next acquire starts a new generation with a
//! node of its own, which queues behind any writer that arrived meanwhile. A
//! queued writer therefore waits only for the readers that were already
//! waiting when their node was granted: a stream of readers cannot starve
//! it.
//!
//! The node is created and waited for by a task of the generation's own
//! (the generation's members may come and go; none of them owns the
//! acquire). When the last member leaves, whether it waited or held, the
//! node goes: a waiting generation's acquire is aborted (its cancel safety
//! deletes the node), a granted generation's last release deletes it. Every
//! member gets a [`Hold`] of its own over the shared node (its own loss
//! latch and fence, the node's fencing token).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use dashmap::DashMap;
use tokio::sync::watch;
use tracing::Instrument;

use super::hold::loss_of;
use super::{until_held, Acquire, AcquiredNode, Hold, LockInternals};
use crate::{Error, Framework, Result};

/// A lock path, lock name and the participant node's data: acquires that
/// agree on all three may share a node.
pub(crate) type ShareKey = (Arc<str>, Arc<str>, Arc<[u8]>);

/// The open (waiting) generation of every shared lock of one framework.
#[derive(Default)]
pub(crate) struct SharedNodes {
    open: DashMap<ShareKey, Arc<Generation>>,
}

impl fmt::Debug for SharedNodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedNodes")
            .field("waiting_nodes", &self.open.len())
            .finish()
    }
}

impl SharedNodes {
    /// Waits for the lock as a member of the open generation of `key`
    /// (starting one if there is none) and returns this member's hold.
    ///
    /// # Errors
    /// The error that ended the generation's acquire (the framework closed,
    /// no session within the connection timeout, an error the retry policy
    /// gave up on).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped member leaves its generation; the last one to
    /// leave a waiting generation aborts its acquire, which deletes the node.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        internals: &LockInternals,
        key: ShareKey,
    ) -> Result<Hold> {
        loop {
            let member = self.join(internals, &key);
            if let Some(hold) = member.wait().await? {
                return Ok(hold);
            }
            // The generation's hold was already lost when we came to take
            // our share (its session went): wait with the next generation.
        }
    }

    /// How many acquires of the lock at `path` wait in a generation without
    /// being the one its node was created for.
    pub(crate) fn waiting(&self, path: &str) -> usize {
        self.open
            .iter()
            .filter(|entry| &*entry.key().0 == path)
            .map(|entry| entry.value().state().members.saturating_sub(1))
            .sum()
    }

    fn join(self: &Arc<Self>, internals: &LockInternals, key: &ShareKey) -> Member {
        let mut started = None;
        let generation = {
            let entry = self.open.entry(key.clone()).or_insert_with(|| {
                let generation = Arc::new(Generation {
                    key: key.clone(),
                    nodes: Arc::downgrade(self),
                    framework: internals.framework().clone(),
                    state: Mutex::new(State {
                        members: 0,
                        phase: Phase::Waiting,
                        task: None,
                    }),
                    settled: watch::Sender::new(false),
                });
                started = Some(generation.clone());
                generation
            });
            // Counted while the map's shard is locked: a generation that
            // has left the map (granted, or abandoned) gains no member.
            entry.state().members += 1;
            entry.clone()
        };
        if let Some(generation) = started {
            tracing::debug!("no waiting node of this process to share; creating one");
            generation.start(internals.clone());
        } else {
            tracing::debug!("sharing the waiting node of this process");
        }
        Member {
            generation: Some(generation),
        }
    }
}

enum Phase {
    /// The node waits (or is being created).
    Waiting,
    /// Granted: the node, the loss epoch of the grant, and the generation's
    /// own hold until a member takes it.
    Granted {
        node: AcquiredNode,
        epoch: u64,
        unclaimed: Option<Hold>,
    },
    /// The acquire failed: every member gets this error.
    Failed(Error),
}

struct State {
    /// Members that have not left: waiting, or holding their share.
    members: usize,
    phase: Phase,
    /// Aborts the acquire while the node waits.
    task: Option<tokio::task::AbortHandle>,
}

/// The acquires that share one participant node.
pub(crate) struct Generation {
    key: ShareKey,
    nodes: Weak<SharedNodes>,
    framework: Framework,
    state: Mutex<State>,
    /// Turns `true` once the phase is no longer `Waiting`.
    settled: watch::Sender<bool>,
}

impl Generation {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates the node and waits for the lock on a task of its own.
    fn start(self: &Arc<Self>, internals: LockInternals) {
        let generation = self.clone();
        let data = self.key.2.clone();
        let acquire = async move {
            let request = Acquire::new().data(&data);
            let outcome = until_held(|| internals.acquire_restarting(&request)).await;
            generation.settle(outcome);
        };
        let task = tokio::spawn(acquire.in_current_span());
        self.state().task = Some(task.abort_handle());
    }

    fn settle(self: &Arc<Self>, outcome: Result<Hold>) {
        // Closed first, so that no one joins a generation that holds.
        if let Some(nodes) = self.nodes.upgrade() {
            nodes
                .open
                .remove_if(&self.key, |_, open| Arc::ptr_eq(open, self));
        }
        let orphan = {
            let mut state = self.state();
            state.task = None;
            match outcome {
                // Everyone left while the grant was on its way.
                Ok(hold) if state.members == 0 => {
                    state.phase = Phase::Failed(Error::Closed);
                    Some(hold)
                }
                Ok(hold) => {
                    tracing::debug!(node = %hold.path(), members = state.members, "shared node granted");
                    state.phase = Phase::Granted {
                        node: hold.node().clone(),
                        epoch: hold.epoch(),
                        unclaimed: Some(hold),
                    };
                    None
                }
                Err(err) => {
                    state.phase = Phase::Failed(err);
                    None
                }
            }
        };
        if let Some(hold) = orphan {
            hold.release_in_background();
        }
        self.settled.send_replace(true);
    }

    /// One member fewer. Returns `true` when the caller must delete the node:
    /// it was the last member of a granted generation.
    fn leave(self: &Arc<Self>) -> bool {
        let (last, waiting) = {
            let mut state = self.state();
            state.members = state.members.saturating_sub(1);
            let waiting = matches!(state.phase, Phase::Waiting);
            if state.members == 0 {
                if let Phase::Granted { unclaimed, .. } = &mut state.phase {
                    // Ours to delete now; the hold must not outlive it.
                    drop(unclaimed.take());
                }
            }
            (state.members == 0, waiting)
        };
        if !last {
            return false;
        }
        if waiting {
            // Nobody waits for the node any more: take the generation out of
            // the map (unless someone joined meanwhile) and abort its
            // acquire, which deletes the node. If the grant is being settled
            // right now, `settle` finds no member and releases it instead.
            let abandoned = self.nodes.upgrade().is_some_and(|nodes| {
                nodes
                    .open
                    .remove_if(&self.key, |_, open| {
                        Arc::ptr_eq(open, self) && open.state().members == 0
                    })
                    .is_some()
            });
            if abandoned {
                if let Some(task) = self.state().task.take() {
                    tracing::debug!("the last waiter of a shared node left; withdrawing it");
                    task.abort();
                }
            }
            return false;
        }
        true
    }
}

/// A member of a generation until it takes its hold; leaves it when
/// dropped before that.
struct Member {
    generation: Option<Arc<Generation>>,
}

impl Member {
    /// Waits for the generation's outcome: this member's hold, `None` if
    /// the grant was already lost, or the generation's error.
    async fn wait(mut self) -> Result<Option<Hold>> {
        let Some(generation) = self.generation.clone() else {
            return Ok(None);
        };
        let mut settled = generation.settled.subscribe();
        // The sender lives in the generation, which we hold: no error.
        let _ = settled.wait_for(|settled| *settled).await;
        let hold = {
            let mut state = generation.state();
            match &mut state.phase {
                Phase::Waiting => None,
                Phase::Failed(err) => return Err(err.clone()),
                Phase::Granted {
                    node,
                    epoch,
                    unclaimed,
                } => match unclaimed.take() {
                    Some(hold) => Some(hold),
                    // Lost already (its session went): no hold is made;
                    // dropping this member leaves the generation.
                    None if loss_of(&generation.framework, node, *epoch).is_some() => None,
                    None => Some(Hold::new(
                        generation.framework.clone(),
                        node.clone(),
                        *epoch,
                    )),
                },
            }
        };
        let Some(hold) = hold else { return Ok(None) };
        // From here the hold carries the membership.
        self.generation = None;
        hold.join_share(Membership {
            generation,
            left: AtomicBool::new(false),
        });
        if hold.check().is_err() {
            hold.release_in_background();
            return Ok(None);
        }
        Ok(Some(hold))
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(generation) = self.generation.take() {
            if generation.leave() {
                if let Phase::Granted { node, .. } = &generation.state().phase {
                    generation.framework.delete_in_background(node.path());
                }
            }
        }
    }
}

/// A hold's share of a generation's node.
pub(crate) struct Membership {
    generation: Arc<Generation>,
    left: AtomicBool,
}

impl fmt::Debug for Membership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Membership")
            .field("members", &self.generation.state().members)
            .field("left", &self.left.load(Ordering::Relaxed))
            .finish()
    }
}

impl Membership {
    /// Leaves the generation (once; later calls do nothing). Returns `true`
    /// when the caller must delete the node: it was the last member.
    pub(crate) fn leave(&self) -> bool {
        !self.left.swap(true, Ordering::AcqRel) && self.generation.leave()
    }
}
