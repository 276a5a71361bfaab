//! The one atomic step of a fenced write, "every hold still valid, so the
//! write is on the wire" ([`while_valid`], through each hold's
//! [`SendGate`]), with the multi that carries it ([`send`]): the leaf of
//! the lock engine that a hold uses. It knows holds only through [`Fenced`]
//! and [`FencedHold`], which the hold implements; the public
//! [`Fence`](super::Fence) over holds is built on it.
//!
//! A lock tells its holder "you are first in the queue"; it cannot stop a
//! holder that was paused (GC, a partition, a slow disk) from writing after
//! its session expired and somebody else took over. Two tools close that
//! gap:
//!
//! * a fenced write, for data in ZooKeeper: the write travels in one multi
//!   transaction together with a check that our lock node still exists. The
//!   server applies both or neither, so a write from a holder whose node is
//!   gone is refused by ZooKeeper itself, whatever the holder believes.
//! * [`FencingToken`](super::FencingToken), for stores outside ZooKeeper:
//!   a number that grows strictly from one holder to the next. The store
//!   remembers the greatest token it has accepted and refuses writes
//!   carrying a smaller one.

use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use zookeeper_client as zk;

use crate::{packet, ConnectionState, Error, Framework, LockLoss, Result, Session};

/// What the atomic step of a fenced write needs of each hold.
pub(crate) trait Fenced {
    /// The held node's path.
    fn path(&self) -> &str;
    /// The gate that the end of the hold and a fenced send pass one at a
    /// time.
    fn gate(&self) -> &SendGate;
    /// Whether the hold can still be trusted, without I/O (see
    /// [`Hold::check`](super::Hold::check)).
    fn check(&self) -> std::result::Result<(), LockLoss>;
}

/// What a fenced write needs of its holds besides the atomic step: the
/// session to send on, the framework's rules, and marking a hold lost.
pub(crate) trait FencedHold: Fenced {
    /// The framework the hold belongs to.
    fn framework(&self) -> &Framework;
    /// The session that created the held node, if it is still the
    /// framework's.
    fn session(&self) -> Option<Session>;
    /// Records a loss (the first reason wins) and returns the reason in
    /// force.
    fn mark_lost(&self, loss: LockLoss) -> LockLoss;
}

/// The gate between the end of a hold and the fenced writes made under it.
///
/// A fenced write passes it shared, for the instant between checking its
/// holds and queueing its request ([`while_valid`]); the end of a hold (a
/// release, or the hold handed to the background cleaner) passes it alone
/// ([`SendGate::ending`]). So a write is either on the wire before the hold
/// ended, or refused after it: never sent once the end has returned.
#[derive(Debug, Default)]
pub(crate) struct SendGate(RwLock<()>);

impl SendGate {
    /// Runs `end` (the end of the hold) once no fenced write is between its
    /// check and its send; no write gets in until `end` has returned.
    pub(crate) fn ending<R>(&self, end: impl FnOnce() -> R) -> R {
        let _alone = self.0.write().unwrap_or_else(PoisonError::into_inner);
        end()
    }

    fn sending(&self) -> RwLockReadGuard<'_, ()> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }
}

/// In a simulation, where the `ServerFence` point fires for a write its
/// holds refuse: the framework's current session, once it has confirmed
/// (synced first) that the node of every hold that refuses it (found lost,
/// or its session no longer the framework's) is gone; the
/// write then goes out on it unchecked by the process, and the multi's
/// check of each node refuses it. So the server's half of the fence is
/// tried: the process's own check refuses every such write first
/// otherwise, as a stale write's loss reaches the process before its next
/// write in every schedule the simulation draws. `None` (the write stays
/// refused) when the point does not fire, when a lost hold's node is still
/// there (a hold lost by its lease, or given back to another task of the
/// process, whose write the server would take), or on any error.
async fn server_judges<H: FencedHold>(holds: &[H]) -> Option<Session> {
    if !crate::buggify::fires(crate::buggify::Point::ServerFence) {
        return None;
    }
    let session = holds.first()?.framework().current_session()?;
    let client = session.client();
    let refused = |hold: &&H| hold.check().is_err() || hold.session().is_none();
    for hold in holds.iter().filter(refused) {
        client.sync(hold.path()).await.ok()?;
        if client.check_stat(hold.path()).await.ok()?.is_some() {
            return None;
        }
    }
    Some(session)
}

/// The atomic step of a fenced write, and its one place: if every hold is
/// still valid, `send` runs, with no end of any of the holds in between.
/// `send` must queue the request before it returns (zookeeper-client queues
/// a request when its method is called, not when its future is polled).
///
/// Each hold is checked (without I/O) inside its [`SendGate`]; the first
/// found lost (or ended: a release makes every clone of a hold answer
/// [`LockLoss::NotHeld`]) refuses the write, and nothing is sent. The gates
/// are passed in one order (by address, each once however many of the holds
/// share it), so that two writes over the same holds cannot wait for each
/// other behind an end. The check in the multi still catches what the
/// process cannot see (a node deleted by hand, a session expired
/// unnoticed); this step adds what only the process knows: that the hold
/// was given back, which matters once a hold can pass to another task of the
/// process over the same node.
///
/// # Errors
/// [`Error::LockLost`], naming the first hold found lost.
pub(crate) fn while_valid<H: Fenced, R>(holds: &[H], send: impl FnOnce() -> R) -> Result<R> {
    let mut gates: Vec<&SendGate> = holds.iter().map(Fenced::gate).collect();
    gates.sort_by_key(|gate| std::ptr::from_ref::<SendGate>(gate) as usize);
    gates.dedup_by(|a, b| std::ptr::eq(*a, *b));
    let _passing: Vec<RwLockReadGuard<'_, ()>> = gates.iter().map(|g| g.sending()).collect();
    for hold in holds {
        hold.check().map_err(|loss| lost(hold, loss))?;
    }
    Ok(send())
}

/// The session the writes go to: the one that created the (ephemeral)
/// held nodes, once every hold is checked.
pub(crate) fn session_of<H: FencedHold>(holds: &[H]) -> Result<Session> {
    for hold in holds {
        hold.check().map_err(|loss| lost(hold, loss))?;
    }
    let first = holds.first().ok_or(Error::Closed)?;
    first
        .session()
        .ok_or_else(|| lost(first, LockLoss::SessionReplaced))
}

/// Sends `ops` behind a check of every hold's node (version -1: the node
/// only has to exist), in one multi, and returns the results of `ops`. A
/// failed check marks its hold lost and refuses the write with
/// [`Error::LockLost`]; so does a hold found lost before anything is sent
/// (see [`while_valid`]).
pub(crate) async fn send<H: FencedHold>(
    holds: &[H],
    ops: &[FencedOp<'_>],
) -> Result<Vec<zk::MultiWriteResult>> {
    // Refused by the process's own check, unless a simulation leaves it
    // to the server's (see `server_judges`).
    let (session, server_judges) = match session_of(holds) {
        Ok(session) => (session, false),
        Err(refused) => (server_judges(holds).await.ok_or(refused)?, true),
    };
    let client = session.client();
    let mut multi = client.new_multi_writer();
    for hold in holds {
        // Version -1: any version, the node only has to exist.
        multi.add_check_version(hold.path(), -1)?;
    }
    for op in ops {
        match *op {
            FencedOp::Create {
                path,
                data,
                options,
            } => multi.add_create(path, data, options)?,
            FencedOp::SetData {
                path,
                data,
                version,
            } => multi.add_set_data(path, data, version)?,
            FencedOp::Delete { path, version } => multi.add_delete(path, version)?,
            FencedOp::Check { path, version } => multi.add_check_version(path, version)?,
        }
    }
    let checks = holds.len();
    // The atomic step: the request is queued while every hold is
    // checked valid, and no end of a hold comes in between.
    let committed = if server_judges {
        multi.commit()
    } else {
        while_valid(holds, || multi.commit())?
    };
    match committed.await {
        Ok(mut results) => {
            results.drain(..checks.min(results.len()));
            Ok(results)
        }
        Err(zk::MultiWriteError::OperationFailed { index, source }) if index < checks => {
            let hold = &holds[index];
            match source {
                zk::Error::NoNode | zk::Error::BadVersion => {
                    crate::buggify::reach(crate::buggify::Rare::ServerRefused);
                    let loss = hold.mark_lost(LockLoss::NodeDeleted);
                    Err(lost(hold, loss))
                }
                other => Err(session.map_err(other)),
            }
        }
        Err(zk::MultiWriteError::OperationFailed { index, source })
            if index - checks < ops.len() =>
        {
            // One of the caller's operations failed: name its node.
            Err(session.map_err(source).at_path(ops[index - checks].path()))
        }
        Err(zk::MultiWriteError::OperationFailed { source, .. })
        | Err(zk::MultiWriteError::RequestFailed { source }) => {
            let err = session.map_err(source);
            if err.is_session_terminal() {
                let loss = holds[0].mark_lost(LockLoss::SessionReplaced);
                return Err(lost(&holds[0], loss));
            }
            if err == Error::ConnectionLoss {
                // The connection broke under the write: from now on
                // the holds are suspended, whatever the framework's
                // state says a moment later.
                let suspended = LockLoss::ConnectionState(ConnectionState::Suspended);
                for hold in holds {
                    if hold
                        .framework()
                        .error_policy()
                        .is_error_state(ConnectionState::Suspended)
                    {
                        hold.mark_lost(suspended);
                    }
                }
            }
            Err(err)
        }
    }
}

/// One write of a [`FencedMulti`](super::FencedMulti), kept until the commit.
#[derive(Clone, Copy, Debug)]
pub(crate) enum FencedOp<'a> {
    Create {
        path: &'a str,
        data: &'a [u8],
        options: &'a zk::CreateOptions<'a>,
    },
    SetData {
        path: &'a str,
        data: &'a [u8],
        version: Option<i32>,
    },
    Delete {
        path: &'a str,
        version: Option<i32>,
    },
    Check {
        path: &'a str,
        version: i32,
    },
}

impl FencedOp<'_> {
    pub(crate) fn path(&self) -> &str {
        match *self {
            FencedOp::Create { path, .. }
            | FencedOp::SetData { path, .. }
            | FencedOp::Delete { path, .. }
            | FencedOp::Check { path, .. } => path,
        }
    }

    pub(crate) fn size(&self, root: usize) -> packet::Op {
        match *self {
            FencedOp::Create {
                path,
                data,
                options,
            } => packet::Op::create(root, path, data.len(), options),
            FencedOp::SetData { path, data, .. } => packet::Op::set_data(root, path, data.len()),
            FencedOp::Delete { path, .. } => packet::Op::delete(root, path),
            FencedOp::Check { path, .. } => packet::Op::check(root, path),
        }
    }
}

/// The error of a write refused because `hold` is lost.
pub(crate) fn lost<H: Fenced + ?Sized>(hold: &H, loss: LockLoss) -> Error {
    Error::lock_lost(hold.path(), loss)
}

/// The error of a multi answered with something other than asked for.
pub(crate) fn unexpected(result: Option<zk::MultiWriteResult>) -> Error {
    Error::Zk(zk::Error::UnexpectedError(format!(
        "unexpected multi result {result:?}"
    )))
}

#[cfg(test)]
mod tests;
