//! Which ACL each node the framework creates gets (Curator's `ACLProvider`).

use std::fmt;

use zookeeper_client as zk;

/// Chooses the ACL of every node the framework and its recipes create:
/// lock nodes, auto-created parents, the namespace.
pub trait AclProvider: Send + Sync + fmt::Debug + 'static {
    /// The ACL for paths without a rule of their own. Must not be empty.
    fn default_acl(&self) -> Vec<zk::Acl>;

    /// The ACL for the node at `path` (relative to the namespace). Defaults
    /// to [`AclProvider::default_acl`].
    fn acl_for_path(&self, path: &str) -> Vec<zk::Acl> {
        let _ = path;
        self.default_acl()
    }
}

/// The same ACL for every node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedAcl(pub Vec<zk::Acl>);

impl AclProvider for FixedAcl {
    fn default_acl(&self) -> Vec<zk::Acl> {
        self.0.clone()
    }
}
