//! [`Held`]: a hold owned by a value (a guard, a lease) rather than a task,
//! shared by every guard type of this crate.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use zk_curator_framework::lock_internals::{Hold, LockInternals, LockLoss};
use zk_curator_framework::Result;

use crate::reentrant::ReentrantHold;

/// A granted hold that is given back when released, or in the background
/// when dropped. Counts itself in `alive` while it lives.
pub(crate) struct Held {
    internals: LockInternals,
    hold: Hold,
    alive: Option<Arc<AtomicUsize>>,
    released: bool,
}

impl Held {
    pub(crate) fn new(
        internals: LockInternals,
        hold: Hold,
        alive: Option<Arc<AtomicUsize>>,
    ) -> Self {
        if let Some(alive) = &alive {
            alive.fetch_add(1, Ordering::AcqRel);
        }
        Held {
            internals,
            hold,
            alive,
            released: false,
        }
    }

    pub(crate) fn hold(&self) -> &Hold {
        &self.hold
    }

    fn finish(&mut self) {
        self.released = true;
        if let Some(alive) = &self.alive {
            alive.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Gives the hold back (see [`LockInternals::release`]).
    pub(crate) async fn release(mut self) -> Result<()> {
        self.finish();
        self.internals.release(&self.hold).await
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.released {
            self.finish();
            tracing::debug!(node = %self.hold.path(), "hold dropped; releasing in the background");
            ReentrantHold::forget(self.hold.clone());
        }
    }
}

impl ReentrantHold for Hold {
    fn check(&self) -> std::result::Result<(), LockLoss> {
        Hold::check(self)
    }

    fn describe(&self) -> String {
        self.path().to_owned()
    }

    fn forget(self) {
        self.release_in_background();
    }
}
