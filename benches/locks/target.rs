//! The server under test: the one `ZK_CONNECT` names, an Apache ZooKeeper
//! of our own (`server.rs`), started for the run and started again if a
//! workload kills it, or with `--ensemble N` an ensemble of our own
//! (`ensemble.rs`). Also the clean-up a shared ensemble needs at the end.

use zk_curator::framework::zk;
use zk_curator_testing::zookeeper_available;

use super::ensemble::BenchEnsemble;
use super::limits::BoxError;
use super::mntr::{first_host, four_letter};
use super::server;
use super::sessions::raw_client;

/// The server under test: ours (restarted if a workload kills it), our
/// ensemble, or `ZK_CONNECT`'s.
pub(crate) struct Target {
    pub(crate) server: Option<server::BenchServer>,
    /// With `--ensemble`: its members (the connect string names them all).
    pub(crate) ensemble: Option<BenchEnsemble>,
    /// `host:port,...` without a chroot.
    pub(crate) connect: String,
    /// The bench's paths start here (`ZK_CONNECT`'s chroot, if any).
    pub(crate) chroot: String,
    /// Where to send four-letter words: one `host:port`, or on our
    /// ensemble every member's, comma-separated (`mntr.rs` sums their
    /// counts).
    pub(crate) four_letter: Option<String>,
}

impl Target {
    /// `ZK_CONNECT`'s ensemble when it is set, else a server of our own,
    /// or an ensemble of `ensemble` members of our own; `None` (with a
    /// notice) when there is neither.
    pub(crate) async fn from_env(ensemble: Option<usize>) -> Result<Option<Target>, BoxError> {
        let target = match std::env::var("ZK_CONNECT") {
            Ok(connect) if !connect.is_empty() => {
                // A chroot in ZK_CONNECT becomes a prefix of our paths instead:
                // the contenders disagree on chroots, and the four-letter words
                // need the bare host.
                let (hosts, chroot) = match connect.split_once('/') {
                    Some((hosts, chroot)) => {
                        (hosts.to_owned(), format!("/{}", chroot.trim_matches('/')))
                    }
                    None => (connect, String::new()),
                };
                Target {
                    server: None,
                    ensemble: None,
                    four_letter: first_host(&hosts),
                    connect: hosts,
                    chroot: if chroot == "/" { String::new() } else { chroot },
                }
            }
            _ => {
                if !zookeeper_available() {
                    if std::env::var("ZK_REQUIRE_REAL").is_ok_and(|v| v == "1") {
                        return Err("ZK_REQUIRE_REAL=1 but ZooKeeper is not installed (apt-get install -y zookeeper)".into());
                    }
                    println!("NOTICE: ZooKeeper is not installed (apt-get install -y zookeeper) and ZK_CONNECT is not set; nothing to measure");
                    return Ok(None);
                }
                match ensemble {
                    Some(size) => {
                        tokio::task::spawn_blocking(move || Target::start_ensemble(size)).await??
                    }
                    None => tokio::task::spawn_blocking(Target::start_own).await??,
                }
            }
        };
        Ok(Some(target))
    }

    pub(crate) fn start_own() -> Result<Target, BoxError> {
        let server = server::BenchServer::start()?;
        let address = server.address();
        Ok(Target {
            server: Some(server),
            ensemble: None,
            connect: address.clone(),
            chroot: String::new(),
            four_letter: Some(address),
        })
    }

    fn start_ensemble(size: usize) -> Result<Target, BoxError> {
        let ensemble = BenchEnsemble::start(size)?;
        let connect = ensemble.connect_string();
        Ok(Target {
            server: None,
            ensemble: Some(ensemble),
            four_letter: Some(connect.clone()),
            connect,
            chroot: String::new(),
        })
    }

    /// Whether the server is ours (no clean-up needed at the end).
    pub(crate) fn is_own(&self) -> bool {
        self.server.is_some() || self.ensemble.is_some()
    }

    /// Whether the server (every member of our ensemble) still runs and
    /// answers `ruok`.
    pub(crate) async fn alive(&mut self) -> bool {
        let running = self.server.as_mut().is_none_or(|s| s.is_running())
            && self.ensemble.as_mut().is_none_or(|e| e.is_running());
        if !running {
            return false;
        }
        for addr in self.four_letter.iter().flat_map(|a| a.split(',')) {
            if !four_letter(addr, "ruok").await.is_ok_and(|r| r == "imok") {
                return false;
            }
        }
        true
    }
}

/// Deletes `path` and everything below it (best effort, for shared ensembles).
pub(crate) async fn remove_tree(connect: &str, path: &str) -> Result<(), BoxError> {
    let client = raw_client(connect).await?;
    let mut stack = vec![path.to_owned()];
    let mut order = Vec::new();
    while let Some(node) = stack.pop() {
        match client.list_children(&node).await {
            Ok(children) => {
                stack.extend(children.into_iter().map(|c| format!("{node}/{c}")));
                order.push(node);
            }
            Err(zk::Error::NoNode) => {}
            Err(err) => return Err(err.into()),
        }
    }
    for node in order.into_iter().rev() {
        match client.delete(&node, None).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}
