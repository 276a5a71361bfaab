//! `zk-curator`: the command line of zk-curator.
//!
//! * `lock` runs a command while holding a ZooKeeper lock (mutex, one half of
//!   a read-write lock, or a semaphore lease), in a process group of its
//!   own, and stops the whole group if the hold is lost or revoked (see
//!   [`child`]);
//! * `locks` lists the holders and waiters of a lock path;
//! * `revoke` asks holders to give their lock up (Curator's protocol);
//! * `server` runs the embedded ZooKeeper-protocol server for local work.
//!
//! Exit codes are listed in [`exit`] and in `zk-curator --help`.
#![forbid(unsafe_code)]

mod child;
mod connect;
mod exit;
mod layout;
mod lock;
mod locks;
mod revoke;
mod server;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use zk_curator::framework::path::validate_recipe_path;

use crate::exit::Failure;

/// Every exit code, shown under the top-level `--help`.
const EXIT_CODES: &str = "\
Exit codes:
  0    success (for `lock`: the command's own status is passed through)
  64   usage error (bad arguments or path, malformed --zk / ZK_CONNECT,
       no ensemble given, malformed ZK_AUTH); nothing is sent
  66   `revoke --node`: the node is not a participant of the lock
  69   ZooKeeper could not be reached within the connection timeout
  70   any other error (refused by ZooKeeper, lost while acquiring, ...)
  75   `lock --timeout` expired before the lock was acquired
  76   `lock`: the hold was lost while the command ran (its process group
       was stopped)
  77   `lock`: the hold was revoked while the command ran (its process group
       was stopped)
  126  `lock`: the command could not be executed
  127  `lock`: the command was not found
  128+N `lock`: the command was ended by signal N (e.g. 130, 143), or
        zk-curator got signal N while still waiting for the lock";

/// The exit codes of `lock`.
const LOCK_EXIT_CODES: &str = "\
Exit codes:
  the command's  the command ran; its own status is passed through
  64   usage error (bad arguments or path, malformed --zk / ZK_CONNECT,
       no ensemble given, malformed ZK_AUTH); nothing is sent
  69   ZooKeeper could not be reached within the connection timeout
  70   any other error (refused by ZooKeeper, lost while acquiring, ...)
  75   --timeout expired before the lock was acquired
  76   the hold was lost while the command ran (its process group was stopped)
  77   the hold was revoked while the command ran (its process group was stopped)
  126  the command could not be executed
  127  the command was not found
  128+N the command was ended by signal N (e.g. 130, 143), or
        zk-curator got signal N while still waiting for the lock";

/// The exit codes of `locks`.
const LOCKS_EXIT_CODES: &str = "\
Exit codes:
  0    success
  64   usage error (bad arguments or path, malformed --zk / ZK_CONNECT,
       no ensemble given, malformed ZK_AUTH); nothing is sent
  69   ZooKeeper could not be reached within the connection timeout
  70   any other error (e.g. refused by ZooKeeper)";

/// The exit codes of `revoke`.
const REVOKE_EXIT_CODES: &str = "\
Exit codes:
  0    the request was written into every chosen node
  64   usage error (bad arguments or path, malformed --zk / ZK_CONNECT,
       no ensemble given, malformed ZK_AUTH); nothing is sent
  66   --node names no participant of the lock; nothing is written
  69   ZooKeeper could not be reached within the connection timeout
  70   any other error (e.g. refused by ZooKeeper)";

/// The exit codes of `server`.
const SERVER_EXIT_CODES: &str = "\
Exit codes:
  0    stopped by SIGINT (Ctrl-C) or SIGTERM
  64   usage error (bad arguments)
  70   the server could not start (e.g. the port is taken)";

/// Apache Curator's lock recipes on ZooKeeper, from the shell.
#[derive(Debug, Parser)]
#[command(name = "zk-curator", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where and how to connect (every command but `server`).
#[derive(Debug, Args)]
#[command(next_help_heading = "Connection")]
pub(crate) struct ConnectArgs {
    /// The ensemble, `host[:port][,host[:port]...]` (port 2181 if left
    /// out; IPv6 as `[addr]:port`). Digest credentials come from the
    /// environment only: ZK_AUTH=user:password.
    #[arg(long = "zk", value_name = "HOSTS", env = "ZK_CONNECT")]
    pub(crate) zk: Option<String>,
    /// A namespace (chroot) every path is relative to.
    #[arg(long, value_name = "PATH")]
    pub(crate) namespace: Option<String>,
    /// The ZooKeeper session timeout asked for.
    #[arg(long, value_name = "D", default_value = "20s", value_parser = parse_duration)]
    pub(crate) session_timeout: Duration,
    /// How long to wait for a connection before giving up (exit 69).
    #[arg(long, value_name = "D", default_value = "15s", value_parser = parse_duration)]
    pub(crate) connection_timeout: Duration,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command while holding a lock; exit with its status.
    ///
    /// Takes the mutex on PATH (default), one half of the read-write lock on
    /// PATH (--read, --write), or one lease of the semaphore on PATH
    /// (--leases N), then runs the command with the fencing token in
    /// ZK_CURATOR_FENCING_TOKEN and the lock node in ZK_CURATOR_LOCK_NODE.
    /// If PATH already has participants of another kind (a mutex, a
    /// read-write lock, a semaphore), a warning says so: they do not exclude
    /// each other.
    ///
    /// The command runs in a process group of its own, and everything it
    /// starts stays in that group. If the hold is lost or revoked (`zk-curator
    /// revoke`), the whole group gets SIGTERM, then SIGKILL after
    /// --kill-after, and zk-curator exits 76 (lost) or 77 (revoked). SIGINT,
    /// SIGTERM and SIGHUP sent to zk-curator are passed on to the whole
    /// group. The lock is released only once no process of the group is
    /// left: if the command exits while processes it started still run, the
    /// lock stays held (and watched) until they end, and the command's status
    /// is given then. A process that leaves the group on purpose (setsid,
    /// setpgid) is not followed. Not being the terminal's foreground group,
    /// a command that reads from the terminal is stopped by it (SIGTTIN):
    /// give it its input another way.
    ///
    /// Once the group is gone, zk-curator exits promptly even if ZooKeeper
    /// is gone too: an unanswered release is given up after 2s, and the
    /// lock node then goes when the server ends the session.
    #[command(after_help = LOCK_EXIT_CODES)]
    Lock(LockArgs),
    /// List the holders and waiters of a lock, in queue order.
    ///
    /// Works on the mutex, read-write lock and semaphore layouts (detected
    /// from the children of PATH). Columns: kind, role, sequence, session
    /// (the node's ephemeral owner), age, fencing token (the node's czxid),
    /// holder identity (the node's data) and node name.
    #[command(after_help = LOCKS_EXIT_CODES)]
    Locks(LocksArgs),
    /// Ask holders of a lock to give it up (Curator's revocation protocol).
    ///
    /// Writes the revocation request into the chosen participant nodes and
    /// prints how many were asked. Only holders that made their hold
    /// revocable react (a `zk-curator lock` run always does). A --node that
    /// is not a participant of the lock is refused (exit 66).
    #[command(after_help = REVOKE_EXIT_CODES)]
    Revoke(RevokeArgs),
    /// Run the embedded ZooKeeper-protocol server until Ctrl-C.
    ///
    /// For local development and tests only: in memory, one node, no
    /// persistence. Prints its connect string on stdout.
    #[command(after_help = SERVER_EXIT_CODES)]
    Server(ServerArgs),
}

/// Options of `lock`.
#[derive(Debug, Args)]
pub(crate) struct LockArgs {
    /// The lock's path, e.g. /locks/nightly-report.
    pub(crate) path: String,
    /// Give up (exit 75) if the lock is not acquired within this long,
    /// e.g. 30s, 500ms, 2m. Without it, wait as long as it takes.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub(crate) timeout: Option<Duration>,
    /// Take the shared (read) half of a read-write lock.
    #[arg(long, conflicts_with_all = ["write", "leases"])]
    pub(crate) read: bool,
    /// Take the exclusive (write) half of a read-write lock.
    #[arg(long, conflicts_with = "leases")]
    pub(crate) write: bool,
    /// Take one lease of a semaphore admitting N holders.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) leases: Option<u32>,
    /// A label stored with host and pid in the lock node (shown by `locks`).
    #[arg(long, value_name = "TEXT")]
    pub(crate) id: Option<String>,
    /// After a loss or revocation, how long the command's process group has
    /// between SIGTERM and SIGKILL.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = parse_duration)]
    pub(crate) kill_after: Duration,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

/// Options of `locks`.
#[derive(Debug, Args)]
pub(crate) struct LocksArgs {
    /// The lock's path.
    pub(crate) path: String,
    /// Print one JSON object (for scripts) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Print again after every change among the participants (one JSON
    /// object per line with `--json`), until Ctrl-C. A lost connection is
    /// reported at once (on stderr; with `--json` as a line
    /// `{"event":"disconnected",...}`), and so is the reconnection
    /// (`{"event":"reconnected",...}`), followed by a fresh listing.
    #[arg(long)]
    pub(crate) watch: bool,
    /// For a semaphore: its number of leases, to tell holders from the
    /// waiting lease node. Without it, the lease node of the session at the
    /// head of the semaphore's internal queue is taken for the waiter.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) leases: Option<u32>,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

/// Options of `revoke`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["node", "all"]))]
pub(crate) struct RevokeArgs {
    /// The lock's path.
    pub(crate) path: String,
    /// One participant node, by name (as `locks` prints it) or full path.
    #[arg(long, value_name = "NAME")]
    pub(crate) node: Option<String>,
    /// Every holder of the lock (waiters are left alone).
    #[arg(long)]
    pub(crate) all: bool,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

/// Options of `server`.
#[derive(Debug, Args)]
pub(crate) struct ServerArgs {
    /// The 127.0.0.1 port to listen on; 0 picks a free one.
    #[arg(long, short, default_value_t = 2181)]
    pub(crate) port: u16,
    /// How often sessions are checked for expiry, e.g. 100ms.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub(crate) tick: Option<Duration>,
    /// Smallest session timeout granted, e.g. 400ms.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub(crate) min_session_timeout: Option<Duration>,
    /// Largest session timeout granted, e.g. 60s.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub(crate) max_session_timeout: Option<Duration>,
    /// How often empty containers and expired TTL nodes are looked for, e.g. 100ms.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub(crate) container_check_interval: Option<Duration>,
    /// Allow TTL nodes (ZooKeeper's extendedTypesEnabled; off by default, as in ZooKeeper).
    #[arg(long)]
    pub(crate) extended_types: bool,
    /// List children sorted by name (by default in no particular order, as ZooKeeper).
    #[arg(long)]
    pub(crate) sorted_children: bool,
    /// Serve at most this many connections at once.
    #[arg(long, value_name = "N")]
    pub(crate) max_connections: Option<usize>,
    /// Stop reading a connection's requests while more than this many bytes of its
    /// replies are unsent.
    #[arg(long, value_name = "BYTES")]
    pub(crate) max_outstanding_bytes: Option<usize>,
    /// Make clients authenticating with digest USER:PASSWORD super users.
    #[arg(long, value_name = "USER:PASSWORD")]
    pub(crate) super_user: Option<String>,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|err| format!("{err} (write e.g. 30s, 500ms, 2m)"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() { exit::USAGE } else { 0 };
            // Printing help or an error only fails on a closed stream.
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // Our own messages say what went wrong; RUST_LOG=info shows the
        // library's account of it.
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .init();
    match run(cli).await {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("zk-curator: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

/// Refuses a malformed lock path before anything is sent.
fn check_path(path: &str) -> Result<(), Failure> {
    validate_recipe_path(path)
        .map_err(|err| Failure::usage(format!("bad lock path {path:?}: {err}")))
}

async fn run(cli: Cli) -> Result<u8, Failure> {
    match cli.command {
        Command::Server(args) => server::run(args).await,
        Command::Lock(args) => {
            check_path(&args.path)?;
            let settings = connect::Settings::from_args(&args.connect)?;
            // Signals are taken over before connecting, so that an interrupt
            // during the wait for the lock withdraws from the queue cleanly.
            let signals = child::Signals::new()?;
            let framework = connect::connect(&settings, args.id.as_deref()).await?;
            lock::run(&framework, args, signals).await
        }
        Command::Locks(args) => {
            check_path(&args.path)?;
            let settings = connect::Settings::from_args(&args.connect)?;
            let framework = connect::connect(&settings, None).await?;
            let result = locks::run(&framework, &args).await;
            connect::close(&framework, true).await;
            result
        }
        Command::Revoke(args) => {
            check_path(&args.path)?;
            if let Some(node) = args.node.as_deref() {
                revoke::check_node(node)?;
            }
            let settings = connect::Settings::from_args(&args.connect)?;
            let framework = connect::connect(&settings, None).await?;
            let result = revoke::run(&framework, &args).await;
            connect::close(&framework, true).await;
            result
        }
    }
}
