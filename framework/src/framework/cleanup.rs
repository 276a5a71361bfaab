//! The background cleaner ("guaranteed delete").
//!
//! Dropping an acquire future, dropping a guard, or releasing while the
//! connection is down must not leave a node behind, yet `Drop` cannot wait
//! for ZooKeeper. Such deletes are queued here: a plain channel send, which
//! works even outside a tokio runtime. The cleaner deletes each node on the
//! current session, retrying through connection loss with a capped backoff
//! (a loop, not recursion) until the node is gone or the framework closes.
//! A missing node counts as deleted.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use zookeeper_client as zk;

use super::Inner;
use crate::error::{Error, Result};
use crate::path;

const FIRST_DELAY: Duration = Duration::from_millis(50);
const MAX_DELAY: Duration = Duration::from_secs(2);

/// A node to delete in the background.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CleanupJob {
    /// A node whose path is known.
    Node {
        /// Its path.
        path: String,
    },
    /// A protected node whose create may or may not have happened: find the
    /// child of `parent` whose name starts with `name_prefix` and delete it.
    Protected {
        /// The parent to list.
        parent: String,
        /// `_c_<uuid>-<lock name>`.
        name_prefix: String,
    },
}

pub(super) async fn run(inner: Arc<Inner>, mut jobs: mpsc::UnboundedReceiver<CleanupJob>) {
    let mut closed = inner.closed_tx.subscribe();
    loop {
        tokio::select! {
            job = jobs.recv() => match job {
                Some(job) => {
                    let inner = inner.clone();
                    tokio::spawn(async move {
                        let mut closed = inner.closed_tx.subscribe();
                        tokio::select! {
                            _ = perform(&inner, &job) => {}
                            _ = closed.wait_for(|c| *c) => {}
                        }
                        inner.pending_cleanups.send_modify(|n| *n = n.saturating_sub(1));
                    });
                }
                None => return,
            },
            _ = closed.wait_for(|c| *c) => {
                inner.pending_cleanups.send_replace(0);
                return;
            }
        }
    }
}

async fn perform(inner: &Inner, job: &CleanupJob) {
    let mut delay = FIRST_DELAY;
    let mut failures = 0u32;
    loop {
        match attempt(inner, job).await {
            Ok(deleted) => {
                if deleted {
                    inner
                        .metrics
                        .background_deletes
                        .fetch_add(1, Ordering::Relaxed);
                }
                tracing::debug!(?job, deleted, "background cleanup done");
                return;
            }
            Err(Error::Closed) => return,
            Err(err)
                if !(err.is_retryable()
                    || err.is_session_terminal()
                    || matches!(err, Error::Timeout(_))) =>
            {
                // Retrying cannot fix this (e.g. NoAuth): say so and stop.
                tracing::warn!(?job, %err, "background delete gave up");
                return;
            }
            Err(err) => {
                failures += 1;
                if failures % 10 == 1 {
                    tracing::warn!(?job, %err, failures, "background delete failed; will retry");
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_DELAY);
            }
        }
    }
}

/// One try; `Ok(true)` if a node was deleted, `Ok(false)` if none existed.
async fn attempt(inner: &Inner, job: &CleanupJob) -> Result<bool> {
    let session = inner.session().await?;
    let client = &session.client;
    let target = match job {
        CleanupJob::Node { path } => path.clone(),
        CleanupJob::Protected {
            parent,
            name_prefix,
        } => {
            let children = match client.list_children(parent).await {
                Ok(children) => children,
                Err(zk::Error::NoNode) => return Ok(false),
                Err(err) => return Err(session.map_err(err)),
            };
            match children
                .iter()
                .find(|c| c.starts_with(name_prefix.as_str()))
            {
                Some(child) => path::join(parent, child),
                None => return Ok(false),
            }
        }
    };
    match client.delete(&target, None).await {
        Ok(()) => Ok(true),
        Err(zk::Error::NoNode) => Ok(false),
        Err(err) => Err(session.map_err(err)),
    }
}
