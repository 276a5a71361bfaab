//! Real parts, one root (issue 45): holders and waiters of zk-curator,
//! Apache Curator (the interop harness's Java program) and kazoo (its
//! Python participant) under ONE root at once, and the tree observer's view
//! agrees with `zk-curator locks PATH --json` and `zk-curator leader PATH
//! --json` of each path, with `zk-curator locks ROOT --all --json` and
//! with the dashboard's `/api/snapshot`, queue order included; again after
//! a holder of each library lets go.
//!
//! Under the root:
//! * `locks/rust`: a zk-curator mutex holder, a zk-curator waiter, a
//!   Curator waiter, a zk-curator waiter (Curator's layout, one queue);
//! * `locks/curator`: a Curator holder, a zk-curator waiter;
//! * `locks/kazoo`: a kazoo `Lock` holder, a zk-curator waiter in kazoo's
//!   layout, a kazoo waiter;
//! * `locks/catalog`: a zk-curator reader holding, a Curator writer and a
//!   zk-curator reader waiting behind it;
//! * `pools/db`: a semaphore of two leases: a zk-curator holder, a Curator
//!   holder, a zk-curator acquirer whose lease node waits, a Curator
//!   acquirer queued on the semaphore's internal mutex;
//! * `elections/e`: two zk-curator leader latches;
//! * `elections/k`: a kazoo `Election` leading, a zk-curator latch in
//!   kazoo's layout waiting.
//!
//! Who is where is known independently of both readers: each participant's
//! node is seen on the server (the one new child of its path) before the
//! next starts, so the queue is the order of starting. The observer's view
//! must reach exactly that (one observer following from an empty root, one
//! started cold on the full tree); then every listing must equal the view:
//! nodes, roles, sessions, kinds and layouts, in queue order.
//! On the embedded server by default, on a real ZooKeeper with
//! `ZK_TEST_SERVER=real`; needs Curator and kazoo ([`Prerequisite`]: a
//! missing one fails the test unless `ZK_SKIP_MISSING` asks to skip).
//!
//! [`Prerequisite`]: zk_curator_testing::backend::Prerequisite
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    children_of, curator_interop, framework, kazoo_available, kazoo_script, raw, run, server, text,
    Dashboard,
};
use serde_json::Value;
use tokio::task::JoinHandle;
use zk_curator::framework::zk;
use zk_curator::recipes::layout::Layout;
use zk_curator::recipes::tree::{TreeObserver, TreeView};
use zk_curator::{
    InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2, LeaderElection,
    LeaderLatch,
};
use zk_curator_testing::curator::JavaProgram;
use zk_curator_testing::peer::Peer;

const TEST_LIMIT: Duration = Duration::from_secs(300);
/// One wait for a condition (a node on the server, a view, a grant).
const WAIT_LIMIT: Duration = Duration::from_secs(30);
/// A JVM or a Python program starting and connecting, on a loaded machine.
const PEER_LIMIT: Duration = Duration::from_secs(90);

/// One participant as a listing shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Row {
    node: String,
    role: String,
    session: String,
    kind: String,
    layout: String,
}

/// Paths, each with its participants in queue order.
type Listing = BTreeMap<String, Vec<Row>>;

/// What is known of each path: its participants' nodes and roles, in
/// queue order.
type Expected = BTreeMap<String, Vec<(String, &'static str)>>;

fn view_listing(view: &TreeView) -> Listing {
    view.paths
        .iter()
        .map(|(path, observed)| {
            let rows = observed
                .participants
                .iter()
                .map(|o| {
                    let p = &o.participant;
                    Row {
                        node: p.node_path.clone(),
                        role: p.role.as_str().to_owned(),
                        session: format!("{:#x}", p.session),
                        kind: p.kind.as_str().to_owned(),
                        layout: p.family.layout().as_str().to_owned(),
                    }
                })
                .collect();
            (path.clone(), rows)
        })
        .collect()
}

fn json_rows(participants: &Value) -> Vec<Row> {
    let field = |p: &Value, key: &str| p[key].as_str().unwrap_or_default().to_owned();
    participants
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Row {
            node: field(p, "node"),
            role: field(p, "role"),
            session: field(p, "session"),
            kind: field(p, "kind"),
            layout: field(p, "layout"),
        })
        .collect()
}

/// Nodes and roles only.
fn shape(listing: &Listing) -> BTreeMap<String, Vec<(String, String)>> {
    listing
        .iter()
        .map(|(path, rows)| {
            let pairs = rows
                .iter()
                .map(|r| (r.node.clone(), r.role.clone()))
                .collect();
            (path.clone(), pairs)
        })
        .collect()
}

fn expected_shape(expected: &Expected) -> BTreeMap<String, Vec<(String, String)>> {
    expected
        .iter()
        .map(|(path, pairs)| {
            let pairs = pairs
                .iter()
                .map(|(node, role)| (node.clone(), (*role).to_owned()))
                .collect();
            (path.clone(), pairs)
        })
        .collect()
}

/// `zk-curator ARGS --json`, parsed; it must succeed.
async fn report(args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let (output, _) = run(&args).await;
    assert!(
        output.status.success(),
        "zk-curator {args:?} failed: {}",
        text(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Waits until `observer`'s view is current and shows exactly `expected`
/// (every path, nodes and roles in order), every participant read (one
/// that came on a busy tree is shown pending until its node is read, and
/// the listings compared with the view carry what the read gives).
async fn view_reaches(observer: &TreeObserver, expected: &Expected, what: &str) -> Arc<TreeView> {
    let wanted = expected_shape(expected);
    let mut changes = observer.changes();
    let read = |view: &TreeView| {
        view.paths
            .values()
            .flat_map(|p| &p.participants)
            .all(|o| !o.participant.pending)
    };
    let seen = tokio::time::timeout(WAIT_LIMIT, async {
        loop {
            let view = changes.borrow_and_update().clone();
            if view.current && shape(&view_listing(&view)) == wanted && read(&view) {
                return view;
            }
            changes.changed().await.unwrap();
        }
    })
    .await;
    match seen {
        Ok(view) => view,
        Err(_) => {
            let shows = shape(&view_listing(&observer.view()));
            let paths: std::collections::BTreeSet<&String> =
                wanted.keys().chain(shows.keys()).collect();
            let differ: Vec<String> = paths
                .into_iter()
                .filter(|path| wanted.get(*path) != shows.get(*path))
                .map(|path| {
                    format!(
                        "{path}:\n  wanted {:#?}\n  shown {:#?}",
                        wanted.get(path),
                        shows.get(path)
                    )
                })
                .collect();
            panic!(
                "{what}: the observer never showed what is there; where it differs:\n{}",
                differ.join("\n")
            )
        }
    }
}

/// Every listing of the command agrees with the view: `locks PATH --json`
/// (or, for a latch, its count) and `leader PATH --json` of each path in
/// it (`elections`), `locks ROOT --all --json`, and the dashboard's
/// `/api/snapshot`.
async fn listings_agree(
    root: &str,
    view: &TreeView,
    elections: &[&str],
    dashboard: &Dashboard,
    what: &str,
) {
    let seen = view_listing(view);
    // What each path is, by `locks PATH --json`: its kind and recipe.
    let mut what_each = BTreeMap::new();
    for (path, rows) in &seen {
        let listed = report(&["locks", path]).await;
        what_each.insert(path.clone(), recipe_of(&listed));
        if listed["kind"] == "election" {
            assert_eq!(
                listed["election_participants"],
                rows.len(),
                "{what}: `locks {path}` counts otherwise: {listed:#}"
            );
        } else {
            assert_eq!(
                &json_rows(&listed["participants"]),
                rows,
                "{what}: `locks {path}` disagrees with the view"
            );
        }
        if elections.contains(&path.as_str()) {
            let led = report(&["leader", path]).await;
            let pairs: Vec<(String, String)> = led["participants"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    let role = match p["role"].as_str().unwrap() {
                        "leader" => "holder",
                        other => other,
                    };
                    (p["node"].as_str().unwrap().to_owned(), role.to_owned())
                })
                .collect();
            let shown: Vec<(String, String)> = rows
                .iter()
                .map(|r| (r.node.clone(), r.role.clone()))
                .collect();
            assert_eq!(pairs, shown, "{what}: `leader {path}` disagrees: {led:#}");
            assert_eq!(led["leader"]["node"], rows[0].node, "{what}: {led:#}");
        }
    }
    let all = report(&["locks", root, "--all"]).await;
    assert_eq!(
        paths_listed(&all, what),
        seen,
        "{what}: `locks {root} --all` disagrees with the view"
    );
    assert_eq!(all["capped"], false);
    assert_eq!(
        recipes_listed(&all),
        what_each,
        "{what}: `locks {root} --all` names a path otherwise than `locks PATH`"
    );
    // The dashboard's snapshot (its own observer, started cold), once it
    // is current and has caught up.
    let (_, snapshot) = dashboard
        .snapshot_when(|v| paths_listed(v, what) == seen)
        .await;
    assert_eq!(snapshot["capped"], false, "{what}: {snapshot:#}");
    assert_eq!(
        recipes_listed(&snapshot),
        what_each,
        "{what}: the dashboard names a path otherwise than `locks PATH`"
    );
}

/// A path's kind (`lock`, `election`) and its recipe, as a listing names
/// it (the same words in `locks PATH`, `locks --all` and the dashboard).
fn recipe_of(listed: &Value) -> (String, String) {
    let field = |key: &str| listed[key].as_str().unwrap_or_default().to_owned();
    let kind = field("kind");
    (kind, field("recipe"))
}

/// Each path's kind and recipe in `locks ROOT --all --json` or the
/// dashboard's snapshot.
fn recipes_listed(listing: &Value) -> BTreeMap<String, (String, String)> {
    listing["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|found| (found["path"].as_str().unwrap().to_owned(), recipe_of(found)))
        .collect()
}

/// The `paths` of `locks ROOT --all --json` or of the dashboard's
/// snapshot, each path once.
fn paths_listed(listing: &Value, what: &str) -> Listing {
    let mut listed = Listing::new();
    for found in listing["paths"].as_array().unwrap() {
        let path = found["path"].as_str().unwrap().to_owned();
        let rows = json_rows(&found["participants"]);
        assert!(
            listed.insert(path.clone(), rows).is_none(),
            "{what}: {path} twice in {listing:#}"
        );
    }
    listed
}

/// Waits until `dir` has exactly one child not in `known` (a participant
/// that just queued), adds it there and returns its full path.
async fn new_node(client: &zk::Client, dir: &str, known: &mut Vec<String>) -> String {
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        let children = children_of(client, dir).await;
        let fresh: Vec<&String> = children.iter().filter(|c| !known.contains(c)).collect();
        assert!(fresh.len() <= 1, "{dir}: more than one new node: {fresh:?}");
        if let [name] = fresh.as_slice() {
            known.push((*name).clone());
            return format!("{dir}/{name}");
        }
        assert!(
            Instant::now() < deadline,
            "nothing new queued under {dir}: {children:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A pending acquire that must still be pending.
fn pending<T>(task: &JoinHandle<T>, what: &str) {
    assert!(!task.is_finished(), "{what} got in out of turn");
}

/// Awaits a pending acquire that must now be granted.
async fn granted<T>(task: JoinHandle<zk_curator::Result<T>>, what: &str) -> T {
    tokio::time::timeout(WAIT_LIMIT, task)
        .await
        .unwrap_or_else(|_| panic!("{what} was never granted"))
        .unwrap()
        .unwrap()
}

/// `Interop CONNECT MODE PATH 1 MARKERS LEASES`: a Curator participant
/// in a `hold` mode, once connected (it acquires next).
async fn curator(java: &JavaProgram, mode: &str, path: &str, markers: &str, leases: u32) -> Peer {
    let connect = server().connect_string();
    let leases = leases.to_string();
    Peer::java(
        java,
        "Interop",
        &[&connect, mode, path, "1", markers, &leases],
        PEER_LIMIT,
    )
    .await
}

/// A kazoo participant in `mode` (`hold`, `lead`), once connected.
async fn kazoo(mode: &str, path: &str, markers: &std::path::Path) -> Peer {
    let connect = server().connect_string();
    Peer::kazoo(
        &kazoo_script(),
        &connect,
        mode,
        path,
        1,
        markers,
        PEER_LIMIT,
    )
    .await
}

/// Closes a peer's standard input: it lets go of what it holds, and must
/// end with 0.
async fn let_go(peer: Peer) {
    let (status, said) = peer.finish(PEER_LIMIT).await;
    assert_eq!(status, Some(0), "a peer failed; it said:\n{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_libraries_under_one_root_and_every_listing_agrees() {
    let Some(java) = curator_interop() else {
        return;
    };
    if !kazoo_available() {
        return;
    }
    let started = Instant::now();
    tokio::time::timeout(TEST_LIMIT, async {
        let root = format!("/cli-tree-mixed/run-{}", std::process::id());
        let rust = format!("{root}/locks/rust");
        let cur = format!("{root}/locks/curator");
        let kaz = format!("{root}/locks/kazoo");
        let catalog = format!("{root}/locks/catalog");
        let pool = format!("{root}/pools/db");
        let (pool_leases, pool_locks) = (format!("{pool}/leases"), format!("{pool}/locks"));
        let latch = format!("{root}/elections/e");
        let election = format!("{root}/elections/k");
        let elections = [latch.as_str(), election.as_str()];
        let markers = tempfile::tempdir().unwrap();
        let markers_arg = markers.path().to_str().unwrap().to_owned();
        let client = raw().await;
        // Each path's children seen so far: a participant's node is the
        // one new child when it queues.
        let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
        macro_rules! next_node {
            ($path:expr) => {
                new_node(&client, $path, seen.entry($path.to_owned()).or_default()).await
            };
        }

        // One observer follows from the start, on a framework of its own.
        let observer_fw = framework().await;
        let live = TreeObserver::new(observer_fw.clone(), &root, 1000).unwrap();
        live.start().unwrap();

        // locks/rust: zk-curator holder, zk-curator waiter, Curator waiter,
        // zk-curator waiter.
        let rust_a = InterProcessMutex::new(framework().await, &rust)
            .unwrap()
            .lock()
            .await
            .unwrap();
        let n_a = next_node!(&rust);
        assert_eq!(n_a, rust_a.node().path());
        let rust_b = {
            let mutex = InterProcessMutex::new(framework().await, &rust).unwrap();
            tokio::spawn(async move { mutex.lock().await })
        };
        let n_b = next_node!(&rust);
        let mut rust_c = curator(java, "hold", &rust, &markers_arg, 1).await;
        let n_c = next_node!(&rust);
        let rust_d = {
            let mutex = InterProcessMutex::new(framework().await, &rust).unwrap();
            tokio::spawn(async move { mutex.lock().await })
        };
        let n_d = next_node!(&rust);

        // locks/curator: Curator holder, zk-curator waiter.
        let mut cur_e = curator(java, "hold", &cur, &markers_arg, 1).await;
        let held_e = cur_e
            .line(PEER_LIMIT, |l| {
                l.strip_prefix("held node=").map(str::to_owned)
            })
            .await;
        let n_e = next_node!(&cur);
        assert_eq!(held_e, n_e);
        let cur_f = {
            let mutex = InterProcessMutex::new(framework().await, &cur).unwrap();
            tokio::spawn(async move { mutex.lock().await })
        };
        let n_f = next_node!(&cur);

        // locks/kazoo: kazoo holder, zk-curator waiter in kazoo's layout,
        // kazoo waiter.
        let mut kaz_g = kazoo("hold", &kaz, markers.path()).await;
        kaz_g.wait_for("held", PEER_LIMIT).await;
        let n_g = next_node!(&kaz);
        let kaz_h = {
            let mutex =
                InterProcessMutex::with_layout(framework().await, &kaz, Layout::Kazoo).unwrap();
            tokio::spawn(async move { mutex.lock().await })
        };
        let n_h = next_node!(&kaz);
        let mut kaz_i = kazoo("hold", &kaz, markers.path()).await;
        let n_i = next_node!(&kaz);

        // locks/catalog: zk-curator reader holding, Curator writer waiting,
        // zk-curator reader waiting behind the writer.
        let cat_j = InterProcessReadWriteLock::new(framework().await, &catalog)
            .unwrap()
            .read_lock()
            .lock()
            .await
            .unwrap();
        let n_j = next_node!(&catalog);
        let mut cat_k = curator(java, "hold-write", &catalog, &markers_arg, 1).await;
        let n_k = next_node!(&catalog);
        let cat_l = {
            let rw = InterProcessReadWriteLock::new(framework().await, &catalog).unwrap();
            tokio::spawn(async move { rw.read_lock().lock().await })
        };
        let n_l = next_node!(&catalog);

        // pools/db: a semaphore of two leases: a zk-curator holder, a
        // Curator holder, a zk-curator acquirer that holds the internal
        // mutex while its lease node waits, and a Curator acquirer queued
        // on the internal mutex.
        let sem_a = InterProcessSemaphoreV2::new(framework().await, &pool, 2).unwrap();
        let pool_a = sem_a.acquire().await.unwrap();
        let n_pa = next_node!(&pool_leases);
        assert_eq!(n_pa, pool_a.node().path());
        let mut pool_b = curator(java, "hold-lease", &pool, &markers_arg, 2).await;
        pool_b.wait_for("held", PEER_LIMIT).await;
        let n_pb = next_node!(&pool_leases);
        let pool_c = {
            let semaphore = InterProcessSemaphoreV2::new(framework().await, &pool, 2).unwrap();
            tokio::spawn(async move { semaphore.acquire().await })
        };
        let n_pc = next_node!(&pool_leases);
        // The internal queue as it is now (the third acquirer's node heads
        // it), then the fourth's node behind it.
        let queue_now = client.list_children(&pool_locks).await.unwrap();
        seen.insert(pool_locks.clone(), queue_now);
        let mut pool_d = curator(java, "hold-lease", &pool, &markers_arg, 2).await;
        let n_pd = next_node!(&pool_locks);

        // elections/e: two zk-curator latches.
        let latch_m = LeaderLatch::new(framework().await, &latch, "m").unwrap();
        latch_m.start().unwrap();
        let term_m = tokio::time::timeout(WAIT_LIMIT, latch_m.await_leadership())
            .await
            .unwrap()
            .unwrap();
        let n_m = next_node!(&latch);
        assert_eq!(n_m, term_m.node().path());
        let latch_n = LeaderLatch::new(framework().await, &latch, "n").unwrap();
        latch_n.start().unwrap();
        let n_n = next_node!(&latch);

        // elections/k: kazoo's Election leading, a zk-curator latch in
        // kazoo's layout waiting.
        let mut elect_o = kazoo("lead", &election, markers.path()).await;
        elect_o.wait_for("led", PEER_LIMIT).await;
        let n_o = next_node!(&election);
        let latch_p =
            LeaderLatch::with_layout(framework().await, &election, "p", Layout::Kazoo).unwrap();
        latch_p.start().unwrap();
        let n_p = next_node!(&election);

        for (task, what) in [(&rust_b, "rust b"), (&rust_d, "rust d")] {
            pending(task, what);
        }
        pending(&cur_f, "curator f");
        pending(&kaz_h, "kazoo h");
        pending(&cat_l, "catalog l");
        pending(&pool_c, "pool c");
        assert!(!latch_n.has_leadership() && !latch_p.has_leadership());

        let (h, w) = ("holder", "waiter");
        let mut expected: Expected = BTreeMap::new();
        expected.insert(
            rust.clone(),
            vec![(n_a, h), (n_b, w), (n_c.clone(), w), (n_d.clone(), w)],
        );
        expected.insert(cur.clone(), vec![(n_e, h), (n_f.clone(), w)]);
        expected.insert(
            kaz.clone(),
            vec![(n_g, h), (n_h.clone(), w), (n_i.clone(), w)],
        );
        expected.insert(
            catalog.clone(),
            vec![(n_j, h), (n_k.clone(), w), (n_l.clone(), w)],
        );
        expected.insert(
            pool.clone(),
            vec![(n_pa, h), (n_pb.clone(), h), (n_pc.clone(), w), (n_pd, w)],
        );
        expected.insert(latch.clone(), vec![(n_m, h), (n_n.clone(), w)]);
        expected.insert(election.clone(), vec![(n_o, h), (n_p.clone(), w)]);

        let view = view_reaches(&live, &expected, "all queued (live)").await;
        let dashboard = Dashboard::start(&root, &[]).await;
        listings_agree(&root, &view, &elections, &dashboard, "all queued").await;
        // A second observer, started cold on the full tree, sees the same.
        let cold_fw = framework().await;
        let cold = TreeObserver::new(cold_fw.clone(), &root, 1000).unwrap();
        cold.start().unwrap();
        let cold_view = view_reaches(&cold, &expected, "all queued (cold)").await;
        assert_eq!(view_listing(&cold_view), view_listing(&view));
        let first_check = started.elapsed();

        // A holder of each library lets go.
        rust_a.release().await.unwrap();
        let rust_b = granted(rust_b, "rust b").await;
        let_go(cur_e).await;
        let cur_f = granted(cur_f, "curator f").await;
        let_go(kaz_g).await;
        let kaz_h = granted(kaz_h, "kazoo h").await;
        cat_j.release().await.unwrap();
        cat_k.wait_for("held", WAIT_LIMIT).await;
        pool_a.release().await.unwrap();
        let pool_c = granted(pool_c, "pool c").await;
        assert_eq!(pool_c.node().path(), n_pc);
        // The fourth now holds the internal mutex; its lease node waits.
        let n_pd = next_node!(&pool_leases);
        latch_m.close().await.unwrap();
        tokio::time::timeout(WAIT_LIMIT, latch_n.await_leadership())
            .await
            .unwrap()
            .unwrap();
        let_go(elect_o).await;
        tokio::time::timeout(WAIT_LIMIT, latch_p.await_leadership())
            .await
            .unwrap()
            .unwrap();
        pending(&rust_d, "rust d");
        pending(&cat_l, "catalog l");

        let n_b = rust_b.node().path().to_owned();
        assert_eq!(kaz_h.node().path(), n_h);
        assert_eq!(cur_f.node().path(), n_f);
        expected.insert(rust.clone(), vec![(n_b, h), (n_c, w), (n_d, w)]);
        expected.insert(cur.clone(), vec![(n_f, h)]);
        expected.insert(kaz.clone(), vec![(n_h, h), (n_i, w)]);
        expected.insert(catalog.clone(), vec![(n_k, h), (n_l, w)]);
        expected.insert(pool.clone(), vec![(n_pb, h), (n_pc.clone(), h), (n_pd, w)]);
        expected.insert(latch.clone(), vec![(n_n, h)]);
        expected.insert(election.clone(), vec![(n_p, h)]);
        let view = view_reaches(&live, &expected, "after the releases (live)").await;
        listings_agree(&root, &view, &elections, &dashboard, "after the releases").await;
        let cold_view = view_reaches(&cold, &expected, "after the releases (cold)").await;
        assert_eq!(view_listing(&cold_view), view_listing(&view));

        // Everyone lets go, in queue order; each peer ends with 0.
        rust_b.release().await.unwrap();
        rust_c
            .line(WAIT_LIMIT, |l| {
                l.strip_prefix("held node=").map(str::to_owned)
            })
            .await;
        let_go(rust_c).await;
        granted(rust_d, "rust d").await.release().await.unwrap();
        cur_f.release().await.unwrap();
        kaz_h.release().await.unwrap();
        kaz_i.wait_for("held", WAIT_LIMIT).await;
        let_go(kaz_i).await;
        let_go(cat_k).await;
        granted(cat_l, "catalog l").await.release().await.unwrap();
        let_go(pool_b).await;
        pool_d.wait_for("held", WAIT_LIMIT).await;
        let_go(pool_d).await;
        pool_c.release().await.unwrap();
        latch_n.close().await.unwrap();
        latch_p.close().await.unwrap();
        live.close().await;
        cold.close().await;
        dashboard.stop().await;
        eprintln!(
            "tree_mixed: first agreement after {first_check:?}, whole run {:?}",
            started.elapsed()
        );
    })
    .await
    .expect("test timed out");
}
