//! [`StateWatcher`]: the connection state as values, never as a borrow.

use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::state::ConnectionState;

/// A watch on a framework's connection state, from
/// [`Framework::state_watcher`](crate::Framework::state_watcher).
///
/// Every method hands out a copy of the state. Unlike a bare
/// `tokio::sync::watch::Receiver`, there is no borrow to keep: a borrow held
/// across an `.await` would stop the framework from recording its next state
/// change (and from closing), because the change waits for every borrow to
/// end.
///
/// `None` stands for "not connected yet" (before the first connection).
#[derive(Debug, Clone)]
pub struct StateWatcher {
    rx: watch::Receiver<Option<ConnectionState>>,
}

impl StateWatcher {
    pub(crate) fn new(rx: watch::Receiver<Option<ConnectionState>>) -> Self {
        Self { rx }
    }

    /// The current state, without marking it seen.
    pub fn get(&self) -> Option<ConnectionState> {
        *self.rx.borrow()
    }

    /// The current state, marked seen: [`changed`](Self::changed) then
    /// waits for a later one.
    pub fn get_and_update(&mut self) -> Option<ConnectionState> {
        *self.rx.borrow_and_update()
    }

    /// Waits for a state this watcher has not seen yet and returns it
    /// (marked seen). Changes in quick succession may be seen only as the
    /// last of them; [`Framework::state_changes`](crate::Framework::state_changes)
    /// delivers each one.
    ///
    /// # Errors
    /// [`Error::Closed`] once the framework is gone (every handle dropped).
    ///
    /// # Cancel safety
    /// Cancel safe: dropped before it returns, it has marked nothing seen.
    pub async fn changed(&mut self) -> Result<Option<ConnectionState>> {
        self.rx.changed().await.map_err(|_| Error::Closed)?;
        Ok(self.get_and_update())
    }

    /// Returns the current state if `accept` takes it, otherwise waits for
    /// the first later state it takes. The state returned is marked seen.
    ///
    /// # Errors
    /// [`Error::Closed`] once the framework is gone (every handle dropped)
    /// before an accepted state.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes the state.
    pub async fn wait_for(
        &mut self,
        mut accept: impl FnMut(Option<ConnectionState>) -> bool,
    ) -> Result<Option<ConnectionState>> {
        let seen = self
            .rx
            .wait_for(|state| accept(*state))
            .await
            .map_err(|_| Error::Closed)?;
        Ok(*seen)
    }
}
