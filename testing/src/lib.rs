//! Test support for zk-curator: test servers (embedded or a real ZooKeeper),
//! forced session expiry and a fault-injecting network proxy.
//!
//! * [`TestingServer`] is what tests and examples start: the [`EmbeddedServer`] by default,
//!   a real ZooKeeper with `ZK_TEST_SERVER=real` (see [`backend`]).
//! * [`ZooKeeperServer`] runs an Apache ZooKeeper server (a JVM) on a free loopback port with a
//!   private data directory, tuned for tests: 100 ms ticks, short minimum session timeout, TTL
//!   nodes enabled and container nodes reaped within about a second. It can be stopped and
//!   restarted on the same port with its data, and its JVM dies with the test process even if
//!   the server is kept in a `static`.
//! * [`TestingCluster`] runs a real ZooKeeper ensemble (3 servers by default) on loopback for
//!   fail-over tests: find and kill the leader, stop and restart single nodes or all of them,
//!   connect to one node or to the whole ensemble, stall a follower's link to its leader or
//!   cut a member off from its peers (through fault proxies on the peer links); see
//!   [`cluster`].
//! * [`ZooKeeperServerBuilder::tls`] serves TLS (optionally mutual) from certificates made at
//!   test time ([`TestCertificates`], see [`tls`]);
//!   [`sasl_digest_user`](ZooKeeperServerBuilder::sasl_digest_user) and
//!   [`kerberos`](ZooKeeperServerBuilder::kerberos) turn on SASL DIGEST-MD5 or GSSAPI, the
//!   latter against a private MIT KDC ([`Kdc`], see [`kerberos`]).
//! * [`expire_session`] expires a client's session on the server and waits until the client
//!   has noticed.
//! * [`FaultProxy`] sits between clients and the server and drops connections, partitions the
//!   network, or swallows the reply to a chosen request.
//! * [`Peer`](peer::Peer) drives a participant of another library (a Curator program, a
//!   kazoo script) as a child process that speaks in lines.
//! * [`EmbeddedServer`] is an in-process, single-node server speaking ZooKeeper's client
//!   protocol (no JVM needed), with the same faults built in; it is the `zk-curator-server`
//!   crate, re-exported here as the module `embedded`.
//!
//! For the real server, ZooKeeper must be installed (`apt-get install -y zookeeper` on Debian, which provides the
//! jars in `/usr/share/java`; set [`ZOOKEEPER_CLASSPATH`](server::CLASSPATH_ENV) to use other
//! jars) and `java` must be on `PATH` or in `$JAVA_HOME/bin`. Suites that need it ask
//! [`Prerequisite::check`](backend::Prerequisite::check): where it is missing the test fails
//! naming what to install, unless `ZK_SKIP_MISSING` asks to skip it.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), zk_curator_testing::Error> {
//! use std::time::Duration;
//! use zk_curator_testing::{FaultProxy, RequestMatcher, TestingServer};
//! use zookeeper_client as zk;
//!
//! let server = TestingServer::start_async().await?;
//! let proxy = FaultProxy::start(server.connect_string()).await?;
//! let client = zk::Client::connect(&proxy.connect_string()).await?;
//! let fault = proxy.lose_reply_to_next(RequestMatcher::creates().path_contains("_c_"));
//! // The code under test runs with `client`; here, a create the fault matches:
//! let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
//! let create = client.create("/_c_demo", b"", &ephemeral);
//! assert!(fault.wait(Duration::from_secs(10)).await.is_some(), "the reply was swallowed");
//! drop(create); // its answer never comes
//! zk_curator_testing::expire_session(&server.connect_string(), &client).await?;
//! # Ok(())
//! # }
//! ```
//!
//! (`zk-curator` itself is tested this way; the guide's "The tests and the
//! examples", `docs/guide/running-tests.md`, says how a suite that needs a
//! real ZooKeeper, Curator or kazoo behaves when they are missing: see
//! [`backend::Prerequisite`].)

#![forbid(unsafe_code)]

pub mod backend;
pub mod cluster;
pub mod curator;
pub mod error;
pub mod expire;
pub mod kerberos;
pub mod peer;
mod process;
pub mod proxy;
pub mod server;
pub mod tls;

pub use backend::{connect_string_or_start, Backend, TestingServer, BACKEND_ENV, CONNECT_ENV};
pub use cluster::{NodeMode, TestingCluster, TestingClusterBuilder};
pub use error::Error;
pub use expire::{close_granted_session, expire_session, expire_session_within};
pub use kerberos::{Kdc, KerberosService};
pub use proxy::{FaultProxy, LostReply, LostReplyFault, RequestMatcher, SessionGrant, Traffic};
pub use server::{zookeeper_available, ZooKeeperServer, ZooKeeperServerBuilder};
pub use tls::{ClientAuth, ServerTls};
#[cfg(feature = "tls")]
pub use tls::{TestCertificates, TestIdentity};
/// The embedded server, which lives in its own crate ([`zk_curator_server`]); re-exported
/// here so tests keep one import.
pub use zk_curator_server as embedded;
pub use zk_curator_server::{EmbeddedServer, EmbeddedServerBuilder};
