//! Helpers for the tests that drive the embedded server with the real `zookeeper-client`:
//! a bound on every step, waiting for a condition, retrying across dropped connections,
//! create options and connecting.
// Each test file uses only some of these.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use zk_curator_server::EmbeddedServer;
use zookeeper_client::{Acls, Client, CreateMode, CreateOptions, Error, SessionState};

/// The bound on every single step of a test.
pub const STEP: Duration = Duration::from_secs(10);

/// Awaits `future`, failing the test if it takes longer than [`STEP`].
pub async fn bounded<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(STEP, future)
        .await
        .expect("step timed out")
}

/// Polls `condition` until it holds, failing the test after [`STEP`].
pub async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + STEP;
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Retries an operation that may be caught in flight by a dropped connection.
pub async fn retrying<T, F, Fut>(mut op: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let deadline = Instant::now() + STEP;
    loop {
        match bounded(op()).await {
            Err(Error::ConnectionLoss | Error::Custom(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

/// A persistent node open to anyone.
pub fn persistent() -> CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

/// An ephemeral node open to anyone.
pub fn ephemeral() -> CreateOptions<'static> {
    CreateMode::Ephemeral.with_acls(Acls::anyone_all())
}

/// Connects a client to `server` asking for this session timeout.
pub async fn connect_with(server: &EmbeddedServer, timeout: Duration) -> Client {
    bounded(
        Client::connector()
            .with_session_timeout(timeout)
            .connect(&server.connect_string()),
    )
    .await
    .unwrap()
}

/// Connects a client to `server` with a 10 s session timeout.
pub async fn connect(server: &EmbeddedServer) -> Client {
    connect_with(server, Duration::from_secs(10)).await
}

/// Waits until `client` reports the session state `wanted`.
pub async fn wait_state(client: &Client, wanted: SessionState) {
    let mut states = client.state_watcher();
    eventually(&format!("state {wanted:?}"), || {
        let now = states.peek_state();
        async move { now == wanted }
    })
    .await;
    let _ = states.state();
}

/// `body` with its length in front, as every message of the protocol is sent.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut framed = i32::try_from(body.len())
        .expect("a test frame fits an i32")
        .to_be_bytes()
        .to_vec();
    framed.extend_from_slice(body);
    framed
}

/// A connect request for a new session (10 s timeout), framed: what a plaintext client
/// sends first.
pub fn connect_request() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&0i32.to_be_bytes()); // protocol version
    body.extend_from_slice(&0i64.to_be_bytes()); // last zxid seen
    body.extend_from_slice(&10_000i32.to_be_bytes()); // timeout
    body.extend_from_slice(&0i64.to_be_bytes()); // session id
    body.extend_from_slice(&16i32.to_be_bytes());
    body.extend_from_slice(&[0; 16]); // password
    body.push(0); // read only
    frame(&body)
}
