//! Cohort hand-off (`FrameworkBuilder::cohort`): a released node passes to
//! the next task of the same framework that waits for the lock, with no
//! request, for a bounded run; the old hold ends at the pass, tokens keep
//! growing, and there is never a pass after a loss.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    bounded, children, eventually, framework, framework_with, joined, patient, raw_client,
    request_opcodes, server, unique_path, wait_for_participants, BOUND, PATIENCE,
};
use zk_curator::{
    CohortPolicy, Error, FencingToken, Framework, InterProcessMultiLock, InterProcessMutex,
    InterProcessReadWriteLock, InterProcessSemaphoreMutex, InterProcessSemaphoreV2, LockLoss,
};
use zk_curator_testing::FaultProxy;

/// A framework on `connect` with cohort hand-off under `policy`.
async fn cohort_framework(connect: &str, policy: CohortPolicy) -> Framework {
    framework_with(connect, |b| b.cohort(policy)).await
}

/// Spawns a task that waits for `mutex` and returns its guard; returns once
/// the task is seen in the framework's local queue (`queued` waiters in
/// all).
async fn queue_waiter(
    fw: &Framework,
    mutex: &InterProcessMutex,
    queued: usize,
) -> tokio::task::JoinHandle<zk_curator::Result<zk_curator::MutexGuard>> {
    let waiter = {
        let mutex = mutex.clone();
        tokio::spawn(async move { mutex.lock().await })
    };
    let path = mutex.path().to_owned();
    assert!(
        eventually(PATIENCE, || async { fw.locally_queued(&path) == queued }).await,
        "the waiter never queued"
    );
    waiter
}

/// The pass: no request between the holder's release and the waiter's
/// acquire returning; the same node, a greater token, and the old hold (and
/// its fence) over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_sends_no_request_and_ends_the_old_hold() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("cohort-pass");
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = cohort_framework(&proxy.connect_string(), patient()).await;
        let raw = raw_client(&server.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let holder = mutex.lock().await.unwrap();
        let old_token = holder.fencing_token();
        let old_fence = holder.fence().unwrap();
        let old_hold = zk_curator::Hold::clone(&holder);
        let waiter = queue_waiter(&fw, &mutex, 1).await;

        proxy.clear_traffic();
        holder.release().await.unwrap();
        let guard = joined(waiter).await;
        let sent = request_opcodes(&proxy);
        assert!(sent.is_empty(), "a pass sent requests: {sent:?}");
        assert_eq!(fw.metrics().lock_passes(), 1);

        // The same node, with the next token.
        assert_eq!(
            guard.fencing_token(),
            FencingToken::passed(old_token.get(), 1)
        );
        assert!(guard.fencing_token() > old_token);
        assert_eq!(children(&raw, &path).await.len(), 1);
        assert!(guard.is_valid());
        // The old hold is over for every clone: its fence refuses without
        // sending anything, and its loss signal has fired.
        assert_eq!(old_hold.loss(), Some(LockLoss::NotHeld));
        tokio::time::timeout(PATIENCE, old_hold.lost())
            .await
            .unwrap();
        proxy.clear_traffic();
        let refused = old_fence.set_data(&path, b"stale", None).await;
        assert!(
            matches!(refused, Err(Error::LockLost { .. })),
            "{refused:?}"
        );
        assert!(
            request_opcodes(&proxy).is_empty(),
            "a refused fence sent a request"
        );
        // The new holder's fenced write goes through.
        guard
            .fence()
            .unwrap()
            .set_data(&path, b"fresh", None)
            .await
            .unwrap();

        // Nobody waits: the release deletes the node.
        guard.release().await.unwrap();
        assert!(children(&raw, &path).await.is_empty());
        fw.close().await;
    })
    .await;
}

/// Many tasks of one framework: one holder at a time, tokens strictly
/// growing in the order holds began, runs of at most `max_passes` passes,
/// and fewer nodes than holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_keep_one_holder_and_growing_tokens_within_the_bound() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("cohort-many");
        let max_passes = 4;
        let policy = CohortPolicy::new(max_passes, Duration::from_secs(30));
        let fw = cohort_framework(&server.connect_string(), policy).await;
        let raw = raw_client(&server.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let busy = Arc::new(AtomicBool::new(false));
        let tokens = Arc::new(Mutex::new(Vec::new()));
        let holder = mutex.lock().await.unwrap();
        let tasks = 24;
        let mut handles = Vec::new();
        for index in 0..tasks {
            let (mutex, busy, tokens) = (mutex.clone(), busy.clone(), tokens.clone());
            handles.push(tokio::spawn(async move {
                let guard = mutex.lock().await.unwrap();
                assert!(!busy.swap(true, Ordering::SeqCst), "two holders at once");
                tokens.lock().unwrap().push(guard.fencing_token());
                tokio::task::yield_now().await;
                busy.store(false, Ordering::SeqCst);
                guard.release().await.unwrap();
            }));
            assert!(eventually(PATIENCE, || async { fw.locally_queued(&path) == index + 1 }).await);
        }
        holder.release().await.unwrap();
        for handle in handles {
            tokio::time::timeout(PATIENCE, handle)
                .await
                .unwrap()
                .unwrap();
        }
        let tokens = tokens.lock().unwrap().clone();
        assert_eq!(tokens.len(), tasks);
        for pair in tokens.windows(2) {
            assert!(pair[0] < pair[1], "tokens must grow: {tokens:?}");
        }
        assert!(
            tokens.iter().all(|t| t.pass() <= max_passes),
            "a run passed more than {max_passes} times: {tokens:?}"
        );
        // The holder's run, then runs of at most five holds each.
        let nodes: std::collections::BTreeSet<i64> = tokens.iter().map(|t| t.get()).collect();
        assert!(
            nodes.len() >= tasks / (max_passes as usize + 1),
            "{tokens:?}"
        );
        assert!(nodes.len() < tasks, "nothing was passed: {tokens:?}");
        assert!(fw.metrics().lock_passes() >= (tasks - nodes.len()) as u64);
        assert!(children(&raw, &path).await.is_empty());
        fw.close().await;
    })
    .await;
}

/// Bounded turns for others: a waiter of another session gets the lock
/// after at most `max_passes` passes of a busy process, and a run ends once
/// it has held for `max_hold`, whatever the pass count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_session_gets_its_turn_within_the_bound() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        for (max_passes, max_hold, hold_for) in [
            (3, Duration::from_secs(30), Duration::ZERO),
            (10_000, Duration::from_millis(100), Duration::from_millis(10)),
        ] {
            let path = unique_path("cohort-fair");
            let policy = CohortPolicy::new(max_passes, max_hold);
            let busy_fw = cohort_framework(&server.connect_string(), policy).await;
            let other_fw = framework(&server.connect_string()).await;
            let raw = raw_client(&server.connect_string()).await;
            let mutex = InterProcessMutex::new(busy_fw.clone(), &path).unwrap();
            // Four tasks of the busy process take the lock over and over.
            let stop = Arc::new(AtomicBool::new(false));
            let holds = Arc::new(AtomicUsize::new(0));
            let tokens = Arc::new(Mutex::new(Vec::new()));
            let holder = mutex.lock().await.unwrap();
            let mut workers = Vec::new();
            for index in 0..4 {
                let (mutex, stop, holds, tokens) =
                    (mutex.clone(), stop.clone(), holds.clone(), tokens.clone());
                workers.push(tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let guard = mutex.lock().await.unwrap();
                        holds.fetch_add(1, Ordering::SeqCst);
                        tokens.lock().unwrap().push(guard.fencing_token());
                        tokio::time::sleep(hold_for).await;
                        guard.release().await.unwrap();
                    }
                }));
                assert!(
                    eventually(PATIENCE, || async { busy_fw.locally_queued(&path) == index + 1 })
                        .await
                );
            }
            // The other session queues behind the holder's node.
            // It counts the busy process's holds when it gets the lock: the
            // ones that went first (holds after its release do not count).
            let other = {
                let mutex = InterProcessMutex::new(other_fw.clone(), &path).unwrap();
                let holds = holds.clone();
                tokio::spawn(async move {
                    let started = std::time::Instant::now();
                    let guard = mutex.lock().await.unwrap();
                    let (waited, holds_then) = (started.elapsed(), holds.load(Ordering::SeqCst));
                    guard.release().await.unwrap();
                    (waited, holds_then)
                })
            };
            wait_for_participants(&raw, &path, 2).await;
            let before = holds.load(Ordering::SeqCst);
            holder.release().await.unwrap();
            let (waited, holds_then) = tokio::time::timeout(PATIENCE, other)
                .await
                .expect("the other session starved")
                .unwrap();
            let busy_holds = holds_then - before;
            stop.store(true, Ordering::SeqCst);
            for worker in workers {
                tokio::time::timeout(PATIENCE, worker).await.unwrap().unwrap();
            }
            println!(
                "max_passes {max_passes}, max_hold {max_hold:?}: the other session waited {waited:?}, \
                 behind {busy_holds} holds of the busy one"
            );
            if max_passes < 1000 {
                // The holder's run: the holder and at most `max_passes`
                // tasks it passed to (one more hold may begin after the
                // other session's, racing its release).
                assert!(
                    busy_holds <= max_passes as usize + 1,
                    "{busy_holds} holds of the busy process went first"
                );
            }
            // No run outlasts `max_hold` by more than one hold: with
            // 10 ms holds and a 100 ms bound, no node carries 50 holds.
            let tokens = tokens.lock().unwrap().clone();
            let longest = tokens
                .iter()
                .fold(std::collections::BTreeMap::new(), |mut runs, t| {
                    *runs.entry(t.get()).or_insert(0usize) += 1;
                    runs
                })
                .into_values()
                .max()
                .unwrap_or(0);
            assert!(longest <= max_passes as usize + 1, "{longest}");
            if !hold_for.is_zero() {
                assert!(longest < 50, "a run of {longest} holds outlasted max_hold");
            }
            busy_fw.close().await;
            other_fw.close().await;
        }
    })
    .await;
}

/// A hold lost (the link broke: `Suspended`) is never passed: its release
/// reports the loss, and the waiting task queues a node of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_pass_after_a_loss() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("cohort-loss");
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = cohort_framework(&proxy.connect_string(), patient()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let holder = mutex.lock().await.unwrap();
        let token = holder.fencing_token();
        let waiter = queue_waiter(&fw, &mutex, 1).await;
        proxy.drop_connections();
        tokio::time::timeout(PATIENCE, holder.lost())
            .await
            .expect("the hold was never found lost");
        let released = holder.release().await;
        assert!(
            matches!(released, Err(Error::LockLost { .. })),
            "{released:?}"
        );
        let guard = joined(waiter).await;
        assert_eq!(fw.metrics().lock_passes(), 0);
        assert_ne!(
            guard.fencing_token().get(),
            token.get(),
            "the lost node was passed"
        );
        assert_eq!(guard.fencing_token().pass(), 0);
        guard.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

/// A waiter dropped before the release gets nothing, and with nobody left
/// the release deletes the node; with another waiter behind it, that one
/// gets the pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_never_receives_a_pass() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("cohort-cancel");
        let fw = cohort_framework(&server.connect_string(), patient()).await;
        let raw = raw_client(&server.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();

        let holder = mutex.lock().await.unwrap();
        let cancelled = queue_waiter(&fw, &mutex, 1).await;
        cancelled.abort();
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&path) == 0 }).await);
        holder.release().await.unwrap();
        assert!(children(&raw, &path).await.is_empty());
        assert_eq!(fw.metrics().lock_passes(), 0);

        let holder = mutex.lock().await.unwrap();
        let cancelled = queue_waiter(&fw, &mutex, 1).await;
        let next = queue_waiter(&fw, &mutex, 2).await;
        cancelled.abort();
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&path) == 1 }).await);
        let token = holder.fencing_token();
        holder.release().await.unwrap();
        let guard = joined(next).await;
        assert_eq!(guard.fencing_token(), FencingToken::passed(token.get(), 1));
        assert!(cancelled.await.unwrap_err().is_cancelled());
        guard.release().await.unwrap();
        assert!(children(&raw, &path).await.is_empty());
        fw.close().await;
    })
    .await;
}

/// A revocable acquire neither gives nor takes a passed node: the node is
/// deleted and the acquire queues its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocable_acquire_takes_no_pass() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("cohort-revocable");
        let fw = cohort_framework(&server.connect_string(), patient()).await;
        let plain = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let revocable = InterProcessMutex::new(fw.clone(), &path).unwrap();
        revocable.make_revocable(|_: &str| {});
        let holder = plain.lock().await.unwrap();
        let token = holder.fencing_token();
        let waiter = queue_waiter(&fw, &revocable, 1).await;
        holder.release().await.unwrap();
        let guard = joined(waiter).await;
        assert!(guard.fencing_token().get() > token.get());
        assert_eq!(fw.metrics().lock_passes(), 0);
        guard.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

/// A write hold that was downgraded keeps its node from passing: the read
/// node level with it must not end up beside another writer of the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgraded_write_node_is_not_passed() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("cohort-downgrade");
        let fw = cohort_framework(&server.connect_string(), patient()).await;
        let raw = raw_client(&server.connect_string()).await;
        let lock = InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();
        let write = lock.write_lock().lock().await.unwrap();
        let writer = {
            let lock = lock.clone();
            tokio::spawn(async move { lock.write_lock().lock().await })
        };
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&path) == 1 }).await);
        let read = write.downgrade().await.unwrap();
        // The other writer queues a node of its own, behind our read node.
        let nodes = wait_for_participants(&raw, &path, 2).await;
        assert_eq!(fw.metrics().lock_passes(), 0, "{nodes:?}");
        assert!(!writer.is_finished(), "a writer got in beside a reader");
        read.release().await.unwrap();
        let guard = joined(writer).await;
        guard.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

/// Reentrancy is unchanged: a task's nested holds are one hold, passed on
/// only when the task's last level is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentrant_hold_passes_at_its_last_release() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("cohort-reentrant");
        let fw = cohort_framework(&server.connect_string(), patient()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let (token_tx, token_rx) = tokio::sync::oneshot::channel();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        let (inner_tx, inner_rx) = tokio::sync::oneshot::channel::<()>();
        let (finish_tx, finish_rx) = tokio::sync::oneshot::channel::<()>();
        let holder = {
            let mutex = mutex.clone();
            tokio::spawn(async move {
                mutex.acquire().await.unwrap();
                mutex.acquire().await.unwrap();
                token_tx.send(mutex.fencing_token().unwrap()).unwrap();
                go_rx.await.unwrap();
                // One level given back: still held, nothing passes.
                mutex.release().await.unwrap();
                assert!(mutex.is_valid());
                inner_tx.send(()).unwrap();
                finish_rx.await.unwrap();
                mutex.release().await.unwrap();
            })
        };
        let token = token_rx.await.unwrap();
        let waiter = queue_waiter(&fw, &mutex, 1).await;
        go_tx.send(()).unwrap();
        inner_rx.await.unwrap();
        assert_eq!(fw.metrics().lock_passes(), 0);
        assert_eq!(fw.locally_queued(&path), 1, "the waiter still waits");
        finish_tx.send(()).unwrap();
        holder.await.unwrap();
        let guard = joined(waiter).await;
        assert_eq!(guard.fencing_token(), FencingToken::passed(token.get(), 1));
        guard.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

/// A multi-lock's members pass as members: a multi-lock of the same
/// framework waiting for a member receives that member's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_receives_its_members_by_pass() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let (a, b) = (unique_path("cohort-multi-a"), unique_path("cohort-multi-b"));
        let fw = cohort_framework(&server.connect_string(), patient()).await;
        let first = InterProcessMultiLock::from_paths(fw.clone(), &[&a, &b]).unwrap();
        let second = InterProcessMultiLock::from_paths(fw.clone(), &[&a, &b]).unwrap();
        first.acquire().await.unwrap();
        let tokens = first.fence().unwrap().fencing_tokens();
        let waiter = {
            let second = second.clone();
            tokio::spawn(async move {
                second.acquire().await.unwrap();
                let tokens = second.fence().unwrap().fencing_tokens();
                second.release().await.unwrap();
                tokens
            })
        };
        // The waiter queues for the first member (sorted by path) locally.
        assert!(
            eventually(PATIENCE, || async {
                fw.locally_queued(&a) + fw.locally_queued(&b) == 1
            })
            .await
        );
        first.release().await.unwrap();
        let received = tokio::time::timeout(PATIENCE, waiter)
            .await
            .unwrap()
            .unwrap();
        // The member it waited for came by pass. The next member is passed
        // too if the waiter queues for it before the holder gives it back,
        // which a release that returns at once (a pass sends nothing)
        // rarely allows: it is either passed or queued anew.
        assert_eq!(received[0], FencingToken::passed(tokens[0].get(), 1));
        assert!(received[1] > tokens[1], "{received:?} after {tokens:?}");
        assert!(fw.metrics().lock_passes() >= 1);
        fw.close().await;
    })
    .await;
}

/// A semaphore's leases pass too: a semaphore mutex passes its lease to the
/// task of the process that waits for it (holding the internal mutex,
/// which in turn passes to the task behind it), with no request between
/// the holder's release and the next task's acquire returning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_mutex_passes_its_lease_with_no_request() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("cohort-semaphore");
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = cohort_framework(&proxy.connect_string(), patient()).await;
        let raw = raw_client(&server.connect_string()).await;
        let holder = InterProcessSemaphoreMutex::new(fw.clone(), &path).unwrap();
        holder.acquire().await.unwrap();
        let token = holder.fencing_token().unwrap();
        let (locks, leases) = (format!("{path}/locks"), format!("{path}/leases"));
        let spawn_waiter = || {
            let mutex = InterProcessSemaphoreMutex::new(fw.clone(), &path).unwrap();
            tokio::spawn(async move {
                mutex.acquire().await.unwrap();
                let token = mutex.fencing_token().unwrap();
                (mutex, token)
            })
        };
        // The first waits for the lease in-process (it holds the internal
        // mutex), the second for the internal mutex.
        let first = spawn_waiter();
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&leases) == 1 }).await);
        let second = spawn_waiter();
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&locks) == 1 }).await);
        assert_eq!(children(&raw, &leases).await.len(), 1);

        proxy.clear_traffic();
        holder.release().await.unwrap();
        let (first, first_token) = tokio::time::timeout(PATIENCE, first)
            .await
            .unwrap()
            .unwrap();
        let sent = request_opcodes(&proxy);
        assert!(sent.is_empty(), "the lease's pass sent requests: {sent:?}");
        assert_eq!(first_token, FencingToken::passed(token.get(), 1));
        // The second got the internal mutex from the first (by pass) and
        // now waits for the lease in-process.
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&leases) == 1 }).await);
        first.release().await.unwrap();
        let (second, second_token) = tokio::time::timeout(PATIENCE, second)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(second_token, FencingToken::passed(token.get(), 2));
        second.release().await.unwrap();
        // Lease and internal mutex passes.
        assert!(fw.metrics().lock_passes() >= 3);
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &leases).await.is_empty() && children(&raw, &locks).await.is_empty()
            })
            .await
        );
        fw.close().await;
    })
    .await;
}

/// A semaphore of several leases: the tasks of one process share them, and
/// never more than `max_leases` hold at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_leases_pass_within_the_bound() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("cohort-leases");
        let fw = cohort_framework(&server.connect_string(), patient()).await;
        let raw = raw_client(&server.connect_string()).await;
        let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, 2).unwrap();
        let holding = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..12)
            .map(|_| {
                let (semaphore, holding, most) = (semaphore.clone(), holding.clone(), most.clone());
                tokio::spawn(async move {
                    for _ in 0..3 {
                        let lease = semaphore.acquire().await.unwrap();
                        let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        holding.fetch_sub(1, Ordering::SeqCst);
                        lease.release().await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
        }
        assert!(most.load(Ordering::SeqCst) <= 2, "more holders than leases");
        assert!(fw.metrics().lock_passes() > 0, "nothing was passed");
        assert!(children(&raw, &format!("{path}/leases")).await.is_empty());
        fw.close().await;
    })
    .await;
}
