//! One seed: a scenario drawn from it, a world of simulated hosts, the
//! chaos harness against the world's server, faults of the network's own,
//! and the harness's verdict with the run's event log.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::hash::{DefaultHasher, Hasher};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zk_curator::framework::zk;
use zk_curator::CohortPolicy;

use crate::net::{self, ContenderHost, LinkControl, SimTarget, SERVER};
use zk_curator_chaos::{Config, Target};

/// Bugs planted on purpose, to show that the checks catch them.
#[derive(Clone, Copy, Debug)]
pub struct Breaks {
    /// Holders write without their fence.
    pub fence: bool,
    /// Holders ignore the loss signal.
    pub loss: bool,
    /// Observers' reports are handed out late, as if just read.
    pub observer: bool,
    /// Stuck holders' progress is said by a timer, not by their work.
    pub bound: bool,
    /// Not a planted bug: rule 8 (b) for stuck holds lost otherwise first
    /// too (see the harness's `Config::strict_bounds`). On unless
    /// `--lenient-bounds`.
    pub strict_bounds: bool,
}

impl Default for Breaks {
    /// No bug planted; rule 8 (b) held whole.
    fn default() -> Self {
        Breaks {
            fence: false,
            loss: false,
            observer: false,
            bound: false,
            strict_bounds: true,
        }
    }
}

impl Breaks {
    /// Whether any bug is planted.
    pub fn any(self) -> bool {
        self.fence || self.loss || self.observer || self.bound
    }
}

/// Faults left out of a seed's schedule, by their number in the run: the
/// harness's own, and the network's. Empty: the whole schedule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub harness: BTreeSet<u64>,
    pub net: BTreeSet<u64>,
}

/// What one seed runs, drawn from it.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub contenders: usize,
    pub session_timeout: Duration,
    pub cohort: bool,
    pub duration: Duration,
    /// The network's message latency, lowest and highest.
    pub latency: (Duration, Duration),
}

impl Scenario {
    /// The scenario of `seed`, running for `duration` of simulated time.
    pub fn of(seed: u64, duration: Duration) -> Scenario {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x5ce0_a210);
        let low = rng.u64(0..=2);
        Scenario {
            contenders: rng.usize(2..=4),
            session_timeout: Duration::from_millis(rng.u64(1500..=4000)),
            cohort: rng.u8(0..4) == 0,
            duration,
            latency: (
                Duration::from_millis(low),
                Duration::from_millis(low + rng.u64(0..=8)),
            ),
        }
    }

    pub(crate) fn config(&self, seed: u64, breaks: Breaks, plan: &Plan) -> Config {
        let mut config = Config {
            duration: self.duration,
            contenders: self.contenders,
            session_timeout: self.session_timeout,
            seed,
            break_fence: breaks.fence,
            break_loss: breaks.loss,
            break_observer: breaks.observer,
            cohort: None,
            tasks: 1,
            read_lag: Duration::ZERO,
            skip_faults: plan.harness.clone(),
            // The contenders' connection timeout on one server (see
            // `Config::release_bound`).
            release_bound: Duration::from_secs(3),
            // One thread: no real time between a stream's look and the
            // harness's (see `Config::probe_leadership`).
            probe_leadership: true,
            stuck: true,
            break_bound: breaks.bound,
            // One thread, one clock: the enforcer's timer fires at the
            // bound's end, in the tick it falls in, and its loss is seen
            // then.
            wake_slack: Duration::from_millis(2),
            stuck_slack: zk_curator_chaos::STUCK_SLACK,
            loss_seen_at_once: true,
            strict_bounds: breaks.strict_bounds,
        };
        if self.cohort {
            config = config.with_cohort(CohortPolicy::new(8, Duration::from_secs(1)), 2);
        }
        config
    }

    /// Links to make: one per contender and per observer (two elections'
    /// and the tree observer's).
    pub(crate) fn links(&self) -> usize {
        self.contenders + 3
    }
}

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
}

/// How far each simulation thread has got, for [`watch_progress`].
#[derive(Debug, Default)]
struct Progress {
    /// The seed running (`u64::MAX`: none).
    seed: AtomicU64,
    /// Steps taken (of every seed): it moves while the thread makes
    /// progress.
    steps: AtomicU64,
    /// The simulated time of the last step ended, in microseconds.
    at: AtomicU64,
}

impl Progress {
    /// One look of the watcher at this thread, `seen` being its steps at
    /// the last look and since when they have not moved: the failure to
    /// report if a seed's step has stood still for more than `limit`.
    fn stuck(
        &self,
        seen: &mut (u64, std::time::Instant),
        now: std::time::Instant,
        limit: Duration,
    ) -> Option<String> {
        let steps = self.steps.load(Ordering::SeqCst);
        let seed = self.seed.load(Ordering::SeqCst);
        if steps != seen.0 || seed == u64::MAX {
            *seen = (steps, now);
            return None;
        }
        (now.saturating_duration_since(seen.1) > limit).then(|| {
            format!(
                "seed {seed}: FAILED: stuck at {:?} of simulated time: a step has not ended in {limit:?} of real time (a task that never waits, always ready, keeps its host's clock from moving; ZK_SIM_TRACE=debug shows what ran last)",
                Duration::from_micros(self.at.load(Ordering::SeqCst)),
            )
        })
    }
}

/// Every simulation thread's progress.
static PROGRESS: Mutex<Vec<Arc<Progress>>> = Mutex::new(Vec::new());

thread_local! {
    static MINE: Arc<Progress> = {
        let progress = Arc::new(Progress::default());
        progress.seed.store(u64::MAX, Ordering::SeqCst);
        PROGRESS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(progress.clone());
        progress
    };
}

/// Watches every simulation thread from a thread of its own: a step that
/// has not ended after `limit` of real time means a task that never waits
/// (it is always ready, so the host's runtime is never idle and its clock
/// never moves: the step cannot end). Nothing on the stuck thread can
/// interrupt it, so the seed is reported and the process exits with a
/// failure.
pub fn watch_progress(limit: Duration) {
    let watcher = move || {
        let mut seen: Vec<(u64, std::time::Instant)> = Vec::new();
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let threads = PROGRESS.lock().unwrap_or_else(|p| p.into_inner()).clone();
            seen.resize(threads.len(), (0, std::time::Instant::now()));
            for (progress, seen) in threads.iter().zip(seen.iter_mut()) {
                if let Some(stuck) = progress.stuck(seen, std::time::Instant::now(), limit) {
                    println!("{stuck}");
                    std::process::exit(1);
                }
            }
        }
    };
    let _ = std::thread::Builder::new()
        .name("progress".to_owned())
        .spawn(move || {
            crate::threads::ours();
            watcher()
        });
}

/// Notes that this thread's step ended at `at` of simulated time.
pub(crate) fn note_step(at: Duration) {
    MINE.with(|p| {
        p.steps.fetch_add(1, Ordering::SeqCst);
        p.at.store(at.as_micros() as u64, Ordering::SeqCst);
    });
}

/// Runs `seed` on this thread.
pub fn run(seed: u64, duration: Duration, breaks: Breaks, plan: &Plan) -> Outcome {
    MINE.with(|p| p.seed.store(seed, Ordering::SeqCst));
    let mut outcome = run_seed(seed, duration, breaks, plan);
    MINE.with(|p| p.seed.store(u64::MAX, Ordering::SeqCst));
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
    let dialer = Arc::new(net::TurmoilDialer::default());
    zk::set_thread_dialer(Some(dialer.clone()));
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(
            || match crate::ensemble::size() {
                Some(size) => {
                    crate::ensemble::simulate(seed, &scenario, breaks, plan, &dialer, size)
                }
                None => simulate(seed, &scenario, breaks, plan, &dialer),
            },
        ));
    zk::set_thread_dialer(None);
    zk_curator_chaos::set_clock(None);
    CLOCK_BASE.with(|b| b.set(None));
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
    }
}

thread_local! {
    /// The harness host's clock at the simulation's start.
    static CLOCK_BASE: Cell<Option<tokio::time::Instant>> = const { Cell::new(None) };
}

/// The harness's clock, read on any host: the harness host's start plus
/// the simulated time since, which every host reads alike. (Each host's
/// tokio clock has a base of its own: the real instant its runtime was
/// made.)
fn harness_now() -> tokio::time::Instant {
    let base = CLOCK_BASE
        .with(Cell::get)
        .unwrap_or_else(tokio::time::Instant::now);
    base + turmoil::sim_elapsed().unwrap_or_default()
}

/// Sets the harness's clock on the harness's host (its first step): every
/// host reads it alike (see [`harness_now`]).
pub(crate) fn start_harness_clock() {
    let base = tokio::time::Instant::now() - turmoil::sim_elapsed().unwrap_or_default();
    CLOCK_BASE.with(|b| b.set(Some(base)));
    zk_curator_chaos::set_clock(Some(harness_now));
}

/// A run that finished: its log, its verdict, the faults drawn.
pub(crate) struct Finished {
    pub(crate) log: Vec<String>,
    pub(crate) violations: Vec<String>,
    pub(crate) drawn: (u64, u64),
}

/// How long before the end of the harness's faults the network's stop.
pub(crate) const CALM: Duration = Duration::from_millis(500);

pub(crate) type Simulated = Result<Finished, (Vec<String>, String)>;

fn simulate(
    seed: u64,
    scenario: &Scenario,
    breaks: Breaks,
    plan: &Plan,
    dialer: &net::TurmoilDialer,
) -> Simulated {
    let mut config = scenario.config(seed, breaks, plan);
    if crate::crash::of(seed).is_some() {
        config = config.with_stuck_slack(crate::crash::STUCK_SLACK);
    }
    // Room for the harness's wind-down (its waits are bounded at 30 s each).
    let limit = scenario.duration + Duration::from_secs(240);
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(limit)
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(scenario.latency.0)
        .max_message_latency(scenario.latency.1)
        .enable_random_order()
        .build();
    let server: net::ServerSlot = Rc::new(RefCell::new(None));
    let slot = server.clone();
    sim.host(SERVER, move || net::serve(slot.clone()));
    // Each contender and observer on a host of its own, which reaches the
    // server through its link (a forwarder on the same host, with the
    // harness's faults).
    let mut links = Vec::new();
    let mut hosts = Vec::new();
    for i in 0..scenario.links() {
        let host = ContenderHost::new(format!("link{i}"));
        let link = LinkControl::new(format!("link{i}")).serving(host.clone());
        let control = link.clone();
        let software = host.clone();
        sim.host(link.host(), move || software.software(control.clone()));
        dialer.tap(&link);
        links.push(link);
        hosts.push(host);
    }
    let target = SimTarget {
        server: server.clone(),
        links: links.clone(),
        next_link: Cell::new(0),
    };
    let report = Rc::new(RefCell::new(None));
    let out = report.clone();
    sim.client("harness", async move {
        // The harness's stamps, read on any host, on this host's clock.
        let base = tokio::time::Instant::now() - turmoil::sim_elapsed().unwrap_or_default();
        CLOCK_BASE.with(|b| b.set(Some(base)));
        zk_curator_chaos::set_clock(Some(harness_now));
        // The server's host starts first: its first tick runs before ours.
        let made = zk_curator_chaos::run_on(Target::Sim(&target), config).await;
        *out.borrow_mut() = Some(made);
        Ok(())
    });

    // The network's own faults, from a generator of their own.
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x0ddf_a017);
    let mut log = Vec::new();
    // Every host's clock at a rate of its own.
    let mut names = vec![SERVER.to_owned(), "harness".to_owned()];
    names.extend(links.iter().map(|link| link.host().to_owned()));
    crate::drift::apply(&mut sim, seed, &names, &mut log);
    let mut next = Duration::from_millis(rng.u64(500..3000));
    let mut held: Option<(usize, Duration)> = None;
    let mut drawn = 0u64;
    let mut healed = false;
    // Hosts stopped as paused processes, as their holders ask.
    let mut stops = net::Stops::default();
    // `--crash`: the server's crashes and lost replies.
    let mut crashes = crate::crash::of(seed);
    loop {
        let finished = match sim.step() {
            Ok(finished) => finished,
            Err(err) => return Err((log, err.to_string())),
        };
        let now = sim.elapsed();
        note_step(now);
        if finished {
            break;
        }
        stops.carry_out(&mut sim, now, &hosts, &mut log);
        if let (Some(crashes), Some(server)) = (crashes.as_mut(), server.borrow().as_ref()) {
            let calm = scenario.duration.saturating_sub(CALM);
            crashes.step(now, calm, server, plan, &mut drawn, &mut log);
        }
        if let Some((link, until)) = held {
            if now >= until {
                sim.release(links[link].host(), SERVER);
                log.push(format!("{} net release link{link}", now.as_micros()));
                held = None;
            }
        }
        // The network heals before the harness winds down (as the harness
        // heals its own links): a close held up by a fault still in force
        // would leave its session to expire, which no rule is about.
        let calm = scenario.duration.saturating_sub(CALM);
        if now >= calm {
            if !healed {
                healed = true;
                if let Some((link, _)) = held.take() {
                    sim.release(links[link].host(), SERVER);
                }
                if let Some(server) = server.borrow().as_ref() {
                    server.resume();
                }
                for link in &links {
                    sim.set_link_max_message_latency(link.host(), SERVER, scenario.latency.1);
                }
                log.push(format!("{} net healed", now.as_micros()));
            }
            continue;
        }
        if now < next {
            continue;
        }
        // No fault outlasts the calm's start.
        let room = calm.saturating_sub(now).as_millis() as u64;
        next = now + Duration::from_millis(rng.u64(500..3000));
        let fault = rng.u8(0..3);
        let (link, length) = (rng.usize(0..links.len()), rng.u64(50..2500).min(room));
        drawn += 1;
        if plan.net.contains(&(drawn - 1)) {
            continue;
        }
        match fault {
            0 if held.is_none() => {
                let length = Duration::from_millis(length);
                sim.hold(links[link].host(), SERVER);
                log.push(format!(
                    "{} net hold link{link} for {}",
                    now.as_micros(),
                    length.as_millis()
                ));
                held = Some((link, now + length));
            }
            1 => {
                let length = Duration::from_millis(length.min(1500));
                if let Some(server) = server.borrow().as_ref() {
                    server.stall(length);
                }
                log.push(format!(
                    "{} net stall server for {}",
                    now.as_micros(),
                    length.as_millis()
                ));
            }
            _ => {
                let latency = Duration::from_millis(length / 60);
                sim.set_link_max_message_latency(
                    links[link].host(),
                    SERVER,
                    latency.max(scenario.latency.0),
                );
                log.push(format!(
                    "{} net latency link{link} up to {}",
                    now.as_micros(),
                    latency.as_millis()
                ));
            }
        }
    }
    let Some(report) = report.borrow_mut().take() else {
        return Err((log, "the harness ended without a report".to_owned()));
    };
    log.extend(report.event_log());
    let harness = report
        .faults
        .iter()
        .filter(|(name, _)| **name != "pause+expiry")
        .map(|(_, n)| n)
        .sum::<u64>()
        + plan.harness.len() as u64;
    Ok(Finished {
        log,
        violations: report.violations(),
        drawn: (harness, drawn),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seed whose steps stand still past the limit is reported, with its
    /// simulated time; steps that move, or no seed running, are not.
    #[test]
    fn a_step_that_stands_still_past_the_limit_is_reported() {
        let limit = Duration::from_secs(60);
        let zero = std::time::Instant::now();
        let progress = Progress::default();
        progress.seed.store(5, Ordering::SeqCst);
        progress.steps.store(10, Ordering::SeqCst);
        progress.at.store(2_820_000, Ordering::SeqCst);
        let mut seen = (0, zero);
        assert_eq!(progress.stuck(&mut seen, zero, limit), None, "steps moved");
        assert_eq!(seen, (10, zero));
        assert_eq!(
            progress.stuck(&mut seen, zero + limit, limit),
            None,
            "not past"
        );
        let stuck = progress
            .stuck(&mut seen, zero + limit + Duration::from_secs(1), limit)
            .expect("reported");
        assert!(
            stuck.starts_with("seed 5: FAILED: stuck at 2.82s"),
            "{stuck}"
        );
        progress.steps.store(11, Ordering::SeqCst);
        let later = zero + 3 * limit;
        assert_eq!(progress.stuck(&mut seen, later, limit), None, "moved again");
        progress.seed.store(u64::MAX, Ordering::SeqCst);
        assert_eq!(
            progress.stuck(&mut seen, later + 2 * limit, limit),
            None,
            "no seed running"
        );
    }
}
