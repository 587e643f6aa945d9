//! CPU golden reference for the data-parallel MLP training check.
//!
//! Everything the GPU side computes is defined here first, in plain fp32 Rust; the CUDA sources in
//! [`super::kernels`] implement the same definitions.
//!
//! # What must match bit for bit, and what within a tolerance
//!
//! * **Bit-identical**: the synthetic data ([`sample_feature`], [`sample_label`]) and the initial
//!   parameters ([`init_param`]). They use only 64-bit integer arithmetic ([`hash4`]), an exact
//!   integer-to-float conversion and, for the weights, one IEEE-rounded multiply by a scale computed
//!   with IEEE-rounded division and `sqrt`. A node whose inputs or initial weights differ has a
//!   broken integer or float unit, or a broken kernel build.
//! * **Within a tolerance**: the losses. cuBLAS sums in its own order, `expf`/`logf` on the GPU are
//!   not correctly rounded, and an all-reduce adds in a third order, so losses differ from these by
//!   a few ulps per operation. [`compare_trajectory`] with [`DEFAULT_REL_TOL`]/[`DEFAULT_ABS_TOL`]
//!   over the first [`COMPARED_STEPS`] steps allows that and still catches a wrong kernel (see the
//!   [`Flaw`] tests).
//!
//! # The task
//!
//! Step `t` of a run trains on a fresh batch of `batch` samples. Sample `s` of step `t` has
//! features `x[f] = sample_feature(seed, t, s, f)`, uniform in `[-1, 1)` on a grid of `2^-23`, and
//! a label from a fixed hidden linear "teacher": `label = argmax_c Σ_f k[f]·w[c][f]` where
//! `k[f] = x[f]·2^23` is the feature's integer and `w[c][f] = teacher_weight(seed, c, f)` a sparse
//! random integer (zero with probability 15/16, else in `[-8, 7]`). The score is an exact `i64`
//! sum (order-independent); ties go to the lowest class. The task is linearly separable and the
//! sparsity makes the signal strong: the small config's loss falls by ~45% in 20 steps.
//!
//! Weights start Kaiming-uniform, `U[-1, 1)·sqrt(6 / fan_in)` ([`init_param`]); biases at zero.
//!
//! # Model, layouts and the matching cuBLAS calls
//!
//! `layers = [d0, d1, ..., dL]`. Layer `l` (0-based, `l < L`) maps `d_l -> d_{l+1}`; hidden layers
//! (`l < L-1`) apply ReLU, the last gives the logits. All matrices are **row-major**:
//!
//! * activations `X_l[B][d_l]` (`X_0` = the batch), weights `W_l[d_{l+1}][d_l]` (PyTorch's
//!   `nn.Linear` layout), biases `b_l[d_{l+1}]`, logits `Z[B][d_L]`;
//! * forward `Y = X·Wᵀ + b`, then ReLU on hidden layers;
//! * loss = mean over the batch of softmax cross-entropy; `dZ = (softmax(Z) - onehot(y)) / B`;
//! * backward `dW = dYᵀ·X`, `db[o] = Σ_b dY[b][o]`, `dX = dY·W`, then `dX *= (X > 0)` (the ReLU
//!   mask from the layer's own post-activation output);
//! * SGD: `p = p - lr·g` (a multiply then a subtract, each rounded: no FMA).
//!
//! A row-major `M[r][c]` buffer is, to column-major cuBLAS, the matrix `Mᵀ` (`c x r`, `ld = c`).
//! So, with `n = d_{l+1}` (out), `k = d_l` (in) and `B` the local batch, the exact calls are
//! (`cublasSgemm(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)`,
//! `alpha = 1`, `beta = 0`):
//!
//! | product | cuBLAS call |
//! |---|---|
//! | forward `Y = X·Wᵀ`  | `Sgemm(T, N, m=out, n=B,   k=in,  A=W,  lda=in,  B=X,  ldb=in,  C=Y,  ldc=out)` |
//! | `dX = dY·W`         | `Sgemm(N, N, m=in,  n=B,   k=out, A=W,  lda=in,  B=dY, ldb=out, C=dX, ldc=in)`  |
//! | `dW = dYᵀ·X`        | `Sgemm(N, T, m=in,  n=out, k=B,   A=X,  lda=in,  B=dY, ldb=out, C=dW, ldc=in)`  |
//!
//! then `nc_bias_act_fwd` adds the bias (and ReLU), `db = dYᵀ·1` is
//! `Sgemv(N, m=out, n=B, A=dY, lda=out, x=ones, y=db)`, and `nc_relu_bwd` masks `dX`. cuBLAS
//! must run in pure fp32: no `CUBLAS_TF32_TENSOR_OP_MATH` and no `NVIDIA_TF32_OVERRIDE=1` (TF32
//! moves losses by ~1e-3 and fails the comparison, as it should; nodecert sets that variable
//! aside before CUDA starts, `platform::cuda_env`).
//!
//! # Data parallelism
//!
//! With `N` replicas (`batch % N == 0`), replica `r` takes the samples
//! `r·B/N .. (r+1)·B/N` of every step (see [`replica_samples`]), computes gradients of the mean
//! loss over its `B/N` samples, and the gradients are averaged (NCCL all-reduce sum, then scale by
//! `1/N`; or equivalently scale `dZ` by `1/B` instead of `N/B` and all-reduce sum). The average of
//! the per-replica mean gradients is exactly the full-batch mean gradient (up to summation order),
//! so every replica holds the same parameters as the single-process run: the golden trajectory is
//! [`train`], whatever `N`. [`train_data_parallel`] simulates the replicas on the CPU to show it.
//! After the run, replicas are compared with each other with [`params_hash`] (all must be equal,
//! bit for bit: they apply the same all-reduced gradient to the same initial parameters).
//!
//! # Tensor parallelism
//!
//! [`sharded`] defines the tensor-parallel and hybrid runs the same way, rank by rank, with the
//! order of every sum across ranks stated.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::ops::Range;

pub mod sharded;

/// Relative tolerance recommended for [`compare_trajectory`] over the first [`COMPARED_STEPS`].
pub const DEFAULT_REL_TOL: f32 = 1e-4;
/// Absolute tolerance recommended for [`compare_trajectory`].
pub const DEFAULT_ABS_TOL: f32 = 1e-5;
/// Relative tolerance between a mixed-precision ([`GemmInputs::Bf16`]) trajectory and the fp32
/// one over the first [`COMPARED_STEPS`] steps. Rounding both operands of every product to bf16
/// (8 significant bits) moves the small configuration's losses by up to 2e-3 (measured: 2.2e-4
/// at step 0, 1.9e-3 at worst); 1e-2 leaves five times that. It is 100 times the golden
/// tolerance, which is why the golden comparison always runs in fp32.
pub const BF16_REL_TOL: f32 = 1e-2;
/// How many initial steps to compare: later steps amplify rounding differences (training is
/// chaotic), so the tolerance only holds for the beginning of a run.
pub const COMPARED_STEPS: usize = 20;

/// The odd "golden gamma" constant of splitmix64, added before every mixing round.
pub const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
/// Hash domain of the input features.
pub const DOMAIN_FEATURE: u64 = 0x6e63_6665_6174_0001;
/// Hash domain of the teacher's weights.
pub const DOMAIN_TEACHER: u64 = 0x6e63_7465_6163_0002;
/// Hash domain of the initial parameters.
pub const DOMAIN_PARAM: u64 = 0x6e63_7061_7261_0003;

/// The splitmix64 finaliser (Stafford's "Mix13"): a bijection on `u64`.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Counter-based hash of four words in a domain:
/// `h = domain; for w in [seed, a, b, c] { h = mix64((h + GAMMA) ^ w) }` (wrapping add).
pub fn hash4(domain: u64, seed: u64, a: u64, b: u64, c: u64) -> u64 {
    let mut h = domain;
    h = mix64(h.wrapping_add(GAMMA) ^ seed);
    h = mix64(h.wrapping_add(GAMMA) ^ a);
    h = mix64(h.wrapping_add(GAMMA) ^ b);
    mix64(h.wrapping_add(GAMMA) ^ c)
}

/// The top 24 bits of `h`, centred: an integer in `[-2^23, 2^23)`.
pub fn centred_int24(h: u64) -> i32 {
    (h >> 40) as i32 - (1 << 23)
}

/// `k · 2^-23`: exact for every `k` of [`centred_int24`]; uniform in `[-1, 1)`.
pub fn int24_to_unit(k: i32) -> f32 {
    k as f32 * (1.0 / 8_388_608.0)
}

/// The integer behind a feature: `x = k · 2^-23`.
pub fn feature_int(seed: u64, step: u64, sample: u64, feature: u64) -> i32 {
    centred_int24(hash4(DOMAIN_FEATURE, seed, step, sample, feature))
}

/// Feature `feature` of sample `sample` of step `step`: uniform in `[-1, 1)`, a multiple of
/// `2^-23` (exactly representable).
pub fn sample_feature(seed: u64, step: u64, sample: u64, feature: u64) -> f32 {
    int24_to_unit(feature_int(seed, step, sample, feature))
}

/// The teacher's weight for `(class, feature)`, from `h = hash4(DOMAIN_TEACHER, seed, class,
/// feature, 0)`: `0` unless bits 32..36 of `h` are all zero (probability 1/16), else the top 4 bits
/// minus 8, in `[-8, 7]`.
pub fn teacher_weight(seed: u64, class: u64, feature: u64) -> i32 {
    let h = hash4(DOMAIN_TEACHER, seed, class, feature, 0);
    if (h >> 32) & 0xf != 0 {
        return 0;
    }
    (h >> 60) as i32 - 8
}

/// The label of a sample: `argmax_c Σ_f feature_int(..f)·teacher_weight(c, f)`, summed exactly in
/// `i64`; the lowest class wins a tie.
pub fn sample_label(seed: u64, step: u64, sample: u64, in_dim: usize, classes: usize) -> u32 {
    let k: Vec<i32> = (0..in_dim as u64)
        .map(|f| feature_int(seed, step, sample, f))
        .collect();
    Teacher::new(seed, in_dim, classes).label(&k)
}

/// The teacher's weights, computed once per run.
struct Teacher {
    in_dim: usize,
    classes: usize,
    w: Vec<i32>,
}

impl Teacher {
    fn new(seed: u64, in_dim: usize, classes: usize) -> Self {
        let mut w = Vec::with_capacity(in_dim * classes);
        for c in 0..classes as u64 {
            for f in 0..in_dim as u64 {
                w.push(teacher_weight(seed, c, f));
            }
        }
        Teacher { in_dim, classes, w }
    }

    fn label(&self, k: &[i32]) -> u32 {
        let mut best = 0u32;
        let mut best_score = i64::MIN;
        for c in 0..self.classes {
            let row = &self.w[c * self.in_dim..(c + 1) * self.in_dim];
            let mut score = 0i64;
            let mut f = 0;
            while f < self.in_dim {
                score += row[f] as i64 * k[f] as i64;
                f += 1;
            }
            if score > best_score {
                best_score = score;
                best = c as u32;
            }
        }
        best
    }
}

/// The inputs (`[samples.len()][in_dim]`, row-major) and labels of `samples` of step `step`.
pub fn generate_batch(
    seed: u64,
    step: u64,
    samples: Range<usize>,
    in_dim: usize,
    classes: usize,
) -> (Vec<f32>, Vec<u32>) {
    let teacher = Teacher::new(seed, in_dim, classes);
    batch_with(&teacher, seed, step, samples)
}

fn batch_with(
    teacher: &Teacher,
    seed: u64,
    step: u64,
    samples: Range<usize>,
) -> (Vec<f32>, Vec<u32>) {
    let in_dim = teacher.in_dim;
    let mut x = Vec::with_capacity(samples.len() * in_dim);
    let mut y = Vec::with_capacity(samples.len());
    let mut k = vec![0i32; in_dim];
    for s in samples {
        for (f, kf) in k.iter_mut().enumerate() {
            *kf = feature_int(seed, step, s as u64, f as u64);
        }
        x.extend(k.iter().map(|&kf| int24_to_unit(kf)));
        y.push(teacher.label(&k));
    }
    (x, y)
}

/// `sqrt(6 / fan_in)` (the Kaiming-uniform bound for ReLU), both operations IEEE-rounded:
/// `__fsqrt_rn(__fdiv_rn(6.0f, (float)fan_in))` on the GPU.
pub fn init_scale(fan_in: usize) -> f32 {
    (6.0 / fan_in as f32).sqrt()
}

/// Initial value of element `index` of the row-major weight matrix `W_layer[out][in]`
/// (`fan_in = in`): `int24_to_unit(centred_int24(hash4(DOMAIN_PARAM, seed, layer, index, 0)))`,
/// uniform in `[-1, 1)`, times [`init_scale`]`(fan_in)`: one rounded multiply. Biases start at
/// zero.
pub fn init_param(seed: u64, layer: u64, index: u64, fan_in: usize) -> f32 {
    int24_to_unit(centred_int24(hash4(DOMAIN_PARAM, seed, layer, index, 0))) * init_scale(fan_in)
}

/// Errors of an [`MlpConfig`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("an MLP needs at least 2 layer sizes (input and classes), got {0}")]
    TooFewLayers(usize),
    #[error("layer size {index} is zero")]
    ZeroLayer { index: usize },
    #[error("the batch size is zero")]
    ZeroBatch,
    #[error("the learning rate must be finite and positive, got {0}")]
    BadLearningRate(f32),
    #[error("batch {batch} does not split evenly over {replicas} replicas")]
    UnevenSplit { batch: usize, replicas: usize },
}

/// The training run of the check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MlpConfig {
    /// Input dimension, hidden widths..., number of classes, e.g. `[1024, 4096, 4096, 10]`.
    pub layers: Vec<usize>,
    /// Global batch (split over replicas on the GPU side).
    pub batch: usize,
    /// Number of steps the check runs.
    pub steps: usize,
    /// SGD learning rate.
    pub lr: f32,
    /// Seed of the data, the teacher and the initial parameters.
    pub seed: u64,
}

impl MlpConfig {
    /// A small config that trains in well under a second on the CPU: `[64, 128, 128, 10]`,
    /// batch 256, 20 steps.
    pub fn small() -> Self {
        MlpConfig {
            layers: vec![64, 128, 128, 10],
            batch: 256,
            steps: 20,
            lr: 0.5,
            seed: 1,
        }
    }

    /// Checks the sizes and the learning rate.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.layers.len() < 2 {
            return Err(ConfigError::TooFewLayers(self.layers.len()));
        }
        if let Some(index) = self.layers.iter().position(|&d| d == 0) {
            return Err(ConfigError::ZeroLayer { index });
        }
        if self.batch == 0 {
            return Err(ConfigError::ZeroBatch);
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(ConfigError::BadLearningRate(self.lr));
        }
        Ok(())
    }

    /// Number of linear layers (`layers.len() - 1`).
    pub fn depth(&self) -> usize {
        self.layers.len() - 1
    }
}

/// The samples of every step that replica `rank` of `replicas` trains on.
pub fn replica_samples(
    batch: usize,
    replicas: usize,
    rank: usize,
) -> Result<Range<usize>, ConfigError> {
    if replicas == 0 || batch % replicas != 0 {
        return Err(ConfigError::UnevenSplit { batch, replicas });
    }
    let local = batch / replicas;
    Ok(rank * local..(rank + 1) * local)
}

/// The result of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Mean loss of each step's batch, computed before that step's update.
    pub losses: Vec<f32>,
    /// Final parameters: `[W_0, b_0, W_1, b_1, ...]`, each row-major as documented above.
    pub params: Vec<Vec<f32>>,
}

/// A deliberately wrong (or benignly different) kernel, to show what the comparison catches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    /// The reference.
    None,
    /// Not a flaw: every sum (GEMMs, bias gradients, the loss) runs in reverse order, as a GPU may
    /// legitimately do. It must pass the comparison.
    ReorderedSums,
    /// ReLU backward passes the gradient through negative pre-activations too.
    ReluGradLeaks,
    /// The bias-gradient reduction sums only the first 32 rows (one warp) of the batch.
    WrongBiasGrad,
}

/// What the products (forward `Y = X·Wᵀ`, `dW = dYᵀ·X`, `dX = dY·W`) take as operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmInputs {
    /// The fp32 values themselves (the golden run, fp32 and TF32 on the GPU).
    F32,
    /// Mixed precision: both operands of every product rounded to bf16 (round to nearest, ties
    /// to even: [`round_bf16`]), the products summed in fp32. Everything else stays fp32: the
    /// master parameters and their update, the bias add and ReLU, the softmax and the loss, the
    /// bias gradients (summed from the fp32 `dY`), every gradient and its all-reduce. No loss
    /// scaling: bf16 has fp32's exponent range, so the small gradients (`dZ` is scaled by
    /// `1/batch`) neither underflow nor need it.
    Bf16,
}

/// The bf16 bits of `v` rounded to nearest, ties to even (what `nc_bf16_rn` computes on the
/// GPU, and PyTorch's `round_to_nearest_even`): the upper half of the fp32 pattern after adding
/// `0x7fff` plus the lowest bit kept. Values past bf16's largest finite round to infinity; a
/// NaN stays a NaN (made quiet, sign kept).
pub fn bf16_bits(v: f32) -> u16 {
    let u = v.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 0x0040) as u16;
    }
    // No overflow: the largest non-NaN pattern is 0xff80_0000 (-inf).
    ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// The fp32 value of bf16 bits (exact).
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// `v` rounded to bf16 and widened back to fp32.
pub fn round_bf16(v: f32) -> f32 {
    bf16_to_f32(bf16_bits(v))
}

/// The initial parameters `[W_0, b_0, W_1, b_1, ...]`.
pub fn init_params(cfg: &MlpConfig) -> Vec<Vec<f32>> {
    let mut params = Vec::with_capacity(2 * cfg.depth());
    for l in 0..cfg.depth() {
        let (fan_in, out) = (cfg.layers[l], cfg.layers[l + 1]);
        let w = (0..(out * fan_in) as u64)
            .map(|i| init_param(cfg.seed, l as u64, i, fan_in))
            .collect();
        params.push(w);
        params.push(vec![0.0; out]);
    }
    params
}

/// Trains `steps` steps of `cfg` on the full batch: the golden trajectory.
///
/// Panics if `cfg` is invalid; call [`MlpConfig::validate`] first.
pub fn train(cfg: &MlpConfig, steps: usize) -> Run {
    train_with(cfg, steps, Flaw::None)
}

/// [`train`] with a [`Flaw`] injected (tests and self-checks).
pub fn train_with(cfg: &MlpConfig, steps: usize, flaw: Flaw) -> Run {
    run(cfg, steps, 1, flaw, GemmInputs::F32)
}

/// [`train`] in mixed precision, as the GPU's bf16 run computes: see [`GemmInputs::Bf16`].
///
/// Panics if `cfg` is invalid; call [`MlpConfig::validate`] first.
pub fn train_bf16(cfg: &MlpConfig, steps: usize) -> Run {
    run(cfg, steps, 1, Flaw::None, GemmInputs::Bf16)
}

/// Simulates `replicas` data-parallel replicas: each computes the mean-loss gradient of its share
/// of the batch, the gradients are averaged (sum, then `× 1/N`) and applied by all. The losses are
/// the mean of the replicas' mean losses. Matches [`train`] up to summation order.
pub fn train_data_parallel(
    cfg: &MlpConfig,
    steps: usize,
    replicas: usize,
) -> Result<Run, ConfigError> {
    cfg.validate()?;
    replica_samples(cfg.batch, replicas, 0)?;
    Ok(run(cfg, steps, replicas, Flaw::None, GemmInputs::F32))
}

fn run(cfg: &MlpConfig, steps: usize, replicas: usize, flaw: Flaw, inputs: GemmInputs) -> Run {
    if let Err(e) = cfg.validate() {
        panic!("invalid MLP config: {e}");
    }
    let in_dim = cfg.layers[0];
    let classes = cfg.layers[cfg.depth()];
    let teacher = Teacher::new(cfg.seed, in_dim, classes);
    let mut params = init_params(cfg);
    let mut losses = Vec::with_capacity(steps);
    let inv_n = 1.0 / replicas as f32;
    for step in 0..steps {
        let mut total: Option<Vec<Vec<f32>>> = None;
        let mut loss_sum = 0.0f32;
        for rank in 0..replicas {
            let samples = replica_samples(cfg.batch, replicas, rank).expect("checked split");
            let (x, y) = batch_with(&teacher, cfg.seed, step as u64, samples);
            let (loss, grads) = loss_and_grads(cfg, &params, &x, &y, flaw, inputs);
            loss_sum += loss;
            match total.as_mut() {
                None => total = Some(grads),
                Some(t) => {
                    for (tg, g) in t.iter_mut().zip(&grads) {
                        for (a, b) in tg.iter_mut().zip(g) {
                            *a += *b;
                        }
                    }
                }
            }
        }
        let mut grads = total.expect("at least one replica");
        if replicas > 1 {
            grads.iter_mut().flatten().for_each(|g| *g *= inv_n);
            loss_sum *= inv_n;
        }
        losses.push(loss_sum);
        for (p, g) in params.iter_mut().zip(&grads) {
            sgd(p, g, cfg.lr);
        }
    }
    Run { losses, params }
}

/// `p = p - lr·g`, elementwise, each operation rounded.
fn sgd(p: &mut [f32], g: &[f32], lr: f32) {
    for (p, &g) in p.iter_mut().zip(g) {
        *p -= lr * g;
    }
}

/// `Σ_p a[p]·b[p]` with one accumulator, `p` ascending (or descending).
fn dot(a: &[f32], b: &[f32], reverse: bool) -> f32 {
    let k = a.len().min(b.len());
    let mut s = 0.0f32;
    // Index loops, not iterator adapters: unoptimised (test) builds run them several times faster.
    if reverse {
        let mut p = k;
        while p > 0 {
            p -= 1;
            s += a[p] * b[p];
        }
    } else {
        let mut p = 0;
        while p < k {
            s += a[p] * b[p];
            p += 1;
        }
    }
    s
}

/// One 4x4 tile of `c = a·bᵀ`: rows `i..i+4` of `a[..][k]` dotted with rows `j..j+4` of
/// `b[..][k]`, `p` ascending. Each of the 16 sums has its own accumulator, so every element is
/// computed exactly as by [`dot`]; the tiling only saves loads (and debug-build overhead).
fn tile4x4(a: &[f32], b: &[f32], k: usize, i: usize, j: usize) -> [[f32; 4]; 4] {
    let (a0, a1) = (&a[i * k..(i + 1) * k], &a[(i + 1) * k..(i + 2) * k]);
    let (a2, a3) = (&a[(i + 2) * k..(i + 3) * k], &a[(i + 3) * k..(i + 4) * k]);
    let (b0, b1) = (&b[j * k..(j + 1) * k], &b[(j + 1) * k..(j + 2) * k]);
    let (b2, b3) = (&b[(j + 2) * k..(j + 3) * k], &b[(j + 3) * k..(j + 4) * k]);
    let (mut s00, mut s01, mut s02, mut s03) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
    let (mut s10, mut s11, mut s12, mut s13) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
    let (mut s20, mut s21, mut s22, mut s23) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
    let (mut s30, mut s31, mut s32, mut s33) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
    let mut p = 0;
    while p < k {
        let (x0, x1, x2, x3) = (a0[p], a1[p], a2[p], a3[p]);
        let (y0, y1, y2, y3) = (b0[p], b1[p], b2[p], b3[p]);
        s00 += x0 * y0;
        s01 += x0 * y1;
        s02 += x0 * y2;
        s03 += x0 * y3;
        s10 += x1 * y0;
        s11 += x1 * y1;
        s12 += x1 * y2;
        s13 += x1 * y3;
        s20 += x2 * y0;
        s21 += x2 * y1;
        s22 += x2 * y2;
        s23 += x2 * y3;
        s30 += x3 * y0;
        s31 += x3 * y1;
        s32 += x3 * y2;
        s33 += x3 * y3;
        p += 1;
    }
    [
        [s00, s01, s02, s03],
        [s10, s11, s12, s13],
        [s20, s21, s22, s23],
        [s30, s31, s32, s33],
    ]
}

/// `c[i][j] = Σ_p a[i][p]·b[j][p]` (`p` ascending) for the rows `i` of the band `a`; `c` is the
/// matching band of the output, `n` wide.
fn matmul_abt_band(a: &[f32], b: &[f32], n: usize, k: usize, c: &mut [f32]) {
    let m = c.len() / n;
    let mut i = 0;
    while i < m {
        let mut j = 0;
        while j < n {
            if i + 4 <= m && j + 4 <= n {
                let s = tile4x4(a, b, k, i, j);
                for (r, row) in s.iter().enumerate() {
                    c[(i + r) * n + j..(i + r) * n + j + 4].copy_from_slice(row);
                }
            } else {
                for r in i..(i + 4).min(m) {
                    for q in j..(j + 4).min(n) {
                        c[r * n + q] = dot(&a[r * k..(r + 1) * k], &b[q * k..(q + 1) * k], false);
                    }
                }
            }
            j += 4;
        }
        i += 4;
    }
}

/// `x[rows][k]` with every row reversed: summing it ascending sums the original descending.
fn reverse_rows(x: &[f32], k: usize) -> Vec<f32> {
    let mut out = x.to_vec();
    for row in out.chunks_exact_mut(k) {
        row.reverse();
    }
    out
}

/// Products of at least this many multiply-adds are split over threads.
const PARALLEL_MACS: usize = 1 << 22;

/// `c = a·bᵀ` with `a[m][k]`, `b[n][k]`, `c[m][n]` row-major: `c[i][j] = Σ_p a[i][p]·b[j][p]`,
/// summed sequentially over `p` (descending if `reverse`). Large products are split into bands
/// of rows over `threads` threads; every element is computed the same way, so the result does
/// not depend on the thread count.
fn matmul_abt(
    a: &[f32],
    b: &[f32],
    m: usize,
    n: usize,
    k: usize,
    reverse: bool,
    threads: usize,
) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    if m == 0 || n == 0 || k == 0 {
        return c;
    }
    if reverse {
        let (ar, br) = (reverse_rows(a, k), reverse_rows(b, k));
        return matmul_abt(&ar, &br, m, n, k, false, threads);
    }
    let threads = if m * n * k >= PARALLEL_MACS {
        threads.clamp(1, m.div_ceil(4))
    } else {
        1
    };
    if threads == 1 {
        matmul_abt_band(a, b, n, k, &mut c);
        return c;
    }
    let band = m.div_ceil(threads).div_ceil(4) * 4;
    std::thread::scope(|scope| {
        for (t, cb) in c.chunks_mut(band * n).enumerate() {
            let ab = &a[t * band * k..];
            scope.spawn(move || matmul_abt_band(ab, b, n, k, cb));
        }
    });
    c
}

/// The transpose of the row-major `x[rows][cols]`.
fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0f32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = x[r * cols + c];
        }
    }
    t
}

/// Threads for the large products of the golden run.
fn worker_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Mean loss over the rows of `x` and the gradients of that mean, `[dW_0, db_0, ...]`.
///
/// Every sum runs in a fixed order (ascending; descending for [`Flaw::ReorderedSums`]):
/// the forward dot products over the input features, `dW` over the batch rows, `dX` over the
/// output features, `db` and the loss over the batch rows.
fn loss_and_grads(
    cfg: &MlpConfig,
    params: &[Vec<f32>],
    x: &[f32],
    y: &[u32],
    flaw: Flaw,
    inputs: GemmInputs,
) -> (f32, Vec<Vec<f32>>) {
    // A bf16 GEMM operand: a copy rounded to bf16 (the fp32 path below never calls it).
    let q = |v: &[f32]| -> Vec<f32> { v.iter().map(|&x| round_bf16(x)).collect() };
    let rows = y.len();
    let depth = cfg.depth();
    let rev = flaw == Flaw::ReorderedSums;
    let threads = worker_threads();

    // Forward. acts[l] is the input of layer l; acts[depth] the logits.
    let mut acts: Vec<Vec<f32>> = Vec::with_capacity(depth + 1);
    acts.push(x.to_vec());
    for l in 0..depth {
        let (din, dout) = (cfg.layers[l], cfg.layers[l + 1]);
        let (w, b) = (&params[2 * l], &params[2 * l + 1]);
        let mut out = match inputs {
            GemmInputs::F32 => matmul_abt(&acts[l], w, rows, dout, din, rev, threads),
            GemmInputs::Bf16 => matmul_abt(&q(&acts[l]), &q(w), rows, dout, din, rev, threads),
        };
        let hidden = l + 1 < depth;
        for yr in out.chunks_exact_mut(dout) {
            for (v, &bo) in yr.iter_mut().zip(b) {
                let z = *v + bo;
                *v = if hidden { relu(z) } else { z };
            }
        }
        acts.push(out);
    }

    // Softmax cross-entropy and dZ = (p - onehot) / rows.
    let classes = cfg.layers[depth];
    let inv_rows = 1.0 / rows as f32;
    let mut dy = vec![0.0f32; rows * classes];
    let mut losses = vec![0.0f32; rows];
    for (((z, d), &label), loss) in acts[depth]
        .chunks_exact(classes)
        .zip(dy.chunks_exact_mut(classes))
        .zip(y)
        .zip(losses.iter_mut())
    {
        *loss = softmax_xent(z, label as usize, inv_rows, d);
    }
    let ones = vec![1.0f32; rows];
    let loss = dot(&losses, &ones, rev) / rows as f32;

    // Backward.
    let mut grads = vec![Vec::new(); 2 * depth];
    for l in (0..depth).rev() {
        let (din, dout) = (cfg.layers[l], cfg.layers[l + 1]);
        let dyt = transpose(&dy, rows, dout);

        // dW = dYᵀ·X = dYᵀ·(Xᵀ)ᵀ: dW[o][i] = Σ_r dY[r][o]·X[r][i].
        let xt = transpose(&acts[l], rows, din);
        grads[2 * l] = match inputs {
            GemmInputs::F32 => matmul_abt(&dyt, &xt, dout, din, rows, rev, threads),
            GemmInputs::Bf16 => matmul_abt(&q(&dyt), &q(&xt), dout, din, rows, rev, threads),
        };

        // db[o] = Σ_r dY[r][o].
        let bias_rows = if flaw == Flaw::WrongBiasGrad {
            rows.min(32)
        } else {
            rows
        };
        grads[2 * l + 1] = dyt
            .chunks_exact(rows)
            .map(|col| dot(&col[..bias_rows], &ones[..bias_rows], rev))
            .collect();

        if l == 0 {
            break;
        }
        // dX = dY·W = dY·(Wᵀ)ᵀ: dX[r][i] = Σ_o dY[r][o]·W[o][i]; then the ReLU mask.
        let wt = transpose(&params[2 * l], dout, din);
        let mut dx = match inputs {
            GemmInputs::F32 => matmul_abt(&dy, &wt, rows, din, dout, rev, threads),
            GemmInputs::Bf16 => matmul_abt(&q(&dy), &q(&wt), rows, din, dout, rev, threads),
        };
        if flaw != Flaw::ReluGradLeaks {
            relu_bwd(&mut dx, &acts[l]);
        }
        dy = dx;
    }
    (loss, grads)
}

/// `v > 0 ? v : 0` (NaN and -0 give +0).
fn relu(v: f32) -> f32 {
    if v > 0.0 {
        v
    } else {
        0.0
    }
}

/// `d = h > 0 ? d : 0` with `h` the layer's ReLU output.
fn relu_bwd(d: &mut [f32], h: &[f32]) {
    for (d, &h) in d.iter_mut().zip(h) {
        if h <= 0.0 || h.is_nan() {
            *d = 0.0;
        }
    }
}

/// Loss of one sample and `d = (softmax(z) - onehot(label)) · scale`. Definition (matched by
/// `nc_softmax_xent`): `m = max z` (first to last), `e_j = exp(z_j - m)`, `s = Σ e_j` (first to
/// last), `loss = ln(s) - (z_label - m)`, `d_j = (e_j / s - [j == label]) · scale`.
fn softmax_xent(z: &[f32], label: usize, scale: f32, d: &mut [f32]) -> f32 {
    let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut s = 0.0f32;
    for (dj, &zj) in d.iter_mut().zip(z) {
        let e = (zj - m).exp();
        *dj = e;
        s += e;
    }
    for (j, dj) in d.iter_mut().enumerate() {
        let p = *dj / s;
        let t = if j == label { 1.0 } else { 0.0 };
        *dj = (p - t) * scale;
    }
    s.ln() - (z[label] - m)
}

/// SHA-256 (hex) over the parameters: for each tensor in order, its length as `u64` little-endian,
/// then its elements as `f32` little-endian bytes. Replicas of a correct data-parallel run have
/// equal hashes.
pub fn params_hash(params: &[Vec<f32>]) -> String {
    let mut h = Sha256::new();
    for t in params {
        h.update((t.len() as u64).to_le_bytes());
        for v in t {
            h.update(v.to_le_bytes());
        }
    }
    hex::encode(h.finalize())
}

/// Order-independent checksum of a tensor, computed on the device by `nc_checksum` without copying
/// the tensor back: `Σ_i mix64(mix64(i + GAMMA) ^ bits(x_i))`, wrapping.
pub fn device_checksum(data: &[f32]) -> u64 {
    data.iter().enumerate().fold(0u64, |acc, (i, v)| {
        acc.wrapping_add(mix64(
            mix64((i as u64).wrapping_add(GAMMA)) ^ v.to_bits() as u64,
        ))
    })
}

/// The largest deviation of a trajectory that passed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MaxDeviation {
    /// Steps compared.
    pub steps: usize,
    /// Step with the largest absolute difference.
    pub step: usize,
    pub gpu: f32,
    pub cpu: f32,
    pub abs_diff: f32,
    /// `abs_diff / |cpu|` at that step.
    pub rel_diff: f32,
    /// Largest relative difference over all steps (not necessarily at `step`).
    pub max_rel_diff: f32,
}

/// Why a trajectory did not match the golden one.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
pub enum TrajectoryMismatch {
    #[error("the GPU trajectory has {gpu} steps, the CPU one {cpu}")]
    LengthMismatch { gpu: usize, cpu: usize },
    #[error("no steps to compare")]
    Empty,
    #[error(
        "loss diverged at step {}: GPU {gpu}, CPU {cpu} (|diff| {abs_diff:e}, relative \
         {rel_diff:e}, allowed {allowed:e})",
        .step + 1
    )]
    Diverged {
        /// The index of the step (0: the first); people read it 1-based, as every step count
        /// nodecert shows ("step 1" is the first).
        step: usize,
        gpu: f32,
        cpu: f32,
        abs_diff: f32,
        rel_diff: f32,
        allowed: f32,
    },
}

/// Compares two loss trajectories step by step. Step `i` passes when
/// `|gpu[i] - cpu[i]| <= abs_tol + rel_tol·|cpu[i]|` (a NaN fails); the first step that does not
/// is the error. Pass slices of the first [`COMPARED_STEPS`] steps.
pub fn compare_trajectory(
    gpu: &[f32],
    cpu: &[f32],
    rel_tol: f32,
    abs_tol: f32,
) -> Result<MaxDeviation, TrajectoryMismatch> {
    if gpu.len() != cpu.len() {
        return Err(TrajectoryMismatch::LengthMismatch {
            gpu: gpu.len(),
            cpu: cpu.len(),
        });
    }
    if cpu.is_empty() {
        return Err(TrajectoryMismatch::Empty);
    }
    let mut worst: Option<MaxDeviation> = None;
    let mut max_rel = 0.0f32;
    for (step, (&g, &c)) in gpu.iter().zip(cpu).enumerate() {
        let abs_diff = (g - c).abs();
        let rel_diff = if abs_diff == 0.0 {
            0.0
        } else {
            abs_diff / c.abs()
        };
        let allowed = abs_tol + rel_tol * c.abs();
        // Written so that a NaN difference fails.
        let within = abs_diff <= allowed;
        if !within {
            return Err(TrajectoryMismatch::Diverged {
                step,
                gpu: g,
                cpu: c,
                abs_diff,
                rel_diff,
                allowed,
            });
        }
        if rel_diff > max_rel {
            max_rel = rel_diff;
        }
        if worst.as_ref().is_none_or(|w| abs_diff > w.abs_diff) {
            worst = Some(MaxDeviation {
                steps: cpu.len(),
                step,
                gpu: g,
                cpu: c,
                abs_diff,
                rel_diff,
                max_rel_diff: 0.0,
            });
        }
    }
    let mut w = worst.expect("non-empty");
    w.max_rel_diff = max_rel;
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn tol_check(gpu: &[f32], cpu: &[f32]) -> Result<MaxDeviation, TrajectoryMismatch> {
        compare_trajectory(gpu, cpu, DEFAULT_REL_TOL, DEFAULT_ABS_TOL)
    }

    /// Pinned values: any change to the hash, the domains or the float conversion shows up here
    /// (and must be mirrored in the CUDA sources).
    #[test]
    fn hash_known_values() {
        // The first output of the published splitmix64 generator seeded with 0.
        assert_eq!(mix64(GAMMA), 0xe220_a839_7b1d_cdaf);
        assert_eq!(mix64(0), 0);
        assert_eq!(hash4(1, 2, 3, 4, 5), 0x48ee_629a_b3fd_7e3a);
        assert_eq!(hash4(DOMAIN_FEATURE, 42, 0, 0, 0), 0xee0e_9286_2564_9f43);
        assert_eq!(feature_int(1, 0, 0, 0), 6_548_683);
        assert_eq!(feature_int(1, 0, 0, 1), -4_692_092);
        assert_eq!(feature_int(1, 3, 7, 11), -2_408_996);
        assert_eq!(feature_int(1, 19, 255, 63), -5_419_791);
        assert_eq!(sample_feature(1, 0, 0, 0), 6_548_683.0 / 8_388_608.0);
        assert_eq!(sample_feature(1, 19, 255, 63), -5_419_791.0 / 8_388_608.0);
        let labels: Vec<u32> = (0..6).map(|s| sample_label(1, 0, s, 64, 10)).collect();
        assert_eq!(labels, [4, 4, 6, 6, 0, 0]);
        assert_eq!(init_scale(64), 0.306_186_23);
        assert_eq!(init_param(1, 0, 0, 64), -0.094_266_51);
        assert_eq!(init_param(1, 2, 1279, 128), 0.028_242_275);
        assert_eq!(device_checksum(&[1.0, -2.5, 0.0]), 0x4cf4_00f2_f449_7ad0);
        assert_eq!(
            params_hash(&[vec![1.0, -2.5], vec![0.0]]),
            "305315ae86c04659e2dfde3178fec2b13d5be51d0ba1e5cd021358d650e45d09"
        );
    }

    #[test]
    fn features_are_exact_and_uniform() {
        let mut sum = 0.0f64;
        let mut n = 0;
        for step in 0..4 {
            for sample in 0..64 {
                for f in 0..64 {
                    let x = sample_feature(9, step, sample, f);
                    let k = feature_int(9, step, sample, f);
                    assert!((-1.0..1.0).contains(&x));
                    assert_eq!(x * 8_388_608.0, k as f32, "not exact");
                    assert_eq!((x as f64 * 8_388_608.0) as i32, k);
                    sum += x as f64;
                    n += 1;
                }
            }
        }
        assert!((sum / n as f64).abs() < 0.02, "mean {}", sum / n as f64);
        // Extremes of the conversion.
        assert_eq!(int24_to_unit(centred_int24(0)), -1.0);
        assert_eq!(
            int24_to_unit(centred_int24(u64::MAX)),
            1.0 - 1.0 / 8_388_608.0
        );
    }

    #[test]
    fn labels_match_the_batch_and_use_every_class() {
        let (x, y) = generate_batch(1, 5, 100..164, 64, 10);
        assert_eq!((x.len(), y.len()), (64 * 64, 64));
        for (i, &label) in y.iter().enumerate() {
            assert_eq!(label, sample_label(1, 5, 100 + i as u64, 64, 10));
            assert_eq!(x[i * 64 + 3], sample_feature(1, 5, 100 + i as u64, 3));
        }
        let mut counts = [0usize; 10];
        for step in 0..10 {
            for label in generate_batch(1, step, 0..256, 64, 10).1 {
                counts[label as usize] += 1;
            }
        }
        assert!(counts.iter().all(|&c| c > 0), "{counts:?}");
        assert!(counts.iter().all(|&c| c < 2560 / 4), "{counts:?}");
        // A replica's slice of the batch is the same samples as in the full batch.
        let (full_x, full_y) = generate_batch(1, 2, 0..256, 64, 10);
        let r = replica_samples(256, 4, 2).unwrap();
        let (part_x, part_y) = generate_batch(1, 2, r.clone(), 64, 10);
        assert_eq!(part_y, full_y[r.clone()]);
        assert_eq!(part_x, full_x[r.start * 64..r.end * 64]);
    }

    #[test]
    fn init_is_bounded_and_matches_init_param() {
        let cfg = MlpConfig::small();
        let params = init_params(&cfg);
        assert_eq!(params.len(), 6);
        for l in 0..cfg.depth() {
            let (fan_in, out) = (cfg.layers[l], cfg.layers[l + 1]);
            let (w, b) = (&params[2 * l], &params[2 * l + 1]);
            assert_eq!((w.len(), b.len()), (out * fan_in, out));
            assert!(b.iter().all(|&v| v == 0.0));
            let bound = init_scale(fan_in);
            assert!(w.iter().all(|&v| -bound <= v && v < bound));
            for i in [0, 1, w.len() / 2, w.len() - 1] {
                assert_eq!(w[i], init_param(cfg.seed, l as u64, i as u64, fan_in));
            }
        }
        assert_eq!(init_scale(1024), (6.0f64 / 1024.0).sqrt() as f32);
    }

    #[test]
    fn config_validation() {
        let ok = MlpConfig::small();
        assert_eq!(ok.validate(), Ok(()));
        let bad = |f: &dyn Fn(&mut MlpConfig)| {
            let mut c = ok.clone();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert_eq!(bad(&|c| c.layers = vec![64]), ConfigError::TooFewLayers(1));
        assert_eq!(bad(&|c| c.layers = vec![]), ConfigError::TooFewLayers(0));
        assert_eq!(
            bad(&|c| c.layers = vec![64, 0, 10]),
            ConfigError::ZeroLayer { index: 1 }
        );
        assert_eq!(bad(&|c| c.batch = 0), ConfigError::ZeroBatch);
        assert!(matches!(
            bad(&|c| c.lr = f32::NAN),
            ConfigError::BadLearningRate(_)
        ));
        assert_eq!(bad(&|c| c.lr = 0.0), ConfigError::BadLearningRate(0.0));
        assert_eq!(
            replica_samples(256, 3, 0),
            Err(ConfigError::UnevenSplit {
                batch: 256,
                replicas: 3
            })
        );
        assert!(replica_samples(256, 0, 0).is_err());
        assert!(train_data_parallel(&ok, 2, 3).is_err());
        let two = MlpConfig {
            layers: vec![8, 3],
            batch: 4,
            steps: 2,
            lr: 0.1,
            seed: 0,
        };
        assert_eq!(two.validate(), Ok(()));
        assert_eq!(train(&two, 2).losses.len(), 2);
    }

    #[test]
    #[should_panic(expected = "invalid MLP config")]
    fn train_rejects_an_invalid_config() {
        let mut c = MlpConfig::small();
        c.layers = vec![64];
        train(&c, 1);
    }

    #[test]
    fn golden_run_is_deterministic_and_learns() {
        let cfg = MlpConfig::small();
        let t = Instant::now();
        let a = train(&cfg, cfg.steps);
        eprintln!("small config, {} steps: {:?}", cfg.steps, t.elapsed());
        let b = train(&cfg, cfg.steps);
        assert_eq!(a.losses.len(), cfg.steps);
        let bits = |r: &Run| r.losses.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b));
        assert_eq!(a.params, b.params);
        assert_eq!(params_hash(&a.params), params_hash(&b.params));
        assert_eq!(tol_check(&a.losses, &b.losses).unwrap().abs_diff, 0.0);
        assert!(a.losses.iter().all(|v| v.is_finite()));
        let (first, last) = (a.losses[0], *a.losses.last().unwrap());
        assert!(last < 0.7 * first, "loss {first} -> {last}");
        assert!(last < 0.7 * 10f32.ln(), "loss {last} not below chance");
        // Pinned: a change to any definition (data, init, forward, backward) shows up here.
        assert_eq!(a.losses[0], 2.629_721_6);
        assert_eq!(a.losses[19], 1.403_803_7);
        assert_eq!(
            params_hash(&a.params),
            "0aa1db030a7bf9a7e4c318e801d1ff055c7862d8229a60d226fb2449e7de6b8b"
        );
        // A shorter run is a prefix of the longer one.
        assert_eq!(train(&cfg, 5).losses, a.losses[..5]);
        // Another seed is another run.
        let other = train(&MlpConfig { seed: 2, ..cfg }, 3);
        assert_ne!(other.losses, a.losses[..3]);
    }

    #[test]
    fn flawed_kernels_are_caught_at_once() {
        let cfg = MlpConfig::small();
        let golden = train(&cfg, COMPARED_STEPS);
        for flaw in [Flaw::ReluGradLeaks, Flaw::WrongBiasGrad] {
            let bad = train_with(&cfg, COMPARED_STEPS, flaw);
            // Step 0 is computed before any update, so it matches; step 1 already diverges.
            assert_eq!(bad.losses[0], golden.losses[0]);
            match tol_check(&bad.losses, &golden.losses) {
                Err(TrajectoryMismatch::Diverged {
                    step,
                    rel_diff,
                    allowed,
                    abs_diff,
                    ..
                }) => {
                    assert!(step <= 2, "{flaw:?} caught only at step {step}");
                    assert!(
                        abs_diff > 10.0 * allowed,
                        "{flaw:?}: {rel_diff:e} is marginal"
                    );
                }
                other => panic!("{flaw:?} not caught: {other:?}"),
            }
            assert_ne!(params_hash(&bad.params), params_hash(&golden.params));
        }
    }

    #[test]
    fn reordered_sums_pass_with_headroom() {
        let cfg = MlpConfig::small();
        let golden = train(&cfg, COMPARED_STEPS);
        let reordered = train_with(&cfg, COMPARED_STEPS, Flaw::ReorderedSums);
        assert_ne!(
            reordered.losses, golden.losses,
            "the variant should differ in rounding"
        );
        let dev = tol_check(&reordered.losses, &golden.losses).unwrap();
        assert!(dev.max_rel_diff < DEFAULT_REL_TOL / 10.0, "{dev:?}");
    }

    #[test]
    fn bf16_rounding_is_to_nearest_ties_to_even() {
        let b = |u: u32| bf16_bits(f32::from_bits(u));
        // Exact values, halfway cases (to the even neighbour), just above halfway.
        assert_eq!(b(0x3f80_0000), 0x3f80); // 1.0
        assert_eq!(b(0x3f80_8000), 0x3f80); // 1 + 2^-8: tie, 0x3f80 is even
        assert_eq!(b(0x3f81_8000), 0x3f82); // tie, 0x3f82 is even
        assert_eq!(b(0x3f80_8001), 0x3f81);
        assert_eq!(b(0x3f80_7fff), 0x3f80);
        assert_eq!(b(0xbf80_8001), 0xbf81); // the sign is kept
        assert_eq!(b(0x8000_0000), 0x8000); // -0
                                            // Past the largest finite bf16: infinity; infinities stay; NaNs stay (quiet) NaNs.
        assert_eq!(b(f32::MAX.to_bits()), 0x7f80);
        assert_eq!(b(0x7f7f_7fff), 0x7f7f);
        assert_eq!(b(0xff80_0000), 0xff80);
        assert_eq!(b(0x7f80_0001), 0x7fc0);
        assert_eq!(b(0xffc0_0000), 0xffc0);
        assert!(round_bf16(f32::NAN).is_nan());
        // Subnormals round like any other pattern (bf16 has fp32's exponent range).
        assert_eq!(b(0x0000_8000), 0x0000);
        assert_eq!(b(0x0001_8000), 0x0002);
        // Against the definition, over a spread of finite patterns: the nearer of the two
        // neighbours, the even one on a tie.
        let mut u = 0u32;
        while u < 0x7f7f_0000 {
            for x in [u, u | 0x8000_0000] {
                let (lo, hi) = (x >> 16, (x >> 16) + 1);
                let v = f64::from(f32::from_bits(x));
                let d = |h: u32| (f64::from(bf16_to_f32(h as u16)) - v).abs();
                let want = match d(lo).partial_cmp(&d(hi)).unwrap() {
                    std::cmp::Ordering::Less => lo,
                    std::cmp::Ordering::Greater => hi,
                    std::cmp::Ordering::Equal => {
                        if lo % 2 == 0 {
                            lo
                        } else {
                            hi
                        }
                    }
                };
                assert_eq!(u32::from(b(x)), want, "{x:#010x}");
            }
            u += 0x0001_3579;
        }
        assert_eq!(round_bf16(1.0 / 3.0), 171.0 / 512.0);
    }

    #[test]
    fn bf16_run_tracks_the_fp32_one_and_learns() {
        let cfg = MlpConfig::small();
        let fp32 = train(&cfg, COMPARED_STEPS);
        let bf16 = train_bf16(&cfg, COMPARED_STEPS);
        assert_eq!(train_bf16(&cfg, COMPARED_STEPS), bf16, "deterministic");
        // Within the stated tolerance of the fp32 trajectory, with headroom...
        let dev = compare_trajectory(&bf16.losses, &fp32.losses, BF16_REL_TOL, DEFAULT_ABS_TOL)
            .unwrap_or_else(|e| panic!("bf16 left the fp32 trajectory: {e}"));
        assert!(dev.max_rel_diff < BF16_REL_TOL / 3.0, "{dev:?}");
        // ... but visibly bf16: it would fail the golden fp32 comparison from the first step.
        assert!(
            matches!(
                tol_check(&bf16.losses, &fp32.losses),
                Err(TrajectoryMismatch::Diverged { step: 0, .. })
            ),
            "the bf16 run is indistinguishable from fp32: are the operands rounded?"
        );
        // The loss still goes down as in fp32 (by ~45% in 20 steps).
        let (first, last) = (bf16.losses[0], *bf16.losses.last().unwrap());
        assert!(last < 0.7 * first, "loss {first} -> {last}");
        // A broken kernel still stands out against the bf16 tolerance.
        let leaky = train_with(&cfg, COMPARED_STEPS, Flaw::ReluGradLeaks);
        assert!(
            compare_trajectory(&leaky.losses, &fp32.losses, BF16_REL_TOL, DEFAULT_ABS_TOL).is_err()
        );
        // Pinned: a change to where the operands are rounded shows up here.
        assert_eq!(bf16.losses[0], 2.630_312);
        assert_eq!(bf16.losses[19], 1.404_117_2);
    }

    #[test]
    fn data_parallel_matches_the_golden_run() {
        let cfg = MlpConfig::small();
        let golden = train(&cfg, COMPARED_STEPS);
        assert_eq!(
            train_data_parallel(&cfg, COMPARED_STEPS, 1).unwrap(),
            golden
        );
        for replicas in [2, 8] {
            let dp = train_data_parallel(&cfg, COMPARED_STEPS, replicas).unwrap();
            let dev = tol_check(&dp.losses, &golden.losses).unwrap();
            assert!(
                dev.max_rel_diff < DEFAULT_REL_TOL / 10.0,
                "{replicas}: {dev:?}"
            );
        }
    }

    #[test]
    fn matmul_is_independent_of_threads_and_tiling() {
        let (m, n, k) = (70, 37, 1700); // above PARALLEL_MACS, ragged tiles
        assert!(m * n * k >= PARALLEL_MACS);
        let a: Vec<f32> = (0..m * k)
            .map(|i| sample_feature(3, 0, 0, i as u64))
            .collect();
        let b: Vec<f32> = (0..n * k)
            .map(|i| sample_feature(4, 0, 0, i as u64))
            .collect();
        let one = matmul_abt(&a, &b, m, n, k, false, 1);
        assert_eq!(one, matmul_abt(&a, &b, m, n, k, false, 3));
        assert_eq!(one, matmul_abt(&a, &b, m, n, k, false, 64));
        for i in [0, 1, 33, 69] {
            for j in [0, 5, 36] {
                let d = dot(&a[i * k..(i + 1) * k], &b[j * k..(j + 1) * k], false);
                assert_eq!(one[i * n + j], d);
                let r = matmul_abt(&a, &b, m, n, k, true, 2);
                assert_eq!(
                    r[i * n + j],
                    dot(&a[i * k..(i + 1) * k], &b[j * k..(j + 1) * k], true)
                );
            }
        }
        assert_eq!(
            transpose(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3),
            [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
    }

    #[test]
    fn softmax_is_stable_and_its_gradient_sums_to_zero() {
        let z = [1000.0f32, -1000.0, 999.0, 0.0];
        let mut d = [0.0f32; 4];
        let loss = softmax_xent(&z, 2, 0.5, &mut d);
        assert!(
            (loss - (1.0 + (1.0 + (-1.0f32).exp()).ln())).abs() < 1e-6,
            "{loss}"
        );
        assert!(d.iter().all(|v| v.is_finite()));
        assert!(d.iter().sum::<f32>().abs() < 1e-6);
        assert!(d[2] < 0.0 && d[0] > 0.0);
        let uniform = softmax_xent(&[0.0; 10], 3, 1.0, &mut [0.0; 10]);
        assert!((uniform - 10f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn compare_trajectory_reports_first_divergence() {
        let cpu = [2.0f32, 1.5, 1.0, 0.5];
        let dev = compare_trajectory(&[2.0, 1.5001, 1.0, 0.5], &cpu, 1e-3, 0.0).unwrap();
        assert_eq!((dev.steps, dev.step), (4, 1));
        assert!((dev.abs_diff - 1e-4).abs() < 1e-6);
        let err = compare_trajectory(&[2.0, 1.5, 1.1, 0.9], &cpu, 1e-3, 1e-6).unwrap_err();
        match &err {
            TrajectoryMismatch::Diverged { step, gpu, cpu, .. } => {
                assert_eq!((*step, *gpu, *cpu), (2, 1.1, 1.0))
            }
            other => panic!("{other:?}"),
        }
        // Said 1-based: index 2 is the third step.
        assert!(err.to_string().contains("diverged at step 3:"), "{err}");
        assert!(matches!(
            compare_trajectory(&[2.0, f32::NAN], &cpu[..2], 1.0, 1.0),
            Err(TrajectoryMismatch::Diverged { step: 1, .. })
        ));
        assert_eq!(
            compare_trajectory(&cpu[..3], &cpu, 1.0, 1.0),
            Err(TrajectoryMismatch::LengthMismatch { gpu: 3, cpu: 4 })
        );
        assert_eq!(
            compare_trajectory(&[], &[], 1.0, 1.0),
            Err(TrajectoryMismatch::Empty)
        );
        // Absolute tolerance near zero; a zero CPU value gives no division by zero.
        let dev = compare_trajectory(&[0.0, 1e-7], &[0.0, 0.0], 0.0, 1e-6).unwrap();
        assert_eq!(dev.step, 1);
        assert!(dev.rel_diff.is_infinite());
        assert!(compare_trajectory(&[0.0], &[0.0], 0.0, 0.0).is_ok());
    }

    #[test]
    fn params_hash_sees_one_ulp_and_tensor_boundaries() {
        let a = vec![vec![1.0f32, 2.0], vec![3.0]];
        let mut b = a.clone();
        b[1][0] = f32::from_bits(3.0f32.to_bits() + 1);
        assert_ne!(params_hash(&a), params_hash(&b));
        assert_ne!(params_hash(&a), params_hash(&[vec![1.0], vec![2.0, 3.0]]));
        assert_eq!(params_hash(&a).len(), 64);
        // The device checksum is an order-independent sum of per-element terms.
        let x = [0.5f32, -0.25, 8.0, 0.0];
        let parts = device_checksum(&x[..2]).wrapping_add(
            x[2..]
                .iter()
                .enumerate()
                .map(|(i, v)| mix64(mix64((i as u64 + 2).wrapping_add(GAMMA)) ^ v.to_bits() as u64))
                .fold(0u64, u64::wrapping_add),
        );
        assert_eq!(device_checksum(&x), parts);
        assert_ne!(device_checksum(&[0.0]), device_checksum(&[-0.0]));
    }
}
