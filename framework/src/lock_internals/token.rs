//! [`FencingToken`]: the number a hold carries to stores outside
//! ZooKeeper, growing strictly from one holder of a lock to the next, so
//! that a store can refuse a holder older than the newest it has seen (the
//! other tool against a paused holder, the fenced write, is
//! [`Fence`](super::Fence) over [`send_gate`](super::send_gate)).

use std::fmt;

/// The fencing token of a hold: the zxid of the transaction that created its
/// lock node, and how many holds of that node came before this one, within
/// the session that created it: passes from one task of the process to the
/// next (see [`CohortPolicy`](super::CohortPolicy)), or the node taken up
/// again after a suspension the session survived (see
/// [`LockInternals::resume`](super::LockInternals::resume)); `0` for a
/// node's first hold.
///
/// ZooKeeper's zxids grow strictly, and a holder's node is created after
/// the node of every holder before it (it queued behind them), so
/// successive holders of one lock get strictly increasing tokens. Tokens
/// compare by zxid first, then by pass count: a hold passed along one node
/// gets a token greater than its predecessor's and smaller than that of any
/// node created later. Pass the token with every write to the resource the
/// lock protects, and let the resource refuse a token lower than the
/// greatest it has seen:
///
/// ```
/// use zk_curator::FencingToken;
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
/// // A hold passed along node 42 within one process: greater, and still
/// // below any later node's token.
/// let passed = FencingToken::passed(42, 1);
/// assert!(passed > new && passed < FencingToken::new(43));
/// store.write(passed, "from the next task of the process").unwrap();
/// assert!(store.write(new, "from the task before it").is_err());
/// ```
///
/// A store that keeps one integer keeps [`FencingToken::to_i128`], which
/// orders tokens the same way; [`FencingToken::get`] alone (the zxid) does
/// not tell apart holds passed along one node.
///
/// `Copy`, ordered, printable (`zxid`, or `zxid.pass` for a passed hold) and
/// small: cheap to send along with every request. For a semaphore lease, up
/// to `max_leases` holders are valid at once, so the token orders holders; it
/// does not single one out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken {
    // Field order is comparison order (derived `Ord`).
    zxid: i64,
    pass: u32,
}

impl FencingToken {
    /// A token from its zxid, pass count 0 (for example one read back from a
    /// store).
    pub const fn new(zxid: i64) -> Self {
        FencingToken { zxid, pass: 0 }
    }

    /// The token of the hold that received node `zxid` after `pass` passes
    /// within one process.
    pub const fn passed(zxid: i64, pass: u32) -> Self {
        FencingToken { zxid, pass }
    }

    /// The zxid that created the lock node. Holds passed along one node
    /// share it; compare whole tokens (or [`to_i128`](Self::to_i128)).
    pub const fn get(self) -> i64 {
        self.zxid
    }

    /// How many times the node was passed on before this hold.
    pub const fn pass(self) -> u32 {
        self.pass
    }

    /// One integer ordered as the tokens are: `zxid × 2³² + pass`.
    pub const fn to_i128(self) -> i128 {
        ((self.zxid as i128) << 32) | self.pass as i128
    }

    /// The token [`to_i128`](Self::to_i128) made, if `value` is one.
    pub fn from_i128(value: i128) -> Option<Self> {
        let zxid = i64::try_from(value >> 32).ok()?;
        let pass = u32::try_from(value & i128::from(u32::MAX)).ok()?;
        Some(FencingToken { zxid, pass })
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pass {
            0 => write!(f, "{}", self.zxid),
            pass => write!(f, "{}.{pass}", self.zxid),
        }
    }
}

/// Hexadecimal, as ZooKeeper prints zxids (`{:#x}`), then `.pass` if any.
impl fmt::LowerHex for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.zxid, f)?;
        match self.pass {
            0 => Ok(()),
            pass => write!(f, ".{pass}"),
        }
    }
}

impl From<FencingToken> for i128 {
    fn from(token: FencingToken) -> Self {
        token.to_i128()
    }
}
