//! [`Fence`]: writes that succeed only while one or more holds are still
//! held, over the atomic "still valid, so send" step of
//! [`send_gate`], and [`Hold::fence`].

use zookeeper_client as zk;

use super::hold::Hold;
use super::send_gate::{self, FencedOp};
use super::token::FencingToken;
use crate::{packet, Error, Result};

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

    /// The client of the holds' session (for reads; writes that must be
    /// fenced go through [`Fence::multi`] or the methods below).
    ///
    /// # Errors
    /// [`Error::LockLost`] if a hold is known to be lost.
    pub fn client(&self) -> Result<zk::Client> {
        Ok(send_gate::session_of(&self.holds)?.client().clone())
    }

    /// A multi transaction of your own, sent with this fence's checks in
    /// front of your operations by [`FencedMulti::commit`]:
    ///
    /// ```no_run
    /// # async fn demo(fence: zk_curator::Fence) -> zk_curator::Result<()> {
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

    /// Sends one operation behind the checks, after sizing the request.
    async fn send_one(&self, op: FencedOp<'_>) -> Result<zk::MultiWriteResult> {
        let mut multi = self.multi();
        multi.push(op)?;
        multi
            .commit()
            .await?
            .pop()
            .ok_or_else(|| send_gate::unexpected(None))
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
            other => Err(send_gate::unexpected(Some(other))),
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
            other => Err(send_gate::unexpected(Some(other))),
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
            other => Err(send_gate::unexpected(Some(other))),
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
        send_gate::send(&self.fence.holds, &self.ops).await
    }
}

impl Hold {
    /// A fence over this hold alone (see [`Fence`]). Every hold answers
    /// `fence()` this way: guards, leases, and the task-bound holds through
    /// their lock (`mutex.fence()`, `multi.fence()`, ...).
    ///
    /// # Errors
    /// [`Error::LockLost`] if the hold is already known to be lost (a fence
    /// would refuse every write anyway).
    pub fn fence(&self) -> Result<Fence> {
        self.check()
            .map_err(|loss| Error::lock_lost(self.path(), loss))?;
        Ok(Fence::new(vec![self.clone()]))
    }
}
