//! The last stage: giving a hold back. The delete goes out before the next
//! task of this process gets its turn (so its create follows on the wire),
//! a hold lost meanwhile is answered at once, and a delete that cannot be
//! answered now is finished in the background.

use std::time::Duration;

use tracing::Instrument;
use zookeeper_client as zk;

use super::contender::ContenderGuard;
use super::engine::Engine;
use super::hold::Hold;
use super::internals::LockInternals;
use super::lock_path;
use crate::{Error, LockLoss, Result};

/// A release (see [`LockInternals::release`]) that returns before the
/// answer if `before_reply` (and the hold is not lost, and its node is
/// ephemeral).
pub(super) async fn release_as(
    lock: &LockInternals,
    hold: &Hold,
    before_reply: bool,
) -> Result<()> {
    let span = tracing::info_span!("lock.release", node = %hold.path());
    // However the release ends (or if it is dropped), the hold is over
    // for every clone of it afterwards: a fence taken before answers
    // `NotHeld` without sending anything, `lost()` completes.
    let _ended = EndOnDrop(hold);
    let result = async {
            // A task of this framework waits for the lock: the node passes
            // to it without a request, if the hold's run allows.
            if hold.pass_on() {
                return Ok(());
            }
            let lost = |loss: LockLoss| Error::lock_lost(hold.path(), loss);
            let last_share = hold.leave_share();
            lock.framework.check_open()?;
            if !last_share {
                tracing::info!("other acquires of this process still hold the shared node; it stays");
                return hold.check().map_err(lost);
            }
            let loss = hold.check().err();
            let Some(session) = hold.session() else {
                tracing::info!("the node died with its session; nothing to delete");
                return Err(lost(loss.unwrap_or(LockLoss::SessionReplaced)));
            };
            let guard = ContenderGuard::node(&lock.framework, hold.path());
            if let Some(loss @ LockLoss::BoundPassed(_)) = loss {
                // The bound's end deletes the node in the background: the
                // release of a hold it ended answers at once, and leaves
                // the node to the cleaner too (the hold may have been found
                // lost before its enforcing task ran).
                drop(guard);
                return Err(lost(loss));
            }
            if let Some(loss) = loss {
                let connected = lock
                    .framework
                    .state()
                    .is_some_and(crate::ConnectionState::is_connected);
                if !connected {
                    tracing::info!(%loss, "lost hold released while disconnected; deleting in the background");
                    drop(guard);
                    return Err(lost(loss));
                }
            }
            let node_path = hold.path().to_owned();
            let framework = lock.framework.clone();
            let limit = lock.framework.connection_timeout();
            // A lock path our acquire made goes with the node, if nothing
            // else is under it (see `FrameworkBuilder::remove_lock_paths`).
            let remove_path =
                hold.node().made_path && Engine::options(&lock.framework).remove_lock_paths;
            let with_path = remove_path.then(|| lock.base_path.clone());
            let mut delete = Box::pin(async move {
                let delete = framework.call_on_session(&session, |client| {
                    let node_path = node_path.clone();
                    let with_path = with_path.clone();
                    let framework = framework.clone();
                    async move {
                        if let Some(base_path) = with_path {
                            return lock_path::delete_with_node(&framework, &base_path, &client, &node_path).await;
                        }
                        match client.delete(&node_path, None).await {
                            Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                            Err(err) => Err(err),
                        }
                    }
                });
                tokio::time::timeout(limit, delete).await
            });
            // The first poll puts the delete on the wire; only then does the
            // next task of this process get its turn, so its create follows
            // our delete on the session and finds the lock free (one round
            // trip per local hand-off).
            let first = futures::poll!(delete.as_mut());
            hold.give_turn_back();
            // Only an ephemeral node's hold can be lost while its delete is
            // on the way (a persistent one ends with its deletion alone).
            let trusted = loss.is_none() && hold.node().is_ephemeral();
            let deleted = match first {
                std::task::Poll::Ready(deleted) => deleted,
                std::task::Poll::Pending if before_reply && trusted => {
                    // See `FrameworkBuilder::release_before_reply`.
                    settle_in_background(lock, delete, guard, limit);
                    return Ok(());
                }
                std::task::Poll::Pending if trusted => {
                    tokio::select! {
                        deleted = &mut delete => deleted,
                        // Lost while the answer was awaited (the link broke,
                        // say): the caller hears it now, as it would from a
                        // release begun after the loss, and the node goes
                        // with the session or by the delete still on its way.
                        loss = hold.loss_without_node_watch() => {
                            tracing::info!(%loss, "hold lost with its release in flight; the delete goes on in the background");
                            settle_in_background(lock, delete, guard, limit);
                            return Err(lost(loss));
                        }
                    }
                }
                std::task::Poll::Pending => delete.await,
            };
            let outcome = settle_delete(deleted, guard, limit);
            match loss {
                Some(loss) => outcome.and(Err(lost(loss))),
                None => outcome,
            }
        }
        .instrument(span)
        .await;
    // Whatever happened, the hold no longer occupies a turn.
    hold.give_turn_back();
    result
}

/// Ends a hold when dropped (see [`Hold::end`]).
struct EndOnDrop<'a>(&'a Hold);

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// Lets a release's delete finish without the caller: its answer is
/// settled by a task of its own, and counts as background work (see
/// [`Framework::wait_for_background_cleanup`](crate::Framework::wait_for_background_cleanup))
/// until then.
fn settle_in_background<F>(lock: &LockInternals, delete: F, guard: ContenderGuard, limit: Duration)
where
    F: std::future::Future<Output = std::result::Result<Result<()>, tokio::time::error::Elapsed>>
        + Send
        + 'static,
{
    let pending = lock.framework.background_work();
    let settling = async move {
        match settle_delete(delete.await, guard, limit) {
            Ok(()) => {}
            // The node goes with the session being closed.
            Err(Error::Closed) => tracing::debug!("framework closed during the release"),
            Err(err) => tracing::warn!(%err, "the release's delete failed"),
        }
        drop(pending);
    };
    tokio::spawn(settling.in_current_span());
}

/// What a release's delete came to: `Ok` once the node is gone, or handed
/// to the background cleaner (with `guard`) when ZooKeeper could not be
/// reached within `limit`.
fn settle_delete(
    deleted: std::result::Result<Result<()>, tokio::time::error::Elapsed>,
    guard: ContenderGuard,
    limit: Duration,
) -> Result<()> {
    match deleted {
        Ok(Ok(())) => {
            guard.disarm();
            tracing::info!("lock released");
            Ok(())
        }
        Ok(Err(Error::Closed)) => {
            guard.disarm();
            Err(Error::Closed)
        }
        Ok(Err(err)) if err.is_transient() => {
            tracing::warn!(%err, "release could not reach ZooKeeper; deleting in the background");
            drop(guard);
            Ok(())
        }
        Ok(Err(err)) => {
            guard.disarm();
            Err(err)
        }
        Err(_) => {
            tracing::warn!(?limit, "release timed out; deleting in the background");
            drop(guard);
            Ok(())
        }
    }
}
