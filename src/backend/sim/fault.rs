//! Faults injected into a simulated node (`--inject NAME[:key=value,...]`, or `[[faults]]` in a
//! node file): what each does, how it is written, and which values it may take.

use super::*;

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
    NvlinkDownUnderLoad,
}

impl FaultKind {
    pub const ALL: [FaultKind; 37] = [
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
        FaultKind::NvlinkDownUnderLoad,
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
            FaultKind::NvlinkDownUnderLoad => "nvlink-down-under-load",
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
                "a GPU raises an XID under load: absent when the node was read, seen at the \
                 next reading: after the first check that ran on the GPUs, or at the end of \
                 the run where none did (gpu=N, code=C; default 48, a double-bit ECC error)"
            }
            FaultKind::EccUnderLoad => {
                "a GPU's memory takes an uncorrectable ECC error under load: its counts are clean \
                 when the node is read; from the next reading on (after the first check that \
                 ran on the GPUs, or at the end of the run) one more uncorrectable error is \
                 counted and a row remap is pending (gpu=N)"
            }
            FaultKind::LinkErrorsUnderLoad => {
                "a GPU's links retry under load: from the next reading on (after the first check \
                 that ran on the GPUs, or at the end of the run) its first active NVLink has \
                 counted 500 more CRC errors and its PCIe link 200 more replays (gpu=N)"
            }
            FaultKind::NvlinkDownUnderLoad => {
                "a GPU's NVLink goes down under load: active when the node is read; from the next \
                 reading on (after the first check that ran on the GPUs, or at the end of the \
                 run) NVML reports its first active link inactive (gpu=N)"
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

/// The largest multiplier a fault takes.
pub const MAX_FAULT_FACTOR: f64 = 100.0;
/// The oldest an injected kernel-log XID can be, hours (10 years).
pub const MAX_FAULT_AGE_H: f64 = 87_600.0;

pub(super) fn check_fault(f: &Fault, n: usize, nics: Option<usize>) -> Result<(), String> {
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
