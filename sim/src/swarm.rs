//! `--swarm`: search, not only sampling (issue 47, item 4). Each seed
//! draws a fault profile of its own, with some fault families off
//! altogether (swarm testing: a run without, say, expiries reaches states
//! that the whole mix, one fault always soon after another, crowds out),
//! and turns on the framework's BUGGIFY points (`--cfg zk_buggify`, which
//! the simulator's own build sets: `framework/src/buggify.rs`), which widen
//! rare windows at random: a grant made late after the listing that
//! decided it, a watch notification acted on late, a cohort pass checked
//! late. A reply lost after its write was applied is a family of the
//! profile too (the lost replies of `--crash`, without the crashes).
//!
//! The batch then reports, for every point and every rare path the
//! library counts (a create's lost reply recovered by adopting its node, a
//! passed node found lost on the way, a pass taken) and for the lost
//! replies, how many seeds reached it: a batch that never reaches one says
//! so, and `--require-reached` fails it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use zk_curator::framework::buggify;
use zk_curator_chaos::Profile;

/// A seed's draw in swarm mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Swarm {
    /// The harness's fault families on and off.
    pub profile: Profile,
    /// Replies lost after their write was applied.
    pub lost_replies: bool,
    /// Stuck holders.
    pub stuck: bool,
}

/// The swarm draw of `seed`, if this thread's seed runs in swarm mode.
pub fn of(seed: u64) -> Option<Swarm> {
    if !crate::mode::Mode::current().swarm {
        return None;
    }
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5a_a7f0_0000_0001);
    Some(Swarm {
        profile: Profile::draw(seed),
        lost_replies: rng.bool(),
        stuck: rng.bool(),
    })
}

/// The name under which lost replies are reported.
pub const LOST_REPLY: &str = "lost-reply";

/// Turns the framework's points on for `seed` on this thread, if swarm
/// mode is on. A build without `--cfg zk_buggify` cannot: that is said
/// once, and the seed runs without them.
pub fn begin(seed: u64) {
    if of(seed).is_some() && !buggify::enable(seed) {
        static SAID: AtomicBool = AtomicBool::new(false);
        if !SAID.swap(true, Ordering::SeqCst) {
            eprintln!("zk-curator-sim: built without --cfg zk_buggify: the BUGGIFY points are off");
        }
    }
}

/// What this thread's seed reached, by name (every point, rare path and
/// the lost replies, zero included), and the points turned off.
pub fn end(lost_replies: u64) -> BTreeMap<&'static str, u64> {
    let reached = buggify::reached();
    buggify::disable();
    let mut counts = BTreeMap::new();
    if !crate::mode::Mode::current().swarm {
        return counts;
    }
    for (point, _, fired) in reached.points {
        counts.insert(point.name(), fired);
    }
    for (rare, taken) in reached.rare {
        counts.insert(rare.name(), taken);
    }
    counts.insert(LOST_REPLY, lost_replies);
    counts
}

/// The batch's report of what its seeds reached: for each name, how many
/// seeds and how many times; the names no seed reached, last.
pub fn report(per_seed: &[BTreeMap<&'static str, u64>]) -> (String, Vec<&'static str>) {
    let mut seeds: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    for counts in per_seed {
        for (name, count) in counts {
            let entry = seeds.entry(name).or_default();
            entry.0 += u64::from(*count > 0);
            entry.1 += count;
        }
    }
    let unreached: Vec<&'static str> = seeds
        .iter()
        .filter(|(_, (reached, _))| *reached == 0)
        .map(|(name, _)| *name)
        .collect();
    let shown: Vec<String> = seeds
        .iter()
        .map(|(name, (reached, times))| {
            format!("{name} {reached}/{} seeds ({times}x)", per_seed.len())
        })
        .collect();
    (shown.join(", "), unreached)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_what_no_seed_reached() {
        let a = BTreeMap::from([("late-watch", 3), ("pass-refused", 0)]);
        let b = BTreeMap::from([("late-watch", 0), ("pass-refused", 0)]);
        let (shown, unreached) = report(&[a, b]);
        assert_eq!(
            shown,
            "late-watch 1/2 seeds (3x), pass-refused 0/2 seeds (0x)"
        );
        assert_eq!(unreached, vec!["pass-refused"]);
    }

    #[test]
    fn a_profile_keeps_a_link_fault_on() {
        for seed in 0..200 {
            let p = Profile::draw(seed);
            assert!(
                p.blackhole || p.reset || p.stall || p.expiry,
                "seed {seed}: {p:?}"
            );
        }
        // Some seeds leave a family off, and not always the same one.
        let offs: std::collections::BTreeSet<Vec<&str>> =
            (0..200).map(|seed| Profile::draw(seed).off()).collect();
        assert!(offs.len() > 10, "{offs:?}");
    }
}
