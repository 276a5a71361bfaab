//! Cohort hand-off: a released node passes to a task of the same framework
//! that waits for the same lock, with no request to ZooKeeper, for a
//! bounded run (see [`CohortPolicy`]).
//!
//! Lock cohorting (Dice, Marathe and Shavit, PPoPP 2012) passes a global
//! lock among the threads of one NUMA node before releasing it globally.
//! Here the cohort is a session: the framework's in-process queue already
//! lines up its tasks for a lock, so when the holder releases and the next
//! of them waits, the node it holds simply stays, and that task holds it.
//!
//! Why this is safe without a request is written down once, on
//! [`CohortPolicy`].
//!
//! Where the steps live: the pass itself is `Hold::pass_on`,
//! the waiting task picks the node up with its turn in
//! [`LockInternals::acquire`](super::LockInternals::acquire), and the
//! node travels between them in the in-process queue (a parcel of
//! `HandOver::hand_over` of the local queue).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::node::AcquiredNode;
use crate::Framework;

/// Opt-in cohort hand-off for the locks of one framework (see
/// [`FrameworkBuilder::cohort`](crate::FrameworkBuilder::cohort)): a
/// release passes the held node to a task of this framework that waits for
/// the same lock, without any request, for at most `max_passes` passes or
/// `max_hold` of continuous holding, whichever ends first.
///
/// Applies to the locks that queue in-process (see
/// [`LockInternalsDriver::local_turns`](super::LockInternalsDriver::local_turns)):
/// a mutex, a write lock, a semaphore's internal mutex and its leases
/// (so a semaphore mutex too). Each task gets a
/// hold of its own on the same node, with a greater
/// [`FencingToken`](super::FencingToken); the previous hold ends at the
/// pass for every clone of it.
///
/// # Why a pass is safe without a request
///
/// 1. **The old hold is over before the new one begins.** The pass ends the
///    old hold inside its send gate (`SendGate::ending`): a fenced write
///    of the old holder is either queued on the session before the pass or
///    refused after it, without being sent (every clone answers
///    [`LockLoss::NotHeld`](crate::LockLoss::NotHeld), `lost()` completes).
///    Only then is the node offered to the next task.
/// 2. **ZooKeeper applies a session's requests in the order they are sent.**
///    Both holders write on the session that created the node (a hold only
///    sends on its node's session), so every write the old holder queued
///    is applied before any write the new holder sends.
/// 3. **Tokens keep growing.** The new hold's [`FencingToken`](super::FencingToken) is the
///    node's zxid with a pass count one higher: greater than the old
///    hold's, smaller than the token of any node created later (those
///    have a greater zxid). A store that keeps the greatest token it has
///    seen refuses the old holder from the moment the new one wrote.
/// 4. **No pass after a loss.** The old hold is checked valid in the same
///    step that ends it (so a loss no state change announced, such as the
///    lease's end, [`LockLoss::Stale`](crate::LockLoss::Stale), counts too),
///    and the receiving task checks the node again against the loss epoch
///    of the run's first grant: a session replaced, an error state
///    (`Suspended`, under the standard policy), the framework closed or the
///    lease run out since then, and the node is deleted instead (in the
///    background) and the task queues as if nothing had been passed.
/// 5. **Other sessions get their turn.** A run of passes ends after
///    [`CohortPolicy::max_passes`] passes or once the session has held the
///    node for [`CohortPolicy::max_hold`], whichever comes first: the node
///    is then deleted as usual, and the next task of this process queues a
///    new node, behind the nodes other sessions queued meanwhile.
///
/// A node is never passed to an acquire that ZooKeeper would have treated
/// differently: one with a revocation listener, one pinned to another
/// session, or one whose node data differs. A hold that has tied something else to its
/// node (a read-write lock's downgrade) is not passed either
/// ([`Hold::keep_from_passing`](super::Hold::keep_from_passing)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CohortPolicy {
    /// Passes in one run before the node is released to the other sessions
    /// (0: never pass).
    pub max_passes: u32,
    /// Continuous holding by this session before the node is released to
    /// the other sessions.
    pub max_hold: Duration,
}

impl CohortPolicy {
    /// A policy with these bounds.
    pub const fn new(max_passes: u32, max_hold: Duration) -> Self {
        CohortPolicy {
            max_passes,
            max_hold,
        }
    }
}

/// 16 passes or 50 ms.
impl Default for CohortPolicy {
    fn default() -> Self {
        CohortPolicy::new(16, Duration::from_millis(50))
    }
}

/// A run of holds of one node by tasks of one framework: what a hold
/// granted to an acquire that may pass its node on carries.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    policy: CohortPolicy,
    /// The node data asked for: a receiving acquire must ask the same.
    data: Arc<[u8]>,
    /// When the run's first hold was granted.
    started: Instant,
    /// Passes so far in the run: the pass count of the hold carrying it.
    passes: u32,
}

impl Run {
    /// The run a fresh grant starts, for an acquire that asked for `data`.
    pub(crate) fn start(policy: CohortPolicy, data: Arc<[u8]>) -> Run {
        Run {
            policy,
            data,
            started: Instant::now(),
            passes: 0,
        }
    }

    /// The run of a hold that takes up its node again after `passes` holds
    /// of it (see [`LockInternals::resume`](super::LockInternals::resume)):
    /// it counts in the hold's token, and never passes the node on.
    pub(crate) fn resumed(passes: u32) -> Run {
        Run {
            policy: CohortPolicy::new(0, Duration::ZERO),
            data: Arc::from(&[][..]),
            started: Instant::now(),
            passes,
        }
    }

    /// The pass count of the hold that carries this run.
    pub(crate) fn passes(&self) -> u32 {
        self.passes
    }

    /// The run after one more pass, if the policy allows one now.
    pub(crate) fn next(&self) -> Option<Run> {
        let allowed =
            self.passes < self.policy.max_passes && self.started.elapsed() < self.policy.max_hold;
        allowed.then(|| Run {
            passes: self.passes + 1,
            ..self.clone()
        })
    }
}

/// A node on its way from a releasing task to the next one. Dropped without
/// being received, it deletes the node in the background.
pub(crate) struct Baton {
    framework: Framework,
    node: Option<AcquiredNode>,
    epoch: u64,
    run: Run,
}

impl Baton {
    /// `node`, granted at loss epoch `epoch`, passed on with `run` (already
    /// counting this pass).
    pub(crate) fn new(framework: Framework, node: AcquiredNode, epoch: u64, run: Run) -> Baton {
        Baton {
            framework,
            node: Some(node),
            epoch,
            run,
        }
    }

    /// The framework session generation that created the node.
    pub(crate) fn generation(&self) -> u64 {
        self.node.as_ref().map_or(0, AcquiredNode::generation)
    }

    /// Whether an acquire asking for `data` may take the node.
    pub(crate) fn fits(&self, data: &[u8]) -> bool {
        *self.run.data == *data
    }

    /// The node, its run's loss epoch and the run: the node is now the
    /// caller's.
    pub(crate) fn receive(mut self) -> Option<(AcquiredNode, u64, Run)> {
        let node = self.node.take()?;
        Some((node, self.epoch, self.run.clone()))
    }
}

impl Drop for Baton {
    fn drop(&mut self) {
        if let Some(node) = self.node.take() {
            tracing::debug!(node = %node.path(), "passed node not taken; deleting it");
            self.framework.delete_in_background(node.path());
        }
    }
}

/// How many passes the locks of one framework made.
#[derive(Debug, Default)]
pub(crate) struct Passes(AtomicU64);

impl Passes {
    /// Counts a pass of a lock of `framework`.
    pub(crate) fn add(framework: &Framework) {
        framework
            .extension::<Passes>()
            .0
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The count so far.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's `max_hold` is measured on tokio's clock (issue 33): under a
    /// paused clock, passes stop once paused time has passed it.
    #[tokio::test(start_paused = true)]
    async fn max_hold_ends_a_run_on_the_paused_clock() {
        let run = Run::start(
            CohortPolicy::new(16, Duration::from_millis(50)),
            Arc::from(&b""[..]),
        );
        let run = run.next().expect("a pass within max_hold");
        tokio::time::advance(Duration::from_millis(49)).await;
        let run = run.next().expect("still within max_hold");
        assert_eq!(run.passes(), 2);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(run.next().is_none(), "no pass once max_hold has passed");
    }
}
