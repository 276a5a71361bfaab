//! `zk-curator`: the command line of zk-curator.
//!
//! * `lock` runs a command while holding a ZooKeeper lock (mutex, one half of
//!   a read-write lock, or a semaphore lease), in a process group of its
//!   own, and stops the whole group if the hold is lost or revoked (see
//!   [`child`]);
//! * `locks` lists the holders and waiters of a lock path;
//! * `elect` runs a command while this process leads an election (a
//!   `LeaderLatch`), stopped as `lock` stops its command when the term is
//!   lost;
//! * `leader` prints the leader and the participants of an election, or
//!   (`--watch`) every change of leader;
//! * `revoke` asks holders to give their lock up (Curator's protocol);
//! * `evict` removes a stuck holder's node (a zk-curator holder sees its hold lost);
//! * `dashboard` serves every lock and election under a root: a live page,
//!   JSON and OpenMetrics;
//! * `server` runs the embedded ZooKeeper-protocol server for local work.
//!
//! Exit codes are listed in [`exit`] and in `zk-curator --help`.
#![forbid(unsafe_code)]

mod acl;
mod bounds;
mod child;
mod connect;
mod dashboard;
mod duration;
mod elect;
mod evict;
mod exit;
mod guard;
mod id;
mod leader;
mod lock;
mod locks;
mod revoke;
mod server;
mod terminal;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use zk_curator::framework::path::validate_recipe_path;

use crate::dashboard::DashboardArgs;
use crate::elect::ElectArgs;
use crate::evict::EvictArgs;
use crate::exit::Failure;
use crate::leader::LeaderArgs;
use crate::lock::LockArgs;
use crate::locks::LocksArgs;
use crate::revoke::RevokeArgs;
use crate::server::ServerArgs;

/// Every exit code, shown under the top-level `--help`.
const EXIT_CODES: &str = "\
Exit codes:
  0    success (for `lock` and `elect`: the command's own status is passed
       through)
  64   usage error (bad arguments or path, malformed --zk / ZK_CONNECT,
       no ensemble given, malformed ZK_AUTH or ZK_SASL, a TLS file that
       cannot be read or a client certificate TLS cannot use (X.509 v1, not
       DER, not matching --tls-key), a `lock --id` or `elect --id` that is
       empty, longer than 1024 bytes or holds control characters, an
       `elect --value` or `--value-file` too large for one ZooKeeper
       request (the message gives both sizes), a malformed `--acl`);
       nothing is sent
  66   `revoke --node`: the node is not a participant of the lock;
       `revoke PATH` (an election): it has no leader; `dashboard ROOT`:
       ROOT does not exist (and no --watch)
  69   ZooKeeper could not be reached within the connection timeout, or
       refused us: at once when every host refused for a reason retrying
       cannot change (a certificate, a port that does not speak TLS or
       speaks only TLS, credentials, a host name that does not resolve);
       the message says which, and names every host whose name does not
       resolve ('connection refused' when nothing listens, at the timeout);
       `dashboard`: its --bind address cannot be listened on (the port is
       named)
  70   any other error (refused by ZooKeeper, lost while acquiring, ...);
       `lock`, `elect`: at once when a node's ACL refuses them, the
       message naming the path and the identity used
  75   `lock --timeout` expired before the lock was acquired, or
       `elect --timeout` before this process led
  76   `lock`: the hold was lost while the command ran; `elect`: the
       leadership term was lost while the command ran (its process group
       was stopped), or zk-curator was stopped for longer than its lease
       (its guard killed the group)
  77   `lock`: the hold was revoked while the command ran (its process group
       was stopped); `elect`: asked to step down (`revoke PATH`) while the
       command ran (its process group was stopped)
  78   `lock`, `elect`: the path holds participants of another layout or
       recipe (kazoo's nodes beside Curator's, a latch beside a mutex...),
       which would not see ours: refused at once, nothing left queued
  126  `lock`, `elect`: the command could not be executed
  127  `lock`, `elect`: the command was not found
  128+N `lock`, `elect`: the command was ended by signal N (e.g. 130, 143),
        or zk-curator got signal N (SIGINT, SIGTERM, SIGHUP) before the
        command ran: while connecting to ZooKeeper or waiting for the lock
        or for leadership; it then ends at once, leaving nothing behind
  141  `locks`, `leader`, `revoke`: whoever read the output stopped reading
       (`| head -1`); ends quietly, as SIGPIPE ends other commands";

/// The exit codes of `lock`.
const LOCK_EXIT_CODES: &str = "\
Exit codes:
  the command's  the command ran; its own status is passed through
  64   usage error (bad arguments or path, an --id that is empty, longer
       than 1024 bytes or holds control characters, malformed --zk /
       ZK_CONNECT, no ensemble given, malformed ZK_AUTH, a malformed
       --acl); nothing is sent. Also, once connected, `--leases N
       --layout kazoo` on a kazoo semaphore that admits another number
       (nothing is left behind)
  69   ZooKeeper could not be reached within the connection timeout, or
       refused us: at once when every host refused for a reason retrying
       cannot change (a certificate, a port that does not speak TLS or
       speaks only TLS, credentials, a host name that does not resolve);
       the message says which, and names every host whose name does not
       resolve ('connection refused' when nothing listens, at the timeout)
  70   refused by the ACL of the lock path (or of a node above it), or an
       ACL the server calls invalid (`auth` with no identity): at once,
       the message naming the path and the identity used; any other error
       (lost while acquiring, ...)
  75   --timeout expired before the lock was acquired
  78   the path holds participants of another layout or recipe (kazoo's
       nodes in Curator's layout or the other way round, a leader latch, a
       semaphore beside a mutex...), which would not see ours: refused at
       once, nothing left queued; --layout picks ours
  76   the hold was lost while the command ran (its process group was stopped),
       or zk-curator was stopped for longer than its lease (its guard
       killed the group)
  77   the hold was revoked while the command ran (its process group was stopped)
  79   --max-hold or --max-silence passed: the command's process group was
       stopped, then the lock given back; the message names the bound
  126  the command could not be executed
  127  the command was not found
  128+N the command was ended by signal N (e.g. 130, 143), or
        zk-curator got signal N (SIGINT, SIGTERM, SIGHUP) before the
        command ran: while connecting to ZooKeeper or waiting for the
        lock; it then ends at once, leaving nothing queued";

/// The exit codes of `elect`.
const ELECT_EXIT_CODES: &str = "\
Exit codes:
  the command's  the command ran; its own status is passed through
  64   usage error (bad arguments or path, an --id that is empty, longer
       than 1024 bytes or holds control characters, a --value or
       --value-file too large for one ZooKeeper request (the message gives
       both sizes), malformed --zk / ZK_CONNECT, no ensemble given,
       malformed ZK_AUTH, a malformed --acl); nothing is sent
  69   ZooKeeper could not be reached within the connection timeout, or
       refused us: at once when every host refused for a reason retrying
       cannot change (a certificate, a port that does not speak TLS or
       speaks only TLS, credentials, a host name that does not resolve);
       the message says which, and names every host whose name does not
       resolve ('connection refused' when nothing listens, at the timeout)
  70   refused by the ACL of the election path (or of a node above it), or
       an ACL the server calls invalid (`auth` with no identity): at once,
       the message naming the path and the identity used; any other error
  75   --timeout expired before this process led
  78   the path holds participants of another layout or recipe (kazoo's
       nodes in Curator's layout or the other way round, a `lock` mutex, a
       leader selector...), which would not see ours: refused at once,
       nothing left queued; --layout picks ours
  76   leadership was lost while the command ran (its process group was
       stopped), or zk-curator was stopped for longer than its lease (its
       guard killed the group)
  77   asked to step down (`zk-curator revoke PATH`) while the command ran
       (its process group was stopped; leadership passed on)
  79   --max-hold or --max-silence passed: the command's process group was
       stopped, then leadership given up; the message names the bound
  126  the command could not be executed
  127  the command was not found
  128+N the command was ended by signal N (e.g. 130, 143), or
        zk-curator got signal N (SIGINT, SIGTERM, SIGHUP) before the
        command ran: while connecting to ZooKeeper or waiting for
        leadership; it then ends at once, leaving the election";

/// The exit codes of `leader`.
const LEADER_EXIT_CODES: &str = "\
Exit codes:
  0    success (also when the election has no participants: no leader;
       with --watch, when interrupted by SIGINT)
  64   usage error (bad arguments or path, malformed --zk / ZK_CONNECT,
       no ensemble given, malformed ZK_AUTH); nothing is sent
  69   ZooKeeper could not be reached within the connection timeout, or
       refused us: at once when every host refused for a reason retrying
       cannot change (a certificate, a port that does not speak TLS or
       speaks only TLS, credentials, a host name that does not resolve);
       the message says which, and names every host whose name does not
       resolve ('connection refused' when nothing listens, at the timeout)
  66   the path is no election (a read-write lock, a semaphore, participants
       of several recipes, a folder, nodes no recipe writes): what it is is
       said, and where to look
  70   any other error (e.g. refused by ZooKeeper)";

/// The exit codes of `locks`.
const LOCKS_EXIT_CODES: &str = "\
Exit codes:
  0    success
  64   usage error (bad arguments or path, malformed --zk / ZK_CONNECT,
       no ensemble given, malformed ZK_AUTH); nothing is sent
  69   ZooKeeper could not be reached within the connection timeout, or
       refused us: at once when every host refused for a reason retrying
       cannot change (a certificate, a port that does not speak TLS or
       speaks only TLS, credentials, a host name that does not resolve);
       the message says which, and names every host whose name does not
       resolve ('connection refused' when nothing listens, at the timeout)
  70   any other error (e.g. refused by ZooKeeper)";

/// The exit codes of `revoke`.
const REVOKE_EXIT_CODES: &str = "\
Exit codes:
  0    the request was written into every chosen node, and each holder
       asked gave its node up within 5s
  64   usage error (bad arguments or path, malformed --zk / ZK_CONNECT,
       no ensemble given, malformed ZK_AUTH; a lock's path without --node
       or --all); nothing is written
  66   --node names no participant of the lock; the path has no
       participants, is a folder, holds participants of several recipes
       or nodes no recipe writes (what is there is said); or (without
       --node and --all) the election has no leader; nothing is written
  75   a holder asked did not give its node up within 5s (not revocable,
       or its process is gone and its session has not expired yet): each
       is named
  69   ZooKeeper could not be reached within the connection timeout, or
       refused us: at once when every host refused for a reason retrying
       cannot change (a certificate, a port that does not speak TLS or
       speaks only TLS, credentials, a host name that does not resolve);
       the message says which, and names every host whose name does not
       resolve ('connection refused' when nothing listens, at the timeout)
  70   any other error (e.g. refused by ZooKeeper)";

/// The exit codes of `evict`.
const EVICT_EXIT_CODES: &str = "\
Exit codes:
  0    every chosen node was removed (or was already gone); also when no
       holder is as old as --older-than (nothing to remove)
  64   usage error (bad arguments or path, neither --node nor
       --older-than, malformed --zk / ZK_CONNECT, no ensemble given,
       malformed ZK_AUTH); nothing is sent
  65   a chosen node carries no zk-curator holder identity (Curator's or
       kazoo's holder, another client's): it would not be told; nothing is
       removed without --force
  66   the path does not exist, has no participants, is a folder or holds
       nodes no recipe writes, or --node names no participant; nothing is
       removed
  69   ZooKeeper could not be reached within the connection timeout, or
       refused us (the message says which)
  70   refused by the lock path's ACL (NoAuth), at once; any other error";

/// The exit codes of `dashboard`.
const DASHBOARD_EXIT_CODES: &str = "\
Exit codes:
  0    stopped by SIGINT (Ctrl-C) or SIGTERM
  64   usage error (bad arguments or root, a malformed --overdue, --group
       or --leaderless, malformed --zk / ZK_CONNECT, no ensemble given,
       malformed ZK_AUTH); nothing is sent
  66   ROOT does not exist (with --watch it is served anyway, and shown
       once created)
  69   the --bind address cannot be listened on (the port is taken: the
       message names it), or ZooKeeper could not be reached within the
       connection timeout, or refused us (the message says which)
  70   any other error (e.g. refused by ZooKeeper)";

/// The exit codes of `server`.
const SERVER_EXIT_CODES: &str = "\
Exit codes:
  0    stopped by SIGINT (Ctrl-C) or SIGTERM
  64   usage error (bad arguments, an unreadable or unusable TLS file)
  70   the server could not start (e.g. the port is taken)";

/// Apache Curator's lock and leader election recipes on ZooKeeper, from the
/// shell.
#[derive(Debug, Parser)]
#[command(name = "zk-curator", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
    /// is given then.
    ///
    /// If zk-curator itself dies (SIGKILL, the OOM killer, a crash), a small
    /// guard process (`zk-curator __guard`) kills the whole group at once,
    /// long before the session expires and the next holder starts. The
    /// guard also kills the group when zk-curator gives no sign of life for
    /// a lease of 2/5 of the session timeout (stopped with SIGSTOP or
    /// SIGTSTP, or frozen), well before its session can expire; continued,
    /// zk-curator exits 76. A shorter stop changes nothing. Not covered: a
    /// process that leaves the group on purpose (setsid, setpgid), which is
    /// not followed in any case; a stop of the guard itself or of the whole
    /// process tree; and systems other than Linux (no parent-death signal
    /// or child subreaper there: the guard is armed only just after the
    /// command started).
    ///
    /// Run from a terminal's foreground, the command's group gets the
    /// terminal (Ctrl-C reaches it directly, it may read the terminal) and
    /// zk-curator takes it back at the end. Ctrl-Z stops the command's group
    /// and then zk-curator's job, so the shell shows it stopped; `fg` or
    /// `bg` continue the command only once the lock is confirmed still held
    /// on ZooKeeper (a stop longer than the lease ends the command through
    /// the guard: exit 76). Without a terminal, nothing of this applies.
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
    /// Ask holders of a lock to give it up, or the leader of an election to
    /// step down (Curator's revocation protocol).
    ///
    /// Writes the revocation request into the chosen participant nodes and
    /// prints how many were asked. Only holders that made their hold
    /// revocable react (a `zk-curator lock` run always does). A --node that
    /// is not a participant of the lock is refused (exit 66).
    ///
    /// Without --node and --all, PATH is a leader latch's election (a
    /// selector's queue is a mutex's: give --node or --all; a path that is
    /// neither is refused, naming what it holds): its leader is asked to
    /// step down, and named (the
    /// request goes into the election path's data, not into the leader's
    /// node, so a Curator LeaderLatch queued behind it keeps its watch).
    /// A revocable leader (a `zk-curator elect` run always is; a
    /// LeaderLatch or LeaderSelector after make_revocable) ends its term,
    /// the next participant leads, and it queues again. An election without
    /// participants is refused (exit 66).
    #[command(after_help = REVOKE_EXIT_CODES)]
    Revoke(RevokeArgs),
    /// Remove holders' (or waiters') nodes from a lock or an election.
    ///
    /// For a holder that is stuck while its session lives on (a deadlock, a
    /// wedged call): nothing else ends such a hold. PATH is read as `locks`
    /// reads it; a folder, an empty path or nodes no recipe writes are
    /// refused (exit 66). --node removes one participant; --older-than D
    /// every holder whose node is at least D old (QUEUED in `locks`). A
    /// zk-curator holder sees its node deleted at once: its hold is lost,
    /// its fenced writes are refused, `lock` and `elect` stop their command
    /// (exit 76). A node without zk-curator's holder identity (Curator's,
    /// kazoo's) belongs to a holder that is not told and may go on as if it
    /// held: it is removed only with --force (exit 65 otherwise). Prints
    /// what it removed.
    #[command(after_help = EVICT_EXIT_CODES)]
    Evict(EvictArgs),
    /// Run a command while this process leads an election; exit with its
    /// status.
    ///
    /// Joins the election on PATH as a leader latch, on Apache Curator's
    /// layout (a `latch-` node whose data is --id, or this host's name and
    /// process id without it), so Curator's LeaderLatch and this command
    /// take part in one election. Once this process leads, runs the command
    /// with the term's fencing token in ZK_CURATOR_FENCING_TOKEN (it grows
    /// from one term to the next) and its election node in
    /// ZK_CURATOR_LOCK_NODE. With --value, first proclaims the value
    /// (through the term's fence, into the election path's data; `leader`
    /// shows it), and again at each later term.
    ///
    /// The command runs as under `zk-curator lock`: in a process group of
    /// its own, which gets SIGTERM, then SIGKILL after --kill-after, if the
    /// term is lost (the connection to ZooKeeper lost, the session expired,
    /// the node deleted); zk-curator then exits 76. SIGINT,
    /// SIGTERM and SIGHUP are passed on to the whole group. Leadership is
    /// given up (the next participant leads) once no process of the group
    /// is left.
    ///
    /// As under `lock`, a guard process kills the whole group if zk-curator
    /// itself dies (SIGKILL, the OOM killer, a crash) or gives no sign of
    /// life for 2/5 of the session timeout (stopped or frozen), long before
    /// its session expires and the next participant leads; a process that
    /// leaves the group (setsid, setpgid) and systems other than Linux are
    /// not covered. From a terminal, the group gets its foreground, and
    /// Ctrl-Z stops the group and zk-curator's job; the command is continued
    /// only once the term is confirmed on ZooKeeper.
    #[command(after_help = ELECT_EXIT_CODES)]
    Elect(ElectArgs),
    /// Print the leader of an election and its participants, in order.
    ///
    /// Reads leader latch elections (`latch-` nodes, as written by `elect`
    /// and Curator's LeaderLatch) and leader selector elections (`lock-`
    /// nodes). The first participant leads; the others wait in the order
    /// shown. Columns: role, id (the node's data), holder (host and pid,
    /// for a participant that gave no id), fencing token (the node's czxid:
    /// the token of its term once it leads) and node name; the first line
    /// shows the value the leader proclaimed, if any (`elect --value`).
    ///
    /// With --watch, prints the leader and then one line each time it
    /// changes (JSON lines with --json: path, state "leader", "none" or
    /// "unknown", recipe, and the leader's id, node, token, session and
    /// proclaimed value), until Ctrl-C; a new value is a change too. It keeps one watch, on the leader's node; while the
    /// connection is down the leader is "unknown".
    #[command(after_help = LEADER_EXIT_CODES)]
    Leader(LeaderArgs),
    /// Serve every lock and election under ROOT over HTTP, read-only.
    ///
    /// Follows ROOT with one recursive watch (as `locks ROOT --all --watch`)
    /// and serves, on 127.0.0.1:7070 unless --bind says otherwise: `/`, a
    /// page that updates live (server-sent events from `/events`) with
    /// every lock's and election's holders, queue, ages and flags;
    /// `/api/snapshot`, the same as JSON (the shape of `locks --all
    /// --json`, with `current`, `since_ms` and each path's `flags`);
    /// `/metrics`, OpenMetrics for Prometheus, labelled by lock path and
    /// recipe only. The first line on stdout is the address served. Runs
    /// until Ctrl-C or SIGTERM.
    #[command(after_help = DASHBOARD_EXIT_CODES)]
    Dashboard(DashboardArgs),
    /// Run the embedded ZooKeeper-protocol server until Ctrl-C.
    ///
    /// For local development and tests only: in memory, one node, no
    /// persistence. Prints its connect string on stdout.
    #[command(after_help = SERVER_EXIT_CODES)]
    Server(ServerArgs),
    /// Internal: runs a command for `lock` or `elect` once they let it.
    #[command(name = guard::EXEC_COMMAND, hide = true)]
    Exec(guard::ExecArgs),
    /// Internal: kills a command's process group if zk-curator dies.
    #[command(name = guard::GUARD_COMMAND, hide = true)]
    Guard,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() { exit::USAGE } else { 0 };
            // Printing help or an error only fails on a closed stream.
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    // The helpers of `lock` and `elect` (see `guard`): small, synchronous,
    // quiet, and without a runtime's threads.
    let cli = match cli.command {
        Command::Exec(args) => return guard::exec_main(args),
        Command::Guard => return guard::guard_main(),
        command => Cli { command },
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("zk-curator: cannot start: {err}");
            return ExitCode::from(exit::OTHER);
        }
    };
    // `run` is driven on this thread, which lives as long as the process
    // (the commands' death signal depends on it: see `child`).
    let result = runtime.block_on(run(cli));
    // What is left on the runtime (a connection attempt, a name being
    // resolved) is not waited for: the process ends now.
    runtime.shutdown_background();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            if !failure.message.is_empty() {
                let inputs = user_inputs();
                let message = exit::cut_inputs(&failure.message, inputs.iter().map(String::as_str));
                eprintln!("zk-curator: {message}");
            }
            ExitCode::from(failure.code)
        }
    }
}

/// What the user gave: the arguments (and the value of each `--flag=value`)
/// and `ZK_CONNECT`, for [`exit::cut_inputs`].
fn user_inputs() -> Vec<String> {
    let mut inputs: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    let values: Vec<String> = inputs
        .iter()
        .filter(|arg| arg.starts_with("--"))
        .filter_map(|arg| arg.split_once('=').map(|(_, value)| value.to_owned()))
        .collect();
    inputs.extend(values);
    inputs.extend(std::env::var("ZK_CONNECT"));
    // The longest first, so that an input inside another is not cut apart
    // before the one holding it.
    inputs.sort_by_key(|input| std::cmp::Reverse(input.len()));
    inputs
}

/// Starts `framework` (see [`connect::start`]) unless SIGINT, SIGTERM or
/// SIGHUP comes first: then gives up at once with 128 + the signal's
/// number. Nothing was created yet, so nothing is left behind; a session
/// half made ends with the process.
async fn start_unless_signalled(
    framework: &zk_curator::Framework,
    settings: &connect::Settings,
    signals: &mut child::Signals,
) -> Result<(), Failure> {
    tokio::select! {
        started = connect::start(framework, settings) => started,
        signal = signals.recv() => Err(Failure::new(
            lock::signal_code(signal),
            format!("{signal} received while connecting to ZooKeeper; gave up"),
        )),
    }
}

/// Refuses a malformed path (of a lock, of an election: `what`) before
/// anything is sent.
fn check_path(path: &str, what: &str) -> Result<(), Failure> {
    validate_recipe_path(path)
        .map_err(|err| Failure::usage(format!("bad {what} path {:?}: {err}", exit::shown(path))))
}

async fn run(cli: Cli) -> Result<u8, Failure> {
    match cli.command {
        Command::Server(args) => server::run(args).await,
        Command::Lock(mut args) => {
            check_path(&args.path, "lock")?;
            if let Some(id) = &args.id {
                id::check_id(id)?;
            }
            let mut settings = connect::Settings::from_args(&args.connect)?;
            settings.set_node_acl(args.acl.settle(settings.identity())?);
            // Signals are taken over before connecting: SIGINT or SIGTERM
            // while connecting ends the run at once, and while waiting for
            // the lock withdraws from the queue cleanly.
            let mut signals = child::Signals::new()?;
            let framework = connect::build(&settings, args.id.as_deref())?;
            start_unless_signalled(&framework, &settings, &mut signals).await?;
            lock::run(&framework, args, signals).await
        }
        Command::Locks(args) => {
            check_path(&args.path, "lock")?;
            let settings = connect::Settings::from_args(&args.connect)?;
            let framework = connect::connect(&settings, None).await?;
            let result = locks::run(&framework, &args).await;
            connect::close(&framework, true).await;
            result
        }
        Command::Elect(mut args) => {
            check_path(&args.path, "election")?;
            if let Some(id) = &args.id {
                id::check_id(id)?;
            }
            args.read_value()?;
            let mut settings = connect::Settings::from_args(&args.connect)?;
            settings.set_node_acl(args.acl.settle(settings.identity())?);
            let framework = connect::build(&settings, None)?;
            // Made before connecting, so that a bad --id sends nothing.
            let latch = elect::latch(&framework, &args)?;
            // Signals are taken over before connecting: SIGINT or SIGTERM
            // while connecting ends the run at once, and while waiting for
            // leadership leaves the election cleanly.
            let mut signals = child::Signals::new()?;
            start_unless_signalled(&framework, &settings, &mut signals).await?;
            elect::run(latch, args, signals).await
        }
        Command::Leader(args) => {
            check_path(&args.path, "election")?;
            let settings = connect::Settings::from_args(&args.connect)?;
            let framework = connect::connect(&settings, None).await?;
            let result = leader::run(&framework, &args).await;
            connect::close(&framework, true).await;
            result
        }
        Command::Exec(_) | Command::Guard => Err(Failure::new(
            exit::OTHER,
            "an internal command reached the runtime",
        )),
        Command::Dashboard(args) => {
            check_path(&args.root, "root")?;
            dashboard::run(args).await
        }
        Command::Evict(args) => {
            check_path(&args.path, "lock")?;
            if let Some(node) = args.node.as_deref() {
                revoke::check_node(node)?;
            }
            let settings = connect::Settings::from_args(&args.connect)?;
            let framework = connect::connect(&settings, None).await?;
            let result = evict::run(&framework, &args).await;
            connect::close(&framework, true).await;
            result
        }
        Command::Revoke(args) => {
            check_path(&args.path, "lock")?;
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
