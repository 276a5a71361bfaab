//! What one measurement of one contender yields: the cycles of an
//! uncontended run, the hand-offs of a contended one, and the arithmetic
//! both share (nearest-rank percentiles, a count per cycle or hand-off).

use std::time::Duration;

/// One uncontended run: its rate and latencies.
pub(crate) struct Cycles {
    pub(crate) per_s: f64,
    /// Of acquire+release.
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    /// Of the acquire alone.
    pub(crate) acq_p50_ms: f64,
    pub(crate) acq_p99_ms: f64,
    pub(crate) cycles: usize,
}

impl Cycles {
    pub(crate) fn from_samples(
        mut samples: Vec<Duration>,
        mut acquires: Vec<Duration>,
        total: Duration,
    ) -> Cycles {
        samples.sort_unstable();
        acquires.sort_unstable();
        let ms = |sorted: &[Duration], q| percentile(sorted, q).as_secs_f64() * 1e3;
        Cycles {
            per_s: samples.len() as f64 / total.as_secs_f64(),
            p50_ms: ms(&samples, 0.50),
            p99_ms: ms(&samples, 0.99),
            acq_p50_ms: ms(&acquires, 0.50),
            acq_p99_ms: ms(&acquires, 0.99),
            cycles: samples.len(),
        }
    }
}

/// Nearest-rank percentile of sorted samples (the peers use the same rule).
pub(crate) fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// One contended run: its hand-offs and what they cost.
pub(crate) struct Handoffs {
    pub(crate) per_s: f64,
    /// Holds begun within the window.
    pub(crate) holds: u64,
    /// Of those, the holds by another task than the previous hold's.
    pub(crate) switches: u64,
    /// All releases, the window's and the drain's after it.
    pub(crate) releases: u64,
    /// Hand-off latency, p50 and p99 in ms: from the start of a release to
    /// the next acquire returning (holds within the window).
    pub(crate) gap_ms: Option<(f64, f64)>,
    /// Cohort passes of the contender's frameworks during the run (and its
    /// drain); zk-curator rows only.
    pub(crate) passes: Option<u64>,
}

/// `value` per `count` (a count per cycle or per hand-off), when both exist.
pub(crate) fn per(value: Option<f64>, count: f64) -> Option<f64> {
    (count > 0.0).then(|| value.map(|v| v / count)).flatten()
}
