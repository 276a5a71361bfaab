//! `zk-curator lock`: runs a command while holding a lock.
//!
//! The order of events:
//! 1. take the lock (revocable) in `--layout`, within `--timeout` if given;
//!    an interrupt meanwhile withdraws from the queue; a path that holds
//!    participants of another layout or recipe is refused at once
//!    ([`crate::exit::OTHER_LAYOUT`]);
//! 2. run the command in a process group of its own ([`crate::child`]) with
//!    the fencing token and the node path in its environment,
//!    stdin/stdout/stderr passed through;
//! 3. while any process of that group runs, watch for the hold's loss, a
//!    revocation request, and signals to us (passed on to the group);
//! 4. on loss or revocation, SIGTERM the group, SIGKILL it after
//!    `--kill-after`, and exit with [`crate::exit::LOST`] or
//!    [`crate::exit::REVOKED`];
//! 5. release the lock once no process of the group is left.
//!
//! Steps 2 to 4 are [`crate::child::run_command`], which `elect` runs too;
//! [`give_back`] (step 5) serves `elect` as well.

use std::ffi::OsString;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use nix::sys::signal::Signal;
use tokio::sync::Notify;
use zk_curator::recipes::layout::Layout;
use zk_curator::recipes::{ReadGuard, WriteGuard};
use zk_curator::{
    Framework, Hold, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2, Lease,
    MutexGuard,
};

use crate::acl::AclArgs;
use crate::bounds::BoundArgs;
use crate::child::{exit_code, run_command, Signals};
use crate::connect::{close, ConnectArgs};
use crate::duration::parse_duration;
use crate::exit::{shown, Failure, OTHER, TIMEOUT};

/// Options of `lock`.
#[derive(Debug, Args)]
pub(crate) struct LockArgs {
    /// The lock's path, e.g. /locks/nightly-report.
    pub(crate) path: String,
    /// Give up (exit 75) if the lock is not acquired within this long,
    /// e.g. 30s, 500ms, 2m. Without it, wait as long as it takes.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub(crate) timeout: Option<Duration>,
    /// Take the shared (read) half of a read-write lock.
    #[arg(long, conflicts_with_all = ["write", "leases"])]
    pub(crate) read: bool,
    /// Take the exclusive (write) half of a read-write lock.
    #[arg(long, conflicts_with = "leases")]
    pub(crate) write: bool,
    /// Take one lease of a semaphore admitting N holders.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) leases: Option<u32>,
    /// Whose node layout to take the lock in: `curator` (Apache Curator's
    /// recipes, the default) or `kazoo` (Python's kazoo: its `Lock`, or
    /// with --read/--write its `ReadLock`/`WriteLock`, with --leases its
    /// `Semaphore`). A path that holds participants of another layout or
    /// recipe, which would not see ours, is refused at once (exit 78),
    /// nothing left queued.
    #[arg(long, value_name = "NAME", default_value = "curator", value_parser = parse_layout)]
    pub(crate) layout: Layout,
    /// A label stored with host and pid in the lock node (shown by
    /// `locks`): not empty, at most 1024 bytes, no control characters
    /// (line breaks, tabs, escapes), as for `elect --id`; checked before
    /// anything is sent (exit 64).
    #[arg(long, value_name = "TEXT")]
    pub(crate) id: Option<String>,
    /// After a loss or revocation, how long the command's process group has
    /// between SIGTERM and SIGKILL.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = parse_duration)]
    pub(crate) kill_after: Duration,
    #[command(flatten)]
    pub(crate) bounds: BoundArgs,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
    #[command(flatten)]
    pub(crate) acl: AclArgs,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

/// Reads `--layout` (`curator` or `kazoo`), for `lock` and `elect`.
pub(crate) fn parse_layout(text: &str) -> Result<Layout, String> {
    Layout::parse(text).map_err(|err| err.to_string())
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
        let semaphore = InterProcessSemaphoreV2::with_layout(
            framework.clone(),
            &args.path,
            leases,
            args.layout,
            &[],
        )?;
        semaphore.make_revocable(listener);
        let lease = match args.timeout {
            Some(timeout) => semaphore.acquire_timeout(timeout).await?,
            None => Some(semaphore.acquire().await?),
        };
        return Ok(lease.map(Held::Lease));
    }
    if args.read || args.write {
        let lock = InterProcessReadWriteLock::with_layout(
            framework.clone(),
            &args.path,
            args.layout,
            &[],
        )?;
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
    let mutex = InterProcessMutex::with_layout(framework.clone(), &args.path, args.layout)?;
    mutex.make_revocable(listener);
    let guard = match args.timeout {
        Some(timeout) => mutex.try_lock_for(timeout).await?,
        None => Some(mutex.lock().await?),
    };
    Ok(guard.map(Held::Mutex))
}

/// How long the release may wait for ZooKeeper's answer.
const RELEASE_LIMIT: Duration = Duration::from_secs(2);

/// Runs `lock`, closes the framework and returns the exit code.
pub(crate) async fn run(
    framework: &Framework,
    args: LockArgs,
    signals: Signals,
) -> Result<u8, Failure> {
    let mut answered = true;
    let result = run_open(framework, args, signals, &mut answered).await;
    // An unanswered release means the server is not answering: the close
    // is then only begun.
    close(framework, answered).await;
    result
}

/// Runs `lock` on an open framework; `answered` is cleared when ZooKeeper
/// did not answer the release in time.
async fn run_open(
    framework: &Framework,
    args: LockArgs,
    mut signals: Signals,
    answered: &mut bool,
) -> Result<u8, Failure> {
    let revoked = Arc::new(Notify::new());
    let acquiring = acquire(framework, &args, &revoked);
    let acquired = tokio::select! {
        acquired = acquiring => acquired,
        // Dropping the acquire deletes our node: we leave the queue.
        signal = signals.recv() => {
            return Ok(gave_up_waiting(signal, &shown(&args.path).to_string()));
        }
    };
    let held = match acquired {
        Ok(Some(held)) => held,
        Ok(None) => return Err(timed_out(args.timeout, &shown(&args.path).to_string())),
        Err(err) => {
            let what = format!("cannot acquire {}", shown(&args.path));
            let refusal = &args.acl.refusal;
            return Err(refusal.failure(framework, &what, &args.path, err).await);
        }
    };
    let hold = held.hold().clone();
    tracing::info!(node = %hold.node().path(), token = %hold.fencing_token(), "lock acquired");

    let what = format!("the lock {}", shown(hold.node().path()));
    let ending = run_command(
        &args.command,
        &hold,
        &what,
        Some(&revoked),
        &mut signals,
        args.kill_after,
        &args.bounds,
    )
    .await;
    let code = exit_code(ending, &what);
    // A hold lost meanwhile fails its release at once. One whose answer
    // does not come is left to the end of the session (the release goes
    // on in the background until then).
    give_back(held.release(), hold.node().path(), answered).await;
    code
}

/// Says that a signal came while waiting for `path` (as messages show
/// it), and returns the code for it
/// (128 + N, as a shell gives for a command ended by signal N).
pub(crate) fn gave_up_waiting(signal: Signal, path: &str) -> u8 {
    eprintln!("zk-curator: {signal} received while waiting for {path}; gave up");
    signal_code(signal)
}

/// The code for giving up on `signal`: 128 + N, as a shell gives for a
/// command ended by signal N.
pub(crate) fn signal_code(signal: Signal) -> u8 {
    u8::try_from(128 + signal as i32).unwrap_or(OTHER)
}

/// The failure for a `--timeout` that passed before `path` was had.
pub(crate) fn timed_out(timeout: Option<Duration>, path: &str) -> Failure {
    let waited = timeout.map(|d| humantime::format_duration(d).to_string());
    Failure::new(
        TIMEOUT,
        format!(
            "timed out after {} waiting for {path}",
            waited.unwrap_or_default()
        ),
    )
}

/// Waits for `release` (giving back the hold on `node`) at most
/// [`RELEASE_LIMIT`]; `answered` is cleared when ZooKeeper did not answer
/// in time (the node then goes when the session ends).
pub(crate) async fn give_back(
    release: impl Future<Output = zk_curator::Result<()>>,
    node: &str,
    answered: &mut bool,
) {
    match tokio::time::timeout(RELEASE_LIMIT, release).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::debug!(%err, "release"),
        Err(_) => {
            *answered = false;
            eprintln!(
                "zk-curator: ZooKeeper did not confirm the release of {} within {}; \
                 the node goes when the session ends",
                shown(node),
                humantime::format_duration(RELEASE_LIMIT)
            );
        }
    }
}
