//! The shared read nodes on their own, without a server: the generations
//! and their members run against a stand-in [`Backend`] that only plays
//! what the session would do to a node (its acquire granted, failed or
//! still waiting; the grant lost; the node deleted or withdrawn) and
//! records it. Unit tests of each rule here, property tests of random
//! sequences in `properties`.
//!
//! The members' acquires are polled by hand (a no-op waker, one poll at a
//! time), and the stand-in settles a node only when a test says so, so a
//! test decides every interleaving.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::task::{Context, Poll};

use super::{Backend, Generation, Membership, ShareKey, SharedNodes};
use crate::{Error, Result};

/// What became of a node the stand-in was asked to acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Its acquire still runs.
    Waiting,
    /// Granted (the acquire returned a hold).
    Granted,
    /// The acquire failed (it left no node).
    Failed,
    /// The acquire was aborted before it settled (its cancel safety
    /// deleted the node).
    Withdrawn,
}

impl Outcome {
    /// Whether a node with this outcome, deleted `deletes` times, ended
    /// exactly once: a granted node by one delete, a failed or withdrawn
    /// one by none (it left no node); a waiting one has not ended.
    pub(super) fn ended_once(self, deletes: usize) -> bool {
        match self {
            Outcome::Granted => deletes == 1,
            Outcome::Failed | Outcome::Withdrawn => deletes == 0,
            Outcome::Waiting => false,
        }
    }
}

/// More questions about one lost grant than any test has members.
const SPIN: usize = 10_000;

/// The stand-in's record of one node.
pub(super) struct Node {
    /// The generation the outcome goes to, until it has gone (or the abort
    /// took effect).
    pending: Option<Arc<Generation<Stand>>>,
    /// The generation, to see that it is freed once it is over.
    pub(super) generation: Weak<Generation<Stand>>,
    pub(super) outcome: Outcome,
    /// How many times its acquire was asked to abort.
    pub(super) aborts: usize,
    /// Whether the grant was lost (its session went, say).
    pub(super) lost: bool,
    /// How many times the lost grant was asked about.
    lost_asked: usize,
    /// How many times the granted node was deleted.
    pub(super) deletes: usize,
    /// How many holds were made over it (the acquire's own included).
    pub(super) holds: usize,
}

/// The stand-in for the lock engine: node `n` is the `n`th acquire started.
#[derive(Clone, Default)]
pub(super) struct Stand {
    nodes: Arc<Mutex<Vec<Node>>>,
    /// Holds made and not yet dropped.
    live_holds: Arc<AtomicUsize>,
}

impl Stand {
    pub(super) fn nodes(&self) -> MutexGuard<'_, Vec<Node>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many node acquires were started.
    pub(super) fn started(&self) -> usize {
        self.nodes().len()
    }

    pub(super) fn live_holds(&self) -> usize {
        self.live_holds.load(Ordering::SeqCst)
    }

    /// The generation waiting for node `n`'s outcome, which is now `outcome`.
    fn take_pending(&self, n: usize, outcome: Outcome) -> Arc<Generation<Stand>> {
        let mut nodes = self.nodes();
        let node = &mut nodes[n];
        assert_eq!(node.outcome, Outcome::Waiting, "node {n} settled twice");
        node.outcome = outcome;
        node.pending
            .take()
            .unwrap_or_else(|| panic!("node {n} has no generation waiting for it"))
    }

    /// Node `n`'s acquire returns a hold (even if it was asked to abort:
    /// the grant came first).
    pub(super) fn grant(&self, n: usize) {
        let generation = self.take_pending(n, Outcome::Granted);
        let hold = self.hold(&n);
        generation.settle(Ok(hold));
    }

    /// Node `n`'s acquire fails.
    pub(super) fn fail(&self, n: usize) {
        let generation = self.take_pending(n, Outcome::Failed);
        generation.settle(Err(Error::NoAuth));
    }

    /// The abort of node `n`'s acquire takes effect: the acquire is dropped
    /// without an outcome, and its node deleted by its own cancel safety.
    pub(super) fn withdraw(&self, n: usize) {
        assert_eq!(self.nodes()[n].aborts, 1, "node {n} withdrawn unasked");
        let generation = self.take_pending(n, Outcome::Withdrawn);
        drop(generation);
    }

    /// Node `n`'s grant is lost.
    pub(super) fn lose(&self, n: usize) {
        self.nodes()[n].lost = true;
    }
}

impl Backend for Stand {
    type Hold = StandHold;
    type Grant = usize;
    type Task = usize;

    fn start(generation: &Arc<Generation<Self>>) -> usize {
        let mut nodes = generation.backend.nodes();
        nodes.push(Node {
            pending: Some(generation.clone()),
            generation: Arc::downgrade(generation),
            outcome: Outcome::Waiting,
            aborts: 0,
            lost: false,
            lost_asked: 0,
            deletes: 0,
            holds: 0,
        });
        nodes.len() - 1
    }

    fn abort(&self, task: usize) {
        self.nodes()[task].aborts += 1;
    }

    fn grant_of(hold: &StandHold) -> usize {
        hold.node
    }

    fn is_lost(&self, grant: &usize) -> bool {
        let mut nodes = self.nodes();
        let node = &mut nodes[*grant];
        if node.lost {
            // Each member asks once before it moves on: more means a
            // reader keeps coming back to the lost grant, in a loop that
            // never yields, which would hang the test.
            node.lost_asked += 1;
            assert!(
                node.lost_asked < SPIN,
                "node {grant}'s lost grant was asked about {SPIN} times: a reader \
                 keeps rejoining a generation whose grant is lost"
            );
        }
        node.lost
    }

    fn hold(&self, grant: &usize) -> StandHold {
        self.nodes()[*grant].holds += 1;
        self.live_holds.fetch_add(1, Ordering::SeqCst);
        StandHold {
            node: *grant,
            stand: self.clone(),
            share: OnceLock::new(),
            released: AtomicBool::new(false),
        }
    }

    fn join_share(hold: &StandHold, share: Membership<Self>) {
        assert!(hold.share.set(share).is_ok(), "a hold joined two shares");
    }

    fn is_trusted(hold: &StandHold) -> bool {
        !hold.stand.nodes()[hold.node].lost
    }

    fn delete_in_background(&self, grant: &usize) {
        self.nodes()[*grant].deletes += 1;
    }
}

/// A member's hold, as the engine's [`Hold`](crate::lock_internals::Hold)
/// treats its share: the release leaves the share and deletes the node if
/// that was the last one (or there is no share); a hold dropped unreleased
/// leaves its share too.
pub(super) struct StandHold {
    pub(super) node: usize,
    stand: Stand,
    share: OnceLock<Membership<Stand>>,
    released: AtomicBool,
}

impl StandHold {
    pub(super) fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
        if self.share.get().is_none_or(Membership::leave) {
            self.stand.delete_in_background(&self.node);
        }
    }
}

impl Drop for StandHold {
    fn drop(&mut self) {
        self.stand.live_holds.fetch_sub(1, Ordering::SeqCst);
        if self.share.get().is_some_and(Membership::leave) {
            self.stand.delete_in_background(&self.node);
        }
    }
}

pub(super) fn key(path: &str, lock: &str, data: &[u8]) -> ShareKey {
    (path.into(), lock.into(), data.into())
}

/// A reader's acquire, polled by hand.
pub(super) type Pending = Pin<Box<dyn Future<Output = Result<StandHold>>>>;

pub(super) fn poll(wait: &mut Pending) -> Poll<Result<StandHold>> {
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    wait.as_mut().poll(&mut cx)
}

/// A reader starts to acquire (polled once).
pub(super) fn arrive(nodes: &Arc<SharedNodes<Stand>>, stand: &Stand, key: &ShareKey) -> Pending {
    let (nodes, stand, key) = (nodes.clone(), stand.clone(), key.clone());
    let mut wait: Pending = Box::pin(async move { nodes.acquire(&stand, key).await });
    if let Poll::Ready(outcome) = poll(&mut wait) {
        panic!(
            "a reader was served without waiting for a node (got {:?})",
            outcome.map(|hold| hold.node)
        );
    }
    wait
}

fn held(wait: &mut Pending) -> StandHold {
    match poll(wait) {
        Poll::Ready(Ok(hold)) => hold,
        Poll::Ready(Err(err)) => panic!("expected a hold, got {err}"),
        Poll::Pending => panic!("expected a hold, the reader still waits"),
    }
}

fn still_waits(wait: &mut Pending) {
    if let Poll::Ready(outcome) = poll(wait) {
        panic!(
            "expected the reader to wait, got {:?}",
            outcome.map(|hold| hold.node)
        );
    }
}

struct World {
    stand: Stand,
    nodes: Arc<SharedNodes<Stand>>,
}

impl World {
    fn new() -> World {
        World {
            stand: Stand::default(),
            nodes: Arc::new(SharedNodes::default()),
        }
    }

    fn arrive(&self, key: &ShareKey) -> Pending {
        arrive(&self.nodes, &self.stand, key)
    }

    fn node(&self, n: usize) -> (Outcome, usize, usize, usize) {
        let nodes = self.stand.nodes();
        let node = &nodes[n];
        (node.outcome, node.aborts, node.deletes, node.holds)
    }

    /// Every generation is over and freed, no hold is left.
    fn assert_idle(&self) {
        assert!(self.nodes.open.is_empty(), "a generation is still open");
        assert_eq!(self.stand.live_holds(), 0, "a hold outlived its member");
        for (n, node) in self.stand.nodes().iter().enumerate() {
            assert!(
                node.generation.upgrade().is_none(),
                "the generation of node {n} was never freed"
            );
        }
    }
}

#[test]
fn readers_arriving_while_a_node_waits_share_it() {
    let w = World::new();
    let k = key("/r", "read", b"");
    let mut readers: Vec<Pending> = (0..3).map(|_| w.arrive(&k)).collect();
    assert_eq!(w.stand.started(), 1, "three waiting readers, one node");
    assert_eq!(w.nodes.waiting("/r"), 2);
    w.stand.grant(0);
    let holds: Vec<StandHold> = readers.iter_mut().map(held).collect();
    assert!(holds.iter().all(|hold| hold.node == 0));
    // Each member has a hold of its own: the acquire's, and two more.
    assert_eq!(w.node(0), (Outcome::Granted, 0, 0, 3));
    assert_eq!(w.stand.live_holds(), 3);
    assert_eq!(w.nodes.waiting("/r"), 0);
    drop(holds);
    assert_eq!(w.node(0).2, 1);
    w.assert_idle();
}

#[test]
fn a_granted_generation_is_closed_and_the_next_reader_gets_a_new_node() {
    let w = World::new();
    let k = key("/close", "read", b"");
    let mut first = w.arrive(&k);
    w.stand.grant(0);
    assert!(w.nodes.open.is_empty(), "a granted generation stayed open");
    // The next reader queues behind whatever came after the grant (a
    // writer, say), with a node of its own; the first still holds.
    let mut second = w.arrive(&k);
    assert_eq!(w.stand.started(), 2);
    let first = held(&mut first);
    assert_eq!(first.node, 0);
    still_waits(&mut second);
    assert_eq!(w.nodes.waiting("/close"), 0);
    let mut third = w.arrive(&k);
    assert_eq!(w.stand.started(), 2, "the third reader shares the new node");
    assert_eq!(w.nodes.waiting("/close"), 1);
    w.stand.grant(1);
    assert_eq!(held(&mut second).node, 1);
    assert_eq!(held(&mut third).node, 1);
    drop(first);
    assert_eq!(w.node(0), (Outcome::Granted, 0, 1, 1));
    assert_eq!(w.node(1), (Outcome::Granted, 0, 1, 2));
    w.assert_idle();
}

#[test]
fn keys_that_differ_do_not_share() {
    let w = World::new();
    let keys = [
        key("/k", "read", b""),
        key("/k", "other", b""),
        key("/k", "read", b"data"),
        key("/l", "read", b""),
    ];
    let mut readers: Vec<Pending> = keys.iter().map(|k| w.arrive(k)).collect();
    readers.push(w.arrive(&keys[2]));
    assert_eq!(w.stand.started(), 4);
    assert_eq!(w.nodes.waiting("/k"), 1);
    assert_eq!(w.nodes.waiting("/l"), 0);
    for n in 0..4 {
        w.stand.grant(n);
    }
    let nodes: Vec<usize> = readers.iter_mut().map(|r| held(r).node).collect();
    assert_eq!(nodes, [0, 1, 2, 3, 2]);
    w.assert_idle();
}

#[test]
fn a_cancelled_member_leaves_and_the_others_keep_the_node() {
    let w = World::new();
    let k = key("/cancel", "read", b"");
    let first = w.arrive(&k);
    let mut second = w.arrive(&k);
    drop(first);
    assert_eq!(w.node(0).1, 0, "the node was withdrawn under a waiter");
    assert_eq!(w.nodes.waiting("/cancel"), 0);
    still_waits(&mut second);
    w.stand.grant(0);
    let hold = held(&mut second);
    assert_eq!(w.node(0), (Outcome::Granted, 0, 0, 1));
    hold.release();
    assert_eq!(w.node(0).2, 1);
    drop(hold);
    assert_eq!(w.node(0).2, 1, "a released hold's drop deleted again");
    w.assert_idle();
}

#[test]
fn the_last_waiter_leaving_withdraws_the_node() {
    let w = World::new();
    let k = key("/withdraw", "read", b"");
    let readers = [w.arrive(&k), w.arrive(&k)];
    drop(readers);
    assert_eq!(w.node(0), (Outcome::Waiting, 1, 0, 0));
    assert!(
        w.nodes.open.is_empty(),
        "an abandoned generation stayed open"
    );
    // A reader arriving now does not join the withdrawn node.
    let mut next = w.arrive(&k);
    assert_eq!(w.stand.started(), 2);
    w.stand.withdraw(0);
    still_waits(&mut next);
    w.stand.grant(1);
    drop(held(&mut next));
    assert_eq!(w.node(0), (Outcome::Withdrawn, 1, 0, 0));
    assert_eq!(w.node(1), (Outcome::Granted, 0, 1, 1));
    w.assert_idle();
}

#[test]
fn a_grant_racing_the_withdrawal_is_released_and_closes_nothing_else() {
    let w = World::new();
    let k = key("/race", "read", b"");
    drop(w.arrive(&k));
    assert_eq!(w.node(0).1, 1);
    let mut next = w.arrive(&k);
    // The abandoned node's acquire returns before its abort takes effect:
    // nobody takes the hold, so it is released, and the newer generation
    // stays open.
    w.stand.grant(0);
    assert_eq!(w.node(0), (Outcome::Granted, 1, 1, 1));
    assert_eq!(w.stand.live_holds(), 0);
    assert_eq!(
        w.nodes.open.len(),
        1,
        "a stale grant closed a newer generation"
    );
    let mut third = w.arrive(&k);
    assert_eq!(w.stand.started(), 2);
    still_waits(&mut next);
    w.stand.grant(1);
    drop((held(&mut next), held(&mut third)));
    assert_eq!(w.node(1), (Outcome::Granted, 0, 1, 2));
    w.assert_idle();
}

#[test]
fn a_failure_racing_the_withdrawal_leaves_nothing() {
    let w = World::new();
    let k = key("/race-fail", "read", b"");
    drop(w.arrive(&k));
    w.stand.fail(0);
    assert_eq!(w.node(0), (Outcome::Failed, 1, 0, 0));
    w.assert_idle();
}

#[test]
fn the_last_release_deletes_the_node_once() {
    let w = World::new();
    let k = key("/last", "read", b"");
    let mut readers: Vec<Pending> = (0..3).map(|_| w.arrive(&k)).collect();
    w.stand.grant(0);
    let mut holds: Vec<StandHold> = readers.iter_mut().map(held).collect();
    let last = holds.pop();
    for hold in &holds {
        hold.release();
        hold.release();
    }
    assert_eq!(w.node(0).2, 0, "deleted while a member still holds");
    drop(holds);
    assert_eq!(w.node(0).2, 0);
    // The last share dropped without a release still deletes the node.
    drop(last);
    assert_eq!(w.node(0), (Outcome::Granted, 0, 1, 3));
    w.assert_idle();
}

#[test]
fn members_gone_between_the_grant_and_their_claim_delete_the_node() {
    let w = World::new();
    let k = key("/unclaimed", "read", b"");
    let readers = [w.arrive(&k), w.arrive(&k)];
    w.stand.grant(0);
    // Nobody took the acquire's hold: the last leaver deletes the node,
    // and the hold does not outlive it.
    drop(readers);
    assert_eq!(w.node(0), (Outcome::Granted, 0, 1, 1));
    w.assert_idle();

    let w = World::new();
    let mut claimer = w.arrive(&k);
    let leaver = w.arrive(&k);
    w.stand.grant(0);
    drop(leaver);
    let hold = held(&mut claimer);
    assert_eq!(w.node(0).2, 0);
    drop(hold);
    assert_eq!(w.node(0), (Outcome::Granted, 0, 1, 1));
    w.assert_idle();
}

#[test]
fn a_lost_grant_gives_no_hold_and_its_members_wait_with_the_next_node() {
    let w = World::new();
    let k = key("/lost", "read", b"");
    let mut readers: Vec<Pending> = (0..3).map(|_| w.arrive(&k)).collect();
    w.stand.grant(0);
    w.stand.lose(0);
    for reader in &mut readers {
        still_waits(reader);
    }
    // One new node for the three, and the lost one deleted once: its first
    // claimant took (and released) the acquire's hold, the others made
    // none.
    assert_eq!(w.stand.started(), 2);
    assert_eq!(
        w.node(0),
        (Outcome::Granted, 0, 1, 1),
        "no hold may be made over a lost grant, and it is deleted once"
    );
    assert_eq!(w.nodes.waiting("/lost"), 2);
    w.stand.grant(1);
    let holds: Vec<StandHold> = readers.iter_mut().map(held).collect();
    assert!(holds.iter().all(|hold| hold.node == 1));
    drop(holds);
    assert_eq!(w.node(1), (Outcome::Granted, 0, 1, 3));
    w.assert_idle();
}

#[test]
fn a_grant_lost_after_a_share_was_taken_gives_no_more_holds() {
    let w = World::new();
    let k = key("/lost-late", "read", b"");
    let mut first = w.arrive(&k);
    let mut second = w.arrive(&k);
    w.stand.grant(0);
    let first = held(&mut first);
    w.stand.lose(0);
    still_waits(&mut second);
    assert_eq!(
        w.node(0),
        (Outcome::Granted, 0, 0, 1),
        "a lost grant made a hold"
    );
    assert_eq!(w.stand.started(), 2);
    // The holder of the lost share still releases it, once.
    first.release();
    drop(first);
    assert_eq!(w.node(0).2, 1);
    drop(second);
    w.stand.withdraw(1);
    w.assert_idle();
}

#[test]
fn a_failed_acquire_gives_every_member_the_error() {
    let w = World::new();
    let k = key("/fail", "read", b"");
    let mut readers: Vec<Pending> = (0..3).map(|_| w.arrive(&k)).collect();
    w.stand.fail(0);
    for reader in &mut readers {
        match poll(reader) {
            Poll::Ready(Err(Error::NoAuth)) => {}
            Poll::Ready(other) => panic!(
                "expected the acquire's error, got {:?}",
                other.map(|h| h.node)
            ),
            Poll::Pending => panic!("a member of a failed generation still waits"),
        }
    }
    assert!(w.nodes.open.is_empty());
    drop(readers);
    assert_eq!(w.node(0), (Outcome::Failed, 0, 0, 0));
    // The next reader starts afresh.
    let mut next = w.arrive(&k);
    w.stand.grant(1);
    drop(held(&mut next));
    w.assert_idle();
}

mod properties;
mod races;
