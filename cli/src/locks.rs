//! `zk-curator locks`: a lock's holders and waiters, as a table or JSON.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use futures::{Stream, StreamExt as _};
use serde_json::{json, Value};
use tokio::signal::unix::{signal, SignalKind};
use zk_curator::framework::lock_internals::REVOKE_MESSAGE;
use zk_curator::framework::zk;
use zk_curator::recipes::fresh::synced;
use zk_curator::recipes::layout::{
    identify, lock_participants, survey, Family, Layout, LockParticipant, PathKind, Role,
    UnknownNodes, LEASES_CHILD, LOCKS_CHILD,
};
use zk_curator::recipes::tree::{TreeObserver, TreeView};
use zk_curator::{ConnectionState, Framework};

use crate::connect::ConnectArgs;
use crate::exit::{out, printable, shown, Failure, NO_PARTICIPANT, OTHER};

/// Options of `locks`.
#[derive(Debug, Args)]
pub(crate) struct LocksArgs {
    /// The lock's path.
    pub(crate) path: String,
    /// Print one JSON object (for scripts) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Print again after every change among the participants (one JSON
    /// object per line with `--json`), until Ctrl-C. A lost connection is
    /// reported at once (on stderr; with `--json` as a line
    /// `{"event":"disconnected",...}`), and so is the reconnection
    /// (`{"event":"reconnected",...}`), followed by a fresh listing.
    #[arg(long)]
    pub(crate) watch: bool,
    /// Every lock and election at or under the path (read down through
    /// folders), each with its holders and waiters in queue order, in one
    /// listing after one sync; `--json` gives one object with `paths`.
    /// With --watch, followed with one recursive watch and printed again at
    /// every change (HELD known for holders seen taking over).
    #[arg(long, conflicts_with = "leases")]
    pub(crate) all: bool,
    /// With --all: read at most this many paths; past it the listing says
    /// that it is capped (`capped` with --json) instead of growing.
    #[arg(long, value_name = "N", default_value = "10000", requires = "all", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_paths: u64,
    /// For a semaphore: its number of leases, to tell holders from the
    /// waiting lease node. Without it, the lease node of the session at the
    /// head of the semaphore's internal queue is taken for the waiter.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) leases: Option<u32>,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

/// The participants of the lock at `path`, holders and waiters in queue
/// order, as the recipes' own layout module reads them (see
/// [`lock_participants`]).
pub(crate) async fn participants(
    framework: &Framework,
    path: &str,
    max_leases: Option<u32>,
) -> Result<Vec<LockParticipant>, Failure> {
    lock_participants(framework, path, max_leases)
        .await
        .map_err(|err| Failure::zk(format!("cannot read the participants of {path}"), err))
}

/// [`participants`] as of now: a sync first, so that a server behind the
/// ensemble's leader catches up before it answers (the one-shot listing
/// and `revoke` act on it; `--watch` syncs once per session).
pub(crate) async fn participants_now(
    framework: &Framework,
    path: &str,
    max_leases: Option<u32>,
) -> Result<Vec<LockParticipant>, Failure> {
    synced(framework, path, || {
        lock_participants(framework, path, max_leases)
    })
    .await
    .map_err(|err| Failure::zk(format!("cannot read the participants of {path}"), err))
}

/// This host's clock, in milliseconds since the epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Milliseconds since the participant queued: since its node was created
/// (0 if the clocks disagree). For a holder this is not how long it has
/// held: it may have waited most of that time.
fn queued_ms(p: &LockParticipant) -> u64 {
    u64::try_from(now_ms().saturating_sub(p.ctime_ms)).unwrap_or(0)
}

/// When each holder began to hold, where this process saw it happen: a
/// node listed as a waiter, then as a holder, began to hold between the
/// two listings (counted from the second, so at most one notification
/// late). Nobody publishes the instant of a grant, so a node first seen
/// already holding (every holder of a one-shot `locks`) has no known start.
#[derive(Debug, Default)]
struct HoldStarts {
    /// Node path → its role when last listed, and when it was first seen
    /// holding after being seen waiting.
    seen: std::collections::HashMap<String, (Role, Option<i64>)>,
}

impl HoldStarts {
    /// Takes in a listing made now.
    fn update(&mut self, found: &[LockParticipant]) {
        let now = now_ms();
        let mut seen = std::collections::HashMap::with_capacity(found.len());
        for p in found {
            let since = match (self.seen.get(&p.node_path), p.role) {
                (Some((Role::Waiter, _)), Role::Holder) => Some(now),
                (Some((Role::Holder, since)), Role::Holder) => *since,
                _ => None,
            };
            seen.insert(p.node_path.clone(), (p.role, since));
        }
        self.seen = seen;
    }

    /// Takes in what an observer saw: `p` holds since `since` (ms since
    /// the epoch), when known.
    fn known(&mut self, p: &LockParticipant, since: Option<i64>) {
        self.seen.insert(p.node_path.clone(), (p.role, since));
    }

    /// How long `p` has held, when known.
    fn held_ms(&self, p: &LockParticipant) -> Option<u64> {
        let (_, since) = self.seen.get(&p.node_path)?;
        since.map(|since| u64::try_from(now_ms().saturating_sub(since)).unwrap_or(0))
    }
}

/// What `--watch` compares between two listings: each participant's node
/// and role (ages change all the time and are left out).
fn queue_shape(found: &[LockParticipant]) -> Vec<String> {
    found
        .iter()
        .map(|p| format!("{}:{:?}", p.node_path, p.role))
        .collect()
}

/// Lists the participants of `args.path` on stdout; with `--watch`, again
/// after every change among them, until interrupted.
pub(crate) async fn run(framework: &Framework, args: &LocksArgs) -> Result<u8, Failure> {
    if args.all {
        return all(framework, args).await;
    }
    if !args.watch {
        let found = participants_now(framework, &args.path, args.leases).await?;
        out(listing(framework, args, &found, &HoldStarts::default()).await?)?;
        return Ok(0);
    }
    let mut starts = HoldStarts::default();
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|err| Failure::new(OTHER, format!("cannot handle SIGINT: {err}")))?;
    let mut states = std::pin::pin!(framework.state_changes());
    let mut synced = None;
    loop {
        let state = tokio::select! {
            listed = list_and_wait(framework, args, &mut synced, &mut starts) => match listed {
                // Something changed: list again.
                Ok(()) => continue,
                Err(failure) => match broken_connection(framework, &mut states).await {
                    Some(state) => state,
                    None => return Err(failure),
                },
            },
            state = states.next() => match state {
                // The framework was closed.
                None => return Ok(0),
                Some(state) if state.is_connected() => continue,
                Some(state) => state,
            },
            _ = interrupt.recv() => return Ok(0),
        };
        // Disconnected: say so now, then wait for the reconnection (the
        // framework keeps trying) and list again.
        report(args, "disconnected", state)?;
        let mut reported = state;
        loop {
            tokio::select! {
                state = states.next() => match state {
                    None => return Ok(0),
                    Some(state) if state.is_connected() => {
                        report(args, "reconnected", state)?;
                        break;
                    }
                    // The state already read after a failure comes again.
                    Some(state) if state == reported => {}
                    Some(state) => {
                        report(args, "disconnected", state)?;
                        reported = state;
                    }
                },
                _ = interrupt.recv() => return Ok(0),
            }
        }
    }
}

/// How long a failed look at the lock waits for the connection state to say
/// whether the connection broke.
const STATE_GRACE: Duration = Duration::from_secs(1);

/// After a failure while watching: the state if the connection is broken
/// (now, or within [`STATE_GRACE`]), `None` if it is not.
async fn broken_connection(
    framework: &Framework,
    states: &mut (impl Stream<Item = ConnectionState> + Unpin),
) -> Option<ConnectionState> {
    if let Some(state) = framework.state().filter(|state| !state.is_connected()) {
        return Some(state);
    }
    let next = tokio::time::timeout(STATE_GRACE, states.next()).await;
    next.ok().flatten().filter(|state| !state.is_connected())
}

/// Reports a change of the connection: a JSON line on stdout with
/// `--json`, a line on stderr otherwise.
fn report(args: &LocksArgs, event: &str, state: ConnectionState) -> Result<(), Failure> {
    if args.json {
        let line = json!({ "event": event, "state": state.to_string(), "path": args.path });
        return out(line);
    } else if event == "reconnected" {
        eprintln!(
            "zk-curator: connected to ZooKeeper again ({state}); listing {} again",
            args.path
        );
    } else {
        eprintln!(
            "zk-curator: lost the connection to ZooKeeper ({state}); still trying to reconnect"
        );
    }
    Ok(())
}

/// The listing of `found`, as a table or one JSON object, after the one
/// reading of what the path is ([`identify`], shared with `leader` and
/// `revoke`): a lock's participants; an election's count and where to see
/// it (a latch's nodes are no lock's); every family's participants, each
/// by its own rule, where several share the path (they do not see each
/// other); a folder's entries; or what is there that no recipe writes.
/// Never "no holders" for a path where something holds or leads.
async fn listing(
    framework: &Framework,
    args: &LocksArgs,
    found: &[LockParticipant],
    starts: &HoldStarts,
) -> Result<String, Failure> {
    let path = args.path.as_str();
    let kind = identify(framework, path)
        .await
        .map_err(|err| Failure::zk(format!("cannot read {}", shown(path)), err))?;
    let participants = || -> Vec<Value> { found.iter().map(|p| to_json(p, starts)).collect() };
    if args.json {
        let mut listing = json!({ "path": path, "kind": kind.name() });
        match &kind {
            PathKind::Recipe(Family::CuratorLatch) => {
                // The same words as `locks --all` and the dashboard.
                listing["recipe"] = json!(Family::CuratorLatch.describe());
                listing["election_participants"] = json!(found.len());
            }
            PathKind::Recipe(family) => {
                listing["recipe"] = json!(family.describe());
                listing["layout"] = json!(family.layout().as_str());
                listing["participants"] = json!(participants());
            }
            PathKind::Mixed(families) => {
                listing["recipes"] =
                    json!(families.iter().map(|f| f.describe()).collect::<Vec<_>>());
                listing["participants"] = json!(participants());
            }
            PathKind::Folder { inside, more } => {
                listing["inside"] = json!(inside
                    .iter()
                    .map(|(name, kind)| json!({ "name": name, "kind": kind.name(), "what": kind.describe() }))
                    .collect::<Vec<_>>());
                listing["more"] = json!(more);
            }
            PathKind::Unknown { names, count } => {
                listing["names"] = json!(names);
                listing["count"] = json!(count);
            }
            _ => listing["participants"] = json!(participants()),
        }
        return Ok(listing.to_string());
    }
    Ok(match &kind {
        PathKind::Recipe(Family::CuratorLatch) => format!(
            "{path} is an election with {} participant{}, not a lock: \
             `zk-curator leader {path}` shows its leader",
            found.len(),
            if found.len() == 1 { "" } else { "s" },
        ),
        PathKind::Mixed(_) => format!(
            "{path} has {}: each queues and holds by its own rule, so each can have a \
             holder at once\n{}",
            kind.describe(),
            table(found, starts)
        ),
        PathKind::Folder { .. } | PathKind::Unknown { .. } => not_a_lock(path, &kind),
        _ => table(found, starts),
    })
}

/// `locks PATH --all`: every lock and election at or under the path
/// ([`survey`], after one sync), one block each, or one JSON object; with
/// `--watch`, again at every change, from one [`TreeObserver`].
async fn all(framework: &Framework, args: &LocksArgs) -> Result<u8, Failure> {
    let root = args.path.as_str();
    let max_paths = usize::try_from(args.max_paths).unwrap_or(usize::MAX);
    if args.watch {
        return all_watched(framework, args, max_paths).await;
    }
    let surveyed = synced(framework, root, || survey(framework, root, max_paths))
        .await
        .map_err(|err| Failure::zk(format!("cannot read the locks under {}", shown(root)), err))?;
    let found: Vec<Listed> = surveyed
        .found
        .into_iter()
        .map(|found| Listed {
            recipe: recipe_of(&found.kind),
            kind: found.kind.name(),
            path: found.path,
            participants: found.participants,
            unknown: found.unknown,
        })
        .collect();
    let listing = AllListing {
        found,
        paths_read: Some(surveyed.paths_read),
        capped: surveyed.capped,
        starts: HoldStarts::default(),
    };
    listing.print(args)?;
    Ok(0)
}

/// `locks PATH --all --watch`: the observer's view, printed whole at each
/// change while it is current; a line (a JSON event with `--json`) when it
/// is not, until SIGINT.
async fn all_watched(
    framework: &Framework,
    args: &LocksArgs,
    max_paths: usize,
) -> Result<u8, Failure> {
    let root = args.path.as_str();
    let failed = |err| Failure::zk(format!("cannot watch the locks under {}", shown(root)), err);
    let observer = TreeObserver::new(framework.clone(), root, max_paths).map_err(failed)?;
    observer.start().map_err(failed)?;
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|err| Failure::new(OTHER, format!("cannot handle SIGINT: {err}")))?;
    let mut changes = observer.changes();
    let mut printed: Option<bool> = None;
    loop {
        let view = changes.borrow_and_update().clone();
        if view.current {
            let listing = AllListing::of_view(&view);
            listing.print(args)?;
            if !args.json {
                out("")?;
            }
            printed = Some(true);
        } else if printed == Some(true) {
            if args.json {
                out(json!({ "event": "not current", "path": root, "since_ms": view.since_ms }))?;
            } else {
                eprintln!("zk-curator: not connected to ZooKeeper; the listing below is not current until it is shown again");
            }
            printed = Some(false);
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return Ok(0) },
            _ = interrupt.recv() => {
                observer.close().await;
                return Ok(0);
            }
        }
    }
}

/// What a lock or election is, in a few words.
fn recipe_of(kind: &PathKind) -> String {
    match kind {
        PathKind::Recipe(family) => family.describe().to_owned(),
        other => other.describe(),
    }
}

/// One lock or election of `locks --all`.
struct Listed {
    path: String,
    recipe: String,
    kind: &'static str,
    participants: Vec<LockParticipant>,
    /// Its children that no recipe writes.
    unknown: UnknownNodes,
}

/// What `locks --all` prints: the locks and elections found, each with
/// its recipe and participants.
pub(crate) struct AllListing {
    found: Vec<Listed>,
    paths_read: Option<usize>,
    capped: bool,
    starts: HoldStarts,
}

impl AllListing {
    /// What a [`TreeObserver`] sees, path by path in the view's order, each
    /// holder's start as the observer saw it. A path whose nodes no recipe
    /// writes (no family) is `unknown`.
    pub(crate) fn of_view(view: &TreeView) -> Self {
        let mut starts = HoldStarts::default();
        let found = view
            .paths
            .iter()
            .map(|(path, observed)| {
                let kind = match observed.families.as_slice() {
                    [] => PathKind::Unknown {
                        names: Vec::new(),
                        count: 0,
                    },
                    [family] => PathKind::Recipe(*family),
                    families => PathKind::Mixed(families.to_vec()),
                };
                let participants = observed
                    .participants
                    .iter()
                    .map(|o| {
                        starts.known(&o.participant, o.holding_since_ms);
                        o.participant.clone()
                    })
                    .collect();
                Listed {
                    path: path.clone(),
                    recipe: recipe_of(&kind),
                    kind: kind.name(),
                    participants,
                    unknown: observed.unknown.clone(),
                }
            })
            .collect();
        AllListing {
            found,
            paths_read: None,
            capped: view.capped,
            starts,
        }
    }

    /// The listing as `locks ROOT --all --json` prints it: `paths` in the
    /// listing's order, each with its participants in queue order.
    pub(crate) fn json(&self, root: &str) -> Value {
        let paths: Vec<Value> = self
            .found
            .iter()
            .map(|found| {
                json!({
                    "path": found.path,
                    "recipe": found.recipe,
                    "kind": found.kind,
                    "participants": found.participants.iter().map(|p| to_json(p, &self.starts)).collect::<Vec<_>>(),
                    "unknown": { "count": found.unknown.count, "names": found.unknown.names },
                })
            })
            .collect();
        json!({
            "path": root,
            "kind": "all",
            "paths": paths,
            "paths_read": self.paths_read,
            "capped": self.capped,
        })
    }

    fn print(&self, args: &LocksArgs) -> Result<(), Failure> {
        let root = args.path.as_str();
        if args.json {
            return out(self.json(root));
        }
        if self.found.is_empty() {
            out(format!("no locks or elections at or under {root}"))?;
        }
        for (at, found) in self.found.iter().enumerate() {
            if at > 0 {
                out("")?;
            }
            out(format!("{}: {}", found.path, found.recipe))?;
            out(table(&found.participants, &self.starts))?;
            if let Some(line) = unknown_line(&found.unknown) {
                out(line)?;
            }
        }
        if self.capped {
            out(format!(
                "(capped at --max-paths {}: what lies below the rest is not listed)",
                args.max_paths
            ))?;
        }
        Ok(())
    }
}

/// The line that names a lock's children no recipe writes, if any.
fn unknown_line(unknown: &UnknownNodes) -> Option<String> {
    if unknown.count == 0 {
        return None;
    }
    let more = unknown.count.saturating_sub(unknown.names.len());
    let mut named = unknown.names.join(", ");
    if more > 0 {
        named.push_str(&format!(" and {more} more"));
    }
    Some(format!(
        "unknown: {} node{} no recipe writes: {named}",
        unknown.count,
        if unknown.count == 1 { "" } else { "s" }
    ))
}

/// The refusal of `revoke` and `evict` (exit 66) for a path without a
/// participant to act on: missing, empty, a folder, nodes no recipe
/// writes; `None` for a lock or an election. `undone` says what was not
/// done ("written", "removed").
pub(crate) fn nothing_to_act_on(path: &str, kind: &PathKind, undone: &str) -> Option<Failure> {
    let said = match kind {
        PathKind::Missing => format!("{} does not exist", shown(path)),
        PathKind::Empty => format!("{} has no participants", shown(path)),
        PathKind::Folder { .. } | PathKind::Unknown { .. } => not_a_lock(path, kind),
        _ => return None,
    };
    Some(Failure::new(
        NO_PARTICIPANT,
        format!("{said}; nothing was {undone}"),
    ))
}

/// The participant `node` (its name, as `locks` prints it, or its full
/// path) among `found`, the participants of `path`; else exit 66, saying
/// that nothing was `undone`.
pub(crate) fn participant_named<'a>(
    found: &'a [LockParticipant],
    node: &str,
    path: &str,
    undone: &str,
) -> Result<&'a LockParticipant, Failure> {
    found
        .iter()
        .find(|p| p.node_path == node || p.name == node)
        .ok_or_else(|| {
            Failure::new(
                NO_PARTICIPANT,
                format!(
                    "{} is not a participant of {path} (which has {} now; `zk-curator locks \
                     {path}` lists them); nothing was {undone}",
                    shown(node),
                    found.len()
                ),
            )
        })
}

/// What `locks`, `leader` and `revoke` say of a path that is a folder or
/// holds nodes no recipe writes: what is there, and where to look.
pub(crate) fn not_a_lock(path: &str, kind: &PathKind) -> String {
    const NAMED: usize = 20;
    match kind {
        PathKind::Folder { inside, more } => {
            let mut named: Vec<String> = inside
                .iter()
                .take(NAMED)
                .map(|(name, kind)| format!("{name} ({})", kind.describe()))
                .collect();
            let rest = inside.len().saturating_sub(NAMED) + more;
            if rest > 0 {
                named.push(format!("and {rest} more"));
            }
            format!(
                "{path} is a folder, not a lock or an election; inside: {}. \
                 `zk-curator locks {path} --all` lists every lock and election under it, \
                 `zk-curator locks {path}/NAME` (or `leader`) one",
                named.join(", ")
            )
        }
        PathKind::Unknown { names, count } => format!(
            "{path} has {count} node{} that no recipe writes (such as {}): not a lock or an \
             election zk-curator knows",
            if *count == 1 { "" } else { "s" },
            names.join(", ")
        ),
        other => format!("{path} is {}", other.describe()),
    }
}

/// Prints the participants, then waits for a change among them. The first
/// listing on each session comes after a sync (`synced` is the generation
/// of the session last synced): a new session may be on a server behind
/// the one before, and the watch never prints a listing older than one it
/// printed. Later listings on that session are as of its server, which
/// ZooKeeper keeps in order for the session.
async fn list_and_wait(
    framework: &Framework,
    args: &LocksArgs,
    synced: &mut Option<u64>,
    starts: &mut HoldStarts,
) -> Result<(), Failure> {
    let session = framework.current_session().map(|s| s.generation());
    let found = if session.is_some() && session == *synced {
        participants(framework, &args.path, args.leases).await?
    } else {
        let found = participants_now(framework, &args.path, args.leases).await?;
        *synced = session;
        found
    };
    starts.update(&found);
    out(listing(framework, args, &found, starts).await?)?;
    if !args.json {
        out("")?;
    }
    wait_for_change(framework, args, &queue_shape(&found)).await
}

/// Waits until the children of the lock path (or of a semaphore's `leases`
/// and `locks` children) change, or one of them appears or goes.
async fn wait_for_change(
    framework: &Framework,
    args: &LocksArgs,
    printed: &[String],
) -> Result<(), Failure> {
    let path = args.path.as_str();
    let client = framework
        .client()
        .await
        .map_err(|err| Failure::zk("cannot watch the lock", err))?;
    let mut watches = Vec::new();
    for dir in [
        path.to_owned(),
        format!("{path}/{LEASES_CHILD}"),
        format!("{path}/{LOCKS_CHILD}"),
    ] {
        let watcher = match client.list_and_watch_children(&dir).await {
            Ok((_, watcher)) => watcher,
            Err(zk::Error::NoNode) => match client.check_and_watch_stat(&dir).await {
                Ok((_, watcher)) => watcher,
                Err(err) => return Err(Failure::zk("cannot watch the lock", err.into())),
            },
            Err(err) => return Err(Failure::zk("cannot watch the lock", err.into())),
        };
        watches.push(Box::pin(async move { watcher.changed().await }));
    }
    drop(client);
    // Look again now that the watches are set: a change between the last
    // listing and the watches is not slept through.
    let found = participants(framework, path, args.leases).await?;
    if queue_shape(&found) != printed {
        return Ok(());
    }
    futures::future::select_all(watches).await;
    Ok(())
}

/// The identity a holder stored in its node: the framework's holder identity
/// (`host`, `pid`, `label` — the label is `lock --id`), or else the data as
/// text.
pub(crate) fn identity(data: &[u8]) -> Value {
    match serde_json::from_slice::<Value>(data) {
        Ok(Value::Object(map))
            if ["host", "pid", "label"]
                .iter()
                .any(|key| map.contains_key(*key)) =>
        {
            Value::Object(map)
        }
        _ => Value::String(String::from_utf8_lossy(data).into_owned()),
    }
}

/// The holder a node names, as one line of text (escaped: see
/// [`printable`]). A node whose data is a revocation request has lost the
/// identity it had (Curator's protocol writes the request over it): it
/// says so, rather than show the request as a holder.
pub(crate) fn identity_text(data: &[u8]) -> String {
    if data == REVOKE_MESSAGE {
        return "(asked to release: the request took the place of its identity)".to_owned();
    }
    let text = match identity(data) {
        Value::Object(map) => {
            let field = |key: &str| match map.get(key) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            let (label, host, pid) = (field("label"), field("host"), field("pid"));
            let place = format!("{host}:{pid}");
            let who = if label.is_empty() {
                place
            } else {
                format!("{label} ({place})")
            };
            // A bounded hold's published progress (HoldBounds::publish_progress).
            match zk_curator::framework::identity::progress_of(data) {
                Some(at) => {
                    let ago = u64::try_from(now_ms().saturating_sub(at)).unwrap_or(0);
                    format!("{who}, progress {} ago", span(ago))
                }
                None => who,
            }
        }
        Value::String(text) => text,
        other => other.to_string(),
    };
    printable(&text).into_owned()
}

fn session_hex(session: i64) -> String {
    format!("{session:#x}")
}

/// A participant as JSON. One an observer shows pending (not read yet: see
/// `LockParticipant::pending`) has no session, token or identity yet
/// (`null`), and its `queued_ms` counts from when the observer was told of
/// it.
fn to_json(p: &LockParticipant, starts: &HoldStarts) -> Value {
    let read = !p.pending;
    json!({
        "kind": p.kind.as_str(),
        "layout": p.family.layout().as_str(),
        "role": p.role.as_str(),
        "node": p.node_path,
        "name": p.name,
        "sequence": p.sequence,
        "session": read.then(|| session_hex(p.session)),
        "queued_ms": queued_ms(p),
        "held_ms": starts.held_ms(p),
        "fencing_token": read.then_some(p.czxid),
        "identity": if read { identity(&p.data) } else { Value::Null },
        "pending": p.pending,
    })
}

/// A span as a table shows it: whole seconds, or milliseconds under one.
fn span(ms: u64) -> String {
    let span = Duration::from_millis(ms);
    let span = if span.as_secs() > 0 {
        Duration::from_secs(span.as_secs())
    } else {
        span
    };
    humantime::format_duration(span).to_string()
}

/// What a table shows for what is not read yet of a pending participant.
const PENDING: &str = "(reading)";

fn table(found: &[LockParticipant], starts: &HoldStarts) -> String {
    let header = [
        "KIND", "ROLE", "SEQ", "SESSION", "QUEUED", "HELD", "TOKEN", "HOLDER", "NODE",
    ]
    .map(String::from);
    let mut rows = vec![header.to_vec()];
    for p in found {
        let held = match (p.role, starts.held_ms(p)) {
            (Role::Holder, Some(held)) => span(held),
            // A holder seen holding from the start: not known.
            (Role::Holder, None) => "?".to_owned(),
            (Role::Waiter, _) => "-".to_owned(),
        };
        let kind = match p.family.layout() {
            Layout::Kazoo => format!("{} (kazoo)", p.kind.as_str()),
            _ => p.kind.as_str().to_owned(),
        };
        rows.push(vec![
            kind,
            p.role.as_str().to_owned(),
            p.sequence.map(|s| s.to_string()).unwrap_or_default(),
            if p.pending {
                PENDING.to_owned()
            } else {
                session_hex(p.session)
            },
            span(queued_ms(p)),
            held,
            if p.pending {
                PENDING.to_owned()
            } else {
                p.czxid.to_string()
            },
            if p.pending {
                PENDING.to_owned()
            } else {
                identity_text(&p.data)
            },
            p.name.clone(),
        ]);
    }
    let mut out = columns(&rows);
    if found.is_empty() {
        out.push_str("(no holders or waiters)\n");
    }
    out.trim_end().to_owned()
}

/// `rows` (the first is the header) in columns two blanks apart, the last
/// column left unpadded; one line each, ending in a newline. Every cell is
/// [`printable`]: a cell can neither break its line nor drive the
/// terminal.
pub(crate) fn columns(rows: &[Vec<String>]) -> String {
    let count = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = String::new();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|cell| printable(cell).into_owned())
                .collect()
        })
        .collect();
    let widths: Vec<usize> = (0..count)
        .map(|col| {
            rows.iter()
                .filter_map(|r| r.get(col))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in &rows {
        let mut line = String::new();
        for (col, cell) in row.iter().enumerate() {
            if col + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[col]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
