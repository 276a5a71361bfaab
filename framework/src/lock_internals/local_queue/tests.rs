//! The local queues on their own, without a server: unit tests of each rule
//! and property tests that run random sequences of acquires, tries,
//! cancellations and releases against a model of the queue.
//!
//! Most tests poll the turn futures by hand (a no-op waker, one poll at a
//! time), so the test decides exactly when a waiter arrives, when it is
//! looked at again and when it is dropped; the timed ones run many tokio
//! tasks on a current-thread runtime with paused time.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::{Key, LocalQueues, LocalTurn};

/// Paused time jumps to this when every task waits for a turn that never
/// comes: a test that would hang fails instead.
const HOUR: Duration = Duration::from_secs(3600);

fn key(path: &str, lock: &str, turns: u32) -> Key {
    (path.into(), lock.into(), turns)
}

/// A task's wait for a turn, polled by hand.
type Pending = Pin<Box<dyn Future<Output = LocalTurn> + Send>>;

/// Starts a wait for a turn and polls it once (so it is queued, or served).
fn arrive(queues: &Arc<LocalQueues>, key: &Key) -> std::result::Result<LocalTurn, Pending> {
    let queues = queues.clone();
    let key = key.clone();
    let mut wait: Pending = Box::pin(async move { queues.turn(key).await });
    match poll(&mut wait) {
        Poll::Ready(turn) => Ok(turn),
        Poll::Pending => Err(wait),
    }
}

fn poll(wait: &mut Pending) -> Poll<LocalTurn> {
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    wait.as_mut().poll(&mut cx)
}

fn queued(queues: &Arc<LocalQueues>, key: &Key) -> Pending {
    match arrive(queues, key) {
        Ok(turn) => panic!("{turn:?} was served at once, expected to queue"),
        Err(wait) => wait,
    }
}

fn served(queues: &Arc<LocalQueues>, key: &Key) -> LocalTurn {
    match arrive(queues, key) {
        Ok(turn) => turn,
        Err(_) => panic!("expected a free turn on {key:?}"),
    }
}

fn ready(wait: &mut Pending) -> LocalTurn {
    match poll(wait) {
        Poll::Ready(turn) => turn,
        Poll::Pending => panic!("expected the waiter to have its turn"),
    }
}

fn still_waits(wait: &mut Pending) {
    if let Poll::Ready(turn) = poll(wait) {
        panic!("{turn:?} was served out of turn");
    }
}

/// The semaphore's free permits, `None` when the lock has no gate.
fn free(queues: &LocalQueues, key: &Key) -> Option<usize> {
    queues
        .gates
        .get(key)
        .map(|gate| gate.turns.available_permits())
}

#[test]
fn a_mutex_turn_is_exclusive_and_passes_to_the_waiter() {
    let queues = Arc::new(LocalQueues::default());
    let k = key("/a", "lock", 1);
    let first = served(&queues, &k);
    assert!(queues.try_turn(k.clone()).is_none());
    let mut second = queued(&queues, &k);
    assert_eq!(queues.waiting("/a"), 1);
    still_waits(&mut second);
    drop(first);
    let second = ready(&mut second);
    assert_eq!(queues.waiting("/a"), 0);
    assert!(queues.try_turn(k.clone()).is_none());
    drop(second);
    assert!(queues.gates.is_empty(), "an idle lock keeps no gate");
}

#[test]
fn waiters_are_served_in_arrival_order_whatever_order_they_are_polled_in() {
    let queues = Arc::new(LocalQueues::default());
    let k = key("/fifo", "lock", 1);
    let mut holder = served(&queues, &k);
    let mut waiters: Vec<Pending> = (0..5).map(|_| queued(&queues, &k)).collect();
    for next in 0..waiters.len() {
        drop(holder);
        // Everyone behind `next` still waits, looked at last first.
        for later in waiters[next + 1..].iter_mut().rev() {
            still_waits(later);
        }
        holder = ready(&mut waiters[next]);
        assert_eq!(queues.waiting("/fifo"), waiters.len() - next - 1);
    }
    drop(holder);
    drop(waiters);
    assert!(queues.gates.is_empty());
}

#[test]
fn a_try_does_not_jump_the_queue() {
    let queues = Arc::new(LocalQueues::default());
    let k = key("/try", "lock", 2);
    let a = served(&queues, &k);
    let _b = served(&queues, &k);
    let mut waiter = queued(&queues, &k);
    drop(a);
    // The freed turn is the waiter's, even before it looks.
    assert!(queues.try_turn(k.clone()).is_none());
    assert_eq!(free(&queues, &k), Some(0));
    let _waiter = ready(&mut waiter);
    assert!(queues.try_turn(k.clone()).is_none());
}

#[test]
fn a_cancelled_waiter_leaves_the_queue_and_takes_nothing() {
    let queues = Arc::new(LocalQueues::default());
    let k = key("/cancel", "lock", 1);
    let holder = served(&queues, &k);
    let first = queued(&queues, &k);
    let mut second = queued(&queues, &k);
    assert_eq!(queues.waiting("/cancel"), 2);
    drop(first);
    assert_eq!(queues.waiting("/cancel"), 1);
    still_waits(&mut second);
    drop(holder);
    let second = ready(&mut second);
    assert_eq!(queues.waiting("/cancel"), 0);
    drop(second);
    assert!(queues.gates.is_empty());
}

#[test]
fn a_waiter_cancelled_after_its_turn_came_passes_the_turn_on() {
    let queues = Arc::new(LocalQueues::default());
    let k = key("/handoff", "lock", 1);
    let holder = served(&queues, &k);
    let first = queued(&queues, &k);
    let mut second = queued(&queues, &k);
    drop(holder);
    // The turn is `first`'s now, but it is dropped before it looks.
    drop(first);
    assert_eq!(queues.waiting("/handoff"), 1);
    let second = ready(&mut second);
    assert_eq!(queues.waiting("/handoff"), 0);
    drop(second);
    assert!(queues.gates.is_empty());
}

#[test]
fn a_cancelled_last_waiter_of_an_idle_lock_forgets_the_gate() {
    let queues = Arc::new(LocalQueues::default());
    let k = key("/idle", "lock", 1);
    let holder = served(&queues, &k);
    let waiter = queued(&queues, &k);
    drop(holder);
    drop(waiter);
    assert_eq!(queues.waiting("/idle"), 0);
    assert!(queues.gates.is_empty());
}

#[test]
fn waiting_adds_up_every_lock_name_of_a_path_and_only_that_path() {
    let queues = Arc::new(LocalQueues::default());
    let keys = [
        key("/p", "a", 1),
        key("/p", "b", 1),
        key("/p", "a", 2),
        key("/q", "a", 1),
    ];
    // The same path and name with another turn count is another gate.
    let a1 = served(&queues, &keys[0]);
    let a2 = served(&queues, &keys[2]);
    let a2b = served(&queues, &keys[2]);
    let b = served(&queues, &keys[1]);
    assert_eq!(queues.gates.len(), 3);
    let w: Vec<Pending> = vec![
        queued(&queues, &keys[0]),
        queued(&queues, &keys[1]),
        queued(&queues, &keys[2]),
        queued(&queues, &keys[2]),
    ];
    assert_eq!(queues.waiting("/p"), 4);
    assert_eq!(queues.waiting("/q"), 0);
    assert_eq!(queues.waiting("/p/"), 0);
    let q = served(&queues, &keys[3]);
    assert_eq!(queues.waiting("/q"), 0);
    drop((w, a1, a2, a2b, b, q));
    assert_eq!(queues.waiting("/p"), 0);
    assert!(queues.gates.is_empty());
}

#[test]
fn many_idle_locks_leave_no_state() {
    let queues = Arc::new(LocalQueues::default());
    for i in 0..200 {
        let k = key(&format!("/many/{i}"), "lock", 1 + i % 3);
        let tried = queues.try_turn(k.clone());
        assert!(tried.is_some());
        drop(tried);
        drop(served(&queues, &k));
    }
    assert!(queues.gates.is_empty());
}

#[test]
fn a_turn_outliving_its_queues_is_dropped_quietly() {
    let queues = Arc::new(LocalQueues::default());
    let turn = served(&queues, &key("/late", "lock", 1));
    drop(queues);
    drop(turn);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_wait_leaves_the_queue_and_the_next_waiter_is_served() {
    let queues = Arc::new(LocalQueues::default());
    let k = key("/timeout", "lock", 1);
    let start = Instant::now();
    let holder = queues.try_turn(k.clone());
    assert!(holder.is_some());
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(holder);
    });
    let timed_out = tokio::time::timeout(Duration::from_millis(10), queues.turn(k.clone())).await;
    assert!(timed_out.is_err());
    assert_eq!(start.elapsed(), Duration::from_millis(10));
    assert_eq!(queues.waiting("/timeout"), 0);
    let turn = tokio::time::timeout(HOUR, queues.turn(k.clone()))
        .await
        .expect("the released turn never came");
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    assert!(release.await.is_ok());
    drop(turn);
    assert!(queues.gates.is_empty());
}

#[tokio::test(start_paused = true)]
async fn tasks_take_turns_in_arrival_order_and_never_more_than_the_count() {
    const TURNS: u32 = 3;
    let queues = Arc::new(LocalQueues::default());
    let k = key("/tasks", "lock", TURNS);
    let start = Instant::now();
    // (arrival index, turns out when served).
    let served = Arc::new(Mutex::new(Vec::new()));
    let out = Arc::new(Mutex::new(0u32));
    let tasks: Vec<_> = (0..20u64)
        .map(|i| {
            let (queues, k, served, out) = (queues.clone(), k.clone(), served.clone(), out.clone());
            tokio::spawn(async move {
                tokio::time::sleep_until(start + Duration::from_millis(i)).await;
                let turn = queues.turn(k).await;
                let now_out = {
                    let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
                    *out += 1;
                    *out
                };
                served
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((i, now_out));
                tokio::time::sleep(Duration::from_millis(7)).await;
                *out.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
                drop(turn);
            })
        })
        .collect();
    let all = tokio::time::timeout(HOUR, futures::future::join_all(tasks))
        .await
        .expect("tasks still waited an hour later: a turn was never given back");
    assert!(all.iter().all(|task| task.is_ok()));
    let served = served.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let order: Vec<u64> = served.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, (0..20).collect::<Vec<_>>());
    assert!(served.iter().all(|(_, out)| *out <= TURNS), "{served:?}");
    assert!(served.iter().any(|(_, out)| *out == TURNS));
    assert!(queues.gates.is_empty());
}

// ---------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------

/// The locks of the property tests: two of one path (another name and
/// another count), one of another path with three turns.
fn locks() -> [Key; 4] {
    [
        key("/a", "lock", 1),
        key("/a", "lock", 2),
        key("/a", "other", 1),
        key("/b", "lock", 3),
    ]
}

/// One step of a sequence. Indexes are taken modulo what exists at that
/// step, so every sequence (and every shrunk one) can run.
#[derive(Clone, Debug)]
enum Op {
    /// A new task waits for a turn of lock `lock` (polled once).
    Turn { lock: usize },
    /// A new task tries for a turn of lock `lock`.
    Try { lock: usize },
    /// A waiting task is polled again.
    Poll { waiter: usize },
    /// A waiting task is cancelled (its wait dropped).
    Cancel { waiter: usize },
    /// A task gives its turn back.
    Release { turn: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..4usize).prop_map(|lock| Op::Turn { lock }),
        1 => (0..4usize).prop_map(|lock| Op::Try { lock }),
        3 => (0..8usize).prop_map(|waiter| Op::Poll { waiter }),
        1 => (0..8usize).prop_map(|waiter| Op::Cancel { waiter }),
        2 => (0..8usize).prop_map(|turn| Op::Release { turn }),
    ]
}

/// What the queue of one lock should look like.
#[derive(Default, Debug)]
struct Model {
    /// Waiters in arrival order whose turn has not come.
    queue: VecDeque<u64>,
    /// Waiters whose turn came but who have not looked yet.
    assigned: Vec<u64>,
    /// Turns in tasks' hands.
    held: usize,
}

impl Model {
    fn free(&self, count: usize) -> usize {
        count - self.held - self.assigned.len()
    }

    /// A turn comes back: the first waiter's, or free.
    fn give_back(&mut self) {
        if let Some(next) = self.queue.pop_front() {
            self.assigned.push(next);
        }
    }

    fn busy(&self) -> bool {
        self.held > 0 || !self.queue.is_empty() || !self.assigned.is_empty()
    }
}

struct Waiter {
    id: u64,
    lock: usize,
    wait: Pending,
}

fn run_sequence(ops: &[Op]) -> std::result::Result<(), TestCaseError> {
    let locks = locks();
    let queues = Arc::new(LocalQueues::default());
    let mut models: Vec<Model> = locks.iter().map(|_| Model::default()).collect();
    let mut waiters: Vec<Waiter> = Vec::new();
    let mut turns: Vec<(usize, LocalTurn)> = Vec::new();
    let mut next_id = 0u64;
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Turn { lock } => {
                let id = next_id;
                next_id += 1;
                let model = &mut models[lock];
                let count = locks[lock].2 as usize;
                match arrive(&queues, &locks[lock]) {
                    Ok(turn) => {
                        prop_assert!(
                            model.free(count) > 0 && model.queue.is_empty(),
                            "step {step}: waiter {id} served at once on lock {lock} past {model:?}"
                        );
                        model.held += 1;
                        turns.push((lock, turn));
                    }
                    Err(wait) => {
                        prop_assert_eq!(
                            model.free(count),
                            0,
                            "step {}: waiter {} queued on lock {} with a free turn",
                            step,
                            id,
                            lock
                        );
                        model.queue.push_back(id);
                        waiters.push(Waiter { id, lock, wait });
                    }
                }
            }
            Op::Try { lock } => {
                let model = &mut models[lock];
                let count = locks[lock].2 as usize;
                match queues.try_turn(locks[lock].clone()) {
                    Some(turn) => {
                        prop_assert!(
                            model.free(count) > 0,
                            "step {step}: a try on lock {lock} got a turn past {model:?}"
                        );
                        model.held += 1;
                        turns.push((lock, turn));
                    }
                    None => prop_assert_eq!(
                        model.free(count),
                        0,
                        "step {}: a try on lock {} found no free turn",
                        step,
                        lock
                    ),
                }
            }
            Op::Poll { waiter } if !waiters.is_empty() => {
                let at = waiter % waiters.len();
                let lock = waiters[at].lock;
                let id = waiters[at].id;
                let model = &mut models[lock];
                match poll(&mut waiters[at].wait) {
                    Poll::Ready(turn) => {
                        let Some(pos) = model.assigned.iter().position(|w| *w == id) else {
                            return Err(TestCaseError::fail(format!(
                                "step {step}: waiter {id} of lock {lock} was served out of turn \
                                 ({model:?})"
                            )));
                        };
                        model.assigned.swap_remove(pos);
                        model.held += 1;
                        turns.push((lock, turn));
                        waiters.swap_remove(at);
                    }
                    Poll::Pending => prop_assert!(
                        !model.assigned.contains(&id),
                        "step {step}: waiter {id} of lock {lock} was not served in its turn"
                    ),
                }
            }
            Op::Cancel { waiter } if !waiters.is_empty() => {
                let gone = waiters.swap_remove(waiter % waiters.len());
                drop(gone.wait);
                let model = &mut models[gone.lock];
                if let Some(pos) = model.queue.iter().position(|w| *w == gone.id) {
                    model.queue.remove(pos);
                } else if let Some(pos) = model.assigned.iter().position(|w| *w == gone.id) {
                    // Its turn had come: it goes to the next waiter.
                    model.assigned.swap_remove(pos);
                    model.give_back();
                }
            }
            Op::Release { turn } if !turns.is_empty() => {
                let (lock, turn) = turns.swap_remove(turn % turns.len());
                drop(turn);
                models[lock].held -= 1;
                models[lock].give_back();
            }
            Op::Poll { .. } | Op::Cancel { .. } | Op::Release { .. } => {}
        }
        check(&queues, &locks, &models, &turns, step)?;
    }
    // Everyone leaves: nothing is left behind.
    drop(waiters);
    drop(turns);
    prop_assert_eq!(
        queues.waiting("/a") + queues.waiting("/b"),
        0,
        "waiters counted after every task left"
    );
    prop_assert_eq!(queues.gates.len(), 0, "idle gates are forgotten");
    Ok(())
}

/// The invariants that hold after every step.
fn check(
    queues: &LocalQueues,
    locks: &[Key],
    models: &[Model],
    turns: &[(usize, LocalTurn)],
    step: usize,
) -> std::result::Result<(), TestCaseError> {
    let mut waiting: BTreeMap<&str, usize> = BTreeMap::new();
    for (lock, (k, model)) in locks.iter().zip(models).enumerate() {
        let count = k.2 as usize;
        let out = turns.iter().filter(|(l, _)| *l == lock).count();
        prop_assert!(
            out <= count,
            "step {step}: {out} turns of lock {lock} out of {count}"
        );
        prop_assert_eq!(out, model.held);
        if model.busy() {
            prop_assert_eq!(
                free(queues, k),
                Some(model.free(count)),
                "step {}: free turns of lock {} ({:?})",
                step,
                lock,
                model
            );
        } else {
            prop_assert_eq!(
                free(queues, k),
                None,
                "step {}: the idle lock {} kept its gate",
                step,
                lock
            );
        }
        *waiting.entry(&k.0).or_default() += model.queue.len() + model.assigned.len();
    }
    for (path, expected) in waiting {
        prop_assert_eq!(
            queues.waiting(path),
            expected,
            "step {}: waiters of {}",
            step,
            path
        );
    }
    Ok(())
}

/// A task's plan in the timed property test.
#[derive(Clone, Debug)]
struct Plan {
    lock: usize,
    /// When it arrives, in ms from the start.
    arrive: u64,
    /// `None`: a try; `Some(None)`: waits as long as needed;
    /// `Some(Some(ms))`: gives up after `ms`.
    wait: Option<Option<u64>>,
    /// How long it keeps its turn, in ms.
    hold: u64,
}

fn plan() -> impl Strategy<Value = Plan> {
    (
        0..2usize,
        0..40u64,
        prop_oneof![
            1 => Just(None),
            2 => Just(Some(None)),
            2 => (1..30u64).prop_map(|ms| Some(Some(ms))),
        ],
        1..15u64,
    )
        .prop_map(|(lock, arrive, wait, hold)| Plan {
            lock,
            arrive,
            wait,
            hold,
        })
}

/// What one task saw, for the checks after the run.
#[derive(Clone, Debug)]
struct Seen {
    lock: usize,
    /// Position among the arrivals (all locks).
    arrival: usize,
    waited: bool,
    /// When it was served, or gave up, in ms.
    served: Option<u64>,
    gave_up: Option<u64>,
}

#[derive(Default)]
struct Board {
    arrivals: usize,
    out: [u32; 2],
    seen: Vec<Seen>,
    broken: Vec<String>,
}

fn run_tasks(plans: &[Plan]) -> std::result::Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let locks = [key("/t1", "lock", 1), key("/t2", "lock", 2)];
    let queues = Arc::new(LocalQueues::default());
    let board = Arc::new(Mutex::new(Board::default()));
    let run = async {
        let start = Instant::now();
        let ms = move || start.elapsed().as_millis() as u64;
        let tasks: Vec<_> = plans
            .iter()
            .cloned()
            .map(|plan| {
                let (queues, board, k) = (queues.clone(), board.clone(), locks[plan.lock].clone());
                tokio::spawn(async move {
                    tokio::time::sleep_until(start + Duration::from_millis(plan.arrive)).await;
                    let arrival = {
                        let mut b = board.lock().unwrap_or_else(|e| e.into_inner());
                        b.arrivals += 1;
                        b.arrivals - 1
                    };
                    let turn = match plan.wait {
                        None => {
                            let waiting = queues.waiting(&k.0);
                            let turn = queues.try_turn(k.clone());
                            if turn.is_some() && waiting > 0 {
                                board.lock().unwrap_or_else(|e| e.into_inner()).broken.push(
                                    format!(
                                        "a try got a turn while {waiting} waiters were counted"
                                    ),
                                );
                            }
                            turn
                        }
                        Some(None) => Some(queues.turn(k.clone()).await),
                        Some(Some(limit)) => tokio::time::timeout(
                            Duration::from_millis(limit),
                            queues.turn(k.clone()),
                        )
                        .await
                        .ok(),
                    };
                    {
                        let mut b = board.lock().unwrap_or_else(|e| e.into_inner());
                        let now = ms();
                        b.seen.push(Seen {
                            lock: plan.lock,
                            arrival,
                            waited: plan.wait.is_some(),
                            served: turn.as_ref().map(|_| now),
                            gave_up: turn.is_none().then_some(now),
                        });
                        if turn.is_some() {
                            b.out[plan.lock] += 1;
                            if b.out[plan.lock] > k.2 {
                                let out = b.out[plan.lock];
                                b.broken
                                    .push(format!("{out} turns of {k:?} out at {now} ms"));
                            }
                        }
                    }
                    if let Some(turn) = turn {
                        tokio::time::sleep(Duration::from_millis(plan.hold)).await;
                        board.lock().unwrap_or_else(|e| e.into_inner()).out[plan.lock] -= 1;
                        drop(turn);
                    }
                })
            })
            .collect();
        for task in tasks {
            let _ = task.await;
        }
    };
    let finished = runtime.block_on(async { tokio::time::timeout(HOUR, run).await });
    prop_assert!(
        finished.is_ok(),
        "tasks still waited an hour later: a turn was never given back"
    );
    let board = board.lock().unwrap_or_else(|e| e.into_inner());
    prop_assert!(board.broken.is_empty(), "{:?}", board.broken);
    prop_assert_eq!(board.seen.len(), plans.len(), "a task panicked");
    // First come, first served: a waiter served at `t` had everyone who
    // queued on that lock before it served, or gone, by `t`.
    for later in board.seen.iter().filter(|s| s.waited) {
        let Some(t) = later.served else { continue };
        for earlier in board
            .seen
            .iter()
            .filter(|s| s.waited && s.lock == later.lock && s.arrival < later.arrival)
        {
            let left = earlier.served.or(earlier.gave_up);
            prop_assert!(
                left.is_some_and(|left| left <= t),
                "{earlier:?} still waited when {later:?} was served"
            );
        }
    }
    prop_assert_eq!(
        queues.waiting("/t1") + queues.waiting("/t2"),
        0,
        "waiters counted after every task left"
    );
    prop_assert_eq!(queues.gates.len(), 0, "idle gates are forgotten");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random acquires, tries, polls, cancellations and releases over many
    /// waiters of four locks, checked against the model after every step.
    #[test]
    fn the_queue_follows_its_model(ops in proptest::collection::vec(op(), 1..60)) {
        run_sequence(&ops)?;
    }

    /// Random tasks with timed arrivals, holds and give-ups on paused time:
    /// never more turns out than the count, first come first served, nothing
    /// left behind.
    #[test]
    fn timed_tasks_are_served_fairly(plans in proptest::collection::vec(plan(), 1..25)) {
        run_tasks(&plans)?;
    }
}
