//! The TCP side: accept loop, one task per connection, expiry and container timers, and the
//! public [`EmbeddedServer`] handle.

use std::collections::HashMap;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinHandle};
use tracing::{debug, info, warn};

use crate::codec::{op, ConnectRequest, Reader, Request, MAX_PACKET};
use crate::error::Error;
use crate::faults::{Faults, LostReplyHandle};
use crate::faults::{LostReply, RequestMatcher};
use crate::state::{Limits, Outbound, Reply, State};
use crate::watch::ConnId;

/// How long a connection may stay without a session (ZooKeeper's default).
const SESSIONLESS_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings chosen through [`EmbeddedServerBuilder`].
#[derive(Clone, Debug)]
struct Settings {
    super_user: Option<String>,
    tick_time: Duration,
    min_session_timeout: Duration,
    max_session_timeout: Duration,
    container_check_interval: Duration,
    /// The port to listen on; 0 asks the system for a free one.
    port: u16,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            super_user: None,
            tick_time: Duration::from_millis(100),
            min_session_timeout: Duration::from_millis(400),
            max_session_timeout: Duration::from_secs(60),
            container_check_interval: Duration::from_millis(100),
            port: 0,
        }
    }
}

/// Configures and starts an [`EmbeddedServer`]; obtained from [`EmbeddedServer::builder`].
///
/// Defaults (the same as the testing crate's real `ZooKeeperServer`): tick time 100 ms (session
/// expiry is checked once a tick), session timeouts between 400 ms and 60 s, containers and
/// TTL nodes checked every 100 ms.
#[derive(Clone, Debug, Default)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct EmbeddedServerBuilder {
    settings: Settings,
}

impl EmbeddedServerBuilder {
    /// Sets the tick: how often sessions are checked for expiry.
    pub fn tick_time(mut self, tick_time: Duration) -> Self {
        self.settings.tick_time = tick_time;
        self
    }

    /// Sets the smallest session timeout the server grants.
    pub fn min_session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.min_session_timeout = timeout;
        self
    }

    /// Sets the largest session timeout the server grants.
    pub fn max_session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.max_session_timeout = timeout;
        self
    }

    /// Makes clients that authenticate with `digest` and these `user:password` credentials
    /// super users, who pass every ACL check (ZooKeeper's
    /// `zookeeper.DigestAuthenticationProvider.superDigest`).
    pub fn super_user(mut self, credentials: &str) -> Self {
        self.settings.super_user = Some(crate::acl::digest_id(credentials.as_bytes()));
        self
    }

    /// Sets how often empty containers and expired TTL nodes are looked for.
    pub fn container_check_interval(mut self, interval: Duration) -> Self {
        self.settings.container_check_interval = interval;
        self
    }

    /// Listens on this `127.0.0.1` port instead of a free one the system picks (0, the
    /// default, keeps picking). Starting fails if the port is taken.
    pub fn port(mut self, port: u16) -> Self {
        self.settings.port = port;
        self
    }

    /// Starts the server on a free `127.0.0.1` port (or the one set with
    /// [`port`](Self::port)), on the current tokio runtime: it lives as
    /// long as the handle and that runtime.
    ///
    /// # Errors
    /// The port could not be bound or the server's tasks not started.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is awaited; the server exists once this returns.
    pub async fn start(self) -> Result<EmbeddedServer, Error> {
        self.launch(tokio::runtime::Handle::current(), None)
    }

    /// Starts the server on a runtime of its own (two worker threads), usable from synchronous
    /// code, from any runtime, and in a `static` shared by tests that each run their own
    /// runtime. The runtime shuts down when the handle is dropped.
    pub fn start_blocking(self) -> Result<EmbeddedServer, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("embedded-zk")
            .enable_all()
            .build()
            .map_err(|err| Error::io("cannot build embedded server runtime", err))?;
        let handle = runtime.handle().clone();
        self.launch(handle, Some(runtime))
    }

    fn launch(
        self,
        handle: tokio::runtime::Handle,
        runtime: Option<tokio::runtime::Runtime>,
    ) -> Result<EmbeddedServer, Error> {
        let s = self.settings;
        if s.tick_time.is_zero() || s.container_check_interval.is_zero() {
            return Err(Error::InvalidConfig(
                "tick time and container check interval must be positive".to_owned(),
            ));
        }
        if s.min_session_timeout > s.max_session_timeout {
            return Err(Error::InvalidConfig(format!(
                "min session timeout {:?} exceeds max session timeout {:?}",
                s.min_session_timeout, s.max_session_timeout
            )));
        }
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, s.port))
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|err| Error::io("cannot bind embedded server", err))?;
        let address = listener
            .local_addr()
            .map_err(|err| Error::io("cannot read embedded server address", err))?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(Limits {
                min_session_timeout: s.min_session_timeout,
                max_session_timeout: s.max_session_timeout,
                super_digest: s.super_user.clone(),
            })),
            faults: Faults::default(),
            connections: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            stopped: AtomicBool::new(false),
        });
        let tasks = vec![
            handle.spawn(accept_loop(listener, shared.clone())),
            handle.spawn(expiry_loop(shared.clone(), s.tick_time)),
            handle.spawn(reaper_loop(shared.clone(), s.container_check_interval)),
        ];
        info!(%address, "embedded ZooKeeper server started");
        Ok(EmbeddedServer {
            address,
            shared,
            tasks: Mutex::new(tasks),
            handle,
            runtime,
        })
    }
}

/// State shared by the handle and every task.
struct Shared {
    state: Mutex<State>,
    faults: Faults,
    connections: Mutex<HashMap<ConnId, AbortHandle>>,
    next_conn: AtomicU64,
    stopped: AtomicBool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn connections(&self) -> MutexGuard<'_, HashMap<ConnId, AbortHandle>> {
        self.connections.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An in-process, single-node server speaking ZooKeeper's client protocol on `127.0.0.1`.
///
/// Real clients (`zookeeper-client`, Curator, kazoo) talk to it as to Apache ZooKeeper 3.8; see
/// the [crate docs](crate) for what it implements. Its tasks run on the tokio runtime that
/// started it; dropping the handle stops them and closes every connection.
pub struct EmbeddedServer {
    address: SocketAddr,
    shared: Arc<Shared>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    handle: tokio::runtime::Handle,
    /// The server's own runtime, when started with
    /// [`start_blocking`](EmbeddedServerBuilder::start_blocking).
    runtime: Option<tokio::runtime::Runtime>,
}

impl fmt::Debug for EmbeddedServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedServer")
            .field("address", &self.address)
            .field("connections", &self.active_connections())
            .finish()
    }
}

impl EmbeddedServer {
    /// A builder with the default settings.
    pub fn builder() -> EmbeddedServerBuilder {
        EmbeddedServerBuilder::default()
    }

    /// Starts a server with the default settings on the current tokio runtime.
    ///
    /// # Errors
    /// The port could not be bound or the server's tasks not started.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is awaited; the server exists once this returns.
    pub async fn start() -> Result<EmbeddedServer, Error> {
        Self::builder().start().await
    }

    /// Starts a server with the default settings on a runtime of its own; see
    /// [`EmbeddedServerBuilder::start_blocking`].
    pub fn start_blocking() -> Result<EmbeddedServer, Error> {
        Self::builder().start_blocking()
    }

    /// The connect string for clients, `127.0.0.1:PORT`.
    pub fn connect_string(&self) -> String {
        self.address.to_string()
    }

    /// The address the server listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// Number of open client connections.
    pub fn active_connections(&self) -> usize {
        self.shared.connections().len()
    }

    /// Ids of every live session.
    pub fn session_ids(&self) -> Vec<i64> {
        self.shared.state().sessions.ids()
    }

    /// The last zxid handed out.
    pub fn zxid(&self) -> i64 {
        self.shared.state().zxid
    }

    /// Every node path, sorted (including `/` and `/zookeeper…`): handy for leak checks.
    pub fn node_paths(&self) -> Vec<String> {
        self.shared.state().paths()
    }

    /// Expires a session now, as if its timeout had passed: its ephemeral nodes go, its watchers
    /// are notified, its connection is closed, and the client learns of the expiry when it
    /// reconnects. Returns whether the session existed.
    pub fn expire_session(&self, session_id: i64) -> bool {
        self.shared.state().expire(session_id)
    }

    /// Closes every client connection. Sessions survive: clients reconnect into them and re-arm
    /// their watches.
    pub fn drop_connections(&self) {
        let connections = std::mem::take(&mut *self.shared.connections());
        debug!(count = connections.len(), "dropping embedded connections");
        for handle in connections.into_values() {
            handle.abort();
        }
    }

    /// Stops answering for `duration`: nothing is read or written on any connection and new
    /// connections get no handshake answer, like a network partition. Session expiry keeps
    /// running, so a stall longer than a session's timeout expires it.
    pub fn stall(&self, duration: Duration) {
        let now = tokio::time::Instant::now();
        let until = now
            .checked_add(duration)
            .or_else(|| now.checked_add(Duration::from_secs(365 * 24 * 3600)))
            .unwrap_or(now);
        self.shared.faults.stall_until(Some(until));
    }

    /// Ends a [`stall`](Self::stall) early.
    pub fn resume(&self) {
        self.shared.faults.stall_until(None);
    }

    /// Arms a one-shot fault: the next request matching `matcher` is applied, but instead of
    /// its reply the client's connection is closed (the connection-loss-during-create case).
    /// Arming again replaces an unconsumed fault.
    pub fn lose_reply_to_next(&self, matcher: RequestMatcher) -> LostReplyHandle {
        self.shared.faults.arm(matcher)
    }

    /// Disarms an unconsumed [`lose_reply_to_next`](Self::lose_reply_to_next) fault.
    pub fn disarm(&self) {
        self.shared.faults.disarm();
    }

    /// Stops listening and closes every connection, keeping the data and sessions (which do
    /// not expire while stopped). [`restart`](Self::restart) serves again on the same port.
    pub fn stop(&self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        let tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(acceptor) = tasks.first() {
            acceptor.abort();
        }
        drop(tasks);
        self.drop_connections();
    }

    /// Serves again on the same port after [`stop`](Self::stop) (or restarts a running
    /// server); every session gets a full timeout from now.
    ///
    /// # Errors
    /// The port could not be bound again within about a second.
    ///
    /// # Cancel safety
    /// The server is stopped at the first poll; dropping the future while it
    /// waits for the port leaves it stopped (call `restart` again).
    pub async fn restart(&self) -> Result<(), Error> {
        self.stop();
        let mut attempt = 0;
        let listener = loop {
            match std::net::TcpListener::bind(self.address)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
            {
                Ok(listener) => break listener,
                Err(err) if attempt >= 50 => {
                    return Err(Error::io("cannot re-bind embedded server", err))
                }
                Err(_) => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        self.shared
            .state()
            .sessions
            .touch_all(std::time::Instant::now());
        self.shared.stopped.store(false, Ordering::SeqCst);
        let acceptor = self
            .handle
            .spawn(accept_loop(listener, self.shared.clone()));
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = tasks.first_mut() {
            *slot = acceptor;
        }
        Ok(())
    }
}

impl Drop for EmbeddedServer {
    fn drop(&mut self) {
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
        self.drop_connections();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn accept_loop(listener: std::net::TcpListener, shared: Arc<Shared>) {
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(err) => {
            warn!(%err, "embedded server cannot listen");
            return;
        }
    };
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                warn!(%err, "embedded server accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let id = shared.next_conn.fetch_add(1, Ordering::SeqCst);
        debug!(id, %peer, "embedded server accepted connection");
        let mut connections = shared.connections();
        let task = tokio::spawn(serve_connection(id, stream, peer, shared.clone()));
        connections.insert(id, task.abort_handle());
    }
}

async fn expiry_loop(shared: Arc<Shared>, tick: Duration) {
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        if !shared.stopped.load(Ordering::SeqCst) {
            shared.state().expire_due(std::time::Instant::now());
        }
    }
}

async fn reaper_loop(shared: Arc<Shared>, every: Duration) {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        if !shared.stopped.load(Ordering::SeqCst) {
            shared.state().reap();
        }
    }
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

/// What the front of a connection's input holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Framed {
    /// Not a whole frame yet.
    Incomplete,
    /// A four-letter-word command (only before the handshake).
    FourLetter([u8; 4]),
    /// A frame longer than `jute.maxbuffer` or with a negative length.
    TooLong(i32),
    /// One frame's body.
    Frame(Vec<u8>),
}

/// Cuts the next frame off `pending`.
pub(crate) fn next_frame(pending: &mut Vec<u8>, established: bool) -> Framed {
    let Some(head) = pending.get(..4) else {
        return Framed::Incomplete;
    };
    let word = [head[0], head[1], head[2], head[3]];
    if !established && word.iter().all(u8::is_ascii_lowercase) {
        return Framed::FourLetter(word);
    }
    let len = i32::from_be_bytes(word);
    let Ok(size) = usize::try_from(len) else {
        return Framed::TooLong(len);
    };
    if size > MAX_PACKET {
        return Framed::TooLong(len);
    }
    if pending.len() < 4 + size {
        return Framed::Incomplete;
    }
    let rest = pending.split_off(4 + size);
    let mut frame = std::mem::replace(pending, rest);
    frame.drain(..4);
    Framed::Frame(frame)
}

fn four_letter_answer(word: &[u8; 4], shared: &Shared) -> String {
    match word {
        b"ruok" => "imok".to_owned(),
        b"isro" => "rw".to_owned(),
        b"srvr" | b"stat" => {
            let state = shared.state();
            format!(
                "Zookeeper version: 3.8.0-embedded (zk-curator-testing)\nLatency min/avg/max: 0/0.0/0\nReceived: 0\nSent: 0\nConnections: {}\nOutstanding: 0\nZxid: {:#x}\nMode: standalone\nNode count: {}\n",
                state.conns.len(),
                state.zxid,
                state.tree.len()
            )
        }
        other => format!(
            "{} is not executed because it is not in the whitelist.\n",
            String::from_utf8_lossy(other)
        ),
    }
}

async fn serve_connection(id: ConnId, stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    shared
        .state()
        .register_conn(id, peer.ip().to_string(), tx.clone());
    let _guard = ConnGuard {
        id,
        shared: shared.clone(),
    };
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = stream.into_split();
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut established = false;
    let mut closing = false;
    // Like ZooKeeper's `sessionlessCnxnTimeout`: a connection must establish a session soon.
    let handshake_deadline = tokio::time::Instant::now() + SESSIONLESS_TIMEOUT;
    loop {
        shared.faults.wait_unstalled().await;
        while !closing && !shared.faults.is_stalled() {
            let body = match next_frame(&mut pending, established) {
                Framed::Incomplete => break,
                Framed::FourLetter(word) => {
                    let answer = four_letter_answer(&word, &shared);
                    let _ = writer.write_all(answer.as_bytes()).await;
                    let _ = writer.shutdown().await;
                    return;
                }
                Framed::TooLong(len) => {
                    debug!(id, len, "frame length out of bounds; closing connection");
                    return;
                }
                Framed::Frame(body) => body,
            };
            if established {
                closing = handle_request(id, &body, &shared, &tx);
            } else {
                let Ok(request) = ConnectRequest::decode(&body) else {
                    debug!(id, "malformed handshake; closing connection");
                    return;
                };
                // The answer is queued under the state lock, like every reply (see
                // `handle_request`): nothing about this connection can be queued before it.
                let valid = {
                    let mut state = shared.state();
                    match state.handshake(id, &request, std::time::Instant::now()) {
                        None => None,
                        Some((frame, valid)) => {
                            let _ = tx.send(Outbound::Frame(frame));
                            if !valid {
                                let _ = tx.send(Outbound::Close);
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
        tokio::select! {
            biased;
            out = rx.recv() => {
                let mut batch = Vec::new();
                let mut close = false;
                let mut next = out;
                loop {
                    match next {
                        Some(Outbound::Frame(bytes)) => batch.extend_from_slice(&bytes),
                        Some(Outbound::Close) | None => {
                            close = true;
                            break;
                        }
                    }
                    match rx.try_recv() {
                        Ok(more) => next = Some(more),
                        Err(_) => break,
                    }
                }
                if !batch.is_empty() {
                    shared.faults.wait_unstalled().await;
                    if writer.write_all(&batch).await.is_err() {
                        return;
                    }
                }
                if close {
                    let _ = writer.shutdown().await;
                    return;
                }
            }
            read = reader.read(&mut chunk), if !closing => match read {
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

/// Handles one request frame; returns whether the connection is closing.
fn handle_request(
    id: ConnId,
    body: &[u8],
    shared: &Shared,
    tx: &mpsc::UnboundedSender<Outbound>,
) -> bool {
    let mut header = Reader::new(body);
    let (Ok(xid), Ok(opcode)) = (header.i32(), header.i32()) else {
        debug!(id, "request shorter than its header; closing connection");
        let _ = tx.send(Outbound::Close);
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
    let reply = state.request(id, xid, opcode, request, std::time::Instant::now());
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
        let _ = tx.send(Outbound::Close);
        return true;
    }
    match reply {
        Reply::Send(frame) => {
            let _ = tx.send(Outbound::Frame(frame));
            false
        }
        Reply::SendAndClose(frame) => {
            let _ = tx.send(Outbound::Frame(frame));
            let _ = tx.send(Outbound::Close);
            true
        }
        Reply::Close => {
            let _ = tx.send(Outbound::Close);
            true
        }
        Reply::Nothing => false,
    }
}

/// Feeds arbitrary bytes through the framing, handshake and request decoding exactly as a
/// connection would (without sockets), returning how many frames were handled. Used by the
/// randomized robustness test; never panics.
#[doc(hidden)]
pub fn feed_bytes(bytes: &[u8]) -> usize {
    let mut state = State::new(Limits {
        min_session_timeout: Duration::from_millis(400),
        max_session_timeout: Duration::from_secs(60),
        super_digest: None,
    });
    let (tx, mut rx) = mpsc::unbounded_channel();
    state.register_conn(1, "127.0.0.1".to_owned(), tx);
    let mut pending = bytes.to_vec();
    let mut established = false;
    let mut handled = 0;
    let now = std::time::Instant::now();
    while let Framed::Frame(body) = next_frame(&mut pending, established) {
        handled += 1;
        if established {
            let mut header = Reader::new(&body);
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
            let Ok(request) = ConnectRequest::decode(&body) else {
                break;
            };
            match state.handshake(1, &request, now) {
                Some((_, true)) => established = true,
                _ => break,
            }
        }
        while rx.try_recv().is_ok() {}
    }
    handled
}
