//! Contention stress: many sessions hand one lock around as fast as they
//! can for a bounded time; every acquire must finish (no lost wake-up) and
//! holders must never overlap.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{framework, server, unique_path};
use zk_curator::InterProcessMutex;

async fn hand_offs(sessions: usize, run_for: Duration) -> usize {
    let server = server().unwrap();
    let path = unique_path(&format!("stress-{sessions}"));
    let inside = Arc::new(AtomicBool::new(false));
    let holds = Arc::new(AtomicUsize::new(0));
    let deadline = tokio::time::Instant::now() + run_for;
    let mut tasks = Vec::new();
    for _ in 0..sessions {
        let fw = framework(&server.connect_string()).await;
        let (path, inside, holds) = (path.clone(), inside.clone(), holds.clone());
        tasks.push(tokio::spawn(async move {
            let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
            while tokio::time::Instant::now() < deadline {
                let guard = tokio::time::timeout(Duration::from_secs(15), mutex.lock())
                    .await
                    .expect("an acquire hung: lost wake-up")
                    .unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
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
    holds.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_hand_off_without_stalls() {
    if server().is_none() {
        return;
    }
    assert!(hand_offs(2, Duration::from_secs(2)).await > 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_sessions_hand_off_without_stalls() {
    if server().is_none() {
        return;
    }
    assert!(hand_offs(8, Duration::from_secs(2)).await > 10);
}
