//! Node operations on the embedded server, driven by the real `zookeeper-client`: stats and
//! errors, watches, multi, containers and TTL nodes, ACLs, and a lock workload.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use common::{bounded, connect, ephemeral, eventually, persistent, retrying};
use zk_curator_server::EmbeddedServer;
use zookeeper_client::{Acls, AddWatchMode, Client, CreateMode, Error, EventType};

// ---- node operations ----

#[tokio::test(flavor = "multi_thread")]
async fn node_operations_and_stats() {
    let server = EmbeddedServer::start().await.unwrap();
    let c = connect(&server).await;
    let (stat, _) = bounded(c.create("/n", b"abc", &persistent()))
        .await
        .unwrap();
    assert_eq!(
        (stat.version, stat.data_length, stat.num_children),
        (0, 3, 0)
    );
    assert_eq!(stat.czxid, stat.mzxid);
    assert_eq!(stat.czxid, stat.pzxid);
    assert_eq!(stat.ctime, stat.mtime);
    let zxid = stat.czxid;
    let stat = bounded(c.set_data("/n", b"abcd", Some(0))).await.unwrap();
    assert_eq!(stat.version, 1);
    assert!(stat.mzxid > zxid);
    assert_eq!(
        bounded(c.set_data("/n", b"", Some(0))).await.unwrap_err(),
        Error::BadVersion
    );
    for i in 0..3u32 {
        let (_, seq) = bounded(c.create(
            "/n/s-",
            b"",
            &CreateMode::PersistentSequential.with_acls(Acls::anyone_all()),
        ))
        .await
        .unwrap();
        assert_eq!(seq.to_string(), format!("{i:010}"));
    }
    let (_, seq) = bounded(c.create(
        "/n/e-",
        b"",
        &CreateMode::EphemeralSequential.with_acls(Acls::anyone_all()),
    ))
    .await
    .unwrap();
    assert_eq!(seq.into_i64(), 3);
    let (mut kids, stat) = bounded(c.get_children("/n")).await.unwrap();
    kids.sort();
    assert_eq!(
        kids,
        [
            "e-0000000003",
            "s-0000000000",
            "s-0000000001",
            "s-0000000002"
        ]
    );
    assert_eq!((stat.num_children, stat.cversion), (4, 4));
    bounded(c.delete("/n/s-0000000000", None)).await.unwrap();
    let stat = bounded(c.check_stat("/n")).await.unwrap().unwrap();
    // Clients see creations plus deletions.
    assert_eq!((stat.num_children, stat.cversion), (3, 5));
    assert_eq!(
        bounded(c.delete("/n", None)).await.unwrap_err(),
        Error::NotEmpty
    );
    assert_eq!(
        bounded(c.delete("/n/none", None)).await.unwrap_err(),
        Error::NoNode
    );
    assert_eq!(
        bounded(c.create("/n", b"", &persistent()))
            .await
            .unwrap_err(),
        Error::NodeExists
    );
    assert_eq!(
        bounded(c.create("/x/y", b"", &persistent()))
            .await
            .unwrap_err(),
        Error::NoNode
    );
    bounded(c.create("/n/eph", b"", &ephemeral()))
        .await
        .unwrap();
    assert_eq!(
        bounded(c.create("/n/eph/kid", b"", &persistent()))
            .await
            .unwrap_err(),
        Error::NoChildrenForEphemerals
    );
    assert_eq!(bounded(c.count_descendants_number("/n")).await.unwrap(), 4);
    let mut mine = bounded(c.list_ephemerals("/n")).await.unwrap();
    mine.sort();
    assert_eq!(mine, ["/n/e-0000000003", "/n/eph"]);
    bounded(c.sync("/n")).await.unwrap();
    // zxid advances with every write, failed ones too.
    let before = server.zxid();
    let _ = bounded(c.create("/n", b"", &persistent())).await;
    assert_eq!(server.zxid(), before + 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_see_own_pipelined_writes() {
    let server = EmbeddedServer::start().await.unwrap();
    let c = connect(&server).await;
    bounded(c.create("/p", b"", &persistent())).await.unwrap();
    let create = c.create("/p/x", b"", &persistent());
    let list = c.list_children("/p");
    let (created, listed) = bounded(async { tokio::join!(create, list) }).await;
    created.unwrap();
    assert_eq!(listed.unwrap(), ["x"]);
}

// ---- watches ----

#[tokio::test(flavor = "multi_thread")]
async fn watch_event_types() {
    let server = EmbeddedServer::start().await.unwrap();
    let c = connect(&server).await;
    let other = connect(&server).await;
    let (_, exist) = bounded(c.check_and_watch_stat("/w")).await.unwrap();
    bounded(other.create("/w", b"", &persistent()))
        .await
        .unwrap();
    assert_eq!(
        bounded(exist.changed()).await.event_type,
        EventType::NodeCreated
    );
    let (_, _, data) = bounded(c.get_and_watch_data("/w")).await.unwrap();
    let (_, child) = bounded(c.list_and_watch_children("/w")).await.unwrap();
    bounded(other.set_data("/w", b"1", None)).await.unwrap();
    assert_eq!(
        bounded(data.changed()).await.event_type,
        EventType::NodeDataChanged
    );
    bounded(other.create("/w/k", b"", &persistent()))
        .await
        .unwrap();
    let event = bounded(child.changed()).await;
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (EventType::NodeChildrenChanged, "/w")
    );
    let (_, _, data) = bounded(c.get_and_watch_data("/w/k")).await.unwrap();
    let (_, child) = bounded(c.list_and_watch_children("/w/k")).await.unwrap();
    bounded(other.delete("/w/k", None)).await.unwrap();
    assert_eq!(
        bounded(data.changed()).await.event_type,
        EventType::NodeDeleted
    );
    assert_eq!(
        bounded(child.changed()).await.event_type,
        EventType::NodeDeleted
    );
    // Persistent watch: several events, children included.
    let mut persistent_watch = bounded(c.watch("/w", AddWatchMode::Persistent))
        .await
        .unwrap();
    bounded(other.set_data("/w", b"2", None)).await.unwrap();
    bounded(other.create("/w/j", b"", &persistent()))
        .await
        .unwrap();
    let first = bounded(persistent_watch.changed()).await;
    let second = bounded(persistent_watch.changed()).await;
    assert_eq!(first.event_type, EventType::NodeDataChanged);
    assert_eq!(second.event_type, EventType::NodeChildrenChanged);
}

#[tokio::test(flavor = "multi_thread")]
async fn event_arrives_before_later_read_reply() {
    let server = EmbeddedServer::start().await.unwrap();
    let c = connect(&server).await;
    let other = connect(&server).await;
    bounded(c.create("/o", b"0", &persistent())).await.unwrap();
    for round in 1..=20 {
        let (_, _, watch) = bounded(c.get_and_watch_data("/o")).await.unwrap();
        bounded(other.set_data("/o", round.to_string().as_bytes(), None))
            .await
            .unwrap();
        // Any read issued now is answered after the notification was sent.
        let (data, _) = bounded(c.get_data("/o")).await.unwrap();
        assert_eq!(data, round.to_string().as_bytes());
        let mut changed = std::pin::pin!(watch.changed());
        let ready = futures_poll_once(&mut changed);
        assert!(
            ready,
            "round {round}: event not delivered before the read reply"
        );
    }
}

/// Polls a future once without waiting.
fn futures_poll_once<F: Future>(future: &mut std::pin::Pin<&mut F>) -> bool {
    use std::task::{Context, Poll, Waker};
    let mut cx = Context::from_waker(Waker::noop());
    matches!(future.as_mut().poll(&mut cx), Poll::Ready(_))
}

// ---- multi and friends ----

#[tokio::test(flavor = "multi_thread")]
async fn multi_is_all_or_nothing() {
    let server = EmbeddedServer::start().await.unwrap();
    let c = connect(&server).await;
    bounded(c.create("/m", b"", &persistent())).await.unwrap();
    let zxid = server.zxid();
    let mut multi = c.new_multi_writer();
    multi.add_create("/m/a", b"", &persistent()).unwrap();
    multi.add_create("/m/a/b", b"", &persistent()).unwrap();
    multi.add_set_data("/m", b"x", Some(3)).unwrap();
    let err = bounded(multi.commit()).await.unwrap_err();
    assert!(format!("{err:?}").contains("index: 2"), "{err:?}");
    assert!(bounded(c.check_stat("/m/a")).await.unwrap().is_none());
    let stat = bounded(c.check_stat("/m")).await.unwrap().unwrap();
    assert_eq!((stat.cversion, stat.version), (0, 0));
    assert_eq!(server.zxid(), zxid + 1);
    let mut multi = c.new_multi_writer();
    multi.add_create("/m/a", b"", &persistent()).unwrap();
    multi.add_create("/m/a/b", b"", &persistent()).unwrap();
    multi.add_check_version("/m", 0).unwrap();
    multi.add_set_data("/m", b"x", Some(0)).unwrap();
    multi.add_delete("/m/a/b", None).unwrap();
    let results = bounded(multi.commit()).await.unwrap();
    assert_eq!(results.len(), 5);
    assert_eq!(server.zxid(), zxid + 2);
    let mut reader = c.new_multi_reader();
    reader.add_get_data("/m").unwrap();
    reader.add_get_children("/m").unwrap();
    reader.add_get_data("/none").unwrap();
    let results = bounded(reader.commit()).await.unwrap();
    assert_eq!(results.len(), 3);
    let text = format!("{results:?}");
    assert!(text.contains("NoNode"), "{text}");
}

// ---- containers and TTL ----

#[tokio::test(flavor = "multi_thread")]
async fn containers_and_ttl_nodes_are_reaped() {
    let server = EmbeddedServer::builder()
        .extended_types(true)
        .start()
        .await
        .unwrap();
    let c = connect(&server).await;
    let container = CreateMode::Container.with_acls(Acls::anyone_all());
    bounded(c.create("/never-used", b"", &container))
        .await
        .unwrap();
    bounded(c.create("/box", b"", &container)).await.unwrap();
    bounded(c.create("/box/item", b"", &persistent()))
        .await
        .unwrap();
    // A container that has had a child and has none now, created after
    // /box: once the reaper has taken it, the reaper has looked at /box with
    // its child too, and left it.
    bounded(c.create("/emptied", b"", &container))
        .await
        .unwrap();
    bounded(c.create("/emptied/item", b"", &persistent()))
        .await
        .unwrap();
    bounded(c.delete("/emptied/item", None)).await.unwrap();
    eventually("emptied container reaped", || async {
        bounded(c.check_stat("/emptied")).await.unwrap().is_none()
    })
    .await;
    assert!(
        bounded(c.check_stat("/box")).await.unwrap().is_some(),
        "a container with a child was reaped"
    );
    bounded(c.delete("/box/item", None)).await.unwrap();
    eventually("container reaped", || async {
        bounded(c.check_stat("/box")).await.unwrap().is_none()
    })
    .await;
    assert!(bounded(c.check_stat("/never-used"))
        .await
        .unwrap()
        .is_some());
    let ttl = CreateMode::Persistent
        .with_acls(Acls::anyone_all())
        .with_ttl(Duration::from_millis(300));
    let started = Instant::now();
    bounded(c.create("/ttl", b"", &ttl)).await.unwrap();
    eventually("TTL node expired", || async {
        bounded(c.check_stat("/ttl")).await.unwrap().is_none()
    })
    .await;
    assert!(started.elapsed() >= Duration::from_millis(300));
}

// ---- ACLs ----

#[tokio::test(flavor = "multi_thread")]
async fn digest_acls() {
    let server = EmbeddedServer::start().await.unwrap();
    let anonymous = connect(&server).await;
    let alice = bounded(
        Client::connector()
            .with_auth("digest", b"alice:pw")
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    bounded(alice.create(
        "/a",
        b"secret",
        &CreateMode::Persistent.with_acls(Acls::creator_all()),
    ))
    .await
    .unwrap();
    let (acl, _) = bounded(alice.get_acl("/a")).await.unwrap();
    assert_eq!(acl.len(), 1);
    assert_eq!(acl[0].scheme(), "digest");
    assert_eq!(acl[0].id(), zk_curator_server::acl::digest_id(b"alice:pw"));
    assert_eq!(
        bounded(anonymous.get_data("/a")).await.unwrap_err(),
        Error::NoAuth
    );
    assert_eq!(
        bounded(anonymous.create(
            "/b",
            b"",
            &CreateMode::Persistent.with_acls(Acls::creator_all())
        ))
        .await
        .unwrap_err(),
        Error::InvalidAcl
    );
    // Auth survives reconnects (the client re-sends it).
    server.drop_connections();
    assert_eq!(
        retrying(|| alice.get_data("/a")).await.unwrap().0,
        b"secret"
    );
    let users = retrying(|| alice.list_auth_users()).await.unwrap();
    assert!(format!("{users:?}").contains("alice"), "{users:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn super_user_passes_acls() {
    let server = EmbeddedServer::builder()
        .super_user("admin:root")
        .start()
        .await
        .unwrap();
    let alice = bounded(
        Client::connector()
            .with_auth("digest", b"alice:pw")
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    bounded(alice.create(
        "/private",
        b"p",
        &CreateMode::Persistent.with_acls(Acls::creator_all()),
    ))
    .await
    .unwrap();
    let admin = bounded(
        Client::connector()
            .with_auth("digest", b"admin:root")
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    assert_eq!(bounded(admin.get_data("/private")).await.unwrap().0, b"p");
    bounded(admin.delete("/private", None)).await.unwrap();
    let wrong = bounded(
        Client::connector()
            .with_auth("digest", b"admin:wrong")
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    bounded(alice.create(
        "/private",
        b"p",
        &CreateMode::Persistent.with_acls(Acls::creator_all()),
    ))
    .await
    .unwrap();
    assert_eq!(
        bounded(wrong.get_data("/private")).await.unwrap_err(),
        Error::NoAuth
    );
}

// ---- a lock workload ----

#[tokio::test(flavor = "multi_thread")]
async fn zookeeper_client_lock_is_mutually_exclusive() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use zookeeper_client::LockPrefix;

    let server = EmbeddedServer::start().await.unwrap();
    let setup = connect(&server).await;
    bounded(setup.create("/locks", b"", &persistent()))
        .await
        .unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let client = connect(&server).await;
        let inside = inside.clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let prefix = LockPrefix::new_curator("/locks", "lock-").unwrap();
                let guard = bounded(client.lock(prefix, b"", Acls::anyone_all()))
                    .await
                    .unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders");
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.store(false, Ordering::SeqCst);
                bounded(client.delete(guard.lock_path(), None))
                    .await
                    .unwrap();
                drop(guard);
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    for task in tasks {
        bounded(task).await.unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 40);
    eventually("lock nodes gone", || async {
        bounded(setup.list_children("/locks"))
            .await
            .unwrap()
            .is_empty()
    })
    .await;
}
