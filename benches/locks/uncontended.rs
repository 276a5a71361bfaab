//! The uncontended workload: acquire+release cycles on one session and one
//! path per contender; cycles/s, the acquire's and the cycle's latencies,
//! and the requests a cycle costs the server.

use super::contenders::Contender;
use super::figures::per;
use super::findings::Findings;
use super::options::Config;
use super::reps::{failures, run_reps, spread};
use super::stats::Spread;
use super::table::{lead_columns, lead_header, noise_note, opt};
use super::target::Target;

pub(crate) async fn uncontended_phase(
    config: &Config,
    target: &Target,
    root: &str,
    contenders: &mut [Contender],
    idle: f64,
    findings: &mut Findings,
) {
    println!();
    println!(
        "== Uncontended acquire+release: {} cycles a rep, one session, one path per contender ==",
        config.cycles
    );
    let connect = target.connect.clone();
    let (cycles, limit) = (config.cycles, config.limit());
    let reps = run_reps(
        config,
        target.four_letter.as_deref(),
        idle,
        contenders,
        |c, _| {
            let path = format!("{root}/uncontended/{}", c.short);
            let connect = connect.clone();
            Box::pin(async move { c.uncontended(&connect, &path, cycles, limit).await })
        },
    )
    .await;
    let rates: Vec<Option<Spread>> = reps
        .iter()
        .map(|r| spread(r, |s| Some(s.figures.per_s)))
        .collect();
    let requests: Vec<Option<Spread>> = reps
        .iter()
        .map(|r| {
            spread(r, |s| {
                per(s.traffic.map(|t| t.requests), s.figures.cycles as f64)
            })
        })
        .collect();
    println!(
        "{} {:>8} {:>8} {:>8} {:>9}  note",
        lead_header("cycles/s"),
        "acq p50",
        "p50 ms",
        "p99 ms",
        "req/cycle"
    );
    for (i, c) in contenders.iter().enumerate() {
        let acq = spread(&reps[i], |s| Some(s.figures.acq_p50_ms));
        let p50 = spread(&reps[i], |s| Some(s.figures.p50_ms));
        let p99 = spread(&reps[i], |s| Some(s.figures.p99_ms));
        println!(
            "{:<34} {} {:>8} {:>8} {:>8} {:>9}  {}{}",
            c.label,
            lead_columns(&rates, i, 0),
            opt(acq, 3),
            opt(p50, 3),
            opt(p99, 3),
            opt(requests[i], 2),
            noise_note(&rates, i),
            failures(&reps[i])
                .map(|f| format!(" {f}"))
                .unwrap_or_default()
        );
    }
    println!("(cycles/s: higher is better; vs Cur./vs zkc = median / that row's median; acq p50 = of the acquire alone,");
    println!(" p50/p99 = of acquire+release, in ms, medians over the reps; req/cycle = requests the server received per cycle)");
    findings.uncontended_rate = rates;
    findings.uncontended_requests = requests;
    findings.uncontended_acq_p50 = reps
        .iter()
        .map(|r| spread(r, |s| Some(s.figures.acq_p50_ms)))
        .collect();
}
