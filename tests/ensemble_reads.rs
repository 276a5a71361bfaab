//! Reads on a replicated ensemble (issue 32, item 1): a follower whose
//! leader link is stalled keeps serving its clients the past. A cheap read
//! asked of it names the former leader; the synced forms never do: they
//! wait until the follower has caught up (or the session has moved), then
//! name the current one.
//!
//! Always a real 3-node ensemble (`zk_curator_testing::TestingCluster`)
//! with its peer links through fault proxies and local sessions on, so a
//! session can be made on the lagging member itself. Without ZooKeeper each
//! test fails saying so, or is skipped with a notice under
//! `ZK_SKIP_MISSING=zookeeper` (or `=1`).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    bounded, eventually, framework_with, leads, requests_with, started_latch, unique_path, PATIENCE,
};
use futures::StreamExt as _;
use zk_curator::{Framework, LeaderElection, LeaderLatch, LeaderObserver, Observation};
use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::{FaultProxy, TestingCluster};

/// Three JVMs per test: one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The bound of each test body: three JVMs started on a slow 2-core machine.
const CLUSTER_BOUND: Duration = Duration::from_secs(240);

/// 50 ticks of 100 ms: a stalled follower serves the past for up to 5 s.
const SYNC_LIMIT: u32 = 50;

/// A real 3-node ensemble with its peer links through proxies and local
/// sessions on, a member that can be made to lag, and an election at
/// `path` where A leads and B waits (both on the ensemble's leader).
struct Lagging {
    cluster: TestingCluster,
    leader: usize,
    /// The follower to stall.
    lagging: usize,
    path: String,
    a: (Framework, LeaderLatch),
    b: (Framework, LeaderLatch),
}

impl Lagging {
    /// With `sync_limit` ticks of 100 ms: how long a stalled follower
    /// serves the past.
    async fn start(sync_limit: u32) -> Lagging {
        let cluster = TestingCluster::builder()
            .quorum_through_proxies(true)
            .local_sessions(true)
            .sync_limit(sync_limit)
            .start_async()
            .await
            .unwrap();
        let leader = cluster.wait_until_serving_async(PATIENCE).await.unwrap();
        let path = unique_path("ensemble-reads");
        let on_leader = cluster.connect_string_of(leader);
        let a = started_latch(&on_leader, &path, "a").await;
        leads(&a.1, PATIENCE).await;
        let b = started_latch(&on_leader, &path, "b").await;
        Lagging {
            leader,
            lagging: (leader + 1) % 3,
            cluster,
            path,
            a,
            b,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_follower_answers_the_cheap_read_from_the_past_and_the_synced_one_never() {
    if !Prerequisite::ZooKeeper.check("ensemble_reads") {
        return;
    }
    let _serial = SERIAL.lock().await;
    bounded(CLUSTER_BOUND, async {
        let Lagging {
            cluster,
            lagging,
            path,
            a: (fa, a),
            b: (fb, b),
            ..
        } = Lagging::start(SYNC_LIMIT).await;

        // The reader's only server is the lagging member, seen through a
        // proxy that shows when its sync is on the way.
        let proxy = FaultProxy::start(cluster.address_of(lagging))
            .await
            .unwrap();
        let fr = framework_with(&proxy.connect_string(), |builder| {
            builder.session_timeout(Duration::from_secs(30))
        })
        .await;
        let reader = LeaderLatch::new(fr.clone(), &path, "reader").unwrap();
        assert_eq!(
            LeaderElection::synced_leader(&reader)
                .await
                .unwrap()
                .unwrap()
                .id,
            "a"
        );

        // The follower falls behind; A steps down and B leads.
        cluster.stall_leader_to(lagging, true).unwrap();
        a.close().await.unwrap();
        leads(&b, PATIENCE).await;

        // The cheap read is as of the lagging server: the past.
        let cheap = LeaderElection::leader(&reader).await.unwrap().unwrap();
        assert_eq!(
            cheap.id, "a",
            "the lagging member still shows the former leader"
        );

        // The synced read waits behind its sync; the stall ends once the
        // sync has gone out, and the answer is the current leader.
        proxy.clear_traffic();
        let synced = tokio::spawn({
            let reader = LeaderLatch::new(fr.clone(), &path, "reader").unwrap();
            async move { LeaderElection::synced_leader(&reader).await }
        });
        assert!(
            eventually(PATIENCE, || async {
                requests_with(&proxy, opcode::SYNC) > 0
            })
            .await,
            "the sync went out"
        );
        cluster.stall_leader_to(lagging, false).unwrap();
        let fresh = bounded(PATIENCE, synced).await.unwrap().unwrap().unwrap();
        assert_eq!(fresh.id, "b", "the synced read names the current leader");

        b.close().await.unwrap();
        for fw in [fa, fb, fr] {
            fw.close().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_whose_session_moves_to_a_lagging_follower_never_reports_an_older_leader() {
    if !Prerequisite::ZooKeeper.check("ensemble_reads") {
        return;
    }
    let _serial = SERIAL.lock().await;
    bounded(CLUSTER_BOUND, async {
        // The follower serves the past for up to 15 s: room for a session
        // to be lost and replaced on it meanwhile.
        let Lagging {
            cluster,
            leader,
            lagging,
            path,
            a: (fa, a),
            b: (fb, b),
        } = Lagging::start(3 * SYNC_LIMIT).await;

        // The observer knows two servers: the leader (through `up`) and the
        // member that will lag (through `late`, silent until the session
        // has to move there).
        let up = FaultProxy::start(cluster.address_of(leader)).await.unwrap();
        let late = FaultProxy::start(cluster.address_of(lagging))
            .await
            .unwrap();
        late.set_paused(true);
        let connect = format!("{},{}", up.connect_string(), late.connect_string());
        let fo = framework_with(&connect, |builder| {
            builder.session_timeout(Duration::from_secs(3))
        })
        .await;
        let observer = LeaderObserver::new(fo.clone(), &path).unwrap();
        let seen = Arc::new(Mutex::new(Vec::<Observation>::new()));
        let collector = tokio::spawn({
            let seen = seen.clone();
            let changes = observer.changes();
            async move {
                let mut changes = std::pin::pin!(changes);
                while let Some(observation) = changes.next().await {
                    seen.lock().unwrap().push(observation);
                }
            }
        });
        let led_by = |id: &'static str, from: usize| {
            let seen = seen.clone();
            move || {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap()[from..]
                        .iter()
                        .any(|o| o.leader().is_some_and(|l| l.id == id))
                }
            }
        };
        assert!(eventually(PATIENCE, led_by("a", 0)).await, "reports a");

        // The follower falls behind; A steps down and B leads, and the
        // observer (on the leader) says so.
        cluster.stall_leader_to(lagging, true).unwrap();
        a.close().await.unwrap();
        leads(&b, PATIENCE).await;
        assert!(eventually(PATIENCE, led_by("b", 0)).await, "reports b");
        let moved_from = seen.lock().unwrap().len();
        let generation = fo.current_session().unwrap().generation();

        // The observer's server goes silent, and the lagging member opens:
        // the session is lost after its timeout, and the next one is a
        // local session on the lagging member.
        late.clear_traffic();
        late.set_paused(false);
        up.set_paused(true);

        // Either the new session's sync is on the way, held by the stall,
        // or the observer already reports someone as of the lagging member.
        let known_after_move = |seen: &[Observation]| {
            seen[moved_from..]
                .iter()
                .any(|o| matches!(o, Observation::Leader(_) | Observation::NoLeader))
        };
        assert!(
            eventually(PATIENCE, || async {
                requests_with(&late, opcode::SYNC) > 0 || known_after_move(&seen.lock().unwrap())
            })
            .await,
            "the session moved to the lagging member"
        );
        cluster.stall_leader_to(lagging, false).unwrap();
        assert!(
            eventually(PATIENCE, || async {
                fo.current_session()
                    .is_some_and(|s| s.generation() > generation)
                    && seen.lock().unwrap()[moved_from..]
                        .iter()
                        .any(|o| o.leader().is_some_and(|l| l.id == "b"))
            })
            .await,
            "the observer reports b on its new session: {:?}",
            seen.lock().unwrap()
        );
        let reported: Vec<String> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|o| {
                o.leader()
                    .map_or_else(|| format!("{o:?}"), |l| l.id.clone())
            })
            .collect();
        let first_b = reported.iter().position(|id| id == "b").unwrap();
        assert!(
            !reported[first_b..].iter().any(|id| id == "a"),
            "after b, the observer reported the former leader a again: {reported:?}"
        );

        collector.abort();
        b.close().await.unwrap();
        for fw in [fa, fb, fo] {
            fw.close().await;
        }
    })
    .await;
}
