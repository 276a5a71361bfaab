//! Curator's distributed lock recipes for Rust, built on the
//! `zk-curator-framework` crate's lock machinery.
//!
//! * [`InterProcessMutex`]: a reentrant mutex (per task), with a guard API
//!   and fencing tokens.
//! * [`InterProcessReadWriteLock`]: many readers or one writer, in arrival
//!   order, with downgrade (write → read) and an error instead of a hang on
//!   upgrade.
//! * [`InterProcessMultiLock`]: several locks taken as one, all or nothing,
//!   in one deadlock-free order.
//! * [`InterProcessSemaphoreV2`]: a counting semaphore handing out
//!   [`Lease`]s; multi-lease acquires are all or nothing and deadlock free.
//! * [`InterProcessSemaphoreMutex`]: a non-reentrant mutex (a one-lease
//!   semaphore) that any task may release.
//! * [`LeaderLatch`] and [`LeaderSelector`]: leader election on the same
//!   participant queue, each term a [`LeaderTerm`] (a [`Hold`], with its
//!   loss signal, fence and fencing token); [`LeaderElection`] is what both
//!   answer.
//!
//! Every lock implements [`InterProcessLock`], so locks can be handled
//! uniformly (for example combined into a multi-lock). Node layouts are
//! Curator's, so Rust and JVM services can contend on the same paths; the
//! [`layout`] module names them, holds each recipe's holder and waiter
//! rule, and reads a lock's participants as the recipes see them.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![deny(rustdoc::broken_intra_doc_links)]

pub mod fresh;
mod held;
pub mod layout;
mod leader;
mod lock;
mod multi;
mod mutex;
mod owner;
mod reentrant;
mod rwlock;
mod semaphore;
mod semaphore_mutex;
pub mod tree;

/// The latch's node name, also at [`layout::LATCH_NAME`] beside the others.
pub use self::layout::LATCH_NAME;
pub use self::leader::{
    CloseMode, LatchListenerHandle, LatchState, LeaderElection, LeaderLatch, LeaderLatchListener,
    LeaderObserver, LeaderSelector, LeaderSelectorListener, LeaderTerm, Leadership, Observation,
    ObservedLeader, Participant,
};
pub use self::lock::InterProcessLock;
pub use self::multi::InterProcessMultiLock;
pub use self::mutex::{InterProcessMutex, MutexGuard};
pub use self::owner::Owner;
pub use self::rwlock::{InterProcessReadWriteLock, ReadGuard, ReadLock, WriteGuard, WriteLock};
pub use self::semaphore::{InterProcessSemaphoreV2, Lease};
pub use self::semaphore_mutex::InterProcessSemaphoreMutex;
pub use zk_curator_framework::lock_internals::{
    AcquiredNode, Bound, CohortPolicy, Fence, FencedMulti, FencingToken, Hold, HoldBounds, Layout,
    LockLoss, RevocationListener, Revoker, Wait,
};
pub use zk_curator_framework::{Error, Result};
