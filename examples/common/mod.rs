//! The start-up every example shares: logging, a server to talk to, and a
//! connected framework per "process". (Not an example itself: a module the
//! examples include with `mod common;`.)

#![allow(dead_code)] // each example uses what it needs

use std::time::Duration;

use zk_curator::Framework;
use zk_curator_testing::TestingServer;

/// The error type of the examples' `main`s and workers.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Logs warnings (and what `RUST_LOG` asks for, as `target=level` pairs
/// and a default level, e.g. `debug,zookeeper_client=warn`).
pub fn init_tracing() {
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let default = || {
        Targets::new()
            .with_default(tracing::Level::WARN)
            .with_target("zookeeper_client", tracing::Level::ERROR)
    };
    let filter = match std::env::var("RUST_LOG") {
        Err(_) => default(),
        Ok(directives) => directives.parse::<Targets>().unwrap_or_else(|err| {
            eprintln!("RUST_LOG={directives:?} not understood ({err}); logging warnings only");
            default()
        }),
    };
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer())
        .with(filter)
        .init();
}

/// `ZK_CONNECT`, or else a throw-away test server (the embedded one; a real
/// ZooKeeper with `ZK_TEST_SERVER=real`), which stops when the returned
/// handle is dropped: keep it until the end of `main`.
pub async fn server() -> Result<(String, Option<TestingServer>), BoxError> {
    let (connect, server) = zk_curator_testing::connect_string_or_start().await?;
    match &server {
        Some(server) => println!(
            "ZK_CONNECT not set: started a test server ({}) on {connect}",
            server.backend()
        ),
        None => println!("using the ensemble at {connect}"),
    }
    Ok((connect, server))
}

/// A started framework with a session of its own (like a separate
/// process), connected within 20 s.
pub async fn connected(connect: &str, session_timeout: Duration) -> Result<Framework, BoxError> {
    let framework = Framework::builder()
        .connect_string(connect)
        .session_timeout(session_timeout)
        .build()?;
    framework.start()?;
    framework
        .block_until_connected(Duration::from_secs(20))
        .await?;
    Ok(framework)
}
