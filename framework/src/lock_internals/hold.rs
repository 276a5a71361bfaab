//! [`Hold`]: a granted participant node, and the one answer to "may I still
//! act as its holder?".
//!
//! Every kind of hold the recipes hand out (a guard, a task-bound hold, a
//! lease, a member of a multi-lock) wraps a `Hold`, so `is_valid()`,
//! `lost()` and fencing mean the same thing everywhere:
//!
//! * the framework is open;
//! * nobody has seen the node deleted;
//! * for an ephemeral node (every standard recipe's), the session that
//!   created it is still the framework's session, and the connection state
//!   has not entered an error state under the framework's
//!   [`ErrorPolicy`](crate::ErrorPolicy) since the grant (the
//!   [`loss_epoch`](crate::Framework::loss_epoch) has not moved) and is not
//!   in one now;
//! * for an ephemeral node, the server was heard from on its session within
//!   the session timeout (see [`Hold::check`]): the hold is a lease.
//!
//! A persistent node (a custom driver's) outlives sessions, so connection
//! trouble (or silence) does not end its hold.
//!
//! Once any of these fails, the hold is lost for good (the first reason is
//! latched): a hold that went through a `Suspended` episode stays lost even
//! after the connection comes back, because its holder may already have
//! stopped, and another process may have acted meanwhile if the suspension
//! hid an expiry.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use zookeeper_client as zk;

use super::bounds::{Bound, HoldBounds, Running};
use super::cohort::{Baton, Passes, Run};
use super::local_queue::LocalTurn;
use super::node::AcquiredNode;
use super::send_gate::{Fenced, FencedHold, SendGate};
use super::token::FencingToken;
use super::trust::{last_heard, loss_of, session_of};
use crate::{telemetry, Framework, LockLoss, Session};

/// How a hold gives up its share of a node that several acquires of this
/// process hold together (readers; the shared-node bookkeeping hands it
/// over, the hold does not know that bookkeeping). Returns `true` when the
/// node is now the caller's to delete: the last share is gone. Giving up
/// twice must answer `false` the second time.
pub(crate) type LeaveShare = Box<dyn Fn() -> bool + Send + Sync>;

/// A participant node that was granted the lock, with its loss latch. Cheap
/// to clone; clones share the latch.
#[derive(Clone)]
pub struct Hold {
    inner: Arc<HoldInner>,
}

pub(crate) struct HoldInner {
    framework: Framework,
    node: AcquiredNode,
    /// The `path` label of its metrics.
    label: String,
    /// When it was granted, on `std`'s clock on purpose: it only measures
    /// the real time the hold lasted, for the `zk_curator_hold_seconds`
    /// metric, and decides nothing (the lease runs on tokio's clock, see
    /// `trust`).
    granted: std::time::Instant,
    /// The framework's loss epoch when the node was granted.
    epoch: u64,
    /// The first reason the hold was found lost (set once).
    lost: watch::Sender<Option<LockLoss>>,
    /// Passed alone by the end of the hold, shared by fenced writes (see
    /// [`SendGate`]).
    gate: SendGate,
    /// The in-process turn the hold occupies, given back by the release,
    /// when the hold is found lost, or when the last clone goes; with the
    /// sender whose drop ends the task watching for the loss.
    turn: std::sync::Mutex<Option<(LocalTurn<Baton>, oneshot::Sender<()>)>>,
    /// The run of passes this hold belongs to, for a hold whose node may
    /// pass to the next task of this process (see [`super::cohort`]).
    run: std::sync::OnceLock<Run>,
    /// Set once something else is tied to the node: it is never passed.
    keep: std::sync::atomic::AtomicBool,
    /// For a share of a node that several acquires of this process hold
    /// together (readers): the node is deleted only when the last share
    /// goes (see [`LeaveShare`]).
    share: std::sync::OnceLock<LeaveShare>,
    /// Its bounds, once set (see [`super::bounds`]); shared with the hold
    /// of the same node taken up again after a suspension.
    bounds: std::sync::OnceLock<Arc<Running>>,
    /// Set once the hold was given back (released, passed on, or handed to
    /// the background cleaner), whatever its loss latch says.
    given_back: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hold")
            .field("node", &self.inner.node.path())
            .field("token", &self.inner.node.fencing_token())
            .field("lost", &*self.inner.lost.borrow())
            .finish()
    }
}

impl Hold {
    /// Wraps a node granted at loss epoch `epoch`.
    pub(crate) fn new(framework: Framework, node: AcquiredNode, epoch: u64) -> Hold {
        let label = telemetry::path_label(&framework, crate::path::split(node.path()).0);
        telemetry::hold_started(&label);
        Hold {
            inner: Arc::new(HoldInner {
                framework,
                node,
                label,
                granted: std::time::Instant::now(),
                epoch,
                lost: watch::Sender::new(None),
                gate: SendGate::default(),
                turn: std::sync::Mutex::new(None),
                run: std::sync::OnceLock::new(),
                keep: std::sync::atomic::AtomicBool::new(false),
                share: std::sync::OnceLock::new(),
                bounds: std::sync::OnceLock::new(),
                given_back: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Whether the hold was given back (released, passed on, or handed to
    /// the background cleaner).
    pub(crate) fn is_given_back(&self) -> bool {
        self.inner
            .given_back
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The hold behind `weak`, if it lives.
    pub(crate) fn upgrade(weak: &std::sync::Weak<HoldInner>) -> Option<Hold> {
        weak.upgrade().map(|inner| Hold { inner })
    }

    /// Bounds the hold from now (see [`HoldBounds`]): once a bound
    /// passes, the hold is lost with [`LockLoss::BoundPassed`] and its node
    /// deleted, without the holder's help. Set once: a second call (a
    /// reentrant acquire's, say) changes nothing, so the outermost acquire's
    /// bounds are the hold's. Unbounded `bounds` change nothing either.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for bounds
    /// [`HoldBounds::validate`] refuses.
    ///
    /// Bounds that publish progress
    /// ([`HoldBounds::publish_progress`]) are given at the acquire only:
    /// here they are [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    pub fn bound(&self, bounds: HoldBounds) -> crate::Result<()> {
        if bounds.publishes_progress() {
            return Err(crate::Error::InvalidArgument(
                "bounds that publish progress are given at the acquire (its node's data is \
                 where progress goes)"
                    .into(),
            ));
        }
        self.bound_publishing(bounds, None)
    }

    /// [`Hold::bound`], publishing progress in `data` (the node's data) if
    /// the bounds say so.
    pub(crate) fn bound_publishing(
        &self,
        bounds: HoldBounds,
        data: Option<Arc<[u8]>>,
    ) -> crate::Result<()> {
        bounds.validate()?;
        if !bounds.is_bounded() {
            return Ok(());
        }
        let publish = data.filter(|_| bounds.publishes_progress());
        if self
            .inner
            .bounds
            .set(Arc::new(Running::new(bounds, publish)))
            .is_ok()
        {
            enforce(Arc::downgrade(&self.inner));
        }
        Ok(())
    }

    /// Bounds this hold as `from` is bounded, on `from`'s clocks: the hold
    /// bound still counts from `from`'s grant, the silence from its last
    /// progress (a hold that takes over from another, such as a read hold
    /// taken level with a write hold by a downgrade, cannot stretch its
    /// bounds). Nothing if `from` is unbounded or this hold is bounded
    /// already.
    pub fn continue_bounds(&self, from: &Hold) {
        let Some(running) = from.running() else {
            return;
        };
        if self.inner.bounds.set(Arc::new(running.continued())).is_ok() {
            enforce(Arc::downgrade(&self.inner));
        }
    }

    /// The hold's bounds (unbounded if none were set).
    pub fn bounds(&self) -> HoldBounds {
        self.running().map(Running::bounds).unwrap_or_default()
    }

    pub(crate) fn running(&self) -> Option<&Running> {
        self.inner.bounds.get().map(|running| &**running)
    }

    /// Says the holder is making progress: the silence bound (see
    /// [`HoldBounds::silence`]) counts from now. Cheap and synchronous (an
    /// atomic store, no I/O); nothing for a hold without a silence bound.
    /// Progress after a bound has passed does not bring the hold back.
    pub fn progress(&self) {
        if let Some(running) = self.running() {
            if running.passed(tokio::time::Instant::now()).is_none() {
                running.progress();
            }
        }
    }

    /// When the holder last reported progress (the grant, if never), for a
    /// bounded hold.
    pub fn last_progress(&self) -> Option<tokio::time::Instant> {
        self.running().map(Running::last_progress)
    }

    /// A receiver of the hold's loss latch (changes when it ends or is
    /// lost; closed when the hold is gone).
    pub(crate) fn ended(&self) -> watch::Receiver<Option<LockLoss>> {
        self.inner.lost.subscribe()
    }

    /// Ends a hold whose `bound` passed (its loss already latched): once no
    /// fenced write is between its check and its send, its share of the
    /// node is given up and the node deleted, on the framework's background
    /// cleaner, so that the next waiter gets the lock.
    pub(crate) fn end_by_bound(&self, bound: Bound) {
        self.inner.gate.ending(|| ());
        tracing::warn!(node = %self.path(), %bound, "a hold bound passed: the hold is ended and its node deleted");
        self.give_turn_back();
        if self.leave_share() {
            self.inner.framework.delete_in_background(self.path());
        }
    }

    /// The hold of a node passed by another task of this framework (see
    /// [`super::cohort`]), if the node is still to be trusted as of the
    /// run's first grant; otherwise the node is deleted in the background
    /// and `None` returned.
    pub(crate) fn receive(framework: &Framework, baton: Baton) -> Option<Hold> {
        let (node, epoch, run) = baton.receive()?;
        if let Some(loss) = loss_of(framework, &node, epoch) {
            tracing::info!(node = %node.path(), %loss, "passed node lost on the way; queueing anew");
            crate::buggify::reach(crate::buggify::Rare::PassRefused);
            framework.delete_in_background(node.path());
            return None;
        }
        let hold = Hold::new(framework.clone(), node, epoch);
        hold.start_run(run);
        telemetry::lock_passed(&hold.inner.label);
        Passes::add(framework);
        crate::buggify::reach(crate::buggify::Rare::PassTaken);
        Some(hold)
    }

    /// A new hold of this hold's node, granted at loss epoch `epoch`, with
    /// the next per-node count in its token (this hold's pass count plus
    /// one, as a cohort pass gives): the hold of a node taken up again after
    /// a suspension its session survived (see
    /// [`LockInternals::resume`](super::LockInternals::resume)). This hold
    /// is not touched: it stays lost. The new one is never passed on.
    pub(crate) fn resumed(&self, epoch: u64) -> Hold {
        let pass = self.fencing_token().pass().saturating_add(1);
        let hold = Hold::new(self.inner.framework.clone(), self.inner.node.clone(), epoch);
        hold.start_run(Run::resumed(pass));
        // The same node under the same bounds and clocks: progress said on
        // either counts for both.
        if let Some(running) = self.inner.bounds.get() {
            if hold.inner.bounds.set(running.clone()).is_ok() {
                enforce(Arc::downgrade(&hold.inner));
            }
        }
        hold
    }

    /// Lets the hold pass its node on within `run` (see [`super::cohort`]).
    pub(crate) fn start_run(&self, run: Run) {
        let _ = self.inner.run.set(run);
    }

    /// Never pass this hold's node to another task of this process: its
    /// release deletes it, as without cohort hand-off (see
    /// [`FrameworkBuilder::cohort`](crate::FrameworkBuilder::cohort)). For a
    /// recipe that ties something else to the node, such as a read node
    /// level with a write node.
    pub fn keep_from_passing(&self) {
        self.inner
            .keep
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Passes the node to the next task of this framework waiting for the
    /// same lock, if the hold's run allows one more pass and a task waits:
    /// the hold ends (for every clone, as a release ends it) in the same
    /// step of its send gate that finds it still valid, then the node is
    /// left with the turn for that task. Returns `false`, with nothing
    /// changed, when there was no pass.
    pub(crate) fn pass_on(&self) -> bool {
        if self.inner.keep.load(std::sync::atomic::Ordering::SeqCst) {
            return false;
        }
        let Some(next) = self.inner.run.get().and_then(Run::next) else {
            return false;
        };
        let span =
            tracing::info_span!("lock.pass", node = %self.path(), token = %self.fencing_token());
        let _entered = span.enter();
        let passed = {
            let slot = self.turn_slot();
            let Some((turn, _)) = slot.as_ref() else {
                return false;
            };
            // The turn's gate is locked by the hand-over, never the other
            // way round; ending the hold may mark it lost, which takes the
            // slot: let it go first.
            let handle = turn.handle();
            drop(slot);
            handle.is_some_and(|handle| {
                handle.hand_over(|| {
                    self.end_if_valid().then(|| {
                        Baton::new(
                            self.inner.framework.clone(),
                            self.inner.node.clone(),
                            self.inner.epoch,
                            next,
                        )
                    })
                })
            })
        };
        if passed {
            tracing::info!("lock passed to the next task of this process");
            // The turn goes back with the node waiting in it.
            self.give_turn_back();
        }
        passed
    }

    /// Ends the hold as [`Hold::end`] does, if it is still valid, in one
    /// step of its send gate; whether it did.
    fn end_if_valid(&self) -> bool {
        self.inner.gate.ending(|| {
            if self.check().is_err() {
                return false;
            }
            self.inner
                .given_back
                .store(true, std::sync::atomic::Ordering::SeqCst);
            self.inner.lost.send_if_modified(|current| {
                if current.is_some() {
                    return false;
                }
                *current = Some(LockLoss::NotHeld);
                true
            })
        })
    }

    /// Keeps `turn` until the release, the last clone's drop, or the loss
    /// of the hold, whichever comes first. A lost hold must not keep the
    /// next task of this process from queueing in ZooKeeper (other processes'
    /// waiters are not held back by it either), even if its holder has not
    /// noticed the loss yet; a small task watches the session and the
    /// connection state for it, without any request.
    pub(crate) fn keep_turn(&self, turn: Option<LocalTurn<Baton>>) {
        let Some(turn) = turn else { return };
        let (released_tx, released) = oneshot::channel::<()>();
        *self.turn_slot() = Some((turn, released_tx));
        if !self.inner.node.is_ephemeral() {
            return;
        }
        let Some(session) = self.session() else {
            self.give_turn_back();
            return;
        };
        let framework = &self.inner.framework;
        let weak = Arc::downgrade(&self.inner);
        let mut states = framework.state_watcher();
        let gone = framework.session_gone(&session);
        let closed = framework.closed();
        tokio::spawn(async move {
            tokio::pin!(gone, closed, released);
            loop {
                tokio::select! {
                    // Given back (or the hold dropped): nothing to do.
                    _ = &mut released => return,
                    _ = &mut gone => break,
                    _ = &mut closed => break,
                    changed = states.changed() => {
                        let Some(inner) = weak.upgrade() else { return };
                        if changed.is_ok() && (Hold { inner }).check().is_ok() {
                            continue;
                        }
                        break;
                    }
                }
            }
            if let Some(inner) = weak.upgrade() {
                let hold = Hold { inner };
                // Latches the reason for the holder to find.
                let _ = hold.check();
                tracing::debug!(node = %hold.path(), "hold lost; its local turn goes to the next task");
                hold.give_turn_back();
            }
        });
    }

    /// Gives the hold up without waiting: its node goes to the framework's
    /// background cleaner, and its place in the in-process queue to the next
    /// task at once (even if clones of this hold live on, in a
    /// [`Fence`](super::Fence), say).
    pub fn release_in_background(&self) {
        if self.pass_on() {
            return;
        }
        self.end();
        self.give_turn_back();
        if self.leave_share() {
            self.inner.framework.delete_in_background(self.path());
        }
    }

    /// Makes this hold one share of a node held together: `leave` is how
    /// it gives its share up (set once; a second call does nothing).
    pub(crate) fn join_share(&self, leave: LeaveShare) {
        let _ = self.inner.share.set(leave);
    }

    /// Gives up this hold's share of its node (once): `true` when the node
    /// is the caller's to delete (it is not shared, or this was the last
    /// share).
    pub(crate) fn leave_share(&self) -> bool {
        self.inner.share.get().is_none_or(|leave| leave())
    }

    /// The framework's loss epoch when the node was granted.
    pub(crate) fn epoch(&self) -> u64 {
        self.inner.epoch
    }

    /// Gives the in-process turn back (the next local waiter may go).
    pub(crate) fn give_turn_back(&self) {
        let turn = self.turn_slot().take();
        drop(turn);
    }

    #[allow(clippy::type_complexity)]
    fn turn_slot(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<(LocalTurn<Baton>, oneshot::Sender<()>)>> {
        self.inner
            .turn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The granted node: its [`path`](AcquiredNode::path) (the one way to
    /// the node's path from a hold, a guard, a lease or a term),
    /// [`name`](AcquiredNode::name), session and zxid.
    pub fn node(&self) -> &AcquiredNode {
        &self.inner.node
    }

    /// The node's full path (relative to the framework's namespace), for
    /// the engine only: users reach it through [`Hold::node`], as `path()`
    /// on a lock means the lock's path.
    pub(crate) fn path(&self) -> &str {
        self.inner.node.path()
    }

    /// The framework the hold belongs to.
    pub fn framework(&self) -> &Framework {
        &self.inner.framework
    }

    /// The hold's fencing token (see [`FencingToken`]): the node's zxid,
    /// and how many times the node passed between tasks of this process
    /// before this hold.
    pub fn fencing_token(&self) -> FencingToken {
        let passes = self.inner.run.get().map_or(0, Run::passes);
        FencingToken::passed(self.inner.node.fencing_token(), passes)
    }

    /// Whether two handles are clones of one hold.
    pub fn same_hold(&self, other: &Hold) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Checks, without I/O, whether the hold can still be trusted; the first
    /// reason it cannot is latched and returned from then on.
    ///
    /// Besides what the module's rules say (the framework open, the node not
    /// seen deleted, its session current, no error connection state under
    /// the [`ErrorPolicy`](crate::ErrorPolicy) since the grant), the hold of
    /// an ephemeral node is a *lease*, as in Chubby: once more than the
    /// negotiated session timeout has passed on the monotonic clock since
    /// the server was last heard from on the node's session (the last packet
    /// received: a reply, a notification, a ping's reply), the session may
    /// have expired on the server, and the node with it, whatever the
    /// client has noticed: the hold is lost with [`LockLoss::Stale`]. A
    /// process paused for longer than that (a GC, SIGSTOP, a stopped VM)
    /// finds out here as soon as it runs again, before any I/O, and a
    /// fenced write is refused without being sent. A healthy session hears
    /// from the server well within the timeout, even when idle (its client
    /// pings at a fraction of it), so a healthy hold does not flap.
    ///
    /// The clock is tokio's ([`tokio::time::Instant::now`]), which is the
    /// monotonic clock of `std`'s `Instant` except under tokio's paused test
    /// clock (its `test-util` feature), where a paused and advanced clock
    /// applies too.
    ///
    /// # Errors
    /// The [`LockLoss`] that ended the hold.
    pub fn check(&self) -> Result<(), LockLoss> {
        if let Some(loss) = *self.inner.lost.borrow() {
            return Err(loss);
        }
        match self.loss_now() {
            None => Ok(()),
            Some(loss) => Err(self.mark_lost(loss)),
        }
    }

    /// Whether the hold can still be trusted (see [`Hold::check`], the lease
    /// rule included: `false` once the server has not been heard from on the
    /// node's session for longer than the session timeout). No I/O: a node
    /// deleted by hand is seen only once [`Hold::lost`], a fenced write or a
    /// release has looked at it.
    pub fn is_valid(&self) -> bool {
        self.check().is_ok()
    }

    /// The reason the hold was lost, if it was found lost.
    pub fn loss(&self) -> Option<LockLoss> {
        self.check().err()
    }

    /// Ends a hold that was given back (released, or handed to the
    /// background cleaner): from now on every clone of it answers
    /// [`LockLoss::NotHeld`], so a fence taken before refuses its writes
    /// without sending them, and [`Hold::lost`] completes. Not a loss:
    /// nothing is logged or counted, the turn is left to the release, and
    /// a hold lost before keeps its first reason.
    ///
    /// A fenced write between its check and its send finishes queueing
    /// first (see [`send_gate::while_valid`](super::send_gate::while_valid)):
    /// once this returns, no write under the hold goes out.
    pub(crate) fn end(&self) {
        self.inner
            .given_back
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.gate.ending(|| {
            self.inner.lost.send_if_modified(|current| {
                if current.is_some() {
                    return false;
                }
                *current = Some(LockLoss::NotHeld);
                true
            })
        });
    }

    /// Records that the hold is lost (the first reason wins) and returns the
    /// reason in force.
    pub fn mark_lost(&self, loss: LockLoss) -> LockLoss {
        let mut kept = loss;
        let first = self.inner.lost.send_if_modified(|current| match current {
            Some(first) => {
                kept = *first;
                false
            }
            None => {
                tracing::info!(node = %self.inner.node.path(), %loss, "hold lost");
                telemetry::hold_lost(&self.inner.label, loss.to_string());
                *current = Some(loss);
                true
            }
        });
        if first {
            // A lost hold does not hold back the next task of this process.
            self.give_turn_back();
        }
        kept
    }

    fn loss_now(&self) -> Option<LockLoss> {
        if let Some(bound) = self
            .running()
            .and_then(|running| running.passed(tokio::time::Instant::now()))
        {
            return Some(LockLoss::BoundPassed(bound));
        }
        loss_of(&self.inner.framework, &self.inner.node, self.inner.epoch)
    }

    /// The framework's current session if it is the one that created the
    /// node (always the current session for a persistent node).
    pub fn session(&self) -> Option<Session> {
        session_of(&self.inner.framework, &self.inner.node)
    }

    /// Completes when the hold can no longer be trusted, with the reason: an
    /// error connection state, its session replaced, the node deleted
    /// (watched on ZooKeeper), the framework closed, the lease run out (see
    /// [`Hold::check`]), or a loss found by anyone else holding a clone. Run it beside the protected work, e.g.
    /// in a `select!`, and stop when it fires.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes (dropping it drops its watch).
    pub fn lost(&self) -> impl Future<Output = LockLoss> + Send + 'static {
        let hold = self.clone();
        async move { hold.wait_lost(true).await }
    }

    /// Completes when the hold is found lost without looking at its node:
    /// for a release, whose own delete would otherwise count as a loss.
    pub(crate) async fn loss_without_node_watch(&self) -> LockLoss {
        self.wait_lost(false).await
    }

    /// Waits for the loss of the hold; with `watch_node`, a deletion of its
    /// node (watched on ZooKeeper) counts too.
    async fn wait_lost(&self, watch_node: bool) -> LockLoss {
        let framework = self.inner.framework.clone();
        let mut states = framework.state_watcher();
        let mut latch = self.inner.lost.subscribe();
        let closed = framework.closed();
        tokio::pin!(closed);
        loop {
            states.get_and_update();
            latch.borrow_and_update();
            if let Err(loss) = self.check() {
                return loss;
            }
            let deleted = async {
                if watch_node {
                    watch_deletion(self.clone()).await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            // Looks again when the lease would run out, unless the server
            // is heard from meanwhile.
            let lease_end = self.session().and_then(|session| {
                self.inner.node.is_ephemeral().then(|| {
                    let client = session.client();
                    last_heard(client) + client.session_timeout() + Duration::from_millis(1)
                })
            });
            let lease = async move {
                match lease_end {
                    Some(end) => tokio::time::sleep_until(end).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = deleted => return self.mark_lost(LockLoss::NodeDeleted),
                _ = states.changed() => {}
                _ = latch.changed() => {}
                () = lease => {}
                _ = &mut closed => return self.mark_lost(LockLoss::Closed),
            }
        }
    }
}

impl Fenced for Hold {
    fn path(&self) -> &str {
        Hold::path(self)
    }

    fn gate(&self) -> &SendGate {
        &self.inner.gate
    }

    fn check(&self) -> Result<(), LockLoss> {
        Hold::check(self)
    }
}

impl FencedHold for Hold {
    fn framework(&self) -> &Framework {
        Hold::framework(self)
    }

    fn session(&self) -> Option<Session> {
        Hold::session(self)
    }

    fn mark_lost(&self, loss: LockLoss) -> LockLoss {
        Hold::mark_lost(self, loss)
    }
}

impl Drop for HoldInner {
    fn drop(&mut self) {
        telemetry::hold_ended(&self.label, self.granted.elapsed());
        // A share dropped without a release still leaves its node.
        if self.share.get().is_some_and(|leave| leave()) {
            self.framework.delete_in_background(self.node.path());
        }
    }
}

/// Completes when the hold's node is deleted. The session is held for each
/// request only, never while waiting for the watch, so that a forgotten
/// `lost()` future cannot keep a session open after `close()`. Connection
/// trouble and a session's end show up as state changes, which the caller
/// watches; this then waits forever.
async fn watch_deletion(hold: Hold) {
    loop {
        let watched = {
            let Some(session) = hold.session() else {
                return std::future::pending().await;
            };
            session.client().check_and_watch_stat(hold.path()).await
        };
        match watched {
            Ok((None, _)) => return,
            Ok((Some(_), watcher)) => match watcher.changed().await.event_type {
                zk::EventType::NodeDeleted => return,
                zk::EventType::Session => return std::future::pending().await,
                // Data changed (a revocation request, say): watch again.
                _ => continue,
            },
            Err(_) => return std::future::pending().await,
        }
    }
}

/// Ends `hold` when a bound passes, unless it ends first: a task of its own
/// that holds the hold weakly (a dropped hold is not kept alive) and wakes
/// at the next end as things stand, or when the hold ends otherwise.
fn enforce(weak: std::sync::Weak<HoldInner>) {
    tokio::spawn(async move {
        // What was last published, and when.
        let mut published = Duration::ZERO;
        // When progress was last written; the grant (the bounds' start)
        // counts as the first write: a hold shorter than a quarter of its
        // silence bound publishes nothing.
        let mut published_at: Option<Instant> = None;
        let written = Written::new();
        if let Some(hold) = Hold::upgrade(&weak) {
            // A node this acquire created (not passed on, not shared) has
            // its first version; any other is read before the first write.
            if hold.fencing_token().pass() == 0 && hold.inner.share.get().is_none() {
                written.set(0);
            }
        }
        loop {
            let (wake, at_bound, mut ended) = {
                let Some(hold) = Hold::upgrade(&weak) else {
                    return;
                };
                let Some(running) = hold.running() else {
                    return;
                };
                if hold.is_given_back() {
                    // Released or passed on: the node is the release's.
                    return;
                }
                match hold.check() {
                    Ok(()) => {}
                    Err(LockLoss::BoundPassed(bound)) => {
                        hold.end_by_bound(bound);
                        return;
                    }
                    // The node is gone: deleted, or with its session.
                    Err(
                        LockLoss::NodeDeleted
                        | LockLoss::SessionReplaced
                        | LockLoss::Closed
                        | LockLoss::NotHeld,
                    ) => return,
                    // Lost otherwise first (a suspension, the lease, a
                    // revocation): a stuck holder never releases, and its
                    // node stays while its session lives. At the bound it
                    // goes, as it would have.
                    Err(_) => {
                        if let Some(bound) = running.passed(Instant::now()) {
                            hold.end_by_bound(bound);
                            return;
                        }
                    }
                }
                let Some((end, _)) = running.next_end() else {
                    return;
                };
                let mut wake = end;
                if let (Some(data), Some(silence)) =
                    (&running.publish, running.bounds().max_silence())
                {
                    let quarter = silence / 4;
                    let now = Instant::now();
                    let last = published_at.unwrap_or(running.start);
                    let progress = running.last_progress() - running.start;
                    if now >= last + quarter
                        && progress > published
                        && publish(&hold, data, running.last_progress(), &written)
                    {
                        published = progress;
                        published_at = Some(now);
                    }
                    // The next turn a quarter after the last write, or,
                    // with nothing said since, a quarter from now (never a
                    // turn every tick while the holder is silent).
                    let last = published_at.unwrap_or(running.start);
                    let next = if now >= last + quarter {
                        now + quarter
                    } else {
                        last + quarter
                    };
                    wake = wake.min(next);
                }
                (wake, wake == end, hold.ended())
            };
            // The bound's end is met to the microsecond (the next waiter
            // waits on it); a publication's turn, on the timer alone.
            let sleep = async {
                if at_bound {
                    wake_at(wake).await;
                } else {
                    tokio::time::sleep_until(wake).await;
                }
            };
            tokio::select! {
                () = sleep => {}
                _ = ended.changed() => {}
            }
        }
    });
}

/// How long before an instant [`wake_at`] has tokio's timer wake it.
const WAKE_EARLY: Duration = Duration::from_millis(1);
/// The most yields [`wake_at`] spends waiting out the rest.
const WAKE_YIELDS: u32 = 20_000;

/// Completes at `at` on tokio's clock, to within a few microseconds rather
/// than the timer's granularity: tokio's timer rounds a deadline up to its
/// next millisecond and fires it when its driver next turns, so a bound
/// would end up to a millisecond or two late, and the next waiter with it.
/// The timer wakes this [`WAKE_EARLY`] before `at`; the rest is spent
/// yielding to the runtime (other tasks and the I/O driver run meanwhile),
/// bounded by [`WAKE_YIELDS`]. A clock that does not move across a yield
/// is paused (tests, the simulator: it only advances when the runtime is
/// idle), and the timer alone is used.
async fn wake_at(at: Instant) {
    if at
        .checked_sub(WAKE_EARLY)
        .is_some_and(|early| early > Instant::now())
    {
        tokio::time::sleep_until(at - WAKE_EARLY).await;
    }
    let mut last = Instant::now();
    for _ in 0..WAKE_YIELDS {
        if last >= at {
            return;
        }
        tokio::task::yield_now().await;
        let now = Instant::now();
        if now == last {
            break;
        }
        last = now;
    }
    tokio::time::sleep_until(at).await;
}

/// The node's data version a publication expects: the write is
/// conditional on it, so that anything else written into the node (a
/// revocation request, above all) is never overwritten.
#[derive(Clone)]
struct Written(Arc<std::sync::atomic::AtomicI64>);

impl Written {
    /// A write is on its way.
    const IN_FLIGHT: i64 = -1;
    /// Someone else wrote the node: publication has stopped for the hold.
    const STOPPED: i64 = -2;
    /// A write failed without an answer: read the version first.
    const UNKNOWN: i64 = -3;

    fn new() -> Self {
        Written(Arc::new(std::sync::atomic::AtomicI64::new(Self::UNKNOWN)))
    }

    fn set(&self, value: i64) {
        self.0.store(value, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Writes `progress` (the last progress, on tokio's clock) into the
/// identity `data` of `hold`'s node, on its session, without waiting, if
/// no write is on its way and nobody else has written the node since the
/// last one (`written`: the write is conditional on the node's version;
/// the first one, and one after a failure, reads the version first and
/// goes ahead only if the node still holds an identity). Returns whether
/// a write was started.
fn publish(hold: &Hold, data: &[u8], progress: Instant, written: &Written) -> bool {
    let expected = written.0.load(std::sync::atomic::Ordering::SeqCst);
    if expected == Written::IN_FLIGHT || expected == Written::STOPPED {
        return false;
    }
    let Some(session) = hold.session() else {
        return false;
    };
    let ago = Instant::now().saturating_duration_since(progress);
    let at = std::time::SystemTime::now()
        .checked_sub(ago)
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let Some(data) = crate::identity::with_progress(data, at) else {
        return false;
    };
    written.set(Written::IN_FLIGHT);
    let client = session.client().clone();
    let path = hold.path().to_owned();
    let written = written.clone();
    tokio::spawn(async move {
        let version = if expected == Written::UNKNOWN {
            match client.get_data(&path).await {
                Ok((now, stat)) if crate::identity::HolderIdentity::parse(&now).is_some() => {
                    stat.version
                }
                Ok(_) => {
                    tracing::info!(node = %path, "the node holds something else than its identity (a revocation request?): progress no longer published");
                    written.set(Written::STOPPED);
                    return;
                }
                Err(err) => {
                    tracing::debug!(%err, node = %path, "progress not published");
                    written.set(Written::UNKNOWN);
                    return;
                }
            }
        } else {
            i32::try_from(expected).unwrap_or(i32::MAX)
        };
        match client.set_data(&path, &data, Some(version)).await {
            Ok(stat) => written.set(i64::from(stat.version)),
            Err(zk::Error::BadVersion) => {
                tracing::info!(node = %path, "someone else wrote the node (a revocation request?): progress no longer published");
                written.set(Written::STOPPED);
            }
            Err(err) => {
                tracing::debug!(%err, node = %path, "progress not published");
                written.set(Written::UNKNOWN);
            }
        }
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bound never ends early: on a live clock `wake_at` returns at or
    /// after its instant, whatever part the timer and the yields played.
    #[tokio::test]
    async fn wake_at_never_returns_before_its_instant() {
        for micros in [0u64, 300, 999, 1_000, 1_700, 2_500, 10_000] {
            let at = Instant::now() + Duration::from_micros(micros);
            wake_at(at).await;
            let now = Instant::now();
            assert!(now >= at, "woke {:?} early", at - now);
        }
    }

    /// On a paused clock (tests, the simulator) the yields see a clock
    /// that does not move and leave the rest to the timer: `wake_at`
    /// returns at its instant, or at the timer's next millisecond, without
    /// spinning its yields out (which would keep a paused clock still).
    #[tokio::test(start_paused = true)]
    async fn wake_at_on_a_paused_clock_uses_the_timer() {
        let start = Instant::now();
        let at = start + Duration::from_millis(1500);
        wake_at(at).await;
        assert_eq!(Instant::now(), at);
        // Within the early window: no timer before, the timer after.
        let at = Instant::now() + Duration::from_micros(400);
        wake_at(at).await;
        let now = Instant::now();
        assert!(
            now >= at && now < at + Duration::from_millis(1),
            "{:?}",
            now - at
        );
    }
}
