//! Behaviours matched to Apache ZooKeeper 3.8 (each checked by hand against the real server
//! with the same bytes): TTL nodes refused unless enabled, null data and null ACL ids kept as
//! ZooKeeper keeps them, children in no particular order unless asked, and the four-letter
//! words (an unknown one closes the connection without a reply).
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zk_curator_server::EmbeddedServer;

const WAIT: Duration = Duration::from_secs(5);

/// A raw protocol session: requests built by hand, replies read as (xid, err, body).
struct Raw {
    stream: TcpStream,
    xid: i32,
}

fn string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => {
            out.extend_from_slice(&(s.len() as i32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        None => out.extend_from_slice(&(-1i32).to_be_bytes()),
    }
}

fn acl(scheme: &str, id: Option<&str>) -> Vec<u8> {
    let mut out = 1i32.to_be_bytes().to_vec();
    out.extend_from_slice(&31i32.to_be_bytes());
    string(&mut out, Some(scheme));
    string(&mut out, id);
    out
}

impl Raw {
    async fn connect(server: &EmbeddedServer) -> Raw {
        let mut stream = TcpStream::connect(server.connect_string()).await.unwrap();
        let mut body = Vec::new();
        body.extend_from_slice(&0i32.to_be_bytes());
        body.extend_from_slice(&0i64.to_be_bytes());
        body.extend_from_slice(&10_000i32.to_be_bytes());
        body.extend_from_slice(&0i64.to_be_bytes());
        body.extend_from_slice(&16i32.to_be_bytes());
        body.extend_from_slice(&[0; 16]);
        body.push(0);
        let mut framed = (body.len() as i32).to_be_bytes().to_vec();
        framed.extend(body);
        stream.write_all(&framed).await.unwrap();
        let mut raw = Raw { stream, xid: 0 };
        raw.read().await;
        raw
    }

    async fn read(&mut self) -> Vec<u8> {
        let mut len = [0u8; 4];
        tokio::time::timeout(WAIT, self.stream.read_exact(&mut len))
            .await
            .unwrap()
            .unwrap();
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
        tokio::time::timeout(WAIT, self.stream.read_exact(&mut body))
            .await
            .unwrap()
            .unwrap();
        body
    }

    /// Sends request `op` with `body`; returns (error code, reply body after the header).
    async fn call(&mut self, op: i32, body: &[u8]) -> (i32, Vec<u8>) {
        self.xid += 1;
        let mut request = self.xid.to_be_bytes().to_vec();
        request.extend_from_slice(&op.to_be_bytes());
        request.extend_from_slice(body);
        let mut framed = (request.len() as i32).to_be_bytes().to_vec();
        framed.extend(request);
        self.stream.write_all(&framed).await.unwrap();
        let reply = self.read().await;
        assert_eq!(
            i32::from_be_bytes(reply[0..4].try_into().unwrap()),
            self.xid
        );
        let err = i32::from_be_bytes(reply[12..16].try_into().unwrap());
        (err, reply[16..].to_vec())
    }

    async fn create(
        &mut self,
        op: i32,
        path: &str,
        data: Option<&str>,
        acl: &[u8],
        flags: i32,
        ttl: Option<i64>,
    ) -> i32 {
        let mut body = Vec::new();
        string(&mut body, Some(path));
        string(&mut body, data);
        body.extend_from_slice(acl);
        body.extend_from_slice(&flags.to_be_bytes());
        if let Some(ttl) = ttl {
            body.extend_from_slice(&ttl.to_be_bytes());
        }
        self.call(op, &body).await.0
    }

    /// `getData`: the data's length field (-1 for null) and the data.
    async fn get_data(&mut self, path: &str) -> (i32, Vec<u8>) {
        let mut body = Vec::new();
        string(&mut body, Some(path));
        body.push(0);
        let (err, reply) = self.call(4, &body).await;
        assert_eq!(err, 0);
        let len = i32::from_be_bytes(reply[0..4].try_into().unwrap());
        let data = reply[4..4 + len.max(0) as usize].to_vec();
        (len, data)
    }

    async fn children(&mut self, path: &str) -> Vec<String> {
        let mut body = Vec::new();
        string(&mut body, Some(path));
        body.push(0);
        let (err, reply) = self.call(8, &body).await;
        assert_eq!(err, 0);
        let n = i32::from_be_bytes(reply[0..4].try_into().unwrap());
        let mut at = 4;
        let mut out = Vec::new();
        for _ in 0..n {
            let len = i32::from_be_bytes(reply[at..at + 4].try_into().unwrap()) as usize;
            out.push(String::from_utf8(reply[at + 4..at + 4 + len].to_vec()).unwrap());
            at += 4 + len;
        }
        out
    }
}

const CREATE2: i32 = 15;
const CREATE_TTL: i32 = 21;
const UNIMPLEMENTED: i32 = -6;
const INVALID_ACL: i32 = -114;

#[tokio::test]
async fn ttl_nodes_are_refused_unless_enabled() {
    let anyone = acl("world", Some("anyone"));
    let server = EmbeddedServer::start().await.unwrap();
    let mut raw = Raw::connect(&server).await;
    assert_eq!(
        raw.create(CREATE_TTL, "/t", Some("x"), &anyone, 5, Some(1000))
            .await,
        UNIMPLEMENTED
    );
    assert_eq!(
        raw.create(CREATE2, "/t", Some("x"), &anyone, 5, None).await,
        UNIMPLEMENTED
    );
    assert!(!server.node_paths().contains(&"/t".to_owned()));

    let server = EmbeddedServer::builder()
        .extended_types(true)
        .start()
        .await
        .unwrap();
    let mut raw = Raw::connect(&server).await;
    assert_eq!(
        raw.create(CREATE_TTL, "/t", Some("x"), &anyone, 5, Some(60_000))
            .await,
        0
    );
}

#[tokio::test]
async fn null_data_reads_back_as_null() {
    let anyone = acl("world", Some("anyone"));
    let server = EmbeddedServer::start().await.unwrap();
    let mut raw = Raw::connect(&server).await;
    assert_eq!(
        raw.create(CREATE2, "/null", None, &anyone, 0, None).await,
        0
    );
    assert_eq!(raw.get_data("/null").await, (-1, Vec::new()));
    assert_eq!(
        raw.create(CREATE2, "/empty", Some(""), &anyone, 0, None)
            .await,
        0
    );
    assert_eq!(raw.get_data("/empty").await, (0, Vec::new()));
    // setData with null data, then with data, then null again.
    for (data, expected) in [
        (Some("abc"), (3, b"abc".to_vec())),
        (None, (-1, Vec::new())),
    ] {
        let mut body = Vec::new();
        string(&mut body, Some("/empty"));
        string(&mut body, data);
        body.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(raw.call(5, &body).await.0, 0);
        assert_eq!(raw.get_data("/empty").await, expected);
    }
}

#[tokio::test]
async fn a_null_acl_id_is_accepted_with_the_auth_scheme() {
    let creator = acl("auth", None);
    let server = EmbeddedServer::start().await.unwrap();
    let mut raw = Raw::connect(&server).await;
    // Without an identity to expand `auth` to: InvalidACL, not MarshallingError.
    assert_eq!(
        raw.create(CREATE2, "/a", Some("x"), &creator, 0, None)
            .await,
        INVALID_ACL
    );
    let mut auth = 0i32.to_be_bytes().to_vec();
    string(&mut auth, Some("digest"));
    string(&mut auth, Some("u:p"));
    raw.xid = -5; // auth requests carry xid -4
    let (err, _) = raw.call(100, &auth).await;
    assert_eq!(err, 0);
    raw.xid = 10;
    assert_eq!(
        raw.create(CREATE2, "/a", Some("x"), &creator, 0, None)
            .await,
        0
    );
}

#[tokio::test]
async fn children_come_in_no_particular_order_unless_sorted() {
    let anyone = acl("world", Some("anyone"));
    for sorted in [false, true] {
        let server = EmbeddedServer::builder()
            .sorted_children(sorted)
            .start()
            .await
            .unwrap();
        let mut raw = Raw::connect(&server).await;
        assert_eq!(raw.create(CREATE2, "/p", None, &anyone, 0, None).await, 0);
        for i in 0..40 {
            let path = format!("/p/c{i:02}");
            assert_eq!(raw.create(CREATE2, &path, None, &anyone, 0, None).await, 0);
        }
        let listed = raw.children("/p").await;
        let mut names = listed.clone();
        names.sort();
        let expected: Vec<String> = (0..40).map(|i| format!("c{i:02}")).collect();
        assert_eq!(names, expected);
        // 40 names in hash order are in name order with probability 1/40!.
        assert_eq!(
            listed == names,
            sorted,
            "sorted_children({sorted}): {listed:?}"
        );
    }
}

async fn four_letter(server: &EmbeddedServer, word: &str) -> String {
    let mut stream = TcpStream::connect(server.connect_string()).await.unwrap();
    stream.write_all(word.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn four_letter_words_answer_in_zookeepers_layout() {
    let server = EmbeddedServer::start().await.unwrap();
    let _held = Raw::connect(&server).await;
    assert_eq!(four_letter(&server, "ruok").await, "imok");
    assert_eq!(four_letter(&server, "isro").await, "rw");
    let envi = four_letter(&server, "envi").await;
    assert!(
        envi.starts_with("Environment:\nzookeeper.version=3.8.0-"),
        "{envi}"
    );
    let conf = four_letter(&server, "conf").await;
    assert!(
        conf.contains(&format!("clientPort={}\n", server.port())),
        "{conf}"
    );
    for key in [
        "tickTime=",
        "maxClientCnxns=",
        "minSessionTimeout=",
        "maxSessionTimeout=",
    ] {
        assert!(conf.contains(key), "{conf}");
    }
    let srvr = four_letter(&server, "srvr").await;
    for key in [
        "Zookeeper version: 3.8.0-",
        "Connections: 2\n", /* this one counts too, as on ZooKeeper */
        "Mode: standalone\n",
        "Node count: ",
    ] {
        assert!(srvr.contains(key), "{srvr}");
    }
    let stat = four_letter(&server, "stat").await;
    assert!(stat.contains("Clients:\n /127.0.0.1:"), "{stat}");
    let cons = four_letter(&server, "cons").await;
    assert!(cons.contains("sid=0x"), "{cons}");
    assert!(four_letter(&server, "dump")
        .await
        .starts_with("SessionTracker dump:\n"));
    assert_eq!(
        four_letter(&server, "wchs").await,
        "0 connections watching 0 paths\nTotal watches:0\n"
    );
    let mntr = four_letter(&server, "mntr").await;
    assert!(mntr.starts_with("zk_version\t3.8.0-"), "{mntr}");
    assert!(mntr.contains("zk_server_state\tstandalone\n"), "{mntr}");
    // An unknown word: closed without a byte, as ZooKeeper does.
    assert_eq!(four_letter(&server, "xyzw").await, "");
}
