//! What the command-line suites that drive the built binary against one
//! shared server need: the server, the command with its environment, a
//! run with its duration, a plain client to look at the server with, a
//! framework to contend with, and the other libraries' participant
//! programs (run through [`zk_curator_testing::peer::Peer`]).
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::Command;
use zk_curator::framework::zk;
use zk_curator::Framework;
use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::curator::{self, JavaProgram};
use zk_curator_testing::TestingServer;

pub const BIN: &str = env!("CARGO_BIN_EXE_zk-curator");

/// The suite's server (embedded, or real with `ZK_TEST_SERVER=real`).
pub fn server() -> &'static TestingServer {
    static SERVER: OnceLock<TestingServer> = OnceLock::new();
    SERVER.get_or_init(|| TestingServer::start().expect("test server"))
}

/// `zk-curator ARGS` on the suite's server, its output piped, no
/// credentials inherited, killed if dropped.
pub fn zkc(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("ZK_CONNECT", server().connect_string())
        .env_remove("ZK_AUTH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs `zk-curator ARGS` to its end: its output and how long it took.
pub async fn run(args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let output = zkc(args).output().await.unwrap();
    (output, started.elapsed())
}

/// Bytes as text (invalid UTF-8 replaced).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// What a run wrote on stderr.
pub fn stderr(output: &Output) -> String {
    text(&output.stderr)
}

/// A plain client on the suite's server, to look at what is there.
pub async fn raw() -> zk::Client {
    zk::Client::connector()
        .connect(&server().connect_string())
        .await
        .unwrap()
}

/// The children of `path` as `client` sees them now, sorted; none when
/// `path` is gone (a container node that the server removed once its
/// last participant left, as a real ZooKeeper does, reads as empty).
pub async fn children_of(client: &zk::Client, path: &str) -> Vec<String> {
    match client.list_children(path).await {
        Ok(mut children) => {
            children.sort();
            children
        }
        Err(zk::Error::NoNode) => Vec::new(),
        Err(err) => panic!("cannot list {path}: {err}"),
    }
}

/// Creates `path` and every missing level above it (persistent, open to
/// anyone), `path` itself with `data`: a node as another library or a
/// stuck holder could leave it.
pub async fn make(client: &zk::Client, path: &str, data: &[u8]) {
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let mut level = String::new();
    let parts: Vec<&str> = path.split('/').skip(1).collect();
    for (i, part) in parts.iter().enumerate() {
        level = format!("{level}/{part}");
        let bytes: &[u8] = if i + 1 == parts.len() { data } else { b"" };
        match client.create(&level, bytes, &open).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(err) => panic!("create {level}: {err}"),
        }
    }
}

/// A started framework on the suite's server, connected within 30 s (a
/// session of its own: one contender).
pub async fn framework() -> Framework {
    let framework = Framework::builder()
        .connect_string(server().connect_string())
        .session_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    framework.start().unwrap();
    framework
        .block_until_connected(Duration::from_secs(30))
        .await
        .unwrap();
    framework
}

/// The interop harness's Curator program (`tests/interop/Interop.java`),
/// compiled once per suite; `None` when Curator is missing and
/// `ZK_SKIP_MISSING` asks to skip ([`Prerequisite::check`] fails the test
/// otherwise, naming what to install).
pub fn curator_interop() -> Option<&'static JavaProgram> {
    static COMPILED: OnceLock<Option<JavaProgram>> = OnceLock::new();
    COMPILED
        .get_or_init(|| {
            let test = std::thread::current()
                .name()
                .unwrap_or("curator interop")
                .to_owned();
            if !Prerequisite::Curator.check(&test) {
                return None;
            }
            let source =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/interop/Interop.java");
            Some(curator::compile(&source))
        })
        .as_ref()
}

/// Whether kazoo is there ([`Prerequisite::check`]: a missing kazoo fails
/// the test unless `ZK_SKIP_MISSING` asks to skip it).
pub fn kazoo_available() -> bool {
    Prerequisite::Kazoo.check(std::thread::current().name().unwrap_or("kazoo"))
}

/// The kazoo participant script (`tests/interop/kazoo_participant.py`).
pub fn kazoo_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/interop/kazoo_participant.py")
}

/// How long the dashboard's helpers wait for its address, a response or
/// a state.
pub const DASHBOARD_WAIT: Duration = Duration::from_secs(20);

/// A running `zk-curator dashboard` (killed if dropped) and the address
/// it serves.
pub struct Dashboard {
    pub child: tokio::process::Child,
    pub address: String,
}

impl Dashboard {
    pub async fn start(root: &str, options: &[&str]) -> Dashboard {
        let mut args = vec!["dashboard", root, "--bind", "127.0.0.1:0"];
        args.extend_from_slice(options);
        let mut child = zkc(&args).spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        tokio::time::timeout(DASHBOARD_WAIT, out.read_line(&mut line))
            .await
            .expect("no address line")
            .unwrap();
        let address = line
            .trim()
            .strip_prefix("dashboard on http://")
            .and_then(|rest| rest.strip_suffix('/'))
            .unwrap_or_else(|| panic!("first line: {line:?}"))
            .to_owned();
        Dashboard { child, address }
    }

    /// `GET path`: the status line, the headers and the body.
    pub async fn get(&self, path: &str) -> (String, String, String) {
        self.get_with(path, "").await
    }

    /// `GET path` with `extra` header lines.
    pub async fn get_with(&self, path: &str, extra: &str) -> (String, String, String) {
        let mut stream = TcpStream::connect(&self.address).await.unwrap();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\n{extra}Connection: close\r\n\r\n",
            self.address
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        tokio::time::timeout(DASHBOARD_WAIT, stream.read_to_end(&mut response))
            .await
            .expect("response in time")
            .unwrap();
        let response = String::from_utf8(response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
        (
            status.to_owned(),
            headers.to_ascii_lowercase(),
            body.to_owned(),
        )
    }

    pub async fn snapshot(&self) -> (String, Value) {
        let (status, headers, body) = self.get("/api/snapshot").await;
        assert!(status.contains(" 200 "), "{status}");
        assert!(
            headers.contains("content-type: application/json"),
            "{headers}"
        );
        let value = serde_json::from_str(&body).unwrap();
        (body, value)
    }

    /// The snapshot, once `ready` says it is.
    pub async fn snapshot_when(&self, ready: impl Fn(&Value) -> bool) -> (String, Value) {
        let started = Instant::now();
        loop {
            let (text, value) = self.snapshot().await;
            if value["current"] == true && ready(&value) {
                return (text, value);
            }
            assert!(started.elapsed() < DASHBOARD_WAIT, "never ready: {value}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `/metrics` once `ready` says it is: OpenMetrics (as Prometheus
    /// asks for it) when `openmetrics`, else Prometheus's text format.
    pub async fn metrics_when(&self, openmetrics: bool, ready: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        let (accept, content_type) = if openmetrics {
            (
                "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n",
                "content-type: application/openmetrics-text; version=1.0.0",
            )
        } else {
            ("", "content-type: text/plain; version=0.0.4")
        };
        loop {
            let (status, headers, body) = self.get_with("/metrics", accept).await;
            assert!(status.contains(" 200 "), "{status}");
            assert!(headers.contains(content_type), "{headers}");
            if ready(&body) {
                return body;
            }
            assert!(started.elapsed() < DASHBOARD_WAIT, "never ready:\n{body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops it by its own pid (SIGINT): it ends with 0.
    pub async fn stop(mut self) {
        let pid = self.child.id().unwrap().to_string();
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap();
        let status = tokio::time::timeout(DASHBOARD_WAIT, self.child.wait())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status.code(), Some(0));
    }
}
