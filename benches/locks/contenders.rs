//! The contenders, in table order: zk-curator and zookeeper-client in this
//! process, Apache Curator and kazoo in their peer processes (`peers.rs`),
//! and the tuned zk-curator rows. A [`Contender`] keeps its sessions for the
//! whole run and answers the two measurements every workload is made of:
//! an uncontended run and a contended one.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use zk_curator::framework::zk;
use zk_curator::{CohortPolicy, Framework, InterProcessMutex};

use super::figures::{Cycles, Handoffs};
use super::in_process::{contended_rust, entities_rust, LockHandle};
use super::limits::{bounded, BoxError, Measured, CLOSE_LIMIT, CONNECT_LIMIT};
use super::peers::{field, Peer, PeerSetup};
use super::sessions::{framework, raw_client, Tune};

/// Row indexes of the fixed contenders (the ratios are against these).
pub(crate) const ZK_CURATOR: usize = 0;
pub(crate) const CURATOR: usize = 2;
/// The label of the row with `release_before_reply(true)`.
pub(crate) const RELEASE_BEFORE_REPLY: &str = "zk-curator (release before reply)";
/// The label of the row with cohort hand-off at its default bound (issue 24).
pub(crate) const COHORT: &str = "zk-curator (cohort, 16/50 ms)";

/// One contender of every workload.
pub(crate) struct Contender {
    pub(crate) label: &'static str,
    /// A short name for paths.
    pub(crate) short: &'static str,
    pub(crate) description: String,
    pub(crate) imp: Imp,
}

/// Where a contender's lock calls run, with the sessions it keeps (by
/// connect string).
pub(crate) enum Imp {
    ZkCurator {
        tune: Tune,
        pools: HashMap<String, Vec<Framework>>,
    },
    ZkClient {
        pools: HashMap<String, Vec<zk::Client>>,
    },
    Peer(Box<Measured<Peer>>),
}

pub(crate) async fn start_contenders(
    java: &Measured<PeerSetup>,
    python: &Measured<PeerSetup>,
) -> Vec<Contender> {
    async fn serve(setup: &Measured<PeerSetup>, label: &'static str) -> (Measured<Peer>, String) {
        match setup {
            Ok(setup) => (setup.serve(label).await, setup.description.clone()),
            Err(reason) => (Err(reason.clone()), "n/a".to_owned()),
        }
    }
    let ((curator, curator_desc), (kazoo, kazoo_desc)) = tokio::join!(
        serve(java, "Apache Curator InterProcessMutex"),
        serve(python, "kazoo Lock")
    );
    let mut contenders = vec![
        Contender {
            label: "zk-curator InterProcessMutex",
            short: "zkc",
            description: "this crate, guard API (lock(), release()), in this process".to_owned(),
            imp: Imp::ZkCurator {
                tune: Tune::Plain,
                pools: HashMap::new(),
            },
        },
        Contender {
            label: "zookeeper-client Client::lock",
            short: "zkclient",
            description: "zookeeper-client 0.11 (Curator's node layout), in this process"
                .to_owned(),
            imp: Imp::ZkClient {
                pools: HashMap::new(),
            },
        },
        Contender {
            label: "Apache Curator InterProcessMutex",
            short: "curator",
            description: match &curator {
                Ok(_) => curator_desc,
                Err(reason) => format!("n/a ({reason})"),
            },
            imp: Imp::Peer(Box::new(curator)),
        },
        Contender {
            label: "kazoo Lock",
            short: "kazoo",
            description: match &kazoo {
                Ok(_) => kazoo_desc,
                Err(reason) => format!("n/a ({reason})"),
            },
            imp: Imp::Peer(Box::new(kazoo)),
        },
    ];
    if Tune::PerTaskNode.available() {
        contenders.push(Contender {
            label: "zk-curator (per-task node)",
            short: "zkc-pertask",
            description: "zk-curator with a node per waiting task (before issue 9)".to_owned(),
            imp: Imp::ZkCurator {
                tune: Tune::PerTaskNode,
                pools: HashMap::new(),
            },
        });
    }
    contenders.push(Contender {
        label: RELEASE_BEFORE_REPLY,
        short: "zkc-rbr",
        description: "zk-curator with release_before_reply(true): a release returns once its delete is queued"
            .to_owned(),
        imp: Imp::ZkCurator {
            tune: Tune::ReleaseBeforeReply,
            pools: HashMap::new(),
        },
    });
    contenders.push(Contender {
        label: COHORT,
        short: "zkc-cohort",
        description: "zk-curator with cohort(CohortPolicy::default()): a release passes the node to a waiting task of the same framework, no request"
            .to_owned(),
        imp: Imp::ZkCurator {
            tune: Tune::Cohort(CohortPolicy::default()),
            pools: HashMap::new(),
        },
    });
    contenders
}

impl Contender {
    /// Opens (and keeps) `n` sessions to `connect`; not measured.
    pub(crate) async fn connect(&mut self, connect: &str, n: usize) -> Measured<()> {
        match &mut self.imp {
            Imp::ZkCurator { tune, pools } => {
                let pool = pools.entry(connect.to_owned()).or_default();
                while pool.len() < n {
                    pool.push(framework(connect, *tune).await.map_err(|e| e.to_string())?);
                }
                Ok(())
            }
            Imp::ZkClient { pools } => {
                let pool = pools.entry(connect.to_owned()).or_default();
                while pool.len() < n {
                    pool.push(raw_client(connect).await.map_err(|e| e.to_string())?);
                }
                Ok(())
            }
            Imp::Peer(peer) => peer
                .as_mut()
                .as_mut()
                .map_err(|r| r.clone())?
                .request(&format!("connect {connect} {n}"), CONNECT_LIMIT * n as u32)
                .await
                .map(drop),
        }
    }

    /// The first `n` sessions of a zk-curator row on `connect` (opened if
    /// need be), for a workload that drives the library itself.
    pub(crate) async fn frameworks(&mut self, connect: &str, n: usize) -> Measured<Vec<Framework>> {
        self.connect(connect, n).await?;
        match &self.imp {
            Imp::ZkCurator { pools, .. } => Ok(pools
                .get(connect)
                .map(|p| p[..n.min(p.len())].to_vec())
                .unwrap_or_default()),
            _ => Err("not a zk-curator row".to_owned()),
        }
    }

    /// One lock handle per session (its tasks share it, like the peers'
    /// threads share their session's mutex).
    fn handles(&self, connect: &str, path: &str, n: usize) -> Result<Vec<LockHandle>, BoxError> {
        match &self.imp {
            Imp::ZkCurator { pools, .. } => pools
                .get(connect)
                .map(|p| &p[..n.min(p.len())])
                .unwrap_or_default()
                .iter()
                .map(|fw| Ok(LockHandle::Mutex(InterProcessMutex::new(fw.clone(), path)?)))
                .collect(),
            Imp::ZkClient { pools } => Ok(pools
                .get(connect)
                .map(|p| &p[..n.min(p.len())])
                .unwrap_or_default()
                .iter()
                .map(|c| LockHandle::ZkClient(c.clone(), path.to_owned()))
                .collect()),
            Imp::Peer(_) => Err("not in this process".into()),
        }
    }

    pub(crate) async fn uncontended(
        &mut self,
        connect: &str,
        path: &str,
        cycles: usize,
        limit: Duration,
    ) -> Measured<Cycles> {
        self.connect(connect, 1).await?;
        if let Imp::Peer(peer) = &mut self.imp {
            let peer = peer.as_mut().as_mut().map_err(|r| r.clone())?;
            let r = peer
                .request(&format!("uncontended {connect} {path} {cycles}"), limit)
                .await?;
            let secs: f64 = field(&r, "secs")?;
            return Ok(Cycles {
                per_s: field::<f64>(&r, "cycles")? / secs,
                p50_ms: field(&r, "p50_ms")?,
                p99_ms: field(&r, "p99_ms")?,
                acq_p50_ms: field(&r, "acq_p50_ms")?,
                acq_p99_ms: field(&r, "acq_p99_ms")?,
                cycles,
            });
        }
        let handle = self
            .handles(connect, path, 1)
            .map_err(|e| e.to_string())?
            .pop()
            .ok_or("no session")?;
        let run = async move {
            let mut samples = Vec::with_capacity(cycles);
            let mut acquires = Vec::with_capacity(cycles);
            let started = Instant::now();
            for _ in 0..cycles {
                let t0 = Instant::now();
                let held = handle.acquire().await?;
                acquires.push(t0.elapsed());
                held.release().await?;
                samples.push(t0.elapsed());
            }
            Ok::<_, BoxError>(Cycles::from_samples(samples, acquires, started.elapsed()))
        };
        bounded(limit, run).await
    }

    pub(crate) async fn contended(
        &mut self,
        connect: &str,
        path: &str,
        sessions: usize,
        tasks: usize,
        window: Duration,
        limit: Duration,
    ) -> Measured<Handoffs> {
        self.connect(connect, sessions).await?;
        if let Imp::Peer(peer) = &mut self.imp {
            let peer = peer.as_mut().as_mut().map_err(|r| r.clone())?;
            let r = peer
                .request(
                    &format!(
                        "contended {connect} {path} {sessions} {tasks} {}",
                        window.as_millis()
                    ),
                    limit,
                )
                .await?;
            // The hand-off latency is optional: a peer that does not
            // measure it leaves it out.
            let gap = field::<f64>(&r, "handoff_p50_ms")
                .and_then(|p50| Ok((p50, field::<f64>(&r, "handoff_p99_ms")?)))
                .ok();
            return Ok(Handoffs {
                per_s: field::<f64>(&r, "handoffs")? / field::<f64>(&r, "secs")?,
                holds: field(&r, "handoffs")?,
                switches: field(&r, "switches")?,
                releases: field(&r, "releases")?,
                gap_ms: gap,
                passes: None,
            });
        }
        let handles = self
            .handles(connect, path, sessions)
            .map_err(|e| e.to_string())?;
        let passes_before = self.passes(connect, sessions);
        let mut figures = bounded(limit, contended_rust(handles, tasks, window)).await?;
        figures.passes = passes_before
            .zip(self.passes(connect, sessions))
            .map(|(before, after)| after - before);
        Ok(figures)
    }

    /// `tasks` tasks on ONE session, task i on `<base>/e<i>` (one lock per
    /// entity, as services take locks), each looping acquire → release on
    /// its own path for `window` (`in_process::entities_rust`; the peers'
    /// `entities` command).
    pub(crate) async fn entities(
        &mut self,
        connect: &str,
        base: &str,
        tasks: usize,
        window: Duration,
        limit: Duration,
    ) -> Measured<Handoffs> {
        self.connect(connect, 1).await?;
        if let Imp::Peer(peer) = &mut self.imp {
            let peer = peer.as_mut().as_mut().map_err(|r| r.clone())?;
            let r = peer
                .request(
                    &format!("entities {connect} {base} {tasks} {}", window.as_millis()),
                    limit,
                )
                .await?;
            return Ok(Handoffs {
                per_s: field::<f64>(&r, "handoffs")? / field::<f64>(&r, "secs")?,
                holds: field(&r, "handoffs")?,
                switches: 0,
                releases: field(&r, "releases")?,
                gap_ms: None,
                passes: None,
            });
        }
        let mut handles = Vec::with_capacity(tasks);
        for i in 0..tasks {
            let mut one = self
                .handles(connect, &format!("{base}/e{i}"), 1)
                .map_err(|e| e.to_string())?;
            handles.push(one.pop().ok_or("no session")?);
        }
        let passes_before = self.passes(connect, 1);
        let mut figures = bounded(limit, entities_rust(handles, window)).await?;
        figures.passes = passes_before
            .zip(self.passes(connect, 1))
            .map(|(before, after)| after - before);
        Ok(figures)
    }

    /// The cohort passes of the first `n` frameworks on `connect` so far
    /// (zk-curator rows only).
    fn passes(&self, connect: &str, n: usize) -> Option<u64> {
        match &self.imp {
            Imp::ZkCurator { pools, .. } => pools.get(connect).map(|p| {
                p[..n.min(p.len())]
                    .iter()
                    .map(|fw| fw.metrics().lock_passes())
                    .sum()
            }),
            _ => None,
        }
    }

    pub(crate) async fn close(self) {
        match self.imp {
            Imp::ZkCurator { pools, .. } => {
                let closing = pools.into_values().flatten().map(|fw| async move {
                    let _ = tokio::time::timeout(CLOSE_LIMIT, fw.close()).await;
                });
                futures::future::join_all(closing).await;
            }
            Imp::ZkClient { pools } => drop(pools),
            Imp::Peer(peer) => {
                if let Ok(peer) = *peer {
                    peer.quit().await;
                }
            }
        }
    }
}
