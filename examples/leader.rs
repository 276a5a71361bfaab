//! Leader election: three services, each with its own ZooKeeper session,
//! elect a leader with a `LeaderLatch`. Each leader writes through its
//! term's fence (ZooKeeper refuses the write once the term is over), then
//! steps down, and the next in line takes over with a greater fencing
//! token. Last, a `LeaderSelector` runs a job while it leads; closing it
//! cancels the job.
//!
//! With `ZK_CONNECT` set (e.g. `127.0.0.1:2181`) it uses that ensemble;
//! otherwise it starts a throw-away server on a free loopback port: the
//! embedded ZooKeeper-protocol server (no JVM needed), or a real ZooKeeper
//! with `ZK_TEST_SERVER=real`.
//!
//! Run: `cargo run -p examples --example leader`

mod common;

use std::time::Duration;

use tokio::sync::mpsc;
use zk_curator::{zk, LeaderElection, LeaderLatch, LeaderSelector, LeaderTerm};

use common::BoxError;

const SERVICES: usize = 3;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    common::init_tracing();

    // Keep the server (if we started one) alive until the end of main.
    let (connect, _server) = common::server().await?;
    let base = format!("/leader-example/{}", std::process::id());
    let election = format!("{base}/election");
    let state = format!("{base}/state");

    let frameworks = futures::future::try_join_all(
        (0..SERVICES).map(|_| common::connected(&connect, Duration::from_secs(10))),
    )
    .await?;
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let open = &open;
    let state_path = state.as_str();
    frameworks[0]
        .call_with_retry(|client| async move { client.mkdir(state_path, open).await })
        .await?;

    // Every service takes part; the first to queue leads.
    let mut latches = Vec::new();
    for (i, framework) in frameworks.iter().enumerate() {
        let latch = LeaderLatch::new(framework.clone(), &election, format!("service-{i}"))?;
        latch.start()?;
        latches.push(latch);
    }
    let mut last_token = None;
    for _ in 0..SERVICES {
        // Whoever leads now (the others' waits are dropped: that changes nothing).
        let waits = latches
            .iter()
            .map(|latch| Box::pin(latch.await_leadership()));
        let (term, index, _) = futures::future::select_all(waits).await;
        let term = term?;
        let latch = latches.remove(index);
        let who: Vec<String> = latch
            .participants()
            .await?
            .into_iter()
            .map(|p| p.id)
            .collect();
        println!(
            "{} leads (fencing token {}); participants in line: {who:?}",
            latch.id(),
            term.fencing_token()
        );
        assert!(last_token.is_none_or(|last| term.fencing_token() > last));
        last_token = Some(term.fencing_token());
        tokio::select! {
            loss = term.lost() => println!("{} lost its term: {loss}", latch.id()),
            written = lead(&term, &state, latch.id()) => written?,
        }
        // Step down: the next in line leads.
        latch.close().await?;
        // The old term is over: its fence is refused from now on.
        match term.fence() {
            Err(err) => println!("  {} stepped down; its old term: {err}", latch.id()),
            Ok(_) => return Err("a term that was given up still fences".into()),
        }
    }

    // A selector runs its job while it leads; closing it cancels the job.
    let (started, mut jobs) = mpsc::unbounded_channel();
    let selector = LeaderSelector::with_id(
        frameworks[0].clone(),
        &format!("{base}/scheduler"),
        "scheduler-0",
        move |term: LeaderTerm| {
            let started = started.clone();
            async move {
                if started.send(term.fencing_token()).is_err() {
                    eprintln!("nobody waits for the job's start any more");
                }
                // The job: runs until the term ends or the selector closes.
                loop {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        },
    )?;
    selector.start()?;
    let token = jobs
        .recv()
        .await
        .ok_or("the selector's job never started")?;
    println!("the scheduler job runs (fencing token {token}); closing the selector cancels it");
    selector.close().await?;

    for framework in frameworks {
        framework.close().await;
    }
    println!("done: {SERVICES} terms, tokens only went up");
    Ok(())
}

/// A leader's work: one write, fenced by the term.
async fn lead(term: &LeaderTerm, state: &str, who: &str) -> Result<(), BoxError> {
    let fence = term.fence()?;
    fence
        .set_data(state, format!("written by {who}").as_bytes(), None)
        .await?;
    println!("  {who} wrote {state} through its term's fence");
    Ok(())
}
