//! Recipes whose nodes do not see each other never share a path: a latch
//! beside a selector or a mutex, a read-write lock beside a mutex, a
//! semaphore beside a mutex. Whichever comes second fails at once with
//! [`Error::LayoutConflict`], naming what it found, and leaves nothing
//! behind; the first keeps what it has. (kazoo's layouts beside Curator's:
//! tests/kazoo_interop.rs.)
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{bounded, children, framework, raw_client, server, unique_path, LONG_BOUND};
use zk_curator::recipes::layout::Family;
use zk_curator::{
    Error, Framework, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2,
    LeaderElection, LeaderLatch, LeaderSelector, LeaderTerm,
};

/// A refusal takes a round trip and a delete: far below this on loopback.
const AT_ONCE: Duration = Duration::from_secs(2);

/// Asserts that `refused`, which took `took`, is the conflict with
/// `theirs`, met at once.
fn assert_refused<T: std::fmt::Debug>(
    refused: zk_curator::Result<T>,
    theirs: Family,
    took: Duration,
) {
    match refused {
        Err(Error::LayoutConflict {
            theirs: found, fix, ..
        }) => {
            assert_eq!(found, theirs);
            assert!(fix.contains("recipe"), "{fix}");
        }
        other => panic!("expected a conflict with {theirs:?}, got {other:?}"),
    }
    assert!(took < AT_ONCE, "the refusal took {took:?}");
}

/// A latch started on `path` that must never lead: its wait for leadership
/// ends at once with the conflict.
async fn latch_refused(fw: &Framework, path: &str, theirs: Family) {
    let latch = LeaderLatch::new(fw.clone(), path, "latch").unwrap();
    latch.start().unwrap();
    let started = Instant::now();
    let led = latch.await_leadership().await;
    assert_refused(led, theirs, started.elapsed());
    latch.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_and_a_selector_or_a_mutex_never_share_a_path() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let (fw, raw) = (framework(&connect).await, raw_client(&connect).await);

        // A selector leads; a latch beside it is refused.
        let path = unique_path("latch-beside-selector");
        let (led_tx, mut led_rx) = tokio::sync::mpsc::unbounded_channel();
        let selector =
            LeaderSelector::with_id(fw.clone(), &path, "selector", move |term: LeaderTerm| {
                let led_tx = led_tx.clone();
                async move {
                    led_tx.send(()).ok();
                    term.lost().await;
                }
            })
            .unwrap();
        selector.start().unwrap();
        led_rx.recv().await.unwrap();
        let before = children(&raw, &path).await;
        latch_refused(&fw, &path, Family::CuratorLock).await;
        assert_eq!(children(&raw, &path).await, before, "the latch left a node");
        // And a mutex takes a selector's queue for its own (Curator's
        // selector is a mutex): it waits rather than fail.
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        assert!(!mutex
            .acquire_timeout(Duration::from_millis(200))
            .await
            .unwrap());
        selector.close().await.unwrap();

        // A latch leads; a selector and a mutex beside it are refused.
        let path = unique_path("mutex-beside-latch");
        let latch = LeaderLatch::new(fw.clone(), &path, "leader").unwrap();
        latch.start().unwrap();
        let term = latch.await_leadership().await.unwrap();
        let before = children(&raw, &path).await;
        let started = Instant::now();
        let refused = InterProcessMutex::new(fw.clone(), &path)
            .unwrap()
            .acquire()
            .await;
        assert_refused(refused, Family::CuratorLatch, started.elapsed());
        let selector =
            LeaderSelector::with_id(fw.clone(), &path, "late", |term: LeaderTerm| async move {
                term.lost().await;
            })
            .unwrap();
        selector.start().unwrap();
        let started = Instant::now();
        let led = selector.await_leadership().await;
        assert_refused(led, Family::CuratorLatch, started.elapsed());
        selector.close().await.unwrap();
        assert_eq!(
            children(&raw, &path).await,
            before,
            "something was left behind"
        );
        assert!(term.is_valid(), "the latch's term ended");
        latch.close().await.unwrap();
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_and_a_mutex_never_share_a_path() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let (fw, raw) = (framework(&connect).await, raw_client(&connect).await);
        let path = unique_path("rw-beside-mutex");
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let held = mutex.lock().await.unwrap();
        let before = children(&raw, &path).await;
        let rw = InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();
        let started = Instant::now();
        assert_refused(
            rw.read_lock().lock().await,
            Family::CuratorLock,
            started.elapsed(),
        );
        let started = Instant::now();
        assert_refused(
            rw.write_lock().lock().await,
            Family::CuratorLock,
            started.elapsed(),
        );
        assert_eq!(
            children(&raw, &path).await,
            before,
            "something was left behind"
        );
        held.release().await.unwrap();

        let path = unique_path("mutex-beside-rw");
        let rw = InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();
        let read = rw.read_lock().lock().await.unwrap();
        let before = children(&raw, &path).await;
        let started = Instant::now();
        let refused = InterProcessMutex::new(fw.clone(), &path)
            .unwrap()
            .acquire()
            .await;
        assert_refused(refused, Family::CuratorReadWrite, started.elapsed());
        assert_eq!(
            children(&raw, &path).await,
            before,
            "something was left behind"
        );
        read.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_and_a_mutex_never_share_a_path() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let (fw, raw) = (framework(&connect).await, raw_client(&connect).await);

        // A mutex holds; a semaphore on its path is refused.
        let path = unique_path("semaphore-beside-mutex");
        let held = InterProcessMutex::new(fw.clone(), &path)
            .unwrap()
            .lock()
            .await
            .unwrap();
        let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, 2).unwrap();
        let started = Instant::now();
        let refused = semaphore.acquire().await;
        assert_refused(refused, Family::CuratorLock, started.elapsed());
        for dir in ["locks", "leases"] {
            let left = children(&raw, &format!("{path}/{dir}")).await;
            assert!(left.is_empty(), "{dir}: {left:?}");
        }
        held.release().await.unwrap();

        // A semaphore holds a lease; a mutex on its path is refused.
        let path = unique_path("mutex-beside-semaphore");
        let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, 2).unwrap();
        let lease = semaphore.acquire().await.unwrap();
        let leases = format!("{path}/leases");
        let (before, leases_before) = (children(&raw, &path).await, children(&raw, &leases).await);
        let started = Instant::now();
        let refused = InterProcessMutex::new(fw.clone(), &path)
            .unwrap()
            .acquire()
            .await;
        assert_refused(refused, Family::CuratorSemaphore, started.elapsed());
        // The semaphore's internal mutex was released once the lease was
        // taken, leaving `locks` an empty container, which a real ZooKeeper
        // may reap at any moment: the path may lose that child but must
        // gain none, and the lease must stay.
        let after = children(&raw, &path).await;
        let added: Vec<_> = after.iter().filter(|c| !before.contains(c)).collect();
        assert!(added.is_empty(), "something was left behind: {added:?}");
        assert!(children(&raw, &format!("{path}/locks")).await.is_empty());
        assert_eq!(
            children(&raw, &leases).await,
            leases_before,
            "the lease moved"
        );
        assert!(lease.is_valid());
        lease.release().await.unwrap();
        fw.close().await;
    })
    .await;
}
