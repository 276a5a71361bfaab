//! The in-process queue in front of ZooKeeper (`FrameworkBuilder::local_queue`):
//! many tasks of one framework keep one participant node, are served first
//! come first served, each get a node and a fencing token of their own, and
//! hand the lock to each other in one round trip.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::{
    bounded, children, eventually, framework, framework_with, raw_client, server, unique_path,
    wait_for_participants, BOUND, PATIENCE,
};
use zk_curator::{InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2};
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::{FaultProxy, Traffic};

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
                .push((index, token, guard.node_path().to_owned()));
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
/// hand-off is one round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_hand_off_is_one_round_trip() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("local-hand-off");
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework(&proxy.connect_string()).await;
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
        let requests = |traffic: Vec<Traffic>| -> Vec<i32> {
            traffic
                .into_iter()
                .filter_map(|t| match t {
                    Traffic::Request { opcode, .. } => Some(opcode),
                    Traffic::Reply { .. } => None,
                })
                .collect()
        };
        let all_sent =
            eventually(PATIENCE, || async { requests(proxy.traffic()).len() >= 3 }).await;
        let sent = requests(proxy.traffic());
        proxy.hold_replies(false);
        assert!(
            all_sent,
            "the next create waited for the delete's reply: {sent:?}"
        );
        assert_eq!(sent[0], opcode::DELETE, "{sent:?}");
        assert!(opcode::CREATES.contains(&sent[1]), "{sent:?}");
        assert!(
            matches!(sent[2], opcode::GET_CHILDREN | opcode::GET_CHILDREN2),
            "{sent:?}"
        );
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
        // for a lease.
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&locks) == 9 }).await);
        assert_eq!(children(&raw, &locks).await.len(), 1);
        assert_eq!(children(&raw, &format!("{sem_path}/leases")).await.len(), 2);
        lease.release().await.unwrap();
        for task in acquirers {
            tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
        }
        fw.close().await;
    })
    .await;
}
