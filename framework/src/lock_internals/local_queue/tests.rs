//! The local queues on their own, without a server: unit tests of each rule
//! and property tests that run random sequences of acquires, tries,
//! cancellations and releases against a model of the queue.
//!
//! Most tests poll the turn futures by hand (a no-op waker, one poll at a
//! time), so the test decides exactly when a waiter arrives, when it is
//! looked at again and when it is dropped; the timed ones run many tokio
//! tasks on a current-thread runtime with paused time.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use super::{Key, LocalQueues, LocalTurn};

/// Paused time jumps to this when every task waits for a turn that never
/// comes: a test that would hang fails instead.
const HOUR: Duration = Duration::from_secs(3600);

fn key(path: &str, lock: &str, turns: u32) -> Key {
    (path.into(), lock.into(), turns)
}

/// A task's wait for a turn (with parcels of type `P`), polled by hand.
type Pending<P = ()> = Pin<Box<dyn Future<Output = LocalTurn<P>> + Send>>;

/// Starts a wait for a turn and polls it once (so it is queued, or served).
fn arrive<P: Send + 'static>(
    queues: &Arc<LocalQueues<P>>,
    key: &Key,
) -> std::result::Result<LocalTurn<P>, Pending<P>> {
    let queues = queues.clone();
    let key = key.clone();
    let mut wait: Pending<P> = Box::pin(async move { queues.turn(key).await });
    match poll(&mut wait) {
        Poll::Ready(turn) => Ok(turn),
        Poll::Pending => Err(wait),
    }
}

fn poll<P>(wait: &mut Pending<P>) -> Poll<LocalTurn<P>> {
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    wait.as_mut().poll(&mut cx)
}

fn queued<P: Send + 'static>(queues: &Arc<LocalQueues<P>>, key: &Key) -> Pending<P> {
    match arrive(queues, key) {
        Ok(turn) => panic!("{turn:?} was served at once, expected to queue"),
        Err(wait) => wait,
    }
}

fn served<P: Send + 'static>(queues: &Arc<LocalQueues<P>>, key: &Key) -> LocalTurn<P> {
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
    let queues = Arc::new(LocalQueues::<()>::default());
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
    let queues = Arc::new(LocalQueues::<()>::default());
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
    let queues = Arc::new(LocalQueues::<()>::default());
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
    let queues = Arc::new(LocalQueues::<()>::default());
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
    let queues = Arc::new(LocalQueues::<()>::default());
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
    let queues = Arc::new(LocalQueues::<()>::default());
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
    let queues = Arc::new(LocalQueues::<()>::default());
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
    let queues = Arc::new(LocalQueues::<()>::default());
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
    let queues = Arc::new(LocalQueues::<()>::default());
    let turn = served(&queues, &key("/late", "lock", 1));
    drop(queues);
    drop(turn);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_wait_leaves_the_queue_and_the_next_waiter_is_served() {
    let queues = Arc::new(LocalQueues::<()>::default());
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
    let queues = Arc::new(LocalQueues::<()>::default());
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

mod parcels;
mod properties;
