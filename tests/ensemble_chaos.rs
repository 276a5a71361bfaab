//! The chaos test on a replicated ensemble (issue 32, item 3): the chaos
//! harness's contenders and observers (see `tests/chaos.rs`) on a real
//! 3-node ZooKeeper ensemble, each client knowing every member through
//! fault proxies of its own, while the ensemble's own faults join the
//! client-side ones: the leader killed, a follower's link from the leader
//! stalled, a member cut off from its peers, the quorum lost and back, and
//! an observer moved onto a lagging member (see the harness's `ensemble`
//! module, in the `zk-curator-chaos` crate). Checked by the same rules as on one server: no overlaps among
//! holders that obey `lost()`, no stale fenced write, tokens in order,
//! every acquire by its deadline, no leaked nodes, and an observer never
//! reports a leader older than one it already reported, across session
//! changes, nor one whose term had ended longer ago than its server may
//! lag (`syncLimit`).
//!
//! The ensemble runs with local sessions on (an observer's session, which
//! creates nothing, stays local to its server, as in large deployments),
//! `syncLimit` 80 ticks of 100 ms (a cut-off member drops its clients
//! after 8 s, so some cuts outlast it and some do not), and its peer links
//! through proxies. A second run does the same with cohort hand-off on.
//! `ZK_CHAOS_SECS` (default 60 s, 30 s in cohort mode), `ZK_CHAOS_SEED`
//! and `ZK_CHAOS_BREAK` work as in `tests/chaos.rs`. Without ZooKeeper the test
//! fails saying so, or is skipped under `ZK_SKIP_MISSING=zookeeper`.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{bounded, init_tracing};
use zk_curator::CohortPolicy;
use zk_curator_chaos as chaos;
use zk_curator_testing::backend::Prerequisite;
use zk_curator_testing::TestingCluster;

/// The ensemble each run is aimed at: local sessions on, `syncLimit` 80
/// ticks of 100 ms, peer links through proxies.
async fn ensemble() -> TestingCluster {
    let cluster = TestingCluster::builder()
        .quorum_through_proxies(true)
        .local_sessions(true)
        .sync_limit(80)
        .start_async()
        .await
        .unwrap();
    cluster
        .wait_until_serving_async(Duration::from_secs(60))
        .await
        .unwrap();
    cluster
}

/// Runs the harness on `cluster` (bounded to its length plus two minutes),
/// prints its report, and fails the test on any violation.
async fn run_clean(cluster: &TestingCluster, config: chaos::Config) -> chaos::Report {
    let limit = config.duration + Duration::from_secs(120);
    let report = bounded(
        limit,
        chaos::run_on(chaos::Target::Ensemble(cluster), config),
    )
    .await;
    println!("{report}");
    let violations = report.violations();
    assert!(
        violations.is_empty(),
        "the ensemble chaos found {} violation(s) (replay with ZK_CHAOS_SEED={}):\n{}",
        violations.len(),
        report.seed,
        violations.join("\n")
    );
    report
}

/// A member stalled or cut off answers for up to `syncLimit` (8 s), and
/// takes a tick or two more to notice.
const READ_LAG: Duration = Duration::from_secs(9);

/// How long beyond the session timeout and [`READ_LAG`] a stuck hold's node
/// may outlive its bound (the harness's notes, "Stuck holders", rule 8):
/// the ensemble refuses every write while its quorum is lost (two members
/// down for 1 to 3 s, then their restart and an election) or its leader is
/// being replaced.
const STUCK_SLACK: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_two_holders_no_stale_write_and_no_older_report_on_an_ensemble_under_faults() {
    init_tracing();
    if !Prerequisite::ZooKeeper.check("ensemble_chaos") {
        return;
    }
    let cluster = ensemble().await;
    let config = chaos::Config::from_env(60)
        .with_read_lag(READ_LAG)
        .with_stuck_slack(STUCK_SLACK);
    let report = run_clean(&cluster, config).await;
    assert!(
        report
            .faults
            .get(chaos::ensemble::Fault::ObserverLag.name())
            .is_some_and(|&n| n > 0),
        "no observer was moved onto a lagging member (the run proved little): {:?}",
        report.faults
    );
}

/// Cohort mode on the ensemble: three tasks of each contender on each lock
/// recipe pass held nodes among themselves under the same faults (no
/// elections, so no observers: the observer fault is skipped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cohort_no_two_holders_and_no_stale_write_on_an_ensemble_under_faults() {
    init_tracing();
    if !Prerequisite::ZooKeeper.check("ensemble_chaos") {
        return;
    }
    let cluster = ensemble().await;
    let policy = CohortPolicy::new(8, Duration::from_secs(1));
    let config = chaos::Config::from_env(30)
        .with_read_lag(READ_LAG)
        .with_stuck_slack(STUCK_SLACK)
        .with_cohort(policy, 3);
    let report = run_clean(&cluster, config).await;
    assert!(report.passes.is_some_and(|p| p > 0), "no node was passed");
}
