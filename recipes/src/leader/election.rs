//! [`Election`]: what a latch and a selector share. One participant of one
//! election path: the lock engine that queues its node, the node data (its
//! id), and its published status (started, the current term, closed) as a
//! `watch` channel, read by value only.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::watch;
use tracing::Instrument;
use zk_curator_framework::lock_internals::{
    until_held, Acquire, Hold, Layout, LockInternals, LockInternalsDriver, Wait,
};
use zk_curator_framework::{Error, Framework, LockLoss, Result};

use super::participant::{read_participants, Participant};
use super::proclaim::Proclaimer;
use super::revocation::Revocation;
use super::term::{LeaderTerm, Leadership};
use crate::layout::mutex_lock_name;

/// The queue discipline of an election: the lock engine's standard rule
/// (the first participant leads; each waiter watches only the node right
/// ahead of it, so a departure wakes one waiter), with every participant
/// owning a node of its own, as in Curator, even several of one framework:
/// elections list their participants, and a candidate parked in the
/// engine's in-process queue would be missing from that list.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ElectionDriver(Layout);

impl LockInternalsDriver for ElectionDriver {
    fn layout(&self) -> Layout {
        self.0
    }
}

/// What a participant's status and its leadership streams need of a
/// term: telling terms apart (clones of one term are equal), and whether
/// one is still valid. A [`LeaderTerm`]; in the model test, a stand-in.
pub(crate) trait Term: Clone + PartialEq + Send + Sync + 'static {
    /// Whether the term can still be trusted (see [`Hold::is_valid`](crate::Hold::is_valid)).
    fn is_valid(&self) -> bool;
}

impl Term for LeaderTerm {
    fn is_valid(&self) -> bool {
        Hold::is_valid(self)
    }
}

/// A participant's published state. Every change is one of the methods
/// below, made in a `send_if_modified` that notifies the readers exactly
/// when they return `true`.
#[derive(Clone, Debug)]
pub(crate) struct Status<T = LeaderTerm> {
    pub(crate) started: bool,
    /// The current term, while leader.
    pub(crate) term: Option<T>,
    /// Set once closed.
    pub(crate) closed: bool,
    /// Whether a leader's streams end with a last [`Leadership::NotLeader`]
    /// (set with `closed`; the latch's
    /// [`CloseMode::NotifyLeader`](super::CloseMode::NotifyLeader)).
    pub(crate) notify_leader: bool,
    /// Why the last campaign failed, when waiting cannot mend it (no
    /// permission to create the node, say): `await_leadership` answers it
    /// instead of waiting on. The campaign goes on trying; a term clears it.
    pub(crate) failure: Option<Error>,
}

impl<T> Default for Status<T> {
    fn default() -> Self {
        Status {
            started: false,
            term: None,
            closed: false,
            notify_leader: false,
            failure: None,
        }
    }
}

impl<T: Term> Status<T> {
    /// The leadership this status shows: the current term, if it is still
    /// valid. A term lost but not yet withdrawn is not leadership.
    pub(crate) fn leading(&self) -> Option<&T> {
        self.term.as_ref().filter(|term| term.is_valid())
    }

    /// Closes (leadership is no longer reported), a leader's streams ending
    /// with a last [`Leadership::NotLeader`] if `notify_leader`: `false` if
    /// already closed.
    fn close(&mut self, notify_leader: bool) -> bool {
        if self.closed {
            return false;
        }
        self.closed = true;
        self.notify_leader = notify_leader;
        self.term = None;
        true
    }

    /// Reports `term` as the current one (and forgets a failure): `false`,
    /// nothing changed, once closed.
    fn publish(&mut self, term: &T) -> bool {
        if self.closed {
            return false;
        }
        self.term = Some(term.clone());
        self.failure = None;
        true
    }

    /// Stops reporting `term` as the current one: whether it was.
    fn unpublish(&mut self, term: &T) -> bool {
        if self.term.as_ref() != Some(term) {
            return false;
        }
        self.term = None;
        true
    }

    /// Records `err` as why campaigns fail: whether it is news.
    fn record_failure(&mut self, err: &Error) -> bool {
        if self.failure.as_ref() == Some(err) {
            return false;
        }
        self.failure = Some(err.clone());
        true
    }
}

/// What one campaign for leadership came to.
enum Campaign {
    /// Leader: the node that leads.
    Held(Hold),
    /// The participant was closed while waiting (its node is deleted in the
    /// background).
    Stopped,
    /// The engine gave up (its retry policy spent, the framework closed...).
    Failed(Error),
}

/// What keeping a lost term's place came to ([`Election::keep_place`]).
enum KeptPlace {
    /// The node holds again, for a new term.
    Term(Hold),
    /// The place is gone (the session ended, the node was deleted): the
    /// node goes in the background, a new campaign queues at the back.
    Gone,
    /// The participant was closed meanwhile (the node goes in the
    /// background).
    Stopped,
    /// The framework was closed.
    Closed,
}

/// Whether a term's loss leaves its node in place on a session that may
/// survive: the connection broke or entered an error state
/// ([`LockLoss::ConnectionState`]), or the lease ran out
/// ([`LockLoss::Stale`]). A term given up, whose node was deleted, whose
/// session is gone or whose framework is closed has no place to keep.
fn resumable(term: &LeaderTerm) -> bool {
    matches!(
        term.loss(),
        Some(LockLoss::ConnectionState(_) | LockLoss::Stale)
    ) && term.session().is_some()
}

/// One participant of one election.
///
/// `pub` only for the sealed trait behind
/// [`LeaderElection`](super::LeaderElection), which names it: it lives in a
/// private module, so nothing outside this crate can name it, and all it
/// offers is `pub(crate)`.
pub struct Election {
    internals: LockInternals,
    id: String,
    data: Vec<u8>,
    status: watch::Sender<Status>,
    /// The value proclaimed at the start of each term (`leader::proclaim`).
    proclaimer: Arc<Proclaimer>,
    /// Whether a term ends at a revocation request (`leader::revocation`).
    revocation: Revocation,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.status();
        f.debug_struct("Election")
            .field("path", &self.path())
            .field("id", &self.id)
            .field("started", &status.started)
            .field("term", &status.term)
            .field("closed", &status.closed)
            .finish()
    }
}

impl Election {
    /// A participant on `path` whose nodes are named `lock_name` in
    /// Curator's layout (in kazoo's, every election's nodes are a kazoo
    /// `Lock`'s, as kazoo's `Election` makes them) and carry `id` (the
    /// framework's default node data when `id` is empty). Checks everything
    /// that can be checked without sending anything.
    pub(crate) fn new(
        framework: Framework,
        path: &str,
        layout: Layout,
        lock_name: &str,
        id: String,
    ) -> Result<Self> {
        let lock_name = match layout {
            Layout::Curator => lock_name,
            _ => mutex_lock_name(layout),
        };
        let driver = Arc::new(ElectionDriver(layout));
        let internals = LockInternals::new(framework, path, lock_name, 1, driver)?;
        let data = id.as_bytes().to_vec();
        internals.check_node_data(&data)?;
        Ok(Election {
            internals,
            id,
            data,
            status: watch::Sender::new(Status::default()),
            proclaimer: Arc::default(),
            revocation: Revocation::default(),
        })
    }

    pub(crate) fn path(&self) -> &str {
        self.internals.base_path()
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn framework(&self) -> &Framework {
        self.internals.framework()
    }

    /// The participant's proclaimed value (`leader::proclaim`).
    pub(crate) fn proclaimer(&self) -> &Arc<Proclaimer> {
        &self.proclaimer
    }

    /// Whether the participant steps down on request (`leader::revocation`).
    pub(crate) fn revocation(&self) -> &Revocation {
        &self.revocation
    }

    /// The status now, by value.
    pub(crate) fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// The current term, if leader and the term is still valid.
    pub(crate) fn term(&self) -> Option<LeaderTerm> {
        self.status.borrow().leading().cloned()
    }

    pub(crate) fn has_leadership(&self) -> bool {
        self.term().is_some()
    }

    /// Marks the participant started.
    ///
    /// # Errors
    /// [`Error::Closed`] once closed; [`Error::InvalidArgument`] if already
    /// started.
    pub(crate) fn mark_started(&self, what: &str) -> Result<()> {
        let mut result = Ok(());
        self.status.send_if_modified(|status| {
            if status.closed {
                result = Err(Error::Closed);
                false
            } else if status.started {
                result = Err(Error::InvalidArgument(format!(
                    "the {what} is already started"
                )));
                false
            } else {
                status.started = true;
                true
            }
        });
        result
    }

    /// Marks the participant closed (leadership is no longer reported), a
    /// leader's streams ending with a last [`Leadership::NotLeader`] if
    /// `notify_leader`: `false` if it already was closed.
    pub(crate) fn mark_closed(&self, notify_leader: bool) -> bool {
        self.status
            .send_if_modified(|status| status.close(notify_leader))
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.status.borrow().closed
    }

    /// Completes once the participant is closed.
    pub(crate) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut status = self.status.subscribe();
        async move {
            // The borrow `wait_for` returns is dropped at once.
            let _ = status.wait_for(|status| status.closed).await;
        }
    }

    /// Takes part until the participant is closed or `candidate` stops:
    /// campaigns (after a failed campaign, again after a [`CampaignPauses`] pause
    /// if `candidate` wants to), publishes each term, has `candidate` lead
    /// it, then resigns it (the term withdrawn, marked lost, its node
    /// deleted), or, for a candidate that
    /// [keeps its place](Candidate::keeps_place) and a term lost to the
    /// connection, keeps the node and leads again on it with a new term
    /// once the connection is back on the same session
    /// ([`keep_place`](Self::keep_place)). The one campaign loop of every
    /// recipe; a closed framework closes the participant. Returns the
    /// outcome of the last resignation, when the loop stops with a term.
    ///
    /// # Errors
    /// As [`resign`](Self::resign), for the term it stopped with.
    pub(crate) async fn run(&self, candidate: &mut impl Candidate) -> Result<()> {
        let mut backoff = CampaignPauses::new();
        // The node of a term lost to a suspension, taken up again.
        let mut resumed: Option<Hold> = None;
        loop {
            let campaign = match resumed.take() {
                Some(hold) => Campaign::Held(hold),
                None => self.campaign().await,
            };
            let hold = match campaign {
                Campaign::Held(hold) => hold,
                Campaign::Stopped => return Ok(()),
                Campaign::Failed(Error::Closed) => {
                    tracing::info!("the framework is closed; so is the participant");
                    self.mark_closed(candidate.notify_leader_when_framework_closes());
                    return Ok(());
                }
                Campaign::Failed(err) => {
                    let give_up = || {
                        tracing::error!(%err, "could not queue for leadership; giving up");
                        self.record_failure(&err, true);
                    };
                    if !candidate.campaign_again_after(&err, give_up) {
                        return Ok(());
                    }
                    tracing::warn!(%err, "could not queue for leadership; trying again");
                    self.record_failure(&err, false);
                    if !backoff.wait(self).await {
                        return Ok(());
                    }
                    continue;
                }
            };
            backoff.reset();
            let term = LeaderTerm::new(hold);
            // Made before the term shows (see `Candidate::lead`).
            let lead = candidate.lead(term.clone());
            if !self.publish(&term) {
                return self.resign(&term).await;
            }
            tracing::info!(node = %term.node().path(), token = %term.fencing_token(), "leadership gained");
            self.proclaimer.on_term(&term);
            self.revocation.on_term(&term);
            let next = lead.await;
            if next == Next::Campaign && candidate.keeps_place() && resumable(&term) {
                self.unpublish(&term);
                match self.keep_place(&term).await {
                    KeptPlace::Term(hold) => resumed = Some(hold),
                    KeptPlace::Gone => {}
                    KeptPlace::Stopped => return Ok(()),
                    KeptPlace::Closed => {
                        tracing::info!("the framework is closed; so is the participant");
                        self.mark_closed(candidate.notify_leader_when_framework_closes());
                        return Ok(());
                    }
                }
                continue;
            }
            let resigned = self.resign(&term).await;
            match next {
                Next::Stop => return resigned,
                Next::Campaign => {
                    if let Err(err) = resigned {
                        tracing::warn!(%err, "the term's node could not be deleted");
                    }
                }
            }
        }
    }

    /// After `term` was lost to the connection (see [`resumable`]), keeps
    /// its node in its place until the connection is back on the same
    /// session, then takes it up again as a new term's if it is still
    /// first, or waits in its place until it is
    /// ([`LockInternals::resume`]). The lost term stays lost: the new term
    /// is a new hold, with a greater token (the node's zxid, the next
    /// per-node count). If the session ended, the node is gone, or the
    /// participant is closed meanwhile, the node goes in the background (a
    /// new campaign queues at the back).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped before it returns, it leaves the node to
    /// its session (`run` is only ever stopped by a close, which it
    /// watches).
    async fn keep_place(&self, term: &LeaderTerm) -> KeptPlace {
        tracing::info!(node = %term.node().path(), loss = ?term.loss(), "leadership lost to the connection; keeping our place until it is back");
        let resumed = tokio::select! {
            biased;
            () = self.stopped() => None,
            resumed = self.internals.resume(term) => Some(resumed),
        };
        let kept = match resumed {
            Some(Ok(Some(hold))) => return KeptPlace::Term(hold),
            None => KeptPlace::Stopped,
            Some(Ok(None)) => {
                tracing::info!(node = %term.node().path(), "our place is gone; queueing again");
                KeptPlace::Gone
            }
            Some(Err(Error::Closed)) => KeptPlace::Closed,
            Some(Err(err)) => {
                tracing::warn!(node = %term.node().path(), %err, "could not take our place up again; queueing anew");
                KeptPlace::Gone
            }
        };
        term.release_in_background();
        kept
    }

    /// Queues a node and waits until it leads, or the participant is closed.
    ///
    /// # Cancel safety
    /// Cancel safe: a node still waiting is deleted in the background.
    async fn campaign(&self) -> Campaign {
        let acquire = until_held(|| {
            let request = Acquire::new().data(&self.data).wait(Wait::Forever);
            self.internals.acquire(request)
        });
        tokio::select! {
            biased;
            () = self.stopped() => Campaign::Stopped,
            held = acquire => match held {
                Ok(hold) => Campaign::Held(hold),
                Err(err) => Campaign::Failed(err),
            },
        }
    }

    /// Publishes `term` as the current one: `false` (nothing published) if
    /// the participant was closed meanwhile.
    fn publish(&self, term: &LeaderTerm) -> bool {
        self.status.send_if_modified(|status| status.publish(term))
    }

    /// Forgets a recorded failure (a new campaign begins).
    pub(crate) fn clear_failure(&self) {
        self.status
            .send_if_modified(|status| status.failure.take().is_some());
    }

    /// Records why a campaign failed, if waiting cannot mend it (see
    /// [`Status::failure`]): the participant gave up (`gave_up`), or the
    /// failure is not transient (the connection, the session), which is
    /// only retried.
    fn record_failure(&self, err: &Error, gave_up: bool) {
        if err.is_transient() && !gave_up {
            return;
        }
        self.status
            .send_if_modified(|status| status.record_failure(err));
    }

    /// Stops reporting `term` as the current one.
    fn unpublish(&self, term: &LeaderTerm) {
        self.status
            .send_if_modified(|status| status.unpublish(term));
    }

    /// Ends `term`: no longer reported, marked lost
    /// ([`LockLoss::NotHeld`]), then its node deleted (see
    /// [`LockInternals::release`]). A term already lost, or a framework
    /// closed, has nothing left to give back: its node goes in the
    /// background, as a lost lock's release does, and this returns at once,
    /// whatever the connection does (a close does not wait for a
    /// reconnection).
    ///
    /// # Errors
    /// Errors no retry can fix, such as [`Error::NoAuth`].
    async fn resign(&self, term: &LeaderTerm) -> Result<()> {
        self.unpublish(term);
        if let Err(loss) = term.check() {
            tracing::info!(node = %term.node().path(), %loss, "the term was lost; its node goes in the background");
            term.release_in_background();
            return Ok(());
        }
        // Over for every clone of the term before its node goes, so that no
        // clone is still valid once someone else can lead (a term already
        // lost keeps its first reason).
        term.mark_lost(LockLoss::NotHeld);
        let span =
            tracing::info_span!("leader.resign", path = %self.path(), node = %term.node().path());
        let released = self.internals.release(term).instrument(span.clone()).await;
        match released {
            Ok(()) => {
                tracing::info!(parent: &span, token = %term.fencing_token(), "leadership given up");
                Ok(())
            }
            Err(Error::LockLost { .. } | Error::Closed) => Ok(()),
            Err(err) => {
                tracing::warn!(parent: &span, %err, "giving leadership up failed");
                Err(err)
            }
        }
    }

    /// Waits until leader with a valid term.
    ///
    /// # Errors
    /// [`Error::NotStarted`] if never started; [`Error::Closed`] once closed
    /// (or its framework is).
    pub(crate) async fn await_leadership(&self) -> Result<LeaderTerm> {
        let mut status = self.status.subscribe();
        loop {
            let now = status.borrow_and_update().clone();
            if now.closed {
                return Err(Error::Closed);
            }
            if !now.started {
                return Err(Error::NotStarted);
            }
            // A term lost but not yet withdrawn is not leadership: its
            // withdrawal is a change, waited for below.
            if let Some(term) = now.leading() {
                return Ok(term.clone());
            }
            if let Some(err) = now.failure {
                return Err(err);
            }
            if status.changed().await.is_err() {
                return Err(Error::Closed);
            }
        }
    }

    /// As [`await_leadership`](Self::await_leadership), for at most
    /// `timeout`: `None` if it passes first.
    pub(crate) async fn await_leadership_timeout(
        &self,
        timeout: Duration,
    ) -> Result<Option<LeaderTerm>> {
        match tokio::time::timeout(timeout, self.await_leadership()).await {
            Ok(result) => result.map(Some),
            Err(_elapsed) => Ok(None),
        }
    }

    /// The current leadership, then every change (see
    /// [`LeaderLatch::leadership_changes`](super::LeaderLatch::leadership_changes)).
    pub(crate) fn changes(&self) -> impl Stream<Item = Leadership> + Send + 'static {
        changes(self.status.subscribe()).map(|leading| match leading {
            Some(term) => Leadership::Leader(term),
            None => Leadership::NotLeader,
        })
    }

    pub(crate) async fn participants(&self) -> Result<Vec<Participant>> {
        read_participants(&self.internals).await
    }

    pub(crate) async fn leader(&self) -> Result<Option<Participant>> {
        Ok(self.participants().await?.into_iter().next())
    }

    /// [`participants`](Self::participants) as of now (see [`crate::fresh`]).
    pub(crate) async fn synced_participants(&self) -> Result<Vec<Participant>> {
        crate::fresh::synced(self.framework(), self.path(), || self.participants()).await
    }

    /// [`leader`](Self::leader) as of now.
    pub(crate) async fn synced_leader(&self) -> Result<Option<Participant>> {
        Ok(self.synced_participants().await?.into_iter().next())
    }
}

/// The leadership `status` shows now, then every change, as the current
/// term (`None`: not leader); the stream behind [`Election::changes`].
///
/// Each value comes from a look at the status made when it is asked for,
/// never from an earlier one, so a term is handed out only while it is the
/// current one and still valid (a term lost but not yet withdrawn is not
/// leadership, as for [`Status::leading`]). Changes between two looks are
/// merged, but the end of a term is always handed out before the next.
fn changes<T: Term>(status: watch::Receiver<Status<T>>) -> impl Stream<Item = Option<T>> + Send {
    let state = Changes {
        status,
        last: None,
        done: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        state.next().await.map(|leading| (leading, state))
    })
}

/// The state of one leadership stream.
struct Changes<T> {
    status: watch::Receiver<Status<T>>,
    /// The last value handed out (`Some(None)`: not leader).
    last: Option<Option<T>>,
    done: bool,
}

impl<T: Term> Changes<T> {
    async fn next(&mut self) -> Option<Option<T>> {
        while !self.done {
            if let Some(next) = self.look() {
                self.last = Some(next.clone());
                return Some(next);
            }
            if !self.done && self.status.changed().await.is_err() {
                self.done = true;
            }
        }
        None
    }

    /// What to hand out now, if anything, from the status as it is now.
    fn look(&mut self) -> Option<Option<T>> {
        let status = self.status.borrow_and_update();
        let was_leader = matches!(self.last, Some(Some(_)));
        if status.closed {
            self.done = true;
            return (status.notify_leader && was_leader).then_some(None);
        }
        let now = status.leading();
        match (&self.last, now) {
            (None, now) => Some(now.cloned()),
            (Some(Some(last)), Some(now)) if last == now => None,
            // The end of the last term (lost, withdrawn, or already
            // replaced: the next look finds its successor, if that still
            // leads then).
            (Some(Some(_)), _) => Some(None),
            (Some(None), now) => now.map(|term| Some(term.clone())),
        }
    }
}

/// What a recipe decides in its campaign loop ([`Election::run`]).
pub(crate) trait Candidate {
    /// Whether the leader's streams get a last [`Leadership::NotLeader`]
    /// when the participant is closed because its framework is.
    fn notify_leader_when_framework_closes(&self) -> bool;

    /// Whether to campaign again, after a pause, once a campaign failed
    /// with `err`. If not, the loop stops, and the candidate calls
    /// `give_up` (which records the failure for `await_leadership`) once it
    /// no longer counts as campaigning: whoever sees the failure and asks
    /// for a new campaign must find the old one over.
    fn campaign_again_after(&mut self, err: &Error, give_up: impl FnOnce()) -> bool;

    /// Whether a term lost to the connection, on a session that survives
    /// it, keeps its node in its place, so that the participant leads again
    /// on it (a new term) once the connection is back, if the node is still
    /// first (see [`Election::keep_place`]). If not, the node is given up,
    /// and the next campaign queues at the back. A latch keeps its place,
    /// as Curator's does.
    fn keeps_place(&self) -> bool {
        false
    }

    /// The work of one term. Called before the term is published (so it
    /// can note what came before the term), awaited once it is: it lasts
    /// until the term is to end, and says what comes next. What it decides
    /// is decided before the end of the term shows: the loop withdraws the
    /// term and deletes its node after it completes.
    fn lead(&mut self, term: LeaderTerm) -> impl Future<Output = Next> + Send + '_;
}

impl Election {
    /// Sets the participant's value and proclaims it if it leads (see
    /// [`LeaderElection::proclaim`](super::LeaderElection::proclaim)).
    pub(crate) async fn proclaim(&self, value: Vec<u8>) -> Result<()> {
        self.proclaimer().proclaim(value, || self.term()).await
    }

    /// Whether the participant steps down on request.
    pub(crate) fn set_revocable(&self, revocable: bool) {
        self.revocation().set_revocable(revocable, self.term());
    }

    /// Ends the current term as a step-down: whether it led.
    pub(crate) fn step_down_now(&self) -> bool {
        self.term().is_some_and(|term| Revocation::now(&term))
    }
}

/// What follows a term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Another campaign.
    Campaign,
    /// Nothing: the loop returns.
    Stop,
}

/// The pause between two failed campaigns: doubling from 100 ms to 5 s, and
/// back to the start after a term (the framework's
/// [`Backoff`](zk_curator_framework::retry::Backoff)).
#[derive(Debug)]
struct CampaignPauses {
    pauses: zk_curator_framework::retry::Pauses,
}

impl CampaignPauses {
    const SCHEDULE: zk_curator_framework::retry::Backoff =
        zk_curator_framework::retry::Backoff::new(
            Duration::from_millis(100),
            Duration::from_secs(5),
        );

    fn new() -> Self {
        CampaignPauses {
            pauses: Self::SCHEDULE.start(),
        }
    }

    fn reset(&mut self) {
        self.pauses.reset();
    }

    /// Waits the next pause: `false` if the participant was closed first.
    async fn wait(&mut self, election: &Election) -> bool {
        let pause = self.pauses.next_pause();
        tokio::select! {
            () = election.stopped() => false,
            () = tokio::time::sleep(pause) => true,
        }
    }
}

#[cfg(test)]
mod tests;
