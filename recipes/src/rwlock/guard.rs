//! The guards of a read-write lock: [`ReadGuard`], [`WriteGuard`] and the
//! downgrade from one to the other.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;

use zk_curator_framework::lock_internals::{Fence, FencingToken, Hold, LockLoss};
use zk_curator_framework::Result;

use super::half::{Half, ReadHalf, WriteHalf};
use super::Kind;
use crate::held::Held;

/// A hold of a [`ReadLock`](crate::ReadLock) owned by this value, not by a
/// task. Release it with [`RwGuard::release`]; dropping it releases in the
/// background.
pub type ReadGuard = RwGuard<ReadHalf>;

/// A hold of a [`WriteLock`](crate::WriteLock) owned by this value, not by a
/// task. Release it with [`RwGuard::release`]; dropping it releases in the
/// background. [`WriteGuard::downgrade`](RwGuard::downgrade) turns it into a
/// [`ReadGuard`] without letting a queued writer in between.
pub type WriteGuard = RwGuard<WriteHalf>;

/// A guard of one half; see [`ReadGuard`] and [`WriteGuard`].
#[must_use = "dropping the guard releases the lock"]
#[clippy::has_significant_drop]
pub struct RwGuard<H> {
    held: Held,
    shared: std::sync::Arc<super::Shared>,
    half: PhantomData<fn() -> H>,
}

impl<H: Half> fmt::Debug for RwGuard<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(if H::NAME == "read" {
            "ReadGuard"
        } else {
            "WriteGuard"
        })
        .field("node", &self.held.node_path())
        .finish()
    }
}

impl<H: Half> RwGuard<H> {
    pub(super) fn new(held: Held, shared: std::sync::Arc<super::Shared>) -> Self {
        RwGuard {
            held,
            shared,
            half: PhantomData,
        }
    }

    /// The fencing token of this hold (its node's creation zxid).
    pub fn fencing_token(&self) -> FencingToken {
        self.held.fencing_token()
    }

    /// The lock node's full path.
    pub fn node_path(&self) -> &str {
        self.held.node_path()
    }

    /// The hold itself.
    pub fn hold(&self) -> &Hold {
        self.held.hold()
    }

    /// Whether the hold can still be trusted (see
    /// [`MutexGuard::is_valid`](crate::MutexGuard::is_valid)); no I/O.
    pub fn is_valid(&self) -> bool {
        self.held.is_valid()
    }

    /// Completes when this hold can no longer be trusted, with the reason
    /// (error connection state, session replaced, node deleted, framework
    /// closed). Run it beside the protected work.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    pub fn lost(&self) -> impl Future<Output = LockLoss> + Send + 'static {
        self.held.lost()
    }

    /// A [`Fence`] over this hold: ZooKeeper writes through it succeed only
    /// while the hold is held.
    pub fn fence(&self) -> Fence {
        self.held.fence()
    }

    /// Releases the hold and deletes the node (in the background if
    /// ZooKeeper cannot be reached right now).
    ///
    /// # Errors
    /// [`Error::LockLost`](crate::Error::LockLost) if the hold had been lost
    /// before the release (returned at once);
    /// [`Error::Closed`](crate::Error::Closed) if the framework is closed;
    /// errors no retry can fix, such as [`Error::NoAuth`](crate::Error::NoAuth).
    ///
    /// # Cancel safety
    /// Once polled, a dropped release still deletes the node in the
    /// background.
    pub async fn release(self) -> Result<()> {
        self.held.release().await
    }
}

impl RwGuard<WriteHalf> {
    /// Takes a read hold level with this write hold (granted at once), then
    /// releases the write hold: readers may join, while writers queued behind
    /// this one stay queued until the returned read guard is released.
    ///
    /// # Errors
    /// [`Error::LockLost`](crate::Error::LockLost) if the write hold was lost
    /// (the write hold is released anyway);
    /// [`Error::Closed`](crate::Error::Closed) if the framework is closed;
    /// ZooKeeper errors that retrying could not overcome. On an error taking
    /// the read hold, the write hold is released as well.
    ///
    /// # Cancel safety
    /// Cancel safe in the sense that nothing leaks: dropping the future
    /// releases, in the background, whichever holds it had at that moment.
    pub async fn downgrade(self) -> Result<ReadGuard> {
        let shared = self.shared.clone();
        let write_hold = self.held.hold().clone();
        let read = loop {
            // Without a timeout only a hold or an error ends the wait.
            if let Some(hold) = shared.downgrade(&write_hold, None).await? {
                break RwGuard::new(shared.held(Kind::Read, hold), shared.clone());
            }
        };
        self.held.release().await?;
        Ok(read)
    }
}
