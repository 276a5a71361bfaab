//! Tests of the embedded ZooKeeper-protocol server, driven by the real `zookeeper-client`.
#![allow(clippy::unwrap_used, missing_docs)]

use std::future::Future;
use std::time::{Duration, Instant};

use zk_curator_testing::embedded::EmbeddedServer;
use zk_curator_testing::{proxy::opcode, FaultProxy, RequestMatcher};
use zookeeper_client::{
    Acls, AddWatchMode, Client, CreateMode, CreateOptions, Error, EventType, SessionState,
};

const STEP: Duration = Duration::from_secs(10);

async fn bounded<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(STEP, future)
        .await
        .expect("step timed out")
}

async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + STEP;
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Retries an operation that may be caught in flight by a dropped connection.
async fn retrying<T, F, Fut>(mut op: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let deadline = Instant::now() + STEP;
    loop {
        match bounded(op()).await {
            Err(Error::ConnectionLoss | Error::Custom(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

fn persistent() -> CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

fn ephemeral() -> CreateOptions<'static> {
    CreateMode::Ephemeral.with_acls(Acls::anyone_all())
}

async fn connect_with(server: &EmbeddedServer, timeout: Duration) -> Client {
    bounded(
        Client::connector()
            .with_session_timeout(timeout)
            .connect(&server.connect_string()),
    )
    .await
    .unwrap()
}

async fn connect(server: &EmbeddedServer) -> Client {
    connect_with(server, Duration::from_secs(10)).await
}

async fn wait_state(client: &Client, wanted: SessionState) {
    let mut states = client.state_watcher();
    eventually(&format!("state {wanted:?}"), || {
        let now = states.peek_state();
        async move { now == wanted }
    })
    .await;
    let _ = states.state();
}

// ---- 1. handshake, sessions ----

#[tokio::test(flavor = "multi_thread")]
async fn negotiates_timeout_within_bounds() {
    let server = EmbeddedServer::builder()
        .min_session_timeout(Duration::from_millis(1000))
        .max_session_timeout(Duration::from_secs(5))
        .start()
        .await
        .unwrap();
    let low = connect_with(&server, Duration::from_millis(100)).await;
    assert_eq!(low.session_timeout(), Duration::from_millis(1000));
    let high = connect_with(&server, Duration::from_secs(30)).await;
    assert_eq!(high.session_timeout(), Duration::from_secs(5));
    let mid = connect_with(&server, Duration::from_secs(3)).await;
    assert_eq!(mid.session_timeout(), Duration::from_secs(3));
    assert_ne!(low.session_id(), high.session_id());
    assert_eq!(server.session_ids().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn close_removes_ephemerals_and_session() {
    let server = EmbeddedServer::start().await.unwrap();
    let watcher = connect(&server).await;
    let owner = connect(&server).await;
    bounded(owner.create("/eph", b"", &ephemeral()))
        .await
        .unwrap();
    let (stat, watch) = bounded(watcher.check_and_watch_stat("/eph")).await.unwrap();
    assert_eq!(stat.unwrap().ephemeral_owner, owner.session_id().0);
    let id = owner.session_id().0;
    drop(owner);
    let event = bounded(watch.changed()).await;
    assert_eq!(event.event_type, EventType::NodeDeleted);
    assert!(!server.session_ids().contains(&id));
    assert_eq!(
        server.node_paths(),
        ["/", "/zookeeper", "/zookeeper/config", "/zookeeper/quota"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn session_expires_without_traffic() {
    let server = EmbeddedServer::start().await.unwrap();
    let watcher = connect(&server).await;
    let victim = bounded(
        Client::connector()
            .with_session_timeout(Duration::from_millis(600))
            .with_detached()
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    assert_eq!(victim.session_timeout(), Duration::from_millis(600));
    bounded(victim.create("/victim", b"", &ephemeral()))
        .await
        .unwrap();
    let (_, watch) = bounded(watcher.check_and_watch_stat("/victim"))
        .await
        .unwrap();
    let id = victim.session_id().0;
    // Silence the client: the server sees no pings any more.
    server.stall(Duration::from_millis(1500));
    let event = bounded(watch.changed()).await;
    assert_eq!(event.event_type, EventType::NodeDeleted);
    assert!(!server.session_ids().contains(&id));
    wait_state(&victim, SessionState::Expired).await;
    assert_eq!(
        bounded(victim.check_stat("/victim")).await.unwrap_err(),
        Error::SessionExpired
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn reattach_keeps_session_and_ephemerals() {
    let server = EmbeddedServer::start().await.unwrap();
    let first = bounded(
        Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .with_detached()
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    bounded(first.create("/kept", b"", &ephemeral()))
        .await
        .unwrap();
    let session = first.session().clone();
    let id = first.session_id();
    let second = bounded(
        Client::connector()
            .with_session(session)
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    assert_eq!(second.session_id(), id);
    let stat = retrying(|| second.check_stat("/kept"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stat.ephemeral_owner, id.0);
    // Our re-attach replaced the first client's connection (as on ZooKeeper, two clients on
    // one session keep taking it from each other); once the first is gone the node is still
    // there.
    // Once the first client's connection is gone (so whatever it sent on
    // its way out, such as a close of the session, has been handled), the
    // node is still there.
    drop(first);
    eventually("the first client's connection closed", || async {
        server.active_connections() == 1
    })
    .await;
    assert!(retrying(|| second.check_stat("/kept"))
        .await
        .unwrap()
        .is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_password_or_unknown_session_is_expired() {
    let server = EmbeddedServer::start().await.unwrap();
    let client = bounded(
        Client::connector()
            .with_detached()
            .connect(&server.connect_string()),
    )
    .await
    .unwrap();
    let session = client.session().clone();
    assert!(server.expire_session(session.id().0));
    assert!(!server.expire_session(session.id().0));
    let err = bounded(
        Client::connector()
            .with_session(session)
            .connect(&server.connect_string()),
    )
    .await
    .unwrap_err();
    assert_eq!(err, Error::SessionExpired);
    wait_state(&client, SessionState::Expired).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn expire_session_api_and_helper() {
    let server = EmbeddedServer::start().await.unwrap();
    let client = connect(&server).await;
    bounded(client.create("/mine", b"", &ephemeral()))
        .await
        .unwrap();
    // The testing crate's helper (second connection into the session, then close) works on
    // the embedded server as on the real one.
    bounded(zk_curator_testing::expire_session(
        &server.connect_string(),
        &client,
    ))
    .await
    .unwrap();
    assert_eq!(client.state(), SessionState::Expired);
    let other = connect(&server).await;
    assert!(bounded(other.check_stat("/mine")).await.unwrap().is_none());
}

// ---- 2. node operations ----

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

// ---- 3. watches ----

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

#[tokio::test(flavor = "multi_thread")]
async fn reconnect_rearms_watches_and_reports_missed_changes() {
    let server = EmbeddedServer::start().await.unwrap();
    let c = connect(&server).await;
    let other = connect(&server).await;
    bounded(c.create("/r", b"", &persistent())).await.unwrap();
    bounded(c.create("/r/changed", b"", &persistent()))
        .await
        .unwrap();
    drop(c);
    // Watch through a proxy whose connections we can freeze and cut.
    let proxy = FaultProxy::start(server.connect_string()).await.unwrap();
    let watcher = bounded(Client::connect(&proxy.connect_string()))
        .await
        .unwrap();
    let (_, _, untouched) = bounded(watcher.get_and_watch_data("/r")).await.unwrap();
    let (_, _, missed) = bounded(watcher.get_and_watch_data("/r/changed"))
        .await
        .unwrap();
    // The watcher's connection is frozen while the change happens, then cut: the notification
    // is lost with the connection, and setWatches on reconnect must report the change.
    proxy.set_paused(true);
    bounded(other.set_data("/r/changed", b"x", None))
        .await
        .unwrap();
    proxy.drop_connections();
    proxy.set_paused(false);
    let event = bounded(missed.changed()).await;
    assert_eq!(event.event_type, EventType::NodeDataChanged);
    assert_eq!(event.path, "/r/changed");
    // The untouched watch was re-armed by setWatches and fires on the next change.
    retrying(|| watcher.check_stat("/r")).await.unwrap();
    bounded(other.set_data("/r", b"y", None)).await.unwrap();
    assert_eq!(
        bounded(untouched.changed()).await.event_type,
        EventType::NodeDataChanged
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn drop_connections_keeps_sessions() {
    let server = EmbeddedServer::start().await.unwrap();
    let c = connect(&server).await;
    bounded(c.create("/d", b"", &ephemeral())).await.unwrap();
    let id = c.session_id();
    let (_, _, data_watch) = bounded(c.get_and_watch_data("/d")).await.unwrap();
    let (_, child_watch) = bounded(c.list_and_watch_children("/d")).await.unwrap();
    let (_, exist_watch) = bounded(c.check_and_watch_stat("/e")).await.unwrap();
    for _ in 0..3 {
        server.drop_connections();
        assert!(retrying(|| c.check_stat("/d")).await.unwrap().is_some());
    }
    assert_eq!(c.session_id(), id);
    assert_eq!(server.session_ids(), vec![id.0]);
    // The watches were re-armed on every reconnect (setWatches) and still fire.
    let other = connect(&server).await;
    bounded(other.set_data("/d", b"1", None)).await.unwrap();
    bounded(other.create("/e", b"", &persistent()))
        .await
        .unwrap();
    assert_eq!(
        bounded(data_watch.changed()).await.event_type,
        EventType::NodeDataChanged
    );
    assert_eq!(
        bounded(exist_watch.changed()).await.event_type,
        EventType::NodeCreated
    );
    bounded(c.delete("/d", None)).await.unwrap();
    assert_eq!(
        bounded(child_watch.changed()).await.event_type,
        EventType::NodeDeleted
    );
}

// ---- 4. multi and friends ----

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

// ---- 5. containers and TTL ----

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

// ---- 6. ACLs ----

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
    assert_eq!(
        acl[0].id(),
        zk_curator_testing::embedded::acl::digest_id(b"alice:pw")
    );
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

// ---- 7. limits and bad input ----

#[tokio::test(flavor = "multi_thread")]
async fn oversized_packets_close_only_that_connection() {
    let server = EmbeddedServer::start().await.unwrap();
    let big = connect(&server).await;
    let small = connect(&server).await;
    let data = vec![7u8; 1024 * 1024];
    let err = bounded(big.create("/big", &data, &persistent()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::ConnectionLoss | Error::Custom(_)),
        "{err:?}"
    );
    assert!(bounded(small.check_stat("/big")).await.unwrap().is_none());
    // Just under the limit is fine.
    let data = vec![7u8; 1024 * 1024 - 200];
    bounded(small.create("/almost", &data, &persistent()))
        .await
        .unwrap();
    // The big client reconnects into its session.
    retrying(|| big.check_stat("/almost"))
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn garbage_and_four_letter_words() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = EmbeddedServer::start().await.unwrap();
    let client = connect(&server).await;
    let mut raw = tokio::net::TcpStream::connect(server.address())
        .await
        .unwrap();
    raw.write_all(b"ruok").await.unwrap();
    let mut answer = String::new();
    bounded(raw.read_to_string(&mut answer)).await.unwrap();
    assert_eq!(answer, "imok");
    for garbage in [
        &[0xff, 0xff, 0xff, 0xff][..],
        &[0x7f, 0, 0, 0, 1, 2, 3][..],
        &[0, 0, 0, 3, 1, 2, 3][..],
    ] {
        let mut raw = tokio::net::TcpStream::connect(server.address())
            .await
            .unwrap();
        raw.write_all(garbage).await.unwrap();
        let mut rest = Vec::new();
        let _ = bounded(raw.read_to_end(&mut rest)).await;
    }
    bounded(client.create("/still-fine", b"", &persistent()))
        .await
        .unwrap();
    // Random request frames after a valid handshake, over real sockets.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut handshake = vec![0, 0, 0, 45];
    handshake.extend_from_slice(&[0; 12]);
    handshake.extend_from_slice(&5000i32.to_be_bytes());
    handshake.extend_from_slice(&[0; 8]);
    handshake.extend_from_slice(&16i32.to_be_bytes());
    handshake.extend_from_slice(&[0; 17]);
    for _ in 0..100 {
        let mut raw = tokio::net::TcpStream::connect(server.address())
            .await
            .unwrap();
        let mut bytes = handshake.clone();
        for _ in 0..(next() % 5 + 1) {
            let len = (next() % 64) as usize + 8;
            bytes.extend_from_slice(&(len as i32).to_be_bytes());
            bytes.extend_from_slice(&((next() % 100) as i32).to_be_bytes());
            bytes.extend_from_slice(&((next() % 110) as i32 - 11).to_be_bytes());
            for _ in 8..len {
                bytes.push(next() as u8);
            }
        }
        raw.write_all(&bytes).await.unwrap();
    }
    bounded(client.set_data("/still-fine", b"yes", None))
        .await
        .unwrap();
    eventually("garbage connections closed", || async {
        server.active_connections() == 1
    })
    .await;
}

#[test]
fn randomized_frames_never_panic() {
    // A small xorshift generator: reproducible, no dependencies.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let handshake = {
        let mut body = Vec::new();
        body.extend_from_slice(&0i32.to_be_bytes());
        body.extend_from_slice(&0i64.to_be_bytes());
        body.extend_from_slice(&5000i32.to_be_bytes());
        body.extend_from_slice(&0i64.to_be_bytes());
        body.extend_from_slice(&16i32.to_be_bytes());
        body.extend_from_slice(&[0; 16]);
        body.push(0);
        body
    };
    let frame = |body: &[u8]| {
        let mut out = (body.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        out
    };
    let opcodes = [
        1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 100, 101, 102,
        103, 104, 105, 106, 107, -11, 999,
    ];
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut rounds = 0u64;
    let mut handled = 0usize;
    while Instant::now() < deadline {
        rounds += 1;
        let mut stream = if next() % 8 == 0 {
            Vec::new()
        } else {
            frame(&handshake)
        };
        for _ in 0..(next() % 6 + 1) {
            let mut body = Vec::new();
            body.extend_from_slice(&((next() % 1000) as i32).to_be_bytes());
            let op: i32 = opcodes[(next() % opcodes.len() as u64) as usize];
            body.extend_from_slice(&op.to_be_bytes());
            // A plausible prefix (path), then random bytes with random lengths sprinkled in.
            if next() % 2 == 0 {
                let path = ["/", "/a", "/a/b", "", "x", "/a/"][(next() % 6) as usize];
                body.extend_from_slice(&(path.len() as i32).to_be_bytes());
                body.extend_from_slice(path.as_bytes());
            }
            for _ in 0..(next() % 40) {
                match next() % 5 {
                    0 => body.extend_from_slice(&((next() % 8) as i32 - 2).to_be_bytes()),
                    1 => body.extend_from_slice(&(next() as i32).to_be_bytes()),
                    2 => body.push(0),
                    3 => body.push(1),
                    _ => body.push(next() as u8),
                }
            }
            let mut bytes = frame(&body);
            if next() % 10 == 0 {
                // Garble the length prefix or truncate.
                let cut = (next() as usize) % bytes.len();
                bytes.truncate(cut.max(1));
            }
            if next() % 20 == 0 {
                let at = (next() as usize) % bytes.len();
                bytes[at] ^= next() as u8;
            }
            stream.extend_from_slice(&bytes);
        }
        handled += zk_curator_testing::embedded::feed_bytes(&stream);
    }
    assert!(rounds > 1000, "only {rounds} rounds");
    assert!(handled > rounds as usize, "only {handled} frames handled");
}

// ---- 8. fault injection ----

#[tokio::test(flavor = "multi_thread")]
async fn lose_reply_to_next_create() {
    let server = EmbeddedServer::start().await.unwrap();
    let c = connect(&server).await;
    bounded(c.create("/locks", b"", &persistent()))
        .await
        .unwrap();
    let disarmed = server.lose_reply_to_next(RequestMatcher::creates());
    server.disarm();
    bounded(c.create("/locks/unharmed", b"", &persistent()))
        .await
        .unwrap();
    assert!(!disarmed.fired());
    let fault = server.lose_reply_to_next(RequestMatcher::creates().path_contains("_c_"));
    bounded(c.create("/locks/other", b"", &persistent()))
        .await
        .unwrap();
    assert!(!fault.fired());
    let err = bounded(c.create(
        "/locks/_c_1-lock-",
        b"",
        &CreateMode::EphemeralSequential.with_acls(Acls::anyone_all()),
    ))
    .await
    .unwrap_err();
    assert!(
        matches!(err, Error::ConnectionLoss | Error::Custom(_)),
        "{err:?}"
    );
    let lost = bounded(fault.wait(STEP)).await.unwrap();
    assert_eq!(lost.opcode, opcode::CREATE2);
    assert_eq!(lost.error_code, 0);
    assert_eq!(lost.path.as_deref(), Some("/locks/_c_1-lock-"));
    // The create happened; the session survived the lost connection.
    let kids = retrying(|| c.list_children("/locks")).await.unwrap();
    assert!(
        kids.contains(&"_c_1-lock-0000000002".to_owned()),
        "{kids:?}"
    );
    let stat = bounded(c.check_stat("/locks/_c_1-lock-0000000002"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stat.ephemeral_owner, c.session_id().0);
}

#[tokio::test(flavor = "multi_thread")]
async fn stall_stops_answering_for_a_while() {
    let server = EmbeddedServer::start().await.unwrap();
    let c = connect(&server).await;
    server.stall(Duration::from_millis(500));
    let started = Instant::now();
    bounded(c.create("/after-stall", b"", &persistent()))
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(400));
    server.stall(Duration::from_secs(60));
    let pending = c.check_stat("/after-stall");
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.resume();
    assert!(bounded(pending).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_and_restart_keep_data_and_sessions() {
    let server = EmbeddedServer::start().await.unwrap();
    let c = connect(&server).await;
    bounded(c.create("/kept", b"", &ephemeral())).await.unwrap();
    server.stop();
    // The client has seen the server go before it comes back.
    eventually("the client to notice the stop", || async {
        c.state() != SessionState::SyncConnected
    })
    .await;
    server.restart().await.unwrap();
    assert!(retrying(|| c.check_stat("/kept")).await.unwrap().is_some());
    assert_eq!(c.state(), SessionState::SyncConnected);
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

#[tokio::test(flavor = "multi_thread")]
async fn listens_on_a_chosen_port_and_refuses_a_taken_one() {
    // Find a port that is free now, then ask the server for exactly it.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let server = EmbeddedServer::builder().port(port).start().await.unwrap();
    assert_eq!(server.port(), port);
    assert_eq!(server.connect_string(), format!("127.0.0.1:{port}"));
    let client = connect(&server).await;
    bounded(client.create("/chosen", b"", &persistent()))
        .await
        .unwrap();
    // The port is ours now: a second server cannot have it.
    assert!(EmbeddedServer::builder().port(port).start().await.is_err());
}
