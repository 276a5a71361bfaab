//! The error type shared by everything in this crate.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// Everything that can go wrong while running test servers, expiring sessions or proxying.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Java or the ZooKeeper jars could not be found on this machine.
    ///
    /// `missing` says what exactly was not found.
    #[error(
        "ZooKeeper not found: install it with `apt-get install -y zookeeper` (missing: {missing})"
    )]
    ZooKeeperNotFound {
        /// Human readable description of the missing piece (a path, or `java` on `PATH`).
        missing: String,
    },

    /// The builder was given contradictory or unusable settings.
    #[error("invalid test server configuration: {0}")]
    InvalidConfig(String),

    /// An I/O operation failed; `context` names the operation.
    #[error("{context}: {source}")]
    Io {
        /// What was being done when the error happened.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The server process exited before it started serving.
    #[error("ZooKeeper server exited during startup ({status}); log {log}:\n{log_tail}")]
    ServerExited {
        /// Exit status of the server process.
        status: ExitStatus,
        /// Where the full server log is.
        log: PathBuf,
        /// The last lines of the server's output.
        log_tail: String,
    },

    /// The server did not answer `srvr` with a serving status within the startup timeout.
    #[error("ZooKeeper server did not start serving within {timeout:?}; log {log}:\n{log_tail}")]
    StartTimeout {
        /// How long was waited.
        timeout: Duration,
        /// Where the full server log is.
        log: PathBuf,
        /// The last lines of the server's output.
        log_tail: String,
    },

    /// The embedded server could not start.
    #[error(transparent)]
    Server(#[from] zk_curator_server::Error),

    /// A ZooKeeper client operation failed.
    #[error("ZooKeeper client error: {0}")]
    Client(#[from] zookeeper_client::Error),

    /// A program the crate runs (a Kerberos tool) is not installed.
    #[error("`{tool}` not found: install it with `apt-get install -y {packages}`")]
    ToolNotFound {
        /// The program that was looked for.
        tool: String,
        /// The Debian packages providing it.
        packages: String,
    },

    /// A program the crate runs (a Kerberos tool) failed.
    #[error("`{command}` failed: {detail}")]
    Command {
        /// The command, shortened to what identifies it.
        command: String,
        /// Its exit status and output.
        detail: String,
    },

    /// A bounded wait ran out of time; the message says what was awaited.
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long was waited.
        timeout: Duration,
    },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
