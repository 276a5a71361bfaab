//! Proclaiming a leader's value (issue 25, item 2): a leader advertises a
//! value through its term's fence, observers on other frameworks see each
//! new value, a leader whose term has ended is refused (nothing written),
//! and the participants' node data (their ids) is left alone. Against the
//! embedded server, or ZooKeeper with `ZK_TEST_SERVER=real`.
#![allow(clippy::unwrap_used)]

mod common;

use std::pin::Pin;

use common::{
    bounded, close_election, framework, leads, raw_client, server, unique_path,
    wait_for_participants, BOUND, PATIENCE,
};
use futures::{Stream, StreamExt};
use zk_curator::{
    Error, LeaderElection, LeaderLatch, LeaderObserver, LeaderSelector, LeaderTerm, Observation,
    ObservedLeader,
};

type Changes = Pin<Box<dyn Stream<Item = Observation> + Send>>;

/// Reads observations until one names the leader of `term` with `value`:
/// every one before it must name that same leader (its value not yet
/// proclaimed, or an earlier one). Fails the test after [`PATIENCE`].
async fn until_value(changes: &mut Changes, term: &LeaderTerm, value: &[u8]) -> ObservedLeader {
    let wanted = String::from_utf8_lossy(value).into_owned();
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            let seen = changes.next().await.expect("the observation ended");
            let Observation::Leader(leader) = seen else {
                panic!(
                    "waiting for {wanted:?} from {}: observed {seen:?}",
                    term.node().path()
                );
            };
            assert_eq!(
                leader.node_path,
                term.node().path(),
                "another leader: {leader:?}"
            );
            if leader.value == value {
                return leader;
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("{wanted:?} never observed within {PATIENCE:?}"))
}

/// The election path's data version, and the data of each participant node.
async fn on_server(raw: &zk_curator::zk::Client, path: &str) -> (i32, Vec<Vec<u8>>) {
    let (_, stat) = raw.get_data(path).await.unwrap();
    let mut children = raw.list_children(path).await.unwrap();
    children.sort_by_key(|name| name.rsplit('-').next().unwrap_or_default().to_owned());
    let mut data = Vec::new();
    for child in children {
        let (bytes, _) = raw.get_data(&format!("{path}/{child}")).await.unwrap();
        data.push(bytes);
    }
    (stat.version, data)
}

/// A leads with the value it was given at its start, and an observer on a
/// third framework sees it (as proclaimed, the id unchanged); A proclaims a
/// new value and the observer sees that change on the same leader. A's
/// node is then deleted behind its back: its term ends, B leads with its
/// own value. A's ended term is refused when it proclaims (`LockLost`) and
/// nothing is written: the election path's data keeps its version, the
/// observer keeps reporting B. A's latch keeps a value set while it does
/// not lead, and proclaims it at its next term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proclaimed_value_reaches_observers_and_an_ended_term_is_refused() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("proclaim");
        let (fw_a, fw_b, fw_o) = (
            framework(&connect).await,
            framework(&connect).await,
            framework(&connect).await,
        );
        let a = LeaderLatch::new(fw_a.clone(), &path, "a")
            .unwrap()
            .with_value("10.0.0.1:80");
        a.start().unwrap();
        let term_a = leads(&a, PATIENCE).await;
        let b = LeaderLatch::new(fw_b.clone(), &path, "b")
            .unwrap()
            .with_value("10.0.0.2:80");
        b.start().unwrap();
        wait_for_participants(&raw, &path, 2).await;

        let observer = LeaderObserver::new(fw_o.clone(), &path).unwrap();
        let mut changes: Changes = Box::pin(observer.changes());
        let seen = until_value(&mut changes, &term_a, b"10.0.0.1:80").await;
        assert!(seen.proclaimed, "{seen:?}");
        assert_eq!(seen.id, "a", "the id is still the node's data");
        assert_eq!(seen.token, term_a.fencing_token());
        let once = observer.leader().await.unwrap().unwrap();
        assert_eq!(once, seen, "the one-off read agrees");

        // A new value on the same leader is a change.
        a.proclaim("10.0.0.1:81").await.unwrap();
        let seen = until_value(&mut changes, &term_a, b"10.0.0.1:81").await;
        assert_eq!(seen.id, "a");
        // The participants' nodes still carry their ids only.
        let (_, ids) = on_server(&raw, &path).await;
        assert_eq!(ids, [b"a".to_vec(), b"b".to_vec()]);

        // A's node goes: its term ends, B leads and proclaims its value.
        raw.delete(term_a.node().path(), None).await.unwrap();
        let term_b = leads(&b, PATIENCE).await;
        let seen = loop {
            match tokio::time::timeout(PATIENCE, changes.next())
                .await
                .unwrap()
                .unwrap()
            {
                Observation::Leader(l) if l.node_path == term_b.node().path() => {
                    if l.value == b"10.0.0.2:80" {
                        break l;
                    }
                }
                Observation::Leader(l) if l.node_path == term_a.node().path() => {}
                other => panic!("expected B's term, observed {other:?}"),
            }
        };
        assert!(seen.proclaimed);
        assert_eq!(seen.id, "b");
        let loss = tokio::time::timeout(PATIENCE, term_a.lost()).await.unwrap();
        assert_eq!(loss, zk_curator::LockLoss::NodeDeleted);

        // The ended term is refused, and nothing is written.
        let (version, _) = on_server(&raw, &path).await;
        let refused = term_a.proclaim(b"stale").await;
        assert!(
            matches!(refused, Err(Error::LockLost { .. })),
            "{refused:?}"
        );
        // Not leading, the latch keeps the value for its next term only.
        a.proclaim("10.0.0.1:82").await.unwrap();
        assert_eq!(on_server(&raw, &path).await.0, version, "nothing written");
        let once = observer.leader().await.unwrap().unwrap();
        assert_eq!(once.node_path, term_b.node().path());
        assert_eq!(once.value, b"10.0.0.2:80");

        // B leaves: A leads again, with the value kept.
        b.close().await.unwrap();
        let term_a2 = leads(&a, PATIENCE).await;
        assert!(term_a2.fencing_token() > term_b.fencing_token());
        let seen = loop {
            match tokio::time::timeout(PATIENCE, changes.next())
                .await
                .unwrap()
                .unwrap()
            {
                Observation::Leader(l) if l.node_path == term_a2.node().path() => {
                    if l.value == b"10.0.0.1:82" {
                        break l;
                    }
                    assert!(!l.proclaimed, "a stale value: {l:?}");
                }
                Observation::Leader(l) if l.node_path == term_b.node().path() => {}
                Observation::NoLeader => {}
                other => panic!("expected A's second term, observed {other:?}"),
            }
        };
        assert_eq!(seen.token, term_a2.fencing_token());

        close_election(&raw, &path, &[&a], &[&fw_a, &fw_b, &fw_o]).await;
    })
    .await;
}

/// A selector's function proclaims through its term; a participant that
/// never proclaims is observed with its node's data as its value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_proclaims_through_its_term() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("proclaim-selector");
        let (fw, fw_o) = (framework(&connect).await, framework(&connect).await);
        let (go_tx, go_rx) = tokio::sync::watch::channel(false);
        let (term_tx, mut term_rx) = tokio::sync::mpsc::unbounded_channel();
        let selector =
            LeaderSelector::with_id(fw.clone(), &path, "sel", move |term: LeaderTerm| {
                let mut go = go_rx.clone();
                let term_tx = term_tx.clone();
                async move {
                    term_tx.send(term.clone()).unwrap();
                    let _ = go.wait_for(|go| *go).await;
                    term.proclaim(b"shard-map v1").await.unwrap();
                    std::future::pending::<()>().await;
                }
            })
            .unwrap();
        selector.start().unwrap();
        let term = tokio::time::timeout(PATIENCE, term_rx.recv())
            .await
            .unwrap()
            .unwrap();

        let observer = LeaderObserver::new(fw_o.clone(), &path).unwrap();
        let mut changes: Changes = Box::pin(observer.changes());
        let first = until_value(&mut changes, &term, b"sel").await;
        assert!(!first.proclaimed, "nothing proclaimed yet: {first:?}");
        go_tx.send(true).unwrap();
        let seen = until_value(&mut changes, &term, b"shard-map v1").await;
        assert!(seen.proclaimed);
        assert_eq!(seen.id, "sel");

        selector.close().await.unwrap();
        wait_for_participants(&raw, &path, 0).await;
        fw.close().await;
        fw_o.close().await;
    })
    .await;
}

/// What one new value costs an observer, counted on its connection through
/// a proxy: one notification (the watch on the election path's data) and
/// one read of that data (with a new watch), no listing, nothing else (the
/// watch on the leader's node stands); and a change of leader costs no more
/// than without values (the path's data is not read again while its watch
/// has not fired).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_new_value_costs_an_observer_one_watch() {
    use zk_curator_testing::proxy::opcode;
    use zk_curator_testing::{FaultProxy, Traffic};

    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let path = unique_path("proclaim-cost");
        let (fw_a, fw_b) = (framework(&connect).await, framework(&connect).await);
        let a = LeaderLatch::new(fw_a.clone(), &path, "a").unwrap();
        a.start().unwrap();
        let term_a = leads(&a, PATIENCE).await;
        let b = LeaderLatch::new(fw_b.clone(), &path, "b").unwrap();
        b.start().unwrap();
        wait_for_participants(&raw, &path, 2).await;

        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw_o = framework(&proxy.connect_string()).await;
        let observer = LeaderObserver::new(fw_o.clone(), &path).unwrap();
        let mut changes: Changes = Box::pin(observer.changes());
        until_value(&mut changes, &term_a, b"a").await;
        // (notifications, reads, listings, other requests)
        let counts = || {
            let mut counts = (0, 0, 0, 0);
            for t in proxy.traffic() {
                match t {
                    Traffic::Reply { xid: -1, .. } => counts.0 += 1,
                    Traffic::Reply { .. } => {}
                    Traffic::Request { opcode, .. } => match opcode {
                        opcode::GET_DATA => counts.1 += 1,
                        opcode::GET_CHILDREN | opcode::GET_CHILDREN2 => counts.2 += 1,
                        opcode::PING => {}
                        other => {
                            eprintln!("other request: {other}");
                            counts.3 += 1;
                        }
                    },
                }
            }
            counts
        };

        for round in 1..=3 {
            proxy.clear_traffic();
            let value = format!("10.0.0.1:{round}");
            term_a.proclaim(value.as_bytes()).await.unwrap();
            let seen = until_value(&mut changes, &term_a, value.as_bytes()).await;
            assert!(seen.proclaimed);
            assert_eq!(counts(), (1, 1, 0, 0), "round {round}");
        }

        // A change of leader: one notification, one listing, one read.
        proxy.clear_traffic();
        a.close().await.unwrap();
        let term_b = leads(&b, PATIENCE).await;
        let seen = until_value(&mut changes, &term_b, b"b").await;
        assert!(!seen.proclaimed, "A's value is not B's: {seen:?}");
        assert_eq!(counts(), (1, 1, 1, 0));

        close_election(&raw, &path, &[&b], &[&fw_a, &fw_b, &fw_o]).await;
    })
    .await;
}
