//! The TLS workload (issue 22): what TLS costs an uncontended
//! acquire+release, for zk-curator and for Apache Curator alike.
//!
//! It starts a second server of its own, configured like the first
//! (`server.rs`) and serving a TLS port beside the plain one, with client
//! certificates required (`ssl.clientAuth=need`: mutual TLS, the setup
//! that asks the most of a handshake). The certificates are made for the
//! run (`zk_curator_testing::TestCertificates`). The server runs Netty on
//! both ports (ZooKeeper serves TLS only through Netty), so plaintext and
//! TLS differ here by TLS alone.
//!
//! Four rows, each a kept session of the run's contenders (the same
//! warm processes, the same code as the uncontended workload):
//! zk-curator over the plain port and over TLS (`TlsConfig`, a
//! `tcp+tls://` connect string), Apache Curator over both (the JVM peer
//! gives its TLS sessions a `ZKClientConfig` of their own). Every row is
//! warmed up on this server, then measured in reps, the rows interleaved in
//! a rotating order.
//!
//! The round trips of an acquire over TLS are measured as in the latency
//! workload: through a proxy that delays every byte by `delay` each way
//! (`proxy.rs`, a TCP proxy: it carries TLS records unchanged). One proxy
//! leads to each port; the round trip the proxy adds is measured through
//! the plain one, and an acquire's trips are the latency the proxy added to
//! it, in those round trips.

use std::time::Instant;

use zk_curator::framework::TlsConfig;
use zk_curator_testing::TestCertificates;

use super::contenders::{Contender, Imp, CURATOR, ZK_CURATOR};
use super::figures::{per, Cycles};
use super::findings::{Findings, TlsFindings};
use super::latency::exists_p50;
use super::limits::{Measured, CLOSE_LIMIT, CONNECT_LIMIT};
use super::mntr::{counters, Traffic};
use super::options::Config;
use super::peers::field;
use super::reps::{failures, idle_rate, rotation, settle, spread, Sample};
use super::sessions::{set_client_tls, TLS_SCHEME};
use super::stats::{noise, ratio, Spread};
use super::table::opt;
use super::target::Target;
use super::{proxy, server};

/// One row: a contender over one transport.
struct Row {
    label: &'static str,
    contender: usize,
    tls: bool,
}

const ROWS: [Row; 4] = [
    Row {
        label: "zk-curator, plaintext",
        contender: ZK_CURATOR,
        tls: false,
    },
    Row {
        label: "zk-curator, TLS",
        contender: ZK_CURATOR,
        tls: true,
    },
    Row {
        label: "Apache Curator, plaintext",
        contender: CURATOR,
        tls: false,
    },
    Row {
        label: "Apache Curator, TLS",
        contender: CURATOR,
        tls: true,
    },
];

/// The libraries, as (name, plaintext row, TLS row).
const LIBRARIES: [(&str, usize, usize); 2] = [("zk-curator", 0, 1), ("Apache Curator", 2, 3)];

/// The two ports of the workload's server.
struct Ports {
    /// `127.0.0.1:port`.
    plain: String,
    /// `tcp+tls://127.0.0.1:port`.
    secure: String,
}

impl Ports {
    fn of(&self, row: &Row) -> &str {
        if row.tls {
            &self.secure
        } else {
            &self.plain
        }
    }
}

pub(crate) async fn tls_phase(
    config: &Config,
    _target: &Target,
    root: &str,
    contenders: &mut [Contender],
    _idle: f64,
    findings: &mut Findings,
) {
    println!();
    println!(
        "== TLS: uncontended acquire+release over the plain port and over TLS of ONE server, {} cycles a rep ==",
        config.cycles
    );
    let certs = match TestCertificates::generate() {
        Ok(certs) => certs,
        Err(err) => {
            println!("n/a (certificates: {err})");
            return;
        }
    };
    let settings = certs.server_tls();
    let started = Instant::now();
    let server = match tokio::task::spawn_blocking(move || {
        server::BenchServer::start_tls(&settings)
    })
    .await
    {
        Ok(Ok(server)) => server,
        Ok(Err(err)) => {
            println!("n/a (TLS server: {err})");
            return;
        }
        Err(err) => {
            println!("n/a (TLS server: {err})");
            return;
        }
    };
    let Some(secure) = server.secure_address() else {
        println!("n/a (the TLS server has no TLS port)");
        return;
    };
    let ports = Ports {
        plain: server.address(),
        secure: format!("{TLS_SCHEME}{secure}"),
    };
    println!(
        "server:    a second ZooKeeper like the first, plain port {} and TLS port {secure} (Netty on both,",
        ports.plain
    );
    println!(
        "           client certificates required: mutual TLS; certificates ECDSA P-256), started in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    set_client_tls(
        TlsConfig::new()
            .ca_file(certs.ca().cert_path())
            .client_cert_files(certs.client().cert_path(), certs.client().key_path()),
    );
    if let Imp::Peer(peer) = &mut contenders[CURATOR].imp {
        if let Ok(peer) = peer.as_mut().as_mut() {
            let command = format!(
                "tls {} {}",
                certs.ca().cert_path().display(),
                certs.client().bundle_path().display()
            );
            if let Err(reason) = peer.request(&command, CONNECT_LIMIT).await {
                println!("Curator: cannot give it the TLS files ({reason})");
            }
        }
    }
    let limit = config.limit();
    let path = |c: &Contender, row: &Row, what: &str| {
        let transport = if row.tls { "tls" } else { "plain" };
        format!("{root}/tls/{what}-{}-{transport}", c.short)
    };

    // Warm-up: every row connects and runs the warm-up cycles on this
    // server (a JVM compiles its TLS code here, not in a measured rep).
    for row in &ROWS {
        let c = &mut contenders[row.contender];
        let path = path(c, row, "warmup");
        let t0 = Instant::now();
        match c
            .uncontended(ports.of(row), &path, config.warmup_cycles, limit)
            .await
        {
            Ok(cycles) => println!(
                "  warm-up {:<28} {} cycles ({:.0}/s); {:.1} s",
                row.label,
                cycles.cycles,
                cycles.per_s,
                t0.elapsed().as_secs_f64()
            ),
            Err(reason) => println!("  warm-up {:<28} n/a ({reason})", row.label),
        }
    }
    curator_is_secure(&mut contenders[CURATOR], &ports).await;
    let mntr = Some(ports.plain.as_str());
    let idle = idle_rate(config, mntr).await;

    // Measured reps, the rows interleaved.
    let mut reps: Vec<Vec<Measured<Sample<Cycles>>>> = ROWS.iter().map(|_| Vec::new()).collect();
    for rep in 0..config.reps {
        for i in rotation(rep, ROWS.len()) {
            let row = &ROWS[i];
            let c = &mut contenders[row.contender];
            let path = path(c, row, "cycles");
            settle().await;
            let before = counters(mntr).await;
            let t0 = Instant::now();
            let result = c
                .uncontended(ports.of(row), &path, config.cycles, limit)
                .await;
            let elapsed = t0.elapsed();
            let after = counters(mntr).await;
            reps[i].push(result.map(|figures| Sample {
                figures,
                traffic: Traffic::between(before, after, elapsed, idle),
            }));
        }
    }
    let rates: Vec<Option<Spread>> = reps
        .iter()
        .map(|r| spread(r, |s| Some(s.figures.per_s)))
        .collect();
    let acquires: Vec<Option<Spread>> = reps
        .iter()
        .map(|r| spread(r, |s| Some(s.figures.acq_p50_ms)))
        .collect();
    println!(
        "{:<28} {:>9} {:>13} {:>8} {:>8} {:>8} {:>9}  note",
        "row", "cycles/s", "min–max", "acq p50", "p50 ms", "p99 ms", "req/cycle"
    );
    for (i, row) in ROWS.iter().enumerate() {
        let p50 = spread(&reps[i], |s| Some(s.figures.p50_ms));
        let p99 = spread(&reps[i], |s| Some(s.figures.p99_ms));
        let requests = spread(&reps[i], |s| {
            per(s.traffic.map(|t| t.requests), s.figures.cycles as f64)
        });
        let (median, range) = rates[i].map_or_else(
            || ("n/a".to_owned(), String::new()),
            |s| (format!("{:.0}", s.median), s.range(0)),
        );
        println!(
            "{:<28} {:>9} {:>13} {:>8} {:>8} {:>8} {:>9}  {}",
            row.label,
            median,
            range,
            opt(acquires[i], 3),
            opt(p50, 3),
            opt(p99, 3),
            opt(requests, 2),
            failures(&reps[i]).unwrap_or_default()
        );
    }
    println!("(cycles/s: higher is better; acq p50 = of the acquire alone, p50/p99 = of acquire+release, in ms;");
    println!(" req/cycle = requests this server received per cycle)");
    for (name, plain, tls) in LIBRARIES {
        println!("{name}: {}", tls_cost(rates[plain], rates[tls]));
    }

    let trips = round_trips(config, root, contenders, &server, &ports, &acquires).await;
    findings.tls = Some(TlsFindings { rates, trips });
    // The sessions go before their server: none is left reconnecting to it.
    for row in ROWS.iter().filter(|row| !row.tls) {
        close_sessions(&mut contenders[row.contender], &ports).await;
    }
    drop(server);
}

/// Closes `c`'s sessions to both of `ports` (kept sessions are pooled by
/// connect string).
async fn close_sessions(c: &mut Contender, ports: &Ports) {
    for connect in [&ports.plain, &ports.secure] {
        match &mut c.imp {
            Imp::ZkCurator { pools, .. } => {
                let closing = pools.remove(connect.as_str()).unwrap_or_default();
                let closing = closing.into_iter().map(|fw| async move {
                    let _ = tokio::time::timeout(CLOSE_LIMIT, fw.close()).await;
                });
                futures::future::join_all(closing).await;
            }
            Imp::ZkClient { pools } => drop(pools.remove(connect.as_str())),
            Imp::Peer(peer) => {
                if let Ok(peer) = peer.as_mut().as_mut() {
                    let _ = peer
                        .request(&format!("close {connect}"), CLOSE_LIMIT * 2)
                        .await;
                }
            }
        }
    }
}

/// What TLS costs one library: its TLS rate against its plaintext rate, and
/// the time TLS adds to a cycle, with the noise verdict.
fn tls_cost(plain: Option<Spread>, tls: Option<Spread>) -> String {
    match (plain, tls) {
        (Some(p), Some(t)) if t.median > 0.0 => {
            let verdict = noise(Some(&t), Some(&p), "plaintext");
            format!(
                "TLS/plaintext cycles/s = {}; TLS adds {:+.1}% to a cycle{}",
                ratio(Some(&t), Some(&p)),
                (p.median / t.median - 1.0) * 100.0,
                if verdict.is_empty() {
                    String::new()
                } else {
                    format!(" ({verdict})")
                }
            )
        }
        _ => "n/a".to_owned(),
    }
}

/// Asks the Curator peer how its TLS session's client is configured: the
/// TLS port would refuse anything else, but say it plainly.
async fn curator_is_secure(curator: &mut Contender, ports: &Ports) {
    let Imp::Peer(peer) = &mut curator.imp else {
        return;
    };
    let Ok(peer) = peer.as_mut().as_mut() else {
        return;
    };
    let answer = peer
        .request(&format!("connect {} 1", ports.secure), CONNECT_LIMIT)
        .await
        .and_then(|r| field::<bool>(&r, "secure"));
    match answer {
        Ok(true) => println!(
            "  Curator's TLS session: zookeeper.client.secure=true (ClientCnxnSocketNetty)"
        ),
        Ok(false) => println!("  WARNING: Curator's session on the TLS port says it is not secure"),
        Err(reason) => println!("  Curator's TLS session: n/a ({reason})"),
    }
}

/// Round trips of an acquire on every row: the latency a delaying proxy adds
/// to it, in the proxy's round trips.
async fn round_trips(
    config: &Config,
    root: &str,
    contenders: &mut [Contender],
    server: &server::BenchServer,
    ports: &Ports,
    direct: &[Option<Spread>],
) -> Vec<Option<f64>> {
    let none = || ROWS.iter().map(|_| None).collect();
    println!();
    println!(
        "-- round trips: the same cycles through a proxy adding {} ms each way, one proxy per port --",
        config.delay.as_millis()
    );
    let addresses = (
        server.address().parse::<std::net::SocketAddr>(),
        server
            .secure_address()
            .unwrap_or_default()
            .parse::<std::net::SocketAddr>(),
    );
    let (Ok(plain_addr), Ok(secure_addr)) = addresses else {
        println!("n/a (cannot read the server's addresses)");
        return none();
    };
    let proxies = (
        proxy::DelayProxy::start(plain_addr, config.delay),
        proxy::DelayProxy::start(secure_addr, config.delay),
    );
    let (Ok(plain_proxy), Ok(secure_proxy)) = proxies else {
        println!("n/a (cannot start the proxies)");
        return none();
    };
    let via = Ports {
        plain: plain_proxy.addr().to_string(),
        secure: format!("{TLS_SCHEME}{}", secure_proxy.addr()),
    };
    let rtt = match (
        exists_p50(&ports.plain, 200).await,
        exists_p50(&via.plain, 200).await,
    ) {
        (Ok(d), Ok(p)) if p > d => {
            println!(
                "one round trip (p50 of 200 `exists`, plain port): direct {d:.3} ms, through the proxy {p:.3} ms: the proxy adds {:.3} ms",
                p - d
            );
            p - d
        }
        other => {
            println!("one round trip: n/a ({other:?})");
            return none();
        }
    };
    let (cycles, limit) = (config.latency_cycles, config.limit());
    let path = |c: &Contender, row: &Row| {
        let transport = if row.tls { "tls" } else { "plain" };
        format!("{root}/tls/latency-{}-{transport}", c.short)
    };
    // A session through the proxy for every row, and a few cycles on it,
    // before anything is measured.
    for row in &ROWS {
        let c = &mut contenders[row.contender];
        let path = path(c, row);
        if let Err(reason) = c.uncontended(via.of(row), &path, 10, limit).await {
            println!("  {:<28} n/a ({reason})", row.label);
        }
    }
    let mut reps: Vec<Vec<Measured<Cycles>>> = ROWS.iter().map(|_| Vec::new()).collect();
    for rep in 0..config.reps {
        for i in rotation(rep, ROWS.len()) {
            let row = &ROWS[i];
            let c = &mut contenders[row.contender];
            let path = path(c, row);
            settle().await;
            reps[i].push(c.uncontended(via.of(row), &path, cycles, limit).await);
        }
    }
    println!(
        "{:<28} {:>10} {:>13} {:>11} {:>7}",
        "row", "acq p50 ms", "min–max", "acq+rel p50", "trips"
    );
    let mut trips = Vec::new();
    for (i, row) in ROWS.iter().enumerate() {
        let values: Vec<f64> = reps[i]
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .map(|c| c.acq_p50_ms)
            .collect();
        let cycle: Vec<f64> = reps[i]
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .map(|c| c.p50_ms)
            .collect();
        let acquire = Spread::of(&values);
        let row_trips = acquire
            .zip(direct[i])
            .map(|(via, direct)| (via.median - direct.median) / rtt);
        trips.push(row_trips);
        let failed = reps[i].iter().find_map(|r| r.as_ref().err());
        println!(
            "{:<28} {:>10} {:>13} {:>11} {:>7}{}",
            row.label,
            opt(acquire, 3),
            acquire.map(|s| s.range(3)).unwrap_or_default(),
            opt(Spread::of(&cycle), 3),
            row_trips.map_or_else(|| "-".to_owned(), |t| format!("{t:.1}")),
            failed.map(|f| format!("  n/a ({f})")).unwrap_or_default()
        );
    }
    println!(
        "({cycles} cycles a rep; trips = (acq p50 here - acq p50 of the same row without the proxy) / the proxy's round trip)"
    );
    for row in ROWS.iter().filter(|row| !row.tls) {
        close_sessions(&mut contenders[row.contender], &via).await;
    }
    drop((plain_proxy, secure_proxy));
    trips
}

/// The issue 22 lines of the targets.
pub(crate) fn print_targets(f: &Findings) {
    let Some(tls) = &f.tls else {
        return;
    };
    let verdict = |ok: Option<bool>| match ok {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "n/a",
    };
    let trips = tls.trips.get(1).copied().flatten();
    println!(
        "TLS (issue 22): zk-curator's acquire over TLS, {} round trip(s) (target 1): {}",
        trips.map_or_else(|| "n/a".to_owned(), |t| format!("{t:.1}")),
        verdict(trips.map(|t| t < 1.5))
    );
    for (name, plain, secure) in LIBRARIES {
        let (p, t) = (
            tls.rates.get(plain).copied().flatten(),
            tls.rates.get(secure).copied().flatten(),
        );
        let target = if plain == 0 {
            format!(
                " (target <= 10%): {}",
                verdict(
                    p.zip(t)
                        .filter(|(_, t)| t.median > 0.0)
                        .map(|(p, t)| p.median / t.median - 1.0 <= 0.10)
                )
            )
        } else {
            " (for comparison)".to_owned()
        };
        println!("TLS (issue 22): {name}: {}{target}", tls_cost(p, t));
    }
}
