//! The framework half of zk-curator: Apache Curator's `CuratorFramework`
//! and `LockInternals`, for Rust services on ZooKeeper.
//!
//! * [`Framework`] keeps a ZooKeeper session alive across connection loss
//!   and builds a new one after expiry, so callers never hold a dead client
//!   for long. It carries the namespace, ACL, retry policy and error policy
//!   every recipe shares.
//! * [`ConnectionState`] follows Curator's meaning (`Suspended` may still
//!   hold locks, `Lost` does not); listen with
//!   [`Framework::add_listener`] or [`Framework::state_changes`].
//! * [`retry`] holds Curator's retry policies and the loop that applies them
//!   ([`retry::RetryLoop`]); [`Framework::call_with_retry`] runs one call
//!   under it, and the lock engine drives it directly where one attempt
//!   spans several requests.
//! * [`lock_internals`] is the acquire loop every lock shares, generic over a
//!   [`LockInternalsDriver`](lock_internals::LockInternalsDriver) you can
//!   implement yourself.
//! * [`random`] is the one source of every random draw the framework and
//!   the recipes make; a deterministic simulation seeds it
//!   ([`random::seed`]) to replay a run.
//!
//! Runtime: tokio. [`Framework::start`] spawns its tasks on the current
//! runtime, and `zookeeper-client` must be built with its `tokio` feature
//! (this crate enables it).
//!
//! # Example
//!
//! A framework on one ensemble: start it, follow its connection, run a
//! ZooKeeper call on the current session under the retry policy, close it.
//! The locks themselves are in `zk-curator-recipes` (or the `zk-curator`
//! facade, whose front page has examples that run against an embedded
//! server); [`lock_internals`] is for drivers of your own.
//!
//! ```
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = zk_curator_server::EmbeddedServer::start().await?;
//! use std::time::Duration;
//! use futures::StreamExt;
//! use zk_curator::framework::retry::ExponentialBackoffRetry;
//! use zk_curator::{zk, ConnectionState, Framework};
//!
//! let framework = Framework::builder()
//!     .connect_string("127.0.0.1:2181")
//! #   .connect_string(server.connect_string())
//!     .namespace("my-service") // created on start if missing
//!     .session_timeout(Duration::from_secs(30))
//!     .retry_policy(ExponentialBackoffRetry::new(Duration::from_millis(100), 10)?)
//!     .build()?; // bad settings are refused here, before anything is sent
//! framework.start()?;
//! framework.block_until_connected(Duration::from_secs(10)).await?;
//!
//! // Suspended may still hold locks; Lost does not.
//! let mut states = Box::pin(framework.state_changes());
//! tokio::spawn(async move {
//!     while let Some(state) = states.next().await {
//!         if state == ConnectionState::Lost {
//!             eprintln!("session lost: stop the work that needed it");
//!         }
//!     }
//! });
//!
//! // Any call, on the current session, retried while the outcome is unknown:
//! let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
//! let open = &open;
//! framework
//!     .call_with_retry(|client| async move { client.mkdir("/config/feature", open).await })
//!     .await?;
//! let (data, stat) = framework
//!     .call_with_retry(|client| async move { client.get_data("/config/feature").await })
//!     .await?;
//! println!("{} bytes, version {}", data.len(), stat.version);
//!
//! framework.close().await; // returns once the server has ended the session
//! # Ok(())
//! # }
//! ```
//!
//! (Its doc test runs against the embedded server of `zk-curator-server`.)
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![deny(rustdoc::broken_intra_doc_links)]

mod acl;
#[doc(hidden)] // For the simulator (`sim/`), not for programs.
pub mod buggify;
mod connect_failure;
pub mod ensemble;
mod error;
mod framework;
pub mod identity;
mod listener;
pub mod lock_internals;
mod loss;
mod packet;
pub mod path;
pub mod random;
pub mod retry;
mod state;
pub mod telemetry;
#[cfg(feature = "tls")]
mod tls;

pub use self::acl::{AclProvider, CreatorAllAnyoneRead, FixedAcl};
pub use self::connect_failure::ConnectFailure;
pub use self::ensemble::{EnsembleProvider, FixedEnsemble};
pub use self::error::{Error, Result};
/// The session layer's interface to the lock engine (see `framework/port.rs`).
pub(crate) use self::framework::{CleanupJob, SessionPort};
pub use self::framework::{Framework, FrameworkBuilder, Metrics, Session, StateWatcher};
pub use self::identity::HolderIdentity;
pub use self::listener::{ConnectionStateListener, ListenerHandle};
pub use self::loss::LockLoss;
pub use self::packet::DEFAULT_MAX_PACKET_SIZE;
pub use self::state::{next_state, ConnectionState, ErrorPolicy, StateEvent};
#[cfg(feature = "tls")]
pub use self::tls::TlsConfig;
pub use zookeeper_client as zk;
