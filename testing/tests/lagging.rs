//! Tests of `TestingCluster` with its members' peer links through fault proxies: a follower
//! whose leader link is stalled serves stale reads while its client stays connected, then
//! catches up (and, stalled past `syncLimit`, drops its clients, then rejoins); a member cut
//! off from its peers (a follower, then the leader) drops its clients while the other two
//! serve writes, then rejoins; the leader can still be killed and restarted; local sessions
//! can be switched on.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{available, bounded, ephemeral, eventually, persistent, unique, STEP};
use zk_curator_testing::{NodeMode, TestingCluster};
use zookeeper_client::{Client, SessionState};

/// Three JVMs per test are plenty for a 2-core machine: the tests of this file run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// 50 ticks of 100 ms: a stalled follower keeps serving for 5 s before it gives up.
const SYNC_LIMIT: u32 = 50;

async fn start_proxied(local_sessions: bool) -> TestingCluster {
    let started = Instant::now();
    let cluster = TestingCluster::builder()
        .quorum_through_proxies(true)
        .local_sessions(local_sessions)
        .sync_limit(SYNC_LIMIT)
        .start_async()
        .await
        .unwrap();
    eprintln!(
        "proxied 3-node cluster serving after {:?}: {}",
        started.elapsed(),
        cluster.connect_string()
    );
    cluster
}

/// A client with a session that outlives the faults of these tests.
async fn connect(connect_string: &str) -> Client {
    bounded(
        Client::connector()
            .with_session_timeout(Duration::from_secs(30))
            .connect(connect_string),
    )
    .await
    .unwrap()
}

/// Records every state the client goes through from now on.
fn record_states(client: &Client) -> Arc<Mutex<Vec<SessionState>>> {
    let states = Arc::new(Mutex::new(Vec::new()));
    let mut watcher = client.state_watcher();
    let sink = states.clone();
    tokio::spawn(async move {
        loop {
            let state = watcher.changed().await;
            sink.lock().unwrap().push(state);
            if state.is_terminated() {
                break;
            }
        }
    });
    states
}

async fn read(client: &Client, path: &str) -> Vec<u8> {
    bounded(client.get_data(path)).await.unwrap().0
}

fn four_letter(port: u16, word: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    Some(reply)
}

/// `(zk_local_sessions, zk_global_sessions)` from a member's `mntr`.
fn sessions(port: u16) -> (u64, u64) {
    let mntr = four_letter(port, "mntr").unwrap();
    let value = |key: &str| -> u64 {
        mntr.lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix('\t'))
            .unwrap_or_else(|| panic!("no {key} in mntr: {mntr}"))
            .trim()
            .parse()
            .unwrap()
    };
    (value("zk_local_sessions"), value("zk_global_sessions"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_follower_serves_stale_reads_then_catches_up() {
    if !available("stalled_follower_serves_stale_reads_then_catches_up") {
        return;
    }
    let _serial = SERIAL.lock().await;
    let cluster = start_proxied(false).await;
    let leader = cluster.wait_until_serving_async(STEP).await.unwrap();
    let lagging = (leader + 1) % 3;
    assert_eq!(cluster.mode_of(lagging), Some(NodeMode::Follower));
    assert!(cluster.quorum_link(lagging, leader).is_some());
    assert!(cluster.quorum_link(lagging, lagging).is_none());

    let writer = connect(&cluster.connect_string_of(leader)).await;
    let reader = connect(&cluster.connect_string_of(lagging)).await;
    let reader_session = reader.session_id();
    let path = unique("lagging");
    bounded(writer.create(&path, b"old", &persistent()))
        .await
        .unwrap();
    bounded(reader.sync(&path)).await.unwrap();
    assert_eq!(read(&reader, &path).await, b"old");
    let states = record_states(&reader);

    let stalled = Instant::now();
    cluster.stall_leader_to(lagging, true).unwrap();
    // The leader and the third member are a quorum: the write commits without the follower.
    bounded(writer.set_data(&path, b"new", None)).await.unwrap();
    assert_eq!(read(&writer, &path).await, b"new");
    // The stalled follower still serves its own, older copy, to a client that stays connected.
    assert_eq!(read(&reader, &path).await, b"old");
    let stale_after = stalled.elapsed();
    assert!(
        stale_after < Duration::from_millis(u64::from(SYNC_LIMIT) * 100),
        "the stale read came within syncLimit ({stale_after:?})"
    );
    assert_eq!(reader.state(), SessionState::SyncConnected);
    assert_eq!(cluster.mode_of(lagging), Some(NodeMode::Follower));
    eprintln!("stale read {stale_after:?} into the stall");

    cluster.stall_leader_to(lagging, false).unwrap();
    eventually("the follower to catch up", || async {
        read(&reader, &path).await == b"new"
    })
    .await;
    eprintln!("caught up {:?} after the stall began", stalled.elapsed());
    assert_eq!(reader.session_id(), reader_session);
    assert_eq!(reader.state(), SessionState::SyncConnected);
    assert!(
        states.lock().unwrap().is_empty(),
        "the reader never left SyncConnected: {:?}",
        states.lock().unwrap()
    );
    assert_eq!(
        cluster.wait_until_serving_async(STEP).await.unwrap(),
        leader
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_stalled_past_sync_limit_drops_its_clients_then_rejoins() {
    if !available("follower_stalled_past_sync_limit_drops_its_clients_then_rejoins") {
        return;
    }
    let _serial = SERIAL.lock().await;
    // 10 ticks of 100 ms: the follower gives up on its leader after a second of silence.
    let cluster = TestingCluster::builder()
        .quorum_through_proxies(true)
        .sync_limit(10)
        .start_async()
        .await
        .unwrap();
    let leader = cluster.wait_until_serving_async(STEP).await.unwrap();
    let lagging = (leader + 2) % 3;
    let reader = connect(&cluster.connect_string_of(lagging)).await;
    let session = reader.session_id();
    let mut state = reader.state_watcher();

    let stalled = Instant::now();
    cluster.stall_leader_to(lagging, true).unwrap();
    bounded(async { while state.changed().await == SessionState::SyncConnected {} }).await;
    let dropped_after = stalled.elapsed();
    eprintln!("stalled follower dropped its client {dropped_after:?} into the stall");
    assert!(
        // The follower's read timeout counts from the last ping it got (the leader pings
        // twice a tick), so allow some slack below the second.
        dropped_after >= Duration::from_millis(500),
        "not long before syncLimit ({dropped_after:?})"
    );
    assert_eq!(reader.state(), SessionState::Disconnected);

    cluster.stall_leader_to(lagging, false).unwrap();
    assert_eq!(
        cluster.wait_until_serving_async(STEP).await.unwrap(),
        leader
    );
    assert_eq!(cluster.mode_of(lagging), Some(NodeMode::Follower));
    bounded(async { while state.changed().await != SessionState::SyncConnected {} }).await;
    assert_eq!(reader.session_id(), session);
    eprintln!(
        "follower serving its client again {:?} after the stall began",
        stalled.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_off_member_drops_its_clients_while_the_others_serve_then_rejoins() {
    if !available("cut_off_member_drops_its_clients_while_the_others_serve_then_rejoins") {
        return;
    }
    let _serial = SERIAL.lock().await;
    let cluster = start_proxied(false).await;
    let leader = cluster.wait_until_serving_async(STEP).await.unwrap();
    let isolated = (leader + 1) % 3;
    let other = (leader + 2) % 3;
    let writer = connect(&cluster.connect_string_of(leader)).await;
    let stranded = connect(&cluster.connect_string_of(isolated)).await;
    let session = stranded.session_id();
    let mut stranded_state = stranded.state_watcher();

    let cut = Instant::now();
    cluster.cut_off(isolated, true).unwrap();
    bounded(async { while stranded_state.changed().await == SessionState::SyncConnected {} }).await;
    eprintln!(
        "client of the cut-off member disconnected {:?} after the cut",
        cut.elapsed()
    );
    assert_eq!(stranded.state(), SessionState::Disconnected);
    // The other two keep the quorum and the leader.
    let path = unique("written-without");
    bounded(writer.create(&path, b"2 of 3", &persistent()))
        .await
        .unwrap();
    assert_eq!(cluster.mode_of(isolated), None);
    assert_eq!(cluster.serving(), {
        let mut two = vec![leader, other];
        two.sort_unstable();
        two
    });
    assert_eq!(cluster.leader(), Some(leader));
    assert!(cluster.is_running(isolated));

    cluster.cut_off(isolated, false).unwrap();
    assert_eq!(
        cluster.wait_until_serving_async(STEP).await.unwrap(),
        leader
    );
    eprintln!(
        "cut-off member serving again {:?} after the cut",
        cut.elapsed()
    );
    assert_eq!(cluster.mode_of(isolated), Some(NodeMode::Follower));
    // Its client comes back into the same session and sees what was written meanwhile.
    bounded(async { while stranded_state.changed().await != SessionState::SyncConnected {} }).await;
    assert_eq!(stranded.session_id(), session);
    bounded(stranded.sync(&path)).await.unwrap();
    assert_eq!(read(&stranded, &path).await, b"2 of 3");

    // The leader can be cut off too: the other two elect a new leader among themselves.
    let cut = Instant::now();
    cluster.cut_off(leader, true).unwrap();
    eventually(
        "the other two to serve without the cut-off leader",
        || async {
            let serving = cluster.serving();
            serving.len() == 2 && !serving.contains(&leader) && cluster.leader().is_some()
        },
    )
    .await;
    let interim = cluster.leader().unwrap();
    eprintln!(
        "cut-off leader {leader} replaced by {interim} {:?} after the cut",
        cut.elapsed()
    );
    assert_eq!(cluster.mode_of(leader), None);
    let during = unique("written-without-the-leader");
    bounded(stranded.create(&during, b"", &persistent()))
        .await
        .unwrap();
    cluster.cut_off(leader, false).unwrap();
    assert_eq!(
        cluster.wait_until_serving_async(STEP).await.unwrap(),
        interim
    );
    assert_eq!(cluster.mode_of(leader), Some(NodeMode::Follower));
    let leader = interim;

    // Kills and restarts work as without proxies: the others elect a leader through theirs.
    let killed = Instant::now();
    cluster.stop(leader);
    let new_leader = cluster.wait_until_serving_async(STEP).await.unwrap();
    assert_ne!(new_leader, leader);
    let elected_after = killed.elapsed();
    cluster.restart_async(leader).await.unwrap();
    assert_eq!(
        cluster.wait_until_serving_async(STEP).await.unwrap(),
        new_leader
    );
    assert_eq!(cluster.serving(), vec![0, 1, 2]);
    eprintln!(
        "leader {leader} killed, {new_leader} elected after {elected_after:?}, \
         {leader} back as a follower after {:?}",
        killed.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_sessions_switch_is_written_and_served() {
    if !available("local_sessions_switch_is_written_and_served") {
        return;
    }
    let _serial = SERIAL.lock().await;
    let cluster = start_proxied(true).await;
    let leader = cluster.wait_until_serving_async(STEP).await.unwrap();
    for i in 0..3 {
        let cfg = std::fs::read_to_string(cluster.data_dir_of(i).parent().unwrap().join("zoo.cfg"))
            .unwrap();
        assert!(cfg.contains("localSessionsEnabled=true\n"), "{cfg}");
        assert!(
            cfg.contains("localSessionsUpgradingEnabled=true\n"),
            "{cfg}"
        );
    }
    let follower = (leader + 1) % 3;
    let client = connect(&cluster.connect_string_of(follower)).await;
    let path = unique("local");
    bounded(client.create(&path, b"", &persistent()))
        .await
        .unwrap();
    // The follower counts the session as local: the leader has not heard of it.
    let before = sessions(cluster.port_of(follower));
    assert_eq!(before, (1, 0), "(local, global) sessions on the follower");
    // An ephemeral node upgrades the local session to a global one, which the leader knows.
    let owned = unique("upgraded");
    bounded(client.create(&owned, b"", &ephemeral()))
        .await
        .unwrap();
    let watcher = connect(&cluster.connect_string_of(leader)).await;
    bounded(watcher.sync(&owned)).await.unwrap();
    let stat = bounded(watcher.check_stat(&owned)).await.unwrap().unwrap();
    assert_eq!(stat.ephemeral_owner, client.session_id().0);
    let after = sessions(cluster.port_of(follower));
    assert_eq!(after, (0, 1), "(local, global) sessions on the follower");
}
