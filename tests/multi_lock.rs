//! InterProcessMultiLock against a real ZooKeeper: Curator's multi-mutex
//! tests (CURATOR-NOTES §17.4), deadlock freedom, one deadline, cancellation
//! and bad input.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    bounded, children, eventually, framework, raw_client, server, session_and_raw,
    two_sessions_and_raw, unique_path, wait_for_participants, BOUND, LONG_BOUND, PATIENCE,
};
use futures::future::BoxFuture;
use futures::FutureExt;
use zk_curator::framework::zk;
use zk_curator::recipes::InterProcessMultiLock;
use zk_curator::{
    Error, Fence, Framework, InterProcessLock, InterProcessMutex, LockLoss, MutexGuard, Result,
    Wait,
};

/// For `eventually`: whether no node is left under any of `paths`.
fn gone<'a>(raw: &'a zk::Client, paths: &'a [&'a str]) -> impl FnMut() -> BoxFuture<'a, bool> {
    move || all_empty(raw, paths).boxed()
}

/// Whether no node is left under any of `paths`.
async fn all_empty(raw: &zk::Client, paths: &[&str]) -> bool {
    for path in paths {
        if !children(raw, path).await.is_empty() {
            return false;
        }
    }
    true
}

/// Two sessions and a raw client on one server, two lock paths `a` and
/// `b` under a new base, and the second session's hold of `b`.
struct BHeldElsewhere {
    a: String,
    b: String,
    fw: Framework,
    other_fw: Framework,
    raw: zk::Client,
    held: MutexGuard,
    /// The held node's name.
    held_node: String,
}

/// [`BHeldElsewhere`] on `connect`, its base named for `label`.
async fn b_held_elsewhere(connect: &str, label: &str) -> BHeldElsewhere {
    let base = unique_path(label);
    let (a, b) = (format!("{base}/a"), format!("{base}/b"));
    let (fw, other_fw, raw) = two_sessions_and_raw(connect).await;
    let held = InterProcessMutex::new(other_fw.clone(), &b)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let held_node = held.node().path().rsplit('/').next().unwrap().to_owned();
    BHeldElsewhere {
        a,
        b,
        fw,
        other_fw,
        raw,
        held,
        held_node,
    }
}

#[tokio::test]
async fn acquire_and_release_two_paths() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let base = unique_path("multi-basic");
        let (a, b) = (format!("{base}/a"), format!("{base}/b"));
        let (fw, raw) = session_and_raw(&server.connect_string()).await;

        // Given out of order: acquired in ascending path order.
        let multi = InterProcessMultiLock::from_paths(fw.clone(), &[&b, &a]).unwrap();
        assert_eq!(multi.paths(), vec![a.as_str(), b.as_str()]);
        assert_eq!(
            InterProcessLock::paths(&multi),
            vec![a.as_str(), b.as_str()]
        );
        assert!(!multi.is_acquired_in_this_process());

        multi.acquire().await.unwrap();
        assert!(multi.is_acquired_in_this_process());
        assert!(multi.is_owned_by_current_task());
        assert_eq!(children(&raw, &a).await.len(), 1);
        assert_eq!(children(&raw, &b).await.len(), 1);
        assert_eq!(multi.participant_nodes().await.unwrap().len(), 2);

        // Reentrant for the owner, no new nodes.
        assert!(multi.acquire_timeout(Duration::from_secs(1)).await.unwrap());
        assert_eq!(children(&raw, &a).await.len(), 1);

        // Another task of this process is excluded, and cannot release.
        let other = {
            let multi = multi.clone();
            tokio::spawn(async move {
                let release = multi.release().await;
                let got = multi
                    .acquire_timeout(Duration::from_millis(300))
                    .await
                    .unwrap();
                (release, got)
            })
        };
        let (release, got) = tokio::time::timeout(PATIENCE, other)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(release, Err(Error::NotOwner));
        assert!(!got, "another task must not get a held multi-lock");

        multi.release().await.unwrap();
        assert!(multi.is_owned_by_current_task(), "still held once");
        assert_eq!(children(&raw, &b).await.len(), 1);
        multi.release().await.unwrap();
        assert!(!multi.is_owned_by_current_task());
        assert!(!multi.is_acquired_in_this_process());
        assert!(eventually(PATIENCE, gone(&raw, &[&a, &b])).await);
        assert_eq!(multi.release().await, Err(Error::NotOwner));
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_never_deadlock() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let base = unique_path("multi-order");
        let (a, b) = (format!("{base}/a"), format!("{base}/b"));
        const ROUNDS: usize = 20;
        let inside = Arc::new(AtomicBool::new(false));
        let overlaps = Arc::new(AtomicUsize::new(0));
        let mut frameworks = Vec::new();
        let mut tasks = Vec::new();
        for id in 0..3 {
            // Each contender is its own session, like a separate process.
            let fw = framework(&server.connect_string()).await;
            frameworks.push(fw.clone());
            let multi = match id {
                0 => InterProcessMultiLock::from_paths(fw, &[&a, &b]).unwrap(),
                1 => InterProcessMultiLock::from_paths(fw, &[&b, &a]).unwrap(),
                // Generic members, given in the "wrong" order too.
                _ => InterProcessMultiLock::new(vec![
                    Arc::new(InterProcessMutex::new(fw.clone(), &b).unwrap()),
                    Arc::new(InterProcessMutex::new(fw, &a).unwrap()),
                ])
                .unwrap(),
            };
            let (inside, overlaps) = (inside.clone(), overlaps.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    multi.acquire().await.unwrap();
                    if inside.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.store(false, Ordering::SeqCst);
                    multi.release().await.unwrap();
                }
            }));
        }
        let all = futures::future::join_all(tasks);
        let results = tokio::time::timeout(Duration::from_secs(120), all)
            .await
            .expect("multi-locks over [a, b] and [b, a] must not deadlock");
        for result in results {
            result.unwrap();
        }
        assert_eq!(overlaps.load(Ordering::SeqCst), 0, "mutual exclusion");
        let raw = raw_client(&server.connect_string()).await;
        assert!(eventually(PATIENCE, gone(&raw, &[&a, &b])).await);
        for fw in frameworks {
            fw.close().await;
        }
    })
    .await;
}

#[tokio::test]
async fn killed_session_lets_the_waiter_in() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let base = unique_path("multi-killed");
        let (a, b) = (format!("{base}/a"), format!("{base}/b"));
        let (fw, other_fw, raw) = two_sessions_and_raw(&server.connect_string()).await;
        let holder = InterProcessMultiLock::from_paths(fw.clone(), &[&a, &b]).unwrap();
        let waiter = InterProcessMultiLock::from_paths(other_fw.clone(), &[&b, &a]).unwrap();

        holder.acquire().await.unwrap();
        let waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move {
                waiter.acquire().await?;
                waiter.release().await
            })
        };
        // The waiter queues for the lowest path first: its node there is listed.
        wait_for_participants(&raw, &a, 2).await;
        assert!(!waiting.is_finished(), "the waiter must wait");

        let client = fw.client().await.unwrap();
        zk_curator_testing::expire_session(&server.connect_string(), &client)
            .await
            .unwrap();
        tokio::time::timeout(PATIENCE, waiting)
            .await
            .expect("the waiter gets both locks once the holder's session is gone")
            .unwrap()
            .unwrap();
        // The holder's release finds its nodes gone with the session: it ends
        // promptly, and the holder no longer counts as holding.
        let _ = tokio::time::timeout(PATIENCE, holder.release())
            .await
            .expect("release must not hang");
        assert!(!holder.is_owned_by_current_task());
        assert!(eventually(PATIENCE, gone(&raw, &[&a, &b])).await);
        fw.close().await;
        other_fw.close().await;
    })
    .await;
}

/// A lock whose acquire fails, and which records whether the good lock was
/// held at that moment.
#[derive(Debug)]
struct FailsToLock {
    path: String,
    good: InterProcessMutex,
    good_was_held: AtomicBool,
}

impl InterProcessLock for FailsToLock {
    fn loss(&self) -> Option<LockLoss> {
        Some(LockLoss::NotHeld)
    }

    fn lost(&self) -> BoxFuture<'static, LockLoss> {
        futures::future::ready(LockLoss::NotHeld).boxed()
    }

    fn fence(&self) -> Result<Fence> {
        Err(Error::NotOwner)
    }

    fn acquire_with(&self, _wait: Wait) -> BoxFuture<'_, Result<bool>> {
        async move {
            self.good_was_held
                .store(self.good.is_owned_by_current_task(), Ordering::SeqCst);
            Err(Error::NoAuth)
        }
        .boxed()
    }

    fn release(&self) -> BoxFuture<'_, Result<()>> {
        async { Err(Error::NotOwner) }.boxed()
    }

    fn is_acquired_in_this_process(&self) -> bool {
        false
    }

    fn paths(&self) -> Vec<&str> {
        vec![&self.path]
    }

    fn participant_nodes(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        async { Ok(Vec::new()) }.boxed()
    }
}

#[tokio::test]
async fn some_locks_fail_to_lock() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let base = unique_path("multi-fail-lock");
        let (a, b) = (format!("{base}/a"), format!("{base}/b"));
        let (fw, raw) = session_and_raw(&server.connect_string()).await;
        let good = InterProcessMutex::new(fw.clone(), &a).unwrap();
        let bad = Arc::new(FailsToLock {
            path: b.clone(),
            good: good.clone(),
            good_was_held: AtomicBool::new(false),
        });
        // Given bad first; the good one (lower path) is still taken first.
        let multi = InterProcessMultiLock::new(vec![bad.clone(), Arc::new(good.clone())]).unwrap();

        assert_eq!(multi.acquire().await, Err(Error::NoAuth));
        assert!(
            bad.good_was_held.load(Ordering::SeqCst),
            "the good lock was held when the bad one was tried"
        );
        assert!(!good.is_acquired_in_this_process(), "and was rolled back");
        assert!(!multi.is_owned_by_current_task());
        assert!(eventually(PATIENCE, gone(&raw, &[&a, &b])).await);

        // The same for a timed acquire.
        bad.good_was_held.store(false, Ordering::SeqCst);
        assert_eq!(
            multi.acquire_timeout(Duration::from_secs(5)).await,
            Err(Error::NoAuth)
        );
        assert!(bad.good_was_held.load(Ordering::SeqCst));
        assert!(!good.is_acquired_in_this_process());
        assert!(eventually(PATIENCE, gone(&raw, &[&a, &b])).await);
        fw.close().await;
    })
    .await;
}

/// A real mutex with faults planted in it: a pause before each acquire
/// (overrunning the timeout it is given; the waits it got are recorded),
/// or a release that fails and releases nothing. Everything else is the
/// mutex's own.
#[derive(Debug)]
struct Planted {
    inner: InterProcessMutex,
    /// The pause before each acquire, if any.
    delay: Option<Duration>,
    given: Mutex<Vec<Wait>>,
    /// What each release answers instead of releasing, if anything.
    release_error: Option<Error>,
}

impl Planted {
    /// A mutex that pauses for `delay` before acquiring.
    fn pausing(inner: InterProcessMutex, delay: Duration) -> Arc<Self> {
        Arc::new(Planted {
            inner,
            delay: Some(delay),
            given: Mutex::new(Vec::new()),
            release_error: None,
        })
    }

    /// A mutex whose release fails with `error`.
    fn failing_release(inner: InterProcessMutex, error: Error) -> Arc<Self> {
        Arc::new(Planted {
            inner,
            delay: None,
            given: Mutex::new(Vec::new()),
            release_error: Some(error),
        })
    }
}

impl InterProcessLock for Planted {
    fn loss(&self) -> Option<LockLoss> {
        InterProcessLock::loss(&self.inner)
    }

    fn lost(&self) -> BoxFuture<'static, LockLoss> {
        InterProcessLock::lost(&self.inner)
    }

    fn fence(&self) -> Result<Fence> {
        self.inner.fence()
    }

    fn acquire_with(&self, wait: Wait) -> BoxFuture<'_, Result<bool>> {
        self.given.lock().unwrap().push(wait);
        async move {
            if let Some(delay) = self.delay {
                tokio::time::sleep(delay).await;
            }
            InterProcessLock::acquire_with(&self.inner, wait).await
        }
        .boxed()
    }

    fn release(&self) -> BoxFuture<'_, Result<()>> {
        match &self.release_error {
            Some(error) => {
                let error = error.clone();
                async move { Err(error) }.boxed()
            }
            None => self.inner.release().boxed(),
        }
    }

    fn is_acquired_in_this_process(&self) -> bool {
        self.inner.is_acquired_in_this_process()
    }

    fn paths(&self) -> Vec<&str> {
        vec![self.inner.path()]
    }

    fn participant_nodes(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        self.inner.participant_nodes().boxed()
    }
}

#[tokio::test]
async fn some_releases_fail() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let base = unique_path("multi-fail-release");
        let (a, b, c) = (
            format!("{base}/a"),
            format!("{base}/b"),
            format!("{base}/c"),
        );
        let (fw, raw) = session_and_raw(&server.connect_string()).await;
        let good = InterProcessMutex::new(fw.clone(), &a).unwrap();
        let faulty_b = Planted::failing_release(
            InterProcessMutex::new(fw.clone(), &b).unwrap(),
            Error::NoAuth,
        );
        let faulty_c = Planted::failing_release(
            InterProcessMutex::new(fw.clone(), &c).unwrap(),
            Error::BadVersion,
        );
        let multi = InterProcessMultiLock::new(vec![
            Arc::new(good.clone()),
            faulty_b.clone(),
            faulty_c.clone(),
        ])
        .unwrap();

        multi.acquire().await.unwrap();
        assert_eq!(children(&raw, &a).await.len(), 1);
        // Released in reverse order: c fails first, then b, and a is still
        // released; the first failure (c's) is returned.
        assert_eq!(multi.release().await, Err(Error::BadVersion));
        assert!(!good.is_acquired_in_this_process(), "good lock released");
        assert!(eventually(PATIENCE, gone(&raw, &[&a])).await);
        assert!(
            faulty_b.inner.is_owned_by_current_task(),
            "faulty b still held"
        );
        assert!(
            faulty_c.inner.is_owned_by_current_task(),
            "faulty c still held"
        );
        assert_eq!(children(&raw, &b).await.len(), 1);
        assert!(!multi.is_owned_by_current_task(), "the multi-hold is gone");
        assert_eq!(multi.release().await, Err(Error::NotOwner));

        faulty_b.inner.release().await.unwrap();
        faulty_c.inner.release().await.unwrap();
        assert!(eventually(PATIENCE, gone(&raw, &[&a, &b, &c])).await);
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn times_out_when_one_path_is_held_elsewhere() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let BHeldElsewhere {
            a,
            b,
            fw,
            other_fw,
            raw,
            held,
            held_node,
        } = b_held_elsewhere(&server.connect_string(), "multi-timeout").await;

        let multi = InterProcessMultiLock::from_paths(fw.clone(), &[&a, &b]).unwrap();
        let deadline = Duration::from_secs(1);
        let started = Instant::now();
        assert!(!multi.acquire_timeout(deadline).await.unwrap());
        let elapsed = started.elapsed();
        assert!(
            elapsed >= deadline - Duration::from_millis(100),
            "{elapsed:?}"
        );
        assert!(elapsed < deadline + Duration::from_secs(10), "{elapsed:?}");
        assert!(!multi.is_owned_by_current_task());
        assert!(!multi.is_acquired_in_this_process());

        // Nothing of ours remains under either path.
        assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        assert!(eventually(PATIENCE, gone(&raw, &[&a])).await);
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &b).await == vec![held_node.clone()]
            })
            .await
        );

        // Once the other session lets go, it works.
        held.release().await.unwrap();
        assert!(multi.acquire_timeout(PATIENCE).await.unwrap());
        multi.release().await.unwrap();
        assert!(eventually(PATIENCE, gone(&raw, &[&a, &b])).await);
        fw.close().await;
        other_fw.close().await;
    })
    .await;
}

/// A timed-out acquire returns at its deadline even when giving back the
/// members it took cannot finish (the server stalled): they are given back
/// in the background, and are gone once the server answers again. Seed
/// 5460 of the simulator found a rollback's release retrying over a lost
/// connection for 1.9 s past the deadline. Client, framework and embedded
/// server on one runtime, under a paused clock.
#[tokio::test(start_paused = true)]
async fn a_timed_out_acquire_returns_at_its_deadline_when_the_rollback_cannot_finish() {
    bounded(BOUND, async move {
        let server = zk_curator_testing::EmbeddedServer::start().await.unwrap();
        let BHeldElsewhere {
            a,
            b,
            fw,
            other_fw,
            raw,
            held,
            held_node,
        } = b_held_elsewhere(&server.connect_string(), "multi-rollback-deadline").await;
        let multi = InterProcessMultiLock::from_paths(fw.clone(), &[&a, &b]).unwrap();
        let deadline = Duration::from_secs(2);
        let started = tokio::time::Instant::now();
        let acquire = tokio::spawn({
            let multi = multi.clone();
            async move { multi.acquire_timeout(deadline).await }
        });
        // `a` taken, our node queued behind the holder's under `b`.
        wait_for_participants(&raw, &b, 2).await;
        assert_eq!(children(&raw, &a).await.len(), 1);
        tokio::time::sleep_until(started + deadline - Duration::from_millis(200)).await;
        server.stall(Duration::from_secs(3600));
        assert!(!acquire.await.unwrap().unwrap(), "timed out");
        let elapsed = started.elapsed();
        assert!(
            elapsed <= deadline + Duration::from_millis(50),
            "returned {elapsed:?} after it began, deadline {deadline:?}"
        );
        server.resume();
        assert!(eventually(PATIENCE, gone(&raw, &[&a])).await);
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &b).await == vec![held_node.clone()]
            })
            .await
        );
        held.release().await.unwrap();
        assert!(multi.acquire_timeout(PATIENCE).await.unwrap());
        multi.release().await.unwrap();
        fw.close().await;
        other_fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn one_deadline_for_the_whole_set() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let BHeldElsewhere {
            a,
            b,
            fw,
            other_fw,
            raw,
            held,
            held_node: _,
        } = b_held_elsewhere(&server.connect_string(), "multi-deadline").await;

        let slow_a = Planted::pausing(
            InterProcessMutex::new(fw.clone(), &a).unwrap(),
            Duration::from_millis(600),
        );
        let rec_b = Planted::pausing(
            InterProcessMutex::new(fw.clone(), &b).unwrap(),
            Duration::ZERO,
        );
        let multi = InterProcessMultiLock::new(vec![rec_b.clone(), slow_a.clone()]).unwrap();
        let asked = tokio::time::Instant::now();
        assert!(!multi.acquire_timeout(Duration::from_secs(1)).await.unwrap());
        // Every member is handed the same deadline, as it is: never a
        // duration recomputed along the way.
        let given_a = slow_a.given.lock().unwrap().clone();
        let given_b = rec_b.given.lock().unwrap().clone();
        assert_eq!(given_a.len(), 1, "{given_a:?}");
        assert_eq!(given_b, given_a, "b gets the one deadline a got");
        match given_a[0] {
            Wait::Until(deadline) => assert!(
                deadline >= asked + Duration::from_secs(1)
                    && deadline <= asked + Duration::from_millis(1100),
                "{given_a:?}"
            ),
            other => panic!("a bounded acquire handed {other:?} to a member"),
        }
        assert!(!slow_a.inner.is_acquired_in_this_process(), "a rolled back");
        assert!(eventually(PATIENCE, gone(&raw, &[&a])).await);

        // A deadline already spent before the last member: it is not even tried.
        let slow_a = Planted::pausing(
            InterProcessMutex::new(fw.clone(), &a).unwrap(),
            Duration::from_millis(500),
        );
        let rec_b = Planted::pausing(
            InterProcessMutex::new(fw.clone(), &b).unwrap(),
            Duration::ZERO,
        );
        let multi = InterProcessMultiLock::new(vec![slow_a.clone(), rec_b.clone()]).unwrap();
        assert!(!multi
            .acquire_timeout(Duration::from_millis(300))
            .await
            .unwrap());
        assert!(rec_b.given.lock().unwrap().is_empty());
        assert!(eventually(PATIENCE, gone(&raw, &[&a])).await);

        held.release().await.unwrap();
        fw.close().await;
        other_fw.close().await;
    })
    .await;
}

/// Runs `acquire` until the first member's node shows up under `first` and
/// its second member has queued under `second` (behind the one node another
/// session holds there), then drops it while it waits.
async fn drop_acquire_after_first_member(
    multi: &InterProcessMultiLock,
    raw: &zk::Client,
    first: &str,
    second: &str,
) {
    let acquire = multi.acquire();
    futures::pin_mut!(acquire);
    tokio::select! {
        result = &mut acquire => panic!("must not get the multi-lock: {result:?}"),
        waiting = eventually(PATIENCE, || async {
            children(raw, first).await.len() == 1 && children(raw, second).await.len() == 2
        }) => {
            assert!(waiting, "the first member was never taken, or the second never queued");
        }
    }
    // Queued behind a held node: the acquire cannot have finished.
    assert!(
        futures::FutureExt::now_or_never(&mut acquire).is_none(),
        "the multi-lock got in past a held member"
    );
}

#[tokio::test]
async fn dropped_acquire_releases_what_was_taken() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let BHeldElsewhere {
            a,
            b,
            fw,
            other_fw,
            raw,
            held,
            held_node,
        } = b_held_elsewhere(&server.connect_string(), "multi-cancel").await;

        let multi = InterProcessMultiLock::from_paths(fw.clone(), &[&b, &a]).unwrap();
        drop_acquire_after_first_member(&multi, &raw, &a, &b).await;
        assert!(!multi.is_owned_by_current_task());
        assert!(!multi.is_acquired_in_this_process());
        assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        assert!(eventually(PATIENCE, gone(&raw, &[&a])).await);
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &b).await == vec![held_node.clone()]
            })
            .await,
            "only the other session's node remains under b: {:?}",
            children(&raw, &b).await
        );

        // Also under tokio::time::timeout (which the helper drops it with
        // once the first member is taken), and by aborting a task once its
        // acquire has taken the first member and waits for the second.
        drop_acquire_after_first_member(&multi, &raw, &a, &b).await;
        assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        assert!(eventually(PATIENCE, gone(&raw, &[&a])).await);
        let task = {
            let multi = multi.clone();
            tokio::spawn(async move { multi.acquire().await })
        };
        assert!(
            eventually(PATIENCE, || async { children(&raw, &a).await.len() == 1 }).await,
            "the task never took the first member"
        );
        assert!(
            !task.is_finished(),
            "the multi-lock got in past a held member"
        );
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        assert!(eventually(PATIENCE, gone(&raw, &[&a])).await);
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &b).await == vec![held_node.clone()]
            })
            .await
        );

        // The multi-lock is fine afterwards.
        held.release().await.unwrap();
        multi.acquire().await.unwrap();
        multi.release().await.unwrap();
        assert!(eventually(PATIENCE, gone(&raw, &[&a, &b])).await);
        fw.close().await;
        other_fw.close().await;
    })
    .await;
}

/// A lock whose hold is a guard, releasable from any task (like a
/// semaphore mutex).
#[derive(Debug)]
struct GuardLock {
    mutex: InterProcessMutex,
    guard: Mutex<Option<MutexGuard>>,
}

impl InterProcessLock for GuardLock {
    fn loss(&self) -> Option<LockLoss> {
        match &*self.guard.lock().unwrap() {
            Some(guard) => guard.loss(),
            None => Some(LockLoss::NotHeld),
        }
    }

    fn lost(&self) -> BoxFuture<'static, LockLoss> {
        match &*self.guard.lock().unwrap() {
            Some(guard) => guard.lost().boxed(),
            None => futures::future::ready(LockLoss::NotHeld).boxed(),
        }
    }

    fn fence(&self) -> Result<Fence> {
        match &*self.guard.lock().unwrap() {
            Some(guard) => guard.fence(),
            None => Err(Error::NotOwner),
        }
    }

    fn acquire_with(&self, wait: Wait) -> BoxFuture<'_, Result<bool>> {
        async move {
            let guard = match wait {
                Wait::Forever => Some(self.mutex.lock().await?),
                Wait::Try => self.mutex.try_lock().await?,
                Wait::Until(deadline) => {
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    self.mutex.try_lock_for(left).await?
                }
            };
            let Some(guard) = guard else {
                return Ok(false);
            };
            *self.guard.lock().unwrap() = Some(guard);
            Ok(true)
        }
        .boxed()
    }

    fn release(&self) -> BoxFuture<'_, Result<()>> {
        async move {
            let guard = self.guard.lock().unwrap().take();
            match guard {
                Some(guard) => guard.release().await,
                None => Err(Error::NotOwner),
            }
        }
        .boxed()
    }

    fn is_acquired_in_this_process(&self) -> bool {
        self.guard.lock().unwrap().is_some()
    }

    fn paths(&self) -> Vec<&str> {
        vec![self.mutex.path()]
    }

    fn participant_nodes(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        self.mutex.participant_nodes().boxed()
    }
}

#[tokio::test]
async fn dropped_acquire_of_generic_members() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let BHeldElsewhere {
            a,
            b,
            fw,
            other_fw,
            raw,
            held,
            held_node: _,
        } = b_held_elsewhere(&server.connect_string(), "multi-cancel-generic").await;

        // Members whose release any task may call: released by a spawned task.
        let free_a = Arc::new(GuardLock {
            mutex: InterProcessMutex::new(fw.clone(), &a).unwrap(),
            guard: Mutex::new(None),
        });
        let free_b = Arc::new(GuardLock {
            mutex: InterProcessMutex::new(fw.clone(), &b).unwrap(),
            guard: Mutex::new(None),
        });
        let multi = InterProcessMultiLock::new(vec![free_b, free_a.clone()]).unwrap();
        drop_acquire_after_first_member(&multi, &raw, &a, &b).await;
        assert!(eventually(PATIENCE, gone(&raw, &[&a])).await);
        assert!(!free_a.is_acquired_in_this_process());

        // Task-bound members (InterProcessMutex through the trait): the spawned
        // task acts as the owner, so their release is accepted too.
        let bound_a = InterProcessMutex::new(fw.clone(), &a).unwrap();
        let multi = InterProcessMultiLock::new(vec![
            Arc::new(InterProcessMutex::new(fw.clone(), &b).unwrap()),
            Arc::new(bound_a.clone()),
        ])
        .unwrap();
        drop_acquire_after_first_member(&multi, &raw, &a, &b).await;
        assert!(eventually(PATIENCE, gone(&raw, &[&a])).await);
        assert!(
            eventually(PATIENCE, || async { !bound_a.is_owned_by_current_task() }).await,
            "a was given back on our behalf"
        );
        assert!(!bound_a.is_acquired_in_this_process());
        assert_eq!(
            multi.release().await,
            Err(Error::NotOwner),
            "nothing is held"
        );

        held.release().await.unwrap();
        multi.acquire().await.unwrap();
        assert_eq!(children(&raw, &a).await.len(), 1);
        multi.release().await.unwrap();
        assert!(eventually(PATIENCE, gone(&raw, &[&a, &b])).await);
        fw.close().await;
        other_fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn multi_locks_nest() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let base = unique_path("multi-nest");
        let (a, b, c) = (
            format!("{base}/a"),
            format!("{base}/b"),
            format!("{base}/c"),
        );
        let (fw, raw) = session_and_raw(&server.connect_string()).await;
        let inner = InterProcessMultiLock::from_paths(fw.clone(), &[&b, &c]).unwrap();
        let outer: Arc<dyn InterProcessLock> = Arc::new(
            InterProcessMultiLock::new(vec![
                Arc::new(inner.clone()),
                Arc::new(InterProcessMutex::new(fw.clone(), &a).unwrap()),
            ])
            .unwrap(),
        );
        // Its members' paths, in the order it takes them: the mutex on a,
        // then the inner multi-lock's b and c.
        assert_eq!(outer.paths(), vec![a.as_str(), b.as_str(), c.as_str()]);
        assert!(outer.acquire_timeout(PATIENCE).await.unwrap());
        assert!(outer.is_acquired_in_this_process());
        assert!(inner.is_owned_by_current_task());
        assert_eq!(outer.participant_nodes().await.unwrap().len(), 3);
        outer.release().await.unwrap();
        assert!(!inner.is_acquired_in_this_process());
        assert!(eventually(PATIENCE, gone(&raw, &[&a, &b, &c])).await);

        // An inner multi-lock whose lowest path is also a member is refused.
        let overlapping = InterProcessMultiLock::new(vec![
            Arc::new(inner.clone()),
            Arc::new(InterProcessMutex::new(fw.clone(), &b).unwrap()),
        ]);
        assert!(matches!(overlapping, Err(Error::InvalidArgument(_))));
        fw.close().await;
    })
    .await;
}

/// A lock of a user's own whose `paths` is empty (the trait asks for at
/// least one): never acquired, as a multi-lock refuses it.
#[derive(Debug)]
struct Pathless;

impl InterProcessLock for Pathless {
    fn loss(&self) -> Option<LockLoss> {
        Some(LockLoss::NotHeld)
    }

    fn lost(&self) -> BoxFuture<'static, LockLoss> {
        futures::future::ready(LockLoss::NotHeld).boxed()
    }

    fn fence(&self) -> Result<Fence> {
        Err(Error::NotOwner)
    }

    fn acquire_with(&self, _wait: Wait) -> BoxFuture<'_, Result<bool>> {
        async { Ok(true) }.boxed()
    }

    fn release(&self) -> BoxFuture<'_, Result<()>> {
        async { Ok(()) }.boxed()
    }

    fn is_acquired_in_this_process(&self) -> bool {
        false
    }

    fn paths(&self) -> Vec<&str> {
        Vec::new()
    }

    fn participant_nodes(&self) -> BoxFuture<'_, Result<Vec<String>>> {
        async { Ok(Vec::new()) }.boxed()
    }
}

#[tokio::test]
async fn bad_input_is_refused() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let fw = framework(&server.connect_string()).await;
        let base = unique_path("multi-bad");
        let (a, b) = (format!("{base}/a"), format!("{base}/b"));

        let err = InterProcessMultiLock::from_paths(fw.clone(), &[]).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        let err = InterProcessMultiLock::from_paths(fw.clone(), &[&a, &b, &a]).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        for bad in ["", "relative", "/", "/trailing/", "/zookeeper/x", "/a//b"] {
            let err = InterProcessMultiLock::from_paths(fw.clone(), &[&a, bad]).unwrap_err();
            assert!(matches!(err, Error::InvalidPath(_)), "{bad:?} gave {err:?}");
        }
        let err = InterProcessMultiLock::new(Vec::new()).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        let err = InterProcessMultiLock::new(vec![
            Arc::new(InterProcessMutex::new(fw.clone(), &a).unwrap()),
            Arc::new(InterProcessMutex::new(fw.clone(), &a).unwrap()),
        ])
        .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        let err = InterProcessMultiLock::from_mutexes(vec![
            InterProcessMutex::new(fw.clone(), &b).unwrap(),
            InterProcessMutex::new(fw.clone(), &b).unwrap(),
        ])
        .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        // A lock of the caller's own that names no path cannot be ordered.
        let err = InterProcessMultiLock::new(vec![
            Arc::new(InterProcessMutex::new(fw.clone(), &a).unwrap()),
            Arc::new(Pathless),
        ])
        .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");

        // Nothing was sent.
        let raw = raw_client(&server.connect_string()).await;
        assert_eq!(raw.check_stat(&base).await.unwrap(), None);

        // A release without a hold, and an acquire on a closed framework.
        let multi = InterProcessMultiLock::from_paths(fw.clone(), &[&a, &b]).unwrap();
        assert_eq!(multi.release().await, Err(Error::NotOwner));
        fw.close().await;
        assert_eq!(multi.acquire().await, Err(Error::Closed));
        assert_eq!(
            multi.acquire_timeout(Duration::from_secs(1)).await,
            Err(Error::Closed)
        );
        assert!(all_empty(&raw, &[&a, &b]).await);
    })
    .await;
}

/// The last release gives every member back at once: with every reply held,
/// all the members' deletes are still sent (one after the other, each
/// waiting for its answer, only the first would be), and the release ends
/// once they are answered. Both kinds of member: mutexes the multi-lock
/// makes (guards) and locks handed to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sends_every_member_delete_at_once() {
    use zk_curator_testing::FaultProxy;
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework(&proxy.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;
        let root = unique_path("multi-release-at-once");
        let paths: Vec<String> = (0..3).map(|i| format!("{root}/m{i}")).collect();
        let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        let members: Vec<Arc<dyn InterProcessLock>> = paths
            .iter()
            .map(|p| Arc::new(InterProcessMutex::new(fw.clone(), p).unwrap()) as Arc<dyn InterProcessLock>)
            .collect();
        let kinds = [
            ("guards", InterProcessMultiLock::from_paths(fw.clone(), &refs).unwrap()),
            ("locks", InterProcessMultiLock::new(members).unwrap()),
        ];
        for (kind, multi) in kinds {
            multi.acquire().await.unwrap();
            proxy.clear_traffic();
            proxy.hold_replies(true);
            let deletes = || common::deletes_sent(&proxy);
            let mut release = std::pin::pin!(multi.release());
            tokio::select! {
                done = &mut release => panic!("{kind}: the release ended with every reply held: {done:?}"),
                sent = eventually(PATIENCE, || async { deletes() == 3 }) => {
                    assert!(sent, "{kind}: only {} of 3 deletes sent", deletes());
                }
            }
            proxy.hold_replies(false);
            release.await.unwrap();
            for path in &paths {
                assert!(children(&raw, path).await.is_empty(), "{kind}: {path}");
            }
        }
        fw.close().await;
    })
    .await;
}
