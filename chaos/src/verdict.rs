//! The verdict: the rules that judge a run, each a pure function of the
//! records it reads (no clock, no server, no task), named after the rule of
//! the crate's notes it holds the run to, each with unit tests of its own
//! that show it can fail. [`Report::violations`] applies them all, kind by
//! kind and then over the whole run, always in the same order and words.
//!
//! Two of them are used while the run goes rather than at its end, for
//! what only then is known: [`early`] (rule 9, on each bound that passed)
//! and [`deadlines`] (rule 8's deadlines, moved by the stops of a stuck
//! holder's place). [`stale_split`] is no rule: it sorts the Stale losses
//! into those inside a fault's window and the flaps, for the report.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;
use zk_curator::{Bound, FencingToken, HoldBounds, LockLoss, Observation};

use crate::config::{value_of, Kind};
use crate::records::{
    Accepted, FaultWindow, HostPause, Interval, Judged, Log, Report, TreeLog, Wait,
};

/// A fault of the run's timeline: when, what, on whom (`usize::MAX`: the
/// ensemble's own, on everyone).
pub(crate) type TimedFault = (Instant, &'static str, usize);

impl Report {
    /// Every broken rule, in words (empty when the run was safe).
    pub fn violations(&self) -> Vec<String> {
        let mut found = Vec::new();
        for (&kind, log) in &self.logs {
            found.extend(self.kind_violations(kind, log));
        }
        if let Some(zero) = self.started {
            found.extend(tree_violations(&self.tree, zero));
        }
        found.extend(nothing_stuck(self.stuck, self.logs.values()));
        found.extend(no_pass(self.passes));
        found.extend(lingering(
            &self.liveness.lingering,
            self.liveness.lingering_bound,
        ));
        found.extend(leftovers(
            &self.leftover_nodes,
            self.unclosed_sessions,
            self.leftover_sessions,
        ));
        found
    }

    /// The rules on one kind's log, in words, each prefixed by the kind.
    fn kind_violations(&self, kind: Kind, log: &Log) -> Vec<String> {
        let limit = kind.holders();
        let mut found = Vec::new();
        found.extend(overlaps(kind, &log.intervals, &self.timeline, self.started));
        found.extend(stale_writes(kind, &log.accepted));
        found.extend(late_writes(kind, log.late_accepted));
        if limit == 1 {
            found.extend(write_order(kind, &log.accepted));
            found.extend(interference(kind, log.interference));
        }
        found.extend(late_acquires(kind, &log.late_acquires));
        found.extend(never_acquired(kind, log.acquired));
        found.extend(slow_releases(kind, &log.slow_releases, self.release_bound));
        found.extend(offline_releases(kind, &log.offline_releases));
        found.extend(ended_handouts(kind, &log.ended_handouts));
        if let Some(zero) = self.started {
            found.extend(
                stuck_violations(&log.stuck, zero, self.loss_seen_at_once, self.strict_bounds)
                    .into_iter()
                    .map(|v| format!("{kind:?}: {v}")),
            );
        }
        found.extend(early_bounds(kind, &log.early_bounds));
        if let (Some(zero), Some(healed)) = (self.started, self.tree.healed) {
            let quiet = quiet_point(healed, &self.windows, &self.liveness.host_pauses);
            found.extend(
                liveness_violations(&log.waits, quiet, self.liveness.bound, zero)
                    .into_iter()
                    .map(|v| format!("{kind:?}: {v}")),
            );
        }
        if kind.is_election() {
            let observer = match self.started {
                Some(zero) => observer_violations(log, &self.expiries, self.read_lag, zero),
                None => Vec::new(),
            };
            found.extend(
                term_order_violations(&log.intervals)
                    .into_iter()
                    .chain(observer)
                    .map(|v| format!("{kind:?}: {v}")),
            );
        } else if limit == 1 {
            found.extend(
                hold_order_violations(&log.intervals)
                    .into_iter()
                    .map(|v| format!("{kind:?}: {v}")),
            );
        }
        found
    }
}

/// No two holds at once (no more than the kind allows): among holders
/// that obeyed the loss signal, never more holds of different holders
/// active at one instant than `kind` allows; with the holds active at the
/// first such instant and the faults before it, for the record.
pub(crate) fn overlaps(
    kind: Kind,
    intervals: &[Interval],
    timeline: &[TimedFault],
    zero: Option<Instant>,
) -> Option<String> {
    let limit = kind.holders();
    let most = max_concurrent(intervals);
    (most > limit).then(|| {
        format!(
            "{kind:?}: {most} holders that obeyed the loss signal acted at once (limit {limit}){}",
            explain_overlap(intervals, limit, timeline, zero)
        )
    })
}

/// The most intervals of holders that obeyed the loss signal, of different
/// holders, active at once: judged by the order in which the harness saw
/// each begin and end (their [`sequence`](crate::sequence) numbers), not
/// by their instants, so that two holds that overlap inside one tick of
/// the clock (a simulation's 1 ms) are seen.
pub(crate) fn max_concurrent(intervals: &[Interval]) -> usize {
    let mut edges: Vec<(u64, i32)> = intervals
        .iter()
        .filter(|i| i.obeyed)
        .flat_map(|i| [(i.start_seq, 1), (i.end_seq, -1)])
        .collect();
    // Every number is drawn once: no ties but a hold that began and ended
    // at one moment (a stuck hold found lost ends where it got stuck).
    edges.sort_by_key(|&(at, delta)| (at, delta));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    most.max(0) as usize
}

/// The holds active together at the first instant beyond `limit`, and
/// the faults around it, for the record.
fn explain_overlap(
    intervals: &[Interval],
    limit: usize,
    timeline: &[TimedFault],
    zero: Option<Instant>,
) -> String {
    let Some(zero) = zero else {
        return String::new();
    };
    let at = |i: Instant| i.saturating_duration_since(zero);
    let obeyed: Vec<&Interval> = intervals.iter().filter(|i| i.obeyed).collect();
    for candidate in &obeyed {
        let (moment, seq) = (candidate.start, candidate.start_seq);
        let active: Vec<&&Interval> = obeyed
            .iter()
            .filter(|i| i.start_seq <= seq && seq < i.end_seq)
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
            let faults: Vec<String> = timeline
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

/// No stale write: the server accepted no write of a holder whose hold was
/// known lost (session replaced, node deleted) before it sent it.
pub(crate) fn stale_writes(kind: Kind, accepted: &[Accepted]) -> Option<String> {
    let stale = accepted.iter().filter(|a| a.lost_before).count();
    (stale > 0).then(|| format!("{kind:?}: {stale} stale write(s) accepted"))
}

/// No write through a released hold's fence: a fence taken before the
/// release opens nothing after it (`late_accepted` of those tried).
pub(crate) fn late_writes(kind: Kind, late_accepted: u64) -> Option<String> {
    (late_accepted > 0).then(|| {
        format!("{kind:?}: {late_accepted} write(s) through a released hold's fence accepted")
    })
}

/// The writes of an exclusive kind in the order of their holders: taken in
/// the counter's order, no accepted write carries a token below the one
/// before it.
pub(crate) fn write_order(kind: Kind, accepted: &[Accepted]) -> Option<String> {
    let mut writes = accepted.to_vec();
    writes.sort_by_key(|a| a.value);
    let regressions = writes
        .windows(2)
        .filter(|w| w[1].token < w[0].token)
        .count();
    (regressions > 0).then(|| {
        format!("{kind:?}: {regressions} accepted write(s) from an older holder after a newer one")
    })
}

/// Nobody else wrote during a valid hold of an exclusive kind (its
/// holder's conditional write found another version: `interference`
/// times, among holders that obeyed).
pub(crate) fn interference(kind: Kind, interference: u64) -> Option<String> {
    (interference > 0)
        .then(|| format!("{kind:?}: {interference} time(s) someone else wrote during a valid hold"))
}

/// Every acquire ends by its deadline (1.5 s forgiven; an acquire whose
/// place was stopped is not recorded).
pub(crate) fn late_acquires(kind: Kind, late: &[Duration]) -> Option<String> {
    (!late.is_empty()).then(|| {
        format!(
            "{kind:?}: {} acquire(s) overran their deadline: {late:?}",
            late.len()
        )
    })
}

/// The run proved something: every kind was acquired at least once.
pub(crate) fn never_acquired(kind: Kind, acquired: u64) -> Option<String> {
    (acquired == 0).then(|| format!("{kind:?}: never acquired (the run proved nothing)"))
}

/// The release of a hold already lost ends within `bound` per lock (it
/// never waits for a new session).
pub(crate) fn slow_releases(kind: Kind, slow: &[Duration], bound: Duration) -> Option<String> {
    (!slow.is_empty()).then(|| {
        format!(
            "{kind:?}: {} release(s) of a lost hold took longer than {bound:?}: {slow:?}",
            slow.len()
        )
    })
}

/// The release of a hold already lost, begun while its framework was not
/// connected, answers at once: the delete goes in the background (judged
/// in the simulator only, where nothing runs between the harness's look at
/// the framework's state and the release's own; a release that waited was
/// found only through a multi-lock's deadline before, seed 585).
pub(crate) fn offline_releases(kind: Kind, waited: &[Duration]) -> Option<String> {
    (!waited.is_empty()).then(|| {
        format!(
            "{kind:?}: {} release(s) of a lost hold begun while disconnected waited for the server: {waited:?}",
            waited.len()
        )
    })
}

/// A leadership-changes stream never hands out a term that had ended.
pub(crate) fn ended_handouts(kind: Kind, ended: &[String]) -> Option<String> {
    (!ended.is_empty()).then(|| {
        format!(
            "{kind:?}: the leadership-changes stream handed out {} ended term(s): {ended:?}",
            ended.len()
        )
    })
}

/// Rule 9, as recorded during the run (see [`early`]): no bound passed
/// before its time.
pub(crate) fn early_bounds(kind: Kind, early: &[String]) -> Option<String> {
    (!early.is_empty()).then(|| {
        let shown: Vec<&String> = early.iter().take(4).collect();
        format!(
            "{kind:?}: {} bound(s) passed before their time: {shown:?}",
            early.len()
        )
    })
}

/// Stuck holders on, and a bounded contender had the sections that make a
/// stuck one certain, so some hold must have got stuck (else the run proved
/// nothing of the bounds, and the harness's stuck holders are broken).
pub(crate) fn nothing_stuck<'a>(
    stuck_on: bool,
    mut logs: impl Iterator<Item = &'a Log>,
) -> Option<String> {
    (stuck_on && logs.all(|log| log.stuck.is_empty())).then(|| {
        "stuck holders on, yet no hold got stuck (the run proved nothing of the bounds)".to_owned()
    })
}

/// In cohort mode some node must have been passed (else the run proved
/// nothing of the cohort).
pub(crate) fn no_pass(passes: Option<u64>) -> Option<String> {
    (passes == Some(0))
        .then(|| "cohort mode, yet no node was passed (the run proved nothing)".to_owned())
}

/// When every fault was over: the heal of the links (`healed`), or the end
/// of the last fault window or stop of a contender's place if later (a
/// holder's pause asked for near the end runs its length after the heal).
pub(crate) fn quiet_point(
    healed: Instant,
    windows: &[FaultWindow],
    pauses: &[HostPause],
) -> Instant {
    windows
        .iter()
        .map(|w| w.end)
        .chain(pauses.iter().filter_map(|p| p.2))
        .fold(healed, Instant::max)
}

/// Rule 10 (the crate's notes, "Liveness"): once every fault is over (at
/// `quiet`), a task that wants the lock gets it within `bound`. `waits`
/// are one kind's acquires that ended after the stop; each task's tries in
/// a row until one got the lock are one wait, from the first try's start
/// (or `quiet`, if later) to the grant. A wait that never got the lock
/// counts only if its last try ended past the bound (a task that gave up
/// sooner proves nothing either way).
pub(crate) fn liveness_violations(
    waits: &[Wait],
    quiet: Instant,
    bound: Duration,
    zero: Instant,
) -> Vec<String> {
    let at = |i: Instant| i.saturating_duration_since(zero);
    let (mut late, mut never) = (Vec::new(), Vec::new());
    for wait in calm_waits(waits, quiet) {
        let (who, task) = (wait.who, wait.task);
        if wait.took <= bound {
            continue;
        }
        if wait.granted {
            late.push(format!(
                "#{who}/{task} waiting since {:?}, got it at {:?}",
                at(wait.since),
                at(wait.ended)
            ));
        } else {
            never.push(format!(
                "#{who}/{task} waiting since {:?}, gave up at {:?}",
                at(wait.since),
                at(wait.ended)
            ));
        }
    }
    let mut found = Vec::new();
    for (what, list) in [
        ("got the lock later than", late),
        ("never got the lock within", never),
    ] {
        if !list.is_empty() {
            let shown: Vec<&String> = list.iter().take(4).collect();
            found.push(format!(
                "{} task(s) {what} the liveness bound once the faults were over (bound {bound:?}, over at {:?}): {shown:?}",
                list.len(),
                at(quiet)
            ));
        }
    }
    found
}

/// One wait of rule 10: a task's acquires in a row, until one got the
/// lock or the last of them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CalmWait {
    pub(crate) who: usize,
    pub(crate) task: usize,
    /// The first acquire's start.
    pub(crate) since: Instant,
    /// When the last acquire ended, and whether it got the lock.
    pub(crate) ended: Instant,
    pub(crate) granted: bool,
    /// How long it lasted once the faults were over.
    pub(crate) took: Duration,
}

/// The waits of rule 10 among one kind's acquires `waits`: each task's
/// acquires in a row until one got the lock are one wait, from the first
/// one's start (or `quiet`, if later); a task's last acquires, none of
/// which got the lock, are one too.
pub(crate) fn calm_waits(waits: &[Wait], quiet: Instant) -> Vec<CalmWait> {
    let mut by_task: BTreeMap<(usize, usize), Vec<&Wait>> = BTreeMap::new();
    for wait in waits {
        by_task.entry((wait.who, wait.task)).or_default().push(wait);
    }
    let mut found = Vec::new();
    for ((who, task), mut tries) in by_task {
        tries.sort_by_key(|w| w.asked);
        let mut since: Option<Instant> = None;
        let last = tries.len() - 1;
        for (i, wait) in tries.iter().enumerate() {
            let first = *since.get_or_insert(wait.asked);
            if wait.granted || i == last {
                found.push(CalmWait {
                    who,
                    task,
                    since: first,
                    ended: wait.ended,
                    granted: wait.granted,
                    took: wait.ended.saturating_duration_since(first.max(quiet)),
                });
                since = None;
            }
        }
    }
    found
}

/// Rule 11 (the crate's notes, "Liveness"): no node under the lock paths
/// (the latches' left out) once every round has ended, within `bound`.
pub(crate) fn lingering(nodes: &[String], bound: Duration) -> Option<String> {
    (!nodes.is_empty()).then(|| {
        let shown: Vec<&String> = nodes.iter().take(6).collect();
        format!(
            "{} node(s) still under the lock paths once every round had ended (after {bound:?}): {shown:?}",
            nodes.len()
        )
    })
}

/// Nothing left when everyone has closed: no node under a lock path, no
/// framework's session open right after its close, no other session.
pub(crate) fn leftovers(nodes: &[String], unclosed: usize, sessions: usize) -> Vec<String> {
    let mut found = Vec::new();
    if !nodes.is_empty() {
        found.push(format!("nodes left behind: {nodes:?}"));
    }
    if unclosed > 0 {
        found.push(format!(
            "{unclosed} framework session(s) still open right after the framework's close"
        ));
    }
    if sessions > 0 {
        found.push(format!("{sessions} session(s) left behind"));
    }
    found
}
/// What is wrong with an election's terms: each term (one fencing token:
/// its election node) must belong to one contender, and a term that began
/// after another must have a greater token.
pub(crate) fn term_order_violations(intervals: &[Interval]) -> Vec<String> {
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
/// place was stopped while it waited: see `Interval::seen_late`) are left
/// out of the order, not of the count of tokens given twice.
pub(crate) fn hold_order_violations(intervals: &[Interval]) -> Vec<String> {
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

/// Rules 1 to 5 (the crate's notes, "The observer's contract"): what an
/// election's observer got wrong, each report of a leader that was stale
/// by one of the rules, and an observer that never named a leader.
/// `expiries`: the sessions the server expired, each with the instant its
/// expiry was confirmed; `read_lag`: how far behind the observer's server
/// may answer; `zero`: the run's start, for the words.
pub(crate) fn observer_violations(
    log: &Log,
    expiries: &[(i64, Instant)],
    read_lag: Duration,
    zero: Instant,
) -> Vec<String> {
    let reports: Vec<LeaderReport<'_>> = log
        .observed
        .iter()
        .filter_map(|seen| {
            let Observation::Leader(leader) = &seen.what else {
                return None;
            };
            Some(LeaderReport {
                node: &leader.node_path,
                token: leader.token,
                session: leader.session,
                id: &leader.id,
                value: &leader.value,
                proclaimed: leader.proclaimed,
                asked: seen.asked,
                at: seen.at,
                seq: seen.seq,
            })
        })
        .collect();
    leader_report_violations(
        &log.intervals,
        &reports,
        &log.deletions_told,
        expiries,
        read_lag,
        zero,
    )
}

/// A report of a leader by an election's observer, as the observer's rules
/// read it (the observer's own type cannot be built outside the library).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeaderReport<'a> {
    /// The leader's node.
    pub(crate) node: &'a str,
    /// Its term's fencing token (the node's creation zxid first).
    pub(crate) token: FencingToken,
    /// The node's session.
    pub(crate) session: i64,
    /// The participant's id.
    pub(crate) id: &'a str,
    /// The value reported, and whether the leader proclaimed it.
    pub(crate) value: &'a [u8],
    pub(crate) proclaimed: bool,
    /// When the harness began waiting for it, when it came, and the
    /// [`sequence`](crate::sequence) number of that moment.
    pub(crate) asked: Instant,
    pub(crate) at: Instant,
    pub(crate) seq: u64,
}

/// Rules 1 to 5 over an election's `terms` and its observer's leader
/// `reports` (in the order handed out), `told` being the first moment the
/// observer's client was told of each node's deletion (rule 5: simulated
/// links only).
pub(crate) fn leader_report_violations(
    terms: &[Interval],
    reports: &[LeaderReport<'_>],
    told: &BTreeMap<String, u64>,
    expiries: &[(i64, Instant)],
    read_lag: Duration,
    zero: Instant,
) -> Vec<String> {
    let at = |i: Instant| i.saturating_duration_since(zero);
    // The terms' nodes: creation zxid, path, and when the first term on
    // each began.
    let mut began: BTreeMap<i64, (Instant, &str)> = BTreeMap::new();
    for term in terms {
        let (Some(node), zxid) = (&term.node, term.token.get()) else {
            continue;
        };
        let entry = began.entry(zxid).or_insert((term.start, node));
        entry.0 = entry.0.min(term.start);
    }
    let mut stale = Vec::new();
    let mut highest: Option<(i64, Instant)> = None;
    for leader in reports {
        let zxid = leader.token.get();
        let named = format!(
            "{} (token {}, session {:#x}) asked at {:?}, handed out at {:?}",
            leader.node,
            leader.token,
            leader.session,
            at(leader.asked),
            at(leader.at)
        );
        // Rule 1: a node created later led before the read began (on
        // an ensemble, before the read's server may lag behind).
        let later = began
            .range(zxid + 1..)
            .filter(|(_, (start, _))| *start + read_lag < leader.asked)
            .min_by_key(|(_, (start, _))| *start);
        if let Some((later, (start, node))) = later {
            stale.push(format!(
                "{named}: {node} (token {later}) had led since {:?}",
                at(*start)
            ));
        }
        // Rule 2: the node's session was expired before the read began.
        if let Some((_, expired)) = expiries.iter().find(|(session, expired)| {
            *session == leader.session && *expired + read_lag < leader.asked
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
            highest = Some((zxid, leader.at));
        }
        // Rule 5: the observer's client had been told the node was
        // deleted (simulated links only).
        if told.get(leader.node).is_some_and(|told| *told < leader.seq) {
            stale.push(format!(
                "{named}: the observer's client had been told of the node's deletion before"
            ));
        }
        // Rule 4: a proclaimed value is the named participant's own.
        if leader.proclaimed && leader.value != value_of(leader.id).as_bytes() {
            stale.push(format!(
                "{named}: proclaimed value {:?} is not {}'s",
                String::from_utf8_lossy(leader.value),
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
    if reports.is_empty() {
        found.push("the observer never reported a leader (it proved nothing)".to_owned());
    }
    found
}

/// Rules 6 and 7: what the tree observer got wrong, by the crate's
/// notes ("The tree observer's contract"): a holder shown after its
/// client was told the node was deleted (rule 6), and, once the faults
/// healed, a view not current for longer than the bound, or not equal
/// to the truth within it (rule 7).
pub(crate) fn tree_violations(tree: &TreeLog, zero: Instant) -> Vec<String> {
    let at = |i: Instant| i.saturating_duration_since(zero);
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

/// Not a rule, a figure: the [`LockLoss::Stale`] losses inside a fault
/// window of their holder (up to `margin`, a session timeout, after its
/// end), and outside any (flaps).
pub(crate) fn stale_split(
    stale_losses: &[(usize, Instant)],
    windows: &[FaultWindow],
    margin: Duration,
) -> (usize, usize) {
    let inside = stale_losses
        .iter()
        .filter(|(who, when)| {
            windows
                .iter()
                .any(|w| w.who == *who && w.start <= *when && *when <= w.end + margin)
        })
        .count();
    (inside, stale_losses.len() - inside)
}

/// Rule 8's deadlines: those of a stuck hold whose bound ends at `end`, given the stops
/// of its holder's host known now: `(end_seen, lost_by, gone_by)`, or
/// `None` while a stop that counts has not ended yet.
///
/// A stopped host runs nothing, the enforcer included: a stop in force at
/// `end` moves the end as the enforcer sees it to the stop's end. A stop
/// between that and `gone_by` holds the delete up (the link is on the same
/// host), so `gone_by` is at least its end plus the slack. So does a
/// stall of the server (`stalls`: from, until) in force between the end as
/// seen and `gone_by`: the server hears the session's pings sent meanwhile
/// only at the stall's end, and reads the enforcer's delete no sooner.
pub(crate) fn deadlines(
    pauses: &[HostPause],
    stalls: &[(Instant, Instant)],
    who: usize,
    end: Instant,
    wake: Duration,
    slack: Duration,
) -> Option<(Instant, Instant, Instant)> {
    let mut mine: Vec<(Instant, Option<Instant>)> = pauses
        .iter()
        .filter(|p| p.0 == who)
        .map(|p| (p.1, p.2))
        .collect();
    mine.sort_by_key(|p| p.0);
    let mut seen = end;
    for &(start, stop) in &mine {
        if start <= seen && stop.is_none_or(|stop| stop >= seen) {
            seen = stop?;
        }
    }
    let mut gone_by = seen + slack;
    mine.extend(stalls.iter().map(|&(from, until)| (from, Some(until))));
    mine.sort_by_key(|p| p.0);
    for &(start, stop) in &mine {
        if start <= gone_by && stop.is_none_or(|stop| stop >= seen) {
            gone_by = gone_by.max(stop? + slack);
        }
    }
    Some((seen, seen + wake, gone_by))
}

/// Whether a stuck hold was lost otherwise (a connection state, a stale
/// lease) before its bound's end: the library then leaves its node to the
/// holder's release (`bounds::enforce` stops at any other loss), which a
/// stuck holder never makes (see "Stuck holders", rule 8 (b)).
pub(crate) fn lost_otherwise_first(j: &Judged) -> bool {
    j.lost.is_some_and(|(loss, when)| {
        !matches!(
            loss,
            LockLoss::BoundPassed(_) | LockLoss::NodeDeleted | LockLoss::SessionReplaced
        ) && when < j.end_seen
    })
}

/// The simulator's tick: its clocks, each host's included, move by it.
const SIM_TICK: Duration = Duration::from_millis(1);

/// Rule 8: what is wrong with the stuck holds of one kind,
/// each in words with instants since `zero`. `exact`: a loss is seen the
/// instant it is latched (one thread: the simulator), so one seen after
/// the tick after the bound's end must be the bound's. `strict`: a node left by a
/// hold lost otherwise first counts too (see [`lost_otherwise_first`]).
pub(crate) fn stuck_violations(
    judged: &[Judged],
    zero: Instant,
    exact: bool,
    strict: bool,
) -> Vec<String> {
    let at = |i: Instant| i.saturating_duration_since(zero);
    let mut late = Vec::new();
    let mut reason = Vec::new();
    let mut left = Vec::new();
    for j in judged {
        let name = format!(
            "#{}/{} stuck at {:?}, bound's end {:?} (as its host saw it {:?})",
            j.who,
            j.task,
            at(j.stuck_at),
            at(j.end),
            at(j.end_seen)
        );
        match j.lost {
            Some((_, when)) if when <= j.lost_by => {}
            Some((loss, when)) => late.push(format!(
                "{name}: lost() fired at {:?} ({loss:?}), after {:?}",
                at(when),
                at(j.lost_by)
            )),
            None => late.push(format!(
                "{name}: lost() had not fired by {:?}",
                at(j.lost_by)
            )),
        }
        if let Some((loss, when)) = j.lost {
            // A host's clock drifts from the harness's by whole ticks: at
            // ±200 ppm over a bound of at most 4 s, its own end falls at
            // most one tick after `E'` (seed 4358: a suspension in the tick
            // of `E'`, the host's end in the next). A loss with another
            // reason after that is wrong.
            let certain = j.end_seen + SIM_TICK;
            if exact && when > certain && !matches!(loss, LockLoss::BoundPassed(_)) {
                reason.push(format!("{name}: lost at {:?} with {loss:?}", at(when)));
            }
        }
        if !j.left.is_empty() && (strict || !lost_otherwise_first(j)) {
            left.push(format!(
                "{name}, lost {:?}: {:?} still there at {:?}",
                j.lost.map(|(loss, when)| (loss, at(when))),
                j.left,
                at(j.gone_by)
            ));
        }
    }
    let mut found = Vec::new();
    for (what, list) in [
        ("stuck hold(s) whose lost() did not fire by the bound's end plus the enforcer's wake-up", late),
        ("stuck hold(s) lost after the bound's end with another reason than BoundPassed", reason),
        ("stuck hold(s) whose node outlived the bound's end plus the slack", left),
    ] {
        if !list.is_empty() {
            let shown: Vec<&String> = list.iter().take(4).collect();
            found.push(format!("{} {what}: {shown:?}", list.len()));
        }
    }
    found
}

/// The stuck holds lost otherwise first whose node outlived the bound's
/// end plus the slack (the library's gap of rule 8 (b)), in words.
pub(crate) fn left_after_other_loss(judged: &[Judged], zero: Instant) -> Vec<String> {
    let at = |i: Instant| i.saturating_duration_since(zero);
    judged
        .iter()
        .filter(|j| !j.left.is_empty() && lost_otherwise_first(j))
        .map(|j| {
            format!(
                "#{}/{} stuck at {:?}, lost {:?} at {:?}, bound's end {:?}: {:?} still there at {:?}",
                j.who,
                j.task,
                at(j.stuck_at),
                j.lost.map(|(loss, _)| loss),
                j.lost.map(|(_, when)| at(when)),
                at(j.end_seen),
                j.left,
                at(j.gone_by)
            )
        })
        .collect()
}

/// Rule 9: a bound that passed too early: a hold lost with [`LockLoss::BoundPassed`]
/// at `at`, its holder having asked at `asked` and said progress at each of
/// `progress` (each stamp taken just after the call). The silence bound
/// passes only after a stretch of `silence` without progress, and the hold
/// bound only once `duration` has passed since the acquire began.
pub(crate) fn early(
    bounds: HoldBounds,
    bound: Bound,
    asked: Instant,
    progress: &[Instant],
    at: Instant,
) -> Option<String> {
    // The stamps come just after the library's own instants (in real time,
    // by microseconds): this much is forgiven.
    let tolerance = Duration::from_millis(5);
    match bound {
        Bound::Silence => {
            let silence = bounds.max_silence()?;
            let mut stamps: Vec<Instant> = vec![asked];
            stamps.extend_from_slice(progress);
            stamps.push(at);
            let longest = stamps
                .windows(2)
                .map(|w| w[1].saturating_duration_since(w[0]))
                .max()
                .unwrap_or_default();
            (longest + tolerance < silence).then(|| {
                format!("silence bound {silence:?} passed, yet the longest stretch without progress was {longest:?}")
            })
        }
        Bound::Duration => {
            let duration = bounds.max_duration()?;
            let lasted = at.saturating_duration_since(asked);
            (lasted + tolerance < duration).then(|| {
                format!("hold bound {duration:?} passed {lasted:?} after the acquire began")
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{Agreement, TreeSeen};
    use zk_curator::ConnectionState;

    /// An instant `ms` milliseconds after `zero`.
    fn ms(zero: Instant, ms: u64) -> Instant {
        zero + Duration::from_millis(ms)
    }

    /// A hold by `who` from `start` to `end` (milliseconds), token `zxid`,
    /// by a holder that obeyed the loss signal.
    fn held(zero: Instant, who: usize, start: u64, end: u64, zxid: i64) -> Interval {
        Interval {
            who,
            task: 0,
            token: FencingToken::new(zxid),
            node: None,
            loss: None,
            start: ms(zero, start),
            end: ms(zero, end),
            // The harness's order: ten moments a millisecond, an end
            // before a start at one instant.
            start_seq: start * 10 + 1,
            end_seq: end * 10,
            obeyed: true,
            seen_late: false,
        }
    }

    fn accepted(value: u64, zxid: i64, lost_before: bool) -> Accepted {
        Accepted {
            value,
            token: FencingToken::new(zxid),
            lost_before,
        }
    }

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
        let windows = [window(0, 1_000, 4_000), window(1, 10_000, 10_000)];
        let stale_losses = [
            // Inside #0's blackhole, and in its margin.
            (0, at(2_000)),
            (0, at(5_900)),
            // After the margin, before a window, another's window.
            (0, at(6_100)),
            (0, at(500)),
            (0, at(10_500)),
            // In the margin of #1's reset.
            (1, at(11_000)),
        ];
        assert_eq!(
            stale_split(&stale_losses, &windows, Duration::from_secs(2)),
            (3, 3)
        );
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
            start_seq: start_ms * 10 + 1,
            end_seq: (start_ms + 10) * 10,
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

    /// A term led by two contenders (one token, two holders) is found; the
    /// same contender's sections of one term are not.
    #[test]
    fn a_term_led_by_two_contenders_is_found() {
        let zero = Instant::now();
        let one = [held(zero, 0, 100, 200, 20), held(zero, 0, 200, 300, 20)];
        assert!(term_order_violations(&one).is_empty());
        let two = [held(zero, 0, 100, 200, 20), held(zero, 1, 300, 400, 20)];
        let found = term_order_violations(&two);
        assert_eq!(found, ["term 20 led by #0 and #1"], "{found:?}");
    }

    /// Two obeying holders of a one-holder kind at once are an overlap (with
    /// the holds and the faults before them in the words); a hold ending as
    /// another begins, a holder that did not obey, or a second holder of a
    /// two-lease semaphore are not.
    #[test]
    fn overlapping_holders_are_found() {
        let zero = Instant::now();
        let timeline = [(ms(zero, 50), "blackhole", 1)];
        let apart = [held(zero, 0, 100, 200, 1), held(zero, 1, 200, 300, 2)];
        assert_eq!(max_concurrent(&apart), 1);
        assert!(overlaps(Kind::MutexGuard, &apart, &timeline, Some(zero)).is_none());
        let together = [held(zero, 0, 100, 250, 1), held(zero, 1, 200, 300, 2)];
        let found =
            overlaps(Kind::MutexGuard, &together, &timeline, Some(zero)).expect("an overlap");
        assert!(
            found.starts_with(
                "MutexGuard: 2 holders that obeyed the loss signal acted at once (limit 1): "
            ),
            "{found}"
        );
        assert!(found.contains("#1/0 token 2 200ms..300ms"), "{found}");
        assert!(
            found.ends_with("faults before: [\"blackhole@#1 50ms\"]"),
            "{found}"
        );
        let mut disobeyed = together.clone();
        disobeyed[1].obeyed = false;
        assert!(overlaps(Kind::MutexGuard, &disobeyed, &timeline, Some(zero)).is_none());
        assert!(overlaps(Kind::Semaphore2, &together, &timeline, Some(zero)).is_none());
        let three = [
            held(zero, 0, 100, 250, 1),
            held(zero, 1, 200, 300, 2),
            held(zero, 2, 220, 260, 3),
        ];
        assert!(overlaps(Kind::Semaphore2, &three, &timeline, Some(zero)).is_some());
    }

    /// Overlaps are judged by the harness's order of events, not by the
    /// clock: two holds within one millisecond, the second begun before the
    /// first ended, overlap; the same instants in the other order do not.
    #[test]
    fn an_overlap_inside_one_tick_is_found() {
        let zero = Instant::now();
        let mut first = held(zero, 0, 100, 100, 1);
        let mut second = held(zero, 1, 100, 101, 2);
        (first.start_seq, first.end_seq) = (1, 3);
        (second.start_seq, second.end_seq) = (2, 4);
        assert_eq!(max_concurrent(&[first.clone(), second.clone()]), 2);
        let found = overlaps(
            Kind::MutexGuard,
            &[first.clone(), second.clone()],
            &[],
            Some(zero),
        );
        assert!(
            found.is_some_and(|v| v.contains("#0/0 token 1 100ms..100ms")),
            "the holds in the words"
        );
        (second.start_seq, second.end_seq) = (4, 5);
        assert_eq!(max_concurrent(&[first, second]), 1);
    }

    /// A selector's term whose holder's place was stopped between the
    /// selector's queueing and the term's first instant is seen late, as a
    /// latch's is: a stop there may hold back the term's start past a later
    /// term's (the term was granted before the stop), and the token order
    /// leaves it out. Without the queueing instant (as before: no `asked`
    /// for a selector's term) it counted, and broke the order.
    #[test]
    fn a_selector_term_seen_late_is_left_out_of_the_order() {
        let zero = Instant::now();
        let stop = [(0, ms(zero, 150), Some(ms(zero, 400)))];
        // #0 queued at 100, granted token 10 at 140, stopped 150..400: its
        // term's first instant is 410; #1's term (token 20) began at 300.
        let late = |asked: Option<Instant>| Interval {
            seen_late: crate::records::seen_late(&stop, 0, asked),
            ..held(zero, 0, 410, 500, 10)
        };
        let other = held(zero, 1, 300, 380, 20);
        let before = [other.clone(), late(None)];
        assert_eq!(term_order_violations(&before).len(), 1, "{before:?}");
        let now = [other, late(Some(ms(zero, 100)))];
        assert!(term_order_violations(&now).is_empty());
        // Queued after the stop: not seen late.
        assert!(!crate::records::seen_late(&stop, 0, Some(ms(zero, 401))));
    }

    /// The faults are over at the heal, or at the end of the last fault
    /// window or stop of a place if later.
    #[test]
    fn the_faults_are_over_at_the_last_ones_end() {
        let zero = Instant::now();
        let window = |end| FaultWindow {
            who: 0,
            start: ms(zero, 0),
            end: ms(zero, end),
        };
        assert_eq!(quiet_point(ms(zero, 5_000), &[], &[]), ms(zero, 5_000));
        let windows = [window(4_000), window(6_000)];
        assert_eq!(quiet_point(ms(zero, 5_000), &windows, &[]), ms(zero, 6_000));
        let stops = [
            (1, ms(zero, 4_500), Some(ms(zero, 7_000))),
            (2, ms(zero, 1), None),
        ];
        assert_eq!(
            quiet_point(ms(zero, 5_000), &windows, &stops),
            ms(zero, 7_000)
        );
    }

    /// Rule 10: a task's tries in a row are one wait, counted from the
    /// later of its first try and the faults' end; a wait granted past the
    /// bound, or given up past it, is found; one given up sooner, or
    /// granted in time after tries that timed out, is not.
    #[test]
    fn a_wait_past_the_liveness_bound_is_found() {
        let zero = Instant::now();
        let bound = Duration::from_secs(5);
        let quiet = ms(zero, 10_000);
        let wait = |who, asked, ended, granted| Wait {
            who,
            task: 0,
            asked: ms(zero, asked),
            ended: ms(zero, ended),
            granted,
        };
        let judge = |waits: &[Wait]| liveness_violations(waits, quiet, bound, zero);
        // Waiting since before the faults' end, got it 4 s after; a retry
        // after a timeout, got it 5 s after the faults' end.
        let fine = [
            wait(0, 8_000, 14_000, true),
            wait(1, 9_000, 12_000, false),
            wait(1, 12_100, 15_000, true),
            // Gave up within the bound: proves nothing.
            wait(2, 11_000, 14_000, false),
        ];
        assert!(judge(&fine).is_empty(), "{:?}", judge(&fine));
        let late = [wait(1, 9_000, 12_000, false), wait(1, 12_100, 15_100, true)];
        let found = judge(&late);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("1 task(s) got the lock later than the liveness bound")
                && found[0].contains("#1/0 waiting since 9s, got it at 15.1s"),
            "{found:?}"
        );
        let never = [wait(0, 10_500, 17_000, false)];
        let found = judge(&never);
        assert!(
            found.len() == 1
                && found[0].starts_with("1 task(s) never got the lock within the liveness bound")
                && found[0].contains("#0/0 waiting since 10.5s, gave up at 17s"),
            "{found:?}"
        );
        // The same words for another run's numbers (the regressions' rule).
        assert_eq!(
            crate::verdict::tests::rule(&found[0]),
            "task(s) never got the lock within the liveness bound once the faults were over"
        );
    }

    /// What `sim/regressions` keeps of a violation: its words before the
    /// first " (" or ':', numbers left out.
    fn rule(violation: &str) -> String {
        let end = [violation.find(" ("), violation.find(':')]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(violation.len());
        violation[..end]
            .split_whitespace()
            .filter(|w| !w.chars().all(|c| c.is_ascii_digit() || c == '.'))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Rule 11: a node still under a lock path is found.
    #[test]
    fn a_node_left_after_the_last_round_is_found() {
        let bound = Duration::from_secs(4);
        assert!(lingering(&[], bound).is_none());
        let found = lingering(&["/r/mutex-guard/n".to_owned()], bound);
        assert!(
            found.is_some_and(|v| v.starts_with("1 node(s) still under the lock paths")
                && v.ends_with("[\"/r/mutex-guard/n\"]")),
        );
    }

    /// A write accepted after its hold was known lost is stale; so is one
    /// through a released hold's fence; so is an older holder's write after
    /// a newer one's.
    #[test]
    fn stale_late_and_out_of_order_writes_are_found() {
        let fine = [accepted(1, 10, false), accepted(2, 20, false)];
        assert!(stale_writes(Kind::MutexTask, &fine).is_none());
        assert!(write_order(Kind::MutexTask, &fine).is_none());
        let stale = [accepted(1, 10, false), accepted(2, 20, true)];
        assert_eq!(
            stale_writes(Kind::MutexTask, &stale).as_deref(),
            Some("MutexTask: 1 stale write(s) accepted")
        );
        let backwards = [accepted(2, 10, false), accepted(1, 20, false)];
        assert_eq!(
            write_order(Kind::MutexTask, &backwards).as_deref(),
            Some("MutexTask: 1 accepted write(s) from an older holder after a newer one")
        );
        assert!(late_writes(Kind::MutexTask, 0).is_none());
        assert_eq!(
            late_writes(Kind::MutexTask, 2).as_deref(),
            Some("MutexTask: 2 write(s) through a released hold's fence accepted")
        );
    }

    /// The rules on counts and lists of one kind's log: each holds on an
    /// empty count or list, and fails on one entry.
    #[test]
    fn the_rules_on_a_kinds_counts_can_fail() {
        let kind = Kind::WriteLock;
        let second = Duration::from_secs(1);
        assert!(interference(kind, 0).is_none());
        assert_eq!(
            interference(kind, 1).as_deref(),
            Some("WriteLock: 1 time(s) someone else wrote during a valid hold")
        );
        assert!(late_acquires(kind, &[]).is_none());
        assert_eq!(
            late_acquires(kind, &[8 * second]).as_deref(),
            Some("WriteLock: 1 acquire(s) overran their deadline: [8s]")
        );
        assert!(never_acquired(kind, 1).is_none());
        assert_eq!(
            never_acquired(kind, 0).as_deref(),
            Some("WriteLock: never acquired (the run proved nothing)")
        );
        assert!(offline_releases(kind, &[]).is_none());
        assert_eq!(
            offline_releases(kind, &[Duration::from_millis(40)]).as_deref(),
            Some("WriteLock: 1 release(s) of a lost hold begun while disconnected waited for the server: [40ms]")
        );
        assert!(slow_releases(kind, &[], 3 * second).is_none());
        assert_eq!(
            slow_releases(kind, &[4 * second], 3 * second).as_deref(),
            Some("WriteLock: 1 release(s) of a lost hold took longer than 3s: [4s]")
        );
        assert!(ended_handouts(kind, &[]).is_none());
        let ended = ["/r/latch/n ended by NodeDeleted (stream)".to_owned()];
        assert!(
            ended_handouts(kind, &ended).is_some_and(|v| v.contains("handed out 1 ended term(s)"))
        );
        assert!(early_bounds(kind, &[]).is_none());
        let early = ["#0/0: silence bound 300ms passed".to_owned()];
        assert!(early_bounds(kind, &early)
            .is_some_and(|v| v.starts_with("WriteLock: 1 bound(s) passed before their time")));
    }

    /// The run-wide rules: stuck holders that never got stuck, a cohort run
    /// without a pass, and whatever was left behind.
    #[test]
    fn the_run_wide_rules_can_fail() {
        let empty = Log::default();
        assert!(nothing_stuck(false, [&empty].into_iter()).is_none());
        assert!(nothing_stuck(true, [&empty].into_iter()).is_some());
        assert!(no_pass(None).is_none());
        assert!(no_pass(Some(3)).is_none());
        assert!(no_pass(Some(0)).is_some());
        assert!(leftovers(&[], 0, 0).is_empty());
        let left = leftovers(&["/r/mutex-guard/n".to_owned()], 1, 2);
        assert_eq!(
            left,
            [
                "nodes left behind: [\"/r/mutex-guard/n\"]",
                "1 framework session(s) still open right after the framework's close",
                "2 session(s) left behind",
            ]
        );
    }

    /// `Report::violations` applies the rules kind by kind, each prefixed
    /// by the kind, then the run-wide ones; a report with nothing recorded
    /// wrong has none.
    #[test]
    fn a_report_gathers_every_rule() {
        assert!(Report::default().violations().is_empty());
        let zero = Instant::now();
        let log = Log {
            acquired: 0,
            late_accepted: 1,
            intervals: vec![hold(zero, 100, 20, false), hold(zero, 200, 10, false)],
            ..Log::default()
        };
        let report = Report {
            logs: BTreeMap::from([(Kind::MutexGuard, log)]),
            leftover_sessions: 1,
            started: Some(zero),
            ..Report::default()
        };
        let found = report.violations();
        assert_eq!(found.len(), 5, "{found:?}");
        assert_eq!(
            found[0],
            "MutexGuard: 1 write(s) through a released hold's fence accepted"
        );
        assert_eq!(
            found[1],
            "MutexGuard: never acquired (the run proved nothing)"
        );
        assert!(
            found[2].starts_with("MutexGuard: 1 hold(s) began with a token not above"),
            "{found:?}"
        );
        assert_eq!(
            found[3],
            "the tree observer was never current (it proved nothing)"
        );
        assert_eq!(found[4], "1 session(s) left behind");
    }

    /// An election's node `n<zxid>` led by `who` from `start` (ms).
    fn term(zero: Instant, who: usize, start: u64, zxid: i64) -> Interval {
        Interval {
            node: Some(format!("/r/latch/n{zxid}")),
            ..held(zero, who, start, start + 100, zxid)
        }
    }

    /// A report of node `n<zxid>` (session `zxid`, participant `c`, its
    /// own value proclaimed) asked at `asked` ms, handed out 10 ms later
    /// with sequence number `seq`.
    fn report(zero: Instant, zxid: i64, asked: u64, seq: u64) -> LeaderReport<'static> {
        let node = match zxid {
            10 => "/r/latch/n10",
            _ => "/r/latch/n20",
        };
        LeaderReport {
            node,
            token: FencingToken::new(zxid),
            session: zxid,
            id: "c",
            value: b"value of c",
            proclaimed: true,
            asked: ms(zero, asked),
            at: ms(zero, asked + 10),
            seq,
        }
    }

    /// Each of the observer's rules 1 to 5, broken alone, is found; a
    /// report that breaks none is not; an observer that reported no leader
    /// proved nothing.
    #[test]
    fn each_observer_rule_can_fail() {
        let zero = Instant::now();
        let terms = [term(zero, 0, 100, 10), term(zero, 1, 1_000, 20)];
        let nobody = BTreeMap::new();
        let judge = |reports: &[LeaderReport<'_>],
                     told: &BTreeMap<String, u64>,
                     expiries: &[(i64, Instant)],
                     lag: Duration| {
            leader_report_violations(&terms, reports, told, expiries, lag, zero)
        };
        let zero_lag = Duration::ZERO;
        // Node 10 reported while it led, then node 20 after it began.
        let fine = [report(zero, 10, 500, 1), report(zero, 20, 1_500, 2)];
        assert!(judge(&fine, &nobody, &[], zero_lag).is_empty());
        assert_eq!(
            judge(&[], &nobody, &[], zero_lag),
            ["the observer never reported a leader (it proved nothing)"]
        );
        let stale = |found: Vec<String>, why: &str| {
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(
                found[0].starts_with("the observer reported 1 leader(s) whose term was over"),
                "{found:?}"
            );
            assert!(found[0].contains(why), "{why}: {found:?}");
        };
        // Rule 1: node 10 asked for after node 20 had begun to lead (on an
        // ensemble, a read lag of a second forgives it).
        let after = [report(zero, 10, 1_500, 1)];
        stale(
            judge(&after, &nobody, &[], zero_lag),
            "/r/latch/n20 (token 20) had led since 1s",
        );
        assert!(judge(&after, &nobody, &[], Duration::from_secs(1)).is_empty());
        // Rule 2: node 10's session expired before the report was asked.
        let expired = [(10, ms(zero, 400))];
        stale(
            judge(&[report(zero, 10, 500, 1)], &nobody, &expired, zero_lag),
            "its session was expired at 400ms",
        );
        // Rule 3: node 10 after node 20 (both asked before node 20 led, so
        // that rule 1 stays silent).
        let backwards = [report(zero, 20, 500, 1), report(zero, 10, 600, 2)];
        stale(
            judge(&backwards, &nobody, &[], zero_lag),
            "the observer had named token 20 at 510ms",
        );
        // Rule 4: a proclaimed value of another participant's.
        let mut wrong = report(zero, 10, 500, 1);
        wrong.value = b"value of d";
        stale(judge(&[wrong], &nobody, &[], zero_lag), "is not c's");
        wrong.proclaimed = false;
        assert!(judge(&[wrong], &nobody, &[], zero_lag).is_empty());
        // Rule 5: the client had been told of node 10's deletion (at
        // sequence 4) before the report (at 5; at 4 it may still show it).
        let told = BTreeMap::from([("/r/latch/n10".to_owned(), 4)]);
        stale(
            judge(&[report(zero, 10, 500, 5)], &told, &[], zero_lag),
            "had been told of the node's deletion before",
        );
        assert!(judge(&[report(zero, 10, 500, 4)], &told, &[], zero_lag).is_empty());
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
        let tree = |views, agreed| TreeLog {
            views,
            deletions_told: BTreeMap::from([("/r/a/n1".to_owned(), 10)]),
            healed: Some(at(5_000)),
            agreement: Some(agreement(agreed)),
        };
        // Told at 10: a view asked at 10 may still show it; at 11 not, nor
        // may a current view after the heal be missing past the bound.
        let fine = tree(
            vec![
                view(10, 100, true, &["/r/a/n1"]),
                view(11, 200, true, &[]),
                view(12, 6_000, false, &[]),
                view(13, 7_900, true, &[]),
            ],
            Some(9_100),
        );
        assert!(
            tree_violations(&fine, zero).is_empty(),
            "{:?}",
            tree_violations(&fine, zero)
        );
        let broken = tree(
            vec![
                view(11, 200, true, &["/r/a/n1"]),
                view(12, 6_000, false, &[]),
                view(13, 8_100, true, &[]),
            ],
            None,
        );
        let found = tree_violations(&broken, zero);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].contains("/r/a/n1 in view #0"), "{found:?}");
        assert!(found[1].contains("not current for longer"), "{found:?}");
        assert!(found[2].contains("did not agree"), "{found:?}");
    }

    /// A stop of the host in force at the bound's end moves it to the
    /// stop's end; a later stop within the slack moves `gone_by`; another
    /// contender's stop, or one before, changes nothing; one not ended
    /// yet leaves the deadlines unknown.
    #[test]
    fn deadlines_follow_the_stops_of_the_holders_host() {
        let zero = Instant::now();
        let at = |ms: u64| zero + Duration::from_millis(ms);
        let (wake, slack) = (Duration::from_millis(10), Duration::from_millis(1000));
        let none = deadlines(&[], &[], 0, at(500), wake, slack).unwrap();
        assert_eq!(none, (at(500), at(510), at(1500)));
        let others = [(1, at(400), Some(at(3000))), (0, at(100), Some(at(300)))];
        assert_eq!(
            deadlines(&others, &[], 0, at(500), wake, slack).unwrap(),
            none
        );
        let over_end = [(0, at(400), Some(at(2000)))];
        assert_eq!(
            deadlines(&over_end, &[], 0, at(500), wake, slack).unwrap(),
            (at(2000), at(2010), at(3000))
        );
        let within = [(0, at(1200), Some(at(2500)))];
        assert_eq!(
            deadlines(&within, &[], 0, at(500), wake, slack).unwrap(),
            (at(500), at(510), at(3500))
        );
        let running = [(0, at(1200), None)];
        assert!(deadlines(&running, &[], 0, at(500), wake, slack).is_none());
    }

    /// A stall of the server in force at the bound's end, or begun by
    /// `gone_by` (even one a stop of the host moved), moves `gone_by` to its
    /// end plus the slack, whoever holds; it never moves the end as the
    /// holder's enforcer sees it. One over before the end changes nothing.
    #[test]
    fn deadlines_follow_the_stalls_of_the_server() {
        let zero = Instant::now();
        let at = |ms: u64| zero + Duration::from_millis(ms);
        let (wake, slack) = (Duration::from_millis(10), Duration::from_millis(1000));
        let before = [(at(100), at(400))];
        assert_eq!(
            deadlines(&[], &before, 0, at(500), wake, slack).unwrap(),
            (at(500), at(510), at(1500))
        );
        // Seed 3822: two stalls back to back over the end.
        let over_end = [(at(1300), at(2300)), (at(200), at(1400))];
        assert_eq!(
            deadlines(&[], &over_end, 3, at(500), wake, slack).unwrap(),
            (at(500), at(510), at(3300))
        );
        let after_a_stop = [(0, at(1200), Some(at(2500)))];
        let in_the_moved_slack = [(at(3000), at(3600))];
        assert_eq!(
            deadlines(&after_a_stop, &in_the_moved_slack, 0, at(500), wake, slack).unwrap(),
            (at(500), at(510), at(4600))
        );
        let too_late = [(at(3600), at(4000))];
        assert_eq!(
            deadlines(&after_a_stop, &too_late, 0, at(500), wake, slack).unwrap(),
            (at(500), at(510), at(3500))
        );
    }

    /// A stuck hold judged: stuck at 100 ms, its bound's end at 500 ms,
    /// `lost()` due by 510 ms, its node gone by 3 s.
    fn judged(zero: Instant, lost: Option<(LockLoss, u64)>, left: &[&str]) -> Judged {
        Judged {
            who: 0,
            task: 0,
            stuck_at: ms(zero, 100),
            end: ms(zero, 500),
            lost_by: ms(zero, 510),
            gone_by: ms(zero, 3_000),
            end_seen: ms(zero, 500),
            lost: lost.map(|(loss, at)| (loss, ms(zero, at))),
            gone_at: vec![None],
            left: left.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    /// Rule 8: a stuck hold whose `lost()` fired late or never, one lost
    /// after its bound's end with another reason (where a loss is seen at
    /// once), and one whose node outlived the slack are each found; a node
    /// left by a hold lost otherwise first only when strict, and it is
    /// counted for the report either way.
    #[test]
    fn each_stuck_hold_rule_can_fail() {
        let zero = Instant::now();
        let bound = LockLoss::BoundPassed(Bound::Silence);
        let rule = |j: Judged, exact, strict| stuck_violations(&[j], zero, exact, strict);
        assert!(rule(judged(zero, Some((bound, 505)), &[]), true, true).is_empty());
        let never = rule(judged(zero, None, &[]), false, true);
        assert!(
            never.len() == 1 && never[0].contains("lost() had not fired by 510ms"),
            "{never:?}"
        );
        let late = rule(judged(zero, Some((bound, 600)), &[]), false, true);
        assert!(
            late.len() == 1 && late[0].contains("lost() fired at 600ms"),
            "{late:?}"
        );
        // In the tick after the end: the host's clock may be one behind.
        let suspended = LockLoss::ConnectionState(ConnectionState::Suspended);
        let next_tick = judged(zero, Some((suspended, 501)), &[]);
        assert!(rule(next_tick, true, true).is_empty(), "seed 4358");
        let other = judged(zero, Some((LockLoss::NodeDeleted, 505)), &[]);
        assert!(rule(other.clone(), false, true).is_empty(), "not exact");
        let reason = rule(other, true, true);
        assert!(
            reason.len() == 1 && reason[0].contains("lost after the bound's end with another"),
            "{reason:?}"
        );
        let left = rule(judged(zero, Some((bound, 505)), &["/r/n"]), true, false);
        assert!(
            left.len() == 1 && left[0].contains("/r/n") && left[0].contains("still there at 3s"),
            "{left:?}"
        );
        // Lost otherwise (a suspension) before the bound's end, node left.
        let suspended = judged(zero, Some((LockLoss::Stale, 300)), &["/r/n"]);
        assert!(lost_otherwise_first(&suspended));
        assert!(rule(suspended.clone(), true, false).is_empty(), "lenient");
        assert_eq!(rule(suspended.clone(), true, true).len(), 1, "strict");
        assert_eq!(left_after_other_loss(&[suspended], zero).len(), 1);
    }

    /// A silence bound that passed after a stretch without progress as long
    /// as the bound is fine; one that passed sooner is early; so is a hold
    /// bound that passed before its length since the acquire began.
    #[test]
    fn a_bound_that_passed_early_is_found() {
        let zero = Instant::now();
        let at = |ms: u64| zero + Duration::from_millis(ms);
        let bounds = HoldBounds::new()
            .silence(Duration::from_millis(300))
            .duration(Duration::from_millis(2000));
        let progress = [at(100), at(250), at(400)];
        assert!(early(bounds, Bound::Silence, at(0), &progress, at(700)).is_none());
        assert!(early(bounds, Bound::Silence, at(0), &progress, at(600)).is_some());
        // Gaps of 100, 250 and 10 ms: none as long as the bound.
        assert!(early(bounds, Bound::Silence, at(0), &[at(100), at(350)], at(360)).is_some());
        assert!(early(bounds, Bound::Duration, at(0), &progress, at(2000)).is_none());
        assert!(early(bounds, Bound::Duration, at(0), &progress, at(1900)).is_some());
    }
}
