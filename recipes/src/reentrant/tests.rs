//! The reentrancy engine on its own, without a server: a stand-in hold whose
//! loss the test flips, and a stand-in `take` that grants, refuses or fails
//! when the test says so. Unit tests with tokio tasks as owners, and a
//! property test that runs random sequences of acquires, re-entries,
//! releases, losses, cancellations and time steps over several owners,
//! checked against a model after every step.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use proptest::prelude::*;
use tokio::sync::oneshot;
use tokio::time::Instant;
use zk_curator_framework::lock_internals::{LockLoss, Wait};
use zk_curator_framework::{Error, Result};

use super::{Reentrant, ReentrantHold};
use crate::owner::Owner;

/// Every hold the stand-in ever granted: which are lost, which were
/// forgotten.
#[derive(Default)]
struct Holds {
    next: AtomicU64,
    lost: Mutex<BTreeMap<u64, Arc<AtomicBool>>>,
    forgotten: Mutex<Vec<u64>>,
}

impl Holds {
    fn grant(self: &Arc<Self>) -> TestHold {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let lost = Arc::new(AtomicBool::new(false));
        lock(&self.lost).insert(id, lost.clone());
        TestHold {
            id,
            lost,
            holds: self.clone(),
        }
    }

    fn lose(&self, id: u64) {
        if let Some(lost) = lock(&self.lost).get(&id) {
            lost.store(true, Ordering::Relaxed);
        }
    }

    fn forgotten(&self) -> Vec<u64> {
        lock(&self.forgotten).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A hold of the stand-in: valid until the test says it is lost.
struct TestHold {
    id: u64,
    lost: Arc<AtomicBool>,
    holds: Arc<Holds>,
}

impl ReentrantHold for TestHold {
    fn check(&self) -> std::result::Result<(), LockLoss> {
        if self.lost.load(Ordering::Relaxed) {
            Err(LockLoss::NodeDeleted)
        } else {
            Ok(())
        }
    }

    fn describe(&self) -> String {
        path_of(self.id)
    }

    fn forget(self) {
        lock(&self.holds.forgotten).push(self.id);
    }
}

fn path_of(id: u64) -> String {
    format!("/test/lock-{id:010}")
}

fn lost(id: u64) -> Error {
    Error::lock_lost(path_of(id), LockLoss::NodeDeleted)
}

fn held_id(r: &Reentrant<TestHold>, owner: Owner) -> Option<u64> {
    r.with_owner(owner, |h| h.id)
}

/// An acquire of the current owner with no deadline, granted at once.
async fn acquire_now(
    r: &Reentrant<TestHold>,
    holds: &Arc<Holds>,
    takes: &Arc<AtomicU64>,
) -> Result<bool> {
    r.acquire(Wait::Forever, granting(holds, takes)).await
}

/// An empty owner map, its stand-in holds and a count of takes.
fn fresh() -> (Reentrant<TestHold>, Arc<Holds>, Arc<AtomicU64>) {
    (
        Reentrant::new(),
        Arc::new(Holds::default()),
        Arc::new(AtomicU64::new(0)),
    )
}

/// A `take` that grants after `ms` milliseconds, counting its calls.
fn granting_after(
    ms: u64,
    holds: &Arc<Holds>,
    takes: &Arc<AtomicU64>,
) -> impl FnOnce(Wait) -> futures::future::BoxFuture<'static, Result<Option<TestHold>>> {
    let (holds, takes) = (holds.clone(), takes.clone());
    move |_| {
        async move {
            takes.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(Some(holds.grant()))
        }
        .boxed()
    }
}

/// A `take` that grants at once, counting its calls.
fn granting(
    holds: &Arc<Holds>,
    takes: &Arc<AtomicU64>,
) -> impl FnOnce(Wait) -> futures::future::Ready<Result<Option<TestHold>>> {
    let (holds, takes) = (holds.clone(), takes.clone());
    move |_| {
        takes.fetch_add(1, Ordering::Relaxed);
        futures::future::ready(Ok(Some(holds.grant())))
    }
}

#[tokio::test]
async fn counts_go_up_and_down_and_the_last_release_hands_the_hold_back() {
    let r = Reentrant::<TestHold>::new();
    let (holds, takes) = (Arc::new(Holds::default()), Arc::new(AtomicU64::new(0)));
    for n in 1..=3 {
        assert_eq!(acquire_now(&r, &holds, &takes).await, Ok(true));
        assert_eq!(r.count(), n);
    }
    assert_eq!(
        takes.load(Ordering::Relaxed),
        1,
        "only the first acquire takes"
    );
    assert_eq!(r.holders(), 1);
    assert!(r.is_held_by_current());
    assert!(matches!(r.release(), Ok(None)));
    assert!(matches!(r.release(), Ok(None)));
    assert_eq!(r.count(), 1);
    let last = r.release();
    assert!(matches!(&last, Ok(Some(hold)) if hold.id == 0));
    assert_eq!(r.count(), 0);
    assert_eq!(r.holders(), 0);
    assert!(matches!(r.release(), Err(Error::NotOwner)));
}

#[tokio::test]
async fn a_release_by_another_owner_is_not_owner_and_changes_nothing() {
    let r = Arc::new(Reentrant::<TestHold>::new());
    let (holds, takes) = (Arc::new(Holds::default()), Arc::new(AtomicU64::new(0)));
    assert_eq!(acquire_now(&r, &holds, &takes).await, Ok(true));
    assert_eq!(acquire_now(&r, &holds, &takes).await, Ok(true));
    let me = Owner::current();
    let other = {
        let r = r.clone();
        tokio::spawn(async move { (r.release().map(|h| h.map(|h| h.id)), r.count()) })
    };
    let (released, other_count) = other.await.unwrap_or((Ok(None), u64::MAX));
    assert_eq!(released, Err(Error::NotOwner));
    assert_eq!(other_count, 0);
    assert_eq!(r.count(), 2);
    assert_eq!(held_id(&r, me), Some(0));
    assert_eq!(r.holders(), 1);
}

#[tokio::test]
async fn a_re_entry_into_a_lost_hold_fails_and_forgets_it() {
    let r = Reentrant::<TestHold>::new();
    let (holds, takes) = (Arc::new(Holds::default()), Arc::new(AtomicU64::new(0)));
    assert_eq!(acquire_now(&r, &holds, &takes).await, Ok(true));
    assert_eq!(acquire_now(&r, &holds, &takes).await, Ok(true));
    holds.lose(0);
    assert_eq!(acquire_now(&r, &holds, &takes).await, Err(lost(0)));
    assert_eq!(holds.forgotten(), vec![0]);
    assert_eq!(r.count(), 0);
    assert_eq!(r.holders(), 0);
    assert!(matches!(r.release(), Err(Error::NotOwner)));
    // The next acquire takes the lock anew.
    assert_eq!(acquire_now(&r, &holds, &takes).await, Ok(true));
    assert_eq!(takes.load(Ordering::Relaxed), 2);
    assert_eq!(held_id(&r, Owner::current()), Some(1));
}

#[tokio::test]
async fn owners_are_counted_apart() {
    let r = Arc::new(Reentrant::<TestHold>::new());
    let (holds, takes) = (Arc::new(Holds::default()), Arc::new(AtomicU64::new(0)));
    let tasks: Vec<_> = (0..4u64)
        .map(|n| {
            let (r, holds, takes) = (r.clone(), holds.clone(), takes.clone());
            tokio::spawn(async move {
                for _ in 0..=n {
                    assert_eq!(acquire_now(&r, &holds, &takes).await, Ok(true));
                }
                (Owner::current(), r.count())
            })
        })
        .collect();
    for (n, task) in tasks.into_iter().enumerate() {
        let (owner, count) = task.await.unwrap_or((Owner::current(), 0));
        assert_eq!(count, n as u64 + 1);
        assert!(held_id(&r, owner).is_some());
    }
    assert_eq!(r.holders(), 4);
    assert_eq!(takes.load(Ordering::Relaxed), 4);
}

#[tokio::test(start_paused = true)]
async fn futures_of_one_owner_acquiring_together_take_one_hold() {
    let r = Reentrant::<TestHold>::new();
    let holds = Arc::new(Holds::default());
    let takes = Arc::new(AtomicU64::new(0));
    let slow = || granting_after(50, &holds, &takes);
    let (a, b, c) = tokio::join!(
        r.acquire(Wait::Forever, slow()),
        r.acquire(Wait::Forever, slow()),
        r.acquire(Wait::Forever, slow()),
    );
    assert_eq!((a, b, c), (Ok(true), Ok(true), Ok(true)));
    assert_eq!(takes.load(Ordering::Relaxed), 1, "one owner, one take");
    assert_eq!(r.count(), 3);
    assert_eq!(r.holders(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_sibling_waiting_past_its_deadline_gives_up_without_taking() {
    let (r, holds, takes) = fresh();
    let start = Instant::now();
    let first = r.acquire(Wait::Forever, granting_after(100, &holds, &takes));
    let second = async {
        let out = r
            .acquire(
                Wait::Until(start + Duration::from_millis(10)),
                granting(&holds, &takes),
            )
            .await;
        (out, start.elapsed())
    };
    let (first, (second, gave_up_after)) = tokio::join!(first, second);
    assert_eq!(first, Ok(true));
    assert_eq!(second, Ok(false));
    assert_eq!(gave_up_after, Duration::from_millis(10));
    assert_eq!(takes.load(Ordering::Relaxed), 1);
    assert_eq!(r.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_first_acquire_clears_its_mark() {
    let r = Reentrant::<TestHold>::new();
    let holds = Arc::new(Holds::default());
    let takes = Arc::new(AtomicU64::new(0));
    // A first acquire that never gets its answer, given up after 10 ms.
    let never = {
        let takes = takes.clone();
        move |_| {
            takes.fetch_add(1, Ordering::Relaxed);
            std::future::pending::<Result<Option<TestHold>>>()
        }
    };
    let dropped =
        tokio::time::timeout(Duration::from_millis(10), r.acquire(Wait::Forever, never)).await;
    assert!(dropped.is_err());
    assert_eq!(r.count(), 0);
    assert!(r.owners.is_empty(), "no mark is left behind");
    assert_eq!(acquire_now(&r, &holds, &takes).await, Ok(true));
    assert_eq!(takes.load(Ordering::Relaxed), 2);
    assert_eq!(r.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_sibling_takes_the_lock_when_the_first_acquire_is_dropped_or_fails() {
    let r = Reentrant::<TestHold>::new();
    let holds = Arc::new(Holds::default());
    let takes = Arc::new(AtomicU64::new(0));
    let never = {
        let takes = takes.clone();
        move |_| {
            takes.fetch_add(1, Ordering::Relaxed);
            std::future::pending::<Result<Option<TestHold>>>()
        }
    };
    let (dropped, second) = tokio::join!(
        tokio::time::timeout(Duration::from_millis(10), r.acquire(Wait::Forever, never)),
        r.acquire(Wait::Forever, granting(&holds, &takes)),
    );
    assert!(dropped.is_err());
    assert_eq!(second, Ok(true));
    assert_eq!(takes.load(Ordering::Relaxed), 2);
    assert!(matches!(r.release(), Ok(Some(_))));

    let failing = {
        let takes = takes.clone();
        move |_| async move {
            takes.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(5)).await;
            Err::<Option<TestHold>, _>(Error::ConnectionLoss)
        }
    };
    let (failed, second) = tokio::join!(
        r.acquire(Wait::Forever, failing),
        r.acquire(Wait::Forever, granting(&holds, &takes)),
    );
    assert_eq!(failed, Err(Error::ConnectionLoss));
    assert_eq!(second, Ok(true));
    assert_eq!(takes.load(Ordering::Relaxed), 4);
    assert_eq!(r.count(), 1);
}

/// A try of an owner whose first acquire is under way does not wait for
/// it: the lock is not to be had right now.
#[tokio::test(start_paused = true)]
async fn a_try_does_not_wait_for_its_owners_acquire_under_way() {
    let (r, holds, takes) = fresh();
    let start = Instant::now();
    let first = r.acquire(Wait::Forever, granting_after(100, &holds, &takes));
    let tried = async {
        tokio::task::yield_now().await;
        let out = r.acquire(Wait::Try, granting(&holds, &takes)).await;
        (out, start.elapsed())
    };
    let (first, (tried, after)) = tokio::join!(first, tried);
    assert_eq!(first, Ok(true));
    assert_eq!(tried, Ok(false));
    assert_eq!(after, Duration::ZERO);
    assert_eq!(takes.load(Ordering::Relaxed), 1);
    // Once the hold is in, a try re-enters at once.
    assert_eq!(
        r.acquire(Wait::Try, granting(&holds, &takes)).await,
        Ok(true)
    );
    assert_eq!(r.count(), 2);
}

#[tokio::test]
async fn a_refused_take_leaves_nothing() {
    let r = Reentrant::<TestHold>::new();
    let refused = r
        .acquire(Wait::Until(Instant::now()), |_| async { Ok(None) })
        .await;
    assert_eq!(refused, Ok(false));
    assert!(r.owners.is_empty());
    assert!(matches!(r.release(), Err(Error::NotOwner)));
}

// ---------------------------------------------------------------------------
// Property test
// ---------------------------------------------------------------------------

const OWNERS: usize = 3;

/// How the test answers a first acquire's `take`.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Grant,
    Refuse,
    Fail,
}

/// One step. Indexes are taken modulo what exists at that step, so every
/// sequence (and every shrunk one) can run.
#[derive(Clone, Debug)]
enum Op {
    /// Owner `owner` starts an acquire; with `within`, its deadline is
    /// `2 * within + 1` ms from now (odd, so never on a time step's end).
    Acquire { owner: usize, within: Option<u64> },
    /// A `take` under way gets its answer.
    Answer { take: usize, answer: Answer },
    /// An acquire under way is dropped.
    Cancel { acquire: usize },
    /// Owner `owner` releases once.
    Release { owner: usize },
    /// Owner `owner`'s hold, if any, is lost.
    Lose { owner: usize },
    /// Time moves on by `2 * half` ms.
    Wait { half: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..OWNERS, proptest::option::of(0..10u64))
            .prop_map(|(owner, within)| Op::Acquire { owner, within }),
        3 => (0..4usize, prop_oneof![
                3 => Just(Answer::Grant),
                1 => Just(Answer::Refuse),
                1 => Just(Answer::Fail),
            ])
            .prop_map(|(take, answer)| Op::Answer { take, answer }),
        1 => (0..8usize).prop_map(|acquire| Op::Cancel { acquire }),
        3 => (0..OWNERS).prop_map(|owner| Op::Release { owner }),
        1 => (0..OWNERS).prop_map(|owner| Op::Lose { owner }),
        1 => (1..8u64).prop_map(|half| Op::Wait { half }),
    ]
}

type Acquiring<'a> = Pin<Box<dyn Future<Output = Result<bool>> + 'a>>;

/// Where an acquire under way stands, in the model.
#[derive(Debug)]
enum Stage {
    /// Not polled yet.
    New,
    /// Waits for the first acquire `on` of its owner.
    Behind { on: u64 },
    /// Its `take` runs; `answer` once the test gave it.
    Taking { answer: Option<Answer> },
}

/// An acquire under way.
struct Flight<'a> {
    id: u64,
    owner: usize,
    deadline: Option<u64>,
    stage: Stage,
    future: Acquiring<'a>,
    answer: Option<oneshot::Sender<Result<Option<TestHold>>>>,
}

/// What one owner should have.
#[derive(Default, Debug, Clone, PartialEq)]
struct OwnerModel {
    /// The hold's id and count.
    held: Option<(u64, u64)>,
    /// The acquire whose `take` runs.
    taking: Option<u64>,
}

#[derive(Default)]
struct Model {
    owners: [OwnerModel; OWNERS],
    /// Holds the test declared lost.
    lost: Vec<u64>,
    /// `take` calls expected so far: (acquire, owner).
    takes: Vec<(u64, usize)>,
    forgotten: Vec<u64>,
    /// The id the stand-in gives its next hold.
    next_hold: u64,
    now: u64,
}

impl Model {
    /// What polling `flight` should give, updating the model; `None`
    /// while it stays pending.
    fn poll(&mut self, flight: &mut Flight<'_>) -> Option<Result<bool>> {
        let owner = flight.owner;
        let passed = flight.deadline.is_some_and(|d| d <= self.now);
        match flight.stage {
            Stage::Taking { answer: None } => return None,
            Stage::Taking {
                answer: Some(answer),
            } => {
                self.owners[owner].taking = None;
                return Some(match answer {
                    Answer::Grant => {
                        self.owners[owner].held = Some((self.next_hold, 1));
                        self.next_hold += 1;
                        Ok(true)
                    }
                    Answer::Refuse => Ok(false),
                    Answer::Fail => Err(Error::ConnectionLoss),
                });
            }
            Stage::Behind { on } if self.owners[owner].taking == Some(on) => {
                return passed.then_some(Ok(false));
            }
            Stage::Behind { .. } | Stage::New => {}
        }
        if let Some((id, count)) = self.owners[owner].held {
            if self.lost.contains(&id) {
                self.owners[owner].held = None;
                self.forgotten.push(id);
                return Some(Err(lost(id)));
            }
            self.owners[owner].held = Some((id, count + 1));
            return Some(Ok(true));
        }
        if let Some(on) = self.owners[owner].taking {
            flight.stage = Stage::Behind { on };
            return passed.then_some(Ok(false));
        }
        self.owners[owner].taking = Some(flight.id);
        self.takes.push((flight.id, owner));
        flight.stage = Stage::Taking { answer: None };
        None
    }
}

/// The stand-in's `take` for acquire `id`: logs the call and its owner,
/// then waits for the test's answer.
fn answered_take(
    id: u64,
    log: &Arc<Mutex<Vec<(u64, Owner)>>>,
    answer: oneshot::Receiver<Result<Option<TestHold>>>,
) -> impl FnOnce(Wait) -> futures::future::BoxFuture<'static, Result<Option<TestHold>>> {
    let log = log.clone();
    move |_| {
        lock(&log).push((id, Owner::current()));
        async move {
            match answer.await {
                Ok(answer) => answer,
                Err(_) => std::future::pending().await,
            }
        }
        .boxed()
    }
}

async fn run_sequence(ops: &[Op]) -> std::result::Result<(), TestCaseError> {
    // Owners are real tasks, kept alive (so their ids stay theirs) while
    // the test acts for them.
    let parked: Vec<_> = (0..OWNERS)
        .map(|_| tokio::spawn(std::future::pending::<()>()))
        .collect();
    let owners: Vec<Owner> = parked.iter().map(|task| Owner::Task(task.id())).collect();
    let result = run_as(ops, &owners).await;
    for task in parked {
        task.abort();
    }
    result
}

async fn run_as(ops: &[Op], owners: &[Owner]) -> std::result::Result<(), TestCaseError> {
    let start = Instant::now();
    let r = Reentrant::<TestHold>::new();
    let holds = Arc::new(Holds::default());
    let log: Arc<Mutex<Vec<(u64, Owner)>>> = Arc::default();
    let mut model = Model::default();
    let mut flights: Vec<Flight<'_>> = Vec::new();
    let mut next_flight = 0u64;
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Acquire { owner, within } => {
                let id = next_flight;
                next_flight += 1;
                let deadline = within.map(|w| model.now + 2 * w + 1);
                let (answer, answered) = oneshot::channel();
                let take = answered_take(id, &log, answered);
                let at = deadline.map(|ms| start + Duration::from_millis(ms));
                let future = Owner::act_for(
                    owners[owner],
                    r.acquire(at.map_or(Wait::Forever, Wait::Until), take),
                )
                .boxed_local();
                flights.push(Flight {
                    id,
                    owner,
                    deadline,
                    stage: Stage::New,
                    future,
                    answer: Some(answer),
                });
            }
            Op::Answer { take, answer } => {
                let taking: Vec<usize> = (0..flights.len())
                    .filter(|i| matches!(flights[*i].stage, Stage::Taking { answer: None }))
                    .collect();
                if !taking.is_empty() {
                    let flight = &mut flights[taking[take % taking.len()]];
                    let reply = match answer {
                        Answer::Grant => Ok(Some(holds.grant())),
                        Answer::Refuse => Ok(None),
                        Answer::Fail => Err(Error::ConnectionLoss),
                    };
                    if let Some(sender) = flight.answer.take() {
                        let _ = sender.send(reply);
                    }
                    flight.stage = Stage::Taking {
                        answer: Some(answer),
                    };
                }
            }
            Op::Cancel { acquire } if !flights.is_empty() => {
                let gone = flights.remove(acquire % flights.len());
                if model.owners[gone.owner].taking == Some(gone.id) {
                    model.owners[gone.owner].taking = None;
                }
                drop(gone);
            }
            Op::Release { owner } => {
                let released = Owner::act_for(owners[owner], async { r.release() })
                    .now_or_never()
                    .ok_or_else(|| TestCaseError::fail("release is not synchronous"))?
                    .map(|hold| hold.map(|h| h.id));
                let expected = match model.owners[owner].held {
                    Some((id, 1)) => {
                        model.owners[owner].held = None;
                        Ok(Some(id))
                    }
                    Some((id, count)) => {
                        model.owners[owner].held = Some((id, count - 1));
                        Ok(None)
                    }
                    None => Err(Error::NotOwner),
                };
                prop_assert_eq!(
                    released,
                    expected,
                    "step {}: release by owner {}",
                    step,
                    owner
                );
            }
            Op::Lose { owner } => {
                if let Some((id, _)) = model.owners[owner].held {
                    holds.lose(id);
                    model.lost.push(id);
                }
            }
            Op::Wait { half } => {
                tokio::time::sleep(Duration::from_millis(2 * half)).await;
                model.now += 2 * half;
            }
            Op::Cancel { .. } => {}
        }
        settle(&mut model, &mut flights, &log, owners, step)?;
        check(&r, &model, &holds, owners, step)?;
    }
    drop(flights);
    prop_assert_eq!(r.owners.len(), r.holders(), "marks left behind");
    Ok(())
}

/// Polls every acquire under way, in order, until a pass changes nothing;
/// each poll's outcome is compared with the model's.
fn settle(
    model: &mut Model,
    flights: &mut Vec<Flight<'_>>,
    log: &Mutex<Vec<(u64, Owner)>>,
    owners: &[Owner],
    step: usize,
) -> std::result::Result<(), TestCaseError> {
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    for _pass in 0..16 {
        let before = model.owners.clone();
        let mut done = Vec::new();
        for (at, flight) in flights.iter_mut().enumerate() {
            let expected = model.poll(flight);
            let got = match flight.future.as_mut().poll(&mut cx) {
                Poll::Ready(out) => Some(out),
                Poll::Pending => None,
            };
            prop_assert_eq!(
                &got,
                &expected,
                "step {}: acquire {} of owner {}",
                step,
                flight.id,
                flight.owner
            );
            let takes: Vec<(u64, Owner)> = model
                .takes
                .iter()
                .map(|(id, owner)| (*id, owners[*owner]))
                .collect();
            prop_assert_eq!(
                &*lock(log),
                &takes,
                "step {}: calls of take after polling acquire {}",
                step,
                flight.id
            );
            if got.is_some() {
                done.push(at);
            }
        }
        let progress = !done.is_empty() || before != model.owners;
        for at in done.into_iter().rev() {
            flights.remove(at);
        }
        if !progress {
            return Ok(());
        }
    }
    Err(TestCaseError::fail(format!("step {step}: no rest")))
}

/// The invariants that hold after every step.
fn check(
    r: &Reentrant<TestHold>,
    model: &Model,
    holds: &Holds,
    owners: &[Owner],
    step: usize,
) -> std::result::Result<(), TestCaseError> {
    for (n, (owner, expected)) in owners.iter().zip(&model.owners).enumerate() {
        prop_assert_eq!(
            held_id(r, *owner),
            expected.held.map(|(id, _)| id),
            "step {}: owner {}'s hold",
            step,
            n
        );
        let count = Owner::act_for(*owner, async { r.count() }).now_or_never();
        prop_assert_eq!(
            count,
            Some(expected.held.map_or(0, |(_, count)| count)),
            "step {}: owner {}'s count",
            step,
            n
        );
    }
    let holders = model.owners.iter().filter(|o| o.held.is_some()).count();
    prop_assert_eq!(r.holders(), holders, "step {}: holders", step);
    prop_assert_eq!(
        holds.forgotten(),
        model.forgotten.clone(),
        "step {}: forgotten holds",
        step
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random acquires, re-entries, answers, cancellations, releases,
    /// losses and time steps over three owners, checked against the model
    /// after every step: counts per owner, `NotOwner` without a hold, no
    /// re-entry into a lost hold, one `take` at a time per owner, no mark
    /// left by a dropped acquire.
    #[test]
    fn the_owner_map_follows_its_model(ops in proptest::collection::vec(op(), 1..60)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        runtime.block_on(run_sequence(&ops))?;
    }
}
