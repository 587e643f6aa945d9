//! The fleet's machine outputs: JUnit XML with one test suite per node, and Prometheus text
//! with a `node` label, as node_exporter's textfile collector reads it.

use super::{FleetReport, NodeVerdict};
use crate::evidence::Status;
use crate::export::junit::escape;
use crate::export::prometheus::{escape_label_value, format_value, status_code};

/// JUnit XML: a test suite per node, a test case per check (failures and errors as such, skips
/// as skipped); a node with no checks to show (not tested, refused) is one failed case that
/// says why.
pub fn junit(r: &FleetReport) -> String {
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let (mut tests, mut failures, mut errors) = (0, 0, 0);
    let mut suites = String::new();
    for n in &r.nodes {
        let mut cases = String::new();
        let (mut t, mut f, mut e, mut sk) = (0, 0, 0, 0);
        let why = n.why.join("; ");
        if n.checks.is_empty() || matches!(n.verdict, NodeVerdict::Refused | NodeVerdict::NotTested)
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
