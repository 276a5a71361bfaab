//! TLS for the embedded server (feature `tls`): ZooKeeper's `secureClientPort`, where the
//! client protocol runs unchanged inside a TLS stream.
//!
//! [`TlsConfig`] reads the PEM once, when it is made, and checks everything it can then (the
//! certificate chain parses, the key parses and matches the leaf certificate, the client CA
//! parses), so that a bad file is reported before anything listens. The handshake itself runs
//! in the accepted connection's own task, bounded by
//! [`handshake_timeout`](TlsConfig::with_handshake_timeout): a client that fails it (no
//! certificate where one is required, one from another CA, plaintext on the TLS port) loses
//! only its own connection, and a client that never finishes it is closed when the timeout
//! passes.
//!
//! rustls runs with its aws-lc-rs provider, chosen explicitly rather than through rustls's
//! process-wide default, so that the server works whichever providers the rest of the
//! program compiles in.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use crate::error::Error;
use crate::watch::ConnId;

/// How long a TLS handshake may take unless [`TlsConfig::with_handshake_timeout`] says
/// otherwise (ZooKeeper's `zookeeper.ssl.handshakeDetectionTimeoutMillis` default).
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The certificate and key the embedded server presents on its TLS port and, optionally, the
/// CA its clients' certificates must chain to (mutual TLS).
///
/// Made from PEM, as bytes or from files; everything is checked when the value is made. Give
/// it to [`EmbeddedServerBuilder::tls_only`](crate::EmbeddedServerBuilder::tls_only) (the
/// server's one port speaks TLS) or to
/// [`EmbeddedServerBuilder::secure_client_port`](crate::EmbeddedServerBuilder::secure_client_port)
/// (TLS on a second port beside the plaintext one, as ZooKeeper's `secureClientPort`).
///
/// Without a client CA, clients are not asked for a certificate. With one
/// ([`with_client_ca_pem`](Self::with_client_ca_pem)), a certificate signed by that CA is
/// required, like ZooKeeper's `ssl.clientAuth=need`: a client without one, or with one from
/// another CA, fails the handshake and its connection is closed.
///
/// TLS 1.2 and 1.3 are offered, with rustls's default cipher suites (aws-lc-rs provider).
///
/// # Examples
///
/// ```no_run
/// # fn main() -> Result<(), zk_curator_server::Error> {
/// use zk_curator_server::TlsConfig;
///
/// let tls = TlsConfig::from_pem_files("server.pem", "server.key")?
///     .with_client_ca_pem_file("clients-ca.pem")?;
/// assert!(tls.requires_client_certificate());
/// # Ok(())
/// # }
/// ```
pub struct TlsConfig {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    client_roots: Option<Arc<RootCertStore>>,
    handshake_timeout: Duration,
    server: Arc<ServerConfig>,
}

impl Clone for TlsConfig {
    fn clone(&self) -> Self {
        TlsConfig {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
            client_roots: self.client_roots.clone(),
            handshake_timeout: self.handshake_timeout,
            server: self.server.clone(),
        }
    }
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key stays out of logs.
        f.debug_struct("TlsConfig")
            .field("chain_len", &self.chain.len())
            .field(
                "client_ca_roots",
                &self.client_roots.as_ref().map(|r| r.len()),
            )
            .field("handshake_timeout", &self.handshake_timeout)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Serves this certificate chain (PEM `CERTIFICATE` blocks, the server's own first, then
    /// any intermediates) with this private key (PEM; PKCS#8, PKCS#1 or SEC1), asking clients
    /// for no certificate.
    ///
    /// # Errors
    /// [`Error::Tls`] if the chain holds no certificate or a malformed one, if no private key
    /// is found, or if the key does not belong to the first certificate.
    pub fn from_pem(cert_chain: &[u8], key: &[u8]) -> Result<Self, Error> {
        Self::parse(cert_chain, "the certificate chain", key, "the private key")
    }

    /// Like [`from_pem`](Self::from_pem), reading the two PEM files.
    ///
    /// # Errors
    /// [`Error::Io`] if a file cannot be read, [`Error::Tls`] as for
    /// [`from_pem`](Self::from_pem); either message names the file.
    pub fn from_pem_files(
        cert_chain: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<Self, Error> {
        let (cert_chain, key) = (cert_chain.as_ref(), key.as_ref());
        let chain_pem = read(cert_chain, "TLS certificate chain")?;
        let key_pem = read(key, "TLS private key")?;
        Self::parse(
            &chain_pem,
            &format!("certificate chain file {}", cert_chain.display()),
            &key_pem,
            &format!("key file {}", key.display()),
        )
    }

    /// Requires every client to present a certificate that chains to one of these CA
    /// certificates (PEM `CERTIFICATE` blocks), and closes the connection of a client that
    /// does not (ZooKeeper's `ssl.clientAuth=need` with this trust store). Replaces a client
    /// CA given before.
    ///
    /// # Errors
    /// [`Error::Tls`] if `ca` holds no certificate or one that cannot serve as a trust anchor.
    pub fn with_client_ca_pem(self, ca: &[u8]) -> Result<Self, Error> {
        self.client_ca(ca, "the client CA")
    }

    /// Like [`with_client_ca_pem`](Self::with_client_ca_pem), reading the PEM file.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be read, [`Error::Tls`] as for
    /// [`with_client_ca_pem`](Self::with_client_ca_pem); either message names the file.
    pub fn with_client_ca_pem_file(self, ca: impl AsRef<Path>) -> Result<Self, Error> {
        let ca = ca.as_ref();
        let pem = read(ca, "TLS client CA")?;
        self.client_ca(&pem, &format!("client CA file {}", ca.display()))
    }

    /// Closes a connection whose TLS handshake has not finished this long after it was
    /// accepted. Defaults to [`DEFAULT_TLS_HANDSHAKE_TIMEOUT`] (5 s); a zero timeout is
    /// refused when the server starts.
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// Whether clients must present a certificate (a client CA was given).
    pub fn requires_client_certificate(&self) -> bool {
        self.client_roots.is_some()
    }

    /// The handshake timeout (see [`with_handshake_timeout`](Self::with_handshake_timeout)).
    pub fn handshake_timeout(&self) -> Duration {
        self.handshake_timeout
    }

    fn parse(
        chain_pem: &[u8],
        chain_what: &str,
        key_pem: &[u8],
        key_what: &str,
    ) -> Result<Self, Error> {
        let chain = certificates(chain_pem, chain_what)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|err| Error::Tls(format!("no usable private key in {key_what}: {err}")))?;
        let server = server_config(&chain, &key, None).map_err(|err| {
            Error::Tls(format!("cannot serve {chain_what} with {key_what}: {err}"))
        })?;
        Ok(TlsConfig {
            chain,
            key,
            client_roots: None,
            handshake_timeout: DEFAULT_TLS_HANDSHAKE_TIMEOUT,
            server,
        })
    }

    fn client_ca(mut self, pem: &[u8], what: &str) -> Result<Self, Error> {
        let mut roots = RootCertStore::empty();
        for cert in certificates(pem, what)? {
            roots
                .add(cert)
                .map_err(|err| Error::Tls(format!("unusable CA certificate in {what}: {err}")))?;
        }
        let roots = Arc::new(roots);
        self.server = server_config(&self.chain, &self.key, Some(roots.clone()))
            .map_err(|err| Error::Tls(format!("cannot verify clients with {what}: {err}")))?;
        self.client_roots = Some(roots);
        Ok(self)
    }

    /// What a listener needs to run handshakes.
    pub(crate) fn acceptor(&self) -> Acceptor {
        Acceptor {
            acceptor: TlsAcceptor::from(self.server.clone()),
            timeout: self.handshake_timeout,
        }
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, Error> {
    std::fs::read(path)
        .map_err(|err| Error::io(format!("cannot read {what} {}", path.display()), err))
}

/// Every certificate in `pem`, at least one.
fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| Error::Tls(format!("malformed PEM in {what}: {err}")))?;
    if chain.is_empty() {
        return Err(Error::Tls(format!("no PEM certificate in {what}")));
    }
    Ok(chain)
}

/// The rustls configuration: the aws-lc-rs provider, named here so that no process-wide
/// default is consulted; client certificates required when `client_roots` is given.
fn server_config(
    chain: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
    client_roots: Option<Arc<RootCertStore>>,
) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(rustls::DEFAULT_VERSIONS)
        .map_err(|err| err.to_string())?;
    let builder = match client_roots {
        None => builder.with_no_client_auth(),
        Some(roots) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|err| err.to_string())?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain.to_vec(), key.clone_key())
        .map_err(|err| err.to_string())?;
    Ok(Arc::new(config))
}

/// A listener's handshake settings, cheap to clone into each connection's task.
#[derive(Clone)]
pub(crate) struct Acceptor {
    acceptor: TlsAcceptor,
    timeout: Duration,
}

impl fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acceptor")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Acceptor {
    /// Runs the server side of the handshake on an accepted connection, within the timeout;
    /// `None` (after logging why) if it failed, and the connection is then to be dropped.
    pub(crate) async fn handshake(
        &self,
        id: ConnId,
        stream: TcpStream,
        peer: SocketAddr,
    ) -> Option<TlsStream<TcpStream>> {
        match tokio::time::timeout(self.timeout, self.acceptor.accept(stream)).await {
            Ok(Ok(stream)) => {
                let (_, session) = stream.get_ref();
                debug!(
                    id,
                    %peer,
                    version = ?session.protocol_version(),
                    client_certificate = session.peer_certificates().is_some(),
                    "TLS handshake done"
                );
                Some(stream)
            }
            Ok(Err(err)) => {
                info!(id, %peer, %err, "TLS handshake failed; closing connection");
                None
            }
            Err(_) => {
                info!(id, %peer, timeout = ?self.timeout, "no TLS handshake in time; closing connection");
                None
            }
        }
    }
}
