//! Clock drift: every host's clock (the server's, each link host's, the
//! harness's) runs at a rate of its own, drawn from the seed within
//! ±[`max_ppm`] parts per million (200 by default, `--drift-ppm`): a real
//! host's crystal oscillator is specified to within ±20 to ±100 ppm, and
//! ages and warms past that, so ±200 ppm covers a host without time
//! synchronisation, the case a lease must survive (with NTP disciplining the
//! clock, the rate stays within a few ppm). Applied by turmoil a tick at a
//! time (`third_party/turmoil`, `clock-drift.patch`): at 200 ppm a 1 ms
//! tick is gained or lost every 5 s. The harness's stamps and the checker
//! read the simulation's one clock, never a host's.

use std::sync::atomic::{AtomicI64, Ordering};

/// The bound of the drift drawn, in parts per million.
static MAX_PPM: AtomicI64 = AtomicI64::new(200);

/// The bound of every host's drift from now on (`--drift-ppm`; 0: none).
pub fn set_max_ppm(ppm: u64) {
    MAX_PPM.store(ppm.min(1_000_000) as i64, Ordering::SeqCst);
}

/// The bound of the drift drawn, in parts per million.
pub fn max_ppm() -> i64 {
    MAX_PPM.load(Ordering::SeqCst)
}

/// Sets a drift drawn from `seed` (a generator of its own, so that the
/// seed's other draws stay as they were) on each of `hosts`, in order, and
/// notes each in the event log.
pub fn apply(sim: &mut turmoil::Sim<'_>, seed: u64, hosts: &[String], log: &mut Vec<String>) {
    let max = max_ppm();
    if max == 0 {
        return;
    }
    let mut rng = fastrand::Rng::with_seed(seed ^ 0xd71f_7c10_c4);
    for host in hosts {
        let ppm = rng.i64(-max..=max);
        sim.set_clock_drift(host.as_str(), ppm);
        log.push(format!("0 drift {host} {ppm:+}ppm"));
    }
}
