//! The in-process queue in front of ZooKeeper (`FrameworkBuilder::local_queue`):
//! many tasks of one framework keep one participant node, are served first
//! come first served, each get a node and a fencing token of their own, and
//! hand the lock to each other in one round trip.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::{
    bounded, children, eventually, framework, framework_with, raw_client, read_nodes,
    request_opcodes, server, unique_path, wait_for_participants, BOUND, PATIENCE,
};
use zk_curator::{InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2};
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::FaultProxy;

/// Who held the lock, in order: the task's index, its token and its node.
type Order = Arc<Mutex<Vec<(usize, i64, String)>>>;

/// Queues `count` tasks on `mutex`, one after the other (each is seen in the
/// local queue before the next starts), each recording its index when it
/// holds the lock.
async fn queue_in_order(
    framework: &zk_curator::Framework,
    mutex: &InterProcessMutex,
    count: usize,
    order: &Order,
    busy: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let path = mutex.path().to_owned();
    let mut tasks = Vec::new();
    for index in 0..count {
        let (mutex, order, busy) = (mutex.clone(), order.clone(), busy.clone());
        tasks.push(tokio::spawn(async move {
            let guard = mutex.lock().await.unwrap();
            assert!(!busy.swap(true, Ordering::SeqCst), "two holders at once");
            let token = guard.fencing_token().get();
            order
                .lock()
                .unwrap()
                .push((index, token, guard.node().path().to_owned()));
            tokio::task::yield_now().await;
            busy.store(false, Ordering::SeqCst);
            guard.release().await.unwrap();
        }));
        assert!(
            eventually(PATIENCE, || async {
                framework.locally_queued(&path) == index + 1
            })
            .await,
            "task {index} did not queue"
        );
    }
    tasks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_keep_one_node_and_are_served_in_order() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("local-fifo");
        let fw = framework(&server.connect_string()).await;
        let other = framework(&server.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let holder = mutex.lock().await.unwrap();
        let first_token = holder.fencing_token();

        let order = Arc::new(Mutex::new(Vec::new()));
        let busy = Arc::new(AtomicBool::new(false));
        let tasks = queue_in_order(&fw, &mutex, 40, &order, &busy).await;
        // Another process's waiter queues in ZooKeeper as usual.
        let foreign = {
            let mutex = InterProcessMutex::new(other.clone(), &path).unwrap();
            tokio::spawn(async move { mutex.lock().await.unwrap().release().await.unwrap() })
        };
        // Forty-one waiters, two nodes: the holder's and the other process's.
        wait_for_participants(&raw, &path, 2).await;
        assert_eq!(children(&raw, &path).await.len(), 2);
        assert_eq!(fw.locally_queued(&path), 40);

        holder.release().await.unwrap();
        for task in tasks {
            tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
        }
        tokio::time::timeout(PATIENCE, foreign)
            .await
            .unwrap()
            .unwrap();
        let order = order.lock().unwrap().clone();
        let indexes: Vec<usize> = order.iter().map(|(i, _, _)| *i).collect();
        assert_eq!(
            indexes,
            (0..40).collect::<Vec<_>>(),
            "first come, first served"
        );
        // Every holder had a node and a token of its own, each above the last.
        let mut last = first_token.get();
        let mut nodes = std::collections::HashSet::new();
        for (_, token, node) in &order {
            assert!(*token > last, "tokens must grow");
            last = *token;
            assert!(nodes.insert(node.clone()), "a node was reused");
        }
        assert_eq!(fw.locally_queued(&path), 0);
        assert!(children(&raw, &path).await.is_empty());
        fw.close().await;
        other.close().await;
    })
    .await;
}

/// The release puts its delete on the wire, and the next local task's create
/// and listing follow at once, before the delete is answered: a local
/// hand-off is one round trip. Where the holder's acquire made the lock
/// path, the release removes it with the node in one multi, and the next
/// task makes it again with its node in another, with no listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_hand_off_is_one_round_trip() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework(&proxy.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;
        for made_by_the_acquire in [true, false] {
            let path = unique_path("local-hand-off");
            if !made_by_the_acquire {
                let persistent = zk_curator::zk::CreateMode::Persistent
                    .with_acls(zk_curator::zk::Acls::anyone_all());
                raw.create(&path, &[], &persistent).await.unwrap();
            }
            let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
            let holder = mutex.lock().await.unwrap();
            let waiter = {
                let mutex = mutex.clone();
                tokio::spawn(async move { mutex.lock().await })
            };
            assert!(eventually(PATIENCE, || async { fw.locally_queued(&path) == 1 }).await);
            proxy.clear_traffic();
            proxy.hold_replies(true);
            let release = tokio::spawn(holder.release());
            let expected = if made_by_the_acquire { 2 } else { 3 };
            let all_sent = eventually(PATIENCE, || async {
                request_opcodes(&proxy).len() >= expected
            })
            .await;
            let sent = request_opcodes(&proxy);
            proxy.hold_replies(false);
            assert!(
                all_sent,
                "the next create waited for the delete's reply: {sent:?}"
            );
            if made_by_the_acquire {
                assert_eq!(sent[..2], [opcode::MULTI, opcode::MULTI], "{sent:?}");
            } else {
                assert_eq!(sent[0], opcode::DELETE, "{sent:?}");
                assert!(opcode::CREATES.contains(&sent[1]), "{sent:?}");
                assert!(
                    matches!(sent[2], opcode::GET_CHILDREN | opcode::GET_CHILDREN2),
                    "{sent:?}"
                );
            }
            tokio::time::timeout(PATIENCE, release)
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            let guard = tokio::time::timeout(PATIENCE, waiter)
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            assert!(guard.is_valid());
            guard.release().await.unwrap();
        }
        fw.close().await;
    })
    .await;
}

/// With the only turn out, a try knows the lock is taken without asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_behind_a_local_holder_sends_nothing() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("local-try");
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework(&proxy.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let holder = mutex.lock().await.unwrap();
        proxy.clear_traffic();
        let other = InterProcessMutex::new(fw.clone(), &path).unwrap();
        assert!(other.try_lock().await.unwrap().is_none());
        assert!(!other.try_acquire().await.unwrap());
        assert!(proxy.traffic().is_empty(), "{:?}", proxy.traffic());
        holder.release().await.unwrap();
        let guard = other.try_lock().await.unwrap().expect("free again");
        guard.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

/// A task dropped while it waits in the local queue leaves it, and nothing
/// is left behind anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_local_waiter_leaves_nothing() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("local-cancel");
        let fw = framework(&server.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let holder = mutex.lock().await.unwrap();
        let waiter = {
            let mutex = mutex.clone();
            tokio::spawn(async move { mutex.lock().await })
        };
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&path) == 1 }).await);
        // A timed acquire gives up in the queue too.
        let timed = InterProcessMutex::new(fw.clone(), &path).unwrap();
        assert!(timed
            .try_lock_for(std::time::Duration::from_millis(100))
            .await
            .unwrap()
            .is_none());
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        assert_eq!(fw.locally_queued(&path), 0);
        assert_eq!(children(&raw, &path).await.len(), 1);
        holder.release().await.unwrap();
        assert!(children(&raw, &path).await.is_empty());
        // The turn is free: the next acquire gets it at once.
        let guard = mutex.try_lock().await.unwrap().expect("nobody holds it");
        guard.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

/// With the local queue off, every waiting task has its node (global arrival
/// order, as Curator).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_local_queue_every_task_has_a_node() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("local-off");
        let fw = framework_with(&server.connect_string(), |b| b.local_queue(false)).await;
        let raw = raw_client(&server.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let holder = mutex.lock().await.unwrap();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let mutex = mutex.clone();
                tokio::spawn(async move { mutex.lock().await.unwrap().release().await.unwrap() })
            })
            .collect();
        wait_for_participants(&raw, &path, 4).await;
        assert_eq!(fw.locally_queued(&path), 0);
        holder.release().await.unwrap();
        for waiter in waiters {
            tokio::time::timeout(PATIENCE, waiter)
                .await
                .unwrap()
                .unwrap();
        }
        fw.close().await;
    })
    .await;
}

/// Writers and semaphore acquirers queue locally too: one write node, one
/// node under the semaphore's internal lock, whatever the number of tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_and_semaphore_acquirers_queue_locally() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let fw = framework(&server.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;

        let rw_path = unique_path("local-writers");
        let rw = InterProcessReadWriteLock::new(fw.clone(), &rw_path).unwrap();
        let writer = rw.write_lock().lock().await.unwrap();
        let writers: Vec<_> = (0..10)
            .map(|_| {
                let rw = rw.clone();
                tokio::spawn(async move {
                    rw.write_lock()
                        .lock()
                        .await
                        .unwrap()
                        .release()
                        .await
                        .unwrap()
                })
            })
            .collect();
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&rw_path) == 10 }).await);
        assert_eq!(children(&raw, &rw_path).await.len(), 1);
        writer.release().await.unwrap();
        for task in writers {
            tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
        }

        let sem_path = unique_path("local-semaphore");
        let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &sem_path, 1).unwrap();
        let lease = semaphore.acquire().await.unwrap();
        let acquirers: Vec<_> = (0..10)
            .map(|_| {
                let semaphore = semaphore.clone();
                tokio::spawn(
                    async move { semaphore.acquire().await.unwrap().release().await.unwrap() },
                )
            })
            .collect();
        let locks = format!("{sem_path}/locks");
        // Nine wait for the internal lock in-process; one holds it and waits
        // for a lease, in-process too: the one lease is this process's.
        let leases = format!("{sem_path}/leases");
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&locks) == 9 }).await);
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&leases) == 1 }).await);
        assert_eq!(children(&raw, &locks).await.len(), 1);
        assert_eq!(children(&raw, &leases).await.len(), 1);
        lease.release().await.unwrap();
        for task in acquirers {
            tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
        }
        fw.close().await;
    })
    .await;
}

/// A fresh lock path, this process's framework, another process's
/// framework and a plain client.
async fn two_processes(
    server: &zk_curator_testing::TestingServer,
    name: &str,
) -> (
    String,
    zk_curator::Framework,
    zk_curator::Framework,
    zookeeper_client::Client,
) {
    let connect = server.connect_string();
    (
        unique_path(name),
        framework(&connect).await,
        framework(&connect).await,
        raw_client(&connect).await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_readers_share_one_node_and_hold_together() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let (path, fw, other, raw) = two_processes(server, "shared-readers").await;
        let writer_lock = InterProcessReadWriteLock::new(other.clone(), &path).unwrap();
        let writer = writer_lock.write_lock().lock().await.unwrap();
        let writer_token = writer.fencing_token();

        const READERS: usize = 60;
        // Every reader must hold at the same time to pass the barrier.
        let together = Arc::new(tokio::sync::Barrier::new(READERS));
        let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
        let rw = InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();
        let mut tasks = Vec::new();
        for index in 0..READERS {
            let (rw, together, done_tx) = (rw.clone(), together.clone(), done_tx.clone());
            tasks.push(tokio::spawn(async move {
                let read = rw.read_lock();
                // Half of them through the task-bound API, half with guards.
                let token = if index % 2 == 0 {
                    read.acquire().await.unwrap();
                    read.fencing_token().unwrap()
                } else {
                    let guard = read.lock().await.unwrap();
                    let token = guard.fencing_token();
                    together.wait().await;
                    done_tx
                        .send((token, guard.node().path().to_owned()))
                        .unwrap();
                    guard.release().await.unwrap();
                    return;
                };
                together.wait().await;
                done_tx
                    .send((token, read.node().unwrap().path().to_owned()))
                    .unwrap();
                read.release().await.unwrap();
            }));
        }
        drop(done_tx);
        // Sixty waiting readers, one read node beside the writer's.
        assert!(
            eventually(PATIENCE, || async {
                fw.locally_queued(&path) == READERS - 1
            })
            .await,
            "the readers did not all wait on one node: {} queued",
            fw.locally_queued(&path)
        );
        let queued = children(&raw, &path).await;
        assert_eq!(queued.len(), 2, "{queued:?}");
        assert_eq!(read_nodes(&queued).len(), 1, "{queued:?}");

        writer.release().await.unwrap();
        let mut seen = Vec::new();
        while let Some(hold) = tokio::time::timeout(PATIENCE, done.recv()).await.unwrap() {
            seen.push(hold);
        }
        assert_eq!(seen.len(), READERS);
        let (token, node) = seen[0].clone();
        assert!(
            token > writer_token,
            "{token:?} after the writer's {writer_token:?}"
        );
        assert!(
            seen.iter().all(|hold| *hold == (token, node.clone())),
            "every reader holds the one node with its token: {seen:?}"
        );
        for task in tasks {
            task.await.unwrap();
        }
        // The last release deleted the node.
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &path).await.is_empty()
            })
            .await,
            "{:?}",
            children(&raw, &path).await
        );
        fw.close().await;
        other.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_arriving_after_the_shared_grant_queues_behind_the_writer() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let (path, fw, other, raw) = two_processes(server, "shared-no-starvation").await;
        let rw = InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();
        let first = rw.read_lock().lock().await.unwrap();

        // Another process's writer queues behind the granted read node.
        let writer_holds = Arc::new(AtomicBool::new(false));
        let (release_writer, writer_may_go) = tokio::sync::oneshot::channel::<()>();
        let writer = {
            let lock = InterProcessReadWriteLock::new(other.clone(), &path).unwrap();
            let holds = writer_holds.clone();
            tokio::spawn(async move {
                let guard = lock.write_lock().lock().await.unwrap();
                holds.store(true, Ordering::SeqCst);
                writer_may_go.await.unwrap();
                holds.store(false, Ordering::SeqCst);
                guard.release().await.unwrap();
            })
        };
        wait_for_participants(&raw, &path, 2).await;

        // A later reader of the first reader's process must not join the
        // granted node (that would let it in ahead of the writer): it gets a
        // node of its own, behind the writer's, and later readers share that.
        let reader_holds = Arc::new(AtomicBool::new(false));
        let spawn_reader = || {
            let (rw, holds, writer_holds) =
                (rw.clone(), reader_holds.clone(), writer_holds.clone());
            tokio::spawn(async move {
                let guard = rw.read_lock().lock().await.unwrap();
                assert!(
                    !writer_holds.load(Ordering::SeqCst),
                    "a reader beside the writer"
                );
                holds.store(true, Ordering::SeqCst);
                guard
            })
        };
        let late = spawn_reader();
        let queued = wait_for_participants(&raw, &path, 3).await;
        let sorted = {
            let mut sorted = queued.clone();
            sorted.sort_by_key(|name| name[name.len() - 10..].to_owned());
            sorted
        };
        assert!(
            sorted[1].contains("__WRIT__") && sorted[2].contains("__READ__"),
            "{sorted:?}"
        );
        let later: Vec<_> = (0..3).map(|_| spawn_reader()).collect();
        assert!(
            eventually(PATIENCE, || async { fw.locally_queued(&path) == 3 }).await,
            "the later readers did not share the waiting node"
        );
        assert_eq!(children(&raw, &path).await.len(), 3);
        assert!(
            !reader_holds.load(Ordering::SeqCst),
            "a reader got ahead of the writer"
        );

        first.release().await.unwrap();
        assert!(
            eventually(PATIENCE, || async { writer_holds.load(Ordering::SeqCst) }).await,
            "the writer did not get the lock after the granted reader left"
        );
        assert!(
            !reader_holds.load(Ordering::SeqCst),
            "a reader beside the writer"
        );
        release_writer.send(()).unwrap();
        writer.await.unwrap();
        let mut guards = vec![late.await.unwrap()];
        for task in later {
            guards.push(tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap());
        }
        let token = guards[0].fencing_token();
        assert!(guards.iter().all(|g| g.fencing_token() == token));
        // Releasing all but one keeps the node; a new writer waits for the last.
        let last = guards.pop().unwrap();
        for guard in guards {
            guard.release().await.unwrap();
        }
        assert!(last.is_valid());
        let remaining = children(&raw, &path).await;
        assert_eq!(
            remaining,
            vec![last.node().path().rsplit('/').next().unwrap().to_owned()]
        );
        let lock = InterProcessReadWriteLock::new(other.clone(), &path).unwrap();
        assert!(lock.write_lock().try_lock().await.unwrap().is_none());
        last.release().await.unwrap();
        let guard = tokio::time::timeout(PATIENCE, lock.write_lock().lock())
            .await
            .unwrap()
            .unwrap();
        guard.release().await.unwrap();
        fw.close().await;
        other.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_node_goes_with_its_last_waiter() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let (path, fw, other, raw) = two_processes(server, "shared-cancel").await;
        let writer_lock = InterProcessReadWriteLock::new(other.clone(), &path).unwrap();
        let writer = writer_lock.write_lock().lock().await.unwrap();
        let rw = InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();

        let spawn_reader = || {
            let rw = rw.clone();
            tokio::spawn(async move { rw.read_lock().lock().await.unwrap().release().await })
        };
        let (a, b) = (spawn_reader(), spawn_reader());
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&path) == 1 }).await);
        let queued = wait_for_participants(&raw, &path, 2).await;
        a.abort();
        assert!(a.await.unwrap_err().is_cancelled());
        // One waiter is left: it still needs the node.
        assert_eq!(fw.locally_queued(&path), 0);
        assert_eq!(children(&raw, &path).await, queued);
        b.abort();
        assert!(b.await.unwrap_err().is_cancelled());
        // The last waiter left: the node goes.
        wait_for_participants(&raw, &path, 1).await;

        // A timed-out reader leaves nothing either.
        let read = rw.read_lock();
        assert!(!read
            .acquire_timeout(std::time::Duration::from_millis(200))
            .await
            .unwrap());
        wait_for_participants(&raw, &path, 1).await;
        assert_eq!(fw.locally_queued(&path), 0);

        writer.release().await.unwrap();
        assert!(read.try_acquire().await.unwrap());
        read.release().await.unwrap();
        wait_for_participants(&raw, &path, 0).await;
        fw.close().await;
        other.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_session_ends_every_share_of_a_read_node() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let (path, fw, other, _) = two_processes(server, "shared-lost").await;
        let writer_lock = InterProcessReadWriteLock::new(other.clone(), &path).unwrap();
        let writer = writer_lock.write_lock().lock().await.unwrap();
        let rw = InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let rw = rw.clone();
                tokio::spawn(async move { rw.read_lock().lock().await.unwrap() })
            })
            .collect();
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&path) == 2 }).await);
        writer.release().await.unwrap();
        let mut guards = Vec::new();
        for reader in readers {
            guards.push(
                tokio::time::timeout(PATIENCE, reader)
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        assert!(guards
            .iter()
            .all(|g| g.node().path() == guards[0].node().path()));
        assert!(guards.iter().all(|g| g.is_valid()));

        let client = fw.client().await.unwrap();
        zk_curator_testing::expire_session(&server.connect_string(), &client)
            .await
            .unwrap();
        // Every share learns it, and the writer gets in.
        for guard in &guards {
            tokio::time::timeout(PATIENCE, guard.lost()).await.unwrap();
            assert!(!guard.is_valid());
        }
        let writer = tokio::time::timeout(PATIENCE, writer_lock.write_lock().lock())
            .await
            .unwrap()
            .unwrap();
        for guard in guards {
            assert!(matches!(
                guard.release().await,
                Err(zk_curator::Error::LockLost { .. })
            ));
        }
        writer.release().await.unwrap();
        // The framework's next session serves readers again.
        let read = rw.read_lock();
        assert!(read.acquire_timeout(PATIENCE).await.unwrap());
        read.release().await.unwrap();
        fw.close().await;
        other.close().await;
    })
    .await;
}
