//! A stand-in for `libnvidia-ml.so.1`, for tests only: it exports the NVML functions nodecert
//! calls and answers them from a node description (JSON) named by the environment variable
//! `FAKE_NVML_NODE` (see [`desc::Node`]). Tests copy the built library to a folder as
//! `libnvidia-ml.so.1` and run nodecert with that folder in `LD_LIBRARY_PATH`, so nodecert
//! loads it exactly as it loads the real one.
//!
//! nvml-wrapper resolves every symbol lazily and fails only the calls whose symbol is missing,
//! so the fake exports only what nodecert calls. Anything the description leaves out answers
//! NVML_ERROR_NOT_SUPPORTED. No function panics or dereferences a null pointer: a bad
//! argument answers NVML_ERROR_INVALID_ARGUMENT, as NVML does.
#![allow(non_snake_case, non_upper_case_globals, clippy::missing_safety_doc)]

pub mod desc;

use desc::{ErrorsLater, Failure, Gpu, Lost, Node};
use nvml_wrapper_sys::bindings::*;
use std::collections::{BTreeMap, VecDeque};
use std::ffi::{c_char, c_int, c_uint, c_ulong, c_ulonglong};
use std::sync::{Mutex, OnceLock};

/// The environment variable that names the node description.
pub const NODE_VAR: &str = "FAKE_NVML_NODE";

const SUCCESS: nvmlReturn_t = nvmlReturn_enum_NVML_SUCCESS;
const UNINITIALIZED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
const INVALID_ARGUMENT: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
const NOT_SUPPORTED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
const INSUFFICIENT_SIZE: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
const GPU_IS_LOST: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
const TIMEOUT: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_TIMEOUT;
const UNKNOWN: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_UNKNOWN;

/// Every function this library exports: names in a description's `errors` must be one of them.
pub const EXPORTED: &[&str] = &[
    "nvmlInit_v2",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlSystemGetNVMLVersion",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetVbiosVersion",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlSystemGetProcessName",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetMemoryAffinity",
    "nvmlDeviceGetCpuAffinity",
    "nvmlDeviceGetMemoryErrorCounter",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPages_v2",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetGpuFabricInfo",
    "nvmlDeviceGetVirtualizationMode",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkVersion",
    "nvmlDeviceGetNvLinkErrorCounter",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetP2PStatus",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetCreate",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
];

static NODE: OnceLock<Result<Node, String>> = OnceLock::new();

/// How often each count of `errors_later` was read, by GPU and count.
static READS: Mutex<BTreeMap<(usize, String), u32>> = Mutex::new(BTreeMap::new());

/// The later value of a count of GPU `i` (`pick`, from its `errors_later`), where this is not
/// the count's first reading; each call is a reading.
fn later<T>(
    i: usize,
    g: &Gpu,
    count: &str,
    pick: impl FnOnce(&ErrorsLater) -> Option<T>,
) -> Option<T> {
    let v = g.errors_later.as_ref().and_then(pick)?;
    let mut reads = READS.lock().ok()?;
    let n = reads.entry((i, count.to_string())).or_insert(0);
    *n += 1;
    (*n > 1).then_some(v)
}

fn code(f: Failure) -> nvmlReturn_t {
    match f {
        Failure::NotSupported => NOT_SUPPORTED,
        Failure::GpuIsLost => GPU_IS_LOST,
        Failure::NoPermission => nvmlReturn_enum_NVML_ERROR_NO_PERMISSION,
        Failure::InvalidArgument => INVALID_ARGUMENT,
        Failure::DriverNotLoaded => nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED,
        Failure::Unknown => UNKNOWN,
    }
}

fn load() -> Result<Node, String> {
    let path = std::env::var_os(NODE_VAR).ok_or_else(|| format!("{NODE_VAR} is not set"))?;
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.to_string_lossy()))?;
    Node::parse(&text, EXPORTED).map_err(|e| format!("{}: {e}", path.to_string_lossy()))
}

/// The node, once nvmlInit_v2 has loaded it.
fn node() -> Result<&'static Node, nvmlReturn_t> {
    match NODE.get() {
        Some(Ok(n)) => Ok(n),
        _ => Err(UNINITIALIZED),
    }
}

/// A node-wide function: the node, or the error the description gives the function.
fn system(func: &str) -> Result<&'static Node, nvmlReturn_t> {
    let n = node()?;
    match n.errors.get(func) {
        Some(f) => Err(code(*f)),
        None => Ok(n),
    }
}

/// Device handles are the GPU's index plus one: never null, never dereferenced.
fn handle(i: usize) -> nvmlDevice_t {
    (i + 1) as nvmlDevice_t
}

fn index(d: nvmlDevice_t) -> Result<usize, nvmlReturn_t> {
    let n = node()?;
    (d as usize)
        .checked_sub(1)
        .filter(|i| *i < n.gpus.len())
        .ok_or(INVALID_ARGUMENT)
}

/// The GPU behind a handle, or the error `func` answers on it (lost, or named in `errors`).
fn gpu(d: nvmlDevice_t, func: &str) -> Result<(usize, &'static Gpu), nvmlReturn_t> {
    let i = index(d)?;
    let g = &node()?.gpus[i];
    if g.lost.is_some() {
        return Err(GPU_IS_LOST);
    }
    if let Some(f) = g.errors.get(func) {
        return Err(code(*f));
    }
    match later(i, g, &format!("call {func}"), |l| {
        l.errors.get(func).copied()
    }) {
        Some(f) => Err(code(f)),
        None => Ok((i, g)),
    }
}

/// Write `v` through `out`.
unsafe fn put<T>(out: *mut T, v: T) -> nvmlReturn_t {
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    out.write(v);
    SUCCESS
}

/// One reading of one GPU: the value `f` finds in the description (None: NOT_SUPPORTED).
unsafe fn read<T>(
    d: nvmlDevice_t,
    func: &str,
    out: *mut T,
    f: impl FnOnce(&Gpu) -> Option<T>,
) -> nvmlReturn_t {
    match gpu(d, func) {
        Err(e) => e,
        Ok((_, g)) => match f(g) {
            Some(v) => put(out, v),
            None => NOT_SUPPORTED,
        },
    }
}

/// Copy `s` and its NUL into a C buffer of `len` bytes.
unsafe fn put_str(buf: *mut c_char, len: c_uint, s: &str) -> nvmlReturn_t {
    if buf.is_null() {
        return INVALID_ARGUMENT;
    }
    let bytes = s.as_bytes();
    if bytes.len() + 1 > len as usize {
        return INSUFFICIENT_SIZE;
    }
    std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
    buf.add(bytes.len()).write(0);
    SUCCESS
}

unsafe fn read_str(
    d: nvmlDevice_t,
    func: &str,
    buf: *mut c_char,
    len: c_uint,
    f: impl FnOnce(&Gpu) -> Option<&String>,
) -> nvmlReturn_t {
    match gpu(d, func) {
        Err(e) => e,
        Ok((_, g)) => match f(g) {
            Some(s) => put_str(buf, len, s),
            None => NOT_SUPPORTED,
        },
    }
}

fn enabled(b: bool) -> nvmlEnableState_t {
    if b {
        nvmlEnableState_enum_NVML_FEATURE_ENABLED
    } else {
        nvmlEnableState_enum_NVML_FEATURE_DISABLED
    }
}

/// An nvmlPciInfo_t for a bus id written "DDDDDDDD:BB:DD.F" or "DDDD:BB:DD.F".
fn pci_info(bus_id: &str, device_id: u32) -> nvmlPciInfo_t {
    // Safety: a plain C struct of integers and char arrays; all zeroes is a valid value.
    let mut p: nvmlPciInfo_t = unsafe { std::mem::zeroed() };
    let mut parts = bus_id.split([':', '.']);
    let mut num = || {
        parts
            .next()
            .and_then(|x| u32::from_str_radix(x, 16).ok())
            .unwrap_or(0)
    };
    p.domain = num();
    p.bus = num();
    p.device = num();
    p.pciDeviceId = device_id;
    let long = format!("{:08x}:{:02x}:{:02x}.{}", p.domain, p.bus, p.device, num());
    let short = format!("{:04x}:{:02x}:{:02x}.0", p.domain, p.bus, p.device);
    for (dst, src) in [
        (&mut p.busId[..], long.as_str()),
        (&mut p.busIdLegacy[..], short.as_str()),
    ] {
        let room = dst.len() - 1;
        for (d, s) in dst.iter_mut().zip(src.bytes().take(room)) {
            *d = s as c_char;
        }
    }
    p
}

/// Set the bits of `set` in a mask of `words` C longs.
unsafe fn put_mask(out: *mut c_ulong, words: c_uint, set: &[usize]) -> nvmlReturn_t {
    if out.is_null() || words == 0 {
        return INVALID_ARGUMENT;
    }
    let bits = c_ulong::BITS as usize;
    let mask = std::slice::from_raw_parts_mut(out, words as usize);
    mask.fill(0);
    for &b in set {
        if let Some(w) = mask.get_mut(b / bits) {
            *w |= 1 << (b % bits);
        }
    }
    SUCCESS
}

// ---- Library and system ----------------------------------------------------------------------

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    match NODE.get_or_init(load) {
        Ok(n) => match n.errors.get("nvmlInit_v2") {
            Some(f) => code(*f),
            None => SUCCESS,
        },
        Err(e) => {
            eprintln!("fake-nvml: {e}");
            UNKNOWN
        }
    }
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(buf: *mut c_char, len: c_uint) -> nvmlReturn_t {
    match system("nvmlSystemGetDriverVersion").map(|n| n.driver_version.as_ref()) {
        Err(e) => e,
        Ok(None) => NOT_SUPPORTED,
        Ok(Some(v)) => put_str(buf, len, v),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(buf: *mut c_char, len: c_uint) -> nvmlReturn_t {
    match system("nvmlSystemGetNVMLVersion").map(|n| n.nvml_version.as_ref()) {
        Err(e) => e,
        Ok(None) => NOT_SUPPORTED,
        Ok(Some(v)) => put_str(buf, len, v),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(out: *mut c_int) -> nvmlReturn_t {
    match system("nvmlSystemGetCudaDriverVersion_v2").map(|n| n.cuda_driver_version) {
        Err(e) => e,
        Ok(None) => NOT_SUPPORTED,
        Ok(Some(v)) => put(out, v),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(out: *mut c_uint) -> nvmlReturn_t {
    match system("nvmlDeviceGetCount_v2") {
        Err(e) => e,
        Ok(n) => put(out, n.gpus.len() as c_uint),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    i: c_uint,
    out: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    let n = match system("nvmlDeviceGetHandleByIndex_v2") {
        Ok(n) => n,
        Err(e) => return e,
    };
    match n.gpus.get(i as usize) {
        None => INVALID_ARGUMENT,
        Some(g) if g.lost == Some(Lost::AtOpen) => GPU_IS_LOST,
        Some(_) => put(out, handle(i as usize)),
    }
}

// ---- Identity and state of one GPU ------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    d: nvmlDevice_t,
    buf: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    read_str(d, "nvmlDeviceGetName", buf, len, |g| g.name.as_ref())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    d: nvmlDevice_t,
    buf: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    read_str(d, "nvmlDeviceGetUUID", buf, len, |g| g.uuid.as_ref())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSerial(
    d: nvmlDevice_t,
    buf: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    read_str(d, "nvmlDeviceGetSerial", buf, len, |g| g.serial.as_ref())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetVbiosVersion(
    d: nvmlDevice_t,
    buf: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    read_str(d, "nvmlDeviceGetVbiosVersion", buf, len, |g| {
        g.vbios.as_ref()
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    d: nvmlDevice_t,
    out: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    read(d, "nvmlDeviceGetPciInfo_v3", out, |g| {
        g.pci_bus_id
            .as_deref()
            .map(|b| pci_info(b, g.pci_device_id))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    d: nvmlDevice_t,
    out: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    let version = (*out).version;
    read(d, "nvmlDeviceGetMemoryInfo_v2", out, |g| {
        g.memory_total_bytes.map(|total| nvmlMemory_v2_t {
            version,
            total,
            reserved: 0,
            free: total.saturating_sub(used_bytes(g)),
            used: used_bytes(g),
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(
    d: nvmlDevice_t,
    out: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    read(d, "nvmlDeviceGetPersistenceMode", out, |g| {
        g.persistence_mode.map(enabled)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    d: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    match gpu(d, "nvmlDeviceGetMigMode") {
        Err(e) => e,
        Ok((_, g)) => match g.mig_mode {
            Some(now) => match put(current, now) {
                SUCCESS => put(pending, g.mig_pending.unwrap_or(now)),
                e => e,
            },
            None => NOT_SUPPORTED,
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(
    d: nvmlDevice_t,
    out: *mut nvmlComputeMode_t,
) -> nvmlReturn_t {
    read(d, "nvmlDeviceGetComputeMode", out, |g| g.compute_mode)
}

/// The memory in use on `g`: its processes' and what no process listed holds.
fn used_bytes(g: &Gpu) -> u64 {
    let listed: u64 = g
        .processes
        .iter()
        .flatten()
        .filter_map(|p| p.used_bytes)
        .sum();
    listed.saturating_add(g.memory_used_unlisted_bytes)
}

/// NVML's process lists: with `*count` too small (as 0 with a null array, to ask how many),
/// the number needed and INSUFFICIENT_SIZE.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    d: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    let list = match gpu(d, "nvmlDeviceGetComputeRunningProcesses_v3") {
        Err(e) => return e,
        Ok((_, g)) => match &g.processes {
            None => return NOT_SUPPORTED,
            Some(l) => l,
        },
    };
    if count.is_null() {
        return INVALID_ARGUMENT;
    }
    let room = *count as usize;
    count.write(list.len() as c_uint);
    if room < list.len() {
        return INSUFFICIENT_SIZE;
    }
    if list.is_empty() {
        return SUCCESS;
    }
    if infos.is_null() {
        return INVALID_ARGUMENT;
    }
    for (i, p) in list.iter().enumerate() {
        infos.add(i).write(nvmlProcessInfo_t {
            pid: p.pid,
            // NVML_VALUE_NOT_AVAILABLE
            usedGpuMemory: p.used_bytes.unwrap_or(u64::MAX),
            gpuInstanceId: u32::MAX,
            computeInstanceId: u32::MAX,
        });
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    d: nvmlDevice_t,
    _count: *mut c_uint,
    _infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    match gpu(d, "nvmlDeviceGetGraphicsRunningProcesses_v3") {
        Err(e) => e,
        Ok(_) => NOT_SUPPORTED,
    }
}

/// The name of a process some GPU lists; NOT_FOUND for any other.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetProcessName(
    pid: c_uint,
    name: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    let n = match system("nvmlSystemGetProcessName") {
        Err(e) => return e,
        Ok(n) => n,
    };
    let found = n
        .gpus
        .iter()
        .flat_map(|g| g.processes.iter().flatten())
        .find(|p| p.pid == pid)
        .and_then(|p| p.name.as_deref());
    match found {
        Some(s) => put_str(name, len, s),
        None => nvmlReturn_enum_NVML_ERROR_NOT_FOUND,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    d: nvmlDevice_t,
    current: *mut nvmlEnableState_t,
    pending: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    match read(d, "nvmlDeviceGetEccMode", current, |g| {
        g.ecc_mode.map(enabled)
    }) {
        SUCCESS => put(pending, *current),
        e => e,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    d: nvmlDevice_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    read(d, "nvmlDeviceGetCurrentClocksThrottleReasons", out, |g| {
        g.throttle_reasons
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    d: nvmlDevice_t,
    clock: nvmlClockType_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    read(d, "nvmlDeviceGetClockInfo", out, |g| {
        (clock == nvmlClockType_enum_NVML_CLOCK_SM)
            .then_some(g.sm_clock_mhz)
            .flatten()
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    d: nvmlDevice_t,
    clock: nvmlClockType_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    read(d, "nvmlDeviceGetMaxClockInfo", out, |g| {
        (clock == nvmlClockType_enum_NVML_CLOCK_SM)
            .then_some(g.sm_clock_max_mhz)
            .flatten()
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    d: nvmlDevice_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    read(d, "nvmlDeviceGetEnforcedPowerLimit", out, |g| {
        g.power_limit_mw
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    d: nvmlDevice_t,
    sensor: nvmlTemperatureSensors_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    if sensor != nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU {
        return INVALID_ARGUMENT;
    }
    read(d, "nvmlDeviceGetTemperature", out, |g| g.temperature_c)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetVirtualizationMode(
    d: nvmlDevice_t,
    out: *mut nvmlGpuVirtualizationMode_t,
) -> nvmlReturn_t {
    use desc::VirtMode::*;
    read(d, "nvmlDeviceGetVirtualizationMode", out, |g| {
        g.virtualization_mode.map(|m| match m {
            None => nvmlGpuVirtualizationMode_NVML_GPU_VIRTUALIZATION_MODE_NONE,
            Passthrough => nvmlGpuVirtualizationMode_NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH,
            Vgpu => nvmlGpuVirtualizationMode_NVML_GPU_VIRTUALIZATION_MODE_VGPU,
            HostVgpu => nvmlGpuVirtualizationMode_NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU,
            HostVsga => nvmlGpuVirtualizationMode_NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA,
        })
    })
}

// ---- PCIe and placement -----------------------------------------------------------------------

fn pcie(g: &Gpu, f: impl FnOnce(&desc::Pcie) -> Option<u32>) -> Option<u32> {
    g.pcie.as_ref().and_then(f)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkGeneration(
    d: nvmlDevice_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    read(d, "nvmlDeviceGetCurrPcieLinkGeneration", out, |g| {
        pcie(g, |p| p.gen_current)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkGeneration(
    d: nvmlDevice_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    read(d, "nvmlDeviceGetMaxPcieLinkGeneration", out, |g| {
        pcie(g, |p| p.gen_max)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkWidth(
    d: nvmlDevice_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    read(d, "nvmlDeviceGetCurrPcieLinkWidth", out, |g| {
        pcie(g, |p| p.width_current)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkWidth(
    d: nvmlDevice_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    read(d, "nvmlDeviceGetMaxPcieLinkWidth", out, |g| {
        pcie(g, |p| p.width_max)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetArchitecture(
    d: nvmlDevice_t,
    out: *mut nvmlDeviceArchitecture_t,
) -> nvmlReturn_t {
    read(d, "nvmlDeviceGetArchitecture", out, |g| g.architecture)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPcieReplayCounter(
    d: nvmlDevice_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    match gpu(d, "nvmlDeviceGetPcieReplayCounter") {
        Err(e) => e,
        Ok((i, g)) => match later(i, g, "pcie replays", |l| l.pcie_replay_counter)
            .or_else(|| pcie(g, |p| p.replay_counter))
        {
            Some(v) => put(out, v),
            None => NOT_SUPPORTED,
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryAffinity(
    d: nvmlDevice_t,
    words: c_uint,
    out: *mut c_ulong,
    _scope: nvmlAffinityScope_t,
) -> nvmlReturn_t {
    match gpu(d, "nvmlDeviceGetMemoryAffinity") {
        Err(e) => e,
        Ok((_, g)) => match g.numa_node {
            Some(n) => put_mask(out, words, &[n as usize]),
            None => NOT_SUPPORTED,
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCpuAffinity(
    d: nvmlDevice_t,
    words: c_uint,
    out: *mut c_ulong,
) -> nvmlReturn_t {
    match gpu(d, "nvmlDeviceGetCpuAffinity") {
        Err(e) => e,
        Ok((_, g)) => match g.cpu_affinity.as_deref().and_then(desc::cpu_list) {
            Some(cpus) => put_mask(out, words, &cpus),
            None => NOT_SUPPORTED,
        },
    }
}

// ---- Memory errors ----------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    d: nvmlDevice_t,
    kind: nvmlMemoryErrorType_t,
    counter: nvmlEccCounterType_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    let corrected = kind == nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED;
    let volatile = counter == nvmlEccCounterType_enum_NVML_VOLATILE_ECC;
    let (i, g) = match gpu(d, "nvmlDeviceGetTotalEccErrors") {
        Ok(g) => g,
        Err(e) => return e,
    };
    read(d, "nvmlDeviceGetTotalEccErrors", out, |g2| {
        let e = g2.ecc.as_ref()?;
        match (corrected, volatile) {
            (true, true) => e.volatile_corrected,
            (false, true) => later(i, g, "volatile uncorrected", |l| l.volatile_uncorrected)
                .or(e.volatile_uncorrected),
            (true, false) => e.aggregate_corrected,
            (false, false) => e.aggregate_uncorrected,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryErrorCounter(
    d: nvmlDevice_t,
    kind: nvmlMemoryErrorType_t,
    _counter: nvmlEccCounterType_t,
    location: nvmlMemoryLocation_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    let corrected = kind == nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED;
    read(d, "nvmlDeviceGetMemoryErrorCounter", out, |g| {
        let e = g.ecc.as_ref()?;
        match location {
            nvmlMemoryLocation_enum_NVML_MEMORY_LOCATION_SRAM if corrected => e.sram_corrected,
            nvmlMemoryLocation_enum_NVML_MEMORY_LOCATION_SRAM => e.sram_uncorrected,
            nvmlMemoryLocation_enum_NVML_MEMORY_LOCATION_DRAM if corrected => e.dram_corrected,
            nvmlMemoryLocation_enum_NVML_MEMORY_LOCATION_DRAM => e.dram_uncorrected,
            _ => None,
        }
    })
}

fn retired_count(g: &Gpu, cause: nvmlPageRetirementCause_t) -> Option<u32> {
    let r = g.retired_pages.as_ref()?;
    Some(
        if cause == nvmlPageRetirementCause_enum_NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR {
            r.double_bit
        } else {
            r.single_bit
        },
    )
}

/// Both versions: with room for `*count` pages, write them (made-up addresses); with less,
/// answer the count and INSUFFICIENT_SIZE, as NVML does.
unsafe fn retired(
    d: nvmlDevice_t,
    func: &str,
    cause: nvmlPageRetirementCause_t,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> nvmlReturn_t {
    let (_, g) = match gpu(d, func) {
        Ok(g) => g,
        Err(e) => return e,
    };
    let Some(n) = retired_count(g, cause) else {
        return NOT_SUPPORTED;
    };
    if count.is_null() {
        return INVALID_ARGUMENT;
    }
    let room = *count;
    *count = n;
    if room < n {
        return INSUFFICIENT_SIZE;
    }
    for k in 0..n as usize {
        if !addresses.is_null() {
            addresses.add(k).write(0x1000 * (k as u64 + 1));
        }
        if !timestamps.is_null() {
            timestamps.add(k).write(1_700_000_000_000_000 + k as u64);
        }
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPages(
    d: nvmlDevice_t,
    cause: nvmlPageRetirementCause_t,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
) -> nvmlReturn_t {
    let f = "nvmlDeviceGetRetiredPages";
    retired(d, f, cause, count, addresses, std::ptr::null_mut())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPages_v2(
    d: nvmlDevice_t,
    cause: nvmlPageRetirementCause_t,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> nvmlReturn_t {
    let f = "nvmlDeviceGetRetiredPages_v2";
    retired(d, f, cause, count, addresses, timestamps)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPagesPendingStatus(
    d: nvmlDevice_t,
    out: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    read(d, "nvmlDeviceGetRetiredPagesPendingStatus", out, |g| {
        g.retired_pages.as_ref().map(|r| enabled(r.pending))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfo(
    d: nvmlDevice_t,
    info: *mut nvmlGpuFabricInfo_t,
) -> nvmlReturn_t {
    let (_, g) = match gpu(d, "nvmlDeviceGetGpuFabricInfo") {
        Ok(g) => g,
        Err(e) => return e,
    };
    let Some(f) = &g.fabric else {
        return NOT_SUPPORTED;
    };
    if info.is_null() {
        return INVALID_ARGUMENT;
    }
    (*info).state = f.state;
    (*info).status = f.status;
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    d: nvmlDevice_t,
    corrected: *mut c_uint,
    uncorrected: *mut c_uint,
    pending: *mut c_uint,
    failure: *mut c_uint,
) -> nvmlReturn_t {
    let (i, g) = match gpu(d, "nvmlDeviceGetRemappedRows") {
        Ok(g) => g,
        Err(e) => return e,
    };
    let Some(r) = &g.remapped_rows else {
        return NOT_SUPPORTED;
    };
    if [corrected, uncorrected, pending, failure]
        .iter()
        .any(|p| p.is_null())
    {
        return INVALID_ARGUMENT;
    }
    *corrected = r.correctable;
    *uncorrected = r.uncorrectable;
    *pending = later(i, g, "remap pending", |l| l.remap_pending)
        .unwrap_or(r.pending)
        .into();
    *failure = r.failure.into();
    SUCCESS
}

// ---- NVLink -----------------------------------------------------------------------------------

/// One link of one GPU: NOT_SUPPORTED without NVLink, INVALID_ARGUMENT past its last link.
unsafe fn link<T>(
    d: nvmlDevice_t,
    func: &str,
    l: c_uint,
    out: *mut T,
    f: impl FnOnce(&desc::NvLink) -> Option<T>,
) -> nvmlReturn_t {
    let (_, g) = match gpu(d, func) {
        Ok(g) => g,
        Err(e) => return e,
    };
    if g.nvlinks.is_empty() {
        return NOT_SUPPORTED;
    }
    match g.nvlinks.get(l as usize) {
        None => INVALID_ARGUMENT,
        Some(k) => match f(k) {
            Some(v) => put(out, v),
            None => NOT_SUPPORTED,
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkState(
    d: nvmlDevice_t,
    l: c_uint,
    out: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    // A link of `errors_later.links_down` answers inactive from its second reading on.
    let down = match gpu(d, "nvmlDeviceGetNvLinkState") {
        Ok((i, g)) if (l as usize) < g.nvlinks.len() => {
            later(i, g, &format!("nvlink {l} state"), |e| {
                e.links_down.contains(&l).then_some(())
            })
            .is_some()
        }
        _ => false,
    };
    link(d, "nvmlDeviceGetNvLinkState", l, out, |k| {
        Some(enabled(k.active && !down))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkVersion(
    d: nvmlDevice_t,
    l: c_uint,
    out: *mut c_uint,
) -> nvmlReturn_t {
    link(d, "nvmlDeviceGetNvLinkVersion", l, out, |k| k.version)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkErrorCounter(
    d: nvmlDevice_t,
    l: c_uint,
    counter: nvmlNvLinkErrorCounter_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    link(d, "nvmlDeviceGetNvLinkErrorCounter", l, out, |k| {
        let e = k.errors.as_ref()?;
        match counter {
            nvmlNvLinkErrorCounter_enum_NVML_NVLINK_ERROR_DL_REPLAY => e.replay,
            nvmlNvLinkErrorCounter_enum_NVML_NVLINK_ERROR_DL_RECOVERY => e.recovery,
            nvmlNvLinkErrorCounter_enum_NVML_NVLINK_ERROR_DL_CRC_FLIT => e.crc_flit,
            nvmlNvLinkErrorCounter_enum_NVML_NVLINK_ERROR_DL_CRC_DATA => e.crc_data,
            nvmlNvLinkErrorCounter_enum_NVML_NVLINK_ERROR_DL_ECC_DATA => e.ecc_data,
            _ => None,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2(
    d: nvmlDevice_t,
    l: c_uint,
    out: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    link(d, "nvmlDeviceGetNvLinkRemotePciInfo_v2", l, out, |k| {
        k.remote_bus_id.as_deref().map(|b| pci_info(b, 0))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemoteDeviceType(
    d: nvmlDevice_t,
    l: c_uint,
    out: *mut nvmlIntNvLinkDeviceType_t,
) -> nvmlReturn_t {
    use desc::RemoteType::*;
    link(d, "nvmlDeviceGetNvLinkRemoteDeviceType", l, out, |k| {
        k.remote_type.map(|t| match t {
            Gpu => nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_GPU,
            Ibmnpu => nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_IBMNPU,
            Switch => nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_SWITCH,
            Unknown => nvmlIntNvLinkDeviceType_enum_NVML_NVLINK_DEVICE_TYPE_UNKNOWN,
        })
    })
}

// ---- Pairs ------------------------------------------------------------------------------------

/// The answers for the pair of GPUs behind two handles (both must answer `func`).
fn pair(a: nvmlDevice_t, b: nvmlDevice_t, func: &str) -> Result<desc::PairAnswers, nvmlReturn_t> {
    let (i, _) = gpu(a, func)?;
    let (j, _) = gpu(b, func)?;
    if i == j {
        return Err(INVALID_ARGUMENT);
    }
    node()?.pair(i, j).ok_or(NOT_SUPPORTED)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTopologyCommonAncestor(
    a: nvmlDevice_t,
    b: nvmlDevice_t,
    out: *mut nvmlGpuTopologyLevel_t,
) -> nvmlReturn_t {
    use desc::Path::*;
    match pair(a, b, "nvmlDeviceGetTopologyCommonAncestor").map(|p| p.path) {
        Err(e) => e,
        Ok(None) => NOT_SUPPORTED,
        Ok(Some(p)) => put(
            out,
            match p {
                PIX => nvmlGpuLevel_enum_NVML_TOPOLOGY_SINGLE,
                PXB => nvmlGpuLevel_enum_NVML_TOPOLOGY_MULTIPLE,
                PHB => nvmlGpuLevel_enum_NVML_TOPOLOGY_HOSTBRIDGE,
                NODE => nvmlGpuLevel_enum_NVML_TOPOLOGY_NODE,
                SYS => nvmlGpuLevel_enum_NVML_TOPOLOGY_SYSTEM,
            },
        ),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetP2PStatus(
    a: nvmlDevice_t,
    b: nvmlDevice_t,
    index: nvmlGpuP2PCapsIndex_t,
    out: *mut nvmlGpuP2PStatus_t,
) -> nvmlReturn_t {
    let p = match pair(a, b, "nvmlDeviceGetP2PStatus") {
        Ok(p) => p,
        Err(e) => return e,
    };
    let s = match index {
        nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_READ => p.p2p_read,
        nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_WRITE => p.p2p_write,
        nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_NVLINK => p.p2p_nvlink,
        nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_ATOMICS => p.p2p_atomics,
        _ => None,
    };
    match s {
        None => NOT_SUPPORTED,
        Some(s) => put(out, {
            use desc::P2p::*;
            match s {
                Ok => nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_OK,
                ChipsetNotSupported => nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED,
                GpuNotSupported => nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_GPU_NOT_SUPPORTED,
                IohTopologyNotSupported => {
                    nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
                }
                DisabledByRegkey => nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_DISABLED_BY_REGKEY,
                NotSupported => nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_NOT_SUPPORTED,
                Unknown => nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_UNKNOWN,
            }
        }),
    }
}

// ---- XID events -------------------------------------------------------------------------------

/// Events the GPUs of a set have pending: (GPU index, XID).
struct EventSet {
    pending: Mutex<VecDeque<(usize, u64)>>,
    /// Events raised later (`xid_events_later`), delivered once `pending` ran dry once.
    later: Mutex<(bool, VecDeque<(usize, u64)>)>,
}

/// Event types a GPU with XID events reports supporting: single- and double-bit ECC, XID.
const SUPPORTED_EVENTS: u64 = (nvmlEventTypeSingleBitEccError
    | nvmlEventTypeDoubleBitEccError
    | nvmlEventTypeXidCriticalError) as u64;

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    d: nvmlDevice_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    read(d, "nvmlDeviceGetSupportedEventTypes", out, |g| {
        g.xid_events.as_ref().map(|_| SUPPORTED_EVENTS)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(out: *mut nvmlEventSet_t) -> nvmlReturn_t {
    if let Err(e) = system("nvmlEventSetCreate") {
        return e;
    }
    let set = Box::new(EventSet {
        pending: Mutex::new(VecDeque::new()),
        later: Mutex::new((false, VecDeque::new())),
    });
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    put(out, Box::into_raw(set).cast())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    d: nvmlDevice_t,
    types: c_ulonglong,
    set: nvmlEventSet_t,
) -> nvmlReturn_t {
    let (i, g) = match gpu(d, "nvmlDeviceRegisterEvents") {
        Ok(g) => g,
        Err(e) => return e,
    };
    let Some(xids) = &g.xid_events else {
        return NOT_SUPPORTED;
    };
    if set.is_null() || types & !SUPPORTED_EVENTS != 0 {
        return INVALID_ARGUMENT;
    }
    if types & nvmlEventTypeXidCriticalError as u64 != 0 {
        // Safety: `set` came from nvmlEventSetCreate and has not been freed (NVML's contract).
        let set = &*set.cast::<EventSet>();
        let Ok(mut q) = set.pending.lock() else {
            return UNKNOWN;
        };
        q.extend(xids.iter().map(|x| (i, *x)));
        let Ok(mut later) = set.later.lock() else {
            return UNKNOWN;
        };
        later.1.extend(g.xid_events_later.iter().map(|x| (i, *x)));
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    out: *mut nvmlEventData_t,
    _timeout_ms: c_uint,
) -> nvmlReturn_t {
    if set.is_null() || out.is_null() {
        return INVALID_ARGUMENT;
    }
    // Safety: as in nvmlDeviceRegisterEvents.
    let set = &*set.cast::<EventSet>();
    let Ok(mut q) = set.pending.lock() else {
        return UNKNOWN;
    };
    if q.is_empty() {
        let Ok(mut later) = set.later.lock() else {
            return UNKNOWN;
        };
        // The first time the set runs dry, the later events are raised: the next wait has them.
        if !later.0 {
            later.0 = true;
            return TIMEOUT;
        }
        q.extend(later.1.drain(..));
    }
    match q.pop_front() {
        // Nothing pending: answer at once rather than sleep out the timeout.
        None => TIMEOUT,
        Some((i, xid)) => put(
            out,
            nvmlEventData_t {
                device: handle(i),
                eventType: nvmlEventTypeXidCriticalError as u64,
                eventData: xid,
                gpuInstanceId: 0,
                computeInstanceId: 0,
            },
        ),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> nvmlReturn_t {
    if set.is_null() {
        return INVALID_ARGUMENT;
    }
    // Safety: `set` came from Box::into_raw in nvmlEventSetCreate and is freed once.
    drop(Box::from_raw(set.cast::<EventSet>()));
    SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_info_carries_both_bus_id_forms() {
        let p = pci_info("0000:1B:00.0", 0x233010de);
        let text = |b: &[c_char]| {
            let bytes: Vec<u8> = b
                .iter()
                .take_while(|c| **c != 0)
                .map(|c| *c as u8)
                .collect();
            String::from_utf8(bytes).unwrap()
        };
        assert_eq!(text(&p.busId), "00000000:1b:00.0");
        assert_eq!(text(&p.busIdLegacy), "0000:1b:00.0");
        assert_eq!((p.domain, p.bus, p.device), (0, 0x1b, 0));
    }

    #[test]
    fn masks_set_the_named_bits() {
        let mut m = [7 as c_ulong; 2];
        assert_eq!(
            unsafe { put_mask(m.as_mut_ptr(), 2, &[1, 64, 200]) },
            SUCCESS
        );
        assert_eq!(m, [2, 1]);
    }

    #[test]
    fn strings_that_do_not_fit_are_refused() {
        let mut b = [0 as c_char; 4];
        assert_eq!(
            unsafe { put_str(b.as_mut_ptr(), 4, "abcd") },
            INSUFFICIENT_SIZE
        );
        assert_eq!(unsafe { put_str(b.as_mut_ptr(), 4, "abc") }, SUCCESS);
        assert_eq!(b[3], 0);
    }
}
