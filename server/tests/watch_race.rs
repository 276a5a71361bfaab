//! Regression: a read that leaves a watch races a delete from another session.
//!
//! ZooKeeper applies requests one at a time, and a read that sets a watch is atomic with respect
//! to writes: if the read saw the node, a later delete fires the watch, and the watch's event
//! reaches the reader's connection *after* the read's reply (clients only arm a watcher when the
//! reply arrives, so an event that overtakes the reply is dropped and the waiter hangs; that is
//! the "lost wake-up" of a lock waiter). These tests hammer getData/exists/getChildren with a
//! watch on one connection against deletes of the same nodes on another, and check on the wire
//! that every read that found its node is answered before its node's `NodeDeleted` event, and
//! that the event does come.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use zk_curator_server::EmbeddedServer;

const WAIT: Duration = Duration::from_secs(5);
const ROUNDS: usize = 150;
const NODES: usize = 48;

const CREATE: i32 = 1;
const DELETE: i32 = 2;
const EXISTS: i32 = 3;
const GET_DATA: i32 = 4;
const GET_CHILDREN: i32 = 8;
const PING: i32 = 11;
const NODE_DELETED: i32 = 2;

#[derive(Default)]
struct Body(Vec<u8>);

impl Body {
    fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn bool(mut self, v: bool) -> Self {
        self.0.push(u8::from(v));
        self
    }
    fn bytes(self, v: &[u8]) -> Self {
        let mut s = self.i32(v.len() as i32);
        s.0.extend_from_slice(v);
        s
    }
    fn str(self, v: &str) -> Self {
        self.bytes(v.as_bytes())
    }
    /// Appends this body as one length-prefixed frame to `out`.
    fn frame_into(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.0.len() as i32).to_be_bytes());
        out.extend_from_slice(&self.0);
    }
}

/// One frame from the server, decoded as far as these tests need.
#[derive(Debug)]
enum Frame {
    Reply { xid: i32, err: i32 },
    Event { kind: i32, path: String },
}

struct Conn {
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
}

impl Conn {
    async fn open(cs: &str) -> Conn {
        let stream = TcpStream::connect(cs).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (reader, writer) = stream.into_split();
        let mut conn = Conn { reader, writer };
        let mut out = Vec::new();
        Body::default()
            .i32(0)
            .i64(0)
            .i32(10_000)
            .i64(0)
            .bytes(&[0; 16])
            .bool(false)
            .frame_into(&mut out);
        conn.writer.write_all(&out).await.unwrap();
        let answer = conn.raw_frame().await.expect("no handshake answer");
        assert!(answer.len() >= 20, "short handshake answer");
        conn
    }

    async fn raw_frame(&mut self) -> Option<Vec<u8>> {
        let mut len = [0u8; 4];
        tokio::time::timeout(WAIT, self.reader.read_exact(&mut len))
            .await
            .ok()?
            .ok()?;
        let len = usize::try_from(i32::from_be_bytes(len)).ok()?;
        let mut body = vec![0u8; len];
        tokio::time::timeout(WAIT, self.reader.read_exact(&mut body))
            .await
            .ok()?
            .ok()?;
        Some(body)
    }

    async fn frame(&mut self) -> Option<Frame> {
        let body = self.raw_frame().await?;
        let xid = i32::from_be_bytes(body[0..4].try_into().unwrap());
        let err = i32::from_be_bytes(body[12..16].try_into().unwrap());
        if xid != -1 {
            return Some(Frame::Reply { xid, err });
        }
        let kind = i32::from_be_bytes(body[16..20].try_into().unwrap());
        let n = i32::from_be_bytes(body[24..28].try_into().unwrap()) as usize;
        let path = String::from_utf8(body[28..28 + n].to_vec()).unwrap();
        Some(Frame::Event { kind, path })
    }

    /// Sends `requests` (xid, opcode, body) in one write.
    async fn send(&mut self, requests: Vec<(i32, i32, Body)>) {
        let mut out = Vec::new();
        for (xid, opcode, body) in requests {
            let mut frame = Body::default().i32(xid).i32(opcode);
            frame.0.extend_from_slice(&body.0);
            frame.frame_into(&mut out);
        }
        self.writer.write_all(&out).await.unwrap();
    }

    /// Sends `requests` and waits for one reply each; panics on a failed one.
    async fn call_all(&mut self, requests: Vec<(i32, i32, Body)>) {
        let mut waiting = requests.len();
        self.send(requests).await;
        while waiting > 0 {
            match self.frame().await.expect("reply") {
                Frame::Reply { err, xid } => {
                    assert_eq!(err, 0, "setup request {xid} failed");
                    waiting -= 1;
                }
                Frame::Event { .. } => {}
            }
        }
    }
}

fn create(path: &str) -> Body {
    Body::default()
        .str(path)
        .bytes(b"x")
        .i32(1)
        .i32(31)
        .str("world")
        .str("anyone")
        .i32(0)
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// Hammers reads of `opcode` with a watch (connection A) against deletes of the same nodes
/// (connection B); returns a description of the first violation, if any.
async fn hammer(cs: &str, opcode: i32) -> Result<usize, String> {
    let mut reader = Conn::open(cs).await;
    let mut deleter = Conn::open(cs).await;
    let base = format!(
        "/watch-race-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    );
    deleter.call_all(vec![(1, CREATE, create(&base))]).await;
    let mut fired = 0;
    for round in 0..ROUNDS {
        let paths: Vec<String> = (0..NODES).map(|i| format!("{base}/r{round}-{i}")).collect();
        deleter
            .call_all(
                paths
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (i as i32 + 1, CREATE, create(p)))
                    .collect(),
            )
            .await;
        let reads = paths
            .iter()
            .enumerate()
            .map(|(i, p)| (i as i32 + 1, opcode, Body::default().str(p).bool(true)))
            .collect();
        let deletes = paths
            .iter()
            .enumerate()
            .map(|(i, p)| (i as i32 + 1, DELETE, Body::default().str(p).i32(-1)))
            .collect();
        let read_side = async {
            reader.send(reads).await;
            // Per path: the read's error code once answered, and whether its event came.
            let mut replies: HashMap<String, i32> = HashMap::new();
            let mut events: HashMap<String, usize> = HashMap::new();
            let mut expected_events = None;
            loop {
                if replies.len() == NODES && expected_events == Some(events.len()) {
                    break;
                }
                let Some(frame) = reader.frame().await else {
                    return Err(format!(
                        "round {round}: stalled with {} of {NODES} replies and {} of {:?} \
                         events (a watch event was lost)",
                        replies.len(),
                        events.len(),
                        expected_events
                    ));
                };
                match frame {
                    Frame::Reply { xid, err } => {
                        let path = paths[(xid - 1) as usize].clone();
                        if err == 0 && events.contains_key(&path) {
                            return Err(format!(
                                "round {round}: NodeDeleted for {path} arrived before the \
                                 reply of the read that saw the node"
                            ));
                        }
                        replies.insert(path, err);
                        if replies.len() == NODES {
                            expected_events = Some(replies.values().filter(|e| **e == 0).count());
                        }
                    }
                    Frame::Event { kind, path } => {
                        if kind != NODE_DELETED {
                            return Err(format!("round {round}: unexpected event {kind} {path}"));
                        }
                        if matches!(replies.get(&path), Some(err) if *err != 0) {
                            return Err(format!(
                                "round {round}: NodeDeleted for {path}, whose read found no node"
                            ));
                        }
                        *events.entry(path).or_default() += 1;
                    }
                }
            }
            if let Some((path, n)) = events.iter().find(|(_, n)| **n > 1) {
                return Err(format!("round {round}: {n} events for {path}"));
            }
            Ok(events.len())
        };
        let delete_side = async {
            deleter.send(deletes).await;
            let mut answered = 0;
            while answered < NODES {
                match deleter.frame().await {
                    Some(Frame::Reply { err, xid }) => {
                        assert_eq!(err, 0, "delete {xid} failed");
                        answered += 1;
                    }
                    Some(Frame::Event { .. }) => {}
                    None => panic!("a delete was not answered"),
                }
            }
        };
        let (outcome, ()) = tokio::join!(read_side, delete_side);
        fired += outcome?;
        // Nothing may trail behind: a ping's answer must be the next frame.
        reader.send(vec![(-2, PING, Body::default())]).await;
        match reader.frame().await {
            Some(Frame::Reply { xid: -2, .. }) => {}
            other => {
                return Err(format!(
                    "round {round}: expected the ping reply, got {other:?}"
                ))
            }
        }
    }
    Ok(fired)
}

async fn check(cs: &str, opcode: i32, what: &str) {
    match hammer(cs, opcode).await {
        Ok(fired) => eprintln!("{what}: {fired} watches fired, all in order"),
        Err(violation) => panic!("{what}: {violation}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn get_data_watch_vs_delete_shared_runtime() {
    let server = EmbeddedServer::start().await.unwrap();
    check(&server.connect_string(), GET_DATA, "getData").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exists_watch_vs_delete_shared_runtime() {
    let server = EmbeddedServer::start().await.unwrap();
    check(&server.connect_string(), EXISTS, "exists").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn get_children_watch_vs_delete_shared_runtime() {
    let server = EmbeddedServer::start().await.unwrap();
    check(&server.connect_string(), GET_CHILDREN, "getChildren").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_data_watch_vs_delete_own_runtime() {
    let server = EmbeddedServer::start_blocking().unwrap();
    check(&server.connect_string(), GET_DATA, "getData").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exists_watch_vs_delete_own_runtime() {
    let server = EmbeddedServer::start_blocking().unwrap();
    check(&server.connect_string(), EXISTS, "exists").await;
}

/// The same race through a real client: every `get_and_watch_data` that finds the node must
/// be woken by the other session's delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_watcher_woken_by_delete_from_other_session() {
    let server = EmbeddedServer::start_blocking().unwrap();
    let cs = server.connect_string();
    let watcher = zookeeper_client::Client::connect(&cs).await.unwrap();
    let deleter = zookeeper_client::Client::connect(&cs).await.unwrap();
    let base = format!("/client-race-{}", std::process::id());
    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    deleter.create(&base, b"", &persistent).await.unwrap();
    let mut woken = 0;
    for i in 0..2000 {
        let path = format!("{base}/n{i}");
        deleter.create(&path, b"x", &persistent).await.unwrap();
        let (read, deleted) = tokio::join!(
            watcher.get_and_watch_data(&path),
            deleter.delete(&path, None)
        );
        deleted.unwrap();
        match read {
            Ok((_, _, watch)) => {
                let event = tokio::time::timeout(WAIT, watch.changed())
                    .await
                    .unwrap_or_else(|_| panic!("iteration {i}: watch on {path} never fired"));
                assert_eq!(event.event_type, zookeeper_client::EventType::NodeDeleted);
                woken += 1;
            }
            Err(zookeeper_client::Error::NoNode) => {}
            Err(err) => panic!("iteration {i}: {err}"),
        }
    }
    eprintln!("{woken} watchers woken");
}
