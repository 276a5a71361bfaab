//! [`InterProcessReadWriteLock`]: many readers or one writer, across
//! processes and hosts.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use futures::future::BoxFuture;
use futures::FutureExt;
use tracing::Instrument;
use zk_curator_framework::lock_internals::{
    standard_gets_the_lock, standard_sort_key, AcquiredNode, LockInternals, LockInternalsDriver,
    LockLoss, ParticipantNode, PredicateResults, Revocation, RevocationListener, SortKey,
    MAX_NODE_DATA,
};
use zk_curator_framework::path::{split, strip_protection};
use zk_curator_framework::{Error, Framework, Result};

use crate::lock::InterProcessLock;
use crate::owner::Owner;

/// The name Curator gives read participants (`_c_<uuid>-__READ__<seq>`).
const READ_LOCK_NAME: &str = "__READ__";
/// The name Curator gives write participants (`_c_<uuid>-__WRIT__<seq>`).
/// Both names must keep the same length (Curator insists on it).
const WRITE_LOCK_NAME: &str = "__WRIT__";

/// Which half of the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
}

/// One half's state: its acquire machinery, the task holds and the guards.
struct Side {
    internals: LockInternals,
    owners: DashMap<Owner, Hold>,
    guards: AtomicUsize,
    revocation: std::sync::Mutex<Option<Revocation>>,
}

impl Side {
    fn revocation(&self) -> Option<Revocation> {
        self.revocation
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_revocation(&self, revocation: Option<Revocation>) {
        *self.revocation.lock().unwrap_or_else(|e| e.into_inner()) = revocation;
    }
}

struct Hold {
    node: AcquiredNode,
    count: u64,
}

struct Shared {
    data: Arc<[u8]>,
    read: Side,
    write: Side,
}

/// A read-write lock shared by every process that uses the same ZooKeeper
/// path (Curator's `InterProcessReadWriteLock`; same node layout, so Rust and
/// JVM services contend correctly).
///
/// [`read_lock`](Self::read_lock) and [`write_lock`](Self::write_lock) hand
/// out the two halves. Both queue under the one path, in arrival order:
/// writers as `_c_<uuid>-__WRIT__<seq>`, readers as `_c_<uuid>-__READ__<seq>`,
/// all sorted together by sequence.
///
/// # Behaviour
///
/// * **Many readers or one writer, FIFO**: a writer holds the lock once it is
///   first in the queue; a reader holds it once no writer is ahead of it. A
///   reader arriving after a queued writer waits for that writer, so a
///   stream of readers cannot starve writers.
/// * **No herd**: a writer watches its immediate predecessor (reader or
///   writer); a reader watches the *nearest* writer ahead of it. Curator's
///   reader watches the *first* writer in the queue instead, so the release
///   of the head writer wakes every blocked reader, including those queued
///   behind later writers, which then only find another writer to watch.
///   With the nearest writer, a release wakes exactly the readers it admits
///   (the batch between that writer and the next) and the next writer's
///   single watch. Correctness is unchanged: while the writer a reader
///   watches is there, the answer is "wait" whatever else happens, and when
///   it goes, the reader lists the queue again (and watches the next writer
///   ahead, if any).
/// * **Reentrant per owner**, for each half separately, as
///   [`InterProcessMutex`](crate::InterProcessMutex): the owner is the
///   current tokio task, or the thread outside a task (see [`Owner`]).
/// * **Downgrade**: an owner holding the write lock may take the read lock.
///   It is granted at once, and its read node is created with the write
///   node's sequence, so it sorts level with it: a writer queued behind
///   cannot slip in when the write lock is then released (CURATOR-621).
///   [`WriteGuard::downgrade`] does the same for guards.
/// * **No upgrade**: an owner holding only the read lock who asks for the
///   write lock gets [`Error::UpgradeNotSupported`] at once (its write node
///   would wait behind its own read node forever; Curator hangs).
/// * **Guard API**: [`ReadLock::lock`] and [`WriteLock::lock`] return guards
///   that own their holds, whichever task holds them; they are not
///   reentrant.
/// * **Fencing**: every hold has a token (its node's creation zxid). A
///   writer's token is greater than that of every hold (read or write)
///   before it, and a reader's token greater than that of every writer
///   before it.
/// * **Session loss**: the nodes are ephemeral. If the session is lost while
///   holding, the node is gone and others may take the lock; watch the
///   framework's connection state (or the guards' `is_valid`). A write hold
///   lost that way cannot be downgraded: the read acquire fails with
///   [`Error::LockLost`].
///
/// Cheap to clone: clones, and the halves they hand out, share the owner
/// maps.
///
/// # Examples
/// ```no_run
/// # async fn demo(framework: zk_curator_framework::Framework) -> zk_curator_recipes::Result<()> {
/// use zk_curator_recipes::InterProcessReadWriteLock;
///
/// let lock = InterProcessReadWriteLock::new(framework, "/locks/catalogue")?;
/// let (read, write) = (lock.read_lock(), lock.write_lock());
///
/// // Exclusive, then downgrade to shared without letting a writer in between:
/// write.acquire().await?;
/// read.acquire().await?;
/// write.release().await?;
/// // ... readers may join; writers wait ...
/// read.release().await?;
///
/// // Guard style:
/// let guard = read.lock().await?;
/// println!("reading under token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct InterProcessReadWriteLock {
    shared: Arc<Shared>,
}

impl fmt::Debug for InterProcessReadWriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterProcessReadWriteLock")
            .field("path", &self.path())
            .field("readers", &self.shared.read.owners.len())
            .field("writers", &self.shared.write.owners.len())
            .field("data_len", &self.shared.data.len())
            .finish()
    }
}

impl InterProcessReadWriteLock {
    /// The name of read participants (`_c_<uuid>-__READ__<seq>`).
    pub const READ_LOCK_NAME: &'static str = READ_LOCK_NAME;
    /// The name of write participants (`_c_<uuid>-__WRIT__<seq>`).
    pub const WRITE_LOCK_NAME: &'static str = WRITE_LOCK_NAME;

    /// A read-write lock on `path` (its participants become children of
    /// `path`), with empty node data.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a path that breaks ZooKeeper's rules, is `/`,
    /// or lies in the server's reserved `/zookeeper` tree. Nothing is sent.
    pub fn new(framework: Framework, path: &str) -> Result<Self> {
        Self::with_data(framework, path, &[])
    }

    /// A read-write lock on `path` whose every participant node (read and
    /// write) stores a copy of `data` (for example the holder's identity,
    /// for operators listing the queue).
    ///
    /// # Errors
    /// As [`new`](Self::new); [`Error::InvalidArgument`] for data larger than
    /// [`MAX_NODE_DATA`]. Nothing is sent.
    pub fn with_data(framework: Framework, path: &str, data: &[u8]) -> Result<Self> {
        if data.len() > MAX_NODE_DATA {
            return Err(Error::InvalidArgument(format!(
                "node data of {} bytes exceeds the limit of {MAX_NODE_DATA}",
                data.len()
            )));
        }
        let side = |lock_name: &str, max_leases: u32, driver: Arc<dyn LockInternalsDriver>| {
            LockInternals::new(framework.clone(), path, lock_name, max_leases, driver).map(
                |internals| Side {
                    internals,
                    owners: DashMap::new(),
                    guards: AtomicUsize::new(0),
                    revocation: std::sync::Mutex::new(None),
                },
            )
        };
        let write = side(WRITE_LOCK_NAME, 1, Arc::new(WriteDriver))?;
        let read = side(READ_LOCK_NAME, u32::MAX, Arc::new(ReadDriver))?;
        Ok(InterProcessReadWriteLock {
            shared: Arc::new(Shared {
                data: data.into(),
                read,
                write,
            }),
        })
    }

    /// The lock's path.
    pub fn path(&self) -> &str {
        self.shared.write.internals.base_path()
    }

    /// The read (shared) half. Cheap; every call shares the same state.
    pub fn read_lock(&self) -> ReadLock {
        ReadLock {
            shared: self.shared.clone(),
        }
    }

    /// The write (exclusive) half. Cheap; every call shares the same state.
    pub fn write_lock(&self) -> WriteLock {
        WriteLock {
            shared: self.shared.clone(),
        }
    }
}

impl Shared {
    fn side(&self, kind: Kind) -> &Side {
        match kind {
            Kind::Read => &self.read,
            Kind::Write => &self.write,
        }
    }

    fn path(&self) -> &str {
        self.write.internals.base_path()
    }

    async fn acquire(&self, kind: Kind, timeout: Option<Duration>) -> Result<bool> {
        let owner = Owner::current();
        let side = self.side(kind);
        if let Some(mut hold) = side.owners.get_mut(&owner) {
            hold.count += 1;
            tracing::debug!(path = %self.path(), ?kind, ?owner, count = hold.count, "reentrant acquire");
            return Ok(true);
        }
        let Some(node) = self.acquire_node(kind, owner, timeout).await? else {
            return Ok(false);
        };
        // No await between the grant and the insert: cancellation cannot
        // lose a granted node.
        side.owners.insert(owner, Hold { node, count: 1 });
        Ok(true)
    }

    /// Acquires a fresh node of `kind` for `owner`, applying the downgrade
    /// and upgrade rules of the owner's task holds.
    async fn acquire_node(
        &self,
        kind: Kind,
        owner: Owner,
        timeout: Option<Duration>,
    ) -> Result<Option<AcquiredNode>> {
        match kind {
            Kind::Write => {
                if self.read.owners.contains_key(&owner) && !self.write.owners.contains_key(&owner)
                {
                    tracing::debug!(path = %self.path(), ?owner, "write lock refused: upgrade");
                    return Err(Error::UpgradeNotSupported);
                }
                let revocation = self.write.revocation();
                self.write
                    .internals
                    .acquire_revocable(&self.data, timeout, revocation.as_ref())
                    .await
            }
            Kind::Read => {
                let write_node = self.write.owners.get(&owner).map(|h| h.node.clone());
                match write_node {
                    Some(write_node) => self.downgrade(&write_node, timeout).await,
                    None => {
                        let revocation = self.read.revocation();
                        self.read
                            .internals
                            .acquire_revocable(&self.data, timeout, revocation.as_ref())
                            .await
                    }
                }
            }
        }
    }

    /// Takes a read node level with `write_node` (held by the caller): it
    /// sorts with the write node, ahead of every writer queued behind it.
    async fn downgrade(
        &self,
        write_node: &AcquiredNode,
        timeout: Option<Duration>,
    ) -> Result<Option<AcquiredNode>> {
        let span = tracing::info_span!("rwlock.downgrade", write_node = %write_node.path());
        async {
            let framework = self.read.internals.framework();
            let same_session = framework
                .current_session()
                .is_some_and(|s| s.generation() == write_node.generation());
            if write_node.is_ephemeral() && !same_session {
                return Err(Error::LockLost(format!(
                    "the write lock {} died with its session; it cannot be downgraded",
                    write_node.path()
                )));
            }
            let driver = DowngradeDriver::new(write_node.name())?;
            let internals = LockInternals::new(
                framework.clone(),
                self.path(),
                READ_LOCK_NAME,
                u32::MAX,
                Arc::new(driver),
            )?;
            let revocation = self.read.revocation();
            internals
                .acquire_revocable(&self.data, timeout, revocation.as_ref())
                .await
        }
        .instrument(span)
        .await
    }

    async fn release(&self, kind: Kind) -> Result<()> {
        let owner = Owner::current();
        let side = self.side(kind);
        match side.owners.get_mut(&owner) {
            None => return Err(Error::NotOwner),
            Some(mut hold) if hold.count > 1 => {
                hold.count -= 1;
                return Ok(());
            }
            Some(_) => {}
        }
        let Some((_, hold)) = side.owners.remove(&owner) else {
            return Err(Error::NotOwner);
        };
        side.internals.release(&hold.node).await
    }

    fn is_acquired_in_this_process(&self, kind: Kind) -> bool {
        let side = self.side(kind);
        !side.owners.is_empty() || side.guards.load(Ordering::Acquire) > 0
    }

    fn current_hold<T>(&self, kind: Kind, f: impl FnOnce(&AcquiredNode) -> T) -> Option<T> {
        self.side(kind)
            .owners
            .get(&Owner::current())
            .map(|h| f(&h.node))
    }

    async fn participant_nodes(&self, kind: Kind) -> Result<Vec<String>> {
        let side = self.side(kind);
        let lock_name = side.internals.lock_name();
        let mut nodes = side.internals.participant_nodes().await?;
        nodes.retain(|p| split(p).1.contains(lock_name));
        Ok(nodes)
    }

    async fn lock(self: &Arc<Self>, kind: Kind, timeout: Option<Duration>) -> Result<Option<Held>> {
        let owner = Owner::current();
        Ok(self
            .acquire_node(kind, owner, timeout)
            .await?
            .map(|node| self.held(kind, node)))
    }

    /// Wraps a granted node into a guard's hold (no await in between).
    fn held(self: &Arc<Self>, kind: Kind, node: AcquiredNode) -> Held {
        self.side(kind).guards.fetch_add(1, Ordering::AcqRel);
        Held {
            shared: self.clone(),
            kind,
            node: Some(node),
        }
    }
}

macro_rules! half {
    ($name:ident, $kind:expr, $guard:ident, $what:literal, $label:literal) => {
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let side = self.shared.side($kind);
                f.debug_struct(stringify!($name))
                    .field("path", &self.path())
                    .field("holders", &side.owners.len())
                    .field("guards", &side.guards.load(Ordering::Relaxed))
                    .finish()
            }
        }

        impl $name {
            /// The lock's path.
            pub fn path(&self) -> &str {
                self.shared.path()
            }

            /// Waits until the current owner holds the
            #[doc = $what]
            /// (or holds it once more).
            ///
            /// # Errors
            /// [`Error::Closed`] if the framework is closed; [`Error::Timeout`]
            /// if no session could be had within the connection timeout;
            /// ZooKeeper errors that retrying could not overcome (e.g.
            /// [`Error::NoAuth`]); see also the type's own notes.
            ///
            /// # Cancel safety
            /// Cancel safe: dropping the future (in `select!`, under
            /// `timeout`, by aborting the task) deletes our waiting node in
            /// the background and leaves the owner's count unchanged.
            pub async fn acquire(&self) -> Result<()> {
                self.shared.acquire($kind, None).await.map(|_| ())
            }

            /// Like [`acquire`](Self::acquire), waiting at most `timeout` in
            /// all (session waits, retries and queueing included). Returns
            /// `false` on timeout.
            ///
            /// # Errors
            /// As [`acquire`](Self::acquire).
            ///
            /// # Cancel safety
            /// Cancel safe, as [`acquire`](Self::acquire).
            pub async fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
                self.shared.acquire($kind, Some(timeout)).await
            }

            /// Releases one hold of the current owner; the last release
            /// deletes the node (in the background if ZooKeeper cannot be
            /// reached right now).
            ///
            /// # Errors
            /// [`Error::NotOwner`] if the current owner does not hold the
            #[doc = $what]
            /// (nothing changes); [`Error::Closed`] if the framework is
            /// closed (the hold is dropped; the node went with the session).
            ///
            /// # Cancel safety
            /// The count changes at the first poll; a dropped release of the
            /// last hold still deletes the node in the background.
            pub async fn release(&self) -> Result<()> {
                self.shared.release($kind).await
            }

            /// Whether any owner of this process holds the
            #[doc = $what]
            /// through this lock (or one of its guards is alive).
            pub fn is_acquired_in_this_process(&self) -> bool {
                self.shared.is_acquired_in_this_process($kind)
            }

            /// Makes every later acquire of the
            #[doc = $what]
            /// revocable: a [`Revoker`](zk_curator_framework::lock_internals::Revoker)
            /// writing a revocation request into its node calls `listener`
            /// with the node's path, on a task of its own (see
            /// [`InterProcessMutex::make_revocable`](crate::InterProcessMutex::make_revocable)).
            pub fn make_revocable(&self, listener: impl RevocationListener) {
                self.shared.side($kind).set_revocation(Some(Revocation::new(listener)));
            }

            /// Stops making later acquires revocable.
            pub fn clear_revocable(&self) {
                self.shared.side($kind).set_revocation(None);
            }

            /// Whether the current owner (task, or thread outside a task)
            /// holds the
            #[doc = $what]
            /// (guards do not count).
            pub fn is_owned_by_current_task(&self) -> bool {
                self.shared
                    .side($kind)
                    .owners
                    .contains_key(&Owner::current())
            }

            #[doc = concat!("The fencing token of the current owner's hold, if it holds the ", $what, ".")]
            pub fn fencing_token(&self) -> Option<i64> {
                self.shared.current_hold($kind, AcquiredNode::fencing_token)
            }

            #[doc = concat!("The node of the current owner's hold, if it holds the ", $what, ".")]
            pub fn lock_node(&self) -> Option<String> {
                self.shared.current_hold($kind, |n| n.path().to_owned())
            }

            /// The full paths of the
            #[doc = $label]
            /// participants only, in queue order (readers and writers
            /// interleave in the queue; the other half's nodes are left out).
            ///
            /// # Errors
            /// ZooKeeper errors that retrying could not overcome;
            /// [`Error::Closed`].
            ///
            /// # Cancel safety
            /// Cancel safe: it only reads.
            pub async fn participant_nodes(&self) -> Result<Vec<String>> {
                self.shared.participant_nodes($kind).await
            }

            /// Waits for the
            #[doc = $what]
            /// and returns a guard that owns the hold. Not reentrant: the
            /// guard is a participant of its own.
            ///
            /// # Errors
            /// As [`acquire`](Self::acquire).
            ///
            /// # Cancel safety
            /// Cancel safe, as [`acquire`](Self::acquire).
            pub async fn lock(&self) -> Result<$guard> {
                match self.shared.lock($kind, None).await? {
                    Some(held) => Ok($guard { held }),
                    None => Err(Error::Timeout(Duration::MAX)),
                }
            }

            /// Like [`lock`](Self::lock), waiting at most `timeout`; `None`
            /// on timeout.
            ///
            /// # Errors
            /// As [`acquire`](Self::acquire).
            ///
            /// # Cancel safety
            /// Cancel safe, as [`acquire`](Self::acquire).
            pub async fn try_lock_for(&self, timeout: Duration) -> Result<Option<$guard>> {
                Ok(self
                    .shared
                    .lock($kind, Some(timeout))
                    .await?
                    .map(|held| $guard { held }))
            }
        }

        impl InterProcessLock for $name {
            fn acquire(&self) -> BoxFuture<'_, Result<()>> {
                $name::acquire(self).boxed()
            }

            fn acquire_timeout(&self, timeout: Duration) -> BoxFuture<'_, Result<bool>> {
                $name::acquire_timeout(self, timeout).boxed()
            }

            fn release(&self) -> BoxFuture<'_, Result<()>> {
                $name::release(self).boxed()
            }

            fn is_acquired_in_this_process(&self) -> bool {
                $name::is_acquired_in_this_process(self)
            }

            fn path(&self) -> &str {
                $name::path(self)
            }

            fn participant_nodes(&self) -> BoxFuture<'_, Result<Vec<String>>> {
                $name::participant_nodes(self).boxed()
            }
        }

        impl fmt::Debug for $guard {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($guard))
                    .field("node", &self.held.node.as_ref().map(|n| n.path()))
                    .finish()
            }
        }

        impl $guard {
            /// The fencing token of this hold (its node's creation zxid).
            pub fn fencing_token(&self) -> i64 {
                self.held.node().map_or(0, AcquiredNode::fencing_token)
            }

            /// The lock node's full path.
            pub fn node_path(&self) -> &str {
                self.held.node().map_or("", AcquiredNode::path)
            }

            /// Whether the hold can still be trusted: the session that
            /// created the node is still the framework's session and the
            /// connection state is not an error under the framework's
            /// [`ErrorPolicy`]. It does not detect a node deleted by hand.
            ///
            /// [`ErrorPolicy`]: zk_curator_framework::ErrorPolicy
            pub fn is_valid(&self) -> bool {
                self.held.is_valid()
            }

            /// Completes when this hold can no longer be trusted, with the
            /// reason (error connection state, session replaced, node
            /// deleted, framework closed). Run it beside the protected work.
            ///
            /// # Cancel safety
            /// Cancel safe: it only observes.
            pub fn lost(&self) -> impl std::future::Future<Output = LockLoss> + Send + 'static {
                self.held.lost()
            }

            /// Releases the hold and deletes the node (in the background if
            /// ZooKeeper cannot be reached right now).
            ///
            /// # Errors
            /// [`Error::Closed`] if the framework is closed; errors no retry
            /// can fix, such as [`Error::NoAuth`].
            ///
            /// # Cancel safety
            /// Once polled, a dropped release still deletes the node in the
            /// background.
            pub async fn release(mut self) -> Result<()> {
                self.held.release().await
            }
        }
    };
}

/// The shared half of an [`InterProcessReadWriteLock`]: held by many at once,
/// as long as no writer is ahead in the queue.
///
/// Reading while holding the write lock (same owner) is a downgrade: granted
/// at once, level with the write node; this holds for a guard taken with
/// [`lock`](Self::lock) by that owner too. Readers behind a queued writer wait
/// for it (no writer starvation); a task that already holds the read lock
/// re-enters without queueing, but a *guard* ([`lock`](Self::lock)) is a new
/// participant and queues behind any waiting writer.
#[derive(Clone)]
pub struct ReadLock {
    shared: Arc<Shared>,
}

/// The exclusive half of an [`InterProcessReadWriteLock`].
///
/// An owner that holds only the read lock is refused the write lock with
/// [`Error::UpgradeNotSupported`] at once (an upgrade would wait behind its own
/// read node forever). The check sees task holds only: a task holding a
/// [`ReadGuard`] that asks for the write lock waits for that guard.
#[derive(Clone)]
pub struct WriteLock {
    shared: Arc<Shared>,
}

/// A hold of a [`ReadLock`] owned by this value, not by a task.
///
/// Release it with [`ReadGuard::release`]; dropping it releases in the
/// background.
#[must_use = "dropping the guard releases the lock"]
#[clippy::has_significant_drop]
pub struct ReadGuard {
    held: Held,
}

/// A hold of a [`WriteLock`] owned by this value, not by a task.
///
/// Release it with [`WriteGuard::release`]; dropping it releases in the
/// background. [`WriteGuard::downgrade`] turns it into a [`ReadGuard`]
/// without letting a queued writer in between.
#[must_use = "dropping the guard releases the lock"]
#[clippy::has_significant_drop]
pub struct WriteGuard {
    held: Held,
}

half!(ReadLock, Kind::Read, ReadGuard, "read lock", "read");
half!(WriteLock, Kind::Write, WriteGuard, "write lock", "write");

impl WriteGuard {
    /// Takes a read hold level with this write hold (granted at once), then
    /// releases the write hold: readers may join, while writers queued behind
    /// this one stay queued until the returned read guard is released.
    ///
    /// # Errors
    /// [`Error::LockLost`] if the write node died with its session (the
    /// write hold is released anyway); [`Error::Closed`] if the framework is
    /// closed; ZooKeeper errors that retrying could not overcome. On an error
    /// taking the read hold, the write hold is released as well.
    ///
    /// # Cancel safety
    /// Cancel safe in the sense that nothing leaks: dropping the future
    /// releases, in the background, whichever holds it had at that moment.
    pub async fn downgrade(mut self) -> Result<ReadGuard> {
        let Some(write_node) = self.held.node.clone() else {
            return Err(Error::LockLost(
                "the write guard was already released".into(),
            ));
        };
        let shared = self.held.shared.clone();
        let node = shared.downgrade(&write_node, None).await;
        let read = match node {
            Ok(Some(node)) => ReadGuard {
                held: shared.held(Kind::Read, node),
            },
            Ok(None) => return Err(Error::Timeout(Duration::MAX)),
            Err(err) => return Err(err),
        };
        self.held.release().await?;
        Ok(read)
    }
}

/// A guard's hold, shared by both guard types.
struct Held {
    shared: Arc<Shared>,
    kind: Kind,
    node: Option<AcquiredNode>,
}

impl Held {
    fn node(&self) -> Option<&AcquiredNode> {
        self.node.as_ref()
    }

    fn is_valid(&self) -> bool {
        self.node()
            .is_some_and(|node| self.shared.side(self.kind).internals.is_valid(node))
    }

    fn lost(&self) -> impl std::future::Future<Output = LockLoss> + Send + 'static {
        let internals = self.shared.side(self.kind).internals.clone();
        let node = self.node().cloned();
        async move {
            match node {
                Some(node) => internals.lost(&node).await,
                None => LockLoss::NodeDeleted,
            }
        }
    }

    async fn release(&mut self) -> Result<()> {
        let Some(node) = self.node.take() else {
            return Ok(());
        };
        let side = self.shared.side(self.kind);
        side.guards.fetch_sub(1, Ordering::AcqRel);
        side.internals.release(&node).await
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(node) = self.node.take() {
            let side = self.shared.side(self.kind);
            side.guards.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!(node = %node.path(), "guard dropped; releasing in the background");
            side.internals.framework().delete_in_background(node.path());
        }
    }
}

// ---------------------------------------------------------------------------
// Drivers

/// Sorts readers and writers together: by the sequence after the last
/// `__READ__` or `__WRIT__` in the name, whichever comes last (Curator's
/// sorter strips at the last `__READ__`, then at the last `__WRIT__`).
fn rw_sort_key(name: &str) -> SortKey {
    let unprotected = strip_protection(name);
    let lock_name = match (
        unprotected.rfind(READ_LOCK_NAME),
        unprotected.rfind(WRITE_LOCK_NAME),
    ) {
        (Some(read), Some(write)) if write > read => WRITE_LOCK_NAME,
        (None, Some(_)) => WRITE_LOCK_NAME,
        _ => READ_LOCK_NAME,
    };
    standard_sort_key(name, lock_name)
}

fn is_writer(name: &str) -> bool {
    strip_protection(name).contains(WRITE_LOCK_NAME)
}

/// The writer's rule: first among all participants, readers included; it
/// watches its immediate predecessor.
#[derive(Debug)]
struct WriteDriver;

impl LockInternalsDriver for WriteDriver {
    fn sort_key(&self, name: &str, _lock_name: &str) -> SortKey {
        rw_sort_key(name)
    }

    fn gets_the_lock(
        &self,
        sorted_children: &[String],
        our_name: &str,
        max_leases: u32,
    ) -> Result<PredicateResults> {
        standard_gets_the_lock(sorted_children, our_name, max_leases)
    }
}

/// The reader's rule: granted when no writer is ahead; otherwise it watches
/// the nearest writer ahead (see [`InterProcessReadWriteLock`] for why not
/// the first, as Curator does).
#[derive(Debug)]
struct ReadDriver;

impl LockInternalsDriver for ReadDriver {
    fn sort_key(&self, name: &str, _lock_name: &str) -> SortKey {
        rw_sort_key(name)
    }

    fn gets_the_lock(
        &self,
        sorted_children: &[String],
        our_name: &str,
        _max_leases: u32,
    ) -> Result<PredicateResults> {
        read_gets_the_lock(sorted_children, our_name)
    }
}

fn read_gets_the_lock(sorted_children: &[String], our_name: &str) -> Result<PredicateResults> {
    let mut nearest_writer = None;
    for child in sorted_children {
        if child == our_name {
            return Ok(match nearest_writer {
                None => PredicateResults::holds(),
                Some(writer) => PredicateResults::watch(writer),
            });
        }
        if is_writer(child) {
            nearest_writer = Some(child.as_str());
        }
    }
    Err(Error::LockLost(format!(
        "our node {our_name} is no longer among the participants"
    )))
}

/// A read acquire by the write holder: the node takes the write node's
/// sequence (an ephemeral node named by the client), and is granted as long
/// as the write node is still there (then no other writer can be ahead).
#[derive(Debug)]
struct DowngradeDriver {
    write_name: String,
    sequence: String,
}

impl DowngradeDriver {
    fn new(write_name: &str) -> Result<Self> {
        let sequence = strip_protection(write_name)
            .rfind(WRITE_LOCK_NAME)
            .and_then(|at| strip_protection(write_name).get(at + WRITE_LOCK_NAME.len()..))
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'-'))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{write_name} is not a write node with a sequence; cannot downgrade"
                ))
            })?;
        Ok(DowngradeDriver {
            write_name: write_name.to_owned(),
            sequence: sequence.to_owned(),
        })
    }
}

impl LockInternalsDriver for DowngradeDriver {
    fn participant_node(&self) -> ParticipantNode {
        ParticipantNode::EphemeralWithSequence(self.sequence.clone())
    }

    fn sort_key(&self, name: &str, _lock_name: &str) -> SortKey {
        rw_sort_key(name)
    }

    fn gets_the_lock(
        &self,
        sorted_children: &[String],
        our_name: &str,
        _max_leases: u32,
    ) -> Result<PredicateResults> {
        if !sorted_children.iter().any(|c| c == our_name) {
            return Err(Error::LockLost(format!(
                "our node {our_name} is no longer among the participants"
            )));
        }
        // Listed after our create on the same session: while the write node
        // is there, our read node sits level with the lock's holder.
        if !sorted_children.contains(&self.write_name) {
            return Err(Error::LockLost(format!(
                "the write node {} is gone; cannot downgrade",
                self.write_name
            )));
        }
        Ok(PredicateResults::holds())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const UUID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

    fn read(seq: u32) -> String {
        format!("_c_{UUID}-__READ__{seq:010}")
    }

    fn write(seq: u32) -> String {
        format!("_c_{UUID}-__WRIT__{seq:010}")
    }

    fn sorted(mut names: Vec<String>) -> Vec<String> {
        names.sort_by_cached_key(|n| rw_sort_key(n));
        names
    }

    #[test]
    fn lock_names_have_the_same_length() {
        assert_eq!(READ_LOCK_NAME.len(), WRITE_LOCK_NAME.len());
    }

    #[test]
    fn readers_and_writers_sort_together_by_sequence() {
        let names = sorted(vec![
            write(12),
            "foreign".to_owned(),
            read(3),
            write(7),
            read(10),
        ]);
        assert_eq!(
            names,
            vec![read(3), write(7), read(10), write(12), "foreign".to_owned()]
        );
        assert_eq!(rw_sort_key(&read(5)), rw_sort_key(&write(5)));
        // The last lock name wins, as in Curator's two-step strip.
        assert_eq!(
            rw_sort_key("__WRIT__x__READ__0000000004"),
            SortKey::Sequence(4)
        );
        assert_eq!(
            rw_sort_key("__READ__x__WRIT__0000000004"),
            SortKey::Sequence(4)
        );
    }

    #[test]
    fn reader_waits_for_the_nearest_writer_ahead() {
        let children = sorted(vec![read(1), write(2), read(3), write(4), read(5)]);
        assert_eq!(
            read_gets_the_lock(&children, &read(1)).unwrap(),
            PredicateResults::holds()
        );
        assert_eq!(
            read_gets_the_lock(&children, &read(3)).unwrap(),
            PredicateResults::watch(write(2))
        );
        assert_eq!(
            read_gets_the_lock(&children, &read(5)).unwrap(),
            PredicateResults::watch(write(4))
        );
        assert!(matches!(
            read_gets_the_lock(&children, &read(6)),
            Err(Error::LockLost(_))
        ));
    }

    #[test]
    fn writer_must_be_first_and_watches_its_predecessor() {
        let children = sorted(vec![read(1), read(2), write(3)]);
        let driver = WriteDriver;
        assert_eq!(
            driver.gets_the_lock(&children, &write(3), 1).unwrap(),
            PredicateResults::watch(read(2))
        );
        let children = sorted(vec![write(3), read(4)]);
        assert_eq!(
            driver.gets_the_lock(&children, &write(3), 1).unwrap(),
            PredicateResults::holds()
        );
    }

    #[test]
    fn downgrade_driver_takes_the_write_sequence_and_needs_the_write_node() {
        let driver = DowngradeDriver::new(&write(42)).unwrap();
        assert_eq!(
            driver.participant_node(),
            ParticipantNode::EphemeralWithSequence("0000000042".into())
        );
        let ours = format!("_c_{}-__READ__0000000042", "1".repeat(36));
        let children = sorted(vec![write(43), ours.clone(), write(42)]);
        assert_eq!(
            driver.gets_the_lock(&children, &ours, u32::MAX).unwrap(),
            PredicateResults::holds()
        );
        let without_write = vec![ours.clone(), write(43)];
        assert!(matches!(
            driver.gets_the_lock(&without_write, &ours, u32::MAX),
            Err(Error::LockLost(_))
        ));
        assert!(matches!(
            driver.gets_the_lock(&children, &read(1), u32::MAX),
            Err(Error::LockLost(_))
        ));
        assert!(matches!(
            DowngradeDriver::new(&read(42)),
            Err(Error::InvalidArgument(_))
        ));
    }

    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync_static<T: Send + Sync + 'static>() {}

    #[allow(dead_code)]
    fn futures_are_send(lock: InterProcessReadWriteLock) {
        let (r, w) = (lock.read_lock(), lock.write_lock());
        assert_send(&r.acquire());
        assert_send(&r.acquire_timeout(Duration::from_secs(1)));
        assert_send(&r.release());
        assert_send(&r.lock());
        assert_send(&r.participant_nodes());
        assert_send(&w.acquire());
        assert_send(&w.release());
        assert_send(&w.try_lock_for(Duration::from_secs(1)));
    }

    #[allow(dead_code)]
    fn downgrade_is_send(guard: WriteGuard) {
        assert_send(&guard.downgrade());
    }

    #[test]
    fn handles_are_send_sync() {
        assert_send_sync_static::<InterProcessReadWriteLock>();
        assert_send_sync_static::<ReadLock>();
        assert_send_sync_static::<WriteLock>();
        assert_send_sync_static::<ReadGuard>();
        assert_send_sync_static::<WriteGuard>();
    }
}
