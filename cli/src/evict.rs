//! `zk-curator evict`: removes participants' nodes from a lock or an
//! election, the way out of a hold whose holder is stuck with its session
//! alive (a deadlock, a wedged call): nothing else ends such a hold.
//!
//! The path is read first as `locks` reads it ([`identify`]): a folder, an
//! empty or missing path and nodes no recipe writes are refused, so
//! nothing is deleted that is not a participant. A zk-curator holder
//! (its node carries a [`HolderIdentity`]) watches its node: it sees the
//! deletion at once (its hold is lost, `lost()` fires, `lock` stops its
//! command), and its fenced writes are refused. Curator's and kazoo's
//! holders, and anything else, have no such signal: their process may go
//! on as if it held while the next holder is granted. Those are removed
//! only with `--force`, and said so.

use std::time::Duration;

use clap::Args;
use serde_json::json;
use zk_curator::framework::zk;
use zk_curator::framework::HolderIdentity;
use zk_curator::recipes::fresh::synced;
use zk_curator::recipes::layout::{identify, LockParticipant, Role};
use zk_curator::Framework;

use crate::connect::ConnectArgs;
use crate::duration::parse_duration;
use crate::exit::{out, shown, Failure, OTHER};
use crate::locks::{identity_text, nothing_to_act_on, participant_named, participants_now};

/// The exit code of an eviction that needs `--force` (`EX_DATAERR`: what
/// the nodes hold says their holders would not notice).
pub(crate) const NEEDS_FORCE: u8 = 65;

/// Options of `evict`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("which").args(["node", "older_than"]).required(true))]
pub(crate) struct EvictArgs {
    /// The lock's (or election's) path.
    pub(crate) path: String,
    /// One participant node, by name (as `locks` prints it) or full path.
    #[arg(long, value_name = "NAME")]
    pub(crate) node: Option<String>,
    /// Every holder whose node is at least this old (e.g. 10m): the time
    /// since it queued, as `locks` shows it in QUEUED; a holder has held
    /// for at most that long.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub(crate) older_than: Option<Duration>,
    /// Remove nodes whose holders have no loss signal too (Curator's,
    /// kazoo's, any node without zk-curator's holder identity): they are
    /// not told, and may go on as if they held.
    #[arg(long)]
    pub(crate) force: bool,
    /// Print one JSON object (for scripts): `removed`, `gone`.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

/// Whether the participant's holder watches its node (a zk-curator holder,
/// which writes its identity into it).
fn has_loss_signal(p: &LockParticipant) -> bool {
    HolderIdentity::parse(&p.data).is_some()
}

/// Runs `evict`: the participants chosen, refused unless they are
/// participants of a lock or election and (without `--force`) zk-curator
/// holders; then each node deleted, and what was removed printed.
pub(crate) async fn run(framework: &Framework, args: &EvictArgs) -> Result<u8, Failure> {
    let path = args.path.as_str();
    let kind = synced(framework, path, || identify(framework, path))
        .await
        .map_err(|err| Failure::zk(format!("cannot read {}", shown(path)), err))?;
    if let Some(refusal) = nothing_to_act_on(path, &kind, "removed") {
        return Err(refusal);
    }
    let found = participants_now(framework, path, None).await?;
    let chosen: Vec<LockParticipant> = match (&args.node, args.older_than) {
        (Some(node), _) => vec![participant_named(&found, node, path, "removed")?.clone()],
        (None, Some(age)) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            let age_ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
            found
                .into_iter()
                .filter(|p| p.role == Role::Holder && now.saturating_sub(p.ctime_ms) >= age_ms)
                .collect()
        }
        (None, None) => return Err(Failure::usage("give --node NAME or --older-than D")),
    };
    let unaware: Vec<&LockParticipant> = chosen.iter().filter(|p| !has_loss_signal(p)).collect();
    if !unaware.is_empty() && !args.force {
        let named: Vec<String> = unaware
            .iter()
            .map(|p| format!("{} ({})", p.name, identity_text(&p.data)))
            .collect();
        return Err(Failure::new(
            NEEDS_FORCE,
            format!(
                "{} carr{} no zk-curator holder identity (Curator's or kazoo's holder, or another \
                 client's): such a holder has no loss signal and is not told that its node is \
                 gone, so it may go on as if it held while the next holder is granted; give \
                 --force to remove it anyway; nothing was removed",
                named.join(", "),
                if unaware.len() == 1 { "ies" } else { "y" }
            ),
        ));
    }
    let client = framework
        .client()
        .await
        .map_err(|err| Failure::zk("cannot reach ZooKeeper", err))?;
    let mut removed = Vec::new();
    let mut gone = Vec::new();
    for p in &chosen {
        match client.delete(&p.node_path, None).await {
            Ok(()) => removed.push(p),
            Err(zk::Error::NoNode) => gone.push(p),
            Err(zk::Error::NoAuth) => {
                return Err(Failure::new(
                    OTHER,
                    format!(
                        "refused by ZooKeeper (NoAuth): the ACL of {path} does not let this \
                         identity delete its participants; {} removed before the refusal",
                        removed.len()
                    ),
                ))
            }
            Err(err) => {
                return Err(Failure::zk(
                    format!("cannot remove {}", p.node_path),
                    zk_curator::Error::from_zk(err, client.state()),
                ))
            }
        }
    }
    if args.json {
        let entry = |p: &&LockParticipant| {
            json!({
                "node": p.node_path,
                "role": p.role.as_str(),
                "session": format!("{:#x}", p.session),
                "fencing_token": p.czxid,
                "identity": crate::locks::identity(&p.data),
                "loss_signal": has_loss_signal(p),
            })
        };
        out(json!({
            "path": path,
            "removed": removed.iter().map(entry).collect::<Vec<_>>(),
            "gone": gone.iter().map(entry).collect::<Vec<_>>(),
        }))?;
        return Ok(0);
    }
    if chosen.is_empty() {
        out(format!(
            "no holder of {path} is that old; nothing was removed"
        ))?;
    }
    for p in &removed {
        let note = if has_loss_signal(p) {
            "its holder sees its hold lost (node deleted)"
        } else {
            "its holder has no loss signal and may go on as if it held"
        };
        out(format!(
            "removed {} ({}, {}, session {:#x}, token {}): {note}",
            p.name,
            p.role.as_str(),
            identity_text(&p.data),
            p.session,
            p.czxid
        ))?;
    }
    for p in &gone {
        out(format!("{} was already gone", p.name))?;
    }
    Ok(0)
}
