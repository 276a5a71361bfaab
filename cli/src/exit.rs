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
/// The path holds participants that would not see ours (another library's
/// layout, another recipe): nothing was left queued (`EX_CONFIG`: the
/// path is set up for something else).
pub(crate) const OTHER_LAYOUT: u8 = 78;
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

/// The most characters of one user input (a path, an id, a host, a value)
/// a message shows; a longer one is cut, and its full length said.
/// The framework's cut ([`zk_curator::framework::path::cut`]), so that
/// its messages and ours shorten alike.
pub(crate) const SHOWN_CHARS: usize = zk_curator::framework::path::MESSAGE_CUT;

/// A user input as messages show it: `{}` writes it as it is, `{:?}`
/// quoted and escaped, both cut after [`SHOWN_CHARS`] characters with an
/// ellipsis and the input's full length. Every input a message echoes
/// goes through this (or through [`cut_inputs`], which uses it).
#[derive(Clone, Copy)]
pub(crate) struct Shown<'a>(&'a str);

/// `input` as messages show it (see [`Shown`]).
pub(crate) fn shown(input: &str) -> Shown<'_> {
    Shown(input)
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match cut_at(self.0) {
            None => f.write_str(self.0),
            Some((end, count)) => write!(f, "{}… ({count} characters in all)", &self.0[..end]),
        }
    }
}

impl fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match cut_at(self.0) {
            None => write!(f, "{:?}", self.0),
            Some((end, count)) => {
                write!(f, "{:?}… ({count} characters in all)", &self.0[..end])
            }
        }
    }
}

/// Where `input` is cut (a byte offset) and its length in characters, when
/// it is longer than [`SHOWN_CHARS`].
fn cut_at(input: &str) -> Option<(usize, usize)> {
    let (end, _) = input.char_indices().nth(SHOWN_CHARS)?;
    Some((end, input.chars().count()))
}

/// `message` with every input of `inputs` too long to show whole (in its
/// quoted form or as it is) replaced by its [`Shown`] form: the last guard
/// against an input that reaches a message whole, through a library's
/// error text or a message that forgot [`shown`].
pub(crate) fn cut_inputs<'a>(message: &str, inputs: impl IntoIterator<Item = &'a str>) -> String {
    let mut message = message.to_owned();
    for input in inputs {
        if cut_at(input).is_none() {
            continue;
        }
        let quoted = format!("{input:?}");
        if message.contains(&quoted) {
            message = message.replace(&quoted, &format!("{:?}", shown(input)));
        }
        if message.contains(input) {
            message = message.replace(input, &shown(input).to_string());
        }
    }
    message
}

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
            Error::LayoutConflict { .. } => OTHER_LAYOUT,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_input_is_cut_and_its_length_said() {
        let long = "é".repeat(SHOWN_CHARS + 1);
        let plain = shown(&long).to_string();
        assert!(plain.starts_with(&"é".repeat(SHOWN_CHARS)), "{plain}");
        assert!(plain.ends_with("… (201 characters in all)"), "{plain}");
        let quoted = format!("{:?}", shown(&long));
        assert!(
            quoted.starts_with('"') && quoted.contains("\"…"),
            "{quoted}"
        );
        let short = "a\nb";
        assert_eq!(shown(short).to_string(), short);
        assert_eq!(format!("{:?}", shown(short)), format!("{short:?}"));
    }

    #[test]
    fn inputs_are_cut_wherever_a_message_echoes_them() {
        let long = "x".repeat(1_000);
        let message = format!("bad path {long:?}: path {long:?} is wrong; {long}/a");
        let cut = cut_inputs(&message, [long.as_str(), "short"]);
        assert!(cut.len() < 1_000, "{cut}");
        assert_eq!(cut.matches("(1000 characters in all)").count(), 3, "{cut}");
    }
}
