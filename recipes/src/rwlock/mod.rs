//! [`InterProcessReadWriteLock`]: many readers or one writer, across
//! processes and hosts.
//!
//! * `mod.rs`: the lock and the state both halves share (owner maps, the
//!   downgrade and upgrade rules);
//! * [`half`]: the two halves ([`ReadLock`], [`WriteLock`]), their one API
//!   written once for both;
//! * [`guard`]: the guards ([`ReadGuard`], [`WriteGuard`], downgrade);
//! * [`driver`]: how readers and writers queue together.

mod driver;
mod guard;
mod half;

use std::fmt;
use std::sync::Arc;

use tracing::Instrument;
use zk_curator_framework::lock_internals::{
    Acquire, BoundsSetting, Hold, HoldBounds, LockInternals, LockInternalsDriver, Revocation,
    RevocationSetting, Wait,
};
use zk_curator_framework::path::split;
use zk_curator_framework::{Error, Framework, Result};

use self::driver::{DowngradeDriver, ReadDriver, WriteDriver, READ_LOCK_NAME, WRITE_LOCK_NAME};
pub use self::guard::{ReadGuard, WriteGuard};
pub use self::half::{ReadLock, WriteLock};
use crate::held::{would_deadlock, Guards, Held};
use crate::layout::{read_write_lock_names, Layout};
use crate::reentrant::Reentrant;

/// Which half of the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HalfKind {
    Read,
    Write,
}

/// One half's state: its acquire machinery, the task holds and the guards.
struct Side {
    internals: LockInternals,
    owners: Reentrant<Hold>,
    guards: Arc<Guards>,
    revocation: RevocationSetting,
}

impl Side {
    fn revocation(&self) -> Option<Revocation> {
        self.revocation.current()
    }

    fn set_revocation(&self, revocation: Option<Revocation>) {
        self.revocation.set(revocation);
    }
}

struct Shared {
    layout: Layout,
    data: Arc<[u8]>,
    read: Side,
    write: Side,
    /// The bounds of every hold of either half whose acquire gives none.
    bounds: BoundsSetting,
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
///   [`InterProcessMutex`](crate::InterProcessMutex) (the same engine): the
///   owner is the current tokio task, or the thread outside a task (see
///   [`Owner`](crate::Owner)); a re-entry into a hold that was lost fails
///   with [`Error::LockLost`].
/// * **One node for a process's waiting readers**: with the framework's
///   local queue on (the default), the readers of one process that wait at
///   the same time share one read node and are granted together; each gets
///   a hold of its own, with the node's fencing token, and the node is
///   deleted with the last release. A reader arriving once that node is
///   granted gets a new node, queued behind any writer that came meanwhile
///   (see [`LockInternalsDriver::shares_node`]). Tries and revocable reads
///   keep a node of their own.
/// * **Downgrade**: an owner holding the write lock may take the read lock.
///   It is granted at once, and its read node is created with the write
///   node's sequence, so it sorts level with it: a writer queued behind
///   cannot slip in when the write lock is then released (CURATOR-621).
///   [`WriteGuard::downgrade`] does the same for guards.
/// * **No upgrade**: an owner holding only the read lock (task-bound, or a
///   read guard it took) who asks for the write lock gets
///   [`Error::UpgradeNotSupported`] at once (its write node would wait
///   behind its own read node forever; Curator hangs).
/// * **No silent self-deadlock**: a task asking a half for a hold while it
///   holds that half in the other form (a guard it took, or the task-bound
///   hold), or asking for a task-bound read hold behind its own write guard,
///   gets [`Error::WouldDeadlock`] at once. A guard counts for the task that
///   took it, even once moved to another task.
/// * **Guard API**: [`ReadLock::lock`] and [`WriteLock::lock`] return guards
///   that own their holds, whichever task holds them; they are not
///   reentrant.
/// * **Fencing**: every hold has a token (its node's creation zxid). A
///   writer's token is greater than that of every hold (read or write)
///   before it, and a reader's token greater than that of every writer
///   before it.
/// * **Loss signal and fencing**: every hold (task-bound or guard, either
///   half) answers `is_valid()` and `lost()` and gives a
///   [`Fence`](crate::Fence). The nodes are ephemeral: if the session is lost
///   while holding, others may take the lock; stop when `lost()` fires. A
///   write hold lost that way cannot be downgraded: the read acquire fails
///   with [`Error::LockLost`].
/// * **Try-lock**: `try_acquire()` / `try_lock()` on either half take one
///   round trip and never wait.
///
/// Cheap to clone: clones, and the halves they hand out, share the owner
/// maps.
///
/// # Examples
/// ```no_run
/// # async fn demo(framework: zk_curator::Framework) -> zk_curator::Result<()> {
/// use zk_curator::InterProcessReadWriteLock;
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
            .field("readers", &self.shared.read.owners.holders())
            .field("writers", &self.shared.write.owners.holders())
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
    /// As [`new`](Self::new); [`Error::RequestTooLarge`] for data too large
    /// for the framework's packet limit. Nothing is sent.
    pub fn with_data(framework: Framework, path: &str, data: &[u8]) -> Result<Self> {
        Self::with_layout(framework, path, Layout::Curator, data)
    }

    /// A read-write lock on `path` in `layout`, its participant nodes
    /// carrying `data`. In [`Layout::Kazoo`] its readers and writers are
    /// kazoo's: a reader's node is a kazoo `ReadLock`'s
    /// (`<uuid hex>__rlock__<seq>`), a writer's a kazoo `WriteLock`'s
    /// (`<uuid hex>__lock__<seq>`), so a Python service's `ReadLock` and
    /// `WriteLock` on the same path exclude ours and ours theirs. (A plain
    /// kazoo `Lock` names its nodes as a writer does but, by kazoo's rule,
    /// does not wait for readers: beside readers, use its `WriteLock`.)
    ///
    /// # Errors
    /// As [`with_data`](Self::with_data).
    pub fn with_layout(
        framework: Framework,
        path: &str,
        layout: Layout,
        data: &[u8],
    ) -> Result<Self> {
        let (read_name, write_name) = read_write_lock_names(layout);
        let side = |lock_name: &str, max_leases: u32, driver: Arc<dyn LockInternalsDriver>| {
            LockInternals::new(framework.clone(), path, lock_name, max_leases, driver).map(
                |internals| Side {
                    internals,
                    owners: Reentrant::new(),
                    guards: Arc::new(Guards::default()),
                    revocation: RevocationSetting::default(),
                },
            )
        };
        let write = side(write_name, 1, Arc::new(WriteDriver(layout)))?;
        let read = side(read_name, u32::MAX, Arc::new(ReadDriver(layout)))?;
        write.internals.check_node_data(data)?;
        read.internals.check_node_data(data)?;
        Ok(InterProcessReadWriteLock {
            shared: Arc::new(Shared {
                layout,
                data: data.into(),
                read,
                write,
                bounds: BoundsSetting::default(),
            }),
        })
    }

    /// Bounds every later hold of either half (task holds and guards; see
    /// [`HoldBounds`]). A read hold taken by a downgrade goes on under the
    /// write hold's bounds, on its clocks (see
    /// [`Hold::continue_bounds`]), so a downgrade never stretches a bound.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for bounds [`HoldBounds::validate`]
    /// refuses; nothing changes.
    pub fn set_hold_bounds(&self, bounds: HoldBounds) -> Result<()> {
        self.shared.bounds.set(bounds)
    }

    /// The lock's path.
    pub fn path(&self) -> &str {
        self.shared.write.internals.base_path()
    }

    /// The read (shared) half. Cheap; every call shares the same state.
    pub fn read_lock(&self) -> ReadLock {
        ReadLock::new(self.shared.clone())
    }

    /// The write (exclusive) half. Cheap; every call shares the same state.
    pub fn write_lock(&self) -> WriteLock {
        WriteLock::new(self.shared.clone())
    }
}

impl Shared {
    fn side(&self, kind: HalfKind) -> &Side {
        match kind {
            HalfKind::Read => &self.read,
            HalfKind::Write => &self.write,
        }
    }

    fn path(&self) -> &str {
        self.write.internals.base_path()
    }

    /// A task acquire of `kind` for the current owner (reentrant).
    async fn acquire(&self, kind: HalfKind, wait: Wait) -> Result<bool> {
        // The task's own guard of this half would be waited for.
        self.side(kind).guards.refuse_own(self.path())?;
        self.side(kind)
            .owners
            .acquire(wait, |wait| self.acquire_hold(kind, wait))
            .await
    }

    /// One acquire of `internals` within `wait`, revocable as `side` says.
    async fn acquire_on(
        &self,
        internals: &LockInternals,
        side: &Side,
        wait: Wait,
        bounds: HoldBounds,
    ) -> Result<Option<Hold>> {
        let revocation = side.revocation();
        let request = Acquire::new()
            .data(&self.data)
            .wait(wait)
            .revocation(revocation.as_ref())
            .bounds(bounds);
        internals.acquire(request).await
    }

    /// Acquires a fresh hold of `kind`, applying the downgrade and upgrade
    /// rules of the current owner's task holds.
    async fn acquire_hold(&self, kind: HalfKind, wait: Wait) -> Result<Option<Hold>> {
        match kind {
            HalfKind::Write => {
                // A read hold of the task's own, task-bound or a guard it
                // took, would keep its write node waiting forever.
                let reading =
                    self.read.owners.is_held_by_current() || self.read.guards.taken_by_current();
                if reading && !self.write.owners.is_held_by_current() {
                    tracing::debug!(path = %self.path(), "write lock refused: upgrade");
                    return Err(Error::UpgradeNotSupported);
                }
                self.acquire_on(&self.write.internals, &self.write, wait, self.bounds.get())
                    .await
            }
            HalfKind::Read => match self.write.owners.with_current(Hold::clone) {
                Some(write_hold) => self.downgrade(&write_hold, wait).await,
                // Behind the task's own write guard (`WriteGuard::downgrade`
                // is the way from one to the other).
                None if self.write.guards.taken_by_current() => {
                    tracing::debug!(path = %self.path(), "read lock refused: the task holds a write guard");
                    Err(would_deadlock(self.path()))
                }
                None => {
                    self.acquire_on(&self.read.internals, &self.read, wait, self.bounds.get())
                        .await
                }
            },
        }
    }

    /// Takes a read node level with `write_hold` (held by the caller): it
    /// sorts with the write node, ahead of every writer queued behind it.
    async fn downgrade(&self, write_hold: &Hold, wait: Wait) -> Result<Option<Hold>> {
        let span = tracing::info_span!("rwlock.downgrade", write_node = %write_hold.node().path());
        async {
            if let Err(loss) = write_hold.check() {
                return Err(Error::lock_lost(write_hold.node().path(), loss));
            }
            // The read node sits level with the write node: the write node
            // must go when the writer releases, never pass to another
            // writer of this process (cohort hand-off) while we read.
            write_hold.keep_from_passing();
            let framework = self.read.internals.framework();
            let layout = self.layout;
            let driver = DowngradeDriver::new(layout, write_hold.node().name())?;
            let internals = LockInternals::new(
                framework.clone(),
                self.path(),
                read_write_lock_names(layout).0,
                u32::MAX,
                Arc::new(driver),
            )?;
            let read = self
                .acquire_on(&internals, &self.read, wait, HoldBounds::new())
                .await?;
            // The read hold goes on under the write hold's bounds.
            if let Some(read) = &read {
                read.continue_bounds(write_hold);
            }
            Ok(read)
        }
        .instrument(span)
        .await
    }

    async fn release(&self, kind: HalfKind) -> Result<()> {
        let side = self.side(kind);
        match side.owners.release()? {
            None => Ok(()),
            Some(hold) => side.internals.release(&hold).await,
        }
    }

    async fn participant_nodes(&self, kind: HalfKind) -> Result<Vec<String>> {
        let side = self.side(kind);
        let lock_name = side.internals.lock_name();
        let mut nodes = side.internals.participant_nodes().await?;
        nodes.retain(|p| split(p).1.contains(lock_name));
        Ok(nodes)
    }

    /// A guard's hold of `kind` (not reentrant; downgrade rules apply).
    async fn lock(self: &Arc<Self>, kind: HalfKind, wait: Wait) -> Result<Option<Held>> {
        // The task's own task-bound hold of this half would be waited for.
        if self.side(kind).owners.is_held_by_current() {
            tracing::debug!(path = %self.path(), "guard refused: the task holds this half");
            return Err(would_deadlock(self.path()));
        }
        Ok(self
            .acquire_hold(kind, wait)
            .await?
            .map(|hold| self.held(kind, hold)))
    }

    /// Wraps a granted hold into a guard's (no await in between).
    fn held(&self, kind: HalfKind, hold: Hold) -> Held {
        let side = self.side(kind);
        Held::new(side.internals.clone(), hold, Some(side.guards.clone()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync_static<T: Send + Sync + 'static>() {}

    #[allow(dead_code)]
    fn futures_are_send(lock: InterProcessReadWriteLock) {
        let (r, w) = (lock.read_lock(), lock.write_lock());
        assert_send(&r.acquire());
        assert_send(&r.acquire_timeout(Duration::from_secs(1)));
        assert_send(&r.try_acquire());
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
