//! The lock benchmark (DESIGN.md §8, issue 9): zk-curator against its peers,
//! on one ZooKeeper, in one run. It prints figures and ratios; it asserts
//! nothing. BENCHMARKS.md describes the method and holds a full run.
//!
//! ```sh
//! cargo bench --bench locks                                   # full run, ~10 min
//! cargo bench --bench locks -- --plot benches/handoffs.svg    # and write the plot
//! cargo bench --bench locks -- --quick                        # CI smoke run, ~1.5 min
//! ```
//!
//! With `ZK_CONNECT` set it uses that ensemble; otherwise it starts one
//! Apache ZooKeeper configured like a production server (`locks/server.rs`:
//! forceSync=yes, ZooKeeper's default 1000 MB heap).
//!
//! Contenders, all on the same server, in the same run:
//! * zk-curator's `InterProcessMutex` (guard API: `lock()`, `release()`);
//! * `zookeeper-client`'s own `Client::lock` (Curator's node layout);
//! * Apache Curator 5.4's `InterProcessMutex` (`peers/CuratorBench.java`);
//! * kazoo's `Lock` (`peers/kazoo_bench.py`).
//!
//! The failover workload (issue 18, `locks/failover.rs`) elects a leader
//! among K sessions with zk-curator's `LeaderLatch` and with Curator's (in
//! the same JVM peer), kills the leader (cut off behind a proxy of its own,
//! its session closed on the server), and times the hand-over to the next
//! participant; its requests and watches are counted by those proxies.
//!
//! The observe workload (issue 25, `locks/observe.rs`) loses the leader of
//! an election of P `LeaderLatch` participants the same way, and times how
//! long N `LeaderObserver` streams spread over S sessions take to report
//! the new leader, against the participants' own failover; each observer
//! session's proxy counts the notifications, listings and reads a change
//! costs it (`--observers N`, `--observer-sessions S`).
//!
//! The tasks workload (T tasks on one session) has a cohort row
//! (`cohort(CohortPolicy::default())`, issue 24) beside plain zk-curator and
//! Curator, hand-off latency and fsyncs per hand-off (`mntr`
//! `zk_cnt_fsynctime`), and then the curve over `max_passes` with the other
//! session's longest wait (`locks/cohort.rs`).
//!
//! The TLS workload (issue 22, `locks/tls.rs`) starts a second server
//! serving a TLS port beside the plain one and measures uncontended cycles
//! of zk-curator and Curator over each, and the round trips of an acquire
//! over TLS through the delaying proxy.
//!
//! Fairness: every contender keeps its sessions (and the peers their
//! process: one warm JVM, one Python) for the whole run, and is warmed up
//! (thousands of cycles and a contended run) before anything is measured.
//! Every workload runs in reps, the contenders interleaved in a rotating
//! order (rep 1: A B C D, rep 2: B C D A, ...); tables print the median
//! with the min–max over the reps, and a difference counts only when the
//! ranges do not overlap ("within noise" otherwise).
//!
//! Requests and watches are the server's own counts (`mntr`:
//! `packets_received`, less the idle ping rate measured before the
//! workloads, and the fired NodeDeleted/NodeChildrenChanged watches), read
//! before and after each measurement, so every contender is counted alike.

#[path = "locks/cohort.rs"]
mod cohort;
#[path = "locks/failover.rs"]
mod failover;
#[path = "locks/observe.rs"]
mod observe;
#[path = "locks/peers.rs"]
mod peers;
#[path = "locks/plot.rs"]
mod plot;
#[path = "locks/proxy.rs"]
mod proxy;
#[path = "locks/scale.rs"]
mod scale;
#[path = "locks/server.rs"]
mod server;
#[path = "locks/stats.rs"]
mod stats;
#[path = "locks/tls.rs"]
mod tls;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zk_curator::framework::zk;
use zk_curator::recipes::MutexGuard;
use zk_curator::{CohortPolicy, Framework, FrameworkBuilder, InterProcessMutex};
use zk_curator_testing::zookeeper_available;

use failover::failover_phase;
use observe::observe_phase;
use peers::{field, Peer, PeerSetup};
use stats::{noise, ratio, Spread};
use tls::tls_phase;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A figure, or why it could not be measured (printed as `n/a (reason)`).
type Measured<T> = Result<T, String>;

/// No single acquire may take longer (the peers use the same bound).
const ACQUIRE_LIMIT: Duration = Duration::from_secs(30);
/// Connecting one session.
const CONNECT_LIMIT: Duration = Duration::from_secs(20);
/// Closing one session.
const CLOSE_LIMIT: Duration = Duration::from_secs(5);
/// Every contender's session timeout (the peers use the same): long enough
/// that idle sessions ping rarely, which keeps the request counts clean.
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// Row indexes of the fixed contenders (the ratios are against these).
const ZK_CURATOR: usize = 0;
const CURATOR: usize = 2;
/// The label of the row with `release_before_reply(true)`.
const RELEASE_BEFORE_REPLY: &str = "zk-curator (release before reply)";
/// The label of the row with cohort hand-off at its default bound (issue 24).
const COHORT: &str = "zk-curator (cohort, 16/50 ms)";

// ---------------------------------------------------------------------------
// The "per-task node" contender.
// ---------------------------------------------------------------------------

/// zk-curator with the in-process queue off (`FrameworkBuilder::local_queue(false)`):
/// every waiting task keeps a node of its own in ZooKeeper, as Curator's, and
/// as the library did before issue 9.
fn per_task_node(builder: FrameworkBuilder) -> Option<FrameworkBuilder> {
    Some(builder.local_queue(false))
}

/// How a zk-curator `Framework` is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tune {
    /// The library's defaults.
    Plain,
    /// Through [`per_task_node`].
    PerTaskNode,
    /// `FrameworkBuilder::release_before_reply(true)`: a release returns
    /// once its delete is queued, without waiting for the answer.
    ReleaseBeforeReply,
    /// `FrameworkBuilder::cohort(policy)`: a release passes the node to a
    /// task of the same framework waiting for the lock, with no request.
    Cohort(CohortPolicy),
}

impl Tune {
    fn apply(self, builder: FrameworkBuilder) -> Result<FrameworkBuilder, BoxError> {
        match self {
            Tune::Plain => Ok(builder),
            Tune::PerTaskNode => per_task_node(builder)
                .ok_or_else(|| "the per-task-node option does not exist yet".into()),
            Tune::ReleaseBeforeReply => Ok(builder.release_before_reply(true)),
            Tune::Cohort(policy) => Ok(builder.cohort(policy)),
        }
    }

    fn available(self) -> bool {
        self != Tune::PerTaskNode || per_task_node(Framework::builder()).is_some()
    }
}

// ---------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------

/// The workloads, in the order they run (the names `--only` takes).
const WORKLOADS: [&str; 8] = [
    "uncontended",
    "latency",
    "contended",
    "tasks",
    "failover",
    "observe",
    "tls",
    "scale",
];

/// The sizes of one run.
#[derive(Debug, Clone)]
struct Config {
    quick: bool,
    reps: usize,
    /// Uncontended cycles each contender runs before anything is measured.
    warmup_cycles: usize,
    /// And a contended run of this long at N = 8.
    warmup_contended: Duration,
    cycles: usize,
    latency_cycles: usize,
    /// Added by the proxy in each direction.
    delay: Duration,
    contend: Duration,
    sessions: Vec<usize>,
    /// Tasks on one session, against `task_sessions` sessions of one task.
    tasks: usize,
    task_sessions: usize,
    /// The cohort policies of the curve (issue 24), on the one-session
    /// tasks shape, and how long each point runs.
    cohort_curve: Vec<CohortPolicy>,
    curve_window: Duration,
    /// Participants in the failover workload's election.
    failover_participants: usize,
    /// Measured failovers per rep and contender.
    failovers: usize,
    /// Leadership hand-overs each election runs before anything is measured.
    failover_warmup_cycles: usize,
    /// And unmeasured failovers after them.
    failover_warmup_kills: usize,
    /// Participants in the observe workload's election.
    observe_participants: usize,
    /// Its observers (streams), and the sessions they are spread over.
    observers: usize,
    observer_sessions: usize,
    /// Measured changes of leader per rep, and unmeasured ones before.
    observe_failovers: usize,
    observe_warmup_kills: usize,
    /// Parked waiters.
    scale: Vec<usize>,
    scale_sessions: usize,
    /// The client RSS at which a scale child gives up.
    scale_rss_cap_mib: i64,
    plot: Option<PathBuf>,
    /// The workloads to run (`--only`); all of them when empty.
    only: Vec<String>,
}

impl Config {
    fn from_args() -> Result<Self, BoxError> {
        // `cargo bench` passes `--bench`; `--quick`, `--plot <file>`,
        // `--only <workloads>`, `--reps <k>`, `--sessions <n,...>`,
        // `--scale <k,...>` (the scale workload's waiter counts),
        // `--observers <n>` and `--observer-sessions <s>` (the observe
        // workload's) matter here.
        let args: Vec<String> = std::env::args().skip(1).collect();
        let quick = args.iter().any(|arg| arg == "--quick");
        let value = |flag: &str| {
            args.iter()
                .position(|arg| arg == flag)
                .and_then(|i| args.get(i + 1))
        };
        let plot = value("--plot").map(PathBuf::from);
        let list = |flag: &str| -> Vec<String> {
            value(flag)
                .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect())
                .unwrap_or_default()
        };
        let only = list("--only");
        if let Some(unknown) = only.iter().find(|w| !WORKLOADS.contains(&w.as_str())) {
            return Err(format!(
                "--only: unknown workload {unknown:?}; the workloads are {}",
                WORKLOADS.join(", ")
            )
            .into());
        }
        let positive = |flag: &str, v: &str| -> Result<usize, BoxError> {
            match v.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("{flag}: expected a whole number above 0, got {v:?}").into()),
            }
        };
        let reps = value("--reps").map(|v| positive("--reps", v)).transpose()?;
        let observers = value("--observers")
            .map(|v| positive("--observers", v))
            .transpose()?;
        let observer_sessions = value("--observer-sessions")
            .map(|v| positive("--observer-sessions", v))
            .transpose()?;
        let sessions = list("--sessions")
            .iter()
            .map(|v| positive("--sessions", v))
            .collect::<Result<Vec<usize>, _>>()?;
        let scale = list("--scale")
            .iter()
            .map(|v| positive("--scale", v))
            .collect::<Result<Vec<usize>, _>>()?;
        Ok(Config {
            quick,
            reps: reps.unwrap_or(if quick { 1 } else { 3 }),
            warmup_cycles: if quick { 200 } else { 3000 },
            warmup_contended: Duration::from_millis(if quick { 500 } else { 3000 }),
            cycles: if quick { 100 } else { 1000 },
            latency_cycles: if quick { 30 } else { 300 },
            delay: Duration::from_millis(1),
            contend: Duration::from_secs(if quick { 1 } else { 3 }),
            sessions: if sessions.is_empty() {
                vec![2, 8, 32]
            } else {
                sessions
            },
            tasks: if quick { 100 } else { 1000 },
            task_sessions: 32,
            cohort_curve: cohort::points(quick),
            curve_window: Duration::from_millis(if quick { 500 } else { 3000 }),
            failover_participants: 4,
            failovers: if quick { 3 } else { 10 },
            failover_warmup_cycles: if quick { 200 } else { 3000 },
            failover_warmup_kills: if quick { 1 } else { 5 },
            observe_participants: 3,
            observers: observers.unwrap_or(if quick { 20 } else { 100 }),
            observer_sessions: observer_sessions.unwrap_or(if quick { 2 } else { 4 }),
            observe_failovers: if quick { 2 } else { 5 },
            observe_warmup_kills: if quick { 1 } else { 3 },
            scale: match scale {
                _ if !scale.is_empty() => scale,
                _ if quick => vec![200],
                _ => vec![1_000, 10_000, 50_000],
            },
            scale_sessions: 4,
            scale_rss_cap_mib: 3072,
            plot,
            only,
        })
    }

    /// Whether the workload `name` runs (`--only`, or every workload).
    fn runs(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|w| w == name)
    }

    /// The bound on one measurement of one contender.
    fn limit(&self) -> Duration {
        self.contend + 2 * ACQUIRE_LIMIT + Duration::from_secs(60)
    }

    fn max_sessions(&self) -> usize {
        self.sessions
            .iter()
            .copied()
            .chain([self.task_sessions, 8])
            .max()
            .unwrap_or(1)
    }
}

fn main() -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(scale::SCALE_CHILD) {
        let code = runtime.block_on(scale::child(&args[2..]));
        std::process::exit(code);
    }
    runtime.block_on(run())
}

/// The server under test: ours (restarted if a workload kills it) or
/// `ZK_CONNECT`'s.
struct Target {
    server: Option<server::BenchServer>,
    /// `host:port,...` without a chroot.
    connect: String,
    /// The bench's paths start here (`ZK_CONNECT`'s chroot, if any).
    chroot: String,
    /// Where to send four-letter words.
    four_letter: Option<String>,
}

impl Target {
    fn start_own() -> Result<Target, BoxError> {
        let server = server::BenchServer::start()?;
        let address = server.address();
        Ok(Target {
            server: Some(server),
            connect: address.clone(),
            chroot: String::new(),
            four_letter: Some(address),
        })
    }

    /// Whether the server still runs and answers `ruok`.
    async fn alive(&mut self) -> bool {
        let running = self.server.as_mut().is_none_or(|s| s.is_running());
        running
            && match &self.four_letter {
                Some(addr) => four_letter(addr, "ruok").await.is_ok_and(|r| r == "imok"),
                None => true,
            }
    }
}

async fn run() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .init();
    let config = Config::from_args()?;
    let run_started = Instant::now();

    let mut target = match std::env::var("ZK_CONNECT") {
        Ok(connect) if !connect.is_empty() => {
            // A chroot in ZK_CONNECT becomes a prefix of our paths instead:
            // the contenders disagree on chroots, and the four-letter words
            // need the bare host.
            let (hosts, chroot) = match connect.split_once('/') {
                Some((hosts, chroot)) => {
                    (hosts.to_owned(), format!("/{}", chroot.trim_matches('/')))
                }
                None => (connect, String::new()),
            };
            Target {
                server: None,
                four_letter: first_host(&hosts),
                connect: hosts,
                chroot: if chroot == "/" { String::new() } else { chroot },
            }
        }
        _ => {
            if !zookeeper_available() {
                if std::env::var("ZK_REQUIRE_REAL").is_ok_and(|v| v == "1") {
                    return Err("ZK_REQUIRE_REAL=1 but ZooKeeper is not installed (apt-get install -y zookeeper)".into());
                }
                println!("NOTICE: ZooKeeper is not installed (apt-get install -y zookeeper) and ZK_CONNECT is not set; nothing to measure");
                return Ok(());
            }
            tokio::task::spawn_blocking(Target::start_own).await??
        }
    };
    let root = format!(
        "{}/bench/locks-{}-{}",
        target.chroot,
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );

    print_header(&config, &target).await;
    let (java, python) = tokio::join!(peers::prepare_java(), peers::prepare_python());
    let mut contenders = start_contenders(&java, &python).await;
    println!("contenders (in table order):");
    for c in &contenders {
        println!("  {:<36} {}", c.label, c.description);
    }

    let mut findings = Findings {
        labels: contenders.iter().map(|c| c.label).collect(),
        ..Findings::default()
    };
    warm_up(&config, &target, &root, &mut contenders).await;
    let idle = idle_rate(&config, target.four_letter.as_deref()).await;
    // Each workload that runs (`--only`), in order, on the same contenders.
    macro_rules! workload {
        ($name:literal, $phase:ident) => {
            if config.runs($name) {
                $phase(
                    &config,
                    &target,
                    &root,
                    &mut contenders,
                    idle,
                    &mut findings,
                )
                .await;
            }
        };
    }
    workload!("uncontended", uncontended_phase);
    workload!("latency", latency_phase);
    workload!("contended", contended_phase);
    workload!("tasks", tasks_phase);
    workload!("failover", failover_phase);
    workload!("observe", observe_phase);
    workload!("tls", tls_phase);
    // The contenders' sessions go before the scale workload, which may
    // kill the server (before issue 9 it does).
    for c in contenders {
        c.close().await;
    }
    if config.runs("scale") {
        scale_phase(&config, &mut target, &root, &java, &python, &mut findings).await;
    }
    print_targets(&config, &findings);

    if target.server.is_none() {
        // A shared ensemble keeps the persistent parents some recipes
        // leave, so remove them.
        if let Err(err) =
            bounded(Duration::from_secs(60), remove_tree(&target.connect, &root)).await
        {
            println!("note: could not remove {root}: {err}");
        }
    }
    println!();
    println!(
        "total run time {:.0} s{}",
        run_started.elapsed().as_secs_f64(),
        if config.quick { " (--quick)" } else { "" }
    );
    drop(target);
    Ok(())
}

// ---------------------------------------------------------------------------
// Header
// ---------------------------------------------------------------------------

async fn print_header(config: &Config, target: &Target) {
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
    let version = match &target.four_letter {
        Some(addr) => mntr(addr)
            .await
            .ok()
            .and_then(|m| m.get("zk_version").cloned())
            .map(|v| v.split('-').next().unwrap_or(&v).to_owned())
            .unwrap_or_else(|| "version unknown (mntr not answered)".to_owned()),
        None => "version unknown".to_owned(),
    };
    println!(
        "zk-curator lock benchmark (DESIGN.md §8, issue 9){}",
        if config.quick {
            " -- QUICK run (--quick): 1 rep, tiny sizes, no noise estimate"
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
    if target.server.is_some() {
        println!(
            "ZooKeeper: {version} standalone on {}, started by this run: forceSync=yes, -Xmx{}, default GC/JIT",
            target.connect,
            server::HEAP
        );
    } else {
        println!(
            "ZooKeeper: {version}, ZK_CONNECT={} (a chroot in it prefixes the bench's paths)",
            target.connect
        );
    }
    println!("NOTE: the server, the JVM/Python peers and this program share the machine's {nproc} cores.");
    println!(
        "method:    warm-up {} uncontended cycles + {:.1} s contended (N = 8) per contender; {} rep(s),",
        config.warmup_cycles,
        config.warmup_contended.as_secs_f64(),
        config.reps
    );
    println!(
        "           contenders interleaved in a rotating order; median and min–max over the reps;"
    );
    println!("           \"within noise\" = the min–max ranges overlap");
    if !config.only.is_empty() {
        println!("workloads: only {} (--only)", config.only.join(", "));
    }
}

// ---------------------------------------------------------------------------
// Contenders
// ---------------------------------------------------------------------------

/// One contender of every workload.
struct Contender {
    label: &'static str,
    /// A short name for paths.
    short: &'static str,
    description: String,
    imp: Imp,
}

enum Imp {
    ZkCurator {
        tune: Tune,
        pools: HashMap<String, Vec<Framework>>,
    },
    ZkClient {
        pools: HashMap<String, Vec<zk::Client>>,
    },
    Peer(Box<Measured<Peer>>),
}

async fn start_contenders(
    java: &Measured<PeerSetup>,
    python: &Measured<PeerSetup>,
) -> Vec<Contender> {
    async fn serve(setup: &Measured<PeerSetup>, label: &'static str) -> (Measured<Peer>, String) {
        match setup {
            Ok(setup) => (setup.serve(label).await, setup.description.clone()),
            Err(reason) => (Err(reason.clone()), "n/a".to_owned()),
        }
    }
    let ((curator, curator_desc), (kazoo, kazoo_desc)) = tokio::join!(
        serve(java, "Apache Curator InterProcessMutex"),
        serve(python, "kazoo Lock")
    );
    let mut contenders = vec![
        Contender {
            label: "zk-curator InterProcessMutex",
            short: "zkc",
            description: "this crate, guard API (lock(), release()), in this process".to_owned(),
            imp: Imp::ZkCurator {
                tune: Tune::Plain,
                pools: HashMap::new(),
            },
        },
        Contender {
            label: "zookeeper-client Client::lock",
            short: "zkclient",
            description: "zookeeper-client 0.11 (Curator's node layout), in this process"
                .to_owned(),
            imp: Imp::ZkClient {
                pools: HashMap::new(),
            },
        },
        Contender {
            label: "Apache Curator InterProcessMutex",
            short: "curator",
            description: match &curator {
                Ok(_) => curator_desc,
                Err(reason) => format!("n/a ({reason})"),
            },
            imp: Imp::Peer(Box::new(curator)),
        },
        Contender {
            label: "kazoo Lock",
            short: "kazoo",
            description: match &kazoo {
                Ok(_) => kazoo_desc,
                Err(reason) => format!("n/a ({reason})"),
            },
            imp: Imp::Peer(Box::new(kazoo)),
        },
    ];
    if Tune::PerTaskNode.available() {
        contenders.push(Contender {
            label: "zk-curator (per-task node)",
            short: "zkc-pertask",
            description: "zk-curator with a node per waiting task (before issue 9)".to_owned(),
            imp: Imp::ZkCurator {
                tune: Tune::PerTaskNode,
                pools: HashMap::new(),
            },
        });
    }
    contenders.push(Contender {
        label: RELEASE_BEFORE_REPLY,
        short: "zkc-rbr",
        description: "zk-curator with release_before_reply(true): a release returns once its delete is queued"
            .to_owned(),
        imp: Imp::ZkCurator {
            tune: Tune::ReleaseBeforeReply,
            pools: HashMap::new(),
        },
    });
    contenders.push(Contender {
        label: COHORT,
        short: "zkc-cohort",
        description: "zk-curator with cohort(CohortPolicy::default()): a release passes the node to a waiting task of the same framework, no request"
            .to_owned(),
        imp: Imp::ZkCurator {
            tune: Tune::Cohort(CohortPolicy::default()),
            pools: HashMap::new(),
        },
    });
    contenders
}

/// One task's lock on one path.
#[derive(Clone)]
enum LockHandle {
    Mutex(InterProcessMutex),
    ZkClient(zk::Client, String),
}

/// A hold, to be released.
enum Held {
    Guard(MutexGuard),
    Node(zk::Client, String),
}

impl LockHandle {
    async fn acquire(&self) -> Result<Held, BoxError> {
        match self {
            LockHandle::Mutex(mutex) => {
                Ok(Held::Guard(within(ACQUIRE_LIMIT, mutex.lock()).await??))
            }
            LockHandle::ZkClient(client, dir) => {
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
}

impl Held {
    async fn release(self) -> Result<(), BoxError> {
        match self {
            Held::Guard(guard) => within(ACQUIRE_LIMIT, guard.release()).await??,
            Held::Node(client, node) => within(ACQUIRE_LIMIT, client.delete(&node, None)).await??,
        }
        Ok(())
    }
}

impl Contender {
    /// Opens (and keeps) `n` sessions to `connect`; not measured.
    async fn connect(&mut self, connect: &str, n: usize) -> Measured<()> {
        match &mut self.imp {
            Imp::ZkCurator { tune, pools } => {
                let pool = pools.entry(connect.to_owned()).or_default();
                while pool.len() < n {
                    pool.push(framework(connect, *tune).await.map_err(|e| e.to_string())?);
                }
                Ok(())
            }
            Imp::ZkClient { pools } => {
                let pool = pools.entry(connect.to_owned()).or_default();
                while pool.len() < n {
                    pool.push(raw_client(connect).await.map_err(|e| e.to_string())?);
                }
                Ok(())
            }
            Imp::Peer(peer) => peer
                .as_mut()
                .as_mut()
                .map_err(|r| r.clone())?
                .request(&format!("connect {connect} {n}"), CONNECT_LIMIT * n as u32)
                .await
                .map(drop),
        }
    }

    /// One lock handle per session (its tasks share it, like the peers'
    /// threads share their session's mutex).
    fn handles(&self, connect: &str, path: &str, n: usize) -> Result<Vec<LockHandle>, BoxError> {
        match &self.imp {
            Imp::ZkCurator { pools, .. } => pools
                .get(connect)
                .map(|p| &p[..n.min(p.len())])
                .unwrap_or_default()
                .iter()
                .map(|fw| Ok(LockHandle::Mutex(InterProcessMutex::new(fw.clone(), path)?)))
                .collect(),
            Imp::ZkClient { pools } => Ok(pools
                .get(connect)
                .map(|p| &p[..n.min(p.len())])
                .unwrap_or_default()
                .iter()
                .map(|c| LockHandle::ZkClient(c.clone(), path.to_owned()))
                .collect()),
            Imp::Peer(_) => Err("not in this process".into()),
        }
    }

    async fn uncontended(
        &mut self,
        connect: &str,
        path: &str,
        cycles: usize,
        limit: Duration,
    ) -> Measured<Cycles> {
        self.connect(connect, 1).await?;
        if let Imp::Peer(peer) = &mut self.imp {
            let peer = peer.as_mut().as_mut().map_err(|r| r.clone())?;
            let r = peer
                .request(&format!("uncontended {connect} {path} {cycles}"), limit)
                .await?;
            let secs: f64 = field(&r, "secs")?;
            return Ok(Cycles {
                per_s: field::<f64>(&r, "cycles")? / secs,
                p50_ms: field(&r, "p50_ms")?,
                p99_ms: field(&r, "p99_ms")?,
                acq_p50_ms: field(&r, "acq_p50_ms")?,
                acq_p99_ms: field(&r, "acq_p99_ms")?,
                cycles,
            });
        }
        let handle = self
            .handles(connect, path, 1)
            .map_err(|e| e.to_string())?
            .pop()
            .ok_or("no session")?;
        let run = async move {
            let mut samples = Vec::with_capacity(cycles);
            let mut acquires = Vec::with_capacity(cycles);
            let started = Instant::now();
            for _ in 0..cycles {
                let t0 = Instant::now();
                let held = handle.acquire().await?;
                acquires.push(t0.elapsed());
                held.release().await?;
                samples.push(t0.elapsed());
            }
            Ok::<_, BoxError>(Cycles::from_samples(samples, acquires, started.elapsed()))
        };
        bounded(limit, run).await
    }

    async fn contended(
        &mut self,
        connect: &str,
        path: &str,
        sessions: usize,
        tasks: usize,
        window: Duration,
        limit: Duration,
    ) -> Measured<Handoffs> {
        self.connect(connect, sessions).await?;
        if let Imp::Peer(peer) = &mut self.imp {
            let peer = peer.as_mut().as_mut().map_err(|r| r.clone())?;
            let r = peer
                .request(
                    &format!(
                        "contended {connect} {path} {sessions} {tasks} {}",
                        window.as_millis()
                    ),
                    limit,
                )
                .await?;
            // The hand-off latency is optional: a peer that does not
            // measure it leaves it out.
            let gap = field::<f64>(&r, "handoff_p50_ms")
                .and_then(|p50| Ok((p50, field::<f64>(&r, "handoff_p99_ms")?)))
                .ok();
            return Ok(Handoffs {
                per_s: field::<f64>(&r, "handoffs")? / field::<f64>(&r, "secs")?,
                holds: field(&r, "handoffs")?,
                switches: field(&r, "switches")?,
                releases: field(&r, "releases")?,
                gap_ms: gap,
                passes: None,
            });
        }
        let handles = self
            .handles(connect, path, sessions)
            .map_err(|e| e.to_string())?;
        let passes_before = self.passes(connect, sessions);
        let mut figures = bounded(limit, contended_rust(handles, tasks, window)).await?;
        figures.passes = passes_before
            .zip(self.passes(connect, sessions))
            .map(|(before, after)| after - before);
        Ok(figures)
    }

    /// The cohort passes of the first `n` frameworks on `connect` so far
    /// (zk-curator rows only).
    fn passes(&self, connect: &str, n: usize) -> Option<u64> {
        match &self.imp {
            Imp::ZkCurator { pools, .. } => pools.get(connect).map(|p| {
                p[..n.min(p.len())]
                    .iter()
                    .map(|fw| fw.metrics().lock_passes())
                    .sum()
            }),
            _ => None,
        }
    }

    async fn close(self) {
        match self.imp {
            Imp::ZkCurator { pools, .. } => {
                let closing = pools.into_values().flatten().map(|fw| async move {
                    let _ = tokio::time::timeout(CLOSE_LIMIT, fw.close()).await;
                });
                futures::future::join_all(closing).await;
            }
            Imp::ZkClient { pools } => drop(pools),
            Imp::Peer(peer) => {
                if let Ok(peer) = *peer {
                    peer.quit().await;
                }
            }
        }
    }
}

/// A connected framework; over TLS for a `tcp+tls://` connect string (the
/// TLS workload's).
async fn framework(connect: &str, tune: Tune) -> Result<Framework, BoxError> {
    let builder = Framework::builder()
        .connect_string(connect)
        .session_timeout(SESSION_TIMEOUT)
        .connection_timeout(Duration::from_secs(10));
    let framework = tune.apply(tls::configure(builder, connect)?)?.build()?;
    framework.start()?;
    framework.block_until_connected(CONNECT_LIMIT).await?;
    Ok(framework)
}

async fn raw_client(connect: &str) -> Result<zk::Client, BoxError> {
    let connecting = zk::Client::connector()
        .with_session_timeout(SESSION_TIMEOUT)
        .connect(connect);
    Ok(within(CONNECT_LIMIT, connecting).await??)
}

/// `tasks` tasks, task i on handle i % handles, loop acquire → release on
/// one path for `window`; a hold begun after the window is released and not
/// counted.
async fn contended_rust(
    handles: Vec<LockHandle>,
    tasks: usize,
    window: Duration,
) -> Result<Handoffs, BoxError> {
    if handles.is_empty() {
        return Err("no session".into());
    }
    let origin = Instant::now();
    let deadline = origin + window;
    // The last holder; only the holder writes it, so no race.
    let last = Arc::new(AtomicUsize::new(usize::MAX));
    // When the last holder began its release, in ns since `origin` (0: no
    // release yet); only the holder writes it. The next acquire to return
    // measures the hand-off from there.
    let released = Arc::new(AtomicU64::new(0));
    let mut running = Scoped(Vec::with_capacity(tasks));
    for id in 0..tasks {
        let handle = handles[id % handles.len()].clone();
        let (last, released) = (last.clone(), released.clone());
        running.0.push(tokio::spawn(async move {
            let (mut holds, mut switches, mut releases) = (0u64, 0u64, 0u64);
            let mut gaps = Vec::new();
            loop {
                let held = handle.acquire().await?;
                let now = Instant::now();
                let late = now >= deadline;
                if !late {
                    holds += 1;
                    if last.swap(id, Ordering::Relaxed) != id {
                        switches += 1;
                    }
                    let since = released.load(Ordering::SeqCst);
                    if since != 0 {
                        let at = (now - origin).as_nanos() as u64;
                        gaps.push(Duration::from_nanos(at.saturating_sub(since)));
                    }
                }
                released.store(origin.elapsed().as_nanos().max(1) as u64, Ordering::SeqCst);
                held.release().await?;
                releases += 1;
                if late {
                    return Ok::<_, BoxError>((holds, switches, releases, gaps));
                }
            }
        }));
    }
    let (mut holds, mut switches, mut releases, mut failure) = (0, 0, 0, None);
    let mut gaps = Vec::new();
    for task in running.0.iter_mut() {
        match task.await? {
            Ok((h, s, r, g)) => {
                holds += h;
                switches += s;
                releases += r;
                gaps.extend(g);
            }
            Err(err) => failure = Some(err),
        }
    }
    if let Some(err) = failure {
        return Err(err);
    }
    gaps.sort_unstable();
    let ms = |q| percentile(&gaps, q).as_secs_f64() * 1e3;
    Ok(Handoffs {
        per_s: holds as f64 / window.as_secs_f64(),
        holds,
        switches,
        releases,
        gap_ms: (!gaps.is_empty()).then(|| (ms(0.50), ms(0.99))),
        passes: None,
    })
}

// ---------------------------------------------------------------------------
// Figures
// ---------------------------------------------------------------------------

struct Cycles {
    per_s: f64,
    /// Of acquire+release.
    p50_ms: f64,
    p99_ms: f64,
    /// Of the acquire alone.
    acq_p50_ms: f64,
    acq_p99_ms: f64,
    cycles: usize,
}

impl Cycles {
    fn from_samples(
        mut samples: Vec<Duration>,
        mut acquires: Vec<Duration>,
        total: Duration,
    ) -> Cycles {
        samples.sort_unstable();
        acquires.sort_unstable();
        let ms = |sorted: &[Duration], q| percentile(sorted, q).as_secs_f64() * 1e3;
        Cycles {
            per_s: samples.len() as f64 / total.as_secs_f64(),
            p50_ms: ms(&samples, 0.50),
            p99_ms: ms(&samples, 0.99),
            acq_p50_ms: ms(&acquires, 0.50),
            acq_p99_ms: ms(&acquires, 0.99),
            cycles: samples.len(),
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

struct Handoffs {
    per_s: f64,
    /// Holds begun within the window.
    holds: u64,
    /// Of those, the holds by another task than the previous hold's.
    switches: u64,
    /// All releases, the window's and the drain's after it.
    releases: u64,
    /// Hand-off latency, p50 and p99 in ms: from the start of a release to
    /// the next acquire returning (holds within the window).
    gap_ms: Option<(f64, f64)>,
    /// Cohort passes of the contender's frameworks during the run (and its
    /// drain); zk-curator rows only.
    passes: Option<u64>,
}

/// The server's running totals (`mntr`).
#[derive(Debug, Clone, Copy)]
struct Counters {
    packets: f64,
    deleted: f64,
    children: f64,
    ephemerals: f64,
    /// Watches set now (all kinds, all sessions).
    watches_set: f64,
    /// Transaction-log fsyncs so far (`zk_cnt_fsynctime`: the count of the
    /// server's fsync-time summary, one sample per `FileChannel.force` of
    /// the log, ZooKeeper 3.6+), if the server reports it.
    fsyncs: Option<f64>,
}

/// What the server saw during one measurement.
#[derive(Debug, Clone, Copy)]
struct Traffic {
    /// Requests from the clients (packets received, less our own `mntr`
    /// and the idle ping rate).
    requests: f64,
    /// NodeDeleted + NodeChildrenChanged notifications sent.
    watches: f64,
    /// Transaction-log fsyncs (a group commit syncs several writes at once).
    fsyncs: Option<f64>,
}

impl Traffic {
    fn between(
        before: Option<Counters>,
        after: Option<Counters>,
        elapsed: Duration,
        idle: f64,
    ) -> Option<Traffic> {
        let (b, a) = (before?, after?);
        Some(Traffic {
            requests: (a.packets - b.packets - 1.0 - idle * elapsed.as_secs_f64()).max(0.0),
            watches: (a.deleted - b.deleted) + (a.children - b.children),
            fsyncs: a.fsyncs.zip(b.fsyncs).map(|(a, b)| a - b),
        })
    }
}

/// One rep of one contender in one workload.
struct Sample<T> {
    figures: T,
    traffic: Option<Traffic>,
}

/// The reps of every contender in one workload: `[contender][rep]`.
type Reps<T> = Vec<Vec<Measured<Sample<T>>>>;

/// The spread of one figure over a contender's successful reps.
fn spread<T>(
    reps: &[Measured<Sample<T>>],
    figure: impl Fn(&Sample<T>) -> Option<f64>,
) -> Option<Spread> {
    let values: Vec<f64> = reps
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .filter_map(figure)
        .collect();
    Spread::of(&values)
}

/// Why a contender's reps failed, if any did (`k of n reps failed: reason`).
fn failures<T>(reps: &[Measured<Sample<T>>]) -> Option<String> {
    let failed: Vec<&String> = reps.iter().filter_map(|r| r.as_ref().err()).collect();
    let first = failed.first()?;
    Some(if failed.len() == reps.len() {
        format!("n/a ({first})")
    } else {
        format!("{} of {} reps failed: {first}", failed.len(), reps.len())
    })
}

/// The contender order of rep `rep`: rotated by one each rep.
fn rotation(rep: usize, count: usize) -> impl Iterator<Item = usize> {
    (0..count).map(move |turn| (rep + turn) % count)
}

/// Runs `measure` once per rep and contender in the rotating order, with the
/// server's counters read around each call.
async fn run_reps<T, F>(
    config: &Config,
    addr: Option<&str>,
    idle: f64,
    contenders: &mut [Contender],
    mut measure: F,
) -> Reps<T>
where
    F: for<'a> FnMut(
        &'a mut Contender,
        usize,
    ) -> std::pin::Pin<Box<dyn Future<Output = Measured<T>> + Send + 'a>>,
{
    let mut reps: Reps<T> = (0..contenders.len()).map(|_| Vec::new()).collect();
    for rep in 0..config.reps {
        for i in rotation(rep, contenders.len()) {
            settle().await;
            let before = counters(addr).await;
            let started = Instant::now();
            let result = measure(&mut contenders[i], rep).await;
            let elapsed = started.elapsed();
            let after = counters(addr).await;
            reps[i].push(result.map(|figures| Sample {
                figures,
                traffic: Traffic::between(before, after, elapsed, idle),
            }));
        }
    }
    reps
}

/// A table row's leading columns: median, min–max, vs Curator, vs zk-curator.
fn lead_columns(spreads: &[Option<Spread>], i: usize, decimals: usize) -> String {
    match &spreads[i] {
        Some(s) => format!(
            "{:>10.*} {:>17} {:>9} {:>9}",
            decimals,
            s.median,
            s.range(decimals),
            ratio(Some(s), spreads.get(CURATOR).and_then(Option::as_ref)),
            ratio(Some(s), spreads[ZK_CURATOR].as_ref()),
        ),
        None => format!("{:>10} {:>17} {:>9} {:>9}", "n/a", "", "", ""),
    }
}

fn lead_header(what: &str) -> String {
    format!(
        "{:<34} {:>10} {:>17} {:>9} {:>9}",
        "contender", what, "min–max", "vs Cur.", "vs zkc"
    )
}

/// The noise note of row `i`: against Curator (Curator's row: against zk-curator).
fn noise_note(spreads: &[Option<Spread>], i: usize) -> String {
    let reference = if i == CURATOR { ZK_CURATOR } else { CURATOR };
    let name = if reference == CURATOR {
        "Curator"
    } else {
        "zk-curator"
    };
    if i == reference {
        return String::new();
    }
    noise(
        spreads[i].as_ref(),
        spreads.get(reference).and_then(Option::as_ref),
        name,
    )
}

fn per(value: Option<f64>, count: f64) -> Option<f64> {
    (count > 0.0).then(|| value.map(|v| v / count)).flatten()
}

fn opt(value: Option<Spread>, decimals: usize) -> String {
    value.map_or_else(
        || "n/a".to_owned(),
        |s| format!("{:.*}", decimals, s.median),
    )
}

// ---------------------------------------------------------------------------
// 0. Warm-up and the idle request rate
// ---------------------------------------------------------------------------

async fn warm_up(config: &Config, target: &Target, root: &str, contenders: &mut [Contender]) {
    println!();
    println!(
        "== Warm-up: every contender connects its {} sessions, runs {} uncontended cycles, then {:.1} s at N = 8 ==",
        config.max_sessions(),
        config.warmup_cycles,
        config.warmup_contended.as_secs_f64()
    );
    let limit = config.limit() + Duration::from_secs(config.warmup_cycles as u64 / 20);
    for c in contenders.iter_mut() {
        let started = Instant::now();
        let path = format!("{root}/warmup/{}", c.short);
        let result = async {
            c.connect(&target.connect, config.max_sessions()).await?;
            let u = c
                .uncontended(&target.connect, &path, config.warmup_cycles, limit)
                .await?;
            let h = c
                .contended(&target.connect, &path, 8, 8, config.warmup_contended, limit)
                .await?;
            Ok::<_, String>((u, h))
        }
        .await;
        match result {
            Ok((u, h)) => println!(
                "  {:<34} {} cycles ({:.0}/s, the last run's rate), {} contended holds; {:.1} s",
                c.label,
                u.cycles,
                u.per_s,
                h.holds,
                started.elapsed().as_secs_f64()
            ),
            Err(reason) => println!("  {:<34} n/a ({reason})", c.label),
        }
    }
}

/// Packets per second the server receives while the bench is idle (pings of
/// the kept sessions), subtracted from every request count.
async fn idle_rate(config: &Config, addr: Option<&str>) -> f64 {
    let window = Duration::from_secs(if config.quick { 1 } else { 3 });
    settle().await;
    let before = counters(addr).await;
    tokio::time::sleep(window).await;
    let after = counters(addr).await;
    let rate = match (before, after) {
        (Some(b), Some(a)) => ((a.packets - b.packets - 1.0) / window.as_secs_f64()).max(0.0),
        _ => 0.0,
    };
    println!(
        "idle request rate (the kept sessions' pings, subtracted from every request count): {rate:.1}/s"
    );
    rate
}

// ---------------------------------------------------------------------------
// 1. Uncontended
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Findings {
    uncontended_rate: Vec<Option<Spread>>,
    uncontended_requests: Vec<Option<Spread>>,
    uncontended_acq_p50: Vec<Option<Spread>>,
    latency_p50: Vec<Option<Spread>>,
    proxy_rtt_ms: Option<f64>,
    /// (N, per contender: hand-offs/s, requests/hand-off, watches/hand-off).
    contended: Vec<(usize, Vec<[Option<Spread>; 3]>)>,
    labels: Vec<&'static str>,
    /// zk-curator: T tasks on one session, one task on each of 32 sessions.
    tasks: Option<(Option<Spread>, Option<Spread>)>,
    /// Curator's hand-offs/s with T threads on one session.
    tasks_curator: Option<Spread>,
    /// The cohort row of the tasks workload (T tasks on one session).
    cohort_row: Option<cohort::Row>,
    /// The curve over `max_passes`.
    cohort_curve: Vec<cohort::Point>,
    /// (K, variant, outcome) of the scale workload.
    scale: Vec<(usize, &'static str, Measured<ScaleFigures>)>,
    /// The TLS workload's rates and round trips.
    tls: Option<tls::TlsFindings>,
}

async fn uncontended_phase(
    config: &Config,
    target: &Target,
    root: &str,
    contenders: &mut [Contender],
    idle: f64,
    findings: &mut Findings,
) {
    println!();
    println!(
        "== Uncontended acquire+release: {} cycles a rep, one session, one path per contender ==",
        config.cycles
    );
    let connect = target.connect.clone();
    let (cycles, limit) = (config.cycles, config.limit());
    let reps = run_reps(
        config,
        target.four_letter.as_deref(),
        idle,
        contenders,
        |c, _| {
            let path = format!("{root}/uncontended/{}", c.short);
            let connect = connect.clone();
            Box::pin(async move { c.uncontended(&connect, &path, cycles, limit).await })
        },
    )
    .await;
    let rates: Vec<Option<Spread>> = reps
        .iter()
        .map(|r| spread(r, |s| Some(s.figures.per_s)))
        .collect();
    let requests: Vec<Option<Spread>> = reps
        .iter()
        .map(|r| {
            spread(r, |s| {
                per(s.traffic.map(|t| t.requests), s.figures.cycles as f64)
            })
        })
        .collect();
    println!(
        "{} {:>8} {:>8} {:>8} {:>9}  note",
        lead_header("cycles/s"),
        "acq p50",
        "p50 ms",
        "p99 ms",
        "req/cycle"
    );
    for (i, c) in contenders.iter().enumerate() {
        let acq = spread(&reps[i], |s| Some(s.figures.acq_p50_ms));
        let p50 = spread(&reps[i], |s| Some(s.figures.p50_ms));
        let p99 = spread(&reps[i], |s| Some(s.figures.p99_ms));
        println!(
            "{:<34} {} {:>8} {:>8} {:>8} {:>9}  {}{}",
            c.label,
            lead_columns(&rates, i, 0),
            opt(acq, 3),
            opt(p50, 3),
            opt(p99, 3),
            opt(requests[i], 2),
            noise_note(&rates, i),
            failures(&reps[i])
                .map(|f| format!(" {f}"))
                .unwrap_or_default()
        );
    }
    println!("(cycles/s: higher is better; vs Cur./vs zkc = median / that row's median; acq p50 = of the acquire alone,");
    println!(" p50/p99 = of acquire+release, in ms, medians over the reps; req/cycle = requests the server received per cycle)");
    findings.uncontended_rate = rates;
    findings.uncontended_requests = requests;
    findings.uncontended_acq_p50 = reps
        .iter()
        .map(|r| spread(r, |s| Some(s.figures.acq_p50_ms)))
        .collect();
}

// ---------------------------------------------------------------------------
// 2. Latency through a delaying proxy
// ---------------------------------------------------------------------------

async fn latency_phase(
    config: &Config,
    target: &Target,
    root: &str,
    contenders: &mut [Contender],
    idle: f64,
    findings: &mut Findings,
) {
    println!();
    println!(
        "== Latency where round trips cost: uncontended acquire+release through a proxy adding {} ms each way ==",
        config.delay.as_millis()
    );
    let upstream = match resolve(&target.connect).await {
        Some(addr) => addr,
        None => {
            println!("n/a (cannot resolve {})", target.connect);
            return;
        }
    };
    let proxy = match proxy::DelayProxy::start(upstream, config.delay) {
        Ok(proxy) => proxy,
        Err(err) => {
            println!("n/a (proxy: {err})");
            return;
        }
    };
    let via = proxy.addr().to_string();
    // What the proxy really adds to one round trip (tokio's timer has 1 ms
    // granularity): p50 of `exists` through it, less the p50 direct.
    let direct = exists_p50(&target.connect, 200).await;
    let proxied = exists_p50(&via, 200).await;
    match (&direct, &proxied) {
        (Ok(d), Ok(p)) => {
            println!(
                "one round trip (p50 of 200 `exists`): direct {d:.3} ms, through the proxy {p:.3} ms: the proxy adds {:.3} ms",
                p - d
            );
            findings.proxy_rtt_ms = Some(p - d);
        }
        _ => println!("one round trip: n/a ({direct:?} / {proxied:?})"),
    }
    // Calibration: a create and a list sent back to back (as zk-curator's
    // acquire sends them) must cost one round trip through the proxy.
    let pair_dir = format!("{root}/latency-pair");
    let direct = pipelined_p50(&target.connect, &pair_dir, 100).await;
    let proxied = pipelined_p50(&via, &pair_dir, 100).await;
    match (&direct, &proxied, findings.proxy_rtt_ms) {
        (Ok(d), Ok(p), Some(rtt)) if rtt > 0.0 => {
            let trips = (p - d) / rtt;
            println!(
                "calibration, create + list sent back to back by zookeeper-client (p50 of 100): direct {d:.3} ms, through the proxy {p:.3} ms = {trips:.1} added round trips"
            );
            if trips > 1.5 {
                println!("   (more than one: the list left the client a round trip after the create. Without TCP_NODELAY,");
                println!("    Nagle's algorithm holds a second small write until the first is acknowledged; this workspace");
                println!("    builds zookeeper-client with it set (third_party/zookeeper-client): is that patch in force?)");
            }
        }
        _ => println!("calibration (create + list back to back): n/a ({direct:?} / {proxied:?})"),
    }
    let (cycles, limit) = (config.latency_cycles, config.limit());
    // A session through the proxy for every contender, and a few cycles on
    // it, before anything is measured.
    for c in contenders.iter_mut() {
        let path = format!("{root}/latency/{}", c.short);
        let _ = c.uncontended(&via, &path, 10, limit).await;
    }
    let reps = run_reps(
        config,
        target.four_letter.as_deref(),
        idle,
        contenders,
        |c, _| {
            let path = format!("{root}/latency/{}", c.short);
            let via = via.clone();
            Box::pin(async move { c.uncontended(&via, &path, cycles, limit).await })
        },
    )
    .await;
    let p50: Vec<Option<Spread>> = reps
        .iter()
        .map(|r| spread(r, |s| Some(s.figures.acq_p50_ms)))
        .collect();
    println!(
        "{} {:>8} {:>11} {:>11} {:>7} {:>9}  note",
        lead_header("acq p50 ms"),
        "acq p99",
        "acq+rel p50",
        "acq+rel p99",
        "trips",
        "req/cycle"
    );
    for (i, c) in contenders.iter().enumerate() {
        let acq_p99 = spread(&reps[i], |s| Some(s.figures.acq_p99_ms));
        let cycle_p50 = spread(&reps[i], |s| Some(s.figures.p50_ms));
        let cycle_p99 = spread(&reps[i], |s| Some(s.figures.p99_ms));
        // Round trips of the acquire: the latency the proxy added to it,
        // in the proxy's round trips.
        let trips = match (
            p50[i],
            findings.uncontended_acq_p50.get(i).copied().flatten(),
            findings.proxy_rtt_ms.filter(|r| *r > 0.0),
        ) {
            (Some(via), Some(direct), Some(rtt)) => {
                format!("{:.1}", (via.median - direct.median) / rtt)
            }
            _ => "-".to_owned(),
        };
        let requests = spread(&reps[i], |s| {
            per(s.traffic.map(|t| t.requests), s.figures.cycles as f64)
        });
        println!(
            "{:<34} {} {:>8} {:>11} {:>11} {:>7} {:>9}  {}{}",
            c.label,
            lead_columns(&p50, i, 3),
            opt(acq_p99, 3),
            opt(cycle_p50, 3),
            opt(cycle_p99, 3),
            trips,
            opt(requests, 2),
            noise_note(&p50, i),
            failures(&reps[i])
                .map(|f| format!(" {f}"))
                .unwrap_or_default()
        );
    }
    println!(
        "({cycles} cycles a rep; latency: LOWER is better; trips = (acq p50 here - acq p50 without the proxy) / the proxy's round trip)"
    );
    findings.latency_p50 = p50;
    drop(proxy);
}

async fn resolve(connect: &str) -> Option<std::net::SocketAddr> {
    let first = first_host(connect)?;
    tokio::net::lookup_host(first).await.ok()?.next()
}

/// p50 (ms) of `n` sequential `exists` calls through `connect`.
async fn exists_p50(connect: &str, n: usize) -> Result<f64, String> {
    let client = raw_client(connect).await.map_err(|e| e.to_string())?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        within(ACQUIRE_LIMIT, client.check_stat("/"))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        samples.push(t0.elapsed());
    }
    samples.sort_unstable();
    Ok(percentile(&samples, 0.5).as_secs_f64() * 1e3)
}

/// p50 (ms) of `n` ephemeral-sequential creates each sent together with a
/// list of the parent (both queued before either is awaited).
async fn pipelined_p50(connect: &str, dir: &str, n: usize) -> Result<f64, String> {
    let pair = async {
        let client = raw_client(connect).await?;
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let mut level = String::new();
        for part in dir.trim_start_matches('/').split('/') {
            level = format!("{level}/{part}");
            match client.create(&level, b"", &persistent).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(err) => return Err(err.into()),
            }
        }
        let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let prefix = format!("{dir}/n-");
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let t0 = Instant::now();
            let create = client.create(&prefix, b"", &ephemeral);
            let list = client.list_children(dir);
            let (created, listed) = futures::join!(create, list);
            samples.push(t0.elapsed());
            let (_, sequence) = created?;
            listed?;
            client.delete(&format!("{dir}/n-{sequence}"), None).await?;
        }
        samples.sort_unstable();
        Ok::<_, BoxError>(percentile(&samples, 0.5).as_secs_f64() * 1e3)
    };
    bounded(Duration::from_secs(60), pair).await
}

// ---------------------------------------------------------------------------
// 3. Contended hand-offs
// ---------------------------------------------------------------------------

async fn contended_phase(
    config: &Config,
    target: &Target,
    root: &str,
    contenders: &mut [Contender],
    idle: f64,
    findings: &mut Findings,
) {
    println!();
    println!(
        "== Contended hand-offs: N sessions (one task each) loop acquire->release on ONE path for {} s a rep ==",
        config.contend.as_secs()
    );
    println!("   hand-offs/s = holds begun within the window / window; req = requests the server received per");
    println!("   hand-off; watches = NodeDeleted + NodeChildrenChanged notifications per hand-off (a herd: ~N-1);");
    println!("   switched = share of holds taken by another session than the previous hold's");
    let mut series: Vec<plot::Series> = contenders
        .iter()
        .map(|c| plot::Series {
            label: c.label.to_owned(),
            points: Vec::new(),
        })
        .collect();
    for &n in &config.sessions {
        let connect = target.connect.clone();
        let (window, limit) = (config.contend, config.limit());
        let reps = run_reps(
            config,
            target.four_letter.as_deref(),
            idle,
            contenders,
            |c, _| {
                let path = format!("{root}/contended-{n}/{}", c.short);
                let connect = connect.clone();
                Box::pin(async move { c.contended(&connect, &path, n, n, window, limit).await })
            },
        )
        .await;
        let rates: Vec<Option<Spread>> = reps
            .iter()
            .map(|r| spread(r, |s| Some(s.figures.per_s)))
            .collect();
        println!();
        println!(
            "N = {n}\n{} {:>7} {:>8} {:>9}  note",
            lead_header("hand-offs/s"),
            "req",
            "watches",
            "switched"
        );
        let mut row = Vec::new();
        for (i, c) in contenders.iter().enumerate() {
            let releases = |s: &Sample<Handoffs>| s.figures.releases as f64;
            let req = spread(&reps[i], |s| {
                per(s.traffic.map(|t| t.requests), releases(s))
            });
            let watches = spread(&reps[i], |s| per(s.traffic.map(|t| t.watches), releases(s)));
            let switched = spread(&reps[i], |s| {
                (s.figures.holds > 0)
                    .then(|| 100.0 * s.figures.switches as f64 / s.figures.holds as f64)
            });
            println!(
                "{:<34} {} {:>7} {:>8} {:>9}  {}{}",
                c.label,
                lead_columns(&rates, i, 0),
                opt(req, 2),
                opt(watches, 2),
                switched.map_or_else(|| "n/a".to_owned(), |s| format!("{:.0}%", s.median)),
                noise_note(&rates, i),
                failures(&reps[i])
                    .map(|f| format!(" {f}"))
                    .unwrap_or_default()
            );
            if let Some(s) = rates[i] {
                series[i].points.push((n, s));
            }
            row.push([rates[i], req, watches]);
        }
        findings.contended.push((n, row));
    }
    if let Some(path) = &config.plot {
        let svg = plot::handoffs_svg(
            "Contended hand-offs/s against N sessions (one ZooKeeper 3.8, forceSync=yes)",
            &format!(
                "{} rep(s) of {} s, contenders interleaved; {}",
                config.reps,
                config.contend.as_secs(),
                chrono_free_date()
            ),
            &series,
        );
        match std::fs::write(path, svg) {
            Ok(()) => println!("plot written to {}", path.display()),
            Err(err) => println!("plot: cannot write {}: {err}", path.display()),
        }
    }
}

/// Today's date (UTC) from `date`, for the plot's subtitle.
fn chrono_free_date() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// 4. Many tasks on one session
// ---------------------------------------------------------------------------

async fn tasks_phase(
    config: &Config,
    target: &Target,
    root: &str,
    contenders: &mut [Contender],
    idle: f64,
    findings: &mut Findings,
) {
    let (t, s) = (config.tasks, config.task_sessions);
    println!();
    println!(
        "== {t} tasks (threads for the peers) on ONE session against {s} sessions of one task, one path, {} s a rep ==",
        config.contend.as_secs()
    );
    let connect = target.connect.clone();
    let (window, limit) = (config.contend, config.limit());
    let addr = target.four_letter.clone();
    // Each rep runs both shapes per contender, in alternating order, with
    // the server's counts read around each shape.
    let reps = run_reps(config, None, 0.0, contenders, |c, rep| {
        let (connect, addr) = (connect.clone(), addr.clone());
        let base = format!("{root}/tasks/{}", c.short);
        Box::pin(async move {
            let (mut single, mut many) = (None, None);
            for shape in [rep % 2, 1 - rep % 2] {
                let (sessions, tasks, path) = if shape == 0 {
                    (1, t, format!("{base}-one"))
                } else {
                    (s, s, format!("{base}-many"))
                };
                c.connect(&connect, sessions).await?;
                settle().await;
                let before = counters(addr.as_deref()).await;
                let started = Instant::now();
                let result = c
                    .contended(&connect, &path, sessions, tasks, window, limit)
                    .await?;
                let elapsed = started.elapsed();
                let after = counters(addr.as_deref()).await;
                let traffic = Traffic::between(before, after, elapsed, idle);
                let releases = result.releases as f64;
                let shape_figures = Shape {
                    requests: per(traffic.map(|t| t.requests), releases),
                    fsyncs: per(traffic.and_then(|t| t.fsyncs), releases),
                    handoffs: result,
                };
                if shape == 0 {
                    single = Some(shape_figures);
                } else {
                    many = Some(shape_figures);
                }
            }
            match (single, many) {
                (Some(a), Some(b)) => Ok((a, b)),
                _ => Err("a shape did not run".to_owned()),
            }
        })
    })
    .await;
    println!(
        "{:<34} {:>18} {:>17} {:>6} {:>18} {:>17} {:>6} {:>7}  note",
        "contender",
        format!("1 x {t} hand-offs/s"),
        "min–max",
        "req",
        format!("{s} x 1 hand-offs/s"),
        "min–max",
        "req",
        "ratio"
    );
    for (i, c) in contenders.iter().enumerate() {
        let single = spread(&reps[i], |x| Some(x.figures.0.handoffs.per_s));
        let many = spread(&reps[i], |x| Some(x.figures.1.handoffs.per_s));
        let single_req = spread(&reps[i], |x| x.figures.0.requests);
        let many_req = spread(&reps[i], |x| x.figures.1.requests);
        let cell = |v: Option<Spread>, req: Option<Spread>| match v {
            Some(v) => format!("{:>18.0} {:>17} {:>6}", v.median, v.range(0), opt(req, 2)),
            None => format!("{:>18} {:>17} {:>6}", "n/a", "", ""),
        };
        let note = match (&single, &many) {
            (Some(a), Some(b)) => match a.within_noise(b) {
                Some(true) => "within noise of each other".to_owned(),
                Some(false) => String::new(),
                None => "1 rep: no noise estimate".to_owned(),
            },
            _ => String::new(),
        };
        println!(
            "{:<34} {} {} {:>7}  {}{}",
            c.label,
            cell(single, single_req),
            cell(many, many_req),
            ratio(single.as_ref(), many.as_ref()),
            note,
            failures(&reps[i])
                .map(|f| format!(" {f}"))
                .unwrap_or_default()
        );
        if i == ZK_CURATOR {
            findings.tasks = Some((single, many));
        }
    }
    println!("(ratio = one session's hand-offs/s / {s} sessions'; req = requests the server received per hand-off)");

    // The one-session shape in detail: what a hand-off costs the server,
    // and how long it takes.
    println!();
    println!("{t} tasks on ONE session, in detail (the same reps):");
    let rates: Vec<Option<Spread>> = reps
        .iter()
        .map(|r| spread(r, |x| Some(x.figures.0.handoffs.per_s)))
        .collect();
    println!(
        "{} {:>7} {:>7} {:>8} {:>8} {:>7}  note",
        lead_header("hand-offs/s"),
        "req",
        "fsyncs",
        "p50 ms",
        "p99 ms",
        "passes"
    );
    for (i, c) in contenders.iter().enumerate() {
        fn shape(x: &Sample<(Shape, Shape)>) -> &Shape {
            &x.figures.0
        }
        let req = spread(&reps[i], |x| shape(x).requests);
        let fsyncs = spread(&reps[i], |x| shape(x).fsyncs);
        let p50 = spread(&reps[i], |x| shape(x).handoffs.gap_ms.map(|g| g.0));
        let p99 = spread(&reps[i], |x| shape(x).handoffs.gap_ms.map(|g| g.1));
        let passes = spread(&reps[i], |x| {
            let h = &shape(x).handoffs;
            per(h.passes.map(|p| p as f64), h.releases as f64)
        });
        println!(
            "{:<34} {} {:>7} {:>7} {:>8} {:>8} {:>7}  {}{}",
            c.label,
            lead_columns(&rates, i, 0),
            opt(req, 2),
            opt(fsyncs, 2),
            opt(p50, 3),
            opt(p99, 3),
            opt(passes, 2),
            noise_note(&rates, i),
            failures(&reps[i])
                .map(|f| format!(" {f}"))
                .unwrap_or_default()
        );
        if c.label == COHORT {
            findings.cohort_row = Some(cohort::Row {
                rate: rates[i],
                requests: req,
                fsyncs,
                p50,
                p99,
            });
        }
    }
    findings.tasks_curator = rates.get(CURATOR).copied().flatten();
    println!("(req, fsyncs = the server's requests and transaction-log fsyncs (mntr zk_cnt_fsynctime) per hand-off;");
    println!(" p50/p99 = hand-off latency, from the start of a release to the next acquire returning, holds in the window;");
    println!(" passes = cohort passes (no request) per hand-off, zk-curator rows)");

    cohort::curve(config, target, root, idle, findings).await;
}

/// One shape of one rep of the tasks workload.
struct Shape {
    handoffs: Handoffs,
    /// Requests per hand-off.
    requests: Option<f64>,
    /// Transaction-log fsyncs per hand-off.
    fsyncs: Option<f64>,
}

// ---------------------------------------------------------------------------
// 5. Scale: K parked waiters
// ---------------------------------------------------------------------------

struct ScaleFigures {
    rss_before_kib: f64,
    rss_after_kib: f64,
    hwm_kib: f64,
    park_secs: f64,
    nodes: f64,
    park_requests: f64,
    drain_secs: f64,
    drain_requests: f64,
    drain_watches: f64,
    server_alive: bool,
}

async fn scale_phase(
    config: &Config,
    target: &mut Target,
    root: &str,
    java: &Measured<PeerSetup>,
    python: &Measured<PeerSetup>,
    findings: &mut Findings,
) {
    let sessions = config.scale_sessions;
    println!();
    println!(
        "== Scale: K tasks parked on one held mutex over {sessions} sessions (zk-curator, a fresh process each) =="
    );
    println!("   (the readers row: K readers parked behind a held write lock)");
    println!("   RSS = the child's VmRSS growth from before the waiters to parked (HWM = its peak over the run);");
    println!("   park = until every lock() is polled and the server is quiet; nodes = waiters' nodes in ZooKeeper;");
    println!("   drain = release, until every task took and released the lock once; server = alive after the run");
    println!(
        "{:<28} {:>6} {:>9} {:>9} {:>9} {:>8} {:>7} {:>8} {:>8} {:>9} {:>6}",
        "variant",
        "K",
        "RSS MiB",
        "per wait",
        "HWM MiB",
        "park s",
        "nodes",
        "req/w",
        "drain s",
        "drain/s",
        "server"
    );
    let me = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"));
    // (label, the child's variant argument)
    let mut variants = vec![("zk-curator", "plain")];
    if Tune::PerTaskNode.available() {
        variants.push(("zk-curator (per-task node)", "per-task-node"));
    }
    // Readers waiting behind a held write lock.
    variants.push(("zk-curator, readers", "readers"));
    for (label, variant) in variants {
        let mut skip: Option<String> = None;
        for &k in &config.scale {
            if variant == "per-task-node" && k > scale::DRAIN_UP_TO && skip.is_none() {
                // A node per waiter: the server's heap goes first (a
                // million waiters' nodes exhaust a 1 GB heap).
                skip = Some(format!(
                    "a node per waiter, more than {}",
                    scale::DRAIN_UP_TO
                ));
            }
            if let Some(reason) = &skip {
                println!("{label:<28} {k:>6} skipped ({reason})");
                findings
                    .scale
                    .push((k, label, Err(format!("skipped ({reason})"))));
                continue;
            }
            let Some(addr) = target.four_letter.clone() else {
                println!("{label:<28} {k:>6} n/a (no host for mntr in the connect string)");
                continue;
            };
            settle().await;
            // Parking is bounded in time (before issue 9 it grows with the
            // square of K: 10,000 waiters took ~25 s here); the drain's bound
            // grows with K (50,000 at a few hundred hand-offs/s take minutes).
            let park_limit = Duration::from_secs(if config.quick { 60 } else { 180 });
            let drain_limit = Duration::from_secs(60 + k as u64 / 100);
            let path = format!("{root}/scale-{k}/{variant}");
            let outcome = match &me {
                Ok(me) => {
                    let mut command = tokio::process::Command::new(me);
                    command.arg(scale::SCALE_CHILD).args([
                        target.connect.as_str(),
                        addr.as_str(),
                        path.as_str(),
                        &sessions.to_string(),
                        &k.to_string(),
                        &park_limit.as_secs().to_string(),
                        &drain_limit.as_secs().to_string(),
                        &config.scale_rss_cap_mib.to_string(),
                        variant,
                    ]);
                    let limit = park_limit + drain_limit + Duration::from_secs(120);
                    match peers::run_process(&mut command, limit).await {
                        Ok(output) => peers::parse_result(&output),
                        Err(reason) => Err(reason),
                    }
                }
                Err(reason) => Err(reason.clone()),
            };
            let alive = target.alive().await;
            let figures = outcome.and_then(|r| {
                Ok(ScaleFigures {
                    rss_before_kib: field(&r, "rss_kib_before")?,
                    rss_after_kib: field(&r, "rss_kib_after")?,
                    hwm_kib: field(&r, "hwm_kib")?,
                    park_secs: field(&r, "park_secs")?,
                    nodes: field(&r, "nodes")?,
                    park_requests: field(&r, "park_requests")?,
                    drain_secs: field(&r, "drain_secs")?,
                    drain_requests: field(&r, "drain_requests")?,
                    drain_watches: field(&r, "drain_watches")?,
                    server_alive: alive,
                })
            });
            match &figures {
                Ok(f) => println!(
                    "{label:<28} {k:>6} {:>9.1} {:>6.1} KB {:>9.1} {:>8.2} {:>7.0} {:>8.2} {:>8.2} {:>9.0} {:>6}",
                    f.rss_after_kib / 1024.0,
                    (f.rss_after_kib - f.rss_before_kib) / k as f64,
                    f.hwm_kib / 1024.0,
                    f.park_secs,
                    f.nodes,
                    f.park_requests / k as f64,
                    f.drain_secs,
                    k as f64 / f.drain_secs,
                    if alive { "alive" } else { "DIED" }
                ),
                Err(reason) => println!(
                    "{label:<28} {k:>6} n/a ({reason}); server {}",
                    if alive { "alive" } else { "DIED" }
                ),
            }
            match &figures {
                // The readers are granted together: one hand-off in all.
                Ok(_) if k > scale::DRAIN_UP_TO => println!(
                    "{:<28} {:>6} (more than {} waiters: cancelled, not drained; drain s = the time to cancel them all)",
                    "", "", scale::DRAIN_UP_TO
                ),
                Ok(f) if variant == "readers" => println!(
                    "{:<28} {:>6} drain: {:.0} requests and {:.0} watch notifications in all",
                    "", "", f.drain_requests, f.drain_watches
                ),
                Ok(f) => println!(
                    "{:<28} {:>6} drain: {:.2} requests and {:.2} watch notifications per hand-off",
                    "",
                    "",
                    f.drain_requests / (k as f64 + 1.0),
                    f.drain_watches / (k as f64 + 1.0)
                ),
                Err(_) => {}
            }
            if !alive {
                let why = target
                    .server
                    .as_ref()
                    .map(|s| s.log_tail())
                    .unwrap_or_else(|| "no answer to ruok".to_owned());
                println!("{:<28} {:>6} server died: {why}", "", "");
                skip = Some(format!("the server died at K = {k}"));
                if target.server.is_some() {
                    match tokio::task::spawn_blocking(Target::start_own).await {
                        Ok(Ok(fresh)) => {
                            println!(
                                "{:<28} {:>6} (a fresh server was started for what follows)",
                                "", ""
                            );
                            *target = fresh;
                        }
                        Ok(Err(err)) => {
                            println!("cannot restart the server: {err}");
                            return;
                        }
                        Err(err) => {
                            println!("cannot restart the server: {err}");
                            return;
                        }
                    }
                }
            } else if figures.is_err() {
                skip = Some(format!("K = {k} failed"));
            }
            findings.scale.push((
                k,
                label,
                figures.map(|mut f| {
                    f.server_alive = alive;
                    f
                }),
            ));
        }
    }
    peers_memory(config, target, root, java, python).await;
}

/// RSS per parked waiter of the peers, at the smallest K, each in a fresh
/// process (one thread per waiter: that is how they wait).
async fn peers_memory(
    config: &Config,
    target: &Target,
    root: &str,
    java: &Measured<PeerSetup>,
    python: &Measured<PeerSetup>,
) {
    let Some(&k) = config.scale.first() else {
        return;
    };
    println!();
    println!(
        "peers, K = {k} waiters over {} sessions, a thread each (RSS growth of a fresh process):",
        config.scale_sessions
    );
    for (label, setup, dir) in [
        ("Apache Curator InterProcessMutex", java, "curator"),
        ("kazoo Lock", python, "kazoo"),
    ] {
        let path = format!("{root}/scale-peers/{dir}");
        let (sessions, count) = (config.scale_sessions.to_string(), k.to_string());
        let args = ["memory", target.connect.as_str(), &path, &sessions, &count];
        settle().await;
        let result = match setup {
            Ok(setup) => setup.run_once(&args, config.limit()).await,
            Err(reason) => Err(reason.clone()),
        };
        match result.and_then(|r| {
            Ok((
                field::<f64>(&r, "rss_kib_before")?,
                field::<f64>(&r, "rss_kib_after")?,
            ))
        }) {
            Ok((before, after)) => println!(
                "  {label:<34} RSS {:.1} MiB parked, {:.1} KB per waiter",
                after / 1024.0,
                (after - before) / k as f64
            ),
            Err(reason) => println!("  {label:<34} n/a ({reason})"),
        }
    }
}

// ---------------------------------------------------------------------------
// 6. The issue's targets
// ---------------------------------------------------------------------------

fn print_targets(config: &Config, f: &Findings) {
    println!();
    println!("== Issue 9 and 22 targets (from the figures above; a verdict, not an assertion) ==");
    let verdict = |ok: Option<bool>| match ok {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "n/a",
    };
    let zk_rate = f.uncontended_rate.get(ZK_CURATOR).copied().flatten();
    let cur_rate = f.uncontended_rate.get(CURATOR).copied().flatten();
    let zk_req = f.uncontended_requests.get(ZK_CURATOR).copied().flatten();
    let noise_of = |a: Option<Spread>, b: Option<Spread>| match (a, b) {
        (Some(a), Some(b)) => match a.within_noise(&b) {
            Some(true) => " (within noise)",
            _ => "",
        },
        _ => "",
    };
    println!(
        "uncontended: {} requests/cycle (target <= 3): {}; {} Curator's rate{} (target >= 1x): {}",
        opt(zk_req, 2),
        verdict(zk_req.map(|r| r.median <= 3.05)),
        ratio(zk_rate.as_ref(), cur_rate.as_ref()),
        noise_of(zk_rate, cur_rate),
        verdict(zk_rate.zip(cur_rate).map(|(a, b)| a.median >= b.median))
    );
    let zk_p50 = f.latency_p50.get(ZK_CURATOR).copied().flatten();
    let cur_p50 = f.latency_p50.get(CURATOR).copied().flatten();
    println!(
        "latency (+{} ms each way): acquire p50 {} Curator's{} (target <= 0.6x): {}",
        config.delay.as_millis(),
        ratio(zk_p50.as_ref(), cur_p50.as_ref()),
        noise_of(zk_p50, cur_p50),
        verdict(zk_p50.zip(cur_p50).map(|(a, b)| a.median <= 0.6 * b.median))
    );
    for (n, row) in &f.contended {
        if *n < 8 {
            continue;
        }
        let cur = row.get(CURATOR).copied().unwrap_or([None; 3]);
        let fast = f.labels.iter().position(|l| *l == RELEASE_BEFORE_REPLY);
        for (index, which) in [(Some(ZK_CURATOR), ""), (fast, " (release before reply)")] {
            let Some(zk) = index.and_then(|i| row.get(i)).copied() else {
                continue;
            };
            println!(
                "contended N = {n}{which}: {} Curator{} (target >= 1.2x): {}; {} requests/hand-off (target <= 4): {}; {} watches/hand-off (target 1): {}",
                ratio(zk[0].as_ref(), cur[0].as_ref()),
                noise_of(zk[0], cur[0]),
                verdict(zk[0].zip(cur[0]).map(|(a, b)| a.median >= 1.2 * b.median)),
                opt(zk[1], 2),
                verdict(zk[1].map(|r| r.median <= 4.0)),
                opt(zk[2], 2),
                verdict(zk[2].map(|w| w.median <= 1.05)),
            );
        }
    }
    if let Some((single, many)) = f.tasks {
        println!(
            "{} tasks on one session: {} the {}-session rate (target >= 0.8x): {}",
            config.tasks,
            ratio(single.as_ref(), many.as_ref()),
            config.task_sessions,
            verdict(single.zip(many).map(|(a, b)| a.median >= 0.8 * b.median))
        );
    }
    for (k, label, outcome) in &f.scale {
        match outcome {
            Ok(s) => {
                let drain_rate = *k as f64 / s.drain_secs;
                // The targets are for 10,000 waiters; other sizes are
                // measured and printed only.
                let checks = if *k == 10_000 {
                    format!(
                        " -- server alive: {}; RSS < 64 MB: {}; drain >= uncontended rate: {}",
                        verdict(Some(s.server_alive)),
                        verdict(Some(s.rss_after_kib < 64.0 * 1024.0)),
                        verdict(zk_rate.map(|r| drain_rate >= r.median))
                    )
                } else {
                    String::new()
                };
                println!(
                    "{label}, K = {k}: server {}, client RSS {:.1} MiB parked, park {:.2} s, drain {:.2} s = {:.0}/s ({} x the uncontended cycle rate){checks}",
                    if s.server_alive { "alive" } else { "DIED" },
                    s.rss_after_kib / 1024.0,
                    s.park_secs,
                    s.drain_secs,
                    drain_rate,
                    zk_rate.map_or_else(|| "-".to_owned(), |r| format!("{:.2}", drain_rate / r.median)),
                );
            }
            Err(reason) => println!(
                "{label}, K = {k}: {reason}{}",
                if *k == 10_000 { " -- NOT met" } else { "" }
            ),
        }
    }
    cohort::print_targets(config, f);
    tls::print_targets(f);
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

async fn four_letter(addr: &str, word: &str) -> Result<String, BoxError> {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(word.as_bytes()).await?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await?;
        Ok::<_, std::io::Error>(reply)
    };
    Ok(within(Duration::from_secs(5), ask).await??)
}

async fn mntr(addr: &str) -> Result<HashMap<String, String>, BoxError> {
    let reply = four_letter(addr, "mntr").await?;
    Ok(reply
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once('\t')?;
            Some((key.trim().to_owned(), value.trim().to_owned()))
        })
        .collect())
}

/// The server's running totals, if it answers `mntr`.
async fn counters(addr: Option<&str>) -> Option<Counters> {
    let metrics = mntr(addr?).await.ok()?;
    let get = |key: &str| metrics.get(key).and_then(|v| v.parse::<f64>().ok());
    Some(Counters {
        packets: get("zk_packets_received")?,
        deleted: get("zk_sum_node_deleted_watch_count")?,
        children: get("zk_sum_node_children_watch_count")?,
        ephemerals: get("zk_ephemerals_count")?,
        watches_set: get("zk_watch_count")?,
        fsyncs: get("zk_cnt_fsynctime"),
    })
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

/// A pause between measurements, so that one contender's tail (the server
/// collecting garbage, a background delete) does not land in the next one's.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
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
