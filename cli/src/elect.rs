//! `zk-curator elect`: runs a command while this process leads an election.
//!
//! The order of events:
//! 1. join the election at PATH as a [`LeaderLatch`] (Curator's layout: a
//!    protected ephemeral sequential `latch-` node whose data is `--id`, or
//!    the framework's holder identity without it), so that Curator's
//!    latches and ours take part in one election;
//! 2. wait until this process leads, within `--timeout` if given; an
//!    interrupt meanwhile leaves the election;
//!    With `--value`, the value is proclaimed through the term's fence
//!    (into the election path's data) before the command runs;
//! 3. run the command under the term exactly as `lock` runs it under a
//!    hold ([`crate::child::run_command`]): its own process group, the
//!    term's fencing token and node in its environment, signals passed on;
//! 4. when the term is lost, stop the whole group as `lock` does and exit
//!    with [`crate::exit::LOST`]; when it is asked to step down
//!    (`zk-curator revoke PATH`), likewise, with [`crate::exit::REVOKED`];
//! 5. once no process of the group is left, give leadership up (close the
//!    latch) and exit with the command's status.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use zk_curator::recipes::layout::Layout;
use zk_curator::{Error, Framework, LeaderElection, LeaderLatch, LockLoss};

use crate::acl::AclArgs;
use crate::bounds::BoundArgs;
use crate::child::{exit_code, run_command, Ending, Signals};
use crate::connect::{close, ConnectArgs};
use crate::duration::parse_duration;
use crate::exit::{shown, Failure};
use crate::id::check_id;
use crate::lock::{gave_up_waiting, give_back, timed_out};

/// Options of `elect`.
#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// The election's path, e.g. /services/compactor/leader.
    pub(crate) path: String,
    /// This participant's id, stored as its node's data (Curator's
    /// participant id; `leader` shows it): not empty, at most 1024 bytes,
    /// no control characters (line breaks, tabs, escapes), as for `lock
    /// --id`; checked before anything is sent (exit 64). Without it, the
    /// node carries this host's name and this process's id.
    #[arg(long, value_name = "TEXT")]
    pub(crate) id: Option<String>,
    /// Whose node layout to join the election in: `curator` (a Curator
    /// `LeaderLatch`, the default) or `kazoo` (a participant of Python
    /// kazoo's `Election`, whose nodes are a kazoo `Lock`'s). A path that
    /// holds participants of another layout or recipe (a `lock` mutex, a
    /// leader selector), which would not see ours, is refused at once
    /// (exit 78), nothing left queued.
    #[arg(long, value_name = "NAME", default_value = "curator", value_parser = crate::lock::parse_layout)]
    pub(crate) layout: Layout,
    /// The value this process proclaims while it leads (its address, say):
    /// written through the term's fence into the election path's data, as
    /// each term begins, before the command runs. `leader` and `leader
    /// --watch` show it; the node's data stays the id. It must fit in one
    /// ZooKeeper request with the election path (about 1 MiB, less some
    /// 500 bytes and twice the path): a larger one is refused before
    /// anything is sent (exit 64).
    #[arg(long, value_name = "TEXT")]
    pub(crate) value: Option<String>,
    /// --value read from FILE (`-`: standard input), whole, when
    /// zk-curator starts: for a value too long for the command line, or
    /// one kept out of it.
    #[arg(long, value_name = "FILE", conflicts_with = "value")]
    pub(crate) value_file: Option<PathBuf>,
    /// The value proclaimed: --value, or what --value-file held (see
    /// [`ElectArgs::read_value`]).
    #[arg(skip)]
    pub(crate) proclaimed: Option<Vec<u8>>,
    /// Give up (exit 75) if this process does not lead within this long,
    /// e.g. 30s, 500ms, 2m. Without it, wait as long as it takes.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub(crate) timeout: Option<Duration>,
    /// After leadership is lost, how long the command's process group has
    /// between SIGTERM and SIGKILL.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = parse_duration)]
    pub(crate) kill_after: Duration,
    #[command(flatten)]
    pub(crate) bounds: BoundArgs,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
    #[command(flatten)]
    pub(crate) acl: AclArgs,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

impl ElectArgs {
    /// Takes the value to proclaim from `--value` or `--value-file` (read
    /// now, before anything is sent).
    ///
    /// # Errors
    /// A usage failure naming the file when it cannot be read.
    pub(crate) fn read_value(&mut self) -> Result<(), Failure> {
        self.proclaimed = match (&self.value, &self.value_file) {
            (Some(value), _) => Some(value.clone().into_bytes()),
            (None, Some(file)) if file.as_os_str() == "-" => {
                let mut value = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut value).map_err(
                    |err| {
                        Failure::usage(format!("--value-file -: cannot read standard input: {err}"))
                    },
                )?;
                Some(value)
            }
            (None, Some(file)) => Some(std::fs::read(file).map_err(|err| {
                let file = file.display().to_string();
                Failure::usage(format!("--value-file {}: {err}", shown(&file)))
            })?),
            (None, None) => None,
        };
        Ok(())
    }
}

/// What a proclamation's write carries beside the value, at most, apart
/// from the election path: the request's and the multi's headers, the
/// fence's check of the term's node, the data's marker naming the term (and
/// a step-down request's target, kept when one waits), in bytes. Generous:
/// the write's exact size depends on names made only once leading.
const PROCLAIM_OVERHEAD: usize = 512;

/// Refuses a value to proclaim that cannot fit in one request to
/// ZooKeeper (the framework's packet limit, `jute.maxbuffer`), before
/// anything is sent: it would otherwise fail only once leading, after the
/// command had started without it.
fn check_value(framework: &Framework, path: &str, value: &[u8], flag: &str) -> Result<(), Failure> {
    let limit = framework.max_packet_size();
    // The path is written twice: the fence's check of the term's node
    // below it, and the write of its own data.
    let paths = 2 * (framework.namespace().map_or(0, str::len) + path.len());
    let most = limit.saturating_sub(PROCLAIM_OVERHEAD + paths);
    if value.len() > most {
        return Err(Failure::usage(format!(
            "{flag}: the value is {} bytes, too large to proclaim: ZooKeeper takes at most \
             {limit} bytes in one request, which leaves at most {most} bytes for a value \
             proclaimed on {}; nothing was sent",
            value.len(),
            shown(path)
        )));
    }
    Ok(())
}

/// The latch this run takes part with, on a framework not started yet: a
/// path or an id the latch refuses is a usage error, and nothing is sent.
pub(crate) fn latch(framework: &Framework, args: &ElectArgs) -> Result<LeaderLatch, Failure> {
    if let Some(id) = &args.id {
        check_id(id)?;
    }
    if let Some(value) = &args.proclaimed {
        let flag = if args.value.is_some() {
            "--value"
        } else {
            "--value-file"
        };
        check_value(framework, &args.path, value, flag)?;
    }
    let id = args.id.clone().unwrap_or_default();
    let latch = LeaderLatch::with_layout(framework.clone(), &args.path, id.as_str(), args.layout)
        .map_err(|err| match err {
        Error::RequestTooLarge { .. } => Failure::usage(format!(
            "--id is too long ({} bytes) for a node's data: {err}",
            id.len()
        )),
        err => Failure::usage(format!("cannot take part in {}: {err}", shown(&args.path))),
    })?;
    // It steps down when asked (`zk-curator revoke PATH`), as `lock`
    // releases when revoked.
    latch.make_revocable();
    Ok(match &args.proclaimed {
        Some(value) => latch.with_value(value.clone()),
        None => latch,
    })
}

/// Runs `elect` with `latch` (on a started framework), closes the framework
/// and returns the exit code.
pub(crate) async fn run(
    latch: LeaderLatch,
    args: ElectArgs,
    signals: Signals,
) -> Result<u8, Failure> {
    let mut answered = true;
    let result = run_open(&latch, args, signals, &mut answered).await;
    // An unanswered close of the latch means the server is not answering:
    // the framework's close is then only begun.
    close(latch.framework(), answered).await;
    result
}

/// Runs `elect` on an open framework; `answered` is cleared when ZooKeeper
/// did not answer the latch's close in time.
async fn run_open(
    latch: &LeaderLatch,
    args: ElectArgs,
    mut signals: Signals,
    answered: &mut bool,
) -> Result<u8, Failure> {
    let path = args.path.as_str();
    let shown_path = shown(path).to_string();
    let joining = |err: Error| {
        Failure::zk(
            format!("cannot take part in the election {shown_path}"),
            err,
        )
    };
    latch.start().map_err(joining)?;
    let waited = async {
        match args.timeout {
            Some(timeout) => latch.await_leadership_timeout(timeout).await,
            None => latch.await_leadership().await.map(Some),
        }
    };
    let what = format!("leadership of {shown_path}");
    let led = tokio::select! {
        led = waited => led,
        signal = signals.recv() => {
            give_back(latch.close(), path, answered).await;
            return Ok(gave_up_waiting(signal, &what));
        }
    };
    let term = match led {
        Ok(Some(term)) => term,
        Ok(None) => {
            give_back(latch.close(), path, answered).await;
            return Err(timed_out(args.timeout, &what));
        }
        Err(err) => {
            // Told before leaving: a refusal by an ACL may ask the server
            // who this session is.
            let what = format!("cannot take part in the election {shown_path}");
            let failure = args
                .acl
                .refusal
                .failure(latch.framework(), &what, path, err)
                .await;
            give_back(latch.close(), path, answered).await;
            return Err(failure);
        }
    };
    tracing::info!(node = %term.node().path(), token = %term.fencing_token(), "leading");
    if let Some(value) = &args.proclaimed {
        // Out before the command runs (the latch proclaims it as each term
        // begins as well). A failure here is the term's end, which the
        // command's run below reports.
        tokio::select! {
            proclaimed = term.proclaim(value.as_slice()) => {
                if let Err(err) = proclaimed {
                    tracing::warn!(%err, "the value could not be proclaimed");
                }
            }
            signal = signals.recv() => {
                give_back(latch.close(), term.node().path(), answered).await;
                return Ok(gave_up_waiting(signal, &what));
            }
        }
    }

    let ending = run_command(
        &args.command,
        &term,
        &what,
        None,
        &mut signals,
        args.kill_after,
        &args.bounds,
    )
    .await;
    // A step-down at a revocation request ends the term as revoked.
    let ending = ending.map(|ending| match ending {
        Ending::Lost(LockLoss::Revoked) => Ending::Revoked,
        other => other,
    });
    let code = exit_code(ending, &what);
    // Leadership is given up only now that the command's group is gone: a
    // term lost meanwhile is already over, and the latch (which queued
    // again) leaves the election.
    give_back(latch.close(), term.node().path(), answered).await;
    code
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::connect::{build, Settings};
    use crate::exit::USAGE;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: ElectArgs,
    }

    fn refusal(id: &str) -> Failure {
        let cli = Cli::try_parse_from([
            "elect",
            "/election",
            "--id",
            id,
            "--zk",
            "127.0.0.1:1",
            "--",
            "true",
        ])
        .unwrap();
        let settings = Settings::from_args(&cli.args.connect).unwrap();
        // Built, never started: nothing can be sent.
        let framework = build(&settings, None).unwrap();
        latch(&framework, &cli.args).unwrap_err()
    }

    /// An id over ZooKeeper's packet limit cannot be passed as one argument
    /// on Linux (128 KiB at most), so the library's refusal is checked here.
    #[test]
    fn an_id_over_the_node_data_limit_is_a_usage_error() {
        let failure = refusal(&"x".repeat(0x10_0000));
        assert_eq!(failure.code, USAGE, "{}", failure.message);
        assert!(failure.message.contains("too long"), "{}", failure.message);
    }

    /// The bound on a value is the packet limit less what the write
    /// carries beside it: a value at the bound is taken, one byte more is
    /// refused, naming both sizes.
    #[test]
    fn a_value_over_the_packet_limit_is_a_usage_error() {
        let cli =
            Cli::try_parse_from(["elect", "/e", "--zk", "127.0.0.1:1", "--", "true"]).unwrap();
        let settings = Settings::from_args(&cli.args.connect).unwrap();
        let framework = build(&settings, None).unwrap();
        let most = framework.max_packet_size() - PROCLAIM_OVERHEAD - 2 * "/e".len();
        assert!(check_value(&framework, "/e", &vec![0; most], "--value").is_ok());
        let failure = check_value(&framework, "/e", &vec![0; most + 1], "--value").unwrap_err();
        assert_eq!(failure.code, USAGE);
        let size = format!("{} bytes", most + 1);
        assert!(failure.message.contains(&size), "{}", failure.message);
    }

    #[test]
    fn empty_ids_and_control_characters_are_refused() {
        for id in ["", "a\nb", "tab\there"] {
            let failure = refusal(id);
            assert_eq!(failure.code, USAGE, "{id:?}: {}", failure.message);
        }
    }
}
