//! ACLs on lock nodes and auto-created parents (Curator's TestLockACLs).
//!
//! Auto-created parents take the ACL provider's ACL, so every test here works
//! under a top-level root of its own ([`common::unique_root`]), never under
//! the `/tests` parent the other tests share.
#![allow(clippy::unwrap_used)]

mod common;

use common::{bounded, framework_with, raw_client, server, unique_root, BOUND};
use zk_curator::framework::zk::{self, Acl, AuthId, Permission};
use zk_curator::{AclProvider, Error, InterProcessMutex, InterProcessReadWriteLock};

fn loopback(permission: Permission) -> Vec<Acl> {
    vec![Acl::new(permission, AuthId::new("ip", "127.0.0.1"))]
}

/// Parents get CREATE|READ, everything at or below a lock path gets ALL.
#[derive(Debug)]
struct ParentsReadOnly {
    lock_path: String,
}

impl AclProvider for ParentsReadOnly {
    fn default_acl(&self) -> Vec<Acl> {
        loopback(Permission::ALL)
    }

    fn acl_for_path(&self, path: &str) -> Vec<Acl> {
        if path.starts_with(&self.lock_path) {
            loopback(Permission::ALL)
        } else {
            loopback(Permission::CREATE | Permission::READ)
        }
    }
}

#[tokio::test]
async fn write_lock_nodes_carry_the_provider_acl_under_a_namespace() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let namespace = unique_root("acl-ns");
        let fw = framework_with(&server.connect_string(), |b| {
            b.namespace(namespace.clone())
                .default_acl(loopback(Permission::ALL))
        })
        .await;
        let rw = InterProcessReadWriteLock::new(fw.clone(), "/bar").unwrap();
        let guard = rw.write_lock().lock().await.unwrap();
        let raw = raw_client(&server.connect_string()).await;
        let (acl, _) = raw.get_acl(&format!("{namespace}/bar")).await.unwrap();
        assert_eq!(acl, loopback(Permission::ALL));
        let (acl, _) = raw
            .get_acl(&format!("{namespace}{}", guard.node().path()))
            .await
            .unwrap();
        assert_eq!(acl, loopback(Permission::ALL));
        guard.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn auto_created_parents_get_their_own_acl() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let root = unique_root("acl-parents");
        let lock_path = format!("{root}/parent/lock");
        let fw = framework_with(&server.connect_string(), |b| {
            b.acl_provider(ParentsReadOnly {
                lock_path: lock_path.clone(),
            })
        })
        .await;
        let mutex = InterProcessMutex::new(fw.clone(), &lock_path).unwrap();
        let guard = mutex.lock().await.unwrap();
        let raw = raw_client(&server.connect_string()).await;
        for parent in [root.clone(), format!("{root}/parent")] {
            let (acl, stat) = raw.get_acl(&parent).await.unwrap();
            assert_eq!(
                acl,
                loopback(Permission::CREATE | Permission::READ),
                "{parent}"
            );
            assert_eq!(stat.ephemeral_owner, 0);
        }
        let (acl, _) = raw.get_acl(&lock_path).await.unwrap();
        assert_eq!(acl, loopback(Permission::ALL));
        let (acl, _) = raw.get_acl(guard.node().path()).await.unwrap();
        assert_eq!(acl, loopback(Permission::ALL));
        // The read-only parents refuse deletes, as their ACL says.
        assert_eq!(
            raw.delete(&format!("{root}/parent"), None).await,
            Err(zk::Error::NoAuth)
        );
        guard.release().await.unwrap();
        fw.close().await;
    })
    .await;
}

#[tokio::test]
async fn a_lock_under_a_parent_we_may_not_create_in_is_a_typed_error() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let root = unique_root("acl-denied");
        let raw = raw_client(&server.connect_string()).await;
        // A parent anyone may read but nobody may create in.
        let read_only = vec![Acl::new(Permission::READ, AuthId::new("world", "anyone"))];
        let read_only = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&read_only));
        raw.create(&root, &[], &read_only).await.unwrap();
        let fw = common::framework(&server.connect_string()).await;
        let mutex = InterProcessMutex::new(fw.clone(), &format!("{root}/lock")).unwrap();
        assert_eq!(mutex.acquire().await, Err(Error::NoAuth));
        assert!(!mutex.is_acquired_in_this_process());
        fw.close().await;
    })
    .await;
}
