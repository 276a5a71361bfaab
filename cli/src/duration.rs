//! The one way durations are written on the command line (`30s`, `500ms`,
//! `2m`), shared by every subcommand's arguments.

use std::time::Duration;

/// Parses a human duration, with a hint on the accepted forms.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|err| format!("{err} (write e.g. 30s, 500ms, 2m)"))
}
