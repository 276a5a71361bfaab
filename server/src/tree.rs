//! The data tree: nodes with data, ACL and persisted stat, plus the indexes ZooKeeper keeps
//! beside them (ephemerals by session, containers, TTL nodes).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

use crate::acl::perms;
use crate::codec::{Acl, Id, Stat};

/// `ephemeralOwner` of container nodes.
pub const CONTAINER_OWNER: i64 = i64::MIN;
/// High byte marking an extended `ephemeralOwner` (TTL nodes).
const EXTENDED_MASK: i64 = 0xff00_0000_0000_0000_u64 as i64;
/// Reserved bits of an extended owner; zero for TTL.
const RESERVED_MASK: i64 = 0x00ff_ff00_0000_0000;
/// Largest TTL in ms.
pub const MAX_TTL: i64 = 0x0000_00ff_ffff_ffff;

/// What kind of node an `ephemeralOwner` value denotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Persistent.
    Persistent,
    /// Ephemeral, owned by this session.
    Ephemeral(i64),
    /// Container.
    Container,
    /// Persistent with a time to live in ms.
    Ttl(i64),
}

/// Decodes an `ephemeralOwner`.
pub fn kind_of(owner: i64) -> Kind {
    if owner == 0 {
        Kind::Persistent
    } else if owner == CONTAINER_OWNER {
        Kind::Container
    } else if owner & EXTENDED_MASK == EXTENDED_MASK && owner & RESERVED_MASK == 0 {
        Kind::Ttl(owner & MAX_TTL)
    } else {
        Kind::Ephemeral(owner)
    }
}

/// The `ephemeralOwner` stored for a TTL node.
pub fn ttl_owner(ttl: i64) -> i64 {
    EXTENDED_MASK | (ttl & MAX_TTL)
}

/// Stat fields the server stores (the rest is derived).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatPersisted {
    /// Creation zxid.
    pub czxid: i64,
    /// Last modification zxid.
    pub mzxid: i64,
    /// Creation time.
    pub ctime: i64,
    /// Last modification time.
    pub mtime: i64,
    /// Data version.
    pub version: i32,
    /// Number of child creations (clients see creations plus deletions).
    pub cversion: i32,
    /// ACL version.
    pub aversion: i32,
    /// Owner (session, container marker or TTL).
    pub ephemeral_owner: i64,
    /// Zxid of the last change of the children.
    pub pzxid: i64,
}

/// One node.
#[derive(Clone, Debug, Default)]
pub struct Node {
    /// Its data; `None` when it was created or last set with a null buffer (clients read
    /// null back, as from ZooKeeper).
    pub data: Option<Vec<u8>>,
    /// Its ACL.
    pub acl: Vec<Acl>,
    /// Its stored stat.
    pub stat: StatPersisted,
    /// Names of its children, kept in name order so that nothing about them depends on a
    /// hash seed. Clients still get them in no particular order unless the server sorts them
    /// (the server orders each listing by a keyed hash, as ZooKeeper's `HashSet` does; see
    /// [`sorted_children`](crate::EmbeddedServerBuilder::sorted_children)).
    pub children: BTreeSet<String>,
}

impl Node {
    /// A new node created at `zxid`, `time`.
    pub fn new(data: Option<Vec<u8>>, acl: Vec<Acl>, zxid: i64, time: i64, owner: i64) -> Node {
        Node {
            data,
            acl,
            stat: StatPersisted {
                czxid: zxid,
                mzxid: zxid,
                ctime: time,
                mtime: time,
                version: 0,
                cversion: 0,
                aversion: 0,
                ephemeral_owner: owner,
                pzxid: zxid,
            },
            children: BTreeSet::new(),
        }
    }

    /// The stat clients see, derived like ZooKeeper's `DataNode.copyStat`.
    pub fn stat(&self) -> Stat {
        let num_children = i32::try_from(self.children.len()).unwrap_or(i32::MAX);
        let owner = match kind_of(self.stat.ephemeral_owner) {
            Kind::Ephemeral(session) => session,
            _ => 0,
        };
        Stat {
            czxid: self.stat.czxid,
            mzxid: self.stat.mzxid,
            ctime: self.stat.ctime,
            mtime: self.stat.mtime,
            version: self.stat.version,
            cversion: self
                .stat
                .cversion
                .wrapping_mul(2)
                .wrapping_sub(num_children),
            aversion: self.stat.aversion,
            ephemeral_owner: owner,
            data_length: i32::try_from(self.data.as_ref().map_or(0, Vec::len)).unwrap_or(i32::MAX),
            num_children,
            pzxid: self.stat.pzxid,
        }
    }
}

/// The parent of an absolute path (`/` for top-level nodes); `None` for `/` and non-paths.
pub fn parent_of(path: &str) -> Option<&str> {
    let slash = path.rfind('/')?;
    if path == "/" {
        return None;
    }
    Some(if slash == 0 { "/" } else { &path[..slash] })
}

/// The last component of a path.
pub fn name_of(path: &str) -> &str {
    path.rfind('/').map_or(path, |slash| &path[slash + 1..])
}

/// Joins a parent path and a child name.
pub fn child_path(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// ZooKeeper's path validation (`PathUtils.validatePath`), on UTF-16 semantics: characters
/// outside the basic plane are surrogate pairs there, and rejected.
pub fn valid_path(path: &str) -> bool {
    if !path.starts_with('/') {
        return false;
    }
    if path == "/" {
        return true;
    }
    if path.ends_with('/') {
        return false;
    }
    for component in path[1..].split('/') {
        if component.is_empty() || component == "." || component == ".." {
            return false;
        }
    }
    path.chars().all(|c| {
        let c = u32::from(c);
        !(c == 0
            || (0x01..=0x1f).contains(&c)
            || (0x7f..=0x9f).contains(&c)
            || (0xd800..=0xf8ff).contains(&c)
            || (0xfff0..=0xffff).contains(&c)
            || c > 0xffff)
    })
}

/// Whether a path is one of the nodes ZooKeeper owns and never deletes.
pub fn is_special(path: &str) -> bool {
    matches!(
        path,
        "/" | "/zookeeper" | "/zookeeper/quota" | "/zookeeper/config"
    )
}

/// The nodes and their indexes.
#[derive(Debug)]
pub struct DataTree {
    /// Ordered by path: [`paths`](Self::paths) walks them in the same order on every run,
    /// and a node's descendants are one range.
    nodes: BTreeMap<String, Node>,
    /// Only looked up by session, never walked; each session's paths are ordered (the
    /// order its ephemerals are deleted in when it ends).
    ephemerals: HashMap<i64, BTreeSet<String>>,
    containers: BTreeSet<String>,
    ttls: BTreeSet<String>,
}

impl Default for DataTree {
    fn default() -> Self {
        Self::new()
    }
}

impl DataTree {
    /// A fresh tree: `/`, `/zookeeper`, `/zookeeper/quota` and `/zookeeper/config`.
    pub fn new() -> DataTree {
        let anyone = |perms| Acl {
            perms,
            id: Id {
                scheme: "world".to_owned(),
                id: "anyone".to_owned(),
            },
        };
        let mut tree = DataTree {
            nodes: BTreeMap::new(),
            ephemerals: HashMap::new(),
            containers: BTreeSet::new(),
            ttls: BTreeSet::new(),
        };
        let mut root = Node::new(Some(Vec::new()), vec![anyone(perms::ALL)], 0, 0, 0);
        root.children.insert("zookeeper".to_owned());
        let mut zookeeper = Node::new(Some(Vec::new()), vec![anyone(perms::ALL)], 0, 0, 0);
        zookeeper.children.insert("quota".to_owned());
        zookeeper.children.insert("config".to_owned());
        let quota = Node::new(Some(Vec::new()), vec![anyone(perms::ALL)], 0, 0, 0);
        let mut config = Node::new(Some(Vec::new()), vec![anyone(perms::READ)], 0, 0, 0);
        config.stat.aversion = -1;
        tree.nodes.insert("/".to_owned(), root);
        tree.nodes.insert("/zookeeper".to_owned(), zookeeper);
        tree.nodes.insert("/zookeeper/quota".to_owned(), quota);
        tree.nodes.insert("/zookeeper/config".to_owned(), config);
        tree
    }

    /// The node at `path`.
    pub fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    /// The node at `path`, mutably. Do not change its owner through this.
    pub fn get_mut(&mut self, path: &str) -> Option<&mut Node> {
        self.nodes.get_mut(path)
    }

    /// Number of nodes, including `/`.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the tree is empty (never: `/` always exists).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Puts a node at `path` (replacing any), keeping the indexes right. Does not touch the
    /// parent.
    pub fn put(&mut self, path: &str, node: Node) {
        self.unindex(path);
        self.index(path, node.stat.ephemeral_owner);
        self.nodes.insert(path.to_owned(), node);
    }

    /// Removes the node at `path`, keeping the indexes right. Does not touch the parent.
    pub fn take(&mut self, path: &str) -> Option<Node> {
        self.unindex(path);
        self.nodes.remove(path)
    }

    fn index(&mut self, path: &str, owner: i64) {
        match kind_of(owner) {
            Kind::Persistent => {}
            Kind::Container => {
                self.containers.insert(path.to_owned());
            }
            Kind::Ttl(_) => {
                self.ttls.insert(path.to_owned());
            }
            Kind::Ephemeral(session) => {
                self.ephemerals
                    .entry(session)
                    .or_default()
                    .insert(path.to_owned());
            }
        }
    }

    fn unindex(&mut self, path: &str) {
        let Some(owner) = self.nodes.get(path).map(|n| n.stat.ephemeral_owner) else {
            return;
        };
        match kind_of(owner) {
            Kind::Persistent => {}
            Kind::Container => {
                self.containers.remove(path);
            }
            Kind::Ttl(_) => {
                self.ttls.remove(path);
            }
            Kind::Ephemeral(session) => {
                if let Some(set) = self.ephemerals.get_mut(&session) {
                    set.remove(path);
                    if set.is_empty() {
                        self.ephemerals.remove(&session);
                    }
                }
            }
        }
    }

    /// Ephemeral nodes of `session`, sorted.
    pub fn ephemerals(&self, session: i64) -> Vec<String> {
        self.ephemerals
            .get(&session)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Container nodes.
    pub fn containers(&self) -> impl Iterator<Item = &String> {
        self.containers.iter()
    }

    /// TTL nodes.
    pub fn ttls(&self) -> impl Iterator<Item = &String> {
        self.ttls.iter()
    }

    /// Number of descendants of `path` (for `/`: every node but the root).
    pub fn descendants(&self, path: &str) -> usize {
        if path == "/" {
            return self.nodes.len().saturating_sub(1);
        }
        let prefix = format!("{path}/");
        self.nodes
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(&prefix))
            .count()
    }

    /// Every path in the tree, sorted (for checks in tests).
    pub fn paths(&self) -> impl Iterator<Item = &String> {
        self.nodes.keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners() {
        assert_eq!(kind_of(0), Kind::Persistent);
        assert_eq!(kind_of(CONTAINER_OWNER), Kind::Container);
        assert_eq!(kind_of(ttl_owner(5000)), Kind::Ttl(5000));
        assert_eq!(kind_of(0x0123_4567), Kind::Ephemeral(0x0123_4567));
    }

    #[test]
    fn paths() {
        assert_eq!(parent_of("/a"), Some("/"));
        assert_eq!(parent_of("/a/b"), Some("/a"));
        assert_eq!(parent_of("/"), None);
        assert_eq!(parent_of("a"), None);
        assert_eq!(name_of("/a/b"), "b");
        assert!(valid_path("/"));
        assert!(valid_path("/a/b.c/..d"));
        for bad in [
            "",
            "a",
            "/a/",
            "//",
            "/a//b",
            "/a/./b",
            "/a/..",
            "/a\u{0}",
            "/\u{1F600}",
        ] {
            assert!(!valid_path(bad), "{bad:?}");
        }
    }

    #[test]
    fn descendants_are_the_paths_under_a_node() {
        let mut tree = DataTree::new();
        for path in ["/a", "/a/b", "/a/b/c", "/a-x", "/ab", "/b"] {
            tree.put(path, Node::default());
        }
        assert_eq!(tree.descendants("/a"), 2);
        assert_eq!(tree.descendants("/a/b"), 1);
        assert_eq!(tree.descendants("/ab"), 0);
        assert_eq!(tree.descendants("/"), tree.len() - 1);
        let paths: Vec<&String> = tree.paths().collect();
        assert!(paths.windows(2).all(|w| w[0] < w[1]), "{paths:?}");
    }

    #[test]
    fn client_cversion_counts_deletes() {
        let mut node = Node::new(None, Vec::new(), 1, 1, 0);
        node.stat.cversion = 3;
        node.children.insert("x".into());
        assert_eq!(node.stat().cversion, 5);
        assert_eq!(node.stat().num_children, 1);
    }
}
