//! What a node is, as read before anything is measured: GPUs, links, PCIe, virtualization and
//! health counters. A real backend fills this from NVML and the OS; the simulated node from its
//! description. Every optional field is `None` when the platform does not answer that query
//! ("not available here"), and the reason is kept in [`Inventory::unavailable`].

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Inventory {
    /// Host name of the node.
    pub hostname: String,
    /// NVIDIA driver version, e.g. "580.159.04".
    pub driver_version: Option<String>,
    /// CUDA version the driver supports, e.g. "13.0".
    pub cuda_driver_version: Option<String>,
    /// NVML library version.
    pub nvml_version: Option<String>,
    /// GPUs in CUDA ordinal order (matched with NVML by UUID or bus id, never by index).
    pub gpus: Vec<Gpu>,
    /// Every unordered GPU pair (a < b).
    pub pairs: Vec<GpuPair>,
    /// Number of NVSwitches seen at the far end of NVLinks (None: could not be read).
    pub nvswitches: Option<u32>,
    /// How the node is virtualized, with the witnesses that say so.
    pub virtualization: Virtualization,
    /// Queries the platform did not answer, as "gpu0 retired pages: not supported".
    #[serde(default)]
    pub unavailable: Vec<String>,
    /// GPUs the driver lists that stopped answering it (NVML_ERROR_GPU_IS_LOST, "fell off the
    /// bus", usually with XID 79): a node failure, judged by the health check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_gpus: Vec<LostGpu>,
    /// The network adapters (RDMA NICs), their relation to the GPUs, GPUDirect RDMA. None: not
    /// read (evidence written before nodecert read NICs, or a simulated node that describes
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<crate::network::Fabric>,
    /// Where CUDA looks for an MPS control daemon, and whether one is there (nodecert's own CUDA
    /// goes around it: `platform::mps`). None: not looked for (evidence written before nodecert
    /// looked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mps: Option<Mps>,
}

/// What nodecert found where CUDA looks for the MPS control daemon. Where one answers, CUDA
/// processes started on the node share the GPUs through an MPS server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Mps {
    /// The folder looked in: `$CUDA_MPS_PIPE_DIRECTORY` as nodecert was started with it, or
    /// `/tmp/nvidia-mps`.
    pub pipe_dir: String,
    /// Whether the daemon's socket (`control`) is there.
    pub socket: bool,
    /// The daemon's process, where nodecert sees exactly one (None: none seen, as from another
    /// container or where the socket was left by a daemon that stopped; or several).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

impl Mps {
    /// "the MPS control daemon at /tmp/nvidia-mps (pid 4242)", "no MPS control daemon at
    /// /tmp/nvidia-mps".
    pub fn describe(&self) -> String {
        let dir = crate::console::visible(&self.pipe_dir);
        match (self.socket, self.pid) {
            (false, _) => format!("no MPS control daemon at {dir}"),
            (true, Some(p)) => format!("the MPS control daemon at {dir} (pid {p})"),
            (true, None) => format!(
                "the socket of an MPS control daemon at {dir} (no one daemon process seen from \
                 here: it runs in another container, several run, or the socket is left from \
                 one that stopped)"
            ),
        }
    }
}

/// A GPU that stopped answering the driver.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct LostGpu {
    /// nodecert's index, when the GPU was listed before it stopped answering (it is then also in
    /// [`Inventory::gpus`], with what could be read); None when NVML could not hand it out at all.
    pub index: Option<usize>,
    /// NVML's index, when that is all that is known of it.
    pub nvml_index: Option<u32>,
    pub pci_bus_id: Option<String>,
    /// The query that found it lost, e.g. "nvmlDeviceGetHandleByIndex(3)" or "ecc mode".
    pub detail: String,
}

impl LostGpu {
    /// A GPU NVML counts but cannot hand out (nvmlDeviceGetHandleByIndex answered GPU_IS_LOST).
    pub fn unlisted(nvml_index: u32) -> LostGpu {
        LostGpu {
            index: None,
            nvml_index: Some(nvml_index),
            pci_bus_id: None,
            detail: format!("nvmlDeviceGetHandleByIndex({nvml_index})"),
        }
    }

    /// "GPU 3 (0000:3b:00.0)", or "NVML GPU 5" when nodecert never numbered it.
    /// The lost GPU as a finding subject: by nodecert's index, else NVML's, with its bus id.
    pub fn subject(&self) -> crate::evidence::Subject {
        crate::evidence::Subject {
            gpu: self.index,
            nvml_gpu: self.nvml_index.filter(|_| self.index.is_none()),
            pci_bus_id: self.pci_bus_id.clone(),
            label: (self.index.is_none() && self.nvml_index.is_none() && self.pci_bus_id.is_none())
                .then(|| "a GPU".to_string()),
            ..Default::default()
        }
    }

    pub fn label(&self) -> String {
        let who = match (self.index, self.nvml_index) {
            (Some(i), _) => format!("GPU {i}"),
            (None, Some(n)) => format!("NVML GPU {n}"),
            (None, None) => "a GPU".into(),
        };
        match &self.pci_bus_id {
            Some(b) => format!("{who} ({b})"),
            None => who,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Gpu {
    /// CUDA ordinal.
    pub index: usize,
    /// Product name, e.g. "NVIDIA H200".
    pub name: String,
    pub uuid: String,
    pub serial: Option<String>,
    pub vbios: Option<String>,
    /// Normalised PCI bus id, "0000:3b:00.0" (lowercase, 4-digit domain).
    pub pci_bus_id: String,
    /// Total memory in bytes.
    pub memory_bytes: u64,
    pub pcie: PcieLink,
    /// NUMA node of the GPU (None: not reported, e.g. -1 in a VM).
    pub numa_node: Option<i32>,
    /// CPUs close to the GPU, as a list like "0-15,32-47".
    pub cpu_affinity: Option<String>,
    /// The CPU socket (physical package) of the GPU's NUMA node; None: not reported. Sockets,
    /// not NUMA ids, say which GPUs share a CPU: one socket may hold 1, 2 or 4 NUMA nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_socket: Option<u32>,
    pub persistence_mode: Option<bool>,
    pub mig_enabled: Option<bool>,
    /// The MIG mode the GPU takes at its next reset, where it differs from `mig_enabled` (NVML's
    /// pending mode: `nvidia-smi -mig` was run and no reset has followed). None: no change is
    /// pending, or the mode was not read (`mig_enabled` says which), or evidence written before
    /// this was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_pending: Option<bool>,
    /// Which processes may hold a CUDA context on the GPU (NVML); None: not read, or evidence
    /// written before this was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_mode: Option<ComputeMode>,
    /// Other processes that hold a context on the GPU (NVML's compute and graphics process
    /// lists, nodecert itself left out), read before nodecert opens the GPU; None: not read (a
    /// driver or vGPU that does not list them, or evidence written before this was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<Vec<GpuProcess>>,
    /// Device memory in use when the inventory was read, bytes (NVML's `used`, the driver's own
    /// reserve left out). A witness of a process that the list cannot show: one in another PID
    /// namespace, as from inside a container. None: not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_bytes: Option<u64>,
    pub ecc_enabled: Option<bool>,
    pub ecc: EccCounts,
    pub remapped_rows: Option<RemappedRows>,
    pub retired_pages: Option<RetiredPages>,
    /// Active clock-throttle reasons, snake_case (e.g. "hw_slowdown"); empty when none.
    pub throttle_reasons: Vec<String>,
    /// Current SM clock and its maximum, MHz.
    pub sm_clock_mhz: Option<u32>,
    pub sm_clock_max_mhz: Option<u32>,
    /// Enforced power limit, watts.
    pub power_limit_w: Option<f64>,
    /// GPU temperature, degrees Celsius.
    pub temperature_c: Option<f64>,
    pub nvlinks: Vec<NvLink>,
    /// XID events seen while nodecert ran (and from the kernel log where readable).
    pub xids: Vec<XidEvent>,
    /// Whether NCCL could use NVLink SHARP (NVLS) on this GPU, as CUDA and NVML report it.
    /// Unknown (both `None`) in evidence written before this was recorded.
    #[serde(default)]
    pub nvls: Nvls,
    /// Readings of this GPU the platform did not give where the field itself cannot say so: an
    /// empty `throttle_reasons` or `xids` would otherwise read as "none". (An `Option` field
    /// that is `None` already says it.) Empty in evidence written before this was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<Reading>,
}

/// A health reading of a GPU (and the node's driver version), as the health check needs it and
/// as a simulated node names one it hides (`[[unavailable]] readings = [...]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reading {
    /// The node's driver version.
    DriverVersion,
    /// Whether ECC is on.
    EccMode,
    /// ECC error counts (uncorrectable, and SRAM/DRAM where the GPU has those counters).
    EccErrors,
    /// Remapped rows, or on older GPUs retired pages.
    RemappedRows,
    /// A source of XID events (NVML events or the kernel log).
    Xids,
    /// XID events logged before the run (the kernel log): without it, NVML's events show only
    /// those of the run itself, and the suite's look-back is not judged.
    XidHistory,
    /// The PCIe replay counter.
    PcieReplays,
    /// The error counters of the GPU's NVLinks.
    NvlinkErrors,
    /// Which of the GPU's NVLinks are active (NVML's link state): without it, the links read are
    /// not all there are, and the counts between GPUs are not known.
    NvlinkState,
    /// The current clock-throttle reasons.
    ThrottleReasons,
    /// The GPU temperature.
    Temperature,
    /// The VBIOS version (judged across the node's GPUs: they must all run one).
    Vbios,
    /// The processes on the GPU.
    Processes,
    /// The GPU's model name (NVML's `nvmlDeviceGetName`): without it the suite's model is not
    /// judged, never failed against "unknown GPU".
    Model,
    /// The GPU's memory size: without it the suite's memory floor is not judged, never failed
    /// against 0 bytes.
    Memory,
}

impl Reading {
    pub const ALL: [Reading; 15] = [
        Reading::DriverVersion,
        Reading::EccMode,
        Reading::EccErrors,
        Reading::RemappedRows,
        Reading::Xids,
        Reading::XidHistory,
        Reading::PcieReplays,
        Reading::NvlinkErrors,
        Reading::NvlinkState,
        Reading::ThrottleReasons,
        Reading::Temperature,
        Reading::Vbios,
        Reading::Processes,
        Reading::Model,
        Reading::Memory,
    ];

    /// The key a node file uses: "nvlink_errors".
    pub fn key(self) -> &'static str {
        match self {
            Reading::DriverVersion => "driver_version",
            Reading::EccMode => "ecc_mode",
            Reading::EccErrors => "ecc_errors",
            Reading::RemappedRows => "remapped_rows",
            Reading::Xids => "xids",
            Reading::XidHistory => "xid_history",
            Reading::PcieReplays => "pcie_replays",
            Reading::NvlinkErrors => "nvlink_errors",
            Reading::NvlinkState => "nvlink_state",
            Reading::ThrottleReasons => "throttle_reasons",
            Reading::Temperature => "temperature",
            Reading::Vbios => "vbios",
            Reading::Processes => "processes",
            Reading::Model => "model",
            Reading::Memory => "memory",
        }
    }

    /// What it is, for people: "NVLink error counters".
    pub fn describe(self) -> &'static str {
        match self {
            Reading::DriverVersion => "driver version",
            Reading::EccMode => "ECC mode",
            Reading::EccErrors => "ECC error counts",
            Reading::RemappedRows => "remapped rows and retired pages",
            Reading::Xids => "XID events",
            Reading::XidHistory => "XID events logged before the run",
            Reading::PcieReplays => "PCIe replay counter",
            Reading::NvlinkErrors => "NVLink error counters",
            Reading::NvlinkState => "NVLink state",
            Reading::ThrottleReasons => "throttle reasons",
            Reading::Temperature => "temperature",
            Reading::Vbios => "VBIOS version",
            Reading::Processes => "processes",
            Reading::Model => "model name",
            Reading::Memory => "memory size",
        }
    }
}

#[cfg(test)]
mod pair_label_tests {
    /// A pair is labelled as `nvidia-smi topo -m` prints it, except where either GPU's link
    /// state was not read (or there is no such pair): "?".
    /// A GPU of 0 bytes (evidence written before `memory` was a reading) gives no memory size.
    #[test]
    fn a_memory_of_zero_bytes_is_not_a_reading() {
        let mut g = crate::testutil::simulated("h200-vm-1", &[]).node.gpus[0].clone();
        assert!(g.gives(super::Reading::Memory) && g.gives(super::Reading::Model));
        g.memory_bytes = 1;
        assert!(g.gives(super::Reading::Memory));
        g.memory_bytes = 0;
        assert!(!g.gives(super::Reading::Memory));
    }

    #[test]
    fn a_pair_of_a_gpu_whose_link_state_was_not_read_is_unknown() {
        let mut inv = crate::testutil::simulated("h100-sxm-8", &[]).node;
        assert_eq!(inv.pair_label(1, 2), "NV18");
        assert_eq!(inv.pair_label(2, 1), "NV18");
        assert_eq!(inv.pair_label(2, 9), "?");
        inv.gpus[2].unavailable.push(super::Reading::NvlinkState);
        assert!(!inv.links_known(1, 2) && !inv.links_known(2, 7));
        assert!(inv.links_known(1, 3));
        assert_eq!(inv.pair_label(1, 2), "?");
        assert_eq!(inv.pair_label(2, 1), "?");
        assert_eq!(inv.pair_label(1, 3), "NV18");
        assert_eq!(inv.links_unread(), ["GPU 2"]);
        assert_eq!(inv.links_unread_in(1, 2).as_deref(), Some("GPU 2"));
        assert_eq!(inv.links_unread_in(1, 3), None);
        inv.gpus[5].unavailable.push(super::Reading::NvlinkState);
        assert_eq!(
            inv.links_unread_in(5, 2).as_deref(),
            Some("GPU 5 and GPU 2")
        );
    }
}

impl Gpu {
    /// The platform gave this reading (for an `Option` field: it is `Some`; for the NVLink
    /// counters: every active link has at least one; a GPU without NVLink has none to give).
    pub fn gives(&self, r: Reading) -> bool {
        if self.unavailable.contains(&r) {
            return false;
        }
        match r {
            Reading::DriverVersion => true,
            Reading::EccMode => self.ecc_enabled.is_some(),
            Reading::EccErrors => {
                self.ecc.volatile_uncorrected.is_some() || self.ecc.sram_uncorrected.is_some()
            }
            Reading::RemappedRows => self.remapped_rows.is_some() || self.retired_pages.is_some(),
            Reading::Xids
            | Reading::XidHistory
            | Reading::ThrottleReasons
            | Reading::NvlinkState
            | Reading::Model => true,
            Reading::Memory => self.memory_bytes > 0,
            Reading::PcieReplays => self.pcie.replay_counter.is_some(),
            Reading::NvlinkErrors => self
                .nvlinks
                .iter()
                .filter(|l| l.active)
                .all(|l| l.errors.read().is_some()),
            Reading::Temperature => self.temperature_c.is_some(),
            Reading::Vbios => self.vbios.as_deref().is_some_and(|v| !v.trim().is_empty()),
            Reading::Processes => self.processes.is_some(),
        }
    }
}

/// A process holding a context on a GPU, as NVML lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuProcess {
    /// As NVML gives it: the host's PID where nodecert runs in a container.
    pub pid: u32,
    /// NVML's name for it (`nvmlSystemGetProcessName`, at most 64 bytes); None where NVML
    /// could not tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Device memory it holds, bytes; None where NVML does not say (as under vGPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

impl GpuProcess {
    /// "pid 4242 (python3, 30.0 GiB)".
    pub fn describe(&self) -> String {
        let mut what: Vec<String> = Vec::new();
        if let Some(n) = &self.name {
            what.push(n.clone());
        }
        if let Some(b) = self.memory_bytes {
            what.push(crate::units::format_bytes(b));
        }
        match what.is_empty() {
            true => format!("pid {}", self.pid),
            false => format!("pid {} ({})", self.pid, what.join(", ")),
        }
    }

    /// Whether it is an MPS server, through which every CUDA process then shares the GPU.
    pub fn is_mps_server(&self) -> bool {
        self.name
            .as_deref()
            .is_some_and(|n| n.contains("nvidia-cuda-mps-server"))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct PcieLink {
    /// The link as read at rest. GPUs lower the generation (and sometimes the width) of an idle
    /// link to save power, so an idle reading below the maximum proves nothing by itself.
    pub gen_current: Option<u32>,
    pub gen_max: Option<u32>,
    pub width_current: Option<u32>,
    pub width_max: Option<u32>,
    /// The link as read while nodecert drove host-to-device copies on this GPU: what it trained
    /// at. `None` when no load was needed (the idle reading was already at the maximum) or
    /// possible (no CUDA); see [`PcieLink::trained`].
    #[serde(default)]
    pub gen_loaded: Option<u32>,
    #[serde(default)]
    pub width_loaded: Option<u32>,
    /// PCIe replay counter since the driver loaded.
    pub replay_counter: Option<u64>,
}

/// A PCIe link reading that a check can rely on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainedLink {
    pub gen: u32,
    pub width: u32,
    /// Read under load, or at rest already at the link's maximum: what the link trained at.
    /// `false`: read at rest below the maximum, so the link may only be idling.
    pub certain: bool,
}

impl PcieLink {
    /// What the link trained at: the reading under load when there is one, else the reading at
    /// rest (certain only when it is already at the maximum: a link never runs above it).
    pub fn trained(&self) -> Option<TrainedLink> {
        if let (Some(gen), Some(width)) = (self.gen_loaded, self.width_loaded) {
            return Some(TrainedLink {
                gen,
                width,
                certain: true,
            });
        }
        let (gen, width) = (self.gen_current?, self.width_current?);
        let at_max =
            self.gen_max.is_some_and(|m| gen >= m) && self.width_max.is_some_and(|m| width >= m);
        Some(TrainedLink {
            gen,
            width,
            certain: at_max,
        })
    }

    /// The trained link for people: "Gen5 x16", "Gen1 x16 at rest" when it could only be read
    /// idle below its maximum, "n/a" when not read at all.
    pub fn trained_label(&self) -> String {
        match self.trained() {
            Some(t) if t.certain => format!("Gen{} x{}", t.gen, t.width),
            Some(t) => format!("Gen{} x{} at rest", t.gen, t.width),
            None => "n/a".into(),
        }
    }

    /// Whether the idle reading leaves the link's training in doubt (below its maximum).
    pub fn below_max_at_rest(&self) -> bool {
        matches!(
            (self.gen_current, self.gen_max),
            (Some(c), Some(m)) if c < m
        ) || matches!(
            (self.width_current, self.width_max),
            (Some(c), Some(m)) if c < m
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct EccCounts {
    /// Volatile (since driver load) corrected / uncorrected errors.
    pub volatile_corrected: Option<u64>,
    pub volatile_uncorrected: Option<u64>,
    /// Lifetime corrected / uncorrected errors.
    pub aggregate_corrected: Option<u64>,
    pub aggregate_uncorrected: Option<u64>,
    /// Lifetime SRAM corrected / uncorrected errors (where reported separately).
    pub sram_corrected: Option<u64>,
    pub sram_uncorrected: Option<u64>,
    /// Lifetime DRAM errors, corrected plus uncorrected (where reported separately).
    pub dram_errors: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct RemappedRows {
    pub correctable: u64,
    pub uncorrectable: u64,
    /// A remap is pending: the GPU must be reset for it to take effect.
    pub pending: bool,
    /// A remap failed: the GPU has run out of spare rows.
    pub failure: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct RetiredPages {
    pub single_bit: u64,
    pub double_bit: u64,
    pub pending: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NvLink {
    pub link: u32,
    pub active: bool,
    pub version: Option<u32>,
    pub remote: LinkRemote,
    /// Error counters: replay, recovery, CRC (flit), CRC (data).
    pub errors: NvLinkErrors,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum RemoteKind {
    Gpu,
    NvSwitch,
    #[default]
    Unknown,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct LinkRemote {
    pub kind: RemoteKind,
    /// Bus id of the remote end (normalised).
    pub pci_bus_id: Option<String>,
    /// CUDA ordinal of the remote GPU, when the remote end is a GPU of this node.
    pub gpu: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct NvLinkErrors {
    pub replay: Option<u64>,
    pub recovery: Option<u64>,
    pub crc_flit: Option<u64>,
    /// Data CRC errors (NVLink 3 and before: Ampere; Hopper's links count ECC instead).
    pub crc_data: Option<u64>,
    /// Data errors the link's ECC saw (NVLink 4 on: Hopper and later, where it takes the data
    /// CRC counter's place). None: not read, or evidence written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_data: Option<u64>,
}

impl NvLinkErrors {
    /// The counters by name, the data errors as one: a link counts them by CRC (NVLink 3 and
    /// before) or by ECC (NVLink 4 on). The CRC count where the link answers it (as before ECC
    /// was read: a link answering both is not counted twice); the ECC count where it does not.
    pub fn kinds(&self) -> [(&'static str, Option<u64>); 4] {
        let data = self.crc_data.or(self.ecc_data);
        [
            ("replay", self.replay),
            ("recovery", self.recovery),
            ("crc_flit", self.crc_flit),
            ("data (crc_data or ecc_data)", data),
        ]
    }

    /// What the counters [`NvLinkErrors::kinds`] sums count, in a finding's words: the data
    /// errors by CRC, or by ECC on a link that counts them so (NVLink 4 on).
    pub fn words(&self) -> &'static str {
        match (self.crc_data, self.ecc_data) {
            (None, Some(_)) => "NVLink errors (replay, recovery, flit CRC, data ECC)",
            _ => "NVLink errors (replay, recovery, CRC)",
        }
    }

    /// The sum of the counters that were read, and the names of those that were not; None when
    /// none was read (an unread counter is unknown, not 0).
    pub fn read(&self) -> Option<(u64, Vec<&'static str>)> {
        let all = self.kinds();
        let missing: Vec<&'static str> = all
            .iter()
            .filter(|(_, v)| v.is_none())
            .map(|(n, _)| *n)
            .collect();
        if missing.len() == all.len() {
            return None;
        }
        let sum = all
            .iter()
            .filter_map(|(_, v)| *v)
            .fold(0u64, u64::saturating_add);
        Some((sum, missing))
    }
}

/// The error counters of one GPU that a fault under load makes grow, as read at one moment:
/// read at the start (the inventory, [`ErrorCounts::of`]) and again after each check that ran on
/// the GPUs ([`crate::backend::Backend::error_counts`]), so that what grew while a check ran is
/// judged under it ([`crate::checks::during`]). A counter not read is `None`, never 0.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ErrorCounts {
    pub ecc: EccCounts,
    pub remapped_rows: Option<RemappedRows>,
    pub retired_pages: Option<RetiredPages>,
    pub pcie_replays: Option<u64>,
    /// The error counters of each active NVLink, by link number.
    pub nvlinks: Vec<(u32, NvLinkErrors)>,
    /// The NVLinks the reading found inactive, by number: a link's state, not a counter. One
    /// that was active at the last reading went down in between.
    pub links_down: Vec<u32>,
}

impl ErrorCounts {
    /// The counters the inventory read of `g`: those the platform did not give (a reading a
    /// simulated node hides, or one the GPU listed unavailable) are `None`.
    pub fn of(g: &Gpu) -> ErrorCounts {
        ErrorCounts {
            ecc: g.ecc.clone(),
            remapped_rows: g.remapped_rows.clone(),
            retired_pages: g.retired_pages.clone(),
            pcie_replays: g.pcie.replay_counter,
            nvlinks: g
                .nvlinks
                .iter()
                .filter(|l| l.active)
                .map(|l| (l.link, l.errors.clone()))
                .collect(),
            links_down: g
                .nvlinks
                .iter()
                .filter(|l| !l.active)
                .map(|l| l.link)
                .collect(),
        }
        .without(&g.unavailable)
    }

    /// These counters with those of `hidden` readings left unread: what the start found not
    /// available is not judged later either, whatever a later reading answers.
    pub fn without(mut self, hidden: &[Reading]) -> ErrorCounts {
        for r in hidden {
            match r {
                Reading::EccErrors => self.ecc = EccCounts::default(),
                Reading::RemappedRows => {
                    self.remapped_rows = None;
                    self.retired_pages = None;
                }
                Reading::PcieReplays => self.pcie_replays = None,
                // The links stay, their counters unread: a link's state is not a counter, and
                // one that goes down is a fault whether or not its errors can be counted.
                Reading::NvlinkErrors => {
                    for (_, e) in &mut self.nvlinks {
                        *e = NvLinkErrors::default();
                    }
                }
                _ => {}
            }
        }
        self
    }

    /// Take what `now` read as the last known value, counter by counter: one `now` did not read
    /// keeps the value read before it. A link `now` found down leaves the links whose counters
    /// are compared (it is judged once, where it went down); one that comes up again is compared
    /// from its first reading on.
    pub fn update(&mut self, now: ErrorCounts) {
        self.nvlinks.retain(|(l, _)| !now.links_down.contains(l));
        self.links_down = now.links_down;
        let keep = |last: &mut Option<u64>, now: Option<u64>| *last = now.or(*last);
        let (e, n) = (&mut self.ecc, now.ecc);
        keep(&mut e.volatile_corrected, n.volatile_corrected);
        keep(&mut e.volatile_uncorrected, n.volatile_uncorrected);
        keep(&mut e.aggregate_corrected, n.aggregate_corrected);
        keep(&mut e.aggregate_uncorrected, n.aggregate_uncorrected);
        keep(&mut e.sram_corrected, n.sram_corrected);
        keep(&mut e.sram_uncorrected, n.sram_uncorrected);
        keep(&mut e.dram_errors, n.dram_errors);
        if now.remapped_rows.is_some() {
            self.remapped_rows = now.remapped_rows;
        }
        if now.retired_pages.is_some() {
            self.retired_pages = now.retired_pages;
        }
        keep(&mut self.pcie_replays, now.pcie_replays);
        for (link, n) in now.nvlinks {
            match self.nvlinks.iter_mut().find(|(l, _)| *l == link) {
                Some((_, e)) => {
                    keep(&mut e.replay, n.replay);
                    keep(&mut e.recovery, n.recovery);
                    keep(&mut e.crc_flit, n.crc_flit);
                    keep(&mut e.crc_data, n.crc_data);
                    keep(&mut e.ecc_data, n.ecc_data);
                }
                None => self.nvlinks.push((link, n)),
            }
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct XidEvent {
    pub code: u32,
    /// Where it was seen: "nvml event" or "kernel log".
    pub source: String,
    pub detail: Option<String>,
    /// Seconds from its most recent occurrence to the inventory reading: 0 for an event seen
    /// while nodecert ran, from the kernel log's timestamp otherwise. None: not known (judged
    /// as recent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct GpuPair {
    pub a: usize,
    pub b: usize,
    /// Active NVLinks between the two GPUs. With NVSwitch, the links each GPU has into the
    /// switch fabric (the bandwidth a pair can use), as `nvidia-smi topo -m` prints NV18.
    pub nvlinks: u32,
    /// How the pair connects over PCIe when not over NVLink: "PIX", "PXB", "PHB", "NODE", "SYS".
    pub pcie_path: Option<String>,
    /// Peer access as the driver reports it.
    pub p2p: P2pStatus,
}

impl GpuPair {
    /// Cell text as `nvidia-smi topo -m` prints it.
    pub fn topo_label(&self) -> String {
        if self.nvlinks > 0 {
            format!("NV{}", self.nvlinks)
        } else {
            self.pcie_path.clone().unwrap_or_else(|| "?".into())
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct P2pStatus {
    pub read: Option<bool>,
    pub write: Option<bool>,
    pub nvlink: Option<bool>,
    pub atomics: Option<bool>,
}

impl P2pStatus {
    /// Peer copies possible (read or write). None when not reported.
    pub fn usable(&self) -> Option<bool> {
        match (self.read, self.write) {
            (None, None) => None,
            (r, w) => Some(r.unwrap_or(false) || w.unwrap_or(false)),
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum VirtMode {
    BareMetal,
    Passthrough,
    Vgpu,
    #[default]
    Unknown,
}

impl std::fmt::Display for VirtMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VirtMode::BareMetal => "bare metal",
            VirtMode::Passthrough => "passthrough VM",
            VirtMode::Vgpu => "vGPU",
            VirtMode::Unknown => "unknown",
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Virtualization {
    /// The conclusion drawn from the witnesses.
    pub mode: VirtMode,
    /// Hypervisor vendor, when one is present ("KVM", "Microsoft Hv", "Firecracker", ...).
    pub hypervisor: Option<String>,
    /// Each source consulted and what it said.
    pub witnesses: Vec<Witness>,
    /// Number of IOMMU groups (None: could not be read).
    pub iommu_groups: Option<u32>,
    /// PCIe bridges above the GPUs with ACS redirection enabled (bare metal only).
    pub acs_enabled_bridges: Vec<String>,
    /// PCIe bridges above the GPUs whose ACS could not be read (bare metal only; their extended
    /// config space needs root): not known to be off.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acs_unknown_bridges: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Witness {
    /// e.g. "cpuinfo hypervisor flag", "cpuid 0x40000000", "dmi sys_vendor", "nvml".
    pub source: String,
    /// What it said, e.g. "present", "KVMKVMKVM", "PassThrough", "not available".
    pub finding: String,
}

impl Inventory {
    pub fn pair(&self, a: usize, b: usize) -> Option<&GpuPair> {
        let (a, b) = if a < b { (a, b) } else { (b, a) };
        self.pairs.iter().find(|p| p.a == a && p.b == b)
    }

    /// Whether GPU `i`'s NVLink state was read ([`Gpu::gives`]): where it was not, the links it
    /// has are not all read, and its pairs' counts are not known. A GPU the inventory does not
    /// list has nothing unread to say.
    pub fn link_state_read(&self, i: usize) -> bool {
        self.gpus
            .iter()
            .find(|g| g.index == i)
            .is_none_or(|g| g.gives(Reading::NvlinkState))
    }

    /// Whether the links between GPUs `a` and `b` are known: both had their NVLink state read.
    pub fn links_known(&self, a: usize, b: usize) -> bool {
        self.link_state_read(a) && self.link_state_read(b)
    }

    /// Of GPUs `a` and `b`, those whose NVLink state could not be read, as "GPU 2" or "GPU 2
    /// and GPU 5"; None where the links between them are known.
    pub fn links_unread_in(&self, a: usize, b: usize) -> Option<String> {
        let unread: Vec<String> = [a, b]
            .into_iter()
            .filter(|i| !self.link_state_read(*i))
            .map(|i| format!("GPU {i}"))
            .collect();
        (!unread.is_empty()).then(|| unread.join(" and "))
    }

    /// The GPUs whose NVLink state could not be read, as "GPU 3".
    pub fn links_unread(&self) -> Vec<String> {
        self.gpus
            .iter()
            .filter(|g| !g.gives(Reading::NvlinkState))
            .map(|g| format!("GPU {}", g.index))
            .collect()
    }

    /// How GPUs `a` and `b` connect, as `nvidia-smi topo -m` prints it ([`GpuPair::topo_label`]);
    /// "?" where the inventory has no such pair or its links are not known.
    pub fn pair_label(&self, a: usize, b: usize) -> String {
        match self.pair(a, b) {
            Some(p) if self.links_known(a, b) => p.topo_label(),
            _ => "?".into(),
        }
    }

    /// Ordered pairs (src, dst) of distinct GPUs.
    pub fn ordered_pairs(&self) -> Vec<(usize, usize)> {
        let n = self.gpus.len();
        (0..n)
            .flat_map(|a| (0..n).filter(move |&b| b != a).map(move |b| (a, b)))
            .collect()
    }

    /// Why a second nodecert process could not open every GPU while this one holds contexts on
    /// them, or None: "GPUs 0, 1 are in compute mode Exclusive_Process".
    pub fn one_process_only(&self) -> Option<String> {
        let mut by_mode: Vec<(ComputeMode, Vec<usize>)> = Vec::new();
        for g in &self.gpus {
            let Some(m) = g.compute_mode.filter(|m| !m.admits_a_second_process()) else {
                continue;
            };
            match by_mode.iter_mut().find(|(x, _)| *x == m) {
                Some((_, ids)) => ids.push(g.index),
                None => by_mode.push((m, vec![g.index])),
            }
        }
        let said: Vec<String> = by_mode
            .iter()
            .map(|(m, ids)| {
                format!(
                    "{} {} in compute mode {}",
                    crate::checks::judge::gpu_list(ids),
                    if ids.len() == 1 { "is" } else { "are" },
                    m.label()
                )
            })
            .collect();
        (!said.is_empty()).then(|| said.join(" and "))
    }

    /// A short model string for the node, e.g. "8x NVIDIA H100 80GB HBM3".
    pub fn summary(&self) -> String {
        match self.gpus.first() {
            None => "no GPUs".into(),
            Some(g) if self.gpus.iter().all(|x| x.name == g.name) => {
                format!("{}x {}", self.gpus.len(), g.name)
            }
            Some(_) => format!("{} GPUs (mixed models)", self.gpus.len()),
        }
    }
}

/// Normalise a PCI bus id: NVML writes "00000000:3B:00.0", CUDA "0000:3B:00.0".
pub fn normalize_bus_id(s: &str) -> String {
    let s = s.trim().to_ascii_lowercase();
    match s.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 && rest.contains(':') => {
            let dom = u32::from_str_radix(dom, 16).unwrap_or(0);
            format!("{:04x}:{}", dom, rest)
        }
        Some((_, rest)) if !rest.contains(':') => format!("0000:{s}"),
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_normalise() {
        assert_eq!(normalize_bus_id("00000000:3B:00.0"), "0000:3b:00.0");
        assert_eq!(normalize_bus_id("0000:3B:00.0"), "0000:3b:00.0");
        assert_eq!(normalize_bus_id("3B:00.0"), "0000:3b:00.0");
    }

    fn with_modes(modes: &[Option<ComputeMode>]) -> Inventory {
        Inventory {
            gpus: modes
                .iter()
                .enumerate()
                .map(|(index, &compute_mode)| Gpu {
                    index,
                    compute_mode,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    /// Only a mode that admits several processes lets a second nodecert process in; an unread
    /// mode is not held against the node (the child's own error would then say it).
    #[test]
    fn gpus_that_admit_one_process_are_named_by_mode() {
        use ComputeMode as M;
        assert_eq!(
            with_modes(&[Some(M::Default), None]).one_process_only(),
            None
        );
        assert_eq!(
            with_modes(&[Some(M::ExclusiveProcess); 3]).one_process_only(),
            Some("GPUs 0, 1, 2 are in compute mode Exclusive_Process".into())
        );
        assert_eq!(
            with_modes(&[
                Some(M::Default),
                Some(M::Prohibited),
                Some(M::ExclusiveThread),
                Some(M::ExclusiveThread)
            ])
            .one_process_only(),
            Some(
                "GPU 1 is in compute mode Prohibited and GPUs 2, 3 are in compute mode \
                 Exclusive_Thread"
                    .into()
            )
        );
    }

    /// Evidence written before the compute mode was read loads with it unknown, and a GPU
    /// whose mode is unknown writes none.
    #[test]
    fn the_compute_mode_is_optional_in_evidence() {
        let g: Gpu = serde_json::from_value(serde_json::to_value(Gpu::default()).unwrap()).unwrap();
        assert_eq!(g.compute_mode, None);
        assert!(serde_json::to_value(Gpu::default())
            .unwrap()
            .get("compute_mode")
            .is_none());
        let g = Gpu {
            compute_mode: Some(ComputeMode::ExclusiveProcess),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&g).unwrap()["compute_mode"],
            "exclusive_process"
        );
    }
}

/// A GPU's compute mode: which processes may hold a CUDA context on it. Sites that give each
/// job whole GPUs (a Slurm prolog, a Kubernetes device plugin) often set exclusive-process.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ComputeMode {
    /// Any number of processes.
    Default,
    /// One process at a time (`nvidia-smi -c EXCLUSIVE_PROCESS`).
    ExclusiveProcess,
    /// One thread of one process (no longer supported by NVIDIA's drivers, still reported).
    ExclusiveThread,
    /// No process at all.
    Prohibited,
}

impl ComputeMode {
    /// As `nvidia-smi -q -d COMPUTE` names it.
    pub fn label(self) -> &'static str {
        match self {
            ComputeMode::Default => "Default",
            ComputeMode::ExclusiveProcess => "Exclusive_Process",
            ComputeMode::ExclusiveThread => "Exclusive_Thread",
            ComputeMode::Prohibited => "Prohibited",
        }
    }

    /// Whether a second process can open the GPU while nodecert holds a context on it.
    pub fn admits_a_second_process(self) -> bool {
        self == ComputeMode::Default
    }
}

/// What the platform says about NVLink SHARP (NVLS, in-switch reductions that NCCL's all-reduce
/// uses on NVSwitch nodes) for one GPU. NVLS needs CUDA multicast objects, and on an NVSwitch
/// node the fabric manager must have registered the GPU with the fabric.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct Nvls {
    /// CUDA's `CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED`; None: not read (no CUDA, or a driver
    /// that does not know the attribute).
    pub multicast: Option<bool>,
    /// NVML's GPU fabric state (`nvmlDeviceGetGpuFabricInfo`); None: not available here (a GPU
    /// before Hopper, a driver before 525, or no NVML).
    pub fabric: Option<FabricState>,
}

/// The GPU's registration with the NVLink fabric, as NVML reports it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FabricState {
    /// The GPU is not on a fabric (no NVSwitch): NVML_GPU_FABRIC_STATE_NOT_SUPPORTED.
    NotSupported,
    /// Registration has not started: the fabric manager is not running.
    NotStarted,
    /// Registration is under way.
    InProgress,
    /// Registered.
    Completed,
    /// Registration finished with an error.
    Failed,
}

impl FabricState {
    pub fn describe(self) -> &'static str {
        match self {
            FabricState::NotSupported => "no fabric",
            FabricState::NotStarted => "not registered: fabric manager not running",
            FabricState::InProgress => "registration in progress",
            FabricState::Completed => "registered",
            FabricState::Failed => "registration failed",
        }
    }
}

/// Whether NVLS can be used, with the reason when it cannot or when that is not known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvlsAvailability {
    Available,
    /// It cannot: "GPU 0 reports no multicast support".
    Unavailable(String),
    /// Not known: "GPU 0: multicast support not read". Unknown is never available.
    Unknown(String),
}

impl Nvls {
    /// This GPU's answer; `who` names it ("GPU 3") in the reason.
    pub fn availability(&self, who: &str) -> NvlsAvailability {
        use NvlsAvailability::*;
        match self.fabric {
            Some(FabricState::NotStarted) => {
                return Unavailable(format!("{who}: fabric manager not running"))
            }
            Some(s @ (FabricState::InProgress | FabricState::Failed)) => {
                return Unavailable(format!("{who}: fabric {}", s.describe()))
            }
            _ => {}
        }
        match self.multicast {
            Some(true) => Available,
            Some(false) => Unavailable(format!("{who} reports no multicast support")),
            None => Unknown(format!("{who}: multicast support not read")),
        }
    }
}

impl Inventory {
    /// Whether NVLS can be used on the node: every GPU must say it can. The first GPU that
    /// cannot names the cause; failing that, the first that could not tell.
    pub fn nvls(&self) -> NvlsAvailability {
        if self.gpus.is_empty() {
            return NvlsAvailability::Unknown("no GPU listed".into());
        }
        let each: Vec<NvlsAvailability> = self
            .gpus
            .iter()
            .map(|g| g.nvls.availability(&format!("GPU {}", g.index)))
            .collect();
        if let Some(u) = each
            .iter()
            .find(|a| matches!(a, NvlsAvailability::Unavailable(_)))
        {
            return u.clone();
        }
        each.into_iter()
            .find(|a| matches!(a, NvlsAvailability::Unknown(_)))
            .unwrap_or(NvlsAvailability::Available)
    }
}

#[cfg(test)]
mod error_counts_tests {
    use super::*;

    fn link(replay: Option<u64>, crc_flit: Option<u64>) -> NvLinkErrors {
        NvLinkErrors {
            replay,
            crc_flit,
            ..Default::default()
        }
    }

    /// A reading takes the place of the last one counter by counter, link by link: what it did
    /// not read keeps its last value, a link it names alone changes, and a link new to it is
    /// added.
    #[test]
    fn an_update_keeps_the_last_known_value_of_each_counter() {
        let mut last = ErrorCounts {
            pcie_replays: Some(3),
            remapped_rows: Some(RemappedRows::default()),
            nvlinks: vec![(0, link(Some(1), Some(2))), (1, link(Some(5), Some(6)))],
            ..Default::default()
        };
        last.ecc.volatile_uncorrected = Some(1);
        last.ecc.sram_corrected = Some(7);
        let mut now = ErrorCounts {
            pcie_replays: None,
            remapped_rows: None,
            retired_pages: Some(RetiredPages::default()),
            nvlinks: vec![(1, link(Some(8), None)), (4, link(Some(0), Some(0)))],
            ..Default::default()
        };
        now.ecc.volatile_uncorrected = Some(2);
        last.update(now);
        assert_eq!(last.pcie_replays, Some(3));
        assert_eq!(last.remapped_rows, Some(RemappedRows::default()));
        assert_eq!(last.retired_pages, Some(RetiredPages::default()));
        assert_eq!(
            (last.ecc.volatile_uncorrected, last.ecc.sram_corrected),
            (Some(2), Some(7))
        );
        assert_eq!(
            last.nvlinks,
            [
                (0, link(Some(1), Some(2))),
                (1, link(Some(8), Some(6))),
                (4, link(Some(0), Some(0)))
            ]
        );
        // A link found down leaves the compared links; one that comes up joins them again.
        last.update(ErrorCounts {
            links_down: vec![1],
            ..Default::default()
        });
        let links: Vec<u32> = last.nvlinks.iter().map(|(l, _)| *l).collect();
        assert_eq!((links, last.links_down.clone()), (vec![0, 4], vec![1]));
        last.update(ErrorCounts {
            nvlinks: vec![(1, link(Some(0), Some(0)))],
            ..Default::default()
        });
        let links: Vec<u32> = last.nvlinks.iter().map(|(l, _)| *l).collect();
        assert_eq!((links, last.links_down.clone()), (vec![0, 4, 1], vec![]));
    }
}

#[cfg(test)]
mod nvls_tests {
    use super::*;

    fn inv(list: &[Nvls]) -> Inventory {
        Inventory {
            gpus: list
                .iter()
                .enumerate()
                .map(|(index, &nvls)| Gpu {
                    index,
                    nvls,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    const OK: Nvls = Nvls {
        multicast: Some(true),
        fabric: Some(FabricState::Completed),
    };

    #[test]
    fn available_only_when_every_gpu_says_so() {
        assert_eq!(inv(&[OK, OK]).nvls(), NvlsAvailability::Available);
        let no_mc = Nvls {
            multicast: Some(false),
            fabric: None,
        };
        assert_eq!(
            inv(&[OK, no_mc]).nvls(),
            NvlsAvailability::Unavailable("GPU 1 reports no multicast support".into())
        );
    }

    #[test]
    fn a_fabric_manager_not_running_is_named_even_if_multicast_says_yes() {
        let fm = Nvls {
            multicast: Some(true),
            fabric: Some(FabricState::NotStarted),
        };
        assert_eq!(
            inv(&[fm, OK]).nvls(),
            NvlsAvailability::Unavailable("GPU 0: fabric manager not running".into())
        );
    }

    #[test]
    fn unknown_is_never_available() {
        // Evidence written before NVLS was recorded: nothing known.
        assert!(matches!(
            inv(&[OK, Nvls::default()]).nvls(),
            NvlsAvailability::Unknown(r) if r == "GPU 1: multicast support not read"
        ));
        assert!(matches!(inv(&[]).nvls(), NvlsAvailability::Unknown(_)));
        // A cause beats an unknown.
        let no = Nvls {
            multicast: Some(false),
            fabric: None,
        };
        assert!(matches!(
            inv(&[Nvls::default(), no]).nvls(),
            NvlsAvailability::Unavailable(_)
        ));
    }

    #[test]
    fn old_evidence_without_the_field_loads_as_unknown() {
        let g: Gpu = serde_json::from_value(serde_json::json!({
            "index": 0, "name": "x", "uuid": "u", "serial": null, "vbios": null,
            "pci_bus_id": "0000:18:00.0", "memory_bytes": 1,
            "pcie": serde_json::to_value(PcieLink::default()).unwrap(),
            "numa_node": null, "cpu_affinity": null, "persistence_mode": null,
            "mig_enabled": null, "ecc_enabled": null,
            "ecc": serde_json::to_value(EccCounts::default()).unwrap(),
            "remapped_rows": null, "retired_pages": null, "throttle_reasons": [],
            "sm_clock_mhz": null, "sm_clock_max_mhz": null, "power_limit_w": null,
            "temperature_c": null, "nvlinks": [], "xids": []
        }))
        .unwrap();
        assert_eq!(g.nvls, Nvls::default());
    }
}

/// Items grouped by key, keys in the order first seen: `[(a, 0), (b, 1), (a, 2)]` gives
/// `[(a, [0, 2]), (b, [1])]` (which GPUs run which VBIOS, sit on which socket).
pub fn group_in_order<K: PartialEq, V>(
    items: impl IntoIterator<Item = (K, V)>,
) -> Vec<(K, Vec<V>)> {
    let mut out: Vec<(K, Vec<V>)> = Vec::new();
    for (k, v) in items {
        match out.iter_mut().find(|(x, _)| *x == k) {
            Some((_, vs)) => vs.push(v),
            None => out.push((k, vec![v])),
        }
    }
    out
}
