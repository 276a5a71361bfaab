//! [`HoldBounds`]: a hold that ends by itself when it has lasted too long,
//! or when its holder has not reported progress for too long (the rules
//! are on [`HoldBounds`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::{Error, Result};

/// The longest bound accepted: a year. Past that a bound is a mistake (a
/// unit slip), not a policy, and is refused before anything is sent.
pub const MAX_BOUND: Duration = Duration::from_secs(365 * 24 * 3600);

/// The bounds of a hold. The default bounds nothing: a hold given no bound
/// behaves as one before bounds existed.
///
/// A holder whose task is stuck (a deadlock, a wedged call) while its
/// process and its session stay alive would otherwise keep its lock for as
/// long as the process lives: the session is kept alive by the client, not
/// by the work. A bound is kept by the work instead:
///
/// * [`HoldBounds::duration`]: the hold ends once it has lasted this long
///   since its grant;
/// * [`HoldBounds::silence`]: the hold ends once this long has passed since
///   the grant or the last [`Hold::progress`](super::Hold::progress), whichever came last.
///
/// When a bound passes, the library ends the hold without the holder's
/// help, in this order:
/// 1. the hold is lost with [`LockLoss::BoundPassed`](crate::LockLoss::BoundPassed), in one step of its
///    send gate: from that instant [`Hold::check`](super::Hold::check) (so `is_valid`, a
///    fence's writes) refuses in this process, and a fenced write already
///    past its check has been queued on the session before;
/// 2. its node is deleted (by the framework's background cleaner, on the
///    same session, so after any write queued before): ZooKeeper refuses
///    the hold's fenced writes from then on, and the next waiter gets the
///    lock.
///
/// The check of step 1 needs no task: a holder that looks at its hold
/// after the bound finds it lost even if the task that deletes the node has
/// not run yet. Not to be confused with
/// [`CohortPolicy::max_hold`](super::CohortPolicy::max_hold), which bounds
/// a run of in-process passes of one node, not a hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HoldBounds {
    duration: Option<Duration>,
    silence: Option<Duration>,
    publish: bool,
}

/// Which bound ended a hold (a reason of a loss: it lives beside
/// [`LockLoss`](crate::LockLoss)).
pub use crate::loss::Bound;

impl HoldBounds {
    /// No bound.
    pub fn new() -> Self {
        HoldBounds::default()
    }

    /// Ends the hold once it has lasted `duration` since its grant.
    pub fn duration(mut self, duration: Duration) -> Self {
        self.duration = Some(duration);
        self
    }

    /// Ends the hold once `silence` has passed without progress (see
    /// [`Hold::progress`](super::Hold::progress)) since the grant or the last progress.
    pub fn silence(mut self, silence: Duration) -> Self {
        self.silence = Some(silence);
        self
    }

    /// Publishes the last progress on the holder's node, for `locks`, the
    /// tree observer and other processes to see: the node's identity (its
    /// JSON data) gains `progress_ms` (milliseconds since the epoch, see
    /// [`identity::with_progress`](crate::identity::with_progress)), written
    /// at most once per quarter of the silence bound counting the grant as
    /// the first (a hold shorter than a quarter writes nothing), and only
    /// when there was progress since the last write. Each write also wakes
    /// whoever watches the node (the holder's own loss watch and the next
    /// waiter), who watch again: a request more for each.
    /// Each write is conditional on the node's version: once anyone else
    /// writes the node (a revocation request, say), publication stops for
    /// the hold, so such a request is never overwritten.
    /// Needs a silence bound, and bounds
    /// given at the acquire ([`Acquire::bounds`](super::Acquire::bounds),
    /// a lock's default) of a node whose data is an identity (the default).
    pub fn publish_progress(mut self) -> Self {
        self.publish = true;
        self
    }

    /// Whether progress is published (see [`publish_progress`](Self::publish_progress)).
    pub fn publishes_progress(&self) -> bool {
        self.publish
    }

    /// The hold bound, if any.
    pub fn max_duration(&self) -> Option<Duration> {
        self.duration
    }

    /// The silence bound, if any.
    pub fn max_silence(&self) -> Option<Duration> {
        self.silence
    }

    /// Whether any bound is set.
    pub fn is_bounded(&self) -> bool {
        self.duration.is_some() || self.silence.is_some()
    }

    /// Checks the bounds: each must be more than zero and at most
    /// [`MAX_BOUND`]. Every acquire given bounds checks them before it
    /// sends anything.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], naming the bound.
    pub fn validate(&self) -> Result<()> {
        for (name, bound) in [("hold", self.duration), ("silence", self.silence)] {
            match bound {
                Some(d) if d.is_zero() => {
                    return Err(Error::InvalidArgument(format!(
                        "a {name} bound of zero would end every hold at its grant"
                    )))
                }
                Some(d) if d > MAX_BOUND => {
                    return Err(Error::InvalidArgument(format!(
                        "a {name} bound of {d:?} is longer than a year; \
                         leave it unset for no bound"
                    )))
                }
                _ => {}
            }
        }
        if self.publish && self.silence.is_none() {
            return Err(Error::InvalidArgument(
                "progress is published once per quarter of the silence bound: give one".into(),
            ));
        }
        Ok(())
    }
}

/// The bounds of one hold, as it runs.
pub(crate) struct Running {
    bounds: HoldBounds,
    /// The node's data to publish progress in, when it is published.
    pub(super) publish: Option<std::sync::Arc<[u8]>>,
    /// The grant (or when the bounds were set), on tokio's clock.
    pub(super) start: Instant,
    /// The last progress, in nanoseconds after `start`.
    progress: AtomicU64,
}

impl Running {
    pub(crate) fn new(bounds: HoldBounds, publish: Option<std::sync::Arc<[u8]>>) -> Self {
        Running {
            bounds,
            publish,
            start: Instant::now(),
            progress: AtomicU64::new(0),
        }
    }

    pub(crate) fn bounds(&self) -> HoldBounds {
        self.bounds
    }

    /// The same bounds, on the same clocks (start and last progress).
    pub(crate) fn continued(&self) -> Self {
        Running {
            bounds: self.bounds,
            // A hold that continues another's is a node of its own, whose
            // data it does not know: it does not publish.
            publish: None,
            start: self.start,
            progress: AtomicU64::new(self.progress.load(Ordering::Relaxed)),
        }
    }

    /// Records progress now.
    pub(crate) fn progress(&self) {
        let since = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.progress.fetch_max(since, Ordering::Relaxed);
    }

    /// The last progress (the start if none).
    pub(crate) fn last_progress(&self) -> Instant {
        self.start + Duration::from_nanos(self.progress.load(Ordering::Relaxed))
    }

    /// When the next bound passes as things stand (progress may move it).
    pub(crate) fn next_end(&self) -> Option<(Instant, Bound)> {
        let hold = self
            .bounds
            .duration
            .map(|d| (self.start + d, Bound::Duration));
        let silence = self
            .bounds
            .silence
            .map(|d| (self.last_progress() + d, Bound::Silence));
        match (hold, silence) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// The bound that has passed by `now`, if one has.
    pub(crate) fn passed(&self, now: Instant) -> Option<Bound> {
        self.next_end()
            .filter(|(end, _)| now >= *end)
            .map(|(_, bound)| bound)
    }
}

/// A lock's default [`HoldBounds`], settable from any handle (for the
/// recipes: each keeps one, and bounds every hold whose acquire gives none
/// of its own with it).
#[derive(Debug, Default)]
pub struct BoundsSetting(std::sync::RwLock<HoldBounds>);

impl BoundsSetting {
    /// The bounds now.
    pub fn get(&self) -> HoldBounds {
        *self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets the bounds, checked first.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for bounds [`HoldBounds::validate`]
    /// refuses; nothing changes then.
    pub fn set(&self, bounds: HoldBounds) -> Result<()> {
        bounds.validate()?;
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = bounds;
        Ok(())
    }
}
