//! Bounded memory: a client that pipelines thousands of `getData` of a 1 MB node without
//! reading the replies must not grow the server (ZooKeeper stops reading such a connection;
//! so does the embedded server), and the connection cap turns extra connections away.
//!
//! Prints the process's resident memory (the test process holds the server) before, at the
//! peak, and the growth; run with `--nocapture` to see it.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::time::{Duration, Instant};

use common::{connect_request, frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zk_curator_server::EmbeddedServer;

const NODE_SIZE: usize = 1_000_000;
const REQUESTS: usize = 5_000;
const LIMIT: usize = 4 << 20;

/// Resident set size of this process, from `/proc/self/status` (Linux).
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn get_data(xid: i32, path: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&xid.to_be_bytes());
    body.extend_from_slice(&4i32.to_be_bytes()); // getData
    body.extend_from_slice(&(path.len() as i32).to_be_bytes());
    body.extend_from_slice(path.as_bytes());
    body.push(0); // no watch
    frame(&body)
}

async fn read_frame(stream: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await.unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).await.unwrap();
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_cannot_grow_the_server() {
    let server = EmbeddedServer::builder()
        .max_outstanding_bytes(LIMIT)
        .start()
        .await
        .unwrap();
    let client = zookeeper_client::Client::connect(&server.connect_string())
        .await
        .unwrap();
    let big = vec![7u8; NODE_SIZE];
    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    client.create("/big", &big, &persistent).await.unwrap();
    drop(big);
    let before = rss_bytes();

    let mut stream = TcpStream::connect(server.connect_string()).await.unwrap();
    stream.write_all(&connect_request()).await.unwrap();
    let _ = read_frame(&mut stream).await;
    let (mut reader, mut writer) = stream.into_split();
    // Sending may block once the server stops reading: send from a task of its own.
    let sender = tokio::spawn(async move {
        let mut all = Vec::new();
        for xid in 1..=REQUESTS {
            all.extend(get_data(xid as i32, "/big"));
        }
        writer.write_all(&all).await.unwrap();
        writer
    });

    // The server answers until its unsent replies pass the limit, then stops reading: wait
    // for that, then watch memory for a while.
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.unsent_bytes() <= LIMIT {
        assert!(
            Instant::now() < deadline,
            "the server never queued past the limit"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut peak_rss = 0;
    let mut peak_unsent = 0;
    let watch_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < watch_until {
        peak_unsent = peak_unsent.max(server.unsent_bytes());
        peak_rss = peak_rss.max(rss_bytes().unwrap_or(0));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Other sessions are still served meanwhile.
    tokio::time::timeout(Duration::from_secs(5), client.get_data("/big"))
        .await
        .unwrap()
        .unwrap();
    let growth = before.map(|b| peak_rss.saturating_sub(b));
    println!(
        "slow reader, {REQUESTS} pipelined getData of a {NODE_SIZE}-byte node, limit {LIMIT} B: \
         RSS before {:?} MiB, peak {} MiB, growth {:?} MiB; peak unsent {} KiB",
        before.map(|b| b >> 20),
        peak_rss >> 20,
        growth.map(|g| g >> 20),
        peak_unsent >> 10
    );
    // Unsent replies stay within the limit plus one reply (the one that crossed it).
    assert!(
        peak_unsent <= LIMIT + NODE_SIZE + 1024,
        "unsent {peak_unsent} B"
    );
    if let Some(growth) = growth {
        assert!(growth < 128 << 20, "server grew by {growth} B");
    }

    // Reading resumes the server: the replies keep coming, in order.
    for xid in 1..=200 {
        let mut len = [0u8; 4];
        reader.read_exact(&mut len).await.unwrap();
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
        reader.read_exact(&mut body).await.unwrap();
        assert_eq!(i32::from_be_bytes(body[0..4].try_into().unwrap()), xid);
        assert_eq!(i32::from_be_bytes(body[12..16].try_into().unwrap()), 0);
    }
    drop(reader);
    sender.abort();
}

#[tokio::test]
async fn connections_beyond_the_cap_are_closed() {
    let server = EmbeddedServer::builder()
        .max_connections(2)
        .start()
        .await
        .unwrap();
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(server.connect_string()).await.unwrap();
        stream.write_all(&connect_request()).await.unwrap();
        let _ = read_frame(&mut stream).await;
        open.push(stream);
    }
    let mut extra = TcpStream::connect(server.connect_string()).await.unwrap();
    let _ = extra.write_all(&connect_request()).await;
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), extra.read(&mut buf))
        .await
        .unwrap();
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert_eq!(server.active_connections(), 2);
    // Once one closes, a new one is served again.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.active_connections() > 1 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut again = TcpStream::connect(server.connect_string()).await.unwrap();
    again.write_all(&connect_request()).await.unwrap();
    assert!(read_frame(&mut again).await.len() >= 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_never_reads_is_closed_past_the_hard_cap() {
    let server = EmbeddedServer::builder()
        .max_outstanding_bytes(1024)
        .start()
        .await
        .unwrap();
    // A watcher with a tiny receive buffer: what it does not read piles up in the server.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut watcher = socket.connect(server.address()).await.unwrap();
    watcher.write_all(&connect_request()).await.unwrap();
    let _ = read_frame(&mut watcher).await;
    let mut add_watch = Vec::new();
    add_watch.extend_from_slice(&1i32.to_be_bytes());
    add_watch.extend_from_slice(&106i32.to_be_bytes()); // addWatch
    add_watch.extend_from_slice(&1i32.to_be_bytes());
    add_watch.extend_from_slice(b"/");
    add_watch.extend_from_slice(&1i32.to_be_bytes()); // persistent recursive
    watcher.write_all(&frame(&add_watch)).await.unwrap();
    let _ = read_frame(&mut watcher).await;
    assert_eq!(server.active_connections(), 1);

    // Another session writes; every write notifies the watcher with a ~1 KB event.
    let writer = zookeeper_client::Client::connect(&server.connect_string())
        .await
        .unwrap();
    let path = format!("/{}", "x".repeat(900));
    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    writer.create(&path, b"", &persistent).await.unwrap();
    let mut writes = 0;
    while server.active_connections() > 1 {
        assert!(writes < 20_000, "the watcher was never closed");
        writer.set_data(&path, b"v", None).await.unwrap();
        writes += 1;
    }
    println!("watcher closed after {writes} notifications queued");
    // Far fewer than an unbounded queue would take; and memory stayed bounded meanwhile.
    assert!(server.unsent_bytes() < 1 << 20);
}
