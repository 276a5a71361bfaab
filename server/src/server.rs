//! The public [`EmbeddedServer`] handle and its builder, the accept loop (with the connection
//! cap) and the expiry and container timers; each connection is served by `connection`, and
//! what they share (settings and state) lives in `shared`.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::connection::{admit, run_connection, serve_connection, Transport};
use crate::error::Error;
use crate::faults::{LostReplyHandle, RequestMatcher};
use crate::shared::{Settings, Shared};
pub use crate::shared::{DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_OUTSTANDING_BYTES};

/// Configures and starts an [`EmbeddedServer`]; obtained from [`EmbeddedServer::builder`].
///
/// Defaults: tick time 100 ms (session expiry is checked once a tick), session timeouts
/// between 400 ms and 60 s, containers and TTL nodes checked every 100 ms (the same as the
/// testing crate's real `ZooKeeperServer`), TTL nodes refused (ZooKeeper's default), children
/// listed in no particular order, at most [`DEFAULT_MAX_CONNECTIONS`] connections, and
/// [`DEFAULT_MAX_OUTSTANDING_BYTES`] of unsent replies per connection.
///
/// # Memory
///
/// Besides the data tree, each connection holds at most about
/// `max_outstanding_bytes` + one reply of unsent frames (reading stops there, as ZooKeeper
/// stops reading from a client that does not read its replies), plus up to `2 ×
/// max_outstanding_bytes + 4 MiB` of other sessions' notifications before it is closed; so
/// connection buffers stay below `max_connections × (2 × max_outstanding_bytes + 5 MiB)`.
#[derive(Clone, Debug, Default)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct EmbeddedServerBuilder {
    settings: Settings,
}

impl EmbeddedServerBuilder {
    /// The settings chosen so far (an ensemble's members take theirs from here).
    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

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

    /// Allows TTL nodes (`createTTL`, modes persistent-with-TTL), like ZooKeeper's
    /// `zookeeper.extendedTypesEnabled`; off by default, as in ZooKeeper, when such creates
    /// fail with `Unimplemented`.
    pub fn extended_types(mut self, enabled: bool) -> Self {
        self.settings.extended_types = enabled;
        self
    }

    /// Lists children sorted by name. By default they come in no particular order, like
    /// ZooKeeper's (which keeps them in a hash set): in the order of a hash of their names
    /// under a key the server draws when it starts, from `fastrand`'s thread-local generator
    /// (so a simulation that seeds it gets the same listings on every run); the same set comes
    /// in the same order each time. Clients must sort what they need sorted, and the default
    /// shows a client that forgets to. Turn this on only for a test that needs name order.
    pub fn sorted_children(mut self, sorted: bool) -> Self {
        self.settings.sorted_children = sorted;
        self
    }

    /// The wall-clock time node times (`ctime`, `mtime`, and TTLs' ends) count from: a
    /// write `d` after the server started is stamped with this time plus `d` of the
    /// server's clock (tokio's). Defaults to the wall clock read when the server starts.
    /// A simulation gives a fixed time, so that nothing the server answers depends on when
    /// it ran. A time before the epoch counts as the epoch.
    pub fn node_time_origin(mut self, origin: std::time::SystemTime) -> Self {
        let since = origin
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        self.settings.node_time_origin = Some(i64::try_from(since.as_millis()).unwrap_or(i64::MAX));
        self
    }

    /// Serves at most this many client connections at once; further connections are closed
    /// as soon as they are accepted (ZooKeeper's `maxClientCnxns`, here for all addresses
    /// together). Defaults to [`DEFAULT_MAX_CONNECTIONS`]; must be positive.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.settings.max_connections = max;
        self
    }

    /// Stops reading a connection's requests while more than this many bytes of its replies
    /// are unsent, and resumes once they are written: a client that sends requests without
    /// reading the answers cannot grow the server's memory. Defaults to
    /// [`DEFAULT_MAX_OUTSTANDING_BYTES`]; must be positive.
    pub fn max_outstanding_bytes(mut self, bytes: usize) -> Self {
        self.settings.max_outstanding_bytes = bytes;
        self
    }

    /// Listens on this `127.0.0.1` port instead of a free one the system picks (0, the
    /// default, keeps picking). Starting fails if the port is taken.
    pub fn port(mut self, port: u16) -> Self {
        self.settings.port = port;
        self
    }

    /// Speaks only TLS on the server's port (the one set with [`port`](Self::port), or a free
    /// one): ZooKeeper with a `secureClientPort` and no `clientPort`. Clients connect with TLS
    /// to [`EmbeddedServer::connect_string`] (or to
    /// [`EmbeddedServer::tls_connect_string`], the `tcp+tls://` form of `zookeeper-client`).
    /// Replaces an earlier [`secure_client_port`](Self::secure_client_port). Feature `tls`.
    #[cfg(feature = "tls")]
    pub fn tls_only(mut self, tls: crate::tls::TlsConfig) -> Self {
        self.settings.tls = Some(crate::shared::TlsListen::Only(tls));
        self
    }

    /// Speaks TLS on a second `127.0.0.1` port, `port` (0 for a free one), beside the
    /// plaintext one: ZooKeeper's `secureClientPort` next to its `clientPort`. Both serve the
    /// same sessions and data. [`EmbeddedServer::secure_address`] tells the port chosen.
    /// Replaces an earlier [`tls_only`](Self::tls_only). Feature `tls`.
    #[cfg(feature = "tls")]
    pub fn secure_client_port(mut self, port: u16, tls: crate::tls::TlsConfig) -> Self {
        self.settings.tls = Some(crate::shared::TlsListen::Beside(port, tls));
        self
    }

    /// Starts the server on a free `127.0.0.1` port (or the one set with
    /// [`port`](Self::port)), on the current tokio runtime: it lives as
    /// long as the handle and that runtime.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for unusable settings; [`Error::Io`] if a port could not be
    /// bound or the server's tasks not started.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is awaited; the server exists once this returns.
    pub async fn start(self) -> Result<EmbeddedServer, Error> {
        self.launch(tokio::runtime::Handle::current(), None)
    }

    /// Starts the server on a runtime of its own (two worker threads), usable from synchronous
    /// code, from any runtime, and in a `static` shared by tests that each run their own
    /// runtime. The runtime shuts down when the handle is dropped.
    ///
    /// # Errors
    /// As for [`start`](Self::start), or the runtime could not be built.
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

    /// Starts the server's state and timers (session expiry, the container and TTL reaper)
    /// on the current tokio runtime, exactly as [`start`](Self::start) does, but binds no
    /// socket and accepts nothing: the caller accepts connections on a listener of its own
    /// (a simulated network's, for instance) and hands each to
    /// [`EmbeddedServer::serve_connection`]. `address` is the address that listener serves;
    /// [`EmbeddedServer::address`], [`EmbeddedServer::connect_string`] and the `conf` word
    /// report it, and the builder's [`port`](Self::port) is not used.
    ///
    /// Nothing is bound, so [`EmbeddedServer::restart`] has nothing to bind again: it only
    /// gives sessions a fresh timeout and lets connections in again.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for unusable settings, and for TLS settings (`tls_only` or
    /// `secure_client_port`, feature `tls`), which need a port of the server's own;
    /// [`Error::Io`] when called outside a tokio runtime.
    pub fn start_without_listener(self, address: SocketAddr) -> Result<EmbeddedServer, Error> {
        let s = self.settings;
        check_settings(&s)?;
        if has_tls(&s) {
            return Err(Error::InvalidConfig(
                "TLS needs a port of the server's own; a server without a listener serves \
                 only plaintext connections"
                    .to_owned(),
            ));
        }
        let handle = tokio::runtime::Handle::try_current().map_err(|err| {
            Error::io(
                "an embedded server without a listener starts on the current tokio runtime",
                std::io::Error::other(err),
            )
        })?;
        let shared = Arc::new(Shared::new(s, Some(address.port()), None));
        info!(%address, "embedded ZooKeeper server started without a listener");
        Ok(EmbeddedServer::assemble(
            address,
            Vec::new(),
            shared,
            Vec::new(),
            handle,
            None,
        ))
    }

    fn launch(
        self,
        handle: tokio::runtime::Handle,
        runtime: Option<tokio::runtime::Runtime>,
    ) -> Result<EmbeddedServer, Error> {
        let s = self.settings;
        check_settings(&s)?;
        let main = bind(SocketAddr::from((Ipv4Addr::LOCALHOST, s.port)))
            .map_err(|err| Error::io("cannot bind embedded server", err))?;
        let address = main
            .local_addr()
            .map_err(|err| Error::io("cannot read embedded server address", err))?;
        let (main_transport, secure) = tls_listeners(&s)?;
        let mut listeners = vec![Listener {
            address,
            transport: main_transport,
        }];
        let mut bound = vec![main];
        if let Some((socket, listener)) = secure {
            bound.push(socket);
            listeners.push(listener);
        }
        let port_of = |tls: bool| {
            listeners
                .iter()
                .find(|l| l.transport.is_tls() == tls)
                .map(|l| l.address.port())
        };
        let shared = Arc::new(Shared::new(s, port_of(false), port_of(true)));
        let acceptors = bound
            .into_iter()
            .zip(&listeners)
            .map(|(socket, listener)| {
                handle.spawn(accept_loop(
                    socket,
                    listener.transport.clone(),
                    shared.clone(),
                ))
            })
            .collect();
        for listener in &listeners {
            info!(
                address = %listener.address,
                tls = listener.transport.is_tls(),
                "embedded ZooKeeper server started"
            );
        }
        Ok(EmbeddedServer::assemble(
            address, listeners, shared, acceptors, handle, runtime,
        ))
    }
}

/// Refuses settings the server cannot run with.
fn check_settings(s: &Settings) -> Result<(), Error> {
    if s.tick_time.is_zero() || s.container_check_interval.is_zero() {
        return Err(Error::InvalidConfig(
            "tick time and container check interval must be positive".to_owned(),
        ));
    }
    if s.max_connections == 0 || s.max_outstanding_bytes == 0 {
        return Err(Error::InvalidConfig(
            "max connections and max outstanding bytes must be positive".to_owned(),
        ));
    }
    if s.min_session_timeout > s.max_session_timeout {
        return Err(Error::InvalidConfig(format!(
            "min session timeout {:?} exceeds max session timeout {:?}",
            s.min_session_timeout, s.max_session_timeout
        )));
    }
    Ok(())
}

/// Whether the settings ask for TLS.
#[cfg(feature = "tls")]
fn has_tls(s: &Settings) -> bool {
    s.tls.is_some()
}

/// Without the `tls` feature, settings never ask for TLS.
#[cfg(not(feature = "tls"))]
fn has_tls(_s: &Settings) -> bool {
    false
}

/// Binds a non-blocking listener, ready for tokio.
fn bind(address: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// A bound socket and the listener it serves.
type Bound = (std::net::TcpListener, Listener);

/// How the main port carries the protocol, and the TLS port to open beside it, if any.
#[cfg(feature = "tls")]
fn tls_listeners(settings: &Settings) -> Result<(Transport, Option<Bound>), Error> {
    use crate::shared::TlsListen;

    let check = |tls: &crate::tls::TlsConfig| {
        if tls.handshake_timeout().is_zero() {
            return Err(Error::InvalidConfig(
                "the TLS handshake timeout must be positive".to_owned(),
            ));
        }
        Ok(Transport::Tls(tls.acceptor()))
    };
    match &settings.tls {
        None => Ok((Transport::Plain, None)),
        Some(TlsListen::Only(tls)) => Ok((check(tls)?, None)),
        Some(TlsListen::Beside(port, tls)) => {
            let transport = check(tls)?;
            let socket = bind(SocketAddr::from((Ipv4Addr::LOCALHOST, *port)))
                .map_err(|err| Error::io("cannot bind embedded server's TLS port", err))?;
            let address = socket
                .local_addr()
                .map_err(|err| Error::io("cannot read embedded server's TLS address", err))?;
            Ok((
                Transport::Plain,
                Some((socket, Listener { address, transport })),
            ))
        }
    }
}

/// Without the `tls` feature, only plaintext.
#[cfg(not(feature = "tls"))]
#[allow(clippy::unnecessary_wraps)]
fn tls_listeners(_settings: &Settings) -> Result<(Transport, Option<Bound>), Error> {
    Ok((Transport::Plain, None))
}

/// One port the server listens on, and how its connections carry the protocol.
#[derive(Debug)]
struct Listener {
    address: SocketAddr,
    transport: Transport,
}

/// An in-process, single-node server speaking ZooKeeper's client protocol on `127.0.0.1`, or,
/// started [without a listener](EmbeddedServerBuilder::start_without_listener), on the
/// connections its caller hands to [`serve_connection`](Self::serve_connection).
///
/// Real clients (`zookeeper-client`, Curator, kazoo) talk to it as to Apache ZooKeeper 3.8; see
/// the [crate docs](crate) for what it implements. Its tasks run on the tokio runtime that
/// started it; dropping the handle stops them and closes every connection.
pub struct EmbeddedServer {
    /// The main port's address (plaintext, or TLS with `tls_only`).
    address: SocketAddr,
    /// Every port, the main one first; restarted on the same addresses.
    listeners: Vec<Listener>,
    shared: Arc<Shared>,
    /// One accept loop per listener, in the same order.
    acceptors: Mutex<Vec<JoinHandle<()>>>,
    /// The expiry and container timers.
    timers: Vec<JoinHandle<()>>,
    handle: tokio::runtime::Handle,
    /// The server's own runtime, when started with
    /// [`start_blocking`](EmbeddedServerBuilder::start_blocking).
    runtime: Option<tokio::runtime::Runtime>,
}

impl fmt::Debug for EmbeddedServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedServer")
            .field("address", &self.address)
            .field("secure_address", &self.secure_address_any())
            .field("connections", &self.active_connections())
            .finish()
    }
}

impl EmbeddedServer {
    /// The handle of a server whose state, listeners and accept loops are ready: starts its
    /// timers on `handle`'s runtime.
    fn assemble(
        address: SocketAddr,
        listeners: Vec<Listener>,
        shared: Arc<Shared>,
        acceptors: Vec<JoinHandle<()>>,
        handle: tokio::runtime::Handle,
        runtime: Option<tokio::runtime::Runtime>,
    ) -> EmbeddedServer {
        let settings = &shared.settings;
        let timers = vec![
            handle.spawn(expiry_loop(shared.clone(), settings.tick_time)),
            handle.spawn(reaper_loop(
                shared.clone(),
                settings.container_check_interval,
            )),
        ];
        EmbeddedServer {
            address,
            listeners,
            shared,
            acceptors: Mutex::new(acceptors),
            timers,
            handle,
            runtime,
        }
    }

    /// Now, on the clock of the runtime the server runs on (which its connections and timers
    /// read), whichever runtime, if any, the caller runs on: paused with it under tokio's
    /// `test-util`, `std`'s monotonic clock otherwise.
    fn now(&self) -> tokio::time::Instant {
        let _runtime = self.handle.enter();
        tokio::time::Instant::now()
    }

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

    /// The connect string for clients, `127.0.0.1:PORT`, of the server's main port: the
    /// plaintext one, or the TLS one when the server was built with `tls_only` (feature
    /// `tls`; clients must then be configured for TLS, as Java's with
    /// `zookeeper.client.secure=true`).
    pub fn connect_string(&self) -> String {
        self.address.to_string()
    }

    /// The address of the server's main port (see [`connect_string`](Self::connect_string)).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The server's main port (see [`connect_string`](Self::connect_string)).
    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// The address that speaks TLS: the second port of
    /// [`secure_client_port`](EmbeddedServerBuilder::secure_client_port), the main port of
    /// [`tls_only`](EmbeddedServerBuilder::tls_only), `None` without TLS. Feature `tls`.
    #[cfg(feature = "tls")]
    pub fn secure_address(&self) -> Option<SocketAddr> {
        self.secure_address_any()
    }

    /// The TLS address in `zookeeper-client`'s notation, `tcp+tls://127.0.0.1:PORT` (for
    /// `Client::connector().with_tls(..).connect(..)`); `None` without TLS. Feature `tls`.
    #[cfg(feature = "tls")]
    pub fn tls_connect_string(&self) -> Option<String> {
        self.secure_address_any()
            .map(|address| format!("tcp+tls://{address}"))
    }

    fn secure_address_any(&self) -> Option<SocketAddr> {
        self.listeners
            .iter()
            .find(|l| l.transport.is_tls())
            .map(|l| l.address)
    }

    /// Serves one connection the caller accepted (on a listener of its own, such as a
    /// simulated network's; see
    /// [`start_without_listener`](EmbeddedServerBuilder::start_without_listener)), from
    /// `peer`, in a task of its own on the server's runtime. It counts as any connection: it
    /// is refused (dropped, which closes it) past
    /// [`max_connections`](EmbeddedServerBuilder::max_connections) or while the server is
    /// [stopped](Self::stop), and [`drop_connections`](Self::drop_connections), `stop` and
    /// dropping the server close it. `peer`'s address is the connection's `ip` identity.
    ///
    /// The stream carries the plain protocol, even on a server that speaks TLS on its own
    /// ports, and no TCP option is set on it. Returns whether the connection is served.
    pub fn serve_connection<S>(&self, stream: S, peer: SocketAddr) -> bool
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let shared = self.shared.clone();
        admit(
            &self.shared,
            &self.handle,
            peer,
            false,
            move |id| async move {
                serve_connection(id, stream, peer, &shared).await;
            },
        )
    }

    /// Number of open client connections.
    pub fn active_connections(&self) -> usize {
        self.shared.connections().len()
    }

    /// Bytes of replies and notifications queued on all connections and not yet written:
    /// what the backpressure bounds (see [`EmbeddedServerBuilder::max_outstanding_bytes`]).
    pub fn unsent_bytes(&self) -> usize {
        self.shared
            .state()
            .conns
            .values()
            .map(|c| c.outbox.queued())
            .sum()
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
        let now = self.now();
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
    /// not expire while stopped); connections handed to
    /// [`serve_connection`](Self::serve_connection) meanwhile are refused.
    /// [`restart`](Self::restart) serves again on the same port (ports, with a TLS one
    /// beside).
    pub fn stop(&self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        for acceptor in self
            .acceptors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            acceptor.abort();
        }
        self.drop_connections();
    }

    /// Serves again on the same port (ports) after [`stop`](Self::stop) (or restarts a
    /// running server); every session gets a full timeout from now. A server started
    /// [without a listener](EmbeddedServerBuilder::start_without_listener) binds nothing and
    /// takes connections through [`serve_connection`](Self::serve_connection) again.
    ///
    /// # Errors
    /// A port could not be bound again within about a second.
    ///
    /// # Cancel safety
    /// The server is stopped at the first poll; dropping the future while it
    /// waits for a port leaves it stopped (call `restart` again).
    pub async fn restart(&self) -> Result<(), Error> {
        self.stop();
        let mut sockets = Vec::with_capacity(self.listeners.len());
        for listener in &self.listeners {
            let mut attempt = 0;
            let socket = loop {
                match bind(listener.address) {
                    Ok(socket) => break socket,
                    Err(err) if attempt >= 50 => {
                        return Err(Error::io("cannot re-bind embedded server", err))
                    }
                    Err(_) => {
                        attempt += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            };
            sockets.push(socket);
        }
        let now = self.now().into_std();
        self.shared.state().sessions.touch_all(now);
        self.shared.stopped.store(false, Ordering::SeqCst);
        let mut acceptors = self.acceptors.lock().unwrap_or_else(|p| p.into_inner());
        // A concurrent `restart` may have got there first; its loops give way to these.
        for acceptor in acceptors.drain(..) {
            acceptor.abort();
        }
        for (socket, listener) in sockets.into_iter().zip(&self.listeners) {
            acceptors.push(self.handle.spawn(accept_loop(
                socket,
                listener.transport.clone(),
                self.shared.clone(),
            )));
        }
        Ok(())
    }
}

impl Drop for EmbeddedServer {
    fn drop(&mut self) {
        for task in self
            .acceptors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .chain(self.timers.drain(..))
        {
            task.abort();
        }
        self.drop_connections();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn accept_loop(listener: std::net::TcpListener, transport: Transport, shared: Arc<Shared>) {
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(err) => {
            warn!(%err, "embedded server cannot listen");
            return;
        }
    };
    let runtime = tokio::runtime::Handle::current();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                warn!(%err, "embedded server accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let (served, tls) = (shared.clone(), transport.clone());
        admit(&shared, &runtime, peer, tls.is_tls(), move |id| {
            run_connection(id, stream, peer, served, tls)
        });
    }
}

async fn expiry_loop(shared: Arc<Shared>, tick: Duration) {
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        if !shared.stopped.load(Ordering::SeqCst) {
            shared.state().expire_due(tokio::time::Instant::now());
        }
    }
}

async fn reaper_loop(shared: Arc<Shared>, every: Duration) {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        if !shared.stopped.load(Ordering::SeqCst) {
            shared.state().reap(tokio::time::Instant::now());
        }
    }
}
