//! [`InterProcessSemaphoreMutex`]: a non-reentrant mutex that any task may
//! release, built on a one-lease [`InterProcessSemaphoreV2`].

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use zk_curator_framework::lock_internals::{
    AcquiredNode, BoundsSetting, Fence, FencingToken, Hold, HoldBounds, LockLoss, Wait,
};
use zk_curator_framework::{Error, Framework, Result};

use crate::lock::impl_inter_process_lock;
use crate::semaphore::{InterProcessSemaphoreV2, Lease};

/// A mutex across processes that is **not reentrant** and **not owned by a
/// task** (Curator's `InterProcessSemaphoreMutex`): a semaphore with one
/// lease, on the semaphore's node layout (`<path>/locks/…`,
/// `<path>/leases/_c_<uuid>-lease-<seq>`), so Rust and JVM services exclude
/// each other.
///
/// # Behaviour
///
/// * **Not reentrant**: a second [`acquire`](Self::acquire) while the mutex is
///   held, from any task (the holder's included), waits for a release; a
///   timed one gives up. Use [`InterProcessMutex`](crate::InterProcessMutex)
///   for a reentrant lock.
/// * **Any task may release**: the hold belongs to the instance (and its
///   clones), not to the task that acquired, so a task can hand the work on
///   and let another finish it.
/// * **Release when not held** is refused with [`Error::NotOwner`].
/// * **Fair** and **cancel safe** as the semaphore.
/// * **Loss signal and fencing**: [`is_valid`](Self::is_valid),
///   [`lost`](Self::lost) and [`fence`](Self::fence) for the current hold.
///   The lease node is ephemeral; if the session is lost while holding,
///   another process may take the mutex. This instance still reports
///   [`is_acquired_in_this_process`](Self::is_acquired_in_this_process)
///   until released.
/// * **Try-lock**: [`try_acquire`](Self::try_acquire) never waits.
///
/// Cheap to clone: clones share the hold.
///
/// # Examples
/// ```no_run
/// # async fn demo(framework: zk_curator::Framework) -> zk_curator::Result<()> {
/// use zk_curator::InterProcessSemaphoreMutex;
///
/// let mutex = InterProcessSemaphoreMutex::new(framework, "/locks/import")?;
/// mutex.acquire().await?;
/// let other = mutex.clone();
/// // Another task may finish the work and release:
/// tokio::spawn(async move { other.release().await }).await.ok();
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct InterProcessSemaphoreMutex {
    semaphore: InterProcessSemaphoreV2,
    lease: Arc<Mutex<Option<Lease>>>,
    /// The bounds of every hold (see [`HoldBounds`]).
    bounds: Arc<BoundsSetting>,
}

impl fmt::Debug for InterProcessSemaphoreMutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterProcessSemaphoreMutex")
            .field("path", &self.path())
            .field("acquired", &self.is_acquired_in_this_process())
            .finish()
    }
}

impl InterProcessSemaphoreMutex {
    /// A mutex on `path`.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a path that breaks ZooKeeper's rules, is `/`,
    /// or lies in the server's reserved `/zookeeper` tree. Nothing is sent.
    pub fn new(framework: Framework, path: &str) -> Result<Self> {
        Ok(InterProcessSemaphoreMutex {
            semaphore: InterProcessSemaphoreV2::new(framework, path, 1)?,
            lease: Arc::new(Mutex::new(None)),
            bounds: Arc::new(BoundsSetting::default()),
        })
    }

    /// Bounds every later hold of this mutex (see [`HoldBounds`]): once a
    /// bound passes, the hold is lost with [`LockLoss::BoundPassed`] and its
    /// lease node deleted, whether or not the holder still runs.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for bounds [`HoldBounds::validate`]
    /// refuses; nothing changes.
    pub fn set_hold_bounds(&self, bounds: HoldBounds) -> Result<()> {
        self.bounds.set(bounds)
    }

    /// Says the hold is making progress (see [`Hold::progress`]): cheap,
    /// synchronous, no I/O; nothing if the mutex is not held here.
    pub fn progress(&self) {
        if let Some(lease) = self.slot().as_ref() {
            lease.progress();
        }
    }

    /// The lock's path.
    pub fn path(&self) -> &str {
        self.semaphore.path()
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Lease>> {
        self.lease.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn store(&self, lease: Lease) {
        let previous = self.slot().replace(lease);
        if let Some(previous) = previous {
            // Only possible if the previous lease's node vanished (its
            // session ended, or it was deleted by hand) without a release.
            tracing::warn!(node = %previous.node().path(), "replacing a stale hold");
        }
    }

    /// Waits until the mutex is held by this instance.
    ///
    /// # Errors
    /// As [`InterProcessSemaphoreV2::acquire`].
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves no node behind and the hold
    /// unchanged.
    pub async fn acquire(&self) -> Result<()> {
        self.acquire_with(Wait::Forever).await.map(drop)
    }

    /// Like [`acquire`](Self::acquire), waiting at most `timeout` in all;
    /// `false` on timeout (the hold is then unchanged).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
        self.acquire_with(Wait::timeout(timeout)).await
    }

    /// Takes the mutex only if it is free right now, without waiting (see
    /// [`InterProcessSemaphoreV2::try_acquire`]); `false` otherwise, with
    /// nothing left behind.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    pub async fn try_acquire(&self) -> Result<bool> {
        self.acquire_with(Wait::Try).await
    }

    /// The one acquire of this mutex: one lease of its semaphore within
    /// `wait`, stored as the hold.
    async fn acquire_with(&self, wait: Wait) -> Result<bool> {
        match self.semaphore.acquire_one(wait).await? {
            Some(lease) => {
                // Checked when set: cannot fail.
                let _ = lease.bound(self.bounds.get());
                // No await between the grant and the store.
                self.store(lease);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Releases the mutex, from any task, and deletes the lease node (in the
    /// background if ZooKeeper cannot be reached right now).
    ///
    /// The hold is cleared *before* the node is deleted (Curator's fix of
    /// CURATOR-376), so a concurrent acquire that is granted the moment the
    /// node goes can store its own hold without it being clobbered.
    ///
    /// # Errors
    /// [`Error::NotOwner`] if the mutex is not held through this instance
    /// (nothing changes); otherwise as [`Lease::release`].
    ///
    /// # Cancel safety
    /// The hold is cleared at the first poll; a dropped release still deletes
    /// the node in the background.
    pub async fn release(&self) -> Result<()> {
        let lease = self.slot().take();
        match lease {
            Some(lease) => lease.release().await,
            None => Err(Error::NotOwner),
        }
    }

    /// Makes later holds revocable (see
    /// [`InterProcessSemaphoreV2::make_revocable`]).
    pub fn make_revocable(
        &self,
        listener: impl zk_curator_framework::lock_internals::RevocationListener,
    ) {
        self.semaphore.make_revocable(listener);
    }

    /// Stops making later holds revocable.
    pub fn clear_revocable(&self) {
        self.semaphore.clear_revocable();
    }

    /// Whether this instance (or a clone) holds the mutex.
    pub fn is_acquired_in_this_process(&self) -> bool {
        self.slot().is_some()
    }

    /// Whether the hold can still be trusted (see [`Hold::is_valid`]);
    /// `false` when not held.
    pub fn is_valid(&self) -> bool {
        self.slot().as_ref().is_some_and(|l| l.is_valid())
    }

    /// The fencing token of the current hold, if held.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.slot().as_ref().map(|l| l.fencing_token())
    }

    fn hold(&self) -> Option<Hold> {
        self.slot().as_ref().map(|lease| Hold::clone(lease))
    }

    /// Why the current hold can no longer be trusted, `None` while it can
    /// ([`LockLoss::NotHeld`] when not held): what
    /// [`InterProcessLock::loss`](crate::InterProcessLock::loss) answers.
    fn loss(&self) -> Option<LockLoss> {
        self.hold().map_or(Some(LockLoss::NotHeld), |h| h.loss())
    }

    /// Completes when the current hold can no longer be trusted
    /// ([`LockLoss::NotHeld`] at once when not held). Looked up now.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    pub fn lost(&self) -> impl std::future::Future<Output = LockLoss> + Send + 'static {
        crate::mutex::lost_of(self.hold())
    }

    /// A [`Fence`] over the current hold.
    ///
    /// # Errors
    /// [`Error::NotOwner`] when not held; [`Error::LockLost`] if the hold is
    /// known to be lost.
    pub fn fence(&self) -> Result<Fence> {
        crate::mutex::fence_of(self.hold())
    }

    /// The current hold's lease node, if held (its
    /// [`path`](AcquiredNode::path) is the node's full path).
    pub fn node(&self) -> Option<AcquiredNode> {
        self.slot().as_ref().map(|lease| lease.node().clone())
    }

    /// The full paths of the lease nodes, sorted: the first is the holder,
    /// a second one the acquirer at the head of the queue (the others wait on
    /// the internal mutex under `<path>/locks`). Empty before first use.
    ///
    /// # Errors
    /// ZooKeeper errors that retrying could not overcome; [`Error::Closed`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn participant_nodes(&self) -> Result<Vec<String>> {
        self.semaphore.participant_nodes().await
    }
}

impl_inter_process_lock!(InterProcessSemaphoreMutex);

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync_static<T: Send + Sync + 'static>() {}

    #[allow(dead_code)]
    fn futures_are_send(mutex: InterProcessSemaphoreMutex) {
        assert_send(&mutex.acquire());
        assert_send(&mutex.acquire_timeout(Duration::from_secs(1)));
        assert_send(&mutex.release());
        assert_send(&mutex.participant_nodes());
    }

    #[test]
    fn handles_are_send_sync() {
        assert_send_sync_static::<InterProcessSemaphoreMutex>();
    }
}
