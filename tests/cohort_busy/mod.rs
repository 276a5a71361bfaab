//! A busy cohort framework, for the fairness tests of cohort hand-off
//! (issue 24): many tasks of one framework with cohorting on take one mutex
//! over and over with short holds, so that the lock keeps passing among
//! them, while a waiter of another process (Curator on the JVM in
//! `tests/interop.rs`, the `zk-curator lock` command in
//! `cli/tests/cohort_fairness.rs`) must still get its turn within the bound.
//!
//! Each hold makes one fenced write to a data node of its own beside the
//! lock, and the hold is recorded with its token and the write's zxid. A
//! waiter of another session whose lock node has czxid `C` waits only
//! behind nodes created before `C`; the busy holds it waited through are
//! the holds on such nodes (token zxid below `C`) that wrote after `C`
//! ([`Busy::holds_behind`]), counted by ZooKeeper's own order, not by wall
//! time. A busy node carries at most `max_passes + 1` holds, and the
//! framework has one node in the queue at a time, so a fair waiter is
//! behind at most `max_passes + 1` of them.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zk_curator::zk;
use zk_curator::{CohortPolicy, FencingToken, Framework, InterProcessMutex};

/// One busy hold: its token, and the zxid of its fenced write.
#[derive(Clone, Copy, Debug)]
pub struct BusyHold {
    pub token: FencingToken,
    pub write_zxid: i64,
}

/// Busy tasks of one cohort framework on one mutex.
pub struct Busy {
    pub framework: Framework,
    stop: Arc<AtomicBool>,
    holds: Arc<Mutex<Vec<BusyHold>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// No busy task takes more holds than this (a bound on its loop).
const MAX_HOLDS_PER_TASK: usize = 200_000;

impl Busy {
    /// Starts `tasks` tasks of a new framework on `connect` with `policy`,
    /// taking the mutex at `path` over and over, and returns once the lock
    /// has been passed at least once.
    pub async fn start(connect: &str, path: &str, policy: CohortPolicy, tasks: usize) -> Busy {
        let framework = Framework::builder()
            .connect_string(connect)
            .session_timeout(Duration::from_secs(10))
            .connection_timeout(Duration::from_secs(10))
            .cohort(policy)
            .build()
            .unwrap();
        framework.start().unwrap();
        framework
            .block_until_connected(Duration::from_secs(20))
            .await
            .unwrap();
        let data = format!("{path}-data");
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let client = framework.client().await.unwrap();
        match client.create(&data, b"", &open).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(zk::Error::NoNode) => {
                client.mkdir(&data, &open).await.unwrap();
            }
            Err(err) => panic!("create {data}: {err}"),
        }
        let stop = Arc::new(AtomicBool::new(false));
        let holds = Arc::new(Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        for _ in 0..tasks {
            let mutex = InterProcessMutex::new(framework.clone(), path).unwrap();
            let (stop, holds, data) = (stop.clone(), holds.clone(), data.clone());
            handles.push(tokio::spawn(async move {
                for _ in 0..MAX_HOLDS_PER_TASK {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let guard = mutex.lock().await.unwrap();
                    let token = guard.fencing_token();
                    let stat = guard
                        .fence()
                        .unwrap()
                        .set_data(&data, token.to_string().as_bytes(), None)
                        .await
                        .unwrap();
                    holds.lock().unwrap().push(BusyHold {
                        token,
                        write_zxid: stat.mzxid,
                    });
                    guard.release().await.unwrap();
                }
            }));
        }
        let busy = Busy {
            framework,
            stop,
            holds,
            tasks: handles,
        };
        let passing = async {
            while busy.framework.metrics().lock_passes() == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(20), passing)
            .await
            .expect("the busy framework never passed the lock");
        busy
    }

    /// The passes so far.
    pub fn passes(&self) -> u64 {
        self.framework.metrics().lock_passes()
    }

    /// Stops the tasks, closes the framework, and returns every hold in
    /// the order of the holds' writes, checking on the way that their
    /// tokens grew in that order (one holder at a time, tokens compared
    /// whole: zxid, then pass count).
    pub async fn stop(self) -> Vec<BusyHold> {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            tokio::time::timeout(Duration::from_secs(20), task)
                .await
                .expect("a busy task did not stop")
                .unwrap();
        }
        self.framework.close().await;
        let mut holds = self.holds.lock().unwrap().clone();
        holds.sort_by_key(|h| h.write_zxid);
        for pair in holds.windows(2) {
            assert!(
                pair[0].token < pair[1].token,
                "busy holds' tokens must grow in the order of their writes: {pair:?}"
            );
        }
        holds
    }
}

/// The busy holds a waiter whose lock node has czxid `czxid` waited
/// through: holds on nodes created before its own that wrote after it
/// was created.
pub fn holds_behind(holds: &[BusyHold], czxid: i64) -> usize {
    holds
        .iter()
        .filter(|h| h.token.get() < czxid && h.write_zxid > czxid)
        .count()
}

/// The most holds any busy node carried (a run: the node's first hold and
/// the passes after it).
pub fn longest_run(holds: &[BusyHold]) -> usize {
    let mut runs = std::collections::BTreeMap::<i64, usize>::new();
    for hold in holds {
        *runs.entry(hold.token.get()).or_default() += 1;
    }
    runs.into_values().max().unwrap_or(0)
}
