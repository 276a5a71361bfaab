//! Taking up a lost hold's node again ([`LockInternals::resume`]): in its
//! place in the queue, on the session that created it, once the connection
//! is back. It lists and waits as an acquire's wait loop does, with that
//! loop's steps (in [`acquire`](super::acquire)).

use zookeeper_client as zk;

use super::acquire::{list_children_on, wait_for_children_change, wait_for_node_ahead, Failure};
use super::hold::Hold;
use super::internals::LockInternals;
use super::trust;
use crate::{path, Error, LockLoss, Result, Session};

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
        let failure = match list_children_on(lock, &session).await {
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
