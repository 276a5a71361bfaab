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
//!
//! # Never older than a report already made
//!
//! On a replicated ensemble, each server answers as of the writes it has
//! applied, and a follower may be behind the leader (by up to `syncLimit`
//! ticks, see [`fresh`](crate::fresh)). Within one session ZooKeeper keeps
//! the reads in order, on whichever server the session reconnects to. A
//! new session has no such memory: made on a lagging follower (a local
//! session needs no write through the leader), its first listing could
//! name a leader older than one the stream has already reported. So the
//! follower syncs each new session's server with the ensemble's leader
//! before its first look there: one round trip per session, none per
//! change. Until the sync is answered the stream reports nothing new (its
//! last report is the [`Observation::Unknown`] it made when the former
//! session's connection went).
//!
//! The alternative, carrying the last zxid seen into the new session's
//! handshake (a server behind it refuses the connection), would need the
//! client to expose and accept that zxid, which it does not, and would
//! still not order a report that nobody leads. The sync covers both.

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

mod feed;
mod follow;

use self::feed::*;
use self::follow::*;
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
    /// [`Hold::fencing_token`](crate::Hold::fencing_token)
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

    /// Revokes the leader: asks it to give up its term, and returns it
    /// (`None`: nobody leads). The leader is read as of now, after a sync
    /// (see [`fresh`](crate::fresh)): a server behind the ensemble's leader
    /// would name a leader that is gone. Writes a revocation request naming
    /// its node into the election path's data, beside the value proclaimed
    /// there (kept). A leader made
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
    /// permission to write the election path); as
    /// [`fresh::synced`](crate::fresh::synced) for the read.
    ///
    /// # Cancel safety
    /// The request may or may not have been written when the future is
    /// dropped.
    pub async fn revoke_leader(&self) -> Result<Option<ObservedLeader>> {
        // Acted on: the leader as of now, not as of this session's server
        // (which may be behind: it would name a leader that is gone).
        let Some(leader) =
            crate::fresh::synced(&self.framework, &self.path, || self.leader()).await?
        else {
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
            if now.as_ref().and_then(|p| p.revoke.as_deref()) == Some(target) {
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
    /// reported before the loss. The first look on each new session comes
    /// after a sync, so no report is older than one already made (see the
    /// module's notes). A read that fails for another reason
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
