//! The atomic step of a fenced write ([`while_valid`]) against stand-in
//! holds: what it sends, what it refuses, and that the end of a hold cannot
//! come between its check and its send.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::*;

/// A stand-in hold: a path, a gate, and a latch that its end sets.
#[derive(Debug, Default)]
struct Stand {
    path: String,
    gate: SendGate,
    lost: Mutex<Option<LockLoss>>,
}

impl Stand {
    fn new(path: &str) -> Self {
        Stand {
            path: path.to_owned(),
            ..Stand::default()
        }
    }

    /// Ends the hold as a release does: through the gate.
    fn end(&self) {
        self.gate.ending(|| {
            self.lost
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert(LockLoss::NotHeld);
        });
    }
}

impl Fenced for &Stand {
    fn path(&self) -> &str {
        &self.path
    }

    fn gate(&self) -> &SendGate {
        &self.gate
    }

    fn check(&self) -> std::result::Result<(), LockLoss> {
        match *self.lost.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(loss) => Err(loss),
            None => Ok(()),
        }
    }
}

#[test]
fn valid_holds_send_and_a_lost_one_sends_nothing() {
    let (a, b) = (Stand::new("/l/a"), Stand::new("/l/b"));
    assert_eq!(while_valid(&[&a, &b], || 7), Ok(7));

    b.end();
    let sent = AtomicBool::new(false);
    let refused = while_valid(&[&a, &b], || sent.store(true, Ordering::SeqCst));
    assert_eq!(refused, Err(Error::lock_lost("/l/b", LockLoss::NotHeld)));
    assert!(
        !sent.load(Ordering::SeqCst),
        "a write went out for an ended hold"
    );
    // The first reason stays.
    *a.lost.lock().unwrap_or_else(PoisonError::into_inner) =
        Some(LockLoss::ConnectionState(ConnectionState::Suspended));
    a.end();
    assert_eq!(
        while_valid(&[&a], || ()),
        Err(Error::lock_lost(
            "/l/a",
            LockLoss::ConnectionState(ConnectionState::Suspended)
        ))
    );
}

#[test]
fn no_end_comes_between_the_check_and_the_send() {
    let (a, b) = (Stand::new("/l/a"), Stand::new("/l/b"));
    std::thread::scope(|scope| {
        let (start_tx, start) = std::sync::mpsc::channel::<()>();
        let b = &b;
        let ender = scope.spawn(move || {
            let _ = start.recv();
            b.end();
        });
        let sent = while_valid(&[&a, b, &a], || {
            // Inside the step neither hold can end (each gate is passed
            // once, though `a` is listed twice) ...
            assert!(a.gate.0.try_write().is_err() && b.gate.0.try_write().is_err());
            // ... so an end begun now waits until the write is queued.
            start_tx.send(()).expect("the ender waits");
            assert_eq!(b.check(), Ok(()), "the hold ended under a fenced send");
            "queued"
        });
        assert_eq!(sent, Ok("queued"));
        ender.join().expect("the end ran");
    });
    // The end went through once the step had let go; later writes refuse.
    assert_eq!((&b).check(), Err(LockLoss::NotHeld));
    assert!(a.gate.0.try_write().is_ok());
    assert!(while_valid(&[&a, &b], || ()).is_err());
}
