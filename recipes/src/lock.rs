//! [`InterProcessLock`]: what every lock recipe offers.

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;

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
