//! Secured ensembles: the framework, the locks, fencing and elections over
//! TLS and mutual TLS, SASL DIGEST-MD5, the typed errors of a connection
//! that cannot be made, certificates reloaded from disk, and an ensemble
//! provider followed across sessions.
//!
//! The TLS tests run on the chosen backend: ZooKeeper's own
//! `secureClientPort` (Netty, `ssl.clientAuth=need`, the plaintext port
//! closed) with `ZK_TEST_SERVER=real`, the embedded server's TLS otherwise.
//! SASL needs ZooKeeper's JAAS and runs on the real backend only.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{bounded, unique_path, BOUND, PATIENCE};
use zk_curator::framework::{ConnectFailure, TlsConfig};
use zk_curator::{
    zk, EnsembleProvider, Error, Framework, FrameworkBuilder, InterProcessMutex,
    InterProcessReadWriteLock, InterProcessSemaphoreV2, LeaderElection, LeaderLatch,
};
use zk_curator_testing::backend::{Backend, Prerequisite};
use zk_curator_testing::{TestCertificates, TestIdentity, TestingServer, ZooKeeperServer};

/// The connection timeout of frameworks that must fail: long, so that a
/// refusal retrying cannot change is seen to come at once, well before it.
const FAILING: Duration = Duration::from_secs(15);

/// How soon a refusal by every host (of one here) must be the answer.
const AT_ONCE: Duration = Duration::from_secs(2);

/// A TLS-only server requiring client certificates signed by `certs`' CA,
/// on the chosen backend; `server` overrides the server's identity (an
/// expired certificate, say).
struct SecureServer {
    connect: String,
    _real: Option<ZooKeeperServer>,
    _embedded: Option<zk_curator_testing::EmbeddedServer>,
}

async fn secure_server(
    test: &str,
    certs: &TestCertificates,
    server: Option<&TestIdentity>,
) -> Option<SecureServer> {
    match Backend::from_env().unwrap() {
        Backend::Real => {
            if !Prerequisite::ZooKeeper.check(test) {
                return None;
            }
            let mut tls = certs.server_tls();
            if let Some(identity) = server {
                tls = zk_curator_testing::ServerTls::new(
                    identity.bundle_path(),
                    certs.ca().cert_path(),
                );
            }
            let real = ZooKeeperServer::builder()
                .tls(tls)
                .start_async()
                .await
                .unwrap();
            Some(SecureServer {
                connect: real.secure_connect_string().unwrap(),
                _real: Some(real),
                _embedded: None,
            })
        }
        _ => {
            let identity = server.unwrap_or(certs.server());
            let tls = zk_curator_testing::embedded::TlsConfig::from_pem(
                identity.cert_pem().as_bytes(),
                identity.key_pem().as_bytes(),
            )
            .unwrap()
            .with_client_ca_pem(certs.ca().cert_pem().as_bytes())
            .unwrap();
            let embedded = zk_curator_testing::EmbeddedServer::builder()
                .tls_only(tls)
                .start()
                .await
                .unwrap();
            Some(SecureServer {
                connect: format!("tcp+tls://{}", embedded.address()),
                _real: None,
                _embedded: Some(embedded),
            })
        }
    }
}

fn tls_builder(connect: &str, tls: TlsConfig) -> FrameworkBuilder {
    Framework::builder()
        .connect_string(connect)
        .session_timeout(Duration::from_secs(6))
        .connection_timeout(FAILING)
        .tls(tls)
}

fn trusted(certs: &TestCertificates) -> TlsConfig {
    TlsConfig::new()
        .ca_file(certs.ca().cert_path())
        .client_cert_files(certs.client().cert_path(), certs.client().key_path())
}

/// Starts a framework that must not connect and returns its error and how
/// long the wait for a session (bounded by the connection timeout) took.
async fn connect_error(builder: FrameworkBuilder) -> (Error, Duration) {
    let framework = builder.build().unwrap();
    framework.start().unwrap();
    let started = Instant::now();
    // Waits for a session up to the connection timeout.
    let outcome = framework.session().await.map(drop);
    let took = started.elapsed();
    framework.close_within(Duration::from_millis(200)).await;
    (outcome.expect_err("connected where it must not"), took)
}

fn reason(err: &Error) -> &ConnectFailure {
    match err {
        Error::Connect { reason, .. } => reason,
        other => panic!("expected Error::Connect, got {other:?}"),
    }
}

#[tokio::test]
async fn locks_fences_and_elections_work_over_mutual_tls() {
    bounded(BOUND, async {
        let certs = TestCertificates::generate().unwrap();
        let Some(server) = secure_server(
            "locks_fences_and_elections_work_over_mutual_tls",
            &certs,
            None,
        )
        .await
        else {
            return;
        };
        let framework = tls_builder(&server.connect, trusted(&certs))
            .build()
            .unwrap();
        framework.start().unwrap();
        framework.block_until_connected(PATIENCE).await.unwrap();
        let other = tls_builder(&server.connect, trusted(&certs))
            .build()
            .unwrap();
        other.start().unwrap();
        other.block_until_connected(PATIENCE).await.unwrap();

        // A mutex: exclusive across the two sessions, a fenced write.
        let path = unique_path("tls-mutex");
        let mutex = InterProcessMutex::new(framework.clone(), &path).unwrap();
        let rival = InterProcessMutex::new(other.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        assert!(
            rival.try_lock().await.unwrap().is_none(),
            "two holders over TLS"
        );
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let data = format!("{path}-data");
        guard
            .fence()
            .unwrap()
            .create(&data, b"fenced", &open)
            .await
            .unwrap();
        let token = guard.fencing_token();
        guard.release().await.unwrap();
        let second = rival.lock().await.unwrap();
        assert!(second.fencing_token() > token, "tokens grow over TLS");
        second.release().await.unwrap();

        // Read-write lock and semaphore.
        let rw = InterProcessReadWriteLock::new(framework.clone(), &unique_path("tls-rw")).unwrap();
        let read = rw.read_lock().lock().await.unwrap();
        read.release().await.unwrap();
        let write = rw.write_lock().lock().await.unwrap();
        write.release().await.unwrap();
        let semaphore =
            InterProcessSemaphoreV2::new(framework.clone(), &unique_path("tls-sem"), 2).unwrap();
        let leases = semaphore.acquire_many(2).await.unwrap();
        assert!(semaphore.try_acquire().await.unwrap().is_none());
        InterProcessSemaphoreV2::return_all(leases).await.unwrap();

        // An election: the first latch leads, its term fences.
        let election = unique_path("tls-election");
        let first = LeaderLatch::new(framework.clone(), &election, "first").unwrap();
        first.start().unwrap();
        let term = first.await_leadership().await.unwrap();
        term.fence()
            .unwrap()
            .set_data(&data, b"leader", None)
            .await
            .unwrap();
        let second = LeaderLatch::new(other.clone(), &election, "second").unwrap();
        second.start().unwrap();
        assert_eq!(
            second.leader().await.unwrap().map(|p| p.id),
            Some("first".to_owned())
        );
        first.close().await.unwrap();
        let next = second.await_leadership().await.unwrap();
        assert!(next.fencing_token() > term.fencing_token());
        second.close().await.unwrap();
        framework.close().await;
        other.close().await;
    })
    .await;
}

#[tokio::test]
async fn bare_hosts_use_tls_and_the_server_name_can_be_chosen() {
    bounded(BOUND, async {
        let certs = TestCertificates::generate().unwrap();
        let Some(server) = secure_server(
            "bare_hosts_use_tls_and_the_server_name_can_be_chosen",
            &certs,
            None,
        )
        .await
        else {
            return;
        };
        // A bare host:port: TLS, once the framework has TLS settings.
        let bare = server.connect.trim_start_matches("tcp+tls://").to_owned();
        let framework = tls_builder(&bare, trusted(&certs)).build().unwrap();
        framework.start().unwrap();
        framework.block_until_connected(PATIENCE).await.unwrap();
        framework.close().await;
        // The certificate names localhost too: verified against that name.
        let framework = tls_builder(&bare, trusted(&certs).server_name("localhost"))
            .build()
            .unwrap();
        framework.start().unwrap();
        framework.block_until_connected(PATIENCE).await.unwrap();
        framework.close().await;
        // A name the certificate does not carry is refused, and said so.
        let (err, took) = connect_error(tls_builder(
            &bare,
            trusted(&certs).server_name("elsewhere.example"),
        ))
        .await;
        assert!(
            matches!(reason(&err), ConnectFailure::UntrustedServerCertificate(_)),
            "{err:?}"
        );
        assert!(
            took < AT_ONCE,
            "a certificate for another name took {took:?}"
        );
        // Only tcp+tls:// entries use TLS when bare hosts are told not to:
        // the TLS port does not answer plaintext.
        let plain_bare = tls_builder(&bare, trusted(&certs).plain_hosts_use_tls(false))
            .connection_timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        plain_bare.start().unwrap();
        assert!(
            plain_bare.session().await.is_err(),
            "plaintext on the TLS port connected"
        );
        plain_bare.close_within(Duration::from_millis(200)).await;
    })
    .await;
}

#[test]
fn the_system_roots_can_be_trusted() {
    if std::env::var_os("SSL_CERT_FILE").is_none()
        && !std::path::Path::new("/etc/ssl/certs/ca-certificates.crt").exists()
    {
        eprintln!("no system CA bundle here (Debian: ca-certificates)");
        return;
    }
    Framework::builder()
        .connect_string("tcp+tls://127.0.0.1:2281")
        .tls(TlsConfig::new().platform_roots(true))
        .build()
        .unwrap();
}

#[tokio::test]
async fn a_client_without_a_certificate_is_told_why() {
    bounded(BOUND, async {
        let certs = TestCertificates::generate().unwrap();
        let Some(server) =
            secure_server("a_client_without_a_certificate_is_told_why", &certs, None).await
        else {
            return;
        };
        let (err, took) = connect_error(tls_builder(
            &server.connect,
            TlsConfig::new().ca_file(certs.ca().cert_path()),
        ))
        .await;
        assert!(
            matches!(reason(&err), ConnectFailure::ClientCertificateRefused(_)),
            "{err:?}"
        );
        assert!(
            took < AT_ONCE,
            "a refusal retrying cannot change took {took:?}"
        );
        assert!(
            err.to_string()
                .contains(&server.connect.replace("tcp+tls://", "")),
            "{err}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_client_certificate_of_another_ca_is_told_why() {
    bounded(BOUND, async {
        let certs = TestCertificates::generate().unwrap();
        let Some(server) = secure_server(
            "a_client_certificate_of_another_ca_is_told_why",
            &certs,
            None,
        )
        .await
        else {
            return;
        };
        let tls = TlsConfig::new()
            .ca_file(certs.ca().cert_path())
            .client_cert_pem(
                certs.untrusted_client().cert_pem(),
                certs.untrusted_client().key_pem(),
            );
        let (err, took) = connect_error(tls_builder(&server.connect, tls)).await;
        assert!(
            matches!(reason(&err), ConnectFailure::ClientCertificateRefused(_)),
            "{err:?}"
        );
        assert!(took < AT_ONCE, "took {took:?}");
    })
    .await;
}

#[tokio::test]
async fn an_untrusted_server_is_told_why() {
    bounded(BOUND, async {
        let certs = TestCertificates::generate().unwrap();
        let Some(server) = secure_server("an_untrusted_server_is_told_why", &certs, None).await
        else {
            return;
        };
        let tls = TlsConfig::new()
            .ca_file(certs.untrusted_ca().cert_path())
            .client_cert_files(certs.client().cert_path(), certs.client().key_path());
        let (err, took) = connect_error(tls_builder(&server.connect, tls)).await;
        assert!(
            matches!(reason(&err), ConnectFailure::UntrustedServerCertificate(_)),
            "{err:?}"
        );
        assert!(
            took < AT_ONCE,
            "a refusal retrying cannot change took {took:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn an_expired_server_certificate_is_told_why() {
    bounded(BOUND, async {
        let certs = TestCertificates::generate().unwrap();
        let Some(server) = secure_server(
            "an_expired_server_certificate_is_told_why",
            &certs,
            Some(certs.expired_server()),
        )
        .await
        else {
            return;
        };
        let (err, took) = connect_error(tls_builder(&server.connect, trusted(&certs))).await;
        assert_eq!(
            reason(&err),
            &ConnectFailure::ExpiredServerCertificate,
            "{err:?}"
        );
        assert!(took < AT_ONCE, "took {took:?}");
    })
    .await;
}

#[tokio::test]
async fn a_plaintext_port_is_told_why() {
    bounded(BOUND, async {
        let Some(server) = common::server() else {
            return;
        };
        let certs = TestCertificates::generate().unwrap();
        let connect = format!("tcp+tls://{}", server.address());
        let (err, took) = connect_error(tls_builder(&connect, trusted(&certs))).await;
        assert_eq!(reason(&err), &ConnectFailure::NotTls, "{err:?}");
        assert!(
            took < AT_ONCE,
            "a refusal retrying cannot change took {took:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_certificate_replaced_on_disk_is_used_by_the_next_connection() {
    bounded(BOUND, async {
        let certs = TestCertificates::generate().unwrap();
        let Some(server) = secure_server(
            "a_certificate_replaced_on_disk_is_used_by_the_next_connection",
            &certs,
            None,
        )
        .await
        else {
            return;
        };
        // The client's files first hold a certificate the server refuses.
        let files = certs.issue_client("rotated").unwrap();
        certs.untrusted_client().write_over(&files).unwrap();
        let framework = tls_builder(
            &server.connect,
            TlsConfig::new()
                .ca_file(certs.ca().cert_path())
                .client_cert_files(files.cert_path(), files.key_path()),
        )
        .build()
        .unwrap();
        framework.start().unwrap();
        let started = Instant::now();
        let err = framework.block_until_connected(FAILING).await.unwrap_err();
        assert!(
            matches!(reason(&err), ConnectFailure::ClientCertificateRefused(_)),
            "{err:?}"
        );
        assert!(started.elapsed() < AT_ONCE, "{:?}", started.elapsed());
        // A good certificate written over them is used by a later attempt,
        // with no restart (the framework kept trying). A wait that begins
        // while an attempt with the old files is still under way may get its
        // refusal first: that is the answer at that moment, so wait again.
        files.write_over(&files).unwrap();
        let deadline = Instant::now() + PATIENCE;
        loop {
            match framework.block_until_connected(PATIENCE).await {
                Ok(()) => break,
                Err(err) if Instant::now() < deadline => {
                    assert!(
                        matches!(reason(&err), ConnectFailure::ClientCertificateRefused(_)),
                        "{err:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(err) => panic!("the replaced certificate was never used: {err:?}"),
            }
        }
        let mutex = InterProcessMutex::new(framework.clone(), &unique_path("rotated")).unwrap();
        mutex.lock().await.unwrap().release().await.unwrap();
        framework.close().await;
    })
    .await;
}

/// The real server with DIGEST-MD5 users alice and bob, or `None` when the
/// backend is the embedded one (no JAAS there).
async fn digest_server(test: &str) -> Option<ZooKeeperServer> {
    if Backend::from_env().unwrap() != Backend::Real {
        eprintln!("{test}: SASL runs on the real backend (ZK_TEST_SERVER=real)");
        return None;
    }
    if !Prerequisite::ZooKeeper.check(test) {
        return None;
    }
    Some(
        ZooKeeperServer::builder()
            .sasl_digest_user("alice", "alice-secret")
            .sasl_digest_user("bob", "bob-secret")
            .start_async()
            .await
            .unwrap(),
    )
}

fn sasl_framework(connect: &str, user: &str, password: &str) -> FrameworkBuilder {
    Framework::builder()
        .connect_string(connect)
        .session_timeout(Duration::from_secs(6))
        .connection_timeout(Duration::from_secs(10))
        .sasl_digest_md5(user, password)
}

#[tokio::test]
async fn sasl_users_lock_under_their_own_acl() {
    bounded(BOUND, async {
        let Some(server) = digest_server("sasl_users_lock_under_their_own_acl").await else {
            return;
        };
        let only_alice = common::only("sasl", "alice");
        let alice = sasl_framework(&server.connect_string(), "alice", "alice-secret")
            .default_acl(only_alice)
            .build()
            .unwrap();
        alice.start().unwrap();
        alice.block_until_connected(PATIENCE).await.unwrap();
        let bob = sasl_framework(&server.connect_string(), "bob", "bob-secret")
            .build()
            .unwrap();
        bob.start().unwrap();
        bob.block_until_connected(PATIENCE).await.unwrap();

        let path = "/alice-lock";
        let mutex = InterProcessMutex::new(alice.clone(), path).unwrap();
        let guard = mutex.lock().await.unwrap();
        let node = guard.node().path().to_owned();
        assert_eq!(
            common::acl_of(&alice, &node).await,
            common::only("sasl", "alice")
        );
        let read = bob
            .call_with_retry(|client| {
                let node = node.clone();
                async move { client.get_data(&node).await }
            })
            .await;
        assert_eq!(read.unwrap_err(), Error::NoAuth, "bob read alice's node");
        let rival = InterProcessMutex::new(bob.clone(), path).unwrap();
        assert!(
            rival.try_lock().await.is_err(),
            "bob queued under alice's lock path"
        );
        guard.release().await.unwrap();
        alice.close().await;
        bob.close().await;
    })
    .await;
}

#[tokio::test]
async fn a_wrong_password_is_told_at_once() {
    bounded(BOUND, async {
        let Some(server) = digest_server("a_wrong_password_is_told_at_once").await else {
            return;
        };
        let framework = sasl_framework(&server.connect_string(), "alice", "not-her-password")
            .build()
            .unwrap();
        framework.start().unwrap();
        let started = Instant::now();
        let err = framework.block_until_connected(PATIENCE).await.unwrap_err();
        let took = started.elapsed();
        assert!(
            matches!(reason(&err), ConnectFailure::Authentication(_)),
            "{err:?}"
        );
        assert!(
            took < Duration::from_secs(3),
            "a refused password took {took:?}"
        );
        // Whoever asks for a session later is told at once too.
        let started = Instant::now();
        let again = framework.session().await.unwrap_err();
        assert!(
            matches!(reason(&again), ConnectFailure::Authentication(_)),
            "{again:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(1));
        framework.close_within(Duration::from_millis(200)).await;
    })
    .await;
}

/// A provider whose answer the test changes.
#[derive(Debug)]
struct Moving(Mutex<String>);

impl EnsembleProvider for Moving {
    fn connect_string(&self) -> zk_curator::Result<String> {
        Ok(self.0.lock().unwrap().clone())
    }
}

#[tokio::test]
async fn a_framework_follows_its_ensemble_provider_to_new_hosts() {
    bounded(BOUND, async {
        let Some(first) = common::own_server().await else {
            return;
        };
        let second = TestingServer::start_async().await.unwrap();
        let provider = Arc::new(Moving(Mutex::new(first.connect_string())));
        let framework = Framework::builder()
            .ensemble_provider(provider.clone())
            .session_timeout(Duration::from_secs(4))
            .connection_timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        framework.start().unwrap();
        framework.block_until_connected(PATIENCE).await.unwrap();
        let path = unique_path("moving");
        let mutex = InterProcessMutex::new(framework.clone(), &path).unwrap();
        mutex.lock().await.unwrap().release().await.unwrap();

        // The ensemble moves: the old host goes, the provider names the new.
        *provider.0.lock().unwrap() = second.connect_string();
        first.stop();
        let moved = common::eventually(PATIENCE, || {
            let framework = framework.clone();
            let path = path.clone();
            async move {
                let Ok(mutex) = InterProcessMutex::new(framework, &path) else {
                    return false;
                };
                match mutex.try_lock().await {
                    Ok(Some(guard)) => guard.release().await.is_ok(),
                    _ => false,
                }
            }
        })
        .await;
        assert!(moved, "the framework never built a session on the new host");
        // Held while the new host is asked: once released, the lock's
        // emptied containers may be reaped by the server at any moment.
        let held = mutex.lock().await.unwrap();
        let session = framework.session().await.unwrap();
        let raw = common::raw_client(&second.connect_string()).await;
        let nodes = common::children(&raw, &path).await;
        assert!(
            nodes
                .iter()
                .any(|n| held.node().path().ends_with(&format!("/{n}"))),
            "the lock was not taken on the new host: {nodes:?} (session {session:?})"
        );
        held.release().await.unwrap();
        framework.close().await;
    })
    .await;
}

#[test]
fn tls_settings_are_checked_before_anything_is_sent() {
    // tcp+tls:// entries without TLS settings.
    let err = Framework::builder()
        .connect_string("tcp+tls://127.0.0.1:2281")
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    // A CA file that is not there, named in the error.
    let err = tls_builder(
        "127.0.0.1:2281",
        TlsConfig::new().ca_file("/no/such/dir/ca.pem"),
    )
    .build()
    .unwrap_err();
    assert!(err.to_string().contains("/no/such/dir/ca.pem"), "{err}");
    // A client key that does not go with anything.
    let certs = TestCertificates::generate().unwrap();
    let err = tls_builder(
        "127.0.0.1:2281",
        TlsConfig::new()
            .ca_file(certs.ca().cert_path())
            .client_cert_pem(certs.client().cert_pem(), "not a key"),
    )
    .build()
    .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    // An entry with a scheme of its own, or a chroot.
    for bad in ["http://127.0.0.1:2181", "127.0.0.1:2181/chroot"] {
        let err = Framework::builder()
            .connect_string(bad)
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{bad}: {err}");
    }
}
