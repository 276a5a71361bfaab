//! Fault injection for tests: the request matcher and lost-reply record (shared with the
//! testing crate's fault proxy) and the fault state the server handle and its connections share.
//!
//! These hooks are part of the server on purpose: a test of another client library can stall
//! the server or swallow a chosen reply without a proxy in between. They cost nothing unless
//! armed.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// ZooKeeper request type codes (the `type` field of a request header): the
/// codec's table, plus [`CREATES`](opcode::CREATES) and
/// [`has_leading_path`](opcode::has_leading_path).
pub mod opcode {
    pub use crate::codec::op::*;

    /// Every request type that creates a node.
    pub const CREATES: [i32; 4] = [CREATE, CREATE2, CREATE_CONTAINER, CREATE_TTL];

    /// Whether a request of this type starts (after the header) with the node path.
    pub fn has_leading_path(code: i32) -> bool {
        matches!(code, 1..=9 | 12 | 13 | 15 | 17..=21 | 103 | 104 | 106)
    }
}

/// Selects the request whose reply a lose-reply fault swallows
/// ([`EmbeddedServer::lose_reply_to_next`](crate::EmbeddedServer::lose_reply_to_next), or the
/// testing crate's fault proxy).
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct RequestMatcher {
    opcodes: Vec<i32>,
    path_contains: Option<String>,
}

impl RequestMatcher {
    /// Matches requests of any of the given types (see [`opcode`]).
    pub fn opcodes(codes: impl IntoIterator<Item = i32>) -> Self {
        RequestMatcher {
            opcodes: codes.into_iter().collect(),
            path_contains: None,
        }
    }

    /// Matches requests of one type (see [`opcode`]).
    pub fn opcode(code: i32) -> Self {
        Self::opcodes([code])
    }

    /// Matches every kind of node creation: [`opcode::CREATES`].
    pub fn creates() -> Self {
        Self::opcodes(opcode::CREATES)
    }

    /// Matches node deletion.
    pub fn deletes() -> Self {
        Self::opcode(opcode::DELETE)
    }

    /// Additionally requires the request's path to contain `fragment`.
    ///
    /// The path is the one right after the request header; for `multi` requests it is the path
    /// of the first operation. Requests without a path never match.
    pub fn path_contains(mut self, fragment: impl Into<String>) -> Self {
        self.path_contains = Some(fragment.into());
        self
    }

    /// Whether a request of type `code` with `path` matches.
    pub fn matches(&self, code: i32, path: Option<&str>) -> bool {
        if !self.opcodes.contains(&code) {
            return false;
        }
        match (&self.path_contains, path) {
            (None, _) => true,
            (Some(fragment), Some(path)) => path.contains(fragment.as_str()),
            (Some(_), None) => false,
        }
    }
}

/// The request whose reply a lose-reply fault swallowed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LostReply {
    /// Request id the client chose.
    pub xid: i32,
    /// Request type (see [`opcode`]).
    pub opcode: i32,
    /// The request's path, when it has one.
    pub path: Option<String>,
    /// Transaction id in the swallowed reply.
    pub zxid: i64,
    /// Error code in the swallowed reply; `0` means the request succeeded on the server.
    pub error_code: i32,
}

impl LostReply {
    /// A record of a swallowed reply (for fault injectors outside this crate, such as the
    /// testing crate's proxy).
    pub fn new(xid: i32, opcode: i32, path: Option<String>, zxid: i64, error_code: i32) -> Self {
        LostReply {
            xid,
            opcode,
            path,
            zxid,
            error_code,
        }
    }
}

/// Observes a lose-reply fault: one armed by
/// [`EmbeddedServer::lose_reply_to_next`](crate::EmbeddedServer::lose_reply_to_next), or by
/// a fault-injecting proxy in front of a server (built from the receiving end of the channel the
/// fault reports on).
#[derive(Clone, Debug)]
pub struct LostReplyHandle {
    fired: watch::Receiver<Option<LostReply>>,
}

impl From<watch::Receiver<Option<LostReply>>> for LostReplyHandle {
    fn from(fired: watch::Receiver<Option<LostReply>>) -> Self {
        LostReplyHandle { fired }
    }
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
    /// timeout or when the fault can no longer fire (replaced, or whoever armed it is gone).
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
                    // Biased: a fixed order of polling, nothing drawn from tokio's generator.
                    tokio::select! {
                        biased;
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
