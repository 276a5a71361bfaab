//! The shared read nodes under real concurrency: reader tasks on a
//! multi-threaded runtime arrive, give up and release while another task
//! plays the session (grants, fails, loses, and lets aborts take effect),
//! so that a member leaving races the grant of its node for real. The
//! outcome is checked once everyone is done: every node ended exactly once
//! and nothing was left behind.

use std::time::Duration;

use super::*;

/// A deterministic generator, one per task (fastrand's, seeded).
struct Rng(fastrand::Rng);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(fastrand::Rng::with_seed(seed))
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0.u64(..n)
    }
}

async fn yields(n: u64) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

/// Plays the session until `done`: settles the nodes whose acquire runs
/// (an aborted one is withdrawn, or sometimes granted anyway, as when the
/// grant beats the abort) and now and then loses a grant.
async fn session(stand: Stand, done: Arc<AtomicBool>, seed: u64) {
    let mut rng = Rng::new(seed);
    while !done.load(Ordering::SeqCst) {
        let running: Vec<(usize, usize)> = stand
            .nodes()
            .iter()
            .enumerate()
            .filter(|(_, node)| node.outcome == Outcome::Waiting)
            .map(|(n, node)| (n, node.aborts))
            .collect();
        for (n, aborts) in running {
            match (aborts, rng.below(8)) {
                (1, 0) => stand.grant(n),
                (1, _) => stand.withdraw(n),
                (_, 0) => stand.fail(n),
                (_, 1..=3) => stand.grant(n),
                _ => {}
            }
        }
        let granted = stand
            .nodes()
            .iter()
            .rposition(|node| node.outcome == Outcome::Granted);
        if let Some(n) = granted.filter(|_| rng.below(16) == 0) {
            stand.lose(n);
        }
        yields(1 + rng.below(3)).await;
    }
}

/// A reader task: acquires, sometimes giving up after a few yields, and
/// holds for a few yields before releasing (or only dropping) its hold.
async fn reader(
    shared: Arc<SharedNodes<Stand>>,
    stand: Stand,
    keys: [ShareKey; 2],
    seed: u64,
    rounds: usize,
) -> (usize, usize) {
    let mut rng = Rng::new(seed);
    let (mut held, mut gave_up) = (0, 0);
    for _ in 0..rounds {
        let key = keys[rng.below(2) as usize].clone();
        let patience = rng.below(12);
        let acquired = tokio::select! {
            acquired = shared.acquire(&stand, key) => acquired,
            () = yields(patience) => {
                gave_up += 1;
                continue;
            }
        };
        let Ok(hold) = acquired else { continue };
        held += 1;
        yields(rng.below(4)).await;
        if rng.below(2) == 0 {
            hold.release();
        }
        drop(hold);
    }
    (held, gave_up)
}

#[test]
fn racing_members_and_outcomes_leave_no_node_behind() {
    const READERS: u64 = 8;
    const ROUNDS: usize = 1500;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a runtime");
    let stand = Stand::default();
    let shared = Arc::new(SharedNodes::<Stand>::default());
    let keys = [key("/x", "read", b""), key("/y", "read", b"")];
    let done = Arc::new(AtomicBool::new(false));
    let (held, gave_up) = runtime.block_on(async {
        let session = tokio::spawn(session(stand.clone(), done.clone(), 0x5eed));
        let readers: Vec<_> = (0..READERS)
            .map(|i| {
                let seed = 0x9e37_79b9_7f4a_7c15 ^ (i + 1);
                tokio::spawn(reader(
                    shared.clone(),
                    stand.clone(),
                    keys.clone(),
                    seed,
                    ROUNDS,
                ))
            })
            .collect();
        let all =
            tokio::time::timeout(Duration::from_secs(120), futures::future::join_all(readers))
                .await
                .expect("readers still waited after two minutes");
        done.store(true, Ordering::SeqCst);
        assert!(session.await.is_ok());
        all.into_iter()
            .map(|outcome| outcome.expect("a reader panicked"))
            .fold((0, 0), |(h, g), (held, gave_up)| (h + held, g + gave_up))
    });
    drop(runtime);
    // Every reader is gone: the aborts still pending take effect.
    let aborted: Vec<usize> = stand
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, node)| node.outcome == Outcome::Waiting && node.aborts == 1)
        .map(|(n, _)| n)
        .collect();
    for n in aborted {
        stand.withdraw(n);
    }
    assert!(shared.open.is_empty(), "a generation stayed open");
    assert_eq!(stand.live_holds(), 0, "a hold was never dropped");
    let nodes = stand.nodes();
    for (n, node) in nodes.iter().enumerate() {
        assert!(
            node.generation.upgrade().is_none(),
            "the generation of node {n} was never freed"
        );
        assert!(
            node.aborts <= 1,
            "node {n} was aborted {} times",
            node.aborts
        );
        let ended = node.outcome.ended_once(node.deletes);
        assert!(
            ended,
            "node {n} ({:?}, aborted {}, deleted {} times) did not end exactly once",
            node.outcome, node.aborts, node.deletes
        );
    }
    let granted = nodes
        .iter()
        .filter(|node| node.outcome == Outcome::Granted)
        .count();
    eprintln!(
        "{} nodes ({granted} granted) for {held} holds; {gave_up} readers gave up",
        nodes.len()
    );
    assert!(held > 0 && gave_up > 0 && granted < held);
}
