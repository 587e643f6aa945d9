//! Comparing two runs of nodecert: what hardware changed, which metrics got worse beyond a
//! tolerance, and which verdicts changed. Pure functions on evidence that return a serde struct;
//! rendering lives in [`crate::report::render_diff`].

use crate::checks::judge::fmt_num;
use crate::evidence::{CheckRecord, Evidence, Metric, Status, Subject, Verdict};
use crate::inventory::{Gpu, Inventory};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

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
    /// The subject in the new run's numbering.
    pub subject: Subject,
    /// The subject for people: "GPU 1 -> GPU 4".
    pub subject_text: String,
    /// The subject in the old run's numbering, when CUDA numbering changed between the runs.
    pub old_subject_text: Option<String>,
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
        let was = self
            .old_subject_text
            .as_ref()
            .map_or(String::new(), |o| format!(" (was {o})"));
        format!(
            "{} {} {}{was}: {} -> {}{unit} ({how})",
            self.check,
            self.metric,
            self.subject_text,
            fmt_num(self.old),
            fmt_num(self.new),
        )
    }
}

/// The facts that say under which conditions a check's figures were measured: what its GEMMs
/// multiplied (a GPU's rate depends on its data), and the NCCL settings in effect. Two runs of a
/// check whose conditions differ measured two different things: its figures are not compared.
pub const CONDITIONS: &[&str] = &[
    crate::checks::compute::OPERANDS,
    crate::checks::nccl_env::FACT,
    crate::checks::nccl_env::ACCEPTED,
    crate::checks::nccl_env::PEERS,
    crate::checks::nccl_env::PEERS_ACCEPTED,
];

/// The conditions a check's figures were measured under ([`CONDITIONS`]), sorted, for people.
/// A setting the suite accepts is a setting all the same: whether a suite accepted it changes
/// how a figure is judged, not what was measured. Other nodes' settings (the fabric's) are
/// their values without the nodes' names: a rerun on other nodes under the same settings
/// measured the same thing.
pub fn conditions(c: &CheckRecord) -> Vec<String> {
    let mut v: Vec<String> = c
        .facts
        .iter()
        .filter(|f| CONDITIONS.contains(&f.name.as_str()))
        .map(|f| {
            let name = match f.name.as_str() {
                crate::checks::nccl_env::ACCEPTED => crate::checks::nccl_env::FACT,
                crate::checks::nccl_env::PEERS_ACCEPTED => crate::checks::nccl_env::PEERS,
                n => n,
            };
            format!("{name}: {}", f.value.describe())
        })
        .collect();
    v.sort();
    v
}

/// A check found in both runs whose figures were measured under other conditions: none of its
/// metrics is compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotCompared {
    pub check: String,
    /// The old and the new run's conditions, for people; "none recorded" where a run has none
    /// (an older nodecert did not record them).
    pub old: String,
    pub new: String,
}

impl NotCompared {
    /// "compute: measured under other conditions (none recorded -> gemm_operands: ...)".
    pub fn describe(&self) -> String {
        format!(
            "{}: measured under other conditions ({} -> {}); its figures are not compared",
            self.check, self.old, self.new
        )
    }
}

/// The checks of both lists whose conditions differ, in the new run's order.
pub fn condition_changes(old: &[CheckRecord], new: &[CheckRecord]) -> Vec<NotCompared> {
    let text = |v: Vec<String>| {
        if v.is_empty() {
            "none recorded".to_string()
        } else {
            v.join("; ")
        }
    };
    new.iter()
        .filter_map(|nc| {
            let oc = old.iter().find(|c| c.id == nc.id)?;
            let (o, n) = (conditions(oc), conditions(nc));
            (o != n).then(|| NotCompared {
                check: nc.id.clone(),
                old: text(o),
                new: text(n),
            })
        })
        .collect()
}

/// Every directional metric found in both lists of checks, in the new run's order, except
/// those of a check measured under other conditions in the two ([`condition_changes`]).
/// Subjects are matched through `gpus`: an old run's GPU is compared with the same GPU in the
/// new run, whatever its CUDA index there.
pub fn metric_changes(
    old: &[CheckRecord],
    new: &[CheckRecord],
    gpus: &GpuMap,
) -> Vec<MetricChange> {
    let mut out = Vec::new();
    // Looked up, not searched: evidence read back may hold hundreds of thousands of records.
    let mut old_by_id: HashMap<&str, &CheckRecord> = HashMap::new();
    for c in old {
        old_by_id.entry(c.id.as_str()).or_insert(c);
    }
    for nc in new {
        let Some(&oc) = old_by_id.get(nc.id.as_str()) else {
            continue;
        };
        if conditions(oc) != conditions(nc) {
            continue;
        }
        // The old run's metrics with their subjects in the new numbering, the first of each.
        let mut renamed: HashMap<(&str, Subject), &Metric> = HashMap::new();
        for m in &oc.metrics {
            if let Some(s) = gpus.subject(&m.subject) {
                renamed.entry((m.name.as_str(), s)).or_insert(m);
            }
        }
        for nm in &nc.metrics {
            let Some(better) = direction(&nm.name, &nm.unit) else {
                continue;
            };
            let Some(om) = old_metric(&renamed, &nm.name, &nm.subject) else {
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
            let subject_text = nm.subject.describe();
            let old_text = om.subject.describe();
            out.push(MetricChange {
                check: nc.id.clone(),
                metric: nm.name.clone(),
                subject: nm.subject.clone(),
                old_subject_text: (old_text != subject_text).then_some(old_text),
                subject_text,
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

/// The old metric `name` of `subject` (new numbering). A pair metric the old run recorded one
/// way only (p2p_bidir, lower index first) is unordered: after renumbering it matches the
/// reversed pair too.
fn old_metric<'a>(
    renamed: &HashMap<(&str, Subject), &'a Metric>,
    name: &str,
    subject: &Subject,
) -> Option<&'a Metric> {
    let find = |s: &Subject| renamed.get(&(name, s.clone())).copied();
    if let Some(m) = find(subject) {
        return Some(m);
    }
    let (Some(a), Some(b)) = (subject.gpu, subject.peer) else {
        return None;
    };
    // The reversed pair. Had the old run recorded this way too, its figure (on the same two
    // GPUs, so renamed as well) would have been found above: this is a one-way record.
    find(&Subject {
        gpu: Some(b),
        peer: Some(a),
        ..subject.clone()
    })
}

/// How the old run's CUDA indices map onto the new run's: GPUs matched by identity
/// ([`match_gpus`]: UUID, else serial, else PCI bus id), so that a GPU is compared with itself
/// when CUDA numbering changed between the runs (an upgrade, a migration, a GPU gone).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuMap {
    /// Each GPU found in both runs, with its old and new index; None: neither run lists its
    /// GPUs (hand-built records), so indices are taken as they are.
    pairs: Option<Vec<Renumbered>>,
}

/// A GPU found in both runs, and its CUDA index in each.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Renumbered {
    /// CUDA index in the old run.
    pub old: usize,
    /// CUDA index in the new run.
    pub new: usize,
    /// How it was recognised: "uuid", "serial" or "bus id".
    pub matched_by: String,
}

impl GpuMap {
    /// Match the GPUs of two inventories by identity.
    pub fn by_identity(old: &Inventory, new: &Inventory) -> GpuMap {
        GpuMap::of_matches(old, new, &match_gpus(&old.gpus, &new.gpus))
    }

    /// The map of GPUs already matched by [`match_gpus`] (indices into the two GPU lists).
    fn of_matches(old: &Inventory, new: &Inventory, matched: &[(usize, usize, &str)]) -> GpuMap {
        if old.gpus.is_empty() && new.gpus.is_empty() {
            return GpuMap::default();
        }
        GpuMap {
            pairs: Some(
                matched
                    .iter()
                    .map(|&(i, j, how)| Renumbered {
                        old: old.gpus[i].index,
                        new: new.gpus[j].index,
                        matched_by: how.into(),
                    })
                    .collect(),
            ),
        }
    }

    /// The new index of the old run's GPU `old`; None when the new run does not have it.
    pub fn new_index(&self, old: usize) -> Option<usize> {
        match &self.pairs {
            None => Some(old),
            Some(p) => p.iter().find(|m| m.old == old).map(|m| m.new),
        }
    }

    /// Every GPU found in both runs (none when neither run lists its GPUs).
    pub fn matched(&self) -> &[Renumbered] {
        self.pairs.as_deref().unwrap_or_default()
    }

    /// The GPUs found in both runs under another CUDA index.
    pub fn renumbered(&self) -> Vec<Renumbered> {
        self.matched()
            .iter()
            .filter(|r| r.old != r.new)
            .cloned()
            .collect()
    }

    /// An old run's subject in the new numbering; None when a GPU of it is not in the new run.
    pub fn subject(&self, s: &Subject) -> Option<Subject> {
        let map = |g: Option<usize>| match g {
            None => Some(None),
            Some(g) => self.new_index(g).map(Some),
        };
        let mut gpus = Vec::with_capacity(s.gpus.len());
        for g in &s.gpus {
            gpus.push(self.new_index(*g)?);
        }
        gpus.sort_unstable();
        let (mut gpu, mut peer) = (map(s.gpu)?, map(s.peer)?);
        // A pair without direction is named lower index first, in either numbering.
        if let (Some(a), Some(b), Some(_)) = (gpu, peer, s.pairing) {
            (gpu, peer) = (Some(a.min(b)), Some(a.max(b)));
        }
        Some(Subject {
            gpu,
            peer,
            gpus,
            ..s.clone()
        })
    }
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
    /// The finding subject for people, in the new run's numbering ("GPU 2 link 7"); a subject
    /// with a GPU the new run does not have is in the old numbering, marked so.
    pub subject: Option<String>,
    /// The same subject as fields (in the new numbering where it has one).
    pub about: Option<Subject>,
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
            verdict: ev.assess().label().to_string(),
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
    /// GPUs found in both runs under another CUDA index. Metrics, NVLink pairs and verdicts
    /// are compared GPU by GPU (by identity) and named in the new run's numbering.
    pub renumbered: Vec<Renumbered>,
    pub hardware: Vec<HardwareChange>,
    /// Metrics worse than the old run by more than the tolerance, by check, worst first.
    pub regressions: Vec<MetricChange>,
    /// Metrics better than the old run by more than the tolerance, by check, best first.
    pub improvements: Vec<MetricChange>,
    /// Metrics compared (found in both runs, with a direction).
    pub metrics_compared: usize,
    /// Checks whose figures were measured under other conditions in the two runs (another
    /// operand range, other NCCL settings): their metrics are not compared.
    pub not_compared: Vec<NotCompared>,
    pub verdicts: Vec<VerdictChange>,
    /// The old run passed and the new one did not (PARTIAL, INCOMPLETE, NOTHING JUDGED as much
    /// as FAIL): a regression even where no finding got worse, as when a reading went missing.
    pub run_verdict_worse: bool,
    /// Something regressed: a metric, a verdict, the run's verdict, or the hardware (fewer GPUs
    /// or links).
    pub regressed: bool,
}

/// Compare `new` with `old`. `tolerance_pct`: how much worse a metric may get, percent.
pub fn compare(old: &Evidence, new: &Evidence, tolerance_pct: f64) -> Diff {
    let gpus = GpuMap::by_identity(&old.node, &new.node);
    let changes = metric_changes(&old.checks, &new.checks, &gpus);
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
    let verdicts = verdict_changes(&old.checks, &new.checks, &gpus);
    let renumbered = gpus.renumbered();
    let run_verdict_worse = old.assess() == Verdict::Pass && new.assess() != Verdict::Pass;
    let regressed = !regressions.is_empty()
        || verdicts.iter().any(|v| v.worse)
        || run_verdict_worse
        || hardware.iter().any(|h| h.worse);
    Diff {
        old: Side::of(old),
        new: Side::of(new),
        simulated: old.simulated || new.simulated,
        tolerance_pct,
        renumbered,
        hardware,
        regressions,
        improvements,
        metrics_compared,
        not_compared: condition_changes(&old.checks, &new.checks),
        verdicts,
        run_verdict_worse,
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
        // Fewer where both are known; a count not known is a change only.
        old.nvswitches
            .zip(new.nvswitches)
            .is_some_and(|(o, n)| n < o),
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
        // A name or size one run did not read is shown so, never as a change of hardware.
        use crate::inventory::Reading;
        let read = |g: &crate::inventory::Gpu, r: Reading, text: String| match g.gives(r) {
            true => text,
            false => "not read".to_string(),
        };
        push(
            who.clone(),
            "model",
            read(o, Reading::Model, o.name.clone()),
            read(n, Reading::Model, n.name.clone()),
            false,
        );
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
        let both = o.gives(Reading::Memory) && n.gives(Reading::Memory);
        push(
            who.clone(),
            "memory",
            read(
                o,
                Reading::Memory,
                crate::units::format_bytes(o.memory_bytes),
            ),
            read(
                n,
                Reading::Memory,
                crate::units::format_bytes(n.memory_bytes),
            ),
            both && n.memory_bytes < o.memory_bytes,
        );
        // Modes that decide whether the GPU can be measured whole, where both runs read them
        // (evidence older than the reading, or a driver that did not answer, says nothing).
        if let (Some(a), Some(b)) = (o.mig_enabled, n.mig_enabled) {
            let on_off = |x: bool| if x { "on" } else { "off" }.to_string();
            // Shown only where it changed: then worse exactly when it is now on.
            push(who.clone(), "mig mode", on_off(a), on_off(b), b);
        }
        if let (Some(a), Some(b)) = (o.compute_mode, n.compute_mode) {
            use crate::inventory::ComputeMode::Prohibited;
            push(
                who.clone(),
                "compute mode",
                a.label().into(),
                b.label().into(),
                b == Prohibited,
            );
        }
        // Slower only when both readings are what the link trained at, not an idle link.
        let slower = match (o.pcie.trained(), n.pcie.trained()) {
            (Some(a), Some(b)) if a.certain && b.certain => b.gen < a.gen || b.width < a.width,
            (Some(_), None) => true,
            _ => false,
        };
        push(
            who,
            "pcie link",
            o.pcie.trained_label(),
            n.pcie.trained_label(),
            slower,
        );
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
    // NVLink pairs of the same two GPUs, by identity, named in the new numbering.
    let gpus = GpuMap::of_matches(old, new, &matched);
    let unordered = |a: usize, b: usize| (a.min(b), a.max(b));
    for np in &new.pairs {
        let here = unordered(np.a, np.b);
        let same = |p: &&crate::inventory::GpuPair| {
            gpus.new_index(p.a)
                .zip(gpus.new_index(p.b))
                .is_some_and(|(a, b)| unordered(a, b) == here)
        };
        if let Some(op) = old.pairs.iter().find(same) {
            let was = if unordered(op.a, op.b) == here {
                String::new()
            } else {
                format!(" (was GPU {} <-> GPU {})", op.a, op.b)
            };
            push(
                format!("GPU {} <-> GPU {}{was}", np.a, np.b),
                "nvlink",
                old.pair_label(op.a, op.b),
                new.pair_label(np.a, np.b),
                // Fewer links is worse where both counts are known; one not known is a change
                // only (the run that could not read it says so itself).
                np.nvlinks < op.nvlinks
                    && old.links_known(op.a, op.b)
                    && new.links_known(np.a, np.b),
            );
        }
    }
    out
}

/// Statuses that changed, per check and per finding (check, subject, metric); a key found
/// several times counts with its worst status. Worse means a higher severity, a check or
/// finding that is gone counting as skipped. The old run's finding subjects ("GPU 2 link 7")
/// are read in the new numbering through `gpus`.
pub fn verdict_changes(
    old: &[CheckRecord],
    new: &[CheckRecord],
    gpus: &GpuMap,
) -> Vec<VerdictChange> {
    /// A finding subject, and whether it is still in the old run's numbering (a GPU the new run
    /// does not have): such a subject matches nothing of the new run.
    type About = (Subject, bool);
    type Key = (String, Option<About>, Option<String>);
    /// The statuses of judgements, and the keys of information.
    fn statuses(
        checks: &[CheckRecord],
        subject: &dyn Fn(&Subject) -> About,
    ) -> (BTreeMap<Key, Status>, std::collections::BTreeSet<Key>) {
        let mut m: BTreeMap<Key, Status> = BTreeMap::new();
        let mut info = std::collections::BTreeSet::new();
        for c in checks {
            m.insert((c.id.clone(), None, None), c.status);
            for f in &c.findings {
                let k = (c.id.clone(), Some(subject(&f.subject)), f.metric.clone());
                // Information is not a judgement: its status says nothing, so it cannot change.
                if f.info {
                    info.insert(k);
                    continue;
                }
                let e = m.entry(k).or_insert(f.status);
                *e = (*e).max(f.status);
            }
        }
        (m, info)
    }
    let ((o, o_info), (n, n_info)) = (
        statuses(old, &|s| {
            gpus.subject(s)
                .map_or_else(|| (s.clone(), true), |s| (s, false))
        }),
        statuses(new, &|s| (s.clone(), false)),
    );
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
            // The same finding judged in one run and information in the other (a newer nodecert
            // that no longer counts "any mode" as a judgement): nothing about the node changed.
            // A note that became a failing judgement is still a change.
            let noted = (a.is_none() && o_info.contains(k) && rank(b) <= Status::Pass)
                || (b.is_none() && n_info.contains(k));
            if a == b || noted {
                continue;
            }
            out.push(VerdictChange {
                check: k.0.clone(),
                subject: k.1.as_ref().map(|(s, old)| {
                    if *old {
                        format!("{} (old numbering)", s.describe())
                    } else {
                        s.describe()
                    }
                }),
                about: k.1.as_ref().map(|(s, _)| s.clone()),
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
            coverage: None,
            started_at: Utc::now(),
            duration_s: 0.0,
            remeasure: None,
            unjudged: None,
        }
    }

    /// A model or memory size one run did not read is shown as not read, never a change of
    /// hardware for the worse ("140 GiB -> 0 B").
    #[test]
    fn a_model_or_memory_not_read_is_not_a_hardware_change_for_the_worse() {
        use crate::inventory::Reading;
        let old = crate::testutil::simulated("h200-vm-1", &[]);
        let mut new = old.clone();
        crate::backend::sim::hide_for_tests(&mut new.node.gpus[0], Reading::Memory);
        crate::backend::sim::hide_for_tests(&mut new.node.gpus[0], Reading::Model);
        let d = compare(&old, &new, 5.0);
        let row = |what: &str| d.hardware.iter().find(|h| h.what == what).cloned();
        let memory = row("memory").expect("memory shown");
        assert_eq!((memory.new.as_str(), memory.worse), ("not read", false));
        let model = row("model").expect("model shown");
        assert_eq!((model.new.as_str(), model.worse), ("not read", false));
        assert!(!d.hardware.iter().any(|h| h.worse), "{:#?}", d.hardware);
        // Read on both sides and smaller: worse, as before.
        let mut less = old.clone();
        less.node.gpus[0].memory_bytes /= 2;
        let d = compare(&old, &less, 5.0);
        assert!(d.hardware.iter().any(|h| h.what == "memory" && h.worse));
    }

    fn finding(status: Status, subject: &str, metric: &str) -> Finding {
        Finding {
            status,
            subject: Subject::from_legacy_text(subject),
            found: String::new(),
            expected: String::new(),
            reason: String::new(),
            metric: Some(metric.into()),
            info: false,
            limit: None,
        }
    }

    /// Whether a suite accepted a setting changes how a figure is judged, not what was
    /// measured: the two runs are compared.
    #[test]
    fn a_setting_accepted_or_not_is_the_same_condition() {
        use crate::evidence::{Fact, FactValue, Subject};
        let with = |name: &str| {
            let mut c = crate::testutil::simulated("h200-vm-1", &[])
                .check("collective.all_reduce")
                .unwrap()
                .clone();
            c.facts.push(Fact::new(
                name,
                Subject::node(),
                FactValue::Text("NCCL_TOPO_FILE=/t.xml".into()),
            ));
            c
        };
        let (a, b) = (
            with(crate::checks::nccl_env::FACT),
            with(crate::checks::nccl_env::ACCEPTED),
        );
        assert_eq!(conditions(&a), conditions(&b));
        assert!(condition_changes(std::slice::from_ref(&a), &[b]).is_empty());
        // Other nodes' settings are conditions too, without the nodes' names.
        let peers = |name: &str, on: &str| {
            let mut c = with(name);
            c.facts.last_mut().unwrap().subject = Subject::node_named(on);
            c
        };
        let (p, q) = (
            peers(crate::checks::nccl_env::PEERS, "n3"),
            peers(crate::checks::nccl_env::PEERS_ACCEPTED, "n7, n8"),
        );
        assert_eq!(conditions(&p), ["nccl_env_peers: NCCL_TOPO_FILE=/t.xml"]);
        assert!(condition_changes(std::slice::from_ref(&p), &[q]).is_empty());
        assert_eq!(condition_changes(&[a], &[p]).len(), 1);
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
        let c = metric_changes(&old, &new, &GpuMap::default());
        assert_eq!(c.len(), 3);
        assert_eq!((c[0].subject.gpu, c[0].worse_pct.round()), (Some(1), 10.0));
        assert_eq!((c[1].subject.gpu, c[1].worse_pct.round()), (Some(0), -10.0));
        assert_eq!(c[2].worse_pct.round(), 25.0);
        assert!(c[0]
            .describe()
            .contains("x bw GPU 1: 100 -> 90.0 GB/s (10.0% worse)"));
    }

    /// A check measured under other conditions (another operand range, an NCCL setting) is
    /// listed as not compared and none of its figures counts, better or worse; the other
    /// checks are compared as ever.
    #[test]
    fn a_check_measured_under_other_conditions_is_not_compared() {
        use crate::evidence::{Fact, FactValue};
        let text = |t: &str| FactValue::Text(t.into());
        let gemm = |r: &str| {
            Fact::new(
                crate::checks::compute::OPERANDS,
                Subject::node(),
                text(&format!("integers -{r}..{r} for bf16")),
            )
        };
        let with = |id: &str, bw: f64, facts: Vec<Fact>| {
            let mut c = check(
                id,
                vec![Metric::new("bw", Subject::gpu(0), "GB/s", vec![bw])],
                vec![],
            );
            c.facts = facts;
            c
        };
        let old = vec![
            with("compute", 100.0, vec![gemm("2")]),
            with("collective.all_reduce", 100.0, vec![]),
            with("p2p", 100.0, vec![]),
        ];
        let setting = Fact::new(
            crate::checks::nccl_env::FACT,
            Subject::node(),
            text("NCCL_ALGO=Ring"),
        );
        let new = vec![
            with("compute", 50.0, vec![gemm("45")]),
            with("collective.all_reduce", 50.0, vec![setting]),
            with("p2p", 50.0, vec![]),
        ];
        let changes = metric_changes(&old, &new, &GpuMap::default());
        assert_eq!(
            changes.iter().map(|c| c.check.as_str()).collect::<Vec<_>>(),
            ["p2p"]
        );
        let not = condition_changes(&old, &new);
        assert_eq!(
            not,
            [
                NotCompared {
                    check: "compute".into(),
                    old: "gemm_operands: integers -2..2 for bf16".into(),
                    new: "gemm_operands: integers -45..45 for bf16".into(),
                },
                NotCompared {
                    check: "collective.all_reduce".into(),
                    old: "none recorded".into(),
                    new: "nccl_env: NCCL_ALGO=Ring".into(),
                },
            ]
        );
        assert_eq!(
            not[1].describe(),
            "collective.all_reduce: measured under other conditions (none recorded -> \
             nccl_env: NCCL_ALGO=Ring); its figures are not compared"
        );
        // The same conditions on both sides: compared.
        assert!(condition_changes(&new, &new).is_empty());
        assert_eq!(metric_changes(&new, &new, &GpuMap::default()).len(), 3);
    }

    /// A pair figure the old run recorded one way only (p2p_bidir, lower index first) matches
    /// the new run's reversed pair; where the old run recorded both ways, each way is its own
    /// figure and the reverse is not borrowed.
    #[test]
    fn a_pair_recorded_one_way_matches_its_reverse_only_then() {
        let bidir = |a, b, v| Metric::new("p2p_bidir", Subject::pair(a, b), "GB/s", vec![v]);
        let one_way = vec![check("p2p", vec![bidir(0, 1, 100.0)], vec![])];
        let new = vec![check("p2p", vec![bidir(1, 0, 50.0)], vec![])];
        let c = metric_changes(&one_way, &new, &GpuMap::default());
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!((c[0].old, c[0].new), (100.0, 50.0));
        let both_ways = vec![check(
            "p2p",
            vec![bidir(0, 1, 100.0), bidir(0, 2, 7.0)],
            vec![],
        )];
        let new = vec![check(
            "p2p",
            vec![bidir(1, 0, 50.0), bidir(2, 0, 7.0)],
            vec![],
        )];
        let mut old = both_ways.clone();
        old[0].metrics.push(bidir(1, 0, 60.0));
        let c = metric_changes(&old, &new, &GpuMap::default());
        // (1, 0) is the old run's own (1, 0), not its (0, 1); (2, 0) borrows (0, 2).
        assert_eq!(
            c.iter().map(|x| (x.old, x.new)).collect::<Vec<_>>(),
            [(60.0, 50.0), (7.0, 7.0)]
        );
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
        let v = verdict_changes(&old, &new, &GpuMap::default());
        let text: Vec<String> = v.iter().map(VerdictChange::describe).collect();
        assert_eq!(
            text,
            [
                "p2p: PASS -> FAIL",
                "p2p GPU 1 -> GPU 4 [p2p_read]: PASS -> FAIL"
            ]
        );
        assert!(v.iter().all(|c| c.worse));
        assert!(verdict_changes(&new, &old, &GpuMap::default())
            .iter()
            .all(|c| !c.worse));
        // Information that appears (a figure shown for its own sake) is no change of verdict.
        let mut with_info = old.clone();
        with_info[0]
            .findings
            .push(finding(Status::Pass, "GPU 0 -> GPU 1", "busbw_no_nvls").informational());
        assert!(verdict_changes(&old, &with_info, &GpuMap::default()).is_empty());
        with_info[0].findings[2].info = false;
        assert_eq!(
            verdict_changes(&old, &with_info, &GpuMap::default()).len(),
            1
        );
        // A judgement that a newer nodecert makes a note (the same finding, now information):
        // no change either way, while the same finding gone is one.
        let mut noted = old.clone();
        noted[0].findings[1].info = true;
        assert!(verdict_changes(&old, &noted, &GpuMap::default()).is_empty());
        assert!(verdict_changes(&noted, &old, &GpuMap::default()).is_empty());
        let mut failing = old.clone();
        failing[0].findings[1].status = Status::Fail;
        failing[0].status = Status::Fail;
        assert_eq!(
            verdict_changes(&noted, &failing, &GpuMap::default())
                .iter()
                .filter(|c| c.worse)
                .count(),
            2,
            "the check and the finding that now fails"
        );
        let mut gone = old.clone();
        gone[0].findings.pop();
        assert_eq!(
            verdict_changes(&old, &gone, &GpuMap::default())
                .iter()
                .map(VerdictChange::describe)
                .collect::<Vec<_>>(),
            ["p2p GPU 1 -> GPU 4 [p2p_read]: PASS -> absent"]
        );
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

    /// `ev` as the same node would report it with CUDA numbering changed: old GPU i is new
    /// GPU `to[i]`; every index (GPUs, NVLink pairs, metric subjects, finding subjects) moves.
    fn renumber(ev: &Evidence, to: &[usize]) -> Evidence {
        let mut ev = ev.clone();
        let inv = &mut ev.node;
        for g in &mut inv.gpus {
            g.index = to[g.index];
        }
        inv.gpus.sort_by_key(|g| g.index);
        for p in &mut inv.pairs {
            let (a, b) = (to[p.a], to[p.b]);
            (p.a, p.b) = (a.min(b), a.max(b));
        }
        inv.pairs.sort_by_key(|p| (p.a, p.b));
        let text = |s: &str| {
            let mut out = String::new();
            let mut rest = s;
            while let Some(at) = rest.find("GPU ") {
                let d = rest.as_bytes().get(at + 4).copied();
                out.push_str(&rest[..at + 4]);
                rest = &rest[at + 4..];
                if let Some(d @ b'0'..=b'9') = d {
                    out.push_str(&to[(d - b'0') as usize].to_string());
                    rest = &rest[1..];
                }
            }
            out + rest
        };
        for c in &mut ev.checks {
            for m in &mut c.metrics {
                m.subject.gpu = m.subject.gpu.map(|g| to[g]);
                m.subject.peer = m.subject.peer.map(|g| to[g]);
                // An unordered pair is recorded lower index first, as a new run would.
                if let (Some(a), Some(b)) = (m.subject.gpu, m.subject.peer) {
                    if m.name == "p2p_bidir" && a > b {
                        (m.subject.gpu, m.subject.peer) = (Some(b), Some(a));
                    }
                }
            }
            for f in &mut c.findings {
                let s = &mut f.subject;
                s.gpu = s.gpu.map(|g| to[g]);
                s.peer = s.peer.map(|g| to[g]);
                for g in &mut s.gpus {
                    *g = to[*g];
                }
                s.gpus.sort_unstable();
                // A pair without direction is named lower index first, as a new run would.
                if let (Some(a), Some(b), Some(_)) = (s.gpu, s.peer, s.pairing) {
                    (s.gpu, s.peer) = (Some(a.min(b)), Some(a.max(b)));
                }
                f.reason = text(&f.reason);
            }
        }
        ev
    }

    #[test]
    fn renumbered_gpus_are_compared_by_identity() {
        // GPU 2's links to GPU 5 are down and GPU 1 -> GPU 4 is slow; then CUDA numbering
        // rotates by one (old GPU i is new GPU i+1): the same node, nothing got worse.
        let old = crate::testutil::simulated(
            "h100-sxm-8",
            &["nvlink-down:gpu=2,peer=5", "slow-gpu-pair:gpu=1,peer=4"],
        );
        let to: Vec<usize> = (0..8).map(|i| (i + 1) % 8).collect();
        let new = renumber(&old, &to);
        let d = compare(&old, &new, 5.0);
        assert!(d.regressions.is_empty(), "{:?}", d.regressions);
        assert!(d.improvements.is_empty(), "{:?}", d.improvements);
        assert!(d.verdicts.is_empty(), "{:?}", d.verdicts);
        let directional = old
            .checks
            .iter()
            .flat_map(|c| &c.metrics)
            // A zero has no percentage change: e.g. an all_gather too small to give every rank
            // a whole 16-byte block moves nothing (as in nccl-tests), so its bandwidth is 0.
            .filter(|m| direction(&m.name, &m.unit).is_some() && m.median != 0.0)
            .count();
        assert_eq!(d.metrics_compared, directional, "every metric found again");
        assert!(
            d.hardware.iter().all(|h| h.what == "cuda index"),
            "{:?}",
            d.hardware
        );
        assert_eq!(d.hardware.len(), 8);
        assert_eq!(d.renumbered.len(), 8);
        assert!(d
            .renumbered
            .iter()
            .all(|r| r.new == (r.old + 1) % 8 && r.matched_by == "uuid"));
        assert!(!d.regressed);

        // From a healthy run to the faulty one, renumbered: the links lost and the slow pair
        // are named in the new numbering, with the old one beside.
        let healthy = crate::testutil::simulated("h100-sxm-8", &[]);
        let d = compare(&renumber(&healthy, &to), &old, 5.0);
        let nv: Vec<&HardwareChange> = d.hardware.iter().filter(|h| h.what == "nvlink").collect();
        // Behind NVSwitch, GPU 2 lost a link into the fabric: each of its 7 pairs is NV17.
        assert_eq!(nv.len(), 7, "{nv:?}");
        assert!(nv
            .iter()
            .all(|h| h.subject.starts_with("GPU 2 <-> ") || h.subject.contains(" <-> GPU 2 ")));
        assert!(nv.iter().all(|h| h.worse && h.new == "NV17"));
        assert!(nv
            .iter()
            .any(|h| h.subject == "GPU 2 <-> GPU 5 (was GPU 3 <-> GPU 6)"));
        // A GPU whose link state the new run could not read: its pairs' links are not known,
        // a change ("?") but not a loss of links.
        let mut unread = healthy.node.clone();
        unread.gpus[6]
            .unavailable
            .push(crate::inventory::Reading::NvlinkState);
        for p in unread.pairs.iter_mut().filter(|p| p.a == 6 || p.b == 6) {
            p.nvlinks = 0;
        }
        let nv: Vec<HardwareChange> = hardware_changes(&healthy.node, &unread)
            .into_iter()
            .filter(|h| h.what == "nvlink")
            .collect();
        assert_eq!(nv.len(), 7, "{nv:?}");
        assert!(nv.iter().all(|h| h.new == "?" && !h.worse), "{nv:?}");
        unread.nvswitches = None;
        let sw: Vec<HardwareChange> = hardware_changes(&healthy.node, &unread)
            .into_iter()
            .filter(|h| h.what == "nvswitches")
            .collect();
        assert_eq!(
            (sw.len(), sw[0].new.as_str(), sw[0].worse),
            (1, "n/a", false)
        );
        let mut fewer = healthy.node.clone();
        fewer.nvswitches = Some(3);
        assert!(hardware_changes(&healthy.node, &fewer)
            .iter()
            .any(|h| h.what == "nvswitches" && h.worse));
        let r = d
            .regressions
            .iter()
            .find(|c| c.metric == "p2p_read" && c.subject == Subject::pair(1, 4))
            .expect("the slow pair regressed");
        assert_eq!(r.old_subject_text.as_deref(), Some("GPU 2 -> GPU 5"));
        assert!(r
            .describe()
            .contains("GPU 1 -> GPU 4 (was GPU 2 -> GPU 5): "));
    }

    #[test]
    fn old_text_in_the_new_numbering() {
        let gpu = |index: usize, uuid: &str| Gpu {
            index,
            uuid: uuid.into(),
            pci_bus_id: format!("0000:{index}0:00.0"),
            ..Default::default()
        };
        let inv = |gpus: Vec<Gpu>| Inventory {
            gpus,
            ..Default::default()
        };
        let old = inv(vec![gpu(0, "a"), gpu(1, "b"), gpu(2, "c")]);
        let new = inv(vec![gpu(0, "b"), gpu(1, "a")]);
        let m = GpuMap::by_identity(&old, &new);
        assert_eq!(m.subject(&Subject::pair(0, 1)), Some(Subject::pair(1, 0)));
        assert_eq!(m.subject(&Subject::link(1, 7)), Some(Subject::link(0, 7)));
        // A subject with a GPU the new run does not have has no new numbering.
        assert_eq!(m.subject(&Subject::between(1, 2)), None);
        assert_eq!(m.subject(&Subject::group(&[0, 2])), None);
        // A group is renumbered and kept in order.
        assert_eq!(
            m.subject(&Subject::group(&[0, 1])),
            Some(Subject::group(&[0, 1]))
        );
        assert_eq!(m.subject(&Subject::gpu(2)), None);
        assert_eq!(m.subject(&Subject::size(8)), Some(Subject::size(8)));
        let op = Subject::op_size(crate::suite::CollectiveOp::AllReduce, 8);
        assert_eq!(m.subject(&op), Some(op.clone()));
        assert_eq!(
            GpuMap::default().subject(&Subject::gpu(2)),
            Some(Subject::gpu(2))
        );
    }
}

#[cfg(test)]
mod pcie_tests {
    use super::*;
    use crate::testutil::simulated;

    fn pcie_change<'a>(changes: &'a [HardwareChange], gpu: &str) -> Option<&'a HardwareChange> {
        changes
            .iter()
            .find(|c| c.what == "pcie link" && c.subject == gpu)
    }

    /// The same figures, but the new run left a reading unjudged: no finding got worse, and
    /// still the run went from PASS to PARTIAL, which is a regression (and the reverse is not).
    #[test]
    fn a_run_that_passed_and_now_does_not_has_regressed() {
        let old = simulated("h200-vm-1", &[]);
        let mut new = old.clone();
        let health = new.checks.iter_mut().find(|c| c.id == "health").unwrap();
        let c = health.coverage.get_or_insert(crate::evidence::Coverage {
            available: 8,
            total: 8,
        });
        c.available = c.total - 1;
        assert_eq!(new.assess(), Verdict::Partial);
        let d = compare(&old, &new, 5.0);
        assert!(d.regressions.is_empty() && d.verdicts.iter().all(|v| !v.worse));
        assert!(d.run_verdict_worse && d.regressed);
        assert_eq!(
            (d.old.verdict.as_str(), d.new.verdict.as_str()),
            ("PASS", "PARTIAL")
        );
        let back = compare(&new, &old, 5.0);
        assert!(!back.run_verdict_worse && !back.regressed);
        assert!(!compare(&old, &old, 5.0).regressed);
        // A finding worse alone (a warning where there was a pass; the run still passes) is
        // a regression too, with no metric and no hardware worse.
        let mut warned = old.clone();
        let f = warned
            .checks
            .iter_mut()
            .flat_map(|c| &mut c.findings)
            .find(|f| f.status == Status::Pass && !f.info)
            .unwrap();
        f.status = Status::Warn;
        assert_eq!(warned.assess(), Verdict::Pass);
        let d = compare(&old, &warned, 5.0);
        assert!(d.regressions.is_empty() && d.hardware.iter().all(|h| !h.worse));
        assert!(!d.run_verdict_worse && d.verdicts.iter().any(|v| v.worse));
        assert!(d.regressed);
    }

    /// MIG turned on, or a GPU made Prohibited, is a change for the worse; a compute mode that
    /// changed otherwise is shown; a mode one run did not read is not a change.
    #[test]
    fn gpu_modes_that_changed_are_shown_and_judged() {
        use crate::inventory::ComputeMode as M;
        let old = simulated("h100-sxm-8", &[]).node;
        let mut new = old.clone();
        new.gpus[2].mig_enabled = Some(true);
        new.gpus[4].compute_mode = Some(M::Prohibited);
        new.gpus[5].compute_mode = Some(M::ExclusiveProcess);
        new.gpus[6].compute_mode = None;
        new.gpus[7].mig_enabled = None;
        let got: Vec<(String, String, String, String, bool)> = hardware_changes(&old, &new)
            .into_iter()
            .map(|c| (c.subject, c.what, c.old, c.new, c.worse))
            .collect();
        let c = |g: &str, w: &str, o: &str, n: &str, worse| {
            (
                g.to_string(),
                w.to_string(),
                o.to_string(),
                n.to_string(),
                worse,
            )
        };
        assert_eq!(
            got,
            [
                c("GPU 2", "mig mode", "off", "on", true),
                c("GPU 4", "compute mode", "Default", "Prohibited", true),
                c(
                    "GPU 5",
                    "compute mode",
                    "Default",
                    "Exclusive_Process",
                    false
                ),
            ]
        );
        // Back again: shown, better.
        let back = hardware_changes(&new, &old);
        assert_eq!(back.len(), 3);
        assert!(back.iter().all(|c| !c.worse), "{back:?}");
    }

    #[test]
    fn a_link_that_trained_lower_is_worse_but_an_idle_one_is_not() {
        let old = simulated("h100-sxm-8", &[]).node;
        let new = simulated("h100-sxm-8", &["pcie-downtrained:gpu=3,gen=4"]).node;
        let changes = hardware_changes(&old, &new);
        let c = pcie_change(&changes, "GPU 3").expect("a pcie change");
        assert!(c.worse, "{c:?}");
        assert_eq!((c.old.as_str(), c.new.as_str()), ("Gen5 x16", "Gen4 x16"));

        // The same link read only at rest (no CUDA to load it): shown as such, not called worse.
        let mut idle = old.clone();
        idle.gpus[3].pcie.gen_loaded = None;
        idle.gpus[3].pcie.width_loaded = None;
        let changes = hardware_changes(&old, &idle);
        let c = pcie_change(&changes, "GPU 3").expect("a pcie change");
        assert!(!c.worse, "{c:?}");
        assert_eq!(c.new, "Gen1 x16 at rest");
    }
}
