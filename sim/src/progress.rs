//! The watch over the simulation threads: each notes the seed it runs and
//! every step it ends, and a thread of its own reports a seed whose step
//! has not ended after a limit of real time (a task that never waits), and
//! ends the process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How far each simulation thread has got, for [`watch_progress`].
#[derive(Debug, Default)]
struct Progress {
    /// The seed running (`u64::MAX`: none).
    seed: AtomicU64,
    /// Steps taken (of every seed): it moves while the thread makes
    /// progress.
    steps: AtomicU64,
    /// The simulated time of the last step ended, in microseconds.
    at: AtomicU64,
}

impl Progress {
    /// One look of the watcher at this thread, `seen` being its steps at
    /// the last look and since when they have not moved: the failure to
    /// report if a seed's step has stood still for more than `limit`.
    fn stuck(
        &self,
        seen: &mut (u64, std::time::Instant),
        now: std::time::Instant,
        limit: Duration,
    ) -> Option<String> {
        let steps = self.steps.load(Ordering::SeqCst);
        let seed = self.seed.load(Ordering::SeqCst);
        if steps != seen.0 || seed == u64::MAX {
            *seen = (steps, now);
            return None;
        }
        (now.saturating_duration_since(seen.1) > limit).then(|| {
            format!(
                "seed {seed}: FAILED: stuck at {:?} of simulated time: a step has not ended in {limit:?} of real time (a task that never waits, always ready, keeps its host's clock from moving; ZK_SIM_TRACE=debug shows what ran last)",
                Duration::from_micros(self.at.load(Ordering::SeqCst)),
            )
        })
    }
}

/// Every simulation thread's progress.
static PROGRESS: Mutex<Vec<Arc<Progress>>> = Mutex::new(Vec::new());

thread_local! {
    static MINE: Arc<Progress> = {
        let progress = Arc::new(Progress::default());
        progress.seed.store(u64::MAX, Ordering::SeqCst);
        PROGRESS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(progress.clone());
        progress
    };
}

/// Watches every simulation thread from a thread of its own: a step that
/// has not ended after `limit` of real time means a task that never waits
/// (it is always ready, so the host's runtime is never idle and its clock
/// never moves: the step cannot end). Nothing on the stuck thread can
/// interrupt it, so the seed is reported and the process exits with a
/// failure.
pub fn watch_progress(limit: Duration) {
    let watcher = move || {
        let mut seen: Vec<(u64, std::time::Instant)> = Vec::new();
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let threads = PROGRESS.lock().unwrap_or_else(|p| p.into_inner()).clone();
            seen.resize(threads.len(), (0, std::time::Instant::now()));
            for (progress, seen) in threads.iter().zip(seen.iter_mut()) {
                if let Some(stuck) = progress.stuck(seen, std::time::Instant::now(), limit) {
                    println!("{stuck}");
                    std::process::exit(1);
                }
            }
        }
    };
    let _ = std::thread::Builder::new()
        .name("progress".to_owned())
        .spawn(move || {
            crate::threads::ours();
            watcher()
        });
}

/// Notes that this thread's step ended at `at` of simulated time.
pub(crate) fn note_step(at: Duration) {
    MINE.with(|p| {
        p.steps.fetch_add(1, Ordering::SeqCst);
        p.at.store(at.as_micros() as u64, Ordering::SeqCst);
    });
}

/// Notes that this thread runs `seed` now (`None`: no seed).
pub(crate) fn note_seed(seed: Option<u64>) {
    MINE.with(|p| p.seed.store(seed.unwrap_or(u64::MAX), Ordering::SeqCst));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seed whose steps stand still past the limit is reported, with its
    /// simulated time; steps that move, or no seed running, are not.
    #[test]
    fn a_step_that_stands_still_past_the_limit_is_reported() {
        let limit = Duration::from_secs(60);
        let zero = std::time::Instant::now();
        let progress = Progress::default();
        progress.seed.store(5, Ordering::SeqCst);
        progress.steps.store(10, Ordering::SeqCst);
        progress.at.store(2_820_000, Ordering::SeqCst);
        let mut seen = (0, zero);
        assert_eq!(progress.stuck(&mut seen, zero, limit), None, "steps moved");
        assert_eq!(seen, (10, zero));
        assert_eq!(
            progress.stuck(&mut seen, zero + limit, limit),
            None,
            "not past"
        );
        let stuck = progress
            .stuck(&mut seen, zero + limit + Duration::from_secs(1), limit)
            .expect("reported");
        assert!(
            stuck.starts_with("seed 5: FAILED: stuck at 2.82s"),
            "{stuck}"
        );
        progress.steps.store(11, Ordering::SeqCst);
        let later = zero + 3 * limit;
        assert_eq!(progress.stuck(&mut seen, later, limit), None, "moved again");
        progress.seed.store(u64::MAX, Ordering::SeqCst);
        assert_eq!(
            progress.stuck(&mut seen, later + 2 * limit, limit),
            None,
            "no seed running"
        );
    }
}
