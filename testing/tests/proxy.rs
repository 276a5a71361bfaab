//! Tests of `FaultProxy` against a real server.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{
    available, bounded, connect, ephemeral, ephemeral_sequential, eventually, persistent,
    shared_server, unique,
};
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::{FaultProxy, RequestMatcher};
use zookeeper_client::SessionState;

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
async fn client_works_through_the_proxy() {
    if !available("client_works_through_the_proxy") {
        return;
    }
    let server = shared_server();
    let proxy = FaultProxy::start(server.connect_string()).await.unwrap();
    assert_eq!(proxy.upstream(), server.address());
    let client = connect(&proxy.connect_string()).await;
    assert_eq!(proxy.accepted_connections(), 1);
    assert_eq!(proxy.active_connections(), 1);
    let root = unique("proxied");
    bounded(client.create(&root, b"hello", &persistent()))
        .await
        .unwrap();
    // Larger than one read, so frames get split across reads.
    let big = vec![7u8; 300 * 1024];
    bounded(client.set_data(&root, &big, None)).await.unwrap();
    for i in 0..50 {
        bounded(client.create(&format!("{root}/n{i}"), b"", &persistent()))
            .await
            .unwrap();
    }
    let (data, _) = bounded(client.get_data(&root)).await.unwrap();
    assert_eq!(data, big);
    let mut children = bounded(client.list_children(&root)).await.unwrap();
    children.sort();
    assert_eq!(children.len(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connections_reconnect_into_the_same_session() {
    if !available("dropped_connections_reconnect_into_the_same_session") {
        return;
    }
    let server = shared_server();
    let proxy = FaultProxy::start(server.connect_string()).await.unwrap();
    let client = connect(&proxy.connect_string()).await;
    let session = client.session_id();
    let node = unique("proxied-eph");
    bounded(client.create(&node, b"", &ephemeral()))
        .await
        .unwrap();

    let mut state = client.state_watcher();
    proxy.drop_connections();
    assert_eq!(bounded(state.changed()).await, SessionState::Disconnected);
    wait_connected(&client).await;
    assert_eq!(proxy.accepted_connections(), 2);

    let stat = bounded(client.check_stat(&node))
        .await
        .unwrap()
        .expect("ephemeral node lost");
    assert_eq!(stat.ephemeral_owner, session.0);
    let observer = connect(&server.connect_string()).await;
    assert!(bounded(observer.check_stat(&node)).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_create_reply_still_creates_the_node_once() {
    if !available("lost_create_reply_still_creates_the_node_once") {
        return;
    }
    let server = shared_server();
    let proxy = FaultProxy::start(server.connect_string()).await.unwrap();
    let client = connect(&proxy.connect_string()).await;
    let session = client.session_id();
    let root = unique("lost-reply");
    bounded(client.create(&root, b"", &persistent()))
        .await
        .unwrap();

    let fault = proxy.lose_reply_to_next(RequestMatcher::creates().path_contains("_c_"));
    // Not matching: no "_c_" in the path.
    bounded(client.create(&format!("{root}/plain"), b"", &persistent()))
        .await
        .unwrap();
    assert!(!fault.fired());

    let prefix = format!("{root}/_c_0f1e-lock-");
    let result = bounded(client.create(&prefix, b"", &ephemeral_sequential())).await;
    let err = result.expect_err("the reply was lost, so the create cannot succeed");
    eprintln!("create whose reply was lost failed with {err:?}");
    assert_eq!(err, zookeeper_client::Error::ConnectionLoss);

    let lost = fault
        .wait(Duration::from_secs(5))
        .await
        .expect("fault did not fire");
    assert!(fault.fired());
    assert_eq!(lost.opcode, opcode::CREATE2);
    assert_eq!(lost.error_code, 0, "the server applied the create");
    assert!(lost.path.as_deref().unwrap().starts_with(&prefix));

    // The node exists exactly once, owned by the client's session.
    let observer = connect(&server.connect_string()).await;
    let children = bounded(observer.list_children(&root)).await.unwrap();
    let locks: Vec<_> = children
        .iter()
        .filter(|child| child.starts_with("_c_0f1e-lock-"))
        .collect();
    assert_eq!(locks.len(), 1, "{children:?}");
    let lock = format!("{root}/{}", locks[0]);

    wait_connected(&client).await;
    let stat = bounded(client.check_stat(&lock))
        .await
        .unwrap()
        .expect("lock node missing");
    assert_eq!(
        stat.ephemeral_owner, session.0,
        "client moved to another session"
    );
    assert_eq!(proxy.accepted_connections(), 2);

    // One-shot: the next matching create works normally.
    bounded(client.create(&prefix, b"", &ephemeral_sequential()))
        .await
        .unwrap();
    assert_eq!(
        bounded(observer.list_children(&root)).await.unwrap().len(),
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_delete_reply_by_opcode_only() {
    if !available("lost_delete_reply_by_opcode_only") {
        return;
    }
    let server = shared_server();
    let proxy = FaultProxy::start(server.connect_string()).await.unwrap();
    let client = connect(&proxy.connect_string()).await;
    let node = unique("lost-delete");
    bounded(client.create(&node, b"", &persistent()))
        .await
        .unwrap();
    let fault = proxy.lose_reply_to_next(RequestMatcher::deletes());
    let err = bounded(client.delete(&node, None)).await.unwrap_err();
    assert_eq!(err, zookeeper_client::Error::ConnectionLoss);
    assert!(fault.wait(Duration::from_secs(5)).await.is_some());
    wait_connected(&client).await;
    assert!(bounded(client.check_stat(&node)).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_proxy_holds_traffic_until_resumed() {
    if !available("paused_proxy_holds_traffic_until_resumed") {
        return;
    }
    let server = shared_server();
    let proxy = FaultProxy::start(server.connect_string()).await.unwrap();
    let client = connect(&proxy.connect_string()).await;
    let node = unique("paused");

    // A second, unpaused proxy to the same server is the control: whatever
    // goes through it after the paused create was sent shows how far an
    // unpaused path would have got.
    let control_proxy = FaultProxy::start(server.connect_string()).await.unwrap();
    let observer = connect(&control_proxy.connect_string()).await;
    let marker = unique("paused-marker");

    proxy.blackhole(true);
    assert!(proxy.is_paused());
    // zookeeper-client sends at call time; the future only awaits the reply.
    let create = client.create(&node, b"", &persistent());
    // The control request, issued after the create, has gone all the way
    // through the server: the create would have too, were it not held.
    let (marker_stat, _) = bounded(observer.create(&marker, b"", &persistent()))
        .await
        .unwrap();
    assert!(
        bounded(observer.check_stat(&node)).await.unwrap().is_none(),
        "request leaked through a paused proxy"
    );

    // A new connection is accepted but held.
    let held = tokio::spawn({
        let address = proxy.connect_string();
        async move {
            zookeeper_client::Client::connector()
                .with_session_timeout(Duration::from_secs(10))
                .connect(&address)
                .await
        }
    });
    eventually("held connection to be accepted", || async {
        proxy.accepted_connections() == 2
    })
    .await;
    // The control: a connection opened after the held one was accepted,
    // through the unpaused proxy, completes its handshake; the held one,
    // were it forwarded, would have had as long.
    let control = connect(&control_proxy.connect_string()).await;
    assert!(
        !held.is_finished(),
        "a paused proxy let a new connection through"
    );

    let resumed = Instant::now();
    proxy.set_paused(false);
    bounded(create).await.unwrap();
    let held = bounded(held).await.unwrap().unwrap();
    eprintln!(
        "held traffic completed {:?} after resuming",
        resumed.elapsed()
    );
    assert!(bounded(held.check_stat(&node)).await.unwrap().is_some());
    // Whatever the timing, the create reached the server only after the
    // control request that was issued after it: it was held.
    let stat = bounded(observer.check_stat(&node)).await.unwrap().unwrap();
    assert!(
        stat.czxid > marker_stat.czxid,
        "the paused create was applied (zxid {}) before the later control request (zxid {})",
        stat.czxid,
        marker_stat.czxid
    );
    drop(control);
}
