//! The command line's one-shot reads on a replicated ensemble (issue 32):
//! asked of a follower whose link from the leader is stalled, `locks` and
//! `leader` never answer from the past. They sync first, so they wait
//! until the follower has caught up, then name the current holder and the
//! current leader. (Asked without the sync, that follower names the
//! former ones: see the cheap read in the workspace's
//! `tests/ensemble_reads.rs`.)
//!
//! Always a real 3-node ensemble with its peer links through fault proxies
//! and local sessions on, so that the command's session can be made on the
//! lagging member itself. Without ZooKeeper the test fails saying so, or is
//! skipped with a notice under `ZK_SKIP_MISSING=zookeeper` (or `=1`).
#![allow(clippy::unwrap_used, missing_docs)]

use std::future::Future;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::process::{Child, Command};
use zk_curator::{Framework, InterProcessMutex, LeaderElection, LeaderLatch};
use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::proxy::opcode::SYNC;
use zk_curator_testing::{FaultProxy, TestingCluster, Traffic};

const BIN: &str = env!("CARGO_BIN_EXE_zk-curator");
/// The bound of the test body: three JVMs started on a slow 2-core machine.
const TEST_LIMIT: Duration = Duration::from_secs(240);
/// The bound of one wait for a condition.
const WAIT_LIMIT: Duration = Duration::from_secs(30);
/// 100 ticks of 100 ms: a stalled follower serves the past for up to 10 s.
const SYNC_LIMIT: u32 = 100;

async fn framework(connect: &str) -> Framework {
    let framework = Framework::builder()
        .connect_string(connect)
        .session_timeout(Duration::from_secs(6))
        .build()
        .unwrap();
    framework.start().unwrap();
    framework.block_until_connected(WAIT_LIMIT).await.unwrap();
    framework
}

/// Waits until `check` holds, up to [`WAIT_LIMIT`].
async fn until<Fut: Future<Output = bool>>(what: &str, mut check: impl FnMut() -> Fut) {
    let deadline = Instant::now() + WAIT_LIMIT;
    while !check().await {
        assert!(Instant::now() < deadline, "waited too long: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `zk-curator <args>` asked of the server behind `proxy`, started.
fn zkc(proxy: &FaultProxy, args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .env("ZK_CONNECT", proxy.connect_string())
        .env_remove("ZK_AUTH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

fn syncs(proxy: &FaultProxy) -> usize {
    proxy
        .traffic()
        .iter()
        .filter(|t| matches!(t, Traffic::Request { opcode, .. } if *opcode == SYNC))
        .count()
}

/// Runs `args` against the lagging member while its link from the leader
/// is stalled: the stall ends once the command's sync is on the way (or
/// the command has answered without one), and the answer is returned as
/// JSON.
async fn asked_of_the_lagging(
    cluster: &TestingCluster,
    lagging: usize,
    proxy: &FaultProxy,
    args: &[&str],
) -> Value {
    proxy.clear_traffic();
    let mut child = zkc(proxy, args);
    until("the command's sync, or its answer", || {
        let answered = child.try_wait().unwrap().is_some();
        async move { answered || syncs(proxy) > 0 }
    })
    .await;
    cluster.stall_leader_to(lagging, false).unwrap();
    let output: Output = tokio::time::timeout(WAIT_LIMIT, child.wait_with_output())
        .await
        .expect("the command answers once the follower catches up")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_leader_asked_of_a_lagging_follower_never_answer_from_the_past() {
    if !Prerequisite::ZooKeeper.check("cli ensemble_reads") {
        return;
    }
    tokio::time::timeout(TEST_LIMIT, async {
        let cluster = TestingCluster::builder()
            .quorum_through_proxies(true)
            .local_sessions(true)
            .sync_limit(SYNC_LIMIT)
            .start_async()
            .await
            .unwrap();
        let leader = cluster.wait_until_serving_async(WAIT_LIMIT).await.unwrap();
        let lagging = (leader + 1) % 3;
        let on_leader = cluster.connect_string_of(leader);
        let proxy = FaultProxy::start(cluster.address_of(lagging))
            .await
            .unwrap();
        let pid = std::process::id();

        // A lock: the first holder lets go while the follower lags, and
        // the waiter holds.
        let lock = format!("/ensemble-cli/lock-{pid}");
        let (f1, f2) = (framework(&on_leader).await, framework(&on_leader).await);
        let first = InterProcessMutex::new(f1.clone(), &lock)
            .unwrap()
            .lock()
            .await
            .unwrap();
        let second = InterProcessMutex::new(f2.clone(), &lock).unwrap();
        let waiting = tokio::spawn(async move { second.lock().await });
        let listed = |connect: String| {
            let lock = lock.clone();
            async move {
                let reader = framework(&connect).await;
                let found = zk_curator::recipes::layout::lock_participants(&reader, &lock, None)
                    .await
                    .unwrap()
                    .len();
                reader.close().await;
                found
            }
        };
        until("both on the lagging member", || {
            let found = listed(proxy.connect_string());
            async move { found.await == 2 }
        })
        .await;
        cluster.stall_leader_to(lagging, true).unwrap();
        first.release().await.unwrap();
        let second = waiting.await.unwrap().unwrap();
        let locks =
            asked_of_the_lagging(&cluster, lagging, &proxy, &["locks", &lock, "--json"]).await;
        let participants = locks["participants"].as_array().unwrap();
        assert_eq!(
            participants.len(),
            1,
            "only the current holder, not the one that let go: {locks}"
        );
        assert_eq!(participants[0]["role"], "holder", "{locks}");

        // An election: A steps down while the follower lags, and B leads.
        let election = format!("/ensemble-cli/election-{pid}");
        let (fa, fb) = (framework(&on_leader).await, framework(&on_leader).await);
        let a = LeaderLatch::new(fa.clone(), &election, "a").unwrap();
        a.start().unwrap();
        tokio::time::timeout(WAIT_LIMIT, a.await_leadership())
            .await
            .unwrap()
            .unwrap();
        let b = LeaderLatch::new(fb.clone(), &election, "b").unwrap();
        b.start().unwrap();
        until("b waits, as the lagging member sees it", || async {
            let reader = framework(&proxy.connect_string()).await;
            let seen = LeaderLatch::new(reader.clone(), &election, "")
                .unwrap()
                .participants()
                .await
                .unwrap()
                .len();
            reader.close().await;
            seen == 2
        })
        .await;
        cluster.stall_leader_to(lagging, true).unwrap();
        a.close().await.unwrap();
        tokio::time::timeout(WAIT_LIMIT, b.await_leadership())
            .await
            .unwrap()
            .unwrap();
        let led =
            asked_of_the_lagging(&cluster, lagging, &proxy, &["leader", &election, "--json"]).await;
        assert_eq!(led["leader"]["id"], "b", "the current leader: {led}");

        second.release().await.unwrap();
        b.close().await.unwrap();
        for fw in [f1, f2, fa, fb] {
            fw.close().await;
        }
    })
    .await
    .expect("the test body finishes in time");
}
