//! Making sure a command's process group does not outlive `zk-curator`,
//! however `zk-curator` ends (SIGKILL, the OOM killer, a crash).
//!
//! A `zk-curator` that is killed outright cannot stop its command, and its
//! session lives on for up to the session timeout: once it expires, the next
//! holder runs while the orphaned command still does. Two small helper
//! processes, both this binary run again under a hidden subcommand, close
//! that gap:
//!
//! * **the guard** (`zk-curator __guard`) is started first, in a process
//!   group of its own, so that the terminal's SIGINT/SIGTSTP, a shell's
//!   SIGHUP to its jobs and signals to zk-curator's or to the command's
//!   group never reach it. Its stdin is a pipe whose only writer is
//!   zk-curator (std makes pipes close-on-exec, so the command never holds
//!   it). zk-curator writes the command's process group id and its lease
//!   on it; the guard answers `armed` on its stdout. From then on,
//!   zk-curator beats on the pipe (a line every eighth of the lease, from a
//!   task of its own, so a busy moment elsewhere in zk-curator does not
//!   delay it), and the guard SIGKILLs the whole group on end of file on
//!   its stdin (the kernel closed the pipe: zk-curator is gone) or when no
//!   beat came for a whole lease (zk-curator is stopped, SIGSTOP or
//!   SIGTSTP, or frozen); `done` (sent once the group is gone) makes it
//!   exit quietly. It never does anything else, so it never outlives its
//!   purpose.
//!
//! **The lease** is 2/5 of the session's negotiated timeout: the silence
//! after which zk-curator's own ZooKeeper client would call its connection
//! lost, and the framework the hold `Suspended`. A stopped zk-curator also
//! stops its session's pings, and the server ends the session (letting the
//! next holder in) once it has heard nothing for the whole timeout; the
//! client pings after at most about a fifth of the timeout without
//! sending, so the server's last word from a zk-curator stopped at `t` is
//! no older than about `t - T/5`, and the session ends no earlier than
//! about `t + 4T/5`. The guard's kill comes at the latest at `t + 2T/5`
//! (the last beat is at most an eighth of the lease before `t`): the group
//! is gone well before another holder can be granted. A stop shorter than
//! the lease changes nothing.
//! * **the exec wrapper** (`zk-curator __exec --parent PID -- CMD...`) is
//!   what zk-curator starts in the command's new process group. It asks
//!   the kernel for SIGKILL when its parent dies (`PR_SET_PDEATHSIG`, kept
//!   across `exec`), checks that its parent is still zk-curator (which may
//!   have died before that), and stops itself (SIGSTOP). zk-curator waits
//!   for that stop, arms the guard with the wrapper's pid (the group's id),
//!   hands it the terminal if it has one, and only then lets it go on
//!   (SIGCONT): the wrapper checks its parent once more and `exec`s the
//!   command, which keeps the wrapper's pid, group and death signal.
//!
//! So there is no moment when any process of the group runs unguarded: a
//! wrapper whose zk-curator dies before the guard is armed is killed by the
//! kernel (or finds its parent gone and exits) without running anything.
//!
//! Why a stop and not a "go" byte on a pipe: a pipe other than stdin,
//! stdout and stderr can be handed to a child only as an inherited file
//! descriptor number, and closing it before the `exec` needs `unsafe`
//! (the crate forbids it). SIGSTOP/SIGCONT needs no descriptor; a SIGCONT
//! from elsewhere before the guard is armed is the only way around it.
//!
//! Not covered: a process that leaves the group on purpose (`setsid`,
//! `setpgid`) is not killed by the guard; a guard killed together with
//! zk-curator (e.g. SIGKILL to both) leaves the group to the death signal,
//! which reaches only the direct child; a guard stopped or frozen itself
//! (SIGSTOP to it, or to zk-curator, the guard and the command together,
//! as a stopped container or VM is) cannot act until it runs again, while
//! the rest of the tree it would stop is frozen with it. A stop of the
//! command's terminal job (Ctrl-Z) stops zk-curator too: for longer than
//! the lease, the guard ends the stopped command. The death signal and the child
//! subreaper (see [`crate::child`]) are Linux features: elsewhere the
//! wrapper is not used, the guard is armed just after the command started
//! (a zk-curator killed in that instant leaves it running), and processes
//! orphaned inside the group are not reaped by zk-curator.

use std::ffi::OsString;
use std::io::{self, BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Args;
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::connect::without_credentials;
use crate::exit::{CANNOT_EXECUTE, NOT_FOUND, OTHER};

/// The hidden subcommand that runs the guard.
pub(crate) const GUARD_COMMAND: &str = "__guard";
/// The hidden subcommand that runs the exec wrapper.
pub(crate) const EXEC_COMMAND: &str = "__exec";

/// The guard's answer once it knows the group.
const ARMED: &str = "armed";
/// Tells the guard that the group is gone.
const DONE: &str = "done";
/// Tells the guard that zk-curator still runs.
const BEAT: &str = "beat";
/// How many beats go into one lease: a few late ones cost nothing.
const BEATS_PER_LEASE: u32 = 8;
/// The guard's status when it ended the group because zk-curator fell
/// silent for a whole lease (a private code between the two processes).
const SILENCED: u8 = 3;
/// The shortest lease the guard takes: a shorter one could not be kept by a
/// process that is merely busy.
const MIN_LEASE: Duration = Duration::from_millis(100);

/// The guard's lease for a session of this (negotiated) timeout: see the
/// module's documentation.
pub(crate) fn lease_for(session_timeout: Duration) -> Duration {
    (session_timeout * 2 / 5).max(MIN_LEASE)
}
/// How long the guard may take to start and answer.
const ARM_LIMIT: Duration = Duration::from_secs(30);
/// How long the guard may take to exit once told.
const DISARM_LIMIT: Duration = Duration::from_secs(2);

/// This program, to be run again: by its path (so that `ps` shows its
/// name), or through the kernel's link to it when the file was replaced or
/// deleted since it started.
fn this_program() -> io::Result<PathBuf> {
    match std::env::current_exe() {
        Ok(path) if path.exists() => Ok(path),
        Ok(_) | Err(_) if Path::new(PROC_SELF_EXE).exists() => Ok(PathBuf::from(PROC_SELF_EXE)),
        other => other,
    }
}

/// Linux's link to the running program.
const PROC_SELF_EXE: &str = "/proc/self/exe";

/// zk-curator's side of the guard of one command's process group.
///
/// Dropping an armed guard (an early return, a panic) makes the guard
/// kill the group, as zk-curator's death does; [`Guard::disarm`] is the
/// way to let it go once the group is gone.
#[derive(Debug)]
pub(crate) struct Guard {
    process: Child,
    /// Ours until armed, then the beating task's.
    orders: Option<ChildStdin>,
    answers: BufReader<ChildStdout>,
    /// Once armed: the beating task, and its way to say `done`.
    beating: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
}

/// How the guard ended once told that the group is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Disarmed {
    /// It exited as told (or could not be waited for).
    Quietly,
    /// It had already killed the group: zk-curator gave no sign of life for
    /// a whole lease.
    AfterSilence,
}

impl Guard {
    /// Starts the guard process, not armed yet.
    pub(crate) fn spawn() -> io::Result<Guard> {
        let mut command = tokio::process::Command::new(this_program()?);
        without_credentials(command.as_std_mut());
        command
            .arg(GUARD_COMMAND)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut process = command.spawn()?;
        let (Some(orders), Some(answers)) = (process.stdin.take(), process.stdout.take()) else {
            return Err(io::Error::other("the guard has no pipes"));
        };
        Ok(Guard {
            process,
            orders: Some(orders),
            answers: BufReader::new(answers),
            beating: None,
        })
    }

    /// Gives the guard the group to kill if zk-curator dies or falls silent
    /// for `lease`, waits for its answer, and starts beating.
    pub(crate) async fn arm(&mut self, group: Pid, lease: Duration) -> io::Result<()> {
        let Some(mut orders) = self.orders.take() else {
            return Err(io::Error::other("the guard is armed already"));
        };
        let lease_ms = lease.as_millis().max(1);
        let exchange = async {
            orders
                .write_all(format!("{group} {lease_ms}\n").as_bytes())
                .await?;
            orders.flush().await?;
            let mut answer = String::new();
            self.answers.read_line(&mut answer).await?;
            if answer.trim() == ARMED {
                Ok(())
            } else {
                Err(io::Error::other(format!(
                    "unexpected answer {:?}",
                    answer.trim()
                )))
            }
        };
        tokio::time::timeout(ARM_LIMIT, exchange)
            .await
            .map_err(|_| io::Error::other("no answer"))??;
        let (done, told) = oneshot::channel();
        let every = lease / BEATS_PER_LEASE;
        self.beating = Some((done, tokio::spawn(beat(orders, every, told))));
        tracing::info!(%group, guard = ?self.process.id(), ?lease, "guard armed");
        Ok(())
    }

    /// Tells the guard that the group is gone, waits (briefly) for it to
    /// exit, and says whether it had ended the group itself.
    pub(crate) async fn disarm(mut self) -> Disarmed {
        if let Some((done, beating)) = self.beating.take() {
            // An error: the task ended on a failed write (the guard is gone).
            let _ = done.send(());
            if let Err(err) = beating.await {
                tracing::debug!(%err, "the guard's beating task failed");
            }
        }
        drop(self.orders.take());
        match tokio::time::timeout(DISARM_LIMIT, self.process.wait()).await {
            Ok(Ok(status)) if status.code() == Some(i32::from(SILENCED)) => {
                tracing::warn!("the guard had ended the command's group: zk-curator fell silent");
                Disarmed::AfterSilence
            }
            Ok(Ok(status)) => {
                tracing::info!(%status, "guard disarmed");
                Disarmed::Quietly
            }
            Ok(Err(err)) => {
                tracing::debug!(%err, "cannot wait for the guard");
                Disarmed::Quietly
            }
            Err(_) => {
                tracing::warn!("the guard did not exit when told");
                Disarmed::Quietly
            }
        }
    }
}

/// Beats on the guard's stdin every `every` until `done` says the group is
/// gone (then says `done` to the guard) or is dropped (an armed [`Guard`]
/// dropped: the pipe closes, and the guard kills the group). Ends early if
/// a write fails: the guard is gone.
async fn beat(mut orders: ChildStdin, every: Duration, mut done: oneshot::Receiver<()>) {
    let mut beats = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let line = tokio::select! {
            told = &mut done => match told {
                Ok(()) => DONE,
                Err(_) => return,
            },
            _ = beats.tick() => BEAT,
        };
        let written = async {
            orders.write_all(format!("{line}\n").as_bytes()).await?;
            orders.flush().await
        };
        if let Err(err) = written.await {
            // It died (killed by someone): it has nothing left to do.
            tracing::warn!(%err, "the guard of the command's group is gone");
            return;
        }
        if line == DONE {
            return;
        }
    }
}

/// Arguments of the hidden `__exec` subcommand.
#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// The zk-curator process this command runs for.
    #[arg(long)]
    parent: i32,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

/// The arguments that make this program run `program args` through the
/// exec wrapper, for this process.
fn exec_arguments(program: &OsString, args: &[OsString]) -> Vec<OsString> {
    let mut all = vec![
        OsString::from(EXEC_COMMAND),
        OsString::from("--parent"),
        OsString::from(std::process::id().to_string()),
        OsString::from("--"),
        program.clone(),
    ];
    all.extend(args.iter().cloned());
    all
}

/// The command that starts `program args` in a new process group: on
/// Linux through the exec wrapper, which stops before running it (see
/// [`wait_stopped`]); elsewhere directly.
pub(crate) fn command(program: &OsString, args: &[OsString]) -> io::Result<std::process::Command> {
    let mut command = if cfg!(target_os = "linux") {
        let mut command = std::process::Command::new(this_program()?);
        command.args(exec_arguments(program, args));
        command
    } else {
        let mut command = std::process::Command::new(program);
        command.args(args);
        command
    };
    without_credentials(&mut command);
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    Ok(command)
}

/// Waits until the wrapper started by [`command`] has stopped itself
/// (`Ok(true)`) or has ended without running the command (`Ok(false)`; its
/// status is left for the caller to collect).
#[cfg(target_os = "linux")]
pub(crate) async fn wait_stopped(pid: Pid) -> io::Result<bool> {
    use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
    let flags =
        WaitPidFlag::WSTOPPED | WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    let deadline = tokio::time::Instant::now() + ARM_LIMIT;
    loop {
        match waitid(Id::Pid(pid), flags) {
            Ok(WaitStatus::Stopped(..)) => return Ok(true),
            Ok(WaitStatus::StillAlive) | Err(Errno::EINTR) => {}
            Ok(_) | Err(Errno::ECHILD) => return Ok(false),
            Err(err) => return Err(io::Error::from(err)),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(io::Error::other("the command's wrapper did not start"));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Elsewhere the command is started directly: nothing to wait for.
#[cfg(not(target_os = "linux"))]
pub(crate) async fn wait_stopped(_pid: Pid) -> io::Result<bool> {
    Ok(false)
}

/// Runs the exec wrapper: see the module's documentation. Returns only when
/// the command cannot be run.
pub(crate) fn exec_main(args: ExecArgs) -> ExitCode {
    use std::os::unix::process::CommandExt as _;

    let parent = Pid::from_raw(args.parent);
    #[cfg(target_os = "linux")]
    if let Err(err) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        eprintln!("zk-curator: cannot ask for a signal on zk-curator's death: {err}");
        return ExitCode::from(OTHER);
    }
    // zk-curator died before the death signal was set: nothing may run.
    if nix::unistd::getppid() != parent {
        return ExitCode::from(OTHER);
    }
    // Until zk-curator has armed the guard.
    if let Err(err) = nix::sys::signal::raise(Signal::SIGSTOP) {
        eprintln!("zk-curator: cannot wait for the guard: {err}");
        return ExitCode::from(OTHER);
    }
    if nix::unistd::getppid() != parent {
        return ExitCode::from(OTHER);
    }
    let Some((program, rest)) = args.command.split_first() else {
        return ExitCode::from(OTHER);
    };
    let err = std::process::Command::new(program).args(rest).exec();
    eprintln!(
        "zk-curator: cannot run {}: {err}",
        program.to_string_lossy()
    );
    ExitCode::from(if err.kind() == io::ErrorKind::NotFound {
        NOT_FOUND
    } else {
        CANNOT_EXECUTE
    })
}

/// The group and lease of the guard's first order, `GROUP LEASE_MS`. The
/// group is never 0 (our own) or 1 (init's).
fn parse_arming(line: &str) -> Option<(Pid, Duration)> {
    let (group, lease) = line.trim().split_once(' ')?;
    let group = group.parse::<i32>().ok().filter(|id| *id > 1)?;
    let lease = lease.parse::<u64>().ok().filter(|ms| *ms > 0)?;
    Some((Pid::from_raw(group), Duration::from_millis(lease)))
}

/// Why the guard ends the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alarm {
    /// zk-curator's pipe closed: it is gone.
    Ended,
    /// No beat for a whole lease: zk-curator is stopped or frozen.
    Silent(Duration),
}

/// Runs the guard: see the module's documentation.
pub(crate) fn guard_main() -> ExitCode {
    let mut line = String::new();
    match io::stdin().lock().read_line(&mut line) {
        // zk-curator ended before naming a group: nothing to guard.
        Ok(0) | Err(_) => return ExitCode::SUCCESS,
        Ok(_) => {}
    }
    let Some((group, lease)) = parse_arming(&line) else {
        eprintln!("zk-curator: the guard was given no process group and lease: {line:?}");
        return ExitCode::from(OTHER);
    };
    // Lines are read on a thread of their own, so that silence can be
    // timed here.
    let (lines, heard) = mpsc::channel();
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines() {
            let end = line.is_err();
            if lines.send(line.ok()).is_err() || end {
                return;
            }
        }
        // End of file.
        let _ = lines.send(None);
    });
    {
        let mut answers = io::stdout().lock();
        // A failure means zk-curator is gone: the end of file below follows.
        let _ = writeln!(answers, "{ARMED}").and_then(|()| answers.flush());
    }
    let mut deadline = Instant::now() + lease;
    let alarm = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match heard.recv_timeout(left) {
            Ok(Some(order)) if order.trim() == DONE => return ExitCode::SUCCESS,
            Ok(Some(order)) if order.trim() == BEAT => deadline = Instant::now() + lease,
            Ok(Some(_)) => {}
            Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => break Alarm::Ended,
            Err(mpsc::RecvTimeoutError::Timeout) => break Alarm::Silent(lease),
        }
    };
    let why = match alarm {
        Alarm::Ended => "zk-curator ended while its command ran".to_owned(),
        Alarm::Silent(lease) => format!(
            "zk-curator gave no sign of life for {} (stopped or frozen) while its command ran, \
             so its session may expire and another holder start",
            humantime::format_duration(lease)
        ),
    };
    let status = match alarm {
        Alarm::Ended => ExitCode::SUCCESS,
        Alarm::Silent(_) => ExitCode::from(SILENCED),
    };
    match killpg(group, Signal::SIGKILL) {
        Ok(()) => {
            // Ignored if it fails: the terminal may be gone with zk-curator.
            let _ = writeln!(
                io::stderr(),
                "zk-curator: {why}; killed the command's process group {group}"
            );
            status
        }
        Err(Errno::ESRCH) => status,
        Err(err) => {
            let _ = writeln!(
                io::stderr(),
                "zk-curator: {why}, and its process group {group} could not be killed: {err}"
            );
            ExitCode::from(OTHER)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_is_two_fifths_of_the_session_and_never_tiny() {
        assert_eq!(
            lease_for(Duration::from_secs(4)),
            Duration::from_millis(1600)
        );
        assert_eq!(lease_for(Duration::from_secs(20)), Duration::from_secs(8));
        assert_eq!(lease_for(Duration::from_millis(10)), MIN_LEASE);
    }

    #[test]
    fn the_arming_order_names_a_group_and_a_lease() {
        assert_eq!(
            parse_arming("1234 1600\n"),
            Some((Pid::from_raw(1234), Duration::from_millis(1600)))
        );
        for bad in [
            "1234", "0 1600", "1 1600", "-5 1600", "1234 0", "1234 x", "",
        ] {
            assert_eq!(parse_arming(bad), None, "{bad:?} was taken");
        }
    }
}
