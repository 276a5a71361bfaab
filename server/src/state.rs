//! The server's state machine: applies requests to the tree, sessions and watches, and encodes
//! the replies, following Apache ZooKeeper 3.8 (`PrepRequestProcessor`, `DataTree`,
//! `FinalRequestProcessor`) for the order of checks, error codes and stat bookkeeping.
//!
//! Everything here runs under one lock, so requests are applied one at a time in a global
//! order. Watch notifications are queued on the watchers' connections while the lock is held,
//! before the reply to the request that caused them: a connection therefore sees an event
//! before the reply to any read it issued afterwards. The caller must queue the returned
//! [`Reply`] while it still holds the same lock (the server does): otherwise another
//! session's write could queue an event ahead of the reply to the read that set its watch,
//! and a client, which arms the watcher only on the reply, would lose that event.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc::UnboundedSender;
use tracing::debug;

use crate::acl::{self, perms};
use crate::codec::{
    self, code, event, op, xid, Acl, ConnectRequest, CreateOp, Id, ReadOp, Request, Stat, WriteOp,
    Writer,
};
use crate::session::Sessions;
use crate::tree::{
    is_special, kind_of, name_of, parent_of, ttl_owner, valid_path, DataTree, Kind, Node,
    CONTAINER_OWNER, MAX_TTL,
};
use crate::watch::{ConnId, Watches, PERSISTENT, RECURSIVE, STANDARD};

/// Something for a connection's writer.
#[derive(Debug)]
pub enum Outbound {
    /// Write this frame.
    Frame(Vec<u8>),
    /// Close the connection (after everything queued before).
    Close,
}

/// A connection as the state knows it.
#[derive(Debug)]
pub struct Conn {
    /// Its session, 0 before the handshake.
    pub session: i64,
    /// Its identities (`ip` plus whatever `auth` added).
    pub auth: Vec<Id>,
    /// Its outbound queue.
    pub tx: UnboundedSender<Outbound>,
}

/// What to do after a request.
#[derive(Debug)]
pub enum Reply {
    /// Send this frame.
    Send(Vec<u8>),
    /// Send this frame, then close the connection.
    SendAndClose(Vec<u8>),
    /// Close the connection without answering.
    Close,
    /// Send nothing (ZooKeeper's behaviour for a successful stand-alone `check`).
    Nothing,
}

/// Server-wide settings.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Smallest session timeout granted.
    pub min_session_timeout: Duration,
    /// Largest session timeout granted.
    pub max_session_timeout: Duration,
    /// `digest` identity of the super user, if any.
    pub super_digest: Option<String>,
}

/// A watch trigger recorded by a write, dispatched once the write commits.
#[derive(Debug)]
struct Trigger {
    path: String,
    kind: TriggerKind,
    /// ACL of the node the event is about: a connection needs READ on it to be told (3.8).
    acl: Vec<Acl>,
}

#[derive(Clone, Copy, Debug)]
enum TriggerKind {
    Created,
    Deleted,
    DataChanged,
    ChildrenChanged,
}

/// Result of one successful write operation.
#[derive(Debug)]
enum OpResult {
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
struct Txn {
    zxid: i64,
    time: i64,
    session: i64,
    auth: Vec<Id>,
    /// Nodes as they were before the transaction touched them (multi only), for rollback.
    journal: Option<Vec<(String, Option<Node>)>>,
    triggers: Vec<Trigger>,
}

/// The whole server state.
#[derive(Debug)]
pub struct State {
    /// The data tree.
    pub tree: DataTree,
    /// Watch registrations.
    pub watches: Watches,
    /// Live sessions.
    pub sessions: Sessions,
    /// Last zxid handed out.
    pub zxid: i64,
    /// Open connections.
    pub conns: HashMap<ConnId, Conn>,
    /// Timeouts.
    pub limits: Limits,
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn error_reply(xid: i32, zxid: i64, err: i32) -> Vec<u8> {
    Writer::reply(xid, zxid, err).finish()
}

impl State {
    /// An empty server.
    pub fn new(limits: Limits) -> State {
        State {
            tree: DataTree::new(),
            watches: Watches::default(),
            sessions: Sessions::new(),
            zxid: 0,
            conns: HashMap::new(),
            limits,
        }
    }

    fn next_zxid(&mut self) -> i64 {
        self.zxid += 1;
        self.zxid
    }

    /// Registers a new connection from `ip`.
    pub fn register_conn(&mut self, conn: ConnId, ip: String, tx: UnboundedSender<Outbound>) {
        self.conns.insert(
            conn,
            Conn {
                session: 0,
                auth: vec![Id {
                    scheme: "ip".to_owned(),
                    id: ip,
                }],
                tx,
            },
        );
    }

    /// Forgets a closed connection and its watches; its session lives on until it expires.
    pub fn unregister_conn(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.remove(&conn) {
            if let Some(s) = self.sessions.get_mut(c.session) {
                if s.conn == Some(conn) {
                    s.conn = None;
                }
            }
        }
        self.watches.remove_conn(conn);
    }

    fn send(&self, conn: ConnId, out: Outbound) {
        if let Some(c) = self.conns.get(&conn) {
            let _ = c.tx.send(out);
        }
    }

    /// Handles a handshake; `None` means close without an answer.
    pub fn handshake(
        &mut self,
        conn: ConnId,
        req: &ConnectRequest,
        now: Instant,
    ) -> Option<(Vec<u8>, bool)> {
        if req.last_zxid_seen > self.zxid {
            debug!(
                conn,
                client_zxid = req.last_zxid_seen,
                zxid = self.zxid,
                "client has seen a newer zxid; refusing"
            );
            return None;
        }
        let requested = Duration::from_millis(u64::try_from(req.timeout).unwrap_or(0));
        let timeout = requested
            .max(self.limits.min_session_timeout)
            .min(self.limits.max_session_timeout);
        let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        if req.session_id == 0 {
            let id = self.sessions.create(timeout, conn, now);
            self.next_zxid(); // createSession is a transaction
            if let Some(c) = self.conns.get_mut(&conn) {
                c.session = id;
            }
            debug!(
                conn,
                session = format_args!("{id:#x}"),
                timeout_ms,
                "new session"
            );
            let password = self.sessions.password(id);
            return Some((codec::connect_response(timeout_ms, id, &password), true));
        }
        let id = req.session_id;
        let valid = self.sessions.get(id).is_some() && req.password == self.sessions.password(id);
        if !valid {
            debug!(
                conn,
                session = format_args!("{id:#x}"),
                "invalid or expired session"
            );
            return Some((codec::connect_response(0, 0, &[0; 16]), false));
        }
        let previous = self.sessions.get(id).and_then(|s| s.conn);
        if let Some(old) = previous.filter(|old| *old != conn) {
            // Like ZooKeeper: a re-attaching client replaces the session's old connection.
            self.send(old, Outbound::Close);
            if let Some(c) = self.conns.get_mut(&old) {
                c.session = 0;
            }
            self.watches.remove_conn(old);
        }
        if let Some(s) = self.sessions.get_mut(id) {
            s.timeout = timeout;
            s.conn = Some(conn);
        }
        self.sessions.touch(id, now);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.session = id;
        }
        debug!(
            conn,
            session = format_args!("{id:#x}"),
            timeout_ms,
            "session re-attached"
        );
        let password = self.sessions.password(id);
        Some((codec::connect_response(timeout_ms, id, &password), true))
    }

    /// Handles one request of an established connection.
    pub fn request(
        &mut self,
        conn: ConnId,
        xid: i32,
        opcode: i32,
        req: Result<Request, codec::DecodeError>,
        now: Instant,
    ) -> Reply {
        let Some(session) = self.conns.get(&conn).map(|c| c.session) else {
            return Reply::Close;
        };
        if session == 0 {
            // The session expired or moved to another connection: this one is being closed,
            // and the client learns the rest when it reconnects.
            return Reply::Close;
        }
        if !self.sessions.touch(session, now) {
            return Reply::SendAndClose(error_reply(xid, self.zxid, code::SESSION_EXPIRED));
        }
        let req = match req {
            Ok(req) => req,
            Err(err) => {
                debug!(conn, xid, opcode, %err, "undecodable request");
                return Reply::Send(error_reply(xid, self.zxid, code::MARSHALLING_ERROR));
            }
        };
        let auth = self
            .conns
            .get(&conn)
            .map(|c| c.auth.clone())
            .unwrap_or_default();
        match req {
            Request::Ping => Reply::Send(error_reply(xid::PING, self.zxid, code::OK)),
            Request::Auth { scheme, auth } => self.auth(conn, xid, &scheme, &auth),
            Request::CloseSession => {
                self.kill_session(session);
                Reply::SendAndClose(error_reply(xid, self.zxid, code::OK))
            }
            Request::Write(op) => {
                let single = [op];
                match self.transaction(session, auth, &single, false) {
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
            Request::Multi(ops) => {
                let outcome = self.transaction(session, auth, &ops, true);
                let mut w = Writer::reply(xid, self.zxid, code::OK);
                match outcome {
                    Ok(results) => {
                        for result in results {
                            match result {
                                OpResult::Create { path, stat, opcode } => {
                                    if opcode == op::CREATE {
                                        w.i32(op::CREATE).bool(false).i32(0).string(&path);
                                    } else {
                                        w.i32(op::CREATE2)
                                            .bool(false)
                                            .i32(0)
                                            .string(&path)
                                            .stat(&stat);
                                    }
                                }
                                OpResult::Delete => {
                                    w.i32(op::DELETE).bool(false).i32(0);
                                }
                                OpResult::SetData(stat) | OpResult::SetAcl(stat) => {
                                    w.i32(op::SET_DATA).bool(false).i32(0).stat(&stat);
                                }
                                OpResult::Check => {
                                    w.i32(op::CHECK).bool(false).i32(0);
                                }
                            }
                        }
                    }
                    Err((failed, err)) => {
                        for i in 0..ops.len() {
                            let e = match i.cmp(&failed) {
                                std::cmp::Ordering::Less => code::OK,
                                std::cmp::Ordering::Equal => err,
                                std::cmp::Ordering::Greater => code::RUNTIME_INCONSISTENCY,
                            };
                            w.i32(op::ERROR).bool(false).i32(e).i32(e);
                        }
                    }
                }
                w.i32(-1).bool(true).i32(-1);
                Reply::Send(w.finish())
            }
            Request::Exists { path, watch } => {
                if path.contains('\0') {
                    return Reply::Send(error_reply(xid, self.zxid, code::BAD_ARGUMENTS));
                }
                // 3.8 checks no ACL for `exists`.
                if watch {
                    self.watches.data.add(&path, conn, STANDARD);
                }
                match self.tree.get(&path) {
                    Some(node) => {
                        let mut w = Writer::reply(xid, self.zxid, code::OK);
                        w.stat(&node.stat());
                        Reply::Send(w.finish())
                    }
                    None => Reply::Send(error_reply(xid, self.zxid, code::NO_NODE)),
                }
            }
            Request::GetData { path, watch } => match self.read_data(&path, &auth) {
                Ok((data, stat)) => {
                    if watch {
                        self.watches.data.add(&path, conn, STANDARD);
                    }
                    let mut w = Writer::reply(xid, self.zxid, code::OK);
                    w.buffer(&data).stat(&stat);
                    Reply::Send(w.finish())
                }
                Err(err) => Reply::Send(error_reply(xid, self.zxid, err)),
            },
            Request::GetChildren {
                path,
                watch,
                with_stat,
            } => match self.read_children(&path, &auth) {
                Ok((children, stat)) => {
                    if watch {
                        self.watches.child.add(&path, conn, STANDARD);
                    }
                    let mut w = Writer::reply(xid, self.zxid, code::OK);
                    w.strings(&children);
                    if with_stat {
                        w.stat(&stat);
                    }
                    Reply::Send(w.finish())
                }
                Err(err) => Reply::Send(error_reply(xid, self.zxid, err)),
            },
            Request::GetAcl(path) => {
                let Some(node) = self.tree.get(&path) else {
                    return Reply::Send(error_reply(xid, self.zxid, code::NO_NODE));
                };
                if !acl::allowed(&node.acl, perms::READ | perms::ADMIN, &auth) {
                    return Reply::Send(error_reply(xid, self.zxid, code::NO_AUTH));
                }
                let admin = acl::allowed(&node.acl, perms::ADMIN, &auth);
                let acls: Vec<Acl> = node
                    .acl
                    .iter()
                    .map(|a| {
                        if !admin && a.id.scheme == "digest" {
                            let user = a.id.id.split(':').next().unwrap_or_default();
                            Acl {
                                perms: a.perms,
                                id: Id {
                                    scheme: a.id.scheme.clone(),
                                    id: format!("{user}:x"),
                                },
                            }
                        } else {
                            a.clone()
                        }
                    })
                    .collect();
                let mut w = Writer::reply(xid, self.zxid, code::OK);
                w.acls(&acls).stat(&node.stat());
                Reply::Send(w.finish())
            }
            Request::Sync(path) => {
                let mut w = Writer::reply(xid, self.zxid, code::OK);
                w.string(&path);
                Reply::Send(w.finish())
            }
            Request::MultiRead(ops) => {
                let mut body = Writer::default();
                let mut err = code::OK;
                let w = &mut body;
                for read in ops {
                    match read {
                        ReadOp::GetData(path) => match self.read_data(&path, &auth) {
                            Ok((data, stat)) => {
                                w.i32(op::GET_DATA).bool(false).i32(0);
                                w.buffer(&data).stat(&stat);
                            }
                            Err(e) => {
                                w.i32(op::ERROR).bool(false).i32(e).i32(e);
                            }
                        },
                        ReadOp::GetChildren(path) => match self.read_children(&path, &auth) {
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
            Request::Watches { path, kind, remove } => {
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
            Request::SetWatches {
                relative_zxid,
                data,
                exist,
                child,
                persistent,
                recursive,
            } => {
                for path in data {
                    match self.tree.get(&path) {
                        None => self.send(
                            conn,
                            Outbound::Frame(codec::notification(event::NODE_DELETED, &path)),
                        ),
                        Some(node) if node.stat.mzxid > relative_zxid => self.send(
                            conn,
                            Outbound::Frame(codec::notification(event::NODE_DATA_CHANGED, &path)),
                        ),
                        Some(_) => self.watches.data.add(&path, conn, STANDARD),
                    }
                }
                for path in exist {
                    if self.tree.get(&path).is_some() {
                        self.send(
                            conn,
                            Outbound::Frame(codec::notification(event::NODE_CREATED, &path)),
                        );
                    } else {
                        self.watches.data.add(&path, conn, STANDARD);
                    }
                }
                for path in child {
                    match self.tree.get(&path) {
                        None => self.send(
                            conn,
                            Outbound::Frame(codec::notification(event::NODE_DELETED, &path)),
                        ),
                        Some(node) if node.stat.pzxid > relative_zxid => self.send(
                            conn,
                            Outbound::Frame(codec::notification(
                                event::NODE_CHILDREN_CHANGED,
                                &path,
                            )),
                        ),
                        Some(_) => self.watches.child.add(&path, conn, STANDARD),
                    }
                }
                for path in persistent {
                    self.watches.child.add(&path, conn, PERSISTENT);
                    self.watches.data.add(&path, conn, PERSISTENT);
                }
                for path in recursive {
                    self.watches.data.add(&path, conn, RECURSIVE);
                }
                Reply::Send(error_reply(xid, self.zxid, code::OK))
            }
            Request::GetEphemerals(prefix) => {
                let prefix = prefix.trim();
                let all = self.tree.ephemerals(session);
                let list: Vec<String> = if prefix.is_empty() || prefix == "/" {
                    all
                } else {
                    all.into_iter().filter(|p| p.starts_with(prefix)).collect()
                };
                let mut w = Writer::reply(xid, self.zxid, code::OK);
                w.strings(&list);
                Reply::Send(w.finish())
            }
            Request::GetAllChildrenNumber(path) => {
                let Some(node) = self.tree.get(&path) else {
                    return Reply::Send(error_reply(xid, self.zxid, code::NO_NODE));
                };
                if !acl::allowed(&node.acl, perms::READ, &auth) {
                    return Reply::Send(error_reply(xid, self.zxid, code::NO_AUTH));
                }
                let n = i32::try_from(self.tree.descendants(&path)).unwrap_or(i32::MAX);
                let mut w = Writer::reply(xid, self.zxid, code::OK);
                w.i32(n);
                Reply::Send(w.finish())
            }
            Request::AddWatch { path, mode } => {
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
            Request::WhoAmI => {
                let mut w = Writer::reply(xid, self.zxid, code::OK);
                w.i32(i32::try_from(auth.len()).unwrap_or(0));
                for id in &auth {
                    let user = if id.scheme == "digest" {
                        id.id.split(':').next().unwrap_or_default()
                    } else {
                        id.id.as_str()
                    };
                    w.string(&id.scheme).string(user);
                }
                Reply::Send(w.finish())
            }
            Request::Reconfig => {
                let zxid = self.next_zxid();
                Reply::Send(error_reply(xid, zxid, code::RECONFIG_DISABLED))
            }
            Request::Sasl | Request::Unknown(_) => {
                Reply::SendAndClose(error_reply(xid, -1, code::UNIMPLEMENTED))
            }
        }
    }

    fn auth(&mut self, conn: ConnId, xid: i32, scheme: &str, credentials: &[u8]) -> Reply {
        let id = match scheme {
            "digest" => Id {
                scheme: "digest".to_owned(),
                id: acl::digest_id(credentials),
            },
            _ => {
                debug!(conn, scheme, "unsupported auth scheme");
                return Reply::SendAndClose(error_reply(xid, 0, code::AUTH_FAILED));
            }
        };
        let is_super = self.limits.super_digest.as_deref() == Some(id.id.as_str());
        if let Some(c) = self.conns.get_mut(&conn) {
            if is_super {
                let super_id = Id {
                    scheme: "super".to_owned(),
                    id: String::new(),
                };
                if !c.auth.contains(&super_id) {
                    c.auth.push(super_id);
                }
            }
            if !c.auth.contains(&id) {
                c.auth.push(id);
            }
        }
        Reply::Send(error_reply(xid, 0, code::OK))
    }

    fn read_data(&self, path: &str, auth: &[Id]) -> Result<(Vec<u8>, Stat), i32> {
        let node = self.tree.get(path).ok_or(code::NO_NODE)?;
        if !acl::allowed(&node.acl, perms::READ, auth) {
            return Err(code::NO_AUTH);
        }
        Ok((node.data.clone(), node.stat()))
    }

    fn read_children(&self, path: &str, auth: &[Id]) -> Result<(Vec<String>, Stat), i32> {
        let node = self.tree.get(path).ok_or(code::NO_NODE)?;
        if !acl::allowed(&node.acl, perms::READ, auth) {
            return Err(code::NO_AUTH);
        }
        Ok((node.children.iter().cloned().collect(), node.stat()))
    }

    /// Runs write operations as one transaction with one new zxid: all apply, or (on the first
    /// failure) none, and the error says which operation failed with what.
    fn transaction(
        &mut self,
        session: i64,
        auth: Vec<Id>,
        ops: &[WriteOp],
        multi: bool,
    ) -> Result<Vec<OpResult>, (usize, i32)> {
        let zxid = self.next_zxid();
        let mut txn = Txn {
            zxid,
            time: now_millis(),
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

    fn remember(&self, txn: &mut Txn, path: &str) {
        if let Some(journal) = txn.journal.as_mut() {
            journal.push((path.to_owned(), self.tree.get(path).cloned()));
        }
    }

    fn apply(&mut self, txn: &mut Txn, op: &WriteOp) -> Result<OpResult, i32> {
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

    /// Removes a (checked) node and records its watch triggers.
    fn remove_node(
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

    /// Sends the notifications for committed triggers.
    fn dispatch(&mut self, triggers: Vec<Trigger>) {
        let none = HashSet::new();
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
            let mut targets: Vec<ConnId> = fired.into_iter().collect();
            targets.sort_unstable();
            for conn in targets {
                let Some(c) = self.conns.get(&conn) else {
                    continue;
                };
                if !acl::allowed(&t.acl, perms::READ, &c.auth) {
                    continue;
                }
                let _ = c.tx.send(Outbound::Frame(frame.clone()));
            }
        }
    }

    /// Ends a session: deletes its ephemeral nodes (firing their watches) in one transaction.
    pub fn kill_session(&mut self, session: i64) {
        let zxid = self.next_zxid();
        let mut triggers = Vec::new();
        for path in self.tree.ephemerals(session) {
            if let Some(parent) = parent_of(&path) {
                let parent = parent.to_owned();
                self.remove_node(&path, &parent, zxid, &mut triggers);
            }
        }
        self.sessions.remove(session);
        self.dispatch(triggers);
    }

    /// Expires session `id` now: removes it like a timeout would and closes its connection.
    /// Whether it existed.
    pub fn expire(&mut self, id: i64) -> bool {
        let Some(session) = self.sessions.get(id).cloned() else {
            return false;
        };
        debug!(session = format_args!("{id:#x}"), "expiring session");
        self.kill_session(id);
        if let Some(conn) = session.conn {
            self.send(conn, Outbound::Close);
            if let Some(c) = self.conns.get_mut(&conn) {
                c.session = 0;
            }
        }
        true
    }

    /// Expires every session whose deadline passed.
    pub fn expire_due(&mut self, now: Instant) {
        for id in self.sessions.due(now) {
            self.expire(id);
        }
    }

    /// Deletes empty containers that once had children and expired TTL nodes without
    /// children, each as its own `deleteContainer` transaction.
    pub fn reap(&mut self) {
        let now = now_millis();
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
                    if node.children.is_empty() && ttl != 0 && now - node.stat.mtime > ttl {
                        candidates.push(path.clone());
                    }
                }
            }
        }
        for path in candidates {
            let op = WriteOp::Delete {
                path: path.clone(),
                version: -1,
                container: true,
            };
            if let Err((_, err)) = self.transaction(0, Vec::new(), &[op], false) {
                debug!(path, err, "container/TTL node not reaped");
            }
        }
    }

    /// Paths of all nodes (sorted), for tests.
    pub fn paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self.tree.paths().cloned().collect();
        paths.sort();
        paths
    }
}

/// ZooKeeper's `checkAndIncVersion`: -1 matches anything; the next version skips -1.
fn next_version(current: i32, expected: i32) -> Result<i32, i32> {
    if expected != -1 && expected != current {
        return Err(code::BAD_VERSION);
    }
    let next = current.wrapping_add(1);
    Ok(if next == -1 { 0 } else { next })
}
