//! The session family: the handshake, `ping`, `closeSession`, expiry, and the requests the
//! server refuses (`reconfig`, `sasl`, unknown opcodes).

use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;

use crate::codec::{self, code, xid, ConnectRequest, SessionRequest};
use crate::tree::parent_of;
use crate::watch::ConnId;

use super::{error_reply, Outbound, Reply, State};

impl State {
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
            let id = self.sessions.create(timeout, conn, now.into_std());
            self.next_zxid(); // createSession is a transaction
            return Some(self.bind(conn, id, timeout_ms, "new session"));
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
        self.sessions.touch(id, now.into_std());
        Some(self.bind(conn, id, timeout_ms, "session re-attached"))
    }

    /// Serves session `id` on connection `conn` from now on: the connect
    /// response that tells the client so.
    pub(super) fn bind(
        &mut self,
        conn: ConnId,
        id: i64,
        timeout_ms: i32,
        what: &str,
    ) -> (Vec<u8>, bool) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.session = id;
        }
        debug!(
            conn,
            session = format_args!("{id:#x}"),
            timeout_ms,
            "{what}"
        );
        let password = self.sessions.password(id);
        (codec::connect_response(timeout_ms, id, &password), true)
    }

    /// Answers a session request.
    pub(super) fn session_request(
        &mut self,
        session: i64,
        xid: i32,
        request: SessionRequest,
    ) -> Reply {
        match request {
            SessionRequest::Ping => Reply::Send(error_reply(xid::PING, self.zxid, code::OK)),
            SessionRequest::Close => {
                self.kill_session(session);
                Reply::SendAndClose(error_reply(xid, self.zxid, code::OK))
            }
            SessionRequest::Reconfig => {
                let zxid = self.next_zxid();
                Reply::Send(error_reply(xid, zxid, code::RECONFIG_DISABLED))
            }
            SessionRequest::Sasl | SessionRequest::Unknown(_) => {
                Reply::SendAndClose(error_reply(xid, -1, code::UNIMPLEMENTED))
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
        for id in self.sessions.due(now.into_std()) {
            self.expire(id);
        }
    }
}
