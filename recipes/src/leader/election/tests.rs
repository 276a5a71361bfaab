//! A model test of the leadership stream: random sequences of terms
//! published, lost and withdrawn, failures recorded, closes (told to the
//! leader or not), streams subscribed and read one value or all at a time,
//! each step made through [`Status`]'s own transitions; every value a
//! stream hands out is checked against the status at that moment.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::{FutureExt, Stream, StreamExt};
use proptest::prelude::*;
use tokio::sync::watch;
use zk_curator_framework::Error;

use super::{changes, Status, Term};

/// A stand-in for a [`LeaderTerm`](super::LeaderTerm): a number, and a
/// validity that a loss ends (shared by its clones).
#[derive(Clone, Debug)]
struct TestTerm {
    number: usize,
    valid: Arc<AtomicBool>,
}

impl PartialEq for TestTerm {
    fn eq(&self, other: &Self) -> bool {
        self.number == other.number
    }
}

impl Term for TestTerm {
    fn is_valid(&self) -> bool {
        self.valid.load(Ordering::SeqCst)
    }
}

/// One step. A step with nothing to act on does nothing, so every
/// sequence, and every shrunk one, can run.
#[derive(Clone, Debug)]
enum Op {
    /// A new term is published, if there is none (the campaign loop's
    /// next term), or even over the current one (`over`: as a resign and
    /// the next campaign that no stream looked at in between).
    Publish { over: bool },
    /// The current term is lost, and not yet withdrawn.
    Lose,
    /// The current term is resigned: withdrawn, then marked lost.
    Resign,
    /// A campaign failed (a change of the status that leadership ignores).
    Fail,
    /// The participant is closed, its leader's streams told or not.
    Close { notify_leader: bool },
    /// A new stream.
    Subscribe,
    /// A stream is read until it has nothing more (`all`), or once.
    Read { stream: usize, all: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Publish { over: false }),
        1 => Just(Op::Publish { over: true }),
        5 => Just(Op::Lose),
        6 => Just(Op::Resign),
        2 => Just(Op::Fail),
        1 => any::<bool>().prop_map(|notify_leader| Op::Close { notify_leader }),
        3 => Just(Op::Subscribe),
        16 => (0..4usize, any::<bool>()).prop_map(|(stream, all)| Op::Read { stream, all }),
    ]
}

/// One stream under test, and what it handed out.
struct Reader {
    stream: std::pin::Pin<Box<dyn Stream<Item = Option<TestTerm>> + Send>>,
    /// The values handed out, as term numbers (`None`: not leader).
    seen: Vec<Option<usize>>,
    /// Values handed out after the status was seen closed.
    after_close: usize,
    ended: bool,
}

struct Run {
    status: watch::Sender<Status<TestTerm>>,
    /// Every term made, by number.
    terms: Vec<TestTerm>,
    readers: Vec<Reader>,
    events: BTreeMap<&'static str, usize>,
}

impl Run {
    fn new() -> Run {
        Run {
            status: watch::Sender::new(Status {
                started: true,
                ..Status::default()
            }),
            terms: Vec::new(),
            readers: Vec::new(),
            events: BTreeMap::new(),
        }
    }

    fn event(&mut self, name: &'static str) {
        *self.events.entry(name).or_default() += 1;
    }

    /// The published term, valid or not.
    fn published(&self) -> Option<TestTerm> {
        self.status.borrow().term.clone()
    }

    /// The leadership now: the published term, if still valid.
    fn leading(&self) -> Option<usize> {
        self.published()
            .filter(|term| term.is_valid())
            .map(|term| term.number)
    }

    fn closed(&self) -> bool {
        self.status.borrow().closed
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Publish { over } => {
                if self.published().is_some() && !over {
                    return;
                }
                let term = TestTerm {
                    number: self.terms.len(),
                    valid: Arc::new(AtomicBool::new(true)),
                };
                self.terms.push(term.clone());
                if self.published().is_some() {
                    self.event("term published over another");
                }
                let closed = self.closed();
                let published = self.status.send_if_modified(|s| s.publish(&term));
                assert_eq!(published, !closed, "published after the close: {published}");
                if !published {
                    term.valid.store(false, Ordering::SeqCst);
                }
            }
            Op::Lose => {
                if let Some(term) = self.published() {
                    term.valid.store(false, Ordering::SeqCst);
                    self.event("term lost, not yet withdrawn");
                }
            }
            Op::Resign => {
                if let Some(term) = self.published() {
                    self.status.send_if_modified(|s| s.unpublish(&term));
                    term.valid.store(false, Ordering::SeqCst);
                }
            }
            Op::Fail => {
                let err = Error::NoAuth;
                self.status.send_if_modified(|s| s.record_failure(&err));
            }
            Op::Close { notify_leader } => {
                // As the latch's close: no longer reported, then the term
                // resigned by the campaign loop.
                let term = self.published();
                self.status.send_if_modified(|s| s.close(notify_leader));
                if let Some(term) = term {
                    term.valid.store(false, Ordering::SeqCst);
                }
            }
            Op::Subscribe => {
                if self.readers.len() < 4 {
                    self.readers.push(Reader {
                        stream: Box::pin(changes(self.status.subscribe())),
                        seen: Vec::new(),
                        after_close: 0,
                        ended: false,
                    });
                }
            }
            Op::Read { stream, all } => {
                if self.readers.is_empty() {
                    return;
                }
                let i = stream % self.readers.len();
                loop {
                    let read = self.read(i);
                    if !all || !read {
                        break;
                    }
                }
                if all {
                    self.check_drained(i);
                }
            }
        }
    }

    /// Polls stream `i` once, checking what it hands out: whether it
    /// handed out a value.
    fn read(&mut self, i: usize) -> bool {
        if self.readers[i].ended {
            return false;
        }
        let next = self.readers[i].stream.next().now_or_never();
        let closed = self.closed();
        let leading = self.leading();
        let published = self.published().map(|term| term.number);
        let reader = &mut self.readers[i];
        let value = match next {
            // Nothing new.
            None => return false,
            Some(None) => {
                assert!(closed, "stream {i} ended while the participant is open");
                reader.ended = true;
                return false;
            }
            Some(Some(value)) => value.map(|term| term.number),
        };
        let last = reader.seen.last().copied();
        match value {
            Some(number) => {
                assert_eq!(
                    Some(number),
                    leading,
                    "stream {i} reported term {number} as current; the status has {published:?}, \
                     valid: {:?}; it had handed out {:?}",
                    self.terms[number].is_valid(),
                    reader.seen
                );
                assert!(
                    matches!(last, None | Some(None)),
                    "stream {i} reported term {number} right after {last:?}"
                );
                assert!(
                    !reader.seen.contains(&Some(number)),
                    "stream {i} reported term {number} twice: {:?}",
                    reader.seen
                );
            }
            None => {
                assert!(
                    matches!(last, None | Some(Some(_))),
                    "stream {i} reported NotLeader twice in a row: {:?}",
                    reader.seen
                );
                if let Some(Some(number)) = last {
                    assert_ne!(
                        leading,
                        Some(number),
                        "stream {i} ended term {number} while it is current"
                    );
                    if leading.is_some() {
                        *self
                            .events
                            .entry("a replaced term's end told before the next term")
                            .or_default() += 1;
                    }
                } else {
                    assert_eq!(
                        leading, None,
                        "stream {i} began with NotLeader while leader"
                    );
                }
            }
        }
        if closed {
            reader.after_close += 1;
            assert!(
                value.is_none() && reader.after_close == 1,
                "stream {i} handed out {value:?} after the close: {:?}",
                reader.seen
            );
            let notify = self.status.borrow().notify_leader;
            assert!(notify, "stream {i} told a silent close");
        }
        reader.seen.push(value);
        if value.is_some() {
            self.event("term reported");
        }
        true
    }

    /// Stream `i` has nothing more now: it agrees with the status (or has
    /// ended, once closed).
    fn check_drained(&mut self, i: usize) {
        let closed = self.closed();
        let leading = self.leading();
        let published = self.published().map(|term| term.number);
        let reader = &self.readers[i];
        if closed {
            assert!(reader.ended, "stream {i} did not end after the close");
            return;
        }
        let last = reader.seen.last().copied().flatten();
        // A term lost but not yet withdrawn: nothing wakes the stream until
        // the withdrawal, which the campaign loop makes at once.
        let awaiting_withdrawal = last.is_some() && last == published && leading.is_none();
        if awaiting_withdrawal {
            self.event("reader waits for a lost term's withdrawal");
        } else {
            assert_eq!(
                last, leading,
                "stream {i}, read until it had nothing more, shows {last:?}; leadership is {leading:?}"
            );
        }
    }

    /// The end of every run: the participant closed, every stream read to
    /// its end.
    fn finish(&mut self, notify_leader: bool) {
        self.step(&Op::Close { notify_leader });
        for i in 0..self.readers.len() {
            while self.read(i) {}
            let reader = &self.readers[i];
            assert!(reader.ended, "stream {i} did not end after the close");
            if reader.after_close == 1 {
                self.event("a leader's stream told of the close");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn leadership_streams_follow_the_status(
        ops in prop::collection::vec(op(), 1..60),
        notify_leader in any::<bool>(),
    ) {
        let mut run = Run::new();
        for op in &ops {
            run.step(op);
        }
        run.finish(notify_leader);
    }
}

/// The generator is worth its cases: a fixed set of sequences reaches every
/// interesting case many times (a change that made one unreachable would
/// leave the property above vacuous there).
#[test]
fn the_generated_sequences_reach_every_case() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let sequences = (prop::collection::vec(op(), 1..60), any::<bool>());
    let mut events = BTreeMap::<&str, usize>::new();
    for _ in 0..256 {
        let (ops, notify_leader) = sequences
            .new_tree(&mut runner)
            .expect("a sequence is generated")
            .current();
        let mut run = Run::new();
        for op in &ops {
            run.step(op);
        }
        run.finish(notify_leader);
        for (name, count) in run.events {
            *events.entry(name).or_default() += count;
        }
    }
    let cases = [
        "term reported",
        "term published over another",
        "term lost, not yet withdrawn",
        "a replaced term's end told before the next term",
        "reader waits for a lost term's withdrawal",
        "a leader's stream told of the close",
    ];
    for case in cases {
        let count = events.get(case).copied().unwrap_or(0);
        assert!(
            count >= 20,
            "{case:?} came up {count} times in 256 sequences: {events:?}"
        );
    }
}
