//! The lock engine's own state and settings, kept per framework in the
//! session layer's typed slot ([`Framework::extension`]) without the
//! session layer knowing them: the in-process queues, the shared read
//! nodes, the lock counters and the lock options of
//! [`FrameworkBuilder`].
//!
//! The builder's lock options are written here, in one `impl` block beside
//! the state they set, rather than in `framework/builder.rs`: the session
//! layer then never names an engine type (no import from `framework/` into
//! `lock_internals/`, so the two do not form a circle).

use std::sync::Arc;

use super::acquire::Wakeups;
use super::cohort::{Baton, CohortPolicy, Passes};
use super::local_queue::LocalQueues;
use super::shared_node::SharedNodes;
use crate::{Framework, FrameworkBuilder, Metrics};

/// The lock options of a framework (set on its builder).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LockOptions {
    pub(crate) local_queue: bool,
    pub(crate) release_before_reply: bool,
    pub(crate) cohort: Option<CohortPolicy>,
    pub(crate) remove_lock_paths: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            local_queue: true,
            release_before_reply: false,
            cohort: None,
            remove_lock_paths: true,
        }
    }
}

/// The engine's state in one framework.
#[derive(Debug, Default)]
pub(crate) struct Engine {
    /// The in-process queue in front of every lock (see
    /// [`FrameworkBuilder::local_queue`]).
    pub(crate) local_queues: Arc<LocalQueues<Baton>>,
    /// The read nodes shared by readers of this process.
    pub(crate) shared_nodes: Arc<SharedNodes>,
}

impl Engine {
    /// The engine of `framework`.
    pub(crate) fn of(framework: &Framework) -> Arc<Engine> {
        framework.extension::<Engine>()
    }

    /// The lock options of `framework`.
    pub(crate) fn options(framework: &Framework) -> LockOptions {
        *framework.extension::<LockOptions>()
    }
}

impl FrameworkBuilder {
    /// Whether tasks of this framework contending for one lock wait in an
    /// in-process queue, first come first served, so that only a bounded
    /// number of them have a participant node in ZooKeeper at a time (one for
    /// a mutex or a write lock; the driver says how many, see
    /// [`LockInternalsDriver::local_turns`](super::LockInternalsDriver::local_turns)).
    /// Defaults to `true`.
    ///
    /// With it, the server's queue and every listing grow with the number of
    /// sessions instead of the number of waiting tasks, and a hand-off
    /// between two tasks of one process is one round trip (the next task's
    /// create follows the holder's delete on the wire). Every holder still
    /// gets its own node and fencing token, except readers: the readers of
    /// the process that wait together share one node (and its token; see
    /// [`LockInternalsDriver::shares_node`](super::LockInternalsDriver::shares_node)),
    /// and a reader arriving once that node holds gets a new one, behind any
    /// writer queued meanwhile. Fairness becomes first come,
    /// first served within the process, and arrival order among the
    /// participants in ZooKeeper (each process's current one): a task of a
    /// busy process may wait behind tasks of other processes that came after
    /// it. Turn it off (one node per waiting task, as Curator) when tasks
    /// must be served in global arrival order.
    pub fn local_queue(mut self, enabled: bool) -> Self {
        self.extension_mut::<LockOptions>().local_queue = enabled;
        self
    }

    /// Whether a release may return as soon as its delete is queued on the
    /// session, without waiting for ZooKeeper's answer. Defaults to `false`:
    /// a release returns once the server has answered (as Curator's does),
    /// so no client sees the node after it, and an error no retry can fix
    /// (such as `NoAuth`) is returned.
    ///
    /// With `true`, the release of an ephemeral participant node returns once
    /// the delete is queued. The server applies it before any later request
    /// of this framework, so a later acquire through this framework no
    /// longer finds the node; other clients see it gone once the server has
    /// applied it, which may be just after the release returns. The answer is handled
    /// in the background: a delete that cannot reach ZooKeeper goes to the
    /// background cleaner, and an error is logged.
    /// [`Framework::wait_for_background_cleanup`] waits for these deletes
    /// too. A hold already lost, and a persistent participant node (a driver
    /// may ask for one, see
    /// [`ParticipantNode`](super::ParticipantNode)), are
    /// still released with the answer awaited.
    ///
    /// What it buys: the release's round trip, and under contention a disk
    /// sync per hand-off. A process that releases and acquires again sends
    /// its create right behind its delete, so the server syncs both to disk
    /// together, and under contention the next holder's delete no longer
    /// queues behind that create's disk sync (see `BENCHMARKS.md`). What it
    /// costs: end the framework with [`Framework::close`] before the process
    /// exits (a delete still queued when the runtime stops is never sent, and
    /// the node then stays until the session expires), and do not expect a
    /// peer that you tell about the release to find the lock free at once.
    pub fn release_before_reply(mut self, enabled: bool) -> Self {
        self.extension_mut::<LockOptions>().release_before_reply = enabled;
        self
    }

    /// Whether a release removes the lock path with its node, in one multi,
    /// where this framework's acquire made the path (in one multi with the
    /// node, the path being missing) and nobody has queued under it since.
    /// Defaults to `true`: a lock taken once per entity then costs one
    /// write to take and one to give back (the next acquire makes the path
    /// again with its node and lists nothing), and no emptied path waits
    /// for the server's reaper. A path made by anyone else is never
    /// removed, and with `false` the path stays as a container for the
    /// server to reap.
    ///
    /// Turn it off where kazoo clients share lock paths with this framework
    /// and keep one `Lock` object across acquires: kazoo's `Lock` makes its
    /// path once, at its first acquire, and fails every later acquire with
    /// `NoNodeError` once the path is gone (as it already does once the
    /// server reaps an emptied container). Apache Curator's and
    /// zk-curator's acquires make a missing path again.
    pub fn remove_lock_paths(mut self, enabled: bool) -> Self {
        self.extension_mut::<LockOptions>().remove_lock_paths = enabled;
        self
    }

    /// Cohort hand-off (off by default): a release passes the held node to
    /// a task of this framework that waits for the same lock, with no
    /// request to ZooKeeper, for a run of at most
    /// [`CohortPolicy::max_passes`] passes or [`CohortPolicy::max_hold`] of
    /// continuous holding; then the node is deleted as usual and the next
    /// task queues a new node behind the other sessions'. `None` turns it
    /// off.
    ///
    /// Needs the in-process queue ([`local_queue`](Self::local_queue), on by
    /// default), and applies to the locks that queue in it: a mutex, a
    /// write lock, a semaphore's internal mutex and its leases. An acquire
    /// with a revocation listener, or asking for other node data than the
    /// holder's, neither passes nor receives a node; one pinned to a
    /// session receives only a node of that session.
    ///
    /// What it keeps: one holder at a time (the old hold ends, for every
    /// clone, before the new one begins; a fenced write of the old holder is
    /// refused from then on without being sent), fencing tokens that grow
    /// with every holder ([`FencingToken`](super::FencingToken) counts the
    /// passes below the node's zxid), and no pass once the session was
    /// suspended, replaced or closed since the run began. What it changes:
    /// a run of tasks of this process holds the lock ahead of other
    /// sessions' waiters, for at most the bound; `locks` shows the same node
    /// (this framework holds it) through the run. [`CohortPolicy`] says why
    /// a pass is safe.
    pub fn cohort(mut self, policy: impl Into<Option<CohortPolicy>>) -> Self {
        self.extension_mut::<LockOptions>().cohort = policy.into();
        self
    }
}

impl Framework {
    /// How many acquires of this framework wait for the lock at `path` (any
    /// lock name under it; see [`FrameworkBuilder::local_queue`]) without a
    /// node of their own in ZooKeeper: those waiting in the in-process queue
    /// for a turn, and readers waiting on another reader's node (see
    /// [`LockInternalsDriver::shares_node`](super::LockInternalsDriver::shares_node)).
    pub fn locally_queued(&self, path: &str) -> usize {
        let engine = Engine::of(self);
        engine.local_queues.waiting(path) + engine.shared_nodes.waiting(path)
    }
}

impl Metrics {
    /// How many times a waiting lock participant was woken by a watch on the
    /// node ahead of it. With no herd effect, one release wakes one waiter.
    pub fn lock_wakeups(&self) -> u64 {
        self.extensions().get::<Wakeups>().get()
    }

    /// How many times a lock of this framework passed its node to another
    /// task of the framework without a request (see
    /// [`FrameworkBuilder::cohort`]).
    pub fn lock_passes(&self) -> u64 {
        self.extensions().get::<Passes>().get()
    }
}
