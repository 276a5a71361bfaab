//! A server started without a listener, serving connections its caller accepted (as a
//! simulated network hands them over): an in-memory duplex pipe spoken to byte by byte, and
//! TCP streams from the test's own listener spoken to by the real `zookeeper-client`. Each is
//! counted, limited and dropped like a connection the server accepted itself.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{bounded, connect_request, eventually, frame, persistent, retrying};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::TcpListener;
use zk_curator_server::{EmbeddedServer, Error};
use zookeeper_client as zk;

/// Where the tests' pipes claim to come from.
fn peer() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 2], 40_000))
}

/// An in-memory connection: the test's end, and the end handed to the server.
fn pipe() -> (DuplexStream, DuplexStream) {
    tokio::io::duplex(64 * 1024)
}

/// A `getData` of `/` without a watch, framed.
fn get_root_request(xid: i32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&xid.to_be_bytes());
    body.extend_from_slice(&4i32.to_be_bytes()); // getData
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(b"/");
    body.push(0);
    frame(&body)
}

/// Reads one frame's body.
async fn read_frame<R: AsyncRead + Unpin>(stream: &mut R) -> Vec<u8> {
    let mut len = [0u8; 4];
    bounded(stream.read_exact(&mut len)).await.unwrap();
    let mut body = vec![0u8; usize::try_from(i32::from_be_bytes(len)).unwrap()];
    bounded(stream.read_exact(&mut body)).await.unwrap();
    body
}

/// Reads everything until the server closes its end.
async fn read_to_close<R: AsyncRead + Unpin>(stream: &mut R) -> Vec<u8> {
    let mut read = Vec::new();
    bounded(stream.read_to_end(&mut read)).await.unwrap();
    read
}

/// Sends a four-letter word on a fresh pipe handed to `server` and returns the answer.
async fn four_letter(server: &EmbeddedServer, word: &[u8; 4]) -> String {
    let (mut ours, theirs) = pipe();
    assert!(server.serve_connection(theirs, peer()));
    bounded(ours.write_all(word)).await.unwrap();
    String::from_utf8(read_to_close(&mut ours).await).unwrap()
}

#[tokio::test]
async fn a_duplex_pipe_is_served_counted_and_dropped() {
    let address = SocketAddr::from(([10, 0, 0, 1], 2181));
    let server = EmbeddedServer::builder()
        .start_without_listener(address)
        .unwrap();
    assert_eq!(server.address(), address);
    assert_eq!(server.connect_string(), "10.0.0.1:2181");
    assert_eq!(four_letter(&server, b"ruok").await, "imok");
    assert!(four_letter(&server, b"conf")
        .await
        .contains("clientPort=2181\n"));

    let (mut ours, theirs) = pipe();
    assert!(server.serve_connection(theirs, peer()));
    assert_eq!(server.active_connections(), 1);
    bounded(ours.write_all(&connect_request())).await.unwrap();
    let answer = read_frame(&mut ours).await;
    // protocol version, timeout, then the session id.
    let session = i64::from_be_bytes(answer[8..16].try_into().unwrap());
    assert!(session > 0, "{session:#x}");
    assert_eq!(server.session_ids(), vec![session]);
    bounded(ours.write_all(&get_root_request(7))).await.unwrap();
    let reply = read_frame(&mut ours).await;
    assert_eq!(i32::from_be_bytes(reply[..4].try_into().unwrap()), 7); // xid
    assert_eq!(i32::from_be_bytes(reply[12..16].try_into().unwrap()), 0); // error

    server.drop_connections();
    assert_eq!(server.active_connections(), 0);
    assert!(read_to_close(&mut ours).await.is_empty());
    // The session outlives its connection, as for a connection the server accepted.
    assert_eq!(server.session_ids(), vec![session]);
}

#[tokio::test]
async fn handed_connections_obey_the_limit_stop_and_restart() {
    let server = EmbeddedServer::builder()
        .max_connections(1)
        .start_without_listener(SocketAddr::from(([10, 0, 0, 1], 2181)))
        .unwrap();
    let (mut held, theirs) = pipe();
    assert!(server.serve_connection(theirs, peer()));
    // Over the limit: refused, and the server's end dropped at once.
    let (mut refused, theirs) = pipe();
    assert!(!server.serve_connection(theirs, peer()));
    assert!(read_to_close(&mut refused).await.is_empty());
    assert_eq!(server.active_connections(), 1);

    // Stopped: the held connection is closed and new ones are refused.
    server.stop();
    assert_eq!(server.active_connections(), 0);
    assert!(read_to_close(&mut held).await.is_empty());
    let (mut refused, theirs) = pipe();
    assert!(!server.serve_connection(theirs, peer()));
    assert!(read_to_close(&mut refused).await.is_empty());

    // Restarted: nothing to bind, and connections are served again.
    bounded(server.restart()).await.unwrap();
    assert_eq!(four_letter(&server, b"ruok").await, "imok");
}

#[tokio::test]
async fn the_real_client_through_the_tests_own_listener() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = Arc::new(
        EmbeddedServer::builder()
            .start_without_listener(address)
            .unwrap(),
    );
    let accepted = Arc::new(AtomicUsize::new(0));
    let acceptor = tokio::spawn({
        let (server, accepted) = (server.clone(), accepted.clone());
        async move {
            loop {
                let Ok((stream, peer)) = listener.accept().await else {
                    continue;
                };
                accepted.fetch_add(1, Ordering::SeqCst);
                server.serve_connection(stream, peer);
            }
        }
    });

    let client = bounded(zk::Client::connect(&server.connect_string()))
        .await
        .unwrap();
    bounded(client.create("/handed", b"over", &persistent()))
        .await
        .unwrap();
    let (data, _) = bounded(client.get_data("/handed")).await.unwrap();
    assert_eq!(data, b"over");
    assert_eq!(server.active_connections(), 1);
    assert_eq!(server.session_ids(), vec![client.session_id().0]);

    // Dropped: the client loses its connection, dials the test's listener again, and is
    // served in its old session.
    server.drop_connections();
    assert_eq!(server.active_connections(), 0);
    eventually("the client to reconnect", || {
        let reconnected = accepted.load(Ordering::SeqCst) >= 2;
        async move { reconnected }
    })
    .await;
    let (data, _) = retrying(|| client.get_data("/handed")).await.unwrap();
    assert_eq!(data, b"over");
    assert_eq!(server.active_connections(), 1);
    assert_eq!(server.session_ids(), vec![client.session_id().0]);
    acceptor.abort();
}

#[tokio::test]
async fn starting_without_a_listener_checks_the_settings() {
    let address = SocketAddr::from(([10, 0, 0, 1], 2181));
    let err = EmbeddedServer::builder()
        .max_connections(0)
        .start_without_listener(address)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
    let err = EmbeddedServer::builder()
        .tick_time(Duration::ZERO)
        .start_without_listener(address)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
}

#[test]
fn starting_without_a_listener_outside_a_runtime_is_an_error() {
    let err = EmbeddedServer::builder()
        .start_without_listener(SocketAddr::from(([10, 0, 0, 1], 2181)))
        .unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
}
