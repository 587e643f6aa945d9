//! Evidence: everything a run found, as plain serde structs, versioned. Written atomically after
//! each check so that a crash loses nothing already done. Reports are rendered from this alone.

use crate::backend::BackendInfo;
use crate::inventory::Inventory;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Evidence format written by this nodecert. Readers accept this version and older ones.
///
/// 2: `verdict` may also be `incomplete` or `nothing_judged`, and `never_ran` names the promised
/// checks that left no record. Version 1 files read as before; their verdict is recomputed.
///
/// 3: a finding's `subject` is a structured [`Subject`] (it was text) and a fact's `value` a
/// typed [`FactValue`] (it was text). Files of versions 1 and 2 read into the new types; a
/// signed file is verified on its bytes, so old certificates keep verifying.
///
/// 4: a check record may say `unjudged`: the suite promised its judgement and it could not make
/// one here, so the run is incomplete. Only evidence that holds such a record is written as
/// version 4 ([`Evidence::update_verdict`]); the rest stays version 3, which every nodecert
/// since version 3 reads. A nodecert that reads only up to 3 refuses a version-4 file rather
/// than compute PASS from it without knowing what `unjudged` means.
///
/// 5: a subject may name a partitioning of the training run (`method`: "tensor-parallel",
/// "hybrid (tensor 2 x data 4)"). Only evidence that holds such a subject is written as version
/// 5 (a run that trained on two GPUs or more); a nodecert that reads only up to 4 would take
/// those findings for the node's data-parallel run's, and refuses the file instead.
///
/// 6: the verdict may be `partial` (every judgement made held, but readings the suite needed
/// were not available), and a GPU's unavailable readings may name `xid_history`. Only evidence
/// that holds either is written as version 6; a nodecert that reads only up to 5 refuses it
/// rather than fail on, or misread, a verdict it does not know.
///
/// 7: the record [`CLOSING_RECORD`] (what the reading after the last check found) counts toward
/// a partial verdict where it left readings unjudged (a counter read before it and not then),
/// and a GPU's unavailable readings may name `nvlink_state`. Only evidence whose verdict is
/// partial through that record, or that names `nvlink_state`, is written as version 7; a
/// nodecert that reads only up to 6 would compute PASS from the one and fail on the other's
/// word, and refuses both instead.
///
/// 8: a GPU's unavailable readings may name `model` or `memory` (a name or size NVML did not
/// give, shown as "unknown GPU" and 0 bytes). Only evidence that names either is written as
/// version 8; a nodecert that reads only up to 7 would fail on the word, and refuses it instead.
pub const FORMAT_VERSION: u32 = 8;
/// The version written for evidence that needs nothing newer.
pub const BASE_FORMAT_VERSION: u32 = 3;
/// The version a record with `unjudged` needs.
const UNJUDGED_FORMAT_VERSION: u32 = 4;
/// The version a subject naming a training partitioning needs.
pub const METHOD_FORMAT_VERSION: u32 = 5;
/// The first format whose verdict may be "partial", and whose GPUs may name the reading
/// "xid_history" unavailable.
pub const PARTIAL_FORMAT_VERSION: u32 = 6;
/// The version a partial verdict needs where the record [`CLOSING_RECORD`] makes it partial, and
/// a GPU that names the reading `nvlink_state` unavailable.
pub const CLOSING_FORMAT_VERSION: u32 = 7;
/// The version a GPU that names the reading `model` or `memory` unavailable needs.
pub const IDENTITY_FORMAT_VERSION: u32 = 8;
/// The id of the record of what the reading after the last check found (`checks::during`):
/// present only where it found something to judge. Never promised by a suite, it still counts
/// toward the verdict: its failures fail the run, and readings it left unjudged make it partial.
pub const CLOSING_RECORD: &str = "after-checks";
pub const FORMAT_NAME: &str = "nodecert-evidence";
/// File name of the evidence in a report folder.
pub const EVIDENCE_FILE: &str = "evidence.json";

/// Pretty JSON with every array of plain numbers on one line: the samples, which are most of
/// an 8-GPU node's evidence, take a third of the bytes that one number per line takes, and the
/// rest stays readable. The JSON value is the same.
pub fn inline_number_arrays(pretty: &str) -> String {
    let is_number = |l: &str| {
        let t = l.trim().trim_end_matches(',');
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
    };
    let lines: Vec<&str> = pretty.lines().collect();
    let mut out = String::with_capacity(pretty.len());
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.ends_with('[') {
            let mut j = i + 1;
            while j < lines.len() && is_number(lines[j]) {
                j += 1;
            }
            let close = lines.get(j).map(|l| l.trim());
            if j > i + 1 && matches!(close, Some("]") | Some("],")) {
                out.push_str(line);
                for (k, l) in lines[i + 1..j].iter().enumerate() {
                    if k > 0 {
                        out.push(' ');
                    }
                    out.push_str(l.trim());
                }
                out.push_str(close.unwrap_or("]"));
                out.push('\n');
                i = j + 1;
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
        i += 1;
    }
    if !pretty.ends_with('\n') {
        out.pop();
    }
    out
}

/// Outcome of a check or of one finding, from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    /// Could not run here (no peer pairs, query not available): neither pass nor fail.
    Skip,
    Warn,
    Fail,
    /// The measurement itself failed (driver error, timeout): the node could not be tested.
    Error,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Skip => "SKIP",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Error => "ERROR",
        }
    }
}

/// What was measured or judged about whom: a GPU, a pair, a link, a message size, a device, the
/// node. A plain struct whose unused fields are omitted, so that metrics, findings, `diff` and
/// baselines match subjects by their fields, never by their text: [`Subject::describe`] is for
/// people only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
pub struct Subject {
    /// A GPU (CUDA ordinal), or the source of a pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<usize>,
    /// The destination of a pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<usize>,
    /// How a pair is meant, when not as one direction from `gpu` to `peer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairing: Option<Pairing>,
    /// An NVLink of `gpu`, by its index on that GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<u32>,
    /// GPUs judged together (those that share or differ in a value), in ascending order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<usize>,
    /// A GPU known only by NVML's index (one the driver lists but cannot hand out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml_gpu: Option<u32>,
    /// The PCI bus id of the GPU meant, where it is known and matters (a lost GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// A PCIe bridge or switch, by its bus id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge: Option<String>,
    /// A network adapter (an RDMA device, "mlx5_3"), with `gpu` when the subject is the path
    /// between that GPU and it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<String>,
    /// A port of `nic`, numbered as the kernel numbers it (from 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    /// A node of a multi-node job, by its scheduler name ("n3"), with `peer_node` for a pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_node: Option<String>,
    /// A collective operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<crate::suite::CollectiveOp>,
    /// Message size, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// A way of spreading the training run over the GPUs ("tensor-parallel", "hybrid (tensor 2
    /// x data 4)"); absent for the data-parallel run the training check has always made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Words for a subject that has no field to name it: a GPU the driver could not identify at
    /// all, or a finding subject of evidence format 2 or older that is none of the forms those
    /// versions wrote. Shown as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// How a pair subject is meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Pairing {
    /// Both directions at once (a bidirectional copy): "GPU 0 <-> GPU 5".
    BothWays,
    /// A relation of the two GPUs with no direction (NVLinks between them, their PCIe path, peer
    /// access): "GPU 0 - GPU 5".
    Relation,
}

impl Subject {
    pub fn node() -> Self {
        Subject::default()
    }
    pub fn gpu(g: usize) -> Self {
        Subject {
            gpu: Some(g),
            ..Default::default()
        }
    }
    /// One direction, from `a` to `b`.
    pub fn pair(a: usize, b: usize) -> Self {
        Subject {
            gpu: Some(a),
            peer: Some(b),
            ..Default::default()
        }
    }
    /// Both directions of `a` and `b` at once, named lower index first.
    pub fn both_ways(a: usize, b: usize) -> Self {
        Subject {
            pairing: Some(Pairing::BothWays),
            ..Subject::pair(a.min(b), a.max(b))
        }
    }
    /// What holds between `a` and `b`, with no direction, named lower index first.
    pub fn between(a: usize, b: usize) -> Self {
        Subject {
            pairing: Some(Pairing::Relation),
            ..Subject::pair(a.min(b), a.max(b))
        }
    }
    /// NVLink `link` of GPU `g`.
    pub fn link(g: usize, link: u32) -> Self {
        Subject {
            link: Some(link),
            ..Subject::gpu(g)
        }
    }
    /// GPUs judged together; one GPU is that GPU.
    pub fn group(gpus: &[usize]) -> Self {
        let mut v = gpus.to_vec();
        v.sort_unstable();
        v.dedup();
        match v.as_slice() {
            [g] => Subject::gpu(*g),
            _ => Subject {
                gpus: v,
                ..Default::default()
            },
        }
    }
    /// A partitioning of the training run, by its name ([`crate::training::fit::method_name`]).
    pub fn method(name: &str) -> Self {
        Subject {
            method: Some(name.into()),
            ..Default::default()
        }
    }
    pub fn size(bytes: u64) -> Self {
        Subject {
            bytes: Some(bytes),
            ..Default::default()
        }
    }
    /// A collective operation as a whole.
    pub fn op(op: crate::suite::CollectiveOp) -> Self {
        Subject {
            op: Some(op),
            ..Default::default()
        }
    }
    /// A collective operation at one message size.
    pub fn op_size(op: crate::suite::CollectiveOp, bytes: u64) -> Self {
        Subject {
            op: Some(op),
            bytes: Some(bytes),
            ..Default::default()
        }
    }
    /// A PCIe bridge or switch.
    pub fn bridge(bus_id: &str) -> Self {
        Subject {
            bridge: Some(bus_id.to_string()),
            ..Default::default()
        }
    }
    /// A network adapter, or one of its ports.
    pub fn nic(name: &str, port: Option<u32>) -> Self {
        Subject {
            nic: Some(name.to_string()),
            port,
            ..Default::default()
        }
    }
    /// A node of a multi-node job.
    pub fn node_named(name: &str) -> Self {
        Subject {
            node: Some(name.to_string()),
            ..Default::default()
        }
    }
    /// Two nodes of a multi-node job, named in the order given.
    pub fn node_pair(a: &str, b: &str) -> Self {
        Subject {
            node: Some(a.to_string()),
            peer_node: Some(b.to_string()),
            ..Default::default()
        }
    }
    /// The path between GPU `g` and the network adapter `nic`.
    pub fn gpu_nic(g: usize, nic: &str) -> Self {
        Subject {
            gpu: Some(g),
            nic: Some(nic.to_string()),
            ..Default::default()
        }
    }
    /// The same subject about `metric`'s figure: a bidirectional copy figure is about both
    /// directions of its pair.
    pub fn of_metric(&self, metric: &str) -> Self {
        if metric == BIDIR_METRIC && self.peer.is_some() && self.pairing.is_none() {
            Subject {
                pairing: Some(Pairing::BothWays),
                ..self.clone()
            }
        } else {
            self.clone()
        }
    }

    /// For people: "GPU 3", "GPU 0 -> GPU 5", "GPU 0 <-> GPU 5", "GPU 0 - GPU 5",
    /// "GPU 2 link 7", "GPUs 4, 5, 6, 7", "all_reduce 1 GiB", "1 GiB", "bridge 0000:17:00.0",
    /// "NVML GPU 3 (0000:17:00.0)", "node".
    pub fn describe(&self) -> String {
        if let Some(t) = &self.label {
            return t.clone();
        }
        if let Some(m) = &self.method {
            return m.clone();
        }
        let bus = |who: String| match &self.pci_bus_id {
            Some(b) => format!("{who} ({b})"),
            None => who,
        };
        let size = self.bytes.map(crate::units::format_bytes);
        if let Some(op) = self.op {
            return match size {
                Some(s) => format!("{op} {s}"),
                None => op.to_string(),
            };
        }
        if let Some(b) = &self.bridge {
            return format!("bridge {b}");
        }
        if let Some(n) = &self.node {
            return match &self.peer_node {
                Some(p) => format!("{n} - {p}"),
                None => format!("node {n}"),
            };
        }
        if let Some(n) = &self.nic {
            return match (self.gpu, self.port) {
                (Some(g), _) => format!("GPU {g} - {n}"),
                (None, Some(p)) => format!("{n} port {p}"),
                (None, None) => n.clone(),
            };
        }
        match (self.gpu, self.peer, self.link) {
            (Some(a), Some(b), _) => match self.pairing {
                None => format!("GPU {a} -> GPU {b}"),
                Some(Pairing::BothWays) => format!("GPU {a} <-> GPU {b}"),
                Some(Pairing::Relation) => format!("GPU {a} - GPU {b}"),
            },
            (Some(a), None, Some(l)) => format!("GPU {a} link {l}"),
            (Some(a), None, None) => bus(format!("GPU {a}")),
            (None, ..) => {
                if let Some(n) = self.nvml_gpu {
                    bus(format!("NVML GPU {n}"))
                } else if self.pci_bus_id.is_some() {
                    bus("a GPU".into())
                } else if !self.gpus.is_empty() {
                    crate::checks::judge::gpu_list(&self.gpus)
                } else if let Some(s) = size {
                    s
                } else {
                    "node".into()
                }
            }
        }
    }

    /// A finding subject as nodecert wrote it in evidence of format 2 and older, read into its
    /// fields. Each form those versions wrote is recognised; anything else is kept as
    /// `label` and shown as written. Used only when reading such files.
    pub fn from_legacy_text(text: &str) -> Subject {
        fn gpu(s: &str) -> Option<usize> {
            usize::try_from(digits(s.strip_prefix("GPU ")?)?).ok()
        }
        let t = text.trim();
        if t == "node" {
            return Subject::node();
        }
        if let Some(g) = gpu(t) {
            return Subject::gpu(g);
        }
        for (sep, make) in [
            (" -> ", Subject::pair as fn(usize, usize) -> Subject),
            (" <-> ", Subject::both_ways),
            (" - ", Subject::between),
        ] {
            if let Some((a, b)) = t.split_once(sep) {
                if let (Some(a), Some(b)) = (gpu(a), gpu(b)) {
                    return make(a, b);
                }
            }
        }
        if let Some((g, l)) = t.split_once(" link ") {
            if let (Some(g), Ok(l)) = (gpu(g), l.parse::<u32>()) {
                return Subject::link(g, l);
            }
        }
        if let Some(list) = t.strip_prefix("GPUs ") {
            let ids: Option<Vec<usize>> = list.split(", ").map(|x| x.parse().ok()).collect();
            if let Some(ids) = ids.filter(|v| v.len() > 1) {
                return Subject::group(&ids);
            }
        }
        let op = |name: &str| {
            crate::suite::CollectiveOp::ALL
                .into_iter()
                .find(|o| o.key() == name)
        };
        if let Some(o) = op(t) {
            return Subject::op(o);
        }
        if let Some((name, size)) = t.split_once(' ') {
            // Only a size that reads back as written: "1.5 MiB" was rounded and names no size.
            let bytes = crate::units::ByteSize::parse(size)
                .ok()
                .map(|b| b.0)
                .filter(|b| crate::units::format_bytes(*b) == size);
            if let (Some(o), Some(b)) = (op(name), bytes) {
                return Subject::op_size(o, b);
            }
        }
        if let Some(b) = t.strip_prefix("bridge ") {
            return Subject::bridge(b);
        }
        // "GPU 2, GPU 3": the replicas a training run named.
        let ids: Option<Vec<usize>> = t.split(", ").map(gpu).collect();
        if let Some(ids) = ids.filter(|v| v.len() > 1) {
            return Subject::group(&ids);
        }
        // A lost GPU: "GPU 3 (0000:17:00.0)", "NVML GPU 3 (...)", "NVML GPU 3", "a GPU (...)".
        let (who, bus) = match t.strip_suffix(')').and_then(|x| x.split_once(" (")) {
            Some((w, b)) if !b.is_empty() => (w, Some(b.to_string())),
            _ => (t, None),
        };
        let lost = if let Some(g) = gpu(who) {
            Some(Subject::gpu(g))
        } else if let Some(n) = who.strip_prefix("NVML ").and_then(gpu) {
            u32::try_from(n).ok().map(|n| Subject {
                nvml_gpu: Some(n),
                ..Default::default()
            })
        } else if who == "a GPU" && bus.is_some() {
            Some(Subject::default())
        } else {
            None
        };
        if let Some(s) = lost.filter(|_| bus.is_some() || who.starts_with("NVML ")) {
            return Subject {
                pci_bus_id: bus,
                ..s
            };
        }
        Subject {
            label: Some(text.to_string()),
            ..Default::default()
        }
    }
}

/// A whole number written only with digits, as older evidence wrote counts and GPU ids: no
/// sign, no space, nothing else ("+3" is not one, though `parse` would take it).
fn digits(t: &str) -> Option<u64> {
    (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .then(|| t.parse().ok())
        .flatten()
}

/// The bidirectional peer-copy figure, whose subject is both directions of a pair.
pub const BIDIR_METRIC: &str = "p2p_bidir";

/// A finding's subject: structured, or text in evidence of format 2 and older.
fn subject_or_legacy_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Subject, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Text(String),
        Fields(Box<Subject>),
    }
    Ok(match Either::deserialize(d)? {
        Either::Text(t) => Subject::from_legacy_text(&t),
        Either::Fields(s) => *s,
    })
}

/// One measured figure with its raw samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    /// What it is, e.g. "h2d", "p2p_read", "busbw", "latency".
    pub name: String,
    pub subject: Subject,
    /// "GB/s", "us", "ms", "samples/s", "" for plain numbers.
    pub unit: String,
    /// Median of the samples (the figure judged).
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Raw samples, one per timed repetition.
    pub samples: Vec<f64>,
    /// How the GPU timed the samples, for copy figures measured on real GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<crate::backend::Timing>,
    /// How a bandwidth figure counts: one direction or the sum of both, bytes once or read plus
    /// written. Absent for figures that are not bandwidths and in evidence written before
    /// conventions were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub convention: Option<Convention>,
}

/// Which directions a bandwidth figure adds up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Directions {
    /// One direction (a copy one way, or one way while the other runs).
    OneWay,
    /// The sum of both directions running at once.
    SumOfBoth,
}

/// Which bytes a bandwidth figure counts per byte of buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bytes {
    /// Each byte of the buffer once.
    Once,
    /// Each byte read and each byte written (a copy within one memory counts twice).
    ReadPlusWritten,
    /// nccl-tests' bus bandwidth: bytes over time times the collective's bus factor.
    BusFactor,
}

/// The tool a user compares a figure with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tool {
    Nvbandwidth,
    NcclTests,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Nvbandwidth => "nvbandwidth",
            Tool::NcclTests => "nccl-tests",
        }
    }
}

/// How a bandwidth figure counts, and the tool users compare it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Convention {
    pub directions: Directions,
    pub bytes: Bytes,
    /// The tool that reports the same measurement (nvbandwidth, nccl-tests).
    pub compared_with: Tool,
}

impl Convention {
    pub const fn new(directions: Directions, bytes: Bytes, compared_with: Tool) -> Self {
        Convention {
            directions,
            bytes,
            compared_with,
        }
    }

    /// "one direction, bytes read plus written".
    pub fn describe(&self) -> String {
        let d = match self.directions {
            Directions::OneWay => "one direction",
            Directions::SumOfBoth => "sum of both directions",
        };
        let b = match self.bytes {
            Bytes::Once => "bytes counted once",
            Bytes::ReadPlusWritten => "bytes read plus bytes written",
            Bytes::BusFactor => "bus bandwidth (algbw x the collective's factor)",
        };
        format!("{d}, {b}")
    }

    /// The factor that turns this figure into the one its tool reports, or None where the tool
    /// counts the same way. nodecert computes algbw and busbw with nccl-tests' own formulas.
    /// nvbandwidth reports one direction with each byte counted once (its bidirectional tests
    /// report the direction they time while the other runs): a sum of both directions becomes
    /// the mean of one, and a copy's bytes read plus written become bytes once.
    pub fn tool_factor(&self) -> Option<f64> {
        match self.compared_with {
            Tool::NcclTests => None,
            Tool::Nvbandwidth => {
                let mut f = 1.0;
                if self.directions == Directions::SumOfBoth {
                    f *= 0.5;
                }
                if self.bytes == Bytes::ReadPlusWritten {
                    f *= 0.5;
                }
                (f != 1.0).then_some(f)
            }
        }
    }
}

impl Metric {
    pub fn new(name: &str, subject: Subject, unit: &str, samples: Vec<f64>) -> Self {
        let (median, min, max) = stats(&samples);
        Metric {
            name: name.into(),
            subject,
            unit: unit.into(),
            median,
            min,
            max,
            samples,
            timing: None,
            convention: None,
        }
    }

    /// Record how the samples were timed.
    pub fn timed(mut self, timing: Option<crate::backend::Timing>) -> Self {
        self.timing = timing;
        self
    }

    /// Record how the figure counts (see [`Convention`]).
    pub fn counted(mut self, convention: Option<Convention>) -> Self {
        self.convention = convention;
        self
    }
}

/// Median, min and max; NaN for an empty list.
pub fn stats(v: &[f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let mut s: Vec<f64> = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (median, s[0], s[n - 1])
}

pub fn median(v: &[f64]) -> f64 {
    stats(v).0
}

/// What a check recorded beside its figures (a count, a data check, a replica hash), typed, so
/// that nothing reads a number back out of text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fact {
    pub name: String,
    pub subject: Subject,
    pub value: FactValue,
}

impl Fact {
    pub fn new(name: impl Into<String>, subject: Subject, value: FactValue) -> Fact {
        Fact {
            name: name.into(),
            subject,
            value,
        }
    }
}

/// The value of a [`Fact`]. In the file: `{"count": 8}`, `{"elements": {"wrong": 0, "checked":
/// 1024}}`, `{"copy": "intact"}`, `{"peer_access": false}`, `{"sha256": "..."}`, `{"text":
/// "..."}`. Evidence of format 2 and older held text; see [`FactValue::from_legacy`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FactValue {
    /// A whole number: ranks, bytes.
    Count(u64),
    /// A collective's result at one size: elements checked against the expected values, and how
    /// many of them were wrong.
    Elements { wrong: u64, checked: u64 },
    /// Whether a copy's data arrived intact.
    Copy(CopyData),
    /// Whether peer access between a pair was enabled.
    PeerAccess(bool),
    /// A SHA-256 digest, hex.
    Sha256(String),
    /// Words for people (a precision, where host memory was placed): never read as a number.
    Text(String),
}

/// What the data check of one copy measurement found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CopyData {
    Intact,
    Wrong,
    /// The backend did not check this copy's data.
    NotChecked,
}

impl CopyData {
    /// As the report words it.
    pub fn describe(self) -> &'static str {
        match self {
            CopyData::Intact => "intact",
            CopyData::Wrong => "wrong data",
            CopyData::NotChecked => "not checked",
        }
    }
}

impl FactValue {
    /// The value for people.
    pub fn describe(&self) -> String {
        match self {
            FactValue::Count(n) => n.to_string(),
            FactValue::Elements { wrong, checked } => format!("{wrong} of {checked} wrong"),
            FactValue::Copy(c) => c.describe().to_string(),
            FactValue::PeerAccess(true) => "enabled".into(),
            FactValue::PeerAccess(false) => "disabled".into(),
            FactValue::Sha256(h) | FactValue::Text(h) => h.clone(),
        }
    }

    pub fn count(&self) -> Option<u64> {
        match self {
            FactValue::Count(n) => Some(*n),
            _ => None,
        }
    }

    /// A fact as evidence of format 2 and older wrote it (text), read into its type by its name,
    /// as those versions wrote each: "3/1024" wrong elements, whole-number counts, "intact" /
    /// "wrong data" / "not checked" copy checks, "disabled" peer access. Text that is none of
    /// those stays text (a malformed count is shown, and never counted as good data).
    pub fn from_legacy(name: &str, text: &str) -> FactValue {
        let whole = |t: &str| digits(t.trim());
        let typed = match name {
            "wrong_elements" => text.split_once('/').and_then(|(w, c)| {
                Some(FactValue::Elements {
                    wrong: whole(w)?,
                    checked: whole(c)?,
                })
            }),
            "ranks" | "bytes_moved" | "gradient_bytes" => whole(text).map(FactValue::Count),
            "peer_access" if text == "disabled" => Some(FactValue::PeerAccess(false)),
            "params_sha256" => Some(FactValue::Sha256(text.to_string())),
            n if n.ends_with("_data") => match text {
                "intact" => Some(FactValue::Copy(CopyData::Intact)),
                "wrong data" => Some(FactValue::Copy(CopyData::Wrong)),
                "not checked" => Some(FactValue::Copy(CopyData::NotChecked)),
                _ => None,
            },
            _ => None,
        };
        typed.unwrap_or_else(|| FactValue::Text(text.to_string()))
    }
}

impl<'de> Deserialize<'de> for Fact {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Value {
            Legacy(String),
            Typed(FactValue),
        }
        #[derive(Deserialize)]
        struct Raw {
            name: String,
            subject: Subject,
            value: Value,
        }
        let r = Raw::deserialize(d)?;
        let value = match r.value {
            Value::Legacy(t) => FactValue::from_legacy(&r.name, &t),
            Value::Typed(v) => v,
        };
        Ok(Fact {
            name: r.name,
            subject: r.subject,
            value,
        })
    }
}

/// One judgement: a subject against a threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub status: Status,
    /// Whom it is about: a GPU, a pair, a link, a collective at a size, the node. Text in
    /// evidence of format 2 and older, read into fields (see [`Subject::from_legacy_text`]).
    #[serde(deserialize_with = "subject_or_legacy_text")]
    pub subject: Subject,
    /// What was found, with its unit.
    pub found: String,
    /// What was expected: the threshold applied.
    pub expected: String,
    /// One sentence that says why (names the GPU, pair or link).
    pub reason: String,
    /// The metric judged, when the finding is about one ("h2d", "p2p_read", "busbw").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// Information, not a judgement: a figure shown for its own sake that no threshold applies
    /// to (a training run's share of exposed communication). It cannot fail, so it is not
    /// counted among the judgements of its check, and its status says nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub info: bool,
    /// The absolute limit the figure was held against, in its unit, when the finding judges one
    /// figure against the suite's floor or ceiling (what `expected` says in words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<crate::suite::Limit>,
}

impl Finding {
    /// Tag the finding with the metric it judges.
    pub fn on(mut self, metric: &str) -> Self {
        self.metric = Some(metric.to_string());
        self
    }

    /// Mark the finding as information rather than a judgement (see [`Finding::info`]).
    pub fn informational(mut self) -> Self {
        self.info = true;
        self
    }

    /// A judgement: something that could have failed.
    pub fn is_judgement(&self) -> bool {
        !self.info && self.status != Status::Skip
    }
}

/// A check as run: its plan, measurements, facts and findings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckRecord {
    /// Stable key: "host_bandwidth", "collective.all_reduce".
    pub id: String,
    /// Check kind: topology, virtualization, health, host_bandwidth, p2p_bandwidth,
    /// p2p_latency, collective, compute, training, network, fabric, baseline; and "watch" for
    /// the record of what the reading after the last check found (`checks::during`).
    pub kind: String,
    pub title: String,
    pub status: Status,
    /// One line: why this status.
    pub summary: String,
    /// What was planned (GPUs, pairs, sizes).
    pub plan: Vec<String>,
    pub metrics: Vec<Metric>,
    pub facts: Vec<Fact>,
    pub findings: Vec<Finding>,
    /// How many of the readings this check needed the platform gave. Absent in evidence written
    /// before coverage was recorded, and for a check that was skipped or could not measure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<Coverage>,
    pub started_at: DateTime<Utc>,
    /// Wall time of the check, seconds.
    pub duration_s: f64,
    /// Set when the suite promised this check's judgement and it could not make one here
    /// (the fabric of a multi-node job whose other nodes never came, or without the job's
    /// key): why. Such a check's skip does not count as kept: the run is incomplete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unjudged: Option<String>,
    /// The re-measure policy as applied: present when the suite allowed this check to measure
    /// again after a miss (`remeasure` above 0). The metrics, facts and findings above are those
    /// of the attempt that decided; the earlier ones are kept here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remeasure: Option<Remeasure>,
}

/// How a check used its re-measure allowance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Remeasure {
    /// Attempts allowed in all: 1 + the suite's `remeasure`.
    pub allowed: u32,
    /// The attempt that decided the check's status (1-based): the last one taken.
    pub decided_by: u32,
    /// Why no further attempt was taken after a miss although one was allowed (wrong data is
    /// never re-measured). None when the last attempt did not miss or the attempts ran out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// The attempts before the deciding one, in order: each missed.
    #[serde(default)]
    pub earlier: Vec<Attempt>,
}

/// One earlier attempt of a check, kept whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1-based.
    pub attempt: u32,
    pub status: Status,
    pub summary: String,
    pub metrics: Vec<Metric>,
    pub facts: Vec<Fact>,
    pub findings: Vec<Finding>,
    /// Wall time of the attempt, seconds.
    pub duration_s: f64,
}

/// How much of what a check set out to judge it could judge: each judgement counts as one
/// reading available, each "not available here" finding as one that was not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    /// Readings the platform gave, each judged against its limit.
    pub available: usize,
    /// Readings the check needed: the available ones and those the platform did not give.
    pub total: usize,
}

impl Coverage {
    /// Some reading the check needed was not available: a pass is then only a partial one.
    pub fn partial(&self) -> bool {
        self.available < self.total
    }
}

impl CheckRecord {
    pub fn metric(&self, name: &str, subject: &Subject) -> Option<&Metric> {
        self.metrics
            .iter()
            .find(|m| m.name == name && &m.subject == subject)
    }

    pub fn fact(&self, name: &str, subject: &Subject) -> Option<&Fact> {
        self.facts
            .iter()
            .find(|f| f.name == name && &f.subject == subject)
    }

    /// Some reading this check needed was not available (see [`Coverage`]).
    pub fn partial(&self) -> bool {
        self.coverage.is_some_and(|c| c.partial())
    }
}

/// The suite as used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteRecord {
    pub name: String,
    pub description: String,
    /// The file given, or "embedded:NAME".
    pub origin: String,
    /// SHA-256 of that file.
    pub sha256: String,
    /// Files of the `extends` chain, the given one first.
    pub chain: Vec<String>,
    /// The suite after inheritance and defaults, exactly as applied.
    pub resolved: crate::suite::Suite,
}

/// Where and how the run happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Environment {
    pub os: String,
    pub kernel: Option<String>,
    pub cpu_model: Option<String>,
    pub command_line: Vec<String>,
    /// The batch job this run was a task of, when a scheduler started it (Slurm, or a
    /// Kubernetes Indexed Job): which fleet run it belongs to, and its rank there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobRecord>,
    /// Variables nodecert removed from its own environment before CUDA started, as they were:
    /// each would have changed a figure (`platform::cuda_env`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cuda_env_set_aside: Vec<crate::platform::cuda_env::SetAside>,
}

/// A scheduler's job, as its task saw it in its environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// "slurm" or "kubernetes".
    pub scheduler: String,
    /// The job id (`SLURM_JOB_ID`; the Job's name on Kubernetes).
    pub id: String,
    /// This task's rank in the job (`SLURM_PROCID`; the completion index on Kubernetes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u64>,
    /// How many tasks the job has (`SLURM_NTASKS`; the Job's completions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<u64>,
    /// The node the scheduler ran this task on (`SLURMD_NODENAME`; the pod's node name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// Simulation parameters, present only for simulated runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimulationRecord {
    /// Name of the simulated node description.
    pub node: String,
    pub seed: u64,
    /// Faults injected, as `--inject` spells them.
    pub faults: Vec<String>,
    /// The name this node of a simulated fleet was given (`--node-name`): its host name, from
    /// which its GPUs' serials and UUIDs derive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
}

/// The verdict of a run, judged against what its suite promised, not against the checks that
/// happen to be present. From most to least decisive: a measurement error (the node could not be
/// tested) wins over a failure, a failure over an unfinished run (what ran already failed), an
/// unfinished run over one that judged nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every promised check ran, at least one judgement was made, and each one held (warnings
    /// and skips allowed).
    Pass,
    /// A judgement did not hold.
    Fail,
    /// A measurement failed: the node could not be tested.
    Error,
    /// The run did not finish: it is still running, was interrupted, or promised checks left no
    /// record.
    Incomplete,
    /// Every check ran but none could judge anything here (all skipped).
    NothingJudged,
    /// Every judgement made held, but a promised check missed readings the platform did not
    /// give ("not available here"): the judgements on them were never made.
    Partial,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Error => "ERROR",
            Verdict::Incomplete => "INCOMPLETE",
            Verdict::NothingJudged => "NOTHING JUDGED",
            Verdict::Partial => "PARTIAL",
        }
    }

    /// The documented exit code of a run with this verdict (`error::exit`).
    pub fn exit_code(self) -> u8 {
        use crate::error::exit;
        match self {
            Verdict::Pass => exit::PASS,
            Verdict::Fail => exit::CHECK_FAILED,
            Verdict::Error => exit::NODE_UNTESTABLE,
            Verdict::Incomplete => exit::INCOMPLETE,
            Verdict::NothingJudged => exit::NOTHING_JUDGED,
            Verdict::Partial => exit::PARTIAL,
        }
    }

    /// Lowercase words, as a sentence or a label value says it: "incomplete", "nothing judged".
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Error => "error",
            Verdict::Incomplete => "incomplete",
            Verdict::NothingJudged => "nothing judged",
            Verdict::Partial => "partial",
        }
    }

    /// Every verdict, for exporters that list them all.
    pub const ALL: [Verdict; 6] = [
        Verdict::Pass,
        Verdict::Fail,
        Verdict::Error,
        Verdict::Incomplete,
        Verdict::NothingJudged,
        Verdict::Partial,
    ];

    /// The serialized name: "pass", "nothing_judged".
    pub fn key(self) -> &'static str {
        match self {
            Verdict::NothingJudged => "nothing_judged",
            v => v.words(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    /// Checks are still being run (or the run was interrupted).
    Running,
    Complete,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Always "nodecert-evidence".
    pub format: String,
    pub format_version: u32,
    pub nodecert_version: String,
    /// True when the figures come from a simulated node: never a certification of hardware.
    pub simulated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulation: Option<SimulationRecord>,
    pub backend: BackendInfo,
    pub suite: SuiteRecord,
    pub node: Inventory,
    pub environment: Environment,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub state: RunState,
    /// Overall verdict, judged against the suite's promise ([`Evidence::assess`]). Readers
    /// recompute it rather than trust it.
    pub verdict: Verdict,
    /// Promised checks that left no record (the run did not finish). Readers recompute it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub never_ran: Vec<String>,
    pub checks: Vec<CheckRecord>,
}

impl Evidence {
    /// Worst status over all checks; `Skip` when there is none (nothing was judged).
    pub fn worst(&self) -> Status {
        self.checks
            .iter()
            .map(|c| c.status)
            .max()
            .unwrap_or(Status::Skip)
    }

    /// The ids of the checks the suite promised (from the resolved suite in the evidence).
    pub fn promised(&self) -> Vec<String> {
        self.suite.resolved.promised_checks()
    }

    /// Promised checks without a record, in the order they would have run.
    pub fn missing_checks(&self) -> Vec<String> {
        self.promised()
            .into_iter()
            .filter(|id| self.check(id).is_none())
            .collect()
    }

    /// The run finished: state complete and every promised check has a record.
    pub fn finished(&self) -> bool {
        self.state == RunState::Complete && self.missing_checks().is_empty()
    }

    /// Promised checks that ran but could not make the judgement promised of them (their
    /// record's `unjudged`), with why.
    pub fn unjudged(&self) -> Vec<(&str, &str)> {
        let promised = self.promised();
        self.checks
            .iter()
            .filter(|c| promised.contains(&c.id))
            .filter_map(|c| c.unjudged.as_deref().map(|why| (c.id.as_str(), why)))
            .collect()
    }

    /// Every promised judgement was made or was not the node's to make: finished, and no
    /// promised check left unjudged.
    pub fn kept_promise(&self) -> bool {
        self.finished() && self.unjudged().is_empty()
    }

    /// Whether any check made a judgement (a finding that could have failed, or a measurement
    /// error). A note ("not part of the fabric") judges nothing, whatever its status.
    pub fn judged_anything(&self) -> bool {
        self.checks.iter().any(|c| {
            c.status == Status::Error
                || c.findings
                    .iter()
                    .any(|f| f.is_judgement() || f.status == Status::Error)
        })
    }

    /// Promised checks that judged with readings missing (their coverage is partial), with how
    /// many of how many readings they had; and the record of the reading after the last check
    /// ([`CLOSING_RECORD`]) where it left readings unjudged.
    pub fn partial_checks(&self) -> Vec<(&str, Coverage)> {
        let promised = self.promised();
        self.checks
            .iter()
            .filter(|c| promised.contains(&c.id) || c.id == CLOSING_RECORD)
            .filter_map(|c| {
                c.coverage
                    .filter(|x| x.partial())
                    .map(|x| (c.id.as_str(), x))
            })
            .collect()
    }

    /// The verdict, from the suite's promise: error, else fail, else incomplete (the run did not
    /// finish), else nothing judged (no check could judge anything), else partial (a check
    /// missed readings), else pass.
    pub fn assess(&self) -> Verdict {
        match self.worst() {
            Status::Error => Verdict::Error,
            Status::Fail => Verdict::Fail,
            _ if !self.kept_promise() => Verdict::Incomplete,
            _ if !self.judged_anything() => Verdict::NothingJudged,
            _ if !self.partial_checks().is_empty() => Verdict::Partial,
            _ => Verdict::Pass,
        }
    }

    /// Set `verdict` and `never_ran` from the records.
    pub fn update_verdict(&mut self) {
        self.never_ran = self.missing_checks();
        self.verdict = self.assess();
        self.settle_format_version();
    }

    /// Raise `format_version` to the oldest that can hold what this evidence holds (a record
    /// with `unjudged`, a subject naming a partitioning, a partial verdict, a GPU whose XID
    /// history could not be read): never written as a version whose readers would misread it.
    pub fn settle_format_version(&mut self) {
        self.format_version = self.format_version.max(self.version_needed());
    }

    /// The oldest format that can hold what this evidence states: a record with `unjudged`
    /// (4), a subject naming a partitioning (5), the verdict `partial` or a GPU naming
    /// `xid_history` (6); 1 when it states none of them.
    pub fn version_needed(&self) -> u32 {
        self.version_needed_by(true)
    }

    /// [`Evidence::version_needed`], counting a GPU that names `xid_history` only when
    /// `xid_history`: development builds of 2026-12-03 wrote that name into files of version 3
    /// and 5, which this nodecert reads (it knows the name).
    fn version_needed_by(&self, xid_history: bool) -> u32 {
        let xid_history = xid_history
            && self.node.gpus.iter().any(|g| {
                g.unavailable
                    .contains(&crate::inventory::Reading::XidHistory)
            });
        let closing_partial = self
            .checks
            .iter()
            .any(|c| c.id == CLOSING_RECORD && c.partial());
        let nvlink_state = self.node.gpus.iter().any(|g| {
            g.unavailable
                .contains(&crate::inventory::Reading::NvlinkState)
        });
        let identity = self.node.gpus.iter().any(|g| {
            g.unavailable.iter().any(|r| {
                matches!(
                    r,
                    crate::inventory::Reading::Model | crate::inventory::Reading::Memory
                )
            })
        });
        if identity {
            IDENTITY_FORMAT_VERSION
        } else if (self.verdict == Verdict::Partial && closing_partial) || nvlink_state {
            CLOSING_FORMAT_VERSION
        } else if self.verdict == Verdict::Partial || xid_history {
            PARTIAL_FORMAT_VERSION
        } else if self.names_a_method() {
            METHOD_FORMAT_VERSION
        } else if self.checks.iter().any(|c| c.unjudged.is_some()) {
            UNJUDGED_FORMAT_VERSION
        } else {
            1
        }
    }

    /// Whether any metric, fact or finding is about a partitioning of the training run.
    fn names_a_method(&self) -> bool {
        self.checks.iter().any(|c| {
            c.metrics.iter().any(|m| m.subject.method.is_some())
                || c.facts.iter().any(|f| f.subject.method.is_some())
                || c.findings.iter().any(|f| f.subject.method.is_some())
        })
    }

    /// Why this run cannot be signed as a plain certificate: it did not finish, or it judged
    /// nothing. `None` when it can (whatever its verdict: a failure is a result too).
    pub fn shortfall(&self) -> Option<Verdict> {
        if !self.kept_promise() {
            Some(Verdict::Incomplete)
        } else if self.assess() == Verdict::NothingJudged {
            Some(Verdict::NothingJudged)
        } else {
            None
        }
    }

    /// One sentence on what the run left undone, for reports and messages: unfinished, nothing
    /// judged, or partial; `None` when it finished and made every judgement it promised.
    pub fn shortfall_text(&self) -> Option<String> {
        let Some(shortfall) = self.shortfall() else {
            return self.partial_text();
        };
        match shortfall {
            Verdict::NothingJudged => Some(
                "nothing judged: every check was skipped, so nothing about this node was checked"
                    .into(),
            ),
            _ => {
                let missing = self.missing_checks();
                let promised = self.promised().len();
                let unjudged = self.unjudged();
                Some(if self.finished() && !unjudged.is_empty() {
                    let what: Vec<String> = unjudged
                        .iter()
                        .map(|(id, why)| format!("{id} ({why})"))
                        .collect();
                    format!(
                        "incomplete: {} of {promised} promised checks could not judge here: {}",
                        unjudged.len(),
                        what.join("; ")
                    )
                } else if missing.is_empty() {
                    "incomplete: the run did not finish (its evidence was never closed)".into()
                } else {
                    format!(
                        "incomplete: the run did not finish; {} of {promised} promised checks never ran: {}",
                        missing.len(),
                        missing.join(", ")
                    )
                })
            }
        }
    }

    /// "partial: 1 of 8 promised checks left readings unjudged: health (57 of 65 judged)", when
    /// the verdict is partial.
    pub fn partial_text(&self) -> Option<String> {
        if self.assess() != Verdict::Partial {
            return None;
        }
        let (closing, partial): (Vec<_>, Vec<_>) = self
            .partial_checks()
            .into_iter()
            .partition(|(id, _)| *id == CLOSING_RECORD);
        let what: Vec<String> = partial
            .iter()
            .map(|(id, c)| format!("{id} ({} of {} judged)", c.available, c.total))
            .collect();
        let mut said = Vec::new();
        if !partial.is_empty() {
            said.push(format!(
                "{} of {} promised checks left readings unjudged: {}",
                partial.len(),
                self.promised().len(),
                what.join(", ")
            ));
        }
        if let Some((_, c)) = closing.first() {
            said.push(format!(
                "the reading after the checks left readings unjudged ({} of {} judged)",
                c.available, c.total
            ));
        }
        Some(format!("partial: {}", said.join("; ")))
    }

    pub fn check(&self, id: &str) -> Option<&CheckRecord> {
        self.checks.iter().find(|c| c.id == id)
    }

    /// Write as [`EVIDENCE_FILE`] into the report folder `dir`, atomically (a temp file there,
    /// then rename; see [`crate::fsio::write`]), through its open handle and only while its path
    /// still names it ([`crate::fsio::write::Dir::check_in_place`]).
    /// Refuses evidence holding a figure that is not a finite number (JSON has no NaN: it would
    /// be written as `null` and the file could no longer be read); the runner turns such
    /// figures into error findings before this, so this is a last guard.
    pub fn write(&self, dir: &crate::fsio::write::Dir) -> std::io::Result<()> {
        if let Some(what) = self.non_finite() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("refusing to write evidence that could not be read back: {what} is not a finite number"),
            ));
        }
        dir.replace_in_place(EVIDENCE_FILE.as_ref(), self.to_json()?.as_bytes())
    }

    /// The evidence as written: JSON indented one space a level, every array of numbers (the
    /// samples) on one line, so that an 8-GPU node's evidence stays under 1 MB and readable.
    pub fn to_json(&self) -> std::io::Result<String> {
        let mut buf = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(
            &mut buf,
            serde_json::ser::PrettyFormatter::with_indent(b" "),
        );
        serde::Serialize::serialize(self, &mut ser).map_err(std::io::Error::other)?;
        let text = String::from_utf8(buf).map_err(std::io::Error::other)?;
        Ok(inline_number_arrays(&text) + "\n")
    }

    /// The first figure that is not a finite number, named; None when every figure is one.
    pub fn non_finite(&self) -> Option<String> {
        for c in &self.checks {
            if !c.duration_s.is_finite() {
                return Some(format!("the duration of check {}", c.id));
            }
            for m in &c.metrics {
                let values = [m.median, m.min, m.max];
                if values.iter().chain(&m.samples).any(|v| !v.is_finite()) {
                    return Some(format!(
                        "the {} figure of {} in check {}",
                        m.name,
                        m.subject.describe(),
                        c.id
                    ));
                }
            }
        }
        for g in &self.node.gpus {
            let values = [g.power_limit_w, g.temperature_c];
            let ages = g.xids.iter().map(|x| x.age_s);
            if values
                .into_iter()
                .chain(ages)
                .flatten()
                .any(|v| !v.is_finite())
            {
                return Some(format!("a reading of GPU {}", g.index));
            }
        }
        None
    }

    /// The evidence file meant by `p`: `p` itself, or `p/evidence.json` when `p` is a report folder.
    pub fn path_in(p: &Path) -> std::path::PathBuf {
        if p.is_dir() {
            p.join(EVIDENCE_FILE)
        } else {
            p.to_path_buf()
        }
    }

    /// Read and check the format version.
    pub fn read(path: &Path) -> Result<Evidence, String> {
        Ok(Evidence::read_text(path)?.0)
    }

    /// [`Evidence::read`], and the text it was read from: what a signer judges must be the
    /// bytes it signs, read once.
    pub fn read_text(path: &Path) -> Result<(Evidence, String), String> {
        let text = crate::fsio::read::read_to_string(path, crate::fsio::read::Kind::Evidence)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let ev = Evidence::from_text(path, &text)?;
        Ok((ev, text))
    }

    /// [`Evidence::read`], and the digest of the resolved suite as the file holds it (see
    /// [`crate::suite::resolved_sha256`]): what the node's nodecert wrote, not what this one
    /// would write of it; and the SHA-256 of the file as read. The file itself, never a link at
    /// `path` (a node's folder in a fleet's shared folder: a link swapped in after the folder
    /// was looked at is not followed).
    pub fn read_with_suite_digest(path: &Path) -> Result<(Evidence, String, String), String> {
        let text =
            crate::fsio::read::read_to_string_no_link(path, crate::fsio::read::Kind::Evidence)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let file = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(text.as_bytes()));
        let (ev, suite) = Evidence::parse_text(path, &text)?;
        Ok((ev, suite, file))
    }

    /// The evidence in `text`, read from `path` (named in errors), checked as [`Evidence::read`]
    /// checks it.
    pub fn from_text(path: &Path, text: &str) -> Result<Evidence, String> {
        Ok(Evidence::parse_text(path, text)?.0)
    }

    /// [`Evidence::from_text`], and the digest of its resolved suite as written.
    fn parse_text(path: &Path, text: &str) -> Result<(Evidence, String), String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            format!(
                "{}:{}:{}: not JSON: {e}",
                path.display(),
                e.line(),
                e.column()
            )
        })?;
        if v.get("format").and_then(|f| f.as_str()) != Some(FORMAT_NAME) {
            return Err(format!(
                "{}: not a nodecert evidence file (no \"format\": \"{FORMAT_NAME}\")",
                path.display()
            ));
        }
        check_format_version(path, text)?;
        let simulated = simulated_status(&v).map_err(|e| {
            format!(
                "{}: invalid evidence: {e}; refusing a file whose records disagree",
                path.display()
            )
        })?;
        let digest = crate::suite::value_sha256(
            v.get("suite")
                .and_then(|x| x.get("resolved"))
                .unwrap_or(&serde_json::Value::Null),
        );
        drop(v);
        // From the text again, not from `v`: only then does an error know its line and column.
        let mut ev: Evidence = parse(text).map_err(|e| format!("{}:{e}", path.display()))?;
        if let Some(s) = simulated {
            ev.simulated = s;
        }
        ev.check_bounds()
            .map_err(|e| format!("{}: invalid evidence: {e}", path.display()))?;
        ev.check_records_agree().map_err(|e| {
            format!(
                "{}: invalid evidence: {e}; refusing a file whose records disagree",
                path.display()
            )
        })?;
        // What it states (before its verdict is computed again) must be what its version can
        // hold: no nodecert wrote a version-3 file saying "partial" or holding `unjudged`.
        let needed = ev.version_needed_by(false);
        if ev.format_version < needed {
            return Err(format!(
                "{}: invalid evidence: format version {} cannot hold what it states, which needs version {needed}; refusing a file whose records disagree",
                path.display(),
                ev.format_version
            ));
        }
        // The stored verdict is a claim; the records are the facts (a version-1 file said pass
        // for a run that never finished).
        ev.update_verdict();
        Ok((ev, digest))
    }
}

/// The verdict the evidence file at `path` states (None where it states none, as a run
/// interrupted before its first check may), as opposed to the one its records give, which
/// [`Evidence::read`] computes. Read bounded, as [`Evidence::read`] reads it.
pub fn stated_verdict(path: &Path) -> Result<Option<Verdict>, String> {
    let text = crate::fsio::read::read_to_string(path, crate::fsio::read::Kind::Evidence)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    stated_verdict_in(path, &text)
}

/// [`stated_verdict`] of the evidence text `text`, read from `path`.
pub fn stated_verdict_in(path: &Path, text: &str) -> Result<Option<Verdict>, String> {
    #[derive(Deserialize)]
    struct Stated {
        #[serde(default)]
        verdict: Option<Verdict>,
    }
    serde_json::from_str::<Stated>(text)
        .map(|s| s.verdict)
        .map_err(|e| format!("{}: {e}", path.display()))
}

impl Evidence {
    /// Each check's stated status and coverage against its own findings: the verdict is computed
    /// again from the records' statuses, so a record that states PASS while a finding of it
    /// fails (or a full coverage while a finding is "not available here", in a version that
    /// records coverage) would make a certificate say what its findings do not.
    fn check_records_agree(&self) -> Result<(), String> {
        for c in &self.checks {
            let (derived, _, coverage) = crate::runner::summarize_with_coverage(&c.findings);
            let judged = c.findings.iter().any(Finding::is_judgement);
            if judged && derived > c.status {
                return Err(format!(
                    "check {} states {} but its findings make it {}",
                    crate::console::visible(&c.id),
                    c.status.label(),
                    derived.label()
                ));
            }
            let partial = coverage.is_some_and(|x| x.partial());
            if self.format_version >= PARTIAL_FORMAT_VERSION
                && c.status != Status::Error
                && partial
                && !c.partial()
            {
                return Err(format!(
                    "check {} states full coverage but its findings leave readings unjudged",
                    crate::console::visible(&c.id)
                ));
            }
        }
        Ok(())
    }
}

/// The most check records evidence may hold: a suite promises at most 16 (five collectives
/// among them), so this leaves room for checks to come.
pub const MAX_CHECKS: usize = 64;

impl Evidence {
    /// What no node nodecert reads can hold: more GPUs, pairs, links or NICs than a suite may
    /// state. Reports are drawn GPU by GPU and pair by pair; a file past these would make
    /// `render`, `diff` or `fleet` work for hours (a matrix of 20,000 GPUs is 4x10^8 cells).
    fn check_bounds(&self) -> Result<(), String> {
        use crate::suite::{MAX_GPUS, MAX_NVLINKS_PER_GPU, MAX_PAIRS};
        let n = &self.node;
        let nics = n.fabric.as_ref().map_or(0, |f| f.nics.len());
        let links = n.gpus.iter().map(|g| g.nvlinks.len()).max().unwrap_or(0);
        for (what, count, most) in [
            ("GPUs", n.gpus.len(), MAX_GPUS),
            ("lost GPUs", n.lost_gpus.len(), MAX_GPUS),
            ("GPU pairs", n.pairs.len(), MAX_PAIRS),
            ("NVLinks of one GPU", links, MAX_NVLINKS_PER_GPU as usize),
            ("NICs", nics, crate::platform::nic::MAX_NICS),
            ("check records", self.checks.len(), MAX_CHECKS),
        ] {
            if count > most {
                return Err(format!(
                    "{count} {what}, more than any node nodecert reads has (at most {most})"
                ));
            }
        }
        // One record a check and one figure a metric and subject, as nodecert writes them:
        // a second would be a second answer to one question (the fleet's table and the
        // exports would show one of them, the verdict the other).
        let mut ids = std::collections::HashSet::new();
        for c in &self.checks {
            // Ids are nodecert's own ("collective.all_reduce", "after-checks"): they reach file
            // names, taints and drain reasons, so one that could carry anything else is refused.
            if !is_check_id(&c.id) {
                return Err(format!(
                    "a check record's id {} is not a check id (1 to 64 lowercase letters, digits, \
                     '_', '.' or '-')",
                    crate::console::visible(&format!("{:?}", c.id))
                ));
            }
            if !ids.insert(c.id.as_str()) {
                return Err(format!(
                    "two records of the check {}",
                    crate::console::visible(&c.id)
                ));
            }
            let mut figures = std::collections::HashSet::new();
            for m in &c.metrics {
                if !figures.insert((m.name.as_str(), &m.subject)) {
                    return Err(format!(
                        "check {}: two figures of {} for {}",
                        crate::console::visible(&c.id),
                        crate::console::visible(&m.name),
                        crate::console::visible(&m.subject.describe())
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Whether `id` has the form of the ids nodecert gives its check records: 1 to 64 of lowercase
/// ASCII letters, digits, '_', '.' and '-'.
pub fn is_check_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b))
}

/// Parse evidence text; an error says "line:column: invalid evidence: " and names the field by
/// its path in the file (`checks[2].metrics[0].median`). A `null` where a number belongs (older
/// nodecerts wrote a figure that was not a number so) is said in those words.
fn parse(text: &str) -> Result<Evidence, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    let out: Result<Evidence, _> = serde_path_to_error::deserialize(&mut de);
    let ev = out.map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        let (line, column) = (inner.line(), inner.column());
        let what = inner.to_string();
        let what = what.split(" at line ").next().unwrap_or(&what).to_string();
        let what = if what.starts_with("invalid type: null, expected f64")
            || what.starts_with("invalid type: null, expected u")
            || what.starts_with("invalid type: null, expected i")
        {
            format!(
                "{field} is null where a number belongs (a figure that was not a number, written \
                 by an older nodecert?): this file cannot be read"
            )
        } else if field.is_empty() || field == "." {
            what
        } else {
            format!("{what} (at {field})")
        };
        format!("{line}:{column}: invalid evidence: {what}")
    })?;
    de.end()
        .map_err(|e| format!("{}:{}: invalid evidence: {e}", e.line(), e.column()))?;
    Ok(ev)
}

/// The evidence's `format_version`: a whole number from 1 to [`FORMAT_VERSION`]; anything else
/// is refused with its line and column (read from the text, so serde_json knows where it is).
fn check_format_version(path: &Path, text: &str) -> Result<(), String> {
    struct Version;
    impl<'de> serde::Deserialize<'de> for Version {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(Version)
        }
    }
    impl serde::de::Visitor<'_> for Version {
        type Value = Version;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "a whole number from 1 to {FORMAT_VERSION}")
        }
        fn visit_u64<E: serde::de::Error>(self, x: u64) -> Result<Version, E> {
            match x {
                0 => Err(E::custom("0 is not a version: evidence formats start at 1")),
                x if x > u64::from(FORMAT_VERSION) => Err(E::custom(format!(
                    "{x} is newer than this nodecert reads ({FORMAT_VERSION}); use a newer \
                     nodecert"
                ))),
                _ => Ok(Version),
            }
        }
    }
    #[derive(serde::Deserialize)]
    struct Header {
        format_version: Option<Version>,
    }
    match serde_json::from_str::<Header>(text) {
        Ok(Header {
            format_version: Some(_),
        }) => Ok(()),
        Ok(Header {
            format_version: None,
        }) => Err(format!(
            "{}: no format_version (every nodecert evidence file has one)",
            path.display()
        )),
        Err(e) => Err(format!(
            "{}:{}:{}: format_version: {}",
            path.display(),
            e.line(),
            e.column(),
            // serde_json appends " at line L column C"; the location leads instead.
            e.to_string()
                .rsplit_once(" at line ")
                .map_or(e.to_string(), |(m, _)| m.to_string())
        )),
    }
}

/// Whether an evidence file's figures are simulated, from every record that says so: the
/// top-level `simulated`, `backend.simulated`, the backend's name ("simulated node ..."), the
/// `simulation` record, and a `--simulate` on the recorded command line. `Ok(None)` when no record
/// says; an error naming each record when they disagree (one edited field cannot turn simulated
/// figures into a certification of hardware, nor the reverse).
pub fn simulated_status(v: &serde_json::Value) -> Result<Option<bool>, String> {
    let mut said: Vec<(String, bool)> = Vec::new();
    match v.get("simulated") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::Bool(b)) => said.push((format!("\"simulated\" is {b}"), *b)),
        Some(_) => return Err("top-level \"simulated\" is not a boolean".into()),
    }
    if let Some(backend) = v.get("backend") {
        match backend.get("simulated") {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Bool(b)) => {
                said.push((format!("backend.simulated is {b}"), *b))
            }
            Some(_) => return Err("backend.simulated is not a boolean".into()),
        }
        if let Some(name) = backend.get("name").and_then(|n| n.as_str()) {
            let sim = name.starts_with("simulated");
            said.push((
                format!(
                    "the backend is {name:?} ({})",
                    if sim {
                        "the simulator"
                    } else {
                        "real hardware"
                    }
                ),
                sim,
            ));
        }
    }
    if let Some(sim) = v.get("simulation").filter(|s| !s.is_null()) {
        let node = sim.get("node").and_then(|n| n.as_str()).unwrap_or("?");
        said.push((
            format!("a simulation record is present (node {node})"),
            true,
        ));
    }
    let simulate_flag = v
        .pointer("/environment/command_line")
        .and_then(|c| c.as_array())
        .is_some_and(|args| {
            args.iter()
                .filter_map(|a| a.as_str())
                .any(|a| a == "--simulate" || a.starts_with("--simulate="))
        });
    if simulate_flag {
        said.push(("the command line has --simulate".into(), true));
    }
    let Some((_, first)) = said.first() else {
        return Ok(None);
    };
    if said.iter().all(|(_, b)| b == first) {
        return Ok(Some(*first));
    }
    let (sim, real): (Vec<_>, Vec<_>) = said.into_iter().partition(|(_, b)| *b);
    let names =
        |l: Vec<(String, bool)>| l.into_iter().map(|(s, _)| s).collect::<Vec<_>>().join(", ");
    Err(format!(
        "inconsistent simulated status: {} (simulated), but {} (not simulated)",
        names(sim),
        names(real)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::CollectiveOp;

    /// A record that states a better status than its findings give, or full coverage where a
    /// finding is "not available here", is refused when read: the verdict is computed from the
    /// records' statuses, so it would otherwise say what the findings do not.
    #[test]
    fn a_record_that_states_better_than_its_findings_is_refused() {
        let p = Path::new("r/evidence.json");
        let read = |ev: &Evidence| Evidence::from_text(p, &ev.to_json().unwrap());
        let failed =
            crate::testutil::simulated("h200-vm-1", &["slow-host-bandwidth:gpu=0,factor=0.5"]);
        let back = read(&failed).unwrap();
        assert_eq!(back.verdict, Verdict::Fail);
        let mut forged = failed.clone();
        let c = forged
            .checks
            .iter_mut()
            .find(|c| c.id == "host_bandwidth")
            .unwrap();
        assert_eq!(c.status, Status::Fail);
        c.status = Status::Pass;
        let e = read(&forged).unwrap_err();
        assert!(
            e.contains("check host_bandwidth states PASS but its findings make it FAIL"),
            "{e}"
        );
        // A warning stated as a pass is refused too.
        c_status(&mut forged, "host_bandwidth", Status::Warn);
        assert!(read(&forged).is_err());

        // Coverage: a check whose findings leave a reading unjudged, stated as full.
        let mut partial = crate::testutil::simulated("h200-vm-1", &[]);
        let c = partial
            .checks
            .iter_mut()
            .find(|c| c.id == "health")
            .unwrap();
        c.findings.push(crate::checks::judge::finding(
            Status::Skip,
            Subject::gpu(0),
            "not available here",
            "a reading",
            "not available here: a reading",
        ));
        let (_, _, cov) = crate::runner::summarize_with_coverage(&c.findings);
        c.coverage = cov;
        partial.format_version = PARTIAL_FORMAT_VERSION;
        partial.update_verdict();
        assert_eq!(read(&partial).unwrap().verdict, Verdict::Partial);
        let c = partial
            .checks
            .iter_mut()
            .find(|c| c.id == "health")
            .unwrap();
        c.coverage = None;
        let e = read(&partial).unwrap_err();
        assert!(e.contains("check health states full coverage"), "{e}");
        // A version from before coverage was recorded is read as it was written.
        partial.format_version = PARTIAL_FORMAT_VERSION - 1;
        partial.verdict = Verdict::Pass;
        assert!(read(&partial).is_ok());
    }

    /// A record's id is one of nodecert's form: one that carries an escape, a line break or a
    /// capital (edited in) is refused, as it would reach drain reasons and taints.
    #[test]
    fn a_check_id_of_another_form_is_refused() {
        let p = Path::new("r/evidence.json");
        let ev = crate::testutil::simulated("h200-vm-1", &[]);
        let every: Vec<&str> = ev.checks.iter().map(|c| c.id.as_str()).collect();
        assert!(every.iter().all(|id| is_check_id(id)), "{every:?}");
        assert!(is_check_id("collective.all_reduce") && is_check_id(CLOSING_RECORD));
        assert!(is_check_id(&"a".repeat(64)) && !is_check_id(&"a".repeat(65)));
        for bad in ["topology\u{1b}[2J", "Health", "a b", "", "a/b", "health\n"] {
            let mut odd = ev.clone();
            odd.checks[0].id = bad.into();
            let e = Evidence::from_text(p, &odd.to_json().unwrap()).unwrap_err();
            assert!(e.contains("is not a check id"), "{bad:?}: {e}");
            assert!(!e.contains('\u{1b}') && !e.contains('\n'), "{e}");
        }
    }

    /// Two records of one check, or two figures of one metric and subject, are refused: the
    /// exports and the fleet's table would show one answer and the verdict the other.
    #[test]
    fn a_second_answer_to_one_question_is_refused() {
        let p = Path::new("r/evidence.json");
        let read = |ev: &Evidence| Evidence::from_text(p, &ev.to_json().unwrap());
        let ev = crate::testutil::simulated("h200-vm-1", &[]);
        assert!(read(&ev).is_ok());
        let mut twice = ev.clone();
        twice.checks.push(ev.checks[0].clone());
        let e = read(&twice).unwrap_err();
        assert!(
            e.contains(&format!("two records of the check {}", ev.checks[0].id)),
            "{e}"
        );
        let mut figures = ev.clone();
        let c = figures
            .checks
            .iter_mut()
            .find(|c| c.id == "host_bandwidth")
            .unwrap();
        let m = c.metrics[0].clone();
        c.metrics.push(m);
        let e = read(&figures).unwrap_err();
        assert!(
            e.contains("check host_bandwidth: two figures of h2d for GPU 0"),
            "{e}"
        );
    }

    /// A fleet reads a node's evidence itself, never through a link put in its place.
    #[test]
    fn the_fleets_read_of_a_nodes_evidence_follows_no_link() {
        let d = tempfile::tempdir().unwrap();
        let ev = crate::testutil::simulated("h200-vm-1", &[]);
        let real = d.path().join("elsewhere.json");
        std::fs::write(&real, ev.to_json().unwrap()).unwrap();
        let (_, _, sha) = Evidence::read_with_suite_digest(&real).unwrap();
        assert_eq!(
            sha,
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
                std::fs::read(&real).unwrap()
            ))
        );
        let link = d.path().join("evidence.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(
            Evidence::read(&link).is_ok(),
            "a path a user gives may be a link"
        );
        let e = Evidence::read_with_suite_digest(&link).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
    }

    fn c_status(ev: &mut Evidence, id: &str, s: Status) {
        ev.checks.iter_mut().find(|c| c.id == id).unwrap().status = s;
    }

    #[test]
    fn every_subject_format_2_wrote_reads_into_its_fields_and_back_into_its_words() {
        let ar = CollectiveOp::AllReduce;
        for (text, want) in [
            ("node", Subject::node()),
            ("GPU 3", Subject::gpu(3)),
            ("GPU 0 -> GPU 5", Subject::pair(0, 5)),
            ("GPU 5 -> GPU 0", Subject::pair(5, 0)),
            ("GPU 0 <-> GPU 5", Subject::both_ways(0, 5)),
            ("GPU 0 - GPU 5", Subject::between(0, 5)),
            ("GPU 2 link 17", Subject::link(2, 17)),
            ("GPUs 4, 5, 6, 7", Subject::group(&[4, 5, 6, 7])),
            ("all_reduce", Subject::op(ar)),
            ("all_reduce 8 GiB", Subject::op_size(ar, 8 << 30)),
            (
                "all_to_all 2 KiB",
                Subject::op_size(CollectiveOp::AllToAll, 2048),
            ),
            ("bridge 0000:17:00.0", Subject::bridge("0000:17:00.0")),
            (
                "GPU 3 (0000:17:00.0)",
                Subject {
                    pci_bus_id: Some("0000:17:00.0".into()),
                    ..Subject::gpu(3)
                },
            ),
            (
                "NVML GPU 3 (0000:17:00.0)",
                Subject {
                    nvml_gpu: Some(3),
                    pci_bus_id: Some("0000:17:00.0".into()),
                    ..Default::default()
                },
            ),
            (
                "NVML GPU 4",
                Subject {
                    nvml_gpu: Some(4),
                    ..Default::default()
                },
            ),
            (
                "a GPU (0000:17:00.0)",
                Subject {
                    pci_bus_id: Some("0000:17:00.0".into()),
                    ..Default::default()
                },
            ),
        ] {
            let s = Subject::from_legacy_text(text);
            assert_eq!(s, want, "{text}");
            assert_eq!(s.describe(), text);
            assert!(s.label.is_none(), "{text}");
        }
        // The replicas a training run named read as a group, shown as groups are now.
        let s = Subject::from_legacy_text("GPU 2, GPU 3");
        assert_eq!(s, Subject::group(&[2, 3]));
        assert_eq!(s.describe(), "GPUs 2, 3");
        // Words that are none of those forms are kept as written, and shown as written.
        for text in [
            "GPU 2 (",
            "GPU 3 ()",
            "GPU +3",
            "foo (0000:17:00.0)",
            "a GPU",
            "GPU x",
            "GPUs 1",
            "all_reduce 1.33 MiB",
            "all_reduce 3 parsecs",
            "GPU 1 -> node",
            "",
        ] {
            let s = Subject::from_legacy_text(text);
            assert_eq!(s.label.as_deref(), Some(text), "{text}");
            assert_eq!(s.describe(), text);
        }
    }

    /// A promised check that could not judge (its record's `unjudged`) leaves the run
    /// incomplete, whatever passed besides, and says so; the file then needs version 4. A
    /// check that failed stays a failure (what was judged failed), marked incomplete on the page.
    /// A run that trained partitioned names its methods, and its file is version 5; one that
    /// did not stays at the base version.
    #[test]
    fn a_subject_naming_a_partitioning_makes_the_file_version_5() {
        let one = crate::testutil::simulated("h200-vm-1", &[]);
        assert_eq!(one.format_version, BASE_FORMAT_VERSION);
        let eight = crate::testutil::simulated("h100-sxm-8", &[]);
        assert_eq!(eight.format_version, METHOD_FORMAT_VERSION);
        let mut ev = one.clone();
        ev.checks[0].facts.push(Fact::new(
            "x",
            Subject::method("tensor-parallel"),
            FactValue::Count(1),
        ));
        ev.update_verdict();
        assert_eq!(ev.format_version, METHOD_FORMAT_VERSION);
        // Written and read back as such.
        let back: Evidence = serde_json::from_str(&ev.to_json().unwrap()).unwrap();
        assert_eq!(back.format_version, METHOD_FORMAT_VERSION);
    }

    #[test]
    fn a_promised_check_left_unjudged_makes_the_run_incomplete_and_the_file_version_4() {
        let done = crate::testutil::simulated("h200-vm-1", &[]);
        assert_eq!(
            (done.assess(), done.format_version),
            (Verdict::Pass, BASE_FORMAT_VERSION)
        );
        let mut ev = done.clone();
        let id = ev.checks[1].id.clone();
        ev.checks[1].unjudged = Some("not measured: rank 2 (n3) did not arrive within 3 s".into());
        assert!(ev.finished() && !ev.kept_promise());
        assert_eq!(
            ev.unjudged(),
            vec![(
                id.as_str(),
                "not measured: rank 2 (n3) did not arrive within 3 s"
            )]
        );
        assert_eq!(ev.assess(), Verdict::Incomplete);
        assert_eq!(ev.shortfall(), Some(Verdict::Incomplete));
        assert_eq!(
            ev.shortfall_text().unwrap(),
            format!(
                "incomplete: 1 of {} promised checks could not judge here: {id} (not measured: rank 2 (n3) did not arrive within 3 s)",
                ev.promised().len()
            )
        );
        ev.update_verdict();
        assert_eq!((ev.verdict, ev.format_version), (Verdict::Incomplete, 4));
        // Written and read back, it says the same.
        let text = serde_json::to_string(&ev).unwrap();
        let back: Evidence = serde_json::from_str(&text).unwrap();
        assert_eq!(back.assess(), Verdict::Incomplete);
        // A record of a check the suite did not promise does not count.
        let mut other = done.clone();
        other.checks[1].id = "not.promised".into();
        other.checks[1].unjudged = Some("why".into());
        assert!(other.unjudged().is_empty());
        // A failure elsewhere still wins: what was judged failed.
        let mut failed = ev.clone();
        failed.checks[0].status = Status::Fail;
        assert_eq!(failed.assess(), Verdict::Fail);
        let v = crate::report::view::build(&failed);
        assert!(v.verdict.starts_with("FAIL, INCOMPLETE"), "{}", v.verdict);
    }

    /// The verdict from the records: every way a run can fall short of a pass, each with its
    /// exit code, on a finished simulated run edited as a crash, an empty run and skipped
    /// checks leave it.
    #[test]
    fn the_verdict_knows_what_ran_and_what_was_judged() {
        use crate::error::exit;
        let done = crate::testutil::simulated("h200-vm-1", &[]);
        let n = done.checks.len();
        assert_eq!(done.promised().len(), n);
        assert!(done.missing_checks().is_empty() && done.finished() && done.judged_anything());
        assert_eq!((done.assess(), done.shortfall()), (Verdict::Pass, None));
        // The last check never ran, though the state says complete: incomplete, and named.
        let mut cut = done.clone();
        let last = cut.checks.pop().unwrap().id;
        assert_eq!(cut.missing_checks(), vec![last.clone()]);
        assert!(!cut.finished());
        assert_eq!(cut.assess(), Verdict::Incomplete);
        cut.update_verdict();
        assert_eq!(
            (cut.verdict, cut.never_ran.clone()),
            (Verdict::Incomplete, vec![last])
        );
        // Every record there, but the run never closed: incomplete too.
        let mut open = done.clone();
        open.state = RunState::Running;
        assert!(!open.finished());
        assert_eq!(open.shortfall(), Some(Verdict::Incomplete));
        // Every check skipped: nothing judged. An error alone is a judgement of the node.
        let mut skipped = done.clone();
        for c in &mut skipped.checks {
            c.status = Status::Skip;
            for f in &mut c.findings {
                f.status = Status::Skip;
            }
        }
        assert!(!skipped.judged_anything());
        assert_eq!(skipped.assess(), Verdict::NothingJudged);
        assert_eq!(skipped.shortfall(), Some(Verdict::NothingJudged));
        let mut one_warn = skipped.clone();
        one_warn.checks[0].findings[0].status = Status::Warn;
        assert!(one_warn.judged_anything());
        assert_eq!(one_warn.assess(), Verdict::Pass);
        let mut errored = skipped.clone();
        errored.checks[0].status = Status::Error;
        assert!(errored.judged_anything());
        assert_eq!(errored.assess(), Verdict::Error);
        // A check that missed readings: partial, unless something worse holds too. A note
        // alone judges nothing.
        let mut partial = done.clone();
        partial.checks[2].coverage = Some(Coverage {
            available: 3,
            total: 4,
        });
        assert_eq!(partial.assess(), Verdict::Partial);
        assert_eq!(
            partial.shortfall(),
            None,
            "a partial run can be signed as what it is"
        );
        assert_eq!(
            partial.shortfall_text().unwrap(),
            format!(
                "partial: 1 of {n} promised checks left readings unjudged: {} (3 of 4 judged)",
                partial.checks[2].id
            )
        );
        partial.update_verdict();
        assert_eq!(partial.verdict, Verdict::Partial);
        assert_eq!(partial.format_version, PARTIAL_FORMAT_VERSION);
        // A reading only format 6 names, whatever the verdict: an older reader must be told
        // the file is newer, not that a word is unknown.
        let mut failed = done.clone();
        failed.checks[0].status = Status::Fail;
        failed.update_verdict();
        assert!(failed.format_version < PARTIAL_FORMAT_VERSION);
        failed.node.gpus[0]
            .unavailable
            .push(crate::inventory::Reading::XidHistory);
        failed.update_verdict();
        assert_eq!(
            (failed.verdict, failed.format_version),
            (Verdict::Fail, PARTIAL_FORMAT_VERSION)
        );
        let mut whole = partial.clone();
        whole.checks[2].coverage = Some(Coverage {
            available: 4,
            total: 4,
        });
        assert_eq!(whole.assess(), Verdict::Pass);
        // The closing reading's record, never promised, makes the run partial where it left
        // readings unjudged, and such evidence is of version 7 (a reader of 6 would compute
        // PASS from it); one that judged every reading it took, or a record of another id that
        // no suite promised, does not.
        let mut closing = whole.clone();
        let mut record = closing.checks[0].clone();
        record.id = CLOSING_RECORD.into();
        record.coverage = Some(Coverage {
            available: 0,
            total: 2,
        });
        closing.checks.push(record);
        assert_eq!(closing.assess(), Verdict::Partial);
        assert_eq!(
            closing.shortfall_text().unwrap(),
            "partial: the reading after the checks left readings unjudged (0 of 2 judged)"
        );
        closing.update_verdict();
        assert_eq!(closing.format_version, CLOSING_FORMAT_VERSION);
        let mut both = closing.clone();
        both.checks[2].coverage = partial.checks[2].coverage;
        assert_eq!(
            both.shortfall_text().unwrap(),
            format!(
                "partial: 1 of {n} promised checks left readings unjudged: {} (3 of 4 judged); \
                 the reading after the checks left readings unjudged (0 of 2 judged)",
                both.checks[2].id
            )
        );
        let mut stranger = closing.clone();
        stranger.checks.last_mut().unwrap().id = "not-promised".into();
        assert_eq!(stranger.assess(), Verdict::Pass);
        let mut held = closing.clone();
        held.checks.last_mut().unwrap().coverage = Some(Coverage {
            available: 2,
            total: 2,
        });
        held.update_verdict();
        assert_eq!(held.assess(), Verdict::Pass);
        assert!(held.version_needed() < PARTIAL_FORMAT_VERSION);
        let mut and_failed = partial.clone();
        and_failed.checks[0].status = Status::Fail;
        assert_eq!(and_failed.assess(), Verdict::Fail);
        let mut and_cut = partial.clone();
        and_cut.checks.pop();
        assert_eq!(and_cut.assess(), Verdict::Incomplete);
        let mut noted = skipped.clone();
        noted.checks[0].findings[0].status = Status::Pass;
        noted.checks[0].findings[0].info = true;
        assert!(!noted.judged_anything());
        noted.checks[0].findings[0].info = false;
        assert!(noted.judged_anything());
        // What was left undone, in words.
        assert_eq!(done.shortfall_text(), None);
        assert_eq!(
            cut.shortfall_text().unwrap(),
            format!(
                "incomplete: the run did not finish; 1 of {n} promised checks never ran: {}",
                cut.never_ran[0]
            )
        );
        assert_eq!(
            open.shortfall_text().unwrap(),
            "incomplete: the run did not finish (its evidence was never closed)"
        );
        assert!(skipped
            .shortfall_text()
            .unwrap()
            .starts_with("nothing judged: every check was skipped"));
        // Each verdict has its documented exit code.
        for (v, code) in [
            (Verdict::Pass, exit::PASS),
            (Verdict::Fail, exit::CHECK_FAILED),
            (Verdict::Error, exit::NODE_UNTESTABLE),
            (Verdict::Incomplete, exit::INCOMPLETE),
            (Verdict::NothingJudged, exit::NOTHING_JUDGED),
            (Verdict::Partial, exit::PARTIAL),
        ] {
            assert_eq!(v.exit_code(), code, "{v:?}");
        }
        assert_eq!(
            [
                exit::PASS,
                exit::CHECK_FAILED,
                exit::NODE_UNTESTABLE,
                exit::INCOMPLETE,
                exit::NOTHING_JUDGED,
                exit::PARTIAL
            ],
            [0, 1, 3, 5, 6, 7]
        );
        // Partial coverage is said only where a reading was missing.
        let mut c = done.checks[0].clone();
        c.coverage = None;
        assert!(!c.partial());
        c.coverage = Some(Coverage {
            available: 7,
            total: 7,
        });
        assert!(!c.partial());
        c.coverage = Some(Coverage {
            available: 4,
            total: 7,
        });
        assert!(c.partial());
    }

    /// The verdict a file states is read as stated, not computed again.
    #[test]
    fn the_stated_verdict_is_the_files_own_word() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("evidence.json");
        let mut v = serde_json::to_value(crate::testutil::simulated("h200-vm-1", &[])).unwrap();
        std::fs::write(&p, v.to_string()).unwrap();
        assert_eq!(stated_verdict(&p), Ok(Some(Verdict::Pass)));
        v["verdict"] = "nothing_judged".into();
        std::fs::write(&p, v.to_string()).unwrap();
        assert_eq!(stated_verdict(&p), Ok(Some(Verdict::NothingJudged)));
        v.as_object_mut().unwrap().remove("verdict");
        std::fs::write(&p, v.to_string()).unwrap();
        assert_eq!(stated_verdict(&p), Ok(None));
        v["verdict"] = "splendid".into();
        std::fs::write(&p, v.to_string()).unwrap();
        assert!(stated_verdict(&p).is_err());
    }

    /// A file's version must be able to hold what it states: no nodecert wrote a version-3 file
    /// saying "partial" or holding an `unjudged` record; an older file whose records make it
    /// partial under today's rules still reads.
    #[test]
    fn a_version_too_old_for_what_the_file_states_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ev = crate::testutil::simulated("h200-vm-1", &[]);
        assert_eq!(ev.format_version, BASE_FORMAT_VERSION);
        let read = |ev: &Evidence| {
            let p = dir.path().join("evidence.json");
            std::fs::write(&p, serde_json::to_string(ev).unwrap()).unwrap();
            Evidence::read(&p)
        };
        let refused = |ev: &Evidence, needs: u32| {
            let e = read(ev).unwrap_err();
            assert!(
                e.contains(&format!(
                    "format version {} cannot hold what it states, which needs version {needs}",
                    ev.format_version
                )),
                "{e}"
            );
        };
        let mut said = ev.clone();
        said.verdict = Verdict::Partial;
        refused(&said, 6);
        said.format_version = 6;
        assert!(read(&said).is_ok());
        // xid_history in a version-5 file (development builds wrote such files): read.
        let mut hidden = ev.clone();
        hidden.format_version = 5;
        hidden.node.gpus[0]
            .unavailable
            .push(crate::inventory::Reading::XidHistory);
        assert!(read(&hidden).is_ok());
        assert_eq!(hidden.version_needed(), 6, "but written as 6");
        let mut unjudged = ev.clone();
        unjudged.checks[0].unjudged = Some("no limit applies".into());
        refused(&unjudged, 4);
        unjudged.format_version = 4;
        assert!(read(&unjudged).is_ok());
        // Stated pass, computed partial (an older nodecert's file): read, as partial.
        let mut older = ev.clone();
        older.format_version = 5;
        older.checks[2].coverage = Some(Coverage {
            available: 1,
            total: 8,
        });
        assert_eq!(read(&older).unwrap().verdict, Verdict::Partial);
    }

    #[test]
    fn evidence_of_a_node_no_node_is_is_refused_before_anything_is_drawn() {
        let dir = tempfile::tempdir().unwrap();
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let write = |ev: &Evidence| {
            let p = dir.path().join("evidence.json");
            std::fs::write(&p, serde_json::to_string(ev).unwrap()).unwrap();
            Evidence::read(&p)
        };
        assert!(write(&ev).is_ok());
        let mut many = ev.clone();
        let gpu = many.node.gpus[0].clone();
        // The bound itself is a node nodecert reads; one past it is not.
        many.node.gpus.resize(crate::suite::MAX_GPUS, gpu.clone());
        assert!(write(&many).is_ok());
        many.node.gpus.push(gpu);
        let e = write(&many).unwrap_err();
        assert!(
            e.contains("invalid evidence: 65 GPUs, more than any node"),
            "{e}"
        );
        let mut links = ev.clone();
        let link = links.node.gpus[3].nvlinks[0].clone();
        links.node.gpus[3].nvlinks.resize(33, link);
        assert!(write(&links).unwrap_err().contains("33 NVLinks of one GPU"));
        let mut pairs = ev.clone();
        let pair = pairs.node.pairs[0].clone();
        pairs.node.pairs.resize(crate::suite::MAX_PAIRS + 1, pair);
        assert!(write(&pairs).unwrap_err().contains("2017 GPU pairs"));
        let mut nics = ev;
        let fabric = nics.node.fabric.as_mut().unwrap();
        let nic = fabric.nics[0].clone();
        fabric.nics.resize(257, nic);
        assert!(write(&nics).unwrap_err().contains("257 NICs"));
        let mut checks = crate::testutil::simulated("h100-sxm-8", &[]);
        let c = checks.checks[0].clone();
        checks.checks.resize(MAX_CHECKS + 1, c);
        assert!(write(&checks).unwrap_err().contains("65 check records"));
    }

    #[test]
    fn simulated_is_what_every_record_says_or_the_file_is_refused() {
        use serde_json::json;
        let sim = json!({
            "simulated": true,
            "backend": {"name": "simulated (h200-vm-1)", "simulated": true},
            "simulation": {"node": "h200-vm-1"},
            "environment": {"command_line": ["nodecert", "run", "--simulate=h200-vm-1"]},
        });
        assert_eq!(simulated_status(&sim), Ok(Some(true)));
        let real = json!({
            "simulated": false,
            "backend": {"name": "cuda", "simulated": false},
            "environment": {"command_line": ["nodecert", "run", "--simulated-not"]},
        });
        assert_eq!(simulated_status(&real), Ok(Some(false)));
        assert_eq!(simulated_status(&json!({})), Ok(None));
        // Each record alone that disagrees makes the file inconsistent, named.
        for (path, value) in [
            ("/simulated", json!(false)),
            ("/backend/simulated", json!(false)),
            ("/backend/name", json!("cuda")),
        ] {
            let mut forged = sim.clone();
            *forged.pointer_mut(path).unwrap() = value;
            let e = simulated_status(&forged).unwrap_err();
            assert!(
                e.starts_with("inconsistent simulated status: "),
                "{path}: {e}"
            );
            assert!(e.contains("(not simulated)"), "{path}: {e}");
        }
        let mut forged = real.clone();
        forged["simulation"] = json!({"node": "x"});
        assert!(simulated_status(&forged)
            .unwrap_err()
            .contains("simulation record"));
        let mut forged = real.clone();
        forged["environment"]["command_line"] = json!(["nodecert", "--simulate", "x"]);
        assert!(simulated_status(&forged)
            .unwrap_err()
            .contains("--simulate"));
        forged["environment"]["command_line"] = json!(["nodecert", "--simulate=x"]);
        assert!(simulated_status(&forged)
            .unwrap_err()
            .contains("--simulate"));
        assert!(simulated_status(&json!({"simulated": "yes"})).is_err());
        assert!(simulated_status(&json!({"backend": {"simulated": 1}})).is_err());
    }

    #[test]
    fn format_versions_from_1_to_this_one_are_read_and_others_refused_at_their_place() {
        let p = Path::new("e.json");
        let check = |v: &str| check_format_version(p, &format!("{{\n \"format_version\": {v}\n}}"));
        for v in 1..=FORMAT_VERSION {
            assert_eq!(check(&v.to_string()), Ok(()), "{v}");
        }
        for (v, want) in [
            ("0", "e.json:2:20: format_version: 0 is not a version: evidence formats start at 1"),
            (
                &(FORMAT_VERSION + 1).to_string(),
                &format!(
                    "e.json:2:20: format_version: {} is newer than this nodecert reads ({FORMAT_VERSION}); use a newer nodecert",
                    FORMAT_VERSION + 1
                ),
            ),
            (
                "1.0",
                &format!(
                    "e.json:2:22: format_version: invalid type: floating point `1.0`, expected a whole number from 1 to {FORMAT_VERSION}"
                ),
            ),
        ] {
            assert_eq!(check(v).unwrap_err(), *want, "{v}");
        }
        assert_eq!(
            check_format_version(p, "{}").unwrap_err(),
            "e.json: no format_version (every nodecert evidence file has one)"
        );
    }

    #[test]
    fn subjects_that_mean_the_same_are_the_same_fields() {
        // A group of one GPU is that GPU, so that it matches the GPU's other findings.
        assert_eq!(Subject::group(&[3]), Subject::gpu(3));
        assert_eq!(Subject::group(&[5, 4, 5]), Subject::group(&[4, 5]));
        // Pairs without direction are named lower index first.
        assert_eq!(Subject::between(5, 2), Subject::between(2, 5));
        assert_eq!(Subject::both_ways(5, 2).describe(), "GPU 2 <-> GPU 5");
        // The bidirectional figure is about both directions of its pair; others as measured.
        assert_eq!(
            Subject::pair(0, 1).of_metric(BIDIR_METRIC),
            Subject::both_ways(0, 1)
        );
        assert_eq!(
            Subject::pair(0, 1).of_metric("p2p_read"),
            Subject::pair(0, 1)
        );
        assert_eq!(Subject::gpu(0).of_metric(BIDIR_METRIC), Subject::gpu(0));
    }

    #[test]
    fn a_finding_subject_is_fields_now_and_text_in_older_files() {
        let f = Finding {
            status: Status::Fail,
            subject: Subject::link(2, 7),
            found: "3 errors".into(),
            expected: "<= 0".into(),
            reason: "r".into(),
            metric: Some("nvlink_errors".into()),
            info: false,
            limit: None,
        };
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(json["subject"], serde_json::json!({"gpu": 2, "link": 7}));
        let back: Finding = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, f);
        let mut old = json;
        old["subject"] = "GPU 2 link 7".into();
        let back: Finding = serde_json::from_value(old).unwrap();
        assert_eq!(back.subject, Subject::link(2, 7));
    }

    #[test]
    fn fact_values_are_typed_now_and_read_by_their_name_from_older_text() {
        use FactValue as V;
        for (name, text, want) in [
            (
                "wrong_elements",
                "0/1024",
                V::Elements {
                    wrong: 0,
                    checked: 1024,
                },
            ),
            (
                "wrong_elements",
                "3/16",
                V::Elements {
                    wrong: 3,
                    checked: 16,
                },
            ),
            ("ranks", "8", V::Count(8)),
            ("bytes_moved", "896", V::Count(896)),
            ("gradient_bytes", "302383144", V::Count(302383144)),
            ("p2p_read_data", "intact", V::Copy(CopyData::Intact)),
            ("h2d_data", "wrong data", V::Copy(CopyData::Wrong)),
            ("latency_data", "not checked", V::Copy(CopyData::NotChecked)),
            ("peer_access", "disabled", V::PeerAccess(false)),
            ("params_sha256", "ab", V::Sha256("ab".into())),
            ("precision", "bf16", V::Text("bf16".into())),
        ] {
            assert_eq!(V::from_legacy(name, text), want, "{name}={text}");
        }
        // A malformed count stays words: it is never read as zero wrong.
        for (name, text) in [
            ("wrong_elements", "unreadable"),
            ("wrong_elements", "-1/4"),
            ("wrong_elements", "3/"),
            ("ranks", "8.0"),
            ("ranks", ""),
            ("p2p_read_data", "maybe"),
            ("ranks", "+8"),
            ("wrong_elements", "+1/4"),
            // Only the words each name was written with: "enabled" was never a format-2 value,
            // and "intact" means a copy check only in a copy check's record.
            ("peer_access", "enabled"),
            ("mode", "intact"),
        ] {
            assert_eq!(
                V::from_legacy(name, text),
                V::Text(text.into()),
                "{name}={text}"
            );
        }
        // In the file: typed now, text in older files.
        let f = Fact::new("ranks", Subject::node(), V::Count(8));
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(json["value"], serde_json::json!({"count": 8}));
        assert_eq!(serde_json::from_value::<Fact>(json).unwrap(), f);
        let old = serde_json::json!({"name": "ranks", "subject": {}, "value": "8"});
        assert_eq!(serde_json::from_value::<Fact>(old).unwrap(), f);
        assert_eq!(
            V::Elements {
                wrong: 2,
                checked: 9
            }
            .describe(),
            "2 of 9 wrong"
        );
        assert_eq!(V::PeerAccess(false).describe(), "disabled");
    }

    #[test]
    fn a_figure_counted_otherwise_than_its_tool_converts_by_a_stated_factor() {
        use Bytes::*;
        use Directions::*;
        let nvb = |d, b| Convention::new(d, b, Tool::Nvbandwidth).tool_factor();
        assert_eq!(nvb(OneWay, Once), None);
        assert_eq!(nvb(SumOfBoth, Once), Some(0.5));
        assert_eq!(nvb(OneWay, ReadPlusWritten), Some(0.5));
        assert_eq!(nvb(SumOfBoth, ReadPlusWritten), Some(0.25));
        // algbw and busbw are nccl-tests' own formulas.
        for b in [Once, BusFactor] {
            assert_eq!(
                Convention::new(OneWay, b, Tool::NcclTests).tool_factor(),
                None
            );
        }
    }

    #[test]
    fn a_metric_and_a_check_record_from_before_conventions_and_remeasure_read() {
        let m: Metric = serde_json::from_str(
            r#"{"name":"h2d","subject":{"gpu":0},"unit":"GB/s","median":1.0,"min":1.0,"max":1.0,"samples":[1.0]}"#,
        )
        .unwrap();
        assert_eq!(m.convention, None);
        let back = serde_json::to_string(&m).unwrap();
        assert!(!back.contains("convention"), "{back}");
        let c = Convention::new(Directions::SumOfBoth, Bytes::Once, Tool::Nvbandwidth);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(
            json,
            r#"{"directions":"sum_of_both","bytes":"once","compared_with":"nvbandwidth"}"#
        );
        assert_eq!(serde_json::from_str::<Convention>(&json).unwrap(), c);
    }

    fn written() -> (
        tempfile::TempDir,
        crate::fsio::write::Dir,
        std::path::PathBuf,
        Evidence,
    ) {
        let ev = crate::runner::simulate("h200-vm-1", "h200-vm-1", &[], 1).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let d = crate::fsio::write::Dir::open(dir.path()).unwrap();
        let path = dir.path().join(EVIDENCE_FILE);
        ev.write(&d).unwrap();
        (dir, d, path, ev)
    }

    #[test]
    fn a_null_where_a_number_belongs_is_a_located_error_naming_the_field() {
        let (_dir, _, path, _) = written();
        let text = std::fs::read_to_string(&path).unwrap();
        let line = text
            .lines()
            .position(|l| l.contains("\"median\": "))
            .unwrap()
            + 1;
        let broken: Vec<String> = text
            .lines()
            .enumerate()
            .map(|(i, l)| match i + 1 == line {
                true => format!("{}null,", &l[..l.find(": ").unwrap() + 2]),
                false => l.to_string(),
            })
            .collect();
        std::fs::write(&path, broken.join("\n")).unwrap();
        let e = Evidence::read(&path).unwrap_err();
        assert!(e.starts_with(&format!("{}:{line}:", path.display())), "{e}");
        assert!(e.contains("invalid evidence: checks["), "{e}");
        assert!(
            e.contains("].metrics[0].median is null where a number belongs"),
            "{e}"
        );
    }

    #[test]
    fn evidence_with_a_figure_that_is_not_a_number_is_never_written() {
        let (_dir, d, path, mut ev) = written();
        let before = std::fs::read(&path).unwrap();
        let m = ev
            .checks
            .iter_mut()
            .flat_map(|c| c.metrics.iter_mut())
            .next()
            .unwrap();
        m.samples[0] = f64::NAN;
        let e = ev.write(&d).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("is not a finite number"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), before, "left as it was");
        ev.checks.iter_mut().for_each(|c| c.metrics.clear());
        ev.node.gpus[0].temperature_c = Some(f64::INFINITY);
        assert!(ev.write(&d).is_err());
    }

    #[test]
    fn number_arrays_go_on_one_line_and_the_value_is_unchanged() {
        let v = serde_json::json!({
            "samples": [1.5, -2.0, 3e-7, 1e300, 7],
            "empty": [],
            "names": ["a [", "1"],
            "nested": [[1, 2], {"x": [3]}],
            "text": "line\n[\n1\n]",
        });
        let pretty = serde_json::to_string_pretty(&v).unwrap();
        let inline = inline_number_arrays(&pretty);
        assert!(
            inline.contains("\"samples\": [1.5, -2.0, 3e-7, 1e+300, 7],"),
            "{inline}"
        );
        assert!(inline.contains("[1, 2]"), "{inline}");
        assert!(inline.contains("\"x\": [3]"), "{inline}");
        assert!(inline.len() < pretty.len());
        let back: serde_json::Value = serde_json::from_str(&inline).unwrap();
        assert_eq!(back, v);
        // A simulated 8-GPU node's evidence stays under 1.2 MB (about 1.03 MB with the training
        // run partitioned three more ways; the peer and collective sweeps are most of it).
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let text = ev.to_json().unwrap();
        assert!(text.len() < 1_200_000, "{} bytes", text.len());
        let back: Evidence = serde_json::from_str(&text).unwrap();
        assert_eq!(back.checks.len(), ev.checks.len());
    }

    #[test]
    fn unreadable_evidence_says_where_and_a_null_figure_says_what_it_is() {
        let ev = crate::testutil::simulated("h200-vm-1", &[]);
        let mut v = serde_json::to_value(&ev).unwrap();
        // A duration (f64) and a GPU's memory (u64) written as null by a broken writer.
        v["checks"][0]["duration_s"] = serde_json::Value::Null;
        let e = parse(&v.to_string()).unwrap_err();
        assert!(
            e.contains("checks[0].duration_s is null where a number belongs"),
            "{e}"
        );
        let mut v = serde_json::to_value(&ev).unwrap();
        v["node"]["gpus"][0]["memory_bytes"] = serde_json::Value::Null;
        let e = parse(&v.to_string()).unwrap_err();
        assert!(
            e.contains("node.gpus[0].memory_bytes is null where a number belongs"),
            "{e}"
        );
        // Not an object at all: the message names no field.
        let e = parse("7").unwrap_err();
        assert!(
            e.starts_with(
                "1:1: invalid evidence: invalid type: integer `7`, expected struct Evidence"
            ),
            "{e}"
        );
        assert!(!e.contains("(at "), "{e}");
        // A field of the wrong type is named.
        let mut v = serde_json::to_value(&ev).unwrap();
        v["node"]["hostname"] = serde_json::json!(7);
        let e = parse(&v.to_string()).unwrap_err();
        assert!(e.contains("(at node.hostname)"), "{e}");
    }

    #[test]
    fn a_fact_is_found_by_its_name_and_subject_and_evidence_by_folder_or_file() {
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let c = ev.check("collective.all_reduce").unwrap();
        let f = c.fact("ranks", &Subject::node()).unwrap();
        assert_eq!(f.value, FactValue::Count(8));
        assert!(c.fact("ranks", &Subject::gpu(0)).is_none());
        assert!(c.fact("no-such", &Subject::node()).is_none());
        let d = tempfile::tempdir().unwrap();
        assert_eq!(Evidence::path_in(d.path()), d.path().join(EVIDENCE_FILE));
        let file = d.path().join("x.json");
        assert_eq!(Evidence::path_in(&file), file);
    }

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn status_orders_by_severity() {
        assert!(
            Status::Error > Status::Fail
                && Status::Fail > Status::Warn
                && Status::Warn > Status::Skip
        );
    }
}
