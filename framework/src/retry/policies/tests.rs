//! Unit tests of the parent module.
#![allow(clippy::unwrap_used)]

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A deterministic generator (fastrand's, seeded) for property-style loops.
struct Rng(fastrand::Rng);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.u64(..)
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
    let delays: Vec<Option<Duration>> = (0..7).map(|n| p.allow_retry(n, Duration::ZERO)).collect();
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

    let mut rng = Rng(fastrand::Rng::with_seed(0x9E37_79B9_7F4A_7C15));
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
