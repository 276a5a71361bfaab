//! `zk-curator server`'s options reach the embedded server: TTL nodes refused by default and
//! allowed with `--extended-types`; `conf` reports `--max-connections` and `--tick`.
#![allow(clippy::unwrap_used, missing_docs)]

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_zk-curator");
/// The bound on each test body.
const TEST_LIMIT: Duration = Duration::from_secs(40);

async fn bounded<F: std::future::Future>(body: F) -> F::Output {
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .expect("test timed out")
}

/// Starts `zk-curator server --port 0` with `extra` options; returns the child and its
/// connect string.
async fn start_server(extra: &[&str]) -> (Child, String) {
    let mut server = Command::new(BIN)
        .args(["server", "--port", "0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = server.stdout.take().unwrap();
    let connect = BufReader::new(stdout)
        .lines()
        .next_line()
        .await
        .unwrap()
        .unwrap();
    (server, connect)
}

#[tokio::test(flavor = "multi_thread")]
async fn server_options_reach_the_server() {
    bounded(async {
        let ttl = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all())
            .with_ttl(Duration::from_secs(60));
        // By default TTL nodes are refused, as by ZooKeeper.
        let (_plain, connect) = start_server(&[]).await;
        let client = zookeeper_client::Client::connect(&connect).await.unwrap();
        let refused = client.create("/ttl", b"", &ttl).await;
        assert!(
            matches!(refused, Err(zookeeper_client::Error::Unimplemented)),
            "{refused:?}"
        );
        drop(client);

        let (_tuned, connect) = start_server(&[
            "--extended-types",
            "--max-connections",
            "7",
            "--tick",
            "50ms",
        ])
        .await;
        let client = zookeeper_client::Client::connect(&connect).await.unwrap();
        let created = client.create("/ttl", b"", &ttl).await;
        assert!(created.is_ok(), "{created:?}");
        // `conf` reports the settings in ZooKeeper's layout.
        let mut conf = tokio::net::TcpStream::connect(&connect).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut conf, b"conf")
            .await
            .unwrap();
        let mut text = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut conf, &mut text)
            .await
            .unwrap();
        assert!(text.contains("maxClientCnxns=7\n"), "{text}");
        assert!(text.contains("tickTime=50\n"), "{text}");
    })
    .await;
}
