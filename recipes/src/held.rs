//! [`Held`]: a hold owned by a value (a guard, a lease) rather than a task,
//! shared by every guard type of this crate.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use zk_curator_framework::lock_internals::{Hold, LockInternals, LockLoss};
use zk_curator_framework::{Error, Result};

use crate::owner::Owner;
use crate::reentrant::ReentrantHold;

/// The guards of one lock (or one half of a read-write lock) alive now, and
/// the owner (task) that took each: a task asking for a task-bound hold
/// while a guard it took is alive would wait for itself.
#[derive(Debug, Default)]
pub(crate) struct Guards {
    alive: AtomicUsize,
    by_owner: DashMap<Owner, usize>,
}

impl Guards {
    /// How many guards are alive.
    pub(crate) fn alive(&self) -> usize {
        self.alive.load(Ordering::Acquire)
    }

    /// Whether the current owner took one of the guards alive.
    pub(crate) fn taken_by_current(&self) -> bool {
        self.by_owner.contains_key(&Owner::current())
    }

    /// Refuses a request of the current owner that would wait for a guard it
    /// took itself.
    ///
    /// # Errors
    /// [`Error::WouldDeadlock`] naming `path`.
    pub(crate) fn refuse_own(&self, path: &str) -> Result<()> {
        if self.taken_by_current() {
            tracing::debug!(%path, "refused: the task holds a guard of this lock");
            return Err(would_deadlock(path));
        }
        Ok(())
    }

    fn enter(&self, owner: Owner) {
        self.alive.fetch_add(1, Ordering::AcqRel);
        *self.by_owner.entry(owner).or_insert(0) += 1;
    }

    fn leave(&self, owner: Owner) {
        self.alive.fetch_sub(1, Ordering::AcqRel);
        self.by_owner.remove_if_mut(&owner, |_, count| {
            *count = count.saturating_sub(1);
            *count == 0
        });
    }
}

/// [`Error::WouldDeadlock`] for the lock at `path`.
pub(crate) fn would_deadlock(path: &str) -> Error {
    Error::WouldDeadlock {
        path: path.to_owned(),
    }
}

/// A granted hold that is given back when released, or in the background
/// when dropped. Counts itself in `guards`, for the owner that took it,
/// while it lives.
pub(crate) struct Held {
    internals: LockInternals,
    hold: Hold,
    guards: Option<(Arc<Guards>, Owner)>,
    released: bool,
}

impl Held {
    pub(crate) fn new(internals: LockInternals, hold: Hold, guards: Option<Arc<Guards>>) -> Self {
        let guards = guards.map(|guards| {
            let owner = Owner::current();
            guards.enter(owner);
            (guards, owner)
        });
        Held {
            internals,
            hold,
            guards,
            released: false,
        }
    }

    pub(crate) fn hold(&self) -> &Hold {
        &self.hold
    }

    fn finish(&mut self) {
        self.released = true;
        if let Some((guards, owner)) = &self.guards {
            guards.leave(*owner);
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
            tracing::debug!(node = %self.hold.node().path(), "hold dropped; releasing in the background");
            ReentrantHold::forget(self.hold.clone());
        }
    }
}

impl ReentrantHold for Hold {
    fn check(&self) -> std::result::Result<(), LockLoss> {
        Hold::check(self)
    }

    fn describe(&self) -> String {
        self.node().path().to_owned()
    }

    fn forget(self) {
        self.release_in_background();
    }
}
