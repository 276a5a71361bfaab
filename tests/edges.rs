//! Safety at the edges of the lock API: a release caught in flight by the
//! loss of its hold, writes over ZooKeeper's packet limit, and a task that
//! asks for a lock it already holds through a guard.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{
    bounded, children, eventually, framework_with, raw_client, requests_with, server, unique_path,
    BOUND, PATIENCE,
};
use zk_curator::{ConnectionState, Error, InterProcessMutex, LockLoss};
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::FaultProxy;

/// A release whose delete is on the wire when the link goes dark returns as
/// soon as the hold is known lost (the framework is `Suspended`), with the
/// same answer as a release begun after the loss, not once the session is
/// declared `Lost`; the node goes with the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_in_flight_returns_once_its_hold_is_lost() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        // A long session: `Lost` comes 8 s after `Suspended` at the
        // earliest, well apart from the prompt answer asked for here.
        let framework = framework_with(&proxy.connect_string(), |b| {
            b.session_timeout(Duration::from_secs(8))
                .connection_timeout(Duration::from_secs(30))
        })
        .await;
        let raw = raw_client(&server.connect_string()).await;
        let path = unique_path("release-in-flight");
        let mutex = InterProcessMutex::new(framework.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        let mut states = framework.state_watcher();

        proxy.clear_traffic();
        proxy.hold_replies(true);
        let release = tokio::spawn(guard.release());
        assert!(
            eventually(PATIENCE, || async {
                requests_with(&proxy, opcode::DELETE) > 0
            })
            .await,
            "the release never sent its delete"
        );
        // The delete's answer never comes: the link goes dark.
        proxy.blackhole(true);
        let suspended = tokio::time::timeout(
            PATIENCE,
            states.wait_for(|s| *s == Some(ConnectionState::Suspended)),
        )
        .await;
        assert!(
            suspended.is_ok(),
            "the framework never saw the link go dark"
        );
        let seen = Instant::now();
        let released = tokio::time::timeout(Duration::from_secs(3), release)
            .await
            .map_err(|_| "the release was still waiting 3 s after the hold was lost");
        let took = seen.elapsed();
        let released = released.unwrap().unwrap();
        assert!(
            matches!(
                released,
                Err(Error::LockLost {
                    reason: LockLoss::ConnectionState(ConnectionState::Suspended),
                    ..
                })
            ),
            "{released:?}"
        );
        assert_ne!(
            framework.state(),
            Some(ConnectionState::Lost),
            "answered only once the session was declared lost ({took:?})"
        );

        // The node goes with the session (or the background cleaner).
        proxy.hold_replies(false);
        proxy.blackhole(false);
        assert!(
            eventually(PATIENCE, || async {
                children(&raw, &path).await.is_empty()
            })
            .await,
            "the released node stayed"
        );
        framework.close().await;
    })
    .await;
}

/// A fenced write longer than ZooKeeper's packet limit is refused before it
/// is sent, naming its size and the limit: the connection stays up and
/// every other hold of the framework stays valid. The largest write that
/// fits is accepted by the server (the sizing is never too small).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_write_is_refused_before_it_is_sent() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let framework = framework_with(&proxy.connect_string(), |b| b).await;
        let raw = raw_client(&server.connect_string()).await;
        let path = unique_path("oversized");
        let data_node = format!("{path}-data");
        let open =
            zk_curator::zk::CreateMode::Persistent.with_acls(zk_curator::zk::Acls::anyone_all());
        raw.create(&data_node, b"", &open).await.unwrap();
        let writer = InterProcessMutex::new(framework.clone(), &format!("{path}/a")).unwrap();
        let bystander = InterProcessMutex::new(framework.clone(), &format!("{path}/b")).unwrap();
        let guard = writer.lock().await.unwrap();
        let other = bystander.lock().await.unwrap();
        let fence = guard.fence().unwrap();

        proxy.clear_traffic();
        let two_mib = vec![b'x'; 2 << 20];
        let refused = fence.set_data(&data_node, &two_mib, None).await;
        let limit = zk_curator::framework::DEFAULT_MAX_PACKET_SIZE;
        match refused {
            Err(Error::RequestTooLarge { size, limit: l }) => {
                assert!(size > two_mib.len(), "{size}");
                assert_eq!(l, limit);
            }
            other => panic!("an oversized write was not refused: {other:?}"),
        }
        assert_eq!(requests_with(&proxy, opcode::MULTI), 0, "it was sent");
        assert!(guard.is_valid() && other.is_valid(), "a hold was lost");
        assert_eq!(framework.state(), Some(ConnectionState::Connected));

        // The largest write that fits, found without I/O, goes through;
        // one byte more does not.
        let fits = |n: usize| {
            fence
                .multi()
                .set_data(&data_node, &two_mib[..n], None)
                .is_ok()
        };
        let (mut low, mut high) = (0, two_mib.len());
        while low + 1 < high {
            let mid = (low + high) / 2;
            if fits(mid) {
                low = mid;
            } else {
                high = mid;
            }
        }
        assert!(low > limit - 200, "the sizing is far too cautious: {low}");
        let mut multi = fence.multi();
        multi.set_data(&data_node, &two_mib[..low], None).unwrap();
        assert!(matches!(
            multi.set_data(&data_node, b"x", None),
            Err(Error::RequestTooLarge { .. })
        ));
        assert_eq!(multi.commit().await.unwrap().len(), 1);
        assert_eq!(raw.get_data(&data_node).await.unwrap().0.len(), low);
        assert!(guard.is_valid() && other.is_valid());
        other
            .fence()
            .unwrap()
            .set_data(&data_node, b"small", None)
            .await
            .unwrap();

        // The same limit holds for node data, and can be set.
        let small = framework_with(&server.connect_string(), |b| b.max_packet_size(4096)).await;
        let labelled = InterProcessMutex::new(small.clone(), &format!("{path}/c")).unwrap();
        let held = labelled.lock().await.unwrap();
        assert!(matches!(
            held.fence()
                .unwrap()
                .set_data(&data_node, &[0; 4096], None)
                .await,
            Err(Error::RequestTooLarge { limit: 4096, .. })
        ));
        assert!(matches!(
            zk_curator::InterProcessSemaphoreV2::with_node_data(
                small.clone(),
                &path,
                1,
                &[0; 4096]
            ),
            Err(Error::RequestTooLarge { limit: 4096, .. })
        ));
        held.release().await.unwrap();
        guard.release().await.unwrap();
        other.release().await.unwrap();
        small.close().await;
        framework.close().await;
    })
    .await;
}

/// A hold answers `is_valid() == false` from the moment the library knows
/// its connection broke: here a raw write of the session (not sized by the
/// framework) makes the server drop the connection, and right after its
/// `ConnectionLoss` the hold is no longer trusted, before the framework's
/// state has had time to follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_is_invalid_as_soon_as_its_connection_is_known_broken() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let framework = framework_with(&server.connect_string(), |b| b).await;
        let path = unique_path("broken-under-a-write");
        let mutex = InterProcessMutex::new(framework.clone(), &path).unwrap();
        let guard = mutex.lock().await.unwrap();
        let client = guard.fence().unwrap().client().unwrap();
        let too_long = vec![0u8; 2 << 20];
        let sent = client.set_data(&path, &too_long, None).await;
        assert!(sent.is_err(), "the server took a 2 MiB request: {sent:?}");
        assert!(!guard.is_valid(), "still valid after the connection broke");
        assert_eq!(
            guard.loss(),
            Some(LockLoss::ConnectionState(ConnectionState::Suspended))
        );
        drop(guard);
        framework.close().await;
    })
    .await;
}
