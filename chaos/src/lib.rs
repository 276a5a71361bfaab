//! `zk-curator-chaos`, the chaos harness: contenders on separate sessions, each behind its own
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
//! seen only after a stop of its holder ((`Interval::seen_late` in the records)) is left
//! out of the token-order rules: it may have been granted before the stop.
//! For a lock or a latch "asked" is its acquire's start; for a selector's
//! term, the selector's start or the end of the contender's term before
//! (the selector queues again after it): the library's checks before a
//! term come after that instant.
//!
//! Holds overlap (the rule "no two holders that obeyed at once") by the
//! order in which the harness saw them begin and end ([`sequence`] numbers
//! stamped with each start and end), not by their instants: in a
//! simulation many events share one 1 ms tick, and two holds overlapping
//! inside one would not be seen by the clock.
//!
//! Every instant the harness records is read from [`now`]: tokio's clock in
//! real time; in the simulator one clock for all hosts (each host's tokio
//! clock has a base of its own). Those instants are compared, never slept
//! until on a contender's place.
//!
//! The same contenders also take part in two elections under the same faults,
//! each leader doing critical sections back to back for a term of its chosen
//! length, through the term's fence: a [`LeaderLatch`]
//! each (a term runs from `await_leadership` until its `lost()`, or until the
//! contender gives leadership up by closing the latch) and a
//! [`LeaderSelector`] each (the term is the
//! selector's function, cancelled by the selector when the term is lost). A
//! term is checked as a hold is (one interval from its start to its end), and
//! the terms' fencing tokens must grow in the order the terms began.
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
//! One more observer, a
//! [`TreeObserver`] over the run's
//! whole root, runs on a framework and a link of its own (after the elections'
//! observers, so it shares their quarter of the injected faults; in cohort
//! mode, which has no elections, it has that quarter alone). The harness
//! records every view it publishes
//! ([`TreeObserver::changes`]),
//! each with the [`sequence`] number of the moment the harness began waiting
//! for it (nothing runs between taking a view and that moment, so the next view
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
//! [`Hold::bound`] at its grant), and says
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
//!    a loss is seen the instant it is latched, one seen after the tick
//!    after `E'` (a host's clock drifts by whole ticks) says
//!    [`LockLoss::BoundPassed`] (a hold lost otherwise before its
//!    bound may say so). (b) Its node (both, for a multi-lock) is gone by
//!    `G = E'` + the session timeout + [`Config::stuck_slack`] (2 s on one
//!    server) + [`Config::read_lag`], `G` moved to a later stop of its
//!    host's end plus the same if that stop began by `G` (its link is on
//!    its host), and so to a stall of the server's end if the stall was in
//!    force after `E'` and began by `G` (a simulation tells the harness of
//!    each, [`server_stalled`]; the server hears the pings sent meanwhile at
//!    the stall's end, and two stalls may follow back to back: seed 3822):
//!    the harness's session was told of the deletion by `G`, or
//!    a read at `G` (synced first) does not find it. Why that slack:
//!    connected, the enforcer's delete is one round trip on the holder's
//!    session; with the connection down at `E'` (a blackhole of up to
//!    1.5 session timeouts and 0.5 s, the harness's expiry, a held link of
//!    up to 2.5 s) either it comes back within the session timeout and the
//!    background cleaner, due at once on reconnection, deletes the node, or
//!    the server expires the session within a session timeout of last
//!    hearing from it and the node goes with it; 2 s covers the round
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
//! # Liveness
//!
//! The rules above are about safety: nothing they check fails if nobody
//! ever gets a lock again. At the run's end every fault is healed (the
//! harness's links, the simulated network, an ensemble), no holder pauses
//! or gets stuck any more, and each contender's task on every lock kind
//! and latch (not the selectors: they are closed at the heal, and a
//! selector's leader keeps its term until closed) goes on until it has had
//! the lock once more by an acquire begun after the stop, each such
//! acquire with a deadline past the bound below (so that a waiter nobody
//! wakes overruns the bound before it gives up). Let `Q` be the instant
//! every fault was over: the heal, or the end of the last fault window or
//! stop of a place if later (a pause asked for near the end runs its
//! length). Two rules:
//!
//! 10. **Every waiter gets the lock within the bound.** A task's acquires
//!     in a row until one is granted are one wait; each wait that lasts
//!     into the calm is granted by its first acquire's start (or `Q`, if
//!     later) plus [`Config::liveness_bound`]: the session timeout (a node
//!     of a session no client uses any more goes when the server expires
//!     it), the connection timeout ([`Config::release_bound`]: a client on
//!     a dead connection gives it up, reconnects, and a lost hold's node
//!     is deleted), [`MAX_HOLD_BOUND`] and [`Config::stuck_slack`] (a stuck
//!     hold in progress keeps its node until its bound, then rule 8's
//!     slack), [`Config::read_lag`], and 250 ms for each task that may hold
//!     the lock first (a critical section and its release, each a few round
//!     trips). 11 to 15 s in the simulator (session timeouts of 1.5 to
//!     4 s, 2 to 8 tasks), 11.75 s in `tests/chaos.rs` (13.25 s with its
//!     cohorts' three tasks), about 35 s on its ensemble (whose slack and
//!     read lag are longer). A wait that gave up sooner proves nothing and
//!     is not judged.
//! 11. **Nothing is left behind.** Once every task has ended its last
//!     round, no node stays under a lock path (the latches' left out: a
//!     latch is queued until its framework closes) for longer than the
//!     session timeout plus [`Config::stuck_slack`] and
//!     [`Config::read_lag`], every framework still open: a node of a
//!     session abandoned in the faults goes with the session within that;
//!     a node that stays is one nobody holds or waits for (a release that
//!     left it). After every framework has closed, a session timeout later,
//!     no session but the harness's and no node is left either (as
//!     before: `leftover_nodes`, `leftover_sessions`).
//!
//! # Stale losses: flaps?
//!
//! A hold ends with [`LockLoss::Stale`] when the
//! server has not been heard from for longer than the session timeout. The
//! harness records every fault it injects on a contender's connection
//! (blackholes, stalls, resets, expiries) and every process pause (from its
//! start to its write) as a window, and counts each hold found Stale (by its
//! `lost()`, by a write its fence refused, or, for a selector's term, by the
//! reason it was cancelled) as inside a window of its holder (up to a session
//! timeout after the window's end) or outside every one: a flap. Flaps are a
//! figure in the report, not a violation: a loaded 2-core machine can starve
//! the process (or the server's JVM) of CPU for a session timeout, and the rule
//! then does what it is for. Under the standard error policy a silent
//! connection is usually seen `Suspended` (after two thirds of the session
//! timeout) before it is seen Stale, so Stale losses are rare.
//!
//! With cohorting ([`Config::with_cohort`]), each contender's framework
//! passes held nodes among its own tasks (`FrameworkBuilder::cohort`), and
//! several tasks of each contender take turns on every lock recipe, so that
//! passes happen under the same faults; the elections, which cohorting does
//! not touch, are left out. The checks are the same, the fencing tokens
//! being compared whole (zxid, then pass count), and a run in which no node
//! was passed is a violation (it proved nothing of the cohort).
//!
//! Used by `tests/chaos.rs` (a bounded run in CI), `tests/ensemble_chaos.rs`
//! (the same on a replicated ensemble), `examples/chaos.rs` (a long run
//! that prints the same figures) and `zk-curator-sim` (every run replayed
//! from its seed in a simulation). `ZK_CHAOS_BREAK=fence` makes
//! holders write without the fence, `ZK_CHAOS_BREAK=loss` makes them ignore
//! the loss signal, `ZK_CHAOS_BREAK=observer` hands the observers' reports
//! out late, `ZK_CHAOS_BREAK=bound` feeds stuck holders' progress by a
//! timer: the checks must then fail.
//!
//! # Files
//!
//! One job a file, each building only on those above it:
//!
//! - `place.rs`: the places and the clock: [`Target`], [`Link`] (a fault
//!   proxy, or a simulated link), [`Place`] (where a contender's process
//!   runs), [`now`] and [`sequence`].
//! - `config.rs`: the configuration ([`Config`], `from_env`, `with_*`), the
//!   [`Kind`]s and their paths, and the run's randomness (every generator a
//!   `fastrand::Rng` seeded from [`Config::seed`]).
//! - `records.rs`: the records: holds and terms as intervals, each kind's
//!   log, the observers' reports and views, the stuck holds as judged, the
//!   faults' windows, the stops of places, and the [`Report`] gathering
//!   them.
//! - `verdict.rs`: the verdict: every rule above as a pure function of
//!   the records, each with unit tests that show it can fail;
//!   [`Report::violations`] applies them.
//! - `report.rs`: the report's words: its table of figures (`Display`) and
//!   its event log ([`Report::event_log`]).
//! - `shared.rs`: the run's live state that its tasks write into.
//! - `section.rs`: one hold as its holder lives it: the critical section,
//!   its write through the fence, its record.
//! - `stuck.rs`: stuck holders: their bounds, getting stuck, and the
//!   checker that judges each stuck hold.
//! - `elections.rs`: the latch and the selector, a leader's term, the
//!   leadership-changes streams.
//! - `observers.rs`: the elections' observers and the tree observer.
//! - `contenders.rs`: the contenders: their frameworks and links, their
//!   locks, the loop each task runs.
//! - `ensemble.rs`: the ensemble's own faults ([`ensemble::Fault`]).
//! - `faults.rs`: the fault injector.
//! - `run.rs`: a run from start to report ([`run()`], [`run_on`]).
//!
//! [`Hold::bound`]: zk_curator::Hold::bound
//! [`HoldBounds`]: zk_curator::HoldBounds
//! [`LeaderLatch`]: zk_curator::LeaderLatch
//! [`LeaderObserver`]: zk_curator::LeaderObserver
//! [`LeaderSelector`]: zk_curator::LeaderSelector
//! [`LockLoss::BoundPassed`]: zk_curator::LockLoss::BoundPassed
//! [`LockLoss::Stale`]: zk_curator::LockLoss::Stale
//! [`TreeObserver`]: zk_curator::recipes::tree::TreeObserver
//! [`TreeObserver::changes`]: zk_curator::recipes::tree::TreeObserver::changes
// A harness, not a library: a step of a run's setup that fails (a server
// that cannot be reached, a path that cannot be made) ends the run loudly.
#![allow(clippy::unwrap_used)]

mod config;
mod contenders;
mod elections;
pub mod ensemble;
mod faults;
mod observers;
mod place;
mod records;
mod report;
mod run;
mod section;
mod shared;
mod stuck;
mod verdict;

pub use config::{Config, Kind, Profile, MAX_HOLD_BOUND, OBSERVER_BREAK_DELAY, STUCK_SLACK};
pub use place::{
    forget_server_stalls, now, sequence, server_stalled, set_clock, Link, Place, SimServer, Target,
};
pub use records::Report;
pub use run::{run, run_on};
