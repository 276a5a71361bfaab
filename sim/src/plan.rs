//! What a seed runs: the scenario drawn from it (contenders, session
//! timeout, cohorting, the network's latency) and the harness's settings
//! for it, the bugs planted on purpose (`--break`), and the faults left out
//! of its schedule (a shrunk schedule's [`Plan`]). Both worlds a seed runs
//! in (one server's, `single.rs`; an ensemble's, `ensemble.rs`) start from
//! here.

use std::collections::BTreeSet;
use std::time::Duration;

use zk_curator::CohortPolicy;
use zk_curator_chaos::Config;

/// Bugs planted on purpose, to show that the checks catch them.
#[derive(Clone, Copy, Debug)]
pub struct Breaks {
    /// Holders write without their fence.
    pub fence: bool,
    /// Holders ignore the loss signal.
    pub loss: bool,
    /// Observers' reports are handed out late, as if just read.
    pub observer: bool,
    /// Stuck holders' progress is said by a timer, not by their work.
    pub bound: bool,
    /// Not a planted bug: rule 8 (b) for stuck holds lost otherwise first
    /// too (see the harness's `Config::strict_bounds`). On unless
    /// `--lenient-bounds`.
    pub strict_bounds: bool,
}

impl Default for Breaks {
    /// No bug planted; rule 8 (b) held whole.
    fn default() -> Self {
        Breaks {
            fence: false,
            loss: false,
            observer: false,
            bound: false,
            strict_bounds: true,
        }
    }
}

impl Breaks {
    /// Whether any bug is planted.
    pub fn any(self) -> bool {
        self.fence || self.loss || self.observer || self.bound
    }
}

/// Faults left out of a seed's schedule, by their number in the run: the
/// harness's own, and the network's. Empty: the whole schedule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub harness: BTreeSet<u64>,
    pub net: BTreeSet<u64>,
}

/// What one seed runs, drawn from it.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub contenders: usize,
    pub session_timeout: Duration,
    pub cohort: bool,
    pub duration: Duration,
    /// The network's message latency, lowest and highest.
    pub latency: (Duration, Duration),
}

impl Scenario {
    /// The scenario of `seed`, running for `duration` of simulated time.
    pub fn of(seed: u64, duration: Duration) -> Scenario {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x5ce0_a210);
        let low = rng.u64(0..=2);
        Scenario {
            contenders: rng.usize(2..=4),
            session_timeout: Duration::from_millis(rng.u64(1500..=4000)),
            cohort: rng.u8(0..4) == 0,
            duration,
            latency: (
                Duration::from_millis(low),
                Duration::from_millis(low + rng.u64(0..=8)),
            ),
        }
    }

    pub(crate) fn config(&self, seed: u64, breaks: Breaks, plan: &Plan) -> Config {
        let mut config = Config {
            duration: self.duration,
            contenders: self.contenders,
            session_timeout: self.session_timeout,
            seed,
            break_fence: breaks.fence,
            break_loss: breaks.loss,
            break_observer: breaks.observer,
            cohort: None,
            tasks: 1,
            read_lag: Duration::ZERO,
            skip_faults: plan.harness.clone(),
            // The contenders' connection timeout on one server (see
            // `Config::release_bound`).
            release_bound: Duration::from_secs(3),
            // One thread: no real time between a stream's look and the
            // harness's (see `Config::probe_leadership`).
            probe_leadership: true,
            stuck: true,
            break_bound: breaks.bound,
            // One thread, one clock: the enforcer's timer fires at the
            // bound's end, in the tick it falls in, and its loss is seen
            // then.
            wake_slack: Duration::from_millis(2),
            stuck_slack: zk_curator_chaos::STUCK_SLACK,
            loss_seen_at_once: true,
            strict_bounds: breaks.strict_bounds,
            profile: zk_curator_chaos::Profile::ALL,
        };
        // `--swarm`: the seed's own fault profile (see `swarm.rs`).
        if let Some(swarm) = crate::swarm::of(seed) {
            config.profile = swarm.profile;
            config.stuck = swarm.stuck;
        }
        if self.cohort {
            config = config.with_cohort(CohortPolicy::new(8, Duration::from_secs(1)), 2);
        }
        config
    }

    /// Links to make: one per contender and per observer (two elections'
    /// and the tree observer's).
    pub(crate) fn links(&self) -> usize {
        self.contenders + 3
    }
}
