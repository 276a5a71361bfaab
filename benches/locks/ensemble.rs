//! The bench's own replicated ensemble (`--ensemble N`, issue 32): N Apache
//! ZooKeeper JVMs on 127.0.0.1 forming one quorum, each set up like the
//! standalone server of `server.rs` (the same JVM flags, `forceSync=yes`,
//! `maxClientCnxns=0`, ZooKeeper's default `tickTime`), so that the only
//! difference a contender meets is the quorum round between a write and its
//! reply.
//!
//! Every member has a directory of its own (its data, `myid`, `zoo.cfg` and
//! log). The `zoo.cfg`s list every member as `server.<id>=127.0.0.1:<quorum
//! port>:<election port>`; all the client, quorum and election ports are
//! reserved together (bound, then released just before the JVMs start) so
//! that they differ. The start returns once every member serves clients and
//! exactly one of them leads (`srvr`'s `Mode:`), as `zk-curator-testing`'s
//! `TestingCluster` waits; that type is not used because its members run
//! with the test servers' JVM flags (no fsync, a 128 MB heap, C1 only).
//!
//! Each JVM is stopped through its own `Child` handle when the ensemble is
//! dropped.

use std::net::TcpListener;
use std::process::Child;
use std::time::{Duration, Instant};

use super::limits::BoxError;
use super::server::{classpath, four_letter_blocking, log_tail, spawn_jvm};

/// A quorum member's main class.
const QUORUM_MAIN: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";
/// How long the members may take to elect a leader and serve.
const START_LIMIT: Duration = Duration::from_secs(90);
/// ZooKeeper's own defaults (`zoo_sample.cfg`): 2 s ticks, 10 ticks for a
/// follower to join, 5 ticks of silence before a peer counts as gone.
const TICK_MS: u32 = 2000;
const INIT_LIMIT: u32 = 10;
const SYNC_LIMIT: u32 = 5;

/// One member: its JVM and its ports.
struct Member {
    child: Child,
    client_port: u16,
    dir: std::path::PathBuf,
}

/// A running ensemble of real ZooKeeper servers; every JVM is killed (by its
/// own handle) on drop.
pub(crate) struct BenchEnsemble {
    members: Vec<Member>,
    /// Kept until the members are gone (declared last, dropped last).
    _root: tempfile::TempDir,
}

impl BenchEnsemble {
    /// Starts `size` members and waits until all of them serve, one leading.
    pub(crate) fn start(size: usize) -> Result<BenchEnsemble, BoxError> {
        let root = tempfile::Builder::new()
            .prefix("zk-bench-ensemble-")
            .tempdir()?;
        // Client, quorum and election port of every member, all held until
        // all are known, so that none repeats.
        let listeners = (0..3 * size)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<Result<Vec<_>, _>>()?;
        let ports = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<Result<Vec<u16>, _>>()?;
        let (client, quorum, election) =
            (&ports[..size], &ports[size..2 * size], &ports[2 * size..]);
        let servers: String = (0..size)
            .map(|i| format!("server.{}=127.0.0.1:{}:{}\n", i + 1, quorum[i], election[i]))
            .collect();
        let mut configs = Vec::with_capacity(size);
        for (i, port) in client.iter().enumerate() {
            let dir = root.path().join(format!("member-{}", i + 1));
            let data = dir.join("data");
            std::fs::create_dir_all(&data)?;
            std::fs::write(data.join("myid"), format!("{}\n", i + 1))?;
            let config = dir.join("zoo.cfg");
            std::fs::write(
                &config,
                format!(
                    "tickTime={TICK_MS}\ninitLimit={INIT_LIMIT}\nsyncLimit={SYNC_LIMIT}\n\
                     dataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
                     4lw.commands.whitelist=*\nadmin.enableServer=false\nmaxClientCnxns=0\n\
                     forceSync=yes\nstandaloneEnabled=false\nreconfigEnabled=false\n\
                     {servers}",
                    data.display()
                ),
            )?;
            configs.push((dir, config, *port));
        }
        drop(listeners);
        let classpath = classpath(false);
        let mut ensemble = BenchEnsemble {
            members: Vec::with_capacity(size),
            _root: root,
        };
        for (dir, config, client_port) in configs {
            // A member that fails to start drops the ensemble, and with it
            // the members started before.
            let child = spawn_jvm(&classpath, QUORUM_MAIN, &config, &dir.join("server.log"))?;
            ensemble.members.push(Member {
                child,
                client_port,
                dir,
            });
        }
        ensemble.wait_serving()?;
        Ok(ensemble)
    }

    /// Waits until every member serves clients and exactly one leads.
    fn wait_serving(&mut self) -> Result<(), BoxError> {
        let started = Instant::now();
        loop {
            for (i, member) in self.members.iter_mut().enumerate() {
                if let Some(status) = member.child.try_wait()? {
                    return Err(format!(
                        "ZooKeeper member {} exited at start ({status}): {}",
                        i + 1,
                        log_tail(&member.dir.join("server.log"))
                    )
                    .into());
                }
            }
            let modes = self.modes();
            let leaders = modes
                .iter()
                .filter(|m| m.as_deref() == Some("leader"))
                .count();
            if leaders == 1 && modes.iter().all(Option::is_some) {
                return Ok(());
            }
            if started.elapsed() > START_LIMIT {
                return Err(format!(
                    "the ensemble did not serve within {START_LIMIT:?} (member modes: {modes:?})"
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Each member's role as its `srvr` answer gives it (`leader`,
    /// `follower`), or `None` while it does not serve.
    pub(crate) fn modes(&self) -> Vec<Option<String>> {
        self.addresses()
            .iter()
            .map(|addr| {
                let reply = four_letter_blocking(addr, "srvr")?;
                reply
                    .lines()
                    .find_map(|line| line.strip_prefix("Mode:"))
                    .map(|mode| mode.trim().to_owned())
            })
            .collect()
    }

    /// `127.0.0.1:<client port>` of every member, in `myid` order.
    pub(crate) fn addresses(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The full connect string, every member in `myid` order.
    pub(crate) fn connect_string(&self) -> String {
        self.addresses().join(",")
    }

    pub(crate) fn size(&self) -> usize {
        self.members.len()
    }

    /// Whether every member's JVM still runs.
    pub(crate) fn is_running(&mut self) -> bool {
        self.members
            .iter_mut()
            .all(|m| matches!(m.child.try_wait(), Ok(None)))
    }

    /// The settings every member runs with, for the header.
    pub(crate) fn describe(&self) -> String {
        format!(
            "tickTime={TICK_MS} initLimit={INIT_LIMIT} syncLimit={SYNC_LIMIT}, forceSync=yes, maxClientCnxns=0"
        )
    }
}

impl Drop for BenchEnsemble {
    fn drop(&mut self) {
        for member in &mut self.members {
            let _ = member.child.kill();
        }
        for member in &mut self.members {
            let _ = member.child.wait();
        }
    }
}
