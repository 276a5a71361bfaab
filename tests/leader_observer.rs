//! Observing an election from outside it (issue 25, item 1): a
//! `LeaderObserver` on a framework of its own follows every change of
//! leader, with the leader's id, token and node, at the cost of one watch
//! per change; it says `Unknown` while cut off and finds the right leader
//! once back; it reads a selector's election as well as a latch's. Against
//! the embedded server, or ZooKeeper with `ZK_TEST_SERVER=real`.
#![allow(clippy::unwrap_used)]

mod common;

use std::pin::Pin;

use common::{
    bounded, framework, leads, raw_client, server, started_latch, unique_path,
    wait_for_participants, BOUND, PATIENCE,
};
use futures::{Stream, StreamExt};
use zk_curator::recipes::layout::ElectionRecipe;
use zk_curator::{
    ConnectionState, LeaderElection, LeaderLatch, LeaderObserver, LeaderSelector, LeaderTerm,
    Observation, ObservedLeader,
};
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::{FaultProxy, Traffic};

type Changes = Pin<Box<dyn Stream<Item = Observation> + Send>>;

/// The next observation, failing the test after [`PATIENCE`].
async fn next(changes: &mut Changes, what: &str) -> Observation {
    tokio::time::timeout(PATIENCE, changes.next())
        .await
        .unwrap_or_else(|_| panic!("no observation within {PATIENCE:?}: {what}"))
        .unwrap_or_else(|| panic!("the observation ended: {what}"))
}

/// The next observation, which must name a leader.
async fn next_leader(changes: &mut Changes, what: &str) -> ObservedLeader {
    match next(changes, what).await {
        Observation::Leader(leader) => leader,
        other => panic!("{what}: expected a leader, observed {other:?}"),
    }
}

/// Asserts that `seen` is the leader of `term`, run by participant `id`.
fn assert_is(seen: &ObservedLeader, id: &str, term: &LeaderTerm, recipe: ElectionRecipe) {
    assert_eq!(seen.id, id, "{seen:?}");
    assert_eq!(seen.value, id.as_bytes(), "{seen:?}");
    assert_eq!(seen.token, term.fencing_token(), "{seen:?}");
    assert_eq!(seen.node_path, term.node().path(), "{seen:?}");
    assert_eq!(seen.recipe, recipe, "{seen:?}");
    assert!(seen.session != 0, "an ephemeral node: {seen:?}");
}

/// What the observer's connection carried: notifications received
/// (watches fired), data reads, listings, and every other request.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    notifications: usize,
    get_data: usize,
    listings: usize,
    other_requests: usize,
}

fn counts(proxy: &FaultProxy) -> Counts {
    let mut counts = Counts::default();
    for t in proxy.traffic() {
        match t {
            Traffic::Reply { xid: -1, .. } => counts.notifications += 1,
            Traffic::Reply { .. } => {}
            Traffic::Request { opcode, .. } => match opcode {
                opcode::GET_DATA => counts.get_data += 1,
                opcode::GET_CHILDREN | opcode::GET_CHILDREN2 => counts.listings += 1,
                _ => counts.other_requests += 1,
            },
        }
    }
    counts
}

// ---------------------------------------------------------------------------
// (a) + (b): every change, in order, one watch each

/// Three latches queued in a known order; the observer runs on a fourth
/// framework, through a proxy that counts what it sends. Each leader closes
/// in turn: the observer reports p0, p1, p2, then nobody, each with the
/// token and node of that participant's own term, and nothing in between.
/// Per change of leader its connection carries exactly one notification
/// (the watch on the old leader's node firing), one listing and one read
/// of the new leader's node with a watch: no herd, no polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_sees_every_change_in_order_with_one_watch_each() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("observe-turns");
        let mut latches = Vec::new();
        let mut frameworks = Vec::new();
        for i in 0..3 {
            let (fw, latch) = started_latch(&connect, &path, &format!("p{i}")).await;
            wait_for_participants(&raw, &path, i + 1).await;
            frameworks.push(fw);
            latches.push(latch);
        }
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let observer_fw = framework(&proxy.connect_string()).await;
        let observer = LeaderObserver::new(observer_fw.clone(), &path).unwrap();
        let mut changes: Changes = Box::pin(observer.changes());

        let term = leads(&latches[0], PATIENCE).await;
        let first = next_leader(&mut changes, "the first leader").await;
        assert_is(&first, "p0", &term, ElectionRecipe::Latch);
        // The one-off read agrees.
        assert_eq!(observer.leader().await.unwrap().as_ref(), Some(&first));

        let mut tokens = vec![first.token];
        for (round, latch) in latches.iter().enumerate() {
            proxy.clear_traffic();
            latch.close().await.unwrap();
            let seen = next(&mut changes, "the next change").await;
            let traffic = counts(&proxy);
            if let Some(successor) = latches.get(round + 1) {
                let Observation::Leader(seen) = seen else {
                    panic!("round {round}: expected the next leader, observed {seen:?}");
                };
                let term = leads(successor, PATIENCE).await;
                assert_is(
                    &seen,
                    &format!("p{}", round + 1),
                    &term,
                    ElectionRecipe::Latch,
                );
                tokens.push(seen.token);
                assert_eq!(
                    traffic,
                    Counts {
                        notifications: 1,
                        get_data: 1,
                        listings: 1,
                        other_requests: 0,
                    },
                    "round {round}: one watch fired, one listing, one watched read"
                );
            } else {
                assert_eq!(seen, Observation::NoLeader);
                // The last leader's node fired; the empty election is then
                // watched as a whole: a listing, and a listing with a watch.
                // If the server removes the empty container meanwhile, the
                // listing with a watch finds no node and a watch for its
                // creation (an `exists`) follows; and the removal fires the
                // watch on its data (for proclaimed values), which is
                // one listing more.
                assert!((1..=2).contains(&traffic.notifications), "{traffic:?}");
                assert_eq!(traffic.get_data, 0, "{traffic:?}");
                assert!(
                    traffic.listings <= 3 && traffic.other_requests <= 1,
                    "the end: one watch fired, then the empty election watched: {traffic:?}"
                );
            }
            eprintln!("round {round}: {traffic:?}");
        }
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "tokens grow: {tokens:?}"
        );

        // A newcomer to the empty election is reported too.
        let (fw, latch) = started_latch(&connect, &path, "late").await;
        let term = leads(&latch, PATIENCE).await;
        let seen = next_leader(&mut changes, "a newcomer").await;
        assert_is(&seen, "late", &term, ElectionRecipe::Latch);
        latch.close().await.unwrap();
        assert_eq!(
            next(&mut changes, "the newcomer left").await,
            Observation::NoLeader
        );

        // Closing the framework ends the stream.
        observer_fw.close().await;
        let end = tokio::time::timeout(PATIENCE, changes.next())
            .await
            .unwrap();
        assert_eq!(end, None, "the stream ends with its framework");
        fw.close().await;
        for fw in frameworks {
            fw.close().await;
        }
    })
    .await;
}

// ---------------------------------------------------------------------------
// (c): cut off, then back

/// The observer's connection goes silent while A leads and B waits. It
/// reports `Unknown` (it cannot see A's node any more), A leaves meanwhile,
/// and once the link returns, after its session has expired, it reports B,
/// never A again. A second cut, shorter (the session survives), gives
/// `Unknown`, then B again from a fresh listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_observer_says_unknown_then_finds_the_right_leader() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("observe-cut");
        let (fa, a) = started_latch(&connect, &path, "a").await;
        let term_a = leads(&a, PATIENCE).await;
        let (fb, b) = started_latch(&connect, &path, "b").await;
        wait_for_participants(&raw, &path, 2).await;

        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let observer_fw = framework(&proxy.connect_string()).await;
        let observer = LeaderObserver::new(observer_fw.clone(), &path).unwrap();
        let mut changes: Changes = Box::pin(observer.changes());
        let seen = next_leader(&mut changes, "A leads").await;
        assert_is(&seen, "a", &term_a, ElectionRecipe::Latch);
        let first_session = observer_fw.current_session().unwrap().id();

        // Cut off: new connections hang, the current ones go.
        proxy.set_paused(true);
        proxy.drop_connections();
        assert_eq!(next(&mut changes, "cut off").await, Observation::Unknown);
        a.close().await.unwrap();
        let term_b = leads(&b, PATIENCE).await;
        // The observer's session expires while it is cut off.
        let mut states = observer_fw.state_watcher();
        tokio::time::timeout(
            PATIENCE,
            states.wait_for(|s| s == Some(ConnectionState::Lost)),
        )
        .await
        .expect("the observer's session is lost while cut off")
        .unwrap();
        proxy.set_paused(false);
        let seen = next_leader(&mut changes, "back, on a new session").await;
        assert_is(&seen, "b", &term_b, ElectionRecipe::Latch);
        assert_ne!(observer_fw.current_session().unwrap().id(), first_session);

        // A short cut: the session survives, the leader is read again.
        proxy.set_paused(true);
        proxy.drop_connections();
        assert_eq!(
            next(&mut changes, "cut off again").await,
            Observation::Unknown
        );
        proxy.set_paused(false);
        let again = next_leader(&mut changes, "back, same session").await;
        assert_eq!(again, seen, "the same leader, read afresh");

        b.close().await.unwrap();
        assert_eq!(next(&mut changes, "B left").await, Observation::NoLeader);
        observer_fw.close().await;
        fa.close().await;
        fb.close().await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// (d): a selector's election

/// Two selectors (a mutex's `lock-` nodes) whose work lasts until their
/// term is lost: the observer, told nothing of the recipe, reports the
/// first with its id and token, then the second once the first's work is
/// interrupted (it does not requeue).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observing_a_selector_election() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("observe-selector");
        let mut selectors = Vec::new();
        let mut frameworks = Vec::new();
        for (i, id) in ["s0", "s1"].into_iter().enumerate() {
            let fw = framework(&connect).await;
            let selector =
                LeaderSelector::with_id(fw.clone(), &path, id, |term: LeaderTerm| async move {
                    term.lost().await;
                })
                .unwrap();
            selector.start().unwrap();
            wait_for_participants(&raw, &path, i + 1).await;
            frameworks.push(fw);
            selectors.push(selector);
        }
        let observer_fw = framework(&connect).await;
        let observer = LeaderObserver::new(observer_fw.clone(), &path).unwrap();
        let mut changes: Changes = Box::pin(observer.changes());

        let term = leads(&selectors[0], PATIENCE).await;
        let seen = next_leader(&mut changes, "s0 leads").await;
        assert_is(&seen, "s0", &term, ElectionRecipe::Selector);
        assert!(seen.node_path.contains("-lock-"), "{seen:?}");

        selectors[0].interrupt_leadership();
        let seen = next_leader(&mut changes, "s1 leads").await;
        let term = leads(&selectors[1], PATIENCE).await;
        assert_is(&seen, "s1", &term, ElectionRecipe::Selector);

        // Told the recipe, an observer ignores another recipe's nodes: a
        // latch's view of this path has no leader.
        let as_latch =
            LeaderObserver::with_recipe(observer_fw.clone(), &path, ElectionRecipe::Latch).unwrap();
        assert_eq!(as_latch.leader().await.unwrap(), None);

        for selector in &selectors {
            selector.close().await.unwrap();
        }
        assert_eq!(next(&mut changes, "all gone").await, Observation::NoLeader);
        observer_fw.close().await;
        for fw in frameworks {
            fw.close().await;
        }
    })
    .await;
}

/// A stream nobody polls any more (left standing on a leader, with its
/// watch) does not hold the framework's session: `close()` returns as
/// promptly as without it, not after the close's 3 s limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_stream_does_not_hold_up_the_close() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("observe-forgotten");
        let (leader_fw, latch) = started_latch(&server.connect_string(), &path, "a").await;
        leads(&latch, PATIENCE).await;
        let fw = framework(&server.connect_string()).await;
        let observer = LeaderObserver::new(fw.clone(), &path).unwrap();
        let mut changes: Changes = Box::pin(observer.changes());
        next_leader(&mut changes, "the leader").await;
        // The stream now waits on its watch, unpolled, while we close.
        let started = std::time::Instant::now();
        fw.close().await;
        let took = started.elapsed();
        assert!(
            took < std::time::Duration::from_secs(2),
            "close took {took:?} with an observer stream left standing"
        );
        drop(changes);
        latch.close().await.unwrap();
        leader_fw.close().await;
    })
    .await;
}

/// Ten streams on one framework (from separate observers on clones of it)
/// share one follower: a change of leader costs that session one
/// notification, one listing and one read in all, not one each. A stream
/// that joins while others follow sends nothing (it starts from the
/// follower's state); once every stream is dropped the follower is gone,
/// and the next stream looks afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_of_one_framework_share_one_watch_and_one_read() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("observe-shared");
        let mut latches = Vec::new();
        let mut frameworks = Vec::new();
        for i in 0..2 {
            let (fw, latch) = started_latch(&connect, &path, &format!("p{i}")).await;
            wait_for_participants(&raw, &path, i + 1).await;
            frameworks.push(fw);
            latches.push(latch);
        }
        let term = leads(&latches[0], PATIENCE).await;
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let observer_fw = framework(&proxy.connect_string()).await;
        let mut streams: Vec<Changes> = (0..10)
            .map(|_| {
                let observer = LeaderObserver::new(observer_fw.clone(), &path).unwrap();
                Box::pin(observer.changes()) as Changes
            })
            .collect();
        for (i, changes) in streams.iter_mut().enumerate() {
            let seen = next_leader(changes, &format!("stream {i}: the first leader")).await;
            assert_is(&seen, "p0", &term, ElectionRecipe::Latch);
        }
        let first = counts(&proxy);
        assert_eq!(
            (first.listings, first.get_data),
            (1, 2),
            "one listing, one read of the leader and one of the value for all ten: {first:?}"
        );

        proxy.clear_traffic();
        latches[0].close().await.unwrap();
        let term = leads(&latches[1], PATIENCE).await;
        for (i, changes) in streams.iter_mut().enumerate() {
            let seen = next_leader(changes, &format!("stream {i}: the next leader")).await;
            assert_is(&seen, "p1", &term, ElectionRecipe::Latch);
        }
        assert_eq!(
            counts(&proxy),
            Counts {
                notifications: 1,
                get_data: 1,
                listings: 1,
                other_requests: 0,
            },
            "one watch fired, one listing, one watched read, for ten streams"
        );

        // A latecomer joins the follower: it sends nothing.
        proxy.clear_traffic();
        let late = LeaderObserver::new(observer_fw.clone(), &path).unwrap();
        let mut late: Changes = Box::pin(late.changes());
        let seen = next_leader(&mut late, "a latecomer").await;
        assert_is(&seen, "p1", &term, ElectionRecipe::Latch);
        assert_eq!(
            counts(&proxy),
            Counts::default(),
            "the latecomer read nothing"
        );

        // With every stream gone, the next one starts a follower afresh.
        streams.clear();
        drop(late);
        let again = LeaderObserver::new(observer_fw.clone(), &path).unwrap();
        let mut again: Changes = Box::pin(again.changes());
        let seen = next_leader(&mut again, "after every stream was dropped").await;
        assert_is(&seen, "p1", &term, ElectionRecipe::Latch);
        let fresh = counts(&proxy);
        assert_eq!(
            (fresh.listings, fresh.get_data),
            (1, 2),
            "a fresh look: {fresh:?}"
        );

        drop(again);
        observer_fw.close().await;
        for latch in &latches {
            latch.close().await.unwrap();
        }
        for fw in frameworks {
            fw.close().await;
        }
    })
    .await;
}

/// A new value and the leader's departure arriving together: the leader
/// proclaims a new value and leaves while the observer's replies are held,
/// so its connection then delivers the value's notification and the
/// deletion's one after the other. Whichever wakes the observer first, it
/// never reports the departed leader once it has received the deletion:
/// not with the new value (the read of the value finds the leader's watch
/// fired, and looks again). Repeated, since the order in which the two
/// notifications reach the observer's task varies from round to round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_value_arriving_with_the_leaders_departure_is_not_reported() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let fa = framework(&connect).await;
        let fb = framework(&connect).await;
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fo = framework(&proxy.connect_string()).await;
        let mut stale = Vec::new();
        for round in 0..40 {
            let path = unique_path("observe-value-and-departure");
            let a = LeaderLatch::new(fa.clone(), &path, "a")
                .unwrap()
                .with_value("a1");
            a.start().unwrap();
            leads(&a, PATIENCE).await;
            let b = LeaderLatch::new(fb.clone(), &path, "b").unwrap();
            b.start().unwrap();
            wait_for_participants(&raw, &path, 2).await;
            let observer = LeaderObserver::new(fo.clone(), &path).unwrap();
            let mut changes: Changes = Box::pin(observer.changes());
            loop {
                let seen = next_leader(&mut changes, "a with its value").await;
                if seen.value == b"a1" {
                    break;
                }
            }

            proxy.hold_replies(true);
            a.proclaim("a2").await.unwrap();
            a.close().await.unwrap();
            leads(&b, PATIENCE).await;
            proxy.hold_replies(false);
            loop {
                let seen = next(&mut changes, "b leads").await;
                match &seen {
                    Observation::Leader(leader) if leader.id == "b" => break,
                    Observation::Leader(leader) if leader.value == b"a2" => {
                        stale.push(format!("round {round}: {leader:?}"));
                    }
                    _ => {}
                }
            }
            drop(changes);
            b.close().await.unwrap();
        }
        assert!(
            stale.is_empty(),
            "the departed leader was reported after its deletion had arrived:\n{}",
            stale.join("\n")
        );
        fo.close().await;
        fa.close().await;
        fb.close().await;
    })
    .await;
}

/// The observer's stream is `Send + 'static`, so it can be spawned.
#[allow(dead_code)]
fn streams_are_send(observer: LeaderObserver) {
    fn send_static<T: Send + 'static>(_: T) {}
    send_static(observer.changes());
    send_static(observer.clone());
}
