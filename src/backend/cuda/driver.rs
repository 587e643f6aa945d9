//! A thin, explicit layer over the CUDA driver through cudarc: every call's failure becomes an
//! [`HwError::Call`] naming the driver function, never a panic.
//!
//! Memory is allocated with `cuMemAlloc` (not cudarc's stream-ordered pool allocations) and
//! copies are issued with the raw `cuMemcpy*Async` calls on our own streams, so nothing records
//! hidden events inside a timed loop. Pinned host memory is cudarc's
//! `alloc_pinned_with_flags(n, CU_MEMHOSTALLOC_PORTABLE)` (ordinary pinned memory, usable from
//! every context; `alloc_pinned` would be write-combined and slow for the CPU to read).

use crate::error::HwError;
use crate::platform::numa::{self, HostPlacement, LocalTo};
use cudarc::driver::result::{self, DriverError};
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream, PinnedHostSlice};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
pub fn describe(e: &DriverError) -> String {
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("CUresult {}", e.0 as u32));
    match e.error_string() {
        Ok(s) => format!("{name} ({})", s.to_string_lossy()),
        Err(_) => name,
    }
}

/// What a refused context usually means, for the error that reports it: a GPU that takes no
/// context at all, or no second process, says so through its compute mode.
pub fn context_refused_hint(r: sys::CUresult) -> &'static str {
    match r {
        sys::CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE => {
            ": the GPU takes no more contexts. Its compute mode may be Exclusive_Process with \
             another process holding it (an MPS server, nvidia-cuda-mps-server, is one: MPS \
             setups set that mode), or Prohibited (`nvidia-smi -q -d COMPUTE` shows the mode; \
             `nvidia-smi --query-compute-apps=pid,name --format=csv` shows who holds it)"
        }
        _ => "",
    }
}

/// What a refused `cuInit` usually means on a node the driver lists GPUs on, for the error that
/// reports it. These are states of the node's software, not of its GPUs or links: a run that
/// meets one is untestable (exit 3), and the words say which service or library to look at.
pub fn init_refused_hint(r: sys::CUresult) -> &'static str {
    match r {
        sys::CUresult::CUDA_ERROR_SYSTEM_NOT_READY => {
            ": on a node whose GPUs are joined by NVSwitches, CUDA waits for the fabric manager \
             to register every GPU with the fabric; it is not running or has not finished \
             (`systemctl status nvidia-fabricmanager`, whose version must equal the driver's; \
             `nodecert inventory` shows each GPU's fabric state)"
        }
        sys::CUresult::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => {
            ": the CUDA driver library (libcuda.so.1) is of another version than the kernel \
             module: a container's own libcuda, or a forward-compatibility package (cuda-compat) \
             on LD_LIBRARY_PATH, that does not match the host's driver \
             (`cat /proc/driver/nvidia/version` names the module's)"
        }
        sys::CUresult::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE => {
            ": a forward-compatibility libcuda (cuda-compat) is loaded, and this GPU or driver \
             branch does not support it; use the host driver's libcuda.so.1 (remove the \
             compat folder from LD_LIBRARY_PATH)"
        }
        _ => "",
    }
}

/// Name the call that failed.
pub fn ck<T>(call: &str, r: Result<T, DriverError>) -> Result<T, HwError> {
    r.map_err(|e| HwError::Call {
        call: call.into(),
        detail: describe(&e),
    })
}

/// The same for a raw `sys` call.
pub fn cu(call: &str, r: sys::CUresult) -> Result<(), HwError> {
    ck(call, r.result())
}

/// One GPU as the measurements see it: nodecert's index, its CUDA ordinal, its primary context
/// and two non-blocking streams (two, for copies in both directions at once).
pub struct Gpu {
    pub index: usize,
    pub ordinal: usize,
    pub bus_id: String,
    pub ctx: Arc<CudaContext>,
    pub streams: [Arc<CudaStream>; 2],
}

impl Gpu {
    pub fn open(index: usize, ordinal: usize, bus_id: String) -> Result<Gpu, HwError> {
        let ctx = CudaContext::new(ordinal).map_err(|e| HwError::Call {
            call: format!("cuDevicePrimaryCtxRetain (CUDA device {ordinal})"),
            detail: format!("{}{}", describe(&e), context_refused_hint(e.0)),
        })?;
        // SAFETY: we never use cudarc's CudaSlice, whose cross-stream safety needs the tracking.
        unsafe { ctx.disable_event_tracking() };
        let s0 = ck("cuStreamCreate", ctx.new_stream())?;
        let s1 = ck("cuStreamCreate", ctx.new_stream())?;
        Ok(Gpu {
            index,
            ordinal,
            bus_id,
            ctx,
            streams: [s0, s1],
        })
    }

    pub fn bind(&self) -> Result<(), HwError> {
        ck("cuCtxSetCurrent", self.ctx.bind_to_thread())
    }

    pub fn dev(&self) -> sys::CUdevice {
        self.ctx.cu_device()
    }

    pub fn event(&self) -> Result<CudaEvent, HwError> {
        ck(
            "cuEventCreate",
            self.ctx
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)),
        )
    }

    pub fn sync_streams(&self) -> Result<(), HwError> {
        self.bind()?;
        for s in &self.streams {
            // SAFETY: the stream is alive (owned by self).
            ck("cuStreamSynchronize", unsafe {
                result::stream::synchronize(s.cu_stream())
            })?;
        }
        Ok(())
    }

    /// "GPU 3 (CUDA device 1, 0000:3b:00.0)".
    pub fn label(&self) -> String {
        format!(
            "GPU {} (CUDA device {}, {})",
            self.index, self.ordinal, self.bus_id
        )
    }
}

/// The PCI bus id CUDA reports for an ordinal, e.g. "0000:3B:00.0".
pub fn pci_bus_id(ordinal: usize) -> Result<String, HwError> {
    let dev = ck("cuDeviceGet", result::device::get(ordinal as i32))?;
    let mut buf = [0 as std::ffi::c_char; 32];
    // SAFETY: the buffer is 32 bytes and we pass its length.
    cu("cuDeviceGetPCIBusId", unsafe {
        sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev)
    })?;
    // SAFETY: the driver wrote a NUL-terminated string into the buffer; force a NUL anyway.
    buf[31] = 0;
    let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Ok(s.to_string_lossy().into_owned())
}

/// Device memory from `cuMemAlloc`, freed on drop (errors on free are ignored: nothing to do).
pub struct DevBuf {
    pub ptr: sys::CUdeviceptr,
    pub bytes: usize,
    ctx: Arc<CudaContext>,
}

impl DevBuf {
    pub fn new(gpu: &Gpu, bytes: usize) -> Result<DevBuf, HwError> {
        gpu.bind()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // cuMemAlloc refuses 0 bytes; keep at least one word so pointers stay valid.
        let n = bytes.max(16);
        // SAFETY: ptr is a valid out-pointer.
        cu(
            &format!("cuMemAlloc({n} bytes) on {}", gpu.label()),
            unsafe { sys::cuMemAlloc_v2(&mut ptr, n) },
        )?;
        Ok(DevBuf {
            ptr,
            bytes,
            ctx: gpu.ctx.clone(),
        })
    }

    fn in_bounds(&self, offset: usize, len: usize) -> Result<(), HwError> {
        if offset
            .checked_add(len)
            .is_some_and(|e| e <= self.bytes.max(16))
        {
            Ok(())
        } else {
            Err(HwError::Call {
                call: "device buffer access".into(),
                detail: format!(
                    "{len} bytes at {offset} outside a {} byte buffer",
                    self.bytes
                ),
            })
        }
    }

    /// Wait for everything on the context, including work the synchronous memset and copies
    /// left running on the legacy stream, which our non-blocking streams do not wait for.
    fn settle(&self) -> Result<(), HwError> {
        ck("cuCtxSynchronize", self.ctx.synchronize())
    }

    /// Set every byte; returns when done.
    pub fn memset(&self, value: u8) -> Result<(), HwError> {
        if self.bytes == 0 {
            return Ok(());
        }
        ck("cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        // SAFETY: the allocation holds at least `bytes` bytes.
        ck("cuMemsetD8", unsafe {
            result::memset_d8_sync(self.ptr, value, self.bytes)
        })?;
        self.settle()
    }

    /// Write `data` at byte `offset` from pageable memory; returns when done.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), HwError> {
        self.in_bounds(offset, data.len())?;
        ck("cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        // SAFETY: bounds checked above.
        ck("cuMemcpyHtoD", unsafe {
            result::memcpy_htod_sync(self.ptr + offset as u64, data)
        })?;
        self.settle()
    }

    /// Read into `out` from byte `offset` (a synchronous copy to pageable memory, which returns
    /// only once complete). Synchronise the streams that wrote the buffer first.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), HwError> {
        self.in_bounds(offset, out.len())?;
        ck("cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        // SAFETY: bounds checked above.
        ck("cuMemcpyDtoH", unsafe {
            result::memcpy_dtoh_sync(out, self.ptr + offset as u64)
        })
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by cuMemAlloc in this context and freed once.
            let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
        }
    }
}

/// Bytes moved between device buffers and the host per synchronous step when filling or
/// checking a device buffer.
pub const STAGE: usize = 64 << 20;

/// Fill a device buffer with the copy pattern, through pageable host memory in pieces.
pub fn fill_device(buf: &DevBuf, seed: u32) -> Result<(), HwError> {
    let mut stage = vec![0u8; STAGE.min(buf.bytes)];
    let mut at = 0;
    while at < buf.bytes {
        let n = STAGE.min(buf.bytes - at);
        super::verify::fill_pattern(&mut stage[..n], seed, at as u64);
        buf.write(at, &stage[..n])?;
        at += n;
    }
    Ok(())
}

/// Bytes of a device buffer that differ from the copy pattern.
pub fn check_device(buf: &DevBuf, seed: u32) -> Result<u64, HwError> {
    let mut stage = vec![0u8; STAGE.min(buf.bytes)];
    let mut at = 0;
    let mut wrong = 0;
    while at < buf.bytes {
        let n = STAGE.min(buf.bytes - at);
        buf.read(at, &mut stage[..n])?;
        wrong += super::verify::count_pattern_mismatches(&stage[..n], seed, at as u64);
        at += n;
    }
    Ok(wrong)
}

/// Pinned, portable host memory, on the GPU's own NUMA node where the node says which it is.
pub struct HostBuf {
    // Keeps the allocation alive; freed by cudarc on drop.
    _mem: PinnedHostSlice<u8>,
    ptr: *mut u8,
    pub bytes: usize,
    /// Where the pages are, as the kernel reports it after allocation.
    pub placement: HostPlacement,
}

impl HostBuf {
    pub fn new(gpu: &Gpu, bytes: usize) -> Result<HostBuf, HwError> {
        let n = bytes.max(16);
        // Allocate and first-touch on the GPU's CPUs, preferring its memory node: otherwise the
        // pages land on whichever socket the worker thread runs on.
        let (local, node) = LocalTo::gpu(std::path::Path::new("/"), &gpu.bus_id);
        // SAFETY: the memory is uninitialised until we write it, which we do before any read.
        let mut mem = ck(&format!("cuMemHostAlloc({n} bytes, PORTABLE)"), unsafe {
            gpu.ctx
                .alloc_pinned_with_flags::<u8>(n, sys::CU_MEMHOSTALLOC_PORTABLE)
        })?;
        let ptr = ck("cuEventSynchronize", mem.as_mut_ptr())?;
        // Touch every page now so the first timed copy does not pay for it.
        // SAFETY: ptr is valid for n bytes.
        unsafe { std::ptr::write_bytes(ptr, 0, n) };
        let placement = numa::placement(ptr as usize, n, node, &local);
        drop(local);
        Ok(HostBuf {
            _mem: mem,
            ptr,
            bytes,
            placement,
        })
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The bytes, for filling and checking. Only while no copy on them is in flight.
    pub fn slice_mut(&mut self) -> &mut [u8] {
        // SAFETY: valid for `bytes`; callers synchronise the streams before touching it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes) }
    }
}

/// Synchronises streams when dropped, so buffers are never freed under a copy in flight, on
/// error paths too. Declare it after the buffers it protects (drops run in reverse order).
pub struct SyncOnDrop<'a>(pub Vec<&'a Gpu>);

impl Drop for SyncOnDrop<'_> {
    fn drop(&mut self) {
        for g in &self.0 {
            let _ = g.sync_streams();
        }
    }
}

/// Enqueue work on a stream whose context is current.
pub fn record(ev: &CudaEvent, stream: &CudaStream) -> Result<(), HwError> {
    ck("cuCtxSetCurrent", ev.context().bind_to_thread())?;
    // SAFETY: event and stream belong to the same, current, context and are alive.
    ck("cuEventRecord", unsafe {
        result::event::record(ev.cu_event(), stream.cu_stream())
    })
}

/// Make `stream` wait for `ev` (which may belong to another context or device).
pub fn wait(stream: &CudaStream, ev: &CudaEvent) -> Result<(), HwError> {
    ck("cuCtxSetCurrent", stream.context().bind_to_thread())?;
    // SAFETY: both are alive.
    ck("cuStreamWaitEvent", unsafe {
        result::stream::wait_event(
            stream.cu_stream(),
            ev.cu_event(),
            sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
        )
    })
}

/// Milliseconds between two recorded events of one context, after waiting for the second.
pub fn elapsed_ms(start: &CudaEvent, end: &CudaEvent) -> Result<f64, HwError> {
    ck("cuCtxSetCurrent", end.context().bind_to_thread())?;
    // SAFETY: both events are alive, created with timing enabled and recorded.
    ck("cuEventSynchronize", unsafe {
        result::event::synchronize(end.cu_event())
    })?;
    let ms = ck("cuEventElapsedTime", unsafe {
        result::event::elapsed(start.cu_event(), end.cu_event())
    })?;
    Ok(ms as f64)
}

/// The longest a gate holds a stream. Far longer than it takes to queue a batch; reaching it
/// means the queuing thread stalled, and the sample is refused.
const GATE_MAX_HOLD: Duration = Duration::from_secs(10);

struct GateState {
    open: AtomicBool,
    expired: AtomicBool,
}

/// Holds streams until the host has queued a whole batch, so launch overhead stays out of the
/// timing (nvbandwidth does this with a spin kernel; a host function does it without compiling
/// a kernel). `hold` enqueues a host function that waits until `open` is called; work queued
/// after it on that stream starts only then. Dropping the gate opens it.
pub struct Gate {
    state: Arc<GateState>,
}

unsafe extern "C" fn gate_wait(user: *mut c_void) {
    // SAFETY: `user` is the Arc handed over by `Gate::hold`; we take back that reference.
    let state = unsafe { Arc::from_raw(user as *const GateState) };
    let t0 = Instant::now();
    let mut spins = 0u32;
    while !state.open.load(Ordering::Acquire) {
        if t0.elapsed() > GATE_MAX_HOLD {
            state.expired.store(true, Ordering::Release);
            break;
        }
        spins += 1;
        if spins < 1000 {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

impl Gate {
    pub fn new() -> Gate {
        Gate {
            state: Arc::new(GateState {
                open: AtomicBool::new(false),
                expired: AtomicBool::new(false),
            }),
        }
    }

    pub fn hold(&self, stream: &CudaStream) -> Result<(), HwError> {
        ck("cuCtxSetCurrent", stream.context().bind_to_thread())?;
        let raw = Arc::into_raw(self.state.clone()) as *mut c_void;
        // SAFETY: the host function receives `raw` once and takes ownership of that reference.
        let r = unsafe { result::stream::launch_host_function(stream.cu_stream(), gate_wait, raw) };
        if r.is_err() {
            // Not enqueued: the function will never run, so give the reference back.
            // SAFETY: `raw` came from Arc::into_raw above and was not consumed.
            drop(unsafe { Arc::from_raw(raw as *const GateState) });
        }
        ck("cuLaunchHostFunc", r)
    }

    pub fn open(&self) {
        self.state.open.store(true, Ordering::Release);
    }

    /// Whether a hold gave up waiting (the sample then timed queuing too).
    pub fn expired(&self) -> bool {
        self.state.expired.load(Ordering::Acquire)
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
    }
}

/// Peer access from `from`'s context to memory of `to`.
pub enum Peer {
    Enabled,
    /// The driver says it is impossible (cuDeviceCanAccessPeer is 0): copies are staged
    /// through the host.
    Impossible,
}

/// Enable access from `from` to `to`'s memory: cuDeviceCanAccessPeer, cuCtxEnablePeerAccess
/// (already enabled counts as success). Every buffer is `cuMemAlloc`'s, not a memory pool's, so
/// nothing else is needed. A context that has reached the driver's limit of peers is an error
/// of this measurement, never "no peer access": the node may well have it.
pub fn enable_peer(from: &Gpu, to: &Gpu) -> Result<Peer, HwError> {
    let mut can = 0i32;
    // SAFETY: valid out-pointer and devices.
    cu("cuDeviceCanAccessPeer", unsafe {
        sys::cuDeviceCanAccessPeer(&mut can, from.dev(), to.dev())
    })?;
    if can == 0 {
        return Ok(Peer::Impossible);
    }
    from.bind()?;
    // SAFETY: `to.ctx` is a live context.
    match unsafe { sys::cuCtxEnablePeerAccess(to.ctx.cu_ctx(), 0) } {
        sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {}
        sys::CUresult::CUDA_ERROR_TOO_MANY_PEERS => {
            return Err(HwError::Call {
                call: format!("cuCtxEnablePeerAccess({} -> {})", from.label(), to.label()),
                detail: format!(
                    "CUDA_ERROR_TOO_MANY_PEERS: {}'s context has reached the driver's limit of \
                     peers, although cuDeviceCanAccessPeer says it can reach {}: the pair \
                     cannot be measured here, which says nothing against its link",
                    from.label(),
                    to.label()
                ),
            })
        }
        other => cu("cuCtxEnablePeerAccess", other)?,
    }
    Ok(Peer::Enabled)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A context refused because the GPU is busy or prohibited points at the compute mode;
    /// any other failure is reported in the driver's words alone.
    #[test]
    fn a_refused_context_points_at_the_compute_mode() {
        let h = context_refused_hint(sys::CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE);
        assert!(
            h.contains("Exclusive_Process") && h.contains("Prohibited"),
            "{h}"
        );
        assert!(h.contains("nvidia-smi -q -d COMPUTE"), "{h}");
        assert!(h.contains("nvidia-cuda-mps-server"), "{h}");
        assert_eq!(
            context_refused_hint(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY),
            ""
        );
        assert_eq!(
            context_refused_hint(sys::CUresult::CUDA_ERROR_NO_DEVICE),
            ""
        );
    }

    /// A refused cuInit names the service or library behind it: the fabric manager on an
    /// NVSwitch node, a libcuda of another version than the kernel module, a compat package the
    /// GPU does not take. Any other failure is reported in the driver's words alone.
    #[test]
    fn a_refused_init_names_the_software_behind_it() {
        let h = init_refused_hint(sys::CUresult::CUDA_ERROR_SYSTEM_NOT_READY);
        assert!(h.contains("nvidia-fabricmanager"), "{h}");
        let h = init_refused_hint(sys::CUresult::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH);
        assert!(
            h.contains("libcuda.so.1") && h.contains("kernel module"),
            "{h}"
        );
        let h = init_refused_hint(sys::CUresult::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE);
        assert!(h.contains("cuda-compat"), "{h}");
        for other in [
            sys::CUresult::CUDA_ERROR_NO_DEVICE,
            sys::CUresult::CUDA_ERROR_UNKNOWN,
            sys::CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE,
        ] {
            assert_eq!(init_refused_hint(other), "", "{other:?}");
        }
    }
}
