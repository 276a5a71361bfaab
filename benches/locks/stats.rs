//! Medians with their spread over reps, and the noise rule.

/// The reps of one figure: median, min and max.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) reps: usize,
}

impl Spread {
    /// `None` for no values (every rep failed).
    pub(crate) fn of(values: &[f64]) -> Option<Spread> {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: sorted[0],
            max: sorted[n - 1],
            reps: n,
        })
    }

    /// The noise rule: two figures differ only if their min–max ranges over
    /// the reps do not overlap. With one rep there is no range to judge by.
    pub(crate) fn within_noise(&self, other: &Spread) -> Option<bool> {
        if self.reps < 2 || other.reps < 2 {
            return None;
        }
        Some(self.min <= other.max && other.min <= self.max)
    }

    /// `min–max` with `decimals` decimals.
    pub(crate) fn range(&self, decimals: usize) -> String {
        format!("{:.*}–{:.*}", decimals, self.min, decimals, self.max)
    }
}

/// `a / b` as `1.23x`, or `-`.
pub(crate) fn ratio(value: Option<&Spread>, reference: Option<&Spread>) -> String {
    match (value, reference) {
        (Some(v), Some(r)) if r.median > 0.0 => format!("{:.2}x", v.median / r.median),
        _ => "-".to_owned(),
    }
}

/// The noise verdict of `value` against `reference`, for a table's last column.
pub(crate) fn noise(value: Option<&Spread>, reference: Option<&Spread>, name: &str) -> String {
    match (value, reference) {
        (Some(v), Some(r)) => match v.within_noise(r) {
            Some(true) => format!("within noise of {name}"),
            Some(false) => String::new(),
            None => "1 rep: no noise estimate".to_owned(),
        },
        _ => String::new(),
    }
}
