//! [`TreeObserver`]: every lock and election under a root, followed with
//! one persistent recursive watch.
//!
//! # How it follows the tree
//!
//! On each session (the first, and every one after a loss or a
//! reconnection):
//! 1. the recursive watch on the root is set, before anything is read, so
//!    that no change made after the listing can be missed;
//! 2. the server is synced with the ensemble's leader, and the tree is
//!    read with [`survey`] (every level pipelined): the cold view;
//! 3. every event is merged as it comes, reading only what it names: a
//!    participant node created is read (on a busy tree, later: below), a
//!    node deleted is dropped with no request, a data change is read. The
//!    cost of a hand-off is the same whatever the length of the queue.
//!
//! Events are taken in batches: every event the client has handed the
//! watcher so far, in the order the server sent them; when none was
//! waiting, the next to come, and on a busy tree (a batch taken less than
//! 5 ms before) also those that follow it within 5 ms. The
//! batch's deletions are applied at once (they need no read) and the view
//! is published; then the reads the other events need are sent together,
//! as one `multiRead` request (per 256 nodes; a node created and deleted
//! within the batch is not read, and a semaphore is read once however
//! many of its events came), and applied in order. On a busy tree this
//! makes a publication and a read per 5 ms window rather than per event;
//! there a change reaches the view up to about 5 ms later. A quiet tree's
//! event is applied as it comes. So the view never shows a node
//! whose deletion the client has been handed (the chaos harness's
//! simulator checks it: "The tree observer's contract"), and a burst of
//! events costs one round trip, not one per event: an observer that read
//! each event before taking the next fell ever further behind a busy tree.
//! A node whose deletion has been applied is never reported again (its
//! creation, read after the deletion was handed over, reads nothing and is
//! dropped).
//!
//! On a busy tree (events waiting, or a batch taken less than 5 ms
//! before) a participant's creation is not read at once: the node is
//! shown at once by its name and place in the queue, marked
//! [`pending`](LockParticipant::pending), and read once it has lived
//! [`read_after`](TreeObserver::read_after) (50 ms by default); a node
//! deleted sooner is never read. Most nodes of a busy lock's queue come
//! and go within that, so a hand-off there costs the server its two
//! notifications and nothing more (BENCHMARKS.md, "What an observer
//! costs a contended lock"). Holders and queue order are right at once;
//! only a newcomer's data, session and token wait.
//!
//! While the connection is down, or between a new session and the end of
//! its listing, [`TreeView::current`] is `false` and says since when: the
//! paths are still the last ones seen, never passed off as current. (The
//! client's own note: a persistent watch can lose the events of a
//! reconnection, ZOOKEEPER-4698, so a reconnection always rebuilds the
//! view from a fresh listing.)
//!
//! A Curator semaphore's nodes sit two levels down (`locks`, `leases`):
//! an event under one makes the observer read that semaphore again whole.
//!
//! A followed path's children that no recipe writes are shown as
//! [`ObservedPath::unknown`]: counted, a few named, with no read (their
//! names say it). A node that is no lock or election at all (a leaf with
//! no participants, such as an idle lock's path or a configuration node)
//! is not followed: the two cannot be told apart.
//!
//! # Bounds
//!
//! At most `max_paths` paths are read at a cold start and followed after;
//! past that [`TreeView::capped`] says so, and what lies beyond is not
//! shown. Memory is the view's: the participants' nodes, their data
//! included. At most 1,024 nodes wait to be read at once (pending); past
//! that the oldest is read at once, whatever `read_after` says. A batch
//! remakes each path it changed once, when it is published, so a burst
//! of n creations, or a queue of n drained, costs n log n steps, not n².

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use zk_curator_framework::path::{split, validate_path};
use zk_curator_framework::{zk, Error, Framework, Result};

use crate::fresh::synced;
use crate::layout::{
    families_among, lock_participants, participants_among, read_nodes, read_together, survey,
    Family, LockParticipant, NodeFacts, PathKind, Role, UnknownNodes, LEASES_CHILD, LOCKS_CHILD,
};

/// What a [`TreeObserver`] sees now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TreeView {
    /// Whether the view is as of now: connected, the tree listed on this
    /// session and every change since applied. `false` before the first
    /// listing and while the connection is down (then `paths` are the last
    /// ones seen).
    pub current: bool,
    /// Since when (milliseconds since the epoch, this host's clock)
    /// `current` has been what it is.
    pub since_ms: i64,
    /// Every lock and election followed, by path (shared with the views
    /// before and after, so a change costs a view only the paths it
    /// changed).
    pub paths: BTreeMap<String, Arc<ObservedPath>>,
    /// Whether `max_paths` cut the view.
    pub capped: bool,
    /// How many times the tree was listed afresh (one per session or
    /// reconnection).
    pub listings: u64,
    /// How many events were applied.
    pub events: u64,
}

/// One lock or election, as the observer follows it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObservedPath {
    /// The families of its participants (several where recipes that do
    /// not see each other share the path).
    pub families: Vec<Family>,
    /// Its holders and waiters in queue order.
    pub participants: Vec<ObservedParticipant>,
    /// The path's own data (an election's proclaimed value; a kazoo
    /// semaphore's number of leases).
    pub data: Vec<u8>,
    /// How many times the first holder changed while followed (an
    /// election's leader changes).
    pub leader_changes: u64,
    /// Since when (milliseconds since the epoch) it has had no holder,
    /// when the observer saw that begin.
    pub no_holder_since_ms: Option<i64>,
    /// Its children that no recipe writes, shown as unknown (a node that
    /// any process allowed to write under the root may have made).
    pub unknown: UnknownNodes,
}

/// One participant, with what the observer saw of it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObservedParticipant {
    /// The participant, as [`lock_participants`] reads it.
    pub participant: LockParticipant,
    /// Since when (milliseconds since the epoch) it holds, when the
    /// observer saw it begin (not for a holder found holding at a listing).
    pub holding_since_ms: Option<i64>,
}

/// Follows every lock and election under a root with one persistent
/// recursive watch (ZooKeeper 3.6+): see the [module](self) notes.
///
/// Give it a framework of its own where the same process also takes
/// locks under the root: ZooKeeper keeps one kind of watch per path and
/// client (ZOOKEEPER-4466).
#[derive(Clone)]
pub struct TreeObserver {
    inner: Arc<Inner>,
}

struct Inner {
    framework: Framework,
    root: String,
    max_paths: usize,
    view: watch::Sender<Arc<TreeView>>,
    task: Mutex<Option<JoinHandle<()>>>,
    /// How long a node created on a busy tree is shown pending.
    read_after: Mutex<Duration>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().ok().and_then(Option::take) {
            task.abort();
        }
    }
}

impl fmt::Debug for TreeObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let view = self.view();
        f.debug_struct("TreeObserver")
            .field("root", &self.inner.root)
            .field("current", &view.current)
            .field("paths", &view.paths.len())
            .finish()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl TreeObserver {
    /// An observer of `root` that follows at most `max_paths` paths.
    /// Nothing is sent until [`start`](Self::start).
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a root that breaks ZooKeeper's rules;
    /// [`Error::InvalidArgument`] for a zero `max_paths`.
    pub fn new(framework: Framework, root: &str, max_paths: usize) -> Result<Self> {
        validate_path(root)?;
        if max_paths == 0 {
            return Err(Error::InvalidArgument(
                "an observer follows at least one path".into(),
            ));
        }
        Ok(TreeObserver {
            inner: Arc::new(Inner {
                framework,
                root: root.to_owned(),
                max_paths,
                view: watch::Sender::new(Arc::new(TreeView {
                    since_ms: now_ms(),
                    ..TreeView::default()
                })),
                task: Mutex::new(None),
                read_after: Mutex::new(READ_AFTER),
            }),
        })
    }

    /// How long a participant created on a busy tree is shown pending (by
    /// its name and place, see [`LockParticipant::pending`]) before its
    /// node is read: 50 ms unless set. A node deleted sooner is never read,
    /// which spares the server most reads of a busy lock's queue; zero
    /// reads every node as soon as its creation is applied. At most 1,024
    /// nodes wait at once: past that the oldest is read at once. It takes
    /// effect at [`start`](Self::start).
    #[must_use]
    pub fn read_after(self, delay: Duration) -> Self {
        if let Ok(mut read_after) = self.inner.read_after.lock() {
            *read_after = delay;
        }
        self
    }

    /// Starts following, on a task of its own, until [`close`](Self::close)
    /// or the last handle is dropped.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if it was started already.
    pub fn start(&self) -> Result<()> {
        let mut task = self
            .inner
            .task
            .lock()
            .map_err(|_| Error::InvalidArgument("the observer's state is poisoned".into()))?;
        if task.is_some() {
            return Err(Error::InvalidArgument(
                "the observer is started already".into(),
            ));
        }
        let read_after = self
            .inner
            .read_after
            .lock()
            .map_or(READ_AFTER, |delay| *delay);
        let follower = Follower {
            framework: self.inner.framework.clone(),
            root: self.inner.root.clone(),
            max_paths: self.inner.max_paths,
            view: self.inner.view.clone(),
            state: BTreeMap::new(),
            read_after,
        };
        *task = Some(tokio::spawn(follower.run()));
        Ok(())
    }

    /// What it sees now.
    pub fn view(&self) -> Arc<TreeView> {
        self.inner.view.borrow().clone()
    }

    /// The view, each time it changes (a `watch` channel: a slow reader
    /// sees the latest view, never a backlog).
    pub fn changes(&self) -> watch::Receiver<Arc<TreeView>> {
        self.inner.view.subscribe()
    }

    /// Stops following. The last view stays readable, marked not current.
    ///
    /// # Cancel safety
    /// Cancel safe: it only stops a task.
    pub async fn close(&self) {
        let task = self.inner.task.lock().ok().and_then(|mut task| task.take());
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
        self.inner.view.send_modify(|view| {
            let view = Arc::make_mut(view);
            view.current = false;
            view.since_ms = now_ms();
        });
    }
}

/// One followed path's state.
#[derive(Clone, Debug, Default)]
struct PathState {
    /// Whether it is a Curator semaphore's (read whole at each change).
    semaphore: bool,
    data: Vec<u8>,
    /// Its first holder's node.
    leader: Option<String>,
    /// Where the first holder stands among the view's participants (the
    /// next holder is looked for after it).
    leader_at: usize,
    leader_changes: u64,
    no_holder_since: Option<i64>,
    /// Its children that no recipe writes.
    unknown: UnknownNodes,
    /// What the view shows of it, made anew at each batch.
    observed: Option<Arc<ObservedPath>>,
    /// Its participants' nodes with changes `observed` does not show yet
    /// (see [`change_nodes`](Self::change_nodes)).
    unsettled: Option<BTreeMap<String, NodeFacts>>,
}

impl PathState {
    /// Its participants, with every change made so far (`path` is its
    /// own).
    fn participants(&mut self, path: &str) -> Vec<LockParticipant> {
        self.settle(path);
        self.observed
            .iter()
            .flat_map(|observed| observed.participants.iter())
            .map(|o| o.participant.clone())
            .collect()
    }

    /// Whether its participant node `name` is pending (not read yet), if
    /// it has one of that name, with every change made so far.
    fn pending_node(&self, name: &str) -> Option<bool> {
        match &self.unsettled {
            Some(nodes) => nodes.get(name).map(|facts| facts.pending),
            None => self
                .observed
                .iter()
                .flat_map(|observed| observed.participants.iter())
                .map(|o| &o.participant)
                .find(|p| p.name == name)
                .map(|p| p.pending),
        }
    }

    /// Whether one of its participants' nodes is named `name`.
    fn has_node(&self, name: &str) -> bool {
        self.pending_node(name).is_some()
    }

    /// Whether its participant node `name` is pending (not read yet).
    fn is_pending(&self, name: &str) -> bool {
        self.pending_node(name) == Some(true)
    }

    /// Changes its participant nodes with `change` (`path` is its own).
    ///
    /// The nodes are kept once, in the view: the first change since the
    /// view was made takes them out of it, and the view is made anew from
    /// them when it is published ([`settle`](Self::settle)), once for a
    /// whole batch of events: making it at each event cost a burst of n
    /// creations, or a queue of n drained, n² steps, and stalled the
    /// observer's runtime.
    ///
    /// Each change of first holder is still counted as it comes. The head
    /// of every family's queue holds, and a newcomer queues behind those
    /// already there: so when the first holder's node goes, the next
    /// participant of the view that still has its node holds now (found
    /// from where the last holder stood, so a queue drained costs each
    /// step one look). Where none is left but newcomers, or where there was
    /// no holder, the view is made at once.
    fn change_nodes(&mut self, path: &str, change: impl FnOnce(&mut BTreeMap<String, NodeFacts>)) {
        let PathState {
            observed,
            unsettled,
            leader,
            leader_at,
            leader_changes,
            ..
        } = self;
        let nodes = unsettled.get_or_insert_with(|| {
            observed
                .iter()
                .flat_map(|observed| observed.participants.iter())
                .map(|o| (o.participant.name.clone(), NodeFacts::from(&o.participant)))
                .collect()
        });
        change(nodes);
        let settle_now = match leader.as_deref() {
            Some(holder) if !nodes.contains_key(holder) => {
                let queue = observed.as_deref().map_or(&[][..], |o| &o.participants[..]);
                let next = queue
                    .iter()
                    .enumerate()
                    .skip(*leader_at + 1)
                    .find(|(_, o)| nodes.contains_key(&o.participant.name));
                match next {
                    Some((at, next)) => {
                        *leader = Some(next.participant.name.clone());
                        *leader_at = at;
                        *leader_changes += 1;
                        false
                    }
                    None if nodes.is_empty() => {
                        *leader = None;
                        *leader_changes += 1;
                        false
                    }
                    None => true,
                }
            }
            Some(_) => false,
            None => !nodes.is_empty(),
        };
        if settle_now {
            self.settle(path);
        }
    }

    /// Makes the view anew from the nodes changed since it was made, if
    /// any (`path` is its own).
    fn settle(&mut self, path: &str) {
        let Some(nodes) = self.unsettled.take() else {
            return;
        };
        let names: Vec<String> = nodes.keys().cloned().collect();
        let participants = families_among(&names)
            .into_iter()
            .flat_map(|family| participants_among(path, family, &nodes))
            .collect();
        recompute(self, true, participants);
    }

    /// The path as the view shows it.
    fn observed(&mut self) -> Arc<ObservedPath> {
        self.observed
            .get_or_insert_with(|| {
                Arc::new(ObservedPath {
                    families: Vec::new(),
                    participants: Vec::new(),
                    data: Vec::new(),
                    leader_changes: 0,
                    no_holder_since_ms: None,
                    unknown: UnknownNodes::default(),
                })
            })
            .clone()
    }

    /// Changes its unknown nodes with `change`, and the view's with them
    /// (its participants as they were).
    fn change_unknown(&mut self, change: impl FnOnce(&mut UnknownNodes)) {
        let before = self.unknown.clone();
        change(&mut self.unknown);
        if self.unknown != before {
            let mut observed = (*self.observed()).clone();
            observed.unknown = self.unknown.clone();
            self.observed = Some(Arc::new(observed));
        }
    }
}

/// The following task.
struct Follower {
    framework: Framework,
    root: String,
    max_paths: usize,
    view: watch::Sender<Arc<TreeView>>,
    state: BTreeMap<String, PathState>,
    /// How long a node created on a busy tree is shown pending.
    read_after: Duration,
}

/// What an event needs read before it can be applied.
enum Need {
    /// Its node (a participant created, a node's data changed).
    Node,
    /// The Curator semaphore at this path, whole.
    Semaphore(String),
}

/// Why one session's following ended.
enum Ended {
    /// The connection broke or the session ended: list again on the next.
    Again,
}

impl Follower {
    async fn run(mut self) {
        loop {
            let Ended::Again = self.follow_session().await;
            self.set_current(false);
            // Wait for the connection before listing again (the framework
            // keeps trying); a closed framework ends the task.
            let mut states = self.framework.state_watcher();
            loop {
                if self.framework.is_closed() {
                    return;
                }
                if self
                    .framework
                    .state()
                    .is_some_and(|state| state.is_connected())
                {
                    break;
                }
                tokio::select! {
                    _ = states.changed() => {}
                    () = self.framework.closed() => return,
                    () = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
                }
            }
        }
    }

    fn set_current(&self, current: bool) {
        self.view.send_if_modified(|view| {
            if view.current == current {
                return false;
            }
            let view = Arc::make_mut(view);
            view.current = current;
            view.since_ms = now_ms();
            true
        });
    }

    /// Follows the tree on the current session until its connection breaks.
    async fn follow_session(&mut self) -> Ended {
        let Ok(client) = self.framework.client().await else {
            return Ended::Again;
        };
        let mut watcher = match client
            .watch(&self.root, zk::AddWatchMode::PersistentRecursive)
            .await
        {
            Ok(watcher) => watcher,
            Err(err) => {
                tracing::debug!(%err, root = %self.root, "cannot set the recursive watch");
                return Ended::Again;
            }
        };
        if let Err(err) = self.list_all().await {
            tracing::debug!(%err, root = %self.root, "cannot list the tree");
            return Ended::Again;
        }
        // Whether the view shows something not published yet (the
        // listing, at first).
        let mut unpublished = true;
        // When the last batch was taken: a tree whose events come closer
        // than the window is busy.
        let mut last_batch: Option<tokio::time::Instant> = None;
        // Nodes shown pending (created on a busy tree), oldest first, with
        // when each is due to be read.
        let mut deferred: VecDeque<(String, tokio::time::Instant)> = VecDeque::new();
        loop {
            // Every event the client has handed the watcher so far, in
            // order; if none, the view is published and the next awaited
            // (or the next pending read, when it is due first). Events
            // that were waiting mean a busy tree.
            let mut batch: Vec<zk::WatchedEvent> = Vec::new();
            take_ready(&mut watcher, &mut batch);
            let mut busy = !batch.is_empty();
            if batch.is_empty() {
                if std::mem::take(&mut unpublished) {
                    self.publish(true, 0);
                }
                let due = deferred.front().map(|&(_, due)| due);
                let first = tokio::select! {
                    event = watcher.changed() => Some(event),
                    () = async {
                        match due {
                            Some(due) => tokio::time::sleep_until(due).await,
                            None => std::future::pending().await,
                        }
                    } => None,
                    // A closed framework's client tells its watchers
                    // nothing more: the view is current no longer.
                    () = self.framework.closed() => return Ended::Again,
                };
                if let Some(first) = first {
                    let session = first.event_type == zk::EventType::Session;
                    batch.push(first);
                    busy = last_batch.is_some_and(|at| at.elapsed() < COALESCE);
                    if busy && !session {
                        // On a busy tree the events that follow close
                        // behind join this batch: a publication and a read
                        // per window, not per event (nothing is published
                        // meanwhile, so no view shows what the waiting
                        // events change). A quiet tree's event is applied
                        // at once.
                        tokio::time::sleep(COALESCE).await;
                        take_ready(&mut watcher, &mut batch);
                    }
                }
            }
            if !batch.is_empty() {
                last_batch = Some(tokio::time::Instant::now());
            }
            if let Some(event) = batch
                .iter()
                .find(|event| event.event_type == zk::EventType::Session)
            {
                // Terminal or not, the view is rebuilt from a fresh listing
                // (and a terminal event ends this watcher for good).
                tracing::debug!(state = ?event.session_state, "the observer's connection changed");
                return Ended::Again;
            }
            // Deletions first, needing no read, then the view is published
            // at once: no view shows a node the client was told is gone. On
            // a busy tree a new node is shown pending, to be read later.
            let defer = (busy && !self.read_after.is_zero()).then_some(&mut deferred);
            let reads = self.apply_deletions(&batch, defer);
            let refresh = self.due_reads(&mut deferred);
            if !batch.is_empty() {
                self.publish(true, (batch.len() - reads.len()) as u64);
            }
            let count = reads.len() as u64;
            let refreshed = !refresh.is_empty();
            if let Err(err) = self.apply_reads(&client, reads, refresh).await {
                tracing::debug!(%err, "an event could not be applied; listing again");
                return Ended::Again;
            }
            self.count_events(count);
            unpublished = count > 0 || refreshed;
        }
    }

    /// The pending nodes due to be read now (those still shown pending:
    /// one deleted meanwhile, or read already, is dropped), taken off
    /// `deferred`: the ones that have lived `read_after`, and the oldest
    /// beyond [`MOST_DEFERRED`], so the queue stays bounded whatever
    /// `read_after` and the rate of creations.
    fn due_reads(&self, deferred: &mut VecDeque<(String, tokio::time::Instant)>) -> Vec<String> {
        let now = tokio::time::Instant::now();
        let mut due = Vec::new();
        while let Some((node, _)) = deferred
            .front()
            .filter(|(_, at)| *at <= now || deferred.len() > MOST_DEFERRED)
        {
            let (parent, name) = split(node);
            if self.state.get(parent).is_some_and(|p| p.is_pending(name)) {
                due.push(node.clone());
            }
            deferred.pop_front();
        }
        due
    }

    /// The cold view: sync, then every path at once ([`survey`]).
    async fn list_all(&mut self) -> Result<()> {
        let (framework, root, max_paths) = (&self.framework, self.root.as_str(), self.max_paths);
        let surveyed = synced(framework, root, || survey(framework, root, max_paths)).await?;
        // Every path's own data at once (pipelined).
        let paths: Vec<String> = surveyed.found.iter().map(|f| f.path.clone()).collect();
        let datas = read_nodes(framework, &paths).await?;
        let mut state = BTreeMap::new();
        for (found, data) in surveyed.found.into_iter().zip(datas) {
            let mut path = PathState::default();
            let semaphore = match &found.kind {
                PathKind::Recipe(family) => *family == Family::CuratorSemaphore,
                PathKind::Mixed(families) => families.contains(&Family::CuratorSemaphore),
                _ => false,
            };
            path.semaphore = semaphore;
            path.data = data.map(|(data, _)| data).unwrap_or_default();
            path.unknown = found.unknown;
            recompute(&mut path, false, found.participants);
            state.insert(found.path, path);
        }
        self.state = state;
        self.view.send_modify(|view| {
            let view = Arc::make_mut(view);
            view.capped = surveyed.capped;
            view.listings += 1;
        });
        Ok(())
    }

    /// Applies the deletions among `batch` (they need no read), and returns
    /// the other events, each with what it needs read, in order. A node
    /// deleted under a Curator semaphore leaves its participants at once;
    /// the semaphore is read again whole (its roles may have moved).
    ///
    /// With `defer` (a busy tree), a participant's creation needs no read
    /// now: it is shown pending at once and queued on `defer` to be read
    /// once it has lived `read_after`.
    fn apply_deletions(
        &mut self,
        batch: &[zk::WatchedEvent],
        mut defer: Option<&mut VecDeque<(String, tokio::time::Instant)>>,
    ) -> Vec<(zk::WatchedEvent, Need)> {
        let mut reads = Vec::new();
        // Semaphores made by this batch's events (a `leases` child created).
        let mut semaphores: Vec<String> = Vec::new();
        for event in batch {
            let node = event.path.as_str();
            let (parent, name) = split(node);
            let (grandparent, parent_name) = split(parent);
            let under_semaphore = (parent_name == LEASES_CHILD || parent_name == LOCKS_CHILD)
                && (self.state.get(grandparent).is_some_and(|p| p.semaphore)
                    || semaphores.iter().any(|s| s == grandparent));
            match event.event_type {
                zk::EventType::NodeDeleted => {
                    // Its creation or data change earlier in the batch
                    // needs no read: the node is gone.
                    reads.retain(|(earlier, need): &(zk::WatchedEvent, Need)| {
                        !matches!(need, Need::Node) || earlier.path != node
                    });
                    if under_semaphore {
                        if let Some(path) = self.state.get_mut(grandparent) {
                            let mut participants = path.participants(grandparent);
                            participants.retain(|p| p.node_path != node);
                            recompute(path, true, participants);
                        }
                        reads.push((event.clone(), Need::Semaphore(grandparent.to_owned())));
                    }
                    if let Some(path) = self.state.get_mut(parent) {
                        if !path.semaphore && path.has_node(name) {
                            path.change_nodes(parent, |nodes| {
                                nodes.remove(name);
                            });
                        }
                        if !under_semaphore {
                            path.change_unknown(|unknown| unknown.remove(name));
                        }
                    }
                    // A followed path itself, and anything followed below it.
                    let below = format!("{node}/");
                    self.forget_below(node);
                    semaphores.retain(|s| s != node && !s.starts_with(&below));
                }
                _ if under_semaphore => {
                    reads.push((event.clone(), Need::Semaphore(grandparent.to_owned())));
                }
                zk::EventType::NodeCreated => match Family::of_child(name) {
                    Some(Family::CuratorSemaphore) if name == LEASES_CHILD => {
                        semaphores.push(parent.to_owned());
                        reads.push((event.clone(), Need::Semaphore(parent.to_owned())));
                    }
                    Some(family) if family != Family::CuratorSemaphore => match defer.as_mut() {
                        Some(deferred) => {
                            if let Some(path) = self.track(parent, false) {
                                path.change_nodes(parent, |nodes| {
                                    nodes.insert(name.to_owned(), NodeFacts::pending(now_ms()));
                                });
                                let due = tokio::time::Instant::now() + self.read_after;
                                deferred.push_back((node.to_owned(), due));
                            }
                        }
                        None => reads.push((event.clone(), Need::Node)),
                    },
                    // A node no recipe writes, in a followed path: shown as
                    // unknown (no read needed).
                    None => {
                        if let Some(path) = self.state.get_mut(parent) {
                            path.change_unknown(|unknown| unknown.add(name));
                        }
                    }
                    _ => {}
                },
                // The data of a followed path, or of a participant.
                zk::EventType::NodeDataChanged
                    if self.state.contains_key(node)
                        || self.state.get(parent).is_some_and(|p| p.has_node(name)) =>
                {
                    reads.push((event.clone(), Need::Node));
                }
                _ => {}
            }
        }
        reads
    }

    /// Applies events that need a read, in order: every read is sent at
    /// once (pipelined on one session, a semaphore read once however many
    /// of its events came), each after the client was handed its event, so
    /// a node deleted meanwhile reads as gone and is not shown.
    ///
    /// The pending nodes in `refresh` are read in the same breath, and
    /// their facts filled in where they are still shown pending.
    async fn apply_reads(
        &mut self,
        client: &zk::Client,
        reads: Vec<(zk::WatchedEvent, Need)>,
        refresh: Vec<String>,
    ) -> Result<()> {
        if reads.is_empty() && refresh.is_empty() {
            return Ok(());
        }
        let mut semaphores: Vec<&str> = Vec::new();
        for (_, need) in &reads {
            if let Need::Semaphore(path) = need {
                if !semaphores.contains(&path.as_str()) {
                    semaphores.push(path);
                }
            }
        }
        let nodes: Vec<&str> = reads
            .iter()
            .filter(|(_, need)| matches!(need, Need::Node))
            .map(|(event, _)| event.path.as_str())
            .chain(refresh.iter().map(String::as_str))
            .collect();
        let framework = &self.framework;
        let semaphore_reads = semaphores
            .iter()
            .map(|path| lock_participants(framework, path, None));
        let (nodes, semaphore_reads) = futures::future::join(
            read_together(client, &nodes),
            futures::future::try_join_all(semaphore_reads),
        )
        .await;
        let nodes = nodes.map_err(|err| Error::from_zk(err, client.state()))?;
        let semaphore_reads: Vec<(String, Vec<LockParticipant>)> = semaphores
            .iter()
            .map(|path| (*path).to_owned())
            .zip(semaphore_reads?)
            .collect();
        let mut nodes = nodes.into_iter();
        for (path, participants) in semaphore_reads {
            if let Some(state) = self.track(&path, true) {
                recompute(state, true, participants);
            }
            // Its `locks` or `leases`, followed as paths of their own when
            // listed before it was a semaphore: the semaphore shows them.
            let kept = self.state.remove(&path);
            self.forget_below(&path);
            if let Some(kept) = kept {
                self.state.insert(path, kept);
            }
        }
        for (event, need) in &reads {
            if !matches!(need, Need::Node) {
                continue;
            }
            self.apply_read(event, nodes.next().flatten());
        }
        for (node, read) in refresh.iter().zip(nodes) {
            // Gone: its deletion is on its way, and takes it out.
            let Some((data, stat)) = read else {
                continue;
            };
            let (parent, name) = split(node);
            if let Some(path) = self.state.get_mut(parent) {
                if path.is_pending(name) {
                    path.change_nodes(parent, |nodes| {
                        nodes.insert(name.to_owned(), NodeFacts::new(data, &stat));
                    });
                }
            }
        }
        Ok(())
    }

    /// Applies a node's creation or data change with what was read of it
    /// (`None`: gone again, its deletion applied or coming next: not shown).
    fn apply_read(&mut self, event: &zk::WatchedEvent, read: Option<(Vec<u8>, zk::Stat)>) {
        let node = event.path.as_str();
        let (parent, name) = split(node);
        let Some((data, stat)) = read else {
            return;
        };
        match event.event_type {
            zk::EventType::NodeCreated => {
                if let Some(path) = self.track(parent, false) {
                    path.change_nodes(parent, |nodes| {
                        nodes.insert(name.to_owned(), NodeFacts::new(data, &stat));
                    });
                }
            }
            zk::EventType::NodeDataChanged => {
                if let Some(path) = self.state.get_mut(node) {
                    path.data = data;
                    let participants = path.participants(node);
                    recompute(path, true, participants);
                } else if let Some(path) = self.state.get_mut(parent) {
                    if path.has_node(name) {
                        path.change_nodes(parent, |nodes| {
                            nodes.insert(name.to_owned(), NodeFacts::new(data, &stat));
                        });
                    }
                }
            }
            _ => {}
        }
    }

    /// Stops following `node` and every path below it (those sit
    /// together in the map's order, from `node/` on: only they are looked
    /// at).
    fn forget_below(&mut self, node: &str) {
        self.state.remove(node);
        let below = format!("{node}/");
        let gone: Vec<String> = self
            .state
            .range::<str, _>((
                std::ops::Bound::Included(below.as_str()),
                std::ops::Bound::Unbounded,
            ))
            .map(|(path, _)| path)
            .take_while(|path| path.starts_with(&below))
            .cloned()
            .collect();
        for path in gone {
            self.state.remove(&path);
        }
    }

    /// Counts `count` more events applied.
    fn count_events(&self, count: u64) {
        if count > 0 {
            self.view.send_if_modified(|view| {
                Arc::make_mut(view).events += count;
                false
            });
        }
    }

    /// The state of `path`, made if new and there is room (`None` past
    /// `max_paths`, which marks the view capped).
    fn track(&mut self, path: &str, semaphore: bool) -> Option<&mut PathState> {
        if !self.state.contains_key(path) && self.state.len() >= self.max_paths {
            self.view.send_if_modified(|view| {
                let changed = !view.capped;
                Arc::make_mut(view).capped = true;
                changed
            });
            return None;
        }
        let path = self.state.entry(path.to_owned()).or_default();
        path.semaphore |= semaphore;
        Some(path)
    }

    /// Publishes the state as the view (`events` more applied).
    fn publish(&mut self, current: bool, events: u64) {
        let paths: BTreeMap<String, Arc<ObservedPath>> = self
            .state
            .iter_mut()
            .map(|(path, state)| {
                state.settle(path);
                (path.clone(), state.observed())
            })
            .collect();
        self.view.send_modify(|view| {
            let view = Arc::make_mut(view);
            if view.current != current {
                view.current = current;
                view.since_ms = now_ms();
            }
            view.paths = paths;
            view.events += events;
        });
    }
}

/// Moves the events `watcher` holds ready into `batch`, in order, up to
/// and including a session event (after a terminal one the watcher must
/// not be asked again).
fn take_ready(watcher: &mut zk::PersistentWatcher, batch: &mut Vec<zk::WatchedEvent>) {
    while let Some(event) = watcher.changed().now_or_never() {
        let session = event.event_type == zk::EventType::Session;
        batch.push(event);
        if session {
            return;
        }
    }
}

/// How long the observer waits, after an event, for the events close
/// behind it before it applies them together (see the module notes).
const COALESCE: std::time::Duration = std::time::Duration::from_millis(5);

/// How long a node created on a busy tree is shown pending before it is
/// read (see the module notes): longer than most nodes of a busy lock's
/// queue live, short beside anything an operator looks at.
const READ_AFTER: Duration = Duration::from_millis(50);

/// How many nodes may wait to be read (see the module notes' bounds):
/// past that the oldest is read at once. The queue also keeps the nodes
/// deleted before their turn until then, so without a bound a long
/// `read_after` on a busy lock would grow it with every creation.
const MOST_DEFERRED: usize = 1024;

/// Makes the view of a path from its `participants` (in queue order),
/// carrying what was seen over: since when each holds (a node seen waiting,
/// or created, then holding, counts from now when `live`), its first
/// holder's changes, and since when it has had no holder.
fn recompute(state: &mut PathState, live: bool, participants: Vec<LockParticipant>) {
    // What it is given is all there is (a semaphore read whole, say).
    state.unsettled = None;
    let now = now_ms();
    let mut families: Vec<Family> = Vec::new();
    for p in &participants {
        if !families.contains(&p.family) {
            families.push(p.family);
        }
    }
    // What was seen of each before: its role, and since when it held.
    let before: HashMap<&str, (Role, Option<i64>)> = state
        .observed
        .iter()
        .flat_map(|observed| observed.participants.iter())
        .map(|o| {
            (
                o.participant.name.as_str(),
                (o.participant.role, o.holding_since_ms),
            )
        })
        .collect();
    let observed: Vec<ObservedParticipant> = participants
        .into_iter()
        .map(|p| {
            let holding = match (p.role, before.get(p.name.as_str())) {
                (Role::Holder, Some((Role::Holder, since))) => *since,
                (Role::Holder, _) if live => Some(now),
                _ => None,
            };
            ObservedParticipant {
                participant: p,
                holding_since_ms: holding,
            }
        })
        .collect();
    drop(before);
    let first_holder = observed
        .iter()
        .position(|o| o.participant.role == Role::Holder);
    let leader = first_holder.map(|at| observed[at].participant.name.clone());
    state.leader_at = first_holder.unwrap_or(0);
    if live && leader != state.leader {
        state.leader_changes += 1;
    }
    state.no_holder_since = match (&leader, state.no_holder_since) {
        (Some(_), _) => None,
        (None, Some(at)) => Some(at),
        (None, None) if live => Some(now),
        (None, None) => None,
    };
    state.leader = leader;
    state.observed = Some(Arc::new(ObservedPath {
        families,
        participants: observed,
        data: state.data.clone(),
        leader_changes: state.leader_changes,
        no_holder_since_ms: state.no_holder_since,
        unknown: state.unknown.clone(),
    }));
}
