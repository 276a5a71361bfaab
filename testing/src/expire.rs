//! Forced session expiry, the way Apache Curator's test utilities do it.
//!
//! ZooKeeper offers no client request that expires another client's session. The classic trick
//! is to open a second connection that presents the same session id and password: the server
//! moves the session to the new connection and drops the original one. Closing the second
//! connection then closes the session on the server, which deletes its ephemeral nodes. When
//! the original client reconnects, the server tells it that its session is gone, and the client
//! reports [`SessionState::Expired`].

use std::time::Duration;

use tokio::time::{sleep, timeout_at, Instant};
use tracing::{debug, info};
use zookeeper_client::{Client, SessionState};

use crate::error::Error;

/// Default bound for [`expire_session`].
pub const DEFAULT_EXPIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Expires `client`'s session on the server at `connect_string`, waiting at most
/// [`DEFAULT_EXPIRE_TIMEOUT`]. See [`expire_session_within`].
pub async fn expire_session(connect_string: &str, client: &Client) -> Result<(), Error> {
    expire_session_within(connect_string, client, DEFAULT_EXPIRE_TIMEOUT).await
}

/// Expires `client`'s session on the server at `connect_string`, waiting at most `limit`.
///
/// `connect_string` must reach the same ensemble the client uses; it may differ from the
/// client's own connect string (for example the server directly while the client goes through
/// a [`FaultProxy`](crate::FaultProxy)).
///
/// # Guarantees on success
///
/// When this returns `Ok(())`:
/// * the server has closed the session, so every ephemeral node it owned is deleted and
///   watchers of those nodes have been triggered on the server;
/// * `client.state()` (and the state of every clone of `client`) is
///   [`SessionState::Expired`], so all further operations through it fail with
///   [`zookeeper_client::Error::SessionExpired`].
///
/// A session already expired returns `Ok(())` at once.
///
/// # Errors
///
/// * [`Error::Timeout`] when either step does not finish within `limit`, e.g. because the
///   client cannot reach the server to learn about the expiry (a partitioned client only
///   reports `Expired` once it reconnects or its own session timer runs out; the server side
///   session may be closed already in that case).
/// * [`Error::Client`] with [`ClientClosed`](zookeeper_client::Error::ClientClosed) or
///   [`AuthFailed`](zookeeper_client::Error::AuthFailed) when the client is already in
///   another terminal state.
pub async fn expire_session_within(connect_string: &str, client: &Client, limit: Duration) -> Result<(), Error> {
    let deadline = Instant::now() + limit;
    let mut state = client.state_watcher();
    match state.peek_state() {
        SessionState::Expired => return Ok(()),
        SessionState::Closed => return Err(zookeeper_client::Error::ClientClosed.into()),
        SessionState::AuthFailed => return Err(zookeeper_client::Error::AuthFailed.into()),
        _ => {},
    }
    let session = client.session().clone();
    let session_id = client.session_id();
    debug!(%session_id, "expiring session");

    close_session_on_server(connect_string, client, deadline, limit).await?;
    debug!(%session_id, "session closed on the server; waiting for the client to notice");

    let observed = timeout_at(deadline, async {
        loop {
            match state.peek_state() {
                SessionState::Expired => return Ok(()),
                SessionState::Closed => return Err(zookeeper_client::Error::ClientClosed),
                SessionState::AuthFailed => return Err(zookeeper_client::Error::AuthFailed),
                _ => {},
            }
            state.changed().await;
        }
    })
    .await;
    match observed {
        Ok(Ok(())) => {
            info!(%session_id, "session expired");
            drop(session);
            Ok(())
        },
        Ok(Err(err)) => Err(err.into()),
        Err(_) => Err(Error::Timeout {
            what: format!("client of session {session_id} to observe its expiry (server side is closed)"),
            timeout: limit,
        }),
    }
}

/// Attaches a second client to the session and closes it, retrying transient failures until
/// the server has certainly forgotten the session.
async fn close_session_on_server(
    connect_string: &str,
    client: &Client,
    deadline: Instant,
    limit: Duration,
) -> Result<(), Error> {
    let timeout = || Error::Timeout { what: format!("session {} to close on the server", client.session_id()), timeout: limit };
    loop {
        let connect = Client::connector()
            .with_session(client.session().clone())
            .with_session_timeout(client.session_timeout())
            .connect(connect_string);
        match timeout_at(deadline, connect).await {
            Err(_) => return Err(timeout()),
            // The server does not know the session (any more): nothing left to close.
            Ok(Err(zookeeper_client::Error::SessionExpired)) => return Ok(()),
            Ok(Err(err)) => {
                debug!(%err, "could not attach to the session yet; retrying");
                if timeout_at(deadline, sleep(Duration::from_millis(50))).await.is_err() {
                    return Err(timeout());
                }
            },
            Ok(Ok(impostor)) => {
                // Dropping the last handle of a (non-detached) client makes its session task
                // send CloseSession and wait for the answer, reconnecting if needed. The task
                // ends in `Closed` once the server answered, or `Expired` if the server had
                // already dropped the session; either way the session is gone server side.
                let mut closing = impostor.state_watcher();
                drop(impostor);
                let closed = timeout_at(deadline, async {
                    loop {
                        let state = closing.peek_state();
                        if matches!(state, SessionState::Closed | SessionState::Expired | SessionState::AuthFailed) {
                            return state;
                        }
                        closing.changed().await;
                    }
                })
                .await;
                return match closed {
                    Ok(SessionState::AuthFailed) => Err(zookeeper_client::Error::AuthFailed.into()),
                    Ok(_) => Ok(()),
                    Err(_) => Err(timeout()),
                };
            },
        }
    }
}
