//! The read-write lock's drivers: how readers and writers sort together,
//! when each holds, and the downgrade (a read node level with the caller's
//! write node).

use zk_curator_framework::lock_internals::{
    standard_gets_the_lock, standard_sort_key, LockInternalsDriver, ParticipantNode,
    PredicateResults, SortKey,
};
use zk_curator_framework::path::strip_protection;
use zk_curator_framework::{Error, LockLoss, Result};

/// The name Curator gives read participants (`_c_<uuid>-__READ__<seq>`).
pub(crate) const READ_LOCK_NAME: &str = "__READ__";
/// The name Curator gives write participants (`_c_<uuid>-__WRIT__<seq>`).
/// Both names must keep the same length (Curator insists on it).
pub(crate) const WRITE_LOCK_NAME: &str = "__WRIT__";

/// Sorts readers and writers together: by the sequence after the last
/// `__READ__` or `__WRIT__` in the name, whichever comes last (Curator's
/// sorter strips at the last `__READ__`, then at the last `__WRIT__`).
fn rw_sort_key(name: &str) -> SortKey {
    let unprotected = strip_protection(name);
    let lock_name = match (
        unprotected.rfind(READ_LOCK_NAME),
        unprotected.rfind(WRITE_LOCK_NAME),
    ) {
        (Some(read), Some(write)) if write > read => WRITE_LOCK_NAME,
        (None, Some(_)) => WRITE_LOCK_NAME,
        _ => READ_LOCK_NAME,
    };
    standard_sort_key(name, lock_name)
}

fn is_writer(name: &str) -> bool {
    strip_protection(name).contains(WRITE_LOCK_NAME)
}

/// The writer's rule: first among all participants, readers included; it
/// watches its immediate predecessor.
#[derive(Debug)]
pub(crate) struct WriteDriver;

impl LockInternalsDriver for WriteDriver {
    fn sort_key(&self, name: &str, _lock_name: &str) -> SortKey {
        rw_sort_key(name)
    }

    fn gets_the_lock(
        &self,
        sorted_children: &[String],
        our_name: &str,
        max_leases: u32,
    ) -> Result<PredicateResults> {
        standard_gets_the_lock(sorted_children, our_name, max_leases)
    }

    /// One writer of a process at a time has a node; the others queue
    /// in-process.
    fn local_turns(&self, _max_leases: u32) -> Option<u32> {
        Some(1)
    }
}

/// The reader's rule: granted when no writer is ahead; otherwise it watches
/// the nearest writer ahead (see [`InterProcessReadWriteLock`](crate::InterProcessReadWriteLock) for why not
/// the first, as Curator does).
#[derive(Debug)]
pub(crate) struct ReadDriver;

impl LockInternalsDriver for ReadDriver {
    fn sort_key(&self, name: &str, _lock_name: &str) -> SortKey {
        rw_sort_key(name)
    }

    fn gets_the_lock(
        &self,
        sorted_children: &[String],
        our_name: &str,
        _max_leases: u32,
    ) -> Result<PredicateResults> {
        read_gets_the_lock(sorted_children, our_name)
    }

    /// The readers of one process that wait together share one node; a
    /// reader arriving after that node was granted queues a node of its own
    /// (behind any writer that came meanwhile).
    fn shares_node(&self) -> bool {
        true
    }
}

fn read_gets_the_lock(sorted_children: &[String], our_name: &str) -> Result<PredicateResults> {
    let mut nearest_writer = None;
    for child in sorted_children {
        if child == our_name {
            return Ok(match nearest_writer {
                None => PredicateResults::holds(),
                Some(writer) => PredicateResults::watch(writer),
            });
        }
        if is_writer(child) {
            nearest_writer = Some(child.as_str());
        }
    }
    Err(Error::lock_lost(our_name, LockLoss::NodeDeleted))
}

/// A read acquire by the write holder: the node takes the write node's
/// sequence (an ephemeral node named by the client), and is granted as long
/// as the write node is still there (then no other writer can be ahead).
#[derive(Debug)]
pub(crate) struct DowngradeDriver {
    write_name: String,
    sequence: String,
}

impl DowngradeDriver {
    pub(crate) fn new(write_name: &str) -> Result<Self> {
        let sequence = strip_protection(write_name)
            .rfind(WRITE_LOCK_NAME)
            .and_then(|at| strip_protection(write_name).get(at + WRITE_LOCK_NAME.len()..))
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'-'))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{write_name} is not a write node with a sequence; cannot downgrade"
                ))
            })?;
        Ok(DowngradeDriver {
            write_name: write_name.to_owned(),
            sequence: sequence.to_owned(),
        })
    }
}

impl LockInternalsDriver for DowngradeDriver {
    fn participant_node(&self) -> ParticipantNode {
        ParticipantNode::EphemeralWithSequence(self.sequence.clone())
    }

    fn sort_key(&self, name: &str, _lock_name: &str) -> SortKey {
        rw_sort_key(name)
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
    use zk_curator_framework::path::Sequence;

    const UUID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

    fn read(seq: u32) -> String {
        format!("_c_{UUID}-__READ__{seq:010}")
    }

    fn write(seq: u32) -> String {
        format!("_c_{UUID}-__WRIT__{seq:010}")
    }

    fn sorted(mut names: Vec<String>) -> Vec<String> {
        names.sort_by_cached_key(|n| rw_sort_key(n));
        names
    }

    #[test]
    fn lock_names_have_the_same_length() {
        assert_eq!(READ_LOCK_NAME.len(), WRITE_LOCK_NAME.len());
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
        assert_eq!(rw_sort_key(&read(5)), rw_sort_key(&write(5)));
        // The last lock name wins, as in Curator's two-step strip.
        assert_eq!(
            rw_sort_key("__WRIT__x__READ__0000000004"),
            SortKey::Sequence(Sequence::new(4))
        );
        assert_eq!(
            rw_sort_key("__READ__x__WRIT__0000000004"),
            SortKey::Sequence(Sequence::new(4))
        );
    }

    #[test]
    fn reader_waits_for_the_nearest_writer_ahead() {
        let children = sorted(vec![read(1), write(2), read(3), write(4), read(5)]);
        assert_eq!(
            read_gets_the_lock(&children, &read(1)).unwrap(),
            PredicateResults::holds()
        );
        assert_eq!(
            read_gets_the_lock(&children, &read(3)).unwrap(),
            PredicateResults::watch(write(2))
        );
        assert_eq!(
            read_gets_the_lock(&children, &read(5)).unwrap(),
            PredicateResults::watch(write(4))
        );
        assert!(matches!(
            read_gets_the_lock(&children, &read(6)),
            Err(Error::LockLost { .. })
        ));
    }

    #[test]
    fn writer_must_be_first_and_watches_its_predecessor() {
        let children = sorted(vec![read(1), read(2), write(3)]);
        let driver = WriteDriver;
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
        let driver = DowngradeDriver::new(&write(42)).unwrap();
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
            DowngradeDriver::new(&read(42)),
            Err(Error::InvalidArgument(_))
        ));
    }
}
