//! The report's view of the evidence: tables ready for templates. Pure data, derived only from
//! the evidence.

use crate::checks::judge::fmt_num;
use crate::evidence::{CheckRecord, Evidence, Status};
use crate::units::format_bytes;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct View {
    pub simulated: bool,
    pub verdict: String,
    pub verdict_class: String,
    pub node_summary: String,
    pub rows: Vec<Row>,
    pub counts: Counts,
    pub topology: Topology,
    pub host: Vec<HostRow>,
    pub pairs: Vec<PairRow>,
    pub collectives: Vec<CollectiveTable>,
    pub health: Vec<HealthRow>,
    pub training: Option<TrainingView>,
    pub problems: Vec<Problem>,
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
}

#[derive(Debug, Serialize)]
pub struct TopoRow {
    pub label: String,
    pub cells: Vec<TopoCell>,
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
    fn empty() -> Self {
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
}

#[derive(Debug, Serialize)]
pub struct CollectiveRow {
    pub size: String,
    pub time_us: String,
    pub algbw: String,
    pub busbw: Cell,
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
    pub first_loss: String,
    pub last_loss: String,
    pub step_ms: String,
    pub samples_per_s: String,
    pub scaling: String,
    pub comm: String,
    pub losses: Vec<String>,
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

/// A cell for metric `name` about `subject_text` in `rec`, coloured by the worst finding on it.
fn cell(
    rec: Option<&CheckRecord>,
    name: &str,
    subject: &crate::evidence::Subject,
    subject_text: &str,
    unit: &str,
) -> Cell {
    let Some(rec) = rec else { return Cell::empty() };
    let Some(m) = rec.metric(name, subject) else {
        return Cell::empty();
    };
    let worst = rec
        .findings
        .iter()
        .filter(|f| f.metric.as_deref() == Some(name) && f.subject == subject_text)
        .map(|f| f.status)
        .max();
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
                let found = p.map(|p| p.topo_label()).unwrap_or_else(|| "?".into());
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
                TopoCell {
                    found,
                    expected,
                    mismatch,
                }
            })
            .collect::<Vec<_>>();
        topology.mismatches += cells.iter().filter(|c| c.mismatch).count();
        let pcie = match (g.pcie.gen_current, g.pcie.width_current) {
            (Some(a), Some(b)) => format!("Gen{a} x{b}"),
            _ => "n/a".into(),
        };
        topology.rows.push(TopoRow {
            label: format!("GPU{}", g.index),
            cells,
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

    let hb = ev.check("host_bandwidth");
    let host = inv
        .gpus
        .iter()
        .map(|g| {
            let s = crate::evidence::Subject::gpu(g.index);
            let t = s.describe();
            HostRow {
                gpu: t.clone(),
                h2d: cell(hb, "h2d", &s, &t, ""),
                d2h: cell(hb, "d2h", &s, &t, ""),
                bidir: cell(hb, "bidir", &s, &t, ""),
                all_gpus_h2d: cell(hb, "all_gpus_h2d", &s, &t, ""),
                device_copy: cell(hb, "device_copy", &s, &t, ""),
            }
        })
        .filter(|r| hb.is_some() && r.h2d.text != "-")
        .collect();

    let pb = ev.check("p2p_bandwidth");
    let pl = ev.check("p2p_latency");
    let mut pairs = Vec::new();
    if pb.is_some_and(|r| !r.metrics.is_empty()) || pl.is_some_and(|r| !r.metrics.is_empty()) {
        for (a, b) in inv.ordered_pairs() {
            let s = crate::evidence::Subject::pair(a, b);
            let t = s.describe();
            let bidir = if a < b {
                cell(pb, "p2p_bidir", &s, &format!("GPU {a} <-> GPU {b}"), "")
            } else {
                Cell::empty()
            };
            pairs.push(PairRow {
                pair: t.clone(),
                read: cell(pb, "p2p_read", &s, &t, ""),
                write: cell(pb, "p2p_write", &s, &t, ""),
                bidir,
                latency: cell(pl, "latency", &s, &t, ""),
            });
        }
    }

    let collectives = ev
        .checks
        .iter()
        .filter(|c| c.kind == "collective" && !c.metrics.is_empty())
        .map(|c| {
            let op = c.id.trim_start_matches("collective.").to_string();
            let mut sizes: Vec<u64> = c.metrics.iter().filter_map(|m| m.subject.bytes).collect();
            sizes.sort();
            sizes.dedup();
            let rows = sizes
                .iter()
                .map(|&s| {
                    let sub = crate::evidence::Subject::size(s);
                    let t = c
                        .metric("time", &sub)
                        .map(|m| fmt_num(m.median))
                        .unwrap_or_default();
                    let a = c
                        .metric("algbw", &sub)
                        .map(|m| fmt_num(m.median))
                        .unwrap_or_default();
                    let busbw = cell(
                        Some(c),
                        "busbw",
                        &sub,
                        &format!("{op} {}", format_bytes(s)),
                        "",
                    );
                    let wrong = c
                        .facts
                        .iter()
                        .find(|f| f.name == "wrong_elements" && f.subject == sub)
                        .map(|f| {
                            let w = f.value.split('/').next().unwrap_or("0").to_string();
                            Cell {
                                class: if w == "0" {
                                    String::new()
                                } else {
                                    "fail".into()
                                },
                                text: w,
                            }
                        })
                        .unwrap_or_else(Cell::empty);
                    CollectiveRow {
                        size: format_bytes(s),
                        time_us: t,
                        algbw: a,
                        busbw,
                        wrong,
                    }
                })
                .collect();
            CollectiveTable {
                op,
                status: c.status.label().into(),
                class: class(c.status),
                ranks: c
                    .facts
                    .iter()
                    .find(|f| f.name == "ranks")
                    .map(|f| f.value.clone())
                    .unwrap_or_default(),
                rows,
            }
        })
        .collect();

    let hc = ev.check("health");
    let health = inv
        .gpus
        .iter()
        .map(|g| {
            let who = format!("GPU {}", g.index);
            let worst = hc
                .map(|h| {
                    h.findings
                        .iter()
                        .filter(|f| f.subject == who)
                        .map(|f| f.status)
                        .max()
                })
                .unwrap_or(None);
            let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "n/a".into());
            HealthRow {
                gpu: who.clone(),
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
                    "none".into()
                } else {
                    g.xids
                        .iter()
                        .map(|x| x.code.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                },
                replays: opt(g.pcie.replay_counter),
                throttle: if g.throttle_reasons.is_empty() {
                    "none".into()
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
            let get = |n: &str| c.metrics.iter().find(|m| m.name == n);
            let losses = get("loss").map(|m| m.samples.clone()).unwrap_or_default();
            TrainingView {
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
                    subject: f.subject.clone(),
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

    let overall = ev.overall();
    View {
        simulated: ev.simulated,
        verdict: match (overall, ev.simulated) {
            (Status::Pass, false) => "PASS".into(),
            (Status::Pass, true) => "PASS (SIMULATED)".into(),
            (s, false) => s.label().into(),
            (s, true) => format!("{} (SIMULATED)", s.label()),
        },
        verdict_class: class(overall),
        node_summary: inv.summary(),
        rows,
        counts,
        topology,
        host,
        pairs,
        collectives,
        health,
        training,
        problems,
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
