//! A loopback TCP proxy in front of a ZooKeeper server that injects network faults.
//!
//! Clients connect to [`FaultProxy::connect_string`] instead of the server. Every accepted
//! connection gets its own upstream connection, and bytes are forwarded unchanged in both
//! directions. Tests then break the network on purpose:
//!
//! * [`FaultProxy::drop_connections`] closes every current connection, as a flaky network or
//!   a server-side disconnect would; clients reconnect through the proxy into their sessions.
//! * [`FaultProxy::set_paused`] (alias [`FaultProxy::blackhole`]) freezes all traffic and holds
//!   new connections without answering, like a network partition.
//! * [`FaultProxy::lose_reply_to_next`] lets the next matching request reach the server, then
//!   swallows the server's reply and closes that connection: the request took effect but the
//!   client cannot know.
//! * [`FaultProxy::hold_replies`] holds back everything the server sends (requests still
//!   pass), and [`FaultProxy::hold_replies_from_next`] starts holding at the next matching
//!   request, so a test can tell a client that waits for that reply from one that does not.
//!
//! # Wire format, as far as the proxy needs it
//!
//! Every ZooKeeper packet is a frame: a 4-byte big-endian length, then that many bytes. The first
//! frame in each direction is the session handshake (`ConnectRequest` / `ConnectResponse`) and
//! has no header. Afterwards a request body starts with `xid: i32, type: i32`, a reply body with
//! `xid: i32, zxid: i64, err: i32`; the server answers a request with a reply carrying the same
//! xid. Most requests continue with the node path as a length-prefixed string.
//!
//! Streams that do not parse as frames (e.g. four-letter-word commands such as `ruok`) are
//! forwarded as opaque bytes. Frames are cut by the embedded server's reader
//! ([`embedded::codec::next_frame`](crate::embedded::codec::next_frame)), with a larger bound
//! on their length.

use std::collections::HashMap;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{lookup_host, TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};
use tracing::{debug, info, warn};

use zk_curator_server::codec::{self, next_frame, Framed};

use crate::error::Error;

pub use zk_curator_server::faults::{opcode, LostReply, RequestMatcher};

/// Largest frame the proxy parses; anything longer is treated as a non-ZooKeeper byte stream.
const MAX_FRAME: usize = 64 * 1024 * 1024;

/// Observes a fault armed by [`FaultProxy::lose_reply_to_next`] (the embedded server's
/// handle type: the two kinds of fault report alike).
pub type LostReplyFault = zk_curator_server::faults::LostReplyHandle;

/// One ZooKeeper frame seen by the proxy (handshakes and pings left out), in
/// the order the proxy read them from either side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Traffic {
    /// A request read from a client.
    Request {
        /// Its xid.
        xid: i32,
        /// Its opcode (see [`opcode`]).
        opcode: i32,
        /// The path right after the header, for opcodes that carry one.
        path: Option<String>,
    },
    /// A reply (or notification, xid -1) read from the server.
    Reply {
        /// The xid it answers.
        xid: i32,
        /// ZooKeeper's error code, 0 for success.
        error_code: i32,
    },
}

/// A session the server granted to a client through the proxy, read from the
/// `ConnectResponse` of a handshake: enough to act as that session's owner
/// (see [`close_granted_session`](crate::expire::close_granted_session)),
/// which the client library itself never reveals.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionGrant {
    /// The session id.
    pub session_id: i64,
    /// The negotiated session timeout, in milliseconds.
    pub timeout_ms: i32,
    /// The session password.
    pub password: Vec<u8>,
}

impl fmt::Debug for SessionGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionGrant")
            .field("session_id", &format_args!("{:#x}", self.session_id))
            .field("timeout_ms", &self.timeout_ms)
            .finish_non_exhaustive()
    }
}

impl SessionGrant {
    /// Reads a `ConnectResponse` body: protocolVersion i32, timeOut i32,
    /// sessionId i64, passwd (i32 length + bytes), readOnly. `None` for a
    /// refused handshake (session id 0) or a body that does not parse.
    fn parse(body: &[u8]) -> Option<SessionGrant> {
        let timeout_ms = read_i32(body, 4)?;
        let session_id = read_i64(body, 8)?;
        let len = usize::try_from(read_i32(body, 16)?).ok()?;
        let password = body.get(20..20usize.checked_add(len)?)?.to_vec();
        (session_id != 0).then_some(SessionGrant {
            session_id,
            timeout_ms,
            password,
        })
    }
}

/// The xid of pings; left out of [`Traffic`].
const PING_XID: i32 = -2;

/// An armed, not yet consumed fault.
struct ArmedFault {
    matcher: RequestMatcher,
    fired: watch::Sender<Option<LostReply>>,
}

/// A request that consumed the armed fault on some connection; its reply will be swallowed.
struct Target {
    xid: i32,
    opcode: i32,
    path: Option<String>,
    fired: watch::Sender<Option<LostReply>>,
}

/// State shared by the proxy handle, the acceptor and the connection tasks.
struct Shared {
    upstream: SocketAddr,
    /// Forward bytes without cutting them into ZooKeeper client frames (peer-to-peer links,
    /// whose protocol is not the client protocol): nothing is parsed or recorded, and
    /// [`FaultProxy::lose_reply_to_next`] never fires.
    raw: bool,
    paused: watch::Sender<bool>,
    replies_held: watch::Sender<bool>,
    accepted: AtomicUsize,
    next_id: AtomicU64,
    connections: Mutex<HashMap<u64, AbortHandle>>,
    armed: Mutex<Option<ArmedFault>>,
    /// Replies are held from the next request matching this on.
    hold_from: Mutex<Option<RequestMatcher>>,
    /// Raw proxies on ZooKeeper election links: the address written into the first message a
    /// peer sends (see [`rewrite_election_hello`]).
    election_hello: Mutex<Option<String>>,
    traffic: Mutex<Vec<Traffic>>,
    grants: Mutex<Vec<SessionGrant>>,
}

impl Shared {
    fn record(&self, entry: Traffic) {
        self.traffic
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(entry);
    }

    fn connections(&self) -> MutexGuard<'_, HashMap<u64, AbortHandle>> {
        self.connections
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn armed(&self) -> MutexGuard<'_, Option<ArmedFault>> {
        self.armed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A fault-injecting TCP proxy listening on `127.0.0.1`; see the [module docs](self).
///
/// Its tasks run on the tokio runtime that called [`start`](Self::start). Dropping the proxy
/// stops listening and closes every proxied connection.
pub struct FaultProxy {
    local: SocketAddr,
    shared: Arc<Shared>,
    acceptor: JoinHandle<()>,
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("local", &self.local)
            .field("upstream", &self.shared.upstream)
            .field("paused", &self.is_paused())
            .field("accepted", &self.accepted_connections())
            .finish()
    }
}

impl FaultProxy {
    /// Starts a proxy on a free `127.0.0.1` port forwarding to `upstream` (e.g.
    /// `server.connect_string()` or a `SocketAddr`), which is resolved once, now.
    ///
    /// # Errors
    /// The upstream address could not be resolved or the listener not bound.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing runs until the proxy is returned.
    pub async fn start(upstream: impl ToSocketAddrs) -> Result<FaultProxy, Error> {
        let upstream = lookup_host(upstream)
            .await
            .map_err(|err| Error::io("cannot resolve proxy upstream", err))?
            .next()
            .ok_or_else(|| {
                Error::InvalidConfig("proxy upstream resolves to no address".to_owned())
            })?;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|err| Error::io("cannot bind proxy listener", err))?;
        FaultProxy::serve(listener, upstream, false)
    }

    /// Starts a raw proxy on a free `127.0.0.1` port forwarding to `upstream`, with its tasks
    /// on the runtime of `handle`, without being called from that runtime: bytes are
    /// forwarded without parsing (for ZooKeeper's quorum and election links), so only the
    /// faults that act on whole directions apply ([`set_paused`](Self::set_paused),
    /// [`hold_replies`](Self::hold_replies), [`drop_connections`](Self::drop_connections)).
    /// An upstream that refuses a connection is tried again for up to
    /// [`RAW_UPSTREAM_PATIENCE`] before the accepted connection is closed.
    pub(crate) fn start_raw_on(
        handle: &tokio::runtime::Handle,
        upstream: SocketAddr,
    ) -> Result<FaultProxy, Error> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|err| Error::io("cannot bind proxy listener", err))?;
        listener
            .set_nonblocking(true)
            .map_err(|err| Error::io("cannot bind proxy listener", err))?;
        let _entered = handle.enter();
        let listener = TcpListener::from_std(listener)
            .map_err(|err| Error::io("cannot bind proxy listener", err))?;
        FaultProxy::serve(listener, upstream, true)
    }

    /// Makes this raw proxy, which must sit on a ZooKeeper election link, replace the election
    /// address that a dialing member announces in its first message with `address`: the
    /// member dialed answers a lower-id member by connecting back to the announced address,
    /// which then is a proxy too instead of the member's real election port.
    pub(crate) fn announce_election_address(&self, address: SocketAddr) {
        *self
            .shared
            .election_hello
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(address.to_string());
    }

    /// Spawns the acceptor on the current runtime.
    fn serve(listener: TcpListener, upstream: SocketAddr, raw: bool) -> Result<FaultProxy, Error> {
        let local = listener
            .local_addr()
            .map_err(|err| Error::io("cannot read proxy address", err))?;
        let shared = Arc::new(Shared {
            upstream,
            raw,
            paused: watch::channel(false).0,
            replies_held: watch::channel(false).0,
            accepted: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            connections: Mutex::new(HashMap::new()),
            armed: Mutex::new(None),
            hold_from: Mutex::new(None),
            election_hello: Mutex::new(None),
            traffic: Mutex::new(Vec::new()),
            grants: Mutex::new(Vec::new()),
        });
        let acceptor = tokio::spawn(accept_loop(listener, shared.clone()));
        if raw {
            debug!(%local, %upstream, "raw fault proxy started");
        } else {
            info!(%local, %upstream, "fault proxy started");
        }
        Ok(FaultProxy {
            local,
            shared,
            acceptor,
        })
    }

    /// The address clients should connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The connect string clients should use, `127.0.0.1:PORT`.
    pub fn connect_string(&self) -> String {
        self.local.to_string()
    }

    /// The server the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// Number of client connections accepted so far (including ones held while paused).
    pub fn accepted_connections(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Number of client connections currently open through the proxy.
    pub fn active_connections(&self) -> usize {
        self.shared.connections().len()
    }

    /// Closes every current connection on both sides. New connections are proxied as usual.
    pub fn drop_connections(&self) {
        let connections = std::mem::take(&mut *self.shared.connections());
        debug!(count = connections.len(), "dropping proxied connections");
        for handle in connections.into_values() {
            handle.abort();
        }
    }

    /// Pauses (`true`) or resumes (`false`) all traffic, simulating a network partition.
    ///
    /// While paused, no byte is forwarded in either direction, connections closed by one side
    /// are not closed on the other side, and new connections are accepted but not connected
    /// upstream, so clients see silence rather than refusals. Resuming forwards whatever was
    /// held back and connects the waiting clients.
    pub fn set_paused(&self, paused: bool) {
        debug!(paused, "fault proxy traffic");
        self.shared.paused.send_replace(paused);
    }

    /// Same as [`set_paused`](Self::set_paused).
    pub fn blackhole(&self, on: bool) {
        self.set_paused(on);
    }

    /// Whether traffic is currently paused.
    pub fn is_paused(&self) -> bool {
        *self.shared.paused.borrow()
    }

    /// Holds back everything the server sends (replies, notifications)
    /// while `true`, still forwarding requests: a client that waits for a
    /// reply before sending its next request stalls, one that pipelines does
    /// not. Held replies are still read and recorded in [`traffic`](Self::traffic)
    /// (up to 16 MiB per connection). Releasing forwards what was held, in
    /// order.
    pub fn hold_replies(&self, hold: bool) {
        self.shared.replies_held.send_replace(hold);
    }

    /// Holds back everything the server sends, as [`hold_replies`](Self::hold_replies)`(true)`,
    /// from the next client request matching `matcher` on: that request still reaches the
    /// server, and its reply is the first one held. A client that returns without waiting for
    /// that reply is told apart from one that waits, whatever the timing.
    /// [`hold_replies`](Self::hold_replies)`(false)` forwards what was held; arming again
    /// replaces a matcher that has not matched yet.
    pub fn hold_replies_from_next(&self, matcher: RequestMatcher) {
        *self
            .shared
            .hold_from
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(matcher);
    }

    /// Every request and reply seen so far (pings and handshakes left out),
    /// in the order the proxy read them. A request recorded before the reply
    /// to an earlier request proves the client sent it without waiting.
    pub fn traffic(&self) -> Vec<Traffic> {
        self.shared
            .traffic
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Every session the server granted through this proxy, oldest first,
    /// once per session (a reconnect into the same session adds nothing).
    pub fn granted_sessions(&self) -> Vec<SessionGrant> {
        self.shared
            .grants
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Forgets the traffic recorded so far.
    pub fn clear_traffic(&self) {
        self.shared
            .traffic
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }

    /// Arms a one-shot fault: the next client request matching `matcher` is forwarded to the
    /// server, but the server's reply to it is not forwarded; instead that client connection
    /// is closed on both sides.
    ///
    /// The first matching request consumes the fault even if its connection closes before the
    /// reply arrives (then the fault never fires). Arming again replaces a fault that has not
    /// been consumed yet; the replaced fault's handle never fires.
    pub fn lose_reply_to_next(&self, matcher: RequestMatcher) -> LostReplyFault {
        let (fired, receiver) = watch::channel(None);
        *self.shared.armed() = Some(ArmedFault { matcher, fired });
        LostReplyFault::from(receiver)
    }

    /// Disarms a fault armed by [`lose_reply_to_next`](Self::lose_reply_to_next) that has not
    /// been consumed yet.
    pub fn disarm(&self) {
        self.shared.armed().take();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.drop_connections();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let (client, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                warn!(%err, "fault proxy accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
        debug!(id, %peer, "fault proxy accepted connection");
        // Register under the lock so the task cannot deregister before it is registered.
        let mut connections = shared.connections();
        let task = tokio::spawn(run_connection(id, client, shared.clone()));
        connections.insert(id, task.abort_handle());
    }
}

/// Removes a connection from the registry when its task ends or is aborted.
struct Registration {
    id: u64,
    shared: Arc<Shared>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.shared.connections().remove(&self.id);
    }
}

async fn run_connection(id: u64, client: TcpStream, shared: Arc<Shared>) {
    let _registration = Registration {
        id,
        shared: shared.clone(),
    };
    let mut paused = shared.paused.subscribe();
    if !wait_unpaused(&mut paused).await {
        return;
    }
    let server = match connect_upstream(&shared).await {
        Ok(server) => server,
        Err(err) => {
            debug!(id, %err, "fault proxy cannot reach upstream; closing client connection");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let target: Mutex<Option<Target>> = Mutex::new(None);
    let requests = pump(
        client_read,
        server_write,
        Direction::Requests,
        &target,
        &shared,
    );
    let replies = pump(
        server_read,
        client_write,
        Direction::Replies,
        &target,
        &shared,
    );
    let end = tokio::select! {
        end = requests => end,
        end = replies => end,
    };
    debug!(id, ?end, "fault proxy connection closed");
}

/// How long a raw proxy keeps trying to reach an upstream that refuses connections.
///
/// A peer dialing through a proxy sees its connection accepted at once, whatever the upstream
/// does, so a refusal would reach it as a reset of an established connection, which ZooKeeper
/// treats differently: a follower retries a refused connection to a leader that is just
/// opening its quorum port, but gives a reset one up and elects again (waiting out
/// `initLimit`). Retrying here for a while keeps the refusal's meaning.
const RAW_UPSTREAM_PATIENCE: Duration = Duration::from_secs(2);

async fn connect_upstream(shared: &Shared) -> std::io::Result<TcpStream> {
    let deadline = tokio::time::Instant::now() + RAW_UPSTREAM_PATIENCE;
    loop {
        match TcpStream::connect(shared.upstream).await {
            Err(err) if shared.raw && tokio::time::Instant::now() < deadline => {
                debug!(%err, upstream = %shared.upstream, "raw proxy upstream refused; retrying");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Requests,
    Replies,
}

#[derive(Debug)]
enum PumpEnd {
    Closed,
    ReplyLost,
    Shutdown,
}

/// What to do with one frame.
enum Verdict {
    Forward,
    Lose,
}

async fn pump(
    mut reader: impl AsyncRead + Unpin,
    mut writer: impl AsyncWrite + Unpin,
    direction: Direction,
    target: &Mutex<Option<Target>>,
    shared: &Shared,
) -> PumpEnd {
    let mut paused = shared.paused.subscribe();
    let mut replies_held = shared.replies_held.subscribe();
    let mut splitter = FrameSplitter::default();
    let mut chunk = vec![0u8; 64 * 1024];
    // Replies read (and recorded) while replies are held, not yet forwarded.
    let mut held = Vec::new();
    // The first message of an election link, while it is being rewritten.
    let mut hello = match direction {
        Direction::Requests if shared.raw => shared
            .election_hello
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
            .map(|address| (address, Vec::new())),
        _ => None,
    };
    loop {
        if !wait_unpaused(&mut paused).await {
            return PumpEnd::Shutdown;
        }
        let read = if held.is_empty() {
            reader.read(&mut chunk).await
        } else {
            tokio::select! {
                read = reader.read(&mut chunk) => read,
                released = wait_unpaused(&mut replies_held) => {
                    if !released {
                        return PumpEnd::Shutdown;
                    }
                    if writer.write_all(&held).await.is_err() || writer.flush().await.is_err() {
                        return PumpEnd::Closed;
                    }
                    held.clear();
                    continue;
                }
            }
        };
        let n = match read {
            Ok(0) | Err(_) => {
                // During a partition the other side must not learn about the close either.
                return if wait_unpaused(&mut paused).await {
                    PumpEnd::Closed
                } else {
                    PumpEnd::Shutdown
                };
            }
            Ok(n) => n,
        };
        let mut out = Vec::with_capacity(n);
        let mut lose = false;
        if let Some((address, pending)) = hello.as_mut() {
            pending.extend_from_slice(&chunk[..n]);
            if let Some(rewritten) = rewrite_election_hello(pending, address) {
                out = rewritten;
                hello = None;
            }
        } else if shared.raw {
            out.extend_from_slice(&chunk[..n]);
        } else {
            splitter.push(&chunk[..n]);
        }
        while let Some(frame) = splitter.next_frame() {
            let verdict = match direction {
                Direction::Requests => inspect_request(&frame, target, shared),
                Direction::Replies => inspect_reply(&frame, target, shared),
            };
            match verdict {
                Verdict::Forward => out.extend_from_slice(frame.whole.as_bytes()),
                Verdict::Lose => {
                    lose = true;
                    break;
                }
            }
        }
        if !lose {
            out.extend_from_slice(&splitter.take_opaque());
        }
        if !wait_unpaused(&mut paused).await {
            return PumpEnd::Shutdown;
        }
        if matches!(direction, Direction::Replies) {
            // Keep reading while replies are held, so every reply the server
            // sent is recorded, up to a bound; then wait for the release.
            if *replies_held.borrow() && !lose && held.len() < HELD_REPLIES_LIMIT {
                held.extend_from_slice(&out);
                continue;
            }
            if !wait_unpaused(&mut replies_held).await {
                return PumpEnd::Shutdown;
            }
            if !held.is_empty() {
                held.extend_from_slice(&out);
                out = std::mem::take(&mut held);
            }
        }
        if !out.is_empty()
            && (writer.write_all(&out).await.is_err() || writer.flush().await.is_err())
        {
            return PumpEnd::Closed;
        }
        if lose {
            return PumpEnd::ReplyLost;
        }
    }
}

fn lock_target(target: &Mutex<Option<Target>>) -> MutexGuard<'_, Option<Target>> {
    target
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn inspect_request(frame: &Frame, target: &Mutex<Option<Target>>, shared: &Shared) -> Verdict {
    if frame.handshake {
        return Verdict::Forward;
    }
    let body = frame.body();
    let (Some(xid), Some(code)) = (read_i32(body, 0), read_i32(body, 4)) else {
        return Verdict::Forward;
    };
    let path = request_path(code, &body[8..]);
    if xid != PING_XID {
        shared.record(Traffic::Request {
            xid,
            opcode: code,
            path: path.clone(),
        });
    }
    {
        let mut hold_from = shared
            .hold_from
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if hold_from
            .as_ref()
            .is_some_and(|m| m.matches(code, path.as_deref()))
        {
            hold_from.take();
            debug!(
                xid,
                code,
                ?path,
                "request matched; holding replies from here on"
            );
            shared.replies_held.send_replace(true);
        }
    }
    let mut armed = shared.armed();
    let Some(fault) = armed.as_ref() else {
        return Verdict::Forward;
    };
    if !fault.matcher.matches(code, path.as_deref()) {
        return Verdict::Forward;
    }
    if let Some(fault) = armed.take() {
        debug!(xid, code, ?path, "request matched; its reply will be lost");
        *lock_target(target) = Some(Target {
            xid,
            opcode: code,
            path,
            fired: fault.fired,
        });
    }
    Verdict::Forward
}

fn inspect_reply(frame: &Frame, target: &Mutex<Option<Target>>, shared: &Shared) -> Verdict {
    if frame.handshake {
        if let Some(grant) = SessionGrant::parse(frame.body()) {
            let mut grants = shared
                .grants
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if !grants.iter().any(|g| g.session_id == grant.session_id) {
                grants.push(grant);
            }
        }
        return Verdict::Forward;
    }
    let body = frame.body();
    let (Some(xid), Some(zxid), Some(error_code)) =
        (read_i32(body, 0), read_i64(body, 4), read_i32(body, 12))
    else {
        return Verdict::Forward;
    };
    if xid != PING_XID {
        shared.record(Traffic::Reply { xid, error_code });
    }
    let mut target = lock_target(target);
    if target.as_ref().map(|t| t.xid) != Some(xid) {
        return Verdict::Forward;
    }
    let Some(hit) = target.take() else {
        return Verdict::Forward;
    };
    info!(xid, opcode = hit.opcode, path = ?hit.path, error_code, "fault proxy lost a reply; closing connection");
    hit.fired.send_replace(Some(LostReply::new(
        xid, hit.opcode, hit.path, zxid, error_code,
    )));
    Verdict::Lose
}

/// Rewrites the first message of a ZooKeeper election connection (3.5+: protocol version
/// `i64` -65536 or -65535, server id `i64`, then the announced election address(es) as an
/// `i32` length and `host:port[|host:port...]`) to announce `address` instead, keeping any
/// bytes that follow. `None` while `pending` is too short to tell; a stream that is not such
/// a message comes back unchanged.
fn rewrite_election_hello(pending: &[u8], address: &str) -> Option<Vec<u8>> {
    const VERSIONS: [i64; 2] = [-65536, -65535];
    let version = read_i64(pending, 0)?;
    if !VERSIONS.contains(&version) {
        return Some(pending.to_vec());
    }
    let len = read_i32(pending, 16)?;
    let Ok(len) = usize::try_from(len) else {
        return Some(pending.to_vec());
    };
    if len > 4096 {
        return Some(pending.to_vec());
    }
    let end = 20 + len;
    if pending.len() < end {
        return None;
    }
    let mut out = Vec::with_capacity(pending.len() + address.len());
    out.extend_from_slice(&pending[..16]);
    let announced = i32::try_from(address.len()).ok()?;
    out.extend_from_slice(&announced.to_be_bytes());
    out.extend_from_slice(address.as_bytes());
    out.extend_from_slice(&pending[end..]);
    Some(out)
}

fn read_i32(bytes: &[u8], at: usize) -> Option<i32> {
    let raw = bytes.get(at..at.checked_add(4)?)?;
    Some(i32::from_be_bytes(raw.try_into().ok()?))
}

fn read_i64(bytes: &[u8], at: usize) -> Option<i64> {
    let raw = bytes.get(at..at.checked_add(8)?)?;
    Some(i64::from_be_bytes(raw.try_into().ok()?))
}

/// Reads a jute `ustring` (i32 length, then UTF-8 bytes; -1 for null) at the start of `bytes`.
fn read_ustring(bytes: &[u8]) -> Option<String> {
    let len = usize::try_from(read_i32(bytes, 0)?).ok()?;
    let raw = bytes.get(4..4usize.checked_add(len)?)?;
    String::from_utf8(raw.to_vec()).ok()
}

/// Extracts the path of a request from the body following its header.
fn request_path(code: i32, rest: &[u8]) -> Option<String> {
    if opcode::has_leading_path(code) {
        return read_ustring(rest);
    }
    if code == opcode::MULTI || code == opcode::MULTI_READ {
        // MultiHeader {type: i32, done: bool (1 byte), err: i32}, then the operation's record.
        let first_op = read_i32(rest, 0)?;
        let done = *rest.get(4)? != 0;
        if done || !opcode::has_leading_path(first_op) {
            return None;
        }
        return read_ustring(rest.get(9..)?);
    }
    None
}

/// One complete frame, and whether it is the first of its direction (the handshake, which has
/// no header).
struct Frame {
    whole: codec::Frame,
    handshake: bool,
}

impl Frame {
    fn body(&self) -> &[u8] {
        self.whole.body()
    }
}

/// Cuts a byte stream into frames, tolerating any split of the stream into reads.
///
/// Once a length prefix is implausible the stream is declared opaque: buffered and later bytes
/// are handed out unparsed.
#[derive(Default)]
struct FrameSplitter {
    pending: Vec<u8>,
    frames_seen: u64,
    opaque: bool,
}

impl FrameSplitter {
    fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    fn next_frame(&mut self) -> Option<Frame> {
        if self.opaque {
            return None;
        }
        match next_frame(&mut self.pending, MAX_FRAME, false) {
            Framed::Incomplete => None,
            Framed::Frame(whole) => {
                let handshake = self.frames_seen == 0;
                self.frames_seen += 1;
                Some(Frame { whole, handshake })
            }
            // Four-letter words are not looked for: their length is above `MAX_FRAME` anyway.
            Framed::TooLong(_) | Framed::FourLetter(_) => {
                self.opaque = true;
                None
            }
        }
    }

    /// Bytes that will never form frames because the stream turned out not to be ZooKeeper's.
    fn take_opaque(&mut self) -> Vec<u8> {
        if self.opaque {
            std::mem::take(&mut self.pending)
        } else {
            Vec::new()
        }
    }
}

/// Waits until traffic is not paused; `false` when the proxy is gone.
/// How many bytes of replies a connection keeps while replies are held
/// before it stops reading from the server.
const HELD_REPLIES_LIMIT: usize = 16 * 1024 * 1024;

async fn wait_unpaused(paused: &mut watch::Receiver<bool>) -> bool {
    paused.wait_for(|paused| !*paused).await.is_ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut bytes = (body.len() as i32).to_be_bytes().to_vec();
        bytes.extend_from_slice(body);
        bytes
    }

    fn create_request(xid: i32, path: &str) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&xid.to_be_bytes());
        body.extend_from_slice(&opcode::CREATE2.to_be_bytes());
        body.extend_from_slice(&(path.len() as i32).to_be_bytes());
        body.extend_from_slice(path.as_bytes());
        body.extend_from_slice(&(-1i32).to_be_bytes());
        frame(&body)
    }

    #[test]
    fn splitter_handles_any_split() {
        let mut stream = frame(b"handshake");
        stream.extend(create_request(1, "/a/_c_1"));
        stream.extend(create_request(2, "/b"));
        for step in 1..stream.len() {
            let mut splitter = FrameSplitter::default();
            let mut frames = Vec::new();
            for piece in stream.chunks(step) {
                splitter.push(piece);
                while let Some(frame) = splitter.next_frame() {
                    frames.push(frame);
                }
            }
            assert_eq!(frames.len(), 3, "step {step}");
            assert!(frames[0].handshake);
            assert!(!frames[1].handshake && !frames[2].handshake);
            let body = frames[1].body();
            assert_eq!(read_i32(body, 0), Some(1));
            assert_eq!(
                request_path(read_i32(body, 4).unwrap(), &body[8..]).as_deref(),
                Some("/a/_c_1")
            );
            let rebuilt: Vec<u8> = frames
                .iter()
                .flat_map(|f| f.whole.as_bytes().to_vec())
                .collect();
            assert_eq!(rebuilt, stream);
        }
    }

    #[test]
    fn splitter_turns_opaque_on_garbage() {
        let mut splitter = FrameSplitter::default();
        splitter.push(b"ruok");
        assert!(splitter.next_frame().is_none());
        assert_eq!(splitter.take_opaque(), b"ruok");
        splitter.push(b"more");
        assert_eq!(splitter.take_opaque(), b"more");
    }

    #[test]
    fn election_hello_announces_the_proxy() {
        let mut hello = (-65535i64).to_be_bytes().to_vec();
        hello.extend_from_slice(&3i64.to_be_bytes());
        let real = b"127.0.0.1:4000";
        hello.extend_from_slice(&(real.len() as i32).to_be_bytes());
        hello.extend_from_slice(real);
        hello.extend_from_slice(b"next");
        for cut in 0..hello.len() {
            if cut < 20 + real.len() {
                assert_eq!(rewrite_election_hello(&hello[..cut], "127.0.0.1:5"), None);
            }
        }
        let out = rewrite_election_hello(&hello, "127.0.0.1:5").unwrap();
        assert_eq!(&out[..16], &hello[..16]);
        assert_eq!(read_i32(&out, 16), Some(11));
        assert_eq!(&out[20..31], b"127.0.0.1:5");
        assert_eq!(&out[31..], b"next");
        // Anything else passes unchanged.
        let other = 3i64.to_be_bytes();
        assert_eq!(rewrite_election_hello(&other, "x").unwrap(), other);
    }

    #[test]
    fn matcher_filters_by_opcode_and_path() {
        let matcher = RequestMatcher::creates().path_contains("_c_");
        assert!(matcher.matches(opcode::CREATE2, Some("/lock/_c_x-lock-")));
        assert!(!matcher.matches(opcode::CREATE2, Some("/lock")));
        assert!(!matcher.matches(opcode::DELETE, Some("/lock/_c_x")));
        assert!(!matcher.matches(opcode::CREATE2, None));
        assert!(RequestMatcher::deletes().matches(opcode::DELETE, None));
    }
}
