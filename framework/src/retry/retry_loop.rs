//! [`RetryLoop`]: the one loop that asks a [`RetryPolicy`] and sleeps
//! between attempts. Every place of the framework and the recipes that
//! tries again under the retry policy (a call on a session, an acquire
//! starting over, a create whose outcome is unknown, a semaphore's restart)
//! counts its attempts here; the loops that never give up take their pauses
//! from a [`Backoff`](super::Backoff) instead.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::RetryPolicy;
use crate::error::{Error, Result};

/// The retries of one operation under one policy: how many were made, since
/// when, and the pause before the next.
#[derive(Debug)]
pub struct RetryLoop<'a> {
    policy: &'a dyn RetryPolicy,
    started: Instant,
    retries: u32,
}

impl<'a> RetryLoop<'a> {
    /// A loop whose first attempt starts now.
    pub fn new(policy: &'a dyn RetryPolicy) -> Self {
        RetryLoop {
            policy,
            started: Instant::now(),
            retries: 0,
        }
    }

    /// How many retries were allowed so far.
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// Asks the policy for one more attempt after `err`: the pause to take,
    /// counted as a retry.
    ///
    /// # Errors
    /// `err` itself when the policy gives up.
    pub fn allow(&mut self, err: Error) -> Result<Duration> {
        match self
            .policy
            .allow_retry(self.retries, self.started.elapsed())
        {
            Some(delay) => {
                self.retries += 1;
                Ok(delay)
            }
            None => {
                tracing::debug!(%err, retries = self.retries, "retry policy gave up");
                Err(err)
            }
        }
    }

    /// After a failed attempt (`err`): waits the policy's pause, then
    /// returns for the next attempt.
    ///
    /// # Errors
    /// `err` when the policy gives up; [`Error::Closed`] when `closed`
    /// completes first (the framework closing).
    ///
    /// # Cancel safety
    /// Cancel safe: it only sleeps (the retry stays counted).
    pub async fn next(&mut self, err: Error, closed: impl Future<Output = ()>) -> Result<()> {
        let delay = self.allow(err)?;
        tracing::debug!(retries = self.retries, ?delay, "retrying after a pause");
        tokio::select! {
            _ = tokio::time::sleep(delay) => Ok(()),
            _ = closed => Err(Error::Closed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::{RetryNTimes, RetryUntilElapsed};

    #[tokio::test(start_paused = true)]
    async fn counts_sleeps_and_gives_up_with_the_last_error() {
        let policy = RetryNTimes::new(2, Duration::from_millis(100)).expect("a valid policy");
        let mut retry = RetryLoop::new(&policy);
        let started = tokio::time::Instant::now();
        let never = std::future::pending::<()>;
        assert_eq!(retry.next(Error::ConnectionLoss, never()).await, Ok(()));
        assert_eq!(retry.next(Error::ConnectionLoss, never()).await, Ok(()));
        assert_eq!(retry.retries(), 2);
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(
            retry.next(Error::Throttled, never()).await,
            Err(Error::Throttled)
        );
        assert_eq!(retry.retries(), 2);
    }

    /// The loop's clock is tokio's: a time budget is spent by paused time
    /// (issue 33). Three pauses of 100 ms fit in 350 ms, a fourth does not.
    #[tokio::test(start_paused = true)]
    async fn a_time_budget_is_spent_on_the_paused_clock() {
        let policy = RetryUntilElapsed::new(Duration::from_millis(350), Duration::from_millis(100))
            .expect("a valid policy");
        let mut retry = RetryLoop::new(&policy);
        let never = std::future::pending::<()>;
        for _ in 0..3 {
            assert_eq!(retry.next(Error::ConnectionLoss, never()).await, Ok(()));
        }
        assert_eq!(
            retry.next(Error::ConnectionLoss, never()).await,
            Err(Error::ConnectionLoss),
            "a fourth pause would end past the budget"
        );
        assert_eq!(retry.retries(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_closing_framework_ends_the_pause() {
        let policy = RetryNTimes::new(5, Duration::from_secs(60)).expect("a valid policy");
        let mut retry = RetryLoop::new(&policy);
        assert_eq!(
            retry.next(Error::ConnectionLoss, async {}).await,
            Err(Error::Closed)
        );
    }
}
