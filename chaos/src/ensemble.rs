//! The ensemble: its own faults, for runs on a 3-node [`TestingCluster`] built
//! with its peer links through proxies
//! ([`TestingClusterBuilder::quorum_through_proxies`](zk_curator_testing::TestingClusterBuilder::quorum_through_proxies)):
//!
//! * **leader kill**: the leader's JVM is killed, and started again after a
//!   while (the others elect a new leader meanwhile);
//! * **stall**: what the leader sends one follower is held for a while; the
//!   follower keeps serving its clients a past state;
//! * **cut off**: a member loses every peer link for a while; past
//!   `syncLimit` it drops its clients, and their sessions move;
//! * **quorum loss**: two members are killed, then started again together:
//!   nothing can be written meanwhile;
//! * **observer lag**: the fault item 1 of issue 32 is about. A follower is
//!   stalled, a leadership change or two happen without it, and then one of
//!   the observers can reach only that follower: its session is lost and
//!   replaced by a local session there, on a server that still shows the
//!   former leaders. An observer that looked without syncing first would
//!   report one of them after a later one (the observer's rules 1 and 3).
//!
//! Each fault ends with the ensemble whole again (every member running,
//! no link stalled or cut), or, if a restart failed, `heal` makes it so
//! at the end of the run.

use std::time::Duration;

use tokio::time::Instant;
use zk_curator::LeaderObserver;
use zk_curator_testing::TestingCluster;

use crate::config::Draw;
use crate::contenders::Contender;

/// One of the ensemble's faults.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// The leader killed, and started again after a while.
    LeaderKill,
    /// What the leader sends one follower held for a while.
    Stall,
    /// A member cut off from every peer for a while.
    CutOff,
    /// Two members killed, then started again together.
    QuorumLoss,
    /// An observer moved onto a lagging member.
    ObserverLag,
}

impl Fault {
    const ALL: [Fault; 5] = [
        Fault::LeaderKill,
        Fault::Stall,
        Fault::CutOff,
        Fault::QuorumLoss,
        Fault::ObserverLag,
    ];

    /// The `n`th ensemble fault of a run: every other one moves an
    /// observer onto a lagging member, and the others are the other kinds
    /// in turn, so that a short run has every kind (the run's first is
    /// drawn from the seed).
    pub fn nth(n: u64) -> Fault {
        if n % 2 == 0 {
            return Fault::ObserverLag;
        }
        Self::ALL[((n / 2) % (Self::ALL.len() as u64 - 1)) as usize]
    }

    /// Its name in the report's table of faults.
    pub fn name(self) -> &'static str {
        match self {
            Fault::LeaderKill => "leader kill",
            Fault::Stall => "leader→follower stall",
            Fault::CutOff => "member cut off",
            Fault::QuorumLoss => "quorum loss",
            Fault::ObserverLag => "observer onto a lagging member",
        }
    }

    /// Injects the fault, and ends it, on `cluster`; `observer` is the one
    /// [`Fault::ObserverLag`] moves (with its observer), if the run has
    /// any. `t` is the frameworks' session timeout.
    pub(crate) async fn inject(
        self,
        cluster: &TestingCluster,
        rng: &mut fastrand::Rng,
        observer: Option<(&Contender, &LeaderObserver)>,
        t: Duration,
    ) {
        let size = cluster.size() as u64;
        let Some(leader) = cluster.leader() else {
            // Mid-election: nothing to aim at now.
            return;
        };
        let follower = (leader + 1 + rng.below(size - 1) as usize) % cluster.size();
        match self {
            Fault::LeaderKill => {
                tokio::task::block_in_place(|| cluster.stop(leader));
                tokio::time::sleep(rng.millis(500, 2500)).await;
                restart(cluster, &[leader]).await;
            }
            Fault::Stall => {
                stall(cluster, follower, true);
                tokio::time::sleep(rng.millis(500, 4000)).await;
                stall(cluster, follower, false);
            }
            Fault::CutOff => {
                let member = rng.below(size) as usize;
                cut_off(cluster, member, true);
                tokio::time::sleep(rng.millis(1000, 10_000)).await;
                cut_off(cluster, member, false);
            }
            Fault::QuorumLoss => {
                let first = rng.below(size) as usize;
                let second = (first + 1 + rng.below(size - 1) as usize) % cluster.size();
                tokio::task::block_in_place(|| {
                    cluster.stop(first);
                    cluster.stop(second);
                });
                tokio::time::sleep(rng.millis(1000, 3000)).await;
                restart(cluster, &[first, second]).await;
            }
            Fault::ObserverLag => {
                if let Some((contender, watcher)) = observer {
                    observer_lag(cluster, leader, contender, watcher, t).await;
                }
            }
        }
    }
}

/// Stalls a follower the observer is not connected to, waits until the
/// observer (on another member) sees a new leader, then leaves it only that
/// follower to reach until its session has been replaced there, and a
/// little longer (its first look on the new session happens meanwhile).
async fn observer_lag(
    cluster: &TestingCluster,
    leader: usize,
    observer: &Contender,
    watcher: &LeaderObserver,
    t: Duration,
) {
    let Some(follower) =
        (0..cluster.size()).find(|&m| m != leader && observer.proxies[m].active_connections() == 0)
    else {
        return;
    };
    let leading = || async {
        tokio::time::timeout(t, watcher.leader())
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
            .map(|l| l.token)
    };
    let before = leading().await;
    stall(cluster, follower, true);
    // Terms last 0.2 to 2 s: a change happens without the follower.
    let changed = Instant::now() + Duration::from_secs(5);
    while Instant::now() < changed && leading().await == before {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The stream reports the change (its watch fired before that read's
    // reply, on the same session) before the observer is moved.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let generation = observer
        .framework
        .current_session()
        .map_or(0, |s| s.generation());
    for (member, proxy) in observer.proxies.iter().enumerate() {
        proxy.blackhole(member != follower);
    }
    let deadline = Instant::now() + 3 * t + Duration::from_secs(3);
    while Instant::now() < deadline
        && observer
            .framework
            .current_session()
            .is_none_or(|s| s.generation() <= generation)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::info!(
        follower,
        generation,
        moved = observer
            .framework
            .current_session()
            .is_some_and(|s| s.generation() > generation),
        "an observer only reaches a lagging member"
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    observer.blackhole(false);
    stall(cluster, follower, false);
}

fn stall(cluster: &TestingCluster, follower: usize, on: bool) {
    if let Err(err) = cluster.stall_leader_to(follower, on) {
        tracing::warn!(%err, follower, on, "cannot stall the follower's link");
    }
}

fn cut_off(cluster: &TestingCluster, member: usize, on: bool) {
    if let Err(err) = cluster.cut_off(member, on) {
        tracing::warn!(%err, member, on, "cannot cut the member off");
    }
}

async fn restart(cluster: &TestingCluster, members: &[usize]) {
    if let Err(err) = cluster.restart_nodes_async(members).await {
        tracing::warn!(%err, ?members, "a restart failed; healed at the end of the run");
    }
}

/// Makes the ensemble whole again: every link open, every member running
/// and serving.
pub(crate) async fn heal(cluster: &TestingCluster) {
    for member in 0..cluster.size() {
        cut_off(cluster, member, false);
        let _ = cluster.stall_leader_to(member, false);
    }
    let stopped: Vec<usize> = (0..cluster.size())
        .filter(|&m| !cluster.is_running(m))
        .collect();
    if !stopped.is_empty() {
        restart(cluster, &stopped).await;
    }
    if let Err(err) = cluster
        .wait_until_serving_async(Duration::from_secs(60))
        .await
    {
        tracing::warn!(%err, "the ensemble does not serve again");
    }
}

/// The sessions the ensemble holds, from `mntr`: the global ones (as the
/// leader counts them) and every member's local ones. `None` if a member
/// does not answer.
fn sessions(cluster: &TestingCluster) -> Option<usize> {
    let leader = cluster.leader()?;
    let count = |member: usize, key: &str| -> Option<usize> {
        let reply = cluster.four_letter(member, "mntr").ok()?;
        reply
            .lines()
            .find_map(|line| line.strip_prefix(key)?.trim().parse().ok())
    };
    let global = count(leader, "zk_global_sessions")?;
    let mut local = 0;
    for member in 0..cluster.size() {
        local += count(member, "zk_local_sessions")?;
    }
    Some(global + local)
}

/// The sessions left on the ensemble besides the harness's own `kept`
/// ones, once the frameworks have closed: counted again for up to a second
/// (a close is acknowledged before every member has counted it), which is
/// shorter than any session timeout of the run, so a session its framework
/// did not close is still there.
pub(crate) async fn leftover_sessions(cluster: &TestingCluster, kept: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let left = tokio::task::block_in_place(|| sessions(cluster))
            .map_or(usize::MAX, |n| n.saturating_sub(kept));
        if left == 0 || Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
