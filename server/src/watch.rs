//! Watch registrations, per connection, as ZooKeeper's `WatchManager` keeps them.
//!
//! There are two tables: data watches (left by `getData` and `exists`, and persistent and
//! persistent-recursive watches) and child watches (left by `getChildren`, and persistent
//! watches). A watcher is a connection; one trigger notifies each watcher at most once.
//! Standard watches are one-shot; persistent ones stay; recursive ones also fire for every
//! descendant.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::tree::parent_of;

/// Identifies a connection.
pub type ConnId = u64;

/// A one-shot watch.
pub const STANDARD: u8 = 1;
/// A persistent watch on one node.
pub const PERSISTENT: u8 = 2;
/// A persistent watch on a node and all its descendants.
pub const RECURSIVE: u8 = 4;

/// One table of watches.
#[derive(Debug, Default)]
pub struct WatchTable {
    /// Watchers of each path. Paths are only looked up (and counted), never walked; each
    /// path's watchers are ordered by connection, the order in which they are notified.
    by_path: HashMap<String, BTreeMap<ConnId, u8>>,
    /// The paths each connection watches, by connection (the admin words list them).
    by_conn: BTreeMap<ConnId, BTreeSet<String>>,
    recursive: usize,
}

impl WatchTable {
    /// Every (connection, path) registration, by connection and then path (for the admin
    /// words).
    pub fn registrations(&self) -> impl Iterator<Item = (ConnId, &str)> + '_ {
        self.by_conn
            .iter()
            .flat_map(|(conn, paths)| paths.iter().map(move |p| (*conn, p.as_str())))
    }

    /// Adds a watch of `mode` on `path` for `conn`.
    pub fn add(&mut self, path: &str, conn: ConnId, mode: u8) {
        let modes = self
            .by_path
            .entry(path.to_owned())
            .or_default()
            .entry(conn)
            .or_insert(0);
        if mode & RECURSIVE != 0 && *modes & RECURSIVE == 0 {
            self.recursive += 1;
        }
        *modes |= mode;
        self.by_conn
            .entry(conn)
            .or_default()
            .insert(path.to_owned());
    }

    /// Whether `conn` watches `path` in any of the `mode` bits.
    pub fn contains(&self, path: &str, conn: ConnId, mode: u8) -> bool {
        self.by_path
            .get(path)
            .and_then(|w| w.get(&conn))
            .is_some_and(|m| m & mode != 0)
    }

    /// Removes the `mode` bits of `conn`'s watch on `path`; whether anything was removed.
    pub fn remove(&mut self, path: &str, conn: ConnId, mode: u8) -> bool {
        let Some(watchers) = self.by_path.get_mut(path) else {
            return false;
        };
        let Some(modes) = watchers.get_mut(&conn) else {
            return false;
        };
        let before = *modes;
        *modes &= !mode;
        let after = *modes;
        if before & RECURSIVE != 0 && after & RECURSIVE == 0 {
            self.recursive = self.recursive.saturating_sub(1);
        }
        if after == 0 {
            watchers.remove(&conn);
            if watchers.is_empty() {
                self.by_path.remove(path);
            }
            if let Some(paths) = self.by_conn.get_mut(&conn) {
                paths.remove(path);
                if paths.is_empty() {
                    self.by_conn.remove(&conn);
                }
            }
        }
        before != after
    }

    /// Forgets every watch of `conn`.
    pub fn remove_conn(&mut self, conn: ConnId) {
        let Some(paths) = self.by_conn.remove(&conn) else {
            return;
        };
        for path in paths {
            if let Some(watchers) = self.by_path.get_mut(&path) {
                if let Some(modes) = watchers.remove(&conn) {
                    if modes & RECURSIVE != 0 {
                        self.recursive = self.recursive.saturating_sub(1);
                    }
                }
                if watchers.is_empty() {
                    self.by_path.remove(&path);
                }
            }
        }
    }

    /// Fires the watches an event on `path` triggers: every watch on `path` itself (one-shot
    /// ones are consumed) and recursive watches on its ancestors. Watchers in `suppress` are
    /// consumed but not returned. The watchers come in connection order, the order they are
    /// notified in.
    pub fn trigger(&mut self, path: &str, suppress: &BTreeSet<ConnId>) -> BTreeSet<ConnId> {
        let mut fired = BTreeSet::new();
        let mut consumed = Vec::new();
        if let Some(watchers) = self.by_path.get(path) {
            for (&conn, &modes) in watchers {
                fired.insert(conn);
                if modes & STANDARD != 0 {
                    consumed.push(conn);
                }
            }
        }
        for conn in consumed {
            self.remove(path, conn, STANDARD);
        }
        if self.recursive > 0 {
            let mut ancestor = parent_of(path);
            while let Some(p) = ancestor {
                if let Some(watchers) = self.by_path.get(p) {
                    for (&conn, &modes) in watchers {
                        if modes & RECURSIVE != 0 {
                            fired.insert(conn);
                        }
                    }
                }
                ancestor = parent_of(p);
            }
        }
        fired.retain(|conn| !suppress.contains(conn));
        fired
    }

    /// Number of (path, connection) registrations.
    pub fn len(&self) -> usize {
        self.by_path.values().map(BTreeMap::len).sum()
    }

    /// Whether there is no watch at all.
    pub fn is_empty(&self) -> bool {
        self.by_path.is_empty()
    }
}

/// Both tables.
#[derive(Debug, Default)]
pub struct Watches {
    /// Data and exist watches (and persistent/recursive).
    pub data: WatchTable,
    /// Child watches (and persistent).
    pub child: WatchTable,
}

impl Watches {
    /// Forgets every watch of a closed connection.
    pub fn remove_conn(&mut self, conn: ConnId) {
        self.data.remove_conn(conn);
        self.child.remove_conn(conn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shot_and_persistent() {
        let mut t = WatchTable::default();
        t.add("/a", 1, STANDARD);
        t.add("/a", 2, PERSISTENT);
        let none = BTreeSet::new();
        assert_eq!(t.trigger("/a", &none), BTreeSet::from([1, 2]));
        assert_eq!(t.trigger("/a", &none), BTreeSet::from([2]));
        assert!(t.remove("/a", 2, PERSISTENT));
        assert!(t.is_empty());
    }

    #[test]
    fn recursive_fires_for_descendants() {
        let mut t = WatchTable::default();
        t.add("/a", 1, RECURSIVE);
        t.add("/a/b", 2, STANDARD);
        let none = BTreeSet::new();
        assert_eq!(t.trigger("/a/b/c", &none), BTreeSet::from([1]));
        assert_eq!(t.trigger("/a/b", &BTreeSet::from([2])), BTreeSet::from([1]));
        assert!(!t.contains("/a/b", 2, STANDARD));
        t.remove_conn(1);
        assert!(t.is_empty());
        assert_eq!(t.trigger("/a/b/c", &none), BTreeSet::new());
    }
}
