//! Hold bounds (issue 46, items 1 and 2): a hold that ends by itself when
//! its holder stops making progress (the silence bound) or has held too
//! long (the hold bound), while its process and its session stay alive.
//! The stuck holder here is a task blocked on a channel that never sends:
//! its hold ends within the bound plus a little, the next waiter (another
//! framework, so another process as far as ZooKeeper can tell) gets the
//! lock, the stuck task's fenced write afterwards is refused, and the loss
//! says which bound passed. A holder that keeps saying progress keeps its
//! hold. On the embedded server by default, on a real ZooKeeper with
//! `ZK_TEST_SERVER=real`.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{bounded, data_node, framework, raw_client, server, unique_path, BOUND};
use zk_curator::{Bound, Error, HoldBounds, InterProcessMutex, LockLoss};

/// A bound short enough for a test, long enough to be told from a
/// hand-off on a loaded machine.
const SILENCE: Duration = Duration::from_millis(800);
/// How late past its bound a hold may end: the enforcing task's wake-up
/// and the node's deletion.
const LATE: Duration = Duration::from_secs(3);

/// A guard held by a task that then blocks for good on a channel that
/// never sends; returns when the next waiter (on a framework of its own)
/// holds, with how long after the grant that was, the stuck task's loss
/// reason and whether its fenced write afterwards went through.
async fn stuck_holder_ends(bounds: HoldBounds) -> (Duration, LockLoss, zk_curator::Result<()>) {
    let server = server().unwrap();
    let connect = server.connect_string();
    let path = unique_path("bounded");
    let raw = raw_client(&connect).await;
    let data = data_node(&raw, "bounded-data").await;
    let stuck_fw = framework(&connect).await;
    let next_fw = framework(&connect).await;
    let mutex = InterProcessMutex::new(stuck_fw.clone(), &path).unwrap();
    let guard = mutex.lock_bounded(bounds).await.unwrap();
    // The bound's own start (the grant), not the return's later instant.
    let granted = guard.last_progress().unwrap().into_std();
    assert_eq!(guard.bounds(), bounds);
    let fence = guard.fence().unwrap();
    let lost = guard.lost();
    // The stuck task: keeps its guard, never says progress, never returns
    // on its own.
    let (_never, blocked) = tokio::sync::oneshot::channel::<()>();
    let stuck = tokio::spawn(async move {
        let _guard = guard;
        let _ = blocked.await;
    });
    let next = InterProcessMutex::new(next_fw.clone(), &path).unwrap();
    let next_guard = next.lock().await.unwrap();
    let after = granted.elapsed();
    let reason = lost.await;
    let write = fence.set_data(&data, b"stuck", None).await.map(|_| ());
    next_guard.release().await.unwrap();
    stuck.abort();
    (after, reason, write)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_holder_loses_its_hold_and_the_next_waiter_gets_it() {
    if server().is_none() {
        return;
    }
    bounded(BOUND, async {
        let (after, reason, write) = stuck_holder_ends(HoldBounds::new().silence(SILENCE)).await;
        assert!(
            after >= SILENCE,
            "the next holder came before the bound: {after:?}"
        );
        assert!(after < SILENCE + LATE, "the hold ended late: {after:?}");
        assert_eq!(reason, LockLoss::BoundPassed(Bound::Silence));
        match write {
            Err(Error::LockLost { reason, .. }) => {
                assert_eq!(reason, LockLoss::BoundPassed(Bound::Silence));
            }
            other => panic!("the stuck holder's fenced write was not refused: {other:?}"),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_past_its_hold_bound_loses_it_even_with_progress() {
    let Some(server) = server() else { return };
    bounded(BOUND, async {
        let (after, reason, write) = stuck_holder_ends(HoldBounds::new().duration(SILENCE)).await;
        assert!(after >= SILENCE && after < SILENCE + LATE, "{after:?}");
        assert_eq!(reason, LockLoss::BoundPassed(Bound::Duration));
        assert!(write.is_err(), "{write:?}");

        // Progress does not stretch the hold bound.
        let connect = server.connect_string();
        let mutex =
            InterProcessMutex::new(framework(&connect).await, &unique_path("bounded")).unwrap();
        let guard = mutex
            .lock_bounded(HoldBounds::new().duration(SILENCE))
            .await
            .unwrap();
        let lost = guard.lost();
        tokio::pin!(lost);
        let deadline = Instant::now() + SILENCE + LATE;
        let reason = loop {
            guard.progress();
            tokio::select! {
                reason = &mut lost => break reason,
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
            assert!(Instant::now() < deadline, "the hold outlived its bound");
        };
        assert_eq!(reason, LockLoss::BoundPassed(Bound::Duration));
        assert!(
            guard.release().await.is_err(),
            "a release after the bound is a loss"
        );
    })
    .await;
}

/// Progress said more often than the silence bound keeps the hold for many
/// bounds; once it stops, the hold ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_says_progress_keeps_its_hold() {
    let Some(server) = server() else { return };
    bounded(BOUND, async {
        let connect = server.connect_string();
        let path = unique_path("progress");
        let mutex = InterProcessMutex::new(framework(&connect).await, &path).unwrap();
        mutex
            .set_hold_bounds(HoldBounds::new().silence(SILENCE))
            .unwrap();
        let guard = mutex.lock().await.unwrap();
        let raw = raw_client(&connect).await;
        let kept = Instant::now();
        while kept.elapsed() < SILENCE * 4 {
            guard.progress();
            tokio::time::sleep(SILENCE / 4).await;
            assert!(
                guard.is_valid(),
                "lost while saying progress: {:?}",
                guard.loss()
            );
        }
        assert_eq!(common::children(&raw, &path).await.len(), 1);
        // Silence now: it ends, and its node goes.
        let reason = tokio::time::timeout(SILENCE + LATE, guard.lost())
            .await
            .expect("the silent hold did not end");
        assert_eq!(reason, LockLoss::BoundPassed(Bound::Silence));
        assert!(
            common::eventually(LATE, || async {
                common::children(&raw, &path).await.is_empty()
            })
            .await,
            "the silent holder's node was left"
        );
        // Progress after the bound does not bring the hold back.
        guard.progress();
        assert_eq!(guard.loss(), Some(LockLoss::BoundPassed(Bound::Silence)));
    })
    .await;
}

/// The task-bound hold: bounded by the mutex's default; a reentrant acquire
/// keeps the outermost acquire's bounds (its clock is not restarted); the
/// task says progress through the mutex.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_hold_and_its_reentries_keep_the_outermost_bound() {
    let Some(server) = server() else { return };
    bounded(BOUND, async {
        let connect = server.connect_string();
        let path = unique_path("task-bound");
        let mutex = InterProcessMutex::new(framework(&connect).await, &path).unwrap();
        mutex
            .set_hold_bounds(HoldBounds::new().silence(SILENCE))
            .unwrap();
        let next = InterProcessMutex::new(framework(&connect).await, &path).unwrap();
        let task_mutex = mutex.clone();
        let (entered_tx, entered) = tokio::sync::oneshot::channel();
        let (_never, blocked) = tokio::sync::oneshot::channel::<()>();
        let stuck = tokio::spawn(async move {
            // Read before the acquire: the bound starts inside it.
            let granted = Instant::now();
            task_mutex.acquire().await.unwrap();
            // Progress for a while, then a reentrant acquire (which must
            // not restart the clock), then silence for good.
            for _ in 0..4 {
                task_mutex.progress();
                tokio::time::sleep(SILENCE / 4).await;
            }
            task_mutex.acquire().await.unwrap();
            assert_eq!(task_mutex.hold_count(), 2);
            let _ = entered_tx.send((granted, task_mutex.fencing_token().unwrap()));
            let _ = blocked.await;
        });
        let (granted, token) = entered.await.unwrap();
        let next_guard = next.lock().await.unwrap();
        let after = granted.elapsed();
        assert!(after >= SILENCE, "{after:?}");
        assert!(
            after < SILENCE * 2 + LATE,
            "the reentry restarted the bound: {after:?}"
        );
        assert!(next_guard.fencing_token() > token);
        next_guard.release().await.unwrap();
        stuck.abort();
    })
    .await;
}

/// A zero, or a bound longer than a year: a typed error before anything is
/// sent (no node made), as a default and at the acquire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_bounds_are_refused_before_anything_is_sent() {
    let Some(server) = server() else { return };
    bounded(BOUND, async {
        let connect = server.connect_string();
        let path = unique_path("absurd");
        let mutex = InterProcessMutex::new(framework(&connect).await, &path).unwrap();
        let year_and_a_day = Duration::from_secs(366 * 24 * 3600);
        for bounds in [
            HoldBounds::new().silence(Duration::ZERO),
            HoldBounds::new().duration(Duration::ZERO),
            HoldBounds::new().duration(year_and_a_day),
            HoldBounds::new()
                .silence(Duration::from_secs(1))
                .duration(year_and_a_day),
        ] {
            assert!(
                matches!(
                    mutex.set_hold_bounds(bounds),
                    Err(Error::InvalidArgument(_))
                ),
                "{bounds:?}"
            );
            assert!(
                matches!(
                    mutex.lock_bounded(bounds).await,
                    Err(Error::InvalidArgument(_))
                ),
                "{bounds:?}"
            );
        }
        let raw = raw_client(&connect).await;
        assert!(
            raw.check_stat(&path).await.unwrap().is_none(),
            "something was sent"
        );
        // The default was left as it was: unbounded.
        let guard = mutex.lock().await.unwrap();
        assert_eq!(guard.bounds(), HoldBounds::new());
        guard.release().await.unwrap();
    })
    .await;
}

/// `hold` (bounded with a silence bound, never told of progress, kept by a
/// task stuck for good) ends within the bound: `next` (another framework's
/// acquire) completes, the loss says the silence bound, and a fenced write
/// through it is refused.
async fn ends_by_silence<T: Send + 'static>(
    hold: zk_curator::Hold,
    keep: T,
    next: impl std::future::Future<Output = ()>,
) {
    let connect = server().unwrap().connect_string();
    let raw = raw_client(&connect).await;
    let data = data_node(&raw, "bounded-data").await;
    // Set once: a hold bounded already keeps its bounds, and its clock.
    hold.bound(HoldBounds::new().silence(SILENCE)).unwrap();
    // When its silence began: the bound's start (no progress said).
    let granted = hold.last_progress().unwrap().into_std();
    let fence = hold.fence().unwrap();
    let lost = hold.lost();
    let (_never, blocked) = tokio::sync::oneshot::channel::<()>();
    let stuck = tokio::spawn(async move {
        let _keep = keep;
        let _ = blocked.await;
    });
    next.await;
    let after = granted.elapsed();
    assert!(
        after >= SILENCE,
        "the next holder came before the bound: {after:?}"
    );
    assert!(after < SILENCE + LATE, "the hold ended late: {after:?}");
    assert_eq!(lost.await, LockLoss::BoundPassed(Bound::Silence));
    let write = fence.set_data(&data, b"stuck", None).await;
    assert!(
        matches!(
            write,
            Err(Error::LockLost {
                reason: LockLoss::BoundPassed(Bound::Silence),
                ..
            })
        ),
        "{write:?}"
    );
    stuck.abort();
}

/// Every kind of hold ends by its bound: both halves of a read-write lock
/// (the guard's `bound`), a semaphore lease, a semaphore mutex and a
/// multi-lock (their `set_hold_bounds`), and a leader's term (the next
/// leader takes over).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_hold_ends_by_its_bound() {
    use zk_curator::{
        InterProcessMultiLock, InterProcessReadWriteLock, InterProcessSemaphoreMutex,
        InterProcessSemaphoreV2,
    };
    let Some(server) = server() else { return };
    let connect = server.connect_string();
    bounded(BOUND, async {
        // The write half: the next writer gets it.
        let path = unique_path("bounded-write");
        let rw = InterProcessReadWriteLock::new(framework(&connect).await, &path).unwrap();
        let guard = rw.write_lock().lock().await.unwrap();
        let next = InterProcessReadWriteLock::new(framework(&connect).await, &path).unwrap();
        let hold = (*guard).clone();
        ends_by_silence(hold, guard, async {
            next.write_lock()
                .lock()
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
        })
        .await;

        // The read half: a waiting writer gets it.
        let path = unique_path("bounded-read");
        let rw = InterProcessReadWriteLock::new(framework(&connect).await, &path).unwrap();
        let guard = rw.read_lock().lock().await.unwrap();
        let next = InterProcessReadWriteLock::new(framework(&connect).await, &path).unwrap();
        let hold = (*guard).clone();
        ends_by_silence(hold, guard, async {
            next.write_lock()
                .lock()
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
        })
        .await;

        // A lease of a one-lease semaphore.
        let path = unique_path("bounded-lease");
        let sem = InterProcessSemaphoreV2::new(framework(&connect).await, &path, 1).unwrap();
        let lease = sem.acquire().await.unwrap();
        let next = InterProcessSemaphoreV2::new(framework(&connect).await, &path, 1).unwrap();
        let hold = (*lease).clone();
        ends_by_silence(hold, lease, async {
            next.acquire().await.unwrap().release().await.unwrap();
        })
        .await;

        // A semaphore mutex, bounded as a default.
        let path = unique_path("bounded-semaphore-mutex");
        let mutex = InterProcessSemaphoreMutex::new(framework(&connect).await, &path).unwrap();
        mutex
            .set_hold_bounds(HoldBounds::new().silence(SILENCE))
            .unwrap();
        // Read before the acquire: the bound's clock starts inside it, at
        // the grant, so an instant read after it returns could be late by
        // the return's own time and find the next grant "before" the bound.
        let granted = Instant::now();
        mutex.acquire().await.unwrap();
        let next = InterProcessSemaphoreMutex::new(framework(&connect).await, &path).unwrap();
        let lost = mutex.lost();
        next.acquire().await.unwrap();
        let after = granted.elapsed();
        assert!(after >= SILENCE && after < SILENCE + LATE, "{after:?}");
        assert_eq!(lost.await, LockLoss::BoundPassed(Bound::Silence));
        next.release().await.unwrap();

        // A multi-lock: one bound for the set; each member goes on.
        let a = unique_path("bounded-multi-a");
        let b = unique_path("bounded-multi-b");
        let multi =
            InterProcessMultiLock::from_paths(framework(&connect).await, &[&a, &b]).unwrap();
        multi
            .set_hold_bounds(HoldBounds::new().silence(SILENCE))
            .unwrap();
        let taken = multi.clone();
        let (held_tx, held) = tokio::sync::oneshot::channel();
        let (_never, blocked) = tokio::sync::oneshot::channel::<()>();
        let stuck = tokio::spawn(async move {
            taken.acquire().await.unwrap();
            let _ = held_tx.send(taken.lost());
            let _ = blocked.await;
        });
        let lost = held.await.unwrap();
        let granted = Instant::now();
        let others = framework(&connect).await;
        let on_b = InterProcessMutex::new(others.clone(), &b).unwrap();
        let on_a = InterProcessMutex::new(others, &a).unwrap();
        let (gb, ga) = tokio::join!(on_b.lock(), on_a.lock());
        let after = granted.elapsed();
        assert!(after < SILENCE + LATE, "{after:?}");
        assert_eq!(lost.await, LockLoss::BoundPassed(Bound::Silence));
        ga.unwrap().release().await.unwrap();
        gb.unwrap().release().await.unwrap();
        stuck.abort();

        // A leader's term: the next participant leads.
        let path = unique_path("bounded-term");
        let (_fa, first) = common::started_latch(&connect, &path, "a").await;
        let term = common::leads(&first, Duration::from_secs(20)).await;
        let (_fb, second) = common::started_latch(&connect, &path, "b").await;
        let hold = (*term).clone();
        ends_by_silence(hold, term, async {
            common::leads(&second, SILENCE + LATE).await;
        })
        .await;
    })
    .await;
}

/// A bounded multi-lock over locks that are not mutexes is refused: their
/// holds are their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_of_other_locks_cannot_be_bounded() {
    use std::sync::Arc;
    use zk_curator::{InterProcessLock, InterProcessMultiLock, InterProcessSemaphoreMutex};
    let Some(server) = server() else { return };
    let fw = framework(&server.connect_string()).await;
    let member: Arc<dyn InterProcessLock> =
        Arc::new(InterProcessSemaphoreMutex::new(fw, &unique_path("other")).unwrap());
    let multi = InterProcessMultiLock::new(vec![member]).unwrap();
    assert!(matches!(
        multi.set_hold_bounds(HoldBounds::new().silence(SILENCE)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(multi.set_hold_bounds(HoldBounds::new()).is_ok());
}

/// With cohort hand-off, a passed node carries the bound of the acquire
/// that receives it (from the pass on), not of the hold that passed it: an
/// unbounded holder passes to a bounded waiter of the same framework, which
/// then goes silent; its hold ends within its own bound, and a waiter of
/// another framework gets the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passed_node_carries_the_receiving_acquire_s_bound() {
    let Some(server) = server() else { return };
    let connect = server.connect_string();
    bounded(BOUND, async {
        let path = unique_path("bounded-pass");
        let fw = common::framework_with(&connect, |b| b.cohort(common::patient())).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let holder = mutex.lock().await.unwrap();
        assert_eq!(holder.bounds(), HoldBounds::new());
        let receiving = {
            let mutex = mutex.clone();
            tokio::spawn(
                async move { mutex.lock_bounded(HoldBounds::new().silence(SILENCE)).await },
            )
        };
        assert!(
            common::eventually(common::PATIENCE, || async { fw.locally_queued(&path) == 1 }).await,
            "the bounded waiter never queued"
        );
        holder.release().await.unwrap();
        let received = common::joined(receiving).await;
        assert_eq!(
            received.fencing_token().pass(),
            1,
            "the node was not passed"
        );
        assert_eq!(received.bounds(), HoldBounds::new().silence(SILENCE));
        let next = InterProcessMutex::new(framework(&connect).await, &path).unwrap();
        let hold = (*received).clone();
        ends_by_silence(hold, received, async {
            next.lock().await.unwrap().release().await.unwrap();
        })
        .await;
    })
    .await;
}

/// A release racing the bound: whichever comes first, the lock is free
/// after, no node is left, and the release says the truth (done, or lost
/// to the bound). A framework closed under a bounded hold ends it as
/// closed, and its task does not outlive it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_racing_the_bound_and_a_close_leave_nothing() {
    let Some(server) = server() else { return };
    let connect = server.connect_string();
    bounded(BOUND, async {
        let raw = raw_client(&connect).await;
        let path = unique_path("bounded-race");
        let mutex = InterProcessMutex::new(framework(&connect).await, &path).unwrap();
        let bound = Duration::from_millis(100);
        let (mut released, mut lost) = (0, 0);
        for round in 0..20u32 {
            let guard = mutex
                .lock_bounded(HoldBounds::new().duration(bound))
                .await
                .unwrap();
            // Around the bound: from 20 ms before to 20 ms after it.
            tokio::time::sleep(
                bound - Duration::from_millis(20) + Duration::from_millis(u64::from(round) * 2),
            )
            .await;
            match guard.release().await {
                Ok(()) => released += 1,
                Err(Error::LockLost {
                    reason: LockLoss::BoundPassed(Bound::Duration),
                    ..
                }) => lost += 1,
                Err(other) => panic!("round {round}: {other}"),
            }
            assert!(
                common::eventually(LATE, || async {
                    common::children(&raw, &path).await.is_empty()
                })
                .await,
                "round {round}: a node was left"
            );
        }
        assert_eq!(released + lost, 20);

        // A close under a bounded hold.
        let fw = framework(&connect).await;
        let closing = InterProcessMutex::new(fw.clone(), &unique_path("bounded-close")).unwrap();
        let guard = closing
            .lock_bounded(HoldBounds::new().silence(SILENCE))
            .await
            .unwrap();
        fw.close().await;
        assert_eq!(guard.loss(), Some(LockLoss::Closed));
        tokio::time::sleep(SILENCE * 2).await;
        // Still the first reason: the bound did not overwrite it.
        assert_eq!(guard.loss(), Some(LockLoss::Closed));
    })
    .await;
}

/// A downgrade never stretches a bound: the read hold taken level with a
/// write hold goes on under the write hold's hold bound, counted from the
/// write grant, and ends with it; a writer queued behind gets the lock.
/// The read-write lock's default bounds bound both halves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_keeps_the_write_hold_s_bound_and_clock() {
    use zk_curator::InterProcessReadWriteLock;
    let Some(server) = server() else { return };
    let connect = server.connect_string();
    bounded(BOUND, async {
        let path = unique_path("bounded-downgrade");
        let rw = InterProcessReadWriteLock::new(framework(&connect).await, &path).unwrap();
        let hold_bound = Duration::from_millis(1500);
        rw.set_hold_bounds(HoldBounds::new().duration(hold_bound))
            .unwrap();
        let write = rw.write_lock().lock().await.unwrap();
        let granted = write.last_progress().unwrap().into_std();
        assert_eq!(write.bounds(), HoldBounds::new().duration(hold_bound));
        // Half the bound as a writer, then a downgrade.
        tokio::time::sleep(hold_bound / 2).await;
        let read = write.downgrade().await.unwrap();
        assert_eq!(read.bounds(), HoldBounds::new().duration(hold_bound));
        let writer = InterProcessReadWriteLock::new(framework(&connect).await, &path).unwrap();
        let next = writer.write_lock().lock().await.unwrap();
        let after = granted.elapsed();
        assert!(
            after >= hold_bound,
            "the read hold ended before the bound: {after:?}"
        );
        assert!(
            after < hold_bound + LATE,
            "the downgrade restarted the bound: {after:?}"
        );
        assert_eq!(read.loss(), Some(LockLoss::BoundPassed(Bound::Duration)));
        next.release().await.unwrap();
    })
    .await;
}

/// Published progress: the holder's node gains `progress_ms` in its
/// identity, written at most once per quarter of the silence bound and only
/// after progress; other processes read it; once progress stops, so do the
/// writes. Publishing needs a silence bound, bounds given at the acquire,
/// and identity data, each refused before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_is_published_on_the_node_at_most_once_a_quarter() {
    use zk_curator::framework::identity::{progress_of, HolderIdentity};
    let Some(server) = server() else { return };
    let connect = server.connect_string();
    bounded(BOUND, async {
        let raw = raw_client(&connect).await;
        let path = unique_path("published");
        let mutex = InterProcessMutex::new(framework(&connect).await, &path).unwrap();
        let bounds = HoldBounds::new().silence(SILENCE).publish_progress();
        let guard = mutex.lock_bounded(bounds).await.unwrap();
        // The grant counts as the first write: progress said at once is
        // written only once the grant's quarter has passed (a hold shorter
        // than a quarter writes nothing).
        guard.progress();
        let node = guard.node().path().to_owned();
        tokio::time::sleep(SILENCE / 8).await;
        let (data, stat) = raw.get_data(&node).await.unwrap();
        assert_eq!(
            progress_of(&data),
            None,
            "published within the grant's quarter"
        );
        assert_eq!(stat.version, 0);
        let working = Duration::from_millis(2400);
        let began = Instant::now();
        let mut seen = Vec::new();
        while began.elapsed() < working {
            guard.progress();
            tokio::time::sleep(Duration::from_millis(50)).await;
            let (data, _) = raw.get_data(&node).await.unwrap();
            if let Some(at) = progress_of(&data) {
                if seen.last() != Some(&at) {
                    seen.push(at);
                }
            }
            assert!(guard.is_valid());
        }
        let (data, stat) = raw.get_data(&node).await.unwrap();
        // Still the holder's identity, with its progress.
        assert!(HolderIdentity::parse(&data).is_some(), "{data:?}");
        let writes = stat.version;
        let quarters = i32::try_from(working.as_millis() / (SILENCE / 4).as_millis()).unwrap();
        assert!(writes >= 3, "progress was not published: {writes} writes");
        assert!(
            writes <= quarters + 2,
            "{writes} writes in {quarters} quarters"
        );
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
        let now_ms = i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap();
        let last = *seen.last().unwrap();
        assert!(
            (now_ms - last).abs() < 2_000,
            "published {last}, now {now_ms}"
        );
        // Silence: no more writes, and the hold ends.
        let reason = tokio::time::timeout(SILENCE + LATE, guard.lost())
            .await
            .unwrap();
        assert_eq!(reason, LockLoss::BoundPassed(Bound::Silence));
        if let Ok((_, stat)) = raw.get_data(&node).await {
            assert!(stat.version <= writes + 1, "written after progress stopped");
        }

        // Refusals, before anything is sent.
        let other = unique_path("published-refused");
        let refused = InterProcessMutex::new(framework(&connect).await, &other).unwrap();
        let no_silence = HoldBounds::new().duration(SILENCE).publish_progress();
        assert!(matches!(
            refused.lock_bounded(no_silence).await,
            Err(Error::InvalidArgument(_))
        ));
        let guard = refused.lock().await.unwrap();
        assert!(matches!(
            guard.bound(bounds),
            Err(Error::InvalidArgument(_))
        ));
        guard.release().await.unwrap();
    })
    .await;
}

/// A mutex on a framework whose connection goes through a fault proxy,
/// with a direct client to look at the server.
struct Behind {
    raw: zk_curator::framework::zk::Client,
    path: String,
    proxy: zk_curator_testing::FaultProxy,
    fw: zk_curator::Framework,
    mutex: InterProcessMutex,
}

async fn behind_proxy(server: &zk_curator_testing::TestingServer, name: &str) -> Behind {
    let raw = raw_client(&server.connect_string()).await;
    let path = unique_path(name);
    let proxy = zk_curator_testing::FaultProxy::start(server.address())
        .await
        .unwrap();
    let fw = framework(&proxy.connect_string()).await;
    let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
    Behind {
        raw,
        path,
        proxy,
        fw,
        mutex,
    }
}

/// A stuck hold lost to something else first (its connection dropped, a
/// `Suspended` loss, while its session survives) still loses its node at
/// its bound: the holder never releases, and without this the node would
/// stay for as long as the session lives. (Found by the simulator's stuck
/// holders, seed 6.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_lost_to_a_suspension_first_still_loses_its_node_at_the_bound() {
    let Some(server) = server() else { return };
    bounded(BOUND, async {
        let Behind {
            raw,
            path,
            proxy,
            fw,
            mutex,
        } = behind_proxy(server, "bounded-suspended").await;
        let bound = Duration::from_secs(3);
        let guard = mutex
            .lock_bounded(HoldBounds::new().silence(bound))
            .await
            .unwrap();
        let granted = guard.last_progress().unwrap().into_std();
        let session = fw.session().await.unwrap().id();
        proxy.drop_connections();
        let reason = tokio::time::timeout(bound, guard.lost()).await.unwrap();
        assert!(matches!(reason, LockLoss::ConnectionState(_)), "{reason}");
        // The session survives (the client reconnects within its timeout);
        // the stuck holder never releases; the node goes at the bound.
        assert!(
            common::eventually(bound + LATE, || async {
                common::children(&raw, &path).await.is_empty()
            })
            .await,
            "the node of a stuck hold lost to a suspension stayed"
        );
        assert!(granted.elapsed() >= bound, "gone before its bound");
        assert_eq!(
            fw.session().await.unwrap().id(),
            session,
            "the session did not survive"
        );
        // The first reason stays.
        assert_eq!(guard.loss(), Some(reason));
        drop(guard);
        fw.close().await;
    })
    .await;
}

/// The release of a hold its bound ended answers at once, even while the
/// server answers nothing (its replies held): the node is the background
/// cleaner's, and goes once the server answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_of_a_hold_its_bound_ended_answers_at_once() {
    let Some(server) = server() else { return };
    bounded(BOUND, async {
        let Behind {
            raw,
            path,
            proxy,
            fw,
            mutex,
        } = behind_proxy(server, "bounded-release").await;
        // The enforcing task may not have run yet when the holder finds
        // the hold lost: the release must leave the node to the cleaner.
        let guard = mutex
            .lock_bounded(HoldBounds::new().duration(Duration::from_millis(300)))
            .await
            .unwrap();
        proxy.hold_replies(true);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(guard.loss(), Some(LockLoss::BoundPassed(Bound::Duration)));
        let started = Instant::now();
        let released = guard.release().await;
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "the release waited for the server: {:?}",
            started.elapsed()
        );
        assert!(
            matches!(
                released,
                Err(Error::LockLost {
                    reason: LockLoss::BoundPassed(Bound::Duration),
                    ..
                })
            ),
            "{released:?}"
        );
        proxy.hold_replies(false);
        assert!(
            common::eventually(LATE * 3, || async {
                common::children(&raw, &path).await.is_empty()
            })
            .await,
            "the node was left"
        );
        fw.close().await;
    })
    .await;
}

/// Revocation and published progress: a revoker's request written into a
/// publishing holder's node is never overwritten by a later publication
/// (the holder's listener is told, and the request stays for it and for
/// anyone reading the node), and a holder that does not give the lock up
/// still loses it at its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_request_is_not_overwritten_by_published_progress() {
    use zk_curator::framework::lock_internals::REVOKE_MESSAGE;
    use zk_curator::Revoker;
    let Some(server) = server() else { return };
    let connect = server.connect_string();
    bounded(BOUND, async {
        let raw = raw_client(&connect).await;
        let path = unique_path("revoked-publishing");
        let mutex = InterProcessMutex::new(framework(&connect).await, &path).unwrap();
        let (told_tx, mut told) = tokio::sync::mpsc::unbounded_channel();
        mutex.make_revocable(move |node: &str| {
            let _ = told_tx.send(node.to_owned());
        });
        let bounds = HoldBounds::new().silence(SILENCE).publish_progress();
        let guard = mutex.lock_bounded(bounds).await.unwrap();
        let node = guard.node().path().to_owned();
        let guard = std::sync::Arc::new(guard);
        // The holder says progress all along, so a publication is due
        // every quarter of the bound.
        let (stop_tx, mut stop) = tokio::sync::oneshot::channel::<()>();
        let working = {
            let guard = guard.clone();
            tokio::spawn(async move {
                loop {
                    guard.progress();
                    tokio::select! {
                        _ = &mut stop => return,
                        () = tokio::time::sleep(Duration::from_millis(20)) => {}
                    }
                }
            })
        };
        // A first publication, so that the request comes after one.
        let published = async {
            loop {
                let (_, stat) = raw.get_data(&node).await.unwrap();
                if stat.version >= 1 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(SILENCE * 2, published).await.unwrap();
        let revoker = framework(&connect).await;
        Revoker::attempt_revoke(&revoker, &node).await.unwrap();
        let told_of = tokio::time::timeout(LATE, told.recv()).await.unwrap();
        assert_eq!(told_of.as_deref(), Some(node.as_str()));
        // Three quarters of progress later (three publications due), the
        // request is still what the node holds.
        tokio::time::sleep(SILENCE * 3 / 4).await;
        let (data, _) = raw.get_data(&node).await.unwrap();
        assert_eq!(data, REVOKE_MESSAGE, "the request was overwritten");
        assert!(guard.is_valid());
        // The holder never gives the lock up, and stops saying progress:
        // the silence bound ends the hold all the same.
        let _ = stop_tx.send(());
        working.await.unwrap();
        let reason = tokio::time::timeout(SILENCE + LATE, guard.lost())
            .await
            .unwrap();
        assert_eq!(reason, LockLoss::BoundPassed(Bound::Silence));
        let next = InterProcessMutex::new(revoker, &path).unwrap();
        let next_guard = tokio::time::timeout(LATE, next.lock())
            .await
            .unwrap()
            .unwrap();
        next_guard.release().await.unwrap();
    })
    .await;
}
