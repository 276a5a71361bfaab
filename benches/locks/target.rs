//! The server under test: the one `ZK_CONNECT` names, or an Apache
//! ZooKeeper of our own (`server.rs`), started for the run and started
//! again if a workload kills it. Also the clean-up a shared ensemble needs
//! at the end.

use zk_curator::framework::zk;
use zk_curator_testing::zookeeper_available;

use super::limits::BoxError;
use super::mntr::{first_host, four_letter};
use super::server;
use super::sessions::raw_client;

/// The server under test: ours (restarted if a workload kills it) or
/// `ZK_CONNECT`'s.
pub(crate) struct Target {
    pub(crate) server: Option<server::BenchServer>,
    /// `host:port,...` without a chroot.
    pub(crate) connect: String,
    /// The bench's paths start here (`ZK_CONNECT`'s chroot, if any).
    pub(crate) chroot: String,
    /// Where to send four-letter words.
    pub(crate) four_letter: Option<String>,
}

impl Target {
    /// `ZK_CONNECT`'s ensemble when it is set, else a server of our own;
    /// `None` (with a notice) when there is neither.
    pub(crate) async fn from_env() -> Result<Option<Target>, BoxError> {
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
                tokio::task::spawn_blocking(Target::start_own).await??
            }
        };
        Ok(Some(target))
    }

    pub(crate) fn start_own() -> Result<Target, BoxError> {
        let server = server::BenchServer::start()?;
        let address = server.address();
        Ok(Target {
            server: Some(server),
            connect: address.clone(),
            chroot: String::new(),
            four_letter: Some(address),
        })
    }

    /// Whether the server still runs and answers `ruok`.
    pub(crate) async fn alive(&mut self) -> bool {
        let running = self.server.as_mut().is_none_or(|s| s.is_running());
        running
            && match &self.four_letter {
                Some(addr) => four_letter(addr, "ruok").await.is_ok_and(|r| r == "imok"),
                None => true,
            }
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
