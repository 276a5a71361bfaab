//! Stage one of an acquire: creating our participant node (protected, so
//! that a create whose reply was lost is adopted rather than repeated) and
//! listing the participants in the same breath.

use zookeeper_client as zk;

use super::driver::ParticipantNode;
use super::guard::ContenderGuard;
use super::internals::LockInternals;
use super::revocation::{self, Revocation};
use crate::retry::RetryLoop;
use crate::{path, Error, LockLoss, Result, Session};

/// How many times one create may find the lock path missing and create its
/// parents before the retry policy is asked (a parent reaped by the server
/// between two creates). Creating parents is part of the first acquire on a
/// path, not a failure, so it does not spend the retry budget.
const PARENT_ROUNDS: u32 = 3;

/// Our created node and the participants listed right after it.
pub(super) struct Created {
    pub(super) name: String,
    pub(super) czxid: i64,
    pub(super) children: Vec<String>,
}

/// Our participant node, from its create until it holds or is given up.
pub(super) struct Ours {
    pub(super) created: Created,
    /// Its full path.
    pub(super) path: String,
    /// Deletes it in the background unless disarmed.
    pub(super) guard: ContenderGuard,
    pub(super) ephemeral: bool,
}

/// Creates our participant node, named as the driver asks, with its
/// cleanup armed before anything is sent, and starts watching it for
/// revocation requests if asked.
pub(super) async fn create_ours(
    lock: &LockInternals,
    session: &Session,
    data: &[u8],
    revocation: Option<&Revocation>,
) -> Result<Ours> {
    let node_kind = lock.driver.participant_node();
    let name_prefix = lock
        .driver
        .layout()
        .node_prefix(crate::random::node_id(), &lock.lock_name);
    let (create_name, mode) = match &node_kind {
        ParticipantNode::EphemeralSequential => {
            (name_prefix.clone(), zk::CreateMode::EphemeralSequential)
        }
        ParticipantNode::PersistentSequential => {
            (name_prefix.clone(), zk::CreateMode::PersistentSequential)
        }
        ParticipantNode::EphemeralWithSequence(seq) => {
            (format!("{name_prefix}{seq}"), zk::CreateMode::Ephemeral)
        }
    };
    // Armed before anything is sent: from here on, any exit cleans up.
    let mut guard = ContenderGuard::protected(&lock.framework, &lock.base_path, &name_prefix);
    let created = create_participant(lock, session, &create_name, &name_prefix, mode, data).await?;
    let our_path = path::join(&lock.base_path, &created.name);
    guard.set_node(&our_path);
    tracing::debug!(node = %our_path, "participant node created");
    if let Some(revocation) = revocation {
        revocation::spawn_watch(
            lock.framework.clone(),
            session.clone(),
            our_path.clone(),
            revocation.clone(),
        );
    }
    Ok(Ours {
        created,
        path: our_path,
        guard,
        ephemeral: node_kind.is_ephemeral(),
    })
}

/// Sends the protected create and the children listing back to back.
pub(super) async fn create_participant(
    lock: &LockInternals,
    session: &Session,
    create_name: &str,
    name_prefix: &str,
    mode: zk::CreateMode,
    data: &[u8],
) -> Result<Created> {
    let create_path = path::join(&lock.base_path, create_name);
    let acl = lock.framework.acl_for_path(&create_path);
    let options = mode.with_acls(zk::Acls::new(&acl));
    let sequential = matches!(
        mode,
        zk::CreateMode::EphemeralSequential | zk::CreateMode::PersistentSequential
    );
    let mut retry = RetryLoop::new(&**lock.framework.retry_policy());
    let mut parent_rounds = 0u32;
    let mut maybe_created = false;
    loop {
        lock.framework.check_open()?;
        if maybe_created {
            // The last create may have been applied with its reply lost:
            // adopt our node rather than create a second one.
            let children = match list_children_on(lock, session).await {
                Ok(children) => children,
                Err(Error::LockLost { .. }) => Vec::new(), // parent missing: nothing was created
                Err(err) => return Err(err),
            };
            if let Some(name) = children
                .iter()
                .find(|c| c.starts_with(name_prefix))
                .cloned()
            {
                let czxid = adopt(lock, session, &name, mode).await?;
                tracing::info!(node = %name, "adopted the node of a create whose reply was lost");
                return Ok(Created {
                    name,
                    czxid,
                    children,
                });
            }
        }
        let client = session.client();
        // Both requests are queued here, in this order, before either is awaited.
        let create = client.create(&create_path, data, &options);
        let list = client.list_children(&lock.base_path);
        let (created, listed) = futures::join!(create, list);
        let err = match created {
            Ok((stat, sequence)) => {
                let name = if sequential {
                    format!("{create_name}{sequence}")
                } else {
                    create_name.to_owned()
                };
                let children = match listed {
                    Ok(children) if children.contains(&name) => children,
                    _ => list_children_on(lock, session).await?,
                };
                return Ok(Created {
                    name,
                    czxid: stat.czxid,
                    children,
                });
            }
            Err(zk::Error::NoNode) => {
                // The lock path (or a level reaped by the server between
                // two creates) is missing: create it and go again, outside
                // the retry budget for the first few rounds.
                match create_parents(lock, session).await {
                    Ok(()) | Err(Error::NoNode { .. }) => {}
                    Err(err) => return Err(err),
                }
                parent_rounds += 1;
                if parent_rounds > PARENT_ROUNDS {
                    // Parents keep vanishing: each round now counts as a
                    // retry (without a pause: the parents were just made).
                    retry.allow(Error::NoNode {
                        path: lock.base_path.to_string(),
                    })?;
                }
                continue;
            }
            Err(err) => {
                let err = session.map_err(err);
                if !err.is_retryable() {
                    return Err(err);
                }
                maybe_created = true;
                err
            }
        };
        tracing::debug!(%err, "create failed; retrying");
        retry.next(err, lock.framework.closed()).await?;
    }
}

/// Reads the stat of a node found by its prefix, checking that it belongs
/// to this session when it is ephemeral.
pub(super) async fn adopt(
    lock: &LockInternals,
    session: &Session,
    name: &str,
    mode: zk::CreateMode,
) -> Result<i64> {
    let node_path = path::join(&lock.base_path, name);
    let stat = lock
        .framework
        .call_on_session(session, |client| {
            let node_path = node_path.clone();
            async move { client.check_stat(&node_path).await }
        })
        .await?;
    match stat {
        Some(stat)
            if !matches!(
                mode,
                zk::CreateMode::Ephemeral | zk::CreateMode::EphemeralSequential
            ) || stat.ephemeral_owner == session.id() =>
        {
            Ok(stat.czxid)
        }
        // Not ours: the node we created died with our session.
        Some(_) => Err(Error::lock_lost(node_path, LockLoss::SessionReplaced)),
        // Vanished before it could be adopted.
        None => Err(Error::lock_lost(node_path, LockLoss::NodeDeleted)),
    }
}

/// Creates the lock path's missing ancestors as container nodes (the
/// server removes them once their last child goes).
pub(super) async fn create_parents(lock: &LockInternals, session: &Session) -> Result<()> {
    // Walk up with `exists` to the deepest existing ancestor (no read or
    // create permission is needed above it), then create downwards, each
    // level with its own ACL.
    let levels: Vec<&str> = path::parents(&lock.base_path)
        .chain(std::iter::once(&*lock.base_path))
        .collect();
    let mut missing_from = levels.len();
    for (index, level) in levels.iter().enumerate().rev() {
        let level = level.to_string();
        let exists = lock
            .framework
            .call_on_session(session, |client| {
                let level = level.clone();
                async move { client.check_stat(&level).await }
            })
            .await?;
        if exists.is_some() {
            break;
        }
        missing_from = index;
    }
    for level in &levels[missing_from..] {
        let level = level.to_string();
        let acl = lock.framework.acl_for_path(&level);
        lock.framework
            .call_on_session(session, |client| {
                let (level, acl) = (level.clone(), acl.clone());
                async move {
                    let options = zk::CreateMode::Container.with_acls(zk::Acls::new(&acl));
                    match client.create(&level, &[], &options).await {
                        Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                        Err(err) => Err(err),
                    }
                }
            })
            .await?;
    }
    Ok(())
}

/// Lists the lock's children on `session`; a missing lock path means our
/// node cannot exist ([`Error::LockLost`]).
pub(super) async fn list_children_on(
    lock: &LockInternals,
    session: &Session,
) -> Result<Vec<String>> {
    let base = lock.base_path.to_string();
    let result = lock
        .framework
        .call_on_session(session, |client| {
            let base = base.clone();
            async move { client.list_children(&base).await }
        })
        .await;
    match result {
        Err(Error::NoNode { .. }) => Err(Error::lock_lost(&*lock.base_path, LockLoss::NodeDeleted)),
        other => other,
    }
}
