//! The embedded ZooKeeper-protocol server against a real Apache ZooKeeper,
//! on the same workloads, in one run: request rates and latencies, and the
//! servers' resident memory under a slow reader (a client pipelining `getData`
//! of a 1 MB node without reading the replies). Prints figures and ratios;
//! asserts nothing.
//!
//! `cargo bench --bench servers` (add `-- --quick` for a short run, `--
//! --help` for what it takes). Needs Debian's `zookeeper` package for the
//! real side; without it only the embedded server is measured.

#[path = "common/arguments.rs"]
mod arguments;

use std::time::{Duration, Instant};

use clap::Parser;
use zk_curator::{Framework, InterProcessMutex};
use zk_curator_testing::{zookeeper_available, EmbeddedServer, ZooKeeperServer};
use zookeeper_client as zk;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The embedded ZooKeeper-protocol server against a real Apache ZooKeeper
/// (Debian's `zookeeper` package; without it only the embedded server is
/// measured), on the same workloads, in one run. It prints figures and
/// ratios and asserts nothing.
///
/// The workloads, each on both servers, all of them in every run:
/// create+delete one at a time; getData with 100 in flight; zk-curator
/// mutex lock+release; and a slow reader (pipelined getData of a 1 MB node,
/// replies unread: each server's peak resident memory over 3 s).
#[derive(Debug, Parser)]
#[command(
    name = "servers",
    bin_name = "cargo bench --bench servers --",
    args_override_self = true
)]
struct Args {
    /// A short run, as CI's: 300 writes and lock cycles instead of 2,000,
    /// 20,000 reads instead of 200,000, 1,000 slow-reader requests instead
    /// of 5,000
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    cargo: arguments::CargoBench,
}

struct Sizes {
    sequential: usize,
    pipelined: usize,
    window: usize,
    lock_cycles: usize,
}

/// One workload's figures on one server.
struct Figures {
    ops_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize - 1;
    sorted[rank.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

fn summarize(mut samples: Vec<Duration>, total: Duration) -> Figures {
    samples.sort();
    Figures {
        ops_per_sec: samples.len() as f64 / total.as_secs_f64(),
        p50_ms: percentile(&samples, 50.0),
        p99_ms: percentile(&samples, 99.0),
    }
}

/// create + delete of a persistent node, one at a time (two writes per op).
async fn sequential_writes(connect: &str, n: usize) -> Result<Figures, BoxError> {
    let client = zk::Client::connect(connect).await?;
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let base = format!("/bench-seq-{}", std::process::id());
    client.create(&base, b"", &options).await?;
    let mut samples = Vec::with_capacity(n);
    let started = Instant::now();
    for i in 0..n {
        let path = format!("{base}/n{i}");
        let t = Instant::now();
        client.create(&path, b"0123456789", &options).await?;
        client.delete(&path, None).await?;
        samples.push(t.elapsed());
    }
    let total = started.elapsed();
    client.delete(&base, None).await?;
    Ok(summarize(samples, total))
}

/// getData with `window` requests in flight (zookeeper-client pipelines
/// requests issued before their replies are awaited).
async fn pipelined_reads(connect: &str, n: usize, window: usize) -> Result<Figures, BoxError> {
    let client = zk::Client::connect(connect).await?;
    let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    let path = format!("/bench-read-{}", std::process::id());
    client.create(&path, &[7u8; 256], &options).await?;
    let mut samples = Vec::with_capacity(n);
    let started = Instant::now();
    let mut done = 0;
    while done < n {
        let batch = window.min(n - done);
        let t = Instant::now();
        let futures: Vec<_> = (0..batch).map(|_| client.get_data(&path)).collect();
        for result in futures::future::join_all(futures).await {
            result?;
        }
        // Each request of the batch waited at most the batch's time.
        let per_batch = t.elapsed();
        samples.extend(std::iter::repeat_n(per_batch, batch));
        done += batch;
    }
    let total = started.elapsed();
    Ok(summarize(samples, total))
}

/// Uncontended zk-curator mutex cycles (lock + release).
async fn lock_cycles(connect: &str, n: usize) -> Result<Figures, BoxError> {
    let framework = Framework::builder().connect_string(connect).build()?;
    framework.start()?;
    framework
        .block_until_connected(Duration::from_secs(20))
        .await?;
    let mutex = InterProcessMutex::new(
        framework.clone(),
        &format!("/bench-lock-{}", std::process::id()),
    )?;
    mutex.lock().await?.release().await?; // creates the parent
    let mut samples = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        mutex.lock().await?.release().await?;
        samples.push(t.elapsed());
    }
    let total = started.elapsed();
    framework.close().await;
    Ok(summarize(samples, total))
}

fn row(workload: &str, server: &str, figures: &Result<Figures, BoxError>, baseline: Option<f64>) {
    match figures {
        Ok(f) => {
            let ratio =
                baseline.map_or("1.00x".to_owned(), |b| format!("{:.2}x", f.ops_per_sec / b));
            println!(
                "{workload:<34} {server:<10} {:>10.0} {:>9.3} {:>9.3}  {ratio:>8}",
                f.ops_per_sec, f.p50_ms, f.p99_ms
            );
        }
        Err(err) => println!("{workload:<34} {server:<10} n/a ({err})"),
    }
}

fn main() -> Result<(), BoxError> {
    // The arguments before anything starts: `--help`, or a mistake in them,
    // ends the program here.
    let Args { quick, cargo: _ } = Args::parse();
    let sizes = if quick {
        Sizes {
            sequential: 300,
            pipelined: 20_000,
            window: 100,
            lock_cycles: 300,
        }
    } else {
        Sizes {
            sequential: 2_000,
            pipelined: 200_000,
            window: 100,
            lock_cycles: 2_000,
        }
    };
    // The embedded server runs on its own runtime (threads), like the real
    // one runs in its own process; the clients run on this one.
    let embedded = EmbeddedServer::start_blocking()?;
    let real = if zookeeper_available() {
        Some(ZooKeeperServer::start()?)
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;

    if let Some(warning) = arguments::unoptimized_warning() {
        println!("{warning}");
    }
    println!("embedded ZooKeeper-protocol server vs a real Apache ZooKeeper 3.8 (standalone, JVM)");
    println!(
        "machine: {} CPUs; one run on a shared machine: servers and clients compete for the same cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    if real.is_none() {
        println!(
            "NOTICE: ZooKeeper is not installed (apt-get install -y zookeeper): real side skipped"
        );
    }
    println!("ratio = ops/s of the row / ops/s of the real server on the same workload");
    println!(
        "{:<34} {:<10} {:>10} {:>9} {:>9}  {:>8}",
        "workload", "server", "ops/s", "p50 ms", "p99 ms", "ratio"
    );

    type Workload<'a> = (
        &'a str,
        Box<dyn Fn(String) -> futures::future::BoxFuture<'static, Result<Figures, BoxError>> + 'a>,
    );
    let (seq, pipe, window, cycles) = (
        sizes.sequential,
        sizes.pipelined,
        sizes.window,
        sizes.lock_cycles,
    );
    let workloads: Vec<Workload<'_>> = vec![
        (
            "create+delete, one at a time",
            Box::new(move |c| Box::pin(async move { sequential_writes(&c, seq).await })),
        ),
        (
            "getData, 100 in flight",
            Box::new(move |c| Box::pin(async move { pipelined_reads(&c, pipe, window).await })),
        ),
        (
            "zk-curator mutex lock+release",
            Box::new(move |c| Box::pin(async move { lock_cycles(&c, cycles).await })),
        ),
    ];
    for (name, workload) in &workloads {
        let real_figures = real
            .as_ref()
            .map(|server| runtime.block_on(workload(server.connect_string())));
        let embedded_figures = runtime.block_on(workload(embedded.connect_string()));
        let baseline = real_figures
            .as_ref()
            .and_then(|r| r.as_ref().ok())
            .map(|f| f.ops_per_sec);
        if let Some(real_figures) = &real_figures {
            row(name, "real", real_figures, None);
        }
        row(name, "embedded", &embedded_figures, baseline);
    }
    let slow_requests = if quick { 1_000 } else { 5_000 };
    println!();
    println!(
        "slow reader: {slow_requests} pipelined getData of a 1 MB node, replies unread; peak resident memory over 3 s"
    );
    if let Some(server) = &real {
        let pid = server.pid();
        let peak = runtime.block_on(slow_reader(
            server.connect_string(),
            slow_requests,
            move || pid.and_then(|pid| rss_bytes(&format!("/proc/{pid}/status"))),
        ));
        print_rss("real (JVM process)", peak);
    }
    let peak = runtime.block_on(slow_reader(
        embedded.connect_string(),
        slow_requests,
        || rss_bytes("/proc/self/status"),
    ));
    print_rss("embedded (whole bench process)", peak);
    Ok(())
}

/// Resident set size from a `/proc/<pid>/status` file (Linux).
fn rss_bytes(status: &str) -> Option<u64> {
    let status = std::fs::read_to_string(status).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn print_rss(server: &str, peak: Result<(Option<u64>, Option<u64>), BoxError>) {
    match peak {
        Ok((before, peak)) => println!(
            "  {server:<32} before {:>6} MiB   peak {:>6} MiB",
            before.map_or("?".to_owned(), |b| (b >> 20).to_string()),
            peak.map_or("?".to_owned(), |b| (b >> 20).to_string()),
        ),
        Err(err) => println!("  {server:<32} failed: {err}"),
    }
}

/// Creates a 1 MB node, then sends `requests` `getData` of it on a raw connection without
/// reading a reply, sampling `rss` for 3 s; returns (before, peak).
async fn slow_reader(
    connect: String,
    requests: usize,
    rss: impl Fn() -> Option<u64>,
) -> Result<(Option<u64>, Option<u64>), BoxError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let client = zk::Client::connect(&connect).await?;
    let path = format!("/bench-big-{}", std::process::id());
    let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    client
        .create(&path, &vec![7u8; 1_000_000], &options)
        .await?;
    let before = rss();

    let frame = |body: Vec<u8>| {
        let mut out = (body.len() as i32).to_be_bytes().to_vec();
        out.extend(body);
        out
    };
    let mut handshake = Vec::new();
    handshake.extend_from_slice(&0i32.to_be_bytes());
    handshake.extend_from_slice(&0i64.to_be_bytes());
    handshake.extend_from_slice(&10_000i32.to_be_bytes());
    handshake.extend_from_slice(&0i64.to_be_bytes());
    handshake.extend_from_slice(&16i32.to_be_bytes());
    handshake.extend_from_slice(&[0; 16]);
    handshake.push(0);
    let mut stream = tokio::net::TcpStream::connect(&connect).await?;
    stream.write_all(&frame(handshake)).await?;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let mut answer = vec![0u8; usize::try_from(i32::from_be_bytes(len)).unwrap_or(0)];
    stream.read_exact(&mut answer).await?;
    let (_reader, mut writer) = stream.into_split();
    let mut all = Vec::new();
    for xid in 1..=requests {
        let mut body = (xid as i32).to_be_bytes().to_vec();
        body.extend_from_slice(&4i32.to_be_bytes());
        body.extend_from_slice(&(path.len() as i32).to_be_bytes());
        body.extend_from_slice(path.as_bytes());
        body.push(0);
        all.extend(frame(body));
    }
    // The server may stop reading: send from a task of its own.
    let sender = tokio::spawn(async move {
        let _ = writer.write_all(&all).await;
        writer
    });
    let mut peak = before;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        peak = peak.max(rss());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sender.abort();
    Ok((before, peak))
}
