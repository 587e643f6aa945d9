//! CUDA C sources (for NVRTC) of the training check, defined to match [`super::reference`].
//!
//! Compile [`SOURCE`] once per device (it holds every kernel) and look the kernels up by the names
//! in [`KERNEL_NAMES`]. The group constants ([`DATA`], [`INIT`], ...) are the same code split up,
//! each self-contained (with [`COMMON`]), for a caller that wants only some.
//!
//! NVRTC options: the defaults. Never `--use_fast_math`, `-ftz=true`, `-prec-div=false` or
//! `-prec-sqrt=false`. The bit-exact parts (data, teacher, init, bias add, ReLU, bias gradient,
//! SGD, scale) use only integer operations and the explicitly rounded intrinsics `__fadd_rn`,
//! `__fsub_rn`, `__fmul_rn`, `__fdiv_rn`, `__fsqrt_rn`, which the compiler never contracts into
//! FMAs, so they match the CPU whatever `--fmad` says. Only `expf`/`logf` in `nc_softmax_xent`
//! differ from the CPU (by an ulp or two), which the trajectory tolerance absorbs.
//!
//! Types: `ull` is `unsigned long long` (Rust `u64`), `uint` is `unsigned int` (`u32`). Every
//! matrix is row-major as in the reference. "Grid-stride" kernels accept any grid: launch
//! `block = 256`, `grid = min(ceil(n / 256), 65535)` (or 4 × the SM count).
//!
//! | kernel | what | launch |
//! |---|---|---|
//! | `nc_gen_features(float* x, ull seed, ull step, ull sample_offset, uint rows, uint in_dim)` | `x[r][f] = sample_feature(seed, step, sample_offset + r, f)` | grid-stride over `rows·in_dim` |
//! | `nc_gen_teacher(int* w, ull seed, uint classes, uint in_dim)` | `w[c][f] = teacher_weight(seed, c, f)`, once per run | grid-stride over `classes·in_dim` |
//! | `nc_gen_labels(uint* labels, const float* x, const int* w, uint rows, uint in_dim, uint classes)` | `sample_label`, from `x` (after `nc_gen_features`) and the teacher | one warp per row: `block 256`, `grid ceil(rows/8)` |
//! | `nc_init_weights(float* w, ull seed, uint layer, ull count, uint fan_in)` | `w[i] = init_param(seed, layer, i, fan_in)` | grid-stride over `count = out·in` |
//! | `nc_init_weight_block(float* w, ull seed, uint layer, uint rows, uint cols, ull first, ull ld, uint fan_in)` | `w[r][c] = init_param(seed, layer, first + r·ld + c, fan_in)`: a tensor-parallel rank's block of `W_layer` (row length `ld`) | grid-stride over `rows·cols` |
//! | `nc_fill(float* p, ull n, float v)` | `p[i] = v` (biases start at 0) | grid-stride over `n` |
//! | `nc_bias_act_fwd(float* y, const float* b, uint rows, uint cols, int relu)` | after the forward GEMM: `y[r][c] = y[r][c] + b[c]`, then ReLU if `relu != 0` | grid-stride over `rows·cols` |
//! | `nc_relu_bwd(float* dx, const float* h, ull n)` | after the `dX` GEMM: `dx[i] = h[i] > 0 ? dx[i] : 0`, `h` the layer's input (ReLU output) | grid-stride over `n` |
//! | `nc_softmax_xent(const float* z, const uint* labels, float* loss, float* dz, uint rows, uint classes, float scale)` | per-row loss and `dz = (softmax(z) - onehot)·scale`; `scale = 1/global_batch` | one thread per row: `block 128`, `grid ceil(rows/128)` |
//! | `nc_sum_serial(const float* x, ull n, float* out)` | `*out = Σ x[i]` in index order (the step's loss sum) | `grid 1`, `block 1` |
//! | `nc_scale(float* x, ull n, float s)` | `x[i] = x[i]·s` (e.g. `1/N` after an all-reduce sum) | grid-stride over `n` |
//! | `nc_sgd(float* p, const float* g, ull n, float lr)` | `p[i] = p[i] - lr·g[i]`, two roundings | grid-stride over `n` |
//! | `nc_checksum(const float* x, ull n, ull* out)` | `*out += device_checksum(x)` (atomic, order-independent); zero `*out` first | grid-stride over `n` |
//! | `nc_to_bf16(const float* x, unsigned short* y, ull n)` | `y[i] = bf16_bits(x[i])`, round to nearest even (the bf16 run's GEMM operands) | grid-stride over `n` |
//!
//! One step on replica `r` of `N` (local batch `Bl = B/N`, `sample_offset = r·Bl`):
//! `nc_gen_features` + `nc_gen_labels`; per layer the forward GEMM + `nc_bias_act_fwd`;
//! `nc_softmax_xent` with `scale = 1/B`; `nc_sum_serial` of the `Bl` losses; per layer, last
//! first, `db = dYᵀ·1` (cuBLAS SGEMV with a vector of ones: a per-column loop over 8192 rows is
//! latency-bound and costs ~1 ms a layer), the `dW` GEMM, and (not for layer 0) the `dX` GEMM +
//! `nc_relu_bwd`; NCCL all-reduce (sum) of the gradients, in buckets; the loss is the sum of the
//! replicas' loss sums `/ B` (added on the host); `nc_sgd` on every tensor. With `scale = 1/B` no
//! `nc_scale` is needed. [`crate::training::plan`] builds exactly this sequence.
//!
//! In the bf16 (mixed-precision) run, `nc_to_bf16` makes the bf16 operands of the GEMMs: the
//! parameters at the start of each step, each layer's input after `nc_bias_act_fwd` (the batch
//! after `nc_gen_features`), each `dY` before its GEMMs; every other kernel is the fp32 one.

/// The shared device functions: the counter-based hash and the exact int-to-float conversion.
macro_rules! common_src {
    () => {
        r#"
typedef unsigned long long ull;
typedef unsigned int uint;

#define NC_GAMMA 0x9e3779b97f4a7c15ULL
#define NC_DOMAIN_FEATURE 0x6e63666561740001ULL
#define NC_DOMAIN_TEACHER 0x6e63746561630002ULL
#define NC_DOMAIN_PARAM 0x6e63706172610003ULL

/* splitmix64 finaliser. */
__device__ __forceinline__ ull nc_mix64(ull z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* h = domain; for w in (seed, a, b, c): h = mix64((h + GAMMA) ^ w). */
__device__ __forceinline__ ull nc_hash4(ull domain, ull seed, ull a, ull b, ull c) {
    ull h = domain;
    h = nc_mix64((h + NC_GAMMA) ^ seed);
    h = nc_mix64((h + NC_GAMMA) ^ a);
    h = nc_mix64((h + NC_GAMMA) ^ b);
    h = nc_mix64((h + NC_GAMMA) ^ c);
    return h;
}

/* Top 24 bits, centred: -2^23 <= k < 2^23. */
__device__ __forceinline__ int nc_centred_int24(ull h) {
    return (int)(h >> 40) - (1 << 23);
}

/* k * 2^-23, exact. */
__device__ __forceinline__ float nc_int24_to_unit(int k) {
    return __fmul_rn((float)k, 1.1920928955078125e-07f);
}

__device__ __forceinline__ ull nc_tid() {
    return (ull)blockIdx.x * (ull)blockDim.x + (ull)threadIdx.x;
}

__device__ __forceinline__ ull nc_stride() {
    return (ull)gridDim.x * (ull)blockDim.x;
}
"#
    };
}

macro_rules! data_src {
    () => {
        r#"
extern "C" __global__ void nc_gen_features(float* x, ull seed, ull step, ull sample_offset,
                                           uint rows, uint in_dim) {
    ull n = (ull)rows * (ull)in_dim;
    bool small = n <= 0xffffffffULL;
    for (ull i = nc_tid(); i < n; i += nc_stride()) {
        ull r, f;
        if (small) {
            /* 32-bit division: several times cheaper than 64-bit on the GPU. */
            uint j = (uint)i;
            r = j / in_dim;
            f = j - (uint)r * in_dim;
        } else {
            r = i / in_dim;
            f = i % in_dim;
        }
        ull h = nc_hash4(NC_DOMAIN_FEATURE, seed, step, sample_offset + r, f);
        x[i] = nc_int24_to_unit(nc_centred_int24(h));
    }
}

extern "C" __global__ void nc_gen_teacher(int* w, ull seed, uint classes, uint in_dim) {
    ull n = (ull)classes * (ull)in_dim;
    for (ull i = nc_tid(); i < n; i += nc_stride()) {
        ull c = i / in_dim;
        ull f = i % in_dim;
        ull h = nc_hash4(NC_DOMAIN_TEACHER, seed, c, f, 0ULL);
        w[i] = ((h >> 32) & 0xfULL) != 0ULL ? 0 : (int)(h >> 60) - 8;
    }
}

/* argmax_c sum_f k[f] * w[c][f] with k[f] = x[f] * 2^23 (exact), in 64-bit integers; the lowest
   class wins a tie. One warp per row (launch block 256, grid ceil(rows / 8)): lane l sums the
   features l, l + 32, ..., then the warp adds its lanes' sums. Integer sums are exact, so the order
   does not change the label. */
extern "C" __global__ void nc_gen_labels(uint* labels, const float* x, const int* w, uint rows,
                                         uint in_dim, uint classes) {
    ull r = nc_tid() / 32ULL;
    uint lane = threadIdx.x & 31u;
    if (r >= rows) return; /* the whole warp leaves together */
    const float* xr = x + r * (ull)in_dim;
    uint best = 0;
    long long best_score = -9223372036854775807LL - 1LL;
    for (uint c = 0; c < classes; ++c) {
        const int* wc = w + (ull)c * (ull)in_dim;
        long long score = 0;
        for (uint f = lane; f < in_dim; f += 32u) {
            int k = __float2int_rn(__fmul_rn(xr[f], 8388608.0f));
            score += (long long)k * (long long)wc[f];
        }
        for (int o = 16; o > 0; o >>= 1) score += __shfl_xor_sync(0xffffffffu, score, o);
        if (score > best_score) {
            best_score = score;
            best = c;
        }
    }
    if (lane == 0) labels[r] = best;
}
"#
    };
}

macro_rules! init_src {
    () => {
        r#"
extern "C" __global__ void nc_init_weights(float* w, ull seed, uint layer, ull count,
                                           uint fan_in) {
    float scale = __fsqrt_rn(__fdiv_rn(6.0f, (float)fan_in));
    for (ull i = nc_tid(); i < count; i += nc_stride()) {
        ull h = nc_hash4(NC_DOMAIN_PARAM, seed, (ull)layer, i, 0ULL);
        w[i] = __fmul_rn(nc_int24_to_unit(nc_centred_int24(h)), scale);
    }
}

/* w[r][c] = init_param(seed, layer, first + r * ld + c, fan_in) for r < rows, c < cols: the block
   of the full row-major W_layer (row length ld) that a tensor-parallel rank holds. */
extern "C" __global__ void nc_init_weight_block(float* w, ull seed, uint layer, uint rows,
                                                uint cols, ull first, ull ld, uint fan_in) {
    float scale = __fsqrt_rn(__fdiv_rn(6.0f, (float)fan_in));
    ull n = (ull)rows * (ull)cols;
    for (ull i = nc_tid(); i < n; i += nc_stride()) {
        ull r = i / (ull)cols;
        ull c = i - r * (ull)cols;
        ull h = nc_hash4(NC_DOMAIN_PARAM, seed, (ull)layer, first + r * ld + c, 0ULL);
        w[i] = __fmul_rn(nc_int24_to_unit(nc_centred_int24(h)), scale);
    }
}

extern "C" __global__ void nc_fill(float* p, ull n, float v) {
    for (ull i = nc_tid(); i < n; i += nc_stride()) {
        p[i] = v;
    }
}
"#
    };
}

macro_rules! layer_src {
    () => {
        r#"
extern "C" __global__ void nc_bias_act_fwd(float* y, const float* b, uint rows, uint cols,
                                           int relu) {
    ull n = (ull)rows * (ull)cols;
    bool small = n <= 0xffffffffULL;
    for (ull i = nc_tid(); i < n; i += nc_stride()) {
        uint c = small ? (uint)i % cols : (uint)(i % cols);
        float v = __fadd_rn(y[i], b[c]);
        if (relu) v = v > 0.0f ? v : 0.0f;
        y[i] = v;
    }
}

extern "C" __global__ void nc_relu_bwd(float* dx, const float* h, ull n) {
    for (ull i = nc_tid(); i < n; i += nc_stride()) {
        dx[i] = h[i] > 0.0f ? dx[i] : 0.0f;
    }
}
"#
    };
}

macro_rules! loss_src {
    () => {
        r#"
/* m = max z; e_j = exp(z_j - m); s = sum e_j; loss = ln s - (z_label - m);
   dz_j = (e_j / s - [j == label]) * scale. A label out of range gives a NaN loss. */
extern "C" __global__ void nc_softmax_xent(const float* z, const uint* labels, float* loss,
                                           float* dz, uint rows, uint classes, float scale) {
    ull r = nc_tid();
    if (r >= rows) return;
    const float* zr = z + r * (ull)classes;
    float* dr = dz + r * (ull)classes;
    uint label = labels[r];
    float m = __int_as_float(0xff800000);
    for (uint j = 0; j < classes; ++j) m = fmaxf(m, zr[j]);
    float s = 0.0f;
    for (uint j = 0; j < classes; ++j) {
        float e = expf(__fsub_rn(zr[j], m));
        dr[j] = e;
        s = __fadd_rn(s, e);
    }
    for (uint j = 0; j < classes; ++j) {
        float t = j == label ? 1.0f : 0.0f;
        dr[j] = __fmul_rn(__fsub_rn(__fdiv_rn(dr[j], s), t), scale);
    }
    loss[r] = label < classes ? __fsub_rn(logf(s), __fsub_rn(zr[label], m))
                              : __int_as_float(0x7fc00000);
}

/* Launch with one thread: a deterministic, CPU-ordered sum. */
extern "C" __global__ void nc_sum_serial(const float* x, ull n, float* out) {
    if (nc_tid() != 0) return;
    float s = 0.0f;
    /* Unrolled so that the loads are issued ahead of the (ordered) additions. */
#pragma unroll 16
    for (ull i = 0; i < n; ++i) s = __fadd_rn(s, x[i]);
    *out = s;
}
"#
    };
}

macro_rules! update_src {
    () => {
        r#"
extern "C" __global__ void nc_scale(float* x, ull n, float s) {
    for (ull i = nc_tid(); i < n; i += nc_stride()) {
        x[i] = __fmul_rn(x[i], s);
    }
}

extern "C" __global__ void nc_sgd(float* p, const float* g, ull n, float lr) {
    for (ull i = nc_tid(); i < n; i += nc_stride()) {
        p[i] = __fsub_rn(p[i], __fmul_rn(lr, g[i]));
    }
}

/* *out += sum_i mix64(mix64(i + GAMMA) ^ bits(x[i])), wrapping; zero *out before. */
extern "C" __global__ void nc_checksum(const float* x, ull n, ull* out) {
    ull acc = 0;
    for (ull i = nc_tid(); i < n; i += nc_stride()) {
        acc += nc_mix64(nc_mix64(i + NC_GAMMA) ^ (ull)__float_as_uint(x[i]));
    }
    atomicAdd(out, acc);
}
"#
    };
}

macro_rules! convert_src {
    () => {
        r#"
/* fp32 -> bf16 bits, round to nearest, ties to even (reference::bf16_bits). Integer operations
   only: the same bits as the CPU on every architecture, and as cvt.rn.bf16.f32 (sm_80+) for
   every non-NaN. A NaN stays a quiet NaN. */
__device__ __forceinline__ unsigned short nc_bf16_rn(float f) {
    uint u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

extern "C" __global__ void nc_to_bf16(const float* x, unsigned short* y, ull n) {
    for (ull i = nc_tid(); i < n; i += nc_stride()) {
        y[i] = nc_bf16_rn(x[i]);
    }
}
"#
    };
}

/// Hash and helpers shared by every kernel (no kernels).
pub const COMMON: &str = common_src!();
/// `nc_gen_features`, `nc_gen_teacher`, `nc_gen_labels`.
pub const DATA: &str = concat!(common_src!(), data_src!());
/// `nc_init_weights`, `nc_init_weight_block`, `nc_fill`.
pub const INIT: &str = concat!(common_src!(), init_src!());
/// `nc_bias_act_fwd`, `nc_relu_bwd`.
pub const LAYER: &str = concat!(common_src!(), layer_src!());
/// `nc_softmax_xent`, `nc_sum_serial`.
pub const LOSS: &str = concat!(common_src!(), loss_src!());
/// `nc_scale`, `nc_sgd`, `nc_checksum`.
pub const UPDATE: &str = concat!(common_src!(), update_src!());
/// `nc_to_bf16`.
pub const CONVERT: &str = concat!(common_src!(), convert_src!());
/// Every kernel, in one translation unit.
pub const SOURCE: &str = concat!(
    common_src!(),
    data_src!(),
    init_src!(),
    layer_src!(),
    loss_src!(),
    update_src!(),
    convert_src!()
);

/// The `extern "C" __global__` kernels of [`SOURCE`].
pub const KERNEL_NAMES: &[&str] = &[
    "nc_gen_features",
    "nc_gen_teacher",
    "nc_gen_labels",
    "nc_init_weights",
    "nc_init_weight_block",
    "nc_fill",
    "nc_bias_act_fwd",
    "nc_relu_bwd",
    "nc_softmax_xent",
    "nc_sum_serial",
    "nc_scale",
    "nc_sgd",
    "nc_checksum",
    "nc_to_bf16",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::training::reference as r;

    fn kernels_in(src: &str) -> Vec<String> {
        src.match_indices("extern \"C\" __global__ void ")
            .map(|(i, m)| {
                let rest = &src[i + m.len()..];
                rest[..rest.find('(').expect("kernel without parameters")].to_string()
            })
            .collect()
    }

    fn assert_balanced(name: &str, src: &str) {
        for (open, close) in [('{', '}'), ('(', ')'), ('[', ']')] {
            let mut depth = 0i64;
            for ch in src.chars() {
                if ch == open {
                    depth += 1;
                } else if ch == close {
                    depth -= 1;
                }
                assert!(depth >= 0, "{name}: unmatched {close}");
            }
            assert_eq!(depth, 0, "{name}: unbalanced {open}{close}");
        }
        assert!(!src.contains("/*/"), "{name}: ambiguous comment");
        assert_eq!(
            src.matches("/*").count(),
            src.matches("*/").count(),
            "{name}: unterminated comment"
        );
    }

    #[test]
    fn every_kernel_is_declared_once_and_listed() {
        for name in KERNEL_NAMES {
            let decl = format!("extern \"C\" __global__ void {name}(");
            assert_eq!(SOURCE.matches(&decl).count(), 1, "{name}");
        }
        let mut found = kernels_in(SOURCE);
        let mut listed: Vec<String> = KERNEL_NAMES.iter().map(|s| s.to_string()).collect();
        found.sort();
        listed.sort();
        assert_eq!(found, listed);
        // The groups partition SOURCE's kernels.
        let mut groups: Vec<String> = [DATA, INIT, LAYER, LOSS, UPDATE, CONVERT]
            .iter()
            .flat_map(|g| kernels_in(g))
            .collect();
        groups.sort();
        assert_eq!(groups, listed);
        assert!(kernels_in(COMMON).is_empty());
    }

    #[test]
    fn sources_are_balanced() {
        for (name, src) in [
            ("COMMON", COMMON),
            ("DATA", DATA),
            ("INIT", INIT),
            ("LAYER", LAYER),
            ("LOSS", LOSS),
            ("UPDATE", UPDATE),
            ("CONVERT", CONVERT),
            ("SOURCE", SOURCE),
        ] {
            assert_balanced(name, src);
        }
    }

    #[test]
    fn constants_match_the_reference() {
        for (def, value) in [
            ("NC_GAMMA", r::GAMMA),
            ("NC_DOMAIN_FEATURE", r::DOMAIN_FEATURE),
            ("NC_DOMAIN_TEACHER", r::DOMAIN_TEACHER),
            ("NC_DOMAIN_PARAM", r::DOMAIN_PARAM),
        ] {
            let line = format!("#define {def} {value:#018x}ULL");
            assert!(COMMON.contains(&line), "missing `{line}`");
        }
        for mult in ["0xbf58476d1ce4e5b9ULL", "0x94d049bb133111ebULL"] {
            assert!(COMMON.contains(mult), "{mult}");
        }
        // 2^-23 as written in nc_int24_to_unit is exact.
        assert_eq!(
            "1.1920928955078125e-07".parse::<f32>().unwrap(),
            1.0 / 8_388_608.0
        );
        assert_eq!(
            "1.1920928955078125e-07".parse::<f64>().unwrap(),
            (2.0f64).powi(-23)
        );
    }

    #[test]
    fn exact_kernels_avoid_transcendentals_and_headers() {
        // Only the softmax may use expf/logf; nothing may use an explicit FMA.
        for src in [
            data_src!(),
            init_src!(),
            layer_src!(),
            update_src!(),
            convert_src!(),
        ] {
            assert!(!src.contains("expf") && !src.contains("logf"));
            assert!(!src.contains("fmaf"));
        }
        assert!(!SOURCE.contains("#include"), "NVRTC has no system headers");
    }

    #[test]
    fn the_bf16_conversion_is_the_references() {
        // The CUDA function, line by line, against reference::bf16_bits: the NaN test, the
        // rounding increment (0x7fff plus the lowest kept bit) and the shift.
        let body = CONVERT;
        assert!(body.contains(
            "if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);"
        ));
        assert!(body.contains("return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);"));
        assert!(body.contains("y[i] = nc_bf16_rn(x[i]);"));
        let transcribed = |u: u32| -> u16 {
            if (u & 0x7fff_ffff) > 0x7f80_0000 {
                ((u >> 16) | 0x0040) as u16
            } else {
                ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
            }
        };
        for u in [
            0u32,
            0x3f80_8000,
            0x3f81_8000,
            0x7f7f_ffff,
            0xff80_0000,
            0x7f80_0001,
            0x0001_8000,
            0xbeef_cafe,
        ] {
            assert_eq!(transcribed(u), r::bf16_bits(f32::from_bits(u)), "{u:#010x}");
        }
    }
}
