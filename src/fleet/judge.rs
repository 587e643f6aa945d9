//! The fleet's rules, over the nodes' summaries: copied evidence, nodes that left none, and
//! nodes within their floors but well below their siblings.

use super::gather::NodeSummary;
use super::{
    format_version_for, natural_cmp, Action, Certificates, Distribution, FleetReport, NodeResult,
    NodeVerdict, Outlier, FORMAT, MIN_NODES_FOR_OUTLIERS,
};
use crate::evidence::{Status, Subject};
use std::collections::{BTreeMap, BTreeSet};

/// Other nodes named in a copied GPU's refusal; the rest are counted.
const NAMED_COPIES: usize = 4;

/// Judge a fleet. `expected` lists the nodes the job was given (empty: unknown); `pct` is the
/// outlier margin. The result depends only on its inputs (no clock, no order of reading).
pub fn judge(mut nodes: Vec<NodeSummary>, expected: &[String], pct: f64) -> FleetReport {
    nodes.sort_by(|a, b| {
        natural_cmp(&a.result.name, &b.result.name).then(a.result.folder.cmp(&b.result.folder))
    });

    // The same node twice (two folders of one name): neither can be its result. One entry,
    // refused, names both folders (one name is one node in every output).
    let mut merged: Vec<NodeSummary> = Vec::with_capacity(nodes.len());
    for n in nodes {
        match merged.last_mut() {
            Some(first) if first.result.name == n.result.name => {
                let why = format!(
                    "two folders report for node {}: {} and {}; only one may",
                    n.result.name, first.result.folder, n.result.folder
                );
                refuse(first, why);
                first.result.checks.clear();
                first.result.failed_checks.clear();
            }
            _ => merged.push(n),
        }
    }
    let mut nodes = merged;

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
            if copied.contains_key(&i) {
                continue;
            }
            // At most a few names each: thousands of copies must not make thousands of
            // thousands of names.
            let count = who.len() - 1;
            let named: Vec<&str> = who
                .iter()
                .filter(|&&j| j != i)
                .take(NAMED_COPIES)
                .map(|&j| nodes[j].result.name.as_str())
                .collect();
            let more = match count - named.len() {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            copied.insert(
                i,
                format!(
                    "GPU {id} is also reported by {} {}{more}: evidence copied between nodes is not a test of either",
                    if count == 1 { "node" } else { "nodes" },
                    named.join(", ")
                ),
            );
        }
    }
    for (i, why) in copied {
        refuse(&mut nodes[i], why);
    }

    // Nodes that name one suite ran one suite: a node whose suite of that name says other
    // things (a local file that drops the checks it would fail) was not judged by the fleet's.
    // Where the job's node list is known, only its nodes choose the fleet's suite; a folder of a
    // node not in it (a stranger) is held to that choice but never makes it, so strangers
    // cannot outvote the job's nodes.
    let listed: BTreeSet<&str> = expected.iter().map(String::as_str).collect();
    let mut by_name: BTreeMap<&str, BTreeMap<&str, Vec<usize>>> = BTreeMap::new();
    let mut strangers: BTreeMap<&str, BTreeMap<&str, Vec<usize>>> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if let (Some(name), Some(sha)) = (&n.result.suite, &n.suite_sha256) {
            // Only this job's evidence votes: a folder left from another job is not tested.
            if n.read
                && !matches!(
                    n.result.verdict,
                    NodeVerdict::Refused | NodeVerdict::NotTested
                )
            {
                let votes = listed.is_empty() || listed.contains(n.result.name.as_str());
                let map = if votes { &mut by_name } else { &mut strangers };
                let shas = map.entry(name.as_str()).or_default();
                shas.entry(sha.as_str()).or_default().push(i);
            }
        }
    }
    let mut other_suite: Vec<(usize, String)> = Vec::new();
    for (name, shas) in &by_name {
        let held = strangers.get(name);
        // The suite most of them ran is the fleet's; with no such one, none is (one suite run
        // by all: it is, and no one is refused).
        let most = shas.values().map(Vec::len).max().unwrap_or(0);
        let fleets: Vec<&&str> = shas
            .iter()
            .filter(|(_, v)| v.len() == most)
            .map(|(k, _)| k)
            .collect();
        let fleet = match fleets.as_slice() {
            [one] => Some(**one),
            _ => None,
        };
        for (sha, who) in shas.iter().chain(held.into_iter().flatten()) {
            if Some(*sha) == fleet {
                continue;
            }
            let why = match fleet {
                Some(f) => format!(
                    "ran another suite named {name} than the {most} node(s) it is compared with \
                     (SHA-256 {} where theirs is {}): not judged by the fleet's suite",
                    short(sha),
                    short(f)
                ),
                None => format!(
                    "the nodes ran {} different suites named {name} (this one SHA-256 {}), and no \
                     one of them is the fleet's: not judged by one suite",
                    shas.len(),
                    short(sha)
                ),
            };
            other_suite.extend(who.iter().map(|&i| (i, why.clone())));
        }
    }
    for (i, why) in other_suite {
        refuse(&mut nodes[i], why);
    }

    // Expected nodes that left no folder at all.
    let present: BTreeSet<String> = nodes.iter().map(|n| n.result.name.clone()).collect();
    for name in expected.iter().filter(|e| !present.contains(*e)) {
        nodes.push(NodeSummary {
            result: NodeResult {
                why: vec!["expected (in the job's node list), but no results were reported".into()],
                ..super::gather::blank(name)
            },
            figures: Vec::new(),
            gpu_ids: Vec::new(),
            read: false,
            suite_sha256: None,
        });
    }
    if !expected.is_empty() {
        for n in &mut nodes {
            if !listed.contains(n.result.name.as_str()) {
                n.result
                    .why
                    .push("not in the job's node list: not drained or resumed".to_string());
                n.result.unlisted = true;
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
    let (verdict, counts) = super::verdict_and_counts(&results);
    let actions = results.iter().filter_map(action).collect();
    let certificates = Some(Certificates::of(&results));
    FleetReport {
        format: FORMAT.into(),
        format_version: format_version_for(&results, verdict),
        nodecert_version: env!("CARGO_PKG_VERSION").into(),
        simulated: results.iter().any(|n| n.simulated),
        verdict,
        counts,
        certificates,
        outlier_pct: pct,
        expected: expected.to_vec(),
        job: None,
        suite: None,
        suite_sha256: None,
        columns: order_columns(columns),
        nodes: results,
        outliers,
        distributions,
        actions,
    }
}

/// Nodes of job `job`: evidence another job wrote (a folder left from an earlier run, a node
/// that failed to start this time) is not this job's result, so its node is NOT TESTED; evidence
/// that says it ran on another node than its folder's is refused.
pub fn for_job(nodes: &mut [NodeSummary], job: &str) {
    for n in nodes.iter_mut().filter(|n| n.read) {
        let theirs = n.result.job.clone();
        match theirs {
            Some(j) if j.id == job => {
                if let Some(other) = j.node.filter(|x| *x != n.result.name) {
                    let why = format!(
                        "its evidence says it ran on node {other}, not {}: not this node's",
                        n.result.name
                    );
                    refuse(n, why);
                }
            }
            other => {
                n.result.verdict = NodeVerdict::NotTested;
                n.result.why.insert(
                    0,
                    match other {
                        Some(j) => format!(
                            "its evidence is from job {}, not this job ({job}): the node did not report in this job",
                            j.id
                        ),
                        None => format!(
                            "its evidence was not written by a task of job {job}: the node did not report in this job"
                        ),
                    },
                );
                n.figures.clear();
                n.result.checks.clear();
                n.result.failed_checks.clear();
                n.result.own_verdict = None;
                n.read = false;
            }
        }
    }
}

/// Hold every node to the suite the job ran (`suite`, its name, and where known `sha256`, the
/// digest of its contents as the nodes run it): a node whose evidence names another suite, or
/// other contents under its name, was not judged by the job's suite, whatever it says, and is
/// refused. Without this a node that ran a renamed local file would stand alone under its
/// name and pass, and nodes that all ran a local file of the suite's name would outvote none.
pub fn for_suite(nodes: &mut [NodeSummary], suite: &str, sha256: Option<&str>) {
    for n in nodes.iter_mut().filter(|n| n.read) {
        if matches!(n.result.verdict, NodeVerdict::Refused) {
            continue;
        }
        let Some(ran) = n.result.suite.clone() else {
            continue;
        };
        let why = if ran != suite {
            format!("ran suite {ran}, not the job's suite {suite}: not judged by the fleet's suite")
        } else {
            match (sha256, n.suite_sha256.as_deref()) {
                (Some(want), Some(got)) if want != got => format!(
                    "ran other contents under the name of the job's suite {suite} (SHA-256 {} \
                     where the job's is {}): not judged by the fleet's suite",
                    short(got),
                    short(want)
                ),
                _ => continue,
            }
        };
        refuse(n, why);
    }
}

/// The first 12 characters of a digest, as refusals show it.
fn short(s: &str) -> String {
    s.chars().take(12).collect()
}

/// Refuse a node: its refusal is the first reason given (the drain's), before what its own
/// evidence said.
fn refuse(n: &mut NodeSummary, why: String) {
    n.result.verdict = NodeVerdict::Refused;
    n.result.why.insert(0, why);
    n.figures.clear();
}

/// Checks in the order a run makes them (the grid reads like a report), others after.
fn order_columns(mut c: Vec<String>) -> Vec<String> {
    const ORDER: [&str; 8] = [
        "topology",
        "virtualization",
        "health",
        "host_bandwidth",
        "p2p_bandwidth",
        "p2p_latency",
        "collective.",
        "compute",
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
    // Like nodes (same suite, same GPU model), the same figure: by the figure's id.
    type Key<'a> = (&'a str, &'a str, u32);
    let mut groups: BTreeMap<Key, Vec<(usize, usize)>> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if !n.read || n.result.verdict == NodeVerdict::Refused {
            continue;
        }
        let suite = n.result.suite.as_deref().unwrap_or_default();
        let model = n.result.gpu_model.as_deref().unwrap_or_default();
        // Figures that failed their own limit are failures, not the fleet's norm: they take no
        // part in the median either.
        for (j, f) in n.figures.iter().enumerate() {
            if !matches!(f.status, Status::Pass | Status::Warn) {
                continue;
            }
            groups
                .entry((suite, model, f.key.id))
                .or_default()
                .push((i, j));
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
            let worse_pct = if f.key.higher_is_better {
                (median - f.value) / median * 100.0
            } else {
                (f.value - median) / median * 100.0
            };
            if worse_pct > pct {
                out.push(Outlier {
                    node: nodes[i].result.name.clone(),
                    check: f.key.check.clone(),
                    metric: f.key.metric.clone(),
                    subject: f.key.subject.clone(),
                    subject_text: f.key.subject.describe(),
                    unit: f.key.unit.clone(),
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
pub fn class_of(s: &Subject) -> Subject {
    Subject {
        op: s.op,
        bytes: s.bytes,
        ..Default::default()
    }
}

/// Each figure across the nodes: the node's worst value of it over its subjects (its slowest
/// pair, its slowest GPU), one point per node.
fn distributions(nodes: &[NodeSummary]) -> Vec<Distribution> {
    type Key = (String, String, String, String, String);
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
        for fig in &n.figures {
            let f = &fig.key;
            let class = class_of(&f.subject);
            let mut metric = f.metric.clone();
            if class != Subject::default() {
                metric = format!("{} {}", f.metric, class.describe());
            }
            let suite = n.result.suite.clone().unwrap_or_default();
            let key = (
                suite.clone(),
                f.check.clone(),
                metric.clone(),
                f.unit.clone(),
                f.conditions.clone(),
            );
            let a = acc.entry(key).or_insert_with(|| Acc {
                d: Distribution {
                    suite,
                    check: f.check.clone(),
                    metric,
                    figure: f.metric.clone(),
                    class: class.clone(),
                    unit: f.unit.clone(),
                    higher_is_better: f.higher_is_better,
                    limit: None,
                    conditions: f.conditions.clone(),
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
            let v = a.per_node.entry(n.result.name.clone()).or_insert(fig.value);
            *v = if f.higher_is_better {
                v.min(fig.value)
            } else {
                v.max(fig.value)
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
        // Readings the platform does not give: a rerun gives them no more.
        NodeVerdict::Partial => ("investigate", first),
    };
    Some(Action {
        node: n.name.clone(),
        action: action.into(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::gather::NodeSummary;
    use crate::fleet::{Figure, FigureKey, SignatureState};
    use std::sync::Arc;

    thread_local! {
        static KEYS: std::cell::RefCell<crate::fleet::gather::Keys> = Default::default();
    }

    /// The shared key of a p2p_bandwidth figure, as `fleet report` interns it.
    fn key(metric: &str, subject: Subject, higher: bool, limit: Option<f64>) -> Arc<FigureKey> {
        KEYS.with(|k| {
            k.borrow_mut().intern(FigureKey {
                id: 0,
                check: "p2p_bandwidth".into(),
                metric: metric.into(),
                subject,
                unit: if higher { "GB/s" } else { "us" }.into(),
                higher_is_better: higher,
                limit,
                conditions: String::new(),
            })
        })
    }

    /// A node that read and passed, with `figures` as (check, metric, subject GPU, value,
    /// higher is better, limit, status).
    fn node(name: &str, figures: &[(&str, f64, bool, Status)]) -> NodeSummary {
        let result = NodeResult {
            name: name.into(),
            folder: format!("/shared/{name}"),
            verdict: NodeVerdict::Pass,
            own_verdict: Some(crate::evidence::Verdict::Pass),
            why: vec![],
            hostname: Some(name.into()),
            suite: Some("h100-sxm-8".into()),
            hardware: Some("8x H100".into()),
            gpu_model: Some("H100".into()),
            simulated: false,
            job: None,
            checks: [("p2p_bandwidth".to_string(), Status::Pass)].into(),
            failed_checks: vec![],
            signature: SignatureState::Unsigned,
            unlisted: false,
            fabric_wide_only: false,
        };
        NodeSummary {
            result,
            figures: figures
                .iter()
                .map(|(metric, value, higher, status)| Figure {
                    key: key(
                        metric,
                        Subject::pair(0, 1),
                        *higher,
                        Some(if *higher { 335.0 } else { 10.0 }),
                    ),
                    value: *value,
                    status: *status,
                })
                .collect(),
            gpu_ids: vec![format!("UUID GPU-{name}")],
            read: true,
            suite_sha256: Some("sha-of-p2p-suite".into()),
        }
    }

    fn bw(name: &str, v: f64) -> NodeSummary {
        node(name, &[("p2p_read", v, true, Status::Pass)])
    }

    fn verdicts(r: &FleetReport) -> Vec<(&str, NodeVerdict)> {
        r.nodes
            .iter()
            .map(|n| (n.name.as_str(), n.verdict))
            .collect()
    }

    #[test]
    fn a_node_within_its_floors_but_far_below_its_siblings_is_flagged_from_five_nodes_up() {
        // Median 390; n5 at 345 is 11.5% worse (> 10%), n4 at 360 is 7.7% worse (within).
        let five = vec![
            bw("n1", 390.0),
            bw("n2", 392.0),
            bw("n3", 388.0),
            bw("n4", 360.0),
            bw("n5", 345.0),
        ];
        let r = judge(five.clone(), &[], 10.0);
        assert_eq!(
            verdicts(&r),
            [
                ("n1", NodeVerdict::Pass),
                ("n2", NodeVerdict::Pass),
                ("n3", NodeVerdict::Pass),
                ("n4", NodeVerdict::Pass),
                ("n5", NodeVerdict::Flagged)
            ]
        );
        assert_eq!(r.outliers.len(), 1);
        let o = &r.outliers[0];
        assert_eq!(
            (o.node.as_str(), o.fleet_median, o.nodes_compared),
            ("n5", 388.0, 5)
        );
        assert!((o.worse_pct - (388.0 - 345.0) / 388.0 * 100.0).abs() < 1e-9);
        assert_eq!(r.verdict, NodeVerdict::Flagged);
        assert_eq!(r.verdict.exit_code(), 0);
        assert_eq!(r.actions.len(), 1);
        assert_eq!(r.actions[0].action, "investigate");
        assert!(r.node("n5").unwrap().why[0].contains("11.1% worse than the fleet's median of 388"));
        // A wider margin, or one node fewer, flags nothing.
        assert!(judge(five.clone(), &[], 12.0).outliers.is_empty());
        let four: Vec<NodeSummary> = five.into_iter().skip(1).collect();
        let r = judge(four, &[], 10.0);
        assert!(r.outliers.is_empty());
        assert_eq!(r.verdict, NodeVerdict::Pass);
    }

    #[test]
    fn a_latency_is_worse_when_higher_and_a_failed_figure_is_a_failure_not_an_outlier() {
        let lat = |n: &str, v: f64, st: Status| node(n, &[("latency", v, false, st)]);
        let r = judge(
            vec![
                lat("a", 2.0, Status::Pass),
                lat("b", 2.0, Status::Pass),
                lat("c", 2.0, Status::Pass),
                lat("d", 1.0, Status::Pass),
                lat("e", 2.5, Status::Pass),
                lat("f", 12.0, Status::Fail),
            ],
            &[],
            10.0,
        );
        let flagged: Vec<&str> = r.outliers.iter().map(|o| o.node.as_str()).collect();
        // e is 25% slower than the median of 2; d is faster; f already failed its ceiling.
        assert_eq!(flagged, ["e"]);
        assert_eq!(r.outliers[0].worse_pct, 25.0);
    }

    #[test]
    fn like_is_compared_with_like() {
        // Five nodes, but one runs another suite: four of a kind are too few.
        let mut nodes: Vec<NodeSummary> = (1..=5).map(|i| bw(&format!("n{i}"), 390.0)).collect();
        nodes[4].figures[0].value = 300.0;
        nodes[4].result.suite = Some("other".into());
        assert!(judge(nodes.clone(), &[], 10.0).outliers.is_empty());
        nodes[4].result.suite = Some("h100-sxm-8".into());
        nodes[4].result.gpu_model = Some("H200".into());
        assert!(judge(nodes.clone(), &[], 10.0).outliers.is_empty());
        nodes[4].result.gpu_model = Some("H100".into());
        assert_eq!(judge(nodes, &[], 10.0).outliers.len(), 1);
    }

    #[test]
    fn a_gpu_reported_by_two_nodes_refuses_both_and_only_them() {
        let mut nodes = vec![bw("n1", 390.0), bw("n2", 390.0), bw("n3", 390.0)];
        nodes[2].gpu_ids = nodes[0].gpu_ids.clone();
        let r = judge(nodes, &[], 10.0);
        assert_eq!(
            verdicts(&r),
            [
                ("n1", NodeVerdict::Refused),
                ("n2", NodeVerdict::Pass),
                ("n3", NodeVerdict::Refused)
            ]
        );
        assert!(r.node("n1").unwrap().why[0].contains("also reported by node n3"));
        assert!(r.node("n3").unwrap().why[0].contains("also reported by node n1"));
        assert_eq!(r.verdict, NodeVerdict::Refused);
        assert_eq!(r.verdict.exit_code(), crate::error::exit::INVALID_INPUT);
        assert!(r.actions.iter().all(|a| a.action == "drain"));
        // Refused figures take no part in the distribution.
        assert_eq!(r.distributions[0].points.len(), 1);
    }

    #[test]
    fn a_node_that_ran_another_suite_of_the_same_name_is_refused() {
        let mut nodes: Vec<NodeSummary> = (1..=4).map(|i| bw(&format!("n{i}"), 390.0)).collect();
        nodes[2].suite_sha256 = Some("0123456789abcdef-trimmed".into());
        let r = judge(nodes.clone(), &[], 10.0);
        assert_eq!(
            verdicts(&r),
            [
                ("n1", NodeVerdict::Pass),
                ("n2", NodeVerdict::Pass),
                ("n3", NodeVerdict::Refused),
                ("n4", NodeVerdict::Pass)
            ]
        );
        assert_eq!(
            r.node("n3").unwrap().why[0],
            "ran another suite named h100-sxm-8 than the 3 node(s) it is compared with (SHA-256 \
             0123456789ab where theirs is sha-of-p2p-s): not judged by the fleet's suite"
        );
        // Two and two: no suite is the fleet's, and every node is refused.
        nodes[3].suite_sha256 = nodes[2].suite_sha256.clone();
        let r = judge(nodes.clone(), &[], 10.0);
        assert!(
            r.nodes.iter().all(|n| n.verdict == NodeVerdict::Refused),
            "{r:?}"
        );
        assert!(r.node("n1").unwrap().why[0].contains("2 different suites named h100-sxm-8"));
        // A folder of another job (not tested) does not vote, nor is it refused.
        let mut stale = nodes.clone();
        stale[2].suite_sha256 = Some("sha-of-p2p-suite".into());
        stale[3].suite_sha256 = Some("sha-of-p2p-suite".into());
        for n in &mut stale[..2] {
            n.result.verdict = NodeVerdict::NotTested;
            n.suite_sha256 = Some("0123456789abcdef-trimmed".into());
        }
        let r = judge(stale, &[], 10.0);
        assert_eq!(
            verdicts(&r),
            [
                ("n1", NodeVerdict::NotTested),
                ("n2", NodeVerdict::NotTested),
                ("n3", NodeVerdict::Pass),
                ("n4", NodeVerdict::Pass)
            ]
        );
        // Suites of other names are other suites: no refusal.
        nodes[2].result.suite = Some("mine".into());
        nodes[3].result.suite = Some("mine".into());
        let r = judge(nodes, &[], 10.0);
        assert!(
            r.nodes.iter().all(|n| n.verdict == NodeVerdict::Pass),
            "{r:?}"
        );
    }

    #[test]
    fn a_gpu_copied_to_many_nodes_names_four_of_the_others_and_counts_the_rest() {
        let mut nodes: Vec<NodeSummary> = (1..=7).map(|i| bw(&format!("n{i}"), 390.0)).collect();
        for n in &mut nodes[1..] {
            n.gpu_ids = vec!["UUID GPU-shared".into()];
        }
        nodes[0].gpu_ids = vec!["UUID GPU-shared".into()];
        let r = judge(nodes, &[], 10.0);
        assert!(r.nodes.iter().all(|n| n.verdict == NodeVerdict::Refused));
        assert_eq!(
            r.node("n1").unwrap().why[0],
            "GPU UUID GPU-shared is also reported by nodes n2, n3, n4, n5 and 2 more: evidence \
             copied between nodes is not a test of either"
        );
        assert!(r.node("n7").unwrap().why[0].contains("by nodes n1, n2, n3, n4 and 2 more:"));
        // Exactly four others: all named.
        let mut five: Vec<NodeSummary> = (1..=5).map(|i| bw(&format!("n{i}"), 390.0)).collect();
        for n in &mut five {
            n.gpu_ids = vec!["UUID GPU-shared".into()];
        }
        let r = judge(five, &[], 10.0);
        assert!(r.node("n5").unwrap().why[0].contains("by nodes n1, n2, n3, n4: "));
    }

    #[test]
    fn an_expected_node_without_evidence_is_not_tested_and_a_stranger_is_named() {
        let r = judge(
            vec![bw("n1", 390.0), bw("x9", 390.0)],
            &["n1".into(), "n2".into()],
            10.0,
        );
        assert_eq!(
            verdicts(&r),
            [
                ("n1", NodeVerdict::Pass),
                ("n2", NodeVerdict::NotTested),
                ("x9", NodeVerdict::Pass)
            ]
        );
        assert!(r.node("n2").unwrap().why[0].contains("no results were reported"));
        assert_eq!(
            r.node("x9").unwrap().why,
            ["not in the job's node list: not drained or resumed"]
        );
        assert_eq!(r.verdict.exit_code(), crate::error::exit::INCOMPLETE);
        assert_eq!(r.actions[0].action, "rerun");
        assert_eq!(r.counts.get("not_tested"), Some(&1));
    }

    #[test]
    fn strangers_are_held_to_the_listed_nodes_suite_and_never_outvote_them() {
        // One listed node ran the suite; two folders of nodes not in the list ran a file of
        // the same name that says other things. Counted as votes they would win 2 to 1.
        let mut nodes = vec![bw("n1", 390.0), bw("x8", 390.0), bw("x9", 390.0)];
        for n in &mut nodes[1..] {
            n.suite_sha256 = Some("0123456789abcdef-trimmed".into());
        }
        let r = judge(nodes.clone(), &["n1".into()], 10.0);
        assert_eq!(
            verdicts(&r),
            [
                ("n1", NodeVerdict::Pass),
                ("x8", NodeVerdict::Refused),
                ("x9", NodeVerdict::Refused)
            ]
        );
        assert_eq!(
            r.node("x9").unwrap().why[0],
            "ran another suite named h100-sxm-8 than the 1 node(s) it is compared with (SHA-256 \
             0123456789ab where theirs is sha-of-p2p-s): not judged by the fleet's suite"
        );
        // Without a node list every folder votes, and the two win (as before).
        let r = judge(nodes.clone(), &[], 10.0);
        assert_eq!(r.node("n1").unwrap().verdict, NodeVerdict::Refused);
        // A stranger that ran the listed nodes' suite is only named, not refused.
        nodes[2].suite_sha256 = nodes[0].suite_sha256.clone();
        let r = judge(
            nodes[..1].iter().chain(&nodes[2..]).cloned().collect(),
            &["n1".into()],
            10.0,
        );
        assert_eq!(
            verdicts(&r),
            [("n1", NodeVerdict::Pass), ("x9", NodeVerdict::Pass)]
        );
        assert_eq!(
            r.node("x9").unwrap().why,
            ["not in the job's node list: not drained or resumed"]
        );
    }

    #[test]
    fn two_folders_for_one_node_make_one_refused_node() {
        let mut b = bw("n1", 390.0);
        b.result.folder = "/other/n1".into();
        b.gpu_ids = vec!["UUID other".into()];
        let r = judge(vec![bw("n1", 390.0), b, bw("n2", 390.0)], &[], 10.0);
        assert_eq!(
            verdicts(&r),
            [("n1", NodeVerdict::Refused), ("n2", NodeVerdict::Pass)]
        );
        assert!(
            r.nodes[0].why[0].contains("two folders report for node n1: /other/n1 and /shared/n1"),
            "{:?}",
            r.nodes[0].why
        );
        assert!(r.nodes[0].checks.is_empty());
    }

    /// With the job's suite known, a node that ran a suite of another name (a renamed local
    /// file: alone under its name it would be its own majority) is refused, and takes no part
    /// in the vote of the others; without it, the renamed suite stands alone, as before.
    #[test]
    fn a_node_that_ran_a_renamed_suite_is_refused_when_the_jobs_suite_is_known() {
        let mut nodes: Vec<NodeSummary> = (1..=3).map(|i| bw(&format!("n{i}"), 390.0)).collect();
        nodes[1].result.suite = Some("easy".into());
        nodes[1].suite_sha256 = Some("0123456789abcdef-trimmed".into());
        // An unread node names no suite: it is judged for what it is, not refused here.
        nodes[2].read = false;
        nodes[2].result.suite = None;
        nodes[2].result.verdict = NodeVerdict::NotTested;
        let alone = judge(nodes.clone(), &[], 10.0);
        assert_eq!(alone.node("n2").unwrap().verdict, NodeVerdict::Pass);
        let mut same = nodes.clone();
        for_suite(&mut nodes, "h100-sxm-8", None);
        let r = judge(nodes, &[], 10.0);
        assert_eq!(
            verdicts(&r),
            [
                ("n1", NodeVerdict::Pass),
                ("n2", NodeVerdict::Refused),
                ("n3", NodeVerdict::NotTested)
            ]
        );
        assert_eq!(
            r.node("n2").unwrap().why[0],
            "ran suite easy, not the job's suite h100-sxm-8: not judged by the fleet's suite"
        );
        assert_eq!(r.node("n2").unwrap().why.len(), 1, "{:?}", r.node("n2"));
        assert!(r
            .node("n3")
            .unwrap()
            .why
            .iter()
            .all(|w| !w.contains("suite")));

        // With the job's digest: a node of the right name and other contents is refused too
        // (alone, or all of them, no vote would find it); the right contents pass.
        same[1].result.suite = Some("h100-sxm-8".into());
        for_suite(&mut same, "h100-sxm-8", Some("sha-of-p2p-suite-and-more"));
        let r = judge(same, &[], 10.0);
        assert_eq!(
            verdicts(&r),
            [
                ("n1", NodeVerdict::Refused),
                ("n2", NodeVerdict::Refused),
                ("n3", NodeVerdict::NotTested)
            ]
        );
        assert_eq!(
            r.node("n2").unwrap().why[0],
            "ran other contents under the name of the job's suite h100-sxm-8 (SHA-256 \
             0123456789ab where the job's is sha-of-p2p-s): not judged by the fleet's suite"
        );
        let mut right: Vec<NodeSummary> = (1..=2).map(|i| bw(&format!("n{i}"), 390.0)).collect();
        for_suite(&mut right, "h100-sxm-8", Some("sha-of-p2p-suite"));
        assert!(right.iter().all(|n| n.result.verdict == NodeVerdict::Pass));
    }

    #[test]
    fn evidence_of_another_job_is_not_this_jobs_result() {
        let job = |id: &str, node: &str| crate::evidence::JobRecord {
            scheduler: "slurm".into(),
            id: id.into(),
            rank: Some(0),
            tasks: Some(3),
            node: Some(node.into()),
        };
        let mut nodes = vec![
            bw("n1", 390.0),
            bw("n2", 390.0),
            bw("n3", 390.0),
            bw("n4", 390.0),
        ];
        nodes[0].result.job = Some(job("77", "n1"));
        nodes[1].result.job = Some(job("76", "n2"));
        nodes[2].result.job = Some(job("77", "n9"));
        for_job(&mut nodes, "77");
        let r = judge(nodes, &[], 10.0);
        assert_eq!(
            verdicts(&r),
            [
                ("n1", NodeVerdict::Pass),
                ("n2", NodeVerdict::NotTested),
                ("n3", NodeVerdict::Refused),
                ("n4", NodeVerdict::NotTested)
            ]
        );
        assert!(r.nodes[1].why[0].contains("from job 76, not this job (77)"));
        assert!(r.nodes[2].why[0].contains("says it ran on node n9"));
        assert!(r.nodes[3].why[0].contains("not written by a task of job 77"));
        assert!(r.nodes[1].checks.is_empty());
    }

    #[test]
    fn failed_figures_take_no_part_in_the_median() {
        // Five nodes at 400, 400, 400, 358, 358 and three that failed at 100: the median of the
        // passing figures is 400, so the two at 358 (10.5% worse) are flagged.
        let mut nodes: Vec<NodeSummary> = [400.0, 400.0, 400.0, 358.0, 358.0]
            .iter()
            .enumerate()
            .map(|(i, v)| bw(&format!("p{i}"), *v))
            .collect();
        for i in 0..3 {
            nodes.push(node(
                &format!("f{i}"),
                &[("p2p_read", 100.0, true, Status::Fail)],
            ));
        }
        let r = judge(nodes, &[], 10.0);
        let flagged: Vec<&str> = r.outliers.iter().map(|o| o.node.as_str()).collect();
        assert_eq!(flagged, ["p3", "p4"]);
        assert_eq!(r.outliers[0].fleet_median, 400.0);
        assert_eq!(r.outliers[0].nodes_compared, 5);
    }

    #[test]
    fn the_report_depends_on_its_inputs_not_their_order() {
        let nodes: Vec<NodeSummary> = (1..=12)
            .map(|i| bw(&format!("n{i}"), 380.0 + i as f64))
            .collect();
        let mut shuffled = nodes.clone();
        shuffled.reverse();
        shuffled.swap(2, 7);
        let a = serde_json::to_string(&judge(nodes, &[], 10.0)).unwrap();
        let b = serde_json::to_string(&judge(shuffled, &[], 10.0)).unwrap();
        assert_eq!(a, b);
        assert!(a.find("\"n2\"").unwrap() < a.find("\"n10\"").unwrap());
    }

    #[test]
    fn each_node_shows_its_worst_figure_and_a_limit_only_when_shared() {
        let mut a = node(
            "a",
            &[
                ("p2p_read", 390.0, true, Status::Pass),
                ("p2p_read", 380.0, true, Status::Pass),
            ],
        );
        a.figures[1].key = key("p2p_read", Subject::pair(1, 0), true, Some(335.0));
        let b = bw("b", 385.0);
        let r = judge(vec![a.clone(), b.clone()], &[], 10.0);
        let d = &r.distributions[0];
        assert_eq!(
            d.points,
            [("a".to_string(), 380.0), ("b".to_string(), 385.0)]
        );
        assert_eq!(d.limit, Some(335.0));
        assert_eq!(d.median, 382.5);
        let mut c = bw("c", 385.0);
        c.figures[0].key = key("p2p_read", Subject::pair(0, 1), true, Some(300.0));
        let r = judge(vec![a, b, c], &[], 10.0);
        assert_eq!(r.distributions[0].limit, None);
    }

    #[test]
    fn the_worst_node_is_the_fleet_verdict_and_failures_are_drained() {
        let mut f = bw("n2", 390.0);
        f.result.verdict = NodeVerdict::Fail;
        f.result.why = vec!["topology: 17 NVLinks".into()];
        let mut e = bw("n3", 390.0);
        e.result.verdict = NodeVerdict::Error;
        e.result.why = vec!["health: could not measure".into()];
        let r = judge(vec![bw("n1", 390.0), f, e], &[], 10.0);
        assert_eq!(r.verdict, NodeVerdict::Fail);
        let acts: Vec<(&str, &str, &str)> = r
            .actions
            .iter()
            .map(|a| (a.node.as_str(), a.action.as_str(), a.reason.as_str()))
            .collect();
        assert_eq!(
            acts,
            [
                ("n2", "drain", "topology: 17 NVLinks"),
                ("n3", "drain", "health: could not measure")
            ]
        );
        assert_eq!(r.columns, ["p2p_bandwidth"]);
    }

    #[test]
    fn a_fleet_with_a_partial_node_is_written_as_version_2_and_any_other_as_version_1() {
        let r = judge(vec![bw("n1", 390.0), bw("n2", 390.0)], &[], 10.0);
        assert_eq!(r.format_version, 1);
        let mut p = bw("n2", 390.0);
        p.result.verdict = NodeVerdict::Partial;
        p.result.why = vec!["health: 1 of 8 judged".into()];
        let r = judge(vec![bw("n1", 390.0), p], &[], 10.0);
        assert_eq!(r.format_version, 2);
        assert_eq!(r.verdict, NodeVerdict::Partial);
        // A partial node refused (its GPU seen on another node) still says "partial" as its
        // own verdict: version 2.
        let mut p = bw("n2", 390.0);
        p.result.own_verdict = Some(crate::evidence::Verdict::Partial);
        p.result.verdict = NodeVerdict::Partial;
        p.result.why = vec!["health: 1 of 8 judged".into()];
        p.gpu_ids = vec!["UUID GPU-same".into()];
        let mut q = bw("n3", 390.0);
        q.gpu_ids = vec!["UUID GPU-same".into()];
        let r = judge(vec![bw("n1", 390.0), p, q], &[], 10.0);
        assert_eq!(r.node("n2").unwrap().verdict, NodeVerdict::Refused);
        assert_eq!(r.format_version, 2);
        // The refusal is the first reason, the one the drain gives, before the node's own.
        let n2 = r.node("n2").unwrap();
        assert!(n2.why[0].contains("GPU"), "{:?}", n2.why);
        assert_eq!(n2.why.last().unwrap(), "health: 1 of 8 judged");
        let a = r.actions.iter().find(|a| a.node == "n2").unwrap();
        assert_eq!(
            (a.action.as_str(), a.reason.as_str()),
            ("drain", n2.why[0].as_str())
        );
        // Every verdict but partial is one version 1 already held.
        for v in NodeVerdict::ALL
            .into_iter()
            .filter(|v| *v != NodeVerdict::Partial)
        {
            let mut n = bw("n2", 390.0);
            n.result.verdict = v;
            n.result.why = vec!["x".into()];
            assert_eq!(judge(vec![n], &[], 10.0).format_version, 1, "{v:?}");
        }
    }

    #[test]
    fn exactly_the_margin_below_the_median_is_within_it() {
        // Median 400: 360 is exactly 10% worse, 359 is more.
        let nodes = vec![
            bw("a", 400.0),
            bw("b", 400.0),
            bw("c", 400.0),
            bw("d", 360.0),
            bw("e", 359.0),
        ];
        let r = judge(nodes, &[], 10.0);
        let flagged: Vec<&str> = r.outliers.iter().map(|o| o.node.as_str()).collect();
        assert_eq!(flagged, ["e"]);
    }

    /// A collective's figure is one distribution per message size, named with it; a GPU's or
    /// a pair's figures are one distribution per metric, each node's worst.
    #[test]
    fn distributions_gather_like_figures_of_every_gpu_or_pair_but_not_of_every_size() {
        let fig = |check: &str, metric: &str, subject: Subject, v: f64| Figure {
            key: KEYS.with(|k| {
                k.borrow_mut().intern(FigureKey {
                    id: 0,
                    check: check.into(),
                    metric: metric.into(),
                    subject,
                    unit: "GB/s".into(),
                    higher_is_better: true,
                    limit: None,
                    conditions: String::new(),
                })
            }),
            value: v,
            status: Status::Pass,
        };
        let mut a = bw("a", 390.0);
        a.figures = vec![
            fig(
                "collective.all_reduce",
                "busbw",
                Subject::size(8 << 30),
                480.0,
            ),
            fig(
                "collective.all_reduce",
                "busbw",
                Subject::size(1 << 20),
                40.0,
            ),
            fig("host_bandwidth", "h2d", Subject::gpu(0), 55.0),
            fig("host_bandwidth", "h2d", Subject::gpu(1), 50.0),
        ];
        let r = judge(vec![a], &[], 10.0);
        let names: Vec<(&str, &str, f64)> = r
            .distributions
            .iter()
            .map(|d| (d.check.as_str(), d.metric.as_str(), d.points[0].1))
            .collect();
        assert_eq!(
            names,
            [
                ("collective.all_reduce", "busbw 1 MiB", 40.0),
                ("collective.all_reduce", "busbw 8 GiB", 480.0),
                ("host_bandwidth", "h2d", 50.0),
            ]
        );
        assert_eq!(r.distributions[1].class, Subject::size(8 << 30));
        assert_eq!(r.distributions[2].class, Subject::default());
        assert_eq!(r.distributions[1].figure, "busbw");
    }

    #[test]
    fn a_median_of_zero_compares_nothing() {
        let lat = |n: &str, v: f64| node(n, &[("latency", v, false, Status::Pass)]);
        let r = judge(
            vec![
                lat("a", 0.0),
                lat("b", 0.0),
                lat("c", 0.0),
                lat("d", 0.0),
                lat("e", 1.0),
            ],
            &[],
            10.0,
        );
        assert!(r.outliers.is_empty(), "{:?}", r.outliers);
    }

    #[test]
    fn columns_follow_the_order_of_a_run() {
        assert_eq!(
            order_columns(vec!["baseline".into(), "training".into()]),
            ["training", "baseline"]
        );
        let c = order_columns(
            [
                "training",
                "collective.all_reduce",
                "zeta",
                "topology",
                "baseline",
                "health",
            ]
            .map(String::from)
            .to_vec(),
        );
        assert_eq!(
            c,
            [
                "topology",
                "health",
                "collective.all_reduce",
                "training",
                "baseline",
                "zeta"
            ]
        );
    }
}
