//! The compute check on real GPUs: square GEMMs through `cublasGemmEx` on one GPU, timed by CUDA
//! events in the copies' sampler (a host-function gate holds the stream while a sample's GEMMs
//! are queued), the product read back and checked ([`gemm_data`]).
//!
//! - fp32: `CUDA_R_32F` operands, `CUBLAS_COMPUTE_32F`, `CUBLAS_DEFAULT_MATH`: no TF32, as
//!   `torch.backends.cuda.matmul.allow_tf32 = False`;
//! - TF32: the same operands, `CUBLAS_COMPUTE_32F_FAST_TF32`;
//! - bf16: `CUDA_R_16BF` operands, fp32 output and accumulation (`CUBLAS_COMPUTE_32F`), as
//!   `torch.matmul` of bf16 tensors computes (it writes bf16; the rate is the same);
//! - fp8: e4m3 operands, fp32 output and accumulation, through `cublasLtMatmul` ([`super::lt`]:
//!   cuBLAS's GEMM has no fp8), as `torch._scaled_mm` with unit scales computes.

use super::copies::{run_samples, Group, Lane};
use super::driver::{ck, elapsed_ms, record, DevBuf, Gpu};
use super::lt::{self, LtGemm};
use super::train::{bk, Blas};
use super::Cuda;
use crate::backend::{gemm_data, GemmSample};
use crate::error::HwError;
use crate::suite::GemmPrecision;
use crate::training::plan::Math;
use cudarc::cublas::{result as blas, sys as bsys};
use cudarc::driver::CudaEvent;
use rayon::prelude::*;
use std::ffi::c_void;

/// The seed of the compute check's operands on GPU `gpu` (each GPU multiplies its own).
fn gemm_seed(gpu: usize) -> u64 {
    0x6e63_6765_6d6d_0000 ^ gpu as u64
}

/// GEMMs queued per timed sample: one at the plateau sizes, more for small ones, so that a
/// sample holds about 10^10 flops (a millisecond at 10 TFLOP/s) and launch gaps stay out.
pub fn gemms_per_sample(n: u64) -> u32 {
    let flops = 2.0 * (n as f64).powi(3);
    ((1e10 / flops).floor() as u32).clamp(1, 100)
}

/// TFLOP/s of each sample of `k` GEMMs of side `n` that took `secs`; an error for a sample
/// the GPU timed at no time.
pub fn tflops(n: u64, k: u32, secs: &[f64]) -> Result<Vec<f64>, HwError> {
    let flops = 2.0 * (n as f64).powi(3) * f64::from(k);
    crate::checks::positive_times(&format!("GEMMs of {n}³"), "s", secs)?;
    Ok(secs.iter().map(|t| flops / t / 1e12).collect())
}

/// Each operand element in the bytes of the precision's GEMM input (on every core: a plateau
/// operand has 2^28 elements); fp8's are [`lt::fp8_bytes`].
fn operand_bytes(p: GemmPrecision, m: &[i8]) -> Vec<u8> {
    let width = match p {
        GemmPrecision::Bf16 => 2,
        _ => 4,
    };
    let mut out = vec![0u8; m.len() * width];
    out.par_chunks_mut(width)
        .zip(m.par_iter())
        .for_each(|(o, &v)| match p {
            GemmPrecision::Bf16 => o.copy_from_slice(
                &crate::training::reference::bf16_bits(f32::from(v)).to_le_bytes(),
            ),
            _ => o.copy_from_slice(&f32::from(v).to_le_bytes()),
        });
    out
}

/// What multiplies: a cuBLAS handle on the GPU's first stream with the operands' type and
/// compute type (fp32, TF32, bf16), or a planned cuBLASLt GEMM (fp8).
enum Engine {
    Blas {
        blas: Blas,
        elem: bsys::cudaDataType,
        compute: bsys::cublasComputeType_t,
    },
    Lt(LtGemm),
}

/// One GPU ready to multiply: operands on the host (for the check) and on the GPU, the product
/// buffer, the engine.
struct Prepared {
    seed: u64,
    side: usize,
    a: Vec<i8>,
    b: Vec<i8>,
    // Dropped before the buffers (fields drop in order): the GEMMs are synchronised first.
    engine: Engine,
    da: DevBuf,
    db: DevBuf,
    dc: DevBuf,
    dim: i32,
    call: String,
}

/// Whether `g` can run `p` GEMMs here: NotSupported with why when not.
fn supported(g: &Gpu, p: GemmPrecision) -> Result<(), HwError> {
    let cc = ck(
        "cuDeviceGetAttribute(COMPUTE_CAPABILITY)",
        g.ctx.compute_capability(),
    )?;
    let need = p.min_compute_capability();
    if cc < need {
        return Err(HwError::NotSupported(format!(
            "{p} GEMMs need compute capability {}.{} or newer; {} is {}.{}",
            need.0,
            need.1,
            g.label(),
            cc.0,
            cc.1
        )));
    }
    Ok(())
}

impl Prepared {
    fn new(g: &Gpu, p: GemmPrecision, n: u64) -> Result<Prepared, HwError> {
        let side = usize::try_from(n).map_err(|_| HwError::Call {
            call: "GEMM".into(),
            detail: format!("side {n} does not fit this machine's addresses"),
        })?;
        let dim = i32::try_from(n).map_err(|_| HwError::Call {
            call: "GEMM".into(),
            detail: format!("side {n} is beyond cuBLAS's int"),
        })?;
        let seed = gemm_seed(g.index);
        let r = gemm_data::range(side, p);
        let a = gemm_data::matrix(seed, 0, side, r);
        let b = gemm_data::matrix(seed, 1, side, r);
        let (a_bytes, b_bytes) = match p {
            // TN form: A goes up transposed ([`lt::upload_order`]).
            GemmPrecision::Fp8 => (
                lt::fp8_bytes(&lt::upload_order(&a, side))?,
                lt::fp8_bytes(&b)?,
            ),
            _ => (operand_bytes(p, &a), operand_bytes(p, &b)),
        };
        let da = DevBuf::new(g, a_bytes.len())?;
        da.write(0, &a_bytes)?;
        let db = DevBuf::new(g, b_bytes.len())?;
        db.write(0, &b_bytes)?;
        drop((a_bytes, b_bytes));
        let dc = DevBuf::new(g, side * side * 4)?;
        // NaN everywhere: an element no GEMM wrote is wrong.
        dc.memset(0xff)?;
        let engine = match p {
            GemmPrecision::Fp8 => Engine::Lt(LtGemm::new(g, n)?),
            _ => {
                let (math, elem, compute) = match p {
                    GemmPrecision::Bf16 => (
                        Math::Bf16,
                        bsys::cudaDataType::CUDA_R_16BF,
                        bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    ),
                    GemmPrecision::Tf32 => (
                        Math::Tf32,
                        bsys::cudaDataType::CUDA_R_32F,
                        bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
                    ),
                    _ => (
                        Math::Fp32,
                        bsys::cudaDataType::CUDA_R_32F,
                        bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    ),
                };
                Engine::Blas {
                    blas: Blas::new(g, &g.streams[0], math)?,
                    elem,
                    compute,
                }
            }
        };
        let api = match engine {
            Engine::Lt(_) => "cublasLtMatmul",
            Engine::Blas { .. } => "cublasGemmEx",
        };
        let prep = Prepared {
            seed,
            side,
            a,
            b,
            engine,
            da,
            db,
            dc,
            dim,
            call: format!("{api}({p}, {n}x{n}x{n}) on {}", g.label()),
        };
        // One GEMM, untimed and outside any gate, waited for: cuBLAS loads its kernels on a
        // handle's first call (lazily, as CUDA loads modules by default since 12.2) and sets up
        // its workspace, either of which may synchronise the context. Inside a gated sample
        // that would wait for the gate the same thread has to open (10 s, then every later
        // figure of the run timed without the gate).
        prep.enqueuer(g)()?;
        g.sync_streams()?;
        // NaN again: the check must see the measured GEMMs' product, not the warm-up's.
        prep.dc.memset(0xff)?;
        Ok(prep)
    }

    /// A closure that queues one GEMM on `g`'s first stream (for the copies' sampler); `g` is
    /// the GPU this was prepared on.
    fn enqueuer(&self, g: &Gpu) -> Box<dyn FnMut() -> Result<(), HwError>> {
        let (blas, elem, compute) = match &self.engine {
            Engine::Lt(plan) => {
                return Box::new(plan.enqueuer(g, &self.da, &self.db, &self.dc, self.call.clone()))
            }
            Engine::Blas {
                blas,
                elem,
                compute,
            } => (blas, *elem, *compute),
        };
        let (h, pa, pb, pc) = (blas.raw(), self.da.ptr, self.db.ptr, self.dc.ptr);
        let (dim, call) = (self.dim, self.call.clone());
        Box::new(move || {
            // With CUBLAS_COMPUTE_32F(_FAST_TF32), alpha and beta are fp32.
            let (alpha, beta) = (1.0f32, 0.0f32);
            // SAFETY: A and B hold n² elements of `elem`, C n² fp32; the handle is bound to
            // this GPU's stream, and the buffers and handle outlive every queued GEMM (the
            // stream is synchronised before they drop).
            bk(&call, unsafe {
                blas::gemm_ex(
                    h,
                    bsys::cublasOperation_t::CUBLAS_OP_N,
                    bsys::cublasOperation_t::CUBLAS_OP_N,
                    dim,
                    dim,
                    dim,
                    &alpha as *const f32 as *const c_void,
                    pa as *const c_void,
                    elem,
                    dim,
                    pb as *const c_void,
                    elem,
                    dim,
                    &beta as *const f32 as *const c_void,
                    pc as *mut c_void,
                    bsys::cudaDataType::CUDA_R_32F,
                    dim,
                    compute,
                    bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            })
        })
    }

    /// Read the product back (after the stream is synchronised) and check it.
    fn check(&self) -> Result<gemm_data::ProductCheck, HwError> {
        let mut raw = vec![0u8; self.side * self.side * 4];
        self.dc.read(0, &mut raw)?;
        let c: Vec<f32> = raw
            .par_chunks_exact(4)
            .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        drop(raw);
        Ok(gemm_data::check_product(
            self.side, &self.a, &self.b, &c, self.seed,
        ))
    }
}

impl Cuda {
    /// A GPU by index; one that cannot be found is a failure to measure, not a precision it
    /// lacks.
    fn gemm_gpu(&self, gpu: usize) -> Result<&Gpu, HwError> {
        self.gpu(gpu).map_err(|e| match e {
            HwError::NotSupported(detail) => HwError::Call {
                call: "GPU lookup".into(),
                detail,
            },
            e => e,
        })
    }

    /// `iters` samples of GEMMs of side `n` in `p` on GPU `gpu`, after `warmup`, product checked.
    pub fn gemm(
        &self,
        gpu: usize,
        p: GemmPrecision,
        n: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<GemmSample, HwError> {
        let g = self.gemm_gpu(gpu)?;
        supported(g, p)?;
        let prep = Prepared::new(g, p, n)?;
        let k = gemms_per_sample(n);
        let (times, timing) = {
            let lane = Lane {
                gpu: g,
                stream: &g.streams[0],
                enqueue: prep.enqueuer(g),
            };
            let mut groups = vec![Group::new(vec![lane])?];
            let r = run_samples(&mut groups, k, warmup, iters, self.gating());
            g.sync_streams()?;
            r?
        };
        let check = prep.check()?;
        Ok(GemmSample {
            tflops: tflops(n, k, &times[0])?,
            elements_checked: check.checked,
            wrong_elements: check.wrong,
            timing: Some(timing),
        })
    }

    /// Every GPU at once under back-to-back GEMMs of side `n` in `p` until `seconds` have
    /// passed: per GPU, the rate of each window of about `window_ms` (CUDA events around the
    /// GEMMs a window queues), and the last product's check. `load` tells whoever reads the
    /// GPUs meanwhile when the load is on ([`LOADING`], operands uploaded and cuBLAS warm) and
    /// when it is over ([`LOAD_DONE`], before the products are read back and checked).
    pub fn sustained_gemm(
        &self,
        p: GemmPrecision,
        n: u64,
        seconds: f64,
        window_ms: u32,
        load: &std::sync::atomic::AtomicU8,
    ) -> Result<Vec<(Vec<f64>, gemm_data::ProductCheck)>, HwError> {
        let gpus = self.all()?;
        for g in &gpus {
            supported(g, p)?;
        }
        let preps: Vec<Prepared> = gpus
            .iter()
            .map(|g| Prepared::new(g, p, n))
            .collect::<Result<_, _>>()?;
        let mut queue: Vec<_> = preps
            .iter()
            .zip(&gpus)
            .map(|(x, g)| x.enqueuer(g))
            .collect();
        // Two pairs of events a GPU: the next window is queued before the last one is read,
        // so that no GPU idles while the host reads the others.
        let pair =
            |g: &Gpu| -> Result<(CudaEvent, CudaEvent), HwError> { Ok((g.event()?, g.event()?)) };
        let events: Vec<[(CudaEvent, CudaEvent); 2]> = gpus
            .iter()
            .map(|g| Ok([pair(g)?, pair(g)?]))
            .collect::<Result<_, HwError>>()?;
        let _sync = super::driver::SyncOnDrop(gpus.clone());
        // GEMMs a window: from CALIBRATION GEMMs timed on each GPU (cuBLAS is warm already).
        let mut per_window = Vec::new();
        for ((g, q), [(s, e), _]) in gpus.iter().zip(queue.iter_mut()).zip(&events) {
            g.bind()?;
            record(s, &g.streams[0])?;
            for _ in 0..CALIBRATION {
                q()?;
            }
            record(e, &g.streams[0])?;
            let t = (elapsed_ms(s, e)? / f64::from(CALIBRATION)).max(1e-3);
            per_window.push(((f64::from(window_ms) / t) as u32).clamp(1, 10_000));
        }
        let mut queue_window = |slot: usize| -> Result<(), HwError> {
            for (((g, q), ev), k) in gpus
                .iter()
                .zip(queue.iter_mut())
                .zip(&events)
                .zip(&per_window)
            {
                g.bind()?;
                record(&ev[slot].0, &g.streams[0])?;
                for _ in 0..*k {
                    q()?;
                }
                record(&ev[slot].1, &g.streams[0])?;
            }
            Ok(())
        };
        let mut rates = vec![Vec::new(); gpus.len()];
        load.store(LOADING, std::sync::atomic::Ordering::Relaxed);
        let start = std::time::Instant::now();
        let mut slot = 0;
        queue_window(slot)?;
        loop {
            let more = start.elapsed().as_secs_f64() < seconds;
            if more {
                queue_window(1 - slot)?;
            }
            for (i, ev) in events.iter().enumerate() {
                let secs = elapsed_ms(&ev[slot].0, &ev[slot].1)? / 1e3;
                rates[i].extend(tflops(n, per_window[i], &[secs])?);
            }
            if !more {
                break;
            }
            slot = 1 - slot;
        }
        // Every window has been read, so every GPU is done: what follows is not load.
        load.store(LOAD_DONE, std::sync::atomic::Ordering::Relaxed);
        for g in &gpus {
            g.sync_streams()?;
        }
        let mut out = Vec::new();
        for (r, prep) in rates.into_iter().zip(&preps) {
            out.push((r, prep.check()?));
        }
        Ok(out)
    }
}

/// GEMMs timed on each GPU to size the sustained load's windows.
const CALIBRATION: u32 = 3;

/// The sustained load's state, as [`Cuda::sustained_gemm`] tells it: operands and cuBLAS being
/// prepared, GEMMs running, GEMMs over.
pub const PREPARING: u8 = 0;
pub const LOADING: u8 = 1;
pub const LOAD_DONE: u8 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_gemms_are_batched_and_large_ones_timed_alone() {
        assert_eq!(gemms_per_sample(8192), 1);
        assert_eq!(gemms_per_sample(2048), 1);
        // 1024³ is 2.1e9 flops: 4 a sample.
        assert_eq!(gemms_per_sample(1024), 4);
        assert_eq!(gemms_per_sample(256), 100);
        assert_eq!(gemms_per_sample(16384), 1);
    }

    #[test]
    fn rates_count_every_gemm_of_a_sample_and_refuse_a_zero_time() {
        let r = tflops(1000, 2, &[2e-3, 4e-3]).unwrap();
        assert_eq!(r, [2.0, 1.0]);
        assert!(tflops(1000, 1, &[1e-3, 0.0]).is_err());
        assert!(tflops(1000, 1, &[f64::NAN]).is_err());
    }

    #[test]
    fn operands_reach_the_gpu_as_exact_values_of_their_type() {
        let m = [-2i8, -1, 0, 1, 2];
        let f = operand_bytes(GemmPrecision::Fp32, &m);
        assert_eq!(f.len(), 20);
        assert_eq!(&f[16..], &2.0f32.to_le_bytes());
        assert_eq!(operand_bytes(GemmPrecision::Tf32, &m), f);
        let h = operand_bytes(GemmPrecision::Bf16, &m);
        assert_eq!(h.len(), 10);
        // bf16 is the top half of the fp32 pattern: -2.0 = 0xc000.
        assert_eq!(&h[..2], &0xc000u16.to_le_bytes());
        assert_eq!(&h[8..], &0x4000u16.to_le_bytes());
        // Every operand the widest range holds is exact in bf16 (its top half, nothing lost).
        let all: Vec<i8> = (-127..=127).collect();
        let h = operand_bytes(GemmPrecision::Bf16, &all);
        for (v, b) in all.iter().zip(h.chunks_exact(2)) {
            let bits = u32::from(u16::from_le_bytes([b[0], b[1]])) << 16;
            assert_eq!(f32::from_bits(bits), f32::from(*v), "{v}");
        }
    }
}
