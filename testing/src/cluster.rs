//! A real Apache ZooKeeper ensemble on loopback, owned by a test, for fail-over tests.
//!
//! [`TestingCluster`] runs `n` ZooKeeper servers (3 by default) as one ensemble: every server
//! gets a free `127.0.0.1` client port, a quorum port and an election port, every `zoo.cfg`
//! lists all of them (`server.N=127.0.0.1:PEER:ELECTION`), and every data directory holds its
//! `myid` (node `i` is server `i + 1`). Ticks are short (100 ms by default), so an election
//! takes about a second. Tests can then kill the leader, stop or restart single nodes or the
//! whole ensemble, and watch clients fail over.
//!
//! With [`quorum_through_proxies`](TestingClusterBuilder::quorum_through_proxies), every
//! member reaches its peers through raw [`FaultProxy`] instances owned by the cluster (its own
//! `zoo.cfg` names them), so a test can make a lagging follower on purpose
//! ([`stall_leader_to`](TestingCluster::stall_leader_to): it serves stale reads, its clients
//! still connected, for up to `syncLimit` ticks) or cut a member off from the quorum
//! ([`cut_off`](TestingCluster::cut_off)); [`local_sessions`](TestingClusterBuilder::local_sessions)
//! turns on ZooKeeper's local sessions.
//!
//! Each server is launched by the same launcher as a [`ZooKeeperServer`](crate::ZooKeeperServer)
//! (same settings, `zoo.cfg` writer, `sh` wrapper, small-heap JVM flags and wait until it
//! serves; see the [server module](crate::server)), told in addition what makes it a member:
//! each JVM is killed by its own process id when its node is stopped, when the cluster is
//! dropped, or when the test process exits for any reason.
//!
//! ```no_run
//! # fn demo() -> Result<(), zk_curator_testing::Error> {
//! use std::time::Duration;
//! use zk_curator_testing::TestingCluster;
//!
//! let cluster = TestingCluster::start_default()?;
//! let connect = cluster.connect_string(); // "127.0.0.1:A,127.0.0.1:B,127.0.0.1:C"
//! let leader = cluster.leader().expect("a serving ensemble has a leader");
//! cluster.stop(leader);
//! let new_leader = cluster.wait_until_serving(Duration::from_secs(20))?;
//! assert_ne!(new_leader, leader);
//! cluster.restart(leader)?; // same ports, same data; joins as a follower
//! # let _ = connect;
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tracing::info;

use crate::error::Error;
use crate::process::{on_blocking_thread, tail_lines, ProcessSlot, ServerProcess, POLL_INTERVAL};
use crate::proxy::FaultProxy;
use crate::server::config::{Member, PeerPorts, Quorum, Settings};
use crate::server::launch::{
    four_letter, make_root, on_free_ports, respawn_all_and_wait, shutdown_all, spawn_all_and_wait,
    Launcher,
};

/// The ensemble size of [`TestingCluster::start_default`].
pub const DEFAULT_SIZE: usize = 3;

/// Largest supported ensemble (server ids must stay below 255 with extended types enabled).
const MAX_SIZE: usize = 254;

/// The role a serving node reports in its `srvr` answer (`Mode: ...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeMode {
    /// The ensemble's leader.
    Leader,
    /// A follower of the leader.
    Follower,
    /// A non-voting observer.
    Observer,
    /// A standalone server (not part of an ensemble).
    Standalone,
}

impl NodeMode {
    fn parse(reply: &str) -> Option<Self> {
        let mode = reply
            .lines()
            .find_map(|line| line.strip_prefix("Mode:"))?
            .trim();
        match mode {
            "leader" => Some(NodeMode::Leader),
            "follower" => Some(NodeMode::Follower),
            "observer" => Some(NodeMode::Observer),
            "standalone" => Some(NodeMode::Standalone),
            _ => None,
        }
    }
}

/// Settings chosen through [`TestingClusterBuilder`]: those of every member (a standalone
/// server's), the quorum's rules, and the ensemble's shape.
#[derive(Clone, Debug)]
struct EnsembleSettings {
    server: Settings,
    quorum: Quorum,
    size: usize,
    quorum_through_proxies: bool,
}

impl Default for EnsembleSettings {
    fn default() -> Self {
        EnsembleSettings {
            server: Settings::default(),
            quorum: Quorum::default(),
            size: DEFAULT_SIZE,
            quorum_through_proxies: false,
        }
    }
}

impl EnsembleSettings {
    fn validate(&self) -> Result<(), Error> {
        if self.size == 0 || self.size > MAX_SIZE {
            return Err(Error::InvalidConfig(format!(
                "cluster size must be between 1 and {MAX_SIZE}, not {}",
                self.size
            )));
        }
        self.server.validate()?;
        self.quorum.validate()
    }
}

/// Configures and starts a [`TestingCluster`]; obtained from [`TestingCluster::builder`].
///
/// Defaults: 3 nodes, tick time 100 ms, `initLimit` 50 ticks, `syncLimit` 20 ticks, session
/// timeouts between 400 ms and 60 s, containers and TTL nodes checked every 100 ms, 30 s
/// allowed for the ensemble to start serving, peers linked directly (no proxies), global
/// sessions only.
#[derive(Clone, Debug, Default)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct TestingClusterBuilder {
    settings: EnsembleSettings,
}

impl TestingClusterBuilder {
    /// Sets the number of servers (1 to 254).
    pub fn size(mut self, size: usize) -> Self {
        self.settings.size = size;
        self
    }

    /// Sets `initLimit`, in ticks: how long a follower may take to connect and sync to a leader.
    pub fn init_limit(mut self, ticks: u32) -> Self {
        self.settings.quorum.init_limit = ticks;
        self
    }

    /// Sets `syncLimit`, in ticks: how long a peer may stay silent before it counts as gone.
    pub fn sync_limit(mut self, ticks: u32) -> Self {
        self.settings.quorum.sync_limit = ticks;
        self
    }

    crate::server::config::server_setters!("every member", settings.server);

    /// Routes every member's links to its peers through raw fault proxies owned by the cluster
    /// (off by default), so that tests can stall or cut them: see
    /// [`stall_leader_to`](TestingCluster::stall_leader_to),
    /// [`cut_off`](TestingCluster::cut_off), [`quorum_link`](TestingCluster::quorum_link) and
    /// [`election_link`](TestingCluster::election_link).
    ///
    /// Each member has a `zoo.cfg` of its own: its own `server.N` line keeps its real quorum
    /// and election ports (the ones it binds), and the line of every other member `j` names
    /// two proxies of the ordered pair (this member, `j`) that forward to `j`'s real quorum
    /// port and election port. A follower thus reaches its leader through the proxy of the
    /// pair (follower, leader); its clients connect to the member directly, as usual. A
    /// member that dials a higher-id member announces its election address, where that member
    /// calls it back: the proxy rewrites it to the proxy of the reverse pair. The proxies
    /// forward bytes unparsed, run on a small tokio runtime of their own (one worker thread),
    /// and are stopped with the cluster.
    pub fn quorum_through_proxies(mut self, on: bool) -> Self {
        self.settings.quorum_through_proxies = on;
        self
    }

    /// Turns on local sessions (`localSessionsEnabled=true` and
    /// `localSessionsUpgradingEnabled=true`; off by default): a session starts local to the
    /// member it connected to, is not known to the other members, and is upgraded to a global
    /// session when it first creates an ephemeral node.
    pub fn local_sessions(mut self, on: bool) -> Self {
        self.settings.quorum.local_sessions = on;
        self
    }

    /// Starts every server and blocks until all of them serve clients, one as the leader.
    ///
    /// Usable from any context; inside an async runtime prefer
    /// [`start_async`](Self::start_async).
    pub fn start(self) -> Result<TestingCluster, Error> {
        TestingCluster::launch(self.settings)
    }

    /// Like [`start`](Self::start), on a blocking thread of the current tokio runtime.
    ///
    /// # Errors
    /// ZooKeeper or Java missing (the message names the install command), a
    /// bad setting, or a server that did not come up in time.
    ///
    /// # Cancel safety
    /// The start runs on a blocking thread and goes on if the future is
    /// dropped; the servers it starts then are stopped again as soon as that
    /// start returns (their handle is dropped).
    pub async fn start_async(self) -> Result<TestingCluster, Error> {
        on_blocking_thread("start thread failed", move || self.start()).await
    }
}

/// Asks the server `launcher` started for `srvr` and returns the role it reports, if it serves.
fn mode(launcher: &Launcher) -> Option<NodeMode> {
    four_letter(launcher.address(), "srvr")
        .ok()
        .and_then(|reply| NodeMode::parse(&reply))
}

/// `count` distinct free loopback ports, kept bound until the listeners are dropped (so that
/// ports taken meanwhile, e.g. by proxies, are other ones).
fn reserve_ports(count: usize) -> Result<(Vec<u16>, Vec<TcpListener>), Error> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| Error::io("cannot find a free port", err))?;
    let ports = listeners
        .iter()
        .map(|listener| listener.local_addr().map(|addr| addr.port()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| Error::io("cannot find a free port", err))?;
    Ok((ports, listeners))
}

/// `Ok(leader)` when every node of `nodes` (index and launcher) serves and exactly one leads;
/// otherwise what was seen.
fn probe(nodes: &[(usize, Launcher)]) -> Result<usize, String> {
    let modes: Vec<(usize, Option<NodeMode>)> = nodes
        .iter()
        .map(|(index, launcher)| (*index, mode(launcher)))
        .collect();
    let leaders: Vec<usize> = modes
        .iter()
        .filter(|(_, mode)| *mode == Some(NodeMode::Leader))
        .map(|(index, _)| *index)
        .collect();
    match leaders[..] {
        [leader] if modes.iter().all(|(_, mode)| mode.is_some()) => Ok(leader),
        _ => Err(format!(
            "every running node to serve, one as the leader (node modes: {modes:?})"
        )),
    }
}

/// The raw proxies of [`TestingClusterBuilder::quorum_through_proxies`], one quorum proxy and
/// one election proxy per ordered pair of members, and the runtime they run on.
struct PeerLinks {
    size: usize,
    /// `quorum[from * size + to]`: what member `from` dials to reach `to`'s quorum port
    /// (`None` on the diagonal).
    quorum: Vec<Option<FaultProxy>>,
    /// `election[from * size + to]`: what member `from` dials to reach `to`'s election port.
    election: Vec<Option<FaultProxy>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl PeerLinks {
    /// Starts the proxies of every ordered pair towards the real ports of `ports`.
    fn start(ports: &[PeerPorts]) -> Result<PeerLinks, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("zk-cluster-links")
            .enable_all()
            .build()
            .map_err(|err| Error::io("cannot start the peer proxies' runtime", err))?;
        let size = ports.len();
        let mut links = PeerLinks {
            size,
            quorum: Vec::with_capacity(size * size),
            election: Vec::with_capacity(size * size),
            runtime: None,
        };
        let handle = runtime.handle().clone();
        links.runtime = Some(runtime);
        let loopback = |port| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
        for from in 0..size {
            for (to, target) in ports.iter().enumerate() {
                if from == to {
                    links.quorum.push(None);
                    links.election.push(None);
                } else {
                    links.quorum.push(Some(FaultProxy::start_raw_on(
                        &handle,
                        loopback(target.peer),
                    )?));
                    links.election.push(Some(FaultProxy::start_raw_on(
                        &handle,
                        loopback(target.election),
                    )?));
                }
            }
        }
        // A member that dialed a higher-id member is called back at the election address it
        // announced: make that the proxy of the reverse pair, not its real port.
        for from in 0..size {
            for to in (0..size).filter(|&to| to != from) {
                if let (Some(forward), Some(back)) =
                    (links.election(from, to), links.election(to, from))
                {
                    forward.announce_election_address(back.local_addr());
                }
            }
        }
        Ok(links)
    }

    fn quorum(&self, from: usize, to: usize) -> Option<&FaultProxy> {
        self.quorum.get(from * self.size + to)?.as_ref()
    }

    fn election(&self, from: usize, to: usize) -> Option<&FaultProxy> {
        self.election.get(from * self.size + to)?.as_ref()
    }

    /// How member `from` reaches every member: its own real ports, proxies for the others.
    fn view_of(&self, from: usize, real: &[PeerPorts]) -> Vec<PeerPorts> {
        real.iter()
            .enumerate()
            .map(
                |(to, ports)| match (self.quorum(from, to), self.election(from, to)) {
                    (Some(quorum), Some(election)) => PeerPorts {
                        client: ports.client,
                        peer: quorum.local_addr().port(),
                        election: election.local_addr().port(),
                    },
                    _ => *ports,
                },
            )
            .collect()
    }
}

impl Drop for PeerLinks {
    fn drop(&mut self) {
        self.quorum.clear();
        self.election.clear();
        if let Some(runtime) = self.runtime.take() {
            // Not `drop`: that would block, which a runtime refuses inside another runtime.
            runtime.shutdown_background();
        }
    }
}

struct Node {
    index: usize,
    launcher: Launcher,
    process: ProcessSlot,
}

impl Node {
    fn stop(&self) {
        if let Some(process) = self.process.take() {
            process.shutdown();
            info!(
                node = self.index,
                port = self.launcher.port,
                "ZooKeeper cluster node stopped"
            );
        }
    }
}

/// A running ZooKeeper ensemble of real servers on loopback, owned by a test.
///
/// Nodes are numbered from 0 to [`size`](Self::size)`() - 1`; node `i` has `myid` `i + 1`.
/// Methods taking a node index panic when it is out of range. Dropping the cluster kills every
/// server and deletes its directory. See the [module docs](self).
pub struct TestingCluster {
    nodes: Vec<Node>,
    startup_timeout: Duration,
    /// Declared after `nodes`: dropped once the servers are gone.
    links: Option<PeerLinks>,
    // Declared last so the directory is removed after the processes are gone.
    dir: TempDir,
}

impl fmt::Debug for TestingCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestingCluster")
            .field("connect_string", &self.connect_string())
            .field("dir", &self.dir.path())
            .field(
                "pids",
                &(0..self.size()).map(|i| self.pid_of(i)).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl TestingCluster {
    /// Returns a builder to configure the ensemble before starting it.
    pub fn builder() -> TestingClusterBuilder {
        TestingClusterBuilder::default()
    }

    /// Starts an ensemble of `size` servers with default settings, blocking until all of them
    /// serve clients.
    pub fn start(size: usize) -> Result<Self, Error> {
        Self::builder().size(size).start()
    }

    /// Like [`start`](Self::start), on a blocking thread of the current tokio runtime.
    ///
    /// # Errors
    /// ZooKeeper or Java missing (the message names the install command), a
    /// bad setting, or a server that did not come up in time.
    ///
    /// # Cancel safety
    /// The start runs on a blocking thread and goes on if the future is
    /// dropped; the servers it starts then are stopped again as soon as that
    /// start returns (their handle is dropped).
    pub async fn start_async(size: usize) -> Result<Self, Error> {
        Self::builder().size(size).start_async().await
    }

    /// Starts a 3-server ensemble with default settings, blocking until all of them serve.
    pub fn start_default() -> Result<Self, Error> {
        Self::start(DEFAULT_SIZE)
    }

    /// Like [`start_default`](Self::start_default), on a blocking thread of the current tokio
    /// runtime.
    ///
    /// # Errors
    /// ZooKeeper or Java missing (the message names the install command), a
    /// bad setting, or a server that did not come up in time.
    ///
    /// # Cancel safety
    /// The start runs on a blocking thread and goes on if the future is
    /// dropped; the servers it starts then are stopped again as soon as that
    /// start returns (their handle is dropped).
    pub async fn start_default_async() -> Result<Self, Error> {
        Self::start_async(DEFAULT_SIZE).await
    }

    fn launch(settings: EnsembleSettings) -> Result<Self, Error> {
        settings.validate()?;
        let (installation, dir) = make_root("cluster-")?;
        let started = Instant::now();
        let (launchers, processes, links) = on_free_ports(|| {
            let (free, reserved) = reserve_ports(3 * settings.size)?;
            let ports: Vec<PeerPorts> = free
                .chunks(3)
                .map(|chunk| PeerPorts {
                    client: chunk[0],
                    peer: chunk[1],
                    election: chunk[2],
                })
                .collect();
            // The proxies bind their own free ports while the members' ports are reserved.
            let links = if settings.quorum_through_proxies {
                Some(PeerLinks::start(&ports)?)
            } else {
                None
            };
            drop(reserved);
            let launchers = ports
                .iter()
                .enumerate()
                .map(|(index, own)| Launcher {
                    installation: installation.clone(),
                    settings: settings.server.clone(),
                    root: dir.path().join(format!("node-{index}")),
                    port: own.client,
                    secure_port: None,
                    member: Some(Member {
                        myid: index + 1,
                        quorum: settings.quorum,
                        servers: match &links {
                            Some(links) => links.view_of(index, &ports),
                            None => ports.clone(),
                        },
                    }),
                })
                .collect::<Vec<_>>();
            for launcher in &launchers {
                launcher.prepare_member()?;
            }
            let processes = spawn_all_and_wait(&launchers, settings.server.startup_timeout)?;
            Ok((launchers, processes, links))
        })?;
        let cluster = TestingCluster {
            nodes: launchers
                .into_iter()
                .zip(processes)
                .enumerate()
                .map(|(index, (launcher, process))| Node {
                    index,
                    launcher,
                    process: ProcessSlot::new(process),
                })
                .collect(),
            startup_timeout: settings.server.startup_timeout,
            links,
            dir,
        };
        info!(
            connect_string = %cluster.connect_string(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "ZooKeeper test cluster is serving"
        );
        Ok(cluster)
    }

    fn node(&self, index: usize) -> &Node {
        assert!(
            index < self.nodes.len(),
            "node index {index} out of range: the cluster has {} nodes",
            self.nodes.len()
        );
        &self.nodes[index]
    }

    /// Sets how long later restarts wait for their nodes to serve (the
    /// builder's [`startup_timeout`](TestingClusterBuilder::startup_timeout)
    /// until then): a test expecting a restart to fail can shorten it for
    /// that restart alone.
    pub fn set_startup_timeout(&mut self, timeout: Duration) {
        self.startup_timeout = timeout;
    }

    /// Returns the number of servers in the ensemble (running or not).
    pub fn size(&self) -> usize {
        self.nodes.len()
    }

    /// Returns the connect string of the whole ensemble, `127.0.0.1:A,127.0.0.1:B,...` in node
    /// order. It stays the same across stops and restarts.
    pub fn connect_string(&self) -> String {
        (0..self.size())
            .map(|i| self.connect_string_of(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Returns the connect string of node `index` alone, `127.0.0.1:PORT`.
    pub fn connect_string_of(&self, index: usize) -> String {
        format!("127.0.0.1:{}", self.port_of(index))
    }

    /// Returns the client port of node `index`.
    pub fn port_of(&self, index: usize) -> u16 {
        self.node(index).launcher.port
    }

    /// Returns the client address of node `index`, `127.0.0.1:PORT`.
    pub fn address_of(&self, index: usize) -> SocketAddr {
        self.node(index).launcher.address()
    }

    /// Returns the data directory of node `index` (holding `myid`, snapshots and logs).
    pub fn data_dir_of(&self, index: usize) -> PathBuf {
        self.node(index).launcher.data_dir()
    }

    /// Returns the file receiving node `index`'s server log (appended across restarts).
    pub fn log_path_of(&self, index: usize) -> PathBuf {
        self.node(index).launcher.log_path()
    }

    /// Returns the last `lines` lines of node `index`'s server log, for diagnostics.
    pub fn log_tail_of(&self, index: usize, lines: usize) -> String {
        tail_lines(&self.log_path_of(index), lines)
    }

    /// Returns the process id of node `index`'s JVM, or `None` when it is stopped.
    pub fn pid_of(&self, index: usize) -> Option<u32> {
        self.node(index).process.pid()
    }

    /// Returns whether node `index`'s process is alive (it may not serve yet, e.g. while an
    /// election runs).
    pub fn is_running(&self, index: usize) -> bool {
        self.node(index).process.is_running()
    }

    /// Asks node `index` for `srvr` and returns the role it reports, or `None` when it is
    /// stopped or does not serve (no quorum, election under way). Blocks for at most about a
    /// second and a half, usually a millisecond.
    pub fn mode_of(&self, index: usize) -> Option<NodeMode> {
        let node = self.node(index);
        if node.process.lock().is_none() {
            return None;
        }
        mode(&node.launcher)
    }

    /// Sends node `index` a four-letter command (`mntr`, `srvr`, `cons`...; every one is
    /// allowed) and returns its whole reply. Blocks for at most about a second and a half.
    ///
    /// # Errors
    /// [`Error::Io`] when the node cannot be reached or does not answer in time (it is
    /// stopped, say).
    pub fn four_letter(&self, index: usize, word: &str) -> Result<String, Error> {
        four_letter(self.address_of(index), word)
            .map_err(|err| Error::io(format!("four-letter word {word} to node {index}"), err))
    }

    /// Returns the index of the node that reports being the leader, if any serves as such.
    pub fn leader(&self) -> Option<usize> {
        (0..self.size()).find(|&i| self.mode_of(i) == Some(NodeMode::Leader))
    }

    /// Returns the indexes of the nodes that serve clients right now.
    pub fn serving(&self) -> Vec<usize> {
        (0..self.size())
            .filter(|&i| self.mode_of(i).is_some())
            .collect()
    }

    fn links(&self, what: &str) -> Result<&PeerLinks, Error> {
        self.links.as_ref().ok_or_else(|| {
            Error::InvalidConfig(format!(
                "{what} needs a cluster built with `quorum_through_proxies(true)`"
            ))
        })
    }

    /// Returns the raw proxy that member `from` dials to reach member `to`'s quorum port, or
    /// `None` without [`quorum_through_proxies`](TestingClusterBuilder::quorum_through_proxies)
    /// or when `from == to`. Only a follower dials its leader's quorum port, so on the proxy of
    /// the pair (follower, leader), [`hold_replies`](FaultProxy::hold_replies) holds what the
    /// leader sends to that follower, and the "requests" are what the follower sends.
    pub fn quorum_link(&self, from: usize, to: usize) -> Option<&FaultProxy> {
        self.node(from);
        self.node(to);
        self.links.as_ref()?.quorum(from, to)
    }

    /// Returns the raw proxy that member `from` dials to reach member `to`'s election port
    /// (leader election notifications), like [`quorum_link`](Self::quorum_link).
    pub fn election_link(&self, from: usize, to: usize) -> Option<&FaultProxy> {
        self.node(from);
        self.node(to);
        self.links.as_ref()?.election(from, to)
    }

    /// Stalls (`on`) or releases everything the leader sends to member `follower` over their
    /// quorum link: proposals, commits and pings are held in the proxy, while the follower's
    /// own traffic to the leader still passes and its clients stay connected to it.
    ///
    /// While stalled, the follower keeps serving reads from its stale copy of the data; the
    /// others commit without it (with a quorum among them). Released within `syncLimit`
    /// ticks, the held bytes arrive in order and the follower catches up; after `syncLimit`
    /// ticks without a word from the leader the follower gives up on it, drops its client
    /// connections and rejoins (the leader also drops a learner that acknowledged nothing
    /// for `syncLimit` ticks). Every quorum link the follower dials is held, so the stall
    /// applies to whichever member leads, now or later.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the cluster was not built with
    /// [`quorum_through_proxies(true)`](TestingClusterBuilder::quorum_through_proxies).
    ///
    /// # Panics
    /// When `follower` is out of range.
    pub fn stall_leader_to(&self, follower: usize, on: bool) -> Result<(), Error> {
        self.node(follower);
        let links = self.links("stall_leader_to")?;
        for leader in (0..self.size()).filter(|&j| j != follower) {
            if let Some(proxy) = links.quorum(follower, leader) {
                proxy.hold_replies(on);
            }
        }
        info!(follower, on, "quorum traffic to a follower stalled");
        Ok(())
    }

    /// Cuts member `index` off from the other members (`on`), or reconnects it (`off`).
    ///
    /// Every quorum and election link of the member, both the ones it dials and the ones its
    /// peers dial towards it, is blackholed ([`FaultProxy::set_paused`]) and its current
    /// connections are closed: the member loses the quorum at once, stops serving and closes
    /// its client connections (clients on a multi-host connect string move their sessions to
    /// the other members), while the others keep a quorum when they are enough. New links are
    /// held silently until the cut is lifted; the member then rejoins as a follower.
    ///
    /// This works for the leader too (the others elect a new one among themselves): a
    /// member dialed by a lower-id member calls it back at the election address announced
    /// in its first message, and the proxies rewrite that address to the proxy of the reverse
    /// pair, so no election link bypasses them.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the cluster was not built with
    /// [`quorum_through_proxies(true)`](TestingClusterBuilder::quorum_through_proxies).
    ///
    /// # Panics
    /// When `index` is out of range.
    pub fn cut_off(&self, index: usize, on: bool) -> Result<(), Error> {
        self.node(index);
        let links = self.links("cut_off")?;
        let proxies = (0..self.size()).filter(|&j| j != index).flat_map(|j| {
            [
                links.quorum(index, j),
                links.quorum(j, index),
                links.election(index, j),
                links.election(j, index),
            ]
        });
        for proxy in proxies.flatten() {
            proxy.set_paused(on);
            if on {
                proxy.drop_connections();
            }
        }
        info!(node = index, on, "cluster member cut off from its peers");
        Ok(())
    }

    /// Blocks until every running node serves clients, one of them as the leader, and returns
    /// the leader's index: after a node was killed, this is when a new leader has been elected
    /// and the survivors have synced with it.
    ///
    /// # Errors
    /// [`Error::Timeout`] when that does not happen within `timeout` (e.g. fewer than a quorum
    /// of nodes run).
    pub fn wait_until_serving(&self, timeout: Duration) -> Result<usize, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let state = probe(&self.running());
            match state {
                Ok(leader) => return Ok(leader),
                Err(what) if Instant::now() >= deadline => {
                    return Err(Error::Timeout { what, timeout })
                }
                Err(_) => thread::sleep(POLL_INTERVAL),
            }
        }
    }

    /// Like [`wait_until_serving`](Self::wait_until_serving), probing the nodes on blocking
    /// threads of the current tokio runtime.
    ///
    /// # Errors
    /// The ensemble did not serve (every running node answering, one leader)
    /// within `timeout`.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    pub async fn wait_until_serving_async(&self, timeout: Duration) -> Result<usize, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let running = self.running();
            let state = tokio::task::spawn_blocking(move || probe(&running))
                .await
                .map_err(|err| Error::io("probe thread failed", std::io::Error::other(err)))?;
            match state {
                Ok(leader) => return Ok(leader),
                Err(what) if tokio::time::Instant::now() >= deadline => {
                    return Err(Error::Timeout { what, timeout })
                }
                Err(_) => tokio::time::sleep(POLL_INTERVAL).await,
            }
        }
    }

    /// The indexes and launchers of the nodes that have a process (whether or not it serves).
    fn running(&self) -> Vec<(usize, Launcher)> {
        self.nodes
            .iter()
            .filter(|node| node.process.lock().is_some())
            .map(|node| (node.index, node.launcher.clone()))
            .collect()
    }

    /// Kills node `index` (SIGKILL to its JVM, like a crash) and blocks until the process is
    /// gone. Its ports and data are kept for [`restart`](Self::restart). Stopping a stopped
    /// node does nothing.
    pub fn stop(&self, index: usize) {
        self.node(index).stop();
    }

    /// Kills every node at once, then blocks until all processes are gone. Sessions are not
    /// closed; they survive a restart that happens before they time out.
    pub fn stop_all(&self) {
        let processes: Vec<ServerProcess> = self
            .nodes
            .iter()
            .filter_map(|node| node.process.take())
            .collect();
        if !processes.is_empty() {
            shutdown_all(processes);
            info!("ZooKeeper test cluster stopped");
        }
    }

    /// Stops node `index` if it runs, starts it again with the same ports and data, and blocks
    /// until it serves (as a follower, or as the leader when it completes a quorum).
    ///
    /// # Errors
    /// [`Error::StartTimeout`] when the node cannot serve within the startup timeout, e.g.
    /// because it is the only node running (bring several back at once with
    /// [`restart_nodes`](Self::restart_nodes)); [`Error::ServerExited`] if it died.
    pub fn restart(&self, index: usize) -> Result<(), Error> {
        self.restart_nodes(&[index])
    }

    /// Like [`restart`](Self::restart), waiting on a blocking thread of the current tokio
    /// runtime so that its other tasks (clients) keep running.
    ///
    /// # Errors
    /// The server could not be started again in time.
    ///
    /// # Cancel safety
    /// The restart runs on a blocking thread and goes on if the future is
    /// dropped: the server may still come up afterwards.
    pub async fn restart_async(&self, index: usize) -> Result<(), Error> {
        self.restart_nodes_async(&[index]).await
    }

    /// Stops the given nodes if they run, starts them all at once with their ports and data,
    /// and blocks until every one of them serves. Use it to bring back a quorum after
    /// [`stop_all`](Self::stop_all), e.g. two nodes of three.
    ///
    /// # Errors
    /// As [`restart`](Self::restart).
    pub fn restart_nodes(&self, indexes: &[usize]) -> Result<(), Error> {
        let (indexes, launchers) = self.stop_for_restart(indexes);
        let processes = respawn_all_and_wait(&launchers, self.startup_timeout)?;
        self.install(&indexes, processes);
        Ok(())
    }

    /// Like [`restart_nodes`](Self::restart_nodes), waiting on a blocking thread of the current
    /// tokio runtime.
    ///
    /// # Errors
    /// The server could not be started again in time.
    ///
    /// # Cancel safety
    /// The restart runs on a blocking thread and goes on if the future is
    /// dropped: the servers may still come up afterwards.
    pub async fn restart_nodes_async(&self, indexes: &[usize]) -> Result<(), Error> {
        let (indexes, launchers) = self.stop_for_restart(indexes);
        let timeout = self.startup_timeout;
        let processes = on_blocking_thread("restart thread failed", move || {
            respawn_all_and_wait(&launchers, timeout)
        })
        .await?;
        self.install(&indexes, processes);
        Ok(())
    }

    /// Restarts every node at once (see [`restart_nodes`](Self::restart_nodes)).
    pub fn restart_all(&self) -> Result<(), Error> {
        self.restart_nodes(&(0..self.size()).collect::<Vec<_>>())
    }

    /// Like [`restart_all`](Self::restart_all), waiting on a blocking thread of the current
    /// tokio runtime.
    ///
    /// # Errors
    /// The server could not be started again in time.
    ///
    /// # Cancel safety
    /// The restart runs on a blocking thread and goes on if the future is
    /// dropped: the servers may still come up afterwards.
    pub async fn restart_all_async(&self) -> Result<(), Error> {
        self.restart_nodes_async(&(0..self.size()).collect::<Vec<_>>())
            .await
    }

    /// Stops the distinct nodes of `indexes` (all at once) and returns them, in order, with
    /// their launchers.
    fn stop_for_restart(&self, indexes: &[usize]) -> (Vec<usize>, Vec<Launcher>) {
        let mut indexes = indexes.to_vec();
        indexes.sort_unstable();
        indexes.dedup();
        let processes: Vec<ServerProcess> = indexes
            .iter()
            .filter_map(|&i| self.node(i).process.take())
            .collect();
        shutdown_all(processes);
        let launchers = indexes
            .iter()
            .map(|&i| self.node(i).launcher.clone())
            .collect();
        (indexes, launchers)
    }

    fn install(&self, indexes: &[usize], processes: Vec<ServerProcess>) {
        for (&index, process) in indexes.iter().zip(processes) {
            self.nodes[index].process.install(process);
        }
        info!(nodes = ?indexes, "ZooKeeper cluster nodes restarted");
    }
}

impl Drop for TestingCluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_srvr_modes() {
        let reply = "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nZxid: 0x100000000\nMode: follower\nNode count: 5\n";
        assert_eq!(NodeMode::parse(reply), Some(NodeMode::Follower));
        assert_eq!(NodeMode::parse("Mode: leader\n"), Some(NodeMode::Leader));
        assert_eq!(
            NodeMode::parse("This ZooKeeper instance is not currently serving requests\n"),
            None
        );
    }

    #[test]
    fn each_member_reaches_its_peers_through_its_own_proxies() {
        let real: Vec<PeerPorts> = (0..3u16)
            .map(|i| PeerPorts {
                client: 10 + i,
                peer: 20 + i,
                election: 30 + i,
            })
            .collect();
        let links = PeerLinks::start(&real).unwrap();
        for from in 0..3 {
            let view = links.view_of(from, &real);
            for to in 0..3 {
                assert_eq!(view[to].client, real[to].client);
                if from == to {
                    assert_eq!(view[to].peer, real[to].peer);
                    assert_eq!(view[to].election, real[to].election);
                    continue;
                }
                let quorum = links.quorum(from, to).unwrap();
                let election = links.election(from, to).unwrap();
                assert_eq!(view[to].peer, quorum.local_addr().port());
                assert_eq!(view[to].election, election.local_addr().port());
                assert_eq!(quorum.upstream().port(), real[to].peer);
                assert_eq!(election.upstream().port(), real[to].election);
                assert_ne!(
                    links.quorum(to, from).unwrap().local_addr(),
                    quorum.local_addr(),
                    "each direction of a pair has its own proxy"
                );
            }
        }
    }

    #[test]
    fn rejects_empty_cluster() {
        let err = TestingCluster::builder().size(0).start().unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
    }

    #[test]
    fn rejects_what_a_single_server_rejects() {
        // The timing rules a standalone server keeps (server::config::check_times).
        let inverted = TestingCluster::builder()
            .min_session_timeout(Duration::from_secs(5))
            .max_session_timeout(Duration::from_secs(1))
            .start()
            .unwrap_err();
        assert!(
            inverted.to_string().contains("exceeds max session timeout"),
            "{inverted}"
        );
        let no_tick = TestingCluster::builder()
            .tick_time(Duration::ZERO)
            .start()
            .unwrap_err();
        assert!(no_tick.to_string().contains("tick time"), "{no_tick}");
        let no_sync = TestingCluster::builder().sync_limit(0).start().unwrap_err();
        assert!(no_sync.to_string().contains("syncLimit"), "{no_sync}");
    }

    #[test]
    fn free_ports_are_distinct() {
        let mut ports = reserve_ports(9).unwrap().0;
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 9);
    }
}
