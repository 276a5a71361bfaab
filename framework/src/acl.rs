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

/// All permissions for the session that creates a node, read for everyone
/// else: what Kafka sets on its znodes with `zookeeper.set.acl=true`.
///
/// The ACL is `auth::cdrwa` plus `world:anyone:r`. ZooKeeper expands
/// `auth` into every authenticated identity of the creating session (its
/// `digest` user from [`FrameworkBuilder::digest_auth`], its `sasl` user,
/// the subject of its client certificate under ZooKeeper's `x509` provider),
/// so only sessions proving one of those identities may write, delete, add
/// children or change the ACL, while anyone can still read the node and list
/// its children (so holders and leaders stay visible).
///
/// The session must be authenticated: one with no such identity has its
/// creates refused with [`Error::InvalidAcl`](crate::Error::InvalidAcl),
/// since `auth` then stands for nobody.
///
/// [`FrameworkBuilder::digest_auth`]: crate::FrameworkBuilder::digest_auth
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreatorAllAnyoneRead;

impl CreatorAllAnyoneRead {
    /// The ACL this provider gives every node: `auth::cdrwa`, then
    /// `world:anyone:r`.
    pub fn acl() -> Vec<zk::Acl> {
        zk::Acls::creator_all()
            .iter()
            .chain(zk::Acls::anyone_read().iter())
            .cloned()
            .collect()
    }
}

impl AclProvider for CreatorAllAnyoneRead {
    fn default_acl(&self) -> Vec<zk::Acl> {
        Self::acl()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creator_all_anyone_read_is_the_two_entries() {
        let acl = CreatorAllAnyoneRead.default_acl();
        assert_eq!(
            acl,
            vec![
                zk::Acl::new(zk::Permission::ALL, zk::AuthId::authed()),
                zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone()),
            ]
        );
        assert_eq!(CreatorAllAnyoneRead.acl_for_path("/any/path"), acl);
        assert_eq!(CreatorAllAnyoneRead::acl(), acl);
    }

    #[test]
    fn creator_all_anyone_read_goes_through_the_builder() {
        let framework = crate::Framework::builder()
            .connect_string("127.0.0.1:1")
            .acl_provider(CreatorAllAnyoneRead)
            .build()
            .expect("a framework built without connecting");
        assert_eq!(framework.default_acl(), CreatorAllAnyoneRead::acl());
        assert_eq!(framework.acl_for_path("/a/b"), CreatorAllAnyoneRead::acl());
    }
}
