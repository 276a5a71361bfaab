//! Multi-lock: take two locks as one, all or nothing, in a deadlock-free
//! order. Two workers, each its own ZooKeeper session, want the same two
//! accounts but name them in opposite orders; the multi-lock always takes
//! them in ascending path order, so they take turns instead of deadlocking.
//!
//! With `ZK_CONNECT` set (e.g. `127.0.0.1:2181`) it uses that ensemble;
//! otherwise it starts a throw-away ZooKeeper on a free loopback port.
//!
//! Run: `cargo run -p examples --example multi_lock`

mod common;

use std::time::Duration;

use zk_curator::recipes::InterProcessMultiLock;

use common::BoxError;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    common::init_tracing();

    // Keep the server (if we started one) alive until the end of main.
    // ZK_CONNECT, or a throw-away test server kept alive until the end.
    let (connect, _server) = common::server().await?;

    let base = format!("/multi-lock-example/{}", std::process::id());
    let alice = format!("{base}/accounts/alice");
    let bob = format!("{base}/accounts/bob");

    let first = tokio::spawn(worker(
        "alice->bob",
        connect.clone(),
        vec![alice.clone(), bob.clone()],
    ));
    let second = tokio::spawn(worker("bob->alice", connect, vec![bob, alice]));
    first.await??;
    second.await??;
    println!("both transfers done, no deadlock");
    Ok(())
}

async fn worker(name: &'static str, connect: String, paths: Vec<String>) -> Result<(), BoxError> {
    // Each worker is its own ZooKeeper session, like a separate process.
    let framework = common::connected(&connect, Duration::from_secs(10)).await?;

    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let accounts = InterProcessMultiLock::from_paths(framework.clone(), &paths)?;
    for round in 0..3 {
        if !accounts.acquire_timeout(Duration::from_secs(10)).await? {
            return Err(format!("{name}: could not get both accounts in time").into());
        }
        // Whatever order they were asked in, both are taken alice first.
        println!(
            "{name} (round {round}) holds {:?}, taken in that order (asked for {:?})",
            accounts.paths().iter().map(|p| leaf(p)).collect::<Vec<_>>(),
            paths.iter().map(|p| leaf(p)).collect::<Vec<_>>(),
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        accounts.release().await?;
    }
    framework.close().await;
    Ok(())
}

/// The last component of a path (`/a/b/alice` → `alice`).
fn leaf(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}
