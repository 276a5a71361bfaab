//! [`InterProcessSemaphoreV2`]: a counting semaphore across processes and
//! hosts, and its [`Lease`].
//!
//! # Layout (Curator's, so JVM Curator clients interoperate)
//!
//! * `<path>/locks/_c_<uuid>-lock-<seq>`: an internal mutex that serialises
//!   acquirers (Curator's `InterProcessMutex` on `<path>/locks`).
//! * `<path>/leases/_c_<uuid>-lease-<seq>`: one ephemeral-sequential node per
//!   lease, carrying the semaphore's node data.
//!
//! # How an acquire works
//!
//! 1. Take the internal mutex (FIFO; each waiter watches only the one ahead
//!    of it).
//! 2. For each lease wanted: create a protected lease node, then list
//!    `<path>/leases` with a child watch until our node sorts among the first
//!    `max_leases` (woken by every lease that is created or deleted).
//! 3. Release the internal mutex and hand the leases to the caller.
//!
//! # Why it works this way
//!
//! **One mutex hold for the whole multi-lease acquire.** Curator's
//! `acquire(qty)` takes the leases one at a time and releases the internal
//! mutex between them. Two such acquirers can then each hold part of what
//! they need and wait for each other until their timeouts (forever without
//! one): with 4 leases, A holds 2 and wants 4, B holds 2 and wants 4.
//! Here an acquirer keeps the internal mutex until it has *all* its leases.
//! An acquirer that does not hold the mutex has no lease of the current call,
//! so the one that does hold it only ever waits for leases that were fully
//! handed out to callers, which return them on their own schedule. Multi-lease
//! acquirers are therefore served one at a time, in arrival order, and never
//! wait on each other's partial sets. A large request at the head of the
//! queue is not overtaken by smaller ones behind it (no starvation of large
//! requests), at the price of head-of-line blocking. This guarantee covers
//! zk-curator acquirers; a JVM Curator client taking several leases on the
//! same path still releases the mutex between its leases and can still
//! deadlock with others in the way described above.
//!
//! **Counting by sort order.** A lease is granted when our node is among the
//! first `max_leases` children of `<path>/leases` sorted by sequence. Under
//! the internal mutex every other lease node was created before ours, so this
//! is the same as Curator's rule (`children ≤ max_leases`); it differs only
//! for nodes that sort *behind* ours (a participant that did not take the
//! mutex, a foreign child name), which cannot delay us. Sort order also keeps
//! the semaphore safe when the mutex is bypassed: a granted node only ever
//! moves forward in the order (new nodes sort behind it), so at most
//! `max_leases` granted nodes ever exist. An orphan lease node ahead of ours
//! (of a session that died without the server noticing yet) takes a slot
//! until the server expires that session, exactly as in Curator: nobody can
//! tell it from a live holder.
//!
//! **No orphans of our own (CURATOR-315/335/462).** Every node we create is
//! under a drop guard from before its create is sent until it is handed to
//! the caller: an error, a timeout or a dropped future deletes the internal
//! mutex node and every lease node of the call (in the background if the
//! connection is down). A create whose reply was lost is found again by its
//! `_c_<uuid>-` prefix instead of being created twice.
//!
//! **Two round trips when a lease is free.** Lease nodes are taken through
//! [`LockInternals`] with the standard rule (our node among the first
//! `max_leases` holds a lease; otherwise wait for any change among the
//! leases), so the pipelined create + listing already decides an
//! uncontended lease. With the internal mutex's own create + listing before
//! it, a free lease costs two round trips: the mutex is given back with a
//! delete whose answer is not awaited
//! ([`LockInternals::release_before_reply`]). The delete follows every lease
//! request of the call on the session, so whoever takes the mutex next sees
//! our leases.
//!
//! **Vanished nodes and lost sessions.** If our waiting lease node disappears
//! (deleted by someone else) `LockInternals` creates a new one, still under
//! the mutex. If the session is lost, the internal mutex node and the leases
//! of the call went with it: the whole acquire starts again on the
//! framework's next session. Both restarts are bounded by the framework's
//! retry policy.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;
use zk_curator_framework::lock_internals::{
    standard_gets_the_lock, until_held, Acquire, ContenderGuard, Hold, LockInternals,
    LockInternalsDriver, ParticipantNode, PredicateResults, Revocation, RevocationListener,
    RevocationSetting, SortKey, StandardLockInternalsDriver, Wait,
};
use zk_curator_framework::path::{self, join};
use zk_curator_framework::retry::RetryLoop;
use zk_curator_framework::{zk, Error, Framework, LockLoss, Result};

use crate::held::Held;

use crate::layout::{
    check_family, Family, Layout, KAZOO_LOCK_NAME, LEASES_CHILD, LEASE_NAME, LOCKS_CHILD, LOCK_NAME,
};
use crate::mutex::MutexDriver;

/// The lease-node driver: the first `max_leases` lease nodes (by sequence)
/// hold a lease; the one waiter (the holder of the internal mutex) waits for
/// any change among the leases: any returned lease may be its turn, and a
/// deleted node of its own is noticed at once.
#[derive(Debug)]
struct LeaseNodeDriver;

impl LockInternalsDriver for LeaseNodeDriver {
    /// As many lease nodes of one process at a time as there are leases:
    /// an acquirer of this process that finds every one of them taken by
    /// its own process waits in-process, without a node, and (with cohort
    /// hand-off) receives a released lease node with no request. Only the
    /// holder of the internal mutex waits for a lease, so a waiter never
    /// needs another waiter of the process to get ahead first.
    fn local_turns(&self, max_leases: u32) -> Option<u32> {
        Some(max_leases)
    }

    fn gets_the_lock(
        &self,
        sorted_children: &[String],
        our_name: &str,
        max_leases: u32,
    ) -> Result<PredicateResults> {
        let decision = standard_gets_the_lock(sorted_children, our_name, max_leases)?;
        if decision.holds_lock {
            return Ok(decision);
        }
        // Only the head of the internal mutex's queue waits here, so watching
        // every lease costs no herd, and it also sees our own node vanish.
        Ok(PredicateResults::watch_children())
    }
}

/// The lease-node driver of kazoo's layout (kazoo's `Semaphore`): a lease
/// is an ephemeral node named by 32 hex digits alone, right under the
/// semaphore's path, and kazoo counts every child of that path as a lease.
/// Ours is created, then holds if the children (ours included) are at most
/// `max_leases`, else waits for any change among them. Only the holder of
/// the internal lock (kazoo's `Lock` on `<path>-__lock__`) creates a lease
/// node, kazoo's acquirers as ours, so at most one node (ours, waiting) is
/// ever beyond the count, and it never holds while it is.
#[derive(Debug)]
struct KazooLeaseDriver;

impl LockInternalsDriver for KazooLeaseDriver {
    fn layout(&self) -> Layout {
        Layout::Kazoo
    }

    /// Named by the layout's prefix alone (no sequence).
    fn participant_node(&self) -> ParticipantNode {
        ParticipantNode::EphemeralWithSequence(String::new())
    }

    /// No order among leases: by name.
    fn sort_key(&self, name: &str, _lock_name: &str) -> SortKey {
        SortKey::Foreign(name.to_owned())
    }

    fn gets_the_lock(
        &self,
        sorted_children: &[String],
        our_name: &str,
        max_leases: u32,
    ) -> Result<PredicateResults> {
        if !sorted_children.iter().any(|c| c == our_name) {
            return Err(Error::lock_lost(our_name, LockLoss::NodeDeleted));
        }
        if sorted_children.len() <= max_leases as usize {
            Ok(PredicateResults::holds())
        } else {
            Ok(PredicateResults::watch_children())
        }
    }

    /// Every child counts as a lease in kazoo's rule: one of another family
    /// is refused (and children no recipe writes count, as kazoo counts
    /// them).
    fn check_children(&self, path: &str, children: &[String], _lock_name: &str) -> Result<()> {
        check_family(Family::KazooSemaphore, path, children)
    }
}

struct Shared {
    framework: Framework,
    layout: Layout,
    /// kazoo's layout: whether the path (with its number of leases) was
    /// made or found once.
    path_made: AtomicBool,
    path: Arc<str>,
    max_leases: u32,
    data: Arc<[u8]>,
    lock: LockInternals,
    leases: LockInternals,
    revocation: RevocationSetting,
}

/// A counting semaphore shared by every process that uses the same ZooKeeper
/// path (Curator's `InterProcessSemaphoreV2`; same node layout, so Rust and
/// JVM services share the leases).
///
/// At most `max_leases` [`Lease`]s exist at once across all processes. A
/// lease is an ephemeral node: it is returned by [`Lease::release`], by
/// dropping the `Lease` (in the background), or when its session ends.
///
/// # Behaviour
///
/// * **Fair**: acquirers queue in arrival order on an internal mutex; only
///   the head of the queue watches the leases, so a returned lease wakes one
///   acquirer.
/// * **Multi-lease acquires are all or nothing and deadlock free**: see
///   [`acquire_many`](Self::acquire_many) and the module notes.
/// * **Not owned by a task**: a `Lease` may be moved to and released from any
///   task.
/// * **Fencing and loss signal**: [`Hold::fencing_token`] is the lease
///   node's creation zxid; [`Hold::fence`] makes ZooKeeper writes
///   conditional on the lease. A lease dies with its session and another
///   process may take it: stop when [`Hold::lost`] fires.
/// * **Try**: [`try_acquire`](Self::try_acquire) never waits.
/// * **Everyone must agree on `max_leases`**: as in Curator, nothing checks
///   that processes sharing a path use the same number.
///
/// Cheap to clone: clones share their settings.
///
/// # Examples
/// ```no_run
/// # async fn demo(framework: zk_curator::Framework) -> zk_curator::Result<()> {
/// use std::time::Duration;
/// use zk_curator::InterProcessSemaphoreV2;
///
/// let semaphore = InterProcessSemaphoreV2::new(framework, "/semaphores/db-connections", 5)?;
/// let lease = semaphore.acquire().await?;
/// println!("lease {} (token {})", lease.node().name(), lease.fencing_token());
/// lease.release().await?;
///
/// if let Some(leases) = semaphore.acquire_many_timeout(3, Duration::from_secs(2)).await? {
///     // ... use three slots at once ...
///     InterProcessSemaphoreV2::return_all(leases).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct InterProcessSemaphoreV2 {
    shared: Arc<Shared>,
}

impl fmt::Debug for InterProcessSemaphoreV2 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterProcessSemaphoreV2")
            .field("path", &self.path())
            .field("max_leases", &self.shared.max_leases)
            .field("data_len", &self.shared.data.len())
            .finish()
    }
}

impl InterProcessSemaphoreV2 {
    /// The child of the semaphore's path holding the internal mutex
    /// (Curator's `LOCK_SCHEMA`).
    pub const LOCKS_CHILD: &'static str = LOCKS_CHILD;
    /// The child of the semaphore's path holding the lease nodes.
    pub const LEASES_CHILD: &'static str = LEASES_CHILD;
    /// The name of internal-mutex participants (`_c_<uuid>-lock-<seq>`).
    pub const LOCK_NAME: &'static str = LOCK_NAME;
    /// The name of lease nodes (`_c_<uuid>-lease-<seq>`).
    pub const LEASE_NAME: &'static str = LEASE_NAME;

    /// A semaphore on `path` admitting `max_leases` holders at once, whose
    /// lease nodes carry no data.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a path that breaks ZooKeeper's rules, is
    /// `/`, or lies in the server's reserved `/zookeeper` tree;
    /// [`Error::InvalidArgument`] for zero `max_leases`. Nothing is sent.
    pub fn new(framework: Framework, path: &str, max_leases: u32) -> Result<Self> {
        Self::with_node_data(framework, path, max_leases, &[])
    }

    /// As [`new`](Self::new), with every lease node storing a copy of `data`
    /// (Curator's `setNodeData`; for example the holder's identity, for
    /// operators and for [`Lease::data`]).
    ///
    /// # Errors
    /// As [`new`](Self::new); [`Error::RequestTooLarge`] for data too large
    /// for the framework's packet limit. Nothing is sent.
    pub fn with_node_data(
        framework: Framework,
        path: &str,
        max_leases: u32,
        data: &[u8],
    ) -> Result<Self> {
        Self::with_layout(framework, path, max_leases, Layout::Curator, data)
    }

    /// As [`with_node_data`](Self::with_node_data), in `layout`. In
    /// [`Layout::Kazoo`] the semaphore is a participant of Python kazoo's
    /// `Semaphore` on the same path: its acquirers queue on a kazoo `Lock`
    /// at the sibling path `<path>-__lock__`, and its leases are ephemeral
    /// nodes named by 32 hex digits right under `<path>`, every child of
    /// which counts as a lease; `<path>`'s data holds the number of leases,
    /// as kazoo keeps it (written when the path is made, checked at each
    /// acquire: another number is an [`Error::InvalidArgument`], as kazoo
    /// refuses it). Fencing tokens, `lost()`, revocation and cancellation
    /// work as in Curator's layout.
    ///
    /// # Errors
    /// As [`with_node_data`](Self::with_node_data).
    pub fn with_layout(
        framework: Framework,
        path: &str,
        max_leases: u32,
        layout: Layout,
        data: &[u8],
    ) -> Result<Self> {
        path::validate_recipe_path(path)?;
        if max_leases == 0 {
            return Err(Error::InvalidArgument(
                "a semaphore needs max_leases of at least 1".into(),
            ));
        }
        let (lock, leases) = match layout {
            Layout::Kazoo => (
                LockInternals::new(
                    framework.clone(),
                    &format!("{path}-{KAZOO_LOCK_NAME}"),
                    KAZOO_LOCK_NAME,
                    1,
                    Arc::new(MutexDriver(Layout::Kazoo)),
                )?,
                LockInternals::new(
                    framework.clone(),
                    path,
                    "",
                    max_leases,
                    Arc::new(KazooLeaseDriver),
                )?,
            ),
            _ => (
                LockInternals::new(
                    framework.clone(),
                    &join(path, LOCKS_CHILD),
                    LOCK_NAME,
                    1,
                    Arc::new(StandardLockInternalsDriver),
                )?,
                LockInternals::new(
                    framework.clone(),
                    &join(path, LEASES_CHILD),
                    LEASE_NAME,
                    max_leases,
                    Arc::new(LeaseNodeDriver),
                )?,
            ),
        };
        lock.check_node_data(data)?;
        leases.check_node_data(data)?;
        Ok(InterProcessSemaphoreV2 {
            shared: Arc::new(Shared {
                framework,
                layout,
                path_made: AtomicBool::new(false),
                path: path.into(),
                max_leases,
                data: data.into(),
                lock,
                leases,
                revocation: RevocationSetting::default(),
            }),
        })
    }

    /// The semaphore's path.
    pub fn path(&self) -> &str {
        &self.shared.path
    }

    /// Makes every lease acquired from now on revocable (beyond Curator,
    /// whose semaphore has no revocation): a
    /// [`Revoker`](zk_curator_framework::lock_internals::Revoker) writing a
    /// revocation request into a lease node calls `listener` with the node's
    /// path, on a task of its own. Cooperative: the listener decides, e.g. by
    /// telling the lease's holder to release it.
    pub fn make_revocable(&self, listener: impl RevocationListener) {
        self.shared.revocation.set(Some(Revocation::new(listener)));
    }

    /// Stops making later leases revocable.
    pub fn clear_revocable(&self) {
        self.shared.revocation.set(None);
    }

    /// How many leases may exist at once.
    pub fn max_leases(&self) -> u32 {
        self.shared.max_leases
    }

    /// The framework the semaphore runs on.
    pub fn framework(&self) -> &Framework {
        &self.shared.framework
    }

    /// Waits for one lease.
    ///
    /// # Errors
    /// [`Error::Closed`] if the framework is closed; [`Error::Timeout`] if no
    /// session could be had within the connection timeout; ZooKeeper errors
    /// that retrying could not overcome (e.g. [`Error::NoAuth`]);
    /// [`Error::LockLost`] or [`Error::SessionExpired`] when our nodes kept
    /// vanishing (or sessions kept ending) for longer than the retry policy
    /// allows.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future (in `select!`, under `timeout`, by
    /// aborting the task) deletes our lease node and our internal mutex node
    /// in the background. `tokio::time::timeout(d, semaphore.acquire())` is
    /// therefore a correct timed acquire; so is
    /// [`acquire_timeout`](Self::acquire_timeout).
    pub async fn acquire(&self) -> Result<Lease> {
        let leases = until_held(|| self.acquire_leases(1, Wait::Forever)).await?;
        first(leases, self.path())
    }

    /// Like [`acquire`](Self::acquire), waiting at most `timeout` in all
    /// (session waits, the internal mutex, retries and the wait for a lease
    /// included). `None` on timeout.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<Lease>> {
        self.acquire_one(Wait::timeout(timeout)).await
    }

    /// A lease if one is free right now, without waiting: one round trip for
    /// the internal mutex (`None` at once if another acquirer holds it), one
    /// for the lease (create and listing together); nodes of a try that
    /// gets nothing are deleted before it returns.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    pub async fn try_acquire(&self) -> Result<Option<Lease>> {
        self.acquire_one(Wait::Try).await
    }

    /// One lease within `wait` (`None` when the wait ends first); an
    /// unbounded wait goes on through lost sessions until it holds.
    pub(crate) async fn acquire_one(&self, wait: Wait) -> Result<Option<Lease>> {
        let leases = match wait {
            Wait::Forever => Some(until_held(|| self.acquire_leases(1, Wait::Forever)).await?),
            bounded => self.acquire_leases(1, bounded).await?,
        };
        leases.map(|leases| first(leases, self.path())).transpose()
    }

    /// Waits for `n` leases, all or nothing.
    ///
    /// The internal mutex is held from the first lease to the last, so
    /// multi-lease acquirers are served one at a time and never hold part of
    /// their leases while waiting for each other (Curator's can; see the
    /// module notes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `n` is zero or greater than
    /// [`max_leases`](Self::max_leases) (nothing is sent); otherwise as
    /// [`acquire`](Self::acquire). On an error, no lease of this call is left
    /// behind.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future deletes, in the background, every
    /// lease node the call created and its internal mutex node.
    pub async fn acquire_many(&self, n: u32) -> Result<Vec<Lease>> {
        self.check_count(n)?;
        until_held(|| self.acquire_leases(n, Wait::Forever)).await
    }

    /// Like [`acquire_many`](Self::acquire_many), with one deadline for the
    /// whole call; `None` on timeout (the leases taken so far are returned).
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire_many`](Self::acquire_many).
    pub async fn acquire_many_timeout(
        &self,
        n: u32,
        timeout: Duration,
    ) -> Result<Option<Vec<Lease>>> {
        self.check_count(n)?;
        self.acquire_leases(n, Wait::timeout(timeout)).await
    }

    /// Returns every lease of `leases` (Curator's `returnAll`), concurrently.
    ///
    /// # Errors
    /// The first error of [`Lease::release`]; every lease is released
    /// whatever happens to the others.
    ///
    /// # Cancel safety
    /// Once polled, dropping the future still returns the leases not yet
    /// released in the background.
    pub async fn return_all(leases: impl IntoIterator<Item = Lease>) -> Result<()> {
        let results = futures::future::join_all(leases.into_iter().map(Lease::release)).await;
        results.into_iter().collect()
    }

    /// The full paths of all lease nodes (`<path>/leases/_c_<uuid>-lease-<seq>`),
    /// sorted by sequence: the first `max_leases` are holders, any after them
    /// is the acquirer at the head of the queue. Curator returns bare names,
    /// unsorted; full paths compare directly with a lease's
    /// [`node`](crate::Hold::node)`().path()` (a lease derefs to its hold).
    /// Empty (not an error) before the semaphore is first used (CURATOR-19).
    ///
    /// # Errors
    /// ZooKeeper errors that retrying could not overcome; [`Error::Closed`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn participant_nodes(&self) -> Result<Vec<String>> {
        self.shared.leases.participant_nodes().await
    }

    fn check_count(&self, n: u32) -> Result<()> {
        if n == 0 {
            return Err(Error::InvalidArgument(
                "the number of leases to acquire must be at least 1".into(),
            ));
        }
        if n > self.shared.max_leases {
            return Err(Error::InvalidArgument(format!(
                "cannot acquire {n} leases at once from a semaphore of {}",
                self.shared.max_leases
            )));
        }
        Ok(())
    }

    fn check_open(&self) -> Result<()> {
        if self.shared.framework.is_closed() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn span(&self, n: u32) -> tracing::Span {
        tracing::info_span!(
            "semaphore.acquire",
            path = %self.path(),
            leases = n,
            max_leases = self.shared.max_leases
        )
    }

    /// `n` leases within `wait`; `None` when the wait ends first.
    async fn acquire_leases(&self, n: u32, wait: Wait) -> Result<Option<Vec<Lease>>> {
        self.check_open()?;
        let span = self.span(n);
        // Everything the call created is under a drop guard: a deadline
        // simply drops the future.
        let acquire = self.acquire_restarting(n, wait).instrument(span.clone());
        let result = wait.bound(acquire).await.unwrap_or(Ok(None));
        span.in_scope(|| match &result {
            Ok(Some(leases)) => {
                let nodes: Vec<&str> = leases.iter().map(|lease| lease.node().name()).collect();
                tracing::info!(?nodes, "leases acquired");
            }
            Ok(None) => tracing::info!(?wait, "no lease in time"),
            Err(err) => tracing::info!(%err, "lease acquire failed"),
        });
        result
    }

    /// Runs attempts, starting again after a lost session while the retry
    /// policy allows (a try does not start again).
    async fn acquire_restarting(&self, n: u32, wait: Wait) -> Result<Option<Vec<Lease>>> {
        let framework = &self.shared.framework;
        let mut restarts = RetryLoop::new(&**framework.retry_policy());
        loop {
            self.check_open()?;
            match self.attempt(n, wait).await {
                Ok(leases) => return Ok(leases),
                Err(err) if err.is_session_terminal() && !wait.is_try() => {
                    tracing::warn!(%err, "the session ended during the acquire; starting over");
                    restarts.next(err, framework.closed()).await?;
                }
                Err(err) => return Err(err),
            }
        }
    }

    fn revocation(&self) -> Option<Revocation> {
        self.shared.revocation.current()
    }

    /// kazoo's semaphore path: made if missing, persistent, with the number
    /// of leases as its data (as kazoo makes it); an existing one's number,
    /// if it holds one, must be ours (kazoo refuses another too); then its
    /// children are checked as [`check_path`](Self::check_path) does.
    async fn check_kazoo_path(&self) -> Result<()> {
        let framework = &self.shared.framework;
        let path = self.shared.path.to_string();
        let max = self.shared.max_leases;
        // Made once per semaphore (as kazoo does): later acquires only read.
        let levels: Vec<(String, zk::CreateMode, Vec<zk::Acl>, Vec<u8>)> =
            if self.shared.path_made.load(Ordering::Acquire) {
                Vec::new()
            } else {
                let last = path.as_str();
                path::parents(&path)
                    .chain(std::iter::once(last))
                    .map(|level| {
                        let (mode, data) = if level == last {
                            (zk::CreateMode::Persistent, max.to_string().into_bytes())
                        } else {
                            (zk::CreateMode::Container, Vec::new())
                        };
                        (level.to_owned(), mode, framework.acl_for_path(level), data)
                    })
                    .collect()
            };
        let (data, children) = framework
            .call_with_retry(|client| {
                let (levels, path) = (&levels, &path);
                async move {
                    // Queued in this order before any is awaited: the
                    // parents, the path with the number, the read of its
                    // number, the listing.
                    let options: Vec<zk::CreateOptions<'_>> = levels
                        .iter()
                        .map(|(_, mode, acl, _)| mode.with_acls(zk::Acls::new(acl)))
                        .collect();
                    let creates: Vec<_> = levels
                        .iter()
                        .zip(&options)
                        .map(|((level, _, _, data), options)| client.create(level, data, options))
                        .collect();
                    let read = client.get_data(path);
                    let listed = client.list_children(path);
                    for created in futures::future::join_all(creates).await {
                        match created {
                            Ok(_) | Err(zk::Error::NodeExists) => {}
                            Err(err) => return Err(err),
                        }
                    }
                    let (read, listed) = futures::join!(read, listed);
                    Ok((read?.0, listed?))
                }
            })
            .await?;
        self.shared.path_made.store(true, Ordering::Release);
        let said = std::str::from_utf8(&data)
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok());
        match said {
            Some(theirs) if theirs != u64::from(max) => Err(Error::InvalidArgument(format!(
                "kazoo's semaphore at {} admits {theirs} leases (its path's data), not {max}",
                path::cut(&path)
            ))),
            _ => check_family(Family::KazooSemaphore, &path, &children),
        }
    }

    /// One acquire under one hold of the internal mutex, on one session.
    ///
    /// The semaphore's own nodes are not children of its path, so the lock
    /// engine's look at each listing cannot see a participant of another
    /// recipe there (a mutex's node beside `locks` and `leases`, a kazoo
    /// lease): the path is listed beside the internal mutex's acquire (no
    /// round trip of its own) and checked with
    /// [`check_family`](crate::layout::check_family).
    ///
    /// The mutex is guarded in the poll that grants it, inside the join:
    /// the listing may still be pending then (retried after a lost
    /// connection), and a deadline or a drop in that gap must give the
    /// mutex back, not leave its node to the session (simulator seed
    /// 59458).
    async fn attempt(&self, n: u32, wait: Wait) -> Result<Option<Vec<Lease>>> {
        let framework = &self.shared.framework;
        let granted = async {
            let mutex = self.shared.lock.acquire(Acquire::new().wait(wait)).await?;
            Ok::<_, Error>(mutex.map(|mutex| {
                let guard = ContenderGuard::node(framework, mutex.node().path());
                (mutex, guard)
            }))
        };
        let (beside, granted) = futures::join!(self.check_path(), granted);
        let Some((mutex, guard)) = granted? else {
            beside?;
            return Ok(None);
        };
        if let Err(err) = beside {
            tracing::warn!(%err, "not taking a lease beside participants that cannot see ours");
            self.give_back(&mutex, guard).await;
            self.remove_empty_queues().await;
            return Err(err);
        }
        self.leases_under(&mutex, guard, n, wait).await
    }

    /// After a refusal: the internal queue's acquire made the `locks`
    /// child (and perhaps `leases`) beside the other family's nodes, and
    /// the server reaps an empty container only later: both go now, unless
    /// something is in them (a delete of a node with children fails, and
    /// an acquirer that meets the gap makes them again). Best effort.
    async fn remove_empty_queues(&self) {
        let Ok(client) = self.shared.framework.client().await else {
            return;
        };
        let queues = match self.shared.layout {
            // kazoo's path stays: it carries the number of leases.
            Layout::Kazoo => vec![self.shared.lock.base_path().to_owned()],
            _ => vec![
                join(&self.shared.path, LOCKS_CHILD),
                join(&self.shared.path, LEASES_CHILD),
            ],
        };
        let deletes = queues.iter().map(|queue| client.delete(queue, None));
        let deleted = futures::future::join_all(deletes).await;
        tracing::debug!(?deleted, "empty queues of a refused acquire removed");
    }

    /// Lists the semaphore's path and refuses participants of another
    /// family there.
    async fn check_path(&self) -> Result<()> {
        if self.shared.layout == Layout::Kazoo {
            return self.check_kazoo_path().await;
        }
        let path = self.shared.path.to_string();
        let listed = self
            .shared
            .framework
            .call_with_retry(|client| {
                let path = path.clone();
                async move { client.list_children(&path).await }
            })
            .await;
        match listed {
            Ok(children) => check_family(Family::CuratorSemaphore, &path, &children),
            Err(Error::NoNode { .. }) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Takes `n` leases while holding the internal mutex `mutex`, on the
    /// mutex's session only (a lease taken on another session would not be
    /// covered by the mutex), then gives the mutex back. `None` (and
    /// nothing left behind) when `wait` ends before the last lease: a try
    /// whose lease is not free at once, or a deadline. `mutex_guard`
    /// deletes the mutex's node if this is dropped before it gives it back.
    async fn leases_under(
        &self,
        mutex: &Hold,
        mutex_guard: ContenderGuard,
        n: u32,
        wait: Wait,
    ) -> Result<Option<Vec<Lease>>> {
        tracing::debug!(node = %mutex.node().path(), "internal mutex held");
        let session = mutex.session().ok_or(Error::SessionExpired)?;
        let revocation = self.revocation();
        let mut leases = Vec::with_capacity(n as usize);
        while leases.len() < n as usize {
            let request = Acquire::new()
                .data(&self.shared.data)
                .wait(wait)
                .revocation(revocation.as_ref())
                .on_session(&session);
            match self.shared.leases.acquire(request).await? {
                Some(hold) => {
                    // No await since the grant: from here the lease deletes
                    // itself on drop.
                    let lease = Lease::new(self.shared.leases.clone(), hold);
                    tracing::debug!(node = %lease.node().name(), "lease granted");
                    leases.push(lease);
                }
                // The wait ended (a try's node is gone again, a deadline's
                // goes in the background); the leases taken so far go back
                // when dropped.
                None => {
                    drop(leases);
                    self.give_back(mutex, mutex_guard).await;
                    return Ok(None);
                }
            }
        }
        self.give_back(mutex, mutex_guard).await;
        // A lease lost by now (its session replaced, say) is not handed out;
        // dropping the leases returns them, and the acquire starts over (a
        // try gives up).
        if let Some(lost) = leases.iter().find(|lease| !lease.is_valid()) {
            tracing::info!(node = %lost.node().path(), "lease lost before the acquire returned; starting over");
            drop(leases);
            return if wait.is_try() {
                Ok(None)
            } else {
                Err(Error::SessionExpired)
            };
        }
        Ok(Some(leases))
    }

    /// Releases the internal mutex, without waiting for the answer to its
    /// delete: the delete follows every lease request of this acquire on the
    /// session, so the next acquirer sees our leases, and the acquire saves a
    /// round trip. Its own loss does not matter to leases already granted
    /// (they have their own holds), so it is only logged.
    async fn give_back(&self, mutex: &Hold, guard: ContenderGuard) {
        let released = self.shared.lock.release_before_reply(mutex).await;
        guard.disarm();
        if let Err(err) = released {
            tracing::debug!(%err, "internal mutex release");
        }
    }
}

/// The one lease of a single-lease acquire (which returns exactly one; an
/// empty answer cannot happen and would be reported as nothing held).
fn first(mut leases: Vec<Lease>, path: &str) -> Result<Lease> {
    leases
        .pop()
        .ok_or_else(|| Error::lock_lost(path, LockLoss::NotHeld))
}

/// One lease of an [`InterProcessSemaphoreV2`]: an ephemeral node under
/// `<path>/leases`.
///
/// It is a [`Hold`] (through `Deref`): [`fencing_token`](Hold::fencing_token)
/// (later leases get greater tokens; up to `max_leases` holders are valid
/// at once, so a resource can use it to order holders, not to single one
/// out), [`is_valid`](Hold::is_valid), [`lost`](Hold::lost),
/// [`fence`](Hold::fence) and [`node`](Hold::node) (the lease node's path
/// is `lease.node().path()`) work on it directly. Return it with
/// [`Lease::release`]; dropping it returns it in the background. It is not
/// bound to a task: any task may release it.
#[must_use = "dropping a lease returns it (in the background)"]
#[clippy::has_significant_drop]
pub struct Lease {
    held: Held,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("node", &self.held.hold().node().path())
            .finish()
    }
}

impl Lease {
    fn new(leases: LockInternals, hold: Hold) -> Self {
        Lease {
            held: Held::new(leases, hold, None),
        }
    }

    /// Reads the lease node's data (the semaphore's node data when it was
    /// created; Curator's `getData`).
    ///
    /// # Errors
    /// [`Error::NoNode`] if the lease node is gone (its session ended, or it
    /// was deleted); [`Error::Closed`]; ZooKeeper errors that retrying could
    /// not overcome.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn data(&self) -> Result<Vec<u8>> {
        let node_path = self.node().path().to_owned();
        let (data, _stat) = self
            .held
            .hold()
            .framework()
            .call_with_retry(|client| {
                let node_path = node_path.clone();
                async move { client.get_data(&node_path).await }
            })
            .await?;
        Ok(data)
    }

    /// Returns the lease: deletes its node (in the background if ZooKeeper
    /// cannot be reached right now). A node that is already gone counts as
    /// returned.
    ///
    /// # Errors
    /// [`Error::LockLost`] if the lease had been lost before (returned at
    /// once, without waiting for a new session); [`Error::Closed`] if the
    /// framework is closed (the node went with its session); errors no
    /// retry can fix, such as [`Error::NoAuth`] (only logged if the
    /// framework releases before the reply, see
    /// [`FrameworkBuilder::release_before_reply`](zk_curator_framework::FrameworkBuilder::release_before_reply)).
    ///
    /// # Cancel safety
    /// Once polled, a dropped release still deletes the node in the
    /// background.
    pub async fn release(self) -> Result<()> {
        let span = tracing::info_span!("semaphore.release", node = %self.node().path());
        self.held.release().instrument(span).await
    }
}

impl std::ops::Deref for Lease {
    type Target = Hold;

    fn deref(&self) -> &Hold {
        self.held.hold()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync_static<T: Send + Sync + 'static>() {}

    #[allow(dead_code)]
    fn futures_are_send(semaphore: InterProcessSemaphoreV2, lease: Lease) {
        assert_send(&semaphore.try_acquire());
        assert_send(&semaphore.acquire());
        assert_send(&semaphore.acquire_timeout(Duration::from_secs(1)));
        assert_send(&semaphore.acquire_many(2));
        assert_send(&semaphore.acquire_many_timeout(2, Duration::from_secs(1)));
        assert_send(&semaphore.participant_nodes());
        assert_send(&lease.data());
        assert_send(&lease.release());
    }

    #[test]
    fn handles_are_send_sync() {
        assert_send_sync_static::<InterProcessSemaphoreV2>();
        assert_send_sync_static::<Lease>();
    }

    #[test]
    fn lease_driver_grants_the_first_max_leases_and_waits_on_the_list() {
        let children = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        assert_eq!(
            LeaseNodeDriver.gets_the_lock(&children, "b", 2).unwrap(),
            PredicateResults::holds()
        );
        // Beyond max_leases: wait for any change among the leases, even with
        // one lease (then our own node's deletion is seen at once too).
        for max in [1, 2] {
            assert_eq!(
                LeaseNodeDriver.gets_the_lock(&children, "c", max).unwrap(),
                PredicateResults::watch_children()
            );
        }
        assert!(matches!(
            LeaseNodeDriver.gets_the_lock(&children, "d", 2),
            Err(Error::LockLost { .. })
        ));
    }
}
