//! Cooperative revocation (Curator's testRevoking, plus waiters, guards and
//! the read-write lock) against a real ZooKeeper.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{bounded, framework, raw_client, server, unique_path, BOUND, PATIENCE};
use tokio::sync::mpsc;
use zk_curator::{Error, InterProcessMutex, InterProcessReadWriteLock, Revoker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_holder_releases_and_the_waiter_gets_the_lock() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("revoke");
        let (holder_fw, waiter_fw) = (
            framework(&server.connect_string()).await,
            framework(&server.connect_string()).await,
        );
        let holder = InterProcessMutex::new(holder_fw.clone(), &path).unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        holder.make_revocable(move |node: &str| {
            let _ = tx.send(node.to_owned());
        });

        // The holder task releases when asked (a task hold is released by its owner).
        let (acquired_tx, acquired_rx) = tokio::sync::oneshot::channel();
        let holding = {
            let holder = holder.clone();
            tokio::spawn(async move {
                holder.acquire().await.unwrap();
                acquired_tx
                    .send(holder.node().unwrap().path().to_owned())
                    .unwrap();
                let requested = tokio::time::timeout(PATIENCE, rx.recv())
                    .await
                    .unwrap()
                    .unwrap();
                holder.release().await.unwrap();
                requested
            })
        };
        let held_node = acquired_rx.await.unwrap();

        // Another session sees exactly one participant and revokes it.
        let waiter = InterProcessMutex::new(waiter_fw.clone(), &path).unwrap();
        let participants = waiter.participant_nodes().await.unwrap();
        assert_eq!(participants, vec![held_node.clone()]);
        assert!(!waiter
            .acquire_timeout(Duration::from_millis(200))
            .await
            .unwrap());
        Revoker::attempt_revoke(&waiter_fw, &participants[0])
            .await
            .unwrap();

        assert!(
            waiter.acquire_timeout(PATIENCE).await.unwrap(),
            "the revoked holder let go"
        );
        assert_eq!(
            holding.await.unwrap(),
            held_node,
            "the listener was told which node"
        );
        waiter.release().await.unwrap();
        holder_fw.close().await;
        waiter_fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn waiters_and_guards_can_be_revoked_too() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("revoke-waiter");
        let fw = framework(&server.connect_string()).await;
        let other_fw = framework(&server.connect_string()).await;
        let holder = InterProcessMutex::new(other_fw.clone(), &path).unwrap();
        let first = holder.lock().await.unwrap();

        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        mutex.make_revocable(move |node: &str| {
            let _ = tx.send(node.to_owned());
        });
        let waiting = {
            let mutex = mutex.clone();
            tokio::spawn(async move { mutex.lock().await })
        };
        // Wait until the waiter's node exists, then revoke it while it waits.
        assert!(
            common::eventually(PATIENCE, || async {
                holder.participant_nodes().await.unwrap().len() == 2
            })
            .await
        );
        let nodes = holder.participant_nodes().await.unwrap();
        Revoker::attempt_revoke(&other_fw, &nodes[1]).await.unwrap();
        let requested = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(requested, nodes[1], "the waiter was asked");
        // The waiter's owner decides: here it gives up waiting.
        waiting.abort();
        first.release().await.unwrap();

        // A revocable guard: the listener's message leads to guard.release().
        let guard = mutex.lock().await.unwrap();
        let raw = raw_client(&server.connect_string()).await;
        Revoker::attempt_revoke(&other_fw, guard.node().path())
            .await
            .unwrap();
        let (data, _) = raw.get_data(guard.node().path()).await.unwrap();
        assert_eq!(data, b"__REVOKE__", "Curator's payload");
        assert_eq!(
            tokio::time::timeout(PATIENCE, rx.recv())
                .await
                .unwrap()
                .unwrap(),
            guard.node().path()
        );
        guard.release().await.unwrap();

        // Without make_revocable nothing listens: clear it and check no message comes.
        mutex.clear_revocable();
        let quiet = mutex.lock().await.unwrap();
        Revoker::attempt_revoke(&other_fw, quiet.node().path())
            .await
            .unwrap();
        let unexpected = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await;
        // (The channel may also close: the cleared listener owned its sender.)
        assert!(
            !matches!(unexpected, Ok(Some(_))),
            "{unexpected:?} (quiet node {})",
            quiet.node().path()
        );
        quiet.release().await.unwrap();
        fw.close().await;
        other_fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn read_write_locks_are_revocable() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("revoke-rw");
        let fw = framework(&server.connect_string()).await;
        let rw = InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel::<&'static str>();
        let write_tx = tx.clone();
        rw.write_lock().make_revocable(move |_: &str| {
            let _ = write_tx.send("write");
        });
        rw.read_lock().make_revocable(move |_: &str| {
            let _ = tx.send("read");
        });
        let write = rw.write_lock().lock().await.unwrap();
        Revoker::attempt_revoke(&fw, write.node().path())
            .await
            .unwrap();
        assert_eq!(
            tokio::time::timeout(PATIENCE, rx.recv()).await.unwrap(),
            Some("write")
        );
        write.release().await.unwrap();
        let read = rw.read_lock().lock().await.unwrap();
        Revoker::attempt_revoke(&fw, read.node().path())
            .await
            .unwrap();
        assert_eq!(
            tokio::time::timeout(PATIENCE, rx.recv()).await.unwrap(),
            Some("read")
        );
        read.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn revoking_a_missing_node_is_fine_and_bad_paths_are_refused() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let fw = framework(&server.connect_string()).await;
        Revoker::attempt_revoke(&fw, &format!("{}/gone", unique_path("revoke-missing")))
            .await
            .unwrap();
        assert!(matches!(
            Revoker::attempt_revoke(&fw, "not/absolute").await,
            Err(Error::InvalidPath(_))
        ));
        fw.close().await;
        assert_eq!(Revoker::attempt_revoke(&fw, "/x").await, Err(Error::Closed));
    })
    .await;
}

#[tokio::test]
async fn semaphore_leases_are_revocable() {
    use zk_curator::{InterProcessSemaphoreMutex, InterProcessSemaphoreV2};
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("revoke-semaphore");
        let fw = framework(&server.connect_string()).await;
        let other_fw = framework(&server.connect_string()).await;
        let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, 1).unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        semaphore.make_revocable(move |node: &str| {
            let _ = tx.send(node.to_owned());
        });
        let lease = semaphore.acquire().await.unwrap();
        // Another session wants the only lease: it revokes the holder's lease.
        let other = InterProcessSemaphoreV2::new(other_fw.clone(), &path, 1).unwrap();
        assert!(other
            .acquire_timeout(Duration::from_millis(200))
            .await
            .unwrap()
            .is_none());
        assert!(
            other_fw.wait_for_background_cleanup(PATIENCE).await,
            "the timed-out attempt is cleaned up"
        );
        let holders = other.participant_nodes().await.unwrap();
        assert_eq!(holders, vec![lease.node().path().to_owned()]);
        Revoker::attempt_revoke(&other_fw, &holders[0])
            .await
            .unwrap();
        let asked = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(asked, lease.node().path());
        lease.release().await.unwrap();
        let theirs = other
            .acquire_timeout(PATIENCE)
            .await
            .unwrap()
            .expect("the lease was given up");
        theirs.release().await.unwrap();

        // The semaphore mutex passes it on.
        let mutex =
            InterProcessSemaphoreMutex::new(fw.clone(), &unique_path("revoke-semaphore-mutex"))
                .unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        mutex.make_revocable(move |node: &str| {
            let _ = tx.send(node.to_owned());
        });
        mutex.acquire().await.unwrap();
        let node = mutex.node().unwrap().path().to_owned();
        Revoker::attempt_revoke(&other_fw, &node).await.unwrap();
        assert_eq!(
            tokio::time::timeout(PATIENCE, rx.recv())
                .await
                .unwrap()
                .unwrap(),
            node
        );
        mutex.release().await.unwrap();
        fw.close().await;
        other_fw.close().await;
    })
    .await;
}
