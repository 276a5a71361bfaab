//! [`Wait`]: how long an acquire may wait, decided once.

use std::future::Future;
use std::time::Duration;

use futures::future::Either;
use futures::FutureExt;
use tokio::time::Instant;

/// How long an acquire may wait for its lock.
///
/// Every public acquire builds one where it begins (`try_*` is
/// [`Wait::Try`], `*_timeout(d)` and `try_*_for(d)` are [`Wait::timeout`],
/// the others [`Wait::Forever`]) and hands it down unchanged to
/// [`LockInternals::acquire`](super::LockInternals::acquire): the rule that
/// a zero timeout is a single try lives in [`Wait::timeout`] alone, and a
/// deadline stays a deadline however many layers (a reentrant owner map, a
/// multi-lock's members, a semaphore's internal mutex) pass it on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// One attempt, without waiting behind holders: the participant node is
    /// created and the children listed together (one round trip), and the
    /// node is deleted again if the lock is taken.
    Try,
    /// Until this instant; whatever is still waiting then gives up.
    Until(Instant),
    /// As long as it takes.
    Forever,
}

impl Wait {
    /// The wait of a public `timeout` argument: a zero timeout is
    /// [`Wait::Try`], one too long to represent as an instant is
    /// [`Wait::Forever`], any other ends `timeout` from now.
    pub fn timeout(timeout: Duration) -> Wait {
        if timeout.is_zero() {
            return Wait::Try;
        }
        Instant::now()
            .checked_add(timeout)
            .map_or(Wait::Forever, Wait::Until)
    }

    /// Whether this is a single try.
    pub fn is_try(self) -> bool {
        self == Wait::Try
    }

    /// The deadline, for [`Wait::Until`].
    pub fn deadline(self) -> Option<Instant> {
        match self {
            Wait::Until(deadline) => Some(deadline),
            Wait::Try | Wait::Forever => None,
        }
    }

    /// Whether the deadline has passed (never for [`Wait::Try`] and
    /// [`Wait::Forever`]).
    pub fn has_expired(self) -> bool {
        self.deadline().is_some_and(|d| d <= Instant::now())
    }

    /// This wait as it stands now for an acquire about to begin: a
    /// [`Wait::Until`] whose deadline has passed is a [`Wait::Try`] (an
    /// acquire begun gets at least its one attempt); any other is unchanged.
    pub fn for_attempt(self) -> Wait {
        if self.has_expired() {
            Wait::Try
        } else {
            self
        }
    }

    /// Runs `work` under this wait: `None` if the deadline of a
    /// [`Wait::Until`] passes first (`work` is dropped then); a
    /// [`Wait::Try`] or [`Wait::Forever`] runs it to its end.
    ///
    /// A plain function, not an `async fn`: `work` moves straight into the
    /// future returned, instead of being kept once as an argument and once
    /// more inside the future awaited (a parked waiter is such a future, so
    /// its size is memory per waiter).
    pub fn bound<F: Future>(self, work: F) -> impl Future<Output = Option<F::Output>> {
        match self {
            Wait::Until(deadline) => {
                Either::Left(tokio::time::timeout_at(deadline, work).map(Result::ok))
            }
            Wait::Try | Wait::Forever => Either::Right(work.map(Some)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_zero_timeout_is_a_try_and_a_huge_one_forever() {
        assert_eq!(Wait::timeout(Duration::ZERO), Wait::Try);
        assert_eq!(Wait::timeout(Duration::MAX), Wait::Forever);
        let now = Instant::now();
        assert_eq!(
            Wait::timeout(Duration::from_secs(3)),
            Wait::Until(now + Duration::from_secs(3))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_deadline_still_gets_its_attempt() {
        let wait = Wait::timeout(Duration::from_millis(10));
        assert!(!wait.has_expired());
        assert_eq!(wait.for_attempt(), wait);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(wait.has_expired());
        assert_eq!(wait.for_attempt(), Wait::Try);
        assert_eq!(Wait::Forever.for_attempt(), Wait::Forever);
        assert!(!Wait::Try.has_expired() && !Wait::Forever.has_expired());
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_deadline_cuts_work_short() {
        let slow = || tokio::time::sleep(Duration::from_secs(5));
        let wait = Wait::timeout(Duration::from_secs(1));
        assert_eq!(wait.bound(slow()).await, None);
        assert_eq!(Wait::Forever.bound(slow()).await, Some(()));
        assert_eq!(Wait::Try.bound(slow()).await, Some(()));
        let quick = Wait::timeout(Duration::from_secs(10));
        assert_eq!(quick.bound(async { 7 }).await, Some(7));
    }
}
