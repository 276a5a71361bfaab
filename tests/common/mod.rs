//! Shared harness for the integration tests: one test server per test binary
//! (the embedded server by default, a real ZooKeeper with
//! `ZK_TEST_SERVER=real`), a unique path per test, a bound around each test
//! body, and small polling helpers.
#![allow(dead_code, clippy::unwrap_used)]

pub mod side;

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use zk_curator::zk;
use zk_curator::{CohortPolicy, Framework, LeaderElection, LeaderLatch, LeaderTerm};
use zk_curator_testing::{Backend, FaultProxy, TestingServer, Traffic};

/// How long tests wait for anything that should happen promptly.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The bound of an ordinary test body (see [`bounded`]): a few [`PATIENCE`]
/// waits with room to spare for the real ZooKeeper on a slow 2-core machine.
pub const BOUND: Duration = Duration::from_secs(90);

/// The bound of a test body doing many rounds or many sessions' worth of work.
pub const LONG_BOUND: Duration = Duration::from_secs(180);

/// The parent of every [`unique_path`]. [`server`] creates it with an open
/// ACL before any test runs, so no test can create it with a restrictive one.
pub const SHARED_PARENT: &str = "/tests";

/// The binary's shared server, or `None` (with a printed notice) when the
/// real backend was asked for, ZooKeeper is not installed and
/// `ZK_SKIP_MISSING` asks to skip (without it, the test fails naming what to
/// install).
pub fn server() -> Option<&'static TestingServer> {
    static SERVER: OnceLock<Option<TestingServer>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            if !real_server_available() {
                return None;
            }
            let server = TestingServer::start().expect("start the test server");
            create_open_shared_parent(&server.connect_string());
            Some(server)
        })
        .as_ref()
}

/// Creates [`SHARED_PARENT`] readable and writable by anyone. Were it left
/// to the first lock to create it, a test with a restrictive ACL provider
/// (creator-only, or read-only parents) could give it that ACL, and every
/// other test would get `NoAuth`. Runs on a thread and runtime of its own,
/// as [`server`] may be called from any runtime.
fn create_open_shared_parent(connect: &str) {
    let connect = connect.to_owned();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let client = raw_client(&connect).await;
            let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            match client.create(SHARED_PARENT, &[], &open).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(err) => panic!("create {SHARED_PARENT}: {err}"),
            }
        });
    })
    .join()
    .expect("create the shared test parent");
}

/// Whether the chosen backend can be started: always for the embedded
/// server; for the real one (`ZK_TEST_SERVER=real`), a missing ZooKeeper
/// fails the test naming what to install, or skips it with a notice under
/// `ZK_SKIP_MISSING` (the testing crate's one rule,
/// `zk_curator_testing::backend::Prerequisite::check`).
fn real_server_available() -> bool {
    let backend = Backend::from_env().expect("ZK_TEST_SERVER");
    match backend.prerequisite() {
        None => true,
        Some(prerequisite) => prerequisite.check(&current_test()),
    }
}

/// The running test's name (libtest names each test's thread after it).
fn current_test() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_owned(),
        _ => "this test".to_owned(),
    }
}

/// A fresh server of the test's own (for outage tests).
pub async fn own_server() -> Option<TestingServer> {
    if !real_server_available() {
        return None;
    }
    Some(
        TestingServer::start_async()
            .await
            .expect("start the test server"),
    )
}

/// A path no other test uses, under the shared [`SHARED_PARENT`].
pub fn unique_path(name: &str) -> String {
    format!("{SHARED_PARENT}/{name}-{}", unique_suffix())
}

/// A top-level path no other test uses, with no parent shared with other
/// tests: for tests whose ACLs would get in other tests' way if applied to a
/// shared parent (auto-created parents take the ACL provider's ACL).
pub fn unique_root(name: &str) -> String {
    format!("/{name}-{}", unique_suffix())
}

fn unique_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// Runs a test body, failing the test if it has not finished within `limit`
/// (a hang then fails by itself, naming the bound and where it was set,
/// instead of waiting for CI's limit):
///
/// ```ignore
/// let Some(server) = server() else { return };
/// bounded(BOUND, async move { /* the test */ }).await;
/// ```
///
/// A body that blocks a thread of its runtime (a deadlock on a lock, not an
/// await) stops the timer too; a watchdog thread then ends the whole test
/// process [`WATCHDOG_GRACE`] after the bound, saying why.
#[track_caller]
pub fn bounded<T>(limit: Duration, body: impl Future<Output = T>) -> impl Future<Output = T> {
    let caller = std::panic::Location::caller();
    async move {
        let _watchdog = Watchdog::start(limit + WATCHDOG_GRACE, caller);
        match tokio::time::timeout(limit, body).await {
            Ok(out) => out,
            Err(_) => {
                panic!("the test body at {caller} did not finish within its bound of {limit:?}")
            }
        }
    }
}

/// How long past its bound a test body may stay stuck before the watchdog
/// of [`bounded`] ends the test process.
pub const WATCHDOG_GRACE: Duration = Duration::from_secs(30);

/// Ends the process unless dropped within its limit (see [`bounded`]).
struct Watchdog {
    _done: std::sync::mpsc::Sender<()>,
}

impl Watchdog {
    fn start(limit: Duration, caller: &'static std::panic::Location<'static>) -> Self {
        let (done, dropped) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            // Dropping the sender disconnects: the body finished or panicked.
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = dropped.recv_timeout(limit) {
                eprintln!(
                    "the test body at {caller} is stuck {limit:?} after it began, past its bound: \
                     a thread of its runtime is blocked (a deadlock?); ending the test process"
                );
                std::process::exit(101);
            }
        });
        Self { _done: done }
    }
}

/// Expires `fw`'s session on the server and waits for its next one.
pub async fn expire(connect: &str, fw: &Framework) {
    let before = fw.session().await.unwrap();
    zk_curator_testing::expire_session(connect, before.client())
        .await
        .unwrap();
    let generation = before.generation();
    drop(before);
    assert!(
        eventually(PATIENCE, || async {
            fw.current_session()
                .is_some_and(|s| s.generation() > generation)
        })
        .await,
        "the framework builds a new session"
    );
}

/// A started, connected framework on `connect`.
pub async fn framework(connect: &str) -> Framework {
    framework_with(connect, |b| b).await
}

/// A started, connected framework, with extra builder settings.
pub async fn framework_with(
    connect: &str,
    configure: impl FnOnce(zk_curator::FrameworkBuilder) -> zk_curator::FrameworkBuilder,
) -> Framework {
    let builder = Framework::builder()
        .connect_string(connect)
        .session_timeout(Duration::from_secs(6))
        .connection_timeout(Duration::from_secs(10));
    let framework = configure(builder).build().unwrap();
    framework.start().unwrap();
    framework.block_until_connected(PATIENCE).await.unwrap();
    framework
}

/// A plain zookeeper-client session, for looking at the server directly.
pub async fn raw_client(connect: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(connect)
        .await
        .unwrap()
}

/// A started framework on `connect` and a raw client beside it, to look at
/// what the framework's locks leave on the server.
pub async fn session_and_raw(connect: &str) -> (Framework, zk::Client) {
    let fw = framework(connect).await;
    let raw = raw_client(connect).await;
    (fw, raw)
}

/// Two started frameworks on `connect` (two sessions, as two processes would
/// have) and a raw client to look at the server with: where most tests of
/// contention begin.
pub async fn two_sessions_and_raw(connect: &str) -> (Framework, Framework, zk::Client) {
    let first = framework(connect).await;
    let second = framework(connect).await;
    let raw = raw_client(connect).await;
    (first, second, raw)
}

/// What a spawned task returned, failing the test after [`PATIENCE`] or if
/// it panicked (see [`joined`] for a task that must succeed).
pub async fn finished<T>(task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("the task did not finish in time")
        .expect("the task panicked")
}

/// What a spawned task returned, failing the test after [`PATIENCE`] or if
/// it panicked or failed.
pub async fn joined<T>(task: tokio::task::JoinHandle<zk_curator::Result<T>>) -> T {
    finished(task).await.expect("the task failed")
}

/// The children of `path` (empty if it does not exist).
pub async fn children(client: &zk::Client, path: &str) -> Vec<String> {
    match client.list_children(path).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(err) => panic!("list {path}: {err}"),
    }
}

/// Waits (up to [`PATIENCE`]) until `path` has exactly `count` children, and
/// returns them: the participants of the lock at `path` (for a semaphore,
/// pass its `leases` node). Lets a test see that a waiter has queued (its
/// node is listed) before it asserts that the waiter is still waiting.
pub async fn wait_for_participants(client: &zk::Client, path: &str, count: usize) -> Vec<String> {
    let reached = eventually(PATIENCE, || async {
        children(client, path).await.len() == count
    })
    .await;
    let now = children(client, path).await;
    assert!(
        reached,
        "{path} never had {count} participants within {PATIENCE:?}; now {}: {now:?}",
        now.len()
    );
    now
}

/// Polls `check` every 50 ms until it is true; false after `limit`.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Logs to the test output when `RUST_LOG` is set.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// The opcodes of the requests `proxy` has seen since its traffic was last
/// cleared, in order.
pub fn request_opcodes(proxy: &FaultProxy) -> Vec<i32> {
    proxy
        .traffic()
        .into_iter()
        .filter_map(|t| match t {
            Traffic::Request { opcode, .. } => Some(opcode),
            Traffic::Reply { .. } => None,
        })
        .collect()
}

/// How many requests with `opcode` `proxy` has seen since its traffic was
/// last cleared.
pub fn requests_with(proxy: &FaultProxy, opcode: i32) -> usize {
    request_opcodes(proxy)
        .iter()
        .filter(|&&op| op == opcode)
        .count()
}

/// How many requests that delete a participant node `proxy` has seen since
/// its traffic was last cleared: deletes, and the multis in which a release
/// deletes its node with the lock path its acquire made (see
/// `tests/lock_path.rs`).
pub fn deletes_sent(proxy: &FaultProxy) -> usize {
    request_opcodes(proxy)
        .iter()
        .filter(|&&op| {
            op == zk_curator_testing::proxy::opcode::DELETE
                || op == zk_curator_testing::proxy::opcode::MULTI
        })
        .count()
}

/// Reads `path` through each framework's own session and waits for every
/// answer. ZooKeeper sends a session the notifications of a change before
/// its reply to any read made after that change, so once this returns,
/// every watch event that a change made before the call can cause has
/// reached each framework's client: a test that asserts that some waiter
/// was *not* woken by that change calls this first.
pub async fn read_through_each(frameworks: &[Framework], path: &str) {
    for fw in frameworks {
        let client = fw.client().await.unwrap();
        client.check_stat(path).await.unwrap();
    }
}

/// [`read_through_each`] twice: after the first round every notification
/// has reached its client; the second round trip is the (bounded) time given
/// to a task woken by one to count the wake-up before a test reads counters.
pub async fn notifications_delivered(frameworks: &[Framework], path: &str) {
    read_through_each(frameworks, path).await;
    read_through_each(frameworks, path).await;
}

/// The largest `n` in `0..limit` for which `fits(n)` holds, by bisection
/// (`fits` must hold for 0 and turn false once, somewhere below `limit`).
pub fn largest_fitting(limit: usize, fits: impl Fn(usize) -> bool) -> usize {
    let (mut low, mut high) = (0, limit);
    while low + 1 < high {
        let mid = low + (high - low) / 2;
        if fits(mid) {
            low = mid;
        } else {
            high = mid;
        }
    }
    low
}

/// The ACL of `node`, read through `framework`'s session.
pub async fn acl_of(framework: &Framework, node: &str) -> Vec<zk::Acl> {
    let (acl, _) = framework
        .call_with_retry(|client| async move { client.get_acl(node).await })
        .await
        .unwrap();
    acl
}

/// The ACL that gives `id` of `scheme` every permission, and nobody else any.
pub fn only(scheme: &str, id: &str) -> Vec<zk::Acl> {
    vec![zk::Acl::new(
        zk::Permission::ALL,
        zk::AuthId::new(scheme, id),
    )]
}

/// Waits for `election` (a latch or a selector) to lead, failing the test
/// after `limit`.
pub async fn leads(election: &impl LeaderElection, limit: Duration) -> LeaderTerm {
    LeaderElection::await_leadership_timeout(election, limit)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{} never led within {limit:?}", election.id()))
}

/// The ids of the participants of `election`'s election (a latch's or a
/// selector's), in queue order: the leader first.
pub async fn ids(election: &impl LeaderElection) -> Vec<String> {
    LeaderElection::participants(election)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect()
}

/// A started latch at `path`, with id `id`, on a framework of its own.
pub async fn started_latch(connect: &str, path: &str, id: &str) -> (Framework, LeaderLatch) {
    let fw = framework(connect).await;
    let latch = LeaderLatch::new(fw.clone(), path, id).unwrap();
    latch.start().unwrap();
    (fw, latch)
}

/// A persistent node (data `0`, open to all) for fenced writes, at a unique
/// path named after `name`, outside any lock or election path (a child of
/// one would take part in its queue).
pub async fn data_node(raw: &zk::Client, name: &str) -> String {
    let path = unique_path(name);
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    raw.create(&path, b"0", &open).await.unwrap();
    path
}

/// The last component of a node's path.
pub fn name(path: &str) -> String {
    zk_curator::framework::path::split(path).1.to_owned()
}

/// The names among `children` that are read nodes (`__READ__` in the name).
pub fn read_nodes(children: &[String]) -> Vec<String> {
    children
        .iter()
        .filter(|c| c.contains("__READ__"))
        .cloned()
        .collect()
}

/// A cohort policy that passes without a time bound to speak of (tests
/// take their time to line waiters up), 16 passes at most.
pub fn patient() -> CohortPolicy {
    CohortPolicy::new(16, Duration::from_secs(60))
}

/// Ends an election test: closes `latches` in order, waits until the
/// election at `path` has no participant left, then closes `frameworks`.
pub async fn close_election(
    raw: &zk::Client,
    path: &str,
    latches: &[&LeaderLatch],
    frameworks: &[&Framework],
) {
    for latch in latches {
        latch.close().await.unwrap();
    }
    wait_for_participants(raw, path, 0).await;
    for fw in frameworks {
        fw.close().await;
    }
}
