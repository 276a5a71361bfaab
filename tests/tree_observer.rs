//! [`TreeObserver`] (issue 45, item 1): one recursive watch follows every
//! lock and election under a root, and its view agrees with what
//! `lock_participants` reads of each path, queue order included: at the
//! cold start, after hand-offs, new and removed locks, and after its
//! session is expired. It never shows a node again once it applied the
//! node's deletion, and a hand-off costs it the same requests whatever
//! the length of the queue. On the embedded server by default, on a real
//! ZooKeeper with `ZK_TEST_SERVER=real`.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{bounded, expire, framework, requests_with, server, unique_path, LONG_BOUND};
use zk_curator::recipes::layout::{lock_participants, LockParticipant, Role};
use zk_curator::recipes::tree::{TreeObserver, TreeView};
use zk_curator::zk;
use zk_curator::{
    Framework, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2,
    LeaderElection, LeaderLatch, MutexGuard,
};
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::{FaultProxy, TestingServer};

const WAIT: Duration = Duration::from_secs(30);

/// Waits until the observer's view is current and `check` holds of it.
async fn view_where(
    observer: &TreeObserver,
    what: &str,
    check: impl Fn(&TreeView) -> bool,
) -> Arc<TreeView> {
    let mut changes = observer.changes();
    let seen = tokio::time::timeout(WAIT, async {
        loop {
            let view = changes.borrow_and_update().clone();
            if view.current && check(&view) {
                return view;
            }
            changes.changed().await.unwrap();
        }
    })
    .await;
    match seen {
        Ok(view) => view,
        Err(_) => {
            // A view of thousands of participants is cut short.
            let mut shown = format!("{:#?}", observer.view());
            if shown.len() > 4000 {
                let cut = (0..=4000)
                    .rev()
                    .find(|&at| shown.is_char_boundary(at))
                    .unwrap_or(0);
                shown.truncate(cut);
                shown.push_str("\n…");
            }
            panic!("never saw {what}: {shown}")
        }
    }
}

/// Whether the observer's view says it is not current within [`WAIT`].
async fn no_longer_current(observer: &TreeObserver) -> bool {
    let mut changes = observer.changes();
    tokio::time::timeout(WAIT, async {
        while changes.borrow_and_update().current {
            changes.changed().await.unwrap();
        }
    })
    .await
    .is_ok()
}

/// Asserts that the view shows `seen` as `truth` reads them, naming the
/// first that differs (not the thousands that agree).
fn assert_same_participants(seen: &[LockParticipant], truth: &[LockParticipant]) {
    if let Some((at, (seen, truth))) = seen
        .iter()
        .zip(truth)
        .enumerate()
        .find(|(_, (seen, truth))| seen != truth)
    {
        panic!("participant {at} is shown as {seen:#?}, its node says {truth:#?}");
    }
    assert_eq!(seen.len(), truth.len(), "how many participants are shown");
}

/// Each followed path's participants as (node, role), in queue order.
fn shown(view: &TreeView, path: &str) -> Vec<(String, Role)> {
    view.paths
        .get(path)
        .map(|p| {
            p.participants
                .iter()
                .map(|o| (o.participant.node_path.clone(), o.participant.role))
                .collect()
        })
        .unwrap_or_default()
}

/// What `lock_participants` reads of `path`, as (node, role).
async fn truth(fw: &Framework, path: &str) -> Vec<(String, Role)> {
    lock_participants(fw, path, None)
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.node_path, p.role))
        .collect()
}

/// A mutex held on `path` by its own framework, with `waiters` more
/// queued behind it (each on a framework of its own).
async fn held_with_waiters(
    connect: &str,
    path: &str,
    waiters: usize,
) -> (MutexGuard, Vec<tokio::task::JoinHandle<MutexGuard>>) {
    let fw = framework(connect).await;
    let guard = InterProcessMutex::new(fw, path)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let mut queued = Vec::new();
    for n in 0..waiters {
        let fw = framework(connect).await;
        let mutex = InterProcessMutex::new(fw, path).unwrap();
        queued.push(tokio::spawn(async move { mutex.lock().await.unwrap() }));
        let raw = common::raw_client(connect).await;
        common::wait_for_participants(&raw, path, n + 2).await;
    }
    (guard, queued)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_agrees_with_each_path_cold_and_live() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let root = unique_path("tree");
        let reader = framework(&connect).await;
        // A mutex with two waiters, a read-write lock, a semaphore and a
        // latch election, in folders.
        let mutex_path = format!("{root}/locks/orders");
        let (guard, mut waiters) = held_with_waiters(&connect, &mutex_path, 2).await;
        let rw_path = format!("{root}/locks/catalog");
        let rw_fw = framework(&connect).await;
        let rw = InterProcessReadWriteLock::new(rw_fw.clone(), &rw_path).unwrap();
        let read = rw.read_lock().lock().await.unwrap();
        let sem_path = format!("{root}/pools/db");
        let sem = InterProcessSemaphoreV2::new(rw_fw.clone(), &sem_path, 2).unwrap();
        let lease = sem.acquire().await.unwrap();
        let latch_path = format!("{root}/elections/compactor");
        let latch = LeaderLatch::new(rw_fw.clone(), &latch_path, "a").unwrap();
        latch.start().unwrap();
        latch.await_leadership().await.unwrap();

        let observer_fw = framework(&connect).await;
        let observer = TreeObserver::new(observer_fw.clone(), &root, 1000).unwrap();
        observer.start().unwrap();
        let paths = [&mutex_path, &rw_path, &sem_path, &latch_path];
        let cold = view_where(&observer, "the four paths", |v| v.paths.len() == 4).await;
        for path in paths {
            assert_eq!(
                shown(&cold, path),
                truth(&reader, path).await,
                "{path} cold"
            );
        }
        assert!(cold.paths[&mutex_path].participants[0]
            .holding_since_ms
            .is_none());
        let first = guard.node().path().to_owned();

        // A hand-off: the first waiter holds, counted from now.
        guard.release().await.unwrap();
        let next = waiters.remove(0).await.unwrap();
        let expected = truth(&reader, &mutex_path).await;
        let live = view_where(&observer, "the hand-off", |v| {
            shown(v, &mutex_path) == expected
        })
        .await;
        assert_eq!(expected.len(), 2);
        let holder = &live.paths[&mutex_path].participants[0];
        assert_eq!(holder.participant.node_path, next.node().path());
        assert!(holder.holding_since_ms.is_some(), "{holder:?}");
        assert!(live.paths[&mutex_path].leader_changes >= 1);

        // A new lock appears; one goes (its last participant leaves and
        // its path with it).
        let new_path = format!("{root}/locks/new");
        let fresh = InterProcessMutex::new(rw_fw.clone(), &new_path)
            .unwrap()
            .lock()
            .await
            .unwrap();
        let expected = truth(&reader, &new_path).await;
        view_where(&observer, "the new lock", |v| {
            shown(v, &new_path) == expected
        })
        .await;
        read.release().await.unwrap();
        view_where(&observer, "the read lock's release", |v| {
            shown(v, &rw_path).is_empty()
        })
        .await;
        lease.release().await.unwrap();
        let expected = truth(&reader, &sem_path).await;
        view_where(&observer, "the lease's return", |v| {
            shown(v, &sem_path) == expected
        })
        .await;
        // The first holder's node was deleted: it is never shown again.
        let view = observer.view();
        assert!(
            view.paths.values().all(|p| p
                .participants
                .iter()
                .all(|o| o.participant.node_path != first)),
            "a deleted node is shown"
        );
        fresh.release().await.unwrap();
        next.release().await.unwrap();
        for waiter in waiters {
            waiter.await.unwrap().release().await.unwrap();
        }
        latch.close().await.unwrap();
        observer.close().await;
        assert!(
            !observer.view().current,
            "a closed observer's view is current"
        );
    })
    .await;
}

/// Cut off from the server, the view says it is not current (and keeps
/// saying so while cut off); back, it is listed afresh and agrees again,
/// changes made meanwhile included. After its session is expired, likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_off_or_expired_the_view_says_so_then_is_rebuilt() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let root = unique_path("tree-outage");
        let reader = framework(&connect).await;
        let path = format!("{root}/a");
        let (guard, mut waiters) = held_with_waiters(&connect, &path, 2).await;
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let observer_fw = framework(&proxy.connect_string()).await;
        let observer = TreeObserver::new(observer_fw.clone(), &root, 100).unwrap();
        observer.start().unwrap();
        let expected = truth(&reader, &path).await;
        view_where(&observer, "the lock", |v| shown(v, &path) == expected).await;

        proxy.blackhole(true);
        assert!(
            no_longer_current(&observer).await,
            "the view never said it was not current"
        );
        // A hand-off while the observer cannot see it.
        guard.release().await.unwrap();
        let next = waiters.remove(0).await.unwrap();
        assert!(!observer.view().current, "current while cut off");
        let listings = observer.view().listings;
        proxy.blackhole(false);
        let expected = truth(&reader, &path).await;
        view_where(&observer, "the view after the outage", |v| {
            v.listings > listings && shown(v, &path) == expected
        })
        .await;

        // An expired session: a new one, a new listing.
        let listings = observer.view().listings;
        expire(&proxy.connect_string(), &observer_fw).await;
        next.release().await.unwrap();
        let last = waiters.remove(0).await.unwrap();
        let expected = truth(&reader, &path).await;
        view_where(&observer, "the view after the expiry", |v| {
            v.listings > listings && shown(v, &path) == expected
        })
        .await;
        last.release().await.unwrap();
        observer.close().await;
    })
    .await;
}

/// Its framework closed, the view says it is not current: a closed client
/// tells its watchers nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn its_framework_closed_the_view_says_it_is_not_current() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let root = unique_path("tree-closed");
        let (guard, _waiters) = held_with_waiters(&connect, &format!("{root}/a"), 0).await;
        let observer_fw = framework(&connect).await;
        let observer = TreeObserver::new(observer_fw.clone(), &root, 100).unwrap();
        observer.start().unwrap();
        view_where(&observer, "the lock", |v| v.paths.len() == 1).await;

        observer_fw.close().await;
        assert!(
            no_longer_current(&observer).await,
            "the view said current after its framework closed"
        );
        guard.release().await.unwrap();
        observer.close().await;
        assert!(!observer.view().current);
    })
    .await;
}

/// The observer's requests per hand-off do not grow with the queue: a
/// hand-off is a deletion, which needs no read; the same with 3 waiters as
/// with 30.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_costs_the_same_whatever_the_queue() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let mut costs = Vec::new();
        for waiters in [3, 30] {
            let root = unique_path("tree-cost");
            let path = format!("{root}/l");
            let (guard, mut queued) = held_with_waiters(&connect, &path, waiters).await;
            let proxy = FaultProxy::start(server.address()).await.unwrap();
            let observer_fw = framework(&proxy.connect_string()).await;
            let observer = TreeObserver::new(observer_fw.clone(), &root, 100).unwrap();
            observer.start().unwrap();
            view_where(&observer, "the queue", |v| {
                shown(v, &path).len() == waiters + 1
            })
            .await;
            proxy.clear_traffic();
            // One hand-off: the holder's node goes, the next holds.
            guard.release().await.unwrap();
            let next = queued.remove(0).await.unwrap();
            view_where(&observer, "the hand-off", |v| {
                shown(v, &path).first().map(|(node, _)| node.as_str()) == Some(next.node().path())
            })
            .await;
            let reads = requests_with(&proxy, opcode::GET_DATA)
                + requests_with(&proxy, opcode::GET_CHILDREN)
                + requests_with(&proxy, opcode::GET_CHILDREN2);
            costs.push(reads);
            next.release().await.unwrap();
            for waiter in queued {
                waiter.await.unwrap().release().await.unwrap();
            }
            observer.close().await;
            observer_fw.close().await;
        }
        assert_eq!(
            costs[0], costs[1],
            "reads per hand-off with 3 and 30 waiters: {costs:?}"
        );
        assert_eq!(costs[0], 0, "a deletion needs no read: {costs:?}");
    })
    .await;
}

/// Children of a lock path that no recipe writes are shown as unknown, at
/// the cold start and live, counted however many, and forgotten when
/// deleted; nothing else in the view changes for them, and a thousand of
/// them keep a bounded list of names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_no_recipe_writes_are_shown_as_unknown() {
    use zk_curator::framework::zk;
    use zk_curator::recipes::layout::UNKNOWN_NAMES;
    let Some(server) = server() else { return };
    let connect = server.connect_string();
    bounded(LONG_BOUND, async {
        let root = unique_path("tree-unknown");
        let path = format!("{root}/locks/a");
        let (guard, _waiters) = held_with_waiters(&connect, &path, 0).await;
        let raw = common::raw_client(&connect).await;
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        // One before the observer starts (read by its listing), with a
        // name that holds markup.
        raw.create(&format!("{path}/<b>stray"), b"x", &open)
            .await
            .unwrap();
        let observer = TreeObserver::new(framework(&connect).await, &root, 100).unwrap();
        observer.start().unwrap();
        let view = view_where(&observer, "the stray at the listing", |v| {
            v.paths
                .get(&path)
                .is_some_and(|p| p.unknown.count == 1 && p.participants.len() == 1)
        })
        .await;
        assert_eq!(view.paths[&path].unknown.names, vec!["<b>stray".to_owned()]);
        // Live: one more, then the first deleted.
        raw.create(&format!("{path}/other"), &[], &open)
            .await
            .unwrap();
        view_where(&observer, "two strays", |v| {
            v.paths.get(&path).is_some_and(|p| p.unknown.count == 2)
        })
        .await;
        raw.delete(&format!("{path}/<b>stray"), None).await.unwrap();
        let view = view_where(&observer, "the first stray gone", |v| {
            v.paths.get(&path).is_some_and(|p| p.unknown.count == 1)
        })
        .await;
        assert_eq!(view.paths[&path].unknown.names, vec!["other".to_owned()]);
        assert_eq!(
            shown(&view, &path),
            truth(&framework(&connect).await, &path).await
        );
        // Many: the count is every one, the names bounded.
        let many: Vec<String> = (0..1000).map(|n| format!("{path}/junk-{n:04}")).collect();
        futures::future::try_join_all(many.iter().map(|p| raw.create(p, &[], &open)))
            .await
            .unwrap();
        let view = view_where(&observer, "1001 strays", |v| {
            v.paths.get(&path).is_some_and(|p| p.unknown.count == 1001)
        })
        .await;
        assert_eq!(view.paths[&path].unknown.names.len(), UNKNOWN_NAMES);
        futures::future::try_join_all(many.iter().map(|p| raw.delete(p, None)))
            .await
            .unwrap();
        raw.delete(&format!("{path}/other"), None).await.unwrap();
        view_where(&observer, "no strays", |v| {
            v.paths.get(&path).is_some_and(|p| p.unknown.count == 0)
        })
        .await;
        // A fresh listing agrees with the live count (none).
        let again = TreeObserver::new(framework(&connect).await, &root, 100).unwrap();
        again.start().unwrap();
        let view = view_where(&again, "the listing after", |v| v.paths.contains_key(&path)).await;
        assert_eq!(view.paths[&path].unknown.count, 0);
        guard.release().await.unwrap();
        observer.close().await;
        again.close().await;
    })
    .await;
}

/// A mutex held on `<root>/l` (a quiet tree: its node is read at once),
/// followed by an observer on a framework of its own through
/// `observer_connect`, pending newcomers for `read_after`; once its view
/// shows the holder. Bursts of participants come from `raw`.
struct Burst {
    path: String,
    holder_fw: Framework,
    /// The holder, until [`release_holder`](Self::release_holder).
    guard: Option<MutexGuard>,
    observer: TreeObserver,
    observer_fw: Framework,
    raw: zk::Client,
}

impl Burst {
    /// [`start`](Self::start) under a root of its own named after `name`,
    /// everything on `server`.
    async fn on(server: &TestingServer, name: &str, read_after: Duration) -> Burst {
        let connect = server.connect_string();
        Burst::start(&connect, &connect, &unique_path(name), read_after).await
    }

    async fn start(
        connect: &str,
        observer_connect: &str,
        root: &str,
        read_after: Duration,
    ) -> Burst {
        let path = format!("{root}/l");
        let holder_fw = framework(connect).await;
        let guard = InterProcessMutex::new(holder_fw.clone(), &path)
            .unwrap()
            .lock()
            .await
            .unwrap();
        let observer_fw = framework(observer_connect).await;
        let observer = TreeObserver::new(observer_fw.clone(), root, 100)
            .unwrap()
            .read_after(read_after);
        observer.start().unwrap();
        let quiet = view_where(&observer, "the holder", |v| shown(v, &path).len() == 1).await;
        assert!(
            !quiet.paths[&path].participants[0].participant.pending,
            "a quiet tree's participant is read at once"
        );
        Burst {
            path,
            holder_fw,
            guard: Some(guard),
            observer,
            observer_fw,
            raw: common::raw_client(connect).await,
        }
    }

    /// Creates `count` participants of a Curator mutex at once (pipelined:
    /// a burst, as a busy lock's queue grows), each with data `burst-<i>`;
    /// their paths, in queue order.
    async fn create(&self, count: usize) -> Vec<String> {
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let prefix = format!("{}/lock-", self.path);
        let datas: Vec<Vec<u8>> = (0..count)
            .map(|i| format!("burst-{i}").into_bytes())
            .collect();
        let creates = datas
            .iter()
            .map(|data| self.raw.create(&prefix, data, &options));
        futures::future::join_all(creates)
            .await
            .into_iter()
            .map(|created| {
                let (_, sequence) = created.unwrap();
                format!("{prefix}{sequence}")
            })
            .collect()
    }

    /// Deletes `nodes` at once.
    async fn delete(&self, nodes: &[String]) {
        let deletes = nodes.iter().map(|node| self.raw.delete(node, None));
        for deleted in futures::future::join_all(deletes).await {
            deleted.unwrap();
        }
    }

    /// Releases the mutex held from the start, if not yet.
    async fn release_holder(&mut self) {
        if let Some(guard) = self.guard.take() {
            guard.release().await.unwrap();
        }
    }

    async fn end(mut self) {
        self.release_holder().await;
        self.observer.close().await;
        self.observer_fw.close().await;
        self.holder_fw.close().await;
    }
}

/// A busy tree's newcomers are shown at once, in their place in the queue,
/// pending (not read); one deleted while pending is never read. Without
/// the deferral, the burst's creations cost the observer a `multiRead`
/// after the first event's read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_trees_newcomers_show_at_once_and_one_gone_soon_is_never_read() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let root = unique_path("tree-busy");
        // Pending for longer than the test runs: nothing here is read late.
        let burst_of = Burst::start(
            &connect,
            &proxy.connect_string(),
            &root,
            Duration::from_secs(600),
        )
        .await;
        let Burst {
            path,
            observer,
            holder_fw,
            ..
        } = &burst_of;
        proxy.clear_traffic();
        let nodes = burst_of.create(10).await;
        let view = view_where(observer, "the burst", |v| shown(v, path).len() == 11).await;
        assert_eq!(shown(&view, path), truth(holder_fw, path).await);
        let participants = &view.paths[path].participants;
        assert!(
            !participants[0].participant.pending,
            "the holder was read before"
        );
        let pending: Vec<_> = participants
            .iter()
            .filter(|o| o.participant.pending)
            .map(|o| &o.participant)
            .collect();
        assert!(
            !pending.is_empty(),
            "no newcomer of the burst was pending: {participants:#?}"
        );
        for p in &pending {
            assert_eq!(
                (p.session, p.czxid, p.data.as_slice()),
                (0, 0, &[][..]),
                "{p:#?}"
            );
        }

        burst_of.delete(&nodes).await;
        view_where(observer, "the burst gone", |v| shown(v, path).len() == 1).await;
        let reads =
            requests_with(&proxy, opcode::GET_DATA) + requests_with(&proxy, opcode::MULTI_READ);
        assert!(
            reads <= 1,
            "a burst of {} newcomers, gone while pending, cost the observer {reads} reads \
             (at most the first event's, taken before the tree was busy)",
            nodes.len()
        );
        burst_of.end().await;
    })
    .await;
}

/// A pending newcomer that stays is read once it has lived `read_after`:
/// then it is shown exactly as `lock_participants` reads it (data,
/// session, token, creation time), pending no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_newcomer_that_stays_is_read_and_shown_as_its_node_says() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let burst_of = Burst::on(server, "tree-pending", Duration::from_millis(300)).await;
        let Burst {
            path,
            observer,
            holder_fw,
            raw,
            ..
        } = &burst_of;
        let nodes = burst_of.create(10).await;
        let seen_pending = std::sync::atomic::AtomicBool::new(false);
        let view = view_where(observer, "the burst, read", |v| {
            let participants = v
                .paths
                .get(path)
                .map(|p| p.participants.as_slice())
                .unwrap_or(&[]);
            if participants.iter().any(|o| o.participant.pending) {
                seen_pending.store(true, std::sync::atomic::Ordering::Relaxed);
                return false;
            }
            participants.len() == 11
        })
        .await;
        assert!(
            seen_pending.load(std::sync::atomic::Ordering::Relaxed),
            "no newcomer of the burst was ever shown pending"
        );
        let truth = lock_participants(holder_fw, path, None).await.unwrap();
        let seen: Vec<_> = view.paths[path]
            .participants
            .iter()
            .map(|o| o.participant.clone())
            .collect();
        assert_eq!(seen, truth);
        for (p, node) in seen[1..].iter().zip(&nodes) {
            assert_eq!(&p.node_path, node);
            assert_eq!(p.session, raw.session_id().0, "{p:#?}");
            assert!(p.czxid > 0, "{p:#?}");
        }
        burst_of.end().await;
    })
    .await;
}

/// However long `read_after`, at most 1,024 nodes wait to be read: a
/// burst of more shows every newcomer at once, and the oldest past that
/// bound are read at once, as their nodes say. Without the bound every one
/// of them would stay pending (and queued) for the ten minutes asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_bound_the_oldest_pending_newcomers_are_read_at_once() {
    const MOST_PENDING: usize = 1024;
    const BURST: usize = 2 * MOST_PENDING;
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let burst_of = Burst::on(server, "tree-bound", Duration::from_secs(600)).await;
        let Burst {
            path,
            observer,
            holder_fw,
            ..
        } = &burst_of;
        let nodes = burst_of.create(BURST).await;
        let pending_in = |v: &TreeView| {
            v.paths.get(path).map_or(usize::MAX, |p| {
                p.participants
                    .iter()
                    .filter(|o| o.participant.pending)
                    .count()
            })
        };
        let view = view_where(observer, "the burst, the oldest read", |v| {
            shown(v, path).len() == BURST + 1 && pending_in(v) <= MOST_PENDING
        })
        .await;
        assert!(
            pending_in(&view) > 0,
            "the burst was never busy enough to be deferred"
        );
        // Applying the burst kept up with it: the observer's connection
        // never broke on its way (applying each event by remaking the
        // path's view made a burst of n creations cost n² steps, which
        // starved the runtime of the observer's and the holder's sessions).
        assert_eq!(view.listings, 1, "the observer listed the tree again");
        // Every participant read is shown as its node says.
        let truth = lock_participants(holder_fw, path, None).await.unwrap();
        let participants = &view.paths[path].participants;
        assert_eq!(participants.len(), truth.len());
        let (read, truth): (Vec<_>, Vec<_>) = participants
            .iter()
            .zip(truth)
            .filter(|(seen, _)| !seen.participant.pending)
            .map(|(seen, truth)| (seen.participant.clone(), truth))
            .unzip();
        assert_same_participants(&read, &truth);
        let read = read.len();
        assert!(
            read >= BURST - MOST_PENDING,
            "only {read} of the holder and the burst of {BURST} were read"
        );
        burst_of.delete(&nodes).await;
        burst_of.end().await;
    })
    .await;
}

/// A burst of thousands of newcomers, each read as it comes (`read_after`
/// zero), is applied as fast as it comes: the view shows every one as its
/// node says, on the listing it began with. Remaking the path's view at
/// each event cost such a burst n² steps and starved the observer's own
/// session until its connection broke.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_thousands_read_at_once_is_applied_on_one_listing() {
    const BURST: usize = 4096;
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let burst_of = Burst::on(server, "tree-thousands", Duration::ZERO).await;
        let Burst {
            path,
            observer,
            holder_fw,
            ..
        } = &burst_of;
        let nodes = burst_of.create(BURST).await;
        let view = view_where(observer, "the burst, read", |v| {
            v.paths.get(path).is_some_and(|p| {
                p.participants.len() == BURST + 1
                    && p.participants.iter().all(|o| !o.participant.pending)
            })
        })
        .await;
        assert_eq!(view.listings, 1, "the observer listed the tree again");
        let seen: Vec<_> = view.paths[path]
            .participants
            .iter()
            .map(|o| o.participant.clone())
            .collect();
        assert_same_participants(
            &seen,
            &lock_participants(holder_fw, path, None).await.unwrap(),
        );
        burst_of.delete(&nodes).await;
        view_where(observer, "the burst gone", |v| shown(v, path).len() == 1).await;
        assert_eq!(
            observer.view().listings,
            1,
            "the observer listed the tree again"
        );
        burst_of.end().await;
    })
    .await;
}

/// A queue of thousands drained at once (pipelined deletions, each of the
/// node at its head) is applied on the listing it began with, and each
/// change of holder is counted: one per deletion, the last to no holder.
/// Remaking the path's view at each deletion cost the drain n² steps; and
/// a view made once per batch alone would count a batch's changes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_of_thousands_drained_at_once_counts_every_change_of_holder() {
    const QUEUE: usize = 4096;
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let mut burst_of = Burst::on(server, "tree-drain", Duration::ZERO).await;
        let path = burst_of.path.clone();
        // A node no recipe writes keeps the lock path (a container) from
        // being removed once the queue is gone, and with it what was
        // counted.
        let keep = format!("{path}/keep");
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        burst_of.raw.create(&keep, &[], &open).await.unwrap();
        let nodes = burst_of.create(QUEUE).await;
        let holder_is = |v: &TreeView, node: &str| {
            v.paths.get(&path).is_some_and(|p| {
                p.participants.len() == QUEUE
                    && p.participants[0].participant.node_path == node
                    && p.participants[0].participant.role == Role::Holder
            })
        };
        burst_of.release_holder().await;
        let before = view_where(&burst_of.observer, "the queue's head holding", |v| {
            holder_is(v, &nodes[0])
        })
        .await
        .paths[&path]
            .leader_changes;

        burst_of.delete(&nodes).await;
        let drained = view_where(&burst_of.observer, "the queue drained", |v| {
            v.paths
                .get(&path)
                .is_some_and(|p| p.participants.is_empty())
        })
        .await;
        assert_eq!(drained.listings, 1, "the observer listed the tree again");
        assert_eq!(
            drained.paths[&path].leader_changes,
            before + QUEUE as u64,
            "changes of holder counted over a drain of {QUEUE}"
        );
        burst_of.raw.delete(&keep, None).await.unwrap();
        burst_of.end().await;
    })
    .await;
}
