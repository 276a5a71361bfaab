//! One embedded server, started on its own runtime and kept in a `static`, serves tests that
//! each run their own tokio runtime.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::OnceLock;
use std::time::Duration;

use zk_curator_server::EmbeddedServer;
use zookeeper_client::{Acls, Client, CreateMode};

fn shared() -> &'static EmbeddedServer {
    static SERVER: OnceLock<EmbeddedServer> = OnceLock::new();
    SERVER.get_or_init(|| EmbeddedServer::start_blocking().unwrap())
}

async fn round_trip(name: &str) {
    let client = tokio::time::timeout(
        Duration::from_secs(10),
        Client::connect(&shared().connect_string()),
    )
    .await
    .unwrap()
    .unwrap();
    let path = format!("/{name}");
    client
        .create(
            &path,
            b"",
            &CreateMode::Ephemeral.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();
    assert!(client.check_stat(&path).await.unwrap().is_some());
}

#[tokio::test]
async fn first_runtime() {
    round_trip("first").await;
}

#[tokio::test]
async fn second_runtime() {
    round_trip("second").await;
}

#[test]
fn from_plain_threads() {
    let server = EmbeddedServer::builder()
        .tick_time(Duration::from_millis(50))
        .start_blocking()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), async {
            let client = Client::connect(&server.connect_string()).await.unwrap();
            client.sync("/").await.unwrap();
        })
        .await
        .unwrap();
    });
    drop(server);
}
