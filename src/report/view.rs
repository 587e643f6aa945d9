//! The report's view of the evidence: tables ready for templates. Pure data, derived only from
//! the evidence.

use crate::checks::judge::fmt_num;
use crate::evidence::{median, CheckRecord, Evidence, FactValue, Status, Subject, Verdict};
use crate::inventory::Reading;
use crate::report::svg::{self, AxisFormat, CellStatus, HeatCell, Heatmap, LineChart, Series};
use crate::suite::{CollectiveCheck, CollectiveOp};
use crate::units::format_bytes;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct View {
    pub simulated: bool,
    pub verdict: String,
    pub verdict_class: String,
    /// What the run left undone ("incomplete: ... never ran: training"), when it did.
    pub verdict_note: Option<String>,
    /// Promised checks that left no record.
    pub never_ran: Vec<String>,
    pub node_summary: String,
    pub rows: Vec<Row>,
    pub counts: Counts,
    pub topology: Topology,
    pub host: Vec<HostRow>,
    /// Each GPU's GEMM rate per precision, when the compute check measured any.
    pub compute: Option<ComputeTable>,
    pub pairs: Vec<PairRow>,
    /// Peer read bandwidth, rows = source GPU, columns = destination (GB/s).
    pub p2p_read: Option<Matrix>,
    /// Both directions at once, per pair, shown symmetric (GB/s).
    pub p2p_bidir: Option<Matrix>,
    pub collectives: Vec<CollectiveTable>,
    pub health: Vec<HealthRow>,
    pub training: Option<TrainingView>,
    /// What bounds each way of spreading the training run over the GPUs, predicted from the
    /// run's measured parts (`training::fit`).
    pub fit: Option<FitView>,
    /// The training run partitioned every way the check compared, measured.
    pub partitions: Option<crate::report::partitions::PartitionView>,
    pub problems: Vec<Problem>,
    /// Checks measured more than once under the re-measure policy, attempt by attempt.
    pub remeasured: Vec<crate::report::remeasured::RemeasuredCheck>,
    /// How each bandwidth figure counts, and its figure as nvbandwidth or nccl-tests count it.
    pub conventions: Vec<crate::report::conventions::ConventionRow>,
    pub started: String,
    pub finished: String,
    pub duration: String,
}

#[derive(Debug, Serialize, Default)]
pub struct Counts {
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
    pub skip: usize,
    pub error: usize,
}

#[derive(Debug, Serialize)]
pub struct Row {
    pub id: String,
    pub title: String,
    pub status: String,
    pub class: String,
    pub summary: String,
}

#[derive(Debug, Serialize, Default)]
pub struct Topology {
    pub labels: Vec<String>,
    pub rows: Vec<TopoRow>,
    pub mismatches: usize,
    /// Whether any pair was compared with the suite: it states the links of some pair, and the
    /// topology check ran. Without, "every pair is linked as the suite expects" says nothing.
    /// False too where some pair whose links the suite states is not known (`unknown`).
    pub compared: bool,
    /// Pairs whose links the suite states and that are not known: a GPU of each could not
    /// have its NVLink state read (not available here, never "as expected").
    pub unknown: usize,
    /// Where `unknown`: whether the other pairs were compared, and so are linked as expected
    /// where there is no mismatch.
    pub others_compared: bool,
    /// One line per mismatching pair: "GPU1 <-> GPU4: found NV12, expected NV18".
    pub mismatch_list: Vec<String>,
    /// The RDMA NICs, as columns after the GPUs' (empty when the NICs were not read).
    pub nic_labels: Vec<String>,
    /// One row per NIC: its relation to each GPU in `cells`, itself in `nic_cells`, its port
    /// state and rate in `pcie`.
    pub nic_rows: Vec<TopoRow>,
    /// One line per GPU whose nearest NIC is farther than the suite's `gpu_nic_path`:
    /// "GPU6 -> mlx5_4: found NODE, expected PXB or nearer".
    pub nic_mismatch_list: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct TopoRow {
    pub label: String,
    pub cells: Vec<TopoCell>,
    /// The row's relation to each NIC, in the order of `Topology::nic_labels`.
    pub nic_cells: Vec<TopoCell>,
    pub pcie: String,
    pub numa: String,
    pub cpus: String,
}

#[derive(Debug, Serialize)]
pub struct TopoCell {
    pub found: String,
    pub expected: String,
    pub mismatch: bool,
}

/// One figure in a table, with its status for colouring.
#[derive(Debug, Serialize, Clone)]
pub struct Cell {
    pub text: String,
    pub class: String,
}

impl Cell {
    /// "-", unstyled: no figure.
    pub(crate) fn empty() -> Self {
        Cell {
            text: "-".into(),
            class: String::new(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct HostRow {
    pub gpu: String,
    pub h2d: Cell,
    pub d2h: Cell,
    pub bidir: Cell,
    pub all_gpus_h2d: Cell,
    pub device_copy: Cell,
}

/// The compute check's figures: a column per precision, a row per GPU.
#[derive(Debug, Serialize)]
pub struct ComputeTable {
    /// m = n = k of the GEMMs.
    pub size: u64,
    /// Column heads: "fp32", "tf32", "bf16", "fp8".
    pub precisions: Vec<String>,
    pub rows: Vec<ComputeRow>,
    /// "bf16 GEMMs on every GPU at once for 30 s", when the suite asked for a sustained load
    /// and it ran.
    pub sustained: Option<String>,
    pub sustained_rows: Vec<SustainedRowView>,
}

#[derive(Debug, Serialize)]
pub struct SustainedRowView {
    pub gpu: String,
    /// The first and last tenth's rates: "790 -> 552".
    pub rate: Cell,
    /// Lowest and median SM clock, MHz.
    pub clock: String,
    /// Median power over the second half, and the limit: "678 / 700".
    pub power: Cell,
    pub hottest: Cell,
    /// Throttle reasons seen, with how many samples: "hw_thermal_slowdown (36)".
    pub throttle: Cell,
}

#[derive(Debug, Serialize)]
pub struct ComputeRow {
    pub gpu: String,
    /// One per precision; "not available" where the GPU or the backend has no such GEMM,
    /// "could not measure" where its GEMM failed.
    pub cells: Vec<Cell>,
}

/// The compute table of a run, None when the compute check measured nothing.
fn compute_table(ev: &Evidence) -> Option<ComputeTable> {
    use crate::checks::compute::{error_fact, unavailable_fact};
    let rec = ev.check("compute")?;
    let cfg = ev.suite.resolved.checks.compute.as_ref()?;
    if rec.metrics.is_empty() {
        return None;
    }
    let idx = Index::of(rec);
    let rows = ev
        .node
        .gpus
        .iter()
        .map(|g| {
            let s = crate::evidence::Subject::gpu(g.index);
            let cells = cfg
                .precisions
                .iter()
                .map(|p| {
                    if rec.fact(&unavailable_fact(*p), &s).is_some() {
                        Cell {
                            text: "not available".into(),
                            class: String::new(),
                        }
                    } else if rec.metric(p.metric(), &s).is_none()
                        && rec.fact(&error_fact(*p), &s).is_some()
                    {
                        // The error's words are in the check's findings, beside the table.
                        Cell {
                            text: "could not measure".into(),
                            class: class(Status::Error),
                        }
                    } else {
                        cell(Some(&idx), p.metric(), &s, &s, "")
                    }
                })
                .collect();
            ComputeRow {
                gpu: s.describe(),
                cells,
            }
        })
        .collect();
    let (sustained, sustained_rows) = match &cfg.sustained {
        Some(l)
            if rec
                .metrics
                .iter()
                .any(|m| m.name == crate::checks::compute::sustained::RATE) =>
        {
            (
                Some(format!(
                    "{} GEMMs on every GPU at once for {} s, read every {} ms",
                    l.precision, l.seconds, l.sample_ms
                )),
                sustained_rows(ev, rec),
            )
        }
        _ => (None, vec![]),
    };
    Some(ComputeTable {
        size: cfg.size,
        precisions: cfg
            .precisions
            .iter()
            .map(|p| p.name().to_string())
            .collect(),
        rows,
        sustained,
        sustained_rows,
    })
}

/// One row per GPU of the sustained load.
fn sustained_rows(ev: &Evidence, rec: &CheckRecord) -> Vec<SustainedRowView> {
    use crate::checks::compute::{first_and_last_tenth, sustained::*};
    let idx = Index::of(rec);
    ev.node
        .gpus
        .iter()
        .map(|g| {
            let s = crate::evidence::Subject::gpu(g.index);
            let worst = |metric: &str| judged(&idx, metric, &s).0.map(class).unwrap_or_default();
            let m = |name: &str| idx.metric(name, &s);
            let rate = m(RATE)
                .and_then(|r| first_and_last_tenth(&r.samples))
                .map(|(a, b)| format!("{} -> {}", fmt_num(a), fmt_num(b)))
                .unwrap_or_else(|| "-".into());
            let clock = m(CLOCK)
                .map(|c| format!("{} / {}", fmt_num(c.min), fmt_num(c.median)))
                .unwrap_or_else(|| "not read".into());
            let power = match (m(POWER), m(POWER_LIMIT)) {
                (Some(p), Some(l)) => format!(
                    "{} / {}",
                    fmt_num(crate::evidence::median(&p.samples[p.samples.len() / 2..])),
                    fmt_num(l.median)
                ),
                (Some(p), None) => format!("{} / not read", fmt_num(p.median)),
                _ => "not read".into(),
            };
            let hottest = m(TEMPERATURE)
                .map(|t| fmt_num(t.max))
                .unwrap_or_else(|| "not read".into());
            let prefix = throttle_fact("");
            let mut seen: Vec<String> = rec
                .facts
                .iter()
                .filter(|f| f.subject == s && f.name.starts_with(&prefix))
                .map(|f| format!("{} ({})", &f.name[prefix.len()..], f.value.describe()))
                .collect();
            if rec.fact(&unread_fact("throttle"), &s).is_some() {
                seen.push("not read".into());
            }
            SustainedRowView {
                gpu: s.describe(),
                rate: Cell {
                    text: rate,
                    class: worst(RATE),
                },
                clock,
                power: Cell {
                    text: power,
                    class: worst(POWER),
                },
                hottest: Cell {
                    text: hottest,
                    class: worst(TEMPERATURE),
                },
                throttle: Cell {
                    text: if seen.is_empty() {
                        "none".into()
                    } else {
                        seen.join(", ")
                    },
                    class: String::new(),
                },
            }
        })
        .collect()
}

/// A GPU's relation to each NIC; the cell of its nearest fabric NIC is marked when that is
/// farther than the suite's `gpu_nic_path` (the network check's failure, shown in place).
fn nic_cells(ev: &Evidence, g: usize, mismatches: &mut Vec<String>) -> Vec<TopoCell> {
    let Some(f) = &ev.node.fabric else {
        return vec![];
    };
    let expect = &ev.suite.resolved.network;
    let fabric = crate::checks::network::fabric_nics(f, expect);
    let nearest = crate::network::Fabric::nearest(&fabric, g);
    f.nics
        .iter()
        .map(|n| {
            let found = n.path_to(g).map_or("?", |p| p.label()).to_string();
            let (expected, mismatch) = match (expect.gpu_nic_path, nearest) {
                (Some(want), Some((near, path))) if near.name == n.name => {
                    (format!("{} or nearer", want.label()), path > want)
                }
                _ => ("-".to_string(), false),
            };
            if mismatch {
                mismatches.push(format!(
                    "GPU{g} -> {}: found {found}, expected {expected}",
                    n.name
                ));
            }
            TopoCell {
                found,
                expected,
                mismatch,
            }
        })
        .collect()
}

/// One row per NIC: its relation to each of the `gpus` GPUs, itself, its first port.
fn nic_rows(f: &crate::network::Fabric, gpus: usize) -> Vec<TopoRow> {
    let plain = |found: String| TopoCell {
        found,
        expected: "-".into(),
        mismatch: false,
    };
    f.nics
        .iter()
        .map(|n| TopoRow {
            label: n.name.clone(),
            cells: (0..gpus)
                .map(|g| plain(n.path_to(g).map_or("?", |p| p.label()).to_string()))
                .collect(),
            nic_cells: f
                .nics
                .iter()
                .map(|m| {
                    plain(if m.name == n.name {
                        "X".into()
                    } else {
                        String::new()
                    })
                })
                .collect(),
            pcie: n
                .ports
                .first()
                .map(|p| {
                    let rate = p
                        .rate_gbps
                        .map(|r| format!(" {} Gb/s", crate::checks::judge::fmt_num(r)))
                        .unwrap_or_default();
                    format!(
                        "{} {}{rate}",
                        p.link_layer.as_deref().unwrap_or("?"),
                        p.state_text()
                    )
                })
                .unwrap_or_else(|| "no port".into()),
            numa: n
                .numa_node
                .map(|x| x.to_string())
                .unwrap_or_else(|| "N/A".into()),
            cpus: String::new(),
        })
        .collect()
}

/// A GPU-by-GPU matrix of one figure: an inline SVG heatmap for HTML and cells for Markdown.
#[derive(Debug, Serialize)]
pub struct Matrix {
    /// "p2p_read", "p2p_bidir": the metric shown.
    pub metric: String,
    pub title: String,
    /// What the shading compares against, in words: "the suite's floor of 335 GB/s".
    pub reference: String,
    pub labels: Vec<String>,
    pub rows: Vec<MatrixRow>,
    /// Cells marked fail or warn.
    pub failing: usize,
    pub warning: usize,
    /// Inline SVG (trusted: built by `svg::heatmap`, which escapes every string).
    pub svg: String,
}

#[derive(Debug, Serialize)]
pub struct MatrixRow {
    pub label: String,
    pub cells: Vec<Cell>,
}

#[derive(Debug, Serialize)]
pub struct PairRow {
    pub pair: String,
    pub read: Cell,
    pub write: Cell,
    pub bidir: Cell,
    pub latency: Cell,
}

#[derive(Debug, Serialize)]
pub struct CollectiveTable {
    pub op: String,
    pub status: String,
    pub class: String,
    pub ranks: String,
    pub rows: Vec<CollectiveRow>,
    /// The suite's bus-bandwidth floors, in words ("460 GB/s from 8 GiB"), empty when none.
    pub floors: String,
    /// Inline SVG line chart: busbw against message size, floors dashed.
    pub chart: String,
    /// Some size returned wrong data (the chart cannot show that; the table opens).
    pub corrupt: bool,
    /// all_reduce was measured a second time with NVLS forced off: the rows carry that figure
    /// too (`busbw_no_nvls`).
    pub no_nvls: bool,
    /// For all_reduce: how NVLS was measured, or why there is no NVLS figure ("NVLS not
    /// available: GPU 0: fabric manager not running"). Empty for other collectives.
    pub nvls: String,
}

#[derive(Debug, Serialize)]
pub struct CollectiveRow {
    pub size: String,
    pub time_us: String,
    pub algbw: String,
    pub busbw: Cell,
    /// busbw with NVLS forced off (empty where not measured).
    pub busbw_no_nvls: Cell,
    pub wrong: Cell,
}

#[derive(Debug, Serialize)]
pub struct HealthRow {
    pub gpu: String,
    pub name: String,
    pub uuid: String,
    pub serial: String,
    pub ecc: String,
    pub uncorrectable: String,
    pub remap: String,
    pub xids: String,
    pub replays: String,
    pub throttle: String,
    pub temperature: String,
    pub class: String,
}

#[derive(Debug, Serialize)]
pub struct TrainingView {
    /// The precision the large run trained in, and the golden run's ("fp32 (golden run fp32)").
    pub precision: String,
    pub first_loss: String,
    pub last_loss: String,
    pub step_ms: String,
    pub samples_per_s: String,
    pub scaling: String,
    pub comm: String,
    pub losses: Vec<String>,
    /// One row per step of the large run: loss and step time.
    pub steps: Vec<TrainingStep>,
    /// The golden configuration, step by step: the node's loss and the CPU's.
    pub golden: Vec<GoldenStep>,
    /// Steps compared with the golden trajectory.
    pub golden_steps: usize,
    /// Inline SVG line charts.
    pub loss_chart: String,
    pub golden_chart: String,
    pub step_chart: String,
}

/// The workload fit table.
#[derive(Debug, Serialize)]
pub struct FitView {
    /// The measured parts it was predicted from.
    pub basis: String,
    /// Why nothing could be predicted (a part not measured), when so.
    pub missing: Option<String>,
    pub rows: Vec<FitRowView>,
    /// The data-parallel run as the training check measured it, beside its prediction.
    pub measured: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct FitRowView {
    pub method: String,
    pub gpus: String,
    pub step_ms: String,
    pub compute_ms: String,
    pub memory_ms: String,
    pub comm_ms: String,
    pub comm_share: String,
    pub scaling: String,
    pub bound: String,
    pub sentence: String,
}

/// The training check of the run's suite, when it trains.
pub(crate) fn training_config(ev: &Evidence) -> Option<&crate::suite::TrainingCheck> {
    ev.suite
        .resolved
        .checks
        .training
        .as_ref()
        .filter(|t| t.enabled)
}

/// The workload fit of a run whose suite trains: None when it does not.
fn fit_view(ev: &Evidence) -> Option<FitView> {
    use crate::training::fit;
    let cfg = training_config(ev)?;
    let gpus = ev.node.gpus.len();
    let rates = fit::node_rates(ev, cfg.precision);
    let measured = ev.check("training").and_then(|t| {
        let node = crate::evidence::Subject::node();
        let step = t.metric("step_time", &node)?.median;
        let exposed = t.metric("exposed_comm_time", &node).map(|m| m.median);
        Some(match exposed {
            Some(e) if step > 0.0 => format!(
                "Measured by the training run: data-parallel step {} ms, exposed communication {:.0}% of it",
                fmt_num(step),
                100.0 * e / step
            ),
            _ => format!("Measured by the training run: data-parallel step {} ms", fmt_num(step)),
        })
    });
    let rates = match rates {
        Ok(r) => r,
        Err(missing) => {
            return Some(FitView {
                basis: String::new(),
                missing: Some(format!(
                    "Not predicted: this run did not measure {}",
                    missing.join(", ")
                )),
                rows: vec![],
                measured,
            })
        }
    };
    let basis = format!(
        "{} GEMM {} TFLOP/s and device memory {} GB/s (the slowest GPU's), all_reduce over {gpus} GPU{} at {} sizes",
        cfg.precision.name(),
        fmt_num(rates.gemm_tflops),
        fmt_num(rates.memory_gbps),
        if gpus == 1 { "" } else { "s" },
        rates.all_reduce_us.len()
    );
    let rows = fit::analyse(cfg, gpus, &rates)
        .into_iter()
        .map(|r| match r.fit {
            Some(f) => FitRowView {
                method: f.method.clone(),
                gpus: f.gpus.to_string(),
                step_ms: fmt_num(f.step_ms),
                compute_ms: fmt_num(f.compute_ms),
                memory_ms: fmt_num(f.memory_ms),
                comm_ms: fmt_num(f.comm_ms),
                comm_share: format!("{:.0}%", 100.0 * f.comm_share),
                scaling: format!("{:.0}%", 100.0 * f.scaling),
                bound: f.bound.describe().to_string(),
                sentence: f.sentence(),
            },
            None => FitRowView {
                method: r.method.clone(),
                gpus: gpus.to_string(),
                step_ms: "-".into(),
                compute_ms: "-".into(),
                memory_ms: "-".into(),
                comm_ms: "-".into(),
                comm_share: "-".into(),
                scaling: "-".into(),
                bound: "-".into(),
                sentence: format!(
                    "{}: not predicted: {}",
                    r.method,
                    r.not_applicable.unwrap_or_default()
                ),
            },
        })
        .collect();
    Some(FitView {
        basis,
        missing: None,
        rows,
        measured,
    })
}

#[derive(Debug, Serialize)]
pub struct TrainingStep {
    pub step: usize,
    pub loss: String,
    pub step_ms: String,
}

#[derive(Debug, Serialize)]
pub struct GoldenStep {
    pub step: usize,
    pub node: String,
    pub cpu: String,
    /// Relative difference, e.g. "3.1e-7".
    pub rel: String,
}

#[derive(Debug, Serialize)]
pub struct Problem {
    pub check: String,
    pub status: String,
    pub class: String,
    pub subject: String,
    pub found: String,
    pub expected: String,
    pub reason: String,
}

pub fn class(s: Status) -> String {
    match s {
        Status::Pass => "pass",
        Status::Warn => "warn",
        Status::Fail => "fail",
        Status::Skip => "skip",
        Status::Error => "error",
    }
    .into()
}

/// A check record's figures, and its findings on each figure, looked up by metric and subject
/// at once: a page has a cell for every GPU pair, and a scan of every figure and finding for
/// each cell would let evidence of many figures hold `render` for hours.
struct Index<'a> {
    metrics: std::collections::HashMap<(&'a str, &'a Subject), &'a crate::evidence::Metric>,
    findings: std::collections::HashMap<(&'a str, &'a Subject), Vec<&'a crate::evidence::Finding>>,
}

impl<'a> Index<'a> {
    fn of(rec: &'a CheckRecord) -> Index<'a> {
        let mut metrics = std::collections::HashMap::new();
        for m in &rec.metrics {
            // The first, as `CheckRecord::metric` finds it.
            metrics.entry((m.name.as_str(), &m.subject)).or_insert(m);
        }
        let mut findings: std::collections::HashMap<_, Vec<_>> = std::collections::HashMap::new();
        for f in &rec.findings {
            if let Some(name) = f.metric.as_deref() {
                findings.entry((name, &f.subject)).or_default().push(f);
            }
        }
        Index { metrics, findings }
    }

    fn metric(&self, name: &str, subject: &Subject) -> Option<&'a crate::evidence::Metric> {
        self.metrics.get(&(name, subject)).copied()
    }

    /// The findings on metric `name` about `about`, in the record's order.
    fn on(&self, name: &str, about: &Subject) -> Vec<&'a crate::evidence::Finding> {
        self.findings
            .get(&(name, about))
            .cloned()
            .unwrap_or_default()
    }
}

/// A cell for metric `name` about `subject` in the indexed record, coloured by the worst
/// finding on it (findings about `about`: the metric's subject as findings name it).
fn cell(
    idx: Option<&Index>,
    name: &str,
    subject: &crate::evidence::Subject,
    about: &crate::evidence::Subject,
    unit: &str,
) -> Cell {
    let Some(idx) = idx else { return Cell::empty() };
    let Some(m) = idx.metric(name, subject) else {
        return Cell::empty();
    };
    let worst = idx.on(name, about).iter().map(|f| f.status).max();
    Cell {
        text: format!(
            "{}{}",
            fmt_num(m.median),
            if unit.is_empty() {
                String::new()
            } else {
                format!(" {unit}")
            }
        ),
        class: worst.map(class).unwrap_or_default(),
    }
}

pub fn build(ev: &Evidence) -> View {
    let inv = &ev.node;
    let mut counts = Counts::default();
    let rows: Vec<Row> = ev
        .checks
        .iter()
        .map(|c| {
            match c.status {
                Status::Pass => counts.pass += 1,
                Status::Warn => counts.warn += 1,
                Status::Fail => counts.fail += 1,
                Status::Skip => counts.skip += 1,
                Status::Error => counts.error += 1,
            }
            Row {
                id: c.id.clone(),
                title: c.title.clone(),
                status: c.status.label().into(),
                class: class(c.status),
                summary: c.summary.clone(),
            }
        })
        .collect();

    // Topology matrix, expected vs found, like `nvidia-smi topo -m`.
    let topo_exp = &ev.suite.resolved.topology;
    let n = inv.gpus.len();
    let mut topology = Topology {
        labels: (0..n).map(|i| format!("GPU{i}")).collect(),
        ..Default::default()
    };
    let mut compared = false;
    let mut unknown = 0;
    for g in &inv.gpus {
        let cells = (0..n)
            .map(|j| {
                if j == g.index {
                    return TopoCell {
                        found: "X".into(),
                        expected: "X".into(),
                        mismatch: false,
                    };
                }
                let p = inv.pair(g.index, j);
                let found = inv.pair_label(g.index, j);
                // A pair whose links are not known is no mismatch: not available, not wrong.
                let p = p.filter(|_| inv.links_known(g.index, j));
                let want = topo_exp.expected_links(g.index, j);
                let expected = match want {
                    Some(0) => "PCIe".to_string(),
                    Some(k) => format!("NV{k}"),
                    None => "-".into(),
                };
                let mismatch = match (want, p) {
                    (Some(k), Some(p)) => p.nvlinks != k,
                    _ => false,
                };
                if want.is_some() && !inv.links_known(g.index, j) && g.index < j {
                    unknown += 1;
                }
                compared |= want.is_some() && p.is_some();
                TopoCell {
                    found,
                    expected,
                    mismatch,
                }
            })
            .collect::<Vec<_>>();
        topology.mismatches += cells.iter().filter(|c| c.mismatch).count();
        for (j, c) in cells.iter().enumerate() {
            if c.mismatch && g.index < j {
                topology.mismatch_list.push(format!(
                    "GPU{} <-> GPU{j}: found {}, expected {}",
                    g.index, c.found, c.expected
                ));
            }
        }
        let pcie = g.pcie.trained_label();
        let nic_cells = nic_cells(ev, g.index, &mut topology.nic_mismatch_list);
        topology.rows.push(TopoRow {
            label: format!("GPU{}", g.index),
            cells,
            nic_cells,
            pcie,
            numa: g
                .numa_node
                .map(|x| x.to_string())
                .unwrap_or_else(|| "N/A".into()),
            cpus: g.cpu_affinity.clone().unwrap_or_else(|| "N/A".into()),
        });
    }
    // The mismatches count halves: each pair shows twice.
    topology.mismatches /= 2;
    let judged = ev.check("topology").is_some();
    topology.unknown = if judged { unknown } else { 0 };
    topology.others_compared = compared && judged;
    topology.compared = compared && judged && unknown == 0;
    if let Some(f) = &inv.fabric {
        topology.nic_labels = f.nics.iter().map(|n| n.name.clone()).collect();
        topology.nic_rows = nic_rows(f, n);
    }

    let hb_rec = ev.check("host_bandwidth");
    let hb_idx = hb_rec.map(Index::of);
    let hb = hb_idx.as_ref();
    let host = inv
        .gpus
        .iter()
        .map(|g| {
            let s = crate::evidence::Subject::gpu(g.index);
            let t = s.describe();
            HostRow {
                gpu: t.clone(),
                h2d: cell(hb, "h2d", &s, &s, ""),
                d2h: cell(hb, "d2h", &s, &s, ""),
                bidir: cell(hb, "bidir", &s, &s, ""),
                all_gpus_h2d: cell(hb, "all_gpus_h2d", &s, &s, ""),
                device_copy: cell(hb, "device_copy", &s, &s, ""),
            }
        })
        .filter(|r| hb_rec.is_some() && r.h2d.text != "-")
        .collect();

    let (pb_rec, pl_rec) = (ev.check("p2p_bandwidth"), ev.check("p2p_latency"));
    let (pb_idx, pl_idx) = (pb_rec.map(Index::of), pl_rec.map(Index::of));
    let (pb, pl) = (pb_idx.as_ref(), pl_idx.as_ref());
    let mut pairs = Vec::new();
    if pb_rec.is_some_and(|r| !r.metrics.is_empty())
        || pl_rec.is_some_and(|r| !r.metrics.is_empty())
    {
        for (a, b) in inv.ordered_pairs() {
            let s = crate::evidence::Subject::pair(a, b);
            let t = s.describe();
            let bidir = if a < b {
                cell(pb, "p2p_bidir", &s, &s.of_metric("p2p_bidir"), "")
            } else {
                Cell::empty()
            };
            pairs.push(PairRow {
                pair: t.clone(),
                read: cell(pb, "p2p_read", &s, &s, ""),
                write: cell(pb, "p2p_write", &s, &s, ""),
                bidir,
                latency: cell(pl, "latency", &s, &s, ""),
            });
        }
    }

    let collectives = ev
        .checks
        .iter()
        .filter(|c| c.kind == "collective" && !c.metrics.is_empty())
        .map(|c| {
            let idx = Index::of(c);
            let op = c.id.trim_start_matches("collective.").to_string();
            let mut sizes: Vec<u64> = c.metrics.iter().filter_map(|m| m.subject.bytes).collect();
            sizes.sort();
            sizes.dedup();
            let rows: Vec<CollectiveRow> = sizes
                .iter()
                .map(|&s| {
                    let sub = crate::evidence::Subject::size(s);
                    let t = idx
                        .metric("time", &sub)
                        .map(|m| fmt_num(m.median))
                        .unwrap_or_default();
                    let a = idx
                        .metric("algbw", &sub)
                        .map(|m| fmt_num(m.median))
                        .unwrap_or_default();
                    let about = match CollectiveOp::parse(&op) {
                        Some(o) => crate::evidence::Subject::op_size(o, s),
                        None => sub.clone(),
                    };
                    let busbw = cell(Some(&idx), "busbw", &sub, &about, "");
                    let busbw_no_nvls = cell(Some(&idx), "busbw_no_nvls", &sub, &about, "");
                    // Wrong elements as a count, and whether any were wrong; a record that is
                    // not a count (a damaged file) is shown as it is, never as 0.
                    let wrong_of = |name: &str| {
                        c.fact(name, &sub).map(|f| match f.value {
                            FactValue::Elements { wrong, .. } => (wrong.to_string(), wrong > 0),
                            ref other => (other.describe(), true),
                        })
                    };
                    let wrong = match (
                        wrong_of("wrong_elements"),
                        wrong_of("wrong_elements_no_nvls"),
                    ) {
                        (None, None) => Cell::empty(),
                        (w, off) => {
                            let (w, w_bad) = w.unwrap_or_default();
                            let off_bad = off.as_ref().is_some_and(|o| o.1);
                            Cell {
                                class: if w_bad || off_bad {
                                    "fail".into()
                                } else {
                                    String::new()
                                },
                                text: match off {
                                    Some((o, true)) => format!("{w}; {o} with NVLS off"),
                                    _ => w,
                                },
                            }
                        }
                    };
                    // nccl-tests rounds each rank's block down to 16 bytes: say what moved.
                    let moved = c.fact("bytes_moved", &sub).and_then(|f| f.value.count());
                    CollectiveRow {
                        size: match moved {
                            Some(m) => format!("{} ({} moved)", format_bytes(s), format_bytes(m)),
                            None => format_bytes(s),
                        },
                        time_us: t,
                        algbw: a,
                        busbw,
                        busbw_no_nvls,
                        wrong,
                    }
                })
                .collect();
            let ranks = c
                .facts
                .iter()
                .find(|f| f.name == "ranks")
                .map(|f| f.value.describe())
                .unwrap_or_default();
            let floors = CollectiveOp::parse(&op)
                .and_then(|o| ev.suite.resolved.checks.collective.get(&o))
                .map(|cc| CollectiveCheck::floors(&cc.min_busbw_gbps))
                .unwrap_or_default();
            let no_nvls = c.metrics.iter().any(|m| m.name == "busbw_no_nvls");
            // NVLS is a matter of all_reduce over several GPUs only.
            let nvls = if op != "all_reduce" || !ranks.parse::<usize>().is_ok_and(|r| r > 1) {
                String::new()
            } else if no_nvls {
                "Measured twice: as NCCL chooses (NVLS where it can), and with NVLS forced off \
                 (NCCL_NVLS_ENABLE=0)."
                    .into()
            } else {
                use crate::inventory::NvlsAvailability as A;
                let blocked = c
                    .facts
                    .iter()
                    .find(|f| f.name == crate::checks::collective::NO_NVLS_BLOCKED)
                    .map(|f| {
                        format!(
                            "Not measured with NVLS forced off: that sweep runs in a second \
                             process, which the GPUs refuse while nodecert holds them ({}).",
                            f.value.describe()
                        )
                    });
                match ev.node.nvls() {
                    A::Available => blocked.unwrap_or_default(),
                    A::Unknown(why) if blocked.is_some() => format!(
                        "No NVLS figure known: NVLS availability unknown ({why}). {}",
                        blocked.unwrap_or_default()
                    ),
                    A::Unavailable(why) => {
                        format!("No NVLS figure: NVLS not available ({why}); NCCL's figure is without NVLS.")
                    }
                    A::Unknown(why) => format!("No NVLS figure known: NVLS availability unknown ({why})."),
                }
            };
            CollectiveTable {
                no_nvls,
                nvls,
                corrupt: rows.iter().any(|r| r.wrong.class == "fail"),
                chart: collective_chart(&op, &ranks, c, &sizes, &floors),
                floors: floors_text(&floors),
                op,
                status: c.status.label().into(),
                class: class(c.status),
                ranks,
                rows,
            }
        })
        .collect();

    let hc = ev.check("health");
    let health = inv
        .gpus
        .iter()
        .map(|g| {
            let worst = hc
                .map(|h| {
                    h.findings
                        .iter()
                        // The GPU and its links.
                        .filter(|f| f.subject.gpu == Some(g.index) && f.subject.peer.is_none())
                        .map(|f| f.status)
                        .max()
                })
                .unwrap_or(None);
            let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "n/a".into());
            HealthRow {
                gpu: format!("GPU {}", g.index),
                name: g.name.clone(),
                uuid: g.uuid.clone(),
                serial: g.serial.clone().unwrap_or_else(|| "n/a".into()),
                ecc: match g.ecc_enabled {
                    Some(true) => "on".into(),
                    Some(false) => "off".into(),
                    None => "n/a".into(),
                },
                uncorrectable: opt([g.ecc.volatile_uncorrected, g.ecc.sram_uncorrected]
                    .into_iter()
                    .flatten()
                    .max()),
                remap: match &g.remapped_rows {
                    Some(r) if r.failure => "failed".into(),
                    Some(r) if r.pending => "pending".into(),
                    Some(r) => format!("{} corr / {} unc", r.correctable, r.uncorrectable),
                    None => "n/a".into(),
                },
                xids: if g.xids.is_empty() {
                    if g.gives(Reading::Xids) {
                        "none"
                    } else {
                        "n/a"
                    }
                    .into()
                } else {
                    g.xids
                        .iter()
                        .map(|x| x.code.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                },
                replays: opt(g.pcie.replay_counter),
                throttle: if g.throttle_reasons.is_empty() {
                    if g.gives(Reading::ThrottleReasons) {
                        "none"
                    } else {
                        "n/a"
                    }
                    .into()
                } else {
                    g.throttle_reasons.join(", ")
                },
                temperature: g
                    .temperature_c
                    .map(|t| format!("{t:.0} °C"))
                    .unwrap_or_else(|| "n/a".into()),
                class: worst
                    .filter(|s| *s != Status::Pass && *s != Status::Skip)
                    .map(class)
                    .unwrap_or_default(),
            }
        })
        .collect();

    let training = ev
        .check("training")
        .filter(|c| !c.metrics.is_empty())
        .map(|c| {
            // The data-parallel run's figures; a partitioning's are in its own table.
            let get = |n: &str| {
                c.metrics
                    .iter()
                    .find(|m| m.name == n && m.subject.method.is_none())
            };
            let losses = get("loss").map(|m| m.samples.clone()).unwrap_or_default();
            let golden_node = get("golden_node_loss")
                .map(|m| m.samples.clone())
                .unwrap_or_default();
            let golden_cpu = get("golden_cpu_loss")
                .map(|m| m.samples.clone())
                .unwrap_or_default();
            let step_times = get("step_time")
                .map(|m| m.samples.clone())
                .unwrap_or_default();
            let loss_chart = svg::line_chart(&LineChart {
                title: "Training loss per step".into(),
                x_label: "step".into(),
                y_label: "loss".into(),
                series: vec![step_series("loss on this node", &losses)],
                ..Default::default()
            });
            let golden_chart = svg::line_chart(&LineChart {
                title: "Golden configuration: this node against the CPU".into(),
                x_label: "step".into(),
                y_label: "loss".into(),
                series: vec![
                    step_series("loss on this node", &golden_node),
                    Series {
                        dashed: true,
                        ..step_series("CPU golden loss", &golden_cpu)
                    },
                ],
                ..Default::default()
            });
            let step_chart = svg::line_chart(&LineChart {
                title: "Step time".into(),
                x_label: "step".into(),
                y_label: "step time (ms)".into(),
                series: vec![step_series("step time", &step_times)],
                ..Default::default()
            });
            let fmt6 = |v: Option<&f64>| v.map(|v| format!("{v:.6}")).unwrap_or_default();
            let steps = (0..losses.len().max(step_times.len()))
                .map(|i| TrainingStep {
                    step: i + 1,
                    loss: fmt6(losses.get(i)),
                    step_ms: step_times.get(i).map(|v| fmt_num(*v)).unwrap_or_default(),
                })
                .collect();
            let golden = golden_cpu
                .iter()
                .enumerate()
                .map(|(i, cpu)| GoldenStep {
                    step: i + 1,
                    node: fmt6(golden_node.get(i)),
                    cpu: format!("{cpu:.6}"),
                    rel: golden_node
                        .get(i)
                        .map(|n| format!("{:.1e}", (n - cpu).abs() / cpu.abs().max(1e-12)))
                        .unwrap_or_default(),
                })
                .collect::<Vec<_>>();
            let fact = |n: &str| {
                c.facts
                    .iter()
                    .find(|f| f.name == n)
                    .map(|f| f.value.describe())
            };
            let precision = match (fact("precision"), fact("golden_precision")) {
                (Some(p), Some(g)) => format!("{p} (golden run {g})"),
                (Some(p), None) => p,
                (None, _) => "not recorded".into(),
            };
            TrainingView {
                precision,
                first_loss: losses
                    .first()
                    .map(|v| format!("{v:.4}"))
                    .unwrap_or_default(),
                last_loss: losses.last().map(|v| format!("{v:.4}")).unwrap_or_default(),
                step_ms: get("step_time")
                    .map(|m| fmt_num(m.median))
                    .unwrap_or_default(),
                samples_per_s: get("samples_per_s")
                    .map(|m| fmt_num(m.median))
                    .unwrap_or_default(),
                scaling: get("scaling_efficiency")
                    .map(|m| format!("{:.1}%", m.median * 100.0))
                    .unwrap_or_else(|| "n/a (one GPU)".into()),
                comm: get("comm_fraction")
                    .map(|m| format!("{:.1}%", m.median * 100.0))
                    .unwrap_or_default(),
                losses: losses.iter().map(|v| format!("{v:.4}")).collect(),
                steps,
                golden_steps: golden.len(),
                golden,
                loss_chart,
                golden_chart,
                step_chart,
            }
        });

    let problems = ev
        .checks
        .iter()
        .flat_map(|c| {
            c.findings
                .iter()
                .filter(|f| matches!(f.status, Status::Fail | Status::Warn | Status::Error))
                .map(move |f| Problem {
                    check: c.title.clone(),
                    status: f.status.label().into(),
                    class: class(f.status),
                    subject: f.subject.describe(),
                    found: f.found.clone(),
                    expected: f.expected.clone(),
                    reason: f.reason.clone(),
                })
        })
        .chain(
            ev.checks
                .iter()
                .filter(|c| c.status == Status::Error)
                .map(|c| Problem {
                    check: c.title.clone(),
                    status: "ERROR".into(),
                    class: "error".into(),
                    subject: "node".into(),
                    found: "-".into(),
                    expected: "-".into(),
                    reason: c.summary.clone(),
                }),
        )
        .collect();

    let overall = ev.assess();
    let mut verdict = overall.label().to_string();
    if matches!(overall, Verdict::Fail | Verdict::Error) && !ev.kept_promise() {
        verdict.push_str(", INCOMPLETE");
    }
    if ev.simulated {
        verdict.push_str(" (SIMULATED)");
    }
    View {
        simulated: ev.simulated,
        verdict,
        verdict_class: match overall {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Error => "error",
            Verdict::Incomplete | Verdict::NothingJudged | Verdict::Partial => "warn",
        }
        .into(),
        verdict_note: ev.shortfall_text(),
        never_ran: ev.missing_checks(),
        node_summary: inv.summary(),
        rows,
        counts,
        topology,
        host,
        compute: compute_table(ev),
        pairs,
        p2p_read: p2p_matrix(ev, "p2p_read", "Peer-to-peer read bandwidth"),
        p2p_bidir: p2p_matrix(ev, "p2p_bidir", "Peer-to-peer bandwidth, both ways at once"),
        collectives,
        health,
        training,
        fit: fit_view(ev),
        partitions: crate::report::partitions::build(ev),
        problems,
        remeasured: crate::report::remeasured::build(ev),
        conventions: crate::report::conventions::build(ev),
        started: ev.started_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        finished: ev
            .finished_at
            .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
            .unwrap_or_else(|| "not finished".into()),
        duration: ev
            .finished_at
            .map(|t| {
                format!(
                    "{:.1} s",
                    (t - ev.started_at).num_milliseconds() as f64 / 1000.0
                )
            })
            .unwrap_or_else(|| "-".into()),
    }
}

/// The worst finding on `metric` about `about`, and the reasons of those that are not a pass
/// (for tooltips).
fn judged(idx: &Index, metric: &str, about: &Subject) -> (Option<Status>, Vec<String>) {
    let on = idx.on(metric, about);
    let worst = on.iter().map(|f| f.status).max();
    let reasons = on
        .iter()
        .filter(|f| matches!(f.status, Status::Warn | Status::Fail | Status::Error))
        .map(|f| f.reason.clone())
        .collect();
    (worst, reasons)
}

fn cell_status(s: Option<Status>) -> CellStatus {
    match s {
        None | Some(Status::Pass) => CellStatus::Pass,
        Some(Status::Warn) => CellStatus::Warn,
        Some(Status::Fail) | Some(Status::Error) => CellStatus::Fail,
        Some(Status::Skip) => CellStatus::Skip,
    }
}

fn cell_class(s: CellStatus) -> String {
    match s {
        CellStatus::Warn => "warn",
        CellStatus::Fail => "fail",
        CellStatus::Skip => "skip",
        CellStatus::Pass | CellStatus::NotApplicable => "",
    }
    .into()
}

/// A GPU-by-GPU matrix of a peer-to-peer bandwidth metric (`p2p_read`, `p2p_write` per ordered
/// pair, or `p2p_bidir` per pair, shown symmetric). None when the metric was not measured.
fn p2p_matrix(ev: &Evidence, metric: &str, title: &str) -> Option<Matrix> {
    let rec = ev.check("p2p_bandwidth")?;
    let medians: Vec<f64> = rec
        .metrics
        .iter()
        .filter(|m| m.name == metric && m.median.is_finite())
        .map(|m| m.median)
        .collect();
    if medians.is_empty() {
        return None;
    }
    let symmetric = metric == "p2p_bidir";
    let limit = ev
        .suite
        .resolved
        .checks
        .p2p_bandwidth
        .as_ref()
        .map(|c| match metric {
            "p2p_write" => c.write,
            "p2p_bidir" => c.bidir,
            _ => c.read,
        });
    let node_median = median(&medians);
    let (expected, mut reference) = match limit.and_then(|l| l.judging().fail_below) {
        Some(f) => (f, format!("the suite's floor of {} GB/s", fmt_num(f))),
        None => (
            node_median,
            format!("the node median of {} GB/s", fmt_num(node_median)),
        ),
    };
    // Floors the suite states per path class (`by_path`) for this figure.
    let by_path: Vec<(crate::suite::PathClass, f64)> = ev
        .suite
        .resolved
        .checks
        .p2p_bandwidth
        .iter()
        .flat_map(|c| c.by_path.iter())
        .filter_map(|(k, l)| Some((*k, l.for_metric(metric)?.judging().fail_below?)))
        .collect();
    if !by_path.is_empty() {
        let each: Vec<String> = by_path
            .iter()
            .map(|(k, f)| format!("{} pairs {} GB/s", k.label(), fmt_num(*f)))
            .collect();
        reference = format!("{reference} (by path class: {})", each.join(", "));
    }
    let expected_for = |a: usize, b: usize| {
        ev.node
            .pair(a, b)
            .and_then(|_| crate::suite::PathClass::parse(&ev.node.pair_label(a, b)))
            .and_then(|k| by_path.iter().find(|(c, _)| *c == k).map(|x| x.1))
            .unwrap_or(expected)
    };
    let gpus: Vec<usize> = ev.node.gpus.iter().map(|g| g.index).collect();
    let labels: Vec<String> = gpus.iter().map(|i| format!("GPU{i}")).collect();
    let idx = Index::of(rec);
    let (mut failing, mut warning) = (0, 0);
    let mut heat = Vec::with_capacity(gpus.len());
    let mut rows = Vec::with_capacity(gpus.len());
    for &a in &gpus {
        let mut heat_row = Vec::with_capacity(gpus.len());
        let mut cells = Vec::with_capacity(gpus.len());
        for &b in &gpus {
            if a == b {
                heat_row.push(HeatCell {
                    status: CellStatus::NotApplicable,
                    ..Default::default()
                });
                cells.push(Cell {
                    text: "X".into(),
                    class: String::new(),
                });
                continue;
            }
            let (sa, sb) = if symmetric {
                (a.min(b), a.max(b))
            } else {
                (a, b)
            };
            let subject = Subject::pair(sa, sb);
            let about = subject.of_metric(metric);
            let Some(m) = idx.metric(metric, &subject) else {
                let status = if rec.status == Status::Skip {
                    CellStatus::Skip
                } else {
                    CellStatus::NotApplicable
                };
                heat_row.push(HeatCell {
                    status,
                    note: Some("not measured".into()),
                    ..Default::default()
                });
                cells.push(Cell::empty());
                continue;
            };
            let (worst, reasons) = judged(&idx, metric, &about);
            let status = cell_status(worst);
            match status {
                CellStatus::Fail => failing += 1,
                CellStatus::Warn => warning += 1,
                _ => {}
            }
            heat_row.push(HeatCell {
                value: Some(m.median).filter(|v| v.is_finite()),
                expected: Some(expected_for(sa, sb)).filter(|v| v.is_finite() && *v > 0.0),
                status,
                note: (!reasons.is_empty()).then(|| reasons.join("; ")),
            });
            cells.push(Cell {
                text: fmt_num(m.median),
                class: cell_class(status),
            });
        }
        heat.push(heat_row);
        rows.push(MatrixRow {
            label: format!("GPU{a}"),
            cells,
        });
    }
    let svg = svg::heatmap(&Heatmap {
        title: title.to_string(),
        unit: "GB/s".into(),
        row_labels: labels.clone(),
        col_labels: labels.clone(),
        cells: heat,
        row_axis: if symmetric { "GPU" } else { "source" }.into(),
        col_axis: if symmetric { "GPU" } else { "destination" }.into(),
    });
    if symmetric {
        // Each pair shows twice.
        failing /= 2;
        warning /= 2;
    }
    Some(Matrix {
        metric: metric.to_string(),
        title: title.to_string(),
        reference,
        labels,
        rows,
        failing,
        warning,
        svg,
    })
}

/// Bus bandwidth against message size, with the suite's floors as a dashed step line.
fn collective_chart(
    op: &str,
    ranks: &str,
    rec: &CheckRecord,
    sizes: &[u64],
    floors: &[(u64, f64)],
) -> String {
    let points: Vec<(f64, f64)> = sizes
        .iter()
        .filter_map(|&s| {
            rec.metric("busbw", &Subject::size(s))
                .map(|m| (s as f64, m.median))
        })
        .collect();
    let mut series = vec![Series {
        name: if ranks.is_empty() {
            format!("{op} busbw")
        } else {
            format!("{op} busbw, {ranks} ranks")
        },
        points,
        dashed: false,
    }];
    // all_reduce's second pass, where measured: what the node delivers without NVLS.
    let off: Vec<(f64, f64)> = sizes
        .iter()
        .filter_map(|&s| {
            rec.metric("busbw_no_nvls", &Subject::size(s))
                .map(|m| (s as f64, m.median))
        })
        .collect();
    if !off.is_empty() {
        series.push(Series {
            name: format!("{op} busbw, NVLS forced off"),
            points: off,
            dashed: false,
        });
    }
    let floor = floor_steps(floors, sizes);
    if !floor.is_empty() {
        series.push(Series {
            name: format!("floor: {}", floors_text(floors)),
            points: floor,
            dashed: true,
        });
    }
    svg::line_chart(&LineChart {
        title: format!("{op}: bus bandwidth by message size"),
        x_label: "message size".into(),
        y_label: "busbw (GB/s)".into(),
        x_log2: true,
        y_log: false,
        series,
        x_format: AxisFormat::Bytes,
    })
}

/// The floors as a step line over the measured sizes: each floor holds from its size up to the
/// next floor's size (or the largest size measured).
fn floor_steps(floors: &[(u64, f64)], sizes: &[u64]) -> Vec<(f64, f64)> {
    let (Some(&lo), Some(&hi)) = (sizes.first(), sizes.last()) else {
        return Vec::new();
    };
    let mut pts = Vec::new();
    for (i, &(from, gbps)) in floors.iter().enumerate() {
        let start = from.max(lo);
        let end = floors.get(i + 1).map(|n| n.0).unwrap_or(hi).min(hi);
        if start > hi || end < start {
            continue;
        }
        pts.push((start as f64, gbps));
        if end > start {
            pts.push((end as f64, gbps));
        }
    }
    pts
}

fn floors_text(floors: &[(u64, f64)]) -> String {
    floors
        .iter()
        .map(|(s, g)| format!("{} GB/s from {}", fmt_num(*g), format_bytes(*s)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn step_series(name: &str, values: &[f64]) -> Series {
    Series {
        name: name.into(),
        points: values
            .iter()
            .enumerate()
            .map(|(i, v)| ((i + 1) as f64, *v))
            .collect(),
        dashed: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::simulated;

    #[test]
    fn a_precision_whose_gemm_failed_reads_could_not_measure_in_the_compute_table() {
        use crate::checks::compute::error_fact;
        use crate::evidence::{Fact, FactValue, Subject};
        use crate::suite::GemmPrecision::Fp8;
        let mut ev = simulated("h100-sxm-8", &[]);
        let rec = ev.checks.iter_mut().find(|c| c.id == "compute").unwrap();
        rec.metrics
            .retain(|m| !(m.name == Fp8.metric() && m.subject == Subject::gpu(2)));
        rec.facts.push(Fact::new(
            error_fact(Fp8),
            Subject::gpu(2),
            FactValue::Text("cublasLtMatmul failed: CUBLAS_STATUS_INVALID_VALUE".into()),
        ));
        let t = compute_table(&ev).unwrap();
        let col = ev
            .suite
            .resolved
            .checks
            .compute
            .as_ref()
            .unwrap()
            .precisions
            .iter()
            .position(|p| *p == Fp8)
            .unwrap();
        assert_eq!(t.rows[2].cells[col].text, "could not measure");
        assert_eq!(t.rows[2].cells[col].class, "error");
        // The other GPUs' fp8 figures, and GPU 2's other precisions, are shown as measured.
        assert!(t.rows[1].cells[col].text.parse::<f64>().is_ok());
        assert!(t.rows[2].cells[0].text.parse::<f64>().is_ok());
        // A failure at twice the size leaves the figure at the size: shown.
        let rec = ev.checks.iter_mut().find(|c| c.id == "compute").unwrap();
        rec.facts.push(Fact::new(
            error_fact(Fp8),
            Subject::gpu(3),
            FactValue::Text("at 16384: cublasLtMatmul failed".into()),
        ));
        let t = compute_table(&ev).unwrap();
        assert!(t.rows[3].cells[col].text.parse::<f64>().is_ok());
    }

    #[test]
    fn the_topology_matrix_has_a_column_and_a_row_per_nic_and_marks_a_far_one() {
        let v = build(&simulated("h100-sxm-8", &[]));
        let t = &v.topology;
        assert_eq!(t.nic_labels.len(), 8);
        assert_eq!(t.nic_rows.len(), 8);
        assert!(t.nic_mismatch_list.is_empty());
        assert_eq!(t.rows[3].nic_cells[3].found, "PIX");
        assert_eq!(t.rows[3].nic_cells[3].expected, "PXB or nearer");
        assert_eq!(t.rows[3].nic_cells[4].found, "SYS");
        assert_eq!(t.nic_rows[3].cells[3].found, "PIX");
        assert_eq!(t.nic_rows[3].nic_cells[3].found, "X");
        assert_eq!(t.nic_rows[0].pcie, "InfiniBand ACTIVE/LinkUp 400 Gb/s");
        let v = build(&simulated(
            "h100-sxm-8",
            &["nic-across-socket:gpu=6", "nic-down:nic=1"],
        ));
        let t = &v.topology;
        assert_eq!(
            t.nic_mismatch_list,
            ["GPU6 -> mlx5_4: found NODE, expected PXB or nearer"]
        );
        assert!(t.rows[6].nic_cells[4].mismatch);
        assert_eq!(t.rows[6].nic_cells.iter().filter(|c| c.mismatch).count(), 1);
        assert_eq!(t.nic_rows[1].pcie, "InfiniBand DOWN/Polling 400 Gb/s");
        // A node whose NICs were not read has no NIC columns.
        let v = build(&simulated("l40s-pcie-4", &[]));
        assert!(v.topology.nic_labels.is_empty() && v.topology.rows[0].nic_cells.is_empty());
    }

    #[test]
    fn floors_become_a_step_line_over_the_measured_sizes() {
        let sizes: Vec<u64> = (3..=33).map(|k| 1u64 << k).collect();
        let g = 1u64 << 30;
        // One floor at the largest size: a single point.
        assert_eq!(
            floor_steps(&[(8 * g, 460.0)], &sizes),
            vec![((8 * g) as f64, 460.0)]
        );
        // Two floors: each holds until the next one's size.
        assert_eq!(
            floor_steps(&[(g, 300.0), (8 * g, 431.0)], &sizes),
            vec![
                (g as f64, 300.0),
                ((8 * g) as f64, 300.0),
                ((8 * g) as f64, 431.0)
            ]
        );
        // A floor below the smallest size starts there; one above the largest is not drawn.
        assert_eq!(
            floor_steps(&[(1, 10.0), (64 * g, 99.0)], &sizes),
            vec![(8.0, 10.0), ((8 * g) as f64, 10.0)]
        );
        assert!(floor_steps(&[(g, 1.0)], &[]).is_empty());
    }

    /// Where the second all_reduce pass was refused, the sentence under the table says why, and
    /// with NVLS availability unknown it says both; where NVLS is not available the refusal
    /// changes nothing (there was no second figure to have).
    #[test]
    fn the_nvls_sentence_names_a_second_pass_the_gpus_refused() {
        let nvls_text = |ev: &Evidence| {
            build(ev)
                .collectives
                .into_iter()
                .find(|t| t.op == "all_reduce")
                .expect("all_reduce table")
                .nvls
        };
        let refused = "Not measured with NVLS forced off: that sweep runs in a second process, \
                       which the GPUs refuse while nodecert holds them (GPUs 0, 1, 2, 3, 4, 5, \
                       6, 7 are in compute mode Exclusive_Process).";
        let mut ev = simulated("h100-sxm-8", &["exclusive-process"]);
        assert_eq!(nvls_text(&ev), refused);
        ev.node.gpus[3].nvls.multicast = None;
        assert_eq!(
            nvls_text(&ev),
            format!(
                "No NVLS figure known: NVLS availability unknown (GPU 3: multicast support not \
                 read). {refused}"
            )
        );
        ev.node.gpus[3].nvls.multicast = Some(false);
        assert_eq!(
            nvls_text(&ev),
            "No NVLS figure: NVLS not available (GPU 3 reports no multicast support); NCCL's \
             figure is without NVLS."
        );
        // Without the refusal, an unknown availability is said alone.
        let mut ev = simulated("h100-sxm-8", &[]);
        ev.node.gpus[3].nvls.multicast = None;
        for c in &mut ev.checks {
            c.metrics.retain(|m| m.name != "busbw_no_nvls");
        }
        assert_eq!(
            nvls_text(&ev),
            "No NVLS figure known: NVLS availability unknown (GPU 3: multicast support not read)."
        );
    }

    #[test]
    fn the_slow_pair_is_marked_in_both_p2p_matrices() {
        let ev = simulated("h100-sxm-8", &["slow-gpu-pair:gpu=1,peer=4"]);
        let v = build(&ev);
        let read = v.p2p_read.expect("read matrix");
        assert_eq!(read.labels.len(), 8);
        assert_eq!(read.rows[1].cells[4].class, "fail");
        assert_eq!(read.rows[4].cells[1].class, "fail");
        assert_eq!(read.rows[0].cells[1].class, "");
        assert_eq!(read.rows[3].cells[3].text, "X");
        assert_eq!((read.failing, read.warning), (2, 0));
        assert!(read.reference.contains("floor of 335"));
        assert_eq!(read.svg.matches("<g class=\"cell fail\">").count(), 2);
        assert!(read
            .svg
            .contains("<g class=\"cell fail\"><title>GPU1 → GPU4: "));
        let bidir = v.p2p_bidir.expect("bidir matrix");
        assert_eq!(bidir.failing, 1);
        assert_eq!(bidir.rows[1].cells[4].text, bidir.rows[4].cells[1].text);
        assert_eq!(bidir.rows[4].cells[1].class, "fail");
    }

    #[test]
    fn a_p2p_matrix_names_the_floors_of_each_path_class() {
        // The PCIe suite states PIX and PXB floors: the legend says so, and a PIX pair's cell is
        // shaded against its class's floor, the others against the check-wide one.
        let mut ev = simulated("l40s-pcie-4", &[]);
        for p in &mut ev.node.pairs {
            if (p.a, p.b) == (0, 1) {
                p.pcie_path = Some("PIX".into());
            }
        }
        let read = build(&ev).p2p_read.expect("read matrix");
        assert_eq!(
            read.reference,
            "the suite's floor of 18.0 GB/s (by path class: PIX pairs 23.0 GB/s, PXB pairs 23.0 GB/s)"
        );
        assert!(read
            .svg
            .contains("<title>GPU0 → GPU1: 22 GB/s (expected 23 GB/s"));
        assert!(read
            .svg
            .contains("<title>GPU0 → GPU2: 21.8 GB/s (expected 18 GB/s"));
    }

    #[test]
    fn charts_for_collectives_and_training() {
        let ev = simulated("h100-sxm-8", &[]);
        let v = build(&ev);
        assert_eq!(v.collectives.len(), 5);
        for t in &v.collectives {
            assert!(t.chart.starts_with("<svg"), "{}", t.op);
            assert!(t.chart.contains("floor: "), "{}: floor series", t.op);
            assert!(!t.floors.is_empty());
            assert!(!t.corrupt);
        }
        let tr = v.training.expect("training");
        assert_eq!(tr.precision, "fp32 (golden run fp32)");
        assert!(tr.golden_chart.contains("CPU golden loss"));
        assert!(tr.step_chart.starts_with("<svg"));
        assert!(tr.golden_steps > 0);
        assert_eq!(tr.golden.len(), tr.golden_steps);
        assert!(!tr.golden[0].node.is_empty() && !tr.golden[0].cpu.is_empty());
        assert_eq!(tr.steps.len(), tr.losses.len());
    }

    #[test]
    fn topology_mismatches_are_listed_once_per_pair() {
        let ev = simulated("h100-sxm-8", &["nvlink-down:gpu=2,peer=5"]);
        let v = build(&ev);
        assert!(v.topology.mismatches > 0);
        assert_eq!(v.topology.mismatch_list.len(), v.topology.mismatches);
        assert!(v
            .topology
            .mismatch_list
            .iter()
            .all(|m| m.contains("GPU2") && m.contains("expected NV18")));
    }

    #[test]
    fn one_gpu_has_no_p2p_matrix() {
        let v = build(&simulated("h200-vm-1", &[]));
        assert!(v.p2p_read.is_none() && v.p2p_bidir.is_none());
    }
}
