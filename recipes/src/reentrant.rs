//! [`Reentrant`]: the owner map behind every reentrant lock of this crate
//! (the mutex, both read-write halves and the multi-lock).
//!
//! # The rules, in one place
//!
//! * **One hold per owner.** The first acquire of an [`Owner`] takes the
//!   lock; every later one, while the hold lasts, only counts. Futures of
//!   one task acquiring concurrently (`join!`, `select!`) are one owner: the
//!   later ones wait for the first to finish, then count on its hold (or,
//!   if it failed or was dropped, take the lock themselves). They never
//!   queue behind their own owner's node.
//! * **Re-entry checks the hold first.** A hold whose session ended, whose
//!   node was seen deleted, or whose loss was signalled is not counted on:
//!   the stale hold is forgotten (its node, if any is left, deleted in the
//!   background) and the acquire fails with [`Error::LockLost`]. A task can
//!   never be told "you hold it" while another process may.
//! * **Release counts down**; the last release hands the hold back to the
//!   caller to give up. A release by an owner without a hold is
//!   [`Error::NotOwner`].
//! * **Cancel safety.** No await sits between a grant and its insertion in
//!   the map, and a dropped first acquire clears its "acquiring" mark, so
//!   no count changes and no hold is lost.

use std::future::Future;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use futures::FutureExt;
use tokio::sync::watch;
use zk_curator_framework::lock_internals::{LockLoss, Wait};
use zk_curator_framework::{Error, Result};

use crate::owner::Owner;

/// What the engine needs to know of a hold.
pub(crate) trait ReentrantHold: Send + Sync + 'static {
    /// Whether the hold can still be trusted (no I/O).
    fn check(&self) -> std::result::Result<(), LockLoss>;

    /// A short description for errors and logs (the node's path).
    fn describe(&self) -> String;

    /// Gives up a hold that is no longer trusted, without waiting: whatever
    /// is left of it in ZooKeeper is deleted in the background.
    fn forget(self);
}

enum Slot<H> {
    /// The owner's first acquire is under way; later ones wait for it.
    Acquiring(watch::Receiver<()>),
    Held {
        hold: H,
        count: u64,
    },
}

/// The owner map of one reentrant lock.
pub(crate) struct Reentrant<H> {
    owners: DashMap<Owner, Slot<H>>,
}

impl<H: ReentrantHold> Reentrant<H> {
    pub(crate) fn new() -> Self {
        Reentrant {
            owners: DashMap::new(),
        }
    }

    /// Acquires for the current owner: counts on its valid hold, waits for
    /// its acquire already under way, or runs `take` with `wait` (passed on
    /// unchanged). `Ok(false)` when the wait ends first; a [`Wait::Try`]
    /// does not wait for the owner's acquire under way.
    pub(crate) async fn acquire<F, Fut>(&self, wait: Wait, take: F) -> Result<bool>
    where
        F: FnOnce(Wait) -> Fut,
        Fut: Future<Output = Result<Option<H>>>,
    {
        let owner = Owner::current();
        let done = loop {
            let mut pending = match self.owners.entry(owner) {
                Entry::Occupied(mut entry) => match entry.get_mut() {
                    Slot::Held { hold, count } => match hold.check() {
                        Ok(()) => {
                            *count += 1;
                            tracing::debug!(?owner, count = *count, "reentrant acquire");
                            return Ok(true);
                        }
                        Err(loss) => {
                            let Slot::Held { hold, .. } = entry.remove() else {
                                return Err(Error::NotOwner);
                            };
                            let what = hold.describe();
                            tracing::warn!(?owner, hold = %what, %loss, "re-entry refused: the hold was lost");
                            hold.forget();
                            return Err(Error::lock_lost(what, loss));
                        }
                    },
                    Slot::Acquiring(done) => done.clone(),
                },
                Entry::Vacant(entry) => {
                    let (done, acquiring) = watch::channel(());
                    entry.insert(Slot::Acquiring(acquiring));
                    break done;
                }
            };
            // A sibling future of the same owner is acquiring: wait for its
            // outcome (the sender is dropped when it ends, either way).
            let finished = async { while pending.changed().await.is_ok() {} };
            let ended = match wait {
                Wait::Try => finished.now_or_never(),
                Wait::Until(_) | Wait::Forever => wait.bound(finished).await,
            };
            if ended.is_none() {
                return Ok(false);
            }
        };
        let mark = AcquiringMark {
            owners: &self.owners,
            owner,
            _done: done,
        };
        let granted = take(wait).await?;
        // No await from here on: the grant goes into the map at once.
        match granted {
            Some(hold) => {
                self.owners.insert(owner, Slot::Held { hold, count: 1 });
                // The slot holds the grant now, so the mark leaves it; its
                // drop wakes the owner's waiting siblings, who count on it.
                drop(mark);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Counts one release of the current owner; the last one removes the
    /// hold and returns it for the caller to give up.
    ///
    /// # Errors
    /// [`Error::NotOwner`] when the current owner has no hold (nothing
    /// changes).
    pub(crate) fn release(&self) -> Result<Option<H>> {
        let owner = Owner::current();
        match self.owners.entry(owner) {
            Entry::Occupied(mut entry) => match entry.get_mut() {
                Slot::Held { count, .. } if *count > 1 => {
                    *count -= 1;
                    tracing::debug!(?owner, count = *count, "reentrant release");
                    Ok(None)
                }
                Slot::Held { .. } => match entry.remove() {
                    Slot::Held { hold, .. } => Ok(Some(hold)),
                    Slot::Acquiring(_) => Err(Error::NotOwner),
                },
                Slot::Acquiring(_) => Err(Error::NotOwner),
            },
            Entry::Vacant(_) => Err(Error::NotOwner),
        }
    }

    /// Runs `f` on the current owner's hold, if it has one.
    pub(crate) fn with_current<T>(&self, f: impl FnOnce(&H) -> T) -> Option<T> {
        self.with_owner(Owner::current(), f)
    }

    /// Runs `f` on `owner`'s hold, if it has one.
    pub(crate) fn with_owner<T>(&self, owner: Owner, f: impl FnOnce(&H) -> T) -> Option<T> {
        match self.owners.get(&owner)?.value() {
            Slot::Held { hold, .. } => Some(f(hold)),
            Slot::Acquiring(_) => None,
        }
    }

    /// Whether the current owner has a hold.
    pub(crate) fn is_held_by_current(&self) -> bool {
        self.with_current(|_| ()).is_some()
    }

    /// How many owners have a hold.
    pub(crate) fn holders(&self) -> usize {
        self.owners
            .iter()
            .filter(|slot| matches!(slot.value(), Slot::Held { .. }))
            .count()
    }

    /// How many times the current owner holds (0 without a hold).
    pub(crate) fn count(&self) -> u64 {
        match self.owners.get(&Owner::current()).as_deref() {
            Some(Slot::Held { count, .. }) => *count,
            _ => 0,
        }
    }
}

/// Removes an owner's "acquiring" mark if its first acquire ends without a
/// grant (an error, a timeout or a dropped future); a slot that holds a
/// grant is left alone. Dropping `_done` wakes the owner's waiting siblings
/// either way.
struct AcquiringMark<'a, H> {
    owners: &'a DashMap<Owner, Slot<H>>,
    owner: Owner,
    _done: watch::Sender<()>,
}

impl<H> Drop for AcquiringMark<'_, H> {
    fn drop(&mut self) {
        self.owners
            .remove_if(&self.owner, |_, slot| matches!(slot, Slot::Acquiring(_)));
    }
}

#[cfg(test)]
mod tests;
