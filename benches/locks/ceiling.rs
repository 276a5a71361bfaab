//! The ensemble's own ceiling (`--ensemble`, issue 32): how many
//! create+delete pairs per second the ensemble commits when clients never
//! wait for a reply before sending more.
//!
//! A hand-off that is not a cohort pass costs at least one create (the next
//! holder's node) and one delete (the last holder's), each a write that
//! needs a quorum round, so this rate is the physical limit of hand-offs on
//! that ensemble; the contended tables give each contender's hand-offs/s as
//! a share of it.
//!
//! `zookeeper-client` directly, S sessions spread evenly over the members
//! (session i connects to member i mod N only), each keeping D pairs in
//! flight: a pair is a create of an ephemeral node with a name of its own
//! and its delete, both sent at once (a session's requests are applied in
//! order, so the delete finds the node); a new pair is sent as soon as one
//! completes. A rep counts the pairs that completed within the window.

use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use zk_curator::framework::zk;

use super::figures::per;
use super::findings::Findings;
use super::limits::{bounded, BoxError, Measured, Scoped};
use super::mntr::{counters, Traffic};
use super::options::Config;
use super::reps::{settle, spread};
use super::sessions::raw_client;
use super::table::opt;
use super::target::Target;

/// One rep: pairs per second, and what they cost the ensemble.
struct Rep {
    per_s: f64,
    requests: Option<f64>,
    fsyncs: Option<f64>,
}

pub(crate) async fn ceiling_phase(
    config: &Config,
    target: &Target,
    root: &str,
    idle: f64,
    findings: &mut Findings,
) {
    let Some(ensemble) = &target.ensemble else {
        return;
    };
    let members = ensemble.addresses();
    let (sessions, depth, window) = (
        config.ceiling_sessions,
        config.ceiling_depth,
        config.contend,
    );
    println!();
    println!(
        "== The ensemble's ceiling: create+delete pairs/s, {sessions} zookeeper-client sessions ({} per member), {depth} pairs in flight each, {} s a rep ==",
        sessions.div_ceil(members.len()),
        window.as_secs_f64()
    );
    println!("   a pair = create an ephemeral node and delete it, both sent without waiting; the limit of hand-offs that are");
    println!("   not cohort passes (each needs a create and a delete, committed by a quorum)");
    let base = format!("{root}/ceiling");
    let opened = async {
        let mut clients = Vec::with_capacity(sessions);
        for i in 0..sessions {
            clients.push(raw_client(&members[i % members.len()]).await?);
        }
        if let Some(first) = clients.first() {
            create_parents(first, &format!("{base}/x")).await?;
        }
        Ok::<_, BoxError>(clients)
    };
    let clients = match opened.await {
        Ok(clients) => clients,
        Err(err) => {
            println!("n/a (connect: {err})");
            return;
        }
    };
    let limit = config.limit();
    // An unmeasured run on the new sessions.
    let _ = pairs(&clients, &base, depth, Duration::from_millis(500), limit).await;
    let mut reps: Vec<Measured<Rep>> = Vec::with_capacity(config.reps);
    for _ in 0..config.reps {
        settle().await;
        let addr = target.four_letter.as_deref();
        let before = counters(addr).await;
        let started = Instant::now();
        let done = pairs(&clients, &base, depth, window, limit).await;
        let elapsed = started.elapsed();
        let after = counters(addr).await;
        let traffic = Traffic::between(before, after, elapsed, idle);
        reps.push(done.map(|(within, all)| Rep {
            per_s: within as f64 / window.as_secs_f64(),
            requests: per(traffic.map(|t| t.requests), all as f64),
            fsyncs: per(traffic.and_then(|t| t.fsyncs), all as f64),
        }));
    }
    drop(clients);
    let spread_of = |f: &dyn Fn(&Rep) -> Option<f64>| spread(&reps, f);
    let rate = spread_of(&|r| Some(r.per_s));
    let requests = spread_of(&|r| r.requests);
    let fsyncs = spread_of(&|r| r.fsyncs);
    println!(
        "{:<34} {:>10} {:>17} {:>9} {:>11}  note",
        "", "pairs/s", "min–max", "req/pair", "fsyncs/pair"
    );
    let failed: Vec<&String> = reps.iter().filter_map(|r| r.as_ref().err()).collect();
    let note = match failed.first() {
        None if reps.len() < 2 => "1 rep: no noise estimate".to_owned(),
        None => String::new(),
        Some(first) => format!("{} of {} reps failed: {first}", failed.len(), reps.len()),
    };
    match rate {
        Some(s) => println!(
            "{:<34} {:>10.0} {:>17} {:>9} {:>11}  {note}",
            "ceiling (zookeeper-client, pipelined)",
            s.median,
            s.range(0),
            opt(requests, 2),
            opt(fsyncs, 2),
        ),
        None => println!("{:<34} {:>10}  {note}", "ceiling", "n/a"),
    }
    println!("(req = requests the members received per pair; fsyncs = transaction-log fsyncs per pair, all members together)");
    findings.ceiling = rate;
}

/// Every session pipelines pairs for `window`; the pairs that completed
/// within it, and all the pairs sent (the drain included). Also the
/// standalone server's ceiling in the tree workload (`entities.rs`).
pub(crate) async fn pairs(
    clients: &[zk::Client],
    base: &str,
    depth: usize,
    window: Duration,
    limit: Duration,
) -> Measured<(u64, u64)> {
    let deadline = Instant::now() + window;
    let tasks = Scoped(
        clients
            .iter()
            .enumerate()
            .map(|(i, client)| {
                let (client, prefix) = (client.clone(), format!("{base}/s{i}-"));
                tokio::spawn(pipeline(client, prefix, depth, deadline))
            })
            .collect(),
    );
    let joined = async move {
        let mut tasks = tasks;
        let (mut within, mut all) = (0, 0);
        for task in tasks.0.iter_mut() {
            let (w, a) = task.await??;
            within += w;
            all += a;
        }
        Ok::<_, BoxError>((within, all))
    };
    bounded(limit, joined).await
}

/// One session's pairs until `deadline`: keeps `depth` in flight; the
/// pairs completed by the deadline, and all the pairs it sent.
async fn pipeline(
    client: zk::Client,
    prefix: String,
    depth: usize,
    deadline: Instant,
) -> Result<(u64, u64), BoxError> {
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    let (client, ephemeral) = (&client, &ephemeral);
    let mut in_flight = FuturesUnordered::new();
    let (mut sent, mut within) = (0u64, 0u64);
    loop {
        while in_flight.len() < depth && Instant::now() < deadline {
            let path = format!("{prefix}{sent}");
            sent += 1;
            in_flight.push(async move {
                // Both requests leave when the pair is first polled, the
                // delete right behind the create.
                let create = client.create(&path, b"", ephemeral);
                let delete = client.delete(&path, None);
                let (created, deleted) = tokio::join!(create, delete);
                created?;
                deleted?;
                Ok::<_, zk::Error>(Instant::now())
            });
        }
        match in_flight.next().await {
            Some(Ok(done)) => within += u64::from(done <= deadline),
            Some(Err(err)) => return Err(err.into()),
            None => return Ok((within, sent)),
        }
    }
}

/// Creates the persistent parents of `path` (not `path` itself).
pub(crate) async fn create_parents(client: &zk::Client, path: &str) -> Result<(), BoxError> {
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let mut at = String::new();
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        at.push('/');
        at.push_str(part);
        match client.create(&at, b"", &persistent).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}
