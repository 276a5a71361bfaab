//! The framework's life cycle against a real server: `close()` ends the
//! session before it returns (and stays bounded when the server is out of
//! reach), the state stream ends with it, and the background cleaner keeps
//! deleting through connection loss and flushes persistent nodes on close.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{children, eventually, framework, framework_with, raw_client, server, unique_path};
use common::{init_tracing, PATIENCE};
use futures::StreamExt;
use zk_curator::framework::lock_internals::{
    Acquire, ContenderGuard, LockInternals, LockInternalsDriver, ParticipantNode,
};
use zk_curator::{ConnectionState, Framework, InterProcessMutex};
use zk_curator_testing::{FaultProxy, TestingServer};

/// Every test body runs under this limit, so a hang fails by itself.
const TEST_LIMIT: Duration = Duration::from_secs(60);

/// A lock whose participant nodes outlive the session.
#[derive(Debug)]
struct PersistentDriver;

impl LockInternalsDriver for PersistentDriver {
    fn participant_node(&self) -> ParticipantNode {
        ParticipantNode::PersistentSequential
    }
}

fn persistent_lock(fw: &Framework, path: &str) -> LockInternals {
    LockInternals::new(fw.clone(), path, "lock-", 1, Arc::new(PersistentDriver)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_ends_the_session_and_its_ephemeral_nodes_before_returning() {
    init_tracing();
    let Some(server) = server() else { return };
    tokio::time::timeout(TEST_LIMIT, async {
        let raw = raw_client(&server.connect_string()).await;
        // Several rounds: the old close() lost this race only now and then.
        for round in 0..5 {
            let path = unique_path("close-ends-session");
            let fw = framework(&server.connect_string()).await;
            let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
            let guard = mutex.lock().await.unwrap();
            let node = guard.node().path().to_owned();
            let session_id = fw.session().await.unwrap().id();
            assert!(raw.check_stat(&node).await.unwrap().is_some());

            let started = Instant::now();
            fw.close().await;
            let took = started.elapsed();
            eprintln!("round {round}: close() took {took:?}");

            // No polling: the session is over by the time close() returns.
            assert_eq!(
                raw.check_stat(&node).await.unwrap(),
                None,
                "round {round}: the ephemeral node outlived close()"
            );
            if let Some(embedded) = server.as_embedded() {
                assert!(
                    !embedded.session_ids().contains(&session_id),
                    "round {round}: the session outlived close()"
                );
            }
            assert!(fw.is_closed());
            drop(guard);
        }
    })
    .await
    .expect("test timed out");
}

/// A framework holding a node through a proxy that then stops forwarding,
/// with a delete for the final flush that cannot succeed: a close with the
/// server out of reach. Returns the framework, the proxy and the node.
async fn out_of_reach_with_work_left(
    server: &TestingServer,
    name: &str,
) -> (Framework, FaultProxy, String) {
    let path = unique_path(name);
    let proxy = FaultProxy::start(server.address()).await.unwrap();
    let fw = framework_with(&proxy.connect_string(), |b| {
        b.session_timeout(Duration::from_secs(10))
            .connection_timeout(Duration::from_secs(2))
    })
    .await;
    let lock = persistent_lock(&fw, &path);
    let node = lock.acquire(Acquire::new()).await.unwrap().unwrap();
    proxy.blackhole(true);
    drop(ContenderGuard::node(&fw, node.node().path()));
    (fw, proxy, node.node().path().to_owned())
}

/// Lets the server be reached again and deletes what the test left.
async fn clean_up_after(server: &TestingServer, proxy: &FaultProxy, node: &str) {
    proxy.blackhole(false);
    let raw = raw_client(&server.connect_string()).await;
    let _ = raw.delete(node, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_is_bounded_when_the_server_is_unreachable() {
    init_tracing();
    let Some(server) = server() else { return };
    tokio::time::timeout(TEST_LIMIT, async {
        let (fw, proxy, node) = out_of_reach_with_work_left(server, "close-unreachable").await;
        let started = Instant::now();
        fw.close().await;
        let took = started.elapsed();
        eprintln!("close() with the server out of reach took {took:?}");
        // The flush and the wait for the session's end are each bounded by
        // the connection timeout (2 s here).
        assert!(took < Duration::from_secs(6), "close() took {took:?}");
        assert!(fw.is_closed());
        clean_up_after(server, &proxy, &node).await;
    })
    .await
    .expect("test timed out");
}

/// `close_within` bounds the whole close, where `close()` alone gives the
/// final flush and the wait for the session's end their own limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_within_bounds_a_close_on_a_dead_server() {
    init_tracing();
    let Some(server) = server() else { return };
    tokio::time::timeout(TEST_LIMIT, async {
        let (fw, proxy, node) = out_of_reach_with_work_left(server, "close-within").await;
        let started = Instant::now();
        let confirmed = fw.close_within(Duration::from_millis(300)).await;
        let took = started.elapsed();
        eprintln!("close_within(300ms) with the server out of reach took {took:?}");
        assert!(!confirmed, "nobody could confirm the session's end");
        assert!(
            took < Duration::from_millis(800),
            "close_within(300ms) took {took:?}"
        );
        assert!(fw.is_closed());
        clean_up_after(server, &proxy, &node).await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test]
async fn state_changes_end_after_close() {
    let Some(server) = server() else { return };
    tokio::time::timeout(TEST_LIMIT, async {
        let fw = framework(&server.connect_string()).await;
        let mut stream = Box::pin(fw.state_changes());
        let mut watcher = fw.state_watcher();
        fw.close().await;
        let mut seen = Vec::new();
        loop {
            match tokio::time::timeout(PATIENCE, stream.next()).await {
                Ok(Some(state)) => {
                    seen.push(state);
                    assert!(seen.len() < 10, "{seen:?}");
                }
                Ok(None) => break,
                Err(_) => panic!("the state stream did not end after close(): {seen:?}"),
            }
        }
        // A stream asked for after close() ends at once.
        let late = tokio::time::timeout(PATIENCE, Box::pin(fw.state_changes()).next()).await;
        assert_eq!(late, Ok(None));
        // The watch still reports the last state; nothing hangs on it.
        let _ = watcher.get_and_update();
    })
    .await
    .expect("test timed out");
}

/// Spawns an acquire that has to wait behind `holder`, and returns it with
/// the path of its participant node once that node exists.
async fn waiting_acquire(
    lock: LockInternals,
    raw: &zk_curator::framework::zk::Client,
    path: &str,
    holder_node: &str,
) -> (tokio::task::JoinHandle<()>, String) {
    let task = tokio::spawn(async move {
        let _ = lock.acquire(Acquire::new()).await;
    });
    let deadline = Instant::now() + PATIENCE;
    let ours = loop {
        let found = children(raw, path)
            .await
            .into_iter()
            .map(|name| format!("{path}/{name}"))
            .find(|node| node != holder_node);
        if let Some(node) = found {
            break node;
        }
        assert!(
            Instant::now() < deadline,
            "the waiting acquire never created its node"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    (task, ours)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleaner_keeps_retrying_through_a_long_outage_then_deletes_the_node() {
    init_tracing();
    let Some(server) = server() else { return };
    tokio::time::timeout(TEST_LIMIT, async {
        let path = unique_path("cleaner-outage");
        let raw = raw_client(&server.connect_string()).await;
        let holder_fw = framework(&server.connect_string()).await;
        let holder = InterProcessMutex::new(holder_fw.clone(), &path).unwrap();
        let held = holder.lock().await.unwrap();

        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework_with(&proxy.connect_string(), |b| {
            b.session_timeout(Duration::from_secs(12))
                .connection_timeout(Duration::from_secs(1))
        })
        .await;
        let session = fw.session().await.unwrap();
        let lock = LockInternals::new(
            fw.clone(),
            &path,
            "lock-",
            1,
            Arc::new(zk_curator::framework::lock_internals::StandardLockInternalsDriver),
        )
        .unwrap();
        let (acquire, ours) = waiting_acquire(lock, &raw, &path, held.node().path()).await;

        // The connection goes silent, then the acquire is dropped: the
        // cleaner's deletes fail (time out) one after another.
        proxy.blackhole(true);
        acquire.abort();
        assert!(acquire.await.unwrap_err().is_cancelled());
        let retried = eventually(PATIENCE, || async {
            fw.metrics().background_delete_retries() >= 3
        })
        .await;
        assert!(
            retried,
            "the cleaner did not retry while the server was out of reach"
        );
        assert!(
            raw.check_stat(&ours).await.unwrap().is_some(),
            "nothing could have deleted it yet"
        );

        proxy.blackhole(false);
        let gone = eventually(PATIENCE, || async {
            raw.check_stat(&ours).await.unwrap().is_none()
        })
        .await;
        assert!(gone, "the cleaner gave up on {ours}");
        let now = fw.session().await.unwrap();
        assert_eq!(
            (now.id(), now.generation()),
            (session.id(), session.generation()),
            "deleted by the cleaner on the same session, not by an expiry"
        );
        // (The delete that removed it may be one sent during the outage and
        // applied on reconnect; the next attempt then finds nothing to do.)
        assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        held.release().await.unwrap();
        fw.close().await;
        holder_fw.close().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_flushes_dropped_persistent_participants() {
    init_tracing();
    let Some(server) = server() else { return };
    tokio::time::timeout(TEST_LIMIT, async {
        let path = unique_path("close-flush");
        let raw = raw_client(&server.connect_string()).await;
        let holder_fw = framework(&server.connect_string()).await;
        let holder = persistent_lock(&holder_fw, &path);
        let held = holder.acquire(Acquire::new()).await.unwrap().unwrap();

        // A dropped acquire, then close at once.
        let fw = framework(&server.connect_string()).await;
        let (acquire, ours) =
            waiting_acquire(persistent_lock(&fw, &path), &raw, &path, held.node().path()).await;
        acquire.abort();
        assert!(acquire.await.unwrap_err().is_cancelled());
        fw.close().await;
        assert_eq!(
            raw.check_stat(&ours).await.unwrap(),
            None,
            "the dropped acquire's persistent node outlived close()"
        );

        // A dropped guard of a held persistent node, then close at once.
        drop(ContenderGuard::node(&holder_fw, held.node().path()));
        holder_fw.close().await;
        assert_eq!(
            raw.check_stat(held.node().path()).await.unwrap(),
            None,
            "the dropped guard's persistent node outlived close()"
        );
        assert!(children(&raw, &path).await.is_empty());
    })
    .await
    .expect("test timed out");
}

#[tokio::test]
async fn cleaner_keeps_one_job_per_node() {
    let Some(server) = server() else { return };
    tokio::time::timeout(TEST_LIMIT, async {
        let path = unique_path("cleaner-dedup");
        let raw = raw_client(&server.connect_string()).await;
        let fw = framework(&server.connect_string()).await;
        let lock = persistent_lock(&fw, &path);
        let node = lock.acquire(Acquire::new()).await.unwrap().unwrap();
        // The same node handed over many times is deleted once.
        for _ in 0..1000 {
            fw.delete_in_background(node.node().path());
        }
        assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        assert_eq!(raw.check_stat(node.node().path()).await.unwrap(), None);
        assert_eq!(fw.metrics().background_deletes(), 1);
        assert_eq!(
            fw.metrics().background_delete_retries(),
            0,
            "a duplicate is not a retry"
        );
        assert_eq!(fw.state(), Some(ConnectionState::Connected));
        fw.close().await;
    })
    .await
    .expect("test timed out");
}
