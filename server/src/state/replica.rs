//! A member's side of a simulated ensemble (see `crate::ensemble`): the state applies the
//! transactions a leader ordered, each at the zxid and node time the leader gave it, whatever
//! its own clock and counter say, and keeps sessions it did not create (global sessions made
//! on another member, local sessions of its own).
//!
//! Nothing here runs on a single server: its requests go through [`State::request`] as
//! always.

use std::time::Duration;

use tokio::time::Instant;

use crate::codec::{code, Id, Request, SessionRequest, WriteOp};
use crate::watch::ConnId;

use super::{error_reply, Outbound, Reply, State};

/// One transaction of a simulated ensemble's log, as a member applies it.
#[derive(Clone, Debug)]
pub enum Applied {
    /// A client's write, `multi` or `closeSession`, by `session` with identities `auth`.
    Request {
        /// The session that sent it.
        session: i64,
        /// Its connection's identities when it was sent.
        auth: Vec<Id>,
        /// The request (a write, a multi, or a close).
        request: Request,
    },
    /// A global session made (or a local one upgraded).
    CreateSession {
        /// Its id.
        id: i64,
        /// Its negotiated timeout.
        timeout: Duration,
    },
    /// A session ended by the leader (expired): its ephemeral nodes go.
    CloseSession {
        /// Its id.
        id: i64,
    },
    /// A request of a session the leader no longer had: answered `SessionExpired`.
    Refused {
        /// The session that sent it.
        session: i64,
    },
    /// A request of a session that has moved to another member since it was sent (the
    /// client left the connection it came on): not applied, and that connection is
    /// closed without an answer, as ZooKeeper's servers do with a `SessionMoved` request.
    Moved {
        /// The session that sent it.
        session: i64,
    },
    /// An empty container or an expired TTL node deleted.
    Reap {
        /// The node.
        path: String,
    },
}

impl State {
    /// Applies one committed transaction at `zxid`, dating the nodes it writes `time` (ms since
    /// the epoch), as the leader ordered it. `origin` is the connection and xid of the request
    /// when it was sent to this member: its reply is returned, for that connection if it
    /// still serves the request's session (the member answers once it has applied the
    /// write, as a ZooKeeper follower does: see [`State::answer`]). Whatever it does, the
    /// member's zxid is `zxid` afterwards.
    pub fn apply_committed(
        &mut self,
        zxid: i64,
        time: i64,
        what: &Applied,
        origin: Option<(ConnId, i32)>,
        now: Instant,
    ) -> Option<(ConnId, Reply)> {
        self.zxid = zxid - 1;
        self.fixed_time = Some(time);
        let xid = origin.map_or(0, |(_, xid)| xid);
        let reply = match what {
            Applied::Request {
                session,
                auth,
                request,
            } => {
                let reply = match request {
                    Request::Write(op) => self.write(*session, auth.clone(), xid, op.clone(), now),
                    Request::Multi(ops) => self.multi(*session, auth.clone(), xid, ops, now),
                    Request::Session(SessionRequest::Close) => {
                        self.end_session(*session, origin.map(|(conn, _)| conn));
                        Reply::SendAndClose(error_reply(xid, zxid, code::OK))
                    }
                    // Nothing else is logged.
                    _ => Reply::Nothing,
                };
                // Answered only on the connection that sent it, if it still serves the session.
                origin
                    .filter(|(conn, _)| self.conns.get(conn).is_some_and(|c| c.session == *session))
                    .map(|(conn, _)| (conn, reply))
            }
            Applied::CreateSession { id, timeout } => {
                self.next_zxid();
                self.adopt_session(*id, *timeout, now);
                None
            }
            Applied::CloseSession { id } => {
                self.end_session(*id, None);
                None
            }
            Applied::Refused { session } => {
                self.next_zxid();
                origin
                    .filter(|(conn, _)| self.conns.get(conn).is_some_and(|c| c.session == *session))
                    .map(|(conn, _)| {
                        let frame = error_reply(xid, zxid, code::SESSION_EXPIRED);
                        (conn, Reply::SendAndClose(frame))
                    })
            }
            Applied::Moved { session } => {
                self.next_zxid();
                origin
                    .filter(|(conn, _)| self.conns.get(conn).is_some_and(|c| c.session == *session))
                    .map(|(conn, _)| (conn, Reply::Close))
            }
            Applied::Reap { path } => {
                let op = WriteOp::Delete {
                    path: path.clone(),
                    version: -1,
                    container: true,
                };
                let _ = self.transaction(0, Vec::new(), &[op], false, now);
                None
            }
        };
        self.fixed_time = None;
        self.zxid = zxid;
        reply
    }

    /// Queues `reply` on `conn`.
    pub fn answer(&self, conn: ConnId, reply: Reply) {
        match reply {
            Reply::Send(frame) => self.send(conn, Outbound::Frame(frame)),
            Reply::SendAndClose(frame) => {
                self.send(conn, Outbound::Frame(frame));
                self.send(conn, Outbound::Close);
            }
            Reply::Close => self.send(conn, Outbound::Close),
            Reply::Nothing => {}
        }
    }

    /// Ends session `id` in one transaction (its ephemeral nodes deleted, their watches
    /// fired) and closes the connection of this member that served it, unless that is
    /// `closing` (which is answered first).
    fn end_session(&mut self, id: i64, closing: Option<ConnId>) {
        let conn = self.sessions.get(id).and_then(|s| s.conn);
        self.kill_session(id);
        if let Some(conn) = conn.filter(|c| Some(*c) != closing) {
            self.send(conn, Outbound::Close);
            if let Some(c) = self.conns.get_mut(&conn) {
                c.session = 0;
            }
        }
    }

    /// Keeps session `id` (made elsewhere, or local to this member) in this member's table,
    /// unattached, if it is not there yet.
    pub fn adopt_session(&mut self, id: i64, timeout: Duration, now: Instant) {
        if self.sessions.get(id).is_none() {
            self.sessions.adopt(id, timeout, now.into_std());
        }
    }

    /// Serves session `id` (known to this member) on `conn` from now on, as a new session
    /// of this member's: the connect response for it.
    pub fn bind_new(&mut self, conn: ConnId, id: i64, timeout: Duration, now: Instant) -> Vec<u8> {
        self.adopt_session(id, timeout, now);
        if let Some(s) = self.sessions.get_mut(id) {
            s.conn = Some(conn);
        }
        let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        self.bind(conn, id, timeout_ms, "new session").0
    }

    /// Forgets a local session of this member's without a transaction (it expired, or its
    /// client closed it, or the member restarted), closing its connection.
    pub fn drop_local_session(&mut self, id: i64) {
        if let Some(session) = self.sessions.remove(id) {
            if let Some(conn) = session.conn {
                self.send(conn, Outbound::Close);
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.session = 0;
                }
            }
        }
    }

    /// The session a connection serves (0: none yet, or no longer).
    pub fn session_of(&self, conn: ConnId) -> Option<i64> {
        self.conns.get(&conn).map(|c| c.session)
    }

    /// A connection's identities.
    pub fn auth_of(&self, conn: ConnId) -> Vec<Id> {
        self.conns
            .get(&conn)
            .map(|c| c.auth.clone())
            .unwrap_or_default()
    }

    /// Containers and TTL nodes that a reaper would delete now.
    pub fn reapable(&self, now: Instant) -> Vec<String> {
        self.reap_candidates(now)
    }

    /// Answers a request without applying anything (a member's `reconfig`: refused, with no
    /// transaction of its own).
    pub fn refuse_reconfig(&self, xid: i32) -> Reply {
        Reply::Send(error_reply(xid, self.zxid, code::RECONFIG_DISABLED))
    }
}
