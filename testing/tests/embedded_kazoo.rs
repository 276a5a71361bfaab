//! kazoo (Python, Debian `python3-kazoo`) takes and releases a lock against
//! the embedded server, while a Rust client watches the lock's nodes.
//! Without kazoo the test fails saying so, or is skipped with a notice under
//! `ZK_SKIP_MISSING=kazoo` (or `=1`).
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::EmbeddedServer;

/// Debian's interpreter, where `python3-kazoo` installs.
const PYTHON: &str = "/usr/bin/python3";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_takes_and_releases_a_lock_on_the_embedded_server() {
    if !Prerequisite::Kazoo.check("kazoo_takes_and_releases_a_lock_on_the_embedded_server") {
        return;
    }
    let server = EmbeddedServer::start().await.unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kazoo/lock.py");
    let mut child = tokio::process::Command::new(PYTHON)
        .arg(&script)
        .args([&server.connect_string(), "/kazoo/lock"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let limit = Duration::from_secs(30);
    let first = tokio::time::timeout(limit, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let node = first
        .strip_prefix("acquired ")
        .unwrap_or_else(|| panic!("kazoo said {first:?}"));

    // While kazoo holds it, its node is the only child of the lock path.
    let client = zookeeper_client::Client::connect(&server.connect_string())
        .await
        .unwrap();
    let children = client.list_children("/kazoo/lock").await.unwrap();
    assert_eq!(children.len(), 1, "{children:?}");
    assert!(node.ends_with(&children[0]), "{node} vs {children:?}");
    // kazoo reports the node's name; it lives under the lock path.
    let node_path = if node.starts_with('/') {
        node.to_owned()
    } else {
        format!("/kazoo/lock/{node}")
    };
    let stat = client.check_stat(&node_path).await.unwrap();
    assert!(
        stat.is_some_and(|s| s.ephemeral_owner != 0),
        "an ephemeral lock node"
    );

    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"release\n").await.unwrap();
    let second = tokio::time::timeout(limit, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second, "released");
    let status = tokio::time::timeout(limit, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    assert!(client
        .list_children("/kazoo/lock")
        .await
        .unwrap()
        .is_empty());
}
