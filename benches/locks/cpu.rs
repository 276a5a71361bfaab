//! CPU time between two readings, from `/proc` (Linux): the server's
//! process, this process, the threads of this process with one name (a
//! party on a runtime of its own, `apart.rs`), and how busy the machine's
//! cores were. A run's throughput can move by more than a goal's few
//! percent from rep to rep on a shared machine; the CPU a party spends per
//! hand-off moves far less, and says what it costs the others when the
//! cores are busy.

/// The kernel's clock ticks per second in `/proc` (`USER_HZ`, 100 on
/// Linux whatever the kernel's own tick rate).
const TICKS_PER_S: f64 = 100.0;

/// One reading.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuReading {
    /// CPU seconds of the server's process.
    server: Option<f64>,
    /// CPU seconds of this process.
    process: Option<f64>,
    /// CPU seconds of this process's threads named as asked.
    named: Option<f64>,
    /// The machine's busy and total ticks, over every core.
    machine: Option<(u64, u64)>,
}

/// CPU spent between two readings, per hand-off.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuPer {
    /// Microseconds of CPU per hand-off: the server's, this process's, and
    /// the named threads'.
    pub(crate) server_us: Option<f64>,
    pub(crate) process_us: Option<f64>,
    pub(crate) named_us: Option<f64>,
    /// The share of the machine's cores that were busy (0 to 1).
    pub(crate) busy: Option<f64>,
}

impl CpuReading {
    /// Reads now: the process `server` (if any), this one, and its threads
    /// named `thread` (if any).
    pub(crate) fn now(server: Option<u32>, thread: Option<&str>) -> CpuReading {
        CpuReading {
            server: server.and_then(|pid| process_seconds(&format!("/proc/{pid}/stat"))),
            process: process_seconds("/proc/self/stat"),
            named: thread.and_then(threads_seconds),
            machine: machine_ticks(),
        }
    }

    /// What was spent from `self` to `after`, per one of `handoffs`.
    pub(crate) fn per(self, after: CpuReading, handoffs: f64) -> CpuPer {
        let per = |a: Option<f64>, b: Option<f64>| {
            a.zip(b)
                .filter(|_| handoffs > 0.0)
                .map(|(a, b)| (b - a).max(0.0) * 1e6 / handoffs)
        };
        CpuPer {
            server_us: per(self.server, after.server),
            process_us: per(self.process, after.process),
            named_us: per(self.named, after.named),
            busy: self.machine.zip(after.machine).and_then(|(a, b)| {
                let total = b.1.saturating_sub(a.1);
                (total > 0).then(|| b.0.saturating_sub(a.0) as f64 / total as f64)
            }),
        }
    }
}

/// User and system time of a `/proc/.../stat` file, in seconds: fields
/// 14 and 15, counted after the name (which may hold spaces, in
/// parentheses).
fn process_seconds(path: &str) -> Option<f64> {
    stat_of(&std::fs::read_to_string(path).ok()?).map(|(_, ticks)| ticks as f64 / TICKS_PER_S)
}

/// A stat line's name and user + system ticks.
fn stat_of(stat: &str) -> Option<(&str, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?;
    let mut fields = stat.get(close + 1..)?.split_whitespace();
    // After the name: state is field 3, utime 14, stime 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((name, utime + stime))
}

/// The CPU seconds of this process's threads named `name`.
fn threads_seconds(name: &str) -> Option<f64> {
    let mut ticks = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue; // a thread that ended meanwhile
        };
        if let Some((thread, t)) = stat_of(&stat) {
            if thread == name {
                ticks += t;
            }
        }
    }
    Some(ticks as f64 / TICKS_PER_S)
}

/// The machine's busy and total ticks over every core (`/proc/stat`'s
/// first line: idle and iowait are not busy).
fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect();
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4)?;
    Some((total - idle, total))
}
