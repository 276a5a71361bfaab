//! The documents' account of the command line (the README and the guide's
//! chapters, `docs/guide/*.md`, wherever the text lives) and the program's
//! own `--help` say the same thing: the same commands, the same flags, the
//! same exit codes. Either side changed alone fails here, naming what the
//! other lacks.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const BIN: &str = env!("CARGO_BIN_EXE_zk-curator");

/// README.md and every `docs/guide/*.md` (in name order), as (path, text),
/// read when the test runs, so that a chapter added or moved is read too.
fn documents() -> &'static [(PathBuf, String)] {
    static DOCUMENTS: OnceLock<Vec<(PathBuf, String)>> = OnceLock::new();
    DOCUMENTS.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut paths: Vec<PathBuf> = std::fs::read_dir(root.join("docs/guide"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
            .collect();
        paths.sort();
        paths.insert(0, root.join("README.md"));
        paths
            .into_iter()
            .map(|path| {
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
                (path, text)
            })
            .collect()
    })
}

/// Every document's text, one after the other.
fn all_documents() -> String {
    documents()
        .iter()
        .map(|(_, text)| text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The level (number of `#`) and the title of a Markdown heading line.
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|c| *c == '#').count();
    let title = line[level..].strip_prefix(' ')?;
    (1..=6).contains(&level).then(|| (level, title.trim()))
}

/// `zk-curator ARGS --help`, as text.
fn help(args: &[&str]) -> String {
    let output = Command::new(BIN).args(args).arg("--help").output().unwrap();
    assert!(output.status.success(), "{args:?} --help failed");
    String::from_utf8(output.stdout).unwrap()
}

/// The text under the heading `title`, at any level, in whichever document
/// has it (the README or a chapter of the guide), up to the next heading
/// of the same or a higher level; headings inside code blocks do not
/// count. Exactly one document must have it.
fn section(title: &str) -> String {
    let mut found = Vec::new();
    for (path, text) in documents() {
        let mut taken: Option<(usize, Vec<&str>)> = None;
        let mut in_code = false;
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
            }
            let head = if in_code { None } else { heading(line) };
            if let Some((level, _)) = head {
                if taken.as_ref().is_some_and(|(start, _)| level <= *start) {
                    found.push((path, taken.take().unwrap().1.join("\n")));
                }
            }
            if let Some((_, lines)) = taken.as_mut() {
                lines.push(line);
            } else if let Some((level, name)) = head {
                if name == title {
                    taken = Some((level, vec![line]));
                }
            }
        }
        if let Some((_, lines)) = taken {
            found.push((path, lines.join("\n")));
        }
    }
    match found.len() {
        1 => found.pop().unwrap().1,
        0 => panic!("no document (README.md, docs/guide/*.md) has a section {title:?}"),
        _ => panic!(
            "several documents have a section {title:?}: {:?}",
            found.iter().map(|(path, _)| path).collect::<Vec<_>>()
        ),
    }
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
            "the documents' \"Command line\" shows no `zk-curator {command}`"
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
    // Every flag of the program is written down somewhere in the README or
    // the guide.
    let documented = flags_in(&all_documents());
    let undocumented: Vec<_> = declared.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "flags the README and the guide never mention: {undocumented:?}"
    );
    // Every flag the command-line sections (wherever they are) write for zk-curator
    // exists (the lines and spans that run cargo or pytest aside).
    let mut written = flags_in(&without_other_tools(&section("Command line")));
    written.extend(flags_in(&without_other_tools(&section(
        "The embedded server",
    ))));
    let stale: Vec<_> = written.difference(&declared).collect();
    assert!(
        stale.is_empty(),
        "flags the documents write that no command has: {stale:?}"
    );
}

#[test]
fn exit_codes_agree_between_the_readme_and_help() {
    let mut in_help = exit_codes_in_help(&help(&[]));
    for command in commands() {
        in_help.extend(exit_codes_in_help(&help(&[&command])));
    }
    // The documents' table: `| 64 | ...`, `| 126 / 127 | ...`.
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
    // 0 (success) needs no row of its own in the documents.
    in_help.remove("0");
    assert!(in_readme.contains("64"), "{in_readme:?}");
    assert_eq!(
        in_help, in_readme,
        "exit codes in --help (left) and in the documents' table (right) differ"
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
