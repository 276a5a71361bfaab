//! The watch family: `checkWatches`/`removeWatches`, `setWatches(2)` on reconnect,
//! `addWatch`, and the dispatch of notifications when a write commits.

use std::collections::BTreeSet;

use crate::acl::{self, perms};
use crate::codec::{self, code, event, SetWatches, WatchRequest, Writer};
use crate::watch::{ConnId, PERSISTENT, RECURSIVE, STANDARD};

use super::txn::{Trigger, TriggerKind};
use super::{error_reply, Outbound, Reply, State};

impl State {
    /// Answers a watch management request.
    pub(super) fn watch(&mut self, conn: ConnId, xid: i32, request: WatchRequest) -> Reply {
        match request {
            WatchRequest::CheckOrRemove { path, kind, remove } => {
                let found = match (kind, remove) {
                    (1, false) => self.watches.child.contains(&path, conn, STANDARD),
                    (2, false) => self.watches.data.contains(&path, conn, STANDARD),
                    (3, false) => {
                        self.watches.child.contains(&path, conn, 0xff)
                            || self.watches.data.contains(&path, conn, 0xff)
                    }
                    (4, false) => self.watches.data.contains(&path, conn, PERSISTENT),
                    (5, false) => self.watches.data.contains(&path, conn, RECURSIVE),
                    (1, true) => self.watches.child.remove(&path, conn, STANDARD),
                    (2, true) => self.watches.data.remove(&path, conn, STANDARD),
                    (3, true) => {
                        let c = self.watches.child.remove(&path, conn, 0xff);
                        let d = self.watches.data.remove(&path, conn, 0xff);
                        c || d
                    }
                    (4, true) => {
                        let c = self.watches.child.remove(&path, conn, PERSISTENT);
                        let d = self.watches.data.remove(&path, conn, PERSISTENT);
                        c || d
                    }
                    (5, true) => self.watches.data.remove(&path, conn, RECURSIVE),
                    _ => return Reply::Send(error_reply(xid, self.zxid, code::MARSHALLING_ERROR)),
                };
                let err = if found { code::OK } else { code::NO_WATCHER };
                Reply::Send(error_reply(xid, self.zxid, err))
            }
            WatchRequest::Set(set) => {
                self.set_watches(conn, set);
                Reply::Send(error_reply(xid, self.zxid, code::OK))
            }
            WatchRequest::Add { path, mode } => {
                match mode {
                    0 => {
                        self.watches.data.add(&path, conn, PERSISTENT);
                        self.watches.child.add(&path, conn, PERSISTENT);
                    }
                    1 => self.watches.data.add(&path, conn, RECURSIVE),
                    _ => return Reply::Send(error_reply(xid, self.zxid, code::MARSHALLING_ERROR)),
                }
                let mut w = Writer::reply(xid, self.zxid, code::OK);
                w.i32(0);
                Reply::Send(w.finish())
            }
        }
    }

    /// Re-arms a reconnecting client's watches, firing at once those whose node changed after
    /// the zxid the client has seen.
    fn set_watches(&mut self, conn: ConnId, set: SetWatches) {
        let fire = |state: &Self, event_type: i32, path: &str| {
            state.send(conn, Outbound::Frame(codec::notification(event_type, path)));
        };
        for path in set.data {
            match self.tree.get(&path) {
                None => fire(self, event::NODE_DELETED, &path),
                Some(node) if node.stat.mzxid > set.relative_zxid => {
                    fire(self, event::NODE_DATA_CHANGED, &path);
                }
                Some(_) => self.watches.data.add(&path, conn, STANDARD),
            }
        }
        for path in set.exist {
            if self.tree.get(&path).is_some() {
                fire(self, event::NODE_CREATED, &path);
            } else {
                self.watches.data.add(&path, conn, STANDARD);
            }
        }
        for path in set.child {
            match self.tree.get(&path) {
                None => fire(self, event::NODE_DELETED, &path),
                Some(node) if node.stat.pzxid > set.relative_zxid => {
                    fire(self, event::NODE_CHILDREN_CHANGED, &path);
                }
                Some(_) => self.watches.child.add(&path, conn, STANDARD),
            }
        }
        for path in set.persistent {
            self.watches.child.add(&path, conn, PERSISTENT);
            self.watches.data.add(&path, conn, PERSISTENT);
        }
        for path in set.recursive {
            self.watches.data.add(&path, conn, RECURSIVE);
        }
    }

    /// Sends the notifications for committed triggers.
    pub(super) fn dispatch(&mut self, triggers: Vec<Trigger>) {
        let none = BTreeSet::new();
        for t in triggers {
            let (event_type, fired) = match t.kind {
                TriggerKind::Created => (
                    event::NODE_CREATED,
                    self.watches.data.trigger(&t.path, &none),
                ),
                TriggerKind::DataChanged => (
                    event::NODE_DATA_CHANGED,
                    self.watches.data.trigger(&t.path, &none),
                ),
                TriggerKind::ChildrenChanged => (
                    event::NODE_CHILDREN_CHANGED,
                    self.watches.child.trigger(&t.path, &none),
                ),
                TriggerKind::Deleted => {
                    let mut fired = self.watches.data.trigger(&t.path, &none);
                    let more = self.watches.child.trigger(&t.path, &fired);
                    fired.extend(more);
                    (event::NODE_DELETED, fired)
                }
            };
            if fired.is_empty() {
                continue;
            }
            let frame = codec::notification(event_type, &t.path);
            // In connection order: the order the watchers' tasks are woken in.
            for conn in fired {
                let Some(c) = self.conns.get(&conn) else {
                    continue;
                };
                if !acl::allowed(&t.acl, perms::READ, &c.auth) {
                    continue;
                }
                c.outbox.frame(frame.clone());
            }
        }
    }
}
