use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

pub struct Deadline {
    // None: never. The sleep is dropped once it fired.
    timer: Option<Pin<Box<Sleep>>>,
    deadline: Option<Instant>,
    elapsed: bool,
}

impl Deadline {
    pub fn never() -> Self {
        Self { timer: None, deadline: None, elapsed: false }
    }

    pub fn until(deadline: Instant) -> Self {
        let timer = Box::pin(tokio::time::sleep_until(deadline));
        Self { timer: Some(timer), deadline: Some(deadline), elapsed: false }
    }

    pub fn elapsed(&self) -> bool {
        self.elapsed
    }

    /// Remaining timeout.
    pub fn timeout(&self) -> Duration {
        match self.deadline.as_ref() {
            None => Duration::MAX,
            Some(deadline) => deadline.saturating_duration_since(Instant::now()),
        }
    }
}

impl Future for Deadline {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.elapsed {
            // Fused: an elapsed deadline stays pending, as a fused timer did.
            return Poll::Pending;
        }
        match this.timer.as_mut() {
            None => Poll::Pending,
            Some(timer) => match timer.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    this.elapsed = true;
                    this.timer = None;
                    Poll::Ready(())
                },
                Poll::Pending => Poll::Pending,
            },
        }
    }
}
