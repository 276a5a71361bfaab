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
/// A bound of the command run under a hold passed (`--max-hold`,
/// `--max-silence`): its group was stopped, then the hold given back.
pub(crate) const BOUND_PASSED: u8 = 79;
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
///
/// Whatever the line holds, no character that a terminal or a reader could
/// take for more than text reaches standard output: every control
/// character but the line break, and the Unicode controls that reorder or
/// break lines, are written as `\uXXXX` (a valid escape inside a JSON
/// string too, so JSON stays JSON and means the same). Node data, ids and
/// names come from whoever could create a node: see [`printable`] for
/// text that must also keep its line breaks to itself.
pub(crate) fn out(line: impl fmt::Display) -> Result<(), Failure> {
    use std::io::Write as _;
    let line = line.to_string();
    let line = escape_controls(&line, false);
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .map_err(|err| match err.kind() {
            std::io::ErrorKind::BrokenPipe => Failure::quiet(CLOSED_OUTPUT),
            _ => Failure::new(OTHER, format!("cannot write to standard output: {err}")),
        })
}

/// Whether `c` must not reach a reader as itself: a control character
/// (C0, DEL, C1: escape sequences, carriage returns, backspaces), a line
/// or paragraph separator, or a bidirectional override or isolate (which
/// reorder what follows on the line).
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// `text` with every unsafe character (see [`is_unsafe`]) written as
/// `\uXXXX`; line breaks too when `escape_lines`.
fn escape_controls(text: &str, escape_lines: bool) -> std::borrow::Cow<'_, str> {
    let keep = |c: char| c == '\n' && !escape_lines;
    if !text.chars().any(|c| is_unsafe(c) && !keep(c)) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) && !keep(c) {
            // Every unsafe character is in the Basic Multilingual Plane.
            let _ = fmt::Write::write_fmt(&mut escaped, format_args!("\\u{:04x}", u32::from(c)));
        } else {
            escaped.push(c);
        }
    }
    std::borrow::Cow::Owned(escaped)
}

/// Text from a node (its data, an id, a name) as one cell or one part of
/// a line: every unsafe character, line breaks included, written as
/// `\uXXXX`, so that it can neither forge a line nor drive the terminal.
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    escape_controls(text, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_characters_are_escaped_and_json_stays_json() {
        let forged = "ok\nKIND  ROLE\u{1b}[2J\u{9b}31m\u{202e}evil\t\"q\"";
        let cell = printable(forged);
        assert_eq!(
            cell,
            "ok\\u000aKIND  ROLE\\u001b[2J\\u009b31m\\u202eevil\\u0009\"q\""
        );
        assert!(!cell.chars().any(is_unsafe));
        // A whole line keeps its own breaks, and no other control.
        let line = escape_controls("a\nb\u{7}", false);
        assert_eq!(line, "a\nb\\u0007");
        // serde_json leaves C1 controls and bidi overrides raw; escaped,
        // the JSON parses to the same value.
        let value = serde_json::json!({ "id": forged });
        let text = escape_controls(&value.to_string(), false).into_owned();
        assert!(!text.chars().any(is_unsafe), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).expect("escaped JSON parses");
        assert_eq!(back, value);
        assert_eq!(printable("plain id"), "plain id");
    }

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
