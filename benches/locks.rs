//! The lock benchmark (DESIGN.md §8): zk-curator against its peers, on one
//! ZooKeeper, in one run. It prints figures and ratios; it asserts nothing.
//!
//! ```sh
//! cargo bench --bench locks               # full run, about 2-3 minutes
//! cargo bench --bench locks -- --quick    # short run for CI smoke checks
//! ```
//!
//! With `ZK_CONNECT` set it uses that ensemble; otherwise it starts one
//! [`ZooKeeperServer`] and every contender of the run uses it.
//!
//! Contenders:
//! * zk-curator's `InterProcessMutex`, through the guard API (`lock()` then
//!   `guard.release()`) and through the reentrant API (`acquire()` /
//!   `release()`);
//! * `zookeeper-client`'s own `Client::lock` (Curator's node layout), in this
//!   process;
//! * Apache Curator 5.4's `InterProcessMutex` (`benches/peers/CuratorBench.java`,
//!   compiled here against Debian's `libcurator-recipes-java`);
//! * kazoo's `Lock` (`benches/peers/kazoo_bench.py`, Debian's `python3-kazoo`).
//!
//! The peers run as child processes and print their own figures as one
//! `RESULT kind=... key=value ...` line, parsed here. A peer that is missing
//! or fails is shown as `n/a` with the reason; every wait is bounded.
//!
//! Herd effect: besides zk-curator's own count of watch wake-ups
//! (`Framework::metrics().lock_wakeups()`), the server's `mntr` counters of
//! fired watches (`node_deleted_watch_count`, `node_children_watch_count`)
//! are read before and after every contended run, which gives the watch
//! notifications per release for every contender alike.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zk_curator::framework::zk;
use zk_curator::recipes::MutexGuard;
use zk_curator::{Framework, InterProcessMutex};
use zk_curator_testing::{zookeeper_available, ZooKeeperServer};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A figure, or why it could not be measured (printed as `n/a (reason)`).
type Measured<T> = Result<T, String>;

const CURATOR_JAR: &str = "/usr/share/java/curator-recipes.jar";
const SLF4J_JARS: [&str; 2] = [
    "/usr/share/java/slf4j-nop.jar",
    "/usr/share/java/slf4j-simple.jar",
];
/// No single acquire may take longer (the peers use the same bound).
const ACQUIRE_LIMIT: Duration = Duration::from_secs(30);
/// Connecting one session.
const CONNECT_LIMIT: Duration = Duration::from_secs(20);
/// Closing one session.
const CLOSE_LIMIT: Duration = Duration::from_secs(5);

/// The sizes of one run.
#[derive(Debug, Clone)]
struct Config {
    quick: bool,
    warmup: usize,
    cycles: usize,
    contend: Duration,
    sessions: Vec<usize>,
    /// Queue lengths for the memory measurement.
    waiters: Vec<usize>,
    waiter_sessions: usize,
}

impl Config {
    fn from_args() -> Self {
        // `cargo bench` passes `--bench`; only `--quick` matters here.
        let quick = std::env::args().skip(1).any(|arg| arg == "--quick");
        Config {
            quick,
            warmup: if quick { 20 } else { 100 },
            cycles: if quick { 200 } else { 1000 },
            contend: Duration::from_secs(if quick { 1 } else { 3 }),
            sessions: vec![2, 8, 32],
            // Two queue lengths show whether a waiter's cost depends on the
            // queue (the quick run keeps the longer one only).
            waiters: if quick { vec![200] } else { vec![50, 200] },
            waiter_sessions: 4,
        }
    }

    /// The bound on one peer process or one in-process phase.
    fn phase_limit(&self) -> Duration {
        self.contend + 2 * ACQUIRE_LIMIT + Duration::from_secs(60)
    }
}

/// The hidden first argument that makes this binary the zk-curator side of
/// the memory measurement, in a fresh process like the peers':
/// `locks --memory-child <connect> <path> <sessions> <waiters>`.
const MEMORY_CHILD: &str = "--memory-child";

fn main() -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(MEMORY_CHILD) {
        let code = runtime.block_on(memory_child(&args[2..]));
        std::process::exit(code);
    }
    runtime.block_on(run())
}

async fn run() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .init();
    let config = Config::from_args();
    let run_started = Instant::now();

    // The server (if we start one) lives until the end of the run; dropping
    // the handle stops it and removes its directory.
    let (connect, server) = match std::env::var("ZK_CONNECT") {
        Ok(connect) if !connect.is_empty() => (connect, None),
        _ => {
            if !zookeeper_available() {
                if std::env::var("ZK_REQUIRE_REAL").is_ok_and(|v| v == "1") {
                    return Err("ZK_REQUIRE_REAL=1 but ZooKeeper is not installed (apt-get install -y zookeeper)".into());
                }
                println!("NOTICE: ZooKeeper is not installed (apt-get install -y zookeeper) and ZK_CONNECT is not set; nothing to measure");
                return Ok(());
            }
            // Always a real ZooKeeper: the peers must meet one, and an
            // in-process server would share this process's cores and RSS.
            let server = ZooKeeperServer::start_async().await?;
            (server.connect_string(), Some(server))
        }
    };
    // A chroot in ZK_CONNECT becomes a prefix of our paths instead: the
    // contenders disagree on chroots (zk-curator wants `namespace(..)`), and
    // the four-letter words need the bare host.
    let (connect, chroot) = match connect.split_once('/') {
        Some((hosts, chroot)) => (hosts.to_owned(), format!("/{}", chroot.trim_matches('/'))),
        None => (connect, String::new()),
    };
    let chroot = if chroot == "/" { String::new() } else { chroot };
    let four_letter = first_host(&connect);
    let root = format!(
        "{chroot}/bench/locks-{}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );

    print_header(&config, &connect, server.is_some(), four_letter.as_deref()).await;
    let peers = Peers::prepare().await;
    peers.print();

    // 1. Uncontended cycles.
    uncontended_phase(&config, &connect, &root, &peers).await;
    // 2. Contended hand-offs and the herd.
    contended_phase(&config, &connect, &root, &peers, four_letter.as_deref()).await;
    // 3. Memory (every contender in a fresh process of its own).
    memory_phase(&config, &connect, &root, &peers, four_letter.as_deref()).await;

    if server.is_none() {
        // Our own server goes away with its data; a shared ensemble keeps
        // the persistent parents some recipes leave, so remove them.
        if let Err(err) = bounded(Duration::from_secs(30), remove_tree(&connect, &root)).await {
            println!("note: could not remove {root}: {err}");
        }
    }
    println!();
    println!(
        "total run time {:.0} s{}",
        run_started.elapsed().as_secs_f64(),
        if config.quick { " (--quick)" } else { "" }
    );
    drop(server);
    Ok(())
}

// ---------------------------------------------------------------------------
// Header: machine, server, peers
// ---------------------------------------------------------------------------

async fn print_header(config: &Config, connect: &str, own: bool, four_letter: Option<&str>) {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split(':').nth(1))
                .map(|model| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let version = match four_letter {
        Some(addr) => mntr(addr)
            .await
            .ok()
            .and_then(|m| m.get("zk_version").cloned())
            .unwrap_or_else(|| "version unknown (mntr not answered)".to_owned()),
        None => "version unknown".to_owned(),
    };
    println!(
        "zk-curator lock benchmark (DESIGN.md §8){}",
        if config.quick {
            " -- QUICK run (--quick)"
        } else {
            ""
        }
    );
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned());
    println!(
        "machine:   {nproc} CPUs (nproc), Linux {kernel}, {cpu}; load average at start {load}"
    );
    if own {
        println!(
            "ZooKeeper: {version}, a standalone ZooKeeperServer on {connect}, started by this run"
        );
        println!("           (a JVM with -Xmx128m, SerialGC and the C1 compiler only, as zk-curator-testing runs it)");
    } else {
        println!("ZooKeeper: {version}, ZK_CONNECT={connect} (a chroot in it prefixes the bench's paths)");
    }
    println!("NOTE: figures are from ONE run on a shared {nproc}-core machine: the ZooKeeper server, the");
    println!("      JVM/Python peers and this program compete for the same cores. Indicative, not a verdict.");
    println!(
        "sizes:     {} warm-up + {} measured cycles; contended runs of {} s at N = {:?}; {:?} waiters over {} sessions",
        config.warmup,
        config.cycles,
        config.contend.as_secs(),
        config.sessions,
        config.waiters,
        config.waiter_sessions
    );
}

/// The out-of-process peers: how to run them, or why they cannot run.
struct Peers {
    curator: Measured<JavaPeer>,
    kazoo: Measured<PythonPeer>,
}

struct JavaPeer {
    _classes: tempfile::TempDir,
    classpath: String,
    description: String,
}

struct PythonPeer {
    python: String,
    script: PathBuf,
    description: String,
}

impl Peers {
    async fn prepare() -> Peers {
        let (curator, kazoo) = tokio::join!(prepare_java(), prepare_python());
        Peers { curator, kazoo }
    }

    fn print(&self) {
        println!("peers:     zookeeper-client 0.11.2 Client::lock (in this process)");
        match &self.curator {
            Ok(java) => println!("           {}", java.description),
            Err(reason) => println!("           Apache Curator: n/a ({reason})"),
        }
        match &self.kazoo {
            Ok(python) => println!("           {}", python.description),
            Err(reason) => println!("           kazoo: n/a ({reason})"),
        }
    }
}

fn peers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers")
}

async fn prepare_java() -> Measured<JavaPeer> {
    if !Path::new(CURATOR_JAR).exists() {
        return Err(format!(
            "{CURATOR_JAR} missing: apt-get install -y libcurator-recipes-java"
        ));
    }
    let source = peers_dir().join("CuratorBench.java");
    if !source.exists() {
        return Err(format!("{} missing", source.display()));
    }
    let classes = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let slf4j = SLF4J_JARS
        .into_iter()
        .find(|jar| Path::new(jar).exists())
        .unwrap_or_default();
    let classpath = format!("{CURATOR_JAR}:{slf4j}");
    let mut javac = tokio::process::Command::new("javac");
    javac
        .args(["-nowarn", "-cp", &classpath, "-d"])
        .arg(classes.path())
        .arg(&source);
    run_process(&mut javac, Duration::from_secs(120))
        .await
        .map_err(|e| format!("javac: {e} (apt-get install -y default-jdk-headless)"))?;
    // Debian ships the jar unversioned, with a versioned name beside it.
    let curator_version = std::fs::read_dir("/usr/share/java")
        .ok()
        .and_then(|dir| {
            dir.filter_map(|entry| entry.ok())
                .filter_map(|entry| entry.file_name().into_string().ok())
                .find_map(|name| {
                    name.strip_prefix("curator-recipes-")?
                        .strip_suffix(".jar")
                        .map(str::to_owned)
                })
        })
        .unwrap_or_else(|| "(version unknown)".to_owned());
    let java_version = run_process(
        tokio::process::Command::new("java").arg("-version"),
        Duration::from_secs(30),
    )
    .await
    .ok()
    .and_then(|out| {
        out.lines()
            .find(|l| l.contains("version"))
            .map(|l| l.trim().to_owned())
    })
    .unwrap_or_else(|| "java version unknown".to_owned());
    Ok(JavaPeer {
        classpath: format!("{}:{classpath}", classes.path().display()),
        _classes: classes,
        description: format!(
            "Apache Curator {curator_version} InterProcessMutex (Debian jar; {java_version}; default JVM flags)"
        ),
    })
}

async fn prepare_python() -> Measured<PythonPeer> {
    let script = peers_dir().join("kazoo_bench.py");
    if !script.exists() {
        return Err(format!("{} missing", script.display()));
    }
    // Debian's python3-kazoo lives in the system interpreter's dist-packages;
    // a `python3` earlier on PATH (pyenv, venv) usually cannot import it.
    let mut reasons = Vec::new();
    for python in ["/usr/bin/python3", "python3"] {
        let probe = run_process(
            tokio::process::Command::new(python).args([
                "-c",
                "import sys, kazoo.version; print(kazoo.version.__version__, sys.version.split()[0])",
            ]),
            Duration::from_secs(30),
        )
        .await;
        match probe {
            Ok(out) => {
                let mut words = out.split_whitespace();
                let kazoo = words.next().unwrap_or("?").to_owned();
                let version = words.next().unwrap_or("?").to_owned();
                return Ok(PythonPeer {
                    python: python.to_owned(),
                    script,
                    description: format!("kazoo {kazoo} Lock ({python}, Python {version})"),
                });
            }
            Err(err) => reasons.push(format!("{python}: {}", last_line(&err))),
        }
    }
    Err(format!(
        "cannot import kazoo ({}); apt-get install -y python3-kazoo",
        reasons.join("; ")
    ))
}

// ---------------------------------------------------------------------------
// The Rust contenders
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// zk-curator `InterProcessMutex::lock()` → `MutexGuard::release()`.
    Guard,
    /// zk-curator `InterProcessMutex::acquire()` / `release()`.
    Reentrant,
    /// zookeeper-client `Client::lock` with Curator's prefix.
    ZkClient,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Guard => "zk-curator mutex (guard API)",
            Kind::Reentrant => "zk-curator mutex (reentrant API)",
            Kind::ZkClient => "zookeeper-client Client::lock",
        }
    }
}

/// One session and its lock on one path.
enum Contender {
    Mutex {
        framework: Framework,
        mutex: InterProcessMutex,
        reentrant: bool,
    },
    ZkClient {
        client: zk::Client,
        dir: String,
    },
}

/// A hold, to be released.
enum Held {
    Guard(MutexGuard),
    Reentrant(InterProcessMutex),
    Node(zk::Client, String),
}

impl Contender {
    async fn connect(kind: Kind, connect: &str, path: &str) -> Result<Contender, BoxError> {
        match kind {
            Kind::Guard | Kind::Reentrant => {
                let framework = framework(connect).await?;
                let mutex = InterProcessMutex::new(framework.clone(), path)?;
                Ok(Contender::Mutex {
                    framework,
                    mutex,
                    reentrant: kind == Kind::Reentrant,
                })
            }
            Kind::ZkClient => Ok(Contender::ZkClient {
                client: raw_client(connect).await?,
                dir: path.to_owned(),
            }),
        }
    }

    async fn acquire(&self) -> Result<Held, BoxError> {
        match self {
            Contender::Mutex {
                mutex,
                reentrant: false,
                ..
            } => Ok(Held::Guard(within(ACQUIRE_LIMIT, mutex.lock()).await??)),
            Contender::Mutex {
                mutex,
                reentrant: true,
                ..
            } => {
                within(ACQUIRE_LIMIT, mutex.acquire()).await??;
                Ok(Held::Reentrant(mutex.clone()))
            }
            Contender::ZkClient { client, dir } => {
                let options = zk::LockOptions::new(zk::Acls::anyone_all()).with_ancestor_options(
                    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
                )?;
                let prefix = zk::LockPrefix::new_curator(dir, "lock-")?;
                let lock = within(ACQUIRE_LIMIT, client.lock(prefix, b"", options)).await??;
                let node = lock.lock_path().to_owned();
                // Dropping a LockClient deletes its node in the background,
                // which would leave the delete out of the cycle; we delete it
                // ourselves in `release` and skip that drop.
                std::mem::forget(lock);
                Ok(Held::Node(client.clone(), node))
            }
        }
    }

    /// zk-curator's count of watch wake-ups of this session's waiters.
    fn wakeups(&self) -> Option<u64> {
        match self {
            Contender::Mutex { framework, .. } => Some(framework.metrics().lock_wakeups()),
            Contender::ZkClient { .. } => None,
        }
    }

    async fn close(self) {
        match self {
            Contender::Mutex { framework, .. } => {
                let _ = tokio::time::timeout(CLOSE_LIMIT, framework.close()).await;
            }
            Contender::ZkClient { client, .. } => drop(client),
        }
    }
}

impl Held {
    async fn release(self) -> Result<(), BoxError> {
        match self {
            Held::Guard(guard) => within(ACQUIRE_LIMIT, guard.release()).await??,
            Held::Reentrant(mutex) => within(ACQUIRE_LIMIT, mutex.release()).await??,
            Held::Node(client, node) => within(ACQUIRE_LIMIT, client.delete(&node, None)).await??,
        }
        Ok(())
    }
}

async fn framework(connect: &str) -> Result<Framework, BoxError> {
    let framework = Framework::builder()
        .connect_string(connect)
        .session_timeout(Duration::from_secs(10))
        .connection_timeout(Duration::from_secs(10))
        .build()?;
    framework.start()?;
    framework.block_until_connected(CONNECT_LIMIT).await?;
    Ok(framework)
}

async fn raw_client(connect: &str) -> Result<zk::Client, BoxError> {
    let connecting = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(connect);
    Ok(within(CONNECT_LIMIT, connecting).await??)
}

async fn close_all(contenders: Vec<Contender>) {
    futures::future::join_all(contenders.into_iter().map(Contender::close)).await;
}

// ---------------------------------------------------------------------------
// 3. Memory per waiting participant
// ---------------------------------------------------------------------------

struct Memory {
    waiters: usize,
    rss_before_kib: i64,
    rss_after_kib: i64,
    extra: String,
}

impl Memory {
    fn per_waiter_bytes(&self) -> f64 {
        (self.rss_after_kib - self.rss_before_kib) as f64 * 1024.0 / self.waiters as f64
    }
}

async fn memory_phase(
    config: &Config,
    connect: &str,
    root: &str,
    peers: &Peers,
    four_letter: Option<&str>,
) {
    println!();
    println!(
        "== Memory per waiting participant: K waiters parked behind a held lock, over {} sessions ==",
        config.waiter_sessions
    );
    println!(
        "   (growth of the RSS of a fresh process, each contender its own, from before the waiters"
    );
    println!(
        "    exist to when all K are queued; then the holder releases and the queue drains: K+1"
    );
    println!("    releases, whose watch notifications the server counts; a herd would send ~K/2 per release)");
    println!(
        "{:<34} {:>5} {:>12} {:>12} {:>14}",
        "contender", "K", "RSS before", "RSS after", "per waiter"
    );
    let me = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"));
    let sessions = config.waiter_sessions.to_string();
    let mut largest: Vec<(&str, Measured<Memory>)> = Vec::new();
    for (round, &waiters) in config.waiters.iter().enumerate() {
        let count = waiters.to_string();
        largest.clear();
        for (label, what, dir) in [
            (
                "zk-curator mutex (guard API)",
                "a tokio task each",
                "zk-curator",
            ),
            (
                "Apache Curator InterProcessMutex",
                "a JVM thread each",
                "curator",
            ),
            ("kazoo Lock", "a Python thread each", "kazoo"),
        ] {
            let path = format!("{root}/memory-{waiters}/{dir}");
            let args = ["memory", connect, &path, &sessions, &count];
            settle().await;
            let before = watch_counts(four_letter).await;
            let figures = match dir {
                "zk-curator" => match &me {
                    Ok(me) => {
                        let mut command = tokio::process::Command::new(me);
                        command.arg(MEMORY_CHILD).args(&args[1..]);
                        match run_process(&mut command, config.phase_limit()).await {
                            Ok(output) => parse_result(&output),
                            Err(reason) => Err(reason),
                        }
                    }
                    Err(reason) => Err(reason.clone()),
                },
                "curator" => match &peers.curator {
                    Ok(java) => run_java(java, &args, config.phase_limit()).await,
                    Err(reason) => Err(reason.clone()),
                },
                _ => match &peers.kazoo {
                    Ok(python) => run_python(python, &args, config.phase_limit()).await,
                    Err(reason) => Err(reason.clone()),
                },
            }
            .and_then(|r| memory_from(&r, waiters));
            let watches = watch_delta(before, watch_counts(four_letter).await);
            match &figures {
                Ok(m) => {
                    println!(
                        "{label:<34} {waiters:>5} {:>8} KiB {:>8} KiB {:>10.1} KiB",
                        m.rss_before_kib,
                        m.rss_after_kib,
                        m.per_waiter_bytes() / 1024.0,
                    );
                    if round + 1 == config.waiters.len() {
                        println!("{:<34} {what}{}", "", m.extra);
                    }
                    if let Some(w) = watches {
                        println!(
                            "{:<34} drain: the server sent {:.0} NodeDeleted + {:.0} NodeChildrenChanged notifications",
                            "", w.deleted, w.children
                        );
                    }
                }
                Err(reason) => println!("{label:<34} {waiters:>5} n/a ({reason})"),
            }
            largest.push((label, figures));
        }
    }
    if let Some((_, Ok(rust))) = largest.first() {
        for (label, figures) in &largest[1..] {
            if let (Ok(other), true) = (figures, rust.per_waiter_bytes() > 0.0) {
                println!(
                    "ratio at K = {}: {label} uses {:.1}x zk-curator's RSS per waiter",
                    rust.waiters,
                    other.per_waiter_bytes() / rust.per_waiter_bytes()
                );
            }
        }
    }
}

fn memory_from(result: &HashMap<String, String>, waiters: usize) -> Measured<Memory> {
    let mut extra = String::new();
    if let Some(heap) = result
        .get("heap_bytes_per_waiter")
        .and_then(|v| v.parse::<f64>().ok())
    {
        extra += &format!("; JVM heap after GC {:+.1} KiB per waiter", heap / 1024.0);
    }
    if let Some(bytes) = result.get("future_bytes") {
        extra += &format!(" (its lock() future: {bytes} bytes)");
    }
    if let (Some(wakeups), Some(secs)) = (result.get("wakeups"), result.get("drain_secs")) {
        extra += &format!("; drain {secs} s, {wakeups} watch wake-ups by zk-curator's count");
    }
    Ok(Memory {
        waiters,
        rss_before_kib: field(result, "rss_kib_before")?,
        rss_after_kib: field(result, "rss_kib_after")?,
        extra,
    })
}

/// The zk-curator side of the memory measurement, in a process of its own
/// (see [`MEMORY_CHILD`]); prints a `RESULT` line like the peers. Returns
/// the exit status.
async fn memory_child(args: &[String]) -> i32 {
    let parsed = match args {
        [connect, path, sessions, waiters] => sessions
            .parse::<usize>()
            .ok()
            .zip(waiters.parse::<usize>().ok())
            .map(|(s, w)| (connect, path, s, w)),
        _ => None,
    };
    let Some((connect, path, sessions, waiters)) = parsed else {
        eprintln!("FAILED: usage: locks {MEMORY_CHILD} <connect> <path> <sessions> <waiters>");
        return 2;
    };
    match memory_zk_curator(connect, path, sessions.max(1), waiters).await {
        Ok(line) => {
            println!("RESULT kind=memory {line}");
            0
        }
        Err(err) => {
            eprintln!("FAILED: {err}");
            1
        }
    }
}

/// A holder on its own session; `waiters` tasks, spread over `sessions`
/// frameworks (one mutex each, shared by its tasks), queue behind it. Then
/// the holder releases and the queue drains, which also counts the
/// wake-ups: one per hand-off without a herd.
async fn memory_zk_curator(
    connect: &str,
    path: &str,
    sessions: usize,
    waiters: usize,
) -> Result<String, BoxError> {
    let holder_fw = framework(connect).await?;
    let holder = InterProcessMutex::new(holder_fw.clone(), path)?;
    let mut frameworks = Vec::new();
    for _ in 0..sessions {
        frameworks.push(framework(connect).await?);
    }
    let mutexes = frameworks
        .iter()
        .map(|fw| InterProcessMutex::new(fw.clone(), path))
        .collect::<Result<Vec<_>, _>>()?;
    let guard = within(ACQUIRE_LIMIT, holder.lock()).await??;
    // The state a parked waiter's task keeps (not polled, so nothing is sent).
    let future_bytes = std::mem::size_of_val(&mutexes[0].lock());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_kib().ok_or("VmRSS not readable")?;
    let wakeups_before: u64 = frameworks
        .iter()
        .map(|fw| fw.metrics().lock_wakeups())
        .sum();

    let mut tasks = Scoped(Vec::with_capacity(waiters));
    for i in 0..waiters {
        let mutex = mutexes[i % mutexes.len()].clone();
        tasks.0.push(tokio::spawn(async move {
            let guard = within(2 * ACQUIRE_LIMIT, mutex.lock()).await??;
            guard.release().await?;
            Ok::<(), BoxError>(())
        }));
    }
    let queued = async {
        loop {
            if holder.participant_nodes().await?.len() > waiters {
                return Ok::<(), BoxError>(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    within(ACQUIRE_LIMIT, queued).await??;
    tokio::time::sleep(Duration::from_millis(300)).await; // every waiter watches and parks
    let after = rss_kib().ok_or("VmRSS not readable")?;

    let drain_started = Instant::now();
    guard.release().await?;
    for task in tasks.0.iter_mut() {
        within(2 * ACQUIRE_LIMIT, task).await???;
    }
    let drained = drain_started.elapsed();
    let wakeups: u64 = frameworks
        .iter()
        .map(|fw| fw.metrics().lock_wakeups())
        .sum::<u64>()
        - wakeups_before;
    let _ = tokio::time::timeout(CLOSE_LIMIT, holder_fw.close()).await;
    for fw in frameworks {
        let _ = tokio::time::timeout(CLOSE_LIMIT, fw.close()).await;
    }
    Ok(format!(
        "waiters={waiters} rss_kib_before={before} rss_kib_after={after} future_bytes={future_bytes} wakeups={wakeups} drain_secs={:.2}",
        drained.as_secs_f64()
    ))
}

fn rss_kib() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

// ---------------------------------------------------------------------------
// 1. Uncontended acquire + release
// ---------------------------------------------------------------------------

struct Cycles {
    per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

impl Cycles {
    fn from_samples(mut samples: Vec<Duration>, total: Duration) -> Cycles {
        samples.sort_unstable();
        Cycles {
            per_s: samples.len() as f64 / total.as_secs_f64(),
            p50_ms: percentile(&samples, 0.50).as_secs_f64() * 1e3,
            p99_ms: percentile(&samples, 0.99).as_secs_f64() * 1e3,
        }
    }
}

/// Nearest-rank percentile of sorted samples (the peers use the same rule).
fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn uncontended_phase(config: &Config, connect: &str, root: &str, peers: &Peers) {
    println!();
    println!(
        "== Uncontended acquire+release: {} warm-up + {} measured cycles, one session, its own path ==",
        config.warmup, config.cycles
    );
    println!("   (the three in-process contenders take turns in 5 interleaved rounds; the peers run after them)");
    settle().await;
    let kinds = [Kind::Guard, Kind::Reentrant, Kind::ZkClient];
    let task = tokio::spawn(uncontended_rust(
        kinds,
        connect.to_owned(),
        root.to_owned(),
        config.warmup,
        config.cycles,
    ));
    let mut task = Scoped(vec![task]);
    let results = match tokio::time::timeout(config.phase_limit(), &mut task.0[0]).await {
        Ok(Ok(results)) => results,
        Ok(Err(join)) => kinds.map(|_| Err(format!("the task failed: {join}"))),
        Err(_) => kinds.map(|_| Err(format!("timed out after {:?}", config.phase_limit()))),
    };
    drop(task);
    let mut rows: Vec<(&str, Measured<Cycles>)> =
        kinds.iter().map(|k| k.label()).zip(results).collect();
    let counts = [config.warmup.to_string(), config.cycles.to_string()];
    let curator = match &peers.curator {
        Ok(java) => {
            settle().await;
            let path = format!("{root}/uncontended/curator");
            let args = ["uncontended", connect, &path, &counts[0], &counts[1]];
            run_java(java, &args, config.phase_limit())
                .await
                .and_then(|r| cycles_from(&r))
        }
        Err(reason) => Err(reason.clone()),
    };
    rows.push(("Apache Curator InterProcessMutex", curator));
    let kazoo = match &peers.kazoo {
        Ok(python) => {
            settle().await;
            let path = format!("{root}/uncontended/kazoo");
            let args = ["uncontended", connect, &path, &counts[0], &counts[1]];
            run_python(python, &args, config.phase_limit())
                .await
                .and_then(|r| cycles_from(&r))
        }
        Err(reason) => Err(reason.clone()),
    };
    rows.push(("kazoo Lock", kazoo));

    let reference = rows[0].1.as_ref().ok().map(|c| c.per_s);
    println!(
        "{:<34} {:>10} {:>9} {:>9} {:>14}",
        "contender", "cycles/s", "p50 ms", "p99 ms", "vs zk-curator"
    );
    for (label, figures) in &rows {
        match figures {
            Ok(c) => println!(
                "{label:<34} {:>10.0} {:>9.3} {:>9.3} {:>14}",
                c.per_s,
                c.p50_ms,
                c.p99_ms,
                ratio(Some(c.per_s), reference)
            ),
            Err(reason) => println!("{label:<34} n/a ({reason})"),
        }
    }
    println!("(vs zk-curator = cycles/s of the row / cycles/s of zk-curator's guard API; above 1.00x the row is faster)");
}

/// The in-process contenders, each on its own session and path, measured in
/// interleaved rounds (rotating who goes first), so that a noisy moment on a
/// shared machine does not land on one of them only. All run in this one
/// task, which owns the reentrant API's holds.
async fn uncontended_rust<const K: usize>(
    kinds: [Kind; K],
    connect: String,
    root: String,
    warmup: usize,
    cycles: usize,
) -> [Measured<Cycles>; K] {
    const ROUNDS: usize = 5;
    let mut contenders = Vec::with_capacity(K);
    let mut results: [Measured<Cycles>; K] = std::array::from_fn(|_| Err(String::new()));
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(cycles); K];
    let mut busy = [Duration::ZERO; K];
    for (i, kind) in kinds.into_iter().enumerate() {
        let path = format!("{root}/uncontended/{kind:?}");
        let contender = Contender::connect(kind, &connect, &path).await;
        if let Err(err) = &contender {
            results[i] = Err(err.to_string());
        }
        contenders.push(contender.ok());
    }
    for (i, slot) in contenders.iter_mut().enumerate() {
        if let Some(contender) = slot {
            for _ in 0..warmup {
                if let Err(err) = cycle(contender).await {
                    results[i] = Err(err.to_string());
                    *slot = None;
                    break;
                }
            }
        }
    }
    for round in 0..ROUNDS {
        let share = cycles / ROUNDS + usize::from(round < cycles % ROUNDS);
        for turn in 0..K {
            let i = (round + turn) % K;
            let Some(contender) = &contenders[i] else {
                continue;
            };
            let started = Instant::now();
            for _ in 0..share {
                let t0 = Instant::now();
                if let Err(err) = cycle(contender).await {
                    results[i] = Err(err.to_string());
                    contenders[i] = None;
                    break;
                }
                samples[i].push(t0.elapsed());
            }
            busy[i] += started.elapsed();
        }
    }
    for (i, slot) in contenders.into_iter().enumerate() {
        if let Some(contender) = slot {
            contender.close().await;
            results[i] = Ok(Cycles::from_samples(
                std::mem::take(&mut samples[i]),
                busy[i],
            ));
        }
    }
    results
}

async fn cycle(contender: &Contender) -> Result<(), BoxError> {
    contender.acquire().await?.release().await
}

fn cycles_from(result: &HashMap<String, String>) -> Measured<Cycles> {
    let cycles: f64 = field(result, "cycles")?;
    let secs: f64 = field(result, "secs")?;
    Ok(Cycles {
        per_s: cycles / secs,
        p50_ms: field(result, "p50_ms")?,
        p99_ms: field(result, "p99_ms")?,
    })
}

// ---------------------------------------------------------------------------
// 2. Contended hand-offs and the herd
// ---------------------------------------------------------------------------

struct Handoffs {
    per_s: f64,
    /// Holds begun within the window.
    holds: u64,
    /// Of those, the holds by another session than the previous hold's.
    switches: u64,
    /// All releases, the window's and the drain's after it.
    releases: u64,
    /// zk-curator's own count of waiter wake-ups.
    wakeups: Option<u64>,
    /// Watches the server fired during the run.
    server: Option<WatchCounts>,
}

#[derive(Debug, Clone, Copy)]
struct WatchCounts {
    deleted: f64,
    children: f64,
}

async fn contended_phase(
    config: &Config,
    connect: &str,
    root: &str,
    peers: &Peers,
    four_letter: Option<&str>,
) {
    println!();
    println!(
        "== Contended hand-offs: N sessions loop acquire->release on ONE path for {} s ==",
        config.contend.as_secs()
    );
    println!("   hand-offs/s = holds begun within the window / window; switched = share of those holds taken by");
    println!("   another session than the previous one; wake-ups = zk-curator's own count of waiter wake-ups and");
    println!("   server watches = NodeDeleted + NodeChildrenChanged notifications the server sent (mntr), both per");
    println!("   release (at most ~1 = one waiter woken per release; a herd would send ~N-1)");
    if four_letter.is_none() {
        println!("   (server watch counts: n/a, no host to ask in the connect string)");
    }
    println!(
        "{:>3}  {:<34} {:>12} {:>14} {:>9} {:>9} {:>15}",
        "N", "contender", "hand-offs/s", "vs zk-curator", "switched", "wake-ups", "server watches"
    );
    let secs = config.contend.as_secs().to_string();
    for &n in &config.sessions {
        let mut rows: Vec<(&str, Measured<Handoffs>)> = Vec::new();
        for kind in [Kind::Guard, Kind::ZkClient] {
            let path = format!("{root}/contended-{n}/{kind:?}");
            let before = watch_counts(four_letter).await;
            let mut figures = bounded(
                config.phase_limit(),
                contended_rust(kind, connect, &path, n, config.contend),
            )
            .await;
            let after = watch_counts(four_letter).await;
            if let Ok(h) = &mut figures {
                h.server = watch_delta(before, after);
            }
            rows.push((kind.label(), figures));
        }
        let count = n.to_string();
        let curator = match &peers.curator {
            Ok(java) => {
                let path = format!("{root}/contended-{n}/curator");
                let args = ["contended", connect, &path, &count, &secs];
                let before = watch_counts(four_letter).await;
                let result = run_java(java, &args, config.phase_limit()).await;
                let after = watch_counts(four_letter).await;
                result.and_then(|r| handoffs_from(&r, watch_delta(before, after)))
            }
            Err(reason) => Err(reason.clone()),
        };
        rows.push(("Apache Curator InterProcessMutex", curator));
        let kazoo = match &peers.kazoo {
            Ok(python) => {
                let path = format!("{root}/contended-{n}/kazoo");
                let args = ["contended", connect, &path, &count, &secs];
                let before = watch_counts(four_letter).await;
                let result = run_python(python, &args, config.phase_limit()).await;
                let after = watch_counts(four_letter).await;
                result.and_then(|r| handoffs_from(&r, watch_delta(before, after)))
            }
            Err(reason) => Err(reason.clone()),
        };
        rows.push(("kazoo Lock", kazoo));

        let reference = rows[0].1.as_ref().ok().map(|h| h.per_s);
        for (label, figures) in &rows {
            match figures {
                Ok(h) => {
                    let per_release = |x: f64| {
                        if h.releases == 0 {
                            "n/a".to_owned()
                        } else {
                            format!("{:.2}", x / h.releases as f64)
                        }
                    };
                    let wakeups = h
                        .wakeups
                        .map_or_else(|| "-".to_owned(), |w| per_release(w as f64));
                    let server = h.server.map_or_else(
                        || "n/a".to_owned(),
                        |w| format!("{} + {}", per_release(w.deleted), per_release(w.children)),
                    );
                    let switched = if h.holds == 0 {
                        "n/a".to_owned()
                    } else {
                        format!("{:.0}%", 100.0 * h.switches as f64 / h.holds as f64)
                    };
                    println!(
                        "{n:>3}  {label:<34} {:>12.0} {:>14} {:>9} {:>9} {:>15}",
                        h.per_s,
                        ratio(Some(h.per_s), reference),
                        switched,
                        wakeups,
                        server
                    );
                }
                Err(reason) => println!("{n:>3}  {label:<34} n/a ({reason})"),
            }
        }
    }
    println!("(vs zk-curator = hand-offs/s of the row / hand-offs/s of zk-curator at the same N)");
}

async fn contended_rust(
    kind: Kind,
    connect: &str,
    path: &str,
    sessions: usize,
    window: Duration,
) -> Result<Handoffs, BoxError> {
    let connecting = (0..sessions).map(|_| Contender::connect(kind, connect, path));
    let contenders = futures::future::try_join_all(connecting).await?;
    let wakeups_before: Option<u64> = contenders.iter().map(Contender::wakeups).sum();
    let deadline = Instant::now() + window;
    // The last holder; only the holder writes it, so no race.
    let last = Arc::new(AtomicUsize::new(usize::MAX));
    let mut tasks = Scoped(Vec::with_capacity(sessions));
    tasks
        .0
        .extend(contenders.into_iter().enumerate().map(|(id, contender)| {
            let last = last.clone();
            tokio::spawn(async move {
                let result = async {
                    let (mut holds, mut switches, mut releases) = (0u64, 0u64, 0u64);
                    loop {
                        let held = contender.acquire().await?;
                        let late = Instant::now() >= deadline;
                        if !late {
                            holds += 1;
                            if last.swap(id, Ordering::Relaxed) != id {
                                switches += 1;
                            }
                        }
                        held.release().await?;
                        releases += 1;
                        if late {
                            return Ok::<_, BoxError>((holds, switches, releases));
                        }
                    }
                }
                .await;
                (result, contender)
            })
        }));
    let (mut holds, mut switches, mut releases, mut failure) = (0, 0, 0, None);
    let mut contenders = Vec::new();
    for task in tasks.0.iter_mut() {
        let (result, contender) = task.await?;
        match result {
            Ok((h, s, r)) => {
                holds += h;
                switches += s;
                releases += r;
            }
            Err(err) => failure = Some(err),
        }
        contenders.push(contender);
    }
    let wakeups_after: Option<u64> = contenders.iter().map(Contender::wakeups).sum();
    close_all(contenders).await;
    if let Some(err) = failure {
        return Err(err);
    }
    Ok(Handoffs {
        per_s: holds as f64 / window.as_secs_f64(),
        holds,
        switches,
        releases,
        wakeups: wakeups_before.zip(wakeups_after).map(|(b, a)| a - b),
        server: None,
    })
}

fn handoffs_from(
    result: &HashMap<String, String>,
    server: Option<WatchCounts>,
) -> Measured<Handoffs> {
    let holds: u64 = field(result, "handoffs")?;
    let secs: f64 = field(result, "secs")?;
    Ok(Handoffs {
        per_s: holds as f64 / secs,
        holds,
        switches: field(result, "switches")?,
        releases: field(result, "releases")?,
        wakeups: None,
        server,
    })
}

// ---------------------------------------------------------------------------
// The server's four-letter words
// ---------------------------------------------------------------------------

/// The first `host:port` of a connect string (no chroot).
fn first_host(connect: &str) -> Option<String> {
    let hosts = connect.split('/').next()?;
    let first = hosts.split(',').next()?.trim();
    if first.is_empty() {
        None
    } else if first.contains(':') {
        Some(first.to_owned())
    } else {
        Some(format!("{first}:2181"))
    }
}

async fn mntr(addr: &str) -> Result<HashMap<String, String>, BoxError> {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(b"mntr").await?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await?;
        Ok::<_, std::io::Error>(reply)
    };
    let reply = within(Duration::from_secs(5), ask).await??;
    Ok(reply
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once('\t')?;
            Some((key.trim().to_owned(), value.trim().to_owned()))
        })
        .collect())
}

/// The server's running totals of fired watches, if it answers `mntr`.
async fn watch_counts(addr: Option<&str>) -> Option<WatchCounts> {
    let metrics = mntr(addr?).await.ok()?;
    let get = |key: &str| metrics.get(key).and_then(|v| v.parse::<f64>().ok());
    Some(WatchCounts {
        deleted: get("zk_sum_node_deleted_watch_count")?,
        children: get("zk_sum_node_children_watch_count")?,
    })
}

fn watch_delta(before: Option<WatchCounts>, after: Option<WatchCounts>) -> Option<WatchCounts> {
    let (b, a) = (before?, after?);
    Some(WatchCounts {
        deleted: a.deleted - b.deleted,
        children: a.children - b.children,
    })
}

// ---------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------

async fn run_java(
    java: &JavaPeer,
    args: &[&str],
    limit: Duration,
) -> Measured<HashMap<String, String>> {
    let mut command = tokio::process::Command::new("java");
    command
        .args(["-cp", &java.classpath, "CuratorBench"])
        .args(args);
    let output = run_process(&mut command, limit).await?;
    parse_result(&output)
}

async fn run_python(
    python: &PythonPeer,
    args: &[&str],
    limit: Duration,
) -> Measured<HashMap<String, String>> {
    let mut command = tokio::process::Command::new(&python.python);
    command.arg(&python.script).args(args);
    let output = run_process(&mut command, limit).await?;
    parse_result(&output)
}

/// Runs a command to completion within `limit`; its stdout+stderr on
/// success, else the reason (the last line it printed).
async fn run_process(command: &mut tokio::process::Command, limit: Duration) -> Measured<String> {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", command.as_std().get_program()))?;
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Err(_) => Err(format!("killed after {limit:?}")),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(output)) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            if output.status.success() {
                Ok(text)
            } else {
                // The peers print their reason as a `FAILED: ...` line.
                let reason = text
                    .lines()
                    .find_map(|line| line.strip_prefix("FAILED: "))
                    .map_or_else(|| last_line(&text), |r| r.chars().take(300).collect());
                Err(format!("{}: {reason}", output.status))
            }
        }
    }
}

/// The key=value pairs of the first `RESULT` line.
fn parse_result(output: &str) -> Measured<HashMap<String, String>> {
    let line = output
        .lines()
        .find_map(|line| line.strip_prefix("RESULT "))
        .ok_or_else(|| format!("no RESULT line in its output: {}", last_line(output)))?;
    Ok(line
        .split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

fn field<T: std::str::FromStr>(result: &HashMap<String, String>, key: &str) -> Measured<T> {
    result
        .get(key)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("RESULT line lacks a valid {key}"))
}

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

/// Spawned tasks, aborted when dropped: a phase cut short by its time limit
/// leaves nothing running into the next one.
struct Scoped<T>(Vec<tokio::task::JoinHandle<T>>);

impl<T> Drop for Scoped<T> {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// A pause between measurements, so that one contender's tail (a JVM
/// exiting, the server collecting garbage) does not land in the next one's.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Runs `future` for at most `limit`.
async fn within<T>(limit: Duration, future: impl Future<Output = T>) -> Result<T, BoxError> {
    tokio::time::timeout(limit, future)
        .await
        .map_err(|_| format!("timed out after {limit:?}").into())
}

/// Runs a fallible phase for at most `limit`, as a printable figure.
async fn bounded<T>(
    limit: Duration,
    future: impl Future<Output = Result<T, BoxError>>,
) -> Measured<T> {
    match tokio::time::timeout(limit, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!("timed out after {limit:?}")),
    }
}

fn ratio(value: Option<f64>, reference: Option<f64>) -> String {
    match (value, reference) {
        (Some(v), Some(r)) if r > 0.0 => format!("{:.2}x", v / r),
        _ => "n/a".to_owned(),
    }
}

fn last_line(text: &str) -> String {
    let line = text
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("(no output)");
    line.chars().take(200).collect()
}

/// Deletes `path` and everything below it (best effort, for shared ensembles).
async fn remove_tree(connect: &str, path: &str) -> Result<(), BoxError> {
    let client = raw_client(connect).await?;
    let mut stack = vec![path.to_owned()];
    let mut order = Vec::new();
    while let Some(node) = stack.pop() {
        match client.list_children(&node).await {
            Ok(children) => {
                stack.extend(children.into_iter().map(|c| format!("{node}/{c}")));
                order.push(node);
            }
            Err(zk::Error::NoNode) => {}
            Err(err) => return Err(err.into()),
        }
    }
    for node in order.into_iter().rev() {
        match client.delete(&node, None).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}
