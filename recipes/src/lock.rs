//! [`InterProcessLock`]: what every lock recipe offers.

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt as _;
use zk_curator_framework::lock_internals::{Fence, LockLoss, Wait};

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
///
/// An implementation gives [`acquire_with`](Self::acquire_with), which takes
/// the whole [`Wait`] (a try, a deadline, or no bound); `acquire`,
/// `acquire_timeout` and `try_acquire` are built on it, so a deadline is
/// carried as it is from one lock to the next (a multi-lock hands its one
/// deadline to every member) and never turned back into a duration.
pub trait InterProcessLock: Send + Sync + fmt::Debug {
    /// Acquires within `wait`: `true` once held, `false` when a
    /// [`Wait::Try`] found the lock taken or a [`Wait::Until`] passed first
    /// (with nothing left behind). [`Wait::Forever`] returns `true` or an
    /// error.
    ///
    /// # Errors
    /// As the recipe's own `acquire`.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped acquire leaves no node and changes no count.
    fn acquire_with(&self, wait: Wait) -> BoxFuture<'_, Result<bool>>;

    /// Waits until the lock is held: `acquire_with(Wait::Forever)`.
    ///
    /// # Errors
    /// As the recipe's own `acquire`.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire_with`](Self::acquire_with).
    fn acquire(&self) -> BoxFuture<'_, Result<()>> {
        self.acquire_with(Wait::Forever)
            .map(|held| held.map(drop))
            .boxed()
    }

    /// Waits at most `timeout`; `false` if the lock could not be had in
    /// time: `acquire_with(Wait::timeout(timeout))` (a zero timeout is a
    /// try).
    ///
    /// # Errors
    /// As the recipe's own `acquire_timeout`.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire_with`](Self::acquire_with).
    fn acquire_timeout(&self, timeout: Duration) -> BoxFuture<'_, Result<bool>> {
        self.acquire_with(Wait::timeout(timeout))
    }

    /// Takes the lock only if it is free right now (one round trip, no
    /// waiting); `false` otherwise, with nothing left behind:
    /// `acquire_with(Wait::Try)`.
    ///
    /// # Errors
    /// As the recipe's own `try_acquire`.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire_with`](Self::acquire_with).
    fn try_acquire(&self) -> BoxFuture<'_, Result<bool>> {
        self.acquire_with(Wait::Try)
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

    /// The paths of the locks this takes, in the order it takes them: the
    /// lock's own path for a single lock (a mutex, a half of a read-write
    /// lock), its members' for an
    /// [`InterProcessMultiLock`](crate::InterProcessMultiLock), which has
    /// no single path. Never empty: a multi-lock orders its members by the
    /// first.
    fn paths(&self) -> Vec<&str>;

    /// The full paths of all participant nodes, holders first.
    ///
    /// # Errors
    /// ZooKeeper errors retrying could not overcome.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    fn participant_nodes(&self) -> BoxFuture<'_, Result<Vec<String>>>;
}

/// Implements [`InterProcessLock`] for a recipe whose inherent methods
/// carry the trait's names: each trait method calls the recipe's own
/// method of the same name (`acquire_with`, `loss`, `lost`, `fence`,
/// `release`, `is_acquired_in_this_process`, `participant_nodes`; private
/// ones will do, as the macro is called in the recipe's own module) and
/// boxes the futures the trait returns boxed; `paths` is the recipe's one
/// `path`, or its own `paths` for a lock of several. The forwarding is
/// written here once, for every recipe.
///
/// ```text
/// impl_inter_process_lock!(InterProcessMutex);
/// impl_inter_process_lock!(ReadLock);
/// // `lost` returns a `BoxFuture` already: not boxed twice; it has
/// // `paths`, not a `path`.
/// impl_inter_process_lock!(InterProcessMultiLock, lost: already boxed, paths: many);
/// ```
///
/// A recipe without one of those methods would call the trait's method
/// from itself; rustc's `unconditional_recursion` lint says so (an error
/// under CI's `-D warnings`).
macro_rules! impl_inter_process_lock {
    (@impl $recipe:ty, $box_lost:path, $paths:ident) => {
        impl $crate::InterProcessLock for $recipe {
            fn acquire_with(
                &self,
                wait: $crate::Wait,
            ) -> ::futures::future::BoxFuture<'_, $crate::Result<bool>> {
                ::futures::FutureExt::boxed(<$recipe>::acquire_with(self, wait))
            }

            fn loss(&self) -> Option<$crate::LockLoss> {
                <$recipe>::loss(self)
            }

            fn lost(&self) -> ::futures::future::BoxFuture<'static, $crate::LockLoss> {
                $box_lost(<$recipe>::lost(self))
            }

            fn fence(&self) -> $crate::Result<$crate::Fence> {
                <$recipe>::fence(self)
            }

            fn release(&self) -> ::futures::future::BoxFuture<'_, $crate::Result<()>> {
                ::futures::FutureExt::boxed(<$recipe>::release(self))
            }

            fn is_acquired_in_this_process(&self) -> bool {
                <$recipe>::is_acquired_in_this_process(self)
            }

            fn paths(&self) -> Vec<&str> {
                $crate::lock::IntoPaths::into_paths(<$recipe>::$paths(self))
            }

            fn participant_nodes(
                &self,
            ) -> ::futures::future::BoxFuture<'_, $crate::Result<Vec<String>>> {
                ::futures::FutureExt::boxed(<$recipe>::participant_nodes(self))
            }
        }
    };
    ($recipe:ty) => {
        $crate::lock::impl_inter_process_lock!(@impl $recipe, ::futures::FutureExt::boxed, path);
    };
    ($recipe:ty, lost: already boxed, paths: many) => {
        $crate::lock::impl_inter_process_lock!(@impl $recipe, ::std::convert::identity, paths);
    };
}
pub(crate) use impl_inter_process_lock;

/// A recipe's `path` (one) or `paths` (several), as
/// [`InterProcessLock::paths`] answers.
pub(crate) trait IntoPaths<'a> {
    fn into_paths(self) -> Vec<&'a str>;
}

impl<'a> IntoPaths<'a> for &'a str {
    fn into_paths(self) -> Vec<&'a str> {
        vec![self]
    }
}

impl<'a> IntoPaths<'a> for Vec<&'a str> {
    fn into_paths(self) -> Vec<&'a str> {
        self
    }
}
