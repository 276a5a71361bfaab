//! Server outages, each on a server of the test's own: a waiter survives a
//! killed and restarted server; a connection down for the whole session
//! timeout is declared Lost and a new session is built.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{
    bounded, framework_with, own_server, raw_client, wait_for_participants, LONG_BOUND, PATIENCE,
};
use futures::StreamExt;
use zk_curator::{ConnectionState, Error, InterProcessMutex};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_process_survives_a_killed_and_restarted_server() {
    let Some(server) = own_server().await else {
        return;
    };
    bounded(LONG_BOUND, async move {
        let connect = server.connect_string();
        let slow = |b: zk_curator::FrameworkBuilder| b.session_timeout(Duration::from_secs(20));
        let (fa, fb) = (
            framework_with(&connect, slow).await,
            framework_with(&connect, slow).await,
        );
        let a = InterProcessMutex::new(fa.clone(), "/locks/outage").unwrap();
        let b = InterProcessMutex::new(fb.clone(), "/locks/outage").unwrap();
        let guard = a.lock().await.unwrap();
        let waiter = tokio::spawn(async move {
            let guard = b.lock().await.unwrap();
            guard.release().await.unwrap();
        });
        let raw = raw_client(&connect).await;
        wait_for_participants(&raw, "/locks/outage", 2).await;
        assert!(!waiter.is_finished(), "b must wait while a holds the lock");
        drop(raw);

        let mut states = Box::pin(fa.state_changes());
        server.stop();
        assert_eq!(
            tokio::time::timeout(PATIENCE, states.next()).await.unwrap(),
            Some(ConnectionState::Suspended)
        );
        server.restart_async().await.unwrap();
        assert_eq!(
            tokio::time::timeout(PATIENCE, states.next()).await.unwrap(),
            Some(ConnectionState::Reconnected)
        );
        // The session survived the short outage, but the hold went through
        // a suspension: under the standard policy it stays lost, and its
        // release says so (deleting the node all the same).
        assert!(!guard.is_valid(), "a suspension is latched");
        assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
        tokio::time::timeout(PATIENCE, waiter)
            .await
            .expect("the waiter must get the lock")
            .unwrap();
        fa.close().await;
        fb.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspended_for_the_session_timeout_is_lost_then_a_new_session_is_built() {
    let Some(server) = own_server().await else {
        return;
    };
    bounded(LONG_BOUND, async move {
        let session_timeout = Duration::from_secs(2);
        let fw = framework_with(&server.connect_string(), |b| {
            b.session_timeout(session_timeout)
                .connection_timeout(Duration::from_secs(10))
        })
        .await;
        let mutex = InterProcessMutex::new(fw.clone(), "/locks/lost").unwrap();
        let guard = mutex.lock().await.unwrap();
        let first = fw.session().await.unwrap();
        let mut states = Box::pin(fw.state_changes());

        server.stop();
        assert_eq!(
            tokio::time::timeout(PATIENCE, states.next()).await.unwrap(),
            Some(ConnectionState::Suspended)
        );
        let suspended_at = tokio::time::Instant::now();
        assert!(
            !guard.is_valid(),
            "Suspended is an error state under the standard policy"
        );
        assert_eq!(
            tokio::time::timeout(PATIENCE, states.next()).await.unwrap(),
            Some(ConnectionState::Lost)
        );
        let waited = suspended_at.elapsed();
        // Declared by the framework's own timer, not earlier than the timeout.
        assert!(
            waited >= session_timeout.mul_f64(0.9),
            "Lost after only {waited:?}"
        );
        assert!(fw.current_session().is_none(), "no session while lost");

        server.restart_async().await.unwrap();
        assert_eq!(
            tokio::time::timeout(PATIENCE, states.next()).await.unwrap(),
            Some(ConnectionState::Reconnected)
        );
        let second = fw.session().await.unwrap();
        assert_eq!(second.generation(), first.generation() + 1);
        assert_ne!(second.id(), first.id());
        assert!(!guard.is_valid());
        drop(guard);

        // The lock works on the new session.
        let again = mutex
            .try_lock_for(PATIENCE)
            .await
            .unwrap()
            .expect("lock on the new session");
        assert!(again.is_valid());
        again.release().await.unwrap();
        fw.close().await;
    })
    .await;
}
