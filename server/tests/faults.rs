//! Bad input and injected faults on the embedded server: oversized packets, garbage and
//! four-letter words, randomized frames, a lost reply, a stall.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::time::{Duration, Instant};

use common::{bounded, connect, eventually, persistent, retrying, STEP};
use zk_curator_server::faults::opcode;
use zk_curator_server::{EmbeddedServer, RequestMatcher};
use zookeeper_client::{Acls, CreateMode, Error};

// ---- limits and bad input ----

#[tokio::test(flavor = "multi_thread")]
async fn oversized_packets_close_only_that_connection() {
    let server = EmbeddedServer::start().await.unwrap();
    let big = connect(&server).await;
    let small = connect(&server).await;
    let data = vec![7u8; 1024 * 1024];
    let err = bounded(big.create("/big", &data, &persistent()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::ConnectionLoss | Error::Custom(_)),
        "{err:?}"
    );
    assert!(bounded(small.check_stat("/big")).await.unwrap().is_none());
    // Just under the limit is fine.
    let data = vec![7u8; 1024 * 1024 - 200];
    bounded(small.create("/almost", &data, &persistent()))
        .await
        .unwrap();
    // The big client reconnects into its session.
    retrying(|| big.check_stat("/almost"))
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn garbage_and_four_letter_words() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = EmbeddedServer::start().await.unwrap();
    let client = connect(&server).await;
    let mut raw = tokio::net::TcpStream::connect(server.address())
        .await
        .unwrap();
    raw.write_all(b"ruok").await.unwrap();
    let mut answer = String::new();
    bounded(raw.read_to_string(&mut answer)).await.unwrap();
    assert_eq!(answer, "imok");
    for garbage in [
        &[0xff, 0xff, 0xff, 0xff][..],
        &[0x7f, 0, 0, 0, 1, 2, 3][..],
        &[0, 0, 0, 3, 1, 2, 3][..],
    ] {
        let mut raw = tokio::net::TcpStream::connect(server.address())
            .await
            .unwrap();
        raw.write_all(garbage).await.unwrap();
        let mut rest = Vec::new();
        let _ = bounded(raw.read_to_end(&mut rest)).await;
    }
    bounded(client.create("/still-fine", b"", &persistent()))
        .await
        .unwrap();
    // Random request frames after a valid handshake, over real sockets.
    let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
    let mut next = move || rng.u64(..);
    let mut handshake = vec![0, 0, 0, 45];
    handshake.extend_from_slice(&[0; 12]);
    handshake.extend_from_slice(&5000i32.to_be_bytes());
    handshake.extend_from_slice(&[0; 8]);
    handshake.extend_from_slice(&16i32.to_be_bytes());
    handshake.extend_from_slice(&[0; 17]);
    for _ in 0..100 {
        let mut raw = tokio::net::TcpStream::connect(server.address())
            .await
            .unwrap();
        let mut bytes = handshake.clone();
        for _ in 0..(next() % 5 + 1) {
            let len = (next() % 64) as usize + 8;
            bytes.extend_from_slice(&(len as i32).to_be_bytes());
            bytes.extend_from_slice(&((next() % 100) as i32).to_be_bytes());
            bytes.extend_from_slice(&((next() % 110) as i32 - 11).to_be_bytes());
            for _ in 8..len {
                bytes.push(next() as u8);
            }
        }
        raw.write_all(&bytes).await.unwrap();
    }
    bounded(client.set_data("/still-fine", b"yes", None))
        .await
        .unwrap();
    eventually("garbage connections closed", || async {
        server.active_connections() == 1
    })
    .await;
}

#[test]
fn randomized_frames_never_panic() {
    // Reproducible: fastrand's generator, seeded.
    let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
    let mut next = move || rng.u64(..);
    let handshake = {
        let mut body = Vec::new();
        body.extend_from_slice(&0i32.to_be_bytes());
        body.extend_from_slice(&0i64.to_be_bytes());
        body.extend_from_slice(&5000i32.to_be_bytes());
        body.extend_from_slice(&0i64.to_be_bytes());
        body.extend_from_slice(&16i32.to_be_bytes());
        body.extend_from_slice(&[0; 16]);
        body.push(0);
        body
    };
    let frame = |body: &[u8]| {
        let mut out = (body.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        out
    };
    let opcodes = [
        1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 100, 101, 102,
        103, 104, 105, 106, 107, -11, 999,
    ];
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut rounds = 0u64;
    let mut handled = 0usize;
    while Instant::now() < deadline {
        rounds += 1;
        let mut stream = if next() % 8 == 0 {
            Vec::new()
        } else {
            frame(&handshake)
        };
        for _ in 0..(next() % 6 + 1) {
            let mut body = Vec::new();
            body.extend_from_slice(&((next() % 1000) as i32).to_be_bytes());
            let op: i32 = opcodes[(next() % opcodes.len() as u64) as usize];
            body.extend_from_slice(&op.to_be_bytes());
            // A plausible prefix (path), then random bytes with random lengths sprinkled in.
            if next() % 2 == 0 {
                let path = ["/", "/a", "/a/b", "", "x", "/a/"][(next() % 6) as usize];
                body.extend_from_slice(&(path.len() as i32).to_be_bytes());
                body.extend_from_slice(path.as_bytes());
            }
            for _ in 0..(next() % 40) {
                match next() % 5 {
                    0 => body.extend_from_slice(&((next() % 8) as i32 - 2).to_be_bytes()),
                    1 => body.extend_from_slice(&(next() as i32).to_be_bytes()),
                    2 => body.push(0),
                    3 => body.push(1),
                    _ => body.push(next() as u8),
                }
            }
            let mut bytes = frame(&body);
            if next() % 10 == 0 {
                // Garble the length prefix or truncate.
                let cut = (next() as usize) % bytes.len();
                bytes.truncate(cut.max(1));
            }
            if next() % 20 == 0 {
                let at = (next() as usize) % bytes.len();
                bytes[at] ^= next() as u8;
            }
            stream.extend_from_slice(&bytes);
        }
        handled += zk_curator_server::feed_bytes(&stream);
    }
    assert!(rounds > 1000, "only {rounds} rounds");
    assert!(handled > rounds as usize, "only {handled} frames handled");
}

// ---- fault injection ----

#[tokio::test(flavor = "multi_thread")]
async fn lose_reply_to_next_create() {
    let server = EmbeddedServer::start().await.unwrap();
    let c = connect(&server).await;
    bounded(c.create("/locks", b"", &persistent()))
        .await
        .unwrap();
    let disarmed = server.lose_reply_to_next(RequestMatcher::creates());
    server.disarm();
    bounded(c.create("/locks/unharmed", b"", &persistent()))
        .await
        .unwrap();
    assert!(!disarmed.fired());
    let fault = server.lose_reply_to_next(RequestMatcher::creates().path_contains("_c_"));
    bounded(c.create("/locks/other", b"", &persistent()))
        .await
        .unwrap();
    assert!(!fault.fired());
    let err = bounded(c.create(
        "/locks/_c_1-lock-",
        b"",
        &CreateMode::EphemeralSequential.with_acls(Acls::anyone_all()),
    ))
    .await
    .unwrap_err();
    assert!(
        matches!(err, Error::ConnectionLoss | Error::Custom(_)),
        "{err:?}"
    );
    let lost = bounded(fault.wait(STEP)).await.unwrap();
    assert_eq!(lost.opcode, opcode::CREATE2);
    assert_eq!(lost.error_code, 0);
    assert_eq!(lost.path.as_deref(), Some("/locks/_c_1-lock-"));
    // The create happened; the session survived the lost connection.
    let kids = retrying(|| c.list_children("/locks")).await.unwrap();
    assert!(
        kids.contains(&"_c_1-lock-0000000002".to_owned()),
        "{kids:?}"
    );
    let stat = bounded(c.check_stat("/locks/_c_1-lock-0000000002"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stat.ephemeral_owner, c.session_id().0);
}

#[tokio::test(flavor = "multi_thread")]
async fn stall_stops_answering_for_a_while() {
    let server = EmbeddedServer::start().await.unwrap();
    let c = connect(&server).await;
    server.stall(Duration::from_millis(500));
    let started = Instant::now();
    bounded(c.create("/after-stall", b"", &persistent()))
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(400));
    server.stall(Duration::from_secs(60));
    let pending = c.check_stat("/after-stall");
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.resume();
    assert!(bounded(pending).await.unwrap().is_some());
}
