//! The suite: what the node must be and do. Loaded strictly from TOML (see [`load`]), then
//! validated; every error names file, line and column.

pub mod freeze;
pub mod load;
mod validate;

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
    /// Whether a GPU may have MIG mode on: "off" (unset: the same, judged where a GPU reports it
    /// on) or "any". nodecert measures whole GPUs; CUDA on a GPU in MIG mode sees its instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<MigExpect>,
}

/// Whether the GPUs may be in MIG mode.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum MigExpect {
    /// Every GPU whole: MIG mode off.
    Off,
    /// Not judged (shown where on).
    Any,
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

    /// The bounds a figure could cross: a floor of 0 or below is left out, as no figure
    /// nodecert records (a bandwidth, a latency, a rate) is below 0.
    pub fn judging(&self) -> Limit {
        let floor = |f: Option<f64>| f.filter(|v| *v > 0.0);
        Limit {
            fail_below: floor(self.fail_below),
            warn_below: floor(self.warn_below),
            ..*self
        }
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
    /// What another process on a GPU means: unset, an error (a run's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_processes: Option<OtherProcesses>,
}

/// What another process on a GPU means to the health check.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum OtherProcesses {
    /// The node cannot be certified beside it: an error (exit 3). What is measured beside
    /// another process is a share of the GPU. A run's default.
    #[default]
    Error,
    /// Shown, not judged: `health-check`'s default, which runs between and beside jobs.
    Shown,
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
}

/// The most extra sizes `[checks.fabric] sizes` may list.
pub const MAX_FABRIC_SIZES: usize = 8;

/// The largest fabric bandwidth a suite may state, GB/s (far above any node's NICs).
const MAX_FABRIC_GBPS: f64 = 100_000.0;

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

/// The SHA-256 of a resolved suite, hex: what a node's evidence says it ran (its
/// `suite.resolved`), whatever files it came from. A fleet holds nodes that name one suite to
/// one digest, and a job to the digest of the suite it was given. Taken of the suite as a JSON
/// value (keys sorted), so that the digest of a node's evidence ([`value_sha256`] of its
/// `suite.resolved` as written) does not depend on the nodecert that reads it.
pub fn resolved_sha256(suite: &Suite) -> String {
    match serde_json::to_value(suite) {
        Ok(v) => value_sha256(&v),
        // Never for a suite that loaded; a word that no digest equals, not a digest of nothing.
        Err(e) => format!("not a digest: {e}"),
    }
}

/// The SHA-256 of a JSON value in its compact form, keys sorted, hex.
pub fn value_sha256(v: &serde_json::Value) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(v.to_string().as_bytes()))
}

/// Weights and biases of an MLP with these widths; None when the count overflows.
pub fn param_count(layers: &[usize]) -> Option<u64> {
    layers.windows(2).try_fold(0u64, |sum, w| {
        let (a, b) = (w[0] as u64, w[1] as u64);
        sum.checked_add(a.checked_mul(b)?.checked_add(b)?)
    })
}

/// The golden configuration's CPU work: parameters x golden_batch x golden_steps.
pub(crate) fn golden_work(t: &TrainingCheck) -> Option<u64> {
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
    /// The digest a job's node list records of its suite (from the suite as loaded) is the
    /// one a fleet computes of each node's evidence (the suite read back from it): every
    /// embedded suite reads back to the same digest, with its fabric check enabled too.
    #[test]
    fn a_suite_read_back_from_evidence_keeps_its_digest() {
        for (name, _) in load::EMBEDDED {
            let mut loaded = load::load(name).unwrap();
            for fabric in [false, true] {
                if fabric && crate::commands::run::enable_fabric(&mut loaded).is_err() {
                    continue;
                }
                let text = serde_json::to_string_pretty(&loaded.suite).unwrap();
                let back: Suite = serde_json::from_str(&text).unwrap();
                let written: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(
                    resolved_sha256(&back),
                    resolved_sha256(&loaded.suite),
                    "{name}, fabric {fabric}"
                );
                assert_eq!(
                    value_sha256(&written),
                    resolved_sha256(&loaded.suite),
                    "{name}, fabric {fabric}"
                );
            }
        }
    }

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
