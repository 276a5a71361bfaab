//! The configuration of a run: [`Config`] (from the environment,
//! `ZK_CHAOS_*`, and its `with_*` builders), the [`Kind`]s of hold the
//! contenders take and where each lives under the run's root, the fixed
//! allowances of the rules ([`STUCK_SLACK`], [`OBSERVER_BREAK_DELAY`]), what
//! each participant proclaims, and the run's randomness: every generator of the harness is
//! a [`fastrand::Rng`] seeded from [`Config::seed`] (see [`Draw`]), so the
//! printed seed replays a run's faults and holds.

use std::time::Duration;

use zk_curator::CohortPolicy;

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// How long faults are injected (`ZK_CHAOS_SECS`); the wind-down
    /// follows.
    pub duration: Duration,
    /// Contenders, each on a framework and a link of its own.
    pub contenders: usize,
    /// Every framework's session timeout.
    pub session_timeout: Duration,
    /// The seed of every generator of the run (`ZK_CHAOS_SEED`; from the
    /// clock without it): printed with the report, it replays the run's
    /// faults and holds.
    pub seed: u64,
    /// `ZK_CHAOS_BREAK=fence`: holders write without their fence (a planted
    /// bug: stale writes must be found).
    pub break_fence: bool,
    /// `ZK_CHAOS_BREAK=loss`: holders ignore the loss signal (a planted
    /// bug: overlapping holders must be found).
    pub break_loss: bool,
    /// `ZK_CHAOS_BREAK=observer`: the harness hands each observation out
    /// [`OBSERVER_BREAK_DELAY`] late, as if it had just been read (a planted
    /// bug: an observer that reports a leader it no longer knows to lead).
    pub break_observer: bool,
    /// Cohort hand-off on every contender's framework.
    pub cohort: Option<CohortPolicy>,
    /// Tasks of each contender contending for each lock (one without
    /// cohorting: passes need a task of the same framework waiting).
    pub tasks: usize,
    /// How far behind the ensemble's leader an observer's server may
    /// answer (zero on one server): see "The observer's contract".
    pub read_lag: Duration,
    /// The harness's own faults to leave out, by their number in the run
    /// (0 for the first): a simulation shrinks a failing schedule with it.
    /// The faults are still drawn, so the others keep their place.
    pub skip_faults: std::collections::BTreeSet<u64>,
    /// How long the release of a hold already lost may take, per lock
    /// released. It never waits for a new session (`LockInternals::release`):
    /// it deletes what is left of the node if connected, waiting for the
    /// answer at most the framework's connection timeout (the contenders'
    /// is 3 s on one server), and in the background if not.
    pub release_bound: Duration,
    /// Also read, now and then, the first value of a fresh leadership
    /// stream, and check it as the long-lived one. On in a simulation; off
    /// in real time, where another thread may end a term between the
    /// stream's look and the check (a false report).
    pub probe_leadership: bool,
    /// Stuck holders (see "Stuck holders"): every other contender's lock
    /// holds are bounded, and now and then get stuck. `ZK_CHAOS_STUCK=0`
    /// turns them off.
    pub stuck: bool,
    /// `ZK_CHAOS_BREAK=bound`: a stuck holder's progress is said by a
    /// timer instead of by its work (a planted bug: its hold never ends).
    pub break_bound: bool,
    /// How long after a bound's end its hold's `lost()` may fire: the
    /// enforcer's wake-up (its timer, then its task's turn). Exact in a
    /// simulation; a loaded machine's scheduling in real time.
    pub wake_slack: Duration,
    /// How long after a bound's end, beyond the session timeout (and
    /// [`Config::read_lag`]), a stuck hold's node may still be there: see
    /// rule 8 of "Stuck holders".
    pub stuck_slack: Duration,
    /// A loss is seen the instant it is latched (one thread: a simulation),
    /// so a stuck hold seen lost at or after its bound's end must say
    /// [`LockLoss::BoundPassed`](zk_curator::LockLoss::BoundPassed).
    pub loss_seen_at_once: bool,
    /// A stuck hold lost otherwise before its bound (a suspension its
    /// session survived) whose node outlives the bound is a violation too:
    /// on, unless `ZK_CHAOS_STRICT_BOUNDS=0` (the library deletes such a
    /// node at the bound since the gap the simulator found was fixed; the
    /// report counts them either way).
    pub strict_bounds: bool,
    /// Which of the harness's fault families the run injects: all of them
    /// unless a simulation's swarm mode drew a profile from the seed (see
    /// [`Profile::draw`]).
    pub profile: Profile,
}

/// Which of the harness's fault families a run injects (swarm testing: a
/// run with some faults off altogether reaches states that the whole mix,
/// one fault always soon after another, crowds out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    /// A contender's link silent for longer than the session timeout.
    pub blackhole: bool,
    /// A contender's connections reset.
    pub reset: bool,
    /// A contender's link silent for a quarter of the session timeout.
    pub stall: bool,
    /// A session expired by the server after the client's silence.
    pub expiry: bool,
    /// Holders' process pauses (each asks for its session's expiry) and
    /// stops of a contender's whole place.
    pub pauses: bool,
    /// On an ensemble, the ensemble's own faults (a lagging follower, a
    /// member cut off, the leader killed, quorum lost, an observer moved).
    pub ensemble: bool,
}

impl Profile {
    /// Every fault family on: the mix of every run outside swarm mode.
    pub const ALL: Profile = Profile {
        blackhole: true,
        reset: true,
        stall: true,
        expiry: true,
        pauses: true,
        ensemble: true,
    };

    /// A profile drawn from `seed`, each family on one time in two, and at
    /// least one of the link faults on (a run with none injects only the
    /// holders' pauses, or nothing at all).
    pub fn draw(seed: u64) -> Profile {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x5a_a7f0_0000_0047);
        let mut profile = Profile {
            blackhole: rng.bool(),
            reset: rng.bool(),
            stall: rng.bool(),
            expiry: rng.bool(),
            pauses: rng.bool(),
            ensemble: rng.bool(),
        };
        if !(profile.blackhole || profile.reset || profile.stall || profile.expiry) {
            match rng.u8(0..4) {
                0 => profile.blackhole = true,
                1 => profile.reset = true,
                2 => profile.stall = true,
                _ => profile.expiry = true,
            }
        }
        profile
    }

    /// Whether the link fault numbered `fault` by the injector (blackhole,
    /// reset, stall, expiry) is on.
    pub(crate) fn link_fault(&self, fault: u64) -> bool {
        match fault {
            0 => self.blackhole,
            1 => self.reset,
            2 => self.stall,
            _ => self.expiry,
        }
    }

    /// The families that are off, by name (empty for [`Profile::ALL`]).
    pub fn off(&self) -> Vec<&'static str> {
        [
            ("blackhole", self.blackhole),
            ("reset", self.reset),
            ("stall", self.stall),
            ("expiry", self.expiry),
            ("pauses", self.pauses),
            ("ensemble", self.ensemble),
        ]
        .into_iter()
        .filter(|(_, on)| !on)
        .map(|(name, _)| name)
        .collect()
    }
}

impl Config {
    /// From `ZK_CHAOS_SECS`, `ZK_CHAOS_SEED` and `ZK_CHAOS_BREAK`.
    pub fn from_env(default_secs: u64) -> Config {
        let secs = std::env::var("ZK_CHAOS_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default_secs);
        let seed = std::env::var("ZK_CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
                    | 1
            });
        let broken = std::env::var("ZK_CHAOS_BREAK").unwrap_or_default();
        Config {
            duration: Duration::from_secs(secs),
            contenders: 3,
            session_timeout: Duration::from_secs(2),
            seed,
            break_fence: broken.split(',').any(|b| b == "fence"),
            break_loss: broken.split(',').any(|b| b == "loss"),
            break_observer: broken.split(',').any(|b| b == "observer"),
            cohort: None,
            tasks: 1,
            read_lag: Duration::ZERO,
            skip_faults: std::collections::BTreeSet::new(),
            release_bound: Duration::from_secs(3),
            probe_leadership: false,
            stuck: std::env::var("ZK_CHAOS_STUCK").map_or(true, |v| v != "0"),
            break_bound: broken.split(',').any(|b| b == "bound"),
            wake_slack: Duration::from_secs(1),
            stuck_slack: STUCK_SLACK,
            loss_seen_at_once: false,
            strict_bounds: std::env::var("ZK_CHAOS_STRICT_BOUNDS").map_or(true, |v| v != "0"),
            profile: Profile::ALL,
        }
    }

    /// A stuck hold's node may outlive its bound by `slack` beyond the
    /// session timeout and the read lag (an ensemble that cannot write for
    /// a while needs more than [`STUCK_SLACK`]).
    pub fn with_stuck_slack(mut self, slack: Duration) -> Config {
        self.stuck_slack = slack;
        self
    }

    /// On an ensemble: an observer's server may answer up to `lag` behind
    /// the ensemble's leader (its `syncLimit`, plus the time a member takes
    /// to notice it lost the leader).
    pub fn with_read_lag(mut self, lag: Duration) -> Config {
        self.read_lag = lag;
        self
    }

    /// Cohort mode: `policy` on every contender's framework, and `tasks`
    /// tasks of each contender on each lock recipe (the elections are left
    /// out: cohorting does not touch them).
    pub fn with_cohort(mut self, policy: CohortPolicy, tasks: usize) -> Config {
        self.cohort = Some(policy);
        self.tasks = tasks.max(1);
        self
    }

    /// Rule 10's bound (see the crate's notes, "Liveness"): once every
    /// fault is over, a contender that wants a lock gets it within this
    /// long. The sum of what may still stand in its way then, each term
    /// for one cause:
    ///
    /// - the session timeout: a node of a session no client uses any more
    ///   (abandoned during the faults, or of a place stopped until the
    ///   faults' end) goes when the server expires the session, within a
    ///   session timeout of last hearing from it;
    /// - [`Config::release_bound`] (the contenders' connection timeout): a
    ///   client the faults left on a dead connection gives it up within
    ///   it, reconnects, and a lost hold's release deletes its node;
    /// - [`MAX_HOLD_BOUND`] plus [`Config::stuck_slack`] and
    ///   [`Config::read_lag`]: a stuck hold in progress keeps its node until
    ///   its bound passes, and rule 8 gives the node that much more (its
    ///   session timeout is the first term's);
    /// - 250 ms for each task that may hold the lock first (every
    ///   contender's tasks): a critical section (5 to 120 ms of work, a
    ///   read and a write) and its release, each a few round trips.
    pub fn liveness_bound(&self) -> Duration {
        let seats = (self.contenders * self.tasks.max(1)) as u32;
        self.session_timeout
            + self.release_bound
            + MAX_HOLD_BOUND
            + self.stuck_slack
            + self.read_lag
            + Duration::from_millis(250) * seats
    }

    /// The kinds contended for.
    pub(crate) fn kinds(&self) -> Vec<Kind> {
        Kind::ALL
            .into_iter()
            .filter(|kind| self.cohort.is_none() || !kind.is_election())
            .collect()
    }
}

/// A kind of hold the contenders take, each on a path of its own under the
/// run's root (see the crate's notes, "Kinds").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A mutex held by its guard.
    MutexGuard,
    /// A mutex held by its task (`acquire` / `release`).
    MutexTask,
    /// A read-write lock's write half.
    WriteLock,
    /// A two-lease semaphore.
    Semaphore2,
    /// A multi-lock over two paths.
    MultiLock,
    /// Terms of a [`LeaderLatch`](zk_curator::LeaderLatch) election.
    Latch,
    /// Terms of a [`LeaderSelector`](zk_curator::LeaderSelector) election.
    Selector,
    /// A mutex in kazoo's layout
    /// ([`Layout::Kazoo`](zk_curator::recipes::layout::Layout::Kazoo):
    /// `<uuid hex>__lock__<seq>`), on a path of its own (a Curator-layout
    /// contender there would be a
    /// [`Error::LayoutConflict`](zk_curator::Error::LayoutConflict)).
    KazooMutex,
    /// The write half of a read-write lock in kazoo's layout, on another.
    KazooWrite,
}

impl Kind {
    // Declared after the elections, so that the older kinds keep their
    // numbers (each contender's generator is seeded with its kind's).
    const ALL: [Kind; 9] = [
        Kind::MutexGuard,
        Kind::MutexTask,
        Kind::WriteLock,
        Kind::Semaphore2,
        Kind::MultiLock,
        Kind::KazooMutex,
        Kind::KazooWrite,
        Kind::Latch,
        Kind::Selector,
    ];

    /// How many may hold at once.
    pub(crate) fn holders(self) -> usize {
        match self {
            Kind::Semaphore2 => 2,
            _ => 1,
        }
    }

    /// Whether its holds are an election's terms.
    pub(crate) fn is_election(self) -> bool {
        matches!(self, Kind::Latch | Kind::Selector)
    }
}

/// How long after a bound's end, beyond the session timeout, a stuck
/// hold's node may still be there on one server (rule 8 of "Stuck
/// holders").
pub const STUCK_SLACK: Duration = Duration::from_secs(2);

/// The longest hold bound a stuck holder draws (see "Stuck holders").
pub const MAX_HOLD_BOUND: Duration = Duration::from_secs(4);

/// How late `ZK_CHAOS_BREAK=observer` hands observations out.
pub const OBSERVER_BREAK_DELAY: Duration = Duration::from_secs(3);

/// The value participant `id` proclaims.
pub(crate) fn value_of(id: &str) -> String {
    format!("value of {id}")
}

/// The counter the holds of `kind` read and write.
pub(crate) fn counter_path(root: &str, kind: Kind) -> String {
    format!("{root}/data/{kind:?}")
}

/// The directories where the run's participants' nodes live (a Curator
/// semaphore's two), for what is left at the end.
pub(crate) fn lock_dirs(root: &str) -> Vec<String> {
    vec![
        format!("{root}/mutex-guard"),
        format!("{root}/mutex-task"),
        format!("{root}/rw"),
        format!("{root}/sem/locks"),
        format!("{root}/sem/leases"),
        format!("{root}/multi-a"),
        format!("{root}/multi-b"),
        format!("{root}/kazoo-mutex"),
        format!("{root}/kazoo-rw"),
        format!("{root}/latch"),
        format!("{root}/selector"),
    ]
}

/// The lock and election paths of a run under `root` (a Curator
/// semaphore's as one path, as the tree observer shows it).
pub(crate) fn lock_paths(root: &str) -> Vec<String> {
    [
        "mutex-guard",
        "mutex-task",
        "rw",
        "sem",
        "multi-a",
        "multi-b",
        "kazoo-mutex",
        "kazoo-rw",
        "latch",
        "selector",
    ]
    .iter()
    .map(|path| format!("{root}/{path}"))
    .collect()
}

/// The draws the harness makes of a generator of its own (each seeded from
/// [`Config::seed`] and what it is for).
pub(crate) trait Draw {
    /// A number in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: u64) -> u64;
    /// A duration of `from..=to` milliseconds.
    fn millis(&mut self, from: u64, to: u64) -> Duration;
}

impl Draw for fastrand::Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.u64(..n.max(1))
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(self.u64(from..=to))
    }
}

/// A bound that a host times on its own clock (`bound`), as the harness's
/// one clock may see it: a host's clock may run up to 1,000 ppm slow (the
/// simulator draws rates within ±200 ppm by default, `--drift-ppm`), and
/// the simulated clock moves in 1 ms steps, so the host's timer can fire a
/// step after its instant on either side. Seed 221 (at b71bb90) measured
/// a release the connection timeout (3 s) bounds at 3.001 s.
pub(crate) fn host_timed(bound: Duration) -> Duration {
    bound + bound / 1000 + Duration::from_millis(2)
}

#[cfg(test)]
mod host_timed_tests {
    use super::*;

    #[test]
    fn a_host_timed_bound_allows_drift_and_a_step_not_more() {
        let bound = host_timed(Duration::from_secs(3));
        // Seed 221's release: one step late on a slow host.
        assert!(Duration::from_millis(3001) <= bound);
        // A release 10 ms past its bound is late, drift or not.
        assert!(Duration::from_millis(3010) > bound);
    }
}
