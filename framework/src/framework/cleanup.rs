//! The background cleaner ("guaranteed delete").
//!
//! Dropping an acquire future, dropping a guard, or releasing while the
//! connection is down must not leave a node behind, yet `Drop` cannot wait
//! for ZooKeeper. Such deletes are queued here: a plain channel send, which
//! works even outside a tokio runtime.
//!
//! One task owns every pending delete, in a map keyed by the job itself (a
//! path, or parent and protection prefix), so the same node handed over
//! twice is one job and the map never holds more than one entry per
//! distinct node. Each job has its own next attempt time: exponential
//! backoff with jitter after a failure, so that many jobs failing together
//! do not retry together. When the framework announces a usable connection
//! again (`Reconnected`, or a new session) every waiting job is due at once.
//! Retryable failures (connection loss, timeouts, a lost session) never make
//! the cleaner give up; only an error no retry can fix does (e.g. `NoAuth`).
//! A missing node counts as deleted.
//!
//! When the framework closes, the cleaner makes a final flush: every pending
//! job is tried once more on the session being closed, within a bounded
//! time, before that session ends. Ephemeral nodes would go with the session
//! anyway; the flush is what removes persistent ones.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use zookeeper_client as zk;

use super::{Inner, Session};
use crate::error::{Error, Result};
use crate::path;
use crate::retry::{sleep_until_opt, Backoff};

/// The pause of a failed job before its next attempt: 50 ms after the first
/// failure, doubling per failure up to 5 s (reconnecting makes every job due
/// at once), each pause jittered down to as little as half (see
/// [`Backoff::jittered`]). A job never gives up on a retryable failure, so
/// the cap keeps a long outage from pushing its next try far past the
/// reconnection.
const JOB_BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
/// How many attempts run at once (each is one or two pipelined requests).
const MAX_IN_FLIGHT: usize = 64;
/// The longest the final flush may take on `close()`.
pub(super) const FLUSH_LIMIT: Duration = Duration::from_secs(2);
/// Rounds of the final flush: jobs handed over while flushing (by work that
/// the close interrupted) get another round, up to this many.
const FLUSH_ROUNDS: usize = 4;

/// A node to delete in the background. Also the key of the cleaner's map.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum CleanupJob {
    /// A node whose path is known.
    Node {
        /// Its path.
        path: String,
    },
    /// A protected node whose create may or may not have happened: find the
    /// child of `parent` whose name starts with `name_prefix` and delete it.
    Protected {
        /// The parent to list.
        parent: String,
        /// `_c_<uuid>-<lock name>`.
        name_prefix: String,
    },
}

/// The schedule of one pending job.
#[derive(Debug)]
struct Entry {
    /// Failed attempts so far.
    failures: u32,
    /// When the next attempt may start.
    due: Instant,
    /// Whether an attempt is running now.
    running: bool,
}

/// The cleaner's state: pending jobs and the seed of their jitter.
struct Queue {
    /// Ordered, so that the due jobs are tried in the same order on every
    /// run (a simulation replays them).
    jobs: BTreeMap<CleanupJob, Entry>,
    seed: u64,
}

impl Queue {
    fn new() -> Self {
        // Per-process randomness for the jitter, so that two processes
        // cleaning the same lock do not retry in step; from the one source
        // (`crate::random`), so a seeded simulation replays it.
        let seed = crate::random::bits();
        Queue {
            jobs: BTreeMap::new(),
            seed,
        }
    }

    /// Adds a job handed over by the framework; a job already pending is
    /// not added twice (the handover's count is given back at once).
    fn add(&mut self, inner: &Inner, job: CleanupJob) {
        if self.jobs.contains_key(&job) {
            tracing::trace!(?job, "already pending; merged");
            release_count(inner, 1);
            return;
        }
        self.jobs.insert(
            job,
            Entry {
                failures: 0,
                due: Instant::now(),
                running: false,
            },
        );
    }

    /// The earliest due time of a job not running, if any.
    fn next_due(&self) -> Option<Instant> {
        self.jobs
            .values()
            .filter(|e| !e.running)
            .map(|e| e.due)
            .min()
    }

    /// Makes every waiting job due now.
    fn all_due_now(&mut self) {
        let now = Instant::now();
        for entry in self.jobs.values_mut().filter(|e| !e.running) {
            entry.due = entry.due.min(now);
        }
    }

    /// Marks as running, and returns, up to `limit` jobs that are not
    /// running and are due at `now`, in the map's (the jobs') order: the
    /// same jobs in the same order on every run, whatever order they were
    /// handed over in, so a simulation replays the requests they send.
    fn take_due(&mut self, now: Instant, limit: usize) -> Vec<CleanupJob> {
        self.jobs
            .iter_mut()
            .filter(|(_, e)| !e.running && e.due <= now)
            .take(limit)
            .map(|(job, e)| {
                e.running = true;
                job.clone()
            })
            .collect()
    }

    /// The pause after the `failures`-th failure of `job` ([`JOB_BACKOFF`]),
    /// jittered by a draw derived from the job, the attempt count and the
    /// process seed.
    fn backoff(&self, job: &CleanupJob, failures: u32) -> Duration {
        // `DefaultHasher::new()` has fixed keys (unlike a map's
        // `RandomState`): the draw depends on the seed and the job only.
        let mut hasher = DefaultHasher::new();
        (self.seed, job, failures).hash(&mut hasher);
        JOB_BACKOFF.jittered(failures.saturating_sub(1), hasher.finish())
    }
}

/// Gives back `n` handovers counted by `schedule_cleanup`.
fn release_count(inner: &Inner, n: usize) {
    inner
        .pending_cleanups
        .send_modify(|count| *count = count.saturating_sub(n));
}

/// What an attempt came to.
enum Outcome {
    /// Done: `true` if a node was deleted, `false` if none existed.
    Done(bool),
    /// Try again later.
    Retry(Error),
    /// Retrying cannot help.
    GiveUp(Error),
}

fn classify(result: Result<bool>) -> Outcome {
    match result {
        Ok(deleted) => Outcome::Done(deleted),
        Err(err) if err.is_transient() || matches!(err, Error::Closed) => Outcome::Retry(err),
        Err(err) => Outcome::GiveUp(err),
    }
}

/// Records the end of a job (deleted, absent, or given up).
fn finish(inner: &Inner, queue: &mut Queue, job: &CleanupJob, outcome: Outcome) {
    match outcome {
        Outcome::Done(deleted) => {
            if deleted {
                inner
                    .metrics
                    .background_deletes
                    .fetch_add(1, Ordering::Relaxed);
                crate::telemetry::background_delete();
            }
            tracing::debug!(?job, deleted, "background cleanup done");
        }
        Outcome::GiveUp(err) => {
            tracing::warn!(?job, %err, "background delete gave up: retrying cannot fix this");
        }
        Outcome::Retry(err) => {
            inner
                .metrics
                .background_delete_retries
                .fetch_add(1, Ordering::Relaxed);
            let failures = queue.jobs.get(job).map_or(1, |e| e.failures + 1);
            let delay = queue.backoff(job, failures);
            if let Some(entry) = queue.jobs.get_mut(job) {
                entry.failures = failures;
                entry.due = Instant::now() + delay;
                entry.running = false;
            }
            if failures % 10 == 1 {
                tracing::warn!(?job, %err, failures, ?delay, "background delete failed; will retry");
            }
            return;
        }
    }
    if queue.jobs.remove(job).is_some() {
        release_count(inner, 1);
    }
}

/// The cleaner task: runs until the framework closes, then flushes.
pub(super) async fn run(inner: Arc<Inner>, mut handovers: mpsc::UnboundedReceiver<CleanupJob>) {
    let mut closed = inner.closed_tx.subscribe();
    let mut states = inner.state_tx.subscribe();
    let mut queue = Queue::new();
    let mut running = FuturesUnordered::new();
    let attempt_limit = inner.config.connection_timeout;
    let start_due = |queue: &mut Queue, running: &mut FuturesUnordered<_>| {
        let due = queue.take_due(Instant::now(), MAX_IN_FLIGHT - running.len());
        for job in due {
            let inner = inner.clone();
            running.push(async move {
                let result = match tokio::time::timeout(attempt_limit, attempt(&inner, &job)).await
                {
                    Ok(result) => result,
                    Err(_) => Err(Error::Timeout(attempt_limit)),
                };
                (job, classify(result))
            });
        }
    };
    loop {
        let mut next_due = if running.len() < MAX_IN_FLIGHT {
            queue.next_due()
        } else {
            None
        };
        // A job due already starts now, not at the timer's next tick (up to
        // a millisecond later): a delete handed over is a hand-off waiting.
        if next_due.is_some_and(|due| due <= Instant::now()) {
            start_due(&mut queue, &mut running);
            next_due = None;
            if running.len() < MAX_IN_FLIGHT {
                next_due = queue.next_due();
            }
        }
        tokio::select! {
            biased;
            _ = closed.wait_for(|c| *c) => break,
            Some((job, outcome)) = running.next(), if !running.is_empty() => {
                finish(&inner, &mut queue, &job, outcome);
            }
            job = handovers.recv() => match job {
                Some(job) => queue.add(&inner, job),
                None => break,
            },
            changed = states.changed() => {
                if changed.is_err() {
                    break;
                }
                let connected = states.borrow_and_update().is_some_and(|s| s.is_connected());
                if connected && !queue.jobs.is_empty() {
                    tracing::debug!(jobs = queue.jobs.len(), "connected again: every pending delete is due");
                    queue.all_due_now();
                }
            }
            _ = sleep_until_opt(next_due) => start_due(&mut queue, &mut running),
        }
    }
    // Attempts still running hold the session; they are retried below.
    drop(running);
    final_flush(&inner, &mut handovers, &mut queue).await;
    // Nothing more is accepted: later handovers fail to send.
    handovers.close();
    while handovers.try_recv().is_ok() {}
    let left = queue.jobs.len();
    if left > 0 {
        tracing::warn!(
            left,
            "framework closed with background deletes still pending (ephemeral nodes go with the session)"
        );
    }
    inner.pending_cleanups.send_replace(0);
}

/// Tries every pending job once more on the session being closed, bounded
/// by [`FLUSH_LIMIT`] (or the connection timeout, if shorter). Jobs handed
/// over meanwhile (by work the close interrupted) get further rounds.
async fn final_flush(
    inner: &Inner,
    handovers: &mut mpsc::UnboundedReceiver<CleanupJob>,
    queue: &mut Queue,
) {
    let session = inner.take_closing_session();
    let limit = FLUSH_LIMIT.min(inner.config.connection_timeout);
    let deadline = Instant::now() + limit;
    let Some(session) = session.filter(|s| !s.is_terminated()) else {
        return;
    };
    let started = Instant::now();
    let mut tried = 0usize;
    for _ in 0..FLUSH_ROUNDS {
        // Let tasks woken by the close (interrupted acquires) hand over
        // their nodes before looking.
        tokio::task::yield_now().await;
        while let Ok(job) = handovers.try_recv() {
            queue.add(inner, job);
        }
        let round: Vec<CleanupJob> = queue.jobs.keys().cloned().collect();
        if round.is_empty() {
            break;
        }
        tried += round.len();
        let mut attempts = futures::stream::iter(round.into_iter().map(|job| {
            let session = &session;
            async move {
                let result = attempt_on(session, &job).await;
                (job, classify(result))
            }
        }))
        .buffer_unordered(MAX_IN_FLIGHT);
        let finished = tokio::time::timeout_at(deadline, async {
            let mut retry = Vec::new();
            while let Some((job, outcome)) = attempts.next().await {
                match outcome {
                    Outcome::Retry(err) => retry.push((job, err)),
                    other => finish(inner, queue, &job, other),
                }
            }
            retry
        })
        .await;
        match finished {
            // Failed jobs stay in the map; one try per round is the promise.
            Ok(retry) if retry.len() == queue.jobs.len() => break,
            Ok(_) => {}
            Err(_) => {
                tracing::warn!(?limit, "final background flush ran out of time");
                break;
            }
        }
    }
    tracing::debug!(tried, left = queue.jobs.len(), took = ?started.elapsed(), "final background flush done");
}

/// One try on the current session; `Ok(true)` if a node was deleted,
/// `Ok(false)` if none existed.
async fn attempt(inner: &Inner, job: &CleanupJob) -> Result<bool> {
    let session = inner.session().await?;
    attempt_on(&session, job).await
}

/// One try on `session`.
async fn attempt_on(session: &Session, job: &CleanupJob) -> Result<bool> {
    let client = &session.client;
    let target = match job {
        CleanupJob::Node { path } => path.clone(),
        CleanupJob::Protected {
            parent,
            name_prefix,
        } => {
            let children = match client.list_children(parent).await {
                Ok(children) => children,
                Err(zk::Error::NoNode) => return Ok(false),
                Err(err) => return Err(session.map_err(err)),
            };
            let Some(child) = children
                .iter()
                .find(|c| c.starts_with(name_prefix.as_str()))
            else {
                return Ok(false);
            };
            let target = path::join(parent, child);
            // The prefix is ours, but the node may not be: an ephemeral node
            // of another session under our name (someone else's, or ours
            // from a session already gone, which goes by itself) is left
            // alone.
            match client.check_stat(&target).await {
                Ok(Some(stat))
                    if stat.ephemeral_owner != 0 && stat.ephemeral_owner != session.id() =>
                {
                    tracing::warn!(node = %target, owner = format_args!("{:#x}", stat.ephemeral_owner), "protected node of another session left alone");
                    return Ok(false);
                }
                Ok(Some(_)) => target,
                Ok(None) => return Ok(false),
                Err(err) => return Err(session.map_err(err)),
            }
        }
    };
    match client.delete(&target, None).await {
        Ok(()) => Ok(true),
        Err(zk::Error::NoNode) => Ok(false),
        Err(err) => Err(session.map_err(err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let queue = Queue::new();
        let job = CleanupJob::Node {
            path: "/a/b".into(),
        };
        let mut previous_cap = Duration::ZERO;
        for failures in 1..40 {
            let delay = queue.backoff(&job, failures);
            let cap = Duration::from_millis(50)
                .saturating_mul(1u32 << (failures - 1).min(16))
                .min(Duration::from_secs(5));
            assert!(delay >= cap / 2 && delay <= cap, "{failures}: {delay:?}");
            assert!(cap >= previous_cap);
            previous_cap = cap;
        }
        // Different nodes failing together spread out.
        let spread: std::collections::HashSet<Duration> = (0..20)
            .map(|i| {
                let job = CleanupJob::Node {
                    path: format!("/a/{i}"),
                };
                queue.backoff(&job, 5)
            })
            .collect();
        assert!(spread.len() > 10, "{spread:?}");
    }

    fn node(i: usize) -> CleanupJob {
        CleanupJob::Node {
            path: format!("/locks/{i:02}"),
        }
    }

    fn protected(i: usize) -> CleanupJob {
        CleanupJob::Protected {
            parent: "/locks".into(),
            name_prefix: format!("_c_{i:02}-lock-"),
        }
    }

    /// A queue holding `jobs`, added in the given order, all due at `due`.
    fn queue_of(jobs: impl IntoIterator<Item = CleanupJob>, due: Instant) -> Queue {
        let mut queue = Queue::new();
        for job in jobs {
            queue.jobs.insert(
                job,
                Entry {
                    failures: 0,
                    due,
                    running: false,
                },
            );
        }
        queue
    }

    /// The due jobs come out in one order (the jobs' own), whatever order
    /// they were handed over in, and a limit takes the first of that order.
    #[test]
    fn due_jobs_are_taken_in_a_deterministic_order() {
        let now = Instant::now();
        let jobs: Vec<CleanupJob> = (0..24).map(node).chain((0..24).map(protected)).collect();
        let mut sorted = jobs.clone();
        sorted.sort();
        let mut reversed = jobs.clone();
        reversed.reverse();
        // An interleaving: every seventh job (mod 48), the rest of the way.
        let stepped: Vec<CleanupJob> = (0..jobs.len())
            .map(|i| jobs[i * 7 % jobs.len()].clone())
            .collect();
        for order in [jobs, reversed, stepped] {
            let mut queue = queue_of(order.clone(), now);
            let first = queue.take_due(now, 10);
            assert_eq!(first, sorted[..10], "handed over as {order:?}");
            // Those are running now: the next pick goes on from there.
            assert_eq!(queue.take_due(now, usize::MAX), sorted[10..]);
            assert!(queue.take_due(now, usize::MAX).is_empty());
        }
    }

    /// Only jobs due by `now` are taken; running ones are skipped.
    #[test]
    fn only_waiting_due_jobs_are_taken() {
        let now = Instant::now();
        let later = now + Duration::from_secs(1);
        let mut queue = queue_of((0..4).map(node), now);
        if let Some(entry) = queue.jobs.get_mut(&node(1)) {
            entry.due = later;
        }
        if let Some(entry) = queue.jobs.get_mut(&node(2)) {
            entry.running = true;
        }
        assert_eq!(queue.take_due(now, usize::MAX), [node(0), node(3)]);
        assert_eq!(queue.take_due(later, usize::MAX), [node(1)]);
    }

    /// The cleaner's seed comes from the one source: a seeded thread gets
    /// the same jitter again.
    #[test]
    fn the_cleaners_jitter_follows_the_seed() {
        let pauses = |seed: u64| {
            crate::random::seed(seed);
            let queue = Queue::new();
            (1..12)
                .map(|failures| queue.backoff(&node(failures as usize), failures))
                .collect::<Vec<_>>()
        };
        let first = pauses(5);
        assert_eq!(first, pauses(5));
        assert_ne!(first, pauses(6));
    }
}
