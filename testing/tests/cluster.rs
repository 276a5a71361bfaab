//! Tests of `TestingCluster`: a 3-node real ZooKeeper ensemble forms, replicates writes, elects
//! a new leader when the leader is killed (a client on the full connect string keeps its
//! session), takes restarted nodes back, and leaves no JVM behind.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{available, bounded, connect, ephemeral, persistent, unique, STEP};
use zk_curator_testing::{NodeMode, TestingCluster};
use zookeeper_client::SessionState;

/// Three JVMs per test are plenty for a 2-core machine: the tests of this file run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn process_exists(pid: u32) -> bool {
    let out = Command::new("ps")
        .args(["-o", "stat=", "-p", &pid.to_string()])
        .output()
        .unwrap();
    let stat = String::from_utf8_lossy(&out.stdout);
    !stat.trim().is_empty() && !stat.trim().starts_with('Z')
}

async fn start_cluster() -> TestingCluster {
    let started = Instant::now();
    let cluster = TestingCluster::start_default_async().await.unwrap();
    eprintln!(
        "3-node cluster serving after {:?}: {}",
        started.elapsed(),
        cluster.connect_string()
    );
    cluster
}

async fn wait_connected(client: &zookeeper_client::Client) {
    let mut state = client.state_watcher();
    bounded(async {
        while state.state() != SessionState::SyncConnected {
            state.changed().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensemble_forms_and_replicates_writes() {
    if !available("ensemble_forms_and_replicates_writes") {
        return;
    }
    let _serial = SERIAL.lock().await;
    let cluster = start_cluster().await;
    assert_eq!(cluster.size(), 3);
    let connect_string = cluster.connect_string();
    let hosts: Vec<&str> = connect_string.split(',').collect();
    assert_eq!(hosts.len(), 3, "{connect_string}");
    for (i, host) in hosts.iter().enumerate() {
        assert_eq!(*host, cluster.connect_string_of(i));
        assert_eq!(*host, format!("127.0.0.1:{}", cluster.port_of(i)));
        assert!(cluster.is_running(i));
        assert!(cluster.pid_of(i).is_some());
        let myid = std::fs::read_to_string(cluster.data_dir_of(i).join("myid")).unwrap();
        assert_eq!(myid.trim(), (i + 1).to_string());
    }
    let modes: Vec<_> = (0..3).map(|i| cluster.mode_of(i)).collect();
    assert_eq!(
        modes
            .iter()
            .filter(|m| **m == Some(NodeMode::Leader))
            .count(),
        1,
        "{modes:?}"
    );
    assert_eq!(
        modes
            .iter()
            .filter(|m| **m == Some(NodeMode::Follower))
            .count(),
        2,
        "{modes:?}"
    );
    let leader = cluster.leader().unwrap();
    assert_eq!(modes[leader], Some(NodeMode::Leader));
    assert_eq!(cluster.serving(), vec![0, 1, 2]);

    // Write through node 0 alone, read through node 2 alone after a sync.
    let writer = connect(&cluster.connect_string_of(0)).await;
    let reader = connect(&cluster.connect_string_of(2)).await;
    let path = unique("replicated");
    bounded(writer.create(&path, b"written on node 0", &persistent()))
        .await
        .unwrap();
    bounded(reader.sync(&path)).await.unwrap();
    let (data, _) = bounded(reader.get_data(&path)).await.unwrap();
    assert_eq!(data, b"written on node 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_leader_is_replaced_and_sessions_survive_then_it_rejoins() {
    if !available("killed_leader_is_replaced_and_sessions_survive_then_it_rejoins") {
        return;
    }
    let _serial = SERIAL.lock().await;
    let cluster = start_cluster().await;
    let client = connect(&cluster.connect_string()).await;
    let session = client.session_id();
    let path = unique("survivor");
    bounded(client.create(&path, b"", &ephemeral()))
        .await
        .unwrap();

    let old_leader = cluster.leader().unwrap();
    let old_pid = cluster.pid_of(old_leader).unwrap();
    let killed = Instant::now();
    cluster.stop(old_leader);
    assert!(!cluster.is_running(old_leader));
    assert_eq!(cluster.pid_of(old_leader), None);
    assert_eq!(cluster.mode_of(old_leader), None);
    assert!(!process_exists(old_pid), "the killed JVM {old_pid} is gone");

    let new_leader = cluster.wait_until_serving_async(STEP).await.unwrap();
    eprintln!(
        "new leader {new_leader} (was {old_leader}) serving {:?} after the kill",
        killed.elapsed()
    );
    assert_ne!(new_leader, old_leader);
    assert_eq!(cluster.leader(), Some(new_leader));
    assert_eq!(cluster.serving().len(), 2);

    // The client on the full connect string reconnects to a survivor with the same session.
    wait_connected(&client).await;
    eprintln!("client reconnected {:?} after the kill", killed.elapsed());
    assert_eq!(client.session_id(), session);
    let stat = bounded(client.check_stat(&path))
        .await
        .unwrap()
        .expect("the ephemeral node survives the fail-over");
    assert_eq!(stat.ephemeral_owner, session.0);
    // Seen from another node too.
    let survivor = (0..3)
        .find(|&i| i != old_leader && i != new_leader)
        .unwrap();
    let other = connect(&cluster.connect_string_of(survivor)).await;
    bounded(other.sync(&path)).await.unwrap();
    let stat = bounded(other.check_stat(&path)).await.unwrap().unwrap();
    assert_eq!(stat.ephemeral_owner, session.0);

    // Writes go on with two of three nodes.
    let during = unique("written-with-two");
    bounded(client.create(&during, b"2 of 3", &persistent()))
        .await
        .unwrap();

    // The old leader comes back on its port, with its data, as a follower.
    let restarted = Instant::now();
    cluster.restart_async(old_leader).await.unwrap();
    eprintln!(
        "node {old_leader} serving again {:?} after its restart",
        restarted.elapsed()
    );
    assert!(cluster.is_running(old_leader));
    assert_ne!(cluster.pid_of(old_leader), Some(old_pid));
    assert_eq!(
        cluster.wait_until_serving_async(STEP).await.unwrap(),
        new_leader
    );
    assert_eq!(cluster.serving(), vec![0, 1, 2]);
    assert_eq!(cluster.mode_of(old_leader), Some(NodeMode::Follower));
    let back = connect(&cluster.connect_string_of(old_leader)).await;
    bounded(back.sync(&during)).await.unwrap();
    let (data, _) = bounded(back.get_data(&during)).await.unwrap();
    assert_eq!(data, b"2 of 3");
    let stat = bounded(back.check_stat(&path)).await.unwrap().unwrap();
    assert_eq!(stat.ephemeral_owner, session.0);
    assert_eq!(client.state(), SessionState::SyncConnected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_all_kills_every_jvm_and_restart_all_keeps_the_data() {
    if !available("stop_all_kills_every_jvm_and_restart_all_keeps_the_data") {
        return;
    }
    let _serial = SERIAL.lock().await;
    let cluster = start_cluster().await;
    let client = connect(&cluster.connect_string()).await;
    let path = unique("kept");
    bounded(client.create(&path, b"kept", &persistent()))
        .await
        .unwrap();
    let pids: Vec<u32> = (0..3).map(|i| cluster.pid_of(i).unwrap()).collect();
    let ports: Vec<u16> = (0..3).map(|i| cluster.port_of(i)).collect();

    cluster.stop_all();
    for (i, pid) in pids.iter().enumerate() {
        assert!(!process_exists(*pid), "JVM of node {i} ({pid}) still alive");
        assert!(!cluster.is_running(i));
    }
    assert_eq!(cluster.leader(), None);
    assert!(cluster.serving().is_empty());
    assert!(matches!(
        cluster.wait_until_serving(Duration::ZERO),
        Err(zk_curator_testing::Error::Timeout { .. })
    ));

    let restarted = Instant::now();
    cluster.restart_all_async().await.unwrap();
    eprintln!(
        "whole cluster serving {:?} after restart_all",
        restarted.elapsed()
    );
    assert_eq!(cluster.serving(), vec![0, 1, 2]);
    assert!(cluster.leader().is_some());
    for (i, port) in ports.iter().enumerate() {
        assert_eq!(cluster.port_of(i), *port);
    }
    wait_connected(&client).await;
    let (data, _) = bounded(client.get_data(&path)).await.unwrap();
    assert_eq!(data, b"kept");

    // Dropping the cluster kills every JVM.
    let pids: Vec<u32> = (0..3).map(|i| cluster.pid_of(i).unwrap()).collect();
    let dir = cluster.data_dir_of(0);
    drop(cluster);
    for pid in pids {
        assert!(!process_exists(pid), "JVM {pid} survived the drop");
    }
    assert!(!dir.exists(), "the cluster's directory is removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_node_restart_times_out_without_a_quorum_and_two_nodes_form_one() {
    if !available("lone_node_restart_times_out_without_a_quorum_and_two_nodes_form_one") {
        return;
    }
    let _serial = SERIAL.lock().await;
    // Starts and the quorum's restart get the default startup timeout (JVMs
    // start slowly on a busy machine); only the restart expected to fail is
    // cut short.
    let mut cluster = TestingCluster::builder().start_async().await.unwrap();
    cluster.stop_all();
    // One node of three cannot serve alone: the restart fails within the startup timeout and
    // leaves nothing running.
    cluster.set_startup_timeout(Duration::from_secs(3));
    let err = cluster.restart_async(0).await.unwrap_err();
    assert!(
        matches!(err, zk_curator_testing::Error::StartTimeout { .. }),
        "{err}"
    );
    assert!(!cluster.is_running(0));
    // Two of three are a quorum.
    cluster.set_startup_timeout(Duration::from_secs(30));
    cluster.restart_nodes_async(&[0, 2]).await.unwrap();
    let leader = cluster.wait_until_serving_async(STEP).await.unwrap();
    assert!(leader == 0 || leader == 2, "{leader}");
    assert_eq!(cluster.serving(), vec![0, 2]);
}
