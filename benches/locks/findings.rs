//! What the workloads keep for the verdict at the end of the run
//! (`verdict.rs`): each workload fills in its part of [`Findings`], and the
//! targets are judged from it alone.

use zk_curator::CohortPolicy;

use super::limits::Measured;
use super::stats::Spread;

/// The figures the targets are judged on, filled in as the workloads run.
#[derive(Default)]
pub(crate) struct Findings {
    pub(crate) uncontended_rate: Vec<Option<Spread>>,
    pub(crate) uncontended_requests: Vec<Option<Spread>>,
    pub(crate) uncontended_acq_p50: Vec<Option<Spread>>,
    pub(crate) latency_p50: Vec<Option<Spread>>,
    pub(crate) proxy_rtt_ms: Option<f64>,
    /// (N, per contender: hand-offs/s, requests/hand-off, watches/hand-off).
    pub(crate) contended: Vec<(usize, Vec<[Option<Spread>; 3]>)>,
    pub(crate) labels: Vec<&'static str>,
    /// zk-curator: T tasks on one session, one task on each of 32 sessions.
    pub(crate) tasks: Option<(Option<Spread>, Option<Spread>)>,
    /// Curator's hand-offs/s with T threads on one session.
    pub(crate) tasks_curator: Option<Spread>,
    /// The cohort row of the tasks workload (T tasks on one session).
    pub(crate) cohort_row: Option<CohortRow>,
    /// The curve over `max_passes`.
    pub(crate) cohort_curve: Vec<CohortPoint>,
    /// (K, variant, outcome) of the scale workload.
    pub(crate) scale: Vec<(usize, &'static str, Measured<ScaleFigures>)>,
    /// The TLS workload's rates and round trips.
    pub(crate) tls: Option<TlsFindings>,
    /// The ensemble's create+delete pairs/s (`--ensemble`, `ceiling.rs`).
    pub(crate) ceiling: Option<Spread>,
}

/// The cohort row of the tasks table (T tasks on one session).
#[derive(Clone, Copy)]
pub(crate) struct CohortRow {
    pub(crate) rate: Option<Spread>,
    pub(crate) requests: Option<Spread>,
    pub(crate) fsyncs: Option<Spread>,
    pub(crate) p50: Option<Spread>,
    pub(crate) p99: Option<Spread>,
}

/// One point of the cohort curve, over its reps.
pub(crate) struct CohortPoint {
    pub(crate) policy: CohortPolicy,
    pub(crate) rate: Option<Spread>,
    pub(crate) requests: Option<Spread>,
    /// Longest wait of the other session's task, over all reps (ms), and
    /// the passes during it.
    pub(crate) longest_wait: Option<(f64, u64)>,
    /// Most passes during any one wait of the other session's task.
    pub(crate) most_passes: Option<u64>,
}

/// What the TLS workload found, for the targets at the end.
#[derive(Default)]
pub(crate) struct TlsFindings {
    /// Cycles/s per row.
    pub(crate) rates: Vec<Option<Spread>>,
    /// Round trips of the acquire per row.
    pub(crate) trips: Vec<Option<f64>>,
}

/// What one scale child reported, and whether the server outlived it.
pub(crate) struct ScaleFigures {
    pub(crate) rss_before_kib: f64,
    pub(crate) rss_after_kib: f64,
    pub(crate) hwm_kib: f64,
    pub(crate) park_secs: f64,
    pub(crate) nodes: f64,
    pub(crate) park_requests: f64,
    pub(crate) drain_secs: f64,
    pub(crate) drain_requests: f64,
    pub(crate) drain_watches: f64,
    pub(crate) server_alive: bool,
}
