//! Step down on request (issue 25, item 3): the revocation protocol of
//! elections. A revocable leader asked through `Revoker` (the `__REVOKE__`
//! request `zk-curator revoke` and Curator's `Revoker` write) ends its term
//! at once (`LockLoss::Revoked`, its fence refused), the next participant
//! leads within one failover time, and the one that stepped down queues
//! again (latch) or requeues (selector with auto-requeue). Against the
//! embedded server, or ZooKeeper with `ZK_TEST_SERVER=real`.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{
    bounded, close_election, framework, ids, leads, raw_client, server, unique_path,
    wait_for_participants, BOUND, PATIENCE,
};
use futures::StreamExt;
use zk_curator::{
    Error, LeaderElection, LeaderLatch, LeaderObserver, LeaderSelector, LeaderTerm, LockLoss,
    Observation, Revoker,
};

/// How soon the next participant must lead once the request is written:
/// one failover (a watch firing and a listing), with room for a loaded
/// machine; a step-down that waited for a session to expire (6 s here)
/// would not make it.
const FAILOVER: Duration = Duration::from_secs(3);

/// A revocable latch A leads, B waits, an observer follows on a third
/// framework. A revocation request from a fourth framework
/// (`revoke_leader`, as `zk-curator revoke PATH` sends it, into
/// the election path's data) ends A's term with `Revoked`: a fence A took
/// while leading is refused and writes nothing, B leads within one
/// failover time, A queues again behind B, and the observer goes from A to
/// B without ever reporting the request as an id. Then B steps down by
/// itself (`step_down`, B not revocable): A leads again with a new term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocable_latch_steps_down_when_asked_and_queues_again() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("step-down");
        let state = unique_path("step-down-state");
        raw.create(
            &state,
            b"0",
            &zk_curator::zk::CreateMode::Persistent.with_acls(zk_curator::zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
        let (fw_a, fw_b, fw_o, fw_r) = (
            framework(&connect).await,
            framework(&connect).await,
            framework(&connect).await,
            framework(&connect).await,
        );
        let a = LeaderLatch::new(fw_a.clone(), &path, "a").unwrap();
        a.make_revocable();
        a.start().unwrap();
        let term_a = leads(&a, PATIENCE).await;
        let fence_a = term_a.fence().unwrap();
        let b = LeaderLatch::new(fw_b.clone(), &path, "b").unwrap();
        b.start().unwrap();
        wait_for_participants(&raw, &path, 2).await;

        let observer = LeaderObserver::new(fw_o.clone(), &path).unwrap();
        let mut changes = Box::pin(observer.changes());
        let first = tokio::time::timeout(PATIENCE, changes.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            first.leader().map(|l| l.id.as_str()),
            Some("a"),
            "{first:?}"
        );

        let asked = Instant::now();
        let asker = LeaderObserver::new(fw_r.clone(), &path).unwrap();
        let named = asker.revoke_leader().await.unwrap().unwrap();
        assert_eq!(
            (named.id.as_str(), named.node_path.as_str()),
            ("a", term_a.node().path())
        );
        let loss = tokio::time::timeout(PATIENCE, term_a.lost()).await.unwrap();
        assert_eq!(loss, LockLoss::Revoked);
        let term_b = leads(&b, PATIENCE).await;
        let handed_on = asked.elapsed();
        eprintln!("handed on in {handed_on:?}");
        assert!(handed_on < FAILOVER, "handed on in {handed_on:?}");

        // A's term is over: the fence it took refuses, and nothing is written.
        let refused = fence_a.set_data(&state, b"stale", None).await;
        assert!(
            matches!(refused, Err(Error::LockLost { .. })),
            "{refused:?}"
        );
        assert!(matches!(term_a.fence(), Err(Error::LockLost { .. })));
        assert_eq!(raw.get_data(&state).await.unwrap().0, b"0");

        // A queues again, behind B.
        let order = wait_for_participants(&raw, &path, 2).await;
        let participants = b.participants().await.unwrap();
        let ids: Vec<&str> = participants.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["b", "a"], "{order:?}");
        assert!(!a.has_leadership());

        // The observer went from A to B, never naming the request.
        loop {
            let seen = tokio::time::timeout(PATIENCE, changes.next())
                .await
                .unwrap()
                .unwrap();
            let Observation::Leader(leader) = seen else {
                panic!("expected a leader, observed {seen:?}");
            };
            assert!(leader.id == "a" || leader.id == "b", "{leader:?}");
            if leader.node_path == term_b.node().path() {
                break;
            }
        }

        // A step-down by the leader itself, revocable or not.
        assert!(b.step_down());
        let term_a2 = leads(&a, PATIENCE).await;
        assert!(term_a2.fencing_token() > term_b.fencing_token());
        assert_eq!(term_b.loss(), Some(LockLoss::Revoked));
        assert!(!LeaderElection::step_down(
            &LeaderLatch::new(fw_r.clone(), &path, "x").unwrap()
        ));

        b.close().await.unwrap();
        close_election(&raw, &path, &[&a], &[&fw_a, &fw_b, &fw_o, &fw_r]).await;
    })
    .await;
}

/// A revocable selector with auto-requeue leads; asked to step down (the
/// locks' protocol: `__REVOKE__` written into its node by `Revoker`), its
/// function is cancelled, the other selector leads within one failover
/// time, and the first requeues (it is in the queue again, behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocable_selector_steps_down_and_requeues() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("step-down-selector");
        let (fw_1, fw_2, fw_r) = (
            framework(&connect).await,
            framework(&connect).await,
            framework(&connect).await,
        );
        let selector = |fw: &zk_curator::Framework, id: &str| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<(
                LeaderTerm,
                tokio::sync::oneshot::Receiver<()>,
            )>();
            let selector =
                LeaderSelector::with_id(fw.clone(), &path, id, move |term: LeaderTerm| {
                    let tx = tx.clone();
                    async move {
                        // Dropped (cancelled) with the future: the receiver sees it.
                        let (_alive, dropped) = tokio::sync::oneshot::channel::<()>();
                        tx.send((term, dropped)).unwrap();
                        std::future::pending::<()>().await;
                        drop(_alive);
                    }
                })
                .unwrap();
            selector.auto_requeue(true);
            (selector, rx)
        };
        let (s1, mut terms_1) = selector(&fw_1, "s1");
        s1.make_revocable();
        s1.start().unwrap();
        let (term_1, cancelled) = tokio::time::timeout(PATIENCE, terms_1.recv())
            .await
            .unwrap()
            .unwrap();
        let (s2, mut terms_2) = selector(&fw_2, "s2");
        s2.start().unwrap();
        wait_for_participants(&raw, &path, 2).await;

        let asked = Instant::now();
        Revoker::attempt_revoke(&fw_r, term_1.node().path())
            .await
            .unwrap();
        let (term_2, _) = tokio::time::timeout(PATIENCE, terms_2.recv())
            .await
            .unwrap()
            .unwrap();
        let handed_on = asked.elapsed();
        eprintln!("handed on in {handed_on:?}");
        assert!(handed_on < FAILOVER, "handed on in {handed_on:?}");
        assert_eq!(term_1.loss(), Some(LockLoss::Revoked));
        assert!(term_2.fencing_token() > term_1.fencing_token());
        // Its function was cancelled.
        assert!(tokio::time::timeout(PATIENCE, cancelled)
            .await
            .unwrap()
            .is_err());
        // It requeued: in the queue again, behind s2.
        wait_for_participants(&raw, &path, 2).await;
        let ids = ids(&s2).await;
        assert_eq!(ids, ["s2", "s1"]);

        s2.close().await.unwrap();
        let (term_1b, _) = tokio::time::timeout(PATIENCE, terms_1.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(term_1b.fencing_token() > term_2.fencing_token());
        s1.close().await.unwrap();
        wait_for_participants(&raw, &path, 0).await;
        for fw in [fw_1, fw_2, fw_r] {
            fw.close().await;
        }
    })
    .await;
}

/// A leader that is not revocable is asked to step down: it does not (its
/// term stays valid). It proclaims a new value meanwhile: the request stays
/// in the election path's data beside the value. Made revocable during
/// the term, it finds the request and steps down: B leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waits_for_a_leader_made_revocable_and_survives_a_proclaim() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("step-down-later");
        let (fw_a, fw_b) = (framework(&connect).await, framework(&connect).await);
        let a = LeaderLatch::new(fw_a.clone(), &path, "a")
            .unwrap()
            .with_value("v1");
        a.start().unwrap();
        let term_a = leads(&a, PATIENCE).await;
        let b = LeaderLatch::new(fw_b.clone(), &path, "b").unwrap();
        b.start().unwrap();
        wait_for_participants(&raw, &path, 2).await;

        let observer = LeaderObserver::new(fw_b.clone(), &path).unwrap();
        let named = observer.revoke_leader().await.unwrap().unwrap();
        assert_eq!(named.node_path, term_a.node().path());
        a.proclaim("v2").await.unwrap();
        // Not revocable: still leading, with the new value, the request kept.
        assert!(term_a.is_valid());
        let seen = observer.leader().await.unwrap().unwrap();
        assert_eq!((seen.value.as_slice(), seen.proclaimed), (&b"v2"[..], true));
        let (data, _) = raw.get_data(&path).await.unwrap();
        let asking = format!("zk-curator proclaim 1 step-down {}\n", term_a.node().name());
        assert!(
            data.starts_with(asking.as_bytes()),
            "{}",
            String::from_utf8_lossy(&data)
        );

        a.make_revocable();
        let loss = tokio::time::timeout(PATIENCE, term_a.lost()).await.unwrap();
        assert_eq!(loss, LockLoss::Revoked);
        let term_b = leads(&b, PATIENCE).await;
        assert!(term_b.fencing_token() > term_a.fencing_token());

        b.close().await.unwrap();
        close_election(&raw, &path, &[&a], &[&fw_a, &fw_b]).await;
    })
    .await;
}
