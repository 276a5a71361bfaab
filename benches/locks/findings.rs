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
    /// The tree workload's observer (`tree.rs`): its cold start in seconds,
    /// and this process's RSS growth in MiB.
    pub(crate) tree_cold: Option<(f64, Option<f64>)>,
    /// The tree workload's per-entity hand-offs (`entities.rs`).
    pub(crate) entities: Option<EntityFindings>,
    /// Contended hand-offs/s without an observer and with one on each
    /// placement, and the observer's cost per rep (1 - with / without).
    pub(crate) observed: Option<ObservedFindings>,
}

/// Per-entity hand-offs/s (T tasks on one session, a lock each).
#[derive(Clone, Copy)]
pub(crate) struct EntityFindings {
    pub(crate) tasks: usize,
    pub(crate) zk_curator: Option<Spread>,
    pub(crate) curator: Option<Spread>,
    /// The server's create+delete pairs/s in the same reps.
    pub(crate) ceiling: Option<Spread>,
}

/// Contended hand-offs/s on one path, without an observer and with a
/// `TreeObserver` over it on each placement.
#[derive(Clone)]
pub(crate) struct ObservedFindings {
    pub(crate) sessions: usize,
    pub(crate) without: Option<Spread>,
    pub(crate) with: Vec<ObservedWith>,
}

/// The observed rows' figures, one placement of the observer.
#[derive(Clone)]
pub(crate) struct ObservedWith {
    /// The row's name (where the observer ran).
    pub(crate) name: &'static str,
    /// The floor (a bare recursive watch), not an observer.
    pub(crate) floor: bool,
    pub(crate) rate: Option<Spread>,
    /// The cost of each rep, as a share of its run without (0.02 = 2 %).
    pub(crate) cost: Option<Spread>,
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
