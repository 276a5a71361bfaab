//! The read family: `exists`, `getData`, `getChildren(2)`, `sync`, `multiRead`,
//! `getEphemerals`, `getAllChildrenNumber`.

use std::hash::{Hash, Hasher};

use crate::acl::{self, perms};
use crate::codec::{code, op, Id, ReadOp, ReadRequest, Stat, Writer};
use crate::watch::{ConnId, STANDARD};

use super::{error_reply, Reply, State};

impl State {
    /// Answers a read of `conn` (session `session`, identities `auth`).
    pub(super) fn read(
        &mut self,
        conn: ConnId,
        session: i64,
        xid: i32,
        read: ReadRequest,
        auth: &[Id],
    ) -> Reply {
        let mut w = Writer::reply(xid, self.zxid, code::OK);
        let outcome = match read {
            ReadRequest::Exists { path, watch } => self.exists(conn, &path, watch, &mut w),
            ReadRequest::GetData { path, watch } => {
                self.read_data(&path, auth).map(|(data, stat)| {
                    if watch {
                        self.watches.data.add(&path, conn, STANDARD);
                    }
                    w.opt_buffer(data.as_deref()).stat(&stat);
                })
            }
            ReadRequest::GetChildren {
                path,
                watch,
                with_stat,
            } => self.read_children(&path, auth).map(|(children, stat)| {
                if watch {
                    self.watches.child.add(&path, conn, STANDARD);
                }
                w.strings(&children);
                if with_stat {
                    w.stat(&stat);
                }
            }),
            ReadRequest::Sync(path) => {
                w.string(&path);
                Ok(())
            }
            ReadRequest::MultiRead(ops) => return self.multi_read(xid, ops, auth),
            ReadRequest::GetEphemerals(prefix) => {
                let prefix = prefix.trim();
                let all = self.tree.ephemerals(session);
                let list: Vec<String> = if prefix.is_empty() || prefix == "/" {
                    all
                } else {
                    all.into_iter().filter(|p| p.starts_with(prefix)).collect()
                };
                w.strings(&list);
                Ok(())
            }
            ReadRequest::GetAllChildrenNumber(path) => self.readable(&path, auth).map(|()| {
                let n = i32::try_from(self.tree.descendants(&path)).unwrap_or(i32::MAX);
                w.i32(n);
            }),
        };
        match outcome {
            Ok(()) => Reply::Send(w.finish()),
            Err(err) => Reply::Send(error_reply(xid, self.zxid, err)),
        }
    }

    fn exists(&mut self, conn: ConnId, path: &str, watch: bool, w: &mut Writer) -> Result<(), i32> {
        if path.contains('\0') {
            return Err(code::BAD_ARGUMENTS);
        }
        // 3.8 checks no ACL for `exists`.
        if watch {
            self.watches.data.add(path, conn, STANDARD);
        }
        let node = self.tree.get(path).ok_or(code::NO_NODE)?;
        w.stat(&node.stat());
        Ok(())
    }

    fn multi_read(&self, xid: i32, ops: Vec<ReadOp>, auth: &[Id]) -> Reply {
        let mut body = Writer::default();
        let mut err = code::OK;
        let w = &mut body;
        for read in ops {
            match read {
                ReadOp::GetData(path) => match self.read_data(&path, auth) {
                    Ok((data, stat)) => {
                        w.i32(op::GET_DATA).bool(false).i32(0);
                        w.opt_buffer(data.as_deref()).stat(&stat);
                    }
                    Err(e) => {
                        w.i32(op::ERROR).bool(false).i32(e).i32(e);
                    }
                },
                ReadOp::GetChildren(path) => match self.read_children(&path, auth) {
                    Ok((children, _)) => {
                        w.i32(op::GET_CHILDREN).bool(false).i32(0);
                        w.strings(&children);
                    }
                    Err(e) => {
                        w.i32(op::ERROR).bool(false).i32(e).i32(e);
                    }
                },
                ReadOp::Write => {
                    // ZooKeeper stops at the first write and answers
                    // MarshallingError with the results so far.
                    err = code::MARSHALLING_ERROR;
                    break;
                }
            }
        }
        w.i32(-1).bool(true).i32(-1);
        let mut reply = Writer::reply(xid, self.zxid, err);
        reply.raw(&body.into_bytes());
        Reply::Send(reply.finish())
    }

    /// `NoNode` or `NoAuth` unless the node exists and `auth` may read it.
    fn readable(&self, path: &str, auth: &[Id]) -> Result<(), i32> {
        let node = self.tree.get(path).ok_or(code::NO_NODE)?;
        if !acl::allowed(&node.acl, perms::READ, auth) {
            return Err(code::NO_AUTH);
        }
        Ok(())
    }

    pub(super) fn read_data(
        &self,
        path: &str,
        auth: &[Id],
    ) -> Result<(Option<Vec<u8>>, Stat), i32> {
        self.readable(path, auth)?;
        let node = self.tree.get(path).ok_or(code::NO_NODE)?;
        Ok((node.data.clone(), node.stat()))
    }

    /// The children of `path` in the server's order: sorted when the server was built with
    /// sorted children; otherwise in no particular order, as ZooKeeper lists them from its
    /// hash set: here by a hash of each name under a key the server drew when it started
    /// (from fastrand's thread-local generator: random in production, the same on every run
    /// of a simulation that seeds it). As from ZooKeeper, the same set of children comes in
    /// the same order every time it is listed.
    pub(super) fn read_children(
        &self,
        path: &str,
        auth: &[Id],
    ) -> Result<(Vec<String>, Stat), i32> {
        self.readable(path, auth)?;
        let node = self.tree.get(path).ok_or(code::NO_NODE)?;
        // The node keeps its children in name order.
        let mut children: Vec<String> = node.children.iter().cloned().collect();
        if !self.limits.sorted_children {
            children.sort_by_cached_key(|name| {
                let mut hasher = std::hash::DefaultHasher::new();
                (self.order_key, name).hash(&mut hasher);
                hasher.finish()
            });
        }
        Ok((children, node.stat()))
    }
}
