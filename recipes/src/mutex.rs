//! [`InterProcessMutex`]: a reentrant mutex across processes and hosts.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use zk_curator_framework::lock_internals::{
    until_held, Acquire, AcquiredNode, BoundsSetting, Fence, FencingToken, Hold, HoldBounds,
    LockInternals, LockInternalsDriver, LockLoss, Revocation, RevocationListener,
    RevocationSetting, StandardLockInternalsDriver, Wait,
};
use zk_curator_framework::{Error, Framework, Result};

use crate::held::{would_deadlock, Guards, Held};
use crate::lock::impl_inter_process_lock;
use crate::reentrant::Reentrant;

pub(crate) use crate::layout::LOCK_NAME;
use crate::layout::{mutex_lock_name, Layout};

struct Shared {
    internals: LockInternals,
    owners: Reentrant<Hold>,
    guards: Arc<Guards>,
    revocation: RevocationSetting,
    /// The bounds every hold gets unless its acquire gives its own.
    bounds: BoundsSetting,
}

impl Shared {
    fn revocation(&self) -> Option<Revocation> {
        self.revocation.current()
    }

    fn bounds(&self) -> HoldBounds {
        self.bounds.get()
    }

    async fn acquire_hold(&self, wait: Wait, bounds: HoldBounds) -> Result<Option<Hold>> {
        let revocation = self.revocation();
        let request = Acquire::new()
            .wait(wait)
            .revocation(revocation.as_ref())
            .bounds(bounds);
        self.internals.acquire(request).await
    }
}

/// A mutex shared by every process that uses the same ZooKeeper path
/// (Curator's `InterProcessMutex`; same node layout, so Rust and JVM
/// services exclude each other).
///
/// # Behaviour
///
/// * **Fair**: participants queue in arrival order (ZooKeeper's sequence
///   numbers); each waiter watches only the one ahead of it, so a release
///   wakes exactly one waiter.
/// * **Reentrant per owner**: [`acquire`](Self::acquire) by an owner that
///   already holds the lock only bumps a count (no I/O), after checking that
///   the hold is still valid: a hold lost meanwhile (session ended, node
///   deleted, loss signalled) fails the re-entry with [`Error::LockLost`]
///   instead of pretending. Each acquire needs a matching
///   [`release`](Self::release) from the same owner. The owner is the
///   current tokio task, or the thread outside a task (see
///   [`Owner`](crate::Owner)); futures joined in one task share its one hold.
///   Other tasks of this process queue like other processes.
/// * **Try-lock**: [`try_acquire`](Self::try_acquire) and
///   [`try_lock`](Self::try_lock) never wait: one round trip when the lock
///   is free, two when it is taken (the node is created and listed, then
///   withdrawn).
/// * **Guard API**: [`lock`](Self::lock) returns a [`MutexGuard`] that owns
///   its hold, whichever task holds the guard; it is not reentrant.
/// * **No silent self-deadlock**: a task that holds a guard it took from
///   this instance and asks it for a task-bound hold
///   ([`acquire`](Self::acquire) and its timed and try forms), or that holds
///   the task-bound hold and asks for a guard, gets
///   [`Error::WouldDeadlock`] at once instead of waiting for itself. The
///   library cannot follow a guard moved to another task: it still counts
///   for the task that took it. A second [`lock`](Self::lock) while a guard
///   of the same task is alive waits for that guard, as a guard may be
///   released by another task.
/// * **Fencing**: every hold has a token ([`Hold::fencing_token`],
///   [`fencing_token`](Self::fencing_token)) that grows strictly from one
///   holder to the next.
/// * **Loss signal and fencing**: every hold, task-bound or guard, answers
///   `is_valid()` and `lost()` and gives a [`Fence`] for ZooKeeper writes
///   that succeed only while it is held. The lock node is ephemeral: if the
///   session is lost while holding, another process may take the lock;
///   stop when `lost()` fires.
///
/// Cheap to clone: clones share the owner map.
///
/// # Examples
/// ```no_run
/// # async fn demo(framework: zk_curator::Framework) -> zk_curator::Result<()> {
/// use zk_curator::InterProcessMutex;
///
/// let mutex = InterProcessMutex::new(framework, "/locks/nightly-report")?;
/// mutex.acquire().await?;
/// mutex.acquire().await?; // reentrant
/// mutex.release().await?;
/// mutex.release().await?; // the node is deleted now
///
/// let guard = mutex.lock().await?;
/// println!("token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct InterProcessMutex {
    shared: Arc<Shared>,
}

impl fmt::Debug for InterProcessMutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterProcessMutex")
            .field("path", &self.path())
            .field("holders", &self.shared.owners.holders())
            .field("guards", &self.shared.guards.alive())
            .finish()
    }
}

/// The mutex's driver: the engine's standard rule (the first participant
/// holds, each waiter watches the node right ahead of it, one node per
/// framework at a time) in the mutex's layout.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MutexDriver(pub(crate) Layout);

impl LockInternalsDriver for MutexDriver {
    fn layout(&self) -> Layout {
        self.0
    }

    fn local_turns(&self, max_leases: u32) -> Option<u32> {
        StandardLockInternalsDriver.local_turns(max_leases)
    }
}

impl InterProcessMutex {
    /// A mutex on `path` (its participants become children of `path`).
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a path that breaks ZooKeeper's rules, is `/`,
    /// or lies in the server's reserved `/zookeeper` tree. Nothing is sent.
    pub fn new(framework: Framework, path: &str) -> Result<Self> {
        Self::with_layout(framework, path, Layout::Curator)
    }

    /// A mutex on `path` in `layout`. In [`Layout::Kazoo`] its participants
    /// are kazoo's: nodes named as a kazoo `Lock`'s (`<uuid hex>__lock__<seq>`),
    /// so that a Python service's `Lock` (or `WriteLock`, or `Election`) on
    /// the same path and this mutex exclude each other. Like a kazoo
    /// `WriteLock`, it also waits for kazoo readers ahead of it.
    ///
    /// # Errors
    /// As [`InterProcessMutex::new`].
    pub fn with_layout(framework: Framework, path: &str, layout: Layout) -> Result<Self> {
        Self::with_driver(framework, path, Arc::new(MutexDriver(layout)))
    }

    /// A mutex on `path` whose participants are created and ordered by a
    /// driver of your own (Curator's three-argument constructor).
    ///
    /// # Errors
    /// As [`InterProcessMutex::new`].
    pub fn with_driver(
        framework: Framework,
        path: &str,
        driver: Arc<dyn LockInternalsDriver>,
    ) -> Result<Self> {
        let lock_name = mutex_lock_name(driver.layout());
        let internals = LockInternals::new(framework, path, lock_name, 1, driver)?;
        Ok(InterProcessMutex {
            shared: Arc::new(Shared {
                internals,
                owners: Reentrant::new(),
                guards: Arc::new(Guards::default()),
                revocation: RevocationSetting::default(),
                bounds: BoundsSetting::default(),
            }),
        })
    }

    /// The lock's path.
    pub fn path(&self) -> &str {
        self.shared.internals.base_path()
    }

    /// Bounds every later hold of this mutex (task holds and guards) whose
    /// acquire gives none of its own: see [`HoldBounds`]. A reentrant
    /// acquire keeps the bounds of the outermost one.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for bounds [`HoldBounds::validate`]
    /// refuses (a zero, or one longer than a year); nothing changes.
    pub fn set_hold_bounds(&self, bounds: HoldBounds) -> Result<()> {
        self.shared.bounds.set(bounds)
    }

    /// Says the current owner's hold is making progress (see
    /// [`Hold::progress`]): cheap, synchronous, no I/O; nothing if the
    /// owner holds nothing.
    pub fn progress(&self) {
        self.shared.owners.with_current(Hold::progress);
    }

    /// Waits until the current owner holds the lock (or holds it once more).
    ///
    /// # Errors
    /// [`Error::LockLost`] when the owner's hold was lost (its session
    /// ended, its node was deleted, or its loss was signalled): the stale
    /// hold is forgotten, so a new `acquire` queues afresh;
    /// [`Error::WouldDeadlock`] at once if the current task holds a guard it
    /// took from this mutex; [`Error::Closed`] if the framework is closed;
    /// [`Error::Timeout`] if no session could be had within the connection
    /// timeout; ZooKeeper errors that retrying could not overcome (e.g.
    /// [`Error::NoAuth`]).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future (in `select!`, under `timeout`, by
    /// aborting the task) deletes our waiting node in the background and
    /// leaves the owner's count unchanged. `tokio::time::timeout(d,
    /// mutex.acquire())` is therefore a correct timed acquire; so is
    /// [`acquire_timeout`](Self::acquire_timeout).
    pub async fn acquire(&self) -> Result<()> {
        self.acquire_with(Wait::Forever).await.map(|_| ())
    }

    /// Like [`acquire`](Self::acquire), waiting at most `timeout` in all
    /// (session waits, retries and queueing included). Returns `false` on
    /// timeout. A zero timeout is [`try_acquire`](Self::try_acquire).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
        self.acquire_with(Wait::timeout(timeout)).await
    }

    /// Takes the lock if it is free right now, without waiting: one round
    /// trip (the create and the listing go out together); if the lock is
    /// taken, our node is deleted again before this returns `false`. An
    /// owner that already holds the lock re-enters as with
    /// [`acquire`](Self::acquire).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    pub async fn try_acquire(&self) -> Result<bool> {
        self.acquire_with(Wait::Try).await
    }

    async fn acquire_with(&self, wait: Wait) -> Result<bool> {
        let shared = &self.shared;
        shared.guards.refuse_own(self.path())?;
        shared
            .owners
            .acquire(wait, |wait| shared.acquire_hold(wait, shared.bounds()))
            .await
    }

    /// Releases one hold of the current owner; the last release deletes the
    /// node (in the background if ZooKeeper cannot be reached right now).
    ///
    /// # Errors
    /// [`Error::NotOwner`] if the current owner does not hold the lock
    /// (nothing changes); [`Error::LockLost`] if the last hold had been lost
    /// before this release (returned at once, see
    /// [`LockInternals::release`]); [`Error::Closed`] if the framework is
    /// closed (the hold is dropped; the node went with the session).
    ///
    /// # Cancel safety
    /// The count changes at the first poll; a dropped release of the last
    /// hold still deletes the node in the background.
    pub async fn release(&self) -> Result<()> {
        match self.shared.owners.release()? {
            None => Ok(()),
            Some(hold) => self.shared.internals.release(&hold).await,
        }
    }

    /// Whether any owner of this process holds the lock through this mutex
    /// (or one of its guards is alive).
    pub fn is_acquired_in_this_process(&self) -> bool {
        self.shared.owners.holders() > 0 || self.shared.guards.alive() > 0
    }

    /// Whether the current owner (task, or thread outside a task) holds it.
    pub fn is_owned_by_current_task(&self) -> bool {
        self.shared.owners.is_held_by_current()
    }

    /// How many times the current owner holds the lock (0 if not at all).
    pub fn hold_count(&self) -> u64 {
        self.shared.owners.count()
    }

    /// The fencing token of the current owner's hold, if it holds the lock.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.shared.owners.with_current(Hold::fencing_token)
    }

    /// The node of the current owner's hold, if it holds the lock (its
    /// [`path`](AcquiredNode::path) is the node's path).
    pub fn node(&self) -> Option<AcquiredNode> {
        self.shared.owners.with_current(|h| h.node().clone())
    }

    /// Why the current owner's hold can no longer be trusted, `None` while
    /// it can ([`LockLoss::NotHeld`] without a hold): what
    /// [`InterProcessLock::loss`](crate::InterProcessLock::loss) answers.
    fn loss(&self) -> Option<LockLoss> {
        self.shared
            .owners
            .with_current(Hold::loss)
            .unwrap_or(Some(LockLoss::NotHeld))
    }

    /// Whether the current owner holds the lock and its hold can still be
    /// trusted (see [`Hold::check`]); no I/O.
    pub fn is_valid(&self) -> bool {
        self.shared
            .owners
            .with_current(Hold::is_valid)
            .unwrap_or(false)
    }

    /// Completes when the current owner's hold can no longer be trusted,
    /// with the reason ([`LockLoss::NotHeld`] at once if the owner holds
    /// nothing). The hold is looked up now, so the future may be moved into
    /// a `select!` or another task.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    pub fn lost(&self) -> impl Future<Output = LockLoss> + Send + 'static {
        lost_of(self.shared.owners.with_current(Hold::clone))
    }

    /// A [`Fence`] over the current owner's hold: ZooKeeper writes through
    /// it succeed only while the hold is held.
    ///
    /// # Errors
    /// [`Error::NotOwner`] if the current owner does not hold the lock;
    /// [`Error::LockLost`] if its hold is known to be lost.
    pub fn fence(&self) -> Result<Fence> {
        fence_of(self.shared.owners.with_current(Hold::clone))
    }

    /// The full paths of all participants, sorted: the first holds the lock.
    ///
    /// # Errors
    /// ZooKeeper errors that retrying could not overcome; [`Error::Closed`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn participant_nodes(&self) -> Result<Vec<String>> {
        self.shared.internals.participant_nodes().await
    }

    /// Makes every later acquire of this mutex (task holds and guards)
    /// revocable: from the moment its node exists, a [`Revoker`] writing a
    /// revocation request into it calls `listener` with the node's path, on a
    /// task of its own. Cooperative: the listener decides what to do —
    /// usually it tells the owning task to release (a task hold can only be
    /// released by its owner; a guard can be released from anywhere).
    ///
    /// Unlike Curator, the listener stays registered until
    /// [`clear_revocable`](Self::clear_revocable), instead of being dropped by
    /// the next release.
    ///
    /// [`Revoker`]: zk_curator_framework::lock_internals::Revoker
    pub fn make_revocable(&self, listener: impl RevocationListener) {
        self.shared.revocation.set(Some(Revocation::new(listener)));
    }

    /// Stops making later acquires revocable (holds already revocable stay so).
    pub fn clear_revocable(&self) {
        self.shared.revocation.set(None);
    }

    /// Waits for the lock and returns a guard that owns the hold. Not
    /// reentrant: a second `lock()` queues behind the first guard.
    ///
    /// # Errors
    /// [`Error::WouldDeadlock`] at once if the current task holds the
    /// task-bound hold of this mutex; otherwise as
    /// [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    pub async fn lock(&self) -> Result<MutexGuard> {
        until_held(|| self.lock_with(Wait::Forever)).await
    }

    /// Like [`lock`](Self::lock), the guard's hold bounded by `bounds`
    /// instead of the mutex's own (see [`HoldBounds`]): once a bound
    /// passes, the hold is lost with [`LockLoss::BoundPassed`] and its node
    /// deleted, whether or not the holder is still running. Say progress
    /// with [`Hold::progress`] on the guard.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire); [`Error::InvalidArgument`] at once,
    /// before anything is sent, for bounds [`HoldBounds::validate`] refuses.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    pub async fn lock_bounded(&self, bounds: HoldBounds) -> Result<MutexGuard> {
        bounds.validate()?;
        until_held(|| self.lock_within(Wait::Forever, bounds)).await
    }

    /// Like [`lock`](Self::lock), waiting at most `timeout`; `None` on
    /// timeout. A zero timeout is [`try_lock`](Self::try_lock).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    pub async fn try_lock_for(&self, timeout: Duration) -> Result<Option<MutexGuard>> {
        self.lock_with(Wait::timeout(timeout)).await
    }

    /// A guard if the lock is free right now, without waiting (one round
    /// trip; otherwise our node is deleted again before this returns
    /// `None`).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    pub async fn try_lock(&self) -> Result<Option<MutexGuard>> {
        self.lock_with(Wait::Try).await
    }

    /// A guard within `wait` (`None` when it ends first); the one way every
    /// guard is taken, the multi-lock's members included.
    pub(crate) async fn lock_with(&self, wait: Wait) -> Result<Option<MutexGuard>> {
        self.lock_within(wait, self.shared.bounds()).await
    }

    /// [`lock_with`](Self::lock_with), the hold bounded by `bounds`.
    pub(crate) async fn lock_within(
        &self,
        wait: Wait,
        bounds: HoldBounds,
    ) -> Result<Option<MutexGuard>> {
        self.refuse_own_task_hold()?;
        Ok(self
            .shared
            .acquire_hold(wait, bounds)
            .await?
            .map(|hold| self.guard(hold)))
    }

    /// A guard asked for by a task that holds the task-bound hold would
    /// wait for that task, which is waiting: refused at once.
    fn refuse_own_task_hold(&self) -> Result<()> {
        if self.shared.owners.is_held_by_current() {
            tracing::debug!(path = %self.path(), "guard refused: the task holds this mutex");
            return Err(would_deadlock(self.path()));
        }
        Ok(())
    }

    fn guard(&self, hold: Hold) -> MutexGuard {
        MutexGuard {
            held: Held::new(
                self.shared.internals.clone(),
                hold,
                Some(self.shared.guards.clone()),
            ),
        }
    }
}

/// The loss signal of a hold looked up now ([`LockLoss::NotHeld`] without one).
pub(crate) async fn lost_of(hold: Option<Hold>) -> LockLoss {
    match hold {
        Some(hold) => hold.lost().await,
        None => LockLoss::NotHeld,
    }
}

/// The fence of a hold looked up now.
pub(crate) fn fence_of(hold: Option<Hold>) -> Result<Fence> {
    hold.ok_or(Error::NotOwner)?.fence()
}

/// A hold of an [`InterProcessMutex`] owned by this value, not by a task.
///
/// It is a [`Hold`] (through `Deref`): [`fencing_token`](Hold::fencing_token),
/// [`is_valid`](Hold::is_valid), [`lost`](Hold::lost),
/// [`fence`](Hold::fence) and [`node`](Hold::node) (its node's path is
/// `guard.node().path()`; `path()` names locks only) work on it directly.
/// Release it with [`MutexGuard::release`]; dropping it releases in the background.
///
/// ```no_run
/// # async fn demo(mutex: zk_curator::InterProcessMutex) -> zk_curator::Result<()> {
/// # async fn do_the_work() {}
/// let guard = mutex.lock().await?;
/// println!("fencing token {}", guard.fencing_token());
/// tokio::select! {
///     _ = do_the_work() => {}
///     reason = guard.lost() => eprintln!("stopped: lock lost ({reason})"),
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock"]
#[clippy::has_significant_drop]
pub struct MutexGuard {
    held: Held,
}

impl fmt::Debug for MutexGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MutexGuard")
            .field("node", &self.held.hold().node().path())
            .finish()
    }
}

impl MutexGuard {
    /// Releases the hold and deletes the node (in the background if
    /// ZooKeeper cannot be reached right now).
    ///
    /// # Errors
    /// [`Error::LockLost`] if the hold had been lost before the release
    /// (returned at once); [`Error::Closed`] if the framework is closed;
    /// errors no retry can fix, such as [`Error::NoAuth`] (only logged if
    /// the framework releases before the reply, see
    /// [`FrameworkBuilder::release_before_reply`](zk_curator_framework::FrameworkBuilder::release_before_reply)).
    ///
    /// # Cancel safety
    /// Once polled, a dropped release still deletes the node in the background.
    pub async fn release(self) -> Result<()> {
        self.held.release().await
    }
}

impl std::ops::Deref for MutexGuard {
    type Target = Hold;

    fn deref(&self) -> &Hold {
        self.held.hold()
    }
}

impl_inter_process_lock!(InterProcessMutex);

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync_static<T: Send + Sync + 'static>() {}

    #[allow(dead_code)]
    fn futures_are_send(mutex: InterProcessMutex) {
        assert_send(&mutex.acquire());
        assert_send(&mutex.acquire_timeout(Duration::from_secs(1)));
        assert_send(&mutex.release());
        assert_send(&mutex.lock());
        assert_send(&mutex.participant_nodes());
    }

    #[test]
    fn handles_are_send_sync() {
        assert_send_sync_static::<InterProcessMutex>();
        assert_send_sync_static::<MutexGuard>();
    }
}
