//! Interop with kazoo (Python): a kazoo participant
//! (`tests/interop/kazoo_participant.py`, under Debian's `python3-kazoo`)
//! and zk-curator participants on one path, on the embedded server or
//! (`ZK_TEST_SERVER=real`) a real ZooKeeper.
//!
//! * In kazoo's layout ([`Layout::Kazoo`]) the two libraries exclude each
//!   other: a mutex beside kazoo's `Lock`, a read-write lock beside kazoo's
//!   `ReadLock` and `WriteLock`, a latch beside kazoo's `Election`. Both
//!   sides check each critical section through marker files in one
//!   directory, as `tests/interop.rs` does with Curator, and both log each
//!   section's wall-clock start and end: afterwards no writer's interval
//!   may overlap another section's.
//! * In Curator's layout beside kazoo's participants, an acquire fails at
//!   once with [`Error::LayoutConflict`] and leaves no node behind.
//!
//! Needs kazoo under `/usr/bin/python3` (`apt-get install python3-kazoo`):
//! without it each test fails saying so, or is skipped with a notice under
//! `ZK_SKIP_MISSING=kazoo` (or `=1`).
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{bounded, children, framework, raw_client, server, unique_path, LONG_BOUND};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use zk_curator::recipes::layout::Layout;
use zk_curator::{
    Error, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2, LeaderElection,
    LeaderLatch,
};
use zk_curator_testing::backend::{Prerequisite, DEBIAN_PYTHON};

/// The bound on one kazoo participant's run.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a refused acquire may take: one round trip and a delete, on
/// loopback, with room for a loaded machine; far below any wait for a lock.
const AT_ONCE: Duration = Duration::from_secs(2);
/// The kazoo participant's semaphore's leases.
const LEASES: u32 = 2;
/// A Rust participant's pause between two holds.
const PAUSE: Duration = Duration::from_millis(25);
/// Rust rounds go on until the kazoo side is done, within this bound.
const MAX_RUST_ROUNDS: u32 = 400;

fn kazoo_available() -> bool {
    let test = std::thread::current()
        .name()
        .unwrap_or("kazoo interop")
        .to_owned();
    Prerequisite::Kazoo.check(&test)
}

/// A running kazoo participant.
struct Kazoo {
    child: tokio::process::Child,
    stdout: tokio::io::BufReader<tokio::process::ChildStdout>,
    output: String,
}

impl Kazoo {
    /// Starts the participant in `mode` and waits until it is connected.
    async fn start(connect: &str, mode: &str, path: &str, rounds: u32, markers: &Path) -> Kazoo {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/kazoo_participant.py");
        let mut child = tokio::process::Command::new(DEBIAN_PYTHON)
            .arg(script)
            .args([connect, mode, path, &rounds.to_string()])
            .arg(markers)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
        let mut kazoo = Kazoo {
            child,
            stdout,
            output: String::new(),
        };
        kazoo.wait_for_line("ready").await;
        kazoo
    }

    async fn wait_for_line(&mut self, wanted: &str) {
        let seen = tokio::time::timeout(PYTHON_TIMEOUT, async {
            loop {
                let mut line = String::new();
                if self.stdout.read_line(&mut line).await.unwrap() == 0 {
                    return false;
                }
                self.output.push_str(&line);
                if line.trim() == wanted {
                    return true;
                }
            }
        })
        .await;
        assert_eq!(
            seen,
            Ok(true),
            "the kazoo participant never said {wanted:?}: {}",
            self.output
        );
    }

    /// Closes its standard input (a `hold` releases then) and waits for
    /// the end: its exit status and everything it printed.
    async fn finish(mut self) -> (i32, String) {
        if let Some(mut stdin) = self.child.stdin.take() {
            stdin.shutdown().await.ok();
        }
        let run = async {
            self.stdout.read_to_string(&mut self.output).await.unwrap();
            self.child.wait().await.unwrap()
        };
        let status = tokio::time::timeout(PYTHON_TIMEOUT, run)
            .await
            .expect("the kazoo participant hung");
        (status.code().unwrap_or(-1), self.output)
    }
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The rule both languages check inside a section.
fn allowed(markers: &Path, kind: &str) -> bool {
    let names: Vec<String> = std::fs::read_dir(markers)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let count = |prefix: &str| names.iter().filter(|n| n.starts_with(prefix)).count();
    match kind {
        "w" => count("w-") == 1 && count("r-") == 0,
        _ => count("w-") == 0,
    }
}

/// One critical section of a Rust participant, as the Python side's.
async fn section(markers: &Path, kind: &str, tag: &str) -> bool {
    let start = now_ns();
    let mine: PathBuf = markers.join(format!("{kind}-rust-{tag}"));
    std::fs::File::create_new(&mine).unwrap();
    append(markers, "log", "rust\n");
    let ok = allowed(markers, kind);
    tokio::time::sleep(Duration::from_millis(15)).await;
    std::fs::remove_file(&mine).unwrap();
    let end = now_ns();
    append(
        markers,
        "intervals",
        &format!("{kind} rust {start} {end}\n"),
    );
    ok
}

fn append(markers: &Path, file: &str, text: &str) {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(markers.join(file))
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

/// Checks the logged intervals of both languages: no writer's section
/// overlaps any other section, and each language took the lock after the
/// other at least once.
fn assert_sections_apart(markers: &Path) {
    let text = std::fs::read_to_string(markers.join("intervals")).unwrap_or_default();
    let mut sections: Vec<(String, String, u128, u128)> = text
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split(' ').collect();
            assert_eq!(parts.len(), 4, "{line}");
            (
                parts[0].to_owned(),
                parts[1].to_owned(),
                parts[2].parse().unwrap(),
                parts[3].parse().unwrap(),
            )
        })
        .collect();
    sections.sort_by_key(|s| s.2);
    for (i, a) in sections.iter().enumerate() {
        for b in &sections[i + 1..] {
            if b.2 >= a.3 {
                break;
            }
            assert!(
                a.0 == "r" && b.0 == "r",
                "sections overlap: {a:?} and {b:?}"
            );
        }
    }
    let langs: Vec<&str> = sections.iter().map(|s| s.1.as_str()).collect();
    let switch = |x: &str, y: &str| langs.windows(2).any(|w| w[0] == x && w[1] == y);
    assert!(
        switch("python", "rust") && switch("rust", "python"),
        "the two languages never took turns: {langs:?}"
    );
}

/// Runs Rust workers (`kinds`: "w" for a writer or mutex, "r" for a reader)
/// until the kazoo participants are done; returns the violations they saw.
async fn rust_workers(
    connect: &str,
    path: &str,
    markers: &Path,
    kinds: &[&'static str],
    mutex: bool,
    done: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<u32>> {
    let mut workers = Vec::new();
    for (worker, kind) in kinds.iter().copied().enumerate() {
        let fw = framework(connect).await;
        let (path, markers, done) = (path.to_owned(), markers.to_owned(), done.clone());
        workers.push(tokio::spawn(async move {
            let mut violations = 0;
            let rw =
                InterProcessReadWriteLock::with_layout(fw.clone(), &path, Layout::Kazoo, b"rust")
                    .unwrap();
            let plain = InterProcessMutex::with_layout(fw.clone(), &path, Layout::Kazoo).unwrap();
            for round in 0..MAX_RUST_ROUNDS {
                if done.load(Ordering::SeqCst) {
                    break;
                }
                let tag = format!("{worker}-{round}");
                if mutex {
                    let guard = plain.lock().await.unwrap();
                    violations += u32::from(!section(&markers, kind, &tag).await);
                    guard.release().await.unwrap();
                } else if kind == "w" {
                    let guard = rw.write_lock().lock().await.unwrap();
                    violations += u32::from(!section(&markers, kind, &tag).await);
                    guard.release().await.unwrap();
                } else {
                    let guard = rw.read_lock().lock().await.unwrap();
                    violations += u32::from(!section(&markers, kind, &tag).await);
                    guard.release().await.unwrap();
                }
                // A pause between rounds, as work between holds: without
                // it a Rust writer always has a node queued, and kazoo
                // 2.8's reader (which waits for any writer, see the
                // participant script) would never get in.
                tokio::time::sleep(PAUSE).await;
            }
            fw.close().await;
            violations
        }));
    }
    workers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kazoo_lock_and_a_kazoo_layout_mutex_exclude_each_other() {
    let Some(server) = server() else { return };
    if !kazoo_available() {
        return;
    }
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let path = unique_path("kazoo-mutex");
        let markers = tempfile::tempdir().unwrap();
        let kazoo = Kazoo::start(&connect, "lock", &path, 25, markers.path()).await;
        let done = Arc::new(AtomicBool::new(false));
        let workers = rust_workers(
            &connect,
            &path,
            markers.path(),
            &["w", "w"],
            true,
            done.clone(),
        )
        .await;
        let (status, output) = kazoo.finish().await;
        done.store(true, Ordering::SeqCst);
        assert_eq!(status, 0, "kazoo side: {output}");
        for worker in workers {
            assert_eq!(worker.await.unwrap(), 0, "a Rust holder shared the lock");
        }
        assert_sections_apart(markers.path());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_read_write_locks_and_a_kazoo_layout_read_write_lock_agree() {
    let Some(server) = server() else { return };
    if !kazoo_available() {
        return;
    }
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let path = unique_path("kazoo-rw");
        let markers = tempfile::tempdir().unwrap();
        let writer = Kazoo::start(&connect, "write", &path, 20, markers.path()).await;
        let reader = Kazoo::start(&connect, "read", &path, 20, markers.path()).await;
        let done = Arc::new(AtomicBool::new(false));
        let workers = rust_workers(
            &connect,
            &path,
            markers.path(),
            &["w", "r", "r"],
            false,
            done.clone(),
        )
        .await;
        let (status, output) = writer.finish().await;
        assert_eq!(status, 0, "kazoo writer: {output}");
        let (status, output) = reader.finish().await;
        assert_eq!(status, 0, "kazoo reader: {output}");
        done.store(true, Ordering::SeqCst);
        for worker in workers {
            assert_eq!(
                worker.await.unwrap(),
                0,
                "a Rust participant broke the rule"
            );
        }
        assert_sections_apart(markers.path());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kazoo_semaphore_and_a_kazoo_layout_semaphore_share_its_leases() {
    let Some(server) = server() else { return };
    if !kazoo_available() {
        return;
    }
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let path = unique_path("kazoo-semaphore");
        let markers = tempfile::tempdir().unwrap();
        // Two kazoo processes and three Rust workers, two leases in all.
        let first = Kazoo::start(&connect, "semaphore", &path, 15, markers.path()).await;
        let second = Kazoo::start(&connect, "semaphore", &path, 15, markers.path()).await;
        let done = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        for worker in 0..3 {
            let fw = framework(&connect).await;
            let (path, markers, done) = (path.clone(), markers.path().to_owned(), done.clone());
            workers.push(tokio::spawn(async move {
                let semaphore = InterProcessSemaphoreV2::with_layout(
                    fw.clone(),
                    &path,
                    LEASES,
                    Layout::Kazoo,
                    b"rust",
                )
                .unwrap();
                let mut violations = 0;
                for round in 0..MAX_RUST_ROUNDS {
                    if done.load(Ordering::SeqCst) {
                        break;
                    }
                    let lease = semaphore.acquire().await.unwrap();
                    let token = lease.fencing_token();
                    violations +=
                        u32::from(!section(&markers, "s", &format!("{worker}-{round}")).await);
                    assert!(lease.is_valid() && lease.fencing_token() == token);
                    lease.release().await.unwrap();
                    tokio::time::sleep(PAUSE).await;
                }
                fw.close().await;
                violations
            }));
        }
        for kazoo in [first, second] {
            let (status, output) = kazoo.finish().await;
            assert_eq!(status, 0, "kazoo side: {output}");
        }
        done.store(true, Ordering::SeqCst);
        for worker in workers {
            assert_eq!(worker.await.unwrap(), 0, "more holders than leases");
        }
        // By the logged intervals: never more than two at once, and both
        // languages held leases while the other did.
        let text = std::fs::read_to_string(markers.path().join("intervals")).unwrap();
        let mut edges: Vec<(u128, i32)> = Vec::new();
        let mut langs = Vec::new();
        for line in text.lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            edges.push((parts[2].parse().unwrap(), 1));
            edges.push((parts[3].parse().unwrap(), -1));
            langs.push(parts[1].to_owned());
        }
        edges.sort();
        let mut at_once = 0;
        for (_, step) in edges {
            at_once += step;
            assert!(at_once <= LEASES as i32, "{at_once} leases held at once");
        }
        assert!(langs.iter().any(|l| l == "python") && langs.iter().any(|l| l == "rust"));
        // The path carries the number of leases, as kazoo keeps it.
        let raw = raw_client(&connect).await;
        assert_eq!(raw.get_data(&path).await.unwrap().0, b"2");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kazoo_election_and_a_kazoo_layout_latch_lead_one_at_a_time() {
    let Some(server) = server() else { return };
    if !kazoo_available() {
        return;
    }
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let path = unique_path("kazoo-election");
        let markers = tempfile::tempdir().unwrap();
        let kazoo = Kazoo::start(&connect, "election", &path, 15, markers.path()).await;
        let done = Arc::new(AtomicBool::new(false));
        let fw = framework(&connect).await;
        let (path2, markers2, done2) = (path.clone(), markers.path().to_owned(), done.clone());
        let rust = tokio::spawn(async move {
            let mut violations = 0;
            for round in 0..MAX_RUST_ROUNDS {
                if done2.load(Ordering::SeqCst) {
                    break;
                }
                let latch =
                    LeaderLatch::with_layout(fw.clone(), &path2, "rust", Layout::Kazoo).unwrap();
                latch.start().unwrap();
                let term = latch.await_leadership().await.unwrap();
                violations += u32::from(!section(&markers2, "w", &round.to_string()).await);
                drop(term);
                latch.close().await.unwrap();
            }
            fw.close().await;
            violations
        });
        let (status, output) = kazoo.finish().await;
        done.store(true, Ordering::SeqCst);
        assert_eq!(status, 0, "kazoo side: {output}");
        assert_eq!(rust.await.unwrap(), 0, "a Rust leader led beside kazoo's");
        assert_sections_apart(markers.path());
    })
    .await;
}

/// Asserts that `refused` is the layout conflict met beside kazoo's nodes.
fn assert_kazoo_conflict<T: std::fmt::Debug>(refused: zk_curator::Result<T>) {
    match refused {
        Err(err @ Error::LayoutConflict { .. }) => {
            let text = err.to_string();
            assert!(text.contains("kazoo's Lock"), "{text}");
            assert!(text.contains("--layout kazoo"), "{text}");
        }
        other => panic!("expected a layout conflict, got {other:?}"),
    }
}

/// In Curator's layout beside a kazoo holder, and beside a kazoo waiter,
/// each Curator-layout lock fails at once, naming kazoo's layout and the
/// fix, and leaves no node of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_layout_beside_kazoo_fails_at_once_and_leaves_nothing() {
    let Some(server) = server() else { return };
    if !kazoo_available() {
        return;
    }
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        let fw = framework(&connect).await;
        let markers = tempfile::tempdir().unwrap();

        // Beside a kazoo holder.
        let path = unique_path("kazoo-holder");
        let mut kazoo = Kazoo::start(&connect, "hold", &path, 1, markers.path()).await;
        kazoo.wait_for_line("held").await;
        let before = children(&raw, &path).await;
        assert_eq!(before.len(), 1, "{before:?}");
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let rw = InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();
        for attempt in 0..3 {
            let started = Instant::now();
            match attempt {
                0 => assert_kazoo_conflict(mutex.acquire().await),
                1 => assert_kazoo_conflict(rw.write_lock().lock().await),
                _ => assert_kazoo_conflict(rw.read_lock().lock().await),
            }
            assert!(
                started.elapsed() < AT_ONCE,
                "refusal {attempt} took {:?}",
                started.elapsed()
            );
            assert_eq!(
                children(&raw, &path).await,
                before,
                "refusal {attempt} left a node"
            );
        }
        let (status, output) = kazoo.finish().await;
        assert_eq!(status, 0, "kazoo side: {output}");

        // Beside a kazoo waiter: ours holds in kazoo's layout, kazoo queues.
        let path = unique_path("kazoo-waiter");
        let ours = InterProcessMutex::with_layout(fw.clone(), &path, Layout::Kazoo).unwrap();
        let held = ours.lock().await.unwrap();
        let mut kazoo = Kazoo::start(&connect, "hold", &path, 1, markers.path()).await;
        assert!(
            common::eventually(AT_ONCE * 10, || async {
                children(&raw, &path).await.len() == 2
            })
            .await,
            "the kazoo waiter never queued"
        );
        let before = children(&raw, &path).await;
        let started = Instant::now();
        assert_kazoo_conflict(
            InterProcessMutex::new(fw.clone(), &path)
                .unwrap()
                .acquire()
                .await,
        );
        assert!(
            started.elapsed() < AT_ONCE,
            "the refusal took {:?}",
            started.elapsed()
        );
        assert_eq!(
            children(&raw, &path).await,
            before,
            "the refusal left a node"
        );
        held.release().await.unwrap();
        kazoo.wait_for_line("held").await;
        let (status, output) = kazoo.finish().await;
        assert_eq!(status, 0, "kazoo side: {output}");
        fw.close().await;
    })
    .await;
}
