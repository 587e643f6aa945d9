//! `nodecert diff`: compare two runs.

use super::output::{open_report_dir, write_files};
use super::read_evidence;
use crate::error::{exit, Error, InputError, Result};
use std::path::Path;

pub fn cmd_diff(old: &Path, new: &Path, out: &Path, tolerance_pct: f64) -> Result<u8> {
    if !(tolerance_pct.is_finite() && (0.0..100.0).contains(&tolerance_pct)) {
        return Err(InputError::Other(format!(
            "--tolerance-pct must be at least 0 and below 100, got {tolerance_pct}"
        ))
        .into());
    }
    let (old_path, o) = read_evidence(old)?;
    let (new_path, n) = read_evidence(new)?;
    let mut d = crate::diff::compare(&o, &n, tolerance_pct);
    d.old.source = old_path.display().to_string();
    d.new.source = new_path.display().to_string();
    let r = crate::report::render_diff(&d).map_err(Error::Render)?;
    let dir = open_report_dir(out, None)?;
    super::output::check_own_files(&dir, out, &["diff.html", "diff.md"], None)?;
    write_files(&dir, [("diff.html", r.html), ("diff.md", r.markdown)])?;
    // A comparison with a simulated run says so on every line.
    let wrote = format!(
        "wrote {} and {}\n",
        out.join("diff.md").display(),
        out.join("diff.html").display()
    );
    crate::out!(
        "{}",
        crate::console::tag_lines(&(diff_summary(&d) + &wrote), d.simulated)
    );
    Ok(if d.regressed {
        exit::CHECK_FAILED
    } else {
        exit::PASS
    })
}

/// The console summary of a diff; long lists are cut (the files have everything).
pub fn diff_summary(d: &crate::diff::Diff) -> String {
    use crate::console::visible;
    const MAX: usize = 30;
    fn section(s: &mut String, title: String, lines: Vec<String>) {
        s.push_str(&format!("{title}: {}\n", lines.len()));
        for l in lines.iter().take(MAX) {
            s.push_str(&format!("  {l}\n"));
        }
        if lines.len() > MAX {
            s.push_str(&format!(
                "  ... and {} more (see diff.md)\n",
                lines.len() - MAX
            ));
        }
    }
    let mut s = String::new();
    if d.simulated {
        s.push_str("SIMULATED RESULTS: not a certification of real hardware\n");
    }
    for (tag, side) in [("old", &d.old), ("new", &d.new)] {
        s.push_str(&format!(
            "{tag}: {} (suite {} on {}, {}, {}){}\n",
            visible(&side.source),
            visible(&side.suite),
            visible(&side.hostname),
            side.started_at,
            side.verdict,
            // At the end of the line, where the console's mark goes: said once.
            crate::console::simulated_tag(side.simulated)
        ));
    }
    if !d.renumbered.is_empty() {
        let moves: Vec<String> = d
            .renumbered
            .iter()
            .map(|r| format!("old GPU {} is now GPU {}", r.old, r.new))
            .collect();
        s.push_str(&format!(
            "GPUs renumbered (matched by identity; compared GPU by GPU, named in the new numbering): {}\n",
            moves.join(", ")
        ));
    }
    let worse = |w: bool| if w { " (worse)" } else { "" };
    section(
        &mut s,
        "hardware changes".into(),
        d.hardware
            .iter()
            .map(|h| {
                format!(
                    "{}: {} {} -> {}{}",
                    visible(&h.subject),
                    visible(&h.what),
                    visible(&h.old),
                    visible(&h.new),
                    worse(h.worse)
                )
            })
            .collect(),
    );
    section(
        &mut s,
        format!(
            "metrics worse by more than {}% (of {} compared)",
            d.tolerance_pct, d.metrics_compared
        ),
        d.regressions
            .iter()
            .map(|c| visible(&c.describe()))
            .collect(),
    );
    if !d.not_compared.is_empty() {
        section(
            &mut s,
            "not compared".into(),
            d.not_compared
                .iter()
                .map(|c| visible(&c.describe()))
                .collect(),
        );
    }
    section(
        &mut s,
        "verdicts changed".into(),
        d.verdicts
            .iter()
            .map(|v| format!("{}{}", visible(&v.describe()), worse(v.worse)))
            .collect(),
    );
    if !d.improvements.is_empty() {
        s.push_str(&format!(
            "metrics better by more than {}%: {}\n",
            d.tolerance_pct,
            d.improvements.len()
        ));
    }
    if d.run_verdict_worse {
        s.push_str(&format!(
            "run verdict: {} -> {} (worse)\n",
            d.old.verdict, d.new.verdict
        ));
    }
    s.push_str(if d.regressed {
        "result: REGRESSED"
    } else {
        "result: NO REGRESSION"
    });
    // What was not compared is not known not to have regressed.
    if !d.not_compared.is_empty() {
        s.push_str(&format!(
            " ({} not compared: measured under other conditions)",
            match d.not_compared.len() {
                1 => "1 check".to_string(),
                n => format!("{n} checks"),
            }
        ));
    }
    s.push('\n');
    s
}
