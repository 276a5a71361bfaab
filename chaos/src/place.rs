//! The places and the clock: what a run is aimed at ([`Target`]), how a
//! contender reaches the server ([`Link`]: a fault proxy in real time, a
//! simulated link in the simulator), where its process runs ([`Place`]: the
//! harness's runtime, or a simulated host that can be stopped), and the one
//! clock every stamp of the harness is read from ([`now`]), with the
//! process-wide [`sequence`] that orders an observer's reports against what
//! its links handed its client.
//!
//! Nothing here knows of locks or rules: the other files build on it.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::oneshot;
use tokio::time::Instant;
use zk_curator_testing::{FaultProxy, TestingCluster, TestingServer};

/// What a run is aimed at: one server, or a replicated ensemble (whose own
/// faults join the schedule: see [`ensemble`](crate::ensemble)), or a
/// server on a simulated network (`zk-curator-sim`: one thread, a simulated
/// clock and TCP).
#[derive(Clone, Copy)]
pub enum Target<'a> {
    /// One server (embedded or a real ZooKeeper), each contender behind a
    /// fault proxy of its own.
    Server(&'a TestingServer),
    /// A replicated ensemble, each contender behind a fault proxy per
    /// member.
    Ensemble(&'a TestingCluster),
    /// A server on a simulated network, each contender on a link of its own.
    Sim(&'a dyn SimServer),
}

impl fmt::Debug for Target<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Server(server) => f
                .debug_tuple("Server")
                .field(&server.connect_string())
                .finish(),
            Target::Ensemble(cluster) => f
                .debug_tuple("Ensemble")
                .field(&cluster.connect_string())
                .finish(),
            Target::Sim(sim) => f.debug_tuple("Sim").field(&sim.connect_string()).finish(),
        }
    }
}

/// A server on a simulated network, as the harness needs it: the network
/// gives each contender a [`Link`] of its own where a real run starts a
/// [`FaultProxy`].
pub trait SimServer {
    /// The server's connect string on the simulated network.
    fn connect_string(&self) -> String;
    /// A link to the server for one more contender (or observer).
    fn link(&self) -> Box<dyn Link>;
    /// Expires a session at the server, as ZooKeeper would after silence.
    fn expire_session(&self, id: i64) -> bool;
    /// The sessions the server holds now.
    fn session_ids(&self) -> Vec<i64>;
    /// Whether it is a replicated ensemble, whose members lose the
    /// sessions local to them when they stop serving (the harness's own
    /// among them): its last listing then goes through a session made for
    /// it, as on a real ensemble.
    fn replicated(&self) -> bool {
        false
    }
}

/// A contender's way to the server, and the faults the harness injects on
/// it: a [`FaultProxy`] in a real run.
pub trait Link {
    /// Where the contender connects.
    fn connect_string(&self) -> String;
    /// Silence both ways (`true`), or traffic again.
    fn blackhole(&self, on: bool);
    /// Closes every connection through the link.
    fn drop_connections(&self);
    /// Connections open through the link now.
    fn active_connections(&self) -> usize;
    /// Each node whose deletion a watch notification through this link
    /// told its client, with the [`sequence`] number of the moment the
    /// client was handed it (rule 5 of "The observer's contract"). A link
    /// that does not read the traffic tells nothing.
    fn deletions_told(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
    /// Where the contender on this link runs (see [`Place`]).
    fn place(&self) -> Option<Arc<dyn Place>> {
        None
    }
}

/// Where a contender's framework, and every task that uses it, runs: in a
/// simulation, a host of the contender's own (its session task, its
/// recipes' timers and its holders on one runtime, with that host's clock).
/// A link without one leaves them on the harness's runtime.
pub trait Place: Send + Sync {
    /// Starts `task` there.
    fn spawn(&self, task: BoxFuture<'static, ()>);
    /// Stops everything that runs there for `length` once the current
    /// instant is over, as a process that is stopped and later continued:
    /// its tasks, its framework's session and timers, its link. The future
    /// ends when it is continued. `None`: the place cannot be stopped.
    fn pause(&self, length: Duration) -> Option<BoxFuture<'static, ()>> {
        let _ = length;
        None
    }
}

thread_local! {
    /// This thread's clock for the harness's stamps, when not tokio's.
    static CLOCK: std::cell::Cell<Option<fn() -> Instant>> = const { std::cell::Cell::new(None) };
    /// The stalls of the server (or of a member) this thread's simulation
    /// made: from, until (see [`server_stalled`]).
    static STALLS: std::cell::RefCell<Vec<(Instant, Instant)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Tells this thread's harness that the server (on an ensemble, one of its
/// members) reads nothing from `from` until `until`, on the harness's clock
/// ([`now`]): what its clients sent meanwhile, pings included, is heard at
/// `until`, so a session it would have expired lives up to the stall's
/// length longer (rule 8 (b) of "Stuck holders" moves its deadline). A
/// simulation says so as it stalls the server; [`forget_server_stalls`]
/// before each run.
pub fn server_stalled(from: Instant, until: Instant) {
    STALLS.with(|s| s.borrow_mut().push((from, until)));
}

/// Forgets the stalls told so far on this thread (a new run begins).
pub fn forget_server_stalls() {
    STALLS.with(|s| s.borrow_mut().clear());
}

/// The stalls told so far on this thread, in the order told.
pub(crate) fn server_stalls() -> Vec<(Instant, Instant)> {
    STALLS.with(|s| s.borrow().clone())
}

/// Sets the clock that stamps this thread's events (`None`: tokio's). A
/// simulation gives one that reads the same on all its hosts: each host's
/// tokio clock has a base of its own, so an instant read on one host means
/// nothing on another.
pub fn set_clock(clock: Option<fn() -> Instant>) {
    CLOCK.with(|c| c.set(clock));
}

/// Now, on the harness's clock: every stamp and every measured span of the
/// harness is read here. In a simulation it is an instant of the harness's
/// own host, and is only compared, never slept until, elsewhere.
pub fn now() -> Instant {
    CLOCK
        .with(|c| c.get())
        .map_or_else(Instant::now, |clock| clock())
}

/// How long since `then`, on the harness's clock.
pub(crate) fn since(then: Instant) -> Duration {
    now().saturating_duration_since(then)
}

/// The next number of one process-wide sequence: it orders an observer's
/// reports against what its links handed its client (rule 5 of "The
/// observer's contract").
pub fn sequence() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

impl Link for FaultProxy {
    fn connect_string(&self) -> String {
        FaultProxy::connect_string(self)
    }

    fn blackhole(&self, on: bool) {
        FaultProxy::blackhole(self, on);
    }

    fn drop_connections(&self) {
        FaultProxy::drop_connections(self);
    }

    fn active_connections(&self) -> usize {
        FaultProxy::active_connections(self)
    }
}

impl Target<'_> {
    /// The client addresses of the servers, in member order.
    pub(crate) fn addresses(&self) -> Vec<std::net::SocketAddr> {
        match self {
            Target::Server(server) => vec![server.address()],
            Target::Ensemble(cluster) => {
                (0..cluster.size()).map(|i| cluster.address_of(i)).collect()
            }
            Target::Sim(_) => Vec::new(),
        }
    }

    pub(crate) fn connect_string(&self) -> String {
        match self {
            Target::Server(server) => server.connect_string(),
            Target::Ensemble(cluster) => cluster.connect_string(),
            Target::Sim(sim) => sim.connect_string(),
        }
    }

    pub(crate) fn embedded(&self) -> Option<&zk_curator_testing::EmbeddedServer> {
        match self {
            Target::Server(server) => server.as_embedded(),
            Target::Ensemble(_) | Target::Sim(_) => None,
        }
    }
}

/// Starts `task` at `place` (the caller's runtime without one).
pub(crate) fn spawn_at<T: Send + 'static>(
    place: Option<&Arc<dyn Place>>,
    task: impl Future<Output = T> + Send + 'static,
) -> oneshot::Receiver<T> {
    let (tx, rx) = oneshot::channel();
    let task = async move {
        let _ = tx.send(task.await);
    };
    match place {
        Some(place) => place.spawn(task.boxed()),
        None => drop(tokio::spawn(task)),
    }
    rx
}

/// Runs `task` at `place` and waits for its output (`None`: dropped).
pub(crate) async fn run_at<T: Send + 'static>(
    place: Option<&Arc<dyn Place>>,
    task: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    spawn_at(place, task).await.ok()
}
