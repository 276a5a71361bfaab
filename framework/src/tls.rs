//! [`TlsConfig`]: how the framework reaches an ensemble over TLS
//! (ZooKeeper's `secureClientPort`), mutual TLS included.
//!
//! Certificates and keys are PEM, from files or from memory. Files are read
//! when the framework is built (so a missing or malformed file, or a client
//! certificate the handshake could not use, such as an X.509 v1 one or one
//! whose key does not match, is refused before anything is sent), again every time it builds a session, and every
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
/// use zk_curator::framework::TlsConfig;
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
            check_identity(&cert_pem, &key_pem, cert, key)?;
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

/// Refuses, naming the file, a client certificate and key that the TLS
/// handshake could not use. The client builds its TLS configuration from
/// them only when it connects, and a refusal there would be retried until
/// the connection timeout, with no word about the certificate; so the same
/// configuration is built here once, and an X.509 v1 certificate (what
/// `openssl x509 -req` makes without `-extfile`), which rustls cannot use,
/// is named as such with the way to make a v3 one.
fn check_identity(cert_pem: &str, key_pem: &str, cert: &Pem, key: &Pem) -> Result<()> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|err| {
            Error::InvalidArgument(format!(
                "the client certificate ({cert:?}) is not PEM: {err}"
            ))
        })?;
    let Some(leaf) = chain.first() else {
        return Err(Error::InvalidArgument(format!(
            "the client certificate ({cert:?}) holds no certificate"
        )));
    };
    match x509_version(leaf) {
        None => {
            return Err(Error::InvalidArgument(format!(
                "the client certificate ({cert:?}) is not an X.509 certificate (its DER does not parse)"
            )))
        }
        Some(1) => {
            return Err(Error::InvalidArgument(format!(
                "the client certificate ({cert:?}) is X.509 v1, which TLS here cannot use: sign it \
                 again as v3, e.g. `openssl x509 -req ... -extfile ext.cnf` with ext.cnf holding \
                 `basicConstraints=CA:FALSE` and `extendedKeyUsage=clientAuth`"
            )))
        }
        Some(_) => {}
    }
    let key_der = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|err| {
        Error::InvalidArgument(format!(
            "the client key ({key:?}) is not a PEM private key: {err}"
        ))
    })?;
    rustls::ClientConfig::builder()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_client_auth_cert(chain, key_der)
        .map(drop)
        .map_err(|err| {
            Error::InvalidArgument(format!(
                "the client certificate ({cert:?}) and key ({key:?}) cannot be used together: {err}"
            ))
        })
}

/// The X.509 version of the DER certificate `der` (1 when its TBS
/// certificate has no explicit version), or `None` when it is not the DER
/// of a certificate.
fn x509_version(der: &[u8]) -> Option<u8> {
    // Certificate ::= SEQUENCE { tbsCertificate SEQUENCE {
    //     version [0] EXPLICIT INTEGER DEFAULT v1, serialNumber ... } ... }
    let certificate = der_contents(der, 0x30)?;
    let tbs = der_contents(certificate, 0x30)?;
    if tbs.first() != Some(&0xA0) {
        return Some(1);
    }
    let version = der_contents(der_contents(tbs, 0xA0)?, 0x02)?;
    version.last()?.checked_add(1)
}

/// The contents of the DER element at the start of `data`, if its tag is
/// `tag` and its length fits.
fn der_contents(data: &[u8], tag: u8) -> Option<&[u8]> {
    let (&first, rest) = data.split_first()?;
    if first != tag {
        return None;
    }
    let (&length, rest) = rest.split_first()?;
    let (length, rest) = if length < 0x80 {
        (usize::from(length), rest)
    } else {
        let bytes = usize::from(length & 0x7f);
        if bytes == 0 || bytes > 4 || rest.len() < bytes {
            return None;
        }
        let (length, rest) = rest.split_at(bytes);
        let length = length
            .iter()
            .fold(0usize, |total, byte| (total << 8) | usize::from(*byte));
        (length, rest)
    };
    rest.get(..length)
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

    /// The test certificates of `tests/data` (see its README).
    fn data(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name)
    }

    fn with_identity(cert: &str, key: &str) -> Result<LiveTls> {
        let config = TlsConfig::new()
            .ca_file(data("ca.pem"))
            .client_cert_files(data(cert), data(key));
        LiveTls::new(config)
    }

    /// A client certificate and key are checked when read, as the handshake
    /// would use them: a v3 certificate with its key is taken; a v1
    /// certificate, a certificate that is not DER, and a key of another
    /// certificate are refused at once, naming the file.
    #[test]
    fn client_certificates_are_checked_when_read() {
        with_identity("client-v3.pem", "client.key").expect("a v3 certificate and its key");
        let err = with_identity("client-v1.pem", "client.key").expect_err("v1");
        let text = err.to_string();
        assert!(
            text.contains("client-v1.pem") && text.contains("X.509 v1"),
            "{text}"
        );
        assert!(
            text.contains("-extfile"),
            "says how to make a v3 one: {text}"
        );
        let err = with_identity("client-v3.pem", "other.key").expect_err("another key");
        let text = err.to_string();
        assert!(
            text.contains("other.key") && text.contains("client-v3.pem"),
            "{text}"
        );

        let dir = std::env::temp_dir().join(format!("zk-curator-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|err| panic!("{err}"));
        let garbage = dir.join("garbage.pem");
        let body = "Z2FyYmFnZSwgbm90IGEgY2VydGlmaWNhdGUgYXQgYWxs";
        std::fs::write(
            &garbage,
            format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n"),
        )
        .unwrap_or_else(|err| panic!("{err}"));
        let config = TlsConfig::new()
            .ca_file(data("ca.pem"))
            .client_cert_files(&garbage, data("client.key"));
        let err = LiveTls::new(config).expect_err("garbage");
        let text = err.to_string();
        assert!(
            text.contains("garbage.pem") && text.contains("does not parse"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn x509_versions_are_read_from_the_der() {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::CertificateDer;
        let version = |name: &str| {
            let der =
                CertificateDer::from_pem_file(data(name)).unwrap_or_else(|err| panic!("{err}"));
            x509_version(&der)
        };
        assert_eq!(version("client-v1.pem"), Some(1));
        assert_eq!(version("client-v3.pem"), Some(3));
        assert_eq!(version("ca.pem"), Some(3));
        assert_eq!(x509_version(b"garbage"), None);
        assert_eq!(x509_version(&[0x30, 0x82, 0xff]), None);
    }
}
