//! The report's words: the table of figures a run prints (its `Display`:
//! holds, writes, overlaps, timeouts, pauses, the observers' reports, Stale
//! losses inside and outside the faults' windows, the stuck holds, the tree
//! observer), and the event log a simulation hashes
//! ([`Report::event_log`]: one line per event, every instant as the time
//! since the run began).

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;
use zk_curator::{LockLoss, Observation};

use crate::records::{Judged, Log, Report};
use crate::verdict::{
    calm_waits, left_after_other_loss, max_concurrent, quiet_point, stale_split, CalmWait,
};

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
            for w in &log.waits {
                lines.push(format!(
                    "{kind:?} wait by {}.{} from {} to {} granted {}",
                    w.who,
                    w.task,
                    at(w.asked),
                    at(w.ended),
                    w.granted
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
        if let Some(healed) = self.tree.healed {
            let quiet = quiet_point(healed, &self.windows, &self.liveness.host_pauses);
            let longest = self
                .logs
                .values()
                .flat_map(|log| calm_waits(&log.waits, quiet))
                .map(|w| w.took)
                .max()
                .unwrap_or_default();
            lines.push(format!(
                "liveness quiet {} longest {} bound {} lingering {:?}",
                at(quiet),
                longest.as_micros(),
                self.liveness.bound.as_micros(),
                self.liveness.lingering
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
            let (inside, outside) =
                stale_split(&log.stale_losses, &self.windows, self.session_timeout);
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
            .map(|log| stale_split(&log.stale_losses, &self.windows, self.session_timeout))
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
            let (judged, by_bound, otherwise, lost_after, gone_after) = figures(&log.stuck);
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
                let left = left_after_other_loss(&log.stuck, zero);
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
        if let Some(healed) = self.tree.healed {
            let quiet = quiet_point(healed, &self.windows, &self.liveness.host_pauses);
            let waits: Vec<CalmWait> = self
                .logs
                .values()
                .flat_map(|log| calm_waits(&log.waits, quiet))
                .collect();
            let longest = waits.iter().map(|w| w.took).max().unwrap_or_default();
            let after = |i: Instant| i.saturating_duration_since(healed);
            writeln!(
                f,
                "liveness: faults over {:?} after the heal; {} wait(s) into the calm, the longest {longest:?} (bound {:?})",
                after(quiet),
                waits.len(),
                self.liveness.bound
            )?;
        }
        write!(
            f,
            "left behind: {} node(s), {} session(s)",
            self.leftover_nodes.len(),
            self.leftover_sessions
        )
    }
}

/// The figures of one kind's stuck holds: how many, lost by a bound / lost
/// otherwise first, and the longest from the bound's end (as the host saw
/// it) to the loss and to the node's deletion as told to the harness.
fn figures(judged: &[Judged]) -> (usize, usize, usize, Duration, Duration) {
    let by_bound = judged
        .iter()
        .filter(|j| matches!(j.lost, Some((LockLoss::BoundPassed(_), _))))
        .count();
    let otherwise = judged
        .iter()
        .filter(|j| {
            j.lost
                .is_some_and(|(l, _)| !matches!(l, LockLoss::BoundPassed(_)))
        })
        .count();
    let lost_after = judged
        .iter()
        .filter_map(|j| {
            j.lost
                .map(|(_, when)| when.saturating_duration_since(j.end_seen))
        })
        .max()
        .unwrap_or_default();
    let gone_after = judged
        .iter()
        .flat_map(|j| {
            j.gone_at
                .iter()
                .flatten()
                .map(|g| g.saturating_duration_since(j.end_seen))
        })
        .max()
        .unwrap_or_default();
    (judged.len(), by_bound, otherwise, lost_after, gone_after)
}
