//! The training run on real GPUs: [`crate::training::plan`] executed with cudarc.
//!
//! The plan says what to do; this file only does it, one operation at a time ([`GpuDevice`]):
//! - kernels: [`kernels::SOURCE`] compiled once per process and device architecture with NVRTC,
//!   to a CUBIN for the GPU's `sm_XY` (a CUBIN loads on a driver older than libnvrtc, PTX from a
//!   newer NVRTC does not). Only when libnvrtc does not know the GPU is PTX for the newest
//!   architecture it knows produced, for the driver to compile. The NVRTC log is in every
//!   compile error. Launched with `cuLaunchKernel` on the replica's compute stream;
//! - products: raw cuBLAS calls (`cublasSgemm`, `cublasSgemv`) on a handle bound to the compute
//!   stream, math mode from the plan (`PEDANTIC`, `DEFAULT` = fp32 with TF32 off, or
//!   `TF32_TENSOR_OP`). In the bf16 run the GEMMs whose operands are bf16 buffers go to
//!   `cublasGemmEx` (`A`, `B` `CUDA_R_16BF`, `C` `CUDA_R_32F`, `CUBLAS_COMPUTE_32F`: tensor cores,
//!   fp32 accumulation) under `DEFAULT` math, which keeps the fp32 SGEMV free of TF32; the bf16
//!   run refuses a GPU older than compute capability 8.0 before anything is allocated
//!   ([`plan::check_arch`]). cudarc's `CudaBlas` is not used: its drop unwraps;
//! - events: cudarc events with timing (one per step and kind, created when first recorded);
//! - all-reduce: one NCCL group per bucket over every replica's communication stream, with the
//!   communicators the collective check uses (`ncclCommInitAll`, kept in [`Cuda`]);
//! - a sharded run (tensor-parallel, hybrid): one communicator set per tensor-parallel group
//!   and one per data-parallel group (`ncclCommInitAll` over the group's GPUs, made before the
//!   first step and dropped with the run), each group's all-reduce on the stream the plan
//!   names: the activations' on the compute stream, the gradients' on the communication
//!   stream, both kinds in flight at once. Every GPU issues them in the plan's one order, so
//!   no two communicators wait on each other.
//!
//! Memory is checked before anything is allocated: a GPU whose free memory cannot hold a
//! replica's buffers plus [`plan::LIBRARY_RESERVE_BYTES`] gives an error that says how much is
//! needed. Every failure is an [`HwError`] naming the call; resources are released in order
//! (streams synchronised first) on every path.

use super::driver::{self, ck, DevBuf, Gpu};
use super::{nccl, Cuda};
use crate::error::HwError;
use crate::training::kernels;
use crate::training::partition::Partition;
use crate::training::plan::sharded::{Sharded, ShardedOutcome};
use crate::training::plan::{
    self, Arg, Bucket, Buf, Device, Elem, EvId, GroupReduce, Math, Model, Op, Ptr, Stream,
};
use cudarc::cublas::{result as blas, sys as bsys};
use cudarc::driver::{result, sys, CudaContext, CudaEvent, CudaStream};
use cudarc::nvrtc::sys as nvrtc;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

/// What NVRTC is asked to produce for a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// Machine code for `sm_XY`.
    Cubin(u32),
    /// PTX for `compute_XY`, compiled by the driver when the module loads.
    Ptx(u32),
}

impl Target {
    /// The NVRTC option.
    pub fn option(&self) -> String {
        match self {
            Target::Cubin(a) => format!("--gpu-architecture=sm_{a}"),
            Target::Ptx(a) => format!("--gpu-architecture=compute_{a}"),
        }
    }
}

/// For a GPU of compute capability `device` (e.g. 90) and the architectures libnvrtc supports:
/// a CUBIN when it knows the GPU, else PTX for the newest architecture below it (a GPU newer than
/// libnvrtc; the driver, newer still, compiles it).
pub fn choose_target(device: u32, supported: &[u32]) -> Result<Target, String> {
    if supported.contains(&device) {
        return Ok(Target::Cubin(device));
    }
    match supported.iter().copied().filter(|&a| a < device).max() {
        Some(a) => Ok(Target::Ptx(a)),
        None => Err(format!(
            "this libnvrtc compiles for {} only, and the GPU is sm_{device}",
            if supported.is_empty() {
                "no architecture".to_string()
            } else {
                supported
                    .iter()
                    .map(|a| format!("sm_{a}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        )),
    }
}

fn nvrtc_error(r: nvrtc::nvrtcResult) -> String {
    // SAFETY: nvrtcGetErrorString returns a pointer to a static string (or null).
    let p = unsafe { nvrtc::nvrtcGetErrorString(r) };
    if p.is_null() {
        format!("{r:?}")
    } else {
        // SAFETY: non-null, NUL-terminated static string.
        format!("{r:?} ({})", unsafe { CStr::from_ptr(p) }.to_string_lossy())
    }
}

fn nv(call: &str, r: nvrtc::nvrtcResult) -> Result<(), HwError> {
    if r == nvrtc::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(HwError::Call {
            call: call.into(),
            detail: nvrtc_error(r),
        })
    }
}

/// The architectures libnvrtc compiles for, e.g. [50, 52, ..., 90].
fn supported_archs() -> Result<Vec<u32>, HwError> {
    let mut n = 0i32;
    // SAFETY: valid out-pointer.
    nv("nvrtcGetNumSupportedArchs", unsafe {
        nvrtc::nvrtcGetNumSupportedArchs(&mut n)
    })?;
    let mut v = vec![0i32; n.max(0) as usize];
    // SAFETY: `v` has room for the n architectures.
    nv("nvrtcGetSupportedArchs", unsafe {
        nvrtc::nvrtcGetSupportedArchs(v.as_mut_ptr())
    })?;
    Ok(v.into_iter().filter(|a| *a > 0).map(|a| a as u32).collect())
}

/// An NVRTC program, destroyed on drop (errors ignored).
struct Program(nvrtc::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram, destroyed once.
        let _ = unsafe { nvrtc::nvrtcDestroyProgram(&mut self.0) };
    }
}

fn program_log(p: &Program) -> String {
    let mut size = 0usize;
    // SAFETY: live program, valid out-pointer.
    if unsafe { nvrtc::nvrtcGetProgramLogSize(p.0, &mut size) } != nvrtc::nvrtcResult::NVRTC_SUCCESS
        || size <= 1
    {
        return "(empty)".into();
    }
    let mut buf = vec![0 as c_char; size];
    // SAFETY: the buffer holds `size` bytes, as asked for.
    if unsafe { nvrtc::nvrtcGetProgramLog(p.0, buf.as_mut_ptr()) }
        != nvrtc::nvrtcResult::NVRTC_SUCCESS
    {
        return "(could not be read)".into();
    }
    buf[size - 1] = 0;
    // SAFETY: NUL-terminated above.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .trim()
        .to_string()
}

/// Compile [`kernels::SOURCE`] for `target`: the CUBIN, or NUL-terminated PTX.
fn compile(target: Target) -> Result<Vec<u8>, HwError> {
    compile_source(kernels::SOURCE, target)
}

fn compile_source(source: &str, target: Target) -> Result<Vec<u8>, HwError> {
    let src = CString::new(source).map_err(|e| HwError::Call {
        call: "preparing the training kernels".into(),
        detail: e.to_string(),
    })?;
    let mut prog: nvrtc::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: valid out-pointer and NUL-terminated strings; no headers.
    nv("nvrtcCreateProgram (training kernels)", unsafe {
        nvrtc::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            c"nodecert_training.cu".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    })?;
    let prog = Program(prog);
    let option = target.option();
    let opt = CString::new(option.clone()).unwrap_or_default();
    let opts = [opt.as_ptr()];
    // SAFETY: live program; one NUL-terminated option.
    let r = unsafe { nvrtc::nvrtcCompileProgram(prog.0, 1, opts.as_ptr()) };
    if r != nvrtc::nvrtcResult::NVRTC_SUCCESS {
        return Err(HwError::Call {
            call: format!("nvrtcCompileProgram (training kernels, {option})"),
            detail: format!("{}; log: {}", nvrtc_error(r), program_log(&prog)),
        });
    }
    let mut size = 0usize;
    let mut out;
    match target {
        Target::Cubin(_) => {
            // SAFETY: compiled program, valid out-pointer, then a buffer of that size.
            nv("nvrtcGetCUBINSize", unsafe {
                nvrtc::nvrtcGetCUBINSize(prog.0, &mut size)
            })?;
            out = vec![0u8; size.max(1)];
            nv("nvrtcGetCUBIN", unsafe {
                nvrtc::nvrtcGetCUBIN(prog.0, out.as_mut_ptr() as *mut c_char)
            })?;
        }
        Target::Ptx(_) => {
            // SAFETY: as above; the PTX size includes its NUL.
            nv("nvrtcGetPTXSize", unsafe {
                nvrtc::nvrtcGetPTXSize(prog.0, &mut size)
            })?;
            out = vec![0u8; size.max(1)];
            nv("nvrtcGetPTX", unsafe {
                nvrtc::nvrtcGetPTX(prog.0, out.as_mut_ptr() as *mut c_char)
            })?;
            if out.last() != Some(&0) {
                out.push(0);
            }
        }
    }
    Ok(out)
}

/// The compiled kernels for a GPU of compute capability `cc`: compiled once per process and
/// target (failures too, so a broken libnvrtc is asked once).
fn image_for(cc: u32) -> Result<(Target, Arc<Vec<u8>>), HwError> {
    type Cache = HashMap<u32, Result<(Target, Arc<Vec<u8>>), HwError>>;
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(r) = cache.get(&cc) {
        return r.clone();
    }
    let r = supported_archs().and_then(|archs| {
        let target = choose_target(cc, &archs).map_err(|detail| HwError::Unavailable {
            what: "a kernel compiler for this GPU".into(),
            detail,
        })?;
        Ok((target, Arc::new(compile(target)?)))
    });
    cache.insert(cc, r.clone());
    r
}

/// The loaded kernels of one GPU; unloaded on drop.
struct Module {
    module: sys::CUmodule,
    ctx: Arc<CudaContext>,
    funcs: HashMap<&'static str, sys::CUfunction>,
}

impl Module {
    fn load(gpu: &Gpu, target: Target, image: &[u8]) -> Result<Module, HwError> {
        gpu.bind()?;
        // SAFETY: a CUBIN or NUL-terminated PTX produced by NVRTC.
        let module = ck(
            &format!(
                "cuModuleLoadData (training kernels, {}) on {}",
                target.option(),
                gpu.label()
            ),
            unsafe { result::module::load_data(image.as_ptr() as *const c_void) },
        )?;
        let mut m = Module {
            module,
            ctx: gpu.ctx.clone(),
            funcs: HashMap::new(),
        };
        for name in kernels::KERNEL_NAMES {
            let c = CString::new(*name).unwrap_or_default();
            // SAFETY: live module.
            let f = ck(&format!("cuModuleGetFunction({name})"), unsafe {
                result::module::get_function(module, c)
            })?;
            m.funcs.insert(name, f);
        }
        Ok(m)
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: loaded once, unloaded once, nothing running (streams synchronised first).
            let _ = unsafe { sys::cuModuleUnload(self.module) };
        }
    }
}

/// The f32 elements of the all-reduces that connect a sharded run's communicators before its
/// first step (one word, 1 MiB, 64 MiB; see `with_groups`).
const WARM_UP_WORDS: [usize; 3] = [1, 1 << 18, 1 << 24];
// The largest is held only during the warm-up, in at most half the memory the replica's buffers
// leave free for the libraries.
const _: () =
    assert!((WARM_UP_WORDS[2] * 4) as u64 * 2 <= crate::training::plan::LIBRARY_RESERVE_BYTES);

pub(super) fn bk(call: &str, r: Result<(), blas::CublasError>) -> Result<(), HwError> {
    r.map_err(|e| HwError::Call {
        call: call.into(),
        detail: format!("{:?}", e.0),
    })
}

/// A cuBLAS handle on a stream, with a math mode; destroyed on drop (errors ignored).
pub(super) struct Blas {
    handle: bsys::cublasHandle_t,
    ctx: Arc<CudaContext>,
}

impl Blas {
    pub(super) fn new(gpu: &Gpu, stream: &CudaStream, math: Math) -> Result<Blas, HwError> {
        gpu.bind()?;
        let handle = blas::create_handle().map_err(|e| HwError::Call {
            call: format!("cublasCreate on {}", gpu.label()),
            detail: format!("{:?}", e.0),
        })?;
        let b = Blas {
            handle,
            ctx: gpu.ctx.clone(),
        };
        // SAFETY: live handle and stream of the current context.
        bk("cublasSetStream", unsafe {
            blas::set_stream(handle, stream.cu_stream() as _)
        })?;
        let mode = match math {
            Math::Pedantic => bsys::cublasMath_t::CUBLAS_PEDANTIC_MATH,
            Math::Fp32 | Math::Bf16 => bsys::cublasMath_t::CUBLAS_DEFAULT_MATH,
            Math::Tf32 => bsys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
        };
        // SAFETY: live handle.
        bk(&format!("cublasSetMathMode({mode:?})"), unsafe {
            bsys::cublasSetMathMode(handle, mode).result()
        })?;
        Ok(b)
    }
}

impl Blas {
    /// The handle, for calls made outside this file (the compute check's GEMMs).
    pub(super) fn raw(&self) -> bsys::cublasHandle_t {
        self.handle
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: created once, destroyed once, after the streams were synchronised.
            let _ = unsafe { blas::destroy_handle(self.handle) };
        }
    }
}

/// A kernel argument's bytes, for cuLaunchKernel (which copies each argument's size from its
/// pointer).
#[repr(C, align(8))]
struct Slot([u8; 8]);

/// The bytes of a kernel argument as its C type lays them out; pointers resolved by `resolve`.
fn slot(a: &Arg, resolve: &dyn Fn(Ptr) -> Result<u64, HwError>) -> Result<Slot, HwError> {
    let mut s = Slot([0; 8]);
    match a {
        Arg::Ptr(p) => s.0.copy_from_slice(&resolve(*p)?.to_ne_bytes()),
        Arg::U64(v) => s.0.copy_from_slice(&v.to_ne_bytes()),
        Arg::U32(v) => s.0[..4].copy_from_slice(&v.to_ne_bytes()),
        Arg::I32(v) => s.0[..4].copy_from_slice(&v.to_ne_bytes()),
        Arg::F32(v) => s.0[..4].copy_from_slice(&v.to_ne_bytes()),
    }
    Ok(s)
}

/// One replica: its GPU, kernels, cuBLAS handle, buffers and events. Fields drop in order:
/// events, handle and module before the buffers.
struct Replica<'g> {
    gpu: &'g Gpu,
    events: HashMap<EvId, CudaEvent>,
    blas: Blas,
    module: Module,
    bufs: HashMap<Buf, DevBuf>,
}

impl Replica<'_> {
    fn stream(&self, s: Stream) -> &CudaStream {
        match s {
            Stream::Compute => &self.gpu.streams[0],
            Stream::Comm => &self.gpu.streams[1],
        }
    }

    fn ptr(&self, p: Ptr) -> Result<u64, HwError> {
        let b = self.bufs.get(&p.buf).ok_or_else(|| HwError::Call {
            call: "the training plan".into(),
            detail: format!("no buffer {:?} on {}", p.buf, self.gpu.label()),
        })?;
        let at = p.byte_offset();
        if at > b.bytes {
            return Err(HwError::Call {
                call: "the training plan".into(),
                detail: format!("{:?} is past the end of a {} byte buffer", p, b.bytes),
            });
        }
        Ok(b.ptr + at as u64)
    }

    /// The device address of `bytes` from `p`, all of them inside its buffer.
    fn span(&self, p: Ptr, bytes: usize) -> Result<u64, HwError> {
        let start = self.ptr(p)?;
        let size = self.bufs.get(&p.buf).map_or(0, |b| b.bytes);
        if p.byte_offset().saturating_add(bytes) > size {
            return Err(HwError::Call {
                call: "the training plan".into(),
                detail: format!(
                    "{bytes} bytes from {p:?} run past the end of a {size} byte buffer"
                ),
            });
        }
        Ok(start)
    }

    fn launch(&self, l: &plan::Launch) -> Result<(), HwError> {
        let f = *self
            .module
            .funcs
            .get(l.kernel)
            .ok_or_else(|| HwError::Call {
                call: "the training plan".into(),
                detail: format!("no kernel {}", l.kernel),
            })?;
        let mut slots = l
            .args
            .iter()
            .map(|a| slot(a, &|p| self.ptr(p)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut params: Vec<*mut c_void> = slots
            .iter_mut()
            .map(|s| s.0.as_mut_ptr() as *mut c_void)
            .collect();
        // SAFETY: the function belongs to this context; each parameter points at a value of the
        // type the kernel declares (checked against the source by the plan's tests); the
        // pointers address this replica's buffers within bounds.
        ck(&format!("cuLaunchKernel({})", l.kernel), unsafe {
            result::launch_kernel(
                f,
                (l.grid, 1, 1),
                (l.block, 1, 1),
                0,
                self.gpu.streams[0].cu_stream(),
                &mut params,
            )
        })
    }

    fn gemm(&self, g: &plan::Gemm) -> Result<(), HwError> {
        let (a, b, c) = (self.ptr(g.a)?, self.ptr(g.b)?, self.ptr(g.c)?);
        let (alpha, beta) = (1.0f32, 0.0f32);
        if g.operands() == Elem::Bf16 {
            return self.gemm_bf16(g, a, b, c);
        }
        let call = self.gemm_call("cublasSgemm", g, "");
        // SAFETY: the plan sizes every operand within its buffer; host scalars.
        bk(&call, unsafe {
            blas::sgemm(
                self.blas.handle,
                op(g.transa),
                op(g.transb),
                g.m,
                g.n,
                g.k,
                &alpha,
                a as *const f32,
                g.lda,
                b as *const f32,
                g.ldb,
                &beta,
                c as *mut f32,
                g.ldc,
            )
        })
    }

    /// How a GEMM call is named in errors: `cublasSgemm(TN, m=.., n=.., k=..) on GPU 0`.
    fn gemm_call(&self, name: &str, g: &plan::Gemm, extra: &str) -> String {
        format!(
            "{name}({}{}, m={}, n={}, k={}{extra}) on {}",
            if g.transa { "T" } else { "N" },
            if g.transb { "T" } else { "N" },
            g.m,
            g.n,
            g.k,
            self.gpu.label()
        )
    }

    /// `C (fp32) = op(A)·op(B)` with bf16 `A` and `B`, accumulated in fp32 on tensor cores.
    fn gemm_bf16(&self, g: &plan::Gemm, a: u64, b: u64, c: u64) -> Result<(), HwError> {
        if g.b.buf.elem() != Elem::Bf16 || g.c.buf.elem() != Elem::Word {
            return Err(HwError::Call {
                call: "the training plan".into(),
                detail: format!("a bf16 GEMM must read two bf16 buffers and write fp32: {g:?}"),
            });
        }
        // With CUBLAS_COMPUTE_32F, alpha and beta are fp32.
        let (alpha, beta) = (1.0f32, 0.0f32);
        let call = self.gemm_call(
            "cublasGemmEx",
            g,
            ", bf16 x bf16 -> fp32, CUBLAS_COMPUTE_32F",
        );
        // SAFETY: the plan sizes every operand within its buffer (bf16 buffers hold 2-byte
        // elements, the output 4-byte ones); host scalars of the compute type.
        bk(&call, unsafe {
            blas::gemm_ex(
                self.blas.handle,
                op(g.transa),
                op(g.transb),
                g.m,
                g.n,
                g.k,
                &alpha as *const f32 as *const c_void,
                a as *const c_void,
                bsys::cudaDataType::CUDA_R_16BF,
                g.lda,
                b as *const c_void,
                bsys::cudaDataType::CUDA_R_16BF,
                g.ldb,
                &beta as *const f32 as *const c_void,
                c as *mut c_void,
                bsys::cudaDataType::CUDA_R_32F,
                g.ldc,
                bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        })
    }

    fn gemv(&self, g: &plan::Gemv) -> Result<(), HwError> {
        let (a, x, y) = (self.ptr(g.a)?, self.ptr(g.x)?, self.ptr(g.y)?);
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: as for the GEMM.
        bk(
            &format!("cublasSgemv(m={}, n={}) on {}", g.m, g.n, self.gpu.label()),
            unsafe {
                blas::sgemv(
                    self.blas.handle,
                    bsys::cublasOperation_t::CUBLAS_OP_N,
                    g.m,
                    g.n,
                    &alpha,
                    a as *const f32,
                    g.lda,
                    x as *const f32,
                    1,
                    &beta,
                    y as *mut f32,
                    1,
                )
            },
        )
    }

    fn event(&self, ev: &EvId) -> Result<&CudaEvent, HwError> {
        self.events.get(ev).ok_or_else(|| HwError::Call {
            call: "the training plan".into(),
            detail: format!("event {ev:?} was never recorded on {}", self.gpu.label()),
        })
    }
}

/// The replicas of a run, one per GPU, and the NCCL communicators when there are several.
pub(crate) struct GpuDevice<'g> {
    reps: Vec<Replica<'g>>,
    comms: Option<&'g nccl::Comms>,
    /// A sharded run's communicators, by the ranks of their group (ascending).
    groups: Vec<(Vec<usize>, nccl::Comms)>,
}

impl<'g> GpuDevice<'g> {
    /// Check memory (for `m`'s run of `steps` steps), load the kernels, make a cuBLAS handle
    /// and allocate `buffers` on every GPU.
    fn new(
        gpus: &[&'g Gpu],
        comms: Option<&'g nccl::Comms>,
        m: &Model,
        steps: usize,
        buffers: &[(Buf, usize)],
    ) -> Result<Self, HwError> {
        let mut dev = GpuDevice {
            reps: Vec::with_capacity(gpus.len()),
            comms,
            groups: Vec::new(),
        };
        for g in gpus {
            g.bind()?;
            let (major, minor) = ck(
                "cuDeviceGetAttribute(COMPUTE_CAPABILITY)",
                g.ctx.compute_capability(),
            )?;
            plan::check_arch(m, (major, minor), &g.label())?;
            let (free, total) = ck("cuMemGetInfo", result::mem_get_info())?;
            plan::check_memory(m, steps, free as u64, total as u64, &g.label())?;
            let (target, image) = image_for((major * 10 + minor).max(0) as u32)?;
            let module = Module::load(g, target, &image)?;
            let blas = Blas::new(g, &g.streams[0], m.math)?;
            let mut bufs = HashMap::new();
            for &(b, n) in buffers {
                bufs.insert(b, DevBuf::new(g, n * b.elem().bytes())?);
            }
            dev.reps.push(Replica {
                gpu: g,
                events: HashMap::new(),
                blas,
                module,
                bufs,
            });
        }
        Ok(dev)
    }

    /// Communicators for every tensor-parallel and data-parallel group of `p` that has two
    /// ranks or more, each connected by [`WARM_UP_WORDS`] all-reduces.
    fn with_groups(mut self, p: Partition) -> Result<Self, HwError> {
        let mut groups: Vec<Vec<usize>> = Vec::new();
        if p.tp() > 1 {
            groups.extend((0..p.dp()).map(|g| p.tp_group(g)));
        }
        if p.dp() > 1 {
            groups.extend((0..p.tp()).map(|t| p.dp_group(t)));
        }
        for ranks in groups {
            let gpus = ranks
                .iter()
                .map(|&r| Ok(self.rep(r)?.gpu))
                .collect::<Result<Vec<&Gpu>, HwError>>()?;
            let comms = nccl::Comms::init(&gpus)?;
            // All-reduces waited for before the first step: NCCL connects a communicator's
            // peers on its first collective of each algorithm and protocol (lazily, since NCCL
            // 2.22), which must not happen while the other kind's kernels already hold the
            // GPUs. One word (LL), 1 MiB (LL128) and 64 MiB (Simple, and NVLS or tree where
            // NCCL takes them): the protocols a step's all-reduces choose between. The 64 MiB
            // fit in the memory left for the libraries.
            for words in WARM_UP_WORDS {
                let held = gpus
                    .iter()
                    .map(|g| {
                        let b = DevBuf::new(g, words * 4)?;
                        b.memset(0)?;
                        Ok(b)
                    })
                    .collect::<Result<Vec<DevBuf>, HwError>>()?;
                let bufs: Vec<_> = gpus
                    .iter()
                    .zip(&held)
                    .map(|(g, b)| (b.ptr, g.streams[0].cu_stream()))
                    .collect();
                nccl::all_reduce_in_place(&comms, &bufs, words)?;
                for g in &gpus {
                    g.sync_streams()?;
                }
                comms.async_errors()?;
            }
            self.groups.push((ranks, comms));
        }
        Ok(self)
    }

    /// Abort a failed sharded run's communicators before the streams are waited for: an
    /// all-reduce that some ranks reached and others never will would hold its streams forever.
    fn abort_groups(&mut self) {
        self.groups.clear();
    }

    fn rep(&mut self, r: usize) -> Result<&mut Replica<'g>, HwError> {
        let n = self.reps.len();
        self.reps.get_mut(r).ok_or_else(|| HwError::Call {
            call: "the training plan".into(),
            detail: format!("replica {r} of {n}"),
        })
    }
}

impl Drop for GpuDevice<'_> {
    fn drop(&mut self) {
        // Nothing may be freed under a kernel or an all-reduce still running.
        for r in &self.reps {
            let _ = r.gpu.sync_streams();
        }
    }
}

fn as_bytes_mut(v: &mut [u32]) -> &mut [u8] {
    // SAFETY: u32 has no padding; u8 has alignment 1 and any bit pattern is valid for both.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v)) }
}

impl Device for GpuDevice<'_> {
    fn exec(&mut self, r: usize, op: &Op) -> Result<(), HwError> {
        let rep = self.rep(r)?;
        rep.gpu.bind()?;
        match op {
            Op::Launch(l) => rep.launch(l),
            Op::Gemm(g) => rep.gemm(g),
            Op::Gemv(g) => rep.gemv(g),
            Op::Record(s, ev) => {
                if !rep.events.contains_key(ev) {
                    let e = rep.gpu.event()?;
                    rep.events.insert(*ev, e);
                }
                driver::record(rep.event(ev)?, rep.stream(*s))
            }
            Op::Wait(s, ev) => driver::wait(rep.stream(*s), rep.event(ev)?),
            Op::AllReduce(_) | Op::GroupAllReduce(_) => Err(HwError::Call {
                call: "the training plan".into(),
                detail: "an all-reduce is issued for all replicas at once".into(),
            }),
        }
    }

    fn all_reduce(&mut self, b: &Bucket) -> Result<(), HwError> {
        let comms = self.comms.ok_or_else(|| HwError::Call {
            call: "the training plan".into(),
            detail: "an all-reduce without NCCL communicators".into(),
        })?;
        let bufs = self
            .reps
            .iter()
            .map(|rep| {
                Ok((
                    rep.ptr(Ptr::at(Buf::Grads, b.offset))?,
                    rep.gpu.streams[1].cu_stream(),
                ))
            })
            .collect::<Result<Vec<_>, HwError>>()?;
        nccl::all_reduce_in_place(comms, &bufs, b.len)
    }

    fn group_all_reduce(&mut self, ranks: &[usize], reduce: &GroupReduce) -> Result<(), HwError> {
        let comms = &self
            .groups
            .iter()
            .find(|(g, _)| g == ranks)
            .ok_or_else(|| HwError::Call {
                call: "the training plan".into(),
                detail: format!(
                    "no NCCL communicator for the {:?}-parallel group of ranks {ranks:?}",
                    reduce.group
                ),
            })?
            .1;
        let bytes = reduce.len * Elem::Word.bytes();
        let bufs = ranks
            .iter()
            .map(|&r| {
                let rep = self.reps.get(r).ok_or_else(|| HwError::Call {
                    call: "the training plan".into(),
                    detail: format!("rank {r} of {}", self.reps.len()),
                })?;
                Ok((
                    rep.span(reduce.at, bytes)?,
                    rep.stream(reduce.stream).cu_stream(),
                ))
            })
            .collect::<Result<Vec<_>, HwError>>()?;
        nccl::all_reduce_in_place(comms, &bufs, reduce.len)
    }

    fn sync(&mut self) -> Result<(), HwError> {
        for r in &self.reps {
            r.gpu.sync_streams()?;
        }
        if let Some(c) = self.comms {
            c.async_errors()?;
        }
        for (_, c) in &self.groups {
            c.async_errors()?;
        }
        Ok(())
    }

    fn read(&mut self, r: usize, buf: Buf, len: usize) -> Result<Vec<u32>, HwError> {
        let rep = self.rep(r)?;
        let b = rep.bufs.get(&buf).ok_or_else(|| HwError::Call {
            call: "the training plan".into(),
            detail: format!("no buffer {buf:?}"),
        })?;
        let mut out = vec![0u32; len];
        match buf.elem() {
            Elem::Word => b.read(0, as_bytes_mut(&mut out))?,
            Elem::Bf16 => {
                // One bf16 pattern per word, as the plan's emulation holds them.
                let mut half = vec![0u8; 2 * len];
                b.read(0, &mut half)?;
                for (w, h) in out.iter_mut().zip(half.chunks_exact(2)) {
                    *w = u32::from(u16::from_ne_bytes([h[0], h[1]]));
                }
            }
        }
        Ok(out)
    }

    fn elapsed_ms(&mut self, r: usize, from: EvId, to: EvId) -> Result<f64, HwError> {
        let rep = self.rep(r)?;
        driver::elapsed_ms(rep.event(&from)?, rep.event(&to)?)
    }
}

fn run_on(
    gpus: &[&Gpu],
    comms: Option<&nccl::Comms>,
    m: &Model,
    opts: &plan::TrainOpts,
) -> Result<plan::Outcome, HwError> {
    if gpus.len() != m.replicas {
        return Err(HwError::Call {
            call: "the training plan".into(),
            detail: format!("{} replicas on {} GPUs", m.replicas, gpus.len()),
        });
    }
    let mut dev = GpuDevice::new(gpus, comms, m, opts.steps, &m.buffers(opts.steps))?;
    plan::train(&mut dev, m, opts)
}

/// A sharded run (tensor-parallel or hybrid) on the first `s.ranks()` GPUs, with a
/// communicator set per group made for it. The memory check is the data-parallel replica's:
/// no rank holds more than it. The node-wide communicators are released first (the collective
/// check and the data-parallel run make them again when they need them): with them, a GPU
/// would hold three sets at once.
pub(crate) fn sharded(
    c: &mut Cuda,
    s: &Sharded,
    opts: &plan::TrainOpts,
) -> Result<ShardedOutcome, HwError> {
    c.nccl = None;
    let all = c.all()?;
    let gpus = all.get(..s.ranks()).ok_or_else(|| HwError::Call {
        call: "the training plan".into(),
        detail: format!("{} ranks on {} GPUs", s.ranks(), all.len()),
    })?;
    let buffers = s.buffers(opts.steps);
    let mut dev =
        GpuDevice::new(gpus, None, s.base(), opts.steps, &buffers)?.with_groups(s.partition())?;
    let r = plan::sharded::train(&mut dev, s, opts);
    if r.is_err() {
        dev.abort_groups();
    }
    r
}

/// The golden configuration on GPU 0: inputs checked against the CPU first, nothing timed.
pub(crate) fn golden(c: &mut Cuda, m: &Model, steps: usize) -> Result<plan::Outcome, HwError> {
    let opts = plan::TrainOpts {
        steps,
        warmup: steps,
        verify_inputs: true,
    };
    run_on(&[c.gpu(0)?], None, m, &opts)
}

/// The data-parallel run on every GPU (NCCL communicators made on first use), or with
/// `m.replicas == 1` on GPU 0 alone.
pub(crate) fn data_parallel(
    c: &mut Cuda,
    m: &Model,
    steps: usize,
    warmup: usize,
) -> Result<plan::Outcome, HwError> {
    let opts = plan::TrainOpts {
        steps,
        warmup,
        verify_inputs: false,
    };
    if m.replicas == 1 {
        return run_on(&[c.gpu(0)?], None, m, &opts);
    }
    if c.nccl.is_none() {
        c.nccl = Some(nccl::Comms::init(&c.all()?)?);
    }
    let r = run_on(&c.all()?, c.nccl.as_ref(), m, &opts);
    if r.is_err() {
        // A communicator that saw a failure is not reused.
        c.nccl = None;
    }
    r
}

/// cuBLAS's name for a transposed or plain operand.
fn op(transposed: bool) -> bsys::cublasOperation_t {
    if transposed {
        bsys::cublasOperation_t::CUBLAS_OP_T
    } else {
        bsys::cublasOperation_t::CUBLAS_OP_N
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cubin_for_a_known_gpu_ptx_for_a_newer_one() {
        let archs = [50, 60, 70, 75, 80, 86, 89, 90];
        assert_eq!(choose_target(90, &archs), Ok(Target::Cubin(90)));
        assert_eq!(choose_target(86, &archs), Ok(Target::Cubin(86)));
        // A Blackwell GPU with an NVRTC from before it: PTX of the newest known, for the driver.
        assert_eq!(choose_target(100, &archs), Ok(Target::Ptx(90)));
        assert_eq!(choose_target(87, &archs), Ok(Target::Ptx(86)));
        let e = choose_target(37, &archs).unwrap_err();
        assert!(
            e.contains("sm_50, sm_60") && e.ends_with("the GPU is sm_37"),
            "{e}"
        );
        assert!(choose_target(90, &[])
            .unwrap_err()
            .contains("no architecture"));
        assert_eq!(Target::Cubin(90).option(), "--gpu-architecture=sm_90");
        assert_eq!(Target::Ptx(90).option(), "--gpu-architecture=compute_90");
    }

    /// Whether libnvrtc loads here; if not, says what is `skipped`. CI installs libnvrtc and sets
    /// NODECERT_REQUIRE_NVRTC: there a test must not skip.
    fn nvrtc_here(skipped: &str) -> bool {
        if super::super::libs::Lib::Nvrtc.loadable() {
            return true;
        }
        assert!(
            std::env::var_os("NODECERT_REQUIRE_NVRTC").is_none(),
            "NODECERT_REQUIRE_NVRTC is set but libnvrtc cannot be loaded"
        );
        eprintln!("libnvrtc not loadable: {skipped}");
        false
    }

    /// NVRTC needs no GPU: wherever libnvrtc loads (a GPU machine, a CUDA install, or here with
    /// the nvidia-cuda-nvrtc wheel's folder on LD_LIBRARY_PATH) the kernels are compiled for real.
    #[test]
    fn kernels_compile_for_every_data_centre_architecture_where_libnvrtc_is_present() {
        if !nvrtc_here("kernel compilation not tried") {
            return;
        }
        let archs = supported_archs().unwrap();
        assert!(archs.contains(&90), "{archs:?}");
        for cc in [70, 80, 86, 89, 90, 100] {
            if !archs.contains(&cc) {
                continue;
            }
            let cubin = compile(Target::Cubin(cc)).unwrap_or_else(|e| panic!("sm_{cc}: {e}"));
            assert_eq!(&cubin[..4], b"\x7fELF", "sm_{cc}: not a CUBIN");
            eprintln!("sm_{cc}: CUBIN of {} bytes", cubin.len());
        }
        // PTX: NUL-terminated, one unmangled entry per kernel the plan looks up.
        let ptx = compile(Target::Ptx(90)).unwrap();
        assert_eq!(ptx.last(), Some(&0));
        let text = String::from_utf8_lossy(&ptx);
        for name in kernels::KERNEL_NAMES {
            assert!(
                text.contains(&format!(".entry {name}(")),
                "{name} missing from the PTX"
            );
        }
        // The bf16 run's conversion kernel: in the CUBIN of every architecture with bf16 tensor
        // cores (sm_80 and newer), which is where the bf16 run uses it.
        let mut bf16_archs = 0;
        for cc in archs.iter().copied().filter(|&a| a >= 80) {
            let cubin = compile(Target::Cubin(cc)).unwrap_or_else(|e| panic!("sm_{cc}: {e}"));
            assert!(
                cubin.windows(11).any(|w| w == b"nc_to_bf16\0"),
                "sm_{cc}: nc_to_bf16 missing from the CUBIN"
            );
            let alone = compile_source(kernels::CONVERT, Target::Cubin(cc))
                .unwrap_or_else(|e| panic!("sm_{cc}: {e}"));
            assert_eq!(&alone[..4], b"\x7fELF");
            bf16_archs += 1;
        }
        assert!(bf16_archs >= 3, "{archs:?}");
        // A compile error carries NVRTC's log.
        let e = compile_source(
            "extern \"C\" __global__ void k(float* x) { x[0] = undefined_thing; }",
            Target::Cubin(90),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("nvrtcCompileProgram (training kernels, --gpu-architecture=sm_90) failed: NVRTC_ERROR_COMPILATION"), "{e}");
        assert!(e.contains("undefined_thing"), "{e}");
        // The cache answers the second time without compiling.
        let (t, a) = image_for(90).unwrap();
        let (_, b) = image_for(90).unwrap();
        assert_eq!(t, Target::Cubin(90));
        assert!(Arc::ptr_eq(&a, &b));
    }

    /// The `.param` types of each `.entry` of NVRTC's PTX, e.g. `["u64", "u32", "f32"]`.
    fn ptx_params(ptx: &str) -> HashMap<String, Vec<String>> {
        let mut out = HashMap::new();
        for (i, m) in ptx.match_indices(".entry ") {
            let rest = &ptx[i + m.len()..];
            let open = rest.find('(').unwrap();
            let close = rest.find(')').unwrap();
            let types = rest[open + 1..close]
                .split(',')
                .filter(|p| !p.trim().is_empty())
                .map(|p| {
                    let words: Vec<&str> = p.split_whitespace().collect();
                    assert!(
                        words.len() == 3 && words[0] == ".param",
                        "unexpected PTX parameter `{p}`"
                    );
                    words[1].trim_start_matches('.').to_string()
                })
                .collect();
            out.insert(rest[..open].trim().to_string(), types);
        }
        out
    }

    /// What cuLaunchKernel copies for a parameter of each PTX type (bytes, float or not), and
    /// what [`slot`] lays out for each argument.
    fn ptx_shape(ty: &str) -> (usize, bool) {
        let bits: usize = ty[1..].parse().unwrap_or_else(|_| panic!("PTX type {ty}"));
        (bits / 8, ty.starts_with('f'))
    }

    fn arg_shape(a: &Arg) -> (usize, bool) {
        match a {
            Arg::Ptr(_) | Arg::U64(_) => (8, false),
            Arg::U32(_) | Arg::I32(_) => (4, false),
            Arg::F32(_) => (4, true),
        }
    }

    /// The arguments of every launch the plans make, against the parameters of the kernels as
    /// NVRTC compiled them (not as the source reads): same count, and each the size and class
    /// cuLaunchKernel copies. Wherever libnvrtc loads.
    #[test]
    fn every_launch_matches_the_compiled_kernels_parameters() {
        if !nvrtc_here("compiled parameters not checked") {
            return;
        }
        let ptx = compile(Target::Ptx(80)).unwrap();
        let params = ptx_params(&String::from_utf8_lossy(&ptx[..ptx.len() - 1]));
        assert_eq!(params.len(), kernels::KERNEL_NAMES.len(), "{params:?}");
        let mut ops = Vec::new();
        for math in [Math::Pedantic, Math::Bf16] {
            let m = Model {
                layers: vec![64, 128, 128, 10],
                local_batch: 256,
                replicas: 2,
                lr: 0.5,
                seed: 1,
                math,
            };
            ops.extend(plan::init_ops(&m));
            ops.extend(plan::step_ops(&m, &m.buckets(), 1, 1));
        }
        let mut seen = 0;
        for op in &ops {
            let Op::Launch(l) = op else { continue };
            let want: Vec<(usize, bool)> = params[l.kernel].iter().map(|t| ptx_shape(t)).collect();
            let got: Vec<(usize, bool)> = l.args.iter().map(arg_shape).collect();
            assert_eq!(
                got, want,
                "{}: {:?} vs PTX {:?}",
                l.kernel, l.args, params[l.kernel]
            );
            seen += 1;
        }
        assert!(seen > 20, "{seen}");
        // The slots hold each argument in its first bytes, as many as the shape says.
        let resolve = |_: Ptr| -> Result<u64, HwError> { Ok(u64::MAX) };
        for a in [
            Arg::U32(u32::MAX),
            Arg::I32(-1),
            Arg::F32(f32::from_bits(u32::MAX)),
        ] {
            let s = slot(&a, &resolve).unwrap();
            let n = arg_shape(&a).0;
            assert!(s.0[..n].iter().all(|&b| b == 0xff) && s.0[n..].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn kernel_arguments_are_laid_out_as_their_c_types() {
        // cuLaunchKernel copies sizeof(param) bytes from each pointer.
        let resolve = |p: Ptr| -> Result<u64, HwError> {
            match p.buf {
                Buf::Grads => Ok(0x7f00_0000_0000 + (p.offset * plan::WORD) as u64),
                other => Err(HwError::Call {
                    call: "test".into(),
                    detail: format!("{other:?}"),
                }),
            }
        };
        let cases = [
            (Arg::U32(0xdead_beef), 0xdead_beefu32.to_ne_bytes().to_vec()),
            (Arg::I32(-2), (-2i32).to_ne_bytes().to_vec()),
            (Arg::F32(1.5), 1.5f32.to_ne_bytes().to_vec()),
            (
                Arg::U64(u64::MAX - 1),
                (u64::MAX - 1).to_ne_bytes().to_vec(),
            ),
            (
                Arg::Ptr(Ptr::at(Buf::Grads, 3)),
                0x7f00_0000_000cu64.to_ne_bytes().to_vec(),
            ),
        ];
        for (a, bytes) in cases {
            let s = slot(&a, &resolve).unwrap();
            assert_eq!(&s.0[..bytes.len()], bytes.as_slice(), "{a:?}");
        }
        assert!(slot(&Arg::Ptr(Ptr::of(Buf::Ones)), &resolve).is_err());
        assert_eq!(std::mem::align_of::<Slot>(), 8);
    }
}
