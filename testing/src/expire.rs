//! Forced session expiry, the way Apache Curator's test utilities do it.
//!
//! ZooKeeper offers no client request that expires another client's session. The classic trick
//! is to open a second connection that presents the same session id and password: the server
//! moves the session to the new connection (dropping the original one), and closing the session
//! from there deletes its ephemeral nodes. When the original client reconnects, the server tells
//! it that its session is gone, and the client reports `SessionState::Expired`.
//!
//! Doing this with a second `zookeeper_client::Client` does not work reliably: that client only
//! finishes connecting after a further round trip, and the original client, which reconnects
//! immediately when the server drops it, takes the session back first, over and over. So the
//! second connection is made at the protocol level instead: a `Client` configured with the
//! session is pointed at a local listener that records its handshake (the only way to learn the
//! session password, which `zookeeper_client` keeps private), and that handshake is replayed to
//! the server followed at once by a `closeSession` request on the same connection. The server
//! handles both in order, so nothing can come in between.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{sleep, timeout_at, Instant};
use tracing::{debug, info};
use zookeeper_client::{Client, SessionState};

use crate::error::Error;
use crate::proxy::SessionGrant;

/// Default bound for [`expire_session`].
pub const DEFAULT_EXPIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Expires `client`'s session on the server at `connect_string`, waiting at most
/// [`DEFAULT_EXPIRE_TIMEOUT`]. See [`expire_session_within`].
///
/// # Errors
/// As [`expire_session_within`].
///
/// # Cancel safety
/// As [`expire_session_within`].
pub async fn expire_session(connect_string: &str, client: &Client) -> Result<(), Error> {
    expire_session_within(connect_string, client, DEFAULT_EXPIRE_TIMEOUT).await
}

/// Expires `client`'s session on the server at `connect_string`, waiting at most `limit`.
///
/// `connect_string` (`host:port[,host:port...][/chroot]`, chroot ignored) must reach the
/// ensemble the client uses; it may differ from the client's own connect string, e.g. the
/// server itself while the client goes through a [`FaultProxy`](crate::FaultProxy). The first
/// reachable server is used.
///
/// # Guarantees on success
///
/// When this returns `Ok(())`:
/// * the server has closed the session and confirmed it (or reported the session unknown), so
///   every ephemeral node the session owned is already deleted as seen by any other client;
/// * `client.state()` (and the state of every clone of `client`) is
///   `SessionState::Expired`, so all further operations through it fail with
///   `zookeeper_client::Error::SessionExpired`.
///
/// A session already expired returns `Ok(())` at once.
///
/// # Errors
///
/// * [`Error::Timeout`] when either step does not finish within `limit`, e.g. because the
///   client cannot reach the server to learn about the expiry (a partitioned client only
///   reports `Expired` once it reconnects or its own session timer runs out; the server side
///   session may be closed already in that case).
/// * [`Error::Client`] with `zookeeper_client::Error::ClientClosed` or
///   `AuthFailed` when the client is already in
///   another terminal state.
///
/// # Cancel safety
/// Dropping the future may leave the session either alive or already
/// closed on the server; the client then learns about it on its own.
pub async fn expire_session_within(
    connect_string: &str,
    client: &Client,
    limit: Duration,
) -> Result<(), Error> {
    let deadline = Instant::now() + limit;
    let mut state = client.state_watcher();
    match state.peek_state() {
        SessionState::Expired => return Ok(()),
        SessionState::Closed => return Err(zookeeper_client::Error::ClientClosed.into()),
        SessionState::AuthFailed => return Err(zookeeper_client::Error::AuthFailed.into()),
        _ => {}
    }
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
                _ => {}
            }
            state.changed().await;
        }
    })
    .await;
    match observed {
        Ok(Ok(())) => {
            info!(%session_id, "session expired");
            Ok(())
        }
        Ok(Err(err)) => Err(err.into()),
        Err(_) => Err(Error::Timeout {
            what: format!(
                "client of session {session_id} to observe its expiry (server side is closed)"
            ),
            timeout: limit,
        }),
    }
}

/// Closes a session on the server at `connect_string` as its owner would,
/// from the credentials a [`FaultProxy`](crate::FaultProxy) saw granted: the
/// way to expire the session of a client in another process. Unlike
/// [`expire_session_within`] it does not wait for the client to notice.
///
/// # Errors
/// [`Error::InvalidConfig`] for a connect string that does not parse;
/// [`Error::Timeout`] when the server did not confirm within `limit`.
///
/// # Cancel safety
/// Dropping the future may leave the session either alive or closed.
pub async fn close_granted_session(
    connect_string: &str,
    grant: &SessionGrant,
    limit: Duration,
) -> Result<(), Error> {
    let servers = parse_connect_string(connect_string)?;
    // ConnectRequest: protocolVersion i32, lastZxidSeen i64, timeOut i32,
    // sessionId i64, passwd (i32 length + bytes), readOnly bool.
    let password_len = i32::try_from(grant.password.len())
        .map_err(|_| Error::InvalidConfig("implausible session password".to_owned()))?;
    let mut body = Vec::with_capacity(33 + grant.password.len());
    body.extend_from_slice(&0i32.to_be_bytes());
    body.extend_from_slice(&0i64.to_be_bytes());
    body.extend_from_slice(&grant.timeout_ms.to_be_bytes());
    body.extend_from_slice(&grant.session_id.to_be_bytes());
    body.extend_from_slice(&password_len.to_be_bytes());
    body.extend_from_slice(&grant.password);
    body.push(0);
    let body_len = i32::try_from(body.len())
        .map_err(|_| Error::InvalidConfig("implausible session password".to_owned()))?;
    let mut handshake = body_len.to_be_bytes().to_vec();
    handshake.extend_from_slice(&body);
    if replay_until(&servers, &handshake, Instant::now() + limit).await {
        Ok(())
    } else {
        Err(Error::Timeout {
            what: format!("session {:#x} to close on the server", grant.session_id),
            timeout: limit,
        })
    }
}

/// Replays `handshake` + `closeSession` until the server confirms (`true`)
/// or `deadline` passes (`false`).
async fn replay_until(servers: &[String], handshake: &[u8], deadline: Instant) -> bool {
    loop {
        match timeout_at(deadline, replay_and_close(servers, handshake)).await {
            Ok(Ok(())) => return true,
            Ok(Err(err)) => debug!(%err, "closing the session did not complete; retrying"),
            Err(_) => return false,
        }
        if timeout_at(deadline, sleep(Duration::from_millis(50)))
            .await
            .is_err()
        {
            return false;
        }
    }
}

const CLOSE_SESSION_XID: i32 = 1;
const CLOSE_SESSION_OPCODE: i32 = -11;
/// Generous bound for the handshake and reply frames read here.
const MAX_FRAME: usize = 1024 * 1024;

/// Makes sure the server no longer knows the session, closing it if it still exists.
async fn close_session_on_server(
    connect_string: &str,
    client: &Client,
    deadline: Instant,
    limit: Duration,
) -> Result<(), Error> {
    let timeout = || Error::Timeout {
        what: format!("session {} to close on the server", client.session_id()),
        timeout: limit,
    };
    let servers = parse_connect_string(connect_string)?;
    let handshake = match timeout_at(deadline, capture_handshake(client)).await {
        Ok(handshake) => handshake?,
        Err(_) => return Err(timeout()),
    };
    if replay_until(&servers, &handshake, deadline).await {
        Ok(())
    } else {
        Err(timeout())
    }
}

/// Records the handshake frame a client configured with `client`'s session sends.
async fn capture_handshake(client: &Client) -> Result<Vec<u8>, Error> {
    let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .await
        .map_err(|err| Error::io("cannot bind handshake listener", err))?;
    let address = listener
        .local_addr()
        .map_err(|err| Error::io("cannot read handshake listener address", err))?;
    let connector = Client::connector()
        .with_session(client.session().clone())
        .with_session_timeout(client.session_timeout());
    let connect_string = address.to_string();
    let impostor = connector.connect(&connect_string);
    let capture = async {
        let (mut stream, _) = listener
            .accept()
            .await
            .map_err(|err| Error::io("cannot accept handshake", err))?;
        read_frame(&mut stream)
            .await
            .map_err(|err| Error::io("cannot read handshake", err))
    };
    tokio::select! {
        // Dropping the unfinished connect is harmless: no session task exists before it ends.
        result = impostor => match result {
            Err(err) => Err(err.into()),
            Ok(_) => Err(Error::io("capturing handshake", std::io::Error::other("client connected to the recorder"))),
        },
        frame = capture => {
            let frame = frame?;
            // Frame: length i32, then protocolVersion i32, lastZxidSeen i64, timeOut i32, sessionId i64, passwd, readOnly.
            let session_id = frame.get(20..28).and_then(|raw| raw.try_into().ok()).map(i64::from_be_bytes);
            if session_id != Some(client.session_id().0) {
                return Err(Error::io("capturing handshake", std::io::Error::other("unexpected handshake content")));
            }
            Ok(frame)
        },
    }
}

/// Sends the recorded handshake followed by `closeSession` on one connection. `Ok` when the
/// server either does not know the session or confirmed closing it.
async fn replay_and_close(servers: &[String], handshake: &[u8]) -> std::io::Result<()> {
    let mut stream = connect_any(servers).await?;
    let _ = stream.set_nodelay(true);
    let mut request = Vec::with_capacity(handshake.len() + 12);
    request.extend_from_slice(handshake);
    request.extend_from_slice(&8i32.to_be_bytes());
    request.extend_from_slice(&CLOSE_SESSION_XID.to_be_bytes());
    request.extend_from_slice(&CLOSE_SESSION_OPCODE.to_be_bytes());
    stream.write_all(&request).await?;
    // ConnectResponse body: protocolVersion i32, timeOut i32, sessionId i64, passwd, readOnly.
    let response = read_frame(&mut stream).await?;
    let session_id = response
        .get(12..20)
        .and_then(|raw| raw.try_into().ok())
        .map(i64::from_be_bytes);
    match session_id {
        None => return Err(std::io::Error::other("short connect response")),
        Some(0) => {
            debug!("server does not know the session (any more)");
            return Ok(());
        }
        Some(_) => {}
    }
    loop {
        // ReplyHeader: xid i32, zxid i64, err i32.
        let reply = read_frame(&mut stream).await?;
        let xid = reply
            .get(4..8)
            .and_then(|raw| raw.try_into().ok())
            .map(i32::from_be_bytes);
        let err = reply
            .get(16..20)
            .and_then(|raw| raw.try_into().ok())
            .map(i32::from_be_bytes);
        if xid == Some(CLOSE_SESSION_XID) {
            return match err {
                Some(0) => Ok(()),
                other => Err(std::io::Error::other(format!(
                    "closeSession answered with error {other:?}"
                ))),
            };
        }
    }
}

async fn connect_any(servers: &[String]) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::other("empty connect string");
    for server in servers {
        match TcpStream::connect(server.as_str()).await {
            Ok(stream) => return Ok(stream),
            Err(err) => last = err,
        }
    }
    Err(last)
}

/// Reads one length-prefixed frame, returned with its prefix.
async fn read_frame(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut prefix = [0u8; 4];
    stream.read_exact(&mut prefix).await?;
    let len = usize::try_from(i32::from_be_bytes(prefix))
        .ok()
        .filter(|len| *len <= MAX_FRAME)
        .ok_or_else(|| std::io::Error::other("implausible frame length"))?;
    let mut frame = vec![0u8; 4 + len];
    frame[..4].copy_from_slice(&prefix);
    stream.read_exact(&mut frame[4..]).await?;
    Ok(frame)
}

/// Splits `host:port[,host:port...][/chroot]` (optionally `tcp://`-prefixed) into addresses.
fn parse_connect_string(connect_string: &str) -> Result<Vec<String>, Error> {
    let unsupported =
        || Error::InvalidConfig(format!("unsupported connect string {connect_string:?}"));
    let mut servers = Vec::new();
    for host in connect_string.split(',') {
        let host = host.trim();
        let host = host.strip_prefix("tcp://").unwrap_or(host);
        if host.contains("://") {
            return Err(unsupported());
        }
        let host = host.split('/').next().unwrap_or_default();
        if !host.contains(':') {
            return Err(unsupported());
        }
        servers.push(host.to_owned());
    }
    Ok(servers)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn connect_strings() {
        assert_eq!(
            parse_connect_string("127.0.0.1:2181").unwrap(),
            ["127.0.0.1:2181"]
        );
        assert_eq!(
            parse_connect_string("a:1,tcp://b:2/chroot").unwrap(),
            ["a:1", "b:2"]
        );
        assert!(parse_connect_string("tcp+tls://a:1").is_err());
        assert!(parse_connect_string("").is_err());
    }
}
