//! The secure real-server harness against the raw client: TLS and mutual TLS from
//! certificates made at test time, and SASL DIGEST-MD5.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::TcpStream;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{available, bounded, unique};
use zk_curator_testing::{ClientAuth, TestCertificates, TestIdentity, ZooKeeperServer};
use zookeeper_client as zk;

/// How long a client that must fail may try.
const FAILING_CONNECT: Duration = Duration::from_secs(5);

fn certificates() -> &'static TestCertificates {
    static CERTS: OnceLock<TestCertificates> = OnceLock::new();
    CERTS.get_or_init(|| TestCertificates::generate().unwrap())
}

/// TLS only, client certificates required; shared by the tests of this binary.
fn mutual_tls_server() -> &'static ZooKeeperServer {
    static SERVER: OnceLock<ZooKeeperServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let started = Instant::now();
        let server = ZooKeeperServer::builder()
            .tls(certificates().server_tls())
            .start()
            .unwrap();
        eprintln!("TLS-only server started in {:?}", started.elapsed());
        server
    })
}

/// DIGEST-MD5 users `alice` and `bob`, plaintext; shared by the tests of this binary.
fn digest_server() -> &'static ZooKeeperServer {
    static SERVER: OnceLock<ZooKeeperServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        ZooKeeperServer::builder()
            .sasl_digest_user("alice", "alice-secret")
            .sasl_digest_user("bob", "bob-secret")
            .start()
            .unwrap()
    })
}

fn tls(ca: &TestIdentity, identity: Option<&TestIdentity>) -> zk::TlsOptions {
    let options = zk::TlsOptions::new().with_pem_ca(ca.cert_pem()).unwrap();
    match identity {
        Some(id) => options
            .with_pem_identity(id.cert_pem(), id.key_pem())
            .unwrap(),
        None => options,
    }
}

fn connector() -> zk::Connector {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .with_connection_timeout(Duration::from_secs(2))
}

/// Connects with `connector`, failing eagerly, and returns the outcome and how long it took.
async fn try_connect(
    connector: zk::Connector,
    connect_string: &str,
) -> (Result<zk::Client, zk::Error>, Duration) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        FAILING_CONNECT * 2,
        connector.with_fail_eagerly().connect(connect_string),
    )
    .await
    .expect("a connect with fail_eagerly did not return");
    (outcome, started.elapsed())
}

/// Whether `client` can read the root (a session that really works).
async fn can_read(client: &zk::Client) -> bool {
    bounded(client.get_children("/")).await.is_ok()
}

#[test]
fn certificates_are_files_and_text() {
    let certs = TestCertificates::generate().unwrap();
    for id in [
        certs.ca(),
        certs.server(),
        certs.client(),
        certs.untrusted_ca(),
        certs.untrusted_server(),
        certs.untrusted_client(),
        certs.expired_server(),
        certs.expired_client(),
    ] {
        assert!(
            id.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"),
            "{id:?}"
        );
        assert!(
            id.key_pem().starts_with("-----BEGIN PRIVATE KEY-----"),
            "{id:?}"
        );
        assert_eq!(
            std::fs::read_to_string(id.cert_path()).unwrap(),
            id.cert_pem()
        );
        assert_eq!(
            std::fs::read_to_string(id.key_path()).unwrap(),
            id.key_pem()
        );
        assert_eq!(
            std::fs::read_to_string(id.bundle_path()).unwrap(),
            id.bundle_pem()
        );
        assert!(id.cert_path().starts_with(certs.dir()));
    }
    // Replacing a file on disk (a reload test) leaves the other identity's text alone.
    let fresh = certs.issue_client("fresh").unwrap();
    fresh.write_over(certs.client()).unwrap();
    assert_eq!(
        std::fs::read_to_string(certs.client().cert_path()).unwrap(),
        fresh.cert_pem()
    );
    assert_ne!(certs.client().cert_pem(), fresh.cert_pem());
    assert!(certs.issue_client("../escape").is_err());
    let dir = certs.dir().to_path_buf();
    drop(certs);
    assert!(
        !dir.exists(),
        "the certificate directory outlived its owner"
    );
}

#[tokio::test]
async fn tls_create_and_get() {
    if !available("tls_create_and_get") {
        return;
    }
    let server = mutual_tls_server();
    let certs = certificates();
    let connect = server.secure_connect_string().unwrap();
    assert!(connect.starts_with("tcp+tls://127.0.0.1:"), "{connect}");
    let client = bounded(
        connector()
            .with_tls(tls(certs.ca(), Some(certs.client())))
            .connect(&connect),
    )
    .await
    .unwrap();
    let path = unique("tls");
    let acls = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    bounded(client.create(&path, b"over tls", &acls))
        .await
        .unwrap();
    let (data, _) = bounded(client.get_data(&path)).await.unwrap();
    assert_eq!(data, b"over tls");

    // The same through `secure_connect` and a bare address.
    let address = server.secure_address().unwrap().to_string();
    let again = bounded(
        connector()
            .with_tls(tls(certs.ca(), Some(certs.client())))
            .secure_connect(&address),
    )
    .await
    .unwrap();
    assert_eq!(bounded(again.get_data(&path)).await.unwrap().0, b"over tls");
}

#[tokio::test]
async fn tls_only_leaves_the_plaintext_port_closed() {
    if !available("tls_only_leaves_the_plaintext_port_closed") {
        return;
    }
    let server = mutual_tls_server();
    assert!(!server.serves_plaintext());
    let refused = TcpStream::connect(("127.0.0.1", server.port()));
    assert!(refused.is_err(), "something listens on the plaintext port");
    assert!(TcpStream::connect(server.secure_address().unwrap()).is_ok());
    // A plaintext client talking to the TLS port gets nowhere either.
    let (outcome, took) =
        try_connect(connector(), &server.secure_address().unwrap().to_string()).await;
    eprintln!(
        "plaintext client on the TLS port: {:?} after {took:?}",
        outcome.as_ref().err()
    );
    assert!(outcome.is_err());
}

#[tokio::test]
async fn tls_need_refuses_a_client_without_certificate() {
    if !available("tls_need_refuses_a_client_without_certificate") {
        return;
    }
    let server = mutual_tls_server();
    let certs = certificates();
    let connect = server.secure_connect_string().unwrap();
    let (outcome, took) = try_connect(connector().with_tls(tls(certs.ca(), None)), &connect).await;
    eprintln!(
        "no client certificate: {:?} after {took:?}",
        outcome.as_ref().err()
    );
    assert!(outcome.is_err(), "a client without certificate was served");
}

#[tokio::test]
async fn tls_refuses_untrusted_and_expired_peers() {
    if !available("tls_refuses_untrusted_and_expired_peers") {
        return;
    }
    let server = mutual_tls_server();
    let certs = certificates();
    let connect = server.secure_connect_string().unwrap();
    // The control: the trusted client is served.
    let (trusted, _) = try_connect(
        connector().with_tls(tls(certs.ca(), Some(certs.client()))),
        &connect,
    )
    .await;
    assert!(can_read(&trusted.unwrap()).await);
    // The client does not trust the server.
    let (outcome, took) = try_connect(
        connector().with_tls(tls(certs.untrusted_ca(), Some(certs.client()))),
        &connect,
    )
    .await;
    eprintln!(
        "server not trusted: {:?} after {took:?}",
        outcome.as_ref().err()
    );
    assert!(outcome.is_err());
    // The server does not trust the client.
    let (outcome, took) = try_connect(
        connector().with_tls(tls(certs.ca(), Some(certs.untrusted_client()))),
        &connect,
    )
    .await;
    eprintln!(
        "client not trusted: {:?} after {took:?}",
        outcome.as_ref().err()
    );
    assert!(outcome.is_err());
    // The client's certificate expired.
    let (outcome, took) = try_connect(
        connector().with_tls(tls(certs.ca(), Some(certs.expired_client()))),
        &connect,
    )
    .await;
    eprintln!(
        "expired client certificate: {:?} after {took:?}",
        outcome.as_ref().err()
    );
    assert!(outcome.is_err());
}

#[tokio::test]
async fn tls_beside_plaintext_with_optional_client_certificates() {
    if !available("tls_beside_plaintext_with_optional_client_certificates") {
        return;
    }
    let certs = certificates();
    let server = ZooKeeperServer::builder()
        .tls(
            certs
                .server_tls()
                .client_auth(ClientAuth::Want)
                .plaintext_port(true),
        )
        .start_async()
        .await
        .unwrap();
    assert!(server.serves_plaintext());
    let plain = bounded(connector().connect(&server.connect_string()))
        .await
        .unwrap();
    let path = unique("both");
    let acls = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    bounded(plain.create(&path, b"plain", &acls)).await.unwrap();
    // `want`: a client without a certificate is served over TLS too.
    let secure = bounded(
        connector()
            .with_tls(tls(certs.ca(), None))
            .connect(&server.secure_connect_string().unwrap()),
    )
    .await
    .unwrap();
    assert_eq!(bounded(secure.get_data(&path)).await.unwrap().0, b"plain");
}

#[tokio::test]
async fn digest_acl_admits_its_user_only() {
    if !available("digest_acl_admits_its_user_only") {
        return;
    }
    let server = digest_server();
    let alice = bounded(
        connector()
            .with_sasl(zk::SaslOptions::digest_md5("alice", "alice-secret"))
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    let bob = bounded(
        connector()
            .with_sasl(zk::SaslOptions::digest_md5("bob", "bob-secret"))
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    let path = unique("digest");
    let acl = [zk::Acl::new(
        zk::Permission::ALL,
        zk::AuthId::new("sasl", "alice"),
    )];
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl));
    bounded(alice.create(&path, b"alice's", &options))
        .await
        .unwrap();
    assert_eq!(bounded(alice.get_data(&path)).await.unwrap().0, b"alice's");
    let denied = bounded(bob.get_data(&path)).await;
    assert_eq!(denied.unwrap_err(), zk::Error::NoAuth);
    // Without SASL a session is anonymous: denied too.
    let anonymous = bounded(connector().connect(&server.connect_string()))
        .await
        .unwrap();
    assert_eq!(
        bounded(anonymous.get_data(&path)).await.unwrap_err(),
        zk::Error::NoAuth
    );
}

#[tokio::test]
async fn digest_wrong_password_fails() {
    if !available("digest_wrong_password_fails") {
        return;
    }
    let server = digest_server();
    let (outcome, took) = try_connect(
        connector().with_sasl(zk::SaslOptions::digest_md5("alice", "not-her-password")),
        &server.connect_string(),
    )
    .await;
    eprintln!(
        "wrong password: {:?} after {took:?}",
        outcome.as_ref().err()
    );
    assert!(outcome.is_err(), "a wrong password was accepted");
    // An unknown user with a password of its own. (Not with a known user's password:
    // Debian's ZooKeeper 3.8.0 checks an unknown user against the password of the user
    // who logged in last, ZOOKEEPER-4839, fixed upstream since.)
    let (outcome, took) = try_connect(
        connector().with_sasl(zk::SaslOptions::digest_md5("mallory", "mallory-secret")),
        &server.connect_string(),
    )
    .await;
    eprintln!("unknown user: {:?} after {took:?}", outcome.as_ref().err());
    assert!(outcome.is_err(), "an unknown user was accepted");
}

#[tokio::test]
async fn required_sasl_refuses_anonymous_sessions() {
    if !available("required_sasl_refuses_anonymous_sessions") {
        return;
    }
    let server = ZooKeeperServer::builder()
        .sasl_digest_user("carol", "carol-secret")
        .require_sasl(true)
        .start_async()
        .await
        .unwrap();
    let carol = bounded(
        connector()
            .with_sasl(zk::SaslOptions::digest_md5("carol", "carol-secret"))
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    assert!(can_read(&carol).await);
    let started = Instant::now();
    let refused = match try_connect(connector(), &server.connect_string()).await.0 {
        Err(err) => Err(err),
        Ok(anonymous) => bounded(anonymous.get_children("/")).await.map(|_| ()),
    };
    eprintln!(
        "anonymous session, SASL required: {refused:?} after {:?}",
        started.elapsed()
    );
    assert!(refused.is_err(), "an anonymous session was served");
}

#[test]
fn sasl_settings_are_checked() {
    let both = ZooKeeperServer::builder()
        .sasl_digest_user("a", "b")
        .kerberos(zk_curator_testing::KerberosService::new(
            "zookeeper/localhost@ZKTEST.LOCAL",
            "/nonexistent.keytab",
            "/nonexistent.conf",
        ))
        .start();
    assert!(matches!(
        both,
        Err(zk_curator_testing::Error::InvalidConfig(_))
    ));
    let required_alone = ZooKeeperServer::builder().require_sasl(true).start();
    assert!(matches!(
        required_alone,
        Err(zk_curator_testing::Error::InvalidConfig(_))
    ));
    let quote = ZooKeeperServer::builder()
        .sasl_digest_user("a", "x\"y")
        .start();
    assert!(matches!(
        quote,
        Err(zk_curator_testing::Error::InvalidConfig(_))
    ));
}
