//! Running a command under a hold: in a process group of its own, watched
//! until the whole group is gone, and stopped as a whole.
//!
//! Commands run under a lock are usually shell scripts, whose work is done
//! by grandchildren. Stopping only the direct child would leave those
//! running while the next holder starts, so:
//!
//! * the command starts in a new process group (its pid is the group's id),
//!   and every process it starts stays in that group unless it leaves on
//!   purpose (`setsid`, `setpgid`; such a process is not followed);
//! * every signal — a stop on loss or revocation, SIGKILL after the grace
//!   period, SIGINT/SIGTERM/SIGHUP passed on — goes to the whole group;
//! * [`run_under`] returns only once no process of the group is left, even
//!   when the direct child exited normally first: until then the caller
//!   keeps its hold and its watch on it (the safe choice, as `flock(1)`
//!   keeps the lock while a descendant holds the lock file open);
//! * on Linux this process is a child subreaper, so members whose parent
//!   died are reparented to it and reaped here (a zombie would keep the
//!   group alive);
//! * a guard process kills the whole group if this process dies without
//!   stopping it (SIGKILL, a crash), and the command starts only once the
//!   guard is armed ([`crate::guard`]);
//! * from a terminal's foreground, the group gets the terminal, and its
//!   stops (Ctrl-Z) are followed ([`crate::terminal`]).
//!
//! [`run_command`] is the one way to run a command under a hold: `lock`
//! runs it under a lock's hold, `elect` under a leader's term; how it ended
//! is an [`Ending`], and [`exit_code`] turns that into zk-curator's exit.

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;
use std::time::Duration;

use futures::future::BoxFuture;
use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::Notify;
use zk_curator::{Hold, LockLoss};

use crate::bounds::{BoundArgs, ProgressFile, PROGRESS_ENV};
use crate::exit::{shown, Failure, BOUND_PASSED, CANNOT_EXECUTE, LOST, NOT_FOUND, OTHER, REVOKED};
use crate::guard::{self, Disarmed, Guard};
use crate::terminal::{JobControl, JobEvent, Terminal};

/// The environment variable carrying the hold's fencing token.
pub(crate) const TOKEN_ENV: &str = "ZK_CURATOR_FENCING_TOKEN";
/// The environment variable carrying the lock node's path.
pub(crate) const NODE_ENV: &str = "ZK_CURATOR_LOCK_NODE";

/// How often the group is looked at while waiting for it to end.
const POLL: Duration = Duration::from_millis(20);
/// After SIGKILL, how long before saying that the group is slow to go.
const KILL_NOTICE: Duration = Duration::from_secs(5);

/// The signals taken over while a command runs, passed on to its group.
#[derive(Debug)]
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers (from then on these signals no longer end the
    /// process by themselves).
    pub(crate) fn new() -> Result<Self, Failure> {
        let install = |kind: SignalKind| {
            signal(kind).map_err(|err| Failure::new(OTHER, format!("cannot handle signals: {err}")))
        };
        Ok(Signals {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
            hangup: install(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    pub(crate) async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
        }
    }
}

/// The exit code a shell would give for `status`.
pub(crate) fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(OTHER),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(OTHER),
        (None, None) => OTHER,
    }
}

/// Makes this process the reaper of its orphaned descendants (Linux), so
/// that a group member whose parent died is reaped here. Best effort.
fn become_subreaper() {
    #[cfg(target_os = "linux")]
    if let Err(err) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::debug!(%err, "cannot become a child subreaper");
    }
}

/// A command running in a process group of its own.
#[derive(Debug)]
pub(crate) struct Group {
    child: tokio::process::Child,
    pgid: Pid,
    /// The direct child's status, once it has been reaped.
    status: Option<ExitStatus>,
    /// Kills the group if zk-curator dies; dropped armed (an error), it
    /// does so at once.
    guard: Option<Guard>,
}

impl Group {
    /// Starts `program args` with `env` added, in a new process group,
    /// guarded with `lease` (see [`crate::guard`]) and, if zk-curator is
    /// the terminal's foreground, in the foreground.
    ///
    /// # Errors
    /// [`NOT_FOUND`] or [`CANNOT_EXECUTE`] (the shell's codes) when it
    /// cannot be started; [`OTHER`] when it cannot be guarded (it is then
    /// not run).
    pub(crate) async fn spawn(
        program: &OsString,
        args: &[OsString],
        env: &[(&str, String)],
        lease: Duration,
    ) -> Result<(Group, Option<JobControl>), Failure> {
        become_subreaper();
        let unguarded = |err: io::Error| {
            Failure::new(
                OTHER,
                format!("cannot guard the command (it was not run): {err}"),
            )
        };
        let mut guard = Guard::spawn().map_err(unguarded)?;
        let mut command = guard::command(program, args).map_err(unguarded)?;
        for (key, value) in env {
            command.env(key, value);
        }
        // The death signal the wrapper asks for fires when the *thread*
        // that started it ends: this runs on the thread driving `main`'s
        // future (or a runtime worker), which live as long as the process;
        // never start the command from a `spawn_blocking` thread.
        let spawned = tokio::process::Command::from(command).spawn();
        let mut child = spawned.map_err(|err| {
            let code = if err.kind() == io::ErrorKind::NotFound {
                NOT_FOUND
            } else {
                CANNOT_EXECUTE
            };
            Failure::new(
                code,
                format!("cannot run {}: {err}", program.to_string_lossy()),
            )
        })?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| Failure::new(OTHER, "the command has no pid"))?;
        let pgid = Pid::from_raw(pid);
        let armed = async {
            let stopped = guard::wait_stopped(pgid).await?;
            guard.arm(pgid, lease).await?;
            io::Result::Ok(stopped)
        };
        let stopped = match armed.await {
            Ok(stopped) => stopped,
            Err(err) => {
                // Stopped before the command: it never runs.
                if let Err(err) = killpg(pgid, Signal::SIGKILL) {
                    tracing::debug!(%err, "cannot kill the unguarded wrapper");
                }
                if let Err(err) = child.wait().await {
                    tracing::debug!(%err, "cannot reap the unguarded wrapper");
                }
                return Err(unguarded(err));
            }
        };
        let jobs = Terminal::if_foreground().and_then(|terminal| {
            terminal.give_to(pgid);
            JobControl::new(terminal)
                .map_err(|err| tracing::warn!(%err, "cannot follow the command's stops"))
                .ok()
        });
        if stopped {
            tracing::debug!(group = %pgid, "the guard is armed; starting the command");
            if let Err(err) = kill(pgid, Signal::SIGCONT) {
                tracing::warn!(%err, "cannot let the command start");
            }
        }
        let group = Group {
            child,
            pgid,
            status: None,
            guard: Some(guard),
        };
        Ok((group, jobs))
    }

    /// Once no process of the group is left: lets the guard go and takes
    /// the terminal back (from `jobs`). Says whether the guard had ended
    /// the group itself (zk-curator fell silent for its lease).
    async fn finish(&mut self, jobs: Option<&JobControl>) -> Disarmed {
        if let Some(jobs) = jobs {
            jobs.terminal().take_back_from(self.pgid);
        }
        match self.guard.take() {
            Some(guard) => guard.disarm().await,
            None => Disarmed::Quietly,
        }
    }

    /// Sends `signal` to every process of the group.
    pub(crate) fn signal(&self, signal: Signal) {
        match killpg(self.pgid, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(err) => tracing::debug!(%err, ?signal, "could not signal the command's group"),
        }
    }

    /// Waits for the direct child's end and returns its status.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn wait_command(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = self.child.wait().await?;
        self.status = Some(status);
        Ok(status)
    }

    /// Whether no process of the group is left. Reaps the direct child and
    /// the members reparented to this process that have ended.
    fn is_gone(&mut self) -> io::Result<bool> {
        if self.status.is_none() {
            match self.child.try_wait()? {
                Some(status) => self.status = Some(status),
                None => return Ok(false),
            }
        }
        // Only now: before the direct child is reaped, this could take its
        // status away from the runtime's own wait.
        let group = Pid::from_raw(-self.pgid.as_raw());
        loop {
            match waitpid(group, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(err) => {
                    tracing::debug!(%err, "cannot reap the command's group");
                    break;
                }
            }
        }
        match killpg(self.pgid, None) {
            Err(Errno::ESRCH) => Ok(true),
            // EPERM: a member runs as another user, but it exists.
            Ok(()) | Err(Errno::EPERM) => Ok(false),
            Err(err) => Err(io::Error::from(err)),
        }
    }

    /// With `command`, waits for the direct child's end and returns its
    /// status; without, waits until no process of the group is left and
    /// returns `None`.
    ///
    /// # Cancel safety
    /// Cancel safe.
    async fn wait_end(&mut self, command: bool) -> io::Result<Option<ExitStatus>> {
        if command {
            return self.wait_command().await.map(Some);
        }
        self.wait_gone().await.map(|()| None)
    }

    /// Waits until no process of the group is left.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn wait_gone(&mut self) -> io::Result<()> {
        while !self.is_gone()? {
            tokio::time::sleep(POLL).await;
        }
        Ok(())
    }

    /// Stops the whole group: SIGTERM (and SIGCONT, so that stopped members
    /// get it), then SIGKILL if any member is left after `grace`; returns
    /// once none is left.
    pub(crate) async fn stop(&mut self, grace: Duration) -> io::Result<()> {
        self.signal(Signal::SIGTERM);
        self.signal(Signal::SIGCONT);
        if tokio::time::timeout(grace, self.wait_gone()).await.is_ok() {
            return Ok(());
        }
        eprintln!(
            "zk-curator: the command did not stop within {}; killing its process group",
            humantime::format_duration(grace)
        );
        self.signal(Signal::SIGKILL);
        if tokio::time::timeout(KILL_NOTICE, self.wait_gone())
            .await
            .is_ok()
        {
            return Ok(());
        }
        eprintln!(
            "zk-curator: the command's process group has not ended {} after SIGKILL; still waiting",
            humantime::format_duration(KILL_NOTICE)
        );
        self.wait_gone().await
    }
}

/// The time limits of a command run under a hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// After a stop's SIGTERM, how long before SIGKILL.
    pub(crate) kill_after: Duration,
    /// How long zk-curator may give no sign of life before its guard kills
    /// the group ([`crate::guard::lease_for`]).
    pub(crate) lease: Duration,
}

/// How a command run under a hold ended.
#[derive(Debug)]
pub(crate) enum Ending {
    /// The command exited with this status, and its whole group is gone.
    Exited(ExitStatus),
    /// The hold was lost; the whole group was stopped. (When the guard
    /// killed the group because zk-curator gave no sign of life for its
    /// lease, it was stopped or frozen, so the hold may have gone to
    /// another process meanwhile: that is a loss too.)
    Lost(LockLoss),
    /// A revocation was asked for; the whole group was stopped.
    Revoked,
    /// A bound of the command passed (`--max-hold`, `--max-silence`),
    /// said in words; the whole group was stopped.
    BoundPassed(String),
}

/// The exit code of a command run under a hold (`what`, e.g. "the lock
/// /a/_c_...-lock-0000000001", in messages): the command's own status when
/// it exited, [`LOST`] or [`REVOKED`] when it was stopped.
pub(crate) fn exit_code(ending: Result<Ending, Failure>, what: &str) -> Result<u8, Failure> {
    match ending? {
        Ending::Exited(status) => Ok(status_code(status)),
        Ending::Lost(reason) => Err(Failure::new(
            LOST,
            format!("lost {what} ({reason}); the command was stopped"),
        )),
        Ending::BoundPassed(said) => Err(Failure::new(
            BOUND_PASSED,
            format!("{said}; the command was stopped and {what} given back"),
        )),
        Ending::Revoked => Err(Failure::new(
            REVOKED,
            format!("{what} was revoked; the command was stopped"),
        )),
    }
}

/// Whether the group's stop is being followed, and how far.
enum Pause {
    /// Running (or stopped without job control: nothing is done then).
    None,
    /// zk-curator was stopped with the group and continued; the hold is
    /// being confirmed before the group is continued.
    Confirming(BoxFuture<'static, bool>),
}

/// Runs `program args` (with `env`) in a group of its own, guarded with
/// `limits.lease` (see [`crate::guard`]), and watches it until the whole
/// group is gone.
///
/// When `stop` completes (the hold was lost, revoked, ...), the group gets
/// SIGTERM, then SIGKILL after `limits.kill_after`, and the ending it gave is
/// returned once no member is left. When the guard killed the group
/// (zk-curator gave no sign of life for its lease), `silenced` says how it
/// ended. Signals from `signals` are passed on to the
/// group. If the direct child exits while members of its group still run,
/// all of this goes on until they are gone, and its status is returned
/// then. When the group has zk-curator's terminal and stops (Ctrl-Z),
/// zk-curator stops too; once continued, it continues the group only after
/// `confirm` has said that the hold is still good (see
/// [`JobControl`]).
///
/// # Errors
/// A failure when the command cannot be started or waited for.
#[allow(clippy::too_many_arguments)]
async fn run_under(
    program: &OsString,
    args: &[OsString],
    env: &[(&str, String)],
    stop: impl Future<Output = Ending>,
    confirm: impl Fn() -> BoxFuture<'static, bool>,
    silenced: impl FnOnce() -> Ending,
    signals: &mut Signals,
    limits: Limits,
) -> Result<Ending, Failure> {
    let waited =
        |err: io::Error| Failure::new(OTHER, format!("cannot wait for the command: {err}"));
    let (mut group, mut jobs) = Group::spawn(program, args, env, limits.lease).await?;
    let pgid = group.pgid;
    tokio::pin!(stop);
    let mut pause = Pause::None;
    let mut status = None;
    loop {
        let following = jobs.is_some();
        let (paused, confirming) = match &mut pause {
            Pause::None => (false, None),
            Pause::Confirming(confirmation) => (true, Some(confirmation)),
        };
        tokio::select! {
            ended = group.wait_end(status.is_none()) => {
                let exited = match (ended.map_err(waited)?, status) {
                    (Some(exited), _) | (None, Some(exited)) => exited,
                    (None, None) => continue,
                };
                if status.is_none() {
                    status = Some(exited);
                    if !group.is_gone().map_err(waited)? {
                        eprintln!(
                            "zk-curator: the command exited ({}) but processes it started \
                             still run in its process group; holding on until they end",
                            status_code(exited)
                        );
                        continue;
                    }
                }
                return Ok(match group.finish(jobs.as_ref()).await {
                    Disarmed::AfterSilence => silenced(),
                    Disarmed::Quietly => Ending::Exited(exited),
                });
            }
            ending = &mut stop => {
                group.stop(limits.kill_after).await.map_err(waited)?;
                group.finish(jobs.as_ref()).await;
                return Ok(ending);
            }
            signal = signals.recv() => {
                tracing::info!(%signal, "passing the signal on to the command's group");
                group.signal(signal);
            }
            event = job_event(&mut jobs, pgid), if following && !paused => {
                let Some(jobs) = &jobs else { continue };
                match event {
                    JobEvent::Stopped => {
                        jobs.stop_own_job(pgid);
                        pause = Pause::Confirming(confirm());
                    }
                    JobEvent::Foreground => jobs.follow(pgid),
                }
            }
            good = async { confirming?.await.then_some(()) }, if paused => {
                if good.is_some() {
                    tracing::info!(group = %pgid, "the hold is still good; continuing the command");
                    if let Some(jobs) = &jobs {
                        jobs.follow(pgid);
                    }
                    group.signal(Signal::SIGCONT);
                    pause = Pause::None;
                } else {
                    // The loss, if it is one, stops the group through
                    // `stop`; until then, ask again now and then.
                    tracing::warn!("the hold could not be confirmed; the command stays stopped");
                    let again = confirm();
                    pause = Pause::Confirming(Box::pin(async move {
                        tokio::time::sleep(CONFIRM_AGAIN).await;
                        again.await
                    }));
                }
            }
        }
    }
}

/// Runs `command` (program and arguments) in a process group of its own
/// while `hold` lasts, with the fencing token and the node path in its
/// environment, and watches it, the hold, `revoked` (if revocable) and
/// signals until the whole group has ended (see [`run_under`]). `what`
/// names the hold in messages.
pub(crate) async fn run_command(
    command: &[OsString],
    hold: &Hold,
    what: &str,
    revoked: Option<&Notify>,
    signals: &mut Signals,
    kill_after: Duration,
    bounds: &BoundArgs,
) -> Result<Ending, Failure> {
    let Some((program, rest)) = command.split_first() else {
        return Err(Failure::usage("no command given after --"));
    };
    let progress =
        match bounds.max_silence {
            Some(_) => Some(ProgressFile::make().map_err(|err| {
                Failure::new(OTHER, format!("cannot make the progress file: {err}"))
            })?),
            None => None,
        };
    let mut env = vec![
        (TOKEN_ENV, hold.fencing_token().to_string()),
        (NODE_ENV, hold.node().path().to_owned()),
    ];
    if let Some(progress) = &progress {
        env.push((PROGRESS_ENV, progress.path().display().to_string()));
    }
    let bound = async {
        if bounds.is_bounded() {
            crate::bounds::passed(bounds, progress.as_ref()).await
        } else {
            std::future::pending().await
        }
    };
    let revocation = async {
        match revoked {
            Some(revoked) => revoked.notified().await,
            None => std::future::pending().await,
        }
    };
    let stop = async {
        tokio::select! {
            reason = hold.lost() => {
                eprintln!("zk-curator: lost {what} ({reason}); stopping the command");
                Ending::Lost(reason)
            }
            () = revocation => {
                eprintln!(
                    "zk-curator: revocation of {} requested; stopping the command",
                    shown(hold.node().path())
                );
                Ending::Revoked
            }
            bound = bound => {
                let said = bounds.describe(bound);
                eprintln!("zk-curator: {said}; stopping the command");
                Ending::BoundPassed(said)
            }
        }
    };
    // After a stop (Ctrl-Z), the group is continued only once a fenced
    // check on ZooKeeper has found the hold still there: the session's
    // pings stopped with zk-curator.
    let confirm = || -> BoxFuture<'static, bool> {
        let fence = hold.fence();
        Box::pin(async move {
            let checked = match &fence {
                Ok(fence) => fence.multi().commit().await.map(drop),
                Err(err) => Err(err.clone()),
            };
            checked
                .map_err(|err| tracing::warn!(%err, "the hold could not be confirmed"))
                .is_ok()
        })
    };
    // The guard's lease follows the session the hold lives on; without
    // one, the hold is gone already and nothing is run.
    let Some(session) = hold.session() else {
        let reason = hold.check().err().unwrap_or(LockLoss::SessionReplaced);
        return Ok(Ending::Lost(reason));
    };
    let lease = guard::lease_for(session.client().session_timeout());
    drop(session);
    // zk-curator was stopped for longer than the lease: the session may
    // have expired meanwhile, so the hold counts as lost.
    let silenced = || Ending::Lost(hold.mark_lost(LockLoss::Stale));
    run_under(
        program,
        rest,
        &env,
        stop,
        confirm,
        silenced,
        signals,
        Limits { kill_after, lease },
    )
    .await
}

/// How long to wait before confirming the hold again.
const CONFIRM_AGAIN: Duration = Duration::from_secs(1);

/// [`JobControl::next_event`], if there is job control.
async fn job_event(jobs: &mut Option<JobControl>, group: Pid) -> JobEvent {
    match jobs {
        Some(jobs) => jobs.next_event(group).await,
        None => std::future::pending().await,
    }
}
