//! The compute check's fp8 GEMMs, through cuBLASLt: `cublasGemmEx` has no fp8, and
//! `cublasLtMatmul` is what `torch._scaled_mm` calls.
//!
//! One n×n×n GEMM, `D = A·B`, e4m3 operands, fp32 accumulation (`CUBLAS_COMPUTE_32F`) and
//! fp32 output, no scales (cuBLASLt's default scale is 1), fast accumulation off (as
//! `_scaled_mm`'s default): the product of integer operands stays exact and is checked like
//! the other precisions' ([`crate::backend::gemm_data`]).
//!
//! cuBLASLt's fp8 kernels on Ada and Hopper take only the "TN" form: A transposed, B not
//! (column-major). `op(A) = Aₛᵀ` with `Aₛ` stored k×m, so the matrix to upload for `A` is its
//! transpose ([`upload_order`]): `A`'s elements in row-major order.
//!
//! What cuBLASLt cannot do here is not a fault of the node: a heuristic query that finds no
//! algorithm (`CUBLAS_STATUS_NOT_SUPPORTED`) becomes [`HwError::NotSupported`] (the check says
//! "not available here" with the library's words); every other failure is an error of the call
//! it names ([`lt_error`]).

use super::driver::{DevBuf, Gpu};
use crate::error::HwError;
use cudarc::cublaslt::{result as lt, sys as lsys};
use cudarc::driver::CudaContext;
use rayon::prelude::*;
use std::ffi::c_void;
use std::sync::Arc;

/// The workspace cuBLASLt may use: NVIDIA's recommendation for Hopper (32 MiB), which also
/// covers every older GPU's (4 MiB).
const WORKSPACE: usize = 32 << 20;

/// An `HwError` for a failed cuBLASLt call: "no algorithm" from the heuristic query is a
/// precision this library and GPU do not offer; anything else is the call's failure.
pub fn lt_error(call: &str, status: lsys::cublasStatus_t, heuristic: bool) -> HwError {
    if heuristic && status == lsys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED {
        return HwError::NotSupported(format!(
            "{call}: cuBLASLt {} offers no algorithm for e4m3 x e4m3 -> fp32 (A transposed, \
             fp32 compute, {} MiB of workspace) here",
            lt_version().unwrap_or_else(|| "(version unknown)".into()),
            WORKSPACE >> 20
        ));
    }
    HwError::Call {
        call: call.into(),
        detail: format!("{status:?}"),
    }
}

/// "13.1.0" from `cublasLtGetVersion` (13 × 10000 + 1 × 100 + 0); None before the library loads.
fn lt_version() -> Option<String> {
    if !super::libs::Lib::CublasLt.loadable() {
        return None;
    }
    // SAFETY: the library loads (checked above); the call has no arguments and no side effects.
    let v = unsafe { lsys::cublasLtGetVersion() };
    Some(version_text(v))
}

/// cuBLAS's version number as text: major × 10000 + minor × 100 + patch.
pub fn version_text(v: usize) -> String {
    format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100)
}

/// The e4m3 (OCP "E4M3FN": 1 sign bit, 4 exponent bits of bias 7, 3 mantissa bits) encoding of
/// an integer, for every integer it holds exactly (|v| <= 16, and larger ones with at most four
/// significant bits, up to 448); None for the others.
pub fn e4m3_bits(v: i8) -> Option<u8> {
    let sign = if v < 0 { 0x80u8 } else { 0 };
    let m = v.unsigned_abs();
    if m == 0 {
        return Some(sign);
    }
    let e = 7 - m.leading_zeros(); // floor(log2 m), 0..=7
                                   // m = 1.fff × 2^e: the three bits after the leading one, which must be all there is.
    let frac = if e >= 3 {
        if m & ((1 << (e - 3)) - 1) != 0 {
            return None;
        }
        (m >> (e - 3)) & 0x7
    } else {
        (m << (3 - e)) & 0x7
    };
    Some(sign | (((e as u8) + 7) << 3) | frac)
}

/// The order in which `m` (n×n, column-major: (i, j) at i + j·n) goes to the GPU as the
/// transposed operand of a TN GEMM: element (i, j) at j + i·n.
pub fn upload_order(m: &[i8], n: usize) -> Vec<i8> {
    let mut t = vec![0i8; m.len()];
    t.par_chunks_mut(n.max(1)).enumerate().for_each(|(i, row)| {
        for (j, x) in row.iter_mut().enumerate() {
            *x = m[i + j * n];
        }
    });
    t
}

/// e4m3 bytes of integer operands; an error names the first value e4m3 cannot hold (the
/// operand range for fp8 keeps them all exact, so this would be a bug, said, not a panic).
pub fn fp8_bytes(m: &[i8]) -> Result<Vec<u8>, HwError> {
    m.par_iter()
        .map(|&v| {
            e4m3_bits(v).ok_or_else(|| HwError::Call {
                call: "fp8 operands".into(),
                detail: format!("{v} is not exact in e4m3"),
            })
        })
        .collect()
}

/// A cuBLASLt fp8 GEMM planned for one GPU: handle, descriptors, the algorithm the heuristic
/// chose, and its workspace. Destroyed on drop (after the GPU's streams are synchronised).
pub struct LtGemm {
    handle: lsys::cublasLtHandle_t,
    desc: lsys::cublasLtMatmulDesc_t,
    layouts: Vec<lsys::cublasLtMatrixLayout_t>,
    algo: lsys::cublasLtMatmulAlgo_t,
    workspace: DevBuf,
    ctx: Arc<CudaContext>,
}

impl LtGemm {
    /// Plan `D (n×n, fp32) = A·B` with e4m3 `A` (uploaded in [`upload_order`]) and `B` on `g`.
    pub fn new(g: &Gpu, n: u64) -> Result<LtGemm, HwError> {
        if !super::libs::Lib::CublasLt.loadable() {
            return Err(super::libs::missing(super::libs::Lib::CublasLt));
        }
        g.bind()?;
        let on = g.label();
        let call = |what: &str| format!("{what} on {on}");
        let handle =
            lt::create_handle().map_err(|e| lt_error(&call("cublasLtCreate"), e.0, false))?;
        let workspace = match DevBuf::new(g, WORKSPACE) {
            Ok(w) => w,
            Err(e) => {
                // SAFETY: created just above, destroyed once.
                let _ = unsafe { lt::destroy_handle(handle) };
                return Err(e);
            }
        };
        let mut plan = LtGemm {
            handle,
            desc: std::ptr::null_mut(),
            layouts: Vec::new(),
            algo: lsys::cublasLtMatmulAlgo_t { data: [0; 8] },
            workspace,
            ctx: g.ctx.clone(),
        };
        plan.desc = lt::create_matmul_desc(
            lsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            lsys::cudaDataType::CUDA_R_32F,
        )
        .map_err(|e| lt_error(&call("cublasLtMatmulDescCreate"), e.0, false))?;
        // cublasOperation_t: CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 (an int).
        for (attr, op) in [
            (
                lsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                1i32,
            ),
            (
                lsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
                0i32,
            ),
        ] {
            // SAFETY: a live descriptor; the value is an int, as the attribute takes.
            unsafe {
                lt::set_matmul_desc_attribute(
                    plan.desc,
                    attr,
                    &op as *const i32 as *const c_void,
                    std::mem::size_of::<i32>(),
                )
            }
            .map_err(|e| lt_error(&call("cublasLtMatmulDescSetAttribute"), e.0, false))?;
        }
        let ld = i64::try_from(n).map_err(|_| HwError::Call {
            call: call("cublasLtMatrixLayoutCreate"),
            detail: format!("side {n} is beyond cuBLASLt's leading dimension"),
        })?;
        for ty in [
            lsys::cudaDataType::CUDA_R_8F_E4M3,
            lsys::cudaDataType::CUDA_R_8F_E4M3,
            lsys::cudaDataType::CUDA_R_32F,
        ] {
            let l = lt::create_matrix_layout(ty, n, n, ld)
                .map_err(|e| lt_error(&call("cublasLtMatrixLayoutCreate"), e.0, false))?;
            plan.layouts.push(l);
        }
        let pref = lt::create_matmul_pref()
            .map_err(|e| lt_error(&call("cublasLtMatmulPreferenceCreate"), e.0, false))?;
        let size = WORKSPACE;
        // SAFETY: live preference; the attribute takes a u64 (size_t) byte count.
        let set = unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                lsys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &size as *const usize as *const c_void,
                std::mem::size_of::<usize>(),
            )
        };
        let heuristic = set.and_then(|()| {
            // SAFETY: live handle, descriptor, layouts and preference.
            unsafe {
                lt::get_matmul_algo_heuristic(
                    plan.handle,
                    plan.desc,
                    plan.layouts[0],
                    plan.layouts[1],
                    plan.layouts[2],
                    plan.layouts[2],
                    pref,
                )
            }
        });
        // SAFETY: created above, destroyed once; the heuristic result does not refer to it.
        let _ = unsafe { lt::destroy_matmul_pref(pref) };
        let found = heuristic.map_err(|e| {
            lt_error(
                &call(&format!("cublasLtMatmulAlgoGetHeuristic(fp8, {n}x{n}x{n})")),
                e.0,
                true,
            )
        })?;
        plan.algo = found.algo;
        Ok(plan)
    }

    /// A closure that queues one GEMM `D = A·B` on `g`'s first stream: `a` (in
    /// [`upload_order`]) and `b` e4m3, `d` fp32, each n×n.
    pub fn enqueuer(
        &self,
        g: &Gpu,
        a: &DevBuf,
        b: &DevBuf,
        d: &DevBuf,
        label: String,
    ) -> impl FnMut() -> Result<(), HwError> + 'static {
        // Plain pointers and values, copied into the closure: the LtGemm and the buffers are
        // kept until the GPU is synchronised.
        let (handle, desc, algo) = (self.handle, self.desc, self.algo);
        let [a_layout, b_layout, d_layout] = [self.layouts[0], self.layouts[1], self.layouts[2]];
        let work = self.workspace.ptr;
        let stream = g.streams[0].cu_stream() as lsys::cudaStream_t;
        let (pa, pb, pd) = (a.ptr, b.ptr, d.ptr);
        move || {
            let (alpha, beta) = (1.0f32, 0.0f32);
            // SAFETY: the handle, descriptors, algorithm and workspace belong to a live
            // LtGemm, and A, B (n² bytes) and D (n² fp32) to live buffers of this GPU; all
            // outlive every queued GEMM (the stream is synchronised before they drop). beta is
            // 0, so C (D's buffer and layout) is not read.
            unsafe {
                lt::matmul(
                    handle,
                    desc,
                    &alpha as *const f32 as *const c_void,
                    &beta as *const f32 as *const c_void,
                    pa as *const c_void,
                    a_layout,
                    pb as *const c_void,
                    b_layout,
                    pd as *const c_void,
                    d_layout,
                    pd as *mut c_void,
                    d_layout,
                    &algo,
                    work as *mut c_void,
                    WORKSPACE,
                    stream,
                )
            }
            .map_err(|e| lt_error(&label, e.0, false))
        }
    }
}

impl Drop for LtGemm {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_err() {
            return;
        }
        // SAFETY: each object was created once by `new` and is destroyed once, after the
        // GEMMs that used them were synchronised (errors are ignored: nothing to do on drop).
        unsafe {
            for l in self.layouts.drain(..) {
                let _ = lt::destroy_matrix_layout(l);
            }
            if !self.desc.is_null() {
                let _ = lt::destroy_matmul_desc(self.desc);
            }
            let _ = lt::destroy_handle(self.handle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of an e4m3 byte (NaN for 0x7f and 0xff, the format's only non-numbers).
    fn e4m3_value(b: u8) -> f32 {
        let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
        let exp = i32::from((b >> 3) & 0xf);
        let frac = f32::from(b & 0x7);
        if b & 0x7f == 0x7f {
            return f32::NAN;
        }
        if exp == 0 {
            return sign * frac / 8.0 * 2f32.powi(-6);
        }
        sign * (1.0 + frac / 8.0) * 2f32.powi(exp - 7)
    }

    #[test]
    fn e4m3_encodes_as_the_ocp_format_and_every_small_integer_exactly() {
        // OCP 8-bit floating point, E4M3: 1.0 = 0 0111 000, 2.0 = 0 1000 000, 448 the largest.
        assert_eq!(e4m3_bits(0), Some(0x00));
        assert_eq!(e4m3_bits(1), Some(0x38));
        assert_eq!(e4m3_bits(2), Some(0x40));
        assert_eq!(e4m3_bits(-1), Some(0xb8));
        assert_eq!(e4m3_bits(-2), Some(0xc0));
        assert_eq!(e4m3_bits(3), Some(0x44));
        assert_eq!(e4m3_bits(9), Some(0x51));
        for v in -16i8..=16 {
            let b = e4m3_bits(v).unwrap_or_else(|| panic!("{v} is exact in e4m3"));
            assert_eq!(e4m3_value(b), f32::from(v), "{v} -> {b:#04x}");
        }
        // Beyond 16 only four significant bits fit: 17 and 33 are not exact, 18, 120 are.
        assert_eq!(e4m3_bits(17), None);
        assert_eq!(e4m3_bits(33), None);
        assert_eq!(e4m3_bits(-127), None);
        assert_eq!(e4m3_value(e4m3_bits(18).unwrap()), 18.0);
        assert_eq!(e4m3_value(e4m3_bits(120).unwrap()), 120.0);
        assert_eq!(e4m3_value(e4m3_bits(-112).unwrap()), -112.0);
        assert!(e4m3_value(0x7f).is_nan() && e4m3_value(0xff).is_nan());
        assert_eq!(e4m3_value(0x7e), 448.0);
        assert_eq!(e4m3_value(0x01), 2f32.powi(-9));
    }

    #[test]
    fn every_integer_e4m3_holds_is_encoded_and_no_other() {
        for v in i8::MIN..=i8::MAX {
            let exact = (0u8..=0xff)
                .filter(|b| e4m3_value(*b) == f32::from(v))
                .collect::<Vec<_>>();
            match e4m3_bits(v) {
                // Zero has two encodings (+0 and -0); every other value one.
                Some(b) => assert!(exact.contains(&b), "{v}: {b:#04x} not in {exact:?}"),
                None => assert!(exact.is_empty(), "{v} is exact as {exact:?}"),
            }
        }
    }

    #[test]
    fn fp8_operands_are_converted_or_refused_never_rounded() {
        assert_eq!(fp8_bytes(&[-2, 0, 1]).unwrap(), vec![0xc0, 0x00, 0x38]);
        let e = fp8_bytes(&[1, 17]).unwrap_err().to_string();
        assert!(e.contains("17 is not exact in e4m3"), "{e}");
    }

    #[test]
    fn the_transposed_operand_is_the_matrix_in_row_major_order() {
        // A column-major 3×3 A = [[0, 1, 2], [3, 4, 5], [6, 7, 8]] (row i: 3i, 3i+1, 3i+2).
        let n = 3;
        let a: Vec<i8> = (0..9).map(|k| ((k % 3) * 3 + k / 3) as i8).collect();
        assert_eq!(a, [0, 3, 6, 1, 4, 7, 2, 5, 8]);
        let t = upload_order(&a, n);
        assert_eq!(t, [0, 1, 2, 3, 4, 5, 6, 7, 8]);
        // What cuBLASLt computes in TN form, column-major: D(i, j) = sum_l Aₛ(l, i)·B(l, j),
        // Aₛ k×m with leading dimension k. With Aₛ the upload, D is A·B.
        let b: Vec<i8> = vec![1, -2, 0, 2, 1, -1, 0, 1, 1];
        for i in 0..n {
            for j in 0..n {
                let tn: i32 = (0..n)
                    .map(|l| i32::from(t[l + i * n]) * i32::from(b[l + j * n]))
                    .sum();
                let ab: i32 = (0..n)
                    .map(|l| i32::from(a[i + l * n]) * i32::from(b[l + j * n]))
                    .sum();
                assert_eq!(tn, ab, "({i}, {j})");
            }
        }
        // Across the row blocks rayon splits: every element lands where it belongs.
        let n = 37;
        let m: Vec<i8> = (0..n * n).map(|k| (k % 251) as i8).collect();
        let t = upload_order(&m, n);
        for i in 0..n {
            for j in 0..n {
                assert_eq!(t[j + i * n], m[i + j * n]);
            }
        }
    }

    #[test]
    fn no_algorithm_is_not_available_here_and_other_failures_are_errors() {
        let s = lsys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED;
        assert!(matches!(
            lt_error("cublasLtMatmulAlgoGetHeuristic", s, true),
            HwError::NotSupported(m) if m.contains("offers no algorithm for e4m3 x e4m3 -> fp32 \
                (A transposed, fp32 compute, 32 MiB of workspace)")
        ));
        // The same status from the GEMM itself, or another status from the query: errors.
        assert!(matches!(
            lt_error("cublasLtMatmul", s, false),
            HwError::Call { .. }
        ));
        let e = lt_error(
            "cublasLtMatmulAlgoGetHeuristic",
            lsys::cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE,
            true,
        );
        assert!(
            matches!(&e, HwError::Call { detail, .. } if detail == "CUBLAS_STATUS_INVALID_VALUE"),
            "{e:?}"
        );
    }

    #[test]
    fn cublas_versions_read_as_major_minor_patch() {
        assert_eq!(version_text(130100), "13.1.0");
        assert_eq!(version_text(120805), "12.8.5");
    }
}
