//! `zk-curator revoke`: asks holders to give their lock up, or the leader
//! of an election to step down, with [`Revoker::attempt_revoke`] (Curator's
//! `__REVOKE__` protocol).

use clap::Args;
use zk_curator::framework::path::{validate_node_name, validate_path};
use zk_curator::recipes::layout::Role;
use zk_curator::{Framework, LeaderObserver, Revoker};

use crate::connect::ConnectArgs;
use crate::exit::{out, Failure, NO_PARTICIPANT};
use crate::locks::participants_now;

/// Options of `revoke`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("which").args(["node", "all"]))]
pub(crate) struct RevokeArgs {
    /// The lock's path, or (without --node and --all) an election's path:
    /// its leader is asked to step down.
    pub(crate) path: String,
    /// One participant node, by name (as `locks` prints it) or full path.
    #[arg(long, value_name = "NAME")]
    pub(crate) node: Option<String>,
    /// Every holder of the lock (waiters are left alone).
    #[arg(long)]
    pub(crate) all: bool,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

/// Refuses a malformed `--node` before anything is sent: a node name, or a
/// full path when it starts with `/`.
pub(crate) fn check_node(node: &str) -> Result<(), Failure> {
    let checked = if node.starts_with('/') {
        validate_path(node)
    } else {
        validate_node_name(node)
    };
    checked.map_err(|err| Failure::usage(format!("bad --node {node:?}: {err}")))
}

/// Writes the revocation request into the chosen nodes and prints how many
/// were asked. A `--node` must be one of the lock's participants (by name,
/// as `locks` prints it, or full path); nothing is written otherwise.
pub(crate) async fn run(framework: &Framework, args: &RevokeArgs) -> Result<u8, Failure> {
    if args.node.is_none() && !args.all {
        return step_down(framework, &args.path).await;
    }
    let found = participants_now(framework, &args.path, None).await?;
    let targets: Vec<String> = match &args.node {
        Some(node) => {
            let chosen = found
                .iter()
                .find(|p| p.node_path == *node || p.name == *node)
                .ok_or_else(|| {
                    Failure::new(
                        NO_PARTICIPANT,
                        format!(
                            "{node} is not a participant of the lock {path} (which has {count} \
                             now; `zk-curator locks {path}` lists them); nothing was revoked",
                            path = args.path,
                            count = found.len(),
                        ),
                    )
                })?;
            vec![chosen.node_path.clone()]
        }
        None => found
            .into_iter()
            .filter(|p| p.role == Role::Holder)
            .map(|p| p.node_path)
            .collect(),
    };
    for node in &targets {
        Revoker::attempt_revoke(framework, node)
            .await
            .map_err(|err| Failure::zk(format!("cannot revoke {node}"), err))?;
        tracing::info!(%node, "revocation requested");
    }
    let plural = if targets.len() == 1 { "" } else { "s" };
    out(format!("asked {} holder{plural} to release", targets.len()))?;
    Ok(0)
}

/// Asks the leader of the election at `path` to step down (a latch's or a
/// selector's, as `leader` reads it), and names it. The request goes into
/// the election path's data ([`LeaderObserver::revoke_leader`]),
/// not into the leader's node: a Curator latch queued behind it keeps its
/// watch. An election without
/// participants is [`NO_PARTICIPANT`]; nothing is written.
async fn step_down(framework: &Framework, path: &str) -> Result<u8, Failure> {
    let failed = |err| Failure::zk(format!("cannot read the election at {path}"), err);
    let observer = LeaderObserver::new(framework.clone(), path).map_err(failed)?;
    let asked = observer
        .revoke_leader()
        .await
        .map_err(|err| Failure::zk(format!("cannot ask the leader of {path} to step down"), err))?;
    let Some(leader) = asked else {
        return Err(Failure::new(
            NO_PARTICIPANT,
            format!(
                "{path} has no leader (no election participants; for a lock, give --node \
                 or --all); nothing was revoked"
            ),
        ));
    };
    let node = &leader.node_path;
    let who = if leader.identity.is_some() || leader.id.is_empty() {
        crate::locks::identity_text(leader.id.as_bytes())
    } else {
        leader.id.clone()
    };
    out(format!(
        "asked the leader {who} (node {}, token {}) to step down",
        node, leader.token
    ))?;
    Ok(0)
}
