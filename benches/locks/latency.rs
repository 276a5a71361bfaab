//! The latency workload: the uncontended cycles again, through a proxy that
//! delays every byte (`proxy.rs`), so that each round trip costs; the
//! round trip the proxy adds is measured first, and an acquire's trips are
//! the latency the proxy added to it. Also the `exists` timing the TLS
//! workload reuses.

use std::time::{Duration, Instant};

use zk_curator::framework::zk;

use super::contenders::Contender;
use super::figures::{per, percentile};
use super::findings::Findings;
use super::limits::{bounded, within, BoxError, ACQUIRE_LIMIT};
use super::mntr::first_host;
use super::options::Config;
use super::proxy;
use super::reps::{failures, run_reps, spread};
use super::sessions::raw_client;
use super::stats::Spread;
use super::table::{lead_columns, lead_header, noise_note, opt};
use super::target::Target;

pub(crate) async fn latency_phase(
    config: &Config,
    target: &Target,
    root: &str,
    contenders: &mut [Contender],
    idle: f64,
    findings: &mut Findings,
) {
    println!();
    println!(
        "== Latency where round trips cost: uncontended acquire+release through a proxy adding {} ms each way ==",
        config.delay.as_millis()
    );
    let upstream = match resolve(&target.connect).await {
        Some(addr) => addr,
        None => {
            println!("n/a (cannot resolve {})", target.connect);
            return;
        }
    };
    let proxy = match proxy::DelayProxy::start(upstream, config.delay) {
        Ok(proxy) => proxy,
        Err(err) => {
            println!("n/a (proxy: {err})");
            return;
        }
    };
    let via = proxy.addr().to_string();
    // What the proxy really adds to one round trip (tokio's timer has 1 ms
    // granularity): p50 of `exists` through it, less the p50 direct.
    let direct = exists_p50(&target.connect, 200).await;
    let proxied = exists_p50(&via, 200).await;
    match (&direct, &proxied) {
        (Ok(d), Ok(p)) => {
            println!(
                "one round trip (p50 of 200 `exists`): direct {d:.3} ms, through the proxy {p:.3} ms: the proxy adds {:.3} ms",
                p - d
            );
            findings.proxy_rtt_ms = Some(p - d);
        }
        _ => println!("one round trip: n/a ({direct:?} / {proxied:?})"),
    }
    // Calibration: a create and a list sent back to back (as zk-curator's
    // acquire sends them) must cost one round trip through the proxy.
    let pair_dir = format!("{root}/latency-pair");
    let direct = pipelined_p50(&target.connect, &pair_dir, 100).await;
    let proxied = pipelined_p50(&via, &pair_dir, 100).await;
    match (&direct, &proxied, findings.proxy_rtt_ms) {
        (Ok(d), Ok(p), Some(rtt)) if rtt > 0.0 => {
            let trips = (p - d) / rtt;
            println!(
                "calibration, create + list sent back to back by zookeeper-client (p50 of 100): direct {d:.3} ms, through the proxy {p:.3} ms = {trips:.1} added round trips"
            );
            if trips > 1.5 {
                println!("   (more than one: the list left the client a round trip after the create. Without TCP_NODELAY,");
                println!("    Nagle's algorithm holds a second small write until the first is acknowledged; this workspace");
                println!("    builds zookeeper-client with it set (third_party/zookeeper-client): is that patch in force?)");
            }
        }
        _ => println!("calibration (create + list back to back): n/a ({direct:?} / {proxied:?})"),
    }
    let (cycles, limit) = (config.latency_cycles, config.limit());
    // A session through the proxy for every contender, and a few cycles on
    // it, before anything is measured.
    for c in contenders.iter_mut() {
        let path = format!("{root}/latency/{}", c.short);
        let _ = c.uncontended(&via, &path, 10, limit).await;
    }
    let reps = run_reps(
        config,
        target.four_letter.as_deref(),
        idle,
        contenders,
        |c, _| {
            let path = format!("{root}/latency/{}", c.short);
            let via = via.clone();
            Box::pin(async move { c.uncontended(&via, &path, cycles, limit).await })
        },
    )
    .await;
    let p50: Vec<Option<Spread>> = reps
        .iter()
        .map(|r| spread(r, |s| Some(s.figures.acq_p50_ms)))
        .collect();
    println!(
        "{} {:>8} {:>11} {:>11} {:>7} {:>9}  note",
        lead_header("acq p50 ms"),
        "acq p99",
        "acq+rel p50",
        "acq+rel p99",
        "trips",
        "req/cycle"
    );
    for (i, c) in contenders.iter().enumerate() {
        let acq_p99 = spread(&reps[i], |s| Some(s.figures.acq_p99_ms));
        let cycle_p50 = spread(&reps[i], |s| Some(s.figures.p50_ms));
        let cycle_p99 = spread(&reps[i], |s| Some(s.figures.p99_ms));
        // Round trips of the acquire: the latency the proxy added to it,
        // in the proxy's round trips.
        let trips = match (
            p50[i],
            findings.uncontended_acq_p50.get(i).copied().flatten(),
            findings.proxy_rtt_ms.filter(|r| *r > 0.0),
        ) {
            (Some(via), Some(direct), Some(rtt)) => {
                format!("{:.1}", (via.median - direct.median) / rtt)
            }
            _ => "-".to_owned(),
        };
        let requests = spread(&reps[i], |s| {
            per(s.traffic.map(|t| t.requests), s.figures.cycles as f64)
        });
        println!(
            "{:<34} {} {:>8} {:>11} {:>11} {:>7} {:>9}  {}{}",
            c.label,
            lead_columns(&p50, i, 3),
            opt(acq_p99, 3),
            opt(cycle_p50, 3),
            opt(cycle_p99, 3),
            trips,
            opt(requests, 2),
            noise_note(&p50, i),
            failures(&reps[i])
                .map(|f| format!(" {f}"))
                .unwrap_or_default()
        );
    }
    println!(
        "({cycles} cycles a rep; latency: LOWER is better; trips = (acq p50 here - acq p50 without the proxy) / the proxy's round trip)"
    );
    findings.latency_p50 = p50;
    drop(proxy);
}

async fn resolve(connect: &str) -> Option<std::net::SocketAddr> {
    let first = first_host(connect)?;
    tokio::net::lookup_host(first).await.ok()?.next()
}

/// p50 (ms) of `n` sequential `exists` calls through `connect`.
pub(crate) async fn exists_p50(connect: &str, n: usize) -> Result<f64, String> {
    let client = raw_client(connect).await.map_err(|e| e.to_string())?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        within(ACQUIRE_LIMIT, client.check_stat("/"))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        samples.push(t0.elapsed());
    }
    samples.sort_unstable();
    Ok(percentile(&samples, 0.5).as_secs_f64() * 1e3)
}

/// p50 (ms) of `n` ephemeral-sequential creates each sent together with a
/// list of the parent (both queued before either is awaited).
async fn pipelined_p50(connect: &str, dir: &str, n: usize) -> Result<f64, String> {
    let pair = async {
        let client = raw_client(connect).await?;
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let mut level = String::new();
        for part in dir.trim_start_matches('/').split('/') {
            level = format!("{level}/{part}");
            match client.create(&level, b"", &persistent).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(err) => return Err(err.into()),
            }
        }
        let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let prefix = format!("{dir}/n-");
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let t0 = Instant::now();
            let create = client.create(&prefix, b"", &ephemeral);
            let list = client.list_children(dir);
            let (created, listed) = futures::join!(create, list);
            samples.push(t0.elapsed());
            let (_, sequence) = created?;
            listed?;
            client.delete(&format!("{dir}/n-{sequence}"), None).await?;
        }
        samples.sort_unstable();
        Ok::<_, BoxError>(percentile(&samples, 0.5).as_secs_f64() * 1e3)
    };
    bounded(Duration::from_secs(60), pair).await
}
