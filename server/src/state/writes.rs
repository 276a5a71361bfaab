//! The write family: `create` (all kinds), `delete`, `setData`, `setACL` and `check`, each
//! applied inside a transaction (see `txn`).

use tokio::time::Instant;

use crate::acl::{self, perms};
use crate::codec::{code, op, CreateOp, Id, WriteOp, Writer};
use crate::tree::{
    is_special, kind_of, name_of, parent_of, ttl_owner, valid_path, Kind, Node, CONTAINER_OWNER,
    MAX_TTL,
};

use super::txn::{next_version, OpResult, Trigger, TriggerKind, Txn};
use super::{error_reply, Reply, State};

impl State {
    /// Applies a single write, at `now` on the server's clock, and answers it.
    pub(super) fn write(
        &mut self,
        session: i64,
        auth: Vec<Id>,
        xid: i32,
        op: WriteOp,
        now: Instant,
    ) -> Reply {
        let single = [op];
        match self.transaction(session, auth, &single, false, now) {
            Ok(mut results) => {
                let mut w = Writer::reply(xid, self.zxid, code::OK);
                match results.pop() {
                    Some(OpResult::Create { path, stat, opcode }) => {
                        w.string(&path);
                        if opcode != op::CREATE {
                            w.stat(&stat);
                        }
                    }
                    Some(OpResult::SetData(stat)) | Some(OpResult::SetAcl(stat)) => {
                        w.stat(&stat);
                    }
                    Some(OpResult::Check) => {
                        // ZooKeeper 3.8 fails to serialize the (stat-less) reply to a
                        // successful stand-alone check and sends nothing at all.
                        return Reply::Nothing;
                    }
                    Some(OpResult::Delete) | None => {}
                }
                Reply::Send(w.finish())
            }
            Err((_, err)) => Reply::Send(error_reply(xid, self.zxid, err)),
        }
    }
    pub(super) fn apply(&mut self, txn: &mut Txn, op: &WriteOp) -> Result<OpResult, i32> {
        match op {
            WriteOp::Create(create) => self.create(txn, create),
            WriteOp::Delete {
                path,
                version,
                container,
            } => self.delete(txn, path, *version, *container),
            WriteOp::SetData {
                path,
                data,
                version,
            } => {
                if !valid_path(path) {
                    return Err(code::BAD_ARGUMENTS);
                }
                let node = self.tree.get(path).ok_or(code::NO_NODE)?;
                if !acl::allowed(&node.acl, perms::WRITE, &txn.auth) {
                    return Err(code::NO_AUTH);
                }
                let new_version = next_version(node.stat.version, *version)?;
                let node_acl = node.acl.clone();
                self.remember(txn, path);
                let node = self.tree.get_mut(path).ok_or(code::NO_NODE)?;
                node.data.clone_from(data);
                node.stat.version = new_version;
                node.stat.mtime = txn.time;
                node.stat.mzxid = txn.zxid;
                let stat = node.stat();
                txn.triggers.push(Trigger {
                    path: path.clone(),
                    kind: TriggerKind::DataChanged,
                    acl: node_acl,
                });
                Ok(OpResult::SetData(stat))
            }
            WriteOp::Check { path, version } => {
                if !valid_path(path) {
                    return Err(code::BAD_ARGUMENTS);
                }
                let node = self.tree.get(path).ok_or(code::NO_NODE)?;
                if !acl::allowed(&node.acl, perms::READ, &txn.auth) {
                    return Err(code::NO_AUTH);
                }
                next_version(node.stat.version, *version)?;
                Ok(OpResult::Check)
            }
            WriteOp::SetAcl { path, acl, version } => {
                if !valid_path(path) {
                    return Err(code::BAD_ARGUMENTS);
                }
                let fixed = acl::fixup(acl, &txn.auth)?;
                let node = self.tree.get(path).ok_or(code::NO_NODE)?;
                if !acl::allowed(&node.acl, perms::ADMIN, &txn.auth) {
                    return Err(code::NO_AUTH);
                }
                let new_version = next_version(node.stat.aversion, *version)?;
                self.remember(txn, path);
                let node = self.tree.get_mut(path).ok_or(code::NO_NODE)?;
                node.acl = fixed;
                node.stat.aversion = new_version;
                Ok(OpResult::SetAcl(node.stat()))
            }
        }
    }

    fn create(&mut self, txn: &mut Txn, c: &CreateOp) -> Result<OpResult, i32> {
        let flags = c.flags;
        if !(0..=6).contains(&flags) {
            return Err(code::BAD_ARGUMENTS);
        }
        let is_ttl = flags == 5 || flags == 6;
        let sequential = matches!(flags, 2 | 3 | 6);
        let ephemeral = matches!(flags, 1 | 3);
        if is_ttl && !self.limits.extended_types {
            // ZooKeeper refuses TTL nodes unless `extendedTypesEnabled`.
            return Err(code::UNIMPLEMENTED);
        }
        if is_ttl {
            if c.ttl <= 0 || c.ttl > MAX_TTL {
                return Err(code::BAD_ARGUMENTS);
            }
        } else if c.ttl >= 0 {
            return Err(code::BAD_ARGUMENTS);
        }
        let Some(slash) = c.path.rfind('/') else {
            return Err(code::BAD_ARGUMENTS);
        };
        if c.path.contains('\0') {
            return Err(code::BAD_ARGUMENTS);
        }
        let fixed_acl = acl::fixup(&c.acl, &txn.auth)?;
        let parent_path = if slash == 0 { "/" } else { &c.path[..slash] };
        let parent = self.tree.get(parent_path).ok_or(code::NO_NODE)?;
        if !acl::allowed(&parent.acl, perms::CREATE, &txn.auth) {
            return Err(code::NO_AUTH);
        }
        let path = if sequential {
            format!("{}{:010}", c.path, parent.stat.cversion)
        } else {
            c.path.clone()
        };
        if !valid_path(&path) {
            return Err(code::BAD_ARGUMENTS);
        }
        if self.tree.get(&path).is_some() {
            return Err(code::NODE_EXISTS);
        }
        if matches!(kind_of(parent.stat.ephemeral_owner), Kind::Ephemeral(_)) {
            return Err(code::NO_CHILDREN_FOR_EPHEMERALS);
        }
        let owner = if c.opcode == op::CREATE_CONTAINER {
            CONTAINER_OWNER
        } else if c.opcode == op::CREATE_TTL {
            ttl_owner(c.ttl)
        } else if ephemeral {
            txn.session
        } else {
            0
        };
        let parent_path = parent_path.to_owned();
        let parent_acl = parent.acl.clone();
        self.remember(txn, &parent_path);
        self.remember(txn, &path);
        let parent = self.tree.get_mut(&parent_path).ok_or(code::NO_NODE)?;
        parent.stat.cversion = parent.stat.cversion.wrapping_add(1);
        parent.stat.pzxid = txn.zxid;
        parent.children.insert(name_of(&path).to_owned());
        let node = Node::new(c.data.clone(), fixed_acl.clone(), txn.zxid, txn.time, owner);
        let stat = node.stat();
        self.tree.put(&path, node);
        txn.triggers.push(Trigger {
            path: path.clone(),
            kind: TriggerKind::Created,
            acl: fixed_acl,
        });
        txn.triggers.push(Trigger {
            path: parent_path,
            kind: TriggerKind::ChildrenChanged,
            acl: parent_acl,
        });
        Ok(OpResult::Create {
            path,
            stat,
            opcode: c.opcode,
        })
    }

    fn delete(
        &mut self,
        txn: &mut Txn,
        path: &str,
        version: i32,
        container: bool,
    ) -> Result<OpResult, i32> {
        if !path.contains('/') || path.contains('\0') || is_special(path) {
            return Err(code::BAD_ARGUMENTS);
        }
        let parent_path = parent_of(path).ok_or(code::BAD_ARGUMENTS)?;
        if container {
            let node = self.tree.get(path).ok_or(code::NO_NODE)?;
            if !node.children.is_empty() {
                return Err(code::NOT_EMPTY);
            }
            if matches!(kind_of(node.stat.ephemeral_owner), Kind::Ephemeral(_)) {
                return Err(code::BAD_VERSION);
            }
            self.tree.get(parent_path).ok_or(code::NO_NODE)?;
        } else {
            let parent = self.tree.get(parent_path).ok_or(code::NO_NODE)?;
            if !acl::allowed(&parent.acl, perms::DELETE, &txn.auth) {
                return Err(code::NO_AUTH);
            }
            let node = self.tree.get(path).ok_or(code::NO_NODE)?;
            next_version(node.stat.version, version)?;
            if !node.children.is_empty() {
                return Err(code::NOT_EMPTY);
            }
        }
        let parent_path = parent_path.to_owned();
        self.remember(txn, &parent_path);
        self.remember(txn, path);
        self.remove_node(path, &parent_path, txn.zxid, &mut txn.triggers);
        Ok(OpResult::Delete)
    }
}
