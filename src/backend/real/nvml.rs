//! Reading one GPU, its links and a GPU pair through NVML. Every query that the platform does
//! not answer becomes `None` plus a line in the notes ("gpu0 retired pages: not supported").

use crate::inventory::{
    normalize_bus_id, ComputeMode, EccCounts, ErrorCounts, FabricState, Gpu, GpuProcess,
    LinkRemote, LostGpu, NvLink, NvLinkErrors, P2pStatus, PcieLink, RemappedRows, RemoteKind,
    RetiredPages,
};
use crate::platform::{pci, NvmlVirt};
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{
    Clock, ComputeMode as NvmlComputeMode, EccCounter, GpuVirtualizationMode, MemoryError,
    MemoryLocation, P2pCapabilitiesIndex, P2pStatus as NvmlP2p, RetirementCause, TemperatureSensor,
    TopologyLevel,
};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::DeviceArchitecture;
use nvml_wrapper::error::{nvml_try, NvmlError};
use nvml_wrapper::{Device, Nvml};
use std::path::Path;

/// NVLink links are numbered from 0; Hopper and Blackwell have 18.
pub const MAX_LINKS: u32 = 18;

/// nvmlIntNvLinkDeviceType_t values (nvml.h).
const NVLINK_DEVICE_TYPE_GPU: u32 = 0;
const NVLINK_DEVICE_TYPE_SWITCH: u32 = 2;

/// The NVLink generation named by nvmlDeviceGetNvLinkVersion's answer. The call returns an
/// nvmlNvlinkVersion_t (nvml.h: 1 = 1.0, 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0,
/// 7 = 5.0), not the generation: an A100 answers 5 and an H100 6, where the inventory says
/// NVLink 3 and 4. None for 0 (INVALID) and for values this table does not know.
pub fn nvlink_generation(v: u32) -> Option<u32> {
    match v {
        1 => Some(1),
        2 | 3 => Some(2),
        4 | 5 => Some(3),
        6 => Some(4),
        7 => Some(5),
        _ => None,
    }
}

/// Why a query was not answered, in a few words.
pub fn why(e: &NvmlError) -> String {
    match e {
        NvmlError::GpuLost => GPU_LOST.into(),
        NvmlError::NotSupported => "not supported".into(),
        NvmlError::InvalidArg => "not supported (invalid argument)".into(),
        NvmlError::NoPermission => "no permission".into(),
        NvmlError::FunctionNotFound | NvmlError::FailedToLoadSymbol(_) => {
            "not in this driver's NVML".into()
        }
        other => other.to_string().to_lowercase(),
    }
}

/// How NVML_ERROR_GPU_IS_LOST reads in notes and findings.
pub const GPU_LOST: &str = "the GPU fell off the bus";

/// Collects the notes of one subject ("gpu0").
pub struct Asker<'a> {
    pub who: String,
    pub notes: &'a mut Vec<String>,
    /// The first query answered with NVML_ERROR_GPU_IS_LOST: the GPU stopped answering.
    pub lost: Option<String>,
}

impl<'a> Asker<'a> {
    pub fn new(who: impl Into<String>, notes: &'a mut Vec<String>) -> Self {
        Asker {
            who: who.into(),
            notes,
            lost: None,
        }
    }

    /// The answer, or None and a note saying why not.
    pub fn ask<T>(&mut self, what: &str, r: Result<T, NvmlError>) -> Option<T> {
        r.map_err(|e| {
            if matches!(e, NvmlError::GpuLost) && self.lost.is_none() {
                self.lost = Some(what.to_string());
            }
            self.notes.push(format!("{} {what}: {}", self.who, why(&e)))
        })
        .ok()
    }
}

/// Whether MIG mode is on, and the mode the GPU takes at its next reset where that differs
/// (`nvidia-smi -mig` without a reset since). NVML answers NOT_SUPPORTED for a GPU that has no
/// MIG (before Ampere, the L40S, a vGPU as its guest sees it): such a GPU is not in MIG mode,
/// which is known, not unknown, and nothing is pending. Any other failure leaves it unread,
/// with a note.
pub fn mig_mode(
    q: &mut Asker,
    r: Result<nvml_wrapper::structs::device::MigMode, NvmlError>,
) -> (Option<bool>, Option<bool>) {
    match r {
        Err(NvmlError::NotSupported) => (Some(false), None),
        r => match q.ask("mig mode", r) {
            // A pending mode that is neither off (0) nor on (1) says nothing of the next reset.
            Some(m) => (
                Some(m.current == 1),
                (m.pending != m.current && m.pending <= 1).then_some(m.pending == 1),
            ),
            None => (None, None),
        },
    }
}

/// The most processes of one GPU the inventory names; more are counted, not named.
pub const MAX_PROCESSES: usize = 64;

/// The processes on a GPU other than nodecert itself: NVML's compute list (`_v3`, drivers from
/// R470) and its graphics list where the GPU has one, each process once.
/// None, with a note, where the compute list cannot be read.
pub fn processes(nvml: &Nvml, d: &Device, q: &mut Asker) -> Option<Vec<GpuProcess>> {
    let mut list = q.ask("compute processes", d.running_compute_processes())?;
    // A GPU without graphics answers NOT_SUPPORTED; the compute list is what matters.
    match d.running_graphics_processes() {
        Ok(g) => list.extend(g),
        Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => {}
        Err(e) => {
            q.ask::<()>("graphics processes", Err(e));
        }
    }
    Some(others(list, std::process::id(), |pid| {
        nvml.sys_process_name(pid, 64).ok()
    }))
}

/// `list` without `me` and without repeats, at most [`MAX_PROCESSES`], each named by `name`.
fn others(
    list: Vec<nvml_wrapper::struct_wrappers::device::ProcessInfo>,
    me: u32,
    name: impl Fn(u32) -> Option<String>,
) -> Vec<GpuProcess> {
    use nvml_wrapper::enums::device::UsedGpuMemory;
    let mut seen = std::collections::BTreeSet::new();
    list.into_iter()
        .filter(|p| p.pid != me && seen.insert(p.pid))
        .take(MAX_PROCESSES)
        .map(|p| GpuProcess {
            pid: p.pid,
            name: name(p.pid).filter(|n| !n.trim().is_empty()),
            memory_bytes: match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(b),
                UsedGpuMemory::Unavailable => None,
            },
        })
        .collect()
}

/// NVML's compute mode as the inventory records it.
pub fn compute_mode(m: NvmlComputeMode) -> ComputeMode {
    match m {
        NvmlComputeMode::Default => ComputeMode::Default,
        NvmlComputeMode::ExclusiveProcess => ComputeMode::ExclusiveProcess,
        NvmlComputeMode::ExclusiveThread => ComputeMode::ExclusiveThread,
        NvmlComputeMode::Prohibited => ComputeMode::Prohibited,
    }
}

/// NVML's throttle reasons as nodecert names them (crate::suite::THROTTLE_REASONS).
pub fn throttle_names(r: ThrottleReasons) -> Vec<String> {
    let table = [
        (ThrottleReasons::GPU_IDLE, "gpu_idle"),
        (
            ThrottleReasons::APPLICATIONS_CLOCKS_SETTING,
            "applications_clocks_setting",
        ),
        (ThrottleReasons::SW_POWER_CAP, "sw_power_cap"),
        (ThrottleReasons::HW_SLOWDOWN, "hw_slowdown"),
        (ThrottleReasons::SYNC_BOOST, "sync_boost"),
        (ThrottleReasons::SW_THERMAL_SLOWDOWN, "sw_thermal_slowdown"),
        (ThrottleReasons::HW_THERMAL_SLOWDOWN, "hw_thermal_slowdown"),
        (
            ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN,
            "hw_power_brake_slowdown",
        ),
        (
            ThrottleReasons::DISPLAY_CLOCK_SETTING,
            "display_clock_setting",
        ),
    ];
    table
        .iter()
        .filter(|(f, _)| r.contains(*f))
        .map(|(_, n)| n.to_string())
        .collect()
}

/// nvml.h's nvmlAffinityScope_t for NUMA nodes (the wrapper does not re-export it).
const NVML_AFFINITY_SCOPE_NODE: u32 = 0;

/// An NVML bit mask as 64-bit words (c_ulong is u64 here, u32 on 32-bit targets).
#[allow(clippy::unnecessary_cast)]
fn words(m: Vec<std::ffi::c_ulong>) -> Vec<u64> {
    m.iter().map(|w| *w as u64).collect()
}

/// The one NUMA node set in an NVML node mask; None when none or several are set (a GPU that is
/// near several nodes has no single node to expect).
pub fn single_node(mask: &[u64]) -> Option<i32> {
    let mut set = set_bits(mask);
    let first = set.next()?;
    match set.next() {
        None => i32::try_from(first).ok(),
        Some(_) => None,
    }
}

/// The positions of the bits set in an NVML mask (64 a word, lowest first), in order.
fn set_bits(mask: &[u64]) -> impl Iterator<Item = usize> + '_ {
    mask.iter().enumerate().flat_map(|(w, bits)| {
        (0..64)
            .filter(move |b| bits >> b & 1 == 1)
            .map(move |b| w * 64 + b)
    })
}

/// A CPU bitmask (64 CPUs a word, lowest first) as a list like "0-15,32-47".
pub fn cpu_list(mask: &[u64]) -> Option<String> {
    let cpus: Vec<usize> = set_bits(mask).collect();
    (!cpus.is_empty()).then(|| crate::platform::numa::cpulist_text(&cpus))
}

/// `nvidia-smi topo -m`'s label for NVML's common-ancestor level.
pub fn topo_label(level: TopologyLevel) -> &'static str {
    match level {
        TopologyLevel::Internal | TopologyLevel::Single => "PIX",
        TopologyLevel::Multiple => "PXB",
        TopologyLevel::HostBridge => "PHB",
        TopologyLevel::Node => "NODE",
        TopologyLevel::System => "SYS",
    }
}

pub fn virt_mode(m: GpuVirtualizationMode) -> NvmlVirt {
    match m {
        GpuVirtualizationMode::Bare => NvmlVirt::Bare,
        GpuVirtualizationMode::PassThrough => NvmlVirt::PassThrough,
        GpuVirtualizationMode::Vgpu => NvmlVirt::Vgpu,
        GpuVirtualizationMode::HostVgpu => NvmlVirt::HostVgpu,
        GpuVirtualizationMode::HostVsga => NvmlVirt::HostVsga,
    }
}

/// Read everything about one GPU except its links and XIDs. `root` is the sysfs root ("/").
/// A GPU that stops answering (NVML_ERROR_GPU_IS_LOST) is added to `lost`.
pub fn read_gpu(
    index: usize,
    d: &Device,
    nvml: &Nvml,
    root: &Path,
    notes: &mut Vec<String>,
    lost: &mut Vec<LostGpu>,
) -> Gpu {
    let mut q = Asker::new(format!("gpu{index}"), notes);
    let pci_bus_id = q
        .ask("pci bus id", d.pci_info())
        .map(|p| normalize_bus_id(&p.bus_id))
        .unwrap_or_default();
    let memory = q.ask("memory", d.memory_info());
    let (mig_enabled, mig_pending) = mig_mode(&mut q, d.mig_mode());
    let throttle = q
        .ask("throttle reasons", d.current_throttle_reasons())
        .map(throttle_names);
    let name = q.ask("name", d.name());
    let mut g = Gpu {
        index,
        name: name.clone().unwrap_or_else(|| "unknown GPU".into()),
        uuid: q.ask("uuid", d.uuid()).unwrap_or_default(),
        serial: q.ask("serial", d.serial()),
        vbios: q.ask("vbios", d.vbios_version()),
        memory_bytes: memory.as_ref().map_or(0, |m| m.total),
        memory_used_bytes: memory.as_ref().map(|m| m.used),
        // Before any context of nodecert's own: in a container NVML gives host PIDs, and
        // nodecert could not tell its own context from another's.
        processes: processes(nvml, d, &mut q),
        pcie: pcie(d, &mut q),
        persistence_mode: q.ask("persistence mode", d.is_in_persistent_mode()),
        mig_enabled,
        mig_pending,
        compute_mode: q.ask("compute mode", d.compute_mode()).map(compute_mode),
        ecc_enabled: q
            .ask("ecc mode", d.is_ecc_enabled())
            .map(|e| e.currently_enabled),
        throttle_reasons: throttle.clone().unwrap_or_default(),
        sm_clock_mhz: q.ask("sm clock", d.clock_info(Clock::SM)),
        sm_clock_max_mhz: q.ask("sm clock max", d.max_clock_info(Clock::SM)),
        power_limit_w: q
            .ask("power limit", d.enforced_power_limit())
            .map(|mw| mw as f64 / 1000.0),
        temperature_c: q
            .ask("temperature", d.temperature(TemperatureSensor::Gpu))
            .map(f64::from),
        pci_bus_id,
        ..Default::default()
    };
    if throttle.is_none() {
        // Unread is not "not throttled".
        g.unavailable
            .push(crate::inventory::Reading::ThrottleReasons);
    }
    // A name or a size NVML did not give is unknown: "unknown GPU" and 0 bytes are what the
    // inventory shows, never what a suite's model or memory floor is held to.
    if name.is_none() {
        g.unavailable.push(crate::inventory::Reading::Model);
    }
    if memory.is_none() {
        g.unavailable.push(crate::inventory::Reading::Memory);
    }
    placement(&mut g, d, root, &mut q);
    g.ecc = ecc_counts(d, &mut q, g.ecc_enabled == Some(false));
    let rows = remapped_rows(nvml, d);
    // A GPU without row remapping (before Ampere) answers NOT_SUPPORTED, or an NVML that old
    // lacks the call: its retired pages are its reading. A GPU that has one (Ampere on) and
    // answers so anyway, as NVML does with MIG on, or any other failure, leaves the remap unread,
    // and the retired pages (which such GPUs stopped counting, or do not answer) do not stand
    // for it: the reading is not available.
    let remapper = g.mig_enabled == Some(true) || has_row_remapping(d.architecture());
    if matches!(&rows, Err(e) if remapper || !remap_absent(e)) {
        g.unavailable.push(crate::inventory::Reading::RemappedRows);
    }
    g.remapped_rows = q.ask("remapped rows", rows);
    g.retired_pages = retired_pages(d, &mut q);
    if let Some(what) = q.lost {
        lost.push(LostGpu {
            index: Some(index),
            nvml_index: None,
            pci_bus_id: (!g.pci_bus_id.is_empty()).then(|| g.pci_bus_id.clone()),
            detail: what,
        });
    }
    g
}

fn pcie(d: &Device, q: &mut Asker) -> PcieLink {
    PcieLink {
        gen_current: q.ask("pcie gen", d.current_pcie_link_gen()),
        gen_max: q.ask("pcie max gen", d.max_pcie_link_gen()),
        width_current: q.ask("pcie width", d.current_pcie_link_width()),
        width_max: q.ask("pcie max width", d.max_pcie_link_width()),
        // Read under load by the backend when the reading at rest is below the maximum.
        gen_loaded: None,
        width_loaded: None,
        replay_counter: q
            .ask("pcie replay counter", d.pcie_replay_counter())
            .map(u64::from),
    }
}

/// NUMA node and CPU affinity: NVML first, then sysfs.
fn placement(g: &mut Gpu, d: &Device, root: &Path, q: &mut Asker) {
    // The CPU-side node the GPU hangs off (nvidia-smi topo -m's "NUMA Affinity"): the kernel's
    // numa_node of the PCI device, else NVML's memory affinity. Not nvmlDeviceGetNumaNodeId:
    // that is the node of the GPU's own memory, which exists only where GPU memory is a NUMA
    // node (Grace Hopper), and is not the node whose CPUs sit next to the GPU.
    g.numa_node = pci::numa_node(root, &g.pci_bus_id).or_else(|| {
        d.memory_affinity(4, NVML_AFFINITY_SCOPE_NODE)
            .ok()
            .and_then(|m| single_node(&words(m)))
    });
    if g.numa_node.is_none() {
        q.notes.push(format!("{} numa node: not reported", q.who));
    }
    g.cpu_socket = g.numa_node.and_then(|n| pci::numa_socket(root, n));
    if g.numa_node.is_some() && g.cpu_socket.is_none() {
        q.notes.push(format!("{} cpu socket: not reported", q.who));
    }
    g.cpu_affinity = d
        .cpu_affinity(64)
        .ok()
        .and_then(|m| cpu_list(&words(m)))
        .or_else(|| pci::local_cpulist(root, &g.pci_bus_id));
    if g.cpu_affinity.is_none() {
        q.notes
            .push(format!("{} cpu affinity: not reported", q.who));
    }
}

fn ecc_counts(d: &Device, q: &mut Asker, ecc_off: bool) -> EccCounts {
    use EccCounter::{Aggregate, Volatile};
    use MemoryError::{Corrected, Uncorrected};
    if ecc_off {
        q.notes.push(format!(
            "{} ecc error counts: not counted (ECC is off)",
            q.who
        ));
        return EccCounts::default();
    }
    let mut loc = |what: &str, e, l| q.ask(what, d.memory_error_counter(e, Aggregate, l));
    let sram_corrected = loc("sram corrected errors", Corrected, MemoryLocation::SRAM);
    let sram_uncorrected = loc("sram uncorrected errors", Uncorrected, MemoryLocation::SRAM);
    let dram_c = loc("dram corrected errors", Corrected, MemoryLocation::Device);
    let dram_u = loc(
        "dram uncorrected errors",
        Uncorrected,
        MemoryLocation::Device,
    );
    EccCounts {
        volatile_corrected: q.ask(
            "volatile corrected ecc",
            d.total_ecc_errors(Corrected, Volatile),
        ),
        volatile_uncorrected: q.ask(
            "volatile uncorrected ecc",
            d.total_ecc_errors(Uncorrected, Volatile),
        ),
        aggregate_corrected: q.ask(
            "aggregate corrected ecc",
            d.total_ecc_errors(Corrected, Aggregate),
        ),
        aggregate_uncorrected: q.ask(
            "aggregate uncorrected ecc",
            d.total_ecc_errors(Uncorrected, Aggregate),
        ),
        sram_corrected,
        sram_uncorrected,
        // Counters come from the driver: a sum must neither wrap (release) nor panic (debug).
        dram_errors: dram_c.zip(dram_u).map(|(c, u)| c.saturating_add(u)),
    }
}

/// Whether the GPU's architecture remaps rows (Ampere and later); an architecture not read says
/// nothing.
fn has_row_remapping(arch: Result<DeviceArchitecture, NvmlError>) -> bool {
    matches!(
        arch,
        Ok(DeviceArchitecture::Ampere
            | DeviceArchitecture::Ada
            | DeviceArchitecture::Hopper
            | DeviceArchitecture::Blackwell
            | DeviceArchitecture::Unknown)
    )
}

/// Whether a failure of nvmlDeviceGetRemappedRows says the GPU has no row remapping (rather
/// than that the reading failed).
fn remap_absent(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::NotSupported | NvmlError::FunctionNotFound | NvmlError::FailedToLoadSymbol(_)
    )
}

/// nvmlDeviceGetRemappedRows through the raw library (the wrapper has no call for it).
fn remapped_rows(nvml: &Nvml, d: &Device) -> Result<RemappedRows, NvmlError> {
    let f = nvml
        .lib()
        .nvmlDeviceGetRemappedRows
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    let (mut cor, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // Safety: a valid device handle and four out-pointers to live u32s.
    nvml_try(unsafe { f(d.handle(), &mut cor, &mut unc, &mut pending, &mut failure) })?;
    Ok(RemappedRows {
        correctable: cor.into(),
        uncorrectable: unc.into(),
        pending: pending != 0,
        failure: failure != 0,
    })
}

fn retired_pages(d: &Device, q: &mut Asker) -> Option<RetiredPages> {
    let r = (|| {
        Ok::<_, NvmlError>(RetiredPages {
            single_bit: d
                .retired_pages(RetirementCause::MultipleSingleBitEccErrors)?
                .len() as u64,
            double_bit: d.retired_pages(RetirementCause::DoubleBitEccError)?.len() as u64,
            pending: d.are_pages_pending_retired()?,
        })
    })();
    q.ask("retired pages", r)
}

/// The GPU's registration with the NVLink fabric (nvmlDeviceGetGpuFabricInfo, Hopper and later,
/// driver 525 and later; the wrapper has no call for it). None, with a note, where NVML does not
/// answer: "not available here", never "no fabric".
pub fn fabric_state(
    nvml: &Nvml,
    d: &Device,
    who: &str,
    notes: &mut Vec<String>,
) -> Option<FabricState> {
    let r = (|| {
        let f = nvml
            .lib()
            .nvmlDeviceGetGpuFabricInfo
            .as_ref()
            .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
        let mut info = FabricInfoV1 {
            cluster_uuid: [0; 16],
            status: 0,
            clique_id: 0,
            state: 0,
        };
        // Safety: a valid device handle and a live out-pointer to a struct laid out as the v1
        // nvmlGpuFabricInfo_t the symbol takes (the wrapper does not export that type).
        nvml_try(unsafe { f(d.handle(), (&mut info as *mut FabricInfoV1).cast()) })?;
        Ok(fabric_from_raw(u32::from(info.state), info.status))
    })();
    Asker::new(who, notes).ask("gpu fabric state", r)
}

/// nvmlGpuFabricInfo_t (v1), as nvml.h lays it out.
#[repr(C)]
struct FabricInfoV1 {
    cluster_uuid: [u8; 16],
    /// nvmlReturn_t of the registration.
    status: u32,
    clique_id: u32,
    /// nvmlGpuFabricState_t.
    state: u8,
}

/// NVML's fabric state and registration status, as nodecert names them.
pub fn fabric_from_raw(state: u32, status: u32) -> FabricState {
    match state {
        0 => FabricState::NotSupported,
        1 => FabricState::NotStarted,
        2 => FabricState::InProgress,
        // Registration finished; its status says whether it worked (0: NVML_SUCCESS).
        3 if status == 0 => FabricState::Completed,
        _ => FabricState::Failed,
    }
}

/// The far end of a link: GPU or NVSwitch, via the raw library (the wrapper's
/// `remote_device_type()` always answers Unknown).
fn remote_kind(nvml: &Nvml, d: &Device, link: u32) -> Option<RemoteKind> {
    let f = nvml
        .lib()
        .nvmlDeviceGetNvLinkRemoteDeviceType
        .as_ref()
        .ok()?;
    let mut t: u32 = u32::MAX;
    // Safety: a valid device handle, a link index NVML checks, a live out-pointer.
    nvml_try(unsafe { f(d.handle(), link, &mut t) }).ok()?;
    Some(match t {
        NVLINK_DEVICE_TYPE_GPU => RemoteKind::Gpu,
        NVLINK_DEVICE_TYPE_SWITCH => RemoteKind::NvSwitch,
        _ => RemoteKind::Unknown,
    })
}

/// A link's error counters (None: not read).
fn link_errors(nvml: &Nvml, d: &Device, l: u32, link: &nvml_wrapper::NvLink) -> NvLinkErrors {
    let counter = |c| link.error_counter(c).ok();
    NvLinkErrors {
        replay: counter(ErrorCounter::DlReplay),
        recovery: counter(ErrorCounter::DlRecovery),
        crc_flit: counter(ErrorCounter::DlCrcFlit),
        crc_data: counter(ErrorCounter::DlCrcData),
        ecc_data: link_ecc_data(nvml, d, l),
    }
}

/// nvml.h's NVML_NVLINK_ERROR_DL_ECC_DATA (nvmlNvLinkErrorCounter_t), which the wrapper does not
/// export.
const NVLINK_ERROR_DL_ECC_DATA: std::os::raw::c_uint = 4;

/// NVML_NVLINK_ERROR_DL_ECC_DATA of one link, through the raw library (the wrapper's enum stops
/// at the CRC counters): Hopper's links count data errors by ECC. None where NVML does not
/// answer (before NVLink 4).
fn link_ecc_data(nvml: &Nvml, d: &Device, l: u32) -> Option<u64> {
    let f = nvml.lib().nvmlDeviceGetNvLinkErrorCounter.as_ref().ok()?;
    let mut v = 0u64;
    // Safety: a valid device handle, a link index NVML checks, a counter of nvml.h's enum and
    // a live out-pointer.
    nvml_try(unsafe { f(d.handle(), l, NVLINK_ERROR_DL_ECC_DATA, &mut v) }).ok()?;
    Some(v)
}

/// One GPU's error counters now, read as [`read_gpu`] and [`read_links`] read them; why one is
/// not read is the inventory's to say, so no note is kept.
pub fn read_error_counts(nvml: &Nvml, d: &Device) -> ErrorCounts {
    let mut notes = Vec::new();
    let mut q = Asker::new("", &mut notes);
    let ecc_off = q
        .ask("ecc mode", d.is_ecc_enabled())
        .is_some_and(|e| !e.currently_enabled);
    let mut nvlinks = Vec::new();
    let mut links_down = Vec::new();
    for l in 0..MAX_LINKS {
        let link = d.link_wrapper_for(l);
        match link.is_active() {
            Ok(true) => nvlinks.push((l, link_errors(nvml, d, l, &link))),
            Ok(false) => links_down.push(l),
            Err(_) => break,
        }
    }
    ErrorCounts {
        ecc: ecc_counts(d, &mut q, ecc_off),
        remapped_rows: q.ask("remapped rows", remapped_rows(nvml, d)),
        retired_pages: retired_pages(d, &mut q),
        pcie_replays: q
            .ask("pcie replay counter", d.pcie_replay_counter())
            .map(u64::from),
        nvlinks,
        links_down,
    }
}

/// Links 0..18 until NVML says there are no more.
pub fn read_links(nvml: &Nvml, d: &Device, who: &str, notes: &mut Vec<String>) -> Links {
    let mut out = Vec::new();
    let mut counters_missing = false;
    for l in 0..MAX_LINKS {
        let link = d.link_wrapper_for(l);
        let active = match link.is_active() {
            Ok(a) => a,
            // The first link past the GPU's last (none on a GPU without NVLink).
            Err(NvmlError::NotSupported | NvmlError::InvalidArg) => break,
            // Any other answer (the GPU lost, the driver failing) says nothing of this link or
            // of those after it: the links read are not all there are.
            Err(e) => {
                notes.push(format!("{who} nvlink {l}: state not read ({})", why(&e)));
                return Links {
                    links: out,
                    state_unread: true,
                };
            }
        };
        let errors = link_errors(nvml, d, l, &link);
        counters_missing |= active && errors == NvLinkErrors::default();
        out.push(NvLink {
            link: l,
            active,
            version: link.version().ok().and_then(nvlink_generation),
            remote: LinkRemote {
                kind: remote_kind(nvml, d, l).unwrap_or_default(),
                pci_bus_id: link
                    .remote_pci_info()
                    .ok()
                    .map(|p| normalize_bus_id(&p.bus_id)),
                gpu: None,
            },
            errors,
        });
    }
    if out.is_empty() {
        notes.push(format!("{who} nvlink: not supported (no NVLink)"));
    }
    if counters_missing {
        notes.push(format!("{who} nvlink error counters: not reported"));
    }
    Links {
        links: out,
        state_unread: false,
    }
}

/// A GPU's NVLinks as [`read_links`] read them.
pub struct Links {
    /// The links read, in order, up to the first that answered no state.
    pub links: Vec<NvLink>,
    /// A link's state could not be read (not the end of the GPU's links): the links read are
    /// not all there are.
    pub state_unread: bool,
}

/// Peer access as NVML reports it, and the PCIe path, for one pair.
pub fn read_pair(
    nvml: &Nvml,
    a: &Device,
    b: &Device,
    who: &str,
    notes: &mut Vec<String>,
) -> (P2pStatus, Option<String>) {
    let mut q = Asker::new(who, notes);
    let mut cap = |what: &str, i| q.ask(what, a.p2p_status(b, i)).map(|s| s == NvmlP2p::Ok);
    let p2p = P2pStatus {
        read: cap("p2p read", P2pCapabilitiesIndex::Read),
        write: cap("p2p write", P2pCapabilitiesIndex::Write),
        nvlink: cap("p2p nvlink", P2pCapabilitiesIndex::NvLink),
        atomics: cap("p2p atomics", P2pCapabilitiesIndex::Atomics),
    };
    let path = q
        .ask("topology", nvml.topology_common_ancestor(a, b))
        .map(|l| topo_label(l).to_string());
    (p2p, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nodecert's own entry is left out, a process listed twice (compute and graphics) counts
    /// once, an empty name is no name, memory NVML does not give is unknown, and the list is
    /// bounded.
    #[test]
    fn other_processes_leave_nodecert_out_and_are_bounded() {
        use nvml_wrapper::enums::device::UsedGpuMemory;
        use nvml_wrapper::struct_wrappers::device::ProcessInfo;
        let p = |pid, used| ProcessInfo {
            pid,
            used_gpu_memory: used,
            gpu_instance_id: None,
            compute_instance_id: None,
        };
        let list = vec![
            p(10, UsedGpuMemory::Used(5)),
            p(99, UsedGpuMemory::Used(7)),
            p(11, UsedGpuMemory::Unavailable),
            p(10, UsedGpuMemory::Used(5)),
        ];
        let name = |pid: u32| match pid {
            10 => Some("python3".to_string()),
            11 => Some(" ".to_string()),
            _ => None,
        };
        assert_eq!(
            others(list, 99, name),
            [
                GpuProcess {
                    pid: 10,
                    name: Some("python3".into()),
                    memory_bytes: Some(5)
                },
                GpuProcess {
                    pid: 11,
                    name: None,
                    memory_bytes: None
                },
            ]
        );
        let many: Vec<ProcessInfo> = (0..1000).map(|i| p(i, UsedGpuMemory::Used(1))).collect();
        assert_eq!(others(many, 5000, |_| None).len(), MAX_PROCESSES);
    }

    #[test]
    fn throttle_reasons_use_suite_names() {
        let all = ThrottleReasons::all();
        let names = throttle_names(all);
        for n in &names {
            assert!(crate::suite::THROTTLE_REASONS.contains(&n.as_str()), "{n}");
        }
        assert_eq!(names.len(), crate::suite::THROTTLE_REASONS.len());
        assert!(throttle_names(ThrottleReasons::NONE).is_empty());
        assert_eq!(
            throttle_names(ThrottleReasons::HW_SLOWDOWN | ThrottleReasons::GPU_IDLE),
            vec!["gpu_idle", "hw_slowdown"]
        );
    }

    #[test]
    fn cpu_masks_become_lists() {
        assert_eq!(cpu_list(&[0xffff]).as_deref(), Some("0-15"));
        assert_eq!(
            cpu_list(&[0xffff_0000_0000_ffff, 0x1]).as_deref(),
            Some("0-15,48-64")
        );
        assert_eq!(cpu_list(&[0b1010]).as_deref(), Some("1,3"));
        assert_eq!(cpu_list(&[0, 0]), None);
    }

    #[test]
    fn a_node_mask_names_one_node_or_none() {
        assert_eq!(single_node(&[0b10]), Some(1));
        assert_eq!(single_node(&[0, 0b1]), Some(64));
        assert_eq!(single_node(&[0b11]), None, "near two nodes: no single one");
        assert_eq!(single_node(&[0, 0]), None);
    }

    #[test]
    fn topology_levels_read_like_topo_m() {
        assert_eq!(topo_label(TopologyLevel::Single), "PIX");
        assert_eq!(topo_label(TopologyLevel::Multiple), "PXB");
        assert_eq!(topo_label(TopologyLevel::HostBridge), "PHB");
        assert_eq!(topo_label(TopologyLevel::Node), "NODE");
        assert_eq!(topo_label(TopologyLevel::System), "SYS");
    }

    #[test]
    fn nvlink_versions_are_generations() {
        // nvmlNvlinkVersion_t as an A100 (3.1), an H100 (4.0) and a B200 (5.0) answer it.
        assert_eq!(nvlink_generation(5), Some(3));
        assert_eq!(nvlink_generation(6), Some(4));
        assert_eq!(nvlink_generation(7), Some(5));
        assert_eq!(nvlink_generation(3), Some(2));
        assert_eq!(nvlink_generation(0), None);
        assert_eq!(nvlink_generation(99), None);
    }

    #[test]
    fn unanswered_queries_become_notes() {
        let mut notes = Vec::new();
        let mut q = Asker::new("gpu0", &mut notes);
        assert_eq!(
            q.ask::<u32>("retired pages", Err(NvmlError::NotSupported)),
            None
        );
        assert_eq!(q.ask("serial", Ok(7)), Some(7));
        assert_eq!(q.lost, None);
        assert_eq!(notes, vec!["gpu0 retired pages: not supported"]);
    }

    #[test]
    fn a_gpu_that_stops_answering_is_marked_lost_at_the_first_query() {
        let mut notes = Vec::new();
        let mut q = Asker::new("gpu2", &mut notes);
        assert_eq!(q.ask::<u32>("ecc mode", Err(NvmlError::GpuLost)), None);
        assert_eq!(q.ask::<u32>("temperature", Err(NvmlError::GpuLost)), None);
        assert_eq!(q.lost.as_deref(), Some("ecc mode"));
        assert_eq!(notes[0], "gpu2 ecc mode: the GPU fell off the bus");
    }
}
