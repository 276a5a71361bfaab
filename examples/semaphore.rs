//! Semaphore: five workers, each with its own ZooKeeper session, share two
//! leases of one InterProcessSemaphoreV2. Prints who holds a lease and the
//! peak number of simultaneous holders (never more than two), then takes
//! both leases at once (all or nothing).
//!
//! With `ZK_CONNECT` set (e.g. `127.0.0.1:2181`) it uses that ensemble;
//! otherwise it starts a throw-away ZooKeeper on a free loopback port.
//!
//! Run: `cargo run -p examples --example semaphore`

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use zk_curator::InterProcessSemaphoreV2;

const WORKERS: usize = 5;
const LEASES: u32 = 2;
const ROUNDS: usize = 2;

use common::BoxError;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    common::init_tracing();

    // Keep the server (if we started one) alive until the end of main.
    // ZK_CONNECT, or a throw-away test server kept alive until the end.
    let (connect, _server) = common::server().await?;

    let path = format!("/semaphore-example/{}", std::process::id());
    let holders = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for id in 0..WORKERS {
        let (connect, path) = (connect.clone(), path.clone());
        let (holders, peak) = (holders.clone(), peak.clone());
        workers.push(tokio::spawn(async move {
            worker(id, &connect, &path, &holders, &peak).await
        }));
    }
    for worker in workers {
        worker.await??;
    }
    let peak = peak.load(Ordering::SeqCst);
    println!("all {WORKERS} workers done; peak concurrency {peak} (max leases {LEASES})");

    // All or nothing: both leases in one call, under one deadline.
    let framework = common::connected(&connect, Duration::from_secs(10)).await?;
    let semaphore = InterProcessSemaphoreV2::new(framework.clone(), &path, LEASES)?;
    match semaphore
        .acquire_many_timeout(LEASES, Duration::from_secs(5))
        .await?
    {
        Some(leases) => {
            println!(
                "took all {} leases at once; participants: {:?}",
                leases.len(),
                semaphore.participant_nodes().await?
            );
            InterProcessSemaphoreV2::return_all(leases).await?;
        }
        None => println!("could not take every lease within 5 s"),
    }
    framework.close().await;
    Ok(())
}

async fn worker(
    id: usize,
    connect: &str,
    path: &str,
    holders: &AtomicUsize,
    peak: &AtomicUsize,
) -> Result<(), BoxError> {
    // Each worker is its own ZooKeeper session, like a separate process.
    let framework = common::connected(connect, Duration::from_secs(10)).await?;
    let semaphore = InterProcessSemaphoreV2::with_node_data(
        framework.clone(),
        path,
        LEASES,
        format!("worker-{id}").as_bytes(),
    )?;
    for round in 0..ROUNDS {
        let lease = semaphore.acquire().await?;
        let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
        peak.fetch_max(now, Ordering::SeqCst);
        let data = lease.data().await?;
        println!(
            "worker {id} holds {} (round {round}, {now} holder(s) now, node data {:?})",
            lease.node().name(),
            String::from_utf8_lossy(&data)
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
        holders.fetch_sub(1, Ordering::SeqCst);
        lease.release().await?;
    }
    framework.close().await;
    Ok(())
}
