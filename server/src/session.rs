//! Sessions: ids, passwords, negotiated timeouts and expiry deadlines.
//!
//! The instants here are `std`'s type, but the server reads them all on tokio's clock (the
//! clock of the runtime it runs on, given as `tokio::time::Instant::into_std`): with that
//! runtime's clock paused (tokio's `test-util`), sessions expire as paused time is advanced,
//! together with every other timer. A caller of this module's functions should read its `now`
//! the same way.
//!
//! Ids and passwords come from `fastrand`'s thread-local generator, read once, when
//! [`Sessions::new`] runs: ids count up from a random base laid out like ZooKeeper's (whose
//! base is the wall clock), and passwords are a keyed hash of the id under a random key. In
//! production that generator is seeded from the operating system, so two servers hand out
//! different ids; a deterministic simulation that seeds it (`fastrand::seed`) on the thread
//! that starts the server gets the same ids and passwords on every run with that seed.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hasher};
use std::time::{Duration, Instant};

use crate::watch::ConnId;

/// Bits of an id below its random base: the low 16, ZooKeeper's room for the counter.
const COUNTER_BITS: u32 = 16;
/// Bits of the random base; with the counter, they leave the top byte (ZooKeeper's server
/// id, 0 here) clear, so every id is positive.
const BASE_BITS: u32 = 40;

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

/// Every live session, by id.
#[derive(Debug)]
pub struct Sessions {
    /// Ordered by id, so that whatever walks the sessions (expiry, the admin words) does so
    /// in the same order on every run.
    map: BTreeMap<i64, Session>,
    next_id: i64,
    /// The key of the passwords' hash.
    secret: [u64; 2],
}

impl Default for Sessions {
    fn default() -> Self {
        Self::new()
    }
}

impl Sessions {
    /// No sessions. The first id is a random base from `fastrand` (see the [module
    /// docs](self)): a 40-bit random part above 16 bits of counter, with the top byte clear
    /// as in ZooKeeper's ids (`(time << 24) >>> 8` there), so ids are positive and, counting
    /// up one at a time, unique for the server's life.
    pub fn new() -> Sessions {
        let base = fastrand::u64(1..1 << BASE_BITS) << COUNTER_BITS;
        Sessions {
            map: BTreeMap::new(),
            next_id: i64::try_from(base).unwrap_or(1),
            secret: [fastrand::u64(..), fastrand::u64(..)],
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

    /// No sessions, with the same password key as `self` (and ids counting on from the same
    /// base): a simulated ensemble's members keep each session under the password its
    /// leader handed out.
    pub fn sharing_key(&self) -> Sessions {
        Sessions {
            map: BTreeMap::new(),
            next_id: self.next_id,
            secret: self.secret,
        }
    }

    /// Keeps session `id`, made elsewhere, with `timeout`, unattached, its deadline a timeout
    /// from `now` (replacing any session of that id).
    pub fn adopt(&mut self, id: i64, timeout: Duration, now: Instant) {
        self.map.insert(
            id,
            Session {
                timeout,
                deadline: deadline(now, timeout),
                conn: None,
            },
        );
    }

    /// The 16-byte password of session `id`: a keyed hash of the id (std's `DefaultHasher`,
    /// which hashes alike on every run of a program, keyed with the random secret).
    pub fn password(&self, id: i64) -> [u8; 16] {
        let mut out = [0u8; 16];
        for (half, chunk) in out.chunks_exact_mut(8).enumerate() {
            let mut h = DefaultHasher::new();
            h.write_u64(self.secret[0]);
            h.write_u64(self.secret[1]);
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

    /// Sessions whose deadline has passed, by id (the order they are expired in).
    pub fn due(&self, now: Instant) -> Vec<i64> {
        self.map
            .iter()
            .filter(|(_, s)| s.deadline <= now)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Ids of every live session, in order.
    pub fn ids(&self) -> Vec<i64> {
        self.map.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first id, the id after it and the first password of fresh sessions made after
    /// seeding this thread's generator with `seed`.
    fn first_of(seed: u64) -> (i64, i64, [u8; 16]) {
        fastrand::seed(seed);
        let mut sessions = Sessions::new();
        let now = Instant::now();
        let first = sessions.create(Duration::from_secs(1), 1, now);
        let second = sessions.create(Duration::from_secs(1), 2, now);
        (first, second, sessions.password(first))
    }

    #[test]
    fn ids_and_passwords_follow_the_seed() {
        let (first, second, password) = first_of(7);
        // The wall clock moves on between the two servers; a clock-based base would differ.
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(first_of(7), (first, second, password));
        let (other, _, other_password) = first_of(8);
        assert_ne!(other, first);
        assert_ne!(other_password, password);
    }

    #[test]
    fn ids_are_positive_count_up_and_keep_the_top_byte_clear() {
        for seed in 0..64 {
            let (first, second, _) = first_of(seed);
            assert!(first > 0, "{first:#x}");
            assert_eq!(second, first + 1);
            assert_eq!(first & ((1 << COUNTER_BITS) - 1), 0, "{first:#x}");
            assert_eq!(first >> (COUNTER_BITS + BASE_BITS), 0, "{first:#x}");
        }
    }
}
