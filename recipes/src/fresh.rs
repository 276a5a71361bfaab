//! Reads as of now: a `sync` before reading, for the reads a user acts on.
//!
//! # What "current" means
//!
//! A ZooKeeper ensemble answers every read from the server the session is
//! connected to. A follower applies the leader's writes a little after the
//! leader commits them, and a follower cut off from the leader keeps
//! answering for up to `syncLimit` ticks before it drops its clients. So a
//! plain read is **as of the session's server**: never older than what this
//! session saw or wrote before (ZooKeeper keeps that per session), but
//! possibly older than a write another client already saw acknowledged.
//!
//! A read made after [`synced`] is **as of the sync**: the server first
//! catches up with every write the leader had committed when it received
//! the sync, so the read shows at least that. That is what a read needs
//! when its answer is acted on or shown to someone as the truth: who leads
//! before an operator revokes it, which holders `zk-curator locks` lists.
//! It costs one round trip more, and on a follower that cannot reach the
//! leader it waits instead of answering from the past: until the follower
//! catches up, or drops its clients after `syncLimit` and the session
//! moves to a server that answers (or the retry policy gives up).
//!
//! Each query, and what its answer is as of:
//!
//! | Query | As of |
//! |---|---|
//! | [`LeaderElection::participants`](crate::LeaderElection::participants), [`LeaderElection::leader`](crate::LeaderElection::leader), [`LeaderObserver::leader`](crate::LeaderObserver::leader), [`lock_participants`](crate::layout::lock_participants) | the server |
//! | [`LeaderElection::synced_participants`](crate::LeaderElection::synced_participants), [`LeaderElection::synced_leader`](crate::LeaderElection::synced_leader), [`LeaderObserver::revoke_leader`](crate::LeaderObserver::revoke_leader) (the leader it revokes), `zk-curator locks`, `leader` and `revoke` | the sync |
//! | [`LeaderObserver::changes`](crate::LeaderObserver::changes), `zk-curator leader --watch` and `locks --watch` | the server, after a sync at the start of each session: never older than a report already made |
//!
//! The cheap forms cost one round trip less; use them where an answer a
//! little late does no harm (a dashboard, a log line).

use std::future::Future;

use zk_curator_framework::{Error, Framework, Result, Session};

/// How many sessions a synced read tries before it gives up: the read runs
/// again only if the session changed between its sync and its answer.
const SESSIONS: usize = 3;

/// Runs `read` as of now: syncs the session's server with the ensemble's
/// leader for `path` first, then reads, and checks that both happened on
/// one session (a read on a session built after the sync, perhaps on
/// another server, is made again behind a new sync). See the module's
/// documentation for what it guarantees.
///
/// `read` must make its requests through `framework` (any of its methods,
/// or a recipe on it).
///
/// # Errors
/// What the sync or `read` return ([`Error::Closed`], errors retrying could
/// not overcome, [`Error::ConnectionLoss`] from a follower that could not
/// reach the leader for the sync); [`Error::SessionExpired`] if the session
/// changed between the sync and the read three times in a row.
///
/// # Cancel safety
/// Cancel safe if `read` is: the sync changes nothing.
pub async fn synced<T, F, Fut>(framework: &Framework, path: &str, mut read: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    for _ in 0..SESSIONS {
        let session = framework.session().await?;
        sync_server(framework, &session, path).await?;
        let value = read().await?;
        if framework
            .current_session()
            .is_some_and(|now| now.generation() == session.generation())
        {
            return Ok(value);
        }
        tracing::debug!(
            path,
            "the session changed between the sync and the read; again"
        );
    }
    Err(Error::SessionExpired)
}

/// Syncs `session`'s server with the ensemble's leader for `path`: once it
/// answers, that server has applied every write the leader had committed
/// when the sync reached it. Fails as a request on `session` does (it is
/// not retried on another session).
pub(crate) async fn sync_server(
    framework: &Framework,
    session: &Session,
    path: &str,
) -> Result<()> {
    framework
        .call_on_session(session, |client| {
            let path = path.to_owned();
            async move { client.sync(&path).await }
        })
        .await
}
