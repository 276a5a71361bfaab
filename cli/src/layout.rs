//! Reading a lock's participants from ZooKeeper, for every node layout the
//! recipes write, and deciding who holds and who waits.
//!
//! * mutex: `<path>/_c_<uuid>-lock-<seq>`; the first node holds;
//! * read-write lock: `<path>/_c_<uuid>-__READ__<seq>` and `__WRIT__`; a
//!   writer holds when no node has a smaller sequence, a reader when no
//!   writer has one (a downgraded read node shares its write node's
//!   sequence);
//! * semaphore: `<path>/leases/_c_<uuid>-lease-<seq>` (the first N hold) and
//!   the internal queue `<path>/locks/_c_<uuid>-lock-<seq>` of acquirers
//!   that have not created their lease node yet.
//!
//! The layout is told from the children of `<path>`.

use std::cmp::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use zk_curator::framework::lock_internals::{standard_sort_key, SortKey};
use zk_curator::framework::path::{join, strip_protection};
use zk_curator::framework::zk;
use zk_curator::{Error, Framework};

use crate::exit::Failure;

const MUTEX_NAME: &str = "lock-";
const READ_NAME: &str = "__READ__";
const WRITE_NAME: &str = "__WRIT__";
const LEASE_NAME: &str = "lease-";
const LEASES_CHILD: &str = "leases";
const LOCKS_CHILD: &str = "locks";

/// Which recipe a participant belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Mutex,
    Read,
    Write,
    Lease,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Lease => "lease",
        }
    }
}

/// Whether a participant holds the lock or waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Holder,
    Waiter,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Holder => "holder",
            Role::Waiter => "waiter",
        }
    }
}

/// One participant node and what its stat and data say.
#[derive(Clone, Debug)]
pub(crate) struct Participant {
    pub(crate) kind: Kind,
    pub(crate) role: Role,
    /// Full path (inside the namespace).
    pub(crate) node: String,
    /// The node's name.
    pub(crate) name: String,
    pub(crate) sequence: Option<u32>,
    /// The node's ephemeral owner (0 for a persistent node).
    pub(crate) session: i64,
    /// Creation time, milliseconds since the epoch (the server's clock).
    pub(crate) ctime_ms: i64,
    /// The creating transaction's zxid: the hold's fencing token.
    pub(crate) czxid: i64,
    pub(crate) data: Vec<u8>,
}

impl Participant {
    /// Milliseconds since the node was created (0 if the clocks disagree).
    pub(crate) fn age_ms(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        u64::try_from(now.saturating_sub(self.ctime_ms)).unwrap_or(0)
    }
}

/// A name and its place in the queue.
struct Named {
    kind: Kind,
    name: String,
    key: SortKey,
}

fn sequence_of(key: &SortKey) -> Option<u32> {
    match key {
        SortKey::Sequence(seq) => Some(seq.value()),
        SortKey::Foreign(_) => None,
    }
}

/// The kind and sort key of a read-write participant, as the recipe sorts
/// them: by the sequence after whichever marker comes last in the name.
fn rw_named(name: &str) -> Option<Named> {
    let bare = strip_protection(name);
    let kind = match (bare.rfind(READ_NAME), bare.rfind(WRITE_NAME)) {
        (Some(read), Some(write)) if write > read => Kind::Write,
        (None, Some(_)) => Kind::Write,
        (Some(_), _) => Kind::Read,
        (None, None) => return None,
    };
    let marker = if kind == Kind::Write {
        WRITE_NAME
    } else {
        READ_NAME
    };
    Some(Named {
        kind,
        name: name.to_owned(),
        key: standard_sort_key(name, marker),
    })
}

fn named(kind: Kind, name: &str, lock_name: &str) -> Option<Named> {
    strip_protection(name).contains(lock_name).then(|| Named {
        kind,
        name: name.to_owned(),
        key: standard_sort_key(name, lock_name),
    })
}

/// Sorts by queue position; names without a sequence go last, by name.
fn sort(names: &mut [Named]) {
    names.sort_by(|a, b| match a.key.cmp(&b.key) {
        Ordering::Equal => a.name.cmp(&b.name),
        other => other,
    });
}

async fn list(framework: &Framework, path: &str) -> Result<Vec<String>, Failure> {
    let target = path.to_owned();
    let listed = framework
        .call_with_retry(|client| {
            let target = target.clone();
            async move { client.list_children(&target).await }
        })
        .await;
    match listed {
        Ok(children) => Ok(children),
        Err(Error::NoNode { .. }) => Ok(Vec::new()),
        Err(err) => Err(Failure::zk(format!("cannot list {path}"), err)),
    }
}

/// The node's data and stat, or `None` if it is gone meanwhile.
async fn read(framework: &Framework, path: &str) -> Result<Option<(Vec<u8>, zk::Stat)>, Failure> {
    let target = path.to_owned();
    let read = framework
        .call_with_retry(|client| {
            let target = target.clone();
            async move { client.get_data(&target).await }
        })
        .await;
    match read {
        Ok(found) => Ok(Some(found)),
        Err(Error::NoNode { .. }) => Ok(None),
        Err(err) => Err(Failure::zk(format!("cannot read {path}"), err)),
    }
}

/// Reads the nodes of `names` under `parent`, with the roles `role_of`
/// gives (by queue position), skipping nodes that vanished meanwhile.
async fn load(
    framework: &Framework,
    parent: &str,
    names: Vec<Named>,
    role_of: impl Fn(usize, &Named, &[Named]) -> Role,
) -> Result<Vec<Participant>, Failure> {
    let mut participants = Vec::with_capacity(names.len());
    for (index, entry) in names.iter().enumerate() {
        let node = join(parent, &entry.name);
        let Some((data, stat)) = read(framework, &node).await? else {
            continue;
        };
        participants.push(Participant {
            kind: entry.kind,
            role: role_of(index, entry, &names),
            node,
            name: entry.name.clone(),
            sequence: sequence_of(&entry.key),
            session: stat.ephemeral_owner,
            ctime_ms: stat.ctime,
            czxid: stat.czxid,
            data,
        });
    }
    Ok(participants)
}

/// The participants of the lock at `path`, holders and waiters in queue
/// order. `max_leases` tells semaphore holders from the waiting lease node
/// (see [`LocksArgs::leases`](crate::locks::LocksArgs)).
///
/// # Errors
/// A failure when ZooKeeper refuses or cannot be reached; an unknown path
/// has no participants.
pub(crate) async fn participants(
    framework: &Framework,
    path: &str,
    max_leases: Option<u32>,
) -> Result<Vec<Participant>, Failure> {
    let children = list(framework, path).await?;
    let rw: Vec<Named> = children.iter().filter_map(|c| rw_named(c)).collect();
    if !rw.is_empty() {
        let mut names = rw;
        sort(&mut names);
        return load(framework, path, names, rw_role).await;
    }
    if children
        .iter()
        .any(|c| c == LEASES_CHILD || c == LOCKS_CHILD)
    {
        return semaphore(framework, path, max_leases).await;
    }
    let mut names: Vec<Named> = children
        .iter()
        .filter_map(|c| named(Kind::Mutex, c, MUTEX_NAME))
        .collect();
    sort(&mut names);
    load(framework, path, names, |index, _, _| {
        if index == 0 {
            Role::Holder
        } else {
            Role::Waiter
        }
    })
    .await
}

/// A writer holds when nobody is ahead of it; a reader when no writer is
/// ahead (a writer level with it is its own downgraded write lock).
fn rw_role(index: usize, entry: &Named, names: &[Named]) -> Role {
    let ahead = &names[..index];
    let holds = match entry.kind {
        Kind::Write => ahead.iter().all(|other| other.key == entry.key),
        _ => ahead
            .iter()
            .all(|other| other.kind != Kind::Write || other.key == entry.key),
    };
    if holds && sequence_of(&entry.key).is_some() {
        Role::Holder
    } else {
        Role::Waiter
    }
}

async fn semaphore(
    framework: &Framework,
    path: &str,
    max_leases: Option<u32>,
) -> Result<Vec<Participant>, Failure> {
    let leases_path = join(path, LEASES_CHILD);
    let locks_path = join(path, LOCKS_CHILD);
    let mut leases: Vec<Named> = list(framework, &leases_path)
        .await?
        .iter()
        .filter_map(|c| named(Kind::Lease, c, LEASE_NAME))
        .collect();
    sort(&mut leases);
    let mut queued: Vec<Named> = list(framework, &locks_path)
        .await?
        .iter()
        .filter_map(|c| named(Kind::Lease, c, MUTEX_NAME))
        .collect();
    sort(&mut queued);
    let mut lease_nodes = load(
        framework,
        &leases_path,
        leases,
        |index, _, _| match max_leases {
            Some(max) if index >= max as usize => Role::Waiter,
            _ => Role::Holder,
        },
    )
    .await?;
    let queued_nodes = load(framework, &locks_path, queued, |_, _, _| Role::Waiter).await?;
    // The head of the internal queue holds the semaphore's internal mutex:
    // if its session also has the last lease node, that node is waiting for
    // a lease to come back (without the number of leases this is the best
    // guess; a lease it was just granted looks the same for a moment).
    let head_session = queued_nodes.first().map(|p| p.session);
    if max_leases.is_none() {
        if let (Some(session), Some(last)) = (head_session, lease_nodes.last_mut()) {
            if session != 0 && last.session == session {
                last.role = Role::Waiter;
            }
        }
    }
    // The internal mutex node of the session whose lease node waits is the
    // same acquirer: list it once.
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
    Ok(lease_nodes)
}

/// A lock recipe, as far as the layout of a path's children tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recipe {
    Mutex,
    ReadWrite,
    Semaphore,
}

impl Recipe {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Recipe::Mutex => "mutex",
            Recipe::ReadWrite => "read-write lock",
            Recipe::Semaphore => "semaphore",
        }
    }
}

/// The recipes that have participants under `path` now (several when
/// recipes of different kinds share the path, which none of them notices).
///
/// # Errors
/// A failure when ZooKeeper refuses or cannot be reached.
pub(crate) async fn recipes_present(
    framework: &Framework,
    path: &str,
) -> Result<Vec<Recipe>, Failure> {
    let children = list(framework, path).await?;
    let mut found = Vec::new();
    if children.iter().any(|c| rw_named(c).is_some()) {
        found.push(Recipe::ReadWrite);
    }
    if children
        .iter()
        .any(|c| rw_named(c).is_none() && named(Kind::Mutex, c, MUTEX_NAME).is_some())
    {
        found.push(Recipe::Mutex);
    }
    for (child, name) in [(LEASES_CHILD, LEASE_NAME), (LOCKS_CHILD, MUTEX_NAME)] {
        if found.contains(&Recipe::Semaphore) || !children.iter().any(|c| c == child) {
            continue;
        }
        let nodes = list(framework, &join(path, child)).await?;
        if nodes.iter().any(|c| named(Kind::Lease, c, name).is_some()) {
            found.push(Recipe::Semaphore);
        }
    }
    Ok(found)
}
