//! `zk-curator lock`: runs a command while holding a lock.
//!
//! The order of events:
//! 1. take the lock (revocable), within `--timeout` if given; an interrupt
//!    meanwhile withdraws from the queue;
//! 2. run the command with the fencing token and the node path in its
//!    environment, stdin/stdout/stderr passed through;
//! 3. while it runs, watch for the hold's loss, a revocation request, and
//!    signals to us (passed on to the command);
//! 4. on loss or revocation, SIGTERM the command, SIGKILL it after
//!    `--kill-after`, and exit with [`LOST`] or [`REVOKED`];
//! 5. release the lock once the command has ended.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::Child;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::Notify;
use zk_curator::recipes::{ReadGuard, WriteGuard};
use zk_curator::{
    Framework, Hold, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2, Lease,
    LockLoss, MutexGuard,
};

use crate::exit::{Failure, CANNOT_EXECUTE, LOST, NOT_FOUND, OTHER, REVOKED, TIMEOUT};
use crate::LockArgs;

/// The environment variable carrying the hold's fencing token.
pub(crate) const TOKEN_ENV: &str = "ZK_CURATOR_FENCING_TOKEN";
/// The environment variable carrying the lock node's path.
pub(crate) const NODE_ENV: &str = "ZK_CURATOR_LOCK_NODE";

/// The signals `zk-curator lock` takes over and passes on to its command.
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
    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
        }
    }
}

/// A granted hold of whichever recipe was asked for.
enum Held {
    Mutex(MutexGuard),
    Read(ReadGuard),
    Write(WriteGuard),
    Lease(Lease),
}

impl Held {
    fn hold(&self) -> &Hold {
        match self {
            Held::Mutex(guard) => guard,
            Held::Read(guard) => guard,
            Held::Write(guard) => guard,
            Held::Lease(lease) => lease,
        }
    }

    async fn release(self) -> zk_curator::Result<()> {
        match self {
            Held::Mutex(guard) => guard.release().await,
            Held::Read(guard) => guard.release().await,
            Held::Write(guard) => guard.release().await,
            Held::Lease(lease) => lease.release().await,
        }
    }
}

/// Acquires what `args` asks for, revocable through `revoked`. `Ok(None)`
/// when `--timeout` passed first.
async fn acquire(
    framework: &Framework,
    args: &LockArgs,
    revoked: &Arc<Notify>,
) -> zk_curator::Result<Option<Held>> {
    let listener = {
        let revoked = revoked.clone();
        move |node: &str| {
            tracing::info!(%node, "revocation requested");
            revoked.notify_one();
        }
    };
    if let Some(leases) = args.leases {
        let semaphore = InterProcessSemaphoreV2::new(framework.clone(), &args.path, leases)?;
        semaphore.make_revocable(listener);
        let lease = match args.timeout {
            Some(timeout) => semaphore.acquire_timeout(timeout).await?,
            None => Some(semaphore.acquire().await?),
        };
        return Ok(lease.map(Held::Lease));
    }
    if args.read || args.write {
        let lock = InterProcessReadWriteLock::new(framework.clone(), &args.path)?;
        if args.read {
            let half = lock.read_lock();
            half.make_revocable(listener);
            let guard = match args.timeout {
                Some(timeout) => half.try_lock_for(timeout).await?,
                None => Some(half.lock().await?),
            };
            return Ok(guard.map(Held::Read));
        }
        let half = lock.write_lock();
        half.make_revocable(listener);
        let guard = match args.timeout {
            Some(timeout) => half.try_lock_for(timeout).await?,
            None => Some(half.lock().await?),
        };
        return Ok(guard.map(Held::Write));
    }
    let mutex = InterProcessMutex::new(framework.clone(), &args.path)?;
    mutex.make_revocable(listener);
    let guard = match args.timeout {
        Some(timeout) => mutex.try_lock_for(timeout).await?,
        None => Some(mutex.lock().await?),
    };
    Ok(guard.map(Held::Mutex))
}

/// The exit code a shell would give for `status`.
fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(OTHER),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(OTHER),
        (None, None) => OTHER,
    }
}

/// Sends `signal` to the child if it is still running.
fn send(child: &Child, signal: Signal) {
    let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) else {
        return;
    };
    if let Err(err) = kill(Pid::from_raw(pid), signal) {
        tracing::debug!(%err, pid, ?signal, "could not signal the command");
    }
}

/// SIGTERM now, SIGKILL after `grace`; waits for the child's end.
async fn stop_child(child: &mut Child, grace: Duration) -> std::io::Result<ExitStatus> {
    send(child, Signal::SIGTERM);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            eprintln!(
                "zk-curator: the command did not stop within {}; killing it",
                humantime::format_duration(grace)
            );
            child.start_kill()?;
            child.wait().await
        }
    }
}

/// Why the command's run ended.
enum Ending {
    Exited(ExitStatus),
    Lost(LockLoss),
    Revoked,
}

/// Runs `lock` and returns the exit code.
pub(crate) async fn run(
    framework: &Framework,
    args: LockArgs,
    mut signals: Signals,
) -> Result<u8, Failure> {
    let revoked = Arc::new(Notify::new());
    let acquired = tokio::select! {
        acquired = acquire(framework, &args, &revoked) => acquired,
        // Dropping the acquire deletes our node: we leave the queue.
        signal = signals.recv() => {
            eprintln!("zk-curator: {signal} received while waiting for {}; gave up", args.path);
            return Ok(u8::try_from(128 + signal as i32).unwrap_or(OTHER));
        }
    };
    let held = match acquired {
        Ok(Some(held)) => held,
        Ok(None) => {
            let waited = args.timeout.map(humantime::format_duration);
            return Err(Failure::new(
                TIMEOUT,
                format!(
                    "timed out after {} waiting for {}",
                    waited.map(|d| d.to_string()).unwrap_or_default(),
                    args.path
                ),
            ));
        }
        Err(err) => return Err(Failure::zk(format!("cannot acquire {}", args.path), err)),
    };
    let hold = held.hold().clone();
    tracing::info!(node = %hold.path(), token = %hold.fencing_token(), "lock acquired");

    let ending = supervise(&args, &hold, &revoked, &mut signals).await;
    let code = match ending {
        Err(failure) => Err(failure),
        Ok(Ending::Exited(status)) => Ok(status_code(status)),
        Ok(Ending::Lost(reason)) => Err(Failure::new(
            LOST,
            format!(
                "lost the lock {} ({reason}); the command was stopped",
                hold.path()
            ),
        )),
        Ok(Ending::Revoked) => Err(Failure::new(
            REVOKED,
            format!(
                "the lock {} was revoked; the command was stopped",
                hold.path()
            ),
        )),
    };
    // A hold lost meanwhile fails its release at once; nothing more to do.
    if let Err(err) = held.release().await {
        tracing::debug!(%err, "release");
    }
    code
}

/// Starts the command and watches it, the hold, revocation and signals
/// until the command has ended.
async fn supervise(
    args: &LockArgs,
    hold: &Hold,
    revoked: &Notify,
    signals: &mut Signals,
) -> Result<Ending, Failure> {
    let Some((program, rest)) = args.command.split_first() else {
        return Err(Failure::usage("no command given after --"));
    };
    let spawned = tokio::process::Command::new(program)
        .args(rest)
        .env(TOKEN_ENV, hold.fencing_token().to_string())
        .env(NODE_ENV, hold.path())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => {
            let code = if err.kind() == std::io::ErrorKind::NotFound {
                NOT_FOUND
            } else {
                CANNOT_EXECUTE
            };
            return Err(Failure::new(
                code,
                format!("cannot run {}: {err}", program.to_string_lossy()),
            ));
        }
    };
    let lost = hold.lost();
    tokio::pin!(lost);
    let waited = |result: std::io::Result<ExitStatus>| {
        result.map_err(|err| Failure::new(OTHER, format!("cannot wait for the command: {err}")))
    };
    loop {
        tokio::select! {
            status = child.wait() => return waited(status).map(Ending::Exited),
            reason = &mut lost => {
                eprintln!(
                    "zk-curator: lost the lock {} ({reason}); stopping the command",
                    hold.path()
                );
                waited(stop_child(&mut child, args.kill_after).await)?;
                return Ok(Ending::Lost(reason));
            }
            _ = revoked.notified() => {
                eprintln!(
                    "zk-curator: revocation of {} requested; stopping the command",
                    hold.path()
                );
                waited(stop_child(&mut child, args.kill_after).await)?;
                return Ok(Ending::Revoked);
            }
            signal = signals.recv() => {
                tracing::info!(%signal, "passing the signal on to the command");
                send(&child, signal);
            }
        }
    }
}
