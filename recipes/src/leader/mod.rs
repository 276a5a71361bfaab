//! Leader election on the lock engine: [`LeaderLatch`] and
//! [`LeaderSelector`] (Curator's recipes, on Curator's node layouts).
//!
//! # One queue, two ways to lead
//!
//! The participants of an election are the lock engine's queue of
//! protected ephemeral sequential nodes under the election path: the first
//! leads, each other watches only the node right ahead of it, so a leader's
//! departure wakes one participant (no herd). No second queue lives here:
//! both recipes drive
//! [`LockInternals`](zk_curator_framework::lock_internals::LockInternals)
//! with one holder, and each participant's node carries its id.
//!
//! * [`LeaderLatch`] (`latch-` nodes) stays a candidate until closed: you
//!   ask whether it leads, wait for it, or listen to its changes.
//! * [`LeaderSelector`] (`lock-` nodes, a mutex's queue) runs a function of
//!   yours while it leads, and cancels it when the term ends.
//!
//! # A term is a hold
//!
//! Each time a participant leads it gets a [`LeaderTerm`]: the engine's
//! [`Hold`](zk_curator_framework::lock_internals::Hold) on its node, so it
//! answers [`lost`](LeaderTerm::lost), [`is_valid`](LeaderTerm::is_valid),
//! [`fence`](LeaderTerm::fence) and [`fencing_token`](LeaderTerm::fencing_token)
//! with the meaning and the error-policy rules of every lock hold (the
//! README's "Safety" section). A leader can `select!` on the loss of its
//! term and write to ZooKeeper only while it leads; tokens grow strictly
//! from one term to the next. Curator leaves that to a connection-state
//! listener of the user's; here the term knows.

/// The read side every election recipe offers, written once: each recipe
/// (`$kind` names it in the docs) has a private `election()` giving its
/// [`Election`](election::Election).
macro_rules! leadership_queries {
    ($kind:literal) => {
        /// The election path.
        pub fn path(&self) -> &str {
            self.election().path()
        }

        /// The participant id (empty when the node carries the holder identity).
        pub fn id(&self) -> &str {
            self.election().id()
        }

        #[doc = concat!("The framework the ", $kind, " runs on.")]
        pub fn framework(&self) -> &Framework {
            self.election().framework()
        }

        #[doc = concat!("Whether the ", $kind, " leads now: it has a term that is still valid")]
        /// (see [`LeaderTerm::is_valid`]). No I/O.
        pub fn has_leadership(&self) -> bool {
            self.election().has_leadership()
        }

        #[doc = concat!("The current term, if the ", $kind, " leads now (see")]
        /// [`has_leadership`](Self::has_leadership)).
        pub fn term(&self) -> Option<LeaderTerm> {
            self.election().term()
        }

        #[doc = concat!("Waits until the ", $kind, " leads, and returns its term (at once if it")]
        /// leads already).
        ///
        /// # Errors
        #[doc = concat!("[`Error::NotStarted`] for a ", $kind, " not started; [`Error::Closed`] once")]
        #[doc = concat!("the ", $kind, " is closed (before or while waiting), or its framework is;")]
        /// the error of the last attempt to queue when waiting cannot mend it
        /// (such as [`Error::NoAuth`] where the node may not be created; the
        /// participant keeps trying, and a later term clears it).
        ///
        /// # Cancel safety
        /// Cancel safe: it only observes; dropping it changes nothing (the
        /// participant stays in the election, its node where it was).
        pub async fn await_leadership(&self) -> Result<LeaderTerm> {
            self.election().await_leadership().await
        }

        /// As [`await_leadership`](Self::await_leadership), for at most
        /// `timeout`: `Ok(None)` if it passes first (a zero timeout only looks).
        ///
        /// # Errors
        /// As [`await_leadership`](Self::await_leadership).
        ///
        /// # Cancel safety
        /// Cancel safe: it only observes.
        pub async fn await_leadership_timeout(
            &self,
            timeout: Duration,
        ) -> Result<Option<LeaderTerm>> {
            self.election().await_leadership_timeout(timeout).await
        }

        /// Every participant of the election, in queue order; the first is the
        /// leader.
        ///
        /// # Errors
        /// [`Error::Closed`] if the framework is closed; ZooKeeper errors that
        /// retrying could not overcome.
        ///
        /// # Cancel safety
        /// Cancel safe: it only reads.
        pub async fn participants(&self) -> Result<Vec<Participant>> {
            self.election().participants().await
        }

        /// The leader of the election, if there are participants.
        ///
        /// # Errors
        /// As [`participants`](Self::participants).
        ///
        /// # Cancel safety
        /// Cancel safe: it only reads.
        pub async fn leader(&self) -> Result<Option<Participant>> {
            self.election().leader().await
        }
    };
}

mod election;
mod latch;
mod participant;
mod selector;
mod term;

pub use self::latch::{
    CloseMode, LatchListenerHandle, LatchState, LeaderLatch, LeaderLatchListener, LATCH_NAME,
};
pub use self::participant::Participant;
pub use self::selector::{LeaderSelector, LeaderSelectorListener};
pub use self::term::{LeaderTerm, Leadership};

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync_static<T: Send + Sync + 'static>() {}

    #[allow(dead_code)]
    fn futures_and_streams_are_send(latch: LeaderLatch, selector: LeaderSelector) {
        assert_send(&latch.await_leadership());
        assert_send(&latch.await_leadership_timeout(std::time::Duration::ZERO));
        assert_send(&latch.leadership_changes());
        assert_send(&latch.participants());
        assert_send(&latch.leader());
        assert_send(&latch.close());
        assert_send(&latch.close_with(CloseMode::NotifyLeader));
        assert_send(&selector.await_leadership());
        assert_send(&selector.leadership_changes());
        assert_send(&selector.participants());
        assert_send(&selector.close());
    }

    #[test]
    fn handles_are_send_sync() {
        assert_send_sync_static::<LeaderLatch>();
        assert_send_sync_static::<LeaderSelector>();
        assert_send_sync_static::<LeaderTerm>();
        assert_send_sync_static::<Leadership>();
        assert_send_sync_static::<Participant>();
        assert_send_sync_static::<LatchListenerHandle>();
    }
}
