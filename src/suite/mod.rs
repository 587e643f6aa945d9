//! The suite: what the node must be and do. Loaded strictly from TOML (see [`load`]), then
//! validated; every error names file, line and column.

pub mod freeze;
pub mod load;

use crate::config::{key_path, KeyPath, Seg};
use crate::units::ByteSize;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The suite format this nodecert reads.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// Suite format version; this nodecert reads 1.
    pub format_version: u32,
    /// Short name, e.g. "h100-sxm-8".
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Another suite this one inherits from: an embedded suite's name, or a path relative to
    /// this file. Resolved while loading; empty afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extends: Option<String>,
    #[serde(default)]
    pub node: NodeExpect,
    #[serde(default)]
    pub topology: TopologyExpect,
    /// The scale-out fabric: the RDMA NICs and how the GPUs reach them.
    #[serde(default, skip_serializing_if = "NetworkExpect::is_empty")]
    pub network: NetworkExpect,
    #[serde(default)]
    pub checks: Checks,
    /// NCCL settings the node is certified with.
    #[serde(default, skip_serializing_if = "NcclExpect::is_empty")]
    pub nccl: NcclExpect,
    /// An earlier run to compare with: metrics worse than it by more than the allowed margin fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
}

/// `[nccl]`: the NCCL settings this node is certified with.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NcclExpect {
    /// Settings (name = exact value) that are part of the node as certified, such as the
    /// `NCCL_TOPO_FILE` a VM image sets: a figure measured under them is judged as the node's.
    /// Any other setting in effect leaves a shortfall unjudged ([`crate::checks::nccl_env`]).
    /// This neither sets them nor requires them.
    #[serde(default)]
    pub accept: std::collections::BTreeMap<String, String>,
}

impl NcclExpect {
    pub fn is_empty(&self) -> bool {
        self.accept.is_empty()
    }
}

/// `[baseline]`: re-validation against an earlier certificate.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    /// evidence.json of the earlier run (or a report folder holding one), relative to the suite
    /// file that names it.
    pub evidence: String,
    /// A metric worse than the baseline's by more than this percent fails, even within its floor.
    #[serde(default = "default_max_regression_pct")]
    pub max_regression_pct: f64,
}

fn default_max_regression_pct() -> f64 {
    10.0
}

/// What the node must be.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NodeExpect {
    /// Number of GPUs.
    pub gpu_count: Option<usize>,
    /// Case-insensitive substring of every GPU's name, e.g. "H100".
    pub gpu_model: Option<String>,
    /// Minimum memory per GPU, GiB.
    pub memory_gib_min: Option<f64>,
    /// Minimum driver version, e.g. "535.104".
    pub driver_min: Option<String>,
    /// bare-metal, passthrough, vgpu, vm (passthrough or vgpu) or any.
    pub virtualization: Option<VirtExpect>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum VirtExpect {
    BareMetal,
    Passthrough,
    Vgpu,
    Vm,
    Any,
}

/// How the GPUs must be connected.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TopologyExpect {
    /// Active NVLinks between every pair (18 for "NV18"); 0 means no NVLink at all.
    pub nvlinks_per_pair: Option<u32>,
    /// Per-pair exceptions to `nvlinks_per_pair`, e.g. an H100 NVL pair with 12 links.
    #[serde(default)]
    pub nvlink_pairs: Vec<PairLinks>,
    /// The GPUs must (true) or must not (false) connect through NVSwitch.
    pub nvswitch: Option<bool>,
    /// Minimum current PCIe generation and width of every GPU.
    pub pcie_gen: Option<u32>,
    pub pcie_width: Option<u32>,
    /// Expected NUMA node of each GPU, in CUDA order: literal ids, which real nodes number in
    /// their own ways (an HGX A100 in NPS4 mode reports 3,3,1,1,7,7,5,5). Prefer the relations
    /// below; a frozen handover suite may pin the ids.
    pub numa_nodes: Option<Vec<i32>>,
    /// GPUs that share a CPU socket, in CUDA order: `[[0, 1, 2, 3], [4, 5, 6, 7]]`. The GPUs of
    /// one group must sit on one socket and those of different groups on different sockets;
    /// which number a socket has is not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_groups: Option<Vec<Vec<usize>>>,
    /// The same relation for NUMA nodes (one socket holds several under AMD's NPS2 or NPS4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_groups: Option<Vec<Vec<usize>>>,
    /// The CPUs each GPU is local to, in CUDA order, as the kernel writes a CPU list
    /// ("0-55,112-167"; compared as sets). Literal numbers, which differ between machines and
    /// BIOS settings (SMT, NPS): prefer `cpu_affinity_groups`; a frozen handover suite may pin
    /// them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_affinity: Option<Vec<String>>,
    /// GPUs local to the same CPUs, in CUDA order: `[[0, 1], [2, 3]]`. The GPUs of one group
    /// must report one CPU list and different groups different ones; which CPUs is not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_affinity_groups: Option<Vec<Vec<usize>>>,
    /// NVSwitches reached by the GPUs' active NVLinks (4 on an HGX H100 or H200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvswitch_count: Option<u32>,
    /// The PCIe path class of GPU pairs, as `nvidia-smi topo -m` prints it; a pair may be no
    /// farther apart than stated (PIX < PXB < PHB < NODE < SYS).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pcie_paths: Vec<PairPath>,
}

/// `[network]`: the RDMA NICs that multi-node jobs ride, and how the GPUs reach them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NetworkExpect {
    /// The fabric's NICs (RDMA devices of `link_layer`, not in `exclude`): at least this many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_count: Option<usize>,
    /// The fabric's link layer: "infiniband", or "ethernet" (RoCE). RDMA devices of the other
    /// layer are not part of the fabric (a front-end or storage NIC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_layer: Option<LinkLayer>,
    /// Every fabric port's rate, Gb/s, at least (400 for NDR): a port that trained lower fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_gbps: Option<f64>,
    /// Every GPU has a fabric NIC no farther than this (PIX or PXB: the condition under which
    /// NCCL uses GPUDirect RDMA by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_nic_path: Option<PciePath>,
    /// GPUDirect RDMA must be ready: nvidia_peermem (or the peer-memory client) loaded, or
    /// dma-buf supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gdr: Option<bool>,
    /// RDMA devices that are not part of the fabric, by name ("mlx5_8"), or by prefix ending
    /// in `*` ("mlx5_an*").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

impl NetworkExpect {
    pub fn is_empty(&self) -> bool {
        *self == NetworkExpect::default()
    }

    /// Whether the RDMA device `name` is left out of the fabric by `exclude`.
    pub fn excludes(&self, name: &str) -> bool {
        self.exclude.iter().any(|e| match e.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => e == name,
        })
    }
}

/// A fabric's link layer.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LinkLayer {
    #[serde(rename = "infiniband")]
    InfiniBand,
    /// RDMA over Converged Ethernet.
    Ethernet,
}

impl LinkLayer {
    /// As the kernel writes it: "InfiniBand", "Ethernet".
    pub fn kernel_name(self) -> &'static str {
        match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
        }
    }

    /// The layer of the kernel's name, case-insensitively.
    pub fn of_kernel(s: &str) -> Option<LinkLayer> {
        [LinkLayer::InfiniBand, LinkLayer::Ethernet]
            .into_iter()
            .find(|l| l.kernel_name().eq_ignore_ascii_case(s.trim()))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PairPath {
    pub a: usize,
    pub b: usize,
    pub path: PciePath,
}

/// How two GPUs connect over PCIe, nearest first (nvidia-smi topo -m's legend).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub enum PciePath {
    /// At most one PCIe bridge between them.
    #[serde(rename = "PIX")]
    Pix,
    /// Several PCIe bridges, no host bridge.
    #[serde(rename = "PXB")]
    Pxb,
    /// Through a PCIe host bridge (typically the CPU).
    #[serde(rename = "PHB")]
    Phb,
    /// Across host bridges within one NUMA node.
    #[serde(rename = "NODE")]
    Node,
    /// Across the interconnect between NUMA nodes (QPI/UPI, Infinity Fabric).
    #[serde(rename = "SYS")]
    Sys,
}

impl PciePath {
    pub const ALL: [PciePath; 5] = [
        PciePath::Pix,
        PciePath::Pxb,
        PciePath::Phb,
        PciePath::Node,
        PciePath::Sys,
    ];

    pub fn label(self) -> &'static str {
        match self {
            PciePath::Pix => "PIX",
            PciePath::Pxb => "PXB",
            PciePath::Phb => "PHB",
            PciePath::Node => "NODE",
            PciePath::Sys => "SYS",
        }
    }

    /// The class of an inventory label ("PXB"); None for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.label() == s.trim())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PairLinks {
    pub a: usize,
    pub b: usize,
    pub links: u32,
}

impl TopologyExpect {
    /// Expected NVLink count for a pair, if the suite says.
    pub fn expected_links(&self, a: usize, b: usize) -> Option<u32> {
        self.nvlink_pairs
            .iter()
            .find(|p| (p.a, p.b) == (a, b) || (p.a, p.b) == (b, a))
            .map(|p| p.links)
            .or(self.nvlinks_per_pair)
    }
}

/// A bound on one figure. Any subset may be given; "below" bounds suit bandwidths, "above"
/// bounds latencies. Values are in the unit of the figure (GB/s = 10^9 bytes/s, µs).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_below: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warn_below: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_above: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warn_above: Option<f64>,
    /// What a healthy node typically measures (cite the source beside it). The node's median is
    /// held against it: under `typical_fraction` of it (over it by as much, for a latency) is a
    /// warning, even when every figure is above its floor and the figures agree with each
    /// other (a node uniformly 15% slow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typical: Option<f64>,
    /// The share of `typical` below which the node's median is warned about (default 0.9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typical_fraction: Option<f64>,
}

/// The share of a typical figure a node may fall to before it is warned about.
pub const DEFAULT_TYPICAL_FRACTION: f64 = 0.9;

impl Limit {
    /// Nothing at all is set: no bound and no typical value.
    pub fn is_unset(&self) -> bool {
        self.is_empty() && self.typical.is_none() && self.typical_fraction.is_none()
    }

    /// No bound is set (a typical value alone bounds no figure).
    pub fn is_empty(&self) -> bool {
        self.fail_below.is_none()
            && self.warn_below.is_none()
            && self.fail_above.is_none()
            && self.warn_above.is_none()
    }
}

/// The checks to run. Each kind is a table; `enabled = false` turns off an inherited one.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Checks {
    pub topology: Option<TopologyCheck>,
    pub virtualization: Option<VirtualizationCheck>,
    pub health: Option<HealthCheck>,
    pub host_bandwidth: Option<HostBandwidthCheck>,
    pub p2p_bandwidth: Option<P2pBandwidthCheck>,
    pub p2p_latency: Option<P2pLatencyCheck>,
    /// One table per collective: `[checks.collective.all_reduce]`.
    #[serde(default)]
    pub collective: BTreeMap<CollectiveOp, CollectiveCheck>,
    /// `[checks.compute]`: dense GEMM throughput of each GPU (after the collectives, before the
    /// training run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<ComputeCheck>,
    pub training: Option<TrainingCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkCheck>,
    /// `[checks.fabric]`: NCCL across the nodes of a multi-node job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<FabricCheck>,
}

/// `[checks.fabric]`: the nodes of one scheduler job measured together over their NICs: every
/// pair of nodes in rounds (the slow node or link found), then all of them at once. It runs
/// only inside a multi-node job (Slurm, a Kubernetes Indexed Job: `fleet slurm --fabric`); a
/// single-node run skips it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FabricCheck {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// The message size (per GPU) at which each pair's all_reduce and the whole job's
    /// all_reduce and all_gather are judged.
    #[serde(default = "default_fabric_size")]
    pub size: ByteSize,
    /// Smaller sizes measured too, each with the data check (shown, not judged against the
    /// floors): where latency gives way to bandwidth. At most 8.
    #[serde(default)]
    pub sizes: Vec<ByteSize>,
    /// Bus bandwidth of all_reduce between two nodes, GB/s: a pair below `fail_below` makes its
    /// nodes suspects, and the second pass says which node (or link) it is.
    #[serde(default)]
    pub pair_busbw_gbps: Limit,
    /// Bus bandwidth of all_reduce across every node of the job, GB/s.
    #[serde(default)]
    pub busbw_gbps: Limit,
    /// Bus bandwidth of all_gather across every node of the job, GB/s (none: shown, not
    /// judged).
    #[serde(default)]
    pub all_gather_busbw_gbps: Limit,
    /// The longest wait for the other nodes (to arrive, and at each round), seconds. The check
    /// runs first, so that the nodes of a job meet before their own checks set them apart.
    #[serde(default = "default_fabric_timeout")]
    pub timeout_s: f64,
}

fn default_fabric_size() -> ByteSize {
    ByteSize(1 << 30)
}

fn default_fabric_timeout() -> f64 {
    300.0
}

impl Default for FabricCheck {
    fn default() -> Self {
        FabricCheck {
            enabled: true,
            size: default_fabric_size(),
            sizes: vec![],
            pair_busbw_gbps: Limit::default(),
            busbw_gbps: Limit::default(),
            all_gather_busbw_gbps: Limit::default(),
            timeout_s: default_fabric_timeout(),
        }
    }
}

fn yes() -> bool {
    true
}

/// `[checks.network]`: the NICs against `[network]`, and their error counters over the run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NetworkCheck {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// The counters whose rise during the run is judged (default: every one nodecert reads,
    /// `crate::network::COUNTERS` and `carrier_changes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<Vec<String>>,
    /// How much each may rise during the run (default 0).
    #[serde(default)]
    pub max_rise: u64,
}

impl NetworkCheck {
    /// The counters judged.
    pub fn judged_counters(&self) -> Vec<String> {
        match &self.counters {
            Some(c) => c.clone(),
            None => crate::network::COUNTERS
                .iter()
                .chain(std::iter::once(&crate::network::CARRIER_CHANGES))
                .map(|c| c.to_string())
                .collect(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TopologyCheck {
    #[serde(default = "yes")]
    pub enabled: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VirtualizationCheck {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Every GPU pair must have peer access (default: true when the node has several GPUs).
    pub require_p2p: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HealthCheck {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// ECC must be enabled on every GPU.
    #[serde(default = "yes")]
    pub require_ecc: bool,
    /// Uncorrectable ECC errors (volatile, or SRAM lifetime) allowed. Source: Azure's ECC rules.
    #[serde(default)]
    pub max_uncorrectable: u64,
    /// SRAM correctable errors allowed (Azure: 10,000).
    #[serde(default = "default_sram_correctable")]
    pub max_sram_correctable: u64,
    /// DRAM errors allowed (Azure: 2x10^7).
    #[serde(default = "default_dram")]
    pub max_dram_errors: u64,
    /// Fail on a pending row remap (GPU needs a reset) and on a failed one (out of spare rows).
    #[serde(default = "yes")]
    pub fail_on_remap_pending: bool,
    #[serde(default = "yes")]
    pub fail_on_remap_failure: bool,
    /// XIDs that fail a node (Azure's list).
    #[serde(default = "default_xids")]
    pub fail_xids: Vec<u32>,
    /// Hours before the run in which a kernel-log XID is still judged. Older ones (logged since
    /// boot, perhaps before a GPU reset weeks ago) are reported as history, not judged; XIDs
    /// seen while nodecert runs and XIDs of unknown age are always judged. 0: this run only.
    #[serde(default = "default_xid_lookback_h")]
    pub xid_lookback_h: f64,
    /// PCIe replays allowed per GPU (DCGM: 80).
    #[serde(default = "default_replays")]
    pub max_pcie_replays: u64,
    /// NVLink CRC/replay/recovery errors allowed per link.
    #[serde(default = "default_nvlink_errors")]
    pub max_nvlink_errors: u64,
    /// Throttle reasons that fail the check when active.
    #[serde(default = "default_throttle")]
    pub fail_throttle: Vec<String>,
    /// Temperature above which a warning is raised, °C.
    pub warn_temperature_c: Option<f64>,
    /// Minimum driver version (overrides node.driver_min for this check).
    pub driver_min: Option<String>,
    /// Every GPU of the node must run the same VBIOS version (Azure's health checks fail a node
    /// with more than one). Judged on nodes with two or more GPUs.
    #[serde(default = "yes")]
    pub vbios_must_match: bool,
}

fn default_sram_correctable() -> u64 {
    10_000
}
fn default_dram() -> u64 {
    20_000_000
}
fn default_xids() -> Vec<u32> {
    // reference-numbers.md, "XIDs that fail a node" (Azure's health checks).
    vec![
        48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120,
    ]
}
fn default_xid_lookback_h() -> f64 {
    24.0
}
fn default_replays() -> u64 {
    80
}
fn default_nvlink_errors() -> u64 {
    100
}
fn default_throttle() -> Vec<String> {
    [
        "hw_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "sw_thermal_slowdown",
    ]
    .map(String::from)
    .to_vec()
}

/// The throttle reasons nodecert knows (NVML's names in snake_case).
pub const THROTTLE_REASONS: &[&str] = &[
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
];

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostBandwidthCheck {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Buffer size per copy.
    #[serde(default = "default_host_size")]
    pub size: ByteSize,
    #[serde(default = "default_iterations")]
    pub iterations: u32,
    #[serde(default = "default_warmup")]
    pub warmup: u32,
    /// Per GPU, GB/s.
    #[serde(default)]
    pub h2d: Limit,
    #[serde(default)]
    pub d2h: Limit,
    /// H2D and D2H at once, per GPU, GB/s (sum of both directions).
    #[serde(default)]
    pub bidir: Limit,
    /// H2D on all GPUs at once, per GPU, GB/s: a shared switch or root port shows here.
    #[serde(default)]
    pub all_gpus_h2d: Limit,
    /// Device-local copy, bytes read plus written, GB/s.
    #[serde(default)]
    pub device_copy: Limit,
    /// Each GPU must be within this many percent of the node's median.
    pub outlier_pct: Option<f64>,
    /// After a figure misses its floor, measure the whole check again up to this many more
    /// times before it fails (0 to 5; 0: judged on one attempt). Errors, warnings and wrong
    /// data are never re-measured.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub remeasure: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// The most re-measures a check may take after a miss.
pub const MAX_REMEASURE: u32 = 5;

fn default_host_size() -> ByteSize {
    ByteSize(256 << 20)
}
fn default_iterations() -> u32 {
    20
}
fn default_warmup() -> u32 {
    3
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct P2pBandwidthCheck {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default = "default_p2p_size")]
    pub size: ByteSize,
    #[serde(default = "default_iterations")]
    pub iterations: u32,
    #[serde(default = "default_warmup")]
    pub warmup: u32,
    /// Per ordered pair, copy engine, GB/s: the destination reads from the source.
    #[serde(default)]
    pub read: Limit,
    /// Per ordered pair: the source writes into the destination.
    #[serde(default)]
    pub write: Limit,
    /// Both directions at once, per pair, GB/s (sum).
    #[serde(default)]
    pub bidir: Limit,
    /// Each pair must be within this many percent of the node's median.
    pub outlier_pct: Option<f64>,
    /// Limits for the pairs of one path class (`[checks.p2p_bandwidth.by_path.SYS]`,
    /// `read = { fail_below = 18.0 }`): each figure a class states replaces `read`, `write` or
    /// `bidir` for the pairs of that class; a figure it does not state keeps the check-wide one.
    /// Absent (suites written before): one limit for every pair.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_path: BTreeMap<PathClass, PathLimits>,
    /// A pair without peer access fails (copies would be staged through the host).
    #[serde(default = "yes")]
    pub require_peer_access: bool,
    /// After a figure misses its floor, measure the whole check again up to this many more
    /// times before it fails (0 to 5; 0: judged on one attempt). Errors, warnings and wrong
    /// data are never re-measured.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub remeasure: u32,
}

/// The limits of one path class's pairs: any of the three figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PathLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<Limit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<Limit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bidir: Option<Limit>,
}

impl PathLimits {
    /// The limit this class states for a figure ("p2p_read", "p2p_write", "p2p_bidir").
    pub fn for_metric(&self, metric: &str) -> Option<&Limit> {
        match metric {
            "p2p_read" => self.read.as_ref(),
            "p2p_write" => self.write.as_ref(),
            "p2p_bidir" => self.bidir.as_ref(),
            _ => None,
        }
    }
}

/// How a GPU pair connects, as `nvidia-smi topo -m` prints it: a PCIe path class, or NV# for a
/// pair joined by # active NVLinks (NV18).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathClass {
    Pcie(PciePath),
    Nvlink(u32),
}

impl PathClass {
    pub fn label(self) -> String {
        match self {
            PathClass::Pcie(p) => p.label().to_string(),
            PathClass::Nvlink(n) => format!("NV{n}"),
        }
    }

    /// "PIX" ... "SYS", or "NV1" to "NV32"; None for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        if let Some(p) = PciePath::parse(s) {
            return Some(PathClass::Pcie(p));
        }
        let n: u32 = s.strip_prefix("NV")?.parse().ok()?;
        let canonical = format!("NV{n}") == s;
        (canonical && (1..=MAX_NVLINKS_PER_GPU).contains(&n)).then_some(PathClass::Nvlink(n))
    }
}

impl Serialize for PathClass {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.label())
    }
}

/// Read as a string (like [`CollectiveOp`]) so that an error inside a class's table keeps the
/// class in its key path.
impl<'de> Deserialize<'de> for PathClass {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown path class `{s}`, expected one of PIX, PXB, PHB, NODE, SYS or NV1 to \
                 NV{MAX_NVLINKS_PER_GPU} (NV18: 18 NVLinks)"
            ))
        })
    }
}

fn default_p2p_size() -> ByteSize {
    ByteSize(512 << 20)
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct P2pLatencyCheck {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default = "default_latency_iterations")]
    pub iterations: u32,
    /// Per ordered pair, microseconds.
    #[serde(default)]
    pub latency_us: Limit,
    pub outlier_pct: Option<f64>,
    /// After a figure misses its floor, measure the whole check again up to this many more
    /// times before it fails (0 to 5; 0: judged on one attempt). Errors, warnings and wrong
    /// data are never re-measured.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub remeasure: u32,
}

fn default_latency_iterations() -> u32 {
    1000
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveOp {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
    AllToAll,
}

impl CollectiveOp {
    pub const ALL: [CollectiveOp; 5] = [
        CollectiveOp::AllReduce,
        CollectiveOp::AllGather,
        CollectiveOp::ReduceScatter,
        CollectiveOp::Broadcast,
        CollectiveOp::AllToAll,
    ];

    pub fn key(self) -> &'static str {
        match self {
            CollectiveOp::AllReduce => "all_reduce",
            CollectiveOp::AllGather => "all_gather",
            CollectiveOp::ReduceScatter => "reduce_scatter",
            CollectiveOp::Broadcast => "broadcast",
            CollectiveOp::AllToAll => "all_to_all",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        let s = s.replace('-', "_");
        Self::ALL.into_iter().find(|o| o.key() == s)
    }

    /// nccl-tests' bus-bandwidth factor for `n` ranks (doc/PERFORMANCE.md).
    pub fn busbw_factor(self, n: usize) -> f64 {
        let n = n.max(1) as f64;
        match self {
            CollectiveOp::AllReduce => 2.0 * (n - 1.0) / n,
            CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll => {
                (n - 1.0) / n
            }
            CollectiveOp::Broadcast => 1.0,
        }
    }
}

/// Read as a string, not as an enum: serde_path_to_error records a map key only when it is read
/// as a string, so an error inside `[checks.collective.all_gather]` keeps `all_gather` in its key
/// path and is located at the offending key, not at the table's header.
impl<'de> Deserialize<'de> for CollectiveOp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const NAMES: &[&str] = &[
            "all_reduce",
            "all_gather",
            "reduce_scatter",
            "broadcast",
            "all_to_all",
        ];
        let s = String::deserialize(d)?;
        Self::ALL
            .into_iter()
            .find(|o| o.key() == s)
            .ok_or_else(|| serde::de::Error::unknown_variant(&s, NAMES))
    }
}

impl std::fmt::Display for CollectiveOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CollectiveCheck {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Message sizes swept from min_size to max_size, multiplying by factor (nccl-tests -b -e -f).
    #[serde(default = "default_coll_min")]
    pub min_size: ByteSize,
    #[serde(default = "default_coll_max")]
    pub max_size: ByteSize,
    #[serde(default = "default_factor")]
    pub factor: u64,
    #[serde(default = "default_iterations")]
    pub iterations: u32,
    #[serde(default = "default_coll_warmup")]
    pub warmup: u32,
    /// Minimum bus bandwidth, GB/s, from a message size up: `{ "1GiB" = 300, "8GiB" = 431 }`
    /// (each floor applies to its size and larger ones until the next key).
    #[serde(default)]
    pub min_busbw_gbps: BTreeMap<String, f64>,
    /// Warning levels, same shape.
    #[serde(default)]
    pub warn_busbw_gbps: BTreeMap<String, f64>,
    /// For PCIe boxes: the largest size's bus bandwidth must reach this fraction of the slowest
    /// measured peer-to-peer path (needs the p2p_bandwidth check).
    pub min_fraction_of_p2p: Option<f64>,
    /// After a figure misses its floor, measure the whole check again up to this many more
    /// times before it fails (0 to 5; 0: judged on one attempt). Errors, warnings and wrong
    /// data are never re-measured.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub remeasure: u32,
    /// all_reduce only: what the suite asks of NVLink SHARP. Absent: NVLS is not judged, and
    /// `min_busbw_gbps` applies to whatever NCCL chose (the meaning of suites written before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvls: Option<NvlsRequirement>,
    /// With `nvls = "if_available"`: the floors that apply when the node cannot use NVLS (NCCL
    /// then runs its ring), same shape as `min_busbw_gbps`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub min_busbw_gbps_no_nvls: BTreeMap<String, f64>,
}

/// What a suite asks of NVLink SHARP for all_reduce.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum NvlsRequirement {
    /// The node must be able to use NVLS; when it cannot, the check fails naming the cause.
    Required,
    /// Use NVLS where the node can; where it cannot, judge by `min_busbw_gbps_no_nvls`.
    IfAvailable,
    /// Judge the figure without NVLS (for nodes or VMs where the operator disables it): the
    /// floors apply to the pass with NVLS forced off where the node could use NVLS, and to
    /// NCCL's own figure where it cannot.
    Off,
}

fn default_coll_min() -> ByteSize {
    ByteSize(8)
}
fn default_coll_max() -> ByteSize {
    ByteSize(1 << 30)
}
fn default_factor() -> u64 {
    2
}
fn default_coll_warmup() -> u32 {
    5
}

impl CollectiveCheck {
    /// Floors as (size, GB/s), sorted by size. Invalid keys were rejected at validation.
    pub fn floors(map: &BTreeMap<String, f64>) -> Vec<(u64, f64)> {
        let mut v: Vec<(u64, f64)> = map
            .iter()
            .filter_map(|(k, g)| ByteSize::parse(k).ok().map(|s| (s.0, *g)))
            .collect();
        v.sort_by_key(|x| x.0);
        v
    }

    /// The floor that applies to a message size: the one with the largest key <= size.
    pub fn floor_for(floors: &[(u64, f64)], size: u64) -> Option<f64> {
        floors.iter().rev().find(|(s, _)| *s <= size).map(|x| x.1)
    }
}

/// The number formats of the compute check's GEMMs.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum GemmPrecision {
    /// fp32 operands and arithmetic, TF32 off (`CUBLAS_COMPUTE_32F_PEDANTIC`-like: no tensor
    /// cores).
    Fp32,
    /// fp32 operands, TF32 tensor cores (`CUBLAS_COMPUTE_32F_FAST_TF32`).
    Tf32,
    /// bf16 operands, fp32 accumulation and output (sm_80 and newer).
    Bf16,
    /// fp8 (e4m3) operands, fp32 accumulation (sm_89 and newer).
    Fp8,
}

impl GemmPrecision {
    pub const ALL: [GemmPrecision; 4] = [
        GemmPrecision::Fp32,
        GemmPrecision::Tf32,
        GemmPrecision::Bf16,
        GemmPrecision::Fp8,
    ];

    /// As the suite writes it.
    pub fn name(self) -> &'static str {
        match self {
            GemmPrecision::Fp32 => "fp32",
            GemmPrecision::Tf32 => "tf32",
            GemmPrecision::Bf16 => "bf16",
            GemmPrecision::Fp8 => "fp8",
        }
    }

    /// The metric this precision's throughput is recorded as ("bf16_tflops").
    pub fn metric(self) -> &'static str {
        match self {
            GemmPrecision::Fp32 => "fp32_tflops",
            GemmPrecision::Tf32 => "tf32_tflops",
            GemmPrecision::Bf16 => "bf16_tflops",
            GemmPrecision::Fp8 => "fp8_tflops",
        }
    }

    /// The oldest CUDA compute capability with this precision on tensor cores (fp32: any).
    pub fn min_compute_capability(self) -> (i32, i32) {
        match self {
            GemmPrecision::Fp32 => (0, 0),
            GemmPrecision::Tf32 | GemmPrecision::Bf16 => (8, 0),
            GemmPrecision::Fp8 => (8, 9),
        }
    }
}

impl std::fmt::Display for GemmPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `[checks.compute]`: what each GPU computes. A square GEMM (`size` = m = n = k) per precision
/// through cuBLAS, timed by CUDA events over `iterations` after `warmup`, its result checked
/// against the exact product of small integers; each figure judged against its floor and, with
/// `outlier_pct`, against the node's median (the slow but healthy-looking GPU).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ComputeCheck {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// m = n = k of every GEMM: large enough to reach the GPU's plateau (8192 does on
    /// Ampere and Hopper: shared/notes/reference-numbers.md).
    #[serde(default = "default_gemm_size")]
    pub size: u64,
    /// The precisions measured, in order. A precision the GPU does not have (fp8 before
    /// compute capability 8.9) is not measured; where the suite sets a limit for it, that is
    /// said as "not available here", and the pass is partial.
    #[serde(default = "default_gemm_precisions")]
    pub precisions: Vec<GemmPrecision>,
    #[serde(default = "default_gemm_iterations")]
    pub iterations: u32,
    #[serde(default = "default_warmup")]
    pub warmup: u32,
    /// Per GPU, TFLOP/s (2·size³ per GEMM).
    #[serde(default, skip_serializing_if = "Limit::is_unset")]
    pub fp32_tflops: Limit,
    #[serde(default, skip_serializing_if = "Limit::is_unset")]
    pub tf32_tflops: Limit,
    #[serde(default, skip_serializing_if = "Limit::is_unset")]
    pub bf16_tflops: Limit,
    #[serde(default, skip_serializing_if = "Limit::is_unset")]
    pub fp8_tflops: Limit,
    /// Each GPU must be within this many percent of the node's median, per precision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier_pct: Option<f64>,
    /// Show that `size` reaches the plateau: every GEMM is measured at twice the size too, and
    /// the median GPU's rate there may be at most this many percent above its rate at `size`
    /// (else a warning: the rate still rises with the size, and the figures are below the GPU's
    /// best). Half the size would not do: below the plateau the rate rises steeply, so a size
    /// at its start would be faster than its half by more than any margin. 0 is off; at a
    /// `size` whose double is over [`MAX_GEMM_SIZE`] the plateau is not shown, and a note says
    /// so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plateau_pct: Option<f64>,
    /// After a figure misses its floor, measure again up to this many more times (0 to 5).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub remeasure: u32,
    /// `[checks.compute.sustained]`: every GPU under GEMMs at once for a while, its clocks,
    /// power, temperature and throttle reasons sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sustained: Option<SustainedLoad>,
}

impl ComputeCheck {
    /// The plateau margin where the plateau is measured: set above 0, at a size whose double
    /// this check takes.
    pub fn plateau(&self) -> Option<f64> {
        self.plateau_pct
            .filter(|p| *p > 0.0 && self.size.saturating_mul(2) <= MAX_GEMM_SIZE)
    }
}

/// Every GPU at once under back-to-back GEMMs (`precision`, the check's `size`) for `seconds`,
/// each GPU's rate taken per window of `sample_ms` and NVML read as often: SM clock, power,
/// temperature, throttle reasons. As DCGM's targeted stress (the rate held) and targeted power
/// (the power reached) diagnostics: a GPU that throttles, cannot reach its power, overheats or
/// loses rate under load is named.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SustainedLoad {
    #[serde(default = "default_sustained_seconds")]
    pub seconds: f64,
    #[serde(default = "default_sustained_precision")]
    pub precision: GemmPrecision,
    #[serde(default = "default_sample_ms")]
    pub sample_ms: u32,
    /// Throttle reasons that fail a GPU when any sample shows them (names as `[checks.health]
    /// fail_throttle`). Default: the hardware slowdowns and thermal ones; a power cap is what a
    /// GPU at full load is expected to reach, so it is not among them.
    #[serde(default = "default_sustained_throttle")]
    pub fail_throttle: Vec<String>,
    /// The share of its power limit each GPU's median power must reach over the second half of
    /// the run (DCGM's targeted power); unset: power is shown, not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_power_fraction: Option<f64>,
    /// How far, in percent, a GPU's rate over the last tenth of the run may fall below its rate
    /// over the first tenth.
    #[serde(default = "default_max_rate_drop_pct")]
    pub max_rate_drop_pct: f64,
    /// The hottest any sample of a GPU may read, °C; unset: not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_temperature_c: Option<f64>,
}

fn default_sustained_seconds() -> f64 {
    30.0
}
fn default_sustained_precision() -> GemmPrecision {
    GemmPrecision::Bf16
}
fn default_sample_ms() -> u32 {
    500
}
fn default_sustained_throttle() -> Vec<String> {
    [
        "hw_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "sw_thermal_slowdown",
    ]
    .map(String::from)
    .to_vec()
}
fn default_max_rate_drop_pct() -> f64 {
    10.0
}

/// The longest sustained load a suite may ask, seconds (an hour).
pub const MAX_SUSTAINED_S: f64 = 3600.0;

impl ComputeCheck {
    /// The suite's limit for one precision.
    pub fn limit(&self, p: GemmPrecision) -> &Limit {
        match p {
            GemmPrecision::Fp32 => &self.fp32_tflops,
            GemmPrecision::Tf32 => &self.tf32_tflops,
            GemmPrecision::Bf16 => &self.bf16_tflops,
            GemmPrecision::Fp8 => &self.fp8_tflops,
        }
    }
}

fn default_gemm_size() -> u64 {
    8192
}
fn default_gemm_precisions() -> Vec<GemmPrecision> {
    GemmPrecision::ALL.to_vec()
}
fn default_gemm_iterations() -> u32 {
    20
}

/// The largest GEMM side the compute check takes: its three fp32 matrices are 3 GiB on the GPU,
/// the product read back 1 GiB of host memory, and its exact products stay below 2^24 (see
/// `checks::compute`).
pub const MAX_GEMM_SIZE: u64 = 16384;
/// The smallest GEMM size.
pub const MIN_GEMM_SIZE: u64 = 256;

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// fp32 with TF32 off.
    #[default]
    Fp32,
    Tf32,
    /// Mixed precision: bf16 GEMM operands, fp32 accumulation, fp32 master weights, gradients,
    /// loss and update (sm_80 or newer).
    Bf16,
}

impl Precision {
    /// As the suite writes it: "fp32", "tf32", "bf16".
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Bf16 => "bf16",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TrainingCheck {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Layer widths: input, hidden..., classes.
    #[serde(default = "default_layers")]
    pub layers: Vec<usize>,
    /// Batch per GPU (each replica takes this many samples a step).
    #[serde(default = "default_batch")]
    pub batch: usize,
    #[serde(default = "default_steps")]
    pub steps: usize,
    #[serde(default = "default_precision")]
    pub precision: Precision,
    #[serde(default = "default_lr")]
    pub lr: f64,
    #[serde(default)]
    pub seed: u64,
    /// The final loss must be below this.
    pub loss_target: Option<f64>,
    /// The golden check: a small configuration trained both on the node and on the CPU in plain
    /// Rust (same data, same initial weights); the losses of the first `golden_steps` steps
    /// must agree within `golden_rel_tol` (relative) plus `golden_abs_tol`.
    #[serde(default = "default_golden_layers")]
    pub golden_layers: Vec<usize>,
    #[serde(default = "default_golden_batch")]
    pub golden_batch: usize,
    #[serde(default = "default_golden_lr")]
    pub golden_lr: f64,
    #[serde(default = "default_golden_steps")]
    pub golden_steps: usize,
    #[serde(default = "default_golden_tol")]
    pub golden_rel_tol: f64,
    #[serde(default = "default_golden_abs_tol")]
    pub golden_abs_tol: f64,
    /// Samples per second, whole node.
    #[serde(default)]
    pub samples_per_s: Limit,
    /// N-GPU throughput over N times the one-GPU throughput.
    pub min_scaling_efficiency: Option<f64>,
    /// Also train the same model and data tensor-parallel over every GPU and hybrid (tensor-
    /// parallel groups of 2 and of 4, data-parallel across them), each checked against the CPU
    /// golden run and timed, and compare them with the data-parallel run. On by default on a
    /// node of two or more GPUs; each partitioning costs a golden and a timed run.
    #[serde(default = "yes")]
    pub partitionings: bool,
    /// Floors for the tensor-parallel run. None set: its figures are reported, not judged (a
    /// PCIe-only node is no place for tensor parallelism, and saying so is not a failure).
    #[serde(default)]
    pub tensor_parallel: MethodFloors,
    /// Floors for every hybrid run.
    #[serde(default)]
    pub hybrid: MethodFloors,
}

/// What a suite asks of one partitioning of the training run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MethodFloors {
    /// Its samples per second over the GPU count times the one-GPU data-parallel run's.
    pub min_scaling_efficiency: Option<f64>,
    /// The most of its step it may wait on communication, 0 to 1.
    pub max_comm_fraction: Option<f64>,
}

impl MethodFloors {
    /// Whether the suite judges this partitioning's speed at all.
    pub fn any(&self) -> bool {
        self.min_scaling_efficiency.is_some() || self.max_comm_fraction.is_some()
    }
}

fn default_layers() -> Vec<usize> {
    vec![1024, 4096, 4096, 10]
}
fn default_batch() -> usize {
    8192
}
fn default_steps() -> usize {
    50
}
fn default_precision() -> Precision {
    Precision::Fp32
}
fn default_lr() -> f64 {
    // For the default 4096-wide model: at 0.05 its loss first climbs to about 5 (ci/loss_trajectory.py).
    0.02
}
fn default_golden_layers() -> Vec<usize> {
    vec![64, 128, 128, 10]
}
fn default_golden_batch() -> usize {
    256
}
fn default_golden_lr() -> f64 {
    0.5
}
fn default_golden_steps() -> usize {
    // training::reference::COMPARED_STEPS is the most the tolerance holds for.
    10
}
fn default_golden_tol() -> f64 {
    // training::reference::DEFAULT_REL_TOL: reordered sums stay 100x inside it, wrong kernels
    // land 50-200x outside.
    1e-4
}
fn default_golden_abs_tol() -> f64 {
    1e-5
}

/// A semantic problem at a key path; for a problem between two keys (a warning level above its
/// failure level), the other key too. The loader points at the one of them that the most derived
/// file of the chain wrote ([`crate::config::most_derived`]): a child suite that sets only
/// `fail_above` under a parent's `warn_above` is told about its own line.
pub type Problem = (KeyPath, String, Option<KeyPath>);

impl Suite {
    /// The ids of the checks this suite promises, in the order they run ("topology",
    /// "collective.all_reduce", ..., "baseline" last). A run's verdict is judged against this list:
    /// a check in it that left no record never ran. `checks::from_suite` builds the same list.
    pub fn promised_checks(&self) -> Vec<String> {
        let c = &self.checks;
        let mut out: Vec<String> = Vec::new();
        let mut add = |on: bool, id: &str| {
            if on {
                out.push(id.to_string());
            }
        };
        add(c.fabric.as_ref().is_some_and(|x| x.enabled), "fabric");
        add(c.topology.as_ref().is_some_and(|x| x.enabled), "topology");
        add(
            c.virtualization.as_ref().is_some_and(|x| x.enabled),
            "virtualization",
        );
        add(c.health.as_ref().is_some_and(|x| x.enabled), "health");
        add(
            c.host_bandwidth.as_ref().is_some_and(|x| x.enabled),
            "host_bandwidth",
        );
        add(
            c.p2p_bandwidth.as_ref().is_some_and(|x| x.enabled),
            "p2p_bandwidth",
        );
        add(
            c.p2p_latency.as_ref().is_some_and(|x| x.enabled),
            "p2p_latency",
        );
        for op in CollectiveOp::ALL {
            if c.collective.get(&op).is_some_and(|x| x.enabled) {
                out.push(format!("collective.{op}"));
            }
        }
        if c.compute.as_ref().is_some_and(|x| x.enabled) {
            out.push("compute".into());
        }
        if c.training.as_ref().is_some_and(|x| x.enabled) {
            out.push("training".into());
        }
        // After the traffic: the error counters are read again at its end.
        if c.network.as_ref().is_some_and(|x| x.enabled) {
            out.push("network".into());
        }
        if self.baseline.is_some() {
            out.push("baseline".into());
        }
        out
    }

    /// Semantic validation, after the types are known to be right.
    pub fn validate(&self) -> Vec<Problem> {
        let mut p = Problems(Vec::new());
        if self.name.trim().is_empty() {
            p.bad("name", "name must not be empty".into());
        }
        if let Some(n) = self.node.gpu_count {
            if n == 0 {
                p.bad("node.gpu_count", "gpu_count must be at least 1".into());
            }
            if n > MAX_GPUS {
                p.bad(
                    "node.gpu_count",
                    format!("gpu_count must be at most {MAX_GPUS}, got {n}"),
                );
            }
        }
        if let Some(m) = self.node.memory_gib_min {
            if !(m.is_finite() && (0.0..=MAX_MEMORY_GIB).contains(&m)) {
                p.bad(
                    "node.memory_gib_min",
                    format!(
                        "memory_gib_min must be 0 to {MAX_MEMORY_GIB} GiB, got {}",
                        crate::units::exact(m)
                    ),
                );
            }
        }
        if let Some(v) = &self.node.driver_min {
            if parse_version(v).is_none() {
                p.bad(
                    "node.driver_min",
                    format!("'{v}' is not a version (expected e.g. \"535.104\")"),
                );
            }
        }
        for (name, value) in &self.nccl.accept {
            // The name is a key of its own (it may hold a '.').
            let mut path = key_path("nccl.accept");
            path.push(Seg::Key(name.clone()));
            let fabric = crate::checks::nccl_env::Scope::Fabric;
            let rest = name.strip_prefix("NCCL_").unwrap_or("");
            let word = |c: char| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_';
            if rest.is_empty() || !rest.chars().all(word) {
                let msg =
                    format!("'{name}' is not an NCCL setting (NCCL_ and capitals, digits, _)");
                p.bad_at(path, msg);
            } else if !crate::checks::nccl_env::steers(name, value, fabric) {
                let msg = format!("{name} = {value:?} changes no figure: nothing to accept");
                p.bad_at(path, msg);
            }
        }
        if let Some(g) = self.topology.pcie_gen {
            if !(1..=7).contains(&g) {
                p.bad(
                    "topology.pcie_gen",
                    format!("pcie_gen must be 1 to 7, got {g}"),
                );
            }
        }
        if let Some(w) = self.topology.pcie_width {
            if ![1, 2, 4, 8, 16, 32].contains(&w) {
                p.bad(
                    "topology.pcie_width",
                    format!("pcie_width must be 1, 2, 4, 8, 16 or 32, got {w}"),
                );
            }
        }
        if let Some(l) = self.topology.nvlinks_per_pair {
            p.links("topology.nvlinks_per_pair", l);
        }
        // A GPU count out of range is said above; the relations below are then not checked
        // against it (a table sized by it could not be allocated).
        let n = self.node.gpu_count.filter(|n| *n <= MAX_GPUS);
        let needs = |p: &mut Problems, path: &str, key: &str| {
            if self.node.gpu_count.is_none() {
                p.bad(path, format!("{key} needs node.gpu_count"));
            }
        };
        if self.topology.nvlink_pairs.len() > MAX_PAIRS {
            p.bad(
                "topology.nvlink_pairs",
                format!(
                    "nvlink_pairs lists {} pairs; a node of at most {MAX_GPUS} GPUs has at most {MAX_PAIRS}",
                    self.topology.nvlink_pairs.len()
                ),
            );
        }
        for (i, pl) in self.topology.nvlink_pairs.iter().enumerate() {
            let path = format!("topology.nvlink_pairs[{i}]");
            p.links(&format!("{path}.links"), pl.links);
            let same = |q: &PairLinks| (q.a, q.b) == (pl.a, pl.b) || (q.a, q.b) == (pl.b, pl.a);
            if self.topology.nvlink_pairs[..i].iter().any(same) {
                p.bad(
                    &path,
                    format!(
                        "the pair {}-{} is listed twice: one count per pair",
                        pl.a, pl.b
                    ),
                );
            }
            if pl.a == pl.b {
                p.bad(
                    &path,
                    format!("a pair needs two different GPUs, got {} and {}", pl.a, pl.b),
                );
            }
            match n {
                None => needs(&mut p, &path, "nvlink_pairs"),
                Some(n) => {
                    for (k, v) in [("a", pl.a), ("b", pl.b)] {
                        if v >= n {
                            p.bad(
                                &format!("{path}.{k}"),
                                format!("GPU index {v} is out of range: the node has {n} GPUs (0 to {})", n - 1),
                            );
                        }
                    }
                }
            }
        }
        for (key, groups) in [
            ("socket_groups", &self.topology.socket_groups),
            ("numa_groups", &self.topology.numa_groups),
            ("cpu_affinity_groups", &self.topology.cpu_affinity_groups),
        ] {
            let Some(groups) = groups else { continue };
            let path = format!("topology.{key}");
            let Some(n) = n else {
                needs(&mut p, &path, key);
                continue;
            };
            let mut seen = vec![false; n];
            for (i, g) in groups.iter().enumerate() {
                if g.is_empty() {
                    p.bad(
                        &format!("{path}[{i}]"),
                        "a group needs at least one GPU".into(),
                    );
                }
                for (j, &v) in g.iter().enumerate() {
                    let at = format!("{path}[{i}][{j}]");
                    if v >= n {
                        p.bad(
                            &at,
                            format!(
                                "GPU index {v} is out of range: the node has {n} GPUs (0 to {})",
                                n - 1
                            ),
                        );
                    } else if std::mem::replace(&mut seen[v], true) {
                        p.bad(&at, format!("GPU {v} is in more than one place of {key}"));
                    }
                }
            }
        }
        let mut pairs_seen = std::collections::BTreeSet::new();
        for (i, pp) in self.topology.pcie_paths.iter().enumerate() {
            let path = format!("topology.pcie_paths[{i}]");
            if pp.a == pp.b {
                p.bad(
                    &path,
                    format!("a pair needs two different GPUs, got {} and {}", pp.a, pp.b),
                );
            } else if !pairs_seen.insert((pp.a.min(pp.b), pp.a.max(pp.b))) {
                p.bad(&path, format!("the pair {}-{} is listed twice", pp.a, pp.b));
            }
            match n {
                None => needs(&mut p, &path, "pcie_paths"),
                Some(n) => {
                    for (k, v) in [("a", pp.a), ("b", pp.b)] {
                        if v >= n {
                            p.bad(
                                &format!("{path}.{k}"),
                                format!("GPU index {v} is out of range: the node has {n} GPUs (0 to {})", n - 1),
                            );
                        }
                    }
                }
            }
        }
        for (i, v) in self.topology.numa_nodes.iter().flatten().enumerate() {
            if !(0..=MAX_NUMA_NODE).contains(v) {
                p.bad(
                    &format!("topology.numa_nodes[{i}]"),
                    format!("a NUMA node is 0 to {MAX_NUMA_NODE}, got {v}"),
                );
            }
        }
        if let (Some(numa), Some(n)) = (&self.topology.numa_nodes, n) {
            if numa.len() != n {
                p.bad(
                    "topology.numa_nodes",
                    format!(
                        "numa_nodes lists {} GPUs but node.gpu_count is {n}",
                        numa.len()
                    ),
                );
            }
        }
        if let Some(cpus) = &self.topology.cpu_affinity {
            for (i, v) in cpus.iter().enumerate() {
                if crate::platform::numa::parse_cpulist(v).is_none() {
                    p.bad(
                        &format!("topology.cpu_affinity[{i}]"),
                        format!("'{v}' is not a CPU list (expected e.g. \"0-55,112-167\")"),
                    );
                }
            }
            if let Some(n) = n.filter(|n| cpus.len() != *n) {
                p.bad(
                    "topology.cpu_affinity",
                    format!(
                        "cpu_affinity lists {} GPUs but node.gpu_count is {n}",
                        cpus.len()
                    ),
                );
            }
        }
        let c = &self.checks;
        if let Some(h) = &c.host_bandwidth {
            for (k, l) in [
                ("h2d", &h.h2d),
                ("d2h", &h.d2h),
                ("bidir", &h.bidir),
                ("all_gpus_h2d", &h.all_gpus_h2d),
                ("device_copy", &h.device_copy),
            ] {
                p.limit(&format!("checks.host_bandwidth.{k}"), l, MAX_GBPS);
            }
            p.size("checks.host_bandwidth.size", h.size);
            p.iters("checks.host_bandwidth.iterations", h.iterations);
            p.warmup("checks.host_bandwidth.warmup", h.warmup);
            p.pct("checks.host_bandwidth.outlier_pct", h.outlier_pct);
            p.remeasure("checks.host_bandwidth.remeasure", h.remeasure);
        }
        if let Some(x) = &c.p2p_bandwidth {
            for (k, l) in [("read", &x.read), ("write", &x.write), ("bidir", &x.bidir)] {
                p.limit(&format!("checks.p2p_bandwidth.{k}"), l, MAX_GBPS);
            }
            for (class, pl) in &x.by_path {
                for (k, l) in [
                    ("read", &pl.read),
                    ("write", &pl.write),
                    ("bidir", &pl.bidir),
                ] {
                    if let Some(l) = l {
                        let path = format!("checks.p2p_bandwidth.by_path.{}.{k}", class.label());
                        p.limit(&path, l, MAX_GBPS);
                    }
                }
            }
            p.size("checks.p2p_bandwidth.size", x.size);
            p.iters("checks.p2p_bandwidth.iterations", x.iterations);
            p.warmup("checks.p2p_bandwidth.warmup", x.warmup);
            p.pct("checks.p2p_bandwidth.outlier_pct", x.outlier_pct);
            p.remeasure("checks.p2p_bandwidth.remeasure", x.remeasure);
        }
        if let Some(x) = &c.p2p_latency {
            p.limit(
                "checks.p2p_latency.latency_us",
                &x.latency_us,
                MAX_LATENCY_US,
            );
            p.iters("checks.p2p_latency.iterations", x.iterations);
            p.pct("checks.p2p_latency.outlier_pct", x.outlier_pct);
            p.remeasure("checks.p2p_latency.remeasure", x.remeasure);
        }
        if let Some(x) = &c.compute {
            for prec in GemmPrecision::ALL {
                p.limit(
                    &format!("checks.compute.{}", prec.metric()),
                    x.limit(prec),
                    MAX_TFLOPS,
                );
            }
            if !(MIN_GEMM_SIZE..=MAX_GEMM_SIZE).contains(&x.size) || x.size % 16 != 0 {
                p.bad(
                    "checks.compute.size",
                    format!(
                        "size must be a multiple of 16 from {MIN_GEMM_SIZE} to {MAX_GEMM_SIZE}, got {}",
                        x.size
                    ),
                );
            }
            if x.precisions.is_empty() {
                p.bad(
                    "checks.compute.precisions",
                    "precisions must name at least one of fp32, tf32, bf16, fp8".into(),
                );
            }
            let mut seen = std::collections::BTreeSet::new();
            if let Some(d) = x.precisions.iter().find(|q| !seen.insert(**q)) {
                p.bad(
                    "checks.compute.precisions",
                    format!("precisions names {d} twice"),
                );
            }
            p.iters("checks.compute.iterations", x.iterations);
            p.warmup("checks.compute.warmup", x.warmup);
            if let Some(l) = &x.sustained {
                if !(l.seconds.is_finite() && (1.0..=MAX_SUSTAINED_S).contains(&l.seconds)) {
                    p.bad(
                        "checks.compute.sustained.seconds",
                        format!(
                            "seconds must be 1 to {MAX_SUSTAINED_S}, got {}",
                            crate::units::exact(l.seconds)
                        ),
                    );
                }
                if !(50..=60_000).contains(&l.sample_ms) {
                    p.bad(
                        "checks.compute.sustained.sample_ms",
                        format!("sample_ms must be 50 to 60000, got {}", l.sample_ms),
                    );
                } else if l.seconds * 1000.0 / f64::from(l.sample_ms) > 100_000.0 {
                    p.bad(
                        "checks.compute.sustained.sample_ms",
                        "more than 100000 samples: take fewer (a larger sample_ms)".into(),
                    );
                }
                if let Some(f) = l.min_power_fraction {
                    if !(f > 0.0 && f <= 1.0) {
                        p.bad(
                            "checks.compute.sustained.min_power_fraction",
                            format!("min_power_fraction must be above 0 and at most 1, got {f}"),
                        );
                    }
                }
                if !(l.max_rate_drop_pct > 0.0 && l.max_rate_drop_pct < 100.0) {
                    p.bad(
                        "checks.compute.sustained.max_rate_drop_pct",
                        format!(
                            "max_rate_drop_pct must be between 0 and 100, got {}",
                            l.max_rate_drop_pct
                        ),
                    );
                }
                if let Some(t) = l.max_temperature_c {
                    if !(t.is_finite() && t > 0.0 && t < 200.0) {
                        p.bad(
                            "checks.compute.sustained.max_temperature_c",
                            format!("max_temperature_c must be between 0 and 200, got {t}"),
                        );
                    }
                }
                if let Some(bad) = l
                    .fail_throttle
                    .iter()
                    .find(|r| !THROTTLE_REASONS.contains(&r.as_str()))
                {
                    p.bad(
                        "checks.compute.sustained.fail_throttle",
                        format!(
                            "unknown throttle reason '{bad}' (known: {})",
                            THROTTLE_REASONS.join(", ")
                        ),
                    );
                }
            }
            p.pct("checks.compute.outlier_pct", x.outlier_pct);
            // 0 turns the plateau off (a suite extending one that sets it cannot unset it).
            if let Some(v) = x.plateau_pct.filter(|v| !(*v >= 0.0 && *v < 100.0)) {
                p.bad(
                    "checks.compute.plateau_pct",
                    format!("plateau_pct must be from 0 (off) to below 100, got {v}"),
                );
            }
            p.remeasure("checks.compute.remeasure", x.remeasure);
        }
        for (op, cc) in &c.collective {
            let base = format!("checks.collective.{op}");
            p.iters(&format!("{base}.iterations"), cc.iterations);
            p.warmup(&format!("{base}.warmup"), cc.warmup);
            p.remeasure(&format!("{base}.remeasure"), cc.remeasure);
            if cc.min_size.0 == 0 {
                p.bad(
                    &format!("{base}.min_size"),
                    "min_size must be at least 1 byte".into(),
                );
            }
            p.size(&format!("{base}.max_size"), cc.max_size);
            if cc.min_size > cc.max_size {
                p.bad(
                    &format!("{base}.max_size"),
                    format!(
                        "max_size ({}) is smaller than min_size ({})",
                        cc.max_size, cc.min_size
                    ),
                );
            }
            if !(2..=MAX_SIZE_FACTOR).contains(&cc.factor) {
                p.bad(
                    &format!("{base}.factor"),
                    format!("factor must be 2 to {MAX_SIZE_FACTOR}, got {}", cc.factor),
                );
            }
            for (field, map) in [
                ("min_busbw_gbps", &cc.min_busbw_gbps),
                ("warn_busbw_gbps", &cc.warn_busbw_gbps),
                ("min_busbw_gbps_no_nvls", &cc.min_busbw_gbps_no_nvls),
            ] {
                for (k, v) in map {
                    let path = format!("{base}.{field}.{k}");
                    match ByteSize::parse(k) {
                        Err(e) => p.bad(&path, format!("the key must be a message size: {e}")),
                        Ok(b) if b.0 > MAX_SIZE => p.bad(
                            &path,
                            format!(
                                "the message size {b} is over the largest a collective takes ({})",
                                ByteSize(MAX_SIZE)
                            ),
                        ),
                        Ok(_) => {}
                    }
                    if !(v.is_finite() && (0.0..=MAX_GBPS).contains(v)) {
                        p.bad(
                            &path,
                            format!(
                                "bus bandwidth must be 0 to {MAX_GBPS} GB/s, got {}",
                                crate::units::exact(*v)
                            ),
                        );
                    }
                }
            }
            if *op != CollectiveOp::AllReduce
                && (cc.nvls.is_some() || !cc.min_busbw_gbps_no_nvls.is_empty())
            {
                p.bad(
                    &format!("{base}.nvls"),
                    "nvls and min_busbw_gbps_no_nvls apply to all_reduce only".to_string(),
                );
            }
            if !cc.min_busbw_gbps_no_nvls.is_empty()
                && cc.nvls != Some(NvlsRequirement::IfAvailable)
            {
                p.bad(
                    &format!("{base}.min_busbw_gbps_no_nvls"),
                    "min_busbw_gbps_no_nvls needs nvls = \"if_available\"".to_string(),
                );
            }
            if let Some(f) = cc.min_fraction_of_p2p {
                if !(f > 0.0 && f <= 2.0) {
                    p.bad(
                        &format!("{base}.min_fraction_of_p2p"),
                        format!("min_fraction_of_p2p must be in (0, 2], got {f}"),
                    );
                }
            }
        }
        if let Some(t) = &c.training {
            p.limit(
                "checks.training.samples_per_s",
                &t.samples_per_s,
                MAX_SAMPLES_PER_S,
            );
            p.layers(
                "checks.training.layers",
                &t.layers,
                MAX_TRAINING_WIDTH,
                MAX_TRAINING_PARAMS,
            );
            p.layers(
                "checks.training.golden_layers",
                &t.golden_layers,
                MAX_GOLDEN_WIDTH,
                MAX_GOLDEN_PARAMS,
            );
            for (k, v, max) in [
                ("batch", t.batch, MAX_BATCH),
                ("golden_batch", t.golden_batch, MAX_GOLDEN_BATCH),
            ] {
                if !(1..=max).contains(&v) {
                    p.bad(
                        &format!("checks.training.{k}"),
                        format!("{k} must be 1 to {max}, got {v}"),
                    );
                }
            }
            if t.steps > MAX_ITERATIONS as usize {
                p.bad(
                    "checks.training.steps",
                    format!("steps must be at most {MAX_ITERATIONS}, got {}", t.steps),
                );
            }
            if let Some(work) = golden_work(t) {
                if work > MAX_GOLDEN_WORK {
                    p.bad(
                        "checks.training.golden_layers",
                        format!(
                            "the golden configuration is trained on the CPU: its parameters x \
                             golden_batch x golden_steps ({work}) must be at most \
                             {MAX_GOLDEN_WORK} (minutes of CPU time); use smaller layers, batch \
                             or steps"
                        ),
                    );
                }
            }
            if !(t.golden_lr.is_finite() && t.golden_lr > 0.0 && (t.golden_lr as f32).is_finite()) {
                p.bad(
                    "checks.training.golden_lr",
                    format!(
                        "golden_lr must be a number > 0 (as fp32), got {}",
                        crate::units::exact(t.golden_lr)
                    ),
                );
            }
            if !(t.golden_abs_tol >= 0.0 && t.golden_abs_tol < 1.0) {
                p.bad(
                    "checks.training.golden_abs_tol",
                    format!(
                        "golden_abs_tol must be a number from 0 to below 1, got {}",
                        crate::units::exact(t.golden_abs_tol)
                    ),
                );
            }
            if let Some(l) = t.loss_target {
                if !(l.is_finite() && l > 0.0) {
                    p.bad(
                        "checks.training.loss_target",
                        format!(
                            "loss_target must be a number > 0 (a cross-entropy loss is never \
                             below 0), got {}",
                            crate::units::exact(l)
                        ),
                    );
                }
            }
            if t.steps == 0 || t.golden_steps > t.steps {
                p.bad(
                    "checks.training.steps",
                    format!(
                        "steps ({}) must be at least 1 and at least golden_steps ({})",
                        t.steps, t.golden_steps
                    ),
                );
            }
            if !(t.lr.is_finite() && t.lr > 0.0 && (t.lr as f32).is_finite()) {
                p.bad(
                    "checks.training.lr",
                    format!(
                        "lr must be a number > 0 (as fp32), got {}",
                        crate::units::exact(t.lr)
                    ),
                );
            }
            // A tolerance of 100% or more could never fail the golden check.
            if !(t.golden_rel_tol > 0.0 && t.golden_rel_tol < 1.0) {
                p.bad(
                    "checks.training.golden_rel_tol",
                    format!(
                        "golden_rel_tol must be above 0 and below 1 (relative), got {}",
                        crate::units::exact(t.golden_rel_tol)
                    ),
                );
            }
            if t.golden_steps == 0 {
                p.bad(
                    "checks.training.golden_steps",
                    "golden_steps must be at least 1: a golden check of no step checks nothing"
                        .into(),
                );
            }
            if let Some(e) = t.min_scaling_efficiency {
                if !(e > 0.0 && e <= 1.5) {
                    p.bad(
                        "checks.training.min_scaling_efficiency",
                        format!("min_scaling_efficiency must be in (0, 1.5], got {e}"),
                    );
                }
            }
            for (name, f) in [
                ("tensor_parallel", &t.tensor_parallel),
                ("hybrid", &t.hybrid),
            ] {
                let base = format!("checks.training.{name}");
                if let Some(e) = f.min_scaling_efficiency {
                    if !(e > 0.0 && e <= 1.5) {
                        p.bad(
                            &format!("{base}.min_scaling_efficiency"),
                            format!("min_scaling_efficiency must be in (0, 1.5], got {e}"),
                        );
                    }
                }
                if let Some(x) = f.max_comm_fraction {
                    if !(x > 0.0 && x < 1.0) {
                        p.bad(
                            &format!("{base}.max_comm_fraction"),
                            format!(
                                "max_comm_fraction must be above 0 and below 1 (a share of the \
                                 step), got {x}"
                            ),
                        );
                    }
                }
                if f.any() && !t.partitionings {
                    p.bad(
                        &base,
                        "floors for a partitioning that is not run: set partitionings = true, \
                         or drop them"
                            .into(),
                    );
                }
            }
        }
        if let Some(b) = &self.baseline {
            if b.evidence.trim().is_empty() {
                p.bad(
                    "baseline.evidence",
                    "evidence must name an evidence.json or a report folder".into(),
                );
            }
            let v = b.max_regression_pct;
            if !(v > 0.0 && v < 100.0) {
                p.bad(
                    "baseline.max_regression_pct",
                    format!("max_regression_pct must be between 0 and 100, got {v}"),
                );
            }
        }
        if let Some(h) = &c.health {
            if !(h.xid_lookback_h.is_finite() && (0.0..=24.0 * 3650.0).contains(&h.xid_lookback_h))
            {
                p.bad(
                    "checks.health.xid_lookback_h",
                    format!(
                        "xid_lookback_h must be 0 to 87600 hours (10 years), got {}",
                        h.xid_lookback_h
                    ),
                );
            }
            if let Some(t) = h.warn_temperature_c {
                if !(t.is_finite() && t > 0.0 && t <= MAX_TEMPERATURE_C) {
                    p.bad(
                        "checks.health.warn_temperature_c",
                        format!(
                            "warn_temperature_c must be above 0 and at most \
                             {MAX_TEMPERATURE_C} °C, got {}",
                            crate::units::exact(t)
                        ),
                    );
                }
            }
            for (i, r) in h.fail_throttle.iter().enumerate() {
                if !THROTTLE_REASONS.contains(&r.as_str()) {
                    p.bad(
                        &format!("checks.health.fail_throttle[{i}]"),
                        format!(
                            "unknown throttle reason '{r}' (known: {})",
                            THROTTLE_REASONS.join(", ")
                        ),
                    );
                }
            }
            if let Some(v) = &h.driver_min {
                if parse_version(v).is_none() {
                    p.bad(
                        "checks.health.driver_min",
                        format!("'{v}' is not a version (expected e.g. \"535.104\")"),
                    );
                }
            }
        }
        self.validate_network(&mut p);
        // Last: a more specific problem of the same file is reported first.
        if self.promised_checks().is_empty() {
            p.bad(
                "checks",
                "the suite enables no check, so a run could judge nothing: add one under [checks] \
                 (topology, virtualization, health, host_bandwidth, p2p_bandwidth, p2p_latency, \
                 collective.<op>, compute, training, fabric, network) or re-enable an inherited one (enabled = true)"
                    .into(),
            );
        }
        p.0
    }
}

impl Suite {
    fn validate_network(&self, p: &mut Problems) {
        let n = &self.network;
        if let Some(c) = n.nic_count {
            if !(1..=256).contains(&c) {
                p.bad(
                    "network.nic_count",
                    format!("nic_count must be 1 to 256, got {c}"),
                );
            }
        }
        if let Some(r) = n.rate_gbps {
            if !(r.is_finite() && r > 0.0 && r <= 3200.0) {
                p.bad(
                    "network.rate_gbps",
                    format!(
                        "rate_gbps must be above 0 and at most 3200 Gb/s, got {}",
                        crate::units::exact(r)
                    ),
                );
            }
        }
        for (i, e) in n.exclude.iter().enumerate() {
            let name = e.strip_suffix('*').unwrap_or(e);
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            {
                p.bad(
                    &format!("network.exclude[{i}]"),
                    format!(
                        "{e:?} is not an RDMA device name (letters, digits, _ - .), or a prefix of one ending in *"
                    ),
                );
            }
        }
        if let Some(f) = &self.checks.fabric {
            p.limit(
                "checks.fabric.pair_busbw_gbps",
                &f.pair_busbw_gbps,
                MAX_FABRIC_GBPS,
            );
            p.limit("checks.fabric.busbw_gbps", &f.busbw_gbps, MAX_FABRIC_GBPS);
            if !(f.timeout_s.is_finite() && (1.0..=3600.0).contains(&f.timeout_s)) {
                p.bad(
                    "checks.fabric.timeout_s",
                    format!(
                        "timeout_s must be 1 to 3600 seconds, got {}",
                        crate::units::exact(f.timeout_s)
                    ),
                );
            }
            if f.size.0 == 0 || f.size.0 > 1 << 36 {
                p.bad(
                    "checks.fabric.size",
                    "size must be more than 0 and at most 64GiB".into(),
                );
            }
            if f.sizes.len() > MAX_FABRIC_SIZES {
                p.bad(
                    "checks.fabric.sizes",
                    format!("at most {MAX_FABRIC_SIZES} sizes, got {}", f.sizes.len()),
                );
            }
            if f.sizes.iter().any(|s| s.0 == 0 || s.0 > f.size.0) {
                p.bad(
                    "checks.fabric.sizes",
                    "each size must be more than 0 and at most `size` (the judged one)".into(),
                );
            }
            p.limit(
                "checks.fabric.all_gather_busbw_gbps",
                &f.all_gather_busbw_gbps,
                MAX_FABRIC_GBPS,
            );
        }
        if let Some(c) = self
            .checks
            .network
            .as_ref()
            .and_then(|c| c.counters.as_ref())
        {
            let known: Vec<&str> = crate::network::COUNTERS
                .iter()
                .copied()
                .chain([crate::network::CARRIER_CHANGES])
                .collect();
            for (i, name) in c.iter().enumerate() {
                if !known.contains(&name.as_str()) {
                    p.bad(
                        &format!("checks.network.counters[{i}]"),
                        format!("unknown counter {name:?} (known: {})", known.join(", ")),
                    );
                }
            }
        }
    }
}

/// The most extra sizes `[checks.fabric] sizes` may list.
pub const MAX_FABRIC_SIZES: usize = 8;

/// The largest fabric bandwidth a suite may state, GB/s (far above any node's NICs).
const MAX_FABRIC_GBPS: f64 = 100_000.0;

/// Collects validation problems.
struct Problems(Vec<Problem>);

impl Problems {
    fn bad(&mut self, path: &str, msg: String) {
        self.bad_at(key_path(path), msg);
    }

    /// [`Problems::bad`] at a path built by hand (a key of its own may hold a '.').
    fn bad_at(&mut self, path: KeyPath, msg: String) {
        self.0.push((path, msg, None));
    }

    /// A problem between the keys `path` and `other`: either may be the one to change.
    fn between(&mut self, path: &str, other: &str, msg: String) {
        self.0.push((key_path(path), msg, Some(key_path(other))));
    }

    /// A limit's values: numbers from 0 to `max` (in the figure's unit), in an order that lets
    /// a figure pass: fail_below <= warn_below <= warn_above <= fail_above.
    fn limit(&mut self, path: &str, l: &Limit, max: f64) {
        if let Some(t) = l.typical {
            if !(t.is_finite() && t > 0.0) {
                self.bad(
                    &format!("{path}.typical"),
                    format!("typical must be a number > 0, got {t}"),
                );
            }
        }
        if let Some(f) = l.typical_fraction {
            if !(f > 0.0 && f <= 1.0) {
                self.bad(
                    &format!("{path}.typical_fraction"),
                    format!("typical_fraction must be above 0 and at most 1, got {f}"),
                );
            } else if l.typical.is_none() {
                self.bad(
                    &format!("{path}.typical_fraction"),
                    "typical_fraction needs typical".into(),
                );
            }
        }
        let named = [
            ("fail_below", l.fail_below),
            ("warn_below", l.warn_below),
            ("warn_above", l.warn_above),
            ("fail_above", l.fail_above),
        ];
        for (k, v) in named {
            if let Some(v) = v {
                if !(v.is_finite() && (0.0..=max).contains(&v)) {
                    self.bad(
                        &format!("{path}.{k}"),
                        format!(
                            "{k} must be a number from 0 to {max}, got {}",
                            crate::units::exact(v)
                        ),
                    );
                }
            }
        }
        if let (Some(f), Some(w)) = (l.fail_below, l.warn_below) {
            if w < f {
                self.between(
                    &format!("{path}.warn_below"),
                    &format!("{path}.fail_below"),
                    format!("warn_below ({w}) is below fail_below ({f}): a warning level must come before the failure"),
                );
            }
        }
        if let (Some(f), Some(w)) = (l.fail_above, l.warn_above) {
            if w > f {
                self.between(
                    &format!("{path}.warn_above"),
                    &format!("{path}.fail_above"),
                    format!("warn_above ({w}) is above fail_above ({f})"),
                );
            }
        }
        // A floor above a ceiling: no figure could pass (or, for a warning level, none could
        // pass without a warning).
        for (lk, lo) in &named[..2] {
            for (uk, hi) in &named[2..] {
                if let (Some(lo), Some(hi)) = (lo, hi) {
                    if lo > hi {
                        self.between(
                            &format!("{path}.{lk}"),
                            &format!("{path}.{uk}"),
                            format!("{lk} ({lo}) is above {uk} ({hi}): no figure could pass both"),
                        );
                    }
                }
            }
        }
    }

    /// A buffer or message size: at least 1 byte, at most [`MAX_SIZE`].
    fn size(&mut self, path: &str, v: ByteSize) {
        if v.0 == 0 {
            self.bad(path, "a size must be at least 1 byte".into());
        } else if v.0 > MAX_SIZE {
            self.bad(
                path,
                format!("a size must be at most {}, got {v}", ByteSize(MAX_SIZE)),
            );
        }
    }

    /// An NVLink count: at most [`MAX_NVLINKS_PER_GPU`].
    fn links(&mut self, path: &str, v: u32) {
        if v > MAX_NVLINKS_PER_GPU {
            self.bad(
                path,
                format!("a GPU has at most {MAX_NVLINKS_PER_GPU} NVLinks, got {v}"),
            );
        }
    }

    /// Layer widths of a model: input, hidden..., classes; none zero, each at most `width`,
    /// at most [`MAX_LAYERS`] of them, and at most `params` parameters in all.
    fn layers(&mut self, path: &str, layers: &[usize], width: usize, params: u64) {
        let name = path.rsplit('.').next().unwrap_or(path);
        if layers.len() < 2 || layers.contains(&0) {
            self.bad(
                path,
                format!("{name} needs at least an input and an output width, none zero"),
            );
            return;
        }
        if layers.len() > MAX_LAYERS {
            self.bad(
                path,
                format!("{name} lists {} widths; at most {MAX_LAYERS}", layers.len()),
            );
            return;
        }
        if let Some((i, w)) = layers.iter().enumerate().find(|(_, w)| **w > width) {
            self.bad(
                &format!("{path}[{i}]"),
                format!("a width in {name} must be at most {width}, got {w}"),
            );
            return;
        }
        match param_count(layers) {
            Some(n) if n <= params => {}
            n => self.bad(
                path,
                format!(
                    "{name} has {} parameters; at most {params}",
                    n.map_or("more than 2^64".to_string(), |n| n.to_string())
                ),
            ),
        }
    }

    fn pct(&mut self, path: &str, v: Option<f64>) {
        if let Some(v) = v {
            if !(v > 0.0 && v < 100.0) {
                let key = path.rsplit('.').next().unwrap_or(path);
                self.bad(path, format!("{key} must be between 0 and 100, got {v}"));
            }
        }
    }

    fn remeasure(&mut self, path: &str, v: u32) {
        if v > MAX_REMEASURE {
            self.bad(
                path,
                format!("remeasure must be 0 to {MAX_REMEASURE} more attempts, got {v}"),
            );
        }
    }

    fn iters(&mut self, path: &str, v: u32) {
        if v == 0 {
            self.bad(path, "iterations must be at least 1".into());
        }
        if v > MAX_ITERATIONS {
            self.bad(
                path,
                format!("iterations must be at most {MAX_ITERATIONS}, got {v}"),
            );
        }
    }

    fn warmup(&mut self, path: &str, v: u32) {
        if v > MAX_ITERATIONS {
            self.bad(
                path,
                format!("warmup must be at most {MAX_ITERATIONS}, got {v}"),
            );
        }
    }
}

/// The most timed (or warm-up) repetitions a measurement takes: far beyond any useful run, and
/// small enough that counts and deadlines stay clear of overflow. Also the most training steps.
pub const MAX_ITERATIONS: u32 = 100_000;

// Upper bounds checked at load (README, "Files and limits"): far beyond any real node, and small
// enough that no suite or node file can make nodecert allocate without bound or run for days.

/// GPUs in a node (a suite's `node.gpu_count`, a simulated node's `gpu.count`).
pub const MAX_GPUS: usize = 64;
/// GPU pairs a node can have.
pub const MAX_PAIRS: usize = MAX_GPUS * (MAX_GPUS - 1) / 2;
/// NVLinks of one GPU (H100 and H200 have 18, B200 18).
pub const MAX_NVLINKS_PER_GPU: u32 = 32;
/// The largest NUMA node number.
pub const MAX_NUMA_NODE: i32 = 1023;
/// Copy buffers and collective messages: 64 GiB.
pub const MAX_SIZE: u64 = 64 << 30;
/// The largest step between collective sizes (`factor`).
pub const MAX_SIZE_FACTOR: u64 = 1 << 20;
/// A bandwidth in a limit, GB/s (100 TB/s: beyond any memory or link today).
pub const MAX_GBPS: f64 = 100_000.0;
/// The largest GEMM rate a limit may name, TFLOP/s (100x any GPU of 2026).
pub const MAX_TFLOPS: f64 = 1_000_000.0;
/// A latency in a limit, microseconds (10 s).
pub const MAX_LATENCY_US: f64 = 10_000_000.0;
/// Training throughput in a limit, samples/s.
pub const MAX_SAMPLES_PER_S: f64 = 1e12;
/// Memory per GPU a suite may ask for, GiB.
pub const MAX_MEMORY_GIB: f64 = 16_384.0;
/// A temperature warning level, °C.
pub const MAX_TEMPERATURE_C: f64 = 150.0;
/// Widths in a training model's `layers` (input, hidden..., classes).
pub const MAX_LAYERS: usize = 64;
/// One width of the trained model.
pub const MAX_TRAINING_WIDTH: usize = 65_536;
/// Parameters of the trained model (2^32: 16 GiB of fp32 weights).
pub const MAX_TRAINING_PARAMS: u64 = 1 << 32;
/// Samples per GPU and step.
pub const MAX_BATCH: usize = 1 << 20;
/// One width of the golden model (trained on the CPU as well).
pub const MAX_GOLDEN_WIDTH: usize = 4096;
/// Parameters of the golden model.
pub const MAX_GOLDEN_PARAMS: u64 = 1 << 24;
/// Samples per step of the golden model.
pub const MAX_GOLDEN_BATCH: usize = 65_536;
/// Parameters x batch x steps of the golden model: its CPU time (the default is 6.7e7).
pub const MAX_GOLDEN_WORK: u64 = 1 << 36;

/// Weights and biases of an MLP with these widths; None when the count overflows.
pub fn param_count(layers: &[usize]) -> Option<u64> {
    layers.windows(2).try_fold(0u64, |sum, w| {
        let (a, b) = (w[0] as u64, w[1] as u64);
        sum.checked_add(a.checked_mul(b)?.checked_add(b)?)
    })
}

/// The golden configuration's CPU work: parameters x golden_batch x golden_steps.
fn golden_work(t: &TrainingCheck) -> Option<u64> {
    param_count(&t.golden_layers)?
        .checked_mul(t.golden_batch as u64)?
        .checked_mul(t.golden_steps as u64)
}

/// "535.104.05" -> [535, 104, 5].
pub fn parse_version(s: &str) -> Option<Vec<u64>> {
    let parts: Option<Vec<u64>> = s.trim().split('.').map(|x| x.parse().ok()).collect();
    parts.filter(|p| !p.is_empty())
}

/// Compare versions numerically, part by part (missing parts count as 0).
pub fn version_at_least(found: &str, min: &str) -> Option<bool> {
    let (f, m) = (parse_version(found)?, parse_version(min)?);
    let len = f.len().max(m.len());
    let get = |v: &Vec<u64>, i: usize| v.get(i).copied().unwrap_or(0);
    for i in 0..len {
        if get(&f, i) != get(&m, i) {
            return Some(get(&f, i) > get(&m, i));
        }
    }
    Some(true)
}

/// Make a key path for a collective field.
pub fn collective_path(op: CollectiveOp, field: &str) -> KeyPath {
    vec![
        Seg::Key("checks".into()),
        Seg::Key("collective".into()),
        Seg::Key(op.key().into()),
        Seg::Key(field.into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare() {
        assert_eq!(version_at_least("580.159.04", "535.104"), Some(true));
        assert_eq!(version_at_least("535.104", "535.104.05"), Some(false));
        assert_eq!(version_at_least("x", "1"), None);
    }

    #[test]
    fn busbw_factors_match_nccl_tests() {
        assert_eq!(CollectiveOp::AllReduce.busbw_factor(8), 1.75);
        assert_eq!(CollectiveOp::AllGather.busbw_factor(8), 0.875);
        assert_eq!(CollectiveOp::Broadcast.busbw_factor(8), 1.0);
        assert_eq!(CollectiveOp::AllReduce.busbw_factor(1), 0.0);
    }

    #[test]
    fn floors_step() {
        let mut m = BTreeMap::new();
        m.insert("1GiB".to_string(), 300.0);
        m.insert("8GiB".to_string(), 431.0);
        let f = CollectiveCheck::floors(&m);
        assert_eq!(CollectiveCheck::floor_for(&f, 1 << 20), None);
        assert_eq!(CollectiveCheck::floor_for(&f, 2 << 30), Some(300.0));
        assert_eq!(CollectiveCheck::floor_for(&f, 16 << 30), Some(431.0));
    }
}
