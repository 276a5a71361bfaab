//! Whose protocol a lock's participant nodes follow ([`Layout`]), what every
//! known protocol's nodes look like ([`Family`]), and the check that keeps a
//! lock from queueing where the participants already there cannot see it
//! ([`check_children`]).
//!
//! Two libraries exclude each other on a lock path only if each one reads
//! the other's nodes as participants. Apache Curator's nodes
//! (`_c_<uuid>-lock-<seq>`) and kazoo's (`<uuid hex>__lock__<seq>`) do not:
//! kazoo keeps only names that end in `__lock__` or `__rlock__` and ten
//! digits, and Curator sorts names without its lock name after its own. A
//! Python service and a Rust one on one path would each take the lock
//! beside the other. The same holds among Curator's own recipes whose node
//! names differ: a latch (`latch-`) and a selector (`lock-`) on one path
//! each lead beside the other.
//!
//! So a lock speaks one layout ([`Layout::Curator`] by default, or
//! [`Layout::Kazoo`] to share a lock with kazoo's `Lock`, `ReadLock`,
//! `WriteLock` and `Election`), and at every listing of its path it looks
//! for participants of a family that cannot see it: finding one, the
//! acquire gives its node back and fails with
//! [`Error::LayoutConflict`] instead of queueing where the others cannot
//! see it.
//!
//! # What this cannot prevent
//!
//! The check sees the participants that are there when we list. A
//! participant of another family that arrives *after* ours, while we hold,
//! does not see us, and we do not list again while holding: it takes the
//! lock beside us. Only a shared layout excludes; the check makes the
//! mistake loud at the first acquire that meets it, not impossible.
//!
//! The check reads names only, so it errs on the safe side where a name
//! is ambiguous: a child named `locks` or `leases` is taken for a Curator
//! semaphore's (a lock cannot be taken on a path that has a folder of that
//! name below it), and a child named by 32 hex digits for a kazoo
//! semaphore's lease. (`recipes::layout::identify`, which reads a level
//! further down, tells a semaphore from such a folder.)

use std::fmt;

use crate::path::{strip_protection, Sequence};
use crate::{Error, Result};

/// The name Curator gives mutex participants (`_c_<uuid>-lock-<seq>`), also
/// used by a semaphore's internal queue and a leader selector.
pub const LOCK_NAME: &str = "lock-";
/// The name Curator gives read participants (`_c_<uuid>-__READ__<seq>`).
pub const READ_LOCK_NAME: &str = "__READ__";
/// The name Curator gives write participants (`_c_<uuid>-__WRIT__<seq>`).
/// Both names keep the same length (Curator insists on it).
pub const WRITE_LOCK_NAME: &str = "__WRIT__";
/// The name Curator gives semaphore lease nodes (`_c_<uuid>-lease-<seq>`).
pub const LEASE_NAME: &str = "lease-";
/// The name Curator gives latch participants (`_c_<uuid>-latch-<seq>`).
pub const LATCH_NAME: &str = "latch-";
/// The child of a Curator semaphore's path that holds its internal queue.
pub const LOCKS_CHILD: &str = "locks";
/// The child of a Curator semaphore's path that holds its lease nodes.
pub const LEASES_CHILD: &str = "leases";
/// The name kazoo gives the nodes of a `Lock`, a `WriteLock` and an
/// `Election` (`<uuid hex>__lock__<seq>`).
pub const KAZOO_LOCK_NAME: &str = "__lock__";
/// The name kazoo gives the nodes of a `ReadLock` (`<uuid hex>__rlock__<seq>`).
pub const KAZOO_READ_LOCK_NAME: &str = "__rlock__";

/// How a child name sorts among the participants.
///
/// Participants sort by the sequence after the *last* occurrence of the lock
/// name (as unsigned numbers, see [`Sequence`]); names without a parsable
/// sequence sort after them by their full text (foreign children under a
/// lock path still take part, as in Curator).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SortKey {
    /// A participant with a sequence (the server's counter).
    Sequence(Sequence),
    /// Anything else, by name.
    Foreign(String),
}

/// Sorts by the sequence after the last occurrence of `lock_name` (the
/// protection prefix is skipped first), read by [`Sequence::parse`]: the
/// one sequence parser, unsigned, so a counter that wrapped past 2³¹ sorts
/// after the nodes before the wrap instead of jumping the queue.
pub fn standard_sort_key(name: &str, lock_name: &str) -> SortKey {
    let unprotected = strip_protection(name);
    let suffix = match unprotected.rfind(lock_name) {
        Some(at) if !lock_name.is_empty() => &unprotected[at + lock_name.len()..],
        _ => unprotected,
    };
    match Sequence::parse(suffix) {
        Some(seq) => SortKey::Sequence(seq),
        None => SortKey::Foreign(name.to_owned()),
    }
}

/// How a lock's participant nodes are named and ordered: whose protocol
/// they follow, so that the other library's participants on the same path
/// see ours and we see theirs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Layout {
    /// Apache Curator's: `_c_<uuid>-<lock name><seq>`, ordered by the
    /// sequence after the lock name. The default.
    #[default]
    Curator,
    /// kazoo's (Python): `<uuid hex><lock name><seq>`, where the lock name
    /// is `__lock__` (a `Lock`, a `WriteLock`, an `Election`) or `__rlock__`
    /// (a `ReadLock`), ordered by the ten-digit sequence after it. A name
    /// that ends otherwise is no participant.
    Kazoo,
}

impl Layout {
    /// `"curator"` or `"kazoo"` (the command line's `--layout` values).
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Curator => "curator",
            Layout::Kazoo => "kazoo",
        }
    }

    /// Reads `"curator"` or `"kazoo"`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for anything else.
    pub fn parse(name: &str) -> Result<Layout> {
        match name {
            "curator" => Ok(Layout::Curator),
            "kazoo" => Ok(Layout::Kazoo),
            other => Err(Error::InvalidArgument(format!(
                "unknown layout {:?}: expected \"curator\" or \"kazoo\"",
                crate::path::cut(other)
            ))),
        }
    }

    /// The start of a participant's name before the server's sequence:
    /// Curator's protection prefix `_c_<uuid>-` or kazoo's `<uuid hex>`,
    /// then `lock_name`. Both libraries find a node whose create lost its
    /// reply by this prefix.
    pub fn node_prefix(self, id: uuid::Uuid, lock_name: &str) -> String {
        match self {
            Layout::Curator => format!("{}{}-{lock_name}", crate::path::PROTECTED_PREFIX, id),
            Layout::Kazoo => format!("{}{lock_name}", id.simple()),
        }
    }

    /// The longest prefix [`Layout::node_prefix`] makes, without the lock
    /// name: `_c_` + a UUID + `-` (40), or 32 hex digits.
    pub const fn max_prefix_len(self) -> usize {
        match self {
            Layout::Curator => 3 + 36 + 1,
            Layout::Kazoo => 32,
        }
    }

    /// The sort key of child `name` of a lock whose nodes carry `lock_name`.
    ///
    /// Curator's: the sequence after the last `lock_name` (see
    /// [`standard_sort_key`]). kazoo's: the ten-digit sequence after a final
    /// `__lock__` or `__rlock__`, whatever our own lock name (a kazoo
    /// writer waits for readers too); anything else sorts after every
    /// participant, as a [`SortKey::Foreign`].
    pub fn sort_key(self, name: &str, lock_name: &str) -> SortKey {
        match self {
            Layout::Curator => standard_sort_key(name, lock_name),
            Layout::Kazoo => match kazoo_participant(name) {
                Some((_, sequence)) => SortKey::Sequence(sequence),
                None => SortKey::Foreign(name.to_owned()),
            },
        }
    }

    /// The family of a lock of this layout whose nodes carry `lock_name`;
    /// `None` for a name no known recipe uses (a driver of your own).
    pub fn family(self, lock_name: &str) -> Option<Family> {
        match (self, lock_name) {
            (Layout::Curator, LOCK_NAME) => Some(Family::CuratorLock),
            (Layout::Curator, LATCH_NAME) => Some(Family::CuratorLatch),
            (Layout::Curator, READ_LOCK_NAME | WRITE_LOCK_NAME) => Some(Family::CuratorReadWrite),
            (Layout::Curator, LEASE_NAME) => Some(Family::CuratorLease),
            (Layout::Kazoo, KAZOO_LOCK_NAME | KAZOO_READ_LOCK_NAME) => Some(Family::KazooLock),
            _ => None,
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The participants that see each other: the nodes of one recipe family in
/// one layout. Participants of different families on one path do not
/// exclude each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Family {
    /// Curator's mutex, leader selector (and a semaphore's internal queue):
    /// `_c_<uuid>-lock-<seq>`.
    CuratorLock,
    /// Curator's leader latch: `_c_<uuid>-latch-<seq>`.
    CuratorLatch,
    /// Curator's read-write lock: `_c_<uuid>-__READ__<seq>`, `…-__WRIT__<seq>`.
    CuratorReadWrite,
    /// Curator's semaphore lease nodes (under its `leases` child):
    /// `_c_<uuid>-lease-<seq>`.
    CuratorLease,
    /// A Curator semaphore's path: its children `locks` and `leases`.
    CuratorSemaphore,
    /// kazoo's `Lock`, `ReadLock`, `WriteLock` and `Election`:
    /// `<uuid hex>__lock__<seq>`, `<uuid hex>__rlock__<seq>`.
    KazooLock,
    /// kazoo's `Semaphore`: unsequenced lease nodes named by 32 hex digits.
    KazooSemaphore,
}

impl Family {
    /// The family of child `name`, by its name alone; `None` for a name
    /// that no known recipe writes.
    pub fn of_child(name: &str) -> Option<Family> {
        if name == LOCKS_CHILD || name == LEASES_CHILD {
            return Some(Family::CuratorSemaphore);
        }
        if kazoo_participant(name).is_some() {
            return Some(Family::KazooLock);
        }
        let bare = strip_protection(name);
        let sequenced_after = |marker: &str| {
            bare.rfind(marker)
                .and_then(|at| bare.get(at + marker.len()..))
                .and_then(Sequence::parse)
                .is_some()
        };
        if sequenced_after(WRITE_LOCK_NAME) || sequenced_after(READ_LOCK_NAME) {
            Some(Family::CuratorReadWrite)
        } else if sequenced_after(LATCH_NAME) {
            Some(Family::CuratorLatch)
        } else if sequenced_after(LEASE_NAME) {
            Some(Family::CuratorLease)
        } else if sequenced_after(LOCK_NAME) {
            Some(Family::CuratorLock)
        } else if name.len() == 32 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Some(Family::KazooSemaphore)
        } else {
            None
        }
    }

    /// The layout whose protocol the family follows.
    pub fn layout(self) -> Layout {
        match self {
            Family::KazooLock | Family::KazooSemaphore => Layout::Kazoo,
            _ => Layout::Curator,
        }
    }

    /// What the family is, for messages: `"Curator's mutex or leader
    /// selector"`, `"kazoo's Lock, ReadLock, WriteLock or Election"`, …
    pub fn describe(self) -> &'static str {
        match self {
            Family::CuratorLock => "Curator's mutex or leader selector",
            Family::CuratorLatch => "Curator's leader latch",
            Family::CuratorReadWrite => "Curator's read-write lock",
            Family::CuratorLease => "Curator's semaphore leases",
            Family::CuratorSemaphore => "Curator's semaphore",
            Family::KazooLock => "kazoo's Lock, ReadLock, WriteLock or Election",
            Family::KazooSemaphore => "kazoo's Semaphore",
        }
    }

    /// How to make a lock of family `ours` (`None`: a driver of your own)
    /// share a path with participants of this family, or where else to go.
    fn fix_for(self, ours: Option<Family>) -> String {
        match (self, ours) {
            (Family::KazooLock, Some(ours)) if ours.layout() == Layout::Curator => {
                "take the lock in kazoo's layout (Layout::Kazoo, `--layout kazoo`) to share it with them, or use another path".into()
            }
            (Family::KazooSemaphore, _) => {
                "take a lease of it as a semaphore in kazoo's layout (InterProcessSemaphoreV2::with_layout, `lock --leases N --layout kazoo`), or use another path".into()
            }
            (theirs, Some(Family::KazooLock)) if theirs.layout() == Layout::Curator => {
                format!("take the lock in Curator's layout (the default) with the recipe of {}, or use another path", theirs.describe())
            }
            (theirs, _) => format!(
                "use the recipe of {} on this path too, or another path",
                theirs.describe()
            ),
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// The marker and sequence of a kazoo participant's name: one that ends in
/// `__lock__` or `__rlock__` and a ten-digit counter (kazoo's own test,
/// which also takes a `-` before the digits).
pub fn kazoo_participant(name: &str) -> Option<(&'static str, Sequence)> {
    let bytes = name.as_bytes();
    let digits = bytes
        .iter()
        .rev()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits != 10 {
        return None;
    }
    let mut head = &name[..name.len() - digits];
    let mut counter = &name[name.len() - digits..];
    if let Some(stripped) = head.strip_suffix('-') {
        head = stripped;
        counter = &name[name.len() - digits - 1..];
    }
    let marker = if head.ends_with(KAZOO_READ_LOCK_NAME) {
        KAZOO_READ_LOCK_NAME
    } else if head.ends_with(KAZOO_LOCK_NAME) {
        KAZOO_LOCK_NAME
    } else {
        return None;
    };
    Sequence::parse(counter).map(|sequence| (marker, sequence))
}

/// The check every listing of a lock's path passes before anything is
/// decided: `Err` with [`Error::LayoutConflict`] when `children` of `path`
/// hold a participant of a known family other than the one of a lock of
/// `layout` whose nodes carry `lock_name` (a lock whose name no known
/// recipe uses meets a conflict with every known family). Children that
/// no known recipe writes are left alone, as both libraries leave them.
///
/// # Errors
/// [`Error::LayoutConflict`], naming the first such child.
pub fn check_children(
    layout: Layout,
    lock_name: &str,
    path: &str,
    children: &[String],
) -> Result<()> {
    let ours = layout.family(lock_name);
    let carries_ours = |child: &str| {
        !lock_name.is_empty()
            && matches!(layout.sort_key(child, lock_name), SortKey::Sequence(_))
            && strip_protection(child).contains(lock_name)
    };
    let describe = || {
        ours.map_or_else(
            || format!("a lock of its own with nodes named {lock_name:?}"),
            |ours| format!("{} ({} layout)", ours.describe(), layout),
        )
    };
    conflict(ours, describe, path, children, carries_ours)
}

/// [`check_children`] for a recipe whose own participants are not
/// children of `path` but whose place `path` is: a Curator semaphore
/// ([`Family::CuratorSemaphore`]: its `locks` and `leases` children are
/// ours, anything else known is not).
///
/// # Errors
/// [`Error::LayoutConflict`], naming the first child of another family.
pub fn check_family(ours: Family, path: &str, children: &[String]) -> Result<()> {
    let describe = || format!("{} ({} layout)", ours.describe(), ours.layout());
    conflict(Some(ours), describe, path, children, |_| false)
}

fn conflict(
    ours: Option<Family>,
    describe: impl FnOnce() -> String,
    path: &str,
    children: &[String],
    carries_ours: impl Fn(&str) -> bool,
) -> Result<()> {
    let found = children.iter().find_map(|child| {
        if carries_ours(child) {
            return None;
        }
        Family::of_child(child)
            .filter(|theirs| Some(*theirs) != ours)
            .map(|theirs| (theirs, child))
    });
    match found {
        None => Ok(()),
        Some((theirs, child)) => Err(Error::LayoutConflict {
            path: crate::path::cut(path),
            ours: describe(),
            theirs,
            node: crate::path::cut(child),
            fix: theirs.fix_for(ours),
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const UUID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";
    const HEX: &str = "0f8fad5bd9cb469fa16570867728950e";

    fn curator(name: &str, seq: u32) -> String {
        format!("_c_{UUID}-{name}{seq:010}")
    }

    fn kazoo(name: &str, seq: u32) -> String {
        format!("{HEX}{name}{seq:010}")
    }

    #[test]
    fn each_known_name_has_its_family() {
        assert_eq!(
            Family::of_child(&curator(LOCK_NAME, 1)),
            Some(Family::CuratorLock)
        );
        assert_eq!(
            Family::of_child(&curator(LATCH_NAME, 1)),
            Some(Family::CuratorLatch)
        );
        assert_eq!(
            Family::of_child(&curator(READ_LOCK_NAME, 1)),
            Some(Family::CuratorReadWrite)
        );
        assert_eq!(
            Family::of_child(&curator(WRITE_LOCK_NAME, 1)),
            Some(Family::CuratorReadWrite)
        );
        assert_eq!(
            Family::of_child(&curator(LEASE_NAME, 1)),
            Some(Family::CuratorLease)
        );
        assert_eq!(Family::of_child("locks"), Some(Family::CuratorSemaphore));
        assert_eq!(Family::of_child("leases"), Some(Family::CuratorSemaphore));
        assert_eq!(
            Family::of_child(&kazoo(KAZOO_LOCK_NAME, 1)),
            Some(Family::KazooLock)
        );
        assert_eq!(
            Family::of_child(&kazoo(KAZOO_READ_LOCK_NAME, 1)),
            Some(Family::KazooLock)
        );
        assert_eq!(Family::of_child(HEX), Some(Family::KazooSemaphore));
        for unknown in [
            "foo",
            "lock",
            "__lock__12",
            "lock-",
            "0F8FAD5BD9CB469FA16570867728950E",
        ] {
            assert_eq!(Family::of_child(unknown), None, "{unknown}");
        }
    }

    #[test]
    fn kazoo_names_sort_by_their_sequence_and_others_go_last() {
        let layout = Layout::Kazoo;
        let w = kazoo(KAZOO_LOCK_NAME, 7);
        let r = kazoo(KAZOO_READ_LOCK_NAME, 3);
        assert_eq!(
            layout.sort_key(&w, KAZOO_LOCK_NAME),
            SortKey::Sequence(Sequence::new(7))
        );
        assert_eq!(
            layout.sort_key(&r, KAZOO_LOCK_NAME),
            SortKey::Sequence(Sequence::new(3))
        );
        assert_eq!(
            layout.sort_key(&curator(LOCK_NAME, 1), KAZOO_LOCK_NAME),
            SortKey::Foreign(curator(LOCK_NAME, 1))
        );
        // kazoo's test wants ten digits, with or without a `-` before them.
        assert!(kazoo_participant(&format!("{HEX}__lock__-1000000007")).is_some());
        assert!(kazoo_participant(&format!("{HEX}__lock__-000000007")).is_none());
        assert!(kazoo_participant(&format!("{HEX}__lock__00000000071")).is_none());
    }

    #[test]
    fn node_prefixes_follow_each_library() {
        let id = uuid::Uuid::parse_str(UUID).unwrap();
        assert_eq!(
            Layout::Curator.node_prefix(id, LOCK_NAME),
            format!("_c_{UUID}-lock-")
        );
        assert_eq!(
            Layout::Kazoo.node_prefix(id, KAZOO_LOCK_NAME),
            format!("{HEX}__lock__")
        );
        assert_eq!(
            Layout::Kazoo.node_prefix(id, "").len(),
            Layout::Kazoo.max_prefix_len()
        );
        assert_eq!(
            Layout::Curator.node_prefix(id, "").len(),
            Layout::Curator.max_prefix_len()
        );
    }

    #[test]
    fn a_lock_refuses_every_family_that_cannot_see_it() {
        let check =
            |layout, name, children: &[String]| check_children(layout, name, "/p", children);
        // The same family: no conflict, whatever else is there.
        let mixed = vec![curator(LOCK_NAME, 1), "foreign".to_string()];
        assert!(check(Layout::Curator, LOCK_NAME, &mixed).is_ok());
        let rw = vec![curator(READ_LOCK_NAME, 1), curator(WRITE_LOCK_NAME, 2)];
        assert!(check(Layout::Curator, READ_LOCK_NAME, &rw).is_ok());
        assert!(check(Layout::Curator, WRITE_LOCK_NAME, &rw).is_ok());
        let k = vec![kazoo(KAZOO_LOCK_NAME, 1), kazoo(KAZOO_READ_LOCK_NAME, 2)];
        assert!(check(Layout::Kazoo, KAZOO_LOCK_NAME, &k).is_ok());
        assert!(check(Layout::Kazoo, KAZOO_READ_LOCK_NAME, &k).is_ok());
        // A lock of one's own whose name holds a known one is still itself.
        let own = vec![curator("my-lock-", 1), curator("my-lock-", 2)];
        assert!(check(Layout::Curator, "my-lock-", &own).is_ok());
        // Every other pairing conflicts.
        let cases: Vec<(Layout, &str, String, Family)> = vec![
            (
                Layout::Curator,
                LOCK_NAME,
                kazoo(KAZOO_LOCK_NAME, 1),
                Family::KazooLock,
            ),
            (
                Layout::Curator,
                LOCK_NAME,
                curator(LATCH_NAME, 1),
                Family::CuratorLatch,
            ),
            (
                Layout::Curator,
                LATCH_NAME,
                curator(LOCK_NAME, 1),
                Family::CuratorLock,
            ),
            (
                Layout::Curator,
                LOCK_NAME,
                "leases".into(),
                Family::CuratorSemaphore,
            ),
            (
                Layout::Curator,
                READ_LOCK_NAME,
                curator(LOCK_NAME, 1),
                Family::CuratorLock,
            ),
            (
                Layout::Curator,
                LOCK_NAME,
                curator(WRITE_LOCK_NAME, 1),
                Family::CuratorReadWrite,
            ),
            (
                Layout::Kazoo,
                KAZOO_LOCK_NAME,
                curator(LOCK_NAME, 1),
                Family::CuratorLock,
            ),
            (
                Layout::Kazoo,
                KAZOO_LOCK_NAME,
                HEX.into(),
                Family::KazooSemaphore,
            ),
            (
                Layout::Curator,
                "prio-",
                curator(LOCK_NAME, 1),
                Family::CuratorLock,
            ),
        ];
        for (layout, name, child, family) in cases {
            match check(layout, name, std::slice::from_ref(&child)) {
                Err(Error::LayoutConflict { theirs, node, .. }) => {
                    assert_eq!(theirs, family, "{name} beside {child}");
                    assert_eq!(node, child);
                }
                other => panic!("{name} beside {child}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_fix_names_the_layout_to_use() {
        let err = check_children(
            Layout::Curator,
            LOCK_NAME,
            "/p",
            &[kazoo(KAZOO_LOCK_NAME, 1)],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("--layout kazoo"), "{err}");
        let err = check_children(
            Layout::Kazoo,
            KAZOO_LOCK_NAME,
            "/p",
            &[curator(LOCK_NAME, 1)],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("Curator's layout"), "{err}");
    }
}
