//! Prompt ends and holds that may be stale (issue 25, item 5), against a
//! real server (the embedded one, or ZooKeeper with `ZK_TEST_SERVER=real`):
//!
//! * `close()` of a latch or a selector whose term is already lost returns
//!   at once, whatever the connection does (its node goes in the
//!   background);
//! * a hold whose session has not heard from the server for longer than the
//!   session timeout is not valid, and its fence refuses without sending:
//!   in a process stopped with SIGSTOP, as its first action after SIGCONT,
//!   and under tokio's paused clock;
//! * under a paused clock from the start (client, framework and embedded
//!   server on it), a healthy hold stays valid for as long as paused time
//!   goes on, and a silent one goes with its session;
//! * a healthy idle hold never flaps under that rule.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{
    bounded, data_node, framework_with, leads, raw_client, requests_with, server, unique_path,
    wait_for_participants, BOUND, LONG_BOUND, PATIENCE,
};
use futures::FutureExt;
use zk_curator::{
    Error, Framework, InterProcessMutex, LeaderLatch, LeaderSelector, LeaderTerm, LockLoss,
};
use zk_curator_testing::proxy::opcode;
use zk_curator_testing::FaultProxy;

/// The session timeout the tests ask for (the server may raise it to its
/// minimum, twice its tick: every test reads the negotiated one).
const SESSION: Duration = Duration::from_secs(2);

/// A framework on `connect` asking for [`SESSION`].
async fn short_session(connect: &str) -> Framework {
    framework_with(connect, |b| b.session_timeout(SESSION)).await
}

/// The negotiated session timeout of `fw`'s current session.
async fn negotiated(fw: &Framework) -> Duration {
    fw.session().await.unwrap().client().session_timeout()
}

// ---------------------------------------------------------------------------
// 1. close() of a lost term returns at once

/// What the connection does when the lost term's participant is closed.
#[derive(Clone, Copy, Debug)]
enum Link {
    /// Still cut off by the blackhole.
    Cut,
    /// The blackhole is lifted right before the close: the client is
    /// reconnecting (to the same session) while the close runs.
    Healing,
}

/// The participant kinds under test.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Latch,
    Selector,
}

/// One participant, leading, through its own proxy.
enum Participant {
    Latch(LeaderLatch),
    Selector(
        LeaderSelector,
        tokio::sync::mpsc::UnboundedReceiver<LeaderTerm>,
    ),
}

impl Participant {
    async fn start(kind: Kind, fw: &Framework, path: &str) -> Participant {
        match kind {
            Kind::Latch => {
                let latch = LeaderLatch::new(fw.clone(), path, "cut").unwrap();
                latch.start().unwrap();
                Participant::Latch(latch)
            }
            Kind::Selector => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                let selector =
                    LeaderSelector::with_id(fw.clone(), path, "cut", move |term: LeaderTerm| {
                        let tx = tx.clone();
                        async move {
                            let _ = tx.send(term.clone());
                            // Leads until the term is lost (then it is
                            // cancelled anyway).
                            term.lost().await;
                        }
                    })
                    .unwrap();
                // Campaigns again after a lost term, as a latch does.
                selector.auto_requeue(true);
                selector.start().unwrap();
                Participant::Selector(selector, rx)
            }
        }
    }

    async fn term(&mut self) -> LeaderTerm {
        match self {
            Participant::Latch(latch) => leads(latch, PATIENCE).await,
            Participant::Selector(_, terms) => tokio::time::timeout(PATIENCE, terms.recv())
                .await
                .expect("the selector leads within PATIENCE")
                .unwrap(),
        }
    }

    async fn close(&self) -> zk_curator::Result<()> {
        match self {
            Participant::Latch(latch) => latch.close().await,
            Participant::Selector(selector, _) => selector.close().await,
        }
    }
}

/// Repeats, for a latch and for a selector, on both connection behaviours:
/// lead through a proxy, cut it off with the blackhole, wait until the term
/// is found lost (the first `is_valid() == false`, polled every
/// millisecond, i.e. as early as the holder can know), then close. Every
/// close returns within 100 ms, and once the link is back the participant
/// leaves nothing on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_participant_whose_term_was_lost_returns_at_once() {
    let Some(server) = server() else { return };
    bounded(LONG_BOUND * 2, async move {
        let connect = server.connect_string();
        let raw = raw_client(&connect).await;
        const ROUNDS: usize = 10;
        let mut slow = Vec::new();
        for kind in [Kind::Latch, Kind::Selector] {
            let mut times = Vec::new();
            for round in 0..ROUNDS {
                let link = if round % 2 == 0 {
                    Link::Cut
                } else {
                    Link::Healing
                };
                let path = unique_path("close-lost");
                let proxy = FaultProxy::start(server.address()).await.unwrap();
                let fw = short_session(&proxy.connect_string()).await;
                let mut participant = Participant::start(kind, &fw, &path).await;
                let term = participant.term().await;
                // The holder learns of the loss as early as it can: on the
                // client's own state change (`is_valid()` looks at it).
                let mut client_states = fw.session().await.unwrap().client().state_watcher();
                proxy.blackhole(true);
                let found = tokio::time::timeout(PATIENCE, async {
                    while term.is_valid() {
                        client_states.changed().await;
                    }
                })
                .await;
                assert!(
                    found.is_ok(),
                    "{kind:?}: the term is found lost through the blackhole"
                );
                if let Link::Healing = link {
                    proxy.blackhole(false);
                }
                let began = Instant::now();
                let closed = tokio::time::timeout(PATIENCE, participant.close()).await;
                let took = began.elapsed();
                closed
                    .unwrap_or_else(|_| panic!("{kind:?} close() hangs"))
                    .unwrap();
                eprintln!(
                    "{kind:?} round {round} ({link:?}, lost: {:?}): close() took {took:?}",
                    term.loss()
                );
                if took >= Duration::from_millis(100) {
                    slow.push(format!("{kind:?} round {round} ({link:?}): {took:?}"));
                }
                times.push(took);
                // Nothing is left behind once the link is back.
                proxy.blackhole(false);
                wait_for_participants(&raw, &path, 0).await;
                fw.close().await;
            }
            times.sort();
            eprintln!(
                "{kind:?}: close() of a lost term over {ROUNDS} rounds: median {:?}, max {:?}",
                times[ROUNDS / 2],
                times[ROUNDS - 1]
            );
        }
        assert!(slow.is_empty(), "close() took 100 ms or more: {slow:#?}");
    })
    .await;
}

// ---------------------------------------------------------------------------
// 2. A hold that may be stale says so

/// A healthy idle session hears from the server well within its timeout
/// (the client pings when idle), so an idle lock and an idle leader's term
/// stay valid, checked every 10 ms, for four session timeouts; no request
/// is made meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_healthy_hold_never_flaps() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let connect = server.connect_string();
        let fw = short_session(&connect).await;
        let timeout = negotiated(&fw).await;
        let mutex = InterProcessMutex::new(fw.clone(), &unique_path("idle-lock")).unwrap();
        let guard = mutex.lock().await.unwrap();
        let latch = LeaderLatch::new(fw.clone(), &unique_path("idle-latch"), "idle").unwrap();
        latch.start().unwrap();
        let term = leads(&latch, PATIENCE).await;
        let session = fw.session().await.unwrap();
        let began = Instant::now();
        let mut checks = 0u32;
        let mut longest_silence = Duration::ZERO;
        while began.elapsed() < timeout * 4 {
            assert!(
                guard.is_valid(),
                "the idle lock flapped: {:?}",
                guard.loss()
            );
            assert!(term.is_valid(), "the idle term flapped: {:?}", term.loss());
            let silence = session.client().last_heard().elapsed();
            longest_silence = longest_silence.max(silence);
            checks += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        eprintln!(
            "idle for {:?} (session timeout {timeout:?}): {checks} checks all valid; \
             longest silence of the server seen: {longest_silence:?}",
            began.elapsed()
        );
        assert!(longest_silence < timeout / 2, "{longest_silence:?}");
        guard.release().await.unwrap();
        latch.close().await.unwrap();
        drop(session);
        fw.close().await;
    })
    .await;
}

/// Under tokio's paused clock (the check takes its "now" from
/// `tokio::time::Instant`, which is std's `Instant` unless tokio's
/// `test-util` pauses it): a lock holder whose clock jumps past the session
/// timeout since the server was last heard from finds its hold invalid at
/// its first look, before the runtime has run anything else, and its fence
/// refuses at the first poll, so nothing is sent (the proxy sees no
/// `setData`).
#[tokio::test(flavor = "current_thread")]
async fn under_a_paused_clock_a_hold_unheard_for_a_session_is_stale() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let raw = raw_client(&server.connect_string()).await;
        let data = data_node(&raw, "stale-data").await;
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let fw = short_session(&proxy.connect_string()).await;
        let timeout = negotiated(&fw).await;
        let mutex = InterProcessMutex::new(fw.clone(), &unique_path("paused-lock")).unwrap();
        let guard = mutex.lock().await.unwrap();
        let fence = guard.fence().unwrap();
        fence.set_data(&data, b"before", None).await.unwrap();
        proxy.clear_traffic();

        tokio::time::pause();
        assert!(guard.is_valid(), "valid right after the pause");
        // The first poll of `advance` moves the clock (then it would yield
        // to the rest of the runtime: it is dropped instead).
        assert!(tokio::time::advance(timeout + Duration::from_millis(100))
            .now_or_never()
            .is_none());
        let valid = guard.is_valid();
        let loss = guard.loss();
        let write = fence.set_data(&data, b"after", None).now_or_never();
        tokio::time::resume();
        eprintln!("after the jump: valid {valid}, loss {loss:?}, fenced write {write:?}");
        assert!(
            !valid,
            "a hold unheard for longer than its session is stale"
        );
        assert_eq!(loss, Some(LockLoss::Stale));
        match write {
            Some(Err(Error::LockLost { reason: loss, .. })) => assert_eq!(loss, LockLoss::Stale),
            other => panic!("the fenced write is refused at once: {other:?}"),
        }
        assert!(matches!(guard.fence(), Err(Error::LockLost { .. })));
        // Give the client a moment, then look at the wire.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(requests_with(&proxy, opcode::SET_DATA), 0, "nothing sent");
        assert_eq!(raw.get_data(&data).await.unwrap().0, b"before");
        let _ = guard.release().await;
        fw.close().await;
    })
    .await;
}

/// Under tokio's paused clock from the start, with an embedded server on the
/// test's own runtime (whatever `ZK_TEST_SERVER` says: only a server on
/// this runtime can run on its paused clock): the client, the framework and
/// the server all time themselves on that clock (issue 33). A healthy lock
/// holder idles for four session timeouts of paused time, a few real
/// milliseconds: its client pings the server on the paused clock and hears
/// back, and its hold, judging the lease by the same clock, stays valid
/// throughout; the server, on it too, keeps the session. Then the server
/// stops answering: once a session timeout of paused time has passed
/// without a word from it, the hold is not valid any more, and the server
/// has expired the session.
#[tokio::test(start_paused = true)]
async fn under_a_paused_clock_a_healthy_hold_lives_and_a_silent_one_goes() {
    bounded(BOUND, async move {
        let server = zk_curator_testing::EmbeddedServer::start().await.unwrap();
        let fw = short_session(&server.connect_string()).await;
        let timeout = negotiated(&fw).await;
        let id = fw.session().await.unwrap().client().session_id().0;
        let mutex = InterProcessMutex::new(fw.clone(), "/paused-from-start").unwrap();
        let guard = mutex.lock().await.unwrap();
        let began = tokio::time::Instant::now();
        let real = Instant::now();
        let mut checks = 0u32;
        while began.elapsed() < timeout * 4 {
            assert!(
                guard.is_valid(),
                "the healthy hold flapped after {:?} of paused time ({checks} checks): {:?}",
                began.elapsed(),
                guard.loss()
            );
            checks += 1;
            tokio::time::sleep(timeout / 10).await;
        }
        eprintln!(
            "{:?} of paused time (session timeout {timeout:?}) in {:?}: {checks} checks all valid",
            began.elapsed(),
            real.elapsed()
        );
        assert!(
            server.session_ids().contains(&id),
            "the server kept the session"
        );

        server.stall(Duration::from_secs(3600));
        let silent = tokio::time::Instant::now();
        tokio::time::sleep(timeout / 2).await;
        assert!(server.session_ids().contains(&id), "expired too early");
        while guard.is_valid() {
            assert!(
                silent.elapsed() <= timeout + Duration::from_millis(500),
                "still valid after {:?} of silence (session timeout {timeout:?})",
                silent.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        eprintln!(
            "hold invalid after {:?} of silence: {:?}",
            silent.elapsed(),
            guard.loss()
        );
        // The server's tick is 100 ms: the session is gone within one of
        // the timeout.
        tokio::time::sleep((timeout + Duration::from_millis(300)).saturating_sub(silent.elapsed()))
            .await;
        assert!(
            !server.session_ids().contains(&id),
            "the server expired the session after {:?} of silence (timeout {timeout:?})",
            silent.elapsed()
        );
        server.resume();
        drop(guard);
        fw.close().await;
    })
    .await;
}

/// The lease runs from when a request was sent, not from when its answer
/// was read (seed 507 of the simulator at 5cd3ab0: a process stopped with
/// the reply to its listing in its socket's buffer read it on waking, 5.3 s
/// later, its session 2.7 s expired, and took that stale listing as fresh;
/// its selector led on a node deleted 2.5 s before). Under a paused clock,
/// client, framework and embedded server on one runtime: a read is sent,
/// the server holds its answer for a tenth of the session timeout (less
/// than a ping's interval, so nothing else is answered meanwhile), and the
/// client's last-heard time after the answer is the read's sending, not
/// its answer's coming.
#[tokio::test(start_paused = true)]
async fn an_answer_renews_the_lease_from_its_requests_sending() {
    bounded(BOUND, async move {
        let server = zk_curator_testing::EmbeddedServer::start().await.unwrap();
        let fw = short_session(&server.connect_string()).await;
        let timeout = negotiated(&fw).await;
        let client = fw.session().await.unwrap().client().clone();
        let data = "/lease-from-send".to_owned();
        let open = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        client.create(&data, b"0", &open).await.unwrap();
        // Quiet: the last ping answered, nothing in flight.
        client.get_data(&data).await.unwrap();
        let held = timeout / 10;
        server.stall(Duration::from_secs(3600));
        let sent = tokio::time::Instant::now();
        let read = tokio::spawn({
            let client = client.clone();
            let data = data.clone();
            async move { client.get_data(&data).await.map(|_| ()) }
        });
        tokio::time::sleep(held).await;
        server.resume();
        read.await.unwrap().unwrap();
        let answered = tokio::time::Instant::now();
        let heard = tokio::time::Instant::from_std(client.last_heard());
        eprintln!(
            "sent at +0, answered at {:?}, last heard at {:?} (session timeout {timeout:?})",
            answered - sent,
            heard.saturating_duration_since(sent)
        );
        assert!(answered - sent >= held, "the answer was held");
        assert!(
            heard <= sent + held / 2,
            "the lease runs from the read's sending, not from its answer, {:?} later",
            heard.saturating_duration_since(sent)
        );
        fw.close().await;
    })
    .await;
}

/// The environment variable that makes [`stopped_holder_child`] the child
/// of [`a_holder_stopped_longer_than_its_session_knows_first_thing`]: the
/// connect string, the lock path and the data node, separated by spaces.
const CHILD_ENV: &str = "ZK_CURATOR_STALE_CHILD";

/// A process holding a lock, stopped with SIGSTOP for twice the session
/// timeout (the server expires its session meanwhile), then continued: its
/// first action after SIGCONT reads `is_valid() == false` (for the new rule:
/// the reason is [`LockLoss::Stale`], not a connection state, which nothing
/// has run to notice yet), and its fence refuses at the first poll; the
/// proxy in front of it sees no `setData` after the stop, and the data node
/// keeps the value written before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stopped_longer_than_its_session_knows_first_thing() {
    let Some(server) = server() else { return };
    bounded(BOUND, async move {
        let raw = raw_client(&server.connect_string()).await;
        let data = data_node(&raw, "stale-data").await;
        let path = unique_path("stopped-lock");
        let proxy = FaultProxy::start(server.address()).await.unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["stopped_holder_child", "--exact", "--nocapture"])
            .env(
                CHILD_ENV,
                format!("{} {path} {data}", proxy.connect_string()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id().to_string();
        let (lines_tx, lines) = mpsc::channel::<String>();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    return;
                }
            }
        });
        // The child's own lines (libtest's are skipped).
        let next = |what: &str| -> String {
            let deadline = Instant::now() + PATIENCE;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match lines.recv_timeout(left) {
                    Ok(line) if line.starts_with(what) => return line,
                    Ok(_) => continue,
                    Err(err) => panic!("the child never said {what}: {err}"),
                }
            }
        };
        let held = next("HELD");
        let timeout = Duration::from_millis(held.split(' ').nth(1).unwrap().parse().unwrap());
        proxy.clear_traffic();
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "ARM").unwrap();
        stdin.flush().unwrap();
        next("ARMED");
        let signal = |name: &str| {
            let status = Command::new("kill").args([name, &pid]).status().unwrap();
            assert!(status.success(), "kill {name} {pid}");
        };
        signal("-STOP");
        let stopped = Instant::now();
        tokio::time::sleep(timeout * 2).await;
        signal("-CONT");
        eprintln!(
            "stopped for {:?} (session timeout {timeout:?})",
            stopped.elapsed()
        );
        let after = next("AFTER");
        eprintln!("child: {after}");
        let exit = tokio::task::spawn_blocking(move || {
            let deadline = Instant::now() + PATIENCE;
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    return status;
                }
                if Instant::now() >= deadline {
                    child.kill().unwrap();
                    panic!("the child did not exit");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
        .await
        .unwrap();
        assert!(exit.success(), "the child failed: {exit:?}");
        assert!(after.contains("valid=false"), "{after}");
        assert!(after.contains("loss=Some(Stale)"), "{after}");
        assert!(after.contains("fence=refused-at-once(Stale)"), "{after}");
        assert_eq!(requests_with(&proxy, opcode::SET_DATA), 0, "nothing sent");
        assert_eq!(raw.get_data(&data).await.unwrap().0, b"before");
    })
    .await;
}

/// The child of [`a_holder_stopped_longer_than_its_session_knows_first_thing`]
/// (does nothing when run as a test of its own). One thread runs
/// everything: it takes the lock, writes through its fence, says `HELD`
/// with the negotiated session timeout, and, once told `ARM`, stops running
/// the runtime (so that nothing else runs until after the stop) and spins
/// on the clock until it sees a jump: the stop. Its first action then is
/// the check.
#[tokio::test(flavor = "current_thread")]
async fn stopped_holder_child() {
    let Ok(args) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut args = args.split(' ');
    let (connect, path, data) = (
        args.next().unwrap(),
        args.next().unwrap(),
        args.next().unwrap(),
    );
    let fw = short_session(connect).await;
    let timeout = negotiated(&fw).await;
    let mutex = InterProcessMutex::new(fw.clone(), path).unwrap();
    let guard = mutex.lock().await.unwrap();
    let fence = guard.fence().unwrap();
    fence.set_data(data, b"before", None).await.unwrap();
    println!("HELD {}", timeout.as_millis());
    let mut line = String::new();
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    tokio::io::AsyncBufReadExt::read_line(&mut stdin, &mut line)
        .await
        .unwrap();
    assert_eq!(line.trim(), "ARM");
    println!("ARMED");
    let armed = Instant::now();
    loop {
        let before = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        if before.elapsed() > timeout / 2 {
            break;
        }
        assert!(armed.elapsed() < Duration::from_secs(60), "never stopped");
    }
    // The first action after SIGCONT.
    let valid = guard.is_valid();
    let loss = guard.loss();
    let fenced = match fence.set_data(data, b"after", None).now_or_never() {
        Some(Err(Error::LockLost { reason: loss, .. })) => format!("refused-at-once({loss:?})"),
        Some(other) => format!("answered-at-once({other:?})"),
        None => "sent".to_owned(),
    };
    println!("AFTER valid={valid} loss={loss:?} fence={fenced}");
    drop(fence);
    drop(guard);
    fw.close().await;
}
