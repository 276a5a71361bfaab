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
