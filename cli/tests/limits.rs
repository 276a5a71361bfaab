//! A command line that never misleads (issue 44): signals end `lock` and
//! `elect` at every stage, values and ids over the limits are refused before
//! anything is sent, a host that does not resolve is named, a session
//! timeout the server changed is told, and long inputs are cut in messages.
//!
//! Servers here are the test server (embedded by default) or plain
//! listeners of the test's own: one that never accepts (its connections
//! wait in the backlog, unanswered), which also tells whether anything
//! connected at all.
#![allow(clippy::unwrap_used, missing_docs)]

use std::net::TcpListener;
use std::process::{Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};
use zk_curator_testing::TestingServer;

const BIN: &str = env!("CARGO_BIN_EXE_zk-curator");
/// The bound on one wait for a condition or a process.
const WAIT_LIMIT: Duration = Duration::from_secs(20);

fn server() -> &'static TestingServer {
    static SERVER: OnceLock<TestingServer> = OnceLock::new();
    SERVER.get_or_init(|| TestingServer::start().expect("test server"))
}

/// `zk-curator args` against `hosts`; output captured, killed if dropped.
fn zkc(hosts: &str, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("ZK_CONNECT", hosts)
        .env_remove("ZK_AUTH")
        .env_remove("ZK_SASL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

async fn finish(child: Child) -> Output {
    tokio::time::timeout(WAIT_LIMIT, child.wait_with_output())
        .await
        .expect("zk-curator did not exit")
        .unwrap()
}

async fn output(hosts: &str, args: &[&str]) -> Output {
    finish(zkc(hosts, args).spawn().unwrap()).await
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A listener on 127.0.0.1 that never accepts: a connection to it is made
/// by the kernel and then waits, never read, never answered.
struct Silent(TcpListener);

impl Silent {
    fn new() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        Silent(listener)
    }

    fn address(&self) -> String {
        self.0.local_addr().unwrap().to_string()
    }

    fn port(&self) -> u16 {
        self.0.local_addr().unwrap().port()
    }

    /// Whether a connection waits in its backlog (taken, so asked once).
    fn was_connected(&self) -> bool {
        self.0.accept().is_ok()
    }

    /// Whether the kernel holds an established connection to it (one not
    /// accepted yet counts), read from `/proc/net/tcp`.
    fn has_connection(&self) -> bool {
        let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
        let local = format!("0100007F:{:04X}", self.port());
        table.lines().skip(1).any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"01")
        })
    }
}

/// Whether process `pid` catches `signal` (its handler is installed), from
/// `SigCgt` in `/proc/PID/status`.
fn catches(pid: u32, signal: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signal - 1)) != 0)
}

async fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_LIMIT;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Item 1: SIGINT and SIGTERM end `lock` and `elect` at once while they
/// still wait for ZooKeeper to answer, with 128 + the signal, and the
/// command never runs.
#[tokio::test(flavor = "multi_thread")]
async fn signals_end_lock_and_elect_while_connecting() {
    for verb in ["lock", "elect"] {
        for (name, code) in [("-INT", 130), ("-TERM", 143)] {
            let silent = Silent::new();
            let dir = tempfile::tempdir().unwrap();
            let ran = dir.path().join("ran");
            let script = format!("touch {}", ran.display());
            let args = [
                verb,
                "/limits/connecting",
                "--connection-timeout",
                "60s",
                "--",
                "sh",
                "-c",
                &script,
            ];
            let child = zkc(&silent.address(), &args).spawn().unwrap();
            let pid = child.id().unwrap();
            wait_for("the signal handlers", || {
                catches(pid, 2) && catches(pid, 15)
            })
            .await;
            wait_for("the connection to the silent listener", || {
                silent.has_connection()
            })
            .await;
            let sent = std::process::Command::new("kill")
                .args([name, &pid.to_string()])
                .status()
                .unwrap();
            assert!(sent.success());
            let began = Instant::now();
            let out = finish(child).await;
            let took = began.elapsed();
            let what = format!("{verb} {name}");
            assert_eq!(out.status.code(), Some(code), "{what}: {}", stderr(&out));
            assert!(took < Duration::from_secs(1), "{what}: took {took:?}");
            assert!(!ran.exists(), "{what}: the command ran");
            assert!(
                stderr(&out).contains("connecting"),
                "{what}: {}",
                stderr(&out)
            );
        }
    }
}

/// Item 2: a value too large for one request is refused before anything is
/// sent, naming its size and the limit.
#[tokio::test(flavor = "multi_thread")]
async fn a_value_over_the_packet_limit_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("value");
    std::fs::write(&file, vec![b'v'; 2 * 1024 * 1024]).unwrap();
    let silent = Silent::new();
    let file = file.display().to_string();
    let args = [
        "elect",
        "/limits/value",
        "--value-file",
        &file,
        "--connection-timeout",
        "2s",
        "--",
        "true",
    ];
    let out = output(&silent.address(), &args).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("2097152 bytes"), "{err}");
    assert!(err.contains("1048575 bytes"), "the limit: {err}");
    assert!(!silent.was_connected(), "a connection was tried");
}

/// Item 3: a host name that does not resolve is said so: at once when no
/// host of the ensemble resolves, among the reasons at the timeout when
/// another host resolves but does not answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_that_does_not_resolve_is_named() {
    let began = Instant::now();
    let out = output(
        "no-such-host.invalid:2181",
        &["locks", "/x", "--connection-timeout", "10s"],
    )
    .await;
    let took = began.elapsed();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(
        err.contains("no-such-host.invalid") && err.contains("does not resolve"),
        "{err}"
    );
    assert!(!err.contains("timed out"), "{err}");
    assert!(took < Duration::from_secs(3), "took {took:?}: {err}");

    let silent = Silent::new();
    let hosts = format!("no-such-host.invalid:2181,{}", silent.address());
    let out = output(&hosts, &["locks", "/x", "--connection-timeout", "1s"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(
        err.contains("no-such-host.invalid") && err.contains("does not resolve"),
        "{err}"
    );
}

/// Item 4: a session timeout the server changed is told, once; one it
/// granted is not mentioned.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_timeout_the_server_changed_is_told() {
    let hosts = server().connect_string();
    for asked in ["1ms", "100h"] {
        let out = output(
            &hosts,
            &[
                "lock",
                "/limits/session-timeout",
                "--session-timeout",
                asked,
                "--",
                "true",
            ],
        )
        .await;
        let err = stderr(&out);
        assert!(out.status.success(), "{asked}: {err}");
        let told = format!("not the {asked} asked for");
        assert_eq!(err.matches(&told).count(), 1, "{asked}: {err}");
        assert!(
            err.contains("the server gave a session timeout of"),
            "{err}"
        );
    }
    let out = output(&hosts, &["lock", "/limits/session-timeout", "--", "true"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("session timeout"),
        "{}",
        stderr(&out)
    );
}

/// Item 5: user input echoed in an error is cut to a sane length, which
/// the message states.
#[tokio::test(flavor = "multi_thread")]
async fn long_inputs_are_cut_in_messages() {
    let long = "a".repeat(100_000);
    let path = format!("/{long}");
    let path_in_zookeeper = format!("/zookeeper/{long}");
    let host = format!("{long}:notaport");
    let silent = Silent::new();
    let cases: Vec<Vec<&str>> = vec![
        vec!["locks", &long],
        vec!["locks", &path],
        vec!["leader", &path_in_zookeeper],
        vec!["lock", &long, "--", "true"],
        vec!["elect", &path, "--id", &long, "--", "true"],
        vec!["lock", "/x", "--id", &long, "--", "true"],
        vec!["revoke", "/x", "--node", &path],
        vec!["locks", "/x", "--zk", &host],
    ];
    for args in cases {
        let out = output(&silent.address(), &args).await;
        let err = stderr(&out);
        let what = format!("{:?}", args[0]);
        assert_eq!(
            out.status.code(),
            Some(64),
            "{what}: {}",
            &err[..err.len().min(500)]
        );
        assert!(
            err.len() < 1_000,
            "{what}: {} bytes: {}",
            err.len(),
            &err[..500]
        );
        assert!(err.contains("characters"), "{what}: {err}");
    }
    assert!(!silent.was_connected(), "a connection was tried");
}

/// Item 6: `lock --id` and `elect --id` follow one rule, checked before
/// anything is sent: not empty, no control characters, not too long.
#[tokio::test(flavor = "multi_thread")]
async fn ids_follow_one_rule_for_lock_and_elect() {
    let long = "i".repeat(2_000);
    for verb in ["lock", "elect"] {
        for id in ["", "two\nlines", "esc\x1b[31mred", long.as_str()] {
            let silent = Silent::new();
            let args = [
                verb,
                "/limits/ids",
                "--id",
                id,
                "--connection-timeout",
                "2s",
                "--",
                "true",
            ];
            let out = output(&silent.address(), &args).await;
            let err = stderr(&out);
            let what = format!("{verb} --id {:?}", &id[..id.len().min(20)]);
            assert_eq!(out.status.code(), Some(64), "{what}: {err}");
            assert!(err.contains("--id"), "{what}: {err}");
            assert!(!silent.was_connected(), "{what}: a connection was tried");
        }
        // The rule's edge: an id at the limit is taken.
        let fits = "i".repeat(1_024);
        let out = output(
            &server().connect_string(),
            &[verb, "/limits/ids-fit", "--id", &fits, "--", "true"],
        )
        .await;
        assert!(out.status.success(), "{verb}: {}", stderr(&out));
    }
}
