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
//!   to any member; a local one re-attaches only where it was made. The leader knows which
//!   member serves each global session (where it was made, or last re-attached through the
//!   leader), and refuses a write of it sent by another member, from a connection its client
//!   has left: not applied, that connection closed unanswered, as ZooKeeper answers such a
//!   request (`SessionMoved`); a local session's upgrade, held for a leader while its client
//!   moved on, leaves the session where it went. A member takes a session's requests in
//!   order whatever connection they come on (ZooKeeper's commit processor): a client back
//!   on a member after its connection died waits for the writes it sent on that one. A
//!   member refuses (closes without an answer) a client that has seen a later zxid than its
//!   own, as ZooKeeper's servers do.
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
//!
//! In three layers, none of which uses one above it: `replication` holds what the members
//! share (the log, elections, the global sessions) and the `Seat` each member's `Shared`
//! keeps; `member` serves one connection on a member (its handshake and requests, for
//! `crate::connection`); this module starts the members, applies the log to their trees,
//! drives the ensemble's clock and serves the connections handed to it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::debug;

use crate::codec;
use crate::connection::{admit, serve_connection};
use crate::error::Error;
use crate::faults::{LostReplyHandle, RequestMatcher};
use crate::session::Sessions;
use crate::shared::Shared;
use crate::state::{Applied, Reply};
use crate::EmbeddedServerBuilder;
use replication::{Core, Inner, Member, Seat};

pub(crate) mod member;
pub(crate) mod replication;

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
            owners: BTreeMap::new(),
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
            core.answer_session_waits(m);
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
        core.answer_session_waits(m);
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
