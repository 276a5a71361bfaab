//! The verdict at the end of a run: each issue target, from the figures the
//! workloads kept (`findings.rs`), as met, NOT met or n/a. It prints; it
//! asserts nothing.

use super::cohort;
use super::contenders::{CURATOR, RELEASE_BEFORE_REPLY, ZK_CURATOR};
use super::findings::Findings;
use super::options::Config;
use super::stats::{ratio, Spread};
use super::table::opt;
use super::tls;

pub(crate) fn print_targets(config: &Config, f: &Findings) {
    println!();
    println!("== Issue 9 and 22 targets (from the figures above; a verdict, not an assertion) ==");
    let verdict = |ok: Option<bool>| match ok {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "n/a",
    };
    let zk_rate = f.uncontended_rate.get(ZK_CURATOR).copied().flatten();
    let cur_rate = f.uncontended_rate.get(CURATOR).copied().flatten();
    let zk_req = f.uncontended_requests.get(ZK_CURATOR).copied().flatten();
    let noise_of = |a: Option<Spread>, b: Option<Spread>| match (a, b) {
        (Some(a), Some(b)) => match a.within_noise(&b) {
            Some(true) => " (within noise)",
            _ => "",
        },
        _ => "",
    };
    println!(
        "uncontended: {} requests/cycle (target <= 3): {}; {} Curator's rate{} (target >= 1x): {}",
        opt(zk_req, 2),
        verdict(zk_req.map(|r| r.median <= 3.05)),
        ratio(zk_rate.as_ref(), cur_rate.as_ref()),
        noise_of(zk_rate, cur_rate),
        verdict(zk_rate.zip(cur_rate).map(|(a, b)| a.median >= b.median))
    );
    let zk_p50 = f.latency_p50.get(ZK_CURATOR).copied().flatten();
    let cur_p50 = f.latency_p50.get(CURATOR).copied().flatten();
    println!(
        "latency (+{} ms each way): acquire p50 {} Curator's{} (target <= 0.6x): {}",
        config.delay.as_millis(),
        ratio(zk_p50.as_ref(), cur_p50.as_ref()),
        noise_of(zk_p50, cur_p50),
        verdict(zk_p50.zip(cur_p50).map(|(a, b)| a.median <= 0.6 * b.median))
    );
    for (n, row) in &f.contended {
        if *n < 8 {
            continue;
        }
        let cur = row.get(CURATOR).copied().unwrap_or([None; 3]);
        let fast = f.labels.iter().position(|l| *l == RELEASE_BEFORE_REPLY);
        for (index, which) in [(Some(ZK_CURATOR), ""), (fast, " (release before reply)")] {
            let Some(zk) = index.and_then(|i| row.get(i)).copied() else {
                continue;
            };
            println!(
                "contended N = {n}{which}: {} Curator{} (target >= 1.2x): {}; {} requests/hand-off (target <= 4): {}; {} watches/hand-off (target 1): {}",
                ratio(zk[0].as_ref(), cur[0].as_ref()),
                noise_of(zk[0], cur[0]),
                verdict(zk[0].zip(cur[0]).map(|(a, b)| a.median >= 1.2 * b.median)),
                opt(zk[1], 2),
                verdict(zk[1].map(|r| r.median <= 4.0)),
                opt(zk[2], 2),
                verdict(zk[2].map(|w| w.median <= 1.05)),
            );
        }
    }
    if let Some((single, many)) = f.tasks {
        println!(
            "{} tasks on one session: {} the {}-session rate (target >= 0.8x): {}",
            config.tasks,
            ratio(single.as_ref(), many.as_ref()),
            config.task_sessions,
            verdict(single.zip(many).map(|(a, b)| a.median >= 0.8 * b.median))
        );
    }
    for (k, label, outcome) in &f.scale {
        match outcome {
            Ok(s) => {
                let drain_rate = *k as f64 / s.drain_secs;
                // The targets are for 10,000 waiters; other sizes are
                // measured and printed only.
                let checks = if *k == 10_000 {
                    format!(
                        " -- server alive: {}; RSS < 64 MB: {}; drain >= uncontended rate: {}",
                        verdict(Some(s.server_alive)),
                        verdict(Some(s.rss_after_kib < 64.0 * 1024.0)),
                        verdict(zk_rate.map(|r| drain_rate >= r.median))
                    )
                } else {
                    String::new()
                };
                println!(
                    "{label}, K = {k}: server {}, client RSS {:.1} MiB parked, park {:.2} s, drain {:.2} s = {:.0}/s ({} x the uncontended cycle rate){checks}",
                    if s.server_alive { "alive" } else { "DIED" },
                    s.rss_after_kib / 1024.0,
                    s.park_secs,
                    s.drain_secs,
                    drain_rate,
                    zk_rate.map_or_else(|| "-".to_owned(), |r| format!("{:.2}", drain_rate / r.median)),
                );
            }
            Err(reason) => println!(
                "{label}, K = {k}: {reason}{}",
                if *k == 10_000 { " -- NOT met" } else { "" }
            ),
        }
    }
    cohort::print_targets(config, f);
    tls::print_targets(f);
    print_tree_targets(f);
}

/// Issue 45's goals, from the tree workload (when it ran).
fn print_tree_targets(f: &Findings) {
    if f.tree_cold.is_none() && f.entities.is_none() && f.observed.is_none() {
        return;
    }
    println!();
    println!("== Issue 45 targets (the tree workload; a verdict, not an assertion) ==");
    let verdict = |ok: Option<bool>| match ok {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "n/a",
    };
    if let Some((cold, grown)) = f.tree_cold {
        println!(
            "observer: cold start {cold:.2} s (target <= 5 s): {}; this process's RSS grew by {} (target <= 64 MiB): {}",
            verdict(Some(cold <= 5.0)),
            grown.map_or_else(|| "n/a".to_owned(), |m| format!("{m:.1} MiB")),
            verdict(grown.map(|m| m <= 64.0))
        );
    }
    if let Some(e) = f.entities {
        let share = e
            .zk_curator
            .zip(e.ceiling)
            .filter(|(_, c)| c.median > 0.0)
            .map(|(z, c)| z.median / c.median);
        let noise = match (e.zk_curator, e.curator) {
            (Some(a), Some(b)) => match a.within_noise(&b) {
                Some(true) => " (within noise)",
                _ => "",
            },
            _ => "",
        };
        println!(
            "per entity ({} tasks on one session, a lock each): zk-curator {} hand-offs/s = {} of the ceiling's {} create+delete pairs/s (target >= 50%): {}; {} Curator's rate{noise} (target > 1x): {}",
            e.tasks,
            opt(e.zk_curator, 0),
            share.map_or_else(
                || "n/a".to_owned(),
                |s| match (e.zk_curator, e.ceiling) {
                    (Some(z), Some(c)) if z.reps >= 2 => format!(
                        "{:.0}% (its reps {:.0}–{:.0}%)",
                        100.0 * s,
                        100.0 * z.min / c.median,
                        100.0 * z.max / c.median
                    ),
                    _ => format!("{:.0}%", 100.0 * s),
                }
            ),
            opt(e.ceiling, 0),
            verdict(share.map(|s| s >= 0.5)),
            ratio(e.zk_curator.as_ref(), e.curator.as_ref()),
            verdict(
                e.zk_curator
                    .zip(e.curator)
                    .map(|(a, b)| a.median > b.median)
            )
        );
    }
    if let Some(o) = &f.observed {
        for with in &o.with {
            let cost = o
                .without
                .zip(with.rate)
                .filter(|(a, _)| a.median > 0.0)
                .map(|(a, b)| 1.0 - b.median / a.median);
            // The reps' own costs must be narrower than the goal's two
            // points either side to judge it.
            let spread = with.cost.filter(|c| c.reps >= 2 && c.max - c.min > 0.04);
            let judged = match (cost, spread) {
                (None, _) => "n/a".to_owned(),
                (Some(c), Some(s)) => format!(
                    "not resolved: the reps' own costs span {:.1}% to {:.1}%, wider than the goal (median {} it)",
                    100.0 * s.min,
                    100.0 * s.max,
                    if c <= 0.02 { "within" } else { "above" }
                ),
                (Some(c), None) => verdict(Some(c <= 0.02)).to_owned(),
            };
            let cost = cost.map_or_else(|| "n/a".to_owned(), |c| format!("{:.1}%", 100.0 * c));
            if with.floor {
                // No observer: what any observer with one watch pays at least.
                println!(
                    "contended N = {}, {}: the floor of any one-watch observer costs {cost} of hand-offs/s, over the medians (no target: {judged} against 2%)",
                    o.sessions, with.name,
                );
                continue;
            }
            println!(
                "contended N = {}, {}: the observer costs {cost} of hand-offs/s, over the medians (target <= 2%): {judged}",
                o.sessions, with.name,
            );
        }
    }
}

/// The end of a run on the ensemble (`--ensemble`): its ceiling, and every
/// contender's contended hand-offs/s as a share of it. It prints; it
/// asserts nothing (the issue targets above were set on one server).
pub(crate) fn print_ensemble_summary(f: &Findings) {
    println!();
    println!("== On the ensemble: contended hand-offs/s as a share of its ceiling ==");
    let Some(ceiling) = f.ceiling.filter(|c| c.median > 0.0) else {
        println!("ceiling: n/a (not measured)");
        return;
    };
    println!(
        "ceiling: {:.0} create+delete pairs/s ({}), pipelined zookeeper-client sessions",
        ceiling.median,
        ceiling.range(0)
    );
    for (n, row) in &f.contended {
        let shares: Vec<String> = f
            .labels
            .iter()
            .zip(row)
            .map(|(label, [rate, _, _])| match rate {
                Some(r) => format!("{label} {:.1}%", 100.0 * r.median / ceiling.median),
                None => format!("{label} n/a"),
            })
            .collect();
        println!("N = {n}: {}", shares.join("; "));
    }
}
