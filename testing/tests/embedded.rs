//! Tests of the embedded server that need the testing crate: a fault proxy in front of it,
//! and the testing crate's session-expiry helper. The embedded server's own tests are in
//! `server/tests`, whose helpers (`common`) these two use as well.
#![allow(clippy::unwrap_used, missing_docs)]

#[path = "../../server/tests/common/mod.rs"]
mod common;

use common::{bounded, connect, ephemeral, persistent, retrying};
use zk_curator_testing::embedded::EmbeddedServer;
use zk_curator_testing::FaultProxy;
use zookeeper_client::{Client, EventType, SessionState};

#[tokio::test(flavor = "multi_thread")]
async fn expire_session_api_and_helper() {
    let server = EmbeddedServer::start().await.unwrap();
    let client = connect(&server).await;
    bounded(client.create("/mine", b"", &ephemeral()))
        .await
        .unwrap();
    // The testing crate's helper (second connection into the session, then close) works on
    // the embedded server as on the real one.
    bounded(zk_curator_testing::expire_session(
        &server.connect_string(),
        &client,
    ))
    .await
    .unwrap();
    assert_eq!(client.state(), SessionState::Expired);
    let other = connect(&server).await;
    assert!(bounded(other.check_stat("/mine")).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn reconnect_rearms_watches_and_reports_missed_changes() {
    let server = EmbeddedServer::start().await.unwrap();
    let c = connect(&server).await;
    let other = connect(&server).await;
    bounded(c.create("/r", b"", &persistent())).await.unwrap();
    bounded(c.create("/r/changed", b"", &persistent()))
        .await
        .unwrap();
    drop(c);
    // Watch through a proxy whose connections we can freeze and cut.
    let proxy = FaultProxy::start(server.connect_string()).await.unwrap();
    let watcher = bounded(Client::connect(&proxy.connect_string()))
        .await
        .unwrap();
    let (_, _, untouched) = bounded(watcher.get_and_watch_data("/r")).await.unwrap();
    let (_, _, missed) = bounded(watcher.get_and_watch_data("/r/changed"))
        .await
        .unwrap();
    // The watcher's connection is frozen while the change happens, then cut: the notification
    // is lost with the connection, and setWatches on reconnect must report the change.
    proxy.set_paused(true);
    bounded(other.set_data("/r/changed", b"x", None))
        .await
        .unwrap();
    proxy.drop_connections();
    proxy.set_paused(false);
    let event = bounded(missed.changed()).await;
    assert_eq!(event.event_type, EventType::NodeDataChanged);
    assert_eq!(event.path, "/r/changed");
    // The untouched watch was re-armed by setWatches and fires on the next change.
    retrying(|| watcher.check_stat("/r")).await.unwrap();
    bounded(other.set_data("/r", b"y", None)).await.unwrap();
    assert_eq!(
        bounded(untouched.changed()).await.event_type,
        EventType::NodeDataChanged
    );
}
