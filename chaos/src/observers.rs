//! The observers: beside each election a [`LeaderObserver`] whose every
//! report the harness records (with the instants it asked and got it, and
//! the [`sequence`] number of that moment: "The observer's contract" of the
//! crate's notes), and the [`TreeObserver`] over the run's root, whose every
//! view is recorded, and which must agree with the truth
//! (`lock_participants` of every path) once the faults are over ("The tree
//! observer's contract", rule 7, checked here at the wind-down).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;
use zk_curator::recipes::layout::{lock_participants, Role};
use zk_curator::recipes::tree::{TreeObserver, TreeView};
use zk_curator::{Framework, LeaderObserver};

use crate::config::{lock_paths, Config, Kind, OBSERVER_BREAK_DELAY};
use crate::place::{now, sequence, since, Target};
use crate::records::{Agreement, Seen, TreeSeen};
use crate::shared::Shared;

/// Records what an election's observer reports, until its framework is
/// closed: each report with the instant the harness began waiting for it
/// and the instant it came. With `ZK_CHAOS_BREAK=observer`, each is held
/// [`OBSERVER_BREAK_DELAY`] and then recorded as if just read.
pub(crate) async fn observe(shared: Arc<Shared>, kind: Kind, observer: LeaderObserver) {
    let mut changes = std::pin::pin!(observer.changes());
    // Bounded: the stream ends at the framework's close, which follows the
    // run; the count only guards against a stream that never ends.
    for _ in 0..1_000_000 {
        let asked = now();
        let Some(what) = changes.next().await else {
            return;
        };
        let mut seen = Seen {
            asked,
            at: now(),
            seq: sequence(),
            what,
        };
        if shared.config.break_observer {
            tokio::time::sleep(OBSERVER_BREAK_DELAY).await;
            seen.asked = now();
            seen.at = seen.asked;
            seen.seq = sequence();
        }
        shared.log(kind, |log| log.observed.push(seen));
    }
}

/// The most paths the tree observer follows: every lock and election of a
/// run, with room to spare.
pub(crate) const TREE_MAX_PATHS: usize = 64;

/// Records every view of the tree observer, until its last handle is
/// dropped: each with the [`sequence`] number of the moment the harness
/// began waiting for it (nothing else runs between taking a view and that
/// moment, so the next view was published after it) and the instant it
/// came. A slow reader sees the latest view, never a backlog.
pub(crate) async fn follow_tree(shared: Arc<Shared>, mut changes: watch::Receiver<Arc<TreeView>>) {
    loop {
        let asked = sequence();
        if changes.changed().await.is_err() {
            return;
        }
        let view = changes.borrow_and_update().clone();
        let holders = if view.current {
            view.paths
                .values()
                .flat_map(|path| &path.participants)
                .filter(|seen| seen.participant.role == Role::Holder)
                .map(|seen| seen.participant.node_path.clone())
                .collect()
        } else {
            Vec::new()
        };
        let seen = TreeSeen {
            asked,
            at: now(),
            current: view.current,
            listings: view.listings,
            events: view.events,
            holders,
        };
        shared.tree.lock().unwrap().views.push(seen);
    }
}

/// Each path's participants: node and role, in queue order.
type Queues = BTreeMap<String, Vec<(String, Role)>>;

/// The truth: `lock_participants` of each path, read through `framework`
/// (each path synced first: on an ensemble its server may lag). `None` if
/// a read failed.
async fn read_truth(framework: &Framework, paths: &[String]) -> Option<Queues> {
    let client = framework.client().await.ok()?;
    let mut truth = BTreeMap::new();
    for path in paths {
        let _ = client.sync(path).await;
        let participants = lock_participants(framework, path, None).await.ok()?;
        let queue = participants
            .into_iter()
            .map(|p| (p.node_path, p.role))
            .collect();
        truth.insert(path.clone(), queue);
    }
    Some(truth)
}

/// What `view` shows of each of `paths` (nothing for a path it does not
/// follow).
fn view_queues(view: &TreeView, paths: &[String]) -> Queues {
    paths
        .iter()
        .map(|path| {
            let queue = view.paths.get(path).map_or_else(Vec::new, |seen| {
                seen.participants
                    .iter()
                    .map(|p| (p.participant.node_path.clone(), p.participant.role))
                    .collect()
            });
            (path.clone(), queue)
        })
        .collect()
}

/// Rule 7 of the tree observer's contract, at the wind-down: the faults
/// are over and every contender has ended its round. Reads the truth
/// through a framework of the harness's own (direct to the server) every
/// 50 ms until the tree observer's view, current, equals it; the truth may
/// still change (a session abandoned during the faults ends by timing out,
/// a lost hold's node is deleted in the background), so the observer has
/// the bound from the later of the check's start and the truth's last
/// change seen.
pub(crate) async fn tree_agreement(
    target: Target<'_>,
    config: &Config,
    root: &str,
    tree: &TreeObserver,
) -> Agreement {
    let quiet = now();
    let bound = config.session_timeout + config.read_lag;
    let checker = Framework::builder()
        .connect_string(target.connect_string())
        .session_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    checker.start().unwrap();
    let _ = checker.block_until_connected(Duration::from_secs(20)).await;
    let paths = lock_paths(root);
    let mut last: Option<Queues> = None;
    let mut changed = quiet;
    let mut agreed = None;
    let mut difference = "the truth could not be read".to_owned();
    loop {
        if let Some(truth) = read_truth(&checker, &paths).await {
            if last.as_ref().is_some_and(|last| *last != truth) {
                changed = now();
            }
            let view = tree.view();
            let shown = view_queues(&view, &paths);
            if view.current && shown == truth {
                agreed = Some(now());
                break;
            }
            difference = if view.current {
                let differing: Vec<String> = paths
                    .iter()
                    .filter(|path| shown.get(*path) != truth.get(*path))
                    .map(|path| {
                        format!(
                            "{path}: shown {:?}, read {:?}",
                            shown.get(path),
                            truth.get(path)
                        )
                    })
                    .collect();
                differing.join("; ")
            } else {
                "the view was not current".to_owned()
            };
            last = Some(truth);
        }
        if now() > quiet.max(changed) + bound || since(quiet) > Duration::from_secs(60) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    checker.close().await;
    Agreement {
        quiet,
        changed,
        agreed,
        bound,
        difference,
        ended: now(),
    }
}
