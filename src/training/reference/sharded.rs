//! CPU reference of the tensor-parallel and hybrid runs ([`Partition`]): every rank simulated,
//! every sum in a stated order, so that the plan executed on the emulated device
//! ([`crate::training::plan::sharded`]) reproduces it bit for bit.
//!
//! # What is summed, in which order
//!
//! * What a rank computes alone is the golden definition ([`super`]) applied to its shard: each
//!   product element `Σ_p a·b` has one accumulator, `p` ascending over the rank's own `k` (the
//!   shard's input width forward, its output width for `dX`, the group's batch for `dW`); bias
//!   gradients sum the group's batch rows ascending; a rank's loss sum adds its per-sample losses
//!   ascending (`nc_sum_serial`).
//! * A group all-reduce ([`group_sum`]) adds the ranks' values elementwise **in rank order,
//!   starting from the lowest rank's value**: `((v_0 + v_1) + v_2) + ...`; every rank gets the
//!   same sum. The emulated device does exactly this; NCCL adds chunk by chunk around its ring in
//!   an order of its own, which (like cuBLAS's) is within the trajectory tolerance but not bit for
//!   bit.
//! * Tensor-parallel all-reduces: forward, the partial outputs of a row-parallel layer, before
//!   its bias and ReLU; backward, the partial input gradients of a column-parallel layer
//!   (`l > 0`), before the ReLU mask of the layer below. See [`crate::training::partition`].
//! * `dZ` is scaled by `1/B`, `B` the global batch (all groups), so the data-parallel all-reduce
//!   of each gradient over the ranks holding the same shard (group order, same rule) is the mean
//!   gradient with nothing scaled after it. Without data parallelism there is none.
//! * The step's loss: each group's loss sum, from its TP rank 0 (every rank of a group computes
//!   the same logits and losses), added over the groups in group order starting from `0.0`, then
//!   divided by `B`: the plan's host arithmetic.
//!
//! # Against the golden run
//!
//! Sharding splits the forward sums of row-parallel layers and the input-gradient sums of
//! column-parallel layers into `tp` partial sums added afterwards, and data parallelism splits
//! the batch sums: summation order only. The losses track [`super::train`] within
//! [`super::DEFAULT_REL_TOL`] with nine tenths of it to spare (the tests), and one GPU
//! (`Partition::Data { dp: 1 }`) is the golden run bit for bit.

use super::{
    batch_with, dot, init_params, matmul_abt, relu, relu_bwd, replica_samples, sgd, softmax_xent,
    transpose, worker_threads, ConfigError, MlpConfig, Teacher,
};
use crate::training::partition::{LayerShard, Partition, PartitionError, Split};

/// Why a sharded run cannot start.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShardError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Partition(#[from] PartitionError),
}

/// The result of a sharded run.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardedRun {
    /// Mean loss of each step's global batch, before that step's update.
    pub losses: Vec<f32>,
    /// Each rank's final parameters `[W_0, b_0, W_1, ...]`, each tensor the rank's shard
    /// (row-major in the shard's own shape: [`LayerShard`]).
    pub ranks: Vec<Vec<Vec<f32>>>,
}

/// TP rank `t`'s shards of the full parameters `[W_0, b_0, ...]` of `layers`.
pub fn shard_params(full: &[Vec<f32>], layers: &[usize], p: Partition, t: usize) -> Vec<Vec<f32>> {
    (0..layers.len() - 1)
        .flat_map(|l| {
            let s = p.shard(layers, l, t);
            let w = s.weight_indices().map(|i| full[2 * l][i]).collect();
            let b = full[2 * l + 1][s.bias.clone()].to_vec();
            [w, b]
        })
        .collect()
}

/// The full parameters from one tensor-parallel group's shards (`group[t]` is TP rank `t`'s): the
/// inverse of [`shard_params`]. A replicated tensor is taken from the group's last rank (all
/// ranks hold the same one in a consistent run).
pub fn unshard_params(group: &[Vec<Vec<f32>>], layers: &[usize], p: Partition) -> Vec<Vec<f32>> {
    let mut full = Vec::with_capacity(2 * (layers.len() - 1));
    for l in 0..layers.len() - 1 {
        let mut w = vec![0.0f32; layers[l] * layers[l + 1]];
        let mut b = vec![0.0f32; layers[l + 1]];
        for (t, shards) in group.iter().enumerate() {
            let s = p.shard(layers, l, t);
            for (v, i) in shards[2 * l].iter().zip(s.weight_indices()) {
                w[i] = *v;
            }
            b[s.bias.clone()].copy_from_slice(&shards[2 * l + 1]);
        }
        full.push(w);
        full.push(b);
    }
    full
}

/// The all-reduce sum of a group: elementwise, in rank order, starting from the first rank's
/// value (`((v_0 + v_1) + v_2) + ...`).
pub fn group_sum(parts: &[&[f32]]) -> Vec<f32> {
    let mut s = parts[0].to_vec();
    for p in &parts[1..] {
        for (a, b) in s.iter_mut().zip(p.iter()) {
            *a += *b;
        }
    }
    s
}

/// [`group_sum`] over every rank of a group, written back to each.
fn all_reduce(parts: &mut [Vec<f32>]) {
    let refs: Vec<&[f32]> = parts.iter().map(Vec::as_slice).collect();
    let s = group_sum(&refs);
    for p in parts.iter_mut() {
        p.copy_from_slice(&s);
    }
}

/// Trains `steps` steps of `cfg` partitioned as `p` (`cfg.batch` the global batch, split over the
/// data-parallel groups), simulating every rank (see the module documentation).
pub fn train_sharded(
    cfg: &MlpConfig,
    p: Partition,
    steps: usize,
) -> Result<ShardedRun, ShardError> {
    cfg.validate()?;
    p.check(&cfg.layers)?;
    replica_samples(cfg.batch, p.dp(), 0)?;
    let (tp, dp, depth) = (p.tp(), p.dp(), cfg.depth());
    let teacher = Teacher::new(cfg.seed, cfg.layers[0], cfg.layers[depth]);
    let full = init_params(cfg);
    let mut ranks: Vec<Vec<Vec<f32>>> = (0..p.gpus())
        .map(|r| shard_params(&full, &cfg.layers, p, p.rank(r).1))
        .collect();
    let scale = 1.0 / cfg.batch as f32;
    let mut losses = Vec::with_capacity(steps);
    for step in 0..steps {
        let mut total = 0.0f32;
        let mut grads = Vec::with_capacity(p.gpus());
        for g in 0..dp {
            let samples = replica_samples(cfg.batch, dp, g)?;
            let (x, y) = batch_with(&teacher, cfg.seed, step as u64, samples);
            let (loss_sums, group_grads) =
                group_step(cfg, p, &ranks[g * tp..(g + 1) * tp], &x, &y, scale);
            total += loss_sums[0];
            grads.extend(group_grads);
        }
        losses.push(total / cfg.batch as f32);
        if dp > 1 {
            for t in 0..tp {
                // Each tensor summed over the ranks holding the same shard, group order.
                let members = p.dp_group(t);
                let sums: Vec<Vec<f32>> = (0..2 * depth)
                    .map(|i| {
                        let parts: Vec<&[f32]> =
                            members.iter().map(|&r| grads[r][i].as_slice()).collect();
                        group_sum(&parts)
                    })
                    .collect();
                for &r in &members {
                    grads[r] = sums.clone();
                }
            }
        }
        for (params, g) in ranks.iter_mut().zip(&grads) {
            for (p, g) in params.iter_mut().zip(g) {
                sgd(p, g, cfg.lr);
            }
        }
    }
    Ok(ShardedRun { losses, ranks })
}

/// `y = y + b`, then ReLU on hidden layers (the golden definition).
fn bias_act(y: &mut [f32], b: &[f32], hidden: bool) {
    for yr in y.chunks_exact_mut(b.len()) {
        for (v, &bo) in yr.iter_mut().zip(b) {
            let z = *v + bo;
            *v = if hidden { relu(z) } else { z };
        }
    }
}

/// One step of one tensor-parallel group on its samples `x`, `y`: each rank's loss sum and
/// gradients (before any data-parallel all-reduce).
fn group_step(
    cfg: &MlpConfig,
    p: Partition,
    group: &[Vec<Vec<f32>>],
    x: &[f32],
    y: &[u32],
    scale: f32,
) -> (Vec<f32>, Vec<Vec<Vec<f32>>>) {
    let (layers, depth, tp, rows) = (&cfg.layers, cfg.depth(), group.len(), y.len());
    let threads = worker_threads();
    // Every rank's shard of a layer has the same shape.
    let shards: Vec<LayerShard> = (0..depth).map(|l| p.shard(layers, l, 0)).collect();

    // Forward: acts[t][l] is rank t's input of layer l; acts[t][depth] its logits.
    let mut acts: Vec<Vec<Vec<f32>>> = vec![vec![x.to_vec()]; tp];
    for (l, s) in shards.iter().enumerate() {
        let mut outs: Vec<Vec<f32>> = group
            .iter()
            .zip(&acts)
            .map(|(w, a)| matmul_abt(&a[l], &w[2 * l], rows, s.dout, s.din, false, threads))
            .collect();
        if s.split == Split::Row {
            all_reduce(&mut outs);
        }
        for (out, w) in outs.iter_mut().zip(group) {
            bias_act(out, &w[2 * l + 1], l + 1 < depth);
        }
        for (a, o) in acts.iter_mut().zip(outs) {
            a.push(o);
        }
    }

    // Softmax cross-entropy on each rank's (replicated) logits.
    let classes = layers[depth];
    let ones = vec![1.0f32; rows];
    let mut loss_sums = Vec::with_capacity(tp);
    let mut dys = Vec::with_capacity(tp);
    for a in &acts {
        let mut dy = vec![0.0f32; rows * classes];
        let mut row_loss = vec![0.0f32; rows];
        for (((z, d), &label), loss) in a[depth]
            .chunks_exact(classes)
            .zip(dy.chunks_exact_mut(classes))
            .zip(y)
            .zip(row_loss.iter_mut())
        {
            *loss = softmax_xent(z, label as usize, scale, d);
        }
        loss_sums.push(dot(&row_loss, &ones, false));
        dys.push(dy);
    }

    // Backward.
    let mut grads = vec![vec![Vec::new(); 2 * depth]; tp];
    for (l, s) in shards.iter().enumerate().rev() {
        for t in 0..tp {
            let dyt = transpose(&dys[t], rows, s.dout);
            let xt = transpose(&acts[t][l], rows, s.din);
            grads[t][2 * l] = matmul_abt(&dyt, &xt, s.dout, s.din, rows, false, threads);
            grads[t][2 * l + 1] = dyt
                .chunks_exact(rows)
                .map(|col| dot(col, &ones, false))
                .collect();
        }
        if l == 0 {
            break;
        }
        let mut dxs: Vec<Vec<f32>> = (0..tp)
            .map(|t| {
                let wt = transpose(&group[t][2 * l], s.dout, s.din);
                matmul_abt(&dys[t], &wt, rows, s.din, s.dout, false, threads)
            })
            .collect();
        if s.split == Split::Column {
            all_reduce(&mut dxs);
        }
        for (dx, a) in dxs.iter_mut().zip(&acts) {
            relu_bwd(dx, &a[l]);
        }
        dys = dxs;
    }
    (loss_sums, grads)
}

#[cfg(test)]
mod tests {
    use super::super::{
        compare_trajectory, params_hash, train, COMPARED_STEPS, DEFAULT_ABS_TOL, DEFAULT_REL_TOL,
    };
    use super::*;

    #[test]
    fn one_gpu_is_the_golden_run_bit_for_bit() {
        let cfg = MlpConfig::small();
        let golden = train(&cfg, 5);
        let one = train_sharded(&cfg, Partition::Data { dp: 1 }, 5).unwrap();
        assert_eq!(one.losses, golden.losses);
        assert_eq!(one.ranks, [golden.params]);
    }

    #[test]
    fn tensor_and_hybrid_runs_track_the_golden_losses() {
        let cfg = MlpConfig::small();
        let golden = train(&cfg, COMPARED_STEPS);
        for p in [
            Partition::Tensor { tp: 2 },
            Partition::Tensor { tp: 4 },
            Partition::Hybrid { tp: 2, dp: 2 },
            Partition::Data { dp: 2 },
        ] {
            let run = train_sharded(&cfg, p, COMPARED_STEPS).unwrap();
            // Only the order of the sums changed: not the golden bits, but well within its
            // tolerance (a broken kernel misses it by more than ten times: reference tests).
            assert_ne!(run.losses, golden.losses, "{p:?}: nothing was reordered?");
            let dev = compare_trajectory(
                &run.losses,
                &golden.losses,
                DEFAULT_REL_TOL,
                DEFAULT_ABS_TOL,
            )
            .unwrap_or_else(|e| panic!("{p:?}: {e}"));
            eprintln!(
                "{p:?}: largest relative loss difference {:e}",
                dev.max_rel_diff
            );
            assert!(dev.max_rel_diff < DEFAULT_REL_TOL / 10.0, "{p:?}: {dev:?}");
            // Put back together, the shards are the golden parameters up to rounding.
            let full = unshard_params(&run.ranks[..p.tp()], &cfg.layers, p);
            for (i, (a, b)) in full.iter().zip(&golden.params).enumerate() {
                assert_eq!(a.len(), b.len());
                for (x, y) in a.iter().zip(b) {
                    assert!(
                        (x - y).abs() <= 1e-5 + 1e-4 * y.abs(),
                        "{p:?} tensor {i}: {x} vs {y}"
                    );
                }
            }
        }
    }

    #[test]
    fn shards_agree_across_data_parallel_groups_and_replicated_tensors_everywhere() {
        let cfg = MlpConfig::small();
        let p = Partition::Hybrid { tp: 2, dp: 2 };
        let run = train_sharded(&cfg, p, 4).unwrap();
        assert_eq!(run.ranks.len(), 4);
        // Rank 2 holds rank 0's shards, rank 3 rank 1's: bit for bit.
        assert_eq!(run.ranks[0], run.ranks[2]);
        assert_eq!(run.ranks[1], run.ranks[3]);
        assert_ne!(params_hash(&run.ranks[0]), params_hash(&run.ranks[1]));
        // b_1 (row-parallel) and layer 2 (replicated) are the same on every rank; the column
        // shards of layer 0 are not.
        for r in 1..4 {
            for i in [3, 4, 5] {
                assert_eq!(run.ranks[r][i], run.ranks[0][i], "rank {r} tensor {i}");
            }
        }
        assert_ne!(run.ranks[0][0], run.ranks[1][0]);
        // Shapes: W_0 split by rows (64 x 64 each), W_1 by columns (128 x 64), b_0 halved.
        let lens: Vec<usize> = run.ranks[1].iter().map(Vec::len).collect();
        assert_eq!(lens, [64 * 64, 64, 128 * 64, 128, 10 * 128, 10]);
    }

    #[test]
    fn sharding_and_unsharding_are_inverse_and_group_sums_run_in_rank_order() {
        let cfg = MlpConfig {
            layers: vec![6, 8, 4, 3],
            ..MlpConfig::small()
        };
        let full = init_params(&cfg);
        for p in [Partition::Tensor { tp: 2 }, Partition::Tensor { tp: 4 }] {
            let group: Vec<_> = (0..p.tp())
                .map(|t| shard_params(&full, &cfg.layers, p, t))
                .collect();
            assert_eq!(unshard_params(&group, &cfg.layers, p), full);
        }
        // ((1e8 + 1) + -1e8) = 0 in fp32, (1e8 + -1e8) + 1 would be 1: the order is the rule.
        let (a, b, c) = ([1e8f32], [1.0f32], [-1e8f32]);
        assert_eq!(group_sum(&[&a, &b, &c]), [0.0]);
        assert_eq!(group_sum(&[&a, &c, &b]), [1.0]);
        // Starting from the first value, not from +0: -0 stays -0.
        assert_eq!(
            group_sum(&[&[-0.0f32], &[-0.0]])[0].to_bits(),
            (-0.0f32).to_bits()
        );
    }

    #[test]
    fn runs_that_cannot_be_split_are_refused() {
        let cfg = MlpConfig::small();
        assert!(matches!(
            train_sharded(&cfg, Partition::Tensor { tp: 3 }, 1),
            Err(ShardError::Partition(PartitionError::Indivisible {
                layer: 0,
                ..
            }))
        ));
        assert!(matches!(
            train_sharded(&cfg, Partition::Hybrid { tp: 2, dp: 3 }, 1),
            Err(ShardError::Config(ConfigError::UnevenSplit {
                batch: 256,
                replicas: 3
            }))
        ));
        let bad = MlpConfig {
            lr: -1.0,
            ..MlpConfig::small()
        };
        assert!(matches!(
            train_sharded(&bad, Partition::Tensor { tp: 2 }, 1),
            Err(ShardError::Config(ConfigError::BadLearningRate(_)))
        ));
    }
}
