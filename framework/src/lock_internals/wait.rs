//! Stage two of an acquire: deciding from the sorted participants whether
//! we hold the lock, and otherwise waiting for the one node the driver
//! names (or for the children to change), until held or given up; an
//! attempt whose node (or session) is gone starts over under the retry
//! policy.

use std::sync::atomic::{AtomicU64, Ordering};

use zookeeper_client as zk;

use super::create::{self, Ours};
use super::guard::ContenderGuard;
use super::hold::Hold;
use super::internals::LockInternals;
use super::node::AcquiredNode;
use super::request::Acquire;
use super::revocation::Revocation;
use super::trust;
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
pub(super) async fn attempt(
    lock: &LockInternals,
    session: &Session,
    data: &[u8],
    revocation: Option<&Revocation>,
    try_only: bool,
) -> Result<Option<Hold>, Failure> {
    let mut ours = create::create_ours(lock, session, data, revocation).await?;
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
            None => create::list_children_on(lock, session).await?,
        };
    }
}

/// Our node holds the lock: the hold, unless it is already lost (the
/// session went, or the connection broke, while the answer was on its
/// way), in which case our node goes to the cleaner and we start over.
fn grant(lock: &LockInternals, session: &Session, ours: Ours) -> Result<Hold, Failure> {
    let epoch = lock.framework.loss_epoch();
    let node = AcquiredNode {
        path: ours.path,
        czxid: ours.created.czxid,
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

/// Waits for one watch event, the session's end or the framework's close.
pub(super) async fn wait_event(
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
            }
            Ok(())
        }
        _ = lock.framework.session_gone(session) => Err(Error::SessionExpired.into()),
        _ = lock.framework.closed() => Err(Error::Closed.into()),
    }
}

/// Deletes the node of a try that did not get the lock, before returning
/// (in the background if ZooKeeper cannot be reached in time).
pub(super) async fn withdraw(
    lock: &LockInternals,
    session: &Session,
    guard: ContenderGuard,
    our_path: &str,
) {
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

/// Takes up the node of `lost` again, in its place in the queue, on the
/// session that created it (see [`LockInternals::resume`]).
pub(super) async fn resume(lock: &LockInternals, lost: &Hold) -> Result<Option<Hold>> {
    match lost.check() {
        Ok(()) => {
            return Err(Error::InvalidArgument(
                "the hold is not lost: there is nothing to resume".into(),
            ))
        }
        // Lost to the connection: the node may well be there still.
        Err(LockLoss::ConnectionState(_) | LockLoss::Stale) => {}
        // Given back, deleted, its session gone, the framework closed.
        Err(LockLoss::Closed) => return Err(Error::Closed),
        Err(_) => return Ok(None),
    }
    let node = lost.node();
    if path::split(node.path()).0 != &*lock.base_path || !node.is_ephemeral() {
        return Err(Error::InvalidArgument(format!(
            "{} is not an ephemeral participant node of {}",
            node.path(),
            lock.base_path
        )));
    }
    loop {
        lock.framework.check_open()?;
        let Some(session) = lost.session() else {
            tracing::info!(node = %node.path(), "the node's session is gone; nothing to resume");
            return Ok(None);
        };
        if !connected(lock, &session).await? {
            return Ok(None);
        }
        // Read before the look: an error state from here on, and the new
        // hold is lost as soon as it is made.
        let epoch = lock.framework.loss_epoch();
        let failure = match create::list_children_on(lock, &session).await {
            Ok(children) => {
                let sorted = lock.sort_children(children);
                if !sorted.iter().any(|child| child == node.name()) {
                    tracing::info!(node = %node.path(), "the node is gone; nothing to resume");
                    return Ok(None);
                }
                lock.driver
                    .check_children(&lock.base_path, &sorted, &lock.lock_name)?;
                let decision = lock
                    .driver
                    .gets_the_lock(&sorted, node.name(), lock.max_leases)?;
                if decision.holds_lock {
                    if trust::loss_of(&lock.framework, node, epoch).is_some() {
                        // Trouble again while we looked: wait for the
                        // connection once more.
                        continue;
                    }
                    let hold = lost.resumed(epoch);
                    tracing::info!(node = %hold.path(), token = %hold.fencing_token(), "node taken up again after a suspension");
                    return Ok(Some(hold));
                }
                tracing::debug!(node = %node.path(), "resumed node not first; waiting in its place");
                let waited = match decision.path_to_watch {
                    Some(watch_name) if !decision.watch_children => {
                        drop(sorted);
                        wait_for_node_ahead(lock, &session, &watch_name).await
                    }
                    _ => wait_for_children_change(lock, &session, &sorted)
                        .await
                        .map(|_| ()),
                };
                match waited {
                    Ok(()) => continue,
                    Err(failure) => failure,
                }
            }
            Err(err) => Failure::from(err),
        };
        match failure {
            Failure::Restart(err) => {
                tracing::info!(node = %node.path(), %err, "the node's session or node is gone; nothing to resume");
                return Ok(None);
            }
            Failure::Fail(err) if err.is_transient() => {
                tracing::debug!(node = %node.path(), %err, "connection trouble while resuming; waiting for it to pass");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Failure::Fail(err) => return Err(err),
        }
    }
}

/// Waits until the connection of `session` is out of every error state:
/// `false` if the session ends first.
async fn connected(lock: &LockInternals, session: &Session) -> Result<bool> {
    let framework = &lock.framework;
    let mut states = framework.state_watcher();
    let gone = framework.session_gone(session);
    let closed = framework.closed();
    tokio::pin!(gone, closed);
    loop {
        framework.check_open()?;
        let state = states.get_and_update();
        let current = framework.current_session().map(|s| s.generation());
        if current != Some(session.generation()) {
            return Ok(false);
        }
        let policy = framework.error_policy();
        if state.is_some_and(|state| !policy.is_error_state(state))
            && session.client().state() == zk::SessionState::SyncConnected
        {
            return Ok(true);
        }
        tokio::select! {
            _ = states.changed() => {}
            () = &mut gone => return Ok(false),
            () = &mut closed => return Err(Error::Closed),
            // The client may be connected a moment before the framework's
            // state follows, and the other way round: look again shortly.
            () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
        }
    }
}
