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
use std::error::Error as StdError;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
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
    /// The port closed a plaintext connection without a word, and answers
    /// a TLS handshake: it speaks only TLS. Usually ZooKeeper's
    /// `secureClientPort` written where the plaintext `clientPort` was
    /// meant, or a connect string without `tcp+tls://` and no TLS settings.
    #[error(
        "the server speaks only TLS on this port (is it the secureClientPort? connect with TLS)"
    )]
    OnlyTls,
    /// Nothing listens on the port (the connection was refused): the host
    /// is up, the server is not (or not yet: it may be restarting, so this
    /// is retried until the connection timeout).
    #[error("nothing listens on this port (connection refused)")]
    ConnectionRefused,
    /// The host's name does not resolve to an address (the resolver's
    /// words follow): a typo, a host not (or no longer) in DNS. Retrying
    /// cannot help unless the resolver itself failed for the moment
    /// ("Temporary failure in name resolution"), which is retried until
    /// the connection timeout.
    #[error("the host name does not resolve ({0})")]
    UnresolvedHost(String),
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
    /// does not speak TLS or speaks only TLS, refused credentials, a host
    /// name that does not exist.
    /// (Anything else, a host that is down or restarting included, may
    /// pass.)
    pub(crate) fn is_definitive(&self) -> bool {
        match self {
            ConnectFailure::Tls(_) | ConnectFailure::ConnectionRefused => false,
            ConnectFailure::UnresolvedHost(why) => !why.contains(TEMPORARY_LOOKUP_FAILURE),
            _ => true,
        }
    }

    /// Classifies one failed attempt on `endpoint` (`tcp://…` or
    /// `tcp+tls://…`); `None` for failures of no such kind (a reset or
    /// closed connection, a timeout: a host that is down or busy).
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

/// How the standard library starts the error of a name that did not
/// resolve (what follows is the resolver's own account).
const LOOKUP_FAILED: &str = "failed to lookup address information";

/// The resolver's account of a failure that may pass (glibc's `EAI_AGAIN`:
/// no answer from the name servers), as opposed to a name that does not
/// exist.
const TEMPORARY_LOOKUP_FAILURE: &str = "Temporary failure";

/// How the last attempt on each host of one session build failed: whether
/// every host has refused for a reason retrying cannot change.
#[derive(Debug)]
pub(crate) struct Refusals {
    /// The number of hosts the client tries.
    hosts: usize,
    /// Per endpoint, whether its last attempt was refused definitively.
    last: Mutex<HashMap<String, bool>>,
    /// Plaintext endpoints probed for TLS (see [`speaks_tls`]), and whether
    /// each answered it.
    probed: Mutex<HashMap<String, bool>>,
}

impl Refusals {
    pub(crate) fn new(hosts: usize) -> Refusals {
        Refusals {
            hosts: hosts.max(1),
            last: Mutex::new(HashMap::new()),
            probed: Mutex::new(HashMap::new()),
        }
    }

    /// For a plaintext attempt on `endpoint` that the server closed without
    /// a word: `Some(true)` if the port was found to speak only TLS,
    /// `Some(false)` if it was probed and does not (or the probe is under
    /// way), `None` if it is the first such attempt (the caller probes it
    /// now; every later attempt gets `Some`).
    pub(crate) fn probe_once(&self, endpoint: &str) -> Option<bool> {
        let mut probed = self.probed.lock().unwrap_or_else(|e| e.into_inner());
        match probed.get(endpoint) {
            Some(found) => Some(*found),
            None => {
                probed.insert(endpoint.to_owned(), false);
                None
            }
        }
    }

    /// Records that the probe found `endpoint` speaking only TLS.
    pub(crate) fn found_only_tls(&self, endpoint: &str) {
        let mut probed = self.probed.lock().unwrap_or_else(|e| e.into_inner());
        probed.insert(endpoint.to_owned(), true);
    }

    /// Notes how the last attempt on `endpoint` failed; returns whether
    /// every host's last attempt has now been refused definitively.
    pub(crate) fn note(&self, endpoint: &str, definitive: bool) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.insert(endpoint.to_owned(), definitive);
        last.len() >= self.hosts && last.values().all(|definitive| *definitive)
    }
}

/// How long the probe of [`speaks_tls`] may take.
const PROBE_LIMIT: Duration = Duration::from_secs(1);

/// A TLS 1.2 ClientHello (no SNI, common ECDHE suites, groups and
/// signature schemes): any TLS server answers it with a record of its own,
/// a ServerHello or an alert, while a ZooKeeper server reading plaintext
/// takes its first bytes for an impossible length and closes.
const CLIENT_HELLO: [u8; 99] = [
    // Record: handshake, TLS 1.0 on the record layer (as clients send), 94 bytes.
    0x16, 0x03, 0x01, 0x00, 0x5e, //
    // Handshake: ClientHello, 90 bytes; version TLS 1.2.
    0x01, 0x00, 0x00, 0x5a, 0x03, 0x03, //
    // Random (32 bytes; nothing is secret in a probe).
    0x7a, 0x6b, 0x2d, 0x63, 0x75, 0x72, 0x61, 0x74, 0x6f, 0x72, 0x2d, 0x74, 0x6c, 0x73, 0x2d, 0x70,
    0x72, 0x6f, 0x62, 0x65, 0x2d, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39,
    0x30, //
    // No session id; five cipher suites (ECDHE with AES-GCM, RSA AES-GCM).
    0x00, 0x00, 0x0a, 0xc0, 0x2f, 0xc0, 0x2b, 0xc0, 0x30, 0xc0, 0x2c, 0x00, 0x9c, //
    // No compression.
    0x01, 0x00, //
    // Extensions, 39 bytes: supported groups (x25519, P-256), point
    // formats, signature algorithms, extended master secret, secure
    // renegotiation.
    0x00, 0x27, //
    0x00, 0x0a, 0x00, 0x06, 0x00, 0x04, 0x00, 0x1d, 0x00, 0x17, //
    0x00, 0x0b, 0x00, 0x02, 0x01, 0x00, //
    0x00, 0x0d, 0x00, 0x0a, 0x00, 0x08, 0x04, 0x03, 0x08, 0x04, 0x04, 0x01, 0x05, 0x01, //
    0x00, 0x17, 0x00, 0x00, //
    0xff, 0x01, 0x00, 0x01, 0x00,
];

/// Whether the plaintext `endpoint` (`tcp://host:port`) answers a TLS
/// ClientHello with a TLS record (a handshake message or an alert) within
/// [`PROBE_LIMIT`]: then it speaks TLS only, as a `secureClientPort` does.
/// One short connection, made the way the client's own are made
/// ([`zk::dial`]: a simulation's network when the thread has a dialer);
/// nothing of ZooKeeper's is sent.
pub(crate) async fn speaks_tls(endpoint: &str) -> bool {
    let Some((host, port)) = endpoint.strip_prefix("tcp://").and_then(host_and_port) else {
        return false;
    };
    let probe = async {
        let mut stream = zk::dial(host, port).await?;
        stream.write_all(&CLIENT_HELLO).await?;
        let mut header = [0u8; 3];
        stream.read_exact(&mut header).await?;
        io::Result::Ok(is_tls_record(header))
    };
    matches!(tokio::time::timeout(PROBE_LIMIT, probe).await, Ok(Ok(true)))
}

/// The host (without an IPv6 address's brackets) and the port of
/// `host:port`.
fn host_and_port(address: &str) -> Option<(&str, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some((host, port.parse().ok()?))
}

/// Whether a record starts so: an alert or a handshake message, in a TLS
/// version (SSL 3.0 to TLS 1.3 all write 3 as the major version).
fn is_tls_record(header: [u8; 3]) -> bool {
    matches!(header, [0x15 | 0x16, 0x03, 0x00..=0x04])
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
        if io.kind() == io::ErrorKind::ConnectionRefused {
            return Some(ConnectFailure::ConnectionRefused);
        }
        // No kind of its own (std gives "uncategorized"): known by its text.
        let text = io.to_string();
        if let Some(why) = text.strip_prefix(LOOKUP_FAILED) {
            let why = why.trim_start_matches([':', ' ']);
            return Some(ConnectFailure::UnresolvedHost(why.to_owned()));
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
        assert!(ConnectFailure::OnlyTls.is_definitive());
        assert!(
            !ConnectFailure::ConnectionRefused.is_definitive(),
            "a server may be restarting"
        );
    }

    #[test]
    fn a_refused_connection_is_named() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        // (The client hands it over wrapped, which `classify` unwraps
        // link by link; the end-to-end tests see it so.)
        assert_eq!(
            from_error(&refused, false),
            Some(ConnectFailure::ConnectionRefused)
        );
    }

    /// A name that does not resolve is named so, and is definitive unless
    /// the resolver itself failed for the moment.
    #[test]
    fn an_unresolved_host_is_named() {
        let missing = io::Error::other(format!("{LOOKUP_FAILED}: Name or service not known"));
        let found = from_error(&missing, false);
        assert_eq!(
            found,
            Some(ConnectFailure::UnresolvedHost(
                "Name or service not known".into()
            ))
        );
        assert!(found.is_some_and(|f| f.is_definitive()));
        let busy = io::Error::other(format!(
            "{LOOKUP_FAILED}: Temporary failure in name resolution"
        ));
        let found = from_error(&busy, true);
        assert!(matches!(found, Some(ConnectFailure::UnresolvedHost(_))));
        assert!(!found.is_some_and(|f| f.is_definitive()));
    }

    /// The real resolver's error for a name under `.invalid` (a domain
    /// that never exists) is classified so, end to end.
    #[tokio::test]
    async fn a_real_lookup_failure_is_classified() {
        let Err(err) = tokio::net::TcpStream::connect(("no-such-host.invalid", 2181)).await else {
            panic!("a name under .invalid resolved");
        };
        assert!(
            matches!(
                from_error(&err, false),
                Some(ConnectFailure::UnresolvedHost(_))
            ),
            "{err}"
        );
    }

    /// The probe's hello is one well-formed record holding one well-formed
    /// ClientHello: every length field agrees with what follows it.
    #[test]
    fn the_probe_hello_is_well_formed() {
        let len16 =
            |at: usize| usize::from(CLIENT_HELLO[at]) << 8 | usize::from(CLIENT_HELLO[at + 1]);
        assert_eq!(&CLIENT_HELLO[..3], &[0x16, 0x03, 0x01]);
        assert_eq!(len16(3), CLIENT_HELLO.len() - 5, "record length");
        assert_eq!(CLIENT_HELLO[5], 0x01, "ClientHello");
        assert_eq!(CLIENT_HELLO[6], 0);
        assert_eq!(len16(7), CLIENT_HELLO.len() - 9, "handshake length");
        let suites = 9 + 2 + 32 + 1;
        assert_eq!(CLIENT_HELLO[suites - 1], 0, "no session id");
        let compression = suites + 2 + len16(suites);
        assert_eq!(&CLIENT_HELLO[compression..compression + 2], &[0x01, 0x00]);
        let extensions = compression + 2;
        assert_eq!(len16(extensions), CLIENT_HELLO.len() - extensions - 2);
        let mut at = extensions + 2;
        while at < CLIENT_HELLO.len() {
            at += 4 + len16(at + 2);
        }
        assert_eq!(at, CLIENT_HELLO.len(), "the extensions fill the hello");
    }

    #[test]
    fn tls_records_are_told_from_plaintext() {
        assert!(is_tls_record([0x16, 0x03, 0x03]));
        assert!(is_tls_record([0x15, 0x03, 0x01]));
        assert!(!is_tls_record([0x00, 0x00, 0x00]), "a ZooKeeper length");
        assert!(!is_tls_record([0x17, 0x03, 0x03]), "application data");
    }

    #[test]
    fn each_plaintext_endpoint_is_probed_once() {
        let refusals = Refusals::new(1);
        assert_eq!(refusals.probe_once("tcp://a:1"), None);
        assert_eq!(refusals.probe_once("tcp://a:1"), Some(false));
        refusals.found_only_tls("tcp://a:1");
        assert_eq!(refusals.probe_once("tcp://a:1"), Some(true));
        assert_eq!(refusals.probe_once("tcp://b:1"), None);
    }

    #[test]
    fn an_endpoints_host_and_port() {
        assert_eq!(host_and_port("zk-1:2181"), Some(("zk-1", 2181)));
        assert_eq!(host_and_port("[::1]:2281"), Some(("::1", 2281)));
        assert_eq!(host_and_port("zk-1"), None);
        assert_eq!(host_and_port("zk-1:port"), None);
    }

    /// Hands out one end of an in-memory pipe whose other end answers a
    /// hello with a TLS alert, and names what it was asked to dial.
    #[derive(Clone, Default)]
    struct AnswersTls(Arc<Mutex<Vec<(String, u16)>>>);

    impl zk::Dialer for AnswersTls {
        fn dial(
            &self,
            host: &str,
            port: u16,
        ) -> futures::future::BoxFuture<'static, io::Result<Box<dyn zk::DialedStream>>> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((host.to_owned(), port));
            Box::pin(async {
                let (ours, mut theirs) = tokio::io::duplex(1024);
                tokio::spawn(async move {
                    let mut hello = [0u8; 5];
                    if theirs.read_exact(&mut hello).await.is_ok() {
                        let _ = theirs
                            .write_all(&[0x15, 0x03, 0x03, 0x00, 0x02, 2, 40])
                            .await;
                    }
                });
                Ok(Box::new(ours) as Box<dyn zk::DialedStream>)
            })
        }
    }

    /// The probe goes the way the client's connections go: through the
    /// thread's dialer when it has one (a simulation's network), not to a
    /// host name resolved on a real thread.
    #[tokio::test]
    async fn the_probe_dials_through_the_threads_dialer() {
        let dialer = AnswersTls::default();
        let before = zk::set_thread_dialer(Some(Arc::new(dialer.clone())));
        let only_tls = speaks_tls("tcp://simulated-host:2181").await;
        zk::set_thread_dialer(before);
        assert!(only_tls, "the dialer's end answered as TLS");
        assert_eq!(
            *dialer.0.lock().unwrap_or_else(|e| e.into_inner()),
            [("simulated-host".to_owned(), 2181)]
        );
    }

    #[test]
    fn refused_credentials_are_told_at_once() {
        let failure = ConnectFailure::classify("tcp://a:1", &zk::Error::AuthFailed);
        assert!(matches!(failure, Some(ConnectFailure::Authentication(_))));
        assert!(failure.is_some_and(|f| f.is_immediate()));
    }
}
