//! The simulated ensemble's rules, as a client sees them (`zk_curator_server::ensemble`): a
//! lagging follower serves stale reads until `sync`, a write is answered once its member has
//! applied it, a member refuses a client that has seen a later zxid, sessions move between
//! members (local ones do not) and a write sent before the move is refused (`SessionMoved`),
//! a session's requests are taken in order on a member whatever connection they come on, a
//! new leader keeps every committed write, commits whole an
//! uncommitted one it holds and drops whole one it does not, a crashed member comes back from
//! its log, and a lost reply leaves its write applied.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{bounded, ephemeral, eventually, persistent};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zk_curator_server::ensemble::{Ensemble, EnsembleBuilder};
use zk_curator_server::EmbeddedServer;
use zookeeper_client::{Client, Error};

/// An ensemble whose members serve on ports of their own, and their addresses.
struct World {
    ensemble: Arc<Ensemble>,
    addresses: Vec<SocketAddr>,
}

impl World {
    async fn start(builder: EnsembleBuilder) -> World {
        Self::start_of(builder, 3).await
    }

    async fn start_of(builder: EnsembleBuilder, size: usize) -> World {
        let mut listeners = Vec::new();
        for _ in 0..size {
            listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        let addresses: Vec<SocketAddr> =
            listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        let known = addresses.clone();
        let ensemble = Arc::new(builder.size(size).start(|i| known[i]).unwrap());
        for (member, listener) in listeners.into_iter().enumerate() {
            let ensemble = ensemble.clone();
            tokio::spawn(async move {
                while let Ok((stream, peer)) = listener.accept().await {
                    ensemble.serve_connection(member, stream, peer);
                }
            });
        }
        World {
            ensemble,
            addresses,
        }
    }

    /// A client of `member` alone.
    async fn client(&self, member: usize) -> Client {
        bounded(
            Client::connector()
                .with_session_timeout(Duration::from_secs(10))
                .connect(&self.addresses[member].to_string()),
        )
        .await
        .unwrap()
    }

    /// A client that knows every member (and starts with `member`'s first).
    async fn client_of_all(&self) -> Client {
        let all: Vec<String> = self.addresses.iter().map(ToString::to_string).collect();
        bounded(
            Client::connector()
                .with_session_timeout(Duration::from_secs(10))
                .connect(&all.join(",")),
        )
        .await
        .unwrap()
    }
}

fn builder() -> EnsembleBuilder {
    Ensemble::builder(EmbeddedServer::builder().sorted_children(true))
        .slow_lag(Duration::from_millis(1500), Duration::from_millis(1500))
        .election_time(Duration::from_millis(100), Duration::from_millis(200))
        .sync_limit(Duration::from_secs(5))
}

/// What a member says to a new session's handshake from a client that has seen `zxid`: the
/// length of its answer, `None` if it closed the connection without one.
async fn handshake_with(address: SocketAddr, zxid: i64) -> Option<usize> {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(&connect_frame(zxid, 0, &[0; 16]))
        .await
        .unwrap();
    let mut length = [0u8; 4];
    match bounded(stream.read_exact(&mut length)).await {
        Ok(_) => Some(i32::from_be_bytes(length) as usize),
        Err(_) => None,
    }
}

/// A request body with its length in front, as it goes on the wire.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(body);
    frame
}

/// A handshake from a client that has seen `zxid`, for session `id` (0: a new one) with
/// `password`.
fn connect_frame(zxid: i64, id: i64, password: &[u8; 16]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&0i32.to_be_bytes()); // protocol version
    body.extend_from_slice(&zxid.to_be_bytes()); // last zxid seen
    body.extend_from_slice(&10_000i32.to_be_bytes()); // timeout
    body.extend_from_slice(&id.to_be_bytes()); // the session, or 0 for a new one
    body.extend_from_slice(&16i32.to_be_bytes()); // password
    body.extend_from_slice(password);
    body.push(0); // not read-only
    framed(&body)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lagging_follower_serves_stale_reads_until_sync() {
    let world = World::start(builder()).await;
    let ensemble = &world.ensemble;
    assert_eq!(ensemble.leader(), Some(0));
    let writer = world.client(0).await;
    let reader = world.client(1).await;
    ensemble.slow(1, Duration::from_secs(30));
    bounded(writer.create("/x", b"1", &persistent()))
        .await
        .unwrap();
    // The leader has applied it; the follower not yet: its read is stale.
    assert!(bounded(reader.check_stat("/x")).await.unwrap().is_none());
    assert!(ensemble.zxid_of(1) < ensemble.zxid_of(0));
    // A sync brings it up to the leader's commit point first.
    bounded(reader.sync("/x")).await.unwrap();
    assert!(bounded(reader.check_stat("/x")).await.unwrap().is_some());
    assert_eq!(ensemble.zxid_of(1), ensemble.committed_zxid());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_on_a_follower_is_answered_once_that_follower_applied_it() {
    let world = World::start(builder()).await;
    let ensemble = &world.ensemble;
    let client = world.client(2).await;
    ensemble.slow(2, Duration::from_secs(30));
    let started = tokio::time::Instant::now();
    bounded(client.create("/mine", b"", &persistent()))
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "answered before the slow follower applied it: {:?}",
        started.elapsed()
    );
    // Its own write is there for its next read.
    assert!(bounded(client.check_stat("/mine")).await.unwrap().is_some());
    assert!(world.ensemble.paths_of(2).contains(&"/mine".to_owned()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_held_from_its_leader_answers_sync_only_once_it_hears_again() {
    let world = World::start(builder()).await;
    let ensemble = world.ensemble.clone();
    let writer = world.client(0).await;
    let reader = world.client(1).await;
    ensemble.hold_from_leader(1, true);
    bounded(writer.create("/held", b"", &persistent()))
        .await
        .unwrap();
    assert!(bounded(reader.check_stat("/held")).await.unwrap().is_none());
    let sync = reader.sync("/held");
    let hold = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        ensemble.hold_from_leader(1, false);
        tokio::time::Instant::now()
    });
    bounded(sync).await.unwrap();
    let released = hold.await.unwrap();
    assert!(
        tokio::time::Instant::now() >= released,
        "sync answered during the hold"
    );
    assert!(bounded(reader.check_stat("/held")).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_refuses_a_client_that_has_seen_a_later_zxid() {
    let world = World::start(builder().local_sessions(true)).await;
    let ensemble = &world.ensemble;
    let writer = world.client(0).await;
    ensemble.hold_from_leader(2, true);
    bounded(writer.create("/later", b"", &persistent()))
        .await
        .unwrap();
    let seen = ensemble.zxid_of(0);
    assert!(ensemble.zxid_of(2) < seen);
    assert_eq!(handshake_with(world.addresses[2], seen).await, None);
    assert!(handshake_with(world.addresses[0], seen).await.is_some());
    // A client that has seen no more than the follower is answered there (a local session,
    // which needs no leader).
    assert!(handshake_with(world.addresses[2], ensemble.zxid_of(2))
        .await
        .is_some());
    ensemble.hold_from_leader(2, false);
    eventually("the follower caught up", || async {
        ensemble.zxid_of(2) >= seen
    })
    .await;
    assert!(handshake_with(world.addresses[2], seen).await.is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_global_session_moves_to_another_member_and_keeps_its_ephemeral() {
    let world = World::start(builder()).await;
    let ensemble = world.ensemble.clone();
    let client = world.client_of_all().await;
    let session = client.session_id();
    bounded(client.create("/owned", b"", &ephemeral()))
        .await
        .unwrap();
    // Kill whichever member serves it: the client goes on to another.
    let serving = (0..3)
        .find(|&m| {
            ensemble.paths_of(m).contains(&"/owned".to_owned()) && ensemble.leader() == Some(m)
        })
        .unwrap_or(0);
    ensemble.set_up(serving, false);
    eventually("the ensemble has a leader again", || async {
        ensemble.leader().is_some()
    })
    .await;
    let stat = common::retrying(|| client.check_stat("/owned"))
        .await
        .unwrap();
    assert_eq!(client.session_id(), session);
    assert_eq!(stat.unwrap().ephemeral_owner, session.0);
    ensemble.set_up(serving, true);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_local_session_does_not_move_and_an_ephemeral_makes_it_global() {
    let world = World::start(builder().local_sessions(true)).await;
    let ensemble = &world.ensemble;
    let local = world.client(1).await;
    let id = local.session_id().0;
    assert!(ensemble.session_ids().contains(&id));
    // Another member does not know it.
    let moved = bounded(
        Client::connector()
            .with_session(local.session().clone())
            .with_session_timeout(Duration::from_secs(10))
            .connect(&world.addresses[2].to_string()),
    )
    .await;
    assert!(matches!(moved, Err(Error::SessionExpired)), "{moved:?}");
    // Its first ephemeral node makes it global: then it moves.
    let upgraded = world.client(1).await;
    bounded(upgraded.create("/eph", b"", &ephemeral()))
        .await
        .unwrap();
    bounded(upgraded.sync("/")).await.unwrap();
    let moved = bounded(
        Client::connector()
            .with_session(upgraded.session().clone())
            .with_session_timeout(Duration::from_secs(10))
            .connect(&world.addresses[2].to_string()),
    )
    .await
    .unwrap();
    bounded(moved.sync("/")).await.unwrap();
    let stat = bounded(moved.check_stat("/eph")).await.unwrap().unwrap();
    assert_eq!(stat.ephemeral_owner, upgraded.session_id().0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_leader_keeps_committed_writes_and_drops_an_uncommitted_multi_whole() {
    let world = World::start(builder()).await;
    let ensemble = world.ensemble.clone();
    let writer = world.client(0).await;
    bounded(writer.create("/kept", b"", &persistent()))
        .await
        .unwrap();
    // Committed with follower 1 alone (a quorum of two), follower 2 held: kept.
    ensemble.hold_from_leader(2, true);
    let mut multi = writer.new_multi_writer();
    multi.add_create("/c", b"", &persistent()).unwrap();
    multi.add_create("/d", b"", &persistent()).unwrap();
    bounded(multi.commit()).await.unwrap();
    // Now no follower takes in what the leader sends: a multi stays uncommitted.
    ensemble.hold_from_leader(1, true);
    let sender = writer.clone();
    let pending = tokio::spawn(async move {
        let mut multi = sender.new_multi_writer();
        multi.add_create("/a", b"", &persistent()).unwrap();
        multi.add_create("/b", b"", &persistent()).unwrap();
        multi.commit().await.map(|_| ())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!pending.is_finished(), "committed without a quorum");
    let epoch = ensemble.epoch();
    ensemble.set_up(0, false);
    ensemble.hold_from_leader(1, false);
    ensemble.hold_from_leader(2, false);
    eventually("a new leader", || async { ensemble.leader().is_some() }).await;
    // Member 1 held the first multi, member 2 not: the longest log leads.
    assert_eq!(ensemble.leader(), Some(1));
    assert_eq!(ensemble.epoch(), epoch + 1);
    assert!(
        bounded(pending).await.unwrap().is_err(),
        "the writer was not told of the loss"
    );
    ensemble.set_up(0, true);
    for member in 0..3 {
        eventually("the member caught up", || async {
            ensemble.zxid_of(member) == ensemble.committed_zxid()
        })
        .await;
        let paths = ensemble.paths_of(member);
        for path in ["/kept", "/c", "/d"] {
            assert!(
                paths.contains(&path.to_owned()),
                "member {member} lost {path}: {paths:?}"
            );
        }
        for path in ["/a", "/b"] {
            assert!(
                !paths.contains(&path.to_owned()),
                "member {member} has {path}: {paths:?}"
            );
        }
    }
    // The new epoch's zxids.
    let client = world.client(1).await;
    let stat = bounded(client.create("/after", b"", &persistent()))
        .await
        .unwrap();
    assert_eq!(stat.0.czxid >> 32, epoch + 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_leader_comes_back_from_its_log_with_every_acknowledged_write() {
    let world = World::start(builder()).await;
    let ensemble = world.ensemble.clone();
    let writer = world.client_of_all().await;
    for i in 0..20 {
        bounded(writer.create(&format!("/w{i}"), b"", &persistent()))
            .await
            .unwrap();
    }
    let acknowledged = ensemble.committed_zxid();
    let leader = ensemble.leader().unwrap();
    ensemble.set_up(leader, false);
    eventually("a new leader", || async { ensemble.leader().is_some() }).await;
    assert_ne!(ensemble.leader(), Some(leader));
    common::retrying(|| writer.create("/after", b"", &persistent()))
        .await
        .unwrap();
    ensemble.set_up(leader, true);
    eventually("the old leader caught up", || async {
        ensemble.is_serving(leader) && ensemble.zxid_of(leader) == ensemble.committed_zxid()
    })
    .await;
    assert!(ensemble.committed_zxid() > acknowledged);
    let paths = ensemble.paths_of(leader);
    for i in 0..20 {
        assert!(paths.contains(&format!("/w{i}")), "/w{i} lost: {paths:?}");
    }
    assert!(paths.contains(&"/after".to_owned()));
    // Its tree is the others' (rebuilt, not kept).
    assert_eq!(paths, ensemble.paths_of(ensemble.leader().unwrap()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reply_lost_on_a_member_leaves_its_write_applied() {
    let world = World::start(builder()).await;
    let ensemble = world.ensemble.clone();
    let client = world.client(1).await;
    let lost = ensemble.lose_reply_to_next(
        1,
        zk_curator_server::RequestMatcher::creates().path_contains("/unanswered"),
    );
    let err = bounded(client.create("/unanswered", b"", &persistent()))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ConnectionLoss), "{err:?}");
    let record = lost.wait(Duration::from_secs(5)).await.unwrap();
    assert_eq!(record.error_code, 0);
    assert!(record.zxid > 0);
    // Applied on every member all the same.
    let reader = world.client(2).await;
    bounded(reader.sync("/")).await.unwrap();
    let stat = bounded(reader.check_stat("/unanswered"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stat.czxid, record.zxid);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_the_new_leader_holds_is_committed_whole_though_it_lacked_a_quorum() {
    // Five members: a quorum is three.
    let world = World::start_of(builder(), 5).await;
    let ensemble = world.ensemble.clone();
    let writer = world.client(0).await;
    bounded(writer.create("/before", b"", &persistent()))
        .await
        .unwrap();
    // Only member 1 takes in what the leader sends: the leader and it are two.
    for member in 2..5 {
        ensemble.hold_from_leader(member, true);
    }
    let sender = writer.clone();
    let pending = tokio::spawn(async move {
        let mut multi = sender.new_multi_writer();
        multi.add_create("/x", b"", &persistent()).unwrap();
        multi.add_create("/y", b"", &persistent()).unwrap();
        multi.commit().await.map(|_| ())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!pending.is_finished(), "committed without a quorum");
    assert!(
        !ensemble.paths_of(1).contains(&"/x".to_owned()),
        "applied uncommitted"
    );
    ensemble.set_up(0, false);
    for member in 2..5 {
        ensemble.hold_from_leader(member, false);
    }
    eventually("a new leader", || async { ensemble.leader().is_some() }).await;
    // Member 1 held the multi: it leads, and commits it, whole.
    assert_eq!(ensemble.leader(), Some(1));
    for member in 1..5 {
        eventually("the member caught up", || async {
            ensemble.zxid_of(member) == ensemble.committed_zxid()
        })
        .await;
        let paths = ensemble.paths_of(member);
        for path in ["/before", "/x", "/y"] {
            assert!(
                paths.contains(&path.to_owned()),
                "member {member} lacks {path}: {paths:?}"
            );
        }
    }
    // Its writer, whose member died, did not hear the outcome.
    assert!(bounded(pending).await.unwrap().is_err());
}

/// A raw connection to `address` with session `id` (0: a new one) and its password: the
/// stream, the session's id and password as the member answered (id 0 if refused).
async fn raw_session(
    address: SocketAddr,
    id: i64,
    password: &[u8; 16],
) -> (tokio::net::TcpStream, i64, [u8; 16]) {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(&connect_frame(0, id, password))
        .await
        .unwrap();
    let mut length = [0u8; 4];
    bounded(stream.read_exact(&mut length)).await.unwrap();
    let mut answer = vec![0u8; i32::from_be_bytes(length) as usize];
    bounded(stream.read_exact(&mut answer)).await.unwrap();
    // protocol version, timeout, session id, password (length and bytes).
    let id = i64::from_be_bytes(answer[8..16].try_into().unwrap());
    let password = answer[20..36].try_into().unwrap();
    (stream, id, password)
}

/// Waits until the `old` connection, whose session moved, is closed without an answer to
/// the write it sent, then checks on `member` (synced) that `path` was never made.
async fn refused_unanswered(
    world: &World,
    mut old: tokio::net::TcpStream,
    member: usize,
    path: &str,
) {
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), old.read_to_end(&mut rest)).await;
    assert!(
        read.is_ok(),
        "the old connection was neither answered nor closed"
    );
    assert!(
        rest.is_empty(),
        "the moved session's write was answered: {rest:?}"
    );
    let reader = world.client(member).await;
    bounded(reader.sync("/")).await.unwrap();
    assert_eq!(bounded(reader.check_stat(path)).await.unwrap(), None);
}

/// A `create` request frame (ephemeral, open to anyone) for `path`.
fn create_frame(xid: i32, path: &str) -> Vec<u8> {
    let string = |out: &mut Vec<u8>, s: &str| {
        out.extend_from_slice(&(s.len() as i32).to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    };
    let mut body = Vec::new();
    body.extend_from_slice(&xid.to_be_bytes());
    body.extend_from_slice(&1i32.to_be_bytes()); // create
    string(&mut body, path);
    body.extend_from_slice(&0i32.to_be_bytes()); // no data
    body.extend_from_slice(&1i32.to_be_bytes()); // one ACL:
    body.extend_from_slice(&31i32.to_be_bytes()); // all permissions
    string(&mut body, "world");
    string(&mut body, "anyone");
    body.extend_from_slice(&1i32.to_be_bytes()); // ephemeral
    framed(&body)
}

/// A write still on its way to the member the client has left (here: unread in a stalled
/// member's socket) must not be applied once the session has moved to another member:
/// ZooKeeper's leader refuses it (`SessionMoved`) and closes that connection. Applied, it
/// would make an ephemeral node its client never learns of, kept for as long as the
/// session lives (the simulator's seed 268 on `--ensemble 3`: a lock node nobody held, and
/// every waiter behind it stuck).
#[tokio::test(flavor = "multi_thread")]
async fn a_write_sent_before_its_session_moved_is_refused_not_applied() {
    let world = World::start(builder()).await;
    let ensemble = world.ensemble.clone();
    eventually("the ensemble has a leader", || async {
        ensemble.leader().is_some()
    })
    .await;
    let (mut old, id, password) = raw_session(world.addresses[1], 0, &[0; 16]).await;
    assert_ne!(id, 0);
    ensemble.stall_member(1, Duration::from_secs(2));
    old.write_all(&create_frame(1, "/late")).await.unwrap();
    // The session moves to member 2 while the create waits unread on member 1.
    let (_moved, again, _) = raw_session(world.addresses[2], id, &password).await;
    assert_eq!(again, id, "member 2 did not take the session");
    // Member 1 reads the create once its stall ends: the connection is closed, unanswered.
    refused_unanswered(&world, old, 0, "/late").await;
    for member in 0..3 {
        assert!(!ensemble.paths_of(member).contains(&"/late".to_owned()));
    }
}

/// An `exists` request frame (no watch) for `path`.
fn exists_frame(xid: i32, path: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&xid.to_be_bytes());
    body.extend_from_slice(&3i32.to_be_bytes()); // exists
    body.extend_from_slice(&(path.len() as i32).to_be_bytes());
    body.extend_from_slice(path.as_bytes());
    body.push(0); // no watch
    framed(&body)
}

/// The next reply on a raw connection: its xid and error code.
async fn reply_of(stream: &mut tokio::net::TcpStream) -> (i32, i32) {
    let mut length = [0u8; 4];
    bounded(stream.read_exact(&mut length)).await.unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(length) as usize];
    bounded(stream.read_exact(&mut body)).await.unwrap();
    let xid = i32::from_be_bytes(body[0..4].try_into().unwrap());
    let err = i32::from_be_bytes(body[12..16].try_into().unwrap());
    (xid, err)
}

/// Two followers of the ensemble's leader, once it has one.
async fn followers(ensemble: &Ensemble) -> (usize, usize) {
    eventually("the ensemble has a leader", || async {
        ensemble.leader().is_some()
    })
    .await;
    let leader = ensemble.leader().unwrap();
    let others: Vec<usize> = (0..3).filter(|&m| m != leader).collect();
    (others[0], others[1])
}

/// A session's requests are taken in order on a member whatever connection they come on,
/// as ZooKeeper's commit processor holds them: a client back on the member after its
/// connection died waits for the write it sent on that one, and sees it. (Answered at
/// once from the member's state, its read missed the node it had made, and it made another:
/// the simulator's seed 26 of `--ensemble 3`.)
#[tokio::test(flavor = "multi_thread")]
async fn a_session_back_on_its_member_waits_for_its_write_in_flight() {
    let world = World::start(builder()).await;
    let ensemble = world.ensemble.clone();
    let (follower, _) = followers(&ensemble).await;
    let (mut old, id, password) = raw_session(world.addresses[follower], 0, &[0; 16]).await;
    assert_ne!(id, 0);
    // The follower's writes are committed by the others, and not applied there meanwhile.
    ensemble.hold_from_leader(follower, true);
    old.write_all(&create_frame(1, "/mine")).await.unwrap();
    // The follower has taken the create (the leader has committed it) before the session
    // comes back on a new connection: otherwise the re-attach closes the old connection with
    // the create unread in it, and there is no write in flight to wait for.
    let leader = ensemble.leader().unwrap();
    eventually("the leader applied the follower's create", || async {
        ensemble.paths_of(leader).contains(&"/mine".to_owned())
    })
    .await;
    let (mut again, same, _) = raw_session(world.addresses[follower], id, &password).await;
    assert_eq!(same, id);
    again.write_all(&exists_frame(2, "/mine")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensemble.hold_from_leader(follower, false);
    assert_eq!(
        reply_of(&mut again).await,
        (2, 0),
        "the session's read did not see its own write"
    );
}

/// A local session upgraded by an ephemeral node while its member cannot reach the leader,
/// whose client then re-attaches on another member: the held upgrade, sent when the first
/// member hears its leader again, does not take the session back, and the held write
/// after it is refused as `SessionMoved`.
#[tokio::test(flavor = "multi_thread")]
async fn a_held_upgrade_does_not_take_back_a_session_that_moved() {
    let world = World::start(builder().local_sessions(true)).await;
    let ensemble = world.ensemble.clone();
    let (first, second) = followers(&ensemble).await;
    let (mut old, id, password) = raw_session(world.addresses[first], 0, &[0; 16]).await;
    assert_ne!(id, 0);
    ensemble.cut_off(first, true);
    old.write_all(&create_frame(1, "/held")).await.unwrap();
    // Written and read back: the upgrade is made (and held) before the client moves.
    let mut reads = 0;
    loop {
        let (_moved, again, _) = raw_session(world.addresses[second], id, &password).await;
        if again == id {
            break;
        }
        reads += 1;
        assert!(reads < 50, "the session never became global on {second}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ensemble.cut_off(first, false);
    refused_unanswered(&world, old, second, "/held").await;
}
