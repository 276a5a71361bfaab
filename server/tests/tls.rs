//! TLS on the embedded server (feature `tls`), driven by the real `zookeeper-client` over
//! rustls: operations and watches over TLS, TLS beside plaintext, mutual TLS (a client of the
//! client CA served; clients without a certificate, or with one from another CA, refused), a
//! client that does not trust the server refused, plaintext and silence on the TLS port closed,
//! and each time the server still serving others. Certificates are made here with rcgen.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{bounded, connect, connect_request, frame, persistent, retrying, STEP};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zk_curator_server::{EmbeddedServer, Error, RequestMatcher, TlsConfig};
use zookeeper_client::{self as zk, EventType};

// ---- certificates ----

/// A test certificate authority.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, in PEM.
struct Identity {
    cert: String,
    key: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `localhost` and 127.0.0.1.
    fn server(&self) -> Identity {
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate.
    fn client(&self, name: &str) -> Identity {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Identity {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Identity {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

/// The server's TLS configuration: its certificate from `ca`.
fn server_tls(ca: &Ca) -> TlsConfig {
    let id = ca.server();
    TlsConfig::from_pem(id.cert.as_bytes(), id.key.as_bytes()).unwrap()
}

// ---- clients ----

/// Connects over TLS to `address`, trusting `trusted` and presenting `identity`, with short
/// timeouts and no retry across hosts, so that a refused handshake fails quickly.
async fn tls_client(
    address: SocketAddr,
    trusted: &Ca,
    identity: Option<&Identity>,
) -> Result<zk::Client, zk::Error> {
    let mut options = zk::TlsOptions::new().with_pem_ca(&trusted.pem()).unwrap();
    if let Some(id) = identity {
        options = options.with_pem_identity(&id.cert, &id.key).unwrap();
    }
    bounded(
        zk::Client::connector()
            .with_tls(options)
            .with_session_timeout(Duration::from_secs(4))
            .with_connection_timeout(Duration::from_millis(1500))
            .with_fail_eagerly()
            .secure_connect(&address.to_string()),
    )
    .await
}

/// A raw TLS connection to `address` (no ZooKeeper client), trusting `ca`.
async fn raw_tls(address: SocketAddr, ca: &Ca) -> tokio_rustls::client::TlsStream<TcpStream> {
    use tokio_rustls::rustls;
    let mut roots = rustls::RootCertStore::empty();
    let ca_der = rustls::pki_types::CertificateDer::from(ca.issuer.der().to_vec());
    roots.add(ca_der).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = bounded(TcpStream::connect(address)).await.unwrap();
    let name = rustls::pki_types::ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
    bounded(connector.connect(name, tcp)).await.unwrap()
}

/// Sends a four-letter word over TLS and returns the answer (the server closes after it).
async fn four_letter_word_over_tls(address: SocketAddr, ca: &Ca, word: &[u8; 4]) -> String {
    let mut tls = raw_tls(address, ca).await;
    bounded(tls.write_all(word)).await.unwrap();
    bounded(tls.flush()).await.unwrap();
    let mut answer = Vec::new();
    bounded(tls.read_to_end(&mut answer)).await.unwrap();
    String::from_utf8(answer).unwrap()
}

/// A `getData` request without a watch.
fn get_data_request(xid: i32, path: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&xid.to_be_bytes());
    body.extend_from_slice(&4i32.to_be_bytes()); // getData
    body.extend_from_slice(&(path.len() as i32).to_be_bytes());
    body.extend_from_slice(path.as_bytes());
    body.push(0);
    frame(&body)
}

/// Reads one frame's body.
async fn read_frame<R: AsyncReadExt + Unpin>(stream: &mut R) -> Vec<u8> {
    let mut len = [0u8; 4];
    bounded(stream.read_exact(&mut len)).await.unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    bounded(stream.read_exact(&mut body)).await.unwrap();
    body
}

/// Reads until the server closes the connection (EOF or a reset), failing the test if it
/// is still open after `within`; returns what was read.
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Vec<u8> {
    let mut read = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Err(_) => panic!("connection still open after {within:?}; read {read:?}"),
            Ok(Ok(0) | Err(_)) => return read,
            Ok(Ok(n)) => read.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Creates, reads and deletes a node through `client`: the server serves it.
async fn round_trip(client: &zk::Client, path: &str) {
    bounded(client.create(path, b"payload", &persistent()))
        .await
        .unwrap();
    let (data, _) = bounded(client.get_data(path)).await.unwrap();
    assert_eq!(data, b"payload");
    bounded(client.delete(path, None)).await.unwrap();
    assert!(bounded(client.check_stat(path)).await.unwrap().is_none());
}

// ---- tests ----

#[tokio::test(flavor = "multi_thread")]
async fn operations_and_watches_over_tls() {
    let ca = Ca::new("server CA");
    let server = EmbeddedServer::builder()
        .tls_only(server_tls(&ca))
        .start()
        .await
        .unwrap();
    assert_eq!(server.secure_address(), Some(server.address()));
    assert_eq!(
        server.tls_connect_string(),
        Some(format!("tcp+tls://127.0.0.1:{}", server.port()))
    );
    let client = tls_client(server.address(), &ca, None).await.unwrap();
    round_trip(&client, "/over-tls").await;

    // A watch set by one TLS client fires on another's write.
    bounded(client.create("/watched", b"0", &persistent()))
        .await
        .unwrap();
    let (data, _, watch) = bounded(client.get_and_watch_data("/watched"))
        .await
        .unwrap();
    assert_eq!(data, b"0");
    // The `tcp+tls://` notation, through `connect`, reaches the same server.
    let other = bounded(
        zk::Client::connector()
            .with_tls(zk::TlsOptions::new().with_pem_ca(&ca.pem()).unwrap())
            .connect(&server.tls_connect_string().unwrap()),
    )
    .await
    .unwrap();
    bounded(other.set_data("/watched", b"1", None))
        .await
        .unwrap();
    let event = bounded(watch.changed()).await;
    assert_eq!(event.event_type, EventType::NodeDataChanged);
    assert_eq!(event.path, "/watched");
    assert_eq!(server.session_ids().len(), 2);

    // A plaintext client gets no session from the TLS port.
    let plain = bounded(
        zk::Client::connector()
            .with_session_timeout(Duration::from_secs(2))
            .with_connection_timeout(Duration::from_millis(500))
            .with_fail_eagerly()
            .connect(&server.connect_string()),
    )
    .await;
    assert!(
        plain.is_err(),
        "a plaintext client connected to the TLS port"
    );
    assert_eq!(server.session_ids().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn secure_port_beside_the_plain_one() {
    let ca = Ca::new("server CA");
    let server = EmbeddedServer::builder()
        .secure_client_port(0, server_tls(&ca))
        .start()
        .await
        .unwrap();
    let secure = server.secure_address().unwrap();
    assert_ne!(secure, server.address());

    // Both ports serve the same tree.
    let plain = connect(&server).await;
    let tls = tls_client(secure, &ca, None).await.unwrap();
    bounded(plain.create("/shared", b"from plain", &persistent()))
        .await
        .unwrap();
    let (data, _) = bounded(tls.get_data("/shared")).await.unwrap();
    assert_eq!(data, b"from plain");

    // `conf` names both ports, as ZooKeeper does.
    let mut conf = bounded(TcpStream::connect(server.address())).await.unwrap();
    bounded(conf.write_all(b"conf")).await.unwrap();
    let text = String::from_utf8(read_until_closed(&mut conf, STEP).await).unwrap();
    assert!(
        text.contains(&format!("clientPort={}\n", server.port())),
        "{text}"
    );
    assert!(
        text.contains(&format!("secureClientPort={}\n", secure.port())),
        "{text}"
    );

    // Both ports come back after a restart, and the TLS client's session survives it.
    server.stop();
    // The listeners close once their aborted tasks are dropped, a moment later.
    common::eventually("the TLS port closed", || async {
        TcpStream::connect(secure).await.is_err()
    })
    .await;
    bounded(server.restart()).await.unwrap();
    let (data, _) = retrying(|| tls.get_data("/shared")).await.unwrap();
    assert_eq!(data, b"from plain");
    let again = tls_client(secure, &ca, None).await.unwrap();
    round_trip(&again, "/after-restart").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mutual_tls_serves_only_clients_of_the_client_ca() {
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let stranger_ca = Ca::new("another CA");
    let tls = server_tls(&server_ca)
        .with_client_ca_pem(client_ca.pem().as_bytes())
        .unwrap();
    assert!(tls.requires_client_certificate());
    let server = EmbeddedServer::builder()
        .tls_only(tls)
        .start()
        .await
        .unwrap();
    let address = server.address();

    let trusted = client_ca.client("trusted");
    let client = tls_client(address, &server_ca, Some(&trusted))
        .await
        .unwrap();
    round_trip(&client, "/mutual").await;

    // No certificate: refused within the connection timeout.
    let started = Instant::now();
    let anonymous = tls_client(address, &server_ca, None).await;
    assert!(
        anonymous.is_err(),
        "a client without a certificate connected"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    // A certificate from another CA: refused too.
    let stranger = stranger_ca.client("stranger");
    let refused = tls_client(address, &server_ca, Some(&stranger)).await;
    assert!(refused.is_err(), "a client of another CA connected");

    // Neither got a session; the trusted client and newcomers are still served.
    assert_eq!(server.session_ids(), vec![client.session_id().0]);
    round_trip(&client, "/still-serving").await;
    let newcomer = tls_client(address, &server_ca, Some(&client_ca.client("newcomer")))
        .await
        .unwrap();
    round_trip(&newcomer, "/newcomer").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_does_not_trust_the_server_fails() {
    let ca = Ca::new("server CA");
    let elsewhere = Ca::new("some other CA");
    let server = EmbeddedServer::builder()
        .tls_only(server_tls(&ca))
        .start()
        .await
        .unwrap();
    let distrustful = tls_client(server.address(), &elsewhere, None).await;
    assert!(
        distrustful.is_err(),
        "connected without trusting the server"
    );
    assert!(server.session_ids().is_empty());
    let client = tls_client(server.address(), &ca, None).await.unwrap();
    round_trip(&client, "/trusted").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn plaintext_on_the_tls_port_is_closed() {
    let ca = Ca::new("server CA");
    // A long handshake timeout: the connections below must be closed because what they send
    // is not TLS, not because they are slow.
    let tls = server_tls(&ca).with_handshake_timeout(Duration::from_secs(60));
    let server = EmbeddedServer::builder()
        .tls_only(tls)
        .start()
        .await
        .unwrap();

    // A ZooKeeper connect request in plaintext.
    let mut raw = bounded(TcpStream::connect(server.address())).await.unwrap();
    bounded(raw.write_all(&connect_request())).await.unwrap();
    let answer = read_until_closed(&mut raw, Duration::from_secs(5)).await;
    // At most a TLS alert record (content type 21), never a ZooKeeper answer.
    assert!(answer.is_empty() || answer[0] == 21, "{answer:?}");

    // A four-letter word in plaintext gets no answer either.
    let mut ruok = bounded(TcpStream::connect(server.address())).await.unwrap();
    bounded(ruok.write_all(b"ruok")).await.unwrap();
    let answer = read_until_closed(&mut ruok, Duration::from_secs(5)).await;
    assert!(!answer.windows(4).any(|w| w == b"imok"), "{answer:?}");

    // Garbage.
    let mut garbage = bounded(TcpStream::connect(server.address())).await.unwrap();
    bounded(garbage.write_all(&[0xff; 1024])).await.unwrap();
    read_until_closed(&mut garbage, Duration::from_secs(5)).await;

    assert!(server.session_ids().is_empty());
    let client = tls_client(server.address(), &ca, None).await.unwrap();
    round_trip(&client, "/after-plaintext").await;
    common::eventually("refused connections gone", || async {
        server.active_connections() == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_connection_is_closed_after_the_handshake_timeout() {
    let ca = Ca::new("server CA");
    let timeout = Duration::from_millis(300);
    let server = EmbeddedServer::builder()
        .tls_only(server_tls(&ca).with_handshake_timeout(timeout))
        .start()
        .await
        .unwrap();
    let started = Instant::now();
    let mut silent = bounded(TcpStream::connect(server.address())).await.unwrap();
    // While it hangs in its handshake, others are served.
    let client = tls_client(server.address(), &ca, None).await.unwrap();
    round_trip(&client, "/beside-a-silent-one").await;
    read_until_closed(&mut silent, Duration::from_secs(5)).await;
    assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());
    round_trip(&client, "/after-the-silent-one").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn four_letter_words_and_faults_over_tls() {
    let ca = Ca::new("server CA");
    let server = EmbeddedServer::builder()
        .tls_only(server_tls(&ca))
        .start()
        .await
        .unwrap();
    assert_eq!(
        four_letter_word_over_tls(server.address(), &ca, b"ruok").await,
        "imok"
    );
    let conf = four_letter_word_over_tls(server.address(), &ca, b"conf").await;
    assert!(conf.contains("clientPort=-1\n"), "{conf}");
    assert!(
        conf.contains(&format!("secureClientPort={}\n", server.port())),
        "{conf}"
    );

    // A lost reply closes the TLS connection; the client reconnects over TLS into its
    // session, and the create happened.
    let client = tls_client(server.address(), &ca, None).await.unwrap();
    let fault = server.lose_reply_to_next(RequestMatcher::creates().path_contains("lost"));
    let err = bounded(client.create("/lost", b"", &persistent()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, zk::Error::ConnectionLoss | zk::Error::Custom(_)),
        "{err:?}"
    );
    assert!(bounded(fault.wait(STEP)).await.is_some());
    let stat = retrying(|| client.check_stat("/lost")).await.unwrap();
    assert!(stat.is_some());
    assert_eq!(server.session_ids(), vec![client.session_id().0]);

    // Session expiry reaches a TLS client too.
    assert!(server.expire_session(client.session_id().0));
    let mut states = client.state_watcher();
    let state = bounded(async {
        loop {
            let state = states.changed().await;
            if state.is_terminated() {
                return state;
            }
        }
    })
    .await;
    assert_eq!(state, zk::SessionState::Expired);
}

#[tokio::test(flavor = "multi_thread")]
async fn backpressure_over_tls() {
    const NODE_SIZE: usize = 1_000_000;
    const REQUESTS: i32 = 60;
    const LIMIT: usize = 2 << 20;
    let ca = Ca::new("server CA");
    let server = EmbeddedServer::builder()
        .tls_only(server_tls(&ca))
        .max_outstanding_bytes(LIMIT)
        .start()
        .await
        .unwrap();
    let client = tls_client(server.address(), &ca, None).await.unwrap();
    bounded(client.create("/big", &vec![7u8; NODE_SIZE], &persistent()))
        .await
        .unwrap();

    // A raw TLS client pipelines reads of the big node and does not read the replies.
    let mut raw = raw_tls(server.address(), &ca).await;
    bounded(raw.write_all(&connect_request())).await.unwrap();
    bounded(raw.flush()).await.unwrap();
    let answer = read_frame(&mut raw).await;
    assert!(answer.len() >= 36, "{answer:?}");
    let mut requests = Vec::new();
    for xid in 1..=REQUESTS {
        requests.extend_from_slice(&get_data_request(xid, "/big"));
    }
    bounded(raw.write_all(&requests)).await.unwrap();
    bounded(raw.flush()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The server stopped reading once the unsent replies passed the limit.
    let unsent = server.unsent_bytes();
    assert!(unsent <= LIMIT + 2 * NODE_SIZE, "{unsent} bytes unsent");

    // Every reply arrives, in order, once the client reads: nothing stays behind in TLS's
    // buffers.
    for xid in 1..=REQUESTS {
        let reply = read_frame(&mut raw).await;
        assert_eq!(i32::from_be_bytes(reply[..4].try_into().unwrap()), xid);
        assert_eq!(reply.len(), 16 + 4 + NODE_SIZE + 68, "reply to {xid}");
    }
    round_trip(&client, "/after-backpressure").await;
}

#[test]
fn unusable_pem_is_refused_with_a_clear_error() {
    let ca = Ca::new("CA");
    let id = ca.server();
    let other = ca.server();

    let garbage = TlsConfig::from_pem(b"not a certificate", id.key.as_bytes()).unwrap_err();
    assert!(matches!(garbage, Error::Tls(_)), "{garbage}");
    let no_key = TlsConfig::from_pem(id.cert.as_bytes(), id.cert.as_bytes()).unwrap_err();
    assert!(matches!(no_key, Error::Tls(_)), "{no_key}");
    let mismatch = TlsConfig::from_pem(id.cert.as_bytes(), other.key.as_bytes()).unwrap_err();
    assert!(matches!(mismatch, Error::Tls(_)), "{mismatch}");
    let bad_ca = TlsConfig::from_pem(id.cert.as_bytes(), id.key.as_bytes())
        .unwrap()
        .with_client_ca_pem(b"no CA here")
        .unwrap_err();
    assert!(matches!(bad_ca, Error::Tls(_)), "{bad_ca}");

    // Files: the message names the file at fault.
    let dir = std::env::temp_dir().join(format!("zk-tls-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let junk = dir.join("junk.pem");
    std::fs::write(&cert, &id.cert).unwrap();
    std::fs::write(&key, &id.key).unwrap();
    std::fs::write(&junk, "junk").unwrap();
    let missing = dir.join("missing.pem");
    let err = TlsConfig::from_pem_files(&missing, &key).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(err.to_string().contains("missing.pem"), "{err}");
    let err = TlsConfig::from_pem_files(&cert, &junk).unwrap_err();
    assert!(matches!(err, Error::Tls(_)), "{err}");
    assert!(err.to_string().contains("junk.pem"), "{err}");
    let err = TlsConfig::from_pem_files(&cert, &key)
        .unwrap()
        .with_client_ca_pem_file(&junk)
        .unwrap_err();
    assert!(err.to_string().contains("junk.pem"), "{err}");
    let good = TlsConfig::from_pem_files(&cert, &key)
        .unwrap()
        .with_client_ca_pem_file(&cert)
        .unwrap();
    assert!(good.requires_client_certificate());
    std::fs::remove_dir_all(&dir).unwrap();

    // A zero handshake timeout is refused when the server starts.
    let zero = TlsConfig::from_pem(id.cert.as_bytes(), id.key.as_bytes())
        .unwrap()
        .with_handshake_timeout(Duration::ZERO);
    let err = EmbeddedServer::builder()
        .tls_only(zero)
        .start_blocking()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
}

#[tokio::test]
async fn no_tls_without_a_listener_and_handed_connections_are_plain() {
    let ca = Ca::new("CA");
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, 2181));
    for builder in [
        EmbeddedServer::builder().tls_only(server_tls(&ca)),
        EmbeddedServer::builder().secure_client_port(0, server_tls(&ca)),
    ] {
        let err = builder.start_without_listener(address).unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
    }
    // A connection handed to a TLS-only server speaks the plain protocol.
    let server = EmbeddedServer::builder()
        .tls_only(server_tls(&ca))
        .start()
        .await
        .unwrap();
    let (mut ours, theirs) = tokio::io::duplex(4096);
    assert!(server.serve_connection(theirs, address));
    bounded(ours.write_all(b"ruok")).await.unwrap();
    let mut answer = Vec::new();
    bounded(ours.read_to_end(&mut answer)).await.unwrap();
    assert_eq!(answer, b"imok");
}
