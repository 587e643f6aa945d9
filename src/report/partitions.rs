//! The report's table of partitionings: the training run as the node ran it data-parallel,
//! tensor-parallel and hybrid (measured by the training check), each beside what bounds it
//! (predicted by [`crate::training::fit`] from the node's measured parts), with a chart of the
//! scaling each keeps, measured and predicted.

use crate::checks::judge::fmt_num;
use crate::checks::training::{methods, GOLDEN_EXPECTED, REPLICAS_EXPECTED};
use crate::evidence::{CheckRecord, Evidence, Status, Subject};
use crate::report::svg::{bar_chart, BarChart, BarGroup};
use crate::report::view::{class, Cell};
use crate::training::fit;
use crate::training::partition::Partition;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct PartitionView {
    pub rows: Vec<PartitionRow>,
    /// Scaling by method, measured and predicted (inline SVG).
    pub chart: String,
}

#[derive(Debug, Serialize)]
pub struct PartitionRow {
    pub method: String,
    /// "8 x 1" (tensor x data).
    pub layout: String,
    pub step_ms: Cell,
    pub samples_per_s: Cell,
    pub scaling: Cell,
    pub comm_share: Cell,
    /// The golden losses against the CPU's: "match", "wrong", or why there are none.
    pub golden: Cell,
    /// Whether the ranks (replicas, shards) agreed.
    pub ranks: Cell,
    /// The largest part of its predicted step, or "-".
    pub bound: String,
    /// Why the row has no figures (not available here), else empty.
    pub note: String,
}

/// The table of a run that compared partitionings, or of a one-GPU run that had none to
/// compare (its data-parallel row, and why there is nothing else); None where the suite did
/// not ask for partitionings or no training ran.
pub fn build(ev: &Evidence) -> Option<PartitionView> {
    let cfg = crate::report::view::training_config(ev)?;
    let gpus = ev.node.gpus.len();
    let compared = methods::compared(cfg, gpus);
    let alone = cfg.partitionings && gpus == 1;
    if compared.is_empty() && !alone {
        return None;
    }
    let rec = ev.check("training")?;
    let predicted: Vec<fit::FitRow> = fit::node_rates(ev, cfg.precision)
        .map(|r| fit::analyse(cfg, gpus, &r))
        .unwrap_or_default();
    let mut rows = Vec::new();
    let mut groups = Vec::new();
    for p in std::iter::once(Partition::Data { dp: gpus }).chain(compared) {
        let name = fit::method_name(p);
        let who = match p {
            Partition::Data { .. } => Subject::node(),
            _ => Subject::method(&name),
        };
        let fit = predicted
            .iter()
            .find(|r| r.method == name)
            .and_then(|r| r.fit.as_ref());
        let figure = |metric: &str, unit: &str, pct: bool| -> Cell {
            let Some(m) = rec.metric(metric, &who) else {
                return Cell::empty();
            };
            let text = if pct {
                format!("{}%", fmt_num(100.0 * m.median))
            } else if unit.is_empty() {
                fmt_num(m.median)
            } else {
                format!("{} {unit}", fmt_num(m.median))
            };
            Cell {
                text,
                class: worst(rec, &who, &[metric]).map(class).unwrap_or_default(),
            }
        };
        // The data-parallel run's golden and replica findings carry no metric (as in evidence
        // of every format); they are known by what they expected.
        let (golden, ranks) = match p {
            Partition::Data { .. } => (
                dp_verdict(rec, |e| e.starts_with(GOLDEN_EXPECTED), "match", "wrong"),
                dp_verdict(rec, |e| e == REPLICAS_EXPECTED, "agree", "disagree"),
            ),
            _ => (
                verdict(worst(rec, &who, &["golden_node_loss"]), "match", "wrong"),
                verdict(worst(rec, &who, &[methods::RANKS]), "agree", "disagree"),
            ),
        };
        let fact = |name: &str| {
            rec.facts
                .iter()
                .find(|f| f.name == name && f.subject == who)
                .map(|f| f.value.describe())
        };
        let note = match p {
            Partition::Data { .. } => String::new(),
            _ => match (
                fact(methods::UNAVAILABLE),
                fact(methods::FAILED),
                fact(methods::RANKS),
            ) {
                (Some(why), ..) => format!("not available here: {why}"),
                (None, Some(e), _) => format!("error: not measured: {e}"),
                (None, None, None) => "error: the run left no record".into(),
                (None, None, Some(_)) => String::new(),
            },
        };
        let scaling = rec.metric("scaling_efficiency", &who).map(|m| m.median);
        groups.push(BarGroup {
            label: name.clone(),
            values: vec![scaling, fit.map(|f| f.scaling)],
        });
        rows.push(PartitionRow {
            layout: format!("{} x {}", p.tp(), p.dp()),
            step_ms: figure("step_time", "", false),
            samples_per_s: figure("samples_per_s", "", false),
            scaling: figure("scaling_efficiency", "", true),
            comm_share: figure("comm_fraction", "", true),
            golden,
            ranks,
            bound: fit.map_or("-".into(), |f| f.bound.describe().to_string()),
            note,
            method: name,
        });
    }
    if alone {
        rows.push(PartitionRow {
            method: "tensor-parallel, hybrid".into(),
            layout: "-".into(),
            step_ms: Cell::empty(),
            samples_per_s: Cell::empty(),
            scaling: Cell::empty(),
            comm_share: Cell::empty(),
            golden: Cell::empty(),
            ranks: Cell::empty(),
            bound: "-".into(),
            note: "not available here: one GPU, nothing to partition (they need two or more)"
                .into(),
        });
        // One bar of 100% says nothing: no chart.
        return Some(PartitionView {
            rows,
            chart: String::new(),
        });
    }
    let chart = bar_chart(&BarChart {
        title: "Scaling kept, by partitioning".into(),
        axis_label: "of linear scaling from one GPU".into(),
        series: vec!["measured".into(), "predicted".into()],
        groups,
    });
    Some(PartitionView { rows, chart })
}

/// The worst judgement (not a note) of partitioning `who` on any of `metrics`.
fn worst(rec: &CheckRecord, who: &Subject, metrics: &[&str]) -> Option<Status> {
    rec.findings
        .iter()
        .filter(|f| !f.info && &f.subject == who)
        .filter(|f| f.metric.as_deref().is_some_and(|m| metrics.contains(&m)))
        .map(|f| f.status)
        .max()
}

/// The data-parallel run's worst judgement whose expectation `expected` recognises, as a cell.
fn dp_verdict(rec: &CheckRecord, expected: impl Fn(&str) -> bool, good: &str, bad: &str) -> Cell {
    let s = rec
        .findings
        .iter()
        .filter(|f| !f.info && f.subject.method.is_none() && expected(&f.expected))
        .map(|f| f.status)
        .max();
    verdict(s, good, bad)
}

/// A judgement's cell: `good` when it passed, `bad` when it failed, else its status's word.
fn verdict(status: Option<Status>, good: &str, bad: &str) -> Cell {
    match status {
        None => Cell::empty(),
        Some(s) => Cell {
            text: match s {
                Status::Pass => good.into(),
                Status::Fail => bad.into(),
                other => other.label().to_lowercase(),
            },
            class: class(s),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_gpu_run_shows_its_own_row_and_why_there_is_nothing_else() {
        let ev = crate::testutil::simulated("h200-vm-1", &[]);
        let v = build(&ev).expect("a one-GPU training run says why it compared nothing");
        assert_eq!(v.rows.len(), 2);
        assert_eq!(v.rows[0].method, "data-parallel");
        assert_eq!(v.rows[0].layout, "1 x 1");
        assert_eq!(v.rows[0].golden.text, "match");
        assert!(v.rows[0].note.is_empty());
        assert!(v.rows[1].note.starts_with("not available here: one GPU"));
        assert!(v.chart.is_empty());
        // A suite that asked for no partitionings gets no table.
        let mut ev = ev;
        let t = ev.suite.resolved.checks.training.as_mut().unwrap();
        t.partitionings = false;
        assert!(build(&ev).is_none());
    }

    #[test]
    fn every_partitioning_has_a_row_and_a_broken_one_shows_as_broken() {
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let v = build(&ev).expect("an 8-GPU training run compares partitionings");
        let names: Vec<&str> = v.rows.iter().map(|r| r.method.as_str()).collect();
        assert_eq!(
            names,
            [
                "data-parallel",
                "tensor-parallel",
                "hybrid (tensor 2 x data 4)",
                "hybrid (tensor 4 x data 2)"
            ]
        );
        assert_eq!(v.rows[1].layout, "8 x 1");
        for r in &v.rows {
            assert_eq!(r.golden.text, "match", "{r:?}");
            assert_eq!(r.ranks.text, "agree", "{r:?}");
            assert!(r.scaling.text.ends_with('%'), "{r:?}");
            assert_ne!(r.bound, "-", "{r:?}");
        }
        assert!(v.chart.contains("tensor-parallel"), "{}", v.chart);
        let ev = crate::testutil::simulated("h100-sxm-8", &["replica-mismatch:gpu=3"]);
        let v = build(&ev).unwrap();
        for r in &v.rows {
            assert_eq!(r.ranks.text, "disagree", "{r:?}");
            assert_eq!(r.ranks.class, "fail", "{r:?}");
        }
    }
}
