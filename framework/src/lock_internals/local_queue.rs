//! The in-process queue in front of ZooKeeper: within one [`Framework`],
//! acquires of one lock wait their turn here, first come first served, and
//! only a bounded number of them (the driver's
//! [`local_turns`](super::LockInternalsDriver::local_turns), one for a mutex)
//! have a participant node at a time. The server's queue, and so every
//! listing and every waiter's memory, grows with the number of sessions, not
//! with the number of waiting tasks.
//!
//! A turn is a permit of a fair [`tokio::sync::Semaphore`], one semaphore per
//! lock path, lock name and turn count. The permit travels with the
//! [`Hold`](super::Hold) it led to and is given back when the hold is
//! released (right after the delete is sent, so the next task's create
//! follows it on the wire) or dropped. A semaphore nobody holds or waits for
//! is forgotten, so a process that touches many lock paths keeps no state
//! for idle ones.
//!
//! A turn given back may carry a parcel `P` for the task that gets the turn
//! next ([`HandOver::hand_over`]): the cohort hand-off passes the held node
//! this way (see [`cohort`](super::cohort)). A parcel is only left while a
//! task waits for the turn; it goes to whoever gets the turn next, a waiter
//! or a try, and if the last waiter leaves without it, the parcel is
//! dropped (its own `Drop` cleans up).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use dashmap::DashMap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A lock path, lock name and number of turns.
type Key = (Arc<str>, Arc<str>, u32);

/// The turns of one lock, how many tasks wait for one, and the parcels left
/// for the next of them.
struct Gate<P> {
    turns: Arc<Semaphore>,
    waiting: AtomicUsize,
    /// Changed only with `waiting` read or changed under the same lock, so
    /// that a parcel is never left with nobody waiting for it.
    parcels: Mutex<Vec<P>>,
}

impl<P> Gate<P> {
    fn parcels(&self) -> MutexGuard<'_, Vec<P>> {
        self.parcels.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Every lock's turns of one framework.
pub(crate) struct LocalQueues<P = ()> {
    gates: DashMap<Key, Arc<Gate<P>>>,
}

impl<P> Default for LocalQueues<P> {
    fn default() -> Self {
        LocalQueues {
            gates: DashMap::new(),
        }
    }
}

impl<P> fmt::Debug for LocalQueues<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalQueues")
            .field("locks", &self.gates.len())
            .finish()
    }
}

impl<P> LocalQueues<P> {
    fn gate(&self, key: &Key) -> Arc<Gate<P>> {
        self.gates
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(Gate {
                    turns: Arc::new(Semaphore::new(key.2 as usize)),
                    waiting: AtomicUsize::new(0),
                    parcels: Mutex::new(Vec::new()),
                })
            })
            .clone()
    }

    /// Waits for a turn (first come, first served), with a parcel if the
    /// turn was handed over with one.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped wait leaves the queue and takes no turn (nor
    /// parcel).
    pub(crate) async fn turn(self: &Arc<Self>, key: Key) -> LocalTurn<P> {
        let waiting = Waiting::new(self, &key, self.gate(&key));
        let permit = match waiting.turns() {
            Some(turns) => turns.acquire_owned().await.ok(),
            None => None,
        };
        let (gate, parcel) = waiting.finish();
        let mut turn = self.wrap(key, gate, permit);
        turn.parcel = parcel.map(Box::new);
        turn
    }

    /// A turn if one is free now, with a parcel if one was left.
    pub(crate) fn try_turn(self: &Arc<Self>, key: Key) -> Option<LocalTurn<P>> {
        let gate = self.gate(&key);
        match gate.turns.clone().try_acquire_owned() {
            Ok(permit) => {
                let parcel = gate.parcels().pop();
                let mut turn = self.wrap(key, Some(gate), Some(permit));
                turn.parcel = parcel.map(Box::new);
                Some(turn)
            }
            Err(_) => {
                drop(gate);
                self.forget_if_idle(&key);
                None
            }
        }
    }

    fn wrap(
        self: &Arc<Self>,
        key: Key,
        gate: Option<Arc<Gate<P>>>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> LocalTurn<P> {
        LocalTurn {
            permit,
            gate,
            key,
            queues: Arc::downgrade(self),
            parcel: None,
        }
    }

    /// How many acquires wait for a turn on the lock at `path` (any lock
    /// name).
    pub(crate) fn waiting(&self, path: &str) -> usize {
        self.gates
            .iter()
            .filter(|entry| &*entry.key().0 == path)
            .map(|entry| entry.value().waiting.load(Ordering::Relaxed))
            .sum()
    }

    /// Drops the gate of `key` if no turn is out and nobody waits: only the
    /// map holds it then, and no one can take a new handle while the map's
    /// shard is locked for the removal.
    fn forget_if_idle(&self, key: &Key) {
        self.gates
            .remove_if(key, |_, gate| Arc::strong_count(gate) == 1);
    }
}

/// Counts a task among a gate's waiters while it waits; on the way out
/// (turn or cancellation) it forgets an idle gate.
struct Waiting<'a, P> {
    queues: &'a LocalQueues<P>,
    key: &'a Key,
    gate: Option<Arc<Gate<P>>>,
}

impl<'a, P> Waiting<'a, P> {
    fn new(queues: &'a LocalQueues<P>, key: &'a Key, gate: Arc<Gate<P>>) -> Self {
        gate.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting {
            queues,
            key,
            gate: Some(gate),
        }
    }
}

impl<P> Waiting<'_, P> {
    fn turns(&self) -> Option<Arc<Semaphore>> {
        self.gate.as_ref().map(|gate| gate.turns.clone())
    }

    /// The wait is over, with the turn: the gate, no longer counting us, and
    /// a parcel left for the turn if there is one.
    fn finish(mut self) -> (Option<Arc<Gate<P>>>, Option<P>) {
        let gate = self.gate.take();
        let mut unclaimed = Vec::new();
        let parcel = gate.as_ref().and_then(|gate| {
            let mut parcels = gate.parcels();
            let parcel = parcels.pop();
            if gate.waiting.fetch_sub(1, Ordering::Relaxed) == 1 {
                // Several turns handed over at once and we were the last
                // waiter: nobody is left for the others.
                unclaimed = std::mem::take(&mut *parcels);
            }
            parcel
        });
        drop(unclaimed);
        (gate, parcel)
    }
}

impl<P> Drop for Waiting<'_, P> {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            // Cancelled: if we were the last waiter, a parcel left now has
            // nobody to go to.
            let unclaimed = {
                let mut parcels = gate.parcels();
                let before = gate.waiting.fetch_sub(1, Ordering::Relaxed);
                if before == 1 {
                    std::mem::take(&mut *parcels)
                } else {
                    Vec::new()
                }
            };
            drop(unclaimed);
        }
        self.queues.forget_if_idle(self.key);
    }
}

/// One acquire's turn to have a participant node; given back when dropped.
pub(crate) struct LocalTurn<P = ()> {
    permit: Option<OwnedSemaphorePermit>,
    gate: Option<Arc<Gate<P>>>,
    key: Key,
    queues: Weak<LocalQueues<P>>,
    /// What the turn's previous owner handed over with it (boxed: a turn
    /// travels in every waiting acquire, a parcel rarely).
    parcel: Option<Box<P>>,
}

impl<P> LocalTurn<P> {
    /// The parcel that came with this turn, if any (once).
    pub(crate) fn take_parcel(&mut self) -> Option<P> {
        self.parcel.take().map(|parcel| *parcel)
    }

    /// A handle to hand this turn over with a parcel (see
    /// [`HandOver::hand_over`]); `None` for a turn that holds no permit.
    pub(crate) fn handle(&self) -> Option<HandOver<P>> {
        self.permit.as_ref()?;
        self.gate.clone().map(|gate| HandOver { gate })
    }
}

/// What hands a turn over with a parcel: the turn's gate.
pub(crate) struct HandOver<P> {
    gate: Arc<Gate<P>>,
}

impl<P> HandOver<P> {
    /// Leaves the parcel `make` returns for the next task to get a turn of
    /// this lock, if a task waits for one now; `make` runs only then (with
    /// the gate's parcels locked), and may decline with `None`. Returns
    /// whether a parcel was left. The turn is then to be given back (the
    /// parcel goes with the permit to the first waiter).
    pub(crate) fn hand_over(&self, make: impl FnOnce() -> Option<P>) -> bool {
        let mut parcels = self.gate.parcels();
        if self.gate.waiting.load(Ordering::Relaxed) == 0 {
            return false;
        }
        match make() {
            Some(parcel) => {
                parcels.push(parcel);
                true
            }
            None => false,
        }
    }
}

impl<P> fmt::Debug for LocalTurn<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalTurn")
            .field("path", &self.key.0)
            .field("lock", &self.key.1)
            .finish()
    }
}

impl<P> Drop for LocalTurn<P> {
    fn drop(&mut self) {
        // The permit and our handle first, so that the gate may be idle
        // when looked at.
        drop(self.permit.take());
        drop(self.gate.take());
        if let Some(queues) = self.queues.upgrade() {
            queues.forget_if_idle(&self.key);
        }
    }
}

#[cfg(test)]
mod tests;
