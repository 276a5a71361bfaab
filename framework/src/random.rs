//! The framework's one source of randomness: fastrand's generator of the
//! calling thread.
//!
//! Every random draw of the framework and the recipes comes from here: the
//! jitter of the retry policies, the cleaner's per-process seed, and (on a
//! seeded thread) the ids in protected node names. The ZooKeeper client
//! draws its host choice and reconnect jitter from the same generator, and
//! the embedded server its session ids and unsorted child order, so one
//! call to [`seed`] on a thread makes everything a simulation runs on that
//! thread replayable.
//!
//! # Node-name ids
//!
//! A protected node's name carries a v4 uuid (`_c_<uuid>-…`, as Curator
//! writes it), by which a client finds its own node after losing a create's
//! reply. Two processes must never draw the same one. fastrand's state is
//! 64 bits, seeded per thread from the OS by default; a uuid drawn from it
//! carries at most those 64 bits. So on a thread nobody seeded, the ids come
//! from the OS's randomness, 122 bits each (`uuid::Uuid::new_v4`), as
//! before; only on a thread seeded with [`seed`] (a simulation, a test) do
//! they come from the generator.

use std::cell::Cell;

thread_local! {
    static SEEDED: Cell<bool> = const { Cell::new(false) };
}

/// Seeds the calling thread's generator (fastrand's), and marks the thread
/// as seeded: from now on every random draw the framework, the recipes,
/// the client and the embedded server make on this thread follows from
/// `seed`, node-name ids included.
///
/// For simulations and tests that run everything on one thread (a
/// current-thread runtime); the worker threads of a multi-threaded runtime
/// (and `spawn_blocking` threads) are not seeded by it. A program never
/// needs to call it. Seeding fastrand directly (`fastrand::seed`) does not
/// mark the thread: node-name ids then still come from the OS.
pub fn seed(seed: u64) {
    fastrand::seed(seed);
    SEEDED.with(|seeded| seeded.set(true));
}

/// Whether [`seed`] was called on this thread.
pub fn is_seeded() -> bool {
    SEEDED.with(Cell::get)
}

/// A v4 uuid for a protected node's name: from the OS on an unseeded
/// thread, from the seeded generator otherwise (see the module's notes).
pub(crate) fn node_id() -> uuid::Uuid {
    if is_seeded() {
        uuid::Builder::from_random_bytes(fastrand::u128(..).to_le_bytes()).into_uuid()
    } else {
        uuid::Uuid::new_v4()
    }
}

/// A draw in `[0, 1)`.
pub(crate) fn unit() -> f64 {
    fastrand::f64()
}

/// A draw of 64 bits.
pub(crate) fn bits() -> u64 {
    fastrand::u64(..)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path;

    fn ids(seed_value: u64) -> Vec<uuid::Uuid> {
        seed(seed_value);
        (0..4).map(|_| node_id()).collect()
    }

    /// Runs `test` on a thread of its own: a fresh thread is unseeded,
    /// whichever way the test harness runs the tests.
    fn on_a_fresh_thread(test: impl FnOnce() + Send + 'static) {
        if let Err(panic) = std::thread::spawn(test).join() {
            std::panic::resume_unwind(panic);
        }
    }

    fn assert_protected(id: uuid::Uuid) {
        assert_eq!(id.get_version_num(), 4, "{id}");
        let name = format!("{}{}-lock-0000000001", path::PROTECTED_PREFIX, id);
        assert!(path::is_protected(&name), "{name}");
    }

    #[test]
    fn a_seeded_thread_draws_the_same_ids_again() {
        on_a_fresh_thread(|| {
            assert!(!is_seeded());
            let first = ids(7);
            assert!(is_seeded());
            assert_eq!(first, ids(7));
            assert_ne!(first, ids(8));
            // Still well-formed v4 ids, taken as protected names.
            for id in first {
                assert_protected(id);
            }
        });
    }

    #[test]
    fn an_unseeded_thread_draws_v4_ids_from_the_os() {
        on_a_fresh_thread(|| {
            assert!(!is_seeded());
            fastrand::seed(7);
            let a = node_id();
            fastrand::seed(7);
            let b = node_id();
            // Not from fastrand: the same fastrand seed gives different ids.
            assert_ne!(a, b);
            assert_protected(a);
            assert_protected(b);
        });
    }

    #[test]
    fn other_draws_follow_the_seed() {
        on_a_fresh_thread(|| {
            seed(3);
            let first: Vec<u64> = (0..4).map(|_| bits()).collect();
            let unit_first = unit();
            assert!((0.0..1.0).contains(&unit_first));
            seed(3);
            let again: Vec<u64> = (0..4).map(|_| bits()).collect();
            assert_eq!(first, again);
            assert_eq!(unit_first, unit());
            seed(4);
            assert_ne!(first, (0..4).map(|_| bits()).collect::<Vec<_>>());
        });
    }
}
