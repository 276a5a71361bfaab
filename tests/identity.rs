//! Holder identity: participant nodes carry their creator's host, pid and
//! label unless a recipe is given data of its own.
#![allow(clippy::unwrap_used)]

mod common;

use common::{bounded, children, framework_with, raw_client, server, unique_path, BOUND};
use zk_curator::framework::HolderIdentity;
use zk_curator::{InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2};

#[tokio::test]
async fn participant_nodes_carry_the_holder_identity() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let fw = framework_with(&connect, |b| b.identity_label("nightly-report")).await;
        let raw = raw_client(&connect).await;
        let expected = HolderIdentity::of_this_process(Some("nightly-report"));
        assert_eq!(fw.holder_identity(), Some(&expected));

        // A mutex holder, a waiting semaphore lease and its internal mutex.
        let path = unique_path("identity-mutex");
        let guard = InterProcessMutex::new(fw.clone(), &path)
            .unwrap()
            .lock()
            .await
            .unwrap();
        let (data, _) = raw.get_data(guard.node().path()).await.unwrap();
        assert_eq!(HolderIdentity::parse(&data), Some(expected.clone()));
        guard.release().await.unwrap();
        let sem_path = unique_path("identity-sem");
        let lease = InterProcessSemaphoreV2::new(fw.clone(), &sem_path, 1)
            .unwrap()
            .acquire()
            .await
            .unwrap();
        let (data, _) = raw.get_data(lease.node().path()).await.unwrap();
        assert_eq!(HolderIdentity::parse(&data), Some(expected.clone()));
        lease.release().await.unwrap();

        // A recipe's own data wins.
        let rw_path = unique_path("identity-rw");
        let rw = InterProcessReadWriteLock::with_data(fw.clone(), &rw_path, b"mine").unwrap();
        let read = rw.read_lock().lock().await.unwrap();
        assert_eq!(raw.get_data(read.node().path()).await.unwrap().0, b"mine");
        read.release().await.unwrap();
        fw.close().await;

        // Turned off: no data, as Curator's nodes.
        let quiet = framework_with(&connect, |b| b.holder_identity(false)).await;
        assert!(quiet.holder_identity().is_none());
        let guard = InterProcessMutex::new(quiet.clone(), &path)
            .unwrap()
            .lock()
            .await
            .unwrap();
        assert!(raw
            .get_data(guard.node().path())
            .await
            .unwrap()
            .0
            .is_empty());
        guard.release().await.unwrap();
        assert!(children(&raw, &path).await.is_empty());
        quiet.close().await;
    })
    .await;
}
