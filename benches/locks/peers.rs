//! The out-of-process peers, Apache Curator (a JVM) and kazoo (Python).
//!
//! Each runs as ONE long-lived process for the whole run (`serve` mode), so
//! that it is measured warm like the in-process contenders: the JVM compiles
//! its hot paths during the warm-up and keeps them for every rep. A command
//! goes in as one line on its stdin, the figures come back as one
//! `RESULT kind=... key=value ...` line (or `FAILED: reason`). Every wait is
//! bounded; a peer that times out is killed (by its own handle) and shows
//! as `n/a` from then on. The memory measurement runs the peers once more,
//! each in a fresh process of its own (`memory` mode).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::limits::Measured;

const CURATOR_JAR: &str = "/usr/share/java/curator-recipes.jar";
const SLF4J_JARS: [&str; 2] = [
    "/usr/share/java/slf4j-nop.jar",
    "/usr/share/java/slf4j-simple.jar",
];
/// What the ZooKeeper client's TLS socket (`ClientCnxnSocketNetty`) needs
/// beyond the Netty jars `zookeeper.jar`'s manifest lists: netty-codec
/// (`SslHandler` extends its decoder) and netty-resolver (the client's
/// `Bootstrap`). Only TLS sessions load them.
const NETTY_JARS: [&str; 2] = [
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-resolver.jar",
];
/// A peer's start (a JVM, a Python import).
const START_LIMIT: Duration = Duration::from_secs(60);

/// How to start one peer, or why it cannot run.
pub(crate) struct PeerSetup {
    program: String,
    args: Vec<String>,
    /// Kept alive for the Java classes.
    _dir: Option<tempfile::TempDir>,
    pub(crate) description: String,
}

impl PeerSetup {
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.args).args(args);
        command
    }

    /// A fresh process in `memory` mode (one shot), its RESULT line.
    pub(crate) async fn run_once(
        &self,
        args: &[&str],
        limit: Duration,
    ) -> Measured<HashMap<String, String>> {
        let mut command = self.command(args);
        parse_result(&run_process(&mut command, limit).await?)
    }

    /// Starts the long-lived `serve` process and waits for its `READY`.
    pub(crate) async fn serve(&self, label: &'static str) -> Measured<Peer> {
        let stderr = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
        let mut child = self
            .command(&["serve"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr.reopen().map_err(|e| e.to_string())?)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.program))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut peer = Peer {
            label,
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            stderr,
            dead: None,
        };
        match tokio::time::timeout(START_LIMIT, peer.lines.next_line()).await {
            Ok(Ok(Some(line))) if line.starts_with("READY") => Ok(peer),
            other => {
                let reason = format!("did not start ({other:?}): {}", peer.stderr_tail());
                peer.kill().await;
                Err(reason)
            }
        }
    }
}

/// A running peer process.
pub(crate) struct Peer {
    pub(crate) label: &'static str,
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: tempfile::NamedTempFile,
    dead: Option<String>,
}

impl Peer {
    /// Sends one command and waits (at most `limit`) for its answer.
    pub(crate) async fn request(
        &mut self,
        command: &str,
        limit: Duration,
    ) -> Measured<HashMap<String, String>> {
        if let Some(reason) = &self.dead {
            return Err(format!("{} stopped earlier: {reason}", self.label));
        }
        let exchange = async {
            self.stdin
                .write_all(format!("{command}\n").as_bytes())
                .await
                .map_err(|e| format!("write: {e}"))?;
            self.stdin
                .flush()
                .await
                .map_err(|e| format!("write: {e}"))?;
            loop {
                match self.lines.next_line().await {
                    Ok(Some(line)) => {
                        if let Some(reason) = line.strip_prefix("FAILED: ") {
                            return Ok(Err(reason.chars().take(300).collect::<String>()));
                        }
                        if line.starts_with("RESULT ") {
                            return Ok(parse_result(&line));
                        }
                    }
                    Ok(None) => return Err("exited".to_owned()),
                    Err(e) => return Err(format!("read: {e}")),
                }
            }
        };
        match tokio::time::timeout(limit, exchange).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(reason)) => {
                let reason = format!("{reason}: {}", self.stderr_tail());
                self.dead = Some(reason.clone());
                self.kill().await;
                Err(reason)
            }
            Err(_) => {
                let reason = format!("no answer within {limit:?}; killed");
                self.dead = Some(reason.clone());
                self.kill().await;
                Err(reason)
            }
        }
    }

    /// Asks the peer to close its sessions and exit; kills it if it does not
    /// within 15 s.
    pub(crate) async fn quit(mut self) {
        if self.dead.is_none() {
            let _ = self.stdin.write_all(b"quit\n").await;
            let _ = self.stdin.flush().await;
            if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
                .await
                .is_ok()
            {
                return;
            }
        }
        self.kill().await;
    }

    async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }

    fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(self.stderr.path()).unwrap_or_default();
        last_line(&text)
    }
}

fn peers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers")
}

pub(crate) async fn prepare_java() -> Measured<PeerSetup> {
    if !Path::new(CURATOR_JAR).exists() {
        return Err(format!(
            "{CURATOR_JAR} missing: apt-get install -y libcurator-recipes-java"
        ));
    }
    let source = peers_dir().join("CuratorBench.java");
    if !source.exists() {
        return Err(format!("{} missing", source.display()));
    }
    let classes = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let slf4j = SLF4J_JARS
        .into_iter()
        .find(|jar| Path::new(jar).exists())
        .unwrap_or_default();
    let classpath = format!("{CURATOR_JAR}:{slf4j}:{}", NETTY_JARS.join(":"));
    let mut javac = Command::new("javac");
    javac
        .args(["-nowarn", "-cp", &classpath, "-d"])
        .arg(classes.path())
        .arg(&source);
    run_process(&mut javac, Duration::from_secs(120))
        .await
        .map_err(|e| format!("javac: {e} (apt-get install -y default-jdk-headless)"))?;
    // Debian ships the jar unversioned, with a versioned name beside it.
    let curator_version = std::fs::read_dir("/usr/share/java")
        .ok()
        .and_then(|dir| {
            dir.filter_map(|entry| entry.ok())
                .filter_map(|entry| entry.file_name().into_string().ok())
                .find_map(|name| {
                    name.strip_prefix("curator-recipes-")?
                        .strip_suffix(".jar")
                        .map(str::to_owned)
                })
        })
        .unwrap_or_else(|| "(version unknown)".to_owned());
    let java_version = run_process(
        Command::new("java").arg("-version"),
        Duration::from_secs(30),
    )
    .await
    .ok()
    .and_then(|out| {
        out.lines()
            .find(|l| l.contains("version"))
            .map(|l| l.trim().to_owned())
    })
    .unwrap_or_else(|| "java version unknown".to_owned());
    Ok(PeerSetup {
        program: "java".to_owned(),
        args: vec![
            "-cp".to_owned(),
            format!("{}:{classpath}", classes.path().display()),
            "CuratorBench".to_owned(),
        ],
        _dir: Some(classes),
        description: format!(
            "Apache Curator {curator_version} InterProcessMutex (Debian jar; {java_version}; default JVM flags; one warm JVM for the run)"
        ),
    })
}

pub(crate) async fn prepare_python() -> Measured<PeerSetup> {
    let script = peers_dir().join("kazoo_bench.py");
    if !script.exists() {
        return Err(format!("{} missing", script.display()));
    }
    // Debian's python3-kazoo lives in the system interpreter's dist-packages;
    // a `python3` earlier on PATH (pyenv, venv) usually cannot import it.
    let mut reasons = Vec::new();
    for python in ["/usr/bin/python3", "python3"] {
        let probe = run_process(
            Command::new(python).args([
                "-c",
                "import sys, kazoo.version; print(kazoo.version.__version__, sys.version.split()[0])",
            ]),
            Duration::from_secs(30),
        )
        .await;
        match probe {
            Ok(out) => {
                let mut words = out.split_whitespace();
                let kazoo = words.next().unwrap_or("?").to_owned();
                let version = words.next().unwrap_or("?").to_owned();
                return Ok(PeerSetup {
                    program: python.to_owned(),
                    args: vec![script.display().to_string()],
                    _dir: None,
                    description: format!(
                        "kazoo {kazoo} Lock ({python}, Python {version}; one process for the run)"
                    ),
                });
            }
            Err(err) => reasons.push(format!("{python}: {}", last_line(&err))),
        }
    }
    Err(format!(
        "cannot import kazoo ({}); apt-get install -y python3-kazoo",
        reasons.join("; ")
    ))
}

/// Runs a command to completion within `limit`; its stdout+stderr on
/// success, else the reason (the last line it printed).
pub(crate) async fn run_process(command: &mut Command, limit: Duration) -> Measured<String> {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", command.as_std().get_program()))?;
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Err(_) => Err(format!("killed after {limit:?}")),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(output)) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            if output.status.success() {
                Ok(text)
            } else {
                // The peers print their reason as a `FAILED: ...` line.
                let reason = text
                    .lines()
                    .find_map(|line| line.strip_prefix("FAILED: "))
                    .map_or_else(|| last_line(&text), |r| r.chars().take(300).collect());
                Err(format!("{}: {reason}", output.status))
            }
        }
    }
}

/// The key=value pairs of the first `RESULT` line.
pub(crate) fn parse_result(output: &str) -> Measured<HashMap<String, String>> {
    let line = output
        .lines()
        .find_map(|line| line.strip_prefix("RESULT "))
        .ok_or_else(|| format!("no RESULT line in its output: {}", last_line(output)))?;
    Ok(line
        .split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

pub(crate) fn field<T: std::str::FromStr>(
    result: &HashMap<String, String>,
    key: &str,
) -> Measured<T> {
    result
        .get(key)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("RESULT line lacks a valid {key}"))
}

pub(crate) fn last_line(text: &str) -> String {
    let line = text
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("(no output)");
    line.chars().take(200).collect()
}
