//! [`Metrics`]: the framework's counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::Extensions;

/// Counters the framework keeps, for tests, benchmarks and monitoring
/// (the lock engine adds its own, such as `lock_wakeups`).
#[derive(Debug, Default)]
pub struct Metrics {
    pub(super) background_deletes: AtomicU64,
    pub(super) background_delete_retries: AtomicU64,
    /// The framework's extensions, where the counters of other layers live.
    pub(super) extensions: Arc<Extensions>,
}

impl Metrics {
    /// The framework's extensions (see [`Framework::extension`]).
    pub(crate) fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// How many nodes the background cleaner deleted (cancelled acquires,
    /// releases during connection loss, dropped guards).
    pub fn background_deletes(&self) -> u64 {
        self.background_deletes.load(Ordering::Relaxed)
    }

    /// How many background delete attempts failed with an error worth
    /// retrying (connection loss, a timeout, a lost session) and were
    /// scheduled again. It grows during an outage; the cleaner never gives
    /// up on such errors.
    pub fn background_delete_retries(&self) -> u64 {
        self.background_delete_retries.load(Ordering::Relaxed)
    }
}
