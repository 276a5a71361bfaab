//! The broadcast of connection-state changes: streams, the listener
//! dispatch, and the rule that a consumer lagging past a `Lost` still sees
//! it.

use std::sync::Arc;

use tokio::sync::broadcast;

use super::Inner;
use crate::state::ConnectionState;

/// How many state changes the broadcast keeps for a slow consumer.
pub(super) const EVENTS_CAPACITY: usize = 64;

/// The state broadcast and the number of `Lost` changes sent on it.
pub(super) struct Events {
    pub(super) tx: Option<broadcast::Sender<StateChange>>,
    pub(super) losses: u64,
}

/// One state change as broadcast: the state and how many `Lost` changes
/// there have been up to and including this one.
#[derive(Clone, Copy, Debug)]
pub(super) struct StateChange {
    pub(super) state: ConnectionState,
    pub(super) losses: u64,
}

/// One consumer of the state broadcast. If it lags, the broadcast skips
/// changes; comparing the loss count of the next change with the count it
/// has seen tells whether a `Lost` was among them, and then `Lost` is
/// delivered first. At most one change is held back for that, so nothing
/// grows.
pub(crate) struct StateEvents {
    pub(super) rx: Option<broadcast::Receiver<StateChange>>,
    pub(super) seen_losses: u64,
    pub(super) pending: Option<ConnectionState>,
}

impl StateEvents {
    /// The next change, or `None` once the framework is closed and every
    /// change sent before was delivered.
    pub(crate) async fn recv(&mut self) -> Option<ConnectionState> {
        if let Some(state) = self.pending.take() {
            return Some(state);
        }
        let rx = self.rx.as_mut()?;
        loop {
            match rx.recv().await {
                Ok(change) => {
                    let own = u64::from(change.state == ConnectionState::Lost);
                    let missed = change.losses.saturating_sub(own) > self.seen_losses;
                    self.seen_losses = change.losses;
                    if missed && change.state != ConnectionState::Lost {
                        tracing::warn!(next = %change.state, "a LOST skipped by lag is delivered first");
                        self.pending = Some(change.state);
                        return Some(ConnectionState::Lost);
                    }
                    return Some(change.state);
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(skipped = n, "state consumer lagged");
                }
                Err(broadcast::error::RecvError::Closed) => {
                    self.rx = None;
                    return None;
                }
            }
        }
    }
}

/// Calls the listeners for every state change, in order; a `Lost` skipped
/// because the listeners were slow is still delivered. Ends once the
/// framework is closed and every earlier change was delivered.
pub(super) async fn dispatch_listeners(inner: Arc<Inner>, mut events: StateEvents) {
    while let Some(state) = events.recv().await {
        inner.listeners.notify(state);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::mpsc as std_mpsc;
    use std::sync::Mutex;
    use std::time::Duration;

    use futures::{FutureExt, StreamExt};
    use zookeeper_client as zk;

    use super::*;
    use crate::framework::Framework;
    use crate::state::StateEvent;

    fn framework() -> Framework {
        Framework::builder()
            .connect_string("127.0.0.1:1")
            .build()
            .unwrap()
    }

    /// Connected, then `Suspended`, `Lost`, `Reconnected` (a new session),
    /// then more than the broadcast keeps of blips: the `Lost` is among the
    /// changes a lagging consumer skips.
    fn drive_past_a_loss(inner: &Inner) -> usize {
        let mut changes = 0;
        let mut step = |event| {
            let before = *inner.state_tx.borrow();
            inner.change_state(event);
            if *inner.state_tx.borrow() != before {
                changes += 1;
            }
        };
        step(StateEvent::Session(zk::SessionState::SyncConnected));
        step(StateEvent::Session(zk::SessionState::Disconnected));
        step(StateEvent::SuspendedTooLong);
        step(StateEvent::NewSession);
        for _ in 0..EVENTS_CAPACITY {
            step(StateEvent::Session(zk::SessionState::Disconnected));
            step(StateEvent::Session(zk::SessionState::SyncConnected));
        }
        changes
    }

    #[tokio::test]
    async fn a_lagging_stream_still_gets_lost() {
        let fw = framework();
        let mut stream = Box::pin(fw.state_changes());
        let changes = drive_past_a_loss(fw.inner());
        assert!(changes > EVENTS_CAPACITY + 3, "{changes}");
        // Read what is there without waiting (the stream is still open).
        let mut seen = Vec::new();
        for _ in 0..changes + 2 {
            match stream.next().now_or_never() {
                Some(Some(state)) => seen.push(state),
                _ => break,
            }
        }
        assert!(seen.len() <= EVENTS_CAPACITY + 1, "{}", seen.len());
        assert_eq!(
            seen.first(),
            Some(&ConnectionState::Lost),
            "the skipped LOST comes first: {seen:?}"
        );
        assert_eq!(
            seen.iter().filter(|s| **s == ConnectionState::Lost).count(),
            1
        );
        // Closing ends the stream after what was left.
        fw.inner().shut_down();
        assert_eq!(stream.next().now_or_never(), Some(None));
    }

    #[tokio::test]
    async fn a_consumer_that_keeps_up_gets_no_extra_lost() {
        let fw = framework();
        let mut stream = Box::pin(fw.state_changes());
        let inner = fw.inner();
        inner.change_state(StateEvent::Session(zk::SessionState::SyncConnected));
        inner.change_state(StateEvent::Session(zk::SessionState::Disconnected));
        inner.change_state(StateEvent::SuspendedTooLong);
        inner.change_state(StateEvent::NewSession);
        inner.shut_down();
        let seen: Vec<_> = stream.by_ref().take(10).collect().await;
        use ConnectionState::*;
        assert_eq!(seen, vec![Connected, Suspended, Lost, Reconnected]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_listener_still_gets_lost() {
        tokio::time::timeout(Duration::from_secs(30), async {
            let fw = framework();
            let inner = fw.inner().clone();
            let (release_tx, release_rx) = std_mpsc::channel::<()>();
            let release_rx = Mutex::new(release_rx);
            let seen = Arc::new(Mutex::new(Vec::new()));
            let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
            let first_tx = Mutex::new(Some(first_tx));
            let listener = {
                let seen = seen.clone();
                fw.add_listener(move |state| {
                    seen.lock().unwrap().push(state);
                    if let Some(tx) = first_tx.lock().unwrap().take() {
                        let _ = tx.send(());
                        // Stuck in the first call until the test says so.
                        let _ = release_rx
                            .lock()
                            .unwrap()
                            .recv_timeout(Duration::from_secs(20));
                    }
                })
            };
            let events = inner.subscribe_events();
            let dispatch = tokio::spawn(dispatch_listeners(inner.clone(), events));
            inner.change_state(StateEvent::Session(zk::SessionState::SyncConnected));
            first_rx.await.unwrap();
            // The listener is stuck on Connected; everything else overflows.
            inner.change_state(StateEvent::Session(zk::SessionState::Disconnected));
            inner.change_state(StateEvent::SuspendedTooLong);
            inner.change_state(StateEvent::NewSession);
            for _ in 0..EVENTS_CAPACITY {
                inner.change_state(StateEvent::Session(zk::SessionState::Disconnected));
                inner.change_state(StateEvent::Session(zk::SessionState::SyncConnected));
            }
            release_tx.send(()).unwrap();
            // Closing ends the dispatch once it delivered what was left.
            inner.shut_down();
            dispatch.await.unwrap();
            let seen = seen.lock().unwrap().clone();
            assert_eq!(seen.first(), Some(&ConnectionState::Connected));
            assert!(
                seen.contains(&ConnectionState::Lost),
                "the listener never heard LOST: {seen:?}"
            );
            assert_eq!(seen.last(), Some(&ConnectionState::Reconnected));
            drop(listener);
        })
        .await
        .unwrap();
    }
}
