//! Differential test: seeded random sequences of operations (creates of every kind but
//! container/TTL, deletes and sets with random versions, reads, multis, one-shot watches)
//! from three sessions run against the embedded server and a real ZooKeeper; the transcripts,
//! including which watch events each session has received after every step, must be equal.
//! The same sequences run on the simulated ensemble of the embedded server (one session on
//! each of three members) and on a real 3-node ensemble: every step is followed by a `sync`
//! and a read on every session, so what each session sees must be equal there too.
#![allow(clippy::unwrap_used, missing_docs)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use zk_curator_server::ensemble::Ensemble;
use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::{EmbeddedServer, TestingCluster, ZooKeeperServer};
use zookeeper_client::{Acls, Client, CreateMode, Stat, WatchedEvent};

const STEP: Duration = Duration::from_secs(10);
const OPS: usize = 250;

async fn bounded<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(STEP, future)
        .await
        .expect("step timed out")
}

/// The draws of a seeded `fastrand` generator the sequences are made of.
trait Draw {
    fn below(&mut self, n: usize) -> usize;
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str;
}

impl Draw for fastrand::Rng {
    fn below(&mut self, n: usize) -> usize {
        self.usize(..n)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const PATHS: &[&str] = &[
    "/d/a", "/d/b", "/d/a/x", "/d/a/y", "/d/b/x", "/d/a/x/z", "/d/s-", "/d/a/s-",
];

fn st(stat: &Stat, sessions: &[i64]) -> String {
    let owner = match stat.ephemeral_owner {
        0 => "-".to_owned(),
        o => sessions
            .iter()
            .position(|s| *s == o)
            .map_or_else(|| "?".to_owned(), |i| format!("s{i}")),
    };
    format!(
        "v{} cv{} av{} len{} n{} o{} c=m:{} p=c:{}",
        stat.version,
        stat.cversion,
        stat.aversion,
        stat.data_length,
        stat.num_children,
        owner,
        stat.czxid == stat.mzxid,
        stat.pzxid == stat.czxid
    )
}

type Pending = Pin<Box<dyn Future<Output = WatchedEvent> + Send>>;

async fn run(cs: &str, seed: u64) -> Vec<String> {
    run_on([cs, cs, cs], seed).await
}

/// The sequence of `seed`, its three sessions connected to `cs[0]`, `cs[1]` and `cs[2]`.
async fn run_on(cs: [&str; 3], seed: u64) -> Vec<String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut clients = Vec::new();
    for cs in cs {
        clients.push(
            bounded(
                Client::connector()
                    .with_session_timeout(Duration::from_secs(20))
                    .connect(cs),
            )
            .await
            .unwrap(),
        );
    }
    let sessions: Vec<i64> = clients.iter().map(|c| c.session_id().0).collect();
    let s = |stat: &Stat| st(stat, &sessions);
    let root = &clients[0];
    let _ = bounded(root.create(
        "/d",
        b"",
        &CreateMode::Persistent.with_acls(Acls::anyone_all()),
    ))
    .await;
    let mut watches: Vec<(String, Pending)> = Vec::new();
    let mut log = Vec::new();
    for step in 0..OPS {
        let who = rng.below(3);
        let c = &clients[who];
        let path = rng.pick(PATHS);
        let line = match rng.below(12) {
            0..=2 => {
                let mode = [
                    CreateMode::Persistent,
                    CreateMode::Ephemeral,
                    CreateMode::PersistentSequential,
                    CreateMode::EphemeralSequential,
                ][rng.below(4)];
                let data = vec![b'x'; rng.below(5)];
                let r = bounded(c.create(path, &data, &mode.with_acls(Acls::anyone_all()))).await;
                format!(
                    "create {mode:?} {path}: {:?}",
                    r.map(|(st, seq)| format!("{seq} {}", s(&st)))
                )
            }
            3 => {
                let version = [None, Some(0), Some(1)][rng.below(3)];
                let r = bounded(c.delete(path, version)).await;
                format!("delete {path} {version:?}: {r:?}")
            }
            4 => {
                let version = [None, Some(0), Some(1), Some(2)][rng.below(4)];
                let data = vec![b'y'; rng.below(5)];
                let r = bounded(c.set_data(path, &data, version)).await;
                format!("set {path} {version:?}: {:?}", r.map(|st| s(&st)))
            }
            5 => {
                let r = bounded(c.get_children(path)).await;
                format!(
                    "children {path}: {:?}",
                    r.map(|(mut k, st)| {
                        k.sort();
                        format!("{k:?} {}", s(&st))
                    })
                )
            }
            6 => match bounded(c.get_and_watch_data(path)).await {
                Ok((d, st, w)) => {
                    watches.push((format!("s{who} data {path}"), Box::pin(w.changed())));
                    format!("watch data {path}: {} {}", d.len(), s(&st))
                }
                Err(e) => format!("watch data {path}: {e:?}"),
            },
            7 => match bounded(c.check_and_watch_stat(path)).await {
                Ok((st, w)) => {
                    watches.push((format!("s{who} exists {path}"), Box::pin(w.changed())));
                    format!("watch exists {path}: {:?}", st.map(|st| s(&st)))
                }
                Err(e) => format!("watch exists {path}: {e:?}"),
            },
            8 => match bounded(c.get_and_watch_children(path)).await {
                Ok((mut k, st, w)) => {
                    k.sort();
                    watches.push((format!("s{who} children {path}"), Box::pin(w.changed())));
                    format!("watch children {path}: {k:?} {}", s(&st))
                }
                Err(e) => format!("watch children {path}: {e:?}"),
            },
            9 => {
                let other = rng.pick(PATHS);
                let mut multi = c.new_multi_writer();
                multi
                    .add_create(
                        path,
                        b"m",
                        &CreateMode::Persistent.with_acls(Acls::anyone_all()),
                    )
                    .unwrap();
                match rng.below(3) {
                    0 => multi.add_check_version(other, rng.below(2) as i32).unwrap(),
                    1 => multi.add_delete(other, None).unwrap(),
                    _ => multi.add_set_data(other, b"mm", None).unwrap(),
                }
                let r = bounded(multi.commit()).await;
                format!(
                    "multi create {path} + op on {other}: {:?}",
                    r.map(|results| format!("{} results", results.len()))
                )
            }
            10 => {
                let r = bounded(c.count_descendants_number("/d")).await;
                format!("count: {r:?}")
            }
            _ => {
                let r = bounded(c.get_data(path)).await;
                format!(
                    "get {path}: {:?}",
                    r.map(|(d, st)| format!("{} {}", d.len(), s(&st)))
                )
            }
        };
        log.push(format!("{step} s{who} {line}"));
        // A round trip on every session: any notification caused so far has arrived.
        for c in &clients {
            bounded(c.sync("/")).await.unwrap();
            let _ = bounded(c.check_stat("/d")).await.unwrap();
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut fired = Vec::new();
        watches.retain_mut(|(label, fut)| match fut.as_mut().poll(&mut cx) {
            Poll::Ready(e) => {
                fired.push(format!("  event {label}: {:?} {}", e.event_type, e.path));
                false
            }
            Poll::Pending => true,
        });
        fired.sort();
        log.extend(fired);
    }
    log
}

#[tokio::test(flavor = "multi_thread")]
async fn random_operation_sequences_match_real_zookeeper() {
    let seeds = [0x1234_5678_9abc_def1_u64, 0x0fed_cba9_8765_4321, 42];
    // The real half: a missing ZooKeeper fails the test, unless ZK_SKIP_MISSING asks to skip.
    let real_available =
        Prerequisite::ZooKeeper.check("random_operation_sequences_match_real_zookeeper");
    for seed in seeds {
        let embedded = EmbeddedServer::builder()
            .extended_types(true)
            .start()
            .await
            .unwrap();
        let ours = run(&embedded.connect_string(), seed).await;
        assert!(ours.len() >= OPS);
        let events = ours.iter().filter(|l| l.contains(" event ")).count();
        let successes = ours.iter().filter(|l| l.contains("Ok(")).count();
        let failures = ours.iter().filter(|l| l.contains("Err(")).count();
        println!("seed {seed:#x}: {events} events, {successes} successes, {failures} errors");
        assert!(
            events >= 5 && successes >= 30 && failures >= 30,
            "a vacuous run"
        );
        if !real_available {
            continue;
        }
        let real = ZooKeeperServer::start_async().await.unwrap();
        let theirs = run(&real.connect_string(), seed).await;
        let first_difference = ours
            .iter()
            .zip(theirs.iter())
            .position(|(a, b)| a != b)
            .or((ours.len() != theirs.len()).then(|| ours.len().min(theirs.len())));
        if let Some(i) = first_difference {
            let from = i.saturating_sub(5);
            panic!(
                "seed {seed:#x}: transcripts differ at line {i}\nembedded:\n{}\nreal:\n{}",
                ours[from..(i + 3).min(ours.len())].join("\n"),
                theirs[from..(i + 3).min(theirs.len())].join("\n"),
            );
        }
    }
}

/// Where the first difference of two transcripts is, shown with the lines around it.
fn compare(seed: u64, ours: &[String], theirs: &[String]) {
    let first_difference = ours
        .iter()
        .zip(theirs.iter())
        .position(|(a, b)| a != b)
        .or((ours.len() != theirs.len()).then(|| ours.len().min(theirs.len())));
    if let Some(i) = first_difference {
        let from = i.saturating_sub(5);
        panic!(
            "seed {seed:#x}: transcripts differ at line {i}\nembedded ensemble:\n{}\nreal:\n{}",
            ours[from..(i + 3).min(ours.len())].join("\n"),
            theirs[from..(i + 3).min(theirs.len())].join("\n"),
        );
    }
}

/// Deletes `path` and everything under it, if there.
fn wipe_tree<'a>(
    client: &'a Client,
    path: &'a str,
) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
    Box::pin(async move {
        if let Ok(children) = bounded(client.list_children(path)).await {
            for child in children {
                wipe_tree(client, &format!("{path}/{child}")).await;
            }
        }
        let _ = bounded(client.delete(path, None)).await;
    })
}

/// The simulated ensemble, its members on ports of their own: their connect strings.
async fn simulated_ensemble() -> (std::sync::Arc<Ensemble>, Vec<String>) {
    let mut listeners = Vec::new();
    for _ in 0..3 {
        listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let addresses: Vec<std::net::SocketAddr> =
        listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let known = addresses.clone();
    let ensemble = std::sync::Arc::new(
        Ensemble::builder(EmbeddedServer::builder())
            .size(3)
            .start(|i| known[i])
            .unwrap(),
    );
    for (member, listener) in listeners.into_iter().enumerate() {
        let ensemble = ensemble.clone();
        tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                ensemble.serve_connection(member, stream, peer);
            }
        });
    }
    (
        ensemble,
        addresses.iter().map(ToString::to_string).collect(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn random_operation_sequences_on_an_ensemble_match_a_real_ensemble() {
    let seeds = [0x1234_5678_9abc_def1_u64, 42];
    let real_available = Prerequisite::ZooKeeper
        .check("random_operation_sequences_on_an_ensemble_match_a_real_ensemble");
    let real = if real_available {
        let cluster = TestingCluster::builder().start_async().await.unwrap();
        cluster
            .wait_until_serving_async(Duration::from_secs(60))
            .await
            .unwrap();
        Some(cluster)
    } else {
        None
    };
    for seed in seeds {
        let (_ensemble, members) = simulated_ensemble().await;
        let ours = run_on([&members[0], &members[1], &members[2]], seed).await;
        let single = EmbeddedServer::builder().start().await.unwrap();
        // Synced after every step, the members answer as one server does.
        compare(seed, &ours, &run(&single.connect_string(), seed).await);
        let Some(cluster) = &real else { continue };
        // A fresh root for each seed on the real ensemble.
        let wipe = Client::connect(&cluster.connect_string()).await.unwrap();
        wipe_tree(&wipe, "/d").await;
        let real_members: Vec<String> = (0..3).map(|i| cluster.connect_string_of(i)).collect();
        let theirs = run_on([&real_members[0], &real_members[1], &real_members[2]], seed).await;
        compare(seed, &ours, &theirs);
        println!(
            "seed {seed:#x}: the same {} lines on both ensembles",
            ours.len()
        );
    }
}
