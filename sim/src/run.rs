//! One seed: the scenario drawn from it, run on one server (`single.rs`)
//! or on an ensemble (`ensemble.rs`, with `--ensemble`) on this thread, a
//! panic or a real thread started taken for a failure, and the harness's
//! verdict with the run's event log and its hash.

use std::hash::{DefaultHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use zk_curator::framework::zk;

use crate::mode::Mode;
use crate::net;
use crate::plan::{Breaks, Plan, Scenario};
use crate::progress::note_seed;
use crate::world;

/// How a seed's run went.
#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    pub scenario: Scenario,
    /// Broken rules, or why the run did not finish; empty when it passed.
    pub violations: Vec<String>,
    /// The run's events, one per line.
    pub log: Vec<String>,
    /// A hash of `log`.
    pub hash: u64,
    /// The faults the harness and the network drew (skipped ones included).
    pub drawn: (u64, u64),
    /// In swarm mode, what the seed reached, by name (see `swarm.rs`).
    pub reached: std::collections::BTreeMap<&'static str, u64>,
}

/// Runs `seed` on this thread, in `mode`.
pub fn run(seed: u64, duration: Duration, breaks: Breaks, plan: &Plan, mode: Mode) -> Outcome {
    mode.enter();
    note_seed(Some(seed));
    let mut outcome = run_seed(seed, duration, breaks, plan);
    note_seed(None);
    let foreign = crate::threads::foreign();
    if !foreign.is_empty() {
        outcome.violations.push(format!(
            "a real OS thread started while the seed ran (it runs outside the simulation: the seed cannot replay): {foreign:?}"
        ));
    }
    outcome
}

fn run_seed(seed: u64, duration: Duration, breaks: Breaks, plan: &Plan) -> Outcome {
    let scenario = Scenario::of(seed, duration);
    // The one source of randomness of this thread, and the client's way
    // onto the simulated network.
    zk_curator::framework::random::seed(seed);
    crate::swarm::begin(seed);
    let dialer = Arc::new(net::TurmoilDialer::default());
    zk::set_thread_dialer(Some(dialer.clone()));
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(
            || match crate::ensemble::size() {
                Some(size) => {
                    crate::ensemble::simulate(seed, &scenario, breaks, plan, &dialer, size)
                }
                None => crate::single::simulate(seed, &scenario, breaks, plan, &dialer),
            },
        ));
    zk::set_thread_dialer(None);
    world::stop_harness_clock();
    let reached = crate::swarm::end(crate::crash::take_lost_fired());
    let mut drawn = (0, 0);
    let (mut log, violations) = match result {
        Ok(Ok(run)) => {
            drawn = run.drawn;
            (run.log, run.violations)
        }
        Ok(Err((log, err))) => (log, vec![format!("the simulation failed: {err}")]),
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            (Vec::new(), vec![format!("panicked: {what}")])
        }
    };
    log.extend(violations.iter().map(|v| format!("violation: {v}")));
    let mut hasher = DefaultHasher::new();
    for line in &log {
        hasher.write(line.as_bytes());
        hasher.write_u8(b'\n');
    }
    Outcome {
        seed,
        scenario,
        violations,
        hash: hasher.finish(),
        log,
        drawn,
        reached,
    }
}
