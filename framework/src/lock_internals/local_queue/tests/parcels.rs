//! Parcels handed over with turns (the cohort hand-off's nodes on their
//! way), with several turns and several waiters, every waiter served or
//! cancelled, in every order: each parcel goes to exactly one task that
//! gets a turn, and one is dropped (its node deleted) only once nobody is
//! left waiting to take it, at that moment, not when the lock goes idle.

use super::*;

/// A parcel that says when it is dropped without having been opened.
struct Parcel {
    id: usize,
    unopened: Option<Arc<Mutex<Vec<usize>>>>,
}

impl Parcel {
    /// The parcel's id; it no longer counts as dropped unopened.
    fn open(mut self) -> usize {
        self.unopened = None;
        self.id
    }
}

impl Drop for Parcel {
    fn drop(&mut self) {
        if let Some(dropped) = &self.unopened {
            dropped
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(self.id);
        }
    }
}

/// What a waiter does once the parcels are handed over.
#[derive(Clone, Copy, Debug)]
enum Step {
    Served,
    Cancelled,
}

/// Every order of three waiters, each served or cancelled.
fn scenarios() -> Vec<Vec<(usize, Step)>> {
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    let mut all = Vec::new();
    for order in orders {
        for mask in 0..8 {
            let step = |w: usize| match mask >> w & 1 {
                0 => Step::Served,
                _ => Step::Cancelled,
            };
            all.push(order.iter().map(|&w| (w, step(w))).collect());
        }
    }
    all
}

/// Two turns, both out; three waiters queued; `parcels` of the two turns
/// given back with a parcel (the other plainly); then the waiters served or
/// cancelled in `steps`' order.
fn run(parcels: usize, steps: &[(usize, Step)]) {
    let queues = Arc::new(LocalQueues::<Parcel>::default());
    let k = key("/parcels", "lock", 2);
    let dropped = Arc::new(Mutex::new(Vec::new()));
    let holders = [served(&queues, &k), served(&queues, &k)];
    let mut waiters: Vec<Option<Pending<Parcel>>> =
        (0..3).map(|_| Some(queued(&queues, &k))).collect();
    for (id, holder) in holders.into_iter().enumerate() {
        if id < parcels {
            let handed = holder
                .handle()
                .expect("a turn with a permit")
                .hand_over(|| {
                    Some(Parcel {
                        id,
                        unopened: Some(dropped.clone()),
                    })
                });
            assert!(handed, "a waiter waits: the parcel is left");
        }
        drop(holder);
    }
    let mut turns = Vec::new();
    let mut opened = Vec::new();
    let mut served_count = 0;
    for &(w, step) in steps {
        let Some(mut wait) = waiters[w].take() else {
            continue;
        };
        match step {
            Step::Cancelled => drop(wait),
            Step::Served => match poll(&mut wait) {
                Poll::Ready(mut turn) => {
                    served_count += 1;
                    opened.extend(turn.take_parcel().map(Parcel::open));
                    turns.push(turn);
                }
                // No turn free for it (two served before it): it waits on.
                Poll::Pending => waiters[w] = Some(wait),
            },
        }
        let unopened = dropped.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let waiting = waiters.iter().filter(|w| w.is_some()).count();
        let left = queues.gates.get(&k).map_or(0, |gate| gate.parcels().len());
        let context = format!(
            "{parcels} parcels, steps {steps:?}, after {w} {step:?}: opened {opened:?}, \
             dropped unopened {unopened:?}, {left} left in the gate, {waiting} waiting"
        );
        // Each parcel is in exactly one place.
        assert_eq!(opened.len() + unopened.len() + left, parcels, "{context}");
        // A task that got a turn the hand-over freed got its parcel, as long
        // as there was one.
        assert_eq!(opened.len(), served_count.min(parcels), "{context}");
        if waiting == 0 {
            // Nobody left to take one: none stays behind.
            assert_eq!(left, 0, "{context}");
        } else {
            // Nothing dropped while someone could still take it.
            assert!(unopened.is_empty(), "{context}");
        }
    }
    drop(turns);
    drop(waiters);
    assert!(
        queues.gates.is_empty(),
        "{parcels} parcels, steps {steps:?}: an idle lock keeps no gate"
    );
}

#[test]
fn each_parcel_goes_to_one_taker_or_is_dropped_once_nobody_waits() {
    for parcels in [1, 2] {
        for steps in scenarios() {
            run(parcels, &steps);
        }
    }
}
