//! The lock calls of the contenders that run in this process (zk-curator's
//! `InterProcessMutex`, zookeeper-client's `Client::lock`): one acquire and
//! its release on a handle, and T tasks handing one lock around for a
//! window ([`contended_rust`]), timing every hand-off.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zk_curator::framework::zk;
use zk_curator::recipes::MutexGuard;
use zk_curator::InterProcessMutex;

use super::figures::{percentile, Handoffs};
use super::limits::{within, BoxError, Scoped, ACQUIRE_LIMIT};

/// One task's lock on one path.
#[derive(Clone)]
pub(crate) enum LockHandle {
    Mutex(InterProcessMutex),
    ZkClient(zk::Client, String),
}

/// A hold, to be released.
pub(crate) enum Held {
    Guard(MutexGuard),
    Node(zk::Client, String),
}

impl LockHandle {
    pub(crate) async fn acquire(&self) -> Result<Held, BoxError> {
        match self {
            LockHandle::Mutex(mutex) => {
                Ok(Held::Guard(within(ACQUIRE_LIMIT, mutex.lock()).await??))
            }
            LockHandle::ZkClient(client, dir) => {
                let options = zk::LockOptions::new(zk::Acls::anyone_all()).with_ancestor_options(
                    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
                )?;
                let prefix = zk::LockPrefix::new_curator(dir, "lock-")?;
                let lock = within(ACQUIRE_LIMIT, client.lock(prefix, b"", options)).await??;
                let node = lock.lock_path().to_owned();
                // Dropping a LockClient deletes its node in the background,
                // which would leave the delete out of the cycle; we delete it
                // ourselves in `release` and skip that drop.
                std::mem::forget(lock);
                Ok(Held::Node(client.clone(), node))
            }
        }
    }
}

impl Held {
    pub(crate) async fn release(self) -> Result<(), BoxError> {
        match self {
            Held::Guard(guard) => within(ACQUIRE_LIMIT, guard.release()).await??,
            Held::Node(client, node) => within(ACQUIRE_LIMIT, client.delete(&node, None)).await??,
        }
        Ok(())
    }
}

/// `tasks` tasks, task i on handle i % handles, loop acquire → release on
/// one path for `window`; a hold begun after the window is released and not
/// counted.
pub(crate) async fn contended_rust(
    handles: Vec<LockHandle>,
    tasks: usize,
    window: Duration,
) -> Result<Handoffs, BoxError> {
    if handles.is_empty() {
        return Err("no session".into());
    }
    let origin = Instant::now();
    let deadline = origin + window;
    // The last holder; only the holder writes it, so no race.
    let last = Arc::new(AtomicUsize::new(usize::MAX));
    // When the last holder began its release, in ns since `origin` (0: no
    // release yet); only the holder writes it. The next acquire to return
    // measures the hand-off from there.
    let released = Arc::new(AtomicU64::new(0));
    let mut running = Scoped(Vec::with_capacity(tasks));
    for id in 0..tasks {
        let handle = handles[id % handles.len()].clone();
        let (last, released) = (last.clone(), released.clone());
        running.0.push(tokio::spawn(async move {
            let (mut holds, mut switches, mut releases) = (0u64, 0u64, 0u64);
            let mut gaps = Vec::new();
            loop {
                let held = handle.acquire().await?;
                let now = Instant::now();
                let late = now >= deadline;
                if !late {
                    holds += 1;
                    if last.swap(id, Ordering::Relaxed) != id {
                        switches += 1;
                    }
                    let since = released.load(Ordering::SeqCst);
                    if since != 0 {
                        let at = (now - origin).as_nanos() as u64;
                        gaps.push(Duration::from_nanos(at.saturating_sub(since)));
                    }
                }
                released.store(origin.elapsed().as_nanos().max(1) as u64, Ordering::SeqCst);
                held.release().await?;
                releases += 1;
                if late {
                    return Ok::<_, BoxError>((holds, switches, releases, gaps));
                }
            }
        }));
    }
    let (mut holds, mut switches, mut releases, mut failure) = (0, 0, 0, None);
    let mut gaps = Vec::new();
    for task in running.0.iter_mut() {
        match task.await? {
            Ok((h, s, r, g)) => {
                holds += h;
                switches += s;
                releases += r;
                gaps.extend(g);
            }
            Err(err) => failure = Some(err),
        }
    }
    if let Some(err) = failure {
        return Err(err);
    }
    gaps.sort_unstable();
    let ms = |q| percentile(&gaps, q).as_secs_f64() * 1e3;
    Ok(Handoffs {
        per_s: holds as f64 / window.as_secs_f64(),
        holds,
        switches,
        releases,
        gap_ms: (!gaps.is_empty()).then(|| (ms(0.50), ms(0.99))),
        passes: None,
    })
}

/// One task per handle, each handle on a path of its own (one lock per
/// entity), every task looping acquire → release for `window`; a hold begun
/// after the window is released and not counted. No task ever waits for
/// another: every hold of an entity is a hand-off of that entity from its
/// last hold (a create and a delete on the server, as a hand-off to another
/// process).
pub(crate) async fn entities_rust(
    handles: Vec<LockHandle>,
    window: Duration,
) -> Result<Handoffs, BoxError> {
    if handles.is_empty() {
        return Err("no session".into());
    }
    let deadline = Instant::now() + window;
    let mut running = Scoped(Vec::with_capacity(handles.len()));
    for handle in handles {
        running.0.push(tokio::spawn(async move {
            let (mut holds, mut releases) = (0u64, 0u64);
            loop {
                let held = handle.acquire().await?;
                let late = Instant::now() >= deadline;
                if !late {
                    holds += 1;
                }
                held.release().await?;
                releases += 1;
                if late {
                    return Ok::<_, BoxError>((holds, releases));
                }
            }
        }));
    }
    let (mut holds, mut releases, mut failure) = (0, 0, None);
    for task in running.0.iter_mut() {
        match task.await? {
            Ok((h, r)) => {
                holds += h;
                releases += r;
            }
            Err(err) => failure = Some(err),
        }
    }
    if let Some(err) = failure {
        return Err(err);
    }
    Ok(Handoffs {
        per_s: holds as f64 / window.as_secs_f64(),
        holds,
        switches: 0,
        releases,
        gap_ms: None,
        passes: None,
    })
}
