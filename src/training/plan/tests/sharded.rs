//! The sharded plans ([`crate::training::plan::sharded`]) on the emulated device, against the CPU
//! reference of the sharded runs ([`crate::training::reference::sharded`]) and the golden run.

use super::*;
use crate::training::partition::Partition;
use crate::training::plan::sharded::{self as sh, Inconsistency, Sharded, ShardedOutcome};
use crate::training::reference::sharded as rs;

impl Emu {
    fn sharded(s: &Sharded, steps: usize, faults: Faults) -> Emu {
        Emu::of_buffers(s.buffers(steps), s.ranks(), faults)
    }
}

/// `layers` with a global batch of `batch` split over the partition's groups, plain fp32.
fn sharded(layers: &[usize], batch: usize, p: Partition) -> Sharded {
    let m = Model {
        math: Math::Pedantic,
        ..model(layers, batch / p.dp(), p.dp())
    };
    Sharded::new(m, p).unwrap()
}

/// The golden configuration's shape, [64, 128, 128, 10], global batch 256.
fn small(p: Partition) -> Sharded {
    sharded(&[64, 128, 128, 10], 256, p)
}

fn run(s: &Sharded, steps: usize, faults: Faults) -> (ShardedOutcome, Emu) {
    let mut emu = Emu::sharded(s, steps, faults);
    let out = sh::train(&mut emu, s, &opts(steps)).unwrap();
    (out, emu)
}

fn cpu(s: &Sharded, steps: usize) -> rs::ShardedRun {
    rs::train_sharded(&s.base().mlp_config(steps), s.partition(), steps).unwrap()
}

fn hashes(run: &rs::ShardedRun) -> Vec<String> {
    run.ranks.iter().map(|p| r::params_hash(p)).collect()
}

/// The emulated run equals the CPU reference bit for bit (losses, every rank's shards), its
/// ranks agree, and it follows the golden trajectory within the golden tolerance.
fn reproduces_the_reference(s: &Sharded, steps: usize) -> ShardedOutcome {
    let p = s.partition();
    let (out, emu) = run(s, steps, Faults::default());
    let cpu = cpu(s, steps);
    assert_eq!(out.losses, cpu.losses, "{p:?}");
    assert_eq!(out.shard_hashes, hashes(&cpu), "{p:?}");
    out.consistency(p).unwrap();
    let golden = r::train(&s.base().mlp_config(steps), steps);
    // Not the golden bits (the sums were split), though a few steps' losses may round alike.
    let full = rs::unshard_params(&cpu.ranks[..p.tp()], &s.base().layers, p);
    assert_ne!(full, golden.params, "{p:?}: the sums were not split?");
    let dev = r::compare_trajectory(
        &out.losses,
        &golden.losses,
        r::DEFAULT_REL_TOL,
        r::DEFAULT_ABS_TOL,
    )
    .unwrap_or_else(|e| panic!("{p:?}: {e}"));
    assert!(
        dev.max_rel_diff < r::DEFAULT_REL_TOL / 10.0,
        "{p:?}: {dev:?}"
    );
    // One all-reduce per group for each in the op list, nothing else.
    let per_step: usize = s
        .step_ops(&s.buckets(), 0, 0)
        .iter()
        .map(|o| match o {
            Op::GroupAllReduce(g) if g.group == Group::Tensor => p.dp(),
            Op::GroupAllReduce(_) => p.tp(),
            _ => 0,
        })
        .sum();
    assert_eq!(emu.group_reduces, steps * per_step, "{p:?}");
    assert_eq!(emu.all_reduces, 0);
    out
}

#[test]
fn tensor_parallel_over_2_and_4_gpus_reproduces_the_sharded_reference_bit_for_bit() {
    for tp in [2, 4] {
        let s = small(Partition::Tensor { tp });
        let out = reproduces_the_reference(&s, 4);
        assert!(out.losses[3] < 0.8 * out.losses[0], "{:?}", out.losses);
        // Every rank of the group computed the same losses and holds the same replicated
        // tensors (b_1, layer 2), and its own shards of the rest.
        assert!(out
            .rank_loss_sums
            .iter()
            .all(|v| *v == out.rank_loss_sums[0]));
        assert!(out
            .replicated_hashes
            .iter()
            .all(|h| *h == out.replicated_hashes[0]));
        for r in 1..tp {
            assert_ne!(out.shard_hashes[r], out.shard_hashes[0], "tp {tp} rank {r}");
        }
        assert_eq!(out.times.step_ms.len(), 4 - WARMUP_STEPS);
    }
}

#[test]
fn hybrid_2x2_reproduces_the_reference_and_replicas_of_a_shard_stay_identical() {
    let p = Partition::Hybrid { tp: 2, dp: 2 };
    let s = small(p);
    let out = reproduces_the_reference(&s, 4);
    // Ranks 0 and 2 hold TP rank 0's shards, 1 and 3 TP rank 1's.
    let h = &out.shard_hashes;
    assert_eq!((&h[0], &h[1]), (&h[2], &h[3]));
    assert_ne!(h[0], h[1]);
    assert!(out
        .replicated_hashes
        .iter()
        .all(|x| *x == out.replicated_hashes[0]));
    // The two groups trained on different samples.
    assert_ne!(out.rank_loss_sums[0], out.rank_loss_sums[2]);
    assert_eq!(out.rank_loss_sums[0], out.rank_loss_sums[1]);

    // Tiny buckets (one per tensor): the same sums element by element, the same bits.
    let steps = 3;
    let buckets = plan_buckets(&s.tensors(), 100);
    assert_eq!(buckets.len(), 5);
    let mut emu = Emu::sharded(&s, steps, Faults::default());
    sh::run_ranks(
        &mut emu,
        p,
        &(0..4).map(|r| s.init_ops(r)).collect::<Vec<_>>(),
    )
    .unwrap();
    for step in 0..steps {
        let lists: Vec<Vec<Op>> = (0..4).map(|r| s.step_ops(&buckets, step, r)).collect();
        sh::run_ranks(&mut emu, p, &lists).unwrap();
    }
    // Per step: one TP all-reduce in each of 2 groups, 5 buckets in each of 2 DP groups.
    assert_eq!(emu.group_reduces, steps * (2 + 5 * 2));
    let want = cpu(&s, steps);
    for rank in 0..4 {
        let flat = to_f32(&emu.read(rank, Buf::Params, s.flat_len()).unwrap());
        assert_eq!(s.reference_order(&flat), want.ranks[rank], "rank {rank}");
    }
}

#[test]
fn deeper_and_even_depth_models_reproduce_the_reference_with_backward_all_reduces() {
    // Five layers: pairs (0, 1) and (2, 3), the classifier replicated; the input gradient of
    // column-parallel layer 2 is all-reduced backward. Four layers: the classifier is
    // row-parallel and the logits come out of an all-reduce.
    for layers in [&[16, 24, 20, 24, 8, 4][..], &[16, 24, 20, 24, 4]] {
        for p in [
            Partition::Tensor { tp: 2 },
            Partition::Tensor { tp: 4 },
            Partition::Hybrid { tp: 2, dp: 2 },
        ] {
            let s = sharded(layers, 16, p);
            let ops = s.step_ops(&s.buckets(), 0, 0);
            let tp = ops
                .iter()
                .filter(|o| matches!(o, Op::GroupAllReduce(g) if g.group == Group::Tensor))
                .count();
            assert_eq!(tp, 3, "{layers:?}: two forward, one backward");
            reproduces_the_reference(&s, 5);
        }
    }
}

#[test]
fn a_rank_that_skips_a_group_all_reduce_is_caught() {
    let steps = 3;
    // Rank 1 keeps its partial activations: the group's losses disagree at once, and its
    // shards leave the reference.
    let s = small(Partition::Tensor { tp: 2 });
    let skip = |group, rank| Faults {
        skip_group_reduce: Some((group, rank)),
        ..Default::default()
    };
    let (bad, _) = run(&s, steps, skip(Group::Tensor, 1));
    assert_eq!(
        bad.consistency(s.partition()),
        Err(Inconsistency::LossSums {
            rank: 1,
            first: 0,
            step: 0
        })
    );
    let want = hashes(&cpu(&s, steps));
    assert_ne!(bad.shard_hashes[1], want[1]);
    // Rank 0 reads rank 1's wrong partial sums from step 1 on.
    assert_ne!(bad.losses[1..], cpu(&s, steps).losses[1..]);

    // A backward all-reduce skipped (five layers, rank 0): caught too.
    let deep = sharded(&[16, 24, 20, 24, 8, 4], 16, Partition::Tensor { tp: 2 });
    let (bad, _) = run(&deep, steps, skip(Group::Tensor, 0));
    assert!(bad.consistency(deep.partition()).is_err());

    // Hybrid: rank 3 keeps its own gradients; its shards drift from rank 1's, which holds the
    // same ones, and so do its replicated tensors (W_2) from its group's rank 2's.
    let s = small(Partition::Hybrid { tp: 2, dp: 2 });
    let (bad, _) = run(&s, steps, skip(Group::Data, 3));
    assert!(bad.consistency(s.partition()).is_err());
    assert_ne!(bad.shard_hashes[3], bad.shard_hashes[1]);
    assert_ne!(bad.replicated_hashes[3], bad.replicated_hashes[2]);
    // With the loss sums made to agree, the shards' check still names rank 3.
    let masked = ShardedOutcome {
        rank_loss_sums: vec![bad.rank_loss_sums[0].clone(); 4],
        ..bad
    };
    assert_eq!(
        masked.consistency(s.partition()),
        Err(Inconsistency::Shards { rank: 3, first: 1 })
    );
}

#[test]
fn a_wrong_initial_shard_is_caught_before_training() {
    let s = small(Partition::Tensor { tp: 2 });
    let faults = Faults {
        init_ulp: Some(5),
        ..Default::default()
    };
    let mut emu = Emu::sharded(&s, 2, faults);
    let e = sh::train(&mut emu, &s, &opts(2)).unwrap_err().to_string();
    assert!(
        e.contains("1 of 4096 values of rank 0's shard of the initial W_0 differ"),
        "{e}"
    );
    assert!(e.contains("first at element 5"), "{e}");
}

#[test]
fn consistency_names_the_rank_that_disagrees() {
    let p = Partition::Hybrid { tp: 2, dp: 2 };
    let ok = ShardedOutcome {
        losses: vec![1.0],
        rank_loss_sums: vec![
            vec![3.0, 2.0],
            vec![3.0, 2.0],
            vec![5.0, 4.0],
            vec![5.0, 4.0],
        ],
        times: StepTimes::default(),
        shard_hashes: ["a", "b", "a", "b"].map(String::from).to_vec(),
        replicated_hashes: vec!["r".into(); 4],
    };
    assert_eq!(ok.consistency(p), Ok(()));
    let mut o = ok.clone();
    o.rank_loss_sums[3][1] = 4.000_001;
    assert_eq!(
        o.consistency(p),
        Err(Inconsistency::LossSums {
            rank: 3,
            first: 2,
            step: 1
        })
    );
    // A rank that reported fewer steps disagrees at the first missing one.
    let mut o = ok.clone();
    o.rank_loss_sums[1].pop();
    assert!(matches!(
        o.consistency(p),
        Err(Inconsistency::LossSums {
            rank: 1,
            step: 1,
            ..
        })
    ));
    let mut o = ok.clone();
    o.shard_hashes[2] = "c".into();
    assert_eq!(
        o.consistency(p),
        Err(Inconsistency::Shards { rank: 2, first: 0 })
    );
    let mut o = ok.clone();
    o.replicated_hashes[1] = "x".into();
    assert_eq!(o.consistency(p), Err(Inconsistency::Replicated { rank: 1 }));
    let mut o = ok.clone();
    o.shard_hashes.pop();
    assert!(matches!(
        o.consistency(p),
        Err(Inconsistency::Ranks {
            got: 3,
            want: 4,
            ..
        })
    ));
    // Read as one TP group of four, the same figures disagree: ranks 2 and 3 computed other
    // losses than rank 0 (the different shard hashes are what tensor parallelism is).
    assert_eq!(
        ok.consistency(Partition::Tensor { tp: 4 }),
        Err(Inconsistency::LossSums {
            rank: 2,
            first: 0,
            step: 0
        })
    );
    let one_group = ShardedOutcome {
        rank_loss_sums: vec![vec![3.0, 2.0]; 4],
        ..ok
    };
    assert_eq!(one_group.consistency(Partition::Tensor { tp: 4 }), Ok(()));
}

/// The anchor's shape, [1024, 4096, 4096, 10] with 8192 samples per group.
fn anchor_sharded(p: Partition) -> Sharded {
    Sharded::new(anchor(p.dp()), p).unwrap()
}

#[test]
fn each_rank_multiplies_its_shard_and_the_all_reduces_sit_where_megatron_puts_them() {
    let s = anchor_sharded(Partition::Tensor { tp: 4 });
    let ops = s.step_ops(&[], 0, 2);
    let gemms: Vec<(usize, &Gemm)> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, o)| match o {
            Op::Gemm(g) => Some((i, g)),
            _ => None,
        })
        .collect();
    // Three forward GEMMs, three dW, two dX.
    assert_eq!(gemms.len(), 8);
    let w = |l: usize| Ptr::at(Buf::Params, s.tensors()[2 * (2 - l) + 1].offset);
    let dims = |g: &Gemm| (g.m, g.n, g.k);
    // Forward: column-parallel layer 0 makes 1024 of the 4096 features from the whole batch;
    // row-parallel layer 1 takes those 1024 and makes partial sums of all 4096; the replicated
    // classifier takes all 4096.
    let fwd: Vec<_> = gemms[..3]
        .iter()
        .map(|(_, g)| (g.a, g.b, g.c, dims(g)))
        .collect();
    assert_eq!(
        fwd,
        [
            (
                w(0),
                Ptr::of(Buf::Act(0)),
                Ptr::of(Buf::Act(1)),
                (1024, 8192, 1024)
            ),
            (
                w(1),
                Ptr::of(Buf::Act(1)),
                Ptr::of(Buf::Act(2)),
                (4096, 8192, 1024)
            ),
            (
                w(2),
                Ptr::of(Buf::Act(2)),
                Ptr::of(Buf::Act(3)),
                (10, 8192, 4096)
            ),
        ]
    );
    // The forward all-reduce comes between layer 1's GEMM and its bias and ReLU, on the
    // compute stream (between its timing events); it is the step's only one (layer 0's input
    // gradient is not needed).
    let (i1, _) = gemms[1];
    assert!(matches!(ops[i1 + 1], Op::Record(Stream::Compute, e) if e.kind == EvKind::TpStart(0)));
    assert_eq!(
        ops[i1 + 2],
        Op::GroupAllReduce(GroupReduce {
            group: Group::Tensor,
            stream: Stream::Compute,
            at: Ptr::of(Buf::Act(2)),
            len: 8192 * 4096,
        })
    );
    assert!(matches!(ops[i1 + 3], Op::Record(Stream::Compute, e) if e.kind == EvKind::TpEnd(0)));
    assert!(
        matches!(&ops[i1 + 4], Op::Launch(l) if l.kernel == "nc_bias_act_fwd" && l.args[0] == Arg::Ptr(Ptr::of(Buf::Act(2))))
    );
    assert_eq!(
        ops.iter()
            .filter(|o| matches!(o, Op::GroupAllReduce(_)))
            .count(),
        1
    );
    // Backward: dW of each shard has the shard's shape; dX of the row-parallel layer is the
    // 1024-wide slice the column layer below wants.
    let bwd: Vec<_> = gemms[3..].iter().map(|(_, g)| dims(g)).collect();
    assert_eq!(
        bwd,
        [
            (4096, 10, 8192),   // dW_2 (in, out, batch)
            (4096, 8192, 10),   // dX_2
            (1024, 4096, 8192), // dW_1
            (1024, 8192, 4096), // dX_1
            (1024, 1024, 8192), // dW_0
        ]
    );
    // Five layers: the backward all-reduce follows column layer 2's dX GEMM, before the mask.
    let deep = sharded(&[16, 24, 20, 24, 8, 4], 16, Partition::Tensor { tp: 2 });
    let ops = deep.step_ops(&[], 0, 1);
    let at = ops
        .iter()
        .position(|o| matches!(o, Op::GroupAllReduce(g) if g.at.buf == Buf::Delta(0) || g.at.buf == Buf::Delta(1)))
        .unwrap();
    // (Between them, the all-reduce's timing events.)
    assert!(
        matches!(&ops[at - 2], Op::Gemm(g) if !g.transa && !g.transb && g.m == 20 && g.k == 12)
    );
    assert!(
        matches!(ops[at - 1], Op::Record(Stream::Compute, e) if matches!(e.kind, EvKind::TpStart(_)))
    );
    assert!(
        matches!(ops[at + 1], Op::Record(Stream::Compute, e) if matches!(e.kind, EvKind::TpEnd(_)))
    );
    assert!(
        matches!(&ops[at + 2], Op::Launch(l) if l.kernel == "nc_relu_bwd" && l.args[1] == Arg::Ptr(Ptr::of(Buf::Act(2))))
    );
    let Op::GroupAllReduce(g) = &ops[at] else {
        unreachable!()
    };
    assert_eq!((g.len, g.stream), (16 * 20, Stream::Compute));

    // Ranks of one TP group run the same list; ranks of another group differ in their
    // samples only. Their initialisations differ in where their blocks sit.
    let h = anchor_sharded(Partition::Hybrid { tp: 2, dp: 2 });
    let b = h.buckets();
    assert_eq!(h.step_ops(&b, 5, 0), h.step_ops(&b, 5, 1));
    let (a, c) = (h.step_ops(&b, 5, 1), h.step_ops(&b, 5, 3));
    let diff: Vec<usize> = (0..a.len()).filter(|&i| a[i] != c[i]).collect();
    assert_eq!(diff, [1]);
    assert!(matches!(&c[1], Op::Launch(l) if l.args[3] == Arg::U64(8192)));
    let (i0, i1) = (h.init_ops(0), h.init_ops(1));
    let diff: Vec<usize> = (0..i0.len()).filter(|&i| i0[i] != i1[i]).collect();
    assert_eq!(diff.len(), 2, "the blocks of W_0 and W_1");
    assert_eq!(h.init_ops(1), h.init_ops(3));

    // The GEMM work: four ranks do the sharded layers' work once and the replicated
    // classifier's four times.
    let flops = |ops: &[Op]| -> f64 {
        ops.iter()
            .filter_map(|o| match o {
                Op::Gemm(g) => Some(g.flops()),
                _ => None,
            })
            .sum()
    };
    let per_rank = flops(&s.step_ops(&[], 0, 0));
    let classifier = 3.0 * 2.0 * 8192.0 * 4096.0 * 10.0;
    assert_eq!(4.0 * per_rank, anchor(1).step_flops() + 3.0 * classifier);
    // Memory: each rank holds about a quarter of the parameters.
    assert!(
        s.flat_len() < anchor(1).flat_len() / 4 + 50_000,
        "{}",
        s.flat_len()
    );
    assert!(s.memory_bytes(30) < anchor(1).memory_bytes(30));
}

#[test]
fn comm_per_step_counts_what_the_plan_all_reduces() {
    let base = anchor(1);
    // Data-parallel: the gradients, in the data-parallel plan's buckets; no activations.
    let dp = sh::comm_per_step(&base, Partition::Data { dp: 8 }).unwrap();
    let buckets = anchor(8).buckets();
    assert_eq!(dp.data.calls, buckets.len());
    assert_eq!(
        dp.data.bytes,
        buckets.iter().map(Bucket::bytes).sum::<u64>()
    );
    assert_eq!(dp.data.bytes, (WORD * anchor(8).flat_len()) as u64);
    assert_eq!((dp.tensor.calls, dp.tensor.bytes, dp.data.ranks), (0, 0, 8));
    assert_eq!(dp.data.bus_bytes(), 1.75 * dp.data.bytes as f64);
    // Tensor-parallel: one all-reduce of the 8192 x 4096 activations (the anchor's one pair is
    // the first, whose backward all-reduce is not needed); no gradients.
    for tp in [2, 4] {
        let v = sh::comm_per_step(&base, Partition::Tensor { tp }).unwrap();
        assert_eq!((v.tensor.calls, v.tensor.bytes), (1, 4 * 8192 * 4096));
        assert_eq!((v.data.calls, v.data.bytes), (0, 0));
        assert_eq!(v.tensor.ranks, tp);
    }
    assert_eq!(
        sh::comm_per_step(&base, Partition::Tensor { tp: 2 })
            .unwrap()
            .tensor
            .bus_bytes(),
        (4 * 8192 * 4096) as f64
    );
    // Hybrid: both; the gradients are those of the rank's shards.
    let p = Partition::Hybrid { tp: 4, dp: 2 };
    let h = sh::comm_per_step(&base, p).unwrap();
    assert_eq!(
        (h.tensor.calls, h.tensor.bytes, h.tensor.ranks),
        (1, 4 * 8192 * 4096, 4)
    );
    let s = anchor_sharded(p);
    assert_eq!(h.data.bytes, (WORD * s.flat_len()) as u64);
    assert_eq!(h.data.ranks, 2);
    // Against the formula: per step, Bl x width words for each all-reduce of
    // Partition::tp_all_reduces, whatever the depth.
    for (layers, p) in [
        (&[16, 24, 20, 24, 8, 4][..], Partition::Tensor { tp: 4 }),
        (&[16, 24, 20, 24, 4], Partition::Hybrid { tp: 2, dp: 4 }),
        (&[64, 128, 128, 10], Partition::Tensor { tp: 2 }),
    ] {
        let s = sharded(layers, 64, p);
        let v = s.comm_per_step();
        let depth = layers.len() - 1;
        let words: usize = p
            .tp_all_reduces(depth)
            .iter()
            .map(|&(l, fwd)| 64 / p.dp() * Partition::tp_all_reduce_width(layers, l, fwd))
            .sum();
        assert_eq!(v.tensor.bytes, (WORD * words) as u64, "{layers:?}");
        assert_eq!(v.tensor.calls, p.tp_all_reduces(depth).len());
    }
    // A bf16 model is counted as fp32 traffic (its gradients and activations are fp32).
    let bf = sh::comm_per_step(
        &Model {
            math: Math::Bf16,
            ..anchor(1)
        },
        Partition::Tensor { tp: 2 },
    );
    assert_eq!(bf.unwrap().tensor.bytes, 4 * 8192 * 4096);
}

#[test]
fn the_sharded_plan_of_a_data_parallel_run_is_the_data_parallel_plan() {
    let m = anchor(4);
    let s = Sharded::new(m.clone(), Partition::Data { dp: 4 }).unwrap();
    assert_eq!(s.tensors(), m.tensors());
    assert_eq!(s.buffers(30), m.buffers(30));
    assert_eq!(s.buckets(), m.buckets());
    let buckets = m.buckets();
    for rank in [0, 3] {
        let dp: Vec<Op> = step_ops(&m, &buckets, 3, rank)
            .into_iter()
            .map(|o| match o {
                Op::AllReduce(k) => Op::GroupAllReduce(GroupReduce {
                    group: Group::Data,
                    stream: Stream::Comm,
                    at: Ptr::at(Buf::Grads, buckets[k].offset),
                    len: buckets[k].len,
                }),
                o => o,
            })
            .collect();
        assert_eq!(s.step_ops(&buckets, 3, rank), dp);
    }
}

#[test]
fn what_cannot_be_sharded_or_run_is_refused() {
    let refused = |m: Model, p| match Sharded::new(m, p) {
        Err(HwError::NotSupported(why)) => why,
        other => panic!("{other:?}"),
    };
    let why = refused(
        model(&[64, 128, 128, 10], 256, 1),
        Partition::Tensor { tp: 3 },
    );
    assert!(why.contains("do not split evenly over 3"), "{why}");
    let why = refused(
        model(&[64, 128, 128, 10], 256, 1),
        Partition::Hybrid { tp: 2, dp: 2 },
    );
    assert!(
        why.contains("1 data-parallel replicas, the partition 2 groups"),
        "{why}"
    );
    let why = refused(
        bf16(model(&[64, 128, 128, 10], 256, 1)),
        Partition::Tensor { tp: 2 },
    );
    assert!(why.contains("bf16"), "{why}");
    assert!(Sharded::new(model(&[64, 0, 10], 8, 1), Partition::Tensor { tp: 2 }).is_err());

    // The runners: lists for the wrong number of ranks, all-reduces that differ between ranks,
    // a data-parallel bucket in a sharded list, a group all-reduce in a data-parallel one.
    let s = small(Partition::Tensor { tp: 2 });
    let p = s.partition();
    let mut emu = Emu::sharded(&s, 1, Faults::default());
    let init = s.init_ops(0);
    assert!(sh::run_ranks(&mut emu, p, std::slice::from_ref(&init)).is_err());
    let mut short = init.clone();
    short.pop();
    assert!(sh::run_ranks(&mut emu, p, &[init.clone(), short]).is_err());
    let reduce = |len| {
        Op::GroupAllReduce(GroupReduce {
            group: Group::Tensor,
            stream: Stream::Compute,
            at: Ptr::of(Buf::Act(2)),
            len,
        })
    };
    assert!(sh::run_ranks(&mut emu, p, &[vec![reduce(4)], vec![reduce(8)]]).is_err());
    assert!(sh::run_ranks(
        &mut emu,
        p,
        &[vec![Op::AllReduce(0)], vec![Op::AllReduce(0)]]
    )
    .is_err());
    assert_eq!(emu.group_reduces, 0);
    assert!(run_lockstep(&mut emu, &[], &[vec![reduce(4)], vec![reduce(4)]]).is_err());
}

/// Each tensor-parallel all-reduce of a step sits between two events of its own on the stream
/// it runs on, numbered in the step's order.
#[test]
fn every_tensor_parallel_all_reduce_is_bracketed_by_its_own_events() {
    for p in [
        Partition::Tensor { tp: 4 },
        Partition::Hybrid { tp: 2, dp: 2 },
    ] {
        let s = small(p);
        let ops = s.step_ops(&s.buckets(), 3, 1);
        let mut k = 0;
        for (i, op) in ops.iter().enumerate() {
            if let Op::GroupAllReduce(r) = op {
                if r.group != Group::Tensor {
                    continue;
                }
                let ev = |kind| EvId { step: 3, kind };
                assert_eq!(
                    ops[i - 1],
                    Op::Record(Stream::Compute, ev(EvKind::TpStart(k)))
                );
                assert_eq!(
                    ops[i + 1],
                    Op::Record(Stream::Compute, ev(EvKind::TpEnd(k)))
                );
                k += 1;
            }
        }
        assert_eq!(k, p.tp_all_reduces(3).len(), "{p:?}");
    }
}

/// A sharded step's communication is its tensor-parallel all-reduces plus its buckets, and
/// the part it waited for is the tensor-parallel all-reduces whole plus the wait for the last
/// bucket: the all-reduces as the last rank to reach them spent them, the rest the slowest
/// rank's.
#[test]
fn tensor_parallel_all_reduces_count_whole_as_waited_for() {
    use EvKind::*;
    let s = small(Partition::Hybrid { tp: 2, dp: 2 });
    let buckets = s.buckets();
    let tp = Partition::Hybrid { tp: 2, dp: 2 }.tp_all_reduces(3).len();
    assert!(tp > 0 && !buckets.is_empty());
    let mut t = HashMap::new();
    for r in 0..4 {
        t.insert((r, StepStart, StepEnd), 10.0 + r as f64);
        for b in &buckets {
            t.insert((r, CommStart(b.index), CommEnd(b.index)), 1.0);
        }
        t.insert((r, BwdDone, Waited), if r == 0 { 2.0 } else { 0.25 });
        for k in 0..tp {
            t.insert((r, TpStart(k), TpEnd(k)), if r == 3 { 1.0 } else { 0.5 });
        }
    }
    let got = sh::sharded_step_times(&mut Clock(t.clone()), &s, &buckets, 0..1).unwrap();
    let nb = buckets.len() as f64;
    let tpf = tp as f64;
    assert_eq!(got.step_ms, [13.0]);
    // Rank 3 spent 1 ms in each tensor-parallel all-reduce, the others 0.5 ms: rank 3 reached
    // them first and waited for its peers there, so the transfer is the 0.5 ms.
    assert_eq!(got.comm_ms, [tpf * 0.5 + nb]);
    // Rank 0 waited 2 ms for its last bucket.
    assert_eq!(got.exposed_ms, [tpf * 0.5 + 2.0]);
    // Pure tensor parallelism has no buckets: all its communication is waited for.
    let s = small(Partition::Tensor { tp: 4 });
    let mut t = HashMap::new();
    for r in 0..4 {
        t.insert((r, StepStart, StepEnd), 10.0);
        for k in 0..tp {
            t.insert((r, TpStart(k), TpEnd(k)), 0.75);
        }
    }
    let got = sh::sharded_step_times(&mut Clock(t), &s, &s.buckets(), 0..1).unwrap();
    assert_eq!(got.comm_ms, got.exposed_ms);
    assert_eq!(got.comm_ms, [tpf * 0.75]);
    // A missing event is an error, not a zero.
    let mut t = HashMap::new();
    for r in 0..4 {
        t.insert((r, StepStart, StepEnd), 10.0);
    }
    assert!(sh::sharded_step_times(&mut Clock(t), &s, &[], 0..1).is_err());
}

/// Every partitioning's golden run trains the golden configuration's own global batch, split
/// evenly over its data-parallel groups (else its losses are another run's, though the node's
/// and the CPU's would still agree with each other); a batch that does not split is refused.
#[test]
fn each_partitioned_golden_run_keeps_the_golden_global_batch() {
    let mut c: crate::suite::TrainingCheck = toml::from_str("").unwrap();
    let g = Model::golden(&c).unwrap();
    for p in [
        Partition::Tensor { tp: 8 },
        Partition::Hybrid { tp: 2, dp: 4 },
        Partition::Hybrid { tp: 4, dp: 2 },
    ] {
        let s = Sharded::golden(&c, p).unwrap();
        let b = s.base();
        assert_eq!(b.local_batch * p.dp(), g.local_batch, "{p:?}");
        assert_eq!(b.replicas, p.dp(), "{p:?}");
        assert_eq!(b.global_batch(), g.global_batch(), "{p:?}");
        assert_eq!(
            (&b.layers, b.seed, b.math),
            (&g.layers, g.seed, g.math),
            "{p:?}"
        );
    }
    c.golden_batch = 255;
    let e = Sharded::golden(&c, Partition::Hybrid { tp: 2, dp: 4 }).unwrap_err();
    assert!(
        e.to_string().contains("does not split into 4 equal groups"),
        "{e}"
    );
}
