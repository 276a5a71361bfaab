//! `zk-curator-sim`: the chaos harness's runs in a deterministic simulation.
//!
//! The embedded server, a link host per contender and the harness (its
//! frameworks, observers and fault injector) run as turmoil hosts on one
//! thread, over simulated TCP and a simulated clock. One seed decides
//! everything: the scenario (contenders, session timeout, cohorting, network
//! latency), the harness's faults and holds, the network's own faults (held
//! links, server stalls, latency), turmoil's delivery and host order,
//! tokio's scheduling choices, and every random draw of the client, the
//! framework and the server. So a seed replays exactly, event for event.
//!
//! ```text
//! cargo run -p zk-curator-sim --release -- --seeds 100      # seeds 0..100
//! cargo run -p zk-curator-sim --release -- --seed 17        # one, with its event log
//! cargo run -p zk-curator-sim --release -- --seeds 300 --break fence
//! cargo run -p zk-curator-sim --release -- --ensemble 3 --seeds 100 # on a simulated ensemble
//! cargo run -p zk-curator-sim --release -- --crash --seeds 100      # the server crashes
//! cargo run -p zk-curator-sim --release -- --swarm --seeds 100      # a fault profile per seed, BUGGIFY
//! ```
//!
//! See `sim/README.md` and DESIGN.md (section 11) for what it proves and
//! what it does not; the README's "Files" says what each module holds.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod crash;
mod drift;
mod ensemble;
mod mode;
mod net;
mod plan;
mod progress;
mod regressions;
mod run;
mod single;
mod swarm;
mod threads;
mod world;

use mode::Mode;
use plan::{Breaks, Plan};
use run::Outcome;

/// What the command line asked for.
#[derive(Debug)]
struct Options {
    seeds: std::ops::Range<u64>,
    replay: Option<u64>,
    breaks: Breaks,
    duration: Duration,
    threads: usize,
    /// Save the shrunk schedule of a failing seed even when a bug was
    /// planted (without one, it is always saved).
    save: bool,
    /// One seed in this many runs twice (its two hashes compared).
    twice_every: u64,
    /// Every host's clock drifts by up to this many parts per million.
    drift_ppm: u64,
    /// Members of a simulated ensemble to run on (`None`: one server).
    ensemble: Option<usize>,
    /// The server's crashes and lost replies (`--crash`).
    crash: bool,
    /// A fault profile per seed and the framework's BUGGIFY points
    /// (`--swarm`).
    swarm: bool,
    /// Fail the batch if a point or rare path was never reached
    /// (`--require-reached`, with `--swarm`).
    require_reached: bool,
}

const USAGE: &str = "usage: zk-curator-sim [--seeds N | --from A --seeds N | --seed S] \
[--break fence|loss|observer|bound]... [--lenient-bounds] [--secs D] [--threads T] [--twice-every K] [--drift-ppm P] [--save] \
[--ensemble N] [--crash] [--swarm [--require-reached]]";

impl Options {
    /// The world the seeds run in.
    fn mode(&self) -> Mode {
        Mode {
            ensemble: self.ensemble,
            crash: self.crash,
            swarm: self.swarm,
        }
    }
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        seeds: 0..20,
        replay: None,
        breaks: Breaks::default(),
        duration: Duration::from_secs(15),
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        save: false,
        twice_every: 50,
        drift_ppm: 200,
        ensemble: None,
        crash: false,
        swarm: false,
        require_reached: false,
    };
    let mut from = 0;
    let mut count = 20;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            let text = args.next().ok_or(format!("{name} needs a value"))?;
            text.parse()
                .map_err(|_| format!("{name}: not a number: {text:?}"))
        };
        match arg.as_str() {
            "--seeds" => count = value("--seeds")?,
            "--from" => from = value("--from")?,
            "--seed" => options.replay = Some(value("--seed")?),
            "--secs" => options.duration = Duration::from_secs(value("--secs")?.max(1)),
            "--threads" => options.threads = (value("--threads")? as usize).max(1),
            "--twice-every" => options.twice_every = value("--twice-every")?.max(1),
            "--drift-ppm" => options.drift_ppm = value("--drift-ppm")?,
            "--ensemble" => {
                let size = value("--ensemble")?;
                if !(1..=9).contains(&size) {
                    return Err(format!("--ensemble: 1 to 9 members, not {size}"));
                }
                options.ensemble = Some(size as usize);
            }
            "--break" => {
                let kind = args.next().ok_or("--break needs a kind")?;
                match kind.as_str() {
                    "fence" => options.breaks.fence = true,
                    "loss" => options.breaks.loss = true,
                    "observer" => options.breaks.observer = true,
                    "bound" => options.breaks.bound = true,
                    other => {
                        return Err(format!(
                            "--break: unknown kind {other:?} (fence, loss, observer, bound)"
                        ))
                    }
                }
            }
            "--save" => options.save = true,
            "--crash" => options.crash = true,
            "--swarm" => options.swarm = true,
            "--require-reached" => options.require_reached = true,
            "--lenient-bounds" => options.breaks.strict_bounds = false,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if options.require_reached && !options.swarm {
        return Err("--require-reached needs --swarm (the points are off without it)".to_owned());
    }
    options.seeds = from..from.saturating_add(count);
    Ok(options)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse(&args) {
        Ok(options) => options,
        Err(err) => {
            if !err.is_empty() {
                eprintln!("zk-curator-sim: {err}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if !cfg!(tokio_unstable) {
        return relaunch(&args);
    }
    trace_if_asked();
    threads::ours();
    drift::set_max_ppm(options.drift_ppm);
    // A seed's step takes milliseconds; a minute is a task that never waits
    // (`ZK_SIM_STUCK_SECS`: another limit).
    let stuck = std::env::var("ZK_SIM_STUCK_SECS")
        .ok()
        .and_then(|secs| secs.parse().ok())
        .unwrap_or(60);
    progress::watch_progress(Duration::from_secs(stuck));
    match options.replay {
        Some(seed) => replay(seed, &options),
        None => batch(&options),
    }
}

/// `ZK_SIM_TRACE=FILTER` (a `tracing` filter, e.g. `debug`): every event
/// on stderr, stamped with the simulated time and the host it ran on, and
/// no wall-clock time, so that two runs' traces can be compared line by
/// line.
fn trace_if_asked() {
    let Ok(filter) = std::env::var("ZK_SIM_TRACE") else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_timer(SimTime)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The simulated time of the host running now, for the trace.
struct SimTime;

impl tracing_subscriber::fmt::time::FormatTime for SimTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        match turmoil::sim_elapsed() {
            Some(elapsed) => write!(w, "{:>10}", elapsed.as_micros()),
            None => write!(w, "{:>10}", "-"),
        }
    }
}

/// Tokio seeds its scheduler's choices (which ready branch of a `select!`
/// goes first) only when built with `--cfg tokio_unstable`; without it they
/// come from the OS. So a build without it runs the same command again,
/// built with it in a target directory of its own (`target/sim`), leaving
/// the workspace's builds as they are; with `--cfg zk_buggify` too, which
/// compiles the framework's BUGGIFY points in (off unless `--swarm` turns
/// them on for a seed: see `swarm.rs`).
fn relaunch(args: &[String]) -> ExitCode {
    if std::env::var_os("ZK_SIM_RELAUNCHED").is_some() {
        eprintln!("zk-curator-sim: built without --cfg tokio_unstable even when asked to be");
        return ExitCode::from(2);
    }
    let workspace = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let flags = match std::env::var("RUSTFLAGS") {
        Ok(flags) if !flags.is_empty() => format!("{flags} --cfg tokio_unstable --cfg zk_buggify"),
        _ => "--cfg tokio_unstable --cfg zk_buggify".to_owned(),
    };
    let mut command = std::process::Command::new(cargo);
    command.current_dir(workspace).args([
        "run",
        "--quiet",
        "-p",
        "zk-curator-sim",
        "--target-dir",
        "target/sim",
    ]);
    if !cfg!(debug_assertions) {
        command.arg("--release");
    }
    let status = command
        .arg("--")
        .args(args)
        .env("RUSTFLAGS", flags)
        .env("ZK_SIM_RELAUNCHED", "1")
        .status();
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => ExitCode::from(status.code().map_or(1, |c| c.clamp(1, 255) as u8)),
        Err(err) => {
            eprintln!("zk-curator-sim: cannot run cargo: {err}");
            ExitCode::from(2)
        }
    }
}

/// One seed, its event log printed, the log's hash on the last line.
fn replay(seed: u64, options: &Options) -> ExitCode {
    let outcome = run::run(
        seed,
        options.duration,
        options.breaks,
        &Plan::default(),
        options.mode(),
    );
    println!("seed {seed}: {:?}", outcome.scenario);
    if let Some(swarm) = swarm::of(seed).filter(|_| options.swarm) {
        println!(
            "swarm: off {:?}, lost replies {}, stuck holders {}; reached {:?}",
            swarm.profile.off(),
            swarm.lost_replies,
            swarm.stuck,
            outcome.reached
        );
    }
    for line in &outcome.log {
        println!("{line}");
    }
    for violation in &outcome.violations {
        println!("FAILED: {violation}");
    }
    println!("hash {:016x}", outcome.hash);
    if outcome.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Where two event logs of one seed part: the first line that differs,
/// as each run had it.
fn first_difference(first: &[String], second: &[String]) -> String {
    let missing = "(no line)".to_owned();
    let at = (0..first.len().max(second.len()))
        .find(|&i| first.get(i) != second.get(i))
        .unwrap_or(0);
    format!(
        "first at line {at}: {:?}, then {:?}",
        first.get(at).unwrap_or(&missing),
        second.get(at).unwrap_or(&missing)
    )
}

/// Seeds `options.seeds` on `options.threads` threads; every failing seed
/// printed; one seed in fifty run twice, its two hashes compared.
fn batch(options: &Options) -> ExitCode {
    let started = Instant::now();
    // The regressions first: each a shrunk schedule that once failed, in
    // the mode it names.
    let regressions_failed = regressions::run_all();
    let mode = options.mode();
    let next = AtomicU64::new(options.seeds.start);
    let failed: Mutex<Vec<Outcome>> = Mutex::new(Vec::new());
    let reached: Mutex<Vec<std::collections::BTreeMap<&'static str, u64>>> = Mutex::new(Vec::new());
    let twice = AtomicU64::new(0);
    let differed = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..options.threads {
            scope.spawn(|| loop {
                threads::ours();
                let seed = next.fetch_add(1, Ordering::SeqCst);
                if seed >= options.seeds.end {
                    return;
                }
                let whole = Plan::default();
                let mut outcome = run::run(seed, options.duration, options.breaks, &whole, mode);
                if seed % options.twice_every == 0 {
                    let again = run::run(seed, options.duration, options.breaks, &whole, mode);
                    twice.fetch_add(1, Ordering::SeqCst);
                    if again.hash != outcome.hash {
                        differed.fetch_add(1, Ordering::SeqCst);
                        outcome.violations.push(format!(
                            "not deterministic: hash {:016x} then {:016x} (real time or real randomness leaked in); {}",
                            outcome.hash,
                            again.hash,
                            first_difference(&outcome.log, &again.log)
                        ));
                    }
                }
                reached
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(std::mem::take(&mut outcome.reached));
                if !outcome.violations.is_empty() {
                    println!("seed {seed}: FAILED ({:?})", outcome.scenario);
                    for violation in &outcome.violations {
                        println!("  {violation}");
                    }
                    failed.lock().unwrap_or_else(|p| p.into_inner()).push(outcome);
                }
            });
        }
    });
    let failed = failed.into_inner().unwrap_or_else(|p| p.into_inner());
    let ran = options.seeds.end - options.seeds.start;
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let mut seeds: Vec<u64> = failed.iter().map(|o| o.seed).collect();
    seeds.sort_unstable();
    println!(
        "{ran} seeds ({}..{}) in {:.1} s on {} threads: {:.0} seeds/min; {} run twice, {} of them with another hash the second time; failing: {seeds:?}",
        options.seeds.start,
        options.seeds.end,
        started.elapsed().as_secs_f64(),
        options.threads,
        ran as f64 / minutes.max(1e-9),
        twice.load(Ordering::SeqCst),
        differed.load(Ordering::SeqCst),
    );
    let mut unreached = Vec::new();
    if options.swarm {
        let per_seed = reached.into_inner().unwrap_or_else(|p| p.into_inner());
        let (shown, missed) = swarm::report(&per_seed);
        println!("reached (swarm): {shown}");
        if !missed.is_empty() {
            println!("NOT REACHED by any seed: {missed:?}");
        }
        unreached = missed;
    }
    let broken = options.breaks.any();
    if let Some(&first) = seeds.first() {
        let (plan, outcome) = regressions::shrink(first, options.duration, options.breaks, mode);
        println!(
            "seed {first} shrunk: harness faults {:?} and network faults {:?} left out still fail: {}",
            plan.harness,
            plan.net,
            outcome.violations.first().map_or("", String::as_str)
        );
        if !broken || options.save {
            match regressions::save(
                first,
                options.duration,
                options.breaks,
                mode,
                &plan,
                &outcome,
            ) {
                Ok(path) => println!("saved as {}", path.display()),
                Err(err) => println!("not saved: {err}"),
            }
        }
    }
    if regressions_failed > 0 {
        println!("{regressions_failed} regression(s) failed");
        return ExitCode::FAILURE;
    }
    if options.require_reached && !unreached.is_empty() {
        println!(
            "--require-reached: {} point(s) or path(s) never reached",
            unreached.len()
        );
        return ExitCode::FAILURE;
    }
    match (broken, seeds.is_empty()) {
        // A planted bug must be caught.
        (true, true) => {
            println!("the planted bug was not caught");
            ExitCode::FAILURE
        }
        (true, false) => ExitCode::SUCCESS,
        (false, true) => ExitCode::SUCCESS,
        (false, false) => ExitCode::FAILURE,
    }
}
