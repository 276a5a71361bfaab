//! The one rule for the `--id` of `lock` and `elect`, checked before
//! anything is sent.
//!
//! An id is shown back by `locks` and `leader`, one participant a line, and
//! read by people and scripts: so it is not empty (leave `--id` out for the
//! host name and process id instead), holds no control characters (a line
//! break would forge a second line, an escape sequence would drive the
//! reader's terminal), and is at most [`MAX_ID_BYTES`] long (well within a
//! node's data on every server).

use crate::exit::{shown, Failure};

/// The longest `--id`, in bytes of UTF-8.
pub(crate) const MAX_ID_BYTES: usize = 1024;

/// The rule as help texts state it.
pub(crate) const ID_RULE: &str =
    "not empty, at most 1024 bytes, no control characters (line breaks, tabs, escapes)";

/// Refuses an `--id` that breaks the rule (see the [module](self) doc).
///
/// # Errors
/// A usage failure saying which part of the rule it breaks.
pub(crate) fn check_id(id: &str) -> Result<(), Failure> {
    if id.is_empty() {
        return Err(Failure::usage(
            "--id is empty; leave it out to store this host's name and process id instead",
        ));
    }
    if id.len() > MAX_ID_BYTES {
        return Err(Failure::usage(format!(
            "--id {:?} is too long ({} bytes); an id is at most {MAX_ID_BYTES} bytes",
            shown(id),
            id.len()
        )));
    }
    if let Some(control) = id.chars().find(|c| c.is_control()) {
        return Err(Failure::usage(format!(
            "--id {:?} holds the control character {}; an id is {ID_RULE}",
            shown(id),
            control.escape_unicode()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::USAGE;

    #[test]
    fn ids_that_break_the_rule_are_usage_errors() {
        let long = "i".repeat(MAX_ID_BYTES + 1);
        for id in [
            "",
            "a\nb",
            "tab\there",
            "esc\u{1b}[31m",
            "c1\u{85}",
            long.as_str(),
        ] {
            let failure = check_id(id).expect_err(id);
            assert_eq!(failure.code, USAGE, "{id:?}: {}", failure.message);
            assert!(failure.message.len() < 600, "{}", failure.message);
        }
    }

    #[test]
    fn the_stated_rule_names_the_limit() {
        assert!(ID_RULE.contains(&MAX_ID_BYTES.to_string()));
    }

    #[test]
    fn ids_within_the_rule_are_taken() {
        for id in [
            "worker-1",
            "zone a / host b",
            "名前",
            &"i".repeat(MAX_ID_BYTES),
        ] {
            assert!(check_id(id).is_ok(), "{id:?}");
        }
    }
}
