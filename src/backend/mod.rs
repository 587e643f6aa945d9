//! The hardware boundary. Checks ask a [`Backend`] to measure; the real backend drives the GPUs
//! through NVML and CUDA, the simulated node computes the same measurements from a description.
//! Both return the same plain types, so everything downstream cannot tell them apart, except by
//! [`BackendInfo::simulated`], which is carried into the evidence and onto every page.

pub mod cuda;
pub mod gemm_data;
pub mod no_nvls;
pub mod real;
pub mod sim;
pub mod sim_nic;

use crate::error::HwError;
use crate::inventory::Inventory;
use crate::suite::{CollectiveOp, GemmPrecision, TrainingCheck};
use serde::{Deserialize, Serialize};

/// Direction of a host<->device copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostDir {
    H2d,
    D2h,
    /// H2D and D2H at once; the figure is the sum of both.
    Bidir,
}

/// Kind of peer copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum P2pMode {
    /// The destination GPU's copy engine reads from the source.
    Read,
    /// The source GPU's copy engine writes into the destination.
    Write,
    /// Both directions at once; the figure is the sum of both.
    Bidir,
}

/// Repeated timings of one operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Samples {
    /// One value per timed repetition, in the unit the call documents.
    pub values: Vec<f64>,
    /// Whether the data was checked after the copies and found right (None: not checked).
    pub verified: Option<bool>,
    /// How the samples were timed (None: not by CUDA events, e.g. computed by the simulator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
    /// For host copies: where the pinned host buffers were (None: not a host copy, or not
    /// known, e.g. simulated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_memory: Option<crate::platform::numa::HostPlacement>,
}

/// How a copy measurement's samples were timed on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    /// CUDA events around a batch of copies that a host-function gate held back until the whole
    /// batch was queued: launch overhead stays out (nvbandwidth holds the stream the same way,
    /// with a spin kernel).
    GatedEvents,
    /// CUDA events around a batch queued while the stream already runs: launch overhead is in
    /// the figure (negligible for large copies, an upper bound for latency). Used for staged
    /// peer copies, and for every copy after a gate stalled once.
    Events,
}

impl Timing {
    pub fn describe(self) -> &'static str {
        match self {
            Timing::GatedEvents => "CUDA events, batch held by a host-function gate",
            Timing::Events => "CUDA events, batch not gated (launch overhead included)",
        }
    }
}

/// Result of one peer copy measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct P2pSample {
    /// GB/s per repetition.
    pub gbps: Samples,
    /// Peer access was enabled; false means copies were staged through host memory.
    pub peer_access: bool,
}

/// Result of one collective at one message size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveSample {
    /// Time per operation, microseconds, one value per timed repetition.
    pub time_us: Vec<f64>,
    /// Elements checked after the last repetition, and how many were wrong (nccl-tests' #wrong).
    pub elements_checked: u64,
    pub wrong_elements: u64,
    /// Ranks taking part.
    pub ranks: usize,
    /// The bytes the operation really moved as nccl-tests counts them: the requested size,
    /// rounded down for all_gather, reduce_scatter and all_to_all to a whole 16-byte block per
    /// rank (see [`cuda::verify::layout`]). algbw and busbw divide this by the time.
    pub bytes: u64,
}

/// What a training run produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingRun {
    /// Mean loss per step (over all replicas).
    pub losses: Vec<f64>,
    /// Losses of the golden configuration (`golden_layers`, `golden_batch`, `golden_lr`, the
    /// first `golden_steps` steps) trained on the node; the check compares them with the CPU.
    pub golden_node_losses: Vec<f64>,
    /// SHA-256 of each replica's parameters at the end, one per GPU.
    pub replica_hashes: Vec<String>,
    /// Step time, milliseconds, per step (after warm-up).
    pub step_ms: Vec<f64>,
    /// Part of the step spent in gradient exchange that compute did not hide, milliseconds.
    pub exposed_comm_ms: Vec<f64>,
    /// Total gradient exchange time per step, milliseconds (overlapped or not).
    pub comm_ms: Vec<f64>,
    /// Per-GPU batch and number of GPUs.
    pub batch_per_gpu: usize,
    pub gpus: usize,
    /// Samples per second of the one-GPU run of the same model (for scaling efficiency).
    pub single_gpu_samples_per_s: Option<f64>,
    /// Gradient bytes exchanged per step.
    pub gradient_bytes: u64,
    /// The precision the run trained in (the golden configuration is always fp32).
    #[serde(default)]
    pub precision: crate::suite::Precision,
}

/// One partitioning of the reference run other than the data-parallel one
/// ([`crate::training::partition::Partition`]): tensor-parallel or hybrid, on every GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MethodRun {
    /// GPUs per tensor-parallel group and groups (data-parallel replicas of a group).
    pub tp: usize,
    pub dp: usize,
    /// Losses of the golden configuration trained partitioned the same way on the node; the
    /// check compares them with the CPU golden run.
    pub golden_node_losses: Vec<f64>,
    /// Per timed step, milliseconds: the step, the all-reduces in it (tensor-parallel and
    /// data-parallel together), and the part of them the step waited for.
    pub step_ms: Vec<f64>,
    pub comm_ms: Vec<f64>,
    pub exposed_comm_ms: Vec<f64>,
    /// Samples a step trains on, over all groups.
    pub samples_per_step: usize,
    /// The first disagreement between ranks that a correct run cannot show (a tensor-parallel
    /// group's loss sums, shards across groups, replicated tensors), in the golden run or the
    /// timed one; None when every rank agreed.
    pub inconsistency: Option<String>,
}

/// Result of one GEMM measurement on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmSample {
    /// TFLOP/s per timed repetition: 2·n³ / its time.
    pub tflops: Vec<f64>,
    /// Elements of the product checked against the exact result, and how many were wrong
    /// ([`gemm_data`]).
    pub elements_checked: u64,
    pub wrong_elements: u64,
    /// How the repetitions were timed (None: computed by the simulator).
    pub timing: Option<Timing>,
}

/// One reading of a GPU under sustained load; None where NVML did not give it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadSample {
    /// Seconds since the load started.
    pub t_s: f64,
    pub sm_clock_mhz: Option<u32>,
    pub power_w: Option<f64>,
    pub temperature_c: Option<f64>,
    /// Throttle reasons active (names as `crate::suite::THROTTLE_REASONS`); None: not read.
    pub throttle: Option<Vec<String>>,
}

/// One GPU's sustained load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SustainedRun {
    /// TFLOP/s of each window, in order.
    pub tflops: Vec<f64>,
    /// The readings taken meanwhile, in order.
    pub samples: Vec<LoadSample>,
    /// The GPU's enforced power limit, W; None where not read.
    pub power_limit_w: Option<f64>,
    /// The last product's check, as for [`GemmSample`].
    pub elements_checked: u64,
    pub wrong_elements: u64,
}

/// The size of NCCL's unique id (`ncclUniqueId`), in bytes.
pub const NCCL_ID_BYTES: usize = 128;

/// One NCCL communicator across nodes, as this node joins it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricComm {
    /// The unique id the communicator's first node made ([`Backend::fabric_id`]).
    pub id: Vec<u8>,
    /// The rank of this node's first GPU: the GPUs of the nodes before it.
    pub first_rank: usize,
    /// Every rank of the communicator: the GPUs of all its nodes.
    pub ranks: usize,
    /// How many nodes take part.
    pub nodes: usize,
}

/// What kind of backend produced the measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackendInfo {
    /// True for the simulated node: its figures are computed, not measured.
    pub simulated: bool,
    /// "simulated node h100-sxm-8 (seed 1)" or "nvml+cuda".
    pub name: String,
    /// Libraries used, with their paths and versions where known.
    pub libraries: Vec<LibraryInfo>,
    /// NCCL version, and the NCCL settings in effect ([`Backend::nccl_settings`]): the NCCL_*
    /// environment, then NCCL's configuration files' values, each followed by its file.
    pub nccl_version: Option<String>,
    pub nccl_env: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LibraryInfo {
    pub name: String,
    pub path: Option<String>,
    pub version: Option<String>,
}

/// One NCCL setting in effect: its name, its value, and the configuration file it comes from
/// (`None`: the environment, or nodecert's own record of a file it could not read).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NcclSetting {
    pub name: String,
    pub value: String,
    pub from: Option<std::path::PathBuf>,
}

impl NcclSetting {
    /// A setting of the environment.
    pub fn env(name: &str, value: &str) -> Self {
        NcclSetting {
            name: name.into(),
            value: value.into(),
            from: None,
        }
    }

    /// Its value as the evidence shows it: followed by its file where it comes from one.
    pub fn shown(&self) -> String {
        match &self.from {
            Some(f) => format!("{} (from {})", self.value, f.display()),
            None => self.value.clone(),
        }
    }

    /// `settings` as the evidence records them ([`BackendInfo::nccl_env`]): name and shown
    /// value.
    pub fn in_evidence(settings: &[NcclSetting]) -> Vec<(String, String)> {
        settings
            .iter()
            .map(|s| (s.name.clone(), s.shown()))
            .collect()
    }
}

/// The hardware boundary. Bandwidths are GB/s (10^9 bytes/s), latencies microseconds.
pub trait Backend {
    fn info(&self) -> BackendInfo;
    /// The NCCL_* settings in effect for this process's NCCL (name, value), sorted: the
    /// collectives measured here are those settings' ([`crate::checks::nccl_env`]).
    fn nccl_settings(&self) -> Vec<NcclSetting> {
        Vec::new()
    }
    /// Read what the node is.
    fn inventory(&mut self) -> Result<Inventory, HwError>;
    /// The processes on each GPU now, other than nodecert itself, by GPU index (None for a GPU
    /// whose list cannot be read): read again after each check that ran on the GPUs, to find a
    /// job that started during the run ([`crate::checks::arrivals`]).
    fn gpu_processes(&mut self) -> Result<Vec<Option<Vec<crate::inventory::GpuProcess>>>, HwError> {
        Err(HwError::NotSupported(
            "the processes on each GPU, read again".into(),
        ))
    }
    /// The XIDs each GPU raised since the last call (the first: since the inventory was read),
    /// by GPU index: NVML's critical-XID events and kernel-log lines logged since. None for a
    /// GPU that no source could see one on. The runner reads them after each check that ran on
    /// the GPUs ([`crate::checks::during`]).
    fn xids_since(&mut self) -> Result<Vec<Option<Vec<crate::inventory::XidEvent>>>, HwError> {
        Err(HwError::NotSupported(
            "this backend does not read XIDs during the run".into(),
        ))
    }

    /// Each GPU's error counters now (ECC counts, row remapping and retired pages, the PCIe
    /// replay counter, each active NVLink's counters), by GPU index; None for a GPU that could
    /// not be read. The runner reads them after each check that ran on the GPUs and judges what
    /// grew since ([`crate::checks::during`]).
    fn error_counts(&mut self) -> Result<Vec<Option<crate::inventory::ErrorCounts>>, HwError> {
        Err(HwError::NotSupported(
            "this backend does not read error counters during the run".into(),
        ))
    }

    /// Host<->device copies of `bytes` from pinned memory on one GPU; GB/s per repetition.
    fn host_copy(
        &mut self,
        gpu: usize,
        dir: HostDir,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<Samples, HwError>;
    /// The same on every GPU at once; one Samples per GPU.
    fn host_copy_all(
        &mut self,
        dir: HostDir,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<Vec<Samples>, HwError>;
    /// Device-local copy, bytes read plus written, GB/s.
    fn device_copy(
        &mut self,
        gpu: usize,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<Samples, HwError>;
    /// Peer copy between two GPUs.
    fn p2p_copy(
        &mut self,
        src: usize,
        dst: usize,
        mode: P2pMode,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<P2pSample, HwError>;
    /// One-way latency of a small peer transfer, microseconds.
    fn p2p_latency(&mut self, src: usize, dst: usize, iters: u32) -> Result<Samples, HwError>;
    /// A collective over all GPUs at one message size (bytes per rank as nccl-tests counts).
    fn collective(
        &mut self,
        op: CollectiveOp,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<CollectiveSample, HwError>;
    /// The same collective at each of `sizes`, with NVLink SHARP forced off
    /// (`NCCL_NVLS_ENABLE=0`): the ring/tree figure a node delivers without NVLS, beside NCCL's
    /// own choice from [`Backend::collective`]. NCCL reads that variable once per process and
    /// keeps it, and its per-communicator config has no switch for it, so the real backend runs
    /// this sweep in a child process ([`no_nvls`]); the simulated node answers from its model.
    fn collective_no_nvls(
        &mut self,
        op: CollectiveOp,
        sizes: &[u64],
        warmup: u32,
        iters: u32,
    ) -> Result<Vec<CollectiveSample>, HwError>;
    /// `iters` square GEMMs of side `n` in `precision` on one GPU, after `warmup`, operands from
    /// [`gemm_data`], the product checked. NotSupported (with why) for a precision this GPU or
    /// this backend cannot run: the check says so instead of judging it.
    fn gemm(
        &mut self,
        gpu: usize,
        precision: GemmPrecision,
        n: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<GemmSample, HwError> {
        let _ = (gpu, n, warmup, iters);
        Err(HwError::NotSupported(format!(
            "this backend does not measure {precision} GEMM throughput"
        )))
    }
    /// Every GPU at once under back-to-back GEMMs of side `n` in `precision` for `seconds`, the
    /// rate taken per window of `sample_ms` and the GPU read as often; one run per GPU.
    /// NotSupported where this backend cannot.
    fn sustained_gemm(
        &mut self,
        precision: GemmPrecision,
        n: u64,
        seconds: f64,
        sample_ms: u32,
    ) -> Result<Vec<SustainedRun>, HwError> {
        let _ = (n, seconds, sample_ms);
        Err(HwError::NotSupported(format!(
            "this backend does not hold GPUs under sustained {precision} GEMMs"
        )))
    }
    /// The reference data-parallel training run.
    fn training(&mut self, cfg: &TrainingCheck) -> Result<TrainingRun, HwError>;
    /// The same model and data partitioned as `p` (tensor-parallel or hybrid) over every GPU:
    /// the golden configuration so partitioned (its losses), then the suite's run, timed.
    /// NotSupported (with why) where this backend or this model cannot run it so.
    fn training_method(
        &mut self,
        cfg: &TrainingCheck,
        p: crate::training::partition::Partition,
    ) -> Result<MethodRun, HwError> {
        let _ = cfg;
        Err(HwError::NotSupported(format!(
            "this backend does not train partitioned as {p:?}"
        )))
    }
    /// Read the network adapters again (their error counters above all), relating them to
    /// `gpus` (the inventory's). None: this backend does not read NICs. A reading that did not
    /// answer in time is [`crate::network::Fabric::no_answer`], never a hang.
    fn fabric(
        &mut self,
        gpus: &[crate::inventory::Gpu],
    ) -> Result<Option<crate::network::Fabric>, HwError> {
        let _ = gpus;
        Ok(None)
    }
    /// Whether this backend can measure NCCL across nodes here (NotSupported, with why, when
    /// not): asked before a node joins a job, so that one that cannot says so at once. Makes
    /// no id (an NCCL id nobody uses leaves its bootstrap listener waiting).
    fn fabric_supported(&mut self) -> Result<(), HwError> {
        Err(HwError::NotSupported(
            "this backend does not measure NCCL across nodes".into(),
        ))
    }
    /// A new NCCL unique id (`ncclGetUniqueId`: 128 opaque bytes naming this node's bootstrap
    /// listener), for a communicator across nodes that this node starts. The simulated node
    /// makes random bytes. NotSupported where this backend cannot measure across nodes.
    fn fabric_id(&mut self) -> Result<Vec<u8>, HwError> {
        Err(HwError::NotSupported(
            "this backend does not measure NCCL across nodes".into(),
        ))
    }
    /// Collectives across nodes: every GPU of this node joins `comm` (local GPU i as rank
    /// `comm.first_rank + i`, inside one NCCL group), then each of `ops` at each of `sizes`
    /// (bytes per rank as nccl-tests counts), with the data check, like [`Backend::collective`].
    /// Result: per op, per size. Every node of the communicator must make the same call at the
    /// same time. The simulated node computes the figures from its NICs.
    fn fabric_collective(
        &mut self,
        comm: &FabricComm,
        ops: &[CollectiveOp],
        sizes: &[u64],
        warmup: u32,
        iters: u32,
    ) -> Result<Vec<Vec<CollectiveSample>>, HwError> {
        let _ = (comm, ops, sizes, warmup, iters);
        Err(HwError::NotSupported(
            "this backend does not measure NCCL across nodes".into(),
        ))
    }
}
