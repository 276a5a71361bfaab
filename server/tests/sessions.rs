//! Sessions on the embedded server, driven by the real `zookeeper-client`: timeout
//! negotiation, close and expiry, re-attach, dropped connections, stop and restart, the port.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::time::Duration;

use common::{
    bounded, connect, connect_with, ephemeral, eventually, persistent, retrying, wait_state,
};
use zk_curator_server::EmbeddedServer;
use zookeeper_client::{Client, Error, EventType, SessionState};

#[tokio::test(flavor = "multi_thread")]
async fn negotiates_timeout_within_bounds() {
    let server = EmbeddedServer::builder()
        .min_session_timeout(Duration::from_millis(1000))
        .max_session_timeout(Duration::from_secs(5))
        .start()
        .await
        .unwrap();
    let low = connect_with(&server, Duration::from_millis(100)).await;
    assert_eq!(low.session_timeout(), Duration::from_millis(1000));
    let high = connect_with(&server, Duration::from_secs(30)).await;
    assert_eq!(high.session_timeout(), Duration::from_secs(5));
    let mid = connect_with(&server, Duration::from_secs(3)).await;
    assert_eq!(mid.session_timeout(), Duration::from_secs(3));
    assert_ne!(low.session_id(), high.session_id());
    assert_eq!(server.session_ids().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn close_removes_ephemerals_and_session() {
    let server = EmbeddedServer::start().await.unwrap();
    let watcher = connect(&server).await;
    let owner = connect(&server).await;
    bounded(owner.create("/eph", b"", &ephemeral()))
        .await
        .unwrap();
    let (stat, watch) = bounded(watcher.check_and_watch_stat("/eph")).await.unwrap();
    assert_eq!(stat.unwrap().ephemeral_owner, owner.session_id().0);
    let id = owner.session_id().0;
    drop(owner);
    let event = bounded(watch.changed()).await;
    assert_eq!(event.event_type, EventType::NodeDeleted);
    assert!(!server.session_ids().contains(&id));
    assert_eq!(
        server.node_paths(),
        ["/", "/zookeeper", "/zookeeper/config", "/zookeeper/quota"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn session_expires_without_traffic() {
    let server = EmbeddedServer::start().await.unwrap();
    let watcher = connect(&server).await;
    let victim = bounded(
        Client::connector()
            .with_session_timeout(Duration::from_millis(600))
            .with_detached()
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    assert_eq!(victim.session_timeout(), Duration::from_millis(600));
    bounded(victim.create("/victim", b"", &ephemeral()))
        .await
        .unwrap();
    let (_, watch) = bounded(watcher.check_and_watch_stat("/victim"))
        .await
        .unwrap();
    let id = victim.session_id().0;
    // Silence the client: the server sees no pings any more.
    server.stall(Duration::from_millis(1500));
    let event = bounded(watch.changed()).await;
    assert_eq!(event.event_type, EventType::NodeDeleted);
    assert!(!server.session_ids().contains(&id));
    wait_state(&victim, SessionState::Expired).await;
    assert_eq!(
        bounded(victim.check_stat("/victim")).await.unwrap_err(),
        Error::SessionExpired
    );
}

/// On a runtime whose clock is paused (tokio's `test-util`), a silent session expires as paused
/// time passes its timeout, and not before: the server reads its clock where its expiry tick
/// waits, tokio's (issue 33). A few real milliseconds.
#[tokio::test(start_paused = true)]
async fn under_a_paused_clock_a_silent_session_expires_with_paused_time() {
    let server = EmbeddedServer::start().await.unwrap();
    let victim = bounded(
        Client::connector()
            .with_session_timeout(Duration::from_secs(2))
            .with_detached()
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    let timeout = victim.session_timeout();
    assert_eq!(timeout, Duration::from_secs(2));
    bounded(victim.create("/victim", b"", &ephemeral()))
        .await
        .unwrap();
    let id = victim.session_id().0;
    let real = std::time::Instant::now();
    // Nothing from the client reaches the server any more.
    server.stall(Duration::from_secs(3600));
    tokio::time::sleep(timeout / 2).await;
    assert!(server.session_ids().contains(&id), "expired too early");
    assert!(server.node_paths().contains(&"/victim".to_owned()));
    // The expiry tick is 100 ms.
    tokio::time::sleep(timeout / 2 + Duration::from_millis(300)).await;
    assert!(
        !server.session_ids().contains(&id),
        "not expired after {:?} of paused time without a word (timeout {timeout:?}; {:?} of \
         real time)",
        timeout + Duration::from_millis(300),
        real.elapsed()
    );
    assert!(!server.node_paths().contains(&"/victim".to_owned()));
}

#[tokio::test(flavor = "multi_thread")]
async fn reattach_keeps_session_and_ephemerals() {
    let server = EmbeddedServer::start().await.unwrap();
    let first = bounded(
        Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .with_detached()
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    bounded(first.create("/kept", b"", &ephemeral()))
        .await
        .unwrap();
    let session = first.session().clone();
    let id = first.session_id();
    let second = bounded(
        Client::connector()
            .with_session(session)
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    assert_eq!(second.session_id(), id);
    let stat = retrying(|| second.check_stat("/kept"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stat.ephemeral_owner, id.0);
    // Our re-attach replaced the first client's connection (as on ZooKeeper, two clients on
    // one session keep taking it from each other); once the first is gone the node is still
    // there.
    // Once the first client's connection is gone (so whatever it sent on
    // its way out, such as a close of the session, has been handled), the
    // node is still there.
    drop(first);
    eventually("the first client's connection closed", || async {
        server.active_connections() == 1
    })
    .await;
    assert!(retrying(|| second.check_stat("/kept"))
        .await
        .unwrap()
        .is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_password_or_unknown_session_is_expired() {
    let server = EmbeddedServer::start().await.unwrap();
    let client = bounded(
        Client::connector()
            .with_detached()
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    let session = client.session().clone();
    assert!(server.expire_session(session.id().0));
    assert!(!server.expire_session(session.id().0));
    let err = bounded(
        Client::connector()
            .with_session(session)
            .connect(&server.connect_string()),
    )
    .await
    .unwrap_err();
    assert_eq!(err, Error::SessionExpired);
    wait_state(&client, SessionState::Expired).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn drop_connections_keeps_sessions() {
    let server = EmbeddedServer::start().await.unwrap();
    let c = connect(&server).await;
    bounded(c.create("/d", b"", &ephemeral())).await.unwrap();
    let id = c.session_id();
    let (_, _, data_watch) = bounded(c.get_and_watch_data("/d")).await.unwrap();
    let (_, child_watch) = bounded(c.list_and_watch_children("/d")).await.unwrap();
    let (_, exist_watch) = bounded(c.check_and_watch_stat("/e")).await.unwrap();
    for _ in 0..3 {
        server.drop_connections();
        assert!(retrying(|| c.check_stat("/d")).await.unwrap().is_some());
    }
    assert_eq!(c.session_id(), id);
    assert_eq!(server.session_ids(), vec![id.0]);
    // The watches were re-armed on every reconnect (setWatches) and still fire.
    let other = connect(&server).await;
    bounded(other.set_data("/d", b"1", None)).await.unwrap();
    bounded(other.create("/e", b"", &persistent()))
        .await
        .unwrap();
    assert_eq!(
        bounded(data_watch.changed()).await.event_type,
        EventType::NodeDataChanged
    );
    assert_eq!(
        bounded(exist_watch.changed()).await.event_type,
        EventType::NodeCreated
    );
    bounded(c.delete("/d", None)).await.unwrap();
    assert_eq!(
        bounded(child_watch.changed()).await.event_type,
        EventType::NodeDeleted
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_and_restart_keep_data_and_sessions() {
    let server = EmbeddedServer::start().await.unwrap();
    let c = connect(&server).await;
    bounded(c.create("/kept", b"", &ephemeral())).await.unwrap();
    server.stop();
    // The client has seen the server go before it comes back.
    eventually("the client to notice the stop", || async {
        c.state() != SessionState::SyncConnected
    })
    .await;
    server.restart().await.unwrap();
    assert!(retrying(|| c.check_stat("/kept")).await.unwrap().is_some());
    assert_eq!(c.state(), SessionState::SyncConnected);
}

#[tokio::test(flavor = "multi_thread")]
async fn listens_on_a_chosen_port_and_refuses_a_taken_one() {
    // Find a port that is free now, then ask the server for exactly it.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let server = EmbeddedServer::builder().port(port).start().await.unwrap();
    assert_eq!(server.port(), port);
    assert_eq!(server.connect_string(), format!("127.0.0.1:{port}"));
    let client = connect(&server).await;
    bounded(client.create("/chosen", b"", &persistent()))
        .await
        .unwrap();
    // The port is ours now: a second server cannot have it.
    assert!(EmbeddedServer::builder().port(port).start().await.is_err());
}
