//! TLS for a real ZooKeeper: the settings of its `secureClientPort` ([`ServerTls`]), and,
//! with the `tls` feature, certificates made when a test runs, for TLS and mutual TLS.
//!
//! With the `tls` feature, [`TestCertificates::generate`] makes a small PKI in a private temporary directory:
//!
//! * a trusted certificate authority ([`ca`](TestCertificates::ca));
//! * a server certificate signed by it, valid for `127.0.0.1` and `localhost`
//!   ([`server`](TestCertificates::server));
//! * a client certificate signed by it ([`client`](TestCertificates::client));
//! * a second, untrusted authority with its own server and client certificates
//!   ([`untrusted_ca`](TestCertificates::untrusted_ca),
//!   [`untrusted_server`](TestCertificates::untrusted_server),
//!   [`untrusted_client`](TestCertificates::untrusted_client));
//! * a server and a client certificate signed by the trusted authority that expired in 2020
//!   ([`expired_server`](TestCertificates::expired_server),
//!   [`expired_client`](TestCertificates::expired_client)).
//!
//! Each one is a [`TestIdentity`]: the certificate and its private key as PEM text and as
//! files, plus a *bundle* file holding the key followed by the certificate, which is the
//! form ZooKeeper's `PEM` key store reads. A test can hand a client the PEM text or the
//! paths, and can overwrite a file with another identity
//! ([`TestIdentity::write_over`]) to test that a client or a server reloads it.
//! [`TestCertificates::issue_client`] and [`issue_server`](TestCertificates::issue_server)
//! sign further certificates with the trusted authority.
//!
//! [`TestCertificates::server_tls`] turns the set into the [`ServerTls`] settings of a
//! [`ZooKeeperServer`](crate::ZooKeeperServer): the server's bundle as key store, the trusted
//! authority as trust store.
//!
//! Keys are ECDSA P-256, signed through aws-lc-rs. Nothing is cached: every call to
//! `generate` makes new keys (a few milliseconds), and the directory is deleted when the
//! [`TestCertificates`] is dropped.

use std::path::{Path, PathBuf};

#[cfg(feature = "tls")]
mod certificates;
#[cfg(feature = "tls")]
pub use certificates::{TestCertificates, TestIdentity};

/// Whether ZooKeeper asks TLS clients for a certificate (`ssl.clientAuth`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ClientAuth {
    /// Clients are not asked for a certificate (`none`).
    None,
    /// Clients are asked for a certificate but may connect without one (`want`); a
    /// certificate that is presented must be trusted.
    Want,
    /// Clients must present a trusted certificate (`need`, ZooKeeper's default).
    #[default]
    Need,
}

impl ClientAuth {
    /// The value of ZooKeeper's `ssl.clientAuth` property.
    pub fn as_property(self) -> &'static str {
        match self {
            ClientAuth::None => "none",
            ClientAuth::Want => "want",
            ClientAuth::Need => "need",
        }
    }
}

/// TLS settings of a [`ZooKeeperServer`](crate::ZooKeeperServer), given to
/// [`ZooKeeperServerBuilder::tls`](crate::ZooKeeperServerBuilder::tls).
///
/// The server then listens on a second free port, its `secureClientPort`, through Netty.
/// By default that is the only port it serves (TLS only) and clients must present a
/// certificate ([`ClientAuth::Need`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTls {
    key_store: PathBuf,
    trust_store: PathBuf,
    client_auth: ClientAuth,
    plaintext: bool,
}

impl ServerTls {
    /// Settings with the given PEM files: `key_store` holds the server's private key and its
    /// certificate chain (a [`TestIdentity::bundle_path`]), `trust_store` the certificates of
    /// the authorities whose clients are accepted (a [`TestIdentity::cert_path`] of a CA).
    pub fn new(key_store: impl Into<PathBuf>, trust_store: impl Into<PathBuf>) -> Self {
        ServerTls {
            key_store: key_store.into(),
            trust_store: trust_store.into(),
            client_auth: ClientAuth::Need,
            plaintext: false,
        }
    }

    /// Sets whether clients must, may or need not present a certificate. Defaults to
    /// [`ClientAuth::Need`].
    pub fn client_auth(mut self, client_auth: ClientAuth) -> Self {
        self.client_auth = client_auth;
        self
    }

    /// Sets whether the plaintext client port is served too. Defaults to `false`: TLS only,
    /// nothing listens on [`ZooKeeperServer::port`](crate::ZooKeeperServer::port).
    pub fn plaintext_port(mut self, serve: bool) -> Self {
        self.plaintext = serve;
        self
    }

    /// The PEM file with the server's key and certificate chain.
    pub fn key_store(&self) -> &Path {
        &self.key_store
    }

    /// The PEM file with the trusted authorities.
    pub fn trust_store(&self) -> &Path {
        &self.trust_store
    }

    /// Whether clients must present a certificate.
    pub fn client_auth_mode(&self) -> ClientAuth {
        self.client_auth
    }

    /// Whether the plaintext port is served beside the TLS one.
    pub fn serves_plaintext(&self) -> bool {
        self.plaintext
    }

    /// The `zoo.cfg` lines (ZooKeeper turns unknown keys into `zookeeper.*` system
    /// properties, which is where its TLS settings are read from).
    pub(crate) fn config_lines(&self) -> String {
        format!(
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
             ssl.keyStore.location={key}\n\
             ssl.keyStore.type=PEM\n\
             ssl.trustStore.location={trust}\n\
             ssl.trustStore.type=PEM\n\
             ssl.clientAuth={auth}\n\
             authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider\n",
            key = self.key_store.display(),
            trust = self.trust_store.display(),
            auth = self.client_auth.as_property(),
        )
    }
}
