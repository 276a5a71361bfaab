//! The recipes and what `zk-curator locks` and `leader` report agree.
//!
//! For each recipe, holders and waiters are made with the recipe itself,
//! each on a framework (so a session) of its own: a holder is one whose
//! acquire returned, a waiter one whose acquire is still pending, queued in
//! the order they were started (each one's node is seen on the server before
//! the next starts). The built binary's `--json` output must then name
//! exactly those sessions, as holders and waiters, in that order, and each
//! holder by the node its guard holds. After each release the next waiter's
//! acquire returns and the report must follow. Runs on the embedded server
//! by default, on a real ZooKeeper with `ZK_TEST_SERVER=real`.
#![allow(clippy::unwrap_used, missing_docs)]

use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::task::JoinHandle;
use zk_curator::{
    Framework, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreMutex,
    InterProcessSemaphoreV2, LeaderElection, LeaderLatch,
};
use zk_curator_testing::TestingServer;

const BIN: &str = env!("CARGO_BIN_EXE_zk-curator");
/// The bound on each test body, and on one wait for a condition.
const TEST_LIMIT: Duration = Duration::from_secs(60);
const WAIT_LIMIT: Duration = Duration::from_secs(20);

fn server() -> &'static TestingServer {
    static SERVER: OnceLock<TestingServer> = OnceLock::new();
    SERVER.get_or_init(|| TestingServer::start().expect("test server"))
}

fn unique(name: &str) -> String {
    format!("/layouts-agree/{name}-{}", std::process::id())
}

/// A started, connected framework: one contender, one session.
async fn contender() -> (Framework, i64) {
    let framework = Framework::builder()
        .connect_string(server().connect_string())
        .session_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    framework.start().unwrap();
    framework.block_until_connected(WAIT_LIMIT).await.unwrap();
    let session = framework.session().await.unwrap().id();
    (framework, session)
}

/// `N` contenders.
async fn contenders<const N: usize>() -> [(Framework, i64); N] {
    let mut started = Vec::with_capacity(N);
    for _ in 0..N {
        started.push(contender().await);
    }
    started.try_into().unwrap_or_else(|_| unreachable!())
}

/// `zk-curator <args> --json`, parsed.
async fn report(args: &[&str]) -> Value {
    let output = tokio::process::Command::new(BIN)
        .args(args)
        .arg("--json")
        .env("ZK_CONNECT", server().connect_string())
        .env_remove("ZK_AUTH")
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "zk-curator {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// How many children `path` has now (read directly, not through the layout
/// module).
async fn children(framework: &Framework, path: &str) -> usize {
    let client = framework.client().await.unwrap();
    match client.list_children(path).await {
        Ok(children) => children.len(),
        Err(zk_curator::zk::Error::NoNode) => 0,
        Err(err) => panic!("cannot list {path}: {err}"),
    }
}

/// Waits until `path` has `count` children.
async fn children_reach(framework: &Framework, path: &str, count: usize) {
    let deadline = Instant::now() + WAIT_LIMIT;
    while children(framework, path).await != count {
        assert!(
            Instant::now() < deadline,
            "{path} never had {count} children"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One participant as the recipe knows it.
#[derive(Debug, PartialEq, Eq)]
struct Expected {
    kind: &'static str,
    role: &'static str,
    session: i64,
    /// The node, for a holder whose guard names it.
    node: Option<String>,
}

fn holder(kind: &'static str, session: i64, node: Option<&str>) -> Expected {
    Expected {
        kind,
        role: "holder",
        session,
        node: node.map(str::to_owned),
    }
}

fn waiter(kind: &'static str, session: i64) -> Expected {
    Expected {
        kind,
        role: "waiter",
        session,
        node: None,
    }
}

/// `locks <path> [extra] --json` must list exactly `expected`, in order.
async fn locks_agree(path: &str, extra: &[&str], expected: &[Expected]) {
    let mut args = vec!["locks", path];
    args.extend_from_slice(extra);
    let listed = report(&args).await;
    let listed = listed["participants"].as_array().unwrap();
    let seen: Vec<Expected> = listed
        .iter()
        .zip(expected)
        .map(|(p, want)| {
            let hex = p["session"].as_str().unwrap().trim_start_matches("0x");
            Expected {
                kind: if p["kind"] == want.kind {
                    want.kind
                } else {
                    "other"
                },
                role: if p["role"] == "holder" {
                    "holder"
                } else {
                    "waiter"
                },
                session: u64::from_str_radix(hex, 16).unwrap() as i64,
                node: want
                    .node
                    .as_ref()
                    .map(|_| p["node"].as_str().unwrap().to_owned()),
            }
        })
        .collect();
    assert_eq!(
        (listed.len(), seen.as_slice()),
        (expected.len(), expected),
        "`locks {path}` disagrees with the recipe: {listed:#?}"
    );
}

/// Starts `acquire` and waits until its node is on the server (`dir` has
/// `count` children); it must still be waiting.
async fn queue<T: Send + 'static>(
    framework: &Framework,
    dir: &str,
    count: usize,
    acquire: impl Future<Output = T> + Send + 'static,
) -> JoinHandle<T> {
    let pending = tokio::spawn(acquire);
    children_reach(framework, dir, count).await;
    assert!(!pending.is_finished(), "a waiter of {dir} got in");
    pending
}

/// Awaits a queued acquire that must now succeed.
async fn granted<T>(pending: JoinHandle<T>) -> T {
    tokio::time::timeout(WAIT_LIMIT, pending)
        .await
        .expect("the next waiter never got in")
        .unwrap()
}

async fn bounded<F: Future>(body: F) -> F::Output {
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .expect("test timed out")
}

#[tokio::test(flavor = "multi_thread")]
async fn mutex() {
    bounded(async {
        let path = unique("mutex");
        let [(a, sa), (b, sb), (c, sc)] = contenders().await;
        let ma = InterProcessMutex::new(a, &path).unwrap();
        let first = ma.lock().await.unwrap();
        let mb = InterProcessMutex::new(b.clone(), &path).unwrap();
        let second = queue(&b, &path, 2, async move { mb.lock().await.unwrap() }).await;
        let mc = InterProcessMutex::new(c.clone(), &path).unwrap();
        let third = queue(&c, &path, 3, async move { mc.lock().await.unwrap() }).await;
        locks_agree(
            &path,
            &[],
            &[
                holder("mutex", sa, Some(first.node().path())),
                waiter("mutex", sb),
                waiter("mutex", sc),
            ],
        )
        .await;
        first.release().await.unwrap();
        let second = granted(second).await;
        locks_agree(
            &path,
            &[],
            &[
                holder("mutex", sb, Some(second.node().path())),
                waiter("mutex", sc),
            ],
        )
        .await;
        second.release().await.unwrap();
        granted(third).await.release().await.unwrap();
        locks_agree(&path, &[], &[]).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn read_write_lock() {
    bounded(async {
        let path = unique("rw");
        let [(a, sa), (b, sb), (c, sc), (d, sd)] = contenders().await;
        let lock = |fw: &Framework| InterProcessReadWriteLock::new(fw.clone(), &path).unwrap();
        let (la, lb) = (lock(&a), lock(&b));
        let r1 = la.read_lock().lock().await.unwrap();
        let r2 = lb.read_lock().lock().await.unwrap();
        let w3 = lock(&c).write_lock();
        let w3 = queue(&c, &path, 3, async move { w3.lock().await.unwrap() }).await;
        // A reader behind a waiting writer waits too.
        let r4 = lock(&d).read_lock();
        let r4 = queue(&d, &path, 4, async move { r4.lock().await.unwrap() }).await;
        locks_agree(
            &path,
            &[],
            &[
                holder("read", sa, Some(r1.node().path())),
                holder("read", sb, Some(r2.node().path())),
                waiter("write", sc),
                waiter("read", sd),
            ],
        )
        .await;
        r1.release().await.unwrap();
        r2.release().await.unwrap();
        let w3 = granted(w3).await;
        assert!(!r4.is_finished(), "a reader got in beside the writer");
        locks_agree(
            &path,
            &[],
            &[
                holder("write", sc, Some(w3.node().path())),
                waiter("read", sd),
            ],
        )
        .await;
        // A downgrade: the read node is level with the write node, which
        // is then released; both readers hold.
        let r3 = w3.downgrade().await.unwrap();
        let r4 = granted(r4).await;
        locks_agree(
            &path,
            &[],
            &[
                holder("read", sc, Some(r3.node().path())),
                holder("read", sd, Some(r4.node().path())),
            ],
        )
        .await;
        r3.release().await.unwrap();
        r4.release().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn semaphore() {
    bounded(async {
        let path = unique("semaphore");
        let leases = format!("{path}/leases");
        let locks = format!("{path}/locks");
        let [(a, sa), (b, sb), (c, sc), (d, sd)] = contenders().await;
        let semaphore =
            |fw: &Framework| InterProcessSemaphoreV2::new(fw.clone(), &path, 2).unwrap();
        let (sem_a, sem_b) = (semaphore(&a), semaphore(&b));
        let l1 = sem_a.acquire().await.unwrap();
        let l2 = sem_b.acquire().await.unwrap();
        // The third holds the internal mutex and its lease node waits; the
        // fourth waits in the internal queue.
        let s3 = semaphore(&c);
        let l3 = queue(&c, &leases, 3, async move { s3.acquire().await.unwrap() }).await;
        let s4 = semaphore(&d);
        let l4 = queue(&d, &locks, 2, async move { s4.acquire().await.unwrap() }).await;
        let expected = [
            holder("lease", sa, Some(l1.node().path())),
            holder("lease", sb, Some(l2.node().path())),
            waiter("lease", sc),
            waiter("lease", sd),
        ];
        locks_agree(&path, &["--leases", "2"], &expected).await;
        // Without the number of leases, the layout's guess.
        locks_agree(&path, &[], &expected).await;
        l1.release().await.unwrap();
        let l3 = granted(l3).await;
        // The fourth now holds the internal mutex and waits with a lease
        // node of its own.
        children_reach(&d, &leases, 3).await;
        let expected = [
            holder("lease", sb, Some(l2.node().path())),
            holder("lease", sc, Some(l3.node().path())),
            waiter("lease", sd),
        ];
        locks_agree(&path, &["--leases", "2"], &expected).await;
        locks_agree(&path, &[], &expected).await;
        l2.release().await.unwrap();
        l3.release().await.unwrap();
        granted(l4).await.release().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn semaphore_mutex() {
    bounded(async {
        let path = unique("semaphore-mutex");
        let leases = format!("{path}/leases");
        let [(a, sa), (b, sb)] = contenders().await;
        let first = InterProcessSemaphoreMutex::new(a, &path).unwrap();
        first.acquire().await.unwrap();
        let second = InterProcessSemaphoreMutex::new(b.clone(), &path).unwrap();
        let queued = second.clone();
        let pending = queue(
            &b,
            &leases,
            2,
            async move { queued.acquire().await.unwrap() },
        )
        .await;
        let expected = [holder("lease", sa, None), waiter("lease", sb)];
        locks_agree(&path, &["--leases", "1"], &expected).await;
        locks_agree(&path, &[], &expected).await;
        first.release().await.unwrap();
        granted(pending).await;
        locks_agree(&path, &["--leases", "1"], &[holder("lease", sb, None)]).await;
        second.release().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn leader_latch() {
    bounded(async {
        let path = unique("latch");
        let [(a, _), (b, _), (c, _)] = contenders().await;
        let first = LeaderLatch::new(a, &path, "first").unwrap();
        first.start().unwrap();
        let term = first.await_leadership().await.unwrap();
        let second = LeaderLatch::new(b.clone(), &path, "second").unwrap();
        second.start().unwrap();
        children_reach(&b, &path, 2).await;
        let third = LeaderLatch::new(c.clone(), &path, "third").unwrap();
        third.start().unwrap();
        children_reach(&c, &path, 3).await;
        assert!(!second.has_leadership() && !third.has_leadership());
        let leader_agrees = |expected: Vec<(&'static str, &'static str)>| {
            let path = path.clone();
            async move {
                let shown = report(&["leader", &path]).await;
                let seen: Vec<(String, String)> = shown["participants"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        let role = p["role"].as_str().unwrap().to_owned();
                        (role, p["id"].as_str().unwrap_or_default().to_owned())
                    })
                    .collect();
                let expected: Vec<(String, String)> = expected
                    .iter()
                    .map(|(role, id)| ((*role).to_owned(), (*id).to_owned()))
                    .collect();
                assert_eq!(seen, expected, "`leader {path}` disagrees: {shown:#}");
                shown
            }
        };
        let shown = leader_agrees(vec![
            ("leader", "first"),
            ("waiter", "second"),
            ("waiter", "third"),
        ])
        .await;
        assert_eq!(shown["recipe"], "latch");
        assert_eq!(shown["leader"]["node"], term.node().path());
        first.close().await.unwrap();
        second.await_leadership().await.unwrap();
        leader_agrees(vec![("leader", "second"), ("waiter", "third")]).await;
        second.close().await.unwrap();
        third.close().await.unwrap();
    })
    .await;
}
