//! The seeds on one server (unless `--ensemble`): the world of one
//! embedded server on the host `zk`, a link host per contender and
//! observer, and the harness; each host's clock drifting; the network's
//! own faults (`world.rs`) and, with `--crash`, the server's crashes and
//! lost replies (`crash.rs`), until the calm before the harness's end.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use crate::net::{self, SimTarget, SERVER};
use crate::plan::{Breaks, Plan, Scenario};
use crate::world::{self, NetFaults, Simulated, Stalled, CALM};

/// Runs `seed` on one server: the world, the network's faults and the
/// server's crashes, until the harness's report.
pub(crate) fn simulate(
    seed: u64,
    scenario: &Scenario,
    breaks: Breaks,
    plan: &Plan,
    dialer: &net::TurmoilDialer,
) -> Simulated {
    let mut config = scenario.config(seed, breaks, plan);
    if crate::crash::of(seed).is_some_and(|c| c.crashes) {
        config = config.with_stuck_slack(crate::crash::STUCK_SLACK);
    }
    let mut sim = world::simulation(seed, scenario);
    let server: net::ServerSlot = Rc::new(RefCell::new(None));
    let slot = server.clone();
    sim.host(SERVER, move || net::serve(slot.clone()));
    let (links, hosts) = world::link_hosts(&mut sim, scenario, dialer, |_, _| {});
    let target = SimTarget {
        server: server.clone(),
        links: links.clone(),
        next_link: Cell::new(0),
    };
    let report = world::harness(&mut sim, target, config);

    let mut network = NetFaults::new(seed);
    let mut log = Vec::new();
    // Every host's clock at a rate of its own.
    let mut names = vec![SERVER.to_owned(), "harness".to_owned()];
    names.extend(links.iter().map(|link| link.host().to_owned()));
    crate::drift::apply(&mut sim, seed, &names, &mut log);
    let mut drawn = 0u64;
    let mut healed = false;
    // Hosts stopped as paused processes, as their holders ask.
    let mut stops = net::Stops::default();
    // `--crash`: the server's crashes and lost replies.
    let mut crashes = crate::crash::of(seed);
    let calm = scenario.duration.saturating_sub(CALM);
    loop {
        let now = match world::advance(&mut sim, &mut stops, &hosts, &mut log) {
            Ok(Some(now)) => now,
            Ok(None) => break,
            Err(err) => return Err((log, err)),
        };
        if let (Some(crashes), Some(server)) = (crashes.as_mut(), server.borrow().as_ref()) {
            crashes.step(now, calm, server, plan, &mut drawn, &mut log);
        }
        network.release_due(&mut sim, now, &links, &mut log);
        // The network heals before the harness winds down (as the harness
        // heals its own links): a close held up by a fault still in force
        // would leave its session to expire, which no rule is about.
        if now >= calm {
            if !healed {
                healed = true;
                network.release_held(&mut sim, &links);
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
        network.step(
            &mut sim,
            now,
            calm,
            &links,
            Stalled::Server(&server),
            scenario,
            plan,
            &mut drawn,
            &mut log,
        );
    }
    world::finish(&report, log, plan, drawn)
}
