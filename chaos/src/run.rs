//! A run from start to report: the root and its counters made on a session
//! of the harness's own, the contenders' tasks on every kind, an observer
//! beside each election and the tree observer over the root, the stuck
//! holds' checker, the fault injector (`faults.rs`) until the run's end;
//! then the wind-down (every link healed, every round ended, the tree
//! observer's agreement, every framework closed) and what was left behind
//! (nodes under the lock paths, sessions), gathered into the [`Report`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use zk_curator::framework::zk;
use zk_curator::recipes::tree::TreeObserver;
use zk_curator::LeaderObserver;
use zk_curator_testing::TestingServer;

use crate::config::{counter_path, lock_dirs, Config, Kind};
use crate::contenders::{contend, lock_of, Contender};
use crate::elections::start_selector;
use crate::ensemble;
use crate::faults::{inject, Injected};
use crate::observers::{follow_tree, observe, tree_agreement, TREE_MAX_PATHS};
use crate::place::{now, since, Target};
use crate::records::{Liveness, Report, TreeLog};
use crate::shared::Shared;
use crate::stuck::checker;

/// Runs the chaos against `server` and reports.
pub async fn run(server: &TestingServer, config: Config) -> Report {
    run_on(Target::Server(server), config).await
}

/// Runs the chaos against `target` and reports. On an ensemble, its own
/// faults join the schedule ([`ensemble::Fault`]).
pub async fn run_on(target: Target<'_>, config: Config) -> Report {
    let started = now();
    // Drawn from the thread's generator: unique among runs sharing a
    // server, and the same for the same seed in a simulation.
    let root = format!("/chaos-{:012x}", fastrand::u64(..) >> 16);
    let mut contenders = Vec::new();
    for _ in 0..config.contenders {
        contenders.push(Contender::connect(target, &config, config.cohort).await);
    }
    let raw = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(20))
        .connect(&target.connect_string())
        .await
        .unwrap();
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    raw.mkdir(&format!("{root}/data"), &open).await.unwrap();
    for kind in config.kinds() {
        raw.create(&counter_path(&root, kind), b"0 0", &open)
            .await
            .unwrap();
    }
    raw.create(&format!("{root}/data/late"), b"", &open)
        .await
        .unwrap();
    let (pause_tx, pause_rx) = mpsc::unbounded_channel();
    let (stuck_tx, stuck_rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        config: config.clone(),
        stop: AtomicBool::new(false),
        logs: Mutex::new(BTreeMap::new()),
        pause_requests: pause_tx,
        rounds: AtomicU64::new(0),
        windows: Mutex::new(Vec::new()),
        places: contenders.iter().map(|c| c.place.clone()).collect(),
        host_pauses: Mutex::new(Vec::new()),
        tree: Mutex::new(TreeLog::default()),
        stuck_holds: Mutex::new(Some(stuck_tx)),
        stuck_chances: Mutex::new(BTreeMap::new()),
    });
    // The stuck holds' checker, on the harness's runtime and session.
    let stuck_checker = tokio::spawn(checker(shared.clone(), raw.clone(), stuck_rx));
    let mut tasks = Vec::new();
    let mut selectors = Vec::new();
    for (who, contender) in contenders.iter().enumerate() {
        for kind in config.kinds() {
            for task in 0..config.tasks {
                let (shared, framework) = (shared.clone(), contender.framework.clone());
                let rng = fastrand::Rng::with_seed(
                    config.seed
                        ^ ((who as u64 + 1) << 32)
                        ^ ((task as u64) << 16)
                        ^ (kind as u64 + 1),
                );
                let root = root.clone();
                // Made where the contender runs: a recipe may start tasks
                // of its own, and its timers read that host's clock.
                if kind == Kind::Selector {
                    let selector = contender
                        .run(async move { start_selector(shared, who, framework, rng, &root) })
                        .await
                        .expect("the contender's place dropped its selector");
                    selectors.push((who, selector));
                    continue;
                }
                tasks.push(contender.spawn(async move {
                    let lock = lock_of(&shared, &framework, &root, kind, who);
                    contend(shared, (who, task), kind, framework, lock, rng, root).await;
                }));
            }
        }
    }

    // An observer beside each election, on a session of its own behind a
    // fault proxy of its own (after the contenders in `contenders`: the
    // faults reach them too).
    let mut observers = Vec::new();
    let mut watchers = Vec::new();
    let mut observer_seats = Vec::new();
    for kind in config.kinds().into_iter().filter(|k| k.is_election()) {
        let observer = Contender::connect(target, &config, None).await;
        observer_seats.push((kind, contenders.len()));
        let path = match kind {
            Kind::Latch => format!("{root}/latch"),
            _ => format!("{root}/selector"),
        };
        let watching = LeaderObserver::new(observer.framework.clone(), &path).unwrap();
        watchers.push(watching.clone());
        observers.push(observer.spawn(observe(shared.clone(), kind, watching)));
        contenders.push(observer);
    }
    // The tree observer over the whole root, likewise on a session and a
    // link of its own, after the election's observers (the ensemble's
    // faults aim at those by their place in `contenders`).
    let tree_host = Contender::connect(target, &config, None).await;
    let tree_seat = contenders.len();
    let tree = {
        let (framework, root) = (tree_host.framework.clone(), root.clone());
        tree_host
            .run(async move {
                let tree = TreeObserver::new(framework, &root, TREE_MAX_PATHS).unwrap();
                tree.start().unwrap();
                tree
            })
            .await
            .expect("the tree observer's place dropped its start")
    };
    let tree_follower = tree_host.spawn(follow_tree(shared.clone(), tree.changes()));
    contenders.push(tree_host);
    let holders = config.contenders;

    // The fault injector, until the run's end.
    let end = started + config.duration;
    let Injected {
        faults,
        timeline,
        expiries,
    } = inject(
        target,
        &config,
        &shared,
        &contenders,
        holders,
        &watchers,
        pause_rx,
        end,
    )
    .await;
    shared.stop.store(true, Ordering::SeqCst);
    for contender in &contenders {
        contender.heal();
    }
    if let Target::Ensemble(cluster) = target {
        ensemble::heal(cluster).await;
    }
    shared.tree.lock().unwrap().healed = Some(now());
    let passes = config.cohort.map(|_| {
        contenders
            .iter()
            .map(|c| c.framework.metrics().lock_passes())
            .sum()
    });
    // A selector's function stops at its next critical section; closing
    // the selector cancels the one running.
    for (who, selector) in &selectors {
        let selector = selector.clone();
        let close = contenders[*who].run(async move { selector.close().await });
        let _ = tokio::time::timeout(Duration::from_secs(30), close).await;
    }
    // Every contender ends its rounds: the one under way, and one more
    // begun after the stop (rule 10, "Liveness"), each bounded by its
    // deadlines and the task's own limit.
    let last_round = 3 * config.session_timeout + config.liveness_bound() + Duration::from_secs(30);
    for task in tasks {
        let _ = tokio::time::timeout(last_round, task).await;
    }
    let rounds_ended = now();
    // No hold gets stuck any more: the checker ends with its last check
    // (each bounded by its deadlines).
    drop(shared.stuck_holds.lock().unwrap().take());
    let _ = tokio::time::timeout(Duration::from_secs(60), stuck_checker).await;
    // Quiet: the tree observer must agree with the truth (rule 7), then it
    // is closed where it runs, before the frameworks close.
    let agreement = tree_agreement(target, &config, &root, &tree).await;
    shared.tree.lock().unwrap().agreement = Some(agreement);
    // Rule 11: with every round ended, nothing may stay under
    // the lock paths (the latches' nodes left out: each latch is queued
    // until its framework closes) for longer than the session timeout and
    // the slack (a node of a session no client uses any more, as above).
    let lingering_bound = config.session_timeout + config.stuck_slack + config.read_lag;
    let lingering = lingering_nodes(target, &raw, &root, rounds_ended + lingering_bound).await;
    let closing = tree.clone();
    let _ = contenders[tree_seat]
        .run(async move { closing.close().await })
        .await;
    drop(tree);
    // Each framework has its session back before it closes (bounded): a
    // fault begun just before the end (an expiry waits a session timeout)
    // can still be healing here. Its close must end the session it has.
    let mut closed_sessions = Vec::new();
    for contender in &contenders {
        let framework = contender.framework.clone();
        let closed = contender.run(async move {
            let _ = framework
                .block_until_connected(Duration::from_secs(10))
                .await;
            let session = framework.current_session().map(|s| s.id());
            framework.close().await;
            session
        });
        closed_sessions.extend(closed.await.flatten());
    }
    let server_sessions = |target: Target<'_>| match target {
        Target::Sim(sim) => Some(sim.session_ids()),
        Target::Server(server) => server.as_embedded().map(|e| e.session_ids()),
        Target::Ensemble(_) => None,
    };
    let unclosed_sessions = server_sessions(target).map_or(0, |live| {
        closed_sessions
            .iter()
            .filter(|id| live.contains(id))
            .count()
    });
    // Other sessions may still be alive for a while, and their nodes with
    // them: one a client abandoned (its handshake's answer lost, or given
    // up locally while the server was stalled) ends by timing out. They
    // get that long before anything counts as left behind.
    tokio::time::sleep(config.session_timeout + Duration::from_millis(500)).await;
    // Each observer's stream ends with its framework's close.
    for observer in observers {
        let _ = tokio::time::timeout(Duration::from_secs(30), observer).await;
    }
    // The tree observer's view channel ends with its last handle.
    let _ = tokio::time::timeout(Duration::from_secs(30), tree_follower).await;
    // What is left: participants under every lock path, and sessions.
    // On an ensemble `raw`'s session is a local one, lost if its member
    // was killed: the nodes are listed through a session made now.
    let checker = match target {
        Target::Sim(sim) if !sim.replicated() => raw.clone(),
        Target::Server(_) => raw.clone(),
        Target::Sim(_) | Target::Ensemble(_) => zk::Client::connector()
            .with_session_timeout(Duration::from_secs(20))
            .connect(&target.connect_string())
            .await
            .unwrap(),
    };
    let mut leftover_nodes = Vec::new();
    for dir in lock_dirs(&root) {
        // As of now: on an ensemble, the checker's server may lag.
        let _ = checker.sync(&dir).await;
        match checker.list_children(&dir).await {
            Ok(children) => {
                leftover_nodes.extend(children.into_iter().map(|c| format!("{dir}/{c}")));
            }
            Err(zk::Error::NoNode) => {}
            Err(err) => leftover_nodes.push(format!("{dir}: not listed ({err})")),
        }
    }
    let leftover_sessions = match target {
        Target::Ensemble(cluster) => {
            // The harness's own sessions end with their clients.
            drop((checker, raw));
            ensemble::leftover_sessions(cluster, 0).await
        }
        Target::Sim(sim) => sim
            .session_ids()
            .into_iter()
            .filter(|&id| id != raw.session_id().0 && id != checker.session_id().0)
            .count(),
        Target::Server(server) => server.as_embedded().map_or(0, |e| {
            e.session_ids()
                .into_iter()
                .filter(|&id| id != raw.session_id().0)
                .count()
        }),
    };
    for (kind, seat) in observer_seats {
        let told: Vec<(String, u64)> = contenders[seat]
            .proxies
            .iter()
            .flat_map(|link| link.deletions_told())
            .collect();
        shared.log(kind, |log| {
            for (node, seq) in told {
                let first = log.deletions_told.entry(node).or_insert(seq);
                *first = (*first).min(seq);
            }
        });
    }
    let told: Vec<(String, u64)> = contenders[tree_seat]
        .proxies
        .iter()
        .flat_map(|link| link.deletions_told())
        .collect();
    let tree = {
        let mut tree = shared.tree.lock().unwrap();
        for (node, seq) in told {
            let first = tree.deletions_told.entry(node).or_insert(seq);
            *first = (*first).min(seq);
        }
        std::mem::take(&mut *tree)
    };
    let logs = std::mem::take(&mut *shared.logs.lock().unwrap());
    let windows = std::mem::take(&mut *shared.windows.lock().unwrap());
    let liveness = Liveness {
        bound: config.liveness_bound(),
        host_pauses: shared.host_pauses.lock().unwrap().clone(),
        lingering,
        lingering_bound,
    };
    Report {
        logs,
        faults,
        leftover_nodes,
        leftover_sessions,
        seed: config.seed,
        elapsed: since(started),
        passes,
        started: Some(started),
        timeline,
        session_timeout: config.session_timeout,
        read_lag: config.read_lag,
        release_bound: config.release_bound,
        unclosed_sessions,
        expiries,
        windows,
        tree,
        // Some bounded contender had the sections that make a stuck one
        // certain (see `Seat::gets_stuck`), none of them chosen in vain (a
        // hold lost before it could get stuck): a run whose bounded
        // contenders were faulted throughout may have had none to get stuck.
        stuck: config.stuck
            && shared
                .stuck_chances
                .lock()
                .unwrap()
                .values()
                .any(|(sections, _, in_vain)| *sections >= crate::stuck::STUCK_ONE_IN && !*in_vain),
        loss_seen_at_once: config.loss_seen_at_once,
        strict_bounds: config.strict_bounds,
        liveness,
    }
}

/// The nodes under the run's lock paths (not the latches') still there at
/// `by`: listed every 100 ms (each path synced first: on an ensemble the
/// session's server may lag) until none is, or until `by`.
async fn lingering_nodes(
    target: Target<'_>,
    raw: &zk::Client,
    root: &str,
    by: tokio::time::Instant,
) -> Vec<String> {
    let latch = format!("{root}/latch");
    // On an ensemble (real or simulated) `raw`'s session may be a local
    // one, lost if its member was killed: a session of its own then.
    let fresh;
    let client = match target {
        Target::Sim(sim) if !sim.replicated() => raw,
        Target::Server(_) => raw,
        Target::Sim(_) | Target::Ensemble(_) => {
            fresh = zk::Client::connector()
                .with_session_timeout(Duration::from_secs(20))
                .connect(&target.connect_string())
                .await
                .unwrap();
            &fresh
        }
    };
    loop {
        let mut left = Vec::new();
        for dir in lock_dirs(root).into_iter().filter(|dir| *dir != latch) {
            let _ = client.sync(&dir).await;
            match client.list_children(&dir).await {
                Ok(children) => left.extend(children.into_iter().map(|c| format!("{dir}/{c}"))),
                Err(zk::Error::NoNode) => {}
                Err(err) => left.push(format!("{dir}: not listed ({err})")),
            }
        }
        if left.is_empty() || now() >= by {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
