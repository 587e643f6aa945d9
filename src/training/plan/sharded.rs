//! The tensor-parallel and hybrid runs ([`Partition`]) as plans of GPU operations: one op list
//! per rank, executed side by side ([`run_ranks`]) like the data-parallel replicas' lists.
//!
//! # A rank's buffers
//!
//! The buffers of the data-parallel plan ([`Buf`]), sized for the rank's shards: the flat
//! parameters and gradients hold the rank's shard of each tensor in the same backward order and
//! alignment ([`Sharded::tensors`]); `Act(l + 1)` holds the output of layer `l` as the rank has
//! it (its column slice after a column-parallel layer, else the whole width); the two `Delta`
//! buffers the widest `dY` or `dX` the rank writes (a column-parallel layer's partial `dX` is
//! whole).
//!
//! # One step on rank `r` (group `g`, TP rank `t`)
//!
//! The data-parallel step ([`super::step_ops`]) with the shard's widths, plus:
//!
//! 1. the batch is group `g`'s samples (`nc_gen_features` at `g·Bl`), the same on every rank of
//!    the group;
//! 2. after the forward GEMM of a row-parallel layer, the partial output is all-reduced within
//!    the TP group ([`Group::Tensor`], on the compute stream: the bias, the ReLU and the next
//!    GEMM need the sum), then `nc_bias_act_fwd`;
//! 3. after the `dX` GEMM of a column-parallel layer (`l > 0`), the partial input gradient is
//!    all-reduced within the TP group, then `nc_relu_bwd`;
//! 4. with several groups, the gradients are all-reduced over the rank's data-parallel group
//!    ([`Group::Data`]) in buckets of the rank's own tensors, on the communication stream, with
//!    the events of the data-parallel plan (so [`super::step_times`] reads them alike).
//!
//! `nc_softmax_xent` scales `dZ` by `1/B` (`B = Bl·dp`), so the data-parallel sum is the mean
//! gradient; every rank of a group computes the same logits and loss sum. The step's loss is the
//! sum over groups of TP rank 0's loss sum, `/ B`. [`crate::training::reference::sharded`]
//! defines the same computation on the CPU, sum for sum, and the emulated device reproduces it
//! bit for bit.
//!
//! # Checks built in
//!
//! The ranks of a TP group must compute the same loss sums, the ranks holding the same shards
//! (one per group) must end with the same parameters, and the replicated tensors (row-parallel
//! biases, an odd last layer) must be the same on every rank: [`ShardedOutcome::consistency`].
//! A rank that skips or corrupts an all-reduce breaks one of the three.
//!
//! # On GPUs
//!
//! The CUDA device ([`crate::backend::cuda`]'s `GpuDevice`) makes one NCCL communicator set
//! per tensor-parallel group and one per data-parallel group (`ncclCommInitAll` over the
//! group's GPUs) before the first step, and runs each group all-reduce on the stream the plan
//! names, so both kinds are in flight at once. NCCL sums around its ring in an order of its
//! own, so a GPU run tracks the reference within the golden tolerance, not bit for bit; the
//! checks of [`ShardedOutcome::consistency`] are bit for bit all the same (NCCL gives every
//! rank of a group the same sum). Each tensor-parallel all-reduce sits between events of its
//! own ([`EvKind::TpStart`]), so the step's communication is measured, not inferred
//! ([`sharded_step_times`]). The bf16 run is not planned sharded.

use super::{data_ops, flat_tensors, Device};
use super::{
    internal, plan_buckets, rank_times, to_f32, Bucket, Buf, EvId, EvKind, Gemm, Gemv, Group,
    GroupReduce, Launch, Math, Model, Op, Ptr, StepTimes, Stream, Tensor, TrainOpts,
    BUCKET_CAP_BYTES,
};
use crate::error::HwError;
use crate::suite::CollectiveOp;
use crate::training::partition::{LayerShard, Partition, Split};
use crate::training::reference;

/// A sharded training run: the model, data and math of a [`Model`] and how the GPUs share it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sharded {
    base: Model,
    partition: Partition,
}

impl Sharded {
    /// `base` gives the layers, the samples per data-parallel group (`local_batch`), the
    /// learning rate, the seed and the math; its `replicas` must be the partition's `dp`.
    pub fn new(base: Model, partition: Partition) -> Result<Sharded, HwError> {
        let base = base.checked()?;
        let refuse = |why: String| {
            Err(HwError::NotSupported(format!(
                "training partition {partition:?}: {why}"
            )))
        };
        if let Err(e) = partition.check(&base.layers) {
            return refuse(e.to_string());
        }
        if base.replicas != partition.dp() {
            return refuse(format!(
                "the model has {} data-parallel replicas, the partition {} groups",
                base.replicas,
                partition.dp()
            ));
        }
        if base.math == Math::Bf16 {
            return refuse("bf16 is planned data-parallel only".into());
        }
        Ok(Sharded { base, partition })
    }

    /// The suite's golden configuration partitioned as `p`: its global batch split evenly over
    /// the groups, trained fp32 as the golden run is, so its losses track the CPU golden run's.
    pub fn golden(c: &crate::suite::TrainingCheck, p: Partition) -> Result<Sharded, HwError> {
        let g = Model::golden(c)?;
        if g.local_batch % p.dp() != 0 {
            return Err(HwError::NotSupported(format!(
                "the golden configuration's batch of {} does not split into {} equal groups",
                g.local_batch,
                p.dp()
            )));
        }
        let base = Model {
            local_batch: g.local_batch / p.dp(),
            replicas: p.dp(),
            ..g
        };
        Sharded::new(base, p).map_err(|e| match e {
            HwError::NotSupported(why) => {
                HwError::NotSupported(format!("the golden configuration: {why}"))
            }
            other => other,
        })
    }

    pub fn base(&self) -> &Model {
        &self.base
    }

    pub fn partition(&self) -> Partition {
        self.partition
    }

    /// GPUs of the run.
    pub fn ranks(&self) -> usize {
        self.partition.gpus()
    }

    fn depth(&self) -> usize {
        self.base.depth()
    }

    /// The shape of every rank's shard of layer `l` (rank 0's placement).
    pub fn shard(&self, l: usize) -> LayerShard {
        self.partition.shard(&self.base.layers, l, 0)
    }

    /// A rank's tensors in its flat buffers: the data-parallel layout ([`Model::tensors`]) of
    /// the shards.
    pub fn tensors(&self) -> Vec<Tensor> {
        let dims: Vec<(usize, usize)> = (0..self.depth())
            .map(|l| {
                let s = self.shard(l);
                (s.din, s.dout)
            })
            .collect();
        flat_tensors(&dims)
    }

    fn tensor(&self, layer: usize, bias: bool) -> Tensor {
        self.tensors()[2 * (self.depth() - 1 - layer) + usize::from(!bias)]
    }

    /// Words of a rank's flat parameter (and gradient) buffer.
    pub fn flat_len(&self) -> usize {
        self.tensors().last().map_or(0, |t| t.offset + t.len)
    }

    /// The data-parallel gradient buckets of a rank's tensors; none without data parallelism.
    pub fn buckets(&self) -> Vec<Bucket> {
        if self.partition.dp() > 1 {
            plan_buckets(&self.tensors(), BUCKET_CAP_BYTES)
        } else {
            vec![]
        }
    }

    /// Every buffer of a rank for a run of `steps` steps, with its size in elements.
    pub fn buffers(&self, steps: usize) -> Vec<(Buf, usize)> {
        let bl = self.base.local_batch;
        let depth = self.depth();
        let shards: Vec<LayerShard> = (0..depth).map(|l| self.shard(l)).collect();
        // dY of every layer, dX of every layer above the first.
        let delta = shards
            .iter()
            .enumerate()
            .map(|(l, s)| if l > 0 { s.dout.max(s.din) } else { s.dout })
            .max()
            .unwrap_or(1);
        let p = self.flat_len();
        let mut v = vec![
            (Buf::Params, p),
            (Buf::Grads, p),
            (Buf::Act(0), bl * self.base.in_dim()),
        ];
        for (l, s) in shards.iter().enumerate() {
            v.push((Buf::Act(l + 1), bl * s.dout));
        }
        v.push((Buf::Delta(0), bl * delta));
        if depth >= 2 {
            v.push((Buf::Delta(1), bl * delta));
        }
        v.extend([
            (Buf::RowLoss, bl),
            (Buf::Labels, bl),
            (Buf::Teacher, self.base.in_dim() * self.base.classes()),
            (Buf::Ones, bl),
            (Buf::StepLoss, steps.max(1)),
        ]);
        v
    }

    /// Device memory a rank's buffers take.
    pub fn memory_bytes(&self, steps: usize) -> u64 {
        self.buffers(steps)
            .iter()
            .map(|(b, n)| (n * b.elem().bytes()) as u64)
            .sum()
    }

    /// Once per run on `rank`: the teacher, the rank's shards of the initial parameters (each
    /// element the one [`reference::init_param`] gives its place in the full matrix), zeros
    /// elsewhere, the ones vector.
    pub fn init_ops(&self, rank: usize) -> Vec<Op> {
        let m = &self.base;
        let (_, t) = self.partition.rank(rank);
        let mut ops = vec![
            Op::Launch(Launch::gen_teacher(
                Ptr::of(Buf::Teacher),
                m.seed,
                m.classes(),
                m.in_dim(),
            )),
            Op::Launch(Launch::fill(Ptr::of(Buf::Params), self.flat_len(), 0.0)),
            Op::Launch(Launch::fill(Ptr::of(Buf::Grads), self.flat_len(), 0.0)),
        ];
        for x in self.tensors() {
            let p = Ptr::at(Buf::Params, x.offset);
            let s = self.partition.shard(&m.layers, x.layer, t);
            ops.push(Op::Launch(if x.bias {
                Launch::fill(p, x.len, 0.0)
            } else {
                Launch::init_weight_block(
                    p,
                    m.seed,
                    x.layer,
                    s.dout,
                    s.din,
                    s.first,
                    s.ld,
                    m.layers[x.layer],
                )
            }));
        }
        ops.push(Op::Launch(Launch::fill(
            Ptr::of(Buf::Ones),
            m.local_batch,
            1.0,
        )));
        ops
    }

    /// The batch of `step` for `rank`: its group's samples.
    pub fn data_ops(&self, step: usize, rank: usize) -> Vec<Op> {
        data_ops(&self.base, step, self.partition.rank(rank).0)
    }

    /// One training step of `rank` (see the module documentation), with `buckets` from
    /// [`Sharded::buckets`] (or any [`plan_buckets`] of [`Sharded::tensors`]).
    pub fn step_ops(&self, buckets: &[Bucket], step: usize, rank: usize) -> Vec<Op> {
        let m = &self.base;
        let depth = self.depth();
        let bl = m.local_batch;
        let ev = |kind| EvId { step, kind };
        let index = |layer: usize, bias: bool| 2 * (depth - 1 - layer) + usize::from(!bias);
        // Each tensor-parallel all-reduce between events of its own, on the compute stream
        // it holds up: the time the step waits for it.
        let mut tp_count = 0;
        let mut tp_sum = |ops: &mut Vec<Op>, at: Ptr, len: usize| {
            let k = tp_count;
            tp_count += 1;
            ops.push(Op::Record(Stream::Compute, ev(EvKind::TpStart(k))));
            ops.push(Op::GroupAllReduce(GroupReduce {
                group: Group::Tensor,
                stream: Stream::Compute,
                at,
                len,
            }));
            ops.push(Op::Record(Stream::Compute, ev(EvKind::TpEnd(k))));
        };
        let mut ops = vec![Op::Record(Stream::Compute, ev(EvKind::StepStart))];
        ops.extend(self.data_ops(step, rank));
        for l in 0..depth {
            let s = self.shard(l);
            let (w, b) = (self.tensor(l, false), self.tensor(l, true));
            let y = Ptr::of(Buf::Act(l + 1));
            ops.push(Op::Gemm(Gemm::forward(
                Ptr::at(Buf::Params, w.offset),
                Ptr::of(Buf::Act(l)),
                y,
                bl,
                s.din,
                s.dout,
            )));
            if s.split == Split::Row {
                tp_sum(&mut ops, y, bl * s.dout);
            }
            ops.push(Op::Launch(Launch::bias_act_fwd(
                y,
                Ptr::at(Buf::Params, b.offset),
                bl,
                s.dout,
                l + 1 < depth,
            )));
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
            let s = self.shard(l);
            let (w, b) = (self.tensor(l, false), self.tensor(l, true));
            let dy = Ptr::of(Buf::Delta(delta));
            ops.push(Op::Gemv(Gemv::bias_grad(
                dy,
                Ptr::of(Buf::Ones),
                Ptr::at(Buf::Grads, b.offset),
                bl,
                s.dout,
            )));
            bucket_ops(buckets, index(l, true), step, &mut ops);
            ops.push(Op::Gemm(Gemm::grad_weight(
                Ptr::of(Buf::Act(l)),
                dy,
                Ptr::at(Buf::Grads, w.offset),
                bl,
                s.din,
                s.dout,
            )));
            bucket_ops(buckets, index(l, false), step, &mut ops);
            if l > 0 {
                let dx = Ptr::of(Buf::Delta(1 - delta));
                ops.push(Op::Gemm(Gemm::grad_input(
                    Ptr::at(Buf::Params, w.offset),
                    dy,
                    dx,
                    bl,
                    s.din,
                    s.dout,
                )));
                if s.split == Split::Column {
                    tp_sum(&mut ops, dx, bl * s.din);
                }
                ops.push(Op::Launch(Launch::relu_bwd(
                    dx,
                    Ptr::of(Buf::Act(l)),
                    bl * s.din,
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
            self.flat_len(),
            m.lr,
        )));
        ops.push(Op::Record(Stream::Compute, ev(EvKind::StepEnd)));
        ops
    }

    /// What one rank all-reduces in one step, counted from its op list.
    pub fn comm_per_step(&self) -> CommVolume {
        let mut v = CommVolume {
            tensor: Traffic {
                ranks: self.partition.tp(),
                ..Traffic::default()
            },
            data: Traffic {
                ranks: self.partition.dp(),
                ..Traffic::default()
            },
        };
        for op in self.step_ops(&self.buckets(), 0, 0) {
            if let Op::GroupAllReduce(r) = op {
                let t = match r.group {
                    Group::Tensor => &mut v.tensor,
                    Group::Data => &mut v.data,
                };
                t.calls += 1;
                t.bytes += r.bytes();
            }
        }
        v
    }

    /// A rank's flat parameters as the reference orders them: `[W_0, b_0, W_1, ...]`, shards.
    pub fn reference_order(&self, flat: &[f32]) -> Vec<Vec<f32>> {
        let mut out = vec![Vec::new(); 2 * self.depth()];
        for t in self.tensors() {
            out[2 * t.layer + usize::from(t.bias)] = flat[t.offset..t.offset + t.len].to_vec();
        }
        out
    }

    /// The replicated tensors of [`Sharded::reference_order`]'s list (the same on every rank).
    pub fn replicated(&self, params: &[Vec<f32>]) -> Vec<Vec<f32>> {
        params
            .iter()
            .enumerate()
            .filter(|(i, _)| self.partition.replicated(self.depth(), i / 2, i % 2 == 1))
            .map(|(_, v)| v.clone())
            .collect()
    }
}

/// After the op that writes tensor `t`: start the data-parallel all-reduce of the bucket it
/// completes (the data-parallel plan's events, a [`Group::Data`] all-reduce of its range).
fn bucket_ops(buckets: &[Bucket], t: usize, step: usize, ops: &mut Vec<Op>) {
    for b in buckets.iter().filter(|b| b.tensors.end == t + 1) {
        let ev = |kind| EvId { step, kind };
        ops.extend([
            Op::Record(Stream::Compute, ev(EvKind::Ready(b.index))),
            Op::Wait(Stream::Comm, ev(EvKind::Ready(b.index))),
            Op::Record(Stream::Comm, ev(EvKind::CommStart(b.index))),
            Op::GroupAllReduce(GroupReduce {
                group: Group::Data,
                stream: Stream::Comm,
                at: Ptr::at(Buf::Grads, b.offset),
                len: b.len,
            }),
            Op::Record(Stream::Comm, ev(EvKind::CommEnd(b.index))),
        ]);
    }
}

/// All-reduces of one kind that one rank takes part in during one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Traffic {
    /// All-reduce calls.
    pub calls: usize,
    /// Their payload: bytes of the buffers the rank all-reduces, summed over the calls.
    pub bytes: u64,
    /// Ranks in each all-reduce (the group size).
    pub ranks: usize,
}

impl Traffic {
    /// Bytes a rank sends over its links for these all-reduces with a ring or tree algorithm:
    /// the payload times nccl-tests' bus factor `2(n-1)/n` (zero for a group of one).
    pub fn bus_bytes(&self) -> f64 {
        CollectiveOp::AllReduce.busbw_factor(self.ranks) * self.bytes as f64
    }
}

/// What one rank communicates per step, by kind of group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommVolume {
    /// Within its tensor-parallel group: activations and input gradients.
    pub tensor: Traffic,
    /// Within its data-parallel group: the gradients of its shards (alignment gaps included).
    pub data: Traffic,
}

/// Bytes one rank communicates per step when `base`'s model (its layers, its `local_batch`
/// samples per data-parallel group) is trained partitioned as `p`, counted from the plan. For
/// `Partition::Data` the data traffic is the data-parallel plan's buckets.
pub fn comm_per_step(base: &Model, p: Partition) -> Result<CommVolume, HwError> {
    let base = Model {
        replicas: p.dp(),
        math: if base.math == Math::Bf16 {
            // The gradients and activations are fp32 either way.
            Math::Fp32
        } else {
            base.math
        },
        ..base.clone()
    };
    Ok(Sharded::new(base, p)?.comm_per_step())
}

/// Enqueue the ranks' op lists side by side, op `i` of every rank, then op `i + 1`; a
/// [`Op::GroupAllReduce`] (the same on every rank) is issued once per group of its kind.
pub fn run_ranks<D: Device + ?Sized>(
    dev: &mut D,
    p: Partition,
    lists: &[Vec<Op>],
) -> Result<(), HwError> {
    if lists.len() != p.gpus() {
        return Err(internal(format!(
            "{} op lists for the {} ranks of {p:?}",
            lists.len(),
            p.gpus()
        )));
    }
    let first = &lists[0];
    if lists.iter().any(|l| l.len() != first.len()) {
        return Err(internal("ranks' operation lists differ in shape"));
    }
    for (i, op) in first.iter().enumerate() {
        if lists
            .iter()
            .any(|l| std::mem::discriminant(&l[i]) != std::mem::discriminant(op))
        {
            return Err(internal("ranks' operation lists differ in shape"));
        }
        match op {
            Op::GroupAllReduce(r) => {
                if lists.iter().any(|l| l[i] != *op) {
                    return Err(internal(format!("ranks' all-reduces differ at op {i}")));
                }
                let groups: Vec<Vec<usize>> = match r.group {
                    Group::Tensor => (0..p.dp()).map(|g| p.tp_group(g)).collect(),
                    Group::Data => (0..p.tp()).map(|t| p.dp_group(t)).collect(),
                };
                for ranks in groups {
                    dev.group_all_reduce(&ranks, r)?;
                }
            }
            Op::AllReduce(_) => {
                return Err(internal("a data-parallel bucket in a sharded plan"));
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

/// The timings of `steps` of a sharded run, as [`step_times`] reads a data-parallel one, with
/// the tensor-parallel all-reduces added to its communication and, whole, to the part of the
/// step it waited on communication (they sit between a layer and the next). Their time is the
/// least any rank spent in them: a rank that reaches an all-reduce early waits in it for its
/// slower peers, which is compute imbalance, not communication; the last to arrive waits only
/// for the transfer. The step, the buckets and the wait for them are the slowest rank's.
pub fn sharded_step_times<D: Device + ?Sized>(
    dev: &mut D,
    s: &Sharded,
    buckets: &[Bucket],
    steps: std::ops::Range<usize>,
) -> Result<StepTimes, HwError> {
    let p = s.partition();
    // None where tp = 1: every layer is then replicated.
    let tp_reduces = p.tp_all_reduces(s.depth()).len();
    let mut t = StepTimes::default();
    for step in steps {
        let (mut all, mut data, mut waited) = (0f64, 0f64, 0f64);
        let mut tp = f64::INFINITY;
        for r in 0..s.ranks() {
            let (one, d, w) = rank_times(dev, r, buckets, step)?;
            let mut mine = 0.0;
            for k in 0..tp_reduces {
                let ev = |kind| EvId { step, kind };
                mine += dev.elapsed_ms(r, ev(EvKind::TpStart(k)), ev(EvKind::TpEnd(k)))?;
            }
            all = all.max(one);
            data = data.max(d);
            waited = waited.max(w);
            tp = tp.min(mine);
        }
        let tp = if tp.is_finite() { tp.max(0.0) } else { 0.0 };
        t.step_ms.push(all);
        t.comm_ms.push(tp + data);
        t.exposed_ms.push(tp + waited.max(0.0));
    }
    Ok(t)
}

/// What a sharded run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardedOutcome {
    /// Mean loss of each step over the global batch (TP rank 0 of each group).
    pub losses: Vec<f32>,
    /// Each rank's loss sum of each step over its group's samples, as the rank computed it.
    pub rank_loss_sums: Vec<Vec<f32>>,
    pub times: StepTimes,
    /// [`reference::params_hash`] of each rank's final shards (reference order).
    pub shard_hashes: Vec<String>,
    /// [`reference::params_hash`] of each rank's final replicated tensors.
    pub replicated_hashes: Vec<String>,
}

/// Ranks that should agree and do not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Inconsistency {
    #[error(
        "rank {rank} computed another loss than rank {first} of its tensor-parallel group at \
         step {step}: the group's all-reduces did not give every rank the same sums"
    )]
    LossSums {
        rank: usize,
        first: usize,
        step: usize,
    },
    #[error(
        "rank {rank} ends with other parameters than rank {first}, which holds the same shards: \
         the data-parallel all-reduce did not give them the same gradients"
    )]
    Shards { rank: usize, first: usize },
    #[error("rank {rank}'s replicated tensors differ from rank 0's")]
    Replicated { rank: usize },
    #[error("{got} ranks reported, {p:?} has {want}")]
    Ranks {
        p: Partition,
        got: usize,
        want: usize,
    },
}

impl ShardedOutcome {
    /// The first disagreement between ranks that a correct run cannot show: loss sums within a
    /// TP group (bit for bit), shards across a DP group, replicated tensors anywhere.
    pub fn consistency(&self, p: Partition) -> Result<(), Inconsistency> {
        let want = p.gpus();
        for got in [
            self.rank_loss_sums.len(),
            self.shard_hashes.len(),
            self.replicated_hashes.len(),
        ] {
            if got != want {
                return Err(Inconsistency::Ranks { p, got, want });
            }
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for g in 0..p.dp() {
            let ranks = p.tp_group(g);
            let first = bits(&self.rank_loss_sums[ranks[0]]);
            for &r in &ranks[1..] {
                let mine = bits(&self.rank_loss_sums[r]);
                if let Some(step) =
                    (0..mine.len().max(first.len())).find(|&s| mine.get(s) != first.get(s))
                {
                    return Err(Inconsistency::LossSums {
                        rank: r,
                        first: ranks[0],
                        step,
                    });
                }
            }
        }
        for t in 0..p.tp() {
            let ranks = p.dp_group(t);
            for &r in &ranks[1..] {
                if self.shard_hashes[r] != self.shard_hashes[ranks[0]] {
                    return Err(Inconsistency::Shards {
                        rank: r,
                        first: ranks[0],
                    });
                }
            }
        }
        if let Some(rank) =
            (1..want).find(|&r| self.replicated_hashes[r] != self.replicated_hashes[0])
        {
            return Err(Inconsistency::Replicated { rank });
        }
        Ok(())
    }
}

/// Compare every rank's initial shards and its group's share of step 0's batch with the CPU
/// definitions, bit for bit. Run after [`Sharded::init_ops`] and the data ops of step 0, and a
/// sync.
pub fn verify_inputs<D: Device + ?Sized>(dev: &mut D, s: &Sharded) -> Result<(), HwError> {
    let m = s.base();
    let p = s.partition();
    let full = reference::init_params(&m.mlp_config(0));
    let bl = m.local_batch;
    let tensors = s.tensors();
    for r in 0..s.ranks() {
        let (g, t) = p.rank(r);
        let cpu = reference::sharded::shard_params(&full, &m.layers, p, t);
        let params = super::RankParams {
            flat_len: s.flat_len(),
            tensors: &tensors,
            cpu: &cpu,
            whose: format!("rank {r}'s shard of "),
        };
        super::verify_rank(dev, m, r, &params, g * bl..(g + 1) * bl)?;
    }
    Ok(())
}

/// Run the sharded plan: initialise, optionally check the inputs, train `opts.steps` steps, then
/// read back the losses, the timings and each rank's hashes.
pub fn train<D: Device + ?Sized>(
    dev: &mut D,
    s: &Sharded,
    opts: &TrainOpts,
) -> Result<ShardedOutcome, HwError> {
    let (p, n) = (s.partition(), s.ranks());
    let buckets = s.buckets();
    run_ranks(dev, p, &(0..n).map(|r| s.init_ops(r)).collect::<Vec<_>>())?;
    if opts.verify_inputs {
        run_ranks(
            dev,
            p,
            &(0..n).map(|r| s.data_ops(0, r)).collect::<Vec<_>>(),
        )?;
        dev.sync()?;
        verify_inputs(dev, s)?;
    }
    for step in 0..opts.steps {
        let lists: Vec<Vec<Op>> = (0..n).map(|r| s.step_ops(&buckets, step, r)).collect();
        run_ranks(dev, p, &lists)?;
    }
    dev.sync()?;
    let mut rank_loss_sums = Vec::with_capacity(n);
    for r in 0..n {
        rank_loss_sums.push(to_f32(&dev.read(r, Buf::StepLoss, opts.steps)?));
    }
    let mut sums = vec![0f32; opts.steps];
    for g in 0..p.dp() {
        for (sum, v) in sums.iter_mut().zip(&rank_loss_sums[g * p.tp()]) {
            *sum += v;
        }
    }
    let global = s.base().global_batch() as f32;
    let losses = sums.iter().map(|v| v / global).collect();
    let times = sharded_step_times(dev, s, &buckets, opts.warmup.min(opts.steps)..opts.steps)?;
    let (mut shard_hashes, mut replicated_hashes) = (Vec::new(), Vec::new());
    for r in 0..n {
        let params = s.reference_order(&to_f32(&dev.read(r, Buf::Params, s.flat_len())?));
        shard_hashes.push(reference::params_hash(&params));
        replicated_hashes.push(reference::params_hash(&s.replicated(&params)));
    }
    Ok(ShardedOutcome {
        losses,
        rank_loss_sums,
        times,
        shard_hashes,
        replicated_hashes,
    })
}
