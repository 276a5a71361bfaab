//! What the command-line suites that drive the built binary against one
//! shared server need: the server, the command with its environment, a
//! run with its duration, and a plain client to look at the server with.
#![allow(dead_code, clippy::unwrap_used)]

use std::process::{Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::process::Command;
use zk_curator::framework::zk;
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
