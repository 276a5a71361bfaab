//! The options of a run (`--quick`, `--only`, `--reps`, ...) and the sizes
//! they lead to: how many cycles, sessions, tasks, reps and seconds each
//! workload gets. The arguments are parsed as the command line's are (clap):
//! `--help` lists the workloads and options, and an unknown option or
//! workload, or a bad value, ends the run before anything starts.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{EnumValueParser, PossibleValue, TypedValueParser};
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, ValueEnum};
use zk_curator::CohortPolicy;

use super::arguments::{positive, CargoBench};
use super::limits::ACQUIRE_LIMIT;

/// The workloads, in the order they run (the names `--only` takes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Workload {
    /// Acquire+release on one session, nobody else on the path: cycles/s,
    /// p50/p99, requests per cycle
    Uncontended,
    /// The same through a proxy adding 1 ms each way: what round trips cost
    Latency,
    /// N sessions (--sessions) acquire→release on one path: hand-offs/s,
    /// requests and watches per hand-off
    Contended,
    /// 1,000 tasks on one session against 32 sessions, the cohort row and
    /// its curve over max_passes
    Tasks,
    /// LeaderLatch elections of 4: time until the next participant leads
    /// once the leader is killed
    Failover,
    /// LeaderObserver streams (--observers, --observer-sessions): how soon
    /// they report a new leader, and what it costs them
    Observe,
    /// Uncontended cycles over TLS beside plain, on a second server
    Tls,
    /// K parked waiters (--scale) in a child process: its RSS, time to park
    /// and to drain, whether the server survives
    Scale,
    /// A TreeObserver over 10,000 lock paths of 10 participants: its cold
    /// start, its memory, commit-to-view after a hand-off, and how soon it
    /// shows a burst of 10,000 queueing on one path; then 1,000
    /// tasks on one session, a lock each (--entities), against Curator and
    /// the server's create+delete ceiling, with and without an observer; and
    /// contended hand-offs/s with an observer against without
    Tree,
    /// Hold bounds (issue 46): a stuck holder's silence bound passing to
    /// the next holder's grant, against an ordinary hand-off; requests per
    /// acquire and hand-off with bounds set against none
    Bounds,
}

impl Workload {
    /// The name `--only` takes, and the header prints.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Workload::Uncontended => "uncontended",
            Workload::Latency => "latency",
            Workload::Contended => "contended",
            Workload::Tasks => "tasks",
            Workload::Failover => "failover",
            Workload::Observe => "observe",
            Workload::Tls => "tls",
            Workload::Scale => "scale",
            Workload::Tree => "tree",
            Workload::Bounds => "bounds",
        }
    }
}

/// The workloads that run on an ensemble (`--ensemble`); the others need
/// the one standalone server (a proxy in front of it, a second server, a
/// server the workload may kill) and are skipped.
pub(crate) const ENSEMBLE_WORKLOADS: [Workload; 5] = [
    Workload::Uncontended,
    Workload::Contended,
    Workload::Tasks,
    Workload::Failover,
    Workload::Bounds,
];

/// `ZK_CONNECT`, and how the bench is started by `cargo bench`.
const AFTER_HELP: &str = "\
Environment:
  ZK_CONNECT   run against this ensemble instead of starting a ZooKeeper
               (not with --ensemble)
  RUST_LOG     the bench's own logging (default: error)

Examples:
  cargo bench --bench locks -- --quick
  cargo bench --bench locks -- --only contended --sessions 8 --reps 7
Method and figures: BENCHMARKS.md.";

/// The lock benchmark: zk-curator against Apache Curator, kazoo and
/// zookeeper-client's own lock, on one ZooKeeper, in one run. It prints
/// figures and ratios and asserts nothing.
///
/// Without options, every workload runs in full (about 10 minutes); the
/// warm-up always runs.
#[derive(Debug, Parser)]
#[command(
    name = "locks",
    bin_name = "cargo bench --bench locks --",
    args_override_self = true,
    after_help = AFTER_HELP
)]
struct Args {
    /// A short run, as CI's: 1 rep and small sizes, about a minute
    #[arg(long)]
    quick: bool,
    /// Also write the plot of contended hand-offs/s against N to FILE (SVG)
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Run only these workloads (comma-separated) [default: all of them]
    #[arg(
        long,
        value_name = "WORKLOAD,...",
        value_delimiter = ',',
        value_parser = Trimmed(EnumValueParser::<Workload>::new())
    )]
    only: Vec<Workload>,
    /// The reps of every workload [default: 3; 1 with --quick]
    #[arg(long, value_name = "K", value_parser = positive)]
    reps: Option<usize>,
    /// The N of the contended workload (comma-separated) [default: 2,8,32;
    /// 8,32 with --ensemble]
    #[arg(long, value_name = "N,...", value_delimiter = ',', value_parser = positive)]
    sessions: Vec<usize>,
    /// The scale workload's parked waiters (comma-separated) [default:
    /// 1000,10000,50000; 200 with --quick]
    #[arg(long, value_name = "K,...", value_delimiter = ',', value_parser = positive)]
    scale: Vec<usize>,
    /// The observe workload's observers [default: 100; 20 with --quick]
    #[arg(long, value_name = "N", value_parser = positive)]
    observers: Option<usize>,
    /// The sessions the observers are spread over [default: 4; 2 with
    /// --quick]
    #[arg(long, value_name = "S", value_parser = positive)]
    observer_sessions: Option<usize>,
    /// The tree workload's tasks on one session, each on a lock path of its
    /// own [default: 1000; 100 with --quick]
    #[arg(long, value_name = "T", value_parser = positive)]
    entities: Option<usize>,
    /// The tree workload's reps of contended hand-offs with an observer
    /// against without [default: 7; 1 with --quick]
    #[arg(long, value_name = "K", value_parser = positive)]
    observed_reps: Option<usize>,
    /// Start N ZooKeeper servers as one replicated ensemble (at least 3) and
    /// run there: uncontended, contended, tasks, failover and bounds, and
    /// the ensemble's ceiling
    #[arg(long, value_name = "N", value_parser = members)]
    ensemble: Option<usize>,
    /// The ceiling's pipelined sessions [default: 2 per member]
    #[arg(long, value_name = "S", value_parser = positive)]
    ceiling_sessions: Option<usize>,
    /// The create+delete pairs each ceiling session keeps in flight
    /// [default: 128]
    #[arg(long, value_name = "D", value_parser = positive)]
    ceiling_depth: Option<usize>,
    #[command(flatten)]
    cargo: CargoBench,
}

/// The members of an ensemble: 3 or more.
fn members(value: &str) -> Result<usize, String> {
    match positive(value) {
        Ok(n) if n >= 3 => Ok(n),
        Ok(n) => Err(format!(
            "a replicated ensemble has at least 3 members, not {n}"
        )),
        Err(_) => Err("expected the number of members, e.g. --ensemble 3".to_owned()),
    }
}

/// A parser of `P`'s values that first trims surrounding spaces (`--only
/// "contended, tasks"`), and offers `P`'s possible values to `--help` and to
/// the error naming them.
#[derive(Debug, Clone)]
struct Trimmed<P>(P);

impl<P: TypedValueParser> TypedValueParser for Trimmed<P> {
    type Value = P::Value;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<Self::Value, clap::Error> {
        match value.to_str() {
            Some(text) => self.0.parse_ref(cmd, arg, OsStr::new(text.trim())),
            None => self.0.parse_ref(cmd, arg, value),
        }
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        self.0.possible_values()
    }
}

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
    /// The tree workload's per-entity piece: tasks on one session, each on
    /// a lock path of its own; each measurement's window, and an unmeasured
    /// run of each row before the reps.
    pub(crate) entity_tasks: usize,
    pub(crate) entity_window: Duration,
    pub(crate) entity_warmup: Duration,
    /// The tree workload's contended hand-offs with an observer against
    /// without: reps (each one of both, in alternating order), sessions on
    /// the one path, and each measurement's window.
    pub(crate) observed_reps: usize,
    pub(crate) observed_sessions: usize,
    pub(crate) observed_window: Duration,
    pub(crate) plot: Option<PathBuf>,
    /// The workloads to run (`--only`); all of them when empty.
    pub(crate) only: Vec<Workload>,
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
    /// The run the arguments ask for. `--help` prints the workloads and
    /// options and exits 0; an unknown option or workload, a bad value or a
    /// combination that cannot run prints why and exits 2, before anything
    /// starts.
    pub(crate) fn from_args() -> Self {
        let Args {
            quick,
            plot,
            only,
            reps,
            sessions,
            scale,
            observers,
            observer_sessions,
            entities,
            observed_reps,
            ensemble,
            ceiling_sessions,
            ceiling_depth,
            cargo: _,
        } = Args::parse();
        if ensemble.is_some() {
            if std::env::var("ZK_CONNECT").is_ok_and(|v| !v.is_empty()) {
                Args::command()
                    .error(
                        ErrorKind::ArgumentConflict,
                        "--ensemble starts an ensemble of its own; unset ZK_CONNECT to use it",
                    )
                    .exit();
            }
            if let Some(other) = only.iter().find(|w| !ENSEMBLE_WORKLOADS.contains(w)) {
                Args::command()
                    .error(
                        ErrorKind::ArgumentConflict,
                        format!(
                            "--ensemble: the {} workload runs on the standalone server only; \
                             on an ensemble the bench runs {}",
                            other.name(),
                            ensemble_names()
                        ),
                    )
                    .exit();
            }
        }
        Config {
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
            entity_tasks: entities.unwrap_or(if quick { 100 } else { 1000 }),
            entity_window: Duration::from_millis(if quick { 500 } else { 3000 }),
            entity_warmup: Duration::from_millis(if quick { 200 } else { 1000 }),
            observed_reps: observed_reps.unwrap_or(if quick { 1 } else { 7 }),
            observed_sessions: 8,
            observed_window: Duration::from_millis(if quick { 500 } else { 3000 }),
            plot,
            only,
            ensemble,
            // Two sessions on each member.
            ceiling_sessions: ceiling_sessions.unwrap_or(2 * ensemble.unwrap_or(1)),
            ceiling_depth: ceiling_depth.unwrap_or(128),
        }
    }

    /// Whether `workload` runs (`--only`, or every workload).
    /// On an ensemble, only the [`ENSEMBLE_WORKLOADS`] run.
    pub(crate) fn runs(&self, workload: Workload) -> bool {
        let chosen = self.only.is_empty() || self.only.contains(&workload);
        chosen && (self.ensemble.is_none() || ENSEMBLE_WORKLOADS.contains(&workload))
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

/// The names of the [`ENSEMBLE_WORKLOADS`], comma-separated.
pub(crate) fn ensemble_names() -> String {
    ENSEMBLE_WORKLOADS.map(Workload::name).join(", ")
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
