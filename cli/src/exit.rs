//! Exit codes and the error that carries one.
//!
//! The codes follow BSD's `sysexits.h` where one fits, so they stay clear of
//! the small statuses commands usually exit with (which `lock` passes
//! through), and the shell's conventions for a command that cannot run.

use std::fmt;

use zk_curator::Error;

/// Bad arguments or path (a malformed `--acl` among them), malformed or
/// missing ensemble, malformed `ZK_AUTH` (`EX_USAGE`); given before
/// anything is sent.
pub(crate) const USAGE: u8 = 64;
/// `revoke --node` names no participant of the lock (`EX_NOINPUT`: the
/// named input does not exist).
pub(crate) const NO_PARTICIPANT: u8 = 66;
/// ZooKeeper could not be reached within the connection timeout
/// (`EX_UNAVAILABLE`).
pub(crate) const UNAVAILABLE: u8 = 69;
/// Any other failure (`EX_SOFTWARE`), a refusal by a node's ACL among them
/// (see [`crate::acl::Refusal`]).
pub(crate) const OTHER: u8 = 70;
/// `lock --timeout` expired before the lock was acquired (`EX_TEMPFAIL`).
pub(crate) const TIMEOUT: u8 = 75;
/// The hold was lost while the command ran.
pub(crate) const LOST: u8 = 76;
/// The hold was revoked while the command ran.
pub(crate) const REVOKED: u8 = 77;
/// Standard output was closed by its reader (`| head`): what a shell
/// reports for a command SIGPIPE ended (128 + 13), said without a message.
pub(crate) const CLOSED_OUTPUT: u8 = 141;
/// The command exists but could not be executed (the shell's code).
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (the shell's code).
pub(crate) const NOT_FOUND: u8 = 127;

/// A failure to report on stderr, with its exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl fmt::Display) -> Self {
        Failure {
            code,
            message: message.to_string(),
        }
    }

    /// An end that says nothing (see [`CLOSED_OUTPUT`]).
    pub(crate) fn quiet(code: u8) -> Self {
        Failure::new(code, "")
    }

    pub(crate) fn usage(message: impl fmt::Display) -> Self {
        Failure::new(USAGE, message)
    }

    /// A library error met while doing `what`.
    pub(crate) fn zk(what: impl fmt::Display, err: Error) -> Self {
        let code = match err {
            Error::InvalidPath(_) | Error::InvalidArgument(_) => USAGE,
            Error::Timeout(_) | Error::Connect { .. } => UNAVAILABLE,
            _ => OTHER,
        };
        Failure::new(code, format!("{what}: {err}"))
    }
}

/// Writes `line` and a line break to standard output, flushed. A reader
/// that has gone away (a closed pipe, as with `| head -1`) ends the command
/// quietly with [`CLOSED_OUTPUT`], as SIGPIPE ends other commands (Rust
/// programs ignore SIGPIPE, so the write fails instead).
///
/// # Errors
/// [`CLOSED_OUTPUT`] (with no message) on a closed pipe, [`OTHER`] when
/// standard output fails otherwise.
pub(crate) fn out(line: impl fmt::Display) -> Result<(), Failure> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .map_err(|err| match err.kind() {
            std::io::ErrorKind::BrokenPipe => Failure::quiet(CLOSED_OUTPUT),
            _ => Failure::new(OTHER, format!("cannot write to standard output: {err}")),
        })
}
