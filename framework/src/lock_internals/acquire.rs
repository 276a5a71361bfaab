//! The acquire on ZooKeeper, top-down: the restart loop
//! ([`acquire_restarting`]: an attempt whose node or session is gone starts
//! over, under the retry policy), one attempt on one session, and the two
//! stages of an attempt in the order they run:
//!
//! 1. the create: our participant node (protected, so that a create whose
//!    reply was lost is adopted rather than repeated), with the
//!    participants listed in the same breath; or, where the lock path is
//!    missing, the path and our node in one multi that needs no listing
//!    ([`lock_path`]);
//! 2. the wait loop: decide from the sorted participants whether we hold
//!    the lock, and otherwise wait for the one node the driver names (or
//!    for the children to change), then list again, until held or given up.
//!
//! The listing both stages read ([`list_children_on`]) is the last step
//! here; taking up a lost node again, which waits as the loop does, is in
//! [`resume`](super::resume).

use std::sync::atomic::{AtomicU64, Ordering};

use zookeeper_client as zk;

use super::contender::ContenderGuard;
use super::driver::ParticipantNode;
use super::hold::Hold;
use super::internals::LockInternals;
use super::lock_path::{self, PathCreate, RemovedPaths};
use super::node::AcquiredNode;
use super::request::Acquire;
use super::revocation::{self, Revocation};
use super::trust;
use crate::buggify::{self, Point, Rare};
use crate::retry::RetryLoop;
use crate::{path, Error, LockLoss, Result, Session};

/// Why one attempt failed: `Restart` when our node (or its session) is gone
/// and a fresh attempt at the back of the queue may succeed.
pub(super) enum Failure {
    Restart(Error),
    Fail(Error),
}

impl From<Error> for Failure {
    fn from(err: Error) -> Self {
        if err.is_session_terminal() || matches!(err, Error::LockLost { .. }) {
            Failure::Restart(err)
        } else {
            Failure::Fail(err)
        }
    }
}

pub(super) async fn acquire_restarting(
    lock: &LockInternals,
    request: &Acquire<'_>,
) -> Result<Option<Hold>> {
    let try_only = request.wait.is_try();
    let mut restarts = RetryLoop::new(&**lock.framework.retry_policy());
    loop {
        let session = match request.session {
            Some(pinned) => {
                let current = lock.framework.current_session();
                if current.map(|s| s.generation()) != Some(pinned.generation()) {
                    return Err(Error::SessionExpired);
                }
                pinned.clone()
            }
            None => lock.framework.session().await?,
        };
        // Without data of its own, a participant carries its creator's
        // identity.
        let data = match request.data {
            [] => lock.framework.default_node_data(),
            data => data,
        };
        let err = match attempt(lock, &session, data, request.revocation, try_only).await {
            Ok(hold) => return Ok(hold),
            Err(Failure::Fail(err)) => return Err(err),
            Err(Failure::Restart(err)) if try_only => return Err(err),
            Err(Failure::Restart(err)) => err,
        };
        tracing::warn!(%err, restarts = restarts.retries() + 1, "our participant node is gone; starting over at the back of the queue");
        restarts.next(err, lock.framework.closed()).await?;
    }
}

/// One acquire on one session: create our node, then decide and wait
/// until it holds or the acquire gives up. `Ok(None)` only for a try
/// that found the lock taken (our node is deleted again by then).
async fn attempt(
    lock: &LockInternals,
    session: &Session,
    data: &[u8],
    revocation: Option<&Revocation>,
    try_only: bool,
) -> Result<Option<Hold>, Failure> {
    let mut ours = create_ours(lock, session, data, revocation).await?;
    let mut children = std::mem::take(&mut ours.created.children);
    loop {
        lock.framework.check_open()?;
        let sorted = lock.sort_children(children);
        if !sorted.contains(&ours.created.name) {
            // Our node is gone (deleted by someone, or its session died).
            return Err(Failure::Restart(Error::lock_lost(
                ours.path,
                LockLoss::NodeDeleted,
            )));
        }
        // Participants that cannot see ours (another library's layout,
        // another recipe): queueing beside them could give two holders, so
        // our node goes at once and the acquire fails.
        if let Err(err) = lock
            .driver
            .check_children(&lock.base_path, &sorted, &lock.lock_name)
        {
            tracing::warn!(%err, "not queueing beside participants that cannot see ours");
            withdraw(lock, session, ours.guard, &ours.path).await;
            return Err(Failure::Fail(err));
        }
        // A driver's own refusal ends the acquire; it is not restarted.
        let decision = lock
            .driver
            .gets_the_lock(&sorted, &ours.created.name, lock.max_leases)
            .map_err(Failure::Fail)?;
        if decision.holds_lock {
            buggify::delay(Point::GrantDelay).await;
            return grant(lock, session, ours).map(Some);
        }
        if try_only {
            withdraw(lock, session, ours.guard, &ours.path).await;
            return Ok(None);
        }
        let fresh = if decision.watch_children {
            wait_for_children_change(lock, session, &sorted).await?
        } else {
            let Some(watch_name) = decision.path_to_watch else {
                return Err(Failure::Fail(Error::InvalidArgument(
                    "the lock driver neither granted the lock nor named a node to watch".into(),
                )));
            };
            // A parked waiter keeps nothing but its watch: holding on to
            // the listing would cost every waiter a copy of the queue.
            drop(sorted);
            // Whatever woke us, we list again: the deletion of the node
            // ahead does not prove that ours still exists (someone may
            // have deleted it meanwhile, and a later arrival would then
            // hold beside us).
            wait_for_node_ahead(lock, session, &watch_name).await?;
            None
        };
        children = match fresh {
            Some(fresh) => fresh,
            None => list_children_on(lock, session).await?,
        };
    }
}

/// How many times one create may find the lock path missing and create its
/// parents before the retry policy is asked (a parent reaped by the server
/// between two creates). Creating parents is part of the first acquire on a
/// path, not a failure, so it does not spend the retry budget.
const PARENT_ROUNDS: u32 = 3;

/// Our created node and the participants listed right after it.
struct Created {
    name: String,
    czxid: i64,
    children: Vec<String>,
    /// Whether our multi made the lock path with the node (see
    /// [`lock_path`]).
    made_path: bool,
}

/// Our participant node, from its create until it holds or is given up.
struct Ours {
    created: Created,
    /// Its full path.
    path: String,
    /// Deletes it in the background unless disarmed.
    guard: ContenderGuard,
    ephemeral: bool,
}

/// Creates our participant node, named as the driver asks, with its
/// cleanup armed before anything is sent, and starts watching it for
/// revocation requests if asked.
async fn create_ours(
    lock: &LockInternals,
    session: &Session,
    data: &[u8],
    revocation: Option<&Revocation>,
) -> Result<Ours> {
    let node_kind = lock.driver.participant_node();
    let name_prefix = lock
        .driver
        .layout()
        .node_prefix(crate::random::node_id(), &lock.lock_name);
    let (create_name, mode) = match &node_kind {
        ParticipantNode::EphemeralSequential => {
            (name_prefix.clone(), zk::CreateMode::EphemeralSequential)
        }
        ParticipantNode::PersistentSequential => {
            (name_prefix.clone(), zk::CreateMode::PersistentSequential)
        }
        ParticipantNode::EphemeralWithSequence(seq) => {
            (format!("{name_prefix}{seq}"), zk::CreateMode::Ephemeral)
        }
    };
    // Armed before anything is sent: from here on, any exit cleans up.
    let mut guard = ContenderGuard::protected(&lock.framework, &lock.base_path, &name_prefix);
    let created = create_participant(lock, session, &create_name, &name_prefix, mode, data).await?;
    let our_path = path::join(&lock.base_path, &created.name);
    guard.set_node(&our_path);
    tracing::debug!(node = %our_path, "participant node created");
    if let Some(revocation) = revocation {
        revocation::spawn_watch(
            lock.framework.clone(),
            session.clone(),
            our_path.clone(),
            revocation.clone(),
        );
    }
    Ok(Ours {
        created,
        path: our_path,
        guard,
        ephemeral: node_kind.is_ephemeral(),
    })
}

/// Sends the protected create and the children listing back to back.
async fn create_participant(
    lock: &LockInternals,
    session: &Session,
    create_name: &str,
    name_prefix: &str,
    mode: zk::CreateMode,
    data: &[u8],
) -> Result<Created> {
    let create_path = path::join(&lock.base_path, create_name);
    let acl = lock.framework.acl_for_path(&create_path);
    let options = mode.with_acls(zk::Acls::new(&acl));
    let sequential = matches!(
        mode,
        zk::CreateMode::EphemeralSequential | zk::CreateMode::PersistentSequential
    );
    let mut retry = RetryLoop::new(&**lock.framework.retry_policy());
    let mut parent_rounds = 0u32;
    let mut maybe_created = false;
    // A lock path this framework removed at its last release: make it
    // again with our node, in one multi.
    let mut make_path = RemovedPaths::contains(&lock.framework, &lock.base_path);
    loop {
        lock.framework.check_open()?;
        if maybe_created {
            // The last create may have been applied with its reply lost:
            // adopt our node rather than create a second one.
            let children = match list_children_on(lock, session).await {
                Ok(children) => children,
                Err(Error::LockLost { .. }) => Vec::new(), // parent missing: nothing was created
                Err(err) => return Err(err),
            };
            if let Some(name) = children
                .iter()
                .find(|c| c.starts_with(name_prefix))
                .cloned()
            {
                let czxid = adopt(lock, session, &name, mode).await?;
                tracing::info!(node = %name, "adopted the node of a create whose reply was lost");
                buggify::reach(Rare::AdoptedCreate);
                return Ok(Created {
                    name,
                    czxid,
                    children,
                    made_path: false,
                });
            }
        }
        let client = session.client();
        if std::mem::take(&mut make_path) {
            let err =
                match lock_path::create_with_node(lock, client, &create_path, data, &options, &acl)
                    .await
                {
                    Ok(PathCreate::Made { name, czxid }) => {
                        return Ok(Created {
                            children: vec![name.clone()],
                            name,
                            czxid,
                            made_path: true,
                        })
                    }
                    // Made by someone else meanwhile: our node alone, below.
                    Ok(PathCreate::Exists) => None,
                    Ok(PathCreate::TooLarge) => {
                        create_parents(lock, session, true).await?;
                        None
                    }
                    Ok(PathCreate::ParentMissing) => {
                        parent_round(lock, &mut parent_rounds, &mut retry)?;
                        create_parents(lock, session, false).await?;
                        make_path = true;
                        continue;
                    }
                    Err(err) => Some(session.map_err(err)),
                };
            if let Some(err) = err {
                if !err.is_retryable() {
                    return Err(err);
                }
                maybe_created = true;
                tracing::debug!(%err, "create failed; retrying");
                retry.next(err, lock.framework.closed()).await?;
                continue;
            }
        }
        // Both requests are queued here, in this order, before either is awaited.
        let create = client.create(&create_path, data, &options);
        let list = client.list_children(&lock.base_path);
        let (created, listed) = futures::join!(create, list);
        let err = match created {
            Ok((stat, sequence)) => {
                let name = if sequential {
                    format!("{create_name}{sequence}")
                } else {
                    create_name.to_owned()
                };
                let children = match listed {
                    Ok(children) if children.contains(&name) => children,
                    _ => list_children_on(lock, session).await?,
                };
                return Ok(Created {
                    name,
                    czxid: stat.czxid,
                    children,
                    made_path: false,
                });
            }
            Err(zk::Error::NoNode) => {
                // The lock path (or a level reaped by the server between
                // two creates) is missing: make it with our node.
                parent_round(lock, &mut parent_rounds, &mut retry)?;
                make_path = true;
                continue;
            }
            Err(err) => {
                let err = session.map_err(err);
                if !err.is_retryable() {
                    return Err(err);
                }
                maybe_created = true;
                err
            }
        };
        tracing::debug!(%err, "create failed; retrying");
        retry.next(err, lock.framework.closed()).await?;
    }
}

/// Counts one round that found the lock path (or a level above it)
/// missing: outside the retry budget for the first few, since making the
/// path is part of the first acquire on it, not a failure.
///
/// # Errors
/// The retry policy's refusal once parents keep vanishing.
fn parent_round(lock: &LockInternals, rounds: &mut u32, retry: &mut RetryLoop<'_>) -> Result<()> {
    *rounds += 1;
    if *rounds > PARENT_ROUNDS {
        // Parents keep vanishing: each round now counts as a retry
        // (without a pause: the parents were just made).
        retry.allow(Error::NoNode {
            path: lock.base_path.to_string(),
        })?;
    }
    Ok(())
}

/// Reads the stat of a node found by its prefix, checking that it belongs
/// to this session when it is ephemeral.
async fn adopt(
    lock: &LockInternals,
    session: &Session,
    name: &str,
    mode: zk::CreateMode,
) -> Result<i64> {
    let node_path = path::join(&lock.base_path, name);
    let stat = lock
        .framework
        .call_on_session(session, |client| {
            let node_path = node_path.clone();
            async move { client.check_stat(&node_path).await }
        })
        .await?;
    match stat {
        Some(stat)
            if !matches!(
                mode,
                zk::CreateMode::Ephemeral | zk::CreateMode::EphemeralSequential
            ) || stat.ephemeral_owner == session.id() =>
        {
            Ok(stat.czxid)
        }
        // Not ours: the node we created died with our session.
        Some(_) => Err(Error::lock_lost(node_path, LockLoss::SessionReplaced)),
        // Vanished before it could be adopted.
        None => Err(Error::lock_lost(node_path, LockLoss::NodeDeleted)),
    }
}

/// Creates the lock path's missing ancestors, and the lock path itself if
/// `with_base`, as container nodes (the server removes them once their
/// last child goes). A level removed again meanwhile is not an error: the
/// caller's create finds it missing and comes back.
async fn create_parents(lock: &LockInternals, session: &Session, with_base: bool) -> Result<()> {
    match make_levels(lock, session, with_base).await {
        Ok(()) | Err(Error::NoNode { .. }) => Ok(()),
        Err(err) => Err(err),
    }
}

async fn make_levels(lock: &LockInternals, session: &Session, with_base: bool) -> Result<()> {
    // Walk up with `exists` to the deepest existing ancestor (no read or
    // create permission is needed above it), then create downwards, each
    // level with its own ACL.
    let base = with_base.then_some(&*lock.base_path);
    let levels: Vec<&str> = path::parents(&lock.base_path).chain(base).collect();
    let mut missing_from = levels.len();
    for (index, level) in levels.iter().enumerate().rev() {
        let level = level.to_string();
        let exists = lock
            .framework
            .call_on_session(session, |client| {
                let level = level.clone();
                async move { client.check_stat(&level).await }
            })
            .await?;
        if exists.is_some() {
            break;
        }
        missing_from = index;
    }
    for level in &levels[missing_from..] {
        let level = level.to_string();
        let acl = lock.framework.acl_for_path(&level);
        lock.framework
            .call_on_session(session, |client| {
                let (level, acl) = (level.clone(), acl.clone());
                async move {
                    let options = zk::CreateMode::Container.with_acls(zk::Acls::new(&acl));
                    match client.create(&level, &[], &options).await {
                        Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                        Err(err) => Err(err),
                    }
                }
            })
            .await?;
    }
    Ok(())
}

/// Our node holds the lock: the hold, unless it is already lost (the
/// session went, or the connection broke, while the answer was on its
/// way), in which case our node goes to the cleaner and we start over.
fn grant(lock: &LockInternals, session: &Session, ours: Ours) -> Result<Hold, Failure> {
    let epoch = lock.framework.loss_epoch();
    let node = AcquiredNode {
        path: ours.path,
        czxid: ours.created.czxid,
        made_path: ours.created.made_path,
        session_id: session.id(),
        generation: session.generation(),
        ephemeral: ours.ephemeral,
    };
    if let Some(loss) = trust::loss_of(&lock.framework, &node, epoch) {
        return Err(Failure::Restart(Error::lock_lost(node.path, loss)));
    }
    let hold = Hold::new(lock.framework.clone(), node, epoch);
    ours.guard.disarm();
    Ok(hold)
}

/// Deletes the node of a try that did not get the lock, before returning
/// (in the background if ZooKeeper cannot be reached in time).
async fn withdraw(lock: &LockInternals, session: &Session, guard: ContenderGuard, our_path: &str) {
    let node_path = our_path.to_owned();
    let delete = lock.framework.call_on_session(session, |client| {
        let node_path = node_path.clone();
        async move {
            match client.delete(&node_path, None).await {
                Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                Err(err) => Err(err),
            }
        }
    });
    match tokio::time::timeout(lock.framework.connection_timeout(), delete).await {
        Ok(Ok(())) => {
            guard.disarm();
            tracing::debug!(node = %our_path, "lock taken; our node is withdrawn");
        }
        _ => drop(guard),
    }
}

/// Watches the children list; returns a fresh listing at once if it
/// differs from `sorted` (something changed since the last look), or
/// `None` once a change has been notified.
pub(super) async fn wait_for_children_change(
    lock: &LockInternals,
    session: &Session,
    sorted: &[String],
) -> Result<Option<Vec<String>>, Failure> {
    let base = lock.base_path.to_string();
    let watched = lock
        .framework
        .call_on_session(session, |client| {
            let base = base.clone();
            async move { client.list_and_watch_children(&base).await }
        })
        .await;
    let (fresh, watcher) = match watched {
        Ok(found) => found,
        Err(Error::NoNode { .. }) => {
            return Err(Failure::Restart(Error::lock_lost(
                &*lock.base_path,
                LockLoss::NodeDeleted,
            )))
        }
        Err(err) => return Err(err.into()),
    };
    if lock.sort_children(fresh.clone()) != sorted {
        // Changed between our listing and the watch: decide again first.
        return Ok(Some(fresh));
    }
    tracing::debug!("waiting for a change among the participants");
    wait_event(lock, session, watcher).await?;
    Ok(None)
}

/// Waits until the node `watch_name` ahead of ours changes (at once if it
/// is already gone).
pub(super) async fn wait_for_node_ahead(
    lock: &LockInternals,
    session: &Session,
    watch_name: &str,
) -> Result<(), Failure> {
    let watch_path = path::join(&lock.base_path, watch_name);
    tracing::debug!(watch = %watch_path, "waiting for the node ahead");
    let watched = lock
        .framework
        .call_on_session(session, |client| {
            let watch_path = watch_path.clone();
            async move { client.get_and_watch_data(&watch_path).await }
        })
        .await;
    match watched {
        Ok((_, _, watcher)) => wait_event(lock, session, watcher).await,
        // Already gone: look again at once.
        Err(Error::NoNode { .. }) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Waits for one watch event, the session's end or the framework's close.
async fn wait_event(
    lock: &LockInternals,
    session: &Session,
    watcher: zk::OneshotWatcher,
) -> Result<(), Failure> {
    tokio::select! {
        event = watcher.changed() => {
            if event.event_type == zk::EventType::Session {
                if event.session_state.is_terminated() {
                    return Err(Error::from_zk(zk::Error::SessionExpired, event.session_state).into());
                }
            } else {
                Wakeups::add(&lock.framework);
                buggify::delay(Point::LateWatch).await;
            }
            Ok(())
        }
        _ = lock.framework.session_gone(session) => Err(Error::SessionExpired.into()),
        _ = lock.framework.closed() => Err(Error::Closed.into()),
    }
}

/// Lists the lock's children on `session`; a missing lock path means our
/// node cannot exist ([`Error::LockLost`]).
pub(super) async fn list_children_on(
    lock: &LockInternals,
    session: &Session,
) -> Result<Vec<String>> {
    let base = lock.base_path.to_string();
    let result = lock
        .framework
        .call_on_session(session, |client| {
            let base = base.clone();
            async move { client.list_children(&base).await }
        })
        .await;
    match result {
        Err(Error::NoNode { .. }) => Err(Error::lock_lost(&*lock.base_path, LockLoss::NodeDeleted)),
        other => other,
    }
}

/// How many times a waiting participant of a framework was woken by a watch
/// on the node ahead of it (see
/// [`Metrics::lock_wakeups`](crate::Metrics::lock_wakeups)); kept in the
/// framework's typed slot.
#[derive(Debug, Default)]
pub(crate) struct Wakeups(AtomicU64);

impl Wakeups {
    /// Counts one wake-up of a waiter of `framework`.
    fn add(framework: &crate::Framework) {
        framework
            .extension::<Wakeups>()
            .0
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The count so far.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
