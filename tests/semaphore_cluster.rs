//! InterProcessSemaphoreV2 on a real 3-node ZooKeeper ensemble: Curator's
//! TestInterProcessSemaphoreCluster (docs/CURATOR-NOTES.md §17.7), in spirit.
//!
//! * killed server: the whole ensemble dies under a held lease; every client
//!   sees Suspended then Lost, the lease turns invalid; after the restart
//!   exactly one client gets the lease again (nothing orphaned blocks it);
//! * cluster: clients loop acquire → work → release with never more than
//!   one active; nothing is acquired while the ensemble is down, and
//!   acquisitions resume once two of the three nodes are back.
//!
//! Always a real ensemble (`zk_curator_testing::TestingCluster`): without
//! ZooKeeper each test fails saying so, or is skipped with a notice under
//! `ZK_SKIP_MISSING=zookeeper` (or `=1`).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{bounded, children, eventually, framework_with, raw_client, unique_path, PATIENCE};
use futures::StreamExt;
use zk_curator::zk;
use zk_curator::{ConnectionState, Framework, InterProcessSemaphoreV2, Lease};
use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::TestingCluster;

/// Each test runs three JVMs; one test at a time keeps a 2-core machine
/// responsive enough for short session timeouts.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The bound of each test body (taken after [`SERIAL`]): three JVMs started
/// (up to 30 s each try), killed and restarted on a slow 2-core machine.
const CLUSTER_BOUND: Duration = Duration::from_secs(300);

/// Whether a real ensemble can be started here: a missing ZooKeeper fails
/// `test` naming what to install, or skips it with a notice under
/// `ZK_SKIP_MISSING` (the testing crate's one rule, [`Prerequisite::check`]).
fn cluster_available(test: &str) -> bool {
    Prerequisite::ZooKeeper.check(test)
}

/// `count` started, connected frameworks on `connect`, each its own session.
async fn frameworks(connect: &str, count: usize, session_timeout: Duration) -> Vec<Framework> {
    let mut frameworks = Vec::with_capacity(count);
    for _ in 0..count {
        frameworks.push(
            framework_with(connect, |b| {
                b.session_timeout(session_timeout)
                    .connection_timeout(session_timeout)
            })
            .await,
        );
    }
    frameworks
}

/// Whether exactly two lease nodes are listed, both owned by current sessions
/// of `frameworks`: the holder's, and a contender's queued behind it (a
/// contender waits for a lease holding the semaphore's internal mutex, so
/// only one of them has a lease node at a time). Nodes of expired sessions do
/// not count.
async fn one_queued_behind_the_holder(
    raw: &zk::Client,
    leases: &str,
    frameworks: &[Framework],
) -> bool {
    let nodes = children(raw, leases).await;
    if nodes.len() != 2 {
        return false;
    }
    let live: Vec<i64> = frameworks
        .iter()
        .filter_map(|fw| fw.current_session().map(|s| s.id()))
        .collect();
    for node in nodes {
        match raw.check_stat(&format!("{leases}/{node}")).await {
            Ok(Some(stat)) if live.contains(&stat.ephemeral_owner) => {}
            _ => return false,
        }
    }
    true
}

async fn close_all(frameworks: &[Framework]) {
    for fw in frameworks {
        fw.close().await;
    }
}

/// Tries for a lease until it gets one (counted in `won`) or `stop` is set;
/// errors while the ensemble is away are retried.
async fn contend(
    semaphore: InterProcessSemaphoreV2,
    won: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) -> Option<Lease> {
    while !stop.load(Ordering::SeqCst) {
        match semaphore.acquire_timeout(Duration::from_secs(1)).await {
            Ok(Some(lease)) => {
                won.fetch_add(1, Ordering::SeqCst);
                return Some(lease);
            }
            Ok(None) => {}
            Err(err) => {
                tracing::debug!(%err, "acquire failed; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    None
}

/// TestInterProcessSemaphoreCluster.testKilledServerWithEnsembleProvider:
/// the ensemble is killed under a held lease, the holder's session is lost,
/// and after the restart exactly one client holds the lease again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_cluster_loses_the_lease_and_exactly_one_client_gets_it_back() {
    common::init_tracing();
    if !cluster_available("killed_cluster_loses_the_lease_and_exactly_one_client_gets_it_back") {
        return;
    }
    let _serial = SERIAL.lock().await;
    bounded(CLUSTER_BOUND, async move {
        const CLIENTS: usize = 10;
        let session_timeout = Duration::from_secs(3);
        let began = Instant::now();
        let cluster = TestingCluster::start_default_async().await.unwrap();
        eprintln!("cluster serving after {:?}", began.elapsed());
        let connect = cluster.connect_string();
        let path = unique_path("sem-cluster-killed");
        let fws = frameworks(&connect, CLIENTS, session_timeout).await;
        let semaphores: Vec<InterProcessSemaphoreV2> = fws
            .iter()
            .map(|fw| InterProcessSemaphoreV2::new(fw.clone(), &path, 1).unwrap())
            .collect();

        // Client 0 holds the only lease; the others queue behind it.
        let holder = semaphores[0]
            .acquire_timeout(PATIENCE)
            .await
            .unwrap()
            .expect("the first client gets the lease");
        assert!(holder.is_valid());
        let won = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut contenders: Vec<_> = semaphores[1..]
            .iter()
            .map(|s| tokio::spawn(contend(s.clone(), won.clone(), stop.clone())))
            .collect();
        let leases = format!("{path}/leases");
        {
            // A contender is queued behind the holder, and none got in.
            let raw = raw_client(&connect).await;
            assert!(
                eventually(PATIENCE, || one_queued_behind_the_holder(
                    &raw, &leases, &fws
                ))
                .await,
                "no contender queued behind the holder: {:?}",
                children(&raw, &leases).await
            );
        }
        assert_eq!(won.load(Ordering::SeqCst), 0, "the lease is held");

        // Kill the whole ensemble: everyone is Suspended, then Lost after the
        // session timeout; the held lease can no longer be trusted.
        let mut states: Vec<_> = fws.iter().map(|fw| Box::pin(fw.state_changes())).collect();
        let killed = Instant::now();
        cluster.stop_all();
        for (i, states) in states.iter_mut().enumerate() {
            let next = tokio::time::timeout(PATIENCE, states.next()).await.unwrap();
            assert_eq!(next, Some(ConnectionState::Suspended), "client {i}");
        }
        eprintln!(
            "all clients Suspended {:?} after the kill",
            killed.elapsed()
        );
        assert!(!holder.is_valid(), "Suspended invalidates the lease");
        for (i, states) in states.iter_mut().enumerate() {
            let next = tokio::time::timeout(PATIENCE, states.next()).await.unwrap();
            assert_eq!(next, Some(ConnectionState::Lost), "client {i}");
        }
        let lost_after = killed.elapsed();
        eprintln!("all clients Lost {lost_after:?} after the kill");
        assert!(
            lost_after >= session_timeout.mul_f64(0.9),
            "Lost after only {lost_after:?}"
        );
        assert!(!holder.is_valid(), "the lease went with the lost session");
        // The holder drops it (count 0), as Curator's clients do on LOST.
        drop(holder);
        assert_eq!(
            won.load(Ordering::SeqCst),
            0,
            "nothing is acquired while the ensemble is down"
        );

        // Bring the ensemble back; every client, the old holder included, wants
        // the lease: exactly one gets it, once the old sessions' nodes are gone.
        let restarted = Instant::now();
        cluster.restart_all_async().await.unwrap();
        eprintln!(
            "cluster serving again {:?} after restart_all",
            restarted.elapsed()
        );
        contenders.push(tokio::spawn(contend(
            semaphores[0].clone(),
            won.clone(),
            stop.clone(),
        )));
        assert!(
            eventually(PATIENCE, || async { won.load(Ordering::SeqCst) >= 1 }).await,
            "no client got the lease back within {PATIENCE:?}: something orphaned blocks it"
        );
        eprintln!(
            "lease acquired again {:?} after restart_all",
            restarted.elapsed()
        );
        // Another contender, on its new session, is queued behind the winner,
        // and did not get in.
        let raw = raw_client(&connect).await;
        assert!(
            eventually(PATIENCE, || one_queued_behind_the_holder(
                &raw, &leases, &fws
            ))
            .await,
            "no contender queued behind the winner: {:?}",
            children(&raw, &leases).await
        );
        assert_eq!(
            won.load(Ordering::SeqCst),
            1,
            "exactly one client holds the lease"
        );
        stop.store(true, Ordering::SeqCst);
        let mut winners = Vec::new();
        for contender in contenders {
            // The losers are inside a bounded acquire; they give up within it.
            let lease = tokio::time::timeout(PATIENCE, contender)
                .await
                .expect("contender stops")
                .unwrap();
            winners.extend(lease);
        }
        assert_eq!(winners.len(), 1);
        let winner = winners.pop().unwrap();
        assert!(winner.is_valid());

        // Nothing is left behind: only the winner's lease node remains.
        for fw in &fws {
            assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        }
        let expected = vec![winner.node().name().to_owned()];
        let settled = eventually(PATIENCE, || async {
            children(&raw, &leases).await == expected
                && children(&raw, &format!("{path}/locks")).await.is_empty()
        })
        .await;
        assert!(
            settled,
            "leases {:?}, expected {expected:?}",
            children(&raw, &leases).await
        );
        winner.release().await.unwrap();
        close_all(&fws).await;
        eprintln!("killed-cluster test took {:?}", began.elapsed());
    })
    .await;
}

/// Shared tallies of the looping clients.
#[derive(Default)]
struct Tally {
    active: AtomicUsize,
    peak: AtomicUsize,
    acquired: AtomicUsize,
    errors: AtomicUsize,
    invalid: AtomicUsize,
}

/// Loops acquire → work (checking it is alone) → release until `stop`,
/// counting in `tries` every acquire attempt that has returned.
async fn semaphore_client(
    semaphore: InterProcessSemaphoreV2,
    tally: Arc<Tally>,
    tries: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::SeqCst) {
        let attempt = semaphore.acquire_timeout(Duration::from_secs(2)).await;
        tries.fetch_add(1, Ordering::SeqCst);
        match attempt {
            Ok(Some(lease)) => {
                let now = tally.active.fetch_add(1, Ordering::SeqCst) + 1;
                tally.peak.fetch_max(now, Ordering::SeqCst);
                tally.acquired.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                if !lease.is_valid() {
                    tally.invalid.fetch_add(1, Ordering::SeqCst);
                }
                tally.active.fetch_sub(1, Ordering::SeqCst);
                if let Err(err) = lease.release().await {
                    tracing::debug!(%err, "release failed");
                }
            }
            Ok(None) => {}
            Err(err) => {
                tally.errors.fetch_add(1, Ordering::SeqCst);
                tracing::debug!(%err, "acquire failed; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// TestInterProcessSemaphoreCluster.testCluster: clients take turns on a
/// one-lease semaphore; the whole ensemble stops (operations cease), two of
/// three nodes come back (operations resume); never more than one active.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_cease_while_the_cluster_is_down_and_resume_on_a_quorum() {
    common::init_tracing();
    if !cluster_available("operations_cease_while_the_cluster_is_down_and_resume_on_a_quorum") {
        return;
    }
    let _serial = SERIAL.lock().await;
    bounded(CLUSTER_BOUND, async move {
        const CLIENTS: usize = 10;
        let began = Instant::now();
        let cluster = TestingCluster::start_default_async().await.unwrap();
        let connect = cluster.connect_string();
        let path = unique_path("sem-cluster-ops");
        // Sessions outlive the outage below, so the clients reconnect with them.
        let fws = frameworks(&connect, CLIENTS, Duration::from_secs(10)).await;
        let tally = Arc::new(Tally::default());
        let stop = Arc::new(AtomicBool::new(false));
        let tries: Vec<Arc<AtomicUsize>> = (0..CLIENTS).map(|_| Arc::default()).collect();
        let clients: Vec<_> = fws
            .iter()
            .zip(&tries)
            .map(|(fw, tries)| {
                let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, 1).unwrap();
                tokio::spawn(semaphore_client(
                    semaphore,
                    tally.clone(),
                    tries.clone(),
                    stop.clone(),
                ))
            })
            .collect();

        let acquired = || tally.acquired.load(Ordering::SeqCst);
        assert!(
            eventually(PATIENCE, || async { acquired() >= 20 }).await,
            "the clients take turns (only {} acquisitions)",
            acquired()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        let before_outage = acquired();
        eprintln!(
            "{before_outage} acquisitions before the outage ({:?} in)",
            began.elapsed()
        );

        // The whole ensemble stops: once in-flight replies are through, no
        // acquisition completes.
        cluster.stop_all();
        assert!(
            eventually(PATIENCE, || async {
                fws.iter()
                    .all(|fw| fw.state() == Some(ConnectionState::Suspended))
            })
            .await,
            "every client notices the outage"
        );
        let at_outage = acquired();
        // Every client has since tried for the lease from start to end (two
        // more attempts returned: the first may have begun before the
        // outage), and none got it.
        let tries_at_outage: Vec<usize> = tries.iter().map(|t| t.load(Ordering::SeqCst)).collect();
        assert!(
            eventually(PATIENCE, || async {
                tries
                    .iter()
                    .zip(&tries_at_outage)
                    .all(|(now, then)| now.load(Ordering::SeqCst) >= then + 2)
            })
            .await,
            "some client stopped trying during the outage: {:?} attempts then, {:?} now",
            tries_at_outage,
            tries
                .iter()
                .map(|t| t.load(Ordering::SeqCst))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            acquired(),
            at_outage,
            "an acquisition completed while the ensemble was down"
        );
        eprintln!(
            "no acquisitions during the outage ({} between the kill and every client noticing it)",
            at_outage - before_outage
        );

        // Two of three nodes are a quorum: operations resume.
        let restarted = Instant::now();
        cluster.restart_nodes_async(&[0, 1]).await.unwrap();
        eprintln!(
            "nodes 0 and 1 serving {:?} after their restart",
            restarted.elapsed()
        );
        assert!(!cluster.is_running(2));
        assert!(
            eventually(PATIENCE, || async { acquired() >= at_outage + 20 }).await,
            "acquisitions did not resume on two nodes ({} since the restart)",
            acquired() - at_outage
        );
        eprintln!(
            "20 more acquisitions {:?} after the restart",
            restarted.elapsed()
        );

        stop.store(true, Ordering::SeqCst);
        for client in clients {
            tokio::time::timeout(PATIENCE, client)
                .await
                .expect("client loop stops")
                .unwrap();
        }
        assert_eq!(
            tally.peak.load(Ordering::SeqCst),
            1,
            "never more than one holder"
        );
        assert_eq!(tally.active.load(Ordering::SeqCst), 0);
        eprintln!(
            "{} acquisitions, {} acquire errors, {} leases invalid at release, {:?} in all",
            acquired(),
            tally.errors.load(Ordering::SeqCst),
            tally.invalid.load(Ordering::SeqCst),
            began.elapsed()
        );
        close_all(&fws).await;
    })
    .await;
}
