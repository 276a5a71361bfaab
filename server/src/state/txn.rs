//! The transaction machinery every write goes through (a single write, a `multi`, the
//! reaping of containers and TTL nodes): one new zxid, all operations or none (a `multi`
//! journals the nodes it touches to roll back), and watch triggers dispatched only on commit.

use tokio::time::Instant;
use tracing::debug;

use crate::codec::{code, Acl, Id, Stat, WriteOp};
use crate::tree::{kind_of, name_of, Kind, Node};

use super::State;

/// A watch trigger recorded by a write, dispatched once the write commits.
#[derive(Debug)]
pub(super) struct Trigger {
    pub(super) path: String,
    pub(super) kind: TriggerKind,
    /// ACL of the node the event is about: a connection needs READ on it to be told (3.8).
    pub(super) acl: Vec<Acl>,
}

/// What happened to a trigger's node.
#[derive(Clone, Copy, Debug)]
pub(super) enum TriggerKind {
    Created,
    Deleted,
    DataChanged,
    ChildrenChanged,
}

/// Result of one successful write operation.
#[derive(Debug)]
pub(super) enum OpResult {
    Create {
        path: String,
        stat: Stat,
        opcode: i32,
    },
    Delete,
    SetData(Stat),
    Check,
    SetAcl(Stat),
}

/// Context of one transaction (a single write or a multi).
pub(super) struct Txn {
    pub(super) zxid: i64,
    pub(super) time: i64,
    pub(super) session: i64,
    pub(super) auth: Vec<Id>,
    /// Nodes as they were before the transaction touched them (multi only), for rollback.
    pub(super) journal: Option<Vec<(String, Option<Node>)>>,
    pub(super) triggers: Vec<Trigger>,
}

impl State {
    /// Runs write operations as one transaction with one new zxid: all apply, or (on the first
    /// failure) none, and the error says which operation failed with what. `now` (on the
    /// server's clock) dates the nodes it writes.
    pub(super) fn transaction(
        &mut self,
        session: i64,
        auth: Vec<Id>,
        ops: &[WriteOp],
        multi: bool,
        now: Instant,
    ) -> Result<Vec<OpResult>, (usize, i32)> {
        let zxid = self.next_zxid();
        let mut txn = Txn {
            zxid,
            time: self.time_millis(now),
            session,
            auth,
            journal: multi.then(Vec::new),
            triggers: Vec::new(),
        };
        let mut results = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            match self.apply(&mut txn, op) {
                Ok(result) => results.push(result),
                Err(err) => {
                    if let Some(journal) = txn.journal.take() {
                        for (path, before) in journal.into_iter().rev() {
                            match before {
                                Some(node) => self.tree.put(&path, node),
                                None => {
                                    self.tree.take(&path);
                                }
                            }
                        }
                    }
                    return Err((i, err));
                }
            }
        }
        self.dispatch(txn.triggers);
        Ok(results)
    }

    pub(super) fn remember(&self, txn: &mut Txn, path: &str) {
        if let Some(journal) = txn.journal.as_mut() {
            journal.push((path.to_owned(), self.tree.get(path).cloned()));
        }
    }

    /// Removes a (checked) node and records its watch triggers.
    pub(super) fn remove_node(
        &mut self,
        path: &str,
        parent_path: &str,
        zxid: i64,
        triggers: &mut Vec<Trigger>,
    ) {
        let mut parent_acl = Vec::new();
        if let Some(parent) = self.tree.get_mut(parent_path) {
            parent.children.remove(name_of(path));
            if zxid > parent.stat.pzxid {
                parent.stat.pzxid = zxid;
            }
            parent_acl = parent.acl.clone();
        }
        let node_acl = self.tree.take(path).map(|n| n.acl).unwrap_or_default();
        triggers.push(Trigger {
            path: path.to_owned(),
            kind: TriggerKind::Deleted,
            acl: node_acl,
        });
        triggers.push(Trigger {
            path: parent_path.to_owned(),
            kind: TriggerKind::ChildrenChanged,
            acl: parent_acl,
        });
    }

    /// Deletes empty containers that once had children and expired TTL nodes without
    /// children, each as its own `deleteContainer` transaction; TTLs run on the server's
    /// clock, read as `now`.
    pub fn reap(&mut self, now: Instant) {
        for path in self.reap_candidates(now) {
            let op = WriteOp::Delete {
                path: path.clone(),
                version: -1,
                container: true,
            };
            if let Err((_, err)) = self.transaction(0, Vec::new(), &[op], false, now) {
                debug!(path, err, "container/TTL node not reaped");
            }
        }
    }

    /// Empty containers that once had children and expired TTL nodes without children, at
    /// `now` on the server's clock: what [`reap`](Self::reap) deletes.
    pub(super) fn reap_candidates(&self, now: Instant) -> Vec<String> {
        let time = self.time_millis(now);
        let mut candidates: Vec<String> = Vec::new();
        for path in self.tree.containers() {
            if let Some(node) = self.tree.get(path) {
                if node.children.is_empty() && node.stat.cversion > 0 {
                    candidates.push(path.clone());
                }
            }
        }
        for path in self.tree.ttls() {
            if let Some(node) = self.tree.get(path) {
                if let Kind::Ttl(ttl) = kind_of(node.stat.ephemeral_owner) {
                    if node.children.is_empty()
                        && ttl != 0
                        && time.saturating_sub(node.stat.mtime) > ttl
                    {
                        candidates.push(path.clone());
                    }
                }
            }
        }
        candidates
    }
}

/// ZooKeeper's `checkAndIncVersion`: -1 matches anything; the next version skips -1.
pub(super) fn next_version(current: i32, expected: i32) -> Result<i32, i32> {
    if expected != -1 && expected != current {
        return Err(code::BAD_VERSION);
    }
    let next = current.wrapping_add(1);
    Ok(if next == -1 { 0 } else { next })
}
