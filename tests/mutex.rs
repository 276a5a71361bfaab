//! InterProcessMutex against a real ZooKeeper: Curator's base lock tests
//! (CURATOR-NOTES §17.1–17.2), cancellation, herd, fencing and bad input.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{
    bounded, children, eventually, framework, framework_with, notifications_delivered, raw_client,
    server, unique_path, wait_for_participants, BOUND, LONG_BOUND, PATIENCE,
};
use zk_curator::framework::lock_internals::{LockInternalsDriver, ParticipantNode};
use zk_curator::{
    Error, InterProcessLock, InterProcessMultiLock, InterProcessMutex, InterProcessReadWriteLock,
    InterProcessSemaphoreMutex, LockLoss,
};
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::{FaultProxy, Traffic};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_take_turns() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("two-clients");
        let (fa, fb) = (
            framework(&server.connect_string()).await,
            framework(&server.connect_string()).await,
        );
        let a = InterProcessMutex::new(fa.clone(), &path).unwrap();
        let b = InterProcessMutex::new(fb.clone(), &path).unwrap();

        a.acquire().await.unwrap();
        assert!(a.is_acquired_in_this_process());
        // The other session cannot get it while a holds it.
        assert!(!b.acquire_timeout(Duration::from_millis(500)).await.unwrap());
        assert!(!b.is_acquired_in_this_process());
        // Only a's node is left once b's timed-out attempt is cleaned up.
        let raw = raw_client(&server.connect_string()).await;
        wait_for_participants(&raw, &path, 1).await;

        let waiter = {
            let b = b.clone();
            tokio::spawn(async move {
                b.acquire().await.unwrap();
                b.release().await.unwrap();
            })
        };
        // b has queued (its node is listed) and still waits while a holds the lock.
        wait_for_participants(&raw, &path, 2).await;
        assert!(!waiter.is_finished(), "b must wait while a holds the lock");
        a.release().await.unwrap();
        tokio::time::timeout(PATIENCE, waiter)
            .await
            .unwrap()
            .unwrap();

        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &path).await.is_empty()
            })
            .await
        );
        fa.close().await;
        fb.close().await;
    })
    .await;
}

#[tokio::test]
async fn reentrant_on_one_task() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("reentrant");
        let fw = framework(&server.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let raw = raw_client(&server.connect_string()).await;

        for _ in 0..3 {
            mutex.acquire().await.unwrap();
        }
        assert!(mutex.is_owned_by_current_task());
        assert_eq!(
            children(&raw, &path).await.len(),
            1,
            "reentry creates no node"
        );
        let token = mutex.fencing_token().unwrap();
        for remaining in (0..3).rev() {
            mutex.release().await.unwrap();
            assert_eq!(mutex.is_owned_by_current_task(), remaining > 0);
            if remaining > 0 {
                assert_eq!(mutex.fencing_token(), Some(token));
                assert_eq!(children(&raw, &path).await.len(), 1, "still held");
            }
        }
        assert!(!mutex.is_acquired_in_this_process());
        assert!(children(&raw, &path).await.is_empty());
        assert_eq!(mutex.release().await, Err(Error::NotOwner));
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_with_a_second_task_waiting() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("reentrant-2");
        let fw = framework(&server.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();

        let (held_tx, held_rx) = tokio::sync::oneshot::channel();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        let holder = {
            let mutex = mutex.clone();
            tokio::spawn(async move {
                for _ in 0..3 {
                    mutex.acquire().await.unwrap();
                }
                held_tx.send(()).unwrap();
                go_rx.await.unwrap();
                for _ in 0..3 {
                    mutex.release().await.unwrap();
                }
            })
        };
        // The holder task holds it before the other task starts.
        held_rx.await.unwrap();
        let other = {
            let mutex = mutex.clone();
            tokio::spawn(async move {
                // A different task of the same instance is a different owner.
                assert!(!mutex.is_owned_by_current_task());
                assert_eq!(mutex.release().await, Err(Error::NotOwner));
                let got = mutex
                    .acquire_timeout(Duration::from_secs(10))
                    .await
                    .unwrap();
                assert!(got);
                mutex.release().await.unwrap();
            })
        };
        // The holder lets go only once the other task is seen waiting (in
        // this process's queue, or with a node of its own).
        let raw = raw_client(&server.connect_string()).await;
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &path).await.len() + fw.locally_queued(&path) == 2
            })
            .await,
            "the other task never waited"
        );
        assert!(
            !other.is_finished(),
            "the other task got in past the holder"
        );
        go_tx.send(()).unwrap();
        holder.await.unwrap();
        other.await.unwrap();
        assert!(!mutex.is_acquired_in_this_process());
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_tasks_share_one_instance_exclusively() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("ten-tasks");
        let fw = framework(&server.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let inside = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicUsize::new(0));

        let mut tasks = Vec::new();
        for _ in 0..10 {
            let (mutex, inside, done) = (mutex.clone(), inside.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                mutex.acquire().await.unwrap();
                assert!(
                    !inside.swap(true, Ordering::SeqCst),
                    "two tasks inside at once"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
                inside.store(false, Ordering::SeqCst);
                mutex.release().await.unwrap();
                done.fetch_add(1, Ordering::SeqCst);
            }));
        }
        for task in tasks {
            tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 10);
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn killed_session_lets_the_waiter_in() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("killed-session");
        let fw = framework(&server.connect_string()).await;
        let holder = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let waiter = InterProcessMutex::new(fw.clone(), &path).unwrap();

        let hold = holder.lock().await.unwrap();
        let waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move { waiter.lock().await })
        };
        // One framework: the waiter queues in-process, behind the holder's
        // turn, with no node of its own. The expiry must hand it the turn.
        let raw = raw_client(&server.connect_string()).await;
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&path) == 1 }).await);
        wait_for_participants(&raw, &path, 1).await;
        assert!(
            !waiting.is_finished(),
            "the waiter must wait while the holder holds it"
        );

        let client = fw.client().await.unwrap();
        zk_curator_testing::expire_session(&server.connect_string(), &client)
            .await
            .unwrap();
        let guard = tokio::time::timeout(PATIENCE, waiting)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(guard.is_valid());
        assert!(!hold.is_valid(), "the old hold died with its session");
        assert!(guard.fencing_token() > hold.fencing_token());
        guard.release().await.unwrap();
        drop(hold);
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn works_under_a_namespace() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let namespace = unique_path("namespace");
        let fw =
            common::framework_with(&server.connect_string(), |b| b.namespace(namespace.clone()))
                .await;
        let mutex = InterProcessMutex::new(fw.clone(), "/locks/ns").unwrap();
        let guard = mutex.lock().await.unwrap();
        let raw = raw_client(&server.connect_string()).await;
        let nodes = children(&raw, &format!("{namespace}/locks/ns")).await;
        assert_eq!(nodes.len(), 1, "the node lives under the namespace");
        assert_eq!(guard.node().path(), format!("/locks/ns/{}", nodes[0]));
        guard.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_parent_is_reaped_after_use() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let parent = unique_path("containers");
        let path = format!("{parent}/inner/lock");
        let fw = framework(&server.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let mut tasks = Vec::new();
        for _ in 0..10 {
            let mutex = mutex.clone();
            tasks.push(tokio::spawn(async move {
                mutex.acquire().await.unwrap();
                mutex.release().await.unwrap();
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let raw = raw_client(&server.connect_string()).await;
        // The server reaps empty containers every 100 ms in tests, level by level.
        let gone = eventually(PATIENCE, || async {
            raw.check_stat(&parent).await.unwrap().is_none()
        })
        .await;
        assert!(gone, "the container parents must be removed once empty");
        fw.close().await;
    })
    .await;
}

/// A driver whose nodes survive the session (Curator's testPersistentLock).
#[derive(Debug)]
struct PersistentDriver;

impl LockInternalsDriver for PersistentDriver {
    fn participant_node(&self) -> ParticipantNode {
        ParticipantNode::PersistentSequential
    }
}

#[tokio::test]
async fn persistent_driver_survives_session_expiry() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("persistent");
        let fw = framework(&server.connect_string()).await;
        let mutex =
            InterProcessMutex::with_driver(fw.clone(), &path, Arc::new(PersistentDriver)).unwrap();
        mutex.acquire().await.unwrap();
        let node = mutex.node().unwrap().path().to_owned();
        let raw = raw_client(&server.connect_string()).await;
        let stat = raw.check_stat(&node).await.unwrap().unwrap();
        assert_eq!(stat.ephemeral_owner, 0, "persistent node");

        let client = fw.client().await.unwrap();
        zk_curator_testing::expire_session(&server.connect_string(), &client)
            .await
            .unwrap();
        fw.block_until_connected(PATIENCE).await.unwrap();
        assert!(
            raw.check_stat(&node).await.unwrap().is_some(),
            "the node outlives its session"
        );

        mutex.release().await.unwrap();
        assert!(
            raw.check_stat(&node).await.unwrap().is_none(),
            "release deleted exactly our node"
        );
        assert!(children(&raw, &path).await.is_empty());
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn dropped_acquire_leaves_no_node() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("cancel");
        let fw = framework(&server.connect_string()).await;
        let holder = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let raw = raw_client(&server.connect_string()).await;
        let guard = holder.lock().await.unwrap();

        // Dropped while waiting, through select!, timeout and abort. Each is
        // dropped once it is seen waiting: queued behind the holder in this
        // process, or with a node of its own behind the holder's (after the
        // previous one has left both).
        let waiter = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let waiting = |count: usize| {
            let (raw, fw, path) = (&raw, &fw, &path);
            async move {
                eventually(PATIENCE, || async {
                    children(raw, path).await.len() + fw.locally_queued(path) == count
                })
                .await
            }
        };
        tokio::select! {
            _ = waiter.acquire() => panic!("must not get the lock"),
            seen = waiting(2) => assert!(seen, "the acquire never waited"),
        }
        assert!(waiting(1).await, "the dropped acquire stayed queued");
        let mut lock = Box::pin(waiter.lock());
        tokio::select! {
            _ = &mut lock => panic!("must not get the lock"),
            seen = waiting(2) => assert!(seen, "the guard's acquire never waited"),
        }
        // Still waiting: a timeout around it now drops it.
        assert!(tokio::time::timeout(Duration::ZERO, lock).await.is_err());
        assert!(waiting(1).await, "the dropped acquire stayed queued");
        let task = {
            let waiter = waiter.clone();
            tokio::spawn(async move { waiter.acquire().await })
        };
        assert!(waiting(2).await, "the task's acquire never waited");
        assert!(!task.is_finished(), "the acquire got in past the holder");
        task.abort();
        // Dropped before the first reply arrives (cancel right after sending).
        for _ in 0..5 {
            let fut = waiter.acquire();
            futures::pin_mut!(fut);
            assert!(futures::poll!(fut.as_mut()).is_pending());
        }
        assert!(!waiter.is_acquired_in_this_process());
        assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        let ours = guard.node().path().rsplit('/').next().unwrap().to_owned();
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &path).await == vec![ours.clone()]
            })
            .await,
            "only the holder's node remains: {:?}",
            children(&raw, &path).await
        );
        // The count of the waiter did not change: a release is refused.
        assert_eq!(waiter.release().await, Err(Error::NotOwner));
        guard.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_release_wakes_one_waiter() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let path = unique_path("herd");
        let connect = server.connect_string();
        let holder_fw = framework(&connect).await;
        let holder = InterProcessMutex::new(holder_fw.clone(), &path).unwrap();
        let first = holder.lock().await.unwrap();

        const WAITERS: usize = 10;
        let mut frameworks = Vec::new();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for i in 0..WAITERS {
            let fw = framework(&connect).await;
            frameworks.push(fw.clone());
            let mutex = InterProcessMutex::new(fw, &path).unwrap();
            let tx = tx.clone();
            let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
            tasks.push(tokio::spawn(async move {
                let guard = mutex.lock().await.unwrap();
                tx.send((i, release_tx)).unwrap();
                let _ = release_rx.await;
                guard.release().await.unwrap();
            }));
            // Queue them in a known order.
            let raw = raw_client(&connect).await;
            wait_for_participants(&raw, &path, i + 2).await;
        }
        let wakeups = |fws: &[zk_curator::Framework]| {
            fws.iter().map(|f| f.metrics().lock_wakeups()).sum::<u64>()
        };
        assert_eq!(wakeups(&frameworks), 0);
        first.release().await.unwrap();
        for n in 1..=WAITERS as u64 {
            let (i, release) = tokio::time::timeout(PATIENCE, rx.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(i as u64, n - 1, "waiters are served in arrival order");
            // Every session has read past the release that let waiter n-1
            // in, so any herd notification it caused has arrived (see
            // `notifications_delivered`) before the wake-ups are counted.
            notifications_delivered(&frameworks, &path).await;
            assert_eq!(
                wakeups(&frameworks),
                n,
                "each release wakes exactly one waiter"
            );
            release.send(()).unwrap();
        }
        for task in tasks {
            task.await.unwrap();
        }
        for fw in frameworks {
            fw.close().await;
        }
        holder_fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn fencing_tokens_increase_for_successive_holders() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("fencing");
        let (fa, fb) = (
            framework(&server.connect_string()).await,
            framework(&server.connect_string()).await,
        );
        let a = InterProcessMutex::new(fa.clone(), &path).unwrap();
        let b = InterProcessMutex::new(fb.clone(), &path).unwrap();
        let mut last = zk_curator::FencingToken::new(0);
        for round in 0..6 {
            let mutex = if round % 2 == 0 { &a } else { &b };
            let guard = mutex.lock().await.unwrap();
            assert!(
                guard.fencing_token() > last,
                "token {} after {last}",
                guard.fencing_token()
            );
            last = guard.fencing_token();
            guard.release().await.unwrap();
        }
        fa.close().await;
        fb.close().await;
    })
    .await;
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_sent() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let fw = framework(&server.connect_string()).await;
        for bad in [
            "",
            "relative/path",
            "/",
            "/trailing/",
            "/double//slash",
            "/dot/./x",
            "/dotdot/../x",
            "/nul\0char",
            "/zookeeper",
            "/zookeeper/quota/x",
        ] {
            let err = InterProcessMutex::new(fw.clone(), bad).unwrap_err();
            assert!(matches!(err, Error::InvalidPath(_)), "{bad:?} gave {err:?}");
        }
        let oversized = format!("/{}", "x".repeat(5000));
        assert!(matches!(
            InterProcessMutex::new(fw.clone(), &oversized),
            Err(Error::InvalidPath(_))
        ));

        // Release by a non-owner changes nothing.
        let path = unique_path("bad-input");
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        assert_eq!(mutex.release().await, Err(Error::NotOwner));
        let guard = mutex.lock().await.unwrap();
        assert_eq!(
            mutex.release().await,
            Err(Error::NotOwner),
            "a guard is not a task hold"
        );
        guard.release().await.unwrap();

        // Acquire after close is a typed error, and nothing is created.
        fw.close().await;
        assert_eq!(mutex.acquire().await, Err(Error::Closed));
        assert!(matches!(mutex.lock().await, Err(Error::Closed)));
        let raw = raw_client(&server.connect_string()).await;
        assert!(children(&raw, &path).await.is_empty());

        // A framework that was never started refuses too.
        let latent = zk_curator::Framework::builder()
            .connect_string(server.connect_string())
            .build()
            .unwrap();
        let mutex = InterProcessMutex::new(latent, &path).unwrap();
        assert_eq!(
            mutex.acquire_timeout(Duration::from_secs(1)).await,
            Err(Error::NotStarted)
        );
    })
    .await;
}

#[tokio::test]
async fn locks_are_usable_as_trait_objects() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let fw = framework(&server.connect_string()).await;
        let path = unique_path("dyn");
        let lock: Box<dyn InterProcessLock> =
            Box::new(InterProcessMutex::new(fw.clone(), &path).unwrap());
        assert!(lock.acquire_timeout(Duration::from_secs(5)).await.unwrap());
        assert_eq!(lock.participant_nodes().await.unwrap().len(), 1);
        assert!(lock.is_acquired_in_this_process());
        lock.release().await.unwrap();
        assert!(lock.participant_nodes().await.unwrap().is_empty());
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn dropped_release_and_dropped_guard_still_delete_the_node() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("drop-release");
        let fw = framework(&server.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();

        // A release future polled once, then dropped.
        mutex.acquire().await.unwrap();
        {
            let fut = mutex.release();
            futures::pin_mut!(fut);
            let _ = futures::poll!(fut.as_mut());
        }
        assert!(
            !mutex.is_owned_by_current_task(),
            "the count changed at the first poll"
        );
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &path).await.is_empty()
            })
            .await
        );

        // A guard dropped without release().
        let guard = mutex.lock().await.unwrap();
        assert_eq!(children(&raw, &path).await.len(), 1);
        drop(guard);
        assert!(!mutex.is_acquired_in_this_process());
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &path).await.is_empty()
            })
            .await
        );
        assert!(fw.metrics().background_deletes() >= 1);

        // And the lock is free for others at once.
        let other_fw = framework(&server.connect_string()).await;
        let other = InterProcessMutex::new(other_fw.clone(), &path).unwrap();
        assert!(other.acquire_timeout(Duration::from_secs(5)).await.unwrap());
        other.release().await.unwrap();
        other_fw.close().await;
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn lock_internals_refuse_bad_names_and_oversized_data() {
    use zk_curator::framework::lock_internals::{
        Acquire, LockInternals, StandardLockInternalsDriver,
    };
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let fw = framework(&server.connect_string()).await;
        let path = unique_path("internals");
        let driver = Arc::new(StandardLockInternalsDriver);
        // (An empty name is a layout's prefix alone: kazoo's semaphore leases.)
        for name in ["a/b", ".", ".."] {
            let err = LockInternals::new(fw.clone(), &path, name, 1, driver.clone()).unwrap_err();
            assert!(matches!(err, Error::InvalidPath(_)), "{name:?}: {err:?}");
        }
        let long_name = "n".repeat(300);
        assert!(matches!(
            LockInternals::new(fw.clone(), &path, &long_name, 1, driver.clone()),
            Err(Error::InvalidPath(_))
        ));
        assert!(matches!(
            LockInternals::new(fw.clone(), &path, "lock-", 0, driver.clone()),
            Err(Error::InvalidArgument(_))
        ));

        let internals = LockInternals::new(fw.clone(), &path, "lock-", 1, driver).unwrap();
        // The largest data whose create fits the packet limit, found
        // without I/O; one byte more is refused.
        let fits = |n: usize| internals.check_node_data(&vec![0u8; n]).is_ok();
        let low = common::largest_fitting(zk_curator::framework::DEFAULT_MAX_PACKET_SIZE, fits);
        let too_big = vec![0u8; low + 1];
        assert!(matches!(
            internals.acquire(Acquire::new().data(&too_big)).await,
            Err(Error::RequestTooLarge { size, limit }) if size > limit
        ));
        let raw = raw_client(&server.connect_string()).await;
        assert!(
            raw.check_stat(&path).await.unwrap().is_none(),
            "nothing was sent"
        );

        // The largest data that fits is accepted by the server.
        let largest = internals
            .acquire(Acquire::new().data(&vec![7u8; low]))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            raw.get_data(largest.node().path()).await.unwrap().0.len(),
            low
        );
        internals.release(&largest).await.unwrap();

        // Data within the limit is stored in the node.
        let node = internals
            .acquire(Acquire::new().data(b"owner=test"))
            .await
            .unwrap()
            .unwrap();
        let (data, _) = raw.get_data(node.node().path()).await.unwrap();
        assert_eq!(data, b"owner=test");
        internals.release(&node).await.unwrap();
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_node_is_deleted_starts_over() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("node-deleted");
        let fw = framework(&server.connect_string()).await;
        let other_fw = framework(&server.connect_string()).await;
        let holder = InterProcessMutex::new(other_fw.clone(), &path)
            .unwrap()
            .lock()
            .await
            .unwrap();
        let waiter = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move { waiter.lock().await })
        };
        let raw = raw_client(&server.connect_string()).await;
        wait_for_participants(&raw, &path, 2).await;
        let mut nodes = children(&raw, &path).await;
        nodes.retain(|n| !holder.node().path().ends_with(n.as_str()));
        // Someone deletes the waiter's node. The waiter notices when it is next
        // woken (the holder's release) and queues again instead of failing.
        raw.delete(&format!("{path}/{}", nodes[0]), None)
            .await
            .unwrap();
        holder.release().await.unwrap();
        let guard = tokio::time::timeout(PATIENCE, waiting)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(
            !guard.node().path().ends_with(nodes[0].as_str()),
            "a new node"
        );
        guard.release().await.unwrap();
        fw.close().await;
        other_fw.close().await;
    })
    .await;
}

/// A driver that refuses every participant.
#[derive(Debug)]
struct Refusing;

impl LockInternalsDriver for Refusing {
    fn gets_the_lock(
        &self,
        _sorted_children: &[String],
        _our_name: &str,
        _max_leases: u32,
    ) -> zk_curator::Result<zk_curator::framework::lock_internals::PredicateResults> {
        Err(Error::lock_lost("refused by the driver", LockLoss::NotHeld))
    }
}

#[tokio::test]
async fn a_driver_refusal_ends_the_acquire_at_once() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("refusing");
        let fw = framework(&server.connect_string()).await;
        let mutex = InterProcessMutex::with_driver(fw.clone(), &path, Arc::new(Refusing)).unwrap();
        let started = std::time::Instant::now();
        let err = mutex.acquire().await.unwrap_err();
        assert_eq!(
            err,
            Error::lock_lost("refused by the driver", LockLoss::NotHeld)
        );
        // Not restarted under the retry policy (which would take many seconds).
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        let raw = raw_client(&server.connect_string()).await;
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &path).await.is_empty()
            })
            .await
        );
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_lease_internals_wake_a_waiter_on_any_release() {
    use zk_curator::framework::lock_internals::{
        Acquire, LockInternals, StandardLockInternalsDriver,
    };
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("two-leases");
        // One node per acquire, so that the rule among nodes is what is tested.
        let fw = framework_with(&server.connect_string(), |b| b.local_queue(false)).await;
        let lock = LockInternals::new(
            fw.clone(),
            &path,
            "lease-",
            2,
            Arc::new(StandardLockInternalsDriver),
        )
        .unwrap();
        let first = lock.acquire(Acquire::new()).await.unwrap().unwrap();
        let second = lock.acquire(Acquire::new()).await.unwrap().unwrap();
        let waiting = {
            let lock = lock.clone();
            tokio::spawn(async move { lock.acquire(Acquire::new()).await })
        };
        let raw = raw_client(&server.connect_string()).await;
        wait_for_participants(&raw, &path, 3).await;
        // The second holder leaves first: the waiter must get its slot, although
        // the node two places ahead of it (the first holder) is still there.
        lock.release(&second).await.unwrap();
        let third = tokio::time::timeout(PATIENCE, waiting)
            .await
            .unwrap()
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(lock.participant_nodes().await.unwrap().len(), 2);
        lock.release(&first).await.unwrap();
        lock.release(&third).await.unwrap();
        fw.close().await;
    })
    .await;
}

/// Every protected participant node (`_c_` in the name) anywhere under
/// `root`.
async fn participants_under(raw: &zookeeper_client::Client, root: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![root.to_owned()];
    while let Some(path) = todo.pop() {
        for child in children(raw, &path).await {
            let full = format!("{path}/{child}");
            if child.starts_with("_c_") {
                found.push(full.clone());
            }
            todo.push(full);
        }
    }
    found
}

/// A try dropped while its first request is on the wire (the proxy holds
/// the replies back) leaves no node and no hold behind, on every lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_dropped_mid_way_leaves_nothing() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework(&proxy.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;
        let root = unique_path("try-dropped");
        let rw = InterProcessReadWriteLock::new(fw.clone(), &format!("{root}/rw")).unwrap();
        let multi_members: Vec<Arc<dyn InterProcessLock>> = vec![
            Arc::new(InterProcessMutex::new(fw.clone(), &format!("{root}/multi-a")).unwrap()),
            Arc::new(InterProcessMutex::new(fw.clone(), &format!("{root}/multi-b")).unwrap()),
        ];
        let locks: Vec<(&str, Box<dyn InterProcessLock>)> = vec![
            (
                "mutex",
                Box::new(InterProcessMutex::new(fw.clone(), &format!("{root}/mutex")).unwrap()),
            ),
            ("read half", Box::new(rw.read_lock())),
            ("write half", Box::new(rw.write_lock())),
            (
                "semaphore mutex",
                Box::new(
                    InterProcessSemaphoreMutex::new(fw.clone(), &format!("{root}/sem")).unwrap(),
                ),
            ),
            (
                "multi-lock",
                Box::new(InterProcessMultiLock::new(multi_members).unwrap()),
            ),
        ];
        let creates_sent = |proxy: &FaultProxy| {
            proxy.traffic().iter().any(|t| {
                // A create, or the multi that makes the lock path with it.
                matches!(t, Traffic::Request { opcode, .. } if opcode::CREATES.contains(opcode) || *opcode == opcode::MULTI)
            })
        };
        for (name, lock) in &locks {
            // A first try and release create the parents.
            assert!(lock.try_acquire().await.unwrap(), "{name}");
            lock.release().await.unwrap();
            assert!(participants_under(&raw, &root).await.is_empty(), "{name}");

            proxy.clear_traffic();
            proxy.hold_replies(true);
            let mut attempt = lock.try_acquire();
            tokio::select! {
                done = &mut attempt => panic!("{name}: the try ended with every reply held: {done:?}"),
                sent = eventually(PATIENCE, || async { creates_sent(&proxy) }) => {
                    assert!(sent, "{name}: the try never sent its create");
                }
            }
            drop(attempt);
            proxy.hold_replies(false);

            assert!(fw.wait_for_background_cleanup(PATIENCE).await, "{name}");
            assert!(
                eventually(PATIENCE, || async {
                    participants_under(&raw, &root).await.is_empty()
                })
                .await,
                "{name}: left behind {:?}",
                participants_under(&raw, &root).await
            );
            assert!(!lock.is_acquired_in_this_process(), "{name}");
            // Nothing is held or counted: the lock is free again.
            assert!(lock.try_acquire().await.unwrap(), "{name}");
            lock.release().await.unwrap();
        }
        fw.close().await;
    })
    .await;
}
