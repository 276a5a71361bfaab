//! Fencing, both ways: a ZooKeeper write that only lands while the lock is
//! held, and a store outside ZooKeeper that refuses writes carrying an older
//! fencing token than it has seen.
//!
//! Two workers take the mutex in turn. The first is "paused" (think of a
//! long GC pause) after it took the lock; meanwhile its session expires and
//! the second worker takes over. When the first wakes up, its writes are
//! refused: by ZooKeeper through the fence, and by the store through the
//! token.
//!
//! ```sh
//! cargo run -p examples --example fencing
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use zk_curator::framework::zk;
use zk_curator::{Error, FencingToken, Framework, InterProcessMutex};

/// A store that remembers the greatest token it accepted and refuses older
/// ones: the outside-ZooKeeper half of fencing.
#[derive(Debug, Default)]
struct Store {
    newest: Option<FencingToken>,
    entries: Vec<String>,
}

impl Store {
    fn write(&mut self, token: FencingToken, entry: &str) -> Result<(), String> {
        if let Some(newest) = self.newest.filter(|newest| token < *newest) {
            return Err(format!("refused: token {token} is older than {newest}"));
        }
        self.newest = Some(token);
        self.entries.push(entry.to_owned());
        Ok(())
    }
}

async fn framework(connect: &str) -> zk_curator::Result<Framework> {
    let framework = Framework::builder()
        .connect_string(connect)
        .session_timeout(Duration::from_secs(4))
        .build()?;
    framework.start()?;
    framework
        .block_until_connected(Duration::from_secs(10))
        .await?;
    Ok(framework)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (connect, _server) = zk_curator_testing::connect_string_or_start().await?;
    let (first, second) = (framework(&connect).await?, framework(&connect).await?);
    let path = format!("/examples/fencing-{}", uuid::Uuid::new_v4().simple());
    let report = format!("{path}-report");
    let store = Arc::new(Mutex::new(Store::default()));

    // The shared ZooKeeper node the lock protects.
    let client = first.client().await?;
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    client.mkdir(&report, &open).await?;
    drop(client);

    // Worker 1 takes the lock and writes once, fenced.
    let guard = InterProcessMutex::new(first.clone(), &path)?.lock().await?;
    let old_token = guard.fencing_token();
    guard.fence()?.set_data(&report, b"worker 1", None).await?;
    store
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .write(old_token, "worker 1")?;
    println!("worker 1 holds the lock (token {old_token}) and wrote");

    // Worker 1 is paused; its session expires meanwhile.
    let session = first.session().await?;
    zk_curator_testing::expire_session(&connect, session.client()).await?;
    drop(session);

    // Worker 2 takes over and writes.
    let theirs = InterProcessMutex::new(second.clone(), &path)?
        .lock()
        .await?;
    let new_token = theirs.fencing_token();
    theirs.fence()?.set_data(&report, b"worker 2", None).await?;
    store
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .write(new_token, "worker 2")?;
    println!("worker 2 holds the lock (token {new_token}) and wrote");

    // Worker 1 wakes up and tries to go on as if nothing happened.
    // (A hold already known lost refuses to make a fence at all; one that
    // still looks valid has its write refused by ZooKeeper.)
    let stale = async {
        guard
            .fence()?
            .set_data(&report, b"worker 1 again", None)
            .await
    };
    match stale.await {
        Err(err @ Error::LockLost { .. }) => println!("worker 1's ZooKeeper write refused: {err}"),
        other => return Err(format!("a stale write got through: {other:?}").into()),
    }
    match store
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .write(old_token, "worker 1 again")
    {
        Err(why) => println!("worker 1's store write {why}"),
        Ok(()) => return Err("the store took a stale write".into()),
    }
    println!("worker 1 learns why: {}", guard.lost().await);

    let (data, _) = second.client().await?.get_data(&report).await?;
    println!(
        "the node says {:?}; the store holds {:?}",
        String::from_utf8_lossy(&data),
        store.lock().unwrap_or_else(|e| e.into_inner()).entries
    );
    // Lost, so the release returns at once with LockLost: anything else is
    // a surprise worth stopping for.
    match guard.release().await {
        Err(zk_curator::Error::LockLost { .. }) => println!("the stale guard's release: LockLost"),
        other => return Err(format!("the stale guard's release: {other:?}").into()),
    }
    theirs.release().await?;
    first.close().await;
    second.close().await;
    Ok(())
}
