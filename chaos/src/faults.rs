//! The fault injector: the harness's own faults on the contenders' and
//! observers' links, one every 0.7 to 2 s (a blackhole longer than the
//! session timeout, a connection reset, a short stall, a session expired
//! by the server as after silence), the expiries the holders' process
//! pauses ask for (run beside it, so they never starve the schedule), and
//! on an ensemble its own faults in turn (`ensemble.rs`). Every fault is
//! drawn from a generator seeded by the run, numbered in the order drawn,
//! and left out if [`Config::skip_faults`] names it or the run's
//! [`Profile`](crate::Profile) has its family off.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use zk_curator::LeaderObserver;

use crate::config::{Config, Draw};
use crate::contenders::Contender;
use crate::ensemble;
use crate::place::{now, Target};
use crate::shared::Shared;
use crate::verdict::TimedFault;

/// What the fault injector did.
#[derive(Debug, Default)]
pub(crate) struct Injected {
    /// How many faults of each kind.
    pub(crate) faults: BTreeMap<&'static str, u64>,
    /// Every fault: when, what, on whom, in the order they began.
    pub(crate) timeline: Vec<TimedFault>,
    /// The sessions expired, each with the instant its expiry was
    /// confirmed.
    pub(crate) expiries: Vec<(i64, Instant)>,
}

/// Injects faults until `end`: on the contenders (the first `holders` of
/// `contenders`) and, a quarter of them, on the observers after them
/// (`watchers` being the elections' observers, in the same order), and
/// carries out the expiry each holder's pause asks for on `pauses`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn inject(
    target: Target<'_>,
    config: &Config,
    shared: &Arc<Shared>,
    contenders: &[Contender],
    holders: usize,
    watchers: &[LeaderObserver],
    mut pause_rx: mpsc::UnboundedReceiver<usize>,
    end: Instant,
) -> Injected {
    // The fault injector: random faults, plus the expiry each simulated
    // pause asks for. An observer gets a quarter of them.
    let mut faults: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut timeline: Vec<(Instant, &'static str, usize)> = Vec::new();
    let mut expiries = Vec::new();
    let mut rng = fastrand::Rng::with_seed(config.seed);
    let t = config.session_timeout;
    let mut next = now() + rng.millis(700, 2000);
    let mut ensemble_faults = rng.below(5);
    // The harness's faults drawn so far (`Config::skip_faults` numbers them).
    let mut drawn = 0u64;
    let mut skip = |config: &Config| {
        drawn += 1;
        config.skip_faults.contains(&(drawn - 1))
    };
    // The pauses a contender asks for run beside the injector, each for as
    // long as it takes (a session timeout and more), so that they never
    // starve the schedule: a contender paused is left out of the random
    // faults until its pause has ended.
    let paused = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let pauses = async {
        let mut running = futures::stream::FuturesUnordered::new();
        let mut done = Vec::new();
        loop {
            tokio::select! {
                who = pause_rx.recv(), if now() < end => {
                    let Some(who) = who else { break };
                    paused.borrow_mut().insert(who);
                    let (paused, shared) = (&paused, &shared);
                    let contender = &contenders[who];
                    running.push(async move {
                        let start = now();
                        let expired = expire(target, contender).await;
                        shared.window(who, start);
                        paused.borrow_mut().remove(&who);
                        (start, who, expired)
                    });
                }
                Some(ended) = running.next(), if !running.is_empty() => done.push(ended),
                _ = tokio::time::sleep_until(end), if running.is_empty() => break,
            }
        }
        while let Some(ended) = running.next().await {
            done.push(ended);
        }
        done
    };
    // Whether the faults' time is over, on the harness's clock or on this
    // host's own: in a simulation a host's clock may run ahead of the
    // harness's by its drift, so `sleep_until(end)` returns while `now()`
    // is still short of `end`, and a loop that compared `now()` alone then
    // spun without waiting (found in swarm mode: seed 37, its faults all
    // left out at the end).
    let over = || now() >= end || Instant::now() >= end;
    let injector = async {
        loop {
            if over() {
                break;
            }
            tokio::time::sleep_until(next.min(end)).await;
            if over() {
                break;
            }
            next = now() + rng.millis(700, 2000);
            // On an ensemble, every other fault is the ensemble's own (see
            // `ensemble::Fault::nth` for the order), aimed at the observers in
            // turn. (Cohort runs have no elections, so no observers.)
            if let (Target::Ensemble(cluster), 0) = (target, rng.below(2)) {
                if !config.profile.ensemble {
                    continue;
                }
                let mut fault = ensemble::Fault::nth(ensemble_faults);
                if watchers.is_empty() && matches!(fault, ensemble::Fault::ObserverLag) {
                    ensemble_faults += 1;
                    fault = ensemble::Fault::nth(ensemble_faults);
                }
                let aimed = (ensemble_faults as usize / 2) % watchers.len().max(1);
                let observer = watchers
                    .get(aimed)
                    .map(|watcher| (&contenders[holders + aimed], watcher));
                ensemble_faults += 1;
                if skip(config) {
                    continue;
                }
                let start = now();
                timeline.push((start, fault.name(), usize::MAX));
                fault.inject(cluster, &mut rng, observer, t).await;
                *faults.entry(fault.name()).or_default() += 1;
                // Every contender may feel it.
                for who in 0..holders {
                    shared.window(who, start);
                }
                continue;
            }
            let who = if contenders.len() > holders && rng.below(4) == 0 {
                holders + rng.below((contenders.len() - holders) as u64) as usize
            } else {
                rng.below(holders as u64) as usize
            };
            let contender = &contenders[who];
            let fault = rng.below(4);
            if skip(config) || paused.borrow().contains(&who) || !config.profile.link_fault(fault) {
                continue;
            }
            let start = now();
            timeline.push((
                start,
                ["blackhole", "reset", "stall", "expiry"][fault as usize],
                who,
            ));
            match fault {
                0 => {
                    contender.blackhole(true);
                    tokio::time::sleep(t + t / 2 + rng.millis(0, 500)).await;
                    contender.blackhole(false);
                    *faults.entry("blackhole").or_default() += 1;
                }
                1 => {
                    contender.drop_connections();
                    *faults.entry("reset").or_default() += 1;
                }
                2 => {
                    contender.blackhole(true);
                    tokio::time::sleep(t / 4).await;
                    contender.blackhole(false);
                    *faults.entry("stall").or_default() += 1;
                }
                _ => {
                    expiries.extend(expire(target, &contenders[who]).await);
                    *faults.entry("expiry").or_default() += 1;
                }
            }
            if who < holders {
                shared.window(who, start);
            }
        }
    };
    let (paused_runs, ()) = futures::future::join(pauses, injector).await;
    for (start, who, expired) in paused_runs {
        timeline.push((start, "pause+expiry", who));
        expiries.extend(expired);
        *faults.entry("pause+expiry").or_default() += 1;
    }
    timeline.sort_by_key(|(start, _, _)| *start);

    Injected {
        faults,
        timeline,
        expiries,
    }
}

/// Expires a contender's session on the server the way a server does it:
/// once the client has gone silent for the session timeout. The
/// contender's traffic is blackholed until its framework reports the
/// connection `Suspended` and the session timeout has passed, then the
/// server expires the session, then traffic flows again. (Expiring a session whose
/// client still hears the server, which ZooKeeper itself never does, gives
/// no client a chance to signal the loss before the next holder is let in;
/// only the fence protects there, and the process pauses test that.)
///
/// Returns the session and the instant its expiry was confirmed, when it
/// was.
pub(crate) async fn expire(target: Target<'_>, contender: &Contender) -> Option<(i64, Instant)> {
    let framework = &contender.framework;
    let silent_since = now();
    contender.blackhole(true);
    let silent = async {
        let mut states = framework.state_watcher();
        let _ = states
            .wait_for(|s| !s.is_some_and(|s| s.is_connected()))
            .await;
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), silent).await;
    // A server expires a session a whole session timeout after it last
    // heard from it, not the moment the client noticed the silence.
    tokio::time::sleep_until(silent_since + framework_session_timeout(contender)).await;
    let mut expired = None;
    if let Some(session) = framework.current_session() {
        let done = match (target, target.embedded()) {
            (Target::Sim(sim), _) => sim.expire_session(session.id()),
            (_, Some(embedded)) => embedded.expire_session(session.id()),
            (_, None) => zk_curator_testing::expire_session_within(
                &target.connect_string(),
                session.client(),
                Duration::from_secs(5),
            )
            .await
            .is_ok(),
        };
        expired = done.then(|| (session.id(), now()));
    }
    contender.blackhole(false);
    expired
}

pub(crate) fn framework_session_timeout(contender: &Contender) -> Duration {
    contender
        .framework
        .current_session()
        .map_or(Duration::from_secs(2), |s| s.client().session_timeout())
}
