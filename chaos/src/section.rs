//! One hold as its holder lives it, for a lock's hold and a leader's term
//! alike: what was taken ([`Taken`]: a guard, a task-bound hold, a lease, a
//! multi-lock, a term), where the holder sits ([`Seat`]), the hold's
//! [`Record`] (an `Interval` once it ends, its losses, its progress), and
//! one critical section: read the counter, await a little, write it back
//! through the hold's fence, now and then with a process pause or, for a
//! bounded holder, getting stuck after the read (see `stuck.rs`).
//!
//! The loop that takes holds is in `contenders.rs`, a leader's term in
//! `elections.rs`; both build on this file.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::oneshot;
use tokio::time::Instant;
use zk_curator::framework::zk;
use zk_curator::recipes::InterProcessMultiLock;
use zk_curator::{
    Error, Fence, FencingToken, Framework, HoldBounds, InterProcessMutex, LeaderTerm, Lease,
    LockLoss, MutexGuard, WriteGuard,
};

use crate::config::{Draw, Kind};
use crate::place::{now, sequence};
use crate::records::{seen_late, Accepted, Interval};
use crate::shared::{Shared, StuckHold};
use crate::stuck::{self, STUCK_ONE_IN};
use crate::verdict::early;

/// A term's way to give leadership up, where the holder may (a latch's:
/// closed for a new one); a selector's term has none (its selector gives
/// it up).
pub(crate) trait GiveUp: Send + Sync {
    /// Gives leadership up, and queues again.
    fn give_up(&self) -> BoxFuture<'_, ()>;
}

/// A hold of one kind.
pub(crate) enum Taken {
    Guard(MutexGuard),
    Task(InterProcessMutex),
    Write(WriteGuard),
    Lease(Lease),
    Multi(InterProcessMultiLock),
    /// A leader's term: of a contender's latch (given up by closing that
    /// latch for a new one), or of its selector (given up by the selector).
    Term(LeaderTerm, Option<Arc<dyn GiveUp>>),
}

impl Taken {
    pub(crate) fn lost(&self) -> BoxFuture<'static, LockLoss> {
        match self {
            Taken::Guard(g) => g.lost().boxed(),
            Taken::Task(m) => m.lost().boxed(),
            Taken::Write(g) => g.lost().boxed(),
            Taken::Lease(l) => l.lost().boxed(),
            Taken::Multi(m) => m.lost(),
            Taken::Term(t, _) => t.lost().boxed(),
        }
    }

    pub(crate) fn fence(&self) -> zk_curator::Result<Fence> {
        match self {
            Taken::Guard(g) => g.fence(),
            Taken::Task(m) => m.fence(),
            Taken::Write(g) => g.fence(),
            Taken::Lease(l) => l.fence(),
            Taken::Multi(m) => m.fence(),
            Taken::Term(t, _) => t.fence(),
        }
    }

    pub(crate) fn token(&self) -> FencingToken {
        match self {
            Taken::Guard(g) => g.fencing_token(),
            Taken::Task(m) => m.fencing_token().unwrap_or(FencingToken::new(0)),
            Taken::Write(g) => g.fencing_token(),
            Taken::Lease(l) => l.fencing_token(),
            // The highest member token orders multi-lock holders.
            Taken::Multi(m) => m
                .fence()
                .ok()
                .and_then(|f| f.fencing_tokens().into_iter().max())
                .unwrap_or(FencingToken::new(0)),
            Taken::Term(t, _) => t.fencing_token(),
        }
    }

    /// Says the hold is making progress (nothing for an unbounded hold).
    pub(crate) fn progress(&self) {
        match self {
            Taken::Guard(g) => g.progress(),
            Taken::Task(m) => m.progress(),
            Taken::Write(g) => g.progress(),
            Taken::Lease(l) => l.progress(),
            Taken::Multi(m) => m.progress(),
            Taken::Term(t, _) => t.progress(),
        }
    }

    /// Why the hold ended, if it is known to have.
    pub(crate) fn loss(&self) -> Option<LockLoss> {
        match self {
            Taken::Guard(g) => g.loss(),
            Taken::Task(m) => zk_curator::InterProcessLock::loss(m),
            Taken::Write(g) => g.loss(),
            Taken::Lease(l) => l.loss(),
            Taken::Multi(m) => m.loss(),
            Taken::Term(t, _) => t.loss(),
        }
    }

    /// Whether the hold is known gone for good (not a mere suspension).
    pub(crate) fn gone(&self) -> bool {
        matches!(
            self.loss(),
            Some(LockLoss::SessionReplaced | LockLoss::NodeDeleted | LockLoss::Closed)
        )
    }

    pub(crate) async fn release(self) {
        let _ = match self {
            Taken::Guard(g) => g.release().await,
            Taken::Task(m) => m.release().await,
            Taken::Write(g) => g.release().await,
            Taken::Lease(l) => l.release().await,
            Taken::Multi(m) => m.release().await,
            Taken::Term(term, Some(latch)) if term.is_valid() => {
                latch.give_up().await;
                Ok(())
            }
            // A lost term: its latch queues again by itself. A selector's
            // term: its selector gives it up.
            Taken::Term(..) => Ok(()),
        };
    }
}

/// What became of a critical section's write.
pub(crate) enum Written {
    Accepted(Accepted),
    Refused,
    Interfered,
    Failed,
}

/// Where a contender's critical sections happen: who, on which kind, over
/// which session, on which counter.
pub(crate) struct Seat {
    pub(crate) shared: Arc<Shared>,
    pub(crate) who: usize,
    /// Which of the contender's tasks.
    pub(crate) task: usize,
    pub(crate) kind: Kind,
    pub(crate) framework: Framework,
    pub(crate) counter: String,
    /// The bounds of its holds, if it is a stuck holder (see "Stuck
    /// holders").
    pub(crate) bounds: Option<HoldBounds>,
    /// Its choice to get stuck, from a generator of its own, and how many
    /// sections in a row could have got stuck and did not.
    pub(crate) stuck_rng: Mutex<(fastrand::Rng, u64)>,
}

impl Seat {
    /// Whether a bounded holder's section that could get stuck does: one
    /// in [`STUCK_ONE_IN`] at random, and at the latest the
    /// [`STUCK_ONE_IN`]th in a row of this seat, or the contender's
    /// [`STUCK_ONE_IN`]th over all its seats if none of them got stuck yet
    /// (so that every run whose bounded contender holds a few times has
    /// some, even when no seat of it holds often: a long fault may leave
    /// each lock two sections).
    pub(crate) fn gets_stuck(&self) -> bool {
        if self.bounds.is_none() {
            return false;
        }
        let mut choice = self.stuck_rng.lock().unwrap();
        let (rng, missed) = &mut *choice;
        let mut chances = self.shared.stuck_chances.lock().unwrap();
        let (sections, any_stuck, _) = chances.entry(self.who).or_insert((0, false, false));
        let stuck = rng.below(STUCK_ONE_IN) == 0
            || *missed + 1 >= STUCK_ONE_IN
            || (!*any_stuck && *sections + 1 >= STUCK_ONE_IN);
        *missed = if stuck { 0 } else { *missed + 1 };
        *sections += 1;
        *any_stuck |= stuck;
        stuck
    }
}

/// One hold, or one leader's term, as its holder lives it: logged as an
/// [`Interval`] when dropped, at its end, or the
/// instant a selector cancels the term.
pub(crate) struct Record<'a> {
    pub(crate) seat: &'a Seat,
    pub(crate) interval: Interval,
    pub(crate) finished: bool,
    /// A term's handle, to learn at the end why a selector cancelled it.
    pub(crate) term: Option<LeaderTerm>,
    /// Whether a [`LockLoss::Stale`] of this hold
    /// was recorded already.
    pub(crate) stale_noted: bool,
    /// When the acquire began (the hold's grant came after).
    pub(crate) asked: Option<Instant>,
    /// When its holder said progress, each stamp just after the call.
    pub(crate) progress: Vec<Instant>,
    /// A stuck holder found its hold lost when it woke: it did nothing
    /// from this instant (when it got stuck, with its
    /// [`sequence`](crate::sequence) number), so its hold ends here.
    pub(crate) stuck_end: Option<(Instant, u64)>,
}

impl<'a> Record<'a> {
    /// A hold asked for at `asked` (when known) begins now: when its holder
    /// sees it. If the holder's place was stopped since it asked
    /// ([`Place::pause`](crate::Place::pause)), the grant may have come before
    /// the stop (its watch notification waiting, as in a stopped process's
    /// socket buffer, for the process to be continued): the hold is
    /// [`Interval::seen_late`](crate::records::Interval::seen_late), and did
    /// not obey (see [`Drop`]).
    pub(crate) fn begin(seat: &'a Seat, taken: &Taken, asked: Option<Instant>) -> Record<'a> {
        seat.shared.rounds.fetch_add(1, Ordering::Relaxed);
        seat.shared.log(seat.kind, |log| log.acquired += 1);
        let start = now();
        let start_seq = sequence();
        let seen_late = seen_late(&seat.shared.host_pauses.lock().unwrap(), seat.who, asked);
        Record {
            seat,
            interval: Interval {
                who: seat.who,
                task: seat.task,
                token: taken.token(),
                node: match taken {
                    Taken::Term(term, _) => Some(term.node().path().to_owned()),
                    _ => None,
                },
                loss: None,
                start,
                end: start,
                start_seq,
                end_seq: start_seq,
                obeyed: true,
                seen_late,
            },
            finished: false,
            term: match taken {
                Taken::Term(term, _) => Some(term.clone()),
                _ => None,
            },
            stale_noted: false,
            asked,
            progress: Vec::new(),
            stuck_end: None,
        }
    }

    /// Says progress on a bounded hold, and stamps it.
    pub(crate) fn progress(&mut self, taken: &Taken) {
        if self.seat.bounds.is_some() {
            taken.progress();
            self.progress.push(now());
        }
    }

    /// Rule 9: a bound that passed (seen at `at`) had its time.
    pub(crate) fn check_bound(&self, loss: LockLoss, at: Instant) {
        let (Some(bounds), LockLoss::BoundPassed(bound)) = (self.seat.bounds, loss) else {
            return;
        };
        let asked = self.asked.unwrap_or(self.interval.start);
        if let Some(early) = early(bounds, bound, asked, &self.progress, at) {
            let who = (self.seat.who, self.seat.task);
            self.seat.shared.log(self.seat.kind, |log| {
                log.early_bounds
                    .push(format!("#{}/{}: {early}", who.0, who.1))
            });
        }
    }

    /// The hold ended early, signalled by its `lost()`.
    pub(crate) fn lost(&mut self, loss: LockLoss) {
        self.lost_at(loss, now());
    }

    /// The hold ended early, its `lost()` having fired at `at`.
    pub(crate) fn lost_at(&mut self, loss: LockLoss, at: Instant) {
        let Seat {
            shared, kind, who, ..
        } = self.seat;
        let reason = match loss {
            LockLoss::ConnectionState(state) => format!("{state}"),
            other => format!("{other:?}"),
        };
        shared.log(*kind, |log| *log.losses.entry(reason).or_default() += 1);
        self.interval.loss = Some(loss);
        self.check_bound(loss, at);
        if loss == LockLoss::Stale {
            self.stale(*who);
        }
    }

    /// Records, once per hold, that it was found
    /// [`LockLoss::Stale`]: by its `lost()`, by a
    /// write its fence refused, or (a selector's term) when it was cancelled.
    pub(crate) fn stale(&mut self, who: usize) {
        if std::mem::replace(&mut self.stale_noted, true) {
            return;
        }
        let at = now();
        self.seat
            .shared
            .log(self.seat.kind, |log| log.stale_losses.push((who, at)));
    }
}

impl Drop for Record<'_> {
    fn drop(&mut self) {
        if self.term.as_ref().and_then(|term| term.loss()) == Some(LockLoss::Stale) {
            self.stale(self.seat.who);
        }
        let mut interval = self.interval.clone();
        (interval.end, interval.end_seq) = self.stuck_end.unwrap_or_else(|| (now(), sequence()));
        // Its place stopped during the hold: it could not obey the loss
        // signal then (only its fence protects).
        if self
            .seat
            .shared
            .host_paused_since(self.seat.who, interval.start)
        {
            interval.obeyed = false;
        }
        let cancelled = !self.finished;
        self.seat.shared.log(self.seat.kind, |log| {
            if cancelled {
                *log.losses.entry("cancelled".to_owned()).or_default() += 1;
            }
            log.intervals.push(interval);
        });
    }
}

/// A hold's loss signal, or (`watch` false) a signal that never comes.
pub(crate) type LossSignal = futures::future::Fuse<BoxFuture<'static, LockLoss>>;

pub(crate) fn loss_signal(taken: &Taken, watch: bool) -> LossSignal {
    let lost = if watch {
        taken.lost()
    } else {
        futures::future::pending().boxed()
    };
    lost.fuse()
}

/// One critical section: read the counter, await a little, write it back
/// through the hold's fence, ending at once if `lost` completes (then it
/// returns true). With `pause`, the holder neither watches nor acts between
/// its read and its write while its session is expired.
pub(crate) async fn section(
    seat: &Seat,
    taken: &Taken,
    record: &mut Record<'_>,
    lost: &mut LossSignal,
    rng: &mut fastrand::Rng,
    pause: bool,
) -> bool {
    let Seat {
        shared,
        who,
        kind,
        framework,
        counter,
        ..
    } = seat;
    let (who, kind) = (*who, *kind);
    let t = shared.config.session_timeout;
    let exclusive = kind.holders() == 1;
    // Read, then await something, watching the loss signal (and saying
    // progress between the steps, on a bounded hold).
    record.progress(taken);
    let read = framework.call_with_retry(|client| {
        let counter = counter.clone();
        async move { client.get_data(&counter).await }
    });
    let read = tokio::select! {
        read = read => read.ok(),
        loss = &mut *lost => {
            record.lost(loss);
            return true;
        }
    };
    let Some((data, stat)) = read else {
        return false;
    };
    record.progress(taken);
    // Now and then a bounded holder gets stuck here (see "Stuck holders"),
    // while the faults last (see "Liveness").
    if !pause && !shared.stop.load(Ordering::SeqCst) && seat.gets_stuck() {
        if let Some((written, ended)) = get_stuck(seat, taken, record, &data, &stat).await {
            note_written(seat, taken, record, written);
            return ended;
        }
        // It could not get stuck (its hold was lost already): a stuck
        // hold is no longer certain for this contender.
        if let Some(chances) = shared.stuck_chances.lock().unwrap().get_mut(&seat.who) {
            chances.2 = true;
        }
    }
    let work = tokio::time::sleep(rng.millis(5, 120));
    tokio::select! {
        () = work => {}
        loss = &mut *lost => {
            record.lost(loss);
            return true;
        }
    }
    record.progress(taken);
    let written = if pause {
        // A process pause: the holder neither watches nor acts while its
        // session is expired; then it writes at once.
        record.interval.obeyed = false;
        shared.log(kind, |log| log.pauses += 1);
        let paused = now();
        let length = t * 2 + t / 2;
        // Where the contender's place can be stopped (a simulated host),
        // every other pause stops all of it: the framework's session and
        // timers too, whose clock then jumps. Otherwise the harness
        // expires the session while this holder alone waits.
        // One place stopped at a time, so that the others make progress.
        let place = shared.places.get(who).cloned().flatten().filter(|_| {
            shared
                .host_pauses
                .lock()
                .unwrap()
                .iter()
                .all(|p| p.2.is_some())
        });
        let stopped = match place {
            // Shorter or longer than the session timeout: the session
            // outlives the stop, or the server expires it meanwhile.
            Some(place) if rng.below(2) == 0 => {
                let t = t.as_millis() as u64;
                place.pause(rng.millis(t / 2, 2 * t))
            }
            _ => None,
        };
        match stopped {
            Some(continued) => {
                shared.log(kind, |log| log.host_pauses += 1);
                let at = shared.host_pauses.lock().unwrap().len();
                shared.host_pauses.lock().unwrap().push((who, paused, None));
                continued.await;
                shared.host_pauses.lock().unwrap()[at].2 = Some(now());
            }
            None => {
                let _ = shared.pause_requests.send(who);
                tokio::time::sleep(length).await;
            }
        }
        let written = write(shared, framework, taken, counter, &data, &stat, exclusive).await;
        // The pause is a fault of this contender's, until its write.
        shared.window(who, paused);
        written
    } else {
        tokio::select! {
            w = write(shared, framework, taken, counter, &data, &stat, exclusive) => w,
            loss = &mut *lost => {
                record.lost(loss);
                return true;
            }
        }
    };
    note_written(seat, taken, record, written);
    false
}

/// Records what became of a critical section's write.
pub(crate) fn note_written(seat: &Seat, taken: &Taken, record: &mut Record<'_>, written: Written) {
    let Seat {
        shared, who, kind, ..
    } = seat;
    let (who, kind) = (*who, *kind);
    // A holder whose place was stopped meanwhile could not obey either.
    if shared.host_paused_since(who, record.interval.start) {
        record.interval.obeyed = false;
    }
    let obeyed = record.interval.obeyed;
    match written {
        Written::Accepted(accepted) => shared.log(kind, |log| log.accepted.push(accepted)),
        Written::Refused => {
            if taken.loss() == Some(LockLoss::Stale) {
                record.stale(who);
            }
            shared.log(kind, |log| log.refused += 1);
        }
        Written::Interfered if obeyed => shared.log(kind, |log| log.interference += 1),
        _ => {}
    }
}

/// A bounded holder gets stuck after its read (see "Stuck holders"): it
/// takes its fence (a holder about to write), hands the hold to the
/// checker, and does nothing (no progress, no watching, no I/O) until the
/// checker has judged the hold, its framework and session going on as
/// before. Then it wakes and writes once through that fence, without
/// looking first. Returns the write, and whether the hold had ended (then
/// its interval ends at the instant it got stuck: it did nothing after).
/// `None`: it did not get stuck (its hold was lost already, or the run is
/// winding down).
pub(crate) async fn get_stuck(
    seat: &Seat,
    taken: &Taken,
    record: &mut Record<'_>,
    data: &[u8],
    stat: &zk::Stat,
) -> Option<(Written, bool)> {
    let bounds = seat.bounds?;
    let fence = taken.fence().ok()?;
    let sender = seat.shared.stuck_holds.lock().unwrap().clone()?;
    let stuck_at = now();
    let stuck_seq = sequence();
    // The library's clocks start at the grant (a lock's default bounds) or
    // at the bounding call (a lease), both before the hold's start here,
    // and its last progress came before the last stamp: `end` is when the
    // first bound passes at the latest.
    let last = record
        .progress
        .last()
        .copied()
        .unwrap_or(record.interval.start);
    let end = [
        bounds.max_silence().map(|silence| last + silence),
        bounds
            .max_duration()
            .map(|duration| record.interval.start + duration),
    ]
    .into_iter()
    .flatten()
    .min()?;
    let lost = stuck::watch_loss(&fence);
    let feeding = Arc::new(AtomicBool::new(false));
    if seat.shared.config.break_bound {
        if let Some(silence) = bounds.max_silence() {
            stuck::feed_by_timer(&fence, silence, feeding.clone());
        }
    }
    let (done, judged) = oneshot::channel();
    let hold = StuckHold {
        who: seat.who,
        task: seat.task,
        kind: seat.kind,
        nodes: fence
            .holds()
            .iter()
            .map(|h| h.node().path().to_owned())
            .collect(),
        stuck_at,
        end,
        lost: lost.clone(),
        done,
    };
    if sender.send(hold).is_err() {
        return None;
    }
    stuck::stay_stuck(judged).await;
    feeding.store(true, Ordering::SeqCst);
    // Woken: one write through the fence taken before, as if nothing had
    // happened.
    let lost_first = taken.loss();
    let value = std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.split(' ').next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let token = record.interval.token;
    let next = format!("{} {}", value + 1, token);
    let version = (seat.kind.holders() == 1).then_some(stat.version);
    let written = match fence
        .set_data(&seat.counter, next.as_bytes(), version)
        .await
    {
        Ok(_) => Written::Accepted(Accepted {
            value: value + 1,
            token,
            lost_before: lost_first.is_some(),
        }),
        Err(Error::LockLost { .. }) => Written::Refused,
        Err(Error::BadVersion) => Written::Interfered,
        Err(_) => Written::Failed,
    };
    seat.shared.log(seat.kind, |log| {
        log.stuck_writes += 1;
        log.stuck_writes_lost += u64::from(lost_first.is_some());
    });
    let Some(first) = lost_first else {
        return Some((written, false));
    };
    let (loss, at) = (*lost.lock().unwrap()).unwrap_or((first, now()));
    record.stuck_end = Some((stuck_at, stuck_seq));
    record.lost_at(loss, at);
    Some((written, true))
}

/// The critical section's write: the counter plus one, with this holder's
/// token, conditional on the version read (for exclusive kinds), through
/// the hold's fence (or, with `ZK_CHAOS_BREAK=fence`, as a naive holder
/// writes: straight through the framework's current session, with no
/// version check).
pub(crate) async fn write(
    shared: &Shared,
    framework: &Framework,
    taken: &Taken,
    counter: &str,
    data: &[u8],
    stat: &zk::Stat,
    exclusive: bool,
) -> Written {
    let value = std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.split(' ').next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let token = taken.token();
    let next = format!("{} {}", value + 1, token);
    let version = exclusive.then_some(stat.version);
    let lost_before = taken.gone();
    let result = if shared.config.break_fence {
        // A naive holder: a plain write on whatever session is current,
        // neither fenced nor conditional on the version it read.
        match framework.client().await {
            Ok(client) => client
                .set_data(counter, next.as_bytes(), None)
                .await
                .map(|_| ())
                .map_err(Error::from),
            Err(err) => Err(err),
        }
    } else {
        match taken.fence() {
            Ok(fence) => fence
                .set_data(counter, next.as_bytes(), version)
                .await
                .map(|_| ()),
            Err(err) => Err(err),
        }
    };
    match result {
        Ok(()) => Written::Accepted(Accepted {
            value: value + 1,
            token,
            lost_before,
        }),
        Err(Error::LockLost { .. }) => Written::Refused,
        Err(Error::BadVersion) => Written::Interfered,
        Err(_) => Written::Failed,
    }
}
