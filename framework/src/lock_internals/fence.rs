//! Fencing: writes that succeed only while a hold is still held.
//!
//! A lock tells its holder "you are first in the queue"; it cannot stop a
//! holder that was paused (GC, a partition, a slow disk) from writing after
//! its session expired and somebody else took over. Two tools close that
//! gap:
//!
//! * [`Fence`], for data in ZooKeeper: the write travels in one multi
//!   transaction together with a check that our lock node still exists. The
//!   server applies both or neither, so a write from a holder whose node is
//!   gone is refused by ZooKeeper itself, whatever the holder believes.
//! * [`FencingToken`], for stores outside ZooKeeper: a number that grows
//!   strictly from one holder to the next. The store remembers the greatest
//!   token it has accepted and refuses writes carrying a smaller one.

use std::fmt;

use zookeeper_client as zk;

use super::hold::Hold;
use crate::{packet, ConnectionState, Error, LockLoss, Result, Session};

/// The fencing token of a hold: the zxid of the transaction that created its
/// lock node.
///
/// ZooKeeper's zxids grow strictly, and a holder's node is created after
/// the node of every holder before it (it queued behind them), so
/// successive holders of one lock get strictly increasing tokens. Pass the
/// token with every write to the resource the lock protects, and let the
/// resource refuse a token lower than the greatest it has seen:
///
/// ```
/// use zk_curator_framework::lock_internals::FencingToken;
///
/// /// A store that refuses writes from holders older than the newest it saw.
/// #[derive(Default)]
/// struct Store {
///     newest: Option<FencingToken>,
///     value: String,
/// }
///
/// impl Store {
///     fn write(&mut self, token: FencingToken, value: &str) -> Result<(), String> {
///         if self.newest.is_some_and(|newest| token < newest) {
///             return Err(format!("stale holder: token {token} < {}", self.newest.unwrap_or(token)));
///         }
///         self.newest = Some(token);
///         self.value = value.to_owned();
///         Ok(())
///     }
/// }
///
/// let mut store = Store::default();
/// let (old, new) = (FencingToken::new(17), FencingToken::new(42));
/// store.write(new, "from the new holder").unwrap();
/// assert!(store.write(old, "from a paused old holder").is_err());
/// assert_eq!(store.value, "from the new holder");
/// ```
///
/// `Copy`, ordered, printable and 8 bytes: cheap to send along with every
/// request. For a semaphore lease, up to `max_leases` holders are valid at
/// once, so the token orders holders; it does not single one out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(i64);

impl FencingToken {
    /// A token from its number (for example one read back from a store).
    pub const fn new(value: i64) -> Self {
        FencingToken(value)
    }

    /// The number (the lock node's creation zxid).
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Hexadecimal, as ZooKeeper prints zxids (`{:#x}`).
impl fmt::LowerHex for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

impl From<FencingToken> for i64 {
    fn from(token: FencingToken) -> Self {
        token.0
    }
}

/// Makes ZooKeeper writes conditional on one or more holds: every write sent
/// through a fence carries, in the same multi transaction, a check that each
/// held node still exists. A hold that is already known to be lost sends
/// nothing.
///
/// Get one from any hold (`guard.fence()`, `mutex.fence()`, a lease, a
/// multi-lock), then either use the convenience methods
/// ([`set_data`](Self::set_data), [`create`](Self::create),
/// [`delete`](Self::delete)) or build a multi of your own with
/// [`Fence::multi`].
///
/// A check that fails means a held node is gone: the hold is marked lost
/// and the write is refused with [`Error::LockLost`]. Every write is sized
/// before it is sent: one longer than ZooKeeper's packet limit is refused
/// with [`Error::RequestTooLarge`], and nothing is sent.
#[derive(Clone, Debug)]
pub struct Fence {
    holds: Vec<Hold>,
}

impl Fence {
    pub(crate) fn new(holds: Vec<Hold>) -> Fence {
        Fence { holds }
    }

    /// One fence over the holds of several fences (a multi-lock's members).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `fences` is empty or the holds belong
    /// to different frameworks (one multi goes to one session).
    pub fn combine(fences: impl IntoIterator<Item = Fence>) -> Result<Fence> {
        let holds: Vec<Hold> = fences.into_iter().flat_map(|f| f.holds).collect();
        let Some(first) = holds.first() else {
            return Err(Error::InvalidArgument(
                "a fence needs at least one hold".into(),
            ));
        };
        if holds
            .iter()
            .any(|h| !h.framework().same_framework(first.framework()))
        {
            return Err(Error::InvalidArgument(
                "a fence cannot span holds of different frameworks".into(),
            ));
        }
        Ok(Fence { holds })
    }

    /// The holds this fence checks.
    pub fn holds(&self) -> &[Hold] {
        &self.holds
    }

    /// The fencing tokens of the holds, in order.
    pub fn fencing_tokens(&self) -> Vec<FencingToken> {
        self.holds.iter().map(Hold::fencing_token).collect()
    }

    fn check_valid(&self) -> Result<()> {
        for hold in &self.holds {
            if let Err(loss) = hold.check() {
                return Err(lost(hold, loss));
            }
        }
        Ok(())
    }

    /// The session the writes go to: the one that created the (ephemeral)
    /// held nodes.
    fn session(&self) -> Result<Session> {
        self.check_valid()?;
        let first = self.holds.first().ok_or(Error::Closed)?;
        first
            .session()
            .ok_or_else(|| lost(first, LockLoss::SessionReplaced))
    }

    /// The client of the holds' session (for reads; writes that must be
    /// fenced go through [`Fence::multi`] or the methods below).
    ///
    /// # Errors
    /// [`Error::LockLost`] if a hold is known to be lost.
    pub fn client(&self) -> Result<zk::Client> {
        Ok(self.session()?.client().clone())
    }

    /// A multi transaction of your own, sent with this fence's checks in
    /// front of your operations by [`FencedMulti::commit`]:
    ///
    /// ```no_run
    /// # async fn demo(fence: zk_curator_framework::lock_internals::Fence) -> zk_curator_framework::Result<()> {
    /// let mut multi = fence.multi();
    /// multi.set_data("/app/config", b"v2", None)?;
    /// multi.delete("/app/draft", None)?;
    /// let results = multi.commit().await?; // one result per operation of yours
    /// # Ok(()) }
    /// ```
    pub fn multi(&self) -> FencedMulti<'_> {
        FencedMulti {
            fence: self,
            ops: Vec::new(),
        }
    }

    /// The checks' sizes on the wire.
    fn check_ops(&self, root: usize) -> impl Iterator<Item = packet::Op> + '_ {
        self.holds
            .iter()
            .map(move |h| packet::Op::check(root, h.path()))
    }

    /// Sends `ops` behind the checks, in one multi, and returns the results
    /// of `ops`.
    async fn send(&self, ops: &[FencedOp<'_>]) -> Result<Vec<zk::MultiWriteResult>> {
        let session = self.session()?;
        let client = session.client();
        let mut multi = client.new_multi_writer();
        for hold in &self.holds {
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
        let checks = self.holds.len();
        match multi.commit().await {
            Ok(mut results) => {
                results.drain(..checks.min(results.len()));
                Ok(results)
            }
            Err(zk::MultiWriteError::OperationFailed { index, source }) if index < checks => {
                let hold = &self.holds[index];
                match source {
                    zk::Error::NoNode | zk::Error::BadVersion => {
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
                    let loss = self.holds[0].mark_lost(LockLoss::SessionReplaced);
                    return Err(lost(&self.holds[0], loss));
                }
                if err == Error::ConnectionLoss {
                    // The connection broke under the write: from now on
                    // the holds are suspended, whatever the framework's
                    // state says a moment later.
                    let suspended = LockLoss::ConnectionState(ConnectionState::Suspended);
                    for hold in &self.holds {
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

    /// Sends one operation behind the checks, after sizing the request.
    async fn send_one(&self, op: FencedOp<'_>) -> Result<zk::MultiWriteResult> {
        let mut multi = self.multi();
        multi.push(op)?;
        multi.commit().await?.pop().ok_or_else(|| unexpected(None))
    }

    /// Sets the data of `path` only while every hold is still held.
    ///
    /// # Errors
    /// As [`FencedMulti::commit`].
    ///
    /// # Cancel safety
    /// As [`FencedMulti::commit`].
    pub async fn set_data(
        &self,
        path: &str,
        data: &[u8],
        expected_version: Option<i32>,
    ) -> Result<zk::Stat> {
        let op = FencedOp::SetData {
            path,
            data,
            version: expected_version,
        };
        match self.send_one(op).await? {
            zk::MultiWriteResult::SetData { stat } => Ok(stat),
            other => Err(unexpected(Some(other))),
        }
    }

    /// Creates `path` only while every hold is still held; returns the
    /// created path (with its sequence, for a sequential mode).
    ///
    /// # Errors
    /// As [`FencedMulti::commit`] (e.g. [`Error::NodeExists`]).
    ///
    /// # Cancel safety
    /// As [`FencedMulti::commit`].
    pub async fn create(
        &self,
        path: &str,
        data: &[u8],
        options: &zk::CreateOptions<'_>,
    ) -> Result<String> {
        let op = FencedOp::Create {
            path,
            data,
            options,
        };
        match self.send_one(op).await? {
            zk::MultiWriteResult::Create { path, .. } => Ok(path),
            other => Err(unexpected(Some(other))),
        }
    }

    /// Deletes `path` only while every hold is still held.
    ///
    /// # Errors
    /// As [`FencedMulti::commit`] (e.g. [`Error::NoNode`]).
    ///
    /// # Cancel safety
    /// As [`FencedMulti::commit`].
    pub async fn delete(&self, path: &str, expected_version: Option<i32>) -> Result<()> {
        let op = FencedOp::Delete {
            path,
            version: expected_version,
        };
        match self.send_one(op).await? {
            zk::MultiWriteResult::Delete => Ok(()),
            other => Err(unexpected(Some(other))),
        }
    }
}

/// One write of a [`FencedMulti`], kept until the commit.
#[derive(Clone, Copy, Debug)]
enum FencedOp<'a> {
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
    fn path(&self) -> &str {
        match *self {
            FencedOp::Create { path, .. }
            | FencedOp::SetData { path, .. }
            | FencedOp::Delete { path, .. }
            | FencedOp::Check { path, .. } => path,
        }
    }

    fn size(&self, root: usize) -> packet::Op {
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

/// A multi transaction sent with a [`Fence`]'s checks in front of its
/// operations (see [`Fence::multi`]): ZooKeeper applies all of it only while
/// every hold of the fence is still held.
///
/// Each operation is sized as it is added: one that would make the request
/// longer than the framework's
/// [`max_packet_size`](crate::FrameworkBuilder::max_packet_size) is refused
/// with [`Error::RequestTooLarge`] and left out, so nothing too long is ever
/// sent (a server would drop the connection, and every hold with it).
#[derive(Debug)]
#[must_use = "a multi does nothing until `commit()`"]
pub struct FencedMulti<'a> {
    fence: &'a Fence,
    ops: Vec<FencedOp<'a>>,
}

impl<'a> FencedMulti<'a> {
    fn push(&mut self, op: FencedOp<'a>) -> Result<()> {
        let Some(first) = self.fence.holds.first() else {
            return Err(Error::NotOwner);
        };
        let framework = first.framework();
        let root = framework.namespace_len();
        let ops = self
            .ops
            .iter()
            .chain(std::iter::once(&op))
            .map(|op| op.size(root));
        let size = packet::multi(self.fence.check_ops(root).chain(ops));
        packet::check(size, framework.max_packet_size())?;
        self.ops.push(op);
        Ok(())
    }

    /// Adds a create of `path` (see `zk::Client::create`).
    ///
    /// # Errors
    /// [`Error::RequestTooLarge`] if the multi would outgrow the packet
    /// limit (the operation is left out).
    pub fn create(
        &mut self,
        path: &'a str,
        data: &'a [u8],
        options: &'a zk::CreateOptions<'a>,
    ) -> Result<()> {
        self.push(FencedOp::Create {
            path,
            data,
            options,
        })
    }

    /// Adds a set-data of `path`, of any version with `None`.
    ///
    /// # Errors
    /// As [`FencedMulti::create`].
    pub fn set_data(
        &mut self,
        path: &'a str,
        data: &'a [u8],
        expected_version: Option<i32>,
    ) -> Result<()> {
        self.push(FencedOp::SetData {
            path,
            data,
            version: expected_version,
        })
    }

    /// Adds a delete of `path`, of any version with `None`.
    ///
    /// # Errors
    /// As [`FencedMulti::create`].
    pub fn delete(&mut self, path: &'a str, expected_version: Option<i32>) -> Result<()> {
        self.push(FencedOp::Delete {
            path,
            version: expected_version,
        })
    }

    /// Adds a check that `path` has `version` (-1: that it exists).
    ///
    /// # Errors
    /// As [`FencedMulti::create`].
    pub fn check_version(&mut self, path: &'a str, version: i32) -> Result<()> {
        self.push(FencedOp::Check { path, version })
    }

    /// Sends the fence's checks and the operations in one multi, and
    /// returns the results of the operations added (in order).
    ///
    /// # Errors
    /// [`Error::LockLost`] if a hold was found lost before sending, or a
    /// check failed on the server (the hold is then marked lost); the
    /// failing operation's error otherwise (e.g. [`Error::BadVersion`],
    /// [`Error::NoNode`]); [`Error::InvalidPath`]-like client refusals as
    /// [`Error::Zk`] before anything is sent; [`Error::ConnectionLoss`] when
    /// the outcome is unknown (the multi is not retried, and under
    /// [`ErrorPolicy::Standard`](crate::ErrorPolicy::Standard) the holds
    /// are lost from then on, as the connection is).
    ///
    /// # Cancel safety
    /// The request is sent when this is first polled; dropping the future
    /// afterwards leaves the outcome unknown, as for any ZooKeeper write.
    pub async fn commit(self) -> Result<Vec<zk::MultiWriteResult>> {
        self.fence.send(&self.ops).await
    }
}

fn lost(hold: &Hold, loss: LockLoss) -> Error {
    Error::lock_lost(hold.path(), loss)
}

fn unexpected(result: Option<zk::MultiWriteResult>) -> Error {
    Error::Zk(zk::Error::UnexpectedError(format!(
        "unexpected multi result {result:?}"
    )))
}
