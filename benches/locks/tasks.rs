//! The tasks workload: T tasks on ONE session against as many sessions of
//! one task, in alternating order; then the one-session shape in detail
//! (requests, fsyncs and latency per hand-off, cohort passes), and the
//! cohort curve (`cohort.rs`) on the same shape.

use std::time::Instant;

use super::cohort;
use super::contenders::{Contender, COHORT, CURATOR, ZK_CURATOR};
use super::figures::{per, Handoffs};
use super::findings::{CohortRow, Findings};
use super::mntr::{counters, Traffic};
use super::options::Config;
use super::reps::{failures, run_reps, settle, spread, Sample};
use super::stats::{ratio, Spread};
use super::table::{lead_columns, lead_header, noise_note, opt};
use super::target::Target;

pub(crate) async fn tasks_phase(
    config: &Config,
    target: &Target,
    root: &str,
    contenders: &mut [Contender],
    idle: f64,
    findings: &mut Findings,
) {
    let (t, s) = (config.tasks, config.task_sessions);
    println!();
    println!(
        "== {t} tasks (threads for the peers) on ONE session against {s} sessions of one task, one path, {} s a rep ==",
        config.contend.as_secs()
    );
    let connect = target.connect.clone();
    let (window, limit) = (config.contend, config.limit());
    let addr = target.four_letter.clone();
    // Each rep runs both shapes per contender, in alternating order, with
    // the server's counts read around each shape.
    let reps = run_reps(config, None, 0.0, contenders, |c, rep| {
        let (connect, addr) = (connect.clone(), addr.clone());
        let base = format!("{root}/tasks/{}", c.short);
        Box::pin(async move {
            let (mut single, mut many) = (None, None);
            for shape in [rep % 2, 1 - rep % 2] {
                let (sessions, tasks, path) = if shape == 0 {
                    (1, t, format!("{base}-one"))
                } else {
                    (s, s, format!("{base}-many"))
                };
                c.connect(&connect, sessions).await?;
                settle().await;
                let before = counters(addr.as_deref()).await;
                let started = Instant::now();
                let result = c
                    .contended(&connect, &path, sessions, tasks, window, limit)
                    .await?;
                let elapsed = started.elapsed();
                let after = counters(addr.as_deref()).await;
                let traffic = Traffic::between(before, after, elapsed, idle);
                let releases = result.releases as f64;
                let shape_figures = Shape {
                    requests: per(traffic.map(|t| t.requests), releases),
                    fsyncs: per(traffic.and_then(|t| t.fsyncs), releases),
                    handoffs: result,
                };
                if shape == 0 {
                    single = Some(shape_figures);
                } else {
                    many = Some(shape_figures);
                }
            }
            match (single, many) {
                (Some(a), Some(b)) => Ok((a, b)),
                _ => Err("a shape did not run".to_owned()),
            }
        })
    })
    .await;
    println!(
        "{:<34} {:>18} {:>17} {:>6} {:>18} {:>17} {:>6} {:>7}  note",
        "contender",
        format!("1 x {t} hand-offs/s"),
        "min–max",
        "req",
        format!("{s} x 1 hand-offs/s"),
        "min–max",
        "req",
        "ratio"
    );
    for (i, c) in contenders.iter().enumerate() {
        let single = spread(&reps[i], |x| Some(x.figures.0.handoffs.per_s));
        let many = spread(&reps[i], |x| Some(x.figures.1.handoffs.per_s));
        let single_req = spread(&reps[i], |x| x.figures.0.requests);
        let many_req = spread(&reps[i], |x| x.figures.1.requests);
        let cell = |v: Option<Spread>, req: Option<Spread>| match v {
            Some(v) => format!("{:>18.0} {:>17} {:>6}", v.median, v.range(0), opt(req, 2)),
            None => format!("{:>18} {:>17} {:>6}", "n/a", "", ""),
        };
        let note = match (&single, &many) {
            (Some(a), Some(b)) => match a.within_noise(b) {
                Some(true) => "within noise of each other".to_owned(),
                Some(false) => String::new(),
                None => "1 rep: no noise estimate".to_owned(),
            },
            _ => String::new(),
        };
        println!(
            "{:<34} {} {} {:>7}  {}{}",
            c.label,
            cell(single, single_req),
            cell(many, many_req),
            ratio(single.as_ref(), many.as_ref()),
            note,
            failures(&reps[i])
                .map(|f| format!(" {f}"))
                .unwrap_or_default()
        );
        if i == ZK_CURATOR {
            findings.tasks = Some((single, many));
        }
    }
    println!("(ratio = one session's hand-offs/s / {s} sessions'; req = requests the server received per hand-off)");

    // The one-session shape in detail: what a hand-off costs the server,
    // and how long it takes.
    println!();
    println!("{t} tasks on ONE session, in detail (the same reps):");
    let rates: Vec<Option<Spread>> = reps
        .iter()
        .map(|r| spread(r, |x| Some(x.figures.0.handoffs.per_s)))
        .collect();
    println!(
        "{} {:>7} {:>7} {:>8} {:>8} {:>7}  note",
        lead_header("hand-offs/s"),
        "req",
        "fsyncs",
        "p50 ms",
        "p99 ms",
        "passes"
    );
    for (i, c) in contenders.iter().enumerate() {
        fn shape(x: &Sample<(Shape, Shape)>) -> &Shape {
            &x.figures.0
        }
        let req = spread(&reps[i], |x| shape(x).requests);
        let fsyncs = spread(&reps[i], |x| shape(x).fsyncs);
        let p50 = spread(&reps[i], |x| shape(x).handoffs.gap_ms.map(|g| g.0));
        let p99 = spread(&reps[i], |x| shape(x).handoffs.gap_ms.map(|g| g.1));
        let passes = spread(&reps[i], |x| {
            let h = &shape(x).handoffs;
            per(h.passes.map(|p| p as f64), h.releases as f64)
        });
        println!(
            "{:<34} {} {:>7} {:>7} {:>8} {:>8} {:>7}  {}{}",
            c.label,
            lead_columns(&rates, i, 0),
            opt(req, 2),
            opt(fsyncs, 2),
            opt(p50, 3),
            opt(p99, 3),
            opt(passes, 2),
            noise_note(&rates, i),
            failures(&reps[i])
                .map(|f| format!(" {f}"))
                .unwrap_or_default()
        );
        if c.label == COHORT {
            findings.cohort_row = Some(CohortRow {
                rate: rates[i],
                requests: req,
                fsyncs,
                p50,
                p99,
            });
        }
    }
    findings.tasks_curator = rates.get(CURATOR).copied().flatten();
    println!("(req, fsyncs = the server's requests and transaction-log fsyncs (mntr zk_cnt_fsynctime) per hand-off;");
    println!(" p50/p99 = hand-off latency, from the start of a release to the next acquire returning, holds in the window;");
    println!(" passes = cohort passes (no request) per hand-off, zk-curator rows)");

    cohort::curve(config, target, root, idle, findings).await;
}

/// One shape of one rep of the tasks workload.
struct Shape {
    handoffs: Handoffs,
    /// Requests per hand-off.
    requests: Option<f64>,
    /// Transaction-log fsyncs per hand-off.
    fsyncs: Option<f64>,
}
