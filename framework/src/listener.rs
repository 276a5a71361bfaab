//! Connection-state listeners: a callback trait and an async stream.
//!
//! Callbacks run on the framework's own dispatch task, one after another in
//! registration order, never on `zookeeper-client`'s event path: a slow or
//! blocking listener delays other listeners but never the session itself
//! (the hang Curator fixed with its "safe notify" executor).

use std::fmt;
use std::sync::{Arc, Mutex, Weak};

use crate::state::ConnectionState;

/// Receives every connection-state change of a [`Framework`](crate::Framework).
pub trait ConnectionStateListener: Send + Sync + 'static {
    /// Called once per state change, in order, on the framework's listener
    /// task. Keep it short; spawn a task for slow work.
    fn state_changed(&self, state: ConnectionState);
}

impl<F> ConnectionStateListener for F
where
    F: Fn(ConnectionState) + Send + Sync + 'static,
{
    fn state_changed(&self, state: ConnectionState) {
        self(state)
    }
}

type Entry = (u64, Arc<dyn ConnectionStateListener>);

/// The registered listeners.
#[derive(Default)]
pub(crate) struct Listeners {
    entries: Mutex<(u64, Vec<Entry>)>,
}

impl Listeners {
    pub(crate) fn add(
        self: &Arc<Self>,
        listener: Arc<dyn ConnectionStateListener>,
    ) -> ListenerHandle {
        let mut guard = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        guard.0 += 1;
        let id = guard.0;
        guard.1.push((id, listener));
        ListenerHandle {
            id,
            listeners: Arc::downgrade(self),
            detached: false,
        }
    }

    fn remove(&self, id: u64) {
        let mut guard = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        guard.1.retain(|(i, _)| *i != id);
    }

    /// Calls every listener with `state`; a panicking listener is logged and
    /// does not stop the others.
    pub(crate) fn notify(&self, state: ConnectionState) {
        let snapshot: Vec<Arc<dyn ConnectionStateListener>> = {
            let guard = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            guard.1.iter().map(|(_, l)| l.clone()).collect()
        };
        for listener in snapshot {
            let call = std::panic::AssertUnwindSafe(|| listener.state_changed(state));
            if std::panic::catch_unwind(call).is_err() {
                tracing::warn!(%state, "a connection-state listener panicked");
            }
        }
    }
}

impl fmt::Debug for Listeners {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.entries.lock().map(|g| g.1.len()).unwrap_or(0);
        f.debug_struct("Listeners").field("count", &n).finish()
    }
}

/// Keeps a listener registered; dropping it unregisters the listener
/// (use [`ListenerHandle::detach`] to keep it for the framework's lifetime).
#[must_use = "dropping the handle unregisters the listener"]
#[derive(Debug)]
pub struct ListenerHandle {
    id: u64,
    listeners: Weak<Listeners>,
    detached: bool,
}

impl ListenerHandle {
    /// Keeps the listener registered for as long as the framework lives.
    pub fn detach(mut self) {
        self.detached = true;
    }
}

impl Drop for ListenerHandle {
    fn drop(&mut self) {
        if self.detached {
            return;
        }
        if let Some(listeners) = self.listeners.upgrade() {
            listeners.remove(self.id);
        }
    }
}
