//! [`ConnectFailure`]: why the framework could not build a session on a
//! host, when the reason is one a person must act on (a certificate, a
//! credential, the wrong port) rather than a host that is simply down.
//!
//! The client retries every host until the connection timeout and, by
//! itself, would end with a bare "timed out". The framework listens to each
//! failed attempt (the client's connect-failure observer), keeps the last
//! one of these kinds, and hands it to whoever was waiting for a session:
//! [`Error::Connect`](crate::Error::Connect) at the connection timeout, or
//! at once for a refused authentication, and at once too when every host of
//! the ensemble has refused for a reason retrying cannot change (see
//! [`ConnectFailure::is_definitive`] and [`Refusals`]).

use std::collections::HashMap;
use std::sync::Mutex;

use std::error::Error as StdError;
use std::io;
use std::sync::Arc;

use zookeeper_client as zk;

/// Why a host could not be used, for the failures a person must act on.
#[non_exhaustive]
#[derive(thiserror::Error, Clone, Debug, PartialEq, Eq)]
pub enum ConnectFailure {
    /// The server's certificate is not signed by a trusted CA, or does not
    /// name the host (or `TlsConfig::server_name`).
    #[error("the server's certificate is not trusted ({0})")]
    UntrustedServerCertificate(String),
    /// The server's certificate is outside its validity period.
    #[error("the server's certificate has expired or is not valid yet")]
    ExpiredServerCertificate,
    /// The server refused the TLS session because of our certificate:
    /// none was presented where `ssl.clientAuth=need` asks for one, or it is
    /// not signed by a CA the server trusts, or it has expired.
    #[error("the server refused our client certificate ({0})")]
    ClientCertificateRefused(String),
    /// The port did not answer the TLS handshake as a TLS server would: it
    /// closed the connection or answered in plaintext. Usually a plaintext
    /// `clientPort` written where the `secureClientPort` was meant.
    #[error("the server does not speak TLS on this port (is it the plaintext clientPort?)")]
    NotTls,
    /// Any other TLS failure.
    #[error("TLS failed: {0}")]
    Tls(String),
    /// The server refused our credentials (a wrong SASL password, a missing
    /// or expired Kerberos ticket, a session the server requires SASL for).
    #[error("authentication failed ({0})")]
    Authentication(String),
}

impl ConnectFailure {
    /// Whether waiting longer cannot help: the framework keeps trying in
    /// the background (credentials may be fixed), but callers waiting for a
    /// session are told at once.
    pub(crate) fn is_immediate(&self) -> bool {
        matches!(self, ConnectFailure::Authentication(_))
    }

    /// Whether trying the same host again cannot change the answer: our
    /// certificate refused, the server's untrusted or expired, a port that
    /// does not speak TLS, refused credentials. (Anything else, a host that
    /// is down or restarting included, may pass.)
    pub(crate) fn is_definitive(&self) -> bool {
        !matches!(self, ConnectFailure::Tls(_))
    }

    /// Classifies one failed attempt on `endpoint` (`tcp://…` or
    /// `tcp+tls://…`); `None` for failures of no such kind (a refused or
    /// reset connection, a timeout: a host that is down).
    pub(crate) fn classify(endpoint: &str, err: &zk::Error) -> Option<ConnectFailure> {
        if matches!(err, zk::Error::AuthFailed) {
            return Some(ConnectFailure::Authentication(
                "the server refused the session's credentials".into(),
            ));
        }
        let tls = endpoint.starts_with("tcp+tls://");
        let mut source: Option<&(dyn StdError + 'static)> = Some(err);
        while let Some(current) = source {
            if let Some(found) = from_error(current, tls) {
                return Some(found);
            }
            source = current.source();
        }
        let text = err.to_string();
        if text.to_ascii_lowercase().contains("sasl") {
            return Some(ConnectFailure::Authentication(text));
        }
        None
    }
}

/// How the last attempt on each host of one session build failed: whether
/// every host has refused for a reason retrying cannot change.
#[derive(Debug)]
pub(crate) struct Refusals {
    /// The number of hosts the client tries.
    hosts: usize,
    /// Per endpoint, whether its last attempt was refused definitively.
    last: Mutex<HashMap<String, bool>>,
}

impl Refusals {
    pub(crate) fn new(hosts: usize) -> Refusals {
        Refusals {
            hosts: hosts.max(1),
            last: Mutex::new(HashMap::new()),
        }
    }

    /// Notes how the last attempt on `endpoint` failed; returns whether
    /// every host's last attempt has now been refused definitively.
    pub(crate) fn note(&self, endpoint: &str, definitive: bool) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.insert(endpoint.to_owned(), definitive);
        last.len() >= self.hosts && last.values().all(|definitive| *definitive)
    }
}

/// One link of an error's chain.
fn from_error(err: &(dyn StdError + 'static), tls: bool) -> Option<ConnectFailure> {
    // The client keeps the cause of a custom error in an `Arc`, which the
    // chain shows as itself rather than as what it holds.
    if let Some(shared) = err.downcast_ref::<Arc<dyn StdError + Send + Sync>>() {
        return from_error(&**shared, tls);
    }
    #[cfg(feature = "tls")]
    if let Some(err) = err.downcast_ref::<rustls::Error>() {
        return Some(from_rustls(err));
    }
    if let Some(io) = err.downcast_ref::<io::Error>() {
        #[cfg(feature = "tls")]
        if let Some(inner) = io.get_ref() {
            if let Some(err) = inner.downcast_ref::<rustls::Error>() {
                return Some(from_rustls(err));
            }
        }
        // The TLS client saw the connection end before the handshake did.
        if tls && io.kind() == io::ErrorKind::UnexpectedEof {
            return Some(ConnectFailure::NotTls);
        }
    }
    None
}

#[cfg(feature = "tls")]
fn from_rustls(err: &rustls::Error) -> ConnectFailure {
    use rustls::{AlertDescription as Alert, CertificateError, Error as TlsError};
    match err {
        TlsError::InvalidCertificate(
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. },
        ) => ConnectFailure::ExpiredServerCertificate,
        TlsError::InvalidCertificate(why) => {
            ConnectFailure::UntrustedServerCertificate(format!("{why:?}"))
        }
        TlsError::AlertReceived(
            alert @ (Alert::CertificateRequired
            | Alert::BadCertificate
            | Alert::UnknownCA
            | Alert::CertificateUnknown
            | Alert::CertificateExpired
            | Alert::CertificateRevoked
            | Alert::UnsupportedCertificate
            | Alert::AccessDenied),
        ) => ConnectFailure::ClientCertificateRefused(format!("{alert:?}")),
        TlsError::InvalidMessage(_) | TlsError::InappropriateMessage { .. } => {
            ConnectFailure::NotTls
        }
        other => ConnectFailure::Tls(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_that_is_down_is_no_such_failure() {
        assert_eq!(
            ConnectFailure::classify("tcp://a:1", &zk::Error::ConnectionLoss),
            None
        );
    }

    /// Refused everywhere only once every host's last attempt was refused
    /// definitively; a host that may yet answer (down, restarting) undoes it.
    #[test]
    fn refusals_count_every_host() {
        let refusals = Refusals::new(2);
        assert!(!refusals.note("tcp+tls://a:1", true), "one host of two");
        assert!(refusals.note("tcp+tls://b:1", true), "both");
        assert!(!refusals.note("tcp+tls://a:1", false), "a may yet answer");
        assert!(refusals.note("tcp+tls://a:1", true), "both again");
        assert!(ConnectFailure::NotTls.is_definitive());
        assert!(ConnectFailure::ClientCertificateRefused(String::new()).is_definitive());
        assert!(!ConnectFailure::Tls(String::new()).is_definitive());
    }

    #[test]
    fn refused_credentials_are_told_at_once() {
        let failure = ConnectFailure::classify("tcp://a:1", &zk::Error::AuthFailed);
        assert!(matches!(failure, Some(ConnectFailure::Authentication(_))));
        assert!(failure.is_some_and(|f| f.is_immediate()));
    }
}
