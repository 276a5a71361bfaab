//! The Kerberos harness: a private MIT KDC, `kinit`/`klist` against it, and a real ZooKeeper
//! logging in to it with its keytab.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::kerberos::{CLIENT_PRINCIPAL, REALM, ZOOKEEPER_PRINCIPAL};
use zk_curator_testing::{Error, Kdc, ZooKeeperServer};

fn kdc_available(test: &str) -> bool {
    Prerequisite::Kdc.check(test)
}

#[test]
fn kinit_and_klist_against_the_private_kdc() {
    if !kdc_available("kinit_and_klist_against_the_private_kdc") {
        return;
    }
    let started = Instant::now();
    let kdc = Kdc::start().unwrap();
    eprintln!(
        "KDC set up (realm, principals, keytabs, krb5kdc serving) in {:?}",
        started.elapsed()
    );
    assert!(kdc.is_running());
    assert_eq!(kdc.realm(), REALM);

    // Password.
    let ccache = kdc
        .kinit(kdc.client_principal(), kdc.client_password())
        .unwrap();
    let tickets = kdc.klist(&ccache).unwrap();
    eprintln!("{tickets}");
    assert!(
        tickets.contains(&format!("Default principal: {CLIENT_PRINCIPAL}")),
        "{tickets}"
    );
    assert!(
        tickets.contains(&format!("krbtgt/{REALM}@{REALM}")),
        "{tickets}"
    );

    // Keytab, for the client and for the service ZooKeeper will use.
    let from_keytab = kdc
        .kinit_keytab(kdc.client_principal(), kdc.client_keytab())
        .unwrap();
    assert!(kdc.klist(&from_keytab).unwrap().contains(CLIENT_PRINCIPAL));
    let service = kdc.zookeeper_service();
    let as_service = kdc
        .kinit_keytab(service.principal(), service.keytab())
        .unwrap();
    assert!(kdc
        .klist(&as_service)
        .unwrap()
        .contains(ZOOKEEPER_PRINCIPAL));

    // A wrong password is refused by the KDC.
    let wrong = kdc.kinit(kdc.client_principal(), "not-the-password");
    assert!(matches!(wrong, Err(Error::Command { .. })), "{wrong:?}");

    // Principals added by a test.
    let dave = kdc.add_principal("dave", Some("dave-secret")).unwrap();
    assert_eq!(dave, format!("dave@{REALM}"));
    assert!(kdc
        .klist(&kdc.kinit(&dave, "dave-secret").unwrap())
        .unwrap()
        .contains(&dave));
    let erin = kdc.add_principal("erin", None).unwrap();
    let keytab = kdc.export_keytab(&erin, "erin.keytab").unwrap();
    assert!(kdc
        .klist(&kdc.kinit_keytab(&erin, &keytab).unwrap())
        .unwrap()
        .contains(&erin));
    assert!(kdc.add_principal("x@OTHER.REALM", None).is_err());

    // The environment a GSSAPI client needs.
    let env = kdc.env(&ccache);
    assert_eq!(env[0].0, "KRB5_CONFIG");
    assert_eq!(
        env[1].1.to_string_lossy(),
        format!("FILE:{}", ccache.display())
    );

    // Stopping kills the KDC and closes its port; dropping removes the directory.
    let port = kdc.port();
    let dir = kdc.dir().to_path_buf();
    kdc.stop();
    assert!(!kdc.is_running());
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the KDC port is still open"
    );
    assert!(kdc.kinit(CLIENT_PRINCIPAL, kdc.client_password()).is_err());
    drop(kdc);
    assert!(!dir.exists());
}

#[test]
fn zookeeper_logs_in_with_its_keytab() {
    if !kdc_available("zookeeper_logs_in_with_its_keytab")
        || !common::available("zookeeper_logs_in_with_its_keytab")
    {
        return;
    }
    let kdc = Kdc::start().unwrap();
    let started = Instant::now();
    let server = ZooKeeperServer::builder()
        .kerberos(kdc.zookeeper_service())
        .start()
        .unwrap();
    eprintln!("ZooKeeper with Kerberos started in {:?}", started.elapsed());
    let log = std::fs::read_to_string(server.log_path()).unwrap();
    assert!(log.contains("Server successfully logged in."), "{log}");
    // The KDC issued the service its ticket.
    let kdc_log = std::fs::read_to_string(kdc.log_path()).unwrap();
    let issued = "ISSUE: authtime";
    assert!(
        kdc_log
            .lines()
            .any(|line| line.contains(issued) && line.contains(ZOOKEEPER_PRINCIPAL)),
        "{kdc_log}"
    );
}

#[test]
fn zookeeper_without_its_kdc_fails_to_start() {
    if !kdc_available("zookeeper_without_its_kdc_fails_to_start")
        || !common::available("zookeeper_without_its_kdc_fails_to_start")
    {
        return;
    }
    let kdc = Kdc::start().unwrap();
    kdc.stop();
    let outcome = ZooKeeperServer::builder()
        .kerberos(kdc.zookeeper_service())
        .startup_timeout(Duration::from_secs(20))
        .start();
    let err = outcome.unwrap_err();
    eprintln!("without its KDC: {err}");
    assert!(matches!(
        err,
        Error::ServerExited { .. } | Error::StartTimeout { .. }
    ));
}
