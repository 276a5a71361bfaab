//! What an ensemble's members share, below every member's `Shared` state: one log of
//! transactions, ordered by the leader and committed once a quorum holds them; each member
//! as the log sees it (up, cut off, its link from the leader held, what it holds and has
//! applied, the `sync`s and writes it keeps waiting); elections; the global sessions; and
//! the [`Seat`] each member's `Shared` keeps, its index and the way to all this. It knows
//! nothing of connections or of the members' trees: the ensemble (`super`) starts the
//! members and applies the log to their trees, and `member` serves their connections.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tracing::debug;

use crate::codec::{Request, SessionRequest};
use crate::session::Sessions;
use crate::state::Applied;
use crate::watch::ConnId;

/// What the members share: the core, and a bell rung at every change of it.
pub(super) struct Inner {
    pub(super) core: Mutex<Core>,
    pub(super) bell: watch::Sender<u64>,
}

impl Inner {
    pub(super) fn core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn ring(&self) {
        self.bell.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// A member's place in its ensemble, kept in its `Shared` (`crate::shared`).
pub(crate) struct Seat {
    pub(super) index: usize,
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for Seat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seat").field("index", &self.index).finish()
    }
}

/// One transaction of the log.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) zxid: i64,
    /// Node time (ms since the epoch) of what it writes.
    pub(super) time: i64,
    /// The member, connection and xid that sent it, if a client did.
    pub(super) origin: Option<(usize, ConnId, i32)>,
    pub(super) what: Applied,
}

/// A lost-reply fault taken by a write: the fault's record, the write's opcode and path.
type Lost = (crate::faults::Armed, i32, Option<String>);

/// A request a member holds for its leader, which it cannot reach now.
type Forward = (Option<(ConnId, i32)>, Applied, Option<oneshot::Sender<()>>);

/// One member, as the core sees it.
#[derive(Debug, Default)]
pub(super) struct Member {
    pub(super) up: bool,
    pub(super) cut: bool,
    /// What the leader sends it is held.
    pub(super) held: bool,
    /// It takes clients.
    pub(super) serving: bool,
    /// Entries of the log it holds.
    pub(super) received: usize,
    /// Entries it has applied.
    pub(super) applied: usize,
    /// It serves again once it has applied this many.
    pub(super) catch_up: Option<usize>,
    /// Since when it has not heard from its leader.
    pub(super) silent_since: Option<Instant>,
    /// It applies slowly until then.
    pub(super) slow_until: Option<Instant>,
    /// Requests waiting for a leader it can reach.
    pub(super) forward: Vec<Forward>,
    /// `sync`s waiting: the count of entries to apply first (`None`: the leader has not heard
    /// the sync yet), and whom to tell.
    pub(super) syncs: Vec<(Option<usize>, oneshot::Sender<()>)>,
    /// Requests of a session waiting for that session's writes still in flight from this
    /// member (sent on a connection the client has since left), and whom to tell.
    pub(super) session_waits: Vec<(i64, oneshot::Sender<()>)>,
}

/// The ensemble's state: its log, its members, its sessions.
pub(super) struct Core {
    pub(super) log: Vec<Entry>,
    /// Entries committed (a prefix of `log`).
    pub(super) commit: usize,
    pub(super) epoch: i64,
    pub(super) counter: i64,
    pub(super) members: Vec<Member>,
    pub(super) leader: Option<usize>,
    /// An election ends then.
    pub(super) electing: Option<Instant>,
    /// Global sessions (ids and passwords of every session, local ones too).
    pub(super) sessions: Sessions,
    /// Local sessions, and their member.
    pub(super) local: BTreeMap<i64, usize>,
    /// The member that serves each global session, as the leader knows it: where it was
    /// made, or where it last re-attached through the leader. A write of the session sent
    /// by another member (from a connection the client has left) is refused as ZooKeeper's
    /// leader refuses it (`SessionMoved`): applied after the client moved on, it would
    /// make a node that nobody knows of, for as long as the session lives.
    pub(super) owners: BTreeMap<i64, usize>,
    /// Whom to tell when the entry of this zxid is applied on its origin member.
    pub(super) waiters: BTreeMap<i64, oneshot::Sender<()>>,
    /// Sessions the leader ended whose close is not committed yet, with their timeouts.
    pub(super) ending: BTreeMap<i64, Duration>,
    /// Writes whose reply is to be lost (by member, connection and xid), and the fault's
    /// record (with the request's opcode and path).
    pub(super) lost: BTreeMap<(usize, ConnId, i32), Lost>,
    pub(super) rng: fastrand::Rng,
    /// Node times: this (ms since the epoch) at this instant.
    pub(super) time: (i64, Instant),
    /// Members whose clients must be dropped.
    pub(super) drops: Vec<usize>,
    pub(super) local_sessions: bool,
    pub(super) sync_limit: Duration,
    pub(super) apply_lag: (Duration, Duration),
    pub(super) slow_lag: (Duration, Duration),
    pub(super) election: (Duration, Duration),
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
    pub(super) fn reaches_leader(&self, m: usize) -> bool {
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
    pub(super) fn propose(
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
            Applied::Request { session, .. }
                if self
                    .owners
                    .get(&session)
                    .is_some_and(|owner| *owner != from) =>
            {
                Applied::Moved { session }
            }
            created @ Applied::CreateSession { id, .. } => {
                // Its member serves it, unless it has re-attached elsewhere meanwhile (a
                // local session's upgrade held for a leader while its client moved on).
                self.owners.entry(id).or_insert(from);
                created
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
    pub(super) fn end_session(&mut self, leader: usize, id: i64, now: Instant) {
        if let Some(session) = self.sessions.remove(id) {
            self.ending.insert(id, session.timeout);
        }
        self.owners.remove(&id);
        self.propose(leader, None, Applied::CloseSession { id }, None, now);
    }

    /// Member `m` sends a transaction to its leader, or holds it until it can reach one.
    pub(super) fn send(
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
        member.session_waits.clear();
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

    pub(super) fn set_up(&mut self, m: usize, up: bool, now: Instant) {
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

    pub(super) fn cut_off(&mut self, m: usize, on: bool, now: Instant) {
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

    pub(super) fn hold(&mut self, m: usize, on: bool, now: Instant) {
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
    /// Whether member `m` has sent a write of `session` that it has not applied yet (held
    /// for a leader, or in the log past what it applied).
    pub(super) fn in_flight(&self, m: usize, session: i64) -> bool {
        let of_session =
            |what: &Applied| matches!(what, Applied::Request { session: s, .. } if *s == session);
        let member = &self.members[m];
        member.forward.iter().any(|(_, what, _)| of_session(what))
            || self
                .log
                .get(member.applied..)
                .unwrap_or_default()
                .iter()
                .any(|entry| {
                    entry.origin.is_some_and(|(from, _, _)| from == m) && of_session(&entry.what)
                })
    }

    /// Tells the requests waiting on member `m` whose session has no write in flight there
    /// any more.
    pub(super) fn answer_session_waits(&mut self, m: usize) {
        for (session, waiter) in std::mem::take(&mut self.members[m].session_waits) {
            if self.in_flight(m, session) {
                self.members[m].session_waits.push((session, waiter));
            } else {
                let _ = waiter.send(());
            }
        }
    }

    pub(super) fn answer_syncs(&mut self, m: usize) {
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
    pub(super) fn check_serving(&mut self, m: usize) {
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
    pub(super) fn next_batch(&mut self, m: usize, now: Instant) -> Option<Duration> {
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
    pub(super) fn tick(&mut self, now: Instant) {
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
