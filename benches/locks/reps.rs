//! How a workload takes its figures: in reps, the contenders in a rotating
//! order, a pause before each measurement and the server's counts read
//! around it; then each figure's median and min–max over the reps, and the
//! reps that failed.

use std::future::Future;
use std::time::{Duration, Instant};

use super::contenders::Contender;
use super::limits::Measured;
use super::mntr::{counters, Traffic};
use super::options::Config;
use super::stats::Spread;

/// One rep of one contender in one workload.
pub(crate) struct Sample<T> {
    pub(crate) figures: T,
    pub(crate) traffic: Option<Traffic>,
}

/// The reps of every contender in one workload: `[contender][rep]`.
pub(crate) type Reps<T> = Vec<Vec<Measured<Sample<T>>>>;

/// The spread of one figure over a contender's successful reps.
pub(crate) fn spread<T>(
    reps: &[Measured<T>],
    figure: impl Fn(&T) -> Option<f64>,
) -> Option<Spread> {
    let values: Vec<f64> = reps
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .filter_map(figure)
        .collect();
    Spread::of(&values)
}

/// Why a contender's reps failed, if any did (`k of n reps failed: reason`).
pub(crate) fn failures<T>(reps: &[Measured<Sample<T>>]) -> Option<String> {
    let failed: Vec<&String> = reps.iter().filter_map(|r| r.as_ref().err()).collect();
    let first = failed.first()?;
    Some(if failed.len() == reps.len() {
        format!("n/a ({first})")
    } else {
        format!("{} of {} reps failed: {first}", failed.len(), reps.len())
    })
}

/// The contender order of rep `rep`: rotated by one each rep.
pub(crate) fn rotation(rep: usize, count: usize) -> impl Iterator<Item = usize> {
    (0..count).map(move |turn| (rep + turn) % count)
}

/// Runs `measure` once per rep and contender in the rotating order, with the
/// server's counters read around each call.
pub(crate) async fn run_reps<T, F>(
    config: &Config,
    addr: Option<&str>,
    idle: f64,
    contenders: &mut [Contender],
    mut measure: F,
) -> Reps<T>
where
    F: for<'a> FnMut(
        &'a mut Contender,
        usize,
    ) -> std::pin::Pin<Box<dyn Future<Output = Measured<T>> + Send + 'a>>,
{
    let mut reps: Reps<T> = (0..contenders.len()).map(|_| Vec::new()).collect();
    for rep in 0..config.reps {
        for i in rotation(rep, contenders.len()) {
            settle().await;
            let before = counters(addr).await;
            let started = Instant::now();
            let result = measure(&mut contenders[i], rep).await;
            let elapsed = started.elapsed();
            let after = counters(addr).await;
            reps[i].push(result.map(|figures| Sample {
                figures,
                traffic: Traffic::between(before, after, elapsed, idle),
            }));
        }
    }
    reps
}

/// A pause between measurements, so that one contender's tail (the server
/// collecting garbage, a background delete) does not land in the next one's.
pub(crate) async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// Packets per second the server receives while the bench is idle (pings of
/// the kept sessions), subtracted from every request count.
pub(crate) async fn idle_rate(config: &Config, addr: Option<&str>) -> f64 {
    let window = Duration::from_secs(if config.quick { 1 } else { 3 });
    settle().await;
    let before = counters(addr).await;
    tokio::time::sleep(window).await;
    let after = counters(addr).await;
    let rate = match (before, after) {
        (Some(b), Some(a)) => ((a.packets - b.packets - a.sources) / window.as_secs_f64()).max(0.0),
        _ => 0.0,
    };
    println!(
        "idle request rate (the kept sessions' pings, subtracted from every request count): {rate:.1}/s"
    );
    rate
}
