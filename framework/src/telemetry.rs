//! Metrics, in one place, through the [`metrics`](https://docs.rs/metrics)
//! facade when the `metrics` feature is on (every function is a no-op
//! otherwise). Install any recorder (Prometheus exporter, …) to collect them.
//!
//! | name | kind | unit | labels | what |
//! |---|---|---|---|---|
//! | `zk_curator_acquire_wait_seconds` | histogram | seconds | `path`, `outcome` | time from asking to a hold, a timeout or an error |
//! | `zk_curator_acquires_total` | counter | | `path`, `outcome` (`acquired`, `timed_out`, `failed`, `cancelled`) | finished acquires |
//! | `zk_curator_hold_seconds` | histogram | seconds | `path` | time from the grant to the release (or drop) of a hold |
//! | `zk_curator_losses_total` | counter | | `path`, `reason` | holds found lost, by [`LockLoss`](crate::lock_internals::LockLoss) |
//! | `zk_curator_revocations_total` | counter | | `path` | revocation requests delivered to a listener |
//! | `zk_curator_lock_passes_total` | counter | | `path` | held nodes passed to another task of the framework without a request ([`CohortPolicy`](crate::lock_internals::CohortPolicy)) |
//! | `zk_curator_background_deletes_total` | counter | | | nodes the background cleaner deleted |
//! | `zk_curator_waiting` | gauge | | `path` | acquires under way |
//! | `zk_curator_holding` | gauge | | `path` | holds alive |
//! | `zk_curator_state_changes_total` | counter | | `state` | connection state changes |
//!
//! `path` is the lock's path; turn it off with
//! [`FrameworkBuilder::metrics_path_label`](crate::FrameworkBuilder::metrics_path_label)
//! when lock paths are many (it is then `*`).
//!
//! # Tracing spans
//!
//! Every span is at `INFO` level, so a subscriber filtering on
//! `zk_curator=info` sees acquires, releases and sessions; the events inside
//! them (waits, wake-ups, retries, losses) are at `DEBUG` and `WARN`.
//!
//! | span | fields | around |
//! |---|---|---|
//! | `lock.acquire` | `path` (lock path), `lock` (node name prefix), `try_only` | one acquire of any recipe's node, to a hold, a timeout or an error |
//! | `lock.release` | `node` (full node path) | the delete of one node |
//! | `lock.pass` | `node`, `token` (the passing hold's) | a held node passed to the next task of the framework (cohort hand-off) |
//! | `semaphore.acquire` | `path`, `leases` (asked for), `max_leases` | a semaphore acquire, internal mutex included |
//! | `semaphore.release` | `node` | one lease's release |
//! | `multi_lock.acquire` | `paths` (the members' paths), `timeout`, `owner` (task) | a multi-lock acquire, every member |
//! | `multi_lock.release` | `paths`, `owner` | a multi-lock release, every member |
//! | `multi_lock.background_release` | `owner` | members released after a cancelled acquire |
//! | `rwlock.downgrade` | `write_node` | a write hold turned into a read hold |
//! | `session` | `id` (hex), `generation` (sessions since the framework started) | the supervisor's life of one ZooKeeper session: establishment, state changes, expiry |
//!
//! A span added or changed anywhere in the workspace belongs in this table.

#[cfg(feature = "metrics")]
mod enabled {
    use std::time::Duration;

    pub(crate) fn acquire_started(path: &str) {
        metrics::gauge!("zk_curator_waiting", "path" => path.to_owned()).increment(1.0);
    }

    pub(crate) fn acquire_ended(path: &str, outcome: &'static str, waited: Duration) {
        metrics::gauge!("zk_curator_waiting", "path" => path.to_owned()).decrement(1.0);
        metrics::counter!("zk_curator_acquires_total", "path" => path.to_owned(), "outcome" => outcome)
            .increment(1);
        metrics::histogram!("zk_curator_acquire_wait_seconds", "path" => path.to_owned(), "outcome" => outcome)
            .record(waited.as_secs_f64());
    }

    pub(crate) fn hold_started(path: &str) {
        metrics::gauge!("zk_curator_holding", "path" => path.to_owned()).increment(1.0);
    }

    pub(crate) fn hold_ended(path: &str, held: Duration) {
        metrics::gauge!("zk_curator_holding", "path" => path.to_owned()).decrement(1.0);
        metrics::histogram!("zk_curator_hold_seconds", "path" => path.to_owned())
            .record(held.as_secs_f64());
    }

    pub(crate) fn hold_lost(path: &str, reason: String) {
        metrics::counter!("zk_curator_losses_total", "path" => path.to_owned(), "reason" => reason)
            .increment(1);
    }

    pub(crate) fn lock_passed(path: &str) {
        metrics::counter!("zk_curator_lock_passes_total", "path" => path.to_owned()).increment(1);
    }

    pub(crate) fn revocation(path: &str) {
        metrics::counter!("zk_curator_revocations_total", "path" => path.to_owned()).increment(1);
    }

    pub(crate) fn background_delete() {
        metrics::counter!("zk_curator_background_deletes_total").increment(1);
    }

    pub(crate) fn state_change(state: String) {
        metrics::counter!("zk_curator_state_changes_total", "state" => state).increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
mod enabled {
    use std::time::Duration;

    pub(crate) fn acquire_started(_path: &str) {}
    pub(crate) fn acquire_ended(_path: &str, _outcome: &'static str, _waited: Duration) {}
    pub(crate) fn hold_started(_path: &str) {}
    pub(crate) fn hold_ended(_path: &str, _held: Duration) {}
    pub(crate) fn hold_lost(_path: &str, _reason: String) {}
    pub(crate) fn lock_passed(_path: &str) {}
    pub(crate) fn revocation(_path: &str) {}
    pub(crate) fn background_delete() {}
    pub(crate) fn state_change(_state: String) {}
}

pub(crate) use enabled::*;

/// An acquire under way: counted in `zk_curator_waiting` until it finishes
/// (or is dropped: outcome `cancelled`).
pub(crate) struct Waiting {
    label: String,
    /// On `std`'s clock on purpose: it only measures the real time the
    /// acquire waited, for a metric, and decides nothing.
    started: std::time::Instant,
    done: bool,
}

impl Waiting {
    pub(crate) fn start(framework: &crate::Framework, path: &str) -> Waiting {
        let label = path_label(framework, path);
        acquire_started(&label);
        Waiting {
            label,
            started: std::time::Instant::now(),
            done: false,
        }
    }

    pub(crate) fn finish(mut self, outcome: &'static str) {
        self.done = true;
        acquire_ended(&self.label, outcome, self.started.elapsed());
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.done {
            acquire_ended(&self.label, "cancelled", self.started.elapsed());
        }
    }
}

/// The `path` label of a lock path under the framework's setting.
pub(crate) fn path_label(framework: &crate::Framework, path: &str) -> String {
    if framework.inner().config.metrics_path_label {
        path.to_owned()
    } else {
        "*".to_owned()
    }
}
