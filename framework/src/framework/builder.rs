//! [`FrameworkBuilder`]: every setting of a [`Framework`], checked once in
//! [`FrameworkBuilder::build`].

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client as zk;

#[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
use super::sasl::Sasl;
use super::{BuilderExtensions, Framework};
use crate::acl::{AclProvider, FixedAcl};
use crate::ensemble::{self, EnsembleProvider, FixedEnsemble, Transport};
use crate::error::{Error, Result};
use crate::identity::HolderIdentity;
use crate::path;
use crate::retry::{ExponentialBackoffRetry, RetryPolicy};
use crate::state::ErrorPolicy;

/// The settings a [`Framework`] runs with (validated).
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// The connect string as given, or a description of the provider (for
    /// logs and `Debug`).
    pub(crate) connect_string: String,
    /// Asked for the hosts each time a session is built.
    pub(crate) ensemble: Arc<dyn EnsembleProvider>,
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<Arc<crate::tls::LiveTls>>,
    #[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
    pub(crate) sasl: Option<Sasl>,
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
    ensemble: Option<Arc<dyn EnsembleProvider>>,
    #[cfg(feature = "tls")]
    tls: Option<crate::tls::TlsConfig>,
    #[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
    sasl: Option<Sasl>,
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
            ensemble: None,
            #[cfg(feature = "tls")]
            tls: None,
            #[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
            sasl: None,
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

    /// The ensemble, as `host:port[,host:port…]`; an entry may be written
    /// `tcp://host:port` or `tcp+tls://host:port` (see [`ensemble`]).
    /// Required, unless an [`ensemble_provider`](Self::ensemble_provider)
    /// is given instead.
    pub fn connect_string(mut self, connect_string: impl Into<String>) -> Self {
        self.connect_string = Some(connect_string.into());
        self
    }

    /// Asks `provider` for the connect string each time a session is built,
    /// so that a service follows an ensemble whose hosts change (Curator's
    /// `EnsembleProvider`; see [`ensemble`] for what an existing session
    /// can follow). In place of [`connect_string`](Self::connect_string).
    pub fn ensemble_provider(mut self, provider: impl EnsembleProvider) -> Self {
        self.ensemble = Some(Arc::new(provider));
        self
    }

    /// Connects over TLS (ZooKeeper's `secureClientPort`): `tcp+tls://`
    /// entries always, bare `host:port` entries too unless
    /// [`TlsConfig::plain_hosts_use_tls`](crate::TlsConfig::plain_hosts_use_tls)
    /// says otherwise. Defaults to no TLS. Its files are read by `build()`.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, config: crate::tls::TlsConfig) -> Self {
        self.tls = Some(config);
        self
    }

    /// Authenticates every session with SASL DIGEST-MD5: `user` and
    /// `password` checked by the server's JAAS `DigestLoginModule`. Nodes
    /// can then be given `sasl:<user>` ACLs. Replaces any other SASL
    /// mechanism. Defaults to no SASL.
    #[cfg(feature = "sasl-digest-md5")]
    pub fn sasl_digest_md5(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.sasl = Some(Sasl::DigestMd5 {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// Authenticates every session with SASL GSSAPI (Kerberos), with the
    /// ticket in the credential cache (`kinit`; `KRB5CCNAME`). The server's
    /// principal is `service/host@REALM`: `service` is ZooKeeper's
    /// `zookeeper.sasl.client.username` (usually `"zookeeper"`), `host` the
    /// server's host as written in the connect string unless given (the
    /// Java client's `zookeeper.sasl.client.canonicalize.hostname=false`).
    /// Replaces any other SASL mechanism. Defaults to no SASL.
    #[cfg(feature = "sasl-gssapi")]
    pub fn sasl_gssapi(mut self, service: impl Into<String>, host: Option<String>) -> Self {
        self.sasl = Some(Sasl::Gssapi {
            service: service.into(),
            host,
        });
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
    /// [`Error::InvalidArgument`] for a missing, empty or malformed connect
    /// string (or both a connect string and a provider), `tcp+tls://`
    /// entries without `tls(..)` (feature `tls`), TLS files that cannot be read or
    /// parsed, a zero timeout, a packet limit under 1 KiB or an empty
    /// default ACL; [`Error::InvalidPath`] for a bad namespace.
    pub fn build(self) -> Result<Framework> {
        #[cfg(feature = "tls")]
        let tls = match self.tls {
            Some(config) => Some(Arc::new(crate::tls::LiveTls::new(config)?)),
            None => None,
        };
        #[cfg(feature = "tls")]
        let has_tls = tls.is_some();
        #[cfg(not(feature = "tls"))]
        let has_tls = false;
        let (connect_string, ensemble): (String, Arc<dyn EnsembleProvider>) =
            match (self.connect_string, self.ensemble) {
                (Some(_), Some(_)) => {
                    return Err(Error::InvalidArgument(
                        "give either a connect string or an ensemble provider, not both".into(),
                    ))
                }
                (Some(given), None) => {
                    let (checked, transports) = ensemble::check(&given)?;
                    check_transports(&checked, &transports, has_tls)?;
                    #[cfg(feature = "tls")]
                    if let Some(tls) = &tls {
                        crate::tls::check_tls_hosts(
                            &checked,
                            &transports,
                            tls.config().uses_tls_by_default(),
                        )?;
                    }
                    (checked.clone(), Arc::new(FixedEnsemble(checked)))
                }
                (None, Some(provider)) => (format!("{provider:?}"), provider),
                (None, None) => {
                    return Err(Error::InvalidArgument(
                        "a connect string (or an ensemble provider) is required".into(),
                    ))
                }
            };
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
                ensemble,
                #[cfg(feature = "tls")]
                tls,
                #[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
                sasl: self.sasl,
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

/// Refuses `tcp+tls://` entries when the framework has no TLS settings.
pub(crate) fn check_transports(
    connect_string: &str,
    transports: &[Transport],
    has_tls: bool,
) -> Result<()> {
    if !has_tls && transports.contains(&Transport::Tls) {
        return Err(Error::InvalidArgument(format!(
            "{connect_string:?} has tcp+tls:// entries, but the framework has no TLS settings: \
             give it FrameworkBuilder::tls(..)"
        )));
    }
    Ok(())
}
