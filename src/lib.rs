//! zk-curator: Apache Curator's coordination recipes for Rust services on
//! ZooKeeper.
//!
//! This facade re-exports the two crates underneath and the client they
//! speak through:
//! * [`framework`]: the session-keeping [`Framework`], connection state,
//!   retry policies and the lock machinery ([`framework::lock_internals`]);
//! * [`recipes`]: the locks ([`InterProcessMutex`], [`InterProcessReadWriteLock`], …)
//!   and the elections ([`LeaderLatch`], [`LeaderSelector`], [`LeaderObserver`]);
//! * `zk`: the ZooKeeper client underneath,
//!   [zookeeper-client](https://docs.rs/zookeeper-client/0.11), whose types
//!   this API takes (`zk::CreateMode` and `zk::Acls` for a fenced create,
//!   `zk::MultiWriter` for a fenced multi of your own, `zk::Stat`).
//!
//! The repository's README has the first steps, its guide (`docs/guide/`)
//! the full picture, and `docs/DESIGN.md` the design notes.
//!
//! Most methods are the types' own. The few that live in traits, so that
//! generic code can take any recipe (an election's `await_leadership`,
//! `leader()`, `participants()`, `proclaim()` on [`LeaderElection`]; a lock's
//! `acquire_with` on [`InterProcessLock`]), come into scope with one line:
//! `use zk_curator::prelude::*;` (see [`prelude`]).
//!
//! # A tour
//!
//! Every example below runs as it is (`cargo test --doc`), against the
//! embedded ZooKeeper-protocol server of `zk-curator-testing`; point
//! `connect_string` at your ensemble instead.
//!
//! **A mutex, its fencing token and a fenced write.** The guard is a
//! [`Hold`]: it knows its token, whether it is still valid, and how to make
//! a ZooKeeper write conditional on still holding the lock.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use zk_curator::zk;
//! use zk_curator::{Framework, InterProcessMutex};
//!
//! let server = zk_curator_testing::EmbeddedServer::start().await?;
//! let framework = Framework::builder().connect_string(server.connect_string()).build()?;
//! framework.start()?;
//! framework.block_until_connected(Duration::from_secs(10)).await?;
//!
//! let mutex = InterProcessMutex::new(framework.clone(), "/locks/report")?;
//! let guard = mutex.lock().await?;
//! println!("holding with fencing token {}", guard.fencing_token());
//! let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
//! guard.fence()?.create("/report", b"written under the lock", &open).await?;
//! assert!(guard.is_valid());
//! guard.release().await?;
//!
//! // Without waiting: held at once, or nothing left behind.
//! let guard = mutex.try_lock().await?.expect("free");
//! assert!(mutex.try_lock().await?.is_none(), "not reentrant: a second guard waits");
//! guard.release().await?;
//! framework.close().await;
//! # Ok(()) }
//! ```
//!
//! **Stop when the lock is lost.** Run the work beside [`Hold::lost`]; it
//! fires on a suspended or lost session, a deleted node or a closed
//! framework.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # use std::time::Duration;
//! # use zk_curator::{Framework, InterProcessMutex};
//! # let server = zk_curator_testing::EmbeddedServer::start().await?;
//! # let framework = Framework::builder().connect_string(server.connect_string()).build()?;
//! # framework.start()?;
//! # framework.block_until_connected(Duration::from_secs(10)).await?;
//! let mutex = InterProcessMutex::new(framework.clone(), "/locks/job")?;
//! let guard = mutex.lock().await?;
//! let work = tokio::time::sleep(Duration::from_millis(50)); // the protected work
//! tokio::select! {
//!     _ = work => println!("done while holding"),
//!     reason = guard.lost() => println!("stopped: {reason}"),
//! }
//! guard.release().await?;
//! # framework.close().await;
//! # Ok(()) }
//! ```
//!
//! **Readers and writers, a semaphore, several locks at once.**
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # use std::time::Duration;
//! # use zk_curator::Framework;
//! # let server = zk_curator_testing::EmbeddedServer::start().await?;
//! # let framework = Framework::builder().connect_string(server.connect_string()).build()?;
//! # framework.start()?;
//! # framework.block_until_connected(Duration::from_secs(10)).await?;
//! use zk_curator::{InterProcessMultiLock, InterProcessReadWriteLock, InterProcessSemaphoreV2};
//!
//! let catalogue = InterProcessReadWriteLock::new(framework.clone(), "/locks/catalogue")?;
//! let (read, write) = (catalogue.read_lock(), catalogue.write_lock());
//! write.acquire().await?;
//! read.acquire().await?; // downgrade: same task, level with the write node
//! write.release().await?;
//! read.release().await?;
//!
//! let connections = InterProcessSemaphoreV2::new(framework.clone(), "/semaphores/db", 2)?;
//! let leases = connections.acquire_many(2).await?;
//! assert!(connections.try_acquire().await?.is_none(), "both leases are out");
//! InterProcessSemaphoreV2::return_all(leases).await?;
//!
//! let accounts = InterProcessMultiLock::from_paths(
//!     framework.clone(),
//!     &["/locks/accounts/bob", "/locks/accounts/alice"],
//! )?;
//! assert!(accounts.acquire_timeout(Duration::from_secs(5)).await?);
//! accounts.release().await?;
//! framework.close().await;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

// Inlined, so that these docs are whole on their own (built alone, links
// into a crate re-exported without inlining would show as plain text).
#[doc(inline)]
pub use zk_curator_framework as framework;
/// The ZooKeeper client underneath, [`zookeeper_client`](https://docs.rs/zookeeper-client/0.11):
/// its types appear in this API (`zk::CreateMode`, `zk::Acls`, `zk::Stat`,
/// `zk::MultiWriter` for fenced writes, `zk::Client` for a raw session).
pub use zk_curator_framework::zk;
#[doc(inline)]
pub use zk_curator_recipes as recipes;

#[cfg(feature = "tls")]
pub use zk_curator_framework::TlsConfig;
pub use zk_curator_framework::{
    AclProvider, ConnectFailure, ConnectionState, ConnectionStateListener, CreatorAllAnyoneRead,
    EnsembleProvider, Error, ErrorPolicy, FixedAcl, FixedEnsemble, Framework, FrameworkBuilder,
    Result, StateWatcher,
};
pub use zk_curator_recipes::{
    AcquiredNode, Bound, CohortPolicy, Fence, FencingToken, Hold, HoldBounds, InterProcessLock,
    InterProcessMultiLock, InterProcessMutex, InterProcessReadWriteLock, Layout, LockLoss,
    MutexGuard, Owner, ReadGuard, ReadLock, RevocationListener, Revoker, Wait, WriteGuard,
    WriteLock,
};
pub use zk_curator_recipes::{
    CloseMode, LatchListenerHandle, LatchState, LeaderElection, LeaderLatch, LeaderLatchListener,
    LeaderObserver, LeaderSelector, LeaderSelectorListener, LeaderTerm, Leadership, Observation,
    ObservedLeader, Participant,
};
pub use zk_curator_recipes::{InterProcessSemaphoreMutex, InterProcessSemaphoreV2, Lease};

/// The traits whose methods the recipes are used through, to import whole:
/// `use zk_curator::prelude::*;`.
///
/// ```no_run
/// use zk_curator::prelude::*;
/// use zk_curator::{Framework, LeaderLatch};
///
/// # async fn run(framework: Framework) -> zk_curator::Result<()> {
/// let latch = LeaderLatch::new(framework, "/services/scheduler", "host-a")?;
/// latch.start()?;
/// let term = latch.await_leadership().await?; // a LeaderElection method
/// println!("leading, token {}", term.fencing_token());
/// latch.close().await?;
/// # Ok(()) }
/// ```
pub mod prelude {
    pub use zk_curator_recipes::{InterProcessLock, LeaderElection};
}

/// The Rust blocks of the repository's README, built as doc tests of this
/// crate (`cargo test --doc -p zk-curator`; those that need a server are
/// `no_run` here). `.ci/readme-check` builds them again as a user's crate
/// with only the README's dependencies and runs its programs.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The Rust blocks of the guide's chapters (`docs/guide/`, where the
/// README's longer sections live), built as doc tests as the README's are;
/// `.ci/readme-check` builds them as a user's crate too.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/README.md")]
#[doc = include_str!("../docs/guide/benchmarks.md")]
#[doc = include_str!("../docs/guide/chaos-and-simulation.md")]
#[doc = include_str!("../docs/guide/coming-from-curator.md")]
#[doc = include_str!("../docs/guide/command-line.md")]
#[doc = include_str!("../docs/guide/embedded-server.md")]
#[doc = include_str!("../docs/guide/interop.md")]
#[doc = include_str!("../docs/guide/layout.md")]
#[doc = include_str!("../docs/guide/leader-election.md")]
#[doc = include_str!("../docs/guide/many-tasks.md")]
#[doc = include_str!("../docs/guide/operations.md")]
#[doc = include_str!("../docs/guide/running-tests.md")]
#[doc = include_str!("../docs/guide/safety.md")]
#[doc = include_str!("../docs/guide/security.md")]
#[doc = include_str!("../docs/guide/stuck-holders.md")]
#[doc = include_str!("../docs/guide/testing.md")]
pub struct GuideDoctests;
