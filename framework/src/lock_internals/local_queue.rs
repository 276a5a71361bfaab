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

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use dashmap::DashMap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A lock path, lock name and number of turns.
type Key = (Arc<str>, Arc<str>, u32);

/// The turns of one lock, and how many tasks wait for one.
struct Gate {
    turns: Arc<Semaphore>,
    waiting: AtomicUsize,
}

/// Every lock's turns of one framework.
#[derive(Default)]
pub(crate) struct LocalQueues {
    gates: DashMap<Key, Arc<Gate>>,
}

impl fmt::Debug for LocalQueues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalQueues")
            .field("locks", &self.gates.len())
            .finish()
    }
}

impl LocalQueues {
    fn gate(&self, key: &Key) -> Arc<Gate> {
        self.gates
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(Gate {
                    turns: Arc::new(Semaphore::new(key.2 as usize)),
                    waiting: AtomicUsize::new(0),
                })
            })
            .clone()
    }

    /// Waits for a turn (first come, first served).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped wait leaves the queue and takes no turn.
    pub(crate) async fn turn(self: &Arc<Self>, key: Key) -> LocalTurn {
        let waiting = Waiting::new(self, &key, self.gate(&key));
        let permit = match waiting.turns() {
            Some(turns) => turns.acquire_owned().await.ok(),
            None => None,
        };
        let gate = waiting.finish();
        self.wrap(key, gate, permit)
    }

    /// A turn if one is free now.
    pub(crate) fn try_turn(self: &Arc<Self>, key: Key) -> Option<LocalTurn> {
        let gate = self.gate(&key);
        match gate.turns.clone().try_acquire_owned() {
            Ok(permit) => Some(self.wrap(key, Some(gate), Some(permit))),
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
        gate: Option<Arc<Gate>>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> LocalTurn {
        LocalTurn {
            permit,
            gate,
            key,
            queues: Arc::downgrade(self),
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
struct Waiting<'a> {
    queues: &'a LocalQueues,
    key: &'a Key,
    gate: Option<Arc<Gate>>,
}

impl<'a> Waiting<'a> {
    fn new(queues: &'a LocalQueues, key: &'a Key, gate: Arc<Gate>) -> Self {
        gate.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting {
            queues,
            key,
            gate: Some(gate),
        }
    }
}

impl Waiting<'_> {
    fn turns(&self) -> Option<Arc<Semaphore>> {
        self.gate.as_ref().map(|gate| gate.turns.clone())
    }

    /// The wait is over: the gate, no longer counting us.
    fn finish(mut self) -> Option<Arc<Gate>> {
        let gate = self.gate.take();
        if let Some(gate) = &gate {
            gate.waiting.fetch_sub(1, Ordering::Relaxed);
        }
        gate
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.waiting.fetch_sub(1, Ordering::Relaxed);
        }
        self.queues.forget_if_idle(self.key);
    }
}

/// One acquire's turn to have a participant node; given back when dropped.
pub(crate) struct LocalTurn {
    permit: Option<OwnedSemaphorePermit>,
    gate: Option<Arc<Gate>>,
    key: Key,
    queues: Weak<LocalQueues>,
}

impl fmt::Debug for LocalTurn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalTurn")
            .field("path", &self.key.0)
            .field("lock", &self.key.1)
            .finish()
    }
}

impl Drop for LocalTurn {
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
