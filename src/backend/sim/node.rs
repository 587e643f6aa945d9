//! The simulated node's description: what a node file (`suites/nodes/*.toml`, or one's own)
//! says a machine is, how it is loaded and checked, and the addresses and labels the simulated
//! backend derives from it.

use super::*;

pub const FORMAT_VERSION: u32 = 1;

/// Node descriptions shipped inside the binary, one per shipped suite.
pub const EMBEDDED: &[(&str, &str)] = &[
    (
        "h100-sxm-8",
        include_str!("../../../suites/nodes/h100-sxm-8.toml"),
    ),
    (
        "h200-sxm-8",
        include_str!("../../../suites/nodes/h200-sxm-8.toml"),
    ),
    (
        "a100-sxm-80gb-8",
        include_str!("../../../suites/nodes/a100-sxm-80gb-8.toml"),
    ),
    (
        "l40s-pcie-4",
        include_str!("../../../suites/nodes/l40s-pcie-4.toml"),
    ),
    (
        "h200-vm-1",
        include_str!("../../../suites/nodes/h200-vm-1.toml"),
    ),
    (
        "h100-vm-1",
        include_str!("../../../suites/nodes/h100-vm-1.toml"),
    ),
];

/// A simulated node's description (`suites/nodes/*.toml`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimNode {
    pub format_version: u32,
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub hostname: String,
    pub driver_version: String,
    pub cuda_driver_version: String,
    pub gpu: SimGpu,
    pub links: SimLinks,
    pub perf: SimPerf,
    pub virtualization: SimVirt,
    #[serde(default)]
    pub health: SimHealth,
    /// Faults that are part of the node itself (command-line `--inject` adds more).
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// Readings the platform does not give, as VMs often do not (`[[unavailable]]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<SimUnavailable>,
    /// The node's RDMA NICs (`[network]`); absent: the node describes none, and its inventory
    /// says the NICs were not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<super::sim_nic::SimNetwork>,
}

/// Readings a simulated node does not give: `[[unavailable]] readings = ["nvlink_errors"]`,
/// on every GPU, or only on `gpus = [3]` (the node's own numbering, before any GPU goes
/// missing). `driver_version` is the node's, whatever `gpus` says.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimUnavailable {
    pub readings: Vec<Reading>,
    /// The GPUs that do not give them; empty: all.
    #[serde(default)]
    pub gpus: Vec<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimGpu {
    pub count: usize,
    pub name: String,
    pub memory_bytes: u64,
    pub vbios: String,
    pub pcie_gen: u32,
    pub pcie_width: u32,
    /// The PCIe generation an idle GPU lowers its link to (real GPUs do, to save power); the
    /// simulated inventory then reads the link again under load, as the real one does.
    #[serde(default)]
    pub pcie_idle_gen: Option<u32>,
    /// NUMA node of each GPU; empty: not reported (as in many VMs).
    #[serde(default)]
    pub numa_nodes: Vec<i32>,
    /// CPU list of each NUMA node, e.g. ["0-55,112-167", "56-111,168-223"].
    #[serde(default)]
    pub numa_cpus: Vec<String>,
    /// The CPU socket of each NUMA node, by node id (`[0, 0, 1, 1]`: nodes 0 and 1 on socket 0,
    /// as with AMD's NPS2); empty: each NUMA node is a socket of its own (NPS1).
    #[serde(default)]
    pub numa_sockets: Vec<u32>,
    pub ecc: bool,
    pub power_limit_w: f64,
    pub temperature_c: f64,
    pub sm_clock_max_mhz: u32,
    /// CUDA compute capability `[major, minor]`, e.g. `[9, 0]` for Hopper; absent: not modelled
    /// (nothing is refused for it). A bf16 training run needs `[8, 0]` or newer.
    #[serde(default)]
    pub compute_capability: Option<(i32, i32)>,
    /// First PCI bus number; GPU i sits at bus `first_bus + i * bus_stride` (domain 0). Give
    /// these two or `bus_ids`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_bus: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus_stride: Option<u32>,
    /// The PCI address of each GPU, in the node's numbering, as `nvidia-smi` or `lspci` writes
    /// it ("0000:18:00.0" or "00000000:18:00.0"): real boxes have irregular bus numbers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bus_ids: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimLinks {
    /// NVLinks per GPU. With NVSwitch all go to the switches; without, see `direct`.
    #[serde(default)]
    pub nvlinks_per_gpu: u32,
    #[serde(default)]
    pub nvswitch: bool,
    /// Number of NVSwitches (for the inventory).
    #[serde(default)]
    pub nvswitches: u32,
    /// Direct GPU-to-GPU links when there is no switch: [a, b, links].
    #[serde(default)]
    pub direct: Vec<[u32; 3]>,
    /// PCIe path label between GPUs on the same NUMA node, and across nodes: the default for
    /// every pair that `pcie_paths` does not list.
    pub pcie_same_numa: String,
    pub pcie_cross_numa: String,
    /// The PCIe path of single pairs, as `nvidia-smi topo -m` prints it (a real box mixes PIX
    /// and PXB within one socket): `[[links.pcie_paths]] a = 0, b = 1, path = "PIX"`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pcie_paths: Vec<crate::suite::PairPath>,
    /// Peer access available between GPUs.
    pub p2p: bool,
    pub nvlink_version: Option<u32>,
    /// NVLink SHARP (NVLS) usable: the GPUs report CUDA multicast support and the fabric manager
    /// registered them (HGX H100/H200). Default false: no multicast, no fabric state.
    #[serde(default)]
    pub nvls: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimPerf {
    /// Per GPU, GB/s.
    pub h2d_gbps: f64,
    pub d2h_gbps: f64,
    pub bidir_gbps: f64,
    /// Limit on the sum of all GPUs' H2D at once (shared switches, root ports); 0: none.
    pub host_aggregate_gbps: f64,
    /// Device-local copy, bytes read plus written.
    pub device_copy_gbps: f64,
    /// Per ordered pair over NVLink at full link count, one way; and both ways (sum).
    #[serde(default)]
    pub p2p_nvlink_gbps: f64,
    #[serde(default)]
    pub p2p_nvlink_bidir_gbps: f64,
    /// Per ordered pair over PCIe with peer access, one way; and both ways.
    pub p2p_pcie_gbps: f64,
    pub p2p_pcie_bidir_gbps: f64,
    /// Peer bandwidth over PCIe per path class (`{ PIX = 26.0, SYS = 19.0 }`), one way and
    /// both ways; a class not listed delivers `p2p_pcie_gbps` / `p2p_pcie_bidir_gbps`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub p2p_pcie_gbps_by_path: BTreeMap<PciePath, f64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub p2p_pcie_bidir_gbps_by_path: BTreeMap<PciePath, f64>,
    /// Peer copies staged through the host when peer access is off.
    pub staged_gbps: f64,
    pub p2p_latency_us: f64,
    /// Peer latency of pairs without NVLink per PCIe path class; a class not listed:
    /// `p2p_latency_us`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub p2p_latency_us_by_path: BTreeMap<PciePath, f64>,
    pub staged_latency_us: f64,
    /// Peak bus bandwidth per collective at large sizes, GB/s.
    pub collective_busbw_gbps: BTreeMap<CollectiveOp, f64>,
    /// all_reduce bus bandwidth without NVLink SHARP (ring or tree), GB/s: what NCCL delivers on
    /// a node with `links.nvls` whose NVLS is unavailable (fault `nvls-unavailable`). Absent: the
    /// all_reduce figure above, which on a node without NVLS already is that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective_busbw_no_nvls_gbps: Option<f64>,
    /// Fixed cost of one collective, microseconds (dominates small messages).
    pub collective_latency_us: f64,
    /// fp32 GEMM rate per GPU at 8192^3, TFLOP/s: the compute check's burst figure and the
    /// training model's (`sustained_rate_fraction` scales it under the sustained load).
    pub fp32_tflops: f64,
    /// Dense bf16 GEMM rate per GPU (tensor cores, fp32 accumulation) at 8192^3, TFLOP/s, for
    /// the bf16 training model ([`BF16_MLP_STEP_EFFICIENCY`]); absent: a bf16 training run is
    /// refused as not modelled.
    #[serde(default)]
    pub bf16_tflops: Option<f64>,
    /// Dense GEMM rates per GPU on tensor cores at 8192^3, TFLOP/s, for the compute check: TF32
    /// (fp32 operands) and fp8 (e4m3 operands), both accumulating in fp32. Absent: the compute
    /// check's figure for that precision is "not available here" (not modelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tf32_tflops: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_tflops: Option<f64>,
    /// The share of its burst GEMM rate a healthy GPU keeps under the compute check's sustained
    /// load, where it sits at its power cap (0 to 1; the lent H200: 705 of 832 TFLOP/s in bf16,
    /// 0.85). Absent: 1, the burst rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sustained_rate_fraction: Option<f64>,
    /// The SM clock of a healthy GPU under that load, MHz (the lent H200: median 1568 of its
    /// 1980). Absent: `gpu.sm_clock_max_mhz`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sustained_sm_clock_mhz: Option<u32>,
    /// Relative standard deviation of a sample, percent, 0 to 30 (noise is bounded at 3 sigma).
    pub noise_pct: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimVirt {
    pub mode: VirtMode,
    pub hypervisor: Option<String>,
    #[serde(default)]
    pub iommu_groups: Option<u32>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimHealth {
    #[serde(default)]
    pub pcie_replays: u64,
    #[serde(default)]
    pub aggregate_corrected: u64,
}

/// Load a node description by embedded name or path.
pub fn load_node(spec: &str) -> Result<SimNode, InputError> {
    let src = if let Some((_, t)) = EMBEDDED.iter().find(|(n, _)| *n == spec) {
        Source {
            name: format!("embedded:nodes/{spec}"),
            text: t.to_string(),
        }
    } else if std::path::Path::new(spec).exists() || spec.ends_with(".toml") {
        let text = crate::fsio::read::read_to_string(spec.as_ref(), crate::fsio::read::Kind::Node)
            .map_err(|e| InputError::Read {
                path: spec.into(),
                source: e,
            })?;
        Source {
            name: spec.to_string(),
            text,
        }
    } else {
        let names: Vec<&str> = EMBEDDED.iter().map(|(n, _)| *n).collect();
        return Err(InputError::Other(format!(
            "no simulated node file or embedded node named '{spec}' (embedded: {})",
            names.join(", ")
        )));
    };
    load_node_source(&src)
}

/// Parse and validate a node description already read (a file's text, or an embedded one).
pub fn load_node_source(src: &Source) -> Result<SimNode, InputError> {
    let node: SimNode = config::load_single(src, FORMAT_VERSION)?;
    node.validate().map_err(|(path, msg)| {
        config::error_at(std::slice::from_ref(src), &config::key_path(&path), msg)
    })?;
    Ok(node)
}

impl SimNode {
    /// Every figure of the description is possible: counts within the documented limits
    /// (README, "Files and limits"), rates and temperatures finite and in range, bus numbers
    /// within a PCI bus. The first problem, as (key path, message).
    pub(super) fn validate(&self) -> Result<(), (String, String)> {
        use crate::suite::{
            MAX_GBPS, MAX_GPUS, MAX_LATENCY_US, MAX_NUMA_NODE, MAX_NVLINKS_PER_GPU, MAX_PAIRS,
        };
        let bad = |path: &str, msg: String| Err((path.to_string(), msg));
        let n = self.gpu.count;
        if !(1..=MAX_GPUS).contains(&n) {
            return bad(
                "gpu.count",
                format!("a node has 1 to {MAX_GPUS} GPUs, got {n}"),
            );
        }
        if !self.gpu.numa_nodes.is_empty() && self.gpu.numa_nodes.len() != n {
            return Err((
                "gpu.numa_nodes".into(),
                format!(
                    "numa_nodes lists {} GPUs, gpu.count is {n}",
                    self.gpu.numa_nodes.len()
                ),
            ));
        }
        if !self.gpu.numa_sockets.is_empty() {
            if let Some(m) =
                self.gpu.numa_nodes.iter().find(|m| {
                    usize::try_from(**m).map_or(true, |m| m >= self.gpu.numa_sockets.len())
                })
            {
                return Err((
                    "gpu.numa_sockets".into(),
                    format!(
                        "numa_sockets gives the socket of NUMA nodes 0..{}, but a GPU is on node {m}",
                        self.gpu.numa_sockets.len() - 1
                    ),
                ));
            }
        }
        if let Some((i, v)) = self
            .gpu
            .numa_nodes
            .iter()
            .enumerate()
            .find(|(_, v)| !(0..=MAX_NUMA_NODE).contains(*v))
        {
            return bad(
                &format!("gpu.numa_nodes[{i}]"),
                format!("a NUMA node is 0 to {MAX_NUMA_NODE}, got {v}"),
            );
        }
        if self.gpu.numa_cpus.len() > MAX_NUMA_NODE as usize + 1 {
            return bad(
                "gpu.numa_cpus",
                format!("at most {} NUMA nodes", MAX_NUMA_NODE + 1),
            );
        }
        // A CPU list as the kernel writes it: the inventory gives it as each GPU's affinity,
        // and a suite frozen from it must load (found by fuzzing, fuzz/fuzz_targets/node.rs).
        if let Some((i, c)) = self
            .gpu
            .numa_cpus
            .iter()
            .enumerate()
            .find(|(_, c)| crate::platform::numa::parse_cpulist(c).is_none())
        {
            return bad(
                &format!("gpu.numa_cpus[{i}]"),
                format!("{c:?} is not a CPU list (expected e.g. \"0-55,112-167\")"),
            );
        }
        if self.gpu.memory_bytes == 0 {
            return bad(
                "gpu.memory_bytes",
                "a GPU has memory: at least 1 byte".into(),
            );
        }
        if !(1..=7).contains(&self.gpu.pcie_gen) {
            return bad(
                "gpu.pcie_gen",
                format!("pcie_gen must be 1 to 7, got {}", self.gpu.pcie_gen),
            );
        }
        if let Some(g) = self.gpu.pcie_idle_gen {
            if !(1..=self.gpu.pcie_gen).contains(&g) {
                return bad(
                    "gpu.pcie_idle_gen",
                    format!(
                        "pcie_idle_gen must be 1 to pcie_gen ({}), got {g}",
                        self.gpu.pcie_gen
                    ),
                );
            }
        }
        if ![1, 2, 4, 8, 16, 32].contains(&self.gpu.pcie_width) {
            return bad(
                "gpu.pcie_width",
                format!(
                    "pcie_width must be 1, 2, 4, 8, 16 or 32, got {}",
                    self.gpu.pcie_width
                ),
            );
        }
        for (key, v, lo, hi) in [
            ("gpu.power_limit_w", self.gpu.power_limit_w, 0.0, 100_000.0),
            ("gpu.temperature_c", self.gpu.temperature_c, 0.0, 200.0),
        ] {
            if !(v.is_finite() && (lo..=hi).contains(&v)) {
                return bad(
                    key,
                    format!(
                        "must be a number from {lo} to {hi}, got {}",
                        crate::units::exact(v)
                    ),
                );
            }
        }
        if !(1..=100_000).contains(&self.gpu.sm_clock_max_mhz) {
            return bad(
                "gpu.sm_clock_max_mhz",
                format!("must be 1 to 100000 MHz, got {}", self.gpu.sm_clock_max_mhz),
            );
        }
        self.validate_bus_ids()?;
        for (i, u) in self.unavailable.iter().enumerate() {
            if let Some(g) = u.gpus.iter().find(|g| **g >= n) {
                return Err((
                    format!("unavailable[{i}].gpus"),
                    format!("GPU {g} is not one of 0..{}", n - 1),
                ));
            }
        }
        if self.links.nvlinks_per_gpu > MAX_NVLINKS_PER_GPU {
            return bad(
                "links.nvlinks_per_gpu",
                format!(
                    "a GPU has at most {MAX_NVLINKS_PER_GPU} NVLinks, got {}",
                    self.links.nvlinks_per_gpu
                ),
            );
        }
        if self.links.nvswitches > 16 {
            return bad(
                "links.nvswitches",
                format!("at most 16 NVSwitches, got {}", self.links.nvswitches),
            );
        }
        if self.links.direct.len() > MAX_PAIRS {
            return bad(
                "links.direct",
                format!(
                    "{} direct links listed; a node of at most {MAX_GPUS} GPUs has at most {MAX_PAIRS} pairs",
                    self.links.direct.len()
                ),
            );
        }
        let mut per_gpu = vec![0u64; n];
        for (i, d) in self.links.direct.iter().enumerate() {
            if d[0] as usize >= n || d[1] as usize >= n || d[0] == d[1] {
                return Err((
                    format!("links.direct[{i}]"),
                    format!("pair {}-{} is not two GPUs of 0..{}", d[0], d[1], n - 1),
                ));
            }
            if self.links.direct[..i]
                .iter()
                .any(|e| (e[0], e[1]) == (d[0], d[1]) || (e[0], e[1]) == (d[1], d[0]))
            {
                return bad(
                    &format!("links.direct[{i}]"),
                    format!("pair {}-{} is listed twice", d[0], d[1]),
                );
            }
            for g in [d[0], d[1]] {
                per_gpu[g as usize] += u64::from(d[2]);
                if per_gpu[g as usize] > u64::from(MAX_NVLINKS_PER_GPU) {
                    return bad(
                        &format!("links.direct[{i}]"),
                        format!("GPU {g} has more than {MAX_NVLINKS_PER_GPU} NVLinks in all"),
                    );
                }
            }
        }
        if self.links.pcie_paths.len() > MAX_PAIRS {
            return bad(
                "links.pcie_paths",
                format!(
                    "{} PCIe paths listed; a node of at most {MAX_GPUS} GPUs has at most {MAX_PAIRS} pairs",
                    self.links.pcie_paths.len()
                ),
            );
        }
        for (i, pp) in self.links.pcie_paths.iter().enumerate() {
            if pp.a >= n || pp.b >= n || pp.a == pp.b {
                return bad(
                    &format!("links.pcie_paths[{i}]"),
                    format!("pair {}-{} is not two GPUs of 0..{}", pp.a, pp.b, n - 1),
                );
            }
            if self.links.pcie_paths[..i]
                .iter()
                .any(|e| (e.a, e.b) == (pp.a, pp.b) || (e.a, e.b) == (pp.b, pp.a))
            {
                return bad(
                    &format!("links.pcie_paths[{i}]"),
                    format!("pair {}-{} is listed twice", pp.a, pp.b),
                );
            }
        }
        let p = &self.perf;
        let mut rates: Vec<(String, f64)> = vec![
            ("h2d_gbps".into(), p.h2d_gbps),
            ("d2h_gbps".into(), p.d2h_gbps),
            ("bidir_gbps".into(), p.bidir_gbps),
            ("host_aggregate_gbps".into(), p.host_aggregate_gbps),
            ("p2p_nvlink_gbps".into(), p.p2p_nvlink_gbps),
            ("p2p_nvlink_bidir_gbps".into(), p.p2p_nvlink_bidir_gbps),
            ("p2p_pcie_gbps".into(), p.p2p_pcie_gbps),
            ("p2p_pcie_bidir_gbps".into(), p.p2p_pcie_bidir_gbps),
            ("staged_gbps".into(), p.staged_gbps),
        ];
        for (op, v) in &p.collective_busbw_gbps {
            rates.push((format!("collective_busbw_gbps.{op}"), *v));
        }
        if let Some(v) = p.collective_busbw_no_nvls_gbps {
            rates.push(("collective_busbw_no_nvls_gbps".into(), v));
        }
        for (key, map) in [
            ("p2p_pcie_gbps_by_path", &p.p2p_pcie_gbps_by_path),
            (
                "p2p_pcie_bidir_gbps_by_path",
                &p.p2p_pcie_bidir_gbps_by_path,
            ),
        ] {
            for (path, v) in map {
                rates.push((format!("{key}.{}", path.label()), *v));
            }
        }
        for (k, v) in rates {
            if !(v.is_finite() && (0.0..=MAX_GBPS).contains(&v)) {
                return bad(
                    &format!("perf.{k}"),
                    format!(
                        "a bandwidth is a number from 0 to {MAX_GBPS} GB/s, got {}",
                        crate::units::exact(v)
                    ),
                );
            }
        }
        let mut latencies: Vec<(String, f64)> = vec![
            ("p2p_latency_us".into(), p.p2p_latency_us),
            ("staged_latency_us".into(), p.staged_latency_us),
            ("collective_latency_us".into(), p.collective_latency_us),
        ];
        for (path, v) in &p.p2p_latency_us_by_path {
            latencies.push((format!("p2p_latency_us_by_path.{}", path.label()), *v));
        }
        for (k, v) in latencies {
            if !(v.is_finite() && (0.0..=MAX_LATENCY_US).contains(&v)) {
                return bad(
                    &format!("perf.{k}"),
                    format!(
                        "a latency is a number from 0 to {MAX_LATENCY_US} us, got {}",
                        crate::units::exact(v)
                    ),
                );
            }
        }
        // Divisors of the model: above 0.
        for (k, v, max) in [
            ("device_copy_gbps", Some(p.device_copy_gbps), MAX_GBPS),
            ("fp32_tflops", Some(p.fp32_tflops), 1e6),
            ("bf16_tflops", p.bf16_tflops, 1e6),
            ("tf32_tflops", p.tf32_tflops, 1e6),
            ("fp8_tflops", p.fp8_tflops, 1e6),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && v > 0.0 && v <= max) {
                    return bad(
                        &format!("perf.{k}"),
                        format!(
                            "must be a number above 0 and at most {max}, got {}",
                            crate::units::exact(v)
                        ),
                    );
                }
            }
        }
        if let Some(f) = p.sustained_rate_fraction {
            if !(f.is_finite() && f > 0.0 && f <= 1.0) {
                return bad(
                    "perf.sustained_rate_fraction",
                    format!(
                        "the share of the burst rate kept under load, above 0 and at most 1, got {}",
                        crate::units::exact(f)
                    ),
                );
            }
        }
        if let Some(c) = p.sustained_sm_clock_mhz {
            if !(1..=self.gpu.sm_clock_max_mhz).contains(&c) {
                return bad(
                    "perf.sustained_sm_clock_mhz",
                    format!(
                        "must be 1 to gpu.sm_clock_max_mhz ({}) MHz, got {c}",
                        self.gpu.sm_clock_max_mhz
                    ),
                );
            }
        }
        // Noise is bounded at 3 sigma: at most 90% off, so that no sample is 0 or negative.
        if !(0.0..=30.0).contains(&self.perf.noise_pct) {
            return Err((
                "perf.noise_pct".into(),
                format!(
                    "noise_pct must be 0 to 30 (a sample is at most 3 sigma off), got {}",
                    crate::units::exact(self.perf.noise_pct)
                ),
            ));
        }
        for (i, f) in self.faults.iter().enumerate() {
            check_fault(f, n, self.network.as_ref().map(|x| x.nics))
                .map_err(|m| (format!("faults[{i}]"), m))?;
        }
        if let Some(net) = &self.network {
            net.validate()
                .map_err(|(k, m)| (format!("network.{k}"), m))?;
        }
        Ok(())
    }
}

impl SimNode {
    /// GPU addresses: either `bus_ids` (one per GPU, each a PCI address, all different) or
    /// `first_bus` and `bus_stride` (GPU i at bus first_bus + i * bus_stride, within 0-0xff).
    fn validate_bus_ids(&self) -> Result<(), (String, String)> {
        let n = self.gpu.count;
        let g = &self.gpu;
        if !g.bus_ids.is_empty() {
            if g.first_bus.is_some() || g.bus_stride.is_some() {
                return Err((
                    "gpu.bus_ids".into(),
                    "give bus_ids or first_bus and bus_stride, not both".into(),
                ));
            }
            if g.bus_ids.len() != n {
                return Err((
                    "gpu.bus_ids".into(),
                    format!("bus_ids lists {} GPUs, gpu.count is {n}", g.bus_ids.len()),
                ));
            }
            let mut seen: Vec<PciAddress> = Vec::with_capacity(n);
            for (i, b) in g.bus_ids.iter().enumerate() {
                let a = PciAddress::parse(b).ok_or_else(|| {
                    (
                        format!("gpu.bus_ids[{i}]"),
                        format!(
                            "'{}' is not a PCI address like 0000:18:00.0 (domain:bus:device.function, hexadecimal; device 0-1f, function 0-7)",
                            b.escape_debug()
                        ),
                    )
                })?;
                if let Some(j) = seen.iter().position(|s| *s == a) {
                    return Err((
                        format!("gpu.bus_ids[{i}]"),
                        format!("GPU {i} has the address of GPU {j}: {a}"),
                    ));
                }
                seen.push(a);
            }
            return Ok(());
        }
        let (Some(first), Some(stride)) = (g.first_bus, g.bus_stride) else {
            return Err((
                "gpu".into(),
                "give each GPU's address: bus_ids, or first_bus and bus_stride".into(),
            ));
        };
        // GPU 0 sits at first_bus itself: a first_bus past the last bus is that key's fault,
        // whatever the stride.
        if first > 0xff {
            return Err((
                "gpu.first_bus".into(),
                format!("first_bus is {first:#x}: bus numbers are 0 to 0xff"),
            ));
        }
        // GPU i sits at bus first_bus + i * bus_stride: all within one PCI bus number (0-255).
        let last_bus = (n as u64 - 1)
            .checked_mul(u64::from(stride))
            .and_then(|x| x.checked_add(u64::from(first)));
        if last_bus.is_none_or(|b| b > 0xff) || (n > 1 && stride == 0) {
            return Err((
                "gpu.bus_stride".into(),
                format!(
                    "GPU {} would sit at bus {:#x} + {} x {:#x}: bus numbers are 0 to 0xff and differ per GPU",
                    n - 1,
                    first,
                    n - 1,
                    stride
                ),
            ));
        }
        Ok(())
    }

    /// The PCIe path label between two GPUs (the node's numbering): the pair's own
    /// `links.pcie_paths` entry, else by NUMA node (a GPU whose node is not reported counts as
    /// local).
    pub fn pcie_label(&self, a: usize, b: usize) -> String {
        if let Some(p) = self
            .links
            .pcie_paths
            .iter()
            .find(|p| (p.a, p.b) == (a, b) || (p.a, p.b) == (b, a))
        {
            return p.path.label().to_string();
        }
        let (na, nb) = (self.gpu.numa_nodes.get(a), self.gpu.numa_nodes.get(b));
        if na.is_none() || na == nb {
            self.links.pcie_same_numa.clone()
        } else {
            self.links.pcie_cross_numa.clone()
        }
    }

    /// The PCI address of GPU `i` (the node's numbering), as NVML's short form writes it.
    pub(crate) fn bus_id(&self, i: usize) -> String {
        if let Some(a) = self.gpu.bus_ids.get(i).and_then(|b| PciAddress::parse(b)) {
            return a.to_string();
        }
        let bus = self.gpu.first_bus.unwrap_or(0) + i as u32 * self.gpu.bus_stride.unwrap_or(0);
        format!("0000:{bus:02x}:00.0")
    }
}

/// A PCI address, domain:bus:device.function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PciAddress {
    domain: u32,
    bus: u8,
    device: u8,
    function: u8,
}

impl PciAddress {
    /// "0000:18:00.0" or NVML's "00000000:18:00.0", hexadecimal, either case.
    fn parse(s: &str) -> Option<Self> {
        let (domain, rest) = s.split_once(':')?;
        let (bus, rest) = rest.split_once(':')?;
        let (device, function) = rest.split_once('.')?;
        let hex = |t: &str, max_len: usize| {
            (!t.is_empty() && t.len() <= max_len && t.bytes().all(|c| c.is_ascii_hexdigit()))
                .then(|| u32::from_str_radix(t, 16).ok())
                .flatten()
        };
        let a = PciAddress {
            domain: hex(domain, 8).filter(|_| domain.len() >= 4)?,
            bus: u8::try_from(hex(bus, 2).filter(|_| bus.len() == 2)?).ok()?,
            device: u8::try_from(hex(device, 2).filter(|_| device.len() == 2)?).ok()?,
            function: u8::try_from(hex(function, 1)?).ok()?,
        };
        (a.device <= 0x1f && a.function <= 7).then_some(a)
    }
}

impl std::fmt::Display for PciAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{}",
            self.domain, self.bus, self.device, self.function
        )
    }
}
