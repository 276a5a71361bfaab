//! `zk-curator revoke`: asks holders to give their lock up, or the leader
//! of an election to step down, with [`Revoker::attempt_revoke`] (Curator's
//! `__REVOKE__` protocol).

use std::time::Duration;

use clap::Args;
use zk_curator::framework::path::{validate_node_name, validate_path};
use zk_curator::recipes::fresh::synced;
use zk_curator::recipes::layout::{identify, read_nodes, Family, LockParticipant, PathKind, Role};
use zk_curator::{Framework, LeaderObserver, Revoker};

use crate::connect::ConnectArgs;
use crate::exit::{out, shown, Failure, NO_PARTICIPANT};
use crate::locks::{identity_text, nothing_to_act_on, participant_named, participants_now};

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

/// How long `revoke` waits for the holders it asked to give their nodes
/// up, before it says which did not.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// Reads what the path is first ([`identify`], the reading `locks` and
/// `leader` share), and never writes into a path it has not recognised:
/// without `--node` or `--all`, only a latch's election is asked to step
/// down; a lock (a mutex's or selector's nodes, a read-write lock, a
/// semaphore, kazoo's nodes) asks for `--node` or `--all`; a folder, an
/// empty path, participants of several families and nodes no recipe writes
/// are refused, saying what is there.
///
/// With `--node` or `--all`, writes the revocation request into the chosen
/// nodes, naming each holder as its node named it before the request took
/// its place, then waits up to [`ANSWER_WAIT`] for them to give their nodes
/// up, and says which did not (a holder that is not revocable, or whose
/// process is gone while its session has not expired yet: nothing answers
/// then, and the node goes only with the session). A `--node` must be one
/// of the lock's participants (by name, as `locks` prints it, or full
/// path); nothing is written otherwise.
pub(crate) async fn run(framework: &Framework, args: &RevokeArgs) -> Result<u8, Failure> {
    let path = args.path.as_str();
    let kind = synced(framework, path, || identify(framework, path))
        .await
        .map_err(|err| Failure::zk(format!("cannot read {}", shown(path)), err))?;
    if kind == PathKind::Recipe(Family::CuratorLatch) && args.node.is_none() && !args.all {
        return step_down(framework, path).await;
    }
    if let Some(refusal) = nothing_to_act_on(path, &kind, "written") {
        return Err(refusal);
    }
    if let PathKind::Mixed(_) = kind {
        return Err(Failure::new(
            NO_PARTICIPANT,
            format!(
                "{path} has {}: `zk-curator locks {path}` lists them; nothing was written",
                kind.describe()
            ),
        ));
    }
    if args.node.is_none() && !args.all {
        return Err(Failure::usage(format!(
            "{path} is {}, not an election: give --node NAME (one participant, as `zk-curator \
             locks {path}` names it) or --all (every holder); nothing was written",
            kind.describe()
        )));
    }
    let found = participants_now(framework, path, None).await?;
    let targets: Vec<LockParticipant> = match &args.node {
        Some(node) => vec![participant_named(&found, node, path, "revoked")?.clone()],
        None => found
            .into_iter()
            .filter(|p| p.role == Role::Holder)
            .collect(),
    };
    for target in &targets {
        let node = &target.node_path;
        Revoker::attempt_revoke(framework, node)
            .await
            .map_err(|err| Failure::zk(format!("cannot revoke {node}"), err))?;
        tracing::info!(%node, "revocation requested");
    }
    let plural = if targets.len() == 1 { "" } else { "s" };
    out(format!("asked {} holder{plural} to release", targets.len()))?;
    for target in &targets {
        out(format!(
            "  {} (node {}, session {:#x})",
            identity_text(&target.data),
            target.name,
            target.session
        ))?;
    }
    if kind == PathKind::Recipe(Family::KazooLock) {
        eprintln!(
            "zk-curator: kazoo's own locks do not watch for revocation requests; only \
             zk-curator holders in kazoo's layout answer"
        );
    }
    answered(framework, &targets).await
}

/// Waits up to [`ANSWER_WAIT`] for the nodes of `targets` to go, and says
/// which are still there: exit 0 when all went, else
/// [`crate::exit::TIMEOUT`].
async fn answered(framework: &Framework, targets: &[LockParticipant]) -> Result<u8, Failure> {
    let paths: Vec<String> = targets.iter().map(|t| t.node_path.clone()).collect();
    let deadline = tokio::time::Instant::now() + ANSWER_WAIT;
    let mut left = paths.clone();
    loop {
        let read = read_nodes(framework, &left)
            .await
            .map_err(|err| Failure::zk("cannot see whether the holders answered", err))?;
        left = left
            .into_iter()
            .zip(read)
            .filter_map(|(path, read)| read.map(|_| path))
            .collect();
        if left.is_empty() || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if left.is_empty() {
        return Ok(0);
    }
    for target in targets.iter().filter(|t| left.contains(&t.node_path)) {
        let why = if target.session == 0 {
            "its node is persistent, held by no session: nothing can answer".to_owned()
        } else {
            format!(
                "its holder is not revocable, or its process is gone and its session {:#x} has \
                 not expired yet (nothing can answer then; the node goes when the session does)",
                target.session
            )
        };
        eprintln!(
            "zk-curator: {} still holds {} after {}s: {why}",
            identity_text(&target.data),
            target.name,
            ANSWER_WAIT.as_secs()
        );
    }
    Ok(crate::exit::TIMEOUT)
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
