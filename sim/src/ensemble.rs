//! `--ensemble N`: the seeds run on a simulated replicated ensemble of N
//! members (the embedded server's [`Ensemble`]), all on the host `zk`, one
//! port each (2181, 2182, ...), instead of on one server.
//!
//! Each link sends its connections to the members in turn, one after the
//! other, as a ZooKeeper client goes through its server list (a member that
//! refuses the client, or is down, sends it on to the next). The ensemble's
//! own faults, those the chaos harness injects on a real ensemble
//! (`chaos/src/ensemble.rs`), are the simulator's here, each drawn from the
//! seed: a lagging follower (it applies commits late), a follower whose link
//! from the leader is held, a member cut off from its peers, the leader
//! killed, the quorum lost and regained, and an observer moved onto a
//! lagging member (every other fault: a follower's link from the leader is
//! held, leadership changes happen without it, then the observer's link
//! reaches only that follower until its session has been replaced there).
//! The network's own faults (held links, latency, a stalled member) run as
//! on one server.
//!
//! The harness's rules are checked as on a real ensemble
//! (`tests/ensemble_chaos.rs`): rules 1 and 2 of the observer's contract
//! only for what happened more than [`READ_LAG`] before a report was asked,
//! rule 3 exactly.

use std::cell::{Cell, RefCell};
use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use turmoil::net::TcpListener;
use zk_curator_chaos::{Link, SimServer};
use zk_curator_server::ensemble::Ensemble;
use zk_curator_server::EmbeddedServer;

use crate::net::{self, LinkControl, PORT, SERVER};
use crate::plan::{Breaks, Plan, Scenario};
use crate::world::{self, NetFaults, Simulated, Stalled, CALM};

/// The ensemble's size for this process's seeds (0: one server).
/// The ensemble's size, if this thread's seed runs on one.
pub fn size() -> Option<usize> {
    crate::mode::Mode::current().ensemble
}

/// How long a member that does not hear from its leader keeps serving
/// (the real ensemble test's `syncLimit`: 80 ticks of 100 ms).
pub const SYNC_LIMIT: Duration = Duration::from_secs(8);
/// How far behind the leader a member may answer: the sync limit, and a
/// tick or two to notice it.
pub const READ_LAG: Duration = Duration::from_secs(9);
/// How long beyond the session timeout and [`READ_LAG`] a stuck hold's node
/// may outlive its bound (as `tests/ensemble_chaos.rs`: writes wait while a
/// quorum is lost or a leader is being replaced).
pub const STUCK_SLACK: Duration = Duration::from_secs(15);

/// The ensemble, once its host has started it.
pub type EnsembleSlot = Rc<RefCell<Option<Arc<Ensemble>>>>;

/// The port member `i` serves on.
fn port_of(member: usize) -> u16 {
    PORT + member as u16
}

/// The ensemble host's software: `size` members, local sessions on (as on
/// the real ensemble the harness runs on), each member fed by a turmoil
/// listener of its own. Children come back unsorted and node times count
/// from a fixed origin, as on one server.
async fn serve(slot: EnsembleSlot, size: usize) -> turmoil::Result {
    let server = EmbeddedServer::builder()
        .sorted_children(false)
        .node_time_origin(std::time::UNIX_EPOCH + Duration::from_secs(net::NODE_TIME_ORIGIN));
    let ensemble = Ensemble::builder(server)
        .size(size)
        .local_sessions(true)
        .sync_limit(SYNC_LIMIT)
        .start(|i| SocketAddr::from((Ipv4Addr::UNSPECIFIED, port_of(i))))?;
    let ensemble = Arc::new(ensemble);
    *slot.borrow_mut() = Some(ensemble.clone());
    for member in 0..size {
        let listener =
            TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port_of(member)))).await?;
        let ensemble = ensemble.clone();
        drop(tokio::task::spawn_local(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                ensemble.serve_connection(member, stream, peer);
            }
        }));
    }
    std::future::pending().await
}

/// The harness's view of the simulated ensemble and its links.
#[derive(Debug)]
struct EnsembleTarget {
    ensemble: EnsembleSlot,
    size: usize,
    links: Vec<LinkControl>,
    next_link: Cell<usize>,
}

impl SimServer for EnsembleTarget {
    fn connect_string(&self) -> String {
        (0..self.size)
            .map(|i| format!("{SERVER}:{}", port_of(i)))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn link(&self) -> Box<dyn Link> {
        net::next_link(&self.links, &self.next_link)
    }

    fn expire_session(&self, id: i64) -> bool {
        self.ensemble
            .borrow()
            .as_ref()
            .is_some_and(|e| e.expire_session(id))
    }

    fn session_ids(&self) -> Vec<i64> {
        self.ensemble
            .borrow()
            .as_ref()
            .map(|e| e.session_ids())
            .unwrap_or_default()
    }

    fn replicated(&self) -> bool {
        true
    }
}

/// One of the ensemble's faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    LaggingFollower,
    Held,
    CutOff,
    LeaderKill,
    QuorumLoss,
    ObserverLag,
}

impl Kind {
    const OTHERS: [Kind; 5] = [
        Kind::LaggingFollower,
        Kind::Held,
        Kind::CutOff,
        Kind::LeaderKill,
        Kind::QuorumLoss,
    ];

    /// The `n`th fault of a run: every other one moves an observer onto a
    /// lagging member, and the others come in turn (from `first`).
    fn nth(n: u64, first: u64) -> Kind {
        if n % 2 == 0 {
            return Kind::ObserverLag;
        }
        Self::OTHERS[((n / 2 + first) % Self::OTHERS.len() as u64) as usize]
    }
}

/// A fault in force, and when (and how) it ends.
#[derive(Debug)]
enum Active {
    /// Ends by itself (a slowed follower): nothing to undo.
    Lasting {
        until: Duration,
    },
    Held {
        member: usize,
        until: Duration,
    },
    Cut {
        member: usize,
        until: Duration,
    },
    Killed {
        members: Vec<usize>,
        until: Duration,
    },
    /// A follower's link from the leader held; the observer's link pinned
    /// to it from `pin` on.
    ObserverLag {
        member: usize,
        link: usize,
        pin: Duration,
        pinned: bool,
        until: Duration,
    },
}

/// Runs `seed` on an ensemble of `size` members: the world of `single.rs`
/// (a link host per contender and observer, the harness), the network's
/// faults and the ensemble's.
pub(crate) fn simulate(
    seed: u64,
    scenario: &Scenario,
    breaks: Breaks,
    plan: &Plan,
    dialer: &net::TurmoilDialer,
    size: usize,
) -> Simulated {
    let config = scenario
        .config(seed, breaks, plan)
        .with_read_lag(READ_LAG)
        .with_stuck_slack(STUCK_SLACK);
    let mut sim = world::simulation(seed, scenario);
    let slot: EnsembleSlot = Rc::new(RefCell::new(None));
    let started = slot.clone();
    sim.host(SERVER, move || serve(started.clone(), size));
    let ports: Vec<u16> = (0..size).map(port_of).collect();
    let (links, hosts) = world::link_hosts(&mut sim, scenario, dialer, |i, link| {
        link.route(ports.clone(), i % size);
    });
    let target = EnsembleTarget {
        ensemble: slot.clone(),
        size,
        links: links.clone(),
        next_link: Cell::new(0),
    };
    let report = world::harness(&mut sim, target, config);

    // The elections' observers' links, if the run has elections (they come
    // after the contenders' links).
    let observers: Vec<usize> = if scenario.cohort {
        Vec::new()
    } else {
        vec![scenario.contenders, scenario.contenders + 1]
    };
    let ensemble = |slot: &EnsembleSlot| slot.borrow().clone();
    let mut network = NetFaults::new(seed);
    let mut faults_rng = fastrand::Rng::with_seed(seed ^ 0xe75e_b1e5);
    let first_kind = faults_rng.u64(0..Kind::OTHERS.len() as u64);
    let mut log = Vec::new();
    let mut next_ensemble = Duration::from_millis(faults_rng.u64(500..2000));
    let mut kinds_drawn = 0u64;
    let mut active: Option<Active> = None;
    let mut drawn = 0u64;
    let mut healed = false;
    let mut stops = net::Stops::default();
    let calm_at = scenario.duration.saturating_sub(CALM);
    // `--crash`: lost replies on the members.
    let mut crashes = crate::crash::of(seed);
    loop {
        let now = match world::advance(&mut sim, &mut stops, &hosts, &mut log) {
            Ok(Some(now)) => now,
            Ok(None) => break,
            Err(err) => return Err((log, err)),
        };
        network.release_due(&mut sim, now, &links, &mut log);
        let Some(members) = ensemble(&slot) else {
            continue;
        };
        if let Some(crashes) = crashes.as_mut() {
            crashes.step_ensemble(now, calm_at, &members, plan, &mut drawn, &mut log);
        }
        // The ensemble's fault in force: its next step, or its end.
        if let Some(fault) = active.take() {
            active = step(fault, now, &members, &links, &mut log);
            if active.is_none() {
                next_ensemble = now + Duration::from_millis(faults_rng.u64(1000..3000));
            }
        }
        if now >= calm_at {
            if !healed {
                healed = true;
                network.release_held(&mut sim, &links);
                if let Some(fault) = active.take() {
                    end(fault, &members, &links);
                }
                members.heal();
                for link in &links {
                    link.pin(None);
                    sim.set_link_max_message_latency(link.host(), SERVER, scenario.latency.1);
                }
                log.push(format!("{} net healed", now.as_micros()));
            }
            continue;
        }
        let room = calm_at.saturating_sub(now);
        if active.is_none() && now >= next_ensemble {
            let kind = Kind::nth(kinds_drawn, first_kind);
            kinds_drawn += 1;
            drawn += 1;
            let skipped = plan.net.contains(&(drawn - 1));
            // Drawn whether skipped or not, so that the others keep theirs.
            let draws = [
                faults_rng.u64(0..1 << 16),
                faults_rng.u64(0..1 << 16),
                faults_rng.u64(0..1 << 16),
            ];
            next_ensemble = now + Duration::from_millis(faults_rng.u64(1000..3000));
            if !skipped {
                active = begin(
                    kind, draws, now, room, &members, &links, &observers, scenario, &mut log,
                );
            }
        }
        network.step(
            &mut sim,
            now,
            calm_at,
            &links,
            Stalled::Member(&members),
            scenario,
            plan,
            &mut drawn,
            &mut log,
        );
    }
    world::finish(&report, log, plan, drawn)
}

/// A follower of the ensemble's now (the `pick`th of them), if it has a
/// leader.
fn follower(ensemble: &Ensemble, pick: u64) -> Option<usize> {
    let leader = ensemble.leader()?;
    let others: Vec<usize> = (0..ensemble.size()).filter(|&m| m != leader).collect();
    others
        .get((pick % others.len().max(1) as u64) as usize)
        .copied()
}

/// Starts a fault of `kind` (with three draws of its own), lasting at most
/// `room`; what is in force then.
#[allow(clippy::too_many_arguments)]
fn begin(
    kind: Kind,
    draws: [u64; 3],
    now: Duration,
    room: Duration,
    ensemble: &Ensemble,
    links: &[LinkControl],
    observers: &[usize],
    scenario: &Scenario,
    log: &mut Vec<String>,
) -> Option<Active> {
    let between = |draw: u64, low: u64, high: u64| {
        Duration::from_millis(low + draw % (high - low + 1)).min(room)
    };
    let at = now.as_micros();
    let size = ensemble.size() as u64;
    match kind {
        Kind::LaggingFollower => {
            let member = follower(ensemble, draws[0])?;
            let length = between(draws[1], 1000, 4000);
            ensemble.slow(member, length);
            log.push(format!(
                "{at} ensemble slow zk{member} for {}",
                length.as_millis()
            ));
            Some(Active::Lasting {
                until: now + length,
            })
        }
        Kind::Held => {
            let member = follower(ensemble, draws[0])?;
            let length = between(draws[1], 500, 4000);
            ensemble.hold_from_leader(member, true);
            log.push(format!(
                "{at} ensemble hold zk{member} for {}",
                length.as_millis()
            ));
            Some(Active::Held {
                member,
                until: now + length,
            })
        }
        Kind::CutOff => {
            let member = (draws[0] % size) as usize;
            let length = between(draws[1], 1000, 10_000);
            ensemble.cut_off(member, true);
            log.push(format!(
                "{at} ensemble cut zk{member} for {}",
                length.as_millis()
            ));
            Some(Active::Cut {
                member,
                until: now + length,
            })
        }
        Kind::LeaderKill => {
            let leader = ensemble.leader()?;
            let length = between(draws[1], 500, 2500);
            ensemble.set_up(leader, false);
            log.push(format!(
                "{at} ensemble kill leader zk{leader} for {}",
                length.as_millis()
            ));
            Some(Active::Killed {
                members: vec![leader],
                until: now + length,
            })
        }
        Kind::QuorumLoss => {
            let first = (draws[0] % size) as usize;
            let second = (first + 1 + (draws[2] % (size - 1).max(1)) as usize) % size as usize;
            let length = between(draws[1], 1000, 3000);
            let members = if first == second {
                vec![first]
            } else {
                vec![first, second]
            };
            for &m in &members {
                ensemble.set_up(m, false);
            }
            log.push(format!(
                "{at} ensemble kill {members:?} for {}",
                length.as_millis()
            ));
            Some(Active::Killed {
                members,
                until: now + length,
            })
        }
        Kind::ObserverLag => {
            if observers.is_empty() {
                return None;
            }
            let link = observers[(draws[0] % observers.len() as u64) as usize];
            // A follower the observer is not on now.
            let on = links[link].member_now();
            let leader = ensemble.leader()?;
            let member = (0..ensemble.size()).find(|&m| m != leader && Some(m) != on)?;
            // Leadership changes happen without it (terms last 0.2 to 2 s),
            // then the observer reaches only it until its session has been
            // replaced there (three session timeouts at most), and a
            // little longer: all within the sync limit, past which the
            // member would drop its clients.
            let pin = now + between(draws[1], 1500, 3000);
            let t = scenario.session_timeout;
            let until = (pin + 3 * t + Duration::from_secs(1))
                .min(now + SYNC_LIMIT - Duration::from_millis(300))
                .min(now + room);
            ensemble.hold_from_leader(member, true);
            log.push(format!(
                "{at} ensemble observer link{link} onto lagging zk{member} at {} until {}",
                pin.as_micros(),
                until.as_micros()
            ));
            Some(Active::ObserverLag {
                member,
                link,
                pin,
                pinned: false,
                until,
            })
        }
    }
}

/// The fault in force at `now`: its next step taken, or ended (`None`).
fn step(
    fault: Active,
    now: Duration,
    ensemble: &Ensemble,
    links: &[LinkControl],
    log: &mut Vec<String>,
) -> Option<Active> {
    let until = match &fault {
        Active::Lasting { until }
        | Active::Held { until, .. }
        | Active::Cut { until, .. }
        | Active::Killed { until, .. }
        | Active::ObserverLag { until, .. } => *until,
    };
    if now >= until {
        log.push(format!("{} ensemble fault ends", now.as_micros()));
        end(fault, ensemble, links);
        return None;
    }
    match fault {
        Active::ObserverLag {
            member,
            link,
            pin,
            pinned: false,
            until,
        } if now >= pin => {
            links[link].pin(Some(member));
            links[link].drop_connections();
            log.push(format!(
                "{} ensemble link{link} reaches only zk{member}",
                now.as_micros()
            ));
            Some(Active::ObserverLag {
                member,
                link,
                pin,
                pinned: true,
                until,
            })
        }
        other => Some(other),
    }
}

/// Ends a fault.
fn end(fault: Active, ensemble: &Ensemble, links: &[LinkControl]) {
    match fault {
        Active::Lasting { .. } => {}
        Active::Held { member, .. } => ensemble.hold_from_leader(member, false),
        Active::Cut { member, .. } => ensemble.cut_off(member, false),
        Active::Killed { members, .. } => {
            for member in members {
                ensemble.set_up(member, true);
            }
        }
        Active::ObserverLag { member, link, .. } => {
            links[link].pin(None);
            ensemble.hold_from_leader(member, false);
        }
    }
}
