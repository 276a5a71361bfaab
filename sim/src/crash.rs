//! `--crash`: the single server crashes and comes back, and replies are
//! lost (issue 47, item 2), as faults of the simulator's drawn from the
//! seed, beside the network's. Off by default, so that a seed without it
//! runs as before.
//!
//! - **Crash and restart.** The server stops: every connection closes and
//!   new ones are refused, nothing expires meanwhile. After 0.3 to 2.5 s
//!   it comes back from its disk: every write it applied (ZooKeeper writes a
//!   transaction to its log before it applies it, so every acknowledged one
//!   among them) and every session, each with a full timeout from the
//!   restart (as ZooKeeper's sessions come back from its snapshot): a client
//!   that reconnects in time keeps its session, one that does not loses it.
//! - **A lost reply.** The next write (create, delete, setData, multi) is
//!   applied and its connection closed instead of answered: applied, never
//!   answered, as when a server dies between the two.
//!
//! On an ensemble a member's crash is the leader kill and the quorum loss of
//! `ensemble.rs` (a killed member comes back from its log), and `--crash`
//! adds lost replies only, each on a member drawn from the seed.

use std::time::Duration;

use futures::FutureExt;
use zk_curator_server::ensemble::Ensemble;
use zk_curator_server::faults::opcode;
use zk_curator_server::{EmbeddedServer, LostReplyHandle, RequestMatcher};

use crate::plan::Plan;

/// How long beyond the session timeout a stuck hold's node may outlive its
/// bound with crashes (rule 8 (b)): the 2 s of one server, and twice the
/// longest crash (the server down, then every session given a full timeout
/// from its restart; a second crash may follow).
pub const STUCK_SLACK: Duration = Duration::from_secs(7);

/// The crash faults of a seed, if they are on: with `--crash`, crashes and
/// lost replies; in swarm mode, lost replies alone if the seed's profile
/// has them (see `swarm.rs`).
pub fn of(seed: u64) -> Option<Crashes> {
    let crashes = crate::mode::Mode::current().crash;
    let lost_replies = crashes || crate::swarm::of(seed).is_some_and(|s| s.lost_replies);
    lost_replies.then(|| Crashes {
        rng: fastrand::Rng::with_seed(seed ^ 0xc7a5_4ed0),
        next: Duration::from_millis(2000),
        down_until: None,
        calmed: false,
        crashes,
        armed: Vec::new(),
    })
}

thread_local! {
    /// Lost replies that happened in this thread's seed (a write applied,
    /// its connection closed instead of answered).
    static LOST_FIRED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many lost replies happened in this thread's seed since the last
/// call (counted as each seed's run notices them).
pub fn take_lost_fired() -> u64 {
    LOST_FIRED.with(|fired| fired.replace(0))
}

/// A seed's crash faults: their generator, and the server's state.
#[derive(Debug)]
pub struct Crashes {
    rng: fastrand::Rng,
    /// When the next one is drawn.
    next: Duration,
    /// The server is down until then.
    down_until: Option<Duration>,
    /// The calm has begun: a lost reply still armed was disarmed.
    calmed: bool,
    /// The server crashes too (`--crash`), besides losing replies.
    pub crashes: bool,
    /// Lost replies armed and not yet seen to happen.
    armed: Vec<LostReplyHandle>,
}

impl Crashes {
    /// The faults due at `now` on `server`, none from `calm` on (then the
    /// server is up). Each drawn fault takes a number of `drawn` (the
    /// network's), and is left out if `plan` names it.
    pub fn step(
        &mut self,
        now: Duration,
        calm: Duration,
        server: &EmbeddedServer,
        plan: &Plan,
        drawn: &mut u64,
        log: &mut Vec<String>,
    ) {
        self.count_fired();
        if let Some(until) = self.down_until {
            if now >= until || now >= calm {
                self.down_until = None;
                if server.restart().now_or_never().is_none() {
                    log.push(format!("{} crash: the restart waits", now.as_micros()));
                }
                log.push(format!("{} crash: server restarted", now.as_micros()));
            }
            return;
        }
        if now >= calm && !self.calmed {
            self.calmed = true;
            server.disarm();
        }
        if now < self.next || now >= calm {
            return;
        }
        self.next = now + Duration::from_millis(self.rng.u64(2500..6000));
        // Without `--crash` (swarm mode's lost replies), the draw is kept
        // and a crash drawn is a lost reply instead.
        let crash = self.rng.u8(0..2) == 0 && self.crashes;
        let length = Duration::from_millis(self.rng.u64(300..2500));
        *drawn += 1;
        if plan.net.contains(&(*drawn - 1)) {
            return;
        }
        if crash {
            server.stop();
            self.down_until = Some(now + length);
            log.push(format!(
                "{} crash: server down for {}",
                now.as_micros(),
                length.as_millis()
            ));
        } else {
            self.armed.push(server.lose_reply_to_next(writes()));
            log.push(format!(
                "{} crash: the next write's reply is lost",
                now.as_micros()
            ));
        }
    }

    /// The same on an ensemble, whose members' crashes are its own faults
    /// (`ensemble.rs`): only lost replies, each on a member drawn from the
    /// seed.
    pub fn step_ensemble(
        &mut self,
        now: Duration,
        calm: Duration,
        ensemble: &Ensemble,
        plan: &Plan,
        drawn: &mut u64,
        log: &mut Vec<String>,
    ) {
        self.count_fired();
        if now >= calm && !self.calmed {
            self.calmed = true;
            ensemble.disarm();
        }
        if now < self.next || now >= calm {
            return;
        }
        self.next = now + Duration::from_millis(self.rng.u64(2500..6000));
        let member = self.rng.usize(0..ensemble.size());
        *drawn += 1;
        if plan.net.contains(&(*drawn - 1)) {
            return;
        }
        self.armed
            .push(ensemble.lose_reply_to_next(member, writes()));
        log.push(format!(
            "{} crash: the next write's reply on zk{member} is lost",
            now.as_micros()
        ));
    }
}

impl Crashes {
    /// Counts the armed lost replies that happened (see [`take_lost_fired`]).
    fn count_fired(&mut self) {
        let before = self.armed.len();
        self.armed.retain(|armed| !armed.fired());
        let fired = (before - self.armed.len()) as u64;
        LOST_FIRED.with(|count| count.set(count.get() + fired));
    }
}

/// The writes whose reply may be lost.
fn writes() -> RequestMatcher {
    RequestMatcher::opcodes([
        opcode::CREATE,
        opcode::CREATE2,
        opcode::DELETE,
        opcode::SET_DATA,
        opcode::MULTI,
    ])
}
