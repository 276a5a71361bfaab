//! The server's state machine: applies requests to the tree, sessions and watches, and encodes
//! the replies, following Apache ZooKeeper 3.8 (`PrepRequestProcessor`, `DataTree`,
//! `FinalRequestProcessor`) for the order of checks, error codes and stat bookkeeping.
//!
//! [`State::request`] routes each request to the family that handles it, one file each:
//! `reads` (exists, getData, getChildren, sync, multiRead …), `writes` (create, delete,
//! setData, setACL, check) over `txn` (one zxid, all or nothing, triggers on commit), `multi`, `watches` (watch
//! management and notification dispatch), `sessions` (handshake, ping, close, expiry) and
//! `auth` (auth, whoAmI, getACL).
//!
//! Everything here runs under one lock, so requests are applied one at a time in a global
//! order. Watch notifications are queued on the watchers' connections while the lock is held,
//! before the reply to the request that caused them: a connection therefore sees an event
//! before the reply to any read it issued afterwards. The caller must queue the returned
//! [`Reply`] while it still holds the same lock (the server does): otherwise another
//! session's write could queue an event ahead of the reply to the read that set its watch,
//! and a client, which arms the watcher only on the reply, would lose that event.

mod auth;
mod multi;
mod reads;
mod replica;
mod sessions;
mod txn;
mod watches;
mod writes;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use tracing::debug;

use crate::codec::{self, code, Id, Request, Writer};
use crate::outbox::Outbox;
use crate::session::Sessions;
use crate::tree::DataTree;
use crate::watch::{ConnId, Watches};

pub use crate::outbox::Outbound;
pub use replica::Applied;

/// A connection as the state knows it.
#[derive(Debug)]
pub struct Conn {
    /// Its session, 0 before the handshake.
    pub session: i64,
    /// The client's address.
    pub peer: SocketAddr,
    /// Requests received on it.
    pub received: u64,
    /// Its identities (`ip` plus whatever `auth` added).
    pub auth: Vec<Id>,
    /// Its outbound queue.
    pub outbox: Outbox,
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

impl Reply {
    /// Queues the reply on a connection's outbox (closing it where the
    /// reply says so); whether the connection is closing.
    pub(crate) fn queue_on(self, tx: &Outbox) -> bool {
        match self {
            Reply::Send(frame) => {
                tx.frame(frame);
                false
            }
            Reply::SendAndClose(frame) => {
                tx.frame(frame);
                tx.close();
                true
            }
            Reply::Close => {
                tx.close();
                true
            }
            Reply::Nothing => false,
        }
    }
}

/// Server-wide settings the state applies.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Smallest session timeout granted.
    pub min_session_timeout: Duration,
    /// Largest session timeout granted.
    pub max_session_timeout: Duration,
    /// `digest` identity of the super user, if any.
    pub super_digest: Option<String>,
    /// Whether TTL nodes may be created (ZooKeeper's `extendedTypesEnabled`).
    pub extended_types: bool,
    /// Whether children are listed sorted (otherwise in no particular order).
    pub sorted_children: bool,
    /// The time (ms since the epoch) node times count from; `None`: the wall clock when the
    /// state is made.
    pub node_time_origin: Option<i64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            min_session_timeout: Duration::from_millis(400),
            max_session_timeout: Duration::from_secs(60),
            super_digest: None,
            extended_types: false,
            sorted_children: false,
            node_time_origin: None,
        }
    }
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
    /// Open connections, by id: the order the admin words list them in.
    pub conns: BTreeMap<ConnId, Conn>,
    /// Settings.
    pub limits: Limits,
    /// Requests answered (for the four-letter words).
    pub received: u64,
    /// The wall clock (ms since the epoch) when the state was made, and the server's clock
    /// then: node times are the one plus what the other has advanced since.
    epoch: (i64, Instant),
    /// The key of the server's unsorted child order (see `read_children`), drawn once
    /// from fastrand's thread-local generator.
    order_key: u64,
    /// The node time of the transaction being applied, when a simulated ensemble's leader
    /// gave it (see `replica`); `None` on a single server.
    fixed_time: Option<i64>,
}

/// The wall clock in ms since the epoch (0 if it reads before the epoch).
fn wall_clock_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn error_reply(xid: i32, zxid: i64, err: i32) -> Vec<u8> {
    Writer::reply(xid, zxid, err).finish()
}

impl State {
    /// An empty server.
    pub fn new(limits: Limits) -> State {
        let origin = limits.node_time_origin.unwrap_or_else(wall_clock_millis);
        State {
            tree: DataTree::new(),
            watches: Watches::default(),
            sessions: Sessions::new(),
            zxid: 0,
            conns: BTreeMap::new(),
            limits,
            received: 0,
            epoch: (origin, Instant::now()),
            order_key: fastrand::u64(..),
            fixed_time: None,
        }
    }

    /// The time, in ms since the epoch, that writes stamp on nodes (`ctime`, `mtime`) and
    /// that TTL nodes expire by, at `now` on the server's clock. It advances with that clock
    /// (tokio's, paused and advanced with it in a simulation), not with the wall clock, which
    /// is read only once, when the state is made (unless `Limits::node_time_origin` is set).
    fn time_millis(&self, now: Instant) -> i64 {
        if let Some(time) = self.fixed_time {
            return time;
        }
        let elapsed = now.saturating_duration_since(self.epoch.1).as_millis();
        self.epoch
            .0
            .saturating_add(i64::try_from(elapsed).unwrap_or(i64::MAX))
    }

    fn next_zxid(&mut self) -> i64 {
        self.zxid += 1;
        self.zxid
    }

    /// Registers a new connection from `peer`.
    pub fn register_conn(&mut self, conn: ConnId, peer: SocketAddr, outbox: Outbox) {
        self.conns.insert(
            conn,
            Conn {
                session: 0,
                peer,
                received: 0,
                auth: vec![Id {
                    scheme: "ip".to_owned(),
                    id: peer.ip().to_string(),
                }],
                outbox,
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
            match out {
                Outbound::Frame(frame) => c.outbox.frame(frame),
                Outbound::Close => c.outbox.close(),
            }
        }
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
        if !self.sessions.touch(session, now.into_std()) {
            return Reply::SendAndClose(error_reply(xid, self.zxid, code::SESSION_EXPIRED));
        }
        self.received = self.received.wrapping_add(1);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.received = c.received.wrapping_add(1);
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
            Request::Read(read) => self.read(conn, session, xid, read, &auth),
            Request::Write(op) => self.write(session, auth, xid, op, now),
            Request::Multi(ops) => self.multi(session, auth, xid, &ops, now),
            Request::Watch(watch) => self.watch(conn, xid, watch),
            Request::Session(request) => self.session_request(session, xid, request),
            Request::Auth(request) => self.auth_request(conn, xid, request, &auth),
        }
    }

    /// Paths of all nodes (sorted), for tests.
    pub fn paths(&self) -> Vec<String> {
        self.tree.paths().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{child_path, Node};

    /// A fresh server's state with forty children under `/p`, listing them sorted or not.
    fn forty_children(sorted_children: bool) -> State {
        let mut state = State::new(Limits {
            sorted_children,
            ..Limits::default()
        });
        let acl = state
            .tree
            .get("/")
            .map(|n| n.acl.clone())
            .unwrap_or_default();
        let mut parent = Node::new(None, acl.clone(), 1, 0, 0);
        for i in 0..40 {
            let name = format!("c{i:02}");
            state.tree.put(
                &child_path("/p", &name),
                Node::new(None, acl.clone(), 1, 0, 0),
            );
            parent.children.insert(name);
        }
        state.tree.put("/p", parent);
        state
    }

    /// The names a server made with this thread's generator seeded with `seed` lists for
    /// `/p`, twice.
    fn listed(sorted: bool, seed: u64) -> Vec<String> {
        fastrand::seed(seed);
        let state = forty_children(sorted);
        let list = || match state.read_children("/p", &[]) {
            Ok((children, _)) => children,
            Err(code) => panic!("getChildren failed with {code}"),
        };
        let first = list();
        // The same set, the same order, as from ZooKeeper's hash set.
        assert_eq!(list(), first);
        first
    }

    #[test]
    fn unsorted_children_are_in_an_order_that_follows_the_seed() {
        let names: Vec<String> = (0..40).map(|i| format!("c{i:02}")).collect();
        // Two servers, each with its own sets of children (a hash set would order them by
        // its own random keys, a different order each time).
        let first = listed(false, 7);
        assert_eq!(listed(false, 7), first);
        // Unsorted for real (in name order with probability 1/40!), and another seed
        // orders them otherwise.
        assert_ne!(first, names);
        assert_ne!(listed(false, 8), first);
        let mut sorted = first.clone();
        sorted.sort();
        assert_eq!(sorted, names);
        // With sorted children, every seed lists them in name order.
        assert_eq!(listed(true, 7), names);
        assert_eq!(listed(true, 8), names);
    }

    #[test]
    fn node_times_count_from_the_origin_given() {
        let state = State::new(Limits {
            node_time_origin: Some(1_000),
            ..Limits::default()
        });
        let start = state.epoch.1;
        assert_eq!(state.time_millis(start), 1_000);
        assert_eq!(state.time_millis(start + Duration::from_millis(250)), 1_250);
    }

    #[test]
    fn node_times_follow_the_servers_clock() {
        let state = State::new(Limits::default());
        let start = state.epoch.1;
        let later = start + Duration::from_secs(3600);
        assert_eq!(
            state.time_millis(later) - state.time_millis(start),
            3_600_000
        );
    }
}
