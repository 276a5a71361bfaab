//! The framework against a real ZooKeeper: connection states, session
//! expiry and replacement, protected create with a lost reply, retries and
//! builder validation.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    bounded, children, eventually, framework, framework_with, notifications_delivered, raw_client,
    server, unique_path, unique_root, BOUND, PATIENCE,
};
use futures::StreamExt;
use zk_curator::framework::zk;
use zk_curator::{ConnectFailure, ConnectionState, Error, Framework, InterProcessMutex, LockLoss};
use zk_curator_testing::{FaultProxy, RequestMatcher};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_expiry_while_holding_reports_lost_and_builds_a_new_session() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("expiry-holding");
        let holder_fw = framework(&server.connect_string()).await;
        let other_fw = framework(&server.connect_string()).await;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let listener = {
            let seen = seen.clone();
            holder_fw.add_listener(move |state| seen.lock().unwrap().push(state))
        };
        let mut stream = Box::pin(holder_fw.state_changes());

        let holder = InterProcessMutex::new(holder_fw.clone(), &path).unwrap();
        let other = InterProcessMutex::new(other_fw.clone(), &path).unwrap();
        let guard = holder.lock().await.unwrap();
        assert!(guard.is_valid());
        let first_session = holder_fw.session().await.unwrap();
        assert_eq!(first_session.generation(), 1);

        zk_curator_testing::expire_session(&server.connect_string(), first_session.client())
            .await
            .unwrap();

        // Attaching the second connection drops ours first (Suspended, and our
        // client may briefly win the session back: Reconnected); once the server
        // closes the session the reconnect is answered "expired" (Lost) and the
        // framework builds a new session (Reconnected).
        let mut streamed = Vec::new();
        while !streamed.ends_with(&[ConnectionState::Lost, ConnectionState::Reconnected]) {
            let next = tokio::time::timeout(PATIENCE, stream.next())
                .await
                .unwrap()
                .unwrap();
            streamed.push(next);
            // On a loaded machine the expiry helper may need a few rounds
            // (each a Suspended + Reconnected) before its close lands first.
            assert!(streamed.len() < 60, "{streamed:?}");
        }
        let second_session = holder_fw.session().await.unwrap();
        assert_eq!(second_session.generation(), 2);
        assert_ne!(second_session.id(), first_session.id());
        assert!(
            !guard.is_valid(),
            "a hold from the lost session is not valid"
        );

        // The lock went with the old session: another session gets it.
        let theirs = other
            .try_lock_for(PATIENCE)
            .await
            .unwrap()
            .expect("the lock must be free");
        assert!(theirs.fencing_token() > guard.fencing_token());
        theirs.release().await.unwrap();
        // Releasing the dead hold returns at once, saying it was lost.
        let started = std::time::Instant::now();
        assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "no wait for a session"
        );
        // Callbacks saw the same sequence.
        assert!(
            eventually(PATIENCE, || async { *seen.lock().unwrap() == streamed }).await,
            "listener saw {:?}, stream saw {streamed:?}",
            seen.lock().unwrap()
        );
        drop(listener);
        holder_fw.close().await;
        other_fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn protected_create_with_a_lost_reply_leaves_exactly_one_node() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("lost-reply");
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework(&proxy.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let raw = raw_client(&server.connect_string()).await;
        // Create the parent first so the faulted create is the lock node's.
        raw.mkdir(
            &path,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();

        let fault = proxy.lose_reply_to_next(RequestMatcher::creates().path_contains("_c_"));
        let guard = tokio::time::timeout(PATIENCE, mutex.lock())
            .await
            .unwrap()
            .unwrap();
        assert!(fault.fired(), "the create's reply was lost");
        assert!(proxy.accepted_connections() >= 2, "the client reconnected");

        let nodes = children(&raw, &path).await;
        assert_eq!(
            nodes.len(),
            1,
            "one node, adopted after the lost reply: {nodes:?}"
        );
        assert_eq!(guard.node().path(), format!("{path}/{}", nodes[0]));
        let stat = raw.check_stat(guard.node().path()).await.unwrap().unwrap();
        assert_eq!(guard.fencing_token().get(), stat.czxid);
        assert_eq!(
            stat.ephemeral_owner,
            fw.session().await.unwrap().id(),
            "same session"
        );
        guard.release().await.unwrap();
        assert!(children(&raw, &path).await.is_empty());
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn dropped_connections_keep_the_session_and_the_lock() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("blip");
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework_with(&proxy.connect_string(), |b| {
            b.session_timeout(Duration::from_secs(8))
        })
        .await;
        let mut states = Box::pin(fw.state_changes());
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        let session = fw.session().await.unwrap();

        proxy.drop_connections();
        let next = tokio::time::timeout(PATIENCE, states.next()).await.unwrap();
        assert_eq!(next, Some(ConnectionState::Suspended));
        assert!(
            !guard.is_valid(),
            "Suspended is an error state under the standard policy"
        );
        let next = tokio::time::timeout(PATIENCE, states.next()).await.unwrap();
        assert_eq!(next, Some(ConnectionState::Reconnected));
        assert_eq!(
            fw.session().await.unwrap().id(),
            session.id(),
            "same session"
        );
        // The hold went through a suspension: it stays lost (its holder may
        // have stopped), although the node survived.
        assert!(!guard.is_valid(), "a loss is latched");
        assert_eq!(
            guard.loss(),
            Some(LockLoss::ConnectionState(ConnectionState::Suspended))
        );
        let raw = raw_client(&server.connect_string()).await;
        assert!(
            raw.check_stat(guard.node().path()).await.unwrap().is_some(),
            "the lock node survived"
        );
        let node = guard.node().path().to_owned();
        assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
        assert!(
            raw.check_stat(&node).await.unwrap().is_none(),
            "deleted anyway"
        );
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn call_with_retry_runs_on_the_current_session() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let fw = framework(&server.connect_string()).await;
        let path = unique_path("call");
        let created = fw
            .call_with_retry(|client| {
                let path = path.clone();
                async move {
                    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                    client.mkdir(&path, &options).await?;
                    client.check_stat(&path).await
                }
            })
            .await
            .unwrap();
        assert!(created.is_some());
        // Semantic errors are returned as typed errors, not retried.
        let err = fw
            .call_with_retry(|client| {
                let path = path.clone();
                async move { client.delete(&format!("{path}/missing"), None).await }
            })
            .await
            .unwrap_err();
        assert!(matches!(err, Error::NoNode { .. }), "{err:?}");
        fw.close().await;
        let err = fw
            .call_with_retry(|client| async move { client.check_stat("/").await })
            .await
            .unwrap_err();
        assert_eq!(err, Error::Closed);
    })
    .await;
}

#[tokio::test]
async fn builder_refuses_bad_settings() {
    let err = Framework::builder().build().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let err = Framework::builder()
        .connect_string("  ")
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    let err = Framework::builder()
        .connect_string("127.0.0.1:1/chroot")
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    let err = Framework::builder()
        .connect_string("127.0.0.1:1")
        .session_timeout(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    for namespace in ["bad//ns", "/zookeeper", "/trailing/"] {
        let err = Framework::builder()
            .connect_string("127.0.0.1:1")
            .namespace(namespace)
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::InvalidPath(_)), "{namespace}: {err}");
    }
    let err = Framework::builder()
        .connect_string("127.0.0.1:1")
        .default_acl(Vec::new())
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
}

#[tokio::test]
async fn unreachable_ensemble_times_out_cleanly() {
    // A port nobody listens on: bind one, then close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let fw = Framework::builder()
        .connect_string(format!("127.0.0.1:{port}"))
        .session_timeout(Duration::from_secs(2))
        .connection_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    fw.start().unwrap();
    // Named as what it is, but only at the timeout: a server may be
    // restarting there.
    let refused = Error::Connect {
        endpoint: format!("tcp://127.0.0.1:{port}"),
        reason: ConnectFailure::ConnectionRefused,
    };
    let began = std::time::Instant::now();
    assert_eq!(
        fw.block_until_connected(Duration::from_millis(700)).await,
        Err(refused.clone())
    );
    assert!(began.elapsed() >= Duration::from_millis(700));
    assert_eq!(fw.session().await.err(), Some(refused.clone()));
    let mutex = InterProcessMutex::new(fw.clone(), "/locks/unreachable").unwrap();
    assert_eq!(mutex.acquire().await.err(), Some(refused));
    assert_eq!(fw.state(), None);
    fw.close().await;
    assert!(fw.is_closed());
    assert!(matches!(fw.start(), Err(Error::Closed)));
}

#[tokio::test]
async fn digest_auth_and_creator_acl() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        // A root of its own: parents it creates get the creator-only ACL.
        let path = unique_root("acl");
        let fw = framework_with(&server.connect_string(), |b| {
            b.digest_auth("alice", "secret")
                .default_acl(zk::Acls::creator_all().to_vec())
        })
        .await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        // A session without alice's credentials cannot touch the lock node.
        let raw = raw_client(&server.connect_string()).await;
        assert_eq!(
            raw.delete(guard.node().path(), None).await,
            Err(zk::Error::NoAuth)
        );
        assert_eq!(
            raw.get_acl(guard.node().path()).await.unwrap_err(),
            zk::Error::NoAuth
        );
        let alice = fw.client().await.unwrap();
        let (acl, _) = alice.get_acl(guard.node().path()).await.unwrap();
        assert_eq!(acl.len(), 1);
        assert_eq!(acl[0].scheme(), "digest");
        guard.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_acquire_is_one_round_trip() {
    use zk_curator_testing::proxy::opcode;
    use zk_curator_testing::Traffic;
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("one-rtt");
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = framework(&proxy.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        // Keep the (container) parent alive while we measure.
        let keeper = InterProcessMutex::new(fw.clone(), &format!("{path}/keeper")).unwrap();
        let keep = keeper.lock().await.unwrap();

        // With every reply held back, a client that waited for the create's
        // reply before listing would send one request and stall. Ours sends both.
        proxy.clear_traffic();
        proxy.hold_replies(true);
        let acquiring = {
            let mutex = mutex.clone();
            tokio::spawn(async move { mutex.lock().await })
        };
        let requests = |traffic: &[Traffic]| -> Vec<(i32, i32)> {
            traffic
                .iter()
                .filter_map(|t| match t {
                    Traffic::Request { xid, opcode, .. } => Some((*xid, *opcode)),
                    Traffic::Reply { .. } => None,
                })
                .collect()
        };
        // Both requests were sent, and the server has answered both (the
        // proxy records the replies it holds back): the client has had
        // everything it needs, only not seen it.
        let replies = |traffic: &[Traffic]| {
            traffic
                .iter()
                .filter(|t| matches!(t, Traffic::Reply { .. }))
                .count()
        };
        let both_sent = eventually(PATIENCE, || async {
            let traffic = proxy.traffic();
            requests(&traffic).len() >= 2 && replies(&traffic) >= 2
        })
        .await;
        let held = proxy.traffic();
        proxy.hold_replies(false);
        let guard = tokio::time::timeout(PATIENCE, acquiring)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(
            both_sent,
            "the listing waited for the create's reply: {held:?}"
        );
        let sent = requests(&held);
        assert_eq!(sent.len(), 2, "{held:?}");
        assert!(opcode::CREATES.contains(&sent[0].1), "{held:?}");
        assert!(
            matches!(sent[1].1, opcode::GET_CHILDREN | opcode::GET_CHILDREN2),
            "{held:?}"
        );
        // And that was all the acquire needed: nothing more was sent, while
        // the replies were held or after (the acquire has returned, so
        // anything it sent is recorded).
        assert_eq!(requests(&proxy.traffic()).len(), 2, "{:?}", proxy.traffic());
        guard.release().await.unwrap();
        keep.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn lost_signal_fires_for_each_reason() {
    use zk_curator::ErrorPolicy;
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let path = unique_path("lost-signal");
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let raw = raw_client(&server.connect_string()).await;

        // Node deleted by someone else.
        let fw = framework(&proxy.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        let lost = guard.lost();
        tokio::pin!(lost);
        // Every notification the session had coming has been handled.
        notifications_delivered(std::slice::from_ref(&fw), &path).await;
        assert!(
            futures::FutureExt::now_or_never(&mut lost).is_none(),
            "still held"
        );
        raw.delete(guard.node().path(), None).await.unwrap();
        assert_eq!(
            tokio::time::timeout(PATIENCE, &mut lost).await.unwrap(),
            LockLoss::NodeDeleted
        );
        drop(guard);

        // A connection blip is a loss under the standard policy...
        let guard = mutex.lock().await.unwrap();
        let lost = guard.lost();
        proxy.drop_connections();
        assert_eq!(
            tokio::time::timeout(PATIENCE, lost).await.unwrap(),
            LockLoss::ConnectionState(ConnectionState::Suspended)
        );
        fw.block_until_connected(PATIENCE).await.unwrap();
        let node = guard.node().path().to_owned();
        // Released after its loss: the node is deleted, and the result says so.
        assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
        let raw = raw_client(&server.connect_string()).await;
        assert!(raw.check_stat(&node).await.unwrap().is_none());
        fw.close().await;

        // ...but not under the session policy, where only expiry counts.
        let fw = framework_with(&proxy.connect_string(), |b| {
            b.error_policy(ErrorPolicy::Session)
        })
        .await;
        let mutex = InterProcessMutex::new(fw.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        let lost = guard.lost();
        tokio::pin!(lost);
        let mut states = Box::pin(fw.state_changes());
        proxy.drop_connections();
        assert_eq!(
            tokio::time::timeout(PATIENCE, states.next()).await.unwrap(),
            Some(ConnectionState::Suspended)
        );
        assert_eq!(
            tokio::time::timeout(PATIENCE, states.next()).await.unwrap(),
            Some(ConnectionState::Reconnected)
        );
        notifications_delivered(std::slice::from_ref(&fw), &path).await;
        assert!(
            futures::FutureExt::now_or_never(&mut lost).is_none(),
            "a blip is not a loss"
        );
        assert!(guard.is_valid());
        let client = fw.client().await.unwrap();
        zk_curator_testing::expire_session(&server.connect_string(), &client)
            .await
            .unwrap();
        let reason = tokio::time::timeout(PATIENCE, &mut lost).await.unwrap();
        assert!(
            matches!(
                reason,
                LockLoss::ConnectionState(ConnectionState::Lost)
                    | LockLoss::SessionReplaced
                    | LockLoss::NodeDeleted
            ),
            "{reason:?}"
        );
        drop(guard);

        // Closing the framework.
        fw.block_until_connected(PATIENCE).await.unwrap();
        let guard = mutex.lock().await.unwrap();
        let lost = guard.lost();
        fw.close().await;
        assert_eq!(
            tokio::time::timeout(PATIENCE, lost).await.unwrap(),
            LockLoss::Closed
        );
    })
    .await;
}
