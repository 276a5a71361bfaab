//! A connection's queue of unsent frames, with its size in bytes: the basis of the server's
//! backpressure.
//!
//! Replies and watch notifications are queued under the state lock and written by the
//! connection's task. The task stops reading requests while the queue holds more than the
//! connection's outstanding-bytes limit (so a client that does not read its replies stops
//! being served, as ZooKeeper stops reading from such a socket), and resumes once the writer
//! has drained it. Frames that other sessions' writes queue (notifications) are not held
//! back by that; if they pile up past a hard cap the connection is closed instead, and the
//! client re-registers its watches when it reconnects.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::sync::Notify;

/// Something for a connection's writer.
#[derive(Debug)]
pub enum Outbound {
    /// Write this frame.
    Frame(Vec<u8>),
    /// Close the connection (after everything queued before).
    Close,
}

#[derive(Debug)]
struct Shared {
    /// Bytes queued and not yet written.
    queued: AtomicUsize,
    /// Set once the hard cap was passed (the connection is closing).
    overflowed: AtomicBool,
    /// Queue size beyond which the connection is closed.
    hard_cap: usize,
    /// Woken once the hard cap is passed: the writer drops the connection at once, without
    /// first writing what is queued (its client is not reading it).
    overflow: Notify,
}

/// The queueing side, kept by the state.
#[derive(Clone, Debug)]
pub struct Outbox {
    tx: UnboundedSender<Outbound>,
    shared: Arc<Shared>,
}

/// The writing side, kept by the connection's task.
#[derive(Debug)]
pub struct OutboxReceiver {
    rx: UnboundedReceiver<Outbound>,
    shared: Arc<Shared>,
}

/// A new queue that closes its connection once more than `hard_cap` bytes are waiting.
pub fn outbox(hard_cap: usize) -> (Outbox, OutboxReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        queued: AtomicUsize::new(0),
        overflowed: AtomicBool::new(false),
        hard_cap,
        overflow: Notify::new(),
    });
    (
        Outbox {
            tx,
            shared: shared.clone(),
        },
        OutboxReceiver { rx, shared },
    )
}

impl Outbox {
    /// Queues a frame; past the hard cap, queues a close instead (once).
    pub fn frame(&self, frame: Vec<u8>) {
        if self.shared.overflowed.load(Ordering::Acquire) {
            return;
        }
        let len = frame.len();
        let before = self.shared.queued.fetch_add(len, Ordering::AcqRel);
        if before.saturating_add(len) > self.shared.hard_cap {
            self.shared.queued.fetch_sub(len, Ordering::AcqRel);
            if !self.shared.overflowed.swap(true, Ordering::AcqRel) {
                tracing::debug!(
                    queued = before,
                    cap = self.shared.hard_cap,
                    "connection's unsent frames exceed the hard cap; closing it"
                );
                self.shared.overflow.notify_one();
                let _ = self.tx.send(Outbound::Close);
            }
            return;
        }
        if self.tx.send(Outbound::Frame(frame)).is_err() {
            self.shared.queued.fetch_sub(len, Ordering::AcqRel);
        }
    }

    /// Queues a close (after everything queued before).
    pub fn close(&self) {
        let _ = self.tx.send(Outbound::Close);
    }

    /// Bytes queued and not yet written.
    pub fn queued(&self) -> usize {
        self.shared.queued.load(Ordering::Acquire)
    }
}

impl OutboxReceiver {
    /// The next queued item; `None` once every sender is gone.
    ///
    /// # Cancel safety
    /// Cancel safe (as `tokio::sync::mpsc::UnboundedReceiver::recv`).
    pub async fn recv(&mut self) -> Option<Outbound> {
        self.rx.recv().await
    }

    /// Resolves once the queue passed its hard cap (at once if it already did).
    ///
    /// # Cancel safety
    /// Cancel safe: the wake-up is kept for the next call.
    pub async fn overflowed(&self) {
        if self.shared.overflowed.load(Ordering::Acquire) {
            return;
        }
        self.shared.overflow.notified().await;
    }

    /// The next queued item if there is one now.
    pub fn try_recv(&mut self) -> Option<Outbound> {
        self.rx.try_recv().ok()
    }

    /// Records that `len` bytes taken off the queue were written (or dropped).
    pub fn written(&self, len: usize) {
        self.shared.queued.fetch_sub(len, Ordering::AcqRel);
    }

    /// Bytes queued and not yet written.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.shared.queued.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_bytes_and_closes_past_the_cap() {
        let (out, mut rx) = outbox(10);
        out.frame(vec![0; 4]);
        out.frame(vec![0; 4]);
        assert_eq!(out.queued(), 8);
        out.frame(vec![0; 4]); // 12 > 10: a close instead
        out.frame(vec![0; 1]); // ignored after the overflow
        assert_eq!(out.queued(), 8);
        let mut frames = 0;
        let mut closed = false;
        while let Some(item) = rx.try_recv() {
            match item {
                Outbound::Frame(f) => {
                    frames += 1;
                    rx.written(f.len());
                }
                Outbound::Close => closed = true,
            }
        }
        assert_eq!((frames, closed, rx.queued()), (2, true, 0));
    }
}
