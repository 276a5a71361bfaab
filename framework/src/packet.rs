//! ZooKeeper's packet limit, checked before a write is sent.
//!
//! A server closes the connection of a client whose request is longer than
//! its `jute.maxbuffer` (0xfffff bytes unless configured otherwise). The
//! client then sees `ConnectionLoss` with the outcome unknown, and every
//! hold of the session is lost with the connection. The framework therefore
//! sizes each write it sends on a user's behalf (node data, fenced writes,
//! multis) in ZooKeeper's wire format and refuses one over the limit with
//! [`Error::RequestTooLarge`] before anything is sent.

use zookeeper_client as zk;

use crate::error::{Error, Result};

/// ZooKeeper's default `jute.maxbuffer`: the longest request a server
/// accepts, in bytes, not counting the 4-byte length in front of it.
pub const DEFAULT_MAX_PACKET_SIZE: usize = 0xfffff;

/// A request's header: its xid and opcode.
const REQUEST_HEADER: usize = 8;
/// The header in front of each operation of a multi, and the one that ends
/// it: type, done flag, error code.
const MULTI_HEADER: usize = 9;

/// The bytes of a jute string or buffer of `len` bytes.
const fn field(len: usize) -> usize {
    4 + len
}

/// One write of a request or a multi, sized without any header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Op(usize);

impl Op {
    /// A create of `path` (as the caller names it; `root` is the namespace
    /// prepended on the wire) with `data`.
    ///
    /// `zookeeper-client` does not show a create's ACL, so the ACL, the
    /// flags and the TTL are bounded by the options' `Debug` form, which
    /// spells out every scheme and id with room to spare: a create is never
    /// counted smaller than it is.
    pub(crate) fn create(
        root: usize,
        path: &str,
        data: usize,
        options: &zk::CreateOptions<'_>,
    ) -> Op {
        let acl_flags_ttl = format!("{options:?}").len();
        Op(field(root + path.len()) + field(data) + acl_flags_ttl)
    }

    /// A create whose ACL is known (`flags` and, for a TTL node, 8 bytes of
    /// TTL after it).
    pub(crate) fn create_with(
        root: usize,
        path: &str,
        data: usize,
        acl: &[zk::Acl],
        ttl: bool,
    ) -> Op {
        let acl: usize = acl
            .iter()
            .map(|a| 4 + field(a.scheme().len()) + field(a.id().len()))
            .sum();
        Op(field(root + path.len()) + field(data) + field(acl) + 4 + if ttl { 8 } else { 0 })
    }

    /// A set-data of `path` with `data`.
    pub(crate) fn set_data(root: usize, path: &str, data: usize) -> Op {
        Op(field(root + path.len()) + field(data) + 4)
    }

    /// A delete of `path`.
    pub(crate) fn delete(root: usize, path: &str) -> Op {
        Op(field(root + path.len()) + 4)
    }

    /// A version check of `path`.
    pub(crate) fn check(root: usize, path: &str) -> Op {
        Op(field(root + path.len()) + 4)
    }

    /// The size of the request carrying this operation alone.
    pub(crate) fn alone(self) -> usize {
        REQUEST_HEADER + self.0
    }
}

/// The size of a multi request made of `ops`.
pub(crate) fn multi(ops: impl IntoIterator<Item = Op>) -> usize {
    REQUEST_HEADER + ops.into_iter().map(|op| MULTI_HEADER + op.0).sum::<usize>() + MULTI_HEADER
}

/// Refuses a request of `size` bytes over `limit`.
///
/// # Errors
/// [`Error::RequestTooLarge`].
pub(crate) fn check(size: usize, limit: usize) -> Result<()> {
    if size > limit {
        return Err(Error::RequestTooLarge { size, limit });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_is_never_counted_smaller_than_its_known_acl_form() {
        let acl = zk::Acls::anyone_all();
        let options = zk::CreateMode::EphemeralSequential.with_acls(acl);
        let bounded = Op::create(0, "/locks/a", 10, &options);
        let exact = Op::create_with(0, "/locks/a", 10, &acl, false);
        assert!(bounded.0 >= exact.0, "{bounded:?} < {exact:?}");
    }

    #[test]
    fn a_request_over_the_limit_is_refused_with_both_sizes() {
        let op = Op::set_data(0, "/a", 100);
        // Header, path "/a", data, version.
        assert_eq!(op.alone(), 8 + (4 + 2) + (4 + 100) + 4);
        assert!(check(op.alone(), op.alone()).is_ok());
        assert_eq!(
            check(op.alone(), op.alone() - 1),
            Err(Error::RequestTooLarge {
                size: op.alone(),
                limit: op.alone() - 1
            })
        );
        // A multi of one check and the write: its header, each operation's
        // header and the closing one.
        let checked = multi([Op::check(0, "/l"), op]);
        assert_eq!(checked, 8 + 9 + (4 + 2 + 4) + 9 + (op.alone() - 8) + 9);
    }
}
