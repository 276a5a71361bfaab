//! ZooKeeper path rules and the small path helpers the recipes share.
//!
//! # Why it works this way
//!
//! ZooKeeper rejects a malformed path only after the request has travelled
//! to the server, and the error it returns does not say what was wrong. The
//! recipes build paths from user input (a lock's parent, a node name), so
//! they check them here first, with the same rules the ZooKeeper server and
//! its Java client apply, and an error that names the path and the broken
//! rule. Nothing in this module talks to the network.
//!
//! The character rules are ZooKeeper's, which are phrased in UTF-16 code
//! units because ZooKeeper is written in Java. In Java a character above
//! U+FFFF is stored as two surrogate code units (U+D800–U+DFFF), and
//! ZooKeeper refuses that whole range, so such characters are refused here
//! as well even though a Rust `char` is never a surrogate.
//!
//! Sequential nodes get a counter appended by the server; [`Sequence`]
//! reads it back so that nodes are ordered by number rather than as
//! strings. Protected names (`_c_<uuid>-…`) let a client find the node it
//! created when the reply to its create request was lost; the helpers here
//! recognise and take apart such names.

use std::fmt;

/// The longest path, in bytes, that [`validate_path`] accepts.
///
/// This is this library's own limit, not ZooKeeper's: the server only
/// bounds the whole request packet (1 MiB by default, `jute.maxbuffer`).
/// Real paths are far shorter; a path of several kilobytes is almost
/// certainly a bug, and paths are repeated in every child listing, so the
/// limit is kept well below the packet size.
pub const MAX_PATH_LEN: usize = 4096;

/// The longest node name, in bytes, that [`validate_node_name`] accepts.
///
/// Again this library's limit rather than ZooKeeper's. It leaves room for
/// the server's sequence suffix and a protection prefix while keeping child
/// listings small, and matches the usual file-system limit on a name.
pub const MAX_NODE_NAME_LEN: usize = 255;

/// The node ZooKeeper reserves for its own use (quotas, configuration).
pub const RESERVED_ROOT: &str = "/zookeeper";

/// The start of a protected node name: `_c_<uuid>-<name>`.
pub const PROTECTED_PREFIX: &str = "_c_";

/// Length in bytes of a canonical UUID (`8-4-4-4-12` hex digits).
const UUID_LEN: usize = 36;

/// Length in bytes of a full protection prefix: `_c_`, a UUID and `-`.
const PROTECTED_PREFIX_LEN: usize = PROTECTED_PREFIX.len() + UUID_LEN + 1;

/// Why a path or node name was refused.
///
/// Paths and names are quoted with Rust's debug escaping in the messages,
/// so control characters show up as escapes. Byte indices are offsets into
/// the UTF-8 string (ZooKeeper's own messages count UTF-16 units instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// The path is the empty string.
    #[error("the path is empty; a ZooKeeper path starts with '/'")]
    Empty,
    /// The path does not start with `/`; ZooKeeper has no relative paths.
    #[error("path {path:?} does not start with '/'")]
    NotAbsolute {
        /// The refused path.
        path: String,
    },
    /// The path ends with `/` (only the root `/` may).
    #[error("path {path:?} ends with '/'")]
    TrailingSlash {
        /// The refused path.
        path: String,
    },
    /// Two slashes in a row: a component with no name.
    #[error("path {path:?} has an empty component (\"//\") at byte {index}")]
    EmptyComponent {
        /// The refused path.
        path: String,
        /// Byte index of the second slash.
        index: usize,
    },
    /// A component is `.` or `..`; ZooKeeper does not resolve them.
    #[error(
        "{path:?} has a \".\" or \"..\" component at byte {index}; \
         ZooKeeper paths are never relative"
    )]
    RelativeComponent {
        /// The refused path (or node name).
        path: String,
        /// Byte index where the component starts.
        index: usize,
    },
    /// A character ZooKeeper refuses: NUL, a control character
    /// (U+0001–U+001F, U+007F–U+009F), a surrogate or private-use character
    /// (U+D800–U+F8FF), U+FFF0–U+FFFF, or any character above U+FFFF.
    #[error("{path:?} contains the forbidden character '{}' at byte {index}", .ch.escape_unicode())]
    InvalidCharacter {
        /// The refused path (or node name).
        path: String,
        /// Byte index of the character.
        index: usize,
        /// The character.
        ch: char,
    },
    /// The path or name is longer than this library accepts
    /// ([`MAX_PATH_LEN`] for paths, [`MAX_NODE_NAME_LEN`] for names). The
    /// text itself is left out of the message because it is long.
    #[error("a path or node name of {len} bytes is over the limit of {max} bytes")]
    TooLong {
        /// Length of the refused text, in bytes.
        len: usize,
        /// The limit that applied, in bytes.
        max: usize,
    },
    /// The root `/` was given where a recipe needs a node of its own.
    #[error("the root path \"/\" cannot be used by a recipe; give it a dedicated parent node")]
    Root,
    /// The path is `/zookeeper` or lies under it, which the server reserves.
    #[error("path {path:?} is at or under \"/zookeeper\", which the ZooKeeper server reserves")]
    Reserved {
        /// The refused path.
        path: String,
    },
    /// A node name is the empty string.
    #[error("the node name is empty")]
    EmptyName,
    /// A node name contains `/`, so it is not a single component.
    #[error("node name {name:?} contains '/'; a node name is a single path component")]
    SlashInName {
        /// The refused name.
        name: String,
        /// Byte index of the first slash.
        index: usize,
    },
}

/// Whether ZooKeeper refuses `ch` anywhere in a path.
fn is_forbidden_char(ch: char) -> bool {
    let c = u32::from(ch);
    c <= 0x1F
        || (0x7F..=0x9F).contains(&c)
        || (0xD800..=0xF8FF).contains(&c)
        // U+FFF0–U+FFFF, and everything above, which Java sees as surrogates.
        || c >= 0xFFF0
}

/// Checks one non-empty component that starts at byte `offset` of `whole`.
fn check_component(component: &str, offset: usize, whole: &str) -> Result<(), PathError> {
    if component == "." || component == ".." {
        return Err(PathError::RelativeComponent {
            path: whole.to_owned(),
            index: offset,
        });
    }
    match component
        .char_indices()
        .find(|&(_, ch)| is_forbidden_char(ch))
    {
        Some((i, ch)) => Err(PathError::InvalidCharacter {
            path: whole.to_owned(),
            index: offset + i,
            ch,
        }),
        None => Ok(()),
    }
}

/// Checks a ZooKeeper path the way ZooKeeper itself would, plus a length
/// limit.
///
/// A valid path is non-empty, at most [`MAX_PATH_LEN`] bytes, starts with
/// `/`, and is either `/` alone or a sequence of `/name` components where no
/// name is empty (`//`), `.` or `..`, the path does not end with `/`, and
/// no character is forbidden (see [`PathError::InvalidCharacter`]). When a
/// path breaks several rules, the first one found from the left is
/// reported.
pub fn validate_path(path: &str) -> Result<(), PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    if path.len() > MAX_PATH_LEN {
        return Err(PathError::TooLong {
            len: path.len(),
            max: MAX_PATH_LEN,
        });
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(PathError::NotAbsolute {
            path: path.to_owned(),
        });
    };
    if rest.is_empty() {
        return Ok(());
    }
    if rest.ends_with('/') {
        return Err(PathError::TrailingSlash {
            path: path.to_owned(),
        });
    }
    let mut offset = 1;
    for component in rest.split('/') {
        if component.is_empty() {
            return Err(PathError::EmptyComponent {
                path: path.to_owned(),
                index: offset,
            });
        }
        check_component(component, offset, path)?;
        offset += component.len() + 1;
    }
    Ok(())
}

/// Checks a path that a recipe will own (a lock's parent, a barrier node).
///
/// On top of [`validate_path`] it refuses the root `/` (a recipe's children
/// would mix with everything else at the top level) and `/zookeeper` and
/// anything under it, which the server keeps for itself. `/zookeeperx` is an
/// ordinary path.
pub fn validate_recipe_path(path: &str) -> Result<(), PathError> {
    validate_path(path)?;
    if path == "/" {
        return Err(PathError::Root);
    }
    let reserved = path
        .strip_prefix(RESERVED_ROOT)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
    if reserved {
        return Err(PathError::Reserved {
            path: path.to_owned(),
        });
    }
    Ok(())
}

/// Checks a single node name (one path component, without slashes).
///
/// A valid name is non-empty, at most [`MAX_NODE_NAME_LEN`] bytes, contains
/// no `/`, is not `.` or `..`, and has no character that [`validate_path`]
/// forbids.
pub fn validate_node_name(name: &str) -> Result<(), PathError> {
    if name.is_empty() {
        return Err(PathError::EmptyName);
    }
    if name.len() > MAX_NODE_NAME_LEN {
        return Err(PathError::TooLong {
            len: name.len(),
            max: MAX_NODE_NAME_LEN,
        });
    }
    if let Some(index) = name.find('/') {
        return Err(PathError::SlashInName {
            name: name.to_owned(),
            index,
        });
    }
    check_component(name, 0, name)
}

/// Joins a parent path and a child name with exactly one `/` between them.
///
/// Trailing slashes of `parent` and leading slashes of `child` are dropped
/// first, so `join("/", "a")` is `"/a"` and `join("/a/", "/b")` is `"/a/b"`.
/// An empty `child` gives the parent itself (`"/"` for the root), and an
/// empty `parent` counts as the root. Nothing is validated; call
/// [`validate_path`] on the result when the inputs are untrusted.
pub fn join(parent: &str, child: &str) -> String {
    let parent = parent.trim_end_matches('/');
    let child = child.trim_start_matches('/');
    match (parent.is_empty(), child.is_empty()) {
        (true, true) => "/".to_owned(),
        (false, true) => parent.to_owned(),
        _ => format!("{parent}/{child}"),
    }
}

/// Splits a path into its parent and its last component.
///
/// `split("/a/b")` is `("/a", "b")`, `split("/a")` is `("/", "a")` and
/// `split("/")` is `("/", "")`. A string without any `/` gives
/// `("", whole)`. The path is expected to be valid; no check is made.
pub fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

/// The ancestors of `path`, from the top down, without `/` and without the
/// path itself: `parents("/a/b/c")` yields `"/a"` then `"/a/b"`.
///
/// These are the nodes that must exist before `path` can be created. The
/// iterator can be reversed to walk from the deepest ancestor up, as when
/// removing empty parents. The path is expected to be valid.
pub fn parents(path: &str) -> impl DoubleEndedIterator<Item = &str> + '_ {
    path.match_indices('/')
        .map(|(i, _)| i)
        .filter(|&i| i > 0)
        .map(move |i| &path[..i])
}

/// The counter ZooKeeper appends to the name of a sequential node, read as
/// an **unsigned** 32-bit number: the one parser every driver uses.
///
/// Sequences compare as numbers, so `lock-0000000010` sorts after
/// `lock-0000000009` whatever their prefixes; this is how lock and leader
/// recipes decide who is first.
///
/// ZooKeeper's counter is the parent's signed 32-bit child version, printed
/// with `%010d`: ten digits with leading zeros, and after 2³¹ creations
/// under one parent a wrapped, negative number (`-2147483648`, then up
/// towards `-000000001`). Read as signed, the first wrapped node would sort
/// *first* and jump the queue. Read here as the unsigned value of the same
/// 32 bits, the order goes on past the wrap: `-2147483648` is 2³¹, right
/// after `2147483647`, and `-000000001` is 2³² − 1. `Display` writes
/// ZooKeeper's text back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sequence(u32);

impl Sequence {
    /// Wraps a counter value.
    pub const fn new(value: u32) -> Self {
        Self(value)
    }

    /// The counter value.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// Reads `counter`, exactly the text ZooKeeper appended (what follows the
    /// caller's own name prefix), or `None` if it is not a counter:
    ///
    /// * ten or more ASCII digits up to `2147483647`: that number;
    /// * `-` and nine digits: a wrapped counter (`-000000007` → 2³² − 7);
    /// * `-` and ten digits: `-2147483648` is 2³¹; otherwise the `-` is taken
    ///   for a separator before a ten-digit counter (a lock name without its
    ///   trailing `-`), which is what it almost always is. Wrapped values
    ///   from −1 000 000 000 to −2 147 483 647 therefore read as positive: a
    ///   queue would need more than three billion nodes to meet them.
    pub fn parse(counter: &str) -> Option<Sequence> {
        let (negative, digits) = match counter.strip_prefix('-') {
            Some(digits) => (true, digits),
            None => (false, counter),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let value = parse_digits(digits.as_bytes())?;
        let max = i64::from(i32::MAX);
        match (negative, digits.len()) {
            (false, len) if len >= 10 && value <= max => u32::try_from(value).ok().map(Sequence),
            (true, 9) if value > 0 => u32::try_from((1i64 << 32) - value).ok().map(Sequence),
            (true, 10) if value == max + 1 => Some(Sequence(1 << 31)),
            (true, 10) if value <= max => u32::try_from(value).ok().map(Sequence),
            _ => None,
        }
    }

    /// Reads the counter at the end of a sequential node's name (or full
    /// path), or `None` if the name does not end with one: the last ten
    /// digits, or a `-` and the last nine or ten (see [`Sequence::parse`]).
    pub fn parse_suffix(name: &str) -> Option<Sequence> {
        let bytes = name.as_bytes();
        let run = bytes
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let take = match run {
            9 => 9,
            r if r >= 10 => 10,
            _ => return None,
        };
        let start = bytes.len() - take;
        let signed = start > 0 && bytes[start - 1] == b'-';
        let counter = if signed && (take == 9 || run == 10) {
            &name[start - 1..]
        } else {
            &name[start..]
        };
        Sequence::parse(counter)
    }
}

/// Parses ASCII digits into an `i64`, or `None` on overflow.
fn parse_digits(digits: &[u8]) -> Option<i64> {
    digits.iter().try_fold(0i64, |acc, &b| {
        acc.checked_mul(10)?.checked_add(i64::from(b - b'0'))
    })
}

impl fmt::Display for Sequence {
    /// ZooKeeper's own text (`%010d` of the signed counter).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:010}", self.0 as i32)
    }
}

impl From<u32> for Sequence {
    fn from(value: u32) -> Self {
        Self(value)
    }
}

impl From<Sequence> for u32 {
    fn from(sequence: Sequence) -> Self {
        sequence.0
    }
}

/// The protection prefix for a node created under client id `id`:
/// `_c_<id>-`.
///
/// `id` should be a freshly generated UUID in canonical form; only such
/// names are recognised by [`is_protected`]. The id is not checked here.
pub fn protected_prefix(id: &str) -> String {
    format!("{PROTECTED_PREFIX}{id}-")
}

/// Whether `bytes` is a canonical UUID: 36 characters, hex digits in groups
/// of 8-4-4-4-12 separated by `-`. Both letter cases are accepted.
fn is_canonical_uuid(bytes: &[u8]) -> bool {
    bytes.len() == UUID_LEN
        && bytes.iter().enumerate().all(|(i, &b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// Whether `name` carries a protection prefix: `_c_`, a canonical UUID, and
/// a `-` at byte 39.
///
/// The rest of the name may be anything, including nothing. Only the last
/// component should be passed, not a whole path.
pub fn is_protected(name: &str) -> bool {
    let bytes = name.as_bytes();
    bytes.len() >= PROTECTED_PREFIX_LEN
        && bytes.starts_with(PROTECTED_PREFIX.as_bytes())
        && is_canonical_uuid(&bytes[PROTECTED_PREFIX.len()..PROTECTED_PREFIX.len() + UUID_LEN])
        && bytes[PROTECTED_PREFIX_LEN - 1] == b'-'
}

/// The UUID of a protected name, or `None` if `name` is not protected.
pub fn protected_id(name: &str) -> Option<&str> {
    if is_protected(name) {
        name.get(PROTECTED_PREFIX.len()..PROTECTED_PREFIX.len() + UUID_LEN)
    } else {
        None
    }
}

/// The longest text of an input or a node name that a message repeats:
/// past it, [`cut`] shortens.
pub const MESSAGE_CUT: usize = 200;

/// `text` for a message: whole when it has at most [`MESSAGE_CUT`]
/// characters, else its first ones, an ellipsis and its length (a name or
/// input of any size stays one short line).
pub fn cut(text: &str) -> String {
    match text.char_indices().nth(MESSAGE_CUT) {
        None => text.to_owned(),
        Some((end, _)) => format!(
            "{}… ({} characters in all)",
            &text[..end],
            text.chars().count()
        ),
    }
}

/// The part of a protected name after its 40-byte prefix, or `name`
/// unchanged when it is not protected.
pub fn strip_protection(name: &str) -> &str {
    if is_protected(name) {
        name.get(PROTECTED_PREFIX_LEN..).unwrap_or(name)
    } else {
        name
    }
}

#[cfg(test)]
mod tests;
