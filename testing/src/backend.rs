//! [`TestingServer`]: one handle over both test servers, chosen at run time.
//!
//! Tests and examples start a `TestingServer` and do not care which server
//! answers. By default it is the [`EmbeddedServer`] (in-process, no JVM, so
//! the suite and the quickstart run on a machine with only Rust installed).
//! `ZK_TEST_SERVER=real` switches to a real Apache ZooKeeper
//! ([`ZooKeeperServer`]); CI runs the whole suite both ways.

use std::fmt;
use std::net::SocketAddr;

use crate::embedded::EmbeddedServer;
use crate::error::Error;
use crate::server::{zookeeper_available, ZooKeeperServer};

/// The environment variable choosing the backend: `embedded` (the default)
/// or `real`.
pub const BACKEND_ENV: &str = "ZK_TEST_SERVER";

/// Which server a [`TestingServer`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The in-process [`EmbeddedServer`].
    Embedded,
    /// A real Apache ZooKeeper in a JVM ([`ZooKeeperServer`]).
    Real,
}

impl Backend {
    /// The backend [`BACKEND_ENV`] asks for (embedded when unset).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a value other than `embedded` or `real`.
    pub fn from_env() -> Result<Backend, Error> {
        match std::env::var(BACKEND_ENV) {
            Err(_) => Ok(Backend::Embedded),
            Ok(value) => match value.trim().to_ascii_lowercase().as_str() {
                "" | "embedded" => Ok(Backend::Embedded),
                "real" | "zookeeper" => Ok(Backend::Real),
                other => Err(Error::InvalidConfig(format!(
                    "{BACKEND_ENV}={other}: expected `embedded` or `real`"
                ))),
            },
        }
    }

    /// Whether this backend can run on this machine (the real one needs
    /// ZooKeeper and Java installed).
    pub fn is_available(self) -> bool {
        match self {
            Backend::Embedded => true,
            Backend::Real => zookeeper_available(),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Embedded => "embedded",
            Backend::Real => "real ZooKeeper",
        })
    }
}

/// The embedded server configured like the real test server ([`ZooKeeperServer`]): TTL
/// nodes enabled.
fn embedded_builder() -> zk_curator_server::EmbeddedServerBuilder {
    EmbeddedServer::builder().extended_types(true)
}

enum Server {
    Embedded(EmbeddedServer),
    Real(ZooKeeperServer),
}

/// A ZooKeeper server on a free `127.0.0.1` port for tests and examples:
/// the embedded one by default, a real one with `ZK_TEST_SERVER=real`.
///
/// Dropping it stops the server.
pub struct TestingServer {
    server: Server,
}

impl fmt::Debug for TestingServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestingServer")
            .field("backend", &self.backend())
            .field("connect_string", &self.connect_string())
            .finish()
    }
}

impl TestingServer {
    /// Starts the backend [`Backend::from_env`] names, blocking until it
    /// serves. Usable from any context, including a `static`.
    ///
    /// # Errors
    /// As [`TestingServer::start_backend`].
    pub fn start() -> Result<TestingServer, Error> {
        Self::start_backend(Backend::from_env()?)
    }

    /// Starts the given backend, blocking until it serves.
    ///
    /// # Errors
    /// A bad [`BACKEND_ENV`] value; for the real backend, ZooKeeper or Java
    /// missing (the message names the install command) or a failed start.
    pub fn start_backend(backend: Backend) -> Result<TestingServer, Error> {
        let server = match backend {
            Backend::Embedded => Server::Embedded(embedded_builder().start_blocking()?),
            Backend::Real => Server::Real(ZooKeeperServer::start()?),
        };
        Ok(TestingServer { server })
    }

    /// Starts the backend [`Backend::from_env`] names without blocking the
    /// runtime.
    ///
    /// # Errors
    /// As [`TestingServer::start_backend`].
    ///
    /// # Cancel safety
    /// As [`TestingServer::start_backend_async`].
    pub async fn start_async() -> Result<TestingServer, Error> {
        Self::start_backend_async(Backend::from_env()?).await
    }

    /// Starts the given backend without blocking the runtime. The embedded
    /// server then runs on the current runtime.
    ///
    /// # Errors
    /// As [`TestingServer::start_backend`].
    ///
    /// # Cancel safety
    /// The embedded server starts without awaiting anything (cancel safe); a
    /// real one starts on a blocking thread that goes on if the future is
    /// dropped, and is stopped again as soon as it has started.
    pub async fn start_backend_async(backend: Backend) -> Result<TestingServer, Error> {
        let server = match backend {
            Backend::Embedded => Server::Embedded(embedded_builder().start().await?),
            Backend::Real => Server::Real(ZooKeeperServer::start_async().await?),
        };
        Ok(TestingServer { server })
    }

    /// Which server this is.
    pub fn backend(&self) -> Backend {
        match self.server {
            Server::Embedded(_) => Backend::Embedded,
            Server::Real(_) => Backend::Real,
        }
    }

    /// `127.0.0.1:<port>`.
    pub fn connect_string(&self) -> String {
        match &self.server {
            Server::Embedded(s) => s.connect_string(),
            Server::Real(s) => s.connect_string(),
        }
    }

    /// The listening address.
    pub fn address(&self) -> SocketAddr {
        match &self.server {
            Server::Embedded(s) => s.address(),
            Server::Real(s) => s.address(),
        }
    }

    /// The listening port.
    pub fn port(&self) -> u16 {
        self.address().port()
    }

    /// Stops serving (connections drop, the port closes) but keeps the data
    /// and sessions for [`TestingServer::restart_async`].
    pub fn stop(&self) {
        match &self.server {
            Server::Embedded(s) => s.stop(),
            Server::Real(s) => s.stop(),
        }
    }

    /// Serves again on the same port with the same data; sessions that have
    /// not timed out meanwhile survive.
    ///
    /// # Errors
    /// The server could not be started again.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the server stopped (embedded) or still
    /// coming up (real); call it again to be sure.
    pub async fn restart_async(&self) -> Result<(), Error> {
        match &self.server {
            Server::Embedded(s) => Ok(s.restart().await?),
            Server::Real(s) => s.restart_async().await,
        }
    }

    /// The embedded server, for its fault injection API.
    pub fn as_embedded(&self) -> Option<&EmbeddedServer> {
        match &self.server {
            Server::Embedded(s) => Some(s),
            Server::Real(_) => None,
        }
    }

    /// The real server.
    pub fn as_real(&self) -> Option<&ZooKeeperServer> {
        match &self.server {
            Server::Real(s) => Some(s),
            Server::Embedded(_) => None,
        }
    }
}

/// The environment variable naming an ensemble to use instead of a test
/// server (examples, benchmarks).
pub const CONNECT_ENV: &str = "ZK_CONNECT";

/// Where an example should connect: the ensemble in [`CONNECT_ENV`] if set,
/// otherwise a [`TestingServer`] started now (on the backend
/// [`Backend::from_env`] names). Keep the returned server alive for as long
/// as the connect string is used; dropping it stops the server.
///
/// # Errors
/// As [`TestingServer::start_async`].
///
/// # Cancel safety
/// As [`TestingServer::start_async`].
pub async fn connect_string_or_start() -> Result<(String, Option<TestingServer>), Error> {
    match std::env::var(CONNECT_ENV) {
        Ok(connect) if !connect.trim().is_empty() => Ok((connect.trim().to_owned(), None)),
        _ => {
            let server = TestingServer::start_async().await?;
            tracing::info!(backend = %server.backend(), connect = %server.connect_string(), "started a test server");
            Ok((server.connect_string(), Some(server)))
        }
    }
}
