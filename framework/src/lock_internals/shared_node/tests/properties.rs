//! Property tests of the shared read nodes: random sequences of readers
//! arriving, polled and cancelled, nodes granted, failed, withdrawn and
//! lost, and holds released, over several share keys, checked after every
//! step against a model of the generations.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

/// The share keys of the tests: two of one path (the second with other
/// node data, so another generation) and one of another path.
fn keys() -> [ShareKey; 3] {
    [
        key("/a", "read", b""),
        key("/a", "read", b"other data"),
        key("/b", "read", b""),
    ]
}

const PATHS: [&str; 2] = ["/a", "/b"];

/// One step. Indexes are taken modulo what exists at that step (and a step
/// with nothing to act on does nothing), so every sequence, and every
/// shrunk one, can run.
#[derive(Clone, Debug)]
enum Op {
    /// A reader starts to acquire with key `key` (polled once).
    Join { key: usize },
    /// A waiting reader is polled again.
    Poll { waiter: usize },
    /// A waiting reader is cancelled (its acquire dropped).
    Cancel { waiter: usize },
    /// A node whose acquire still runs is granted.
    Grant { node: usize },
    /// A node whose acquire still runs fails.
    Fail { node: usize },
    /// The abort of a node whose last waiter left takes effect.
    Withdraw { node: usize },
    /// A granted node's grant is lost.
    Lose { node: usize },
    /// A reader gives its hold up: released (or only dropped).
    Release { holder: usize, explicit: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..3usize).prop_map(|key| Op::Join { key }),
        6 => (0..16usize).prop_map(|waiter| Op::Poll { waiter }),
        2 => (0..16usize).prop_map(|waiter| Op::Cancel { waiter }),
        3 => (0..8usize).prop_map(|node| Op::Grant { node }),
        1 => (0..8usize).prop_map(|node| Op::Fail { node }),
        1 => (0..8usize).prop_map(|node| Op::Withdraw { node }),
        1 => (0..8usize).prop_map(|node| Op::Lose { node }),
        3 => (0..16usize, any::<bool>())
            .prop_map(|(holder, explicit)| Op::Release { holder, explicit }),
    ]
}

/// Where a node's generation stands, as the model sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Its acquire runs and it has members.
    Waiting,
    /// Its last waiter left and its acquire was aborted; the abort has not
    /// taken effect yet (the grant may still come first).
    Aborted,
    Granted,
    Failed,
    Withdrawn,
}

#[derive(Debug)]
struct ModelNode {
    key: usize,
    phase: Phase,
    /// Members that have not left (waiting, or holding).
    members: usize,
    /// Whether its acquire was aborted.
    aborted: bool,
    lost: bool,
    /// Holds made over it: the acquire's own, then one per further claim.
    holds: usize,
    /// Whether the acquire's own hold is still with the generation.
    unclaimed: bool,
}

#[derive(Debug, Default)]
struct Model {
    nodes: Vec<ModelNode>,
    /// The waiting generation of each key, as its node.
    open: BTreeMap<usize, usize>,
}

impl Model {
    /// A reader with `key` joins the open generation, or starts one.
    fn join(&mut self, key: usize) -> usize {
        if let Some(&n) = self.open.get(&key) {
            self.nodes[n].members += 1;
            return n;
        }
        self.nodes.push(ModelNode {
            key,
            phase: Phase::Waiting,
            members: 1,
            aborted: false,
            lost: false,
            holds: 0,
            unclaimed: false,
        });
        let n = self.nodes.len() - 1;
        self.open.insert(key, n);
        n
    }

    /// A member of node `n` leaves (cancelled, released, or turned away).
    fn leave(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        node.members -= 1;
        if node.members > 0 {
            return;
        }
        node.unclaimed = false;
        if node.phase == Phase::Waiting {
            node.phase = Phase::Aborted;
            node.aborted = true;
            let key = node.key;
            self.close(key, n);
        }
    }

    /// Node `n`'s generation takes no more members.
    fn close(&mut self, key: usize, n: usize) {
        if self.open.get(&key) == Some(&n) {
            self.open.remove(&key);
        }
    }

    /// Node `n`'s acquire returned.
    fn settle(&mut self, n: usize, phase: Phase) {
        let key = self.nodes[n].key;
        self.close(key, n);
        let node = &mut self.nodes[n];
        node.phase = phase;
        if phase == Phase::Granted {
            node.holds = 1;
            // With no member left, the acquire's hold is released at once.
            node.unclaimed = node.members > 0;
        }
    }

    /// The nodes in `phases`, in order.
    fn in_phase(&self, phases: &[Phase]) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&n| phases.contains(&self.nodes[n].phase))
            .collect()
    }
}

struct Waiter {
    key: usize,
    node: usize,
    wait: Pending,
}

struct Holder {
    node: usize,
    hold: StandHold,
}

struct Run {
    keys: [ShareKey; 3],
    stand: Stand,
    shared: Arc<SharedNodes<Stand>>,
    model: Model,
    waiters: Vec<Waiter>,
    holders: Vec<Holder>,
    /// How often each interesting case came up (see
    /// `the_generated_sequences_reach_every_case`).
    events: BTreeMap<&'static str, usize>,
}

impl Run {
    fn new() -> Run {
        Run {
            keys: keys(),
            stand: Stand::default(),
            shared: Arc::new(SharedNodes::default()),
            model: Model::default(),
            waiters: Vec::new(),
            holders: Vec::new(),
            events: BTreeMap::new(),
        }
    }

    fn event(&mut self, name: &'static str) {
        *self.events.entry(name).or_default() += 1;
    }

    /// The model's departure of a member of node `n`, with the cases it
    /// makes.
    fn leave(&mut self, n: usize) {
        let node = &self.model.nodes[n];
        if node.members == 1 {
            match node.phase {
                Phase::Waiting => self.event("last waiter left a waiting node"),
                Phase::Granted if node.unclaimed => self.event("last member left before any claim"),
                Phase::Granted => self.event("last member of a granted node left"),
                _ => {}
            }
        }
        self.model.leave(n);
    }

    /// The model's join of a reader with `key`, checked against the acquires
    /// the stand-in saw started since `before`.
    fn joined(&mut self, key: usize, before: usize) -> usize {
        let behind_a_grant = self
            .model
            .nodes
            .iter()
            .any(|node| node.key == key && node.phase == Phase::Granted && node.members > 0);
        let n = self.model.join(key);
        let started = self.stand.started() - before;
        if n != before {
            self.event("shared a waiting node");
        } else if behind_a_grant {
            self.event("new node while the last one holds");
        }
        if n == before {
            assert_eq!(
                started, 1,
                "a reader with key {key} found no waiting node to share and \
                 should have started node {n}; it joined a generation that \
                 was granted or abandoned instead"
            );
        } else {
            assert_eq!(
                started, 0,
                "a reader with key {key} should have shared waiting node {n}"
            );
        }
        n
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Join { key } => {
                let before = self.stand.started();
                let (shared, stand) = (self.shared.clone(), self.stand.clone());
                let share_key = self.keys[key].clone();
                let mut wait: Pending =
                    Box::pin(async move { shared.acquire(&stand, share_key).await });
                let first = poll(&mut wait);
                let node = self.joined(key, before);
                if let Poll::Ready(outcome) = first {
                    panic!(
                        "a reader with key {key} was served at once (got {:?}): \
                         it joined a generation whose node was already granted",
                        outcome.map(|hold| hold.node)
                    );
                }
                self.waiters.push(Waiter { key, node, wait });
            }
            Op::Poll { waiter } => {
                if self.waiters.is_empty() {
                    return;
                }
                let i = waiter % self.waiters.len();
                self.poll_waiter(i);
            }
            Op::Cancel { waiter } => {
                if self.waiters.is_empty() {
                    return;
                }
                let waiter = self.waiters.remove(waiter % self.waiters.len());
                drop(waiter.wait);
                self.leave(waiter.node);
            }
            Op::Grant { node } | Op::Fail { node } => {
                let running = self.model.in_phase(&[Phase::Waiting, Phase::Aborted]);
                if running.is_empty() {
                    return;
                }
                let n = running[node % running.len()];
                if self.model.nodes[n].phase == Phase::Aborted {
                    self.event("outcome after the abort");
                }
                if matches!(op, Op::Grant { .. }) {
                    self.stand.grant(n);
                    self.model.settle(n, Phase::Granted);
                } else {
                    self.stand.fail(n);
                    self.model.settle(n, Phase::Failed);
                }
            }
            Op::Withdraw { node } => {
                let aborted = self.model.in_phase(&[Phase::Aborted]);
                if aborted.is_empty() {
                    return;
                }
                let n = aborted[node % aborted.len()];
                self.event("withdrawn");
                self.stand.withdraw(n);
                self.model.nodes[n].phase = Phase::Withdrawn;
            }
            Op::Lose { node } => {
                let granted = self.model.in_phase(&[Phase::Granted]);
                if granted.is_empty() {
                    return;
                }
                let n = granted[node % granted.len()];
                self.event("grant lost");
                self.stand.lose(n);
                self.model.nodes[n].lost = true;
            }
            Op::Release { holder, explicit } => {
                if self.holders.is_empty() {
                    return;
                }
                let holder = self.holders.remove(holder % self.holders.len());
                if explicit {
                    holder.hold.release();
                }
                drop(holder.hold);
                self.leave(holder.node);
            }
        }
    }

    /// Polls waiter `i` and checks what it got against its node's phase.
    fn poll_waiter(&mut self, i: usize) {
        let n = self.waiters[i].node;
        let key = self.waiters[i].key;
        let before = self.stand.started();
        let got = poll(&mut self.waiters[i].wait);
        let node = &self.model.nodes[n];
        match (node.phase, node.lost, got) {
            (Phase::Waiting, _, Poll::Pending) => {}
            (Phase::Granted, false, Poll::Ready(Ok(hold))) => {
                assert_eq!(hold.node, n, "a member of node {n} got a hold on another");
                let node = &mut self.model.nodes[n];
                if !std::mem::take(&mut node.unclaimed) {
                    node.holds += 1;
                    self.event("hold made for a further member");
                }
                self.waiters.remove(i);
                self.holders.push(Holder { node: n, hold });
            }
            (Phase::Granted, true, Poll::Pending) => {
                // Turned away from a lost grant: it takes the acquire's
                // hold only to release it, or makes none; then it waits
                // with the next generation.
                self.event("turned away from a lost grant");
                self.model.nodes[n].unclaimed = false;
                self.leave(n);
                self.waiters[i].node = self.joined(key, before);
            }
            (Phase::Failed, _, Poll::Ready(Err(_))) => {
                self.event("member got the acquire's error");
                self.waiters.remove(i);
                self.leave(n);
            }
            (phase, lost, got) => panic!(
                "a member of node {n} ({phase:?}, lost: {lost}) got {:?} when polled{}",
                got.map(|outcome| outcome.map(|hold| hold.node)),
                if lost {
                    ": a member of a lost grant must never get a hold"
                } else {
                    ""
                }
            ),
        }
    }

    /// Everything the stand-in and the generations show agrees with the
    /// model.
    fn check(&self) {
        let nodes = self.stand.nodes();
        assert_eq!(
            nodes.len(),
            self.model.nodes.len(),
            "node acquires started differ from the generations the model has"
        );
        for (n, (node, model)) in nodes.iter().zip(&self.model.nodes).enumerate() {
            let outcome = match model.phase {
                Phase::Waiting | Phase::Aborted => Outcome::Waiting,
                Phase::Granted => Outcome::Granted,
                Phase::Failed => Outcome::Failed,
                Phase::Withdrawn => Outcome::Withdrawn,
            };
            assert_eq!(node.outcome, outcome, "node {n}: {model:?}");
            assert_eq!(
                node.aborts,
                usize::from(model.aborted),
                "node {n} ({model:?}) was aborted {} times: a node must be withdrawn \
                 exactly when its last waiter leaves",
                node.aborts
            );
            let deleted = usize::from(model.phase == Phase::Granted && model.members == 0);
            assert_eq!(
                node.deletes, deleted,
                "node {n} ({model:?}) was deleted {} times: a granted node goes once, \
                 when its last member does",
                node.deletes
            );
            assert_eq!(
                node.holds, model.holds,
                "node {n} ({model:?}): {} holds were made over it, expected the acquire's own \
                 and one per further member that claimed a grant not known to be lost",
                node.holds
            );
            if let Some(generation) = node.generation.upgrade() {
                assert_eq!(
                    generation.state().members,
                    model.members,
                    "node {n} ({model:?}): members counted by its generation"
                );
            }
        }
        drop(nodes);
        let open = self.open_generations();
        assert_eq!(
            open, self.model.open,
            "open generations (key -> node) differ from the model's: only a \
             generation whose node waits may take joiners"
        );
        for path in PATHS {
            let expected: usize = self
                .model
                .open
                .iter()
                .filter(|(&key, _)| &*self.keys[key].0 == path)
                .map(|(_, &n)| self.model.nodes[n].members - 1)
                .sum();
            assert_eq!(self.shared.waiting(path), expected, "waiting({path})");
        }
        for holder in &self.holders {
            assert_eq!(self.model.nodes[holder.node].phase, Phase::Granted);
        }
        let unclaimed = self.model.nodes.iter().filter(|n| n.unclaimed).count();
        assert_eq!(
            self.stand.live_holds(),
            self.holders.len() + unclaimed,
            "holds alive besides the members' and the unclaimed ones"
        );
    }

    /// The open map as key -> node.
    fn open_generations(&self) -> BTreeMap<usize, usize> {
        let nodes = self.stand.nodes();
        self.shared
            .open
            .iter()
            .map(|entry| {
                let key = self
                    .keys
                    .iter()
                    .position(|k| k == entry.key())
                    .unwrap_or(usize::MAX);
                let node = nodes
                    .iter()
                    .position(|node| std::ptr::eq(node.generation.as_ptr(), &**entry.value()))
                    .unwrap_or(usize::MAX);
                (key, node)
            })
            .collect()
    }

    /// Everyone gives up, every abort takes effect; then nothing is left.
    fn drain(&mut self) {
        while !self.waiters.is_empty() {
            self.step(&Op::Cancel { waiter: 0 });
            self.check();
        }
        while !self.holders.is_empty() {
            self.step(&Op::Release {
                holder: 0,
                explicit: true,
            });
            self.check();
        }
        while !self.model.in_phase(&[Phase::Aborted]).is_empty() {
            self.step(&Op::Withdraw { node: 0 });
            self.check();
        }
        assert!(self.shared.open.is_empty(), "a generation stayed open");
        assert_eq!(self.stand.live_holds(), 0, "a hold was never dropped");
        for (n, node) in self.stand.nodes().iter().enumerate() {
            assert!(
                node.generation.upgrade().is_none(),
                "the generation of node {n} was never freed"
            );
            let ended = node.outcome.ended_once(node.deletes);
            assert!(
                ended,
                "node {n} ({:?}, deleted {} times) did not end exactly once",
                node.outcome, node.deletes
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn shared_nodes_follow_the_model(ops in prop::collection::vec(op(), 1..80)) {
        let mut run = Run::new();
        for op in &ops {
            run.step(op);
            run.check();
        }
        run.drain();
    }
}

/// The generator is worth its cases: a fixed set of sequences reaches every
/// interesting case many times (a change that made one unreachable, say by
/// its weights, would leave the property above vacuous there).
#[test]
fn the_generated_sequences_reach_every_case() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let sequences = prop::collection::vec(op(), 1..80);
    let mut events = BTreeMap::<&str, usize>::new();
    for _ in 0..256 {
        let ops = sequences
            .new_tree(&mut runner)
            .expect("a sequence is generated")
            .current();
        let mut run = Run::new();
        for op in &ops {
            run.step(op);
            run.check();
        }
        run.drain();
        for (name, count) in run.events {
            *events.entry(name).or_default() += count;
        }
    }
    let cases = [
        "shared a waiting node",
        "new node while the last one holds",
        "hold made for a further member",
        "last waiter left a waiting node",
        "last member left before any claim",
        "last member of a granted node left",
        "outcome after the abort",
        "withdrawn",
        "grant lost",
        "turned away from a lost grant",
        "member got the acquire's error",
    ];
    for case in cases {
        let count = events.get(case).copied().unwrap_or(0);
        assert!(
            count >= 20,
            "{case:?} came up {count} times in 256 sequences: {events:?}"
        );
    }
    eprintln!("{events:?}");
}
