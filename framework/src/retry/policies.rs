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
//! instant. The schedule itself lives in the private `backoff_impl` module,
//! the one place that depends on the `backoff` crate.

use std::time::Duration;

use crate::retry::backoff_impl::exponential_delay;
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A tiny deterministic generator (xorshift64*) for property-style loops.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn retry_count(&mut self) -> u32 {
            // Mostly small counts, sometimes anything up to u32::MAX.
            let raw = self.next();
            let value = if raw % 4 == 0 { raw >> 32 } else { raw % 64 };
            u32::try_from(value).unwrap()
        }

        fn elapsed(&mut self) -> Duration {
            let raw = self.next();
            match raw % 4 {
                0 => Duration::from_nanos(raw >> 8),
                1 => Duration::new(raw >> 2, 999_999_999),
                _ => ms(raw % 100_000),
            }
        }
    }

    #[test]
    fn exponential_without_jitter_doubles_then_stops() {
        let p = ExponentialBackoffRetry::new(ms(100), 5)
            .unwrap()
            .with_jitter(0.0)
            .unwrap();
        let delays: Vec<Option<Duration>> =
            (0..7).map(|n| p.allow_retry(n, Duration::ZERO)).collect();
        assert_eq!(
            delays,
            [
                Some(ms(100)),
                Some(ms(200)),
                Some(ms(400)),
                Some(ms(800)),
                Some(ms(1600)),
                None,
                None
            ]
        );
        assert_eq!(p.max_sleep(), Duration::MAX);
        assert_eq!(p.base_sleep(), ms(100));
        assert!(p.jitter().abs() < f64::EPSILON);
    }

    #[test]
    fn exponential_with_max_sleep_is_capped() {
        let p = ExponentialBackoffRetry::with_max_sleep(ms(100), 29, ms(1000))
            .unwrap()
            .with_jitter(0.0)
            .unwrap();
        assert_eq!(p.allow_retry(3, Duration::ZERO), Some(ms(800)));
        assert_eq!(p.allow_retry(4, Duration::ZERO), Some(ms(1000)));
        assert_eq!(p.allow_retry(28, Duration::ZERO), Some(ms(1000)));
        assert_eq!(p.allow_retry(29, Duration::ZERO), None);
    }

    #[test]
    fn exponential_retry_count_is_clamped_to_29() {
        for requested in [30, 1000, u32::MAX] {
            let p = ExponentialBackoffRetry::new(ms(1), requested).unwrap();
            assert_eq!(p.max_retries(), MAX_EXPONENTIAL_RETRIES);
            assert!(p.allow_retry(28, Duration::ZERO).is_some());
            assert_eq!(p.allow_retry(29, Duration::ZERO), None);
            assert_eq!(p.allow_retry(u32::MAX, Duration::ZERO), None);

            let b = BoundedExponentialBackoffRetry::new(ms(1), ms(50), requested).unwrap();
            assert_eq!(b.max_retries(), MAX_EXPONENTIAL_RETRIES);
            assert!(b.allow_retry(28, Duration::ZERO).is_some());
            assert_eq!(b.allow_retry(29, Duration::ZERO), None);
        }
        let p = ExponentialBackoffRetry::new(ms(1), 29).unwrap();
        assert_eq!(p.max_retries(), 29);
        let p = ExponentialBackoffRetry::new(ms(1), 0).unwrap();
        assert_eq!(p.allow_retry(0, Duration::ZERO), None);
    }

    #[test]
    fn exponential_uncapped_last_retry_does_not_overflow() {
        // 29 retries of a huge base: base * 2^28 overflows Duration, the pause saturates.
        let p = ExponentialBackoffRetry::new(Duration::from_secs(u64::MAX / 2), u32::MAX).unwrap();
        for n in 0..MAX_EXPONENTIAL_RETRIES {
            assert!(p.allow_retry(n, Duration::MAX).is_some());
        }
        let p = ExponentialBackoffRetry::new(ms(100), 29)
            .unwrap()
            .with_jitter(0.0)
            .unwrap();
        assert_eq!(p.allow_retry(28, Duration::ZERO), Some(ms(100 << 28)));
    }

    #[test]
    fn bounded_respects_its_cap_with_and_without_jitter() {
        let exact = BoundedExponentialBackoffRetry::new(ms(100), ms(500), 10)
            .unwrap()
            .with_jitter(0.0)
            .unwrap();
        let got: Vec<Duration> = (0..10)
            .map(|n| exact.allow_retry(n, Duration::ZERO).unwrap())
            .collect();
        assert_eq!(
            got,
            [100, 200, 400, 500, 500, 500, 500, 500, 500, 500].map(ms)
        );
        assert_eq!(exact.allow_retry(10, Duration::ZERO), None);
        assert_eq!(exact.max_sleep(), ms(500));
        assert_eq!(exact.base_sleep(), ms(100));

        let jittered = BoundedExponentialBackoffRetry::new(ms(100), ms(500), 29).unwrap();
        assert!((jittered.jitter() - DEFAULT_JITTER).abs() < f64::EPSILON);
        for n in 0..29 {
            for _ in 0..20 {
                let d = jittered.allow_retry(n, Duration::ZERO).unwrap();
                assert!(d <= ms(500), "retry {n}: {d:?}");
            }
        }
    }

    /// With the default jitter (0.5) and nominal pause
    /// `p = min(cap, base * 2^n)`, every pause lies in `[p / 2, min(cap, 3p / 2)]`
    /// (with one nanosecond of slack for float rounding).
    #[test]
    fn exponential_jitter_stays_in_band() {
        let base = ms(10);
        let cap = ms(2_000);
        let p = ExponentialBackoffRetry::with_max_sleep(base, 29, cap).unwrap();
        for n in 0..29u32 {
            let nominal = (base.as_nanos() << n).min(cap.as_nanos());
            let low = nominal / 2;
            let high = (nominal * 3 / 2).min(cap.as_nanos());
            for _ in 0..30 {
                let d = p.allow_retry(n, Duration::ZERO).unwrap().as_nanos();
                assert!(
                    d + 1 >= low && d <= high + 1,
                    "retry {n}: {d} not in [{low}, {high}]"
                );
            }
        }
    }

    #[test]
    fn retry_n_times_allows_exactly_n() {
        let p = RetryNTimes::new(3, ms(50)).unwrap();
        assert_eq!(p.allow_retry(0, Duration::ZERO), Some(ms(50)));
        assert_eq!(p.allow_retry(1, ms(10)), Some(ms(50)));
        assert_eq!(p.allow_retry(2, Duration::MAX), Some(ms(50)));
        assert_eq!(p.allow_retry(3, Duration::ZERO), None);
        assert_eq!(p.allow_retry(u32::MAX, Duration::ZERO), None);
        assert_eq!((p.n(), p.sleep_between()), (3, ms(50)));

        let never = RetryNTimes::new(0, ms(50)).unwrap();
        assert_eq!(never.allow_retry(0, Duration::ZERO), None);
    }

    #[test]
    fn retry_one_time_allows_one() {
        let p = RetryOneTime::new(ms(20)).unwrap();
        assert_eq!(p.allow_retry(0, Duration::ZERO), Some(ms(20)));
        assert_eq!(p.allow_retry(0, Duration::MAX), Some(ms(20)));
        assert_eq!(p.allow_retry(1, Duration::ZERO), None);
        assert_eq!(p.sleep(), ms(20));
    }

    #[test]
    fn retry_until_elapsed_never_sleeps_past_the_budget() {
        let p = RetryUntilElapsed::new(ms(1000), ms(100)).unwrap();
        assert_eq!(p.allow_retry(0, Duration::ZERO), Some(ms(100)));
        assert_eq!(p.allow_retry(500, ms(899)), Some(ms(100)));
        // Waking up exactly at the deadline is still inside the budget.
        assert_eq!(p.allow_retry(1, ms(900)), Some(ms(100)));
        // Less than one pause left: give up now rather than sleep past it.
        assert_eq!(p.allow_retry(1, ms(901)), None);
        assert_eq!(p.allow_retry(1, ms(1000)), None);
        assert_eq!(p.allow_retry(0, Duration::MAX), None);
        assert_eq!((p.max_elapsed(), p.sleep_between()), (ms(1000), ms(100)));

        // A pause equal to the budget allows exactly the first retry.
        let tight = RetryUntilElapsed::new(ms(100), ms(100)).unwrap();
        assert_eq!(tight.allow_retry(0, Duration::ZERO), Some(ms(100)));
        assert_eq!(tight.allow_retry(1, ms(100)), None);
    }

    #[test]
    fn retry_forever_always_retries() {
        let p = RetryForever::new(ms(250)).unwrap();
        for (n, e) in [(0, Duration::ZERO), (u32::MAX, Duration::MAX), (7, ms(3))] {
            assert_eq!(p.allow_retry(n, e), Some(ms(250)));
        }
        assert_eq!(p.interval(), ms(250));
    }

    #[test]
    fn constructors_reject_bad_input() {
        let zero = Duration::ZERO;
        assert!(matches!(
            ExponentialBackoffRetry::new(zero, 3),
            Err(InvalidRetryPolicy::ZeroDuration { .. })
        ));
        assert!(matches!(
            ExponentialBackoffRetry::with_max_sleep(ms(100), 3, ms(99)),
            Err(InvalidRetryPolicy::MaxSleepBelowBase { .. })
        ));
        assert!(ExponentialBackoffRetry::with_max_sleep(ms(100), 3, ms(100)).is_ok());
        assert!(matches!(
            BoundedExponentialBackoffRetry::new(zero, ms(10), 3),
            Err(InvalidRetryPolicy::ZeroDuration { .. })
        ));
        assert!(matches!(
            BoundedExponentialBackoffRetry::new(ms(10), ms(9), 3),
            Err(InvalidRetryPolicy::MaxSleepBelowBase { .. })
        ));
        assert!(matches!(
            RetryNTimes::new(3, zero),
            Err(InvalidRetryPolicy::ZeroDuration { .. })
        ));
        assert!(matches!(
            RetryOneTime::new(zero),
            Err(InvalidRetryPolicy::ZeroDuration { .. })
        ));
        assert!(matches!(
            RetryForever::new(zero),
            Err(InvalidRetryPolicy::ZeroDuration { .. })
        ));
        assert!(matches!(
            RetryUntilElapsed::new(ms(100), zero),
            Err(InvalidRetryPolicy::ZeroDuration { .. })
        ));
        assert!(matches!(
            RetryUntilElapsed::new(ms(100), ms(101)),
            Err(InvalidRetryPolicy::SleepExceedsBudget { .. })
        ));
        assert!(matches!(
            RetryUntilElapsed::new(zero, ms(1)),
            Err(InvalidRetryPolicy::SleepExceedsBudget { .. })
        ));
        let p = ExponentialBackoffRetry::new(ms(100), 3).unwrap();
        for bad in [-0.1, 1.01, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                p.clone().with_jitter(bad),
                Err(InvalidRetryPolicy::InvalidJitter { .. })
            ));
            let b = BoundedExponentialBackoffRetry::new(ms(1), ms(2), 1).unwrap();
            assert!(b.with_jitter(bad).is_err());
        }
        assert!(p.clone().with_jitter(0.0).is_ok());
        assert!(p.with_jitter(1.0).is_ok());
    }

    #[test]
    fn errors_explain_themselves() {
        let e = ExponentialBackoffRetry::with_max_sleep(ms(100), 3, ms(50)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ExponentialBackoffRetry: the maximum sleep 50ms is shorter than the base sleep 100ms"
        );
        let e = RetryForever::new(Duration::ZERO).unwrap_err();
        assert_eq!(
            e.to_string(),
            "RetryForever: the retry interval must be greater than zero"
        );
        let e = RetryUntilElapsed::new(ms(10), ms(20)).unwrap_err();
        assert!(e.to_string().contains("no retry could ever happen"), "{e}");
        let e = ExponentialBackoffRetry::new(ms(1), 1)
            .unwrap()
            .with_jitter(2.0)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "ExponentialBackoffRetry: jitter must be between 0.0 and 1.0, got 2"
        );
    }

    /// Over many random `(retry_count, elapsed)` pairs, every policy answers
    /// without panicking and within its documented limits.
    #[test]
    fn property_every_answer_respects_the_policy() {
        let exp = ExponentialBackoffRetry::with_max_sleep(ms(5), 8, ms(300)).unwrap();
        let uncapped = ExponentialBackoffRetry::new(Duration::from_secs(1 << 40), 50).unwrap();
        let bounded = BoundedExponentialBackoffRetry::new(ms(7), ms(90), 40).unwrap();
        let n_times = RetryNTimes::new(4, ms(11)).unwrap();
        let once = RetryOneTime::new(ms(13)).unwrap();
        let until = RetryUntilElapsed::new(ms(5_000), ms(17)).unwrap();
        let forever = RetryForever::new(ms(19)).unwrap();

        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..20_000 {
            let n = rng.retry_count();
            let e = rng.elapsed();

            match exp.allow_retry(n, e) {
                Some(d) => assert!(n < 8 && d <= ms(300) && d >= ms(2), "{n} {d:?}"),
                None => assert!(n >= 8),
            }
            assert_eq!(uncapped.allow_retry(n, e).is_some(), n < 29);
            match bounded.allow_retry(n, e) {
                Some(d) => assert!(n < 29 && d <= ms(90) && d >= ms(3), "{n} {d:?}"),
                None => assert!(n >= 29),
            }
            assert_eq!(n_times.allow_retry(n, e), (n < 4).then_some(ms(11)));
            assert_eq!(once.allow_retry(n, e), (n == 0).then_some(ms(13)));
            match until.allow_retry(n, e) {
                Some(d) => assert!(d == ms(17) && e + d <= ms(5_000), "{e:?}"),
                None => assert!(e > ms(5_000 - 17), "{e:?}"),
            }
            assert_eq!(forever.allow_retry(n, e), Some(ms(19)));
        }
    }
}
