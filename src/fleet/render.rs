//! The fleet's pages: `fleet.html` and `fleet.md`, from embedded minijinja templates, with the
//! node x check grid, a strip chart per figure, the outliers and what to do with each node.

use super::{chart, FleetReport, NodeVerdict};
use crate::report::Rendered;
use minijinja::value::Serde;
use minijinja::Value;
use serde::Serialize;
use std::collections::BTreeSet;

const HTML: &str = "fleet.html.j2";
const MD: &str = "fleet.md.j2";
const EMBEDDED_HTML: &str = include_str!("../../templates/fleet.html.j2");
const EMBEDDED_MD: &str = include_str!("../../templates/fleet.md.j2");

/// What the templates see beside the report itself.
#[derive(Serialize)]
struct View {
    /// One row per node: its cells in the order of `columns` ("" where it did not run it).
    rows: Vec<Row>,
    charts: Vec<Chart>,
    /// "12 pass, 1 flagged, 2 fail".
    counts: String,
    verdict_label: &'static str,
    verdict_class: &'static str,
    /// What a signature on the fleet vouches for, and which node certificates it does not
    /// ([`FleetReport::signature_scope`]); the pages show it only when the fleet is signed.
    signature_scope: String,
}

#[derive(Serialize)]
struct Row {
    name: String,
    verdict: &'static str,
    class: &'static str,
    cells: Vec<String>,
    why: Vec<String>,
    signature: String,
}

#[derive(Serialize)]
struct Chart {
    title: String,
    svg: String,
    limit: String,
}

fn class(v: NodeVerdict) -> &'static str {
    match v {
        NodeVerdict::Pass => "pass",
        NodeVerdict::Flagged | NodeVerdict::Partial => "warn",
        NodeVerdict::NothingJudged | NodeVerdict::Incomplete | NodeVerdict::NotTested => "skip",
        NodeVerdict::Error | NodeVerdict::Fail | NodeVerdict::Refused => "fail",
    }
}

fn view(r: &FleetReport) -> View {
    let rows = r
        .nodes
        .iter()
        .map(|n| Row {
            name: n.name.clone(),
            verdict: n.verdict.label(),
            class: class(n.verdict),
            cells: r
                .columns
                .iter()
                .map(|c| {
                    n.checks
                        .get(c)
                        .map(|s| s.label().to_string())
                        .unwrap_or_default()
                })
                .collect(),
            why: n.why.clone(),
            signature: match &n.signature {
                super::SignatureState::Unsigned => "unsigned".into(),
                super::SignatureState::Verified { signers } => {
                    format!("verified: {}", signers.join(", "))
                }
                super::SignatureState::Intact => "intact (signer not checked)".into(),
                super::SignatureState::Failed { .. } => "FAILED".into(),
            },
        })
        .collect();
    let several_suites = r
        .distributions
        .iter()
        .map(|d| &d.suite)
        .collect::<BTreeSet<_>>()
        .len()
        > 1;
    let charts = r
        .distributions
        .iter()
        .map(|d| {
            let mut marked: BTreeSet<String> = r
                .outliers
                .iter()
                .filter(|o| {
                    o.check == d.check
                        && o.metric == d.figure
                        && super::judge::class_of(&o.subject) == d.class
                        && r.node(&o.node).and_then(|n| n.suite.as_deref())
                            == Some(d.suite.as_str())
                })
                .map(|o| o.node.clone())
                .collect();
            if let Some(l) = d.limit {
                for (n, v) in &d.points {
                    if (d.higher_is_better && *v < l) || (!d.higher_is_better && *v > l) {
                        marked.insert(n.clone());
                    }
                }
            }
            Chart {
                title: if several_suites {
                    format!("{}: {} {} ({})", d.suite, d.check, d.label(), d.unit)
                } else {
                    format!("{} {} ({})", d.check, d.label(), d.unit)
                },
                svg: chart::strip(d, &marked),
                limit: d
                    .limit
                    .map(|l| {
                        format!(
                            "{} {} {}",
                            if d.higher_is_better {
                                "floor"
                            } else {
                                "ceiling"
                            },
                            crate::checks::judge::fmt_num(l),
                            d.unit
                        )
                    })
                    .unwrap_or_default(),
            }
        })
        .collect();
    View {
        rows,
        charts,
        counts: r.counts_text(),
        verdict_label: r.verdict.label(),
        verdict_class: class(r.verdict),
        signature_scope: r.signature_scope(),
    }
}

/// Render both pages; `signing` says who signs the folder (empty when nobody does).
pub fn render(r: &FleetReport, signing: &crate::report::Signing) -> Result<Rendered, String> {
    let mut env = crate::report::base_env();
    env.add_template(HTML, EMBEDDED_HTML)
        .map_err(|e| crate::report::template_error(&e))?;
    env.add_template(MD, EMBEDDED_MD)
        .map_err(|e| crate::report::template_error(&e))?;
    let ctx = minijinja::context! {
        f => Value::from(Serde(r)),
        v => Value::from(Serde(view(r))),
        signing => Value::from(Serde(signing)),
    };
    let page = |name: &str| {
        env.get_template(name)
            .and_then(|t| t.render(&ctx))
            .map_err(|e| crate::report::template_error(&e))
    };
    Ok(Rendered {
        html: page(HTML)?,
        markdown: page(MD)?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{gather, judge};
    use super::*;

    /// A signed fleet's pages say what the signature vouches for, node names escaped for each
    /// page; an unsigned fleet's pages say nothing of a signature.
    #[test]
    fn signed_pages_say_which_node_certificates_were_verified_with_names_escaped() {
        let mut r = judge::judge(Vec::new(), &[], 10.0);
        for (name, sig) in [
            (
                "n1",
                super::super::SignatureState::Verified {
                    signers: vec!["ops@example.com".into()],
                },
            ),
            ("<b>x|y*", super::super::SignatureState::Unsigned),
            ("n3", super::super::SignatureState::Intact),
        ] {
            let mut n = gather::blank(name);
            n.verdict = NodeVerdict::Pass;
            n.signature = sig;
            r.nodes.push(n);
        }
        let signing = crate::report::Signing {
            fingerprint: Some("SHA256:abc".into()),
            evidence_sha256: Some("0".repeat(64)),
            verify_command: Some("ssh-keygen -Y verify ...".into()),
            signed_as: None,
        };
        let p = render(&r, &signing).unwrap();
        let said = "This signature seals what the fleet report read. 1 of 3 node certificates \
                    was verified against trusted signers; not verified, so not vouched for by \
                    this signature:";
        assert!(
            p.html.contains(&format!(
                "<p id=\"signature-scope\"><strong>{said} &lt;b&gt;x|y* (unsigned); n3 (intact, \
                 signer not checked).</strong></p>"
            )),
            "{}",
            p.html
        );
        assert!(
            p.markdown.contains(&format!(
                "\n**{said} &lt;b>x\\|y\\* (unsigned); n3 (intact, signer not checked).**\n"
            )),
            "{}",
            p.markdown
        );
        let p = render(&r, &Default::default()).unwrap();
        assert!(!p.html.contains("This signature seals"), "{}", p.html);
        assert!(
            !p.markdown.contains("This signature seals"),
            "{}",
            p.markdown
        );
    }

    /// Red dots in a chart: the marked nodes.
    fn red(svg: &str) -> usize {
        svg.matches("#cf222e\" fill-opacity").count()
    }

    #[test]
    fn a_chart_marks_the_nodes_below_its_floor_and_its_outliers_and_no_other() {
        let mut keys = gather::Keys::default();
        let nodes: Vec<gather::NodeSummary> = (1..=6u64)
            .map(|i| {
                let name = format!("n{i}");
                let faults: &[&str] = match i {
                    3 => &["slow-collective:op=all_to_all,factor=0.85"],
                    5 => &["slow-collective:op=all_gather,factor=0.5"],
                    _ => &[],
                };
                let ev = crate::testutil::simulated_named("h100-sxm-8", &name, i, faults);
                gather::summarize(gather::blank(&name), &ev, &mut keys)
            })
            .collect();
        let r = judge::judge(nodes, &[], 10.0);
        let v = view(&r);
        let chart = |check: &str| {
            v.charts
                .iter()
                .find(|c| c.title.starts_with(&format!("{check} busbw ")))
                .unwrap_or_else(|| {
                    panic!(
                        "no chart of {check}: {:?}",
                        v.charts.iter().map(|c| &c.title).collect::<Vec<_>>()
                    )
                })
        };
        // n3: within its floor but an outlier of all_to_all; n5: below all_gather's floor.
        let a2a = chart("collective.all_to_all");
        assert_eq!(red(&a2a.svg), 1, "{}", a2a.svg);
        assert!(a2a.svg.contains("#cf222e\" fill-opacity") && a2a.svg.contains("n3:"));
        let ag = chart("collective.all_gather");
        assert_eq!(red(&ag.svg), 1);
        assert_eq!(ag.limit, "floor 315 GB/s");
        // A chart where every node is healthy and alike marks none.
        let ar = chart("collective.all_reduce");
        assert_eq!(red(&ar.svg), 0, "{}", ar.svg);
    }
}
