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

// This file holds the public handle and its builder. The parts they stand on, which the
// cluster's nodes use too: `install` (where `java` and the jars are) and `config` (what the
// server is told: its settings, `zoo.cfg`, JAAS file and JVM options) know neither each other
// nor this file; `launch` (starting the JVM and waiting until it serves) builds on both.
pub(crate) mod config;
pub(crate) mod install;
pub(crate) mod launch;
#[cfg(test)]
pub(crate) mod zoo_cfg_golden;

use std::fmt;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;

use tempfile::TempDir;
use tracing::info;

use crate::error::Error;
use crate::kerberos::KerberosService;
use crate::process::{free_port, on_blocking_thread, tail_lines, ProcessSlot};
use crate::tls::ServerTls;
use config::Settings;
use launch::{free_port_other_than, make_root, on_free_ports, Launcher};

pub use install::{zookeeper_available, CLASSPATH_ENV};

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
    config::server_setters!("the server", settings);

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
        on_blocking_thread("start thread failed", move || self.start()).await
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
    process: ProcessSlot,
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
        let (installation, dir) = make_root("")?;
        let data_dir = dir.path().join("data");
        fs::create_dir_all(&data_dir)
            .map_err(|err| Error::io("cannot create data directory", err))?;
        let (launcher, process) = on_free_ports(|| {
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
                member: None,
            };
            let process = launcher.spawn_and_wait()?;
            Ok((launcher, process))
        })?;
        Ok(ZooKeeperServer {
            port: launcher.port,
            secure_port: launcher.secure_port,
            launcher,
            process: ProcessSlot::new(process),
            dir,
        })
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
        self.process.pid()
    }

    /// Returns whether the server process is alive (it may have died since it was started,
    /// e.g. when killed from outside).
    pub fn is_running(&self) -> bool {
        self.process.is_running()
    }

    /// Kills the server (SIGKILL, like a crash) and blocks until the process is gone.
    ///
    /// The port and the data directory are kept so [`restart`](Self::restart) brings the same
    /// data back. Connected clients see their connections drop; sessions are not closed, so
    /// they survive a restart that happens before they time out. Stopping a stopped server
    /// does nothing.
    pub fn stop(&self) {
        if let Some(process) = self.process.take() {
            process.shutdown();
            info!(port = self.port, "ZooKeeper test server stopped");
        }
    }

    /// Stops the server if it runs, then starts it again on the same port with the same data,
    /// blocking until it serves clients.
    pub fn restart(&self) -> Result<(), Error> {
        let mut slot = self.process.lock();
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
        let process = on_blocking_thread("restart thread failed", move || {
            launcher.spawn_and_wait_for_port()
        })
        .await?;
        self.process.install(process);
        info!(port = self.port, "ZooKeeper test server restarted");
        Ok(())
    }
}

impl Drop for ZooKeeperServer {
    fn drop(&mut self) {
        self.stop();
    }
}
