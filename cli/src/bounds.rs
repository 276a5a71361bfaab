//! `--max-hold` and `--max-silence` of `lock` and `elect`: a command that
//! runs too long, or stops saying it is making progress, is stopped (its
//! whole process group, as for a lost hold), and only then is the hold
//! given back, so that the next holder's command never starts while this
//! one's group lives. zk-curator exits [`BOUND_PASSED`](crate::exit::BOUND_PASSED),
//! naming the bound.
//!
//! Progress, the way any shell program can give it: the command touches
//! the file named in `ZK_CURATOR_PROGRESS_FILE` (`touch
//! "$ZK_CURATOR_PROGRESS_FILE"`), which zk-curator makes (empty, readable
//! by its user only) when `--max-silence` is given and removes afterwards.
//! Every change of the file's modification time counts as progress; its
//! content is never read. The library's own bounds
//! ([`HoldBounds`](zk_curator::HoldBounds)) end a hold at once, while the
//! stuck task may still run; a command has no fence, so the command line
//! stops the group first and gives the hold back after.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use clap::Args;
use tokio::time::Instant;
use zk_curator::{Bound, HoldBounds};

use crate::duration::{parse_duration, show_duration};

/// The environment variable naming the file a command touches to say it
/// is making progress.
pub(crate) const PROGRESS_ENV: &str = "ZK_CURATOR_PROGRESS_FILE";

/// The bounds on the command a hold runs.
#[derive(Args, Clone, Debug, Default)]
pub(crate) struct BoundArgs {
    /// Stop the command (its whole process group, as for a lost hold) once
    /// it has run this long under the hold, then give the hold back and
    /// exit 79, e.g. 10m. More than zero, at most a year.
    #[arg(long, value_name = "D", value_parser = parse_bound)]
    pub(crate) max_hold: Option<Duration>,
    /// Stop the command (as --max-hold does) once this long has passed
    /// without progress: the command says it is making progress by
    /// touching the file named in $ZK_CURATOR_PROGRESS_FILE (`touch
    /// "$ZK_CURATOR_PROGRESS_FILE"`), made for it by zk-curator; exit 79.
    /// More than zero, at most a year.
    #[arg(long, value_name = "D", value_parser = parse_bound)]
    pub(crate) max_silence: Option<Duration>,
}

/// Parses a bound: a duration the library's bounds accept (the one rule,
/// [`HoldBounds::validate`]).
fn parse_bound(text: &str) -> Result<Duration, String> {
    let bound = parse_duration(text)?;
    HoldBounds::new()
        .duration(bound)
        .validate()
        .map_err(|err| match err {
            zk_curator::Error::InvalidArgument(why) => why,
            other => other.to_string(),
        })?;
    Ok(bound)
}

impl BoundArgs {
    /// Whether any bound is given.
    pub(crate) fn is_bounded(&self) -> bool {
        self.max_hold.is_some() || self.max_silence.is_some()
    }

    /// What the bound that passed was, for messages.
    pub(crate) fn describe(&self, bound: Bound) -> String {
        match (bound, self.max_hold, self.max_silence) {
            (Bound::Silence, _, Some(silence)) => format!(
                "no progress for --max-silence {} (the file in ${PROGRESS_ENV} was not touched)",
                show_duration(silence)
            ),
            (_, Some(hold), _) => format!("it ran for --max-hold {}", show_duration(hold)),
            _ => "a bound passed".into(),
        }
    }
}

/// The progress file of one command, removed when dropped.
pub(crate) struct ProgressFile {
    path: PathBuf,
}

impl ProgressFile {
    /// Makes an empty file of this user's only, with a name no one else
    /// has (the pid and the clock's nanoseconds; made with `create_new`, so
    /// an existing file or link is never reused).
    pub(crate) fn make() -> std::io::Result<ProgressFile> {
        let dir = std::env::temp_dir();
        let mut last = None;
        for attempt in 0..8u32 {
            let nanos = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let path = dir.join(format!(
                "zk-curator-progress-{}-{nanos:08x}{attempt}",
                std::process::id()
            ));
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(_) => return Ok(ProgressFile { path }),
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => last = Some(err),
                Err(err) => return Err(err),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no free name")))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn modified(&self) -> Option<SystemTime> {
        std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok()
    }
}

impl Drop for ProgressFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Completes with the bound that passed, counting from now: the hold
/// bound, or the silence bound since now or the last change of
/// `progress`'s modification time (looked at every eighth of the silence
/// bound, at least every 20 ms and at most every second). Never, without
/// bounds.
pub(crate) async fn passed(args: &BoundArgs, progress: Option<&ProgressFile>) -> Bound {
    let start = Instant::now();
    let hold_end = args.max_hold.map(|d| start + d);
    let tick = args
        .max_silence
        .map(|d| (d / 8).clamp(Duration::from_millis(20), Duration::from_secs(1)));
    let mut last_progress = start;
    let mut seen = progress.and_then(ProgressFile::modified);
    loop {
        let silence_end = args.max_silence.map(|d| last_progress + d);
        let now = Instant::now();
        if hold_end.is_some_and(|end| now >= end) {
            return Bound::Duration;
        }
        if silence_end.is_some_and(|end| now >= end) {
            return Bound::Silence;
        }
        let wake = [hold_end, silence_end, tick.map(|t| now + t)]
            .into_iter()
            .flatten()
            .min();
        match wake {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending::<()>().await,
        }
        let modified = progress.and_then(ProgressFile::modified);
        if modified.is_some() && modified != seen {
            seen = modified;
            // Progress counts only before its bound.
            if silence_end.is_none_or(|end| Instant::now() < end) {
                last_progress = Instant::now();
            }
        }
    }
}
