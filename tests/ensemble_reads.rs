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

use std::time::Duration;

use common::{bounded, eventually, framework_with, leads, started_latch, unique_path, PATIENCE};
use zk_curator::{LeaderElection, LeaderLatch};
use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::{FaultProxy, TestingCluster, Traffic};

/// Three JVMs per test: one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The bound of each test body: three JVMs started on a slow 2-core machine.
const CLUSTER_BOUND: Duration = Duration::from_secs(240);

/// 50 ticks of 100 ms: a stalled follower serves the past for up to 5 s.
const SYNC_LIMIT: u32 = 50;

/// ZooKeeper's opcode for `sync`.
const SYNC: i32 = 9;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_follower_answers_the_cheap_read_from_the_past_and_the_synced_one_never() {
    if !Prerequisite::ZooKeeper.check("ensemble_reads") {
        return;
    }
    let _serial = SERIAL.lock().await;
    bounded(CLUSTER_BOUND, async {
        let cluster = TestingCluster::builder()
            .quorum_through_proxies(true)
            .local_sessions(true)
            .sync_limit(SYNC_LIMIT)
            .start_async()
            .await
            .unwrap();
        let leader = cluster.wait_until_serving_async(PATIENCE).await.unwrap();
        let lagging = (leader + 1) % 3;
        let path = unique_path("ensemble-reads");

        // A leads, B waits: both on the ensemble's leader.
        let on_leader = cluster.connect_string_of(leader);
        let (fa, a) = started_latch(&on_leader, &path, "a").await;
        leads(&a, PATIENCE).await;
        let (fb, b) = started_latch(&on_leader, &path, "b").await;

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
                proxy
                    .traffic()
                    .iter()
                    .any(|t| matches!(t, Traffic::Request { opcode, .. } if *opcode == SYNC))
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
