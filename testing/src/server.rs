//! A real, standalone Apache ZooKeeper server on loopback, owned by a test.
//!
//! [`ZooKeeperServer`] runs `org.apache.zookeeper.server.quorum.QuorumPeerMain` in a JVM with a
//! private temporary directory and a free `127.0.0.1` port.
//!
//! # Process lifetime
//!
//! The JVM is not a direct child of the test process. It is launched by a small `sh` wrapper
//! whose standard input is a pipe; only the test process holds the writing end. The wrapper
//! starts `java` in the background and waits for end-of-file on that pipe. End-of-file arrives
//! when the [`ZooKeeperServer`] is stopped or dropped, and also when the test process exits for
//! any reason (the kernel closes the pipe), so a server kept in a `static` that is never dropped
//! does not outlive the test binary. On end-of-file the wrapper kills exactly the JVM it started,
//! by its process id, and reaps it.
//!
//! The temporary directory of a never-dropped server is left behind when the test process
//! exits; the next server started on the machine deletes such directories once their owning
//! process is gone (Linux only).

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tracing::{debug, info};

use crate::error::Error;
use crate::kerberos::KerberosService;
use crate::process::{
    exit_error, free_port, spawn_owned, sweep_abandoned_dirs, tail_lines, ServerProcess,
    DIR_PREFIX, ERROR_LOG_LINES, OWNER_FILE, POLL_INTERVAL, START_PORT_ATTEMPTS,
};
use crate::tls::ServerTls;

/// Environment variable that, when set, replaces the whole Java classpath used for the server.
pub const CLASSPATH_ENV: &str = "ZOOKEEPER_CLASSPATH";

/// Where Debian's `zookeeper` package installs its jars.
const JAR_DIR: &str = "/usr/share/java";

/// Java entry point of a ZooKeeper server (standalone when the config lists no peers).
const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// How long a restart keeps retrying while its fixed port is still taken.
pub(crate) const RESTART_BIND_PATIENCE: Duration = Duration::from_secs(5);

/// Logged by a standalone server once every listener is bound and the server runs: its
/// container manager is made right after the last connection factory started.
const STANDALONE_READY_LINE: &str = "Using checkIntervalMs=";

/// The JAAS file of a server with SASL, in its directory.
const JAAS_FILE: &str = "jaas.conf";

/// Returns whether a ZooKeeper server can be launched here: `java` is found and the ZooKeeper
/// jars exist (or [`CLASSPATH_ENV`] is set).
///
/// Test suites can use it to skip, with a printed notice, when ZooKeeper is not installed.
pub fn zookeeper_available() -> bool {
    Installation::locate().is_ok()
}

/// The Java executable and classpath used to run the server.
#[derive(Clone, Debug)]
pub(crate) struct Installation {
    java: PathBuf,
    classpath: String,
}

impl Installation {
    pub(crate) fn locate() -> Result<Self, Error> {
        let java = find_java().ok_or_else(|| Error::ZooKeeperNotFound {
            missing: "`java` (neither $JAVA_HOME/bin/java nor java on PATH)".to_owned(),
        })?;
        let classpath = match std::env::var(CLASSPATH_ENV) {
            Ok(classpath) if !classpath.trim().is_empty() => classpath,
            _ => default_classpath()?,
        };
        Ok(Installation { java, classpath })
    }
}

fn find_java() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        let java = Path::new(&home).join("bin").join("java");
        if java.is_file() {
            return Some(java);
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("java"))
        .find(|java| java.is_file())
}

/// `zookeeper.jar` names its dependencies (jute, netty, slf4j-api, ...) in its manifest
/// `Class-Path`, so only the jar itself and an slf4j binding are needed.
fn default_classpath() -> Result<String, Error> {
    let dir = Path::new(JAR_DIR);
    let mut entries = Vec::new();
    for jar in ["zookeeper.jar", "zookeeper-jute.jar"] {
        let path = dir.join(jar);
        if !path.is_file() {
            return Err(Error::ZooKeeperNotFound {
                missing: path.display().to_string(),
            });
        }
        if jar == "zookeeper.jar" {
            entries.push(path);
        }
    }
    // The manifest lists the Netty jars ZooKeeper names itself, but not netty-codec, which
    // netty-handler's SslHandler extends: without it the Netty connection factory binds its
    // TLS port and then fails every handshake (NoClassDefFoundError ByteToMessageDecoder).
    // Debian's libnetty-java, a dependency of `zookeeper`, ships it beside the others.
    let codec = dir.join("netty-codec.jar");
    if codec.is_file() {
        entries.push(codec);
    }
    // slf4j-simple writes the server log to stderr, which the wrapper appends to a file.
    if let Some(binding) = ["slf4j-simple.jar", "slf4j-nop.jar"]
        .iter()
        .map(|jar| dir.join(jar))
        .find(|path| path.is_file())
    {
        entries.push(binding);
    }
    let joined =
        std::env::join_paths(entries).map_err(|err| Error::InvalidConfig(err.to_string()))?;
    Ok(joined.to_string_lossy().into_owned())
}

/// Settings chosen through [`ZooKeeperServerBuilder`].
#[derive(Clone, Debug)]
struct Settings {
    tick_time: Duration,
    min_session_timeout: Duration,
    max_session_timeout: Duration,
    container_check_interval: Duration,
    startup_timeout: Duration,
    // Boxed: they are rarely set, and a server handle stays small.
    tls: Option<Box<ServerTls>>,
    sasl: Box<SaslSettings>,
}

/// SASL chosen through [`ZooKeeperServerBuilder`]: DIGEST-MD5 users or a Kerberos service
/// (ZooKeeper serves one mechanism: GSSAPI when its login has a Kerberos principal, DIGEST-MD5
/// otherwise).
#[derive(Clone, Debug, Default)]
struct SaslSettings {
    digest_users: Vec<(String, String)>,
    kerberos: Option<KerberosService>,
    required: bool,
}

impl SaslSettings {
    fn enabled(&self) -> bool {
        !self.digest_users.is_empty() || self.kerberos.is_some()
    }

    fn validate(&self) -> Result<(), Error> {
        if !self.digest_users.is_empty() && self.kerberos.is_some() {
            return Err(Error::InvalidConfig(
                "ZooKeeper serves one SASL mechanism: choose DIGEST-MD5 users or Kerberos"
                    .to_owned(),
            ));
        }
        if self.required && !self.enabled() {
            return Err(Error::InvalidConfig(
                "SASL is required but neither DIGEST-MD5 users nor Kerberos are configured"
                    .to_owned(),
            ));
        }
        for (user, password) in &self.digest_users {
            let plain_user = !user.is_empty()
                && user
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if !plain_user {
                return Err(Error::InvalidConfig(format!(
                    "SASL user {user:?}: use letters, digits, `-`, `_` and `.` only"
                )));
            }
            if password
                .chars()
                .any(|c| c == '"' || c == '\\' || c.is_control())
            {
                return Err(Error::InvalidConfig(format!(
                    "the password of SASL user {user:?} contains a quote, a backslash or a control character"
                )));
            }
        }
        Ok(())
    }

    /// The `Server` section ZooKeeper logs in with.
    fn jaas(&self) -> String {
        let mut jaas = String::from("Server {\n");
        if let Some(kerberos) = &self.kerberos {
            jaas.push_str(&format!(
                "  com.sun.security.auth.module.Krb5LoginModule required\n    \
                 useKeyTab=true\n    keyTab=\"{keytab}\"\n    storeKey=true\n    \
                 useTicketCache=false\n    principal=\"{principal}\";\n",
                keytab = kerberos.keytab().display(),
                principal = kerberos.principal(),
            ));
        } else {
            jaas.push_str("  org.apache.zookeeper.server.auth.DigestLoginModule required");
            for (user, password) in &self.digest_users {
                jaas.push_str(&format!("\n    user_{user}=\"{password}\""));
            }
            jaas.push_str(";\n");
        }
        jaas.push_str("};\n");
        jaas
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tick_time: Duration::from_millis(100),
            min_session_timeout: Duration::from_millis(400),
            max_session_timeout: Duration::from_secs(60),
            container_check_interval: Duration::from_millis(100),
            startup_timeout: Duration::from_secs(30),
            tls: None,
            sasl: Box::default(),
        }
    }
}

impl Settings {
    fn validate(&self) -> Result<(), Error> {
        if self.tick_time.as_millis() == 0 {
            return Err(Error::InvalidConfig(
                "tick time must be at least 1ms".to_owned(),
            ));
        }
        if self.min_session_timeout > self.max_session_timeout {
            return Err(Error::InvalidConfig(format!(
                "min session timeout {:?} exceeds max session timeout {:?}",
                self.min_session_timeout, self.max_session_timeout
            )));
        }
        if self.container_check_interval.as_millis() == 0 {
            return Err(Error::InvalidConfig(
                "container check interval must be at least 1ms".to_owned(),
            ));
        }
        if let Some(tls) = &self.tls {
            for (what, path) in [
                ("key store", tls.key_store()),
                ("trust store", tls.trust_store()),
            ] {
                if !path.is_file() {
                    return Err(Error::InvalidConfig(format!(
                        "TLS {what} {} is not a file",
                        path.display()
                    )));
                }
            }
        }
        self.sasl.validate()
    }
}

/// Configures and starts a [`ZooKeeperServer`]; obtained from [`ZooKeeperServer::builder`].
///
/// Defaults: tick time 100 ms, session timeouts between 400 ms and 60 s, containers and TTL
/// nodes checked every 100 ms, 30 s allowed for startup.
#[derive(Clone, Debug, Default)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct ZooKeeperServerBuilder {
    settings: Settings,
}

impl ZooKeeperServerBuilder {
    /// Sets ZooKeeper's `tickTime`, its basic time unit (session expiry is checked once a tick).
    pub fn tick_time(mut self, tick_time: Duration) -> Self {
        self.settings.tick_time = tick_time;
        self
    }

    /// Sets the smallest session timeout the server grants (`minSessionTimeout`).
    pub fn min_session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.min_session_timeout = timeout;
        self
    }

    /// Sets the largest session timeout the server grants (`maxSessionTimeout`).
    pub fn max_session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.max_session_timeout = timeout;
        self
    }

    /// Sets how often the server looks for empty container nodes and expired TTL nodes
    /// (`znode.container.checkIntervalMs`).
    pub fn container_check_interval(mut self, interval: Duration) -> Self {
        self.settings.container_check_interval = interval;
        self
    }

    /// Sets how long a start or restart may take before it fails.
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.settings.startup_timeout = timeout;
        self
    }

    /// Serves TLS on a second free port (`secureClientPort`, through ZooKeeper's Netty
    /// connection factory) with the given key and trust stores; see
    /// [`ServerTls`] for client certificates and whether the plaintext port stays open, and
    /// [`TestCertificates::server_tls`](crate::tls::TestCertificates::server_tls) for
    /// settings made from test certificates.
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.settings.tls = Some(Box::new(tls));
        self
    }

    /// Accepts SASL DIGEST-MD5 logins of `user` with `password` (in addition to users
    /// added before). The server's JAAS `Server` section lists each user, and
    /// ZooKeeper's `SASLAuthenticationProvider` is enabled, so a node's ACL can name
    /// `sasl:<user>`. Users are letters, digits, `-`, `_` and `.`; passwords must not
    /// contain quotes or backslashes.
    pub fn sasl_digest_user(mut self, user: &str, password: &str) -> Self {
        self.settings
            .sasl
            .digest_users
            .push((user.to_owned(), password.to_owned()));
        self
    }

    /// Accepts SASL GSSAPI (Kerberos) logins: the server logs in as `service`'s principal
    /// from its keytab at startup (its log then says `Server successfully logged in.`) and
    /// its JVM reads `service`'s `krb5.conf`. See [`Kdc`](crate::kerberos::Kdc).
    pub fn kerberos(mut self, service: KerberosService) -> Self {
        self.settings.sasl.kerberos = Some(service);
        self
    }

    /// Makes every session authenticate through SASL before anything else
    /// (`sessionRequireClientSASLAuth=true`): other requests of a session that has not are
    /// refused and the connection closed. Needs [`sasl_digest_user`](Self::sasl_digest_user)
    /// or [`kerberos`](Self::kerberos).
    pub fn require_sasl(mut self, required: bool) -> Self {
        self.settings.sasl.required = required;
        self
    }

    /// Starts the server and blocks until it serves clients.
    ///
    /// Usable from any context, including initialisation of a `static`; inside an async
    /// runtime prefer [`start_async`](Self::start_async).
    pub fn start(self) -> Result<ZooKeeperServer, Error> {
        ZooKeeperServer::launch(self.settings)
    }

    /// Starts the server on a blocking thread of the current tokio runtime.
    ///
    /// # Errors
    /// ZooKeeper or Java missing (the message names the install command), a
    /// bad setting, or a server that did not come up in time.
    ///
    /// # Cancel safety
    /// The start runs on a blocking thread and goes on if the future is
    /// dropped; a server it starts then is stopped again as soon as that
    /// start returns (its handle is dropped).
    pub async fn start_async(self) -> Result<ZooKeeperServer, Error> {
        tokio::task::spawn_blocking(move || self.start())
            .await
            .map_err(|err| Error::io("start thread failed", std::io::Error::other(err)))?
    }
}

/// A running (or stopped) ZooKeeper server owned by a test.
///
/// Dropping it kills the server and deletes its directory. See the [module docs](self) for how
/// the JVM is cleaned up when the value is never dropped.
pub struct ZooKeeperServer {
    port: u16,
    secure_port: Option<u16>,
    launcher: Launcher,
    process: Mutex<Option<ServerProcess>>,
    // Declared last so the directory is removed after the process is gone.
    dir: TempDir,
}

impl fmt::Debug for ZooKeeperServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZooKeeperServer")
            .field("connect_string", &self.connect_string())
            .field("secure_port", &self.secure_port)
            .field("dir", &self.dir.path())
            .field("pid", &self.pid())
            .finish()
    }
}

impl ZooKeeperServer {
    /// Returns a builder to configure the server before starting it.
    pub fn builder() -> ZooKeeperServerBuilder {
        ZooKeeperServerBuilder::default()
    }

    /// Starts a server with default settings, blocking until it serves clients.
    pub fn start() -> Result<Self, Error> {
        Self::builder().start()
    }

    /// Starts a server with default settings on a blocking thread of the current tokio runtime.
    ///
    /// # Errors
    /// ZooKeeper or Java missing (the message names the install command), a
    /// bad setting, or a server that did not come up in time.
    ///
    /// # Cancel safety
    /// The start runs on a blocking thread and goes on if the future is
    /// dropped; a server it starts then is stopped again as soon as that
    /// start returns (its handle is dropped).
    pub async fn start_async() -> Result<Self, Error> {
        Self::builder().start_async().await
    }

    fn launch(settings: Settings) -> Result<Self, Error> {
        settings.validate()?;
        let installation = Installation::locate()?;
        sweep_abandoned_dirs();
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir()
            .map_err(|err| Error::io("cannot create temporary directory", err))?;
        fs::write(dir.path().join(OWNER_FILE), std::process::id().to_string())
            .map_err(|err| Error::io("cannot write owner file", err))?;
        let data_dir = dir.path().join("data");
        fs::create_dir_all(&data_dir)
            .map_err(|err| Error::io("cannot create data directory", err))?;
        let mut last_error = None;
        for attempt in 1..=START_PORT_ATTEMPTS {
            let port = free_port()?;
            let secure_port = match settings.tls {
                Some(_) => Some(free_port_other_than(port)?),
                None => None,
            };
            let launcher = Launcher {
                installation: installation.clone(),
                settings: settings.clone(),
                root: dir.path().into(),
                port,
                secure_port,
            };
            match launcher.spawn_and_wait() {
                Ok(process) => {
                    return Ok(ZooKeeperServer {
                        port,
                        secure_port,
                        launcher,
                        process: Mutex::new(Some(process)),
                        dir,
                    });
                }
                Err(err @ Error::ServerExited { .. }) if is_bind_failure(&err) => {
                    debug!(
                        port,
                        attempt, "port was taken before ZooKeeper could bind it; trying another"
                    );
                    last_error = Some(err);
                }
                Err(err) => return Err(err),
            }
        }
        Err(last_error
            .unwrap_or_else(|| Error::InvalidConfig("no port attempt was made".to_owned())))
    }

    /// Returns the connect string for clients, `127.0.0.1:PORT`.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Returns the plaintext client port, which stays the same across
    /// [`restart`](Self::restart).
    ///
    /// A server serving TLS only (see [`ServerTls::plaintext_port`]) keeps this port number
    /// reserved but does not listen on it: connecting to it is refused.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the plaintext [`port`](Self::port) is served (always, unless TLS only).
    pub fn serves_plaintext(&self) -> bool {
        self.launcher.serves_plaintext()
    }

    /// Returns the TLS client port (`secureClientPort`), if the server was built with
    /// [`ZooKeeperServerBuilder::tls`]; it stays the same across restarts.
    pub fn secure_port(&self) -> Option<u16> {
        self.secure_port
    }

    /// Returns the TLS client address, `127.0.0.1:SECURE_PORT`.
    pub fn secure_address(&self) -> Option<SocketAddr> {
        self.secure_port
            .map(|port| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)))
    }

    /// Returns the connect string of the TLS port, `tcp+tls://127.0.0.1:SECURE_PORT`.
    pub fn secure_connect_string(&self) -> Option<String> {
        self.secure_port
            .map(|port| format!("tcp+tls://127.0.0.1:{port}"))
    }

    /// Returns the client address, `127.0.0.1:PORT`.
    pub fn address(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// Returns ZooKeeper's data directory (snapshots and transaction logs).
    pub fn data_dir(&self) -> PathBuf {
        self.launcher.data_dir()
    }

    /// Returns the file receiving the server log and the JVM's output (appended across restarts).
    pub fn log_path(&self) -> PathBuf {
        self.launcher.log_path()
    }

    /// Returns the last `lines` lines of the server log, for diagnostics.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_lines(&self.log_path(), lines)
    }

    /// Returns the process id of the running JVM, or `None` when stopped.
    pub fn pid(&self) -> Option<u32> {
        self.lock().as_ref().map(|process| process.java_pid)
    }

    /// Returns whether the server process is alive (it may have died since it was started,
    /// e.g. when killed from outside).
    pub fn is_running(&self) -> bool {
        match self.lock().as_mut() {
            Some(process) => matches!(process.child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills the server (SIGKILL, like a crash) and blocks until the process is gone.
    ///
    /// The port and the data directory are kept so [`restart`](Self::restart) brings the same
    /// data back. Connected clients see their connections drop; sessions are not closed, so
    /// they survive a restart that happens before they time out. Stopping a stopped server
    /// does nothing.
    pub fn stop(&self) {
        let process = self.lock().take();
        if let Some(process) = process {
            process.shutdown();
            info!(port = self.port, "ZooKeeper test server stopped");
        }
    }

    /// Stops the server if it runs, then starts it again on the same port with the same data,
    /// blocking until it serves clients.
    pub fn restart(&self) -> Result<(), Error> {
        let mut slot = self.lock();
        if let Some(process) = slot.take() {
            process.shutdown();
        }
        *slot = Some(self.launcher.spawn_and_wait_for_port()?);
        info!(port = self.port, "ZooKeeper test server restarted");
        Ok(())
    }

    /// Like [`restart`](Self::restart), but waits for the server on a blocking thread of the
    /// current tokio runtime, so the runtime's other tasks (clients) keep running meanwhile.
    ///
    /// # Errors
    /// The server could not be started again in time.
    ///
    /// # Cancel safety
    /// The restart runs on a blocking thread and goes on if the future is
    /// dropped: the server may still come up afterwards.
    pub async fn restart_async(&self) -> Result<(), Error> {
        self.stop();
        let launcher = self.launcher.clone();
        let process = tokio::task::spawn_blocking(move || launcher.spawn_and_wait_for_port())
            .await
            .map_err(|err| Error::io("restart thread failed", std::io::Error::other(err)))??;
        let mut slot = self.lock();
        if let Some(previous) = slot.replace(process) {
            // A concurrent restart got there first; keep the newest process only.
            previous.shutdown();
        }
        info!(port = self.port, "ZooKeeper test server restarted");
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Option<ServerProcess>> {
        self.process
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for ZooKeeperServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Everything needed to launch the JVM for one server; cheap to clone and `'static`, so that
/// launching can move to a blocking thread.
#[derive(Clone, Debug)]
struct Launcher {
    installation: Installation,
    settings: Settings,
    root: PathBuf,
    port: u16,
    secure_port: Option<u16>,
}

impl Launcher {
    fn serves_plaintext(&self) -> bool {
        self.settings
            .tls
            .as_ref()
            .is_none_or(|tls| tls.serves_plaintext())
    }

    fn jaas_path(&self) -> PathBuf {
        self.root.join(JAAS_FILE)
    }

    fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.root.join("zookeeper.log")
    }

    fn config_path(&self) -> PathBuf {
        self.root.join("zoo.cfg")
    }

    fn config(&self) -> String {
        let s = &self.settings;
        let mut listeners = String::new();
        if self.serves_plaintext() {
            listeners.push_str(&format!(
                "clientPort={}\nclientPortAddress=127.0.0.1\n",
                self.port
            ));
        }
        if let (Some(tls), Some(secure_port)) = (&s.tls, self.secure_port) {
            listeners.push_str(&format!(
                "secureClientPort={secure_port}\nsecureClientPortAddress=127.0.0.1\n"
            ));
            listeners.push_str(&tls.config_lines());
        }
        if s.sasl.enabled() {
            listeners.push_str(
                "authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n",
            );
            if s.sasl.required {
                listeners.push_str("sessionRequireClientSASLAuth=true\n");
            }
        }
        format!(
            "tickTime={tick}\n\
             {listeners}\
             dataDir={data}\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             extendedTypesEnabled=true\n\
             minSessionTimeout={min}\n\
             maxSessionTimeout={max}\n\
             maxClientCnxns=0\n\
             standaloneEnabled=true\n",
            tick = s.tick_time.as_millis(),
            data = self.data_dir().display(),
            min = s.min_session_timeout.as_millis(),
            max = s.max_session_timeout.as_millis(),
        )
    }

    fn jvm_args(&self) -> Vec<String> {
        let mut args = jvm_args(self.settings.container_check_interval);
        if self.settings.sasl.enabled() {
            args.push(format!(
                "-Djava.security.auth.login.config={}",
                self.jaas_path().display()
            ));
        }
        if let Some(kerberos) = &self.settings.sasl.kerberos {
            args.push(format!(
                "-Djava.security.krb5.conf={}",
                kerberos.krb5_conf().display()
            ));
        }
        args
    }

    /// Spawns the JVM on this launcher's port and waits until it serves; on a restart the port
    /// may briefly still be taken, so binding failures are retried for a while.
    fn spawn_and_wait_for_port(&self) -> Result<ServerProcess, Error> {
        let deadline = Instant::now() + RESTART_BIND_PATIENCE;
        loop {
            match self.spawn_and_wait() {
                Err(err @ Error::ServerExited { .. })
                    if is_bind_failure(&err) && Instant::now() < deadline =>
                {
                    debug!(port = self.port, "port still taken; retrying restart");
                    thread::sleep(Duration::from_millis(100));
                }
                other => return other,
            }
        }
    }

    fn spawn_and_wait(&self) -> Result<ServerProcess, Error> {
        let started = Instant::now();
        let mut process = self.spawn()?;
        match self.wait_until_serving(&mut process) {
            Ok(()) => {
                info!(
                    port = self.port,
                    pid = process.java_pid,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "ZooKeeper test server is serving"
                );
                Ok(process)
            }
            Err(err) => {
                process.shutdown();
                Err(err)
            }
        }
    }

    fn spawn(&self) -> Result<ServerProcess, Error> {
        fs::write(self.config_path(), self.config())
            .map_err(|err| Error::io("cannot write zoo.cfg", err))?;
        if self.settings.sasl.enabled() {
            fs::write(self.jaas_path(), self.settings.sasl.jaas())
                .map_err(|err| Error::io("cannot write the JAAS file", err))?;
        }
        spawn_wrapped(
            &self.installation,
            &self.jvm_args(),
            &self.config_path(),
            &self.log_path(),
            &self.root,
            self.port,
        )
    }

    fn wait_until_serving(&self, process: &mut ServerProcess) -> Result<(), Error> {
        let timeout = self.settings.startup_timeout;
        let deadline = Instant::now() + timeout;
        let address = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port));
        loop {
            match process.child.try_wait() {
                Ok(Some(status)) => return Err(self.exited(status, process.log_offset)),
                Ok(None) => {}
                Err(err) => return Err(Error::io("cannot poll ZooKeeper process", err)),
            }
            if self.is_ready(address, process.log_offset) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::StartTimeout {
                    timeout,
                    log: self.log_path(),
                    log_tail: tail_lines(&self.log_path(), ERROR_LOG_LINES),
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Whether this process serves every listener it was given: `srvr` answers on the
    /// plaintext port; with TLS, the server also logged that it runs and the TLS port accepts
    /// connections (a probe through TLS would need a certificate the server trusts).
    fn is_ready(&self, plaintext: SocketAddr, log_offset: u64) -> bool {
        let Some(secure_port) = self.secure_port else {
            return is_serving(plaintext);
        };
        if self.serves_plaintext() && !is_serving(plaintext) {
            return false;
        }
        log_since_contains(&self.log_path(), log_offset, STANDALONE_READY_LINE)
            && TcpStream::connect_timeout(
                &SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, secure_port)),
                Duration::from_millis(500),
            )
            .is_ok()
    }

    /// Describes an early exit with the output of that process only, so that an earlier
    /// attempt's failure in the same (appended) log is not mistaken for this one's.
    fn exited(&self, status: ExitStatus, log_offset: u64) -> Error {
        exit_error(status, &self.log_path(), log_offset)
    }
}

/// The JVM options of every test server (also the cluster's): a small heap and cheap
/// compilation, no fsync, and containers reaped every `container_check_interval`.
pub(crate) fn jvm_args(container_check_interval: Duration) -> Vec<String> {
    vec![
        // Small heap, cheap collector and the C1 compiler only: a test server is small and
        // short lived, and this keeps memory low when many run side by side.
        "-Xms16m".to_owned(),
        "-Xmx128m".to_owned(),
        "-XX:+UseSerialGC".to_owned(),
        "-XX:TieredStopAtLevel=1".to_owned(),
        // No hsperfdata files left behind in /tmp by a killed JVM.
        "-XX:-UsePerfData".to_owned(),
        "-Djava.awt.headless=true".to_owned(),
        format!(
            "-Dznode.container.checkIntervalMs={}",
            container_check_interval.as_millis()
        ),
        "-Dznode.container.maxPerMinute=100000".to_owned(),
        // Durability against machine crashes is useless here; skipping fsync makes writes
        // fast, and a killed process loses nothing that was written.
        "-Dzookeeper.forceSync=no".to_owned(),
        // Transaction logs are preallocated in steps of this many KiB (default 64 MiB).
        "-Dzookeeper.preAllocSize=1024".to_owned(),
        "-Dzookeeper.jmx.log4j.disable=true".to_owned(),
        "-Dorg.slf4j.simpleLogger.showDateTime=true".to_owned(),
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS".to_owned(),
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=info".to_owned(),
    ]
}

/// Launches `java ... QuorumPeerMain <config_path>` under the wrapper (see the module docs),
/// appending its output to `log_path`, and returns once the wrapper reported the JVM's pid.
/// `port` is only logged.
pub(crate) fn spawn_wrapped(
    installation: &Installation,
    jvm_args: &[String],
    config_path: &Path,
    log_path: &Path,
    root: &Path,
    port: u16,
) -> Result<ServerProcess, Error> {
    let mut args: Vec<OsString> = jvm_args.iter().map(OsString::from).collect();
    args.push("-cp".into());
    args.push(installation.classpath.clone().into());
    args.push(MAIN_CLASS.into());
    args.push(config_path.into());
    let process = spawn_owned(&installation.java, &args, &[], log_path, root, "ZooKeeper")?;
    debug!(
        port,
        java_pid = process.java_pid,
        wrapper_pid = process.child.id(),
        "ZooKeeper JVM launched"
    );
    Ok(process)
}

/// Whether the part of `log` written after `offset` contains `needle`.
fn log_since_contains(log: &Path, offset: u64, needle: &str) -> bool {
    let Ok(bytes) = fs::read(log) else {
        return false;
    };
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).contains(needle)
}

/// A free port that is not `taken` (two free ports asked for in a row may be the same).
fn free_port_other_than(taken: u16) -> Result<u16, Error> {
    for _ in 0..START_PORT_ATTEMPTS {
        let port = free_port()?;
        if port != taken {
            return Ok(port);
        }
    }
    Err(Error::InvalidConfig(format!(
        "the system kept handing out port {taken} as free"
    )))
}

/// Asks the server for `srvr`; it answers with a `Mode:` line only once it serves requests
/// (`ruok` answers `imok` earlier than that).
fn is_serving(address: SocketAddr) -> bool {
    matches!(four_letter(address, "srvr"), Ok(reply) if reply.contains("Mode:"))
}

/// Sends a four-letter command and returns the whole reply (connect within 500 ms, reply within
/// a second).
pub(crate) fn four_letter(address: SocketAddr, word: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    stream.write_all(word.as_bytes())?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply)
}

pub(crate) fn is_bind_failure(err: &Error) -> bool {
    matches!(err, Error::ServerExited { log_tail, .. }
        if log_tail.contains("Address already in use") || log_tail.contains("BindException"))
}
