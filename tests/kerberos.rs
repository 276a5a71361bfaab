//! Kerberos (SASL GSSAPI) against a real MIT KDC and a real ZooKeeper whose
//! JAAS logs in from a keytab: a missing ticket is a typed authentication
//! error at once; once `kinit` has put a ticket in the credential cache, the
//! framework's next attempt gets a session, and a lock is taken under a
//! `sasl:` ACL that a session without the principal cannot read.
//!
//! Needs the `sasl-gssapi` feature (the system's GSSAPI library):
//! `cargo test --features sasl-gssapi --test kerberos` (CI runs it).
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use zk_curator::{zk, Error, Framework, InterProcessMutex};
use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::{Kdc, ZooKeeperServer};

#[test]
fn a_kerberos_session_locks_under_a_sasl_acl() {
    let test = "a_kerberos_session_locks_under_a_sasl_acl";
    if !Prerequisite::Kdc.check(test) || !Prerequisite::ZooKeeper.check(test) {
        return;
    }
    let kdc = Kdc::start().unwrap();
    // The client's credential cache: empty for now. GSSAPI reads these
    // variables; they are set before any other thread of this test binary
    // exists (its only test, before the runtime starts).
    let ccache = kdc.dir().join("framework-ccache");
    for (key, value) in kdc.env(&ccache) {
        std::env::set_var(key, value);
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(120), async {
            let server = ZooKeeperServer::builder()
                .kerberos(kdc.zookeeper_service())
                .start_async()
                .await
                .unwrap();
            let framework = Framework::builder()
                .connect_string(server.connect_string())
                .session_timeout(Duration::from_secs(6))
                .connection_timeout(Duration::from_secs(10))
                .sasl_gssapi("zookeeper", Some("localhost".to_owned()))
                .default_acl(common::only("sasl", kdc.client_principal()))
                .build()
                .unwrap();
            framework.start().unwrap();

            // No ticket yet: told at once, not after the connection timeout.
            let started = Instant::now();
            let err = framework.session().await.unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Connect {
                        reason: zk_curator::ConnectFailure::Authentication(_),
                        ..
                    }
                ),
                "{err:?}"
            );
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "took {:?}",
                started.elapsed()
            );

            // kinit: the framework keeps trying and now gets a session.
            let fresh = kdc
                .kinit(kdc.client_principal(), kdc.client_password())
                .unwrap();
            std::fs::copy(&fresh, &ccache).unwrap();
            // Waits report the refusal until the next attempt (at most the
            // reconnect back-off away) succeeds.
            let deadline = Instant::now() + Duration::from_secs(20);
            while let Err(err) = framework
                .block_until_connected(Duration::from_secs(5))
                .await
            {
                assert!(Instant::now() < deadline, "no session after kinit: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let mutex = InterProcessMutex::new(framework.clone(), "/kerberos-lock").unwrap();
            let guard = mutex.lock().await.unwrap();
            let node = guard.node().path().to_owned();
            assert_eq!(
                common::acl_of(&framework, &node).await,
                common::only("sasl", kdc.client_principal())
            );
            let anonymous = zk::Client::connector()
                .with_session_timeout(Duration::from_secs(6))
                .connect(&server.connect_string())
                .await
                .unwrap();
            assert_eq!(
                anonymous.get_data(&node).await.unwrap_err(),
                zk::Error::NoAuth,
                "a session without the principal read the lock node"
            );
            guard.release().await.unwrap();
            framework.close().await;
        })
        .await
        .expect("test timed out");
    });
}
