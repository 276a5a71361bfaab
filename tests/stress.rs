//! Contention stress: many sessions hand one lock around as fast as they
//! can for a bounded time; every acquire must finish (no lost wake-up),
//! holders must never overlap (each awaits inside its critical section, so
//! an overlap has time to show), and every holder's read-modify-write of a
//! shared counter goes through its fence: the counter ends equal to the
//! number of holds, with no update lost.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{bounded, framework, raw_client, server, unique_path, BOUND};
use zk_curator::framework::zk;
use zk_curator::InterProcessMutex;

async fn hand_offs(sessions: usize, run_for: Duration) -> usize {
    let server = server().unwrap();
    let path = unique_path(&format!("stress-{sessions}"));
    let inside = Arc::new(AtomicBool::new(false));
    let holds = Arc::new(AtomicUsize::new(0));
    let counter = format!("{path}-counter");
    let raw = raw_client(&server.connect_string()).await;
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    raw.mkdir(&counter, &open).await.unwrap();
    let deadline = tokio::time::Instant::now() + run_for;
    let mut tasks = Vec::new();
    for _ in 0..sessions {
        let fw = framework(&server.connect_string()).await;
        let (path, inside, holds, counter) =
            (path.clone(), inside.clone(), holds.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
            while tokio::time::Instant::now() < deadline {
                let guard = tokio::time::timeout(Duration::from_secs(15), mutex.lock())
                    .await
                    .expect("an acquire hung: lost wake-up")
                    .unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                // Read, await, then write back through the fence.
                let (data, stat) = fw.client().await.unwrap().get_data(&counter).await.unwrap();
                let value: u64 = std::str::from_utf8(&data)
                    .unwrap_or("0")
                    .parse()
                    .unwrap_or(0);
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(1)).await;
                guard
                    .fence()
                    .unwrap()
                    .set_data(
                        &counter,
                        (value + 1).to_string().as_bytes(),
                        Some(stat.version),
                    )
                    .await
                    .unwrap();
                holds.fetch_add(1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
            fw.close().await;
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let holds = holds.load(Ordering::SeqCst);
    let (data, _) = raw.get_data(&counter).await.unwrap();
    assert_eq!(
        std::str::from_utf8(&data).unwrap(),
        holds.to_string(),
        "every fenced increment landed, none twice"
    );
    holds
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_hand_off_without_stalls() {
    if server().is_none() {
        return;
    }
    assert!(bounded(BOUND, hand_offs(2, Duration::from_secs(2))).await > 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_sessions_hand_off_without_stalls() {
    if server().is_none() {
        return;
    }
    assert!(bounded(BOUND, hand_offs(8, Duration::from_secs(2))).await > 10);
}
