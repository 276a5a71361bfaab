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
use super::loss::LockLoss;
use crate::error::{Error, Result};
use crate::framework::Session;

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
/// [`delete`](Self::delete)) or build a multi of your own:
///
/// ```no_run
/// # async fn demo(fence: zk_curator_framework::lock_internals::Fence) -> zk_curator_framework::Result<()> {
/// let client = fence.client()?;
/// let mut multi = client.new_multi_writer();
/// fence.add_checks(&mut multi)?; // first, before your own operations
/// multi.add_set_data("/app/config", b"v2", None)?;
/// multi.add_delete("/app/draft", None)?;
/// let results = fence.commit(multi).await?; // the checks' results are left out
/// # Ok(()) }
/// ```
///
/// A check that fails means a held node is gone: the hold is marked lost
/// and the write is refused with [`Error::LockLost`].
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

    /// The client to build a multi on (bound to the holds' session).
    ///
    /// # Errors
    /// [`Error::LockLost`] if a hold is known to be lost.
    pub fn client(&self) -> Result<zk::Client> {
        Ok(self.session()?.client().clone())
    }

    /// Adds one existence check per held node to `multi`. Call it before
    /// adding your own operations (so that [`Fence::commit`] can tell a
    /// failed check from a failed write).
    ///
    /// # Errors
    /// [`Error::LockLost`] if a hold is already known to be lost (nothing is
    /// added); [`Error::InvalidPath`]-like client errors as [`Error::Zk`].
    pub fn add_checks(&self, multi: &mut zk::MultiWriter<'_>) -> Result<()> {
        self.check_valid()?;
        for hold in &self.holds {
            // Version -1: any version, the node only has to exist.
            multi.add_check_version(hold.path(), -1)?;
        }
        Ok(())
    }

    /// Commits a multi whose first operations are this fence's checks (see
    /// [`Fence::add_checks`]) and returns the results of the caller's own
    /// operations.
    ///
    /// # Errors
    /// [`Error::LockLost`] if a hold was found lost before sending, or a
    /// check failed on the server (the hold is then marked lost); the
    /// failing operation's error otherwise (e.g. [`Error::BadVersion`],
    /// [`Error::NoNode`]); [`Error::ConnectionLoss`] when the outcome is
    /// unknown (the multi is not retried).
    ///
    /// # Cancel safety
    /// The request is sent when this is first polled; dropping the future
    /// afterwards leaves the outcome unknown, as for any ZooKeeper write.
    pub async fn commit(
        &self,
        mut multi: zk::MultiWriter<'_>,
    ) -> Result<Vec<zk::MultiWriteResult>> {
        let session = self.session()?;
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
            Err(zk::MultiWriteError::OperationFailed { source, .. })
            | Err(zk::MultiWriteError::RequestFailed { source }) => {
                let err = session.map_err(source);
                if err.is_session_terminal() {
                    let loss = self.holds[0].mark_lost(LockLoss::SessionReplaced);
                    return Err(lost(&self.holds[0], loss));
                }
                Err(err)
            }
        }
    }

    /// Sets the data of `path` only while every hold is still held.
    ///
    /// # Errors
    /// As [`Fence::commit`].
    ///
    /// # Cancel safety
    /// As [`Fence::commit`].
    pub async fn set_data(
        &self,
        path: &str,
        data: &[u8],
        expected_version: Option<i32>,
    ) -> Result<zk::Stat> {
        let client = self.client()?;
        let mut multi = client.new_multi_writer();
        self.add_checks(&mut multi)?;
        multi.add_set_data(path, data, expected_version)?;
        match self.commit(multi).await?.pop() {
            Some(zk::MultiWriteResult::SetData { stat }) => Ok(stat),
            other => Err(unexpected(other)),
        }
    }

    /// Creates `path` only while every hold is still held; returns the
    /// created path (with its sequence, for a sequential mode).
    ///
    /// # Errors
    /// As [`Fence::commit`] (e.g. [`Error::NodeExists`]).
    ///
    /// # Cancel safety
    /// As [`Fence::commit`].
    pub async fn create(
        &self,
        path: &str,
        data: &[u8],
        options: &zk::CreateOptions<'_>,
    ) -> Result<String> {
        let client = self.client()?;
        let mut multi = client.new_multi_writer();
        self.add_checks(&mut multi)?;
        multi.add_create(path, data, options)?;
        match self.commit(multi).await?.pop() {
            Some(zk::MultiWriteResult::Create { path, .. }) => Ok(path),
            other => Err(unexpected(other)),
        }
    }

    /// Deletes `path` only while every hold is still held.
    ///
    /// # Errors
    /// As [`Fence::commit`] (e.g. [`Error::NoNode`]).
    ///
    /// # Cancel safety
    /// As [`Fence::commit`].
    pub async fn delete(&self, path: &str, expected_version: Option<i32>) -> Result<()> {
        let client = self.client()?;
        let mut multi = client.new_multi_writer();
        self.add_checks(&mut multi)?;
        multi.add_delete(path, expected_version)?;
        match self.commit(multi).await?.pop() {
            Some(zk::MultiWriteResult::Delete) => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

fn lost(hold: &Hold, loss: LockLoss) -> Error {
    Error::LockLost(format!("{} is no longer held: {loss}", hold.path()))
}

fn unexpected(result: Option<zk::MultiWriteResult>) -> Error {
    Error::Zk(zk::Error::UnexpectedError(format!(
        "unexpected multi result {result:?}"
    )))
}
