//! The lock benchmark (DESIGN.md §8, issue 9): zk-curator against its peers,
//! on one ZooKeeper, in one run. It prints figures and ratios; it asserts
//! nothing. BENCHMARKS.md describes the method and holds a full run.
//!
//! ```sh
//! cargo bench --bench locks                                   # full run, ~10 min
//! cargo bench --bench locks -- --plot benches/handoffs.svg    # and write the plot
//! cargo bench --bench locks -- --quick                        # CI smoke run, ~1.5 min
//! cargo bench --bench locks -- --ensemble 3                   # on a 3-member ensemble
//! cargo bench --bench locks -- --help                         # workloads and options
//! ```
//!
//! With `ZK_CONNECT` set it uses that ensemble; otherwise it starts one
//! Apache ZooKeeper configured like a production server (`locks/server.rs`:
//! forceSync=yes, ZooKeeper's default 1000 MB heap). With `--ensemble N`
//! (issue 32) it starts N such servers as one replicated ensemble
//! (`locks/ensemble.rs`) and runs the uncontended, contended, tasks (with
//! the cohort curve), failover and bounds workloads there, every contender
//! with the full connect string; it also measures the ensemble's own ceiling, the
//! create+delete pairs/s of pipelined `zookeeper-client` sessions
//! (`locks/ceiling.rs`), and gives each contended row as a share of it.
//! The other workloads need the standalone server and are skipped (named in
//! `--only`, they are an error).
//!
//! Contenders, all on the same server, in the same run:
//! * zk-curator's `InterProcessMutex` (guard API: `lock()`, `release()`);
//! * `zookeeper-client`'s own `Client::lock` (Curator's node layout);
//! * Apache Curator 5.4's `InterProcessMutex` (`peers/CuratorBench.java`);
//! * kazoo's `Lock` (`peers/kazoo_bench.py`).
//!
//! The failover workload (issue 18, `locks/failover.rs`) elects a leader
//! among K sessions with zk-curator's `LeaderLatch` and with Curator's (in
//! the same JVM peer), kills the leader (cut off behind a proxy of its own,
//! its session closed on the server), and times the hand-over to the next
//! participant; its requests and watches are counted by those proxies.
//!
//! The observe workload (issue 25, `locks/observe.rs`) loses the leader of
//! an election of P `LeaderLatch` participants the same way, and times how
//! long N `LeaderObserver` streams spread over S sessions take to report
//! the new leader, against the participants' own failover; each observer
//! session's proxy counts the notifications, listings and reads a change
//! costs it (`--observers N`, `--observer-sessions S`).
//!
//! The tasks workload (T tasks on one session) has a cohort row
//! (`cohort(CohortPolicy::default())`, issue 24) beside plain zk-curator and
//! Curator, hand-off latency and fsyncs per hand-off (`mntr`
//! `zk_cnt_fsynctime`), and then the curve over `max_passes` with the other
//! session's longest wait (`locks/cohort.rs`).
//!
//! The bounds workload (issue 46, `locks/bounds.rs`) times, on two
//! zk-curator sessions, how soon a waiter gets the lock after a stuck
//! holder's silence bound passes, against an ordinary hand-off interleaved
//! with it, and counts the requests per acquire and per hand-off with
//! bounds set (never passing) against none.
//!
//! The TLS workload (issue 22, `locks/tls.rs`) starts a second server
//! serving a TLS port beside the plain one and measures uncontended cycles
//! of zk-curator and Curator over each, and the round trips of an acquire
//! over TLS through the delaying proxy.
//!
//! Fairness: every contender keeps its sessions (and the peers their
//! process: one warm JVM, one Python) for the whole run, and is warmed up
//! (thousands of cycles and a contended run) before anything is measured.
//! Every workload runs in reps, the contenders interleaved in a rotating
//! order (rep 1: A B C D, rep 2: B C D A, ...); tables print the median
//! with the min–max over the reps, and a difference counts only when the
//! ranges do not overlap ("within noise" otherwise).
//!
//! Requests and watches are the server's own counts (`mntr`:
//! `packets_received`, less the idle ping rate measured before the
//! workloads, and the fired NodeDeleted/NodeChildrenChanged watches), read
//! before and after each measurement, so every contender is counted alike.
//!
//! The files, each with one job (all under `locks/` but the arguments every
//! bench program shares, `common/arguments.rs`; this file holds only `main`
//! and the run order):
//! * options and the run's frame: `options.rs` (the command line and the
//!   sizes it leads to), `target.rs` (the server under test), `server.rs`
//!   (starting our own ZooKeeper), `ensemble.rs` (our own ensemble,
//!   `--ensemble`), `header.rs` (the lines at the top);
//! * the contenders: `contenders.rs` (the rows and their two measurements),
//!   `sessions.rs` (opening a framework or client, plain or TLS),
//!   `apart.rs` (a runtime of its own, for a party that would be another
//!   process),
//!   `in_process.rs` (the in-process acquire/release and hand-off loop),
//!   `peers.rs` (the Curator and kazoo processes);
//! * measuring: `limits.rs` (time bounds, and `n/a` reasons), `mntr.rs`
//!   (the server's four-letter words and counts), `reps.rs` (reps in a
//!   rotating order, median and min–max), `figures.rs` (what one
//!   measurement yields), `stats.rs` (spreads, ratios, the noise rule),
//!   `proxy.rs` (the delaying proxy), `cpu.rs` (CPU time per hand-off);
//! * the output: `table.rs` (the columns the tables share), `plot.rs` (the
//!   SVG plot), `findings.rs` (what the workloads keep for the verdict),
//!   `verdict.rs` (the issue targets at the end);
//! * the workloads, in run order: `warm_up.rs`, `uncontended.rs`,
//!   `latency.rs`, `ceiling.rs` (`--ensemble` only), `contended.rs`,
//!   `tasks.rs` (with `cohort.rs`), `failover.rs`, `observe.rs`, `tls.rs`,
//!   `tree.rs` (with `entities.rs`), `bounds.rs`, `scale.rs`.

#[path = "locks/apart.rs"]
mod apart;
#[path = "common/arguments.rs"]
mod arguments;
#[path = "locks/bounds.rs"]
mod bounds;
#[path = "locks/ceiling.rs"]
mod ceiling;
#[path = "locks/cohort.rs"]
mod cohort;
#[path = "locks/contended.rs"]
mod contended;
#[path = "locks/contenders.rs"]
mod contenders;
#[path = "locks/cpu.rs"]
mod cpu;
#[path = "locks/ensemble.rs"]
mod ensemble;
#[path = "locks/entities.rs"]
mod entities;
#[path = "locks/failover.rs"]
mod failover;
#[path = "locks/figures.rs"]
mod figures;
#[path = "locks/findings.rs"]
mod findings;
#[path = "locks/header.rs"]
mod header;
#[path = "locks/in_process.rs"]
mod in_process;
#[path = "locks/latency.rs"]
mod latency;
#[path = "locks/limits.rs"]
mod limits;
#[path = "locks/mntr.rs"]
mod mntr;
#[path = "locks/observe.rs"]
mod observe;
#[path = "locks/options.rs"]
mod options;
#[path = "locks/peers.rs"]
mod peers;
#[path = "locks/plot.rs"]
mod plot;
#[path = "locks/proxy.rs"]
mod proxy;
#[path = "locks/publication.rs"]
mod publication;
#[path = "locks/reps.rs"]
mod reps;
#[path = "locks/scale.rs"]
mod scale;
#[path = "locks/server.rs"]
mod server;
#[path = "locks/sessions.rs"]
mod sessions;
#[path = "locks/stats.rs"]
mod stats;
#[path = "locks/table.rs"]
mod table;
#[path = "locks/target.rs"]
mod target;
#[path = "locks/tasks.rs"]
mod tasks;
#[path = "locks/tls.rs"]
mod tls;
#[path = "locks/tree.rs"]
mod tree;
#[path = "locks/uncontended.rs"]
mod uncontended;
#[path = "locks/verdict.rs"]
mod verdict;
#[path = "locks/warm_up.rs"]
mod warm_up;

use std::time::{Duration, Instant};

use bounds::bounds_phase;
use ceiling::ceiling_phase;
use contended::contended_phase;
use contenders::start_contenders;
use failover::failover_phase;
use findings::Findings;
use header::print_header;
use latency::latency_phase;
use limits::{bounded, BoxError};
use observe::observe_phase;
use options::{Config, Workload};
use reps::idle_rate;
use scale::scale_phase;
use target::{remove_tree, Target};
use tasks::tasks_phase;
use tls::tls_phase;
use tree::tree_phase;
use uncontended::uncontended_phase;
use verdict::{print_ensemble_summary, print_targets};
use warm_up::warm_up;

fn main() -> Result<(), BoxError> {
    // A scale child: started by this program itself, with arguments of its
    // own (`locks/scale.rs`).
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(scale::SCALE_CHILD) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let code = runtime.block_on(scale::child(&args[2..]));
        std::process::exit(code);
    }
    // The arguments before anything else: `--help`, or a mistake in them,
    // ends the program here.
    let config = Config::from_args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(config))
}

/// One run: the server, the contenders, the warm-up, then every workload
/// in order and the verdict.
async fn run(config: Config) -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .init();
    let run_started = Instant::now();

    let Some(mut target) = Target::from_env(config.ensemble).await? else {
        return Ok(());
    };
    let root = format!(
        "{}/bench/locks-{}-{}",
        target.chroot,
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );

    print_header(&config, &target).await;
    let (java, python) = tokio::join!(peers::prepare_java(), peers::prepare_python());
    let mut contenders = start_contenders(&java, &python).await;
    println!("contenders (in table order):");
    for c in &contenders {
        println!("  {:<36} {}", c.label, c.description);
    }

    let mut findings = Findings {
        labels: contenders.iter().map(|c| c.label).collect(),
        ..Findings::default()
    };
    warm_up(&config, &target, &root, &mut contenders).await;
    if let (Some(_), Some(addrs)) = (&target.ensemble, &target.four_letter) {
        // How the contenders' clients spread their sessions over the members.
        let counts: Vec<String> = mntr::connections(addrs)
            .await
            .iter()
            .map(|c| c.map_or_else(|| "n/a".to_owned(), |c| format!("{c:.0}")))
            .collect();
        println!(
            "client connections per member after the warm-up (the members in myid order): {}",
            counts.join(", ")
        );
    }
    let idle = idle_rate(&config, target.four_letter.as_deref()).await;
    // Each workload that runs (`--only`), in order, on the same contenders.
    macro_rules! workload {
        ($workload:expr, $phase:ident) => {
            if config.runs($workload) {
                $phase(
                    &config,
                    &target,
                    &root,
                    &mut contenders,
                    idle,
                    &mut findings,
                )
                .await;
            }
        };
    }
    workload!(Workload::Uncontended, uncontended_phase);
    workload!(Workload::Latency, latency_phase);
    // On the ensemble, its ceiling, before the workloads that compare with it.
    if config.ensemble.is_some()
        && (config.runs(Workload::Contended) || config.runs(Workload::Tasks))
    {
        ceiling_phase(&config, &target, &root, idle, &mut findings).await;
    }
    workload!(Workload::Contended, contended_phase);
    workload!(Workload::Tasks, tasks_phase);
    workload!(Workload::Failover, failover_phase);
    workload!(Workload::Observe, observe_phase);
    workload!(Workload::Tls, tls_phase);
    workload!(Workload::Tree, tree_phase);
    workload!(Workload::Bounds, bounds_phase);
    // The contenders' sessions go before the scale workload, which may
    // kill the server (before issue 9 it does).
    for c in contenders {
        c.close().await;
    }
    if config.runs(Workload::Scale) {
        scale_phase(&config, &mut target, &root, &java, &python, &mut findings).await;
    }
    if config.ensemble.is_some() {
        // The issue targets were set for the standalone server.
        print_ensemble_summary(&findings);
    } else {
        print_targets(&config, &findings);
    }

    if !target.is_own() {
        // A shared ensemble keeps the persistent parents some recipes
        // leave, so remove them.
        if let Err(err) =
            bounded(Duration::from_secs(60), remove_tree(&target.connect, &root)).await
        {
            println!("note: could not remove {root}: {err}");
        }
    }
    println!();
    println!(
        "total run time {:.0} s{}",
        run_started.elapsed().as_secs_f64(),
        if config.quick { " (--quick)" } else { "" }
    );
    drop(target);
    Ok(())
}
