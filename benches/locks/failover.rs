//! The failover workload (issue 18): how long an election goes without a
//! leader when the leader's process dies.
//!
//! K participants (one session each) take part in ONE election with a
//! `LeaderLatch`: zk-curator's in this process, Apache Curator's in the JVM
//! peer (its `latch-*` commands). Every participant reaches the server
//! through a proxy of its own (`zk_curator_testing::FaultProxy`, which
//! forwards bytes unchanged and records the frames), so that the election's
//! requests are counted apart from the pings of the hundreds of sessions the
//! other workloads keep open, and so that a leader can be made to die. Each
//! failover:
//!
//! 1. the leader is found and every other participant is parked in its wait
//!    for leadership (`await_leadership`, Curator's `await()`);
//! 2. the leader dies: its proxy stops forwarding anything either way (it
//!    can neither send nor hear, nor reconnect), and this program closes its
//!    session on the server as the server closes a dead process's: a second
//!    connection, straight to the server, presents the session's id and
//!    password (which the proxy saw granted) and sends `closeSession`
//!    (`zk_curator_testing::close_granted_session`). The leader's node goes
//!    with the session. The same steps, from the same program, for both
//!    contenders. (Without the pause, a client that reconnects at once, as
//!    zookeeper-client does, can take its session back between the
//!    handshake and the close, and hand leadership on by itself: a different
//!    path from a dead process's.)
//! 3. the failover time runs from just before that call until the first of
//!    the other participants' waits returns, on the wall clock that the two
//!    processes share (microseconds);
//! 4. the old leader's proxy forwards again, and the change is over when the
//!    election is whole again: the killed participant has learnt that its
//!    session expired, has a new one and has queued again, which the server
//!    shows as its counts of ephemeral nodes and of set watches (`mntr`) back
//!    where they were before the kill. The requests and the watch
//!    notifications the proxies saw over that whole change are its cost.
//!
//! On the bench's ensemble (`--ensemble`), a participant has a proxy to
//! each member, its connect string names all of them (its client picks a
//! member as it would among the members themselves), and a kill pauses all
//! of them; the session is closed through any member, and the server's
//! counts are summed over the members. No member is stopped: what is
//! measured stays the leader's session ending and the next one taking
//! over, now with a quorum round in each write.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use zk_curator::{Framework, LeaderElection, LeaderLatch};
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::{close_granted_session, FaultProxy, SessionGrant, Traffic};

use super::contenders::{Contender, Imp};
use super::findings::Findings;
use super::limits::{
    within, BoxError, Measured, Scoped, ACQUIRE_LIMIT, CLOSE_LIMIT, CONNECT_LIMIT,
};
use super::mntr::{counters, first_host, Counters};
use super::options::Config;
use super::peers::{field, Peer};
use super::reps::{rotation, settle};
use super::sessions::{framework, Tune};
use super::stats::{noise, ratio, Spread};
use super::target::Target;

/// Waiting for the next leader after a kill.
pub(crate) const NEXT_LIMIT: Duration = Duration::from_secs(30);
/// Closing a session on the server.
pub(crate) const KILL_LIMIT: Duration = Duration::from_secs(10);
/// Waiting for the killed participant to queue again.
const WHOLE_LIMIT: Duration = Duration::from_secs(30);
/// How often the server's counts are read while waiting for that.
const POLL: Duration = Duration::from_millis(10);
/// Without `mntr`, the wait for the killed participant to queue again.
pub(crate) const WHOLE_WITHOUT_MNTR: Duration = Duration::from_secs(3);
/// The xid of a watch notification.
pub(crate) const NOTIFICATION_XID: i32 = -1;

// ---------------------------------------------------------------------------
// The two elections
// ---------------------------------------------------------------------------

/// zk-curator's election: a framework (one session) per participant.
pub(crate) struct RustElection {
    pub(crate) frameworks: Vec<Framework>,
    pub(crate) latches: Vec<LeaderLatch>,
}

/// One contender's election.
pub(crate) enum Election<'a> {
    /// zk-curator's, once started.
    Rust(Option<RustElection>),
    /// Apache Curator's, in the JVM peer.
    Curator(&'a mut Peer),
    /// Cannot run (the reason).
    Missing(String),
}

/// zk-curator's armed waits, and where each reports (participant, when its
/// wait returned).
type Waits = (Scoped<()>, mpsc::UnboundedReceiver<(usize, SystemTime)>);

/// A leader about to be killed, and the others waiting.
pub(crate) struct Armed {
    pub(crate) leader: usize,
    /// The leader's session.
    pub(crate) session_id: i64,
    /// zk-curator's waits (the peer keeps its own).
    waits: Option<Waits>,
}

impl Election<'_> {
    /// An election of one participant per connect string, on `path`.
    pub(crate) async fn start(&mut self, connects: &[String], path: &str) -> Measured<()> {
        let limit = CONNECT_LIMIT * connects.len() as u32 + ACQUIRE_LIMIT;
        match self {
            Election::Rust(slot) => {
                let started = async {
                    let mut frameworks = Vec::with_capacity(connects.len());
                    for connect in connects {
                        frameworks.push(framework(connect, Tune::Plain).await?);
                    }
                    let mut latches = Vec::with_capacity(connects.len());
                    for (i, fw) in frameworks.iter().enumerate() {
                        let latch = LeaderLatch::new(fw.clone(), path, format!("zk-curator-{i}"))?;
                        latch.start()?;
                        latches.push(latch);
                    }
                    one_leader(&latches, ACQUIRE_LIMIT).await?;
                    Ok::<_, BoxError>(RustElection {
                        frameworks,
                        latches,
                    })
                };
                let election = within(limit, started).await.and_then(|r| r);
                *slot = Some(election.map_err(|e| e.to_string())?);
                Ok(())
            }
            Election::Curator(peer) => peer
                .request(&format!("latch-start {path} {}", connects.join(" ")), limit)
                .await
                .map(drop),
            Election::Missing(reason) => Err(reason.clone()),
        }
    }

    /// `cycles` hand-overs between two latches on the election's first two
    /// sessions, on a path of their own (the leader closes, the waiting one
    /// leads, a new latch queues behind it); the seconds they took.
    async fn warm(&mut self, path: &str, cycles: usize, limit: Duration) -> Measured<f64> {
        match self {
            Election::Rust(Some(election)) => {
                let fws = &election.frameworks;
                let run = async {
                    if fws.len() < 2 {
                        return Err::<f64, BoxError>("the hand-overs need two sessions".into());
                    }
                    let started = Instant::now();
                    let mut leader = LeaderLatch::new(fws[0].clone(), path, "warm-0")?;
                    leader.start()?;
                    within(ACQUIRE_LIMIT, leader.await_leadership()).await??;
                    let mut leader_fw = 0;
                    let mut waiter = LeaderLatch::new(fws[1].clone(), path, "warm-1")?;
                    waiter.start()?;
                    for _ in 0..cycles {
                        within(CLOSE_LIMIT, leader.close()).await??;
                        within(ACQUIRE_LIMIT, waiter.await_leadership()).await??;
                        let next = LeaderLatch::new(
                            fws[leader_fw].clone(),
                            path,
                            format!("warm-{leader_fw}"),
                        )?;
                        next.start()?;
                        leader_fw = 1 - leader_fw;
                        leader = std::mem::replace(&mut waiter, next);
                    }
                    within(CLOSE_LIMIT, leader.close()).await??;
                    within(CLOSE_LIMIT, waiter.close()).await??;
                    Ok(started.elapsed().as_secs_f64())
                };
                within(limit, run)
                    .await
                    .and_then(|r| r)
                    .map_err(|e| e.to_string())
            }
            Election::Curator(peer) => {
                let r = peer
                    .request(&format!("latch-warm {path} {cycles}"), limit)
                    .await?;
                field(&r, "secs")
            }
            Election::Rust(None) => Err("not started".to_owned()),
            Election::Missing(reason) => Err(reason.clone()),
        }
    }

    /// Finds the leader and its session; parks every other participant in
    /// its wait for leadership.
    pub(crate) async fn arm(&mut self) -> Measured<Armed> {
        match self {
            Election::Rust(Some(election)) => {
                let arm = async {
                    let leader = one_leader(&election.latches, ACQUIRE_LIMIT).await?;
                    let session = election.latches[leader].framework().session().await?;
                    let (report, reports) = mpsc::unbounded_channel();
                    let mut waits = Scoped(Vec::with_capacity(election.latches.len()));
                    for (i, latch) in election.latches.iter().enumerate() {
                        if i == leader {
                            continue;
                        }
                        let (latch, report) = (latch.clone(), report.clone());
                        waits.0.push(tokio::spawn(async move {
                            if latch.await_leadership().await.is_ok() {
                                let _ = report.send((i, SystemTime::now()));
                            }
                        }));
                    }
                    Ok::<_, BoxError>(Armed {
                        leader,
                        session_id: session.id(),
                        waits: Some((waits, reports)),
                    })
                };
                within(ACQUIRE_LIMIT + KILL_LIMIT, arm)
                    .await
                    .and_then(|r| r)
                    .map_err(|e| e.to_string())
            }
            Election::Curator(peer) => {
                let millis = NEXT_LIMIT.as_millis();
                let r = peer
                    .request(&format!("latch-arm {millis}"), NEXT_LIMIT + KILL_LIMIT)
                    .await?;
                let session = r
                    .get("session")
                    .and_then(|v| u64::from_str_radix(v, 16).ok())
                    .ok_or("latch-arm: no valid session")?;
                Ok(Armed {
                    leader: field(&r, "leader")?,
                    // The id's bits, as ZooKeeper's signed long.
                    session_id: session as i64,
                    waits: None,
                })
            }
            Election::Rust(None) => Err("not started".to_owned()),
            Election::Missing(reason) => Err(reason.clone()),
        }
    }

    /// The first of the armed waits to return: which participant, and when.
    pub(crate) async fn next(&mut self, armed: Armed) -> Measured<(usize, SystemTime)> {
        match (self, armed.waits) {
            (Election::Curator(peer), _) => {
                let millis = NEXT_LIMIT.as_millis();
                let r = peer
                    .request(&format!("latch-next {millis}"), NEXT_LIMIT + KILL_LIMIT)
                    .await?;
                let at = UNIX_EPOCH + Duration::from_micros(field(&r, "at_us")?);
                Ok((field(&r, "leader")?, at))
            }
            (_, Some((waits, mut reports))) => {
                let first = within(NEXT_LIMIT, reports.recv())
                    .await
                    .map_err(|e| format!("no other participant led: {e}"))?;
                // The other waits are aborted here.
                drop(waits);
                first.ok_or_else(|| "every other participant's wait failed".to_owned())
            }
            (_, None) => Err("not armed".to_owned()),
        }
    }

    pub(crate) async fn stop(&mut self) {
        match self {
            Election::Rust(slot) => {
                if let Some(election) = slot.take() {
                    for latch in &election.latches {
                        let _ = tokio::time::timeout(CLOSE_LIMIT, latch.close()).await;
                    }
                    let closing = election.frameworks.into_iter().map(|fw| async move {
                        let _ = tokio::time::timeout(CLOSE_LIMIT, fw.close()).await;
                    });
                    futures::future::join_all(closing).await;
                }
            }
            Election::Curator(peer) => {
                let _ = peer.request("latch-stop", Duration::from_secs(30)).await;
            }
            Election::Missing(_) => {}
        }
    }
}

/// The index of the one latch that leads, waiting at most `limit` for there
/// to be exactly one.
async fn one_leader(latches: &[LeaderLatch], limit: Duration) -> Result<usize, BoxError> {
    let until = Instant::now() + limit;
    loop {
        let leaders: Vec<usize> = latches
            .iter()
            .enumerate()
            .filter(|(_, latch)| latch.has_leadership())
            .map(|(i, _)| i)
            .collect();
        if let [leader] = leaders[..] {
            return Ok(leader);
        }
        if Instant::now() > until {
            return Err(format!("{} leaders after {limit:?}", leaders.len()).into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

// ---------------------------------------------------------------------------
// One failover
// ---------------------------------------------------------------------------

/// What one failover cost.
struct Change {
    /// From just before the kill until another participant's wait returned.
    failover_ms: f64,
    /// From the kill until the killed participant had queued again.
    whole_ms: Option<f64>,
    /// Requests through the proxy over the change, by opcode (pings left
    /// out), and the connections opened (a handshake each).
    requests: BTreeMap<i32, usize>,
    handshakes: usize,
    /// Watch notifications through the proxy over the change.
    notifications: usize,
}

impl Change {
    fn requests(&self) -> f64 {
        (self.requests.values().sum::<usize>() + self.handshakes) as f64
    }
}

/// The session grant the leader's proxies (one per member it may connect
/// to) saw for the leader of `armed`.
pub(crate) fn leader_grant(leader_proxies: &[FaultProxy], armed: &Armed) -> Measured<SessionGrant> {
    leader_proxies
        .iter()
        .flat_map(FaultProxy::granted_sessions)
        .find(|g| g.session_id == armed.session_id)
        .ok_or_else(|| {
            format!(
                "the proxy saw no session {:#x} (the leader's) granted",
                armed.session_id
            )
        })
}

/// A leader killed, and who took over.
pub(crate) struct Killed {
    /// The participant that leads now.
    pub(crate) next: usize,
    /// When its wait returned (wall clock).
    pub(crate) led_at: SystemTime,
    /// When the leader was killed (monotonic, then wall clock).
    pub(crate) started: Instant,
    pub(crate) killed_at: SystemTime,
}

/// Kills the leader of `armed` as if its process died: its proxies (one per
/// member it may connect to) stop forwarding, and its session (`grant`) is
/// closed on the server. Returns once another participant leads. The
/// proxies forward again at the end, so the killed participant learns that
/// its session is gone and queues again.
pub(crate) async fn kill_leader(
    election: &mut Election<'_>,
    armed: Armed,
    target: &Target,
    leader_proxies: &[FaultProxy],
    grant: &SessionGrant,
) -> Measured<Killed> {
    let old = armed.leader;
    // The leader's process dies: nothing in or out of it from now on, to
    // any member.
    for proxy in leader_proxies {
        proxy.set_paused(true);
    }
    let started = Instant::now();
    let killed_at = SystemTime::now();
    let outcome = async {
        match within(
            KILL_LIMIT,
            close_granted_session(&target.connect, grant, KILL_LIMIT),
        )
        .await
        {
            Ok(Ok(())) => {}
            // Dropping `armed` ends zk-curator's waits; the peer ends its
            // own at the next arm or stop.
            Ok(Err(err)) => return Err(format!("could not close the leader's session: {err}")),
            Err(err) => return Err(format!("could not close the leader's session: {err}")),
        }
        election.next(armed).await
    }
    .await;
    // It comes back: it learns that its session is gone, and queues again.
    for proxy in leader_proxies {
        proxy.set_paused(false);
    }
    let (next, led_at) = outcome?;
    if next == old {
        return Err("the killed leader led again first".to_owned());
    }
    Ok(Killed {
        next,
        led_at,
        started,
        killed_at,
    })
}

/// One failover; `groups[i]` are participant i's proxies, one per member.
async fn failover(
    election: &mut Election<'_>,
    target: &Target,
    groups: &[Vec<FaultProxy>],
) -> Measured<Change> {
    let armed = election.arm().await?;
    let leader_proxies = groups.get(armed.leader).ok_or("the leader has no proxy")?;
    let grant = leader_grant(leader_proxies, &armed)?;
    let proxies: Vec<&FaultProxy> = groups.iter().flatten().collect();
    // The waits park, and the previous change's tail is over.
    settle().await;
    let addr = target.four_letter.as_deref();
    let before = counters(addr).await;
    for proxy in &proxies {
        proxy.clear_traffic();
    }
    let accepted: usize = proxies.iter().map(|p| p.accepted_connections()).sum();
    let Killed {
        led_at,
        started,
        killed_at,
        ..
    } = kill_leader(election, armed, target, leader_proxies, &grant).await?;
    let failover = led_at
        .duration_since(killed_at)
        .map_err(|_| "the wall clock went back during a failover".to_owned())?;
    let whole = match before {
        Some(before) => Some(whole_again(addr, &before, started).await?),
        None => {
            tokio::time::sleep(WHOLE_WITHOUT_MNTR).await;
            None
        }
    };
    let mut requests = BTreeMap::new();
    let mut notifications = 0;
    for frame in proxies.iter().flat_map(|p| p.traffic()) {
        match frame {
            Traffic::Request { opcode, .. } => *requests.entry(opcode).or_default() += 1,
            Traffic::Reply { xid, .. } if xid == NOTIFICATION_XID => notifications += 1,
            Traffic::Reply { .. } => {}
        }
    }
    let handshakes = proxies
        .iter()
        .map(|p| p.accepted_connections())
        .sum::<usize>()
        .saturating_sub(accepted);
    Ok(Change {
        failover_ms: failover.as_secs_f64() * 1e3,
        whole_ms: whole.map(|w| w.as_secs_f64() * 1e3),
        requests,
        handshakes,
        notifications,
    })
}

/// Waits until the server's ephemeral nodes and set watches are back to
/// `before` (the killed participant queued again); the time since `started`.
pub(crate) async fn whole_again(
    addr: Option<&str>,
    before: &Counters,
    started: Instant,
) -> Measured<Duration> {
    let mut last = None;
    while started.elapsed() < WHOLE_LIMIT {
        if let Some(now) = counters(addr).await {
            if now.ephemerals == before.ephemerals && now.watches_set == before.watches_set {
                return Ok(started.elapsed());
            }
            last = Some(now);
        }
        tokio::time::sleep(POLL).await;
    }
    Err(format!(
        "the election was not whole again within {WHOLE_LIMIT:?} (ephemerals {} of {}, watches {} of {})",
        last.map_or(f64::NAN, |c| c.ephemerals),
        before.ephemerals,
        last.map_or(f64::NAN, |c| c.watches_set),
        before.watches_set
    ))
}

/// `count` failovers in a row.
async fn failovers(
    election: &mut Election<'_>,
    target: &Target,
    groups: &[Vec<FaultProxy>],
    count: usize,
) -> Measured<Vec<Change>> {
    let mut changes = Vec::with_capacity(count);
    for _ in 0..count {
        changes.push(failover(election, target, groups).await?);
    }
    Ok(changes)
}

fn opcode_name(code: i32) -> String {
    let name = match code {
        opcode::CREATE => "create",
        opcode::CREATE2 => "create2",
        opcode::CREATE_CONTAINER => "createContainer",
        opcode::DELETE => "delete",
        opcode::EXISTS => "exists",
        opcode::GET_DATA => "getData",
        opcode::SET_DATA => "setData",
        opcode::GET_CHILDREN => "getChildren",
        opcode::GET_CHILDREN2 => "getChildren2",
        opcode::SYNC => "sync",
        opcode::MULTI => "multi",
        opcode::MULTI_READ => "multiRead",
        opcode::CHECK_WATCHES => "checkWatches",
        opcode::REMOVE_WATCHES => "removeWatches",
        opcode::SET_WATCHES => "setWatches",
        opcode::SET_WATCHES2 => "setWatches2",
        opcode::ADD_WATCH => "addWatch",
        opcode::CLOSE_SESSION => "closeSession",
        opcode::AUTH => "auth",
        opcode::WHO_AM_I => "whoAmI",
        _ => return format!("op{code}"),
    };
    name.to_owned()
}

// ---------------------------------------------------------------------------
// The workload
// ---------------------------------------------------------------------------

/// One rep of one contender: its failovers.
struct RepFigures {
    /// Median and worst failover of the rep.
    p50_ms: f64,
    max_ms: f64,
    whole_ms: Option<f64>,
    /// Means per change.
    requests: f64,
    notifications: f64,
}

impl RepFigures {
    fn of(changes: &[Change]) -> Option<RepFigures> {
        let times: Vec<f64> = changes.iter().map(|c| c.failover_ms).collect();
        let p50 = Spread::of(&times)?;
        let wholes: Option<Vec<f64>> = changes.iter().map(|c| c.whole_ms).collect();
        let n = changes.len() as f64;
        Some(RepFigures {
            p50_ms: p50.median,
            max_ms: p50.max,
            whole_ms: wholes.and_then(|w| Spread::of(&w)).map(|s| s.median),
            requests: changes.iter().map(Change::requests).sum::<f64>() / n,
            notifications: changes.iter().map(|c| c.notifications as f64).sum::<f64>() / n,
        })
    }
}

/// `count` counting proxies in front of `upstream`, on a runtime of their
/// own (one worker thread), so that they take no turns from zk-curator's
/// clients in this process (the JVM has threads of its own).
pub(crate) async fn start_proxies(
    upstream: String,
    count: usize,
) -> Result<(tokio::runtime::Runtime, Vec<FaultProxy>), BoxError> {
    let (runtime, groups) = start_proxy_groups(vec![upstream], count).await?;
    Ok((runtime, groups.into_iter().flatten().collect()))
}

/// `count` groups of counting proxies, one proxy in front of each of
/// `upstreams` in every group (a participant's group: its way to every
/// member of an ensemble), on a runtime of their own as [`start_proxies`].
pub(crate) async fn start_proxy_groups(
    upstreams: Vec<String>,
    count: usize,
) -> Result<(tokio::runtime::Runtime, Vec<Vec<FaultProxy>>), BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("failover-proxy")
        .enable_all()
        .build()?;
    let started = runtime.spawn(async move {
        let mut groups = Vec::with_capacity(count);
        for _ in 0..count {
            let mut group = Vec::with_capacity(upstreams.len());
            for upstream in &upstreams {
                group.push(FaultProxy::start(upstream.as_str()).await?);
            }
            groups.push(group);
        }
        Ok::<_, zk_curator_testing::Error>(groups)
    });
    let reason = match within(CONNECT_LIMIT, started).await {
        Ok(Ok(Ok(groups))) => return Ok((runtime, groups)),
        Ok(Ok(Err(err))) => err.to_string(),
        Ok(Err(join)) => join.to_string(),
        Err(err) => err.to_string(),
    };
    runtime.shutdown_background();
    Err(reason.into())
}

/// The Curator peer of the lock workloads (its JVM runs the latches too).
fn curator_peer(contenders: &mut [Contender]) -> Election<'_> {
    let found = contenders.iter_mut().find_map(|c| match &mut c.imp {
        Imp::Peer(peer) if c.short == "curator" => Some(peer),
        _ => None,
    });
    match found.map(|peer| peer.as_mut().as_mut()) {
        Some(Ok(peer)) => Election::Curator(peer),
        Some(Err(reason)) => Election::Missing(reason.clone()),
        None => Election::Missing("no Curator peer in this run".to_owned()),
    }
}

pub(crate) async fn failover_phase(
    config: &Config,
    target: &Target,
    root: &str,
    contenders: &mut [Contender],
    _idle: f64,
    _findings: &mut Findings,
) {
    let k = config.failover_participants;
    println!();
    println!(
        "== Failover: K = {k} participants (a session each) in ONE election (LeaderLatch); {} failovers a rep ==",
        config.failovers
    );
    println!("   each: the leader dies: its proxy (every participant has one) stops forwarding either way, and this");
    println!("   program closes its session on the server (a second connection presents the session's id and password,");
    println!("   then closeSession), the same steps for both; failover = from just before the close until another");
    println!("   participant's await_leadership / await() returns (wall clock, shared by both processes); whole = until");
    println!("   the old leader, its proxy open again, queued again on a new session (the server's ephemeral node and");
    println!("   watch counts back to before); req = requests per change through the proxies (the new leader's, the old");
    println!("   one's reconnects and re-entry; pings left out); watches = watch notifications per change (1 = no herd)");
    // Each participant reaches the server through a proxy of its own; on
    // the bench's ensemble, through a proxy of its own to each member, and
    // its connect string names them all, so that its client picks a member
    // as it would among the members themselves.
    let upstreams = match &target.ensemble {
        Some(ensemble) => ensemble.addresses(),
        None => match first_host(&target.connect) {
            Some(upstream) => vec![upstream],
            None => {
                println!("n/a (no host in {})", target.connect);
                return;
            }
        },
    };
    if upstreams.len() > 1 {
        println!("   (on the ensemble: each participant has a proxy to every member; its connect string names all of them)");
    }
    // A group of proxies per participant of each election.
    let (proxy_runtime, mut proxies) = match start_proxy_groups(upstreams, 2 * k).await {
        Ok(started) => started,
        Err(err) => {
            println!("n/a (proxies: {err})");
            return;
        }
    };
    let curator_proxies = proxies.split_off(k);
    let proxies = [proxies, curator_proxies];
    let labels = ["zk-curator LeaderLatch", "Apache Curator LeaderLatch"];
    let shorts = ["zkc", "curator"];
    let mut elections = [Election::Rust(None), curator_peer(contenders)];
    let mut ready: Vec<Measured<()>> = Vec::new();
    for (i, election) in elections.iter_mut().enumerate() {
        let path = format!("{root}/failover/{}", shorts[i]);
        let connects: Vec<String> = proxies[i]
            .iter()
            .map(|group| {
                group
                    .iter()
                    .map(FaultProxy::connect_string)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        ready.push(election.start(&connects, &path).await);
    }
    println!(
        "warm-up: {} hand-overs between two latches (the leader closes, the waiting one leads), then {} unmeasured failover(s)",
        config.failover_warmup_cycles, config.failover_warmup_kills
    );
    let warm_limit =
        config.limit() + Duration::from_secs(config.failover_warmup_cycles as u64 / 20);
    for (i, election) in elections.iter_mut().enumerate() {
        if let Err(reason) = &ready[i] {
            println!("  {:<34} n/a (did not start: {reason})", labels[i]);
            continue;
        }
        let path = format!("{root}/failover-warm/{}", shorts[i]);
        let cycles = config.failover_warmup_cycles;
        let warmed = async {
            let secs = election.warm(&path, cycles, warm_limit).await?;
            let kills =
                failovers(election, target, &proxies[i], config.failover_warmup_kills).await?;
            Ok::<_, String>((secs, kills))
        }
        .await;
        match warmed {
            Ok((secs, kills)) => println!(
                "  {:<34} {cycles} hand-overs ({:.0}/s); failovers {}",
                labels[i],
                cycles as f64 / secs,
                kills
                    .iter()
                    .map(|c| format!("{:.1} ms", c.failover_ms))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(reason) => {
                println!("  {:<34} n/a ({reason})", labels[i]);
                ready[i] = Err(reason);
            }
        }
    }
    // [contender][rep], and every measured change's requests by opcode.
    let mut reps: Vec<Vec<Measured<RepFigures>>> = vec![Vec::new(), Vec::new()];
    let mut mix: Vec<(BTreeMap<i32, usize>, usize, usize)> = vec![Default::default(); 2];
    for rep in 0..config.reps {
        for i in rotation(rep, elections.len()) {
            let result = match &ready[i] {
                Ok(()) => failovers(&mut elections[i], target, &proxies[i], config.failovers).await,
                Err(reason) => Err(reason.clone()),
            };
            if let Ok(changes) = &result {
                for change in changes {
                    for (code, n) in &change.requests {
                        *mix[i].0.entry(*code).or_default() += n;
                    }
                    mix[i].1 += change.handshakes;
                    mix[i].2 += 1;
                }
            }
            reps[i].push(result.and_then(|changes| {
                RepFigures::of(&changes).ok_or_else(|| "no failover".to_owned())
            }));
        }
    }
    for election in elections.iter_mut() {
        election.stop().await;
    }
    drop(proxies);
    proxy_runtime.shutdown_background();

    let spread_of = |reps: &[Measured<RepFigures>], f: &dyn Fn(&RepFigures) -> Option<f64>| {
        super::reps::spread(reps, f)
    };
    let p50: Vec<Option<Spread>> = reps
        .iter()
        .map(|r| spread_of(r, &|x| Some(x.p50_ms)))
        .collect();
    println!(
        "{:<34} {:>12} {:>17} {:>9} {:>9} {:>9} {:>7} {:>8}  note",
        "contender", "failover ms", "min–max", "vs Cur.", "worst ms", "whole ms", "req", "watches"
    );
    let fmt = |v: Option<f64>, decimals: usize| {
        v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.decimals$}"))
    };
    for (i, label) in labels.iter().enumerate() {
        let worst = spread_of(&reps[i], &|x| Some(x.max_ms)).map(|s| s.max);
        let whole = spread_of(&reps[i], &|x| x.whole_ms);
        let requests = spread_of(&reps[i], &|x| Some(x.requests));
        let watches = spread_of(&reps[i], &|x| Some(x.notifications));
        let lead = match &p50[i] {
            Some(s) => format!(
                "{:>12.2} {:>17} {:>9}",
                s.median,
                s.range(2),
                ratio(Some(s), p50[1].as_ref())
            ),
            None => format!("{:>12} {:>17} {:>9}", "n/a", "", ""),
        };
        let note = if i == 0 {
            noise(p50[0].as_ref(), p50[1].as_ref(), "Curator")
        } else {
            String::new()
        };
        let failed: Vec<&String> = reps[i].iter().filter_map(|r| r.as_ref().err()).collect();
        let failed = match failed.first() {
            None => String::new(),
            Some(first) if failed.len() == reps[i].len() => format!(" n/a ({first})"),
            Some(first) => format!(
                " {} of {} reps failed: {first}",
                failed.len(),
                reps[i].len()
            ),
        };
        println!(
            "{label:<34} {lead} {:>9} {:>9} {:>7} {:>8}  {note}{failed}",
            fmt(worst, 1),
            fmt(whole.map(|s| s.median), 1),
            fmt(requests.map(|s| s.median), 2),
            fmt(watches.map(|s| s.median), 2),
        );
    }
    println!(
        "(failover ms = median over the reps of each rep's median of {} failovers, LOWER is better; worst = the slowest",
        config.failovers
    );
    println!(
        " failover of all reps; whole = median over the reps of each rep's median; req, watches = the same of each rep's mean)"
    );
    println!("requests per change by kind, over every measured change:");
    for (i, label) in labels.iter().enumerate() {
        let (codes, handshakes, changes) = &mix[i];
        if *changes == 0 {
            continue;
        }
        let n = *changes as f64;
        let mut parts = vec![format!("handshake {:.2}", *handshakes as f64 / n)];
        parts.extend(
            codes
                .iter()
                .map(|(code, count)| format!("{} {:.2}", opcode_name(*code), *count as f64 / n)),
        );
        println!("  {label:<34} {}", parts.join(", "));
    }
}
