//! The lock path made in one transaction with the first node under it, and
//! removed in one transaction with the last.
//!
//! A lock taken once per entity (a path per user, per order) leaves its
//! path behind at every release: an empty container that the server reaps
//! a while later (once a minute by default). The next acquire on it then
//! pays either a listing (the path is still there, and a create alone
//! cannot tell whether it is first) or, once the path is reaped, a create
//! refused, the parents made and the create sent again. Instead:
//!
//! - an acquire that finds the lock path missing, or that expects to
//!   (below), sends one multi: the lock path, as a container, then our node
//!   under it. If it commits, our node was the path's only child when it
//!   was created, and the driver decides on that one-child listing without
//!   a listing being sent. Both creates are one transaction, so the node's
//!   zxid (its fencing token) is the path's;
//! - a release of a node made that way sends one multi: the node's delete,
//!   then the path's. A path that gained a child meanwhile refuses the
//!   second, the multi changes nothing, and the node alone is deleted;
//! - the framework remembers the paths its releases removed (a bounded
//!   set, [`RemovedPaths`]), so the next acquire on one sends the multi
//!   straight away: one write to acquire and one to release, where a
//!   create, a listing and a delete were sent before.
//!
//! Only a path that our own multi made is ever removed, so a path made by
//! someone else (kazoo makes its lock paths persistent) stays as it is;
//! [`FrameworkBuilder::remove_lock_paths`](crate::FrameworkBuilder::remove_lock_paths)
//! turns removing off (for kazoo `Lock` objects kept across acquires, which
//! make their path only once).
//! Removing an empty container is what the server's reaper does anyway,
//! and zk-curator's and Curator's acquires take a missing lock path in
//! their stride (ours makes it again, Curator's retries); a kazoo `Lock`
//! makes its path only at its first acquire. The set is a hint: a wrong guess costs a
//! refused multi, never a grant (the multi commits only on a missing path).

use std::sync::Arc;

use dashmap::DashSet;
use zookeeper_client as zk;

use super::internals::LockInternals;
use crate::{packet, path, Framework};

/// The most lock paths a framework remembers as removed; past it, the set
/// starts again empty (a forgotten path costs its next acquire one refused
/// create, as before this set existed).
const REMEMBERED: usize = 16_384;

/// The lock paths this framework's releases removed with their last node
/// (kept in the framework's typed slot): where the next acquire expects to
/// make the path.
#[derive(Debug, Default)]
pub(crate) struct RemovedPaths(DashSet<Arc<str>>);

impl RemovedPaths {
    fn of(framework: &Framework) -> Arc<RemovedPaths> {
        framework.extension::<RemovedPaths>()
    }

    /// Whether a release of this framework removed `base_path` last.
    pub(super) fn contains(framework: &Framework, base_path: &Arc<str>) -> bool {
        Self::of(framework).0.contains(base_path)
    }

    fn insert(framework: &Framework, base_path: &Arc<str>) {
        let set = Self::of(framework);
        if set.0.len() >= REMEMBERED {
            set.0.clear();
        }
        set.0.insert(base_path.clone());
    }

    /// Forgets `base_path`: it exists again.
    pub(super) fn forget(framework: &Framework, base_path: &Arc<str>) {
        Self::of(framework).0.remove(base_path);
    }
}

/// What the multi that makes the lock path with our node came to.
pub(super) enum PathCreate {
    /// Both were made: our node is the path's only child.
    Made {
        /// Our node's name.
        name: String,
        /// The transaction's zxid (see the module doc).
        czxid: i64,
    },
    /// The lock path exists: create our node alone.
    Exists,
    /// A level above the lock path is missing.
    ParentMissing,
    /// The multi would be longer than the servers accept (large node
    /// data): create our node alone. Nothing was sent.
    TooLarge,
}

/// Sends the multi that makes the lock path (a container) and our node
/// under it (`create_path`, with `data` and `options`, whose ACL is
/// `node_acl`).
///
/// # Errors
/// The error the server gave the multi, when it is neither of the two
/// answered above (a lost connection among them: the multi may have been
/// applied).
pub(super) async fn create_with_node(
    lock: &LockInternals,
    client: &zk::Client,
    create_path: &str,
    data: &[u8],
    options: &zk::CreateOptions<'_>,
    node_acl: &[zk::Acl],
) -> Result<PathCreate, zk::Error> {
    let framework = &lock.framework;
    let base = &*lock.base_path;
    let base_acl = framework.acl_for_path(base);
    let root = framework.namespace_len();
    let size = packet::multi([
        packet::Op::create_with(root, base, 0, &base_acl, false),
        packet::Op::create_with(root, create_path, data.len(), node_acl, false),
    ]);
    if packet::check(size, framework.max_packet_size()).is_err() {
        return Ok(PathCreate::TooLarge);
    }
    let container = zk::CreateMode::Container.with_acls(zk::Acls::new(&base_acl));
    let mut multi = client.new_multi_writer();
    multi.add_create(base, &[], &container)?;
    multi.add_create(create_path, data, options)?;
    match multi.commit().await {
        Ok(results) => {
            RemovedPaths::forget(framework, &lock.base_path);
            let mut czxid = None;
            let mut node = None;
            for result in results {
                if let zk::MultiWriteResult::Create { path, stat } = result {
                    // ZooKeeper before 3.9 answers a create2 inside a multi
                    // without its stat (ZOOKEEPER-4026); the container's
                    // is given, and both share the transaction's zxid.
                    if stat.czxid > 0 {
                        czxid.get_or_insert(stat.czxid);
                    }
                    node = Some(path);
                }
            }
            let Some(node) = node else {
                return Err(zk::Error::UnexpectedError(
                    "a multi of two creates answered without them".into(),
                ));
            };
            let czxid = match czxid {
                Some(czxid) => czxid,
                // No stat at all: read the node's.
                None => match client.check_stat(&node).await? {
                    Some(stat) => stat.czxid,
                    None => return Err(zk::Error::NoNode),
                },
            };
            Ok(PathCreate::Made {
                name: path::split(&node).1.to_owned(),
                czxid,
            })
        }
        Err(zk::MultiWriteError::OperationFailed {
            index: 0,
            source: zk::Error::NodeExists,
        }) => {
            RemovedPaths::forget(framework, &lock.base_path);
            Ok(PathCreate::Exists)
        }
        Err(zk::MultiWriteError::OperationFailed {
            index: 0,
            source: zk::Error::NoNode,
        }) => Ok(PathCreate::ParentMissing),
        Err(zk::MultiWriteError::OperationFailed { source, .. })
        | Err(zk::MultiWriteError::RequestFailed { source }) => Err(source),
    }
}

/// Deletes a held node whose lock path our multi made (`node_path` under
/// `lock`'s path), and the path with it if nothing else is under it. The
/// path is counted as removed before the multi is sent, so that the next
/// acquire of this process, which follows on the wire, expects it gone.
///
/// # Errors
/// The error the server gave, as a delete's (a node already gone is a
/// success, as for a delete).
pub(super) async fn delete_with_node(
    framework: &Framework,
    base_path: &Arc<str>,
    client: &zk::Client,
    node_path: &str,
) -> Result<(), zk::Error> {
    RemovedPaths::insert(framework, base_path);
    let mut multi = client.new_multi_writer();
    multi.add_delete(node_path, None)?;
    multi.add_delete(base_path, None)?;
    let refused = match multi.commit().await {
        Ok(_) => return Ok(()),
        Err(zk::MultiWriteError::OperationFailed {
            index: 0,
            source: zk::Error::NoNode,
        }) => {
            // Our node is gone already (this multi, answered on a
            // connection that was lost, or the session's end).
            RemovedPaths::forget(framework, base_path);
            return Ok(());
        }
        Err(zk::MultiWriteError::OperationFailed { index: 1, source }) => source,
        Err(zk::MultiWriteError::OperationFailed { source, .. })
        | Err(zk::MultiWriteError::RequestFailed { source }) => {
            RemovedPaths::forget(framework, base_path);
            return Err(source);
        }
    };
    // Someone queued meanwhile (or the path may not be deleted by us): the
    // path stays, and our node goes alone.
    RemovedPaths::forget(framework, base_path);
    tracing::debug!(%refused, path = %base_path, "the lock path stays");
    match client.delete(node_path, None).await {
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        Err(err) => Err(err),
    }
}
