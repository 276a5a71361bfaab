//! The contended workload: N sessions, one task each, hand one lock around
//! for a window; hand-offs/s, and the requests and watch notifications a
//! hand-off costs the server, for each N; then the plot (`--plot`). On the
//! bench's ensemble (`--ensemble`) each row also gives its hand-offs/s as a
//! share of the ensemble's ceiling (`ceiling.rs`).

use super::contenders::Contender;
use super::figures::{per, Handoffs};
use super::findings::Findings;
use super::options::Config;
use super::plot;
use super::reps::{failures, run_reps, spread, Sample};
use super::stats::Spread;
use super::table::{lead_columns, lead_header, noise_note, opt};
use super::target::Target;

pub(crate) async fn contended_phase(
    config: &Config,
    target: &Target,
    root: &str,
    contenders: &mut [Contender],
    idle: f64,
    findings: &mut Findings,
) {
    println!();
    println!(
        "== Contended hand-offs: N sessions (one task each) loop acquire->release on ONE path for {} s a rep ==",
        config.contend.as_secs()
    );
    println!("   hand-offs/s = holds begun within the window / window; req = requests the server received per");
    println!("   hand-off; watches = NodeDeleted + NodeChildrenChanged notifications per hand-off (a herd: ~N-1);");
    println!("   switched = share of holds taken by another session than the previous hold's");
    // On the ensemble: the share of its ceiling (median, and the reps' range).
    let ceiling = findings.ceiling.filter(|_| config.ensemble.is_some());
    if let Some(c) = ceiling {
        println!(
            "   % ceil = hand-offs/s as a share of the ensemble's ceiling ({:.0} create+delete pairs/s), median (min–max)",
            c.median
        );
    }
    let share = |rate: Option<Spread>| match (rate, ceiling) {
        (Some(r), Some(c)) if c.median > 0.0 => format!(
            "{:.1}% ({:.1}–{:.1})",
            100.0 * r.median / c.median,
            100.0 * r.min / c.median,
            100.0 * r.max / c.median
        ),
        _ => "n/a".to_owned(),
    };
    let mut series: Vec<plot::Series> = contenders
        .iter()
        .map(|c| plot::Series {
            label: c.label.to_owned(),
            points: Vec::new(),
        })
        .collect();
    for &n in &config.sessions {
        let connect = target.connect.clone();
        let (window, limit) = (config.contend, config.limit());
        let reps = run_reps(
            config,
            target.four_letter.as_deref(),
            idle,
            contenders,
            |c, _| {
                let path = format!("{root}/contended-{n}/{}", c.short);
                let connect = connect.clone();
                Box::pin(async move { c.contended(&connect, &path, n, n, window, limit).await })
            },
        )
        .await;
        let rates: Vec<Option<Spread>> = reps
            .iter()
            .map(|r| spread(r, |s| Some(s.figures.per_s)))
            .collect();
        println!();
        println!(
            "N = {n}\n{} {:>7} {:>8} {:>9}{}  note",
            lead_header("hand-offs/s"),
            "req",
            "watches",
            "switched",
            if config.ensemble.is_some() {
                format!(" {:>20}", "% ceil")
            } else {
                String::new()
            }
        );
        let mut row = Vec::new();
        for (i, c) in contenders.iter().enumerate() {
            let releases = |s: &Sample<Handoffs>| s.figures.releases as f64;
            let req = spread(&reps[i], |s| {
                per(s.traffic.map(|t| t.requests), releases(s))
            });
            let watches = spread(&reps[i], |s| per(s.traffic.map(|t| t.watches), releases(s)));
            let switched = spread(&reps[i], |s| {
                (s.figures.holds > 0)
                    .then(|| 100.0 * s.figures.switches as f64 / s.figures.holds as f64)
            });
            println!(
                "{:<34} {} {:>7} {:>8} {:>9}{}  {}{}",
                c.label,
                lead_columns(&rates, i, 0),
                opt(req, 2),
                opt(watches, 2),
                switched.map_or_else(|| "n/a".to_owned(), |s| format!("{:.0}%", s.median)),
                if config.ensemble.is_some() {
                    format!(" {:>20}", share(rates[i]))
                } else {
                    String::new()
                },
                noise_note(&rates, i),
                failures(&reps[i])
                    .map(|f| format!(" {f}"))
                    .unwrap_or_default()
            );
            if let Some(s) = rates[i] {
                series[i].points.push((n, s));
            }
            row.push([rates[i], req, watches]);
        }
        findings.contended.push((n, row));
    }
    if let Some(path) = &config.plot {
        let title = match config.ensemble {
            Some(n) => format!(
                "Contended hand-offs/s against N sessions (a {n}-member ZooKeeper 3.8 ensemble, forceSync=yes)"
            ),
            None => {
                "Contended hand-offs/s against N sessions (one ZooKeeper 3.8, forceSync=yes)"
                    .to_owned()
            }
        };
        let svg = plot::handoffs_svg(
            &title,
            &format!(
                "{} rep(s) of {} s, contenders interleaved; {}",
                config.reps,
                config.contend.as_secs(),
                chrono_free_date()
            ),
            &series,
        );
        match std::fs::write(path, svg) {
            Ok(()) => println!("plot written to {}", path.display()),
            Err(err) => println!("plot: cannot write {}: {err}", path.display()),
        }
    }
}

/// Today's date (UTC) from `date`, for the plot's subtitle.
fn chrono_free_date() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}
