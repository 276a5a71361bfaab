//! `lock` and `elect` in kazoo's layout beside real kazoo participants, and
//! the refusal (exit 78, at once, nothing left) of a path whose
//! participants would not see ours: kazoo's nodes beside Curator's layout,
//! an `elect` beside a `lock` and the other way round. On the embedded
//! server by default, on a real ZooKeeper with `ZK_TEST_SERVER=real`; the
//! kazoo parts need Debian's `python3-kazoo` (or `ZK_SKIP_MISSING=kazoo`).
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::{children_of, kazoo_available, kazoo_script, make, raw, run, server, stderr, zkc};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use zk_curator_testing::peer::Peer;

const TEST_LIMIT: Duration = Duration::from_secs(180);
const WAIT_LIMIT: Duration = Duration::from_secs(30);
/// A refusal is a connect, one round trip and a delete.
const AT_ONCE: Duration = Duration::from_secs(3);
/// The exit code of a path held in another layout or by another recipe.
const OTHER_LAYOUT: i32 = 78;

fn unique(name: &str) -> String {
    format!("/cli-layouts/{name}-{}", std::process::id())
}

/// The children of `path`, through the plain client.
async fn children(path: &str) -> Vec<String> {
    children_of(&raw().await, path).await
}

/// `verb path [options] -- sh -c script`, in the background.
fn spawn(verb: &str, path: &str, options: &[&str], script: &str) -> Child {
    let mut args = vec![verb, path];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    zkc(&args).spawn().unwrap()
}

/// Reads the child's stdout until a line equal to `wanted`.
async fn wait_for_line(child: &mut Child, wanted: &str) -> BufReader<tokio::process::ChildStdout> {
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let seen = tokio::time::timeout(WAIT_LIMIT, async {
        let mut line = String::new();
        loop {
            line.clear();
            if out.read_line(&mut line).await.unwrap() == 0 {
                return false;
            }
            if line.trim() == wanted {
                return true;
            }
        }
    })
    .await;
    assert_eq!(seen, Ok(true), "never printed {wanted:?}");
    out
}

fn assert_refused(output: &Output, took: Duration, names: &str) {
    assert_eq!(
        output.status.code(),
        Some(OTHER_LAYOUT),
        "{}",
        stderr(output)
    );
    let text = stderr(output);
    assert!(text.contains(names), "{text}");
    assert!(took < AT_ONCE, "the refusal took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_and_lock_never_share_a_path() {
    tokio::time::timeout(TEST_LIMIT, async {
        // `lock` holds: `elect` on its path is refused.
        let path = unique("elect-beside-lock");
        let mut holder = spawn("lock", &path, &[], "echo held; sleep 60");
        let _out = wait_for_line(&mut holder, "held").await;
        let before = children(&path).await;
        let (output, took) = run(&["elect", &path, "--", "true"]).await;
        assert_refused(&output, took, "Curator's mutex or leader selector");
        assert_eq!(children(&path).await, before, "elect left a node");
        holder.start_kill().unwrap();
        holder.wait().await.unwrap();

        // `elect` leads: `lock` on its path is refused.
        let path = unique("lock-beside-elect");
        let mut leader = spawn("elect", &path, &["--id", "leader"], "echo led; sleep 60");
        let _out = wait_for_line(&mut leader, "led").await;
        let before = children(&path).await;
        let (output, took) = run(&["lock", &path, "--", "true"]).await;
        assert_refused(&output, took, "Curator's leader latch");
        assert_eq!(children(&path).await, before, "lock left a node");
        leader.start_kill().unwrap();
        leader.wait().await.unwrap();
    })
    .await
    .expect("test timed out");
}

/// A kazoo participant (tests/interop/kazoo_participant.py) in `mode`,
/// once connected.
async fn kazoo(mode: &str, path: &str, rounds: u32, markers: &Path) -> Peer {
    let connect = server().connect_string();
    Peer::kazoo(
        &kazoo_script(),
        &connect,
        mode,
        path,
        rounds,
        markers,
        WAIT_LIMIT,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_in_curator_s_layout_beside_a_kazoo_holder_is_refused_at_once() {
    if !kazoo_available() {
        return;
    }
    tokio::time::timeout(TEST_LIMIT, async {
        let path = unique("curator-beside-kazoo");
        let markers = tempfile::tempdir().unwrap();
        let mut holder = kazoo("hold", &path, 1, markers.path()).await;
        holder.wait_for("held", WAIT_LIMIT).await;
        let before = children(&path).await;
        for extra in [&[][..], &["--read"][..], &["--write"][..]] {
            let mut args = vec!["lock", path.as_str()];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--", "true"]);
            let (output, took) = run(&args).await;
            assert_refused(&output, took, "--layout kazoo");
            assert_eq!(children(&path).await, before, "{extra:?} left a node");
        }
        let (output, took) = run(&["elect", &path, "--", "true"]).await;
        assert_refused(&output, took, "--layout kazoo");
        let (status, said) = holder.finish(WAIT_LIMIT).await;
        assert_eq!(status, Some(0), "kazoo: {said}");
    })
    .await
    .expect("test timed out");
}

/// The section each `elect` runs: a marker in, the rule checked (exit 3
/// if another writer's marker is there), a log line, the interval's
/// wall-clock nanoseconds, the marker out.
const SECTION: &str = r#"m="$MARKERS/w-cli-$$"; s=$(date +%s%N); : > "$m"; echo cli >> "$MARKERS/log";
n=$(ls "$MARKERS" | grep -c '^w-'); sleep 0.05; rm "$m"; e=$(date +%s%N);
echo "w cli $s $e" >> "$MARKERS/intervals"; [ "$n" -eq 1 ] || exit 3"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_in_kazoo_s_layout_and_a_kazoo_election_lead_one_at_a_time() {
    if !kazoo_available() {
        return;
    }
    tokio::time::timeout(TEST_LIMIT, async {
        let path = unique("kazoo-election");
        let markers = tempfile::tempdir().unwrap();
        let mut python = kazoo("election", &path, 12, markers.path()).await;
        let mut terms = 0;
        let python_done = loop {
            let mut elect = zkc(&[
                "elect", &path, "--layout", "kazoo", "--", "sh", "-c", SECTION,
            ]);
            elect.env("MARKERS", markers.path());
            let output = elect.output().await.unwrap();
            assert!(
                output.status.success(),
                "elect: {:?} {}",
                output.status,
                stderr(&output)
            );
            terms += 1;
            if python.has_ended() {
                break python.finish(WAIT_LIMIT).await;
            }
            assert!(terms < 200, "the kazoo side never finished");
        };
        let (status, said) = python_done;
        assert_eq!(status, Some(0), "kazoo: {said}");
        // Both sides' sections, by wall clock: no two overlap, and each
        // side led after the other at least once.
        let text = std::fs::read_to_string(markers.path().join("intervals")).unwrap();
        let mut sections: Vec<(String, u128, u128)> = text
            .lines()
            .map(|l| {
                let p: Vec<&str> = l.split(' ').collect();
                (
                    p[1].to_owned(),
                    p[2].parse().unwrap(),
                    p[3].parse().unwrap(),
                )
            })
            .collect();
        sections.sort_by_key(|s| s.1);
        for pair in sections.windows(2) {
            assert!(pair[1].1 >= pair[0].2, "two leaders at once: {pair:?}");
        }
        let sides: Vec<&str> = sections.iter().map(|s| s.0.as_str()).collect();
        let switch = |a: &str, b: &str| sides.windows(2).any(|w| w[0] == a && w[1] == b);
        assert!(
            switch("cli", "python") && switch("python", "cli"),
            "{sides:?}"
        );
    })
    .await
    .expect("test timed out");
}

const UUID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

async fn json_of(args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let (output, _) = run(args).await;
    let json = serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
    (output.status.code(), json, stderr(&output))
}

/// `locks`, `leader` and `revoke` give one answer each for a folder, an
/// empty path, a mutex, a latch election, a semaphore and a kazoo lock,
/// in text and JSON; `revoke` never writes into a path it did not
/// recognise as a lock or an election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verbs_agree_on_what_a_path_is() {
    tokio::time::timeout(TEST_LIMIT, async {
        let root = unique("what-is");
        let client = raw().await;
        let lock = |dir: &str, seq: u32| format!("{root}/{dir}/_c_{UUID}-lock-{seq:010}");
        make(&client, &lock("folder/a", 0), b"a").await;
        make(&client, &lock("folder/b", 0), b"b").await;
        make(&client, &format!("{root}/empty"), b"").await;
        make(&client, &lock("mutex", 3), b"m").await;
        make(
            &client,
            &format!("{root}/latch/_c_{UUID}-latch-0000000001"),
            b"l",
        )
        .await;
        make(&client, &format!("{root}/semaphore/locks"), b"").await;
        make(
            &client,
            &format!("{root}/semaphore/leases/_c_{UUID}-lease-0000000000"),
            b"s",
        )
        .await;
        make(
            &client,
            &format!("{root}/kazoo/0f8fad5bd9cb469fa16570867728950e__lock__0000000000"),
            b"k",
        )
        .await;

        // (path, locks' kind, leader's exit, revoke's exit without flags)
        let cases = [
            ("folder", "folder", 66, 66),
            ("empty", "empty", 0, 66),
            ("mutex", "lock", 0, 64),
            ("latch", "election", 0, 0),
            ("semaphore", "lock", 66, 64),
            ("kazoo", "lock", 0, 64),
        ];
        for (name, kind, leader_exit, revoke_exit) in cases {
            let path = format!("{root}/{name}");
            let (code, listed, err) = json_of(&["locks", &path, "--json"]).await;
            assert_eq!(code, Some(0), "locks {name}: {err}");
            assert_eq!(listed["kind"], kind, "locks {name}: {listed}");
            let (output, _) = run(&["locks", &path]).await;
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            match kind {
                "folder" => {
                    assert!(
                        text.contains("is a folder")
                            && text.contains("a (")
                            && text.contains("b ("),
                        "{text}"
                    );
                    assert!(!text.contains("election with"), "{text}");
                    assert_eq!(listed["inside"].as_array().unwrap().len(), 2, "{listed}");
                    assert!(listed.get("participants").is_none(), "{listed}");
                }
                "election" => assert!(text.contains("is an election with 1 participant"), "{text}"),
                "empty" => assert!(text.contains("no holders or waiters"), "{text}"),
                _ => assert_eq!(
                    listed["participants"].as_array().unwrap().len(),
                    1,
                    "{listed}"
                ),
            }
            let (code, led, err) = json_of(&["leader", &path, "--json"]).await;
            assert_eq!(code, Some(leader_exit), "leader {name}: {err} {led}");
            if leader_exit == 66 {
                assert!(
                    err.contains("not an election") || err.contains("is a folder"),
                    "{err}"
                );
            }
            if name == "kazoo" {
                assert_eq!(led["recipe"], "kazoo election", "{led}");
            }
            if name == "latch" {
                continue; // `revoke` asks its leader to step down: tested in cli.rs.
            }
            let before = client.get_data(&lock("mutex", 3)).await.unwrap().0;
            let (output, _) = run(&["revoke", &path]).await;
            assert_eq!(
                output.status.code(),
                Some(revoke_exit),
                "revoke {name}: {}",
                stderr(&output)
            );
            assert!(
                stderr(&output).contains("nothing was written"),
                "{}",
                stderr(&output)
            );
            assert_eq!(client.get_data(&lock("mutex", 3)).await.unwrap().0, before);
        }
        // A folder is never revoked into, with --all either.
        let (output, _) = run(&["revoke", &format!("{root}/folder"), "--all"]).await;
        assert_eq!(output.status.code(), Some(66), "{}", stderr(&output));
        assert_eq!(client.get_data(&lock("folder/a", 0)).await.unwrap().0, b"a");
    })
    .await
    .expect("test timed out");
}

/// Node data is anyone's who can create a node: a holder whose identity
/// holds a line break, an escape sequence, a C1 control and a quote is
/// shown escaped by `locks` and `leader`, in text (no raw control byte,
/// no forged row) and in JSON (which still parses to the same text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_identities_are_escaped_everywhere() {
    tokio::time::timeout(TEST_LIMIT, async {
        let path = unique("forged");
        let client = raw().await;
        let forged = "evil\nlock  holder  0x0  1s\u{1b}[2J\u{9b}31m \"quoted\"";
        let label = serde_json::json!({ "host": "h\nh", "pid": 7, "label": forged }).to_string();
        make(
            &client,
            &format!("{path}/_c_{UUID}-lock-0000000001"),
            label.as_bytes(),
        )
        .await;
        make(
            &client,
            &format!("{path}/_c_{UUID}-lock-0000000002"),
            forged.as_bytes(),
        )
        .await;
        for verb in ["locks", "leader"] {
            let (output, _) = run(&[verb, &path]).await;
            assert!(output.status.success(), "{verb}: {}", stderr(&output));
            let bytes = &output.stdout;
            assert!(
                !bytes.contains(&0x1b),
                "{verb}: a raw ESC: {}",
                String::from_utf8_lossy(bytes)
            );
            let text = String::from_utf8_lossy(bytes).into_owned();
            assert!(!text.contains('\u{9b}'), "{verb}: a raw C1 control: {text}");
            assert!(
                text.contains("\\u001b[2J") && text.contains("\\u000a"),
                "{verb}: {text}"
            );
            // The header, and one line per participant (for `leader`, the
            // leader's line first): no forged row.
            let expected = if verb == "locks" { 3 } else { 4 };
            assert_eq!(text.lines().count(), expected, "{verb}: {text}");
            let (output, _) = run(&[verb, &path, "--json"]).await;
            let raw = String::from_utf8(output.stdout).unwrap();
            assert!(
                !raw.chars().any(|c| c.is_control() && c != '\n'),
                "{verb} --json: {raw:?}"
            );
            let json: serde_json::Value = serde_json::from_str(&raw).unwrap();
            assert!(json.to_string().contains("quoted"), "{json}");
            let plain = json["participants"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["identity"] == forged || p["id"] == forged);
            assert!(plain, "{verb} --json does not give the text back: {json}");
        }
    })
    .await
    .expect("test timed out");
}

/// `lock --leases N --layout kazoo` takes a lease of kazoo's `Semaphore`:
/// its queue on the sibling path, the number of leases in the path's
/// data; a different number is refused before a lease is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_leases_in_kazoo_s_layout_is_a_kazoo_semaphore() {
    tokio::time::timeout(TEST_LIMIT, async {
        let path = unique("kazoo-semaphore");
        let (output, _) = run(&[
            "lock", &path, "--leases", "2", "--layout", "kazoo", "--", "true",
        ])
        .await;
        assert!(output.status.success(), "{}", stderr(&output));
        let client = raw().await;
        assert_eq!(client.get_data(&path).await.unwrap().0, b"2");
        let (output, _) = run(&[
            "lock", &path, "--leases", "3", "--layout", "kazoo", "--", "true",
        ])
        .await;
        assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("admits 2 leases"),
            "{}",
            stderr(&output)
        );
        assert!(children(&path).await.is_empty(), "a lease was left");
    })
    .await
    .expect("test timed out");
}

/// `locks ROOT` on a root of folders says so and points to `--all`;
/// `locks ROOT --all` lists every lock and election under it, each with
/// its holders and waiters in queue order, in text and JSON, and says when
/// `--max-paths` capped it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_all_lists_every_lock_and_election_under_a_root() {
    tokio::time::timeout(TEST_LIMIT, async {
        let root = unique("app");
        let client = raw().await;
        let node =
            |dir: &str, name: &str, seq: u32| format!("{root}/{dir}/_c_{UUID}-{name}{seq:010}");
        make(&client, &node("locks/a", "lock-", 1), b"ha").await;
        make(&client, &node("locks/a", "lock-", 2), b"wa").await;
        make(&client, &node("locks/b", "lock-", 1), b"hb").await;
        make(&client, &node("elections/e", "latch-", 1), b"le").await;
        // A node no recipe writes, in a lock's path.
        make(&client, &format!("{root}/locks/b/<junk>"), b"").await;

        let (output, _) = run(&["locks", &root]).await;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            text.contains("is a folder") && text.contains("--all"),
            "{text}"
        );
        assert!(!text.contains("election with"), "{text}");

        let (code, listed, err) = json_of(&["locks", &root, "--all", "--json"]).await;
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(listed["capped"], false, "{listed}");
        let paths = listed["paths"].as_array().unwrap();
        let names: Vec<&str> = paths.iter().map(|p| p["path"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                format!("{root}/elections/e"),
                format!("{root}/locks/a"),
                format!("{root}/locks/b")
            ]
        );
        let a = &paths[1]["participants"];
        let roles: Vec<(&str, &str)> = a
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["role"].as_str().unwrap(), p["identity"].as_str().unwrap()))
            .collect();
        assert_eq!(roles, [("holder", "ha"), ("waiter", "wa")]);
        assert_eq!(paths[0]["kind"], "election");
        assert_eq!(paths[1]["unknown"]["count"], 0, "{listed}");
        assert_eq!(paths[2]["unknown"]["count"], 1, "{listed}");
        assert_eq!(paths[2]["unknown"]["names"][0], "<junk>", "{listed}");
        assert_eq!(paths[2]["participants"].as_array().unwrap().len(), 1);

        let (output, _) = run(&["locks", &root, "--all"]).await;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        for name in &names {
            assert!(text.contains(&format!("{name}: ")), "{text}");
        }
        assert!(
            text.contains("unknown: 1 node no recipe writes: <junk>"),
            "{text}"
        );
        let (code, listed, err) =
            json_of(&["locks", &root, "--all", "--json", "--max-paths", "2"]).await;
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(listed["capped"], true, "{listed}");
        assert!(listed["paths_read"].as_u64().unwrap() <= 2, "{listed}");
    })
    .await
    .expect("test timed out");
}

/// `locks ROOT --all --watch --json`: one line per change, from one
/// recursive watch; a hand-off shows the next holder, with how long it has
/// held (seen taking over); SIGINT ends it (exit 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_all_watch_follows_every_change() {
    tokio::time::timeout(TEST_LIMIT, async {
        let root = unique("watched");
        let client = raw().await;
        let node = |seq: u32| format!("{root}/locks/a/_c_{UUID}-lock-{seq:010}");
        make(&client, &node(1), b"first").await;
        make(&client, &node(2), b"second").await;
        let mut child = zkc(&["locks", &root, "--all", "--watch", "--json"])
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let first = next_listing(&mut out).await;
        let holders = |listing: &serde_json::Value| -> Vec<(String, serde_json::Value)> {
            listing["paths"][0]["participants"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["role"] == "holder")
                .map(|p| {
                    (
                        p["identity"].as_str().unwrap().to_owned(),
                        p["held_ms"].clone(),
                    )
                })
                .collect()
        };
        assert_eq!(
            holders(&first),
            [("first".to_owned(), serde_json::Value::Null)],
            "{first}"
        );
        client.delete(&node(1), None).await.unwrap();
        let second = loop {
            let listing = next_listing(&mut out).await;
            if holders(&listing).first().map(|h| h.0.as_str()) == Some("second") {
                break listing;
            }
        };
        assert!(
            holders(&second)[0].1.is_u64(),
            "held_ms unknown after a take-over: {second}"
        );
        let pid = nix_pid(&child);
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap();
        let status = tokio::time::timeout(WAIT_LIMIT, child.wait())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status.code(), Some(0));
    })
    .await
    .expect("test timed out");
}

/// The next JSON line of a `--watch --json` run.
async fn next_listing(out: &mut BufReader<tokio::process::ChildStdout>) -> serde_json::Value {
    let mut line = String::new();
    tokio::time::timeout(WAIT_LIMIT, out.read_line(&mut line))
        .await
        .unwrap()
        .unwrap();
    serde_json::from_str(&line).unwrap()
}

fn nix_pid(child: &Child) -> String {
    child.id().unwrap().to_string()
}
