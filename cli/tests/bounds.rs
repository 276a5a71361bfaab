//! `lock` and `elect` with `--max-hold` and `--max-silence` (issue 46,
//! item 3): a command that stops touching `$ZK_CURATOR_PROGRESS_FILE` for
//! the silence bound, or runs past the hold bound, has its process group
//! stopped, zk-curator exits 79 naming the bound, and the next holder's
//! command starts only after the group is gone (by timestamps, the first
//! command taking its time to end on SIGTERM). A command that keeps
//! touching the file runs to its end. Bounds of zero or past a year are
//! refused before anything is sent (exit 64). On the embedded server by
//! default, on a real ZooKeeper with `ZK_TEST_SERVER=real`.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::time::Duration;

use common::{children_of, raw, run, stderr, text, zkc};

const TEST_LIMIT: Duration = Duration::from_secs(120);

fn unique(name: &str) -> String {
    format!("/cli-bounds/{name}-{}", std::process::id())
}

/// The nanoseconds on the log line that starts with `tag`.
fn stamp(log: &str, tag: &str) -> u128 {
    log.lines()
        .find_map(|line| line.strip_prefix(tag))
        .unwrap_or_else(|| panic!("no {tag:?} in {log:?}"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_command_is_stopped_and_the_next_starts_after_its_group_is_gone() {
    tokio::time::timeout(TEST_LIMIT, async {
        let path = unique("silent");
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let log = log.to_str().unwrap();
        // Says progress once, then never again; on SIGTERM it takes a
        // second more to end, and logs when.
        let stuck = format!(
            "trap 'sleep 1; echo end $(date +%s%N) >> {log}; exit 0' TERM; \
             touch \"$ZK_CURATOR_PROGRESS_FILE\"; echo start $(date +%s%N) >> {log}; \
             while :; do sleep 0.05; done"
        );
        let first = zkc(&[
            "lock",
            &path,
            "--max-silence",
            "1s",
            "--",
            "sh",
            "-c",
            &stuck,
        ])
        .spawn()
        .unwrap();
        // The next holder waits behind it.
        let client = raw().await;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while client.list_children(&path).await.map_or(0, |c| c.len()) < 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the first never queued"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let next_command = format!("echo next $(date +%s%N) >> {log}");
        let next = zkc(&["lock", &path, "--", "sh", "-c", &next_command])
            .spawn()
            .unwrap();
        let first = first.wait_with_output().await.unwrap();
        assert_eq!(first.status.code(), Some(79), "{}", stderr(&first));
        let said = stderr(&first);
        assert!(said.contains("--max-silence 1s"), "{said}");
        assert!(said.contains("ZK_CURATOR_PROGRESS_FILE"), "{said}");
        let next = next.wait_with_output().await.unwrap();
        assert_eq!(next.status.code(), Some(0), "{}", stderr(&next));
        let log = std::fs::read_to_string(log).unwrap();
        let (start, end, after) = (
            stamp(&log, "start "),
            stamp(&log, "end "),
            stamp(&log, "next "),
        );
        let silent_for = Duration::from_nanos(u64::try_from(end - start).unwrap());
        assert!(
            silent_for >= Duration::from_secs(2),
            "stopped before its bound: {log}"
        );
        assert!(
            after > end,
            "the next command started while the first's group lived: {log}"
        );
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_past_its_hold_bound_is_stopped_even_with_progress() {
    tokio::time::timeout(TEST_LIMIT, async {
        let path = unique("long");
        let busy = "while :; do touch \"$ZK_CURATOR_PROGRESS_FILE\"; sleep 0.05; done";
        let (output, took) = run(&[
            "lock",
            &path,
            "--max-hold",
            "1s",
            "--max-silence",
            "10s",
            "--",
            "sh",
            "-c",
            busy,
        ])
        .await;
        assert_eq!(output.status.code(), Some(79), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("--max-hold 1s"),
            "{}",
            stderr(&output)
        );
        assert!(took >= Duration::from_secs(1), "{took:?}");
        // Given back: the path has no participant left (or is gone: a
        // real ZooKeeper removes an empty container node by itself).
        let client = raw().await;
        assert_eq!(children_of(&client, &path).await, Vec::<String>::new());

        // The same for a leader's term.
        let election = unique("term");
        let (output, _) = run(&[
            "elect",
            &election,
            "--id",
            "a",
            "--max-hold",
            "500ms",
            "--",
            "sleep",
            "600",
        ])
        .await;
        assert_eq!(output.status.code(), Some(79), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("--max-hold 500ms"),
            "{}",
            stderr(&output)
        );
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_says_progress_runs_to_its_end() {
    tokio::time::timeout(TEST_LIMIT, async {
        let path = unique("busy");
        // 2.4 s of work against a 600 ms silence bound, then exit 3.
        let busy = "echo \"$ZK_CURATOR_PROGRESS_FILE\"; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do \
                    touch \"$ZK_CURATOR_PROGRESS_FILE\"; sleep 0.2; done; exit 3";
        let (output, took) = run(&[
            "lock",
            &path,
            "--max-silence",
            "600ms",
            "--",
            "sh",
            "-c",
            busy,
        ])
        .await;
        assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
        assert!(took >= Duration::from_secs(2), "{took:?}");
        // The progress file was this user's only, and is gone with the run.
        let file = text(&output.stdout).trim().to_owned();
        assert!(file.contains("zk-curator-progress-"), "{file}");
        assert!(!std::path::Path::new(&file).exists(), "{file} was left");
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_bounds_are_usage_errors_before_anything_is_sent() {
    tokio::time::timeout(TEST_LIMIT, async {
        let path = unique("absurd");
        for (flag, value) in [
            ("--max-silence", "0s"),
            ("--max-hold", "0ms"),
            ("--max-hold", "400days"),
            ("--max-silence", "soon"),
        ] {
            let (output, _) = run(&["lock", &path, flag, value, "--", "true"]).await;
            assert_eq!(
                output.status.code(),
                Some(64),
                "{flag} {value}: {}",
                stderr(&output)
            );
            assert!(
                stderr(&output).contains(flag),
                "{flag} {value}: {}",
                stderr(&output)
            );
            let (output, _) = run(&["elect", &path, "--id", "a", flag, value, "--", "true"]).await;
            assert_eq!(
                output.status.code(),
                Some(64),
                "{flag} {value}: {}",
                stderr(&output)
            );
        }
        let client = raw().await;
        assert!(
            client.check_stat(&path).await.unwrap().is_none(),
            "something was sent"
        );
    })
    .await
    .expect("test timed out");
}

/// A holder that publishes its progress (`HoldBounds::publish_progress`):
/// `locks` shows how long ago, in text and in the JSON identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_shows_published_progress() {
    use zk_curator::{HoldBounds, InterProcessMutex};
    tokio::time::timeout(TEST_LIMIT, async {
        let path = unique("published");
        let mutex = InterProcessMutex::new(common::framework().await, &path).unwrap();
        let guard = mutex
            .lock_bounded(
                HoldBounds::new()
                    .silence(Duration::from_secs(4))
                    .publish_progress(),
            )
            .await
            .unwrap();
        guard.progress();
        let client = raw().await;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (data, _) = client.get_data(guard.node().path()).await.unwrap();
            if zk_curator::framework::identity::progress_of(&data).is_some() {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never published");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (output, _) = run(&["locks", &path]).await;
        let shown = text(&output.stdout);
        assert!(shown.contains(", progress "), "{shown}");
        let (output, _) = run(&["locks", &path, "--json"]).await;
        let listed: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert!(
            listed["participants"][0]["identity"]["progress_ms"].is_i64(),
            "{listed}"
        );
        guard.release().await.unwrap();
    })
    .await
    .expect("test timed out");
}
