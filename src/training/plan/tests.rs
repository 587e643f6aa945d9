//! The plan executed on an emulated device: host memory, each kernel written again in Rust from
//! its CUDA source, cuBLAS's column-major SGEMM/SGEMV as plain loops, NCCL's all-reduce as a sum.
//! bf16 buffers hold one bf16 bit pattern per word; a GEMM reading them widens each operand to
//! fp32 (exact) and sums the products in fp32, as `cublasGemmEx` with `CUBLAS_COMPUTE_32F` does
//! (in its own order).

use super::*;
use crate::training::kernels;
use crate::training::reference as r;
use std::collections::HashMap;

const NAN: u32 = 0x7fc0_0000;
const NAN_BF16: u32 = 0x7fc0;

/// What the emulation gets wrong on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Faults {
    /// One initial weight of one replica is one ulp off.
    init_ulp: Option<usize>,
    /// The all-reduce leaves this replica's gradients as they were.
    skip_reduce_on: Option<usize>,
    /// The group all-reduces of this kind leave this rank's values as they were (the other
    /// ranks of its group still get the sum, its own values included).
    skip_group_reduce: Option<(Group, usize)>,
}

struct Emu {
    mem: Vec<HashMap<Buf, Vec<u32>>>,
    faults: Faults,
    recorded: Vec<std::collections::HashSet<EvId>>,
    all_reduces: usize,
    /// Group all-reduces issued (one per group).
    group_reduces: usize,
}

impl Emu {
    fn new(m: &Model, steps: usize) -> Emu {
        Emu::with(m, steps, Faults::default())
    }

    fn with(m: &Model, steps: usize, faults: Faults) -> Emu {
        Emu::of_buffers(m.buffers(steps), m.replicas, faults)
    }

    /// `ranks` devices with the buffers `buffers` each.
    fn of_buffers(buffers: Vec<(Buf, usize)>, ranks: usize, faults: Faults) -> Emu {
        // Fresh memory holds NaNs: reading a word nothing wrote poisons the losses.
        let bufs: HashMap<Buf, Vec<u32>> = buffers
            .into_iter()
            .map(|(b, n)| {
                let nan = match b.elem() {
                    Elem::Word => NAN,
                    Elem::Bf16 => NAN_BF16,
                };
                (b, vec![nan; n])
            })
            .collect();
        Emu {
            mem: vec![bufs; ranks],
            faults,
            recorded: vec![Default::default(); ranks],
            all_reduces: 0,
            group_reduces: 0,
        }
    }

    fn get(&self, r: usize, p: Ptr) -> &[u32] {
        &self.mem[r][&p.buf][p.offset..]
    }

    fn getf(&self, r: usize, p: Ptr) -> Vec<f32> {
        let words = self.get(r, p).iter();
        match p.buf.elem() {
            Elem::Word => words.map(|w| f32::from_bits(*w)).collect(),
            Elem::Bf16 => words.map(|w| r::bf16_to_f32(*w as u16)).collect(),
        }
    }

    fn set(&mut self, r: usize, p: Ptr, i: usize, w: u32) {
        self.mem[r].get_mut(&p.buf).unwrap()[p.offset + i] = w;
    }

    fn setf(&mut self, r: usize, p: Ptr, i: usize, v: f32) {
        self.set(r, p, i, v.to_bits());
    }

    fn kernel(&mut self, rep: usize, l: &Launch) {
        if let Err(why) = launch_shape_error(l) {
            panic!("{}: {why} ({l:?})", l.kernel);
        }
        let a = &l.args;
        let p = |i: usize| match a[i] {
            Arg::Ptr(p) => p,
            other => panic!("{}: argument {i} is {other:?}", l.kernel),
        };
        let u = |i: usize| match a[i] {
            Arg::U64(v) => v as usize,
            Arg::U32(v) => v as usize,
            Arg::I32(v) => v as usize,
            other => panic!("{}: argument {i} is {other:?}", l.kernel),
        };
        let f = |i: usize| match a[i] {
            Arg::F32(v) => v,
            other => panic!("{}: argument {i} is {other:?}", l.kernel),
        };
        match l.kernel {
            "nc_gen_features" => {
                let (seed, step, off, rows, d) = (u(1) as u64, u(2) as u64, u(3), u(4), u(5));
                for i in 0..rows * d {
                    let v = r::sample_feature(seed, step, (off + i / d) as u64, (i % d) as u64);
                    self.setf(rep, p(0), i, v);
                }
            }
            "nc_gen_teacher" => {
                let (seed, classes, d) = (u(1) as u64, u(2), u(3));
                for i in 0..classes * d {
                    let w = r::teacher_weight(seed, (i / d) as u64, (i % d) as u64);
                    self.set(rep, p(0), i, w as u32);
                }
            }
            "nc_gen_labels" => {
                let (rows, d, classes) = (u(3), u(4), u(5));
                let x = self.getf(rep, p(1));
                let w: Vec<i32> = self.get(rep, p(2)).iter().map(|v| *v as i32).collect();
                for row in 0..rows {
                    let mut best = (0u32, i64::MIN);
                    for c in 0..classes {
                        let mut score = 0i64;
                        for k in 0..d {
                            let int = (x[row * d + k] * 8_388_608.0) as i32;
                            score += int as i64 * w[c * d + k] as i64;
                        }
                        if score > best.1 {
                            best = (c as u32, score);
                        }
                    }
                    self.set(rep, p(0), row, best.0);
                }
            }
            "nc_init_weights" => {
                let (seed, layer, count, fan_in) = (u(1) as u64, u(2) as u64, u(3), u(4));
                for i in 0..count {
                    let mut v = r::init_param(seed, layer, i as u64, fan_in);
                    if self.faults.init_ulp == Some(i) && rep == 0 && layer == 0 {
                        v = f32::from_bits(v.to_bits() + 1);
                    }
                    self.setf(rep, p(0), i, v);
                }
            }
            "nc_init_weight_block" => {
                let (seed, layer, rows, cols) = (u(1) as u64, u(2) as u64, u(3), u(4));
                let (first, ld, fan_in) = (u(5), u(6), u(7));
                for i in 0..rows * cols {
                    let index = first + (i / cols) * ld + i % cols;
                    let mut v = r::init_param(seed, layer, index as u64, fan_in);
                    if self.faults.init_ulp == Some(i) && rep == 0 && layer == 0 {
                        v = f32::from_bits(v.to_bits() + 1);
                    }
                    self.setf(rep, p(0), i, v);
                }
            }
            "nc_fill" => {
                for i in 0..u(1) {
                    self.setf(rep, p(0), i, f(2));
                }
            }
            "nc_bias_act_fwd" => {
                let (rows, cols, relu) = (u(2), u(3), u(4) != 0);
                let (y, b) = (self.getf(rep, p(0)), self.getf(rep, p(1)));
                for i in 0..rows * cols {
                    let v = y[i] + b[i % cols];
                    // `v > 0 ? v : 0` as in C: NaN becomes 0.
                    let v = if !relu || v > 0.0 { v } else { 0.0 };
                    self.setf(rep, p(0), i, v);
                }
            }
            "nc_relu_bwd" => {
                let (dx, h) = (self.getf(rep, p(0)), self.getf(rep, p(1)));
                for i in 0..u(2) {
                    self.setf(rep, p(0), i, if h[i] > 0.0 { dx[i] } else { 0.0 });
                }
            }
            "nc_softmax_xent" => {
                let (rows, classes, scale) = (u(4), u(5), f(6));
                let z = self.getf(rep, p(0));
                let labels = self.get(rep, p(1)).to_vec();
                for row in 0..rows {
                    let zr = &z[row * classes..(row + 1) * classes];
                    let label = labels[row] as usize;
                    let m = zr.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let e: Vec<f32> = zr.iter().map(|v| (v - m).exp()).collect();
                    let mut s = 0.0f32;
                    for v in &e {
                        s += v;
                    }
                    for (j, v) in e.iter().enumerate() {
                        let t = if j == label { 1.0 } else { 0.0 };
                        self.setf(rep, p(3), row * classes + j, (v / s - t) * scale);
                    }
                    self.setf(rep, p(2), row, s.ln() - (zr[label] - m));
                }
            }
            "nc_sum_serial" => {
                let x = self.getf(rep, p(0));
                let mut s = 0.0f32;
                for v in &x[..u(1)] {
                    s += v;
                }
                self.setf(rep, p(2), 0, s);
            }
            "nc_to_bf16" => {
                assert_eq!(p(1).buf.elem(), Elem::Bf16, "nc_to_bf16 into {:?}", p(1));
                let x = self.getf(rep, p(0));
                for (i, v) in x[..u(2)].iter().enumerate() {
                    self.set(rep, p(1), i, u32::from(r::bf16_bits(*v)));
                }
            }
            "nc_sgd" => {
                let (pp, g, lr) = (self.getf(rep, p(0)), self.getf(rep, p(1)), f(3));
                for i in 0..u(2) {
                    self.setf(rep, p(0), i, pp[i] - lr * g[i]);
                }
            }
            other => panic!("the emulation has no kernel {other}"),
        }
    }

    fn gemm(&mut self, rep: usize, g: &Gemm) {
        if let Some(why) = gemm_invalid(g) {
            panic!("cuBLAS would refuse {g:?}: {why}");
        }
        // cublasSgemm or cublasGemmEx(bf16, bf16 -> fp32): both operands of one type, fp32 out.
        assert_eq!(g.b.buf.elem(), g.operands(), "{g:?}");
        assert_eq!(g.c.buf.elem(), Elem::Word, "{g:?}");
        let (a, b) = (self.getf(rep, g.a), self.getf(rep, g.b));
        let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
        let (lda, ldb) = (g.lda as usize, g.ldb as usize);
        for j in 0..n {
            for i in 0..m {
                let mut s = 0.0f32;
                for q in 0..k {
                    let av = if g.transa {
                        a[q + i * lda]
                    } else {
                        a[i + q * lda]
                    };
                    let bv = if g.transb {
                        b[j + q * ldb]
                    } else {
                        b[q + j * ldb]
                    };
                    s += av * bv;
                }
                self.setf(rep, g.c, i + j * g.ldc as usize, s);
            }
        }
    }

    fn gemv(&mut self, rep: usize, g: &Gemv) {
        if let Some(why) = gemv_invalid(g) {
            panic!("cuBLAS would refuse {g:?}: {why}");
        }
        let (a, x) = (self.getf(rep, g.a), self.getf(rep, g.x));
        for i in 0..g.m as usize {
            let mut s = 0.0f32;
            for q in 0..g.n as usize {
                s += a[i + q * g.lda as usize] * x[q];
            }
            self.setf(rep, g.y, i, s);
        }
    }
}

/// Why `cublasSgemm`/`cublasGemmEx` would return `CUBLAS_STATUS_INVALID_VALUE` for `g` (cuBLAS's
/// documented checks: no negative size, and each leading dimension at least the rows of the
/// matrix as stored, column-major), or `None`. The emulation loops would silently accept them.
fn gemm_invalid(g: &Gemm) -> Option<&'static str> {
    let rows_a = if g.transa { g.k } else { g.m };
    let rows_b = if g.transb { g.n } else { g.k };
    if g.m < 0 || g.n < 0 || g.k < 0 {
        Some("negative size")
    } else if g.lda < rows_a.max(1) {
        Some("lda below the rows of A as stored")
    } else if g.ldb < rows_b.max(1) {
        Some("ldb below the rows of B as stored")
    } else if g.ldc < g.m.max(1) {
        Some("ldc below m")
    } else {
        None
    }
}

/// The same for `cublasSgemv` (no transpose, unit strides).
fn gemv_invalid(g: &Gemv) -> Option<&'static str> {
    if g.m < 0 || g.n < 0 {
        Some("negative size")
    } else if g.lda < g.m.max(1) {
        Some("lda below m")
    } else {
        None
    }
}

/// Whether the launch is one the GPU runs as the emulation assumes: a legal 1-D shape, and for
/// the kernels that are not grid-stride loops, enough threads for every row (the emulation
/// ignores the grid; on the GPU rows past the last thread would keep stale values).
fn launch_shape_error(l: &Launch) -> Result<(), String> {
    if !(1..=1024).contains(&l.block) || !(1..=i32::MAX as u32).contains(&l.grid) {
        return Err(format!(
            "grid {} x block {} is not launchable",
            l.grid, l.block
        ));
    }
    let threads = l.grid as u64 * l.block as u64;
    let rows = |i: usize| match l.args.get(i) {
        Some(Arg::U32(v)) => *v as u64,
        other => panic!("{}: argument {i} is {other:?}", l.kernel),
    };
    match l.kernel {
        // One warp per row: whole warps, and a warp for each row.
        "nc_gen_labels" if l.block % 32 != 0 || threads / 32 < rows(3) => Err(format!(
            "{threads} threads in blocks of {} for {} rows of one warp each",
            l.block,
            rows(3)
        )),
        // One thread per row.
        "nc_softmax_xent" if threads < rows(4) => {
            Err(format!("{threads} threads for {} rows", rows(4)))
        }
        _ => Ok(()),
    }
}

impl Device for Emu {
    fn exec(&mut self, rep: usize, op: &Op) -> Result<(), HwError> {
        match op {
            Op::Launch(l) => self.kernel(rep, l),
            Op::Gemm(g) => self.gemm(rep, g),
            Op::Gemv(g) => self.gemv(rep, g),
            Op::Record(_, ev) => {
                self.recorded[rep].insert(*ev);
            }
            Op::Wait(_, ev) => assert!(
                self.recorded[rep].contains(ev),
                "waits for {ev:?}, never recorded"
            ),
            Op::AllReduce(_) | Op::GroupAllReduce(_) => panic!("all-reduce through exec"),
        }
        Ok(())
    }

    fn all_reduce(&mut self, b: &Bucket) -> Result<(), HwError> {
        self.all_reduces += 1;
        let p = Ptr::at(Buf::Grads, b.offset);
        let mut sum = vec![0f32; b.len];
        for rep in 0..self.mem.len() {
            for (s, v) in sum.iter_mut().zip(self.getf(rep, p)) {
                *s += v;
            }
        }
        for rep in 0..self.mem.len() {
            if self.faults.skip_reduce_on == Some(rep) {
                continue;
            }
            for (i, v) in sum.iter().enumerate() {
                self.setf(rep, p, i, *v);
            }
        }
        Ok(())
    }

    /// The sum in rank order from the first rank's value, as `reference::sharded::group_sum`.
    fn group_all_reduce(&mut self, ranks: &[usize], g: &GroupReduce) -> Result<(), HwError> {
        self.group_reduces += 1;
        let mut sum = self.getf(ranks[0], g.at)[..g.len].to_vec();
        for &rep in &ranks[1..] {
            for (s, v) in sum.iter_mut().zip(self.getf(rep, g.at)) {
                *s += v;
            }
        }
        for &rep in ranks {
            if self.faults.skip_group_reduce == Some((g.group, rep)) {
                continue;
            }
            for (i, v) in sum.iter().enumerate() {
                self.setf(rep, g.at, i, *v);
            }
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), HwError> {
        Ok(())
    }

    fn read(&mut self, rep: usize, buf: Buf, len: usize) -> Result<Vec<u32>, HwError> {
        Ok(self.mem[rep][&buf][..len].to_vec())
    }

    fn elapsed_ms(&mut self, _: usize, _: EvId, _: EvId) -> Result<f64, HwError> {
        Ok(1.0)
    }
}

fn model(layers: &[usize], batch: usize, replicas: usize) -> Model {
    Model {
        layers: layers.to_vec(),
        local_batch: batch,
        replicas,
        lr: 0.5,
        seed: 1,
        math: Math::Fp32,
    }
}

fn anchor(replicas: usize) -> Model {
    Model {
        lr: 0.05,
        seed: 0,
        ..model(&[1024, 4096, 4096, 10], 8192, replicas)
    }
}

fn opts(steps: usize) -> TrainOpts {
    TrainOpts {
        steps,
        warmup: warmup_steps(steps),
        verify_inputs: true,
    }
}

#[test]
fn tensors_are_flat_in_backward_order() {
    let m = anchor(8);
    let t = m.tensors();
    let names: Vec<String> = t.iter().map(Tensor::name).collect();
    assert_eq!(names, ["b_2", "W_2", "b_1", "W_1", "b_0", "W_0"]);
    let lens: Vec<usize> = t.iter().map(|t| t.len).collect();
    assert_eq!(lens, [10, 40_960, 4096, 16_777_216, 4096, 4_194_304]);
    // Packed end to end, except that each tensor starts on a 256-byte boundary (cuBLAS and
    // NCCL use 16-byte vector loads only on aligned pointers).
    let mut at = 0usize;
    for x in &t {
        assert_eq!(x.offset, at.next_multiple_of(TENSOR_ALIGN), "{}", x.name());
        assert_eq!((x.offset * WORD) % 256, 0);
        at = x.offset + x.len;
    }
    assert_eq!(at, m.flat_len());
    let offsets: Vec<usize> = t.iter().map(|t| t.offset).collect();
    assert_eq!(offsets, [0, 64, 41_024, 45_120, 16_822_336, 16_826_432]);
    assert_eq!(m.flat_len(), 21_020_736);
    assert_eq!(m.params(), 21_020_682);
    assert_eq!(m.gradient_bytes(), 84_082_728);
    for x in &t {
        assert_eq!(m.tensor(x.layer, x.bias), *x);
    }
}

#[test]
fn buckets_follow_backward_order_and_the_cap() {
    let m = anchor(8);
    let b = m.buckets();
    // 25 MiB: the first bucket closes with W_1 (the last layer's tensors, then layer 1's), the
    // second takes layer 0's.
    assert_eq!(b.len(), 2);
    assert_eq!((b[0].tensors.clone(), b[1].tensors.clone()), (0..4, 4..6));
    // Each spans its tensors and the alignment gaps between them (the gaps are zeros).
    let t = m.tensors();
    assert_eq!(b[0].len, t[3].offset + t[3].len);
    assert_eq!((b[1].offset, b[1].len), (t[4].offset, 4096 + 4_194_304));
    assert_eq!(b[0].bytes(), 4 * (64 + 40_960 + 4096 + 16_777_216));
    assert_eq!(b[1].bytes(), 4 * (4096 + 4_194_304));
    assert_eq!(b[0].offset, 0);
    assert_eq!(b[1].offset, b[0].len.next_multiple_of(TENSOR_ALIGN));
    assert_eq!(
        b.iter().map(Bucket::bytes).sum::<u64>(),
        (WORD * m.flat_len()) as u64
    );
    // One replica: nothing to exchange.
    assert!(anchor(1).buckets().is_empty());
    // A tiny cap gives a bucket per tensor; a huge one a single bucket.
    let each = plan_buckets(&t, 1);
    assert_eq!(each.len(), 6);
    assert!(each
        .iter()
        .zip(&t)
        .all(|(b, t)| b.len == t.len && b.offset == t.offset));
    let one = plan_buckets(&t, usize::MAX);
    assert_eq!(one.len(), 1);
    assert_eq!((one[0].offset, one[0].len), (0, m.flat_len()));
    // Closing as soon as the cap is reached: 40 KiB of W_2 closes the first at 40 KiB.
    let small = plan_buckets(&t, 40 << 10);
    assert_eq!(small[0].tensors, 0..2);
    assert!(plan_buckets(&[], 1).is_empty());
}

fn position(ops: &[Op], want: &Op) -> usize {
    ops.iter()
        .position(|o| o == want)
        .unwrap_or_else(|| panic!("{want:?} missing"))
}

#[test]
fn each_bucket_starts_right_after_its_last_gradient_and_sgd_waits_for_all() {
    let m = anchor(4);
    let buckets = m.buckets();
    let ops = step_ops(&m, &buckets, 7, 2);
    let ev = |kind| EvId { step: 7, kind };
    // Bucket 0 ends with W_1: its dW GEMM is immediately followed by the hand-over.
    let w1 = m.tensor(1, false);
    let dw1 = ops
        .iter()
        .position(|o| matches!(o, Op::Gemm(g) if g.c == Ptr::at(Buf::Grads, w1.offset)))
        .unwrap();
    assert_eq!(
        ops[dw1 + 1],
        Op::Record(Stream::Compute, ev(EvKind::Ready(0)))
    );
    assert_eq!(ops[dw1 + 2], Op::Wait(Stream::Comm, ev(EvKind::Ready(0))));
    assert_eq!(
        ops[dw1 + 3],
        Op::Record(Stream::Comm, ev(EvKind::CommStart(0)))
    );
    assert_eq!(ops[dw1 + 4], Op::AllReduce(0));
    assert_eq!(
        ops[dw1 + 5],
        Op::Record(Stream::Comm, ev(EvKind::CommEnd(0)))
    );
    // ... and the rest of the backward pass (dX_1, layer 0) is queued after it: overlap.
    let dx1 = ops
        .iter()
        .position(|o| matches!(o, Op::Gemm(g) if !g.transa && !g.transb && g.a == Ptr::at(Buf::Params, w1.offset)))
        .unwrap();
    assert!(dx1 > dw1 + 5);
    // The last bucket completes with W_0, the last gradient of the pass.
    let bwd = position(&ops, &Op::Record(Stream::Compute, ev(EvKind::BwdDone)));
    assert_eq!(
        ops[bwd - 1],
        Op::Record(Stream::Comm, ev(EvKind::CommEnd(1)))
    );
    assert_eq!(
        ops[bwd + 1],
        Op::Wait(Stream::Compute, ev(EvKind::CommEnd(1)))
    );
    assert_eq!(
        ops[bwd + 2],
        Op::Record(Stream::Compute, ev(EvKind::Waited))
    );
    assert!(matches!(&ops[bwd + 3], Op::Launch(l) if l.kernel == "nc_sgd"));
    assert_eq!(
        ops.last(),
        Some(&Op::Record(Stream::Compute, ev(EvKind::StepEnd)))
    );
    assert_eq!(ops[0], Op::Record(Stream::Compute, ev(EvKind::StepStart)));
    // Every wait names an event recorded before it; every event is recorded once.
    let mut seen = std::collections::HashSet::new();
    for o in &ops {
        match o {
            Op::Record(_, e) => assert!(seen.insert(*e), "{e:?} recorded twice"),
            Op::Wait(_, e) => assert!(seen.contains(e), "{e:?} waited for before recorded"),
            _ => {}
        }
    }
    assert_eq!(
        ops.iter().filter(|o| matches!(o, Op::AllReduce(_))).count(),
        2
    );
    // Replicas differ only in the samples they generate.
    let other = step_ops(&m, &buckets, 7, 0);
    let diff: Vec<usize> = (0..ops.len()).filter(|&i| ops[i] != other[i]).collect();
    assert_eq!(diff, [1]);
    assert!(
        matches!(&ops[1], Op::Launch(l) if l.kernel == "nc_gen_features" && l.args[3] == Arg::U64(2 * 8192))
    );
    // One replica: no NCCL, no waiting.
    let single = step_ops(&anchor(1), &[], 0, 0);
    assert!(!single
        .iter()
        .any(|o| matches!(o, Op::AllReduce(_) | Op::Wait(..))));
}

/// The bytes of what a pointer parameter of the CUDA source points to (`const float* x` -> 4).
fn pointee_bytes(param: &str) -> usize {
    let ty = param.split('*').next().unwrap().trim();
    match ty.strip_prefix("const ").unwrap_or(ty).trim() {
        "float" | "uint" | "int" => 4,
        "unsigned short" => 2,
        "ull" => 8,
        other => panic!("unknown pointee type: {other}"),
    }
}

/// The C parameter types of each kernel in the CUDA source, with each pointer's pointee size.
fn declared_params() -> HashMap<String, Vec<(ArgKind, Option<usize>)>> {
    let src = kernels::SOURCE;
    let mut out = HashMap::new();
    for (i, m) in src.match_indices("extern \"C\" __global__ void ") {
        let rest = &src[i + m.len()..];
        let open = rest.find('(').unwrap();
        let close = rest.find(')').unwrap();
        let kinds = rest[open + 1..close]
            .split(',')
            .map(|p| {
                let p = p.trim();
                if p.contains('*') {
                    (ArgKind::Ptr, Some(pointee_bytes(p)))
                } else if p.starts_with("ull ") {
                    (ArgKind::U64, None)
                } else if p.starts_with("uint ") {
                    (ArgKind::U32, None)
                } else if p.starts_with("int ") {
                    (ArgKind::I32, None)
                } else if p.starts_with("float ") {
                    (ArgKind::F32, None)
                } else {
                    panic!("unknown parameter type: {p}")
                }
            })
            .collect();
        out.insert(rest[..open].to_string(), kinds);
    }
    out
}

#[test]
fn every_launch_matches_its_kernels_declaration() {
    let declared = declared_params();
    assert_eq!(declared.len(), kernels::KERNEL_NAMES.len());
    let m = anchor(2);
    let mut ops = init_ops(&m);
    ops.extend(step_ops(&m, &m.buckets(), 3, 1));
    let bf16 = Model {
        math: Math::Bf16,
        ..anchor(2)
    };
    ops.extend(step_ops(&bf16, &bf16.buckets(), 3, 1));
    // The sharded plans' launches too (hybrid: both kinds of all-reduce, every split).
    let hybrid = crate::training::plan::sharded::Sharded::new(
        model(&[64, 128, 128, 10], 64, 2),
        crate::training::partition::Partition::Hybrid { tp: 2, dp: 2 },
    )
    .unwrap();
    ops.extend(hybrid.init_ops(3));
    ops.extend(hybrid.step_ops(&hybrid.buckets(), 3, 3));
    let mut used = std::collections::BTreeSet::new();
    for op in &ops {
        if let Op::Launch(l) = op {
            let params = &declared[l.kernel];
            let kinds: Vec<ArgKind> = l.args.iter().map(Arg::kind).collect();
            let want: Vec<ArgKind> = params.iter().map(|p| p.0).collect();
            assert_eq!(
                kinds, want,
                "{}: arguments do not match the CUDA declaration",
                l.kernel
            );
            // A pointer addresses a buffer of the element the kernel reads or writes through it
            // (`unsigned short*` a bf16 copy, `float*`/`uint*`/`int*` a word buffer): the GPU
            // would reinterpret the bytes where the emulation widens per buffer.
            for (i, (a, p)) in l.args.iter().zip(params).enumerate() {
                if let Arg::Ptr(ptr) = a {
                    assert_eq!(
                        Some(ptr.buf.elem().bytes()),
                        p.1,
                        "{}: argument {i} is {ptr:?}",
                        l.kernel
                    );
                }
            }
            launch_shape_error(l).unwrap_or_else(|e| panic!("{}: {e}", l.kernel));
            used.insert(l.kernel);
        }
    }
    let unused: Vec<&str> = kernels::KERNEL_NAMES
        .iter()
        .copied()
        .filter(|k| !used.contains(k))
        .collect();
    assert_eq!(unused, ["nc_scale", "nc_checksum"]);
}

#[test]
fn the_emulation_refuses_what_cublas_and_the_launch_would() {
    // The plan's three GEMMs and the SGEMV pass cuBLAS's argument checks, at any size.
    for (b, din, dout) in [(1, 1, 1), (256, 64, 128), (8192, 4096, 10), (3, 1, 7)] {
        let (w, x, y) = (
            Ptr::of(Buf::Params),
            Ptr::of(Buf::Act(0)),
            Ptr::of(Buf::Act(1)),
        );
        for g in [
            Gemm::forward(w, x, y, b, din, dout),
            Gemm::grad_input(w, y, x, b, din, dout),
            Gemm::grad_weight(x, y, w, b, din, dout),
        ] {
            assert_eq!(gemm_invalid(&g), None, "{g:?}");
        }
        let v = Gemv::bias_grad(y, Ptr::of(Buf::Ones), Ptr::of(Buf::Grads), b, dout);
        assert_eq!(gemv_invalid(&v), None, "{v:?}");
    }
    // The checks themselves: a leading dimension of the matrix as used instead of as stored.
    let f = Gemm::forward(
        Ptr::of(Buf::Params),
        Ptr::of(Buf::Act(0)),
        Ptr::of(Buf::Act(1)),
        8,
        16,
        4,
    );
    assert!(gemm_invalid(&Gemm { lda: 4, ..f }).is_some());
    assert!(gemm_invalid(&Gemm { ldb: 8, ..f }).is_some());
    assert!(gemm_invalid(&Gemm { ldc: 3, ..f }).is_some());
    assert!(gemm_invalid(&Gemm { k: -1, ..f }).is_some());
    let v = Gemv::bias_grad(
        Ptr::of(Buf::Delta(0)),
        Ptr::of(Buf::Ones),
        Ptr::of(Buf::Grads),
        8,
        4,
    );
    assert!(gemv_invalid(&Gemv { lda: 3, ..v }).is_some());
    // Launches: rows past the last warp or thread, or a block of part of a warp, are refused.
    let labels = |rows| {
        Launch::gen_labels(
            Ptr::of(Buf::Labels),
            Ptr::of(Buf::Act(0)),
            Ptr::of(Buf::Teacher),
            rows,
            64,
            10,
        )
    };
    assert!(launch_shape_error(&labels(8193)).is_ok());
    assert!(launch_shape_error(&Launch {
        grid: 1024,
        ..labels(8193)
    })
    .is_err());
    assert!(launch_shape_error(&Launch {
        block: 100,
        ..labels(8)
    })
    .is_err());
    let sm = Launch::softmax_xent(
        Ptr::of(Buf::Act(3)),
        Ptr::of(Buf::Labels),
        Ptr::of(Buf::RowLoss),
        Ptr::of(Buf::Delta(0)),
        129,
        10,
        1.0,
    );
    assert!(launch_shape_error(&sm).is_ok());
    assert!(launch_shape_error(&Launch {
        grid: 1,
        ..sm.clone()
    })
    .is_err());
    assert!(launch_shape_error(&Launch { block: 2048, ..sm }).is_err());
    // Grid-stride kernels take any grid.
    let fill = Launch::fill(Ptr::of(Buf::Params), 1 << 30, 0.0);
    assert!(launch_shape_error(&Launch { grid: 1, ..fill }).is_ok());
}

#[test]
fn launch_grids_cover_their_work() {
    assert_eq!(stride_grid(0), 1);
    assert_eq!(stride_grid(256), 1);
    assert_eq!(stride_grid(257), 2);
    assert_eq!(stride_grid(1 << 40), 65535);
    let l = Launch::gen_labels(
        Ptr::of(Buf::Labels),
        Ptr::of(Buf::Act(0)),
        Ptr::of(Buf::Teacher),
        8193,
        64,
        10,
    );
    // One warp per row: 8 rows per block of 256.
    assert_eq!((l.grid, l.block), (1025, 256));
    let s = Launch::softmax_xent(
        Ptr::of(Buf::Act(3)),
        Ptr::of(Buf::Labels),
        Ptr::of(Buf::RowLoss),
        Ptr::of(Buf::Delta(0)),
        129,
        10,
        1.0,
    );
    assert_eq!((s.grid, s.block), (2, 128));
    let f = Launch::bias_act_fwd(Ptr::of(Buf::Act(1)), Ptr::of(Buf::Params), 8192, 4096, true);
    assert_eq!((f.grid, f.block), (65535, 256));
    assert_eq!(f.args[4], Arg::I32(1));
}

#[test]
fn flops_and_memory_of_the_anchor_configuration() {
    let m = anchor(1);
    // 2·B·(Σ in·out) forward, the same for dW, and 2·B·(Σ_{l>0} in·out) for dX.
    let mac: f64 = (1024 * 4096 + 4096 * 4096 + 4096 * 10) as f64;
    let dx: f64 = (4096 * 4096 + 4096 * 10) as f64;
    let expect = 2.0 * 8192.0 * (2.0 * mac + dx);
    assert_eq!(m.step_flops(), expect);
    assert_eq!(m.step_flops(), 964_085_940_224.0);
    // ... which is what the step asks cuBLAS for (GEMMs only).
    let gemm: f64 = step_ops(&m, &[], 0, 0)
        .iter()
        .filter_map(|o| match o {
            Op::Gemm(g) => Some(g.flops()),
            _ => None,
        })
        .sum();
    assert_eq!(gemm, expect);
    // Memory: parameters and gradients, activations, two gradient buffers of the widest layer.
    let words = 2 * 21_020_736
        + 8192 * (1024 + 4096 + 4096 + 10)
        + 2 * 8192 * 4096
        + 3 * 8192
        + 1024 * 10
        + 30;
    assert_eq!(m.memory_bytes(30), 4 * words as u64);
    assert!(m.memory_bytes(30) < 1 << 30, "{}", m.memory_bytes(30));
    assert!(check_memory(&m, 30, 140 << 30, 141 << 30, "GPU 0").is_ok());
    let e = check_memory(
        &m,
        30,
        1 << 30,
        80 << 30,
        "GPU 3 (CUDA device 3, 0000:3b:00.0)",
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("memory for the training run on GPU 3"),
        "{msg}"
    );
    assert!(
        msg.contains("needs 0.69 GiB") && msg.contains("1.00 GiB of 80.00 GiB are free"),
        "{msg}"
    );
    // A per-GPU batch that cannot fit an 80 GB GPU.
    let huge = Model {
        local_batch: 1 << 22,
        ..anchor(1)
    };
    assert!(check_memory(&huge, 30, 79 << 30, 80 << 30, "GPU 0").is_err());
}

#[test]
fn models_from_the_suite() {
    let mut c: crate::suite::TrainingCheck = toml::from_str("").unwrap();
    let m = Model::main(&c, 8).unwrap();
    assert_eq!(
        (m.layers.clone(), m.local_batch, m.replicas, m.math),
        (vec![1024, 4096, 4096, 10], 8192, 8, Math::Fp32)
    );
    assert_eq!(m.global_batch(), 65536);
    let g = Model::golden(&c).unwrap();
    assert_eq!(
        (g.layers.clone(), g.local_batch, g.replicas, g.math),
        (vec![64, 128, 128, 10], 256, 1, Math::Pedantic)
    );
    assert_eq!(g.mlp_config(10), crate::training::golden_config(&c));
    c.precision = Precision::Tf32;
    assert_eq!(Model::main(&c, 1).unwrap().math, Math::Tf32);
    c.precision = Precision::Bf16;
    assert_eq!(Model::main(&c, 1).unwrap().math, Math::Bf16);
    // The golden configuration checks arithmetic, whatever the run's precision: plain fp32.
    assert_eq!(Model::golden(&c).unwrap().math, Math::Pedantic);
    c.precision = Precision::Fp32;
    c.layers = vec![1 << 31, 10];
    assert!(matches!(Model::main(&c, 1), Err(HwError::NotSupported(_))));
    c.layers = vec![64, 0, 10];
    assert!(Model::main(&c, 1).is_err());
    // Each size fits an int, but the memory would not fit a u64: refused, not wrapped.
    let big = (1usize << 31) - 1;
    c.layers = vec![big, 10];
    c.batch = big;
    match Model::main(&c, 1) {
        Err(HwError::NotSupported(why)) => assert!(why.contains("words of memory"), "{why}"),
        other => panic!("{other:?}"),
    }
    c.layers = vec![big; 6];
    c.batch = 1;
    assert!(Model::main(&c, 1).is_err());
    // The anchor is far inside the limit.
    c.layers = vec![1024, 4096, 4096, 10];
    c.batch = 8192;
    assert!(Model::main(&c, 8).is_ok());
    assert_eq!(warmup_steps(30), 2);
    assert_eq!(warmup_steps(2), 1);
    assert_eq!(warmup_steps(1), 0);
}

#[test]
fn one_replica_reproduces_the_cpu_golden_run_bit_for_bit() {
    let m = Model {
        math: Math::Pedantic,
        ..model(&[64, 128, 128, 10], 256, 1)
    };
    let steps = 4;
    let mut emu = Emu::new(&m, steps);
    let out = train(&mut emu, &m, &opts(steps)).unwrap();
    let cpu = r::train(&m.mlp_config(steps), steps);
    assert_eq!(out.losses, cpu.losses);
    assert_eq!(out.replica_hashes, [r::params_hash(&cpu.params)]);
    assert_eq!(emu.all_reduces, 0);
    assert_eq!(out.times.step_ms, [1.0, 1.0]);
    assert_eq!(out.times.comm_ms, [0.0, 0.0]);
    assert_eq!(out.times.exposed_ms, [0.0, 0.0]);
}

/// Initialise and run `steps` steps of `m` on three emulated replicas, in buckets of at most
/// 100 bytes so that there are several; every bucket is all-reduced every step.
fn three_replicas_with_small_buckets(m: &Model, steps: usize) -> Emu {
    let mut emu = Emu::new(m, steps);
    let buckets = plan_buckets(&m.tensors(), 100);
    assert!(buckets.len() > 2);
    run_lockstep(&mut emu, &buckets, &vec![init_ops(m); 3]).unwrap();
    for step in 0..steps {
        let lists: Vec<Vec<Op>> = (0..3).map(|r| step_ops(m, &buckets, step, r)).collect();
        run_lockstep(&mut emu, &buckets, &lists).unwrap();
    }
    assert_eq!(emu.all_reduces, steps * buckets.len());
    emu
}

/// train() on the emulated device: every replica ends with the same hash, the losses follow the
/// CPU's fp32 golden trajectory within `rel_tol`, and they go down.
fn train_equal_replicas_on_golden(m: &Model, steps: usize, rel_tol: f32) -> Outcome {
    let mut emu = Emu::new(m, steps);
    let out = train(&mut emu, m, &opts(steps)).unwrap();
    assert!(out
        .replica_hashes
        .iter()
        .all(|h| *h == out.replica_hashes[0]));
    let golden = r::train(&m.mlp_config(steps), steps);
    r::compare_trajectory(&out.losses, &golden.losses, rel_tol, r::DEFAULT_ABS_TOL).unwrap();
    assert!(out.losses.last() < out.losses.first(), "{:?}", out.losses);
    out
}

/// `len` words of `buf` from each of the three replicas.
fn read_replicas(emu: &mut Emu, buf: Buf, len: usize) -> Vec<Vec<u32>> {
    (0..3).map(|r| emu.read(r, buf, len).unwrap()).collect()
}

#[test]
fn replicas_stay_identical_and_follow_the_golden_trajectory() {
    // Three layers so that both delta buffers and a dX of every kind are used; tiny buckets so
    // that there are several.
    let m = model(&[16, 24, 20, 4], 8, 3);
    let steps = 5;
    let mut emu = three_replicas_with_small_buckets(&m, steps);
    let flats = read_replicas(&mut emu, Buf::Params, m.flat_len());
    assert!(flats.windows(2).all(|w| w[0] == w[1]));
    // The alignment gaps were zeroed at the start (the emulation's memory starts as NaN) and
    // stay zero through the all-reduces and updates.
    let mut in_tensor = vec![false; m.flat_len()];
    for t in m.tensors() {
        in_tensor[t.offset..t.offset + t.len].fill(true);
    }
    let gaps: Vec<u32> = (0..m.flat_len())
        .filter(|&i| !in_tensor[i])
        .map(|i| flats[0][i])
        .collect();
    assert!(!gaps.is_empty() && gaps.iter().all(|&w| w == 0), "{gaps:?}");
    // Same parameters as the CPU's data-parallel run, up to summation order.
    let cpu = r::train_data_parallel(&m.mlp_config(steps), steps, 3).unwrap();
    let gpu = reference_order(&m, &to_f32(&flats[0]));
    for (g, c) in gpu.iter().flatten().zip(cpu.params.iter().flatten()) {
        assert!((g - c).abs() <= 1e-5 + 1e-4 * c.abs(), "{g} vs {c}");
    }

    // Through train(): the default buckets (one, at this size), equal hashes, golden losses.
    let out = train_equal_replicas_on_golden(&m, steps, r::DEFAULT_REL_TOL);
    assert_eq!(out.replica_hashes.len(), 3);
    assert_eq!(out.times.step_ms.len(), steps - WARMUP_STEPS);
    assert_eq!(out.times.comm_ms, vec![1.0; 3]);
}

#[test]
fn a_broken_all_reduce_shows_in_the_hashes() {
    let m = model(&[16, 24, 4], 8, 2);
    let mut emu = Emu::with(
        &m,
        3,
        Faults {
            skip_reduce_on: Some(1),
            ..Default::default()
        },
    );
    let out = train(&mut emu, &m, &opts(3)).unwrap();
    assert_ne!(out.replica_hashes[0], out.replica_hashes[1]);
}

#[test]
fn a_wrong_initial_weight_is_caught_before_training() {
    let m = model(&[16, 24, 4], 8, 1);
    let mut emu = Emu::with(
        &m,
        3,
        Faults {
            init_ulp: Some(5),
            ..Default::default()
        },
    );
    let e = train(&mut emu, &m, &opts(3)).unwrap_err().to_string();
    assert!(
        e.contains("1 of 384 values of the initial W_0 differ"),
        "{e}"
    );
    assert!(e.contains("first at element 5"), "{e}");
    // Without the check, training runs (and would only drift).
    let mut emu = Emu::with(
        &m,
        3,
        Faults {
            init_ulp: Some(5),
            ..Default::default()
        },
    );
    let o = TrainOpts {
        verify_inputs: false,
        ..opts(3)
    };
    assert!(train(&mut emu, &m, &o).is_ok());
}

#[test]
fn input_mismatches_are_described() {
    assert_eq!(mismatch(&[1, 2, 3], &[1, 2, 3]), None);
    assert_eq!(mismatch(&[1, 9, 3, 8], &[1, 2, 3, 4]), Some((1, 2)));
    assert_eq!(mismatch(&[1, 2], &[1, 2, 3]), Some((2, 1)));
    let e = input_mismatch(2, "the labels of step 0", &[4, 7], &[4, 6], false).to_string();
    assert!(
        e.contains("replica 2: 1 of 2 values of the labels of step 0"),
        "{e}"
    );
    assert!(e.contains("GPU 7, CPU 6"), "{e}");
}

/// Events of a fake device: what elapsed_ms answers per (replica, from, to).
struct Clock(HashMap<(usize, EvKind, EvKind), f64>);

impl Device for Clock {
    fn exec(&mut self, _: usize, _: &Op) -> Result<(), HwError> {
        Ok(())
    }
    fn all_reduce(&mut self, _: &Bucket) -> Result<(), HwError> {
        Ok(())
    }
    fn group_all_reduce(&mut self, _: &[usize], _: &GroupReduce) -> Result<(), HwError> {
        Ok(())
    }
    fn sync(&mut self) -> Result<(), HwError> {
        Ok(())
    }
    fn read(&mut self, _: usize, _: Buf, len: usize) -> Result<Vec<u32>, HwError> {
        Ok(vec![0; len])
    }
    fn elapsed_ms(&mut self, r: usize, from: EvId, to: EvId) -> Result<f64, HwError> {
        self.0
            .get(&(r, from.kind, to.kind))
            .map(|v| v + from.step as f64 * 100.0)
            .ok_or_else(|| internal(format!("no timing {r} {from:?} {to:?}")))
    }
}

#[test]
fn step_time_is_the_slowest_replica_comm_sums_buckets_exposed_is_the_wait() {
    use EvKind::*;
    let m = anchor(2);
    let buckets = m.buckets();
    let mut t = HashMap::new();
    // Replica 0: 20 ms step, buckets 3 + 1 ms, the compute stream waited 0.5 ms.
    t.insert((0, StepStart, StepEnd), 20.0);
    t.insert((0, CommStart(0), CommEnd(0)), 3.0);
    t.insert((0, CommStart(1), CommEnd(1)), 1.0);
    t.insert((0, BwdDone, Waited), 0.5);
    // Replica 1: faster step, slower all-reduce, waited longer.
    t.insert((1, StepStart, StepEnd), 19.0);
    t.insert((1, CommStart(0), CommEnd(0)), 3.5);
    t.insert((1, CommStart(1), CommEnd(1)), 1.0);
    t.insert((1, BwdDone, Waited), 0.75);
    let mut clock = Clock(t);
    let s = step_times(&mut clock, 2, &buckets, 2..4).unwrap();
    assert_eq!(s.step_ms, [220.0, 320.0]);
    // Per replica the buckets add up (each figure carries the fake's +100 per step).
    assert_eq!(
        s.comm_ms,
        [1.0 + 3.5 + 2.0 * 200.0 + 0.0, 1.0 + 3.5 + 2.0 * 300.0]
    );
    assert_eq!(s.exposed_ms, [200.75, 300.75]);
    // With one replica only the step time is read: no comm events exist.
    let mut t = HashMap::new();
    t.insert((0, StepStart, StepEnd), 20.0);
    let s = step_times(&mut Clock(t), 1, &[], 0..1).unwrap();
    assert_eq!(
        (s.step_ms, s.comm_ms, s.exposed_ms),
        (vec![20.0], vec![0.0], vec![0.0])
    );
    // A missing event is an error, not a zero.
    assert!(step_times(&mut Clock(HashMap::new()), 1, &[], 0..1).is_err());
}

#[test]
fn a_negative_wait_counts_as_none() {
    use EvKind::*;
    let m = anchor(2);
    let mut t = HashMap::new();
    for r in 0..2 {
        t.insert((r, StepStart, StepEnd), 20.0);
        t.insert((r, CommStart(0), CommEnd(0)), 1.0);
        t.insert((r, CommStart(1), CommEnd(1)), 1.0);
        t.insert((r, BwdDone, Waited), -0.01);
    }
    let s = step_times(&mut Clock(t), 2, &m.buckets(), 0..1).unwrap();
    assert_eq!(s.exposed_ms, [0.0]);
}

#[test]
fn the_training_run_record() {
    let c: crate::suite::TrainingCheck = toml::from_str("batch = 1000").unwrap();
    let out = |ms: Vec<f64>| Outcome {
        losses: vec![2.0, 1.5],
        times: StepTimes {
            step_ms: ms.clone(),
            comm_ms: vec![1.0; ms.len()],
            exposed_ms: vec![0.25; ms.len()],
        },
        replica_hashes: vec!["a".into(), "a".into()],
    };
    let golden = Outcome {
        losses: vec![2.5],
        ..out(vec![])
    };
    let main = out(vec![10.0, 12.0, 11.0]);
    let single = out(vec![9.0, 8.0, 10.0]);
    let run = training_run(&c, 2, &golden, &main, Some(&single));
    assert_eq!(run.losses, [2.0, 1.5]);
    assert_eq!(run.golden_node_losses, [2.5]);
    assert_eq!(run.step_ms, [10.0, 12.0, 11.0]);
    assert_eq!((run.batch_per_gpu, run.gpus), (1000, 2));
    // The one-GPU baseline: 1000 samples in the median 9 ms.
    assert_eq!(run.single_gpu_samples_per_s, Some(1000.0 / 0.009));
    assert_eq!(run.gradient_bytes, anchor(1).gradient_bytes());
    // One GPU: the run is its own baseline.
    let run = training_run(&c, 1, &golden, &main, None);
    assert_eq!(run.single_gpu_samples_per_s, Some(1000.0 / 0.011));
    let run = training_run(&c, 1, &golden, &out(vec![]), None);
    assert_eq!(run.single_gpu_samples_per_s, None);
}

#[test]
fn lockstep_refuses_lists_of_different_shapes() {
    let m = model(&[16, 24, 4], 8, 2);
    let mut emu = Emu::new(&m, 1);
    let a = init_ops(&m);
    let mut b = a.clone();
    b.pop();
    assert!(run_lockstep(&mut emu, &[], &[a.clone(), b]).is_err());
    assert!(run_lockstep(
        &mut emu,
        &[],
        &[vec![Op::AllReduce(0)], vec![Op::AllReduce(0)]]
    )
    .is_err());
    assert!(run_lockstep(&mut emu, &[], &[]).is_ok());
}

fn bf16(m: Model) -> Model {
    Model {
        math: Math::Bf16,
        ..m
    }
}

#[test]
fn bf16_plan_reproduces_the_cpu_bf16_reference_bit_for_bit() {
    // The golden configuration's shape, in mixed precision: every operand the emulated
    // cublasGemmEx reads was rounded by the emulated nc_to_bf16, as the CPU rounds it.
    let m = bf16(model(&[64, 128, 128, 10], 256, 1));
    let steps = 4;
    let mut emu = Emu::new(&m, steps);
    let out = train(&mut emu, &m, &opts(steps)).unwrap();
    let cpu = r::train_bf16(&m.mlp_config(steps), steps);
    assert_eq!(out.losses, cpu.losses);
    assert_eq!(out.replica_hashes, [r::params_hash(&cpu.params)]);
    // ... and that is not the fp32 run: the rounding really happens.
    let fp32 = r::train(&m.mlp_config(steps), steps);
    assert_ne!(out.losses, fp32.losses);
    r::compare_trajectory(
        &out.losses,
        &fp32.losses,
        r::BF16_REL_TOL,
        r::DEFAULT_ABS_TOL,
    )
    .unwrap();
}

#[test]
fn bf16_replicas_stay_identical_and_track_the_fp32_trajectory() {
    // As the fp32 test: three layers, three replicas, several buckets.
    let m = bf16(model(&[16, 24, 20, 4], 8, 3));
    let steps = 5;
    let mut emu = three_replicas_with_small_buckets(&m, steps);
    // The all-reduced gradients are fp32 and every replica applies the same sum to the same
    // fp32 master parameters: bit-identical replicas.
    let flats = read_replicas(&mut emu, Buf::Params, m.flat_len());
    assert!(flats.windows(2).all(|w| w[0] == w[1]));
    // ... and their bf16 copies too (made from those parameters at the start of the last step).
    let copies = read_replicas(&mut emu, Buf::ParamsBf16, m.flat_len());
    assert!(copies.windows(2).all(|w| w[0] == w[1]));
    assert!(copies[0].iter().all(|&w| w <= 0xffff && w != NAN_BF16));

    // Within the bf16 tolerance of the fp32 golden trajectory, and the loss goes down.
    train_equal_replicas_on_golden(&m, steps, r::BF16_REL_TOL);
    // A broken all-reduce still shows.
    let mut emu = Emu::with(
        &m,
        steps,
        Faults {
            skip_reduce_on: Some(2),
            ..Default::default()
        },
    );
    let bad = train(&mut emu, &m, &opts(steps)).unwrap();
    assert_ne!(bad.replica_hashes[0], bad.replica_hashes[2]);
}

#[test]
fn bf16_gemms_read_bf16_copies_made_before_them() {
    let m = bf16(anchor(2));
    let buckets = m.buckets();
    let ops = step_ops(&m, &buckets, 0, 1);
    // Where each bf16 buffer was last written, op by op.
    let mut written: HashMap<Buf, usize> = HashMap::new();
    let mut gemms = 0;
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Launch(l) if l.kernel == "nc_to_bf16" => {
                let (Arg::Ptr(x), Arg::Ptr(y), Arg::U64(n)) = (l.args[0], l.args[1], l.args[2])
                else {
                    panic!("{l:?}")
                };
                assert_eq!(x.buf.bf16_copy(), Some(y.buf), "{l:?}");
                assert_eq!((x.offset, y.offset), (0, 0));
                let size = m.buffers(1).into_iter().find(|b| b.0 == y.buf).unwrap().1;
                assert!(n as usize <= size, "{l:?}");
                written.insert(y.buf, i);
            }
            Op::Gemm(g) => {
                gemms += 1;
                assert_eq!(g.operands(), Elem::Bf16, "{g:?}");
                assert_eq!((g.b.buf.elem(), g.c.buf.elem()), (Elem::Bf16, Elem::Word));
                for p in [g.a, g.b] {
                    assert!(written.contains_key(&p.buf), "{p:?} read before it is made");
                }
            }
            Op::Launch(l) => {
                // Every other kernel works on fp32 buffers only.
                for a in &l.args {
                    if let Arg::Ptr(p) = a {
                        assert_eq!(p.buf.elem(), Elem::Word, "{}: {p:?}", l.kernel);
                    }
                }
            }
            Op::Gemv(g) => assert_eq!(
                (g.a.buf.elem(), g.x.buf.elem(), g.y.buf.elem()),
                (Elem::Word, Elem::Word, Elem::Word)
            ),
            _ => {}
        }
    }
    assert_eq!(gemms, 8);
    // Conversions: the parameters, the inputs of the three layers, the three dY.
    let converts = ops
        .iter()
        .filter(|o| matches!(o, Op::Launch(l) if l.kernel == "nc_to_bf16"))
        .count();
    assert_eq!(converts, 1 + 3 + 3);
    // The fp32 run is untouched: no conversion, no bf16 buffer, the same op list as before
    // bf16 existed (its shape is pinned by the other tests).
    let fp32 = anchor(2);
    let f = step_ops(&fp32, &buckets, 0, 1);
    assert!(!f
        .iter()
        .any(|o| matches!(o, Op::Launch(l) if l.kernel == "nc_to_bf16")));
    assert!(fp32.buffers(1).iter().all(|(b, _)| b.elem() == Elem::Word));
    assert_eq!(f.len() + converts, ops.len());
}

#[test]
fn bf16_memory_adds_half_size_copies() {
    let fp32 = anchor(1);
    let m = bf16(anchor(1));
    let extra = m.memory_bytes(30) - fp32.memory_bytes(30);
    // Parameters, activations below the logits, the two dY buffers: 2 bytes each.
    let elems = 21_020_736 + 8192 * (1024 + 4096 + 4096) + 2 * 8192 * 4096;
    assert_eq!(extra, 2 * elems as u64);
    assert!(check_memory(&m, 30, 140 << 30, 141 << 30, "GPU 0").is_ok());
    // Byte offsets into bf16 buffers are 2 per element.
    assert_eq!(Ptr::at(Buf::ParamsBf16, 64).byte_offset(), 128);
    assert_eq!(Ptr::at(Buf::Params, 64).byte_offset(), 256);
    assert_eq!(
        Ptr::at(Buf::Params, 64).bf16(),
        Ptr::at(Buf::ParamsBf16, 64)
    );
    assert_eq!(Ptr::of(Buf::Grads).bf16(), Ptr::of(Buf::Grads));
}

#[test]
fn bf16_is_refused_before_ampere_by_compute_capability() {
    let m = bf16(anchor(1));
    let gpu = "GPU 3 (CUDA device 3, 0000:3b:00.0)";
    for cc in [(7, 0), (7, 5), (6, 1)] {
        match check_arch(&m, cc, gpu) {
            Err(HwError::NotSupported(why)) => {
                let name = format!("compute capability {}.{} (sm_{}{})", cc.0, cc.1, cc.0, cc.1);
                assert!(why.contains(&name) && why.contains(gpu), "{why}");
                assert!(why.contains("8.0 (Ampere) or newer"), "{why}");
                assert!(why.contains("precision = \"fp32\""), "{why}");
            }
            other => panic!("{cc:?}: {other:?}"),
        }
    }
    for cc in [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)] {
        assert!(check_arch(&m, cc, gpu).is_ok(), "{cc:?}");
    }
    // fp32 and TF32 run on a V100.
    for math in [Math::Pedantic, Math::Fp32, Math::Tf32] {
        let m = Model { math, ..anchor(1) };
        assert!(check_arch(&m, (7, 0), gpu).is_ok());
    }
}

mod sharded;
