//! Safety at the edges of the lock API: a release caught in flight by the
//! loss of its hold, writes over ZooKeeper's packet limit, and a task that
//! asks for a lock it already holds through a guard.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{
    bounded, children, deletes_sent, eventually, framework_with, largest_fitting, raw_client,
    requests_with, server, unique_path, BOUND, PATIENCE,
};
use zk_curator::{ConnectionState, Error, InterProcessMutex, LockLoss};
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::FaultProxy;

/// A release whose delete is on the wire when the link goes dark returns as
/// soon as the hold is known lost (the framework is `Suspended`), with the
/// same answer as a release begun after the loss, not once the session is
/// declared `Lost`; the node goes with the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_in_flight_returns_once_its_hold_is_lost() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        // A long session: `Lost` comes 8 s after `Suspended` at the
        // earliest, well apart from the prompt answer asked for here.
        let framework = framework_with(&proxy.connect_string(), |b| {
            b.session_timeout(Duration::from_secs(8))
                .connection_timeout(Duration::from_secs(30))
        })
        .await;
        let raw = raw_client(&server.connect_string()).await;
        let path = unique_path("release-in-flight");
        let mutex = InterProcessMutex::new(framework.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        let mut states = framework.state_watcher();

        proxy.clear_traffic();
        proxy.hold_replies(true);
        let release = tokio::spawn(guard.release());
        assert!(
            eventually(PATIENCE, || async { deletes_sent(&proxy) > 0 }).await,
            "the release never sent its delete"
        );
        // The delete's answer never comes: the link goes dark.
        proxy.blackhole(true);
        let suspended = tokio::time::timeout(
            PATIENCE,
            states.wait_for(|s| s == Some(ConnectionState::Suspended)),
        )
        .await;
        assert!(
            suspended.is_ok(),
            "the framework never saw the link go dark"
        );
        let seen = Instant::now();
        let released = tokio::time::timeout(Duration::from_secs(3), release)
            .await
            .map_err(|_| "the release was still waiting 3 s after the hold was lost");
        let took = seen.elapsed();
        let released = released.unwrap().unwrap();
        assert!(
            matches!(
                released,
                Err(Error::LockLost {
                    reason: LockLoss::ConnectionState(ConnectionState::Suspended),
                    ..
                })
            ),
            "{released:?}"
        );
        assert_ne!(
            framework.state(),
            Some(ConnectionState::Lost),
            "answered only once the session was declared lost ({took:?})"
        );

        // The node goes with the session (or the background cleaner).
        proxy.hold_replies(false);
        proxy.blackhole(false);
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &path).await.is_empty()
            })
            .await,
            "the released node stayed"
        );
        framework.close().await;
    })
    .await;
}

/// A fenced write longer than ZooKeeper's packet limit is refused before it
/// is sent, naming its size and the limit: the connection stays up and
/// every other hold of the framework stays valid. The largest write that
/// fits is accepted by the server (the sizing is never too small).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_write_is_refused_before_it_is_sent() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let framework = framework_with(&proxy.connect_string(), |b| b).await;
        let raw = raw_client(&server.connect_string()).await;
        let path = unique_path("oversized");
        let data_node = format!("{path}-data");
        let open =
            zk_curator::zk::CreateMode::Persistent.with_acls(zk_curator::zk::Acls::anyone_all());
        raw.create(&data_node, b"", &open).await.unwrap();
        let writer = InterProcessMutex::new(framework.clone(), &format!("{path}/a")).unwrap();
        let bystander = InterProcessMutex::new(framework.clone(), &format!("{path}/b")).unwrap();
        let guard = writer.lock().await.unwrap();
        let other = bystander.lock().await.unwrap();
        let fence = guard.fence().unwrap();

        proxy.clear_traffic();
        let two_mib = vec![b'x'; 2 << 20];
        let refused = fence.set_data(&data_node, &two_mib, None).await;
        let limit = zk_curator::framework::DEFAULT_MAX_PACKET_SIZE;
        match refused {
            Err(Error::RequestTooLarge { size, limit: l }) => {
                assert!(size > two_mib.len(), "{size}");
                assert_eq!(l, limit);
            }
            other => panic!("an oversized write was not refused: {other:?}"),
        }
        assert_eq!(requests_with(&proxy, opcode::MULTI), 0, "it was sent");
        assert!(guard.is_valid() && other.is_valid(), "a hold was lost");
        assert_eq!(framework.state(), Some(ConnectionState::Connected));

        // The largest write that fits, found without I/O, goes through;
        // one byte more does not.
        let fits = |n: usize| {
            fence
                .multi()
                .set_data(&data_node, &two_mib[..n], None)
                .is_ok()
        };
        let low = largest_fitting(two_mib.len(), fits);
        assert!(low > limit - 200, "the sizing is far too cautious: {low}");
        let mut multi = fence.multi();
        multi.set_data(&data_node, &two_mib[..low], None).unwrap();
        assert!(matches!(
            multi.set_data(&data_node, b"x", None),
            Err(Error::RequestTooLarge { .. })
        ));
        assert_eq!(multi.commit().await.unwrap().len(), 1);
        assert_eq!(raw.get_data(&data_node).await.unwrap().0.len(), low);
        assert!(guard.is_valid() && other.is_valid());
        other
            .fence()
            .unwrap()
            .set_data(&data_node, b"small", None)
            .await
            .unwrap();

        // The same limit holds for node data, and can be set.
        let small = framework_with(&server.connect_string(), |b| b.max_packet_size(4096)).await;
        let labelled = InterProcessMutex::new(small.clone(), &format!("{path}/c")).unwrap();
        let held = labelled.lock().await.unwrap();
        assert!(matches!(
            held.fence()
                .unwrap()
                .set_data(&data_node, &[0; 4096], None)
                .await,
            Err(Error::RequestTooLarge { limit: 4096, .. })
        ));
        assert!(matches!(
            zk_curator::InterProcessSemaphoreV2::with_node_data(
                small.clone(),
                &path,
                1,
                &[0; 4096]
            ),
            Err(Error::RequestTooLarge { limit: 4096, .. })
        ));
        held.release().await.unwrap();
        guard.release().await.unwrap();
        other.release().await.unwrap();
        small.close().await;
        framework.close().await;
    })
    .await;
}

/// A hold answers `is_valid() == false` from the moment the library knows
/// its connection broke: here a raw write of the session (not sized by the
/// framework) makes the server drop the connection, and right after its
/// `ConnectionLoss` the hold is no longer trusted, before the framework's
/// state has had time to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_is_invalid_as_soon_as_its_connection_is_known_broken() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        // Through a proxy that holds back what the server sends from the
        // write on: the client cannot finish reconnecting (its connect
        // response is held), so the window in which the library knows the
        // connection broke and the framework's state has not followed stays
        // open until the check is made (a fast reconnection on the same
        // session would otherwise close it first on a busy machine).
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let framework = framework_with(&proxy.connect_string(), |b| b).await;
        let path = unique_path("broken-under-a-write");
        let mutex = InterProcessMutex::new(framework.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        let client = guard.fence().unwrap().client().unwrap();
        let too_long = vec![0u8; 2 << 20];
        proxy.hold_replies(true);
        let sent = tokio::time::timeout(PATIENCE, client.set_data(&path, &too_long, None))
            .await
            .expect("the oversized write never ended");
        assert!(sent.is_err(), "the server took a 2 MiB request: {sent:?}");
        assert!(!guard.is_valid(), "still valid after the connection broke");
        assert_eq!(
            guard.loss(),
            Some(LockLoss::ConnectionState(ConnectionState::Suspended))
        );
        proxy.hold_replies(false);
        drop(guard);
        framework.close().await;
    })
    .await;
}

/// Runs `f` and asserts it answers well within its own (10 s) timeout.
async fn promptly<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(5), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: still waiting after 5 s"));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{what}: took {:?}",
        started.elapsed()
    );
    answer
}

fn would_deadlock<T: std::fmt::Debug>(result: zk_curator::Result<T>) -> bool {
    matches!(result, Err(Error::WouldDeadlock { .. }))
}

/// A task holding a guard of a mutex that asks the same mutex for a
/// task-bound hold, or holding the task-bound hold and asking for a guard,
/// is answered at once instead of waiting for itself. A guard of another
/// task is waited for as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_asking_a_mutex_it_holds_the_other_way_is_answered_at_once() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let framework = framework_with(&server.connect_string(), |b| b).await;
        let path = unique_path("self-deadlock-mutex");
        let mutex = InterProcessMutex::new(framework.clone(), &path).unwrap();
        let long = Duration::from_secs(10);

        let guard = mutex.lock().await.unwrap();
        assert!(would_deadlock(
            promptly("acquire_timeout", mutex.acquire_timeout(long)).await
        ));
        assert!(would_deadlock(promptly("acquire", mutex.acquire()).await));
        assert!(would_deadlock(
            promptly("try_acquire", mutex.try_acquire()).await
        ));
        assert_eq!(mutex.hold_count(), 0);
        guard.release().await.unwrap();

        mutex.acquire().await.unwrap();
        assert!(would_deadlock(promptly("lock", mutex.lock()).await));
        assert!(would_deadlock(
            promptly("try_lock_for", mutex.try_lock_for(long)).await
        ));
        assert_eq!(mutex.hold_count(), 1, "the task-bound hold is untouched");
        mutex.release().await.unwrap();

        // A guard taken by another task is waited for, not refused.
        let (taken_tx, taken_rx) = tokio::sync::oneshot::channel();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let other = mutex.clone();
        let holder = tokio::spawn(async move {
            let guard = other.lock().await.unwrap();
            taken_tx.send(()).unwrap();
            let _ = done_rx.await;
            guard.release().await.unwrap();
        });
        taken_rx.await.unwrap();
        assert_eq!(
            mutex.acquire_timeout(Duration::from_millis(300)).await,
            Ok(false)
        );
        done_tx.send(()).unwrap();
        holder.await.unwrap();
        assert_eq!(mutex.acquire_timeout(long).await, Ok(true));
        mutex.release().await.unwrap();
        framework.close().await;
    })
    .await;
}

/// The same for a read-write lock: a task holding a read guard that asks
/// for the write lock gets `UpgradeNotSupported` at once (as a task-bound
/// reader does), and one holding a write guard that asks for a task-bound
/// hold of either half gets `WouldDeadlock` (`WriteGuard::downgrade` is the
/// way from write to read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_asking_a_read_write_lock_it_holds_through_a_guard_is_answered_at_once() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let framework = framework_with(&server.connect_string(), |b| b).await;
        let path = unique_path("self-deadlock-rwlock");
        let lock = zk_curator::InterProcessReadWriteLock::new(framework.clone(), &path).unwrap();
        let (read, write) = (lock.read_lock(), lock.write_lock());
        let long = Duration::from_secs(10);

        let reading = read.lock().await.unwrap();
        for result in [
            promptly("write acquire_timeout", write.acquire_timeout(long)).await,
            promptly("write try_lock_for", async {
                write.try_lock_for(long).await.map(|g| g.is_some())
            })
            .await,
        ] {
            assert_eq!(result, Err(Error::UpgradeNotSupported));
        }
        assert!(would_deadlock(
            promptly("read acquire", read.acquire()).await
        ));
        reading.release().await.unwrap();

        let writing = write.lock().await.unwrap();
        assert!(would_deadlock(
            promptly("write acquire", write.acquire_timeout(long)).await
        ));
        assert!(would_deadlock(
            promptly("read acquire", read.acquire_timeout(long)).await
        ));
        let reading = writing.downgrade().await.unwrap();
        reading.release().await.unwrap();

        write.acquire().await.unwrap();
        assert!(would_deadlock(promptly("write lock", write.lock()).await));
        // A task-bound writer may still take a read guard: a downgrade.
        let downgraded = promptly("read lock", read.lock()).await.unwrap();
        write.release().await.unwrap();
        downgraded.release().await.unwrap();
        framework.close().await;
    })
    .await;
}

/// Errors say what failed: ZooKeeper's node errors name the node, a lost
/// hold's error carries the node and the `LockLoss`, and a framework never
/// started is told apart from a closed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_the_node_and_the_reason() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let framework = framework_with(&server.connect_string(), |b| b).await;
        let path = unique_path("errors-name");
        let mutex = InterProcessMutex::new(framework.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        let fence = guard.fence().unwrap();
        let missing = format!("{path}-missing");
        let err = fence.set_data(&missing, b"x", None).await.unwrap_err();
        assert_eq!(
            err,
            Error::NoNode {
                path: missing.clone()
            }
        );
        assert!(err.to_string().contains(&missing), "{err}");
        let open =
            zk_curator::zk::CreateMode::Persistent.with_acls(zk_curator::zk::Acls::anyone_all());
        let err = fence.create(&path, b"", &open).await.unwrap_err();
        assert_eq!(err, Error::NodeExists { path: path.clone() });

        // A hold lost to a deleted node: the error names the node and why.
        let raw = raw_client(&server.connect_string()).await;
        raw.delete(guard.node().path(), None).await.unwrap();
        let err = fence.set_data(&missing, b"x", None).await.unwrap_err();
        assert_eq!(
            err,
            Error::LockLost {
                path: guard.node().path().to_owned(),
                reason: LockLoss::NodeDeleted
            }
        );
        assert!(matches!(
            guard.fence(),
            Err(Error::LockLost {
                reason: LockLoss::NodeDeleted,
                ..
            })
        ));
        drop(guard);
        framework.close().await;

        let latent = zk_curator::Framework::builder()
            .connect_string(server.connect_string())
            .build()
            .unwrap();
        let mutex = InterProcessMutex::new(latent.clone(), &path).unwrap();
        assert_eq!(mutex.try_acquire().await, Err(Error::NotStarted));
        assert_ne!(Error::NotStarted.to_string(), Error::Closed.to_string());
        let closed = InterProcessMutex::new(framework.clone(), &path).unwrap();
        assert_eq!(closed.try_acquire().await, Err(Error::Closed));
    })
    .await;
}

/// The states a watcher hands out are values: one kept while the connection
/// changes and the framework closes holds neither up. (A borrow of a bare
/// `watch::Receiver` kept the same way stopped the framework's next state
/// change, and then `close()`, for good: each waited for the borrow.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_kept_from_the_watcher_holds_nothing_up() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let framework = framework_with(&proxy.connect_string(), |b| b).await;
        let mut kept = framework.state_watcher();
        let connected = kept
            .wait_for(|s| s.is_some_and(ConnectionState::is_connected))
            .await
            .unwrap();

        // Another watcher sees the link go dark while `connected` is kept.
        let mut other = framework.state_watcher();
        proxy.blackhole(true);
        let dark = tokio::time::timeout(
            PATIENCE,
            other.wait_for(|s| s == Some(ConnectionState::Suspended)),
        )
        .await;
        assert!(
            dark.is_ok(),
            "the change to Suspended was never recorded while a state was kept"
        );
        assert_eq!(kept.get(), Some(ConnectionState::Suspended));
        tokio::time::timeout(PATIENCE, framework.close())
            .await
            .expect("close() waited on a kept state");
        assert_eq!(connected, Some(ConnectionState::Connected));
        // A closed framework's watcher still answers.
        let _ = kept.get_and_update();
    })
    .await;
}

/// A released hold is over for every clone of it: a fence taken before the
/// release refuses its write without sending it, and `lost()` completes
/// with `NotHeld` (the server would refuse the write too, since the node is
/// gone, but only after a round trip, and a clone would still answer
/// `is_valid()` until something looked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_hold_is_over_for_every_clone() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let framework = framework_with(&proxy.connect_string(), |b| b).await;
        let raw = raw_client(&server.connect_string()).await;
        let path = unique_path("released-clone");
        let data_node = format!("{path}-data");
        let open =
            zk_curator::zk::CreateMode::Persistent.with_acls(zk_curator::zk::Acls::anyone_all());
        raw.create(&data_node, b"", &open).await.unwrap();
        let mutex = InterProcessMutex::new(framework.clone(), &path).unwrap();
        for release_in_background in [false, true] {
            let guard = mutex.lock().await.unwrap();
            let clone: zk_curator::Hold = (*guard).clone();
            let fence = guard.fence().unwrap();
            if release_in_background {
                drop(guard);
            } else {
                guard.release().await.unwrap();
            }
            assert!(!clone.is_valid(), "a clone of a released hold is valid");
            let loss = tokio::time::timeout(PATIENCE, clone.lost()).await;
            assert_eq!(loss, Ok(LockLoss::NotHeld));
            proxy.clear_traffic();
            let refused = fence.set_data(&data_node, b"late", None).await;
            assert!(
                matches!(
                    refused,
                    Err(Error::LockLost {
                        reason: LockLoss::NotHeld,
                        ..
                    })
                ),
                "{refused:?}"
            );
            assert_eq!(
                requests_with(&proxy, opcode::MULTI),
                0,
                "the write was sent"
            );
        }
        assert_eq!(raw.get_data(&data_node).await.unwrap().0, b"");
        framework.close().await;
    })
    .await;
}
