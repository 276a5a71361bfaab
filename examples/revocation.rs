//! Cooperative revocation: a holder agrees to be revocable; another
//! process asks it to give the lock up (Curator's protocol: it writes
//! `__REVOKE__` into the holder's node), the holder releases, and the asker
//! gets the lock.
//!
//! Run: `cargo run -p examples --example revocation` (uses `ZK_CONNECT` if set,
//! otherwise starts a throw-away ZooKeeper on a free loopback port).

mod common;

use std::time::Duration;

use zk_curator::{InterProcessMutex, Revoker};

use common::BoxError;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // ZK_CONNECT, or a throw-away test server kept alive until the end.
    let (connect_string, _server) = common::server().await?;
    let path = format!("/examples/revocation-{}", std::process::id());

    // The holder: revocable, and it gives the lock up when asked.
    let holder_fw = common::connected(&connect_string, Duration::from_secs(30)).await?;
    let holder = InterProcessMutex::new(holder_fw.clone(), &path)?;
    let (asked_tx, mut asked_rx) = tokio::sync::mpsc::unbounded_channel();
    holder.make_revocable(move |node: &str| {
        if asked_tx.send(node.to_owned()).is_err() {
            eprintln!("revocation of {node} asked after the holder stopped listening");
        }
    });
    let guard = holder.lock().await?;
    println!("holder has the lock: {}", guard.node().path());
    let holding = tokio::spawn(async move {
        let node = asked_rx.recv().await.ok_or("listener gone")?;
        println!("holder was asked to give up {node}; releasing");
        guard.release().await?;
        Ok::<_, BoxError>(())
    });

    // Another process wants it: it revokes the current holder, then waits.
    let other_fw = common::connected(&connect_string, Duration::from_secs(30)).await?;
    let other = InterProcessMutex::new(other_fw.clone(), &path)?;
    let holders = other.participant_nodes().await?;
    let current = holders.first().ok_or("nobody holds the lock")?;
    println!("asking the holder of {current} to give the lock up");
    Revoker::attempt_revoke(&other_fw, current).await?;
    let mine = other
        .try_lock_for(Duration::from_secs(20))
        .await?
        .ok_or("the holder did not let go")?;
    println!(
        "the other process now holds the lock: {}",
        mine.node().path()
    );
    mine.release().await?;
    holding.await??;
    holder_fw.close().await;
    other_fw.close().await;
    Ok(())
}
