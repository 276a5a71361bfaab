//! Starting ZooKeeper JVMs and waiting until they serve: [`Launcher`] for one server, a
//! standalone one or a member of an ensemble, and [`spawn_all_and_wait`] for servers that must
//! start together (an ensemble serves once a quorum of its members runs); the wrapped `java`
//! command, the `srvr` probe, how a port that is still taken shows, and the tries on fresh
//! free ports.

use std::ffi::OsString;
use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tracing::{debug, info};

use crate::error::Error;
use crate::process::{
    exit_error, free_port, spawn_owned, sweep_abandoned_dirs, tail_lines, ServerProcess,
    DIR_PREFIX, ERROR_LOG_LINES, OWNER_FILE, POLL_INTERVAL, START_PORT_ATTEMPTS,
};
use crate::server::config::{Member, Settings};
use crate::server::install::Installation;

/// Java entry point of a ZooKeeper server (standalone when the config lists no peers).
const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// How long a restart keeps retrying while its fixed port is still taken.
const RESTART_BIND_PATIENCE: Duration = Duration::from_secs(5);

/// Logged by a standalone server once every listener is bound and the server runs: its
/// container manager is made right after the last connection factory started.
const STANDALONE_READY_LINE: &str = "Using checkIntervalMs=";

/// The JAAS file of a server with SASL, in its directory.
const JAAS_FILE: &str = "jaas.conf";

/// Everything needed to launch the JVM for one server; cheap to clone and `'static`, so that
/// launching can move to a blocking thread.
#[derive(Clone, Debug)]
pub(crate) struct Launcher {
    pub(crate) installation: Installation,
    pub(crate) settings: Settings,
    /// The server's directory: its `zoo.cfg`, JAAS file, data directory and log.
    pub(crate) root: PathBuf,
    pub(crate) port: u16,
    pub(crate) secure_port: Option<u16>,
    /// What makes it a member of an ensemble; `None` for a standalone server.
    pub(crate) member: Option<Member>,
}

impl Launcher {
    pub(crate) fn serves_plaintext(&self) -> bool {
        self.settings.serves_plaintext()
    }

    fn jaas_path(&self) -> PathBuf {
        self.root.join(JAAS_FILE)
    }

    pub(crate) fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    pub(crate) fn log_path(&self) -> PathBuf {
        self.root.join("zookeeper.log")
    }

    fn config_path(&self) -> PathBuf {
        self.root.join("zoo.cfg")
    }

    /// The client address, `127.0.0.1:PORT`.
    pub(crate) fn address(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// Writes the server's `zoo.cfg` and, with SASL, its JAAS file.
    pub(crate) fn write_config(&self) -> Result<(), Error> {
        let config = self.settings.zoo_cfg(
            self.port,
            self.secure_port,
            &self.data_dir(),
            self.member.as_ref(),
        );
        fs::write(self.config_path(), config)
            .map_err(|err| Error::io("cannot write zoo.cfg", err))?;
        if self.settings.sasl.enabled() {
            fs::write(self.jaas_path(), self.settings.sasl.jaas())
                .map_err(|err| Error::io("cannot write the JAAS file", err))?;
        }
        Ok(())
    }

    /// Makes a member's directory afresh, whatever was there before: an empty data directory
    /// holding its `myid`, and its configuration.
    pub(crate) fn prepare_member(&self) -> Result<(), Error> {
        let data = self.data_dir();
        if data.exists() {
            fs::remove_dir_all(&data)
                .map_err(|err| Error::io("cannot clear data directory", err))?;
        }
        fs::create_dir_all(&data).map_err(|err| Error::io("cannot create data directory", err))?;
        if let Some(member) = &self.member {
            fs::write(data.join("myid"), format!("{}\n", member.myid))
                .map_err(|err| Error::io("cannot write myid", err))?;
        }
        self.write_config()
    }

    /// Writes the configuration, spawns the JVM on this launcher's port and waits until it
    /// serves; on a restart the port may briefly still be taken, so binding failures are
    /// retried for a while.
    pub(crate) fn spawn_and_wait_for_port(&self) -> Result<ServerProcess, Error> {
        self.write_config()?;
        let batch = std::slice::from_ref(self);
        respawn_all_and_wait(batch, self.settings.startup_timeout).and_then(only)
    }

    /// Writes the configuration, spawns the JVM and waits until it serves.
    pub(crate) fn spawn_and_wait(&self) -> Result<ServerProcess, Error> {
        self.write_config()?;
        let batch = std::slice::from_ref(self);
        spawn_all_and_wait(batch, self.settings.startup_timeout).and_then(only)
    }

    fn spawn(&self) -> Result<ServerProcess, Error> {
        spawn_wrapped(
            &self.installation,
            &self.settings.jvm_args(&self.jaas_path()),
            &self.config_path(),
            &self.log_path(),
            &self.root,
            self.port,
        )
    }

    /// Whether this process serves every listener it was given: `srvr` answers on the
    /// plaintext port; with TLS, the server also logged that it runs and the TLS port accepts
    /// connections (a probe through TLS would need a certificate the server trusts).
    fn is_ready(&self, log_offset: u64) -> bool {
        let Some(secure_port) = self.secure_port else {
            return is_serving(self.address());
        };
        if self.serves_plaintext() && !is_serving(self.address()) {
            return false;
        }
        log_since_contains(&self.log_path(), log_offset, STANDALONE_READY_LINE)
            && TcpStream::connect_timeout(
                &SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, secure_port)),
                Duration::from_millis(500),
            )
            .is_ok()
    }
}

/// The one process of a batch of one.
fn only(mut processes: Vec<ServerProcess>) -> Result<ServerProcess, Error> {
    processes
        .pop()
        .ok_or_else(|| Error::InvalidConfig("no server was launched".to_owned()))
}

/// Spawns every server of `launchers` at once (an ensemble needs a quorum before any member
/// serves) and waits until all of them serve, at most `timeout`; their configuration must be
/// written. On failure every process of the batch is gone.
pub(crate) fn spawn_all_and_wait(
    launchers: &[Launcher],
    timeout: Duration,
) -> Result<Vec<ServerProcess>, Error> {
    let started = Instant::now();
    let mut processes = Vec::with_capacity(launchers.len());
    for launcher in launchers {
        match launcher.spawn() {
            Ok(process) => processes.push(process),
            Err(err) => {
                shutdown_all(processes);
                return Err(err);
            }
        }
    }
    match wait_until_serving(launchers, &mut processes, timeout) {
        Ok(()) => {
            info!(
                ports = ?launchers.iter().map(|l| l.port).collect::<Vec<_>>(),
                pids = ?processes.iter().map(|p| p.java_pid).collect::<Vec<_>>(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "ZooKeeper test servers are serving"
            );
            Ok(processes)
        }
        Err(err) => {
            shutdown_all(processes);
            Err(err)
        }
    }
}

/// Like [`spawn_all_and_wait`] on fixed ports: a port a killed server held may briefly be
/// unavailable, so binding failures are retried for a while.
pub(crate) fn respawn_all_and_wait(
    launchers: &[Launcher],
    timeout: Duration,
) -> Result<Vec<ServerProcess>, Error> {
    let deadline = Instant::now() + RESTART_BIND_PATIENCE;
    loop {
        match spawn_all_and_wait(launchers, timeout) {
            Err(err) if is_bind_failure(&err) && Instant::now() < deadline => {
                debug!(
                    ports = ?launchers.iter().map(|l| l.port).collect::<Vec<_>>(),
                    "a port is still taken; retrying the restart"
                );
                thread::sleep(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// Polls `processes` (started by `launchers`, in order) until every one serves, one of them
/// exits, or `timeout` passes (the error then shows the log of the first that did not serve).
fn wait_until_serving(
    launchers: &[Launcher],
    processes: &mut [ServerProcess],
    timeout: Duration,
) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    loop {
        for (launcher, process) in launchers.iter().zip(processes.iter_mut()) {
            match process.child.try_wait() {
                Ok(Some(status)) => {
                    // Only the output of that process, so that an earlier attempt's failure
                    // in the same (appended) log is not mistaken for this one's.
                    return Err(exit_error(status, &launcher.log_path(), process.log_offset));
                }
                Ok(None) => {}
                Err(err) => return Err(Error::io("cannot poll ZooKeeper process", err)),
            }
        }
        let waiting = launchers
            .iter()
            .zip(processes.iter())
            .find(|(launcher, process)| !launcher.is_ready(process.log_offset));
        let Some((waiting, _)) = waiting else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            return Err(Error::StartTimeout {
                timeout,
                log: waiting.log_path(),
                log_tail: tail_lines(&waiting.log_path(), ERROR_LOG_LINES),
            });
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// Kills every process at once (closing all pipes first), then waits for each to be gone.
pub(crate) fn shutdown_all(mut processes: Vec<ServerProcess>) {
    for process in &mut processes {
        drop(process.stdin.take());
    }
    for process in processes {
        process.shutdown();
    }
}

/// Finds ZooKeeper and makes the directory of a test's servers, named `DIR_PREFIX` then
/// `kind`, owned by this process (after removing those of processes that are gone).
pub(crate) fn make_root(kind: &str) -> Result<(Installation, TempDir), Error> {
    let installation = Installation::locate()?;
    sweep_abandoned_dirs();
    let dir = tempfile::Builder::new()
        .prefix(&format!("{DIR_PREFIX}{kind}"))
        .tempdir()
        .map_err(|err| Error::io("cannot create temporary directory", err))?;
    fs::write(dir.path().join(OWNER_FILE), std::process::id().to_string())
        .map_err(|err| Error::io("cannot write owner file", err))?;
    Ok((installation, dir))
}

/// Runs `launch` until ZooKeeper could bind the ports it was given: free ports may be taken
/// by someone else before the JVM binds them, so `launch` is tried again (to pick other free
/// ports) up to `START_PORT_ATTEMPTS` times while that is why it failed.
pub(crate) fn on_free_ports<T>(mut launch: impl FnMut() -> Result<T, Error>) -> Result<T, Error> {
    let mut last_error = None;
    for attempt in 1..=START_PORT_ATTEMPTS {
        match launch() {
            Ok(launched) => return Ok(launched),
            Err(err) if is_bind_failure(&err) => {
                debug!(
                    attempt,
                    "a port was taken before ZooKeeper could bind it; trying other ports"
                );
                last_error = Some(err);
            }
            Err(err) => return Err(err),
        }
    }
    Err(last_error.unwrap_or_else(|| Error::InvalidConfig("no port attempt was made".to_owned())))
}

/// Launches `java ... QuorumPeerMain <config_path>` under the `sh` wrapper that kills the JVM
/// when the test lets go of it (see [the server module](crate::server)), appending its output
/// to `log_path`, and returns once the wrapper reported the JVM's pid. `port` is only logged.
fn spawn_wrapped(
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
pub(crate) fn free_port_other_than(taken: u16) -> Result<u16, Error> {
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
fn is_bind_failure(err: &Error) -> bool {
    matches!(err, Error::ServerExited { log_tail, .. }
        if log_tail.contains("Address already in use")
            || log_tail.contains("BindException")
            // A quorum member whose election port was taken; the exception itself may be
            // further up the log than the tail.
            || log_tail.contains("electionPortBindRetry"))
}
