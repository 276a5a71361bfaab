//! The run's live state, shared by every task of a run: its [`Config`],
//! the stop flag, each kind's [`Log`] as it is written, the faults'
//! windows, where each contender runs and each stop of its place, what the
//! tree observer showed, and the channels to the fault injector (a holder's
//! pause asks for its session's expiry) and to the stuck holds' checker
//! ([`StuckHold`]).
//!
//! The records it fills are in `records.rs`; the tasks that fill them
//! (contenders, elections, observers, the checker) build on this file.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use zk_curator::LockLoss;

use crate::config::{Config, Kind};
use crate::place::{now, Place};
use crate::records::{paused_since, FaultWindow, HostPause, Log, TreeLog};

/// What every task of a run shares.
pub(crate) struct Shared {
    /// What the run was asked to do.
    pub(crate) config: Config,
    /// The faults are over: contenders end their rounds.
    pub(crate) stop: AtomicBool,
    /// Each kind's log, as it is written.
    pub(crate) logs: Mutex<BTreeMap<Kind, Log>>,
    /// Where a holder about to pause asks for its session's expiry (the
    /// fault injector carries it out).
    pub(crate) pause_requests: mpsc::UnboundedSender<usize>,
    /// Holds begun, all kinds together.
    pub(crate) rounds: AtomicU64,
    /// The faults injected on the contenders, process pauses included.
    pub(crate) windows: Mutex<Vec<FaultWindow>>,
    /// Where each contender runs (see [`Place`]).
    pub(crate) places: Vec<Option<Arc<dyn Place>>>,
    /// Each stop of a contender's whole place ([`Place::pause`]).
    pub(crate) host_pauses: Mutex<Vec<HostPause>>,
    /// What the tree observer showed.
    pub(crate) tree: Mutex<TreeLog>,
    /// Where stuck holders hand their holds to the checker (`None` once
    /// the contenders are done).
    pub(crate) stuck_holds: Mutex<Option<mpsc::UnboundedSender<StuckHold>>>,
    /// Per contender, how many of its sections (all its seats together)
    /// could have got stuck, whether one was chosen to (see
    /// [`Seat::gets_stuck`](crate::section::Seat::gets_stuck)), and whether
    /// a chosen one could not (its hold lost already).
    pub(crate) stuck_chances: Mutex<BTreeMap<usize, (u64, bool, bool)>>,
}

impl Shared {
    /// Writes in `kind`'s log.
    pub(crate) fn log(&self, kind: Kind, f: impl FnOnce(&mut Log)) {
        f(self.logs.lock().unwrap().entry(kind).or_default());
    }

    /// Whether contender `who`'s place was stopped at some time since
    /// `since` ([`Place::pause`]): none of its holders could watch or act
    /// then, those that obey the loss signal included.
    pub(crate) fn host_paused_since(&self, who: usize, since: Instant) -> bool {
        paused_since(&self.host_pauses.lock().unwrap(), who, since)
    }

    /// Records a fault on contender `who` from `start` until now.
    pub(crate) fn window(&self, who: usize, start: Instant) {
        let end = now();
        self.windows
            .lock()
            .unwrap()
            .push(FaultWindow { who, start, end });
    }
}

/// When and why the stuck hold's `lost()` fired, as seen beside it.
pub(crate) type LostSlot = Arc<Mutex<Option<(LockLoss, Instant)>>>;

/// A stuck hold, handed by its holder to the checker.
#[derive(Debug)]
pub(crate) struct StuckHold {
    /// Which contender, which of its tasks, on which kind.
    pub(crate) who: usize,
    pub(crate) task: usize,
    pub(crate) kind: Kind,
    /// The hold's nodes (two for a multi-lock).
    pub(crate) nodes: Vec<String>,
    /// When it got stuck (just after its last progress).
    pub(crate) stuck_at: Instant,
    /// When its first bound passes at the latest (from the harness's
    /// stamps, each taken just after the library's own instant: the grant
    /// or the bounding call, the last progress).
    pub(crate) end: Instant,
    /// When and why its `lost()` fired, as a watcher beside it saw.
    pub(crate) lost: LostSlot,
    /// Sent once judged: the stuck task may wake.
    pub(crate) done: oneshot::Sender<()>,
}
