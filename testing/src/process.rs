//! The processes a test owns (ZooKeeper's JVMs, a Kerberos KDC): started under
//! a small `sh` wrapper that kills them when the test lets go, their logs,
//! their temporary directories and their ports. A leaf: the servers
//! ([`crate::server`], [`crate::cluster`]) and the KDC ([`crate::kerberos`])
//! build on it, and it knows none of them.
//!
//! # The wrapper
//!
//! The program is not a direct child of the test process. The wrapper's
//! standard input is a pipe whose writing end only the test process holds;
//! it starts the program in the background, prints its pid, and waits for
//! end of file on that pipe, which comes when the [`ServerProcess`] is shut
//! down or dropped, and also when the test process exits for any reason
//! (the kernel closes the pipe). It then kills exactly the program it
//! started, by its pid, and reaps it; it exits when the program is gone,
//! with its status.

use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use crate::error::Error;

/// How often readiness and exit are polled while the server starts.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// How long `stop` waits for the wrapper before falling back to killing by pid.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// How many fresh ports the first start tries when the chosen one was taken meanwhile.
pub(crate) const START_PORT_ATTEMPTS: usize = 5;

/// Prefix of the temporary directories of test servers.
pub(crate) const DIR_PREFIX: &str = "zk-testing-";

/// File in a server directory holding the id of the process owning that server.
pub(crate) const OWNER_FILE: &str = "owner.pid";

/// Number of log lines put into startup errors.
pub(crate) const ERROR_LOG_LINES: usize = 40;

/// The `sh` program that owns the JVM.
///
/// Positional parameters are the java command line; `ZK_TESTING_OUT` names the file receiving
/// the JVM's stdout and stderr. The wrapper prints the JVM's pid as its only line of output.
/// A background subshell keeps a duplicate of the wrapper's stdin (fd 3) and kills the JVM
/// once that pipe reports end-of-file; the wrapper itself waits for the JVM, so the wrapper
/// exits exactly when the JVM is gone and its exit status is the JVM's.
const WRAPPER_SCRIPT: &str = r#"
trap '' INT QUIT
"$@" </dev/null >>"$ZK_TESTING_OUT" 2>&1 &
pid=$!
echo "$pid"
exec 3<&0
(
  while read -r _ <&3; do :; done
  kill -9 "$pid" 2>/dev/null
) </dev/null >/dev/null 2>&1 &
watcher=$!
exec 3<&- 0</dev/null
wait "$pid"
status=$?
kill "$watcher" 2>/dev/null
exit "$status"
"#;

/// Launches `program args` under the wrapper (see the [module](self)) with `envs` added to its
/// environment, appending its output to `log_path`, and returns once the wrapper reported the
/// program's pid. The program dies when the returned process is shut down or dropped, or when
/// the test process exits. `what` names the program in errors.
pub(crate) fn spawn_owned(
    program: &Path,
    args: &[OsString],
    envs: &[(&str, OsString)],
    log_path: &Path,
    root: &Path,
    what: &str,
) -> Result<ServerProcess, Error> {
    let log_offset = fs::metadata(log_path).map(|meta| meta.len()).unwrap_or(0);
    let mut command = Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(WRAPPER_SCRIPT)
        .arg("zk-testing-wrapper")
        .arg(program)
        .args(args)
        .envs(envs.iter().map(|(key, value)| (key, value)))
        .env("ZK_TESTING_OUT", log_path)
        .current_dir(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = command
        .spawn()
        .map_err(|err| Error::io(format!("cannot run `sh` to launch {what}"), err))?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
        // Cannot happen with piped stdio; clean up anyway.
        let _ = child.kill();
        let _ = child.wait();
        return Err(Error::io(
            format!("launching {what}"),
            std::io::Error::other("wrapper pipes missing"),
        ));
    };
    let mut line = String::new();
    let read = BufReader::new(stdout).read_line(&mut line);
    let java_pid = match read.map(|_| line.trim().parse::<u32>()) {
        Ok(Ok(pid)) => pid,
        other => {
            drop(stdin);
            let _ = child.kill();
            let _ = child.wait();
            let detail = match other {
                Err(err) => err.to_string(),
                Ok(Err(err)) => format!("unexpected wrapper output {line:?}: {err}"),
                Ok(Ok(_)) => String::new(),
            };
            return Err(Error::io(
                format!("launching {what}"),
                std::io::Error::other(detail),
            ));
        }
    };
    Ok(ServerProcess {
        child,
        stdin: Some(stdin),
        java_pid,
        log_offset,
    })
}

/// The error for a server that exited during startup, with the output written since
/// `log_offset` (that process's own) as its log tail.
pub(crate) fn exit_error(status: ExitStatus, log: &Path, log_offset: u64) -> Error {
    let log_tail = match fs::read(log) {
        Ok(bytes) => {
            let start = usize::try_from(log_offset)
                .unwrap_or(usize::MAX)
                .min(bytes.len());
            last_lines(&String::from_utf8_lossy(&bytes[start..]), ERROR_LOG_LINES)
        }
        Err(err) => format!("<cannot read {}: {err}>", log.display()),
    };
    Error::ServerExited {
        status,
        log: log.to_path_buf(),
        log_tail,
    }
}

/// The wrapper process and the pipe that keeps its JVM alive.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    pub(crate) child: Child,
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) java_pid: u32,
    /// Size of the log file before this process started; its own output follows.
    pub(crate) log_offset: u64,
}

impl ServerProcess {
    /// Closes the pipe, which makes the wrapper kill the JVM (or the KDC, for a
    /// [`Kdc`](crate::kerberos::Kdc)), then waits for the wrapper, which exits only after it
    /// has reaped it.
    pub(crate) fn shutdown(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
                Ok(None) | Err(_) => break,
            }
        }
        warn!(
            java_pid = self.java_pid,
            "test server wrapper did not exit in time; killing its child by pid"
        );
        let _ = Command::new("kill")
            .arg("-9")
            .arg(self.java_pid.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Closing the pipe is enough for the wrapper to kill the JVM; `shutdown` additionally
        // waits, and is used on every regular path.
        drop(self.stdin.take());
    }
}

/// The process of one server while it runs (empty once it was stopped), shared by the
/// handle's methods.
#[derive(Debug)]
pub(crate) struct ProcessSlot(Mutex<Option<ServerProcess>>);

impl ProcessSlot {
    pub(crate) fn new(process: ServerProcess) -> Self {
        ProcessSlot(Mutex::new(Some(process)))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<ServerProcess>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The JVM's process id, `None` when stopped.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.lock().as_ref().map(|process| process.java_pid)
    }

    /// Whether the process is alive (it may have died since it was started).
    pub(crate) fn is_running(&self) -> bool {
        match self.lock().as_mut() {
            Some(process) => matches!(process.child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Takes the process out, leaving the slot stopped.
    pub(crate) fn take(&self) -> Option<ServerProcess> {
        self.lock().take()
    }

    /// Installs a freshly started process, keeping only the newest when a concurrent restart
    /// got there first.
    pub(crate) fn install(&self, process: ServerProcess) {
        let previous = self.lock().replace(process);
        if let Some(previous) = previous {
            previous.shutdown();
        }
    }
}

/// Removes directories left behind by servers whose owning process is gone.
///
/// A server kept in a `static` is never dropped, so its JVM is killed by the wrapper but its
/// temporary directory stays. Each directory names its owner process; on Linux, where process
/// liveness can be read from `/proc`, directories of dead owners are deleted here, best effort.
pub(crate) fn sweep_abandoned_dirs() {
    let proc_fs = Path::new("/proc");
    if !proc_fs.join("self").exists() {
        return;
    }
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(DIR_PREFIX) {
            continue;
        }
        let dir = entry.path();
        let Ok(owner) = fs::read_to_string(dir.join(OWNER_FILE)) else {
            continue;
        };
        let Ok(owner) = owner.trim().parse::<u32>() else {
            continue;
        };
        if owner != std::process::id() && !proc_fs.join(owner.to_string()).exists() {
            debug!(dir = %dir.display(), owner, "removing directory of an exited test process");
            let _ = fs::remove_dir_all(&dir);
        }
    }
}

pub(crate) fn free_port() -> Result<u16, Error> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|err| Error::io("cannot find a free port", err))?;
    let port = listener
        .local_addr()
        .map_err(|err| Error::io("cannot find a free port", err))?
        .port();
    Ok(port)
}

pub(crate) fn tail_lines(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => last_lines(&String::from_utf8_lossy(&bytes), lines),
        Err(err) => format!("<cannot read {}: {err}>", path.display()),
    }
}

fn last_lines(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs `work` (a start or restart that blocks until its process serves) on a blocking thread
/// of the current tokio runtime, so that the runtime's other tasks keep running meanwhile;
/// `what` names it in the error if that thread fails. The work goes on if the future is
/// dropped.
pub(crate) async fn on_blocking_thread<T: Send + 'static>(
    what: &'static str,
    work: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| Error::io(what, std::io::Error::other(err)))?
}
