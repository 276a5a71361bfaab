//! Raw-protocol conformance: hand-built requests that no well-behaved client sends (bad flags,
//! bad ACLs, unknown opcodes, truncated bodies, special paths, odd combinations) go to the
//! embedded server and to a real ZooKeeper on fresh connections; the replies (error codes,
//! bodies, whether the connection is closed) must match.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::{EmbeddedServer, ZooKeeperServer};

const WAIT: Duration = Duration::from_secs(3);

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
    fn acl(self, perms: i32, scheme: &str, id: &str) -> Self {
        self.i32(1).i32(perms).str(scheme).str(id)
    }
    fn anyone(self) -> Self {
        self.acl(31, "world", "anyone")
    }
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

async fn read_frame(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    tokio::time::timeout(WAIT, stream.read_exact(&mut len))
        .await
        .ok()?
        .ok()?;
    let len = i32::from_be_bytes(len);
    let mut body = vec![0u8; usize::try_from(len).ok()?];
    tokio::time::timeout(WAIT, stream.read_exact(&mut body))
        .await
        .ok()?
        .ok()?;
    Some(body)
}

/// How much of a reply body is comparable between servers.
#[derive(Clone, Copy)]
enum Cmp {
    /// Every byte.
    Exact,
    /// The leading path string only (create replies carry a stat with zxids and times after).
    Path,
    /// Every byte of the first reply; what follows is timing-dependent (a close).
    First,
}

/// Sends one request (type `op`, body `body`) on a fresh session, then a ping; returns what
/// came back, rendered comparably.
async fn case(cs: &str, op: i32, body: Body, cmp: Cmp) -> String {
    let mut stream = TcpStream::connect(cs).await.unwrap();
    let handshake = Body::default()
        .i32(0)
        .i64(0)
        .i32(10_000)
        .i64(0)
        .bytes(&[0; 16])
        .bool(false);
    stream.write_all(&frame(&handshake.0)).await.unwrap();
    let connect = read_frame(&mut stream).await.expect("no handshake answer");
    assert!(connect.len() >= 20);
    let mut request = Body::default().i32(7).i32(op).0;
    request.extend_from_slice(&body.0);
    let mut bytes = frame(&request);
    bytes.extend(frame(&Body::default().i32(-2).i32(11).0));
    stream.write_all(&bytes).await.unwrap();
    let mut out = Vec::new();
    loop {
        let Some(reply) = read_frame(&mut stream).await else {
            out.push("closed".to_owned());
            break;
        };
        let xid = i32::from_be_bytes(reply[0..4].try_into().unwrap());
        let zxid = i64::from_be_bytes(reply[4..12].try_into().unwrap());
        let err = i32::from_be_bytes(reply[12..16].try_into().unwrap());
        let rest = &reply[16..];
        let shown = match (xid, cmp) {
            (-1 | -2, _) | (_, Cmp::Exact | Cmp::First) => format!("{rest:?}"),
            (_, Cmp::Path) if rest.len() >= 4 => {
                let n = i32::from_be_bytes(rest[0..4].try_into().unwrap()).max(0) as usize;
                format!(
                    "path {:?} +{}",
                    String::from_utf8_lossy(&rest[4..(4 + n).min(rest.len())]),
                    rest.len().saturating_sub(4 + n)
                )
            }
            (_, Cmp::Path) => format!("len {}", rest.len()),
        };
        let zxid = match zxid {
            0 => "0",
            -1 => "-1",
            _ => "n",
        };
        out.push(format!("xid {xid} zxid {zxid} err {err} {shown}"));
        if xid == -2 || matches!(cmp, Cmp::First) {
            break;
        }
    }
    out.join(" | ")
}

fn cases() -> Vec<(&'static str, i32, Body, Cmp)> {
    vec![
        (
            "setup /raw",
            15,
            Body::default().str("/raw").bytes(b"").anyone().i32(0),
            Cmp::Path,
        ),
        (
            "bad flags",
            15,
            Body::default().str("/raw/x").bytes(b"").anyone().i32(7),
            Cmp::Exact,
        ),
        (
            "no slash",
            15,
            Body::default().str("noslash").bytes(b"").anyone().i32(0),
            Cmp::Exact,
        ),
        (
            "double slash",
            15,
            Body::default().str("/raw//x").bytes(b"").anyone().i32(0),
            Cmp::Exact,
        ),
        (
            "trailing slash",
            15,
            Body::default().str("/raw/").bytes(b"").anyone().i32(0),
            Cmp::Exact,
        ),
        (
            "sequential trailing slash",
            15,
            Body::default().str("/raw/").bytes(b"").anyone().i32(2),
            Cmp::Path,
        ),
        (
            "empty acl",
            15,
            Body::default().str("/raw/e").bytes(b"").i32(0).i32(0),
            Cmp::Exact,
        ),
        (
            "bad digest acl",
            15,
            Body::default()
                .str("/raw/d")
                .bytes(b"")
                .acl(31, "digest", "nocolon")
                .i32(0),
            Cmp::Exact,
        ),
        (
            "unknown scheme acl",
            15,
            Body::default()
                .str("/raw/u")
                .bytes(b"")
                .acl(31, "nope", "x")
                .i32(0),
            Cmp::Exact,
        ),
        (
            "ip acl",
            15,
            Body::default()
                .str("/raw/ip")
                .bytes(b"")
                .acl(31, "ip", "127.0.0.1")
                .i32(0),
            Cmp::Path,
        ),
        (
            "auth acl unauthenticated",
            15,
            Body::default()
                .str("/raw/a")
                .bytes(b"")
                .acl(31, "auth", "")
                .i32(0),
            Cmp::Exact,
        ),
        (
            "ttl zero",
            21,
            Body::default()
                .str("/raw/t0")
                .bytes(b"")
                .anyone()
                .i32(5)
                .i64(0),
            Cmp::Exact,
        ),
        (
            "ttl without ttl mode",
            21,
            Body::default()
                .str("/raw/t1")
                .bytes(b"")
                .anyone()
                .i32(0)
                .i64(100),
            Cmp::Exact,
        ),
        (
            "ttl mode via create2",
            15,
            Body::default().str("/raw/t2").bytes(b"").anyone().i32(5),
            Cmp::Exact,
        ),
        (
            "old create",
            1,
            Body::default().str("/raw/c1").bytes(b"").anyone().i32(0),
            Cmp::Exact,
        ),
        (
            "container with flags 0",
            19,
            Body::default().str("/raw/box").bytes(b"").anyone().i32(0),
            Cmp::Path,
        ),
        (
            "delete root",
            2,
            Body::default().str("/").i32(-1),
            Cmp::Exact,
        ),
        (
            "delete /zookeeper",
            2,
            Body::default().str("/zookeeper").i32(-1),
            Cmp::Exact,
        ),
        (
            "delete relative",
            2,
            Body::default().str("raw").i32(-1),
            Cmp::Exact,
        ),
        (
            "deleteContainer on persistent",
            20,
            Body::default().str("/raw/c1"),
            Cmp::Exact,
        ),
        (
            "deleteContainer missing",
            20,
            Body::default().str("/raw/none"),
            Cmp::Exact,
        ),
        (
            "exists with nul",
            3,
            Body::default().str("/raw\0x").bool(false),
            Cmp::Exact,
        ),
        (
            "exists /zookeeper",
            3,
            Body::default().str("/zookeeper").bool(false),
            Cmp::Exact,
        ),
        (
            "getData relative",
            4,
            Body::default().str("raw").bool(false),
            Cmp::Exact,
        ),
        (
            "getData truncated",
            4,
            Body::default().str("/raw"),
            Cmp::Exact,
        ),
        (
            "getData /zookeeper/quota",
            4,
            Body::default().str("/zookeeper/quota").bool(true),
            Cmp::Exact,
        ),
        (
            "children2 /zookeeper",
            12,
            Body::default().str("/zookeeper").bool(false),
            Cmp::Exact,
        ),
        (
            "getACL config",
            6,
            Body::default().str("/zookeeper/config"),
            Cmp::Exact,
        ),
        (
            "setACL bad version",
            7,
            Body::default().str("/raw").anyone().i32(5),
            Cmp::Exact,
        ),
        (
            "setACL empty",
            7,
            Body::default().str("/raw").i32(0).i32(-1),
            Cmp::Exact,
        ),
        (
            "check alone",
            13,
            Body::default().str("/raw").i32(-1),
            Cmp::Exact,
        ),
        (
            "check alone bad version",
            13,
            Body::default().str("/raw").i32(5),
            Cmp::Exact,
        ),
        (
            "check alone missing",
            13,
            Body::default().str("/none").i32(-1),
            Cmp::Exact,
        ),
        (
            "sync missing",
            9,
            Body::default().str("/nonexistent"),
            Cmp::Exact,
        ),
        ("whoAmI", 107, Body::default(), Cmp::Exact),
        (
            "checkWatches none",
            17,
            Body::default().str("/raw").i32(2),
            Cmp::Exact,
        ),
        (
            "removeWatches none",
            18,
            Body::default().str("/raw").i32(3),
            Cmp::Exact,
        ),
        (
            "addWatch persistent",
            106,
            Body::default().str("/raw").i32(0),
            Cmp::Exact,
        ),
        (
            "getEphemerals null",
            103,
            Body::default().i32(-1),
            Cmp::Exact,
        ),
        (
            "allChildren missing",
            104,
            Body::default().str("/nope"),
            Cmp::Exact,
        ),
        (
            "allChildren /zookeeper",
            104,
            Body::default().str("/zookeeper"),
            Cmp::Exact,
        ),
        ("unknown opcode", 999, Body::default(), Cmp::First),
        (
            "reconfig",
            16,
            Body::default().i32(-1).i32(-1).i32(-1).i64(-1),
            Cmp::Exact,
        ),
        (
            "setWatches fire at once",
            101,
            Body::default()
                .i64(0)
                .i32(2)
                .str("/nope")
                .str("/raw")
                .i32(1)
                .str("/zookeeper")
                .i32(1)
                .str("/gone"),
            Cmp::Exact,
        ),
        (
            "multiRead with a write",
            22,
            Body::default()
                .i32(1)
                .bool(false)
                .i32(-1)
                .str("/raw/mr")
                .bytes(b"")
                .anyone()
                .i32(0)
                .i32(-1)
                .bool(true)
                .i32(-1),
            Cmp::Exact,
        ),
        (
            "multi check then delete root",
            14,
            Body::default()
                .i32(13)
                .bool(false)
                .i32(-1)
                .str("/raw")
                .i32(-1)
                .i32(2)
                .bool(false)
                .i32(-1)
                .str("/")
                .i32(-1)
                .i32(-1)
                .bool(true)
                .i32(-1),
            Cmp::Exact,
        ),
        (
            "multi old create",
            14,
            Body::default()
                .i32(1)
                .bool(false)
                .i32(-1)
                .str("/raw/mc")
                .bytes(b"")
                .anyone()
                .i32(0)
                .i32(-1)
                .bool(true)
                .i32(-1),
            Cmp::Exact,
        ),
        (
            "multi with a read",
            14,
            Body::default()
                .i32(4)
                .bool(false)
                .i32(-1)
                .str("/raw")
                .bool(false)
                .i32(-1)
                .bool(true)
                .i32(-1),
            Cmp::Exact,
        ),
        (
            "multi with setACL",
            14,
            Body::default()
                .i32(7)
                .bool(false)
                .i32(-1)
                .str("/raw")
                .anyone()
                .i32(-1)
                .i32(-1)
                .bool(true)
                .i32(-1),
            Cmp::Exact,
        ),
        (
            "multiRead read then write",
            22,
            Body::default()
                .i32(8)
                .bool(false)
                .i32(-1)
                .str("/zookeeper")
                .bool(false)
                .i32(2)
                .bool(false)
                .i32(-1)
                .str("/raw")
                .i32(-1)
                .i32(4)
                .bool(false)
                .i32(-1)
                .str("/raw")
                .bool(false)
                .i32(-1)
                .bool(true)
                .i32(-1),
            Cmp::Exact,
        ),
        (
            "multiRead unknown op",
            22,
            Body::default()
                .i32(9)
                .bool(false)
                .i32(-1)
                .str("/raw")
                .i32(-1)
                .bool(true)
                .i32(-1),
            Cmp::Exact,
        ),
        (
            "empty multi",
            14,
            Body::default().i32(-1).bool(true).i32(-1),
            Cmp::Exact,
        ),
        (
            "auth unknown scheme",
            100,
            Body::default().i32(0).str("nope").bytes(b"x"),
            Cmp::Exact,
        ),
        (
            "auth digest",
            100,
            Body::default().i32(0).str("digest").bytes(b"u:p"),
            Cmp::Exact,
        ),
        ("close session", -11, Body::default(), Cmp::First),
        ("header only ping body", 11, Body::default(), Cmp::Exact),
    ]
}

async fn transcript(cs: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (name, op, body, cmp) in cases() {
        out.push(format!("{name}: {}", case(cs, op, body, cmp).await));
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn raw_requests_match_real_zookeeper() {
    // Replies are compared byte for byte, children lists included: the real server happens to
    // list `/zookeeper`'s two children in name order, so the embedded one sorts them too.
    let embedded = EmbeddedServer::builder()
        .extended_types(true)
        .sorted_children(true)
        .start()
        .await
        .unwrap();
    let ours = transcript(&embedded.connect_string()).await;
    // The real half: a missing ZooKeeper fails the test, unless ZK_SKIP_MISSING asks to skip.
    if !Prerequisite::ZooKeeper.check("raw_requests_match_real_zookeeper") {
        return;
    }
    let real = ZooKeeperServer::start_async().await.unwrap();
    let theirs = transcript(&real.connect_string()).await;
    let mut differences = Vec::new();
    for (a, b) in ours.iter().zip(theirs.iter()) {
        if a != b {
            differences.push(format!("embedded: {a}\n    real: {b}"));
        }
    }
    for line in &theirs {
        println!("{line}");
    }
    assert!(
        differences.is_empty(),
        "replies differ:\n{}",
        differences.join("\n")
    );
}
