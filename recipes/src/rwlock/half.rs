//! The two halves of a read-write lock, [`ReadLock`] and [`WriteLock`]:
//! two types with one API, written once here (`half_api!`) and told apart
//! by the [`HalfKind`] each passes to the lock's shared state.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use zk_curator_framework::lock_internals::{
    AcquiredNode, Fence, FencingToken, Hold, LockLoss, Revocation, RevocationListener, Wait,
};
use zk_curator_framework::Result;

use super::{HalfKind, Shared};
use crate::lock::impl_inter_process_lock;
use crate::mutex::{fence_of, lost_of};

/// The shared half of an [`InterProcessReadWriteLock`](crate::InterProcessReadWriteLock):
/// held by many at once, as long as no writer is ahead in the queue.
///
/// Reading while holding the write lock (same owner) is a downgrade: granted
/// at once, level with the write node; this holds for a guard taken with
/// [`lock`](ReadLock::lock) by that owner too. Readers behind a queued
/// writer wait for it (no writer starvation); a task that already holds the
/// read lock re-enters without queueing, but a *guard* is a new participant
/// and queues behind any waiting writer (or, with the framework's local
/// queue, joins the read node this process has waiting, if there is one).
#[derive(Clone)]
pub struct ReadLock {
    pub(super) shared: Arc<Shared>,
}

/// The exclusive half of an [`InterProcessReadWriteLock`](crate::InterProcessReadWriteLock).
///
/// An owner that holds only the read lock (task-bound, or a
/// [`ReadGuard`](crate::ReadGuard) it took) is refused the write lock with
/// [`Error::UpgradeNotSupported`](crate::Error::UpgradeNotSupported) at once
/// (an upgrade would wait behind its own read node forever). A guard counts
/// for the task that took it, even once moved to another task: ask from
/// the task that holds it, or release it first.
#[derive(Clone)]
pub struct WriteLock {
    pub(super) shared: Arc<Shared>,
}

/// The API of a half, `$half`, written once for both; `$kind` says which
/// half it is. (Its guard API is in `guard`.)
macro_rules! half_api {
    ($half:ident, $kind:expr) => {
        impl fmt::Debug for $half {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let side = self.side();
                f.debug_struct(stringify!($half))
                    .field("path", &self.path())
                    .field("holders", &side.owners.holders())
                    .field("guards", &side.guards.alive())
                    .finish()
            }
        }

        impl $half {
            pub(super) fn new(shared: Arc<Shared>) -> Self {
                $half { shared }
            }

            fn side(&self) -> &super::Side {
                self.shared.side($kind)
            }

            /// The lock's path.
            pub fn path(&self) -> &str {
                self.shared.path()
            }

            /// Waits until the current owner holds this half (or holds it once more).
            ///
            /// # Errors
            /// [`Error::LockLost`](crate::Error::LockLost) when the owner's hold was
            /// lost (the stale hold is forgotten; acquire again);
            /// [`Error::UpgradeNotSupported`](crate::Error::UpgradeNotSupported) for
            /// the write half while the owner holds only the read half (task-bound
            /// or a guard it took);
            /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) at once while
            /// the owner holds a guard it took of this half, or a write guard (for
            /// the read half; use `WriteGuard::downgrade`);
            /// [`Error::Closed`](crate::Error::Closed) if the framework is closed;
            /// [`Error::Timeout`](crate::Error::Timeout) if no session could be had
            /// within the connection timeout; ZooKeeper errors that retrying could
            /// not overcome (e.g. [`Error::NoAuth`](crate::Error::NoAuth)).
            ///
            /// # Cancel safety
            /// Cancel safe: dropping the future (in `select!`, under `timeout`, by
            /// aborting the task) deletes our waiting node in the background and
            /// leaves the owner's count unchanged.
            pub async fn acquire(&self) -> Result<()> {
                self.shared.acquire($kind, Wait::Forever).await.map(|_| ())
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
                self.shared.acquire($kind, Wait::timeout(timeout)).await
            }

            /// Takes this half only if it can be had right now: one round trip, and
            /// if it cannot, our node is deleted again before this returns `false`.
            ///
            /// # Errors
            /// As [`acquire`](Self::acquire).
            ///
            /// # Cancel safety
            /// Cancel safe, as [`acquire`](Self::acquire).
            pub async fn try_acquire(&self) -> Result<bool> {
                self.shared.acquire($kind, Wait::Try).await
            }

            /// The one acquire of this half, within `wait`:
            /// [`InterProcessLock::acquire_with`](crate::InterProcessLock::acquire_with).
            fn acquire_with(&self, wait: Wait) -> impl Future<Output = Result<bool>> + '_ {
                self.shared.acquire($kind, wait)
            }

            /// Releases one hold of the current owner; the last release deletes the
            /// node (in the background if ZooKeeper cannot be reached right now).
            ///
            /// # Errors
            /// [`Error::NotOwner`](crate::Error::NotOwner) if the current owner does
            /// not hold this half (nothing changes);
            /// [`Error::LockLost`](crate::Error::LockLost) if the last hold had been
            /// lost before (returned at once); [`Error::Closed`](crate::Error::Closed)
            /// if the framework is closed.
            ///
            /// # Cancel safety
            /// The count changes at the first poll; a dropped release of the last
            /// hold still deletes the node in the background.
            pub async fn release(&self) -> Result<()> {
                self.shared.release($kind).await
            }

            /// Whether any owner of this process holds this half through this lock
            /// (or one of its guards is alive).
            pub fn is_acquired_in_this_process(&self) -> bool {
                let side = self.side();
                side.owners.holders() > 0 || side.guards.alive() > 0
            }

            /// Makes every later acquire of this half revocable: a
            /// [`Revoker`](zk_curator_framework::lock_internals::Revoker) writing a
            /// revocation request into its node calls `listener` with the node's
            /// path, on a task of its own (see
            /// [`InterProcessMutex::make_revocable`](crate::InterProcessMutex::make_revocable)).
            pub fn make_revocable(&self, listener: impl RevocationListener) {
                self.side().set_revocation(Some(Revocation::new(listener)));
            }

            /// Stops making later acquires revocable.
            pub fn clear_revocable(&self) {
                self.side().set_revocation(None);
            }

            /// Whether the current owner (task, or thread outside a task) holds this
            /// half (guards do not count).
            pub fn is_owned_by_current_task(&self) -> bool {
                self.side().owners.is_held_by_current()
            }

            /// The fencing token of the current owner's hold, if it has one.
            pub fn fencing_token(&self) -> Option<FencingToken> {
                self.side().owners.with_current(Hold::fencing_token)
            }

            /// Says the current owner's hold of this half is making progress (see
            /// [`Hold::progress`]): cheap, synchronous, no I/O; nothing if it holds
            /// nothing.
            pub fn progress(&self) {
                self.side().owners.with_current(Hold::progress);
            }

            /// The node of the current owner's hold, if it has one (its
            /// [`path`](AcquiredNode::path) is the node's path).
            pub fn node(&self) -> Option<AcquiredNode> {
                self.side().owners.with_current(|h| h.node().clone())
            }

            /// Why the current owner's hold of this half can no longer be trusted,
            /// `None` while it can ([`LockLoss::NotHeld`] without a hold): what
            /// [`InterProcessLock::loss`](crate::InterProcessLock::loss) answers.
            fn loss(&self) -> Option<LockLoss> {
                self.side()
                    .owners
                    .with_current(Hold::loss)
                    .unwrap_or(Some(LockLoss::NotHeld))
            }

            /// Whether the current owner holds this half and the hold can still be
            /// trusted; no I/O.
            pub fn is_valid(&self) -> bool {
                self.side()
                    .owners
                    .with_current(Hold::is_valid)
                    .unwrap_or(false)
            }

            /// Completes when the current owner's hold can no longer be trusted
            /// ([`LockLoss::NotHeld`] at once without one). Looked up now.
            ///
            /// # Cancel safety
            /// Cancel safe: it only observes.
            pub fn lost(&self) -> impl Future<Output = LockLoss> + Send + 'static {
                lost_of(self.side().owners.with_current(Hold::clone))
            }

            /// A [`Fence`] over the current owner's hold.
            ///
            /// # Errors
            /// [`Error::NotOwner`](crate::Error::NotOwner) without a hold;
            /// [`Error::LockLost`](crate::Error::LockLost) if it is known lost.
            pub fn fence(&self) -> Result<Fence> {
                fence_of(self.side().owners.with_current(Hold::clone))
            }

            /// The full paths of this half's participants only, in queue order
            /// (readers and writers interleave in the queue; the other half's nodes
            /// are left out).
            ///
            /// # Errors
            /// ZooKeeper errors that retrying could not overcome;
            /// [`Error::Closed`](crate::Error::Closed).
            ///
            /// # Cancel safety
            /// Cancel safe: it only reads.
            pub async fn participant_nodes(&self) -> Result<Vec<String>> {
                self.shared.participant_nodes($kind).await
            }
        }

        impl_inter_process_lock!($half);
    };
}

half_api!(ReadLock, HalfKind::Read);
half_api!(WriteLock, HalfKind::Write);
