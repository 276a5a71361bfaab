//! [`Held`]: a hold owned by a value (a guard, a lease) rather than a task,
//! shared by every guard type of this crate.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use zk_curator_framework::lock_internals::{Fence, FencingToken, Hold, LockInternals, LockLoss};
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

    pub(crate) fn fencing_token(&self) -> FencingToken {
        self.hold.fencing_token()
    }

    pub(crate) fn node_path(&self) -> &str {
        self.hold.path()
    }

    pub(crate) fn is_valid(&self) -> bool {
        self.hold.is_valid()
    }

    pub(crate) fn lost(&self) -> impl Future<Output = LockLoss> + Send + 'static {
        self.hold.lost()
    }

    pub(crate) fn fence(&self) -> Fence {
        self.hold.fence()
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
        self.framework().delete_in_background(self.path());
    }
}
