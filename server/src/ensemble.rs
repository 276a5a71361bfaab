//! A simulated replicated ensemble, for the deterministic simulator (`zk-curator-sim
//! --ensemble N`) and for tests: N members, each with a data tree of its own, that show a
//! client what ZooKeeper's members show it. It is not Zab, and it does not replicate over a
//! network: the members share one log in memory, and run as tasks of the runtime that
//! started the ensemble (one thread, one clock in a simulation; every draw from a generator
//! seeded by `fastrand`'s thread-local one when the ensemble starts).
//!
//! * **One log, ordered by a leader.** A write sent to any member goes to the leader, which
//!   gives it the next zxid (`epoch << 32 | counter`) and appends it to the log. It is
//!   committed once a quorum of members holds it; a member holds what the leader sends it at
//!   once, unless it is down, cut off from its peers, or its link from the leader is held.
//! * **Followers apply late.** Each member applies the committed prefix of the log to its own
//!   tree at its own pace (the leader at once, a follower after a seeded delay per batch, a
//!   slowed follower after a long one), fires its own connections' watches as it applies, and
//!   serves reads from its own tree: a read on a follower may be stale (issue 32), and its
//!   replies carry its own zxid. A member answers a write once it has applied it, as a
//!   ZooKeeper follower does, and takes no further request of that connection meanwhile.
//! * **`sync`** is answered once the member has applied everything the leader had committed
//!   when the sync reached it: a member whose link from the leader is held answers it only
//!   after the link is back.
//! * **Sessions** are global (made by a transaction, expired by the leader, known to every
//!   member) or, with [`EnsembleBuilder::local_sessions`], local to the member that made
//!   them (no transaction; lost with that member's service; upgraded to global by their first
//!   ephemeral node, as ZooKeeper's `localSessionsUpgradingEnabled`). A global session moves
//!   to any member; a local one re-attaches only where it was made. A member refuses (closes
//!   without an answer) a client that has seen a later zxid than its own, as ZooKeeper's
//!   servers do.
//! * **Leaders change.** A leader killed, or cut off from its peers for longer than the sync
//!   limit, or left without a quorum, gives way: every member drops its clients, and after a
//!   seeded election time the members that can reach each other (a quorum of them, or no
//!   one) elect the one holding the longest log, in a new epoch. The log is cut back to what
//!   the new leader holds: a write it holds is committed, one it does not is dropped, each
//!   as a whole (a `multi` with it). A member serves again once it has applied every
//!   committed write (the sync a ZooKeeper follower does before it serves).
//! * **A member cut off** (or whose link from the leader is held) keeps serving its past
//!   state for up to the sync limit, its clients' writes waiting; past it, it drops its
//!   clients until it can reach a leader again.
//!
//! * **A killed member** drops its clients, its local sessions and its tree; started again,
//!   it comes back from its disk: its tree rebuilt from the log's committed writes (every
//!   write it acknowledged among them, as ZooKeeper logs a transaction before it applies
//!   it), its global sessions with them.
//!
//! * **A lost reply** ([`Ensemble::lose_reply_to_next`]): a write applied by the member that
//!   took it, whose client's connection is then closed instead of answered.
//!
//! Not modelled: a disk that loses unsynced writes, observers (ZooKeeper's non-voting
//! members), dynamic reconfiguration, a write refused because a member's queue to the leader
//! overflowed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::debug;

use crate::codec::{self, code, op, ConnectRequest, ReadRequest, Request, SessionRequest, WriteOp};
use crate::connection::{admit, serve_connection};
use crate::error::Error;
use crate::faults::{LostReplyHandle, RequestMatcher};
use crate::outbox::Outbox;
use crate::session::Sessions;
use crate::shared::Shared;
use crate::state::{Applied, Reply};
use crate::watch::ConnId;
use crate::EmbeddedServerBuilder;

/// Configures and starts an [`Ensemble`]; from [`Ensemble::builder`].
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct EnsembleBuilder {
    server: EmbeddedServerBuilder,
    size: usize,
    local_sessions: bool,
    sync_limit: Duration,
    apply_lag: (Duration, Duration),
    slow_lag: (Duration, Duration),
    election: (Duration, Duration),
}

impl EnsembleBuilder {
    /// The number of members (at least 1; 3 by default).
    pub fn size(mut self, size: usize) -> Self {
        self.size = size.max(1);
        self
    }

    /// Sessions start local to their member (ZooKeeper's `localSessionsEnabled` and
    /// `localSessionsUpgradingEnabled`); off by default.
    pub fn local_sessions(mut self, on: bool) -> Self {
        self.local_sessions = on;
        self
    }

    /// How long a member that does not hear from its leader (cut off, or its link from the
    /// leader held) keeps serving, and how long followers wait for a leader cut off from them
    /// before they elect another (ZooKeeper's `syncLimit` ticks); 2 s by default.
    pub fn sync_limit(mut self, limit: Duration) -> Self {
        self.sync_limit = limit;
        self
    }

    /// How late a follower applies a batch of committed writes: a delay drawn between these
    /// bounds each time (0 to 20 ms by default).
    pub fn apply_lag(mut self, low: Duration, high: Duration) -> Self {
        self.apply_lag = (low, high.max(low));
        self
    }

    /// The same for a follower slowed down ([`Ensemble::slow`]): 100 to 800 ms by default.
    pub fn slow_lag(mut self, low: Duration, high: Duration) -> Self {
        self.slow_lag = (low, high.max(low));
        self
    }

    /// How long an election takes, drawn between these bounds (200 ms to 1 s by default).
    pub fn election_time(mut self, low: Duration, high: Duration) -> Self {
        self.election = (low, high.max(low));
        self
    }

    /// Starts the members on the current tokio runtime, member 0 leading in epoch 1. Each
    /// member serves the connections handed to [`Ensemble::serve_connection`]; `address`
    /// gives the address each one's listener serves (for the `conf` word).
    ///
    /// # Errors
    /// [`Error::Io`] outside a tokio runtime; [`Error::InvalidConfig`] as
    /// [`EmbeddedServerBuilder::start_without_listener`] for the server settings.
    pub fn start(self, address: impl Fn(usize) -> SocketAddr) -> Result<Ensemble, Error> {
        let settings = self.server.settings().clone();
        let handle = tokio::runtime::Handle::try_current().map_err(|err| {
            Error::io(
                "an ensemble starts on the current tokio runtime",
                std::io::Error::other(err),
            )
        })?;
        if settings.tick_time.is_zero() || settings.container_check_interval.is_zero() {
            return Err(Error::InvalidConfig(
                "tick time and container check interval must be positive".to_owned(),
            ));
        }
        let global = Sessions::new();
        let origin = settings.node_time_origin.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        });
        let now = Instant::now();
        let mut members = Vec::with_capacity(self.size);
        for index in 0..self.size {
            let port = address(index).port();
            let shared = Arc::new(Shared::new(settings.clone(), Some(port), None));
            shared.state().sessions = global.sharing_key();
            members.push(shared);
        }
        let core = Core {
            log: Vec::new(),
            commit: 0,
            epoch: 1,
            counter: 0,
            members: (0..self.size)
                .map(|_| Member {
                    up: true,
                    serving: true,
                    ..Member::default()
                })
                .collect(),
            leader: Some(0),
            electing: None,
            sessions: global,
            local: BTreeMap::new(),
            waiters: BTreeMap::new(),
            ending: BTreeMap::new(),
            lost: BTreeMap::new(),
            rng: fastrand::Rng::with_seed(fastrand::u64(..)),
            time: (origin, now),
            drops: Vec::new(),
            local_sessions: self.local_sessions,
            sync_limit: self.sync_limit,
            apply_lag: self.apply_lag,
            slow_lag: self.slow_lag,
            election: self.election,
        };
        let inner = Arc::new(Inner {
            core: Mutex::new(core),
            bell: watch::channel(0).0,
        });
        for (index, shared) in members.iter().enumerate() {
            let _ = shared.seat.set(Seat {
                index,
                inner: inner.clone(),
            });
        }
        let mut tasks = Vec::new();
        for (index, shared) in members.iter().enumerate() {
            tasks.push(handle.spawn(applier(shared.clone(), inner.clone(), index)));
        }
        tasks.push(handle.spawn(driver(
            members.clone(),
            inner.clone(),
            settings.tick_time,
            settings.container_check_interval,
        )));
        Ok(Ensemble {
            members,
            inner,
            tasks,
            handle,
        })
    }
}

/// A simulated replicated ensemble of embedded servers: see the [module docs](self).
///
/// Dropping it stops its tasks and closes every connection.
pub struct Ensemble {
    members: Vec<Arc<Shared>>,
    inner: Arc<Inner>,
    tasks: Vec<JoinHandle<()>>,
    handle: tokio::runtime::Handle,
}

impl std::fmt::Debug for Ensemble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let core = self.inner.core();
        f.debug_struct("Ensemble")
            .field("size", &self.members.len())
            .field("leader", &core.leader)
            .field("epoch", &core.epoch)
            .field("log", &core.log.len())
            .field("commit", &core.commit)
            .finish()
    }
}

impl Ensemble {
    /// A builder: 3 members, global sessions, the server settings of `server` (its port and
    /// TLS settings are not used).
    pub fn builder(server: EmbeddedServerBuilder) -> EnsembleBuilder {
        EnsembleBuilder {
            server,
            size: 3,
            local_sessions: false,
            sync_limit: Duration::from_secs(2),
            apply_lag: (Duration::ZERO, Duration::from_millis(20)),
            slow_lag: (Duration::from_millis(100), Duration::from_millis(800)),
            election: (Duration::from_millis(200), Duration::from_secs(1)),
        }
    }

    /// Now, on the clock of the runtime the ensemble runs on, whichever runtime (if any) the
    /// caller runs on (a simulation's driver calls between the steps of its hosts).
    fn now(&self) -> Instant {
        let _runtime = self.handle.enter();
        Instant::now()
    }

    /// The number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Serves one connection the caller accepted for `member` (see
    /// [`EmbeddedServer::serve_connection`](crate::EmbeddedServer::serve_connection)).
    /// Returns whether it is served (a member past the size is no member).
    pub fn serve_connection<S>(&self, member: usize, stream: S, peer: SocketAddr) -> bool
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Some(shared) = self.members.get(member).cloned() else {
            return false;
        };
        let served = shared.clone();
        admit(&shared, &self.handle, peer, false, move |id| async move {
            serve_connection(id, stream, peer, &served).await;
        })
    }

    /// The leader now (`None` during an election, or without a quorum).
    pub fn leader(&self) -> Option<usize> {
        self.inner.core().leader
    }

    /// The current epoch (the high 32 bits of the zxids its leader hands out).
    pub fn epoch(&self) -> i64 {
        self.inner.core().epoch
    }

    /// The zxid of the last committed write (0 before any).
    pub fn committed_zxid(&self) -> i64 {
        let core = self.inner.core();
        core.commit
            .checked_sub(1)
            .and_then(|i| core.log.get(i))
            .map_or(0, |e| e.zxid)
    }

    /// The zxid `member` has applied up to (its replies carry it).
    pub fn zxid_of(&self, member: usize) -> i64 {
        self.members.get(member).map_or(0, |m| m.state().zxid)
    }

    /// Whether `member` takes clients now.
    pub fn is_serving(&self, member: usize) -> bool {
        self.inner
            .core()
            .members
            .get(member)
            .is_some_and(|m| m.serving)
    }

    /// Every node path of `member`'s tree, sorted.
    pub fn paths_of(&self, member: usize) -> Vec<String> {
        self.members
            .get(member)
            .map(|m| m.state().paths())
            .unwrap_or_default()
    }

    /// Kills `member` (`up` false): it crashes, dropping its clients, its local sessions and
    /// its tree, and takes part in nothing; a leader killed gives way to a new one. Started
    /// again (`up` true), it comes back from its disk: its tree rebuilt from the log's
    /// committed writes it had written down (every write it acknowledged among them; what it
    /// lacks comes from the leader), its global sessions with them; it serves once it has
    /// applied every committed write.
    pub fn set_up(&self, member: usize, up: bool) {
        let _runtime = self.handle.enter();
        let now = Instant::now();
        let restarted = up && self.inner.core().members.get(member).is_some_and(|m| !m.up);
        if restarted {
            // Nothing of the old tree is kept but what the log holds.
            let mut state = self.members[member].state();
            let mut fresh = crate::state::State::new(state.limits.clone());
            let mut core = self.inner.core();
            fresh.sessions = core.sessions.sharing_key();
            *state = fresh;
            core.members[member].applied = 0;
        }
        self.with_core(|core| core.set_up(member, up, now));
    }

    /// Cuts `member` off from every peer (`true`), or joins it again.
    pub fn cut_off(&self, member: usize, on: bool) {
        let now = self.now();
        self.with_core(|core| core.cut_off(member, on, now));
    }

    /// Holds what the leader sends `member` (`true`): it keeps serving its past state, and
    /// answers no write of its clients (nor `sync`) until the hold ends; or lets it through
    /// again.
    pub fn hold_from_leader(&self, member: usize, on: bool) {
        let now = self.now();
        self.with_core(|core| core.hold(member, on, now));
    }

    /// Makes `member` apply committed writes slowly (see [`EnsembleBuilder::slow_lag`]) for
    /// `length`.
    pub fn slow(&self, member: usize, length: Duration) {
        let now = self.now();
        self.with_core(|core| {
            if let Some(m) = core.members.get_mut(member) {
                m.slow_until = Some(now + length);
            }
        });
    }

    /// Stalls `member`'s connections for `length` (see
    /// [`EmbeddedServer::stall`](crate::EmbeddedServer::stall)); `Duration::ZERO` resumes.
    pub fn stall_member(&self, member: usize, length: Duration) {
        if let Some(shared) = self.members.get(member) {
            let until = (!length.is_zero()).then(|| self.now() + length);
            shared.faults.stall_until(until);
        }
    }

    /// Arms a one-shot fault on `member`: the next write sent to it that `matcher` matches is
    /// applied, but when the member has applied it, the client's connection is closed
    /// instead of answered (see
    /// [`EmbeddedServer::lose_reply_to_next`](crate::EmbeddedServer::lose_reply_to_next)).
    /// A member past the size arms nothing (the handle never fires).
    pub fn lose_reply_to_next(&self, member: usize, matcher: RequestMatcher) -> LostReplyHandle {
        match self.members.get(member) {
            Some(shared) => shared.faults.arm(matcher),
            None => LostReplyHandle::from(watch::channel(None).1),
        }
    }

    /// Disarms every member's unconsumed [`lose_reply_to_next`](Self::lose_reply_to_next).
    pub fn disarm(&self) {
        for shared in &self.members {
            shared.faults.disarm();
        }
    }

    /// Every member up, every link whole, no stall, no slowed member.
    pub fn heal(&self) {
        let now = self.now();
        for shared in &self.members {
            shared.faults.stall_until(None);
        }
        self.with_core(|core| {
            for member in 0..core.members.len() {
                core.set_up(member, true, now);
                core.cut_off(member, false, now);
                core.hold(member, false, now);
                core.members[member].slow_until = None;
            }
        });
    }

    /// Expires a session now, as its leader would after its timeout: a global one by a
    /// transaction (`false` if there is no leader to order it), a local one on its member.
    /// Returns whether the session existed and was ended (or its end ordered).
    pub fn expire_session(&self, id: i64) -> bool {
        let now = self.now();
        let owner = self.inner.core().local.get(&id).copied();
        if let Some(member) = owner {
            let mut state = self.members[member].state();
            state.drop_local_session(id);
            self.inner.core().local.remove(&id);
            return true;
        }
        let ordered = {
            let mut core = self.inner.core();
            if core.sessions.get(id).is_none() || core.leader.is_none() {
                false
            } else {
                let leader = core.leader.unwrap_or(0);
                core.end_session(leader, id, now);
                true
            }
        };
        self.inner.ring();
        ordered
    }

    /// Every live session: the global ones and each member's local ones, by id.
    pub fn session_ids(&self) -> Vec<i64> {
        let core = self.inner.core();
        let mut ids = core.sessions.ids();
        ids.extend(core.local.keys().copied());
        ids.sort_unstable();
        ids
    }

    /// Runs `change` on the core, then does what it asked for: drops the connections (and
    /// local sessions) of the members it named, and wakes the members.
    fn with_core(&self, change: impl FnOnce(&mut Core)) {
        let drops = {
            let mut core = self.inner.core();
            change(&mut core);
            std::mem::take(&mut core.drops)
        };
        drop_members(&self.members, &self.inner, &drops);
        self.inner.ring();
    }
}

impl Drop for Ensemble {
    fn drop(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
        for shared in &self.members {
            let connections = std::mem::take(&mut *shared.connections());
            for handle in connections.into_values() {
                handle.abort();
            }
        }
    }
}

/// What the members share: the core, and a bell rung at every change of it.
pub(crate) struct Inner {
    core: Mutex<Core>,
    bell: watch::Sender<u64>,
}

impl Inner {
    fn core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ring(&self) {
        self.bell.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// A member's place in its ensemble, kept in its [`Shared`].
pub(crate) struct Seat {
    index: usize,
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Seat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seat").field("index", &self.index).finish()
    }
}

/// One transaction of the log.
#[derive(Debug)]
struct Entry {
    zxid: i64,
    /// Node time (ms since the epoch) of what it writes.
    time: i64,
    /// The member, connection and xid that sent it, if a client did.
    origin: Option<(usize, ConnId, i32)>,
    what: Applied,
}

/// A lost-reply fault taken by a write: the fault's record, the write's opcode and path.
type Lost = (crate::faults::Armed, i32, Option<String>);

/// A request a member holds for its leader, which it cannot reach now.
type Forward = (Option<(ConnId, i32)>, Applied, Option<oneshot::Sender<()>>);

/// One member, as the core sees it.
#[derive(Debug, Default)]
struct Member {
    up: bool,
    cut: bool,
    /// What the leader sends it is held.
    held: bool,
    /// It takes clients.
    serving: bool,
    /// Entries of the log it holds.
    received: usize,
    /// Entries it has applied.
    applied: usize,
    /// It serves again once it has applied this many.
    catch_up: Option<usize>,
    /// Since when it has not heard from its leader.
    silent_since: Option<Instant>,
    /// It applies slowly until then.
    slow_until: Option<Instant>,
    /// Requests waiting for a leader it can reach.
    forward: Vec<Forward>,
    /// `sync`s waiting: the count of entries to apply first (`None`: the leader has not heard
    /// the sync yet), and whom to tell.
    syncs: Vec<(Option<usize>, oneshot::Sender<()>)>,
}

/// The ensemble's state: its log, its members, its sessions.
struct Core {
    log: Vec<Entry>,
    /// Entries committed (a prefix of `log`).
    commit: usize,
    epoch: i64,
    counter: i64,
    members: Vec<Member>,
    leader: Option<usize>,
    /// An election ends then.
    electing: Option<Instant>,
    /// Global sessions (ids and passwords of every session, local ones too).
    sessions: Sessions,
    /// Local sessions, and their member.
    local: BTreeMap<i64, usize>,
    /// Whom to tell when the entry of this zxid is applied on its origin member.
    waiters: BTreeMap<i64, oneshot::Sender<()>>,
    /// Sessions the leader ended whose close is not committed yet, with their timeouts.
    ending: BTreeMap<i64, Duration>,
    /// Writes whose reply is to be lost (by member, connection and xid), and the fault's
    /// record (with the request's opcode and path).
    lost: BTreeMap<(usize, ConnId, i32), Lost>,
    rng: fastrand::Rng,
    /// Node times: this (ms since the epoch) at this instant.
    time: (i64, Instant),
    /// Members whose clients must be dropped.
    drops: Vec<usize>,
    local_sessions: bool,
    sync_limit: Duration,
    apply_lag: (Duration, Duration),
    slow_lag: (Duration, Duration),
    election: (Duration, Duration),
}

impl Core {
    fn quorum(&self) -> usize {
        self.members.len() / 2 + 1
    }

    fn draw(&mut self, (low, high): (Duration, Duration)) -> Duration {
        let span = high.saturating_sub(low).as_micros() as u64;
        low + Duration::from_micros(self.rng.u64(0..=span))
    }

    /// Whether `m` can hand its leader a request now.
    fn reaches_leader(&self, m: usize) -> bool {
        let Some(l) = self.leader else { return false };
        self.electing.is_none()
            && self.members[l].up
            && self.members[m].up
            && (m == l || (!self.members[m].cut && !self.members[l].cut))
    }

    /// Whether `m` takes in what its leader sends now.
    fn receives(&self, m: usize) -> bool {
        self.reaches_leader(m) && (Some(m) == self.leader || !self.members[m].held)
    }

    /// Members take in what the leader sends, and the commit point moves to what a quorum
    /// holds.
    fn replicate(&mut self) {
        let end = self.log.len();
        for m in 0..self.members.len() {
            if self.receives(m) {
                self.members[m].received = end;
            }
        }
        let mut held: Vec<usize> = self
            .members
            .iter()
            .map(|m| if m.up { m.received } else { 0 })
            .collect();
        held.sort_unstable_by(|a, b| b.cmp(a));
        let quorum_holds = held.get(self.quorum() - 1).copied().unwrap_or(0);
        if self.leader.is_some() && self.electing.is_none() {
            let commit = self.commit.max(quorum_holds.min(end));
            // A session's close is the leader's to count once committed.
            for entry in &self.log[self.commit..commit] {
                if let Applied::Request {
                    session,
                    request: Request::Session(SessionRequest::Close),
                    ..
                } = &entry.what
                {
                    self.sessions.remove(*session);
                }
                if let Applied::CloseSession { id } = &entry.what {
                    self.ending.remove(id);
                }
            }
            self.commit = commit;
        }
        // Syncs the leader hears now.
        let commit = self.commit;
        for m in 0..self.members.len() {
            if self.reaches_leader(m) {
                for sync in &mut self.members[m].syncs {
                    sync.0.get_or_insert(commit);
                }
            }
        }
    }

    /// The leader appends a transaction sent by member `from` (`origin`: its connection and
    /// xid), telling `waiter` once `from` has applied it.
    fn propose(
        &mut self,
        from: usize,
        origin: Option<(ConnId, i32)>,
        what: Applied,
        waiter: Option<oneshot::Sender<()>>,
        now: Instant,
    ) {
        // The leader orders no write of a session it no longer has (ZooKeeper's leader
        // answers it with an error transaction): it would outlive its session's close.
        let what = match what {
            Applied::Request { session, .. }
                if self.sessions.get(session).is_none() && !self.local.contains_key(&session) =>
            {
                Applied::Refused { session }
            }
            other => other,
        };
        self.counter += 1;
        let zxid = (self.epoch << 32) | self.counter;
        let elapsed = now.saturating_duration_since(self.time.1).as_millis();
        let time = self
            .time
            .0
            .saturating_add(i64::try_from(elapsed).unwrap_or(i64::MAX));
        if let Some(waiter) = waiter {
            self.waiters.insert(zxid, waiter);
        }
        self.log.push(Entry {
            zxid,
            time,
            origin: origin.map(|(conn, xid)| (from, conn, xid)),
            what,
        });
        self.replicate();
    }

    /// The leader ends session `id` (it expired): gone from its table at once, and from
    /// the members' once they apply the close. A close a new leader drops brings the
    /// session back (as a ZooKeeper leader knows its sessions from its log).
    fn end_session(&mut self, leader: usize, id: i64, now: Instant) {
        if let Some(session) = self.sessions.remove(id) {
            self.ending.insert(id, session.timeout);
        }
        self.propose(leader, None, Applied::CloseSession { id }, None, now);
    }

    /// Member `m` sends a transaction to its leader, or holds it until it can reach one.
    fn send(
        &mut self,
        m: usize,
        origin: Option<(ConnId, i32)>,
        what: Applied,
        now: Instant,
    ) -> oneshot::Receiver<()> {
        let (tell, told) = oneshot::channel();
        if self.reaches_leader(m) {
            self.propose(m, origin, what, Some(tell), now);
        } else {
            self.members[m].forward.push((origin, what, Some(tell)));
        }
        told
    }

    /// Hands the leader what members held for it, when they can reach it.
    fn forward_held(&mut self, now: Instant) {
        for m in 0..self.members.len() {
            if !self.reaches_leader(m) || self.members[m].forward.is_empty() {
                continue;
            }
            for (origin, what, waiter) in std::mem::take(&mut self.members[m].forward) {
                self.propose(m, origin, what, waiter, now);
            }
        }
        self.replicate();
    }

    /// Member `m`'s clients are dropped, and its local sessions with them.
    fn stop_serving(&mut self, m: usize) {
        let member = &mut self.members[m];
        member.serving = false;
        member.forward.clear();
        member.syncs.clear();
        if !self.drops.contains(&m) {
            self.drops.push(m);
        }
    }

    /// Every member stops serving; the members elect a new leader after a while.
    fn start_election(&mut self, now: Instant) {
        debug!(leader = ?self.leader, epoch = self.epoch, "the ensemble elects a new leader");
        self.leader = None;
        let length = self.draw(self.election);
        self.electing = Some(now + length);
        for m in 0..self.members.len() {
            self.stop_serving(m);
        }
    }

    /// Ends an election: the members that can reach each other, if a quorum, elect the one
    /// with the longest log.
    fn finish_election(&mut self, now: Instant) {
        let voters: Vec<usize> = (0..self.members.len())
            .filter(|&m| self.members[m].up && !self.members[m].cut)
            .collect();
        if voters.len() < self.quorum() {
            let length = self.draw(self.election);
            self.electing = Some(now + length);
            return;
        }
        let Some(&leader) = voters
            .iter()
            .max_by_key(|&&m| (self.members[m].received, m))
        else {
            return;
        };
        let kept = self.members[leader].received;
        for dropped in self.log.drain(kept..) {
            self.waiters.remove(&dropped.zxid);
            match dropped.what {
                // A session whose close is dropped lives on; one whose creation is dropped
                // never was.
                Applied::CloseSession { id } => {
                    if let Some(timeout) = self.ending.remove(&id) {
                        self.sessions.adopt(id, timeout, now.into_std());
                    }
                }
                Applied::CreateSession { id, .. } => {
                    self.sessions.remove(id);
                }
                _ => {}
            }
        }
        self.epoch += 1;
        self.counter = 0;
        self.leader = Some(leader);
        self.electing = None;
        self.commit = kept;
        debug!(
            leader,
            epoch = self.epoch,
            kept,
            "the ensemble has a new leader"
        );
        for m in 0..self.members.len() {
            let member = &mut self.members[m];
            member.received = member.received.min(kept);
            member.silent_since = None;
            member.catch_up = Some(kept);
        }
        self.sessions.touch_all(now.into_std());
        self.replicate();
    }

    fn set_up(&mut self, m: usize, up: bool, now: Instant) {
        if m >= self.members.len() || self.members[m].up == up {
            return;
        }
        self.members[m].up = up;
        if up {
            self.members[m].catch_up = Some(self.commit);
            self.replicate();
            return;
        }
        self.stop_serving(m);
        if self.leader == Some(m) {
            self.start_election(now);
        }
    }

    fn cut_off(&mut self, m: usize, on: bool, now: Instant) {
        if m >= self.members.len() || self.members[m].cut == on {
            return;
        }
        self.members[m].cut = on;
        if on {
            self.members[m].silent_since.get_or_insert(now);
            if self.leader == Some(m) {
                // Its followers stop hearing from it too.
                for f in 0..self.members.len() {
                    self.members[f].silent_since.get_or_insert(now);
                }
            }
        } else {
            self.rejoin(m, now);
            if self.leader == Some(m) {
                for f in 0..self.members.len() {
                    if !self.members[f].cut && !self.members[f].held {
                        self.members[f].silent_since = None;
                    }
                }
            }
        }
        self.replicate();
    }

    fn hold(&mut self, m: usize, on: bool, now: Instant) {
        if m >= self.members.len() || self.members[m].held == on {
            return;
        }
        self.members[m].held = on;
        if on {
            self.members[m].silent_since.get_or_insert(now);
        } else {
            self.rejoin(m, now);
        }
        self.replicate();
    }

    /// Member `m` hears from its leader again: if it had stopped serving, it serves once it
    /// has applied every committed write.
    fn rejoin(&mut self, m: usize, now: Instant) {
        let member = &mut self.members[m];
        if member.cut || member.held {
            return;
        }
        member.silent_since = None;
        if !member.serving && member.up {
            member.catch_up = Some(self.commit);
        }
        self.forward_held(now);
    }

    /// Tells member `m`'s `sync`s whose point it has applied.
    fn answer_syncs(&mut self, m: usize) {
        let member = &mut self.members[m];
        let applied = member.applied;
        for (target, waiter) in std::mem::take(&mut member.syncs) {
            match target {
                Some(target) if target <= applied => {
                    let _ = waiter.send(());
                }
                _ => member.syncs.push((target, waiter)),
            }
        }
    }

    /// Member `m` serves again once it has caught up and hears from its leader.
    fn check_serving(&mut self, m: usize) {
        let caught_up = {
            let member = &self.members[m];
            member
                .catch_up
                .is_some_and(|target| member.applied >= target)
        };
        let member = &self.members[m];
        if caught_up && member.up && !member.cut && !member.held && self.receives(m) {
            let member = &mut self.members[m];
            member.catch_up = None;
            member.serving = true;
        }
    }

    /// The next batch member `m` applies: how long it waits first, if there is one.
    fn next_batch(&mut self, m: usize, now: Instant) -> Option<Duration> {
        let member = &self.members[m];
        if !member.up || member.applied >= self.commit.min(member.received) {
            return None;
        }
        if self.leader == Some(m) {
            return Some(Duration::ZERO);
        }
        let slow = member.slow_until.is_some_and(|until| until > now);
        let range = if slow { self.slow_lag } else { self.apply_lag };
        Some(self.draw(range))
    }

    /// Once a tick: members silent past the sync limit stop serving, a leader without a
    /// quorum or cut off gives way, an election ends, sessions the leader has not heard
    /// from expire.
    fn tick(&mut self, now: Instant) {
        let limit = self.sync_limit;
        for m in 0..self.members.len() {
            let silent = self.members[m]
                .silent_since
                .is_some_and(|since| now.saturating_duration_since(since) >= limit);
            if silent && self.members[m].serving && self.leader != Some(m) {
                debug!(member = m, "a member past the sync limit drops its clients");
                self.stop_serving(m);
            }
        }
        if let Some(l) = self.leader {
            // The members the leader still has: a killed one is missed at once (its links
            // close), one cut off or unheard from only past the sync limit.
            let past_limit = |member: &Member| {
                member
                    .silent_since
                    .is_some_and(|since| now.saturating_duration_since(since) >= limit)
            };
            let with_leader = (0..self.members.len())
                .filter(|&m| {
                    let member = &self.members[m];
                    member.up && (m == l || !past_limit(member))
                })
                .count();
            if with_leader < self.quorum() {
                self.start_election(now);
            }
        }
        if self.electing.is_some_and(|until| until <= now) {
            self.finish_election(now);
        }
        if self.leader.is_some() && self.electing.is_none() {
            let leader = self.leader.unwrap_or(0);
            for id in self.sessions.due(now.into_std()) {
                debug!(
                    session = format_args!("{id:#x}"),
                    "the leader expires a session"
                );
                self.end_session(leader, id, now);
            }
        }
    }
}

/// Drops the clients and the local sessions of `members`.
fn drop_members(shared: &[Arc<Shared>], inner: &Inner, members: &[usize]) {
    for &m in members {
        let Some(member) = shared.get(m) else {
            continue;
        };
        let connections = std::mem::take(&mut *member.connections());
        for handle in connections.into_values() {
            handle.abort();
        }
        let mut state = member.state();
        let mut core = inner.core();
        let local: Vec<i64> = core
            .local
            .iter()
            .filter(|(_, owner)| **owner == m)
            .map(|(id, _)| *id)
            .collect();
        for id in local {
            core.local.remove(&id);
            state.drop_local_session(id);
        }
    }
}

/// Member `m` applies the committed log at its pace.
async fn applier(shared: Arc<Shared>, inner: Arc<Inner>, m: usize) {
    let mut bell = inner.bell.subscribe();
    loop {
        bell.borrow_and_update();
        let wait = {
            let mut core = inner.core();
            core.answer_syncs(m);
            core.check_serving(m);
            core.next_batch(m, Instant::now())
        };
        let Some(wait) = wait else {
            if bell.changed().await.is_err() {
                return;
            }
            continue;
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let now = Instant::now();
        let mut state = shared.state();
        let mut guard = inner.core();
        let core = &mut *guard;
        let member = &core.members[m];
        if !member.up {
            continue;
        }
        let end = core.commit.min(member.received);
        let start = member.applied;
        for entry in core.log.get(start..end).unwrap_or_default() {
            let origin = entry
                .origin
                .filter(|(from, _, _)| *from == m)
                .map(|(_, conn, xid)| (conn, xid));
            let reply = state.apply_committed(entry.zxid, entry.time, &entry.what, origin, now);
            if let Some((conn, reply)) = reply {
                let xid = origin.map_or(0, |(_, xid)| xid);
                match core.lost.remove(&(m, conn, xid)) {
                    // Applied, never answered: the connection closes instead.
                    Some((armed, opcode, path)) => {
                        let frame = match &reply {
                            Reply::Send(frame) | Reply::SendAndClose(frame) => frame.as_slice(),
                            Reply::Close | Reply::Nothing => &[],
                        };
                        let mut header = codec::Reader::new(frame.get(8..).unwrap_or_default());
                        let zxid = header.i64().unwrap_or(0);
                        let error_code = header.i32().unwrap_or(0);
                        debug!(member = m, conn, xid, opcode, "a member lost a reply");
                        armed.fired.send_replace(Some(crate::faults::LostReply::new(
                            xid, opcode, path, zxid, error_code,
                        )));
                        state.answer(conn, Reply::Close);
                    }
                    None => state.answer(conn, reply),
                }
            }
            if origin.is_some() {
                if let Some(waiter) = core.waiters.remove(&entry.zxid) {
                    let _ = waiter.send(());
                }
            }
        }
        let member = &mut core.members[m];
        member.applied = member.applied.max(end);
        core.answer_syncs(m);
        core.check_serving(m);
    }
}

/// The ensemble's clock: silence, elections, session expiry, and the leader's reaping of
/// containers and TTL nodes.
async fn driver(members: Vec<Arc<Shared>>, inner: Arc<Inner>, tick: Duration, reap: Duration) {
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_reap = Instant::now() + reap;
    loop {
        interval.tick().await;
        let now = Instant::now();
        let drops = {
            let mut core = inner.core();
            core.tick(now);
            std::mem::take(&mut core.drops)
        };
        drop_members(&members, &inner, &drops);
        // Local sessions expire on their member.
        for (m, member) in members.iter().enumerate() {
            let mut state = member.state();
            let due = state.sessions.due(now.into_std());
            let mut core = inner.core();
            for id in due {
                if core.local.get(&id) == Some(&m) {
                    core.local.remove(&id);
                    state.drop_local_session(id);
                }
            }
        }
        if now >= next_reap {
            next_reap = now + reap;
            let leader = inner.core().leader;
            if let Some(l) = leader {
                let candidates = members[l].state().reapable(now);
                let mut core = inner.core();
                if core.members[l].applied == core.log.len() && core.reaches_leader(l) {
                    for path in candidates {
                        core.propose(l, None, Applied::Reap { path }, None, now);
                    }
                }
            }
        }
        inner.ring();
    }
}

/// What a member's connection waits for before it takes its next request.
#[derive(Debug)]
pub(crate) struct Wait {
    told: oneshot::Receiver<()>,
    then: Then,
}

/// What a connection does once its wait is over.
#[derive(Debug)]
enum Then {
    /// Nothing more (the reply was queued when the member applied the write).
    Nothing,
    /// Answers this request (a `sync`) now.
    Answer {
        xid: i32,
        opcode: i32,
        request: Request,
    },
    /// Binds the new session now (its creation was applied).
    Bind { id: i64, timeout: Duration },
}

/// How a wait ended, for the connection.
#[derive(Debug)]
pub(crate) enum Completed {
    /// Take the next request.
    Next,
    /// The session is established.
    Established,
    /// Close the connection.
    Close,
}

/// Waits for the connection's wait, if any, to end; whether it ended as planned (not
/// dropped: the member stopped serving).
pub(crate) async fn finished(waiting: &mut Option<Wait>) -> bool {
    match waiting {
        Some(wait) => (&mut wait.told).await.is_ok(),
        None => std::future::pending().await,
    }
}

/// Does what a connection's wait left to do; `told` says whether it ended as planned.
pub(crate) fn complete(
    wait: Wait,
    told: bool,
    conn: ConnId,
    shared: &Shared,
    tx: &Outbox,
) -> Completed {
    if !told {
        tx.close();
        return Completed::Close;
    }
    let now = Instant::now();
    match wait.then {
        Then::Nothing => Completed::Next,
        Then::Answer {
            xid,
            opcode,
            request,
        } => {
            let mut state = shared.state();
            let reply = state.request(conn, xid, opcode, Ok(request), now);
            if reply.queue_on(tx) {
                Completed::Close
            } else {
                Completed::Next
            }
        }
        Then::Bind { id, timeout } => {
            let mut state = shared.state();
            if state.sessions.get(id).is_none() {
                tx.close();
                return Completed::Close;
            }
            tx.frame(state.bind_new(conn, id, timeout, now));
            Completed::Established
        }
    }
}

/// How a member answered a handshake.
#[derive(Debug)]
pub(crate) enum Handshake {
    /// Close without an answer (not serving, or the client has seen a later zxid).
    Refuse,
    /// Answered (queued): whether the session is established.
    Answered(bool),
    /// Answered once the wait is over.
    Wait(Wait),
}

/// A handshake on a member (its answer queued on `tx` under the state lock).
pub(crate) fn handshake(
    seat: &Seat,
    shared: &Shared,
    conn: ConnId,
    request: &ConnectRequest,
    tx: &Outbox,
) -> Handshake {
    let now = Instant::now();
    let m = seat.index;
    let mut state = shared.state();
    let mut core = seat.inner.core();
    if !core.members[m].serving {
        return Handshake::Refuse;
    }
    if request.last_zxid_seen > state.zxid {
        debug!(
            member = m,
            conn,
            client_zxid = format_args!("{:#x}", request.last_zxid_seen),
            zxid = format_args!("{:#x}", state.zxid),
            "client has seen a newer zxid than this member; refusing"
        );
        return Handshake::Refuse;
    }
    let limits = &shared.settings;
    let requested = Duration::from_millis(u64::try_from(request.timeout).unwrap_or(0));
    let timeout = requested
        .max(limits.min_session_timeout)
        .min(limits.max_session_timeout);
    if request.session_id == 0 {
        let id = core.sessions.create(timeout, conn, now.into_std());
        if core.local_sessions {
            core.sessions.remove(id);
            core.local.insert(id, m);
            drop(core);
            tx.frame(state.bind_new(conn, id, timeout, now));
            return Handshake::Answered(true);
        }
        let told = core.send(
            m,
            Some((conn, 0)),
            Applied::CreateSession { id, timeout },
            now,
        );
        drop(core);
        seat.inner.ring();
        return Handshake::Wait(Wait {
            told,
            then: Then::Bind { id, timeout },
        });
    }
    let id = request.session_id;
    let known = match core.local.get(&id) {
        Some(&owner) => owner == m && state.sessions.get(id).is_some(),
        None => core.sessions.get(id).is_some(),
    };
    if !known || request.password != core.sessions.password(id) {
        debug!(
            member = m,
            conn,
            session = format_args!("{id:#x}"),
            "invalid or expired session"
        );
        tx.frame(codec::connect_response(0, 0, &[0; 16]));
        tx.close();
        return Handshake::Answered(false);
    }
    let kept = core.sessions.get(id).map_or(timeout, |s| s.timeout);
    if core.reaches_leader(m) {
        core.sessions.touch(id, now.into_std());
    }
    drop(core);
    state.adopt_session(id, kept, now);
    match state.handshake(conn, request, now) {
        None => Handshake::Refuse,
        Some((frame, valid)) => {
            tx.frame(frame);
            if !valid {
                tx.close();
            }
            Handshake::Answered(valid)
        }
    }
}

/// Whether a request creates an ephemeral node (which makes a local session global).
fn creates_ephemeral(request: &Request) -> bool {
    let ephemeral = |op: &WriteOp| {
        matches!(op, WriteOp::Create(c)
            if matches!(c.flags, 1 | 3) && matches!(c.opcode, op::CREATE | op::CREATE2))
    };
    match request {
        Request::Write(w) => ephemeral(w),
        Request::Multi(ops) => ops.iter().any(ephemeral),
        _ => false,
    }
}

/// A request on a member's established connection: writes (and `closeSession`) go to the
/// leader and are answered once applied here, `sync` once this member has caught up with
/// what the leader had committed, the rest from this member's own state. Returns whether
/// the connection is closing, and what it waits for first if anything.
pub(crate) fn request(
    seat: &Seat,
    shared: &Shared,
    conn: ConnId,
    xid: i32,
    opcode: i32,
    request: Result<Request, codec::DecodeError>,
    tx: &Outbox,
) -> (bool, Option<Wait>) {
    let now = Instant::now();
    let m = seat.index;
    let mut state = shared.state();
    let session = state.session_of(conn).unwrap_or(0);
    if session != 0 {
        let mut core = seat.inner.core();
        if core.reaches_leader(m) && core.sessions.get(session).is_some() {
            core.sessions.touch(session, now.into_std());
        }
    }
    let routed = matches!(
        request,
        Ok(Request::Write(_)
            | Request::Multi(_)
            | Request::Session(SessionRequest::Close | SessionRequest::Reconfig)
            | Request::Read(ReadRequest::Sync(_)))
    );
    if session == 0 || !routed {
        let reply = state.request(conn, xid, opcode, request, now);
        return (reply.queue_on(tx), None);
    }
    let Ok(request) = request else {
        return (false, None);
    };
    if !state.sessions.touch(session, now.into_std()) {
        let reply = codec::Writer::reply(xid, state.zxid, code::SESSION_EXPIRED).finish();
        tx.frame(reply);
        tx.close();
        return (true, None);
    }
    if let Request::Session(SessionRequest::Reconfig) = request {
        return (state.refuse_reconfig(xid).queue_on(tx), None);
    }
    let mut core = seat.inner.core();
    if let Request::Read(ReadRequest::Sync(_)) = request {
        let (tell, told) = oneshot::channel();
        let target = core.reaches_leader(m).then_some(core.commit);
        core.members[m].syncs.push((target, tell));
        drop(core);
        seat.inner.ring();
        return (
            false,
            Some(Wait {
                told,
                then: Then::Answer {
                    xid,
                    opcode,
                    request,
                },
            }),
        );
    }
    let local = core.local.get(&session) == Some(&m);
    if local && matches!(request, Request::Session(SessionRequest::Close)) {
        core.local.remove(&session);
        drop(core);
        tx.frame(codec::Writer::reply(xid, state.zxid, code::OK).finish());
        state.sessions.remove(session);
        tx.close();
        return (true, None);
    }
    if local && creates_ephemeral(&request) {
        // Upgraded: made global by a transaction of its own, before the write.
        let timeout = state
            .sessions
            .get(session)
            .map_or(Duration::from_secs(10), |s| s.timeout);
        core.local.remove(&session);
        core.sessions.adopt(session, timeout, now.into_std());
        if core.reaches_leader(m) {
            core.propose(
                m,
                None,
                Applied::CreateSession {
                    id: session,
                    timeout,
                },
                None,
                now,
            );
        } else {
            core.members[m].forward.push((
                None,
                Applied::CreateSession {
                    id: session,
                    timeout,
                },
                None,
            ));
        }
    }
    let path = request.path().map(str::to_owned);
    if !matches!(request, Request::Session(_)) {
        if let Some(armed) = shared.faults.take_if_matches(opcode, path.as_deref()) {
            core.lost.insert((m, conn, xid), (armed, opcode, path));
        }
    }
    let auth = state.auth_of(conn);
    let told = core.send(
        m,
        Some((conn, xid)),
        Applied::Request {
            session,
            auth,
            request,
        },
        now,
    );
    drop(core);
    seat.inner.ring();
    (
        false,
        Some(Wait {
            told,
            then: Then::Nothing,
        }),
    )
}
