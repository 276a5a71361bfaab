//! [`InterProcessMultiLock`]: several locks taken as one, all or nothing.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tracing::Instrument;
use zk_curator_framework::lock_internals::{BoundsSetting, Fence, HoldBounds, LockLoss, Wait};
use zk_curator_framework::path::split;
use zk_curator_framework::{Error, Framework, Result};

use crate::lock::{impl_inter_process_lock, InterProcessLock};
use crate::mutex::{InterProcessMutex, MutexGuard};
use crate::owner::Owner;
use crate::reentrant::{Reentrant, ReentrantHold};

/// Several locks held as one (Curator's `InterProcessMultiLock`): an acquire
/// takes every member or none, a release gives every member back.
///
/// Build it over paths ([`from_paths`](Self::from_paths): one
/// [`InterProcessMutex`] per path), over mutexes you made yourself
/// ([`from_mutexes`](Self::from_mutexes), e.g. with a custom driver), or over
/// any locks ([`new`](Self::new)).
///
/// # Behaviour
///
/// * **All or nothing, one deadline**: [`acquire_timeout`](Self::acquire_timeout)
///   gives the whole set one deadline; each member only gets the time left.
///   The first member that fails (an error, or no lock in time) stops the
///   acquire (Curator goes on to the remaining members): the members
///   already taken are released (all at once) before the error (or
///   `false`) is returned.
/// * **Reentrant per owner**, like [`InterProcessMutex`] (the same engine):
///   an owner (the current tokio task, or the thread outside a task, see
///   [`Owner`]) that holds the multi-lock may acquire it again without I/O,
///   as long as every member's hold is still valid (otherwise
///   [`Error::LockLost`], and the stale members are given back); each
///   acquire needs a matching [`release`](Self::release) from the same
///   owner, and a release by anybody else is refused with
///   [`Error::NotOwner`].
/// * **Loss signal and fencing**: [`lost`](Self::lost) fires as soon as any
///   member's hold is lost; [`fence`](Self::fence) checks every member's
///   node in one multi transaction.
/// * **Try-lock**: [`try_acquire`](Self::try_acquire) tries each member once
///   without waiting, and gives back what it took if one is taken.
/// * **Release gives back everything, in one round trip**: the members are
///   released all at once, so their deletes go out together; a member that
///   fails to release does not stop the others (see
///   [`release`](Self::release) for how failures are reported).
/// * **Nesting**: it implements [`InterProcessLock`], so a multi-lock can be a
///   member of another one, which orders it by the first of its
///   [`paths`](InterProcessLock::paths) (its members' paths, in the order
///   it takes them: its lowest member's comes first). It has no single
///   path of its own.
///
/// Cheap to clone: clones share the holds. Dropping the last clone while
/// it is held drops the mutex members' guards (their nodes are deleted in
/// the background); members of [`new`](Self::new) stay as their own
/// ownership rule leaves them.
///
/// # Deadlock freedom
///
/// Members are always acquired in ascending order of their first
/// [`path`](InterProcessLock::paths) (byte-wise string order), whatever order
/// they were given in. Two multi-locks over overlapping sets of paths, in
/// this process or any other, therefore never wait for each other in a
/// cycle: whoever holds the lowest contested path can always go on. (Curator
/// acquires in list order, so `[a, b]` against `[b, a]` can deadlock.) The
/// guarantee covers every participant that acquires in ascending order:
/// single locks, flat multi-locks, and nested multi-locks whose member sets
/// do not interleave (a nested multi-lock is ordered by its first path,
/// its lowest member's).
/// Prefer one flat multi-lock to nesting.
///
/// A path may appear only once: the same lock twice in one set would wait
/// for itself, so duplicate paths are refused.
///
/// # Cancel safety
///
/// Dropping an [`acquire`](Self::acquire) future at any await point (in
/// `select!`, under `tokio::time::timeout`, by aborting the task) changes no
/// count of the multi-lock; the member that was being acquired cleans up
/// after itself (every recipe's acquire is cancel safe), and the members
/// already taken are given back, last first. As `Drop` cannot wait, that
/// happens in the background, and how depends on how the member is held:
///
/// * **Mutex members** ([`from_paths`](Self::from_paths),
///   [`from_mutexes`](Self::from_mutexes)) are held through the mutex's
///   guard API ([`MutexGuard`]), whose hold belongs to the guard, not to a
///   task. A dropped acquire drops the guards: their nodes go to the
///   framework's background cleaner at once (no runtime needed;
///   [`Framework::wait_for_background_cleanup`] observes it). This is the
///   fully cancel-safe case.
/// * **Other members** ([`new`](Self::new)) are held through their own
///   [`InterProcessLock::acquire`], whose release may be bound to the task
///   that acquired (it is for [`InterProcessMutex`], the read-write halves
///   and a multi-lock). A dropped acquire releases them from a spawned task
///   that acts as the original owner (see [`Owner`](crate::Owner)), so
///   task-bound members of this crate are given back too. Only a member with
///   an ownership rule of its own that refuses the spawned task, or a drop
///   outside any tokio runtime, leaves a member held (logged; its ephemeral
///   node goes at the latest with the session).
///
/// The same applies to a [`release`](Self::release) dropped midway.
///
/// # Examples
/// ```no_run
/// # async fn demo(framework: zk_curator::Framework) -> zk_curator::Result<()> {
/// use std::time::Duration;
/// use zk_curator::InterProcessMultiLock;
///
/// let accounts = InterProcessMultiLock::from_paths(
///     framework,
///     &["/locks/accounts/bob", "/locks/accounts/alice"],
/// )?;
/// // Alice's lock is taken first (ascending path order), then Bob's.
/// if accounts.acquire_timeout(Duration::from_secs(5)).await? {
///     // ... move money between the two accounts ...
///     accounts.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct InterProcessMultiLock {
    shared: Arc<Shared>,
}

struct Shared {
    /// In canonical (ascending path) order.
    members: Vec<Member>,
    /// `[/a, /b]`, for logs and spans.
    label: String,
    holds: Reentrant<MultiHold>,
    /// The bounds of the set (see [`InterProcessMultiLock::set_hold_bounds`]).
    bounds: BoundsSetting,
}

/// One owner's hold of every member.
struct MultiHold {
    owner: Owner,
    label: String,
    /// In acquisition order.
    members: Vec<MemberHold>,
}

impl ReentrantHold for MultiHold {
    fn check(&self) -> std::result::Result<(), LockLoss> {
        self.members.iter().try_for_each(MemberHold::check)
    }

    fn describe(&self) -> String {
        self.label.clone()
    }

    fn forget(self) {
        // The members go back in the background, as for a dropped acquire.
        drop(Taken {
            owner: self.owner,
            holds: self.members,
        });
    }
}

#[derive(Clone, Debug)]
enum Member {
    /// Held through the guard API: releasable from any task, and on drop.
    Mutex(InterProcessMutex),
    /// Held through the lock's own acquire; its release follows the lock's
    /// ownership rule.
    Lock(Arc<dyn InterProcessLock>),
}

#[derive(Debug)]
enum MemberHold {
    Guard(MutexGuard),
    Lock(Arc<dyn InterProcessLock>),
}

impl fmt::Debug for InterProcessMultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterProcessMultiLock")
            .field("paths", &self.paths())
            .field("holders", &self.shared.holds.holders())
            .finish()
    }
}

impl InterProcessMultiLock {
    /// A multi-lock over one new [`InterProcessMutex`] per path, on
    /// `framework`. The paths may be given in any order (see
    /// [Deadlock freedom](Self#deadlock-freedom)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty list or a path given twice;
    /// [`Error::InvalidPath`] for a path [`InterProcessMutex::new`] refuses.
    /// Nothing is sent.
    pub fn from_paths(framework: Framework, paths: &[&str]) -> Result<Self> {
        if paths.is_empty() {
            return Err(empty_list());
        }
        let members = paths
            .iter()
            .map(|path| InterProcessMutex::new(framework.clone(), path).map(Member::Mutex))
            .collect::<Result<Vec<_>>>()?;
        Self::build(members)
    }

    /// A multi-lock over mutexes you built yourself (for example with
    /// [`InterProcessMutex::with_driver`]). They are held through their guard
    /// API, so holds are not shared with the mutexes' own task holds, and
    /// cancellation needs no care (see [Cancel safety](Self#cancel-safety)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty list or two mutexes on the
    /// same path.
    pub fn from_mutexes(mutexes: Vec<InterProcessMutex>) -> Result<Self> {
        Self::build(mutexes.into_iter().map(Member::Mutex).collect())
    }

    /// A multi-lock over any locks, acquired and released through their
    /// [`InterProcessLock`] methods (so a task-bound member such as an
    /// [`InterProcessMutex`] is held by the task that acquires the
    /// multi-lock, and its holds add up with that task's other holds of the
    /// same instance). Read [Cancel safety](Self#cancel-safety) before
    /// passing task-bound locks here.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty list, a lock without a path,
    /// or two locks with the same first
    /// [`path`](InterProcessLock::paths).
    pub fn new(locks: Vec<Arc<dyn InterProcessLock>>) -> Result<Self> {
        Self::build(locks.into_iter().map(Member::Lock).collect())
    }

    fn build(mut members: Vec<Member>) -> Result<Self> {
        if members.is_empty() {
            return Err(empty_list());
        }
        if let Some(member) = members.iter().find(|m| m.paths().is_empty()) {
            return Err(Error::InvalidArgument(format!(
                "the lock {member:?} has no path: a multi-lock orders its members by path"
            )));
        }
        members.sort_by(|a, b| a.path().cmp(b.path()));
        if let Some(pair) = members.windows(2).find(|w| w[0].path() == w[1].path()) {
            return Err(Error::InvalidArgument(format!(
                "the lock path {} is given twice; a multi-lock would wait for itself",
                pair[0].path()
            )));
        }
        let label = format!(
            "[{}]",
            members
                .iter()
                .map(Member::path)
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(InterProcessMultiLock {
            shared: Arc::new(Shared {
                members,
                label,
                holds: Reentrant::new(),
                bounds: BoundsSetting::default(),
            }),
        })
    }

    /// Bounds every later hold of the set (see [`HoldBounds`]): one bound
    /// for the set, counted from the moment every member is held; each
    /// member's hold gets it then, and [`progress`](Self::progress) is said
    /// to every member at once. Once a bound passes the members' holds are
    /// lost with [`LockLoss::BoundPassed`] and their nodes deleted, so
    /// [`lost`](Self::lost) fires and each lock goes to its next waiter.
    /// Only a multi-lock of mutexes ([`from_paths`](Self::from_paths),
    /// [`from_mutexes`](Self::from_mutexes)) can be bounded: the other
    /// members' holds are their own locks'.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for bounds [`HoldBounds::validate`]
    /// refuses, or for bounds on a multi-lock built with
    /// [`new`](Self::new); nothing changes then.
    pub fn set_hold_bounds(&self, bounds: HoldBounds) -> Result<()> {
        bounds.validate()?;
        if bounds.is_bounded()
            && self
                .shared
                .members
                .iter()
                .any(|m| matches!(m, Member::Lock(_)))
        {
            return Err(Error::InvalidArgument(
                "only a multi-lock of mutexes (from_paths, from_mutexes) can be bounded: \
                 bound each of the other locks itself"
                    .into(),
            ));
        }
        self.shared.bounds.set(bounds)
    }

    /// Says the current owner's hold of the set is making progress (every
    /// member's, see [`Hold::progress`](zk_curator_framework::lock_internals::Hold::progress)):
    /// cheap, synchronous, no I/O; nothing if the owner holds nothing.
    pub fn progress(&self) {
        self.shared.holds.with_current(|hold| {
            for member in &hold.members {
                if let MemberHold::Guard(guard) = member {
                    guard.progress();
                }
            }
        });
    }

    /// The paths of the locks it takes, in the order it takes them: its
    /// members' paths, ascending (a nested multi-lock's own
    /// [`paths`](InterProcessLock::paths) in its place, ordered by its
    /// first). A multi-lock has no single path: this is its
    /// [`InterProcessLock::paths`].
    pub fn paths(&self) -> Vec<&str> {
        self.shared.members.iter().flat_map(Member::paths).collect()
    }

    /// Waits until the current owner holds every member (or holds the
    /// multi-lock once more).
    ///
    /// # Errors
    /// The first member error, after the members already taken were released
    /// (for example [`Error::LockLost`] if a member taken first was lost
    /// while a later one was awaited, [`Error::Closed`] if a member's
    /// framework is closed,
    /// [`Error::Timeout`] if no session could be had, ZooKeeper errors that
    /// retrying could not overcome).
    ///
    /// # Cancel safety
    /// Cancel safe for mutex members; for other members see
    /// [Cancel safety](Self#cancel-safety): members taken so far are released
    /// in the background, and no count changes.
    pub async fn acquire(&self) -> Result<()> {
        self.acquire_with(Wait::Forever).await.map(|_| ())
    }

    /// Like [`acquire`](Self::acquire), waiting at most `timeout` for the
    /// whole set. Returns `false` (with nothing held) if some member could not
    /// be had in time. Each member gets only the time left; once the deadline
    /// has passed, the remaining members are not even tried. The members
    /// already taken are given back, and the return does not wait past the
    /// deadline for that: what a lost connection holds up is given back in
    /// the background. A zero `timeout` is [`try_acquire`](Self::try_acquire).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
        self.acquire_with(Wait::timeout(timeout)).await
    }

    /// Tries every member once, without waiting (one round trip each); if
    /// one is taken, the members already taken are given back and this
    /// returns `false`. An owner that holds the multi-lock re-enters.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(&self) -> Result<bool> {
        self.acquire_with(Wait::Try).await
    }

    async fn acquire_with(&self, wait: Wait) -> Result<bool> {
        let owner = Owner::current();
        let span = tracing::info_span!(
            "multi_lock.acquire",
            paths = %self.shared.label,
            ?wait,
            ?owner
        );
        self.shared
            .holds
            .acquire(wait, |wait| self.take_all(owner, wait))
            .instrument(span)
            .await
    }

    /// Takes every member in order, under one wait; gives back what was
    /// taken when one fails or the wait ends.
    async fn take_all(&self, owner: Owner, wait: Wait) -> Result<Option<MultiHold>> {
        let mut taken = Taken::new(owner);
        for member in &self.shared.members {
            if wait.has_expired() {
                tracing::info!(member = member.path(), "deadline passed; rolling back");
                taken.roll_back(wait).await;
                return Ok(None);
            }
            match member.take(wait).await {
                Ok(Some(hold)) => taken.push(hold),
                Ok(None) => {
                    tracing::info!(
                        member = member.path(),
                        "member not had in time; rolling back"
                    );
                    taken.roll_back(wait).await;
                    return Ok(None);
                }
                Err(err) => {
                    tracing::info!(member = member.path(), %err, "member failed; rolling back");
                    taken.roll_back(wait).await;
                    return Err(err);
                }
            }
        }
        // A member taken early may have been lost while a later one was
        // awaited: the set is not handed out then.
        let lost_member = taken
            .holds
            .iter()
            .find_map(|h| h.check().err().map(|loss| (h.path().to_owned(), loss)));
        if let Some((member, loss)) = lost_member {
            tracing::info!(%member, %loss, "a member was lost while acquiring the others; rolling back");
            taken.roll_back(wait).await;
            return Err(Error::lock_lost(member, loss));
        }
        // One bound for the set, from now (checked when set: cannot fail).
        let bounds = self.shared.bounds.get();
        for hold in &taken.holds {
            if let MemberHold::Guard(guard) = hold {
                let _ = guard.bound(bounds);
            }
        }
        tracing::info!("multi-lock acquired");
        Ok(Some(MultiHold {
            owner,
            label: self.shared.label.clone(),
            members: taken.disarm(),
        }))
    }

    /// Releases one hold of the current owner; the last one releases every
    /// member at once (their deletes go out together), going on past
    /// failures.
    ///
    /// # Errors
    /// [`Error::NotOwner`] if the current owner does not hold the multi-lock
    /// (nothing changes). Otherwise the first member release error, members
    /// taken last first (for example [`Error::LockLost`] for a member whose
    /// hold was lost before); the other members were still released, and
    /// any further errors are logged (`tracing::warn!`). After the last
    /// release the owner no longer holds the multi-lock whatever the
    /// outcome.
    ///
    /// # Cancel safety
    /// The count changes at the first poll; a release of the last hold
    /// dropped midway releases the remaining members in the background (see
    /// [Cancel safety](Self#cancel-safety)).
    pub async fn release(&self) -> Result<()> {
        let owner = Owner::current();
        let span = tracing::info_span!("multi_lock.release", paths = %self.shared.label, ?owner);
        async move {
            let Some(hold) = self.shared.holds.release()? else {
                return Ok(());
            };
            let mut releasing = Taken::new(owner);
            releasing.holds = hold.members;
            let mut errors = releasing.release_all().await.into_iter();
            match errors.next() {
                None => {
                    tracing::info!("multi-lock released");
                    Ok(())
                }
                Some((path, first)) => {
                    tracing::warn!(member = %path, err = %first, "member release failed");
                    for (path, err) in errors {
                        tracing::warn!(member = %path, %err, "member release failed");
                    }
                    Err(first)
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Why the current owner's hold can no longer be trusted (the first
    /// member found lost), `None` while it can; [`LockLoss::NotHeld`]
    /// without a hold. No I/O.
    pub fn loss(&self) -> Option<LockLoss> {
        self.shared
            .holds
            .with_current(|hold| hold.check().err())
            .unwrap_or(Some(LockLoss::NotHeld))
    }

    /// Whether the current owner holds the multi-lock and every member's
    /// hold can still be trusted. No I/O.
    pub fn is_valid(&self) -> bool {
        self.loss().is_none()
    }

    /// Completes as soon as any member of the current owner's hold is lost,
    /// with that member's reason ([`LockLoss::NotHeld`] at once without a
    /// hold). Looked up now, so it may be moved elsewhere.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    pub fn lost(&self) -> BoxFuture<'static, LockLoss> {
        let signals = self.shared.holds.with_current(|hold| {
            hold.members
                .iter()
                .map(MemberHold::lost)
                .collect::<Vec<_>>()
        });
        match signals {
            Some(signals) if !signals.is_empty() => futures::future::select_all(signals)
                .map(|(loss, _, _)| loss)
                .boxed(),
            _ => futures::future::ready(LockLoss::NotHeld).boxed(),
        }
    }

    /// A [`Fence`] over every member of the current owner's hold: a fenced
    /// write succeeds only while all of them are held.
    ///
    /// # Errors
    /// [`Error::NotOwner`] without a hold; [`Error::LockLost`] if a member is
    /// known to be lost; [`Error::InvalidArgument`] if the members live on
    /// different frameworks.
    pub fn fence(&self) -> Result<Fence> {
        let fences = self
            .shared
            .holds
            .with_current(|hold| {
                hold.members
                    .iter()
                    .map(MemberHold::fence)
                    .collect::<Result<Vec<_>>>()
            })
            .ok_or(Error::NotOwner)??;
        Fence::combine(fences)
    }

    /// Whether every member reports itself acquired in this process (by any
    /// owner), as Curator's `isAcquiredInThisProcess`.
    pub fn is_acquired_in_this_process(&self) -> bool {
        self.shared
            .members
            .iter()
            .all(Member::is_acquired_in_this_process)
    }

    /// Whether the current owner (task, or thread outside a task) holds the
    /// multi-lock.
    pub fn is_owned_by_current_task(&self) -> bool {
        self.shared.holds.is_held_by_current()
    }

    /// The participant nodes of every member, member after member in
    /// acquisition order (each member's list holders first).
    ///
    /// # Errors
    /// The first member error (ZooKeeper errors retrying could not overcome,
    /// [`Error::Closed`]).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn participant_nodes(&self) -> Result<Vec<String>> {
        let mut nodes = Vec::new();
        for member in &self.shared.members {
            nodes.extend(member.participant_nodes().await?);
        }
        Ok(nodes)
    }
}

/// The first of `lock`'s paths: the one it is ordered and named by here
/// (`build` refuses a lock without a path).
fn first_path(lock: &dyn InterProcessLock) -> &str {
    lock.paths().first().copied().unwrap_or_default()
}

fn empty_list() -> Error {
    Error::InvalidArgument("a multi-lock needs at least one lock".into())
}

impl Member {
    /// The path the member is ordered by: its first (a mutex's only one).
    fn path(&self) -> &str {
        match self {
            Member::Mutex(mutex) => mutex.path(),
            Member::Lock(lock) => first_path(&**lock),
        }
    }

    fn paths(&self) -> Vec<&str> {
        match self {
            Member::Mutex(mutex) => vec![mutex.path()],
            Member::Lock(lock) => lock.paths(),
        }
    }

    fn is_acquired_in_this_process(&self) -> bool {
        match self {
            Member::Mutex(mutex) => mutex.is_acquired_in_this_process(),
            Member::Lock(lock) => lock.is_acquired_in_this_process(),
        }
    }

    async fn participant_nodes(&self) -> Result<Vec<String>> {
        match self {
            Member::Mutex(mutex) => mutex.participant_nodes().await,
            Member::Lock(lock) => lock.participant_nodes().await,
        }
    }

    /// Acquires the member within `wait`; `None` when the wait ends first.
    /// Cancel safe (each recipe's acquire is).
    async fn take(&self, wait: Wait) -> Result<Option<MemberHold>> {
        match self {
            Member::Mutex(mutex) => Ok(mutex.lock_with(wait).await?.map(MemberHold::Guard)),
            Member::Lock(lock) => {
                let held = lock.acquire_with(wait).await?;
                Ok(held.then(|| MemberHold::Lock(lock.clone())))
            }
        }
    }
}

impl MemberHold {
    fn path(&self) -> String {
        match self {
            // The lock path is the parent of the guard's node.
            MemberHold::Guard(guard) => split(guard.node().path()).0.to_owned(),
            MemberHold::Lock(lock) => first_path(&**lock).to_owned(),
        }
    }

    fn check(&self) -> std::result::Result<(), LockLoss> {
        match self {
            MemberHold::Guard(guard) => guard.check(),
            MemberHold::Lock(lock) => lock.loss().map_or(Ok(()), Err),
        }
    }

    /// The member's loss signal, looked up now (in the owner's task).
    fn lost(&self) -> BoxFuture<'static, LockLoss> {
        match self {
            MemberHold::Guard(guard) => guard.lost().boxed(),
            MemberHold::Lock(lock) => lock.lost(),
        }
    }

    fn fence(&self) -> Result<Fence> {
        match self {
            MemberHold::Guard(guard) => guard.fence(),
            MemberHold::Lock(lock) => lock.fence(),
        }
    }

    /// Once polled, a dropped release still completes in the background
    /// (both kinds promise it).
    async fn release(self) -> Result<()> {
        match self {
            MemberHold::Guard(guard) => guard.release().await,
            MemberHold::Lock(lock) => lock.release().await,
        }
    }
}

/// Member holds on their way in (an acquire) or out (a rollback, a release).
/// Dropped with holds inside (the future was cancelled), it releases them in
/// the background.
struct Taken {
    owner: Owner,
    /// In acquisition order; released from the back.
    holds: Vec<MemberHold>,
}

impl Taken {
    fn new(owner: Owner) -> Self {
        Taken {
            owner,
            holds: Vec::new(),
        }
    }

    fn push(&mut self, hold: MemberHold) {
        self.holds.push(hold);
    }

    fn disarm(mut self) -> Vec<MemberHold> {
        std::mem::take(&mut self.holds)
    }

    /// Releases every hold at once, in the current task; returns the
    /// failures (member path and error), the member taken last first.
    async fn release_all(mut self) -> Vec<(String, Error)> {
        // Every member at once, so their deletes go out together: one round
        // trip, not one per member. The holds leave `self` and their
        // releases are first polled in the same poll, with no await in
        // between, and a release once polled completes in the background if
        // dropped: a cancelled release leaves no member held.
        let releasing = std::mem::take(&mut self.holds)
            .into_iter()
            .rev()
            .map(|hold| async move {
                let path = hold.path();
                hold.release().await.err().map(|err| (path, err))
            });
        futures::future::join_all(releasing)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// Gives back what an acquire under `wait` took; failures are only
    /// logged, the acquire reports its own outcome. An acquire with a
    /// deadline does not wait past it for this: what is not given back by
    /// then is given back in the background (each release, once polled,
    /// completes if dropped), as a single lock's timed-out acquire hands its
    /// node to the cleaner. Seed 5460 of the simulator: a release retrying
    /// over a lost connection held a timed-out acquire 1.9 s past its
    /// deadline.
    async fn roll_back(self, wait: Wait) {
        let Some(failures) = wait.bound(self.release_all()).await else {
            tracing::info!("deadline passed; the rollback goes on in the background");
            return;
        };
        for (path, err) in failures {
            tracing::warn!(member = %path, %err, "rollback: member release failed");
        }
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        if self.holds.is_empty() {
            return;
        }
        tracing::debug!(
            count = self.holds.len(),
            "multi-lock future dropped; releasing its members in the background"
        );
        let mut locks = Vec::new();
        while let Some(hold) = self.holds.pop() {
            match hold {
                // The guard hands its node to the framework's cleaner.
                MemberHold::Guard(guard) => drop(guard),
                MemberHold::Lock(lock) => locks.push(lock),
            }
        }
        if locks.is_empty() {
            return;
        }
        let owner = self.owner;
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let span = tracing::info_span!("multi_lock.background_release", ?owner);
                // The spawned task acts as the owner, so task-bound members
                // accept the release.
                let release_all = async move {
                    for lock in locks {
                        match lock.release().await {
                            Ok(()) => tracing::debug!(member = first_path(&*lock), "released"),
                            Err(err) => tracing::warn!(
                                member = first_path(&*lock),
                                %err,
                                "background release failed; the member stays held until its session ends"
                            ),
                        }
                    }
                };
                handle.spawn(Owner::act_for(owner, release_all).instrument(span));
            }
            Err(_) => {
                for lock in locks {
                    tracing::warn!(
                        member = first_path(&*lock),
                        "no tokio runtime to release a member in the background; it stays held until its session ends"
                    );
                }
            }
        }
    }
}

impl_inter_process_lock!(InterProcessMultiLock, lost: already boxed, paths: many);

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync_static<T: Send + Sync + 'static>() {}

    #[allow(dead_code)]
    fn futures_are_send(lock: InterProcessMultiLock) {
        assert_send(&lock.acquire());
        assert_send(&lock.acquire_timeout(Duration::from_secs(1)));
        assert_send(&lock.release());
        assert_send(&lock.participant_nodes());
    }

    #[test]
    fn handles_are_send_sync() {
        assert_send_sync_static::<InterProcessMultiLock>();
    }
}
