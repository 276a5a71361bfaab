//! Replayable under a seed: the server draws its randomness from `fastrand`'s thread-local
//! generator, so two servers started on a thread seeded alike hand out the same session ids
//! (and a simulation that seeds the thread replays them), while other seeds give others.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::time::Duration;

use common::connect;
use zk_curator_server::EmbeddedServer;

/// The id of the first session a fresh server hands out, the thread's generator seeded with
/// `seed` just before the server starts.
async fn first_session_id(seed: u64) -> i64 {
    fastrand::seed(seed);
    let server = EmbeddedServer::start().await.unwrap();
    let client = connect(&server).await;
    let id = client.session_id().0;
    assert_eq!(server.session_ids(), vec![id]);
    drop(client);
    id
}

/// `#[tokio::test]` runs on one thread: the server starts on the test's own, seeded, thread.
#[tokio::test]
async fn the_same_seed_hands_out_the_same_first_session_id() {
    let first = first_session_id(7).await;
    assert!(first > 0, "{first:#x}");
    // Ids drawn from the wall clock (as ZooKeeper's are) would differ after this.
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(first_session_id(7).await, first);
    assert_ne!(first_session_id(8).await, first);
}

/// A server given an origin for node times stamps its nodes from it, whatever the wall
/// clock says (a simulation's nodes then carry the same times on every run).
#[tokio::test]
async fn node_times_count_from_the_origin_given() {
    let origin = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let server = EmbeddedServer::builder()
        .node_time_origin(origin)
        .start()
        .await
        .unwrap();
    let client = connect(&server).await;
    let mode =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let (stat, _) = client.create("/stamped", b"", &mode).await.unwrap();
    // Milliseconds since the origin: the server has run for less than a minute.
    let since = stat.ctime - 1_000_000_000;
    assert!((0..60_000).contains(&since), "ctime {}", stat.ctime);
}
