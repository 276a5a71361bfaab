//! The `zk-curator` binary, run as a process against a test server (the
//! embedded one by default, a real ZooKeeper with `ZK_TEST_SERVER=real`).
//!
//! Children are small `sh` scripts that leave files behind as evidence; the
//! tests wait for those files or for `locks --json` output, never for a
//! fixed time.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::{server, zkc, BIN};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use zk_curator_testing::{close_granted_session, FaultProxy, SessionGrant};

/// The bound on each test body.
const TEST_LIMIT: Duration = Duration::from_secs(40);
/// The bound on one wait for a condition.
const WAIT_LIMIT: Duration = Duration::from_secs(20);

/// Runs a test body under [`TEST_LIMIT`].
async fn bounded<F: Future>(body: F) -> F::Output {
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .expect("test timed out")
}

/// A lock path of its own for each test.
fn unique(name: &str) -> String {
    format!("/cli-tests/{name}-{}", std::process::id())
}

async fn run(args: &[&str]) -> Output {
    zkc(args).output().await.unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The two commands that run a command under a hold: `lock` (while it
/// holds a lock) and `elect` (while it leads an election). What they share
/// is tested once, by scenarios that take the verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verb {
    Lock,
    Elect,
}

impl Verb {
    fn name(self) -> &'static str {
        match self {
            Verb::Lock => "lock",
            Verb::Elect => "elect",
        }
    }

    /// `<verb> <path> [options] -- sh -c <script>` started in the background.
    fn spawn(self, path: &str, options: &[&str], script: &str) -> Child {
        let mut args = vec![self.name(), path];
        args.extend_from_slice(options);
        args.extend_from_slice(&["--", "sh", "-c", script]);
        zkc(&args).spawn().unwrap()
    }

    /// What lists this verb's participants of `path` as JSON: `locks --json`
    /// or `leader --json`.
    async fn listing(self, path: &str) -> Value {
        let lister = match self {
            Verb::Lock => "locks",
            Verb::Elect => "leader",
        };
        let output = run(&[lister, path, "--json"]).await;
        assert!(
            output.status.success(),
            "{lister} failed: {}",
            stderr(&output)
        );
        serde_json::from_slice(&output.stdout).unwrap()
    }

    /// Waits until the listing of `path` has `count` participants, and
    /// returns it.
    async fn wait_listing(self, path: &str, count: usize, what: &str) -> Value {
        let deadline = Instant::now() + WAIT_LIMIT;
        loop {
            let listed = self.listing(path).await;
            if listed["participants"].as_array().unwrap().len() == count {
                return listed;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {listed}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The holder (or leader) of `path`, once it is the only participant.
    async fn holder(self, path: &str) -> Value {
        let listed = self.wait_listing(path, 1, "the holder's node").await;
        match self {
            Verb::Lock => listed["participants"][0].clone(),
            Verb::Elect => listed["leader"].clone(),
        }
    }

    /// The `--id` a listed participant was given.
    fn id_of(self, participant: &Value) -> &Value {
        match self {
            Verb::Lock => &participant["identity"]["label"],
            Verb::Elect => &participant["id"],
        }
    }

    /// The session of a listed participant, where the listing has it
    /// (`leader` does not).
    fn session_of(self, participant: &Value) -> Option<i64> {
        match self {
            Verb::Lock => Some(session_id(participant)),
            Verb::Elect => None,
        }
    }

    /// How the command reports the loss of its hold of `path`.
    fn lost(self, path: &str) -> String {
        match self {
            Verb::Lock => format!("lost the lock {path}/"),
            Verb::Elect => format!("lost leadership of {path}"),
        }
    }
}

async fn locks_json(path: &str) -> Vec<Value> {
    let listed = Verb::Lock.listing(path).await;
    listed["participants"].as_array().unwrap().clone()
}

/// Waits until `locks --json` lists `count` participants of `path`.
async fn participants(path: &str, count: usize, what: &str) -> Vec<Value> {
    let listed = Verb::Lock.wait_listing(path, count, what).await;
    listed["participants"].as_array().unwrap().clone()
}

/// Polls `condition` until it holds, at most [`WAIT_LIMIT`].
async fn wait_for<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT_LIMIT;
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn wait_for_file(path: &Path) {
    let shown = path.display().to_string();
    wait_for(&shown, || async { path.exists() }).await;
}

/// Waits for the child's end and returns its output (stdout, stderr, code).
async fn finish(child: Child) -> Output {
    tokio::time::timeout(WAIT_LIMIT, child.wait_with_output())
        .await
        .expect("zk-curator did not exit")
        .unwrap()
}

/// A child script that marks its start, stops when `release` appears, and
/// notes a SIGTERM or SIGINT in `signalled` before exiting.
fn gated_script(dir: &Path) -> (String, PathBuf, PathBuf, PathBuf) {
    let started = dir.join("started");
    let release = dir.join("release");
    let signalled = dir.join("signalled");
    let script = format!(
        "trap 'echo TERM > {s}; exit 143' TERM; trap 'echo INT > {s}; exit 3' INT; \
         touch {st}; while [ ! -f {r} ]; do sleep 0.02; done",
        s = signalled.display(),
        st = started.display(),
        r = release.display(),
    );
    (script, started, release, signalled)
}

fn session_id(participant: &Value) -> i64 {
    let hex = participant["session"].as_str().unwrap();
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).unwrap() as i64
}

/// Sends `signal` (as `kill` spells it: `-INT`, `-TERM`) to `child`.
fn signal(child: &Child, signal: &str) {
    let pid = child.id().expect("the child still runs").to_string();
    let sent = std::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .unwrap();
    assert!(sent.success(), "kill {signal} {pid}");
}

/// The lines a child prints on stdout.
type OutputLines = tokio::io::Lines<BufReader<tokio::process::ChildStdout>>;

/// `locks <path> --json --watch` started (through `proxy`, if given), and
/// its output's lines.
fn watch_locks(path: &str, proxy: Option<&FaultProxy>) -> (Child, OutputLines) {
    let mut command = zkc(&["locks", path, "--json", "--watch"]);
    if let Some(proxy) = proxy {
        command.env("ZK_CONNECT", proxy.connect_string());
    }
    let mut watch = command.spawn().unwrap();
    let lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    (watch, lines)
}

/// Ends a `--watch` with Ctrl-C (SIGINT): it exits 0.
async fn interrupt(mut watch: Child) {
    signal(&watch, "-INT");
    let status = tokio::time::timeout(WAIT_LIMIT, watch.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
}

/// The opcodes of the requests `proxy` has seen, in order.
fn request_opcodes(proxy: &FaultProxy) -> Vec<i32> {
    proxy
        .traffic()
        .into_iter()
        .filter_map(|t| match t {
            zk_curator_testing::Traffic::Request { opcode, .. } => Some(opcode),
            zk_curator_testing::Traffic::Reply { .. } => None,
        })
        .collect()
}

/// The processes whose parent is `pid` (from `/proc/*/stat`).
fn children_of(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: the fields after the last `)`.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|ppid| ppid.parse::<u32>().ok());
        if parent == Some(pid) {
            found.push(child);
        }
    }
    found
}

/// Credentials stay with zk-curator: the command `lock` and `elect` run,
/// and every other process zk-curator starts (the guard), have neither
/// `ZK_AUTH` nor `ZK_SASL` in their environment, nor the password anywhere
/// in it.
#[tokio::test]
async fn credentials_are_not_handed_to_the_command() {
    bounded(async {
        const PASSWORD: &str = "pw-that-must-stay-4711";
        for verb in [Verb::Lock, Verb::Elect] {
            let dir = tempfile::tempdir().unwrap();
            let (gated, started, release, _) = gated_script(dir.path());
            let seen = dir.path().join("env");
            let script = format!("env > {}; {gated}", seen.display());
            let path = unique(&format!("no-credentials-{}", verb.name()));
            // Open: `/cli-tests`, made on the way, is shared with the
            // anonymous tests.
            let mut args = vec![
                verb.name(),
                path.as_str(),
                "--acl",
                "open",
                "--",
                "sh",
                "-c",
                &script,
            ];
            if verb == Verb::Elect {
                args.splice(2..2, ["--id", "env-check"]);
            }
            let holder = zkc(&args)
                .env("ZK_AUTH", format!("someone:{PASSWORD}"))
                // Empty: no SASL (the embedded server has none; tests/secure.rs
                // has a SASL password against ZooKeeper), but set all the same.
                .env("ZK_SASL", "")
                .spawn()
                .unwrap();
            wait_for_file(&started).await;
            let env = std::fs::read_to_string(&seen).unwrap();
            for name in ["ZK_AUTH", "ZK_SASL"] {
                assert!(!env.contains(name), "{verb:?}: the command got {name}");
            }
            assert!(
                !env.contains(PASSWORD),
                "{verb:?}: the command got the password"
            );
            let children = children_of(holder.id().unwrap());
            assert!(
                children.len() >= 2,
                "{verb:?}: the command and its guard: {children:?}"
            );
            for child in children {
                let environ = std::fs::read(format!("/proc/{child}/environ")).unwrap_or_default();
                let environ = String::from_utf8_lossy(&environ);
                assert!(
                    !environ.contains(PASSWORD)
                        && !environ.contains("ZK_AUTH")
                        && !environ.contains("ZK_SASL"),
                    "{verb:?}: process {child}, started by zk-curator, holds a credential"
                );
            }
            std::fs::write(&release, "").unwrap();
            let output = finish(holder).await;
            assert!(output.status.success(), "{verb:?}: {}", stderr(&output));
        }
    })
    .await;
}

/// A reader that stops reading (`| head -1`) ends `locks --watch` and
/// `leader --watch` at their next line quietly, as SIGPIPE ends other
/// commands: exit 141, nothing on stderr (no panic); a one-shot listing too.
#[tokio::test]
async fn a_closed_output_ends_quietly() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        for lister in ["locks", "leader"] {
            let path = unique(&format!("closed-output-{lister}"));
            let mut watch = zkc(&[lister, &path, "--watch", "--json"]).spawn().unwrap();
            let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
            next_json(&mut lines, "the first listing").await;
            drop(lines);
            // A change: a participant comes and goes.
            let (verb, extra): (Verb, &[&str]) = match lister {
                "locks" => (Verb::Lock, &[]),
                _ => (Verb::Elect, &["--id", "pipe"]),
            };
            let (script, started, release, _) = gated_script(dir.path());
            let _ = std::fs::remove_file(&started);
            let _ = std::fs::remove_file(&release);
            let holder = verb.spawn(&path, extra, &script);
            wait_for_file(&started).await;
            std::fs::write(&release, "").unwrap();
            assert!(finish(holder).await.status.success());
            let output = finish(watch).await;
            assert_eq!(
                output.status.code(),
                Some(141),
                "{lister}: {}",
                stderr(&output)
            );
            assert!(output.stderr.is_empty(), "{lister}: {}", stderr(&output));
        }
        // A one-shot listing into a pipe closed before it writes.
        let path = unique("closed-output-once");
        let mut once = zkc(&["locks", &path, "--json"]).spawn().unwrap();
        drop(once.stdout.take());
        let output = finish(once).await;
        assert!(
            matches!(output.status.code(), Some(0 | 141)),
            "{:?}: {}",
            output.status,
            stderr(&output)
        );
        assert!(output.stderr.is_empty(), "{}", stderr(&output));
    })
    .await;
}

/// The one session that went through `proxy`: the one the holder (or
/// leader) of `path` runs on, where its listing shows it.
async fn the_grant(proxy: &FaultProxy, verb: Verb, path: &str) -> SessionGrant {
    let holder = verb.holder(path).await;
    let grants = proxy.granted_sessions();
    assert_eq!(grants.len(), 1, "one session through the proxy: {grants:?}");
    if let Some(session) = verb.session_of(&holder) {
        assert_eq!(
            grants[0].session_id, session,
            "the holder's session went through the proxy"
        );
    }
    grants[0].clone()
}

/// `<verb> <path>` runs `echo out; exit 42`: its status and output are the
/// command's; a command that does not exist gives the shell's 127, and the
/// hold is given back before the command line exits.
async fn the_status_passes_through(verb: Verb, path: &str) {
    let output = finish(verb.spawn(path, &[], "echo out; exit 42")).await;
    assert_eq!(output.status.code(), Some(42), "{}", stderr(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "out\n");
    let output = run(&[verb.name(), path, "--", "/nonexistent/zk-curator-test"]).await;
    assert_eq!(output.status.code(), Some(127), "{}", stderr(&output));
    let listed = verb.listing(path).await;
    assert_eq!(listed["participants"], Value::Array(vec![]), "{listed}");
}

/// A holder of its own path (`--id holder`) whose command runs until
/// released, for waiters that give up behind it.
struct Held {
    verb: Verb,
    path: String,
    holder: Child,
    release: PathBuf,
    /// Made by a waiter's command, should one ever run.
    ran: PathBuf,
    _dir: tempfile::TempDir,
}

impl Held {
    async fn start(verb: Verb, name: &str) -> Held {
        let dir = tempfile::tempdir().unwrap();
        let (script, started, release, _) = gated_script(dir.path());
        let path = unique(name);
        let holder = verb.spawn(&path, &["--id", "holder"], &script);
        wait_for_file(&started).await;
        Held {
            verb,
            path,
            holder,
            release,
            ran: dir.path().join("waiter-ran"),
            _dir: dir,
        }
    }

    /// A waiter's command: it marks that it ran.
    fn waiter_script(&self) -> String {
        format!("touch {}", self.ran.display())
    }

    /// A waiter with `--timeout 300ms` gives up after it with 75, saying
    /// so, and leaves the queue.
    async fn a_waiter_times_out(&self) {
        let script = self.waiter_script();
        let began = Instant::now();
        let output = run(&[
            self.verb.name(),
            &self.path,
            "--timeout",
            "300ms",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .await;
        assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
        assert!(stderr(&output).contains("timed out"), "{}", stderr(&output));
        assert!(began.elapsed() >= Duration::from_millis(300));
        self.verb
            .wait_listing(&self.path, 1, "the timed-out waiter gone")
            .await;
    }

    /// A queued waiter, interrupted (SIGINT) or told to end (SIGTERM),
    /// exits 130 or 143 and leaves the queue; the holder keeps its hold.
    async fn a_waiter_is_interrupted(&self) {
        let verb = self.verb;
        for (name, code) in [("-INT", 130), ("-TERM", 143)] {
            let waiter = verb.spawn(&self.path, &["--id", "waiter"], &self.waiter_script());
            verb.wait_listing(&self.path, 2, "the waiter queued").await;
            signal(&waiter, name);
            let output = finish(waiter).await;
            assert_eq!(
                output.status.code(),
                Some(code),
                "{name}: {}",
                stderr(&output)
            );
            verb.wait_listing(&self.path, 1, "the interrupted waiter gone")
                .await;
            let holder = verb.holder(&self.path).await;
            assert_eq!(verb.id_of(&holder), "holder", "{holder}");
        }
    }

    /// Lets the holder's command end: it exits 0, and no waiter that gave
    /// up ran its command.
    async fn release(self) {
        std::fs::write(&self.release, "").unwrap();
        assert!(finish(self.holder).await.status.success());
        assert!(!self.ran.exists(), "a waiter that gave up ran its command");
    }
}

/// The node of `<verb>`'s hold is deleted by someone else: the hold is
/// lost, a command that ignores SIGTERM is killed after `--kill-after`, the
/// command line exits 76 and leaves nothing queued (an elector queues
/// again, and leaves with the rest).
async fn a_deleted_node_stops_the_command(verb: Verb, name: &str, options: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let signalled = dir.path().join("signalled");
    // This child ignores SIGTERM: only SIGKILL, after --kill-after, ends it.
    let script = format!(
        "trap 'echo TERM > {s}' TERM; touch {st}; while true; do sleep 0.02; done",
        s = signalled.display(),
        st = started.display()
    );
    let path = unique(name);
    let child = verb.spawn(&path, options, &script);
    wait_for_file(&started).await;
    let node = verb.holder(&path).await["node"]
        .as_str()
        .unwrap()
        .to_owned();
    let client = zookeeper_client::Client::connect(&server().connect_string())
        .await
        .unwrap();
    client.delete(&node, None).await.unwrap();
    let output = finish(child).await;
    assert_eq!(output.status.code(), Some(76), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains(&verb.lost(&path)) && err.contains("deleted") && err.contains("killing"),
        "{err}"
    );
    wait_for_file(&signalled).await;
    verb.wait_listing(&path, 0, "nothing left queued").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_lock_runs_never_overlap() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let path = unique("overlap");
        let script = format!(
            "echo \"start $(date +%s%N)\" >> {l}; sleep 0.2; echo \"end $(date +%s%N)\" >> {l}",
            l = log.display()
        );
        let runs: Vec<Child> = (0..3)
            .map(|_| Verb::Lock.spawn(&path, &[], &script))
            .collect();
        for run in runs {
            let output = finish(run).await;
            assert!(output.status.success(), "{}", stderr(&output));
        }
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<(&str, u128)> = text
            .lines()
            .map(|line| {
                let (what, when) = line.split_once(' ').unwrap();
                (what, when.parse().unwrap())
            })
            .collect();
        assert_eq!(lines.len(), 6, "{text}");
        for (i, (what, _)) in lines.iter().enumerate() {
            let expected = if i % 2 == 0 { "start" } else { "end" };
            assert_eq!(*what, expected, "runs overlapped:\n{text}");
        }
        assert!(lines.windows(2).all(|w| w[0].1 <= w[1].1), "{text}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_status_and_environment_pass_through() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let env_file = dir.path().join("env");
        let path = unique("status");
        the_status_passes_through(Verb::Lock, &path).await;
        let script = format!(
            "echo \"$ZK_CURATOR_FENCING_TOKEN $ZK_CURATOR_LOCK_NODE\" > {}",
            env_file.display()
        );
        let output = finish(Verb::Lock.spawn(&path, &[], &script)).await;
        assert!(output.status.success(), "{}", stderr(&output));
        let seen = std::fs::read_to_string(&env_file).unwrap();
        let (token, node) = seen.trim().split_once(' ').unwrap();
        assert!(token.parse::<i64>().unwrap() > 0, "token {token}");
        assert!(node.starts_with(&format!("{path}/_c_")), "node {node}");
        // Tokens grow from one holder to the next.
        let output = finish(Verb::Lock.spawn(&path, &[], &script)).await;
        assert!(output.status.success(), "{}", stderr(&output));
        let again = std::fs::read_to_string(&env_file).unwrap();
        let next: i64 = again.split_once(' ').unwrap().0.parse().unwrap();
        assert!(next > token.parse::<i64>().unwrap());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn timeout_gives_its_code_and_locks_lists_the_waiter() {
    bounded(async {
        let held = Held::start(Verb::Lock, "timeout").await;
        let path = held.path.clone();
        held.a_waiter_times_out().await;

        let waiter = Verb::Lock.spawn(&path, &["--id", "waiter-1"], "exit 0");
        let listed = participants(&path, 2, "a holder and a waiter").await;
        assert_eq!(listed[0]["role"], "holder");
        assert_eq!(listed[0]["kind"], "mutex");
        assert_eq!(listed[0]["identity"]["label"], "holder");
        assert_eq!(listed[1]["role"], "waiter");
        assert_eq!(listed[1]["identity"]["label"], "waiter-1");
        assert!(listed[0]["sequence"].as_u64() < listed[1]["sequence"].as_u64());
        assert!(listed[0]["fencing_token"].as_i64() < listed[1]["fencing_token"].as_i64());
        assert_ne!(session_id(&listed[0]), 0);
        // The table has the same two rows.
        let table = run(&["locks", &path]).await;
        let table = String::from_utf8_lossy(&table.stdout).into_owned();
        assert!(
            table.contains("holder") && table.contains("waiter"),
            "{table}"
        );

        held.release().await;
        assert!(finish(waiter).await.status.success());
        assert!(locks_json(&path).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn locks_reads_read_write_and_semaphore_layouts() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let (script, started, release, _) = gated_script(dir.path());
        let rw = unique("rw");
        let reader = Verb::Lock.spawn(&rw, &["--read"], &script);
        wait_for_file(&started).await;
        let writer = Verb::Lock.spawn(&rw, &["--write"], "exit 0");
        let mut listed = participants(&rw, 2, "a reader and a writer").await;
        assert_eq!(
            (&listed[0]["kind"], &listed[0]["role"]),
            (&Value::from("read"), &Value::from("holder"))
        );
        assert_eq!(
            (&listed[1]["kind"], &listed[1]["role"]),
            (&Value::from("write"), &Value::from("waiter"))
        );
        std::fs::write(&release, "").unwrap();
        assert!(finish(reader).await.status.success());
        assert!(finish(writer).await.status.success());

        std::fs::remove_file(&started).unwrap();
        std::fs::remove_file(&release).unwrap();
        let sem = unique("sem");
        let holder = Verb::Lock.spawn(&sem, &["--leases", "1"], &script);
        wait_for_file(&started).await;
        let waiter = Verb::Lock.spawn(&sem, &["--leases", "1"], "exit 0");
        listed = participants(&sem, 2, "a lease holder and a waiter").await;
        assert!(listed.iter().all(|p| p["kind"] == "lease"));
        assert_eq!(listed[0]["role"], "holder");
        assert!(listed[0]["node"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{sem}/leases/")));
        assert_eq!(listed[1]["role"], "waiter");
        std::fs::write(&release, "").unwrap();
        assert!(finish(holder).await.status.success());
        assert!(finish(waiter).await.status.success());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn revoke_stops_the_holder_and_releases() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let (script, started, _release, signalled) = gated_script(dir.path());
        let path = unique("revoke");
        let holder = Verb::Lock.spawn(&path, &[], &script);
        wait_for_file(&started).await;

        let output = run(&["revoke", &path, "--all"]).await;
        assert!(output.status.success(), "{}", stderr(&output));
        let said = String::from_utf8_lossy(&output.stdout).into_owned();
        assert_eq!(
            said.lines().next(),
            Some("asked 1 holder to release"),
            "{said}"
        );
        assert_eq!(said.lines().count(), 2, "one line per holder asked: {said}");
        let output = finish(holder).await;
        assert_eq!(output.status.code(), Some(77), "{}", stderr(&output));
        assert!(stderr(&output).contains("revoked"), "{}", stderr(&output));
        assert_eq!(std::fs::read_to_string(&signalled).unwrap().trim(), "TERM");
        assert!(locks_json(&path).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn revoke_one_lease_by_name() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let (script, started, release, signalled) = gated_script(dir.path());
        let other = tempfile::tempdir().unwrap();
        let (script2, started2, release2, signalled2) = gated_script(other.path());
        let path = unique("revoke-lease");
        let first = Verb::Lock.spawn(&path, &["--leases", "2"], &script);
        let second = Verb::Lock.spawn(&path, &["--leases", "2"], &script2);
        wait_for_file(&started).await;
        wait_for_file(&started2).await;
        let listed = participants(&path, 2, "two leases").await;
        let name = listed[0]["name"].as_str().unwrap();
        let output = run(&["revoke", &path, "--node", name]).await;
        assert!(output.status.success(), "{}", stderr(&output));
        let said = String::from_utf8_lossy(&output.stdout).into_owned();
        assert_eq!(
            said.lines().next(),
            Some("asked 1 holder to release"),
            "{said}"
        );
        assert_eq!(said.lines().count(), 2, "one line per holder asked: {said}");
        // Exactly the named lease's holder stops.
        let left = participants(&path, 1, "one lease left").await;
        assert_eq!(left[0]["node"], listed[1]["node"]);
        let stopped = [&signalled, &signalled2]
            .iter()
            .filter(|file| file.exists())
            .count();
        assert_eq!(stopped, 1);
        std::fs::write(&release, "").unwrap();
        std::fs::write(&release2, "").unwrap();
        let codes = [
            finish(first).await.status.code(),
            finish(second).await.status.code(),
        ];
        assert!(
            codes.contains(&Some(77)) && codes.contains(&Some(0)),
            "{codes:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn namespace_and_auth_settings() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let (script, started, release, _) = gated_script(dir.path());
        let namespace = unique("ns");
        let holder = zkc(&[
            "lock",
            "--namespace",
            &namespace,
            "/inner",
            "--acl",
            "open",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .env("ZK_AUTH", "someone:secret")
        .spawn()
        .unwrap();
        wait_for_file(&started).await;
        // Seen from the root, the lock lives under the namespace.
        let listed = participants(&format!("{namespace}/inner"), 1, "the namespaced node").await;
        assert!(listed[0]["node"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{namespace}/inner/_c_")));
        let inside = run(&["locks", "--namespace", &namespace, "/inner", "--json"]).await;
        let inside: Value = serde_json::from_slice(&inside.stdout).unwrap();
        let inside = inside["participants"].as_array().unwrap();
        assert_eq!(inside.len(), 1);
        assert!(inside[0]["node"]
            .as_str()
            .unwrap()
            .starts_with("/inner/_c_"));
        std::fs::write(&release, "").unwrap();
        assert!(finish(holder).await.status.success());

        let output = zkc(&["locks", "/x"])
            .env("ZK_AUTH", "no-colon")
            .output()
            .await
            .unwrap();
        assert_eq!(output.status.code(), Some(64));
        assert!(stderr(&output).contains("ZK_AUTH"), "{}", stderr(&output));
    })
    .await;
}

/// The holder's session is expired on the server (on both backends: the
/// proxy between the tool and the server saw the session's grant, which is
/// all it takes to close it). `--session-timeout` is what the server granted.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_session_stops_the_command() {
    bounded(async {
        let proxy = FaultProxy::start(server().connect_string()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (script, started, _release, signalled) = gated_script(dir.path());
        let path = unique("expire");
        let mut args = vec!["lock", path.as_str(), "--session-timeout", "7s"];
        args.extend_from_slice(&["--", "sh", "-c", &script]);
        let holder = zkc(&args)
            .env("ZK_CONNECT", proxy.connect_string())
            .spawn()
            .unwrap();
        wait_for_file(&started).await;
        let grant = the_grant(&proxy, Verb::Lock, &path).await;
        assert_eq!(
            grant.timeout_ms, 7000,
            "--session-timeout was not asked for"
        );
        close_granted_session(&server().connect_string(), &grant, WAIT_LIMIT)
            .await
            .unwrap();
        let output = finish(holder).await;
        assert_eq!(output.status.code(), Some(76), "{}", stderr(&output));
        assert!(
            stderr(&output).contains(&Verb::Lock.lost(&path)),
            "{}",
            stderr(&output)
        );
        assert_eq!(std::fs::read_to_string(&signalled).unwrap().trim(), "TERM");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_node_stops_the_command_and_kill_after_applies() {
    bounded(a_deleted_node_stops_the_command(
        Verb::Lock,
        "deleted",
        &["--kill-after", "300ms"],
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn signals_are_passed_on_and_the_lock_released() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let (script, started, _release, signalled) = gated_script(dir.path());
        let path = unique("signal");
        let holder = Verb::Lock.spawn(&path, &[], &script);
        wait_for_file(&started).await;
        signal(&holder, "-INT");
        let output = finish(holder).await;
        // The child's trap exits 3: its status is ours.
        assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
        assert_eq!(std::fs::read_to_string(&signalled).unwrap().trim(), "INT");
        assert!(locks_json(&path).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_waiter_leaves_the_queue() {
    bounded(async {
        let held = Held::start(Verb::Lock, "interrupted").await;
        held.a_waiter_is_interrupted().await;
        held.release().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn connection_errors_are_clear_and_bounded() {
    bounded(async {
        let output = Command::new(BIN)
            .args(["locks", "/x"])
            .env_remove("ZK_CONNECT")
            .output()
            .await
            .unwrap();
        assert_eq!(output.status.code(), Some(64));
        let err = stderr(&output);
        assert!(err.contains("--zk") && err.contains("ZK_CONNECT"), "{err}");

        // A port nobody listens on: refused at once, given up at the bound.
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let began = Instant::now();
        let output = Command::new(BIN)
            .args(["locks", "/x", "--connection-timeout", "1s"])
            .env("ZK_CONNECT", format!("127.0.0.1:{port}"))
            .output()
            .await
            .unwrap();
        let took = began.elapsed();
        assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("cannot connect")
                && stderr(&output).contains("connection refused"),
            "{}",
            stderr(&output)
        );
        assert!(took < Duration::from_secs(5), "took {took:?}");

        let output = run(&["lock", "/x", "--leases", "0", "--", "true"]).await;
        assert_eq!(output.status.code(), Some(64));
        let output = run(&["lock", "/x", "true"]).await;
        assert_eq!(output.status.code(), Some(64), "a command needs `--`");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn server_serves_zookeeper_client_and_kazoo() {
    bounded(async {
        let mut server = Command::new(BIN)
            .args(["server", "--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = server.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let connect = lines.next_line().await.unwrap().unwrap();
        assert!(connect.starts_with("127.0.0.1:"), "{connect}");
        let client = zookeeper_client::Client::connect(&connect).await.unwrap();
        let created = client
            .create(
                "/served",
                b"yes",
                &zookeeper_client::CreateMode::Persistent
                    .with_acls(zookeeper_client::Acls::anyone_all()),
            )
            .await;
        assert!(created.is_ok(), "{created:?}");
        assert_eq!(client.get_data("/served").await.unwrap().0, b"yes");
        drop(client);
        kazoo_uses(&connect).await;
        signal(&server, "-INT");
        let status = tokio::time::timeout(WAIT_LIMIT, server.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn locks_watch_prints_again_on_every_change() {
    bounded(async {
        let path = unique("watch");
        let (watch, mut lines) = watch_locks(&path, None);
        let count = |line: &str| {
            let parsed: Value = serde_json::from_str(line).unwrap();
            parsed["participants"].as_array().unwrap().len()
        };
        // Nothing yet (the path does not even exist).
        let first = lines.next_line().await.unwrap().unwrap();
        assert_eq!(count(&first), 0);
        // A holder appears: a new line lists it, without being asked.
        let dir = tempfile::tempdir().unwrap();
        let release = dir.path().join("release");
        let mut holder = Verb::Lock.spawn(
            &path,
            &[],
            &format!("while [ ! -e {} ]; do sleep 0.02; done", release.display()),
        );
        let mut seen = 0;
        while seen != 1 {
            let line = tokio::time::timeout(WAIT_LIMIT, lines.next_line())
                .await
                .expect("a refresh after the holder came")
                .unwrap()
                .unwrap();
            seen = count(&line);
        }
        // It leaves: another line, empty again.
        std::fs::write(&release, b"").unwrap();
        assert!(holder.wait().await.unwrap().success());
        while seen != 0 {
            let line = tokio::time::timeout(WAIT_LIMIT, lines.next_line())
                .await
                .expect("a refresh after the holder left")
                .unwrap()
                .unwrap();
            seen = count(&line);
        }
        interrupt(watch).await;
    })
    .await;
}

/// A Python client (kazoo, Debian's `python3-kazoo`) on the served address:
/// it reads what the Rust client wrote, then takes and releases a lock.
/// Without kazoo the test fails saying so, or skips this check under `ZK_SKIP_MISSING=kazoo`.
async fn kazoo_uses(connect: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("the served-to-kazoo check")
        .to_owned();
    if !zk_curator_testing::backend::Prerequisite::Kazoo.check(&test) {
        return;
    }
    let script = r#"
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], timeout=10)
zk.start(timeout=10)
data, _ = zk.get("/served")
lock = zk.Lock("/served-lock", "kazoo")
assert lock.acquire(timeout=10)
print("data=%s lock=%d" % (data.decode(), len(lock.contenders())))
lock.release()
zk.stop()
zk.close()
"#;
    let output = tokio::time::timeout(
        WAIT_LIMIT,
        Command::new("/usr/bin/python3")
            .args(["-c", script, connect])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("kazoo timed out")
    .unwrap();
    assert!(output.status.success(), "kazoo failed: {}", stderr(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "data=yes lock=1"
    );
}

// ---------------------------------------------------------------------------
// The command's whole process tree (issue 15, item 1).
// ---------------------------------------------------------------------------

/// Whether the process `pid` has ended (gone, or a zombie that can no
/// longer run).
fn pid_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Waits until `file` holds a pid and returns it.
async fn read_pid(file: &Path) -> u32 {
    let mut pid = None;
    wait_for(&file.display().to_string(), || {
        let found = std::fs::read_to_string(file)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok());
        pid = found;
        async move { found.is_some() }
    })
    .await;
    pid.unwrap()
}

/// Files of a command whose grandchild would write `late` into `log` once
/// `release` appears, after its parent (the direct child of `lock`) is gone.
struct Tree {
    _dir: tempfile::TempDir,
    started: PathBuf,
    grandchild_pid: PathBuf,
    release: PathBuf,
    log: PathBuf,
}

impl Tree {
    fn new() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        Tree {
            started: path("started"),
            grandchild_pid: path("grandchild-pid"),
            release: path("release"),
            log: path("log"),
            _dir: dir,
        }
    }

    /// The grandchild's script; `ignore_term` makes it (and its `sleep`s)
    /// ignore SIGTERM.
    fn grandchild(&self, ignore_term: bool) -> String {
        format!(
            "{trap}echo $$ > {pid}; while [ ! -f {r} ]; do sleep 0.02; done; \
             echo \"late $(date +%s%N)\" >> {l}",
            trap = if ignore_term { "trap \"\" TERM; " } else { "" },
            pid = self.grandchild_pid.display(),
            r = self.release.display(),
            l = self.log.display(),
        )
    }

    /// The command given to `lock`: starts the grandchild in the background
    /// (its output away from `lock`'s pipes), marks its start and waits.
    fn script(&self, ignore_term: bool) -> String {
        format!(
            "sh -c '{g}' >/dev/null 2>&1 </dev/null & touch {st}; wait",
            g = self.grandchild(ignore_term),
            st = self.started.display(),
        )
    }

    async fn wait_started(&self) -> u32 {
        wait_for_file(&self.started).await;
        read_pid(&self.grandchild_pid).await
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A failed test leaves no grandchild behind: it is killed by its pid.
impl Drop for Tree {
    fn drop(&mut self) {
        let pid = std::fs::read_to_string(&self.grandchild_pid)
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok());
        if let Some(pid) = pid {
            if !pid_gone(pid as u32) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

impl Tree {
    /// After `<verb>` has exited: the grandchild is gone, and lets the next
    /// holder (`<verb> <path> -- true`) in to show it never writes.
    async fn assert_gone_and_silent(&self, grandchild: u32, verb: Verb, path: &str) {
        assert!(
            pid_gone(grandchild),
            "zk-curator exited while the grandchild {grandchild} still ran"
        );
        std::fs::write(&self.release, "").unwrap();
        let next = run(&[verb.name(), path, "--", "true"]).await;
        assert!(next.status.success(), "{}", stderr(&next));
        assert!(pid_gone(grandchild));
        assert_eq!(self.log_text(), "", "the grandchild wrote after the stop");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn revocation_stops_the_whole_process_tree() {
    bounded(async {
        let tree = Tree::new();
        let path = unique("tree-revoke");
        let holder = Verb::Lock.spawn(&path, &[], &tree.script(false));
        let grandchild = tree.wait_started().await;
        let output = run(&["revoke", &path, "--all"]).await;
        assert!(output.status.success(), "{}", stderr(&output));
        let output = finish(holder).await;
        assert_eq!(output.status.code(), Some(77), "{}", stderr(&output));
        tree.assert_gone_and_silent(grandchild, Verb::Lock, &path)
            .await;
    })
    .await;
}

/// The session of `<verb>` is expired on the server: the hold is lost, the
/// command's whole process group (a grandchild too) is stopped, the command
/// line exits 76 and leaves nothing queued.
async fn an_expired_session_stops_the_whole_process_tree(verb: Verb, name: &str) {
    let proxy = FaultProxy::start(server().connect_string()).await.unwrap();
    let tree = Tree::new();
    let path = unique(name);
    let script = tree.script(false);
    let child = zkc(&[verb.name(), &path, "--", "sh", "-c", &script])
        .env("ZK_CONNECT", proxy.connect_string())
        .spawn()
        .unwrap();
    let grandchild = tree.wait_started().await;
    let grant = the_grant(&proxy, verb, &path).await;
    close_granted_session(&server().connect_string(), &grant, WAIT_LIMIT)
        .await
        .unwrap();
    let output = finish(child).await;
    assert_eq!(output.status.code(), Some(76), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(err.contains(&verb.lost(&path)), "{err}");
    tree.assert_gone_and_silent(grandchild, verb, &path).await;
    verb.wait_listing(&path, 0, "nothing left queued").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_session_stops_the_whole_process_tree() {
    bounded(an_expired_session_stops_the_whole_process_tree(
        Verb::Lock,
        "tree-lost",
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_after_kills_a_grandchild_that_ignores_sigterm() {
    bounded(async {
        let tree = Tree::new();
        let path = unique("tree-kill");
        let holder = Verb::Lock.spawn(&path, &["--kill-after", "300ms"], &tree.script(true));
        let grandchild = tree.wait_started().await;
        let output = run(&["revoke", &path, "--all"]).await;
        assert!(output.status.success(), "{}", stderr(&output));
        let output = finish(holder).await;
        assert_eq!(output.status.code(), Some(77), "{}", stderr(&output));
        assert!(stderr(&output).contains("killing"), "{}", stderr(&output));
        tree.assert_gone_and_silent(grandchild, Verb::Lock, &path)
            .await;
    })
    .await;
}

/// A SIGTERM to `<verb>` is passed on to the command's whole group; the
/// command's status (death by that signal) is the command line's.
async fn a_signal_reaches_the_whole_process_tree(verb: Verb, path: &str) {
    let tree = Tree::new();
    let child = verb.spawn(path, &[], &tree.script(false));
    let grandchild = tree.wait_started().await;
    signal(&child, "-TERM");
    let output = finish(child).await;
    // The direct child died of the SIGTERM passed on: 128 + 15.
    assert_eq!(output.status.code(), Some(143), "{}", stderr(&output));
    tree.assert_gone_and_silent(grandchild, verb, path).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signal_to_zk_curator_reaches_the_whole_process_tree() {
    bounded(a_signal_reaches_the_whole_process_tree(
        Verb::Lock,
        &unique("tree-signal"),
    ))
    .await;
}

/// The command exits at once but leaves a process in its group: the lock
/// stays held until that process is gone too (like flock(1)).
#[tokio::test(flavor = "multi_thread")]
async fn the_hold_outlives_the_command_until_its_group_is_gone() {
    bounded(async {
        let tree = Tree::new();
        let path = unique("tree-outlive");
        let script = format!(
            "sh -c '{g}' >/dev/null 2>&1 </dev/null & touch {st}; exit 0",
            g = tree.grandchild(false),
            st = tree.started.display(),
        );
        let holder = Verb::Lock.spawn(&path, &[], &script);
        let grandchild = tree.wait_started().await;
        let waiter = Verb::Lock.spawn(
            &path,
            &[],
            &format!("echo \"waiter $(date +%s%N)\" >> {}", tree.log.display()),
        );
        // The waiter queues behind the kept hold (or, if the hold was let go,
        // runs at once: the order in the log then shows it).
        wait_for("the waiter queued or ran", || async {
            tree.log_text().contains("waiter") || locks_json(&path).await.len() == 2
        })
        .await;
        std::fs::write(&tree.release, "").unwrap();
        let output = finish(holder).await;
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        assert!(pid_gone(grandchild), "`lock` exited before its group");
        assert!(finish(waiter).await.status.success());
        let log = tree.log_text();
        let order: Vec<&str> = log.lines().filter_map(|l| l.split(' ').next()).collect();
        assert_eq!(order, ["late", "waiter"], "the holds overlapped:\n{log}");
    })
    .await;
}

// ---------------------------------------------------------------------------
// zk-curator killed outright (SIGKILL, the OOM killer, a crash): its
// command's group must not outlive it (issue 22, part 6).
// ---------------------------------------------------------------------------

/// Reads the nanosecond timestamps, one a line, that a command wrote.
fn timestamps(file: &Path) -> Vec<u128> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// Processes known by the files holding their pids, killed through those
/// pids when a test ends (a failed test leaves nothing running).
struct PidFiles(Vec<PathBuf>);

impl Drop for PidFiles {
    fn drop(&mut self) {
        for file in &self.0 {
            let pid = std::fs::read_to_string(file)
                .ok()
                .and_then(|text| text.trim().parse::<i32>().ok());
            if let Some(pid) = pid.filter(|pid| *pid > 1) {
                if !pid_gone(pid as u32) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
    }
}

/// `zk-curator <verb> <path> --session-timeout 4s` runs a shell whose
/// grandchild appends timestamps to a file; zk-curator is killed with
/// SIGKILL. The shell and the grandchild must be gone within a second (long
/// before the session expires), and the next `zk-curator <verb>` on the
/// path, which runs once the session has expired, must find no timestamp of
/// the first command after its own first one.
async fn a_killed_zk_curator_leaves_no_command_behind(verb: &str, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| dir.path().join(name);
    let (shell_pid, grandchild_pid) = (file("shell-pid"), file("grandchild-pid"));
    let (first_marks, second_marks) = (file("first"), file("second"));
    let _cleanup = PidFiles(vec![shell_pid.clone(), grandchild_pid.clone()]);
    let path = unique(name);
    // At most 400 lines, 50ms apart: bounded even if nothing stops it.
    let writer = format!(
        "echo $$ > {g}; i=0; while [ $i -lt 400 ]; do date +%s%N >> {m}; i=$((i+1)); \
         sleep 0.05; done",
        g = grandchild_pid.display(),
        m = first_marks.display(),
    );
    let script = format!(
        "echo $$ > {s}; sh -c '{writer}' >/dev/null 2>&1 </dev/null & wait",
        s = shell_pid.display(),
    );
    let mut first = zkc(&[
        verb,
        &path,
        "--session-timeout",
        "4s",
        "--",
        "sh",
        "-c",
        &script,
    ])
    .spawn()
    .unwrap();
    let shell = read_pid(&shell_pid).await;
    let grandchild = read_pid(&grandchild_pid).await;
    wait_for("the first command's marks", || async {
        timestamps(&first_marks).len() >= 2
    })
    .await;

    // SIGKILL, through zk-curator's own pid.
    first.start_kill().unwrap();
    let killed = Instant::now();
    first.wait().await.unwrap();
    let mut gone_after = None;
    for _ in 0..100 {
        if pid_gone(shell) && pid_gone(grandchild) {
            gone_after = Some(killed.elapsed());
            break;
        }
        if killed.elapsed() > Duration::from_secs(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let alive = format!(
        "shell {shell} {}, grandchild {grandchild} {}",
        if pid_gone(shell) { "gone" } else { "running" },
        if pid_gone(grandchild) {
            "gone"
        } else {
            "running"
        },
    );

    // The next participant gets in once the first session has expired.
    let next = format!(
        "i=0; while [ $i -lt 5 ]; do date +%s%N >> {m}; i=$((i+1)); sleep 0.05; done",
        m = second_marks.display(),
    );
    let output = run(&[verb, &path, "--", "sh", "-c", &next]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    let first_last = timestamps(&first_marks).into_iter().max().unwrap();
    let second_first = timestamps(&second_marks).into_iter().min().unwrap();
    let overlap_ms = (first_last as i128 - second_first as i128) / 1_000_000;

    assert!(
        gone_after.is_some(),
        "1s after zk-curator was killed, its command's group still ran ({alive}); \
         the first command wrote {overlap_ms}ms past the second one's start"
    );
    assert!(
        first_last < second_first,
        "the first command wrote {overlap_ms}ms past the second one's start"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_lock_takes_its_command_group_with_it() {
    bounded(a_killed_zk_curator_leaves_no_command_behind(
        "lock",
        "kill9-lock",
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_elect_takes_its_command_group_with_it() {
    bounded(a_killed_zk_curator_leaves_no_command_behind(
        "elect",
        "kill9-elect",
    ))
    .await;
}

/// Starts `zk-curator <verb> <path> [options]` whose shell's grandchild
/// appends a timestamp to `marks` every 50 ms (at most 400 times), with the
/// shell's and the grandchild's pids in `pids`'s two files.
fn marking_run(
    verb: Verb,
    path: &str,
    options: &[&str],
    marks: &Path,
    pids: &[PathBuf; 2],
) -> Child {
    let writer = format!(
        "echo $$ > {g}; i=0; while [ $i -lt 400 ]; do date +%s%N >> {m}; i=$((i+1)); \
         sleep 0.05; done",
        g = pids[1].display(),
        m = marks.display(),
    );
    let script = format!(
        "echo $$ > {s}; sh -c '{writer}' >/dev/null 2>&1 </dev/null & wait",
        s = pids[0].display(),
    );
    let mut args = vec![verb.name(), path];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    // A process group of its own, whose parent (this test) is in another
    // group of the same session: never an orphaned group, in which the
    // kernel would discard a SIGTSTP (as it may be when the tests run
    // without job control, e.g. in the background).
    zkc(&args).process_group(0).spawn().unwrap()
}

/// `zk-curator <verb> --session-timeout 4s` runs a command whose grandchild
/// writes timestamps, with a second participant queued behind it; then
/// zk-curator is stopped (`stop`: SIGSTOP, as `kill -STOP` or a debugger
/// does, or SIGTSTP, which stops a process outside a terminal too) for
/// twice the session timeout, so its session expires and the second
/// participant runs. The first command's whole group must be gone before
/// the second one's first timestamp, and within the lease (2/5 of the
/// session timeout) and a second of the stop; continued, the first
/// zk-curator exits 76.
async fn a_stopped_zk_curator_leaves_no_command_running(verb: Verb, name: &str, stop: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| dir.path().join(name);
    let pids = [file("shell-pid"), file("grandchild-pid")];
    let (first_marks, second_marks) = (file("first"), file("second"));
    let _cleanup = PidFiles(pids.to_vec());
    let path = unique(name);
    let mut first = marking_run(
        verb,
        &path,
        &["--session-timeout", "4s"],
        &first_marks,
        &pids,
    );
    let (shell, grandchild) = (read_pid(&pids[0]).await, read_pid(&pids[1]).await);
    wait_for("the first command's marks", || async {
        timestamps(&first_marks).len() >= 2
    })
    .await;
    let next = format!(
        "i=0; while [ $i -lt 5 ]; do date +%s%N >> {m}; i=$((i+1)); sleep 0.05; done",
        m = second_marks.display(),
    );
    let second = verb.spawn(&path, &[], &next);
    verb.wait_listing(&path, 2, "the second participant").await;

    signal(&first, stop);
    let stopped = Instant::now();
    let mut gone_after = None;
    while stopped.elapsed() < Duration::from_secs(8) {
        if gone_after.is_none() && pid_gone(shell) && pid_gone(grandchild) {
            gone_after = Some(stopped.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = finish(second).await;
    signal(&first, "-CONT");
    let first_output = tokio::time::timeout(WAIT_LIMIT, async {
        let status = first.wait().await.unwrap();
        let mut err = String::new();
        tokio::io::AsyncReadExt::read_to_string(first.stderr.as_mut().unwrap(), &mut err)
            .await
            .unwrap();
        (status, err)
    })
    .await
    .expect("the continued zk-curator did not exit");

    assert!(second.status.success(), "second: {}", stderr(&second));
    let first_last = timestamps(&first_marks).into_iter().max().unwrap();
    let second_first = timestamps(&second_marks).into_iter().min().unwrap();
    let overlap_ms = (first_last as i128 - second_first as i128) / 1_000_000;
    assert!(
        first_last < second_first,
        "the stopped zk-curator's command wrote {overlap_ms}ms past the second one's start \
         (its group {})",
        match gone_after {
            Some(after) => format!("ended {after:?} after the stop"),
            None => "still ran 8s after the stop".into(),
        }
    );
    let gone_after = gone_after.expect("the group outlived the stop");
    eprintln!(
        "{verb:?} {stop}: the group ended {gone_after:?} after the stop; overlap {overlap_ms}ms"
    );
    assert!(
        gone_after < Duration::from_millis(1600 + 1000),
        "the group ended {gone_after:?} after the stop, past the 1.6s lease"
    );
    assert_eq!(first_output.0.code(), Some(76), "first: {}", first_output.1);
    assert!(
        first_output
            .1
            .contains("killed the command's process group"),
        "first: {}",
        first_output.1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_lock_leaves_no_command_running() {
    bounded(a_stopped_zk_curator_leaves_no_command_running(
        Verb::Lock,
        "stop-lock",
        "-STOP",
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_stopped_by_sigtstp_leaves_no_command_running() {
    bounded(a_stopped_zk_curator_leaves_no_command_running(
        Verb::Lock,
        "tstp-lock",
        "-TSTP",
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_elect_leaves_no_command_running() {
    bounded(a_stopped_zk_curator_leaves_no_command_running(
        Verb::Elect,
        "stop-elect",
        "-STOP",
    ))
    .await;
}

/// A stop well inside the lease (1s, with a 10s session: a 4s lease)
/// changes nothing: the command runs on, and its status is zk-curator's.
async fn a_short_stop_changes_nothing(verb: Verb, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (gated, started, release, signalled) = gated_script(dir.path());
    let path = unique(name);
    let mut running = verb.spawn(&path, &["--session-timeout", "10s"], &gated);
    wait_for_file(&started).await;
    signal(&running, "-STOP");
    tokio::time::sleep(Duration::from_secs(1)).await;
    signal(&running, "-CONT");
    // Well past the lease: a guard that fired would have done it by now.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        running.try_wait().unwrap().is_none(),
        "zk-curator ended after a short stop"
    );
    std::fs::write(&release, "").unwrap();
    let output = finish(running).await;
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(!signalled.exists(), "the command was signalled");
    assert!(stderr(&output).is_empty(), "{}", stderr(&output));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_short_stop_of_lock_changes_nothing() {
    bounded(a_short_stop_changes_nothing(Verb::Lock, "short-stop-lock")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_short_stop_of_elect_changes_nothing() {
    bounded(a_short_stop_changes_nothing(
        Verb::Elect,
        "short-stop-elect",
    ))
    .await;
}

// ---------------------------------------------------------------------------
// The command line's edges (issue 15, item 8).
// ---------------------------------------------------------------------------

/// Runs `zk-curator args` (with `ZK_AUTH` set to `auth` if given) against a
/// listener that would record any connection attempt, and returns the output
/// and how long it took.
async fn run_without_server(args: &[&str], auth: Option<&str>) -> (Output, Duration, bool) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let mut command = zkc(args);
    command
        .env("ZK_CONNECT", listener.local_addr().unwrap().to_string())
        .env("ZK_CURATOR_TEST_UNUSED", "");
    if let Some(auth) = auth {
        command.env("ZK_AUTH", auth);
    }
    let began = Instant::now();
    let output = tokio::time::timeout(WAIT_LIMIT, command.output())
        .await
        .expect("zk-curator did not exit")
        .unwrap();
    let took = began.elapsed();
    let connected = listener.accept().is_ok();
    (output, took, connected)
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_errors_exit_64_before_any_connection() {
    bounded(async {
        let cases: &[(&[&str], Option<&str>)] = &[
            (&["locks", "x"], None),
            (&["locks", "/a//b"], None),
            (&["locks", "/zookeeper/quota"], None),
            (&["revoke", "x", "--all"], None),
            (&["revoke", "/x/", "--node", "n"], None),
            (&["lock", "x", "--", "true"], None),
            (&["locks", "/x", "--zk", "not a host"], None),
            (&["locks", "/x", "--zk", "127.0.0.1:notaport"], None),
            (&["locks", "/x", "--zk", "127.0.0.1:0"], None),
            (&["locks", "/x", "--zk", "127.0.0.1:2181,"], None),
            (&["locks", "/x", "--zk", ""], None),
            (&["lock", "/x", "--zk", "[::1", "--", "true"], None),
            (&["locks", "/x"], Some(":")),
            (&["locks", "/x"], Some("user:")),
            (&["revoke", "/x", "--all"], Some(":pw")),
            (&["elect", "x", "--", "true"], None),
            (&["elect", "/a//b", "--", "true"], None),
            (&["elect", "/x", "--id", "", "--", "true"], None),
            (&["elect", "/x", "--id", "two\nlines", "--", "true"], None),
            (&["elect", "/x", "--id", "a"], None),
            (&["elect", "/x", "--timeout", "soon", "--", "true"], None),
            (&["elect", "/x", "--zk", "[::1", "--", "true"], None),
            (&["elect", "/x", "--", "true"], Some("user:")),
            (&["leader", "x"], None),
            (&["leader", "/zookeeper/quota", "--json"], None),
            (&["leader", "/x", "--zk", "127.0.0.1:0"], None),
        ];
        for (args, auth) in cases {
            let mut args = args.to_vec();
            // Were a connection tried, it would take this long to give up.
            let at = args.iter().position(|a| *a == "--").unwrap_or(args.len());
            args.splice(at..at, ["--connection-timeout", "10s"]);
            let (output, took, connected) = run_without_server(&args, *auth).await;
            let what = format!("{args:?} with ZK_AUTH={auth:?}");
            assert_eq!(
                output.status.code(),
                Some(64),
                "{what}: {}",
                stderr(&output)
            );
            assert!(!connected, "{what}: a connection was tried");
            assert!(took < Duration::from_secs(3), "{what}: took {took:?}");
            let err = stderr(&output);
            assert!(
                err.lines().count() >= 1 && !err.contains("panicked"),
                "{what}: {err}"
            );
        }
        // A well-formed setting is still taken: hostnames, IPv6, no port.
        for hosts in ["localhost:1", "[::1]:1", "zk-1.example:2181,127.0.0.1"] {
            let args = [
                "locks",
                "/x",
                "--zk",
                hosts,
                "--connection-timeout",
                "200ms",
            ];
            let (output, _, _) = run_without_server(&args, Some("user:pw")).await;
            assert_eq!(
                output.status.code(),
                Some(69),
                "{hosts}: {}",
                stderr(&output)
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn server_takes_only_its_own_options() {
    bounded(async {
        let help = run(&["server", "--help"]).await;
        assert!(help.status.success());
        let text = String::from_utf8_lossy(&help.stdout).into_owned();
        assert!(text.contains("--port"), "{text}");
        for client_only in ["--zk", "--namespace", "--session-timeout", "76", "77", "75"] {
            assert!(!text.contains(client_only), "{client_only} in:\n{text}");
        }
        let help = run(&["lock", "--help"]).await;
        let text = String::from_utf8_lossy(&help.stdout).into_owned();
        assert!(text.contains("--zk") && text.contains("76"), "{text}");
        assert!(text.contains("process group"), "{text}");
        for args in [
            &["server", "--port", "0", "--zk", "127.0.0.1:2181"][..],
            &["server", "--port", "0", "--namespace", "/x"],
        ] {
            let output = tokio::time::timeout(WAIT_LIMIT, zkc(args).output())
                .await
                .expect("`server` accepted a client option and kept serving")
                .unwrap();
            assert_eq!(
                output.status.code(),
                Some(64),
                "{args:?}: {}",
                stderr(&output)
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn revoke_refuses_a_node_that_is_not_a_participant() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let (script, started, release, signalled) = gated_script(dir.path());
        let path = unique("revoke-bogus");
        let holder = Verb::Lock.spawn(&path, &[], &script);
        wait_for_file(&started).await;
        let node = Verb::Lock.holder(&path).await["node"]
            .as_str()
            .unwrap()
            .to_owned();
        for bogus in ["bogus", "/somewhere/else", &format!("{node}x")] {
            let output = run(&["revoke", &path, "--node", bogus]).await;
            assert_eq!(
                output.status.code(),
                Some(66),
                "{bogus}: {}",
                stderr(&output)
            );
            let err = stderr(&output);
            assert!(
                err.contains(bogus) && err.contains("not a participant"),
                "{err}"
            );
            assert_eq!(String::from_utf8_lossy(&output.stdout), "");
        }
        // The holder was left alone; its full path is taken.
        assert!(!signalled.exists());
        let output = run(&["revoke", &path, "--node", &node]).await;
        assert!(output.status.success(), "{}", stderr(&output));
        assert_eq!(finish(holder).await.status.code(), Some(77));
        std::fs::write(&release, "").unwrap();
        // No participants at all: refused too.
        let output = run(&["revoke", &path, "--node", "bogus"]).await;
        assert_eq!(output.status.code(), Some(66), "{}", stderr(&output));
    })
    .await;
}

/// The server goes away under a running `lock`: the hold is lost, the
/// command stopped, and `lock` exits promptly after it (it used to wait 5 s
/// in `close()` for a server that was not there).
#[tokio::test(flavor = "multi_thread")]
async fn lock_exits_promptly_when_the_server_is_gone() {
    bounded(async {
        let proxy = FaultProxy::start(server().connect_string()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (script, started, _release, signalled) = gated_script(dir.path());
        let path = unique("server-gone");
        let mut holder = zkc(&["lock", &path, "--", "sh", "-c", &script])
            .env("ZK_CONNECT", proxy.connect_string())
            .spawn()
            .unwrap();
        wait_for_file(&started).await;
        // No listener, every connection closed: as if the server died.
        drop(proxy);
        wait_for_file(&signalled).await;
        let stopped = Instant::now();
        let status = tokio::time::timeout(WAIT_LIMIT, holder.wait())
            .await
            .expect("zk-curator did not exit")
            .unwrap();
        let took = stopped.elapsed();
        assert_eq!(status.code(), Some(76));
        assert!(
            took < Duration::from_secs(3),
            "`lock` exited {took:?} after its command"
        );
    })
    .await;
}

/// Reads the next line of `lines`, at most [`WAIT_LIMIT`].
async fn next_json<R: tokio::io::AsyncBufRead + Unpin>(
    lines: &mut tokio::io::Lines<R>,
    what: &str,
) -> Value {
    let line = tokio::time::timeout(WAIT_LIMIT, lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("no line: {what}"))
        .unwrap()
        .unwrap_or_else(|| panic!("output ended: {what}"));
    serde_json::from_str(&line).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn locks_watch_reports_a_lost_connection_and_the_reconnection() {
    bounded(async {
        let proxy = FaultProxy::start(server().connect_string()).await.unwrap();
        let path = unique("watch-lost");
        let (watch, mut lines) = watch_locks(&path, Some(&proxy));
        let first = next_json(&mut lines, "the first listing").await;
        assert_eq!(first["participants"].as_array().unwrap().len(), 0);
        // The connection breaks and new ones hang: reported at once.
        proxy.set_paused(true);
        proxy.drop_connections();
        let broke = Instant::now();
        let event = next_json(&mut lines, "the lost connection").await;
        assert!(
            broke.elapsed() < Duration::from_secs(3),
            "reported after {:?}",
            broke.elapsed()
        );
        assert_eq!(event["event"], "disconnected", "{event}");
        assert_eq!(event["path"], path.as_str(), "{event}");
        // Back: the reconnection is reported and the lock listed again.
        proxy.set_paused(false);
        let event = next_json(&mut lines, "the reconnection").await;
        assert_eq!(event["event"], "reconnected", "{event}");
        let again = next_json(&mut lines, "a listing after reconnecting").await;
        assert_eq!(
            again["participants"].as_array().unwrap().len(),
            0,
            "{again}"
        );
        interrupt(watch).await;
    })
    .await;
}

/// `locks --watch` syncs once at the start of each session (issue 32): a
/// listing on a new session, perhaps on a server further behind, is never
/// older than one already printed; the listings after a change on the same
/// session are as of the server (ZooKeeper keeps a session's reads in
/// order), with no sync of their own.
#[tokio::test(flavor = "multi_thread")]
async fn locks_watch_syncs_once_per_session() {
    use zk_curator_testing::proxy::opcode::SYNC;
    let syncs = |proxy: &FaultProxy| {
        request_opcodes(proxy)
            .iter()
            .filter(|&&op| op == SYNC)
            .count()
    };
    bounded(async {
        let proxy = FaultProxy::start(server().connect_string()).await.unwrap();
        let path = unique("watch-sync");
        let (watch, mut lines) = watch_locks(&path, Some(&proxy));
        next_json(&mut lines, "the first listing").await;
        assert_eq!(syncs(&proxy), 1, "the first listing is synced");
        // A change on the same session: listed again, without a sync.
        let output = run(&["lock", &path, "--", "true"]).await;
        assert!(output.status.success(), "{}", stderr(&output));
        let listed = next_json(&mut lines, "a listing after the change").await;
        assert!(listed["participants"].is_array(), "{listed}");
        assert_eq!(syncs(&proxy), 1, "no sync on the same session");
        // The session ends: the first listing on the next one is synced.
        let grants = proxy.granted_sessions();
        assert_eq!(grants.len(), 1, "{grants:?}");
        close_granted_session(&server().connect_string(), &grants[0], WAIT_LIMIT)
            .await
            .unwrap();
        let deadline = Instant::now() + WAIT_LIMIT;
        while proxy.granted_sessions().len() < 2 || syncs(&proxy) < 2 {
            assert!(
                Instant::now() < deadline,
                "no synced listing on the new session"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(syncs(&proxy), 2);
        interrupt(watch).await;
    })
    .await;
}

/// A lock of another kind than the participants on its path (which would
/// not see it, nor it them) is refused at once, exit 78, naming what is
/// there and leaving nothing; it used to run beside them after a warning.
#[tokio::test(flavor = "multi_thread")]
async fn lock_refuses_a_path_held_by_another_kind() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let (script, started, release, _) = gated_script(dir.path());
        let path = unique("kinds");
        let reader = Verb::Lock.spawn(&path, &["--read"], &script);
        wait_for_file(&started).await;
        let nodes = || async {
            let listed = locks_json(&path).await;
            listed.iter().map(|p| p["node"].clone()).collect::<Vec<_>>()
        };
        let before = nodes().await;
        for options in [&[][..], &["--leases", "1"][..]] {
            let mut args = vec!["lock", path.as_str()];
            args.extend_from_slice(options);
            args.extend_from_slice(&["--", "true"]);
            let output = run(&args).await;
            assert_eq!(
                output.status.code(),
                Some(78),
                "{options:?}: {}",
                stderr(&output)
            );
            assert!(
                stderr(&output).contains("read-write lock"),
                "{}",
                stderr(&output)
            );
            assert_eq!(nodes().await, before, "{options:?} left a node");
        }
        // The same kind waits its turn (then gives up).
        let output = run(&["lock", &path, "--write", "--timeout", "200ms", "--", "true"]).await;
        assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
        std::fs::write(&release, "").unwrap();
        assert!(finish(reader).await.status.success());
    })
    .await;
}

/// The command ends while the server answers nothing (replies held): the
/// release cannot be confirmed, and `lock` does not wait for the session's
/// end to find out (it used to take the connection's read timeout plus the
/// session timeout).
#[tokio::test(flavor = "multi_thread")]
async fn lock_exits_promptly_when_the_release_goes_unanswered() {
    bounded(async {
        let proxy = FaultProxy::start(server().connect_string()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let started = dir.path().join("started");
        let release = dir.path().join("release");
        let ended = dir.path().join("ended");
        let script = format!(
            "touch {st}; while [ ! -f {r} ]; do sleep 0.02; done; touch {e}; exit 5",
            st = started.display(),
            r = release.display(),
            e = ended.display(),
        );
        let mut holder = zkc(&["lock", &unique("unanswered"), "--", "sh", "-c", &script])
            .env("ZK_CONNECT", proxy.connect_string())
            .spawn()
            .unwrap();
        wait_for_file(&started).await;
        proxy.hold_replies(true);
        std::fs::write(&release, "").unwrap();
        wait_for_file(&ended).await;
        let ended_at = Instant::now();
        let status = tokio::time::timeout(WAIT_LIMIT, holder.wait())
            .await
            .expect("zk-curator did not exit")
            .unwrap();
        let took = ended_at.elapsed();
        assert_eq!(status.code(), Some(5), "the command's status");
        assert!(
            took < Duration::from_secs(5),
            "`lock` exited {took:?} after its command"
        );
        proxy.hold_replies(false);
    })
    .await;
}

// ---------------------------------------------------------------------------
// Leader election: `elect` and `leader` (issue 18, item 4).
// ---------------------------------------------------------------------------

/// One elector's files: its command logs its start (with the fencing token
/// and node it was given) and its end into a shared log, marks its start,
/// and waits for its release file.
struct Elector {
    id: &'static str,
    started: PathBuf,
    release: PathBuf,
}

impl Elector {
    fn new(dir: &Path, id: &'static str) -> Elector {
        Elector {
            id,
            started: dir.join(format!("started-{id}")),
            release: dir.join(format!("release-{id}")),
        }
    }

    fn script(&self, log: &Path) -> String {
        format!(
            "echo \"start {id} $ZK_CURATOR_FENCING_TOKEN $ZK_CURATOR_LOCK_NODE\" >> {l}; \
             touch {st}; while [ ! -f {r} ]; do sleep 0.02; done; echo \"end {id}\" >> {l}",
            id = self.id,
            l = log.display(),
            st = self.started.display(),
            r = self.release.display(),
        )
    }
}

/// Two electors on one path: one runs its command, the other waits (and
/// `leader` shows both, text and JSON); the second runs once the first's
/// command has exited, with a greater fencing token; the commands never
/// overlap.
#[tokio::test(flavor = "multi_thread")]
async fn electors_take_turns_and_leader_lists_them() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let path = unique("elect-turns");
        let electors_ = [Elector::new(dir.path(), "a"), Elector::new(dir.path(), "b")];
        let mut runs: Vec<Child> = electors_
            .iter()
            .map(|e| Verb::Elect.spawn(&path, &["--id", e.id], &e.script(&log)))
            .collect();
        // Whoever leads first starts its command; the other is queued.
        let mut first = None;
        wait_for("a leader's command", || {
            let found = electors_.iter().position(|e| e.started.exists());
            first = found;
            async move { found.is_some() }
        })
        .await;
        let first = first.unwrap();
        let second = 1 - first;
        let listed = Verb::Elect
            .wait_listing(&path, 2, "both electors queued")
            .await;

        // `leader --json`: the leader first, with its id and node.
        let participants = listed["participants"].as_array().unwrap();
        assert_eq!(listed["path"], path.as_str(), "{listed}");
        assert_eq!(listed["recipe"], "latch", "{listed}");
        assert_eq!(listed["leader"], participants[0], "{listed}");
        let roles: Vec<&str> = participants
            .iter()
            .map(|p| p["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["leader", "waiter"], "{listed}");
        let ids: Vec<&str> = participants
            .iter()
            .map(|p| p["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, [electors_[first].id, electors_[second].id], "{listed}");
        for p in participants {
            assert_eq!(p["identity"], Value::Null, "{listed}");
            let node = p["node"].as_str().unwrap();
            assert!(node.starts_with(&format!("{path}/_c_")), "{listed}");
            assert!(node.contains("-latch-"), "{listed}");
            assert!(node.ends_with(p["name"].as_str().unwrap()), "{listed}");
        }
        let leader_node = participants[0]["node"].as_str().unwrap().to_owned();
        let tokens_listed: Vec<i64> = participants
            .iter()
            .map(|p| p["token"].as_i64().unwrap())
            .collect();
        assert!(
            tokens_listed[0] > 0 && tokens_listed[1] > tokens_listed[0],
            "{listed}"
        );

        // The table: the leader's line, then one row per participant in order.
        let output = run(&["leader", &path]).await;
        assert!(output.status.success(), "{}", stderr(&output));
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[0].starts_with(&format!(
                "leader: {}, node {leader_node}",
                electors_[first].id
            )),
            "{text}"
        );
        assert!(
            lines[1].starts_with("ROLE") && lines[1].contains("NODE"),
            "{text}"
        );
        for (line, (role, p)) in lines[2..].iter().zip(roles.iter().zip(participants)) {
            let cells: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(cells[0], *role, "{text}");
            assert_eq!(cells[1], p["id"].as_str().unwrap(), "{text}");
            assert_eq!(cells[2], p["token"].to_string(), "{text}");
            assert_eq!(cells.last(), Some(&p["name"].as_str().unwrap()), "{text}");
        }

        // The first's command ends: leadership passes, and the second runs.
        std::fs::write(&electors_[first].release, "").unwrap();
        wait_for_file(&electors_[second].started).await;
        std::fs::write(&electors_[second].release, "").unwrap();
        for run in runs.drain(..) {
            let output = finish(run).await;
            assert!(output.status.success(), "{}", stderr(&output));
        }
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
        let order: Vec<(&str, &str)> = lines.iter().map(|l| (l[0], l[1])).collect();
        let (a, b) = (electors_[first].id, electors_[second].id);
        assert_eq!(
            order,
            [("start", a), ("end", a), ("start", b), ("end", b)],
            "the commands overlapped:\n{text}"
        );
        // The child saw its term's token and node (the token `leader`
        // showed); the next term's token is greater.
        assert_eq!(lines[0][3], leader_node, "{text}");
        assert_eq!(lines[0][2], tokens_listed[0].to_string(), "{text}");
        let tokens: Vec<i64> = [&lines[0], &lines[2]]
            .iter()
            .map(|l| l[2].parse().unwrap())
            .collect();
        assert!(tokens[0] > 0 && tokens[1] > tokens[0], "{text}");
        assert!(lines[2][3].starts_with(&format!("{path}/_c_")), "{text}");

        // Both gone: no leader.
        let listed = Verb::Elect.listing(&path).await;
        assert_eq!(listed["leader"], Value::Null, "{listed}");
        assert_eq!(listed["participants"], Value::Array(vec![]), "{listed}");
    })
    .await;
}

/// `leader --watch --json`: a line for the leader now, a new line each time
/// leadership passes (the next leader's id and a greater token, the one its
/// command was given), a line when nobody is left, and exit 0 on SIGINT.
#[tokio::test(flavor = "multi_thread")]
async fn leader_watch_prints_a_line_when_leadership_changes() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let path = unique("leader-watch");
        let (a, b) = (Elector::new(dir.path(), "a"), Elector::new(dir.path(), "b"));
        let run_a = Verb::Elect.spawn(&path, &["--id", a.id], &a.script(&log));
        wait_for_file(&a.started).await;
        let run_b = Verb::Elect.spawn(&path, &["--id", b.id], &b.script(&log));
        Verb::Elect
            .wait_listing(&path, 2, "both electors queued")
            .await;

        let mut watch = zkc(&["leader", &path, "--watch", "--json"])
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
        let first = next_json(&mut lines, "the leader now").await;
        assert_eq!(first["path"], path.as_str(), "{first}");
        assert_eq!(first["state"], "leader", "{first}");
        assert_eq!(first["recipe"], "latch", "{first}");
        assert_eq!(first["leader"]["id"], "a", "{first}");
        let node_a = first["leader"]["node"].as_str().unwrap().to_owned();
        assert!(node_a.starts_with(&format!("{path}/_c_")), "{first}");
        let token_a = first["leader"]["token"].as_i64().unwrap();

        // A's command ends: A leaves, B leads, and a line says so.
        std::fs::write(&a.release, "").unwrap();
        let next = next_json(&mut lines, "the next leader").await;
        assert_eq!(next["state"], "leader", "{next}");
        assert_eq!(next["leader"]["id"], "b", "{next}");
        let token_b = next["leader"]["token"].as_i64().unwrap();
        assert!(token_b > token_a, "{first} then {next}");
        wait_for_file(&b.started).await;
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("start b {token_b} "))),
            "B's command got the token shown: {text}"
        );

        std::fs::write(&b.release, "").unwrap();
        let none = next_json(&mut lines, "nobody left").await;
        assert_eq!(none["state"], "none", "{none}");
        assert_eq!(none["leader"], Value::Null, "{none}");
        for run in [run_a, run_b] {
            let output = finish(run).await;
            assert!(output.status.success(), "{}", stderr(&output));
        }

        let pid = watch.id().unwrap().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        let status = tokio::time::timeout(WAIT_LIMIT, watch.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "{status:?}");
    })
    .await;
}

/// An empty or missing path has no leader (exit 0, as `locks` lists an
/// empty lock); a selector's layout (a mutex's `lock-` nodes) is read too,
/// with the holder identity of a participant that gave no id.
#[tokio::test(flavor = "multi_thread")]
async fn leader_without_participants_and_of_a_selector_layout() {
    bounded(async {
        let path = unique("leader-none");
        let output = run(&["leader", &path]).await;
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            format!("no leader: {path} has no participants")
        );
        let listed = Verb::Elect.listing(&path).await;
        assert_eq!(
            listed,
            serde_json::json!({"path": path, "recipe": null, "leader": null, "participants": []})
        );

        // A mutex queue is a leader selector's election.
        let dir = tempfile::tempdir().unwrap();
        let (script, started, release, _) = gated_script(dir.path());
        let holder = Verb::Lock.spawn(&path, &["--id", "sel"], &script);
        wait_for_file(&started).await;
        let listed = Verb::Elect.listing(&path).await;
        assert_eq!(listed["recipe"], "selector", "{listed}");
        let leader = &listed["leader"];
        assert_eq!(leader["id"], Value::Null, "{listed}");
        assert_eq!(leader["identity"]["label"], "sel", "{listed}");
        assert_eq!(
            leader["identity"]["pid"],
            Value::from(holder.id().unwrap()),
            "{listed}"
        );
        let output = run(&["leader", &path]).await;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(text.starts_with("leader: sel ("), "{text}");
        std::fs::write(&release, "").unwrap();
        assert!(finish(holder).await.status.success());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_leader_session_stops_the_whole_process_tree() {
    bounded(an_expired_session_stops_the_whole_process_tree(
        Verb::Elect,
        "elect-expired",
    ))
    .await;
}

/// As for `lock`, with an id.
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_leader_node_stops_the_command_and_kill_after_applies() {
    bounded(a_deleted_node_stops_the_command(
        Verb::Elect,
        "elect-deleted",
        &["--id", "doomed", "--kill-after", "300ms"],
    ))
    .await;
}

/// While another leads: `--timeout` gives 75, an interrupt 130, and neither
/// run leaves a node behind or ran its command.
#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_elector_gives_up_on_timeout_or_signal_and_leaves() {
    bounded(async {
        let held = Held::start(Verb::Elect, "elect-waiting").await;
        held.a_waiter_times_out().await;
        held.a_waiter_is_interrupted().await;
        held.release().await;
    })
    .await;
}

/// The exit codes and environment of `elect` follow `lock`: the command's
/// status is passed through, a command that does not exist is 127, and a
/// signal to `elect` reaches the command's whole group.
#[tokio::test(flavor = "multi_thread")]
async fn elect_passes_status_and_signals_through_as_lock_does() {
    bounded(async {
        let path = unique("elect-status");
        the_status_passes_through(Verb::Elect, &path).await;
        a_signal_reaches_the_whole_process_tree(Verb::Elect, &path).await;
    })
    .await;
}

/// `elect --value`: the leader proclaims its value before its command runs;
/// `leader` (table and JSON) and `leader --watch --json` show it, the id
/// staying the node's data; when leadership passes to an elector without a
/// value, the old value is not shown as the new leader's.
#[tokio::test(flavor = "multi_thread")]
async fn elect_value_is_proclaimed_and_leader_shows_it() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let path = unique("elect-value");
        let (a, b) = (Elector::new(dir.path(), "a"), Elector::new(dir.path(), "b"));
        let run_a = Verb::Elect.spawn(
            &path,
            &["--id", a.id, "--value", "10.0.0.7:8080"],
            &a.script(&log),
        );
        wait_for_file(&a.started).await;

        // The value is out before the command runs.
        let listed = Verb::Elect.listing(&path).await;
        assert_eq!(listed["leader"]["id"], "a", "{listed}");
        assert_eq!(listed["leader"]["value"], "10.0.0.7:8080", "{listed}");
        let output = run(&["leader", &path]).await;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            text.lines()
                .next()
                .unwrap()
                .ends_with(", value 10.0.0.7:8080"),
            "{text}"
        );

        let mut watch = zkc(&["leader", &path, "--watch", "--json"])
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
        let first = next_json(&mut lines, "the leader now").await;
        assert_eq!(first["leader"]["id"], "a", "{first}");
        assert_eq!(first["leader"]["value"], "10.0.0.7:8080", "{first}");

        // B, without a value, leads next: no value shown for it.
        let run_b = Verb::Elect.spawn(&path, &["--id", b.id], &b.script(&log));
        Verb::Elect.wait_listing(&path, 2, "both queued").await;
        std::fs::write(&a.release, "").unwrap();
        let next = next_json(&mut lines, "the next leader").await;
        assert_eq!(next["leader"]["id"], "b", "{next}");
        assert_eq!(next["leader"]["value"], Value::Null, "{next}");
        wait_for_file(&b.started).await;
        let listed = Verb::Elect.listing(&path).await;
        assert_eq!(listed["leader"]["id"], "b", "{listed}");
        assert_eq!(listed["leader"]["value"], Value::Null, "{listed}");
        std::fs::write(&b.release, "").unwrap();
        for run in [run_a, run_b] {
            let output = finish(run).await;
            assert!(output.status.success(), "{}", stderr(&output));
        }
        watch.kill().await.unwrap();
    })
    .await;
}

/// `elect --value-file`: a value read from a file (here longer than one
/// argument may be on Linux, 128 KiB) or from standard input (`-`) is
/// proclaimed as `--value` would be; a file that cannot be read is a usage
/// error naming it, before anything is sent.
#[tokio::test(flavor = "multi_thread")]
async fn elect_value_from_a_file_or_standard_input() {
    bounded(async {
        for from_stdin in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let path = unique(&format!("elect-value-file-{from_stdin}"));
            let elector = Elector::new(dir.path(), "a");
            let value = if from_stdin {
                "10.0.0.9:8080 from standard input".to_owned()
            } else {
                "v".repeat(200 * 1024)
            };
            let file = dir.path().join("value");
            std::fs::write(&file, &value).unwrap();
            let source = if from_stdin {
                "-".to_owned()
            } else {
                file.display().to_string()
            };
            let script = elector.script(&dir.path().join("log"));
            let args = [
                "elect",
                &path,
                "--id",
                "a",
                "--value-file",
                &source,
                "--",
                "sh",
                "-c",
                &script,
            ];
            let mut command = zkc(&args);
            if from_stdin {
                command.stdin(Stdio::piped());
            }
            let mut leader = command.spawn().unwrap();
            if let Some(mut stdin) = leader.stdin.take() {
                tokio::io::AsyncWriteExt::write_all(&mut stdin, value.as_bytes())
                    .await
                    .unwrap();
            }
            wait_for_file(&elector.started).await;
            let listed = Verb::Elect.listing(&path).await;
            assert_eq!(listed["leader"]["value"].as_str(), Some(value.as_str()));
            std::fs::write(&elector.release, "").unwrap();
            let output = finish(leader).await;
            assert!(output.status.success(), "{}", stderr(&output));
        }
        let output = run(&[
            "elect",
            &unique("elect-no-value-file"),
            "--value-file",
            "/no/such/value",
            "--",
            "true",
        ])
        .await;
        assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("/no/such/value"),
            "{}",
            stderr(&output)
        );
    })
    .await;
}

/// `locks` on an election's path (a latch's nodes are no lock's) says it is
/// an election and how to see it, never "no holders" while someone leads.
#[tokio::test(flavor = "multi_thread")]
async fn locks_on_an_election_path_says_so() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let path = unique("locks-on-election");
        let elector = Elector::new(dir.path(), "a");
        let leader = Verb::Elect.spawn(
            &path,
            &["--id", "a"],
            &elector.script(&dir.path().join("log")),
        );
        wait_for_file(&elector.started).await;
        let text = run(&["locks", &path]).await;
        let text = String::from_utf8_lossy(&text.stdout).into_owned();
        assert!(!text.contains("no holders"), "{text}");
        assert!(text.contains("is an election with 1 participant"), "{text}");
        assert!(
            text.contains(&format!("zk-curator leader {path}")),
            "{text}"
        );
        let json = run(&["locks", &path, "--json"]).await;
        let json: Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(json["election_participants"], 1, "{json}");
        std::fs::write(&elector.release, "").unwrap();
        assert!(finish(leader).await.status.success());
        // Nobody left: an ordinary empty listing.
        let text = run(&["locks", &path]).await;
        assert!(String::from_utf8_lossy(&text.stdout).contains("no holders or waiters"));
    })
    .await;
}

/// `revoke PATH` on an election path: the leader (an `elect` run) is asked
/// to step down and named; its command is stopped and it exits 77, the next
/// elector leads (its command runs with a greater token). An election with
/// nobody left is refused with 66.
#[tokio::test(flavor = "multi_thread")]
async fn revoke_on_an_election_path_asks_the_leader_to_step_down() {
    bounded(async {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let path = unique("revoke-leader");
        let (a, b) = (Elector::new(dir.path(), "a"), Elector::new(dir.path(), "b"));
        let run_a = Verb::Elect.spawn(&path, &["--id", a.id], &a.script(&log));
        wait_for_file(&a.started).await;
        let run_b = Verb::Elect.spawn(&path, &["--id", b.id], &b.script(&log));
        let listed = Verb::Elect
            .wait_listing(&path, 2, "both electors queued")
            .await;
        let node_a = listed["leader"]["node"].as_str().unwrap().to_owned();
        let token_a = listed["leader"]["token"].as_i64().unwrap();

        let output = run(&["revoke", &path]).await;
        assert!(output.status.success(), "{}", stderr(&output));
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            format!("asked the leader a (node {node_a}, token {token_a}) to step down\n")
        );
        let output_a = finish(run_a).await;
        assert_eq!(output_a.status.code(), Some(77), "{}", stderr(&output_a));
        wait_for_file(&b.started).await;
        let listed = Verb::Elect.listing(&path).await;
        assert_eq!(listed["leader"]["id"], "b", "{listed}");
        assert!(
            listed["leader"]["token"].as_i64().unwrap() > token_a,
            "{listed}"
        );

        std::fs::write(&b.release, "").unwrap();
        let output_b = finish(run_b).await;
        assert!(output_b.status.success(), "{}", stderr(&output_b));
        let output = run(&["revoke", &path]).await;
        assert_eq!(output.status.code(), Some(66), "{}", stderr(&output));
    })
    .await;
}

/// The one-shot reads a user acts on (`locks`, `leader`, `revoke`) are
/// made as of now: a `sync` first, so a server behind the ensemble's leader
/// catches up before it answers (issue 32). Seen through a proxy.
#[tokio::test]
async fn one_shot_reads_sync_before_they_list() {
    use zk_curator_testing::proxy::opcode::{GET_CHILDREN, GET_CHILDREN2, SYNC};
    const LISTINGS: [i32; 2] = [GET_CHILDREN2, GET_CHILDREN];
    bounded(async {
        let path = unique("fresh-read");
        let proxy = FaultProxy::start(server().address()).await.unwrap();
        for args in [
            vec!["locks", path.as_str(), "--json"],
            vec!["leader", path.as_str(), "--json"],
            vec!["revoke", path.as_str()],
        ] {
            proxy.clear_traffic();
            let output = zkc(&args)
                .env("ZK_CONNECT", proxy.connect_string())
                .output()
                .await
                .unwrap();
            let opcodes = request_opcodes(&proxy);
            let sync = opcodes.iter().position(|op| *op == SYNC);
            let listing = opcodes.iter().position(|op| LISTINGS.contains(op));
            assert!(
                sync.is_some() && sync < listing,
                "{args:?}: a sync before the listing: {opcodes:?} ({})",
                stderr(&output)
            );
            // `revoke` finds nobody to ask (66); the others list nothing.
            let expected = if args[0] == "revoke" { 66 } else { 0 };
            assert_eq!(
                output.status.code(),
                Some(expected),
                "{args:?}: {}",
                stderr(&output)
            );
        }
    })
    .await;
}
