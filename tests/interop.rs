//! Interop with Apache Curator (JVM): a Java program using Debian's
//! `libcurator-recipes-java` contends on the same paths as the Rust recipes,
//! and mutual exclusion (or the lease bound) must hold across both
//! languages. Both sides check it through marker files in one directory.
//!
//! Needs `javac` and Curator's jars (`apt-get install -y default-jdk-headless
//! libcurator-recipes-java`); skipped with a notice without them, unless
//! `ZK_REQUIRE_INTEROP=1` (as CI sets it).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use common::{framework, server, unique_path};
use tokio::io::AsyncReadExt;
use zk_curator::{InterProcessMutex, InterProcessReadWriteLock};

const CURATOR_JAR: &str = "/usr/share/java/curator-recipes.jar";
const JAVA_TIMEOUT: Duration = Duration::from_secs(120);

/// The compiled Java participant (its class directory and classpath), or
/// `None` with a notice when the JVM side is not installed.
fn java_participant() -> Option<&'static (tempfile::TempDir, String)> {
    static COMPILED: OnceLock<Option<(tempfile::TempDir, String)>> = OnceLock::new();
    COMPILED
        .get_or_init(|| {
            let has_javac = std::process::Command::new("javac").arg("-version").output().is_ok_and(|o| o.status.success());
            if !has_javac || !Path::new(CURATOR_JAR).exists() {
                if std::env::var("ZK_REQUIRE_INTEROP").is_ok_and(|v| v == "1") {
                    panic!("ZK_REQUIRE_INTEROP=1 but javac or {CURATOR_JAR} is missing: apt-get install -y default-jdk-headless libcurator-recipes-java");
                }
                eprintln!("NOTICE: javac or Apache Curator missing (apt-get install -y default-jdk-headless libcurator-recipes-java); interop tests skipped");
                return None;
            }
            let classes = tempfile::tempdir().unwrap();
            let slf4j = ["/usr/share/java/slf4j-nop.jar", "/usr/share/java/slf4j-simple.jar"]
                .into_iter()
                .find(|p| Path::new(p).exists())
                .unwrap_or_default();
            let classpath = format!("{CURATOR_JAR}:{slf4j}");
            let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/Interop.java");
            let status = std::process::Command::new("javac")
                .args(["-cp", &classpath, "-d"])
                .arg(classes.path())
                .arg(&source)
                .status()
                .unwrap();
            assert!(status.success(), "javac failed");
            let run_classpath = format!("{}:{classpath}", classes.path().display());
            Some((classes, run_classpath))
        })
        .as_ref()
}

/// Runs the Java participant; returns its exit status and output.
async fn run_java(
    connect: &str,
    mode: &str,
    path: &str,
    rounds: u32,
    markers: &Path,
    leases: u32,
) -> (i32, String) {
    let (_, classpath) = java_participant().unwrap();
    let mut child = tokio::process::Command::new("java")
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
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (mut out, mut err) = (String::new(), String::new());
    let run = async {
        let (_, _, status) = tokio::join!(
            stdout.read_to_string(&mut out),
            stderr.read_to_string(&mut err),
            child.wait()
        );
        status.unwrap()
    };
    let status = tokio::time::timeout(JAVA_TIMEOUT, run)
        .await
        .expect("the Java participant hung");
    (status.code().unwrap_or(-1), format!("{out}{err}"))
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
    let ok = allowed(markers, kind, leases);
    tokio::time::sleep(Duration::from_millis(15)).await;
    std::fs::remove_file(&mine).unwrap();
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_and_curator_mutexes_exclude_each_other() {
    let Some(server) = server() else { return };
    if java_participant().is_none() {
        return;
    }
    let path = unique_path("interop-mutex");
    let markers = tempfile::tempdir().unwrap();
    let connect = server.connect_string();
    let java = run_java(&connect, "mutex", &path, 15, markers.path(), 1);

    let mut rust = Vec::new();
    for worker in 0..2 {
        let (connect, path, markers) = (connect.clone(), path.clone(), markers.path().to_owned());
        rust.push(tokio::spawn(async move {
            let fw = framework(&connect).await;
            let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
            let (mut violations, mut saw_java) = (0, false);
            for round in 0..15 {
                mutex.acquire().await.unwrap();
                let queue = mutex.participant_nodes().await.unwrap();
                saw_java |= queue.len() > 1;
                if !critical_section(&markers, "w", &format!("{worker}-{round}"), 1).await {
                    violations += 1;
                }
                mutex.release().await.unwrap();
            }
            fw.close().await;
            (violations, saw_java)
        }));
    }
    let (status, output) = java.await;
    assert_eq!(status, 0, "Java side: {output}");
    let mut contended = false;
    for task in rust {
        let (violations, saw_others) = task.await.unwrap();
        assert_eq!(violations, 0, "a Rust holder shared the lock");
        contended |= saw_others;
    }
    assert!(contended, "the two languages never queued on each other");
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
    let java_writer = run_java(&connect, "write", &path, 8, markers.path(), 1);
    let java_reader = run_java(&connect, "read", &path, 12, markers.path(), 1);

    let mut rust = Vec::new();
    for (worker, kind) in [(0, "w"), (1, "r"), (2, "r")] {
        let (connect, path, markers) = (connect.clone(), path.clone(), markers.path().to_owned());
        rust.push(tokio::spawn(async move {
            let fw = framework(&connect).await;
            let rw = InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();
            let mut violations = 0;
            for round in 0..10 {
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
        tokio::join!(java_writer, java_reader);
    assert_eq!(writer_status, 0, "Java writer: {writer_out}");
    assert_eq!(reader_status, 0, "Java reader: {reader_out}");
    for task in rust {
        assert_eq!(
            task.await.unwrap(),
            0,
            "a Rust participant broke the read-write rule"
        );
    }
}
