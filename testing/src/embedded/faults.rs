//! Fault injection state shared by the server handle and its connections.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::proxy::{LostReply, RequestMatcher};

/// Observes a fault armed by
/// [`EmbeddedServer::lose_reply_to_next`](super::EmbeddedServer::lose_reply_to_next).
#[derive(Clone, Debug)]
pub struct LostReplyHandle {
    fired: watch::Receiver<Option<LostReply>>,
}

impl LostReplyHandle {
    /// Whether the reply has been swallowed (and its connection closed) already.
    pub fn fired(&self) -> bool {
        self.fired.borrow().is_some()
    }

    /// The swallowed reply, once the fault fired.
    pub fn lost_reply(&self) -> Option<LostReply> {
        self.fired.borrow().clone()
    }

    /// Waits up to `timeout` for the fault to fire; returns the swallowed reply, or `None` on
    /// timeout or when the fault can no longer fire (replaced, or the server is gone).
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    pub async fn wait(&self, timeout: Duration) -> Option<LostReply> {
        let mut fired = self.fired.clone();
        let wait = async {
            fired
                .wait_for(|lost| lost.is_some())
                .await
                .map(|lost| lost.clone())
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(lost)) => lost,
            Ok(Err(_)) | Err(_) => self.lost_reply(),
        }
    }
}

/// An armed, not yet consumed lose-reply fault.
#[derive(Debug)]
pub(crate) struct Armed {
    pub(crate) matcher: RequestMatcher,
    pub(crate) fired: watch::Sender<Option<LostReply>>,
}

/// Faults in force.
#[derive(Debug)]
pub(crate) struct Faults {
    stalled_until: watch::Sender<Option<Instant>>,
    armed: Mutex<Option<Armed>>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            stalled_until: watch::channel(None).0,
            armed: Mutex::new(None),
        }
    }
}

impl Faults {
    fn armed(&self) -> MutexGuard<'_, Option<Armed>> {
        self.armed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops answering until `until` (`None` resumes at once).
    pub(crate) fn stall_until(&self, until: Option<Instant>) {
        self.stalled_until.send_replace(until);
    }

    /// Whether the server is stalled right now.
    pub(crate) fn is_stalled(&self) -> bool {
        matches!(*self.stalled_until.borrow(), Some(until) if until > Instant::now())
    }

    /// Waits until the server is not stalled.
    pub(crate) async fn wait_unstalled(&self) {
        let mut rx = self.stalled_until.subscribe();
        loop {
            let until = *rx.borrow_and_update();
            match until {
                Some(until) if until > Instant::now() => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(until) => {}
                        changed = rx.changed() => {
                            if changed.is_err() {
                                return;
                            }
                        }
                    }
                }
                _ => return,
            }
        }
    }

    /// Arms a lose-reply fault, replacing any unconsumed one.
    pub(crate) fn arm(&self, matcher: RequestMatcher) -> LostReplyHandle {
        let (fired, receiver) = watch::channel(None);
        *self.armed() = Some(Armed { matcher, fired });
        LostReplyHandle { fired: receiver }
    }

    /// Disarms an unconsumed fault.
    pub(crate) fn disarm(&self) {
        self.armed().take();
    }

    /// Consumes the armed fault if this request matches it.
    pub(crate) fn take_if_matches(&self, opcode: i32, path: Option<&str>) -> Option<Armed> {
        let mut armed = self.armed();
        if armed
            .as_ref()
            .is_some_and(|a| a.matcher.matches(opcode, path))
        {
            armed.take()
        } else {
            None
        }
    }
}
