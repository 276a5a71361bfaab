//! Property tests of the local queues: random sequences of acquires,
//! tries, cancellations and releases against a model of the queue, and
//! timed tasks on paused time.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use proptest::prelude::*;
use tokio::time::Instant;

use super::*;

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
    let queues = Arc::new(LocalQueues::<()>::default());
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
    let queues = Arc::new(LocalQueues::<()>::default());
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
