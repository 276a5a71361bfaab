//! InterProcessReadWriteLock against a real ZooKeeper: Curator's RW lock
//! tests (CURATOR-NOTES §17.5), plus FIFO fairness, the no-herd rule for
//! readers, cancellation and the guard API.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    bounded, children, eventually, framework, name, notifications_delivered, raw_client, server,
    session_and_raw, two_sessions_and_raw, unique_path, wait_for_participants, BOUND, LONG_BOUND,
    PATIENCE,
};
use zk_curator::recipes::InterProcessReadWriteLock;
use zk_curator::{Error, Framework, InterProcessLock};
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::{FaultProxy, Traffic};

fn rw(framework: &Framework, path: &str) -> InterProcessReadWriteLock {
    InterProcessReadWriteLock::new(framework.clone(), path).unwrap()
}

/// The 10-digit sequence at the end of a node name.
fn sequence(node: &str) -> &str {
    &node[node.len() - 10..]
}

fn is_upgrade_error(err: &Error) -> bool {
    matches!(err, Error::UpgradeNotSupported)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn participants_are_listed_per_kind() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let path = unique_path("rw-participants");
        const READERS: usize = 5;
        const WRITERS: usize = 3;

        let mut frameworks = Vec::new();
        let mut read_guards = Vec::new();
        for _ in 0..READERS {
            let fw = framework(&connect).await;
            let guard = tokio::time::timeout(PATIENCE, rw(&fw, &path).read_lock().lock())
                .await
                .unwrap()
                .unwrap();
            read_guards.push(guard);
            frameworks.push(fw);
        }
        let mut writers = Vec::new();
        for _ in 0..WRITERS {
            let fw = framework(&connect).await;
            let write = rw(&fw, &path).write_lock();
            writers.push(tokio::spawn(async move {
                write.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
                write.release().await.unwrap();
            }));
            frameworks.push(fw);
        }

        let observer = rw(&frameworks[0], &path);
        assert!(
            eventually(PATIENCE, || async {
                observer
                    .write_lock()
                    .participant_nodes()
                    .await
                    .unwrap()
                    .len()
                    == WRITERS
            })
            .await
        );
        let reads = observer.read_lock().participant_nodes().await.unwrap();
        let writes = observer.write_lock().participant_nodes().await.unwrap();
        assert_eq!(reads.len(), READERS);
        assert!(reads.iter().all(|p| p.contains("__READ__")), "{reads:?}");
        assert!(writes.iter().all(|p| p.contains("__WRIT__")), "{writes:?}");
        assert!(reads.iter().all(|p| p.starts_with(&format!("{path}/_c_"))));
        // The writers queue behind the readers, in sequence order.
        assert!(sequence(reads.last().unwrap()) < sequence(&writes[0]));

        // Every writer is listed (queued), and none got in past the readers.
        assert!(
            writers.iter().all(|w| !w.is_finished()),
            "writers wait for readers"
        );
        for guard in read_guards {
            guard.release().await.unwrap();
        }
        for writer in writers {
            tokio::time::timeout(PATIENCE, writer)
                .await
                .unwrap()
                .unwrap();
        }
        assert!(observer
            .read_lock()
            .participant_nodes()
            .await
            .unwrap()
            .is_empty());
        assert!(observer
            .write_lock()
            .participant_nodes()
            .await
            .unwrap()
            .is_empty());
        for fw in frameworks {
            fw.close().await;
        }
    })
    .await;
}

#[tokio::test]
async fn upgrade_is_refused_at_once() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("rw-upgrade");
        let (fw, raw) = session_and_raw(&server.connect_string()).await;
        let lock = rw(&fw, &path);
        let (read, write) = (lock.read_lock(), lock.write_lock());

        read.acquire().await.unwrap();
        let started = Instant::now();
        let err = write.acquire().await.unwrap_err();
        assert!(is_upgrade_error(&err), "{err:?}");
        let err = write
            .acquire_timeout(Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(is_upgrade_error(&err), "{err:?}");
        let err = write.lock().await.unwrap_err();
        assert!(is_upgrade_error(&err), "{err:?}");
        let err = write
            .try_lock_for(Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(is_upgrade_error(&err), "{err:?}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "refused at once, not after a wait: {:?}",
            started.elapsed()
        );
        assert!(!write.is_acquired_in_this_process());
        assert!(!write.is_owned_by_current_task());
        let nodes = children(&raw, &path).await;
        assert_eq!(nodes.len(), 1, "no write node left behind: {nodes:?}");
        assert!(nodes[0].contains("__READ__"));

        // A trait object gets the same answer.
        let dyn_write: Box<dyn InterProcessLock> = Box::new(write.clone());
        assert!(is_upgrade_error(
            &dyn_write
                .acquire_timeout(Duration::from_secs(1))
                .await
                .unwrap_err()
        ));

        // Once the read lock is released, the write lock is available.
        read.release().await.unwrap();
        assert!(write.acquire_timeout(Duration::from_secs(5)).await.unwrap());
        write.release().await.unwrap();
        assert!(children(&raw, &path).await.is_empty());
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn downgrade_on_one_task() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("rw-downgrade");
        let (fw, raw) = session_and_raw(&server.connect_string()).await;
        let lock = rw(&fw, &path);
        let (read, write) = (lock.read_lock(), lock.write_lock());

        write.acquire().await.unwrap();
        write.acquire().await.unwrap(); // reentrant write
        let write_node = write.node().unwrap().path().to_owned();
        let started = Instant::now();
        assert!(read.acquire_timeout(Duration::from_secs(5)).await.unwrap());
        assert!(started.elapsed() < Duration::from_secs(2));
        let read_node = read.node().unwrap().path().to_owned();
        assert!(read_node.contains("__READ__"));
        assert_eq!(
            sequence(&read_node),
            sequence(&write_node),
            "the read node sorts level with the write node"
        );
        assert!(read.fencing_token().unwrap() > write.fencing_token().unwrap());
        assert_eq!(children(&raw, &path).await.len(), 2);

        // Holding both, the write lock is still reentrant (not an upgrade).
        write.acquire().await.unwrap();
        for _ in 0..3 {
            write.release().await.unwrap();
        }
        assert!(!write.is_owned_by_current_task());
        assert!(read.is_owned_by_current_task());
        assert_eq!(children(&raw, &path).await, vec![name(&read_node)]);

        // Holding only the (downgraded) read lock, write is an upgrade again.
        assert!(is_upgrade_error(&write.acquire().await.unwrap_err()));
        read.release().await.unwrap();
        assert!(!read.is_acquired_in_this_process());
        assert!(children(&raw, &path).await.is_empty());
        assert_eq!(read.release().await, Err(Error::NotOwner));
        assert_eq!(write.release().await, Err(Error::NotOwner));
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_guard_downgrades_without_letting_a_writer_in() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("rw-guard-downgrade");
        let (fa, fb, raw) = two_sessions_and_raw(&server.connect_string()).await;
        let (mine, other) = (rw(&fa, &path), rw(&fb, &path));

        let write_guard = mine.write_lock().lock().await.unwrap();
        let write_token = write_guard.fencing_token();
        let write_node = name(write_guard.node().path());
        let queued = {
            let write = other.write_lock();
            tokio::spawn(async move {
                let guard = write.lock().await.unwrap();
                let token = guard.fencing_token();
                guard.release().await.unwrap();
                token
            })
        };
        wait_for_participants(&raw, &path, 2).await;

        let read_guard = write_guard.downgrade().await.unwrap();
        assert!(read_guard.node().path().contains("__READ__"));
        assert!(read_guard.fencing_token() > write_token);
        assert!(read_guard.is_valid());
        assert!(mine.read_lock().is_acquired_in_this_process());
        assert!(!mine.write_lock().is_acquired_in_this_process());
        // Our write node is gone: the queued writer, still listed, is behind
        // only the read node now, and stays queued.
        let now = wait_for_participants(&raw, &path, 2).await;
        assert!(!now.contains(&write_node), "{now:?}");
        assert!(!queued.is_finished(), "the queued writer stays queued");

        read_guard.release().await.unwrap();
        let queued_token = tokio::time::timeout(PATIENCE, queued)
            .await
            .unwrap()
            .unwrap();
        assert!(queued_token > write_token);
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
async fn downgrade_respects_owners() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("rw-downgrade-owners");
        let (fw, raw) = session_and_raw(&server.connect_string()).await;
        let lock = rw(&fw, &path);

        lock.write_lock().acquire().await.unwrap();
        let read = lock.read_lock();
        let got = tokio::spawn(async move {
            assert!(!read.is_owned_by_current_task());
            let started = Instant::now();
            let got = read.acquire_timeout(Duration::from_secs(1)).await.unwrap();
            (got, started.elapsed())
        })
        .await
        .unwrap();
        assert!(!got.0, "another task may not read while this one writes");
        assert!(got.1 >= Duration::from_millis(900));
        // The write owner itself may: a read guard it takes is a downgrade.
        let guard = lock
            .read_lock()
            .try_lock_for(Duration::from_millis(300))
            .await
            .unwrap()
            .unwrap();
        guard.release().await.unwrap();
        lock.write_lock().release().await.unwrap();
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &path).await.is_empty()
            })
            .await,
            "the timed-out reader left nothing: {:?}",
            children(&raw, &path).await
        );
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contending_downgrade_keeps_the_queued_writer_out() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("rw-contending-downgrade");
        let (fa, fb) = (
            framework(&server.connect_string()).await,
            framework(&server.connect_string()).await,
        );
        let (lock1, lock2) = (rw(&fa, &path), rw(&fb, &path));

        lock1.write_lock().acquire().await.unwrap();
        let queued = {
            let write = lock2.write_lock();
            tokio::spawn(async move {
                write.acquire().await.unwrap();
                write.release().await.unwrap();
            })
        };
        assert!(
            eventually(PATIENCE, || async {
                lock1.write_lock().participant_nodes().await.unwrap().len() == 2
            })
            .await
        );
        assert!(lock1
            .read_lock()
            .acquire_timeout(Duration::from_secs(5))
            .await
            .unwrap());
        lock1.write_lock().release().await.unwrap();
        // Only the queued writer's write node is left, behind our read node.
        assert!(
            eventually(PATIENCE, || async {
                lock1.write_lock().participant_nodes().await.unwrap().len() == 1
                    && lock1.read_lock().participant_nodes().await.unwrap().len() == 1
            })
            .await
        );
        assert!(
            !queued.is_finished(),
            "CURATOR-621: the queued writer must not get in while the downgraded read is held"
        );
        lock1.read_lock().release().await.unwrap();
        tokio::time::timeout(PATIENCE, queued)
            .await
            .unwrap()
            .unwrap();
        fa.close().await;
        fb.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_stress_writers_are_exclusive_and_readers_overlap() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let path = unique_path("rw-stress");
        const CLIENTS: u64 = 8;
        const ITERATIONS: usize = 30;

        #[derive(Default)]
        struct Counters {
            readers: AtomicUsize,
            writers: AtomicUsize,
            max_readers: AtomicUsize,
            violations: AtomicUsize,
            reads: AtomicUsize,
            writes: AtomicUsize,
        }
        let counters = Arc::new(Counters::default());
        let started = Instant::now();
        let mut frameworks = Vec::new();
        let mut tasks = Vec::new();
        for client in 0..CLIENTS {
            let fw = framework(&connect).await;
            let lock = rw(&fw, &path);
            frameworks.push(fw);
            let c = counters.clone();
            tasks.push(tokio::spawn(async move {
                let (read, write) = (lock.read_lock(), lock.write_lock());
                let mut seed = client * 7919 + 17;
                for i in 0..ITERATIONS {
                    seed = seed
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let is_write = (seed >> 33) % 100 < 15 || (client == 0 && i == 3);
                    if is_write {
                        assert!(write.acquire_timeout(PATIENCE).await.unwrap());
                        if c.writers.fetch_add(1, Ordering::SeqCst) != 0
                            || c.readers.load(Ordering::SeqCst) != 0
                        {
                            c.violations.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        if c.readers.load(Ordering::SeqCst) != 0 {
                            c.violations.fetch_add(1, Ordering::SeqCst);
                        }
                        c.writers.fetch_sub(1, Ordering::SeqCst);
                        c.writes.fetch_add(1, Ordering::SeqCst);
                        write.release().await.unwrap();
                    } else {
                        assert!(read.acquire_timeout(PATIENCE).await.unwrap());
                        let now = c.readers.fetch_add(1, Ordering::SeqCst) + 1;
                        c.max_readers.fetch_max(now, Ordering::SeqCst);
                        if c.writers.load(Ordering::SeqCst) != 0 {
                            c.violations.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(15)).await;
                        if c.writers.load(Ordering::SeqCst) != 0 {
                            c.violations.fetch_add(1, Ordering::SeqCst);
                        }
                        c.readers.fetch_sub(1, Ordering::SeqCst);
                        c.reads.fetch_add(1, Ordering::SeqCst);
                        read.release().await.unwrap();
                    }
                }
            }));
        }
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .unwrap()
                .unwrap();
        }
        let (reads, writes) = (
            counters.reads.load(Ordering::SeqCst),
            counters.writes.load(Ordering::SeqCst),
        );
        eprintln!(
            "stress: {reads} reads, {writes} writes, max {} concurrent readers, {:?}",
            counters.max_readers.load(Ordering::SeqCst),
            started.elapsed()
        );
        assert_eq!(counters.violations.load(Ordering::SeqCst), 0);
        assert_eq!(reads + writes, CLIENTS as usize * ITERATIONS);
        assert!(writes > 0 && reads > 0);
        assert!(
            counters.max_readers.load(Ordering::SeqCst) > 1,
            "some reads overlapped"
        );
        let raw = raw_client(&connect).await;
        assert!(children(&raw, &path).await.is_empty());
        for fw in frameworks {
            fw.close().await;
        }
    })
    .await;
}

/// A reader arriving while only readers hold, but behind a queued writer,
/// waits for that writer: it parks on a watch of the writer's node, is not
/// even woken while the writer holds, and gets in only after the writer is
/// out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reader_behind_a_queued_writer_waits() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let path = unique_path("rw-fifo");
        // The late reader talks through a proxy, so that its requests show.
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let (fa, fb, fc) = (
            framework(&connect).await,
            framework(&connect).await,
            framework(&proxy.connect_string()).await,
        );
        let (first, writer, late) = (rw(&fa, &path), rw(&fb, &path), rw(&fc, &path));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (let_go, released) = tokio::sync::oneshot::channel::<()>();

        let first_guard = first.read_lock().lock().await.unwrap();
        let write_task = {
            let (write, tx) = (writer.write_lock(), tx.clone());
            tokio::spawn(async move {
                let guard = write.lock().await.unwrap();
                tx.send("writer in").unwrap();
                released.await.unwrap();
                tx.send("writer out").unwrap();
                guard.release().await.unwrap();
            })
        };
        assert!(
            eventually(PATIENCE, || async {
                first.write_lock().participant_nodes().await.unwrap().len() == 1
            })
            .await
        );
        let writer_node = first.write_lock().participant_nodes().await.unwrap()[0].clone();
        // Only a reader holds the lock, yet a new reader must wait behind the
        // queued writer.
        assert!(late
            .read_lock()
            .try_lock_for(Duration::from_millis(500))
            .await
            .unwrap()
            .is_none());
        proxy.clear_traffic();
        let read_task = {
            let (read, tx) = (late.read_lock(), tx.clone());
            tokio::spawn(async move {
                let guard = read.lock().await.unwrap();
                tx.send("late reader in").unwrap();
                guard.release().await.unwrap();
            })
        };
        // The late reader parks on a watch of the writer's node: its read of
        // that node (which sets the watch) is answered.
        assert!(
            eventually(PATIENCE, || async { watch_answered(&proxy, &writer_node) }).await,
            "the late reader never watched the writer's node {writer_node}"
        );
        assert!(rx.try_recv().is_err(), "a parked reader got in");

        first_guard.release().await.unwrap();
        assert_eq!(
            tokio::time::timeout(PATIENCE, rx.recv()).await.unwrap(),
            Some("writer in")
        );
        // Every notification the first reader's release and the writer's
        // grant can cause has reached the late reader, and a woken task has
        // had its round trip to act: it was not woken at all, so it still
        // waits while the writer holds.
        notifications_delivered(std::slice::from_ref(&fc), &path).await;
        assert_eq!(
            fc.metrics().lock_wakeups(),
            0,
            "the late reader was woken while the writer held"
        );
        assert!(
            rx.try_recv().is_err(),
            "the late reader got in past the writer"
        );

        let_go.send(()).unwrap();
        let mut order = Vec::new();
        for _ in 0..2 {
            order.push(
                tokio::time::timeout(PATIENCE, rx.recv())
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        assert_eq!(order, ["writer out", "late reader in"]);
        write_task.await.unwrap();
        read_task.await.unwrap();
        for fw in [fa, fb, fc] {
            fw.close().await;
        }
    })
    .await;
}

/// Whether a read of `node` (a watch-setting `getData`) went through the
/// proxy and was answered.
fn watch_answered(proxy: &FaultProxy, node: &str) -> bool {
    let traffic = proxy.traffic();
    let reads: Vec<i32> = traffic
        .iter()
        .filter_map(|t| match t {
            Traffic::Request {
                xid,
                opcode: opcode::GET_DATA,
                path: Some(path),
            } if path == node => Some(*xid),
            _ => None,
        })
        .collect();
    traffic.iter().any(|t| match t {
        Traffic::Reply { xid, .. } => reads.contains(xid),
        Traffic::Request { .. } => false,
    })
}

/// Readers watch the nearest writer ahead of them, so a release wakes only
/// the participants it can admit (Curator's readers all watch the first
/// writer: here that would be three wakeups instead of one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_behind_different_writers_are_not_a_herd() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let path = unique_path("rw-herd");
        let (holder_fw, raw) = session_and_raw(&connect).await;
        let head = rw(&holder_fw, &path).write_lock().lock().await.unwrap();

        // Queue: W0 (held), R1, W2, R3, R4.
        let plan = [false, true, false, false];
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut frameworks = Vec::new();
        let mut releases = Vec::new();
        let mut tasks = Vec::new();
        for (i, is_write) in plan.into_iter().enumerate() {
            let fw = framework(&connect).await;
            frameworks.push(fw.clone());
            let lock = rw(&fw, &path);
            let tx = tx.clone();
            let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
            releases.push(Some(release_tx));
            tasks.push(tokio::spawn(async move {
                if is_write {
                    let guard = lock.write_lock().lock().await.unwrap();
                    tx.send(i).unwrap();
                    let _ = release_rx.await;
                    guard.release().await.unwrap();
                } else {
                    let guard = lock.read_lock().lock().await.unwrap();
                    tx.send(i).unwrap();
                    let _ = release_rx.await;
                    guard.release().await.unwrap();
                }
            }));
            wait_for_participants(&raw, &path, i + 2).await;
        }
        let wakeups =
            |fws: &[Framework]| fws.iter().map(|f| f.metrics().lock_wakeups()).sum::<u64>();
        // Before a release nothing has changed that could wake anyone.
        // After each release below, every session has read past it (so every
        // notification it caused has arrived, see `notifications_delivered`)
        // before the wake-ups are counted: a waiter that watched the wrong
        // node would have been woken by then.
        let settle = || notifications_delivered(&frameworks, &path);
        assert_eq!(wakeups(&frameworks), 0);
        assert!(rx.try_recv().is_err());

        head.release().await.unwrap();
        let got = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, 0, "R1 reads");
        settle().await;
        assert!(rx.try_recv().is_err(), "R3 and R4 wait behind W2");
        assert_eq!(wakeups(&frameworks), 1, "only R1 woke");

        releases[0].take().unwrap().send(()).unwrap();
        let got = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, 1, "W2 writes");
        settle().await;
        assert_eq!(wakeups(&frameworks), 2, "only W2 woke");

        releases[1].take().unwrap().send(()).unwrap();
        let mut batch = Vec::new();
        for _ in 0..2 {
            batch.push(
                tokio::time::timeout(PATIENCE, rx.recv())
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        batch.sort_unstable();
        assert_eq!(batch, [2, 3], "R3 and R4 read together");
        settle().await;
        assert_eq!(wakeups(&frameworks), 4);
        for release in releases.iter_mut().filter_map(Option::take) {
            release.send(()).unwrap();
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &path).await.is_empty()
            })
            .await
        );
        for fw in frameworks {
            fw.close().await;
        }
        holder_fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn dropped_acquires_leave_no_node() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("rw-cancel");
        let (fa, fb, raw) = two_sessions_and_raw(&server.connect_string()).await;
        let holder = rw(&fa, &path).write_lock().lock().await.unwrap();
        let waiter = rw(&fb, &path);
        let (read, write) = (waiter.read_lock(), waiter.write_lock());

        let ours = name(holder.node().path());
        // Each acquire below is dropped once it waits: its node is listed
        // behind the holder's (the previous one's node gone first, so the
        // new node is told apart from it).
        let only_holder = || async {
            assert!(
                eventually(PATIENCE, || async {
                    children(&raw, &path).await == vec![ours.clone()]
                })
                .await,
                "a dropped acquire's node stayed: {:?}",
                children(&raw, &path).await
            );
        };

        // A waiting read acquire and a waiting write acquire, dropped by select!.
        only_holder().await;
        tokio::select! {
            _ = read.acquire() => panic!("must not get the read lock"),
            _ = wait_for_participants(&raw, &path, 2) => {}
        }
        only_holder().await;
        tokio::select! {
            _ = write.acquire() => panic!("must not get the write lock"),
            _ = wait_for_participants(&raw, &path, 2) => {}
        }
        // ... the guard API's, likewise (as a timeout around it would) ...
        only_holder().await;
        tokio::select! {
            _ = read.lock() => panic!("must not get a read guard"),
            _ = wait_for_participants(&raw, &path, 2) => {}
        }
        only_holder().await;
        tokio::select! {
            _ = write.lock() => panic!("must not get a write guard"),
            _ = wait_for_participants(&raw, &path, 2) => {}
        }
        // ... by aborting the task once both wait ...
        only_holder().await;
        let tasks = [
            {
                let read = read.clone();
                tokio::spawn(async move { read.acquire().await })
            },
            {
                let write = write.clone();
                tokio::spawn(async move { write.acquire().await })
            },
        ];
        // Both wait: each with a node behind the holder's, or one of them in
        // this process's queue behind the other.
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &path).await.len() + fb.locally_queued(&path) == 3
            })
            .await,
            "the two acquires never both waited: {:?}, {} queued in the process",
            children(&raw, &path).await,
            fb.locally_queued(&path)
        );
        for task in &tasks {
            assert!(!task.is_finished(), "an acquire got in past the holder");
            task.abort();
        }
        // ... and right after sending, before any reply.
        for _ in 0..3 {
            let fut = read.acquire();
            futures::pin_mut!(fut);
            assert!(futures::poll!(fut.as_mut()).is_pending());
            let fut = write.acquire();
            futures::pin_mut!(fut);
            assert!(futures::poll!(fut.as_mut()).is_pending());
        }
        assert!(!read.is_acquired_in_this_process());
        assert!(!write.is_acquired_in_this_process());
        assert!(fb.wait_for_background_cleanup(PATIENCE).await);
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &path).await == vec![ours.clone()]
            })
            .await,
            "only the holder's node remains: {:?}",
            children(&raw, &path).await
        );
        assert_eq!(read.release().await, Err(Error::NotOwner));
        assert_eq!(write.release().await, Err(Error::NotOwner));
        holder.release().await.unwrap();
        assert!(children(&raw, &path).await.is_empty());
        fa.close().await;
        fb.close().await;
    })
    .await;
}

#[tokio::test]
async fn node_data_is_copied_and_stored() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("rw-data");
        let (fw, raw) = session_and_raw(&server.connect_string()).await;
        let mut data = b"host-a:4711".to_vec();
        let lock = InterProcessReadWriteLock::with_data(fw.clone(), &path, &data).unwrap();
        data[0] = b'X'; // the lock keeps its own copy

        let (read, write) = (lock.read_lock(), lock.write_lock());
        write.acquire().await.unwrap();
        read.acquire().await.unwrap(); // downgrade node
        let guard = rw(&fw, &path)
            .read_lock()
            .try_lock_for(Duration::from_millis(200))
            .await;
        assert!(guard.unwrap().is_none(), "another instance's reader waits");
        for node in [
            write.node().unwrap().path().to_owned(),
            read.node().unwrap().path().to_owned(),
        ] {
            let (stored, _) = raw.get_data(&node).await.unwrap();
            assert_eq!(stored, b"host-a:4711", "{node}");
        }
        write.release().await.unwrap();
        read.release().await.unwrap();
        let guard = read.lock().await.unwrap();
        let (stored, _) = raw.get_data(guard.node().path()).await.unwrap();
        assert_eq!(stored, b"host-a:4711");
        guard.release().await.unwrap();

        // Bad input is refused before anything is sent.
        let too_big = vec![0u8; 2 * 1024 * 1024];
        assert!(matches!(
            InterProcessReadWriteLock::with_data(fw.clone(), &path, &too_big),
            Err(Error::RequestTooLarge { .. })
        ));
        for bad in ["", "relative", "/", "/trailing/", "/zookeeper/x"] {
            assert!(matches!(
                InterProcessReadWriteLock::new(fw.clone(), bad),
                Err(Error::InvalidPath(_))
            ));
        }
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_and_trait_objects() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("rw-guards");
        let (fa, fb, raw) = two_sessions_and_raw(&server.connect_string()).await;
        let (a, b) = (rw(&fa, &path), rw(&fb, &path));

        // Two sessions read together; a writer cannot get in.
        let ra = a.read_lock().lock().await.unwrap();
        let rb = b
            .read_lock()
            .try_lock_for(Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        assert!(ra.is_valid() && rb.is_valid());
        assert!(a.read_lock().is_acquired_in_this_process());
        assert!(
            !a.read_lock().is_owned_by_current_task(),
            "a guard is not a task hold"
        );
        assert_eq!(a.read_lock().release().await, Err(Error::NotOwner));
        // (Through an instance of its own: this task holds read guards of
        // `a` and `b`, which would refuse it an upgrade at once.)
        assert!(rw(&fb, &path)
            .write_lock()
            .try_lock_for(Duration::from_millis(300))
            .await
            .unwrap()
            .is_none());
        assert_eq!(
            b.write_lock()
                .try_lock_for(Duration::from_secs(10))
                .await
                .map(|g| g.is_some()),
            Err(Error::UpgradeNotSupported)
        );
        // A dropped guard releases in the background.
        drop(ra);
        assert!(!a.read_lock().is_acquired_in_this_process());
        let rb_token = rb.fencing_token();
        rb.release().await.unwrap();
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &path).await.is_empty()
            })
            .await
        );

        // Both halves work as `dyn InterProcessLock`.
        let read: Box<dyn InterProcessLock> = Box::new(a.read_lock());
        let write: Box<dyn InterProcessLock> = Box::new(b.write_lock());
        assert_eq!(read.paths(), vec![path.as_str()]);
        assert!(read.acquire_timeout(Duration::from_secs(5)).await.unwrap());
        assert_eq!(read.participant_nodes().await.unwrap().len(), 1);
        assert!(!write
            .acquire_timeout(Duration::from_millis(300))
            .await
            .unwrap());
        // The timed-out write node is deleted in the background.
        assert!(
            eventually(PATIENCE, || async {
                write.participant_nodes().await.unwrap().is_empty()
            })
            .await
        );
        read.release().await.unwrap();
        assert!(write.acquire_timeout(Duration::from_secs(5)).await.unwrap());
        assert!(b.write_lock().fencing_token().unwrap() > rb_token);
        assert!(write.is_acquired_in_this_process());
        write.release().await.unwrap();
        assert!(children(&raw, &path).await.is_empty());
        fa.close().await;
        fb.close().await;
    })
    .await;
}

/// Curator's testLockPath, plus: a write lock lost with its session cannot
/// be downgraded.
#[tokio::test]
async fn killed_writer_session_lets_readers_in() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("rw-killed");
        let (fa, fb, raw) = two_sessions_and_raw(&server.connect_string()).await;
        let (lock1, lock2) = (rw(&fa, &path), rw(&fb, &path));

        lock1.write_lock().acquire().await.unwrap();
        let write_node = lock1.write_lock().node().unwrap().path().to_owned();
        let client = fa.client().await.unwrap();
        zk_curator_testing::expire_session(&server.connect_string(), &client)
            .await
            .unwrap();
        assert!(lock2.read_lock().acquire_timeout(PATIENCE).await.unwrap());
        assert!(raw.check_stat(&write_node).await.unwrap().is_none());

        let err = tokio::time::timeout(PATIENCE, lock1.read_lock().acquire())
            .await
            .unwrap()
            .unwrap_err();
        assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
        assert!(!lock1.read_lock().is_owned_by_current_task());
        // The dead write hold is released at once, with a typed result.
        assert!(matches!(
            lock1.write_lock().release().await,
            Err(Error::LockLost { .. })
        ));
        lock2.read_lock().release().await.unwrap();
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
