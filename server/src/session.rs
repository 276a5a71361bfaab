//! Sessions: ids, passwords, negotiated timeouts and expiry deadlines.
//!
//! The instants here are `std`'s type, but the server reads them all on tokio's clock (the
//! clock of the runtime it runs on, given as `tokio::time::Instant::into_std`): with that
//! runtime's clock paused (tokio's `test-util`), sessions expire as paused time is advanced,
//! together with every other timer. A caller of this module's functions should read its `now`
//! the same way. Session ids start from the wall clock (`SystemTime`), as ZooKeeper's do.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::watch::ConnId;

/// `now + timeout`, saturating far in the future instead of overflowing.
pub fn deadline(now: Instant, timeout: Duration) -> Instant {
    now.checked_add(timeout)
        .or_else(|| now.checked_add(Duration::from_secs(365 * 24 * 3600)))
        .unwrap_or(now)
}

/// One session.
#[derive(Clone, Debug)]
pub struct Session {
    /// Negotiated timeout.
    pub timeout: Duration,
    /// When it expires unless the client is heard from again.
    pub deadline: Instant,
    /// The connection it is attached to, if any.
    pub conn: Option<ConnId>,
}

/// Every live session.
#[derive(Debug)]
pub struct Sessions {
    map: HashMap<i64, Session>,
    next_id: i64,
    secret: RandomState,
}

impl Default for Sessions {
    fn default() -> Self {
        Self::new()
    }
}

impl Sessions {
    /// No sessions; ids start from the clock, like ZooKeeper's (server id 0).
    pub fn new() -> Sessions {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(1);
        // ZooKeeper: (time << 24) >>> 8, i.e. the high byte (server id) stays zero.
        let next_id = ((millis << 24) >> 8) as i64;
        Sessions {
            map: HashMap::new(),
            next_id: next_id.max(1),
            secret: RandomState::new(),
        }
    }

    /// Creates a session with `timeout`, attached to `conn`; returns its id.
    pub fn create(&mut self, timeout: Duration, conn: ConnId, now: Instant) -> i64 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.map.insert(
            id,
            Session {
                timeout,
                deadline: deadline(now, timeout),
                conn: Some(conn),
            },
        );
        id
    }

    /// The 16-byte password of session `id` (a keyed hash of the id).
    pub fn password(&self, id: i64) -> [u8; 16] {
        let mut out = [0u8; 16];
        for (half, chunk) in out.chunks_exact_mut(8).enumerate() {
            let mut h = self.secret.build_hasher();
            h.write_i64(id);
            h.write_usize(half);
            chunk.copy_from_slice(&h.finish().to_be_bytes());
        }
        out
    }

    /// The session `id`.
    pub fn get(&self, id: i64) -> Option<&Session> {
        self.map.get(&id)
    }

    /// The session `id`, mutably.
    pub fn get_mut(&mut self, id: i64) -> Option<&mut Session> {
        self.map.get_mut(&id)
    }

    /// Pushes the deadline of `id` to `now + timeout`; false if the session is gone.
    pub fn touch(&mut self, id: i64, now: Instant) -> bool {
        match self.map.get_mut(&id) {
            Some(s) => {
                s.deadline = deadline(now, s.timeout);
                true
            }
            None => false,
        }
    }

    /// Gives every session a full timeout from `now` (after a restart).
    pub fn touch_all(&mut self, now: Instant) {
        for s in self.map.values_mut() {
            s.deadline = deadline(now, s.timeout);
        }
    }

    /// Removes session `id`.
    pub fn remove(&mut self, id: i64) -> Option<Session> {
        self.map.remove(&id)
    }

    /// Sessions whose deadline has passed.
    pub fn due(&self, now: Instant) -> Vec<i64> {
        let mut due: Vec<i64> = self
            .map
            .iter()
            .filter(|(_, s)| s.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        due.sort_unstable();
        due
    }

    /// Ids of every live session.
    pub fn ids(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self.map.keys().copied().collect();
        ids.sort_unstable();
        ids
    }
}
