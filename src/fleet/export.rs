//! The fleet's machine outputs: JUnit XML with one test suite per node, and Prometheus text
//! with a `node` label, as node_exporter's textfile collector reads it.

use super::{FleetReport, NodeVerdict};
use crate::evidence::Status;
use crate::export::junit::escape;
use crate::export::prometheus::{escape_label_value, format_value, status_code};

/// JUnit XML: a test suite per node, a test case per check (failures and errors as such, skips
/// as skipped); a node with no checks to show (not tested, refused), or whose verdict is not a
/// pass although none of its checks failed (partial, incomplete, nothing judged), has one more
/// failed case, "node", that says why: no node short of a pass shows green.
pub fn junit(r: &FleetReport) -> String {
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let (mut tests, mut failures, mut errors) = (0, 0, 0);
    let mut suites = String::new();
    for n in &r.nodes {
        let mut cases = String::new();
        let (mut t, mut f, mut e, mut sk) = (0, 0, 0, 0);
        let why = n.why.join("; ");
        let a_check_failed = n
            .checks
            .values()
            .any(|st| matches!(st, Status::Fail | Status::Error));
        let short =
            !matches!(n.verdict, NodeVerdict::Pass | NodeVerdict::Flagged) && !a_check_failed;
        if n.checks.is_empty()
            || short
            || matches!(n.verdict, NodeVerdict::Refused | NodeVerdict::NotTested)
        {
            t += 1;
            f += 1;
            cases.push_str(&format!(
                "    <testcase classname=\"{}\" name=\"node\"><failure message=\"{}\">{}</failure></testcase>\n",
                escape(&n.name, true),
                escape(n.verdict.label(), true),
                escape(&why, false)
            ));
        }
        for (id, st) in &n.checks {
            t += 1;
            let body = match st {
                Status::Fail => {
                    f += 1;
                    format!(
                        "<failure message=\"{}\">{}</failure>",
                        escape(st.label(), true),
                        escape(&why, false)
                    )
                }
                Status::Error => {
                    e += 1;
                    format!(
                        "<error message=\"{}\">{}</error>",
                        escape(st.label(), true),
                        escape(&why, false)
                    )
                }
                Status::Skip => {
                    sk += 1;
                    "<skipped/>".to_string()
                }
                Status::Pass | Status::Warn => String::new(),
            };
            cases.push_str(&format!(
                "    <testcase classname=\"{}\" name=\"{}\">{body}</testcase>\n",
                escape(&n.name, true),
                escape(id, true)
            ));
        }
        tests += t;
        failures += f;
        errors += e;
        suites.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{t}\" failures=\"{f}\" errors=\"{e}\" skipped=\"{sk}\">\n{cases}  </testsuite>\n",
            escape(&n.name, true)
        ));
    }
    s.push_str(&format!(
        "<testsuites name=\"{}nodecert fleet\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\">\n{suites}</testsuites>\n",
        if r.simulated { "[SIMULATED] " } else { "" }
    ));
    s
}

/// Prometheus text: the fleet's verdict and counts, each node's verdict and check statuses
/// (the codes of `nodecert run --prometheus`), and its outliers.
pub fn prometheus(r: &FleetReport) -> String {
    let mut s = String::new();
    let mut family = |name: &str, help: &str, samples: Vec<(String, f64)>| {
        s.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
        for (labels, v) in samples {
            s.push_str(&format!("{name}{labels} {}\n", format_value(v)));
        }
    };
    let l = |pairs: &[(&str, &str)]| {
        let inner: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape_label_value(v)))
            .collect();
        format!("{{{}}}", inner.join(","))
    };
    family(
        "nodecert_fleet_simulated",
        "1 when some node's results are simulated: not a certification of real hardware.",
        vec![(String::new(), if r.simulated { 1.0 } else { 0.0 })],
    );
    family(
        "nodecert_fleet_pass",
        "1 when no node failed, errored, was refused or left no evidence (flagged nodes allowed).",
        vec![(
            String::new(),
            if r.verdict <= NodeVerdict::Flagged {
                1.0
            } else {
                0.0
            },
        )],
    );
    family(
        "nodecert_fleet_nodes",
        "Nodes of the fleet by verdict.",
        NodeVerdict::ALL
            .iter()
            .map(|v| {
                (
                    l(&[("verdict", v.key())]),
                    *r.counts.get(v.key()).unwrap_or(&0) as f64,
                )
            })
            .collect(),
    );
    family(
        "nodecert_fleet_node_verdict",
        "1 for the node's verdict in the fleet (pass, flagged, fail, error, refused, ...).",
        r.nodes
            .iter()
            .map(|n| (l(&[("node", &n.name), ("verdict", n.verdict.key())]), 1.0))
            .collect(),
    );
    family(
        "nodecert_fleet_node_check_status",
        "Each node's check status: -1 skip, 0 pass, 1 warn, 2 fail, 3 error.",
        r.nodes
            .iter()
            .flat_map(|n| {
                n.checks
                    .iter()
                    .map(|(c, st)| (l(&[("node", &n.name), ("check", c)]), status_code(*st)))
            })
            .collect(),
    );
    family(
        "nodecert_fleet_node_outliers",
        "Figures of the node more than the outlier margin worse than the fleet's median.",
        r.nodes
            .iter()
            .map(|n| {
                (
                    l(&[("node", &n.name)]),
                    r.outliers.iter().filter(|o| o.node == n.name).count() as f64,
                )
            })
            .collect(),
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{gather, judge};

    /// A node's name, verdict and check statuses.
    type Node<'a> = (&'a str, NodeVerdict, &'a [(&'a str, Status)]);

    /// The fleet's JUnit for nodes of these verdicts, each with these check statuses.
    fn junit_of(nodes: &[Node]) -> String {
        let mut r = judge::judge(Vec::new(), &[], 10.0);
        r.nodes = nodes
            .iter()
            .map(|(name, verdict, checks)| {
                let mut n = gather::blank(name);
                n.verdict = *verdict;
                n.why = vec![format!("why {name}")];
                n.checks = checks.iter().map(|(c, s)| (c.to_string(), *s)).collect();
                n
            })
            .collect();
        junit(&r)
    }

    fn suite_of<'a>(x: &'a str, node: &str) -> &'a str {
        let start = x.find(&format!("<testsuite name=\"{node}\"")).unwrap();
        let end = start + x[start..].find("</testsuite>").unwrap();
        &x[start..end]
    }

    #[test]
    fn no_node_short_of_a_pass_shows_green() {
        let fine: &[(&str, Status)] = &[("health", Status::Pass), ("p2p_bandwidth", Status::Skip)];
        let x = junit_of(&[
            ("ok", NodeVerdict::Pass, fine),
            ("slow", NodeVerdict::Flagged, fine),
            ("part", NodeVerdict::Partial, fine),
            ("inc", NodeVerdict::Incomplete, fine),
            (
                "none",
                NodeVerdict::NothingJudged,
                &[("p2p_bandwidth", Status::Skip)],
            ),
            ("bad", NodeVerdict::Fail, &[("health", Status::Fail)]),
            ("ref", NodeVerdict::Refused, fine),
        ]);
        for (node, failures) in [
            ("ok", 0),
            ("slow", 0),
            ("part", 1),
            ("inc", 1),
            ("none", 1),
            ("bad", 1),
            ("ref", 1),
        ] {
            let s = suite_of(&x, node);
            assert!(
                s.contains(&format!("failures=\"{failures}\"")),
                "{node}: {s}"
            );
        }
        // The node's own case says its verdict and why.
        let s = suite_of(&x, "part");
        assert!(
            s.contains("name=\"node\"><failure message=\"PARTIAL\">why part</failure>"),
            "{s}"
        );
        // A failed check is the failure: no extra node case for it.
        assert!(!suite_of(&x, "bad").contains("name=\"node\""));
        assert!(
            x.contains(
                "<testsuites name=\"nodecert fleet\" tests=\"16\" failures=\"5\" errors=\"0\">"
            ),
            "{x}"
        );
    }
}
