//! The read-write lock's drivers: how readers and writers sort together,
//! when each holds, and the downgrade (a read node level with the caller's
//! write node).

use zk_curator_framework::lock_internals::{
    Layout, LockInternalsDriver, ParticipantNode, PredicateResults, SortKey,
};
use zk_curator_framework::path::strip_protection;
use zk_curator_framework::{Error, LockLoss, Result};

use crate::layout::{
    kazoo_participant, read_write_kind, read_write_predicate, read_write_sort_key, Kind,
};
pub(crate) use crate::layout::{READ_LOCK_NAME, WRITE_LOCK_NAME};

/// The writer's rule ([`read_write_turn`](crate::layout::read_write_turn)):
/// first among all participants, readers included; it watches its
/// immediate predecessor.
#[derive(Debug)]
pub(crate) struct WriteDriver(pub(crate) Layout);

impl LockInternalsDriver for WriteDriver {
    fn layout(&self) -> Layout {
        self.0
    }

    fn sort_key(&self, name: &str, _lock_name: &str) -> SortKey {
        read_write_sort_key(name)
    }

    fn gets_the_lock(
        &self,
        sorted_children: &[String],
        our_name: &str,
        _max_leases: u32,
    ) -> Result<PredicateResults> {
        read_write_predicate(sorted_children, our_name)
    }

    /// One writer of a process at a time has a node; the others queue
    /// in-process.
    fn local_turns(&self, _max_leases: u32) -> Option<u32> {
        Some(1)
    }
}

/// The reader's rule ([`read_write_turn`](crate::layout::read_write_turn)):
/// granted when no writer is ahead; otherwise it watches the nearest writer
/// ahead (see [`InterProcessReadWriteLock`](crate::InterProcessReadWriteLock) for why not
/// the first, as Curator does).
#[derive(Debug)]
pub(crate) struct ReadDriver(pub(crate) Layout);

impl LockInternalsDriver for ReadDriver {
    fn layout(&self) -> Layout {
        self.0
    }

    fn sort_key(&self, name: &str, _lock_name: &str) -> SortKey {
        read_write_sort_key(name)
    }

    fn gets_the_lock(
        &self,
        sorted_children: &[String],
        our_name: &str,
        _max_leases: u32,
    ) -> Result<PredicateResults> {
        read_write_predicate(sorted_children, our_name)
    }

    /// The readers of one process that wait together share one node; a
    /// reader arriving after that node was granted queues a node of its own
    /// (behind any writer that came meanwhile).
    fn shares_node(&self) -> bool {
        true
    }
}

/// A read acquire by the write holder: the node takes the write node's
/// sequence (an ephemeral node named by the client), and is granted as long
/// as the write node is still there (then no other writer can be ahead).
#[derive(Debug)]
pub(crate) struct DowngradeDriver {
    layout: Layout,
    write_name: String,
    sequence: String,
}

impl DowngradeDriver {
    pub(crate) fn new(layout: Layout, write_name: &str) -> Result<Self> {
        let not_a_write_node = || {
            Error::InvalidArgument(format!(
                "{write_name} is not a write node with a sequence; cannot downgrade"
            ))
        };
        if read_write_kind(write_name) != Some(Kind::Write) {
            return Err(not_a_write_node());
        }
        let marker = match kazoo_participant(write_name) {
            Some((marker, _)) => marker,
            None => WRITE_LOCK_NAME,
        };
        let bare = strip_protection(write_name);
        let sequence = bare
            .rfind(marker)
            .and_then(|at| bare.get(at + marker.len()..))
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'-'))
            .ok_or_else(not_a_write_node)?;
        Ok(DowngradeDriver {
            layout,
            write_name: write_name.to_owned(),
            sequence: sequence.to_owned(),
        })
    }
}

impl LockInternalsDriver for DowngradeDriver {
    fn layout(&self) -> Layout {
        self.layout
    }

    fn participant_node(&self) -> ParticipantNode {
        ParticipantNode::EphemeralWithSequence(self.sequence.clone())
    }

    fn sort_key(&self, name: &str, _lock_name: &str) -> SortKey {
        read_write_sort_key(name)
    }

    fn gets_the_lock(
        &self,
        sorted_children: &[String],
        our_name: &str,
        _max_leases: u32,
    ) -> Result<PredicateResults> {
        if !sorted_children.iter().any(|c| c == our_name) {
            return Err(Error::lock_lost(our_name, LockLoss::NodeDeleted));
        }
        // Listed after our create on the same session: while the write node
        // is there, our read node sits level with the lock's holder.
        if !sorted_children.contains(&self.write_name) {
            // The write node is gone: there is nothing to downgrade.
            return Err(Error::lock_lost(&self.write_name, LockLoss::NodeDeleted));
        }
        Ok(PredicateResults::holds())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::layout::tests::{read, write};

    fn sorted(mut names: Vec<String>) -> Vec<String> {
        names.sort_by_cached_key(|n| read_write_sort_key(n));
        names
    }

    #[test]
    fn readers_and_writers_sort_together_by_sequence() {
        let names = sorted(vec![
            write(12),
            "foreign".to_owned(),
            read(3),
            write(7),
            read(10),
        ]);
        assert_eq!(
            names,
            vec![read(3), write(7), read(10), write(12), "foreign".to_owned()]
        );
    }

    #[test]
    fn reader_waits_for_the_nearest_writer_ahead() {
        let children = sorted(vec![read(1), write(2), read(3), write(4), read(5)]);
        assert_eq!(
            ReadDriver(Layout::Curator)
                .gets_the_lock(&children, &read(1), u32::MAX)
                .unwrap(),
            PredicateResults::holds()
        );
        assert_eq!(
            ReadDriver(Layout::Curator)
                .gets_the_lock(&children, &read(3), u32::MAX)
                .unwrap(),
            PredicateResults::watch(write(2))
        );
        assert_eq!(
            ReadDriver(Layout::Curator)
                .gets_the_lock(&children, &read(5), u32::MAX)
                .unwrap(),
            PredicateResults::watch(write(4))
        );
        assert!(matches!(
            ReadDriver(Layout::Curator).gets_the_lock(&children, &read(6), u32::MAX),
            Err(Error::LockLost { .. })
        ));
    }

    #[test]
    fn writer_must_be_first_and_watches_its_predecessor() {
        let children = sorted(vec![read(1), read(2), write(3)]);
        let driver = WriteDriver(Layout::Curator);
        assert_eq!(
            driver.gets_the_lock(&children, &write(3), 1).unwrap(),
            PredicateResults::watch(read(2))
        );
        let children = sorted(vec![write(3), read(4)]);
        assert_eq!(
            driver.gets_the_lock(&children, &write(3), 1).unwrap(),
            PredicateResults::holds()
        );
    }

    #[test]
    fn downgrade_driver_takes_the_write_sequence_and_needs_the_write_node() {
        let driver = DowngradeDriver::new(Layout::Curator, &write(42)).unwrap();
        assert_eq!(
            driver.participant_node(),
            ParticipantNode::EphemeralWithSequence("0000000042".into())
        );
        let ours = format!("_c_{}-__READ__0000000042", "1".repeat(36));
        let children = sorted(vec![write(43), ours.clone(), write(42)]);
        assert_eq!(
            driver.gets_the_lock(&children, &ours, u32::MAX).unwrap(),
            PredicateResults::holds()
        );
        let without_write = vec![ours.clone(), write(43)];
        assert!(matches!(
            driver.gets_the_lock(&without_write, &ours, u32::MAX),
            Err(Error::LockLost { .. })
        ));
        assert!(matches!(
            driver.gets_the_lock(&children, &read(1), u32::MAX),
            Err(Error::LockLost { .. })
        ));
        assert!(matches!(
            DowngradeDriver::new(Layout::Curator, &read(42)),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn kazoo_readers_and_writers_follow_kazoo_s_rules() {
        let hex = "0f8fad5bd9cb469fa16570867728950e";
        let r = |seq: u32| format!("{hex}__rlock__{seq:010}");
        let w = |seq: u32| format!("{hex}__lock__{seq:010}");
        let children = sorted(vec![w(4), r(1), r(2), w(3), r(5)]);
        assert_eq!(children, vec![r(1), r(2), w(3), w(4), r(5)]);
        let read = ReadDriver(Layout::Kazoo);
        let write = WriteDriver(Layout::Kazoo);
        assert_eq!(
            read.gets_the_lock(&children, &r(2), u32::MAX).unwrap(),
            PredicateResults::holds()
        );
        assert_eq!(
            write.gets_the_lock(&children, &w(3), 1).unwrap(),
            PredicateResults::watch(r(2))
        );
        assert_eq!(
            read.gets_the_lock(&children, &r(5), u32::MAX).unwrap(),
            PredicateResults::watch(w(4))
        );
        // A downgrade takes the write node's sequence, as a kazoo reader.
        let driver = DowngradeDriver::new(Layout::Kazoo, &w(42)).unwrap();
        assert_eq!(
            driver.participant_node(),
            ParticipantNode::EphemeralWithSequence("0000000042".into())
        );
        assert!(DowngradeDriver::new(Layout::Kazoo, &r(42)).is_err());
    }
}
