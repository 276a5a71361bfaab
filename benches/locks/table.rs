//! The columns the contender tables share: a row's median, min–max and
//! ratios to Curator and zk-curator, the header above them, the noise note
//! at the end of a row, and a median or `n/a`.

use super::contenders::{CURATOR, ZK_CURATOR};
use super::stats::{noise, ratio, Spread};

/// A table row's leading columns: median, min–max, vs Curator, vs zk-curator.
pub(crate) fn lead_columns(spreads: &[Option<Spread>], i: usize, decimals: usize) -> String {
    match &spreads[i] {
        Some(s) => format!(
            "{:>10.*} {:>17} {:>9} {:>9}",
            decimals,
            s.median,
            s.range(decimals),
            ratio(Some(s), spreads.get(CURATOR).and_then(Option::as_ref)),
            ratio(Some(s), spreads[ZK_CURATOR].as_ref()),
        ),
        None => format!("{:>10} {:>17} {:>9} {:>9}", "n/a", "", "", ""),
    }
}

pub(crate) fn lead_header(what: &str) -> String {
    format!(
        "{:<34} {:>10} {:>17} {:>9} {:>9}",
        "contender", what, "min–max", "vs Cur.", "vs zkc"
    )
}

/// The noise note of row `i`: against Curator (Curator's row: against zk-curator).
pub(crate) fn noise_note(spreads: &[Option<Spread>], i: usize) -> String {
    let reference = if i == CURATOR { ZK_CURATOR } else { CURATOR };
    let name = if reference == CURATOR {
        "Curator"
    } else {
        "zk-curator"
    };
    if i == reference {
        return String::new();
    }
    noise(
        spreads[i].as_ref(),
        spreads.get(reference).and_then(Option::as_ref),
        name,
    )
}

pub(crate) fn opt(value: Option<Spread>, decimals: usize) -> String {
    value.map_or_else(
        || "n/a".to_owned(),
        |s| format!("{:.*}", decimals, s.median),
    )
}

/// A share's median (0 to 1) as a whole percentage, or "n/a".
pub(crate) fn percent(value: Option<Spread>) -> String {
    value.map_or_else(|| "n/a".to_owned(), |s| format!("{:.0}%", 100.0 * s.median))
}
