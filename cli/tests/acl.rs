//! ACLs of what `lock` and `elect` create (issue 29, item 2): the default
//! under credentials (all for the creator, read for the world), `--acl` in
//! ZooKeeper's own forms and its short names, and the refusal of a node's
//! ACL (exit 70 at once, naming the path and the identity used).
//!
//! Digest credentials (`ZK_AUTH`) run on the chosen backend (the embedded
//! server by default, a real ZooKeeper with `ZK_TEST_SERVER=real`); SASL
//! and client certificates as identities (`sasl:`, `x509:`) on the real one
//! only: the embedded server has neither.
#![allow(clippy::unwrap_used, missing_docs)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::process::{Child, Command};
use zk_curator::{zk, Framework, TlsConfig};
use zk_curator_testing::backend::{Backend, Prerequisite};
use zk_curator_testing::{TestCertificates, TestingServer, ZooKeeperServer};

const BIN: &str = env!("CARGO_BIN_EXE_zk-curator");
/// The bound on each test body (a real ZooKeeper takes seconds to start).
const TEST_LIMIT: Duration = Duration::from_secs(60);
/// The bound on one wait for a condition.
const WAIT_LIMIT: Duration = Duration::from_secs(20);
/// How soon a refusal by an ACL must end `lock` or `elect`.
const REFUSAL_LIMIT: Duration = Duration::from_secs(2);

/// One server for the digest tests of this file.
fn server() -> &'static TestingServer {
    static SERVER: OnceLock<TestingServer> = OnceLock::new();
    SERVER.get_or_init(|| TestingServer::start().expect("test server"))
}

async fn bounded<F: Future>(body: F) -> F::Output {
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .expect("test timed out")
}

/// A top-level path of its own for each test: a parent shared between
/// tests would belong to whoever created it first.
fn unique(name: &str) -> String {
    format!("/acl-{name}-{}", std::process::id())
}

/// Who runs `zk-curator`, and how it proves it.
#[derive(Clone, Debug)]
enum Creds {
    Anonymous,
    /// `ZK_AUTH=user:password`.
    Digest(&'static str, &'static str),
    /// `ZK_SASL=digest:user:password`.
    Sasl(&'static str, &'static str),
    /// `--tls-ca/--tls-cert/--tls-key`.
    Cert {
        ca: PathBuf,
        cert: PathBuf,
        key: PathBuf,
    },
}

/// `zk-curator args` against `connect` as `creds`; output captured, the
/// process killed if the test drops it.
fn zkc(connect: &str, creds: &Creds, args: &[&str]) -> Command {
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
    match creds {
        Creds::Anonymous => {}
        Creds::Digest(user, password) => {
            command.env("ZK_AUTH", format!("{user}:{password}"));
        }
        Creds::Sasl(user, password) => {
            command.env("ZK_SASL", format!("digest:{user}:{password}"));
        }
        Creds::Cert { ca, cert, key } => {
            command
                .env("ZK_TLS_CA", ca)
                .env("ZK_TLS_CERT", cert)
                .env("ZK_TLS_KEY", key);
        }
    }
    command
}

async fn run(connect: &str, creds: &Creds, args: &[&str]) -> Output {
    tokio::time::timeout(WAIT_LIMIT, zkc(connect, creds, args).output())
        .await
        .expect("zk-curator did not exit")
        .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A framework (connected) for `creds`, for what the command line cannot
/// do: read ACLs, delete someone else's node.
async fn framework(connect: &str, creds: &Creds) -> Framework {
    let mut builder = Framework::builder()
        .connect_string(connect)
        .connection_timeout(Duration::from_secs(15));
    match creds {
        Creds::Anonymous => {}
        Creds::Digest(user, password) => builder = builder.digest_auth(user, password),
        Creds::Sasl(user, password) => builder = builder.sasl_digest_md5(*user, *password),
        Creds::Cert { ca, cert, key } => {
            builder = builder.tls(TlsConfig::new().ca_file(ca).client_cert_files(cert, key));
        }
    }
    let framework = builder.build().unwrap();
    framework.start().unwrap();
    framework
        .block_until_connected(Duration::from_secs(15))
        .await
        .unwrap();
    framework
}

/// One ACL entry as `(scheme, id, permission)`.
type Entry = (String, String, String);

/// The ACL of `path`, as sorted entries.
async fn acl_of(framework: &Framework, path: &str) -> Vec<Entry> {
    let client = framework.client().await.unwrap();
    let (acl, _) = client.get_acl(path).await.unwrap();
    triples(&acl)
}

fn triples(acl: &[zk::Acl]) -> Vec<Entry> {
    let mut triples: Vec<_> = acl
        .iter()
        .map(|a| {
            (
                a.scheme().to_owned(),
                a.id().to_owned(),
                a.permission().to_string(),
            )
        })
        .collect();
    triples.sort();
    triples
}

/// What the default under credentials gives a node: all for `creator`
/// (`scheme`, `id`), read for the world.
fn creator_and_world_read(scheme: &str, id: &str) -> Vec<Entry> {
    let mut expected = vec![
        (scheme.to_owned(), id.to_owned(), "ALL".to_owned()),
        ("world".to_owned(), "anyone".to_owned(), "READ".to_owned()),
    ];
    expected.sort();
    expected
}

/// The `digest` ACL id of `user:password`, as ZooKeeper computes it:
/// `user:base64(sha1("user:password"))`.
fn digest_id(user: &str, password: &str) -> String {
    zk_curator_testing::embedded::acl::digest_id(format!("{user}:{password}").as_bytes())
}

/// A command that marks its start and runs until `release` appears.
fn gated_script(dir: &Path) -> (String, PathBuf, PathBuf) {
    let started = dir.join("started");
    let release = dir.join("release");
    let script = format!(
        "touch {st}; while [ ! -f {r} ]; do sleep 0.02; done",
        st = started.display(),
        r = release.display(),
    );
    (script, started, release)
}

/// Waits for `started` (written by `child`'s command), failing with
/// `child`'s output if it ends first.
async fn wait_started(child: &mut Child, started: &Path) {
    let deadline = Instant::now() + WAIT_LIMIT;
    while !started.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut text = String::new();
            if let Some(mut err) = child.stderr.take() {
                tokio::io::AsyncReadExt::read_to_string(&mut err, &mut text)
                    .await
                    .unwrap();
            }
            panic!("zk-curator ended ({status}) before its command started: {text}");
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {}",
            started.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for `child`'s end and returns its output.
async fn finish(child: Child) -> Output {
    tokio::time::timeout(WAIT_LIMIT, child.wait_with_output())
        .await
        .expect("zk-curator did not exit")
        .unwrap()
}

/// Waits until `locks PATH --json`, run as `creds`, lists one holder whose
/// label is `label`, and returns that participant.
async fn wait_for_holder(connect: &str, creds: &Creds, path: &str, label: &str) -> Value {
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        let output = run(connect, creds, &["locks", path, "--json"]).await;
        assert!(output.status.success(), "locks: {}", stderr(&output));
        let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
        let holder = listed["participants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["role"] == "holder")
            .cloned();
        if let Some(holder) = holder {
            assert_eq!(holder["identity"]["label"], label, "{listed}");
            return holder;
        }
        assert!(
            Instant::now() < deadline,
            "no holder of {path} listed: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// `verb PATH` as someone the ACL leaves out: exit 70 within
/// [`REFUSAL_LIMIT`], naming the path and `identity` (each of its parts),
/// and no password.
async fn refused_at_once(
    connect: &str,
    creds: &Creds,
    verb: &str,
    path: &str,
    identity: &[&str],
    secret: &str,
) {
    let started = Instant::now();
    let child = zkc(connect, creds, &[verb, path, "--", "true"])
        .spawn()
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(5), child.wait_with_output())
        .await
        .unwrap_or_else(|_| {
            panic!("{verb} {path} as {identity:?}: still waiting after 5 s (queued, not refused)")
        })
        .unwrap();
    let took = started.elapsed();
    let text = stderr(&output);
    assert_eq!(
        output.status.code(),
        Some(70),
        "{verb} as {identity:?}: {text}"
    );
    assert!(
        text.contains(path) && identity.iter().all(|part| text.contains(part)),
        "{verb} as {identity:?}: the message does not name the path and the identity: {text}"
    );
    assert!(!text.contains(secret), "the password shows: {text}");
    assert!(
        took < REFUSAL_LIMIT,
        "{verb} as {identity:?}: refused after {took:?}: {text}"
    );
    eprintln!("{verb} {path} as {identity:?}: exit 70 after {took:?}: {text}");
}

/// The scenario the issue asks for, on `connect`: `alice` holds a lock
/// with the default ACL; `bob` can neither queue on it nor delete it, and
/// is told at once; `reader` (anonymous where the server allows it) still
/// sees alice as the holder; the lock path and alice's node carry exactly
/// all for alice (`alice_acl`) and read for the world.
#[allow(clippy::too_many_arguments)]
async fn alice_keeps_bob_out(
    connect: &str,
    path: &str,
    alice: &Creds,
    bob: &Creds,
    reader: &Creds,
    alice_acl: (&str, &str),
    bob_identity: &[&str],
    bob_secret: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let (script, started, release) = gated_script(dir.path());
    let mut holder = zkc(
        connect,
        alice,
        &["lock", path, "--id", "alice", "--", "sh", "-c", &script],
    )
    .spawn()
    .unwrap();
    wait_started(&mut holder, &started).await;
    let held = wait_for_holder(connect, reader, path, "alice").await;
    let node = held["node"].as_str().unwrap().to_owned();

    refused_at_once(connect, bob, "lock", path, bob_identity, bob_secret).await;

    let bob_client = framework(connect, bob).await;
    let deleted = bob_client.client().await.unwrap().delete(&node, None).await;
    assert_eq!(deleted, Err(zk::Error::NoAuth), "bob deleted alice's node");
    // Alice still holds, and everyone still sees it.
    wait_for_holder(connect, reader, path, "alice").await;

    bob_client.close().await;
    // Read as alice: only a reader with ADMIN sees a digest id's hash.
    let alice_client = framework(connect, alice).await;
    let expected = creator_and_world_read(alice_acl.0, alice_acl.1);
    assert_eq!(acl_of(&alice_client, path).await, expected, "{path}");
    assert_eq!(acl_of(&alice_client, &node).await, expected, "{node}");
    alice_client.close().await;

    std::fs::write(&release, "").unwrap();
    let output = finish(holder).await;
    assert!(output.status.success(), "alice's lock: {}", stderr(&output));
}

#[tokio::test(flavor = "multi_thread")]
async fn digest_credentials_keep_others_out_by_default() {
    bounded(async {
        let connect = server().connect_string();
        let alice_id = digest_id("alice", "alice-pw");
        alice_keeps_bob_out(
            &connect,
            &unique("digest"),
            &Creds::Digest("alice", "alice-pw"),
            &Creds::Digest("bob", "bob-pw"),
            &Creds::Anonymous,
            ("digest", &alice_id),
            &["digest:bob"],
            "bob-pw",
        )
        .await;
    })
    .await;
}

/// A namespace made by a session with credentials belongs to it, with read
/// for the world: another session still uses the namespace to read (its
/// start does not try to create it again, which ZooKeeper would refuse for
/// want of CREATE on its parent) and lists alice as the holder.
#[tokio::test(flavor = "multi_thread")]
async fn a_namespace_made_with_credentials_stays_readable() {
    bounded(async {
        let connect = server().connect_string();
        // Below a parent made on the way, which is alice's as well.
        let namespace = format!("{}/ns", unique("namespace"));
        let alice = Creds::Digest("alice", "alice-pw");
        let dir = tempfile::tempdir().unwrap();
        let (script, started, release) = gated_script(dir.path());
        let mut holder = zkc(
            &connect,
            &alice,
            &[
                "lock",
                "--namespace",
                &namespace,
                "/inner",
                "--id",
                "alice",
                "--",
                "sh",
                "-c",
                &script,
            ],
        )
        .spawn()
        .unwrap();
        wait_started(&mut holder, &started).await;
        let reader = framework(&connect, &alice).await;
        let expected = creator_and_world_read("digest", &digest_id("alice", "alice-pw"));
        assert_eq!(acl_of(&reader, &namespace).await, expected, "{namespace}");
        reader.close().await;
        let started = Instant::now();
        let output = run(
            &connect,
            &Creds::Anonymous,
            &["locks", "--namespace", &namespace, "/inner", "--json"],
        )
        .await;
        let took = started.elapsed();
        assert!(
            output.status.success(),
            "took {took:?}: {}",
            stderr(&output)
        );
        let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(listed["participants"][0]["role"], "holder", "{listed}");
        assert_eq!(
            listed["participants"][0]["identity"]["label"], "alice",
            "{listed}"
        );
        std::fs::write(&release, "").unwrap();
        assert!(finish(holder).await.status.success());
    })
    .await;
}

/// `--acl` sets exactly what it is given, in ZooKeeper's form and by the
/// short names; without credentials and without `--acl`, nodes stay open
/// to everyone, as before.
#[tokio::test(flavor = "multi_thread")]
async fn acl_flags_set_exactly_what_was_asked() {
    bounded(async {
        let connect = server().connect_string();
        let alice = Creds::Digest("alice", "alice-pw");
        let alice_id = digest_id("alice", "alice-pw");
        // Alice reads: only a reader with ADMIN sees a digest id's hash.
        let reader = framework(&connect, &alice).await;
        let digest_spec = format!("digest:{alice_id}:cdrwa");
        let entry = |scheme: &str, id: &str, perms: &str| {
            (scheme.to_owned(), id.to_owned(), perms.to_owned())
        };
        let cases: Vec<(&str, Creds, Vec<&str>, Vec<Entry>)> = vec![
            (
                "explicit",
                alice.clone(),
                vec!["--acl", "world:anyone:r", "--acl", &digest_spec],
                vec![
                    entry("digest", &alice_id, "ALL"),
                    entry("world", "anyone", "READ"),
                ],
            ),
            (
                "names",
                alice.clone(),
                vec!["--acl", "creator", "--acl", "world-read"],
                vec![
                    entry("digest", &alice_id, "ALL"),
                    entry("world", "anyone", "READ"),
                ],
            ),
            (
                "open",
                alice.clone(),
                vec!["--acl", "open"],
                vec![entry("world", "anyone", "ALL")],
            ),
            (
                "permissions",
                alice.clone(),
                vec!["--acl", "auth::rwa", "--acl", "world:anyone:cdr"],
                vec![
                    entry("digest", &alice_id, "READ|WRITE|ADMIN"),
                    entry("world", "anyone", "READ|CREATE|DELETE"),
                ],
            ),
            (
                "anonymous",
                Creds::Anonymous,
                vec![],
                vec![entry("world", "anyone", "ALL")],
            ),
        ];
        for (name, creds, flags, mut expected) in cases {
            expected.sort();
            let path = unique(name);
            let dir = tempfile::tempdir().unwrap();
            let (script, started, release) = gated_script(dir.path());
            let noted = dir.path().join("node");
            let script = format!(
                "echo \"$ZK_CURATOR_LOCK_NODE\" > {}; {script}",
                noted.display()
            );
            let mut args = vec!["lock", path.as_str()];
            args.extend(flags.iter().copied());
            args.extend(["--", "sh", "-c", &script]);
            let mut holder = zkc(&connect, &creds, &args).spawn().unwrap();
            wait_started(&mut holder, &started).await;
            // Read while held: an empty lock path is a container the server
            // may delete once the lock is released.
            let node = std::fs::read_to_string(&noted).unwrap();
            let node = node.trim();
            assert!(node.starts_with(&format!("{path}/")), "{name}: {node}");
            assert_eq!(acl_of(&reader, &path).await, expected, "{name}: {path}");
            assert_eq!(acl_of(&reader, node).await, expected, "{name}: {node}");
            std::fs::write(&release, "").unwrap();
            let output = finish(holder).await;
            assert!(output.status.success(), "{name}: {}", stderr(&output));
        }
        reader.close().await;
    })
    .await;
}

/// `auth::` (the creator) with no identity to stand for is refused by the
/// server as an invalid ACL: exit 70 at once, saying the session was
/// anonymous.
#[tokio::test(flavor = "multi_thread")]
async fn creator_acl_without_credentials_is_refused_at_once() {
    bounded(async {
        let connect = server().connect_string();
        for verb in ["lock", "elect"] {
            let path = unique(&format!("anonymous-creator-{verb}"));
            let started = Instant::now();
            let output = run(
                &connect,
                &Creds::Anonymous,
                &[verb, &path, "--acl", "creator", "--", "true"],
            )
            .await;
            let took = started.elapsed();
            let text = stderr(&output);
            assert_eq!(output.status.code(), Some(70), "{verb}: {text}");
            assert!(
                text.contains(&path) && text.contains("anonymous"),
                "{verb}: {text}"
            );
            assert!(took < REFUSAL_LIMIT, "{verb}: took {took:?}: {text}");
            eprintln!("{verb} --acl creator, anonymous: exit 70 after {took:?}: {text}");
        }
    })
    .await;
}

/// A malformed `--acl` is a usage error (exit 64) before any connection,
/// and the message names the accepted forms.
#[tokio::test(flavor = "multi_thread")]
async fn malformed_acls_are_usage_errors() {
    bounded(async {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let connect = listener.local_addr().unwrap().to_string();
        let bad = [
            "world:anyone",
            "world:anyone:",
            "world:anyone:rx",
            "world:anyone:rr",
            "world:someone:r",
            "wrold:anyone:r",
            ":anyone:r",
            "auth:alice:cdrwa",
            "digest:alice:cdrwa",
            "digest:alice:hunter2:cdrwa",
            "sasl::r",
            "x509::r",
            "ip:not-an-address:r",
            "ip:10.0.0.0/33:r",
            "everyone",
            "",
        ];
        for spec in bad {
            for verb in ["lock", "elect"] {
                let started = Instant::now();
                let output = run(
                    &connect,
                    &Creds::Digest("alice", "alice-pw"),
                    &[
                        verb,
                        "/x",
                        "--acl",
                        spec,
                        "--connection-timeout",
                        "10s",
                        "--",
                        "true",
                    ],
                )
                .await;
                let took = started.elapsed();
                let text = stderr(&output);
                assert_eq!(
                    output.status.code(),
                    Some(64),
                    "{verb} --acl {spec:?}: {text}"
                );
                assert!(
                    text.contains("SCHEME:ID:PERMS") && text.contains("world-read"),
                    "{verb} --acl {spec:?}: the accepted forms are not named: {text}"
                );
                assert!(
                    !text.contains("alice-pw") && !text.contains("hunter2"),
                    "a password shows: {text}"
                );
                assert!(took < Duration::from_secs(3), "{verb} {spec:?}: {took:?}");
            }
        }
        assert!(
            listener.accept().is_err(),
            "a connection was tried for a malformed --acl"
        );
    })
    .await;
}

/// `elect` under credentials: the election path and the participant's node
/// carry all for the creator and read for the world; another identity
/// cannot join (exit 70 at once).
#[tokio::test(flavor = "multi_thread")]
async fn elect_nodes_carry_the_default_acl() {
    bounded(async {
        let connect = server().connect_string();
        let path = unique("elect");
        let alice = Creds::Digest("alice", "alice-pw");
        let dir = tempfile::tempdir().unwrap();
        let (script, started, release) = gated_script(dir.path());
        let mut leader = zkc(
            &connect,
            &alice,
            &["elect", &path, "--id", "alice", "--", "sh", "-c", &script],
        )
        .spawn()
        .unwrap();
        wait_started(&mut leader, &started).await;
        let output = run(&connect, &Creds::Anonymous, &["leader", &path, "--json"]).await;
        assert!(output.status.success(), "leader: {}", stderr(&output));
        let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(listed["leader"]["id"], "alice", "{listed}");
        let node = listed["leader"]["node"].as_str().unwrap().to_owned();
        let reader = framework(&connect, &alice).await;
        let expected = creator_and_world_read("digest", &digest_id("alice", "alice-pw"));
        assert_eq!(acl_of(&reader, &path).await, expected, "{path}");
        assert_eq!(acl_of(&reader, &node).await, expected, "{node}");
        reader.close().await;
        refused_at_once(
            &connect,
            &Creds::Digest("bob", "bob-pw"),
            "elect",
            &path,
            &["digest:bob"],
            "bob-pw",
        )
        .await;
        std::fs::write(&release, "").unwrap();
        let output = finish(leader).await;
        assert!(
            output.status.success(),
            "alice's elect: {}",
            stderr(&output)
        );
    })
    .await;
}

/// A client certificate the server knows no identity for (the embedded
/// server has no x509 provider): the default `auth` entry stands for
/// nobody, and the server calls the ACL invalid. `lock` says so at once,
/// naming the certificate and what to do, instead of leaving the nodes
/// open; `--acl open` asks for them open.
#[tokio::test(flavor = "multi_thread")]
async fn a_certificate_the_server_does_not_know_is_told_at_once() {
    bounded(async {
        if Backend::from_env().unwrap() != Backend::Embedded {
            eprintln!("the embedded server's TLS only: ZooKeeper knows certificates (x509)");
            return;
        }
        let certs = TestCertificates::generate().unwrap();
        let tls = zk_curator_testing::embedded::TlsConfig::from_pem(
            certs.server().cert_pem().as_bytes(),
            certs.server().key_pem().as_bytes(),
        )
        .unwrap()
        .with_client_ca_pem(certs.ca().cert_pem().as_bytes())
        .unwrap();
        let server = zk_curator_testing::EmbeddedServer::builder()
            .tls_only(tls)
            .start()
            .await
            .unwrap();
        let connect = format!("tcp+tls://{}", server.address());
        let creds = Creds::Cert {
            ca: certs.ca().cert_path().to_owned(),
            cert: certs.client().cert_path().to_owned(),
            key: certs.client().key_path().to_owned(),
        };
        let cert = certs.client().cert_path().display().to_string();
        let path = unique("unknown-certificate");
        let started = Instant::now();
        let output = run(&connect, &creds, &["lock", &path, "--", "true"]).await;
        let took = started.elapsed();
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(70), "{text}");
        for part in [
            path.as_str(),
            "x509 certificate",
            &cert,
            "authProvider.x509",
            "--acl",
        ] {
            assert!(text.contains(part), "{part:?} is not named: {text}");
        }
        assert!(took < REFUSAL_LIMIT, "took {took:?}: {text}");
        eprintln!("unknown certificate: exit 70 after {took:?}: {text}");
        let output = run(
            &connect,
            &creds,
            &["lock", &path, "--acl", "open", "--", "true"],
        )
        .await;
        assert!(output.status.success(), "{}", stderr(&output));
    })
    .await;
}

/// Whether the real server runs here; says why not otherwise.
fn real_server_wanted(test: &str) -> bool {
    if Backend::from_env().unwrap() != Backend::Real {
        eprintln!("{test}: SASL and x509 identities need the real backend (ZK_TEST_SERVER=real)");
        return false;
    }
    Prerequisite::ZooKeeper.check(test)
}

/// SASL (DIGEST-MD5, required by the server): alice's lock keeps bob out;
/// carol (another SASL user) still sees alice as the holder.
#[tokio::test(flavor = "multi_thread")]
async fn sasl_identities_keep_others_out_by_default() {
    bounded(async {
        if !real_server_wanted("sasl_identities_keep_others_out_by_default") {
            return;
        }
        let server = ZooKeeperServer::builder()
            .sasl_digest_user("alice", "alice-pw")
            .sasl_digest_user("bob", "bob-pw")
            .sasl_digest_user("carol", "carol-pw")
            .require_sasl(true)
            .start_async()
            .await
            .unwrap();
        alice_keeps_bob_out(
            &server.connect_string(),
            &unique("sasl"),
            &Creds::Sasl("alice", "alice-pw"),
            &Creds::Sasl("bob", "bob-pw"),
            &Creds::Sasl("carol", "carol-pw"),
            ("sasl", "alice"),
            &["sasl:bob"],
            "bob-pw",
        )
        .await;
    })
    .await;
}

/// Client certificates as identities (ZooKeeper's x509 provider, client
/// certificates required): alice's lock keeps bob out; the ACL names
/// alice's certificate subject.
#[tokio::test(flavor = "multi_thread")]
async fn certificate_identities_keep_others_out_by_default() {
    bounded(async {
        if !real_server_wanted("certificate_identities_keep_others_out_by_default") {
            return;
        }
        let certs = TestCertificates::generate().unwrap();
        let server = ZooKeeperServer::builder()
            .tls(certs.server_tls())
            .start_async()
            .await
            .unwrap();
        let connect = server.secure_connect_string().unwrap();
        let creds = |name: &str| {
            let identity = certs.issue_client(name).unwrap();
            Creds::Cert {
                ca: certs.ca().cert_path().to_owned(),
                cert: identity.cert_path().to_owned(),
                key: identity.key_path().to_owned(),
            }
        };
        let (alice, bob, carol) = (creds("alice"), creds("bob"), creds("carol"));
        let Creds::Cert { cert: bob_cert, .. } = &bob else {
            unreachable!()
        };
        let bob_file = bob_cert.display().to_string();
        alice_keeps_bob_out(
            &connect,
            &unique("x509"),
            &alice,
            &bob,
            &carol,
            ("x509", "CN=zk-curator-test-alice,O=zk-curator tests"),
            // The file, and the subject as the server knows it.
            &[
                "x509 certificate",
                &bob_file,
                "x509:CN=zk-curator-test-bob,O=zk-curator tests",
            ],
            "PRIVATE KEY",
        )
        .await;
    })
    .await;
}
