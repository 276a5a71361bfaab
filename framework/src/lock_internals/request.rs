//! [`Acquire`]: what one acquire asks for (data, wait, revocation, session),
//! and [`until_held`] for acquires that wait as long as it takes.

use super::bounds::HoldBounds;
use super::revocation::Revocation;
use super::wait::Wait;
use crate::{Result, Session};

/// Runs `acquire` (an acquire without a timeout) until it returns a hold.
///
/// Such an acquire ends only with a hold or an error; its `Ok(None)` means
/// "not in time", which cannot happen, and is simply asked again rather than
/// turned into a made-up error.
///
/// # Errors
/// The first error `acquire` returns.
///
/// # Cancel safety
/// As cancel safe as `acquire`.
pub async fn until_held<T, F, Fut>(mut acquire: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    loop {
        if let Some(held) = acquire().await? {
            return Ok(held);
        }
    }
}

/// What to acquire and how (see
/// [`LockInternals::acquire`](super::LockInternals::acquire)).
#[derive(Clone, Copy, Debug)]
pub struct Acquire<'a> {
    pub(super) data: &'a [u8],
    pub(super) wait: Wait,
    pub(super) revocation: Option<&'a Revocation>,
    pub(super) session: Option<&'a Session>,
    pub(super) bounds: HoldBounds,
}

impl<'a> Acquire<'a> {
    /// No data, [`Wait::Forever`], not revocable, on the framework's
    /// current session (and its successors).
    pub fn new() -> Self {
        Acquire {
            data: &[],
            wait: Wait::Forever,
            revocation: None,
            session: None,
            bounds: HoldBounds::new(),
        }
    }

    /// The participant node's data.
    pub fn data(mut self, data: &'a [u8]) -> Self {
        self.data = data;
        self
    }

    /// How long to wait in all (see [`Wait`]).
    pub fn wait(mut self, wait: Wait) -> Self {
        self.wait = wait;
        self
    }

    /// Watch the node for revocation requests.
    pub fn revocation(mut self, revocation: Option<&'a Revocation>) -> Self {
        self.revocation = revocation;
        self
    }

    /// Acquire on this session only: if it ends, the acquire fails with
    /// [`Error::SessionExpired`](crate::Error::SessionExpired) instead of starting over on the next one
    /// (for a step that is only valid under something else held on that
    /// session, such as the semaphore's internal mutex).
    pub fn on_session(mut self, session: &'a Session) -> Self {
        self.session = Some(session);
        self
    }

    /// Bounds the hold this acquire gets (see [`HoldBounds`]): checked
    /// before anything is sent, counted from the grant.
    pub fn bounds(mut self, bounds: HoldBounds) -> Self {
        self.bounds = bounds;
        self
    }
}

impl Default for Acquire<'_> {
    fn default() -> Self {
        Acquire::new()
    }
}
