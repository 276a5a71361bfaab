//! The warm-up before anything is measured: every contender opens all the
//! sessions the run will use, runs uncontended cycles, then a short
//! contended run at N = 8 (a JVM compiles its hot paths here).

use std::time::{Duration, Instant};

use super::contenders::Contender;
use super::options::Config;
use super::target::Target;

pub(crate) async fn warm_up(
    config: &Config,
    target: &Target,
    root: &str,
    contenders: &mut [Contender],
) {
    println!();
    println!(
        "== Warm-up: every contender connects its {} sessions, runs {} uncontended cycles, then {:.1} s at N = 8 ==",
        config.max_sessions(),
        config.warmup_cycles,
        config.warmup_contended.as_secs_f64()
    );
    let limit = config.limit() + Duration::from_secs(config.warmup_cycles as u64 / 20);
    for c in contenders.iter_mut() {
        let started = Instant::now();
        let path = format!("{root}/warmup/{}", c.short);
        let result = async {
            c.connect(&target.connect, config.max_sessions()).await?;
            let u = c
                .uncontended(&target.connect, &path, config.warmup_cycles, limit)
                .await?;
            let h = c
                .contended(&target.connect, &path, 8, 8, config.warmup_contended, limit)
                .await?;
            Ok::<_, String>((u, h))
        }
        .await;
        match result {
            Ok((u, h)) => println!(
                "  {:<34} {} cycles ({:.0}/s, the last run's rate), {} contended holds; {:.1} s",
                c.label,
                u.cycles,
                u.per_s,
                h.holds,
                started.elapsed().as_secs_f64()
            ),
            Err(reason) => println!("  {:<34} n/a ({reason})", c.label),
        }
    }
}
