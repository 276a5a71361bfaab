//! Retry policies: whether a failed ZooKeeper operation should be tried
//! again, and how long to wait first.
//!
//! # Why it works this way
//!
//! A policy is a pure function of two numbers: how many retries have already
//! been made and how much time has passed since the first attempt started. It
//! never sleeps and never reads a clock. The caller (the retry loop of the
//! framework) owns the clock and the sleeping, so it can use tokio's timer,
//! honour cancellation and shut down promptly, while tests can ask a policy
//! for its answer at any point of a schedule without waiting for real time to
//! pass.
//!
//! The answer is an `Option<Duration>` rather than a `bool` because the
//! policy is also the only place that knows how long the next pause should
//! be: `Some(delay)` means "sleep `delay`, then try again", `None` means
//! "give up and report the last error".
//!
//! Policies are shared between many concurrent operations, so the trait
//! requires `Send + Sync + 'static`, and `Debug` so a client's configuration
//! can be logged. It is object safe, so one configured policy can be held
//! as an `Arc<dyn RetryPolicy>` and shared by every operation of a client.
//!
//! Every policy refuses a zero pause at construction: retrying a lost
//! connection immediately only adds load to a server that is already in
//! trouble, and gives the client no time to reconnect.
//!
//! The framework's own loops that never give up (rebuilding a session, the
//! background cleaner, an election's campaigns, the revocation watch) are
//! not under a policy; they take their pauses from one [`Backoff`] each,
//! with bounds of their own.

mod backoff;
mod policies;
mod retry_loop;
mod schedule;

use std::sync::Arc;
use std::time::Duration;

pub use policies::{
    BoundedExponentialBackoffRetry, ExponentialBackoffRetry, InvalidRetryPolicy, RetryForever,
    RetryNTimes, RetryOneTime, RetryUntilElapsed, DEFAULT_JITTER, MAX_EXPONENTIAL_RETRIES,
};
pub use retry_loop::RetryLoop;

pub(crate) use self::backoff::sleep_until_opt;
pub use self::backoff::{Backoff, Pauses};

/// Decides whether, and after which pause, a failed operation is retried.
///
/// Implementations must be pure: the answer depends only on the arguments
/// and the policy's own configuration (plus, for jittered policies, a random
/// draw, which the ready-made policies take from [`crate::random`]). They
/// must not sleep or read the clock.
pub trait RetryPolicy: Send + Sync + std::fmt::Debug + 'static {
    /// Returns the pause to take before the next attempt, or `None` to give
    /// up.
    ///
    /// `retry_count` is the number of retries already made: it is `0` when
    /// the first attempt has just failed and the caller asks whether to make
    /// the first retry. `elapsed` is the time since the first attempt
    /// started, measured by the caller.
    fn allow_retry(&self, retry_count: u32, elapsed: Duration) -> Option<Duration>;
}

impl<P: RetryPolicy + ?Sized> RetryPolicy for Arc<P> {
    fn allow_retry(&self, retry_count: u32, elapsed: Duration) -> Option<Duration> {
        (**self).allow_retry(retry_count, elapsed)
    }
}

impl<P: RetryPolicy + ?Sized> RetryPolicy for Box<P> {
    fn allow_retry(&self, retry_count: u32, elapsed: Duration) -> Option<Duration> {
        (**self).allow_retry(retry_count, elapsed)
    }
}

/// Compile-time check that the trait stays object safe.
#[cfg(test)]
fn _object_safe(_: Box<dyn RetryPolicy>) {}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn boxed_and_shared_policies_delegate() {
        let ms = Duration::from_millis;
        let boxed: Box<dyn RetryPolicy> = Box::new(RetryNTimes::new(2, ms(10)).unwrap());
        assert_eq!(boxed.allow_retry(1, Duration::ZERO), Some(ms(10)));
        assert_eq!(boxed.allow_retry(2, Duration::ZERO), None);
        _object_safe(boxed);

        let shared: Arc<dyn RetryPolicy> = Arc::new(RetryOneTime::new(ms(5)).unwrap());
        let again = Arc::clone(&shared);
        assert_eq!(again.allow_retry(0, Duration::ZERO), Some(ms(5)));
        assert_eq!(shared.allow_retry(1, Duration::ZERO), None);

        // A box of a shared policy is still a policy.
        let nested: Box<Arc<dyn RetryPolicy>> = Box::new(shared);
        assert_eq!(nested.allow_retry(0, Duration::ZERO), Some(ms(5)));
        assert!(format!("{nested:?}").contains("RetryOneTime"));
    }

    #[test]
    fn policies_are_send_sync_and_static() {
        fn assert_policy<P: RetryPolicy + Clone>() {}
        assert_policy::<ExponentialBackoffRetry>();
        assert_policy::<BoundedExponentialBackoffRetry>();
        assert_policy::<RetryNTimes>();
        assert_policy::<RetryOneTime>();
        assert_policy::<RetryUntilElapsed>();
        assert_policy::<RetryForever>();
        assert_policy::<Arc<dyn RetryPolicy>>();
    }
}
