//! Part 3 of the bounds workload (issue 46, "Numbers"): what publishing a
//! holder's progress on its node costs
//! ([`HoldBounds::publish_progress`]).
//!
//! * **Requests per second per holder at the default rate.** [`HOLDERS`]
//!   holds on paths of their own, on one session, each with a silence
//!   bound of [`SILENCE`] and a task saying progress every
//!   [`PROGRESS_EVERY`] for the whole window: with publication, at most one
//!   write per quarter of the bound (the option's rate, the only one it
//!   has), so at most 4 / [`SILENCE`] a second. Without, the same holds and
//!   progress, nothing written. Counted as every request count of the
//!   bench is (`mntr`, less the idle ping rate) and from the session's own
//!   packets (`cons`), divided by the holders and the window; the
//!   difference is the publication's cost.
//! * **Contended hand-offs per second with publication on and off.** Two
//!   sessions, one task each, on one path, looping acquire, work, release
//!   for the contended window; every hold has the same silence bound, with
//!   publication on or off. Two shapes: holds of no length (progress said
//!   once, then release: shorter than a quarter of any bound, so nothing is
//!   ever published, the common case) and holds of [`WORK`] saying progress
//!   every millisecond under a silence bound of [`SHORT_SILENCE`] (a
//!   quarter is shorter than the hold: every hold publishes once, the worst
//!   case). Hand-offs/s and requests per hand-off.
//!
//! Both variants of each measure run in the same reps, the order
//! alternating from rep to rep; medians and min–max over the reps.

use std::time::{Duration, Instant};

use zk_curator::{Framework, HoldBounds, InterProcessMutex};

use super::figures::per;
use super::limits::{bounded, within, BoxError, Measured, ACQUIRE_LIMIT};
use super::mntr::counting;
use super::options::Config;
use super::reps::settle;
use super::stats::Spread;
use super::target::Target;

/// The silence bound of the per-holder rate (a quarter: 500 ms).
const SILENCE: Duration = Duration::from_secs(2);
/// How often each holder says progress.
const PROGRESS_EVERY: Duration = Duration::from_millis(10);
/// Holders measured together (their count divides the requests).
const HOLDERS: usize = 4;
/// The worst case's silence bound (a quarter: 5 ms).
const SHORT_SILENCE: Duration = Duration::from_millis(20);
/// The worst case's hold (longer than a quarter of [`SHORT_SILENCE`]).
const WORK: Duration = Duration::from_millis(8);

/// How long the per-holder rate is measured.
fn rate_window(config: &Config) -> Duration {
    if config.quick {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(6)
    }
}

/// The measures of part 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
    /// Requests per second per holder.
    Rate,
    /// Hand-offs of holds of no length.
    Brief,
    /// Hand-offs of holds of [`WORK`] that publish once each.
    Working,
}

impl Measure {
    fn label(self) -> &'static str {
        match self {
            Measure::Rate => "req/s per holder (silence 2 s, progress every 10 ms)",
            Measure::Brief => "contended, holds of no length (silence 2 s)",
            Measure::Working => "contended, holds of 8 ms (silence 20 ms)",
        }
    }
}

/// The bounds of a measure, with publication or without.
fn bounds(measure: Measure, publish: bool) -> HoldBounds {
    let silence = match measure {
        Measure::Working => SHORT_SILENCE,
        Measure::Rate | Measure::Brief => SILENCE,
    };
    // The hold bound keeps the short silence bound from being the only one.
    let bounds = HoldBounds::new()
        .silence(silence)
        .duration(Duration::from_secs(600));
    if publish {
        bounds.publish_progress()
    } else {
        bounds
    }
}

/// One measurement: requests per unit (if the server's counts were read),
/// the two sessions' own packets per unit (if `cons` answered), and units
/// per second (hand-offs/s; for the rate, 0).
type Counted = (Option<f64>, Option<f64>, f64);

pub(crate) async fn publication_part(
    config: &Config,
    target: &Target,
    root: &str,
    a: &Framework,
    b: &Framework,
    idle: f64,
) {
    let addr = target.four_letter.as_deref();
    let window = rate_window(config);
    println!();
    println!("-- Publication of progress on the holder's node (HoldBounds::publish_progress): on against off --");
    println!(
        "   rate = {HOLDERS} holders on paths of their own, one session, {} s each, progress every {} ms; requests/s per holder",
        window.as_secs(),
        PROGRESS_EVERY.as_millis()
    );
    println!(
        "   contended = 2 sessions, one task each, one path, acquire -> work -> release for {} s; hand-offs/s and requests per",
        config.contend.as_secs()
    );
    println!("   hand-off: holds of no length (progress once), and holds of 8 ms under a silence bound of 20 ms (publishes once per hold)");
    let measures = [Measure::Rate, Measure::Brief, Measure::Working];
    let sessions: Vec<i64> = [a, b]
        .iter()
        .filter_map(|fw| fw.current_session().map(|s| s.id()))
        .collect();
    // [measure][off, on] -> per rep.
    let mut reps: Vec<[Vec<Measured<Counted>>; 2]> =
        measures.iter().map(|_| [Vec::new(), Vec::new()]).collect();
    for rep in 0..config.reps {
        let turn: [usize; 2] = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
        for (m, &measure) in measures.iter().enumerate() {
            for &on in &turn {
                let publish = on == 1;
                let path = format!("{root}/bounds/publish-{measure:?}-{on}").to_lowercase();
                settle().await;
                let run = async {
                    Ok::<_, BoxError>(match measure {
                        Measure::Rate => {
                            rate_run(a, &path, publish, window).await?;
                            (HOLDERS as f64, 0.0)
                        }
                        Measure::Brief | Measure::Working => {
                            let (n, secs) =
                                handoffs(a, b, &path, measure, publish, config.contend).await?;
                            (n as f64, n as f64 / secs)
                        }
                    })
                };
                let (result, traffic, own, elapsed) =
                    counting(addr, &sessions, idle, bounded(config.limit(), run)).await;
                reps[m][on].push(result.map(|(units, rate)| {
                    // Per holder and per second of the run, or per hand-off.
                    let of = |count| match measure {
                        Measure::Rate => per(count, units * elapsed.as_secs_f64()),
                        _ => per(count, units),
                    };
                    (of(traffic.map(|t| t.requests)), of(own), rate)
                }));
            }
        }
    }
    println!(
        "{:<58} {:>5} {:>9} {:>15} {:>9} {:>15} {:>9} {:>13}  note",
        "measure", "pub", "req", "min–max", "own", "min–max", "per s", "min–max"
    );
    let mut medians = Vec::new();
    for (m, measure) in measures.iter().enumerate() {
        let mut row = [None, None];
        for (on, slot) in row.iter_mut().enumerate() {
            let runs = &reps[m][on];
            let req = Spread::of(
                &runs
                    .iter()
                    .filter_map(|x| x.as_ref().ok()?.0)
                    .collect::<Vec<_>>(),
            );
            let own = Spread::of(
                &runs
                    .iter()
                    .filter_map(|x| x.as_ref().ok()?.1)
                    .collect::<Vec<_>>(),
            );
            let rate = Spread::of(
                &runs
                    .iter()
                    .filter_map(|x| Some(x.as_ref().ok()?.2))
                    .collect::<Vec<_>>(),
            );
            let failed: Vec<&String> = runs.iter().filter_map(|x| x.as_ref().err()).collect();
            let note = failed
                .first()
                .map(|f| format!("{} of {} reps failed: {f}", failed.len(), runs.len()))
                .unwrap_or_default();
            let cols = |s: Option<Spread>, d: usize| match s {
                Some(s) => (format!("{:.*}", d, s.median), s.range(d)),
                None => ("n/a".to_owned(), String::new()),
            };
            let (rq, rq_range) = cols(req, 3);
            let (ow, ow_range) = cols(own, 3);
            let (rt, rt_range) = if *measure == Measure::Rate {
                ("-".to_owned(), String::new())
            } else {
                cols(rate, 0)
            };
            println!(
                "{:<58} {:>5} {rq:>9} {rq_range:>15} {ow:>9} {ow_range:>15} {rt:>9} {rt_range:>13}  {note}",
                measure.label(),
                if on == 1 { "on" } else { "off" }
            );
            *slot = Some((own.or(req), rate));
        }
        medians.push((*measure, row));
    }
    println!("(req = requests the server received, less the idle ping rate: per holder per second for the rate, per");
    println!(" hand-off (release) for the contended rows; own = the same from the two sessions' packets alone (`cons`),");
    println!(" which the differences below use when the server answers it; median and min–max over the reps;");
    println!(" per s = hand-offs/s)");
    for (measure, row) in medians {
        let [Some((off_req, off_rate)), Some((on_req, on_rate))] = row else {
            continue;
        };
        let req = match (off_req, on_req) {
            (Some(off), Some(on)) => format!(
                "requests {:+.3} ({})",
                on.median - off.median,
                noise(off.within_noise(&on))
            ),
            _ => "requests n/a".to_owned(),
        };
        let rate = match (measure, off_rate, on_rate) {
            (Measure::Rate, _, _) => String::new(),
            (_, Some(off), Some(on)) if off.median > 0.0 => format!(
                "; hand-offs/s {:+.1}% ({})",
                (on.median / off.median - 1.0) * 100.0,
                noise(off.within_noise(&on))
            ),
            _ => "; hand-offs/s n/a".to_owned(),
        };
        println!("  {}: on - off: {req}{rate}", measure.label());
    }
    println!(
        "  (the option's ceiling: one write per quarter of the silence bound, {:.1}/s per holder at 2 s)",
        4.0 / SILENCE.as_secs_f64()
    );
}

fn noise(overlap: Option<bool>) -> &'static str {
    match overlap {
        Some(true) => "within noise: the reps' ranges overlap",
        Some(false) => "the reps' ranges do not overlap",
        None => "1 rep: no noise estimate",
    }
}

/// [`HOLDERS`] holds on paths under `path` on `fw`, each saying progress
/// every [`PROGRESS_EVERY`] for `window`, then released.
async fn rate_run(
    fw: &Framework,
    path: &str,
    publish: bool,
    window: Duration,
) -> Result<(), BoxError> {
    let mut guards = Vec::with_capacity(HOLDERS);
    for i in 0..HOLDERS {
        let mutex = InterProcessMutex::new(fw.clone(), &format!("{path}/{i}"))?;
        let bounds = bounds(Measure::Rate, publish);
        guards.push(within(ACQUIRE_LIMIT, mutex.lock_bounded(bounds)).await??);
    }
    let end = tokio::time::Instant::now() + window;
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    while tokio::time::Instant::now() < end {
        tick.tick().await;
        for guard in &guards {
            guard.progress();
        }
    }
    for guard in guards {
        if !guard.is_valid() {
            return Err(format!("a hold was lost: {:?}", guard.loss()).into());
        }
        within(ACQUIRE_LIMIT, guard.release()).await??;
    }
    Ok(())
}

/// Two sessions, one task each, on one path: acquire, work, release, for
/// `window`. Returns the hand-offs (releases) and the seconds they took.
async fn handoffs(
    a: &Framework,
    b: &Framework,
    path: &str,
    measure: Measure,
    publish: bool,
    window: Duration,
) -> Result<(u64, f64), BoxError> {
    let started = Instant::now();
    let end = tokio::time::Instant::now() + window;
    let mut tasks = Vec::with_capacity(2);
    for fw in [a, b] {
        let mutex = InterProcessMutex::new(fw.clone(), path)?;
        mutex.set_hold_bounds(bounds(measure, publish))?;
        tasks.push(tokio::spawn(async move {
            let mut releases = 0u64;
            while tokio::time::Instant::now() < end {
                let guard = within(ACQUIRE_LIMIT, mutex.lock()).await??;
                guard.progress();
                if measure == Measure::Working {
                    let until = tokio::time::Instant::now() + WORK;
                    while tokio::time::Instant::now() < until {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        guard.progress();
                    }
                }
                if !guard.is_valid() {
                    return Err(format!("a hold was lost: {:?}", guard.loss()).into());
                }
                within(ACQUIRE_LIMIT, guard.release()).await??;
                releases += 1;
            }
            Ok::<u64, BoxError>(releases)
        }));
    }
    let mut releases = 0;
    for task in tasks {
        releases += task.await??;
    }
    Ok((releases, started.elapsed().as_secs_f64()))
}
