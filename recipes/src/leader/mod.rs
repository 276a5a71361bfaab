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
//! Both answer the same questions (whether they lead, their term, waiting
//! for it, who takes part) through [`LeaderElection`], written once.
//!
//! # A term is a hold
//!
//! Each time a participant leads it gets a [`LeaderTerm`]: the engine's
//! [`Hold`](zk_curator_framework::lock_internals::Hold) on its node, so it
//! answers [`lost`](crate::Hold::lost), [`is_valid`](crate::Hold::is_valid),
//! [`fence`](crate::Hold::fence) and [`fencing_token`](crate::Hold::fencing_token)
//! with the meaning and the error-policy rules of every lock hold (the
//! guide's "Safety" chapter, `docs/guide/safety.md`). A leader can `select!` on the loss of its
//! term and write to ZooKeeper only while it leads; tokens grow strictly
//! from one term to the next. Curator leaves that to a connection-state
//! listener of the user's; here the term knows.

mod data;
mod election;
mod latch;
mod observer;
mod participant;
mod proclaim;
mod revocation;
mod selector;
mod term;

use std::future::Future;
use std::time::Duration;

use zk_curator_framework::{Framework, Result};

pub use self::latch::{
    CloseMode, LatchListenerHandle, LatchState, LeaderLatch, LeaderLatchListener,
};
pub use self::observer::{LeaderObserver, Observation, ObservedLeader};
pub use self::participant::Participant;
pub use self::selector::{LeaderSelector, LeaderSelectorListener};
pub use self::term::{LeaderTerm, Leadership};

/// What every participant of a leader election answers, the same for each
/// recipe: where it takes part, whether it leads, its term, waiting for
/// leadership, and who takes part.
///
/// [`LeaderLatch`] and [`LeaderSelector`] implement it, and no other type
/// can (the trait is sealed). These methods are written here only: bring
/// the trait into scope (`use zk_curator::LeaderElection;`, or every such
/// trait at once with `use zk_curator::prelude::*;`) to call them on a
/// latch or a selector, or take either through it:
///
/// ```no_run
/// use zk_curator::{LeaderElection, Result};
///
/// async fn lead_once(election: &impl LeaderElection) -> Result<()> {
///     let term = election.await_leadership().await?;
///     println!("{} leads {} (token {})", election.id(), election.path(), term.fencing_token());
///     term.lost().await;
///     Ok(())
/// }
/// ```
pub trait LeaderElection: sealed::Sealed {
    /// The election path.
    fn path(&self) -> &str {
        self.election().path()
    }

    /// The participant id (empty when the node carries the holder identity).
    fn id(&self) -> &str {
        self.election().id()
    }

    /// The framework the participant (the latch or the selector) runs on.
    fn framework(&self) -> &Framework {
        self.election().framework()
    }

    /// Whether the participant leads now: it has a term that is still valid
    /// (see [`Hold::is_valid`](crate::Hold::is_valid)). No I/O.
    fn has_leadership(&self) -> bool {
        self.election().has_leadership()
    }

    /// The current term, if the participant leads now (see
    /// [`has_leadership`](Self::has_leadership)).
    fn term(&self) -> Option<LeaderTerm> {
        self.election().term()
    }

    /// Waits until the participant leads, and returns its term (at once if
    /// it leads already).
    ///
    /// # Errors
    /// [`Error::NotStarted`](crate::Error::NotStarted) for a participant not
    /// started; [`Error::Closed`](crate::Error::Closed) once it is closed
    /// (before or while waiting), or its framework is; the error of the last
    /// attempt to queue when waiting cannot mend it (such as
    /// [`Error::NoAuth`](crate::Error::NoAuth) where the node may not be
    /// created; the participant keeps trying, and a later term clears it).
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes; dropping it changes nothing (the
    /// participant stays in the election, its node where it was).
    fn await_leadership(&self) -> impl Future<Output = Result<LeaderTerm>> + Send {
        self.election().await_leadership()
    }

    /// As [`await_leadership`](Self::await_leadership), for at most
    /// `timeout`: `Ok(None)` if it passes first (a zero timeout only looks).
    ///
    /// # Errors
    /// As [`await_leadership`](Self::await_leadership).
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    fn await_leadership_timeout(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<Option<LeaderTerm>>> + Send {
        self.election().await_leadership_timeout(timeout)
    }

    /// Every participant of the election, in queue order; the first is the
    /// leader.
    ///
    /// # Errors
    /// [`Error::Closed`](crate::Error::Closed) if the framework is closed;
    /// ZooKeeper errors that retrying could not overcome.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    fn participants(&self) -> impl Future<Output = Result<Vec<Participant>>> + Send {
        self.election().participants()
    }

    /// The leader of the election, if there are participants.
    ///
    /// # Errors
    /// As [`participants`](Self::participants).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    fn leader(&self) -> impl Future<Output = Result<Option<Participant>>> + Send {
        self.election().leader()
    }

    /// [`participants`](Self::participants) as of now, not as of the
    /// session's server: a sync first, so a follower behind the ensemble's
    /// leader catches up before it answers (see [`fresh`](crate::fresh) for
    /// what each form guarantees). One round trip more; use it where the
    /// answer is acted on.
    ///
    /// # Errors
    /// As [`participants`](Self::participants), and as
    /// [`fresh::synced`](crate::fresh::synced).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    fn synced_participants(&self) -> impl Future<Output = Result<Vec<Participant>>> + Send {
        self.election().synced_participants()
    }

    /// [`leader`](Self::leader) as of now (see
    /// [`synced_participants`](Self::synced_participants)).
    ///
    /// # Errors
    /// As [`synced_participants`](Self::synced_participants).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    fn synced_leader(&self) -> impl Future<Output = Result<Option<Participant>>> + Send {
        self.election().synced_leader()
    }

    /// Steps down now, if the participant leads: its term ends with
    /// [`LockLoss::Revoked`](crate::LockLoss::Revoked) (its fence refuses
    /// from then on), its node goes and the next participant leads; a latch
    /// queues again at the back, a selector requeues if auto-requeue is on
    /// (as at a revocation request, see `make_revocable`). Whether it led.
    /// Returns at once.
    fn step_down(&self) -> bool {
        self.election().step_down_now()
    }

    /// Sets the value this participant advertises while it leads (an
    /// address, a shard map), for its current term and every later one,
    /// and proclaims it now if it leads: through the term's fence (see
    /// [`LeaderTerm::proclaim`]), so that observers
    /// ([`LeaderObserver`]) report it as the leader's value. Not leading,
    /// it is kept for the next term, proclaimed as that term begins.
    ///
    /// # Errors
    /// As [`LeaderTerm::proclaim`], when it leads: notably
    /// [`Error::LockLost`](crate::Error::LockLost) if its term ended
    /// meanwhile (nothing written; the value is still kept for the next
    /// term).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped before it completes, the value may or may
    /// not have been kept and written (writes of one participant's value
    /// take turns, so the first poll may wait for an earlier one).
    fn proclaim(&self, value: impl Into<Vec<u8>>) -> impl Future<Output = Result<()>> + Send {
        self.election().proclaim(value.into())
    }
}

/// Keeps [`LeaderElection`] to this crate's recipes, whose read side it
/// writes once, on their shared [`Election`](election::Election).
mod sealed {
    /// A recipe with an [`Election`](super::election::Election).
    pub trait Sealed {
        /// The recipe's participant.
        fn election(&self) -> &super::election::Election;
    }
}

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

    #[allow(dead_code)]
    fn observer_futures_and_streams_are_send_and_static(observer: LeaderObserver) {
        fn send_static<T: Send + 'static>(_: &T) {}
        assert_send(&observer.leader());
        send_static(&observer.changes());
    }

    #[test]
    fn handles_are_send_sync() {
        assert_send_sync_static::<LeaderLatch>();
        assert_send_sync_static::<LeaderSelector>();
        assert_send_sync_static::<LeaderTerm>();
        assert_send_sync_static::<Leadership>();
        assert_send_sync_static::<Participant>();
        assert_send_sync_static::<LatchListenerHandle>();
        assert_send_sync_static::<LeaderObserver>();
        assert_send_sync_static::<Observation>();
    }
}
