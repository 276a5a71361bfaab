//! Reads as of now (issue 32, item 1): the synced forms send a `sync` before
//! they read, on the session they read on; the cheap forms do not. Counted
//! through a fault proxy's view of the requests. That a sync makes a
//! lagging follower catch up is ZooKeeper's promise; the ensemble tests
//! show what it changes there.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{
    bounded, expire, framework, leads, request_opcodes, requests_with, server, started_latch,
    unique_path, BOUND, PATIENCE,
};
use zk_curator::recipes::fresh::synced;
use zk_curator::{LeaderElection, LeaderLatch, LeaderObserver};
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::FaultProxy;

const LISTINGS: [i32; 2] = [opcode::GET_CHILDREN2, opcode::GET_CHILDREN];

/// The position of the first request with one of `opcodes`.
fn first(opcodes: &[i32], wanted: &[i32]) -> Option<usize> {
    opcodes.iter().position(|op| wanted.contains(op))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_synced_forms_sync_before_they_list_and_the_cheap_ones_do_not() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("fresh-election");
        let (leader_fw, leader) = started_latch(&server.connect_string(), &path, "a").await;
        leads(&leader, PATIENCE).await;
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let reader_fw = framework(&proxy.connect_string()).await;
        // Not started: it only reads.
        let reader = LeaderLatch::new(reader_fw.clone(), &path, "reader").unwrap();

        proxy.clear_traffic();
        let cheap = LeaderElection::participants(&reader).await.unwrap();
        assert_eq!(
            requests_with(&proxy, opcode::SYNC),
            0,
            "{:?}",
            request_opcodes(&proxy)
        );

        proxy.clear_traffic();
        let fresh = LeaderElection::synced_participants(&reader).await.unwrap();
        let opcodes = request_opcodes(&proxy);
        assert_eq!(requests_with(&proxy, opcode::SYNC), 1, "{opcodes:?}");
        assert!(
            first(&opcodes, &[opcode::SYNC]) < first(&opcodes, &LISTINGS),
            "the sync goes before the listing: {opcodes:?}"
        );
        assert_eq!(fresh, cheap);

        proxy.clear_traffic();
        let leader_now = LeaderElection::synced_leader(&reader)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(leader_now.id, "a");
        assert_eq!(requests_with(&proxy, opcode::SYNC), 1);

        leader.close().await.unwrap();
        reader_fw.close().await;
        leader_fw.close().await;
    })
    .await;
}

/// A revocation acts on the leader it reads: that read is synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_leader_reads_the_leader_after_a_sync() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("fresh-revoke");
        let (leader_fw, leader) = started_latch(&server.connect_string(), &path, "a").await;
        leads(&leader, PATIENCE).await;
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let asker_fw = framework(&proxy.connect_string()).await;
        let asker = LeaderObserver::new(asker_fw.clone(), &path).unwrap();

        proxy.clear_traffic();
        let asked = asker.revoke_leader().await.unwrap().unwrap();
        assert_eq!(asked.id, "a");
        let opcodes = request_opcodes(&proxy);
        assert!(
            first(&opcodes, &[opcode::SYNC]).is_some()
                && first(&opcodes, &[opcode::SYNC]) < first(&opcodes, &LISTINGS),
            "a sync before the leader is read: {opcodes:?}"
        );

        leader.close().await.unwrap();
        asker_fw.close().await;
        leader_fw.close().await;
    })
    .await;
}

/// A read answered on a session built after the sync (perhaps by another,
/// older server) is not taken: the sync and the read are made again, on
/// the new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_on_a_session_newer_than_its_sync_is_made_again() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("fresh-session");
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework(&proxy.connect_string()).await;
        let connect = server.connect_string();
        let reads = AtomicUsize::new(0);

        proxy.clear_traffic();
        let sessions = synced(&fw, &path, || async {
            if reads.fetch_add(1, Ordering::SeqCst) == 0 {
                // Between the sync and this read, the session is replaced.
                expire(&connect, &fw).await;
            }
            Ok(fw.session().await?.generation())
        })
        .await
        .unwrap();

        assert_eq!(reads.load(Ordering::SeqCst), 2, "read again");
        assert_eq!(
            requests_with(&proxy, opcode::SYNC),
            2,
            "{:?}",
            request_opcodes(&proxy)
        );
        assert_eq!(sessions, fw.current_session().unwrap().generation());
        fw.close().await;
    })
    .await;
}
