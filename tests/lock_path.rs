//! The lock path made with the first node and removed with the last, each
//! in one multi (`framework/src/lock_internals/lock_path.rs`): a lock taken
//! once per entity costs one write to acquire and one to release, and the
//! shortcut never grants what a listing would refuse.
#![allow(clippy::unwrap_used)]

mod common;

use common::{
    bounded, framework, framework_with, raw_client, request_opcodes, server, unique_path,
    wait_for_participants, BOUND,
};
use zk_curator::recipes::InterProcessMutex;
use zk_curator::zk;
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::FaultProxy;

async fn exists(raw: &zk::Client, path: &str) -> bool {
    raw.check_stat(path).await.unwrap().is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_of_its_own_costs_one_multi_to_take_and_one_to_give_back() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework(&proxy.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;
        let path = unique_path("lock-path");
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let mut tokens = Vec::new();
        for round in 0..3 {
            proxy.clear_traffic();
            let guard = mutex.lock().await.unwrap();
            let acquired = request_opcodes(&proxy);
            // The node's zxid, read back, is the hold's token.
            let stat = raw.check_stat(guard.node().path()).await.unwrap().unwrap();
            assert_eq!(guard.fencing_token().get(), stat.czxid, "round {round}");
            tokens.push(guard.fencing_token());
            proxy.clear_traffic();
            guard.release().await.unwrap();
            let released = request_opcodes(&proxy);
            // Answered: the lock path went with the node.
            assert!(!exists(&raw, &path).await, "round {round}: {path} is left");
            assert_eq!(released, [opcode::MULTI], "round {round}: the release");
            if round > 0 {
                // The path is known to be gone: one multi, no listing.
                assert_eq!(acquired, [opcode::MULTI], "round {round}: the acquire");
            }
        }
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_someone_made_since_is_queued_on_as_usual() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let first = framework(&server.connect_string()).await;
        let other = framework(&server.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;
        let path = unique_path("lock-path-stale");
        let ours = InterProcessMutex::new(first.clone(), &path).unwrap();
        // Our release removes the path, and we remember it as gone.
        ours.lock().await.unwrap().release().await.unwrap();
        assert!(!exists(&raw, &path).await);
        // Someone else makes it again and holds the lock.
        let theirs = InterProcessMutex::new(other.clone(), &path).unwrap();
        let held = theirs.lock().await.unwrap();
        // Our next try finds the path there: it must queue, not hold.
        assert!(ours.try_lock().await.unwrap().is_none());
        let waiter = tokio::spawn({
            let ours = ours.clone();
            async move { ours.lock().await.map(|g| g.fencing_token()) }
        });
        wait_for_participants(&raw, &path, 2).await;
        let their_token = held.fencing_token();
        held.release().await.unwrap();
        let our_token = waiter.await.unwrap().unwrap();
        assert!(our_token > their_token);
        first.close().await;
        other.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_path_stays_while_anyone_is_under_it_or_when_someone_else_made_it() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let first = framework(&server.connect_string()).await;
        let other = framework(&server.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;

        // Made by our acquire, but someone queued behind us: the release
        // leaves the path to them.
        let path = unique_path("lock-path-queued");
        let ours = InterProcessMutex::new(first.clone(), &path).unwrap();
        let held = ours.lock().await.unwrap();
        let theirs = InterProcessMutex::new(other.clone(), &path).unwrap();
        let waiter = tokio::spawn(async move { theirs.lock().await });
        wait_for_participants(&raw, &path, 2).await;
        held.release().await.unwrap();
        let theirs = waiter.await.unwrap().unwrap();
        assert!(
            exists(&raw, theirs.node().path()).await,
            "the waiter's node went with the path"
        );
        theirs.release().await.unwrap();

        // Made persistent by someone else (as kazoo makes its lock paths):
        // it is never removed.
        let path = unique_path("lock-path-persistent");
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        raw.create(&path, &[], &persistent).await.unwrap();
        let ours = InterProcessMutex::new(first.clone(), &path).unwrap();
        for _ in 0..2 {
            ours.lock().await.unwrap().release().await.unwrap();
        }
        assert!(exists(&raw, &path).await, "the path was removed");
        first.close().await;
        other.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_removing_turned_off_the_path_stays_for_the_reaper() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework_with(&proxy.connect_string(), |b| b.remove_lock_paths(false)).await;
        let path = unique_path("lock-path-kept");
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        proxy.clear_traffic();
        guard.release().await.unwrap();
        // The node's delete alone: the path is left to the server's reaper
        // (which may already have removed it, so it is not looked for).
        assert_eq!(request_opcodes(&proxy), [opcode::DELETE]);
        fw.close().await;
    })
    .await;
}

// Node data that fits a create but not the multi (the lock path's create
// added) is created alone: `tests/mutex.rs`, the largest data that fits, on
// a path that does not exist yet.
