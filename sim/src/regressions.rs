//! `sim/regressions/`: shrunk schedules that once failed, run before every
//! batch. A file names a seed, its run's length, the bug planted (if any)
//! and the faults left out; a run with a planted bug must still fail (the
//! checks still catch it), one without must pass (the bug it found stays
//! fixed).
//!
//! ```text
//! # why: MutexGuard: 1 stale write(s) accepted
//! seed 7
//! secs 10
//! break fence
//! skip-harness 0 2
//! skip-net 1 3
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::run::{self, Breaks, Outcome, Plan};

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
    plan: Plan,
}

fn parse(text: &str) -> Result<Regression, String> {
    let mut regression = Regression {
        seed: 0,
        duration: Duration::from_secs(15),
        breaks: Breaks::default(),
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
        );
        let caught = !outcome.violations.is_empty();
        let ok = caught == is_broken(regression.breaks);
        println!(
            "regression {name}: {}",
            match (ok, caught) {
                (true, true) => "still caught".to_owned(),
                (true, false) => "passes".to_owned(),
                (false, true) => format!("FAILED: {}", outcome.violations.join("; ")),
                (false, false) => "FAILED: the planted bug is no longer caught".to_owned(),
            }
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
pub fn shrink(seed: u64, duration: Duration, breaks: Breaks) -> (Plan, Outcome) {
    let mut plan = Plan::default();
    let mut failing = run::run(seed, duration, breaks, &plan);
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
        let outcome = run::run(seed, duration, breaks, &trial);
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
    if !kinds.is_empty() {
        text.push_str(&format!("break {}\n", kinds.join(" ")));
    }
    text.push_str(&format!(
        "skip-harness {}\nskip-net {}\n",
        list(&plan.harness),
        list(&plan.net)
    ));
    let name = if kinds.is_empty() {
        format!("seed-{seed}.txt")
    } else {
        format!("seed-{seed}-{}.txt", kinds.join("-"))
    };
    std::fs::create_dir_all(dir())?;
    let path = dir().join(name);
    std::fs::write(&path, text)?;
    Ok(path)
}
