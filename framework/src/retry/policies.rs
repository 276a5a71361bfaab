//! The ready-made retry policies.
//!
//! # Why it works this way
//!
//! Each policy is a small immutable value. Its constructor checks the
//! configuration once and returns [`InvalidRetryPolicy`] for settings that
//! can only be mistakes: a zero pause (which would hammer a struggling
//! server), a cap below the base pause, a jitter outside `[0, 1]`, or a time
//! budget too short for even one pause. After that `allow_retry` cannot fail
//! and cannot panic, whatever `retry_count` and `elapsed` it is given.
//!
//! The exponential policies spread their pauses with random jitter so that
//! many clients that lost the same server do not all come back at the same
//! instant. The schedule itself lives in the private `schedule` module,
//! the one place that depends on the `backoff` crate; the jitter is drawn
//! from the framework's one source of randomness ([`crate::random`]), so a
//! thread seeded with [`random::seed`](crate::random::seed) gets the same
//! pauses again.

use std::time::Duration;

use crate::retry::schedule::exponential_delay;
use crate::retry::RetryPolicy;

/// The largest retry count the exponential policies accept; larger values
/// given to their constructors are silently lowered to this one.
///
/// The pause doubles with every retry, so the 29th retry already waits
/// nominally 2^28 (about 268 million) times the base pause: about 310 days
/// at a 100 ms base. More retries could only add pauses that are either
/// absurdly long or all equal to the cap; for long-running retrying use
/// [`RetryForever`] or [`RetryUntilElapsed`].
pub const MAX_EXPONENTIAL_RETRIES: u32 = 29;

/// The jitter the exponential policies use unless told otherwise: each pause
/// is drawn uniformly from 50 % below to 50 % above its nominal value (and
/// never above the cap).
pub const DEFAULT_JITTER: f64 = 0.5;

/// A retry policy was configured with values that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidRetryPolicy {
    /// A pause or time budget was zero.
    #[error("{policy}: {what} must be greater than zero")]
    ZeroDuration {
        /// The policy being built.
        policy: &'static str,
        /// Which setting was zero.
        what: &'static str,
    },
    /// The cap on the pause is shorter than the first pause.
    #[error(
        "{policy}: the maximum sleep {max_sleep:?} is shorter than the base sleep {base_sleep:?}"
    )]
    MaxSleepBelowBase {
        /// The policy being built.
        policy: &'static str,
        /// The requested first pause.
        base_sleep: Duration,
        /// The requested cap.
        max_sleep: Duration,
    },
    /// The pause between attempts is longer than the whole time budget, so
    /// the policy could never allow a single retry.
    #[error(
        "{policy}: the sleep between retries {sleep_between:?} is longer than the time budget \
         {max_elapsed:?}, so no retry could ever happen"
    )]
    SleepExceedsBudget {
        /// The policy being built.
        policy: &'static str,
        /// The requested pause between attempts.
        sleep_between: Duration,
        /// The requested time budget.
        max_elapsed: Duration,
    },
    /// The jitter factor is not a number between 0.0 and 1.0.
    #[error("{policy}: jitter must be between 0.0 and 1.0, got {jitter}")]
    InvalidJitter {
        /// The policy being built.
        policy: &'static str,
        /// The rejected factor.
        jitter: f64,
    },
}

fn require_non_zero(
    policy: &'static str,
    what: &'static str,
    value: Duration,
) -> Result<(), InvalidRetryPolicy> {
    if value.is_zero() {
        Err(InvalidRetryPolicy::ZeroDuration { policy, what })
    } else {
        Ok(())
    }
}

fn check_exponential(
    policy: &'static str,
    base_sleep: Duration,
    max_sleep: Duration,
) -> Result<(), InvalidRetryPolicy> {
    require_non_zero(policy, "the base sleep", base_sleep)?;
    if max_sleep < base_sleep {
        return Err(InvalidRetryPolicy::MaxSleepBelowBase {
            policy,
            base_sleep,
            max_sleep,
        });
    }
    Ok(())
}

fn check_jitter(policy: &'static str, jitter: f64) -> Result<f64, InvalidRetryPolicy> {
    if (0.0..=1.0).contains(&jitter) {
        Ok(jitter)
    } else {
        Err(InvalidRetryPolicy::InvalidJitter { policy, jitter })
    }
}

/// Retries up to a fixed number of times, doubling the pause each time, with
/// random jitter.
///
/// Retry `n` (0-based) is preceded by a pause of nominally
/// `base_sleep * 2^n`, capped at the maximum sleep, then spread by the jitter
/// (see [`DEFAULT_JITTER`]) and capped again, so no pause ever exceeds the
/// maximum sleep. Retries are allowed while `retry_count < max_retries`;
/// `max_retries` is lowered to [`MAX_EXPONENTIAL_RETRIES`] (29) if larger.
///
/// Built with [`new`](Self::new) there is no cap other than the 29-retry
/// limit, so the last pauses can be very long; prefer
/// [`with_max_sleep`](Self::with_max_sleep) or
/// [`BoundedExponentialBackoffRetry`] when that matters.
#[derive(Debug, Clone, PartialEq)]
pub struct ExponentialBackoffRetry {
    base_sleep: Duration,
    max_sleep: Duration,
    max_retries: u32,
    jitter: f64,
}

impl ExponentialBackoffRetry {
    const NAME: &'static str = "ExponentialBackoffRetry";

    /// A policy starting at `base_sleep` with no cap on the pause.
    ///
    /// Fails if `base_sleep` is zero.
    pub fn new(base_sleep: Duration, max_retries: u32) -> Result<Self, InvalidRetryPolicy> {
        Self::with_max_sleep(base_sleep, max_retries, Duration::MAX)
    }

    /// A policy starting at `base_sleep` whose pauses never exceed
    /// `max_sleep`.
    ///
    /// Fails if `base_sleep` is zero or `max_sleep < base_sleep`.
    pub fn with_max_sleep(
        base_sleep: Duration,
        max_retries: u32,
        max_sleep: Duration,
    ) -> Result<Self, InvalidRetryPolicy> {
        check_exponential(Self::NAME, base_sleep, max_sleep)?;
        Ok(Self {
            base_sleep,
            max_sleep,
            max_retries: max_retries.min(MAX_EXPONENTIAL_RETRIES),
            jitter: DEFAULT_JITTER,
        })
    }

    /// The same policy with another jitter factor: `0.0` gives exact
    /// doubling, `1.0` draws each pause from zero to twice its nominal value.
    ///
    /// Fails if `jitter` is not within `[0.0, 1.0]` (NaN included).
    pub fn with_jitter(self, jitter: f64) -> Result<Self, InvalidRetryPolicy> {
        let jitter = check_jitter(Self::NAME, jitter)?;
        Ok(Self { jitter, ..self })
    }

    /// The nominal pause before the first retry.
    pub fn base_sleep(&self) -> Duration {
        self.base_sleep
    }

    /// The cap on every pause (`Duration::MAX` when built with
    /// [`new`](Self::new)).
    pub fn max_sleep(&self) -> Duration {
        self.max_sleep
    }

    /// The number of retries allowed, after lowering to
    /// [`MAX_EXPONENTIAL_RETRIES`].
    pub fn max_retries(&self) -> u32 {
        self.max_retries
    }

    /// The jitter factor in `[0.0, 1.0]`.
    pub fn jitter(&self) -> f64 {
        self.jitter
    }
}

impl RetryPolicy for ExponentialBackoffRetry {
    fn allow_retry(&self, retry_count: u32, _elapsed: Duration) -> Option<Duration> {
        (retry_count < self.max_retries)
            .then(|| exponential_delay(self.base_sleep, self.max_sleep, retry_count, self.jitter))
    }
}

/// [`ExponentialBackoffRetry`] with a mandatory cap on the pause.
///
/// Retry `n` (0-based) waits nominally `min(max_sleep, base_sleep * 2^n)`,
/// spread by the jitter and never above `max_sleep`. Retries are allowed
/// while `retry_count < max_retries`, with `max_retries` lowered to
/// [`MAX_EXPONENTIAL_RETRIES`] if larger.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundedExponentialBackoffRetry {
    // The same schedule as the unbounded policy; only the constructor differs.
    inner: ExponentialBackoffRetry,
}

impl BoundedExponentialBackoffRetry {
    const NAME: &'static str = "BoundedExponentialBackoffRetry";

    /// A policy starting at `base_sleep`, never pausing longer than
    /// `max_sleep`.
    ///
    /// Fails if `base_sleep` is zero or `max_sleep < base_sleep`.
    pub fn new(
        base_sleep: Duration,
        max_sleep: Duration,
        max_retries: u32,
    ) -> Result<Self, InvalidRetryPolicy> {
        check_exponential(Self::NAME, base_sleep, max_sleep)?;
        let inner = ExponentialBackoffRetry::with_max_sleep(base_sleep, max_retries, max_sleep)?;
        Ok(Self { inner })
    }

    /// The same policy with another jitter factor (see
    /// [`ExponentialBackoffRetry::with_jitter`]).
    ///
    /// Fails if `jitter` is not within `[0.0, 1.0]` (NaN included).
    pub fn with_jitter(self, jitter: f64) -> Result<Self, InvalidRetryPolicy> {
        let jitter = check_jitter(Self::NAME, jitter)?;
        Ok(Self {
            inner: ExponentialBackoffRetry {
                jitter,
                ..self.inner
            },
        })
    }

    /// The nominal pause before the first retry.
    pub fn base_sleep(&self) -> Duration {
        self.inner.base_sleep()
    }

    /// The cap on every pause.
    pub fn max_sleep(&self) -> Duration {
        self.inner.max_sleep()
    }

    /// The number of retries allowed, after lowering to
    /// [`MAX_EXPONENTIAL_RETRIES`].
    pub fn max_retries(&self) -> u32 {
        self.inner.max_retries()
    }

    /// The jitter factor in `[0.0, 1.0]`.
    pub fn jitter(&self) -> f64 {
        self.inner.jitter()
    }
}

impl RetryPolicy for BoundedExponentialBackoffRetry {
    fn allow_retry(&self, retry_count: u32, elapsed: Duration) -> Option<Duration> {
        self.inner.allow_retry(retry_count, elapsed)
    }
}

/// Retries `n` times with the same pause before each retry.
///
/// Allows retries while `retry_count < n`: `RetryNTimes::new(3, d)` allows
/// retries 0, 1 and 2 and refuses the fourth. `n = 0` never retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryNTimes {
    n: u32,
    sleep_between: Duration,
}

impl RetryNTimes {
    /// A policy allowing `n` retries, each after `sleep_between`.
    ///
    /// Fails if `sleep_between` is zero.
    pub fn new(n: u32, sleep_between: Duration) -> Result<Self, InvalidRetryPolicy> {
        require_non_zero("RetryNTimes", "the sleep between retries", sleep_between)?;
        Ok(Self { n, sleep_between })
    }

    /// The number of retries allowed.
    pub fn n(&self) -> u32 {
        self.n
    }

    /// The pause before each retry.
    pub fn sleep_between(&self) -> Duration {
        self.sleep_between
    }
}

impl RetryPolicy for RetryNTimes {
    fn allow_retry(&self, retry_count: u32, _elapsed: Duration) -> Option<Duration> {
        (retry_count < self.n).then_some(self.sleep_between)
    }
}

/// Retries exactly once, after a fixed pause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryOneTime {
    sleep: Duration,
}

impl RetryOneTime {
    /// A policy allowing a single retry after `sleep`.
    ///
    /// Fails if `sleep` is zero.
    pub fn new(sleep: Duration) -> Result<Self, InvalidRetryPolicy> {
        require_non_zero("RetryOneTime", "the sleep before the retry", sleep)?;
        Ok(Self { sleep })
    }

    /// The pause before the single retry.
    pub fn sleep(&self) -> Duration {
        self.sleep
    }
}

impl RetryPolicy for RetryOneTime {
    fn allow_retry(&self, retry_count: u32, _elapsed: Duration) -> Option<Duration> {
        (retry_count == 0).then_some(self.sleep)
    }
}

/// Retries with a fixed pause for as long as a time budget allows.
///
/// The budget is a promise about when attempts start: a retry is allowed
/// only if `elapsed + sleep_between <= max_elapsed`, so the policy never asks
/// the caller to sleep past the budget, and every attempt starts no later
/// than `max_elapsed` after the first one. (An attempt that starts just
/// inside the budget may of course finish after it.) Consequently the policy
/// gives up as soon as `elapsed >= max_elapsed`, and also somewhat earlier,
/// when the remaining budget is shorter than one pause, instead of sleeping
/// into a deadline that has already passed. The retry count is ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryUntilElapsed {
    max_elapsed: Duration,
    sleep_between: Duration,
}

impl RetryUntilElapsed {
    const NAME: &'static str = "RetryUntilElapsed";

    /// A policy retrying every `sleep_between` until `max_elapsed` would be
    /// exceeded.
    ///
    /// Fails if `sleep_between` is zero or longer than `max_elapsed` (no
    /// retry could ever fit in the budget).
    pub fn new(max_elapsed: Duration, sleep_between: Duration) -> Result<Self, InvalidRetryPolicy> {
        require_non_zero(Self::NAME, "the sleep between retries", sleep_between)?;
        if sleep_between > max_elapsed {
            return Err(InvalidRetryPolicy::SleepExceedsBudget {
                policy: Self::NAME,
                sleep_between,
                max_elapsed,
            });
        }
        Ok(Self {
            max_elapsed,
            sleep_between,
        })
    }

    /// The time budget, counted from the start of the first attempt.
    pub fn max_elapsed(&self) -> Duration {
        self.max_elapsed
    }

    /// The pause before each retry.
    pub fn sleep_between(&self) -> Duration {
        self.sleep_between
    }
}

impl RetryPolicy for RetryUntilElapsed {
    fn allow_retry(&self, _retry_count: u32, elapsed: Duration) -> Option<Duration> {
        let wakes_at = elapsed.checked_add(self.sleep_between)?;
        (wakes_at <= self.max_elapsed).then_some(self.sleep_between)
    }
}

/// Always retries, with a fixed pause.
///
/// Use it only where giving up is worse than waiting forever, and where the
/// caller has another way to stop (cancellation, shutdown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryForever {
    interval: Duration,
}

impl RetryForever {
    /// A policy retrying every `interval`, without end.
    ///
    /// Fails if `interval` is zero, which would be a busy loop.
    pub fn new(interval: Duration) -> Result<Self, InvalidRetryPolicy> {
        require_non_zero("RetryForever", "the retry interval", interval)?;
        Ok(Self { interval })
    }

    /// The pause before each retry.
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

impl RetryPolicy for RetryForever {
    fn allow_retry(&self, _retry_count: u32, _elapsed: Duration) -> Option<Duration> {
        Some(self.interval)
    }
}

#[cfg(test)]
mod tests;
