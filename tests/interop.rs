//! Interop with Apache Curator (JVM): a Java program using Debian's
//! `libcurator-recipes-java` contends on the same paths as the Rust recipes,
//! and mutual exclusion (or the lease bound) must hold across both
//! languages. Both sides check it through marker files in one directory.
//!
//! The mutex contention also runs over TLS: a real ZooKeeper serving TLS only
//! and requiring client certificates, the Rust side connecting through
//! [`TlsConfig`], the Java side through the ZooKeeper client's system
//! properties (Netty socket, PEM key and trust stores); see [`Transport`].
//!
//! Cohort hand-off is fair to Curator: a Curator waiter on the path a busy
//! cohort framework keeps passing among its tasks gets the lock behind at
//! most `max_passes + 1` of its holds (`cohort_busy`).
//!
//! Needs `javac` and Curator's jars (`apt-get install -y default-jdk-headless
//! libcurator-recipes-java`): without them each test fails saying so, or is
//! skipped with a notice under `ZK_SKIP_MISSING=curator` (or `=1`). The TLS
//! test needs a real ZooKeeper too (`zookeeper`, `ZK_SKIP_MISSING=zookeeper`).
#![allow(clippy::unwrap_used)]

mod cohort_busy;
mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use common::{bounded, framework, framework_with, server, unique_path, LONG_BOUND};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt};
use zk_curator::framework::TlsConfig;
use zk_curator::{CohortPolicy, Framework, InterProcessMutex, InterProcessReadWriteLock};
use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::curator::{self, JavaProgram};
use zk_curator_testing::{TestCertificates, ZooKeeperServer};

const JAVA_TIMEOUT: Duration = Duration::from_secs(120);

/// How both languages reach the server.
#[derive(Clone, Debug)]
enum Transport {
    /// The plain client port.
    Plaintext,
    /// TLS with a client certificate on both sides: the Rust side through
    /// [`TlsConfig`], the JVM through the ZooKeeper client's system
    /// properties (`ZKClientConfig`, `ClientX509Util`).
    MutualTls {
        /// The authority that signed the server's certificate (PEM).
        ca: PathBuf,
        /// The client's certificate and key, as separate PEM files (Rust)
        /// and as one bundle, key then certificate (ZooKeeper's PEM key store).
        cert: PathBuf,
        key: PathBuf,
        bundle: PathBuf,
    },
}

impl Transport {
    /// TLS as the client identity of `certs`, trusting its authority.
    fn mutual_tls(certs: &TestCertificates) -> Transport {
        Transport::MutualTls {
            ca: certs.ca().cert_path().to_owned(),
            cert: certs.client().cert_path().to_owned(),
            key: certs.client().key_path().to_owned(),
            bundle: certs.client().bundle_path().to_owned(),
        }
    }

    /// The JVM options that make Curator's ZooKeeper client use it.
    fn jvm_properties(&self) -> Vec<String> {
        match self {
            Transport::Plaintext => Vec::new(),
            Transport::MutualTls { ca, bundle, .. } => vec![
                "-Dzookeeper.client.secure=true".to_owned(),
                "-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty"
                    .to_owned(),
                format!("-Dzookeeper.ssl.keyStore.location={}", bundle.display()),
                "-Dzookeeper.ssl.keyStore.type=PEM".to_owned(),
                format!("-Dzookeeper.ssl.trustStore.location={}", ca.display()),
                "-Dzookeeper.ssl.trustStore.type=PEM".to_owned(),
            ],
        }
    }

    /// The line the Java participant prints once connected (what its
    /// ZooKeeper client was configured with).
    fn java_connected_line(&self) -> &'static str {
        match self {
            Transport::Plaintext => "connected secure=false",
            Transport::MutualTls { .. } => {
                "connected secure=true socket=org.apache.zookeeper.ClientCnxnSocketNetty"
            }
        }
    }

    /// A started, connected framework on `connect` through this transport.
    async fn framework(&self, connect: &str) -> Framework {
        match self {
            Transport::Plaintext => framework(connect).await,
            Transport::MutualTls { ca, cert, key, .. } => {
                let tls = TlsConfig::new().ca_file(ca).client_cert_files(cert, key);
                framework_with(connect, |b| b.tls(tls)).await
            }
        }
    }
}

/// The compiled Java participant (its class directory and classpath), or
/// `None` when the JVM side is not installed and `ZK_SKIP_MISSING` asks to
/// skip (without it, the test fails naming what to install: the testing
/// crate's one rule, [`Prerequisite::check`]).
fn java_participant() -> Option<&'static JavaProgram> {
    static COMPILED: OnceLock<Option<JavaProgram>> = OnceLock::new();
    COMPILED
        .get_or_init(|| {
            let test = std::thread::current()
                .name()
                .unwrap_or("interop")
                .to_owned();
            if !Prerequisite::Curator.check(&test) {
                return None;
            }
            let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/Interop.java");
            Some(curator::compile(&source))
        })
        .as_ref()
}

/// A running Java participant.
struct Java {
    child: tokio::process::Child,
    stdout: tokio::io::BufReader<tokio::process::ChildStdout>,
    output: String,
}

impl Java {
    /// Starts the Java participant and waits until it is connected through
    /// `transport` and about to take the lock. `connect` is Curator's
    /// (bare `host:port`, even for TLS).
    async fn start(
        transport: &Transport,
        connect: &str,
        mode: &str,
        path: &str,
        rounds: u32,
        markers: &Path,
        leases: u32,
    ) -> Java {
        let classpath = &java_participant().unwrap().classpath;
        let mut child = tokio::process::Command::new("java")
            .args(transport.jvm_properties())
            .args([
                "-cp",
                classpath,
                "Interop",
                connect,
                mode,
                path,
                &rounds.to_string(),
            ])
            .arg(markers)
            .arg(leases.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
        let mut java = Java {
            child,
            stdout,
            output: String::new(),
        };
        let ready = tokio::time::timeout(JAVA_TIMEOUT, async {
            loop {
                let mut line = String::new();
                if java.stdout.read_line(&mut line).await.unwrap() == 0 {
                    return false;
                }
                java.output.push_str(&line);
                if line.trim() == "ready" {
                    return true;
                }
            }
        })
        .await;
        assert_eq!(
            ready,
            Ok(true),
            "the Java participant did not start: {}",
            java.output
        );
        assert!(
            java.output
                .lines()
                .any(|l| l.trim() == transport.java_connected_line()),
            "the Java participant is not connected as {transport:?}: {}",
            java.output
        );
        java
    }

    /// Waits for the end; returns the exit status and everything it printed.
    async fn finish(mut self) -> (i32, String) {
        let run = async {
            self.stdout.read_to_string(&mut self.output).await.unwrap();
            self.child.wait().await.unwrap()
        };
        let status = tokio::time::timeout(JAVA_TIMEOUT, run)
            .await
            .expect("the Java participant hung");
        (status.code().unwrap_or(-1), self.output)
    }
}

/// Whether the shared log shows the languages taking turns both ways.
fn languages_alternated(markers: &Path) -> bool {
    let log = std::fs::read_to_string(markers.join("log")).unwrap_or_default();
    let turns: Vec<&str> = log.lines().collect();
    let switch = |a: &str, b: &str| turns.windows(2).any(|w| w[0] == a && w[1] == b);
    switch("java", "rust") && switch("rust", "java")
}

/// The same rule the Java side checks.
fn allowed(markers: &Path, kind: &str, leases: usize) -> bool {
    let names: Vec<String> = std::fs::read_dir(markers)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let count = |prefix: &str| names.iter().filter(|n| n.starts_with(prefix)).count();
    match kind {
        "w" => count("w-") == 1 && count("r-") == 0,
        "r" => count("w-") == 0,
        _ => count("s-") <= leases,
    }
}

/// One critical section of a Rust participant: marker in, check, marker out.
async fn critical_section(markers: &Path, kind: &str, id: &str, leases: usize) -> bool {
    let mine: PathBuf = markers.join(format!("{kind}-rust-{id}"));
    std::fs::File::create_new(&mine).unwrap();
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(markers.join("log"))
        .unwrap();
    log.write_all(b"rust\n").unwrap();
    let ok = allowed(markers, kind, leases);
    tokio::time::sleep(Duration::from_millis(15)).await;
    std::fs::remove_file(&mine).unwrap();
    ok
}

/// Rust participants loop until every Java participant is done (bounded),
/// so that both languages contend for the whole run.
const MAX_RUST_ROUNDS: u32 = 400;

/// Two Rust workers (`transport`, `connect`) and one Curator participant
/// (`java_connect`) take the mutex at one path in turns; no two may hold it
/// at once, and each language must hand it to the other at least once.
async fn mutexes_exclude_each_other(transport: Transport, connect: &str, java_connect: &str) {
    let path = unique_path("interop-mutex");
    let markers = tempfile::tempdir().unwrap();
    let java = Java::start(
        &transport,
        java_connect,
        "mutex",
        &path,
        15,
        markers.path(),
        1,
    )
    .await;
    let java_done = Arc::new(AtomicBool::new(false));

    let mut rust = Vec::new();
    for worker in 0..2 {
        let (transport, connect, path, markers, java_done) = (
            transport.clone(),
            connect.to_owned(),
            path.clone(),
            markers.path().to_owned(),
            java_done.clone(),
        );
        rust.push(tokio::spawn(async move {
            let fw = transport.framework(&connect).await;
            let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
            let mut violations = 0;
            for round in 0..MAX_RUST_ROUNDS {
                if java_done.load(Ordering::SeqCst) {
                    break;
                }
                mutex.acquire().await.unwrap();
                violations += u32::from(
                    !critical_section(&markers, "w", &format!("{worker}-{round}"), 1).await,
                );
                mutex.release().await.unwrap();
            }
            fw.close().await;
            violations
        }));
    }
    let (status, output) = java.finish().await;
    java_done.store(true, Ordering::SeqCst);
    assert_eq!(status, 0, "Java side: {output}");
    for task in rust {
        assert_eq!(task.await.unwrap(), 0, "a Rust holder shared the lock");
    }
    assert!(
        languages_alternated(markers.path()),
        "the two languages never took turns"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_and_curator_mutexes_exclude_each_other() {
    let Some(server) = server() else { return };
    if java_participant().is_none() {
        return;
    }
    let connect = server.connect_string();
    mutexes_exclude_each_other(Transport::Plaintext, &connect, &connect).await;
}

/// The same contention through the TLS port of a real ZooKeeper that serves
/// nothing else and refuses clients without a certificate from its
/// authority: both languages connect with mutual TLS, or the test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_and_curator_mutexes_exclude_each_other_over_tls() {
    let test = "rust_and_curator_mutexes_exclude_each_other_over_tls";
    if !Prerequisite::ZooKeeper.check(test) || java_participant().is_none() {
        return;
    }
    let certs = TestCertificates::generate().unwrap();
    let server = ZooKeeperServer::builder()
        .tls(certs.server_tls())
        .start_async()
        .await
        .unwrap();
    assert!(!server.serves_plaintext(), "the server must be TLS only");
    let rust_connect = server.secure_connect_string().unwrap();
    let java_connect = server.secure_address().unwrap().to_string();
    assert!(rust_connect.starts_with("tcp+tls://"), "{rust_connect}");
    mutexes_exclude_each_other(Transport::mutual_tls(&certs), &rust_connect, &java_connect).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_and_curator_read_write_locks_agree() {
    let Some(server) = server() else { return };
    if java_participant().is_none() {
        return;
    }
    let path = unique_path("interop-rw");
    let markers = tempfile::tempdir().unwrap();
    let connect = server.connect_string();
    let java_writer = Java::start(
        &Transport::Plaintext,
        &connect,
        "write",
        &path,
        8,
        markers.path(),
        1,
    )
    .await;
    let java_reader = Java::start(
        &Transport::Plaintext,
        &connect,
        "read",
        &path,
        12,
        markers.path(),
        1,
    )
    .await;
    let java_done = Arc::new(AtomicBool::new(false));

    let mut rust = Vec::new();
    for (worker, kind) in [(0, "w"), (1, "r"), (2, "r")] {
        let (connect, path, markers, java_done) = (
            connect.clone(),
            path.clone(),
            markers.path().to_owned(),
            java_done.clone(),
        );
        rust.push(tokio::spawn(async move {
            let fw = framework(&connect).await;
            let rw = InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();
            let mut violations = 0;
            for round in 0..MAX_RUST_ROUNDS {
                if java_done.load(Ordering::SeqCst) {
                    break;
                }
                let id = format!("{worker}-{round}");
                let ok = if kind == "w" {
                    let guard = rw.write_lock().lock().await.unwrap();
                    let ok = critical_section(&markers, kind, &id, 1).await;
                    guard.release().await.unwrap();
                    ok
                } else {
                    let guard = rw.read_lock().lock().await.unwrap();
                    let ok = critical_section(&markers, kind, &id, 1).await;
                    guard.release().await.unwrap();
                    ok
                };
                violations += usize::from(!ok);
            }
            fw.close().await;
            violations
        }));
    }
    let ((writer_status, writer_out), (reader_status, reader_out)) =
        tokio::join!(java_writer.finish(), java_reader.finish());
    java_done.store(true, Ordering::SeqCst);
    assert_eq!(writer_status, 0, "Java writer: {writer_out}");
    assert_eq!(reader_status, 0, "Java reader: {reader_out}");
    for task in rust {
        assert_eq!(
            task.await.unwrap(),
            0,
            "a Rust participant broke the read-write rule"
        );
    }
    assert!(
        languages_alternated(markers.path()),
        "the two languages never took turns"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_and_curator_semaphores_share_the_lease_bound() {
    use zk_curator::InterProcessSemaphoreV2;
    let Some(server) = server() else { return };
    if java_participant().is_none() {
        return;
    }
    const LEASES: u32 = 2;
    let path = unique_path("interop-semaphore");
    let markers = tempfile::tempdir().unwrap();
    let connect = server.connect_string();
    let java_a = Java::start(
        &Transport::Plaintext,
        &connect,
        "semaphore",
        &path,
        12,
        markers.path(),
        LEASES,
    )
    .await;
    let java_b = Java::start(
        &Transport::Plaintext,
        &connect,
        "semaphore",
        &path,
        12,
        markers.path(),
        LEASES,
    )
    .await;
    let java_done = Arc::new(AtomicBool::new(false));

    let mut rust = Vec::new();
    for worker in 0..2 {
        let (connect, path, markers, java_done) = (
            connect.clone(),
            path.clone(),
            markers.path().to_owned(),
            java_done.clone(),
        );
        rust.push(tokio::spawn(async move {
            let fw = framework(&connect).await;
            let semaphore = InterProcessSemaphoreV2::new(fw.clone(), &path, LEASES).unwrap();
            let mut violations = 0;
            for round in 0..MAX_RUST_ROUNDS {
                if java_done.load(Ordering::SeqCst) {
                    break;
                }
                let lease = semaphore.acquire().await.unwrap();
                let ok =
                    critical_section(&markers, "s", &format!("{worker}-{round}"), LEASES as usize)
                        .await;
                violations += u32::from(!ok);
                lease.release().await.unwrap();
            }
            fw.close().await;
            violations
        }));
    }
    let ((status_a, out_a), (status_b, out_b)) = tokio::join!(java_a.finish(), java_b.finish());
    java_done.store(true, Ordering::SeqCst);
    assert_eq!(status_a, 0, "Java participant: {out_a}");
    assert_eq!(status_b, 0, "Java participant: {out_b}");
    for task in rust {
        assert_eq!(
            task.await.unwrap(),
            0,
            "more than {LEASES} leases were out at once"
        );
    }
    assert!(
        languages_alternated(markers.path()),
        "the two languages never took turns"
    );
}

/// Cohort hand-off leaves Curator its turn (issue 24, fairness): eight
/// tasks of one framework with cohorting on (16 passes, or 1 s: with holds
/// of a write each, the pass count is what ends a run) take the mutex over
/// and over, passing it among themselves, while a Curator participant
/// takes it ten times. Each of its acquires waits through at most
/// `max_passes + 1` busy holds, counted in ZooKeeper's order (the busy
/// holds on nodes older than its own that wrote after its own was
/// created), and within `max_hold` plus a generous margin of wall time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_waiter_gets_its_turn_from_a_busy_cohort() {
    let Some(server) = server() else { return };
    if java_participant().is_none() {
        return;
    }
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let path = unique_path("interop-cohort-fair");
        let policy = CohortPolicy::new(16, Duration::from_secs(1));
        let busy = cohort_busy::Busy::start(&connect, &path, policy, 8).await;
        let markers = tempfile::tempdir().unwrap();
        let rounds = 10;
        let passes_before = busy.passes();
        let java = Java::start(
            &Transport::Plaintext,
            &connect,
            "mutex",
            &path,
            rounds,
            markers.path(),
            1,
        )
        .await;
        let (status, output) = java.finish().await;
        let passes = busy.passes() - passes_before;
        let holds = busy.stop().await;
        assert_eq!(status, 0, "Java side: {output}");
        let waits: Vec<(i64, u64)> = output
            .lines()
            .filter_map(|line| {
                let rest = line.trim().strip_prefix("held czxid=")?;
                let (czxid, waited) = rest.split_once(" waited_ms=")?;
                Some((czxid.parse().ok()?, waited.parse().ok()?))
            })
            .collect();
        assert_eq!(waits.len(), rounds as usize, "{output}");
        let behind: Vec<usize> = waits
            .iter()
            .map(|&(czxid, _)| cohort_busy::holds_behind(&holds, czxid))
            .collect();
        let longest_wait = waits.iter().map(|w| w.1).max().unwrap();
        let most_behind = behind.iter().copied().max().unwrap();
        println!(
            "Curator waiter beside a busy cohort ({} busy holds, {passes} passes meanwhile, \
             longest run {} holds): longest wait {longest_wait} ms, behind at most \
             {most_behind} busy holds (bound {}); per round: {:?}",
            holds.len(),
            cohort_busy::longest_run(&holds),
            policy.max_passes + 1,
            waits
                .iter()
                .zip(&behind)
                .map(|(w, b)| format!("{} ms/{b} holds", w.1))
                .collect::<Vec<_>>()
        );
        assert!(passes > 0, "the busy framework passed nothing meanwhile");
        assert!(
            most_behind <= policy.max_passes as usize + 1,
            "a Curator acquire waited through {most_behind} busy holds: {behind:?}"
        );
        let wall_bound = policy.max_hold + Duration::from_secs(5);
        assert!(
            Duration::from_millis(longest_wait) <= wall_bound,
            "a Curator acquire waited {longest_wait} ms (bound {wall_bound:?})"
        );
    })
    .await;
}
