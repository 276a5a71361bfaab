//! `zk-curator` on secured ensembles: `--tls-ca/--tls-cert/--tls-key` (and
//! their `ZK_TLS_*` variables) against a server requiring client
//! certificates, `ZK_SASL` against ZooKeeper's DIGEST-MD5, and the usage
//! errors of bad values (exit 64, before anything is sent).
//!
//! TLS runs on the chosen backend (the embedded server's TLS by default,
//! ZooKeeper's `secureClientPort` with `ZK_TEST_SERVER=real`); SASL on the
//! real one only.
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use tokio::process::Command;
use zk_curator_testing::backend::{Backend, Prerequisite};
use zk_curator_testing::{EmbeddedServer, TestCertificates, TestIdentity, ZooKeeperServer};

const BIN: &str = env!("CARGO_BIN_EXE_zk-curator");
const TEST_LIMIT: Duration = Duration::from_secs(60);

/// A TLS-only server requiring client certificates of `certs`' CA, on the
/// chosen backend, and its connect string; `None` when the real backend is
/// asked for and missing (skipped under `ZK_SKIP_MISSING`).
async fn secure_server(
    test: &str,
    certs: &TestCertificates,
) -> Option<(String, Option<ZooKeeperServer>, Option<EmbeddedServer>)> {
    secure_server_as(test, certs, certs.server()).await
}

/// [`secure_server`] presenting `identity` (an expired certificate, say).
async fn secure_server_as(
    test: &str,
    certs: &TestCertificates,
    identity: &TestIdentity,
) -> Option<(String, Option<ZooKeeperServer>, Option<EmbeddedServer>)> {
    if Backend::from_env().unwrap() == Backend::Real {
        if !Prerequisite::ZooKeeper.check(test) {
            return None;
        }
        let tls =
            zk_curator_testing::ServerTls::new(identity.bundle_path(), certs.ca().cert_path());
        let real = ZooKeeperServer::builder()
            .tls(tls)
            .start_async()
            .await
            .unwrap();
        return Some((real.secure_connect_string().unwrap(), Some(real), None));
    }
    let tls = zk_curator_testing::embedded::TlsConfig::from_pem(
        identity.cert_pem().as_bytes(),
        identity.key_pem().as_bytes(),
    )
    .unwrap()
    .with_client_ca_pem(certs.ca().cert_pem().as_bytes())
    .unwrap();
    let embedded = EmbeddedServer::builder()
        .tls_only(tls)
        .start()
        .await
        .unwrap();
    Some((
        format!("tcp+tls://{}", embedded.address()),
        None,
        Some(embedded),
    ))
}

fn zkc(connect: &str, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("ZK_CONNECT", connect)
        .env_remove("ZK_AUTH")
        .env_remove("ZK_SASL")
        .env_remove("ZK_TLS_CA")
        .env_remove("ZK_TLS_CERT")
        .env_remove("ZK_TLS_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn lock_and_locks_over_mutual_tls() {
    tokio::time::timeout(TEST_LIMIT, async {
        let certs = TestCertificates::generate().unwrap();
        let Some((connect, _real, embedded)) =
            secure_server("lock_and_locks_over_mutual_tls", &certs).await
        else {
            return;
        };
        let ca = certs.ca().cert_path().to_str().unwrap().to_owned();
        let cert = certs.client().cert_path().to_str().unwrap().to_owned();
        let key = certs.client().key_path().to_str().unwrap().to_owned();
        // Flags. A client certificate makes `lock` give its nodes all for
        // the creator (its x509 identity) and read for the world; the
        // embedded server knows no x509 identities, so there the nodes are
        // asked open (tests/acl.rs covers the default on ZooKeeper).
        let mut args = vec![
            "lock",
            "/tls-cli",
            "--tls-ca",
            &ca,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
        ];
        if embedded.is_some() {
            args.extend(["--acl", "open"]);
        }
        args.extend(["--", "sh", "-c", "echo \"token=$ZK_CURATOR_FENCING_TOKEN\""]);
        let output = zkc(&connect, &args).output().await.unwrap();
        assert!(
            output.status.success(),
            "lock over TLS: {}",
            stderr(&output)
        );
        assert!(String::from_utf8_lossy(&output.stdout).starts_with("token="));
        // The environment.
        let output = zkc(&connect, &["locks", "/tls-cli", "--json"])
            .env("ZK_TLS_CA", &ca)
            .env("ZK_TLS_CERT", &cert)
            .env("ZK_TLS_KEY", &key)
            .output()
            .await
            .unwrap();
        assert!(
            output.status.success(),
            "locks over TLS: {}",
            stderr(&output)
        );
        // No client certificate: refused, and said why, within the timeout.
        let started = Instant::now();
        let output = zkc(
            &connect,
            &[
                "locks",
                "/tls-cli",
                "--tls-ca",
                &ca,
                "--connection-timeout",
                "3s",
            ],
        )
        .output()
        .await
        .unwrap();
        assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("refused our client certificate"),
            "{}",
            stderr(&output)
        );
        assert!(started.elapsed() < Duration::from_secs(8));
    })
    .await
    .expect("test timed out");
}

/// A refusal retrying cannot change is the answer at once: `lock` with the
/// default 15 s connection timeout exits 69 within 2 s, saying why, when
/// the server refuses our (missing) certificate, when its certificate is
/// not trusted, when the port does not speak TLS, and when a plaintext
/// client meets a port that speaks only TLS (the server just closes the
/// connection; a TLS probe of the port tells why).
#[tokio::test]
async fn a_refusal_is_the_answer_at_once() {
    tokio::time::timeout(TEST_LIMIT, async {
        let certs = TestCertificates::generate().unwrap();
        let Some((connect, _real, _embedded)) =
            secure_server("a_refusal_is_the_answer_at_once", &certs).await
        else {
            return;
        };
        let plaintext = EmbeddedServer::builder().start().await.unwrap();
        let plaintext_tls = format!("tcp+tls://{}", plaintext.address());
        let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
        let (ca, untrusted) = (
            path(certs.ca().cert_path()),
            path(certs.untrusted_ca().cert_path()),
        );
        let (cert, key) = (
            path(certs.client().cert_path()),
            path(certs.client().key_path()),
        );
        let plain_to_tls = connect.trim_start_matches("tcp+tls://").to_owned();
        let cases: [(&str, Vec<&str>, &str); 4] = [
            (&plain_to_tls, vec![], "speaks only TLS"),
            (
                &connect,
                vec!["--tls-ca", &ca],
                "refused our client certificate",
            ),
            (
                &connect,
                vec![
                    "--tls-ca",
                    &untrusted,
                    "--tls-cert",
                    &cert,
                    "--tls-key",
                    &key,
                ],
                "not trusted",
            ),
            (
                &plaintext_tls,
                vec!["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key],
                "does not speak TLS",
            ),
        ];
        for (connect, flags, expected) in cases {
            let mut args = vec!["lock", "/refused"];
            args.extend(flags.iter().copied());
            args.extend(["--", "true"]);
            let started = Instant::now();
            let output = zkc(connect, &args).output().await.unwrap();
            let took = started.elapsed();
            let text = stderr(&output);
            assert_eq!(output.status.code(), Some(69), "{flags:?}: {text}");
            assert!(text.contains(expected), "{flags:?}: {text}");
            assert!(
                took < Duration::from_secs(2),
                "{flags:?}: took {took:?}: {text}"
            );
        }
    })
    .await
    .expect("test timed out");
}

/// A server certificate that has expired, or that names another host,
/// ends `lock` at once too (15 s connection timeout), saying why.
#[tokio::test]
async fn an_expired_server_certificate_ends_lock_at_once() {
    let certs = TestCertificates::generate().unwrap();
    server_certificate_ends_lock_at_once(
        "an_expired_server_certificate_ends_lock_at_once",
        &certs,
        certs.expired_server(),
        "has expired",
    )
    .await;
}

#[tokio::test]
async fn a_server_certificate_for_another_name_ends_lock_at_once() {
    let certs = TestCertificates::generate().unwrap();
    let elsewhere = certs
        .issue_server_for("elsewhere", "zk.elsewhere.example")
        .unwrap();
    server_certificate_ends_lock_at_once(
        "a_server_certificate_for_another_name_ends_lock_at_once",
        &certs,
        &elsewhere,
        "NotValidForName",
    )
    .await;
}

/// `lock` against a server presenting `identity` exits 69 within 2 s, its
/// message holding `expected`.
async fn server_certificate_ends_lock_at_once(
    test: &str,
    certs: &TestCertificates,
    identity: &TestIdentity,
    expected: &str,
) {
    tokio::time::timeout(TEST_LIMIT, async {
        let Some((connect, _real, _embedded)) = secure_server_as(test, certs, identity).await
        else {
            return;
        };
        let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
        let (ca, cert, key) = (
            path(certs.ca().cert_path()),
            path(certs.client().cert_path()),
            path(certs.client().key_path()),
        );
        let started = Instant::now();
        let output = zkc(
            &connect,
            &[
                "lock",
                "/expired",
                "--tls-ca",
                &ca,
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--",
                "true",
            ],
        )
        .output()
        .await
        .unwrap();
        let took = started.elapsed();
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(69), "{text}");
        assert!(text.contains(expected), "{text}");
        assert!(took < Duration::from_secs(2), "took {took:?}: {text}");
    })
    .await
    .expect("test timed out");
}

#[tokio::test]
async fn bad_tls_and_sasl_values_are_usage_errors() {
    tokio::time::timeout(TEST_LIMIT, async {
        // Nothing listens there: a usage error must come before any attempt.
        let connect = "127.0.0.1:1";
        // (flags, environment, what the message must name)
        type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
        let cases: [Case<'_>; 8] = [
            (&["--tls-ca", "/no/such/ca.pem"], &[], "/no/such/ca.pem"),
            (&["--zk", "tcp+tls://127.0.0.1:1"], &[], "--tls-ca"),
            (&["--zk", "foo://127.0.0.1:1"], &[], "tcp+tls://host:port"),
            (&["--tls-cert", "/etc/hostname"], &[], "--tls-ca"),
            (
                &["--tls-ca", "/etc/hostname"],
                &[],
                "no usable CA certificate",
            ),
            (&[], &[("ZK_SASL", "digest:alice")], "ZK_SASL"),
            (&[], &[("ZK_SASL", "plain:a:b")], "ZK_SASL"),
            (&[], &[("ZK_SASL", "/no/such/sasl")], "/no/such/sasl"),
        ];
        for (flags, env, expected) in cases {
            let mut args = vec!["locks", "/x"];
            args.extend_from_slice(flags);
            let mut command = zkc(connect, &args);
            for (key, value) in env {
                command.env(key, value);
            }
            let started = Instant::now();
            let output = command.output().await.unwrap();
            assert_eq!(
                output.status.code(),
                Some(64),
                "{flags:?} {env:?}: {}",
                stderr(&output)
            );
            assert!(
                stderr(&output).contains(expected),
                "{flags:?} {env:?}: {}",
                stderr(&output)
            );
            // The command line's words, never the library's.
            assert!(
                !stderr(&output).contains("FrameworkBuilder"),
                "{flags:?}: {}",
                stderr(&output)
            );
            assert!(started.elapsed() < Duration::from_secs(2));
        }
        // Client certificates are checked when read: an X.509 v1 one (what
        // `openssl x509 -req` makes without -extfile), one that is not DER,
        // and a key of another certificate are usage errors at once, naming
        // the file (the framework's test certificates, see their README).
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../framework/tests/data");
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let file = |name: &str| data.join(name).display().to_string();
        let garbage = garbage.display().to_string();
        for (cert, key, expected) in [
            (file("client-v1.pem"), file("client.key"), "X.509 v1"),
            (garbage.clone(), file("client.key"), "does not parse"),
            (
                file("client-v3.pem"),
                file("other.key"),
                "cannot be used together",
            ),
        ] {
            let ca = file("ca.pem");
            let args = [
                "locks",
                "/x",
                "--tls-ca",
                &ca,
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
            ];
            let started = Instant::now();
            let output = zkc(connect, &args).output().await.unwrap();
            let text = stderr(&output);
            assert_eq!(output.status.code(), Some(64), "{cert} {key}: {text}");
            assert!(text.contains(expected) && text.contains(&cert), "{text}");
            assert!(started.elapsed() < Duration::from_secs(1), "{text}");
        }
        // A password given through ZK_SASL never shows in an error.
        let output = zkc("tcp+tls://127.0.0.1:1", &["locks", "/x"])
            .env("ZK_SASL", "digest:alice:very-secret")
            .output()
            .await
            .unwrap();
        assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
        assert!(!stderr(&output).contains("very-secret"));
    })
    .await
    .expect("test timed out");
}

#[tokio::test]
async fn sasl_digest_from_the_environment_or_a_file() {
    tokio::time::timeout(TEST_LIMIT, async {
        if Backend::from_env().unwrap() != Backend::Real {
            eprintln!("SASL runs on the real backend (ZK_TEST_SERVER=real)");
            return;
        }
        if !Prerequisite::ZooKeeper.check("sasl_digest_from_the_environment_or_a_file") {
            return;
        }
        let server = ZooKeeperServer::builder()
            .sasl_digest_user("alice", "alice-secret")
            .require_sasl(true)
            .start_async()
            .await
            .unwrap();
        let connect = server.connect_string();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sasl");
        std::fs::write(&file, "digest:alice:alice-secret\n").unwrap();
        // The command sees neither the password nor the file holding it.
        for sasl in ["digest:alice:alice-secret".as_ref(), file.as_os_str()] {
            let output = zkc(&connect, &["lock", "/sasl-cli", "--", "env"])
                .env("ZK_SASL", sasl)
                .output()
                .await
                .unwrap();
            assert!(
                output.status.success(),
                "lock with SASL: {}",
                stderr(&output)
            );
            let env = String::from_utf8_lossy(&output.stdout);
            assert!(env.contains("ZK_CURATOR_FENCING_TOKEN="), "no env output");
            assert!(
                !env.contains("alice-secret") && !env.contains("ZK_SASL"),
                "the command got the SASL credentials"
            );
        }
        let output = zkc(&connect, &["locks", "/sasl-cli"])
            .env("ZK_SASL", &file)
            .output()
            .await
            .unwrap();
        assert!(
            output.status.success(),
            "SASL from a file: {}",
            stderr(&output)
        );
        // Revocation on SASL sessions: a holder asked to give the lock up
        // by another SASL session stops its command and exits 77.
        let holder = zkc(&connect, &["lock", "/sasl-revoke", "--", "sleep", "30"])
            .env("ZK_SASL", "digest:alice:alice-secret")
            .spawn()
            .unwrap();
        let started = Instant::now();
        loop {
            let listed = zkc(&connect, &["locks", "/sasl-revoke", "--json"])
                .env("ZK_SASL", "digest:alice:alice-secret")
                .output()
                .await
                .unwrap();
            if String::from_utf8_lossy(&listed.stdout).contains("\"holder\"") {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the holder never held"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let revoked = zkc(&connect, &["revoke", "/sasl-revoke", "--all"])
            .env("ZK_SASL", "digest:alice:alice-secret")
            .output()
            .await
            .unwrap();
        assert!(revoked.status.success(), "revoke: {}", stderr(&revoked));
        let output = tokio::time::timeout(Duration::from_secs(20), holder.wait_with_output())
            .await
            .expect("the revoked holder did not exit")
            .unwrap();
        assert_eq!(output.status.code(), Some(77), "{}", stderr(&output));
        // A wrong password: exit 69 at once, saying why.
        let started = Instant::now();
        let output = zkc(&connect, &["locks", "/sasl-cli"])
            .env("ZK_SASL", "digest:alice:wrong")
            .output()
            .await
            .unwrap();
        assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("authentication failed"),
            "{}",
            stderr(&output)
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
    })
    .await
    .expect("test timed out");
}
