//! `zk-curator dashboard ROOT` against the suite's server: its snapshot
//! agrees with `locks ROOT --all --json`, its events follow a hand-off,
//! its metrics are OpenMetrics without node names or sessions and flag an
//! overdue lock, node data never reaches the page as markup, and a taken
//! port or a missing root end it with their exit codes. The promtool
//! checks need Debian's `prometheus` package (or `ZK_SKIP_MISSING=promtool`).
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{make, raw, run, stderr, Dashboard};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use zk_curator_testing::backend::Prerequisite;

const TEST_LIMIT: Duration = Duration::from_secs(120);
const WAIT_LIMIT: Duration = Duration::from_secs(20);
const UUID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

fn unique(name: &str) -> String {
    format!("/cli-dashboard/{name}-{}", std::process::id())
}

/// A mutex participant's node under `lock`.
fn mutex_node(lock: &str, seq: u32) -> String {
    format!("{lock}/_c_{UUID}-lock-{seq:010}")
}

/// A listing with what changes with time (ages) left out.
fn without_ages(listing: &Value) -> Value {
    let paths = listing["paths"].as_array().unwrap();
    Value::Array(
        paths
            .iter()
            .map(|p| {
                let participants: Vec<Value> = p["participants"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|q| {
                        let mut q = q.clone();
                        let q_map = q.as_object_mut().unwrap();
                        q_map.remove("queued_ms");
                        q_map.remove("held_ms");
                        q
                    })
                    .collect();
                serde_json::json!({
                    "path": p["path"], "recipe": p["recipe"], "kind": p["kind"], "unknown": p["unknown"],
                    "participants": participants,
                })
            })
            .collect(),
    )
}

/// The snapshot and `locks ROOT --all --json` list the same locks and
/// elections, with the same participants in the same queue order; a node
/// no recipe writes breaks nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshot_agrees_with_locks_all() {
    tokio::time::timeout(TEST_LIMIT, async {
        let root = unique("agree");
        let client = raw().await;
        for (seq, who) in [(3, "h"), (7, "w1"), (12, "w2")] {
            make(
                &client,
                &mutex_node(&format!("{root}/locks/a"), seq),
                who.as_bytes(),
            )
            .await;
        }
        make(&client, &mutex_node(&format!("{root}/locks/b"), 1), b"hb").await;
        make(
            &client,
            &format!("{root}/elections/e/_c_{UUID}-latch-0000000001"),
            b"le",
        )
        .await;
        make(&client, &format!("{root}/odd/not-a-recipe"), b"?").await;
        let dashboard = Dashboard::start(&root, &[]).await;
        let (_, snapshot) = dashboard
            .snapshot_when(|v| v["paths"].as_array().is_some_and(|p| p.len() >= 3))
            .await;
        let (output, _) = run(&["locks", &root, "--all", "--json"]).await;
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(without_ages(&snapshot), without_ages(&listed));
        let a = &snapshot["paths"][1];
        let order: Vec<&str> = a["participants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["identity"].as_str().unwrap())
            .collect();
        assert_eq!(order, ["h", "w1", "w2"], "{a}");
        assert_eq!(
            (a["holders"].clone(), a["waiters"].clone()),
            (1.into(), 2.into())
        );
        assert_eq!(snapshot["capped"], false);
        assert_eq!(snapshot["path"], root.as_str());
        dashboard.stop().await;
    })
    .await
    .expect("test timed out");
}

/// `GET /events` on the dashboard at `address`, its status line read
/// (200).
async fn open_events(address: &str) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let request = format!("GET /events HTTP/1.1\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut events = BufReader::new(stream);
    let mut status = String::new();
    events.read_line(&mut status).await.unwrap();
    assert!(status.contains(" 200 "), "{status}");
    events
}

/// The next `view` event of an event stream.
async fn next_view(events: &mut BufReader<TcpStream>) -> Value {
    let mut line = String::new();
    loop {
        line.clear();
        let read = tokio::time::timeout(WAIT_LIMIT, events.read_line(&mut line))
            .await
            .expect("an event in time")
            .unwrap();
        assert!(read > 0, "the event stream ended");
        if let Some(data) = line.trim_end().strip_prefix("data: ") {
            if data.starts_with('{') {
                return serde_json::from_str(data).unwrap();
            }
        }
    }
}

/// `/events` sends the view at once, then a new one after a hand-off
/// (within the wait bound), naming the next holder with its hold known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_follow_a_hand_off() {
    tokio::time::timeout(TEST_LIMIT, async {
        let root = unique("events");
        let client = raw().await;
        let lock = format!("{root}/locks/a");
        make(&client, &mutex_node(&lock, 1), b"first").await;
        make(&client, &mutex_node(&lock, 2), b"second").await;
        let dashboard = Dashboard::start(&root, &[]).await;
        dashboard
            .snapshot_when(|v| v["paths"][0]["holders"] == 1)
            .await;
        let mut events = open_events(&dashboard.address).await;
        let holder = |view: &Value| view["paths"][0]["participants"][0].clone();
        let first = next_view(&mut events).await;
        assert_eq!(holder(&first)["identity"], "first", "{first}");
        let handed = Instant::now();
        client.delete(&mutex_node(&lock, 1), None).await.unwrap();
        let second = loop {
            let view = next_view(&mut events).await;
            if holder(&view)["identity"] == "second" {
                break view;
            }
        };
        assert!(
            handed.elapsed() < Duration::from_secs(5),
            "{:?}",
            handed.elapsed()
        );
        assert_eq!(holder(&second)["role"], "holder");
        assert!(holder(&second)["held_ms"].is_u64(), "{second}");
        dashboard.stop().await;
    })
    .await
    .expect("test timed out");
}

/// After the whole view, `/events` sends changes: only the paths whose
/// entry changed (a hand-off on one lock of two sends that one), numbered
/// after the view; and a flag that comes with time alone (`--overdue`)
/// is sent without any change in ZooKeeper.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_send_only_what_changed_and_flags_as_time_passes() {
    tokio::time::timeout(TEST_LIMIT, async {
        let root = unique("changes");
        let client = raw().await;
        let a = format!("{root}/locks/a");
        let b = format!("{root}/locks/b");
        make(&client, &mutex_node(&a, 1), b"first").await;
        make(&client, &mutex_node(&a, 2), b"second").await;
        make(&client, &mutex_node(&b, 1), b"other").await;
        let overdue = format!("{a}=700ms");
        let dashboard = Dashboard::start(&root, &["--overdue", &overdue]).await;
        dashboard
            .snapshot_when(|v| v["paths"].as_array().is_some_and(|p| p.len() == 2))
            .await;
        let mut events = open_events(&dashboard.address).await;
        let first = next_view(&mut events).await;
        assert_eq!(first["paths"].as_array().unwrap().len(), 2, "{first}");
        let seq = first["seq"].as_u64().unwrap();
        client.delete(&mutex_node(&a, 1), None).await.unwrap();
        let handed = loop {
            let change = next_view(&mut events).await;
            assert!(change["seq"].as_u64().unwrap() > seq, "{change}");
            let paths = change["paths"].as_array().unwrap();
            assert!(
                paths.iter().all(|p| p["path"] != b.as_str()),
                "b unchanged, yet sent: {change}"
            );
            if paths
                .iter()
                .any(|p| p["participants"][0]["identity"] == "second")
            {
                break change;
            }
        };
        assert_eq!(handed["paths"].as_array().unwrap().len(), 1, "{handed}");
        assert!(handed["removed"].as_array().unwrap().is_empty(), "{handed}");
        // The new hold is known to have begun now: overdue 700 ms later,
        // with nothing else happening.
        let flagged = loop {
            let change = next_view(&mut events).await;
            let paths = change["paths"].as_array().unwrap();
            if let Some(p) = paths.iter().find(|p| p["path"] == a.as_str()) {
                if p["flags"] == serde_json::json!(["overdue"]) {
                    break change;
                }
            }
        };
        assert_eq!(flagged["paths"].as_array().unwrap().len(), 1, "{flagged}");
        dashboard.stop().await;
    })
    .await
    .expect("test timed out");
}

/// Every sample line of an OpenMetrics text: `name{labels} value`.
fn samples(text: &str) -> Vec<(String, String, f64)> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
            let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("{line:?}"));
            (
                name.to_owned(),
                labels.trim_end_matches('}').to_owned(),
                value,
            )
        })
        .collect()
}

fn value_of(text: &str, name: &str, path: &str) -> Option<f64> {
    let label = format!("path=\"{path}\"");
    samples(text)
        .into_iter()
        .find(|(n, labels, _)| n == name && labels.contains(&label))
        .map(|(_, _, v)| v)
}

/// `/metrics` is OpenMetrics (ends in `# EOF`, every sample parses), with
/// the documented names, labelled by path and recipe only (no node
/// names, sessions or identities); a lock held past `--overdue` is
/// flagged; `--group` sums paths; a lock's series go with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_openmetrics_and_flag_an_overdue_lock() {
    tokio::time::timeout(TEST_LIMIT, async {
        let root = unique("metrics");
        let client = raw().await;
        let lock = format!("{root}/locks/a");
        make(&client, &mutex_node(&lock, 1), b"secret-holder-id").await;
        make(&client, &mutex_node(&lock, 2), b"secret-waiter-id").await;
        for job in ["x", "y"] {
            make(&client, &mutex_node(&format!("{root}/jobs/{job}"), 1), b"j").await;
        }
        let overdue = format!("{root}/locks/**=0s");
        let group = format!("^({root}/jobs)/.*$=$1");
        let dashboard = Dashboard::start(&root, &["--overdue", &overdue, "--group", &group]).await;
        let text = dashboard
            .metrics_when(true, |t| {
                value_of(t, "zk_curator_lock_waiters", &lock) == Some(1.0)
            })
            .await;
        assert!(text.ends_with("# EOF\n"), "{text}");
        // Found holding at the listing: its start is unknown, so not overdue.
        assert_eq!(
            value_of(&text, "zk_curator_lock_overdue", &lock),
            Some(0.0),
            "{text}"
        );
        assert_eq!(
            value_of(&text, "zk_curator_lock_hold_start_timestamp_seconds", &lock),
            None
        );
        // The two jobs, summed under their group.
        let jobs = format!("{root}/jobs");
        assert_eq!(
            value_of(&text, "zk_curator_lock_holders", &jobs),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            value_of(&text, "zk_curator_lock_holders", &format!("{jobs}/x")),
            None
        );
        // A hand-off seen: the new holder's start is known, and 0s is past.
        client.delete(&mutex_node(&lock, 1), None).await.unwrap();
        let text = dashboard
            .metrics_when(true, |t| {
                value_of(t, "zk_curator_lock_overdue", &lock) == Some(1.0)
            })
            .await;
        let start = value_of(&text, "zk_curator_lock_hold_start_timestamp_seconds", &lock).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            (now - start).abs() < 60.0,
            "a timestamp, not an age: {start}"
        );
        for name in [
            "zk_curator_lock_holders",
            "zk_curator_lock_waiters",
            "zk_curator_observer_connected",
            "zk_curator_observer_paths",
            "zk_curator_observer_listings_total",
            "zk_curator_observer_series_dropped_total",
        ] {
            assert!(
                samples(&text).iter().any(|s| s.0 == name),
                "no {name}:\n{text}"
            );
        }
        assert!(
            text.contains("# TYPE zk_curator_observer_listings counter"),
            "{text}"
        );
        assert!(
            text.contains("# UNIT zk_curator_lock_hold_start_timestamp_seconds seconds"),
            "{text}"
        );
        for (name, labels, _) in samples(&text) {
            for pair in labels.split(",").filter(|l| !l.is_empty()) {
                let key = pair.split('=').next().unwrap();
                assert!(key == "path" || key == "recipe", "{name}{{{labels}}}");
            }
            assert!(
                !labels.contains("_c_") && !labels.contains("lock-0") && !labels.contains("0x"),
                "{labels}"
            );
        }
        assert!(!text.contains("secret-"), "{text}");
        // The snapshot shows the same flag.
        let (_, snapshot) = dashboard
            .snapshot_when(|v| {
                v["paths"]
                    .as_array()
                    .is_some_and(|p| p.iter().any(|p| p["path"] == lock.as_str()))
            })
            .await;
        let a = snapshot["paths"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["path"] == lock.as_str())
            .unwrap()
            .clone();
        assert_eq!(a["flags"], serde_json::json!(["overdue"]), "{a}");
        // Gone with its lock.
        client.delete(&mutex_node(&lock, 2), None).await.unwrap();
        dashboard
            .metrics_when(true, |t| {
                value_of(t, "zk_curator_lock_holders", &lock).is_none()
            })
            .await;
        dashboard.stop().await;
    })
    .await
    .expect("test timed out");
}

/// Node data made of markup and quotes stays data: escaped in the JSON
/// (which still parses to it), never in the page, which inserts text only
/// through `textContent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markup_in_node_data_stays_data() {
    tokio::time::timeout(TEST_LIMIT, async {
        let root = unique("markup");
        let client = raw().await;
        let evil = "<script>alert(1)</script>\"'\u{1b}[2J";
        make(
            &client,
            &mutex_node(&format!("{root}/locks/a"), 1),
            evil.as_bytes(),
        )
        .await;
        // A node no recipe writes, named with markup: unknown, and data.
        let stray = "<img src=x onerror=alert(2)>";
        make(&client, &format!("{root}/locks/a/{stray}"), b"").await;
        let dashboard = Dashboard::start(&root, &[]).await;
        let (text, snapshot) = dashboard
            .snapshot_when(|v| v["paths"][0]["holders"] == 1)
            .await;
        assert_eq!(snapshot["paths"][0]["participants"][0]["identity"], evil);
        assert_eq!(snapshot["paths"][0]["unknown"]["names"][0], stray);
        assert_eq!(
            snapshot["paths"][0]["flags"],
            serde_json::json!(["unknown"])
        );
        for raw in ["<script", "</script>", "<img", "'", "\u{1b}"] {
            assert!(!text.contains(raw), "{raw:?} raw in {text}");
        }
        let (status, headers, page) = dashboard.get("/").await;
        assert!(status.contains(" 200 "), "{status}");
        assert!(headers.contains("content-type: text/html"), "{headers}");
        assert!(headers.contains("content-security-policy"), "{headers}");
        assert!(!page.contains("alert(1)"), "{page}");
        assert!(page.contains("textContent") && !page.contains("innerHTML"));
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "an outside asset"
        );
        dashboard.stop().await;
    })
    .await
    .expect("test timed out");
}

/// A port already taken: exit 69, the port named, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_port_exits_69() {
    tokio::time::timeout(TEST_LIMIT, async {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = taken.local_addr().unwrap().to_string();
        let port = taken.local_addr().unwrap().port().to_string();
        let (output, _) = run(&["dashboard", "/taken", "--bind", &address]).await;
        assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
        assert!(
            stderr(&output).contains(&format!("port {port} is taken")),
            "{}",
            stderr(&output)
        );
        assert!(output.stdout.is_empty());
    })
    .await
    .expect("test timed out");
}

/// A missing root: exit 66 saying so; with --watch, served anyway, and
/// its locks shown once it is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_root_exits_66_unless_watched() {
    tokio::time::timeout(TEST_LIMIT, async {
        let root = unique("missing");
        let (output, _) = run(&["dashboard", &root, "--bind", "127.0.0.1:0"]).await;
        assert_eq!(output.status.code(), Some(66), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("does not exist"),
            "{}",
            stderr(&output)
        );
        assert!(output.stdout.is_empty());

        let dashboard = Dashboard::start(&root, &["--watch"]).await;
        dashboard
            .snapshot_when(|v| v["paths"] == serde_json::json!([]))
            .await;
        let client = raw().await;
        make(&client, &mutex_node(&format!("{root}/locks/a"), 1), b"late").await;
        let (_, snapshot) = dashboard
            .snapshot_when(|v| v["paths"][0]["holders"] == 1)
            .await;
        assert_eq!(snapshot["paths"][0]["path"], format!("{root}/locks/a"));
        dashboard.stop().await;
    })
    .await
    .expect("test timed out");
}

/// `promtool check metrics` accepts a scrape (with a lock, an election and
/// every flag on); `promtool test rules` passes the rules test of
/// `docs/alerts.yml`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_accepts_the_scrape_and_the_alert_rules() {
    if !Prerequisite::Promtool.check("promtool_accepts_the_scrape_and_the_alert_rules") {
        return;
    }
    tokio::time::timeout(TEST_LIMIT, async {
        let root = unique("promtool");
        let client = raw().await;
        make(&client, &mutex_node(&format!("{root}/locks/a"), 1), b"h").await;
        make(
            &client,
            &format!("{root}/elections/e/_c_{UUID}-latch-0000000001"),
            b"l",
        )
        .await;
        let overdue = format!("{root}/**=1h");
        let dashboard =
            Dashboard::start(&root, &["--overdue", &overdue, "--leaderless", "1m"]).await;
        let text = dashboard
            .metrics_when(false, |t| t.contains("zk_curator_observer_connected 1"))
            .await;
        let mut promtool = tokio::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        promtool
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .await
            .unwrap();
        let checked = promtool.wait_with_output().await.unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
        eprintln!("promtool check metrics: {said}");
        assert!(checked.status.success(), "{said}\n{text}");
        assert!(
            said.trim().is_empty(),
            "promtool found problems: {said}\n{text}"
        );
        dashboard.stop().await;

        let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs");
        let tested = tokio::process::Command::new("promtool")
            .args(["test", "rules", "alerts.test.yml"])
            .current_dir(docs)
            .output()
            .await
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&tested.stdout),
            String::from_utf8_lossy(&tested.stderr)
        );
        eprintln!("promtool test rules: {said}");
        assert!(tested.status.success(), "{said}");
        assert!(said.contains("SUCCESS"), "{said}");
    })
    .await
    .expect("test timed out");
}

/// The dashboard's resident memory, in KiB (Linux's /proc).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap()
}

/// A client that opens `/events` and never reads makes the server keep
/// at most the latest view for it, not one per change: with views of
/// ~700 KB each, 60 changes would be ~40 MB of backlog; the server grows
/// by far less, and still answers others with the latest view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_does_not_grow_the_server() {
    tokio::time::timeout(TEST_LIMIT, async {
        let root = unique("stalled");
        let client = raw().await;
        let lock = format!("{root}/locks/a");
        // Half a megabyte of data, escaped into a larger view each time.
        let big = "<".repeat(120_000);
        make(&client, &mutex_node(&lock, 1), big.as_bytes()).await;
        let dashboard = Dashboard::start(&root, &[]).await;
        dashboard
            .snapshot_when(|v| v["paths"][0]["holders"] == 1)
            .await;
        let pid = dashboard.child.id().unwrap();
        let mut stalled = TcpStream::connect(&dashboard.address).await.unwrap();
        let request = format!(
            "GET /events HTTP/1.1\r\nHost: {}\r\n\r\n",
            dashboard.address
        );
        stalled.write_all(request.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = rss_kib(pid);
        for seq in 2..62 {
            make(&client, &mutex_node(&lock, seq), b"w").await;
        }
        // Made in quick succession (a busy tree): the last is read once
        // it has lived the observer's `read_after`.
        let (_, snapshot) = dashboard
            .snapshot_when(|v| {
                v["paths"][0]["waiters"] == 60
                    && v["paths"][0]["participants"][60]["pending"] == false
            })
            .await;
        assert_eq!(snapshot["paths"][0]["participants"][60]["identity"], "w");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let grown = rss_kib(pid).saturating_sub(before);
        eprintln!("resident memory grew by {grown} KiB with a stalled client");
        assert!(grown < 20_000, "grew by {grown} KiB with a stalled client");
        drop(stalled);
        dashboard.stop().await;
    })
    .await
    .expect("test timed out");
}
