//! One client connection: the TLS handshake on a secure port, framing, the session
//! handshake, requests applied under the state lock, four-letter words, and the backpressure
//! that keeps a connection's memory bounded. Everything after the TLS handshake is one code
//! path over any byte stream, so a TLS connection behaves as a plain one, and so does a stream
//! the server did not accept itself ([`EmbeddedServer::serve_connection`]). Every connection,
//! however it arrived, is registered by [`admit`].
//!
//! [`EmbeddedServer::serve_connection`]: crate::EmbeddedServer::serve_connection

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tracing::{debug, info};

use crate::codec::{next_frame, op, ConnectRequest, Framed, Reader, Request, MAX_PACKET};
use crate::ensemble::member::{self, Completed, Handshake, Wait};
use crate::ensemble::replication::Seat;
use crate::faults::LostReply;
use crate::outbox::{outbox, Outbox, OutboxReceiver};
use crate::shared::Shared;
use crate::state::{Limits, Outbound, Reply, State};
use crate::watch::ConnId;

/// How long a connection may stay without a session (ZooKeeper's default).
const SESSIONLESS_TIMEOUT: Duration = Duration::from_secs(10);

/// The queue size, for a connection whose outstanding-bytes limit is `limit`, past which it is
/// closed: only other sessions' notifications can push it there, since its own requests are
/// not read beyond `limit` (and one reply is at most about `jute.maxbuffer`).
fn hard_cap(limit: usize) -> usize {
    limit.saturating_mul(2).saturating_add(4 * MAX_PACKET)
}

/// Registers a connection from `peer` and spawns, on `runtime`, the task that serves it:
/// `serve`, given the connection's id, makes that task's work. This is where a connection is
/// counted against `max_connections` and becomes one that `drop_connections` closes, for the
/// accept loops and for streams handed over by the caller alike.
///
/// A connection over the limit, or arriving while the server is stopped, is refused: `serve`
/// is dropped uncalled, and with it the stream it owns, which closes it. Returns whether the
/// connection is served.
pub(crate) fn admit<F, Fut>(
    shared: &Arc<Shared>,
    runtime: &Handle,
    peer: SocketAddr,
    tls: bool,
    serve: F,
) -> bool
where
    F: FnOnce(ConnId) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let id = shared.next_conn.fetch_add(1, Ordering::SeqCst);
    let mut connections = shared.connections();
    // Read under the connections lock: `stop` sets the flag before it takes the lock to drop
    // every connection, so a connection is either refused here or dropped there.
    if shared.stopped.load(Ordering::SeqCst) {
        debug!(id, %peer, "embedded server stopped; closing the new connection");
        return false;
    }
    let max = shared.settings.max_connections;
    if connections.len() >= max {
        debug!(id, %peer, max, "too many connections; closing the new one");
        return false;
    }
    debug!(id, %peer, tls, "embedded server accepted connection");
    let work = serve(id);
    let guarded = shared.clone();
    let task = runtime.spawn(async move {
        // Unregisters the connection however the task ends: close, failure, abort. Made on
        // the task's first poll, so a task dropped unpolled never runs it (its `Drop` takes
        // the connections lock, which is held here until the task is recorded).
        let _guard = ConnGuard {
            id,
            shared: guarded,
        };
        work.await;
    });
    connections.insert(id, task.abort_handle());
    true
}

/// Unregisters a connection when its task ends or is aborted.
struct ConnGuard {
    id: ConnId,
    shared: Arc<Shared>,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.shared.connections().remove(&self.id);
        self.shared.state().unregister_conn(self.id);
    }
}

/// How a listener's connections carry the protocol.
#[derive(Clone, Debug)]
pub(crate) enum Transport {
    /// The protocol straight on the TCP stream (ZooKeeper's `clientPort`).
    Plain,
    /// The protocol inside TLS (ZooKeeper's `secureClientPort`).
    #[cfg(feature = "tls")]
    Tls(crate::tls::Acceptor),
}

impl Transport {
    /// Whether connections go through a TLS handshake first.
    pub(crate) fn is_tls(&self) -> bool {
        match self {
            Transport::Plain => false,
            #[cfg(feature = "tls")]
            Transport::Tls(_) => true,
        }
    }
}

/// Serves one connection accepted on one of the server's ports until it closes (in the task
/// [`admit`] spawns): the TLS handshake first when `transport` asks for one (here, in the
/// connection's own task, so that a slow or failing handshake holds up no other connection),
/// then the protocol.
pub(crate) async fn run_connection(
    id: ConnId,
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    transport: Transport,
) {
    let _ = stream.set_nodelay(true);
    match transport {
        Transport::Plain => serve_connection(id, stream, peer, &shared).await,
        #[cfg(feature = "tls")]
        Transport::Tls(acceptor) => {
            // A stalled server answers no handshake either.
            shared.faults.wait_unstalled().await;
            if let Some(stream) = acceptor.handshake(id, stream, peer).await {
                serve_connection(id, stream, peer, &shared).await;
            }
        }
    }
}

/// The protocol on one connection, over any byte stream (plain TCP, TLS, or whatever a caller
/// of `EmbeddedServer::serve_connection` hands over): reads and writes never overlap (a write
/// happens in a branch's handler, after the read future is dropped), so the stream is used
/// whole, unsplit.
pub(crate) async fn serve_connection<S>(
    id: ConnId,
    mut stream: S,
    peer: SocketAddr,
    shared: &Shared,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let limit = shared.settings.max_outstanding_bytes;
    let (tx, mut rx) = outbox(hard_cap(limit));
    shared.state().register_conn(id, peer, tx.clone());
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut established = false;
    let mut closing = false;
    // On an ensemble's member: what the connection waits for before it takes its next
    // request (a write applied here, a sync caught up, a new session made).
    let mut waiting: Option<Wait> = None;
    // Like ZooKeeper's `sessionlessCnxnTimeout`: a connection must establish a session soon.
    let handshake_deadline = tokio::time::Instant::now() + SESSIONLESS_TIMEOUT;
    loop {
        shared.faults.wait_unstalled().await;
        // Backpressure: requests are taken (from what was read, and from the socket) only
        // while the replies not yet written stay within the limit.
        while !closing && waiting.is_none() && !shared.faults.is_stalled() && tx.queued() <= limit {
            let frame = match next_frame(&mut pending, MAX_PACKET, !established) {
                Framed::Incomplete => break,
                Framed::FourLetter(word) => {
                    let answer = {
                        let state = shared.state();
                        crate::admin::answer(&word, &state, &shared.admin())
                    };
                    match answer {
                        Some(answer) => {
                            let _ = stream.write_all(answer.as_bytes()).await;
                            let _ = stream.shutdown().await;
                        }
                        None => debug!(id, "unknown four-letter word; closing connection"),
                    }
                    return;
                }
                Framed::TooLong(len) => {
                    debug!(id, len, "frame length out of bounds; closing connection");
                    return;
                }
                Framed::Frame(frame) => frame,
            };
            if established {
                match shared.seat.get() {
                    None => closing = handle_request(id, frame.body(), shared, &tx),
                    Some(seat) => {
                        (closing, waiting) = member_request(seat, id, frame.body(), shared, &tx)
                    }
                }
            } else {
                let Ok(request) = ConnectRequest::decode(frame.body()) else {
                    debug!(id, "malformed handshake; closing connection");
                    return;
                };
                if let Some(seat) = shared.seat.get() {
                    match member::handshake(seat, shared, id, &request, &tx) {
                        Handshake::Refuse => return,
                        Handshake::Answered(true) => established = true,
                        Handshake::Answered(false) => closing = true,
                        Handshake::Wait(wait) => waiting = Some(wait),
                    }
                    continue;
                }
                // The answer is queued under the state lock, like every reply (see
                // `handle_request`): nothing about this connection can be queued before it.
                let valid = {
                    let mut state = shared.state();
                    match state.handshake(id, &request, tokio::time::Instant::now()) {
                        None => None,
                        Some((frame, valid)) => {
                            tx.frame(frame);
                            if !valid {
                                tx.close();
                            }
                            Some(valid)
                        }
                    }
                };
                match valid {
                    None => return,
                    Some(true) => established = true,
                    Some(false) => closing = true,
                }
            }
        }
        let reading = !closing && tx.queued() <= limit;
        tokio::select! {
            biased;
            out = rx.recv() => {
                if !write_queued(out, &mut rx, &mut stream, shared).await {
                    return;
                }
            }
            told = member::finished(&mut waiting), if waiting.is_some() => {
                if let Some(wait) = waiting.take() {
                    match member::complete(wait, told, id, shared, &tx) {
                        Completed::Next => {}
                        Completed::Established => established = true,
                        Completed::Close => closing = true,
                        Completed::Wait(wait) => waiting = Some(wait),
                    }
                }
            }
            read = stream.read(&mut chunk), if reading => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&chunk[..n]),
            },
            () = tokio::time::sleep_until(handshake_deadline), if !established => {
                debug!(id, "no handshake in time; closing connection");
                return;
            }
        }
    }
}

/// Writes `first` and whatever else is queued now, in one batch of at most a few frames;
/// returns false once the connection is to be closed.
async fn write_queued<W: AsyncWrite + Unpin>(
    first: Option<Outbound>,
    rx: &mut OutboxReceiver,
    writer: &mut W,
    shared: &Shared,
) -> bool {
    /// A batch stops growing past this size, so that a long queue is not copied at once.
    const BATCH: usize = 256 * 1024;
    let mut batch = Vec::new();
    let mut close = false;
    let mut next = first;
    loop {
        match next {
            Some(Outbound::Frame(bytes)) => {
                if batch.is_empty() {
                    batch = bytes;
                } else {
                    batch.extend_from_slice(&bytes);
                }
            }
            Some(Outbound::Close) | None => {
                close = true;
                break;
            }
        }
        if batch.len() >= BATCH {
            break;
        }
        match rx.try_recv() {
            Some(more) => next = Some(more),
            None => break,
        }
    }
    if !batch.is_empty() {
        shared.faults.wait_unstalled().await;
        // A client that lets its notifications pile up past the hard cap is not waited for.
        // The flush matters for TLS, which may keep the end of a write in its buffer; on TCP
        // it does nothing.
        // Biased, like every `select!` here: the branches are polled in a fixed order, not in
        // one drawn from tokio's own generator.
        let written = tokio::select! {
            biased;
            written = async {
                writer.write_all(&batch).await?;
                writer.flush().await
            } => written,
            () = rx.overflowed() => return false,
        };
        rx.written(batch.len());
        if written.is_err() {
            return false;
        }
    }
    if close {
        let _ = writer.shutdown().await;
        return false;
    }
    true
}

/// Handles one request frame on an ensemble's member: returns whether the connection is
/// closing, and what it waits for before its next request.
fn member_request(
    seat: &Seat,
    id: ConnId,
    body: &[u8],
    shared: &Shared,
    tx: &Outbox,
) -> (bool, Option<Wait>) {
    let mut header = Reader::new(body);
    let (Ok(xid), Ok(opcode)) = (header.i32(), header.i32()) else {
        debug!(id, "request shorter than its header; closing connection");
        tx.close();
        return (true, None);
    };
    let request = Request::decode(opcode, body.get(8..).unwrap_or_default());
    member::request(seat, shared, id, xid, opcode, request, tx)
}

/// Handles one request frame; returns whether the connection is closing.
fn handle_request(id: ConnId, body: &[u8], shared: &Shared, tx: &Outbox) -> bool {
    let mut header = Reader::new(body);
    let (Ok(xid), Ok(opcode)) = (header.i32(), header.i32()) else {
        debug!(id, "request shorter than its header; closing connection");
        tx.close();
        return true;
    };
    let request = Request::decode(opcode, body.get(8..).unwrap_or_default());
    let armed = if opcode == op::PING || opcode == op::AUTH {
        None
    } else {
        let path = request.as_ref().ok().and_then(Request::path);
        shared.faults.take_if_matches(opcode, path)
    };
    let path = armed.as_ref().and_then(|_| {
        request
            .as_ref()
            .ok()
            .and_then(Request::path)
            .map(str::to_owned)
    });
    // The reply is queued on the connection while the state lock is still held. Requests are
    // applied one at a time under that lock, and a write queues its watch notifications (on
    // the watchers' connections) under it too; queueing this reply only after releasing the
    // lock would let another session's write slip in between and queue its notification
    // ahead of the reply. A read that set a watch would then have its event delivered before
    // its reply: clients arm a watcher only when the reply arrives, drop the early event, and
    // wait forever (a lock waiter's lost wake-up). Holding the lock keeps each connection's
    // queue in the global order: the reply to a request, then any event from a later write.
    let mut state = shared.state();
    let reply = state.request(id, xid, opcode, request, tokio::time::Instant::now());
    if let Some(armed) = armed {
        let frame = match &reply {
            Reply::Send(frame) | Reply::SendAndClose(frame) => frame.as_slice(),
            Reply::Close | Reply::Nothing => &[],
        };
        let mut r = Reader::new(frame.get(8..).unwrap_or_default());
        let zxid = r.i64().unwrap_or(0);
        let error_code = r.i32().unwrap_or(0);
        info!(
            id,
            xid,
            opcode,
            ?path,
            error_code,
            "embedded server lost a reply; closing connection"
        );
        armed.fired.send_replace(Some(LostReply {
            xid,
            opcode,
            path,
            zxid,
            error_code,
        }));
        tx.close();
        return true;
    }
    reply.queue_on(tx)
}

/// Feeds arbitrary bytes through the framing, handshake and request decoding exactly as a
/// connection would (without sockets), returning how many frames were handled. Used by the
/// randomized robustness test; never panics.
#[doc(hidden)]
pub fn feed_bytes(bytes: &[u8]) -> usize {
    let mut state = State::new(Limits::default());
    let (tx, mut rx) = outbox(usize::MAX);
    state.register_conn(1, SocketAddr::from((Ipv4Addr::LOCALHOST, 1)), tx);
    let mut pending = bytes.to_vec();
    let mut established = false;
    let mut handled = 0;
    let now = tokio::time::Instant::now();
    while let Framed::Frame(frame) = next_frame(&mut pending, MAX_PACKET, !established) {
        let body = frame.body();
        handled += 1;
        if established {
            let mut header = Reader::new(body);
            let (Ok(xid), Ok(opcode)) = (header.i32(), header.i32()) else {
                break;
            };
            let request = Request::decode(opcode, body.get(8..).unwrap_or_default());
            if let Reply::Close | Reply::SendAndClose(_) =
                state.request(1, xid, opcode, request, now)
            {
                break;
            }
        } else {
            let Ok(request) = ConnectRequest::decode(body) else {
                break;
            };
            match state.handshake(1, &request, now) {
                Some((_, true)) => established = true,
                _ => break,
            }
        }
        while let Some(item) = rx.try_recv() {
            if let Outbound::Frame(frame) = item {
                rx.written(frame.len());
            }
        }
    }
    handled
}
