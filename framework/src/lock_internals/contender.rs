//! [`ContenderGuard`]: the drop guard behind every cancel-safety promise.
//!
//! An acquire creates a node before it knows whether it will get the lock.
//! If the acquire future is dropped at any await point (a `select!`, a
//! `timeout`, an aborted task), that node must not stay behind to block
//! everybody else. The guard is armed *before* the create request is sent
//! and hands the node (or, while its name is still unknown, its protected
//! prefix) to the framework's background cleaner when dropped. It is
//! disarmed only at the moment ownership passes to the caller.

use crate::{CleanupJob, Framework, SessionPort};

/// Deletes a participant node in the background unless disarmed.
#[derive(Debug)]
#[must_use = "a guard deletes its node as soon as it is dropped"]
pub struct ContenderGuard {
    port: SessionPort,
    job: Option<CleanupJob>,
}

impl ContenderGuard {
    /// A guard for a protected create whose node name is not known yet: on
    /// drop the cleaner lists `parent` and deletes the child starting with
    /// `name_prefix` (if the create happened at all).
    pub fn protected(framework: &Framework, parent: &str, name_prefix: &str) -> Self {
        ContenderGuard {
            port: framework.port(),
            job: Some(CleanupJob::Protected {
                parent: parent.to_owned(),
                name_prefix: name_prefix.to_owned(),
            }),
        }
    }

    /// A guard for a node whose path is known.
    pub fn node(framework: &Framework, path: &str) -> Self {
        ContenderGuard {
            port: framework.port(),
            job: Some(CleanupJob::Node {
                path: path.to_owned(),
            }),
        }
    }

    /// Narrows the guard to the node now known to be ours.
    pub fn set_node(&mut self, path: &str) {
        if self.job.is_some() {
            self.job = Some(CleanupJob::Node {
                path: path.to_owned(),
            });
        }
    }

    /// Ownership passed elsewhere: do nothing on drop.
    pub fn disarm(mut self) {
        self.job = None;
    }

    /// Whether dropping the guard would schedule a delete.
    pub fn is_armed(&self) -> bool {
        self.job.is_some()
    }
}

impl Drop for ContenderGuard {
    fn drop(&mut self) {
        if let Some(job) = self.job.take() {
            tracing::debug!(?job, "participant node handed to the background cleaner");
            self.port.schedule_cleanup(job);
        }
    }
}
