//! The node description the fake answers from (JSON, named by `FAKE_NVML_NODE`).
//!
//! A reading that the description leaves out is answered NVML_ERROR_NOT_SUPPORTED, as a VM or
//! an old driver answers it: a description states only what the node says.

use serde::Deserialize;
use std::collections::BTreeMap;

/// The whole node.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// nvmlSystemGetDriverVersion, e.g. "580.159.04".
    pub driver_version: Option<String>,
    /// nvmlSystemGetCudaDriverVersion_v2, as NVML encodes it: 13000 for CUDA 13.0.
    pub cuda_driver_version: Option<i32>,
    /// nvmlSystemGetNVMLVersion, e.g. "13.580.159.04".
    pub nvml_version: Option<String>,
    /// The GPUs in NVML index order.
    #[serde(default)]
    pub gpus: Vec<Gpu>,
    /// What every pair of GPUs answers unless `pairs` names it.
    pub pair_default: Option<PairAnswers>,
    /// Answers for named pairs (either order).
    #[serde(default)]
    pub pairs: Vec<Pair>,
    /// Node-wide functions (nvmlInit_v2, nvmlSystemGet*, nvmlEventSetCreate, ...) that fail.
    #[serde(default)]
    pub errors: BTreeMap<String, Failure>,
}

/// A process with a context on a GPU.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Process {
    pub pid: u32,
    /// What nvmlSystemGetProcessName answers for it; absent: NOT_FOUND.
    pub name: Option<String>,
    /// Absent: NVML_VALUE_NOT_AVAILABLE.
    pub used_bytes: Option<u64>,
}

/// One GPU. Every reading left out answers NOT_SUPPORTED.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    pub name: Option<String>,
    pub uuid: Option<String>,
    pub serial: Option<String>,
    pub vbios: Option<String>,
    /// "00000000:18:00.0" (NVML's form) or "0000:18:00.0".
    pub pci_bus_id: Option<String>,
    /// Device and vendor id as NVML packs them, e.g. 0x233510de.
    #[serde(default)]
    pub pci_device_id: u32,
    pub memory_total_bytes: Option<u64>,
    pub persistence_mode: Option<bool>,
    /// nvmlDeviceGetArchitecture's answer as nvml.h numbers it (7 Ampere, 8 Ada, 9 Hopper);
    /// absent: NOT_SUPPORTED.
    pub architecture: Option<u32>,
    /// Current MIG mode (0 off, 1 on).
    pub mig_mode: Option<u32>,
    /// The MIG mode at the next reset (absent: the current one).
    #[serde(default)]
    pub mig_pending: Option<u32>,
    /// Compute mode as NVML numbers it (0 default, 1 exclusive thread, 2 prohibited, 3
    /// exclusive process).
    pub compute_mode: Option<u32>,
    /// The compute processes nvmlDeviceGetComputeRunningProcesses_v3 lists (their memory is
    /// the memory in use); absent: NOT_SUPPORTED. nvmlDeviceGetGraphicsRunningProcesses_v3
    /// answers NOT_SUPPORTED, as on a GPU without graphics.
    pub processes: Option<Vec<Process>>,
    /// Memory in use that no listed process holds, as a process in another PID namespace.
    #[serde(default)]
    pub memory_used_unlisted_bytes: u64,
    /// Current ECC mode.
    pub ecc_mode: Option<bool>,
    pub ecc: Option<Ecc>,
    pub retired_pages: Option<RetiredPages>,
    pub remapped_rows: Option<RemappedRows>,
    /// nvmlDeviceGetGpuFabricInfo's answer; absent: NOT_SUPPORTED (no fabric, before Hopper).
    pub fabric: Option<Fabric>,
    pub temperature_c: Option<u32>,
    pub power_limit_mw: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub sm_clock_max_mhz: Option<u32>,
    /// nvmlClocksThrottleReasons bits (0 = not throttled).
    pub throttle_reasons: Option<u64>,
    pub pcie: Option<Pcie>,
    /// The NUMA node nvmlDeviceGetMemoryAffinity names.
    pub numa_node: Option<u32>,
    /// nvmlDeviceGetCpuAffinity as a CPU list, e.g. "0-15,32-47".
    pub cpu_affinity: Option<String>,
    pub virtualization_mode: Option<VirtMode>,
    /// XID critical errors delivered through the event set API. Absent: the GPU does not
    /// support XID events; empty: supported, none happened.
    pub xid_events: Option<Vec<u64>>,
    /// XID critical errors raised once the run is under way: delivered only after the event
    /// set has been waited on until empty once (the inventory's reading), as under load.
    #[serde(default)]
    pub xid_events_later: Vec<u64>,
    /// Error counts raised once the run is under way: each answers from the second reading of
    /// it on this GPU on (the inventory's reading is the first), as counts an error under load
    /// raised.
    pub errors_later: Option<ErrorsLater>,
    /// NVLinks by number; empty: nvmlDeviceGetNvLinkState answers NOT_SUPPORTED.
    #[serde(default)]
    pub nvlinks: Vec<NvLink>,
    /// The GPU fell off the bus: when handles are handed out, or afterwards (every query).
    pub lost: Option<Lost>,
    /// Functions (by C name) that fail on this GPU whatever the description says.
    #[serde(default)]
    pub errors: BTreeMap<String, Failure>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ecc {
    pub volatile_corrected: Option<u64>,
    pub volatile_uncorrected: Option<u64>,
    pub aggregate_corrected: Option<u64>,
    pub aggregate_uncorrected: Option<u64>,
    pub sram_corrected: Option<u64>,
    pub sram_uncorrected: Option<u64>,
    pub dram_corrected: Option<u64>,
    pub dram_uncorrected: Option<u64>,
}

/// Counts that change after their first reading ([`Gpu::errors_later`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorsLater {
    /// The volatile uncorrected ECC count (nvmlDeviceGetTotalEccErrors).
    pub volatile_uncorrected: Option<u64>,
    /// nvmlDeviceGetPcieReplayCounter.
    pub pcie_replay_counter: Option<u32>,
    /// nvmlDeviceGetRemappedRows' pending flag.
    pub remap_pending: Option<bool>,
    /// NVLinks, by number, that nvmlDeviceGetNvLinkState answers inactive from their second
    /// reading on: links that went down under load.
    #[serde(default)]
    pub links_down: Vec<u32>,
    /// Functions (by C name) that answer on this GPU as described at their first call and fail
    /// from their second on: a counter that stops answering mid-run.
    #[serde(default)]
    pub errors: BTreeMap<String, Failure>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetiredPages {
    #[serde(default)]
    pub single_bit: u32,
    #[serde(default)]
    pub double_bit: u32,
    #[serde(default)]
    pub pending: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemappedRows {
    #[serde(default)]
    pub correctable: u32,
    #[serde(default)]
    pub uncorrectable: u32,
    #[serde(default)]
    pub pending: bool,
    #[serde(default)]
    pub failure: bool,
}

/// A GPU's registration with the NVLink fabric, as nvmlGpuFabricInfo_t carries it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fabric {
    /// nvmlGpuFabricState_t: 0 not supported, 1 not started, 2 in progress, 3 completed.
    pub state: u8,
    /// nvmlReturn_t of the registration (0: success).
    #[serde(default)]
    pub status: u32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pcie {
    pub gen_current: Option<u32>,
    pub gen_max: Option<u32>,
    pub width_current: Option<u32>,
    pub width_max: Option<u32>,
    pub replay_counter: Option<u32>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VirtMode {
    None,
    Passthrough,
    Vgpu,
    HostVgpu,
    HostVsga,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lost {
    /// nvmlDeviceGetHandleByIndex_v2 answers GPU_IS_LOST.
    AtOpen,
    /// The handle is handed out; every query on it answers GPU_IS_LOST.
    AfterOpen,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvLink {
    #[serde(default)]
    pub active: bool,
    /// nvmlNvlinkVersion_t as the driver answers it (6 = NVLink 4.0 on Hopper).
    pub version: Option<u32>,
    /// Bus id of the far end (a GPU or an NVSwitch).
    pub remote_bus_id: Option<String>,
    pub remote_type: Option<RemoteType>,
    pub errors: Option<LinkErrors>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemoteType {
    Gpu,
    Ibmnpu,
    Switch,
    Unknown,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkErrors {
    pub replay: Option<u64>,
    pub recovery: Option<u64>,
    pub crc_flit: Option<u64>,
    pub crc_data: Option<u64>,
    /// NVML_NVLINK_ERROR_DL_ECC_DATA (NVLink 4 on).
    pub ecc_data: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pair {
    pub a: usize,
    pub b: usize,
    pub path: Option<Path>,
    pub p2p_read: Option<P2p>,
    pub p2p_write: Option<P2p>,
    pub p2p_nvlink: Option<P2p>,
    pub p2p_atomics: Option<P2p>,
}

impl Pair {
    fn answers(&self) -> PairAnswers {
        PairAnswers {
            path: self.path,
            p2p_read: self.p2p_read,
            p2p_write: self.p2p_write,
            p2p_nvlink: self.p2p_nvlink,
            p2p_atomics: self.p2p_atomics,
        }
    }
}

/// What nvmlDeviceGetTopologyCommonAncestor and nvmlDeviceGetP2PStatus answer for a pair.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairAnswers {
    /// `nvidia-smi topo -m`'s label of the common ancestor: PIX, PXB, PHB, NODE or SYS.
    pub path: Option<Path>,
    pub p2p_read: Option<P2p>,
    pub p2p_write: Option<P2p>,
    pub p2p_nvlink: Option<P2p>,
    pub p2p_atomics: Option<P2p>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub enum Path {
    PIX,
    PXB,
    PHB,
    NODE,
    SYS,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum P2p {
    Ok,
    ChipsetNotSupported,
    GpuNotSupported,
    IohTopologyNotSupported,
    DisabledByRegkey,
    NotSupported,
    Unknown,
}

/// An NVML error a function answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    NotSupported,
    GpuIsLost,
    NoPermission,
    InvalidArgument,
    DriverNotLoaded,
    Unknown,
}

impl Node {
    /// Parse and check a description: every function named in `errors` must be one the fake
    /// exports (a typo would otherwise go unnoticed), pairs must name GPUs.
    pub fn parse(text: &str, exported: &[&str]) -> Result<Node, String> {
        let node: Node = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let named = node
            .errors
            .keys()
            .chain(node.gpus.iter().flat_map(|g| g.errors.keys()))
            .chain(
                node.gpus
                    .iter()
                    .filter_map(|g| g.errors_later.as_ref())
                    .flat_map(|l| l.errors.keys()),
            );
        for f in named {
            if !exported.contains(&f.as_str()) {
                return Err(format!("errors: {f} is not a function this fake answers"));
            }
        }
        let n = node.gpus.len();
        if let Some(p) = node
            .pairs
            .iter()
            .find(|p| p.a >= n || p.b >= n || p.a == p.b)
        {
            return Err(format!(
                "pairs: ({}, {}) is not a pair of the {n} GPUs",
                p.a, p.b
            ));
        }
        Ok(node)
    }

    /// The answers for a pair of GPUs, in either order.
    pub fn pair(&self, a: usize, b: usize) -> Option<PairAnswers> {
        self.pairs
            .iter()
            .find(|p| (p.a, p.b) == (a, b) || (p.a, p.b) == (b, a))
            .map(Pair::answers)
            .or_else(|| self.pair_default.clone())
    }
}

/// CPU numbers of a list like "0-15,32-47"; None when it does not parse.
pub fn cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let a: usize = part.parse().ok()?;
                (a, a)
            }
        };
        if a > b || b >= 1 << 16 {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_description_with_an_unknown_key_or_function_is_refused() {
        assert!(Node::parse(r#"{"gpus": [{"nmae": "x"}]}"#, &[]).is_err());
        let e = Node::parse(
            r#"{"errors": {"nvmlDeviceGetFoo": "not_supported"}}"#,
            &["a"],
        );
        assert!(e.unwrap_err().contains("nvmlDeviceGetFoo"));
        let e = Node::parse(r#"{"gpus": [{}], "pairs": [{"a": 0, "b": 1}]}"#, &[]);
        assert!(e.unwrap_err().contains("(0, 1)"));
    }

    #[test]
    fn pairs_are_found_in_either_order_else_the_default() {
        let n = Node::parse(
            r#"{"gpus": [{}, {}, {}], "pair_default": {"path": "SYS"},
                "pairs": [{"a": 1, "b": 0, "path": "PIX", "p2p_read": "ok"}]}"#,
            &[],
        )
        .unwrap();
        assert!(matches!(n.pair(0, 1).unwrap().path, Some(Path::PIX)));
        assert!(matches!(n.pair(1, 0).unwrap().p2p_read, Some(P2p::Ok)));
        assert!(matches!(n.pair(0, 2).unwrap().path, Some(Path::SYS)));
    }

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(cpu_list("0-2,8"), Some(vec![0, 1, 2, 8]));
        assert_eq!(cpu_list("3-1"), None);
        assert_eq!(cpu_list("x"), None);
    }
}
