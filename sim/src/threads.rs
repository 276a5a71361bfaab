//! The guard against real OS threads: a simulation runs every host on the
//! thread of its seed, and a thread of the OS started by a seed (a tokio
//! blocking pool's, a library's own) runs on the OS's schedule and clock,
//! so its seed no longer replays. The simulator's own threads (the main
//! one, each seed thread, the progress watcher) say so as they start
//! ([`ours`]); after each seed, any other thread of the process not seen
//! before ([`foreign`]) fails the seed that just ended. Read from
//! `/proc/self/task` (Linux; elsewhere nothing is checked). A thread that
//! ends before its seed does goes unseen (tokio's blocking threads linger
//! for ten seconds). With several seed threads, a thread started by one
//! seed may be blamed on another ending at the same time: the batch fails
//! either way.

use std::collections::BTreeSet;
use std::sync::Mutex;

/// The simulator's own threads, by id.
static OURS: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());
/// Foreign threads already reported (each fails one seed only).
static REPORTED: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());

/// The calling thread's id in the OS, if it can be read.
fn current() -> Option<u64> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// The ids of the process's threads now, if they can be read.
fn all() -> Option<BTreeSet<u64>> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        tasks
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
    )
}

/// Says that the calling thread is one of the simulator's own.
pub fn ours() {
    if let Some(id) = current() {
        OURS.lock().unwrap_or_else(|p| p.into_inner()).insert(id);
    }
}

/// The threads of the process that are not the simulator's own and were
/// not reported before, each as its id and name; reported from now on.
pub fn foreign() -> Vec<String> {
    let Some(now) = all() else {
        return Vec::new();
    };
    let ours = OURS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut reported = REPORTED.lock().unwrap_or_else(|p| p.into_inner());
    now.into_iter()
        .filter(|id| !ours.contains(id) && reported.insert(*id))
        .map(|id| {
            let name =
                std::fs::read_to_string(format!("/proc/self/task/{id}/comm")).unwrap_or_default();
            format!("{id} ({})", name.trim())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread started beside the simulator's own is found once, by its
    /// name, while it runs; the simulator's own are not.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_thread_of_the_os_is_found() {
        ours();
        // Whatever else the test harness runs is reported here, not below.
        let _ = foreign();
        let (started, stop) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|scope| {
            let _ = std::thread::Builder::new()
                .name("not-simulated".to_owned())
                .spawn_scoped(scope, || {
                    started.wait();
                    stop.wait();
                });
            started.wait();
            let found = foreign();
            assert!(
                found.iter().any(|t| t.ends_with("(not-simulated)")),
                "{found:?}"
            );
            assert!(
                !foreign().iter().any(|t| t.ends_with("(not-simulated)")),
                "reported once"
            );
            stop.wait();
        });
        let me = current().expect("a thread id");
        assert!(!foreign().iter().any(|t| t.starts_with(&format!("{me} "))));
    }
}
