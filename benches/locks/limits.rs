//! Bounds on waiting, and what a bounded step yields. Every connect, acquire,
//! close and phase of the bench has a time limit; a step that runs out of
//! time or fails leaves its reason behind as a [`Measured`] error, which the
//! tables print as `n/a (reason)` instead of a figure.

use std::future::Future;
use std::time::Duration;

/// Any error of a step, boxed.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A figure, or why it could not be measured (printed as `n/a (reason)`).
pub(crate) type Measured<T> = Result<T, String>;

/// No single acquire may take longer (the peers use the same bound).
pub(crate) const ACQUIRE_LIMIT: Duration = Duration::from_secs(30);
/// Connecting one session.
pub(crate) const CONNECT_LIMIT: Duration = Duration::from_secs(20);
/// Closing one session.
pub(crate) const CLOSE_LIMIT: Duration = Duration::from_secs(5);

/// Spawned tasks, aborted when dropped: a phase cut short by its time limit
/// leaves nothing running into the next one.
pub(crate) struct Scoped<T>(pub(crate) Vec<tokio::task::JoinHandle<T>>);

impl<T> Drop for Scoped<T> {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Runs `future` for at most `limit`.
pub(crate) async fn within<T>(
    limit: Duration,
    future: impl Future<Output = T>,
) -> Result<T, BoxError> {
    tokio::time::timeout(limit, future)
        .await
        .map_err(|_| format!("timed out after {limit:?}").into())
}

/// Runs a fallible phase for at most `limit`, as a printable figure.
pub(crate) async fn bounded<T>(
    limit: Duration,
    future: impl Future<Output = Result<T, BoxError>>,
) -> Measured<T> {
    match tokio::time::timeout(limit, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!("timed out after {limit:?}")),
    }
}
