//! [`LockInternals`]: the acquire loop every lock recipe shares (Curator's
//! `LockInternals`), generic over a [`LockInternalsDriver`].
//!
//! # How an acquire works
//!
//! 1. A *protected* node `<path>/_c_<uuid>-<lock name><sequence>` is
//!    created, and the children of `<path>` are listed **in the same breath**:
//!    both requests are sent back to back before waiting for either answer.
//!    ZooKeeper answers a session's requests in order, so the listing already
//!    contains the new node; an uncontended acquire costs one round trip
//!    (Curator's costs two, the create and then the listing), and a whole
//!    acquire-release cycle two (Curator's three). Where the lock path is
//!    missing (or this framework's last release removed it), the path and
//!    the node are made in one multi instead, and nothing is listed: the
//!    node is the path's only child. The release of such a node removes the
//!    path with it, unless someone queued under it meanwhile
//!    (`lock_path.rs`): a lock per entity costs one write to take and one
//!    to give back.
//! 2. The driver decides, from the sorted children, whether we hold the lock
//!    or which single node to watch (the predecessor for a mutex: one release
//!    wakes one waiter, no herd).
//! 3. If the watched node is already gone, the children are listed again at
//!    once; otherwise we wait for its deletion, then list again.
//!
//! # The path of one acquire, file by file
//!
//! A plain mutex acquire (`InterProcessMutex::acquire_timeout` on a
//! framework with the default options) enters the engine here and goes
//! down, never back up:
//!
//! 1. `mod.rs`, [`LockInternals::acquire`]: checks the request (the node
//!    data's size against the packet limit, `internals.rs`; the bounds,
//!    `bounds.rs`), reads the framework's lock options (`engine.rs`), and
//!    runs the rest under the acquire's [`Wait`] (`wait.rs`). With the
//!    in-process queue on (the default), the acquire first waits there for
//!    its turn (`local_queue.rs`).
//! 2. `acquire.rs`: the acquire on ZooKeeper. The restart loop takes the
//!    session and runs one attempt; the attempt arms the [`ContenderGuard`]
//!    (`contender.rs`), creates our node and lists the participants in the
//!    same breath (or makes the missing lock path with our node in one
//!    multi, `lock_path.rs`), then runs the wait loop: sort the participants (by the
//!    driver's key, `internals.rs`), let the driver decide (`driver.rs`, or
//!    the recipe's own), and either grant or wait for the node ahead and
//!    list again. The listing is the last step of that file.
//! 3. `trust.rs`, then `hold.rs`: a grant is asked whether it can still be
//!    trusted (the session, the connection, the lease), and becomes a
//!    [`Hold`], which keeps the acquire's turn until its release.
//!
//! The optional layers are entered only when they are in use: a shared
//! node (`shared_node.rs`) only for a blocking acquire whose driver shares
//! nodes (a read lock), a passed node (`cohort.rs`) only with a [`CohortPolicy`], the
//! revocation watch (`revocation.rs`) only with a [`Revocation`]; the
//! in-process queue only when the framework has it (on by default) and the
//! driver asks for turns. Around the path: the release (`release.rs`),
//! taking a lost node up again (`resume.rs`), fenced writes (`fence.rs`
//! over `send_gate.rs`, tokens in `token.rs`), hold bounds (`bounds.rs`),
//! what one acquire asks for (`request.rs`), the node a grant hands to a
//! hold (`node.rs`), and the layouts of other libraries' nodes
//! (`layout.rs`).
//!
//! # Failures
//!
//! * A connection loss during the create leaves the outcome unknown. The
//!   `_c_<uuid>-` prefix lets the retry list the parent and adopt the node
//!   if the create happened, instead of creating a second one.
//! * Every acquire holds a [`ContenderGuard`] from before the create is sent:
//!   an error, a timeout or a dropped future hands our node (or its prefix)
//!   to the background cleaner.
//! * A session lost while waiting (or our node deleted by someone else)
//!   restarts the acquire on the framework's next session, at the back of
//!   the queue, as long as the retry policy allows. Work is never carried
//!   silently from one session to the next: a node always belongs to the
//!   session that created it.

mod acquire;
mod bounds;
mod cohort;
mod contender;
mod driver;
mod engine;
mod fence;
mod hold;
mod internals;
pub mod layout;
mod local_queue;
mod lock_path;
mod node;
mod release;
mod request;
mod resume;
mod revocation;
mod send_gate;
mod shared_node;
mod token;
mod trust;
mod wait;

use tracing::Instrument;

pub use self::bounds::{Bound, BoundsSetting, HoldBounds, MAX_BOUND};
pub use self::cohort::CohortPolicy;
use self::cohort::{Baton, Run};
pub use self::contender::ContenderGuard;
pub use self::driver::{
    standard_gets_the_lock, standard_sort_key, LockInternalsDriver, ParticipantNode,
    PredicateResults, SortKey, StandardLockInternalsDriver,
};
use self::engine::Engine;
pub use self::fence::{Fence, FencedMulti};
pub use self::hold::Hold;
pub use self::internals::LockInternals;
pub use self::layout::{Family, Layout};
use self::local_queue::LocalTurn;
pub use self::node::AcquiredNode;
pub use self::request::{until_held, Acquire};
pub use self::revocation::{
    watch_data, Revocation, RevocationListener, RevocationSetting, Revoker, REVOKE_MESSAGE,
};
pub use self::token::FencingToken;
pub use self::wait::Wait;
pub use crate::LockLoss;
use crate::{Result, Session};

/// The entry points of an acquire, a resume and a release; each goes down
/// to the module that does the work (`acquire`, `resume`, `release`), none
/// of which comes back here.
impl LockInternals {
    /// Acquires as `request` says: creates a participant node carrying its
    /// data and waits, as long as its [`Wait`] allows, until the node holds
    /// the lock. Returns `Ok(None)` when the wait ends first: a
    /// [`Wait::Try`] that found the lock taken (our node is deleted again
    /// before this returns, in the background only if ZooKeeper cannot be
    /// reached within the connection timeout), or a [`Wait::Until`] whose
    /// deadline passed (the node is deleted in the background). A
    /// [`Wait::Forever`] ends only with a hold or an error (see
    /// [`until_held`]). A deadline already past when this begins still gets
    /// one try.
    ///
    /// With a [`Revocation`], our node is watched from the moment it exists
    /// (waiting or holding) and the listener called whenever a [`Revoker`]
    /// asks for the lock; the watch ends by itself once the node is gone.
    ///
    /// # Errors
    /// [`Error::Closed`](crate::Error::Closed) if the framework is closed; [`Error::RequestTooLarge`](crate::Error::RequestTooLarge)
    /// for data too large for the packet limit (nothing is sent); ZooKeeper
    /// errors that retrying could not overcome (for example
    /// [`Error::NoAuth`](crate::Error::NoAuth), or [`Error::ConnectionLoss`](crate::Error::ConnectionLoss) once the retry policy
    /// gives up); [`Error::Timeout`](crate::Error::Timeout) if no session could be had within the
    /// connection timeout. A session lost during a try is returned as
    /// [`Error::SessionExpired`](crate::Error::SessionExpired), not retried; so is, with a pinned session
    /// ([`Acquire::on_session`]), the end of that session.
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for bounds
    /// ([`Acquire::bounds`]) that [`HoldBounds::validate`] refuses, before
    /// anything is sent.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future at any point deletes our node in the
    /// background (or, if the create's outcome is still unknown, finds it by
    /// its unique prefix and deletes it). Nothing else changes. An acquire
    /// that shares a waiting node with others of this process (see
    /// [`LockInternalsDriver::shares_node`]) leaves the share instead; the
    /// node goes when its last waiter leaves.
    pub async fn acquire(&self, request: Acquire<'_>) -> Result<Option<Hold>> {
        self.check_node_data(request.data)?;
        request.bounds.validate()?;
        let published = self.published_data(&request)?;
        self.framework.check_open()?;
        let bounds = request.bounds;
        let request = Acquire {
            wait: request.wait.for_attempt(),
            ..request
        };
        let wait = request.wait;
        let span = tracing::info_span!("lock.acquire", path = %self.base_path, lock = %self.lock_name, ?wait);
        let waiting = crate::telemetry::Waiting::start(&self.framework, &self.base_path);
        let acquire = async {
            // The paths past the wait for a turn are boxed: a task parked in
            // the in-process queue (there may be a million) carries only
            // what waiting needs.
            if let Some(key) = self.share_key(&request) {
                let engine = Engine::of(&self.framework);
                return Box::pin(engine.shared_nodes.acquire(self, key))
                    .await
                    .map(Some);
            }
            let mut turn = match self.local_turn(wait).await {
                LocalTurnOutcome::Taken => return Ok(None),
                LocalTurnOutcome::Turn(turn) => turn,
            };
            let cohort_data = self.cohort_data(&request);
            let passed = turn.as_mut().and_then(|turn| turn.take_parcel());
            if passed.is_some() {
                crate::buggify::delay(crate::buggify::Point::PassDelay).await;
            }
            let received = passed
                .and_then(|baton| self.receive(baton, cohort_data.as_deref(), request.session));
            if let Some(hold) = received {
                hold.keep_turn(turn);
                return Ok(Some(hold));
            }
            let hold = Box::pin(acquire::acquire_restarting(self, &request)).await?;
            if let Some(hold) = &hold {
                if let Some((policy, data)) =
                    Engine::options(&self.framework).cohort.zip(cohort_data)
                {
                    hold.start_run(Run::start(policy, data));
                }
                hold.keep_turn(turn);
            }
            Ok(hold)
        }
        .instrument(span.clone());
        let result = wait.bound(acquire).await.unwrap_or(Ok(None));
        if let Ok(Some(hold)) = &result {
            // Validated above: cannot fail.
            let _ = hold.bound_publishing(bounds, published);
        }
        waiting.finish(match &result {
            Ok(Some(_)) => "acquired",
            Ok(None) => "timed_out",
            Err(_) => "failed",
        });
        span.in_scope(|| match &result {
            Ok(Some(hold)) => {
                tracing::info!(node = %hold.path(), token = %hold.fencing_token(), "lock acquired")
            }
            Ok(None) => tracing::info!("lock not acquired in time"),
            Err(err) => tracing::info!(%err, "lock acquire failed"),
        });
        result
    }

    /// The node data progress is published in, for bounds that publish it:
    /// the acquire's data, or the framework's default (the holder identity).
    fn published_data(&self, request: &Acquire<'_>) -> Result<Option<std::sync::Arc<[u8]>>> {
        if !request.bounds.publishes_progress() {
            return Ok(None);
        }
        let data = match request.data {
            [] => self.framework.default_node_data(),
            data => data,
        };
        if crate::identity::with_progress(data, 0).is_none() {
            return Err(crate::Error::InvalidArgument(
                "progress is published in the node's identity (a JSON object), and this \
                 acquire's node data is something else"
                    .into(),
            ));
        }
        Ok(Some(data.into()))
    }

    /// The key of the shared node this acquire may join, if the driver and
    /// the request allow sharing (see [`LockInternalsDriver::shares_node`]).
    fn share_key(&self, request: &Acquire<'_>) -> Option<shared_node::ShareKey> {
        let shareable = Engine::options(&self.framework).local_queue
            && self.driver.shares_node()
            && !request.wait.is_try()
            && request.revocation.is_none()
            && request.session.is_none();
        if !shareable {
            return None;
        }
        let data = match request.data {
            [] => self.framework.default_node_data(),
            data => data,
        };
        Some((self.base_path.clone(), self.lock_name.clone(), data.into()))
    }

    /// The node data of an acquire that may take part in cohort hand-off
    /// (see [`CohortPolicy`]): with the policy set, and not revocable.
    fn cohort_data(&self, request: &Acquire<'_>) -> Option<std::sync::Arc<[u8]>> {
        Engine::options(&self.framework).cohort?;
        if request.revocation.is_some() {
            return None;
        }
        let data = match request.data {
            [] => self.framework.default_node_data(),
            data => data,
        };
        Some(data.into())
    }

    /// The hold of a node passed with our turn by another task of this
    /// framework, if this acquire may take it (same data, see
    /// [`CohortPolicy`]) and it is still to be trusted. Otherwise the node is
    /// deleted in the background, and the acquire queues as usual.
    fn receive(&self, baton: Baton, data: Option<&[u8]>, pinned: Option<&Session>) -> Option<Hold> {
        // An acquire pinned to a session takes only a node of that session.
        let on_session = pinned.is_none_or(|session| baton.generation() == session.generation());
        if !on_session || !data.is_some_and(|data| baton.fits(data)) {
            tracing::debug!("a passed node does not fit this acquire; it is deleted");
            return None;
        }
        let hold = Hold::receive(&self.framework, baton)?;
        tracing::info!(node = %hold.path(), token = %hold.fencing_token(), "lock passed to us in this process");
        Some(hold)
    }

    /// Waits for this acquire's turn in the framework's in-process queue, if
    /// the driver wants one (see [`LockInternalsDriver::local_turns`]).
    async fn local_turn(&self, wait: Wait) -> LocalTurnOutcome {
        if !Engine::options(&self.framework).local_queue {
            return LocalTurnOutcome::Turn(None);
        }
        let Some(turns) = self.driver.local_turns(self.max_leases) else {
            return LocalTurnOutcome::Turn(None);
        };
        let turns = turns.max(1);
        let key = (self.base_path.clone(), self.lock_name.clone(), turns);
        let engine = Engine::of(&self.framework);
        let queues = &engine.local_queues;
        if !wait.is_try() {
            tracing::debug!(turns, "waiting for our turn in this process");
            return LocalTurnOutcome::Turn(Some(queues.turn(key).await));
        }
        match queues.try_turn(key) {
            Some(turn) => LocalTurnOutcome::Turn(Some(turn)),
            // Every turn is out: as many participants of this process hold
            // the lock or wait for holders as the lock admits.
            None if turns >= self.max_leases => {
                tracing::debug!("every local turn is out; the lock is taken");
                LocalTurnOutcome::Taken
            }
            // Fewer turns than holders: a try may still get in; it only
            // needs a node for as long as it takes to ask.
            None => LocalTurnOutcome::Turn(None),
        }
    }

    /// Takes up the node of `lost`, a hold of this lock lost to the
    /// connection (an error state under the framework's
    /// [`ErrorPolicy`](crate::ErrorPolicy), such as `Suspended`, or the
    /// lease, [`LockLoss::Stale`]), once the connection is back **on the
    /// same session**: a new hold of the same node, in the same place in the
    /// queue. What a leader latch does after a network blip, as Curator's
    /// latch keeps its node through a suspension.
    ///
    /// `lost` itself stays lost (a hold that went through `Suspended` is
    /// never trusted again): this makes a *new* hold, granted at the loss
    /// epoch read just before a listing of the lock's children on the node's
    /// session found the node still there and holding the lock. Its
    /// [`FencingToken`] is the node's zxid with the next per-node count
    /// (`lost`'s pass count plus one, as a [cohort](CohortPolicy) pass
    /// gives): greater than `lost`'s, smaller than the token of any node
    /// created later. A node that exists but does not hold the lock waits in
    /// its place (for the node ahead of it, as an acquire does), then holds.
    /// The new hold has no in-process turn (see
    /// [`FrameworkBuilder::local_queue`](crate::FrameworkBuilder::local_queue)):
    /// `lost` gave its turn back when it was lost.
    ///
    /// Returns `Ok(None)` when there is nothing to take up: the node's
    /// session ended (its ephemeral node with it), the node is gone, or
    /// `lost` was not lost to the connection (given back, its node deleted).
    /// The caller then deletes the node, if any, as for any lost hold
    /// ([`Hold::release_in_background`]), and queues anew.
    ///
    /// # Why the old hold's writes come before the new hold's
    ///
    /// Both holds write on one session (a hold sends only on its node's
    /// session), and through the same node, so the fence's check in the
    /// multi (the node exists) cannot tell them apart: order does.
    ///
    /// 1. The old hold's fence refuses without sending from the moment it
    ///    is lost (the connection broken, or an error state), so its only
    ///    writes that can reach the server were queued on the session
    ///    before the connection broke.
    /// 2. The client never sends a request twice: a request written on the
    ///    broken connection fails with a connection loss (a fenced write is
    ///    not retried), and one still in the client's queue goes out on the
    ///    new connection ahead of anything queued after it, in particular
    ///    ahead of this method's listing.
    /// 3. On the server, a session's requests are applied in the order they
    ///    arrive. When the session reconnects to the same server, that
    ///    server closes the session's old connection before it accepts the
    ///    new one, so whatever the old connection delivered is in the
    ///    server's pipeline ahead of the new connection's first request.
    ///    When it reconnects to another server, that server revalidates the
    ///    session with the leader, which records the new owner; from then on
    ///    the leader refuses a request that comes through the old server with
    ///    `SESSIONMOVED` (its session-moved check), and a request of the old
    ///    connection that the leader took before is ordered (given a zxid)
    ///    before anything the new server forwards afterwards.
    /// 4. The new hold begins only once the listing, sent on the new
    ///    connection, is answered; its writes are queued after that.
    ///
    /// So every write of the old hold that the server applies is applied
    /// before any write of the new hold. A store outside ZooKeeper, which
    /// does not see that order, gets the greater token: once it has seen
    /// the new hold's, it refuses the old hold's.
    ///
    /// # Errors
    /// [`Error::Closed`](crate::Error::Closed) if the framework is closed;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a hold
    /// that is not lost, or whose node is not an ephemeral participant node
    /// of this lock; errors no retry can fix, such as
    /// [`Error::NoAuth`](crate::Error::NoAuth), or the driver's refusal.
    /// Connection trouble is waited out (for as long as the session lives).
    ///
    /// # Cancel safety
    /// Cancel safe: it only looks and watches. The node stays where it is,
    /// still named by `lost`: delete it with
    /// [`Hold::release_in_background`] if it is no longer wanted.
    pub async fn resume(&self, lost: &Hold) -> Result<Option<Hold>> {
        let span = tracing::info_span!("lock.resume", node = %lost.path());
        Box::pin(resume::resume(self, lost)).instrument(span).await
    }

    /// Releases a hold: deletes its node. If the connection is down (or the
    /// delete does not finish within the connection timeout), the delete
    /// continues in the background and this returns: the lock is released as
    /// far as this process is concerned, and the node goes as soon as
    /// ZooKeeper can be reached (or with its session). A node already gone
    /// counts as deleted. A share of a node held together (readers, see
    /// [`LockInternalsDriver::shares_node`](LockInternalsDriver::shares_node))
    /// only leaves it, without a request, unless it is the last share.
    ///
    /// A hold that was already lost is released without waiting for a new
    /// session: if its (ephemeral) node died with its session, there is
    /// nothing to delete; otherwise the node is deleted now if connected, in
    /// the background if not. Either way the result is [`Error::LockLost`](crate::Error::LockLost),
    /// so the caller learns that the hold did not last until the release.
    ///
    /// With [`FrameworkBuilder::release_before_reply`](crate::FrameworkBuilder::release_before_reply),
    /// the release of a hold that is not lost, with an ephemeral node,
    /// returns as soon as its delete is queued on the session; the answer is
    /// handled in the background as described there.
    ///
    /// # Errors
    /// [`Error::LockLost`](crate::Error::LockLost) for a hold found lost (see above; nothing is left
    /// to do); [`Error::Closed`](crate::Error::Closed) if the framework is closed (ephemeral nodes
    /// went with its session); errors no retry can fix, such as
    /// [`Error::NoAuth`](crate::Error::NoAuth) (logged instead when the answer is not awaited).
    ///
    /// # Cancel safety
    /// Cancel safe: once polled, dropping the future hands the delete to the
    /// background cleaner.
    pub async fn release(&self, hold: &Hold) -> Result<()> {
        let before_reply = Engine::options(&self.framework).release_before_reply;
        // Boxed: a waiting task that releases afterwards (lock, then release,
        // in one future) does not carry the release's state while it waits.
        Box::pin(release::release_as(self, hold, before_reply)).await
    }

    /// Like [`release`](Self::release), but returning as soon as the delete
    /// is queued whatever the framework's
    /// [`release_before_reply`](crate::FrameworkBuilder::release_before_reply)
    /// says (a hold already lost, or with a persistent node, still waits for
    /// the answer). Meant for a recipe's internal lock, such as the
    /// semaphore's mutex: its node is not the user's, and whoever waits for
    /// it gets it as soon as the server has applied the delete, after every
    /// request this framework sent under the lock.
    ///
    /// # Errors
    /// As [`release`](Self::release); an error in the answer is logged.
    ///
    /// # Cancel safety
    /// As [`release`](Self::release).
    pub async fn release_before_reply(&self, hold: &Hold) -> Result<()> {
        Box::pin(release::release_as(self, hold, true)).await
    }
}

/// The in-process turn of one acquire: `Turn(None)` when it needs none.
enum LocalTurnOutcome {
    Turn(Option<LocalTurn<Baton>>),
    /// A try found every turn out: the lock is taken.
    Taken,
}
