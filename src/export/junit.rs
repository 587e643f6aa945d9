//! JUnit XML, as CI systems read it (GitLab, Jenkins, GitHub test reporters): one `<testsuite>`
//! named after the suite, one `<testcase classname="nodecert.KIND" name="CHECK_ID">` per check.
//! A failed check carries `<failure>`, a check that could not measure `<error>`, a skipped one
//! `<skipped>`; warnings pass (as the certificate counts them) and show in `<system-out>`, which
//! lists every finding. Run facts (simulated, node, suite) are `<properties>`.

use super::Exporter;
use crate::evidence::{CheckRecord, Evidence, Finding, Status};
use std::fmt::Write as _;

pub struct Junit;

impl Exporter for Junit {
    fn flag(&self) -> &'static str {
        "--junit"
    }

    fn render(&self, ev: &Evidence) -> String {
        render(ev)
    }
}

/// Escapes text for XML 1.0 element content or a double-quoted attribute. Characters XML 1.0
/// cannot carry at all (most C0 controls, U+FFFE, U+FFFF) become U+FFFD; in attributes, line
/// breaks and tabs are written as references so that they survive attribute normalisation.
pub fn escape(s: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if attribute => out.push_str("&quot;"),
            '\n' if attribute => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' if attribute => out.push_str("&#9;"),
            '\n' | '\t' => out.push(ch),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            // What CI consoles would act on (C1 controls such as an 8-bit CSI, bidi overrides,
            // line separators) is shown as an escape, as on every other page and line.
            c if crate::console::is_hidden(c) => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

fn attr(s: &str) -> String {
    escape(s, true)
}

fn text(s: &str) -> String {
    escape(s, false)
}

fn seconds(v: f64) -> String {
    if v.is_finite() && v >= 0.0 {
        format!("{v:.3}")
    } else {
        "0.000".into()
    }
}

fn finding_line(f: &Finding) -> String {
    format!(
        "[{}] {}: found {}, expected {}: {}",
        // Information is no judgement: its status says nothing.
        if f.info { "INFO" } else { f.status.label() },
        f.subject.describe(),
        f.found,
        f.expected,
        f.reason
    )
}

/// What the check found, for `<system-out>`: its status line, its plan and every finding.
fn system_out(ev: &Evidence, c: &CheckRecord) -> String {
    let mut s = String::new();
    if ev.simulated {
        s.push_str("SIMULATED: computed from a simulated node, not measured on hardware.\n");
    }
    let _ = writeln!(s, "{}: {}: {}", c.title, c.status.label(), c.summary);
    for p in &c.plan {
        let _ = writeln!(s, "plan: {p}");
    }
    for f in &c.findings {
        let _ = writeln!(s, "{}", finding_line(f));
    }
    s
}

/// The findings that explain a failure or an error (all of them when none is marked).
fn problem_text(c: &CheckRecord, status: Status) -> String {
    let lines: Vec<String> = c
        .findings
        .iter()
        .filter(|f| f.status == status)
        .map(finding_line)
        .collect();
    if lines.is_empty() {
        c.summary.clone()
    } else {
        lines.join("\n")
    }
}

/// Test cases that fail because of what the run left undone: one per promised check that never
/// ran, one for a run that never closed its evidence, one per promised check that ran and could
/// not make its judgement here (its `unjudged`: a fabric whose other nodes never came), one for a
/// run that judged nothing, one per check of a partial run that missed readings. A CI dashboard
/// must not show an unfinished, empty or partial run as green. (classname, name, message)
fn run_shortfall(ev: &Evidence) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = ev
        .missing_checks()
        .into_iter()
        .map(|id| {
            (
                "nodecert.never_ran".to_string(),
                id.clone(),
                format!("{id} never ran: the run did not finish"),
            )
        })
        .collect();
    if out.is_empty() && ev.state != crate::evidence::RunState::Complete {
        out.push((
            "nodecert.run".into(),
            "complete".into(),
            "the run did not finish (its evidence was never closed)".into(),
        ));
    }
    // Its own test case shows only a skip: the promise it left unkept fails here.
    for (id, why) in ev.unjudged() {
        out.push((
            "nodecert.unjudged".into(),
            id.to_string(),
            format!("{id} could not make the judgement the suite promised: {why}"),
        ));
    }
    if ev.assess() == crate::evidence::Verdict::NothingJudged {
        out.push((
            "nodecert.run".into(),
            "judged".into(),
            "nothing judged: every check was skipped".into(),
        ));
    }
    // A partial run is not green either: one case per check that missed readings.
    if ev.assess() == crate::evidence::Verdict::Partial {
        for (id, c) in ev.partial_checks() {
            out.push((
                "nodecert.coverage".into(),
                id.to_string(),
                format!(
                    "partial: {} of {} readings judged; the others were not (not available \
                     here, or no limit applies to them)",
                    c.available, c.total
                ),
            ));
        }
    }
    out
}

pub fn render(ev: &Evidence) -> String {
    let count = |s: Status| ev.checks.iter().filter(|c| c.status == s).count();
    let shortfall = run_shortfall(ev);
    let (tests, failures, errors, skipped) = (
        ev.checks.len() + shortfall.len(),
        count(Status::Fail) + shortfall.len(),
        count(Status::Error),
        count(Status::Skip),
    );
    let time = match ev.finished_at {
        Some(t) => (t - ev.started_at).num_milliseconds() as f64 / 1000.0,
        None => ev.checks.iter().map(|c| c.duration_s).sum(),
    };
    let totals = format!(
        r#"tests="{tests}" failures="{failures}" errors="{errors}" skipped="{skipped}" time="{}""#,
        seconds(time)
    );
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    // A dashboard that shows only the name still says the run was simulated (as the fleet's).
    let _ = writeln!(
        out,
        r#"<testsuites name="{}nodecert" {totals}>"#,
        if ev.simulated { "[SIMULATED] " } else { "" }
    );
    let _ = writeln!(
        out,
        r#"  <testsuite name="{}" {totals} timestamp="{}" hostname="{}">"#,
        attr(&ev.suite.name),
        ev.started_at.format("%Y-%m-%dT%H:%M:%S"),
        attr(&ev.node.hostname),
    );
    out.push_str("    <properties>\n");
    let mut props: Vec<(&str, String)> = vec![
        ("simulated", ev.simulated.to_string()),
        ("node", ev.node.hostname.clone()),
        ("suite", ev.suite.name.clone()),
        ("suite_sha256", ev.suite.sha256.clone()),
        ("node_summary", ev.node.summary()),
        ("verdict", ev.assess().label().to_string()),
        ("backend", ev.backend.name.clone()),
        ("nodecert_version", ev.nodecert_version.clone()),
        ("evidence_format_version", ev.format_version.to_string()),
    ];
    if let Some(sim) = &ev.simulation {
        props.push(("simulation_node", sim.node.clone()));
        props.push(("simulation_seed", sim.seed.to_string()));
        props.push(("simulation_faults", sim.faults.join(" ")));
    }
    for (k, v) in props {
        let _ = writeln!(
            out,
            r#"      <property name="{}" value="{}"/>"#,
            attr(k),
            attr(&v)
        );
    }
    out.push_str("    </properties>\n");
    for c in &ev.checks {
        let _ = write!(
            out,
            r#"    <testcase classname="nodecert.{}" name="{}" time="{}">"#,
            attr(&c.kind),
            attr(&c.id),
            seconds(c.duration_s)
        );
        out.push('\n');
        match c.status {
            Status::Fail => {
                let _ = writeln!(
                    out,
                    r#"      <failure message="{}" type="fail">{}</failure>"#,
                    attr(&c.summary),
                    text(&problem_text(c, Status::Fail))
                );
            }
            Status::Error => {
                let _ = writeln!(
                    out,
                    r#"      <error message="{}" type="error">{}</error>"#,
                    attr(&c.summary),
                    text(&problem_text(c, Status::Error))
                );
            }
            Status::Skip => {
                let _ = writeln!(out, r#"      <skipped message="{}"/>"#, attr(&c.summary));
            }
            Status::Pass | Status::Warn => {}
        }
        let _ = writeln!(
            out,
            "      <system-out>{}</system-out>",
            text(&system_out(ev, c))
        );
        out.push_str("    </testcase>\n");
    }
    for (class, name, message) in &shortfall {
        let _ = writeln!(
            out,
            r#"    <testcase classname="{}" name="{}" time="0.000">"#,
            attr(class),
            attr(name)
        );
        let _ = writeln!(
            out,
            r#"      <failure type="{}" message="{}">{}</failure>"#,
            attr(ev.assess().key()),
            attr(message),
            text(message)
        );
        out.push_str("    </testcase>\n");
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_quotes_and_forbidden_characters() {
        assert_eq!(
            escape("a<b>&\"c\"\n\u{1}", true),
            "a&lt;b&gt;&amp;&quot;c&quot;&#10;\u{fffd}"
        );
        assert_eq!(escape("a<b>\"\n\t", false), "a&lt;b&gt;\"\n\t");
        // Bidi overrides, C1 controls (an 8-bit CSI) and line separators are shown, not sent.
        for (raw, shown) in [
            ("\u{202e}gpu", "\\u{202e}gpu"),
            ("x\u{9b}31m", "x\\u{9b}31m"),
            ("a\u{85}b\u{2028}c", "a\\u{85}b\\u{2028}c"),
        ] {
            assert_eq!(escape(raw, false), shown);
            assert_eq!(escape(raw, true), shown);
        }
    }

    #[test]
    fn one_testcase_per_check_with_its_outcome() {
        let ev = crate::testutil::simulated("h100-sxm-8", &["slow-gpu-pair:gpu=1,peer=4"]);
        let x = render(&ev);
        assert_eq!(x.matches("<testcase ").count(), ev.checks.len());
        let fails = ev
            .checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .count();
        assert!(fails > 0);
        assert_eq!(x.matches("<failure ").count(), fails);
        assert!(x.contains(r#"<testcase classname="nodecert.p2p_bandwidth" name="p2p_bandwidth""#));
        assert!(x.contains(r#"<property name="simulated" value="true"/>"#));
        assert!(x.contains("[FAIL] GPU 1 -&gt; GPU 4: found 2"));
        // The outlier rule's line of the node where it failed is information, said as such.
        assert!(
            x.contains("[INFO] node: found 54 of 56 within, expected within 10.0% of the node"),
            "{x}"
        );
        // Its name says simulated; a measured run's does not. Either is nodecert's own file.
        assert!(x.contains(r#"<testsuites name="[SIMULATED] nodecert" "#));
        let mut real = ev.clone();
        real.simulated = false;
        let y = render(&real);
        assert!(y.contains(r#"<testsuites name="nodecert" "#));
        for file in [&x, &y] {
            assert!(crate::export::is_previous_output(&Junit, file));
        }
    }

    /// A promised check that ran and could not make its judgement (a fabric whose other nodes
    /// never came) leaves the run incomplete: its own case shows a skip, so the file fails on a
    /// case of its own, and counts it.
    #[test]
    fn a_promise_left_unjudged_is_a_failing_case() {
        let mut ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let x = render(&ev);
        assert!(x.contains(r#"failures="0""#), "{x}");
        let c = ev.checks.iter_mut().find(|c| c.id == "topology").unwrap();
        c.status = Status::Skip;
        c.unjudged = Some("the other nodes never came <in 60 s>".into());
        assert_eq!(ev.assess(), crate::evidence::Verdict::Incomplete);
        let x = render(&ev);
        assert!(
            x.contains(r#"<testcase classname="nodecert.unjudged" name="topology" time="0.000">"#),
            "{x}"
        );
        assert!(x.contains(
            r#"message="topology could not make the judgement the suite promised: the other nodes never came &lt;in 60 s&gt;""#
        ));
        assert!(x.contains(r#"<failure type="incomplete""#), "{x}");
        assert!(x.contains(r#"failures="1""#), "{x}");
    }
}
