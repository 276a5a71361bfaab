//! A lock driver of your own: a lock that admits up to K holders at once,
//! built on the framework's `LockInternals` (the same acquire loop the
//! mutex uses: pipelined protected create, predecessor watches, cancel
//! safety) with a `LockInternalsDriver` written here.
//!
//! Run: `cargo run -p examples --example custom_driver` (uses `ZK_CONNECT` if set,
//! otherwise starts a throw-away ZooKeeper on a free loopback port).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use zk_curator::framework::lock_internals::{
    until_held, Acquire, LockInternals, LockInternalsDriver, PredicateResults,
};
use zk_curator::{Error, LockLoss, Result};

/// The first `k` participants hold the lock. Holders leave in any order, so a
/// waiter waits for any change among the participants (watching one holder
/// could sleep through the departure of another).
#[derive(Debug)]
struct KHolders {
    k: usize,
}

impl LockInternalsDriver for KHolders {
    fn gets_the_lock(
        &self,
        sorted_children: &[String],
        our_name: &str,
        _max_leases: u32,
    ) -> Result<PredicateResults> {
        let Some(index) = sorted_children.iter().position(|c| c == our_name) else {
            return Err(Error::lock_lost(our_name, LockLoss::NodeDeleted));
        };
        if index < self.k {
            Ok(PredicateResults::holds())
        } else {
            Ok(PredicateResults::watch_children())
        }
    }
}

const K: usize = 2;
const WORKERS: usize = 6;

#[tokio::main]
async fn main() -> std::result::Result<(), common::BoxError> {
    // ZK_CONNECT, or a throw-away test server kept alive until the end.
    let (connect, _server) = common::server().await?;
    let path = format!("/examples/k-holders-{}", std::process::id());
    let inside = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for id in 0..WORKERS {
        let (connect, path, inside, peak) =
            (connect.clone(), path.clone(), inside.clone(), peak.clone());
        workers.push(tokio::spawn(async move {
            let framework = common::connected(&connect, Duration::from_secs(30)).await?;
            // The lock name and max_leases are ours to choose; the driver decides.
            let lock = LockInternals::new(
                framework.clone(),
                &path,
                "k-",
                1,
                Arc::new(KHolders { k: K }),
            )?;
            // `Wait::Forever` (the default) ends only with a hold or an
            // error; `until_held` says so in the type.
            let data = format!("worker {id}");
            let node = until_held(|| lock.acquire(Acquire::new().data(data.as_bytes()))).await?;
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            println!(
                "worker {id} is in ({now} inside, node {})",
                node.node().name()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            lock.release(&node).await?;
            framework.close().await;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for worker in workers {
        worker.await??;
    }
    let peak = peak.load(Ordering::SeqCst);
    println!("peak concurrency {peak} (the driver admits {K})");
    if peak > K {
        return Err(format!("the driver admitted {peak} holders").into());
    }
    Ok(())
}
