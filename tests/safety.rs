//! Safety on every API: no second holder through re-entry, a loss signal on
//! every kind of hold, fenced writes, try-lock, release of a lost hold, and
//! the smaller defects of issue 7 (each test fails on the code before its
//! fix).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    bounded, children, eventually, expire, framework, framework_with, raw_client, request_opcodes,
    server, session_and_raw, two_sessions_and_raw, unique_path, wait_for_participants, BOUND,
    PATIENCE,
};
use zk_curator::framework::lock_internals::{
    until_held, Acquire, LockInternals, LockInternalsDriver, PredicateResults,
    StandardLockInternalsDriver,
};
use zk_curator::framework::retry::RetryNTimes;
use zk_curator::framework::zk;
use zk_curator::recipes::InterProcessMultiLock;
use zk_curator::{
    Error, Framework, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreMutex,
    InterProcessSemaphoreV2, LockLoss,
};
use zk_curator_testing::{FaultProxy, Traffic};

// ---------------------------------------------------------------------------
// No second holder through re-entry

#[tokio::test]
async fn mutex_reentry_after_expiry_is_lock_lost_not_a_second_holder() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let path = unique_path("two-holders");
        let (fa, fb) = (framework(&connect).await, framework(&connect).await);
        let a = InterProcessMutex::new(fa.clone(), &path).unwrap();
        let b = InterProcessMutex::new(fb.clone(), &path).unwrap();
        a.acquire().await.unwrap();
        expire(&connect, &fa).await;
        // Another process takes the lock: A's node died with its session.
        let theirs = b.try_lock_for(PATIENCE).await.unwrap().expect("free");
        // A re-enters: it must not be told that it holds the lock.
        let err = a.acquire().await.unwrap_err();
        assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
        assert!(!a.is_owned_by_current_task(), "the stale hold is forgotten");
        assert!(!a.try_acquire().await.unwrap(), "A now queues like anyone");
        theirs.release().await.unwrap();
        assert!(a.acquire_timeout(PATIENCE).await.unwrap());
        a.release().await.unwrap();
        fa.close().await;
        fb.close().await;
    })
    .await;
}

#[tokio::test]
async fn write_lock_and_multi_lock_reentry_after_expiry_are_lock_lost() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let (rw_path, m1, m2) = (
            unique_path("two-writers"),
            unique_path("multi-a"),
            unique_path("multi-b"),
        );
        let (fa, fb) = (framework(&connect).await, framework(&connect).await);
        let write = InterProcessReadWriteLock::new(fa.clone(), &rw_path)
            .unwrap()
            .write_lock();
        let multi = InterProcessMultiLock::from_paths(fa.clone(), &[&m1, &m2]).unwrap();
        write.acquire().await.unwrap();
        multi.acquire().await.unwrap();
        expire(&connect, &fa).await;
        // Others take both.
        let their_write = InterProcessReadWriteLock::new(fb.clone(), &rw_path)
            .unwrap()
            .write_lock()
            .try_lock_for(PATIENCE)
            .await
            .unwrap()
            .expect("free");
        let their_multi = InterProcessMultiLock::from_paths(fb.clone(), &[&m1, &m2]).unwrap();
        assert!(their_multi.acquire_timeout(PATIENCE).await.unwrap());
        for err in [
            write.acquire().await.unwrap_err(),
            multi.acquire().await.unwrap_err(),
        ] {
            assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
        }
        assert!(!write.is_owned_by_current_task());
        assert!(!multi.is_owned_by_current_task());
        their_write.release().await.unwrap();
        their_multi.release().await.unwrap();
        fa.close().await;
        fb.close().await;
    })
    .await;
}

#[tokio::test]
async fn joined_acquires_of_one_task_share_one_hold() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let (fw, raw) = session_and_raw(&connect).await;
        let path = unique_path("joined");
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let (x, y) = tokio::join!(
            mutex.acquire_timeout(PATIENCE),
            mutex.acquire_timeout(PATIENCE)
        );
        assert!(x.unwrap() && y.unwrap(), "both joined acquires succeed");
        assert_eq!(mutex.hold_count(), 2);
        assert_eq!(children(&raw, &path).await.len(), 1, "one node, one hold");
        mutex.release().await.unwrap();
        mutex.release().await.unwrap();
        assert!(children(&raw, &path).await.is_empty());

        let rw_path = unique_path("joined-read");
        let read = InterProcessReadWriteLock::new(fw.clone(), &rw_path)
            .unwrap()
            .read_lock();
        let (x, y) = tokio::join!(read.acquire(), read.acquire());
        x.unwrap();
        y.unwrap();
        assert_eq!(children(&raw, &rw_path).await.len(), 1, "one read node");
        read.release().await.unwrap();
        read.release().await.unwrap();
        assert!(children(&raw, &rw_path).await.is_empty(), "no node kept");
        fw.close().await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// Try-lock

#[tokio::test]
async fn try_lock_on_every_recipe_holds_or_leaves_nothing() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let (fa, fb, raw) = two_sessions_and_raw(&connect).await;

        // Mutex: free → held at once (zero timeout too); taken → false and
        // our node already gone when it returns.
        let path = unique_path("try-mutex");
        let a = InterProcessMutex::new(fa.clone(), &path).unwrap();
        let b = InterProcessMutex::new(fb.clone(), &path).unwrap();
        assert!(a.acquire_timeout(Duration::ZERO).await.unwrap());
        assert!(!b.try_acquire().await.unwrap());
        assert!(b.try_lock().await.unwrap().is_none());
        assert_eq!(children(&raw, &path).await.len(), 1, "only the holder");
        a.release().await.unwrap();
        let guard = b.try_lock().await.unwrap().expect("free now");
        guard.release().await.unwrap();

        // Read-write lock: a writer keeps readers and writers out.
        let path = unique_path("try-rw");
        let ours = InterProcessReadWriteLock::new(fa.clone(), &path).unwrap();
        let theirs = InterProcessReadWriteLock::new(fb.clone(), &path).unwrap();
        assert!(ours.write_lock().try_acquire().await.unwrap());
        assert!(!theirs.read_lock().try_acquire().await.unwrap());
        assert!(theirs.write_lock().try_lock().await.unwrap().is_none());
        assert_eq!(children(&raw, &path).await.len(), 1);
        ours.write_lock().release().await.unwrap();
        assert!(theirs.read_lock().try_acquire().await.unwrap());
        theirs.read_lock().release().await.unwrap();

        // Semaphore and semaphore mutex: nothing left under locks/ or leases/.
        let path = unique_path("try-sem");
        let sem_a = InterProcessSemaphoreV2::new(fa.clone(), &path, 1).unwrap();
        let sem_b = InterProcessSemaphoreV2::new(fb.clone(), &path, 1).unwrap();
        let lease = sem_a.try_acquire().await.unwrap().expect("free");
        assert!(sem_b.try_acquire().await.unwrap().is_none());
        assert_eq!(children(&raw, &format!("{path}/leases")).await.len(), 1);
        assert!(children(&raw, &format!("{path}/locks")).await.is_empty());
        lease.release().await.unwrap();
        let path = unique_path("try-sem-mutex");
        let sm_a = InterProcessSemaphoreMutex::new(fa.clone(), &path).unwrap();
        let sm_b = InterProcessSemaphoreMutex::new(fb.clone(), &path).unwrap();
        assert!(sm_a.try_acquire().await.unwrap());
        assert!(!sm_b.try_acquire().await.unwrap());
        assert_eq!(children(&raw, &format!("{path}/leases")).await.len(), 1);
        sm_a.release().await.unwrap();

        // Multi-lock: one member taken → false, and the member it did take
        // is given back.
        let (m1, m2) = (unique_path("try-m1"), unique_path("try-m2"));
        let blocker = InterProcessMutex::new(fb.clone(), &m2).unwrap();
        let held = blocker.lock().await.unwrap();
        let multi = InterProcessMultiLock::from_paths(fa.clone(), &[&m1, &m2]).unwrap();
        assert!(!multi.try_acquire().await.unwrap());
        assert!(children(&raw, &m1).await.is_empty());
        assert_eq!(children(&raw, &m2).await.len(), 1);
        held.release().await.unwrap();
        assert!(multi.try_acquire().await.unwrap());
        multi.release().await.unwrap();
        fa.close().await;
        fb.close().await;
    })
    .await;
}

#[tokio::test]
async fn try_lock_is_one_round_trip_then_a_delete() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fa = framework(&proxy.connect_string()).await;
        let fb = framework(&connect).await;
        let path = unique_path("try-trips");
        let holder = InterProcessMutex::new(fb.clone(), &path).unwrap();
        let held = holder.lock().await.unwrap();
        let mutex = InterProcessMutex::new(fa.clone(), &path).unwrap();
        // Warm up: the lock path exists, so the try needs no parent creation.
        proxy.clear_traffic();
        assert!(!mutex.try_acquire().await.unwrap());
        let requests = request_opcodes(&proxy);
        use zk_curator_testing::proxy::opcode;
        assert_eq!(requests.len(), 3, "create, listing, delete: {requests:?}");
        assert!(matches!(requests[0], opcode::CREATE | opcode::CREATE2));
        assert!(matches!(
            requests[1],
            opcode::GET_CHILDREN | opcode::GET_CHILDREN2
        ));
        assert_eq!(requests[2], opcode::DELETE);
        held.release().await.unwrap();
        fa.close().await;
        fb.close().await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// Fenced writes

#[tokio::test]
async fn fenced_writes_succeed_while_held_and_are_refused_after() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let (fw, raw) = session_and_raw(&connect).await;
        let path = unique_path("fence");
        let data = format!("{path}-data");
        raw.create(
            &data,
            b"0",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        let fence = guard.fence().unwrap();
        fence.set_data(&data, b"1", None).await.unwrap();
        let child = fence
            .create(
                &format!("{data}/child"),
                b"",
                &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
            )
            .await
            .unwrap();
        fence.delete(&child, None).await.unwrap();
        // A multi of one's own, checks first.
        let mut multi = fence.multi();
        multi.set_data(&data, b"2", None).unwrap();
        assert_eq!(multi.commit().await.unwrap().len(), 1, "checks left out");
        assert_eq!(raw.get_data(&data).await.unwrap().0, b"2");

        // Someone deletes our lock node: the next fenced write is refused
        // by ZooKeeper, and the hold is known lost from then on.
        raw.delete(guard.node().path(), None).await.unwrap();
        let err = fence.set_data(&data, b"stale", None).await.unwrap_err();
        assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
        assert_eq!(
            raw.get_data(&data).await.unwrap().0,
            b"2",
            "nothing written"
        );
        assert!(!guard.is_valid());
        assert_eq!(guard.lost().await, LockLoss::NodeDeleted);
        drop(guard);

        // A task-bound hold whose session expired fences nothing.
        mutex.acquire().await.unwrap();
        let fence = mutex.fence().unwrap();
        expire(&connect, &fw).await;
        let err = fence.set_data(&data, b"stale", None).await.unwrap_err();
        assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
        assert!(matches!(mutex.fence(), Err(Error::LockLost { .. })));
        assert_eq!(raw.get_data(&data).await.unwrap().0, b"2");
        let started = Instant::now();
        assert!(matches!(mutex.release().await, Err(Error::LockLost { .. })));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "released at once"
        );
        fw.close().await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// A loss signal on every kind of hold

#[tokio::test]
async fn every_kind_of_hold_signals_its_loss() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let (fw, raw) = session_and_raw(&connect).await;
        let deleted = |raw: &zk::Client, node: String| {
            let raw = raw.clone();
            async move { raw.delete(&node, None).await.unwrap() }
        };

        // Task-bound mutex.
        let mutex = InterProcessMutex::new(fw.clone(), &unique_path("loss-mutex")).unwrap();
        assert_eq!(mutex.lost().await, LockLoss::NotHeld);
        mutex.acquire().await.unwrap();
        assert!(mutex.is_valid());
        let lost = mutex.lost();
        deleted(&raw, mutex.node().unwrap().path().to_owned()).await;
        assert_eq!(
            tokio::time::timeout(PATIENCE, lost).await.unwrap(),
            LockLoss::NodeDeleted
        );
        assert!(!mutex.is_valid());
        assert!(matches!(mutex.acquire().await, Err(Error::LockLost { .. })));

        // Both read-write halves.
        let rw = InterProcessReadWriteLock::new(fw.clone(), &unique_path("loss-rw")).unwrap();
        let write = rw.write_lock();
        write.acquire().await.unwrap();
        let lost = write.lost();
        deleted(&raw, write.node().unwrap().path().to_owned()).await;
        assert_eq!(
            tokio::time::timeout(PATIENCE, lost).await.unwrap(),
            LockLoss::NodeDeleted
        );
        assert!(!write.is_valid());
        assert!(matches!(write.release().await, Err(Error::LockLost { .. })));
        let read = rw.read_lock();
        read.acquire().await.unwrap();
        let lost = read.lost();
        deleted(&raw, read.node().unwrap().path().to_owned()).await;
        assert_eq!(
            tokio::time::timeout(PATIENCE, lost).await.unwrap(),
            LockLoss::NodeDeleted
        );
        assert!(!read.is_valid());
        let _ = read.release().await;

        // A lease and the semaphore mutex.
        let semaphore =
            InterProcessSemaphoreV2::new(fw.clone(), &unique_path("loss-sem"), 2).unwrap();
        let lease = semaphore.acquire().await.unwrap();
        let lost = lease.lost();
        deleted(&raw, lease.node().path().to_owned()).await;
        assert_eq!(
            tokio::time::timeout(PATIENCE, lost).await.unwrap(),
            LockLoss::NodeDeleted
        );
        assert!(!lease.is_valid());
        drop(lease);
        let sem_mutex =
            InterProcessSemaphoreMutex::new(fw.clone(), &unique_path("loss-sem-mutex")).unwrap();
        sem_mutex.acquire().await.unwrap();
        let lost = sem_mutex.lost();
        deleted(&raw, sem_mutex.node().unwrap().path().to_owned()).await;
        assert_eq!(
            tokio::time::timeout(PATIENCE, lost).await.unwrap(),
            LockLoss::NodeDeleted
        );
        assert!(!sem_mutex.is_valid());
        let _ = sem_mutex.release().await;

        // A multi-lock is lost as soon as any member is.
        let (m1, m2) = (unique_path("loss-m1"), unique_path("loss-m2"));
        let multi = InterProcessMultiLock::from_paths(fw.clone(), &[&m1, &m2]).unwrap();
        multi.acquire().await.unwrap();
        assert!(multi.is_valid());
        let lost = multi.lost();
        let member = children(&raw, &m2).await;
        deleted(&raw, format!("{m2}/{}", member[0])).await;
        assert_eq!(
            tokio::time::timeout(PATIENCE, lost).await.unwrap(),
            LockLoss::NodeDeleted
        );
        assert!(!multi.is_valid());
        assert!(matches!(multi.fence(), Err(Error::LockLost { .. })));
        let _ = multi.release().await;
        fw.close().await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// The smaller defects

/// The semaphore's lease step stays on the session of its internal mutex:
/// when that session ends, the acquire queues on the mutex again instead of
/// waiting for a lease on the new session without it.
#[tokio::test]
async fn lease_step_never_outlives_the_internal_mutex_session() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let (fa, fb, raw) = two_sessions_and_raw(&connect).await;
        let path = unique_path("lease-session");
        let (locks, leases) = (format!("{path}/locks"), format!("{path}/leases"));
        let holder = InterProcessSemaphoreV2::new(fb.clone(), &path, 1)
            .unwrap()
            .acquire()
            .await
            .unwrap();
        let semaphore = InterProcessSemaphoreV2::new(fa.clone(), &path, 1).unwrap();
        let waiter = tokio::spawn(async move { semaphore.acquire().await });
        // The waiter holds the internal mutex and waits with a lease node.
        wait_for_participants(&raw, &leases, 2).await;
        assert_eq!(children(&raw, &locks).await.len(), 1);
        expire(&connect, &fa).await;
        let session = fa.session().await.unwrap().id();
        // Once it waits again, every node of the new session it has under
        // leases/ is covered by a mutex node of that session under locks/.
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &leases).await.len() == 2
            })
            .await
        );
        let owners = |dir: String| {
            let raw = raw.clone();
            async move {
                let mut owners = Vec::new();
                for child in children(&raw, &dir).await {
                    if let Ok(Some(stat)) = raw.check_stat(&format!("{dir}/{child}")).await {
                        owners.push(stat.ephemeral_owner);
                    }
                }
                owners
            }
        };
        assert!(owners(leases.clone()).await.contains(&session));
        assert!(
            owners(locks.clone()).await.contains(&session),
            "a lease node of the new session without the internal mutex"
        );
        holder.release().await.unwrap();
        let lease = tokio::time::timeout(PATIENCE, waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(lease.is_valid());
        lease.release().await.unwrap();
        fa.close().await;
        fb.close().await;
    })
    .await;
}

#[tokio::test]
async fn first_acquire_on_a_new_path_needs_no_retry_budget() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let fw = framework_with(&server.connect_string(), |b| {
            b.retry_policy(RetryNTimes::new(0, Duration::from_millis(10)).unwrap())
        })
        .await;
        let path = format!("{}/deep/er/lock", unique_path("parents"));
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        guard.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

/// Waits on the children list, as the semaphore's lease step does.
#[derive(Debug)]
struct WatchChildren;

impl LockInternalsDriver for WatchChildren {
    fn gets_the_lock(
        &self,
        sorted: &[String],
        ours: &str,
        max_leases: u32,
    ) -> zk_curator::Result<PredicateResults> {
        let decision = StandardLockInternalsDriver.gets_the_lock(sorted, ours, max_leases)?;
        Ok(if decision.holds_lock {
            decision
        } else {
            PredicateResults::watch_children()
        })
    }
}

/// A slot freed between the waiter's listing and its children watch must
/// not be slept through: the reply to the listing is held at the proxy
/// while the holder leaves.
#[tokio::test]
async fn a_slot_freed_before_the_children_watch_is_not_missed() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fa = framework(&proxy.connect_string()).await;
        let (fb, raw) = session_and_raw(&connect).await;
        let path = unique_path("gap");
        let lock = |fw: &Framework| {
            LockInternals::new(fw.clone(), &path, "lease-", 1, Arc::new(WatchChildren)).unwrap()
        };
        let (ours, theirs) = (lock(&fa), lock(&fb));
        let held = until_held(|| theirs.acquire(Acquire::new())).await.unwrap();
        proxy.clear_traffic();
        proxy.hold_replies(true);
        let waiter = tokio::spawn(async move { ours.acquire(Acquire::new()).await });
        // The create and the pipelined listing were answered by the server
        // (with the holder still there); the replies wait at the proxy.
        wait_for_participants(&raw, &path, 2).await;
        assert!(
            eventually(PATIENCE, || async {
                proxy
                    .traffic()
                    .iter()
                    .filter(|t| matches!(t, Traffic::Reply { .. }))
                    .count()
                    >= 2
            })
            .await
        );
        theirs.release(&held).await.unwrap();
        wait_for_participants(&raw, &path, 1).await;
        proxy.hold_replies(false);
        let hold = tokio::time::timeout(PATIENCE, waiter)
            .await
            .expect("the waiter must see the free slot")
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(hold.is_valid());
        // The waiter did decide to wait on its first listing (it listed
        // again to set its watch), so the gap was really exercised.
        use zk_curator_testing::proxy::opcode;
        let listings = proxy
            .traffic()
            .iter()
            .filter(|t| {
                matches!(t, Traffic::Request { opcode, .. }
                    if matches!(*opcode, opcode::GET_CHILDREN | opcode::GET_CHILDREN2))
            })
            .count();
        assert!(listings >= 2, "{listings} listing(s)");
        fa.close().await;
        fb.close().await;
    })
    .await;
}

/// After a lost create reply the acquire looks for its node by its unique
/// prefix; a node with that name that belongs to another session must not
/// be adopted (it would be a hold of someone else's node).
#[tokio::test]
async fn a_node_of_another_session_is_never_adopted() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        // A slow retry leaves time to swap the node before the client looks.
        let fw = framework_with(&proxy.connect_string(), |b| {
            b.retry_policy(RetryNTimes::new(5, Duration::from_millis(500)).unwrap())
        })
        .await;
        let raw = raw_client(&connect).await;
        let path = unique_path("impostor");
        raw.mkdir(
            &path,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
        let fault = proxy
            .lose_reply_to_next(zk_curator_testing::RequestMatcher::creates().path_contains("_c_"));
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let acquire = tokio::spawn(async move {
            let guard = mutex.lock().await.unwrap();
            let node = guard.node().path().to_owned();
            (guard, node)
        });
        fault
            .wait(PATIENCE)
            .await
            .expect("the create's reply was lost");
        // Before the client can look again: our node is replaced by one of
        // the same name owned by another session.
        proxy.set_paused(true);
        let ours = wait_for_participants(&raw, &path, 1).await.remove(0);
        let impostor = format!("{path}/{ours}");
        raw.delete(&impostor, None).await.unwrap();
        let other = raw_client(&connect).await;
        other
            .create(
                &impostor,
                b"",
                &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
            )
            .await
            .unwrap();
        proxy.set_paused(false);
        // The acquire starts over with a node of its own, queued behind the
        // impostor; it gets the lock once the impostor goes.
        wait_for_participants(&raw, &path, 2).await;
        assert!(
            !acquire.is_finished(),
            "waits behind the other session's node"
        );
        other.delete(&impostor, None).await.unwrap();
        let (guard, node) = tokio::time::timeout(PATIENCE, acquire)
            .await
            .unwrap()
            .unwrap();
        assert_ne!(node, impostor, "adopted another session's node");
        let stat = raw.check_stat(&node).await.unwrap().unwrap();
        assert_eq!(stat.ephemeral_owner, fw.session().await.unwrap().id());
        guard.release().await.unwrap();
        fw.close().await;
    })
    .await;
}
