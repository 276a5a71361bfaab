//! The options of a run (`--quick`, `--only`, `--reps`, ...) and the sizes
//! they lead to: how many cycles, sessions, tasks, reps and seconds each
//! workload gets.

use std::path::PathBuf;
use std::time::Duration;

use zk_curator::CohortPolicy;

use super::limits::{BoxError, ACQUIRE_LIMIT};

/// The workloads, in the order they run (the names `--only` takes).
const WORKLOADS: [&str; 8] = [
    "uncontended",
    "latency",
    "contended",
    "tasks",
    "failover",
    "observe",
    "tls",
    "scale",
];

/// The workloads that run on an ensemble (`--ensemble`); the others need
/// the one standalone server (a proxy in front of it, a second server, a
/// server the workload may kill) and are skipped.
pub(crate) const ENSEMBLE_WORKLOADS: [&str; 4] = ["uncontended", "contended", "tasks", "failover"];

/// The sizes of one run.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) quick: bool,
    pub(crate) reps: usize,
    /// Uncontended cycles each contender runs before anything is measured.
    pub(crate) warmup_cycles: usize,
    /// And a contended run of this long at N = 8.
    pub(crate) warmup_contended: Duration,
    pub(crate) cycles: usize,
    pub(crate) latency_cycles: usize,
    /// Added by the proxy in each direction.
    pub(crate) delay: Duration,
    pub(crate) contend: Duration,
    pub(crate) sessions: Vec<usize>,
    /// Tasks on one session, against `task_sessions` sessions of one task.
    pub(crate) tasks: usize,
    pub(crate) task_sessions: usize,
    /// The cohort policies of the curve (issue 24), on the one-session
    /// tasks shape, and how long each point runs.
    pub(crate) cohort_curve: Vec<CohortPolicy>,
    pub(crate) curve_window: Duration,
    /// Participants in the failover workload's election.
    pub(crate) failover_participants: usize,
    /// Measured failovers per rep and contender.
    pub(crate) failovers: usize,
    /// Leadership hand-overs each election runs before anything is measured.
    pub(crate) failover_warmup_cycles: usize,
    /// And unmeasured failovers after them.
    pub(crate) failover_warmup_kills: usize,
    /// Participants in the observe workload's election.
    pub(crate) observe_participants: usize,
    /// Its observers (streams), and the sessions they are spread over.
    pub(crate) observers: usize,
    pub(crate) observer_sessions: usize,
    /// Measured changes of leader per rep, and unmeasured ones before.
    pub(crate) observe_failovers: usize,
    pub(crate) observe_warmup_kills: usize,
    /// Parked waiters.
    pub(crate) scale: Vec<usize>,
    pub(crate) scale_sessions: usize,
    /// The client RSS at which a scale child gives up.
    pub(crate) scale_rss_cap_mib: i64,
    pub(crate) plot: Option<PathBuf>,
    /// The workloads to run (`--only`); all of them when empty.
    pub(crate) only: Vec<String>,
    /// `--ensemble N`: the members of the ensemble the bench starts and
    /// runs on, instead of one standalone server.
    pub(crate) ensemble: Option<usize>,
    /// The ensemble's ceiling (`--ensemble`): pipelined sessions (spread
    /// evenly over the members), and the create+delete pairs each keeps in
    /// flight.
    pub(crate) ceiling_sessions: usize,
    pub(crate) ceiling_depth: usize,
}

impl Config {
    pub(crate) fn from_args() -> Result<Self, BoxError> {
        // `cargo bench` passes `--bench`; `--quick`, `--plot <file>`,
        // `--only <workloads>`, `--reps <k>`, `--sessions <n,...>`,
        // `--scale <k,...>` (the scale workload's waiter counts),
        // `--observers <n>` and `--observer-sessions <s>` (the observe
        // workload's), `--ensemble <n>`, and `--ceiling-sessions <s>` and
        // `--ceiling-depth <d>` (the ensemble's ceiling) matter here.
        let args: Vec<String> = std::env::args().skip(1).collect();
        let quick = args.iter().any(|arg| arg == "--quick");
        let value = |flag: &str| {
            args.iter()
                .position(|arg| arg == flag)
                .and_then(|i| args.get(i + 1))
        };
        let plot = value("--plot").map(PathBuf::from);
        let list = |flag: &str| -> Vec<String> {
            value(flag)
                .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect())
                .unwrap_or_default()
        };
        let only = list("--only");
        if let Some(unknown) = only.iter().find(|w| !WORKLOADS.contains(&w.as_str())) {
            return Err(format!(
                "--only: unknown workload {unknown:?}; the workloads are {}",
                WORKLOADS.join(", ")
            )
            .into());
        }
        let positive = |flag: &str, v: &str| -> Result<usize, BoxError> {
            match v.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("{flag}: expected a whole number above 0, got {v:?}").into()),
            }
        };
        let reps = value("--reps").map(|v| positive("--reps", v)).transpose()?;
        let observers = value("--observers")
            .map(|v| positive("--observers", v))
            .transpose()?;
        let observer_sessions = value("--observer-sessions")
            .map(|v| positive("--observer-sessions", v))
            .transpose()?;
        let sessions = list("--sessions")
            .iter()
            .map(|v| positive("--sessions", v))
            .collect::<Result<Vec<usize>, _>>()?;
        let ensemble = value("--ensemble")
            .map(|v| positive("--ensemble", v))
            .transpose()?;
        let ceiling_sessions = value("--ceiling-sessions")
            .map(|v| positive("--ceiling-sessions", v))
            .transpose()?;
        let ceiling_depth = value("--ceiling-depth")
            .map(|v| positive("--ceiling-depth", v))
            .transpose()?;
        if ensemble.is_none() && args.iter().any(|arg| arg == "--ensemble") {
            return Err("--ensemble: expected the number of members, e.g. --ensemble 3".into());
        }
        if let Some(n) = ensemble {
            if n < 3 {
                return Err(format!(
                    "--ensemble: a replicated ensemble has at least 3 members, not {n}"
                )
                .into());
            }
            if std::env::var("ZK_CONNECT").is_ok_and(|v| !v.is_empty()) {
                return Err(
                    "--ensemble starts an ensemble of its own; unset ZK_CONNECT to use it".into(),
                );
            }
            if let Some(other) = only
                .iter()
                .find(|w| !ENSEMBLE_WORKLOADS.contains(&w.as_str()))
            {
                return Err(format!(
                    "--ensemble: the {other} workload runs on the standalone server only; \
                     on an ensemble the bench runs {}",
                    ENSEMBLE_WORKLOADS.join(", ")
                )
                .into());
            }
        }
        let scale = list("--scale")
            .iter()
            .map(|v| positive("--scale", v))
            .collect::<Result<Vec<usize>, _>>()?;
        Ok(Config {
            quick,
            reps: reps.unwrap_or(if quick { 1 } else { 3 }),
            warmup_cycles: if quick { 200 } else { 3000 },
            warmup_contended: Duration::from_millis(if quick { 500 } else { 3000 }),
            cycles: if quick { 100 } else { 1000 },
            latency_cycles: if quick { 30 } else { 300 },
            delay: Duration::from_millis(1),
            contend: Duration::from_secs(if quick { 1 } else { 3 }),
            sessions: match sessions {
                _ if !sessions.is_empty() => sessions,
                _ if ensemble.is_some() => vec![8, 32],
                _ => vec![2, 8, 32],
            },
            tasks: if quick { 100 } else { 1000 },
            task_sessions: 32,
            cohort_curve: cohort_points(quick),
            curve_window: Duration::from_millis(if quick { 500 } else { 3000 }),
            failover_participants: 4,
            failovers: if quick { 3 } else { 10 },
            failover_warmup_cycles: if quick { 200 } else { 3000 },
            failover_warmup_kills: if quick { 1 } else { 5 },
            observe_participants: 3,
            observers: observers.unwrap_or(if quick { 20 } else { 100 }),
            observer_sessions: observer_sessions.unwrap_or(if quick { 2 } else { 4 }),
            observe_failovers: if quick { 2 } else { 5 },
            observe_warmup_kills: if quick { 1 } else { 3 },
            scale: match scale {
                _ if !scale.is_empty() => scale,
                _ if quick => vec![200],
                _ => vec![1_000, 10_000, 50_000],
            },
            scale_sessions: 4,
            scale_rss_cap_mib: 3072,
            plot,
            only,
            ensemble,
            // Two sessions on each member.
            ceiling_sessions: ceiling_sessions.unwrap_or(2 * ensemble.unwrap_or(1)),
            ceiling_depth: ceiling_depth.unwrap_or(128),
        })
    }

    /// Whether the workload `name` runs (`--only`, or every workload).
    /// On an ensemble, only the [`ENSEMBLE_WORKLOADS`] run.
    pub(crate) fn runs(&self, name: &str) -> bool {
        let chosen = self.only.is_empty() || self.only.iter().any(|w| w == name);
        chosen && (self.ensemble.is_none() || ENSEMBLE_WORKLOADS.contains(&name))
    }

    /// The bound on one measurement of one contender.
    pub(crate) fn limit(&self) -> Duration {
        self.contend + 2 * ACQUIRE_LIMIT + Duration::from_secs(60)
    }

    pub(crate) fn max_sessions(&self) -> usize {
        self.sessions
            .iter()
            .copied()
            .chain([self.task_sessions, 8])
            .max()
            .unwrap_or(1)
    }
}

/// The max_hold of the cohort curve's points: long enough not to bind.
pub(crate) const LONG_HOLD: Duration = Duration::from_secs(1);

/// The policies of the cohort curve: `max_passes` in {1, 4, 16, 64, 256}
/// with a `max_hold` that does not bind, then the default (16 passes or
/// 50 ms). Quick: 1 and 16 passes, and the default.
fn cohort_points(quick: bool) -> Vec<CohortPolicy> {
    let passes: &[u32] = if quick {
        &[1, 16]
    } else {
        &[1, 4, 16, 64, 256]
    };
    passes
        .iter()
        .map(|&p| CohortPolicy::new(p, LONG_HOLD))
        .chain([CohortPolicy::default()])
        .collect()
}
