//! The data-parallel training run as a plan of GPU operations: which buffers, which kernels and
//! cuBLAS calls in which order, which gradients go into which all-reduce bucket, and how the
//! events recorded along the way become step time, communication time and its exposed part.
//!
//! Everything here is plain data and arithmetic, so it is tested without a GPU: the tests execute
//! the plan on an emulated device (host memory, each kernel written again in Rust from its CUDA
//! source) and get the CPU golden run of [`super::reference`] back bit for bit. The CUDA backend
//! (`backend::cuda::train`) only carries the operations out, one by one: launch a kernel, call
//! cuBLAS, record or wait for an event, all-reduce a bucket with NCCL ([`Device`]).
//!
//! Tensor-parallel and hybrid runs (issue 17) are planned by [`sharded`], one op list per rank,
//! with all-reduces over groups of ranks ([`Op::GroupAllReduce`], [`Device::group_all_reduce`]);
//! what is documented below is the data-parallel run.
//!
//! # One step on replica `r` of `N`
//!
//! Local batch `Bl` (the suite's per-GPU batch), global batch `B = N·Bl`; replica `r` trains on
//! the samples `r·Bl .. (r+1)·Bl` of the step (as [`reference::replica_samples`]). On the compute
//! stream ([`step_ops`]):
//!
//! 1. `nc_gen_features`, `nc_gen_labels`: the batch, generated on the GPU from the seed;
//! 2. per layer: forward SGEMM `Y = X·Wᵀ`, then `nc_bias_act_fwd` (bias, ReLU on hidden layers);
//! 3. `nc_softmax_xent` with `scale = 1/B` (so that summing the replicas' gradients gives the
//!    mean gradient), `nc_sum_serial` into this step's slot of the loss sums;
//! 4. per layer, last first: `db = dYᵀ·1` (SGEMV), `dW = dYᵀ·X` (SGEMM), and below the first
//!    layer `dX = dY·W` (SGEMM) then `nc_relu_bwd`. The moment a bucket's last gradient is
//!    written, the compute stream records `Ready(k)`; the communication stream waits for it and
//!    all-reduces (sums) the bucket in place with NCCL, between `CommStart(k)` and `CommEnd(k)`;
//! 5. `BwdDone`; the compute stream waits for the last bucket's `CommEnd` (the communication
//!    stream runs buckets in order), records `Waited`, runs `nc_sgd` over every parameter and
//!    records `StepEnd`.
//!
//! # bf16: mixed precision ([`Math::Bf16`])
//!
//! The parameters stay fp32 (the master copy the update writes), and so do the gradients, their
//! all-reduce, the bias add and ReLU, the softmax and the loss, and the bias gradients (SGEMV on
//! the fp32 `dY`). Only the operands of the three GEMMs are bf16, in buffers of their own
//! ([`Buf::bf16_copy`]), made by `nc_to_bf16` (round to nearest even): the parameters once a
//! step before the forward pass, each layer's input as soon as it is written, each `dY` before
//! its GEMMs. The GEMMs (`cublasGemmEx`, bf16 `A` and `B`, `CUBLAS_COMPUTE_32F`) accumulate and
//! write fp32, so `dW` lands in the fp32 gradient buffer as in the fp32 run: the buckets, the
//! NCCL sum and the update are the fp32 run's, and every replica applies the same all-reduced
//! fp32 gradient to the same fp32 parameters, so replicas stay bit-identical. (Gradients made
//! in bf16 and converted would save nothing here, as the GEMM writes fp32 at the same speed,
//! and would lose 16 bits of every gradient; all-reducing bf16 would halve the bytes sent but
//! round every partial sum.) [`reference::train_bf16`] defines the same computation on the CPU.
//!
//! # Buckets and overlap
//!
//! Parameters and gradients live in one flat buffer each, tensors in the order backward produces
//! their gradients: `b_{L-1}, W_{L-1}, b_{L-2}, W_{L-2}, ..., b_0, W_0` ([`Model::tensors`]), each
//! starting on a 256-byte boundary ([`TENSOR_ALIGN`]; the gaps hold zeros). A bucket is therefore
//! a contiguous range, all-reduced by one NCCL call. Tensors are added to a
//! bucket until it holds at least [`BUCKET_CAP_BYTES`] (PyTorch DDP's rule and default size);
//! then the next starts ([`plan_buckets`]). Every bucket but the last is all-reduced while the
//! compute stream still runs the rest of the backward pass; only what remains after `BwdDone` is
//! exposed. With one replica there are no buckets and no NCCL at all.
//!
//! # Timing
//!
//! From the events of each timed step (after [`WARMUP_STEPS`]), per replica: step time
//! `StepStart -> StepEnd`; communication time, the sum over buckets of `CommStart -> CommEnd`;
//! exposed communication `BwdDone -> Waited`, the time the compute stream stood waiting for the
//! all-reduce. Each figure of a step is the largest over the replicas (the step ends when the
//! slowest replica does) ([`step_times`]).
//!
//! # Checks built in
//!
//! The losses are the replicas' loss sums added on the host, `/ B`. The final parameters of each
//! replica are hashed with [`reference::params_hash`] (reference tensor order), so a healthy node
//! shows one hash `N` times. The golden run also checks, before training, that the GPU's initial
//! parameters, features and labels equal the CPU definitions bit for bit ([`TrainOpts`]).

use super::reference::{self, MlpConfig};
use crate::backend::TrainingRun;
use crate::error::HwError;
use crate::suite::{Precision, TrainingCheck};
use std::ops::Range;

/// Gradients are all-reduced in buckets of at least this size (PyTorch DDP's `bucket_cap_mb`
/// default): big enough for NCCL to reach its bandwidth, small enough that the first bucket
/// starts while most of the backward pass is still to run.
pub const BUCKET_CAP_BYTES: usize = 25 << 20;
/// Steps not timed at the start of a run (cuBLAS heuristics, NCCL connections, clocks).
pub const WARMUP_STEPS: usize = 2;
/// Timed steps of the one-GPU run that gives the scaling baseline.
pub const SINGLE_GPU_TIMED_STEPS: usize = 5;
/// Device memory left free for cuBLAS's workspace, NCCL's buffers and the CUDA context.
pub const LIBRARY_RESERVE_BYTES: u64 = 1 << 30;
/// Bytes per element of the 4-byte buffers (f32, u32 or i32): all but the bf16 operand copies,
/// which take 2 ([`Buf::elem`]).
pub const WORD: usize = 4;
/// bf16 GEMMs need bf16 tensor cores: compute capability 8.0 (Ampere) or newer.
pub const BF16_MIN_COMPUTE_CAPABILITY: (i32, i32) = (8, 0);
/// Each tensor of the flat parameter and gradient buffers starts on a multiple of this many
/// words (256 bytes, what cuMemAlloc gives a buffer; PyTorch's allocator gives each tensor 512).
/// Packed end to end, every weight after `b_{L-1}` (10 words for the anchor) started 8 bytes off a
/// 16-byte boundary: cuBLAS then cannot use its kernels with 16-byte vector loads for the GEMMs
/// that read `W` or write `dW`, and NCCL gets misaligned buckets.
pub const TENSOR_ALIGN: usize = 64;
/// Threads per block of the grid-stride kernels, and their largest grid.
const BLOCK: u32 = 256;
const MAX_GRID: u64 = 65535;

/// How cuBLAS computes the fp32 products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Math {
    /// `CUBLAS_PEDANTIC_MATH`: plain fp32, no shortcut of any kind (the golden run).
    Pedantic,
    /// `CUBLAS_DEFAULT_MATH`: fp32 with TF32 off, as PyTorch with `allow_tf32 = False`.
    Fp32,
    /// `CUBLAS_TF32_TENSOR_OP_MATH`.
    Tf32,
    /// Mixed precision (see the module documentation): the GEMMs take bf16 operands and
    /// accumulate in fp32 (`cublasGemmEx`, `CUBLAS_COMPUTE_32F`), everything else is fp32 with
    /// TF32 off (`CUBLAS_DEFAULT_MATH`).
    Bf16,
}

/// What an element of a buffer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Elem {
    /// 4 bytes: f32, u32 or i32.
    Word,
    /// 2 bytes: bf16 (stored as its bit pattern, `unsigned short` in the kernels).
    Bf16,
}

impl Elem {
    pub fn bytes(self) -> usize {
        match self {
            Elem::Word => WORD,
            Elem::Bf16 => 2,
        }
    }
}

/// One training run: the model, how it is split, and how it computes.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// Input width, hidden widths..., classes.
    pub layers: Vec<usize>,
    /// Samples per replica per step.
    pub local_batch: usize,
    /// Data-parallel replicas, one per GPU.
    pub replicas: usize,
    pub lr: f32,
    pub seed: u64,
    pub math: Math,
}

/// A parameter (or gradient) tensor in the flat buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tensor {
    pub layer: usize,
    /// The bias `b_layer`, else the weight `W_layer`.
    pub bias: bool,
    /// First element in the flat buffer.
    pub offset: usize,
    /// Elements.
    pub len: usize,
}

impl Tensor {
    /// "W_1", "b_0".
    pub fn name(&self) -> String {
        format!("{}_{}", if self.bias { "b" } else { "W" }, self.layer)
    }
}

/// Gradients all-reduced by one NCCL call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    pub index: usize,
    /// Indices into [`Model::tensors`].
    pub tensors: Range<usize>,
    /// First element and element count in the flat gradient buffer.
    pub offset: usize,
    pub len: usize,
}

impl Bucket {
    pub fn bytes(&self) -> u64 {
        (self.len * WORD) as u64
    }
}

/// The device buffers of a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buf {
    /// All parameters, flat, in [`Model::tensors`] order.
    Params,
    /// Their gradients, same layout.
    Grads,
    /// `Act(0)`: the batch; `Act(l)`: the output of layer `l - 1` (after ReLU); `Act(L)`: logits.
    Act(usize),
    /// Two buffers for the gradient flowing backward (`dZ`, then each `dX`), used in turn.
    Delta(usize),
    /// Per-sample loss of the step.
    RowLoss,
    /// Labels of the step (u32).
    Labels,
    /// The teacher's weights (i32), `[classes][in]`.
    Teacher,
    /// `Bl` ones, for the bias gradient.
    Ones,
    /// The sum of this replica's per-sample losses, one slot per step.
    StepLoss,
    /// bf16 run only: the parameters rounded to bf16, same layout as [`Buf::Params`].
    ParamsBf16,
    /// bf16 run only: `Act(l)` rounded to bf16, for `l` below the logits.
    ActBf16(usize),
    /// bf16 run only: `Delta(i)` rounded to bf16.
    DeltaBf16(usize),
}

impl Buf {
    pub fn elem(self) -> Elem {
        match self {
            Buf::ParamsBf16 | Buf::ActBf16(_) | Buf::DeltaBf16(_) => Elem::Bf16,
            _ => Elem::Word,
        }
    }

    /// The buffer holding this one's values rounded to bf16, for the buffers GEMMs read.
    pub fn bf16_copy(self) -> Option<Buf> {
        match self {
            Buf::Params => Some(Buf::ParamsBf16),
            Buf::Act(l) => Some(Buf::ActBf16(l)),
            Buf::Delta(i) => Some(Buf::DeltaBf16(i)),
            _ => None,
        }
    }
}

/// An address on a replica: a buffer and an element offset into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ptr {
    pub buf: Buf,
    pub offset: usize,
}

impl Ptr {
    pub fn of(buf: Buf) -> Ptr {
        Ptr { buf, offset: 0 }
    }
    pub fn at(buf: Buf, offset: usize) -> Ptr {
        Ptr { buf, offset }
    }

    /// The same element in the bf16 copy of the buffer (itself if it has none).
    pub fn bf16(self) -> Ptr {
        Ptr {
            buf: self.buf.bf16_copy().unwrap_or(self.buf),
            offset: self.offset,
        }
    }

    /// Byte offset into its buffer.
    pub fn byte_offset(&self) -> usize {
        self.offset * self.buf.elem().bytes()
    }
}

/// A kernel argument, with the C type the kernel declares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg {
    /// Any pointer (`float*`, `const uint*`, ...).
    Ptr(Ptr),
    /// `ull`.
    U64(u64),
    /// `uint`.
    U32(u32),
    /// `int`.
    I32(i32),
    /// `float`.
    F32(f32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    Ptr,
    U64,
    U32,
    I32,
    F32,
}

impl Arg {
    pub fn kind(&self) -> ArgKind {
        match self {
            Arg::Ptr(_) => ArgKind::Ptr,
            Arg::U64(_) => ArgKind::U64,
            Arg::U32(_) => ArgKind::U32,
            Arg::I32(_) => ArgKind::I32,
            Arg::F32(_) => ArgKind::F32,
        }
    }
}

/// A kernel launch of [`super::kernels::SOURCE`] on the compute stream (1-D grid and block).
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub kernel: &'static str,
    pub grid: u32,
    pub block: u32,
    pub args: Vec<Arg>,
}

/// Blocks of 256 threads for a grid-stride loop over `n` items (at most 65535).
pub fn stride_grid(n: u64) -> u32 {
    n.div_ceil(BLOCK as u64).clamp(1, MAX_GRID) as u32
}

/// Blocks for `items` items of which one block handles `per_block`.
fn item_grid(items: u64, per_block: u64) -> u32 {
    items.div_ceil(per_block).clamp(1, u32::MAX as u64) as u32
}

// Sizes are checked to fit the kernels' `uint` (and cuBLAS's int) by `Model::checked`.
fn u32_of(v: usize) -> u32 {
    v as u32
}

impl Launch {
    fn stride(kernel: &'static str, n: u64, args: Vec<Arg>) -> Launch {
        Launch {
            kernel,
            grid: stride_grid(n),
            block: BLOCK,
            args,
        }
    }

    pub fn gen_features(
        x: Ptr,
        seed: u64,
        step: u64,
        sample_offset: u64,
        rows: usize,
        in_dim: usize,
    ) -> Launch {
        use Arg::*;
        Launch::stride(
            "nc_gen_features",
            (rows * in_dim) as u64,
            vec![
                Ptr(x),
                U64(seed),
                U64(step),
                U64(sample_offset),
                U32(u32_of(rows)),
                U32(u32_of(in_dim)),
            ],
        )
    }

    pub fn gen_teacher(w: Ptr, seed: u64, classes: usize, in_dim: usize) -> Launch {
        use Arg::*;
        Launch::stride(
            "nc_gen_teacher",
            (classes * in_dim) as u64,
            vec![Ptr(w), U64(seed), U32(u32_of(classes)), U32(u32_of(in_dim))],
        )
    }

    /// One warp per row: 8 rows per block of 256.
    pub fn gen_labels(
        labels: Ptr,
        x: Ptr,
        w: Ptr,
        rows: usize,
        in_dim: usize,
        classes: usize,
    ) -> Launch {
        use Arg::*;
        Launch {
            kernel: "nc_gen_labels",
            grid: item_grid(rows as u64, 8),
            block: 256,
            args: vec![
                Ptr(labels),
                Ptr(x),
                Ptr(w),
                U32(u32_of(rows)),
                U32(u32_of(in_dim)),
                U32(u32_of(classes)),
            ],
        }
    }

    pub fn init_weights(w: Ptr, seed: u64, layer: usize, count: usize, fan_in: usize) -> Launch {
        use Arg::*;
        Launch::stride(
            "nc_init_weights",
            count as u64,
            vec![
                Ptr(w),
                U64(seed),
                U32(u32_of(layer)),
                U64(count as u64),
                U32(u32_of(fan_in)),
            ],
        )
    }

    /// A tensor-parallel rank's block of `W_layer`: `w[r][c] = init_param(seed, layer, first +
    /// r·ld + c, fan_in)` for `rows × cols` elements (see [`super::partition::LayerShard`]).
    #[allow(clippy::too_many_arguments)]
    pub fn init_weight_block(
        w: Ptr,
        seed: u64,
        layer: usize,
        rows: usize,
        cols: usize,
        first: usize,
        ld: usize,
        fan_in: usize,
    ) -> Launch {
        use Arg::*;
        Launch::stride(
            "nc_init_weight_block",
            (rows * cols) as u64,
            vec![
                Ptr(w),
                U64(seed),
                U32(u32_of(layer)),
                U32(u32_of(rows)),
                U32(u32_of(cols)),
                U64(first as u64),
                U64(ld as u64),
                U32(u32_of(fan_in)),
            ],
        )
    }

    pub fn fill(p: Ptr, n: usize, v: f32) -> Launch {
        use Arg::*;
        Launch::stride("nc_fill", n as u64, vec![Ptr(p), U64(n as u64), F32(v)])
    }

    pub fn bias_act_fwd(y: Ptr, b: Ptr, rows: usize, cols: usize, relu: bool) -> Launch {
        use Arg::*;
        Launch::stride(
            "nc_bias_act_fwd",
            (rows * cols) as u64,
            vec![
                Ptr(y),
                Ptr(b),
                U32(u32_of(rows)),
                U32(u32_of(cols)),
                I32(relu as i32),
            ],
        )
    }

    pub fn relu_bwd(dx: Ptr, h: Ptr, n: usize) -> Launch {
        use Arg::*;
        Launch::stride(
            "nc_relu_bwd",
            n as u64,
            vec![Ptr(dx), Ptr(h), U64(n as u64)],
        )
    }

    /// One thread per row, blocks of 128.
    pub fn softmax_xent(
        z: Ptr,
        labels: Ptr,
        loss: Ptr,
        dz: Ptr,
        rows: usize,
        classes: usize,
        scale: f32,
    ) -> Launch {
        use Arg::*;
        Launch {
            kernel: "nc_softmax_xent",
            grid: item_grid(rows as u64, 128),
            block: 128,
            args: vec![
                Ptr(z),
                Ptr(labels),
                Ptr(loss),
                Ptr(dz),
                U32(u32_of(rows)),
                U32(u32_of(classes)),
                F32(scale),
            ],
        }
    }

    /// One thread: the CPU's order.
    pub fn sum_serial(x: Ptr, n: usize, out: Ptr) -> Launch {
        use Arg::*;
        Launch {
            kernel: "nc_sum_serial",
            grid: 1,
            block: 1,
            args: vec![Ptr(x), U64(n as u64), Ptr(out)],
        }
    }

    /// `y[i] = bf16(x[i])` for `n` elements (`x` fp32, `y` its bf16 copy).
    pub fn to_bf16(x: Ptr, y: Ptr, n: usize) -> Launch {
        use Arg::*;
        Launch::stride("nc_to_bf16", n as u64, vec![Ptr(x), Ptr(y), U64(n as u64)])
    }

    pub fn sgd(p: Ptr, g: Ptr, n: usize, lr: f32) -> Launch {
        use Arg::*;
        Launch::stride(
            "nc_sgd",
            n as u64,
            vec![Ptr(p), Ptr(g), U64(n as u64), F32(lr)],
        )
    }
}

/// `C = op(A)·op(B)` in column-major cuBLAS terms (`cublasSgemm`, `alpha = 1`, `beta = 0`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemm {
    pub transa: bool,
    pub transb: bool,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub a: Ptr,
    pub lda: i32,
    pub b: Ptr,
    pub ldb: i32,
    pub c: Ptr,
    pub ldc: i32,
}

fn i32_of(v: usize) -> i32 {
    v as i32
}

impl Gemm {
    /// `Y[B][out] = X[B][in]·W[out][in]ᵀ` (row-major): `Sgemm(T, N, out, B, in, W, in, X, in, Y, out)`.
    pub fn forward(w: Ptr, x: Ptr, y: Ptr, batch: usize, din: usize, dout: usize) -> Gemm {
        Gemm {
            transa: true,
            transb: false,
            m: i32_of(dout),
            n: i32_of(batch),
            k: i32_of(din),
            a: w,
            lda: i32_of(din),
            b: x,
            ldb: i32_of(din),
            c: y,
            ldc: i32_of(dout),
        }
    }

    /// `dX[B][in] = dY[B][out]·W[out][in]`: `Sgemm(N, N, in, B, out, W, in, dY, out, dX, in)`.
    pub fn grad_input(w: Ptr, dy: Ptr, dx: Ptr, batch: usize, din: usize, dout: usize) -> Gemm {
        Gemm {
            transa: false,
            transb: false,
            m: i32_of(din),
            n: i32_of(batch),
            k: i32_of(dout),
            a: w,
            lda: i32_of(din),
            b: dy,
            ldb: i32_of(dout),
            c: dx,
            ldc: i32_of(din),
        }
    }

    /// `dW[out][in] = dY[B][out]ᵀ·X[B][in]`: `Sgemm(N, T, in, out, B, X, in, dY, out, dW, in)`.
    pub fn grad_weight(x: Ptr, dy: Ptr, dw: Ptr, batch: usize, din: usize, dout: usize) -> Gemm {
        Gemm {
            transa: false,
            transb: true,
            m: i32_of(din),
            n: i32_of(dout),
            k: i32_of(batch),
            a: x,
            lda: i32_of(din),
            b: dy,
            ldb: i32_of(dout),
            c: dw,
            ldc: i32_of(din),
        }
    }

    /// What `A` and `B` hold: fp32 (`cublasSgemm`) or bf16 (`cublasGemmEx`). `C` is fp32.
    pub fn operands(&self) -> Elem {
        self.a.buf.elem()
    }

    /// Floating-point operations (a multiply and an add per term).
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// `y = A·x` with `A` column-major `m x n` (`cublasSgemv`, no transpose, unit strides).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemv {
    pub m: i32,
    pub n: i32,
    pub a: Ptr,
    pub lda: i32,
    pub x: Ptr,
    pub y: Ptr,
}

impl Gemv {
    /// `db[out] = Σ_r dY[r][out]`: the row-major `dY[B][out]` is the column-major `out x B`.
    pub fn bias_grad(dy: Ptr, ones: Ptr, db: Ptr, batch: usize, dout: usize) -> Gemv {
        Gemv {
            m: i32_of(dout),
            n: i32_of(batch),
            a: dy,
            lda: i32_of(dout),
            x: ones,
            y: db,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    /// Kernels, cuBLAS, the SGD update.
    Compute,
    /// The gradient all-reduce.
    Comm,
}

/// The events of a step (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EvKind {
    StepStart,
    BwdDone,
    Waited,
    StepEnd,
    /// Bucket `k`'s gradients are all written (compute stream).
    Ready(usize),
    /// Bucket `k`'s all-reduce starts and ends (communication stream).
    CommStart(usize),
    CommEnd(usize),
    /// A sharded step's tensor-parallel all-reduce `k` (in the step's order) starts and ends
    /// (compute stream: the step waits for all of it).
    TpStart(usize),
    TpEnd(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EvId {
    pub step: usize,
    pub kind: EvKind,
}

/// One operation of a replica.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Launch(Launch),
    Gemm(Gemm),
    Gemv(Gemv),
    /// Record the event on the stream.
    Record(Stream, EvId),
    /// The stream waits for the event (recorded earlier).
    Wait(Stream, EvId),
    /// Sum bucket `k` of the gradients over all replicas, in place, on the communication stream.
    /// Issued for all replicas at once (one NCCL group).
    AllReduce(usize),
    /// Sum a range over the rank's tensor-parallel or data-parallel group, in place (the sharded
    /// runs of [`sharded`]). Issued for every group at once; every rank's list holds the same one.
    GroupAllReduce(GroupReduce),
}

/// Which ranks a [`GroupReduce`] sums over (see [`super::partition`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Group {
    /// The rank's tensor-parallel group: activations forward, input gradients backward.
    Tensor,
    /// The ranks holding the same shards, one per data-parallel group: the gradients.
    Data,
}

/// An in-place all-reduce (sum) of `len` words at `at` over each group of kind `group`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupReduce {
    pub group: Group,
    /// The stream it runs on: tensor-parallel all-reduces sit on the compute stream's critical
    /// path (the next GEMM needs the sum); gradient buckets on the communication stream.
    pub stream: Stream,
    pub at: Ptr,
    pub len: usize,
}

impl GroupReduce {
    /// Bytes each rank puts into it (fp32 words).
    pub fn bytes(&self) -> u64 {
        (self.len * WORD) as u64
    }
}

impl Model {
    /// The suite's run on `replicas` GPUs.
    pub fn main(c: &TrainingCheck, replicas: usize) -> Result<Model, HwError> {
        let math = match c.precision {
            Precision::Fp32 => Math::Fp32,
            Precision::Tf32 => Math::Tf32,
            Precision::Bf16 => Math::Bf16,
        };
        Model {
            layers: c.layers.clone(),
            local_batch: c.batch,
            replicas,
            lr: c.lr as f32,
            seed: c.seed,
            math,
        }
        .checked()
    }

    /// The golden configuration: one replica, plain fp32.
    pub fn golden(c: &TrainingCheck) -> Result<Model, HwError> {
        Model {
            layers: c.golden_layers.clone(),
            local_batch: c.golden_batch,
            replicas: 1,
            lr: c.golden_lr as f32,
            seed: c.seed,
            math: Math::Pedantic,
        }
        .checked()
    }

    /// The sizes the kernels (`uint`) and cuBLAS (`int`) can take.
    pub fn checked(self) -> Result<Model, HwError> {
        let bad = |why: String| {
            Err(HwError::NotSupported(format!(
                "training configuration: {why}"
            )))
        };
        if self.layers.len() < 2 || self.layers.contains(&0) {
            return bad(format!(
                "layers {:?} need an input and an output width, none zero",
                self.layers
            ));
        }
        if self.local_batch == 0 || self.replicas == 0 {
            return bad("the batch and the number of GPUs must be at least 1".into());
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!("the learning rate must be > 0, got {}", self.lr));
        }
        let limit = i32::MAX as usize;
        let widest = self.layers.iter().copied().max().unwrap_or(0);
        if widest > limit || self.local_batch > limit || self.layers.len() > limit {
            return bad(format!("sizes above {limit} (cuBLAS takes 32-bit sizes)"));
        }
        // Widths and the batch below 2^31 still allow a buffer of 2^62 words (2^64 bytes) and,
        // with many wide layers, a parameter count past 2^64: sizes computed in usize would wrap
        // (in a release build), pass the memory check and allocate too little for the kernels
        // to write. Count in u128 and refuse anything whose bytes do not fit well inside a u64.
        let bl = self.local_batch as u128;
        let params: u128 = self
            .layers
            .windows(2)
            .map(|w| w[0] as u128 * w[1] as u128 + w[1] as u128)
            .sum();
        let acts: u128 = self.layers.iter().map(|&d| bl * d as u128).sum();
        let gaps = 2 * self.layers.len() as u128 * TENSOR_ALIGN as u128;
        let mut words = 2 * (params + gaps) + acts + 2 * bl * widest as u128 + 3 * bl;
        if self.math == Math::Bf16 {
            // The bf16 copies, at most half a word per element.
            words += (params + gaps + acts + 2 * bl * widest as u128).div_ceil(2);
        }
        if words * WORD as u128 > (1u128 << 62) {
            return bad(format!(
                "layers {:?} with batch {} need {words} words of memory per GPU",
                self.layers, self.local_batch
            ));
        }
        // The global sample index r·Bl + s must fit the kernels' 64-bit arithmetic, which it does.
        Ok(self)
    }

    /// Number of linear layers.
    pub fn depth(&self) -> usize {
        self.layers.len() - 1
    }

    pub fn in_dim(&self) -> usize {
        self.layers[0]
    }

    pub fn classes(&self) -> usize {
        self.layers[self.depth()]
    }

    pub fn global_batch(&self) -> usize {
        self.local_batch * self.replicas
    }

    /// Parameters (weights and biases).
    pub fn params(&self) -> usize {
        mlp_params(&self.layers) as usize
    }

    /// Words of the flat parameter (and gradient) buffer: the tensors, each aligned to
    /// [`TENSOR_ALIGN`], and the gaps between them (zero, and kept zero by the update).
    pub fn flat_len(&self) -> usize {
        self.tensors().last().map_or(0, |t| t.offset + t.len)
    }

    /// Bytes of gradients each replica all-reduces per step (all of them, in fp32).
    pub fn gradient_bytes(&self) -> u64 {
        (self.params() * WORD) as u64
    }

    /// The tensors in the flat buffers, in the order backward produces their gradients, each at
    /// a multiple of [`TENSOR_ALIGN`].
    pub fn tensors(&self) -> Vec<Tensor> {
        let dims: Vec<(usize, usize)> = self.layers.windows(2).map(|w| (w[0], w[1])).collect();
        flat_tensors(&dims)
    }

    /// The all-reduce buckets; none with one replica.
    pub fn buckets(&self) -> Vec<Bucket> {
        if self.replicas > 1 {
            plan_buckets(&self.tensors(), BUCKET_CAP_BYTES)
        } else {
            vec![]
        }
    }

    /// Every buffer of a replica for a run of `steps` steps, with its size in elements.
    pub fn buffers(&self, steps: usize) -> Vec<(Buf, usize)> {
        let bl = self.local_batch;
        let widest = self.layers[1..].iter().copied().max().unwrap_or(1);
        let p = self.flat_len();
        let mut v = vec![(Buf::Params, p), (Buf::Grads, p)];
        for (l, &d) in self.layers.iter().enumerate() {
            v.push((Buf::Act(l), bl * d));
        }
        v.push((Buf::Delta(0), bl * widest));
        if self.depth() >= 2 {
            v.push((Buf::Delta(1), bl * widest));
        }
        v.extend([
            (Buf::RowLoss, bl),
            (Buf::Labels, bl),
            (Buf::Teacher, self.in_dim() * self.classes()),
            (Buf::Ones, bl),
            (Buf::StepLoss, steps.max(1)),
        ]);
        if self.math == Math::Bf16 {
            let copies: Vec<(Buf, usize)> = v
                .iter()
                .filter(|(b, _)| !matches!(b, Buf::Act(l) if *l == self.depth()))
                .filter_map(|&(b, n)| Some((b.bf16_copy()?, n)))
                .collect();
            v.extend(copies);
        }
        v
    }

    /// Device memory a replica's buffers take.
    pub fn memory_bytes(&self, steps: usize) -> u64 {
        self.buffers(steps)
            .iter()
            .map(|(b, n)| (n * b.elem().bytes()) as u64)
            .sum()
    }

    /// GEMM floating-point operations of one step of one replica: forward `2·Bl·in·out` per
    /// layer, the same again for `dW`, and for `dX` below the first layer.
    pub fn step_flops(&self) -> f64 {
        let bl = self.local_batch as f64;
        let mut f = 0.0;
        for (l, w) in self.layers.windows(2).enumerate() {
            let mac = w[0] as f64 * w[1] as f64;
            f += 2.0 * bl * mac * if l > 0 { 3.0 } else { 2.0 };
        }
        f
    }

    fn tensor(&self, layer: usize, bias: bool) -> Tensor {
        // tensors() lists layer l's bias at 2·(L-1-l) and its weight right after.
        let i = 2 * (self.depth() - 1 - layer) + usize::from(!bias);
        self.tensors()[i]
    }

    /// The reference configuration with the same data, initialisation and learning rate.
    pub fn mlp_config(&self, steps: usize) -> MlpConfig {
        MlpConfig {
            layers: self.layers.clone(),
            batch: self.global_batch(),
            steps,
            lr: self.lr,
            seed: self.seed,
        }
    }
}

/// The flat layout of layers of `(in, out)` widths: backward order (`b_{L-1}, W_{L-1}, ...,
/// b_0, W_0`), each tensor at a multiple of [`TENSOR_ALIGN`].
fn flat_tensors(dims: &[(usize, usize)]) -> Vec<Tensor> {
    let mut v = Vec::with_capacity(2 * dims.len());
    let mut offset = 0usize;
    for (l, &(din, dout)) in dims.iter().enumerate().rev() {
        for (bias, len) in [(true, dout), (false, dout * din)] {
            offset = offset.next_multiple_of(TENSOR_ALIGN);
            v.push(Tensor {
                layer: l,
                bias,
                offset,
                len,
            });
            offset += len;
        }
    }
    v
}

/// The parameters (weights and biases) of an MLP of `layers` widths. Suites hold at most 2^32
/// (checked at load), so the count fits a u64 with room to spare.
pub fn mlp_params(layers: &[usize]) -> u64 {
    layers
        .windows(2)
        .map(|w| w[0] as u64 * w[1] as u64 + w[1] as u64)
        .sum()
}

/// Whether a GPU of compute capability `cc` (major, minor) can run `m`: the bf16 run needs bf16
/// tensor cores ([`BF16_MIN_COMPUTE_CAPABILITY`]); fp32 and TF32 run anywhere (TF32 falls back
/// to fp32 before Ampere).
pub fn check_arch(m: &Model, cc: (i32, i32), gpu: &str) -> Result<(), HwError> {
    let (major, minor) = BF16_MIN_COMPUTE_CAPABILITY;
    if m.math == Math::Bf16 && cc < BF16_MIN_COMPUTE_CAPABILITY {
        return Err(HwError::NotSupported(format!(
            "bf16 training needs bf16 tensor cores, compute capability {major}.{minor} (Ampere) \
             or newer, and {gpu} has compute capability {}.{} (sm_{}{}); use precision = \
             \"fp32\" on this GPU",
            cc.0, cc.1, cc.0, cc.1
        )));
    }
    Ok(())
}

/// Group `tensors` (in backward order, contiguous) into buckets: add tensors until the bucket
/// holds at least `cap_bytes`, then start the next (PyTorch DDP's `compute_bucket_assignment_by_size`).
/// A tensor larger than the cap gets a bucket of its own; the last bucket takes the rest. A
/// bucket's range spans its tensors and the alignment gaps between them.
pub fn plan_buckets(tensors: &[Tensor], cap_bytes: usize) -> Vec<Bucket> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, t) in tensors.iter().enumerate() {
        bytes += t.len * WORD;
        if bytes >= cap_bytes || i + 1 == tensors.len() {
            let part = &tensors[start..=i];
            out.push(Bucket {
                index: out.len(),
                tensors: start..i + 1,
                offset: part[0].offset,
                len: t.offset + t.len - part[0].offset,
            });
            start = i + 1;
            bytes = 0;
        }
    }
    out
}

/// Once per run: the teacher, the initial parameters (after zeroing both flat buffers, so that
/// the alignment gaps hold zeros: the all-reduce and the update read them), the ones vector.
pub fn init_ops(m: &Model) -> Vec<Op> {
    let mut ops = vec![
        Op::Launch(Launch::gen_teacher(
            Ptr::of(Buf::Teacher),
            m.seed,
            m.classes(),
            m.in_dim(),
        )),
        Op::Launch(Launch::fill(Ptr::of(Buf::Params), m.flat_len(), 0.0)),
        Op::Launch(Launch::fill(Ptr::of(Buf::Grads), m.flat_len(), 0.0)),
    ];
    for t in m.tensors() {
        let p = Ptr::at(Buf::Params, t.offset);
        ops.push(Op::Launch(if t.bias {
            Launch::fill(p, t.len, 0.0)
        } else {
            Launch::init_weights(p, m.seed, t.layer, t.len, m.layers[t.layer])
        }));
    }
    ops.push(Op::Launch(Launch::fill(
        Ptr::of(Buf::Ones),
        m.local_batch,
        1.0,
    )));
    ops
}

/// The batch of `step` for `replica`: features into `Act(0)`, labels.
pub fn data_ops(m: &Model, step: usize, replica: usize) -> Vec<Op> {
    let bl = m.local_batch;
    vec![
        Op::Launch(Launch::gen_features(
            Ptr::of(Buf::Act(0)),
            m.seed,
            step as u64,
            (replica * bl) as u64,
            bl,
            m.in_dim(),
        )),
        Op::Launch(Launch::gen_labels(
            Ptr::of(Buf::Labels),
            Ptr::of(Buf::Act(0)),
            Ptr::of(Buf::Teacher),
            bl,
            m.in_dim(),
            m.classes(),
        )),
    ]
}

/// After the op that writes tensor `t`: start the all-reduce of the bucket it completes.
fn bucket_ops(buckets: &[Bucket], t: usize, step: usize, ops: &mut Vec<Op>) {
    for b in buckets.iter().filter(|b| b.tensors.end == t + 1) {
        let ev = |kind| EvId { step, kind };
        ops.extend([
            Op::Record(Stream::Compute, ev(EvKind::Ready(b.index))),
            Op::Wait(Stream::Comm, ev(EvKind::Ready(b.index))),
            Op::Record(Stream::Comm, ev(EvKind::CommStart(b.index))),
            Op::AllReduce(b.index),
            Op::Record(Stream::Comm, ev(EvKind::CommEnd(b.index))),
        ]);
    }
}

/// One training step of `replica` (see the module documentation).
pub fn step_ops(m: &Model, buckets: &[Bucket], step: usize, replica: usize) -> Vec<Op> {
    let depth = m.depth();
    let bl = m.local_batch;
    let ev = |kind| EvId { step, kind };
    let index = |layer: usize, bias: bool| 2 * (depth - 1 - layer) + usize::from(!bias);
    // A GEMM operand: the buffer itself, or in the bf16 run its bf16 copy, made by `convert`
    // once the fp32 values are final.
    let bf16 = m.math == Math::Bf16;
    let operand = |p: Ptr| if bf16 { p.bf16() } else { p };
    let convert = |p: Ptr, n: usize, ops: &mut Vec<Op>| {
        if bf16 {
            ops.push(Op::Launch(Launch::to_bf16(p, p.bf16(), n)));
        }
    };
    let mut ops = vec![Op::Record(Stream::Compute, ev(EvKind::StepStart))];
    ops.extend(data_ops(m, step, replica));
    convert(Ptr::of(Buf::Params), m.flat_len(), &mut ops);
    convert(Ptr::of(Buf::Act(0)), bl * m.in_dim(), &mut ops);
    for l in 0..depth {
        let (din, dout) = (m.layers[l], m.layers[l + 1]);
        let (w, b) = (m.tensor(l, false), m.tensor(l, true));
        ops.push(Op::Gemm(Gemm::forward(
            operand(Ptr::at(Buf::Params, w.offset)),
            operand(Ptr::of(Buf::Act(l))),
            Ptr::of(Buf::Act(l + 1)),
            bl,
            din,
            dout,
        )));
        ops.push(Op::Launch(Launch::bias_act_fwd(
            Ptr::of(Buf::Act(l + 1)),
            Ptr::at(Buf::Params, b.offset),
            bl,
            dout,
            l + 1 < depth,
        )));
        if l + 1 < depth {
            convert(Ptr::of(Buf::Act(l + 1)), bl * dout, &mut ops);
        }
    }
    ops.push(Op::Launch(Launch::softmax_xent(
        Ptr::of(Buf::Act(depth)),
        Ptr::of(Buf::Labels),
        Ptr::of(Buf::RowLoss),
        Ptr::of(Buf::Delta(0)),
        bl,
        m.classes(),
        1.0 / m.global_batch() as f32,
    )));
    ops.push(Op::Launch(Launch::sum_serial(
        Ptr::of(Buf::RowLoss),
        bl,
        Ptr::at(Buf::StepLoss, step),
    )));
    let mut delta = 0;
    for l in (0..depth).rev() {
        let (din, dout) = (m.layers[l], m.layers[l + 1]);
        let (w, b) = (m.tensor(l, false), m.tensor(l, true));
        let dy = Ptr::of(Buf::Delta(delta));
        convert(dy, bl * dout, &mut ops);
        ops.push(Op::Gemv(Gemv::bias_grad(
            dy,
            Ptr::of(Buf::Ones),
            Ptr::at(Buf::Grads, b.offset),
            bl,
            dout,
        )));
        bucket_ops(buckets, index(l, true), step, &mut ops);
        ops.push(Op::Gemm(Gemm::grad_weight(
            operand(Ptr::of(Buf::Act(l))),
            operand(dy),
            Ptr::at(Buf::Grads, w.offset),
            bl,
            din,
            dout,
        )));
        bucket_ops(buckets, index(l, false), step, &mut ops);
        if l > 0 {
            let dx = Ptr::of(Buf::Delta(1 - delta));
            ops.push(Op::Gemm(Gemm::grad_input(
                operand(Ptr::at(Buf::Params, w.offset)),
                operand(dy),
                dx,
                bl,
                din,
                dout,
            )));
            ops.push(Op::Launch(Launch::relu_bwd(
                dx,
                Ptr::of(Buf::Act(l)),
                bl * din,
            )));
            delta = 1 - delta;
        }
    }
    ops.push(Op::Record(Stream::Compute, ev(EvKind::BwdDone)));
    if let Some(last) = buckets.last() {
        ops.push(Op::Wait(Stream::Compute, ev(EvKind::CommEnd(last.index))));
    }
    ops.push(Op::Record(Stream::Compute, ev(EvKind::Waited)));
    ops.push(Op::Launch(Launch::sgd(
        Ptr::of(Buf::Params),
        Ptr::of(Buf::Grads),
        m.flat_len(),
        m.lr,
    )));
    ops.push(Op::Record(Stream::Compute, ev(EvKind::StepEnd)));
    ops
}

/// What executes the plan: the GPUs, or (in tests) an emulation.
pub trait Device {
    /// Enqueue `op` (never [`Op::AllReduce`]) on replica `replica`.
    fn exec(&mut self, replica: usize, op: &Op) -> Result<(), HwError>;
    /// Enqueue the in-place sum of `bucket` over every replica, on their communication streams.
    fn all_reduce(&mut self, bucket: &Bucket) -> Result<(), HwError>;
    /// Enqueue the in-place sum `reduce` over the ranks `ranks` (ascending; a tensor-parallel or
    /// data-parallel group of a sharded run, not necessarily every rank), on each rank's
    /// `reduce.stream`. Every rank ends with the same sum.
    fn group_all_reduce(&mut self, ranks: &[usize], reduce: &GroupReduce) -> Result<(), HwError>;
    /// Wait until every replica's streams are idle.
    fn sync(&mut self) -> Result<(), HwError>;
    /// The first `len` words of a buffer (after [`Device::sync`]).
    fn read(&mut self, replica: usize, buf: Buf, len: usize) -> Result<Vec<u32>, HwError>;
    /// Milliseconds between two recorded events of a replica.
    fn elapsed_ms(&mut self, replica: usize, from: EvId, to: EvId) -> Result<f64, HwError>;
}

fn internal(detail: impl Into<String>) -> HwError {
    HwError::Call {
        call: "the training plan".into(),
        detail: detail.into(),
    }
}

/// Enqueue the replicas' op lists side by side: op `i` of every replica, then op `i + 1`. The
/// lists have the same shape (they differ in data offsets only), so the all-reduce of a bucket is
/// issued once, for all replicas together, when every replica has queued the gradients it needs.
pub fn run_lockstep<D: Device + ?Sized>(
    dev: &mut D,
    buckets: &[Bucket],
    lists: &[Vec<Op>],
) -> Result<(), HwError> {
    let Some(first) = lists.first() else {
        return Ok(());
    };
    for (i, op) in first.iter().enumerate() {
        let same = lists.iter().all(|l| {
            l.get(i)
                .is_some_and(|o| std::mem::discriminant(o) == std::mem::discriminant(op))
        });
        if !same || lists.iter().any(|l| l.len() != first.len()) {
            return Err(internal("replicas' operation lists differ in shape"));
        }
        match op {
            Op::AllReduce(k) => {
                let b = buckets
                    .get(*k)
                    .ok_or_else(|| internal(format!("no bucket {k}")))?;
                dev.all_reduce(b)?;
            }
            Op::GroupAllReduce(_) => {
                return Err(internal(
                    "a group all-reduce in a data-parallel plan (sharded plans run with \
                     sharded::run_ranks)",
                ))
            }
            _ => {
                for (r, l) in lists.iter().enumerate() {
                    dev.exec(r, &l[i])?;
                }
            }
        }
    }
    Ok(())
}

/// How to run a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainOpts {
    pub steps: usize,
    /// Steps before the timed ones; `steps` for none timed.
    pub warmup: usize,
    /// Before training, compare the GPU's initial parameters and first batch with the CPU's.
    pub verify_inputs: bool,
}

/// Untimed steps at the start of a run of `steps`: [`WARMUP_STEPS`], keeping at least one timed.
pub fn warmup_steps(steps: usize) -> usize {
    WARMUP_STEPS.min(steps.saturating_sub(1))
}

/// Per timed step, milliseconds: the step, the all-reduce, and its exposed part.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepTimes {
    pub step_ms: Vec<f64>,
    pub comm_ms: Vec<f64>,
    pub exposed_ms: Vec<f64>,
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Mean loss of each step over the global batch.
    pub losses: Vec<f32>,
    pub times: StepTimes,
    /// [`reference::params_hash`] of each replica's final parameters.
    pub replica_hashes: Vec<String>,
}

/// The timings of `steps` from the recorded events (see the module documentation).
pub fn step_times<D: Device + ?Sized>(
    dev: &mut D,
    replicas: usize,
    buckets: &[Bucket],
    steps: Range<usize>,
) -> Result<StepTimes, HwError> {
    let mut t = StepTimes::default();
    for step in steps {
        let (mut s, mut c, mut x) = (0f64, 0f64, 0f64);
        for r in 0..replicas {
            let one = rank_times(dev, r, buckets, step)?;
            s = s.max(one.0);
            c = c.max(one.1);
            x = x.max(one.2);
        }
        t.step_ms.push(s);
        t.comm_ms.push(c);
        t.exposed_ms.push(x.max(0.0));
    }
    Ok(t)
}

/// One rank's step `step`, milliseconds: the step, its buckets' all-reduces summed, and how
/// long the compute stream waited for the last of them (0 without buckets).
pub(crate) fn rank_times<D: Device + ?Sized>(
    dev: &mut D,
    r: usize,
    buckets: &[Bucket],
    step: usize,
) -> Result<(f64, f64, f64), HwError> {
    let ev = |kind| EvId { step, kind };
    let s = dev.elapsed_ms(r, ev(EvKind::StepStart), ev(EvKind::StepEnd))?;
    let mut comm = 0.0;
    for b in buckets {
        comm += dev.elapsed_ms(
            r,
            ev(EvKind::CommStart(b.index)),
            ev(EvKind::CommEnd(b.index)),
        )?;
    }
    let waited = if buckets.is_empty() {
        0.0
    } else {
        dev.elapsed_ms(r, ev(EvKind::BwdDone), ev(EvKind::Waited))?
    };
    Ok((s, comm, waited))
}

fn to_f32(words: &[u32]) -> Vec<f32> {
    words.iter().map(|w| f32::from_bits(*w)).collect()
}

/// The flat parameters of a replica as the reference orders them: `[W_0, b_0, W_1, b_1, ...]`.
pub fn reference_order(m: &Model, flat: &[f32]) -> Vec<Vec<f32>> {
    let mut out = vec![Vec::new(); 2 * m.depth()];
    for t in m.tensors() {
        let i = 2 * t.layer + usize::from(t.bias);
        out[i] = flat[t.offset..t.offset + t.len].to_vec();
    }
    out
}

/// Where two word lists first differ, and in how many places.
fn mismatch(gpu: &[u32], cpu: &[u32]) -> Option<(usize, usize)> {
    let mut first = None;
    let mut count = gpu.len().abs_diff(cpu.len());
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        if g != c {
            first.get_or_insert(i);
            count += 1;
        }
    }
    match (first, count) {
        (Some(i), n) => Some((i, n)),
        (None, 0) => None,
        (None, n) => Some((gpu.len().min(cpu.len()), n)),
    }
}

fn input_mismatch(replica: usize, what: &str, gpu: &[u32], cpu: &[u32], float: bool) -> HwError {
    let (i, n) = mismatch(gpu, cpu).unwrap_or((0, 0));
    let show = |v: Option<&u32>| match v {
        None => "nothing".into(),
        Some(w) if float => format!("{:e} ({w:#010x})", f32::from_bits(*w)),
        Some(w) => format!("{}", *w as i32),
    };
    HwError::Call {
        call: "checking the training inputs the GPU computed".into(),
        detail: format!(
            "replica {replica}: {n} of {} values of {what} differ from the CPU definition (first \
             at element {i}: GPU {}, CPU {}); the kernels were miscompiled or the GPU computes \
             wrong integer or float results",
            cpu.len(),
            show(gpu.get(i)),
            show(cpu.get(i)),
        ),
    }
}

/// Compare every replica's initial parameters and its share of step 0's batch with the CPU
/// definitions, bit for bit. Run after [`init_ops`] and [`data_ops`] of step 0, and a sync.
pub fn verify_inputs<D: Device + ?Sized>(dev: &mut D, m: &Model) -> Result<(), HwError> {
    let cpu_params = reference::init_params(&m.mlp_config(0));
    let bl = m.local_batch;
    let tensors = m.tensors();
    for r in 0..m.replicas {
        let params = RankParams {
            flat_len: m.flat_len(),
            tensors: &tensors,
            cpu: &cpu_params,
            whose: String::new(),
        };
        verify_rank(dev, m, r, &params, r * bl..(r + 1) * bl)?;
    }
    Ok(())
}

/// What one rank's parameter buffer must hold: `tensors` laid out in `flat_len` words, each
/// equal to its tensor of `cpu` (reference order); `whose` prefixes what a mismatch names
/// ("rank 3's shard of ").
pub(crate) struct RankParams<'a> {
    pub flat_len: usize,
    pub tensors: &'a [Tensor],
    pub cpu: &'a [Vec<f32>],
    pub whose: String,
}

/// Compare rank `r`'s initial parameters with `params`, and its features and labels of step 0
/// with the CPU's for the samples `batch` of `m`'s data, bit for bit.
pub(crate) fn verify_rank<D: Device + ?Sized>(
    dev: &mut D,
    m: &Model,
    r: usize,
    params: &RankParams,
    batch: Range<usize>,
) -> Result<(), HwError> {
    let flat = dev.read(r, Buf::Params, params.flat_len)?;
    for t in params.tensors {
        let cpu: Vec<u32> = params.cpu[2 * t.layer + usize::from(t.bias)]
            .iter()
            .map(|v| v.to_bits())
            .collect();
        let gpu = &flat[t.offset..t.offset + t.len];
        if gpu != cpu.as_slice() {
            let what = format!("{}the initial {}", params.whose, t.name());
            return Err(input_mismatch(r, &what, gpu, &cpu, true));
        }
    }
    let (x, y) = reference::generate_batch(m.seed, 0, batch, m.in_dim(), m.classes());
    let cpu_x: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
    let gpu_x = dev.read(r, Buf::Act(0), cpu_x.len())?;
    if gpu_x != cpu_x {
        return Err(input_mismatch(
            r,
            "the features of step 0",
            &gpu_x,
            &cpu_x,
            true,
        ));
    }
    let gpu_y = dev.read(r, Buf::Labels, y.len())?;
    if gpu_y != y {
        return Err(input_mismatch(r, "the labels of step 0", &gpu_y, &y, false));
    }
    Ok(())
}

/// Hash each replica's parameters, on several threads (one per replica).
fn hash_replicas(m: &Model, flats: Vec<Vec<u32>>) -> Vec<String> {
    std::thread::scope(|s| {
        let handles: Vec<_> = flats
            .into_iter()
            .map(|flat| {
                s.spawn(move || reference::params_hash(&reference_order(m, &to_f32(&flat))))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| "hashing failed".into()))
            .collect()
    })
}

/// Run the plan: initialise, optionally check the inputs, train `opts.steps` steps, then read
/// back the losses, the timings and each replica's parameter hash.
pub fn train<D: Device + ?Sized>(
    dev: &mut D,
    m: &Model,
    opts: &TrainOpts,
) -> Result<Outcome, HwError> {
    let n = m.replicas;
    let buckets = m.buckets();
    run_lockstep(dev, &buckets, &vec![init_ops(m); n])?;
    if opts.verify_inputs {
        let lists: Vec<Vec<Op>> = (0..n).map(|r| data_ops(m, 0, r)).collect();
        run_lockstep(dev, &buckets, &lists)?;
        dev.sync()?;
        verify_inputs(dev, m)?;
    }
    for step in 0..opts.steps {
        let lists: Vec<Vec<Op>> = (0..n).map(|r| step_ops(m, &buckets, step, r)).collect();
        run_lockstep(dev, &buckets, &lists)?;
    }
    dev.sync()?;
    let mut sums = vec![0f32; opts.steps];
    for r in 0..n {
        let v = dev.read(r, Buf::StepLoss, opts.steps)?;
        for (s, w) in sums.iter_mut().zip(v) {
            *s += f32::from_bits(w);
        }
    }
    let global = m.global_batch() as f32;
    let losses = sums.iter().map(|s| s / global).collect();
    let times = step_times(dev, n, &buckets, opts.warmup.min(opts.steps)..opts.steps)?;
    let mut flats = Vec::with_capacity(n);
    for r in 0..n {
        flats.push(dev.read(r, Buf::Params, m.flat_len())?);
    }
    Ok(Outcome {
        losses,
        times,
        replica_hashes: hash_replicas(m, flats),
    })
}

/// The check's [`TrainingRun`] from the three runs: the golden one, the data-parallel one on
/// `gpus` GPUs and (with several GPUs) the one-GPU baseline.
pub fn training_run(
    c: &TrainingCheck,
    gpus: usize,
    golden: &Outcome,
    main: &Outcome,
    single: Option<&Outcome>,
) -> TrainingRun {
    let widen = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
    let base = crate::evidence::median(&single.unwrap_or(main).times.step_ms);
    let params = mlp_params(&c.layers);
    TrainingRun {
        losses: widen(&main.losses),
        golden_node_losses: widen(&golden.losses),
        replica_hashes: main.replica_hashes.clone(),
        step_ms: main.times.step_ms.clone(),
        exposed_comm_ms: main.times.exposed_ms.clone(),
        comm_ms: main.times.comm_ms.clone(),
        batch_per_gpu: c.batch,
        gpus,
        single_gpu_samples_per_s: (base.is_finite() && base > 0.0)
            .then(|| c.batch as f64 / (base / 1e3)),
        gradient_bytes: params * WORD as u64,
        precision: c.precision,
    }
}

/// Whether a replica's buffers fit in a GPU's free memory, leaving [`LIBRARY_RESERVE_BYTES`].
pub fn check_memory(
    m: &Model,
    steps: usize,
    free: u64,
    total: u64,
    gpu: &str,
) -> Result<(), HwError> {
    let need = m.memory_bytes(steps);
    if need.saturating_add(LIBRARY_RESERVE_BYTES) <= free {
        return Ok(());
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let p = (m.params() * WORD) as u64;
    Err(HwError::Unavailable {
        what: format!("memory for the training run on {gpu}"),
        detail: format!(
            "the configuration (layers {:?}, batch {} per GPU) needs {:.2} GiB (parameters and \
             gradients {:.2} GiB, activations and the rest {:.2} GiB) plus {:.1} GiB for cuBLAS \
             and NCCL, and {:.2} GiB of {:.2} GiB are free; lower checks.training.batch or the \
             layer widths, or free the GPU",
            m.layers,
            m.local_batch,
            gib(need),
            gib(2 * p),
            gib(need - 2 * p),
            gib(LIBRARY_RESERVE_BYTES),
            gib(free),
            gib(total),
        ),
    })
}

pub mod sharded;

#[cfg(test)]
mod tests;
