//! What a dependent of zk-curator sees, built from the packaged crates alone
//! (see `.ci/dependent-check`):
//!
//! 1. a lock taken and released on the embedded server;
//! 2. an uncontended acquire sends its create and its listing without
//!    waiting for a reply (the testing crate's fault proxy, replies held);
//! 3. and it costs one round trip, timed through a proxy that delays every
//!    byte: the create and the listing leave together only if the client
//!    sets `TCP_NODELAY` (the patched zookeeper-client). With the published
//!    client, Nagle's algorithm keeps the listing back until the create's
//!    reply comes, and the acquire costs two.
//!
//! 4. with its `tls` feature (zk-curator's `tls`), a lock taken over mutual
//!    TLS on the embedded server, certificates made by the testing crate.
//!
//! Exits non-zero, saying why, if any of it does not hold.

use std::error::Error;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use zk_curator::{zk, Framework, InterProcessMutex};
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::{EmbeddedServer, FaultProxy, Traffic};

type BoxError = Box<dyn Error + Send + Sync>;

/// Added in each direction by the delay proxy: one round trip is twice this.
const DELAY: Duration = Duration::from_millis(10);
/// Bound on every wait of the program.
const PATIENCE: Duration = Duration::from_secs(20);
/// Acquires timed per session (after as many to warm up); the median is judged.
const TIMED: usize = 15;
/// Sessions timed, each on a connection of its own; every one must pass. (With
/// the unpatched client an occasional connection is acknowledged at once by
/// the proxy's kernel and gets its listing out early: one session could pass
/// by luck, not all of them.)
const SESSIONS: usize = 3;
/// An acquire at or above this many round trips fails the check: one is
/// what the pipelined create + listing costs, two what it costs when the
/// listing waits for the create's reply.
const MAX_TRIPS: f64 = 1.5;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let server = EmbeddedServer::start().await?;
    tokio::time::timeout(PATIENCE * 3, async {
        lock_and_release(&server.connect_string()).await?;
        println!("ok: a lock taken and released on the embedded server");
        create_and_listing_sent_together(&server).await?;
        println!("ok: the create and the listing were both sent before any reply");
        let proxy = DelayProxy::start(server.address(), DELAY).await?;
        for session in 1..=SESSIONS {
            let trips = timed_round_trips(&proxy).await?;
            if trips >= MAX_TRIPS {
                return Err(format!(
                    "session {session}: an uncontended acquire cost {trips:.2} round trips \
                     (expected about 1, at most {MAX_TRIPS}): the listing waited for the \
                     create's reply; is the client the patched one (TCP_NODELAY)?"
                )
                .into());
            }
            println!("ok: session {session}: an uncontended acquire costs {trips:.2} round trips");
        }
        #[cfg(feature = "tls")]
        {
            lock_over_mutual_tls().await?;
            println!("ok: a lock taken and released over mutual TLS (feature tls)");
        }
        Ok::<(), BoxError>(())
    })
    .await
    .map_err(|_| "the checks did not finish in time")??;
    Ok(())
}

async fn framework(connect: &str) -> Result<Framework, BoxError> {
    let framework = Framework::builder().connect_string(connect).build()?;
    framework.start()?;
    framework.block_until_connected(PATIENCE).await?;
    Ok(framework)
}

/// Creates `path` as a persistent node, so that it outlives every lock node
/// (a lock's parent is otherwise a container the server may delete).
async fn persistent(framework: &Framework, path: &str) -> Result<(), BoxError> {
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let open = &open;
    framework
        .call_with_retry(|client| async move { client.mkdir(path, open).await })
        .await?;
    Ok(())
}

async fn lock_and_release(connect: &str) -> Result<(), BoxError> {
    let framework = framework(connect).await?;
    let mutex = InterProcessMutex::new(framework.clone(), "/dependent/plain")?;
    let guard = mutex.lock().await?;
    if !guard.is_valid() {
        return Err("a fresh guard is not valid".into());
    }
    guard.release().await?;
    if mutex.is_acquired_in_this_process() {
        return Err("still acquired after the release".into());
    }
    let again = mutex
        .try_lock()
        .await?
        .ok_or("free again, yet try_lock failed")?;
    again.release().await?;
    framework.close().await;
    Ok(())
}

/// With every reply held back, a client that waits for the create's reply
/// before listing sends one request and stalls; a pipelining one sends both.
async fn create_and_listing_sent_together(server: &EmbeddedServer) -> Result<(), BoxError> {
    let proxy = FaultProxy::start(server.address()).await?;
    let framework = framework(&proxy.connect_string()).await?;
    persistent(&framework, "/dependent/held").await?;
    let mutex = InterProcessMutex::new(framework.clone(), "/dependent/held")?;
    // Warm: the parent exists and the first acquire's work is done.
    mutex.lock().await?.release().await?;

    let requests = |proxy: &FaultProxy| -> Vec<i32> {
        proxy
            .traffic()
            .iter()
            .filter_map(|t| match t {
                Traffic::Request { opcode, .. } => Some(*opcode),
                Traffic::Reply { .. } => None,
            })
            .collect()
    };
    proxy.clear_traffic();
    proxy.hold_replies(true);
    let acquiring = {
        let mutex = mutex.clone();
        tokio::spawn(async move { mutex.lock().await })
    };
    let deadline = Instant::now() + PATIENCE;
    while requests(&proxy).len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let held = requests(&proxy);
    proxy.hold_replies(false);
    let guard = tokio::time::timeout(PATIENCE, acquiring)
        .await
        .map_err(|_| "the acquire did not finish once the replies were let through")???;
    guard.release().await?;
    framework.close().await;

    match held.as_slice() {
        [create, list, ..]
            if opcode::CREATES.contains(create)
                && matches!(*list, opcode::GET_CHILDREN | opcode::GET_CHILDREN2) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "expected a create then a listing sent with every reply held, saw opcodes {held:?}"
        )
        .into()),
    }
}

/// The median uncontended acquire of a new session through the delay proxy,
/// in round trips of that proxy (the median of plain `exists` calls through it).
async fn timed_round_trips(proxy: &DelayProxy) -> Result<f64, BoxError> {
    let framework = framework(&proxy.connect_string()).await?;
    persistent(&framework, "/dependent/timed").await?;
    let mutex = InterProcessMutex::new(framework.clone(), "/dependent/timed")?;
    let client = framework.client().await?;

    let mut round_trips = Vec::new();
    for _ in 0..TIMED {
        let start = Instant::now();
        client.check_stat("/dependent/timed").await?;
        round_trips.push(start.elapsed());
    }
    let mut acquires = Vec::new();
    for rep in 0..2 * TIMED {
        let start = Instant::now();
        let guard = mutex.lock().await?;
        let took = start.elapsed();
        guard.release().await?;
        if rep >= TIMED {
            acquires.push(took);
        }
    }
    framework.close().await;

    let round_trip = median(&mut round_trips);
    let acquire = median(&mut acquires);
    println!(
        "   through {} ms each way: one round trip (exists) {:.2} ms, uncontended acquire {:.2} ms (medians of {TIMED})",
        DELAY.as_millis(),
        round_trip.as_secs_f64() * 1e3,
        acquire.as_secs_f64() * 1e3,
    );
    Ok(acquire.as_secs_f64() / round_trip.as_secs_f64())
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// A loopback proxy that hands on every chunk it reads `delay` later, in
/// order, in both directions, as a longer network would: a request written
/// right behind another is not held back by it. Its own sockets set
/// `TCP_NODELAY`, so whatever waits, waits in the client.
struct DelayProxy {
    addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
}

impl DelayProxy {
    async fn start(upstream: SocketAddr, delay: Duration) -> Result<DelayProxy, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                pump(client_read, server_write, delay);
                pump(server_read, client_write, delay);
            }
        });
        Ok(DelayProxy { addr, accept })
    }

    fn connect_string(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read.
fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    let (sender, mut receiver) = mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(read @ 1..) = from.read(&mut buffer).await {
            let due = tokio::time::Instant::now() + delay;
            if sender.send((due, buffer[..read].to_vec())).is_err() {
                break;
            }
        }
    });
    tokio::spawn(async move {
        while let Some((due, chunk)) = receiver.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    });
}

/// A lock taken and released over mutual TLS: the embedded server serving
/// TLS only and requiring client certificates, the framework's `TlsConfig`.
#[cfg(feature = "tls")]
async fn lock_over_mutual_tls() -> Result<(), BoxError> {
    use zk_curator::TlsConfig;
    use zk_curator_testing::TestCertificates;

    let certs = TestCertificates::generate()?;
    let tls = zk_curator_testing::embedded::TlsConfig::from_pem(
        certs.server().cert_pem().as_bytes(),
        certs.server().key_pem().as_bytes(),
    )?
    .with_client_ca_pem(certs.ca().cert_pem().as_bytes())?;
    let server = EmbeddedServer::builder().tls_only(tls).start().await?;
    let framework = Framework::builder()
        .connect_string(format!("tcp+tls://{}", server.address()))
        .tls(
            TlsConfig::new()
                .ca_file(certs.ca().cert_path())
                .client_cert_files(certs.client().cert_path(), certs.client().key_path()),
        )
        .build()?;
    framework.start()?;
    framework.block_until_connected(PATIENCE).await?;
    let mutex = InterProcessMutex::new(framework.clone(), "/dependent/tls")?;
    mutex.lock().await?.release().await?;
    framework.close().await;
    Ok(())
}
