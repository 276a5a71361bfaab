//! [`Peer`]: a participant of another library (an Apache Curator program,
//! a kazoo script) run as a child process that speaks in lines: it prints
//! `ready` once connected, then what it did (`held`, `led`, ...), and a
//! `hold` mode keeps what it took until its standard input closes.
//!
//! One way to drive such a program for every suite: started with its
//! output piped and killed when the test lets go of it (never looked up by
//! name), each wait bounded, and everything it said kept for the failure
//! message.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

use crate::backend::DEBIAN_PYTHON;
use crate::curator::JavaProgram;

/// A running participant program.
#[derive(Debug)]
pub struct Peer {
    what: String,
    child: Child,
    stdout: BufReader<ChildStdout>,
    transcript: String,
}

impl Peer {
    /// Starts `command` (standard input and output piped, standard error
    /// inherited, killed when dropped) and waits, within `limit`, for its
    /// line `ready`. `what` names it in failure messages.
    ///
    /// # Panics
    /// When it cannot start, ends, or says nothing of the kind in time: a
    /// test's setup, said at once with what it printed.
    pub async fn start(mut command: Command, what: &str, limit: Duration) -> Peer {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {what}: {err}"));
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut peer = Peer {
            what: what.to_owned(),
            child,
            stdout,
            transcript: String::new(),
        };
        peer.wait_for("ready", limit).await;
        peer
    }

    /// A kazoo participant: Debian's Python running `script` (the suites'
    /// `tests/interop/kazoo_participant.py`) as `CONNECT MODE PATH ROUNDS
    /// MARKERS`, once it is connected.
    pub async fn kazoo(
        script: &Path,
        connect: &str,
        mode: &str,
        path: &str,
        rounds: u32,
        markers: &Path,
        limit: Duration,
    ) -> Peer {
        let mut command = Command::new(DEBIAN_PYTHON);
        command
            .arg(script)
            .args([connect, mode, path, &rounds.to_string()])
            .arg(markers);
        Peer::start(command, &format!("the kazoo {mode} on {path}"), limit).await
    }

    /// A Java participant: `java -cp <program's classpath> CLASS ARGS`,
    /// once it is connected.
    pub async fn java(program: &JavaProgram, class: &str, args: &[&str], limit: Duration) -> Peer {
        let mut command = Command::new("java");
        command.args(["-cp", &program.classpath, class]).args(args);
        Peer::start(command, &format!("{class} {}", args.join(" ")), limit).await
    }

    /// Reads lines until `pick` takes one (returns `Some`), within `limit`.
    ///
    /// # Panics
    /// When the program ends first or `limit` passes, with what it printed.
    pub async fn line<T>(&mut self, limit: Duration, mut pick: impl FnMut(&str) -> Option<T>) -> T {
        let read = tokio::time::timeout(limit, async {
            loop {
                let mut line = String::new();
                match self.stdout.read_line(&mut line).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
                self.transcript.push_str(&line);
                if let Some(taken) = pick(line.trim()) {
                    return Some(taken);
                }
            }
        })
        .await;
        match read {
            Ok(Some(taken)) => taken,
            Ok(None) => panic!("{} ended early; it said:\n{}", self.what, self.transcript),
            Err(_) => panic!(
                "{} said nothing awaited within {limit:?}; it said:\n{}",
                self.what, self.transcript
            ),
        }
    }

    /// Reads lines until one is `wanted` (trimmed), within `limit`.
    ///
    /// # Panics
    /// As [`line`](Self::line).
    pub async fn wait_for(&mut self, wanted: &str, limit: Duration) {
        self.line(limit, |line| (line == wanted).then_some(()))
            .await;
    }

    /// Whether it has ended already.
    pub fn has_ended(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Closes its standard input (a `hold` lets go then) and waits, within
    /// `limit`, for its end: its exit code (`None` if killed by a signal)
    /// and everything it printed.
    ///
    /// # Panics
    /// When it does not end in time.
    pub async fn finish(mut self, limit: Duration) -> (Option<i32>, String) {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.shutdown().await;
        }
        let ended = tokio::time::timeout(limit, async {
            let mut rest = String::new();
            let _ = self.stdout.read_to_string(&mut rest).await;
            self.transcript.push_str(&rest);
            self.child.wait().await
        })
        .await;
        match ended {
            Ok(Ok(status)) => (status.code(), self.transcript),
            Ok(Err(err)) => panic!("cannot wait for {}: {err}", self.what),
            Err(_) => panic!(
                "{} did not end within {limit:?}; it said:\n{}",
                self.what, self.transcript
            ),
        }
    }
}
