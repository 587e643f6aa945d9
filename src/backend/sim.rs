//! The simulated node: a description of a machine (GPUs, links, PCIe, virtualization, health and
//! the bandwidth each path delivers) from which every measurement is computed with seeded,
//! bounded noise. Same description, same seed, same numbers. Faults can be injected to prove that
//! each check catches what it exists to catch. Nothing produced here is ever a measurement of
//! real hardware, and the evidence says so.

use super::*;
use crate::config::{self, Source};
use crate::error::InputError;
use crate::inventory::*;
use crate::suite::{CollectiveOp, GemmPrecision, PciePath};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

#[path = "sim_train.rs"]
mod train;

pub const FORMAT_VERSION: u32 = 1;

/// Node descriptions shipped inside the binary, one per shipped suite.
pub const EMBEDDED: &[(&str, &str)] = &[
    (
        "h100-sxm-8",
        include_str!("../../suites/nodes/h100-sxm-8.toml"),
    ),
    (
        "h200-sxm-8",
        include_str!("../../suites/nodes/h200-sxm-8.toml"),
    ),
    (
        "a100-sxm-80gb-8",
        include_str!("../../suites/nodes/a100-sxm-80gb-8.toml"),
    ),
    (
        "l40s-pcie-4",
        include_str!("../../suites/nodes/l40s-pcie-4.toml"),
    ),
    (
        "h200-vm-1",
        include_str!("../../suites/nodes/h200-vm-1.toml"),
    ),
    (
        "h100-vm-1",
        include_str!("../../suites/nodes/h100-vm-1.toml"),
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

/// A fault to inject: `--inject NAME[:key=value,...]` or `[[faults]]` in a node file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    pub kind: FaultKind,
    /// The GPU concerned (default 0, or the last GPU for gpu-missing and replica-mismatch).
    pub gpu: Option<usize>,
    /// The other GPU of a pair (default: gpu + 1).
    pub peer: Option<usize>,
    /// The collective concerned (default all_reduce).
    pub op: Option<CollectiveOp>,
    /// Multiplier on the affected figure (defaults per fault).
    pub factor: Option<f64>,
    /// For pcie-downtrained: the generation and width the link trained at.
    pub gen: Option<u32>,
    pub width: Option<u32>,
    /// For xid: the XID code.
    pub code: Option<u32>,
    /// For xid: logged this many hours before the run (a kernel-log XID); unset: seen during it.
    pub age_h: Option<f64>,
    /// For the NIC faults: the NIC concerned, by its index on the node (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<usize>,
    /// For the slow faults: a transient that shows only on the first N measurements of what it
    /// slows (a warming or shared node); unset: on every measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    #[default]
    GpuMissing,
    GpuLost,
    NvlinkDown,
    PcieDowntrained,
    P2pDisabled,
    SlowHostBandwidth,
    SlowGpuPair,
    SlowCollective,
    EccUncorrectable,
    RowRemapPending,
    CollectiveCorrupt,
    ReplicaMismatch,
    WrongLoss,
    Xid,
    ThermalThrottle,
    Vgpu,
    CorruptCopy,
    VbiosMismatch,
    NvlsUnavailable,
    NicDown,
    NicDowntrained,
    NicAcrossSocket,
    NoGdr,
    NicErrors,
    FabricCorrupt,
    SlowCompute,
    ComputeCorrupt,
    PowerLimited,
    ExclusiveProcess,
    BusyGpu,
    MigPending,
    ProcessStarts,
    MpsDaemon,
    XidUnderLoad,
    EccUnderLoad,
    LinkErrorsUnderLoad,
}

impl FaultKind {
    pub const ALL: [FaultKind; 36] = [
        FaultKind::GpuMissing,
        FaultKind::GpuLost,
        FaultKind::NvlinkDown,
        FaultKind::PcieDowntrained,
        FaultKind::P2pDisabled,
        FaultKind::SlowHostBandwidth,
        FaultKind::SlowGpuPair,
        FaultKind::SlowCollective,
        FaultKind::EccUncorrectable,
        FaultKind::RowRemapPending,
        FaultKind::CollectiveCorrupt,
        FaultKind::ReplicaMismatch,
        FaultKind::WrongLoss,
        FaultKind::Xid,
        FaultKind::ThermalThrottle,
        FaultKind::Vgpu,
        FaultKind::CorruptCopy,
        FaultKind::VbiosMismatch,
        FaultKind::NvlsUnavailable,
        FaultKind::NicDown,
        FaultKind::NicDowntrained,
        FaultKind::NicAcrossSocket,
        FaultKind::NoGdr,
        FaultKind::NicErrors,
        FaultKind::FabricCorrupt,
        FaultKind::SlowCompute,
        FaultKind::ComputeCorrupt,
        FaultKind::PowerLimited,
        FaultKind::ExclusiveProcess,
        FaultKind::BusyGpu,
        FaultKind::MigPending,
        FaultKind::ProcessStarts,
        FaultKind::MpsDaemon,
        FaultKind::XidUnderLoad,
        FaultKind::EccUnderLoad,
        FaultKind::LinkErrorsUnderLoad,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::GpuMissing => "gpu-missing",
            FaultKind::GpuLost => "gpu-lost",
            FaultKind::NvlinkDown => "nvlink-down",
            FaultKind::PcieDowntrained => "pcie-downtrained",
            FaultKind::P2pDisabled => "p2p-disabled",
            FaultKind::SlowHostBandwidth => "slow-host-bandwidth",
            FaultKind::SlowGpuPair => "slow-gpu-pair",
            FaultKind::SlowCollective => "slow-collective",
            FaultKind::EccUncorrectable => "ecc-uncorrectable",
            FaultKind::RowRemapPending => "row-remap-pending",
            FaultKind::CollectiveCorrupt => "collective-corrupt",
            FaultKind::ReplicaMismatch => "replica-mismatch",
            FaultKind::WrongLoss => "wrong-loss",
            FaultKind::Xid => "xid",
            FaultKind::ThermalThrottle => "thermal-throttle",
            FaultKind::Vgpu => "vgpu",
            FaultKind::CorruptCopy => "corrupt-copy",
            FaultKind::VbiosMismatch => "vbios-mismatch",
            FaultKind::NvlsUnavailable => "nvls-unavailable",
            FaultKind::NicDown => "nic-down",
            FaultKind::NicDowntrained => "nic-downtrained",
            FaultKind::NicAcrossSocket => "nic-across-socket",
            FaultKind::NoGdr => "no-gdr",
            FaultKind::NicErrors => "nic-errors",
            FaultKind::FabricCorrupt => "fabric-corrupt",
            FaultKind::SlowCompute => "slow-compute",
            FaultKind::ComputeCorrupt => "compute-corrupt",
            FaultKind::PowerLimited => "power-limited",
            FaultKind::ExclusiveProcess => "exclusive-process",
            FaultKind::BusyGpu => "busy-gpu",
            FaultKind::MigPending => "mig-pending",
            FaultKind::ProcessStarts => "process-starts",
            FaultKind::MpsDaemon => "mps-daemon",
            FaultKind::XidUnderLoad => "xid-under-load",
            FaultKind::EccUnderLoad => "ecc-under-load",
            FaultKind::LinkErrorsUnderLoad => "link-errors-under-load",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            FaultKind::GpuMissing => "a GPU does not show up (gpu=N)",
            FaultKind::GpuLost => {
                "a GPU fell off the bus: the driver lists it, but it no longer answers (gpu=N)"
            }
            FaultKind::NvlinkDown => {
                "one NVLink of a GPU (or of a directly linked pair) is down (gpu=N, peer=M)"
            }
            FaultKind::PcieDowntrained => {
                "a GPU's PCIe link trained below spec (gpu=N, gen=G, width=W; default half width)"
            }
            FaultKind::P2pDisabled => {
                "peer access is off, as in a VM that hides it (gpu=N, peer=M; default all pairs)"
            }
            FaultKind::SlowHostBandwidth => "one GPU's host bandwidth is 40% low (gpu=N, factor=F; attempts=A: only on the first A measurements)",
            FaultKind::SlowGpuPair => {
                "one GPU pair's peer bandwidth is 40% low (gpu=N, peer=M, factor=F; attempts=A: only on the first A measurements)"
            }
            FaultKind::SlowCollective => {
                "a collective's bus bandwidth is 30% low (op=all_reduce, factor=F; attempts=A: only on the first A measurements)"
            }
            FaultKind::EccUncorrectable => "an uncorrectable ECC error on a GPU (gpu=N)",
            FaultKind::RowRemapPending => "a row remap is pending on a GPU (gpu=N)",
            FaultKind::CollectiveCorrupt => {
                "a collective returns wrong data (op=all_reduce, gpu=N)"
            }
            FaultKind::ReplicaMismatch => {
                "one training replica ends with different parameters (gpu=N)"
            }
            FaultKind::WrongLoss => {
                "a broken kernel (ReLU backward) makes the losses leave the CPU golden trajectory"
            }
            FaultKind::Xid => {
                "an XID event on a GPU (gpu=N, code=79; age_h=H: logged H hours before the run)"
            }
            FaultKind::ThermalThrottle => "a GPU is held back by hardware thermal slowdown (gpu=N)",
            FaultKind::Vgpu => "the GPUs are vGPUs rather than passed through",
            FaultKind::CorruptCopy => {
                "copies return wrong data: peer copies and transfers between a pair both ways \
                 (gpu=N, peer=M), or a GPU's host and device copies (gpu=N, no peer)"
            }
            FaultKind::VbiosMismatch => {
                "a GPU runs another VBIOS than the rest of the node, as after a partial repair (gpu=N)"
            }
            FaultKind::NvlsUnavailable => {
                "NVLink SHARP is off, as when the fabric manager is not running: no multicast \
                 support, fabric not registered (gpu=N: that GPU only; default every GPU)"
            }
            FaultKind::NicDown => "a NIC's port is down, its cable unplugged or its switch port off (nic=N)",
            FaultKind::NicDowntrained => {
                "a NIC's port trained below its rate, 200 instead of 400 Gb/s (nic=N, factor=F; default 0.5)"
            }
            FaultKind::NicAcrossSocket => {
                "a GPU's NIC sits across the CPU socket from it, so GPUDirect RDMA crosses the \
                 socket link (gpu=N)"
            }
            FaultKind::NoGdr => "GPUDirect RDMA is missing: nvidia_peermem not loaded, no dma-buf",
            FaultKind::NicErrors => {
                "a NIC's error counters rise during the run and its link flaps (nic=N)"
            }
            FaultKind::FabricCorrupt => {
                "collectives across nodes bring wrong data into this node's GPUs (a NIC or a \
                 GPUDirect path that corrupts)"
            }
            FaultKind::SlowCompute => {
                "a GPU computes slower than its peers while looking healthy, as a GPU with a \
                 degraded SM or held-back clocks (gpu=N, factor=F; default 0.35)"
            }
            FaultKind::ComputeCorrupt => {
                "a GPU's GEMMs return wrong elements, as a GPU with failing SRAM or tensor cores (gpu=N)"
            }
            FaultKind::PowerLimited => {
                "a GPU cannot reach its power target under load, as with a failing power stage or \
                 a board capped low (gpu=N, factor=F: the share of its power limit it reaches; \
                 default 0.6)"
            }
            FaultKind::ExclusiveProcess => {
                "the GPUs admit one process at a time (compute mode Exclusive_Process), as sites \
                 that give each job whole GPUs set them (gpu=N: that GPU only; default every GPU)"
            }
            FaultKind::BusyGpu => {
                "another process holds a GPU and takes a share of it, as a job left running \
                 (gpu=N, factor=F: the share of its GEMM rate left to nodecert; default 0.5)"
            }
            FaultKind::MigPending => {
                "MIG mode is set to turn on at a GPU's next reset (`nvidia-smi -mig 1` with no \
                 reset since): whole today, partitioned after a reboot (gpu=N)"
            }
            FaultKind::ProcessStarts => {
                "another job starts on a GPU once the run is under way: absent when the node was \
                 read, there after the first check (gpu=N, factor=F: the share of its GEMM rate \
                 left to nodecert; default 0.5)"
            }
            FaultKind::MpsDaemon => {
                "the MPS control daemon runs, so CUDA jobs started on the node share the GPUs \
                 through an MPS server (nodecert's own work goes around it)"
            }
            FaultKind::XidUnderLoad => {
                "a GPU raises an XID under load: absent when the node was read, seen after the \
                 first check that ran on the GPUs (gpu=N, code=C; default 48, a double-bit ECC \
                 error)"
            }
            FaultKind::EccUnderLoad => {
                "a GPU's memory takes an uncorrectable ECC error under load: its counts are clean \
                 when the node is read; after the first check that ran on the GPUs one more \
                 uncorrectable error is counted and a row remap is pending (gpu=N)"
            }
            FaultKind::LinkErrorsUnderLoad => {
                "a GPU's links retry under load: after the first check that ran on the GPUs its \
                 first active NVLink has counted 500 more CRC errors and its PCIe link 200 more \
                 replays (gpu=N)"
            }
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

impl Fault {
    /// Parse `NAME[:key=value,...]`.
    pub fn parse(spec: &str) -> Result<Fault, String> {
        let (name, args) = spec.split_once(':').unwrap_or((spec, ""));
        let kind = FaultKind::parse(name.trim()).ok_or_else(|| {
            let names: Vec<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
            format!("unknown fault '{name}' (known: {})", names.join(", "))
        })?;
        let mut f = Fault {
            kind,
            ..Default::default()
        };
        for kv in args.split(',').filter(|s| !s.trim().is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("fault '{spec}': expected key=value, got '{kv}'"))?;
            let (k, v) = (k.trim(), v.trim());
            let num = |v: &str| -> Result<u64, String> {
                v.parse()
                    .map_err(|_| format!("fault '{spec}': {k}={v} is not a whole number"))
            };
            // Never truncated: xid:code=4294967375 is refused, not recorded as XID 79.
            let num32 = |v: &str| -> Result<u32, String> {
                u32::try_from(num(v)?).map_err(|_| {
                    format!(
                        "fault '{spec}': {k}={v} is out of range (at most {})",
                        u32::MAX
                    )
                })
            };
            match k {
                "gpu" => f.gpu = Some(num(v)? as usize),
                "peer" => f.peer = Some(num(v)? as usize),
                "gen" => f.gen = Some(num32(v)?),
                "width" => f.width = Some(num32(v)?),
                "code" => f.code = Some(num32(v)?),
                "op" => {
                    f.op = Some(CollectiveOp::parse(v).ok_or_else(|| format!("fault '{spec}': unknown collective '{v}'"))?)
                }
                "age_h" => {
                    f.age_h = Some(v.parse().map_err(|_| format!("fault '{spec}': age_h={v} is not a number"))?)
                }
                "factor" => {
                    f.factor = Some(v.parse().map_err(|_| format!("fault '{spec}': factor={v} is not a number"))?)
                }
                "attempts" => f.attempts = Some(num32(v)?),
                "nic" => f.nic = Some(num(v)? as usize),
                other => return Err(format!("fault '{spec}': unknown key '{other}' (gpu, peer, nic, op, factor, gen, width, code, age_h, attempts)")),
            }
        }
        f.check_values()
            .map_err(|e| format!("fault '{spec}': {e}"))?;
        Ok(f)
    }

    /// The values a fault carries are possible, whichever way it came (`--inject` or
    /// `[[faults]]` in a node file): one check for both.
    pub fn check_values(&self) -> Result<(), String> {
        if let Some(n) = self.attempts {
            if !matches!(
                self.kind,
                FaultKind::SlowHostBandwidth | FaultKind::SlowGpuPair | FaultKind::SlowCollective
            ) {
                return Err(
                    "attempts applies to the slow faults only (slow-host-bandwidth, \
                     slow-gpu-pair, slow-collective)"
                        .into(),
                );
            }
            if n == 0 {
                return Err(
                    "attempts must be at least 1 (the fault shows on the first N measurements)"
                        .into(),
                );
            }
        }
        if let Some(x) = self.factor {
            if !(x.is_finite() && (0.0..=MAX_FAULT_FACTOR).contains(&x)) {
                return Err(format!(
                    "factor must be a number from 0 to {MAX_FAULT_FACTOR}, got {}",
                    crate::units::exact(x)
                ));
            }
        }
        if let Some(x) = self.age_h {
            if !(x.is_finite() && (0.0..=MAX_FAULT_AGE_H).contains(&x)) {
                return Err(format!(
                    "age_h must be a number of hours from 0 to {MAX_FAULT_AGE_H}, got {}",
                    crate::units::exact(x)
                ));
            }
        }
        if let Some(g) = self.gen {
            if !(1..=7).contains(&g) {
                return Err(format!("gen must be 1 to 7, got {g}"));
            }
        }
        if let Some(w) = self.width {
            if ![1, 2, 4, 8, 16, 32].contains(&w) {
                return Err(format!("width must be 1, 2, 4, 8, 16 or 32, got {w}"));
            }
        }
        Ok(())
    }

    /// `nvlink-down:gpu=0,peer=1` as written on the command line.
    pub fn label(&self) -> String {
        let parts: Vec<String> = [
            ("gpu", self.gpu.map(|x| x.to_string())),
            ("peer", self.peer.map(|x| x.to_string())),
            ("op", self.op.map(|x| x.to_string())),
            ("factor", self.factor.map(|x| x.to_string())),
            ("gen", self.gen.map(|x| x.to_string())),
            ("width", self.width.map(|x| x.to_string())),
            ("code", self.code.map(|x| x.to_string())),
            ("age_h", self.age_h.map(|x| x.to_string())),
            ("attempts", self.attempts.map(|x| x.to_string())),
            ("nic", self.nic.map(|x| x.to_string())),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}={v}")))
        .collect();
        if parts.is_empty() {
            self.kind.name().to_string()
        } else {
            format!("{}:{}", self.kind.name(), parts.join(","))
        }
    }
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
    fn validate(&self) -> Result<(), (String, String)> {
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

/// The share of its GEMM rate a GPU in hardware thermal slowdown keeps in the simulation (our
/// estimate: the slowdown lowers SM clocks by about a third).
pub const THERMAL_SLOWDOWN_FACTOR: f64 = 0.7;

/// Fixed cost of one simulated GEMM, microseconds (launch and the last wave's tail): what
/// keeps small GEMMs below the plateau.
pub const GEMM_OVERHEAD_US: f64 = 8.0;

/// The largest multiplier a fault takes.
pub const MAX_FAULT_FACTOR: f64 = 100.0;
/// The oldest an injected kernel-log XID can be, hours (10 years).
pub const MAX_FAULT_AGE_H: f64 = 87_600.0;

fn check_fault(f: &Fault, n: usize, nics: Option<usize>) -> Result<(), String> {
    f.check_values()
        .map_err(|e| format!("{}: {e}", f.kind.name()))?;
    for (k, v) in [("gpu", f.gpu), ("peer", f.peer)] {
        if let Some(v) = v {
            if v >= n {
                return Err(format!(
                    "{}: {k}={v} is out of range: the node has {n} GPUs",
                    f.kind.name()
                ));
            }
        }
    }
    if f.gpu.is_some() && f.gpu == f.peer {
        return Err(format!("{}: gpu and peer must differ", f.kind.name()));
    }
    let nic_fault = matches!(
        f.kind,
        FaultKind::NicDown
            | FaultKind::NicDowntrained
            | FaultKind::NicAcrossSocket
            | FaultKind::NoGdr
            | FaultKind::NicErrors
            | FaultKind::FabricCorrupt
    );
    if nic_fault && nics.is_none() {
        return Err(format!(
            "{}: the simulated node describes no NICs (no [network])",
            f.kind.name()
        ));
    }
    if f.nic.is_some()
        && !matches!(
            f.kind,
            FaultKind::NicDown | FaultKind::NicDowntrained | FaultKind::NicErrors
        )
    {
        return Err(format!(
            "{}: nic= applies to nic-down, nic-downtrained and nic-errors",
            f.kind.name()
        ));
    }
    if let Some(i) = f.nic {
        let nics = nics.unwrap_or(0);
        if i >= nics {
            return Err(format!(
                "{}: nic={i} is out of range: the node has {nics} NICs",
                f.kind.name()
            ));
        }
    }
    let pair_fault =
        matches!(f.kind, FaultKind::SlowGpuPair | FaultKind::NvlinkDown) && f.peer.is_some();
    if pair_fault && n < 2 {
        return Err(format!("{}: the node has only one GPU", f.kind.name()));
    }
    Ok(())
}

/// The simulated backend: a node description, faults and a seed.
pub struct SimBackend {
    node: SimNode,
    faults: Vec<Fault>,
    seed: u64,
    /// GPUs after `gpu-missing` and `gpu-lost` faults: original indices of the GPUs that remain.
    present: Vec<usize>,
    /// How many times each measurement was taken: a transient fault (`attempts=N`) shows only
    /// on the first N.
    taken: std::collections::HashMap<String, u32>,
    /// Measurements of the same thing taken before the one in progress.
    nth: u32,
    /// The name given to this node of a simulated fleet (`--node-name`): its host name, and
    /// what its GPUs' serials and UUIDs derive from, so that no two nodes share a GPU.
    named: Option<String>,
    /// The NCCL settings this node answers as in effect ([`SimBackend::with_nccl_env`]).
    nccl_env: Vec<crate::backend::NcclSetting>,
    /// The XIDs of xid-under-load faults were told ([`Backend::xids_since`]): once, as a real
    /// node tells each event once.
    xids_told: bool,
}

/// Another VBIOS version than `v`, for the vbios-mismatch fault: its last field changed
/// ("96.00.9F.00.05" becomes "96.00.9F.00.06"), as a GPU flashed at another time would show.
fn other_vbios(v: &str) -> String {
    match v.rsplit_once('.') {
        Some((head, last)) => {
            let next = u32::from_str_radix(last, 16).map_or(1, |n| n.wrapping_add(1) & 0xff);
            format!("{head}.{next:02X}")
        }
        None => format!("{v}.1"),
    }
}

impl SimBackend {
    pub fn new(node: SimNode, extra_faults: Vec<Fault>, seed: u64) -> Result<Self, InputError> {
        let n = node.gpu.count;
        let mut faults = node.faults.clone();
        for f in extra_faults {
            check_fault(&f, n, node.network.as_ref().map(|x| x.nics))
                .map_err(|m| InputError::Other(format!("--inject {}: {m}", f.label())))?;
            faults.push(f);
        }
        let missing: Vec<usize> = faults
            .iter()
            .filter(|f| matches!(f.kind, FaultKind::GpuMissing | FaultKind::GpuLost))
            .map(|f| f.gpu.unwrap_or(n - 1))
            .collect();
        let present: Vec<usize> = (0..n).filter(|i| !missing.contains(i)).collect();
        Ok(SimBackend {
            node,
            faults,
            seed,
            present,
            taken: Default::default(),
            nth: 0,
            named: None,
            nccl_env: Vec::new(),
            xids_told: false,
        })
    }

    /// Name this simulated node (one of a fleet): the host name becomes `name`, and its GPUs'
    /// serials and UUIDs derive from it instead of from the node description's name.
    pub fn named(mut self, name: &str) -> Self {
        self.node.hostname = name.to_string();
        self.named = Some(name.to_string());
        self
    }

    /// Answer `env` as the NCCL settings in effect, sorted as the real backend answers them
    /// (tests of what a setting does to a verdict; the simulated figures do not change with it).
    pub fn with_nccl_env(mut self, env: &[(&str, &str)]) -> Self {
        self.nccl_env = env
            .iter()
            .map(|(k, v)| crate::backend::NcclSetting::env(k, v))
            .collect();
        self.nccl_env.sort();
        self
    }

    /// What a simulated run records of its node: enough to run it again.
    pub fn record(&self) -> crate::evidence::SimulationRecord {
        crate::evidence::SimulationRecord {
            node: self.node.name.clone(),
            seed: self.seed,
            faults: self.faults.iter().map(Fault::label).collect(),
            node_name: self.named.clone(),
        }
    }

    pub fn node(&self) -> &SimNode {
        &self.node
    }

    pub fn faults(&self) -> &[Fault] {
        &self.faults
    }

    /// The faults of a kind that show on the measurement in progress.
    fn faults_of(&self, kind: FaultKind) -> impl Iterator<Item = &Fault> {
        let nth = self.nth;
        self.faults
            .iter()
            .filter(move |f| f.kind == kind && f.attempts.is_none_or(|k| nth < k))
    }

    /// Start measuring `what`: count it, so that transient faults show on its first
    /// measurements only, and name its samples (a repeat measurement gets its own noise).
    fn begin(&mut self, what: String) -> String {
        let n = self.taken.entry(what.clone()).or_insert(0);
        self.nth = *n;
        *n += 1;
        if self.nth == 0 {
            what
        } else {
            format!("{what} #{}", self.nth)
        }
    }

    /// Original index of the GPU at CUDA ordinal `i`.
    fn orig(&self, i: usize) -> usize {
        self.present[i]
    }

    /// The node's NICs, before the run or after it (`after`: the counters of `nic-errors` risen).
    fn sim_fabric(&self, gpus: &[Gpu], after: bool) -> Option<crate::network::Fabric> {
        let net = self.node.network.as_ref()?;
        let faults: Vec<&Fault> = self.faults.iter().collect();
        Some(super::sim_nic::fabric(
            &self.node,
            net,
            &faults,
            gpus,
            &self.present,
            after,
        ))
    }

    fn bus_id(&self, orig: usize) -> String {
        self.node.bus_id(orig)
    }

    /// A deterministic generator for one measurement: depends on the seed and what is measured,
    /// not on the order measurements are taken in.
    fn rng(&self, what: &str) -> ChaCha8Rng {
        let mut h = Sha256::new();
        h.update(self.seed.to_le_bytes());
        h.update(what.as_bytes());
        let d = h.finalize();
        let mut s = [0u8; 32];
        s.copy_from_slice(&d);
        ChaCha8Rng::from_seed(s)
    }

    /// `iters` samples around `mean`, relative noise bounded at 3 sigma.
    fn samples(&self, what: &str, mean: f64, iters: u32) -> Vec<f64> {
        let mut rng = self.rng(what);
        let sd = self.node.perf.noise_pct / 100.0;
        (0..iters.clamp(1, 200))
            .map(|_| {
                let z: f64 = StandardNormal.sample(&mut rng);
                mean * (1.0 + sd * z.clamp(-3.0, 3.0))
            })
            .collect()
    }

    /// Active NVLinks each original GPU has (after nvlink-down faults on switched systems).
    fn gpu_links(&self, orig: usize) -> u32 {
        let down = self
            .faults_of(FaultKind::NvlinkDown)
            .filter(|f| self.node.links.nvswitch && self.orig(f.gpu.unwrap_or(0)) == orig)
            .count() as u32;
        self.node.links.nvlinks_per_gpu.saturating_sub(down)
    }

    /// Active NVLinks between two CUDA ordinals.
    fn pair_links(&self, a: usize, b: usize) -> u32 {
        if self.node.links.nvswitch {
            return self
                .gpu_links(self.orig(a))
                .min(self.gpu_links(self.orig(b)));
        }
        let down = self
            .faults_of(FaultKind::NvlinkDown)
            .filter(|f| {
                let g = f.gpu.unwrap_or(0);
                let p = f.peer.unwrap_or(g + 1);
                (g, p) == (a, b) || (g, p) == (b, a)
            })
            .count() as u32;
        self.pair_links_nominal(a, b).saturating_sub(down)
    }

    /// Full NVLink count a pair would have without faults.
    fn pair_links_nominal(&self, a: usize, b: usize) -> u32 {
        if self.node.links.nvswitch {
            return self.node.links.nvlinks_per_gpu;
        }
        let (oa, ob) = (self.orig(a) as u32, self.orig(b) as u32);
        self.node
            .links
            .direct
            .iter()
            .find(|d| (d[0], d[1]) == (oa, ob) || (d[0], d[1]) == (ob, oa))
            .map(|d| d[2])
            .unwrap_or(0)
    }

    fn p2p_enabled(&self, a: usize, b: usize) -> bool {
        if !self.node.links.p2p {
            return false;
        }
        !self.faults_of(FaultKind::P2pDisabled).any(|f| match f.gpu {
            None => true,
            Some(g) => {
                let p = f.peer;
                (a == g && p.is_none_or(|p| p == b)) || (b == g && p.is_none_or(|p| p == a))
            }
        })
    }

    fn pcie_of(&self, i: usize) -> (u32, u32) {
        let mut gen = self.node.gpu.pcie_gen;
        let mut width = self.node.gpu.pcie_width;
        for f in self.faults_of(FaultKind::PcieDowntrained) {
            if f.gpu.unwrap_or(0) == i {
                if f.gen.is_none() && f.width.is_none() {
                    width /= 2;
                }
                gen = f.gen.unwrap_or(gen);
                width = f.width.unwrap_or(width);
            }
        }
        (gen, width)
    }

    /// Host bandwidth multiplier for GPU i: PCIe training and slow-host faults.
    fn host_factor(&self, i: usize) -> f64 {
        let (gen, width) = self.pcie_of(i);
        let per_lane = |g: u32| 2f64.powi(g as i32 - 1);
        let mut f = (per_lane(gen) * width as f64)
            / (per_lane(self.node.gpu.pcie_gen) * self.node.gpu.pcie_width as f64);
        for x in self.faults_of(FaultKind::SlowHostBandwidth) {
            if x.gpu.unwrap_or(0) == i {
                f *= x.factor.unwrap_or(0.6);
            }
        }
        f.min(1.0)
    }

    /// Peer bandwidth multiplier for a pair; `transients`: with the faults that show only on
    /// the pair's first copies (a collective does not see them).
    fn pair_factor(&self, a: usize, b: usize, transients: bool) -> f64 {
        let mut f = 1.0;
        for x in self
            .faults_of(FaultKind::SlowGpuPair)
            .filter(|x| transients || x.attempts.is_none())
        {
            let g = x.gpu.unwrap_or(0);
            let p = x.peer.unwrap_or(g + 1);
            if (g, p) == (a, b) || (g, p) == (b, a) {
                f *= x.factor.unwrap_or(0.6);
            }
        }
        f
    }

    /// One-way and both-way peer bandwidth of a pair, before noise.
    fn pair_gbps(&self, a: usize, b: usize, transients: bool) -> (f64, f64) {
        let p = &self.node.perf;
        if !self.p2p_enabled(a, b) {
            return (p.staged_gbps, p.staged_gbps * 1.4);
        }
        let links = self.pair_links(a, b);
        let nominal = self.pair_links_nominal(a, b);
        let (one, both) = if links > 0 && nominal > 0 {
            let r = links as f64 / nominal as f64;
            (p.p2p_nvlink_gbps * r, p.p2p_nvlink_bidir_gbps * r)
        } else {
            self.pcie_pair_gbps(a, b)
        };
        let f = self.pair_factor(a, b, transients);
        (one * f, both * f)
    }

    /// The PCIe path class of a pair of CUDA ordinals, when its label is one.
    fn pcie_class(&self, a: usize, b: usize) -> Option<PciePath> {
        PciePath::parse(&self.node.pcie_label(self.orig(a), self.orig(b)))
    }

    /// One-way and both-way peer bandwidth of a healthy pair over PCIe: its path class's
    /// figures, else the node's single ones.
    fn pcie_pair_gbps(&self, a: usize, b: usize) -> (f64, f64) {
        let p = &self.node.perf;
        let class = self.pcie_class(a, b);
        let of = |m: &BTreeMap<PciePath, f64>, default: f64| {
            class.and_then(|c| m.get(&c).copied()).unwrap_or(default)
        };
        (
            of(&p.p2p_pcie_gbps_by_path, p.p2p_pcie_gbps),
            of(&p.p2p_pcie_bidir_gbps_by_path, p.p2p_pcie_bidir_gbps),
        )
    }

    /// One-way peer bandwidth a healthy pair delivers (no faults), the yardstick for collectives.
    fn pair_gbps_nominal(&self, a: usize, b: usize) -> f64 {
        if self.pair_links_nominal(a, b) > 0 {
            self.node.perf.p2p_nvlink_gbps
        } else {
            self.pcie_pair_gbps(a, b).0
        }
    }

    fn n(&self) -> usize {
        self.present.len()
    }

    /// corrupt-copy without a peer: GPU i's host and device copies return wrong data.
    fn host_copy_corrupt(&self, i: usize) -> bool {
        self.faults_of(FaultKind::CorruptCopy)
            .any(|f| f.peer.is_none() && f.gpu.unwrap_or(0) == i)
    }

    /// corrupt-copy with a peer: copies between the pair, either way, return wrong data.
    fn pair_copy_corrupt(&self, a: usize, b: usize) -> bool {
        self.faults_of(FaultKind::CorruptCopy).any(|f| {
            let g = f.gpu.unwrap_or(0);
            f.peer.is_some_and(|p| (g, p) == (a, b) || (g, p) == (b, a))
        })
    }

    /// The readings GPU `orig` (the node's numbering) does not give.
    fn hidden(&self, orig: usize) -> Vec<Reading> {
        let mut out: Vec<Reading> = self
            .node
            .unavailable
            .iter()
            .filter(|u| u.gpus.is_empty() || u.gpus.contains(&orig))
            .flat_map(|u| u.readings.iter().copied())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    fn hides_driver_version(&self) -> bool {
        self.node
            .unavailable
            .iter()
            .any(|u| u.readings.contains(&Reading::DriverVersion))
    }

    fn check_gpu(&self, i: usize) -> Result<(), HwError> {
        if i >= self.n() {
            return Err(HwError::Call {
                call: "simulated device lookup".into(),
                detail: format!("GPU {i} does not exist (the node has {})", self.n()),
            });
        }
        Ok(())
    }

    /// [`SimBackend::coll_peak_over`] every GPU.
    #[cfg(test)]
    fn coll_peak(&self, op: CollectiveOp, no_nvls: bool) -> f64 {
        let all: Vec<usize> = (0..self.n()).collect();
        self.coll_peak_over(op, no_nvls, &all)
    }

    /// Bus bandwidth of a collective at large sizes among the GPUs `ranks` (CUDA ordinals;
    /// every GPU for the collectives check) after faults, as NCCL chooses its algorithm, or
    /// with NVLS forced off (`no_nvls`, `NCCL_NVLS_ENABLE=0`), GB/s: the node's healthy figure times the worst share of its healthy figure that a pair among them now
    /// delivers. A group's collectives ride its own links: a slow pair slows every group that
    /// holds both its GPUs, and no other.
    fn coll_peak_over(&self, op: CollectiveOp, no_nvls: bool, ranks: &[usize]) -> f64 {
        let p = &self.node.perf;
        let mut peak = p.collective_busbw_gbps.get(&op).copied().unwrap_or(0.0);
        // NCCL uses NVLS only when every GPU can: one without it and all_reduce falls back.
        let nvls_lost =
            self.node.links.nvls && self.faults_of(FaultKind::NvlsUnavailable).next().is_some();
        if op == CollectiveOp::AllReduce && (nvls_lost || (no_nvls && self.node.links.nvls)) {
            peak = p.collective_busbw_no_nvls_gbps.unwrap_or(peak);
        }
        // Collectives ride the slowest path between GPUs: the figure a healthy node delivers,
        // times the worst share of its healthy figure that any pair now delivers.
        if ranks.len() > 1 {
            let mut share = f64::INFINITY;
            for (i, &a) in ranks.iter().enumerate() {
                for &b in &ranks[i + 1..] {
                    let nominal = self.pair_gbps_nominal(a, b);
                    if nominal > 0.0 {
                        share = share.min(self.pair_gbps(a, b, false).0 / nominal);
                    }
                }
            }
            if share.is_finite() {
                peak *= share.min(1.0);
            }
        }
        for f in self.faults_of(FaultKind::SlowCollective) {
            if f.op.unwrap_or(CollectiveOp::AllReduce) == op {
                peak *= f.factor.unwrap_or(0.7);
            }
        }
        peak
    }

    /// Modelled time of one collective, microseconds.
    fn coll_time_us(&self, op: CollectiveOp, bytes: u64, no_nvls: bool) -> f64 {
        let all: Vec<usize> = (0..self.n()).collect();
        self.coll_time_over_us(op, bytes, no_nvls, &all)
    }

    /// Modelled time of one collective among the GPUs `ranks`, microseconds.
    fn coll_time_over_us(
        &self,
        op: CollectiveOp,
        bytes: u64,
        no_nvls: bool,
        ranks: &[usize],
    ) -> f64 {
        let n = ranks.len();
        let factor = op.busbw_factor(n);
        let peak = self.coll_peak_over(op, no_nvls, ranks);
        let lat = self.node.perf.collective_latency_us * (1.0 + (n as f64).log2().max(0.0) * 0.25);
        if factor == 0.0 || peak <= 0.0 {
            // One rank: a local copy at device speed.
            return lat * 0.1 + bytes as f64 / (self.node.perf.device_copy_gbps * 1e3);
        }
        lat + bytes as f64 * factor / (peak * 1e3)
    }
}

/// The latency of a collective across two nodes, microseconds (NCCL over InfiniBand: a few
/// microseconds per hop); it grows with the log of the node count.
const FABRIC_LATENCY_US: f64 = 20.0;

impl SimBackend {
    /// One modelled collective at one size, as NCCL chooses or with NVLS forced off.
    fn coll_sample(
        &mut self,
        op: CollectiveOp,
        bytes: u64,
        iters: u32,
        no_nvls: bool,
    ) -> CollectiveSample {
        let key = self.begin(format!(
            "coll {op} {bytes}{}",
            if no_nvls { " no-nvls" } else { "" }
        ));
        let t = self.coll_time_us(op, bytes, no_nvls);
        // What each rank receives, as NCCL's layout has it: nothing for an all_gather,
        // reduce_scatter or all_to_all under 16 bytes a rank.
        let layout = crate::backend::cuda::verify::layout(op, self.n(), bytes);
        let elements = layout.recv_count as u64;
        let corrupt = self
            .faults_of(FaultKind::CollectiveCorrupt)
            .any(|f| f.op.unwrap_or(CollectiveOp::AllReduce) == op);
        // A corrupted reduction shows up once buffers span more than a few pages.
        let wrong = if corrupt && bytes >= 1 << 16 {
            (elements / 1024).max(1)
        } else {
            0
        };
        CollectiveSample {
            time_us: self.samples(&key, t, iters),
            elements_checked: elements * self.n() as u64,
            wrong_elements: wrong,
            ranks: self.n(),
            bytes: layout.counted_bytes,
        }
    }
}

impl Backend for SimBackend {
    fn nccl_settings(&self) -> Vec<crate::backend::NcclSetting> {
        self.nccl_env.clone()
    }

    fn fabric(&mut self, gpus: &[Gpu]) -> Result<Option<crate::network::Fabric>, HwError> {
        Ok(self.sim_fabric(gpus, true))
    }

    /// Each GPU's processes now: busy-gpu's since the start, and process-starts' since the run
    /// began (the inventory, read before it, does not list them). No figure drawn.
    fn gpu_processes(&mut self) -> Result<Vec<Option<Vec<GpuProcess>>>, HwError> {
        Ok((0..self.n())
            .map(|i| {
                if self.hidden(self.orig(i)).contains(&Reading::Processes) {
                    return None;
                }
                let on_i = |k| self.faults_of(k).filter(move |f| f.gpu.unwrap_or(0) == i);
                let busy = on_i(FaultKind::BusyGpu).map(|_| busy_process());
                let started = on_i(FaultKind::ProcessStarts).map(|_| GpuProcess {
                    pid: STARTED_PID,
                    name: Some("torchrun".into()),
                    memory_bytes: Some(STARTED_MEMORY),
                });
                Some(busy.chain(started).collect())
            })
            .collect())
    }

    fn xids_since(&mut self) -> Result<Vec<Option<Vec<XidEvent>>>, HwError> {
        let told = std::mem::replace(&mut self.xids_told, true);
        Ok((0..self.n())
            .map(|i| {
                if self.hidden(self.orig(i)).contains(&Reading::Xids) {
                    return None;
                }
                Some(
                    self.faults_of(FaultKind::XidUnderLoad)
                        .filter(|f| !told && f.gpu.unwrap_or(0) == i)
                        .map(|f| XidEvent {
                            code: f.code.unwrap_or(48),
                            source: "nvml event".into(),
                            detail: Some("simulated, under load".into()),
                            age_s: Some(0.0),
                        })
                        .collect(),
                )
            })
            .collect())
    }

    /// The counters the inventory reads, grown by the under-load faults (which the inventory,
    /// read before any check, does not show). A counter the node hides stays unread, fault or
    /// not. No figure drawn.
    fn error_counts(&mut self) -> Result<Vec<Option<ErrorCounts>>, HwError> {
        let inv = self.inventory()?;
        Ok(inv
            .gpus
            .iter()
            .map(|g| {
                let mut c = ErrorCounts::of(g);
                for f in self.faults.iter().filter(|f| f.gpu.unwrap_or(0) == g.index) {
                    match f.kind {
                        FaultKind::EccUnderLoad => {
                            let more = |v: &mut Option<u64>| *v = v.map(|n| n.saturating_add(1));
                            more(&mut c.ecc.volatile_uncorrected);
                            more(&mut c.ecc.aggregate_uncorrected);
                            if let Some(r) = &mut c.remapped_rows {
                                r.uncorrectable = r.uncorrectable.saturating_add(1);
                                r.pending = true;
                            }
                        }
                        FaultKind::LinkErrorsUnderLoad => {
                            if let Some((_, e)) = c.nvlinks.first_mut() {
                                e.crc_flit = e.crc_flit.map(|n| n.saturating_add(500));
                            }
                            c.pcie_replays = c.pcie_replays.map(|n| n.saturating_add(200));
                        }
                        _ => {}
                    }
                }
                Some(c)
            })
            .collect())
    }

    fn fabric_supported(&mut self) -> Result<(), HwError> {
        match self.node.network {
            Some(_) => Ok(()),
            None => Err(HwError::NotSupported(
                "the simulated node describes no NICs ([network])".into(),
            )),
        }
    }

    fn fabric_id(&mut self) -> Result<Vec<u8>, HwError> {
        self.fabric_supported()?;
        // As NCCL's: 128 bytes, new each time (two ids never name the same communicator).
        let mut id = vec![0u8; crate::backend::NCCL_ID_BYTES];
        getrandom::getrandom(&mut id).map_err(|e| HwError::Call {
            call: "making a unique id".into(),
            detail: e.to_string(),
        })?;
        Ok(id)
    }

    fn fabric_collective(
        &mut self,
        comm: &crate::backend::FabricComm,
        ops: &[CollectiveOp],
        sizes: &[u64],
        warmup: u32,
        iters: u32,
    ) -> Result<Vec<Vec<CollectiveSample>>, HwError> {
        let _ = warmup;
        let Some(f) = self.sim_fabric(&[], false) else {
            return Err(HwError::NotSupported(
                "the simulated node describes no NICs ([network])".into(),
            ));
        };
        let n = self.n();
        if comm.id.len() != crate::backend::NCCL_ID_BYTES
            || comm.nodes < 2
            || comm.first_rank + n > comm.ranks
        {
            return Err(HwError::Call {
                call: "NCCL across nodes (simulated)".into(),
                detail: format!(
                    "{} GPUs as ranks {}.. of {} over {} nodes, id of {} bytes: not a communicator",
                    n,
                    comm.first_rank,
                    comm.ranks,
                    comm.nodes,
                    comm.id.len()
                ),
            });
        }
        // What this node drives into the fabric: its NICs (NCCL spreads the collective over
        // those that are up, so the slowest sets the pace); the others' figures are theirs,
        // and the slowest node sets the communicator's.
        let peak = super::sim_nic::node_busbw(&f);
        let corrupt = self.faults_of(FaultKind::FabricCorrupt).next().is_some();
        let lat = FABRIC_LATENCY_US * (1.0 + (comm.nodes as f64).log2());
        let mut out = Vec::with_capacity(ops.len());
        for &op in ops {
            let mut per = Vec::with_capacity(sizes.len());
            for &bytes in sizes {
                let l = crate::backend::cuda::verify::layout(op, comm.ranks, bytes);
                let key = self.begin(format!("fabric {op} {bytes} {}", comm.nodes));
                let factor = op.busbw_factor(comm.ranks);
                let t = if peak > 0.0 {
                    lat + l.counted_bytes as f64 * factor / (peak * 1e3)
                } else {
                    // No port up: NCCL would not get through at all; a figure near zero.
                    1e9
                };
                // As the real check: every element up to 64 Mi per GPU, windows beyond.
                let per_gpu = l.recv_count.min(crate::backend::cuda::nccl::FULL_CHECK);
                let elements = per_gpu as u64 * n as u64;
                per.push(CollectiveSample {
                    time_us: self.samples(&key, t, iters),
                    elements_checked: elements,
                    wrong_elements: if corrupt && bytes >= 1 << 16 {
                        (elements / 1024).max(1)
                    } else {
                        0
                    },
                    ranks: comm.ranks,
                    bytes: l.counted_bytes,
                });
            }
            out.push(per);
        }
        Ok(out)
    }

    fn info(&self) -> BackendInfo {
        let faults: Vec<String> = self.faults.iter().map(Fault::label).collect();
        BackendInfo {
            simulated: true,
            name: format!(
                "simulated node {} (seed {}{})",
                self.node.name,
                self.seed,
                if faults.is_empty() {
                    String::new()
                } else {
                    format!(", faults: {}", faults.join(" "))
                }
            ),
            libraries: vec![],
            nccl_version: None,
            nccl_env: crate::backend::NcclSetting::in_evidence(&self.nccl_env),
        }
    }

    fn inventory(&mut self) -> Result<Inventory, HwError> {
        let node = &self.node;
        let hopper = ["H100", "H200", "H800", "GH200"]
            .iter()
            .any(|m| node.gpu.name.contains(m));
        let n = self.n();
        let mut gpus = Vec::new();
        for i in 0..n {
            let o = self.orig(i);
            let (gen, width) = self.pcie_of(i);
            let idle_gen = node.gpu.pcie_idle_gen.map_or(gen, |g| g.min(gen));
            // Below the maximum at rest: read again under load, as the real backend does.
            let loaded = (idle_gen, width) != (node.gpu.pcie_gen, node.gpu.pcie_width);
            let numa = node.gpu.numa_nodes.get(o).copied();
            let cpus = numa.and_then(|m| node.gpu.numa_cpus.get(m as usize).cloned());
            let mut throttle = Vec::new();
            let mut ecc = EccCounts {
                volatile_corrected: Some(0),
                volatile_uncorrected: Some(0),
                aggregate_corrected: Some(node.health.aggregate_corrected),
                aggregate_uncorrected: Some(0),
                sram_corrected: Some(0),
                sram_uncorrected: Some(0),
                dram_errors: Some(node.health.aggregate_corrected),
            };
            let mut rows = RemappedRows::default();
            let mut xids = Vec::new();
            let mut vbios = node.gpu.vbios.clone();
            let mut nvls = if node.links.nvls {
                Nvls {
                    multicast: Some(true),
                    fabric: Some(FabricState::Completed),
                }
            } else {
                Nvls {
                    multicast: Some(false),
                    fabric: None,
                }
            };
            let mut compute_mode = ComputeMode::Default;
            let mut mig_pending = None;
            let mut others: Vec<GpuProcess> = Vec::new();
            for f in &self.faults {
                if f.kind == FaultKind::ExclusiveProcess && f.gpu.is_none_or(|g| g == i) {
                    compute_mode = ComputeMode::ExclusiveProcess;
                }
                if f.kind == FaultKind::NvlsUnavailable && f.gpu.is_none_or(|g| g == i) {
                    nvls = Nvls {
                        multicast: Some(false),
                        fabric: node.links.nvswitch.then_some(FabricState::NotStarted),
                    };
                }
                if f.gpu.unwrap_or(0) != i {
                    continue;
                }
                match f.kind {
                    FaultKind::EccUncorrectable => {
                        ecc.volatile_uncorrected = Some(1);
                        ecc.aggregate_uncorrected = Some(1);
                        ecc.sram_uncorrected = Some(1);
                    }
                    FaultKind::RowRemapPending => {
                        rows.pending = true;
                        rows.uncorrectable = 1;
                    }
                    FaultKind::Xid => xids.push(match f.age_h {
                        // An XID in the kernel log, logged `age_h` hours before the run.
                        Some(h) => XidEvent {
                            code: f.code.unwrap_or(79),
                            source: "kernel log".into(),
                            detail: Some(format!("simulated, logged {h} h before the run")),
                            age_s: Some(h * 3600.0),
                        },
                        None => XidEvent {
                            code: f.code.unwrap_or(79),
                            source: "nvml event".into(),
                            detail: Some("simulated".into()),
                            age_s: Some(0.0),
                        },
                    }),
                    FaultKind::ThermalThrottle => throttle.push("hw_thermal_slowdown".to_string()),
                    FaultKind::VbiosMismatch => vbios = other_vbios(&vbios),
                    FaultKind::MigPending => mig_pending = Some(true),
                    FaultKind::BusyGpu => others.push(busy_process()),
                    _ => {}
                }
            }
            let mut nvlinks = Vec::new();
            if node.links.nvswitch {
                let active = self.gpu_links(o);
                for l in 0..node.links.nvlinks_per_gpu {
                    nvlinks.push(NvLink {
                        link: l,
                        active: l < active,
                        version: node.links.nvlink_version,
                        remote: LinkRemote {
                            kind: RemoteKind::NvSwitch,
                            pci_bus_id: Some(format!(
                                "0000:{:02x}:00.0",
                                0xf0 + (l % node.links.nvswitches.max(1))
                            )),
                            gpu: None,
                        },
                        errors: NvLinkErrors {
                            replay: Some(0),
                            recovery: Some(0),
                            crc_flit: Some(0),
                            crc_data: Some(0),
                        },
                    });
                }
            } else {
                let mut l = 0;
                for j in 0..n {
                    if j == i {
                        continue;
                    }
                    let nominal = self.pair_links_nominal(i, j);
                    let active = self.pair_links(i, j);
                    for k in 0..nominal {
                        nvlinks.push(NvLink {
                            link: l,
                            active: k < active,
                            version: node.links.nvlink_version,
                            remote: LinkRemote {
                                kind: RemoteKind::Gpu,
                                pci_bus_id: Some(self.bus_id(self.orig(j))),
                                gpu: Some(j),
                            },
                            errors: NvLinkErrors {
                                replay: Some(0),
                                recovery: Some(0),
                                crc_flit: Some(0),
                                crc_data: Some(0),
                            },
                        });
                        l += 1;
                    }
                }
            }
            gpus.push(Gpu {
                index: i,
                name: node.gpu.name.clone(),
                uuid: match &self.named {
                    Some(n) => sim_uuid(&format!("{}@{n}", node.name), o),
                    None => sim_uuid(&node.name, o),
                },
                serial: Some(match &self.named {
                    Some(n) => {
                        let d = Sha256::digest(format!("serial/{n}/{o}"));
                        let v = u64::from_be_bytes(d[..8].try_into().unwrap_or_default());
                        format!("SIM{:010}", v % 10_000_000_000)
                    }
                    None => format!("SIM{:010}", 1_652_000_000u64 + o as u64),
                }),
                vbios: Some(vbios),
                pci_bus_id: self.bus_id(o),
                memory_bytes: node.gpu.memory_bytes,
                pcie: PcieLink {
                    gen_current: Some(idle_gen),
                    gen_max: Some(node.gpu.pcie_gen),
                    width_current: Some(width),
                    width_max: Some(node.gpu.pcie_width),
                    gen_loaded: loaded.then_some(gen),
                    width_loaded: loaded.then_some(width),
                    replay_counter: Some(node.health.pcie_replays),
                },
                numa_node: numa,
                cpu_affinity: cpus,
                cpu_socket: numa.and_then(|m| {
                    if node.gpu.numa_sockets.is_empty() {
                        u32::try_from(m).ok()
                    } else {
                        node.gpu.numa_sockets.get(usize::try_from(m).ok()?).copied()
                    }
                }),
                persistence_mode: Some(true),
                mig_enabled: Some(false),
                mig_pending,
                compute_mode: Some(compute_mode),
                memory_used_bytes: Some(others.iter().filter_map(|p| p.memory_bytes).sum::<u64>()),
                processes: Some(others),
                ecc_enabled: Some(node.gpu.ecc),
                ecc,
                remapped_rows: Some(rows),
                // Hopper GPUs answer only the row-remapping query; older ones both.
                retired_pages: (!hopper).then(RetiredPages::default),
                throttle_reasons: throttle,
                sm_clock_mhz: Some(node.gpu.sm_clock_max_mhz),
                sm_clock_max_mhz: Some(node.gpu.sm_clock_max_mhz),
                power_limit_w: Some(node.gpu.power_limit_w),
                temperature_c: Some(node.gpu.temperature_c),
                nvlinks,
                xids,
                nvls,
                unavailable: vec![],
            });
            let g = gpus.last_mut().expect("just pushed");
            for r in self.hidden(o) {
                hide(g, r);
            }
        }
        let mut pairs = Vec::new();
        for a in 0..n {
            for b in (a + 1)..n {
                let links = self.pair_links(a, b);
                let p2p = self.p2p_enabled(a, b);
                pairs.push(GpuPair {
                    a,
                    b,
                    nvlinks: links,
                    pcie_path: Some(node.pcie_label(self.orig(a), self.orig(b))),
                    p2p: P2pStatus {
                        read: Some(p2p),
                        write: Some(p2p),
                        nvlink: Some(p2p && links > 0),
                        atomics: Some(p2p && links > 0),
                    },
                });
            }
        }
        let mut mode = node.virtualization.mode;
        if self.faults_of(FaultKind::Vgpu).next().is_some() {
            mode = VirtMode::Vgpu;
        }
        let mut witnesses = vec![Witness {
            source: "nvml virtualization mode".into(),
            finding: match mode {
                VirtMode::BareMetal => "None (bare metal)".into(),
                VirtMode::Passthrough => "PassThrough".into(),
                VirtMode::Vgpu => "VGPU".into(),
                VirtMode::Unknown => "not available".into(),
            },
        }];
        witnesses.push(Witness {
            source: "cpuinfo hypervisor flag".into(),
            finding: if mode == VirtMode::BareMetal {
                "absent".into()
            } else {
                "present".into()
            },
        });
        if let Some(h) = &node.virtualization.hypervisor {
            witnesses.push(Witness {
                source: "cpuid 0x40000000".into(),
                finding: h.clone(),
            });
        }
        let mut unavailable = Vec::new();
        for g in &gpus {
            for r in self.hidden(self.orig(g.index)) {
                if r != Reading::DriverVersion {
                    unavailable.push(format!(
                        "gpu{} {}: not available (hidden by the simulated node)",
                        g.index,
                        r.describe()
                    ));
                }
            }
            if g.retired_pages.is_none() {
                unavailable.push(format!(
                    "gpu{} retired pages: not supported (this GPU remaps rows instead)",
                    g.index
                ));
            }
            if g.numa_node.is_none() {
                unavailable.push(format!("gpu{} numa node: not reported", g.index));
            }
        }
        // As the real backend reports a GPU that NVML lists but cannot hand out.
        let lost_gpus: Vec<LostGpu> = self
            .faults_of(FaultKind::GpuLost)
            .map(|f| LostGpu::unlisted(f.gpu.unwrap_or(node.gpu.count - 1) as u32))
            .collect();
        if self.present.is_empty() && !lost_gpus.is_empty() {
            // The real backend cannot open such a node either.
            return Err(HwError::Unavailable {
                what: "a GPU".into(),
                detail: format!(
                    "all {} GPUs of the simulated node fell off the bus (gpu-lost)",
                    node.gpu.count
                ),
            });
        }
        let fabric = self.sim_fabric(&gpus, false);
        let daemon = self.faults_of(FaultKind::MpsDaemon).next().is_some();
        let mps = Some(Mps {
            pipe_dir: crate::platform::mps::DEFAULT_PIPE_DIR.into(),
            socket: daemon,
            pid: daemon.then_some(MPS_DAEMON_PID),
        });
        Ok(Inventory {
            fabric,
            lost_gpus,
            mps,
            hostname: node.hostname.clone(),
            driver_version: (!self.hides_driver_version()).then(|| node.driver_version.clone()),
            cuda_driver_version: Some(node.cuda_driver_version.clone()),
            nvml_version: Some(format!("sim.{}", node.driver_version)),
            gpus,
            pairs,
            nvswitches: Some(if node.links.nvswitch {
                node.links.nvswitches
            } else {
                0
            }),
            virtualization: Virtualization {
                mode,
                hypervisor: node.virtualization.hypervisor.clone(),
                witnesses,
                iommu_groups: node.virtualization.iommu_groups,
                acs_enabled_bridges: vec![],
            },
            unavailable,
        })
    }

    fn host_copy(
        &mut self,
        gpu: usize,
        dir: HostDir,
        _bytes: u64,
        _warmup: u32,
        iters: u32,
    ) -> Result<Samples, HwError> {
        self.check_gpu(gpu)?;
        let key = self.begin(format!("host {dir:?} {gpu}"));
        let p = &self.node.perf;
        let base = match dir {
            HostDir::H2d => p.h2d_gbps,
            HostDir::D2h => p.d2h_gbps,
            HostDir::Bidir => p.bidir_gbps,
        };
        let mean = base * self.host_factor(gpu);
        Ok(Samples {
            values: self.samples(&key, mean, iters),
            verified: Some(!self.host_copy_corrupt(gpu)),
            timing: None,
            host_memory: None,
        })
    }

    fn host_copy_all(
        &mut self,
        dir: HostDir,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<Vec<Samples>, HwError> {
        let n = self.n();
        let key = self.begin(format!("host-all {dir:?}"));
        let mut each: Vec<f64> = (0..n)
            .map(|i| {
                let p = &self.node.perf;
                let base = match dir {
                    HostDir::H2d => p.h2d_gbps,
                    HostDir::D2h => p.d2h_gbps,
                    HostDir::Bidir => p.bidir_gbps,
                };
                base * self.host_factor(i)
            })
            .collect();
        let agg = self.node.perf.host_aggregate_gbps;
        let total: f64 = each.iter().sum();
        if agg > 0.0 && total > agg {
            each.iter_mut().for_each(|x| *x *= agg / total);
        }
        let _ = (bytes, warmup);
        Ok(each
            .iter()
            .enumerate()
            .map(|(i, m)| Samples {
                values: self.samples(&format!("{key} {i}"), *m, iters),
                verified: Some(!self.host_copy_corrupt(i)),
                timing: None,
                host_memory: None,
            })
            .collect())
    }

    fn device_copy(
        &mut self,
        gpu: usize,
        _bytes: u64,
        _warmup: u32,
        iters: u32,
    ) -> Result<Samples, HwError> {
        self.check_gpu(gpu)?;
        let key = self.begin(format!("d2d {gpu}"));
        Ok(Samples {
            values: self.samples(&key, self.node.perf.device_copy_gbps, iters),
            verified: Some(!self.host_copy_corrupt(gpu)),
            timing: None,
            host_memory: None,
        })
    }

    fn p2p_copy(
        &mut self,
        src: usize,
        dst: usize,
        mode: P2pMode,
        _bytes: u64,
        _warmup: u32,
        iters: u32,
    ) -> Result<P2pSample, HwError> {
        self.check_gpu(src)?;
        self.check_gpu(dst)?;
        let key = self.begin(format!("p2p {mode:?} {src} {dst}"));
        let (one, both) = self.pair_gbps(src, dst, true);
        let mean = match mode {
            P2pMode::Read => one,
            P2pMode::Write => one * 0.995,
            P2pMode::Bidir => both,
        };
        Ok(P2pSample {
            gbps: Samples {
                values: self.samples(&key, mean, iters),
                verified: Some(!self.pair_copy_corrupt(src, dst)),
                timing: None,
                host_memory: None,
            },
            peer_access: self.p2p_enabled(src, dst),
        })
    }

    fn p2p_latency(&mut self, src: usize, dst: usize, iters: u32) -> Result<Samples, HwError> {
        self.check_gpu(src)?;
        self.check_gpu(dst)?;
        let key = self.begin(format!("lat {src} {dst}"));
        let p = &self.node.perf;
        let mean = if self.p2p_enabled(src, dst) {
            match self.pcie_class(src, dst) {
                Some(c) if self.pair_links_nominal(src, dst) == 0 => p
                    .p2p_latency_us_by_path
                    .get(&c)
                    .copied()
                    .unwrap_or(p.p2p_latency_us),
                _ => p.p2p_latency_us,
            }
        } else {
            p.staged_latency_us
        };
        Ok(Samples {
            values: self.samples(&key, mean, iters.min(100)),
            // As the CUDA code does, the transfers' data is checked.
            verified: Some(!self.pair_copy_corrupt(src, dst)),
            timing: None,
            host_memory: None,
        })
    }

    fn collective(
        &mut self,
        op: CollectiveOp,
        bytes: u64,
        _warmup: u32,
        iters: u32,
    ) -> Result<CollectiveSample, HwError> {
        Ok(self.coll_sample(op, bytes, iters, false))
    }

    fn collective_no_nvls(
        &mut self,
        op: CollectiveOp,
        sizes: &[u64],
        _warmup: u32,
        iters: u32,
    ) -> Result<Vec<CollectiveSample>, HwError> {
        Ok(sizes
            .iter()
            .map(|&s| self.coll_sample(op, s, iters, true))
            .collect())
    }

    fn gemm(
        &mut self,
        gpu: usize,
        precision: GemmPrecision,
        n: u64,
        _warmup: u32,
        iters: u32,
    ) -> Result<GemmSample, HwError> {
        self.check_gpu(gpu)?;
        let peak = self.gemm_peak(precision)?;
        let key = self.begin(format!("gemm {precision} {gpu}"));
        let rate = self.gemm_rate(gpu, peak, n);
        let corrupt = self
            .faults_of(FaultKind::ComputeCorrupt)
            .any(|f| f.gpu.unwrap_or(0) == gpu);
        Ok(GemmSample {
            tflops: self.samples(&key, rate, iters),
            elements_checked: n * n,
            // One wrong column, as a broken tensor core tile would leave.
            wrong_elements: if corrupt { n } else { 0 },
            timing: None,
        })
    }

    fn sustained_gemm(
        &mut self,
        precision: GemmPrecision,
        n: u64,
        seconds: f64,
        sample_ms: u32,
    ) -> Result<Vec<SustainedRun>, HwError> {
        let peak = self.gemm_peak(precision)?;
        let windows =
            ((seconds * 1000.0 / f64::from(sample_ms.max(1))).ceil() as usize).clamp(1, 100_000);
        let gpu = self.node.gpu.clone();
        // At its power cap a healthy GPU computes and clocks below its burst figures.
        let kept = self.node.perf.sustained_rate_fraction.unwrap_or(1.0);
        let clock = self
            .node
            .perf
            .sustained_sm_clock_mhz
            .unwrap_or(gpu.sm_clock_max_mhz);
        let mut out = Vec::new();
        for g in 0..self.n() {
            let key = self.begin(format!("sustained {precision} {g}"));
            let rate = self.gemm_rate(g, peak, n);
            // Thermal slowdown sets in once the GPU has heated (after 40% of the run); before,
            // the GPU computes at its full rate (compute_factor includes the slowdown).
            let thermal = self
                .faults_of(FaultKind::ThermalThrottle)
                .any(|f| f.gpu.unwrap_or(0) == g);
            let onset = windows * 2 / 5;
            let power_share = self
                .faults_of(FaultKind::PowerLimited)
                .find(|f| f.gpu.unwrap_or(0) == g)
                .map(|f| f.factor.unwrap_or(0.6));
            // A GPU held below its power target computes and clocks in proportion.
            let power_factor = power_share.map_or(1.0, |s| (s / 0.97).min(1.0));
            let noise = self.samples(&key, 1.0, windows.min(200) as u32);
            let corrupt = self
                .faults_of(FaultKind::ComputeCorrupt)
                .any(|f| f.gpu.unwrap_or(0) == g);
            let mut tflops = Vec::with_capacity(windows);
            let mut samples = Vec::with_capacity(windows);
            for w in 0..windows {
                let hot = thermal && w >= onset;
                let slow = if thermal && !hot {
                    1.0 / THERMAL_SLOWDOWN_FACTOR
                } else {
                    1.0
                };
                let z = noise[w % noise.len()];
                tflops.push(rate * kept * slow * power_factor * z);
                let heat = 1.0 - (-(w as f64 + 1.0) / (windows as f64 / 4.0)).exp();
                let top = if thermal { 92.0 } else { 72.0 };
                samples.push(crate::backend::LoadSample {
                    t_s: (w + 1) as f64 * f64::from(sample_ms) / 1000.0,
                    sm_clock_mhz: Some(
                        (f64::from(clock)
                            * power_factor
                            * if hot { THERMAL_SLOWDOWN_FACTOR } else { 1.0 })
                            as u32,
                    ),
                    power_w: Some(gpu.power_limit_w * power_share.unwrap_or(0.97) * z),
                    temperature_c: Some(gpu.temperature_c + (top - gpu.temperature_c) * heat),
                    // At full load a healthy GPU sits at its power cap.
                    throttle: Some(if hot {
                        vec!["hw_thermal_slowdown".to_string()]
                    } else if power_share.is_none() {
                        vec!["sw_power_cap".to_string()]
                    } else {
                        vec![]
                    }),
                });
            }
            out.push(SustainedRun {
                tflops,
                samples,
                power_limit_w: Some(gpu.power_limit_w),
                elements_checked: n * n,
                wrong_elements: if corrupt { n } else { 0 },
            });
        }
        Ok(out)
    }

    fn training(&mut self, cfg: &crate::suite::TrainingCheck) -> Result<TrainingRun, HwError> {
        self.train_data_parallel(cfg)
    }

    fn training_method(
        &mut self,
        cfg: &crate::suite::TrainingCheck,
        p: crate::training::partition::Partition,
    ) -> Result<MethodRun, HwError> {
        self.train_partitioned(cfg, p)
    }
}

/// [`hide`], for the health check's tests.
#[cfg(test)]
pub(crate) fn hide_for_tests(g: &mut Gpu, r: Reading) {
    hide(g, r)
}

/// Make a GPU's reading unread, as a platform that does not give it leaves it (faults included:
/// what cannot be read cannot show a fault either).
fn hide(g: &mut Gpu, r: Reading) {
    match r {
        Reading::DriverVersion => {}
        Reading::EccMode => g.ecc_enabled = None,
        Reading::EccErrors => g.ecc = EccCounts::default(),
        Reading::RemappedRows => {
            g.remapped_rows = None;
            g.retired_pages = None;
        }
        Reading::Xids => g.xids.clear(),
        // Only the XIDs of the run itself stay: the simulated node logs none before it.
        Reading::XidHistory => g.xids.retain(|x| x.age_s.is_none_or(|a| a <= 0.0)),
        Reading::PcieReplays => g.pcie.replay_counter = None,
        Reading::NvlinkErrors => g
            .nvlinks
            .iter_mut()
            .for_each(|l| l.errors = NvLinkErrors::default()),
        Reading::ThrottleReasons => g.throttle_reasons.clear(),
        Reading::Temperature => g.temperature_c = None,
        Reading::Vbios => g.vbios = None,
        // The memory in use stays: it is what shows a process the list does not.
        Reading::Processes => g.processes = None,
    }
    // Fields that cannot be None say it in the list.
    if matches!(
        r,
        Reading::Xids | Reading::XidHistory | Reading::ThrottleReasons
    ) && !g.unavailable.contains(&r)
    {
        g.unavailable.push(r);
    }
}

/// The fraction of the bf16 GEMM rate a bf16 MLP training step reaches, as a whole, measured:
/// on the lent H200 (2026-12-04) nodecert's bf16 step of the anchor MLP took a median 2.65 ms,
/// 6 x 21.0M parameters x 8192 samples in 2.65 ms = 390 TFLOP/s, 0.47 of the 832.0 TFLOP/s its
/// bf16 GEMM measured at 8192^3 there (`perf.bf16_tflops`). The rest of a step: the thin
/// products of the input and the 10-class output layers, and memory-bound kernels (bias and
/// ReLU, softmax, the bf16 conversions, the update) that take about as long as in fp32, hidden
/// behind fp32's 20 ms of GEMMs and a large share of bf16's.
pub const BF16_MLP_STEP_EFFICIENCY: f64 = 0.47;

/// The MPS control daemon's PID where the mps-daemon fault runs one.
pub const MPS_DAEMON_PID: u32 = 2727;

/// The process a busy-gpu fault puts on its GPU: its PID and the memory it holds.
pub const BUSY_PID: u32 = 4242;
pub const BUSY_MEMORY: u64 = 30 << 30;

/// The process a busy-gpu fault puts on its GPU.
fn busy_process() -> GpuProcess {
    GpuProcess {
        pid: BUSY_PID,
        name: Some("python3".into()),
        memory_bytes: Some(BUSY_MEMORY),
    }
}

/// The process a process-starts fault starts on its GPU during the run.
pub const STARTED_PID: u32 = 5151;
pub const STARTED_MEMORY: u64 = 20 << 30;

impl SimBackend {
    /// The GEMM rate GPU `i` reaches (after faults), as a share of the node's figure: slow-compute
    /// and busy-gpu by their factors, a GPU in hardware thermal slowdown to 0.7 of its rate.
    fn compute_factor(&self, i: usize) -> f64 {
        let mut f = 1.0;
        for x in self.faults_of(FaultKind::SlowCompute) {
            if x.gpu.unwrap_or(0) == i {
                f *= x.factor.unwrap_or(0.35);
            }
        }
        for x in self
            .faults_of(FaultKind::BusyGpu)
            .chain(self.faults_of(FaultKind::ProcessStarts))
        {
            if x.gpu.unwrap_or(0) == i {
                f *= x.factor.unwrap_or(0.5);
            }
        }
        if self
            .faults_of(FaultKind::ThermalThrottle)
            .any(|x| x.gpu.unwrap_or(0) == i)
        {
            f *= THERMAL_SLOWDOWN_FACTOR;
        }
        f
    }

    /// The rate GPU `gpu` multiplies matrices of side `n` at, TFLOP/s, from the node's `peak`:
    /// the arithmetic at the GPU's share of it, plus a fixed cost per GEMM.
    fn gemm_rate(&self, gpu: usize, peak: f64, n: u64) -> f64 {
        let flops = 2.0 * (n as f64).powi(3);
        let time_s = flops / (peak * self.compute_factor(gpu) * 1e12) + GEMM_OVERHEAD_US * 1e-6;
        flops / time_s / 1e12
    }

    /// The node's dense GEMM rate in `p`, TFLOP/s, or why the simulated node has none.
    fn gemm_peak(&self, p: GemmPrecision) -> Result<f64, HwError> {
        let gpu = &self.node.gpu;
        let need = p.min_compute_capability();
        if let Some(cc) = gpu.compute_capability.filter(|cc| *cc < need) {
            return Err(HwError::NotSupported(format!(
                "{p} GEMMs need compute capability {}.{} or newer; the {} is {}.{}",
                need.0, need.1, gpu.name, cc.0, cc.1
            )));
        }
        let perf = &self.node.perf;
        let rate = match p {
            GemmPrecision::Fp32 => Some(perf.fp32_tflops),
            GemmPrecision::Tf32 => perf.tf32_tflops,
            GemmPrecision::Bf16 => perf.bf16_tflops,
            GemmPrecision::Fp8 => perf.fp8_tflops,
        };
        rate.ok_or_else(|| {
            HwError::NotSupported(format!(
                "the simulated node {} does not model {p} GEMMs (no perf.{})",
                self.node.name,
                p.metric()
            ))
        })
    }

    /// The rate a bf16 training step runs at on this node, TFLOP/s; refused as on a real GPU when
    /// the node's GPUs have no bf16 tensor cores.
    fn bf16_step_tflops(&self, cfg: &crate::suite::TrainingCheck) -> Result<f64, HwError> {
        if let Some(cc) = self.node.gpu.compute_capability {
            let m = crate::training::plan::Model::main(cfg, self.n())?;
            crate::training::plan::check_arch(&m, cc, &format!("GPU 0 ({})", self.node.gpu.name))?;
        }
        match self.node.perf.bf16_tflops {
            Some(t) if t.is_finite() && t > 0.0 => Ok(t * BF16_MLP_STEP_EFFICIENCY),
            _ => Err(HwError::NotSupported(format!(
                "the simulated node {} does not model bf16 training: its description gives no \
                 perf.bf16_tflops (the GPU's dense bf16 GEMM rate)",
                self.node.name
            ))),
        }
    }
}

fn sim_uuid(node: &str, i: usize) -> String {
    let d = Sha256::digest(format!("{node}/{i}"));
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    crate::backend::real::order::uuid_text(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_node_loads() {
        for (name, _) in EMBEDDED {
            let n = load_node(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&n.name, name);
        }
    }

    /// `nodecert list` says what each fault does: each in words of its own.
    #[test]
    fn each_fault_is_described_in_words_of_its_own() {
        let mut seen = std::collections::BTreeSet::new();
        for k in FaultKind::ALL {
            let d = k.describe();
            assert!(d.split_whitespace().count() >= 4, "{}: {d:?}", k.name());
            assert!(seen.insert(d), "{} says what another fault says", k.name());
        }
        assert!(FaultKind::BusyGpu
            .describe()
            .contains("another process holds a GPU"));
    }

    /// busy-gpu puts one process on its GPU only, holding the memory in use, and leaves
    /// nodecert its factor of that GPU's GEMM rate (half by default); a healthy GPU lists none.
    #[test]
    fn a_busy_gpu_lists_its_process_and_keeps_a_share_of_its_rate() {
        let faults = vec![Fault::parse("busy-gpu:gpu=2").unwrap()];
        let mut b = SimBackend::new(load_node("h100-sxm-8").unwrap(), faults, 1).unwrap();
        let inv = b.inventory().unwrap();
        let job = GpuProcess {
            pid: 4242,
            name: Some("python3".into()),
            memory_bytes: Some(30 << 30),
        };
        assert_eq!(inv.gpus[2].processes, Some(vec![job]));
        assert_eq!(inv.gpus[2].memory_used_bytes, Some(30 << 30));
        for g in [0, 1, 3] {
            assert_eq!(inv.gpus[g].processes, Some(vec![]));
            assert_eq!(inv.gpus[g].memory_used_bytes, Some(0));
        }
        assert_eq!(b.compute_factor(2), 0.5);
        assert_eq!(b.compute_factor(1), 1.0);
        let faults = vec![Fault::parse("busy-gpu:gpu=1,factor=0.25").unwrap()];
        let b = SimBackend::new(load_node("h100-sxm-8").unwrap(), faults, 1).unwrap();
        assert_eq!(b.compute_factor(1), 0.25);
    }

    /// process-starts' process is not in the inventory (read before the run) but is in every
    /// list read after it, on its GPU only, beside busy-gpu's; it takes its share of the GPU.
    /// A GPU whose list the node does not give reads None.
    #[test]
    fn a_process_that_starts_shows_only_after_the_inventory() {
        let faults = ["process-starts:gpu=2", "busy-gpu:gpu=2"]
            .map(|f| Fault::parse(f).unwrap())
            .to_vec();
        let mut b = SimBackend::new(load_node("h100-sxm-8").unwrap(), faults, 1).unwrap();
        let inv = b.inventory().unwrap();
        let pids = |l: &Option<Vec<GpuProcess>>| -> Vec<u32> {
            l.iter().flatten().map(|p| p.pid).collect()
        };
        assert_eq!(pids(&inv.gpus[2].processes), [BUSY_PID]);
        let now = b.gpu_processes().unwrap();
        assert_eq!(now.len(), 8);
        assert_eq!(pids(&now[2]), [BUSY_PID, STARTED_PID]);
        assert_eq!(
            now[2].as_ref().unwrap()[1].memory_bytes,
            Some(STARTED_MEMORY)
        );
        assert!([0, 1, 3, 7].iter().all(|&g| now[g] == Some(vec![])));
        assert_eq!(b.compute_factor(2), 0.25);
        let mut node = load_node("h100-sxm-8").unwrap();
        node.unavailable = vec![SimUnavailable {
            readings: vec![Reading::Processes],
            gpus: vec![2],
        }];
        let faults = vec![Fault::parse("process-starts:gpu=2").unwrap()];
        let mut b = SimBackend::new(node, faults, 1).unwrap();
        let now = b.gpu_processes().unwrap();
        assert_eq!((now[2].clone(), now[1].clone()), (None, Some(vec![])));
    }

    /// The under-load faults are not in the inventory (read before the run) but in every
    /// reading of the counters after it, on their GPU only; a counter the node hides stays
    /// unread, fault or not.
    #[test]
    fn errors_under_load_show_only_after_the_inventory() {
        let faults = ["ecc-under-load:gpu=1", "link-errors-under-load:gpu=6"]
            .map(|f| Fault::parse(f).unwrap())
            .to_vec();
        let mut b = SimBackend::new(load_node("h100-sxm-8").unwrap(), faults.clone(), 1).unwrap();
        let inv = b.inventory().unwrap();
        let start: Vec<ErrorCounts> = inv.gpus.iter().map(ErrorCounts::of).collect();
        assert_eq!(start[1].ecc.volatile_uncorrected, Some(0));
        assert_eq!(start[6].pcie_replays, Some(0));
        let now = b.error_counts().unwrap();
        let now: Vec<ErrorCounts> = now.into_iter().map(Option::unwrap).collect();
        assert_eq!(now[1].ecc.volatile_uncorrected, Some(1));
        assert_eq!(now[1].ecc.aggregate_uncorrected, Some(1));
        assert!(now[1].remapped_rows.as_ref().unwrap().pending);
        assert_eq!(now[6].pcie_replays, Some(200));
        assert_eq!(now[6].nvlinks[0].1.crc_flit, Some(500));
        assert_eq!(now[6].nvlinks[1].1.crc_flit, Some(0));
        for g in [0, 2, 7] {
            assert_eq!(now[g], start[g], "GPU {g}");
        }
        let mut node = load_node("h100-sxm-8").unwrap();
        node.unavailable = vec![SimUnavailable {
            readings: vec![Reading::EccErrors, Reading::PcieReplays],
            gpus: vec![1, 6],
        }];
        let mut b = SimBackend::new(node, faults, 1).unwrap();
        let now = b.error_counts().unwrap();
        let (g1, g6) = (now[1].as_ref().unwrap(), now[6].as_ref().unwrap());
        assert_eq!((g1.ecc.volatile_uncorrected, g6.pcie_replays), (None, None));
        assert_eq!(g6.nvlinks[0].1.crc_flit, Some(500));
    }

    /// mig-pending sets its GPU's MIG mode to turn on at the next reset, that GPU only; the
    /// run's topology warns of it and the node still passes.
    #[test]
    fn mig_pending_marks_its_gpu_only_and_topology_warns() {
        let faults = vec![Fault::parse("mig-pending:gpu=4").unwrap()];
        let mut b = SimBackend::new(load_node("h100-sxm-8").unwrap(), faults, 1).unwrap();
        let inv = b.inventory().unwrap();
        let pending: Vec<Option<bool>> = inv.gpus.iter().map(|g| g.mig_pending).collect();
        let mut want = vec![None; 8];
        want[4] = Some(true);
        assert_eq!(pending, want);
        assert!(inv.gpus.iter().all(|g| g.mig_enabled == Some(false)));
        let ev = crate::testutil::simulated("h100-sxm-8", &["mig-pending:gpu=4"]);
        let topo = ev.checks.iter().find(|c| c.kind == "topology").unwrap();
        assert_eq!(topo.status, crate::evidence::Status::Warn, "{topo:#?}");
        assert_eq!(ev.verdict, crate::evidence::Verdict::Pass);
    }

    #[test]
    fn nvls_follows_the_node_key_and_the_fault() {
        let nvls = |name: &str, faults: &[&str]| -> Vec<Nvls> {
            let faults = faults.iter().map(|f| Fault::parse(f).unwrap()).collect();
            let mut b = SimBackend::new(load_node(name).unwrap(), faults, 1).unwrap();
            b.inventory().unwrap().gpus.iter().map(|g| g.nvls).collect()
        };
        let on = Nvls {
            multicast: Some(true),
            fabric: Some(FabricState::Completed),
        };
        let fm_down = Nvls {
            multicast: Some(false),
            fabric: Some(FabricState::NotStarted),
        };
        for name in ["h100-sxm-8", "h200-sxm-8"] {
            assert_eq!(nvls(name, &[]), vec![on; 8], "{name}");
            assert_eq!(
                nvls(name, &["nvls-unavailable"]),
                vec![fm_down; 8],
                "{name}"
            );
        }
        // gpu=N: that GPU only.
        let one = nvls("h100-sxm-8", &["nvls-unavailable:gpu=3"]);
        assert_eq!(one[3], fm_down);
        assert!(one.iter().enumerate().all(|(i, n)| i == 3 || *n == on));
        // Default off: every node file that does not say `nvls = true` (A100, L40S, a VM).
        // (The all_reduce figure without NVLS is judged in nvls_unavailable_falls_back_to_ring.)
        for name in ["a100-sxm-80gb-8", "l40s-pcie-4", "h200-vm-1"] {
            assert!(
                nvls(name, &[]).iter().all(|n| n.multicast == Some(false)),
                "{name}"
            );
        }
    }

    #[test]
    fn nvls_unavailable_falls_back_to_ring() {
        let busbw = |name: &str, faults: &[&str], op: CollectiveOp| -> f64 {
            let faults = faults.iter().map(|f| Fault::parse(f).unwrap()).collect();
            let mut node = load_node(name).unwrap();
            node.perf.noise_pct = 0.0;
            let mut b = SimBackend::new(node, faults, 1).unwrap();
            let bytes = 8u64 << 30;
            let r = b.collective(op, bytes, 1, 3).unwrap();
            crate::checks::collective::busbw_gbps(op, r.ranks, r.bytes, r.time_us[0])
        };
        let ar = CollectiveOp::AllReduce;
        for name in ["h100-sxm-8", "h200-sxm-8"] {
            let with = busbw(name, &[], ar);
            let without = busbw(name, &["nvls-unavailable"], ar);
            let one_gpu = busbw(name, &["nvls-unavailable:gpu=5"], ar);
            assert!((470.0..480.0).contains(&with), "{name}: {with}");
            assert!((360.0..368.0).contains(&without), "{name}: {without}");
            assert_eq!(one_gpu, without, "{name}: one GPU without NVLS is enough");
            // Only all_reduce uses NVLS here.
            let ag = CollectiveOp::AllGather;
            assert_eq!(busbw(name, &[], ag), busbw(name, &["nvls-unavailable"], ag));
        }
        // A node without NVLS has nothing to lose.
        let a100 = busbw("a100-sxm-80gb-8", &[], ar);
        assert_eq!(a100, busbw("a100-sxm-80gb-8", &["nvls-unavailable"], ar));
    }

    #[test]
    fn numa_sockets_give_each_gpu_its_socket() {
        let sockets = |node: &SimNode| -> Vec<Option<u32>> {
            let mut b = SimBackend::new(node.clone(), vec![], 1).unwrap();
            let inv = b.inventory().unwrap();
            inv.gpus.iter().map(|g| g.cpu_socket).collect()
        };
        let mut node = load_node("a100-sxm-80gb-8").unwrap();
        assert_eq!(sockets(&node), [0, 0, 0, 0, 1, 1, 1, 1].map(Some));
        // Without numa_sockets each NUMA node is a socket of its own.
        node.gpu.numa_sockets.clear();
        assert_eq!(sockets(&node), [3, 3, 1, 1, 7, 7, 5, 5].map(Some));
        // A list too short for the GPUs' nodes is refused, at its key.
        node.gpu.numa_sockets = vec![0, 0, 0, 0];
        let (at, msg) = node.validate().unwrap_err();
        assert_eq!(at, "gpu.numa_sockets");
        assert!(msg.contains("a GPU is on node 7"), "{msg}");
    }

    #[test]
    fn faults_parse() {
        let f = Fault::parse("nvlink-down:gpu=2,peer=5").unwrap();
        assert_eq!(
            (f.kind, f.gpu, f.peer),
            (FaultKind::NvlinkDown, Some(2), Some(5))
        );
        assert_eq!(f.label(), "nvlink-down:gpu=2,peer=5");
        assert!(Fault::parse("nvlink-up").is_err());
        assert!(Fault::parse("slow-collective:op=all_sum").is_err());
        assert!(Fault::parse("slow-gpu-pair:gpu=x").is_err());
    }

    #[test]
    fn a_transient_slow_fault_shows_on_its_first_measurements_only() {
        let f = Fault::parse("slow-host-bandwidth:gpu=1,factor=0.5,attempts=2").unwrap();
        assert_eq!(f.label(), "slow-host-bandwidth:gpu=1,factor=0.5,attempts=2");
        let mut b = SimBackend::new(load_node("l40s-pcie-4").unwrap(), vec![f], 1).unwrap();
        let mut h2d = || {
            crate::evidence::median(&b.host_copy(1, HostDir::H2d, 1 << 20, 0, 9).unwrap().values)
        };
        let (first, second, third) = (h2d(), h2d(), h2d());
        let healthy = load_node("l40s-pcie-4").unwrap().perf.h2d_gbps;
        assert!(
            first < 0.6 * healthy && second < 0.6 * healthy,
            "{first} {second}"
        );
        assert!(third > 0.9 * healthy, "{third}");
        // A persistent fault shows every time.
        let f = Fault::parse("slow-host-bandwidth:gpu=1,factor=0.5").unwrap();
        let mut b = SimBackend::new(load_node("l40s-pcie-4").unwrap(), vec![f], 1).unwrap();
        for _ in 0..4 {
            let v = crate::evidence::median(
                &b.host_copy(1, HostDir::H2d, 1 << 20, 0, 9).unwrap().values,
            );
            assert!(v < 0.6 * healthy, "{v}");
        }
    }

    #[test]
    fn attempts_is_for_slow_faults_and_at_least_one() {
        for ok in [
            "slow-gpu-pair:gpu=0,peer=1,attempts=1",
            "slow-collective:op=all_gather,attempts=3",
        ] {
            assert!(Fault::parse(ok).is_ok(), "{ok}");
        }
        let e = Fault::parse("corrupt-copy:gpu=0,attempts=1").unwrap_err();
        assert!(
            e.contains("attempts applies to the slow faults only"),
            "{e}"
        );
        let e = Fault::parse("slow-gpu-pair:attempts=0").unwrap_err();
        assert!(e.contains("attempts must be at least 1"), "{e}");
        assert!(Fault::parse("slow-gpu-pair:attempts=-1").is_err());
    }

    #[test]
    fn same_seed_same_numbers() {
        let node = load_node("h100-sxm-8").unwrap();
        let mut a = SimBackend::new(node.clone(), vec![], 7).unwrap();
        let mut b = SimBackend::new(node.clone(), vec![], 7).unwrap();
        let mut c = SimBackend::new(node, vec![], 8).unwrap();
        let x = a.host_copy(3, HostDir::H2d, 1, 1, 10).unwrap();
        assert_eq!(x, b.host_copy(3, HostDir::H2d, 1, 1, 10).unwrap());
        assert_ne!(x, c.host_copy(3, HostDir::H2d, 1, 1, 10).unwrap());
    }

    #[test]
    fn bf16_training_runs_at_half_the_bf16_gemm_rate_and_needs_ampere() {
        use crate::suite::{Precision, TrainingCheck};
        let mut cfg: TrainingCheck = toml::from_str("steps = 10").unwrap();
        let node = load_node("h200-vm-1").unwrap();
        assert_eq!(node.gpu.compute_capability, Some((9, 0)));
        let run = |node: &SimNode, cfg: &TrainingCheck| {
            SimBackend::new(node.clone(), vec![], 1)
                .unwrap()
                .training(cfg)
        };
        let fp32 = run(&node, &cfg).unwrap();
        cfg.precision = Precision::Bf16;
        let bf16 = run(&node, &cfg).unwrap();
        assert_eq!(
            (fp32.precision, bf16.precision),
            (Precision::Fp32, Precision::Bf16)
        );
        // The anchor: 6 x 21.0M parameters x 8192 samples at 832.0 x 0.47 TFLOP/s, which is the
        // 2.65 ms the lent H200 took.
        let expect = 6.0 * 21_020_682.0 * 8192.0 / (832.0e12 * BF16_MLP_STEP_EFFICIENCY) * 1e3;
        assert!((expect / 2.65 - 1.0).abs() < 0.01, "{expect}");
        let med = crate::evidence::median(&bf16.step_ms);
        assert!(
            (med / expect - 1.0).abs() < 0.05,
            "{med} ms, expected {expect}"
        );
        let speedup = crate::evidence::median(&fp32.step_ms) / med;
        assert!((7.0..8.5).contains(&speedup), "{speedup}");
        // The same fp32 gradients are all-reduced.
        assert_eq!(bf16.gradient_bytes, fp32.gradient_bytes);
        // A V100 (sm_70) has no bf16 tensor cores: refused by name, as on real hardware.
        let mut volta = node.clone();
        volta.gpu.compute_capability = Some((7, 0));
        match run(&volta, &cfg) {
            Err(HwError::NotSupported(why)) => {
                assert!(why.contains("compute capability 7.0 (sm_70)"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        cfg.precision = Precision::Fp32;
        assert!(run(&volta, &cfg).is_ok());
        // A node description without a bf16 rate does not invent one.
        let mut unknown = node;
        unknown.perf.bf16_tflops = None;
        cfg.precision = Precision::Bf16;
        match run(&unknown, &cfg) {
            Err(HwError::NotSupported(why)) => assert!(why.contains("perf.bf16_tflops"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn out_of_range_fault_is_rejected() {
        let node = load_node("h200-vm-1").unwrap();
        assert!(SimBackend::new(
            node,
            vec![Fault::parse("slow-gpu-pair:gpu=0,peer=1").unwrap()],
            1
        )
        .is_err());
    }

    /// A 4-GPU PCIe box written as a real one is: irregular addresses, per-pair paths, and a
    /// figure per path class.
    fn pcie_box() -> SimNode {
        let mut node = load_node("l40s-pcie-4").unwrap();
        node.gpu.first_bus = None;
        node.gpu.bus_stride = None;
        node.gpu.bus_ids = [
            "0000:1B:00.0",
            "00000000:3d:00.0",
            "0000:89:00.0",
            "0000:b1:00.0",
        ]
        .map(String::from)
        .to_vec();
        node.gpu.numa_nodes = vec![0, 0, 1, 1];
        node.gpu.numa_cpus = vec!["0-31".into(), "32-63".into()];
        node.links.pcie_same_numa = "PXB".into();
        node.links.pcie_cross_numa = "SYS".into();
        node.links.pcie_paths = vec![crate::suite::PairPath {
            a: 3,
            b: 2,
            path: PciePath::Pix,
        }];
        node.perf.noise_pct = 0.0;
        node.perf.p2p_pcie_gbps_by_path = [(PciePath::Pix, 26.0), (PciePath::Sys, 19.0)].into();
        node.perf.p2p_pcie_bidir_gbps_by_path = [(PciePath::Pix, 50.0)].into();
        node.perf.p2p_latency_us_by_path = [(PciePath::Sys, 14.0)].into();
        node.validate().unwrap();
        node
    }

    #[test]
    fn a_real_pcie_topology_can_be_written() {
        let node = pcie_box();
        let mut b = SimBackend::new(node.clone(), vec![], 1).unwrap();
        let inv = b.inventory().unwrap();
        let ids: Vec<&str> = inv.gpus.iter().map(|g| g.pci_bus_id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "0000:1b:00.0",
                "0000:3d:00.0",
                "0000:89:00.0",
                "0000:b1:00.0"
            ]
        );
        let path = |a: usize, b: usize| {
            inv.pairs
                .iter()
                .find(|p| (p.a, p.b) == (a, b))
                .and_then(|p| p.pcie_path.clone())
                .unwrap()
        };
        // Listed pair, same NUMA node, across NUMA nodes.
        assert_eq!(path(2, 3), "PIX");
        assert_eq!(path(0, 1), "PXB");
        assert_eq!(path(1, 2), "SYS");
        // Each class delivers its own figure; PXB is not listed and takes the single one.
        let mut read = |a: usize, c: usize, mode: P2pMode| {
            b.p2p_copy(a, c, mode, 1, 0, 3).unwrap().gbps.values[0]
        };
        assert_eq!(read(3, 2, P2pMode::Read), 26.0);
        assert_eq!(read(0, 1, P2pMode::Read), node.perf.p2p_pcie_gbps);
        assert_eq!(read(0, 3, P2pMode::Read), 19.0);
        assert_eq!(read(2, 3, P2pMode::Bidir), 50.0);
        assert_eq!(read(0, 3, P2pMode::Bidir), node.perf.p2p_pcie_bidir_gbps);
        let lat =
            |b: &mut SimBackend, x: usize, y: usize| b.p2p_latency(x, y, 3).unwrap().values[0];
        assert_eq!(lat(&mut b, 0, 2), 14.0);
        assert_eq!(lat(&mut b, 0, 1), node.perf.p2p_latency_us);
    }

    #[test]
    fn slower_path_classes_do_not_slow_a_healthy_collective_but_a_slow_pair_does() {
        let node = pcie_box();
        let healthy = SimBackend::new(node.clone(), vec![], 1).unwrap();
        let peak = node.perf.collective_busbw_gbps[&CollectiveOp::AllReduce];
        assert_eq!(healthy.coll_peak(CollectiveOp::AllReduce, false), peak);
        // A PIX pair at 60% of its 26 GB/s is still faster than SYS pairs, yet it is faulty.
        let slow = SimBackend::new(
            node,
            vec![Fault::parse("slow-gpu-pair:gpu=2,peer=3,factor=0.6").unwrap()],
            1,
        )
        .unwrap();
        let got = slow.coll_peak(CollectiveOp::AllReduce, false);
        assert!((got - peak * 0.6).abs() < 1e-9, "{got}");
    }

    #[test]
    fn bus_ids_are_checked() {
        let good = pcie_box();
        let check = |f: &dyn Fn(&mut SimNode)| {
            let mut n = good.clone();
            f(&mut n);
            n.validate().unwrap_err()
        };
        let (at, msg) = check(&|n| n.gpu.first_bus = Some(0x18));
        assert_eq!(
            (at.as_str(), msg.as_str()),
            (
                "gpu.bus_ids",
                "give bus_ids or first_bus and bus_stride, not both"
            )
        );
        let (at, msg) = check(&|n| n.gpu.bus_ids.truncate(3));
        assert_eq!(at, "gpu.bus_ids");
        assert!(msg.contains("lists 3 GPUs, gpu.count is 4"), "{msg}");
        for bad in [
            "0000:1b:00",
            "0000:1b:20.0",
            "0000:1b:00.8",
            "0000:1bb:00.0",
            "00:1b:00.0",
            "0000:1g:00.0",
            "+000:1b:00.0",
        ] {
            let (at, msg) = check(&|n| n.gpu.bus_ids[2] = bad.into());
            assert_eq!(at, "gpu.bus_ids[2]", "{bad}");
            assert!(msg.contains("is not a PCI address"), "{bad}: {msg}");
        }
        let (at, msg) = check(&|n| n.gpu.bus_ids[3] = "0000:1B:00.0".into());
        assert_eq!(at, "gpu.bus_ids[3]");
        assert!(
            msg.contains("GPU 3 has the address of GPU 0: 0000:1b:00.0"),
            "{msg}"
        );
        let (at, msg) = check(&|n| n.gpu.bus_ids.clear());
        assert_eq!(at, "gpu");
        assert!(
            msg.contains("bus_ids, or first_bus and bus_stride"),
            "{msg}"
        );
        let strided = |first: u32, stride: u32| {
            check(&|n| {
                n.gpu.bus_ids.clear();
                n.gpu.first_bus = Some(first);
                n.gpu.bus_stride = Some(stride);
            })
        };
        let (at, msg) = strided(0x100, 1);
        assert_eq!(at, "gpu.first_bus", "{msg}");
        assert!(msg.contains("first_bus is 0x100"), "{msg}");
        assert_eq!(strided(0x100, 0).0, "gpu.first_bus");
        assert_eq!(strided(0xfe, 1).0, "gpu.bus_stride");
        assert_eq!(strided(0x10, 0).0, "gpu.bus_stride");
    }
}
