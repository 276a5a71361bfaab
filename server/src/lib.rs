//! An in-process, single-node server speaking ZooKeeper's client wire protocol, for tests and
//! examples that should not need a JVM.
//!
//! [`EmbeddedServer::start`] listens on a free `127.0.0.1` port; real clients connect to
//! [`EmbeddedServer::connect_string`] exactly as to Apache ZooKeeper. The behaviour follows
//! ZooKeeper 3.8 (standalone):
//!
//! * **Sessions**: handshake with a negotiated timeout clamped to the configured bounds, a
//!   16-byte password, re-attach with the right password (the old connection is closed), an
//!   answer with session id 0 for unknown or expired sessions (clients report `Expired`),
//!   pings, `closeSession`, and expiry when a session is not heard from for its timeout.
//! * **Nodes**: persistent, ephemeral, sequential (10-digit suffix from the parent's count of
//!   child creations), container and TTL nodes; `delete`, `setData` and `check` with versions;
//!   full `Stat` (clients see `cversion` as creations plus deletions, and `ephemeralOwner` 0 for
//!   containers and TTL nodes, as ZooKeeper reports them); a global zxid that every write
//!   advances, failed ones included; ZooKeeper's error codes in ZooKeeper's order of checks.
//! * **Watches**: one-shot data, exist and child watches, persistent and persistent-recursive
//!   watches (`addWatch`), `setWatches`/`setWatches2` on reconnect (firing at once for changes
//!   after the client's zxid), `checkWatches`/`removeWatches`. Watches belong to a connection
//!   and are dropped with it. A notification is queued before the reply to any later request
//!   of the connection, and is only sent to connections allowed to read the node (3.8).
//! * **multi** (all or nothing; per-operation results and errors encoded as ZooKeeper does),
//!   **multiRead**, `sync`, `getEphemerals`, `getAllChildrenNumber`, `getACL`/`setACL`,
//!   `whoAmI`.
//! * **ACLs**: `world`, `digest` (`auth` packets with `user:password`), `ip`, `auth` (expanded to
//!   the connection's digest identities; `InvalidACL` without one), `super`; `NoAuth` on read,
//!   write, create, delete and admin.
//! * **Limits**: frames longer than `jute.maxbuffer` (`0xfffff`) close the connection;
//!   undecodable requests are answered with `MarshallingError`; headers too short to decode
//!   close only that connection; nothing a client sends can panic the server.
//! * **Fault injection**: [`EmbeddedServer::expire_session`], [`drop_connections`],
//!   [`stall`], [`lose_reply_to_next`].
//!
//! ZooKeeper 3.8 quirks reproduced on purpose (each checked against the real server by the
//! conformance tests): `exists` checks no ACL; creates inside a `multi` are answered as plain
//! `create`s (path only, no stat) unless they are container or TTL creates; a client-sent
//! `deleteContainer` takes its whole body as the path (so a jute string fails with
//! `BadArguments`); a successful stand-alone `check` gets no reply at all; a `multiRead`
//! holding writes fails with `MarshallingError`; the notification header carries zxid -1.
//!
//! Differences: children and `getEphemerals` lists come sorted (ZooKeeper's order is
//! arbitrary); session ids and passwords are not ZooKeeper's.
//!
//! Not implemented: SASL, reconfiguration (answered with `ReconfigDisabled`), quotas,
//! read-only mode, persistence across processes, and four-letter words other than `ruok`,
//! `srvr`, `stat` and `isro`.
//!
//! [`drop_connections`]: EmbeddedServer::drop_connections
//! [`stall`]: EmbeddedServer::stall
//! [`lose_reply_to_next`]: EmbeddedServer::lose_reply_to_next
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use zk_curator_server::EmbeddedServer;
//!
//! let server = EmbeddedServer::start().await?;
//! let client = zookeeper_client::Client::connect(&server.connect_string()).await?;
//! server.drop_connections(); // the client reconnects into its session
//! server.expire_session(client.session_id().0);
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

pub mod acl;
mod admin;
pub mod codec;
pub mod error;
pub mod faults;
mod outbox;
mod server;
pub mod session;
mod state;
pub mod tree;
pub mod watch;

pub use error::Error;
pub use faults::{LostReply, LostReplyHandle, RequestMatcher};
pub use server::{feed_bytes, EmbeddedServer, EmbeddedServerBuilder};
