//! [`LeaderObserver`]: who leads an election now, for anyone who asks,
//! participant or not, as a one-off read or as a stream of changes.
//!
//! # Why it works this way
//!
//! The leader of an election is the first node of its queue (the layout
//! rules of [`crate::layout`], the ones the recipes themselves follow). An
//! observer lists the election path once, reads that first node with a
//! watch on it, and then waits. Only the leader's departure (or a change of
//! its data) wakes it: a participant joining or leaving further back does
//! not, so a thousand observing sessions cost the ensemble one watch each
//! on one node, not a watch on the whole queue (no herd); and the streams
//! of one framework share one follower (one watch, one listing and one
//! read per change for all of them, see [`LeaderObserver::changes`]). When the watched node
//! goes, the observer lists again and watches the new first node. Only an
//! election without participants is watched as a whole (its children, or
//! the creation of its path), since any newcomer leads it.
//!
//! An observer also watches the election path's own data, where a leader
//! proclaims its value ([`LeaderTerm::proclaim`](crate::LeaderTerm::proclaim)):
//! a new value wakes it to read that data again, and nothing else (the
//! watch on the leader stands, nothing is listed). That data is read again
//! only when its watch fires, so a change of leader costs no extra read.
//!
//! # What it says when it cannot know
//!
//! While the connection is down nobody can tell who leads: the leader may
//! have gone meanwhile, and the watch that would say so cannot be
//! delivered. The stream then reports [`Observation::Unknown`] at once (from
//! the framework's connection state), and once connected again, on the
//! same session or a new one, it lists again before it reports anyone. A
//! leader whose node the observer has seen deleted is never reported again
//! as current: the deletion wakes the observer, which reports only what a
//! fresh listing and a successful read of the new first node show.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures::{FutureExt as _, Stream};
use tokio::sync::watch;
use tracing::Instrument;
use zk_curator_framework::lock_internals::{FencingToken, REVOKE_MESSAGE};
use zk_curator_framework::path::{join, validate_recipe_path};
use zk_curator_framework::retry::{Backoff, Pauses};
use zk_curator_framework::{
    zk, ConnectionState, Error, Framework, HolderIdentity, Result, Session, StateWatcher,
};

use super::data::Proclaimed;
use crate::layout::{election_queue, ElectionRecipe};

/// The leader of an election, as an observer read it from its node.
///
/// More fields may come, hence `#[non_exhaustive]`: read the fields, do
/// not build one.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObservedLeader {
    /// The participant id: the node's data as UTF-8 text (invalid bytes
    /// replaced), as in [`Participant::id`](crate::Participant::id).
    pub id: String,
    /// The value the leader advertises: what its term proclaimed
    /// ([`LeaderTerm::proclaim`](crate::LeaderTerm::proclaim),
    /// [`proclaimed`](Self::proclaimed) then true), or, until it proclaims
    /// anything, its node's data, the same bytes as [`id`](Self::id) (a
    /// Curator participant id, or the framework's holder identity JSON for
    /// a participant without one).
    pub value: Vec<u8>,
    /// Whether [`value`](Self::value) was proclaimed by the leader (rather
    /// than its node's data).
    pub proclaimed: bool,
    /// The creating process, when the node data is a [`HolderIdentity`].
    pub identity: Option<HolderIdentity>,
    /// The fencing token of the leader's term, the one
    /// [`LeaderTerm::fencing_token`](crate::LeaderTerm::fencing_token)
    /// gives the leader itself: its node's creation zxid, with the term's
    /// count on that node as the leader last proclaimed it. A latch that
    /// keeps its place through a suspension leads again on the same node,
    /// token `zxid.1`, and proclaims its value again at once; a leader that
    /// proclaims nothing shows as its node's zxid alone (`zxid.0`) in every
    /// term. Tokens grow from one term to the next.
    pub token: FencingToken,
    /// The full path of the leader's node (relative to the namespace).
    pub node_path: String,
    /// The leader's session (the node's ephemeral owner).
    pub session: i64,
    /// Which recipe's layout the election has.
    pub recipe: ElectionRecipe,
}

impl ObservedLeader {
    fn from_node(
        node_path: String,
        data: Vec<u8>,
        stat: &zk::Stat,
        recipe: ElectionRecipe,
        proclaimed: Option<&Proclaimed>,
    ) -> Self {
        let proclaimed =
            Proclaimed::of(proclaimed, zk_curator_framework::path::split(&node_path).1);
        let pass = proclaimed.as_ref().map_or(0, |(pass, _)| *pass);
        ObservedLeader {
            id: String::from_utf8_lossy(&data).into_owned(),
            identity: HolderIdentity::parse(&data),
            proclaimed: proclaimed.is_some(),
            value: proclaimed.map_or(data, |(_, value)| value),
            token: FencingToken::passed(stat.czxid, pass),
            node_path,
            session: stat.ephemeral_owner,
            recipe,
        }
    }

    /// Whether two observations name the same term (the same node and
    /// token), whatever its value.
    pub fn same_term(&self, other: &ObservedLeader) -> bool {
        self.node_path == other.node_path && self.token == other.token
    }
}

/// What an observer reports about an election: who leads, nobody, or that
/// it cannot tell now.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Observation {
    /// This participant leads (its node was first in the queue, and still
    /// there when read).
    Leader(ObservedLeader),
    /// The election has no participants.
    NoLeader,
    /// The observer cannot tell: it is not connected to ZooKeeper (or its
    /// last read failed), so the last leader it reported may be gone.
    Unknown,
}

impl Observation {
    /// The leader, when one is known.
    pub fn leader(&self) -> Option<&ObservedLeader> {
        match self {
            Observation::Leader(leader) => Some(leader),
            Observation::NoLeader | Observation::Unknown => None,
        }
    }

    /// Whether this says who leads (or that nobody does).
    pub fn is_known(&self) -> bool {
        !matches!(self, Observation::Unknown)
    }
}

/// Watches who leads an election, from anywhere: a participant or not, on
/// either of Curator's election layouts ([`LeaderLatch`](crate::LeaderLatch)'s
/// `latch-` nodes, [`LeaderSelector`](crate::LeaderSelector)'s `lock-`
/// nodes).
///
/// [`changes`](Self::changes) is a stream of [`Observation`]s: the leader
/// now, then each change, with the leader's id, value, fencing token and
/// node. It costs one watch on the leader's node, one on the election
/// path's data (for proclaimed values), and one listing each time the
/// leader's node goes (see the module's notes on the herd), reports
/// [`Observation::Unknown`] while disconnected, and survives connection
/// loss and session expiry. [`leader`](Self::leader) is a one-off read.
///
/// Curator's `getLeader()` and kazoo's `contenders()` are one-off reads
/// only; this is the counterpart of etcd's `Observe`.
///
/// # Examples
///
/// ```no_run
/// use futures::StreamExt;
/// use zk_curator::{LeaderObserver, Observation};
/// # async fn example(framework: zk_curator::Framework) -> zk_curator::Result<()> {
/// let observer = LeaderObserver::new(framework, "/services/compactor/leader")?;
/// let mut changes = std::pin::pin!(observer.changes());
/// while let Some(seen) = changes.next().await {
///     match seen {
///         Observation::Leader(leader) => println!("{} leads (token {})", leader.id, leader.token),
///         Observation::NoLeader => println!("nobody leads"),
///         _ => println!("cannot tell now"),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaderObserver {
    framework: Framework,
    path: Arc<str>,
    recipe: Option<ElectionRecipe>,
}

impl fmt::Debug for LeaderObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderObserver")
            .field("path", &self.path)
            .field("recipe", &self.recipe)
            .finish()
    }
}

impl LeaderObserver {
    /// An observer of the election at `path`, whichever recipe runs it: each
    /// listing decides, as [`ElectionRecipe::of_nodes`] does (a latch's,
    /// unless only a selector's nodes are there). Nothing is sent yet.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a path no recipe accepts.
    pub fn new(framework: Framework, path: &str) -> Result<Self> {
        validate_recipe_path(path)?;
        Ok(LeaderObserver {
            framework,
            path: path.into(),
            recipe: None,
        })
    }

    /// An observer of the election at `path` run by `recipe`: only that
    /// recipe's nodes count. Nothing is sent yet.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a path no recipe accepts.
    pub fn with_recipe(framework: Framework, path: &str, recipe: ElectionRecipe) -> Result<Self> {
        let mut observer = Self::new(framework, path)?;
        observer.recipe = Some(recipe);
        Ok(observer)
    }

    /// The election path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The recipe given to [`with_recipe`](Self::with_recipe), if any.
    pub fn recipe(&self) -> Option<ElectionRecipe> {
        self.recipe
    }

    /// The framework the observer reads through.
    pub fn framework(&self) -> &Framework {
        &self.framework
    }

    /// Reads who leads now, once, without leaving a watch: `None` when the
    /// election has no participants.
    ///
    /// # Errors
    /// [`Error::Closed`] if the framework is closed; ZooKeeper errors that
    /// retrying could not overcome (such as [`Error::NoAuth`]).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn leader(&self) -> Result<Option<ObservedLeader>> {
        loop {
            let children = self.list(None).await?;
            let Some((recipe, first)) = self.first_of(&children) else {
                return Ok(None);
            };
            let node = join(&self.path, &first);
            // `None`: it went between the listing and the read; list again.
            if let Some((data, stat)) = self.read(&node).await? {
                let proclaimed = self.read(&self.path).await?;
                let proclaimed = proclaimed.and_then(|(data, _)| Proclaimed::decode(&data));
                return Ok(Some(ObservedLeader::from_node(
                    node,
                    data,
                    &stat,
                    recipe,
                    proclaimed.as_ref(),
                )));
            }
        }
    }

    /// The data of `path`, once, without a watch, under the retry policy
    /// (`None`: no such node).
    async fn read(&self, path: &str) -> Result<Option<(Vec<u8>, zk::Stat)>> {
        let read = self
            .framework
            .call_with_retry(|client| async move { client.get_data(path).await })
            .await;
        match read {
            Ok(read) => Ok(Some(read)),
            Err(Error::NoNode { .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Asks the leader to step down, and returns it (`None`: nobody leads):
    /// writes a step-down request naming its node into the election path's
    /// data, beside the value proclaimed there (kept). A leader made
    /// revocable ([`LeaderLatch::make_revocable`](crate::LeaderLatch::make_revocable),
    /// [`LeaderSelector::make_revocable`](crate::LeaderSelector::make_revocable))
    /// ends its term at once, and the next participant leads; others
    /// (Curator's among them) do not react. Unlike a `__REVOKE__` written
    /// into the leader's node (which a revocable leader also obeys), it
    /// leaves the participants' nodes alone: a Curator `LeaderLatch` queued
    /// behind the leader acts only on its predecessor's deletion, and a
    /// change of that node's data would leave it without a watch.
    ///
    /// # Errors
    /// [`Error::Closed`] if the framework is closed; ZooKeeper errors that
    /// retrying could not overcome (such as [`Error::NoAuth`] without
    /// permission to write the election path).
    ///
    /// # Cancel safety
    /// The request may or may not have been written when the future is
    /// dropped.
    pub async fn ask_leader_to_step_down(&self) -> Result<Option<ObservedLeader>> {
        let Some(leader) = self.leader().await? else {
            return Ok(None);
        };
        let target = zk_curator_framework::path::split(&leader.node_path).1;
        let path = self.path.to_string();
        loop {
            let Some((data, stat)) = self.read(&path).await? else {
                // The election is gone, and its leader with it.
                return Ok(Some(leader));
            };
            let now = Proclaimed::decode(&data);
            // Asked already (by an attempt retried after a lost reply).
            if now.as_ref().and_then(|p| p.step_down.as_deref()) == Some(target) {
                return Ok(Some(leader));
            }
            let request = super::data::encode_request(target, now.as_ref());
            let written = self
                .framework
                .call_with_retry(|client| {
                    let (path, request) = (path.clone(), request.clone());
                    async move { client.set_data(&path, &request, Some(stat.version)).await }
                })
                .await;
            match written {
                Ok(_) | Err(Error::NoNode { .. }) => {
                    tracing::info!(node = %leader.node_path, "asked the leader to step down");
                    return Ok(Some(leader));
                }
                // A value proclaimed meanwhile: kept, and asked again.
                Err(Error::BadVersion) => continue,
                Err(err) => return Err(err),
            }
        }
    }

    /// Who leads now, then every change, until the framework is closed (the
    /// stream then ends).
    ///
    /// The first item is the state when first polled; each later one
    /// differs from the one before (a new leader, a new value of the
    /// leader's node, nobody, or [`Observation::Unknown`]). Changes between
    /// two polls are merged: a consumer that is slow sees the latest state,
    /// not every step. While disconnected the stream reports `Unknown`; once
    /// connected again (the same session or a new one) it lists the election
    /// again and reports what it finds, even if that is the leader it
    /// reported before the loss. A read that fails for another reason
    /// (no permission to read the path, say) is reported as `Unknown` too,
    /// logged, and tried again after a pause (100 ms, doubling up to 5 s).
    ///
    /// # Shared by every stream of a framework
    ///
    /// The streams of one framework that observe the same election (the
    /// same path and [`recipe`](Self::recipe), from any observer on any
    /// clone of the framework) share one follower: one watch on the
    /// leader's node, one listing and one read per change, however many
    /// streams there are. The follower is a task started by the first such
    /// stream (on its runtime) and stopped when the last one is dropped. A
    /// stream that joins it later starts with the state the follower last
    /// read (still watched, so no change has been missed since), then each
    /// change as it comes. It holds the framework's session for each
    /// request only, so a stream left unpolled never holds up
    /// [`Framework::close`].
    ///
    /// # Cancel safety
    /// Cancel safe: a `next()` dropped before it returns loses nothing (the
    /// stream carries on where it was at the next poll), and dropping the
    /// stream only gives up its share of the follower (the last one to go
    /// stops it, and its watches are no longer waited on).
    pub fn changes(&self) -> impl Stream<Item = Observation> + Send + 'static {
        let follow = Follow::Start(self.clone());
        futures::stream::unfold(follow, |follow| follow.next())
    }

    /// The follower of this election on this framework: the running one,
    /// or a new one (started on the current runtime).
    fn feed(&self) -> Arc<Feed> {
        let feeds = self.framework.extension::<Feeds>();
        let key = (self.path.clone(), self.recipe);
        let mut feeds = feeds.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Forget the followers gone meanwhile (no stream left).
        feeds.retain(|_, feed| feed.strong_count() > 0);
        if let Some(feed) = feeds.get(&key).and_then(Weak::upgrade) {
            // A follower whose task ended with a framework still open (its
            // runtime was shut down) is replaced.
            if !feed.task.is_finished() || self.framework.is_closed() {
                return feed;
            }
        }
        let feed = Arc::new(Feed::start(self.clone()));
        feeds.insert(key, Arc::downgrade(&feed));
        feed
    }

    /// The children of the election path (none if it does not exist), on
    /// `session` if given, else on the current one.
    async fn list(&self, session: Option<&Session>) -> Result<Vec<String>> {
        let path = self.path.to_string();
        let op = |client: zk::Client| {
            let path = path.clone();
            async move { client.list_children(&path).await }
        };
        let listed = match session {
            Some(session) => self.framework.call_on_session(session, op).await,
            None => self.framework.call_with_retry(op).await,
        };
        match listed {
            Err(Error::NoNode { .. }) => Ok(Vec::new()),
            other => other,
        }
    }

    /// The recipe and the name of the first node of the queue among
    /// `children`, if there is one.
    fn first_of(&self, children: &[String]) -> Option<(ElectionRecipe, String)> {
        let recipe = self
            .recipe
            .unwrap_or_else(|| ElectionRecipe::of_nodes(children.iter().map(String::as_str)));
        let first = election_queue(children, recipe).into_iter().next()?;
        Some((recipe, first))
    }
}

/// The followers of a framework's streams, one per election observed
/// (kept as the framework's [extension](Framework::extension)).
#[derive(Default)]
struct Feeds(Mutex<HashMap<FeedKey, Weak<Feed>>>);

/// An election observed: its path, and the recipe asked for (if any).
type FeedKey = (Arc<str>, Option<ElectionRecipe>);

/// One follower: a task that follows an election and publishes each
/// observation, shared by the streams that hold it; the last one to drop
/// it stops the task.
struct Feed {
    /// The last observation (`None` until the first look).
    seen: watch::Receiver<Option<Observation>>,
    task: tokio::task::AbortHandle,
}

impl Feed {
    fn start(observer: LeaderObserver) -> Self {
        let (publish, seen) = watch::channel(None);
        let span = tracing::debug_span!("leader.observe", path = %observer.path);
        let mut observing = Observing {
            states: observer.framework.state_watcher(),
            observer,
            last: None,
            value: None,
            fallback: Vec::new(),
            pending: Pending::Reconnection,
            needs_look: true,
            pauses: PAUSES.start(),
            done: false,
        };
        let task = tokio::spawn(
            async move {
                while let Some(seen) = observing.next().await {
                    publish.send_replace(Some(seen));
                }
                // The framework is closed: the streams end with `publish`.
            }
            .instrument(span),
        );
        Feed {
            seen,
            task: task.abort_handle(),
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The state of one stream of [`LeaderObserver::changes`].
enum Follow {
    /// Not polled yet: joins the follower at the first poll (which may
    /// start it, on the runtime polling).
    Start(LeaderObserver),
    /// Following.
    Joined {
        feed: Arc<Feed>,
        seen: watch::Receiver<Option<Observation>>,
        /// The last observation this stream handed out.
        last: Option<Observation>,
    },
}

impl Follow {
    /// The next observation that differs from the last one this stream
    /// handed out, and the state after it; `None` once the framework is
    /// closed.
    async fn next(self) -> Option<(Observation, Follow)> {
        let (feed, mut seen, mut last) = match self {
            Follow::Start(observer) => {
                if observer.framework.is_closed() {
                    return None;
                }
                let feed = observer.feed();
                let mut seen = feed.seen.clone();
                // The state already read counts as new to this stream.
                seen.mark_changed();
                (feed, seen, None)
            }
            Follow::Joined { feed, seen, last } => (feed, seen, last),
        };
        loop {
            // Fails once the follower has ended: the framework is closed.
            seen.changed().await.ok()?;
            let now = seen.borrow_and_update().clone();
            if let Some(now) = now.filter(|now| last.as_ref() != Some(now)) {
                last = Some(now.clone());
                return Some((now, Follow::Joined { feed, seen, last }));
            }
        }
    }
}

/// The pause after a failed look: doubling from 100 ms to 5 s.
const PAUSES: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));

/// The follower of an election: what [`Feed`]'s task runs.
struct Observing {
    observer: LeaderObserver,
    states: StateWatcher,
    /// The last observation handed out.
    last: Option<Observation>,
    /// The proclaimed value last read, with the watch on the election
    /// path's data that says when it changes: read again only then (or on
    /// another session), so a change of leader costs no extra read.
    value: Option<ValueWatch>,
    /// The last leader's value were it to proclaim none: its node's data.
    fallback: Vec<u8>,
    /// What the next wait is for.
    pending: Pending,
    /// Whether to look again before waiting.
    needs_look: bool,
    pauses: Pauses,
    done: bool,
}

/// What a wait waits for, besides the connection state and the close.
enum Pending {
    /// The watch the last look left: on the leader's node, or (no leader)
    /// on the election path's children or its creation.
    Watch(Watch),
    /// A pause after a failed look.
    Pause(Duration),
    /// A connection.
    Reconnection,
}

/// The election path's data as last read, and its watch.
struct ValueWatch {
    /// The generation of the session the watch lives on.
    generation: u64,
    proclaimed: Option<Proclaimed>,
    /// Completes when the watch fires (the data changed, the path was
    /// created or deleted) or its session ends.
    fired: Pin<Box<dyn Future<Output = ()> + Send>>,
}

/// Waits for the value watch to fire, and forgets it then; never completes
/// without one.
async fn value_changed(value: &mut Option<ValueWatch>) {
    match value {
        Some(watch) => (&mut watch.fired).await,
        None => std::future::pending().await,
    }
    tracing::debug!("the value watch fired");
    *value = None;
}

/// A watch left by a look, and the session it lives on (by generation
/// only: a stream nobody polls must not keep a session open after the
/// framework's close, so the session is held for each request alone).
struct Watch {
    generation: u64,
    /// Completes when that session is no longer the framework's.
    gone: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// Completes when the watch fires: kept across waits woken by a new
    /// value only (so a new value does not cost the leader's watch).
    changed: Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>,
}

impl Watch {
    fn new(framework: &Framework, session: &Session, watcher: zk::OneshotWatcher) -> Self {
        Watch {
            generation: session.generation(),
            gone: Box::pin(framework.session_gone(session)),
            changed: Box::pin(watcher.changed()),
        }
    }
}

/// What one look found.
enum Look {
    /// Who leads, with the watch that reports the next change (boxed: the
    /// other variants are small).
    Seen(Box<(Observation, Watch)>),
    /// Not connected: nothing can be known now.
    Disconnected,
    /// The look failed for another reason; try again after a pause.
    Failed(Error),
    /// The framework is closed.
    Closed,
}

/// What woke a wait.
enum Wake {
    /// Something may have changed: look again.
    Look,
    /// The election path's data changed (a new value, perhaps): read it
    /// again; the leader's watch still stands.
    Value,
    /// The connection is down.
    Disconnected,
    /// The framework is closed.
    Closed,
}

fn connected(state: Option<ConnectionState>) -> bool {
    state.is_some_and(ConnectionState::is_connected)
}

impl Observing {
    /// The next observation that differs from the last one handed out;
    /// `None` once the framework is closed.
    async fn next(&mut self) -> Option<Observation> {
        while !self.done {
            if self.needs_look {
                self.needs_look = false;
                let seen = match self.look().await {
                    Look::Seen(seen) => {
                        let (seen, watch) = *seen;
                        self.pauses.reset();
                        self.pending = Pending::Watch(watch);
                        seen
                    }
                    Look::Disconnected => {
                        self.pending = Pending::Reconnection;
                        Observation::Unknown
                    }
                    Look::Failed(err) => {
                        if err.is_transient() {
                            tracing::debug!(%err, "cannot read the election now; trying again");
                        } else {
                            tracing::warn!(%err, "cannot read the election; trying again");
                        }
                        self.pending = Pending::Pause(self.pauses.next_pause());
                        Observation::Unknown
                    }
                    Look::Closed => {
                        self.done = true;
                        continue;
                    }
                };
                if let Some(seen) = self.hand_out(seen) {
                    return Some(seen);
                }
            }
            match self.wait().await {
                Wake::Look => self.needs_look = true,
                Wake::Value => match self.revalue().await {
                    Some(seen) => {
                        if let Some(seen) = self.hand_out(seen) {
                            return Some(seen);
                        }
                    }
                    None => self.needs_look = true,
                },
                Wake::Disconnected => {
                    self.pending = Pending::Reconnection;
                    if let Some(seen) = self.hand_out(Observation::Unknown) {
                        return Some(seen);
                    }
                }
                Wake::Closed => self.done = true,
            }
        }
        tracing::debug!("the framework is closed; the observation ends");
        None
    }

    /// `seen`, recorded as the last observation, if it differs from it.
    fn hand_out(&mut self, seen: Observation) -> Option<Observation> {
        if self.last.as_ref() == Some(&seen) {
            return None;
        }
        let span = tracing::info_span!("leader.observed", path = %self.observer.path);
        let _entered = span.enter();
        match &seen {
            Observation::Leader(leader) => tracing::info!(
                node = %leader.node_path,
                token = %leader.token,
                id = %leader.id,
                "a leader"
            ),
            Observation::NoLeader => tracing::info!("no leader: no participants"),
            Observation::Unknown => tracing::info!("the leader is unknown"),
        }
        self.last = Some(seen.clone());
        Some(seen)
    }

    /// Lists the election and reads its first node with a watch (or, with
    /// no participants, watches for the first to come), on the current
    /// session.
    async fn look(&mut self) -> Look {
        // A handle of its own (cheap): the look also borrows `self` mutably.
        let framework = &self.observer.framework.clone();
        if framework.is_closed() {
            return Look::Closed;
        }
        // Marked seen: a later change wakes the next wait.
        if !connected(self.states.get_and_update()) {
            return Look::Disconnected;
        }
        let Some(session) = framework.current_session() else {
            return Look::Disconnected;
        };
        let failed = |err: Error| match err {
            Error::Closed => Look::Closed,
            err => Look::Failed(err),
        };
        let path = self.observer.path.to_string();
        loop {
            let children = match self.observer.list(Some(&session)).await {
                Ok(children) => children,
                Err(err) => return failed(err),
            };
            let Some((recipe, first)) = self.observer.first_of(&children) else {
                // Nobody leads: any newcomer will, so the children are
                // watched (or the path's creation, if it is not there).
                let leads = |children: &[String]| self.observer.first_of(children).is_some();
                match watch_for_participants(framework, &session, &path, leads).await {
                    Ok(Some(watcher)) => {
                        return Look::Seen(Box::new((
                            Observation::NoLeader,
                            Watch::new(framework, &session, watcher),
                        )))
                    }
                    // Somebody came meanwhile.
                    Ok(None) => continue,
                    Err(err) => return failed(err),
                }
            };
            let node = join(&path, &first);
            let read = framework
                .call_on_session(&session, |client| {
                    let node = node.clone();
                    async move { client.get_and_watch_data(&node).await }
                })
                .await;
            match read {
                Ok((data, stat, watcher)) => {
                    let mut watch = Watch::new(framework, &session, watcher);
                    let proclaimed = match self.proclaimed_on(&session).await {
                        Ok(proclaimed) => proclaimed,
                        Err(err) => return failed(err),
                    };
                    // The leader's node changed or went before the value
                    // was read (its notification precedes that reply): what
                    // was read of it is out of date, so look again.
                    if (&mut watch.changed).now_or_never().is_some() {
                        continue;
                    }
                    let asked = data == REVOKE_MESSAGE;
                    let fallback = data.clone();
                    let mut leader =
                        ObservedLeader::from_node(node, data, &stat, recipe, proclaimed.as_ref());
                    // A leader asked to step down has `__REVOKE__` in its
                    // node until the node goes: it keeps the id it had.
                    if let (true, Some(Observation::Leader(last))) = (asked, &self.last) {
                        if last.same_term(&leader) {
                            leader.id.clone_from(&last.id);
                            leader.identity.clone_from(&last.identity);
                            if !leader.proclaimed {
                                leader.value.clone_from(&last.value);
                            }
                        }
                    }
                    if !asked {
                        self.fallback = fallback;
                    }
                    return Look::Seen(Box::new((Observation::Leader(leader), watch)));
                }
                // It went between the listing and the read: list again.
                Err(Error::NoNode { .. }) => continue,
                Err(err) => return failed(err),
            }
        }
    }

    /// The last leader reported, with the value the election path's data
    /// holds now (read again, with a watch), its own watch still standing:
    /// `None` when there is no such leader or the read fails (a full look
    /// follows then).
    async fn revalue(&mut self) -> Option<Observation> {
        let Pending::Watch(watch) = &self.pending else {
            return None;
        };
        if !matches!(self.last, Some(Observation::Leader(_))) {
            return None;
        }
        // The session the watch lives on, if it is still the framework's.
        let session = self
            .observer
            .framework
            .current_session()
            .filter(|session| session.generation() == watch.generation)?;
        let proclaimed = match self.proclaimed_on(&session).await {
            Ok(proclaimed) => proclaimed,
            Err(err) => {
                tracing::debug!(%err, "cannot read the value; looking again");
                return None;
            }
        };
        // The server sends a watch's notification before the reply to any
        // read it handles later: if the leader's node went before this
        // read, its watch has fired by now, and the leader is not reported
        // again (a full look follows).
        if let Pending::Watch(watch) = &mut self.pending {
            if (&mut watch.changed).now_or_never().is_some() {
                tracing::debug!("the leader's watch fired meanwhile; looking again");
                return None;
            }
        }
        let Some(Observation::Leader(last)) = &self.last else {
            return None;
        };
        let mut leader = last.clone();
        let name = zk_curator_framework::path::split(&leader.node_path).1;
        match Proclaimed::of(proclaimed.as_ref(), name) {
            Some((pass, value)) => {
                leader.value = value;
                leader.proclaimed = true;
                leader.token = FencingToken::passed(leader.token.get(), pass);
            }
            None => {
                leader.value.clone_from(&self.fallback);
                leader.proclaimed = false;
                leader.token = FencingToken::new(leader.token.get());
            }
        }
        Some(Observation::Leader(leader))
    }

    /// The value proclaimed in the election path's data, from the last read
    /// if its watch (on `session`) has not fired since, else read again
    /// with a watch.
    async fn proclaimed_on(&mut self, session: &Session) -> Result<Option<Proclaimed>> {
        if let Some(watch) = &mut self.value {
            let fired = (&mut watch.fired).now_or_never().is_some();
            if !fired && watch.generation == session.generation() {
                return Ok(watch.proclaimed.clone());
            }
            self.value = None;
        }
        let framework = &self.observer.framework;
        let path = &*self.observer.path;
        for _ in 0..3 {
            let read = framework
                .call_on_session(session, |client| async move {
                    client.get_and_watch_data(path).await
                })
                .await;
            let (proclaimed, watcher) = match read {
                Ok((data, _, watcher)) => (Proclaimed::decode(&data), watcher),
                Err(Error::NoNode { .. }) => {
                    // Gone meanwhile: watched for its creation.
                    let (stat, watcher) = framework
                        .call_on_session(session, |client| async move {
                            client.check_and_watch_stat(path).await
                        })
                        .await?;
                    if stat.is_some() {
                        continue;
                    }
                    (None, watcher)
                }
                Err(err) => return Err(err),
            };
            self.value = Some(ValueWatch {
                generation: session.generation(),
                proclaimed: proclaimed.clone(),
                fired: Box::pin(watcher.changed().map(|_| ())),
            });
            return Ok(proclaimed);
        }
        Err(Error::ConnectionLoss)
    }

    /// Waits for what the last look left to wait for, a change of the
    /// connection state, or the framework's close.
    async fn wait(&mut self) -> Wake {
        let closed = self.observer.framework.closed();
        if let Pending::Watch(watch) = &mut self.pending {
            let wake = tokio::select! {
                biased;
                () = closed => Wake::Closed,
                state = self.states.changed() => match state {
                    Err(_) => Wake::Closed,
                    Ok(state) if connected(state) => Wake::Look,
                    Ok(_) => Wake::Disconnected,
                },
                event = &mut watch.changed => {
                    tracing::debug!(event = ?event.event_type, path = %event.path, "the watch fired");
                    Wake::Look
                }
                () = value_changed(&mut self.value) => Wake::Value,
                () = &mut watch.gone => Wake::Look,
            };
            if !matches!(wake, Wake::Value) {
                self.pending = Pending::Reconnection;
            }
            return wake;
        }
        let pending = std::mem::replace(&mut self.pending, Pending::Reconnection);
        match pending {
            // Handled above.
            Pending::Watch(_) => Wake::Look,
            Pending::Pause(pause) => tokio::select! {
                biased;
                () = closed => Wake::Closed,
                state = self.states.changed() => match state {
                    Err(_) => Wake::Closed,
                    Ok(state) if connected(state) => Wake::Look,
                    Ok(_) => Wake::Disconnected,
                },
                () = tokio::time::sleep(pause) => Wake::Look,
            },
            Pending::Reconnection => tokio::select! {
                biased;
                () = closed => Wake::Closed,
                state = self.states.wait_for(connected) => match state {
                    Err(_) => Wake::Closed,
                    Ok(_) => Wake::Look,
                },
            },
        }
    }
}

/// Watches the election at `path`, which had no participants, for its
/// first: its children, or its creation if it does not exist. `None` if
/// one is already there (`leads` says so of the children) or the path was
/// just created: nothing is left watching then.
async fn watch_for_participants(
    framework: &Framework,
    session: &Session,
    path: &str,
    leads: impl Fn(&[String]) -> bool,
) -> Result<Option<zk::OneshotWatcher>> {
    let listed = framework
        .call_on_session(session, |client| async move {
            client.list_and_watch_children(path).await
        })
        .await;
    match listed {
        Ok((children, watcher)) => Ok((!leads(&children)).then_some(watcher)),
        Err(Error::NoNode { .. }) => {
            let (stat, watcher) = framework
                .call_on_session(session, |client| async move {
                    client.check_and_watch_stat(path).await
                })
                .await?;
            Ok(stat.is_none().then_some(watcher))
        }
        Err(err) => Err(err),
    }
}
