//! The one way durations are written on the command line (`30s`, `500ms`,
//! `2m`), shared by every subcommand's arguments.

use std::time::Duration;

/// Parses a human duration, with a hint on the accepted forms.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|err| format!("{err} (write e.g. 30s, 500ms, 2m)"))
}

/// `duration` in the largest one of `h`, `m`, `s`, `ms` that writes it
/// whole (`100h`, `90s`, `400ms`), as a user would have typed it; below a
/// millisecond, as humantime writes it.
pub(crate) fn show_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if duration.subsec_nanos() % 1_000_000 != 0 || millis == 0 {
        return humantime::format_duration(duration).to_string();
    }
    for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if millis % size == 0 {
            return format!("{}{unit}", millis / size);
        }
    }
    format!("{millis}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_shown_in_their_largest_whole_unit() {
        for (text, shown) in [
            ("100h", "100h"),
            ("90m", "90m"),
            ("20s", "20s"),
            ("90s", "90s"),
            ("400ms", "400ms"),
            ("1ms", "1ms"),
            ("1500ms", "1500ms"),
        ] {
            let parsed = parse_duration(text).unwrap_or_default();
            assert_eq!(show_duration(parsed), shown, "{text}");
        }
    }
}
