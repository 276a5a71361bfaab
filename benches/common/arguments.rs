//! What the bench programs' command lines share: the flag `cargo bench`
//! passes them, the parser of a count, and the warning an unoptimized
//! build prints. Each program reads its
//! arguments with clap, so `-- --help` says what it takes and a mistake
//! ends it (exit 2) before anything starts. Included with `#[path]` by
//! `benches/locks/options.rs`, `benches/servers.rs` and
//! `cli/benches/dashboard.rs` (bench programs share code as files).

/// The flag `cargo bench` adds to every `harness = false` program's
/// arguments (`PROGRAM ARGS --bench`): accepted, hidden and ignored.
/// Flattened into each program's arguments
/// (`#[command(flatten)] cargo: CargoBench`).
#[derive(Debug, clap::Args)]
pub(crate) struct CargoBench {
    /// Passed by `cargo bench` to every bench program; ignored
    #[arg(long, hide = true)]
    bench: bool,
}

/// A whole number above 0 (surrounding spaces allowed, as in `2, 8`).
#[allow(dead_code, reason = "the servers bench takes no counts")]
pub(crate) fn positive(value: &str) -> Result<usize, String> {
    match value.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("expected a whole number above 0".to_owned()),
    }
}

/// The line each report begins with when the program was built without
/// optimizations (`cargo bench --profile dev`, as CI's smoke run of
/// `--quick` builds it, to reuse the tests' build): its figures only show
/// that every workload runs.
pub(crate) fn unoptimized_warning() -> Option<&'static str> {
    cfg!(debug_assertions).then_some(
        "WARNING: an unoptimized build (cargo bench --profile dev): the figures below only show that each workload runs; quote none of them",
    )
}
