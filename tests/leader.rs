//! Leader election (issue 18): LeaderLatch and LeaderSelector on the lock
//! engine, against a real server (the embedded one, or ZooKeeper with
//! `ZK_TEST_SERVER=real`). One leader at a time, hand-over on close, a term
//! that ends with its session before anyone else leads, re-entry on the
//! next session, cancel-safe waits, the selector's cancelled work, and
//! fencing tokens that only grow.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    bounded, children, close_election, data_node, eventually, expire, framework, ids, leads,
    raw_client, server, session_and_raw, started_latch, unique_path, wait_for_participants, BOUND,
    LONG_BOUND, PATIENCE,
};
use futures::StreamExt;
use tokio::sync::mpsc;
use zk_curator::framework::lock_internals::FencingToken;
use zk_curator::{
    zk, CloseMode, ConnectionState, Error, Framework, LatchState, LeaderElection, LeaderLatch,
    LeaderSelector, LeaderTerm, Leadership, LockLoss,
};
use zk_curator_testing::FaultProxy;

/// The index of the first of `latches` to lead (waiting for any of them,
/// up to [`PATIENCE`]; the other waits are dropped, which changes nothing).
async fn leader_among<'a>(latches: impl Iterator<Item = &'a LeaderLatch>) -> usize {
    let waits = latches.map(|latch| Box::pin(latch.await_leadership()));
    let (term, index, _others) = tokio::time::timeout(PATIENCE, futures::future::select_all(waits))
        .await
        .expect("somebody leads within PATIENCE");
    assert!(term.unwrap().is_valid());
    index
}

/// The creation zxid of `node`.
async fn czxid(raw: &zk::Client, node: &str) -> i64 {
    raw.check_stat(node).await.unwrap().unwrap().czxid
}

// ---------------------------------------------------------------------------
// 1. One leader at a time

/// Four latches on four sessions, queued in a known order; the leader
/// closes, round after round. An observer keeps taking two snapshots of
/// every `has_leadership()`: a latch true in both led all the time between
/// them (a latch here leads once, in one stretch), so two such latches
/// would be two leaders at one instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_each_takes_its_turn() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("latch-turns");
        let mut latches = Vec::new();
        let mut frameworks = Vec::new();
        for i in 0..4 {
            let (fw, latch) = started_latch(&connect, &path, &format!("p{i}")).await;
            // Queued before the next one starts: the queue order is known.
            wait_for_participants(&raw, &path, i + 1).await;
            frameworks.push(fw);
            latches.push(latch);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let observer = {
            let (latches, stop) = (latches.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut observations, mut with_a_leader) = (0usize, 0usize);
                while !stop.load(Ordering::Acquire) {
                    let first: Vec<bool> =
                        latches.iter().map(LeaderLatch::has_leadership).collect();
                    tokio::task::yield_now().await;
                    let second: Vec<bool> =
                        latches.iter().map(LeaderLatch::has_leadership).collect();
                    let steady = first
                        .iter()
                        .zip(&second)
                        .filter(|(a, b)| **a && **b)
                        .count();
                    assert!(
                        steady <= 1,
                        "two leaders at once: {first:?} then {second:?}"
                    );
                    observations += 1;
                    with_a_leader += steady;
                    // Paced, not to spin a core of a shared machine.
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
                (observations, with_a_leader)
            })
        };
        let mut order = Vec::new();
        for round in 0..4 {
            let leader = &latches[round];
            let term = leads(leader, PATIENCE).await;
            assert!(term.is_valid());
            order.push(leader.id().to_owned());
            // Everyone agrees who leads, and who still takes part.
            for latch in &latches[round..] {
                assert_eq!(latch.has_leadership(), latch.id() == leader.id());
                let seen = latch.leader().await.unwrap().unwrap();
                assert_eq!(seen.id, leader.id());
                assert!(seen.is_leader);
            }
            let participants = leader.participants().await.unwrap();
            let ids: Vec<&str> = participants.iter().map(|p| p.id.as_str()).collect();
            let expected: Vec<String> = (round..4).map(|i| format!("p{i}")).collect();
            assert_eq!(ids, expected);
            leader.close().await.unwrap();
            assert!(!leader.has_leadership());
            assert_eq!(leader.state(), LatchState::Closed);
            // Every clone of the term is over once the latch has closed.
            assert!(!term.is_valid());
            assert_eq!(term.lost().await, LockLoss::NotHeld);
        }
        stop.store(true, Ordering::Release);
        let (observations, with_a_leader) = observer.await.unwrap();
        assert_eq!(order, ["p0", "p1", "p2", "p3"], "each in its turn");
        assert!(
            observations > 0 && with_a_leader > 0,
            "the observer saw leaders"
        );
        wait_for_participants(&raw, &path, 0).await;
        for fw in frameworks {
            fw.close().await;
        }
    })
    .await;
}

// ---------------------------------------------------------------------------
// 2. A leader's close hands leadership on

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_hands_leadership_to_the_next_and_tells_who_asked() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("latch-close");
        // A's listener, registered before it starts: it hears every change.
        let fa = framework(&connect).await;
        let a = LeaderLatch::new(fa.clone(), &path, "a").unwrap();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let handle = {
            let heard = heard.clone();
            a.add_listener(move |change: Leadership| {
                heard.lock().unwrap().push(change.is_leader());
            })
        };
        a.start().unwrap();
        let term_a = leads(&a, PATIENCE).await;
        assert!(
            eventually(PATIENCE, || async { *heard.lock().unwrap() == [true] }).await,
            "the listener hears is_leader: {:?}",
            heard.lock().unwrap()
        );
        let (fb, b) = started_latch(&connect, &path, "b").await;
        let nodes = wait_for_participants(&raw, &path, 2).await;
        assert!(nodes
            .iter()
            .all(|n| n.starts_with("_c_") && n.contains("-latch-")));
        assert!(!b.has_leadership() && b.term().is_none());

        // A's stream, and B's from before it leads.
        let mut a_changes = Box::pin(a.leadership_changes());
        assert_eq!(
            a_changes.next().await,
            Some(Leadership::Leader(term_a.clone()))
        );
        let mut b_changes = Box::pin(b.leadership_changes());
        assert_eq!(b_changes.next().await, Some(Leadership::NotLeader));
        let b_waits = {
            let b = b.clone();
            tokio::spawn(async move { b.await_leadership().await })
        };

        a.close_with(CloseMode::NotifyLeader).await.unwrap();
        let term_b = tokio::time::timeout(PATIENCE, b_waits)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(term_b.is_valid() && b.has_leadership());
        assert!(term_b.fencing_token() > term_a.fencing_token());
        assert_eq!(term_a.loss(), Some(LockLoss::NotHeld), "given up");
        assert_eq!(b.leader().await.unwrap().unwrap().id, "b");
        // A's stream hears the end and ends; so does its listener.
        assert_eq!(a_changes.next().await, Some(Leadership::NotLeader));
        assert_eq!(a_changes.next().await, None);
        assert!(
            eventually(PATIENCE, || async {
                *heard.lock().unwrap() == [true, false]
            })
            .await,
            "the listener hears not_leader on a NotifyLeader close: {:?}",
            heard.lock().unwrap()
        );
        drop(handle);
        assert_eq!(
            b_changes.next().await,
            Some(Leadership::Leader(term_b.clone()))
        );

        // A silent close: B's stream just ends.
        b.close().await.unwrap();
        assert_eq!(b_changes.next().await, None);
        assert_eq!(term_b.loss(), Some(LockLoss::NotHeld));
        wait_for_participants(&raw, &path, 0).await;
        assert!(matches!(a.start(), Err(Error::Closed)));
        assert!(matches!(a.await_leadership().await, Err(Error::Closed)));
        fa.close().await;
        fb.close().await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// 3. A term ends with its session, before anyone else leads

/// The leader is cut off (its connection through a proxy goes silent) and
/// the server expires its session by itself, as it would in a partition.
/// Under the standard error policy the old leader's term is over as soon
/// as its connection is suspended, which comes before the server can
/// expire the session and let anyone else lead: A's `lost()` completes
/// first, and B's `await_leadership` returns only after. Once A is back, its
/// old fence is refused and it queues again on its new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_loses_its_term_before_the_server_expires_it_and_anyone_else_leads() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("latch-partition");
        let data = data_node(&raw, "leader-data").await;
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let (fa, a) = started_latch(&proxy.connect_string(), &path, "a").await;
        let term_a = leads(&a, PATIENCE).await;
        let fence_a = term_a.fence().unwrap();
        fence_a.set_data(&data, b"a1", None).await.unwrap();
        let (fb, b) = started_latch(&connect, &path, "b").await;
        wait_for_participants(&raw, &path, 2).await;

        // Who finishes first: A's loss signal or B's wait for leadership.
        let order = Arc::new(Mutex::new(Vec::new()));
        let a_lost = {
            let (term_a, order) = (term_a.clone(), order.clone());
            tokio::spawn(async move {
                let loss = term_a.lost().await;
                order.lock().unwrap().push(("a lost", Instant::now()));
                loss
            })
        };
        let b_leads = {
            let (b, order) = (b.clone(), order.clone());
            tokio::spawn(async move {
                let term = b.await_leadership().await.unwrap();
                order.lock().unwrap().push(("b leads", Instant::now()));
                term
            })
        };
        let cut = Instant::now();
        proxy.blackhole(true);
        let loss = tokio::time::timeout(PATIENCE, a_lost)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(loss, LockLoss::ConnectionState(ConnectionState::Suspended));
        assert!(!a.has_leadership());
        let term_b = tokio::time::timeout(PATIENCE, b_leads)
            .await
            .unwrap()
            .unwrap();
        let order = order.lock().unwrap().clone();
        let names: Vec<&str> = order.iter().map(|(what, _)| *what).collect();
        assert_eq!(names, ["a lost", "b leads"]);
        eprintln!(
            "cut off at 0; A's term lost after {:?}; B leads after {:?}",
            order[0].1 - cut,
            order[1].1 - cut
        );

        // A comes back to an expired session: its old fence is refused, it
        // queues again on its new session, B's writes go through.
        proxy.blackhole(false);
        let refused = fence_a.set_data(&data, b"a2", None).await.unwrap_err();
        assert!(matches!(refused, Error::LockLost { .. }), "{refused:?}");
        assert!(matches!(term_a.fence(), Err(Error::LockLost { .. })));
        term_b
            .fence()
            .unwrap()
            .set_data(&data, b"b1", None)
            .await
            .unwrap();
        assert_eq!(raw.get_data(&data).await.unwrap().0, b"b1");
        assert!(term_b.fencing_token() > term_a.fencing_token());
        assert!(
            eventually(PATIENCE, || async {
                match fa.current_session() {
                    Some(session) => owners_include(&raw, &path, session.id()).await,
                    None => false,
                }
            })
            .await,
            "A queues again on its new session"
        );
        assert_eq!(a.state(), LatchState::Started);

        close_election(&raw, &path, &[&a, &b], &[&fa, &fb]).await;
    })
    .await;
}

/// A session expired by force (a second connection closes it, the way
/// Curator's tests do) ends the term: `lost()` completes, the term's fence
/// refuses writes, and the next participant leads with a greater token.
/// (Which of A's loss signal and B's leadership comes first is not asserted
/// here: the server closes A's connection and deletes its node in one step,
/// so A may hear of it after B; the cut-off test above is the ordering.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_ends_the_term_and_its_fence_refuses_writes() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("latch-expiry");
        let data = data_node(&raw, "leader-data").await;
        let (fa, a) = started_latch(&connect, &path, "a").await;
        let term_a = leads(&a, PATIENCE).await;
        let fence_a = term_a.fence().unwrap();
        let (fb, b) = started_latch(&connect, &path, "b").await;
        wait_for_participants(&raw, &path, 2).await;

        expire(&connect, &fa).await;
        let loss = tokio::time::timeout(PATIENCE, term_a.lost()).await.unwrap();
        assert!(
            matches!(
                loss,
                LockLoss::SessionReplaced | LockLoss::ConnectionState(_) | LockLoss::NodeDeleted
            ),
            "{loss:?}"
        );
        let term_b = leads(&b, PATIENCE).await;
        let refused = fence_a.set_data(&data, b"a", None).await.unwrap_err();
        assert!(matches!(refused, Error::LockLost { .. }), "{refused:?}");
        term_b
            .fence()
            .unwrap()
            .set_data(&data, b"b", None)
            .await
            .unwrap();
        assert!(term_b.fencing_token() > term_a.fencing_token());
        close_election(&raw, &path, &[&a, &b], &[&fa, &fb]).await;
    })
    .await;
}

/// Someone deletes the leader's node (an operator, say): the leader's
/// fenced write is refused by ZooKeeper itself (the term had no way to know
/// before asking), the term is over, and the latch queues again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_leader_node_ends_the_term_and_the_latch_queues_again() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("latch-deleted");
        let data = data_node(&raw, "leader-data").await;
        let (fa, a) = started_latch(&connect, &path, "a").await;
        let first = leads(&a, PATIENCE).await;
        let fence = first.fence().unwrap();
        raw.delete(first.node().path(), None).await.unwrap();
        let refused = fence.set_data(&data, b"stale", None).await.unwrap_err();
        assert!(matches!(refused, Error::LockLost { .. }), "{refused:?}");
        assert_eq!(raw.get_data(&data).await.unwrap().0, b"0");
        assert_eq!(first.lost().await, LockLoss::NodeDeleted);
        // Alone in the election, it leads again, with a new node and term.
        // A term known lost is never handed out as leadership.
        let second = leads(&a, PATIENCE).await;
        assert!(second != first);
        assert!(second.fencing_token() > first.fencing_token());
        assert_ne!(second.node().path(), first.node().path());
        close_election(&raw, &path, &[&a], &[&fa]).await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// 4. Re-entry after a new session

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_whose_session_expired_takes_part_again_and_leads_later() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("latch-reentry");
        let (fa, a) = started_latch(&connect, &path, "a").await;
        let first_a = leads(&a, PATIENCE).await;
        let (fb, b) = started_latch(&connect, &path, "b").await;
        wait_for_participants(&raw, &path, 2).await;

        // A waiter's session expires: it queues again, the leader stays.
        expire(&connect, &fb).await;
        let fb_session = fb.session().await.unwrap().id();
        assert!(
            eventually(PATIENCE, || owners_include(&raw, &path, fb_session)).await,
            "B queues again on its new session"
        );
        assert!(first_a.is_valid() && a.has_leadership());
        assert_eq!(children(&raw, &path).await.len(), 2);

        // The leader's session expires: B leads, A queues again behind it.
        expire(&connect, &fa).await;
        let term_b = leads(&b, PATIENCE).await;
        let fa_session = fa.session().await.unwrap().id();
        assert!(
            eventually(PATIENCE, || owners_include(&raw, &path, fa_session)).await,
            "A queues again on its new session"
        );
        assert!(!a.has_leadership() && a.state() == LatchState::Started);
        let ids = ids(&b).await;
        assert_eq!(ids, ["b", "a"]);

        // And leads again once B leaves, with a new term.
        b.close().await.unwrap();
        let second_a = leads(&a, PATIENCE).await;
        assert!(second_a != first_a);
        assert!(first_a.fencing_token() < term_b.fencing_token());
        assert!(term_b.fencing_token() < second_a.fencing_token());
        assert_eq!(
            second_a.session().unwrap().id(),
            fa_session,
            "the new term belongs to the new session"
        );
        close_election(&raw, &path, &[&a], &[&fa, &fb]).await;
    })
    .await;
}

/// Whether a child of `path` is an ephemeral node of `session`.
async fn owners_include(raw: &zk::Client, path: &str, session: i64) -> bool {
    for child in children(raw, path).await {
        if let Ok(Some(stat)) = raw.check_stat(&format!("{path}/{child}")).await {
            if stat.ephemeral_owner == session {
                return true;
            }
        }
    }
    false
}

// ---------------------------------------------------------------------------
// 5. Cancelled waits change nothing; a closed waiter leaves no node

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_await_changes_nothing_and_closing_a_waiter_leaves_no_node() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("latch-cancel");
        let (fa, a) = started_latch(&connect, &path, "a").await;
        leads(&a, PATIENCE).await;
        let (fb, b) = started_latch(&connect, &path, "b").await;
        let before = wait_for_participants(&raw, &path, 2).await;

        // Waits that give up, or are dropped mid-way.
        assert!(b
            .await_leadership_timeout(Duration::ZERO)
            .await
            .unwrap()
            .is_none());
        // A leads until it closes (below), so this wait can only end by its
        // deadline: what it checks is the deadline, not a quiet window.
        let asked = std::time::Instant::now();
        assert!(b
            .await_leadership_timeout(Duration::from_millis(100))
            .await
            .unwrap()
            .is_none());
        assert!(
            asked.elapsed() >= Duration::from_millis(100),
            "the timed wait gave up before its deadline"
        );
        let mut wait = Box::pin(b.await_leadership());
        assert!(futures::poll!(wait.as_mut()).is_pending());
        drop(wait);
        let aborted = {
            let b = b.clone();
            tokio::spawn(async move { b.await_leadership().await })
        };
        aborted.abort();
        assert!(aborted.await.unwrap_err().is_cancelled());
        // The same two nodes, the same leader; B still takes part.
        assert_eq!(children(&raw, &path).await, before);
        assert!(a.has_leadership() && !b.has_leadership());
        assert_eq!(b.state(), LatchState::Started);

        // A third latch closed while it waits: its node goes.
        let (fc, c) = started_latch(&connect, &path, "c").await;
        wait_for_participants(&raw, &path, 3).await;
        let c_waits = {
            let c = c.clone();
            tokio::spawn(async move { c.await_leadership().await })
        };
        c.close().await.unwrap();
        let ended = tokio::time::timeout(PATIENCE, c_waits)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(ended, Err(Error::Closed)), "{ended:?}");
        assert_eq!(wait_for_participants(&raw, &path, 2).await, before);

        // Dropping every handle of a waiting latch closes it too.
        let (fd, d) = started_latch(&connect, &path, "d").await;
        wait_for_participants(&raw, &path, 3).await;
        drop(d);
        assert_eq!(wait_for_participants(&raw, &path, 2).await, before);

        // The waits dropped above did not cost B its turn.
        a.close().await.unwrap();
        leads(&b, PATIENCE).await;
        b.close().await.unwrap();
        wait_for_participants(&raw, &path, 0).await;
        for fw in [fa, fb, fc, fd] {
            fw.close().await;
        }
    })
    .await;
}

/// Bad input is refused before anything is sent; a latch not started has
/// no leadership to wait for; ids and identities read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_participants_read_back_ids_and_identities() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let (fw, raw) = session_and_raw(&connect).await;
        for bad in ["", "relative", "/trailing/", "/", "/zookeeper/x", "/a//b"] {
            let err = LeaderLatch::new(fw.clone(), bad, "x").unwrap_err();
            assert!(matches!(err, Error::InvalidPath(_)), "{bad:?}: {err:?}");
            let err =
                LeaderSelector::new(fw.clone(), bad, |_term: LeaderTerm| async {}).unwrap_err();
            assert!(matches!(err, Error::InvalidPath(_)), "{bad:?}: {err:?}");
        }
        let path = unique_path("latch-input");
        let huge = "x".repeat(2 * 1024 * 1024);
        let err = LeaderLatch::new(fw.clone(), &path, huge).unwrap_err();
        assert!(matches!(err, Error::RequestTooLarge { .. }), "{err:?}");
        assert!(children(&raw, &path).await.is_empty(), "nothing was sent");

        let latch = LeaderLatch::new(fw.clone(), &path, "").unwrap();
        assert_eq!(latch.state(), LatchState::Latent);
        assert!(matches!(
            latch.await_leadership().await,
            Err(Error::NotStarted)
        ));
        latch.start().unwrap();
        assert!(matches!(latch.start(), Err(Error::InvalidArgument(_))));
        leads(&latch, PATIENCE).await;
        let named = LeaderLatch::new(fw.clone(), &path, "named").unwrap();
        named.start().unwrap();
        wait_for_participants(&raw, &path, 2).await;
        // Two latches of one framework each keep a node of their own.
        let participants = named.participants().await.unwrap();
        assert_eq!(participants.len(), 2);
        assert!(participants[0].is_leader && !participants[1].is_leader);
        // Without an id, the node carries the framework's holder identity.
        assert_eq!(participants[0].identity.as_ref(), fw.holder_identity());
        assert!(participants[0].identity.is_some());
        assert_eq!(participants[1].id, "named");
        assert_eq!(participants[1].identity, None);
        latch.close().await.unwrap();
        leads(&named, PATIENCE).await;
        named.close().await.unwrap();
        wait_for_participants(&raw, &path, 0).await;
        fw.close().await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// 6. LeaderSelector

/// What a selector's work reports.
#[derive(Debug, PartialEq, Eq)]
enum Work {
    Started(&'static str, FencingToken),
    Dropped(&'static str, FencingToken),
}

/// Reports its drop: the work's future was dropped (cancelled or done).
struct DropSignal {
    who: &'static str,
    token: FencingToken,
    events: mpsc::UnboundedSender<Work>,
}

impl Drop for DropSignal {
    fn drop(&mut self) {
        let _ = self.events.send(Work::Dropped(self.who, self.token));
    }
}

/// A selector whose work reports its start and its drop, then waits
/// forever (it ends only by being cancelled).
fn endless_selector(
    fw: &Framework,
    path: &str,
    who: &'static str,
    events: mpsc::UnboundedSender<Work>,
) -> LeaderSelector {
    LeaderSelector::with_id(fw.clone(), path, who, move |term: LeaderTerm| {
        let events = events.clone();
        async move {
            let token = term.fencing_token();
            let _signal = DropSignal {
                who,
                token,
                events: events.clone(),
            };
            events.send(Work::Started(who, token)).unwrap();
            std::future::pending::<()>().await;
        }
    })
    .unwrap()
}

async fn next_work(events: &mut mpsc::UnboundedReceiver<Work>) -> Work {
    tokio::time::timeout(PATIENCE, events.recv())
        .await
        .expect("the selector's work reports within PATIENCE")
        .expect("the channel is open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_work_runs_while_leader_and_is_dropped_when_the_term_is_lost() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("selector-loss");
        let fw = framework(&connect).await;
        let (tx, mut events) = mpsc::unbounded_channel();
        let selector = endless_selector(&fw, &path, "a", tx);
        selector.start().unwrap();
        let Work::Started("a", first) = next_work(&mut events).await else {
            panic!("the work starts first")
        };
        let term = selector.term().unwrap();
        assert_eq!(term.fencing_token(), first);
        assert!(selector.has_leadership());
        let nodes = wait_for_participants(&raw, &path, 1).await;
        assert!(nodes[0].contains("-lock-"), "a mutex's queue: {nodes:?}");
        assert_eq!(selector.leader().await.unwrap().unwrap().id, "a");
        // Already queued: nothing to requeue.
        assert!(!selector.requeue().unwrap());

        // The session expires: the work is dropped, the term being over.
        expire(&connect, &fw).await;
        assert_eq!(next_work(&mut events).await, Work::Dropped("a", first));
        assert!(!term.is_valid());
        // No auto-requeue: it does not queue again by itself.
        assert!(eventually(PATIENCE, || async { !selector.has_leadership() }).await);
        wait_for_participants(&raw, &path, 0).await;

        // Until asked to.
        assert!(selector.requeue().unwrap());
        let Work::Started("a", second) = next_work(&mut events).await else {
            panic!("requeued work starts")
        };
        assert!(second > first);
        selector.close().await.unwrap();
        assert_eq!(next_work(&mut events).await, Work::Dropped("a", second));
        assert!(!selector.has_leadership());
        wait_for_participants(&raw, &path, 0).await;
        assert!(matches!(selector.requeue(), Err(Error::Closed)));
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_interrupt_cancels_the_work_and_auto_requeue_queues_again() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("selector-interrupt");
        let fw = framework(&connect).await;
        let (tx, mut events) = mpsc::unbounded_channel();
        let selector = endless_selector(&fw, &path, "a", tx);
        assert!(matches!(selector.requeue(), Err(Error::NotStarted)));
        selector.start().unwrap();
        let Work::Started(_, first) = next_work(&mut events).await else {
            panic!("the work starts first")
        };

        // Interrupted without auto-requeue: dropped, not queued again.
        selector.interrupt_leadership();
        assert_eq!(next_work(&mut events).await, Work::Dropped("a", first));
        wait_for_participants(&raw, &path, 0).await;
        assert!(!selector.has_leadership());

        // With auto-requeue, an interrupted term is followed by a new one.
        selector.auto_requeue(true);
        assert!(selector.requeue().unwrap());
        let Work::Started(_, second) = next_work(&mut events).await else {
            panic!("requeued work starts")
        };
        selector.interrupt_leadership();
        assert_eq!(next_work(&mut events).await, Work::Dropped("a", second));
        let Work::Started(_, third) = next_work(&mut events).await else {
            panic!("auto-requeued work starts")
        };
        assert!(first < second && second < third);
        selector.close().await.unwrap();
        assert_eq!(next_work(&mut events).await, Work::Dropped("a", third));
        wait_for_participants(&raw, &path, 0).await;
        fw.close().await;
    })
    .await;
}

/// Two auto-requeueing selectors whose work returns when the test lets it:
/// leadership alternates, each term's function runs alone, tokens grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_requeued_selectors_take_turns_when_the_work_returns() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("selector-turns");
        let permits = Arc::new(tokio::sync::Semaphore::new(0));
        let running = Arc::new(AtomicUsize::new(0));
        let (tx, mut terms) = mpsc::unbounded_channel();
        let mut selectors = Vec::new();
        let mut frameworks = Vec::new();
        for who in ["a", "b"] {
            let fw = framework(&connect).await;
            let (permits, running, tx) = (permits.clone(), running.clone(), tx.clone());
            let selector =
                LeaderSelector::with_id(fw.clone(), &path, who, move |term: LeaderTerm| {
                    let (permits, running, tx) = (permits.clone(), running.clone(), tx.clone());
                    async move {
                        let alone = running.fetch_add(1, Ordering::SeqCst) == 0;
                        tx.send((who, term.fencing_token(), alone)).unwrap();
                        permits.acquire().await.unwrap().forget();
                        running.fetch_sub(1, Ordering::SeqCst);
                    }
                })
                .unwrap();
            selector.auto_requeue(true);
            selector.start().unwrap();
            wait_for_participants(&raw, &path, selectors.len() + 1).await;
            selectors.push(selector);
            frameworks.push(fw);
        }
        let mut seen: Vec<(&str, FencingToken)> = Vec::new();
        for _ in 0..6 {
            let (who, token, alone) = tokio::time::timeout(PATIENCE, terms.recv())
                .await
                .unwrap()
                .unwrap();
            assert!(alone, "two terms' work at once");
            seen.push((who, token));
            // The other one waits in the queue while this one leads.
            wait_for_participants(&raw, &path, 2).await;
            permits.add_permits(1);
        }
        let who: Vec<&str> = seen.iter().map(|(w, _)| *w).collect();
        assert_eq!(who, ["a", "b", "a", "b", "a", "b"]);
        assert!(seen.windows(2).all(|w| w[0].1 < w[1].1), "{seen:?}");
        for selector in &selectors {
            selector.close().await.unwrap();
        }
        wait_for_participants(&raw, &path, 0).await;
        for fw in frameworks {
            fw.close().await;
        }
    })
    .await;
}

// ---------------------------------------------------------------------------
// 7. Fencing tokens grow from term to term

/// Three frameworks; whoever leads writes through its term's fence, leaves,
/// and joins again at the back with a new latch. Every term's token is its
/// node's creation zxid and greater than the last one; the previous term's
/// fence is refused once it is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_strictly_increase_across_successive_leaders() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("latch-tokens");
        let data = data_node(&raw, "leader-data").await;
        let mut members = Vec::new();
        for i in 0..3 {
            let fw = framework(&connect).await;
            let latch = LeaderLatch::new(fw.clone(), &path, format!("m{i}")).unwrap();
            latch.start().unwrap();
            wait_for_participants(&raw, &path, i + 1).await;
            members.push((fw, latch));
        }
        let mut tokens: Vec<FencingToken> = Vec::new();
        let mut previous_fence = None;
        for round in 0..7 {
            let leader = leader_among(members.iter().map(|(_, latch)| latch)).await;
            let (fw, latch) = &members[leader];
            let term = latch.term().unwrap();
            let token = term.fencing_token();
            assert_eq!(token.get(), czxid(&raw, term.node().path()).await);
            if let Some(&last) = tokens.last() {
                assert!(token > last, "round {round}: {token} after {last}");
            }
            tokens.push(token);
            let fence = term.fence().unwrap();
            fence
                .set_data(&data, format!("round {round}").as_bytes(), None)
                .await
                .unwrap();
            if let Some(old) = previous_fence.replace(fence) {
                let err = old.set_data(&data, b"stale", None).await.unwrap_err();
                assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
            }
            // Leave, and join again at the back with a new latch.
            latch.close().await.unwrap();
            let again = LeaderLatch::new(fw.clone(), &path, latch.id()).unwrap();
            again.start().unwrap();
            wait_for_participants(&raw, &path, 3).await;
            members[leader].1 = again;
        }
        assert_eq!(tokens.len(), 7);
        assert_eq!(raw.get_data(&data).await.unwrap().0, b"round 6");
        for (fw, latch) in members {
            latch.close().await.unwrap();
            fw.close().await;
        }
        wait_for_participants(&raw, &path, 0).await;
    })
    .await;
}

/// A participant that may not create its node (the election's parent
/// allows reading only) is told so by `await_leadership`, instead of
/// waiting on while its campaign fails in the background; both recipes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_that_cannot_queue_is_an_error_not_a_wait() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let root = format!("{}-denied", unique_path("leader"));
        let raw = raw_client(&server.connect_string()).await;
        let read_only = vec![zk::Acl::new(
            zk::Permission::READ,
            zk::AuthId::new("world", "anyone"),
        )];
        let read_only = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&read_only));
        let parent = zk_curator::framework::path::split(&root).0.to_owned();
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let _ = raw.create(&parent, &[], &open).await;
        raw.create(&root, &[], &read_only).await.unwrap();
        let fw = framework(&server.connect_string()).await;

        let latch = LeaderLatch::new(fw.clone(), &format!("{root}/latch"), "denied").unwrap();
        latch.start().unwrap();
        let answer = latch.await_leadership_timeout(PATIENCE).await;
        assert_eq!(answer, Err(Error::NoAuth), "the latch waited on");
        latch.close().await.unwrap();

        let selector = LeaderSelector::with_id(
            fw.clone(),
            &format!("{root}/selector"),
            "denied",
            |_term: LeaderTerm| async {},
        )
        .unwrap();
        selector.start().unwrap();
        let answer = selector.await_leadership_timeout(PATIENCE).await;
        assert_eq!(answer, Err(Error::NoAuth), "the selector waited on");
        // Without auto-requeue it gave up, and no longer counts as queued
        // once the failure shows: asked right then, it queues again.
        assert!(
            selector.requeue().unwrap(),
            "the failed campaign still counted as queued"
        );
        let answer = selector.await_leadership_timeout(PATIENCE).await;
        assert_eq!(answer, Err(Error::NoAuth), "the second campaign waited on");
        selector.close().await.unwrap();
        fw.close().await;
    })
    .await;
}
