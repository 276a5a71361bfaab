//! The guards of a read-write lock: [`ReadGuard`], [`WriteGuard`] and the
//! downgrade from one to the other.

use std::fmt;
use std::marker::PhantomData;

use zk_curator_framework::lock_internals::{until_held, Hold};
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

/// A guard of one half; see [`ReadGuard`] and [`WriteGuard`]. It is a
/// [`Hold`] (through `Deref`): [`fencing_token`](Hold::fencing_token),
/// [`is_valid`](Hold::is_valid), [`lost`](Hold::lost) and
/// [`fence`](Hold::fence) work on it directly.
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
        .field("node", &self.held.hold().path())
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

    /// The lock node's full path.
    pub fn node_path(&self) -> &str {
        self.held.hold().path()
    }

    /// Releases the hold and deletes the node (in the background if
    /// ZooKeeper cannot be reached right now).
    ///
    /// # Errors
    /// [`Error::LockLost`](crate::Error::LockLost) if the hold had been lost
    /// before the release (returned at once);
    /// [`Error::Closed`](crate::Error::Closed) if the framework is closed;
    /// errors no retry can fix, such as [`Error::NoAuth`](crate::Error::NoAuth)
    /// (only logged if the framework releases before the reply, see
    /// [`FrameworkBuilder::release_before_reply`](zk_curator_framework::FrameworkBuilder::release_before_reply)).
    ///
    /// # Cancel safety
    /// Once polled, a dropped release still deletes the node in the
    /// background.
    pub async fn release(self) -> Result<()> {
        self.held.release().await
    }
}

impl<H> std::ops::Deref for RwGuard<H> {
    type Target = Hold;

    fn deref(&self) -> &Hold {
        self.held.hold()
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
        let hold = until_held(|| shared.downgrade(&write_hold, None)).await?;
        let read = RwGuard::new(shared.held(Kind::Read, hold), shared.clone());
        self.held.release().await?;
        Ok(read)
    }
}
