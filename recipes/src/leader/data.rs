//! The election path's data: the value its leader proclaims (see
//! [`proclaim`](super::proclaim)) and a request that the leader step down
//! (see [`revocation`](super::revocation)). One format, read and written
//! here only; a leaf of the leader folder.
//!
//! ```text
//! zk-curator proclaim 1\n<leader node name>[ <term count>]\n<value bytes>
//! zk-curator proclaim 1 step-down <node name>\n<leader node name>[ <term count>]\n<value bytes>
//! ```

/// The first line of a proclaimed value in the election path's data.
const MAGIC: &[u8] = b"zk-curator proclaim 1\n";
/// The first line's start, when a revocation request follows on it.
const MAGIC_ASKING: &[u8] = b"zk-curator proclaim 1 step-down ";

/// The data the election path holds once the term numbered `pass` on
/// `node` proclaimed `value`.
pub(crate) fn encode(node: &str, pass: u32, value: &[u8]) -> Vec<u8> {
    let mut data = MAGIC.to_vec();
    push_node(&mut data, node, pass);
    data.extend_from_slice(value);
    data
}

/// Appends the line naming the term: its node, and its count if not 0.
fn push_node(data: &mut Vec<u8>, node: &str, pass: u32) {
    data.extend_from_slice(node.as_bytes());
    if pass > 0 {
        data.extend_from_slice(format!(" {pass}").as_bytes());
    }
    data.push(b'\n');
}

/// The election path's data that asks the leader on node `target` to step
/// down, keeping the value proclaimed in `now` (if any).
pub(crate) fn encode_request(target: &str, now: Option<&Proclaimed>) -> Vec<u8> {
    let (node, pass, value) = now.map_or(("", 0, &[][..]), |p| {
        (p.node.as_str(), p.pass, &p.value[..])
    });
    let mut data = MAGIC_ASKING.to_vec();
    data.extend_from_slice(target.as_bytes());
    data.push(b'\n');
    push_node(&mut data, node, pass);
    data.extend_from_slice(value);
    data
}

/// A value proclaimed in an election path's data: by which node, what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Proclaimed {
    /// The name of the node whose term wrote it.
    pub(crate) node: String,
    /// That term's count on its node (the `pass` of its token).
    pub(crate) pass: u32,
    pub(crate) value: Vec<u8>,
    /// The node whose leader is asked to step down, if any.
    pub(crate) revoke: Option<String>,
}

impl Proclaimed {
    /// Reads an election path's data: `None` unless it is a proclaimed
    /// value (an empty path, say, as Curator and the engine create it).
    pub(crate) fn decode(data: &[u8]) -> Option<Proclaimed> {
        let line = |data: &[u8]| -> Option<(String, usize)> {
            let end = data.iter().position(|&b| b == b'\n')?;
            Some((std::str::from_utf8(&data[..end]).ok()?.to_owned(), end + 1))
        };
        let (revoke, rest) = match data.strip_prefix(MAGIC) {
            Some(rest) => (None, rest),
            None => {
                let asking = data.strip_prefix(MAGIC_ASKING)?;
                let (target, used) = line(asking)?;
                (Some(target), &asking[used..])
            }
        };
        let (named, used) = line(rest)?;
        // Node names have no spaces: a space starts the term's count.
        let (node, pass) = match named.split_once(' ') {
            Some((node, pass)) => (node.to_owned(), pass.parse().ok()?),
            None => (named, 0),
        };
        Some(Proclaimed {
            revoke,
            node,
            pass,
            value: rest[used..].to_vec(),
        })
    }

    /// What the term on the node named `node` proclaimed, if it did: the
    /// term's count and the value.
    pub(crate) fn of(this: Option<&Proclaimed>, node: &str) -> Option<(u32, Vec<u8>)> {
        this.filter(|p| p.node == node)
            .map(|p| (p.pass, p.value.clone()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_proclaimed_value_reads_back_with_its_node() {
        let data = encode("_c_x-latch-0000000003", 0, b"10.0.0.7:80\nline two");
        let read = Proclaimed::decode(&data).unwrap();
        assert_eq!(read.node, "_c_x-latch-0000000003");
        assert_eq!(read.value, b"10.0.0.7:80\nline two");
        assert_eq!(
            Proclaimed::of(Some(&read), "_c_x-latch-0000000003"),
            Some((0, b"10.0.0.7:80\nline two".to_vec()))
        );
        assert_eq!(Proclaimed::of(Some(&read), "_c_y-latch-0000000004"), None);
    }

    #[test]
    fn a_later_term_on_the_same_node_writes_its_count() {
        let data = encode("_c_x-latch-0000000003", 2, b"v");
        assert!(data.starts_with(b"zk-curator proclaim 1\n_c_x-latch-0000000003 2\nv"));
        let read = Proclaimed::decode(&data).unwrap();
        assert_eq!(
            (read.node.as_str(), read.pass),
            ("_c_x-latch-0000000003", 2)
        );
        assert_eq!(
            Proclaimed::of(Some(&read), "_c_x-latch-0000000003"),
            Some((2, b"v".to_vec()))
        );
        // A request keeps the count.
        let asked = encode_request("_c_x-latch-0000000003", Some(&read));
        assert_eq!(Proclaimed::decode(&asked).unwrap().pass, 2);
        // A count that is not a number is no proclaimed value.
        assert_eq!(Proclaimed::decode(b"zk-curator proclaim 1\nn x\nv"), None);
    }

    #[test]
    fn a_revocation_request_keeps_the_value() {
        let now = Proclaimed::decode(&encode("_c_x-latch-0000000003", 0, b"v")).unwrap();
        let asked = encode_request("_c_x-latch-0000000003", Some(&now));
        let read = Proclaimed::decode(&asked).unwrap();
        assert_eq!(read.revoke.as_deref(), Some("_c_x-latch-0000000003"));
        assert_eq!(
            (read.node.as_str(), &read.value[..]),
            ("_c_x-latch-0000000003", &b"v"[..])
        );
        // Nothing proclaimed: a request, and no value for anyone.
        let read = Proclaimed::decode(&encode_request("_c_y-lock-0000000001", None)).unwrap();
        assert_eq!(read.revoke.as_deref(), Some("_c_y-lock-0000000001"));
        assert_eq!(Proclaimed::of(Some(&read), "_c_y-lock-0000000001"), None);
        assert_eq!(read.node, "");
    }

    #[test]
    fn other_data_is_no_proclaimed_value() {
        assert_eq!(Proclaimed::decode(b""), None);
        assert_eq!(Proclaimed::decode(b"some data"), None);
        assert_eq!(Proclaimed::decode(MAGIC), None);
    }
}
