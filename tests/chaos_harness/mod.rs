//! The chaos harness: contenders on separate sessions, each behind its own
//! fault proxy, loop lock → read a shared counter → await → fenced write →
//! release on every recipe at once, while faults are injected: blackholes
//! longer than the session timeout, connection resets, short stalls,
//! sessions expired by the server, and simulated process pauses (a holder
//! that sleeps between its read and its write while its session is
//! expired: the case fencing exists for).
//!
//! # Kinds
//!
//! Each contender takes part in every [`Kind`], each on a path of its own
//! under the run's root: the mutex held by a guard (`MutexGuard`) and by
//! its task (`MutexTask`), a read-write lock's write half (`WriteLock`), a
//! two-lease semaphore (`Semaphore2`), a multi-lock over two paths
//! (`MultiLock`), a mutex and a read-write lock's write half in kazoo's
//! layout (`KazooMutex`, `KazooWrite`: nodes named as a kazoo `Lock`'s and
//! `WriteLock`'s, on paths of their own, as a Curator-layout participant
//! beside them would be refused with `Error::LayoutConflict`), and the
//! terms of two elections (`Latch`, `Selector`). Every lock kind's holds
//! are judged by the same rules, by the number of holders it allows.
//!
//! # Places and clocks
//!
//! Each contender runs at its link's [`Place`]: in real time the harness's
//! own runtime; in the simulator a host of its own, where its framework,
//! recipes and holders run on that host's runtime and clock. There, half
//! the process pauses stop the whole host ([`Place::pause`]): nothing of
//! the contender runs, its session's pings stop, and when it is continued
//! its clock has jumped, every timer due meanwhile firing at once. The other
//! half (and every pause in real time) are the harness's: it expires the
//! session while the holder alone sleeps. Every hold of a contender that was
//! stopped during it counts as not obeying (it could not watch), and a hold
//! seen only after a stop of its holder ([`Interval::seen_late`]) is left
//! out of the token-order rules: it may have been granted before the stop.
//!
//! Every instant the harness records is read from [`now`]: tokio's clock in
//! real time; in the simulator one clock for all hosts (each host's tokio
//! clock has a base of its own). Those instants are compared, never slept
//! until on a contender's place.
//!
//! The same contenders also take part in two elections under the same
//! faults, each leader doing critical sections back to back for a term of
//! its chosen length, through the term's fence: a [`LeaderLatch`] each (a
//! term runs from `await_leadership` until its `lost()`, or until the
//! contender gives leadership up by closing the latch) and a
//! [`LeaderSelector`] each (the term is the selector's function, cancelled
//! by the selector when the term is lost). A term is checked as a hold is
//! (one interval from its start to its end), and the terms' fencing tokens
//! must grow in the order the terms began.
//!
//! # The observer's contract
//!
//! Beside each election, a [`LeaderObserver`] on a framework of its own
//! (its own session, behind its own fault proxy: it gets a quarter of the
//! injected faults) reports who leads, and the harness records each report
//! with two instants: `asked`, when the harness began waiting for it, and
//! `at`, when it came. The stream works only while polled, so the reads
//! behind a report all began after `asked`. The contract: the observer
//! never reports, as the current leader, a participant whose term had
//! ended before the report. "Ended" must be as ZooKeeper sees it: a holder
//! that sees its term lost to its own disconnection may still have its
//! node first in the queue, and then it is still the leader to anyone who
//! reads. So a term counts as ended once its node is known deleted, and a
//! report of node N (creation zxid z) is stale when, before it was asked:
//!
//! 1. a term began on a node of the same election created after N
//!    (creation zxid above z): a participant leads only once every node
//!    before its own is gone, so N was deleted before that term began;
//! 2. the server confirmed the expiry of N's session (its ephemeral nodes
//!    are gone once the expiry is confirmed);
//! 3. the same observer had reported a node created after N (when it read
//!    that node first, N was gone already).
//!
//! Every participant proclaims a value of its own (`value of <id>`, set
//! with `with_value`, proclaimed by each term as it begins), so values
//! change under the same faults, and a fourth rule holds whatever the
//! timing: 4. a report that says its value was proclaimed carries the
//! value of the participant it names, never another's (the value is taken
//! only when the election path's data names the reported node).
//!
//! Sound on a single server because its reads are linearizable: a read
//! that begins after a deletion completed cannot see the node, and the
//! observer reports a leader only after reading its node (a read that finds
//! no node lists again). On an ensemble ([`run_on`] with
//! [`Target::Ensemble`]) a read is as of the session's server, which may
//! lag the ensemble's leader by up to `syncLimit` (a follower stalled or
//! cut off keeps answering that long): rules 1 and 2 then count only what
//! happened more than [`Config::read_lag`] before the report was asked.
//! Rule 3 stays exact: ZooKeeper keeps one session's reads in order, and
//! the observer syncs its server at the start of each session, so it is
//! the rule that says "never older than a report already made, across
//! session changes" (the fault [`ensemble::Fault::ObserverLag`] moves an
//! observer onto a lagging member to try it). The
//! term's start is recorded after `await_leadership` returned or the
//! selector called its function, and `asked` comes before the read, so
//! both errors make the check more lenient, never wrong. The price: a
//! report that came after a long wait is checked against the wait's start
//! only. `ZK_CHAOS_BREAK=observer` plants a bug in the harness's consumer
//! (each report held [`OBSERVER_BREAK_DELAY`], then recorded as if just
//! read): rule 1 must then find stale reports. The reports per kind
//! (leader / no leader / unknown) are in the report's table.
//!
//! A fifth rule needs to know what the observer's client had read, so only
//! the simulator checks it (its links' [`Link::deletions_told`]; a fault
//! proxy in real time tells nothing): 5. once the observer's connection
//! has handed its client the notification that node N was deleted, the
//! observer never reports N. ZooKeeper sends a watch's notification before
//! the reply to any read it serves later, and the client dispatches each
//! notification as it reads it, so an observer that checks its watch after
//! each read it reports from cannot break it; one that reports from a read
//! answered after the notification (a new value arriving with the leader's
//! departure) does. Exact in the simulation: there a host's tasks all run
//! before the next bytes arrive, so a report is stamped (by [`sequence`])
//! before any notification that reaches the client after its decision.
//!
//! # The tree observer's contract
//!
//! One more observer, a [`TreeObserver`] over the run's whole root, runs on
//! a framework and a link of its own (after the elections' observers, so
//! it shares their quarter of the injected faults; in cohort mode, which
//! has no elections, it has that quarter alone). The harness records every
//! view it publishes ([`TreeObserver::changes`]), each with the
//! [`sequence`] number of the moment the harness began waiting for it
//! (nothing runs between taking a view and that moment, so the next view
//! was published after it) and the instant it came. Two rules:
//!
//! 6. No view that says it is current shows, as a holder, a node whose
//!    deletion the observer's client had already been handed (its links'
//!    [`Link::deletions_told`], as for rule 5) when the harness began
//!    waiting for the view. The observer applies a batch's deletions before
//!    it publishes, so it cannot break it; one that publishes with a
//!    deletion waiting in its watcher does (as the first cut did: it read
//!    each created node before taking the next event, fell behind a busy
//!    tree, and showed hundreds of holders already gone). Checked in the
//!    simulator only: a fault proxy in real time tells nothing, and the
//!    harness does not record when a lock's node was deleted, so there is
//!    no cheap real-time stand-in.
//! 7. Agreement after the faults, in both. Once every link is healed (and
//!    an ensemble too), the observer is never not current for longer than
//!    the bound (a stretch begun before the heal counts from it), the bound
//!    being the session timeout ([`Config::read_lag`] more on an
//!    ensemble). Then, once every contender has ended its round (nothing
//!    under the root changes after, but for the nodes of sessions abandoned
//!    during the faults, which end by timing out, and lost holds' nodes
//!    deleted in the background), the harness reads the truth every 50 ms
//!    through a framework of its own straight to the server
//!    (`lock_participants` of every lock and election path, each synced
//!    first) until the observer's view is current and shows each path's
//!    participants exactly (node and role, in queue order): within the
//!    bound from the later of the check's start and the last change of the
//!    truth seen. Checked at the wind-down, after the faults, so that the
//!    faults cannot make it flake: while they last, neither the truth nor
//!    the view stands still long enough to be compared, and a current view
//!    is only as of its session's server, every change since applied.
//!
//! The report has the observer's views, how many were current, its
//! listings, and how long after the quiet it agreed.
//!
//! # Stuck holders
//!
//! Every other contender (0, 2, ...) takes bounded holds of every lock
//! kind ([`HoldBounds`]: a silence bound of 200 to 800 ms, and one time in
//! three a hold bound of 1.5 to 4 s; the lock's default, or for a lease
//! [`Hold::bound`](zk_curator::Hold::bound) at its grant), and says
//! progress between the steps of its critical section. One section in
//! three of such a holder (at the latest the third in a row) gets stuck
//! after its read: it takes its fence, then stops saying progress and
//! stops doing anything, while its process, framework and session go on
//! (not a crash, not a pause of the host). A watcher beside it records
//! when its `lost()` fires and why; the harness's checker, on its own
//! session, judges the hold; then the stuck task wakes and writes once
//! through the fence it took before. `ZK_CHAOS_STUCK=0` turns stuck
//! holders off. Let `E` be the instant its first bound passes at the
//! latest (its last progress plus the silence bound, or its hold's start
//! plus the hold bound, each stamp taken just after the library's own
//! instant), and `E'` be `E`, or the instant its host was continued if it
//! was stopped at `E` ([`Place::pause`]: nothing of it runs meanwhile, the
//! enforcer included). Two rules:
//!
//! 8. **Every stuck hold ends within its bound.** (a) Its `lost()` fires
//!    by `E'` plus [`Config::wake_slack`] (the enforcer's timer and turn:
//!    2 ms in the simulator, where it fires in the tick `E` falls in; 1 s
//!    in real time, a loaded machine's scheduling); in the simulator, where
//!    a loss is seen the instant it is latched, one seen at or after `E'`
//!    says [`LockLoss::BoundPassed`] (a hold lost otherwise before its
//!    bound may say so). (b) Its node (both, for a multi-lock) is gone by
//!    `G = E'` + the session timeout + [`Config::stuck_slack`] (2 s on one
//!    server) + [`Config::read_lag`], `G` moved to a later stop of its
//!    host's end plus the same if that stop began by `G` (its link is on
//!    its host): the harness's session was told of the deletion by `G`, or
//!    a read at `G` (synced first) does not find it. Why that slack:
//!    connected, the enforcer's delete is one round trip on the holder's
//!    session; with the connection down at `E'` (a blackhole of up to
//!    1.5 session timeouts and 0.5 s, the harness's expiry, a held link of
//!    up to 2.5 s) either it comes back within the session timeout and the
//!    background cleaner, due at once on reconnection, deletes the node, or
//!    the server expires the session within a session timeout of last
//!    hearing from it and the node goes with it; a server stall (up to
//!    1.5 s in the simulator) delays either, and 2 s covers it, the round
//!    trips and the harness's read. On an ensemble, where a quorum loss
//!    refuses every write until members restart, the slack is longer (see
//!    `tests/ensemble_chaos.rs`). (c) Its write once woken, through the
//!    fence it took before it got stuck, is refused if the hold was lost
//!    (an accepted one counts as a stale write, as any other). (d) The
//!    other rules hold with it: a stuck hold found lost when its holder
//!    woke ends, as an interval, where it got stuck (it did nothing
//!    after); one found valid runs until its release, and is judged with
//!    every other hold (no two holders that obeyed, tokens in order).
//!
//!    This holds too for a stuck hold lost otherwise before `E` (a
//!    suspension its session survived, a lease gone stale): its node
//!    goes at the bound. The simulator found the library leaving such a
//!    node to the holder's release, which a stuck holder never makes
//!    (seeds 6 and 7 of 0..100; in seed 6 a connection reset 6 ms before
//!    the bound's end); fixed, and a violation by default since
//!    ([`Config::strict_bounds`]; `ZK_CHAOS_STRICT_BOUNDS=0` counts them
//!    in the report only).
//! 9. **No bound passes early.** A hold lost with
//!    [`LockLoss::BoundPassed`] (`Silence`) at `T` had, among the instants
//!    its acquire began, it said progress and `T`, a stretch without
//!    progress at least as long as its silence bound; one lost with
//!    `BoundPassed(Duration)` lasted its hold bound from the acquire's
//!    start (5 ms forgiven: the stamps come just after the library's
//!    instants). Checked on every bounded hold, stuck or not, so a holder
//!    that keeps saying progress keeps its hold.
//!
//! `ZK_CHAOS_BREAK=bound` plants a bug in the stuck holders: a timer says
//! progress for them (a watchdog fed by a timer instead of by the work, as
//! a lease renewed by a client library is): rule 8 must find stuck holds
//! that do not end.
//!
//! # Stale losses: flaps?
//!
//! A hold ends with [`LockLoss::Stale`] when the server has not been heard
//! from for longer than the session timeout. The harness records every
//! fault it injects on a contender's connection (blackholes, stalls,
//! resets, expiries) and every process pause (from its start to its
//! write) as a window, and counts each hold found Stale (by its `lost()`,
//! by a write its fence refused, or, for a selector's term, by the reason
//! it was cancelled) as inside a window of its holder (up to a session
//! timeout after the window's end) or outside every one: a flap. Flaps are
//! a figure in the report, not a violation: a loaded 2-core machine can
//! starve the process (or the server's JVM) of CPU for a session timeout,
//! and the rule then does what it is for. Under the standard error policy a
//! silent connection is usually seen `Suspended` (after two thirds of the
//! session timeout) before it is seen Stale, so Stale losses are rare.
//!
//! With cohorting ([`Config::with_cohort`]), each contender's framework
//! passes held nodes among its own tasks (`FrameworkBuilder::cohort`), and
//! several tasks of each contender take turns on every lock recipe, so that
//! passes happen under the same faults; the elections, which cohorting does
//! not touch, are left out. The checks are the same, the fencing tokens
//! being compared whole (zxid, then pass count), and a run in which no node
//! was passed is a violation (it proved nothing of the cohort).
//!
//! Used by `tests/chaos.rs` (a bounded run in CI) and `examples/chaos.rs`
//! (a long run that prints the same figures). `ZK_CHAOS_BREAK=fence` makes
//! holders write without the fence, `ZK_CHAOS_BREAK=loss` makes them ignore
//! the loss signal, `ZK_CHAOS_BREAK=observer` hands the observers' reports
//! out late, `ZK_CHAOS_BREAK=bound` feeds stuck holders' progress by a
//! timer: the checks must then fail.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use zk_curator::framework::zk;
use zk_curator::recipes::layout::{lock_participants, Layout, Role};
use zk_curator::recipes::tree::{TreeObserver, TreeView};
use zk_curator::recipes::InterProcessMultiLock;
use zk_curator::{
    CohortPolicy, Error, Fence, FencingToken, Framework, HoldBounds, InterProcessMutex,
    InterProcessReadWriteLock, InterProcessSemaphoreV2, LeaderElection, LeaderLatch,
    LeaderObserver, LeaderSelector, LeaderTerm, Leadership, Lease, LockLoss, MutexGuard,
    Observation, WriteGuard, WriteLock,
};
use zk_curator_testing::{FaultProxy, TestingCluster, TestingServer};

pub mod ensemble;
mod stuck;

/// What a run is aimed at: one server, or a replicated ensemble (whose own
/// faults join the schedule: see [`ensemble`]), or a server on a simulated
/// network (`zk-curator-sim`: one thread, a simulated clock and TCP).
#[derive(Clone, Copy)]
pub enum Target<'a> {
    Server(&'a TestingServer),
    Ensemble(&'a TestingCluster),
    Sim(&'a dyn SimServer),
}

/// A server on a simulated network, as the harness needs it: the network
/// gives each contender a [`Link`] of its own where a real run starts a
/// [`FaultProxy`].
pub trait SimServer {
    /// The server's connect string on the simulated network.
    fn connect_string(&self) -> String;
    /// A link to the server for one more contender (or observer).
    fn link(&self) -> Box<dyn Link>;
    /// Expires a session at the server, as ZooKeeper would after silence.
    fn expire_session(&self, id: i64) -> bool;
    /// The sessions the server holds now.
    fn session_ids(&self) -> Vec<i64>;
}

/// A contender's way to the server, and the faults the harness injects on
/// it: a [`FaultProxy`] in a real run.
pub trait Link {
    /// Where the contender connects.
    fn connect_string(&self) -> String;
    /// Silence both ways (`true`), or traffic again.
    fn blackhole(&self, on: bool);
    /// Closes every connection through the link.
    fn drop_connections(&self);
    /// Connections open through the link now.
    fn active_connections(&self) -> usize;
    /// Each node whose deletion a watch notification through this link
    /// told its client, with the [`sequence`] number of the moment the
    /// client was handed it (rule 5 of "The observer's contract"). A link
    /// that does not read the traffic tells nothing.
    fn deletions_told(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
    /// Where the contender on this link runs (see [`Place`]).
    fn place(&self) -> Option<Arc<dyn Place>> {
        None
    }
}

/// Where a contender's framework, and every task that uses it, runs: in a
/// simulation, a host of the contender's own (its session task, its
/// recipes' timers and its holders on one runtime, with that host's clock).
/// A link without one leaves them on the harness's runtime.
pub trait Place: Send + Sync {
    /// Starts `task` there.
    fn spawn(&self, task: BoxFuture<'static, ()>);
    /// Stops everything that runs there for `length` once the current
    /// instant is over, as a process that is stopped and later continued:
    /// its tasks, its framework's session and timers, its link. The future
    /// ends when it is continued. `None`: the place cannot be stopped.
    fn pause(&self, length: Duration) -> Option<BoxFuture<'static, ()>> {
        let _ = length;
        None
    }
}

thread_local! {
    /// This thread's clock for the harness's stamps, when not tokio's.
    static CLOCK: std::cell::Cell<Option<fn() -> Instant>> = const { std::cell::Cell::new(None) };
}

/// Sets the clock that stamps this thread's events (`None`: tokio's). A
/// simulation gives one that reads the same on all its hosts: each host's
/// tokio clock has a base of its own, so an instant read on one host means
/// nothing on another.
pub fn set_clock(clock: Option<fn() -> Instant>) {
    CLOCK.with(|c| c.set(clock));
}

/// Now, on the harness's clock: every stamp and every measured span of the
/// harness is read here. In a simulation it is an instant of the harness's
/// own host, and is only compared, never slept until, elsewhere.
pub fn now() -> Instant {
    CLOCK
        .with(|c| c.get())
        .map_or_else(Instant::now, |clock| clock())
}

/// How long since `then`, on the harness's clock.
fn since(then: Instant) -> Duration {
    now().saturating_duration_since(then)
}

/// The next number of one process-wide sequence: it orders an observer's
/// reports against what its links handed its client (rule 5 of "The
/// observer's contract").
pub fn sequence() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

impl Link for FaultProxy {
    fn connect_string(&self) -> String {
        FaultProxy::connect_string(self)
    }

    fn blackhole(&self, on: bool) {
        FaultProxy::blackhole(self, on);
    }

    fn drop_connections(&self) {
        FaultProxy::drop_connections(self);
    }

    fn active_connections(&self) -> usize {
        FaultProxy::active_connections(self)
    }
}

impl Target<'_> {
    /// The client addresses of the servers, in member order.
    fn addresses(&self) -> Vec<std::net::SocketAddr> {
        match self {
            Target::Server(server) => vec![server.address()],
            Target::Ensemble(cluster) => {
                (0..cluster.size()).map(|i| cluster.address_of(i)).collect()
            }
            Target::Sim(_) => Vec::new(),
        }
    }

    fn connect_string(&self) -> String {
        match self {
            Target::Server(server) => server.connect_string(),
            Target::Ensemble(cluster) => cluster.connect_string(),
            Target::Sim(sim) => sim.connect_string(),
        }
    }

    fn embedded(&self) -> Option<&zk_curator_testing::EmbeddedServer> {
        match self {
            Target::Server(server) => server.as_embedded(),
            Target::Ensemble(_) | Target::Sim(_) => None,
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    pub duration: Duration,
    pub contenders: usize,
    pub session_timeout: Duration,
    pub seed: u64,
    pub break_fence: bool,
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
    /// [`LockLoss::BoundPassed`].
    pub loss_seen_at_once: bool,
    /// A stuck hold lost otherwise before its bound (a suspension its
    /// session survived) whose node outlives the bound is a violation too:
    /// on, unless `ZK_CHAOS_STRICT_BOUNDS=0` (the library deletes such a
    /// node at the bound since the gap the simulator found was fixed; the
    /// report counts them either way).
    pub strict_bounds: bool,
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

    /// The kinds contended for.
    fn kinds(&self) -> Vec<Kind> {
        Kind::ALL
            .into_iter()
            .filter(|kind| self.cohort.is_none() || !kind.is_election())
            .collect()
    }
}

/// A small xorshift generator: reproducible from the printed seed.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from + 1))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    MutexGuard,
    MutexTask,
    WriteLock,
    Semaphore2,
    MultiLock,
    /// Terms of a [`LeaderLatch`] election.
    Latch,
    /// Terms of a [`LeaderSelector`] election.
    Selector,
    /// A mutex in kazoo's layout ([`Layout::Kazoo`]: `<uuid hex>__lock__<seq>`),
    /// on a path of its own (a Curator-layout contender there would be a
    /// [`Error::LayoutConflict`]).
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

    fn holders(self) -> usize {
        match self {
            Kind::Semaphore2 => 2,
            _ => 1,
        }
    }

    fn is_election(self) -> bool {
        matches!(self, Kind::Latch | Kind::Selector)
    }
}

/// One hold (a lock's critical section, or a leader's whole term), as the
/// holder lived it.
#[derive(Clone, Debug)]
struct Interval {
    who: usize,
    /// Which of the contender's tasks (0 without cohorting).
    task: usize,
    token: FencingToken,
    /// A term's election node (`None` for a lock's hold).
    node: Option<String>,
    /// How the critical section ended early, if it did.
    loss: Option<LockLoss>,
    start: Instant,
    end: Instant,
    /// The holder watched the loss signal throughout (no simulated pause).
    obeyed: bool,
    /// The holder's place was stopped between its asking and its seeing
    /// the hold ([`Place::pause`]): the hold may have been granted before
    /// the stop, so `start` is only its latest bound.
    seen_late: bool,
}

/// A write the server accepted.
#[derive(Clone, Debug)]
struct Accepted {
    value: u64,
    token: FencingToken,
    /// The holder's hold was known lost (session replaced, node deleted)
    /// before the write was sent.
    lost_before: bool,
}

#[derive(Debug, Default)]
struct Log {
    intervals: Vec<Interval>,
    /// The election's observer's links' [`Link::deletions_told`]: each
    /// node, with the first moment its client was told of its deletion.
    deletions_told: BTreeMap<String, u64>,
    accepted: Vec<Accepted>,
    refused: u64,
    interference: u64,
    losses: BTreeMap<String, u64>,
    acquired: u64,
    timed_out: u64,
    acquire_errors: u64,
    late_acquires: Vec<Duration>,
    pauses: u64,
    /// ... of which stopped the contender's whole host (see [`Place::pause`]).
    host_pauses: u64,
    /// Writes tried through a fence taken before the release, after it.
    late_writes: u64,
    /// ... of which the server accepted (each a stale write).
    late_accepted: u64,
    /// An election's observer's reports, in the order handed out.
    observed: Vec<Seen>,
    /// When a holder saw its hold end with [`LockLoss::Stale`], and who.
    stale_losses: Vec<(usize, Instant)>,
    /// Terms the participants' leadership-changes streams handed out.
    handed_out: u64,
    /// ... of which had already ended when handed out, with why.
    ended_handouts: Vec<String>,
    /// Releases of a hold already lost that took longer than
    /// [`Config::release_bound`], with how long.
    slow_releases: Vec<Duration>,
    /// Stuck holds, as the checker judged them (rule 8).
    stuck: Vec<stuck::Judged>,
    /// Bounds that passed too early (rule 9), in words.
    early_bounds: Vec<String>,
    /// Writes of stuck holders once woken, through the fence taken before
    /// they got stuck, and how many of them found the hold lost first.
    stuck_writes: u64,
    stuck_writes_lost: u64,
}

/// One report of an election's observer, as the harness received it.
#[derive(Clone, Debug)]
struct Seen {
    /// When the harness began waiting for it: the stream does its work only
    /// while polled, so the read behind the report began after this.
    asked: Instant,
    /// When the stream handed it out.
    at: Instant,
    /// The [`sequence`] number of that moment.
    seq: u64,
    what: Observation,
}

/// What the tree observer ([`TreeObserver`] over the run's root) showed,
/// and what the wind-down found of it (see "The tree observer's contract").
#[derive(Debug, Default)]
struct TreeLog {
    /// Every view the harness received, in order.
    views: Vec<TreeSeen>,
    /// The tree observer's links' [`Link::deletions_told`]: each node, with
    /// the first moment its client was told of its deletion.
    deletions_told: BTreeMap<String, u64>,
    /// When the faults were over: every link healed (and on an ensemble,
    /// the ensemble too).
    healed: Option<Instant>,
    /// The wind-down's agreement check, once made.
    agreement: Option<Agreement>,
}

/// One view of the tree observer, as the harness received it.
#[derive(Clone, Debug)]
struct TreeSeen {
    /// The [`sequence`] number of the moment the harness began waiting for
    /// it: the view was published after this.
    asked: u64,
    /// When it came.
    at: Instant,
    current: bool,
    listings: u64,
    events: u64,
    /// The node of every participant it showed holding.
    holders: Vec<String>,
}

/// The wind-down's check of the tree observer against the truth.
#[derive(Clone, Debug)]
struct Agreement {
    /// When the contenders had all ended their rounds (nothing changes
    /// under the root after, but for nodes of sessions abandoned earlier).
    quiet: Instant,
    /// When the truth was last seen to change (`quiet` if never).
    changed: Instant,
    /// When the observer's view, current, first equalled the truth.
    agreed: Option<Instant>,
    /// How long it had to (from the later of `quiet` and `changed`).
    bound: Duration,
    /// The last difference seen, in words.
    difference: String,
    /// When the check ended (views after it are not judged: the
    /// frameworks close).
    ended: Instant,
}

/// A fault injected on a contender's connection: from `start` to `end`
/// (the same instant for a reset).
#[derive(Clone, Copy, Debug)]
struct FaultWindow {
    who: usize,
    start: Instant,
    end: Instant,
}

/// What a run saw, per kind, and what it found wrong.
#[derive(Debug, Default)]
pub struct Report {
    logs: BTreeMap<Kind, Log>,
    pub faults: BTreeMap<&'static str, u64>,
    pub leftover_nodes: Vec<String>,
    pub leftover_sessions: usize,
    pub seed: u64,
    pub elapsed: Duration,
    /// Cohort mode: the passes the contenders' frameworks made
    /// (`lock_passes`), all together.
    pub passes: Option<u64>,
    started: Option<Instant>,
    timeline: Vec<(Instant, &'static str, usize)>,
    /// The session timeout of every framework of the run.
    session_timeout: Duration,
    /// Sessions a framework had when it was closed that the server still
    /// held right after the close (on the embedded server and simulated).
    pub unclosed_sessions: usize,
    /// [`Config::read_lag`].
    read_lag: Duration,
    /// [`Config::release_bound`].
    release_bound: Duration,
    /// Sessions the server expired, each with the instant its expiry was
    /// confirmed (its ephemeral nodes gone by then).
    expiries: Vec<(i64, Instant)>,
    /// The faults injected on the contenders (not on the observers).
    windows: Vec<FaultWindow>,
    /// What the tree observer showed.
    tree: TreeLog,
    /// [`Config::stuck`].
    stuck: bool,
    /// [`Config::loss_seen_at_once`].
    loss_seen_at_once: bool,
    /// [`Config::strict_bounds`].
    strict_bounds: bool,
}

impl Report {
    /// Every broken rule, in words (empty when the run was safe).
    pub fn violations(&self) -> Vec<String> {
        let mut found = Vec::new();
        for (kind, log) in &self.logs {
            let limit = kind.holders();
            let most = max_concurrent(&log.intervals);
            if most > limit {
                found.push(format!(
                    "{kind:?}: {most} holders that obeyed the loss signal acted at once (limit {limit}){}",
                    self.explain_overlap(&log.intervals, limit)
                ));
            }
            let stale = log.accepted.iter().filter(|a| a.lost_before).count();
            if stale > 0 {
                found.push(format!("{kind:?}: {stale} stale write(s) accepted"));
            }
            if log.late_accepted > 0 {
                found.push(format!(
                    "{kind:?}: {} write(s) through a released hold's fence accepted",
                    log.late_accepted
                ));
            }
            if limit == 1 {
                let mut writes = log.accepted.clone();
                writes.sort_by_key(|a| a.value);
                let regressions = writes
                    .windows(2)
                    .filter(|w| w[1].token < w[0].token)
                    .count();
                if regressions > 0 {
                    found.push(format!(
                        "{kind:?}: {regressions} accepted write(s) from an older holder after a newer one"
                    ));
                }
                if log.interference > 0 {
                    found.push(format!(
                        "{kind:?}: {} time(s) someone else wrote during a valid hold",
                        log.interference
                    ));
                }
            }
            if !log.late_acquires.is_empty() {
                found.push(format!(
                    "{kind:?}: {} acquire(s) overran their deadline: {:?}",
                    log.late_acquires.len(),
                    log.late_acquires
                ));
            }
            if log.acquired == 0 {
                found.push(format!("{kind:?}: never acquired (the run proved nothing)"));
            }
            if !log.slow_releases.is_empty() {
                found.push(format!(
                    "{kind:?}: {} release(s) of a lost hold took longer than {:?}: {:?}",
                    log.slow_releases.len(),
                    self.release_bound,
                    log.slow_releases
                ));
            }
            if !log.ended_handouts.is_empty() {
                found.push(format!(
                    "{kind:?}: the leadership-changes stream handed out {} ended term(s): {:?}",
                    log.ended_handouts.len(),
                    log.ended_handouts
                ));
            }
            if let Some(zero) = self.started {
                found.extend(
                    stuck::violations(&log.stuck, zero, self.loss_seen_at_once, self.strict_bounds)
                        .into_iter()
                        .map(|v| format!("{kind:?}: {v}")),
                );
            }
            if !log.early_bounds.is_empty() {
                let shown: Vec<&String> = log.early_bounds.iter().take(4).collect();
                found.push(format!(
                    "{kind:?}: {} bound(s) passed before their time: {shown:?}",
                    log.early_bounds.len()
                ));
            }
            if kind.is_election() {
                found.extend(
                    term_order_violations(&log.intervals)
                        .into_iter()
                        .chain(self.observer_violations(log))
                        .map(|v| format!("{kind:?}: {v}")),
                );
            } else if limit == 1 {
                found.extend(
                    hold_order_violations(&log.intervals)
                        .into_iter()
                        .map(|v| format!("{kind:?}: {v}")),
                );
            }
        }
        found.extend(self.tree_violations());
        if self.stuck && self.logs.values().all(|log| log.stuck.is_empty()) {
            found.push(
                "stuck holders on, yet no hold got stuck (the run proved nothing of the bounds)"
                    .to_owned(),
            );
        }
        if self.passes == Some(0) {
            found.push("cohort mode, yet no node was passed (the run proved nothing)".to_owned());
        }
        if !self.leftover_nodes.is_empty() {
            found.push(format!("nodes left behind: {:?}", self.leftover_nodes));
        }
        if self.unclosed_sessions > 0 {
            found.push(format!(
                "{} framework session(s) still open right after the framework's close",
                self.unclosed_sessions
            ));
        }
        if self.leftover_sessions > 0 {
            found.push(format!("{} session(s) left behind", self.leftover_sessions));
        }
        found
    }
}

impl Report {
    /// What happened in the run, one line per event, every instant as the
    /// time since the run began (a simulation's replay gives the same lines
    /// for the same seed; `zk-curator-sim` hashes them).
    pub fn event_log(&self) -> Vec<String> {
        let Some(zero) = self.started else {
            return Vec::new();
        };
        let at = |i: Instant| i.saturating_duration_since(zero).as_micros();
        let mut lines = Vec::new();
        for (when, fault, who) in &self.timeline {
            lines.push(format!("{} fault {fault} on {who}", at(*when)));
        }
        for (session, when) in &self.expiries {
            lines.push(format!("{} expired {session:#x}", at(*when)));
        }
        for (kind, log) in &self.logs {
            for i in &log.intervals {
                lines.push(format!(
                    "{kind:?} hold by {}.{} token {:?} node {:?} from {} to {} loss {:?} obeyed {}",
                    i.who,
                    i.task,
                    i.token,
                    i.node,
                    at(i.start),
                    at(i.end),
                    i.loss,
                    i.obeyed
                ));
            }
            for j in &log.stuck {
                lines.push(format!(
                    "{kind:?} stuck {}.{} at {} end {} seen {} lost {:?} gone {:?} left {:?}",
                    j.who,
                    j.task,
                    at(j.stuck_at),
                    at(j.end),
                    at(j.end_seen),
                    j.lost.map(|(loss, when)| (loss, at(when))),
                    j.gone_at.iter().map(|g| g.map(at)).collect::<Vec<_>>(),
                    j.left
                ));
            }
            for a in &log.accepted {
                lines.push(format!(
                    "{kind:?} write {} token {:?} lost before {}",
                    a.value, a.token, a.lost_before
                ));
            }
            for seen in &log.observed {
                lines.push(format!(
                    "{kind:?} observed {:?} asked {} at {}",
                    seen.what,
                    at(seen.asked),
                    at(seen.at)
                ));
            }
            lines.push(format!(
                "{kind:?} handed out {} ended {:?}",
                log.handed_out, log.ended_handouts
            ));
            lines.push(format!(
                "{kind:?} acquired {} timed out {} errors {} refused {} interference {} pauses {} ({} of the host) late writes {}/{} stuck writes {}/{} early {:?} losses {:?}",
                log.acquired,
                log.timed_out,
                log.acquire_errors,
                log.refused,
                log.interference,
                log.pauses,
                log.host_pauses,
                log.late_accepted,
                log.late_writes,
                log.stuck_writes_lost,
                log.stuck_writes,
                log.early_bounds,
                log.losses
            ));
        }
        for seen in &self.tree.views {
            lines.push(format!(
                "{} tree view current {} listings {} events {} holders {}",
                at(seen.at),
                seen.current,
                seen.listings,
                seen.events,
                seen.holders.len()
            ));
        }
        if let Some(healed) = self.tree.healed {
            lines.push(format!("{} healed", at(healed)));
        }
        if let Some(agreement) = &self.tree.agreement {
            lines.push(format!(
                "tree agreement quiet {} changed {} agreed {:?} ended {}",
                at(agreement.quiet),
                at(agreement.changed),
                agreement.agreed.map(at),
                at(agreement.ended)
            ));
        }
        lines.push(format!(
            "end {} leftover nodes {:?} sessions {} passes {:?}",
            self.elapsed.as_micros(),
            self.leftover_nodes,
            self.leftover_sessions,
            self.passes
        ));
        lines
    }

    /// What an election's observer got wrong: each report of a leader
    /// that was stale by one of the rules of the module's notes ("The
    /// observer's contract"), and an observer that never named a leader.
    fn observer_violations(&self, log: &Log) -> Vec<String> {
        let Some(zero) = self.started else {
            return Vec::new();
        };
        let at = |i: Instant| i.saturating_duration_since(zero);
        // The terms' nodes: creation zxid, path, and when the first term on
        // each began.
        let mut began: BTreeMap<i64, (Instant, &str)> = BTreeMap::new();
        for term in &log.intervals {
            let (Some(node), zxid) = (&term.node, term.token.get()) else {
                continue;
            };
            let entry = began.entry(zxid).or_insert((term.start, node));
            entry.0 = entry.0.min(term.start);
        }
        let mut stale = Vec::new();
        let mut highest: Option<(i64, Instant)> = None;
        let mut leaders = 0;
        for seen in &log.observed {
            let Observation::Leader(leader) = &seen.what else {
                continue;
            };
            leaders += 1;
            let zxid = leader.token.get();
            let named = format!(
                "{} (token {}, session {:#x}) asked at {:?}, handed out at {:?}",
                leader.node_path,
                leader.token,
                leader.session,
                at(seen.asked),
                at(seen.at)
            );
            // Rule 1: a node created later led before the read began (on
            // an ensemble, before the read's server may lag behind).
            let later = began
                .range(zxid + 1..)
                .filter(|(_, (start, _))| *start + self.read_lag < seen.asked)
                .min_by_key(|(_, (start, _))| *start);
            if let Some((later, (start, node))) = later {
                stale.push(format!(
                    "{named}: {node} (token {later}) had led since {:?}",
                    at(*start)
                ));
            }
            // Rule 2: the node's session was expired before the read began.
            if let Some((_, expired)) = self.expiries.iter().find(|(session, expired)| {
                *session == leader.session && *expired + self.read_lag < seen.asked
            }) {
                stale.push(format!(
                    "{named}: its session was expired at {:?}",
                    at(*expired)
                ));
            }
            // Rule 3: the observer had named a node created later.
            if let Some((before, when)) = highest.filter(|(before, _)| *before > zxid) {
                stale.push(format!(
                    "{named}: the observer had named token {before} at {:?}",
                    at(when)
                ));
            }
            if highest.is_none_or(|(before, _)| before < zxid) {
                highest = Some((zxid, seen.at));
            }
            // Rule 5: the observer's client had been told the node was
            // deleted (simulated links only).
            if log
                .deletions_told
                .get(&*leader.node_path)
                .is_some_and(|told| *told < seen.seq)
            {
                stale.push(format!(
                    "{named}: the observer's client had been told of the node's deletion before"
                ));
            }
            // Rule 4: a proclaimed value is the named participant's own.
            if leader.proclaimed && leader.value != value_of(&leader.id).as_bytes() {
                stale.push(format!(
                    "{named}: proclaimed value {:?} is not {}'s",
                    String::from_utf8_lossy(&leader.value),
                    leader.id
                ));
            }
        }
        let mut found = Vec::new();
        if !stale.is_empty() {
            let shown: Vec<&String> = stale.iter().take(5).collect();
            found.push(format!(
                "the observer reported {} leader(s) whose term was over: {shown:?}",
                stale.len()
            ));
        }
        if leaders == 0 {
            found.push("the observer never reported a leader (it proved nothing)".to_owned());
        }
        found
    }

    /// What the tree observer got wrong, by the rules of the module's
    /// notes ("The tree observer's contract"): a holder shown after its
    /// client was told the node was deleted (rule 6), and, once the faults
    /// healed, a view not current for longer than the bound, or not equal
    /// to the truth within it (rule 7).
    fn tree_violations(&self) -> Vec<String> {
        let Some(zero) = self.started else {
            return Vec::new();
        };
        let at = |i: Instant| i.saturating_duration_since(zero);
        let tree = &self.tree;
        let mut found = Vec::new();
        // Rule 6: a holder whose deletion the client had been handed before
        // the view was asked for (so before it was published).
        let mut stale = Vec::new();
        for (i, seen) in tree.views.iter().enumerate() {
            if !seen.current {
                continue;
            }
            for node in &seen.holders {
                if tree
                    .deletions_told
                    .get(node)
                    .is_some_and(|told| *told < seen.asked)
                {
                    stale.push(format!("{node} in view #{i} at {:?}", at(seen.at)));
                }
            }
        }
        if !stale.is_empty() {
            let shown: Vec<&String> = stale.iter().take(5).collect();
            found.push(format!(
                "the tree observer showed {} holder(s) after its client had been told of the node's deletion: {shown:?}",
                stale.len()
            ));
        }
        if !tree.views.iter().any(|seen| seen.current) {
            found.push("the tree observer was never current (it proved nothing)".to_owned());
        }
        // Rule 7.
        let (Some(healed), Some(agreement)) = (tree.healed, &tree.agreement) else {
            return found;
        };
        let bound = agreement.bound;
        let before = tree.views.iter().rev().find(|seen| seen.at <= healed);
        let mut down_since = match before {
            Some(seen) if seen.current => None,
            _ => Some(healed),
        };
        let mut gaps = Vec::new();
        let after = tree
            .views
            .iter()
            .filter(|seen| seen.at > healed && seen.at <= agreement.ended);
        for seen in after {
            match (seen.current, down_since) {
                (false, None) => down_since = Some(seen.at),
                (true, Some(since)) => {
                    if seen.at.saturating_duration_since(since) > bound {
                        gaps.push(format!("{:?}..{:?}", at(since), at(seen.at)));
                    }
                    down_since = None;
                }
                _ => {}
            }
        }
        if let Some(since) = down_since {
            if agreement.ended.saturating_duration_since(since) > bound {
                gaps.push(format!(
                    "{:?}..(still at {:?})",
                    at(since),
                    at(agreement.ended)
                ));
            }
        }
        if !gaps.is_empty() {
            found.push(format!(
                "after the faults healed at {:?}, the tree observer was not current for longer than {bound:?}: {gaps:?}",
                at(healed)
            ));
        }
        if agreement.agreed.is_none() {
            found.push(format!(
                "the tree observer's view did not agree with lock_participants within {bound:?} of the quiet at {:?} (the truth last changed at {:?}): {}",
                at(agreement.quiet),
                at(agreement.changed),
                agreement.difference
            ));
        }
        found
    }

    /// The [`LockLoss::Stale`] losses of `log` inside a fault window of
    /// their holder (up to a session timeout after its end), and outside
    /// any (flaps).
    fn stale_split(&self, log: &Log) -> (usize, usize) {
        let margin = self.session_timeout;
        let inside = log
            .stale_losses
            .iter()
            .filter(|(who, when)| {
                self.windows
                    .iter()
                    .any(|w| w.who == *who && w.start <= *when && *when <= w.end + margin)
            })
            .count();
        (inside, log.stale_losses.len() - inside)
    }

    /// The observer's reports per kind: leader, no leader, unknown.
    fn observed_counts(log: &Log) -> (usize, usize, usize) {
        let count =
            |f: fn(&Observation) -> bool| log.observed.iter().filter(|s| f(&s.what)).count();
        (
            count(|o| matches!(o, Observation::Leader(_))),
            count(|o| matches!(o, Observation::NoLeader)),
            count(|o| matches!(o, Observation::Unknown)),
        )
    }

    /// The holds active together at the first instant beyond `limit`, and
    /// the faults around it, for the record.
    fn explain_overlap(&self, intervals: &[Interval], limit: usize) -> String {
        let Some(zero) = self.started else {
            return String::new();
        };
        let at = |i: Instant| i.saturating_duration_since(zero);
        let obeyed: Vec<&Interval> = intervals.iter().filter(|i| i.obeyed).collect();
        for candidate in &obeyed {
            let moment = candidate.start;
            let active: Vec<&&Interval> = obeyed
                .iter()
                .filter(|i| i.start <= moment && moment < i.end)
                .collect();
            if active.len() > limit {
                let first = active.iter().map(|i| i.start).min().unwrap_or(moment);
                let holds: Vec<String> = active
                    .iter()
                    .map(|i| {
                        format!(
                            "#{}/{} token {} {:?}..{:?} ended by {:?}",
                            i.who,
                            i.task,
                            i.token,
                            at(i.start),
                            at(i.end),
                            i.loss
                        )
                    })
                    .collect();
                let faults: Vec<String> = self
                    .timeline
                    .iter()
                    .filter(|(t, _, _)| *t + Duration::from_secs(8) > first && *t <= moment)
                    .map(|(t, what, who)| match who {
                        // The ensemble's own faults concern everyone.
                        &usize::MAX => format!("{what} {:?}", at(*t)),
                        who => format!("{what}@#{who} {:?}", at(*t)),
                    })
                    .collect();
                return format!(": {holds:?}; faults before: {faults:?}");
            }
        }
        String::new()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "chaos run: {:.1?}, seed {}, faults {:?}",
            self.elapsed, self.seed, self.faults
        )?;
        if let Some(passes) = self.passes {
            writeln!(f, "cohort: {passes} pass(es) in all")?;
        }
        writeln!(
            f,
            "{:<11} {:>6} {:>6} {:>8} {:>8} {:>7} {:>6} {:>8} {:>7} {:>6} {:>8} {:>11} {:>9}  losses",
            "kind",
            "holds",
            "passed",
            "accepted",
            "refused",
            "stale",
            "late",
            "overlaps",
            "timeout",
            "errors",
            "pauses",
            "observed",
            "stale i/o"
        )?;
        for (kind, log) in &self.logs {
            let stale = log.accepted.iter().filter(|a| a.lost_before).count();
            let observed = match Self::observed_counts(log) {
                _ if !kind.is_election() => "-".to_owned(),
                (leader, none, unknown) => format!("{leader}/{none}/{unknown}"),
            };
            let (inside, outside) = self.stale_split(log);
            writeln!(
                f,
                "{:<11} {:>6} {:>6} {:>8} {:>8} {:>7} {:>6} {:>8} {:>7} {:>6} {:>8} {:>11} {:>9}  {:?}",
                format!("{kind:?}"),
                log.acquired,
                log.intervals.iter().filter(|i| i.token.pass() > 0).count(),
                log.accepted.len(),
                log.refused,
                stale + log.late_accepted as usize,
                log.late_writes,
                max_concurrent(&log.intervals).saturating_sub(kind.holders()),
                log.timed_out,
                log.acquire_errors,
                log.pauses,
                observed,
                format!("{inside}/{outside}"),
                log.losses
            )?;
        }
        let (inside, outside) = self
            .logs
            .values()
            .map(|log| self.stale_split(log))
            .fold((0, 0), |(i, o), (a, b)| (i + a, o + b));
        let valued = self
            .logs
            .values()
            .flat_map(|log| &log.observed)
            .filter(|seen| seen.what.leader().is_some_and(|l| l.proclaimed))
            .count();
        writeln!(
            f,
            "observed: leader/no leader/unknown reports of each election's observer \
             ({valued} leader report(s) with a proclaimed value); \
             Stale losses: {inside} inside a fault window (+{:?}), {outside} outside (flaps)",
            self.session_timeout
        )?;
        for (kind, log) in &self.logs {
            if log.stuck.is_empty() {
                continue;
            }
            let (judged, by_bound, otherwise, lost_after, gone_after) = stuck::figures(&log.stuck);
            writeln!(
                f,
                "stuck {:<11} {judged} hold(s): {by_bound} lost by a bound, {otherwise} lost otherwise first; \
                 lost() at most {lost_after:?} after the bound's end, node gone at most {gone_after:?} after; \
                 {} of {} write(s) once woken found the hold lost (all refused)",
                format!("{kind:?}"),
                log.stuck_writes_lost,
                log.stuck_writes
            )?;
            if let Some(zero) = self.started {
                let left = stuck::left_after_other_loss(&log.stuck, zero);
                if !left.is_empty() {
                    writeln!(
                        f,
                        "  {} stuck hold(s) lost otherwise first kept their node past the bound (the library leaves it to a release that never comes): {left:?}",
                        left.len()
                    )?;
                }
            }
        }
        let tree = &self.tree;
        let current = tree.views.iter().filter(|seen| seen.current).count();
        let listings = tree.views.last().map_or(0, |seen| seen.listings);
        let agreed = tree.agreement.as_ref().and_then(|a| {
            a.agreed
                .map(|at| at.saturating_duration_since(a.quiet.max(a.changed)))
        });
        writeln!(
            f,
            "tree observer: {} view(s), {current} current, {listings} listing(s); agreed with the truth {:?} after the quiet",
            tree.views.len(),
            agreed
        )?;
        write!(
            f,
            "left behind: {} node(s), {} session(s)",
            self.leftover_nodes.len(),
            self.leftover_sessions
        )
    }
}

/// What is wrong with an election's terms: each term (one fencing token:
/// its election node) must belong to one contender, and a term that began
/// after another must have a greater token.
fn term_order_violations(intervals: &[Interval]) -> Vec<String> {
    let mut found = Vec::new();
    // A term seen late (see `Interval::seen_late`) has no start to order.
    let mut terms: BTreeMap<FencingToken, (Option<Instant>, usize)> = BTreeMap::new();
    for section in intervals {
        let start = (!section.seen_late).then_some(section.start);
        let term = terms.entry(section.token).or_insert((start, section.who));
        if term.1 != section.who {
            found.push(format!(
                "term {} led by #{} and #{}",
                section.token, term.1, section.who
            ));
        }
        term.0 = match (term.0, start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    let mut by_start: Vec<(Instant, FencingToken)> = terms
        .iter()
        .filter_map(|(token, (start, _))| start.map(|start| (start, *token)))
        .collect();
    by_start.sort();
    let regressions: Vec<String> = by_start
        .windows(2)
        .filter(|w| w[1].1 <= w[0].1)
        .map(|w| format!("{} after {}", w[1].1, w[0].1))
        .collect();
    if !regressions.is_empty() {
        found.push(format!(
            "{} term(s) began with a token not above the previous term's: {regressions:?}",
            regressions.len()
        ));
    }
    found
}

/// What is wrong with the order of an exclusive lock's holds: each hold has
/// a token of its own (a node, or a pass of one), and a hold that began
/// after another has a greater token, compared whole (zxid, then pass
/// count). Holds whose token could not be read (lost before the holder
/// looked: token 0) are left out, and holds seen late (their holder's
/// place was stopped while it waited: see [`Interval::seen_late`]) are left
/// out of the order, not of the count of tokens given twice.
fn hold_order_violations(intervals: &[Interval]) -> Vec<String> {
    let read = || intervals.iter().filter(|i| i.token != FencingToken::new(0));
    // Every hold has a token of its own, seen late or not.
    let mut tokens: Vec<FencingToken> = read().map(|i| i.token).collect();
    let mut holds: Vec<(Instant, FencingToken, usize, usize)> = read()
        .filter(|i| !i.seen_late)
        .map(|i| (i.start, i.token, i.who, i.task))
        .collect();
    holds.sort();
    let mut found = Vec::new();
    tokens.sort();
    let repeated = tokens.windows(2).filter(|w| w[0] == w[1]).count();
    if repeated > 0 {
        found.push(format!("{repeated} token(s) given to two holds"));
    }
    let regressions: Vec<String> = holds
        .windows(2)
        .filter(|w| w[1].1 <= w[0].1)
        .map(|w| {
            format!(
                "{} (#{}/{}) after {} (#{}/{})",
                w[1].1, w[1].2, w[1].3, w[0].1, w[0].2, w[0].3
            )
        })
        .collect();
    if !regressions.is_empty() {
        found.push(format!(
            "{} hold(s) began with a token not above the previous hold's: {regressions:?}",
            regressions.len()
        ));
    }
    found
}

/// The most intervals of holders that obeyed the loss signal, of different
/// holders, active at one instant.
fn max_concurrent(intervals: &[Interval]) -> usize {
    let mut edges: Vec<(Instant, i32)> = intervals
        .iter()
        .filter(|i| i.obeyed)
        .flat_map(|i| [(i.start, 1), (i.end, -1)])
        .collect();
    // Ends before starts at the same instant.
    edges.sort_by_key(|&(at, delta)| (at, delta));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    most.max(0) as usize
}

/// A lock of one kind, as one contender sees it.
#[derive(Clone)]
enum Lock {
    Mutex(InterProcessMutex),
    Write(WriteLock),
    Semaphore(InterProcessSemaphoreV2),
    Multi(InterProcessMultiLock),
    Latch(Arc<LatchSlot>),
}

/// A hold of one kind.
enum Taken {
    Guard(MutexGuard),
    Task(InterProcessMutex),
    Write(WriteGuard),
    Lease(Lease),
    Multi(InterProcessMultiLock),
    /// A leader's term: of a contender's latch (given up by closing that
    /// latch for a new one), or of its selector (given up by the selector).
    Term(LeaderTerm, Option<Arc<LatchSlot>>),
}

/// A contender's latch, started, and replaced by a new started one when
/// the contender gives leadership up (a closed latch cannot start again).
/// A term that is lost is not given up: the latch queues again by itself.
struct LatchSlot {
    shared: Arc<Shared>,
    framework: Framework,
    path: String,
    id: String,
    current: Mutex<LeaderLatch>,
}

impl LatchSlot {
    fn start(
        shared: &Arc<Shared>,
        framework: &Framework,
        path: &str,
        id: String,
    ) -> Arc<LatchSlot> {
        let latch = LeaderLatch::new(framework.clone(), path, id.clone())
            .unwrap()
            .with_value(value_of(&id));
        latch.start().unwrap();
        let watched = latch.clone();
        watch_leadership(shared.clone(), Kind::Latch, move || {
            watched.leadership_changes()
        });
        Arc::new(LatchSlot {
            shared: shared.clone(),
            framework: framework.clone(),
            path: path.to_owned(),
            id,
            current: Mutex::new(latch),
        })
    }

    fn latch(&self) -> LeaderLatch {
        self.current.lock().unwrap().clone()
    }

    /// Closes the latch (its node goes before this returns; a close that
    /// fails leaves the node to its session) and queues a new one.
    async fn give_up(&self) {
        let _ = self.latch().close().await;
        let next = LeaderLatch::new(self.framework.clone(), &self.path, self.id.clone())
            .unwrap()
            .with_value(value_of(&self.id));
        next.start().unwrap();
        let watched = next.clone();
        watch_leadership(self.shared.clone(), Kind::Latch, move || {
            watched.leadership_changes()
        });
        *self.current.lock().unwrap() = next;
    }
}

impl Taken {
    fn lost(&self) -> BoxFuture<'static, LockLoss> {
        match self {
            Taken::Guard(g) => g.lost().boxed(),
            Taken::Task(m) => m.lost().boxed(),
            Taken::Write(g) => g.lost().boxed(),
            Taken::Lease(l) => l.lost().boxed(),
            Taken::Multi(m) => m.lost(),
            Taken::Term(t, _) => t.lost().boxed(),
        }
    }

    fn fence(&self) -> zk_curator::Result<Fence> {
        match self {
            Taken::Guard(g) => g.fence(),
            Taken::Task(m) => m.fence(),
            Taken::Write(g) => g.fence(),
            Taken::Lease(l) => l.fence(),
            Taken::Multi(m) => m.fence(),
            Taken::Term(t, _) => t.fence(),
        }
    }

    fn token(&self) -> FencingToken {
        match self {
            Taken::Guard(g) => g.fencing_token(),
            Taken::Task(m) => m.fencing_token().unwrap_or(FencingToken::new(0)),
            Taken::Write(g) => g.fencing_token(),
            Taken::Lease(l) => l.fencing_token(),
            // The highest member token orders multi-lock holders.
            Taken::Multi(m) => m
                .fence()
                .ok()
                .and_then(|f| f.fencing_tokens().into_iter().max())
                .unwrap_or(FencingToken::new(0)),
            Taken::Term(t, _) => t.fencing_token(),
        }
    }

    /// Says the hold is making progress (nothing for an unbounded hold).
    fn progress(&self) {
        match self {
            Taken::Guard(g) => g.progress(),
            Taken::Task(m) => m.progress(),
            Taken::Write(g) => g.progress(),
            Taken::Lease(l) => l.progress(),
            Taken::Multi(m) => m.progress(),
            Taken::Term(t, _) => t.progress(),
        }
    }

    /// Why the hold ended, if it is known to have.
    fn loss(&self) -> Option<LockLoss> {
        match self {
            Taken::Guard(g) => g.loss(),
            Taken::Task(m) => zk_curator::InterProcessLock::loss(m),
            Taken::Write(g) => g.loss(),
            Taken::Lease(l) => l.loss(),
            Taken::Multi(m) => m.loss(),
            Taken::Term(t, _) => t.loss(),
        }
    }

    /// Whether the hold is known gone for good (not a mere suspension).
    fn gone(&self) -> bool {
        matches!(
            self.loss(),
            Some(LockLoss::SessionReplaced | LockLoss::NodeDeleted | LockLoss::Closed)
        )
    }

    async fn release(self) {
        let _ = match self {
            Taken::Guard(g) => g.release().await,
            Taken::Task(m) => m.release().await,
            Taken::Write(g) => g.release().await,
            Taken::Lease(l) => l.release().await,
            Taken::Multi(m) => m.release().await,
            Taken::Term(term, Some(latch)) if term.is_valid() => {
                latch.give_up().await;
                Ok(())
            }
            // A lost term: its latch queues again by itself. A selector's
            // term: its selector gives it up.
            Taken::Term(..) => Ok(()),
        };
    }
}

impl Lock {
    /// `None` on timeout.
    async fn take(&self, kind: Kind, timeout: Duration) -> zk_curator::Result<Option<Taken>> {
        Ok(match (self, kind) {
            (Lock::Mutex(m), Kind::MutexTask) => m
                .acquire_timeout(timeout)
                .await?
                .then(|| Taken::Task(m.clone())),
            (Lock::Mutex(m), _) => m.try_lock_for(timeout).await?.map(Taken::Guard),
            (Lock::Write(w), _) => w.try_lock_for(timeout).await?.map(Taken::Write),
            (Lock::Semaphore(s), _) => s.acquire_timeout(timeout).await?.map(Taken::Lease),
            (Lock::Multi(m), _) => m
                .acquire_timeout(timeout)
                .await?
                .then(|| Taken::Multi(m.clone())),
            (Lock::Latch(slot), _) => slot
                .latch()
                .await_leadership_timeout(timeout)
                .await?
                .map(|term| Taken::Term(term, Some(slot.clone()))),
        })
    }
}

struct Contender {
    /// One fault proxy per server (in member order): the client's faults
    /// are on all of them at once.
    proxies: Vec<Box<dyn Link>>,
    framework: Framework,
    /// Where its framework and the tasks that use it run (its link's).
    place: Option<Arc<dyn Place>>,
}

impl Contender {
    /// A started framework, connected through fault proxies of its own, one
    /// per server of `target` (the client picks among them as it would
    /// among the servers).
    async fn connect(
        target: Target<'_>,
        config: &Config,
        cohort: Option<CohortPolicy>,
    ) -> Contender {
        let mut proxies: Vec<Box<dyn Link>> = Vec::new();
        for address in target.addresses() {
            proxies.push(Box::new(FaultProxy::start(address).await.unwrap()));
        }
        if let Target::Sim(sim) = target {
            proxies.push(sim.link());
        }
        let connect = proxies
            .iter()
            .map(|p| p.connect_string())
            .collect::<Vec<_>>()
            .join(",");
        // On an ensemble, a silent server is given up sooner, so that a
        // session moves within the faults' windows.
        let connection_timeout = match target {
            Target::Server(_) | Target::Sim(_) => Duration::from_secs(3),
            Target::Ensemble(_) => Duration::from_secs(1),
        };
        let session_timeout = config.session_timeout;
        let place = proxies.iter().find_map(|p| p.place());
        // Started where it runs: its session task is spawned by `start`.
        let framework = run_at(place.as_ref(), async move {
            let framework = Framework::builder()
                .connect_string(connect)
                .session_timeout(session_timeout)
                .connection_timeout(connection_timeout)
                .cohort(cohort)
                .build()
                .unwrap();
            framework.start().unwrap();
            framework
                .block_until_connected(Duration::from_secs(20))
                .await
                .unwrap();
            framework
        })
        .await
        .expect("the contender's place dropped its start");
        Contender {
            proxies,
            framework,
            place,
        }
    }

    /// Starts `task` where the contender runs; its output comes through
    /// the receiver (an error if it was dropped unfinished).
    fn spawn<T: Send + 'static>(
        &self,
        task: impl Future<Output = T> + Send + 'static,
    ) -> oneshot::Receiver<T> {
        spawn_at(self.place.as_ref(), task)
    }

    /// Runs `task` where the contender runs, and waits for it.
    async fn run<T: Send + 'static>(
        &self,
        task: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        run_at(self.place.as_ref(), task).await
    }

    /// Silence on every server's link (`true`), or traffic again.
    fn blackhole(&self, on: bool) {
        self.proxies.iter().for_each(|p| p.blackhole(on));
    }

    fn drop_connections(&self) {
        self.proxies.iter().for_each(|p| p.drop_connections());
    }
}

/// Starts `task` at `place` (the caller's runtime without one).
fn spawn_at<T: Send + 'static>(
    place: Option<&Arc<dyn Place>>,
    task: impl Future<Output = T> + Send + 'static,
) -> oneshot::Receiver<T> {
    let (tx, rx) = oneshot::channel();
    let task = async move {
        let _ = tx.send(task.await);
    };
    match place {
        Some(place) => place.spawn(task.boxed()),
        None => drop(tokio::spawn(task)),
    }
    rx
}

/// Runs `task` at `place` and waits for its output (`None`: dropped).
async fn run_at<T: Send + 'static>(
    place: Option<&Arc<dyn Place>>,
    task: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    spawn_at(place, task).await.ok()
}

struct Shared {
    config: Config,
    stop: AtomicBool,
    logs: Mutex<BTreeMap<Kind, Log>>,
    pause_requests: mpsc::UnboundedSender<usize>,
    rounds: AtomicU64,
    /// The faults injected on the contenders, process pauses included.
    windows: Mutex<Vec<FaultWindow>>,
    /// Where each contender runs (see [`Place`]).
    places: Vec<Option<Arc<dyn Place>>>,
    /// Each stop of a contender's whole place ([`Place::pause`]): who, from
    /// when, until when (`None`: not continued yet).
    host_pauses: Mutex<Vec<(usize, Instant, Option<Instant>)>>,
    /// What the tree observer showed.
    tree: Mutex<TreeLog>,
    /// Where stuck holders hand their holds to the checker (`None` once
    /// the contenders are done).
    stuck_holds: Mutex<Option<mpsc::UnboundedSender<stuck::StuckHold>>>,
}

impl Shared {
    fn log(&self, kind: Kind, f: impl FnOnce(&mut Log)) {
        f(self.logs.lock().unwrap().entry(kind).or_default());
    }

    /// Whether contender `who`'s place was stopped at some time since
    /// `since` ([`Place::pause`]): none of its holders could watch or act
    /// then, those that obey the loss signal included.
    fn host_paused_since(&self, who: usize, since: Instant) -> bool {
        self.host_pauses
            .lock()
            .unwrap()
            .iter()
            .any(|&(w, _, end)| w == who && end.is_none_or(|end| end >= since))
    }

    /// Records a fault on contender `who` from `start` until now.
    fn window(&self, who: usize, start: Instant) {
        let end = now();
        self.windows
            .lock()
            .unwrap()
            .push(FaultWindow { who, start, end });
    }
}

/// Runs the chaos against `server` and reports.
pub async fn run(server: &TestingServer, config: Config) -> Report {
    run_on(Target::Server(server), config).await
}

/// Runs the chaos against `target` and reports. On an ensemble, its own
/// faults join the schedule ([`ensemble::Fault`]).
pub async fn run_on(target: Target<'_>, config: Config) -> Report {
    let started = now();
    // Drawn from the thread's generator: unique among runs sharing a
    // server, and the same for the same seed in a simulation.
    let root = format!("/chaos-{:012x}", fastrand::u64(..) >> 16);
    let mut contenders = Vec::new();
    for _ in 0..config.contenders {
        contenders.push(Contender::connect(target, &config, config.cohort).await);
    }
    let raw = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(20))
        .connect(&target.connect_string())
        .await
        .unwrap();
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    raw.mkdir(&format!("{root}/data"), &open).await.unwrap();
    for kind in config.kinds() {
        raw.create(&counter_path(&root, kind), b"0 0", &open)
            .await
            .unwrap();
    }
    raw.create(&format!("{root}/data/late"), b"", &open)
        .await
        .unwrap();
    let (pause_tx, mut pause_rx) = mpsc::unbounded_channel();
    let (stuck_tx, stuck_rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        config: config.clone(),
        stop: AtomicBool::new(false),
        logs: Mutex::new(BTreeMap::new()),
        pause_requests: pause_tx,
        rounds: AtomicU64::new(0),
        windows: Mutex::new(Vec::new()),
        places: contenders.iter().map(|c| c.place.clone()).collect(),
        host_pauses: Mutex::new(Vec::new()),
        tree: Mutex::new(TreeLog::default()),
        stuck_holds: Mutex::new(Some(stuck_tx)),
    });
    // The stuck holds' checker, on the harness's runtime and session.
    let stuck_checker = tokio::spawn(stuck::checker(shared.clone(), raw.clone(), stuck_rx));
    let mut tasks = Vec::new();
    let mut selectors = Vec::new();
    for (who, contender) in contenders.iter().enumerate() {
        for kind in config.kinds() {
            for task in 0..config.tasks {
                let (shared, framework) = (shared.clone(), contender.framework.clone());
                let rng = Rng(config.seed
                    ^ ((who as u64 + 1) << 32)
                    ^ ((task as u64) << 16)
                    ^ (kind as u64 + 1));
                let root = root.clone();
                // Made where the contender runs: a recipe may start tasks
                // of its own, and its timers read that host's clock.
                if kind == Kind::Selector {
                    let selector = contender
                        .run(async move { start_selector(shared, who, framework, rng, &root) })
                        .await
                        .expect("the contender's place dropped its selector");
                    selectors.push((who, selector));
                    continue;
                }
                tasks.push(contender.spawn(async move {
                    let lock = lock_of(&shared, &framework, &root, kind, who);
                    contend(shared, (who, task), kind, framework, lock, rng, root).await;
                }));
            }
        }
    }

    // An observer beside each election, on a session of its own behind a
    // fault proxy of its own (after the contenders in `contenders`: the
    // faults reach them too).
    let mut observers = Vec::new();
    let mut watchers = Vec::new();
    let mut observer_seats = Vec::new();
    for kind in config.kinds().into_iter().filter(|k| k.is_election()) {
        let observer = Contender::connect(target, &config, None).await;
        observer_seats.push((kind, contenders.len()));
        let path = match kind {
            Kind::Latch => format!("{root}/latch"),
            _ => format!("{root}/selector"),
        };
        let watching = LeaderObserver::new(observer.framework.clone(), &path).unwrap();
        watchers.push(watching.clone());
        observers.push(observer.spawn(observe(shared.clone(), kind, watching)));
        contenders.push(observer);
    }
    // The tree observer over the whole root, likewise on a session and a
    // link of its own, after the election's observers (the ensemble's
    // faults aim at those by their place in `contenders`).
    let tree_host = Contender::connect(target, &config, None).await;
    let tree_seat = contenders.len();
    let tree = {
        let (framework, root) = (tree_host.framework.clone(), root.clone());
        tree_host
            .run(async move {
                let tree = TreeObserver::new(framework, &root, TREE_MAX_PATHS).unwrap();
                tree.start().unwrap();
                tree
            })
            .await
            .expect("the tree observer's place dropped its start")
    };
    let tree_follower = tree_host.spawn(follow_tree(shared.clone(), tree.changes()));
    contenders.push(tree_host);
    let holders = config.contenders;

    // The fault injector: random faults, plus the expiry each simulated
    // pause asks for. An observer gets a quarter of them.
    let mut faults: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut timeline: Vec<(Instant, &'static str, usize)> = Vec::new();
    let mut expiries = Vec::new();
    let mut rng = Rng(config.seed);
    let end = started + config.duration;
    let t = config.session_timeout;
    let mut next = now() + rng.millis(700, 2000);
    let mut ensemble_faults = rng.below(5);
    // The harness's faults drawn so far (`Config::skip_faults` numbers them).
    let mut drawn = 0u64;
    let mut skip = |config: &Config| {
        drawn += 1;
        config.skip_faults.contains(&(drawn - 1))
    };
    // The pauses a contender asks for run beside the injector, each for as
    // long as it takes (a session timeout and more), so that they never
    // starve the schedule: a contender paused is left out of the random
    // faults until its pause has ended.
    let paused = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let pauses = async {
        let mut running = futures::stream::FuturesUnordered::new();
        let mut done = Vec::new();
        loop {
            tokio::select! {
                who = pause_rx.recv(), if now() < end => {
                    let Some(who) = who else { break };
                    paused.borrow_mut().insert(who);
                    let (paused, shared) = (&paused, &shared);
                    let contender = &contenders[who];
                    running.push(async move {
                        let start = now();
                        let expired = expire(target, contender).await;
                        shared.window(who, start);
                        paused.borrow_mut().remove(&who);
                        (start, who, expired)
                    });
                }
                Some(ended) = running.next(), if !running.is_empty() => done.push(ended),
                _ = tokio::time::sleep_until(end), if running.is_empty() => break,
            }
        }
        while let Some(ended) = running.next().await {
            done.push(ended);
        }
        done
    };
    let injector = async {
        loop {
            if now() >= end {
                break;
            }
            tokio::time::sleep_until(next.min(end)).await;
            if now() >= end {
                break;
            }
            next = now() + rng.millis(700, 2000);
            // On an ensemble, every other fault is the ensemble's own (see
            // `ensemble::Fault::nth` for the order), aimed at the observers in
            // turn. (Cohort runs have no elections, so no observers.)
            if let (Target::Ensemble(cluster), 0) = (target, rng.below(2)) {
                let mut fault = ensemble::Fault::nth(ensemble_faults);
                if watchers.is_empty() && matches!(fault, ensemble::Fault::ObserverLag) {
                    ensemble_faults += 1;
                    fault = ensemble::Fault::nth(ensemble_faults);
                }
                let aimed = (ensemble_faults as usize / 2) % watchers.len().max(1);
                let observer = watchers
                    .get(aimed)
                    .map(|watcher| (&contenders[holders + aimed], watcher));
                ensemble_faults += 1;
                if skip(&config) {
                    continue;
                }
                let start = now();
                timeline.push((start, fault.name(), usize::MAX));
                fault.inject(cluster, &mut rng, observer, t).await;
                *faults.entry(fault.name()).or_default() += 1;
                // Every contender may feel it.
                for who in 0..holders {
                    shared.window(who, start);
                }
                continue;
            }
            let who = if contenders.len() > holders && rng.below(4) == 0 {
                holders + rng.below((contenders.len() - holders) as u64) as usize
            } else {
                rng.below(holders as u64) as usize
            };
            let contender = &contenders[who];
            let fault = rng.below(4);
            if skip(&config) || paused.borrow().contains(&who) {
                continue;
            }
            let start = now();
            timeline.push((
                start,
                ["blackhole", "reset", "stall", "expiry"][fault as usize],
                who,
            ));
            match fault {
                0 => {
                    contender.blackhole(true);
                    tokio::time::sleep(t + t / 2 + rng.millis(0, 500)).await;
                    contender.blackhole(false);
                    *faults.entry("blackhole").or_default() += 1;
                }
                1 => {
                    contender.drop_connections();
                    *faults.entry("reset").or_default() += 1;
                }
                2 => {
                    contender.blackhole(true);
                    tokio::time::sleep(t / 4).await;
                    contender.blackhole(false);
                    *faults.entry("stall").or_default() += 1;
                }
                _ => {
                    expiries.extend(expire(target, &contenders[who]).await);
                    *faults.entry("expiry").or_default() += 1;
                }
            }
            if who < holders {
                shared.window(who, start);
            }
        }
    };
    let (paused_runs, ()) = futures::future::join(pauses, injector).await;
    for (start, who, expired) in paused_runs {
        timeline.push((start, "pause+expiry", who));
        expiries.extend(expired);
        *faults.entry("pause+expiry").or_default() += 1;
    }
    timeline.sort_by_key(|(start, _, _)| *start);
    shared.stop.store(true, Ordering::SeqCst);
    for contender in &contenders {
        contender.blackhole(false);
    }
    if let Target::Ensemble(cluster) = target {
        ensemble::heal(cluster).await;
    }
    shared.tree.lock().unwrap().healed = Some(now());
    let passes = config.cohort.map(|_| {
        contenders
            .iter()
            .map(|c| c.framework.metrics().lock_passes())
            .sum()
    });
    // A selector's function stops at its next critical section; closing
    // the selector cancels the one running.
    for (who, selector) in &selectors {
        let selector = selector.clone();
        let close = contenders[*who].run(async move { selector.close().await });
        let _ = tokio::time::timeout(Duration::from_secs(30), close).await;
    }
    // Every contender ends its round; a round is bounded by its deadlines.
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
    }
    // No hold gets stuck any more: the checker ends with its last check
    // (each bounded by its deadlines).
    drop(shared.stuck_holds.lock().unwrap().take());
    let _ = tokio::time::timeout(Duration::from_secs(60), stuck_checker).await;
    // Quiet: the tree observer must agree with the truth (rule 7), then it
    // is closed where it runs, before the frameworks close.
    let agreement = tree_agreement(target, &config, &root, &tree).await;
    shared.tree.lock().unwrap().agreement = Some(agreement);
    let closing = tree.clone();
    let _ = contenders[tree_seat]
        .run(async move { closing.close().await })
        .await;
    drop(tree);
    // Each framework has its session back before it closes (bounded): a
    // fault begun just before the end (an expiry waits a session timeout)
    // can still be healing here. Its close must end the session it has.
    let mut closed_sessions = Vec::new();
    for contender in &contenders {
        let framework = contender.framework.clone();
        let closed = contender.run(async move {
            let _ = framework
                .block_until_connected(Duration::from_secs(10))
                .await;
            let session = framework.current_session().map(|s| s.id());
            framework.close().await;
            session
        });
        closed_sessions.extend(closed.await.flatten());
    }
    let server_sessions = |target: Target<'_>| match target {
        Target::Sim(sim) => Some(sim.session_ids()),
        Target::Server(server) => server.as_embedded().map(|e| e.session_ids()),
        Target::Ensemble(_) => None,
    };
    let unclosed_sessions = server_sessions(target).map_or(0, |live| {
        closed_sessions
            .iter()
            .filter(|id| live.contains(id))
            .count()
    });
    // Other sessions may still be alive for a while, and their nodes with
    // them: one a client abandoned (its handshake's answer lost, or given
    // up locally while the server was stalled) ends by timing out. They
    // get that long before anything counts as left behind.
    tokio::time::sleep(config.session_timeout + Duration::from_millis(500)).await;
    // Each observer's stream ends with its framework's close.
    for observer in observers {
        let _ = tokio::time::timeout(Duration::from_secs(30), observer).await;
    }
    // The tree observer's view channel ends with its last handle.
    let _ = tokio::time::timeout(Duration::from_secs(30), tree_follower).await;
    // What is left: participants under every lock path, and sessions.
    // On an ensemble `raw`'s session is a local one, lost if its member
    // was killed: the nodes are listed through a session made now.
    let checker = match target {
        Target::Server(_) | Target::Sim(_) => raw.clone(),
        Target::Ensemble(_) => zk::Client::connector()
            .with_session_timeout(Duration::from_secs(20))
            .connect(&target.connect_string())
            .await
            .unwrap(),
    };
    let mut leftover_nodes = Vec::new();
    for dir in lock_dirs(&root) {
        // As of now: on an ensemble, the checker's server may lag.
        let _ = checker.sync(&dir).await;
        match checker.list_children(&dir).await {
            Ok(children) => {
                leftover_nodes.extend(children.into_iter().map(|c| format!("{dir}/{c}")));
            }
            Err(zk::Error::NoNode) => {}
            Err(err) => leftover_nodes.push(format!("{dir}: not listed ({err})")),
        }
    }
    let leftover_sessions = match target {
        Target::Ensemble(cluster) => {
            // The harness's own sessions end with their clients.
            drop((checker, raw));
            ensemble::leftover_sessions(cluster, 0).await
        }
        Target::Sim(sim) => sim
            .session_ids()
            .into_iter()
            .filter(|&id| id != raw.session_id().0)
            .count(),
        Target::Server(server) => server.as_embedded().map_or(0, |e| {
            e.session_ids()
                .into_iter()
                .filter(|&id| id != raw.session_id().0)
                .count()
        }),
    };
    for (kind, seat) in observer_seats {
        let told: Vec<(String, u64)> = contenders[seat]
            .proxies
            .iter()
            .flat_map(|link| link.deletions_told())
            .collect();
        shared.log(kind, |log| {
            for (node, seq) in told {
                let first = log.deletions_told.entry(node).or_insert(seq);
                *first = (*first).min(seq);
            }
        });
    }
    let told: Vec<(String, u64)> = contenders[tree_seat]
        .proxies
        .iter()
        .flat_map(|link| link.deletions_told())
        .collect();
    let tree = {
        let mut tree = shared.tree.lock().unwrap();
        for (node, seq) in told {
            let first = tree.deletions_told.entry(node).or_insert(seq);
            *first = (*first).min(seq);
        }
        std::mem::take(&mut *tree)
    };
    let logs = std::mem::take(&mut *shared.logs.lock().unwrap());
    let windows = std::mem::take(&mut *shared.windows.lock().unwrap());
    Report {
        logs,
        faults,
        leftover_nodes,
        leftover_sessions,
        seed: config.seed,
        elapsed: since(started),
        passes,
        started: Some(started),
        timeline,
        session_timeout: config.session_timeout,
        read_lag: config.read_lag,
        release_bound: config.release_bound,
        unclosed_sessions,
        expiries,
        windows,
        tree,
        stuck: config.stuck,
        loss_seen_at_once: config.loss_seen_at_once,
        strict_bounds: config.strict_bounds,
    }
}

/// Records what an election's observer reports, until its framework is
/// closed: each report with the instant the harness began waiting for it
/// and the instant it came. With `ZK_CHAOS_BREAK=observer`, each is held
/// [`OBSERVER_BREAK_DELAY`] and then recorded as if just read.
async fn observe(shared: Arc<Shared>, kind: Kind, observer: LeaderObserver) {
    let mut changes = std::pin::pin!(observer.changes());
    // Bounded: the stream ends at the framework's close, which follows the
    // run; the count only guards against a stream that never ends.
    for _ in 0..1_000_000 {
        let asked = now();
        let Some(what) = changes.next().await else {
            return;
        };
        let mut seen = Seen {
            asked,
            at: now(),
            seq: sequence(),
            what,
        };
        if shared.config.break_observer {
            tokio::time::sleep(OBSERVER_BREAK_DELAY).await;
            seen.asked = now();
            seen.at = seen.asked;
            seen.seq = sequence();
        }
        shared.log(kind, |log| log.observed.push(seen));
    }
}

/// The most paths the tree observer follows: every lock and election of a
/// run, with room to spare.
const TREE_MAX_PATHS: usize = 64;

/// Records every view of the tree observer, until its last handle is
/// dropped: each with the [`sequence`] number of the moment the harness
/// began waiting for it (nothing else runs between taking a view and that
/// moment, so the next view was published after it) and the instant it
/// came. A slow reader sees the latest view, never a backlog.
async fn follow_tree(shared: Arc<Shared>, mut changes: watch::Receiver<Arc<TreeView>>) {
    loop {
        let asked = sequence();
        if changes.changed().await.is_err() {
            return;
        }
        let view = changes.borrow_and_update().clone();
        let holders = if view.current {
            view.paths
                .values()
                .flat_map(|path| &path.participants)
                .filter(|seen| seen.participant.role == Role::Holder)
                .map(|seen| seen.participant.node_path.clone())
                .collect()
        } else {
            Vec::new()
        };
        let seen = TreeSeen {
            asked,
            at: now(),
            current: view.current,
            listings: view.listings,
            events: view.events,
            holders,
        };
        shared.tree.lock().unwrap().views.push(seen);
    }
}

/// The lock and election paths of a run under `root` (a Curator
/// semaphore's as one path, as the tree observer shows it).
fn lock_paths(root: &str) -> Vec<String> {
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

/// Each path's participants: node and role, in queue order.
type Queues = BTreeMap<String, Vec<(String, Role)>>;

/// The truth: `lock_participants` of each path, read through `framework`
/// (each path synced first: on an ensemble its server may lag). `None` if
/// a read failed.
async fn read_truth(framework: &Framework, paths: &[String]) -> Option<Queues> {
    let client = framework.client().await.ok()?;
    let mut truth = BTreeMap::new();
    for path in paths {
        let _ = client.sync(path).await;
        let participants = lock_participants(framework, path, None).await.ok()?;
        let queue = participants
            .into_iter()
            .map(|p| (p.node_path, p.role))
            .collect();
        truth.insert(path.clone(), queue);
    }
    Some(truth)
}

/// What `view` shows of each of `paths` (nothing for a path it does not
/// follow).
fn view_queues(view: &TreeView, paths: &[String]) -> Queues {
    paths
        .iter()
        .map(|path| {
            let queue = view.paths.get(path).map_or_else(Vec::new, |seen| {
                seen.participants
                    .iter()
                    .map(|p| (p.participant.node_path.clone(), p.participant.role))
                    .collect()
            });
            (path.clone(), queue)
        })
        .collect()
}

/// Rule 7 of the tree observer's contract, at the wind-down: the faults
/// are over and every contender has ended its round. Reads the truth
/// through a framework of the harness's own (direct to the server) every
/// 50 ms until the tree observer's view, current, equals it; the truth may
/// still change (a session abandoned during the faults ends by timing out,
/// a lost hold's node is deleted in the background), so the observer has
/// the bound from the later of the check's start and the truth's last
/// change seen.
async fn tree_agreement(
    target: Target<'_>,
    config: &Config,
    root: &str,
    tree: &TreeObserver,
) -> Agreement {
    let quiet = now();
    let bound = config.session_timeout + config.read_lag;
    let checker = Framework::builder()
        .connect_string(target.connect_string())
        .session_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    checker.start().unwrap();
    let _ = checker.block_until_connected(Duration::from_secs(20)).await;
    let paths = lock_paths(root);
    let mut last: Option<Queues> = None;
    let mut changed = quiet;
    let mut agreed = None;
    let mut difference = "the truth could not be read".to_owned();
    loop {
        if let Some(truth) = read_truth(&checker, &paths).await {
            if last.as_ref().is_some_and(|last| *last != truth) {
                changed = now();
            }
            let view = tree.view();
            let shown = view_queues(&view, &paths);
            if view.current && shown == truth {
                agreed = Some(now());
                break;
            }
            difference = if view.current {
                let differing: Vec<String> = paths
                    .iter()
                    .filter(|path| shown.get(*path) != truth.get(*path))
                    .map(|path| {
                        format!(
                            "{path}: shown {:?}, read {:?}",
                            shown.get(path),
                            truth.get(path)
                        )
                    })
                    .collect();
                differing.join("; ")
            } else {
                "the view was not current".to_owned()
            };
            last = Some(truth);
        }
        if now() > quiet.max(changed) + bound || since(quiet) > Duration::from_secs(60) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    checker.close().await;
    Agreement {
        quiet,
        changed,
        agreed,
        bound,
        difference,
        ended: now(),
    }
}

/// The value participant `id` proclaims.
fn value_of(id: &str) -> String {
    format!("value of {id}")
}

/// How long after a bound's end, beyond the session timeout, a stuck
/// hold's node may still be there on one server (rule 8 of "Stuck
/// holders").
pub const STUCK_SLACK: Duration = Duration::from_secs(2);

/// How late `ZK_CHAOS_BREAK=observer` hands observations out.
pub const OBSERVER_BREAK_DELAY: Duration = Duration::from_secs(3);

fn counter_path(root: &str, kind: Kind) -> String {
    format!("{root}/data/{kind:?}")
}

fn lock_dirs(root: &str) -> Vec<String> {
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

fn lock_of(
    shared: &Arc<Shared>,
    framework: &Framework,
    root: &str,
    kind: Kind,
    who: usize,
) -> Lock {
    let fw = framework.clone();
    // A stuck holder's lock bounds its holds by default (see "Stuck
    // holders"); a semaphore's lease is bounded once granted.
    let bounds = stuck::bounds_of(&shared.config, who, kind).unwrap_or_default();
    let mutex = |mutex: InterProcessMutex| {
        mutex.set_hold_bounds(bounds).unwrap();
        Lock::Mutex(mutex)
    };
    let write = |rw: InterProcessReadWriteLock| {
        rw.set_hold_bounds(bounds).unwrap();
        Lock::Write(rw.write_lock())
    };
    match kind {
        Kind::MutexGuard => {
            mutex(InterProcessMutex::new(fw, &format!("{root}/mutex-guard")).unwrap())
        }
        Kind::MutexTask => {
            mutex(InterProcessMutex::new(fw, &format!("{root}/mutex-task")).unwrap())
        }
        Kind::WriteLock => {
            write(InterProcessReadWriteLock::new(fw, &format!("{root}/rw")).unwrap())
        }
        Kind::Semaphore2 => {
            Lock::Semaphore(InterProcessSemaphoreV2::new(fw, &format!("{root}/sem"), 2).unwrap())
        }
        Kind::MultiLock => {
            let multi = InterProcessMultiLock::from_paths(
                fw,
                &[&format!("{root}/multi-b"), &format!("{root}/multi-a")],
            )
            .unwrap();
            multi.set_hold_bounds(bounds).unwrap();
            Lock::Multi(multi)
        }
        Kind::KazooMutex => mutex(
            InterProcessMutex::with_layout(fw, &format!("{root}/kazoo-mutex"), Layout::Kazoo)
                .unwrap(),
        ),
        Kind::KazooWrite => write(
            InterProcessReadWriteLock::with_layout(
                fw,
                &format!("{root}/kazoo-rw"),
                Layout::Kazoo,
                format!("contender-{who}").as_bytes(),
            )
            .unwrap(),
        ),
        Kind::Latch => Lock::Latch(LatchSlot::start(
            shared,
            framework,
            &format!("{root}/latch"),
            format!("contender-{who}"),
        )),
        Kind::Selector => unreachable!("a selector runs its own critical sections"),
    }
}

/// Expires a contender's session on the server the way a server does it:
/// once the client has gone silent for the session timeout. The
/// contender's traffic is blackholed until its framework reports the
/// connection `Suspended` and the session timeout has passed, then the
/// server expires the session, then traffic flows again. (Expiring a session whose
/// client still hears the server, which ZooKeeper itself never does, gives
/// no client a chance to signal the loss before the next holder is let in;
/// only the fence protects there, and the process pauses test that.)
///
/// Returns the session and the instant its expiry was confirmed, when it
/// was.
async fn expire(target: Target<'_>, contender: &Contender) -> Option<(i64, Instant)> {
    let framework = &contender.framework;
    let silent_since = now();
    contender.blackhole(true);
    let silent = async {
        let mut states = framework.state_watcher();
        let _ = states
            .wait_for(|s| !s.is_some_and(|s| s.is_connected()))
            .await;
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), silent).await;
    // A server expires a session a whole session timeout after it last
    // heard from it, not the moment the client noticed the silence.
    tokio::time::sleep_until(silent_since + framework_session_timeout(contender)).await;
    let mut expired = None;
    if let Some(session) = framework.current_session() {
        let done = match (target, target.embedded()) {
            (Target::Sim(sim), _) => sim.expire_session(session.id()),
            (_, Some(embedded)) => embedded.expire_session(session.id()),
            (_, None) => zk_curator_testing::expire_session_within(
                &target.connect_string(),
                session.client(),
                Duration::from_secs(5),
            )
            .await
            .is_ok(),
        };
        expired = done.then(|| (session.id(), now()));
    }
    contender.blackhole(false);
    expired
}

fn framework_session_timeout(contender: &Contender) -> Duration {
    contender
        .framework
        .current_session()
        .map_or(Duration::from_secs(2), |s| s.client().session_timeout())
}

/// What became of a critical section's write.
enum Written {
    Accepted(Accepted),
    Refused,
    Interfered,
    Failed,
}

/// Where a contender's critical sections happen: who, on which kind, over
/// which session, on which counter.
struct Seat {
    shared: Arc<Shared>,
    who: usize,
    /// Which of the contender's tasks.
    task: usize,
    kind: Kind,
    framework: Framework,
    counter: String,
    /// The bounds of its holds, if it is a stuck holder (see "Stuck
    /// holders").
    bounds: Option<HoldBounds>,
    /// Its choice to get stuck, from a generator of its own, and how many
    /// sections in a row could have got stuck and did not.
    stuck_rng: Mutex<(Rng, u64)>,
}

impl Seat {
    /// Whether a bounded holder's section that could get stuck does: one
    /// in [`stuck::STUCK_ONE_IN`] at random, and at the latest the
    /// [`stuck::STUCK_ONE_IN`]th in a row (so that every run has some).
    fn gets_stuck(&self) -> bool {
        if self.bounds.is_none() {
            return false;
        }
        let mut choice = self.stuck_rng.lock().unwrap();
        let (rng, missed) = &mut *choice;
        let stuck = rng.below(stuck::STUCK_ONE_IN) == 0 || *missed + 1 >= stuck::STUCK_ONE_IN;
        *missed = if stuck { 0 } else { *missed + 1 };
        stuck
    }
}

async fn contend(
    shared: Arc<Shared>,
    (who, task): (usize, usize),
    kind: Kind,
    framework: Framework,
    lock: Lock,
    mut rng: Rng,
    root: String,
) {
    let deadline = 3 * shared.config.session_timeout;
    let counter = counter_path(&root, kind);
    let seat = Seat {
        bounds: stuck::bounds_of(&shared.config, who, kind),
        stuck_rng: Mutex::new((stuck::stuck_rng(&shared.config, who, task, kind), 0)),
        shared,
        who,
        task,
        kind,
        framework,
        counter,
    };
    let shared = &seat.shared;
    while !shared.stop.load(Ordering::SeqCst) {
        let asked = now();
        let taken = lock.take(kind, deadline).await;
        let waited = since(asked);
        // (A stop of the place lets no deadline fire until it ends.)
        if waited > deadline + Duration::from_millis(1500) && !shared.host_paused_since(who, asked)
        {
            shared.log(kind, |log| log.late_acquires.push(waited));
        }
        let taken = match taken {
            Ok(Some(Taken::Lease(lease))) => {
                // A lease is bounded from its grant on (a semaphore has no
                // default bounds).
                if let Some(bounds) = seat.bounds {
                    lease.bound(bounds).unwrap();
                }
                Taken::Lease(lease)
            }
            Ok(Some(taken)) => taken,
            Ok(None) => {
                shared.log(kind, |log| log.timed_out += 1);
                continue;
            }
            Err(err) => {
                tracing::debug!(?kind, who, %err, "acquire failed");
                shared.log(kind, |log| log.acquire_errors += 1);
                tokio::time::sleep(rng.millis(50, 200)).await;
                continue;
            }
        };
        let watch_loss = !shared.config.break_loss;
        if kind == Kind::Latch {
            let pause = rng.below(8) == 0;
            lead_term(&seat, &taken, Some(asked), &mut rng, watch_loss, pause).await;
        } else {
            // A pause expires the contender's session: as often per
            // contender with several tasks as with one.
            let pause = kind.holders() == 1 && rng.below(12 * shared.config.tasks as u64) == 0;
            let mut record = Record::begin(&seat, &taken, Some(asked));
            let mut lost = loss_signal(&taken, watch_loss);
            section(&seat, &taken, &mut record, &mut lost, &mut rng, pause).await;
            record.finished = true;
        }
        // Now and then, a holder that writes once more after its release,
        // through a fence it took before: the server must never see it
        // (with cohorting, the release may have passed the node on).
        let late = (!kind.is_election() && rng.below(4) == 0)
            .then(|| taken.fence().ok())
            .flatten();
        let lost = taken.loss().is_some();
        let releasing = now();
        taken.release().await;
        let took = since(releasing);
        // A multi-lock releases its two locks one after the other.
        let locks = if kind == Kind::MultiLock { 2 } else { 1 };
        if lost
            && took > shared.config.release_bound * locks
            && !shared.host_paused_since(who, releasing)
        {
            shared.log(kind, |log| log.slow_releases.push(took));
        }
        if let Some(fence) = late {
            let late_path = format!("{root}/data/late");
            let accepted = fence.set_data(&late_path, b"late", None).await.is_ok();
            shared.log(kind, |log| {
                log.late_writes += 1;
                log.late_accepted += u64::from(accepted);
            });
        }
    }
}

/// Starts a contender's selector on the election path, with auto-requeue:
/// each of its terms is a [`lead_term`]. The term does not watch its loss
/// itself: the selector cancels it when the term ends. A term with a
/// process pause, or every term under `ZK_CHAOS_BREAK=loss`, runs in a task
/// of its own, which the selector cannot cancel.
fn start_selector(
    shared: Arc<Shared>,
    who: usize,
    framework: Framework,
    rng: Rng,
    root: &str,
) -> LeaderSelector {
    let seat_shared = shared.clone();
    let seat = Arc::new(Seat {
        shared,
        who,
        task: 0,
        kind: Kind::Selector,
        framework: framework.clone(),
        counter: counter_path(root, Kind::Selector),
        bounds: None,
        stuck_rng: Mutex::new((Rng(1), 0)),
    });
    let rng = Mutex::new(rng);
    let lead = move |term: LeaderTerm| {
        let seat = seat.clone();
        let mut rng = Rng(rng.lock().unwrap().next() | 1);
        async move {
            if seat.shared.stop.load(Ordering::SeqCst) {
                // The run is over: lead no more, until closed.
                return std::future::pending().await;
            }
            let taken = Taken::Term(term, None);
            let pause = rng.below(8) == 0;
            let break_loss = seat.shared.config.break_loss;
            if pause || break_loss {
                let detached = async move {
                    lead_term(&seat, &taken, None, &mut rng, !break_loss, pause).await;
                };
                let _ = tokio::spawn(detached).await;
            } else {
                lead_term(&seat, &taken, None, &mut rng, false, false).await;
            }
        }
    };
    let path = format!("{root}/selector");
    let id = format!("contender-{who}");
    let selector = LeaderSelector::with_id(framework, &path, id.clone(), lead)
        .unwrap()
        .with_value(value_of(&id));
    selector.auto_requeue(true);
    selector.start().unwrap();
    let watched = selector.clone();
    watch_leadership(seat_shared, Kind::Selector, move || {
        watched.leadership_changes()
    });
    selector
}

/// Reads a participant's leadership-changes stream to its end, slowly (a
/// pause after each value, so that changes pile up between two reads), and
/// with [`Config::probe_leadership`] now and then the first value of a
/// fresh one: a term handed out must not
/// have ended already. Its end by a lease gone stale ([`LockLoss::Stale`])
/// is left out: it follows from time alone, and real time passes between
/// the stream's look and this one.
fn watch_leadership<S>(shared: Arc<Shared>, kind: Kind, changes: impl Fn() -> S + Send + 'static)
where
    S: futures::Stream<Item = Leadership> + Send + 'static,
{
    let check = move |shared: &Shared, change: Option<Leadership>, from: &str| {
        let Some(Leadership::Leader(term)) = change else {
            return;
        };
        let ended = term.loss().filter(|loss| *loss != LockLoss::Stale);
        shared.log(kind, |log| {
            log.handed_out += 1;
            if let Some(loss) = ended {
                log.ended_handouts
                    .push(format!("{} ended by {loss:?} ({from})", term.path()));
            }
        });
    };
    let stream = changes();
    let reader = shared.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(change) = stream.next().await {
            check(&reader, Some(change), "stream");
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..40))).await;
        }
    });
    if !shared.config.probe_leadership {
        return;
    }
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(fastrand::u64(50..400))).await;
            if shared.stop.load(Ordering::SeqCst) {
                return;
            }
            let mut fresh = std::pin::pin!(changes());
            match fresh.next().await {
                None => return,
                change => check(&shared, change, "probe"),
            }
        }
    });
}

/// One hold, or one leader's term, as its holder lives it: logged as an
/// [`Interval`] when dropped, at its end, or the instant a selector cancels
/// the term.
struct Record<'a> {
    seat: &'a Seat,
    interval: Interval,
    finished: bool,
    /// A term's handle, to learn at the end why a selector cancelled it.
    term: Option<LeaderTerm>,
    /// Whether a [`LockLoss::Stale`] of this hold was recorded already.
    stale_noted: bool,
    /// When the acquire began (the hold's grant came after).
    asked: Option<Instant>,
    /// When its holder said progress, each stamp just after the call.
    progress: Vec<Instant>,
    /// A stuck holder found its hold lost when it woke: it did nothing
    /// from this instant (when it got stuck), so its hold ends here.
    stuck_end: Option<Instant>,
}

impl<'a> Record<'a> {
    /// A hold asked for at `asked` (when known) begins now: when its holder
    /// sees it. If the holder's place was stopped since it asked
    /// ([`Place::pause`]), the grant may have come before the stop (its
    /// watch notification waiting, as in a stopped process's socket
    /// buffer, for the process to be continued): the hold is
    /// [`Interval::seen_late`], and did not obey (see [`Drop`]).
    fn begin(seat: &'a Seat, taken: &Taken, asked: Option<Instant>) -> Record<'a> {
        seat.shared.rounds.fetch_add(1, Ordering::Relaxed);
        seat.shared.log(seat.kind, |log| log.acquired += 1);
        let start = now();
        let seen_late = asked.is_some_and(|asked| seat.shared.host_paused_since(seat.who, asked));
        Record {
            seat,
            interval: Interval {
                who: seat.who,
                task: seat.task,
                token: taken.token(),
                node: match taken {
                    Taken::Term(term, _) => Some(term.path().to_owned()),
                    _ => None,
                },
                loss: None,
                start,
                end: start,
                obeyed: true,
                seen_late,
            },
            finished: false,
            term: match taken {
                Taken::Term(term, _) => Some(term.clone()),
                _ => None,
            },
            stale_noted: false,
            asked,
            progress: Vec::new(),
            stuck_end: None,
        }
    }

    /// Says progress on a bounded hold, and stamps it.
    fn progress(&mut self, taken: &Taken) {
        if self.seat.bounds.is_some() {
            taken.progress();
            self.progress.push(now());
        }
    }

    /// Rule 9: a bound that passed (seen at `at`) had its time.
    fn check_bound(&self, loss: LockLoss, at: Instant) {
        let (Some(bounds), LockLoss::BoundPassed(bound)) = (self.seat.bounds, loss) else {
            return;
        };
        let asked = self.asked.unwrap_or(self.interval.start);
        if let Some(early) = stuck::early(bounds, bound, asked, &self.progress, at) {
            let who = (self.seat.who, self.seat.task);
            self.seat.shared.log(self.seat.kind, |log| {
                log.early_bounds
                    .push(format!("#{}/{}: {early}", who.0, who.1))
            });
        }
    }

    /// The hold ended early, signalled by its `lost()`.
    fn lost(&mut self, loss: LockLoss) {
        self.lost_at(loss, now());
    }

    /// The hold ended early, its `lost()` having fired at `at`.
    fn lost_at(&mut self, loss: LockLoss, at: Instant) {
        let Seat {
            shared, kind, who, ..
        } = self.seat;
        let reason = match loss {
            LockLoss::ConnectionState(state) => format!("{state}"),
            other => format!("{other:?}"),
        };
        shared.log(*kind, |log| *log.losses.entry(reason).or_default() += 1);
        self.interval.loss = Some(loss);
        self.check_bound(loss, at);
        if loss == LockLoss::Stale {
            self.stale(*who);
        }
    }

    /// Records, once per hold, that it was found [`LockLoss::Stale`]: by
    /// its `lost()`, by a write its fence refused, or (a selector's term)
    /// when it was cancelled.
    fn stale(&mut self, who: usize) {
        if std::mem::replace(&mut self.stale_noted, true) {
            return;
        }
        let at = now();
        self.seat
            .shared
            .log(self.seat.kind, |log| log.stale_losses.push((who, at)));
    }
}

impl Drop for Record<'_> {
    fn drop(&mut self) {
        if self.term.as_ref().and_then(|term| term.loss()) == Some(LockLoss::Stale) {
            self.stale(self.seat.who);
        }
        let mut interval = self.interval.clone();
        interval.end = self.stuck_end.unwrap_or_else(now);
        // Its place stopped during the hold: it could not obey the loss
        // signal then (only its fence protects).
        if self
            .seat
            .shared
            .host_paused_since(self.seat.who, interval.start)
        {
            interval.obeyed = false;
        }
        let cancelled = !self.finished;
        self.seat.shared.log(self.seat.kind, |log| {
            if cancelled {
                *log.losses.entry("cancelled".to_owned()).or_default() += 1;
            }
            log.intervals.push(interval);
        });
    }
}

/// A hold's loss signal, or (`watch` false) a signal that never comes.
type LossSignal = futures::future::Fuse<BoxFuture<'static, LockLoss>>;

fn loss_signal(taken: &Taken, watch: bool) -> LossSignal {
    let lost = if watch {
        taken.lost()
    } else {
        futures::future::pending().boxed()
    };
    lost.fuse()
}

/// A leader's term: critical sections back to back, from the moment it
/// leads until a length of its choosing has passed (it then gives
/// leadership up) or, with `watch_loss`, until the term is lost. Recorded
/// as one interval. With `pause`, its first section has a process pause.
async fn lead_term(
    seat: &Seat,
    taken: &Taken,
    asked: Option<Instant>,
    rng: &mut Rng,
    watch_loss: bool,
    pause: bool,
) {
    let length = rng.millis(200, 2000);
    let mut record = Record::begin(seat, taken, asked);
    let mut lost = loss_signal(taken, watch_loss);
    let mut pause = pause;
    while since(record.interval.start) < length && !seat.shared.stop.load(Ordering::SeqCst) {
        let paused = std::mem::take(&mut pause);
        if section(seat, taken, &mut record, &mut lost, rng, paused).await {
            break;
        }
    }
    record.finished = true;
}

/// One critical section: read the counter, await a little, write it back
/// through the hold's fence, ending at once if `lost` completes (then it
/// returns true). With `pause`, the holder neither watches nor acts between
/// its read and its write while its session is expired.
async fn section(
    seat: &Seat,
    taken: &Taken,
    record: &mut Record<'_>,
    lost: &mut LossSignal,
    rng: &mut Rng,
    pause: bool,
) -> bool {
    let Seat {
        shared,
        who,
        kind,
        framework,
        counter,
        ..
    } = seat;
    let (who, kind) = (*who, *kind);
    let t = shared.config.session_timeout;
    let exclusive = kind.holders() == 1;
    // Read, then await something, watching the loss signal (and saying
    // progress between the steps, on a bounded hold).
    record.progress(taken);
    let read = framework.call_with_retry(|client| {
        let counter = counter.clone();
        async move { client.get_data(&counter).await }
    });
    let read = tokio::select! {
        read = read => read.ok(),
        loss = &mut *lost => {
            record.lost(loss);
            return true;
        }
    };
    let Some((data, stat)) = read else {
        return false;
    };
    record.progress(taken);
    // Now and then a bounded holder gets stuck here (see "Stuck holders").
    if !pause && seat.gets_stuck() {
        if let Some((written, ended)) = get_stuck(seat, taken, record, &data, &stat).await {
            note_written(seat, taken, record, written);
            return ended;
        }
    }
    let work = tokio::time::sleep(rng.millis(5, 120));
    tokio::select! {
        () = work => {}
        loss = &mut *lost => {
            record.lost(loss);
            return true;
        }
    }
    record.progress(taken);
    let written = if pause {
        // A process pause: the holder neither watches nor acts while its
        // session is expired; then it writes at once.
        record.interval.obeyed = false;
        shared.log(kind, |log| log.pauses += 1);
        let paused = now();
        let length = t * 2 + t / 2;
        // Where the contender's place can be stopped (a simulated host),
        // every other pause stops all of it: the framework's session and
        // timers too, whose clock then jumps. Otherwise the harness
        // expires the session while this holder alone waits.
        // One place stopped at a time, so that the others make progress.
        let place = shared.places.get(who).cloned().flatten().filter(|_| {
            shared
                .host_pauses
                .lock()
                .unwrap()
                .iter()
                .all(|p| p.2.is_some())
        });
        let stopped = match place {
            // Shorter or longer than the session timeout: the session
            // outlives the stop, or the server expires it meanwhile.
            Some(place) if rng.below(2) == 0 => {
                let t = t.as_millis() as u64;
                place.pause(rng.millis(t / 2, 2 * t))
            }
            _ => None,
        };
        match stopped {
            Some(continued) => {
                shared.log(kind, |log| log.host_pauses += 1);
                let at = shared.host_pauses.lock().unwrap().len();
                shared.host_pauses.lock().unwrap().push((who, paused, None));
                continued.await;
                shared.host_pauses.lock().unwrap()[at].2 = Some(now());
            }
            None => {
                let _ = shared.pause_requests.send(who);
                tokio::time::sleep(length).await;
            }
        }
        let written = write(shared, framework, taken, counter, &data, &stat, exclusive).await;
        // The pause is a fault of this contender's, until its write.
        shared.window(who, paused);
        written
    } else {
        tokio::select! {
            w = write(shared, framework, taken, counter, &data, &stat, exclusive) => w,
            loss = &mut *lost => {
                record.lost(loss);
                return true;
            }
        }
    };
    note_written(seat, taken, record, written);
    false
}

/// Records what became of a critical section's write.
fn note_written(seat: &Seat, taken: &Taken, record: &mut Record<'_>, written: Written) {
    let Seat {
        shared, who, kind, ..
    } = seat;
    let (who, kind) = (*who, *kind);
    // A holder whose place was stopped meanwhile could not obey either.
    if shared.host_paused_since(who, record.interval.start) {
        record.interval.obeyed = false;
    }
    let obeyed = record.interval.obeyed;
    match written {
        Written::Accepted(accepted) => shared.log(kind, |log| log.accepted.push(accepted)),
        Written::Refused => {
            if taken.loss() == Some(LockLoss::Stale) {
                record.stale(who);
            }
            shared.log(kind, |log| log.refused += 1);
        }
        Written::Interfered if obeyed => shared.log(kind, |log| log.interference += 1),
        _ => {}
    }
}

/// A bounded holder gets stuck after its read (see "Stuck holders"): it
/// takes its fence (a holder about to write), hands the hold to the
/// checker, and does nothing (no progress, no watching, no I/O) until the
/// checker has judged the hold, its framework and session going on as
/// before. Then it wakes and writes once through that fence, without
/// looking first. Returns the write, and whether the hold had ended (then
/// its interval ends at the instant it got stuck: it did nothing after).
/// `None`: it did not get stuck (its hold was lost already, or the run is
/// winding down).
async fn get_stuck(
    seat: &Seat,
    taken: &Taken,
    record: &mut Record<'_>,
    data: &[u8],
    stat: &zk::Stat,
) -> Option<(Written, bool)> {
    let bounds = seat.bounds?;
    let fence = taken.fence().ok()?;
    let sender = seat.shared.stuck_holds.lock().unwrap().clone()?;
    let stuck_at = now();
    // The library's clocks start at the grant (a lock's default bounds) or
    // at the bounding call (a lease), both before the hold's start here,
    // and its last progress came before the last stamp: `end` is when the
    // first bound passes at the latest.
    let last = record
        .progress
        .last()
        .copied()
        .unwrap_or(record.interval.start);
    let end = [
        bounds.max_silence().map(|silence| last + silence),
        bounds
            .max_duration()
            .map(|duration| record.interval.start + duration),
    ]
    .into_iter()
    .flatten()
    .min()?;
    let lost = stuck::watch_loss(&fence);
    let feeding = Arc::new(AtomicBool::new(false));
    if seat.shared.config.break_bound {
        if let Some(silence) = bounds.max_silence() {
            stuck::feed_by_timer(&fence, silence, feeding.clone());
        }
    }
    let (done, judged) = oneshot::channel();
    let hold = stuck::StuckHold {
        who: seat.who,
        task: seat.task,
        kind: seat.kind,
        nodes: fence.holds().iter().map(|h| h.path().to_owned()).collect(),
        stuck_at,
        end,
        lost: lost.clone(),
        done,
    };
    if sender.send(hold).is_err() {
        return None;
    }
    stuck::stay_stuck(judged).await;
    feeding.store(true, Ordering::SeqCst);
    // Woken: one write through the fence taken before, as if nothing had
    // happened.
    let lost_first = taken.loss();
    let value = std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.split(' ').next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let token = record.interval.token;
    let next = format!("{} {}", value + 1, token);
    let version = (seat.kind.holders() == 1).then_some(stat.version);
    let written = match fence
        .set_data(&seat.counter, next.as_bytes(), version)
        .await
    {
        Ok(_) => Written::Accepted(Accepted {
            value: value + 1,
            token,
            lost_before: lost_first.is_some(),
        }),
        Err(Error::LockLost { .. }) => Written::Refused,
        Err(Error::BadVersion) => Written::Interfered,
        Err(_) => Written::Failed,
    };
    seat.shared.log(seat.kind, |log| {
        log.stuck_writes += 1;
        log.stuck_writes_lost += u64::from(lost_first.is_some());
    });
    let Some(first) = lost_first else {
        return Some((written, false));
    };
    let (loss, at) = (*lost.lock().unwrap()).unwrap_or((first, now()));
    record.stuck_end = Some(stuck_at);
    record.lost_at(loss, at);
    Some((written, true))
}

/// The critical section's write: the counter plus one, with this holder's
/// token, conditional on the version read (for exclusive kinds), through
/// the hold's fence (or, with `ZK_CHAOS_BREAK=fence`, as a naive holder
/// writes: straight through the framework's current session, with no
/// version check).
async fn write(
    shared: &Shared,
    framework: &Framework,
    taken: &Taken,
    counter: &str,
    data: &[u8],
    stat: &zk::Stat,
    exclusive: bool,
) -> Written {
    let value = std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.split(' ').next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let token = taken.token();
    let next = format!("{} {}", value + 1, token);
    let version = exclusive.then_some(stat.version);
    let lost_before = taken.gone();
    let result = if shared.config.break_fence {
        // A naive holder: a plain write on whatever session is current,
        // neither fenced nor conditional on the version it read.
        match framework.client().await {
            Ok(client) => client
                .set_data(counter, next.as_bytes(), None)
                .await
                .map(|_| ())
                .map_err(Error::from),
            Err(err) => Err(err),
        }
    } else {
        match taken.fence() {
            Ok(fence) => fence
                .set_data(counter, next.as_bytes(), version)
                .await
                .map(|_| ()),
            Err(err) => Err(err),
        }
    };
    match result {
        Ok(()) => Written::Accepted(Accepted {
            value: value + 1,
            token,
            lost_before,
        }),
        Err(Error::LockLost { .. }) => Written::Refused,
        Err(Error::BadVersion) => Written::Interfered,
        Err(_) => Written::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Stale loss is a flap only outside every fault window of its own
    /// holder, the window's end stretched by a session timeout.
    #[test]
    fn stale_losses_split_by_their_holders_fault_windows() {
        let zero = Instant::now();
        let at = |ms: u64| zero + Duration::from_millis(ms);
        let window = |who, start, end| FaultWindow {
            who,
            start: at(start),
            end: at(end),
        };
        let report = Report {
            session_timeout: Duration::from_secs(2),
            windows: vec![window(0, 1_000, 4_000), window(1, 10_000, 10_000)],
            ..Report::default()
        };
        let log = Log {
            stale_losses: vec![
                // Inside #0's blackhole, and in its margin.
                (0, at(2_000)),
                (0, at(5_900)),
                // After the margin, before a window, another's window.
                (0, at(6_100)),
                (0, at(500)),
                (0, at(10_500)),
                // In the margin of #1's reset.
                (1, at(11_000)),
            ],
            ..Log::default()
        };
        assert_eq!(report.stale_split(&log), (3, 3));
    }

    fn hold(zero: Instant, start_ms: u64, zxid: i64, seen_late: bool) -> Interval {
        let start = zero + Duration::from_millis(start_ms);
        Interval {
            who: 0,
            task: 0,
            token: FencingToken::new(zxid),
            node: None,
            loss: None,
            start,
            end: start + Duration::from_millis(10),
            obeyed: true,
            seen_late,
        }
    }

    /// A hold that began after another with a lower token breaks the order;
    /// the same hold seen late (its holder stopped while it waited) is left
    /// out, as its grant may have come before the other began.
    #[test]
    fn holds_seen_late_are_left_out_of_the_order() {
        let zero = Instant::now();
        let ordinary = [hold(zero, 100, 20, false), hold(zero, 200, 10, false)];
        assert_eq!(hold_order_violations(&ordinary).len(), 1);
        assert_eq!(term_order_violations(&ordinary).len(), 1);
        let late = [hold(zero, 100, 20, false), hold(zero, 200, 10, true)];
        assert!(hold_order_violations(&late).is_empty());
        assert!(term_order_violations(&late).is_empty());
        // Seen late or not, one token for two holds is still counted.
        let twice = [hold(zero, 100, 20, false), hold(zero, 200, 20, true)];
        assert_eq!(hold_order_violations(&twice).len(), 1);
    }

    /// Rule 6 judges a current view's holders against the deletions its
    /// client was told of before the view was asked for; rule 7 finds a
    /// stretch not current past the bound after the heal, and no agreement.
    #[test]
    fn the_tree_observers_rules() {
        let zero = Instant::now();
        let at = |ms: u64| zero + Duration::from_millis(ms);
        let view = |asked, ms, current, holders: &[&str]| TreeSeen {
            asked,
            at: at(ms),
            current,
            listings: 1,
            events: 0,
            holders: holders.iter().map(|h| (*h).to_owned()).collect(),
        };
        let agreement = |agreed: Option<u64>| Agreement {
            quiet: at(9_000),
            changed: at(9_000),
            agreed: agreed.map(at),
            bound: Duration::from_secs(2),
            difference: "differs".to_owned(),
            ended: at(9_500),
        };
        let report = |views, agreed| Report {
            started: Some(zero),
            tree: TreeLog {
                views,
                deletions_told: BTreeMap::from([("/r/a/n1".to_owned(), 10)]),
                healed: Some(at(5_000)),
                agreement: Some(agreement(agreed)),
            },
            ..Report::default()
        };
        // Told at 10: a view asked at 10 may still show it; at 11 not, nor
        // may a current view after the heal be missing past the bound.
        let fine = report(
            vec![
                view(10, 100, true, &["/r/a/n1"]),
                view(11, 200, true, &[]),
                view(12, 6_000, false, &[]),
                view(13, 7_900, true, &[]),
            ],
            Some(9_100),
        );
        assert!(
            fine.tree_violations().is_empty(),
            "{:?}",
            fine.tree_violations()
        );
        let broken = report(
            vec![
                view(11, 200, true, &["/r/a/n1"]),
                view(12, 6_000, false, &[]),
                view(13, 8_100, true, &[]),
            ],
            None,
        );
        let found = broken.tree_violations();
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].contains("/r/a/n1 in view #0"), "{found:?}");
        assert!(found[1].contains("not current for longer"), "{found:?}");
        assert!(found[2].contains("did not agree"), "{found:?}");
    }

    /// A contender's place counts as stopped since an instant if a stop of
    /// its own ended at or after it, or has not ended yet.
    #[test]
    fn a_place_stopped_since_an_instant() {
        let zero = Instant::now();
        let at = |ms: u64| zero + Duration::from_millis(ms);
        let (pause_requests, _) = mpsc::unbounded_channel();
        let shared = Shared {
            config: Config::from_env(1),
            stop: AtomicBool::new(false),
            logs: Mutex::new(BTreeMap::new()),
            pause_requests,
            rounds: AtomicU64::new(0),
            windows: Mutex::new(Vec::new()),
            places: Vec::new(),
            host_pauses: Mutex::new(vec![(0, at(1_000), Some(at(2_000))), (1, at(3_000), None)]),
            tree: Mutex::new(TreeLog::default()),
            stuck_holds: Mutex::new(None),
        };
        assert!(shared.host_paused_since(0, at(500)));
        assert!(shared.host_paused_since(0, at(2_000)));
        assert!(!shared.host_paused_since(0, at(2_001)));
        assert!(shared.host_paused_since(1, at(9_000)), "not continued yet");
        assert!(!shared.host_paused_since(2, at(0)), "another's stop");
    }
}
