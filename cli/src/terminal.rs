//! The controlling terminal's foreground, handed to the command's process
//! group while it runs, as a shell does for a job.
//!
//! Only when zk-curator itself is the terminal's foreground group when the
//! command starts (run from an interactive shell, not with `&`); without a
//! controlling terminal (CI, services, pipelines started by a daemon)
//! nothing here does anything. The command's group then gets the
//! terminal's signals itself (Ctrl-C, Ctrl-\) and may read the terminal;
//! zk-curator takes the terminal back once the group is gone.
//!
//! Changing the foreground from a background group raises SIGTTOU, which
//! would stop zk-curator: every change is made with SIGTTOU blocked on the
//! calling thread, and the thread's mask is restored right after (children
//! are started with an empty mask by std anyway).

use std::fs::File;

use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
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
