//! Tests of `expire_session`.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{available, bounded, connect, ephemeral, persistent, shared_server, unique};
use zk_curator_testing::{
    close_granted_session, expire_session, expire_session_within, FaultProxy,
};
use zookeeper_client::{Error as ZkError, SessionState};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_deletes_ephemerals_and_fails_the_client() {
    if !available("expiry_deletes_ephemerals_and_fails_the_client") {
        return;
    }
    let server = shared_server();
    let client = connect(&server.connect_string()).await;
    let observer = connect(&server.connect_string()).await;
    let node = unique("expire-eph");
    bounded(client.create(&node, b"", &ephemeral()))
        .await
        .unwrap();
    assert!(bounded(observer.check_stat(&node)).await.unwrap().is_some());

    let started = Instant::now();
    expire_session(&server.connect_string(), &client)
        .await
        .unwrap();
    eprintln!("expire_session took {:?}", started.elapsed());

    assert_eq!(client.state(), SessionState::Expired);
    assert!(
        bounded(observer.check_stat(&node)).await.unwrap().is_none(),
        "ephemeral survived expiry"
    );
    let err = bounded(client.check_stat("/")).await.unwrap_err();
    assert_eq!(err, ZkError::SessionExpired);
    let err = bounded(client.create(&unique("after-expiry"), b"", &persistent()))
        .await
        .unwrap_err();
    assert_eq!(err, ZkError::SessionExpired);
    assert_eq!(observer.state(), SessionState::SyncConnected);

    // Expiring an expired session is a no-op.
    expire_session(&server.connect_string(), &client)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_of_a_client_behind_a_proxy() {
    if !available("expiry_of_a_client_behind_a_proxy") {
        return;
    }
    let server = shared_server();
    let proxy = FaultProxy::start(server.connect_string()).await.unwrap();
    let client = connect(&proxy.connect_string()).await;
    let node = unique("expire-proxied");
    bounded(client.create(&node, b"", &ephemeral()))
        .await
        .unwrap();
    expire_session(&server.connect_string(), &client)
        .await
        .unwrap();
    assert_eq!(client.state(), SessionState::Expired);
    let observer = connect(&server.connect_string()).await;
    assert!(bounded(observer.check_stat(&node)).await.unwrap().is_none());
}

/// What another process's session needs: the proxy saw the grant, and the
/// grant alone closes the session (the client is never asked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_granted_through_a_proxy_can_be_closed_from_its_grant() {
    if !available("a_session_granted_through_a_proxy_can_be_closed_from_its_grant") {
        return;
    }
    let server = shared_server();
    let proxy = FaultProxy::start(server.connect_string()).await.unwrap();
    let client = connect(&proxy.connect_string()).await;
    let node = unique("expire-granted");
    bounded(client.create(&node, b"", &ephemeral()))
        .await
        .unwrap();
    let grants = proxy.granted_sessions();
    assert_eq!(grants.len(), 1, "{grants:?}");
    assert_eq!(grants[0].session_id, client.session_id().0);
    assert!(!grants[0].password.is_empty());
    // A wrong password closes nothing: the server refuses the handshake
    // (session id 0 in its answer), which counts as "not known".
    let mut forged = grants[0].clone();
    forged
        .password
        .iter_mut()
        .for_each(|b| *b = b.wrapping_add(1));
    close_granted_session(&server.connect_string(), &forged, Duration::from_secs(5))
        .await
        .unwrap();
    let observer = connect(&server.connect_string()).await;
    assert!(bounded(observer.check_stat(&node)).await.unwrap().is_some());
    assert_eq!(client.state(), SessionState::SyncConnected);

    close_granted_session(&server.connect_string(), &grants[0], Duration::from_secs(5))
        .await
        .unwrap();
    assert!(
        bounded(observer.check_stat(&node)).await.unwrap().is_none(),
        "the ephemeral survived"
    );
    let mut state = client.state_watcher();
    bounded(async {
        while state.peek_state() != SessionState::Expired {
            state.changed().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_client_times_out_but_server_side_is_closed() {
    if !available("partitioned_client_times_out_but_server_side_is_closed") {
        return;
    }
    let server = shared_server();
    let proxy = FaultProxy::start(server.connect_string()).await.unwrap();
    let client = connect(&proxy.connect_string()).await;
    let node = unique("expire-partitioned");
    bounded(client.create(&node, b"", &ephemeral()))
        .await
        .unwrap();
    proxy.set_paused(true);
    let err = expire_session_within(&server.connect_string(), &client, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(err, zk_curator_testing::Error::Timeout { .. }),
        "{err}"
    );
    let observer = connect(&server.connect_string()).await;
    assert!(bounded(observer.check_stat(&node)).await.unwrap().is_none());
    // Once the partition heals, the client learns about the expiry.
    proxy.set_paused(false);
    let mut state = client.state_watcher();
    bounded(async {
        while state.state() != SessionState::Expired {
            state.changed().await;
        }
    })
    .await;
}
