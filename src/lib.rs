//! zk-curator: Apache Curator's coordination recipes for Rust services on
//! ZooKeeper.
//!
//! This facade re-exports the two halves:
//! * [`framework`]: the session-keeping [`Framework`], connection state,
//!   retry policies and the lock machinery ([`framework::lock_internals`]);
//! * [`recipes`]: the locks ([`InterProcessMutex`], [`InterProcessReadWriteLock`], …).
//!
//! ```no_run
//! # async fn demo() -> zk_curator::Result<()> {
//! use std::time::Duration;
//! use zk_curator::{Framework, InterProcessMutex};
//!
//! let framework = Framework::builder().connect_string("127.0.0.1:2181").build()?;
//! framework.start()?;
//! framework.block_until_connected(Duration::from_secs(10)).await?;
//!
//! let mutex = InterProcessMutex::new(framework.clone(), "/locks/report")?;
//! let guard = mutex.lock().await?;
//! println!("holding with fencing token {}", guard.fencing_token());
//! guard.release().await?;
//! framework.close().await;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

pub use zk_curator_framework as framework;
pub use zk_curator_recipes as recipes;

pub use zk_curator_framework::{
    AclProvider, ConnectionState, ConnectionStateListener, Error, ErrorPolicy, FixedAcl, Framework,
    FrameworkBuilder, Result,
};
pub use zk_curator_recipes::{
    Fence, FencingToken, Hold, InterProcessLock, InterProcessMultiLock, InterProcessMutex,
    InterProcessReadWriteLock, LockLoss, MutexGuard, Owner, ReadGuard, ReadLock,
    RevocationListener, Revoker, WriteGuard, WriteLock,
};
pub use zk_curator_recipes::{InterProcessSemaphoreMutex, InterProcessSemaphoreV2, Lease};
