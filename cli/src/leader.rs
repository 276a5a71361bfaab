//! `zk-curator leader`: the leader of an election and its other
//! participants, in queue order, as a table or JSON; with `--watch`, one
//! line for each change of leader, from a [`LeaderObserver`].
//!
//! Reads both of Curator's election layouts: a leader latch's `latch-`
//! nodes (what `elect` and `LeaderLatch` write) and a leader selector's
//! `lock-` nodes (a mutex's queue). The first participant leads.

use clap::Args;
use futures::StreamExt as _;
use serde_json::{json, Value};
use tokio::signal::unix::{signal, SignalKind};
use zk_curator::framework::path::split;
use zk_curator::recipes::fresh::synced;
use zk_curator::recipes::layout::{identify, ElectionRecipe, Family, Layout, PathKind};
use zk_curator::{
    Error, Framework, LeaderElection, LeaderLatch, LeaderObserver, LeaderSelector, LeaderTerm,
    Observation, ObservedLeader, Participant,
};

use crate::connect::ConnectArgs;
use crate::exit::{out, printable, Failure, NO_PARTICIPANT, OTHER};
use crate::locks::{columns, identity, identity_text, not_a_lock};

/// Options of `leader`.
#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    /// The election's path, e.g. /services/compactor/leader.
    pub(crate) path: String,
    /// Print one JSON object (for scripts) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Print the leader, then one line each time it changes (one JSON
    /// object per line with `--json`), until Ctrl-C. While the connection to
    /// ZooKeeper is down the leader is unknown, and a line says so; once
    /// connected again the election is read afresh.
    #[arg(long)]
    pub(crate) watch: bool,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

/// The participants of one election, in queue order.
struct Election {
    /// `None` when there are no participants.
    recipe: Option<ElectionRecipe>,
    participants: Vec<Participant>,
    /// The value the leader proclaimed, if it did.
    value: Option<Vec<u8>>,
}

/// Reads the election at `path` after the one reading of what the path is
/// ([`identify`], shared with `locks` and `revoke`): a latch's, a
/// selector's (a mutex's queue) or kazoo's election (a kazoo lock's
/// queue), each in its own queue order. A path that is something else (a
/// read-write lock, a semaphore, participants of several recipes, a
/// folder, nodes no recipe writes) is [`NO_PARTICIPANT`], saying what it
/// is; nothing is read as an election that is none.
async fn read(framework: &Framework, path: &str) -> Result<Election, Failure> {
    let failed = |err: Error| Failure::zk(format!("cannot read the election at {path}"), err);
    let kind = identify(framework, path).await.map_err(failed)?;
    let (recipe, layout) = match &kind {
        PathKind::Missing | PathKind::Empty => {
            return Ok(Election {
                recipe: None,
                participants: Vec::new(),
                value: None,
            })
        }
        PathKind::Recipe(Family::CuratorLatch) => (ElectionRecipe::Latch, Layout::Curator),
        PathKind::Recipe(Family::CuratorLock) => (ElectionRecipe::Selector, Layout::Curator),
        PathKind::Recipe(Family::KazooLock) => (ElectionRecipe::Kazoo, Layout::Kazoo),
        other => return Err(not_an_election(path, other)),
    };
    // Neither handle is started: they only read, in the election's order.
    let found = match recipe {
        ElectionRecipe::Selector => {
            let selector =
                LeaderSelector::new(framework.clone(), path, |_term: LeaderTerm| async {})
                    .map_err(failed)?;
            LeaderElection::participants(&selector).await
        }
        _ => {
            let latch =
                LeaderLatch::with_layout(framework.clone(), path, "", layout).map_err(failed)?;
            LeaderElection::participants(&latch).await
        }
    }
    .map_err(failed)?;
    let value = proclaimed(framework, path, recipe, &found).await?;
    Ok(Election {
        recipe: (!found.is_empty()).then_some(recipe),
        participants: found,
        value,
    })
}

/// The refusal of a path that holds no election, saying what it holds.
pub(crate) fn not_an_election(path: &str, kind: &PathKind) -> Failure {
    let message = match kind {
        PathKind::Folder { .. } | PathKind::Unknown { .. } => not_a_lock(path, kind),
        PathKind::Mixed(_) => format!(
            "{path} has {}: not one election (`zk-curator locks {path}` lists every family)",
            kind.describe()
        ),
        other => format!(
            "{path} is {}, not an election: `zk-curator locks {path}` lists it",
            other.describe()
        ),
    };
    Failure::new(NO_PARTICIPANT, message)
}

/// The value the leader among `found` proclaimed, if it did (read as an
/// observer reads it: only a value its own term wrote counts).
async fn proclaimed(
    framework: &Framework,
    path: &str,
    recipe: ElectionRecipe,
    found: &[Participant],
) -> Result<Option<Vec<u8>>, Failure> {
    let Some(leader) = found.iter().find(|p| p.is_leader) else {
        return Ok(None);
    };
    let failed = |err: Error| Failure::zk(format!("cannot read the election at {path}"), err);
    let observer = LeaderObserver::with_recipe(framework.clone(), path, recipe).map_err(failed)?;
    let seen = observer.leader().await.map_err(failed)?;
    Ok(seen
        .filter(|seen| seen.node_path == leader.node_path && seen.proclaimed)
        .map(|seen| seen.value))
}

/// A value as text (invalid UTF-8 replaced).
fn value_text(value: &[u8]) -> String {
    printable(&String::from_utf8_lossy(value)).into_owned()
}

/// Prints the leader and the participants of `args.path`; with `--watch`,
/// the leader and every change of it, until interrupted.
pub(crate) async fn run(framework: &Framework, args: &LeaderArgs) -> Result<u8, Failure> {
    if args.watch {
        return watch(framework, args).await;
    }
    // As of now, not as of the server (see zk_curator::recipes::fresh): a
    // read on a session built after the sync is made again.
    let path = args.path.as_str();
    let election = synced(framework, path, || async {
        Ok(read(framework, path).await)
    })
    .await
    .map_err(|err| Failure::zk(format!("cannot read the election at {path}"), err))??;
    if args.json {
        out(to_json(&args.path, &election))?;
    } else {
        out(table(&args.path, &election))?;
    }
    Ok(0)
}

fn role(p: &Participant) -> &'static str {
    if p.is_leader {
        "leader"
    } else {
        "waiter"
    }
}

/// The participant id, unless the node carries a holder identity instead.
fn id_of(p: &Participant) -> Option<&str> {
    p.identity.is_none().then_some(p.id.as_str())
}

/// A participant, with the value proclaimed for the leader (`null` for a
/// waiter, or a leader that proclaimed none).
fn participant_json(p: &Participant, value: Option<&[u8]>) -> Value {
    json!({
        "value": value.filter(|_| p.is_leader).map(value_text),
        "role": role(p),
        "id": id_of(p),
        "identity": p.identity.as_ref().map(|_| identity(p.id.as_bytes())),
        "node": p.node_path,
        "name": split(&p.node_path).1,
        "token": p.token.get(),
    })
}

fn to_json(path: &str, election: &Election) -> Value {
    let value = election.value.as_deref();
    let leader = election
        .participants
        .iter()
        .find(|p| p.is_leader)
        .map(|p| participant_json(p, value));
    let listed: Vec<Value> = election
        .participants
        .iter()
        .map(|p| participant_json(p, value))
        .collect();
    json!({
        "path": path,
        "recipe": election.recipe.map(ElectionRecipe::as_str),
        "leader": leader,
        "participants": listed,
    })
}

fn table(path: &str, election: &Election) -> String {
    let Some(leader) = election.participants.iter().find(|p| p.is_leader) else {
        return format!("no leader: {path} has no participants");
    };
    let who = who(&leader.id, leader.identity.is_some());
    let mut rows = vec![["ROLE", "ID", "HOLDER", "TOKEN", "NODE"]
        .map(String::from)
        .to_vec()];
    for p in &election.participants {
        rows.push(vec![
            role(p).to_owned(),
            id_of(p).unwrap_or_default().to_owned(),
            if p.identity.is_some() {
                identity_text(p.id.as_bytes())
            } else {
                String::new()
            },
            p.token.to_string(),
            split(&p.node_path).1.to_owned(),
        ]);
    }
    let recipe = election.recipe.map_or("", ElectionRecipe::as_str);
    let value = election
        .value
        .as_deref()
        .map(|v| format!(", value {}", value_text(v)))
        .unwrap_or_default();
    let mut out = format!(
        "leader: {who}, node {}, token {} (leader {recipe}){value}\n",
        leader.node_path, leader.token
    );
    out.push_str(&columns(&rows));
    out.trim_end().to_owned()
}

/// `leader --watch`: the observer's reports, one line each, until SIGINT
/// (exit 0) or the framework's end.
async fn watch(framework: &Framework, args: &LeaderArgs) -> Result<u8, Failure> {
    let observer = LeaderObserver::new(framework.clone(), &args.path)
        .map_err(|err| Failure::zk(format!("cannot watch the election at {}", args.path), err))?;
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|err| Failure::new(OTHER, format!("cannot handle SIGINT: {err}")))?;
    let mut changes = std::pin::pin!(observer.changes());
    loop {
        tokio::select! {
            seen = changes.next() => match seen {
                Some(seen) => out(observed_line(&args.path, &seen, args.json))?,
                None => return Ok(0),
            },
            _ = interrupt.recv() => return Ok(0),
        }
    }
}

/// The who of a leader, as the table's first line shows it.
fn who(id: &str, identity: bool) -> String {
    match id {
        _ if identity => identity_text(id.as_bytes()),
        "" => "(no id)".to_owned(),
        id => printable(id).into_owned(),
    }
}

fn observed_json(leader: &ObservedLeader) -> Value {
    let has_identity = leader.identity.is_some();
    json!({
        "id": (!has_identity).then_some(leader.id.as_str()),
        "identity": has_identity.then(|| identity(&leader.value)),
        "node": leader.node_path,
        "name": split(&leader.node_path).1,
        "token": leader.token.get(),
        "session": format!("{:#x}", leader.session),
        "value": leader.proclaimed.then(|| value_text(&leader.value)),
    })
}

/// One line of `leader --watch`: a JSON object with `--json`, else text.
fn observed_line(path: &str, seen: &Observation, json: bool) -> String {
    let (state, recipe, leader) = match seen {
        Observation::Leader(leader) => ("leader", Some(leader.recipe), Some(leader)),
        Observation::NoLeader => ("none", None, None),
        _ => ("unknown", None, None),
    };
    if json {
        return json!({
            "path": path,
            "state": state,
            "recipe": recipe.map(ElectionRecipe::as_str),
            "leader": leader.map(observed_json),
        })
        .to_string();
    }
    match leader {
        Some(leader) => format!(
            "leader: {}, node {}, token {} (leader {}){}",
            who(&leader.id, leader.identity.is_some()),
            leader.node_path,
            leader.token,
            leader.recipe.as_str(),
            if leader.proclaimed {
                format!(", value {}", value_text(&leader.value))
            } else {
                String::new()
            }
        ),
        None if state == "none" => format!("no leader: {path} has no participants"),
        None => format!("leader unknown: not connected to ZooKeeper ({path})"),
    }
}
