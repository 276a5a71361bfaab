//! Shared participant nodes: the blocking acquires of a *shared* lock (a
//! read lock; see
//! [`LockInternalsDriver::shares_node`](super::LockInternalsDriver::shares_node))
//! within one [`Framework`](crate::Framework) wait together behind one
//! participant node, so that many waiting readers of a process cost the
//! server one node and one watch.
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
//!
//! The bookkeeping of generations and members is written over a
//! [`Backend`], which does the I/O: the lock engine ([`LockInternals`]) in
//! production, a stand-in in the unit tests that plays the node's outcomes,
//! so that who shares which node can be tested without a server.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use dashmap::DashMap;
use tokio::sync::watch;
use tracing::Instrument;

use super::acquire;
use super::hold::Hold;
use super::internals::LockInternals;
use super::node::AcquiredNode;
use super::request::{until_held, Acquire};
use super::trust::loss_of;
use crate::{Error, Result};

/// A lock path, lock name and the participant node's data: acquires that
/// agree on all three may share a node.
pub(crate) type ShareKey = (Arc<str>, Arc<str>, Arc<[u8]>);

/// What the generations need done outside themselves: the node's acquire,
/// holds over the granted node, whether the grant is lost, and clean-up
/// without waiting. The lock engine ([`LockInternals`]) in production.
pub(crate) trait Backend: Clone + Send + Sync + Sized + 'static {
    /// A member's hold on the granted node.
    type Hold;
    /// What a generation keeps of its grant to make further holds from.
    type Grant: fmt::Display;
    /// A running acquire, to abort it.
    type Task;

    /// Starts the acquire of the node of `generation`, with the data of its
    /// key. Its outcome goes to [`Generation::settle`] unless the task is
    /// aborted first; an aborted acquire deletes its node itself.
    fn start(generation: &Arc<Generation<Self>>) -> Self::Task;
    /// Aborts a waiting node's acquire, which withdraws the node.
    fn abort(&self, task: Self::Task);
    /// The grant behind the hold the node's acquire returned.
    fn grant_of(hold: &Self::Hold) -> Self::Grant;
    /// Whether the grant can no longer be trusted (its session went, say).
    fn is_lost(&self, grant: &Self::Grant) -> bool;
    /// One more hold over the granted node, for another member.
    fn hold(&self, grant: &Self::Grant) -> Self::Hold;
    /// Makes `hold` carry a member's share of the node. From then on,
    /// giving the hold up (released, or dropped) leaves the share, and
    /// deletes the node if it was the last.
    fn join_share(hold: &Self::Hold, share: Membership<Self>);
    /// Whether `hold` can still be trusted.
    fn is_trusted(hold: &Self::Hold) -> bool;
    /// Deletes the granted node without waiting.
    fn delete_in_background(&self, grant: &Self::Grant);
}

/// A granted shared node: the node and the framework's loss epoch at the
/// grant.
pub(crate) struct Granted {
    node: AcquiredNode,
    epoch: u64,
}

impl fmt::Display for Granted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.node.path())
    }
}

/// The generation's node is acquired by the lock engine of its first
/// member, on a task of its own.
impl Backend for LockInternals {
    type Hold = Hold;
    type Grant = Granted;
    type Task = tokio::task::AbortHandle;

    fn start(generation: &Arc<Generation<Self>>) -> Self::Task {
        let generation = generation.clone();
        let acquire = async move {
            let internals = &generation.backend;
            let request = Acquire::new().data(&generation.key.2);
            let outcome = until_held(|| acquire::acquire_restarting(internals, &request)).await;
            generation.settle(outcome);
        };
        tokio::spawn(acquire.in_current_span()).abort_handle()
    }

    fn abort(&self, task: Self::Task) {
        task.abort();
    }

    fn grant_of(hold: &Hold) -> Granted {
        Granted {
            node: hold.node().clone(),
            epoch: hold.epoch(),
        }
    }

    fn is_lost(&self, grant: &Granted) -> bool {
        loss_of(self.framework(), &grant.node, grant.epoch).is_some()
    }

    fn hold(&self, grant: &Granted) -> Hold {
        Hold::new(self.framework().clone(), grant.node.clone(), grant.epoch)
    }

    fn join_share(hold: &Hold, share: Membership) {
        hold.join_share(Box::new(move || share.leave()));
    }

    fn is_trusted(hold: &Hold) -> bool {
        hold.check().is_ok()
    }

    fn delete_in_background(&self, grant: &Granted) {
        self.framework().delete_in_background(grant.node.path());
    }
}

/// The open (waiting) generation of every shared lock of one framework.
pub(crate) struct SharedNodes<B: Backend = LockInternals> {
    open: DashMap<ShareKey, Arc<Generation<B>>>,
}

impl<B: Backend> Default for SharedNodes<B> {
    fn default() -> Self {
        SharedNodes {
            open: DashMap::new(),
        }
    }
}

impl<B: Backend> fmt::Debug for SharedNodes<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedNodes")
            .field("waiting_nodes", &self.open.len())
            .finish()
    }
}

impl<B: Backend> SharedNodes<B> {
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
    pub(crate) async fn acquire(self: &Arc<Self>, backend: &B, key: ShareKey) -> Result<B::Hold> {
        loop {
            let member = self.join(backend, &key);
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

    fn join(self: &Arc<Self>, backend: &B, key: &ShareKey) -> Member<B> {
        let mut started = None;
        let generation = {
            let entry = self.open.entry(key.clone()).or_insert_with(|| {
                let generation = Arc::new(Generation {
                    key: key.clone(),
                    nodes: Arc::downgrade(self),
                    backend: backend.clone(),
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
            let task = B::start(&generation);
            generation.state().task = Some(task);
        } else {
            tracing::debug!("sharing the waiting node of this process");
        }
        Member {
            generation: Some(generation),
        }
    }
}

enum Phase<B: Backend> {
    /// The node waits (or is being created).
    Waiting,
    /// Granted: what is kept of the grant, and the generation's own hold
    /// until a member takes it.
    Granted {
        grant: B::Grant,
        unclaimed: Option<B::Hold>,
    },
    /// The acquire failed: every member gets this error.
    Failed(Error),
}

struct State<B: Backend> {
    /// Members that have not left: waiting, or holding their share.
    members: usize,
    phase: Phase<B>,
    /// Aborts the acquire while the node waits.
    task: Option<B::Task>,
}

/// The acquires that share one participant node.
pub(crate) struct Generation<B: Backend = LockInternals> {
    key: ShareKey,
    nodes: Weak<SharedNodes<B>>,
    /// The engine of the member that started the generation.
    backend: B,
    state: Mutex<State<B>>,
    /// Turns `true` once the phase is no longer `Waiting`.
    settled: watch::Sender<bool>,
}

impl<B: Backend> Generation<B> {
    fn state(&self) -> MutexGuard<'_, State<B>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the outcome of the node's acquire.
    fn settle(self: &Arc<Self>, outcome: Result<B::Hold>) {
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
                    let grant = B::grant_of(&hold);
                    tracing::debug!(node = %grant, members = state.members, "shared node granted");
                    state.phase = Phase::Granted {
                        grant,
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
            // Nobody shares it: its node is deleted here, the hold dropped.
            let grant = B::grant_of(&hold);
            drop(hold);
            self.backend.delete_in_background(&grant);
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
                    self.backend.abort(task);
                }
            }
            return false;
        }
        true
    }
}

/// A member of a generation until it takes its hold; leaves it when
/// dropped before that.
struct Member<B: Backend> {
    generation: Option<Arc<Generation<B>>>,
}

impl<B: Backend> Member<B> {
    /// Waits for the generation's outcome: this member's hold, `None` if
    /// the grant was already lost, or the generation's error.
    async fn wait(mut self) -> Result<Option<B::Hold>> {
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
                Phase::Granted { grant, unclaimed } => match unclaimed.take() {
                    Some(hold) => Some(hold),
                    // Lost already (its session went): no hold is made;
                    // dropping this member leaves the generation.
                    None if generation.backend.is_lost(grant) => None,
                    None => Some(generation.backend.hold(grant)),
                },
            }
        };
        let Some(hold) = hold else { return Ok(None) };
        // From here the hold carries the membership.
        self.generation = None;
        B::join_share(
            &hold,
            Membership {
                generation,
                left: AtomicBool::new(false),
            },
        );
        if !B::is_trusted(&hold) {
            // Dropping it leaves the share, and deletes the node if no one
            // else is left.
            drop(hold);
            return Ok(None);
        }
        Ok(Some(hold))
    }
}

impl<B: Backend> Drop for Member<B> {
    fn drop(&mut self) {
        if let Some(generation) = self.generation.take() {
            if generation.leave() {
                if let Phase::Granted { grant, .. } = &generation.state().phase {
                    generation.backend.delete_in_background(grant);
                }
            }
        }
    }
}

/// A hold's share of a generation's node.
pub(crate) struct Membership<B: Backend = LockInternals> {
    generation: Arc<Generation<B>>,
    left: AtomicBool,
}

impl<B: Backend> fmt::Debug for Membership<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Membership")
            .field("members", &self.generation.state().members)
            .field("left", &self.left.load(Ordering::Relaxed))
            .finish()
    }
}

impl<B: Backend> Membership<B> {
    /// Leaves the generation (once; later calls do nothing). Returns `true`
    /// when the caller must delete the node: it was the last member.
    pub(crate) fn leave(&self) -> bool {
        !self.left.swap(true, Ordering::AcqRel) && self.generation.leave()
    }
}

#[cfg(test)]
mod tests;
