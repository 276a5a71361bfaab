//! `FrameworkBuilder::release_before_reply`: a release that returns once its
//! delete is queued on the session, against the default release that waits
//! for ZooKeeper's answer.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    bounded, children, deletes_sent, eventually, framework, framework_with, raw_client,
    request_opcodes, server, unique_path, BOUND, PATIENCE,
};
use zk_curator::{ConnectionState, Error, InterProcessMutex, LockLoss};
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::FaultProxy;

fn delete_sent(proxy: &FaultProxy) -> bool {
    deletes_sent(proxy) > 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_before_reply_returns_while_the_answer_is_held() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fast = framework_with(&proxy.connect_string(), |b| b.release_before_reply(true)).await;
        let confirmed = framework(&proxy.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;
        let path = unique_path("release-before-reply");

        // With the option: the release returns while its answer is held.
        let mutex = InterProcessMutex::new(fast.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        proxy.clear_traffic();
        proxy.hold_replies(true);
        // Well within the connection timeout (10 s), after which a waiting
        // release would give up and return too.
        let released = tokio::time::timeout(Duration::from_secs(3), guard.release()).await;
        assert_eq!(released.map_err(|_| "still waiting"), Ok(Ok(())));
        assert!(
            eventually(PATIENCE, || async { delete_sent(&proxy) }).await,
            "the delete was queued before the release returned, so it is sent"
        );
        // The answer is still held, so the delete still counts as
        // background work.
        assert!(
            !fast
                .wait_for_background_cleanup(Duration::from_millis(200))
                .await
        );
        proxy.hold_replies(false);
        assert!(fast.wait_for_background_cleanup(PATIENCE).await);
        assert!(children(&raw, &path).await.is_empty());

        // Without it (the default): the release waits for its answer.
        let mutex = InterProcessMutex::new(confirmed.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        proxy.clear_traffic();
        proxy.hold_replies(true);
        let mut release = std::pin::pin!(guard.release());
        tokio::select! {
            done = &mut release => panic!("the release returned with its answer held: {done:?}"),
            sent = eventually(PATIENCE, || async { delete_sent(&proxy) }) => {
                assert!(sent, "the release never sent its delete");
            }
        }
        proxy.hold_replies(false);
        release.await.unwrap();
        // Answered: no client sees the node any more.
        assert!(children(&raw, &path).await.is_empty());

        fast.close().await;
        confirmed.close().await;
    })
    .await;
}

/// A task that releases and locks again sends its create right behind its
/// delete: the listing that follows finds the lock free, and the acquire
/// waits for no watch on its own old node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locking_again_right_after_a_release_before_reply_finds_the_lock_free() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework_with(&proxy.connect_string(), |b| b.release_before_reply(true)).await;
        let path = unique_path("release-relock");
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let first = mutex.lock().await.unwrap();
        let first_token = first.fencing_token();
        proxy.clear_traffic();
        first.release().await.unwrap();
        let second = mutex.lock().await.unwrap();
        assert!(second.fencing_token() > first_token);
        let sent = request_opcodes(&proxy);
        // The delete goes first (alone, or with the lock path its acquire
        // made, in one multi).
        assert!(
            matches!(sent.first(), Some(&(opcode::DELETE | opcode::MULTI))),
            "{sent:?}"
        );
        // A watch on a node ahead is a read of its data. (An `exists` is
        // sent only if the server reaped the emptied lock path between the
        // delete and the create: the acquire then makes it again.)
        assert!(
            !sent.contains(&opcode::GET_DATA),
            "the acquire watched a node ahead of it: {sent:?}"
        );
        assert!(
            !sent.contains(&opcode::EXISTS) || sent.contains(&opcode::CREATE_CONTAINER),
            "an exists without the lock path made again: {sent:?}"
        );
        second.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

/// Three processes, three tasks each, hand one mutex around with the option
/// on: never two holders, every token larger than the one before, and no
/// node left once the background deletes are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_before_reply_keeps_mutual_exclusion() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("release-before-reply-exclusion");
        let mut frameworks = Vec::new();
        for _ in 0..3 {
            frameworks.push(
                framework_with(&server.connect_string(), |b| b.release_before_reply(true)).await,
            );
        }
        let busy = Arc::new(AtomicBool::new(false));
        let tokens = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for fw in &frameworks {
            for _ in 0..3 {
                let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
                let (busy, tokens) = (busy.clone(), tokens.clone());
                tasks.push(tokio::spawn(async move {
                    for _ in 0..10 {
                        let guard = mutex.lock().await.unwrap();
                        assert!(!busy.swap(true, Ordering::SeqCst), "two holders at once");
                        tokens.lock().unwrap().push(guard.fencing_token().get());
                        tokio::task::yield_now().await;
                        busy.store(false, Ordering::SeqCst);
                        guard.release().await.unwrap();
                    }
                }));
            }
        }
        for task in tasks {
            task.await.unwrap();
        }
        let tokens = tokens.lock().unwrap().clone();
        assert_eq!(tokens.len(), 90);
        assert!(
            tokens.windows(2).all(|pair| pair[0] < pair[1]),
            "tokens grow with every hold: {tokens:?}"
        );
        let raw = raw_client(&server.connect_string()).await;
        for fw in &frameworks {
            assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        }
        assert!(children(&raw, &path).await.is_empty());
        for fw in frameworks {
            fw.close().await;
        }
    })
    .await;
}

/// A hold already lost is released as before, answer awaited, even with the
/// option: the node is gone when the release returns `LockLost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_hold_is_released_with_its_answer_awaited() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework_with(&proxy.connect_string(), |b| b.release_before_reply(true)).await;
        let raw = raw_client(&server.connect_string()).await;
        let path = unique_path("release-before-reply-lost");
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        let lost = guard.lost();
        proxy.drop_connections();
        assert_eq!(
            tokio::time::timeout(PATIENCE, lost).await.unwrap(),
            LockLoss::ConnectionState(ConnectionState::Suspended)
        );
        fw.block_until_connected(PATIENCE).await.unwrap();
        let node = guard.node().path().to_owned();
        assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
        assert!(raw.check_stat(&node).await.unwrap().is_none());
        fw.close().await;
    })
    .await;
}
