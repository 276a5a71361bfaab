//! `sim/regressions/`: shrunk schedules that once failed, run before every
//! batch. A file names a seed, its run's length, the world it ran in (one
//! server unless it says `ensemble N`, `crash` or `swarm`), the bug planted
//! (if any), the rule that caught it and the faults left out; a run with a planted
//! bug must still fail, by that rule (a schedule that a change of timing
//! has moved away from the bug fails loudly, whether nothing or another
//! rule catches it), and one without must pass (the bug it found stays
//! fixed).
//!
//! ```text
//! # why: MutexGuard: 1 stale write(s) accepted
//! seed 7
//! secs 10
//! break fence
//! rule stale write(s) accepted
//! skip-harness 0 2
//! skip-net 1 3
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::mode::Mode;
use crate::plan::{Breaks, Plan};
use crate::run::{self, Outcome};

/// Where the regressions live.
fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions")
}

/// One saved schedule.
#[derive(Debug)]
struct Regression {
    seed: u64,
    duration: Duration,
    breaks: Breaks,
    mode: Mode,
    /// The rule that caught the planted bug ([`rule_of`] of a violation).
    rule: Option<String>,
    plan: Plan,
}

/// The rule a violation broke: its words without the kind of hold before
/// the first `: `, without numbers, up to its details (a ` (` or a `:`),
/// so that the same rule broken again in another run reads the same.
pub fn rule_of(violation: &str) -> String {
    let text = violation
        .split_once(": ")
        .map_or(violation, |(_, rest)| rest);
    let end = [text.find(" ("), text.find(':')]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(text.len());
    text[..end]
        .split_whitespace()
        .filter(|word| !word.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .collect::<Vec<_>>()
        .join(" ")
}

fn parse(text: &str) -> Result<Regression, String> {
    let mut regression = Regression {
        seed: 0,
        duration: Duration::from_secs(15),
        breaks: Breaks::default(),
        mode: Mode::default(),
        rule: None,
        plan: Plan::default(),
    };
    let mut seeded = false;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let key = words.next().unwrap_or_default();
        let numbers = || -> Result<Vec<u64>, String> {
            line.split_whitespace()
                .skip(1)
                .map(|w| w.parse().map_err(|_| format!("not a number: {w:?}")))
                .collect()
        };
        match key {
            "seed" => {
                regression.seed = numbers()?.first().copied().ok_or("seed needs a number")?;
                seeded = true;
            }
            "secs" => {
                let secs = numbers()?.first().copied().ok_or("secs needs a number")?;
                regression.duration = Duration::from_secs(secs);
            }
            "break" => {
                for kind in words {
                    match kind {
                        "fence" => regression.breaks.fence = true,
                        "loss" => regression.breaks.loss = true,
                        "observer" => regression.breaks.observer = true,
                        "bound" => regression.breaks.bound = true,
                        other => return Err(format!("unknown break {other:?}")),
                    }
                }
            }
            "rule" => {
                let rule = line["rule".len()..].trim();
                if rule.is_empty() {
                    return Err("rule needs the rule's words".to_owned());
                }
                regression.rule = Some(rule.to_owned());
            }
            "ensemble" => {
                let size = numbers()?.first().copied().ok_or("ensemble needs a size")?;
                regression.mode.ensemble = Some(size as usize);
            }
            "crash" => regression.mode.crash = true,
            "swarm" => regression.mode.swarm = true,
            "skip-harness" => regression.plan.harness = numbers()?.into_iter().collect(),
            "skip-net" => regression.plan.net = numbers()?.into_iter().collect(),
            other => return Err(format!("unknown line {other:?}")),
        }
    }
    if !seeded {
        return Err("no seed".to_owned());
    }
    Ok(regression)
}

fn is_broken(breaks: Breaks) -> bool {
    breaks.any()
}

/// Runs every saved regression, in name order; returns how many failed.
pub fn run_all() -> usize {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir())
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "txt"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut failed = 0;
    for file in &files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let regression = match std::fs::read_to_string(file)
            .map_err(|e| e.to_string())
            .and_then(|t| parse(&t))
        {
            Ok(regression) => regression,
            Err(err) => {
                println!("regression {name}: unreadable: {err}");
                failed += 1;
                continue;
            }
        };
        let outcome = run::run(
            regression.seed,
            regression.duration,
            regression.breaks,
            &regression.plan,
            regression.mode,
        );
        let caught = !outcome.violations.is_empty();
        let broken = is_broken(regression.breaks);
        let by_its_rule = match &regression.rule {
            Some(rule) => outcome.violations.iter().any(|v| rule_of(v) == *rule),
            None => true,
        };
        let verdict = match (broken, caught) {
            (true, true) if by_its_rule => Ok(format!(
                "still caught{}",
                regression
                    .rule
                    .as_ref()
                    .map_or(String::new(), |r| format!(" ({r})"))
            )),
            (true, true) => Err(format!(
                "FAILED: caught, but not by its rule {:?} (its schedule no longer reaches it; find the bug anew and save it): {}",
                regression.rule.as_deref().unwrap_or_default(),
                outcome.violations.iter().map(|v| rule_of(v)).collect::<Vec<_>>().join("; ")
            )),
            (true, false) => Err(format!(
                "FAILED: the planted bug is no longer caught{} (its schedule no longer reaches it; find the bug anew and save it)",
                regression
                    .rule
                    .as_ref()
                    .map_or(String::new(), |r| format!(" by {r:?}"))
            )),
            (false, false) => Ok("passes".to_owned()),
            (false, true) => Err(format!("FAILED: {}", outcome.violations.join("; "))),
        };
        let ok = verdict.is_ok();
        println!(
            "regression {name}: {}",
            verdict.unwrap_or_else(|failed| failed)
        );
        if !ok {
            failed += 1;
        }
    }
    failed
}

/// Shrinks failing `seed`'s schedule in one pass: each fault in turn (the
/// harness's, then the network's) is left out if the run still fails
/// without it. Returns the plan and its run.
pub fn shrink(seed: u64, duration: Duration, breaks: Breaks, mode: Mode) -> (Plan, Outcome) {
    let mut plan = Plan::default();
    let mut failing = run::run(seed, duration, breaks, &plan, mode);
    let (harness, net) = failing.drawn;
    let faults = (0..harness)
        .map(|i| (true, i))
        .chain((0..net).map(|i| (false, i)));
    for (of_harness, i) in faults {
        let mut trial = plan.clone();
        let left_out = if of_harness {
            &mut trial.harness
        } else {
            &mut trial.net
        };
        left_out.insert(i);
        let outcome = run::run(seed, duration, breaks, &trial, mode);
        if !outcome.violations.is_empty() {
            (plan, failing) = (trial, outcome);
        }
    }
    (plan, failing)
}

/// The first broken rule, on one line of at most 200 characters.
fn why(outcome: &Outcome) -> String {
    let first = outcome
        .violations
        .first()
        .map_or("", String::as_str)
        .replace('\n', " ");
    match first.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &first[..cut]),
        None => first,
    }
}

/// Saves a shrunk schedule under `sim/regressions/`.
pub fn save(
    seed: u64,
    duration: Duration,
    breaks: Breaks,
    mode: Mode,
    plan: &Plan,
    outcome: &Outcome,
) -> std::io::Result<PathBuf> {
    let mut kinds = Vec::new();
    for (on, kind) in [
        (breaks.fence, "fence"),
        (breaks.loss, "loss"),
        (breaks.observer, "observer"),
        (breaks.bound, "bound"),
    ] {
        if on {
            kinds.push(kind);
        }
    }
    let list = |set: &std::collections::BTreeSet<u64>| {
        set.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")
    };
    let mut text = format!(
        "# why: {}\nseed {seed}\nsecs {}\n",
        why(outcome),
        duration.as_secs()
    );
    if let Some(size) = mode.ensemble {
        text.push_str(&format!("ensemble {size}\n"));
    }
    if mode.crash {
        text.push_str("crash\n");
    }
    if mode.swarm {
        text.push_str("swarm\n");
    }
    if !kinds.is_empty() {
        text.push_str(&format!("break {}\n", kinds.join(" ")));
        if let Some(first) = outcome.violations.first() {
            text.push_str(&format!("rule {}\n", rule_of(first)));
        }
    }
    text.push_str(&format!(
        "skip-harness {}\nskip-net {}\n",
        list(&plan.harness),
        list(&plan.net)
    ));
    let words: Vec<String> = mode
        .words()
        .into_iter()
        .chain(kinds.iter().map(|k| (*k).to_owned()))
        .collect();
    let name = if words.is_empty() {
        format!("seed-{seed}.txt")
    } else {
        format!("seed-{seed}-{}.txt", words.join("-"))
    };
    std::fs::create_dir_all(dir())?;
    let path = dir().join(name);
    std::fs::write(&path, text)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same rule reads the same whatever the kind, the counts and the
    /// details of the run that broke it.
    #[test]
    fn a_rule_is_its_words_without_kind_counts_or_details() {
        assert_eq!(
            rule_of("KazooWrite: 2 holders that obeyed the loss signal acted at once (limit 1): [\"#2/0\"]"),
            "holders that obeyed the loss signal acted at once"
        );
        assert_eq!(
            rule_of("MutexTask: 3 accepted write(s) from an older holder after a newer one"),
            "accepted write(s) from an older holder after a newer one"
        );
        assert_eq!(
            rule_of("Latch: the observer reported 7 leader(s) whose term was over: [\"/x\"]"),
            "the observer reported leader(s) whose term was over"
        );
        assert_ne!(
            rule_of("MutexGuard: 1 stale write(s) accepted"),
            rule_of("MutexGuard: 1 accepted write(s) from an older holder after a newer one")
        );
    }

    #[test]
    fn a_regression_names_its_rule() {
        let text =
            "# why: x\nseed 3\nsecs 10\nbreak loss\nrule holders acted at once\nskip-harness 1\n";
        let regression = parse(text).expect("a well-formed regression");
        assert_eq!(regression.rule.as_deref(), Some("holders acted at once"));
        assert_eq!(regression.mode, Mode::default());
        assert!(parse("seed 3\nrule\n").is_err());
        let on_ensemble = parse("seed 268\nsecs 10\nensemble 3\ncrash\nswarm\n").expect("a mode");
        assert_eq!(
            on_ensemble.mode,
            Mode {
                ensemble: Some(3),
                crash: true,
                swarm: true
            }
        );
    }
}
