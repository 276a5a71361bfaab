//! The `metrics` feature: a recorder installed for this test binary sees the
//! documented lock and session metrics after a scripted run.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{bounded, eventually, framework, raw_client, server, unique_path, BOUND, PATIENCE};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use zk_curator::{InterProcessMutex, LockLoss, Revoker};

type Snapshot = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// The value of metric `name` whose labels include all of `labels`, summed
/// over the series that match (counters, gauges), or the number of samples
/// (histograms: a snapshot drains them, so take one snapshot per check).
fn value(snapshot: &Snapshot, name: &str, labels: &[(&str, &str)]) -> f64 {
    snapshot
        .iter()
        .filter(|(key, ..)| {
            key.key().name() == name
                && labels.iter().all(|(k, v)| {
                    key.key()
                        .labels()
                        .any(|label| label.key() == *k && label.value() == *v)
                })
        })
        .map(|(_, _, _, value)| match value {
            DebugValue::Counter(n) => *n as f64,
            DebugValue::Gauge(g) => g.into_inner(),
            DebugValue::Histogram(samples) => samples.len() as f64,
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_and_session_metrics_are_recorded() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let (fa, fb) = (framework(&connect).await, framework(&connect).await);
        let raw = raw_client(&connect).await;
        let now = snapshotter.snapshot().into_vec();
        assert!(
            value(
                &now,
                "zk_curator_state_changes_total",
                &[("state", "CONNECTED")]
            ) >= 2.0
        );
        let path = unique_path("metrics");
        let labels = [("path", path.as_str())];
        let a = InterProcessMutex::new(fa.clone(), &path).unwrap();
        let b = InterProcessMutex::new(fb.clone(), &path).unwrap();

        // Acquired, then a try that finds it taken, then a revocation.
        let revoked = Arc::new(AtomicUsize::new(0));
        let seen = revoked.clone();
        a.make_revocable(move |_: &str| {
            seen.fetch_add(1, Ordering::SeqCst);
        });
        let guard = a.lock().await.unwrap();
        let mid = snapshotter.snapshot().into_vec();
        assert_eq!(value(&mid, "zk_curator_holding", &labels), 1.0);
        assert!(b.try_lock().await.unwrap().is_none());
        Revoker::attempt_revoke(&fb, guard.node().path())
            .await
            .unwrap();
        assert!(eventually(PATIENCE, || async { revoked.load(Ordering::SeqCst) == 1 }).await);
        // The node is deleted by hand: a loss.
        let lost = guard.lost();
        raw.delete(guard.node().path(), None).await.unwrap();
        assert_eq!(lost.await, LockLoss::NodeDeleted);
        drop(guard);
        // A dropped guard goes to the background cleaner.
        let dropped = b.lock().await.unwrap();
        drop(dropped);
        assert!(fb.wait_for_background_cleanup(PATIENCE).await);

        let now = snapshotter.snapshot().into_vec();
        let acquired = [("path", path.as_str()), ("outcome", "acquired")];
        let timed_out = [("path", path.as_str()), ("outcome", "timed_out")];
        assert_eq!(value(&now, "zk_curator_acquires_total", &acquired), 2.0);
        assert_eq!(value(&now, "zk_curator_acquires_total", &timed_out), 1.0);
        assert_eq!(
            value(&mid, "zk_curator_acquire_wait_seconds", &acquired)
                + value(&now, "zk_curator_acquire_wait_seconds", &acquired),
            2.0
        );
        assert_eq!(
            value(&mid, "zk_curator_hold_seconds", &labels)
                + value(&now, "zk_curator_hold_seconds", &labels),
            2.0
        );
        assert_eq!(value(&now, "zk_curator_losses_total", &labels), 1.0);
        assert_eq!(value(&now, "zk_curator_revocations_total", &labels), 1.0);
        assert!(value(&now, "zk_curator_background_deletes_total", &[]) >= 1.0);
        assert_eq!(value(&now, "zk_curator_holding", &labels), 0.0);
        assert_eq!(value(&now, "zk_curator_waiting", &labels), 0.0);
        fa.close().await;
        fb.close().await;
    })
    .await;
}
