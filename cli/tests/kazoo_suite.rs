//! kazoo's own test suite (Debian's `python3-kazoo` installs it as `kazoo.tests`), run through
//! the pytest shim in `server/tests/kazoo/kazoo_shim.py` against `zk-curator server --port 0`,
//! or, with `ZK_TEST_SERVER=real`, against an Apache ZooKeeper the shim starts the same way:
//! the same tests must pass on both. The shim lists the modules run, the modules left out and
//! the single tests deselected (they stop or reconfigure servers, or race), with the reasons.
//!
//! Needs `python3-pytest`, `python3-pytest-timeout`, `python3-mock` and `python3-objgraph`
//! besides kazoo: without them the test fails saying so, or is skipped with a notice under
//! `ZK_SKIP_MISSING=kazoo-tests` (or `=1`).
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use zk_curator_testing::backend::{Prerequisite, DEBIAN_PYTHON as PYTHON};
use zk_curator_testing::Backend;

const BIN: &str = env!("CARGO_BIN_EXE_zk-curator");
/// A bound on the whole suite (it takes about a minute).
const SUITE_LIMIT: Duration = Duration::from_secs(900);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_test_suite_passes() {
    // The testing crate's one rule: a missing prerequisite fails the test
    // naming what to install, unless ZK_SKIP_MISSING asks to skip it.
    let test = "kazoo_test_suite_passes";
    if !Prerequisite::KazooTestSuite.check(test) {
        return;
    }
    let backend = Backend::from_env().unwrap();
    if let Some(prerequisite) = backend.prerequisite() {
        if !prerequisite.check(test) {
            return;
        }
    }
    let shim_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../server/tests/kazoo");
    let modules = std::process::Command::new(PYTHON)
        .current_dir(&shim_dir)
        .args([
            "-c",
            "import kazoo_shim; print(' '.join(kazoo_shim.MODULES))",
        ])
        .env("PYTHONPATH", &shim_dir)
        .output()
        .unwrap();
    assert!(modules.status.success(), "{modules:?}");
    let modules = String::from_utf8(modules.stdout).unwrap();
    let mut command = tokio::process::Command::new(PYTHON);
    command
        .current_dir(&shim_dir)
        .args([
            "-m",
            "pytest",
            "-p",
            "kazoo_shim",
            "-p",
            "no:cacheprovider",
            "--timeout=60",
            // A test that hangs in its tearDown (joining a blocked thread)
            // prints every thread's stack and ends the run, instead of
            // holding the suite until SUITE_LIMIT.
            "--timeout-method=thread",
            "-q",
            "-rfE",
            "--pyargs",
        ])
        .args(modules.split_whitespace())
        .env("PYTHONPATH", &shim_dir)
        .env_remove("ZK_HOSTS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    match backend {
        Backend::Real => command
            .env("ZK_SHIM_SERVER", "real")
            .env_remove("ZK_CURATOR_BIN"),
        Backend::Embedded => command
            .env("ZK_CURATOR_BIN", BIN)
            .env_remove("ZK_SHIM_SERVER"),
    };
    let child = command.spawn().unwrap();
    let output = tokio::time::timeout(SUITE_LIMIT, child.wait_with_output())
        .await
        .expect("kazoo suite timed out")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("FAILED") || l.starts_with("ERROR") || l.contains(" passed"))
        .collect();
    println!("kazoo suite on {backend}:\n{}", summary.join("\n"));
    assert!(
        output.status.success(),
        "kazoo suite failed on {backend}:\n{}\n{}",
        stdout
            .lines()
            .rev()
            .take(80)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&output.stderr)
    );
}
