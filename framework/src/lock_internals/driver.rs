//! The pluggable part of a lock: [`LockInternalsDriver`].
//!
//! Every Curator lock is the same acquire loop plus a small policy: how the
//! participant node is created, how children sort, and whether a participant
//! holds the lock or which node it must watch. The loop lives in
//! [`LockInternals`](super::LockInternals); the policy is a driver. Drivers
//! are plain synchronous functions over names, so they are easy to write and
//! to unit test, and the loop keeps the hard parts (pipelining, protected
//! create, retries, cancellation) in one place.

use std::fmt;

use super::layout::Layout;
pub use super::layout::{standard_sort_key, SortKey};
use crate::{Error, LockLoss, Result};

/// How a participant node is created. The name is always
/// `_c_<uuid>-<lock name>` followed by the sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParticipantNode {
    /// An ephemeral, sequential node: it dies with the session (the standard).
    EphemeralSequential,
    /// A persistent, sequential node: it outlives the session and must be
    /// deleted by a release.
    PersistentSequential,
    /// An ephemeral node whose sequence is chosen by the client instead of
    /// the server (for a read lock taken by the write holder, which must sort
    /// level with its write node).
    EphemeralWithSequence(String),
}

impl ParticipantNode {
    /// Whether the node dies with its session.
    pub fn is_ephemeral(&self) -> bool {
        !matches!(self, ParticipantNode::PersistentSequential)
    }
}

/// What a driver decided for one participant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PredicateResults {
    /// Whether the participant holds the lock.
    pub holds_lock: bool,
    /// When not holding: the name (not the path) of the sibling whose
    /// deletion may change the answer.
    pub path_to_watch: Option<String>,
    /// When not holding: wait for any change among the lock's children
    /// instead of one sibling (for rules where any of several departures can
    /// let us in, e.g. K holders). Costs a wake-up per change for every
    /// participant waiting this way.
    pub watch_children: bool,
}

impl PredicateResults {
    /// The participant holds the lock.
    pub fn holds() -> Self {
        PredicateResults {
            holds_lock: true,
            path_to_watch: None,
            watch_children: false,
        }
    }

    /// The participant must wait for `name` to go away.
    pub fn watch(name: impl Into<String>) -> Self {
        PredicateResults {
            holds_lock: false,
            path_to_watch: Some(name.into()),
            watch_children: false,
        }
    }

    /// The participant must wait for any change among the lock's children.
    pub fn watch_children() -> Self {
        PredicateResults {
            holds_lock: false,
            path_to_watch: None,
            watch_children: true,
        }
    }
}

/// The policy of a lock recipe (Curator's `LockInternalsDriver`).
///
/// Implement it to build a lock of your own on [`LockInternals`]: a lock
/// admitting K holders, ordering by a priority carried in the name, a lock
/// whose nodes outlive the session, and so on.
///
/// [`LockInternals`]: super::LockInternals
pub trait LockInternalsDriver: Send + Sync + fmt::Debug + 'static {
    /// How the participant node of the next acquire is created. Defaults to
    /// [`ParticipantNode::EphemeralSequential`].
    fn participant_node(&self) -> ParticipantNode {
        ParticipantNode::EphemeralSequential
    }

    /// Whose protocol the participant nodes follow: how they are named,
    /// how they sort by default, and which other participants cannot see
    /// them (see [`Layout`]). Defaults to [`Layout::Curator`].
    fn layout(&self) -> Layout {
        Layout::Curator
    }

    /// The sort key of child `name` of a lock whose nodes are named
    /// `lock_name`. Defaults to [`Layout::sort_key`] of the driver's
    /// [`layout`](LockInternalsDriver::layout) ([`standard_sort_key`] for
    /// Curator's).
    fn sort_key(&self, name: &str, lock_name: &str) -> SortKey {
        self.layout().sort_key(name, lock_name)
    }

    /// Looks at every listing of the lock's `path` (its `children`, as
    /// listed) before anything is decided, and refuses to go on where
    /// participants are that cannot see ours. An `Err` ends the acquire
    /// (our node is given back first). Defaults to
    /// [`layout::check_children`](super::layout::check_children) for the
    /// driver's layout: participants of any known family other than ours
    /// are a [`Error::LayoutConflict`]; children carrying our `lock_name`
    /// and a sequence, and children no known recipe writes, are left alone.
    ///
    /// # Errors
    /// [`Error::LayoutConflict`], or a refusal of your own.
    fn check_children(&self, path: &str, children: &[String], lock_name: &str) -> Result<()> {
        super::layout::check_children(self.layout(), lock_name, path, children)
    }

    /// Given the children sorted by [`LockInternalsDriver::sort_key`] and our
    /// own node's name, decides whether we hold the lock or which sibling to
    /// watch. Defaults to [`standard_gets_the_lock`].
    ///
    /// # Errors
    /// [`Error::LockLost`] when `our_name` is not among the children (our
    /// node vanished: the session expired, or someone deleted it).
    fn gets_the_lock(
        &self,
        sorted_children: &[String],
        our_name: &str,
        max_leases: u32,
    ) -> Result<PredicateResults> {
        standard_gets_the_lock(sorted_children, our_name, max_leases)
    }

    /// How many acquires of one [`Framework`](crate::Framework) may have a
    /// participant node at once; the others wait their turn in-process, first
    /// come first served (see
    /// [`FrameworkBuilder::local_queue`](crate::FrameworkBuilder::local_queue)).
    /// `None` gives every acquire a node of its own, as Curator does.
    ///
    /// Return a number only if a participant that waits never needs another
    /// participant of the same process and lock to get ahead first (a mutex:
    /// the one local node either holds or waits for another process's). If
    /// the number is at least `max_leases`, a try that finds no free turn
    /// answers "taken" without asking ZooKeeper: every turn is out, so
    /// `max_leases` participants of this process hold or wait for holders.
    /// Defaults to `None`: a driver of your own keeps one node per acquire
    /// unless it says otherwise.
    fn local_turns(&self, max_leases: u32) -> Option<u32> {
        let _ = max_leases;
        None
    }

    /// Whether the blocking acquires of one [`Framework`](crate::Framework)
    /// that wait for this lock at the same time may share one participant
    /// node: right for a *shared* lock (a read lock), whose holders may hold
    /// together, never for an exclusive one.
    ///
    /// Acquires join the node of this process that is still waiting; once
    /// it is granted, later acquires get a node of their own, which queues
    /// behind any writer that arrived meanwhile (no starvation). Every
    /// member gets a hold of its own (loss latch, fence; the node's fencing
    /// token); the node is deleted when the last member releases. Only with
    /// the local queue on
    /// ([`FrameworkBuilder::local_queue`](crate::FrameworkBuilder::local_queue)),
    /// and never for tries, revocable acquires or acquires pinned to a
    /// session, which keep a node of their own. Defaults to `false`.
    fn shares_node(&self) -> bool {
        false
    }
}

/// The mutex and semaphore rule: the first `max_leases` participants hold
/// the lock. With one lease a waiter watches its immediate predecessor, so
/// one release wakes one waiter. With several, holders leave in any order,
/// so a waiter watches the children list (Curator's v1 semaphore watches the
/// node `max_leases` ahead and can sleep through a free slot).
///
/// # Errors
/// [`Error::LockLost`] when `our_name` is not in `sorted_children`;
/// [`Error::InvalidArgument`] when `max_leases` is zero.
pub fn standard_gets_the_lock(
    sorted_children: &[String],
    our_name: &str,
    max_leases: u32,
) -> Result<PredicateResults> {
    if max_leases == 0 {
        return Err(Error::InvalidArgument(
            "max_leases must be at least 1".into(),
        ));
    }
    let Some(index) = sorted_children.iter().position(|c| c == our_name) else {
        return Err(Error::lock_lost(our_name, LockLoss::NodeDeleted));
    };
    let max = max_leases as usize;
    if index < max {
        Ok(PredicateResults::holds())
    } else if max == 1 {
        // A mutex: only the node right ahead can let us in.
        Ok(PredicateResults::watch(sorted_children[index - 1].clone()))
    } else {
        // Several holders leave in any order: watching one of them could
        // miss the departure that frees a slot, so watch the whole list.
        Ok(PredicateResults::watch_children())
    }
}

/// The driver of Curator's mutex: ephemeral-sequential nodes, sorted by
/// sequence, the first `max_leases` hold the lock. Within one framework,
/// `max_leases` acquires at a time have a node (the rest queue in-process).
#[derive(Clone, Copy, Debug, Default)]
pub struct StandardLockInternalsDriver;

impl LockInternalsDriver for StandardLockInternalsDriver {
    /// The first `max_leases` participants hold, so `max_leases` turns.
    fn local_turns(&self, max_leases: u32) -> Option<u32> {
        Some(max_leases)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const UUID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

    fn node(seq: u32) -> String {
        format!("_c_{UUID}-lock-{seq:010}")
    }

    #[test]
    fn sorts_by_sequence_numerically_and_foreign_names_last() {
        let driver = StandardLockInternalsDriver;
        let mut names = vec![
            node(10),
            "garbage".to_owned(),
            node(9),
            "lock-0000000001".to_owned(),
        ];
        names.sort_by_key(|n| driver.sort_key(n, "lock-"));
        assert_eq!(
            names,
            vec![
                "lock-0000000001".to_owned(),
                node(9),
                node(10),
                "garbage".to_owned()
            ]
        );
    }

    #[test]
    fn a_wrapped_sequence_sorts_last_not_first() {
        let driver = StandardLockInternalsDriver;
        let before = format!("_c_{UUID}-lock-2147483647");
        let wrapped = format!("_c_{UUID}-lock--2147483648");
        let later = format!("_c_{UUID}-lock--000000001");
        let mut names = vec![later.clone(), wrapped.clone(), before.clone()];
        names.sort_by_key(|n| driver.sort_key(n, "lock-"));
        assert_eq!(names, vec![before.clone(), wrapped.clone(), later]);
        // The holder is the node before the wrap; the wrapped one waits.
        assert_eq!(
            standard_gets_the_lock(&names, &wrapped, 1).unwrap(),
            PredicateResults::watch(before)
        );
    }

    #[test]
    fn predecessor_is_watched() {
        let children = vec![node(1), node(2), node(3)];
        assert_eq!(
            standard_gets_the_lock(&children, &node(1), 1).unwrap(),
            PredicateResults::holds()
        );
        assert_eq!(
            standard_gets_the_lock(&children, &node(3), 1).unwrap(),
            PredicateResults::watch(node(2))
        );
        // Two leases: the third waits for any change (either holder may
        // leave first).
        assert_eq!(
            standard_gets_the_lock(&children, &node(2), 2).unwrap(),
            PredicateResults::holds()
        );
        assert_eq!(
            standard_gets_the_lock(&children, &node(3), 2).unwrap(),
            PredicateResults::watch_children()
        );
    }

    #[test]
    fn missing_node_is_lock_lost_and_zero_leases_refused() {
        let children = vec![node(1)];
        assert!(matches!(
            standard_gets_the_lock(&children, &node(2), 1),
            Err(Error::LockLost { .. })
        ));
        assert!(matches!(
            standard_gets_the_lock(&children, &node(1), 0),
            Err(Error::InvalidArgument(_))
        ));
    }
}
