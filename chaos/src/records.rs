//! The records of a run: what the contenders, the observers, the stuck
//! holds' checker and the fault injector wrote down as it went, and the
//! [`Report`] that gathers them at its end. Holds and terms as
//! [`Interval`]s, accepted writes, each kind's [`Log`], the observers'
//! reports and views, the stuck holds as judged, the faults' windows, the
//! stops of the contenders' places, and the timeline of faults.
//!
//! Only data here: the rules that judge them are in `verdict.rs`, the
//! report's text in `report.rs`.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;
use zk_curator::{FencingToken, LockLoss, Observation};

use crate::config::Kind;

/// One hold (a lock's critical section, or a leader's whole term), as the
/// holder lived it.
#[derive(Clone, Debug)]
pub(crate) struct Interval {
    pub(crate) who: usize,
    /// Which of the contender's tasks (0 without cohorting).
    pub(crate) task: usize,
    pub(crate) token: FencingToken,
    /// A term's election node (`None` for a lock's hold).
    pub(crate) node: Option<String>,
    /// How the critical section ended early, if it did.
    pub(crate) loss: Option<LockLoss>,
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    /// The [`sequence`](crate::sequence) numbers of `start` and `end`: the
    /// order in which the harness saw every hold begin and end, finer than
    /// the clock (in a simulation, many events share one 1 ms tick).
    pub(crate) start_seq: u64,
    pub(crate) end_seq: u64,
    /// The holder watched the loss signal throughout (no simulated pause).
    pub(crate) obeyed: bool,
    /// The holder's place was stopped between its asking and its seeing
    /// the hold ([`Place::pause`](crate::Place::pause)): the hold may have been granted before
    /// the stop, so `start` is only its latest bound.
    pub(crate) seen_late: bool,
}

/// A write the server accepted.
#[derive(Clone, Debug)]
pub(crate) struct Accepted {
    pub(crate) value: u64,
    pub(crate) token: FencingToken,
    /// The holder's hold was known lost (session replaced, node deleted)
    /// before the write was sent.
    pub(crate) lost_before: bool,
}

/// What one kind's holds, writes and observers left, as the run went.
#[derive(Debug, Default)]
pub(crate) struct Log {
    pub(crate) intervals: Vec<Interval>,
    /// The election's observer's links' [`Link::deletions_told`](crate::Link::deletions_told): each
    /// node, with the first moment its client was told of its deletion.
    pub(crate) deletions_told: BTreeMap<String, u64>,
    pub(crate) accepted: Vec<Accepted>,
    pub(crate) refused: u64,
    pub(crate) interference: u64,
    pub(crate) losses: BTreeMap<String, u64>,
    pub(crate) acquired: u64,
    pub(crate) timed_out: u64,
    pub(crate) acquire_errors: u64,
    pub(crate) late_acquires: Vec<Duration>,
    pub(crate) pauses: u64,
    /// ... of which stopped the contender's whole host (see [`Place::pause`](crate::Place::pause)).
    pub(crate) host_pauses: u64,
    /// Writes tried through a fence taken before the release, after it.
    pub(crate) late_writes: u64,
    /// ... of which the server accepted (each a stale write).
    pub(crate) late_accepted: u64,
    /// An election's observer's reports, in the order handed out.
    pub(crate) observed: Vec<Seen>,
    /// When a holder saw its hold end with
    /// [`LockLoss::Stale`], and who.
    pub(crate) stale_losses: Vec<(usize, Instant)>,
    /// Terms the participants' leadership-changes streams handed out.
    pub(crate) handed_out: u64,
    /// ... of which had already ended when handed out, with why.
    pub(crate) ended_handouts: Vec<String>,
    /// Releases of a hold already lost that took longer than
    /// [`Config::release_bound`](crate::Config::release_bound), with how long.
    pub(crate) slow_releases: Vec<Duration>,
    /// Releases of a hold already lost, begun while its framework was not
    /// connected, that did not answer at once, with how long (only where
    /// the harness reads the framework's state in the same poll as the
    /// release's own check: one thread, the simulator; see
    /// [`Config::loss_seen_at_once`](crate::Config::loss_seen_at_once)).
    pub(crate) offline_releases: Vec<Duration>,
    /// Stuck holds, as the checker judged them (rule 8).
    pub(crate) stuck: Vec<Judged>,
    /// Bounds that passed too early (rule 9), in words.
    pub(crate) early_bounds: Vec<String>,
    /// Writes of stuck holders once woken, through the fence taken before
    /// they got stuck, and how many of them found the hold lost first.
    pub(crate) stuck_writes: u64,
    pub(crate) stuck_writes_lost: u64,
    /// The acquires that ended once the faults were over (the harness's
    /// stop), for the liveness rule (rule 10).
    pub(crate) waits: Vec<Wait>,
}

/// One acquire, from the harness's stop on: who asked, when, when it ended
/// and whether it got the lock (see "Liveness", rule 10).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wait {
    /// Which contender, and which of its tasks.
    pub(crate) who: usize,
    pub(crate) task: usize,
    pub(crate) asked: Instant,
    pub(crate) ended: Instant,
    pub(crate) granted: bool,
}

/// What the liveness rules (10 and 11) read beside each kind's waits.
#[derive(Clone, Debug, Default)]
pub(crate) struct Liveness {
    /// The bound (see [`Config::liveness_bound`](crate::Config::liveness_bound)).
    pub(crate) bound: Duration,
    /// Every stop of a contender's place, each with its end.
    pub(crate) host_pauses: Vec<HostPause>,
    /// Nodes still under the lock paths (elections' latches left out)
    /// `lingering_bound` after `rounds_ended`, every framework still open.
    pub(crate) lingering: Vec<String>,
    pub(crate) lingering_bound: Duration,
}

/// One report of an election's observer, as the harness received it.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    /// When the harness began waiting for it: the stream does its work only
    /// while polled, so the read behind the report began after this.
    pub(crate) asked: Instant,
    /// When the stream handed it out.
    pub(crate) at: Instant,
    /// The [`sequence`](crate::sequence) number of that moment.
    pub(crate) seq: u64,
    pub(crate) what: Observation,
}

/// What the tree observer
/// ([`TreeObserver`](zk_curator::recipes::tree::TreeObserver) over the run's
/// root) showed, and what the wind-down found of it (see "The tree observer's
/// contract").
#[derive(Debug, Default)]
pub(crate) struct TreeLog {
    /// Every view the harness received, in order.
    pub(crate) views: Vec<TreeSeen>,
    /// The tree observer's links'
    /// [`Link::deletions_told`](crate::Link::deletions_told): each node, with
    /// the first moment its client was told of its deletion.
    pub(crate) deletions_told: BTreeMap<String, u64>,
    /// When the faults were over: every link healed (and on an ensemble,
    /// the ensemble too).
    pub(crate) healed: Option<Instant>,
    /// The wind-down's agreement check, once made.
    pub(crate) agreement: Option<Agreement>,
}

/// One view of the tree observer, as the harness received it.
#[derive(Clone, Debug)]
pub(crate) struct TreeSeen {
    /// The [`sequence`](crate::sequence) number of the moment the harness began waiting for
    /// it: the view was published after this.
    pub(crate) asked: u64,
    /// When it came.
    pub(crate) at: Instant,
    pub(crate) current: bool,
    pub(crate) listings: u64,
    pub(crate) events: u64,
    /// The node of every participant it showed holding.
    pub(crate) holders: Vec<String>,
}

/// The wind-down's check of the tree observer against the truth.
#[derive(Clone, Debug)]
pub(crate) struct Agreement {
    /// When the contenders had all ended their rounds (nothing changes
    /// under the root after, but for nodes of sessions abandoned earlier).
    pub(crate) quiet: Instant,
    /// When the truth was last seen to change (`quiet` if never).
    pub(crate) changed: Instant,
    /// When the observer's view, current, first equalled the truth.
    pub(crate) agreed: Option<Instant>,
    /// How long it had to (from the later of `quiet` and `changed`).
    pub(crate) bound: Duration,
    /// The last difference seen, in words.
    pub(crate) difference: String,
    /// When the check ended (views after it are not judged: the
    /// frameworks close).
    pub(crate) ended: Instant,
}

/// A fault injected on a contender's connection: from `start` to `end`
/// (the same instant for a reset).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FaultWindow {
    pub(crate) who: usize,
    pub(crate) start: Instant,
    pub(crate) end: Instant,
}

/// What a run saw, per kind, and what it found wrong: its rules are
/// [`Report::violations`], its figures its `Display`, and its events
/// [`Report::event_log`].
#[derive(Debug, Default)]
pub struct Report {
    pub(crate) logs: BTreeMap<Kind, Log>,
    /// How many faults of each kind were injected.
    pub faults: BTreeMap<&'static str, u64>,
    /// Nodes left under the lock paths once every framework had closed.
    pub leftover_nodes: Vec<String>,
    /// Sessions left on the server(s) once every framework had closed,
    /// besides the harness's own.
    pub leftover_sessions: usize,
    /// [`Config::seed`](crate::Config::seed): replays the run.
    pub seed: u64,
    /// How long the run took, wind-down included.
    pub elapsed: Duration,
    /// Cohort mode: the passes the contenders' frameworks made
    /// (`lock_passes`), all together.
    pub passes: Option<u64>,
    pub(crate) started: Option<Instant>,
    /// Every fault injected: when, what, on whom (`usize::MAX`: the
    /// ensemble's own, on everyone).
    pub(crate) timeline: Vec<(Instant, &'static str, usize)>,
    /// The session timeout of every framework of the run.
    pub(crate) session_timeout: Duration,
    /// Sessions a framework had when it was closed that the server still
    /// held right after the close (on the embedded server and simulated).
    pub unclosed_sessions: usize,
    /// [`Config::read_lag`](crate::Config::read_lag).
    pub(crate) read_lag: Duration,
    /// [`Config::release_bound`](crate::Config::release_bound).
    pub(crate) release_bound: Duration,
    /// Sessions the server expired, each with the instant its expiry was
    /// confirmed (its ephemeral nodes gone by then).
    pub(crate) expiries: Vec<(i64, Instant)>,
    /// The faults injected on the contenders (not on the observers).
    pub(crate) windows: Vec<FaultWindow>,
    /// What the tree observer showed.
    pub(crate) tree: TreeLog,
    /// [`Config::stuck`](crate::Config::stuck), and some bounded contender
    /// had a few sections that could get stuck (then one did, by
    /// construction; a run whose bounded contenders were faulted
    /// throughout may have had none).
    pub(crate) stuck: bool,
    /// [`Config::loss_seen_at_once`](crate::Config::loss_seen_at_once).
    pub(crate) loss_seen_at_once: bool,
    /// [`Config::strict_bounds`](crate::Config::strict_bounds).
    pub(crate) strict_bounds: bool,
    /// What the liveness rules read (rules 10 and 11).
    pub(crate) liveness: Liveness,
}

/// What the checker found of one stuck hold.
#[derive(Clone, Debug)]
pub(crate) struct Judged {
    /// Which contender, and which of its tasks.
    pub(crate) who: usize,
    pub(crate) task: usize,
    /// When it got stuck (just after its last progress).
    pub(crate) stuck_at: Instant,
    /// When its first bound passes at the latest, by the harness's stamps.
    pub(crate) end: Instant,
    /// `lost()` had to fire by this instant: `end` (or the end of a stop
    /// of the holder's host in force then) plus [`Config::wake_slack`](crate::Config::wake_slack).
    pub(crate) lost_by: Instant,
    /// Its nodes had to be gone by this instant (see the notes, rule 8).
    pub(crate) gone_by: Instant,
    /// The bound's end as the enforcer could see it: `end`, or the end of
    /// a stop of the host in force then.
    pub(crate) end_seen: Instant,
    /// When and why its `lost()` fired, as seen beside it.
    pub(crate) lost: Option<(LockLoss, Instant)>,
    /// When the harness's session was told each node was deleted (`None`:
    /// not told by `gone_by`).
    pub(crate) gone_at: Vec<Option<Instant>>,
    /// Nodes that a read at `gone_by` (synced first) still found.
    pub(crate) left: Vec<String>,
}

/// A stop of a contender's whole place ([`Place::pause`](crate::Place::pause)):
/// who, from when, until when (`None`: not continued yet).
pub(crate) type HostPause = (usize, Instant, Option<Instant>);

/// Whether a hold that contender `who` asked for at `asked` (when known)
/// and sees now is seen late: its place was stopped since it asked, so the
/// grant may have come before the stop (see [`Interval::seen_late`]).
pub(crate) fn seen_late(pauses: &[HostPause], who: usize, asked: Option<Instant>) -> bool {
    asked.is_some_and(|asked| paused_since(pauses, who, asked))
}

/// Whether contender `who`'s place was stopped at some time since `since`,
/// by `pauses`: none of its holders could watch or act then, those that
/// obey the loss signal included.
pub(crate) fn paused_since(pauses: &[HostPause], who: usize, since: Instant) -> bool {
    pauses
        .iter()
        .any(|&(w, _, end)| w == who && end.is_none_or(|end| end >= since))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A contender's place counts as stopped since an instant if a stop of
    /// its own ended at or after it, or has not ended yet.
    #[test]
    fn a_place_stopped_since_an_instant() {
        let zero = Instant::now();
        let at = |ms: u64| zero + Duration::from_millis(ms);
        let pauses = [(0, at(1_000), Some(at(2_000))), (1, at(3_000), None)];
        assert!(paused_since(&pauses, 0, at(500)));
        assert!(paused_since(&pauses, 0, at(2_000)));
        assert!(!paused_since(&pauses, 0, at(2_001)));
        assert!(paused_since(&pauses, 1, at(9_000)), "not continued yet");
        assert!(!paused_since(&pauses, 2, at(0)), "another's stop");
    }
}
