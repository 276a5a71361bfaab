//! Cohort hand-off is fair to other processes (issue 24, fairness): while
//! eight tasks of one framework with cohorting on keep passing a mutex
//! among themselves, a `zk-curator lock` process (another OS process, its
//! own session, no cohorting) on the same path gets the lock behind at most
//! `max_passes + 1` holds of the busy framework, counted in ZooKeeper's
//! order (see `tests/cohort_busy`), and within `max_hold` plus a generous
//! margin of wall time, from its lock node's creation (the node's `ctime`)
//! to its command running.
//!
//! Against the embedded server by default, a real ZooKeeper with
//! `ZK_TEST_SERVER=real`.
#![allow(clippy::unwrap_used, missing_docs)]

#[path = "../../tests/cohort_busy/mod.rs"]
mod cohort_busy;

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use zk_curator::zk;
use zk_curator::CohortPolicy;
use zk_curator_testing::{Backend, TestingServer};

const BIN: &str = env!("CARGO_BIN_EXE_zk-curator");
/// The bound on the test body.
const TEST_LIMIT: Duration = Duration::from_secs(120);
/// The bound on one `zk-curator lock` process.
const ROUND_LIMIT: Duration = Duration::from_secs(30);

/// One hold of the `zk-curator lock` process, as its command saw it.
#[derive(Debug)]
struct Round {
    /// The czxid of its lock node (its fencing token: no cohorting there).
    czxid: i64,
    /// From the node's creation to the command running.
    waited: Duration,
    /// Busy holds waited through.
    behind: usize,
}

/// Runs `zk-curator lock PATH -- sh -c ...` once; its command prints its
/// token, node and the time, then holds 200 ms, long enough for the node's
/// creation time to be read.
async fn one_lock(connect: &str, path: &str, raw: &zk::Client) -> (i64, Duration) {
    let script =
        r#"echo "held $ZK_CURATOR_FENCING_TOKEN $ZK_CURATOR_LOCK_NODE $(date +%s%3N)"; sleep 0.2"#;
    let mut child = Command::new(BIN)
        .args(["lock", path, "--", "sh", "-c", script])
        .env("ZK_CONNECT", connect)
        .env_remove("ZK_AUTH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(ROUND_LIMIT, lines.next_line())
        .await
        .expect("zk-curator lock never ran its command")
        .unwrap()
        .expect("zk-curator lock ended without running its command");
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields.len(), 4, "{line}");
    let czxid: i64 = fields[1].parse().unwrap();
    let ran_at: i64 = fields[3].parse().unwrap();
    let stat = raw
        .check_stat(fields[2])
        .await
        .unwrap()
        .expect("the lock node is gone while its command runs");
    assert_eq!(stat.czxid, czxid, "{line}");
    let status = tokio::time::timeout(ROUND_LIMIT, child.wait())
        .await
        .expect("zk-curator lock did not end")
        .unwrap();
    assert!(status.success(), "zk-curator lock: {status}");
    let waited = Duration::from_millis(u64::try_from(ran_at - stat.ctime).unwrap_or(0));
    (czxid, waited)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zk_curator_process_gets_its_turn_from_a_busy_cohort() {
    // A real ZooKeeper that is not installed fails the test naming it, or
    // skips it under `ZK_SKIP_MISSING` (the testing crate's one rule).
    let backend = Backend::from_env().expect("ZK_TEST_SERVER");
    if let Some(prerequisite) = backend.prerequisite() {
        if !prerequisite.check("a_zk_curator_process_gets_its_turn_from_a_busy_cohort") {
            return;
        }
    }
    let server = TestingServer::start_async().await.expect("test server");
    let connect = server.connect_string();
    let body = async {
        let path = format!("/cli-tests/cohort-fair-{}", std::process::id());
        let policy = CohortPolicy::new(16, Duration::from_secs(1));
        let busy = cohort_busy::Busy::start(&connect, &path, policy, 8).await;
        let raw = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(&connect)
            .await
            .unwrap();
        let passes_before = busy.passes();
        let mut taken = Vec::new();
        for _ in 0..5 {
            taken.push(one_lock(&connect, &path, &raw).await);
        }
        let passes = busy.passes() - passes_before;
        let holds = busy.stop().await;
        let rounds: Vec<Round> = taken
            .into_iter()
            .map(|(czxid, waited)| Round {
                czxid,
                waited,
                behind: cohort_busy::holds_behind(&holds, czxid),
            })
            .collect();
        let longest = rounds.iter().map(|r| r.waited).max().unwrap();
        let most_behind = rounds.iter().map(|r| r.behind).max().unwrap();
        println!(
            "zk-curator lock process beside a busy cohort ({} busy holds, {passes} passes \
             meanwhile, longest run {} holds): longest wait {longest:?}, behind at most \
             {most_behind} busy holds (bound {}); per round (node czxid: wait, holds \
             behind): {:?}",
            holds.len(),
            cohort_busy::longest_run(&holds),
            policy.max_passes + 1,
            rounds
                .iter()
                .map(|r| format!("{}: {:?}, {}", r.czxid, r.waited, r.behind))
                .collect::<Vec<_>>()
        );
        assert!(passes > 0, "the busy framework passed nothing meanwhile");
        assert!(
            most_behind <= policy.max_passes as usize + 1,
            "a zk-curator lock process waited through {most_behind} busy holds: {rounds:?}"
        );
        let wall_bound = policy.max_hold + Duration::from_secs(5);
        assert!(
            longest <= wall_bound,
            "a zk-curator lock process waited {longest:?} (bound {wall_bound:?})"
        );
    };
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .expect("test timed out");
    server.stop();
}

/// `zk-curator locks PATH --json`, parsed.
async fn locks_json(connect: &str, path: &str) -> serde_json::Value {
    let output = Command::new(BIN)
        .args(["locks", path, "--json"])
        .env("ZK_CONNECT", connect)
        .env_remove("ZK_AUTH")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "locks failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// What `locks` shows does not change with a pass: the same node, the same
/// holder identity (the framework holds it), before and after the node
/// moved to another task of the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_shows_the_same_holder_across_a_pass() {
    let backend = Backend::from_env().expect("ZK_TEST_SERVER");
    if let Some(prerequisite) = backend.prerequisite() {
        if !prerequisite.check("locks_shows_the_same_holder_across_a_pass") {
            return;
        }
    }
    let server = TestingServer::start_async().await.expect("test server");
    let connect = server.connect_string();
    let body = async {
        let path = format!("/cli-tests/cohort-locks-{}", std::process::id());
        let framework = zk_curator::Framework::builder()
            .connect_string(&connect)
            .cohort(CohortPolicy::new(16, Duration::from_secs(60)))
            .build()
            .unwrap();
        framework.start().unwrap();
        framework
            .block_until_connected(Duration::from_secs(20))
            .await
            .unwrap();
        let mutex = zk_curator::InterProcessMutex::new(framework.clone(), &path).unwrap();
        let first = mutex.lock().await.unwrap();
        let before = locks_json(&connect, &path).await;
        let waiter = {
            let mutex = mutex.clone();
            tokio::spawn(async move { mutex.lock().await })
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while framework.locally_queued(&path) == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the waiter never queued"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        first.release().await.unwrap();
        let second = waiter.await.unwrap().unwrap();
        assert_eq!(second.fencing_token().pass(), 1, "no pass happened");
        let after = locks_json(&connect, &path).await;
        // Everything but the time since the node queued.
        let without_age = |listing: &serde_json::Value| {
            let mut participants = listing["participants"].clone();
            for participant in participants.as_array_mut().into_iter().flatten() {
                if let Some(fields) = participant.as_object_mut() {
                    fields.remove("queued_ms");
                }
            }
            participants
        };
        assert_eq!(without_age(&before), without_age(&after));
        assert_eq!(
            before["participants"].as_array().map(Vec::len),
            Some(1),
            "{before}"
        );
        second.release().await.unwrap();
        framework.close().await;
    };
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .expect("the test took too long");
    drop(server);
}
