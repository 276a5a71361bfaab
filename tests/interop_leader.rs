//! Leader election across languages (issue 18): an Apache Curator
//! `LeaderLatch` (or `LeaderSelector`) in a JVM and a Rust one take part in
//! one election on one path. Each names the other as leader while the other
//! leads, leadership passes both ways, and the two are never leaders at
//! once: whoever leads keeps a `lead-…` marker file in a shared directory
//! while its term lasts, and finds no other leader's marker when it begins.
//!
//! The JVM side (`tests/interop/InteropLeader.java`, compiled against
//! Debian's `libcurator-recipes-java`) is driven one command at a time over
//! its standard input. Without `javac` or Curator's jars each test fails
//! saying what to install, or is skipped with a notice under
//! `ZK_SKIP_MISSING=curator` (or `=1`).
//!
//! A Rust latch that keeps its place through a blip of its connection
//! beside a Curator latch (issue 25): Curator does not take over.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::{bounded, framework, leads, raw_client, server, unique_path, wait_for_participants};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot};
use zk_curator::{zk, LeaderElection, LeaderLatch, LeaderSelector, LeaderTerm};
use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::curator::{self, JavaProgram};

/// How long one step of the JVM side may take (its start included: a JVM
/// starts slowly on a loaded 2-core machine).
const STEP: Duration = Duration::from_secs(60);

/// The bound of a whole test.
const TEST_BOUND: Duration = Duration::from_secs(240);

/// The classpath of the compiled JVM participant, or `None` when Curator is
/// missing and `ZK_SKIP_MISSING` asks to skip ([`Prerequisite::check`]
/// fails the test otherwise).
fn jvm_classpath() -> Option<&'static str> {
    static COMPILED: OnceLock<Option<JavaProgram>> = OnceLock::new();
    let compiled = COMPILED.get_or_init(|| {
        let test = std::thread::current()
            .name()
            .unwrap_or("interop_leader")
            .to_owned();
        if !Prerequisite::Curator.check(&test) {
            return None;
        }
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/InteropLeader.java");
        Some(curator::compile(&source))
    });
    compiled.as_ref().map(|program| program.classpath.as_str())
}

/// The JVM participant: one Curator client, one latch or selector at a time.
struct Jvm {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// Everything said both ways, for failure messages.
    transcript: String,
}

impl Jvm {
    /// Starts the JVM in `mode` (`latch` or `selector`) and waits until its
    /// client is connected.
    async fn start(classpath: &str, connect: &str, mode: &str, path: &str, markers: &Path) -> Jvm {
        let mut child = tokio::process::Command::new("java")
            .args(["-cp", classpath, "InteropLeader", connect, mode, path])
            .arg(markers)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut jvm = Jvm {
            child,
            stdin,
            stdout,
            transcript: String::new(),
        };
        let ready = jvm.answer(STEP).await;
        assert_eq!(ready, "ready", "the JVM did not start:\n{}", jvm.transcript);
        jvm
    }

    /// The next line the JVM prints, within `limit`.
    async fn answer(&mut self, limit: Duration) -> String {
        let mut line = String::new();
        let read = tokio::time::timeout(limit, self.stdout.read_line(&mut line)).await;
        match read {
            Ok(Ok(n)) if n > 0 => {
                self.transcript.push_str(&format!("< {line}"));
                line.trim().to_owned()
            }
            Ok(_) => panic!("the JVM ended early:\n{}", self.transcript),
            Err(_) => panic!(
                "no answer from the JVM within {limit:?}:\n{}",
                self.transcript
            ),
        }
    }

    /// Sends one command and returns its answer, within `limit`.
    async fn ask_within(&mut self, command: &str, limit: Duration) -> String {
        self.transcript.push_str(&format!("> {command}\n"));
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
        self.answer(limit).await
    }

    async fn ask(&mut self, command: &str) -> String {
        self.ask_within(command, STEP).await
    }

    /// Asks and checks the answer.
    async fn expect(&mut self, command: &str, answer: &str) {
        let got = self.ask(command).await;
        assert_eq!(got, answer, "`{command}`; transcript:\n{}", self.transcript);
    }

    /// Closes the client and waits for the JVM to exit with status 0.
    async fn exit(mut self) {
        self.expect("exit", "bye").await;
        let status = tokio::time::timeout(STEP, self.child.wait())
            .await
            .expect("the JVM did not exit")
            .unwrap();
        assert!(
            status.success(),
            "the JVM exited with {status}:\n{}",
            self.transcript
        );
    }
}

/// The directory where leaders keep their markers, and the log of turns.
struct Markers {
    dir: tempfile::TempDir,
    count: AtomicUsize,
}

impl Markers {
    fn new() -> Markers {
        Markers {
            dir: tempfile::tempdir().unwrap(),
            count: AtomicUsize::new(0),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A Rust term begins: its marker (deleted when the returned guard is
    /// dropped), a "rust" line in the log, and whether no other leader's
    /// marker was there.
    fn enter(&self) -> (Marker, bool) {
        let n = self.count.fetch_add(1, Ordering::Relaxed);
        let mine = Marker(self.path().join(format!("lead-rust-{n}")));
        std::fs::File::create_new(&mine.0).unwrap();
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path().join("log"))
            .unwrap();
        log.write_all(b"rust\n").unwrap();
        let leaders = std::fs::read_dir(self.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("lead-")
            })
            .count();
        (mine, leaders == 1)
    }

    /// [`enter`](Self::enter), failing the test if another leader's marker
    /// was there.
    fn enter_alone(&self) -> Marker {
        let (mine, alone) = self.enter();
        assert!(alone, "a Rust participant leads beside another leader");
        mine
    }

    /// Whether the log shows a Java term followed by a Rust one, and the
    /// other way round.
    fn alternated(&self) -> bool {
        let log = std::fs::read_to_string(self.path().join("log")).unwrap_or_default();
        let turns: Vec<&str> = log.lines().collect();
        let follows = |a, b| turns.windows(2).any(|w| w[0] == a && w[1] == b);
        follows("java", "rust") && follows("rust", "java")
    }
}

/// A Rust leader's marker: deleted on drop, so that a function cancelled
/// mid-term leaves none behind.
struct Marker(PathBuf);

impl Drop for Marker {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Checks Curator's layout on `path`: every participant a protected
/// ephemeral sequential node `_c_<uuid>-<name><10 digits>` (whichever
/// language made it), and returns the ids (node data) in queue order.
async fn ids_on_the_server(raw: &zk::Client, path: &str, name: &str) -> Vec<String> {
    let mut nodes = raw.list_children(path).await.unwrap();
    let sequence = |node: &String| node[node.len() - 10..].to_owned();
    nodes.sort_by_key(sequence);
    let mut ids = Vec::new();
    for node in nodes {
        let (uuid, rest) = node
            .strip_prefix("_c_")
            .and_then(|n| n.split_at_checked(36))
            .unwrap_or_else(|| panic!("{node} is not a protected node"));
        assert!(uuid::Uuid::parse_str(uuid).is_ok(), "{node}: no uuid");
        let digits = rest
            .strip_prefix('-')
            .and_then(|r| r.strip_prefix(name))
            .unwrap_or_else(|| panic!("{node} is not named {name}"));
        assert!(
            digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit()),
            "{node}"
        );
        let full = format!("{path}/{node}");
        let stat = raw.check_stat(&full).await.unwrap().unwrap();
        assert_ne!(stat.ephemeral_owner, 0, "{node} is not ephemeral");
        let (data, _) = raw.get_data(&full).await.unwrap();
        ids.push(String::from_utf8(data).unwrap());
    }
    ids
}

/// The participant ids, as a Rust participant lists them.
fn ids(participants: Vec<zk_curator::Participant>) -> Vec<String> {
    participants.into_iter().map(|p| p.id).collect()
}

/// What each test starts from: the test server's address, a fresh
/// election path, a marker directory, and the JVM participant in `mode`.
struct Scene {
    connect: String,
    path: String,
    markers: Arc<Markers>,
    java: Jvm,
}

/// The scene of a test, or `None` when it is skipped (no ZooKeeper for the
/// real backend, or no Curator, and `ZK_SKIP_MISSING` asks to skip).
async fn scene(mode: &str, name: &str) -> Option<Scene> {
    let server = server()?;
    let classpath = jvm_classpath()?;
    let connect = server.connect_string();
    let path = unique_path(name);
    let markers = Arc::new(Markers::new());
    let java = Jvm::start(classpath, &connect, mode, &path, markers.path()).await;
    Some(Scene {
        connect,
        path,
        markers,
        java,
    })
}

/// The next term the scripted Rust selector hands over, with the sender
/// that ends it.
async fn next_term(
    terms: &mut mpsc::UnboundedReceiver<(LeaderTerm, oneshot::Sender<()>)>,
) -> (LeaderTerm, oneshot::Sender<()>) {
    tokio::time::timeout(STEP, terms.recv())
        .await
        .expect("the Rust selector never led")
        .unwrap()
}

async fn leader_id_latch(latch: &LeaderLatch) -> String {
    latch.leader().await.unwrap().unwrap().id
}

async fn leader_id_selector(selector: &LeaderSelector) -> String {
    selector.leader().await.unwrap().unwrap().id
}

/// Curator leads first and the Rust latch names it; Curator closes, the
/// Rust latch leads and a new Curator latch names it; the Rust latch
/// closes and Curator leads again. Both layouts are Curator's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_and_curator_latches_name_each_other_and_lead_in_turn() {
    let Some(Scene {
        connect,
        path,
        markers,
        mut java,
    }) = scene("latch", "interop-latch").await
    else {
        return;
    };
    bounded(TEST_BOUND, async move {
        let raw = raw_client(&connect).await;
        let fw = framework(&connect).await;

        // 1. Curator leads; the Rust latch queues behind it and names it.
        java.expect("start java-1", "ok").await;
        java.expect("await", "leading").await;
        let rust = LeaderLatch::new(fw.clone(), &path, "rust-1").unwrap();
        rust.start().unwrap();
        wait_for_participants(&raw, &path, 2).await;
        assert_eq!(
            ids_on_the_server(&raw, &path, "latch-").await,
            ["java-1", "rust-1"]
        );
        assert_eq!(leader_id_latch(&rust).await, "java-1");
        assert_eq!(
            ids(rust.participants().await.unwrap()),
            ["java-1", "rust-1"]
        );
        assert!(!rust.has_leadership());
        java.expect("leader", "leader java-1 true").await;
        java.expect("participants", "participants java-1,rust-1")
            .await;

        // 2. Curator closes: the Rust latch leads, and a new Curator latch,
        // queued behind it, names it.
        java.expect("close", "closed").await;
        let first = leads(&rust, STEP).await;
        let marker = markers.enter_alone();
        assert_eq!(leader_id_latch(&rust).await, "rust-1");
        java.expect("start java-2", "ok").await;
        wait_for_participants(&raw, &path, 2).await;
        assert_eq!(
            ids_on_the_server(&raw, &path, "latch-").await,
            ["rust-1", "java-2"]
        );
        java.expect("leader", "leader rust-1 true").await;
        java.expect("has", "false").await;
        java.expect("participants", "participants rust-1,java-2")
            .await;

        // 3. The Rust latch closes: Curator leads, and a new Rust latch,
        // queued behind it, names it.
        drop(marker);
        rust.close().await.unwrap();
        assert!(!first.is_valid());
        java.expect("await", "leading").await;
        let rust = LeaderLatch::new(fw.clone(), &path, "rust-2").unwrap();
        rust.start().unwrap();
        wait_for_participants(&raw, &path, 2).await;
        assert_eq!(leader_id_latch(&rust).await, "java-2");
        assert!(!rust.has_leadership());
        java.expect("has", "true").await;

        // 4. And back once more: a later term, a greater token.
        java.expect("close", "closed").await;
        let second = leads(&rust, STEP).await;
        let marker = markers.enter_alone();
        assert!(second.fencing_token() > first.fencing_token());
        drop(marker);
        rust.close().await.unwrap();
        wait_for_participants(&raw, &path, 0).await;
        assert!(markers.alternated(), "the two languages never led in turn");
        java.exit().await;
        fw.close().await;
    })
    .await;
}

/// Curator's selector leads first and the Rust selector names it; its
/// `takeLeadership` returns, the Rust selector's function runs and Curator
/// names it; Curator requeues, the Rust function returns, Curator leads
/// again; the Rust selector requeues and leads a second term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_and_curator_selectors_name_each_other_and_lead_in_turn() {
    let Some(Scene {
        connect,
        path,
        markers,
        mut java,
    }) = scene("selector", "interop-selector").await
    else {
        return;
    };
    bounded(TEST_BOUND, async move {
        let raw = raw_client(&connect).await;
        let fw = framework(&connect).await;

        // The Rust function hands its term to the test and runs until told.
        let (terms_tx, mut terms) = mpsc::unbounded_channel::<(LeaderTerm, oneshot::Sender<()>)>();
        let rust = LeaderSelector::with_id(fw.clone(), &path, "rust-1", move |term| {
            let terms_tx = terms_tx.clone();
            async move {
                let (done_tx, done) = oneshot::channel();
                if terms_tx.send((term, done_tx)).is_ok() {
                    let _ = done.await;
                }
            }
        })
        .unwrap();

        // 1. Curator leads; the Rust selector queues behind it and names it.
        java.expect("start java-1", "ok").await;
        java.expect("await", "leading").await;
        rust.start().unwrap();
        wait_for_participants(&raw, &path, 2).await;
        assert_eq!(
            ids_on_the_server(&raw, &path, "lock-").await,
            ["java-1", "rust-1"]
        );
        assert_eq!(leader_id_selector(&rust).await, "java-1");
        assert_eq!(
            ids(rust.participants().await.unwrap()),
            ["java-1", "rust-1"]
        );
        assert!(!rust.has_leadership());
        java.expect("leader", "leader java-1 true").await;

        // 2. Curator's takeLeadership returns: the Rust function runs, and
        // Curator names the Rust participant.
        java.expect("release", "released").await;
        let (first, done) = next_term(&mut terms).await;
        let marker = markers.enter_alone();
        assert!(first.is_valid() && rust.has_leadership());
        assert_eq!(leader_id_selector(&rust).await, "rust-1");
        java.expect("leader", "leader rust-1 true").await;
        java.expect("has", "false").await;

        // 3. Curator requeues behind it; the Rust function returns, and
        // Curator leads again, named by the Rust selector.
        java.expect("requeue", "requeued true").await;
        wait_for_participants(&raw, &path, 2).await;
        java.expect("participants", "participants rust-1,java-1")
            .await;
        drop(marker);
        done.send(()).unwrap();
        java.expect("await", "leading").await;
        assert!(
            !first.is_valid(),
            "the Rust term is over once Curator leads"
        );
        assert_eq!(leader_id_selector(&rust).await, "java-1");

        // 4. The Rust selector requeues; Curator lets go; a second Rust term.
        assert!(rust.requeue().unwrap());
        wait_for_participants(&raw, &path, 2).await;
        java.expect("participants", "participants java-1,rust-1")
            .await;
        java.expect("release", "released").await;
        let (second, done) = next_term(&mut terms).await;
        let marker = markers.enter_alone();
        assert!(second.fencing_token() > first.fencing_token());
        java.expect("leader", "leader rust-1 true").await;
        drop(marker);
        done.send(()).unwrap();
        rust.close().await.unwrap();
        java.expect("close", "closed").await;
        wait_for_participants(&raw, &path, 0).await;
        assert!(markers.alternated(), "the two languages never led in turn");
        java.exit().await;
        fw.close().await;
    })
    .await;
}

/// At most this many terms per Rust contender while the JVM contends.
const MAX_RUST_TERMS: usize = 400;

/// How many terms the JVM side leads while contending.
const JVM_TERMS: u32 = 12;

/// Two Rust latches (each a new latch per term, closed once it has led)
/// and Curator's, contending on one path: every leader finds itself alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_and_curator_latches_contending_never_lead_together() {
    let Some(Scene {
        connect,
        path,
        markers,
        mut java,
    }) = scene("latch", "interop-latch-rounds").await
    else {
        return;
    };
    bounded(TEST_BOUND, async move {
        let java_done = Arc::new(AtomicBool::new(false));
        let mut contenders = Vec::new();
        for worker in 0..2 {
            let (connect, path, markers, java_done) = (
                connect.clone(),
                path.clone(),
                markers.clone(),
                java_done.clone(),
            );
            contenders.push(tokio::spawn(async move {
                let fw = framework(&connect).await;
                let (mut terms, mut overlaps) = (0, 0);
                while !java_done.load(Ordering::SeqCst) && terms < MAX_RUST_TERMS {
                    let latch =
                        LeaderLatch::new(fw.clone(), &path, format!("rust-{worker}")).unwrap();
                    latch.start().unwrap();
                    let _term = leads(&latch, STEP).await;
                    let (marker, alone) = markers.enter();
                    overlaps += usize::from(!alone);
                    tokio::time::sleep(Duration::from_millis(15)).await;
                    drop(marker);
                    latch.close().await.unwrap();
                    terms += 1;
                }
                fw.close().await;
                (terms, overlaps)
            }));
        }
        let java_says = java
            .ask_within(&format!("rounds {JVM_TERMS}"), 3 * STEP)
            .await;
        java_done.store(true, Ordering::SeqCst);
        assert_eq!(java_says, "violations 0", "Curator led beside a Rust latch");
        for contender in contenders {
            let (terms, overlaps) = contender.await.unwrap();
            assert_eq!(overlaps, 0, "a Rust latch led beside another leader");
            assert!(terms > 0, "a Rust latch never led");
            eprintln!("a Rust latch led {terms} term(s) beside Curator's {JVM_TERMS}");
        }
        assert!(markers.alternated(), "the two languages never led in turn");
        java.exit().await;
    })
    .await;
}

/// Two auto-requeued Rust selectors and Curator's, contending on one path:
/// every leader finds itself alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_and_curator_selectors_contending_never_lead_together() {
    let Some(Scene {
        connect,
        path,
        markers,
        mut java,
    }) = scene("selector", "interop-selector-rounds").await
    else {
        return;
    };
    bounded(TEST_BOUND, async move {
        let (terms, overlaps) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut selectors = Vec::new();
        for worker in 0..2 {
            let fw = framework(&connect).await;
            let (markers, terms, overlaps) = (markers.clone(), terms.clone(), overlaps.clone());
            let selector = LeaderSelector::with_id(
                fw.clone(),
                &path,
                format!("rust-{worker}"),
                move |_term| {
                    let (markers, terms, overlaps) =
                        (markers.clone(), terms.clone(), overlaps.clone());
                    async move {
                        let (marker, alone) = markers.enter();
                        overlaps.fetch_add(usize::from(!alone), Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(15)).await;
                        drop(marker);
                        terms.fetch_add(1, Ordering::SeqCst);
                    }
                },
            )
            .unwrap();
            selector.auto_requeue(true);
            selector.start().unwrap();
            selectors.push((fw, selector));
        }
        let java_says = java
            .ask_within(&format!("rounds {JVM_TERMS}"), 3 * STEP)
            .await;
        for (fw, selector) in selectors {
            selector.close().await.unwrap();
            fw.close().await;
        }
        assert_eq!(
            java_says, "violations 0",
            "Curator led beside a Rust selector"
        );
        assert_eq!(
            overlaps.load(Ordering::SeqCst),
            0,
            "a Rust selector led beside another leader"
        );
        let terms = terms.load(Ordering::SeqCst);
        assert!(terms > 0, "no Rust selector led");
        eprintln!("the Rust selectors led {terms} term(s) beside Curator's {JVM_TERMS}");
        assert!(markers.alternated(), "the two languages never led in turn");
        java.exit().await;
    })
    .await;
}

/// An observer (issue 25) on a framework of its own, taking no part, names
/// the leader Curator itself names, as leadership passes between a Curator
/// latch and a Rust one: the Rust leader's token is its term's, and nobody
/// is reported once both have left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observing_a_curator_latch_election_names_the_leader_curator_reports() {
    use futures::StreamExt;
    use zk_curator::{LeaderElection, LeaderObserver, Observation};

    let Some(Scene {
        connect,
        path,
        markers: _markers,
        mut java,
    }) = scene("latch", "interop-observe").await
    else {
        return;
    };
    bounded(TEST_BOUND, async move {
        let raw = raw_client(&connect).await;
        let fw = framework(&connect).await;
        let observer_fw = framework(&connect).await;
        let observer = LeaderObserver::new(observer_fw.clone(), &path).unwrap();
        let mut changes = Box::pin(observer.changes());
        let mut next_leader = async |what: &str| -> Option<zk_curator::ObservedLeader> {
            let seen = tokio::time::timeout(STEP, changes.next())
                .await
                .unwrap_or_else(|_| panic!("no observation: {what}"))
                .unwrap();
            match seen {
                Observation::Leader(leader) => Some(leader),
                Observation::NoLeader => None,
                other => panic!("{what}: observed {other:?}"),
            }
        };
        assert_eq!(next_leader("an empty election").await, None);

        // Curator leads, the Rust latch queues behind it.
        java.expect("start java-1", "ok").await;
        java.expect("await", "leading").await;
        let seen = next_leader("Curator leads").await.unwrap();
        java.expect("leader", &format!("leader {} true", seen.id))
            .await;
        assert_eq!(seen.id, "java-1");
        let rust = LeaderLatch::new(fw.clone(), &path, "rust-1").unwrap();
        rust.start().unwrap();
        wait_for_participants(&raw, &path, 2).await;

        // Curator closes: the Rust latch leads, with the token observed.
        java.expect("close", "closed").await;
        let seen = next_leader("the Rust latch leads").await.unwrap();
        let term = leads(&rust, STEP).await;
        assert_eq!(seen.id, "rust-1");
        assert_eq!(seen.token, term.fencing_token());
        assert_eq!(seen.node_path, term.node().path());
        java.expect("start java-2", "ok").await;
        wait_for_participants(&raw, &path, 2).await;
        java.expect("leader", "leader rust-1 true").await;

        // The Rust latch closes: Curator leads again, as both say.
        rust.close().await.unwrap();
        let seen = next_leader("Curator leads again").await.unwrap();
        java.expect("await", "leading").await;
        java.expect("leader", &format!("leader {} true", seen.id))
            .await;
        assert_eq!(seen.id, "java-2");
        assert!(seen.token > term.fencing_token());
        assert_eq!(
            LeaderElection::leader(&rust).await.unwrap().unwrap().id,
            seen.id
        );

        java.expect("close", "closed").await;
        assert_eq!(next_leader("both left").await, None);
        java.exit().await;
        observer_fw.close().await;
        fw.close().await;
    })
    .await;
}

/// A Rust latch leads through a fault proxy, a Curator latch waits behind
/// it; the proxy drops the Rust latch's connection: its term ends, but it
/// keeps its place (its session survives) and leads again on the same node
/// with a greater token, and Curator never leads meanwhile and still names
/// it (issue 25, item 6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_latch_keeps_its_place_through_a_blip_beside_a_curator_latch() {
    let Some(Scene {
        connect,
        path,
        markers: _markers,
        mut java,
    }) = scene("latch", "interop-latch-blip").await
    else {
        return;
    };
    bounded(TEST_BOUND, async move {
        let raw = raw_client(&connect).await;
        let proxy = zk_curator_testing::FaultProxy::start(server().unwrap().address())
            .await
            .unwrap();
        let fw = common::framework_with(&proxy.connect_string(), |b| {
            b.session_timeout(Duration::from_secs(12))
        })
        .await;
        let rust = LeaderLatch::new(fw.clone(), &path, "rust-1").unwrap();
        rust.start().unwrap();
        let first = leads(&rust, STEP).await;
        java.expect("start java-1", "ok").await;
        wait_for_participants(&raw, &path, 2).await;
        java.expect("leader", "leader rust-1 true").await;

        // Reset, with the reconnection held until the term is found lost
        // (a reconnection faster than that would hide the blip).
        proxy.blackhole(true);
        proxy.drop_connections();
        tokio::time::timeout(STEP, first.lost()).await.unwrap();
        proxy.blackhole(false);
        let second = leads(&rust, STEP).await;
        assert!(second != first && !first.is_valid());
        // The same node throughout: Curator, queued behind it, could not
        // have led in between.
        assert_eq!(second.node().path(), first.node().path());
        assert!(second.fencing_token() > first.fencing_token());
        assert_eq!(second.fencing_token().get(), first.fencing_token().get());
        java.expect("has", "false").await;
        java.expect("leader", "leader rust-1 true").await;
        java.expect("participants", "participants rust-1,java-1")
            .await;

        rust.close().await.unwrap();
        java.expect("await", "leading").await;
        java.expect("close", "closed").await;
        wait_for_participants(&raw, &path, 0).await;
        java.exit().await;
        fw.close().await;
    })
    .await;
}

/// A Rust leader proclaims a value (issue 25) in an election it shares with
/// a Curator latch: Curator's `getLeader()` and `getParticipants()` still
/// read the Rust participant's id (the value lives in the election path's
/// data, not in the node), an observer reads the value, and once Curator
/// leads the observer reports Curator's id as its value, not the Rust
/// leader's stale one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_still_reads_the_id_of_a_rust_leader_that_proclaims() {
    use futures::StreamExt;
    use zk_curator::{LeaderObserver, Observation};

    let Some(Scene {
        connect,
        path,
        markers: _markers,
        mut java,
    }) = scene("latch", "interop-proclaim").await
    else {
        return;
    };
    bounded(TEST_BOUND, async move {
        let raw = raw_client(&connect).await;
        let fw = framework(&connect).await;
        let observer_fw = framework(&connect).await;
        let rust = LeaderLatch::new(fw.clone(), &path, "rust-1")
            .unwrap()
            .with_value("10.0.0.1:80");
        rust.start().unwrap();
        let term = leads(&rust, STEP).await;
        java.expect("start java-1", "ok").await;
        wait_for_participants(&raw, &path, 2).await;

        let observer = LeaderObserver::new(observer_fw.clone(), &path).unwrap();
        let mut changes = Box::pin(observer.changes());
        let mut until = async |what: &str, done: &dyn Fn(&zk_curator::ObservedLeader) -> bool| {
            tokio::time::timeout(STEP, async {
                loop {
                    if let Observation::Leader(seen) = changes.next().await.unwrap() {
                        if done(&seen) {
                            return seen;
                        }
                    }
                }
            })
            .await
            .unwrap_or_else(|_| panic!("never observed: {what}"))
        };
        let seen = until("the proclaimed value", &|l| l.value == b"10.0.0.1:80").await;
        assert_eq!(seen.id, "rust-1");
        assert_eq!(seen.node_path, term.node().path());
        rust.proclaim("10.0.0.1:81").await.unwrap();
        until("the new value", &|l| l.value == b"10.0.0.1:81").await;
        java.expect("leader", "leader rust-1 true").await;
        java.expect("participants", "participants rust-1,java-1")
            .await;
        assert_eq!(
            ids_on_the_server(&raw, &path, "latch-").await,
            ["rust-1", "java-1"]
        );

        // Curator leads: the Rust value, left in the path's data, is not
        // Curator's.
        rust.close().await.unwrap();
        java.expect("await", "leading").await;
        let seen = until("Curator leads", &|l| l.id == "java-1").await;
        assert!(!seen.proclaimed, "{seen:?}");
        assert_eq!(seen.value, b"java-1");
        java.expect("close", "closed").await;
        java.exit().await;
        observer_fw.close().await;
        fw.close().await;
    })
    .await;
}

/// A revocable Rust leader asked to step down (issue 25) in an election it
/// shares with a Curator latch: its term ends, Curator's latch leads next
/// (as Curator itself says), and the Rust latch is queued again behind it,
/// still named by its id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_leader_steps_down_to_a_curator_latch() {
    use zk_curator::LockLoss;

    let Some(Scene {
        connect,
        path,
        markers: _markers,
        mut java,
    }) = scene("latch", "interop-step-down").await
    else {
        return;
    };
    bounded(TEST_BOUND, async move {
        let raw = raw_client(&connect).await;
        let fw = framework(&connect).await;
        let rust = LeaderLatch::new(fw.clone(), &path, "rust-1").unwrap();
        rust.make_revocable();
        rust.start().unwrap();
        let term = leads(&rust, STEP).await;
        java.expect("start java-1", "ok").await;
        wait_for_participants(&raw, &path, 2).await;
        java.expect("leader", "leader rust-1 true").await;

        // Asked through the election path's data, as `zk-curator revoke
        // PATH` does: the Curator latch behind keeps its watch on the node.
        let observer = zk_curator::LeaderObserver::new(fw.clone(), &path).unwrap();
        let asked = observer.revoke_leader().await.unwrap().unwrap();
        assert_eq!(asked.id, "rust-1");
        java.expect("await", "leading").await;
        assert_eq!(term.loss(), Some(LockLoss::Revoked));
        wait_for_participants(&raw, &path, 2).await;
        java.expect("participants", "participants java-1,rust-1")
            .await;
        assert_eq!(leader_id_latch(&rust).await, "java-1");
        assert!(!rust.has_leadership());

        java.expect("close", "closed").await;
        let next = leads(&rust, STEP).await;
        assert!(next.fencing_token() > term.fencing_token());
        rust.close().await.unwrap();
        java.exit().await;
        fw.close().await;
    })
    .await;
}
