//! The read node shared by the readers of one process, end to end: the
//! rules of the lock engine's shared nodes (unit-tested against a stand-in
//! in `framework/src/lock_internals/shared_node/tests.rs`) through the
//! production wiring, on a server (the embedded one, or a real ZooKeeper with
//! `ZK_TEST_SERVER=real`), with a writer of another process (another
//! `Framework`) as the witness:
//!
//! * readers that waited together share one node, and the writer stays out
//!   until the *last* of them releases;
//! * the node goes once the last member leaves, however it leaves (released,
//!   cancelled while waiting, its guard dropped, or dropped between the grant
//!   and taking its share);
//! * a member that comes for its share after the grant was lost gets no hold
//!   (neither the first, which finds the generation's own hold, nor a later
//!   one), waits on a node of its own instead, and the lost node still goes.
//!
//! Every wait is for something observable: a node among the children, the
//! in-process queue's count, a state change. Where a member must be held
//! back while the grant arrives, its acquire future is polled by hand.
#![allow(clippy::unwrap_used)]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;

use common::{
    bounded, children, eventually, framework, framework_with, name, raw_client, read_nodes, server,
    unique_path, wait_for_participants, BOUND, PATIENCE,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use zk_curator::{
    ConnectionState, Framework, InterProcessReadWriteLock, ReadGuard, Result, WriteGuard,
};
use zk_curator_testing::FaultProxy;

/// An acquire of a read lock, polled by hand.
type Pending = Pin<Box<dyn Future<Output = Result<ReadGuard>> + Send>>;

/// A writer of another process: holds the write lock at `path` on `other`.
async fn write_lock(other: &Framework, path: &str) -> WriteGuard {
    let lock = InterProcessReadWriteLock::new(other.clone(), path).unwrap();
    tokio::time::timeout(PATIENCE, lock.write_lock().lock())
        .await
        .expect("the writer gets in")
        .unwrap()
}

/// A read acquire on `rw`, not yet polled.
fn pending_read(rw: &InterProcessReadWriteLock) -> Pending {
    let read = rw.read_lock();
    Box::pin(async move { read.lock().await })
}

/// Polls `acquire` (without letting it finish) until `reached` holds.
async fn poll_until<F, Fut>(acquire: &mut Pending, what: &str, mut reached: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        assert!(
            futures::poll!(acquire.as_mut()).is_pending(),
            "the reader finished before {what}"
        );
        if reached().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} never happened within {PATIENCE:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// This binary's metrics recorder (installed once, for every test).
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().unwrap();
        snapshotter
    })
}

/// How many holds of the lock at `path` were found lost so far.
fn losses(path: &str) -> u64 {
    snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| {
            key.key().name() == "zk_curator_losses_total"
                && key
                    .key()
                    .labels()
                    .any(|l| l.key() == "path" && l.value() == path)
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum()
}

/// Readers that waited together share one node (with its data and token),
/// and a writer of another process stays out until the last of them
/// releases; that release deletes the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_waits_for_the_last_reader_of_a_shared_node() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let (fw, other, raw) = (
            framework(&connect).await,
            framework(&connect).await,
            raw_client(&connect).await,
        );
        let path = unique_path("shared-last-reader");
        let first_writer = write_lock(&other, &path).await;

        const READERS: usize = 3;
        let rw = InterProcessReadWriteLock::with_data(fw.clone(), &path, b"reader").unwrap();
        let readers: Vec<_> = (0..READERS)
            .map(|_| {
                let read = rw.read_lock();
                tokio::spawn(async move { read.lock().await.unwrap() })
            })
            .collect();
        assert!(
            eventually(PATIENCE, || async {
                fw.locally_queued(&path) == READERS - 1
            })
            .await,
            "the readers did not wait together: {} queued",
            fw.locally_queued(&path)
        );
        let queued = wait_for_participants(&raw, &path, 2).await;
        let shared = read_nodes(&queued);
        assert_eq!(shared.len(), 1, "{queued:?}");
        let (data, _) = raw
            .get_data(&format!("{path}/{}", shared[0]))
            .await
            .unwrap();
        assert_eq!(data, b"reader", "the shared node carries the readers' data");

        first_writer.release().await.unwrap();
        let mut guards = Vec::new();
        for reader in readers {
            guards.push(
                tokio::time::timeout(PATIENCE, reader)
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        for guard in &guards {
            assert_eq!(name(guard.node().path()), shared[0], "one node for all");
            assert_eq!(guard.fencing_token(), guards[0].fencing_token());
            assert!(guard.is_valid());
        }

        // A writer of another process queues behind the shared node.
        let writer = {
            let lock = InterProcessReadWriteLock::new(other.clone(), &path).unwrap();
            tokio::spawn(async move { lock.write_lock().lock().await.unwrap() })
        };
        let queued = wait_for_participants(&raw, &path, 2).await;
        assert!(queued.contains(&shared[0]), "{queued:?}");

        // Every release but the last leaves the node where it is: the
        // writer, watching it, cannot have got in.
        let last = guards.pop().unwrap();
        for guard in guards {
            guard.release().await.unwrap();
            let now = children(&raw, &path).await;
            assert!(
                now.contains(&shared[0]),
                "a release that was not the last deleted the shared node: {now:?}"
            );
            assert!(!writer.is_finished(), "the writer got in beside a reader");
            assert!(last.is_valid());
        }
        let read_token = last.fencing_token();
        last.release().await.unwrap();
        let writer = tokio::time::timeout(PATIENCE, writer)
            .await
            .expect("the writer gets in once the last reader left")
            .unwrap();
        assert!(!children(&raw, &path).await.contains(&shared[0]));
        assert!(writer.fencing_token() > read_token);
        writer.release().await.unwrap();
        fw.close().await;
        other.close().await;
    })
    .await;
}

/// Readers cancelled while they wait: the node stays while one of them
/// still waits, and goes with the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_cancelled_waiter_takes_the_node_along() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let (fw, other, raw) = (
            framework(&connect).await,
            framework(&connect).await,
            raw_client(&connect).await,
        );
        let path = unique_path("shared-cancelled");
        let writer = write_lock(&other, &path).await;
        let rw = InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();
        let spawn_reader = || {
            let read = rw.read_lock();
            tokio::spawn(async move { read.lock().await })
        };
        let (a, b) = (spawn_reader(), spawn_reader());
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&path) == 1 }).await);
        let queued = wait_for_participants(&raw, &path, 2).await;
        assert_eq!(read_nodes(&queued).len(), 1);

        a.abort();
        assert!(a.await.unwrap_err().is_cancelled());
        assert_eq!(fw.locally_queued(&path), 0);
        assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        assert_eq!(
            children(&raw, &path).await,
            queued,
            "one waiter is left: it still needs the node"
        );
        b.abort();
        assert!(b.await.unwrap_err().is_cancelled());
        wait_for_participants(&raw, &path, 1).await;

        writer.release().await.unwrap();
        wait_for_participants(&raw, &path, 0).await;
        fw.close().await;
        other.close().await;
    })
    .await;
}

/// Readers whose guards are dropped without a release: the node goes with
/// the last drop (in the background), not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_dropped_share_takes_the_node_along() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let (fw, other, raw) = (
            framework(&connect).await,
            framework(&connect).await,
            raw_client(&connect).await,
        );
        let path = unique_path("shared-dropped");
        let first_writer = write_lock(&other, &path).await;
        let rw = InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let read = rw.read_lock();
                tokio::spawn(async move { read.lock().await.unwrap() })
            })
            .collect();
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&path) == 1 }).await);
        first_writer.release().await.unwrap();
        let mut guards = Vec::new();
        for reader in readers {
            guards.push(
                tokio::time::timeout(PATIENCE, reader)
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        let shared = name(guards[0].node().path());
        assert_eq!(name(guards[1].node().path()), shared);

        drop(guards.pop());
        assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        let now = children(&raw, &path).await;
        assert_eq!(now, vec![shared.clone()], "the first drop deleted the node");
        assert!(guards[0].is_valid());
        let lock = InterProcessReadWriteLock::new(other.clone(), &path).unwrap();
        assert!(lock.write_lock().try_lock().await.unwrap().is_none());

        drop(guards.pop());
        wait_for_participants(&raw, &path, 0).await;
        write_lock(&other, &path).await.release().await.unwrap();
        fw.close().await;
        other.close().await;
    })
    .await;
}

/// Members dropped after their node was granted but before they came for
/// their shares: nobody holds it, and the last of them deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_dropped_before_taking_their_shares_leave_no_node() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let (fw, other, raw) = (
            framework(&connect).await,
            framework(&connect).await,
            raw_client(&connect).await,
        );
        let path = unique_path("shared-unclaimed");
        let writer = write_lock(&other, &path).await;
        let rw = InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();
        let (mut a, mut b) = (pending_read(&rw), pending_read(&rw));
        poll_until(&mut a, "the first reader's node was listed", || async {
            read_nodes(&children(&raw, &path).await).len() == 1
        })
        .await;
        poll_until(&mut b, "the second reader joined the first", || async {
            fw.locally_queued(&path) == 1
        })
        .await;

        // The node is granted (its generation leaves the in-process queue),
        // while neither member is polled to take its share.
        writer.release().await.unwrap();
        assert!(
            eventually(PATIENCE, || async { fw.locally_queued(&path) == 0 }).await,
            "the shared node was never granted"
        );
        drop(a);
        assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        assert_eq!(
            read_nodes(&children(&raw, &path).await).len(),
            1,
            "a member is left: the node stays"
        );
        drop(b);
        wait_for_participants(&raw, &path, 0).await;
        write_lock(&other, &path).await.release().await.unwrap();
        fw.close().await;
        other.close().await;
    })
    .await;
}

/// The grant of a shared node is lost (the connection broke: `Suspended`,
/// same session) before its members come for their shares. Neither the first
/// member (which finds the generation's own hold) nor the second gets a
/// hold of it; each waits on a node of its own on the session, the lost node
/// still goes with the last member, and only the generation's own hold is
/// ever counted as lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_of_a_lost_grant_get_no_hold() {
    let Some(server) = server() else { return };
    let _ = snapshotter();
    bounded(BOUND, async move {
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework_with(&proxy.connect_string(), |b| {
            b.session_timeout(std::time::Duration::from_secs(20))
        })
        .await;
        let connect = server.connect_string();
        let (other, raw) = (framework(&connect).await, raw_client(&connect).await);
        let path = unique_path("shared-lost-grant");
        let writer = write_lock(&other, &path).await;
        let rw = InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();
        let (mut a, mut b) = (pending_read(&rw), pending_read(&rw));
        poll_until(&mut a, "the first reader's node was listed", || async {
            read_nodes(&children(&raw, &path).await).len() == 1
        })
        .await;
        poll_until(&mut b, "the second reader joined the first", || async {
            fw.locally_queued(&path) == 1
        })
        .await;
        let lost_node = read_nodes(&children(&raw, &path).await).remove(0);

        writer.release().await.unwrap();
        assert!(
            eventually(PATIENCE, || async { fw.locally_queued(&path) == 0 }).await,
            "the shared node was never granted"
        );
        // The connection breaks and comes back on the same session: every
        // hold granted before is lost, the node itself stays.
        let epoch = fw.loss_epoch();
        let mut states = fw.state_watcher();
        proxy.drop_connections();
        tokio::time::timeout(
            PATIENCE,
            states.wait_for(|s| s == Some(ConnectionState::Reconnected)),
        )
        .await
        .expect("the framework reconnects")
        .unwrap();
        assert!(fw.loss_epoch() > epoch);
        assert!(children(&raw, &path).await.contains(&lost_node));

        let a = tokio::time::timeout(PATIENCE, a).await.unwrap().unwrap();
        assert!(a.is_valid(), "the first member got the lost grant's hold");
        assert_ne!(name(a.node().path()), lost_node);
        let b = tokio::time::timeout(PATIENCE, b).await.unwrap().unwrap();
        assert!(b.is_valid(), "the second member got the lost grant's hold");
        assert_ne!(name(b.node().path()), lost_node);

        // The lost node went with its last member.
        assert!(
            eventually(PATIENCE, || async {
                !children(&raw, &path).await.contains(&lost_node)
            })
            .await,
            "the lost grant's node stayed: {:?}",
            children(&raw, &path).await
        );
        assert_eq!(
            losses(&path),
            1,
            "a hold other than the generation's own was made of the lost grant"
        );
        a.release().await.unwrap();
        b.release().await.unwrap();
        wait_for_participants(&raw, &path, 0).await;
        write_lock(&other, &path).await.release().await.unwrap();
        fw.close().await;
        other.close().await;
    })
    .await;
}
