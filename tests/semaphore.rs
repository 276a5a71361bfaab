//! InterProcessSemaphoreV2 and InterProcessSemaphoreMutex against a real
//! ZooKeeper: Curator's semaphore tests (CURATOR-NOTES §17.3, §17.6),
//! cancellation, multi-lease contention, lost replies and bad input.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{
    bounded, children, eventually, framework, raw_client, requests_with, server, unique_path,
    wait_for_participants, BOUND, LONG_BOUND, PATIENCE,
};
use zk_curator::framework::retry::RetryPolicy;
use zk_curator::framework::zk;
use zk_curator::framework::DEFAULT_MAX_PACKET_SIZE;
use zk_curator::{
    Error, Framework, InterProcessLock, InterProcessSemaphoreMutex, InterProcessSemaphoreV2, Lease,
};
use zk_curator_testing::{FaultProxy, RequestMatcher};

const SHORT: Duration = Duration::from_millis(300);

fn leases_of(path: &str) -> String {
    format!("{path}/leases")
}

fn locks_of(path: &str) -> String {
    format!("{path}/locks")
}

/// Counts leases held in this process and remembers the peak. Callers add
/// after an acquire returns and subtract before releasing, so the count never
/// exceeds what ZooKeeper grants.
#[derive(Default)]
struct Gauge {
    current: AtomicUsize,
    peak: AtomicUsize,
}

impl Gauge {
    fn add(&self, n: usize) -> usize {
        let now = self.current.fetch_add(n, Ordering::SeqCst) + n;
        self.peak.fetch_max(now, Ordering::SeqCst);
        now
    }

    fn sub(&self, n: usize) {
        self.current.fetch_sub(n, Ordering::SeqCst);
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

/// Awaits `future`, failing the test instead of hanging if it takes longer
/// than [`PATIENCE`].
async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .expect("no answer within PATIENCE")
}

/// Waits for the background cleaner of every framework, then until the
/// leases are exactly `leases` and no internal mutex node is left.
async fn assert_settles(raw: &zk::Client, frameworks: &[&Framework], path: &str, leases: &[&str]) {
    for fw in frameworks {
        assert!(fw.wait_for_background_cleanup(PATIENCE).await);
    }
    let mut expected: Vec<String> = leases.iter().map(|s| (*s).to_owned()).collect();
    expected.sort();
    let settled = eventually(PATIENCE, || {
        let expected = expected.clone();
        async move {
            let mut now = children(raw, &leases_of(path)).await;
            now.sort();
            now == expected && children(raw, &locks_of(path)).await.is_empty()
        }
    })
    .await;
    assert!(
        settled,
        "leases {:?} (expected {expected:?}), locks {:?}",
        children(raw, &leases_of(path)).await,
        children(raw, &locks_of(path)).await
    );
}

#[tokio::test]
async fn simple() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("sem-simple");
        let fw = framework(&server.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;
        let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, 1).unwrap();
        assert_eq!(semaphore.max_leases(), 1);
        assert_eq!(semaphore.path(), path);

        let lease = semaphore
            .acquire_timeout(PATIENCE)
            .await
            .unwrap()
            .expect("a free semaphore grants a lease");
        assert!(
            semaphore.acquire_timeout(SHORT).await.unwrap().is_none(),
            "the only lease is taken"
        );

        // Curator's layout.
        let name = lease.node().name().to_owned();
        assert!(
            name.starts_with("_c_") && name.contains("-lease-"),
            "{name}"
        );
        assert_eq!(lease.node().path(), format!("{path}/leases/{name}"));
        assert_settles(&raw, &[&fw], &path, &[&name]).await;
        let stat = raw.check_stat(lease.node().path()).await.unwrap().unwrap();
        assert_eq!(lease.fencing_token().get(), stat.czxid);
        assert_eq!(stat.ephemeral_owner, fw.session().await.unwrap().id());
        assert!(lease.is_valid());

        lease.release().await.unwrap();
        assert!(children(&raw, &leases_of(&path)).await.is_empty());
        let again = within(semaphore.acquire()).await.unwrap();
        assert!(
            again.fencing_token().get() > stat.czxid,
            "fencing tokens grow"
        );
        again.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn simple2() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("sem-simple2");
        let mut frameworks = Vec::new();
        let mut semaphores = Vec::new();
        for _ in 0..4 {
            let fw = framework(&server.connect_string()).await;
            semaphores.push(InterProcessSemaphoreV2::new(fw.clone(), &path, 3).unwrap());
            frameworks.push(fw);
        }
        let mut leases = Vec::new();
        for semaphore in &semaphores[..3] {
            leases.push(semaphore.acquire_timeout(PATIENCE).await.unwrap().unwrap());
        }
        assert!(
            semaphores[3]
                .acquire_timeout(SHORT)
                .await
                .unwrap()
                .is_none(),
            "the 4th must time out"
        );
        leases.pop().unwrap().release().await.unwrap();
        let fourth = semaphores[3]
            .acquire_timeout(PATIENCE)
            .await
            .unwrap()
            .expect("a returned lease lets the 4th in");
        leases.push(fourth);
        InterProcessSemaphoreV2::return_all(leases).await.unwrap();
        for fw in frameworks {
            fw.close().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peak_concurrency_equals_max_leases() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let path = unique_path("sem-peak");
        let gauge = Arc::new(Gauge::default());
        let got = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        let mut frameworks = Vec::new();
        for _ in 0..10 {
            let fw = framework(&server.connect_string()).await;
            let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, 5).unwrap();
            frameworks.push(fw);
            let (gauge, got) = (gauge.clone(), got.clone());
            tasks.push(tokio::spawn(async move {
                let lease = semaphore.acquire_timeout(PATIENCE).await.unwrap().unwrap();
                got.fetch_add(1, Ordering::SeqCst);
                assert!(gauge.add(1) <= 5, "more than 5 leases at once");
                // Hold ~200 ms, and (so that a slow machine cannot make the
                // peak flaky) until five were held at once, within 5 s.
                let full = async {
                    while gauge.peak() < 5 {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(5), full).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
                gauge.sub(1);
                lease.release().await.unwrap();
            }));
        }
        for task in tasks {
            tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
        }
        assert_eq!(got.load(Ordering::SeqCst), 10, "every client got a lease");
        assert_eq!(gauge.peak(), 5, "the peak must reach max_leases exactly");
        for fw in frameworks {
            fw.close().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_chunks_never_exceed_max() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        const MAX: u32 = 11;
        let path = unique_path("sem-chunks");
        let gauge = Arc::new(Gauge::default());
        let mut frameworks = Vec::new();
        for _ in 0..4 {
            frameworks.push(framework(&server.connect_string()).await);
        }
        let mut tasks = Vec::new();
        for id in 0..20u64 {
            let fw = frameworks[id as usize % frameworks.len()].clone();
            let semaphore = InterProcessSemaphoreV2::new(fw, &path, MAX).unwrap();
            let gauge = gauge.clone();
            tasks.push(tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(0x5EED + id);
                for _ in 0..3 {
                    let n = rng.u32(1..=3);
                    let mut leases = semaphore
                        .acquire_many_timeout(n, PATIENCE)
                        .await
                        .unwrap()
                        .expect("no acquire may time out");
                    assert_eq!(leases.len(), n as usize);
                    assert!(gauge.add(leases.len()) <= MAX as usize, "over max");
                    tokio::time::sleep(Duration::from_millis(rng.u64(0..=20))).await;
                    while !leases.is_empty() {
                        let chunk = rng.usize(1..=leases.len());
                        let returned: Vec<Lease> = leases.drain(..chunk).collect();
                        gauge.sub(returned.len());
                        InterProcessSemaphoreV2::return_all(returned).await.unwrap();
                        tokio::time::sleep(Duration::from_millis(rng.u64(0..=5))).await;
                    }
                }
            }));
        }
        for task in tasks {
            tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
        }
        assert!(gauge.peak() <= MAX as usize);
        assert!(gauge.peak() >= 2, "the leases were shared");
        let raw = raw_client(&server.connect_string()).await;
        assert_settles(&raw, &frameworks.iter().collect::<Vec<_>>(), &path, &[]).await;
        for fw in frameworks {
            fw.close().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_share_one_instance() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("sem-threads");
        let fw = framework(&server.connect_string()).await;
        let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, 1).unwrap();
        let inside = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..10 {
            let (semaphore, inside, done) = (semaphore.clone(), inside.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                let lease = within(semaphore.acquire()).await.unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                tokio::time::sleep(Duration::from_millis(10)).await;
                inside.store(false, Ordering::SeqCst);
                lease.release().await.unwrap();
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
async fn participant_nodes() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("sem-participants");
        let fw = framework(&server.connect_string()).await;
        let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, 5).unwrap();
        assert_eq!(
            semaphore.participant_nodes().await.unwrap(),
            Vec::<String>::new(),
            "empty, not an error, before first use (CURATOR-19)"
        );
        let leases = within(semaphore.acquire_many(3)).await.unwrap();
        let mut expected: Vec<String> = leases.iter().map(|l| l.node().path().to_owned()).collect();
        expected.sort_by_key(|p| p[p.len() - 10..].to_owned());
        assert_eq!(semaphore.participant_nodes().await.unwrap(), expected);
        InterProcessSemaphoreV2::return_all(leases).await.unwrap();
        assert!(semaphore.participant_nodes().await.unwrap().is_empty());
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn lease_data_and_fencing_tokens() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("sem-data");
        let fw = framework(&server.connect_string()).await;
        let semaphore =
            InterProcessSemaphoreV2::with_node_data(fw.clone(), &path, 2, b"worker-7").unwrap();
        let a = within(semaphore.acquire()).await.unwrap();
        let b = within(semaphore.acquire()).await.unwrap();
        assert_eq!(a.data().await.unwrap(), b"worker-7");
        assert_eq!(b.data().await.unwrap(), b"worker-7");
        assert!(b.fencing_token() > a.fencing_token());
        // A lease may be returned from any task.
        let (a_token, b_token) = (a.fencing_token(), b.fencing_token());
        tokio::spawn(a.release()).await.unwrap().unwrap();
        let c = within(semaphore.acquire()).await.unwrap();
        assert!(c.fencing_token() > b_token && b_token > a_token);
        InterProcessSemaphoreV2::return_all([b, c]).await.unwrap();
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn nodes_sorting_behind_ours_do_not_count() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("sem-foreign");
        let fw = framework(&server.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;
        // A foreign child under the leases (Curator would count it: CURATOR-43).
        let foreign = format!("{}/foreign-node", leases_of(&path));
        raw.mkdir(
            &foreign,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
        let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, 1).unwrap();
        let lease = semaphore
            .acquire_timeout(PATIENCE)
            .await
            .unwrap()
            .expect("a node sorting behind ours takes no lease");
        assert!(semaphore.acquire_timeout(SHORT).await.unwrap().is_none());
        assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        let nodes = semaphore.participant_nodes().await.unwrap();
        assert_eq!(nodes, vec![lease.node().path().to_owned(), foreign.clone()]);
        lease.release().await.unwrap();
        raw.delete(&foreign, None).await.unwrap();
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn client_close_frees_its_leases() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("sem-close");
        let (fa, fb) = (
            framework(&server.connect_string()).await,
            framework(&server.connect_string()).await,
        );
        let a = InterProcessSemaphoreV2::new(fa.clone(), &path, 1).unwrap();
        let b = InterProcessSemaphoreV2::new(fb.clone(), &path, 1).unwrap();
        let held = within(a.acquire()).await.unwrap();
        let waiting = tokio::spawn(async move { b.acquire_timeout(PATIENCE).await });
        // b's lease node is listed behind a's.
        let raw = raw_client(&server.connect_string()).await;
        wait_for_participants(&raw, &leases_of(&path), 2).await;
        assert!(
            !waiting.is_finished(),
            "b must wait while a holds the lease"
        );
        fa.close().await;
        let lease = waiting
            .await
            .unwrap()
            .unwrap()
            .expect("closing a frees its lease");
        drop(held); // the framework is closed: nothing to do
        lease.release().await.unwrap();
        fb.close().await;
    })
    .await;
}

#[tokio::test]
async fn orphan_lease_removed_externally_while_waiting() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("sem-orphan");
        let fw = framework(&server.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;
        let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, 1).unwrap();
        let held = within(semaphore.acquire()).await.unwrap();
        // The waiter is another process's: one of this process would wait
        // in-process for the lease this process holds, without a node.
        let other = framework(&server.connect_string()).await;
        let waiting = {
            let semaphore = InterProcessSemaphoreV2::new(other.clone(), &path, 1).unwrap();
            tokio::spawn(async move { semaphore.acquire_timeout(PATIENCE).await })
        };
        let held_name = held.node().name().to_owned();
        let others = |raw: &zk::Client| {
            let (raw, held_name, leases) = (raw.clone(), held_name.clone(), leases_of(&path));
            async move {
                let mut nodes = children(&raw, &leases).await;
                nodes.retain(|n| *n != held_name);
                nodes
            }
        };
        assert!(eventually(PATIENCE, || async { others(&raw).await.len() == 1 }).await);
        let first = others(&raw).await.remove(0);
        raw.delete(&format!("{}/{first}", leases_of(&path)), None)
            .await
            .unwrap();
        // The waiter notices and queues a new lease node.
        assert!(
            eventually(PATIENCE, || async {
                let now = others(&raw).await;
                now.len() == 1 && now[0] != first
            })
            .await,
            "the waiter must create a new lease node"
        );
        assert!(!waiting.is_finished());
        held.release().await.unwrap();
        let lease = waiting
            .await
            .unwrap()
            .unwrap()
            .expect("the waiter gets the lease after the holder returns it");
        lease.release().await.unwrap();
        assert_settles(&raw, &[&fw, &other], &path, &[]).await;
        let again = semaphore.acquire_timeout(PATIENCE).await.unwrap().unwrap();
        again.release().await.unwrap();
        other.close().await;
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn killed_session_frees_leases() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("sem-killed");
        let (fa, fb) = (
            framework(&server.connect_string()).await,
            framework(&server.connect_string()).await,
        );
        let a = InterProcessSemaphoreV2::new(fa.clone(), &path, 2).unwrap();
        let b = InterProcessSemaphoreV2::new(fb.clone(), &path, 2).unwrap();
        let held = within(a.acquire_many(2)).await.unwrap();
        let waiting = tokio::spawn(async move { b.acquire_many_timeout(2, PATIENCE).await });
        // b's first lease node is listed behind a's two.
        let raw = raw_client(&server.connect_string()).await;
        wait_for_participants(&raw, &leases_of(&path), 3).await;
        assert!(
            !waiting.is_finished(),
            "b must wait while a holds both leases"
        );

        let client = fa.client().await.unwrap();
        zk_curator_testing::expire_session(&server.connect_string(), &client)
            .await
            .unwrap();
        let leases = waiting
            .await
            .unwrap()
            .unwrap()
            .expect("the expired session's leases are free");
        assert!(
            held.iter().all(|l| !l.is_valid()),
            "they died with the session"
        );
        assert!(leases.iter().all(|l| l.is_valid()));
        assert!(leases[0].fencing_token() > held[1].fencing_token());
        // Returning a dead lease returns at once and says it was lost.
        assert!(matches!(
            InterProcessSemaphoreV2::return_all(held).await,
            Err(Error::LockLost { .. })
        ));
        InterProcessSemaphoreV2::return_all(leases).await.unwrap();
        fa.close().await;
        fb.close().await;
    })
    .await;
}

#[tokio::test]
async fn waiter_survives_its_own_session_expiry() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("sem-waiter-expiry");
        let (fa, fb) = (
            framework(&server.connect_string()).await,
            framework(&server.connect_string()).await,
        );
        let raw = raw_client(&server.connect_string()).await;
        let a = InterProcessSemaphoreV2::new(fa.clone(), &path, 1).unwrap();
        let b = InterProcessSemaphoreV2::new(fb.clone(), &path, 1).unwrap();
        let held = within(a.acquire()).await.unwrap();
        let waiting = tokio::spawn(async move { b.acquire_timeout(PATIENCE).await });
        wait_for_participants(&raw, &leases_of(&path), 2).await;
        let first_session = fb.session().await.unwrap();
        zk_curator_testing::expire_session(&server.connect_string(), first_session.client())
            .await
            .unwrap();
        // The waiter starts over on its next session (at the back of the queue).
        assert!(
            eventually(PATIENCE, || async {
                fb.current_session()
                    .is_some_and(|s| s.generation() > first_session.generation())
                    && children(&raw, &leases_of(&path)).await.len() == 2
            })
            .await,
            "the waiter must queue again on its new session"
        );
        held.release().await.unwrap();
        let lease = waiting
            .await
            .unwrap()
            .unwrap()
            .expect("granted after restart");
        assert!(lease.is_valid());
        lease.release().await.unwrap();
        assert_settles(&raw, &[&fa, &fb], &path, &[]).await;
        fa.close().await;
        fb.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_leave_nothing_behind() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("sem-cancel");
        let (fa, fb) = (
            framework(&server.connect_string()).await,
            framework(&server.connect_string()).await,
        );
        let raw = raw_client(&server.connect_string()).await;
        let a = InterProcessSemaphoreV2::new(fa.clone(), &path, 2).unwrap();
        let b = InterProcessSemaphoreV2::new(fb.clone(), &path, 2).unwrap();
        let mut held = within(a.acquire_many(2)).await.unwrap();
        let names: Vec<String> = held.iter().map(|l| l.node().name().to_owned()).collect();
        let held_names: Vec<&str> = names.iter().map(String::as_str).collect();

        // Each acquire below is dropped once it is seen waiting with a lease
        // node of its own, next to the two held ones.
        let waiting = || async {
            assert!(
                eventually(PATIENCE, || async {
                    children(&raw, &leases_of(&path)).await.len() == 3
                })
                .await,
                "the acquire never waited with a lease node"
            );
        };

        // Under tokio::time::timeout (let go once it waits).
        let mut acquire = Box::pin(b.acquire());
        tokio::select! {
            _ = &mut acquire => panic!("nothing is free"),
            () = waiting() => {}
        }
        assert!(tokio::time::timeout(Duration::ZERO, acquire).await.is_err());
        assert_settles(&raw, &[&fb], &path, &held_names).await;

        // A timed acquire.
        assert!(b.acquire_timeout(SHORT).await.unwrap().is_none());
        assert_settles(&raw, &[&fb], &path, &held_names).await;

        // A losing select! branch.
        tokio::select! {
            _ = b.acquire() => panic!("nothing is free"),
            () = waiting() => {}
        }
        assert_settles(&raw, &[&fb], &path, &held_names).await;

        // An aborted task.
        let task = {
            let b = b.clone();
            tokio::spawn(async move { within(b.acquire()).await })
        };
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &leases_of(&path)).await.len() == 3
            })
            .await,
            "the task is waiting with a lease node"
        );
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        assert_settles(&raw, &[&fb], &path, &held_names).await;

        // Dropped after a single poll (the create may be in flight).
        for _ in 0..3 {
            let mut acquire = Box::pin(b.acquire());
            assert!(futures::poll!(&mut acquire).is_pending());
            drop(acquire);
            assert_settles(&raw, &[&fb], &path, &held_names).await;
        }

        // A multi-lease acquire holding part of its leases when it times out.
        held.pop().unwrap().release().await.unwrap();
        let first = held.pop().unwrap();
        let kept = [first.node().name().to_owned()];
        assert!(b
            .acquire_many_timeout(2, Duration::from_millis(500))
            .await
            .unwrap()
            .is_none());
        assert_settles(&raw, &[&fa, &fb], &path, &[&kept[0]]).await;

        // Nothing was lost: both leases can still be had.
        first.release().await.unwrap();
        let both = b.acquire_many_timeout(2, PATIENCE).await.unwrap().unwrap();
        InterProcessSemaphoreV2::return_all(both).await.unwrap();
        assert_settles(&raw, &[&fa, &fb], &path, &[]).await;
        fa.close().await;
        fb.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lease_acquirers_never_deadlock() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        const MAX: u32 = 4;
        let path = unique_path("sem-multi");
        let gauge = Arc::new(Gauge::default());
        let mut frameworks = Vec::new();
        let mut tasks = Vec::new();
        // Two clients wanting every lease, one wanting most of them: with
        // Curator's one-lease-at-a-time acquire they end up holding part each
        // and waiting for one another.
        for (id, want) in [(0u64, MAX), (1, MAX), (2, MAX - 1)] {
            let fw = framework(&server.connect_string()).await;
            let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, MAX).unwrap();
            frameworks.push(fw);
            let gauge = gauge.clone();
            tasks.push(tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(0xD1CE + id);
                for _ in 0..6 {
                    let leases = semaphore
                        .acquire_many_timeout(want, Duration::from_secs(5))
                        .await
                        .unwrap()
                        .expect("multi-lease acquirers must not block each other");
                    assert!(gauge.add(leases.len()) <= MAX as usize, "over max");
                    tokio::time::sleep(Duration::from_millis(rng.u64(5..=20))).await;
                    gauge.sub(leases.len());
                    InterProcessSemaphoreV2::return_all(leases).await.unwrap();
                }
            }));
        }
        for task in tasks {
            tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
        }
        assert!(gauge.peak() <= MAX as usize);
        for fw in frameworks {
            fw.close().await;
        }
    })
    .await;
}

#[tokio::test]
async fn lost_reply_to_the_lease_create_leaves_one_lease() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("sem-lost-reply");
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework(&proxy.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;
        let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, 2).unwrap();

        let fault = proxy.lose_reply_to_next(RequestMatcher::creates().path_contains("-lease-"));
        let lease = tokio::time::timeout(PATIENCE, semaphore.acquire())
            .await
            .unwrap()
            .unwrap();
        assert!(fault.fired(), "the lease create's reply was lost");
        assert_settles(&raw, &[&fw], &path, &[lease.node().name()]).await;
        let stat = raw.check_stat(lease.node().path()).await.unwrap().unwrap();
        assert_eq!(stat.ephemeral_owner, fw.session().await.unwrap().id());
        lease.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

/// A retry policy that, once armed, makes the first retry asked of it
/// wait `slow` and every other one 10 ms.
#[derive(Debug)]
struct SlowFirstRetry {
    armed: Arc<AtomicBool>,
    slow: Duration,
}

impl RetryPolicy for SlowFirstRetry {
    fn allow_retry(&self, retry_count: u32, _elapsed: Duration) -> Option<Duration> {
        if retry_count > 20 {
            return None;
        }
        if self.armed.swap(false, Ordering::SeqCst) {
            Some(self.slow)
        } else {
            Some(Duration::from_millis(10))
        }
    }
}

/// Seed 59458 of the simulator, on a real server: the semaphore lists its
/// path beside the internal mutex's acquire, so the mutex can be granted
/// while that listing is still being retried after a lost connection. A
/// deadline that ends the acquire in that gap must still give the mutex
/// back; before the fix its node stayed for as long as the session lived,
/// and every later acquirer of the semaphore waited behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_between_the_mutex_grant_and_the_listing_gives_the_mutex_back() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("sem-grant-gap");
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let armed = Arc::new(AtomicBool::new(false));
        let policy = SlowFirstRetry {
            armed: armed.clone(),
            slow: Duration::from_secs(2),
        };
        let fw = common::framework_with(&proxy.connect_string(), |b| b.retry_policy(policy)).await;
        let raw = raw_client(&server.connect_string()).await;
        let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, 2).unwrap();
        // One acquire and release first, so that the path and its `locks`
        // child exist: the acquire below sends only the path's listing
        // (first, matched by the fault), the mutex's create and its
        // listing.
        within(semaphore.acquire())
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        assert_settles(&raw, &[&fw], &path, &[]).await;

        // The listing of the semaphore's path (sent first) loses its reply
        // and the connection: the listing is retried in 2 s, the mutex's
        // create in 10 ms, and the deadline (700 ms) falls in between.
        armed.store(true, Ordering::SeqCst);
        let fault = proxy.lose_reply_to_next(
            RequestMatcher::opcode(zk_curator_testing::proxy::opcode::GET_CHILDREN)
                .path_contains(&path),
        );
        let acquire = semaphore.acquire_timeout(Duration::from_millis(700));
        let mut acquire = std::pin::pin!(acquire);
        // While it waits, the internal mutex is taken on the server: a node
        // of ours under `locks`, and no lease yet.
        let seen = tokio::select! {
            result = &mut acquire => panic!("returned before the mutex was seen held: {result:?}"),
            seen = eventually(PATIENCE, || async {
                children(&raw, &locks_of(&path)).await.len() == 1
            }) => seen,
        };
        assert!(seen, "the internal mutex was never taken");
        assert!(fault.fired(), "the listing's reply was lost");
        assert!(
            within(acquire).await.unwrap().is_none(),
            "a lease was granted though the listing was still being retried"
        );
        assert!(
            !armed.load(Ordering::SeqCst),
            "the slow retry was never asked for"
        );
        // The mutex is given back: nothing left under `locks`, no lease.
        assert_settles(&raw, &[&fw], &path, &[]).await;
        // And the semaphore is free for another session at once.
        let other = framework(&server.connect_string()).await;
        let lease = InterProcessSemaphoreV2::new(other.clone(), &path, 2)
            .unwrap()
            .acquire_timeout(Duration::from_secs(2))
            .await
            .unwrap()
            .expect("the semaphore is free");
        lease.release().await.unwrap();
        other.close().await;
        fw.close().await;
    })
    .await;
}

fn invalid_argument<T>(result: Result<T, Error>) -> bool {
    matches!(result, Err(Error::InvalidArgument(_)))
}

fn invalid_path<T>(result: Result<T, Error>) -> bool {
    matches!(result, Err(Error::InvalidPath(_)))
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_sent() {
    bounded(BOUND, async move {
        common::init_tracing();
        // A framework that was never started: any I/O would fail with `NotStarted`.
        let fw = Framework::builder()
            .connect_string("127.0.0.1:1")
            .build()
            .unwrap();

        assert!(invalid_argument(InterProcessSemaphoreV2::new(
            fw.clone(),
            "/sem",
            0
        )));
        for bad in [
            "",
            "relative",
            "/",
            "/trailing/",
            "/a//b",
            "/zookeeper/x",
            "/a/./b",
        ] {
            assert!(
                invalid_path(InterProcessSemaphoreV2::new(fw.clone(), bad, 1)),
                "{bad:?}"
            );
            assert!(
                invalid_path(InterProcessSemaphoreMutex::new(fw.clone(), bad)),
                "{bad:?}"
            );
        }
        let big = vec![0u8; DEFAULT_MAX_PACKET_SIZE];
        assert!(matches!(
            InterProcessSemaphoreV2::with_node_data(fw.clone(), "/sem", 1, &big),
            Err(Error::RequestTooLarge { .. })
        ));
        let ok = vec![0u8; 1024];
        let semaphore =
            InterProcessSemaphoreV2::with_node_data(fw.clone(), "/sem", 2, &ok).unwrap();
        assert!(invalid_argument(within(semaphore.acquire_many(0)).await));
        assert!(invalid_argument(within(semaphore.acquire_many(3)).await));
        assert!(invalid_argument(
            semaphore.acquire_many_timeout(0, SHORT).await
        ));
        assert!(invalid_argument(
            semaphore.acquire_many_timeout(3, SHORT).await
        ));
        // Valid requests do reach the framework, never started.
        assert!(matches!(
            within(semaphore.acquire_many(2)).await,
            Err(Error::NotStarted)
        ));
        assert!(matches!(
            within(semaphore.acquire()).await,
            Err(Error::NotStarted)
        ));
    })
    .await;
}

#[tokio::test]
async fn semaphore_mutex_is_not_reentrant() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("semmutex-reentrant");
        let fw = framework(&server.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;
        let mutex = InterProcessSemaphoreMutex::new(fw.clone(), &path).unwrap();
        assert!(mutex.participant_nodes().await.unwrap().is_empty());
        within(mutex.acquire()).await.unwrap();
        assert!(mutex.is_acquired_in_this_process());
        assert!(
            !mutex.acquire_timeout(SHORT).await.unwrap(),
            "a second acquire by the holder must wait"
        );
        assert!(mutex.is_acquired_in_this_process(), "the hold is unchanged");
        let node = mutex.node().unwrap().path().to_owned();
        let name = node.rsplit('/').next().unwrap();
        assert_settles(&raw, &[&fw], &path, &[name]).await;
        assert_eq!(mutex.participant_nodes().await.unwrap(), vec![node.clone()]);
        mutex.release().await.unwrap();
        assert!(!mutex.is_acquired_in_this_process());
        assert_eq!(mutex.release().await, Err(Error::NotOwner));
        assert!(children(&raw, &leases_of(&path)).await.is_empty());
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_mutex_release_from_another_task() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("semmutex-other-task");
        let fw = framework(&server.connect_string()).await;
        let raw = raw_client(&server.connect_string()).await;
        let mutex = InterProcessSemaphoreMutex::new(fw.clone(), &path).unwrap();
        assert_eq!(mutex.release().await, Err(Error::NotOwner), "not held yet");
        within(mutex.acquire()).await.unwrap();
        let token = mutex.fencing_token().unwrap();
        let other = mutex.clone();
        tokio::spawn(async move { other.release().await })
            .await
            .unwrap()
            .unwrap();
        assert!(!mutex.is_acquired_in_this_process());
        assert!(children(&raw, &leases_of(&path)).await.is_empty());
        // And through the trait, from yet another task.
        let lock: Arc<dyn InterProcessLock> = Arc::new(mutex.clone());
        assert!(lock.acquire_timeout(PATIENCE).await.unwrap());
        assert!(mutex.fencing_token().unwrap() > token);
        let other = lock.clone();
        tokio::spawn(async move { other.release().await })
            .await
            .unwrap()
            .unwrap();
        assert!(!lock.is_acquired_in_this_process());
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn semaphore_mutex_sessions_exclude_each_other() {
    common::init_tracing();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("semmutex-two");
        let (fa, fb) = (
            framework(&server.connect_string()).await,
            framework(&server.connect_string()).await,
        );
        let a = InterProcessSemaphoreMutex::new(fa.clone(), &path).unwrap();
        let b = InterProcessSemaphoreMutex::new(fb.clone(), &path).unwrap();
        within(a.acquire()).await.unwrap();
        assert!(!b.acquire_timeout(SHORT).await.unwrap());
        assert!(!b.is_acquired_in_this_process());
        // Only a's lease is left once b's timed-out attempt is cleaned up.
        let raw = raw_client(&server.connect_string()).await;
        let a_node = a.node().unwrap().path().to_owned();
        assert_settles(&raw, &[&fb], &path, &[a_node.rsplit('/').next().unwrap()]).await;
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move { within(b.acquire()).await })
        };
        // b's lease node is listed behind a's.
        wait_for_participants(&raw, &leases_of(&path), 2).await;
        assert!(!waiter.is_finished(), "b waits while a holds it");
        a.release().await.unwrap();
        tokio::time::timeout(PATIENCE, waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(b.is_acquired_in_this_process() && b.is_valid());
        assert!(!a.acquire_timeout(SHORT).await.unwrap());
        b.release().await.unwrap();
        fa.close().await;
        fb.close().await;
    })
    .await;
}

#[tokio::test]
async fn a_free_lease_costs_two_round_trips() {
    use zk_curator_testing::proxy::opcode;
    use zk_curator_testing::Traffic;
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("sem-round-trips");
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework(&proxy.connect_string()).await;
        let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, 2).unwrap();
        // The internal mutex's parent is a container the server reaps once
        // it is empty: made persistent here, with a foreign child that keeps
        // it (it sorts behind every lock node, so it never counts as a
        // holder), before anything runs.
        let raw = raw_client(&server.connect_string()).await;
        let keep = format!("{}/keep", locks_of(&path));
        let mut level = String::new();
        for part in keep.split('/').skip(1) {
            level = format!("{level}/{part}");
            let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            match raw.create(&level, b"", &persistent).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(err) => panic!("cannot create {level}: {err}"),
            }
        }
        // Warm up, and keep one lease so the leases' parent stays.
        let kept = semaphore.acquire().await.unwrap();
        // Its internal mutex's delete answered first.
        assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        proxy.clear_traffic();
        // Every reply from the internal mutex's delete on is held: the
        // acquire returns without that answer (well within the connection
        // timeout, after which a waiting release would give up too).
        proxy.hold_replies_from_next(RequestMatcher::deletes());
        let lease = tokio::time::timeout(Duration::from_secs(3), semaphore.acquire())
            .await
            .expect("the acquire waited for the internal mutex's delete")
            .unwrap();
        assert!(
            eventually(PATIENCE, || async {
                requests_with(&proxy, opcode::DELETE) == 1
            })
            .await
        );
        proxy.hold_replies(false);
        assert!(fw.wait_for_background_cleanup(PATIENCE).await);
        let requests: Vec<(i32, Option<String>)> = proxy
            .traffic()
            .into_iter()
            .filter_map(|t| match t {
                Traffic::Request { opcode, path, .. } => Some((opcode, path)),
                Traffic::Reply { .. } => None,
            })
            .collect();
        // The look at the semaphore's own path for participants of another
        // family (a mutex's, kazoo's): one listing, sent beside the
        // internal mutex's create, so no round trip of its own.
        let own_path = Some(path.clone());
        let looks = requests
            .iter()
            .filter(|(op, p)| {
                matches!(*op, opcode::GET_CHILDREN | opcode::GET_CHILDREN2) && *p == own_path
            })
            .count();
        assert_eq!(looks, 1, "{requests:?}");
        // Internal mutex: create + listing (one round trip); lease: create +
        // listing (one round trip, which already decides the free lease);
        // internal mutex release: a delete whose answer is not awaited.
        let kinds: Vec<&str> = requests
            .iter()
            .filter(|(_, p)| *p != own_path)
            .map(|(op, _)| match *op {
                op if opcode::CREATES.contains(&op) => "create",
                opcode::GET_CHILDREN | opcode::GET_CHILDREN2 => "list",
                opcode::DELETE => "delete",
                _ => "other",
            })
            .collect();
        assert_eq!(
            kinds,
            ["create", "list", "create", "list", "delete"],
            "{requests:?}"
        );
        lease.release().await.unwrap();
        kept.release().await.unwrap();
        fw.close().await;
    })
    .await;
}
