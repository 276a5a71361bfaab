//! The exponential delay schedule, and the only file that names the
//! `backoff` crate.
//!
//! # Why it works this way
//!
//! `backoff` 0.4 is unmaintained upstream (RUSTSEC-2025-0012, and it pulls in
//! the equally unmaintained `instant`). Everything the policies need from it
//! is one number, "the pause before attempt `n`", so that number is computed
//! here behind [`exponential_delay`] and nothing else in the crate imports
//! `backoff`. It is the crate's one exponential schedule: the retry policies
//! take it with their jitter, and the framework's own loops
//! ([`Backoff`](super::Backoff)) without. Replacing the crate touches this
//! file only.
//!
//! `backoff::ExponentialBackoff` is a stateful iterator: each
//! `next_backoff()` returns a randomised pause and then doubles its current
//! interval, up to the configured maximum. To get the pause for attempt `n`
//! the schedule is advanced `n` times and sampled once more. That is O(n),
//! but the loop stops as soon as the interval has reached the cap, so it runs
//! at most about a hundred times even for `n = u32::MAX` (a 1 ns base needs
//! 94 doublings to reach `Duration::MAX`); the policies never ask for more
//! than attempt 28 anyway.
//!
//! `ExponentialBackoff` reads the system clock when it is built and on every
//! `next_backoff()`, but only to enforce its "max elapsed time". That limit is
//! switched off here (`with_max_elapsed_time(None)`), so the clock reading
//! has no effect on the result and the policies stay pure; the time budget is
//! the job of `RetryUntilElapsed`, which gets `elapsed` from its caller.
//!
//! `backoff` would also randomise each pause, with a generator of its own
//! that nobody can seed. Its randomisation is switched off here (factor 0):
//! the schedule gives the nominal pause, and the jitter is drawn from the
//! framework's one source of randomness ([`crate::random`]), so that a
//! simulation that seeds it replays every retry's pause.
//!
//! `backoff` works in `f64` nanoseconds and its float-to-integer conversions
//! saturate, so huge durations cannot make it panic; the result is clamped to
//! the cap afterwards because the randomised pause may otherwise exceed it by
//! up to the jitter factor.

use std::time::Duration;

use backoff::backoff::Backoff as _;

/// Returns the pause before retry number `attempt` (0-based) of an
/// exponential schedule.
///
/// The nominal pause is `min(cap, base * 2^attempt)`. With `jitter` in
/// `(0, 1]` the returned pause is drawn uniformly from
/// `[nominal * (1 - jitter), nominal * (1 + jitter)]` and then clamped to
/// `cap`; with `jitter == 0` it is exactly the nominal pause, which makes the
/// schedule deterministic for tests (100, 200, 400, 800 ms … capped).
///
/// `jitter` is clamped into `[0, 1]`; a non-finite jitter counts as `0`. A
/// zero `base` or `cap` yields a zero pause. `base` larger than `cap` starts
/// at `cap`. Nothing here can overflow or panic.
pub(crate) fn exponential_delay(
    base: Duration,
    cap: Duration,
    attempt: u32,
    jitter: f64,
) -> Duration {
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let start = base.min(cap);
    if start.is_zero() {
        return Duration::ZERO;
    }

    // The schedule's own randomisation is off (it draws from a generator
    // nobody can seed): the jitter is applied below, drawn from the
    // framework's one source (`crate::random`).
    let mut schedule = backoff::ExponentialBackoffBuilder::new()
        .with_initial_interval(start)
        .with_multiplier(2.0)
        .with_randomization_factor(0.0)
        .with_max_interval(cap)
        .with_max_elapsed_time(None)
        .build();

    // Each call hands out one pause and doubles `current_interval`; once the
    // interval sits at the cap, further calls cannot change it.
    let mut remaining = attempt;
    while remaining > 0 && schedule.current_interval < cap {
        let _ = schedule.next_backoff();
        remaining -= 1;
    }

    let nominal = schedule.current_interval.min(cap);
    if jitter <= 0.0 {
        return nominal;
    }
    spread(nominal, jitter, crate::random::unit()).min(cap)
}

/// `nominal` spread by `jitter` with the draw `unit` in `[0, 1)`: uniform
/// in `[nominal * (1 - jitter), nominal * (1 + jitter)]` as `unit` is.
fn spread(nominal: Duration, jitter: f64, unit: f64) -> Duration {
    let nanos = nominal.as_nanos() as f64;
    let low = nanos * (1.0 - jitter);
    let width = nanos * 2.0 * jitter;
    // Saturating, like `backoff`'s own conversions: never a panic.
    Duration::try_from_secs_f64((low + width * unit) / 1e9).unwrap_or(Duration::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn without_jitter_the_schedule_doubles_exactly() {
        let expected = [100, 200, 400, 800, 1600, 3200, 6400, 12800];
        for (attempt, want) in expected.iter().enumerate() {
            let attempt = u32::try_from(attempt).unwrap();
            assert_eq!(
                exponential_delay(ms(100), ms(60_000), attempt, 0.0),
                ms(*want),
                "attempt {attempt}"
            );
        }
    }

    #[test]
    fn without_jitter_the_cap_is_reached_and_kept() {
        let delays: Vec<u64> = (0..8)
            .map(|n| {
                u64::try_from(exponential_delay(ms(100), ms(1000), n, 0.0).as_millis()).unwrap()
            })
            .collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000, 1000, 1000]);

        // A cap that is not a power-of-two multiple of the base.
        assert_eq!(exponential_delay(ms(100), ms(300), 1, 0.0), ms(200));
        assert_eq!(exponential_delay(ms(100), ms(300), 2, 0.0), ms(300));
        assert_eq!(exponential_delay(ms(100), ms(250), 2, 0.0), ms(250));
    }

    /// The jitter comes from the seeded source: the same seed, the same
    /// pauses (it would not with `backoff`'s own randomisation).
    #[test]
    fn a_seeded_thread_gets_the_same_jittered_pauses() {
        let pauses = |seed: u64| {
            crate::random::seed(seed);
            (0..8)
                .map(|n| exponential_delay(ms(100), ms(60_000), n, 0.5))
                .collect::<Vec<_>>()
        };
        let first = pauses(11);
        assert_eq!(first, pauses(11));
        assert_ne!(first, pauses(12));
    }

    /// The draw maps onto the whole band, linearly: 0 gives its low end,
    /// a draw near 1 its high end, ½ the nominal pause (the distribution is
    /// uniform on the band because the draw is uniform on `[0, 1)`).
    #[test]
    fn the_draw_spans_the_band_linearly() {
        let nominal = ms(800);
        for (jitter, low, high) in [(0.5, 400, 1200), (0.25, 600, 1000), (1.0, 0, 1600)] {
            assert_eq!(spread(nominal, jitter, 0.0), ms(low), "jitter {jitter}");
            assert_eq!(spread(nominal, jitter, 0.5), nominal, "jitter {jitter}");
            let top = spread(nominal, jitter, 1.0 - f64::EPSILON);
            assert!(
                ms(high) - top <= Duration::from_nanos(1),
                "{jitter}: {top:?}"
            );
            let quarter = spread(nominal, jitter, 0.25)
                .as_nanos()
                .abs_diff(ms(low).as_nanos() + (ms(high) - ms(low)).as_nanos() / 4);
            assert!(quarter <= 1, "jitter {jitter}: off by {quarter} ns");
        }
        // At the cap, the upper half of the band is clamped to the cap.
        crate::random::seed(1);
        let pauses: Vec<Duration> = (0..64)
            .map(|_| exponential_delay(ms(800), ms(800), 9, 0.5))
            .collect();
        assert!(pauses.iter().all(|p| *p >= ms(400) && *p <= ms(800)));
        assert!(pauses.contains(&ms(800)), "{pauses:?}");
    }

    #[test]
    fn degenerate_inputs_do_not_panic() {
        assert_eq!(
            exponential_delay(Duration::ZERO, ms(10), 5, 0.5),
            Duration::ZERO
        );
        assert_eq!(
            exponential_delay(ms(10), Duration::ZERO, 5, 0.5),
            Duration::ZERO
        );
        // A base above the cap starts at the cap.
        assert_eq!(exponential_delay(ms(500), ms(100), 0, 0.0), ms(100));
        // Out-of-range jitter is clamped, NaN and infinities count as none.
        assert_eq!(exponential_delay(ms(100), ms(1000), 1, f64::NAN), ms(200));
        assert_eq!(
            exponential_delay(ms(100), ms(1000), 1, f64::INFINITY),
            ms(200)
        );
        assert_eq!(exponential_delay(ms(100), ms(1000), 1, -3.0), ms(200));
        assert!(exponential_delay(ms(100), ms(1000), 1, 7.0) <= ms(400));
    }

    #[test]
    fn huge_attempts_and_durations_saturate_at_the_cap() {
        let huge = Duration::from_secs(u64::MAX / 4);
        for jitter in [0.0, 0.25, 0.5, 1.0] {
            let d = exponential_delay(ms(100), ms(5000), u32::MAX, jitter);
            assert!(d <= ms(5000), "{d:?}");
            assert!(d.as_secs_f64() >= 5.0 * (1.0 - jitter) - 1e-9, "{d:?}");

            // Pauses near Duration::MAX: no overflow, still at most the cap,
            // and (for jitter up to 0.5) at least half the nominal pause.
            let tiny = Duration::from_nanos(1);
            for (base, attempt) in [
                (tiny, u32::MAX),
                (Duration::MAX, u32::MAX),
                (Duration::MAX, 0),
                (Duration::from_secs(u64::MAX / 2), 3),
            ] {
                let d = exponential_delay(base, Duration::MAX, attempt, jitter);
                if jitter <= 0.5 {
                    assert!(d >= huge, "{base:?} {attempt} {jitter}: {d:?}");
                }
            }
        }
        assert_eq!(
            exponential_delay(ms(100), ms(5000), u32::MAX, 0.0),
            ms(5000)
        );
    }

    /// With jitter `j` and nominal pause `p = min(cap, base * 2^n)`, every
    /// pause lies in `[p * (1 - j), min(cap, p * (1 + j))]`, allowing one
    /// nanosecond either side for `backoff`'s float rounding.
    #[test]
    fn jittered_pauses_stay_within_the_band() {
        let base = ms(100);
        let cap = ms(10_000);
        for jitter in [0.1, 0.5, 1.0] {
            for attempt in 0..12u32 {
                let nominal = (base.as_nanos() << attempt).min(cap.as_nanos());
                let low = (nominal as f64 * (1.0 - jitter)) as u128;
                let high = ((nominal as f64 * (1.0 + jitter)) as u128).min(cap.as_nanos());
                for _ in 0..50 {
                    let got = exponential_delay(base, cap, attempt, jitter).as_nanos();
                    assert!(
                        got + 1 >= low && got <= high + 1,
                        "jitter {jitter} attempt {attempt}: {got} not in [{low}, {high}]"
                    );
                }
            }
        }
    }

    #[test]
    fn jitter_actually_spreads_the_pauses() {
        let samples: std::collections::BTreeSet<Duration> = (0..64)
            .map(|_| exponential_delay(ms(100), ms(60_000), 3, 0.5))
            .collect();
        assert!(samples.len() > 1, "64 draws gave one value: {samples:?}");
    }
}
