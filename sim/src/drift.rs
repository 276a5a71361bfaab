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
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x00d7_1f7c_10c4);
    for host in hosts {
        let ppm = rng.i64(-max..=max);
        sim.set_clock_drift(host.as_str(), ppm);
        log.push(format!("0 drift {host} {ppm:+}ppm"));
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::time::Duration;

    /// A host 10 % fast wakes from a 1 s sleep of its own clock after
    /// about 0.91 s of the simulation's time, one 10 % slow after about
    /// 1.11 s, one without drift after 1 s; the simulation runs until the
    /// slow one is done (a client sitting a step out has not finished).
    #[test]
    fn a_drifting_hosts_clock_gains_and_loses_ticks() {
        let mut sim = turmoil::Builder::new()
            .tick_duration(Duration::from_millis(1))
            .build();
        let woke: Rc<RefCell<Vec<(&'static str, u128)>>> = Rc::default();
        for (name, ppm) in [("fast", 100_000), ("exact", 0), ("slow", -100_000)] {
            let woke = woke.clone();
            sim.client(name, async move {
                tokio::time::sleep(Duration::from_millis(1000)).await;
                let at = turmoil::sim_elapsed().expect("on a host").as_millis();
                woke.borrow_mut().push((name, at));
                Ok(())
            });
            sim.set_clock_drift(name, ppm);
        }
        sim.run().expect("the simulation");
        let woke = woke.borrow().clone();
        let at = |name| woke.iter().find(|(n, _)| *n == name).map(|(_, at)| *at);
        assert!(
            at("fast").is_some_and(|t| (905..=915).contains(&t)),
            "{woke:?}"
        );
        assert!(
            at("exact").is_some_and(|t| (999..=1001).contains(&t)),
            "{woke:?}"
        );
        assert!(
            at("slow").is_some_and(|t| (1105..=1115).contains(&t)),
            "{woke:?}"
        );
    }
}
