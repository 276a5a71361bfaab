//! [`HolderIdentity`]: who created a participant node.
//!
//! Operators asking "who holds this lock, and since when?" find the age in
//! the node's stat and the creator in its data. Unless a recipe is given
//! data of its own, every participant node carries the identity of the
//! process that created it, as a small JSON object:
//!
//! ```text
//! {"host":"worker-7","pid":4242,"label":"nightly-report"}
//! ```
//!
//! `host` is the machine's host name, `pid` the process id, and `label` the
//! optional text given to [`FrameworkBuilder::identity_label`] (left out
//! when unset). Apache Curator ignores node data, so JVM services sharing the
//! lock are not affected; any tool can read the JSON.
//!
//! [`FrameworkBuilder::identity_label`]: crate::FrameworkBuilder::identity_label

use serde::{Deserialize, Serialize};

/// The creator of a participant node, as stored in its data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderIdentity {
    /// The host name of the creating machine.
    pub host: String,
    /// The creating process's id.
    pub pid: u32,
    /// The application-given label, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// The host name of every identity made on a seeded thread (see
/// [`HolderIdentity::of_this_process`]).
pub const SEEDED_HOST: &str = "simulated";

/// The longest label kept (longer ones are cut at a character boundary), so
/// that node data stays small.
pub const MAX_LABEL_LEN: usize = 256;

impl HolderIdentity {
    /// This process, with an optional label. On a thread seeded with
    /// [`random::seed`](crate::random::seed) (a simulation) the host is
    /// [`SEEDED_HOST`] and the pid 0: nothing of the real machine goes into
    /// the simulated nodes, so a seed replays the same bytes on any machine.
    pub fn of_this_process(label: Option<&str>) -> HolderIdentity {
        let label = label.map(|label| {
            let mut end = label.len().min(MAX_LABEL_LEN);
            while !label.is_char_boundary(end) {
                end -= 1;
            }
            label[..end].to_owned()
        });
        if crate::random::is_seeded() {
            return HolderIdentity {
                host: SEEDED_HOST.to_owned(),
                pid: 0,
                label,
            };
        }
        HolderIdentity {
            host: host_name(),
            pid: std::process::id(),
            label,
        }
    }

    /// The node data: the JSON object described in the module docs.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads an identity from node data, or `None` if the data is something
    /// else (a recipe's own data, or empty).
    pub fn parse(data: &[u8]) -> Option<HolderIdentity> {
        serde_json::from_slice(data).ok()
    }
}

/// The key under which a bounded hold publishes its last progress in its
/// node's identity (milliseconds since the epoch; see
/// [`HoldBounds::publish_progress`](crate::lock_internals::HoldBounds::publish_progress)).
pub const PROGRESS_KEY: &str = "progress_ms";

/// `data` (an identity, or any JSON object) with its last progress set to
/// `at_ms`; `None` if `data` is not a JSON object.
pub fn with_progress(data: &[u8], at_ms: i64) -> Option<Vec<u8>> {
    let mut value: serde_json::Value = serde_json::from_slice(data).ok()?;
    value
        .as_object_mut()?
        .insert(PROGRESS_KEY.to_owned(), serde_json::Value::from(at_ms));
    serde_json::to_vec(&value).ok()
}

/// The last progress published in node `data`, if any.
pub fn progress_of(data: &[u8]) -> Option<i64> {
    let value: serde_json::Value = serde_json::from_slice(data).ok()?;
    value.get(PROGRESS_KEY)?.as_i64()
}

/// The host name: `HOSTNAME`, else the kernel's, else `unknown`.
fn host_name() -> String {
    let from_env = std::env::var("HOSTNAME").ok();
    let from_kernel = || {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .ok()
    };
    from_env
        .or_else(from_kernel)
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reads_the_documented_shape() {
        let me = HolderIdentity::of_this_process(Some("nightly"));
        assert_eq!(me.pid, std::process::id());
        assert!(!me.host.is_empty());
        assert_eq!(HolderIdentity::parse(&me.to_bytes()), Some(me));
        let documented = br#"{"host":"worker-7","pid":4242,"label":"nightly-report"}"#;
        let read = HolderIdentity::parse(documented).unwrap();
        assert_eq!(read.host, "worker-7");
        assert_eq!(read.label.as_deref(), Some("nightly-report"));
        let unlabelled = HolderIdentity::of_this_process(None);
        assert!(!String::from_utf8(unlabelled.to_bytes())
            .unwrap()
            .contains("label"));
        assert_eq!(HolderIdentity::parse(b""), None);
        assert_eq!(HolderIdentity::parse(b"__REVOKE__"), None);
    }

    #[test]
    fn progress_is_added_to_an_identity_and_read_back() {
        let me = HolderIdentity::of_this_process(Some("nightly")).to_bytes();
        let with = with_progress(&me, 1234).unwrap();
        assert_eq!(progress_of(&with), Some(1234));
        assert_eq!(HolderIdentity::parse(&with), HolderIdentity::parse(&me));
        assert_eq!(progress_of(&with_progress(&with, 99).unwrap()), Some(99));
        assert_eq!(with_progress(b"plain", 1), None);
        assert_eq!(with_progress(b"[1]", 1), None);
        assert_eq!(progress_of(&me), None);
    }

    /// On a seeded thread (a simulation) nothing of the real machine goes
    /// into an identity; each test runs on a thread of its own.
    #[test]
    fn a_seeded_thread_s_identity_names_no_real_host_or_process() {
        std::thread::spawn(|| {
            crate::random::seed(7);
            let me = HolderIdentity::of_this_process(Some("sim"));
            assert_eq!(me.host, SEEDED_HOST);
            assert_eq!(me.pid, 0);
            assert_eq!(me.label.as_deref(), Some("sim"));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn long_labels_are_cut_at_a_character_boundary() {
        let label = "é".repeat(MAX_LABEL_LEN);
        let me = HolderIdentity::of_this_process(Some(&label));
        let kept = me.label.unwrap();
        assert!(kept.len() <= MAX_LABEL_LEN && kept.chars().all(|c| c == 'é'));
    }
}
