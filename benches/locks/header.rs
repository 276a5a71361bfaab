//! The lines at the top of a run's output: the machine, the server under
//! test, and the method (warm-up, reps, the noise rule).

use super::mntr::{first_host, mntr};
use super::options::{ensemble_names, Config};
use super::server;
use super::target::Target;

pub(crate) async fn print_header(config: &Config, target: &Target) {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split(':').nth(1))
                .map(|model| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let version = match target.four_letter.as_deref().and_then(first_host) {
        Some(addr) => mntr(&addr)
            .await
            .ok()
            .and_then(|m| m.get("zk_version").cloned())
            .map(|v| v.split('-').next().unwrap_or(&v).to_owned())
            .unwrap_or_else(|| "version unknown (mntr not answered)".to_owned()),
        None => "version unknown".to_owned(),
    };
    if let Some(warning) = super::arguments::unoptimized_warning() {
        println!("{warning}");
    }
    println!(
        "zk-curator lock benchmark (DESIGN.md §8, issue 9){}",
        if config.quick {
            " -- QUICK run (--quick): 1 rep, tiny sizes, no noise estimate"
        } else {
            ""
        }
    );
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned());
    println!(
        "machine:   {nproc} CPUs (nproc), Linux {kernel}, {cpu}; load average at start {load}"
    );
    if let Some(ensemble) = &target.ensemble {
        println!(
            "ZooKeeper: {version} ensemble of {} members on {}, started by this run: {}, -Xmx{} each, default GC/JIT",
            ensemble.size(),
            target.connect,
            ensemble.describe(),
            server::HEAP
        );
        println!("           every contender connects with the full connect string; requests, watches and fsyncs are summed over the members");
    } else if target.server.is_some() {
        println!(
            "ZooKeeper: {version} standalone on {}, started by this run: forceSync=yes, -Xmx{}, default GC/JIT",
            target.connect,
            server::HEAP
        );
    } else {
        println!(
            "ZooKeeper: {version}, ZK_CONNECT={} (a chroot in it prefixes the bench's paths)",
            target.connect
        );
    }
    println!("NOTE: the server, the JVM/Python peers and this program share the machine's {nproc} cores.");
    println!(
        "method:    warm-up {} uncontended cycles + {:.1} s contended (N = 8) per contender; {} rep(s),",
        config.warmup_cycles,
        config.warmup_contended.as_secs_f64(),
        config.reps
    );
    println!(
        "           contenders interleaved in a rotating order; median and min–max over the reps;"
    );
    println!("           \"within noise\" = the min–max ranges overlap");
    if !config.only.is_empty() {
        let names: Vec<&str> = config.only.iter().map(|w| w.name()).collect();
        println!("workloads: only {} (--only)", names.join(", "));
    }
    if config.ensemble.is_some() {
        println!(
            "workloads: on the ensemble (--ensemble): {}, and the ensemble's ceiling; latency, observe, tls and scale",
            ensemble_names()
        );
        println!("           run on the standalone server only and are skipped");
    }
}
