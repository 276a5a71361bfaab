//! Where each recipe keeps its nodes in ZooKeeper, who among them holds and
//! who waits, and one reader that fetches participant nodes in a single
//! round trip.
//!
//! The layouts are Apache Curator's, so Rust and JVM services contend on the
//! same paths:
//!
//! * mutex ([`InterProcessMutex`](crate::InterProcessMutex)):
//!   `<path>/_c_<uuid>-lock-<seq>`; the first node holds.
//! * read-write lock ([`InterProcessReadWriteLock`](crate::InterProcessReadWriteLock)):
//!   `<path>/_c_<uuid>-__READ__<seq>` and `…-__WRIT__<seq>`, sorted
//!   together; a writer holds when no node is ahead of it, a reader when no
//!   writer is (a downgraded read node takes its write node's sequence, so
//!   the two are level and neither counts as ahead of the other).
//! * semaphore ([`InterProcessSemaphoreV2`](crate::InterProcessSemaphoreV2),
//!   [`InterProcessSemaphoreMutex`](crate::InterProcessSemaphoreMutex)):
//!   `<path>/leases/_c_<uuid>-lease-<seq>`, the first `max_leases` hold, and
//!   the internal queue `<path>/locks/_c_<uuid>-lock-<seq>` of acquirers
//!   that have not created their lease node yet.
//! * leader election: a [`LeaderLatch`](crate::LeaderLatch)'s
//!   `<path>/_c_<uuid>-latch-<seq>`, a [`LeaderSelector`](crate::LeaderSelector)'s
//!   `<path>/_c_<uuid>-lock-<seq>` (a mutex's queue); the first leads.
//!
//! # Why one module
//!
//! The recipes decide who holds with the rules here ([`read_write_turn`],
//! [`first_hold`]), and [`lock_participants`] reports holders and waiters
//! with the same rules, so what a tool shows (and what it offers to revoke)
//! cannot drift from what the recipes do.

use futures::StreamExt;
use std::cmp::Ordering;

use zk_curator_framework::lock_internals::{standard_sort_key, PredicateResults, SortKey};
use zk_curator_framework::path::{cut, join, split, strip_protection};
use zk_curator_framework::{zk, Error, Framework, LockLoss, Result};

pub use zk_curator_framework::lock_internals::layout::{
    check_children, check_family, kazoo_participant, Family, Layout, KAZOO_LOCK_NAME,
    KAZOO_READ_LOCK_NAME, LATCH_NAME, LEASES_CHILD, LEASE_NAME, LOCKS_CHILD, LOCK_NAME,
    READ_LOCK_NAME, WRITE_LOCK_NAME,
};

/// The name a mutex's (and a leader selector's) participants carry in
/// `layout`: Curator's `lock-` or kazoo's `__lock__`.
pub fn mutex_lock_name(layout: Layout) -> &'static str {
    match layout {
        Layout::Kazoo => KAZOO_LOCK_NAME,
        _ => LOCK_NAME,
    }
}

/// The names a read-write lock's readers and writers carry in `layout`:
/// Curator's `__READ__` and `__WRIT__`, or kazoo's `__rlock__` and
/// `__lock__` (a kazoo `WriteLock`'s nodes are named as a `Lock`'s).
pub fn read_write_lock_names(layout: Layout) -> (&'static str, &'static str) {
    match layout {
        Layout::Kazoo => (KAZOO_READ_LOCK_NAME, KAZOO_LOCK_NAME),
        _ => (READ_LOCK_NAME, WRITE_LOCK_NAME),
    }
}

/// A lock recipe, as far as the layout of a path's children tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Recipe {
    /// [`InterProcessMutex`](crate::InterProcessMutex).
    Mutex,
    /// [`InterProcessReadWriteLock`](crate::InterProcessReadWriteLock).
    ReadWrite,
    /// [`InterProcessSemaphoreV2`](crate::InterProcessSemaphoreV2) (and the
    /// one-lease [`InterProcessSemaphoreMutex`](crate::InterProcessSemaphoreMutex)).
    Semaphore,
}

impl Recipe {
    /// `"mutex"`, `"read-write lock"` or `"semaphore"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Recipe::Mutex => "mutex",
            Recipe::ReadWrite => "read-write lock",
            Recipe::Semaphore => "semaphore",
        }
    }
}

/// What a participant node is, by its name and place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// A mutex participant (`lock-`).
    Mutex,
    /// A read-write lock's reader (`__READ__`).
    Read,
    /// A read-write lock's writer (`__WRIT__`).
    Write,
    /// A semaphore acquirer: a lease node, or a node of the internal queue.
    Lease,
    /// A leader latch's participant (`latch-`).
    Latch,
}

impl Kind {
    /// `"mutex"`, `"read"`, `"write"`, `"lease"` or `"latch"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Lease => "lease",
            Kind::Latch => "latch",
        }
    }
}

/// Whether a participant holds the lock or waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// It holds the lock (or one of a semaphore's leases).
    Holder,
    /// It waits for it.
    Waiter,
}

impl Role {
    /// `"holder"` or `"waiter"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Holder => "holder",
            Role::Waiter => "waiter",
        }
    }
}

/// The kind of a read-write lock child: in kazoo's layout a reader if it
/// ends in `__rlock__` and a sequence, a writer if in `__lock__` (kazoo's
/// `Lock` and `WriteLock` alike); in Curator's, a writer if its name (after
/// the protection prefix) holds `__WRIT__` (Curator's test of a writer),
/// else a reader if it holds `__READ__`; `None` for a name with none.
pub fn read_write_kind(name: &str) -> Option<Kind> {
    if let Some((marker, _)) = kazoo_participant(name) {
        return Some(if marker == KAZOO_READ_LOCK_NAME {
            Kind::Read
        } else {
            Kind::Write
        });
    }
    let bare = strip_protection(name);
    if bare.contains(WRITE_LOCK_NAME) {
        Some(Kind::Write)
    } else if bare.contains(READ_LOCK_NAME) {
        Some(Kind::Read)
    } else {
        None
    }
}

/// How readers and writers sort together: a kazoo participant by its
/// sequence (as [`Layout::Kazoo`] sorts); otherwise by the sequence after
/// the last `__READ__` or `__WRIT__` in the name, whichever comes last
/// (Curator's sorter strips at the last `__READ__`, then at the last
/// `__WRIT__`).
pub fn read_write_sort_key(name: &str) -> SortKey {
    if kazoo_participant(name).is_some() {
        return Layout::Kazoo.sort_key(name, KAZOO_LOCK_NAME);
    }
    let bare = strip_protection(name);
    let marker = match (bare.rfind(READ_LOCK_NAME), bare.rfind(WRITE_LOCK_NAME)) {
        (Some(read), Some(write)) if write > read => WRITE_LOCK_NAME,
        (None, Some(_)) => WRITE_LOCK_NAME,
        _ => READ_LOCK_NAME,
    };
    standard_sort_key(name, marker)
}

/// The read-write lock's rule, for the participant at `index` of `sorted`
/// (each child's kind and [`read_write_sort_key`], in sort order): a writer
/// holds when no participant sorts ahead of it, a reader when no writer
/// does. A participant level with ours (the read node of a downgrade takes
/// its write node's sequence) is not ahead.
///
/// # Errors
/// [`Error::InvalidArgument`] when `index` is out of `sorted`.
pub fn read_write_turn(sorted: &[(Kind, SortKey)], index: usize) -> Result<Turn> {
    let Some((kind, key)) = sorted.get(index) else {
        return Err(Error::InvalidArgument(format!(
            "participant {index} of {}",
            sorted.len()
        )));
    };
    let blocks = |(other, other_key): &(Kind, SortKey)| {
        other_key != key && (*kind == Kind::Write || *other == Kind::Write)
    };
    Ok(match sorted[..index].iter().rposition(blocks) {
        None => Turn::Holds,
        // A writer watches the node right ahead; a reader the nearest
        // writer ahead (any reader in between holds with that writer).
        Some(_) if *kind == Kind::Write => Turn::Waits { watch: index - 1 },
        Some(at) => Turn::Waits { watch: at },
    })
}

/// The rule of the mutex, the semaphore's leases and the elections: the
/// first `max_leases` participants in sort order hold. (The lock engine's
/// [`standard_gets_the_lock`](zk_curator_framework::lock_internals::standard_gets_the_lock)
/// applies it.)
pub fn first_hold(index: usize, max_leases: u32) -> bool {
    index < max_leases as usize
}

/// What a rule decided for one participant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// It holds the lock.
    Holds,
    /// It waits; the participant at index `watch` is the one whose
    /// departure may let it in.
    Waits {
        /// The index, in the same sorted list, of the participant to watch.
        watch: usize,
    },
}

/// The read-write rule as the lock engine asks it: `sorted_children` are
/// names sorted by [`read_write_sort_key`].
pub(crate) fn read_write_predicate(
    sorted_children: &[String],
    our_name: &str,
) -> Result<PredicateResults> {
    let Some(index) = sorted_children.iter().position(|c| c == our_name) else {
        return Err(Error::lock_lost(our_name, LockLoss::NodeDeleted));
    };
    let sorted: Vec<(Kind, SortKey)> = sorted_children
        .iter()
        .map(|name| {
            let kind = read_write_kind(name).unwrap_or(Kind::Read);
            (kind, read_write_sort_key(name))
        })
        .collect();
    Ok(match read_write_turn(&sorted, index)? {
        Turn::Holds => PredicateResults::holds(),
        Turn::Waits { watch } => PredicateResults::watch(sorted_children[watch].clone()),
    })
}

/// One participant of a lock, read from its node.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockParticipant {
    /// What the node is.
    pub kind: Kind,
    /// Whether it holds or waits.
    pub role: Role,
    /// The node's full path.
    pub node_path: String,
    /// The node's name (the last part of its path).
    pub name: String,
    /// Its queue number, when the name ends in one.
    pub sequence: Option<u32>,
    /// The node's ephemeral owner (0 for a persistent node).
    pub session: i64,
    /// Creation time, milliseconds since the epoch (the server's clock).
    pub ctime_ms: i64,
    /// The creating transaction's zxid: the hold's fencing token.
    pub czxid: i64,
    /// The node's data (the holder identity or the caller's node data).
    pub data: Vec<u8>,
    /// Whose nodes it is: participants of different families on one path
    /// do not see each other, and each family has its own queue.
    pub family: Family,
    /// Whether its node is still to be read. Only a
    /// [`TreeObserver`](crate::tree::TreeObserver) shows such a
    /// participant: on a busy tree it shows a new node at once, by its name
    /// and place in the queue, and reads it once it has lived a while (most
    /// nodes of a busy lock's queue come and go sooner). Until then `data`
    /// is empty, `session` and `czxid` are 0, and `ctime_ms` is when the
    /// observer was told of its creation (this host's clock). Every direct
    /// read ([`lock_participants`]) gives `false`.
    pub pending: bool,
}

/// A child name with its kind and place in the queue.
struct Named {
    kind: Kind,
    name: String,
    key: SortKey,
}

impl Named {
    /// `name` as a `kind` participant, if it carries `lock_name`.
    fn with(kind: Kind, name: &str, lock_name: &str) -> Option<Named> {
        strip_protection(name).contains(lock_name).then(|| Named {
            kind,
            name: name.to_owned(),
            key: standard_sort_key(name, lock_name),
        })
    }

    /// `name` as a reader or writer, if it is one.
    fn read_write(name: &str) -> Option<Named> {
        read_write_kind(name).map(|kind| Named {
            kind,
            name: name.to_owned(),
            key: read_write_sort_key(name),
        })
    }

    fn sequence(&self) -> Option<u32> {
        match &self.key {
            SortKey::Sequence(seq) => Some(seq.value()),
            SortKey::Foreign(_) => None,
        }
    }
}

/// Sorts by queue position; names without a sequence go last, by name.
fn sorted(mut names: Vec<Named>) -> Vec<Named> {
    names.sort_by(|a, b| match a.key.cmp(&b.key) {
        Ordering::Equal => a.name.cmp(&b.name),
        other => other,
    });
    names
}

/// The children of `path`; none if it does not exist.
async fn list(framework: &Framework, path: &str) -> Result<Vec<String>> {
    Ok(list_existing(framework, path).await?.unwrap_or_default())
}

/// Reads the data and stat of every node of `nodes` (full paths) in one
/// round trip: the reads are sent back to back on one session, and retried
/// together by the framework's retry policy. A node gone meanwhile reads as
/// `None`, in its place.
///
/// # Errors
/// ZooKeeper errors that retrying could not overcome; [`Error::Closed`].
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub async fn read_nodes(
    framework: &Framework,
    nodes: &[String],
) -> Result<Vec<Option<(Vec<u8>, zk::Stat)>>> {
    if nodes.is_empty() {
        return Ok(Vec::new());
    }
    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let nodes = nodes.as_slice();
    framework
        .call_with_retry(|client| async move { read_together(&client, nodes).await })
        .await
}

/// The most reads in one `multiRead` request (its reply stays well under
/// ZooKeeper's default packet limit, 1 MB, for nodes of recipes' size).
const READS_PER_REQUEST: usize = 256;

/// The data and stat of each node of `paths`, in order (`None`: no such
/// node), on `client`'s session: one `multiRead` request per
/// [`READS_PER_REQUEST`] nodes, the requests pipelined. A server older than
/// ZooKeeper 3.6 has no `multiRead`: there each node is read by itself,
/// the reads pipelined.
pub(crate) async fn read_together(
    client: &zk::Client,
    paths: &[&str],
) -> std::result::Result<Vec<Option<(Vec<u8>, zk::Stat)>>, zk::Error> {
    match read_multi(client, paths).await {
        Err(zk::Error::Unimplemented) => read_each(client, paths).await,
        read => read,
    }
}

/// [`read_together`] with `multiRead`.
async fn read_multi(
    client: &zk::Client,
    paths: &[&str],
) -> std::result::Result<Vec<Option<(Vec<u8>, zk::Stat)>>, zk::Error> {
    let requests = paths.chunks(READS_PER_REQUEST).map(|chunk| {
        let mut reader = client.new_multi_reader();
        let added: std::result::Result<(), zk::Error> =
            chunk.iter().try_for_each(|path| reader.add_get_data(path));
        async move {
            added?;
            reader.commit().await
        }
    });
    let mut found = Vec::with_capacity(paths.len());
    for results in futures::future::try_join_all(requests).await? {
        for result in results {
            found.push(match result {
                zk::MultiReadResult::Data { data, stat } => Some((kept(data), stat)),
                zk::MultiReadResult::Error {
                    err: zk::Error::NoNode,
                } => None,
                zk::MultiReadResult::Error { err } => return Err(err),
                // A getData is answered with data or an error.
                _ => {
                    return Err(zk::Error::UnexpectedError(
                        "a multiRead answered a getData with no data".into(),
                    ))
                }
            });
        }
    }
    Ok(found)
}

/// [`read_together`] a node at a time.
async fn read_each(
    client: &zk::Client,
    paths: &[&str],
) -> std::result::Result<Vec<Option<(Vec<u8>, zk::Stat)>>, zk::Error> {
    let reads = paths.iter().map(|path| client.get_data(path));
    let mut found = Vec::with_capacity(paths.len());
    for read in futures::future::join_all(reads).await {
        match read {
            Ok((data, stat)) => found.push(Some((kept(data), stat))),
            Err(zk::Error::NoNode) => found.push(None),
            Err(err) => return Err(err),
        }
    }
    Ok(found)
}

/// A node's data without the rest of the buffer it may have come in (the
/// client hands a getData's data back in its reply's buffer; a tree of
/// many nodes would hold every reply's).
fn kept(mut data: Vec<u8>) -> Vec<u8> {
    data.shrink_to_fit();
    data
}

/// Reads the nodes of `names` (sorted) under `parent` in one round trip,
/// with the roles `role_of` gives by queue position (nodes that vanished
/// meanwhile keep their place while the roles are told), leaving out the
/// vanished ones.
async fn load(
    framework: &Framework,
    parent: &str,
    family: Family,
    names: &[Named],
    role_of: impl Fn(usize) -> Role,
) -> Result<Vec<LockParticipant>> {
    let paths: Vec<String> = names.iter().map(|n| join(parent, &n.name)).collect();
    let read = read_nodes(framework, &paths).await?;
    Ok(names
        .iter()
        .zip(read)
        .enumerate()
        .filter_map(|(index, (named, read))| {
            let (data, stat) = read?;
            Some(participant(
                parent,
                family,
                named,
                role_of(index),
                NodeFacts::new(data, &stat),
            ))
        })
        .collect())
}

/// The participants of the lock at `path`, holders and waiters in queue
/// order, of every family of nodes its children show (see [`Family`]),
/// one family after the other: a read-write lock's (Curator's), a
/// semaphore's, a mutex's (or selector's), a latch's, kazoo's locks', a
/// kazoo semaphore's. Participants of different families do not see each
/// other: each family's roles follow its own rule, as if it were alone
/// (so a path with two families can show two holders, which it has).
///
/// For a semaphore, `max_leases` tells the holders from the waiting lease
/// node. Without it, the last lease node is taken for a waiter when its
/// session also heads the internal queue (that acquirer holds the internal
/// mutex while it waits for a lease; a lease it was just granted looks the
/// same for a moment), and the internal queue node of an acquirer whose
/// lease node waits is left out (it is the same acquirer). A kazoo
/// semaphore's lease nodes are all holders (its waiters queue on a sibling
/// path, `<path>-__lock__`).
///
/// # Errors
/// ZooKeeper errors that retrying could not overcome; [`Error::Closed`].
/// A path that does not exist has no participants.
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub async fn lock_participants(
    framework: &Framework,
    path: &str,
    max_leases: Option<u32>,
) -> Result<Vec<LockParticipant>> {
    let children = list(framework, path).await?;
    let mut all = Vec::new();
    for family in families_among(&children) {
        all.extend(participants_of(framework, path, family, &children, max_leases).await?);
    }
    Ok(all)
}

/// The families of nodes among `children`, each once, in the order
/// [`lock_participants`] reports them.
pub fn families_among(children: &[String]) -> Vec<Family> {
    const ORDER: [Family; 6] = [
        Family::CuratorReadWrite,
        Family::CuratorSemaphore,
        Family::CuratorLock,
        Family::CuratorLatch,
        Family::KazooLock,
        Family::KazooSemaphore,
    ];
    let present: Vec<Family> = children
        .iter()
        .filter_map(|c| Family::of_child(c))
        .collect();
    ORDER
        .into_iter()
        .filter(|family| present.contains(family))
        .collect()
}

/// The queue of one `family` among `children` (the child names of a lock
/// path): each participant's name and kind, in queue order, with its role
/// by that family's rule. A Curator semaphore's queue is not among a
/// path's children (see [`semaphore_queue`]): none here.
fn queue_of(family: Family, children: &[String]) -> Vec<(Named, Role)> {
    let of_family = |c: &&String| Family::of_child(c) == Some(family);
    match family {
        Family::CuratorReadWrite | Family::KazooLock => {
            let rw = sorted(
                children
                    .iter()
                    .filter(of_family)
                    .filter_map(|c| Named::read_write(c))
                    .collect(),
            );
            let keys: Vec<(Kind, SortKey)> = rw.iter().map(|n| (n.kind, n.key.clone())).collect();
            let roles: Vec<Role> = (0..rw.len())
                .map(|index| {
                    role(
                        rw[index].sequence().is_some()
                            && read_write_turn(&keys, index).is_ok_and(|turn| turn == Turn::Holds),
                    )
                })
                .collect();
            rw.into_iter().zip(roles).collect()
        }
        Family::CuratorLock | Family::CuratorLatch => {
            let (kind, name) = match family {
                Family::CuratorLatch => (Kind::Latch, LATCH_NAME),
                _ => (Kind::Mutex, LOCK_NAME),
            };
            sorted(
                children
                    .iter()
                    .filter(of_family)
                    .filter_map(|c| Named::with(kind, c, name))
                    .collect(),
            )
            .into_iter()
            .enumerate()
            .map(|(index, named)| (named, role(first_hold(index, 1))))
            .collect()
        }
        Family::KazooSemaphore => sorted(
            children
                .iter()
                .filter(of_family)
                .map(|c| Named {
                    kind: Kind::Lease,
                    name: c.clone(),
                    key: SortKey::Foreign(c.clone()),
                })
                .collect(),
        )
        .into_iter()
        .map(|named| (named, Role::Holder))
        .collect(),
        // A semaphore's own nodes sit under its `locks` and `leases`
        // children; families not known yet have no rule.
        _ => Vec::new(),
    }
}

/// The participants of one `family` among `children` of `path`, by that
/// family's rule ([`queue_of`]), read in one round trip.
async fn participants_of(
    framework: &Framework,
    path: &str,
    family: Family,
    children: &[String],
    max_leases: Option<u32>,
) -> Result<Vec<LockParticipant>> {
    if family == Family::CuratorSemaphore {
        return semaphore_participants(framework, path, max_leases).await;
    }
    let queue = queue_of(family, children);
    let (names, roles): (Vec<Named>, Vec<Role>) = queue.into_iter().unzip();
    load(framework, path, family, &names, |index| roles[index]).await
}

/// The participants of one `family` among the nodes of a lock path
/// (`nodes`: each child's name, data and stat, as a watcher of the path
/// keeps them), by that family's rule: what [`lock_participants`] reads,
/// from nodes read beforehand. A Curator semaphore's are
/// [`semaphore_queue`]'s.
pub fn participants_among(
    path: &str,
    family: Family,
    nodes: &std::collections::BTreeMap<String, NodeFacts>,
) -> Vec<LockParticipant> {
    let names: Vec<String> = nodes.keys().cloned().collect();
    queue_of(family, &names)
        .into_iter()
        .filter_map(|(named, role)| {
            let facts = nodes.get(&named.name)?;
            Some(participant(path, family, &named, role, facts.clone()))
        })
        .collect()
}

/// What a participant's node says of it: its data and the parts of its
/// stat a participant is shown with.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeFacts {
    /// The node's data.
    pub data: Vec<u8>,
    /// Its ephemeral owner (0 for a persistent node).
    pub session: i64,
    /// Its creation time, milliseconds since the epoch (the server's clock).
    pub ctime_ms: i64,
    /// Its creating transaction's zxid.
    pub czxid: i64,
    /// Whether the node is still to be read (see
    /// [`LockParticipant::pending`]).
    pub pending: bool,
}

impl NodeFacts {
    /// The facts of a node read as `data` and `stat`.
    pub fn new(mut data: Vec<u8>, stat: &zk::Stat) -> Self {
        // Only the data, not the reply's buffer it came in.
        data.shrink_to_fit();
        NodeFacts {
            data,
            session: stat.ephemeral_owner,
            ctime_ms: stat.ctime,
            czxid: stat.czxid,
            pending: false,
        }
    }

    /// The facts of a node known only by its creation's event, received at
    /// `seen_ms` (milliseconds since the epoch, this host's clock): no
    /// data, no session, no token, until it is read.
    pub fn pending(seen_ms: i64) -> Self {
        NodeFacts {
            data: Vec::new(),
            session: 0,
            ctime_ms: seen_ms,
            czxid: 0,
            pending: true,
        }
    }
}

impl From<&LockParticipant> for NodeFacts {
    fn from(p: &LockParticipant) -> Self {
        NodeFacts {
            data: p.data.clone(),
            session: p.session,
            ctime_ms: p.ctime_ms,
            czxid: p.czxid,
            pending: p.pending,
        }
    }
}

/// One participant from its name, role and node.
fn participant(
    parent: &str,
    family: Family,
    named: &Named,
    role: Role,
    facts: NodeFacts,
) -> LockParticipant {
    LockParticipant {
        kind: named.kind,
        role,
        node_path: join(parent, &named.name),
        name: named.name.clone(),
        sequence: named.sequence(),
        session: facts.session,
        ctime_ms: facts.ctime_ms,
        czxid: facts.czxid,
        data: facts.data,
        family,
        pending: facts.pending,
    }
}

fn role(holds: bool) -> Role {
    if holds {
        Role::Holder
    } else {
        Role::Waiter
    }
}

/// The semaphore's children of `dir` that carry `lock_name`, sorted.
async fn named_children(framework: &Framework, dir: &str, lock_name: &str) -> Result<Vec<Named>> {
    let children = list(framework, dir).await?;
    Ok(sorted(
        children
            .iter()
            .filter_map(|c| Named::with(Kind::Lease, c, lock_name))
            .collect(),
    ))
}

async fn semaphore_participants(
    framework: &Framework,
    path: &str,
    max_leases: Option<u32>,
) -> Result<Vec<LockParticipant>> {
    let leases_path = join(path, LEASES_CHILD);
    let locks_path = join(path, LOCKS_CHILD);
    let leases = named_children(framework, &leases_path, LEASE_NAME).await?;
    let queued = named_children(framework, &locks_path, LOCK_NAME).await?;
    let family = Family::CuratorSemaphore;
    let lease_nodes = load(framework, &leases_path, family, &leases, |index| {
        role(max_leases.is_none_or(|max| first_hold(index, max)))
    })
    .await?;
    let queued_nodes = load(framework, &locks_path, family, &queued, |_| Role::Waiter).await?;
    Ok(semaphore_queue(lease_nodes, queued_nodes, max_leases))
}

/// A Curator semaphore's participants from its lease nodes (in queue
/// order, holders as far as `max_leases` tells) and the nodes of its
/// internal queue (all waiting): without `max_leases`, the last lease node
/// waits when its session also heads the internal queue (that acquirer
/// holds the internal mutex while it waits for a lease; a lease it was
/// just granted looks the same for a moment), and the queue node of an
/// acquirer whose lease node waits is left out (the same acquirer).
pub fn semaphore_queue(
    mut lease_nodes: Vec<LockParticipant>,
    queued_nodes: Vec<LockParticipant>,
    max_leases: Option<u32>,
) -> Vec<LockParticipant> {
    let head_session = queued_nodes.first().map(|p| p.session);
    if max_leases.is_none() {
        if let (Some(session), Some(last)) = (head_session, lease_nodes.last_mut()) {
            if session != 0 && last.session == session {
                last.role = Role::Waiter;
            }
        }
    }
    let waiting_sessions: Vec<i64> = lease_nodes
        .iter()
        .filter(|p| p.role == Role::Waiter)
        .map(|p| p.session)
        .collect();
    lease_nodes.extend(
        queued_nodes
            .into_iter()
            .filter(|p| !waiting_sessions.contains(&p.session)),
    );
    lease_nodes
}

/// The recipes that have participants under `path` now (several when
/// recipes of different kinds share the path, which none of them notices).
///
/// # Errors
/// ZooKeeper errors that retrying could not overcome; [`Error::Closed`].
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub async fn recipes_present(framework: &Framework, path: &str) -> Result<Vec<Recipe>> {
    let children = list(framework, path).await?;
    let mut found = Vec::new();
    if children.iter().any(|c| read_write_kind(c).is_some()) {
        found.push(Recipe::ReadWrite);
    }
    if children
        .iter()
        .any(|c| read_write_kind(c).is_none() && Named::with(Kind::Mutex, c, LOCK_NAME).is_some())
    {
        found.push(Recipe::Mutex);
    }
    for (child, name) in [(LEASES_CHILD, LEASE_NAME), (LOCKS_CHILD, LOCK_NAME)] {
        if found.contains(&Recipe::Semaphore) || !children.iter().any(|c| c == child) {
            continue;
        }
        if !named_children(framework, &join(path, child), name)
            .await?
            .is_empty()
        {
            found.push(Recipe::Semaphore);
        }
    }
    Ok(found)
}

/// How many locks [`survey`] reads the participants of at once (a new one
/// as each is answered).
const SURVEY_READS: usize = 250;

/// How many children of a folder [`identify`] looks into (one pipelined
/// listing each); past it, the rest are only counted.
pub const FOLDER_LOOK: usize = 1000;

/// What a path is, as the one reading that `locks`, `leader` and `revoke`
/// share (see [`identify`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathKind {
    /// No node at the path.
    Missing,
    /// A node without children: nothing holds, waits or leads there.
    Empty,
    /// Participants of one family: a lock, or an election (a latch's; a
    /// mutex's nodes are also a leader selector's, kazoo's lock nodes also
    /// a kazoo election's).
    Recipe(Family),
    /// Participants of several families, which do not see each other.
    Mixed(Vec<Family>),
    /// No participants of its own, but children with something below them:
    /// each named with what it is (a folder within is a `Folder` whose
    /// `inside` is not read, its `more` the count of its children).
    Folder {
        /// The first [`FOLDER_LOOK`] children that are not empty, by name.
        inside: Vec<(String, PathKind)>,
        /// How many children were not looked into.
        more: usize,
    },
    /// Children that no recipe writes, nothing below them.
    Unknown {
        /// A few of their names.
        names: Vec<String>,
        /// How many there are.
        count: usize,
    },
}

impl PathKind {
    /// What it is, in a few words: "a mutex", "an election (leader latch)",
    /// "a folder", "empty", …
    pub fn describe(&self) -> String {
        match self {
            PathKind::Missing => "missing".into(),
            PathKind::Empty => "empty".into(),
            PathKind::Recipe(family) => family.describe().to_owned(),
            PathKind::Mixed(families) => format!(
                "participants of {}, which do not see each other",
                families
                    .iter()
                    .map(|f| f.describe())
                    .collect::<Vec<_>>()
                    .join(" and of ")
            ),
            PathKind::Folder { .. } => "a folder".into(),
            PathKind::Unknown { .. } => "nodes no recipe writes".into(),
        }
    }

    /// A short name for scripts: `missing`, `empty`, `lock`, `election`,
    /// `mixed`, `folder` or `unknown`. A mutex's nodes and kazoo's lock
    /// nodes are a `lock` (they are an election's too: see
    /// [`PathKind::is_election`]).
    pub fn name(&self) -> &'static str {
        match self {
            PathKind::Missing => "missing",
            PathKind::Empty => "empty",
            PathKind::Recipe(Family::CuratorLatch) => "election",
            PathKind::Recipe(_) => "lock",
            PathKind::Mixed(_) => "mixed",
            PathKind::Folder { .. } => "folder",
            PathKind::Unknown { .. } => "unknown",
        }
    }

    /// Whether an election can be read from it: a latch's nodes, a
    /// selector's (a mutex's queue) or kazoo's `Election`'s (a kazoo lock's).
    pub fn is_election(&self) -> bool {
        matches!(
            self,
            PathKind::Recipe(Family::CuratorLatch | Family::CuratorLock | Family::KazooLock)
        )
    }
}

/// Reads what `path` is, in at most three round trips: its children; the
/// children of its `locks` and `leases` children, if any (a semaphore's
/// queues, or folders that happen to carry those names); for a path
/// without participants, the children of each child (pipelined, at most
/// [`FOLDER_LOOK`]).
///
/// # Errors
/// ZooKeeper errors that retrying could not overcome; [`Error::Closed`].
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub async fn identify(framework: &Framework, path: &str) -> Result<PathKind> {
    identify_looking(framework, path, FOLDER_LOOK).await
}

/// [`identify`], looking into at most `look` children of a folder (the
/// survey looks into as many as it may read paths).
async fn identify_looking(framework: &Framework, path: &str, look: usize) -> Result<PathKind> {
    Ok(identify_listed(framework, path, look).await?.0)
}

/// [`identify_looking`], with the path's children as listed (empty for a
/// missing path).
async fn identify_listed(
    framework: &Framework,
    path: &str,
    look: usize,
) -> Result<(PathKind, Vec<String>)> {
    let Some(children) = list_existing(framework, path).await? else {
        return Ok((PathKind::Missing, Vec::new()));
    };
    if children.is_empty() {
        return Ok((PathKind::Empty, children));
    }
    let kind = kind_of_children(framework, path, &children, look).await?;
    Ok((kind, children))
}

/// What a path with these `children` (not empty) is: see [`identify`].
async fn kind_of_children(
    framework: &Framework,
    path: &str,
    children: &[String],
    look: usize,
) -> Result<PathKind> {
    // Participants' nodes have nothing below them: only the other
    // children (a semaphore's `locks` and `leases`, a folder's entries)
    // are looked into.
    // `locks` and `leases` first: what is below them decides whether the
    // path is a semaphore, however few children may be looked into.
    let (queues, others): (Vec<&String>, Vec<&String>) = children
        .iter()
        .filter(|c| matches!(Family::of_child(c), None | Some(Family::CuratorSemaphore)))
        .partition(|c| Family::of_child(c).is_some());
    let looked: Vec<String> = queues
        .into_iter()
        .chain(others.into_iter().take(look))
        .cloned()
        .collect();
    let unlooked = children.len() - looked.len();
    let paths: Vec<String> = looked.iter().map(|c| join(path, c)).collect();
    let below = list_all(framework, &paths).await?;
    let kinds: Vec<PathKind> = below.iter().map(|b| shallow_kind(b.as_deref())).collect();
    let at: std::collections::HashMap<&str, usize> = looked
        .iter()
        .enumerate()
        .map(|(index, name)| (name.as_str(), index))
        .collect();
    let kind_of = |child: &str| at.get(child).map(|index| &kinds[*index]);
    let mut families: Vec<Family> = Vec::new();
    for child in children {
        let family = match Family::of_child(child) {
            // `locks` and `leases` are a semaphore's only when what is below
            // them is its queue and its leases (or nothing).
            Some(Family::CuratorSemaphore) => match kind_of(child) {
                Some(PathKind::Empty | PathKind::Missing) => Some(Family::CuratorSemaphore),
                Some(PathKind::Recipe(Family::CuratorLock | Family::CuratorLease)) => {
                    Some(Family::CuratorSemaphore)
                }
                Some(_) | None => None,
            },
            other => other,
        };
        if let Some(family) = family {
            if !families.contains(&family) {
                families.push(family);
            }
        }
    }
    match families.len() {
        0 => {}
        1 => return Ok(PathKind::Recipe(families[0])),
        _ => return Ok(PathKind::Mixed(families)),
    }
    let mut inside: Vec<(String, PathKind)> = looked
        .into_iter()
        .zip(kinds)
        .filter(|(_, kind)| !matches!(kind, PathKind::Empty | PathKind::Missing))
        .collect();
    inside.sort_by(|a, b| a.0.cmp(&b.0));
    if inside.is_empty() {
        return Ok(PathKind::Unknown {
            names: children.iter().take(3).map(|c| cut(c)).collect(),
            count: children.len(),
        });
    }
    Ok(PathKind::Folder {
        inside,
        more: unlooked,
    })
}

/// One lock or election found by [`survey`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Surveyed {
    /// Its path.
    pub path: String,
    /// What it is: a [`PathKind::Recipe`] or a [`PathKind::Mixed`].
    pub kind: PathKind,
    /// Its participants, as [`lock_participants`] reads them.
    pub participants: Vec<LockParticipant>,
    /// Its children that no recipe writes.
    pub unknown: UnknownNodes,
}

/// The children of a lock or election path that are no recipe's (no
/// participant, queue or lease folder of any family): a few of their
/// names, and how many there are. Bounded whatever the count: at most
/// [`UNKNOWN_NAMES`] names are kept, each cut as [`cut`] cuts it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnknownNodes {
    /// Some of their names, sorted.
    pub names: Vec<String>,
    /// How many there are.
    pub count: usize,
}

/// How many names of unknown nodes an [`UnknownNodes`] keeps.
pub const UNKNOWN_NAMES: usize = 16;

impl UnknownNodes {
    /// The children among `children` that no recipe writes.
    pub fn among(children: &[String]) -> Self {
        let mut unknown = UnknownNodes::default();
        for child in children {
            unknown.add(child);
        }
        unknown
    }

    /// Whether a child named `name` is no recipe's.
    pub fn is_unknown(name: &str) -> bool {
        Family::of_child(name).is_none()
    }

    /// Counts a child `name` that is no recipe's, once: a name already
    /// kept is not counted again (a creation seen both in a listing and as
    /// an event). Past [`UNKNOWN_NAMES`] names, each call counts one more.
    pub fn add(&mut self, name: &str) {
        if !Self::is_unknown(name) {
            return;
        }
        let name = cut(name);
        match self.names.binary_search(&name) {
            Ok(_) => {}
            Err(at) if self.names.len() < UNKNOWN_NAMES => {
                self.names.insert(at, name);
                self.count += 1;
            }
            Err(_) => self.count += 1,
        }
    }

    /// Uncounts a child `name` that was deleted.
    pub fn remove(&mut self, name: &str) {
        if !Self::is_unknown(name) {
            return;
        }
        let name = cut(name);
        if let Ok(at) = self.names.binary_search(&name) {
            self.names.remove(at);
            self.count -= 1;
        } else if self.count > self.names.len() {
            self.count -= 1;
        }
    }
}

/// Every lock and election under a root, as [`survey`] found them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Survey {
    /// The locks and elections, by path.
    pub found: Vec<Surveyed>,
    /// How many paths were read ([`identify`]'d).
    pub paths_read: usize,
    /// Whether the survey stopped at its limit of paths (what is below
    /// the paths not read is not in `found`).
    pub capped: bool,
}

/// Every lock and election at or under `root`, each with its participants:
/// the tree is read one level at a time ([`identify`] on every path of a
/// level at once, pipelined on one session), going down into folders only,
/// until `max_paths` paths were read (then the survey says it is
/// [`capped`](Survey::capped)); then every lock's and election's
/// participants are read at once. What is read is as of the server: sync
/// first ([`synced`](crate::fresh::synced)) for a listing as of now.
///
/// # Errors
/// ZooKeeper errors that retrying could not overcome; [`Error::Closed`].
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub async fn survey(framework: &Framework, root: &str, max_paths: usize) -> Result<Survey> {
    let mut level = vec![root.to_owned()];
    let mut recipes: Vec<(String, PathKind, Vec<String>)> = Vec::new();
    let mut paths_read = 0;
    let mut capped = false;
    while !level.is_empty() {
        let room = max_paths.saturating_sub(paths_read);
        if level.len() > room {
            level.truncate(room);
            capped = true;
        }
        paths_read += level.len();
        // A folder is looked into as far as the paths left to read.
        let look = max_paths.saturating_sub(paths_read).max(1);
        let kinds = futures::future::try_join_all(
            level
                .iter()
                .map(|path| identify_listed(framework, path, look)),
        )
        .await?;
        let mut next = Vec::new();
        for (path, (kind, children)) in level.into_iter().zip(kinds) {
            match kind {
                PathKind::Recipe(_) | PathKind::Mixed(_) => recipes.push((path, kind, children)),
                PathKind::Folder { inside, more } => {
                    // Folders past identify's look are not followed.
                    capped |= more > 0;
                    next.extend(inside.into_iter().map(|(name, _)| join(&path, &name)));
                }
                _ => {}
            }
        }
        if capped {
            break;
        }
        level = next;
    }
    recipes.sort_by(|a, b| a.0.cmp(&b.0));
    // Each lock's participants from the listing already made (a
    // semaphore's queues are listed again), at most SURVEY_READS locks'
    // reads in flight at a time, a new one sent as each is answered (no
    // barrier between batches: the session's pipeline stays full), in
    // order. Each listing is dropped once read: only the participants stay.
    let mut found = Vec::with_capacity(recipes.len());
    let mut reads = futures::stream::iter(recipes.into_iter().map(
        |(path, kind, children)| async move {
            let mut all = Vec::new();
            for family in families_among(&children) {
                all.extend(participants_of(framework, &path, family, &children, None).await?);
            }
            Ok::<_, Error>(Surveyed {
                unknown: UnknownNodes::among(&children),
                path,
                kind,
                participants: all,
            })
        },
    ))
    .buffered(SURVEY_READS);
    while let Some(surveyed) = reads.next().await {
        found.push(surveyed?);
    }
    Ok(Survey {
        found,
        paths_read,
        capped,
    })
}

/// What a child is from its own children alone (`None`: it vanished).
fn shallow_kind(children: Option<&[String]>) -> PathKind {
    let Some(children) = children else {
        return PathKind::Missing;
    };
    if children.is_empty() {
        return PathKind::Empty;
    }
    let families = families_among(children);
    let leases = children
        .iter()
        .any(|c| Family::of_child(c) == Some(Family::CuratorLease));
    match families.len() {
        0 if leases => PathKind::Recipe(Family::CuratorLease),
        0 => PathKind::Folder {
            inside: Vec::new(),
            more: children.len(),
        },
        1 => PathKind::Recipe(families[0]),
        _ => PathKind::Mixed(families),
    }
}

/// The children of `path`, `None` if it does not exist.
async fn list_existing(framework: &Framework, path: &str) -> Result<Option<Vec<String>>> {
    let target = path.to_owned();
    let listed = framework
        .call_with_retry(|client| {
            let target = target.clone();
            async move { client.list_children(&target).await }
        })
        .await;
    match listed {
        Ok(children) => Ok(Some(children)),
        Err(Error::NoNode { .. }) => Ok(None),
        Err(err) => Err(err),
    }
}

/// The children of every path of `paths`, in one round trip (`None` for
/// one gone meanwhile).
async fn list_all(framework: &Framework, paths: &[String]) -> Result<Vec<Option<Vec<String>>>> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    framework
        .call_with_retry(|client| async move {
            let lists = paths.iter().map(|p| client.list_children(p));
            let mut found = Vec::with_capacity(paths.len());
            for listed in futures::future::join_all(lists).await {
                match listed {
                    Ok(children) => found.push(Some(children)),
                    Err(zk::Error::NoNode) => found.push(None),
                    Err(err) => return Err(err),
                }
            }
            Ok(found)
        })
        .await
}

/// Which of Curator's election recipes wrote an election's nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ElectionRecipe {
    /// [`LeaderLatch`](crate::LeaderLatch): `latch-` nodes.
    Latch,
    /// [`LeaderSelector`](crate::LeaderSelector): `lock-` nodes (a mutex's
    /// queue).
    Selector,
    /// kazoo's `Election`, and a latch or a selector in
    /// [`Layout::Kazoo`]: a kazoo `Lock`'s `__lock__` nodes.
    Kazoo,
}

impl ElectionRecipe {
    /// `"latch"` or `"selector"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ElectionRecipe::Latch => "latch",
            ElectionRecipe::Selector => "selector",
            ElectionRecipe::Kazoo => "kazoo election",
        }
    }

    /// The name the recipe gives its nodes.
    pub fn lock_name(self) -> &'static str {
        match self {
            ElectionRecipe::Latch => LATCH_NAME,
            ElectionRecipe::Selector => LOCK_NAME,
            ElectionRecipe::Kazoo => KAZOO_LOCK_NAME,
        }
    }

    /// The recipe that wrote the nodes named `names` (names or full paths):
    /// a latch, unless only a selector's or only kazoo's nodes are there.
    pub fn of_nodes<'a>(names: impl IntoIterator<Item = &'a str> + Clone) -> Self {
        let named = |marker: &str| {
            names
                .clone()
                .into_iter()
                .any(|node| strip_protection(split(node).1).contains(marker))
        };
        let kazoo = names
            .clone()
            .into_iter()
            .any(|node| kazoo_participant(split(node).1).is_some());
        if named(LATCH_NAME) {
            ElectionRecipe::Latch
        } else if kazoo {
            ElectionRecipe::Kazoo
        } else if named(LOCK_NAME) {
            ElectionRecipe::Selector
        } else {
            ElectionRecipe::Latch
        }
    }
}

/// The queue of an election among `children` (the child names of its
/// path): the nodes of `recipe` that carry a sequence, in queue order. The
/// first leads ([`first_hold`] with one lease), as the recipes' own lock
/// engine decides; nodes of another recipe, or without a sequence, never
/// lead and are left out.
pub fn election_queue(children: &[String], recipe: ElectionRecipe) -> Vec<String> {
    let named = children
        .iter()
        .filter_map(|c| Named::with(Kind::Mutex, c, recipe.lock_name()))
        .filter(|n| n.sequence().is_some())
        .collect();
    sorted(named).into_iter().map(|n| n.name).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use zk_curator_framework::path::Sequence;

    pub(crate) const UUID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

    /// A protected read node's name with sequence `seq`.
    pub(crate) fn read(seq: u32) -> String {
        format!("_c_{UUID}-__READ__{seq:010}")
    }

    /// A protected write node's name with sequence `seq`.
    pub(crate) fn write(seq: u32) -> String {
        format!("_c_{UUID}-__WRIT__{seq:010}")
    }

    fn keyed(names: &[String]) -> Vec<(Kind, SortKey)> {
        names
            .iter()
            .map(|n| (read_write_kind(n).unwrap(), read_write_sort_key(n)))
            .collect()
    }

    #[test]
    fn lock_names_have_the_same_length() {
        assert_eq!(READ_LOCK_NAME.len(), WRITE_LOCK_NAME.len());
    }

    #[test]
    fn any_write_marker_makes_a_writer_and_the_last_marker_sorts() {
        assert_eq!(read_write_kind(&read(1)), Some(Kind::Read));
        assert_eq!(read_write_kind(&write(1)), Some(Kind::Write));
        assert_eq!(
            read_write_kind("__WRIT__x__READ__0000000004"),
            Some(Kind::Write)
        );
        assert_eq!(read_write_kind(&format!("_c_{UUID}-lock-0000000001")), None);
        assert_eq!(
            read_write_sort_key(&read(5)),
            read_write_sort_key(&write(5))
        );
        assert_eq!(
            read_write_sort_key("__WRIT__x__READ__0000000004"),
            SortKey::Sequence(Sequence::new(4))
        );
        assert_eq!(
            read_write_sort_key("__READ__x__WRIT__0000000004"),
            SortKey::Sequence(Sequence::new(4))
        );
    }

    #[test]
    fn readers_hold_together_until_a_writer() {
        let names = vec![read(1), read(2), write(3), read(4), write(5)];
        let keys = keyed(&names);
        let turns: Vec<Turn> = (0..names.len())
            .map(|i| read_write_turn(&keys, i).unwrap())
            .collect();
        assert_eq!(
            turns,
            vec![
                Turn::Holds,
                Turn::Holds,
                Turn::Waits { watch: 1 },
                Turn::Waits { watch: 2 },
                Turn::Waits { watch: 3 },
            ]
        );
        assert!(read_write_turn(&keys, 5).is_err());
    }

    #[test]
    fn a_downgraded_read_node_is_level_with_its_write_node() {
        let ours = format!("_c_{}-__READ__0000000042", "1".repeat(36));
        let names = vec![write(42), ours, write(43)];
        let keys = keyed(&names);
        assert_eq!(read_write_turn(&keys, 0).unwrap(), Turn::Holds);
        assert_eq!(read_write_turn(&keys, 1).unwrap(), Turn::Holds);
        assert_eq!(read_write_turn(&keys, 2).unwrap(), Turn::Waits { watch: 1 });
    }

    #[test]
    fn the_engine_predicate_follows_the_rule() {
        let names = vec![read(1), write(2), read(3)];
        assert_eq!(
            read_write_predicate(&names, &read(1)).unwrap(),
            PredicateResults::holds()
        );
        assert_eq!(
            read_write_predicate(&names, &write(2)).unwrap(),
            PredicateResults::watch(read(1))
        );
        assert_eq!(
            read_write_predicate(&names, &read(3)).unwrap(),
            PredicateResults::watch(write(2))
        );
        assert!(matches!(
            read_write_predicate(&names, &read(4)),
            Err(Error::LockLost { .. })
        ));
    }

    #[test]
    fn an_election_queue_keeps_its_recipe_s_sequenced_nodes_in_order() {
        let names: Vec<String> = vec![
            format!("_c_{UUID}-latch-0000000007"),
            format!("_c_{UUID}-lock-0000000001"),
            "foreign".into(),
            format!("_c_{UUID}-latch-0000000003"),
            format!("_c_{UUID}-latch-x"),
        ];
        assert_eq!(
            election_queue(&names, ElectionRecipe::Latch),
            [names[3].clone(), names[0].clone()]
        );
        assert_eq!(
            election_queue(&names, ElectionRecipe::Selector),
            [names[1].clone()]
        );
    }

    #[test]
    fn elections_tell_latch_from_selector() {
        let latch = format!("/e/_c_{UUID}-latch-0000000001");
        let selector = format!("/e/_c_{UUID}-lock-0000000001");
        assert_eq!(
            ElectionRecipe::of_nodes([latch.as_str()]),
            ElectionRecipe::Latch
        );
        assert_eq!(
            ElectionRecipe::of_nodes([selector.as_str()]),
            ElectionRecipe::Selector
        );
        assert_eq!(
            ElectionRecipe::of_nodes([selector.as_str(), latch.as_str()]),
            ElectionRecipe::Latch
        );
        assert_eq!(
            ElectionRecipe::of_nodes(["/e/foreign"]),
            ElectionRecipe::Latch
        );
    }
}
