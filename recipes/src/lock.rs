//! [`InterProcessLock`]: what every lock recipe offers.

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use zk_curator_framework::lock_internals::{Fence, LockLoss};

use crate::Result;

/// The operations shared by every lock recipe (Curator's
/// `InterProcessLock`), object safe so that different locks can be held
/// together as `Box<dyn InterProcessLock>`.
///
/// Ownership follows each recipe's own rule: for [`InterProcessMutex`] the
/// owner is the calling task, so `release` must come from the task that
/// acquired.
///
/// [`InterProcessMutex`]: crate::InterProcessMutex
pub trait InterProcessLock: Send + Sync + fmt::Debug {
    /// Waits until the lock is held.
    ///
    /// # Errors
    /// As the recipe's own `acquire`.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped acquire leaves no node and changes no count.
    fn acquire(&self) -> BoxFuture<'_, Result<()>>;

    /// Waits at most `timeout`; `false` if the lock could not be had in time.
    ///
    /// # Errors
    /// As the recipe's own `acquire_timeout`.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`InterProcessLock::acquire`].
    fn acquire_timeout(&self, timeout: Duration) -> BoxFuture<'_, Result<bool>>;

    /// Takes the lock only if it is free right now (one round trip, no
    /// waiting); `false` otherwise, with nothing left behind. Defaults to
    /// `acquire_timeout(Duration::ZERO)`, which every recipe of this crate
    /// treats as a try.
    ///
    /// # Errors
    /// As the recipe's own `try_acquire`.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`InterProcessLock::acquire`].
    fn try_acquire(&self) -> BoxFuture<'_, Result<bool>> {
        self.acquire_timeout(Duration::ZERO)
    }

    /// Why the caller's hold (by the recipe's ownership rule) can no longer
    /// be trusted, or `None` while it can ([`LockLoss::NotHeld`] without a
    /// hold). No I/O.
    fn loss(&self) -> Option<LockLoss>;

    /// Whether the caller's hold exists and can still be trusted. No I/O.
    fn is_valid(&self) -> bool {
        self.loss().is_none()
    }

    /// Completes when the caller's hold can no longer be trusted
    /// ([`LockLoss::NotHeld`] at once without one). The hold is looked up
    /// when this is called.
    fn lost(&self) -> BoxFuture<'static, LockLoss>;

    /// A fence over the caller's hold (see [`Fence`]).
    ///
    /// # Errors
    /// [`Error::NotOwner`](crate::Error::NotOwner) without a hold;
    /// [`Error::LockLost`](crate::Error::LockLost) if it is known to be lost.
    fn fence(&self) -> Result<Fence>;

    /// Releases one hold of the lock.
    ///
    /// # Errors
    /// As the recipe's own `release` (for example a release by a non-owner).
    ///
    /// # Cancel safety
    /// Once polled, a dropped release still completes in the background.
    fn release(&self) -> BoxFuture<'_, Result<()>>;

    /// Whether any owner in this process holds the lock through this instance.
    fn is_acquired_in_this_process(&self) -> bool;

    /// The lock's path.
    fn path(&self) -> &str;

    /// The full paths of all participant nodes, holders first.
    ///
    /// # Errors
    /// ZooKeeper errors retrying could not overcome.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    fn participant_nodes(&self) -> BoxFuture<'_, Result<Vec<String>>>;
}
