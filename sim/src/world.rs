//! What the two worlds a seed runs in (one server's, `single.rs`; an
//! ensemble's, `ensemble.rs`) are made of alike: the turmoil simulation, a
//! link host per contender and observer, the harness on a host of its own
//! with its clock, the network's own faults (a held link, a stalled server
//! or member, a link's latency raised), and the run's end: the harness's
//! report read into the event log, with the faults drawn.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use zk_curator_chaos::{Config, Report, SimServer, Target};
use zk_curator_server::ensemble::Ensemble;

use crate::net::{self, ContenderHost, LinkControl, SERVER};
use crate::plan::{Plan, Scenario};
use crate::progress::note_step;

/// A run that finished: its log, its verdict, the faults drawn.
pub(crate) struct Finished {
    pub(crate) log: Vec<String>,
    pub(crate) violations: Vec<String>,
    pub(crate) drawn: (u64, u64),
}

/// How long before the end of the harness's faults the network's stop.
pub(crate) const CALM: Duration = Duration::from_millis(500);

pub(crate) type Simulated = Result<Finished, (Vec<String>, String)>;

/// The simulation of `seed`'s `scenario`: a tick of 1 ms, the scenario's
/// message latency, messages delivered in a seeded order, and room after
/// the scenario's end for the harness's wind-down (its waits are bounded
/// at 30 s each).
pub(crate) fn simulation<'a>(seed: u64, scenario: &Scenario) -> turmoil::Sim<'a> {
    let limit = scenario.duration + Duration::from_secs(240);
    turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(limit)
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(scenario.latency.0)
        .max_message_latency(scenario.latency.1)
        .enable_random_order()
        .build()
}

/// Each contender and observer on a host of its own (`link0`, `link1`,
/// ...), which reaches the server through its link (a forwarder on the
/// same host, with the harness's faults): `route` sets where the `i`th
/// link's connections go before its host starts, and `dialer` taps each
/// link. The links and their hosts, in order.
pub(crate) fn link_hosts(
    sim: &mut turmoil::Sim<'_>,
    scenario: &Scenario,
    dialer: &net::TurmoilDialer,
    route: impl Fn(usize, &LinkControl),
) -> (Vec<LinkControl>, Vec<Arc<ContenderHost>>) {
    let mut links = Vec::new();
    let mut hosts = Vec::new();
    for i in 0..scenario.links() {
        let host = ContenderHost::new(format!("link{i}"));
        let link = LinkControl::new(format!("link{i}")).serving(host.clone());
        route(i, &link);
        let control = link.clone();
        let software = host.clone();
        sim.host(link.host(), move || software.software(control.clone()));
        dialer.tap(&link);
        links.push(link);
        hosts.push(host);
    }
    (links, hosts)
}

/// Starts the harness on a host of its own, against `target`, with
/// `config`; its report, once it has one, goes into what this returns.
pub(crate) fn harness(
    sim: &mut turmoil::Sim<'_>,
    target: impl SimServer + 'static,
    config: Config,
) -> Rc<RefCell<Option<Report>>> {
    let report = Rc::new(RefCell::new(None));
    let out = report.clone();
    sim.client("harness", async move {
        // The harness's stamps, read on any host, on this host's clock.
        start_harness_clock();
        // The server's host starts first: its first tick runs before ours.
        let made = zk_curator_chaos::run_on(Target::Sim(&target), config).await;
        *out.borrow_mut() = Some(made);
        Ok(())
    });
    report
}

/// One step of the simulation, then the hosts' stops and continues that
/// are due (`stops`, over `hosts`): the simulated time the step ended at,
/// or `None` once the harness has ended; an error if the step failed.
pub(crate) fn advance(
    sim: &mut turmoil::Sim<'_>,
    stops: &mut net::Stops,
    hosts: &[Arc<ContenderHost>],
    log: &mut Vec<String>,
) -> Result<Option<Duration>, String> {
    let finished = sim.step().map_err(|err| err.to_string())?;
    let now = sim.elapsed();
    note_step(now);
    if finished {
        return Ok(None);
    }
    stops.carry_out(sim, now, hosts, log);
    Ok(Some(now))
}

/// The run's end: the harness's report (an error if it ended without one)
/// read into the event log, its verdict, and the faults drawn: the
/// harness's (those the plan left out counted, its pauses with expiry
/// not) and the network's (`drawn`).
pub(crate) fn finish(
    report: &RefCell<Option<Report>>,
    mut log: Vec<String>,
    plan: &Plan,
    drawn: u64,
) -> Simulated {
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
fn start_harness_clock() {
    let base = tokio::time::Instant::now() - turmoil::sim_elapsed().unwrap_or_default();
    CLOCK_BASE.with(|b| b.set(Some(base)));
    zk_curator_chaos::set_clock(Some(harness_now));
    zk_curator_chaos::forget_server_stalls();
}

/// Unsets the harness's clock, once the simulation is over.
pub(crate) fn stop_harness_clock() {
    zk_curator_chaos::set_clock(None);
    zk_curator_chaos::forget_server_stalls();
    CLOCK_BASE.with(|b| b.set(None));
}

/// What the network's stall fault stalls.
#[derive(Clone, Copy)]
pub(crate) enum Stalled<'a> {
    /// The one server, once its host has started it.
    Server(&'a net::ServerSlot),
    /// A member of the ensemble, drawn.
    Member(&'a Ensemble),
}

/// The network's own faults, from a generator of their own: every 0.5 to
/// 3 s until the calm, a link held (one at a time), the server or a member
/// stalled, or a link's latency raised.
pub(crate) struct NetFaults {
    rng: fastrand::Rng,
    /// When the next one is drawn.
    next: Duration,
    /// The link held, and until when.
    held: Option<(usize, Duration)>,
}

impl NetFaults {
    /// The network's faults of `seed`.
    pub(crate) fn new(seed: u64) -> NetFaults {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x0ddf_a017);
        let next = Duration::from_millis(rng.u64(500..3000));
        NetFaults {
            rng,
            next,
            held: None,
        }
    }

    /// Releases the link held, if its hold is over at `now`.
    pub(crate) fn release_due(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        now: Duration,
        links: &[LinkControl],
        log: &mut Vec<String>,
    ) {
        if let Some((link, until)) = self.held {
            if now >= until {
                sim.release(links[link].host(), SERVER);
                log.push(format!("{} net release link{link}", now.as_micros()));
                self.held = None;
            }
        }
    }

    /// Releases the link held, if any (the network heals).
    pub(crate) fn release_held(&mut self, sim: &mut turmoil::Sim<'_>, links: &[LinkControl]) {
        if let Some((link, _)) = self.held.take() {
            sim.release(links[link].host(), SERVER);
        }
    }

    /// The next fault, if it is due at `now`, lasting at most until `calm`.
    /// Each drawn fault takes a number of `drawn`, and is left out if `plan`
    /// names it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn step(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        now: Duration,
        calm: Duration,
        links: &[LinkControl],
        stalled: Stalled<'_>,
        scenario: &Scenario,
        plan: &Plan,
        drawn: &mut u64,
        log: &mut Vec<String>,
    ) {
        if now < self.next {
            return;
        }
        // No fault outlasts the calm's start.
        let room = calm.saturating_sub(now).as_millis() as u64;
        let rng = &mut self.rng;
        self.next = now + Duration::from_millis(rng.u64(500..3000));
        let fault = rng.u8(0..3);
        let (link, length) = (rng.usize(0..links.len()), rng.u64(50..2500).min(room));
        let member = match stalled {
            Stalled::Server(_) => 0,
            Stalled::Member(ensemble) => rng.usize(0..ensemble.size()),
        };
        *drawn += 1;
        if plan.net.contains(&(*drawn - 1)) {
            return;
        }
        match fault {
            0 if self.held.is_none() => {
                let length = Duration::from_millis(length);
                sim.hold(links[link].host(), SERVER);
                log.push(format!(
                    "{} net hold link{link} for {}",
                    now.as_micros(),
                    length.as_millis()
                ));
                self.held = Some((link, now + length));
            }
            1 => {
                let length = Duration::from_millis(length.min(1500));
                let what = match stalled {
                    Stalled::Server(server) => {
                        if let Some(server) = server.borrow().as_ref() {
                            server.stall(length);
                        }
                        "server".to_owned()
                    }
                    Stalled::Member(ensemble) => {
                        ensemble.stall_member(member, length);
                        format!("zk{member}")
                    }
                };
                // The harness's checker gives a stuck hold's node the
                // stall's length more (rule 8 (b)).
                if let Some(base) = CLOCK_BASE.with(Cell::get) {
                    zk_curator_chaos::server_stalled(base + now, base + now + length);
                }
                log.push(format!(
                    "{} net stall {what} for {}",
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
}
