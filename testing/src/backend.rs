//! [`TestingServer`]: one handle over both test servers, chosen at run time.
//!
//! Tests and examples start a `TestingServer` and do not care which server
//! answers. By default it is the [`EmbeddedServer`] (in-process, no JVM, so
//! the suite and the quickstart run on a machine with only Rust installed).
//! `ZK_TEST_SERVER=real` switches to a real Apache ZooKeeper
//! ([`ZooKeeperServer`]); CI runs the whole suite both ways.
//!
//! # Suites that need something installed
//!
//! Some suites need more than Rust: a real ZooKeeper (Java and Debian's
//! `zookeeper`), Apache Curator (a JDK and `libcurator-recipes-java`) or
//! kazoo (Debian's `/usr/bin/python3` with `python3-kazoo`). Each names
//! what it needs with [`Prerequisite::check`], the one rule for all of
//! them: a missing prerequisite **fails** the test with a message naming
//! the packages to install, so a run never reports a suite that did not
//! run as passed. Skipping is asked for explicitly with [`SKIP_MISSING_ENV`]
//! (`ZK_SKIP_MISSING=1`, or a list such as `ZK_SKIP_MISSING=curator,kazoo`);
//! the test then returns at once after printing a notice.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};

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
        match self.prerequisite() {
            None => true,
            Some(prerequisite) => prerequisite.is_available(),
        }
    }

    /// What this backend needs installed: nothing for the embedded server,
    /// [`Prerequisite::ZooKeeper`] for the real one.
    pub fn prerequisite(self) -> Option<Prerequisite> {
        match self {
            Backend::Embedded => None,
            Backend::Real => Some(Prerequisite::ZooKeeper),
        }
    }
}

/// The environment variable asking tests to skip, rather than fail, when
/// something they need is not installed: `1` (or `all`) for every
/// [`Prerequisite`], or a comma-separated list of their
/// [names](Prerequisite::name), e.g. `ZK_SKIP_MISSING=curator,kazoo`.
/// Unset or empty, a missing prerequisite fails the test.
/// [`REQUIRE_REAL_ENV`] and [`REQUIRE_INTEROP_ENV`] override it.
pub const SKIP_MISSING_ENV: &str = "ZK_SKIP_MISSING";

/// With `ZK_REQUIRE_REAL=1` (as CI sets it) a missing ZooKeeper fails the
/// test even if [`SKIP_MISSING_ENV`] asks to skip it.
pub const REQUIRE_REAL_ENV: &str = "ZK_REQUIRE_REAL";

/// With `ZK_REQUIRE_INTEROP=1` (as CI sets it) a missing Curator or kazoo
/// fails the test even if [`SKIP_MISSING_ENV`] asks to skip it.
pub const REQUIRE_INTEROP_ENV: &str = "ZK_REQUIRE_INTEROP";

/// Debian's Python interpreter, where `python3-kazoo` and the pytest
/// packages install (not whatever `python3` comes first on `PATH`).
pub const DEBIAN_PYTHON: &str = "/usr/bin/python3";

/// Where Debian's `libcurator-recipes-java` installs Apache Curator.
pub const CURATOR_JAR: &str = "/usr/share/java/curator-recipes.jar";

/// Something a suite needs beyond Rust, and how to get it on Debian.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Prerequisite {
    /// A real Apache ZooKeeper: Java and the `zookeeper` jars (the real
    /// backend, [`ZooKeeperServer`], `TestingCluster`).
    ZooKeeper,
    /// Apache Curator: `javac`, `java` and [`CURATOR_JAR`] (the suites
    /// contending with Curator on the same locks).
    Curator,
    /// kazoo under [`DEBIAN_PYTHON`].
    Kazoo,
    /// kazoo's own test suite: kazoo with pytest, pytest-timeout, mock and
    /// objgraph under [`DEBIAN_PYTHON`].
    KazooTestSuite,
    /// An MIT Kerberos KDC and its tools (`krb5kdc`, `kdb5_util`,
    /// `kadmin.local`, `kinit`, `klist`) for [`Kdc`](crate::kerberos::Kdc).
    Kdc,
    /// Prometheus's `promtool` (Debian's `prometheus` package): checks
    /// the dashboard's scrape and tests its alert rules.
    Promtool,
    /// Headless Chromium and its WebDriver (`chromium`, `chromedriver`):
    /// the dashboard's page, tested in a real browser.
    Chromium,
}

impl Prerequisite {
    /// Every prerequisite.
    pub const ALL: [Prerequisite; 7] = [
        Prerequisite::ZooKeeper,
        Prerequisite::Curator,
        Prerequisite::Kazoo,
        Prerequisite::KazooTestSuite,
        Prerequisite::Kdc,
        Prerequisite::Promtool,
        Prerequisite::Chromium,
    ];

    /// Its name in [`SKIP_MISSING_ENV`]: `zookeeper`, `curator`, `kazoo`,
    /// `kazoo-tests`, `kdc`, `promtool` or `chromium`.
    pub fn name(self) -> &'static str {
        match self {
            Prerequisite::ZooKeeper => "zookeeper",
            Prerequisite::Curator => "curator",
            Prerequisite::Kazoo => "kazoo",
            Prerequisite::KazooTestSuite => "kazoo-tests",
            Prerequisite::Kdc => "kdc",
            Prerequisite::Promtool => "promtool",
            Prerequisite::Chromium => "chromium",
        }
    }

    /// What it is, in words.
    pub fn description(self) -> &'static str {
        match self {
            Prerequisite::ZooKeeper => "a real Apache ZooKeeper (Java and the zookeeper jars)",
            Prerequisite::Curator => "Apache Curator (javac, java and curator-recipes.jar)",
            Prerequisite::Kazoo => "kazoo under /usr/bin/python3",
            Prerequisite::KazooTestSuite => {
                "kazoo's test suite (kazoo, pytest, pytest-timeout, mock, objgraph under /usr/bin/python3)"
            }
            Prerequisite::Kdc => "an MIT Kerberos KDC and its tools (krb5kdc, kdb5_util, kadmin.local, kinit, klist)",
            Prerequisite::Promtool => "Prometheus's promtool",
            Prerequisite::Chromium => "headless Chromium and chromedriver",
        }
    }

    /// The Debian packages that provide it.
    pub fn packages(self) -> &'static str {
        match self {
            Prerequisite::ZooKeeper => "zookeeper",
            Prerequisite::Curator => "default-jdk-headless libcurator-recipes-java zookeeper",
            Prerequisite::Kazoo => "python3-kazoo",
            Prerequisite::KazooTestSuite => {
                "python3-kazoo python3-pytest python3-pytest-timeout python3-mock python3-objgraph"
            }
            Prerequisite::Kdc => crate::kerberos::KDC_PACKAGES,
            Prerequisite::Promtool => "prometheus",
            Prerequisite::Chromium => "chromium chromium-driver",
        }
    }

    /// The environment variable whose value `1` refuses to skip it (the KDC
    /// counts with the interop suites: CI sets both).
    fn require_env(self) -> &'static str {
        match self {
            Prerequisite::ZooKeeper => REQUIRE_REAL_ENV,
            _ => REQUIRE_INTEROP_ENV,
        }
    }

    /// Whether it is installed here.
    pub fn is_available(self) -> bool {
        match self {
            Prerequisite::ZooKeeper => zookeeper_available(),
            Prerequisite::Curator => {
                tool_runs("javac") && tool_runs("java") && Path::new(CURATOR_JAR).is_file()
            }
            Prerequisite::Kazoo => python_imports("kazoo"),
            Prerequisite::KazooTestSuite => {
                python_imports("kazoo, pytest, pytest_timeout, mock, objgraph")
            }
            Prerequisite::Kdc => crate::kerberos::kdc_available(),
            Prerequisite::Promtool => tool_runs_with("promtool", "--version"),
            Prerequisite::Chromium => {
                tool_runs_with("chromium", "--version")
                    && tool_runs_with("chromedriver", "--version")
            }
        }
    }

    /// Whether [`SKIP_MISSING_ENV`] asks to skip this prerequisite when it
    /// is missing (and neither [`REQUIRE_REAL_ENV`] nor
    /// [`REQUIRE_INTEROP_ENV`] forbids it).
    ///
    /// # Errors
    /// A [`SKIP_MISSING_ENV`] value naming no known prerequisite, with the
    /// names it accepts.
    pub fn skip_requested(self) -> Result<bool, Error> {
        let required = std::env::var(self.require_env()).is_ok_and(|v| v.trim() == "1");
        let value = std::env::var(SKIP_MISSING_ENV).unwrap_or_default();
        self.skip_requested_by(&value, required)
    }

    /// [`Prerequisite::skip_requested`] for a given [`SKIP_MISSING_ENV`]
    /// value, and whether its `ZK_REQUIRE_…` variable forbids skipping.
    fn skip_requested_by(self, value: &str, required: bool) -> Result<bool, Error> {
        let mut requested = false;
        for word in value
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|w| !w.is_empty())
        {
            let word = word.to_ascii_lowercase();
            match word.as_str() {
                "1" | "all" | "true" | "yes" => requested = true,
                "0" | "false" | "no" => {}
                name => match Prerequisite::ALL.iter().find(|p| p.name() == name) {
                    Some(&p) => requested |= p == self,
                    None => {
                        let names: Vec<&str> = Prerequisite::ALL.iter().map(|p| p.name()).collect();
                        return Err(Error::InvalidConfig(format!(
                            "{SKIP_MISSING_ENV}={value}: `{name}` is not one of 1, all, {}",
                            names.join(", ")
                        )));
                    }
                },
            }
        }
        Ok(requested && !required)
    }

    /// The one rule for a test that needs this prerequisite: `true` when
    /// it is installed (run the test); when it is missing, `false` after a
    /// notice on stderr if [`SKIP_MISSING_ENV`] asks to skip it (return
    /// from the test at once), and otherwise a panic that fails `test`
    /// with what to install and how to skip instead.
    ///
    /// ```
    /// use zk_curator_testing::backend::Prerequisite;
    ///
    /// // The first lines of a test that contends with Apache Curator:
    /// if !Prerequisite::Curator.check("contends_with_curator") {
    ///     return; // skipped, as ZK_SKIP_MISSING asked (a notice says so)
    /// }
    /// // ... Curator is installed: run the Java side ...
    /// ```
    ///
    /// # Panics
    /// When the prerequisite is missing and skipping it was not asked
    /// for, or when [`SKIP_MISSING_ENV`] is malformed: that is how the test
    /// fails.
    #[track_caller]
    pub fn check(self, test: &str) -> bool {
        if self.is_available() {
            return true;
        }
        match self.skip_requested() {
            Ok(true) => {
                eprintln!(
                    "NOTICE: {test} skipped: it needs {} (apt-get install -y {}); {SKIP_MISSING_ENV} asked to skip it",
                    self.description(),
                    self.packages()
                );
                false
            }
            Ok(false) => panic!("{}", self.missing_message(test)),
            Err(err) => panic!("{test}: {err}"),
        }
    }

    /// Why `test` fails without this prerequisite, and the two ways out.
    pub fn missing_message(self, test: &str) -> String {
        let forbidden = if std::env::var(self.require_env()).is_ok_and(|v| v.trim() == "1") {
            format!(" ({}=1 forbids skipping it)", self.require_env())
        } else {
            format!(
                "; to skip it instead, set {SKIP_MISSING_ENV}={} (or {SKIP_MISSING_ENV}=1 for everything missing)",
                self.name()
            )
        };
        format!(
            "{test} needs {}, which is not installed here. Install it with \
             `sudo apt-get install -y {}` (`.ci/test` installs everything the tests need, then runs them){forbidden}",
            self.description(),
            self.packages()
        )
    }
}

impl fmt::Display for Prerequisite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether `tool -version` runs and succeeds (found on `PATH`).
fn tool_runs(tool: &str) -> bool {
    tool_runs_with(tool, "-version")
}

/// Whether `tool flag` runs and succeeds (found on `PATH`).
fn tool_runs_with(tool: &str, flag: &str) -> bool {
    Command::new(tool)
        .arg(flag)
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|out| out.status.success())
}

/// Whether [`DEBIAN_PYTHON`] imports `modules` (a comma-separated list).
fn python_imports(modules: &str) -> bool {
    Command::new(DEBIAN_PYTHON)
        .args(["-c", &format!("import {modules}")])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|out| out.status.success())
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::Prerequisite::{Curator, Kazoo, KazooTestSuite, ZooKeeper};

    #[test]
    fn skipping_is_asked_for_explicitly() {
        for p in [ZooKeeper, Curator, Kazoo, KazooTestSuite] {
            for unset in ["", " ", "0", "no", "false"] {
                assert!(
                    !p.skip_requested_by(unset, false).unwrap(),
                    "{p} with {unset:?}"
                );
            }
            for all in ["1", "all", "ALL", "true", "yes", " 1 "] {
                assert!(p.skip_requested_by(all, false).unwrap(), "{p} with {all:?}");
                assert!(
                    !p.skip_requested_by(all, true).unwrap(),
                    "{p} required, {all:?}"
                );
            }
        }
    }

    #[test]
    fn a_list_names_what_may_be_skipped() {
        let list = "curator, kazoo";
        assert!(Curator.skip_requested_by(list, false).unwrap());
        assert!(Kazoo.skip_requested_by(list, false).unwrap());
        assert!(!ZooKeeper.skip_requested_by(list, false).unwrap());
        assert!(!KazooTestSuite.skip_requested_by(list, false).unwrap());
        assert!(KazooTestSuite
            .skip_requested_by("kazoo-tests", false)
            .unwrap());
    }

    #[test]
    fn an_unknown_name_is_an_error_listing_the_names() {
        let err = Curator.skip_requested_by("java", false).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("`java`"), "{text}");
        assert!(
            text.contains("zookeeper, curator, kazoo, kazoo-tests, kdc, promtool"),
            "{text}"
        );
    }

    #[test]
    fn the_failure_names_the_packages_and_the_way_to_skip() {
        let message = Curator.missing_message("some_test");
        assert!(
            message.starts_with("some_test needs Apache Curator"),
            "{message}"
        );
        assert!(
            message.contains("apt-get install -y default-jdk-headless libcurator-recipes-java"),
            "{message}"
        );
    }
}
