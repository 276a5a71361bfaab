//! Starting a ZooKeeper JVM and waiting until it serves: [`Launcher`] for one standalone
//! server, and the pieces the cluster's nodes are launched with too (the wrapped `java`
//! command, the `srvr` probe, and how a port that is still taken shows).

use std::ffi::OsString;
use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::thread;
use std::time::{Duration, Instant};

use tracing::{debug, info};

use crate::error::Error;
use crate::process::{
    exit_error, free_port, spawn_owned, tail_lines, ServerProcess, ERROR_LOG_LINES, POLL_INTERVAL,
    START_PORT_ATTEMPTS,
};
use crate::server::config::Settings;
use crate::server::install::Installation;

/// Java entry point of a ZooKeeper server (standalone when the config lists no peers).
const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// How long a restart keeps retrying while its fixed port is still taken.
pub(crate) const RESTART_BIND_PATIENCE: Duration = Duration::from_secs(5);

/// Logged by a standalone server once every listener is bound and the server runs: its
/// container manager is made right after the last connection factory started.
const STANDALONE_READY_LINE: &str = "Using checkIntervalMs=";

/// The JAAS file of a server with SASL, in its directory.
const JAAS_FILE: &str = "jaas.conf";

/// Everything needed to launch the JVM for one server; cheap to clone and `'static`, so that
/// launching can move to a blocking thread.
#[derive(Clone, Debug)]
pub(super) struct Launcher {
    pub(super) installation: Installation,
    pub(super) settings: Settings,
    /// The server's directory: its `zoo.cfg`, JAAS file, data directory and log.
    pub(super) root: PathBuf,
    pub(super) port: u16,
    pub(super) secure_port: Option<u16>,
}

impl Launcher {
    pub(super) fn serves_plaintext(&self) -> bool {
        self.settings.serves_plaintext()
    }

    fn jaas_path(&self) -> PathBuf {
        self.root.join(JAAS_FILE)
    }

    pub(super) fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    pub(super) fn log_path(&self) -> PathBuf {
        self.root.join("zookeeper.log")
    }

    fn config_path(&self) -> PathBuf {
        self.root.join("zoo.cfg")
    }

    /// Spawns the JVM on this launcher's port and waits until it serves; on a restart the port
    /// may briefly still be taken, so binding failures are retried for a while.
    pub(super) fn spawn_and_wait_for_port(&self) -> Result<ServerProcess, Error> {
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

    pub(super) fn spawn_and_wait(&self) -> Result<ServerProcess, Error> {
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
        let config = self
            .settings
            .zoo_cfg(self.port, self.secure_port, &self.data_dir());
        fs::write(self.config_path(), config)
            .map_err(|err| Error::io("cannot write zoo.cfg", err))?;
        if self.settings.sasl.enabled() {
            fs::write(self.jaas_path(), self.settings.sasl.jaas())
                .map_err(|err| Error::io("cannot write the JAAS file", err))?;
        }
        spawn_wrapped(
            &self.installation,
            &self.settings.jvm_args(&self.jaas_path()),
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

/// Launches `java ... QuorumPeerMain <config_path>` under the `sh` wrapper that kills the JVM
/// when the test lets go of it (see [the server module](crate::server)), appending its output
/// to `log_path`, and returns once the wrapper reported the JVM's pid. `port` is only logged.
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
    args.push(installation.classpath().into());
    args.push(MAIN_CLASS.into());
    args.push(config_path.into());
    let process = spawn_owned(installation.java(), &args, &[], log_path, root, "ZooKeeper")?;
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
pub(super) fn free_port_other_than(taken: u16) -> Result<u16, Error> {
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

/// Whether a server exited because its port was taken (ZooKeeper could not bind it).
pub(crate) fn is_bind_failure(err: &Error) -> bool {
    matches!(err, Error::ServerExited { log_tail, .. }
        if log_tail.contains("Address already in use")
            || log_tail.contains("BindException")
            // A quorum member whose election port was taken; the exception itself may be
            // further up the log than the tail.
            || log_tail.contains("electionPortBindRetry"))
}
