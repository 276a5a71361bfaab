//! BUGGIFY points: places in the framework where a simulation may widen a
//! rare window, as FoundationDB's simulation does (issue 47).
//!
//! A point is a place where the library's correctness must not depend on
//! how long something takes, but where, in tests, it always takes about the
//! same: the instant between the decision that the lock is ours and the
//! hold's start, a watch notification acted on the moment it arrives, a
//! cohort pass made in the same step as the release before it. At a point
//! that fires, the task waits a while (1 to 100 ms) and everything else
//! (other contenders, the server, the faults) goes on meanwhile.
//!
//! # Only in a simulation
//!
//! The points exist only in a build with `--cfg zk_buggify` (the simulator,
//! `sim/`, builds itself so); in every other build `delay` is an empty
//! function the compiler removes, and [`enable`] answers `false`. Even
//! then they do nothing on a thread until [`enable`] is called on it, with
//! the seed that decides everything: which points are on for this run
//! (each one in two), and at which passes an enabled point fires (one in
//! four) and for how long. The draws come from a generator of their own,
//! so the other random draws of a run (`random`) are those of a run
//! without points.
//!
//! [`reached`] tells how many times each point fired on this thread since
//! [`enable`], and how many times the library took each of its rare paths
//! ([`Rare`], counted by `reach`): a batch of seeds that never fires a
//! point or never takes a rare path says so.

use std::time::Duration;

/// A place where a simulation may widen a window (see the module's notes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Point {
    /// Between the listing that finds our node first (the node ahead
    /// deleted) and the grant: the session may end, or the connection be
    /// suspended, in between.
    GrantDelay,
    /// A watch notification (the node ahead deleted, the children changed)
    /// acted on late, as by a busy runtime.
    LateWatch,
    /// Between a cohort pass (a hold's node handed to the next task of the
    /// same process at its release) and the receiving task's check that the
    /// node is still to be trusted: the connection may be suspended, or the
    /// session lost, in between.
    PassDelay,
    /// A fenced write of a hold the process knows is lost, whose node the
    /// server confirms is gone, sent anyway: the server's check of the
    /// node in the multi refuses it, not the process's own check (as when
    /// the write races the notification of the node's deletion). Not a
    /// wait: the point decides.
    ServerFence,
}

impl Point {
    /// Every point, in a fixed order.
    pub const ALL: [Point; 4] = [
        Point::GrantDelay,
        Point::LateWatch,
        Point::PassDelay,
        Point::ServerFence,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Point::GrantDelay => "grant-delay",
            Point::LateWatch => "late-watch",
            Point::PassDelay => "pass-delay",
            Point::ServerFence => "server-fence",
        }
    }

    #[cfg_attr(not(zk_buggify), allow(dead_code))]
    fn index(self) -> usize {
        self as usize
    }
}

/// A rare path of the library, counted where it is taken (only in a
/// simulation with the points on; see [`reached`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Rare {
    /// A create's reply was lost and its node found and adopted, instead of
    /// a second one created.
    AdoptedCreate,
    /// A node passed by a cohort hand-off was found lost on the way (the
    /// connection suspended, the session replaced, the lease run out), and
    /// deleted instead of held.
    PassRefused,
    /// A cohort pass was taken (a node handed to the next task of the
    /// process without a request).
    PassTaken,
    /// A fenced write refused by the server's check of a held node (the
    /// node gone), not by the process's own check.
    ServerRefused,
}

impl Rare {
    /// Every rare path, in a fixed order.
    pub const ALL: [Rare; 4] = [
        Rare::AdoptedCreate,
        Rare::PassRefused,
        Rare::PassTaken,
        Rare::ServerRefused,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Rare::AdoptedCreate => "adopted-create",
            Rare::PassRefused => "pass-refused",
            Rare::PassTaken => "pass-taken",
            Rare::ServerRefused => "server-refused",
        }
    }
}

#[cfg(zk_buggify)]
mod on {
    use std::cell::RefCell;
    use std::time::Duration;

    use super::{Point, Rare};

    /// One run's points on one thread.
    pub(super) struct Points {
        pub(super) rng: fastrand::Rng,
        pub(super) enabled: [bool; Point::ALL.len()],
        pub(super) fired: [u64; Point::ALL.len()],
        pub(super) rare: [u64; Rare::ALL.len()],
    }

    thread_local! {
        pub(super) static POINTS: RefCell<Option<Points>> = const { RefCell::new(None) };
    }

    pub(super) fn enable(seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0xb066_1f70_0000_0047);
        let enabled = Point::ALL.map(|_| rng.bool());
        POINTS.with(|points| {
            *points.borrow_mut() = Some(Points {
                rng,
                enabled,
                fired: [0; Point::ALL.len()],
                rare: [0; Rare::ALL.len()],
            });
        });
    }

    pub(super) fn draw(point: Point) -> Option<Duration> {
        POINTS.with(|points| {
            let mut points = points.borrow_mut();
            let points = points.as_mut()?;
            if !points.enabled[point.index()] || points.rng.u8(0..4) != 0 {
                return None;
            }
            points.fired[point.index()] += 1;
            let most = super::MAX_DELAY.as_millis() as u64;
            Some(Duration::from_millis(points.rng.u64(1..=most)))
        })
    }

    pub(super) fn reach(rare: Rare) {
        POINTS.with(|points| {
            if let Some(points) = points.borrow_mut().as_mut() {
                points.rare[rare as usize] += 1;
            }
        });
    }
}

/// Waits a while if `point` fires (only in a simulation; see the module's
/// notes). Cancel safe: a wait, nothing else.
#[allow(clippy::unused_async)]
pub(crate) async fn delay(point: Point) {
    #[cfg(zk_buggify)]
    if let Some(pause) = on::draw(point) {
        tracing::debug!(point = point.name(), ?pause, "buggify");
        tokio::time::sleep(pause).await;
    }
    #[cfg(not(zk_buggify))]
    let _ = point;
}

/// Whether `point` fires at this pass (only in a simulation; see the
/// module's notes): for a point that decides rather than waits.
pub(crate) fn fires(point: Point) -> bool {
    #[cfg(zk_buggify)]
    {
        let fired = on::draw(point).is_some();
        if fired {
            tracing::debug!(point = point.name(), "buggify");
        }
        fired
    }
    #[cfg(not(zk_buggify))]
    {
        let _ = point;
        false
    }
}

/// Counts a rare path taken (only in a simulation with the points on).
pub(crate) fn reach(rare: Rare) {
    #[cfg(zk_buggify)]
    on::reach(rare);
    #[cfg(not(zk_buggify))]
    let _ = rare;
}

/// Turns the points on for this thread, decided by `seed` (which are on,
/// when each fires, for how long), and sets their counts to zero. `false`
/// in a build without `--cfg zk_buggify`: nothing was turned on.
pub fn enable(seed: u64) -> bool {
    #[cfg(zk_buggify)]
    {
        on::enable(seed);
        true
    }
    #[cfg(not(zk_buggify))]
    {
        let _ = seed;
        false
    }
}

/// Turns the points off for this thread.
pub fn disable() {
    #[cfg(zk_buggify)]
    on::POINTS.with(|points| points.borrow_mut().take());
}

/// What a run reached on this thread since [`enable`] (empty if the points
/// are not on).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reached {
    /// Each point, whether it was on, and how many times it fired.
    pub points: Vec<(Point, bool, u64)>,
    /// Each rare path and how many times it was taken.
    pub rare: Vec<(Rare, u64)>,
}

/// What this thread's run reached since [`enable`].
pub fn reached() -> Reached {
    #[cfg(zk_buggify)]
    {
        on::POINTS.with(|points| {
            points
                .borrow()
                .as_ref()
                .map_or_else(Reached::default, |points| Reached {
                    points: Point::ALL
                        .iter()
                        .map(|p| (*p, points.enabled[p.index()], points.fired[p.index()]))
                        .collect(),
                    rare: Rare::ALL
                        .iter()
                        .map(|r| (*r, points.rare[*r as usize]))
                        .collect(),
                })
        })
    }
    #[cfg(not(zk_buggify))]
    Reached::default()
}

/// The longest a point waits.
pub const MAX_DELAY: Duration = Duration::from_millis(100);
