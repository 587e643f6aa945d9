//! The fleet's rules, over the nodes' summaries: copied evidence, nodes that left none, and
//! nodes within their floors but well below their siblings.

use super::gather::NodeSummary;
use super::{
    natural_cmp, Action, Distribution, FleetReport, NodeResult, NodeVerdict, Outlier,
    SignatureState, FORMAT, FORMAT_VERSION, MIN_NODES_FOR_OUTLIERS,
};
use crate::evidence::{Status, Subject};
use std::collections::{BTreeMap, BTreeSet};

/// Judge a fleet. `expected` lists the nodes the job was given (empty: unknown); `pct` is the
/// outlier margin. The result depends only on its inputs (no clock, no order of reading).
pub fn judge(mut nodes: Vec<NodeSummary>, expected: &[String], pct: f64) -> FleetReport {
    nodes.sort_by(|a, b| natural_cmp(&a.result.name, &b.result.name));

    // The same node twice (two folders of one name): the second is refused.
    let mut seen_names = BTreeSet::new();
    for n in &mut nodes {
        if !seen_names.insert(n.result.name.clone()) {
            refuse(
                n,
                format!(
                    "a second folder of node {} ({}): only one may report for a node",
                    n.result.name, n.result.folder
                ),
            );
        }
    }

    // A GPU reported by two nodes: evidence copied between them. Both are refused.
    let mut owner: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for id in n.gpu_ids.iter().collect::<BTreeSet<_>>() {
            owner.entry(id.as_str()).or_default().push(i);
        }
    }
    let mut copied: BTreeMap<usize, String> = BTreeMap::new();
    for (id, who) in &owner {
        if who.len() < 2 {
            continue;
        }
        for &i in who {
            let others: Vec<&str> = who
                .iter()
                .filter(|&&j| j != i)
                .map(|&j| nodes[j].result.name.as_str())
                .collect();
            copied.entry(i).or_insert_with(|| {
                format!(
                    "GPU {id} is also reported by {} {}: evidence copied between nodes is not a test of either",
                    if others.len() == 1 { "node" } else { "nodes" },
                    others.join(", ")
                )
            });
        }
    }
    for (i, why) in copied {
        refuse(&mut nodes[i], why);
    }

    // Expected nodes that left no folder at all.
    let present: BTreeSet<String> = nodes.iter().map(|n| n.result.name.clone()).collect();
    for name in expected.iter().filter(|e| !present.contains(*e)) {
        nodes.push(NodeSummary {
            result: NodeResult {
                name: name.clone(),
                folder: String::new(),
                verdict: NodeVerdict::NotTested,
                own_verdict: None,
                why: vec!["expected (in the job's node list), but no results were reported".into()],
                hostname: None,
                suite: None,
                hardware: None,
                gpu_model: None,
                simulated: false,
                job: None,
                checks: BTreeMap::new(),
                failed_checks: Vec::new(),
                signature: SignatureState::Unsigned,
            },
            figures: Vec::new(),
            gpu_ids: Vec::new(),
            read: false,
        });
    }
    if !expected.is_empty() {
        let exp: BTreeSet<&String> = expected.iter().collect();
        for n in &mut nodes {
            if !exp.contains(&n.result.name) {
                n.result.why.push("not in the job's node list".to_string());
            }
        }
    }
    nodes.sort_by(|a, b| natural_cmp(&a.result.name, &b.result.name));

    let outliers = outliers(&nodes, pct);
    for o in &outliers {
        let Some(n) = nodes.iter_mut().find(|n| n.result.name == o.node) else {
            continue;
        };
        if n.result.verdict == NodeVerdict::Pass {
            n.result.verdict = NodeVerdict::Flagged;
        }
        n.result.why.push(format!(
            "{} {} {}: {} {} is {:.1}% worse than the fleet's median of {} {} ({} nodes)",
            o.check,
            o.metric,
            o.subject_text,
            crate::checks::judge::fmt_num(o.value),
            o.unit,
            o.worse_pct,
            crate::checks::judge::fmt_num(o.fleet_median),
            o.unit,
            o.nodes_compared
        ));
    }
    let distributions = distributions(&nodes);

    let mut columns: Vec<String> = Vec::new();
    for n in &nodes {
        for id in n.result.checks.keys() {
            if !columns.contains(id) {
                columns.push(id.clone());
            }
        }
    }
    let results: Vec<NodeResult> = nodes.into_iter().map(|n| n.result).collect();
    let verdict = results
        .iter()
        .map(|n| n.verdict)
        .max()
        .unwrap_or(NodeVerdict::NotTested);
    let mut counts = BTreeMap::new();
    for n in &results {
        *counts.entry(n.verdict.key().to_string()).or_insert(0) += 1;
    }
    let actions = results.iter().filter_map(action).collect();
    FleetReport {
        format: FORMAT.into(),
        format_version: FORMAT_VERSION,
        nodecert_version: env!("CARGO_PKG_VERSION").into(),
        simulated: results.iter().any(|n| n.simulated),
        verdict,
        counts,
        outlier_pct: pct,
        expected: expected.to_vec(),
        columns: order_columns(columns),
        nodes: results,
        outliers,
        distributions,
        actions,
    }
}

fn refuse(n: &mut NodeSummary, why: String) {
    n.result.verdict = NodeVerdict::Refused;
    n.result.why.push(why);
    n.figures.clear();
}

/// Checks in the order a run makes them (the grid reads like a report), others after.
fn order_columns(mut c: Vec<String>) -> Vec<String> {
    const ORDER: [&str; 7] = [
        "topology",
        "virtualization",
        "health",
        "host_bandwidth",
        "p2p_bandwidth",
        "p2p_latency",
        "collective.",
    ];
    let rank = |id: &str| {
        ORDER
            .iter()
            .position(|o| id == *o || (o.ends_with('.') && id.starts_with(o)))
            .unwrap_or(match id {
                "training" => ORDER.len(),
                "baseline" => ORDER.len() + 1,
                _ => ORDER.len() + 2,
            })
    };
    c.sort_by_key(|a| rank(a));
    c
}

/// Figures of like nodes (same suite, same GPU model) compared with their median: a node whose
/// figure its own suite passed (or warned about) but that is more than `pct` percent worse than
/// the median of at least [`MIN_NODES_FOR_OUTLIERS`] nodes is an outlier. Figures that already
/// failed their floor are failures, not outliers; refused nodes take no part.
pub fn outliers(nodes: &[NodeSummary], pct: f64) -> Vec<Outlier> {
    type Key = (String, String, String, String, String);
    let mut groups: BTreeMap<Key, Vec<(usize, usize)>> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if !n.read || n.result.verdict == NodeVerdict::Refused {
            continue;
        }
        for (j, f) in n.figures.iter().enumerate() {
            let key = (
                n.result.suite.clone().unwrap_or_default(),
                n.result.gpu_model.clone().unwrap_or_default(),
                f.check.clone(),
                f.metric.clone(),
                serde_json::to_string(&f.subject).unwrap_or_default(),
            );
            groups.entry(key).or_default().push((i, j));
        }
    }
    let mut out = Vec::new();
    for members in groups.values() {
        if members.len() < MIN_NODES_FOR_OUTLIERS {
            continue;
        }
        let values: Vec<f64> = members
            .iter()
            .map(|&(i, j)| nodes[i].figures[j].value)
            .collect();
        let median = crate::evidence::median(&values);
        if !(median.is_finite() && median > 0.0) {
            continue;
        }
        for &(i, j) in members {
            let f = &nodes[i].figures[j];
            if !matches!(f.status, Status::Pass | Status::Warn) {
                continue;
            }
            let worse_pct = if f.higher_is_better {
                (median - f.value) / median * 100.0
            } else {
                (f.value - median) / median * 100.0
            };
            if worse_pct > pct {
                out.push(Outlier {
                    node: nodes[i].result.name.clone(),
                    check: f.check.clone(),
                    metric: f.metric.clone(),
                    subject: f.subject.clone(),
                    subject_text: f.subject.describe(),
                    unit: f.unit.clone(),
                    value: f.value,
                    fleet_median: median,
                    worse_pct,
                    nodes_compared: members.len(),
                });
            }
        }
    }
    out.sort_by(|a, b| {
        natural_cmp(&a.node, &b.node)
            .then(a.check.cmp(&b.check))
            .then(a.metric.cmp(&b.metric))
            .then(a.subject_text.cmp(&b.subject_text))
    });
    out
}

/// The class of a subject that a distribution gathers: the subject without its GPUs and link
/// (a collective's size stays: all_reduce at 8 GiB is one figure, at 1 MiB another).
fn class_of(s: &Subject) -> Subject {
    Subject {
        op: s.op,
        bytes: s.bytes,
        ..Default::default()
    }
}

/// Each figure across the nodes: the node's worst value of it over its subjects (its slowest
/// pair, its slowest GPU), one point per node.
fn distributions(nodes: &[NodeSummary]) -> Vec<Distribution> {
    type Key = (String, String, String);
    struct Acc {
        d: Distribution,
        limits: BTreeSet<String>,
        per_node: BTreeMap<String, f64>,
    }
    let mut acc: BTreeMap<Key, Acc> = BTreeMap::new();
    for n in nodes {
        if !n.read || n.result.verdict == NodeVerdict::Refused {
            continue;
        }
        for f in &n.figures {
            let class = class_of(&f.subject);
            let mut metric = f.metric.clone();
            if class != Subject::default() {
                metric = format!("{} {}", f.metric, class.describe());
            }
            let key = (f.check.clone(), metric.clone(), f.unit.clone());
            let a = acc.entry(key).or_insert_with(|| Acc {
                d: Distribution {
                    check: f.check.clone(),
                    metric,
                    unit: f.unit.clone(),
                    higher_is_better: f.higher_is_better,
                    limit: None,
                    median: f64::NAN,
                    points: Vec::new(),
                },
                limits: BTreeSet::new(),
                per_node: BTreeMap::new(),
            });
            a.limits
                .insert(f.limit.map(|l| l.to_string()).unwrap_or_default());
            if let Some(l) = f.limit {
                a.d.limit = Some(l);
            }
            let v = a.per_node.entry(n.result.name.clone()).or_insert(f.value);
            *v = if f.higher_is_better {
                v.min(f.value)
            } else {
                v.max(f.value)
            };
        }
    }
    acc.into_values()
        .map(|mut a| {
            if a.limits.len() != 1 {
                a.d.limit = None;
            }
            let mut points: Vec<(String, f64)> = a.per_node.into_iter().collect();
            points.sort_by(|x, y| natural_cmp(&x.0, &y.0));
            let values: Vec<f64> = points.iter().map(|p| p.1).collect();
            a.d.median = crate::evidence::median(&values);
            a.d.points = points;
            a.d
        })
        .collect()
}

fn action(n: &NodeResult) -> Option<Action> {
    let first = n.why.first().cloned().unwrap_or_default();
    let (action, reason) = match n.verdict {
        NodeVerdict::Pass => return None,
        NodeVerdict::Fail | NodeVerdict::Error => ("drain", first),
        NodeVerdict::Refused => ("drain", first),
        NodeVerdict::NotTested | NodeVerdict::Incomplete | NodeVerdict::NothingJudged => {
            ("rerun", first)
        }
        NodeVerdict::Flagged => ("investigate", n.why.last().cloned().unwrap_or_default()),
    };
    Some(Action {
        node: n.name.clone(),
        action: action.into(),
        reason,
    })
}
