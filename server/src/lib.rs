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
//! * **Null values** as ZooKeeper keeps them: a node created or set with null data reads back
//!   as null (not as empty bytes); an ACL whose id is null is accepted (kazoo's creator-only
//!   ACL sends one with the `auth` scheme).
//! * **TTL nodes** only when enabled ([`EmbeddedServerBuilder::extended_types`], ZooKeeper's
//!   `extendedTypesEnabled`); by default they fail with `Unimplemented`, as on ZooKeeper.
//! * **Children** are listed in no particular order, as ZooKeeper lists them (a client that
//!   forgets to sort shows it here too); [`EmbeddedServerBuilder::sorted_children`] sorts
//!   them for a test that needs a stable order.
//! * **Four-letter words** (sent instead of a handshake): `ruok`, `isro`, `srvr`, `stat`,
//!   `envi`, `conf`, `cons`, `dump`, `wchs`, `wchc`, `wchp`, `mntr`, `crst`, `srst`, `dirs`,
//!   in ZooKeeper's layout (figures the server does not keep read 0); an unknown word closes
//!   the connection without a reply.
//! * **Limits**: frames longer than `jute.maxbuffer` (`0xfffff`) close the connection;
//!   undecodable requests are answered with `MarshallingError`; headers too short to decode
//!   close only that connection; nothing a client sends can panic the server.
//! * **Bounded memory**: a connection whose unsent replies exceed
//!   [`max_outstanding_bytes`](EmbeddedServerBuilder::max_outstanding_bytes) is not read
//!   until they drain (ZooKeeper's backpressure), one whose queue of other sessions'
//!   notifications passes a hard cap is closed, and at most
//!   [`max_connections`](EmbeddedServerBuilder::max_connections) are served; see the
//!   builder's `# Memory` section for the bound.
//! * **Fault injection**: [`EmbeddedServer::expire_session`], [`drop_connections`],
//!   [`stall`], [`lose_reply_to_next`].
//! * **Connections accepted elsewhere**:
//!   [`EmbeddedServerBuilder::start_without_listener`] starts a server that binds nothing,
//!   and [`EmbeddedServer::serve_connection`] serves any byte stream its caller accepted (a
//!   simulated network's, an in-memory pipe), counted and dropped like the server's own.
//! * **Replayable under a seed**: the server's only randomness (session ids and passwords,
//!   the order of unsorted children) comes from `fastrand`'s thread-local generator, and no
//!   hash-map order decides what is sent or the order of events (expiry, notifications,
//!   ephemeral deletion, the admin words' lists). Seeded on the thread that runs the server
//!   (`fastrand::seed`, as a deterministic simulation does), a run repeats itself; node
//!   times and TTLs follow the runtime's clock from the wall-clock time the server started.
//! * **A simulated replicated ensemble** ([`ensemble::Ensemble`]), for the deterministic
//!   simulator and tests: members with trees of their own, a leader ordering the writes,
//!   followers applying them late and serving stale reads until `sync`, global and local
//!   sessions, refusals of clients that have seen a later zxid, and leader changes that keep
//!   or drop each write whole. See the module's docs for what it models.
//! * **TLS** (feature `tls`): ZooKeeper's `secureClientPort`, the same protocol inside TLS,
//!   either on the server's only port or on a second port beside the plaintext one, with
//!   client certificates optionally required and checked against a CA (mutual TLS, like
//!   `ssl.clientAuth=need`); see [TLS](#tls) below.
//!
//! ZooKeeper 3.8 quirks reproduced on purpose (each checked against the real server by the
//! conformance tests): `exists` checks no ACL; creates inside a `multi` are answered as plain
//! `create`s (path only, no stat) unless they are container or TTL creates; a client-sent
//! `deleteContainer` takes its whole body as the path (so a jute string fails with
//! `BadArguments`); a successful stand-alone `check` gets no reply at all; a `multiRead`
//! holding writes fails with `MarshallingError`; the notification header carries zxid -1.
//!
//! Differences: `getEphemerals` lists come sorted; session ids and passwords are not
//! ZooKeeper's; `maxClientCnxns` caps all connections together, not each client address.
//!
//! Not implemented: SASL, TLS client authentication as a ZooKeeper identity (the `x509`
//! ACL scheme), certificate revocation lists, reconfiguration (answered with `ReconfigDisabled`), quotas,
//! read-only mode, a real quorum protocol (the [`ensemble`] is simulated in memory),
//! persistence (everything is in memory), and the four-letter words that manage tracing or
//! the JVM.
//!
//! # Layout
//!
//! The codec (`codec`) and the state (`tree`, `watch`, `session`, `acl`) stay apart from the
//! request handling, which `state` splits by family of requests (reads, writes, multi,
//! watches, sessions, auth/ACL); `admin` answers the four-letter words; `server` holds the
//! handle, the builder, the accept loop and the timers; `connection` registers every
//! connection (accepted or handed over) and serves one stream with its backpressure
//! (`outbox`); both take the settings and the shared state from `shared`
//! (so `server` uses `connection`, never the other way round); `faults` holds the test hooks;
//! `ensemble` holds the simulated ensemble, whose members are `Shared` states served by
//! `connection` and applying its log through `state`'s `replica` family, in three layers:
//! `ensemble::replication` (what the members share: the log, elections, the global
//! sessions, and the `Seat` a member's `Shared` keeps) lies below `shared`;
//! `ensemble::member` (a member's handshakes, writes and `sync`, which `connection` hands
//! it) lies between `shared` and `connection`; `ensemble` itself, which starts the members
//! and serves the connections handed to them, lies above `connection`.
//!
//! # TLS
//!
//! With the `tls` feature, a `TlsConfig` made from PEM (a certificate chain and its key,
//! and optionally a CA that client certificates must chain to) makes the server speak TLS,
//! with rustls and its aws-lc-rs provider:
//!
//! ```ignore
//! use zk_curator_server::{EmbeddedServer, TlsConfig};
//!
//! let tls = TlsConfig::from_pem(&cert_chain_pem, &key_pem)?
//!     .with_client_ca_pem(&client_ca_pem)?; // optional: mutual TLS
//! // TLS beside plaintext, as ZooKeeper's clientPort + secureClientPort:
//! let server = EmbeddedServer::builder().secure_client_port(0, tls).start().await?;
//! let secure = server.tls_connect_string().unwrap(); // "tcp+tls://127.0.0.1:PORT"
//! // or TLS only, on the server's one port: EmbeddedServer::builder().tls_only(tls)
//! ```
//!
//! The TLS handshake runs in each connection's own task within a timeout, and a failed one
//! closes only that connection; after it, a TLS connection is served exactly as a plaintext
//! one (four-letter words, backpressure and fault injection included). The `conf` word
//! reports the TLS port as `secureClientPort`.
//!
//! # From a shell or another language's tests
//!
//! `zk-curator server --port 0` (the `zk-curator` command line) starts this server, prints
//! its connect string on the first line of stdout and serves until SIGINT or SIGTERM
//! (`--tls-cert`, `--tls-key` and `--tls-client-ca` add a TLS port); see the repository's
//! guide, `docs/guide/embedded-server.md`.
//!
//! [`drop_connections`]: EmbeddedServer::drop_connections
//! [`stall`]: EmbeddedServer::stall
//! [`lose_reply_to_next`]: EmbeddedServer::lose_reply_to_next
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use zk_curator_server::EmbeddedServer;
//! use zookeeper_client as zk;
//!
//! let server = EmbeddedServer::start().await?;
//! let client = zk::Client::connect(&server.connect_string()).await?;
//! let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
//! client.create("/worker", b"up", &ephemeral).await?;
//! assert!(server.expire_session(client.session_id().0)); // its ephemeral node goes at once
//! let observer = zk::Client::connect(&server.connect_string()).await?;
//! assert!(observer.check_stat("/worker").await?.is_none());
//! server.drop_connections(); // the observer reconnects into its session
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

pub mod acl;
mod admin;
pub mod codec;
mod connection;
pub mod ensemble;
pub mod error;
pub mod faults;
mod outbox;
mod server;
pub mod session;
mod shared;
mod state;
#[cfg(feature = "tls")]
mod tls;
pub mod tree;
pub mod watch;

pub use connection::feed_bytes;
pub use error::Error;
pub use faults::{LostReply, LostReplyHandle, RequestMatcher};
pub use server::{
    EmbeddedServer, EmbeddedServerBuilder, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_OUTSTANDING_BYTES,
};
#[cfg(feature = "tls")]
pub use tls::{TlsConfig, DEFAULT_TLS_HANDSHAKE_TIMEOUT};
