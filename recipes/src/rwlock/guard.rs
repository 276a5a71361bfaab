//! The guards of a read-write lock: [`ReadGuard`], [`WriteGuard`], the
//! halves' methods that hand them out, and the downgrade from one to the
//! other. This module depends on `half`, never the reverse.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use zk_curator_framework::lock_internals::{until_held, Hold, Wait};
use zk_curator_framework::Result;

use super::half::{ReadLock, WriteLock};
use super::{HalfKind, Shared};
use crate::held::Held;

/// A hold of a [`ReadLock`] owned by this value, not by a task. Release it
/// with [`release`](Self::release); dropping it releases in the background.
///
/// It is a [`Hold`] (through `Deref`): [`fencing_token`](Hold::fencing_token),
/// [`is_valid`](Hold::is_valid), [`lost`](Hold::lost),
/// [`fence`](Hold::fence) and [`node`](Hold::node) work on it directly.
#[must_use = "dropping the guard releases the lock"]
#[clippy::has_significant_drop]
pub struct ReadGuard {
    held: Held,
    /// The lock's state, kept alive with the guard as a write guard's is.
    _shared: Arc<Shared>,
}

/// A hold of a [`WriteLock`] owned by this value, not by a task. Release it
/// with [`release`](Self::release); dropping it releases in the background.
/// [`downgrade`](Self::downgrade) turns it into a [`ReadGuard`] without
/// letting a queued writer in between.
///
/// It is a [`Hold`] (through `Deref`): [`fencing_token`](Hold::fencing_token),
/// [`is_valid`](Hold::is_valid), [`lost`](Hold::lost),
/// [`fence`](Hold::fence) and [`node`](Hold::node) work on it directly.
#[must_use = "dropping the guard releases the lock"]
#[clippy::has_significant_drop]
pub struct WriteGuard {
    held: Held,
    shared: Arc<Shared>,
}

impl WriteGuard {
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
        let hold = until_held(|| shared.downgrade(&write_hold, Wait::Forever)).await?;
        let read = ReadGuard::new(shared.held(HalfKind::Read, hold), shared.clone());
        self.held.release().await?;
        Ok(read)
    }
}

/// What a guard of either half is, written once for both: `$guard`, handed
/// out by `$half`'s guard API, for the half `$kind`.
macro_rules! guard_api {
    ($guard:ident, $half:ident, $kind:expr) => {
        impl fmt::Debug for $guard {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($guard))
                    .field("node", &self.held.hold().node().path())
                    .finish()
            }
        }

        impl std::ops::Deref for $guard {
            type Target = Hold;

            fn deref(&self) -> &Hold {
                self.held.hold()
            }
        }

        impl $guard {
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

        /// The guard API of a half, kept next to the guard it builds.
        impl $half {
            /// Waits for this half and returns a guard that owns the hold. Not
            /// reentrant: the guard is a participant of its own.
            ///
            /// # Errors
            /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) at once if the
            /// current task holds the task-bound hold of this half (a task-bound
            /// writer asking for a read guard gets a downgrade instead); otherwise
            /// as [`acquire`](Self::acquire).
            ///
            /// # Cancel safety
            /// Cancel safe, as [`acquire`](Self::acquire).
            pub async fn lock(&self) -> Result<$guard> {
                let held = until_held(|| self.shared.lock($kind, Wait::Forever)).await?;
                Ok($guard::new(held, self.shared.clone()))
            }

            /// Like [`lock`](Self::lock), waiting at most `timeout`; `None` on
            /// timeout. A zero timeout is [`try_lock`](Self::try_lock).
            ///
            /// # Errors
            /// As [`acquire`](Self::acquire).
            ///
            /// # Cancel safety
            /// Cancel safe, as [`acquire`](Self::acquire).
            pub async fn try_lock_for(&self, timeout: Duration) -> Result<Option<$guard>> {
                self.lock_with(Wait::timeout(timeout)).await
            }

            /// A guard if this half can be had right now (one round trip; otherwise
            /// nothing is left behind and this returns `None`).
            ///
            /// # Errors
            /// As [`acquire`](Self::acquire).
            ///
            /// # Cancel safety
            /// Cancel safe, as [`acquire`](Self::acquire).
            pub async fn try_lock(&self) -> Result<Option<$guard>> {
                self.lock_with(Wait::Try).await
            }

            async fn lock_with(&self, wait: Wait) -> Result<Option<$guard>> {
                Ok(self
                    .shared
                    .lock($kind, wait)
                    .await?
                    .map(|held| $guard::new(held, self.shared.clone())))
            }
        }
    };
}

guard_api!(ReadGuard, ReadLock, HalfKind::Read);
guard_api!(WriteGuard, WriteLock, HalfKind::Write);

impl ReadGuard {
    fn new(held: Held, shared: Arc<Shared>) -> Self {
        ReadGuard {
            held,
            _shared: shared,
        }
    }
}

impl WriteGuard {
    fn new(held: Held, shared: Arc<Shared>) -> Self {
        WriteGuard { held, shared }
    }
}
