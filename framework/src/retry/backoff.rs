//! [`Backoff`]: the pauses of the framework's own loops that try again
//! without a [`RetryPolicy`](super::RetryPolicy) (rebuilding a session, the
//! background cleaner's deletes, an election's campaigns, the revocation
//! watch), and [`sleep_until_opt`], the one way to sleep until an optional
//! deadline.
//!
//! # Why it works this way
//!
//! A retry policy answers "whether, and after which pause" for work the user
//! asked for, and may give up. These loops never give up: they run until the
//! framework closes or their work is done, and only need the pause before
//! the next attempt. Each keeps its own bounds (documented beside it), but
//! the schedule is the retry policies' own, without their jitter
//! (`schedule::exponential_delay`, the one exponential schedule of the
//! crate): the pause doubles from `first` up to `max`, and starts over after
//! a success.
//!
//! Like the policies, a `Backoff` is pure: it never sleeps and never reads a
//! clock or a random source. Jitter, where a loop wants it, comes from a
//! number the caller draws ([`Backoff::jittered`]), so a schedule can be
//! checked at any point without waiting and the same draw gives the same
//! pause.

use std::time::Duration;

use tokio::time::Instant;

use super::schedule::exponential_delay;

/// An exponential schedule of pauses: `first`, twice that, … up to `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
}

impl Backoff {
    /// The schedule `first, 2·first, 4·first, …`, capped at `max` (a `max`
    /// below `first` caps every pause at `max`; `first == max` is a fixed
    /// pause).
    pub const fn new(first: Duration, max: Duration) -> Self {
        Backoff { first, max }
    }

    /// The first pause.
    pub const fn first(&self) -> Duration {
        self.first
    }

    /// The longest pause.
    pub const fn max(&self) -> Duration {
        self.max
    }

    /// The pause before attempt `attempt` (0-based: the pause after the
    /// first failure is `delay(0) == first`): `min(max, first * 2^attempt)`.
    /// Saturates instead of overflowing.
    pub fn delay(&self, attempt: u32) -> Duration {
        // The policies' schedule, without its jitter: one schedule in the
        // crate.
        exponential_delay(self.first, self.max, attempt, 0.0)
    }

    /// [`delay`](Self::delay)`(attempt)` spread by `draw` (any number, e.g.
    /// a hash or a random `u64`): a pause between half of the nominal one and
    /// all of it, so that many loops failing together do not retry together.
    /// The same draw always gives the same pause.
    pub fn jittered(&self, attempt: u32, draw: u64) -> Duration {
        let full = self.delay(attempt);
        let half = full / 2;
        let half_nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX).max(1);
        half + Duration::from_nanos(draw % half_nanos)
    }

    /// A running schedule that starts at the first pause.
    pub const fn start(self) -> Pauses {
        Pauses {
            backoff: self,
            attempt: 0,
        }
    }
}

/// A [`Backoff`] under way: each [`next_pause`](Self::next_pause) hands out one pause
/// and moves on; [`reset`](Self::reset) starts over after a success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pauses {
    backoff: Backoff,
    attempt: u32,
}

impl Pauses {
    /// The pause to take now; the next one is twice as long (up to the cap).
    pub fn next_pause(&mut self) -> Duration {
        let pause = self.backoff.delay(self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        pause
    }

    /// Starts over at the first pause.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// Sleeps until `deadline`, or forever without one: for a `select!` branch
/// that fires only when there is something to wait for.
///
/// # Cancel safety
/// Cancel safe: it only sleeps.
pub(crate) async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn doubles_to_the_cap_and_starts_over() {
        let mut pauses = Backoff::new(ms(100), ms(2000)).start();
        let taken: Vec<Duration> = (0..7).map(|_| pauses.next_pause()).collect();
        assert_eq!(
            taken,
            [100, 200, 400, 800, 1600, 2000, 2000].map(ms).to_vec()
        );
        pauses.reset();
        assert_eq!(pauses.next_pause(), ms(100));
    }

    #[test]
    fn a_fixed_pause_and_degenerate_bounds() {
        let fixed = Backoff::new(ms(100), ms(100));
        assert!((0..40).all(|n| fixed.delay(n) == ms(100)));
        assert_eq!(Backoff::new(ms(500), ms(100)).delay(0), ms(100));
        assert_eq!(
            Backoff::new(Duration::ZERO, ms(100)).delay(9),
            Duration::ZERO
        );
        let huge = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(huge.delay(u32::MAX), Duration::MAX);
        assert_eq!(Backoff::new(ms(1), ms(5000)).delay(u32::MAX), ms(5000));
        let mut pauses = Backoff::new(ms(1), ms(5)).start();
        pauses.attempt = u32::MAX;
        assert_eq!(pauses.next_pause(), ms(5));
        assert_eq!(pauses.next_pause(), ms(5));
    }

    #[test]
    fn jitter_stays_between_half_and_all_and_spreads() {
        let backoff = Backoff::new(ms(50), ms(5000));
        for attempt in 0..40 {
            let full = backoff.delay(attempt);
            for draw in [0, 1, 7, u64::MAX, 0x9e37_79b9_7f4a_7c15] {
                let pause = backoff.jittered(attempt, draw);
                assert!(
                    pause >= full / 2 && pause <= full,
                    "{attempt} {draw}: {pause:?}"
                );
                assert_eq!(pause, backoff.jittered(attempt, draw));
            }
        }
        let spread: std::collections::HashSet<Duration> = (0..20u64)
            .map(|i| backoff.jittered(4, i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
            .collect();
        assert!(spread.len() > 10, "{spread:?}");
        // A zero pause stays zero.
        assert_eq!(
            Backoff::new(Duration::ZERO, ms(5)).jittered(3, 12345),
            Duration::ZERO
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sleeps_until_a_deadline_or_forever() {
        let start = Instant::now();
        sleep_until_opt(Some(start + ms(30))).await;
        assert!(start.elapsed() >= ms(30));
        let forever = tokio::time::timeout(ms(1000), sleep_until_opt(None)).await;
        assert!(forever.is_err());
    }
}
