//! Helpers shared by this crate's integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::ZooKeeperServer;
use zookeeper_client::{Acls, Client, CreateMode, CreateOptions};

/// Upper bound for any single awaited step in these tests.
pub const STEP: Duration = Duration::from_secs(20);

/// Whether ZooKeeper can run here: the testing crate's one rule (a missing ZooKeeper fails
/// `test` naming what to install, unless `ZK_SKIP_MISSING` asks to skip it with a notice).
pub fn available(test: &str) -> bool {
    Prerequisite::ZooKeeper.check(test)
}

/// One server shared by every test of a test binary; never dropped, so it also exercises the
/// kill-on-exit wrapper.
pub fn shared_server() -> &'static ZooKeeperServer {
    static SERVER: OnceLock<ZooKeeperServer> = OnceLock::new();
    SERVER.get_or_init(|| ZooKeeperServer::start().unwrap())
}

/// A path unique within this test process.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "/{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

pub fn persistent() -> CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

pub fn ephemeral() -> CreateOptions<'static> {
    CreateMode::Ephemeral.with_acls(Acls::anyone_all())
}

pub fn ephemeral_sequential() -> CreateOptions<'static> {
    CreateMode::EphemeralSequential.with_acls(Acls::anyone_all())
}

/// Connects with a session timeout long enough to survive the faults the tests inject.
pub async fn connect(connect_string: &str) -> Client {
    bounded(
        Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(connect_string),
    )
    .await
    .unwrap()
}

/// Awaits `future`, failing the test after [`STEP`].
pub async fn bounded<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(STEP, future)
        .await
        .expect("step timed out")
}

/// Polls `condition` every 20 ms until it holds, failing the test after [`STEP`].
pub async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + STEP;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
