//! The cohort hand-off's safety rules (see `CohortPolicy`), each tested at
//! the point where it is decided, with the window put there on purpose:
//!
//! * rule 1, the releasing side (`Hold::pass_on`): a hold lost before its
//!   release is not passed, even when nothing has handed its turn back yet
//!   (its turn watcher frozen on a side runtime, or a loss that no state
//!   change announces: the lease running out);
//! * rule 4, the receiving side (`Hold::receive`): a node lost while it
//!   waits in its parcel for the next task (that task frozen on a side
//!   runtime) is deleted, not taken, whatever the loss: the lease, a
//!   suspension the session survived, a new session, a close;
//! * rule 5, the time bound (`Run::next`): a run of short holds ends once it
//!   has lasted `max_hold`, however many passes the count would allow;
//! * who may receive (`LockInternals::receive`): an acquire asking for
//!   other node data, or pinned to a session that is gone, takes no node;
//! * the parcels of the in-process queue: a waiter cancelled between a pass
//!   and its pickup leaves the node to the next waiter, and a parcel nobody
//!   is left to take is deleted at once.
//!
//! `.ci/cohort-mutants` checks that each of these tests fails when its rule
//! is broken.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::side::SideRuntime;
use common::{
    bounded, children, eventually, expire, finished, framework_with, joined, patient, raw_client,
    server, unique_path, wait_for_participants, BOUND, PATIENCE,
};
use zk_curator::framework::lock_internals::{Acquire, LockInternals, StandardLockInternalsDriver};
use zk_curator::{
    CohortPolicy, Error, Framework, Hold, InterProcessMutex, InterProcessSemaphoreV2, LockLoss,
    MutexGuard,
};
use zk_curator_testing::{FaultProxy, TestingServer};

/// The losses a hold or a passed node can meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    /// The server not heard from for longer than the session timeout (this
    /// thread blocked past it, as a paused process would be); no state
    /// change announces it.
    Stale,
    /// The connection broke and came back on the same session.
    Suspended,
    /// The session expired; the framework has a new one.
    NewSession,
    /// The framework was closed.
    Closed,
}

const LOSSES: [Loss; 4] = [Loss::Stale, Loss::Suspended, Loss::NewSession, Loss::Closed];

impl Loss {
    /// What a hold lost this way answers.
    fn reason(self) -> LockLoss {
        match self {
            Loss::Stale => LockLoss::Stale,
            Loss::Suspended => LockLoss::ConnectionState(zk_curator::ConnectionState::Suspended),
            Loss::NewSession => LockLoss::SessionReplaced,
            Loss::Closed => LockLoss::Closed,
        }
    }
}

/// One framework with cohort hand-off behind a fault proxy, a mutex on it,
/// and a side runtime for the tasks a test freezes.
struct Scene {
    server: &'static TestingServer,
    proxy: FaultProxy,
    fw: Framework,
    path: String,
    mutex: InterProcessMutex,
    side: SideRuntime,
}

impl Scene {
    async fn new(server: &'static TestingServer, name: &str, loss: Loss) -> Scene {
        let path = unique_path(name);
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        // A short session where the test waits one out; room to spare for
        // a busy machine otherwise.
        let session = match loss {
            Loss::Stale => Duration::from_secs(2),
            _ => Duration::from_secs(6),
        };
        let fw = framework_with(&proxy.connect_string(), |b| {
            b.cohort(patient()).session_timeout(session)
        })
        .await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        Scene {
            server,
            proxy,
            fw,
            path,
            mutex,
            side: SideRuntime::start(),
        }
    }

    /// A task of the test's runtime waiting for the mutex, once it is seen
    /// in the local queue.
    async fn waiter(
        &self,
        queued: usize,
    ) -> tokio::task::JoinHandle<zk_curator::Result<MutexGuard>> {
        let mutex = self.mutex.clone();
        self.queued(tokio::spawn(async move { mutex.lock().await }), queued)
            .await
    }

    /// A task of the side runtime waiting for the mutex, once queued.
    async fn side_waiter(
        &self,
        queued: usize,
    ) -> tokio::task::JoinHandle<zk_curator::Result<MutexGuard>> {
        let mutex = self.mutex.clone();
        self.queued(self.side.spawn(async move { mutex.lock().await }), queued)
            .await
    }

    async fn queued<T>(&self, task: T, queued: usize) -> T {
        let (fw, path) = (&self.fw, &self.path);
        assert!(
            eventually(PATIENCE, || async { fw.locally_queued(path) == queued }).await,
            "the waiter never queued"
        );
        task
    }

    /// Inflicts `loss` on the framework from the test's runtime. `Stale`
    /// blocks this thread past the session timeout: nothing of this runtime
    /// runs meanwhile (no ping, no reply read), as in a paused process.
    async fn inflict(&self, loss: Loss) {
        match loss {
            Loss::Stale => {
                let session = self.fw.current_session().unwrap();
                let timeout = session.client().session_timeout();
                std::thread::sleep(timeout + Duration::from_millis(200));
            }
            Loss::Suspended => {
                let generation = self.fw.current_session().unwrap().generation();
                let epoch = self.fw.loss_epoch();
                self.proxy.drop_connections();
                assert!(
                    eventually(PATIENCE, || async { self.fw.loss_epoch() > epoch }).await,
                    "the framework never saw the link break"
                );
                self.fw.block_until_connected(PATIENCE).await.unwrap();
                let now = self.fw.current_session().unwrap().generation();
                assert_eq!(now, generation, "the suspension ended the session");
            }
            Loss::NewSession => expire(&self.server.connect_string(), &self.fw).await,
            Loss::Closed => self.fw.close().await,
        }
    }

    /// Checks that `waiter` queued a node of its own (or failed on a
    /// closed framework), that nothing was passed, and that the node of
    /// `token` is gone.
    async fn took_no_pass(
        &self,
        loss: Loss,
        waiter: tokio::task::JoinHandle<zk_curator::Result<MutexGuard>>,
        passed: &Hold,
    ) {
        let got = finished(waiter).await;
        assert_eq!(
            self.fw.metrics().lock_passes(),
            0,
            "{loss:?}: a pass was taken"
        );
        if loss == Loss::Closed {
            assert!(matches!(got, Err(Error::Closed)), "{loss:?}: {got:?}");
            return;
        }
        let guard = got.unwrap_or_else(|err| panic!("{loss:?}: the waiter failed: {err}"));
        assert_ne!(
            guard.node().path(),
            passed.node().path(),
            "{loss:?}: the lost node was taken"
        );
        assert_eq!(guard.fencing_token().pass(), 0, "{loss:?}");
        assert!(guard.is_valid(), "{loss:?}: {:?}", guard.loss());
        let raw = raw_client(&self.server.connect_string()).await;
        let gone = passed.node().path().rsplit('/').next().unwrap().to_owned();
        assert!(
            eventually(PATIENCE, || async {
                !children(&raw, &self.path).await.contains(&gone)
            })
            .await,
            "{loss:?}: the lost node was left behind"
        );
        guard.release().await.unwrap();
    }

    async fn close(self) {
        self.fw.close().await;
    }
}

/// Rule 1, on the releasing side: a hold lost before its release is not
/// passed, even while its turn is still out (the task that would hand it
/// back on a state change is frozen, and the lease's end changes no state at
/// all). The release reports the loss; the waiter queues a node of its own.
#[tokio::test]
async fn a_hold_lost_before_its_release_is_not_passed() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        for loss in LOSSES {
            let scene = Scene::new(server, "cohort-lost-before-release", loss).await;
            // Acquired on the side runtime: the hold's turn watcher runs
            // there.
            let holder = {
                let mutex = scene.mutex.clone();
                scene.side.spawn(async move { mutex.lock().await })
            };
            let holder = joined(holder).await;
            let hold = Hold::clone(&holder);
            let waiter = scene.waiter(1).await;
            let frozen = scene.side.freeze().await;
            scene.inflict(loss).await;
            let released = holder.release().await;
            drop(frozen);
            match loss {
                Loss::Closed => assert!(matches!(released, Err(Error::Closed)), "{released:?}"),
                _ => assert!(
                    matches!(&released, Err(Error::LockLost { reason, .. }) if *reason == loss.reason()),
                    "{loss:?}: the release of a lost hold said {released:?}"
                ),
            }
            assert_eq!(hold.loss(), Some(loss.reason()), "{loss:?}");
            scene.took_no_pass(loss, waiter, &hold).await;
            scene.close().await;
        }
    })
    .await;
}

/// Rule 4, on the receiving side: a node passed while its hold was valid,
/// then lost while it waits in its parcel (the next task frozen on the
/// side runtime), is deleted, and that task queues a node of its own.
#[tokio::test]
async fn a_node_lost_in_its_parcel_is_not_taken() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        for loss in LOSSES {
            let scene = Scene::new(server, "cohort-lost-in-parcel", loss).await;
            let holder = scene.mutex.lock().await.unwrap();
            let hold = Hold::clone(&holder);
            let waiter = scene.side_waiter(1).await;
            let frozen = scene.side.freeze().await;
            holder.release().await.unwrap();
            assert_eq!(hold.loss(), Some(LockLoss::NotHeld), "{loss:?}: no pass");
            // The node is in its parcel: the waiter has not picked it up.
            assert_eq!(scene.fw.locally_queued(&scene.path), 1, "{loss:?}");
            scene.inflict(loss).await;
            drop(frozen);
            if loss == Loss::Stale {
                // This runtime stays frozen (its client has not heard from
                // the server) until the waiter has looked at the node.
                scene.side.settle_blocking();
            }
            scene.took_no_pass(loss, waiter, &hold).await;
            scene.close().await;
        }
    })
    .await;
}

/// Rule 5: a run of short holds ends once it has lasted `max_hold`, even
/// with passes to spare. Holds of at least 30 ms and a 100 ms bound: a run
/// passes at 30, 60 and 90 ms at the latest, so no node carries more than
/// four holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_short_holds_ends_at_max_hold() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        const HOLD: Duration = Duration::from_millis(30);
        const MAX_HOLD: Duration = Duration::from_millis(100);
        let path = unique_path("cohort-max-hold");
        let policy = CohortPolicy::new(10_000, MAX_HOLD);
        let fw = framework_with(&server.connect_string(), |b| b.cohort(policy)).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let until = tokio::time::Instant::now() + Duration::from_millis(1500);
        let tasks: Vec<_> = (0..3)
            .map(|_| {
                let mutex = mutex.clone();
                tokio::spawn(async move {
                    let mut tokens = Vec::new();
                    while tokio::time::Instant::now() < until {
                        let guard = mutex.lock().await.unwrap();
                        tokens.push(guard.fencing_token());
                        tokio::time::sleep(HOLD).await;
                        guard.release().await.unwrap();
                    }
                    tokens
                })
            })
            .collect();
        let mut runs = std::collections::BTreeMap::new();
        for task in tasks {
            for token in finished(task).await {
                *runs.entry(token.get()).or_insert(0usize) += 1;
            }
        }
        let longest = runs.values().copied().max().unwrap_or(0);
        println!("{} runs, the longest of {longest} holds", runs.len());
        assert!(longest >= 2, "nothing was passed: {runs:?}");
        assert!(
            longest <= 4,
            "a run of {longest} holds of {HOLD:?} outlasted max_hold {MAX_HOLD:?}"
        );
        fw.close().await;
    })
    .await;
}

/// An acquire takes a passed node only if it asks for the same node data:
/// a lease asked for with other data gets a node carrying its own.
#[tokio::test]
async fn an_acquire_with_other_node_data_takes_no_pass() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("cohort-data");
        let fw = framework_with(&server.connect_string(), |b| b.cohort(patient())).await;
        let first =
            InterProcessSemaphoreV2::with_node_data(fw.clone(), &path, 1, b"first").unwrap();
        let second =
            InterProcessSemaphoreV2::with_node_data(fw.clone(), &path, 1, b"second").unwrap();
        let lease = first.acquire().await.unwrap();
        let leases = format!("{path}/leases");
        let waiter = tokio::spawn(async move { second.acquire().await });
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&leases) == 1 }).await);
        lease.release().await.unwrap();
        let lease = joined(waiter).await;
        assert_eq!(lease.data().await.unwrap(), b"second");
        assert_eq!(lease.fencing_token().pass(), 0);
        lease.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

/// An acquire pinned to a session takes only a node of that session: pinned
/// to a session that has since been replaced, it gets no node of the new
/// one by a pass, and fails as a pinned acquire does when its session ends.
#[tokio::test]
async fn a_pinned_acquire_takes_no_node_of_another_session() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("cohort-pinned");
        let fw = framework_with(&server.connect_string(), |b| b.cohort(patient())).await;
        let lock = Arc::new(
            LockInternals::new(
                fw.clone(),
                &path,
                "lock-",
                1,
                Arc::new(StandardLockInternalsDriver),
            )
            .unwrap(),
        );
        let first = fw.session().await.unwrap();
        expire(&server.connect_string(), &fw).await;
        let hold = lock.acquire(Acquire::new()).await.unwrap().unwrap();
        assert_ne!(hold.node().generation(), first.generation());
        let pinned = {
            let lock = lock.clone();
            tokio::spawn(async move { lock.acquire(Acquire::new().on_session(&first)).await })
        };
        assert!(eventually(PATIENCE, || async { fw.locally_queued(&path) == 1 }).await);
        lock.release(&hold).await.unwrap();
        let got = finished(pinned).await;
        assert!(
            matches!(got, Err(Error::SessionExpired)),
            "a pinned acquire on a replaced session got {got:?}"
        );
        assert_eq!(fw.metrics().lock_passes(), 0);
        let raw = raw_client(&server.connect_string()).await;
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &path).await.is_empty()
            })
            .await
        );
        fw.close().await;
    })
    .await;
}

/// A waiter cancelled after a pass was left for it, before it picked the
/// node up, leaves the node to the waiter behind it.
#[tokio::test]
async fn a_waiter_cancelled_before_its_pickup_leaves_the_node_to_the_next() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let scene = Scene::new(server, "cohort-cancel-pickup", Loss::Suspended).await;
        let holder = scene.mutex.lock().await.unwrap();
        let token = holder.fencing_token();
        let first = scene.waiter(1).await;
        let second = scene.waiter(2).await;
        // Nothing else runs on this runtime between the pass and the
        // cancellation.
        holder.release().await.unwrap();
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        let guard = joined(second).await;
        assert_eq!(
            guard.fencing_token().get(),
            token.get(),
            "the node was not passed on"
        );
        assert_eq!(guard.fencing_token().pass(), 1);
        guard.release().await.unwrap();
        scene.close().await;
    })
    .await;
}

/// A semaphore of several leases: two leases passed at once to the one
/// task waiting for a lease (the others wait for the internal mutex) give
/// it one node, and the other node, with nobody left to take it, is deleted
/// at once; if that task is cancelled before its pickup, both nodes are.
/// Another lease stays held throughout, so the in-process queue of the
/// leases is never idle.
#[tokio::test]
async fn parcels_nobody_is_left_to_take_are_deleted() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        for cancel in [false, true] {
            let path = unique_path("cohort-leftover");
            let fw = framework_with(&server.connect_string(), |b| b.cohort(patient())).await;
            let raw = raw_client(&server.connect_string()).await;
            let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, 3).unwrap();
            let leases_path = format!("{path}/leases");
            let mut held = Vec::new();
            for _ in 0..3 {
                held.push(semaphore.acquire().await.unwrap());
            }
            let waiter = {
                let semaphore = semaphore.clone();
                tokio::spawn(async move { semaphore.acquire().await })
            };
            assert!(eventually(PATIENCE, || async { fw.locally_queued(&leases_path) == 1 }).await);
            wait_for_participants(&raw, &leases_path, 3).await;
            let kept = held.pop().unwrap();
            // Both releases pass (the waiter has not run in between).
            for lease in held {
                lease.release().await.unwrap();
            }
            assert_eq!(fw.locally_queued(&leases_path), 1);
            let received = if cancel {
                waiter.abort();
                assert!(waiter.await.unwrap_err().is_cancelled());
                None
            } else {
                let lease = joined(waiter).await;
                assert_eq!(lease.fencing_token().pass(), 1);
                Some(lease)
            };
            let expected = 1 + usize::from(received.is_some());
            assert!(
                eventually(PATIENCE, || async {
                    children(&raw, &leases_path).await.len() == expected
                })
                .await,
                "cancelled {cancel}: a passed node nobody holds was left: {:?}",
                children(&raw, &leases_path).await
            );
            kept.release().await.unwrap();
            if let Some(lease) = received {
                lease.release().await.unwrap();
            }
            fw.close().await;
        }
    })
    .await;
}
