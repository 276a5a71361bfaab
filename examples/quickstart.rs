//! Quickstart: several workers, each with its own ZooKeeper session, take
//! turns on one InterProcessMutex. Shows reentrancy and the fencing token of
//! every hold.
//!
//! With `ZK_CONNECT` set (e.g. `127.0.0.1:2181`) it uses that ensemble;
//! otherwise it starts a throw-away server on a free loopback port: the
//! embedded ZooKeeper-protocol server (no JVM needed), or a real ZooKeeper
//! with `ZK_TEST_SERVER=real`.
//!
//! Run: `cargo run -p examples --example quickstart`

mod common;

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use zk_curator::{FencingToken, InterProcessMutex};

const WORKERS: usize = 4;
const ROUNDS: usize = 3;

#[tokio::main]
async fn main() -> Result<(), common::BoxError> {
    common::init_tracing();

    // Keep the server (if we started one) alive until the end of main.
    // ZK_CONNECT, or a throw-away server: the embedded one by default (no
    // JVM needed), a real ZooKeeper with ZK_TEST_SERVER=real.
    let (connect, _server) = common::server().await?;

    let path = format!("/quickstart/{}", std::process::id());
    let last_token = Arc::new(Mutex::new(None));
    let mut workers = Vec::new();
    for id in 0..WORKERS {
        let (connect, path, last_token) = (connect.clone(), path.clone(), last_token.clone());
        workers.push(tokio::spawn(async move {
            worker(id, &connect, &path, &last_token).await
        }));
    }
    for worker in workers {
        worker.await??;
    }
    println!("all {WORKERS} workers done; fencing tokens only ever went up");
    Ok(())
}

async fn worker(
    id: usize,
    connect: &str,
    path: &str,
    last_token: &Mutex<Option<FencingToken>>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Each worker is its own ZooKeeper session, like a separate process.
    let framework = common::connected(connect, Duration::from_secs(10)).await?;
    let mutex = InterProcessMutex::new(framework.clone(), path)?;

    for round in 0..ROUNDS {
        mutex.acquire().await?;
        // Reentrant: the same task may acquire again without blocking.
        mutex.acquire().await?;
        let token = mutex.fencing_token().ok_or("held, so it has a token")?;
        let previous = last_token.lock().map_err(|_| "poisoned")?.replace(token);
        assert!(previous < Some(token), "fencing tokens must increase");
        println!("worker {id} holds the lock (round {round}, held twice, fencing token {token})");
        tokio::time::sleep(Duration::from_millis(50)).await;
        mutex.release().await?;
        mutex.release().await?;
    }

    // The guard API: the hold belongs to the guard, released explicitly.
    let guard = mutex.lock().await?;
    println!(
        "worker {id} holds the lock through a guard (fencing token {})",
        guard.fencing_token()
    );
    guard.release().await?;
    framework.close().await;
    Ok(())
}
