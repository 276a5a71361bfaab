//! Shared harness for the integration tests: one test server per test binary
//! (the embedded server by default, a real ZooKeeper with
//! `ZK_TEST_SERVER=real`), a unique path per test, and small polling helpers.
#![allow(dead_code, clippy::unwrap_used)]

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use zk_curator::framework::zk;
use zk_curator::Framework;
use zk_curator_testing::{Backend, TestingServer};

/// How long tests wait for anything that should happen promptly.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The binary's shared server, or `None` (with a printed notice) when the
/// real backend was asked for but ZooKeeper is not installed.
pub fn server() -> Option<&'static TestingServer> {
    static SERVER: OnceLock<Option<TestingServer>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            if !real_server_available() {
                return None;
            }
            Some(TestingServer::start().expect("start the test server"))
        })
        .as_ref()
}

/// Whether the chosen backend can be started. With `ZK_REQUIRE_REAL=1` (as
/// CI sets it) a missing ZooKeeper fails the test instead of skipping it.
fn real_server_available() -> bool {
    let backend = Backend::from_env().expect("ZK_TEST_SERVER");
    if backend.is_available() {
        return true;
    }
    if std::env::var("ZK_REQUIRE_REAL").is_ok_and(|v| v == "1") {
        panic!("ZK_REQUIRE_REAL=1 but ZooKeeper is not installed: apt-get install -y zookeeper");
    }
    eprintln!("NOTICE: ZooKeeper is not installed (apt-get install -y zookeeper); real-server test skipped");
    false
}

/// A fresh server of the test's own (for outage tests).
pub async fn own_server() -> Option<TestingServer> {
    if !real_server_available() {
        return None;
    }
    Some(
        TestingServer::start_async()
            .await
            .expect("start the test server"),
    )
}

/// A path no other test uses.
pub fn unique_path(name: &str) -> String {
    format!(
        "/tests/{name}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// A started, connected framework on `connect`.
pub async fn framework(connect: &str) -> Framework {
    framework_with(connect, |b| b).await
}

/// A started, connected framework, with extra builder settings.
pub async fn framework_with(
    connect: &str,
    configure: impl FnOnce(zk_curator::FrameworkBuilder) -> zk_curator::FrameworkBuilder,
) -> Framework {
    let builder = Framework::builder()
        .connect_string(connect)
        .session_timeout(Duration::from_secs(6))
        .connection_timeout(Duration::from_secs(10));
    let framework = configure(builder).build().unwrap();
    framework.start().unwrap();
    framework.block_until_connected(PATIENCE).await.unwrap();
    framework
}

/// A plain zookeeper-client session, for looking at the server directly.
pub async fn raw_client(connect: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(connect)
        .await
        .unwrap()
}

/// The children of `path` (empty if it does not exist).
pub async fn children(client: &zk::Client, path: &str) -> Vec<String> {
    match client.list_children(path).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(err) => panic!("list {path}: {err}"),
    }
}

/// Polls `check` every 50 ms until it is true; false after `limit`.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Logs to the test output when `RUST_LOG` is set.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}
