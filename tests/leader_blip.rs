//! A leader latch keeps its place through a suspension its session survives
//! (issue 25, item 6), against a real server (the embedded one, or
//! ZooKeeper with `ZK_TEST_SERVER=real`), through the fault proxy.
//!
//! A blip shorter than the session timeout ends the leader's term (its
//! `lost()` fires, its fence refuses) but leaves the same leader: once the
//! connection is back on the same session, a new term begins on the same
//! node, with a greater token (the node's zxid, the next per-node count),
//! and nobody else leads meanwhile. A blip longer than the session timeout
//! (the session expired) hands leadership on, as before.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{
    bounded, close_election, data_node, eventually, framework, framework_with, ids, leads,
    raw_client, server, unique_path, wait_for_participants, BOUND, PATIENCE,
};
use futures::StreamExt;
use zk_curator::framework::lock_internals::FencingToken;
use zk_curator::{
    zk, ConnectionState, Error, Framework, LatchState, LeaderElection, LeaderLatch, LeaderObserver,
    LeaderTerm, LockLoss, Observation,
};
use zk_curator_testing::FaultProxy;

/// A framework behind `proxy` whose session outlasts every blip of these
/// tests (12 s): the blackholes are lifted well before the server could
/// expire it.
async fn outlasting_blips(proxy: &FaultProxy) -> Framework {
    framework_with(&proxy.connect_string(), |b| {
        b.session_timeout(Duration::from_secs(12))
    })
    .await
}

/// The lock engine on a mutex's queue at `path` (one holder).
fn mutex_queue(fw: &Framework, path: &str) -> zk_curator::framework::lock_internals::LockInternals {
    use zk_curator::framework::lock_internals::{LockInternals, StandardLockInternalsDriver};
    LockInternals::new(
        fw.clone(),
        path,
        "lock-",
        1,
        Arc::new(StandardLockInternalsDriver),
    )
    .unwrap()
}

/// A started latch on `fw`.
fn started(fw: &Framework, path: &str, id: &str) -> LeaderLatch {
    let latch = LeaderLatch::new(fw.clone(), path, id).unwrap();
    latch.start().unwrap();
    latch
}

/// Counts the terms `latch` reports from now on (a `Leader` in its stream).
fn count_terms(latch: &LeaderLatch) -> Arc<AtomicUsize> {
    let terms = Arc::new(AtomicUsize::new(0));
    let mut changes = Box::pin(latch.leadership_changes());
    let counted = terms.clone();
    tokio::spawn(async move {
        while let Some(change) = changes.next().await {
            if change.is_leader() {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    terms
}

/// How the connection of the leader blips.
#[derive(Clone, Copy, Debug)]
enum Blip {
    /// The proxy closes the connection, and holds the client's reconnection
    /// until the term is found lost: a reconnection that completes before
    /// the framework looks at the client's state hides the blip altogether
    /// (the term then simply goes on).
    Drop,
    /// The proxy forwards nothing until the leader's term is found lost
    /// (the client notices the silence), then lets traffic through again:
    /// well within the session timeout.
    Blackhole,
}

/// A leads (through the proxy), B waits behind it; A's connection blips
/// `rounds` times. Each time: A's term is lost (`lost()` completes with a
/// connection-state loss, its fence refuses, before and after the new
/// term), then A leads again on the same session and the same node, with a
/// new term whose token has the same zxid and a pass count one higher; B
/// never leads, and the queue is still A, B. An observer on a third
/// framework reports A throughout, each new term with its whole token (A
/// proclaims its value again at each term's start, with the term's count).
async fn a_blip_keeps_the_leader(blip: Blip, rounds: u32) {
    let Some(server) = server() else { return };
    bounded(BOUND * 2, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("latch-blip");
        let data = data_node(&raw, "blip-data").await;
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fa = outlasting_blips(&proxy).await;
        let a = LeaderLatch::new(fa.clone(), &path, "a")
            .unwrap()
            .with_value("10.0.0.1:80");
        a.start().unwrap();
        let mut term = leads(&a, PATIENCE).await;
        let fo = framework(&connect).await;
        let observer = LeaderObserver::new(fo.clone(), &path).unwrap();
        let mut observed = Box::pin(observer.changes());
        reports_term(&mut observed, &term).await;
        term.fence()
            .unwrap()
            .set_data(&data, b"a0", None)
            .await
            .unwrap();
        let session = fa.session().await.unwrap().id();
        let fb = framework(&connect).await;
        let b = started(&fb, &path, "b");
        let b_terms = count_terms(&b);
        wait_for_participants(&raw, &path, 2).await;
        let node = term.node().path().to_owned();
        let zxid = {
            let stat = raw.check_stat(&node).await.unwrap().unwrap();
            stat.czxid
        };
        assert_eq!(term.fencing_token(), FencingToken::new(zxid));

        for round in 1..=rounds {
            let old = term.clone();
            let old_fence = old.fence().unwrap();
            proxy.blackhole(true);
            if let Blip::Drop = blip {
                proxy.drop_connections();
            }
            let loss = tokio::time::timeout(PATIENCE, old.lost()).await.unwrap();
            proxy.blackhole(false);
            assert!(
                matches!(
                    loss,
                    LockLoss::ConnectionState(ConnectionState::Suspended) | LockLoss::Stale
                ),
                "{blip:?} round {round}: {loss:?}"
            );
            let refused = old_fence.set_data(&data, b"stale", None).await.unwrap_err();
            assert!(matches!(refused, Error::LockLost { .. }), "{refused:?}");

            // The same leader, with a new term on the same node.
            term = leads(&a, PATIENCE).await;
            assert!(term != old, "a new term");
            assert!(!old.is_valid(), "the old term stays lost");
            assert_eq!(term.node().path(), node, "on the same node");
            assert_eq!(
                term.fencing_token(),
                FencingToken::passed(zxid, round),
                "the node's zxid, the next per-node count"
            );
            assert!(term.fencing_token() > old.fencing_token());
            assert_eq!(term.session().unwrap().id(), session, "on the same session");
            eprintln!(
                "{blip:?} round {round}: lost with {loss}, leads again with token {}",
                term.fencing_token()
            );

            // Observers see the new term, token and all.
            reports_term(&mut observed, &term).await;

            // The new term writes; the old one is still refused.
            term.fence()
                .unwrap()
                .set_data(&data, format!("a{round}").as_bytes(), None)
                .await
                .unwrap();
            let refused = old_fence.set_data(&data, b"stale", None).await.unwrap_err();
            assert!(matches!(refused, Error::LockLost { .. }), "{refused:?}");
            assert!(matches!(old.fence(), Err(Error::LockLost { .. })));
            assert_eq!(
                raw.get_data(&data).await.unwrap().0,
                format!("a{round}").as_bytes()
            );

            // Nobody else led, and the queue is as it was.
            assert_eq!(b_terms.load(Ordering::SeqCst), 0, "B never leads");
            assert!(!b.has_leadership());
            assert_eq!(ids(&b).await, ["a", "b"]);
            assert_eq!(wait_for_participants(&raw, &path, 2).await.len(), 2);
        }

        drop(observed);
        fo.close().await;
        close_election(&raw, &path, &[&a, &b], &[&fa, &fb]).await;
    })
    .await;
}

/// Waits for `observed` to report `term` (its node, its whole token, the
/// value A proclaims); every report meanwhile must name A's node, with a
/// token no greater.
async fn reports_term(
    observed: &mut (impl futures::Stream<Item = Observation> + Unpin),
    term: &LeaderTerm,
) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let seen = tokio::time::timeout_at(deadline, observed.next())
            .await
            .unwrap_or_else(|_| panic!("no report of the term {}", term.fencing_token()))
            .unwrap();
        let Observation::Leader(leader) = seen else {
            continue;
        };
        assert_eq!(
            leader.node_path,
            term.node().path(),
            "only A leads: {leader:?}"
        );
        assert!(leader.token <= term.fencing_token(), "{leader:?}");
        // The value comes a moment after the term begins (and with it, for
        // a term after the first, the term's count).
        if leader.token == term.fencing_token() && leader.proclaimed {
            assert_eq!(leader.value, b"10.0.0.1:80", "{leader:?}");
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connections_keep_the_leader_with_a_new_term_each_time() {
    a_blip_keeps_the_leader(Blip::Drop, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackhole_shorter_than_the_session_timeout_keeps_the_leader_with_a_new_term() {
    a_blip_keeps_the_leader(Blip::Blackhole, 1).await;
}

/// A blip longer than the session timeout: the server expires A's session,
/// B leads (with a greater token), A's old fence is refused, and A queues
/// again at the back on its new session, as before: a place on an expired
/// session is not kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blip_longer_than_the_session_timeout_hands_leadership_on() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("latch-long-blip");
        let data = data_node(&raw, "blip-data").await;
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fa = framework_with(&proxy.connect_string(), |b| {
            b.session_timeout(Duration::from_secs(4))
        })
        .await;
        let a = started(&fa, &path, "a");
        let term_a = leads(&a, PATIENCE).await;
        let fence_a = term_a.fence().unwrap();
        let old_session = fa.session().await.unwrap().id();
        let fb = framework(&connect).await;
        let b = started(&fb, &path, "b");
        wait_for_participants(&raw, &path, 2).await;

        proxy.blackhole(true);
        let loss = tokio::time::timeout(PATIENCE, term_a.lost()).await.unwrap();
        assert!(
            matches!(loss, LockLoss::ConnectionState(_) | LockLoss::Stale),
            "{loss:?}"
        );
        // The server expires A's session: B leads.
        let term_b = leads(&b, PATIENCE).await;
        proxy.blackhole(false);

        assert!(term_b.fencing_token() > term_a.fencing_token());
        let refused = fence_a.set_data(&data, b"a", None).await.unwrap_err();
        assert!(matches!(refused, Error::LockLost { .. }), "{refused:?}");
        term_b
            .fence()
            .unwrap()
            .set_data(&data, b"b", None)
            .await
            .unwrap();
        assert_eq!(raw.get_data(&data).await.unwrap().0, b"b");

        // A queues again, at the back, on its new session.
        assert!(
            eventually(PATIENCE, || async { ids(&b).await == ["b", "a"] }).await,
            "A queues again behind B: {:?}",
            ids(&b).await
        );
        let new_session = fa.session().await.unwrap().id();
        assert_ne!(new_session, old_session);
        assert!(!a.has_leadership() && a.state() == LatchState::Started);
        assert!(term_b.is_valid() && b.has_leadership());

        close_election(&raw, &path, &[&a, &b], &[&fa, &fb]).await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// The engine's `LockInternals::resume`, on a plain lock

/// Closes `hold`'s connection and holds the reconnection until the hold is
/// found lost (see [`Blip::Drop`]), then lets it through.
async fn reset_until_lost(proxy: &FaultProxy, hold: &zk_curator::framework::lock_internals::Hold) {
    proxy.blackhole(true);
    proxy.drop_connections();
    let loss = tokio::time::timeout(PATIENCE, hold.lost()).await.unwrap();
    proxy.blackhole(false);
    assert!(matches!(loss, LockLoss::ConnectionState(_)), "{loss:?}");
}

/// What the latch builds on, on a mutex's queue: a hold lost to dropped
/// connections is taken up again as a new hold of the same node (token
/// `zxid.1`), the lost hold staying lost; a hold that is not lost, or was
/// given back, has nothing to resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_takes_up_a_node_lost_to_the_connection_and_nothing_else() {
    use zk_curator::framework::lock_internals::{until_held, Acquire};
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let data = data_node(&raw, "blip-data").await;
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = outlasting_blips(&proxy).await;
        let path = unique_path("resume-lock");
        let lock = mutex_queue(&fw, &path);
        let hold = until_held(|| lock.acquire(Acquire::new())).await.unwrap();
        let refused = lock.resume(&hold).await.unwrap_err();
        assert!(matches!(refused, Error::InvalidArgument(_)), "{refused:?}");

        reset_until_lost(&proxy, &hold).await;
        let again = tokio::time::timeout(PATIENCE, lock.resume(&hold))
            .await
            .unwrap()
            .unwrap()
            .expect("the node is taken up again");
        assert!(!again.same_hold(&hold) && !hold.is_valid() && again.is_valid());
        assert_eq!(again.node().path(), hold.node().path());
        assert_eq!(
            again.fencing_token(),
            FencingToken::passed(hold.fencing_token().get(), 1)
        );
        again
            .fence()
            .unwrap()
            .set_data(&data, b"again", None)
            .await
            .unwrap();
        assert!(hold.fence().is_err());

        lock.release(&again).await.unwrap();
        assert!(raw.check_stat(hold.node().path()).await.unwrap().is_none());
        // Given back: nothing left to take up.
        assert!(matches!(lock.resume(&again).await, Ok(None)));
        fw.close().await;
    })
    .await;
}

/// A node that is no longer first when the connection is back waits in its
/// place: a node that sorts ahead of ours (made by hand, sequence 0) keeps
/// the resume waiting, without a new node of ours; once it goes, ours holds
/// again, as a new hold with the next per-node count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_of_a_node_no_longer_first_waits_in_its_place() {
    use zk_curator::framework::lock_internals::{until_held, Acquire};
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = outlasting_blips(&proxy).await;
        let path = unique_path("resume-wait");
        // Our node gets a sequence above 0 (a node created and deleted
        // first), so that a node of sequence 0 sorts ahead of it.
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        raw.create(&path, b"", &open).await.unwrap();
        let sequential = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
        let (_, sequence) = raw
            .create(&format!("{path}/filler-"), b"", &sequential)
            .await
            .unwrap();
        raw.delete(&format!("{path}/filler-{sequence}"), None)
            .await
            .unwrap();
        let lock = mutex_queue(&fw, &path);
        let hold = until_held(|| lock.acquire(Acquire::new())).await.unwrap();
        assert!(!hold.node().path().ends_with("-lock-0000000000"));
        let ahead = format!("{path}/x-lock-0000000000");
        raw.create(&ahead, b"", &open).await.unwrap();

        reset_until_lost(&proxy, &hold).await;
        let resume = tokio::spawn({
            let (lock, hold) = (lock.clone(), hold.clone());
            async move { lock.resume(&hold).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        if resume.is_finished() {
            panic!("waits while a node is ahead, yet: {:?}", resume.await);
        }
        let mut queue = wait_for_participants(&raw, &path, 2).await;
        queue.sort();
        assert!(queue
            .iter()
            .any(|name| hold.node().path().ends_with(name.as_str())));

        raw.delete(&ahead, None).await.unwrap();
        let again = tokio::time::timeout(PATIENCE, resume)
            .await
            .unwrap()
            .unwrap()
            .unwrap()
            .expect("holds again once the node ahead is gone");
        assert_eq!(again.node().path(), hold.node().path());
        assert_eq!(
            again.fencing_token(),
            FencingToken::passed(hold.fencing_token().get(), 1)
        );
        assert!(again.is_valid() && !hold.is_valid());
        lock.release(&again).await.unwrap();
        fw.close().await;
    })
    .await;
}
