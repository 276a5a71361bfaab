//! [`InterProcessMutex`]: a reentrant mutex across processes and hosts.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use futures::future::BoxFuture;
use futures::FutureExt;
use zk_curator_framework::lock_internals::{
    AcquiredNode, LockInternals, LockInternalsDriver, LockLoss, Revocation, RevocationListener,
    StandardLockInternalsDriver,
};
use zk_curator_framework::{Error, Framework, Result};

use crate::lock::InterProcessLock;
use crate::owner::Owner;

/// The name Curator gives mutex participants (`_c_<uuid>-lock-<seq>`).
pub const LOCK_NAME: &str = "lock-";

struct Shared {
    internals: LockInternals,
    owners: DashMap<Owner, Hold>,
    guards: AtomicUsize,
    revocation: std::sync::Mutex<Option<Revocation>>,
}

impl Shared {
    fn revocation(&self) -> Option<Revocation> {
        self.revocation
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    async fn acquire_node(&self, timeout: Option<Duration>) -> Result<Option<AcquiredNode>> {
        let revocation = self.revocation();
        self.internals
            .acquire_revocable(&[], timeout, revocation.as_ref())
            .await
    }
}

struct Hold {
    node: AcquiredNode,
    count: u64,
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
///   already holds the lock only bumps a count (no I/O); each acquire needs a
///   matching [`release`](Self::release) from the same owner. The owner is the
///   current tokio task, or the thread outside a task (see [`Owner`]). Other
///   tasks of this process queue like other processes.
/// * **Guard API**: [`lock`](Self::lock) returns a [`MutexGuard`] that owns
///   its hold, whichever task holds the guard; it is not reentrant.
/// * **Fencing**: every hold has a token ([`MutexGuard::fencing_token`],
///   [`fencing_token`](Self::fencing_token)) that grows strictly from one
///   holder to the next.
/// * **Session loss**: the lock node is ephemeral. If the session is lost
///   while holding, the node is gone and another process may take the lock;
///   watch the framework's connection state (or [`MutexGuard::is_valid`]).
///
/// Cheap to clone: clones share the owner map.
///
/// # Examples
/// ```no_run
/// # async fn demo(framework: zk_curator_framework::Framework) -> zk_curator_recipes::Result<()> {
/// use zk_curator_recipes::InterProcessMutex;
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
            .field("holders", &self.shared.owners.len())
            .field("guards", &self.shared.guards.load(Ordering::Relaxed))
            .finish()
    }
}

impl InterProcessMutex {
    /// A mutex on `path` (its participants become children of `path`).
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a path that breaks ZooKeeper's rules, is `/`,
    /// or lies in the server's reserved `/zookeeper` tree. Nothing is sent.
    pub fn new(framework: Framework, path: &str) -> Result<Self> {
        Self::with_driver(framework, path, Arc::new(StandardLockInternalsDriver))
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
        let internals = LockInternals::new(framework, path, LOCK_NAME, 1, driver)?;
        Ok(InterProcessMutex {
            shared: Arc::new(Shared {
                internals,
                owners: DashMap::new(),
                guards: AtomicUsize::new(0),
                revocation: std::sync::Mutex::new(None),
            }),
        })
    }

    /// The lock's path.
    pub fn path(&self) -> &str {
        self.shared.internals.base_path()
    }

    /// Waits until the current owner holds the lock (or holds it once more).
    ///
    /// # Errors
    /// [`Error::Closed`] if the framework is closed; [`Error::Timeout`] if no
    /// session could be had within the connection timeout; ZooKeeper errors
    /// that retrying could not overcome (e.g. [`Error::NoAuth`]).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future (in `select!`, under `timeout`, by
    /// aborting the task) deletes our waiting node in the background and
    /// leaves the owner's count unchanged. `tokio::time::timeout(d,
    /// mutex.acquire())` is therefore a correct timed acquire; so is
    /// [`acquire_timeout`](Self::acquire_timeout).
    pub async fn acquire(&self) -> Result<()> {
        self.acquire_inner(None).await.map(|_| ())
    }

    /// Like [`acquire`](Self::acquire), waiting at most `timeout` in all
    /// (session waits, retries and queueing included). Returns `false` on
    /// timeout.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
        self.acquire_inner(Some(timeout)).await
    }

    async fn acquire_inner(&self, timeout: Option<Duration>) -> Result<bool> {
        let owner = Owner::current();
        if let Some(mut hold) = self.shared.owners.get_mut(&owner) {
            hold.count += 1;
            tracing::debug!(path = %self.path(), ?owner, count = hold.count, "reentrant acquire");
            return Ok(true);
        }
        let Some(node) = self.shared.acquire_node(timeout).await? else {
            return Ok(false);
        };
        // No await between the grant and the insert: cancellation cannot
        // lose a granted node.
        self.shared.owners.insert(owner, Hold { node, count: 1 });
        Ok(true)
    }

    /// Releases one hold of the current owner; the last release deletes the
    /// node (in the background if ZooKeeper cannot be reached right now).
    ///
    /// # Errors
    /// [`Error::NotOwner`] if the current owner does not hold the lock
    /// (nothing changes); [`Error::Closed`] if the framework is closed (the
    /// hold is dropped; the node went with the session).
    ///
    /// # Cancel safety
    /// The count changes at the first poll; a dropped release of the last
    /// hold still deletes the node in the background.
    pub async fn release(&self) -> Result<()> {
        let owner = Owner::current();
        match self.shared.owners.get_mut(&owner) {
            None => return Err(Error::NotOwner),
            Some(mut hold) if hold.count > 1 => {
                hold.count -= 1;
                return Ok(());
            }
            Some(_) => {}
        }
        let Some((_, hold)) = self.shared.owners.remove(&owner) else {
            return Err(Error::NotOwner);
        };
        self.shared.internals.release(&hold.node).await
    }

    /// Whether any owner of this process holds the lock through this mutex
    /// (or one of its guards is alive).
    pub fn is_acquired_in_this_process(&self) -> bool {
        !self.shared.owners.is_empty() || self.shared.guards.load(Ordering::Acquire) > 0
    }

    /// Whether the current owner (task, or thread outside a task) holds it.
    pub fn is_owned_by_current_task(&self) -> bool {
        self.shared.owners.contains_key(&Owner::current())
    }

    /// The fencing token of the current owner's hold, if it holds the lock.
    pub fn fencing_token(&self) -> Option<i64> {
        self.shared
            .owners
            .get(&Owner::current())
            .map(|h| h.node.fencing_token())
    }

    /// The node of the current owner's hold, if it holds the lock.
    pub fn lock_node(&self) -> Option<String> {
        self.shared
            .owners
            .get(&Owner::current())
            .map(|h| h.node.path().to_owned())
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
        *self
            .shared
            .revocation
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Revocation::new(listener));
    }

    /// Stops making later acquires revocable (holds already revocable stay so).
    pub fn clear_revocable(&self) {
        *self
            .shared
            .revocation
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Waits for the lock and returns a guard that owns the hold. Not
    /// reentrant: a second `lock()` queues behind the first guard.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    pub async fn lock(&self) -> Result<MutexGuard> {
        match self.shared.acquire_node(None).await? {
            Some(node) => Ok(self.guard(node)),
            None => Err(Error::Timeout(Duration::MAX)),
        }
    }

    /// Like [`lock`](Self::lock), waiting at most `timeout`; `None` on timeout.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    pub async fn try_lock_for(&self, timeout: Duration) -> Result<Option<MutexGuard>> {
        Ok(self
            .shared
            .acquire_node(Some(timeout))
            .await?
            .map(|node| self.guard(node)))
    }

    fn guard(&self, node: AcquiredNode) -> MutexGuard {
        self.shared.guards.fetch_add(1, Ordering::AcqRel);
        MutexGuard {
            shared: self.shared.clone(),
            node: Some(node),
        }
    }
}

/// A hold of an [`InterProcessMutex`] owned by this value, not by a task.
///
/// Release it with [`MutexGuard::release`]; dropping it releases in the
/// background.
#[must_use = "dropping the guard releases the lock"]
#[clippy::has_significant_drop]
pub struct MutexGuard {
    shared: Arc<Shared>,
    node: Option<AcquiredNode>,
}

impl fmt::Debug for MutexGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MutexGuard")
            .field("node", &self.node.as_ref().map(|n| n.path()))
            .finish()
    }
}

impl MutexGuard {
    fn node(&self) -> Option<&AcquiredNode> {
        self.node.as_ref()
    }

    /// The fencing token of this hold: strictly greater than the token of
    /// every earlier holder of the same path. Pass it to the resource you
    /// protect so that it can refuse a stale holder's writes.
    pub fn fencing_token(&self) -> i64 {
        self.node().map_or(0, AcquiredNode::fencing_token)
    }

    /// The lock node's full path.
    pub fn node_path(&self) -> &str {
        self.node().map_or("", AcquiredNode::path)
    }

    /// Whether the hold can still be trusted: the session that created the
    /// node is still the framework's session and the connection state is not
    /// an error under the framework's [`ErrorPolicy`]. It does not detect a
    /// node deleted by hand.
    ///
    /// [`ErrorPolicy`]: zk_curator_framework::ErrorPolicy
    pub fn is_valid(&self) -> bool {
        self.node()
            .is_some_and(|node| self.shared.internals.is_valid(node))
    }

    /// Completes when this hold can no longer be trusted, with the reason:
    /// an error connection state under the framework's error policy, the
    /// session that created the node replaced, the node deleted by someone
    /// else, or the framework closed. Run it beside the protected work:
    ///
    /// ```no_run
    /// # async fn demo(mutex: zk_curator_recipes::InterProcessMutex) -> zk_curator_recipes::Result<()> {
    /// # async fn do_the_work() {}
    /// let guard = mutex.lock().await?;
    /// tokio::select! {
    ///     _ = do_the_work() => {}
    ///     reason = guard.lost() => eprintln!("stopped: lock lost ({reason})"),
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    pub fn lost(&self) -> impl std::future::Future<Output = LockLoss> + Send + 'static {
        let internals = self.shared.internals.clone();
        let node = self.node().cloned();
        async move {
            match node {
                Some(node) => internals.lost(&node).await,
                None => LockLoss::NodeDeleted,
            }
        }
    }

    /// Releases the hold and deletes the node (in the background if
    /// ZooKeeper cannot be reached right now).
    ///
    /// # Errors
    /// [`Error::Closed`] if the framework is closed; errors no retry can fix,
    /// such as [`Error::NoAuth`].
    ///
    /// # Cancel safety
    /// Once polled, a dropped release still deletes the node in the background.
    pub async fn release(mut self) -> Result<()> {
        let Some(node) = self.node.take() else {
            return Ok(());
        };
        self.shared.guards.fetch_sub(1, Ordering::AcqRel);
        self.shared.internals.release(&node).await
    }
}

impl Drop for MutexGuard {
    fn drop(&mut self) {
        if let Some(node) = self.node.take() {
            self.shared.guards.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!(node = %node.path(), "guard dropped; releasing in the background");
            self.shared
                .internals
                .framework()
                .delete_in_background(node.path());
        }
    }
}

impl InterProcessLock for InterProcessMutex {
    fn acquire(&self) -> BoxFuture<'_, Result<()>> {
        InterProcessMutex::acquire(self).boxed()
    }

    fn acquire_timeout(&self, timeout: Duration) -> BoxFuture<'_, Result<bool>> {
        InterProcessMutex::acquire_timeout(self, timeout).boxed()
    }

    fn release(&self) -> BoxFuture<'_, Result<()>> {
        InterProcessMutex::release(self).boxed()
    }

    fn is_acquired_in_this_process(&self) -> bool {
        InterProcessMutex::is_acquired_in_this_process(self)
    }

    fn path(&self) -> &str {
        InterProcessMutex::path(self)
    }

    fn participant_nodes(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        InterProcessMutex::participant_nodes(self).boxed()
    }
}

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
