//! `zk-curator evict` (issue 46, item 4): a zk-curator holder whose node is
//! removed sees its hold lost at once and its fenced writes refused, and
//! the next waiter gets the lock; a Curator holder (the interop harness's
//! Java program) is removed only with `--force`; a missing path or node is
//! exit 66 and an ACL refusal exit 70, at once. On the embedded server by
//! default, on a real ZooKeeper with `ZK_TEST_SERVER=real`.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::time::{Duration, Instant};

use common::{curator_interop, framework, raw, run, server, text, zkc};
use tokio::io::{AsyncBufReadExt, BufReader};
use zk_curator::framework::zk;
use zk_curator::{InterProcessMutex, LockLoss};
use zk_curator_testing::peer::Peer;

const TEST_LIMIT: Duration = Duration::from_secs(180);
const WAIT_LIMIT: Duration = Duration::from_secs(30);
/// A removal is a connect, a sync, a few reads and a delete.
const AT_ONCE: Duration = Duration::from_secs(3);
/// A JVM starting, connecting and taking a lock, on a loaded machine.
const PEER_LIMIT: Duration = Duration::from_secs(120);

fn unique(name: &str) -> String {
    format!("/cli-evict/{name}-{}", std::process::id())
}

/// A zk-curator holder's node removed: its hold is lost (node deleted) at
/// once, its fence refuses, the waiter behind it gets the lock; and a
/// `lock` command's holder, removed by age, stops its command (exit 76).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zk_curator_holder_sees_its_node_removed() {
    tokio::time::timeout(TEST_LIMIT, async {
        let path = unique("library");
        let (holder_fw, waiter_fw) = (framework().await, framework().await);
        let guard = InterProcessMutex::new(holder_fw.clone(), &path)
            .unwrap()
            .lock()
            .await
            .unwrap();
        let waiter = {
            let mutex = InterProcessMutex::new(waiter_fw.clone(), &path).unwrap();
            tokio::spawn(async move { mutex.lock().await })
        };
        let client = raw().await;
        let deadline = Instant::now() + WAIT_LIMIT;
        while client.list_children(&path).await.unwrap().len() < 2 {
            assert!(Instant::now() < deadline, "the waiter never queued");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let name = guard.node().name().to_owned();
        let (output, took) = run(&["evict", &path, "--node", &name]).await;
        assert!(output.status.success(), "{}", text(&output.stderr));
        let said = text(&output.stdout);
        assert!(
            said.starts_with(&format!("removed {name} (holder")),
            "{said}"
        );
        assert!(took < AT_ONCE, "the removal took {took:?}");
        let loss = tokio::time::timeout(AT_ONCE, guard.lost())
            .await
            .expect("no loss signal");
        assert_eq!(loss, LockLoss::NodeDeleted);
        assert!(guard.fence().is_err(), "the fence still wrote");
        let next = tokio::time::timeout(WAIT_LIMIT, waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(next.is_valid());
        next.release().await.unwrap();
        drop(guard);

        // A `lock` command's holder, removed by age: its command stops.
        let path = unique("command");
        let mut holder = zkc(&["lock", &path, "--", "sh", "-c", "echo held; sleep 60"])
            .spawn()
            .unwrap();
        let mut out = BufReader::new(holder.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).await.unwrap();
        assert_eq!(line.trim(), "held");
        let (output, _) = run(&["evict", &path, "--older-than", "0s", "--json"]).await;
        assert!(output.status.success(), "{}", text(&output.stderr));
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(json["removed"].as_array().unwrap().len(), 1, "{json}");
        assert_eq!(json["removed"][0]["loss_signal"], true, "{json}");
        let status = tokio::time::timeout(WAIT_LIMIT, holder.wait())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status.code(), Some(76));
        holder_fw.close().await;
        waiter_fw.close().await;
    })
    .await
    .expect("test timed out");
}

/// What is not there is exit 66, at once, and an ACL that refuses the
/// delete is exit 70, at once; nothing is removed either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_paths_and_nodes_and_acl_refusals() {
    tokio::time::timeout(TEST_LIMIT, async {
        let (output, took) = run(&["evict", &unique("nothing"), "--node", "x"]).await;
        assert_eq!(output.status.code(), Some(66), "{}", text(&output.stderr));
        assert!(took < AT_ONCE);
        let path = unique("acl");
        let client = raw().await;
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        client.create("/cli-evict", &[], &open).await.ok();
        // Anyone may read and create under it, nobody may delete.
        let no_delete = vec![zk::Acl::new(
            zk::Permission::READ | zk::Permission::CREATE,
            zk::AuthId::anyone(),
        )];
        let guarded = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&no_delete));
        client.create(&path, &[], &guarded).await.unwrap();
        let identity = br#"{"host":"h","pid":1,"label":"stuck"}"#;
        let node = format!("{path}/_c_0f8fad5b-d9cb-469f-a165-70867728950e-lock-0000000001");
        client.create(&node, identity, &open).await.unwrap();
        let (output, _) = run(&["evict", &path, "--node", "nope"]).await;
        assert_eq!(output.status.code(), Some(66), "{}", text(&output.stderr));
        let (output, took) = run(&["evict", &path, "--older-than", "0s"]).await;
        assert_eq!(output.status.code(), Some(70), "{}", text(&output.stderr));
        assert!(
            text(&output.stderr).contains("NoAuth"),
            "{}",
            text(&output.stderr)
        );
        assert!(took < AT_ONCE, "the refusal took {took:?}");
        assert!(
            client.check_stat(&node).await.unwrap().is_some(),
            "the node went"
        );
    })
    .await
    .expect("test timed out");
}

/// A Curator holder (the interop harness's Java program, in its `hold`
/// mode) has no loss signal: `evict` refuses it (exit 65, nothing removed)
/// until `--force`, which removes it and says that its holder may go on;
/// Curator itself still believes it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_holder_is_removed_only_with_force() {
    let Some(java) = curator_interop() else {
        return;
    };
    tokio::time::timeout(TEST_LIMIT, async {
        let path = unique("curator");
        let markers = tempfile::tempdir().unwrap();
        let markers = markers.path().to_str().unwrap();
        let connect = server().connect_string();
        let mut holder = Peer::java(
            java,
            "Interop",
            &[&connect, "hold", &path, "1", markers, "1"],
            PEER_LIMIT,
        )
        .await;
        let held = holder
            .line(PEER_LIMIT, |line| {
                line.strip_prefix("held node=").map(str::to_owned)
            })
            .await;
        let (output, _) = run(&["evict", &path, "--node", &held]).await;
        assert_eq!(output.status.code(), Some(65), "{}", text(&output.stderr));
        assert!(
            text(&output.stderr).contains("--force"),
            "{}",
            text(&output.stderr)
        );
        let client = raw().await;
        assert!(
            client.check_stat(&held).await.unwrap().is_some(),
            "removed without --force"
        );
        let (output, _) = run(&["evict", &path, "--node", &held, "--force"]).await;
        assert!(output.status.success(), "{}", text(&output.stderr));
        assert!(
            text(&output.stdout).contains("no loss signal"),
            "{}",
            text(&output.stdout)
        );
        assert!(
            client.check_stat(&held).await.unwrap().is_none(),
            "still there"
        );
        let (status, said) = holder.finish(PEER_LIMIT).await;
        assert_eq!(status, Some(0), "{said}");
        // Curator never noticed: the danger --force names.
        assert!(said.contains("still held=true"), "{said}");
    })
    .await
    .expect("test timed out");
}
