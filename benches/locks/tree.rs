//! The tree workload (issue 45): a `TreeObserver` following a root of many
//! lock paths. How long its cold start takes (a sync and the pipelined
//! listing of every path and participant), what it adds to this process's
//! memory, and how soon after a hand-off commits (the deletion's reply) its
//! view shows the next holder, p50 and p99.
//!
//! The tree is P paths under `<root>/tree`, each with Q participant nodes
//! named as a Curator mutex names them (persistent, so that no session has
//! to hold them; the observer reads names, data and stats alike). Made with
//! pipelined creates, removed the same way afterwards. A hand-off is the
//! deletion of a path's first node: the observer's view must then show the
//! second as holder. Memory is this process's VmRSS before the observer
//! starts and once its view is current (the server, when it runs in this
//! process, made its nodes before: what grows is the observer's, with the
//! server's answers to its reads). Last, a burst: B participants queue on
//! one new path at once (pipelined creates), three times, and the time from
//! the last create's reply until the view shows them all: an observer that
//! remade a path's view at each event fell behind by n² steps there.
//!
//! Then, once the tree is removed, the hand-offs (`entities.rs`): 1,000
//! tasks on one session, a lock each, against Curator and the server's
//! create+delete ceiling, with and without an observer; and contended
//! hand-offs/s with an observer attached against without.

use std::time::{Duration, Instant};

use zk_curator::framework::zk;
use zk_curator::recipes::layout::Role;
use zk_curator::recipes::tree::TreeObserver;

use super::contenders::Contender;
use super::entities::entities_phase;
use super::figures::percentile;
use super::findings::Findings;
use super::limits::within;
use super::options::Config;
use super::sessions::{framework, raw_client, Tune};
use super::target::Target;

/// The sizes of the tree: paths, and participants per path.
fn sizes(config: &Config) -> (usize, usize) {
    if config.quick {
        (50, 4)
    } else {
        (10_000, 10)
    }
}

/// How many participants queue at once in one burst.
fn burst_size(config: &Config) -> usize {
    if config.quick {
        1_000
    } else {
        10_000
    }
}

/// Bursts timed, each on a path of its own.
const BURSTS: usize = 3;

/// Creates (or deletes) this many nodes in flight at once.
const BATCH: usize = 2_000;
/// Bounds on the cold start and on one hand-off seen.
const COLD_LIMIT: Duration = Duration::from_secs(120);
const SEEN_LIMIT: Duration = Duration::from_secs(10);

fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn node(dir: &str, seq: usize) -> String {
    format!("{dir}/_c_0f8fad5b-d9cb-469f-a165-70867728950e-lock-{seq:010}")
}

/// Runs `ops` (one request each) at most [`BATCH`] at a time.
async fn in_batches<F, Fut>(items: Vec<String>, op: F) -> Result<(), zk::Error>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<(), zk::Error>>,
{
    for chunk in items.chunks(BATCH) {
        let results = futures::future::join_all(chunk.iter().cloned().map(&op)).await;
        for result in results {
            result?;
        }
    }
    Ok(())
}

pub(crate) async fn tree_phase(
    config: &Config,
    target: &Target,
    root: &str,
    contenders: &mut [Contender],
    idle: f64,
    findings: &mut Findings,
) {
    let (paths, per_path) = sizes(config);
    println!();
    println!(
        "== Tree: one TreeObserver over {paths} lock paths of {per_path} participants ({} nodes) ==",
        paths * per_path
    );
    match run(config, target, root, paths, per_path).await {
        Ok(cold) => findings.tree_cold = Some(cold),
        Err(err) => println!("tree workload failed: {err}"),
    }
    entities_phase(config, target, root, contenders, idle, findings).await;
}

async fn run(
    config: &Config,
    target: &Target,
    root: &str,
    paths: usize,
    per_path: usize,
) -> Result<(f64, Option<f64>), Box<dyn std::error::Error + Send + Sync>> {
    let base = format!("{root}/tree");
    let client = raw_client(&target.connect).await?;
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    for level in [root.to_owned(), base.clone()] {
        match client.create(&level, &[], &open).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(err) => return Err(err.into()),
        }
    }
    let dirs: Vec<String> = (0..paths).map(|i| format!("{base}/p{i}")).collect();
    let made = Instant::now();
    let create = |path: String| {
        let (client, open) = (&client, &open);
        async move {
            match client.create(&path, b"bench", open).await {
                Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                Err(err) => Err(err),
            }
        }
    };
    in_batches(dirs.clone(), create).await?;
    let nodes: Vec<String> = dirs
        .iter()
        .flat_map(|dir| (0..per_path).map(move |seq| node(dir, seq)))
        .collect();
    in_batches(nodes, create).await?;
    println!(
        "tree made in {:.1} s ({} paths, {} participants)",
        made.elapsed().as_secs_f64(),
        paths,
        paths * per_path
    );

    let fw = framework(&target.connect, Tune::Plain).await?;
    let rss_before = rss_kib();
    let observer = TreeObserver::new(fw.clone(), &base, paths + 10)?;
    let started = Instant::now();
    observer.start()?;
    let mut changes = observer.changes();
    within(COLD_LIMIT, async {
        loop {
            let view = changes.borrow_and_update().clone();
            if view.current && view.paths.len() == paths {
                return;
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    })
    .await?;
    let cold = started.elapsed();
    let rss_after = rss_kib();
    let grown_mib = match (rss_before, rss_after) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before) as f64 / 1024.0),
        _ => None,
    };
    let grown = grown_mib.map_or_else(|| "n/a".to_owned(), |m| format!("{m:.1} MiB"));
    println!(
        "cold start (sync, pipelined listing, view current): {:.2} s; this process's RSS grew by {grown}",
        cold.as_secs_f64()
    );

    // Hand-offs: delete a path's first node, time until the view shows the
    // second holding.
    let handoffs = paths.min(per_path.saturating_sub(1) * paths).min(500);
    let mut seen = Vec::with_capacity(handoffs);
    for i in 0..handoffs {
        let dir = &dirs[i % paths];
        let round = i / paths;
        let first = node(dir, round);
        let next = node(dir, round + 1);
        client.delete(&first, None).await?;
        let committed = Instant::now();
        within(SEEN_LIMIT, async {
            loop {
                let view = changes.borrow_and_update().clone();
                let holder = view.paths.get(dir.as_str()).and_then(|p| {
                    p.participants
                        .iter()
                        .find(|o| o.participant.role == Role::Holder)
                        .map(|o| o.participant.node_path.clone())
                });
                if holder.as_deref() == Some(next.as_str()) {
                    return;
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        })
        .await?;
        seen.push(committed.elapsed());
    }
    seen.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "from a hand-off's commit (the delete's reply) to the observer's view: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {} hand-offs",
        ms(percentile(&seen, 0.5)),
        ms(percentile(&seen, 0.99)),
        seen.last().copied().map_or(f64::NAN, ms),
        seen.len()
    );
    let delete = |path: String| {
        let client = &client;
        async move {
            match client.delete(&path, None).await {
                Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                Err(err) => Err(err),
            }
        }
    };

    // Bursts: B participants queue on a new path at once; time from the
    // last create's reply until the view shows them all.
    let size = burst_size(config);
    let mut caught_up = Vec::with_capacity(BURSTS);
    for rep in 0..BURSTS {
        let dir = format!("{base}/burst{rep}");
        create(dir.clone()).await?;
        let nodes: Vec<String> = (0..size).map(|seq| node(&dir, seq)).collect();
        in_batches(nodes.clone(), create).await?;
        let committed = Instant::now();
        within(COLD_LIMIT, async {
            loop {
                let view = changes.borrow_and_update().clone();
                let shown = view
                    .paths
                    .get(dir.as_str())
                    .map_or(0, |p| p.participants.len());
                if view.current && shown == size {
                    return;
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        })
        .await?;
        caught_up.push(committed.elapsed());
        in_batches(nodes, delete).await?;
        delete(dir).await?;
    }
    caught_up.sort();
    println!(
        "a burst of {size} participants queueing on one path at once: the view shows them all {:.1} ms after the last create's reply (median of {BURSTS}, min–max {:.1}–{:.1})",
        ms(percentile(&caught_up, 0.5)),
        caught_up.first().copied().map_or(f64::NAN, ms),
        caught_up.last().copied().map_or(f64::NAN, ms),
    );

    let view = observer.view();
    println!(
        "observer: {} events applied, {} listing(s), capped: {}",
        view.events, view.listings, view.capped
    );
    observer.close().await;
    fw.close().await;

    // Remove the tree, deepest first.
    let removed = Instant::now();
    let leftover: Vec<String> = dirs
        .iter()
        .flat_map(|dir| (0..per_path).map(move |seq| node(dir, seq)))
        .collect();
    in_batches(leftover, delete).await?;
    in_batches(dirs, delete).await?;
    delete(base).await?;
    println!("tree removed in {:.1} s", removed.elapsed().as_secs_f64());
    Ok((cold.as_secs_f64(), grown_mib))
}
