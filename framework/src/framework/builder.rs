//! [`FrameworkBuilder`]: every setting of a [`Framework`], checked once in
//! [`FrameworkBuilder::build`].

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client as zk;

use super::{BuilderExtensions, Framework};
use crate::acl::{AclProvider, FixedAcl};
use crate::error::{Error, Result};
use crate::identity::HolderIdentity;
use crate::path;
use crate::retry::{ExponentialBackoffRetry, RetryPolicy};
use crate::state::ErrorPolicy;

/// The settings a [`Framework`] runs with (validated).
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) connect_string: String,
    pub(crate) session_timeout: Duration,
    pub(crate) connection_timeout: Duration,
    pub(crate) namespace: Option<String>,
    pub(crate) retry_policy: Arc<dyn RetryPolicy>,
    pub(crate) auth: Vec<(String, Vec<u8>)>,
    pub(crate) acl_provider: Arc<dyn AclProvider>,
    pub(crate) error_policy: ErrorPolicy,
    /// What participant nodes carry when a recipe gives no data of its own.
    pub(crate) identity: Option<HolderIdentity>,
    pub(crate) default_node_data: Vec<u8>,
    pub(crate) metrics_path_label: bool,
    pub(crate) max_packet_size: usize,
}

/// Builds a [`Framework`]; start from [`Framework::builder`].
///
/// Every setter consumes and returns the builder and states its default.
#[derive(Debug)]
#[must_use = "a builder does nothing until `build()`"]
pub struct FrameworkBuilder {
    connect_string: Option<String>,
    session_timeout: Duration,
    connection_timeout: Duration,
    namespace: Option<String>,
    retry_policy: Option<Arc<dyn RetryPolicy>>,
    auth: Vec<(String, Vec<u8>)>,
    acl_provider: Option<Arc<dyn AclProvider>>,
    error_policy: ErrorPolicy,
    identity: bool,
    identity_label: Option<String>,
    metrics_path_label: bool,
    extensions: BuilderExtensions,
    max_packet_size: usize,
}

impl FrameworkBuilder {
    pub(super) fn new() -> Self {
        FrameworkBuilder {
            connect_string: None,
            session_timeout: Duration::from_secs(30),
            connection_timeout: Duration::from_secs(15),
            namespace: None,
            retry_policy: None,
            auth: Vec::new(),
            acl_provider: None,
            error_policy: ErrorPolicy::Standard,
            identity: true,
            identity_label: None,
            metrics_path_label: true,
            extensions: BuilderExtensions::default(),
            max_packet_size: crate::packet::DEFAULT_MAX_PACKET_SIZE,
        }
    }

    /// Settings of the layers above (the lock engine's), changed in place
    /// by their own builder methods.
    pub(crate) fn extension_mut<T: std::any::Any + Send + Sync + Default>(&mut self) -> &mut T {
        self.extensions.get_mut::<T>()
    }

    /// The longest request the servers accept, in bytes: their
    /// `jute.maxbuffer` (ZooKeeper's default, 0xfffff, is the default here
    /// too). A server drops the connection of a client that sends a longer
    /// one, and every hold of the session is lost with it, so node data,
    /// fenced writes and multis that would be longer are refused with
    /// [`Error::RequestTooLarge`] before anything is sent. Set it to the
    /// servers' `jute.maxbuffer` when they raise it; never above.
    pub fn max_packet_size(mut self, bytes: usize) -> Self {
        self.max_packet_size = bytes;
        self
    }

    /// Whether lock metrics carry the lock's path as their `path` label
    /// (see [`telemetry`](crate::telemetry)). Defaults to `true`; turn it
    /// off when lock paths are many, to keep the number of series small.
    pub fn metrics_path_label(mut self, enabled: bool) -> Self {
        self.metrics_path_label = enabled;
        self
    }

    /// A label added to the [`HolderIdentity`] every participant node
    /// carries (for example the job's name), cut to
    /// [`MAX_LABEL_LEN`](crate::identity::MAX_LABEL_LEN) bytes. None by default.
    pub fn identity_label(mut self, label: impl Into<String>) -> Self {
        self.identity_label = Some(label.into());
        self
    }

    /// Whether participant nodes carry this process's [`HolderIdentity`]
    /// when a recipe gives no data of its own. Defaults to `true`; with
    /// `false` they carry no data, as Curator's.
    pub fn holder_identity(mut self, enabled: bool) -> Self {
        self.identity = enabled;
        self
    }

    /// The ensemble, as `host:port[,host:port…]`. Required.
    pub fn connect_string(mut self, connect_string: impl Into<String>) -> Self {
        self.connect_string = Some(connect_string.into());
        self
    }

    /// The session timeout asked of the server (it may negotiate it within
    /// its own bounds). Also how long `Suspended` may last before the
    /// framework declares the session `Lost`. Defaults to 30 s.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long an operation waits for a usable session (at start and after
    /// a loss) before failing with [`Error::Timeout`]. Defaults to 15 s.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// A path under which every path of this framework lives (ZooKeeper's
    /// chroot). Created on start if missing. Defaults to none.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// How operations that fail with a retryable error are retried. Defaults
    /// to [`ExponentialBackoffRetry`] from 100 ms, at most 5 s apart, 10 times.
    pub fn retry_policy(mut self, policy: impl RetryPolicy) -> Self {
        self.retry_policy = Some(Arc::new(policy));
        self
    }

    /// Authenticates every session with ZooKeeper's `digest` scheme
    /// (`user:password`). Defaults to no authentication.
    pub fn digest_auth(mut self, user: &str, password: &str) -> Self {
        self.auth.push((
            "digest".to_owned(),
            format!("{user}:{password}").into_bytes(),
        ));
        self
    }

    /// The ACL of every node the framework and its recipes create. Defaults
    /// to `world:anyone` with all permissions.
    pub fn default_acl(mut self, acl: Vec<zk::Acl>) -> Self {
        self.acl_provider = Some(Arc::new(FixedAcl(acl)));
        self
    }

    /// Chooses the ACL per path (for example: readable parents, locked-down
    /// lock nodes). Replaces [`default_acl`](Self::default_acl). Defaults to
    /// `world:anyone` with all permissions everywhere.
    pub fn acl_provider(mut self, provider: impl AclProvider) -> Self {
        self.acl_provider = Some(Arc::new(provider));
        self
    }

    /// Which connection states make a held lock count as lost. Defaults to
    /// [`ErrorPolicy::Standard`] (`Suspended` and `Lost`).
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.error_policy = policy;
        self
    }

    /// Checks the settings and builds a framework that is not started yet.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a missing or empty connect string, a
    /// zero timeout, a packet limit under 1 KiB or an empty default ACL; [`Error::InvalidPath`] for a bad
    /// namespace.
    pub fn build(self) -> Result<Framework> {
        let connect_string = match self.connect_string {
            Some(s) if !s.trim().is_empty() => s.trim().to_owned(),
            _ => {
                return Err(Error::InvalidArgument(
                    "a connect string is required".into(),
                ))
            }
        };
        if connect_string.contains('/') {
            return Err(Error::InvalidArgument(
                "put the chroot in `namespace(..)`, not in the connect string".into(),
            ));
        }
        if self.max_packet_size < 1024 {
            return Err(Error::InvalidArgument(format!(
                "a packet limit of {} bytes is too small for any lock (ZooKeeper's default is {})",
                self.max_packet_size,
                crate::packet::DEFAULT_MAX_PACKET_SIZE
            )));
        }
        if self.session_timeout.is_zero() || self.connection_timeout.is_zero() {
            return Err(Error::InvalidArgument("timeouts must be positive".into()));
        }
        let namespace = match self.namespace {
            None => None,
            Some(ns) => {
                let ns = if ns.starts_with('/') {
                    ns
                } else {
                    format!("/{ns}")
                };
                path::validate_recipe_path(&ns)?;
                Some(ns)
            }
        };
        let acl_provider = self
            .acl_provider
            .unwrap_or_else(|| Arc::new(FixedAcl(zk::Acls::anyone_all().to_vec())));
        if acl_provider.default_acl().is_empty() {
            return Err(Error::InvalidArgument(
                "the default ACL must not be empty".into(),
            ));
        }
        let retry_policy = match self.retry_policy {
            Some(p) => p,
            None => Arc::new(ExponentialBackoffRetry::with_max_sleep(
                Duration::from_millis(100),
                10,
                Duration::from_secs(5),
            )?),
        };
        let identity = self
            .identity
            .then(|| HolderIdentity::of_this_process(self.identity_label.as_deref()));
        let default_node_data = identity
            .as_ref()
            .map(HolderIdentity::to_bytes)
            .unwrap_or_default();
        Ok(Framework::from_config(
            Config {
                connect_string,
                session_timeout: self.session_timeout,
                connection_timeout: self.connection_timeout,
                namespace,
                retry_policy,
                auth: self.auth,
                acl_provider,
                error_policy: self.error_policy,
                identity,
                default_node_data,
                metrics_path_label: self.metrics_path_label,
                max_packet_size: self.max_packet_size,
            },
            self.extensions.into(),
        ))
    }
}
