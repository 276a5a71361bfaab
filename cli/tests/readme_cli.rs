//! The README's account of the command line and the program's own `--help`
//! say the same thing: the same commands, the same flags, the same exit
//! codes. Either side changed alone fails here, naming what the other
//! lacks.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeSet;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_zk-curator");
const README: &str = include_str!("../../README.md");

/// `zk-curator ARGS --help`, as text.
fn help(args: &[&str]) -> String {
    let output = Command::new(BIN).args(args).arg("--help").output().unwrap();
    assert!(output.status.success(), "{args:?} --help failed");
    String::from_utf8(output.stdout).unwrap()
}

/// The part of the README under the heading `title` (up to the next
/// heading of the same level).
fn section(title: &str) -> &'static str {
    let start = README
        .find(&format!("\n## {title}\n"))
        .unwrap_or_else(|| panic!("the README has no section {title:?}"));
    let rest = &README[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |at| at + 3);
    &rest[..end]
}

/// Every `--flag` written in `text`.
fn flags_in(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(offset) = text[at..].find("--") {
        let start = at + offset;
        let before_ok =
            start == 0 || !bytes[start - 1].is_ascii_alphanumeric() && bytes[start - 1] != b'-';
        let name: String = text[start + 2..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        if before_ok && name.starts_with(|c: char| c.is_ascii_lowercase()) {
            found.insert(format!("--{}", name.trim_end_matches('-')));
        }
        at = start + 2 + name.len();
    }
    found
}

/// `text` without what runs another program than zk-curator: lines that
/// run cargo or pytest, and `` `cargo ...` `` spans.
fn without_other_tools(text: &str) -> String {
    let mut kept = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("cargo ") || line.contains("pytest") {
            continue;
        }
        for (index, piece) in line.split('`').enumerate() {
            // Odd pieces are inside backticks.
            if index % 2 == 1 && piece.starts_with("cargo ") {
                continue;
            }
            kept.push_str(piece);
            kept.push(' ');
        }
        kept.push('\n');
    }
    kept
}

/// The options a `--help` text declares (its lines that begin, after the
/// indentation, with `-x, --flag` or `--flag`).
fn declared_flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .map(str::trim_start)
        .filter_map(|line| {
            let line = line
                .strip_prefix(|c: char| c == '-')
                .and_then(|l| l.split_once(", "))
                .map_or(line, |(_, rest)| rest);
            line.starts_with("--").then(|| {
                flags_in(line.split_whitespace().next().unwrap_or_default())
                    .into_iter()
                    .next()
            })?
        })
        .collect()
}

/// The commands the top-level `--help` lists (hidden ones are not).
fn commands() -> Vec<String> {
    let top = help(&[]);
    let listed = top
        .split("Commands:")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .next()
        .unwrap();
    listed
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The exit codes in a help text's "Exit codes:" table.
fn exit_codes_in_help(help: &str) -> BTreeSet<String> {
    let Some(table) = help.split("Exit codes:").nth(1) else {
        return BTreeSet::new();
    };
    table
        .lines()
        .filter_map(|line| {
            let line = line.strip_prefix("  ")?;
            let code = line.split_whitespace().next()?;
            code.starts_with(|c: char| c.is_ascii_digit())
                .then(|| code.to_owned())
        })
        .collect()
}

#[test]
fn the_readme_names_every_command() {
    let section = section("Command line");
    for command in commands() {
        assert!(
            section.contains(&format!("zk-curator {command}")),
            "the README's \"Command line\" shows no `zk-curator {command}`"
        );
    }
}

#[test]
fn flags_agree_between_the_readme_and_help() {
    let mut declared = BTreeSet::new();
    for command in commands() {
        declared.extend(declared_flags(&help(&[&command])));
    }
    assert!(declared.contains("--session-timeout"), "{declared:?}");
    // Every flag of the program is written down somewhere in the README.
    let documented = flags_in(README);
    let undocumented: Vec<_> = declared.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "flags the README never mentions: {undocumented:?}"
    );
    // Every flag the README's command-line sections write for zk-curator
    // exists (the lines and spans that run cargo or pytest aside).
    let mut written = flags_in(&without_other_tools(section("Command line")));
    written.extend(flags_in(&without_other_tools(section(
        "The embedded server",
    ))));
    let stale: Vec<_> = written.difference(&declared).collect();
    assert!(
        stale.is_empty(),
        "flags the README writes that no command has: {stale:?}"
    );
}

#[test]
fn exit_codes_agree_between_the_readme_and_help() {
    let mut in_help = exit_codes_in_help(&help(&[]));
    for command in commands() {
        in_help.extend(exit_codes_in_help(&help(&[&command])));
    }
    // The README's table: `| 64 | ...`, `| 126 / 127 | ...`.
    let mut in_readme = BTreeSet::new();
    for line in section("Command line").lines() {
        let Some(cell) = line.strip_prefix("| ").and_then(|l| l.split(" |").next()) else {
            continue;
        };
        for code in cell.split(" / ") {
            if code.starts_with(|c: char| c.is_ascii_digit()) {
                in_readme.insert(code.trim().to_owned());
            }
        }
    }
    // 0 (success) needs no row of its own in the README.
    in_help.remove("0");
    assert!(in_readme.contains("64"), "{in_readme:?}");
    assert_eq!(
        in_help, in_readme,
        "exit codes in --help (left) and in the README's table (right) differ"
    );
}

#[test]
fn the_readers_agree_on_a_flag_list() {
    // The parsers themselves, on known text.
    assert_eq!(
        flags_in("run `lock --timeout 3s` or --read|--write; not a--b, nor ---x"),
        ["--read", "--timeout", "--write"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    assert_eq!(
        declared_flags("Options:\n      --zk <HOSTS>\n  -p, --port <PORT>\n  -h, --help\n"),
        ["--help", "--port", "--zk"]
            .into_iter()
            .map(String::from)
            .collect()
    );
}
