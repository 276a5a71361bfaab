//! Routing to the current leader: two replicas campaign with a
//! `LeaderLatch` and proclaim the address they serve on; a router that
//! takes no part in the election follows the leader through a
//! `LeaderObserver` and sends each request to the address the leader
//! proclaimed. An operator then asks the leader to step down (as
//! `zk-curator revoke PATH` does), and the router follows the hand-over.
//!
//! With `ZK_CONNECT` set (e.g. `127.0.0.1:2181`) it uses that ensemble;
//! otherwise it starts a throw-away server on a free loopback port: the
//! embedded ZooKeeper-protocol server (no JVM needed), or a real ZooKeeper
//! with `ZK_TEST_SERVER=real`.
//!
//! Run: `cargo run -p examples --example leader_routing`

mod common;

use std::time::Duration;

use futures::StreamExt;
use zk_curator::{LeaderElection, LeaderLatch, LeaderObserver, Observation};

use common::BoxError;

/// How long the example waits for any one change before giving up.
const STEP: Duration = Duration::from_secs(20);

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    common::init_tracing();
    let (connect, _server) = common::server().await?;
    let election = format!("/leader-routing-example/{}", std::process::id());

    // Two replicas, each its own session, each proclaiming its address
    // from the start of every term. Revocable: they step down when asked.
    let mut replicas = Vec::new();
    for (id, address) in [
        ("replica-a", "10.0.0.1:8080"),
        ("replica-b", "10.0.0.2:8080"),
    ] {
        let framework = common::connected(&connect, Duration::from_secs(10)).await?;
        let latch = LeaderLatch::new(framework.clone(), &election, id)?.with_value(address);
        latch.make_revocable();
        latch.start()?;
        // One at a time, so the first queued leads.
        tokio::time::timeout(STEP, async {
            while latch
                .participants()
                .await
                .map_or(true, |p| p.len() < replicas.len() + 1)
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await?;
        replicas.push((latch, framework));
    }

    // The router: no campaign, one watch on the leader's node.
    let router = common::connected(&connect, Duration::from_secs(10)).await?;
    let observer = LeaderObserver::new(router.clone(), &election)?;
    let mut leaders = Box::pin(observer.changes());
    let mut route_to = async |not: Option<&str>| -> Result<(String, String), BoxError> {
        let found = tokio::time::timeout(STEP, async {
            while let Some(observation) = leaders.next().await {
                match observation {
                    Observation::Leader(leader) if leader.proclaimed => {
                        let address = String::from_utf8_lossy(&leader.value).into_owned();
                        if not != Some(leader.id.as_str()) {
                            return Some((leader.id, address));
                        }
                    }
                    // No leader, or one that has not proclaimed yet, or
                    // `Unknown` while the router is cut off: hold requests.
                    _ => {}
                }
            }
            None
        })
        .await?;
        found.ok_or_else(|| "the observer stopped".into())
    };

    let (leader, address) = route_to(None).await?;
    println!("router: requests go to {leader} at {address}");

    // An operator asks the leader to step down; the next replica leads and
    // proclaims its own address.
    let asked = observer.revoke_leader().await?.ok_or("no leader to ask")?;
    println!("operator: asked {} to step down", asked.id);
    let (next, next_address) = route_to(Some(&leader)).await?;
    println!("router: requests now go to {next} at {next_address}");
    if next == leader || next_address == address {
        return Err("leadership did not move".into());
    }

    for (latch, framework) in replicas {
        latch.close().await?;
        framework.close().await;
    }
    router.close().await;
    println!("done: the router followed the leader without campaigning");
    Ok(())
}
