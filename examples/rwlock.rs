//! Read-write lock: two readers, each with its own ZooKeeper session, hold
//! the read lock together; a writer queued behind them gets in once both
//! are done, then downgrades to a read lock without letting another writer
//! in between.
//!
//! With `ZK_CONNECT` set (e.g. `127.0.0.1:2181`) it uses that ensemble;
//! otherwise it starts a throw-away ZooKeeper on a free loopback port.
//!
//! Run: `cargo run -p examples --example rwlock`

mod common;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Barrier;
use zk_curator::recipes::InterProcessReadWriteLock;
use zk_curator::FencingToken;

use common::BoxError;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    common::init_tracing();

    // Keep the server (if we started one) alive until the end of main.
    // ZK_CONNECT, or a throw-away test server kept alive until the end.
    let (connect, _server) = common::server().await?;
    let path = format!("/rwlock-example/{}", std::process::id());

    // Two readers, each its own session (like two processes), hold the read
    // lock at the same time: the barrier only opens once both are inside.
    let both_inside = Arc::new(Barrier::new(2));
    let mut readers = Vec::new();
    for id in 0..2 {
        let (connect, path, both_inside) = (connect.clone(), path.clone(), both_inside.clone());
        readers.push(tokio::spawn(async move {
            reader(id, &connect, &path, &both_inside).await
        }));
    }

    let framework = common::connected(&connect, Duration::from_secs(10)).await?;
    let lock = InterProcessReadWriteLock::with_data(framework.clone(), &path, b"writer")?;
    let write = lock.write_lock();
    // Wait until both readers hold the lock, then queue behind them.
    while lock.read_lock().participant_nodes().await?.len() < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("writer: queueing behind the readers ...");
    let guard = write.lock().await?;
    println!(
        "writer: holds the write lock alone (fencing token {})",
        guard.fencing_token()
    );
    for reader in readers {
        reader.await??;
    }

    // Downgrade: the read hold sorts level with the write node, so a writer
    // queued meanwhile cannot slip in between.
    let read_guard = guard.downgrade().await?;
    println!(
        "writer: downgraded to a read lock (fencing token {})",
        read_guard.fencing_token()
    );
    read_guard.release().await?;
    println!("done: readers shared the lock, the writer had it alone");
    framework.close().await;
    Ok(())
}

async fn reader(
    id: usize,
    connect: &str,
    path: &str,
    both_inside: &Barrier,
) -> Result<(), BoxError> {
    let framework = common::connected(connect, Duration::from_secs(10)).await?;
    let lock = InterProcessReadWriteLock::with_data(framework.clone(), path, b"reader")?;
    let read = lock.read_lock();
    read.acquire().await?;
    println!(
        "reader {id}: holds the read lock (fencing token {})",
        read.fencing_token().map_or(0, FencingToken::get)
    );
    both_inside.wait().await;
    println!("reader {id}: both readers are inside at once");
    tokio::time::sleep(Duration::from_millis(300)).await;
    println!("reader {id}: releasing");
    read.release().await?;
    framework.close().await;
    Ok(())
}
