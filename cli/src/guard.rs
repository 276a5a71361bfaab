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
//!   it). zk-curator writes the command's process group id on it; the guard
//!   answers `armed` on its stdout. From then on, end of file on its stdin
//!   (the kernel closed the pipe: zk-curator is gone) makes it SIGKILL the
//!   whole group; `done` (sent once the group is gone) makes it exit
//!   quietly. It never does anything else, so it never outlives its
//!   purpose.
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
//! which reaches only the direct child. The death signal and the child
//! subreaper (see [`crate::child`]) are Linux features: elsewhere the
//! wrapper is not used, the guard is armed just after the command started
//! (a zk-curator killed in that instant leaves it running), and processes
//! orphaned inside the group are not reaped by zk-curator.

use std::ffi::OsString;
use std::io::{self, BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use clap::Args;
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

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
    orders: ChildStdin,
    answers: BufReader<ChildStdout>,
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
            orders,
            answers: BufReader::new(answers),
        })
    }

    /// Gives the guard the group to kill if zk-curator dies, and waits for
    /// its answer.
    pub(crate) async fn arm(&mut self, group: Pid) -> io::Result<()> {
        let exchange = async {
            self.orders
                .write_all(format!("{group}\n").as_bytes())
                .await?;
            self.orders.flush().await?;
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
        tracing::info!(%group, guard = ?self.process.id(), "guard armed");
        Ok(())
    }

    /// Tells the guard that the group is gone and waits (briefly) for it to
    /// exit.
    pub(crate) async fn disarm(mut self) {
        let told = async {
            self.orders
                .write_all(format!("{DONE}\n").as_bytes())
                .await?;
            self.orders.flush().await
        };
        if let Err(err) = told.await {
            // It died (killed by someone): it has nothing left to do.
            tracing::warn!(%err, "the guard of the command's group was already gone");
        }
        drop(self.orders);
        match tokio::time::timeout(DISARM_LIMIT, self.process.wait()).await {
            Ok(Ok(status)) => tracing::info!(%status, "guard disarmed"),
            Ok(Err(err)) => tracing::debug!(%err, "cannot wait for the guard"),
            Err(_) => tracing::warn!("the guard did not exit when told"),
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

/// Runs the guard: see the module's documentation.
pub(crate) fn guard_main() -> ExitCode {
    let mut orders = io::stdin().lock();
    let mut line = String::new();
    match orders.read_line(&mut line) {
        // zk-curator ended before naming a group: nothing to guard.
        Ok(0) | Err(_) => return ExitCode::SUCCESS,
        Ok(_) => {}
    }
    // Never 0 (our own group) or 1 (init's).
    let Some(group) = line
        .trim()
        .parse::<i32>()
        .ok()
        .filter(|id| *id > 1)
        .map(Pid::from_raw)
    else {
        eprintln!("zk-curator: the guard was given no process group: {line:?}");
        return ExitCode::from(OTHER);
    };
    {
        let mut answers = io::stdout().lock();
        // A failure means zk-curator is gone: the end of file below follows.
        let _ = writeln!(answers, "{ARMED}").and_then(|()| answers.flush());
    }
    loop {
        line.clear();
        match orders.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.trim() == DONE => return ExitCode::SUCCESS,
            Ok(_) => {}
        }
    }
    match killpg(group, Signal::SIGKILL) {
        Ok(()) => {
            // Ignored if it fails: the terminal may be gone with zk-curator.
            let _ = writeln!(
                io::stderr(),
                "zk-curator: zk-curator ended while its command ran; killed the command's \
                 process group {group}"
            );
            ExitCode::SUCCESS
        }
        Err(Errno::ESRCH) => ExitCode::SUCCESS,
        Err(err) => {
            let _ = writeln!(
                io::stderr(),
                "zk-curator: zk-curator ended while its command ran, and its process group \
                 {group} could not be killed: {err}"
            );
            ExitCode::from(OTHER)
        }
    }
}
