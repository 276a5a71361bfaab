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
//! * [`retry`] holds Curator's retry policies; [`Framework::call_with_retry`]
//!   is the one retry loop.
//! * [`lock_internals`] is the acquire loop every lock shares, generic over a
//!   [`LockInternalsDriver`](lock_internals::LockInternalsDriver) you can
//!   implement yourself.
//!
//! Runtime: tokio. [`Framework::start`] spawns its tasks on the current
//! runtime, and `zookeeper-client` must be built with its `tokio` feature
//! (this crate enables it).
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![deny(rustdoc::broken_intra_doc_links)]

mod acl;
mod error;
mod framework;
pub mod identity;
mod listener;
pub mod lock_internals;
mod loss;
mod packet;
pub mod path;
pub mod retry;
mod state;
pub mod telemetry;

pub use self::acl::{AclProvider, FixedAcl};
pub use self::error::{Error, Result};
pub use self::framework::{Framework, FrameworkBuilder, Metrics, Session};
pub use self::identity::HolderIdentity;
pub use self::listener::{ConnectionStateListener, ListenerHandle};
pub use self::loss::LockLoss;
pub use self::packet::DEFAULT_MAX_PACKET_SIZE;
pub use self::state::{next_state, ConnectionState, ErrorPolicy, StateEvent};
pub use zookeeper_client as zk;
