//! The one plot of BENCHMARKS.md: contended hand-offs/s against N sessions,
//! one line per contender (median over the reps, a bar from min to max).
//! Plain SVG, written by the bench itself (`-- --plot <file.svg>`).

use std::fmt::Write as _;

use super::stats::Spread;

const COLORS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// One contender's line: its label and (N, hand-offs/s) points.
pub(crate) struct Series {
    pub(crate) label: String,
    pub(crate) points: Vec<(usize, Spread)>,
}

pub(crate) fn handoffs_svg(title: &str, subtitle: &str, series: &[Series]) -> String {
    let (width, height) = (760.0, 460.0);
    let (left, right, top, bottom) = (80.0, 230.0, 60.0, 60.0);
    let plot_w = width - left - right;
    let plot_h = height - top - bottom;
    let mut ns: Vec<usize> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|(n, _)| *n))
        .collect();
    ns.sort_unstable();
    ns.dedup();
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|(_, p)| p.max))
        .fold(0.0_f64, f64::max);
    let y_top = nice_ceiling(y_max.max(1.0));
    // N on a log scale (2, 8, 32 are evenly spaced).
    let (ln_lo, ln_hi) = match (ns.first(), ns.last()) {
        (Some(&lo), Some(&hi)) if hi > lo => ((lo as f64).ln(), (hi as f64).ln()),
        (Some(&lo), _) => ((lo as f64).ln() - 1.0, (lo as f64).ln() + 1.0),
        _ => (0.0, 1.0),
    };
    let x = |n: usize| left + 20.0 + (plot_w - 40.0) * ((n as f64).ln() - ln_lo) / (ln_hi - ln_lo);
    let y = |v: f64| top + plot_h * (1.0 - v / y_top);

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{left}" y="24" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        svg,
        r##"<text x="{left}" y="42" fill="#555">{}</text>"##,
        escape(subtitle)
    );
    // Axes and grid.
    for i in 0..=5 {
        let v = y_top * i as f64 / 5.0;
        let yy = y(v);
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{v:.0}</text>"##,
            left + plot_w,
            left - 6.0,
            yy + 4.0
        );
    }
    for &n in &ns {
        let xx = x(n);
        let _ = writeln!(
            svg,
            r##"<line x1="{xx:.1}" y1="{top}" x2="{xx:.1}" y2="{:.1}" stroke="#eee"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{n}</text>"##,
            top + plot_h,
            top + plot_h + 18.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">N sessions contending for one lock (log scale)</text>"#,
        left + plot_w / 2.0,
        height - 14.0
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(20 {:.1}) rotate(-90)" text-anchor="middle">hand-offs/s (median, bar = min–max)</text>"#,
        top + plot_h / 2.0
    );
    // The lines, with a small horizontal offset each so bars do not overlap.
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let dx = (i as f64 - (series.len() as f64 - 1.0) / 2.0) * 4.0;
        let points: Vec<String> = s
            .points
            .iter()
            .map(|(n, p)| format!("{:.1},{:.1}", x(*n) + dx, y(p.median)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
            points.join(" ")
        );
        for (n, p) in &s.points {
            let xx = x(*n) + dx;
            let _ = writeln!(
                svg,
                r#"<line x1="{xx:.1}" y1="{:.1}" x2="{xx:.1}" y2="{:.1}" stroke="{color}" stroke-width="1.5"/><circle cx="{xx:.1}" cy="{:.1}" r="3.5" fill="{color}"/>"#,
                y(p.min),
                y(p.max),
                y(p.median)
            );
        }
        let ly = top + 14.0 + 22.0 * i as f64;
        let lx = left + plot_w + 16.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 22.0,
            lx + 28.0,
            ly + 4.0,
            escape(&s.label)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// 1, 2 or 5 times a power of ten, at least `v`.
fn nice_ceiling(v: f64) -> f64 {
    let power = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * power)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
