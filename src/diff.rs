//! Comparing two runs of nodecert: what hardware changed, which metrics got worse beyond a
//! tolerance, and which verdicts changed. Pure functions on evidence that return a serde struct;
//! rendering lives in [`crate::report::render_diff`].

use crate::checks::judge::fmt_num;
use crate::evidence::{CheckRecord, Evidence, Status, Subject};
use crate::inventory::{Gpu, Inventory};
use serde::Serialize;
use std::collections::BTreeMap;

/// Default tolerance of `nodecert diff`, percent.
pub const DEFAULT_TOLERANCE_PCT: f64 = 5.0;

/// Which way a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Bandwidth, throughput, efficiency.
    Higher,
    /// Latency, time, overhead.
    Lower,
}

/// Which way `name` (in `unit`) is better; None for figures that are not performance (a loss).
pub fn direction(name: &str, unit: &str) -> Option<Better> {
    match name {
        "scaling_efficiency" => return Some(Better::Higher),
        "comm_fraction" => return Some(Better::Lower),
        _ => {}
    }
    if unit.ends_with("/s") {
        Some(Better::Higher)
    } else if matches!(unit, "ns" | "us" | "ms" | "s")
        || name.contains("latency")
        || name.contains("time")
    {
        Some(Better::Lower)
    } else {
        None
    }
}

/// One metric present in both runs (same check id, metric name and subject).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricChange {
    /// Check id, e.g. "p2p_bandwidth".
    pub check: String,
    /// Metric name, e.g. "p2p_read".
    pub metric: String,
    pub subject: Subject,
    /// The subject for people: "GPU 1 -> GPU 4".
    pub subject_text: String,
    pub unit: String,
    /// Median of the old and the new run.
    pub old: f64,
    pub new: f64,
    /// (new - old) / old, percent: negative when the figure went down.
    pub change_pct: f64,
    /// How much worse the new figure is, percent of the old one; negative when it is better.
    pub worse_pct: f64,
    pub better: Better,
}

impl MetricChange {
    /// "p2p_bandwidth p2p_read GPU 1 -> GPU 4: 396 -> 238 GB/s (39.9% worse)".
    pub fn describe(&self) -> String {
        let how = if self.worse_pct >= 0.0 {
            format!("{:.1}% worse", self.worse_pct)
        } else {
            format!("{:.1}% better", -self.worse_pct)
        };
        let unit = if self.unit.is_empty() {
            String::new()
        } else {
            format!(" {}", self.unit)
        };
        format!(
            "{} {} {}: {} -> {}{unit} ({how})",
            self.check,
            self.metric,
            self.subject_text,
            fmt_num(self.old),
            fmt_num(self.new),
        )
    }
}

/// Every directional metric found in both lists of checks, in the new run's order.
pub fn metric_changes(old: &[CheckRecord], new: &[CheckRecord]) -> Vec<MetricChange> {
    let mut out = Vec::new();
    for nc in new {
        let Some(oc) = old.iter().find(|c| c.id == nc.id) else {
            continue;
        };
        for nm in &nc.metrics {
            let Some(better) = direction(&nm.name, &nm.unit) else {
                continue;
            };
            let Some(om) = oc.metric(&nm.name, &nm.subject) else {
                continue;
            };
            let (o, n) = (om.median, nm.median);
            if !(o.is_finite() && n.is_finite()) || o == 0.0 {
                continue;
            }
            let change_pct = (n - o) / o.abs() * 100.0;
            let worse_pct = match better {
                Better::Higher => -change_pct,
                Better::Lower => change_pct,
            };
            out.push(MetricChange {
                check: nc.id.clone(),
                metric: nm.name.clone(),
                subject: nm.subject.clone(),
                subject_text: nm.subject.describe(),
                unit: nm.unit.clone(),
                old: o,
                new: n,
                change_pct,
                worse_pct,
                better,
            });
        }
    }
    out
}

/// A change of what the node is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HardwareChange {
    /// "node", "GPU 3", "GPU 0 <-> GPU 5".
    pub subject: String,
    /// "driver", "gpu count", "uuid", "model", "vbios", "pcie link", "nvlink", ...
    pub what: String,
    pub old: String,
    pub new: String,
    /// Fewer GPUs, a slower PCIe link, fewer NVLinks.
    pub worse: bool,
}

/// A status that changed: of a check (`subject` None) or of one finding subject.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerdictChange {
    pub check: String,
    pub subject: Option<String>,
    pub metric: Option<String>,
    pub old: Option<Status>,
    pub new: Option<Status>,
    /// "PASS", "FAIL", or "absent".
    pub old_label: String,
    pub new_label: String,
    pub worse: bool,
}

impl VerdictChange {
    /// "p2p_bandwidth GPU 1 -> GPU 4 [p2p_read]: PASS -> FAIL".
    pub fn describe(&self) -> String {
        let mut s = self.check.clone();
        if let Some(sub) = &self.subject {
            s.push(' ');
            s.push_str(sub);
        }
        if let Some(m) = &self.metric {
            s.push_str(&format!(" [{m}]"));
        }
        format!("{s}: {} -> {}", self.old_label, self.new_label)
    }
}

/// One side of the comparison, for the header.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    /// Where it was read from (set by the caller).
    pub source: String,
    pub suite: String,
    pub hostname: String,
    pub node: String,
    pub started_at: String,
    pub simulated: bool,
    /// "h100-sxm-8, seed 1, faults: slow-gpu-pair:gpu=1,peer=4" for simulated runs.
    pub simulation: Option<String>,
    pub verdict: String,
}

impl Side {
    fn of(ev: &Evidence) -> Side {
        Side {
            source: String::new(),
            suite: ev.suite.name.clone(),
            hostname: ev.node.hostname.clone(),
            node: ev.node.summary(),
            started_at: ev.started_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
            simulated: ev.simulated,
            simulation: ev.simulation.as_ref().map(|s| {
                let mut t = format!("{}, seed {}", s.node, s.seed);
                if !s.faults.is_empty() {
                    t.push_str(&format!(", faults: {}", s.faults.join(" ")));
                }
                t
            }),
            verdict: ev.overall().label().to_string(),
        }
    }
}

/// Everything `nodecert diff` found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diff {
    pub old: Side,
    pub new: Side,
    /// Either side is simulated: the comparison certifies nothing about real hardware.
    pub simulated: bool,
    pub tolerance_pct: f64,
    pub hardware: Vec<HardwareChange>,
    /// Metrics worse than the old run by more than the tolerance, by check, worst first.
    pub regressions: Vec<MetricChange>,
    /// Metrics better than the old run by more than the tolerance, by check, best first.
    pub improvements: Vec<MetricChange>,
    /// Metrics compared (found in both runs, with a direction).
    pub metrics_compared: usize,
    pub verdicts: Vec<VerdictChange>,
    /// Something regressed: a metric, a verdict, or the hardware (fewer GPUs or links).
    pub regressed: bool,
}

/// Compare `new` with `old`. `tolerance_pct`: how much worse a metric may get, percent.
pub fn compare(old: &Evidence, new: &Evidence, tolerance_pct: f64) -> Diff {
    let changes = metric_changes(&old.checks, &new.checks);
    let metrics_compared = changes.len();
    // In the order the checks ran, the largest change of each check first.
    let pos = |c: &MetricChange| new.checks.iter().position(|x| x.id == c.check);
    let mut regressions: Vec<MetricChange> = changes
        .iter()
        .filter(|c| c.worse_pct > tolerance_pct)
        .cloned()
        .collect();
    regressions.sort_by(|a, b| {
        pos(a)
            .cmp(&pos(b))
            .then(b.worse_pct.total_cmp(&a.worse_pct))
    });
    let mut improvements: Vec<MetricChange> = changes
        .into_iter()
        .filter(|c| -c.worse_pct > tolerance_pct)
        .collect();
    improvements.sort_by(|a, b| {
        pos(a)
            .cmp(&pos(b))
            .then(a.worse_pct.total_cmp(&b.worse_pct))
    });
    let hardware = hardware_changes(&old.node, &new.node);
    let verdicts = verdict_changes(&old.checks, &new.checks);
    let regressed = !regressions.is_empty()
        || verdicts.iter().any(|v| v.worse)
        || hardware.iter().any(|h| h.worse);
    Diff {
        old: Side::of(old),
        new: Side::of(new),
        simulated: old.simulated || new.simulated,
        tolerance_pct,
        hardware,
        regressions,
        improvements,
        metrics_compared,
        verdicts,
        regressed,
    }
}

/// Pairs of (old, new) GPU positions, matched by UUID, else serial, else PCI bus id; and how.
pub fn match_gpus(old: &[Gpu], new: &[Gpu]) -> Vec<(usize, usize, &'static str)> {
    type Key = fn(&Gpu) -> Option<&str>;
    let keys: [(&'static str, Key); 3] = [
        ("uuid", |g| Some(g.uuid.as_str())),
        ("serial", |g| g.serial.as_deref()),
        ("bus id", |g| Some(g.pci_bus_id.as_str())),
    ];
    let mut out = Vec::new();
    let mut used_old = vec![false; old.len()];
    let mut used_new = vec![false; new.len()];
    for (how, key) in keys {
        for (i, o) in old.iter().enumerate() {
            if used_old[i] {
                continue;
            }
            let Some(k) = key(o).map(str::trim).filter(|k| !k.is_empty()) else {
                continue;
            };
            if let Some(j) = (0..new.len()).find(|&j| !used_new[j] && key(&new[j]) == Some(k)) {
                used_old[i] = true;
                used_new[j] = true;
                out.push((i, j, how));
            }
        }
    }
    out.sort_by_key(|&(_, j, _)| j);
    out
}

fn opt(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "n/a".into())
}

fn pcie(g: &Gpu) -> String {
    match (g.pcie.gen_current, g.pcie.width_current) {
        (Some(gen), Some(w)) => format!("Gen{gen} x{w}"),
        (Some(gen), None) => format!("Gen{gen}"),
        (None, Some(w)) => format!("x{w}"),
        (None, None) => "n/a".into(),
    }
}

/// What changed about the node: driver, GPU count and identities, VBIOS, PCIe links, NVLinks.
pub fn hardware_changes(old: &Inventory, new: &Inventory) -> Vec<HardwareChange> {
    let mut out = Vec::new();
    let mut push = |subject: String, what: &str, o: String, n: String, worse: bool| {
        if o != n {
            out.push(HardwareChange {
                subject,
                what: what.into(),
                old: o,
                new: n,
                worse,
            });
        }
    };
    let node = || "node".to_string();
    push(
        node(),
        "hostname",
        old.hostname.clone(),
        new.hostname.clone(),
        false,
    );
    push(
        node(),
        "driver",
        opt(&old.driver_version),
        opt(&new.driver_version),
        false,
    );
    push(
        node(),
        "cuda driver version",
        opt(&old.cuda_driver_version),
        opt(&new.cuda_driver_version),
        false,
    );
    push(
        node(),
        "gpu count",
        old.gpus.len().to_string(),
        new.gpus.len().to_string(),
        new.gpus.len() < old.gpus.len(),
    );
    push(
        node(),
        "nvswitches",
        old.nvswitches.map_or("n/a".into(), |n| n.to_string()),
        new.nvswitches.map_or("n/a".into(), |n| n.to_string()),
        new.nvswitches.unwrap_or(0) < old.nvswitches.unwrap_or(0),
    );
    push(
        node(),
        "virtualization",
        format!("{:?}", old.virtualization.mode).to_lowercase(),
        format!("{:?}", new.virtualization.mode).to_lowercase(),
        false,
    );
    let matched = match_gpus(&old.gpus, &new.gpus);
    for &(i, j, how) in &matched {
        let (o, n) = (&old.gpus[i], &new.gpus[j]);
        let who = format!("GPU {}", n.index);
        let uuid_what = if how == "bus id" {
            "uuid (gpu swapped)"
        } else {
            "uuid"
        };
        push(
            who.clone(),
            uuid_what,
            o.uuid.clone(),
            n.uuid.clone(),
            false,
        );
        push(who.clone(), "serial", opt(&o.serial), opt(&n.serial), false);
        push(who.clone(), "model", o.name.clone(), n.name.clone(), false);
        push(who.clone(), "vbios", opt(&o.vbios), opt(&n.vbios), false);
        push(
            who.clone(),
            "bus id",
            o.pci_bus_id.clone(),
            n.pci_bus_id.clone(),
            false,
        );
        push(
            who.clone(),
            "cuda index",
            o.index.to_string(),
            n.index.to_string(),
            false,
        );
        push(
            who.clone(),
            "memory",
            crate::units::format_bytes(o.memory_bytes),
            crate::units::format_bytes(n.memory_bytes),
            n.memory_bytes < o.memory_bytes,
        );
        let slower = n.pcie.gen_current.unwrap_or(0) < o.pcie.gen_current.unwrap_or(0)
            || n.pcie.width_current.unwrap_or(0) < o.pcie.width_current.unwrap_or(0);
        push(who, "pcie link", pcie(o), pcie(n), slower);
    }
    for (i, o) in old.gpus.iter().enumerate() {
        if !matched.iter().any(|m| m.0 == i) {
            push(
                format!("GPU {}", o.index),
                "gpu removed",
                format!("{} {} at {}", o.name, o.uuid, o.pci_bus_id),
                "absent".into(),
                true,
            );
        }
    }
    for (j, n) in new.gpus.iter().enumerate() {
        if !matched.iter().any(|m| m.1 == j) {
            push(
                format!("GPU {}", n.index),
                "gpu added",
                "absent".into(),
                format!("{} {} at {}", n.name, n.uuid, n.pci_bus_id),
                false,
            );
        }
    }
    for np in &new.pairs {
        if let Some(op) = old.pairs.iter().find(|p| (p.a, p.b) == (np.a, np.b)) {
            push(
                format!("GPU {} <-> GPU {}", np.a, np.b),
                "nvlink",
                op.topo_label(),
                np.topo_label(),
                np.nvlinks < op.nvlinks,
            );
        }
    }
    out
}

/// Statuses that changed, per check and per finding (check, subject, metric); a key found
/// several times counts with its worst status. Worse means a higher severity, a check or
/// finding that is gone counting as skipped.
pub fn verdict_changes(old: &[CheckRecord], new: &[CheckRecord]) -> Vec<VerdictChange> {
    type Key = (String, Option<String>, Option<String>);
    fn statuses(checks: &[CheckRecord]) -> BTreeMap<Key, Status> {
        let mut m: BTreeMap<Key, Status> = BTreeMap::new();
        for c in checks {
            m.insert((c.id.clone(), None, None), c.status);
            for f in &c.findings {
                let k = (c.id.clone(), Some(f.subject.clone()), f.metric.clone());
                let e = m.entry(k).or_insert(f.status);
                *e = (*e).max(f.status);
            }
        }
        m
    }
    let (o, n) = (statuses(old), statuses(new));
    // New-run order of checks, then any checks only the old run had.
    let mut order: Vec<String> = new.iter().map(|c| c.id.clone()).collect();
    for c in old {
        if !order.contains(&c.id) {
            order.push(c.id.clone());
        }
    }
    let rank = |s: Option<Status>| s.unwrap_or(Status::Skip);
    let label = |s: Option<Status>| s.map_or("absent".to_string(), |s| s.label().to_string());
    let mut out = Vec::new();
    for id in order {
        let mut keys: Vec<&Key> = o.keys().chain(n.keys()).filter(|k| k.0 == id).collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            let (a, b) = (o.get(k).copied(), n.get(k).copied());
            if a == b {
                continue;
            }
            out.push(VerdictChange {
                check: k.0.clone(),
                subject: k.1.clone(),
                metric: k.2.clone(),
                old: a,
                new: b,
                old_label: label(a),
                new_label: label(b),
                worse: rank(b) > rank(a),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{Finding, Metric};
    use chrono::Utc;

    fn check(id: &str, metrics: Vec<Metric>, findings: Vec<Finding>) -> CheckRecord {
        let status = findings
            .iter()
            .map(|f| f.status)
            .max()
            .unwrap_or(Status::Pass);
        CheckRecord {
            id: id.into(),
            kind: id.into(),
            title: id.into(),
            status,
            summary: String::new(),
            plan: vec![],
            metrics,
            facts: vec![],
            findings,
            started_at: Utc::now(),
            duration_s: 0.0,
        }
    }

    fn finding(status: Status, subject: &str, metric: &str) -> Finding {
        Finding {
            status,
            subject: subject.into(),
            found: String::new(),
            expected: String::new(),
            reason: String::new(),
            metric: Some(metric.into()),
        }
    }

    #[test]
    fn directions() {
        assert_eq!(direction("p2p_read", "GB/s"), Some(Better::Higher));
        assert_eq!(
            direction("samples_per_s", "samples/s"),
            Some(Better::Higher)
        );
        assert_eq!(direction("latency", "us"), Some(Better::Lower));
        assert_eq!(direction("step_time", "ms"), Some(Better::Lower));
        assert_eq!(direction("comm_fraction", ""), Some(Better::Lower));
        assert_eq!(direction("scaling_efficiency", ""), Some(Better::Higher));
        assert_eq!(direction("loss", ""), None);
    }

    #[test]
    fn metric_changes_are_direction_aware_and_matched_by_subject() {
        let old = vec![check(
            "x",
            vec![
                Metric::new("bw", Subject::gpu(0), "GB/s", vec![100.0]),
                Metric::new("bw", Subject::gpu(1), "GB/s", vec![100.0]),
                Metric::new("latency", Subject::pair(0, 1), "us", vec![2.0]),
                Metric::new("loss", Subject::node(), "", vec![1.0]),
            ],
            vec![],
        )];
        let new = vec![check(
            "x",
            vec![
                Metric::new("bw", Subject::gpu(1), "GB/s", vec![90.0]),
                Metric::new("bw", Subject::gpu(0), "GB/s", vec![110.0]),
                Metric::new("latency", Subject::pair(0, 1), "us", vec![2.5]),
                Metric::new("loss", Subject::node(), "", vec![9.0]),
            ],
            vec![],
        )];
        let c = metric_changes(&old, &new);
        assert_eq!(c.len(), 3);
        assert_eq!((c[0].subject.gpu, c[0].worse_pct.round()), (Some(1), 10.0));
        assert_eq!((c[1].subject.gpu, c[1].worse_pct.round()), (Some(0), -10.0));
        assert_eq!(c[2].worse_pct.round(), 25.0);
        assert!(c[0]
            .describe()
            .contains("x bw GPU 1: 100 -> 90.0 GB/s (10.0% worse)"));
    }

    #[test]
    fn verdicts_per_check_and_per_finding() {
        let old = vec![check(
            "p2p",
            vec![],
            vec![
                finding(Status::Pass, "GPU 0 -> GPU 1", "p2p_read"),
                finding(Status::Pass, "GPU 1 -> GPU 4", "p2p_read"),
            ],
        )];
        let new = vec![check(
            "p2p",
            vec![],
            vec![
                finding(Status::Pass, "GPU 0 -> GPU 1", "p2p_read"),
                finding(Status::Pass, "GPU 1 -> GPU 4", "p2p_read"),
                finding(Status::Fail, "GPU 1 -> GPU 4", "p2p_read"),
            ],
        )];
        let v = verdict_changes(&old, &new);
        let text: Vec<String> = v.iter().map(VerdictChange::describe).collect();
        assert_eq!(
            text,
            [
                "p2p: PASS -> FAIL",
                "p2p GPU 1 -> GPU 4 [p2p_read]: PASS -> FAIL"
            ]
        );
        assert!(v.iter().all(|c| c.worse));
        assert!(verdict_changes(&new, &old).iter().all(|c| !c.worse));
    }

    #[test]
    fn gpus_match_by_uuid_then_serial_then_bus_id() {
        let gpu = |index: usize, uuid: &str, serial: Option<&str>, bus: &str| Gpu {
            index,
            uuid: uuid.into(),
            serial: serial.map(String::from),
            pci_bus_id: bus.into(),
            ..Default::default()
        };
        let old = vec![
            gpu(0, "GPU-a", Some("s0"), "0000:18:00.0"),
            gpu(1, "GPU-b", Some("s1"), "0000:28:00.0"),
            gpu(2, "GPU-c", None, "0000:38:00.0"),
        ];
        let new = vec![
            gpu(0, "GPU-b", Some("s1"), "0000:18:00.0"),
            gpu(1, "GPU-x", Some("s0"), "0000:28:00.0"),
            gpu(2, "GPU-y", None, "0000:38:00.0"),
        ];
        assert_eq!(
            match_gpus(&old, &new),
            [(1, 0, "uuid"), (0, 1, "serial"), (2, 2, "bus id")]
        );
        let inv = |gpus: Vec<Gpu>| Inventory {
            gpus,
            ..Default::default()
        };
        let h = hardware_changes(&inv(old), &inv(new));
        assert!(h
            .iter()
            .any(|c| c.what == "uuid (gpu swapped)" && c.subject == "GPU 2"));
        assert!(!h.iter().any(|c| c.worse));
    }
}
