//! The bench's own Apache ZooKeeper: configured like a production server
//! (not like the test servers of `zk-curator-testing`, which skip fsync and
//! cap the heap at 128 MB), so that the figures mean what they would in
//! production and the scale workloads meet the heap a real server has.
//!
//! * `forceSync=yes` (ZooKeeper's default): every write is fsynced;
//! * `-Xmx1000m`: the heap `zkServer.sh` gives a server by default
//!   (`ZK_SERVER_HEAP=1000` in `zkEnv.sh`), default GC and JIT;
//! * `-XX:+ExitOnOutOfMemoryError`: as `zkServer.sh`'s
//!   `-XX:OnOutOfMemoryError='kill -9 %p'`, a server out of heap is gone
//!   (and the bench can say so) instead of limping on;
//! * `maxClientCnxns=0`: every contender keeps up to 32 sessions from
//!   127.0.0.1, more than the default 60 connections per host.
//!
//! The TLS workload starts a second one with [`BenchServer::start_tls`]: the
//! same settings, plus a `secureClientPort` beside the plain client port.
//! ZooKeeper serves TLS only through Netty, so that server runs Netty's
//! connection factory (`NettyServerCnxnFactory`) on both ports, where the
//! first one runs ZooKeeper's default (NIO).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zk_curator_testing::ServerTls;

use super::limits::BoxError;

/// The heap of the bench's server (ZooKeeper's `zkEnv.sh` default).
pub(crate) const HEAP: &str = "1000m";
const START_LIMIT: Duration = Duration::from_secs(60);

/// One standalone ZooKeeper JVM; stopped (killed by its own handle) on drop.
pub(crate) struct BenchServer {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
    /// The TLS port ([`BenchServer::start_tls`]).
    secure_port: Option<u16>,
}

impl BenchServer {
    pub(crate) fn start() -> Result<BenchServer, BoxError> {
        Self::start_with(None)
    }

    /// The server's process (the JVM itself).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A server that also serves TLS on a second port, with `tls`'s key
    /// store, trust store and client-certificate rule (`ssl.clientAuth`).
    pub(crate) fn start_tls(tls: &ServerTls) -> Result<BenchServer, BoxError> {
        Self::start_with(Some(tls))
    }

    fn start_with(tls: Option<&ServerTls>) -> Result<BenchServer, BoxError> {
        let dir = tempfile::Builder::new()
            .prefix("zk-bench-server-")
            .tempdir()?;
        // Both listeners are held until both ports are known, so that the
        // two differ.
        let plain = TcpListener::bind("127.0.0.1:0")?;
        let secure = tls.map(|_| TcpListener::bind("127.0.0.1:0")).transpose()?;
        let port = plain.local_addr()?.port();
        let secure_port = secure
            .as_ref()
            .map(|l| l.local_addr())
            .transpose()?
            .map(|a| a.port());
        drop((plain, secure));
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data)?;
        let config = dir.path().join("zoo.cfg");
        let mut settings = format!(
            "tickTime=2000\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
             4lw.commands.whitelist=*\nadmin.enableServer=false\nmaxClientCnxns=0\n",
            data.display()
        );
        if let (Some(tls), Some(secure_port)) = (tls, secure_port) {
            // Keys ZooKeeper does not know become `zookeeper.*` system
            // properties, where its TLS settings are read from.
            settings += &format!(
                "secureClientPort={secure_port}\nsecureClientPortAddress=127.0.0.1\n\
                 serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                 ssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
                 ssl.trustStore.location={}\nssl.trustStore.type=PEM\n\
                 ssl.clientAuth={}\n\
                 authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider\n",
                tls.key_store().display(),
                tls.trust_store().display(),
                tls.client_auth_mode().as_property(),
            );
        }
        std::fs::write(&config, settings)?;
        let classpath = classpath(tls.is_some());
        let child = spawn_jvm(
            &classpath,
            STANDALONE_MAIN,
            &config,
            &dir.path().join("server.log"),
        )?;
        let mut server = BenchServer {
            child,
            dir,
            port,
            secure_port,
        };
        let started = Instant::now();
        loop {
            if let Some(status) = server.child.try_wait()? {
                return Err(format!(
                    "ZooKeeper exited at start ({status}): {}",
                    server.log_tail()
                )
                .into());
            }
            let secure_listens = server.secure_address().is_none_or(|addr| {
                addr.parse()
                    .is_ok_and(|a| TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok())
            });
            if secure_listens
                && four_letter_blocking(&server.address(), "mntr")
                    .is_some_and(|r| r.contains("zk_server_state"))
            {
                return Ok(server);
            }
            if started.elapsed() > START_LIMIT {
                return Err(format!("ZooKeeper did not serve within {START_LIMIT:?}").into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(crate) fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:<TLS port>`, if it serves TLS.
    pub(crate) fn secure_address(&self) -> Option<String> {
        self.secure_port.map(|port| format!("127.0.0.1:{port}"))
    }

    /// Whether the JVM is still running (it exits on OutOfMemoryError).
    pub(crate) fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The last line of the server's log that says why it stopped, if any.
    pub(crate) fn log_tail(&self) -> String {
        log_tail(&self.dir.path().join("server.log"))
    }
}

impl Drop for BenchServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A four-letter word, answered within 5 s, or `None`.
pub(crate) fn four_letter_blocking(addr: &str, word: &str) -> Option<String> {
    use std::io::{Read, Write};
    let addr: std::net::SocketAddr = addr.parse().ok()?;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    Some(reply)
}

/// The main class of a standalone server.
const STANDALONE_MAIN: &str = "org.apache.zookeeper.server.ZooKeeperServerMain";

/// The class path of a bench server: `ZOOKEEPER_CLASSPATH` when set, else
/// Debian's `zookeeper.jar` (with netty-codec for TLS) and a quiet slf4j
/// binding if one is installed.
pub(crate) fn classpath(tls: bool) -> String {
    match std::env::var(zk_curator_testing::server::CLASSPATH_ENV) {
        Ok(cp) if !cp.trim().is_empty() => cp,
        _ => {
            let mut cp = "/usr/share/java/zookeeper.jar".to_owned();
            // zookeeper.jar's manifest leaves out netty-codec, which
            // Netty's SslHandler extends: without it every handshake fails.
            if tls {
                cp += ":/usr/share/java/netty-codec.jar";
            }
            if let Some(binding) = ["slf4j-nop.jar", "slf4j-simple.jar"]
                .iter()
                .map(|jar| PathBuf::from("/usr/share/java").join(jar))
                .find(|path| path.is_file())
            {
                cp += &format!(":{}", binding.display());
            }
            cp
        }
    }
}

/// Starts one ZooKeeper JVM with the bench's flags (the heap of
/// `zkServer.sh`, exit on OutOfMemoryError, default GC and JIT) running
/// `main_class` on `config`, its output into `log`.
pub(crate) fn spawn_jvm(
    classpath: &str,
    main_class: &str,
    config: &Path,
    log: &Path,
) -> std::io::Result<Child> {
    let log = std::fs::File::create(log)?;
    Command::new("java")
        .arg(format!("-Xmx{HEAP}"))
        .args([
            "-XX:+ExitOnOutOfMemoryError",
            "-XX:-UsePerfData",
            "-Djava.awt.headless=true",
            "-cp",
            classpath,
            main_class,
        ])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
}

/// The last line of the log at `path` that says why a server stopped, else
/// its last line.
pub(crate) fn log_tail(path: &Path) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    log.lines()
        .rev()
        .find(|l| l.contains("OutOfMemory") || l.contains("Exception") || l.contains("Error"))
        .or_else(|| log.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or("(empty log)")
        .chars()
        .take(200)
        .collect()
}
