//! [`TlsConfig`]: how the framework reaches an ensemble over TLS
//! (ZooKeeper's `secureClientPort`), mutual TLS included.
//!
//! Certificates and keys are PEM, from files or from memory. Files are read
//! when the framework is built (so a missing or malformed file is refused
//! before anything is sent), again every time it builds a session, and every
//! [`reload_interval`](TlsConfig::reload_interval) while it runs: a
//! certificate replaced on disk (renewed by cert-manager, Vault, …) is used
//! by the next connection, with no restart. A file that no longer parses
//! keeps the last good certificates in use and is logged.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zookeeper_client as zk;

use crate::ensemble::Transport;
use crate::error::{Error, Result};

/// Where the system's trusted roots are, in the order they are looked for
/// (Debian/Ubuntu, Fedora/RHEL, Alpine/others); `SSL_CERT_FILE` first.
const PLATFORM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// PEM data, from a file (read again on reloads) or from memory.
#[derive(Clone)]
enum Pem {
    File(PathBuf),
    Bytes(Arc<[u8]>),
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pem::File(path) => write!(f, "file {}", path.display()),
            Pem::Bytes(bytes) => write!(f, "{} bytes in memory", bytes.len()),
        }
    }
}

impl Pem {
    fn read(&self, what: &str) -> Result<String> {
        let bytes = match self {
            Pem::File(path) => std::fs::read(path).map_err(|err| {
                Error::InvalidArgument(format!("cannot read the {what} {}: {err}", path.display()))
            })?,
            Pem::Bytes(bytes) => bytes.to_vec(),
        };
        String::from_utf8(bytes)
            .map_err(|_| Error::InvalidArgument(format!("the {what} ({self:?}) is not PEM text")))
    }
}

/// TLS settings of a framework: whom to trust, who we are (mutual TLS), the
/// name to verify. Give it to
/// [`FrameworkBuilder::tls`](crate::FrameworkBuilder::tls).
///
/// It pairs with a ZooKeeper server configured with `secureClientPort`,
/// `serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory`
/// and `ssl.keyStore.*` / `ssl.trustStore.*`; with `ssl.clientAuth=need`,
/// add [`client_cert_files`](Self::client_cert_files).
///
/// ```
/// use zk_curator_framework::TlsConfig;
/// let tls = TlsConfig::new()
///     .ca_file("/etc/zookeeper/tls/ca.pem")
///     .client_cert_files("/etc/my-service/tls/cert.pem", "/etc/my-service/tls/key.pem");
/// # let _ = tls;
/// ```
#[derive(Clone, Debug)]
#[must_use = "a TlsConfig does nothing until given to FrameworkBuilder::tls"]
pub struct TlsConfig {
    cas: Vec<Pem>,
    platform_roots: bool,
    identity: Option<(Pem, Pem)>,
    server_name: Option<String>,
    plain_hosts_use_tls: bool,
    reload_interval: Duration,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl TlsConfig {
    /// No trusted roots yet (add [`ca_file`](Self::ca_file),
    /// [`ca_pem`](Self::ca_pem) or [`platform_roots`](Self::platform_roots)),
    /// no client certificate, the host of each connect-string entry as the
    /// name to verify, TLS for bare `host:port` entries, reloads every 60 s.
    pub fn new() -> Self {
        TlsConfig {
            cas: Vec::new(),
            platform_roots: false,
            identity: None,
            server_name: None,
            plain_hosts_use_tls: true,
            reload_interval: Duration::from_secs(60),
        }
    }

    /// Trusts the CA certificates (and revocation lists) of this PEM file.
    /// May be given several times.
    pub fn ca_file(mut self, path: impl AsRef<Path>) -> Self {
        self.cas.push(Pem::File(path.as_ref().to_owned()));
        self
    }

    /// Trusts the CA certificates (and revocation lists) of this PEM text.
    pub fn ca_pem(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.cas.push(Pem::Bytes(pem.as_ref().into()));
        self
    }

    /// Also trusts the system's roots (`SSL_CERT_FILE`, else the
    /// distribution's bundle). Off by default: an ensemble's certificates
    /// are usually signed by a private CA, and trusting every public CA
    /// would accept any certificate for the server's name they issued.
    pub fn platform_roots(mut self, enabled: bool) -> Self {
        self.platform_roots = enabled;
        self
    }

    /// Presents this certificate chain and private key (PEM files) to the
    /// servers: mutual TLS, ZooKeeper's `ssl.clientAuth=need`.
    pub fn client_cert_files(mut self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Self {
        self.identity = Some((
            Pem::File(cert.as_ref().to_owned()),
            Pem::File(key.as_ref().to_owned()),
        ));
        self
    }

    /// Presents this certificate chain and private key (PEM text).
    pub fn client_cert_pem(mut self, cert: impl AsRef<[u8]>, key: impl AsRef<[u8]>) -> Self {
        self.identity = Some((
            Pem::Bytes(cert.as_ref().into()),
            Pem::Bytes(key.as_ref().into()),
        ));
        self
    }

    /// Verifies every server's certificate against this name (and sends it
    /// as SNI) instead of the host written in the connect string: for
    /// servers reached by addresses their certificates do not name (a load
    /// balancer, a tunnel, bare IPs with a certificate for a DNS name).
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Whether a bare `host:port` entry of the connect string uses TLS.
    /// Defaults to `true`; with `false` only `tcp+tls://` entries do.
    pub fn plain_hosts_use_tls(mut self, enabled: bool) -> Self {
        self.plain_hosts_use_tls = enabled;
        self
    }

    /// How often certificate files are read again while the framework runs
    /// (they are also read each time a session is built). Defaults to 60 s.
    pub fn reload_interval(mut self, interval: Duration) -> Self {
        self.reload_interval = interval;
        self
    }

    pub(crate) fn uses_tls_by_default(&self) -> bool {
        self.plain_hosts_use_tls
    }

    pub(crate) fn reload_every(&self) -> Duration {
        self.reload_interval
    }

    /// Reads every source and builds the client's certificates.
    fn load(&self) -> Result<(String, zk::TlsCerts)> {
        let mut roots = String::new();
        for ca in &self.cas {
            roots.push_str(&ca.read("CA certificate file")?);
            roots.push('\n');
        }
        if self.platform_roots {
            roots.push_str(&platform_bundle()?);
        }
        if roots.trim().is_empty() {
            return Err(Error::InvalidArgument(
                "TLS needs trusted roots: ca_file, ca_pem or platform_roots(true)".into(),
            ));
        }
        let ca = zk::TlsCa::from_pem(&roots).map_err(|err| {
            Error::InvalidArgument(format!("no usable CA certificate in {:?}: {err}", self.cas))
        })?;
        let mut builder = zk::TlsCerts::builder().with_ca(ca);
        let mut fingerprint = roots;
        if let Some((cert, key)) = &self.identity {
            let cert_pem = cert.read("client certificate")?;
            let key_pem = key.read("client key")?;
            let identity = zk::TlsIdentity::from_pem(&cert_pem, &key_pem).map_err(|err| {
                Error::InvalidArgument(format!(
                    "the client certificate ({cert:?}) or key ({key:?}) is not usable: {err}"
                ))
            })?;
            builder = builder.with_identity(identity);
            fingerprint.push_str(&cert_pem);
            fingerprint.push_str(&key_pem);
        }
        let certs = builder
            .build()
            .map_err(|err| Error::InvalidArgument(format!("TLS certificates: {err}")))?;
        Ok((fingerprint, certs))
    }
}

fn platform_bundle() -> Result<String> {
    let from_env = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
    let candidates = from_env
        .into_iter()
        .chain(PLATFORM_BUNDLES.iter().map(PathBuf::from));
    for path in candidates {
        if let Ok(pem) = std::fs::read_to_string(&path) {
            return Ok(pem);
        }
    }
    Err(Error::InvalidArgument(format!(
        "platform_roots(true), but no system CA bundle was found (SSL_CERT_FILE, {})",
        PLATFORM_BUNDLES.join(", ")
    )))
}

/// A [`TlsConfig`] in use: its certificates loaded, kept up to date with
/// their files, shared by every session the framework builds.
#[derive(Debug)]
pub(crate) struct LiveTls {
    config: TlsConfig,
    certs: zk::TlsDynamicCerts,
    /// What was loaded last, to update the client only on a change.
    fingerprint: Mutex<String>,
}

impl LiveTls {
    /// Loads `config` once; what fails here is refused by `build()`.
    pub(crate) fn new(config: TlsConfig) -> Result<LiveTls> {
        if let Some(name) = &config.server_name {
            zk::TlsOptions::new()
                .with_server_name(name)
                .map_err(|_| Error::InvalidArgument(format!("invalid TLS server name {name:?}")))?;
        }
        if config.reload_interval.is_zero() {
            return Err(Error::InvalidArgument(
                "the TLS reload interval must be positive".into(),
            ));
        }
        let (fingerprint, certs) = config.load()?;
        Ok(LiveTls {
            config,
            certs: zk::TlsDynamicCerts::new(certs),
            fingerprint: Mutex::new(fingerprint),
        })
    }

    pub(crate) fn config(&self) -> &TlsConfig {
        &self.config
    }

    /// Reads the files again; hands the client new certificates if they
    /// changed. A failure keeps the last good ones and is logged.
    pub(crate) fn reload(&self) {
        match self.config.load() {
            Ok((fingerprint, certs)) => {
                let mut last = self.fingerprint.lock().unwrap_or_else(|e| e.into_inner());
                if *last != fingerprint {
                    tracing::info!(
                        "TLS certificates changed on disk; the next connection uses them"
                    );
                    self.certs.update(certs);
                    *last = fingerprint;
                }
            }
            Err(err) => {
                tracing::warn!(%err, "cannot reload the TLS certificates; keeping the last good ones")
            }
        }
    }

    /// The client's options for the next session.
    pub(crate) fn options(&self) -> zk::TlsOptions {
        let options = zk::TlsOptions::new().with_certs(self.certs.clone());
        match &self.config.server_name {
            // Checked in `new`.
            Some(name) => options.clone().with_server_name(name).unwrap_or(options),
            None => options,
        }
    }
}

/// Checks that every entry of `connect_string` that will use TLS names its
/// host in a form a certificate can be verified against (an IP address or
/// a DNS name).
///
/// # Errors
/// [`Error::InvalidArgument`] naming the entry.
pub(crate) fn check_tls_hosts(
    connect_string: &str,
    transports: &[Transport],
    plain_hosts_use_tls: bool,
) -> Result<()> {
    for (entry, transport) in connect_string.split(',').zip(transports) {
        let tls = match transport {
            Transport::Tls => true,
            Transport::Plain => false,
            Transport::Default => plain_hosts_use_tls,
        };
        if !tls {
            continue;
        }
        let address = entry
            .trim()
            .trim_start_matches("tcp+tls://")
            .trim_start_matches("tcp://");
        let host = match address.strip_prefix('[') {
            Some(rest) => rest.split(']').next().unwrap_or(rest),
            None => address.rsplit_once(':').map_or(address, |(host, _)| host),
        };
        if rustls::pki_types::ServerName::try_from(host).is_err() {
            return Err(Error::InvalidArgument(format!(
                "connect string entry {entry:?}: {host:?} is neither an IP address nor a DNS name, \
                 so a TLS certificate cannot be checked against it"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ensemble;

    fn tls_hosts(connect_string: &str, by_default: bool) -> Result<()> {
        let (checked, transports) = ensemble::check(connect_string)?;
        check_tls_hosts(&checked, &transports, by_default)
    }

    #[test]
    fn tls_hosts_must_be_names_or_addresses() {
        assert!(tls_hosts("127.0.0.1:2281,zk-1.example:2281,[::1]:2281", true).is_ok());
        assert!(tls_hosts("a..b:2281", true).is_err());
        assert!(
            tls_hosts("a..b:2281", false).is_ok(),
            "plaintext: no certificate"
        );
        assert!(tls_hosts("tcp+tls://a..b:2281", false).is_err());
    }

    #[test]
    fn files_that_cannot_be_read_are_named() {
        let err = LiveTls::new(TlsConfig::new().ca_file("/no/such/ca.pem")).expect_err("missing");
        assert!(err.to_string().contains("/no/such/ca.pem"), "{err}");
        let err = LiveTls::new(TlsConfig::new()).expect_err("no roots");
        assert!(err.to_string().contains("trusted roots"), "{err}");
        let err = LiveTls::new(TlsConfig::new().ca_pem("not pem")).expect_err("garbage");
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
}
