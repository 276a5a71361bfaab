//! The controlling terminal: its foreground handed to the command's process
//! group while it runs, and its job control (Ctrl-Z, `fg`, `bg`) followed,
//! as a shell does for a job.
//!
//! Only when zk-curator itself is the terminal's foreground group when the
//! command starts (run from an interactive shell, not with `&`); without a
//! controlling terminal (CI, services, pipes from a daemon) nothing here
//! does anything. The command's group then gets the terminal's signals
//! itself (Ctrl-C, Ctrl-\\, Ctrl-Z) and may read the terminal; zk-curator
//! takes the terminal back once the group is gone. See [`JobControl`] for
//! Ctrl-Z.
//!
//! Changing the foreground from a background group raises SIGTTOU, which
//! would stop zk-curator: every change is made with SIGTTOU blocked on the
//! calling thread, and the thread's mask is restored right after (children
//! are started with an empty mask by std anyway).

use std::fs::File;
use std::io;
use std::time::Duration;

use nix::sys::signal::{killpg, pthread_sigmask, SigSet, SigmaskHow, Signal};
use nix::unistd::{getpgrp, tcgetpgrp, tcsetpgrp, Pid};

/// The controlling terminal of a zk-curator that was its foreground.
#[derive(Debug)]
pub(crate) struct Terminal {
    tty: File,
    /// zk-curator's own process group.
    own: Pid,
}

impl Terminal {
    /// The controlling terminal, if zk-curator has one and is its
    /// foreground group now.
    pub(crate) fn if_foreground() -> Option<Terminal> {
        let tty = File::options()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .ok()?;
        let own = getpgrp();
        match tcgetpgrp(&tty) {
            Ok(foreground) if foreground == own => Some(Terminal { tty, own }),
            _ => None,
        }
    }

    /// Whether `group` is the terminal's foreground group.
    pub(crate) fn is_foreground(&self, group: Pid) -> bool {
        tcgetpgrp(&self.tty).is_ok_and(|foreground| foreground == group)
    }

    /// Makes `group` the terminal's foreground group.
    pub(crate) fn give_to(&self, group: Pid) {
        match self.set_foreground(group) {
            Ok(()) => tracing::info!(%group, "the terminal's foreground handed to the command"),
            Err(err) => tracing::debug!(%err, %group, "cannot hand the terminal over"),
        }
    }

    /// Takes the terminal back from `group` (only if `group` still has it:
    /// after a `bg`, the shell has it, and keeps it).
    pub(crate) fn take_back_from(&self, group: Pid) {
        if !self.is_foreground(group) {
            return;
        }
        match self.set_foreground(self.own) {
            Ok(()) => tracing::info!(%group, "the terminal's foreground taken back"),
            Err(err) => tracing::debug!(%err, "cannot take the terminal back"),
        }
    }

    fn set_foreground(&self, group: Pid) -> nix::Result<()> {
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let mut previous = SigSet::empty();
        pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut previous))?;
        let set = tcsetpgrp(&self.tty, group);
        let restored = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&previous), None);
        set.and(restored)
    }
}

/// How often [`JobControl::next_event`] looks whether zk-curator's job got
/// the terminal.
const FOREGROUND_POLL: Duration = Duration::from_millis(200);

/// What [`JobControl::next_event`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobEvent {
    /// The command's group stopped.
    Stopped,
    /// zk-curator's job has the terminal, not the command's group.
    Foreground,
}

/// Job control for a command whose group has zk-curator's terminal, so
/// that Ctrl-Z, `fg` and `bg` work on `zk-curator lock ... -- CMD` as on
/// CMD alone:
///
/// * when a process of the command's group that is zk-curator's child
///   stops (Ctrl-Z, or reading the terminal from the background),
///   zk-curator takes the terminal back and stops its own job (SIGTSTP to
///   its own process group), so the shell sees the job stopped;
/// * once continued, it makes sure its hold is still good (the session
///   pings stopped with it: a stop longer than the session timeout loses
///   the hold), hands the terminal to the command's group again if the job
///   is in the foreground (`fg`, not `bg`), and continues the group; a
///   hold found lost meanwhile stops the group instead, as any loss does;
/// * whenever zk-curator's job has the terminal while the command runs
///   (`fg` after `bg`: seen on SIGCONT, or within [`FOREGROUND_POLL`] as
///   `fg` sends no signal to a running job), it is handed to the command's
///   group.
///
/// In that last window, or if SIGTSTP is sent to zk-curator itself, only
/// zk-curator stops, and the command runs on while its session is not
/// kept alive: the hold can expire under it (as before job control was
/// followed).
#[derive(Debug)]
pub(crate) struct JobControl {
    terminal: Terminal,
    /// SIGCHLD: a child stopped (or ended).
    children: tokio::signal::unix::Signal,
    /// SIGCONT: zk-curator was continued.
    continued: tokio::signal::unix::Signal,
}

impl JobControl {
    /// Job control over `terminal`, listening for the signals it needs.
    pub(crate) fn new(terminal: Terminal) -> io::Result<JobControl> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(JobControl {
            terminal,
            children: signal(SignalKind::child())?,
            continued: signal(SignalKind::from_raw(Signal::SIGCONT as i32))?,
        })
    }

    /// The terminal.
    pub(crate) fn terminal(&self) -> &Terminal {
        &self.terminal
    }

    /// Completes on the next event: a process of `group` that is
    /// zk-curator's child (the command, or a member reparented to it) is
    /// stopped; zk-curator's job has the terminal (after `fg`: looked at on
    /// SIGCONT and every [`FOREGROUND_POLL`], as `fg` continues a job that
    /// runs in the background without a signal).
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn next_event(&mut self, group: Pid) -> JobEvent {
        loop {
            if has_stopped_child(group) {
                return JobEvent::Stopped;
            }
            if self.terminal.is_foreground(self.terminal.own) {
                return JobEvent::Foreground;
            }
            tokio::select! {
                child = self.children.recv() => {
                    if child.is_none() {
                        std::future::pending::<()>().await;
                    }
                }
                continued = self.continued.recv() => {
                    if continued.is_none() {
                        std::future::pending::<()>().await;
                    }
                }
                () = tokio::time::sleep(FOREGROUND_POLL) => {}
            }
        }
    }

    /// The command's `group` stopped: takes the terminal back and stops
    /// zk-curator's own job as the terminal would have; returns once it is
    /// continued (at once if the kernel does not stop it: an orphaned
    /// process group is not stopped by SIGTSTP).
    pub(crate) fn stop_own_job(&self, group: Pid) {
        self.terminal.take_back_from(group);
        tracing::info!(%group, "the command stopped; stopping zk-curator's job");
        if let Err(err) = killpg(self.terminal.own, Signal::SIGTSTP) {
            tracing::warn!(%err, "cannot stop zk-curator's job");
        }
        tracing::info!(%group, "zk-curator continued");
    }

    /// Hands the terminal to `group` if zk-curator's job has it (it is in
    /// the foreground).
    pub(crate) fn follow(&self, group: Pid) {
        if self.terminal.is_foreground(self.terminal.own) {
            self.terminal.give_to(group);
        }
    }
}

/// Whether a child of this process in `group` is stopped (its stop is left
/// to be reported again).
#[cfg(target_os = "linux")]
fn has_stopped_child(group: Pid) -> bool {
    use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
    let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    loop {
        match waitid(Id::PGid(group), flags) {
            Ok(WaitStatus::Stopped(..)) => return true,
            Err(nix::errno::Errno::EINTR) => {}
            Ok(_) | Err(_) => return false,
        }
    }
}

/// Without `waitid` (not Linux), stops are not followed.
#[cfg(not(target_os = "linux"))]
fn has_stopped_child(_group: Pid) -> bool {
    false
}
