//! [`LockInternals`]: one lock's path, name, lease count and driver, on a
//! framework; what every stage (acquire, resume, release) reads. The
//! stages themselves are the modules beside it, called from the entry
//! points in `mod.rs`.

use std::fmt;
use std::sync::Arc;

use super::driver::LockInternalsDriver;
use crate::{path, Error, Framework, Result};

/// The longest sequence the server appends to a participant's name.
const SEQUENCE_LEN: usize = 10;

/// The shared acquire/release machinery of the lock recipes.
#[derive(Clone)]
pub struct LockInternals {
    pub(super) framework: Framework,
    pub(super) base_path: Arc<str>,
    pub(super) lock_name: Arc<str>,
    pub(super) max_leases: u32,
    pub(super) driver: Arc<dyn LockInternalsDriver>,
}

impl fmt::Debug for LockInternals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockInternals")
            .field("base_path", &self.base_path)
            .field("lock_name", &self.lock_name)
            .field("max_leases", &self.max_leases)
            .field("driver", &self.driver)
            .finish()
    }
}

impl LockInternals {
    /// Machinery for participants named `lock_name` under `base_path`, of
    /// which `max_leases` may hold the lock at once.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a bad `base_path` (including `/` and the
    /// server's reserved `/zookeeper` tree) or a bad `lock_name` (an empty
    /// one is allowed: participants are then named by their layout's prefix
    /// alone, as kazoo's semaphore leases are);
    /// [`Error::InvalidArgument`] for zero `max_leases`.
    pub fn new(
        framework: Framework,
        base_path: &str,
        lock_name: &str,
        max_leases: u32,
        driver: Arc<dyn LockInternalsDriver>,
    ) -> Result<Self> {
        path::validate_recipe_path(base_path)?;
        if !lock_name.is_empty() {
            path::validate_node_name(lock_name)?;
        }
        if max_leases == 0 {
            return Err(Error::InvalidArgument(
                "max_leases must be at least 1".into(),
            ));
        }
        Ok(LockInternals {
            framework,
            base_path: base_path.into(),
            lock_name: lock_name.into(),
            max_leases,
            driver,
        })
    }

    /// The framework this lock runs on.
    pub fn framework(&self) -> &Framework {
        &self.framework
    }

    /// The lock's path.
    pub fn base_path(&self) -> &str {
        &self.base_path
    }

    /// The name participants carry after their protection prefix.
    pub fn lock_name(&self) -> &str {
        &self.lock_name
    }

    /// How many participants may hold the lock at once.
    pub fn max_leases(&self) -> u32 {
        self.max_leases
    }

    /// Checks that a participant node carrying `data` can be created: its
    /// create must fit in the framework's
    /// [`max_packet_size`](crate::FrameworkBuilder::max_packet_size).
    /// Nothing is sent.
    ///
    /// # Errors
    /// [`Error::RequestTooLarge`], naming the create's size and the limit.
    pub fn check_node_data(&self, data: &[u8]) -> Result<()> {
        let prefix = self.driver.layout().max_prefix_len();
        let name = "x".repeat(prefix + self.lock_name.len() + SEQUENCE_LEN);
        let node = path::join(&self.base_path, &name);
        let acl = self.framework.acl_for_path(&node);
        let create = crate::packet::Op::create_with(
            self.framework.namespace_len(),
            &node,
            data.len(),
            &acl,
            false,
        );
        crate::packet::check(create.alone(), self.framework.max_packet_size())
    }

    /// The driver.
    pub fn driver(&self) -> &Arc<dyn LockInternalsDriver> {
        &self.driver
    }

    /// Sorts child names with the driver's sort key.
    pub fn sort_children(&self, mut children: Vec<String>) -> Vec<String> {
        children.sort_by_cached_key(|name| self.driver.sort_key(name, &self.lock_name));
        children
    }

    /// The full paths of all participants, sorted (the first `max_leases`
    /// hold the lock). Empty if the lock path does not exist.
    ///
    /// # Errors
    /// ZooKeeper errors that retrying could not overcome; [`Error::Closed`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn participant_nodes(&self) -> Result<Vec<String>> {
        let base = self.base_path.to_string();
        let children = self
            .framework
            .call_with_retry(|client| {
                let base = base.clone();
                async move { client.list_children(&base).await }
            })
            .await;
        let children = match children {
            Ok(children) => children,
            Err(Error::NoNode { .. }) => return Ok(Vec::new()),
            Err(err) => return Err(err),
        };
        Ok(self
            .sort_children(children)
            .into_iter()
            .map(|name| path::join(&self.base_path, &name))
            .collect())
    }
}
