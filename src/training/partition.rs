//! How the GPUs of a training run share the reference MLP: data-parallel, tensor-parallel in the
//! manner of Megatron-LM, or both (issue 17). Pure sizes and indices, used alike by the CPU
//! reference ([`super::reference::sharded`]) and by the plan ([`super::plan::sharded`]).
//!
//! # Ranks and groups
//!
//! `gpus = tp·dp` ranks. Rank `r` is tensor-parallel rank `t = r % tp` of data-parallel group
//! `g = r / tp` ([`Partition::rank`]). A tensor-parallel (TP) group is a run of `tp` consecutive
//! ranks, `g·tp .. (g+1)·tp`: tensor parallelism communicates on every layer pair, so it goes to
//! the GPUs closest to each other (consecutive GPUs share a switch or a NVLink domain). The
//! data-parallel (DP) group of TP rank `t` is `{t, tp + t, 2·tp + t, ...}`: the ranks that hold the
//! same shards and all-reduce their gradients once a step. Group `g` trains on the samples
//! `g·Bl .. (g+1)·Bl` of each step (as a data-parallel replica does); every rank of a TP group
//! sees the same samples.
//!
//! # Which layer is split how
//!
//! Layers go in pairs from the input, as in Megatron-LM's MLP block: layer `2i` is
//! **column-parallel** ([`Split::Column`]), layer `2i + 1` **row-parallel** ([`Split::Row`]).
//!
//! * Column-parallel layer `l` (`W_l[out][in]`, row-major): TP rank `t` holds the rows
//!   `t·out/tp .. (t+1)·out/tp` of `W_l` and the same slice of `b_l`. Its input is replicated (the
//!   batch, or the all-reduced output of a row-parallel layer), its output is its slice of the
//!   columns of `Y`, bias and ReLU applied locally. No communication forward; backward, the input
//!   gradient `dX = dY_t·W_t` is a partial sum over the output slices and is all-reduced within
//!   the TP group (Megatron's `f` operator), except for layer 0, whose input gradient nobody
//!   needs.
//! * Row-parallel layer `l`: rank `t` holds the columns `t·in/tp .. (t+1)·in/tp` of `W_l` (a
//!   strided block of the full matrix) and the whole bias, replicated. Its input is the column
//!   layer's output slice as it is; its output `X_t·W_tᵀ` is a partial sum over the input slices,
//!   all-reduced within the TP group (Megatron's `g` operator) before the bias and ReLU are
//!   applied. Backward needs no communication: `dY` is replicated and `dX_t = dY·W_t` is the
//!   slice the column layer below wants.
//!
//! So a pair costs two all-reduces of `Bl × width` words per step (one forward, one backward), and
//! the first pair one (forward only): [`Partition::tp_all_reduces`].
//!
//! **An odd number of layers**: the last layer (the classifier) has no partner and is
//! **replicated** ([`Split::Replicated`]): every rank of a TP group holds all of it and computes
//! it whole from the replicated output of the last row-parallel layer, so the softmax and the loss
//! need no communication, and every rank of the group computes the same logits and loss. Its
//! gradients are the same on every rank of a group (same inputs, same operations), so they need no
//! TP all-reduce either. (Megatron splits its vocabulary projection by columns instead, with a
//! parallel cross-entropy: two more all-reduces per step of the per-row maximum and sum, and a
//! class count divisible by `tp`; 10 classes do not split over 4 GPUs, and the classifier is
//! 0.2% of the anchor's parameters.) With an even number of layers the classifier is the
//! row-parallel half of the last pair and the logits come out of the forward all-reduce. A single
//! layer cannot be tensor-parallel ([`PartitionError::NothingToShard`]).
//!
//! The bias of a row-parallel layer and the whole replicated layer are the **replicated
//! tensors**: every rank of a run must hold them bit-identical (see
//! [`Partition::replicated`]).

use std::ops::Range;

/// How the GPUs of a run share the work. One representation per layout: a partition with one
/// GPU per tensor-parallel group is [`Partition::Data`] ([`Partition::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Partition {
    /// Every GPU holds the whole model and trains on its own `1/dp` of the batch; gradients are
    /// all-reduced over all GPUs (the existing data-parallel run).
    Data { dp: usize },
    /// Megatron tensor parallelism over `tp` GPUs: each holds a shard of every layer pair and
    /// sees the whole batch.
    Tensor { tp: usize },
    /// `dp` tensor-parallel groups of `tp` GPUs each, training data-parallel across groups.
    Hybrid { tp: usize, dp: usize },
}

/// How a layer is divided over the ranks of a tensor-parallel group (see the module
/// documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    /// Output features split: rank `t` holds rows `t·out/tp..` of `W` and that slice of `b`.
    Column,
    /// Input features split: rank `t` holds columns `t·in/tp..` of `W`, and all of `b`.
    Row,
    /// Every rank holds the whole layer.
    Replicated,
}

/// Why a partition does not fit a model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    #[error("{what} needs at least {least} GPUs, got {got}")]
    TooFewGpus {
        what: &'static str,
        least: usize,
        got: usize,
    },
    #[error(
        "tensor parallelism needs at least two layers (a column-parallel and a row-parallel one), \
         layers {layers:?} have {depth}"
    )]
    NothingToShard { layers: Vec<usize>, depth: usize },
    #[error(
        "layer {layer} has {width} outputs, which do not split evenly over {tp} tensor-parallel GPUs"
    )]
    Indivisible {
        layer: usize,
        width: usize,
        tp: usize,
    },
}

/// Where one rank's shard of layer `l` sits in the full layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerShard {
    pub split: Split,
    /// Input width the rank multiplies (`in/tp` for a row-parallel layer, else `in`).
    pub din: usize,
    /// Output width the rank produces (`out/tp` for a column-parallel layer, else `out`).
    pub dout: usize,
    /// Element of the full row-major `W_l[out][in]` that is the shard's `[0][0]`: the shard's
    /// `[i][j]` is the full matrix's element `first + i·ld + j`.
    pub first: usize,
    /// Row length of the full matrix (`in`).
    pub ld: usize,
    /// The elements of the full `b_l` the rank holds.
    pub bias: Range<usize>,
}

impl LayerShard {
    /// Elements of the weight shard.
    pub fn weights(&self) -> usize {
        self.din * self.dout
    }

    /// Full-matrix index of each element of the shard, row-major.
    pub fn weight_indices(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.dout).flat_map(move |i| (0..self.din).map(move |j| self.first + i * self.ld + j))
    }
}

impl Partition {
    /// The partition of `tp·dp` GPUs in groups of `tp`: `Data` for `tp = 1`, `Tensor` for
    /// `dp = 1`, else `Hybrid`.
    pub fn of(tp: usize, dp: usize) -> Partition {
        match (tp, dp) {
            (1, dp) => Partition::Data { dp },
            (tp, 1) => Partition::Tensor { tp },
            (tp, dp) => Partition::Hybrid { tp, dp },
        }
    }

    /// GPUs per tensor-parallel group (1 for data parallelism).
    pub fn tp(self) -> usize {
        match self {
            Partition::Data { .. } => 1,
            Partition::Tensor { tp } | Partition::Hybrid { tp, .. } => tp,
        }
    }

    /// Data-parallel groups (1 for pure tensor parallelism).
    pub fn dp(self) -> usize {
        match self {
            Partition::Tensor { .. } => 1,
            Partition::Data { dp } | Partition::Hybrid { dp, .. } => dp,
        }
    }

    pub fn gpus(self) -> usize {
        self.tp() * self.dp()
    }

    /// `(group, tp_rank)` of a rank.
    pub fn rank(self, rank: usize) -> (usize, usize) {
        (rank / self.tp(), rank % self.tp())
    }

    /// The ranks of tensor-parallel group `g`, ascending.
    pub fn tp_group(self, g: usize) -> Vec<usize> {
        (g * self.tp()..(g + 1) * self.tp()).collect()
    }

    /// The ranks holding TP rank `t`'s shards (one per data-parallel group), ascending.
    pub fn dp_group(self, t: usize) -> Vec<usize> {
        (0..self.dp()).map(|g| g * self.tp() + t).collect()
    }

    /// How layer `l` of a model of `depth` layers is divided (everything is replicated without
    /// tensor parallelism).
    pub fn split(self, depth: usize, l: usize) -> Split {
        if self.tp() == 1 || (l % 2 == 0 && l + 1 == depth) {
            Split::Replicated
        } else if l % 2 == 0 {
            Split::Column
        } else {
            Split::Row
        }
    }

    /// TP rank `t`'s shard of layer `l` of `layers` (call [`Partition::check`] first).
    pub fn shard(self, layers: &[usize], l: usize, t: usize) -> LayerShard {
        let (din, dout) = (layers[l], layers[l + 1]);
        let tp = self.tp();
        match self.split(layers.len() - 1, l) {
            Split::Column => {
                let rows = dout / tp;
                LayerShard {
                    split: Split::Column,
                    din,
                    dout: rows,
                    first: t * rows * din,
                    ld: din,
                    bias: t * rows..(t + 1) * rows,
                }
            }
            Split::Row => {
                let cols = din / tp;
                LayerShard {
                    split: Split::Row,
                    din: cols,
                    dout,
                    first: t * cols,
                    ld: din,
                    bias: 0..dout,
                }
            }
            Split::Replicated => LayerShard {
                split: Split::Replicated,
                din,
                dout,
                first: 0,
                ld: din,
                bias: 0..dout,
            },
        }
    }

    /// Whether the partition fits `layers`: at least one GPU per group and one group; with tensor
    /// parallelism at least two GPUs per group, two layers, and every column-parallel layer's
    /// output width (the row-parallel layer's input) divisible by `tp`. A hybrid has at least two
    /// groups. (The batch's split over the groups is the data-parallel one, checked by
    /// [`super::reference::replica_samples`].)
    pub fn check(self, layers: &[usize]) -> Result<(), PartitionError> {
        let few = |what, least, got| Err(PartitionError::TooFewGpus { what, least, got });
        match self {
            Partition::Data { dp } if dp < 1 => return few("data parallelism", 1, dp),
            Partition::Tensor { tp } | Partition::Hybrid { tp, .. } if tp < 2 => {
                return few("a tensor-parallel group", 2, tp)
            }
            Partition::Hybrid { dp, .. } if dp < 2 => {
                return few("hybrid parallelism (groups)", 2, dp)
            }
            _ => {}
        }
        let depth = layers.len().saturating_sub(1);
        if self.tp() > 1 && depth < 2 {
            return Err(PartitionError::NothingToShard {
                layers: layers.to_vec(),
                depth,
            });
        }
        for l in 0..depth {
            if self.split(depth, l) == Split::Column && layers[l + 1] % self.tp() != 0 {
                return Err(PartitionError::Indivisible {
                    layer: l,
                    width: layers[l + 1],
                    tp: self.tp(),
                });
            }
        }
        Ok(())
    }

    /// Whether tensor `2l + bias` of the reference order (`W_l` or `b_l`) is whole and the same
    /// on every rank: the weights and bias of a replicated layer, the bias of a row-parallel one.
    pub fn replicated(self, depth: usize, l: usize, bias: bool) -> bool {
        match self.split(depth, l) {
            Split::Replicated => true,
            Split::Row => bias,
            Split::Column => false,
        }
    }

    /// The tensor-parallel all-reduces of one step, in the order a rank issues them: `(layer,
    /// forward)` for the forward all-reduce after row-parallel layer `layer` and the backward
    /// all-reduce of column-parallel layer `layer`'s input gradient (not for layer 0); the
    /// words of each are `Bl ×` [`Partition::tp_all_reduce_width`].
    pub fn tp_all_reduces(self, depth: usize) -> Vec<(usize, bool)> {
        let fwd = (0..depth)
            .filter(|&l| self.split(depth, l) == Split::Row)
            .map(|l| (l, true));
        let bwd = (1..depth)
            .rev()
            .filter(|&l| self.split(depth, l) == Split::Column)
            .map(|l| (l, false));
        fwd.chain(bwd).collect()
    }

    /// Words per sample of the tensor-parallel all-reduce of `layer` (forward: its output width;
    /// backward: its input width).
    pub fn tp_all_reduce_width(layers: &[usize], layer: usize, forward: bool) -> usize {
        if forward {
            layers[layer + 1]
        } else {
            layers[layer]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_representation_per_layout_and_ranks_in_groups() {
        assert_eq!(Partition::of(1, 8), Partition::Data { dp: 8 });
        assert_eq!(Partition::of(4, 1), Partition::Tensor { tp: 4 });
        assert_eq!(Partition::of(2, 4), Partition::Hybrid { tp: 2, dp: 4 });
        assert_eq!(Partition::of(1, 1), Partition::Data { dp: 1 });
        let h = Partition::Hybrid { tp: 4, dp: 2 };
        assert_eq!((h.tp(), h.dp(), h.gpus()), (4, 2, 8));
        assert_eq!(h.rank(6), (1, 2));
        assert_eq!(h.tp_group(1), [4, 5, 6, 7]);
        assert_eq!(h.dp_group(2), [2, 6]);
        let t = Partition::Tensor { tp: 2 };
        assert_eq!(
            (t.tp(), t.dp(), t.tp_group(0), t.dp_group(1)),
            (2, 1, vec![0, 1], vec![1])
        );
        let d = Partition::Data { dp: 3 };
        assert_eq!(
            (d.tp(), d.dp(), d.tp_group(2), d.dp_group(0)),
            (1, 3, vec![2], vec![0, 1, 2])
        );
    }

    #[test]
    fn layers_pair_column_then_row_and_an_odd_last_is_replicated() {
        use Split::*;
        let t = Partition::Tensor { tp: 2 };
        let splits = |depth| (0..depth).map(|l| t.split(depth, l)).collect::<Vec<_>>();
        assert_eq!(splits(2), [Column, Row]);
        assert_eq!(splits(3), [Column, Row, Replicated]);
        assert_eq!(splits(4), [Column, Row, Column, Row]);
        assert_eq!(splits(5), [Column, Row, Column, Row, Replicated]);
        let d = Partition::Data { dp: 4 };
        assert!((0..4).all(|l| d.split(4, l) == Replicated));
        // Replicated tensors: the odd last layer, and the biases of row-parallel layers.
        let rep: Vec<(usize, bool)> = (0..3)
            .flat_map(|l| [(l, false), (l, true)])
            .filter(|&(l, b)| t.replicated(3, l, b))
            .collect();
        assert_eq!(rep, [(1, true), (2, false), (2, true)]);
    }

    #[test]
    fn shards_tile_each_full_layer_exactly_once() {
        let layers = [6, 8, 4, 3];
        for tp in [2, 4] {
            let p = Partition::Tensor { tp };
            p.check(&layers).unwrap();
            for l in 0..3 {
                let (din, dout) = (layers[l], layers[l + 1]);
                let mut w = vec![0usize; din * dout];
                let mut b = vec![0usize; dout];
                for t in 0..tp {
                    let s = p.shard(&layers, l, t);
                    assert_eq!(s.weight_indices().count(), s.weights());
                    for i in s.weight_indices() {
                        w[i] += 1;
                    }
                    for i in s.bias.clone() {
                        b[i] += 1;
                    }
                }
                match p.split(3, l) {
                    // Each weight on exactly one rank; the bias sliced or replicated with them.
                    Split::Column => {
                        assert!(w.iter().chain(&b).all(|&c| c == 1), "{l}: {w:?} {b:?}")
                    }
                    Split::Row => {
                        assert!(w.iter().all(|&c| c == 1) && b.iter().all(|&c| c == tp))
                    }
                    Split::Replicated => assert!(w.iter().chain(&b).all(|&c| c == tp)),
                }
            }
        }
        // Rank 1 of 2, row-parallel layer 1 (8 -> 4): columns 4..8 of each of the 4 rows.
        let s = Partition::Tensor { tp: 2 }.shard(&layers, 1, 1);
        assert_eq!((s.din, s.dout, s.first, s.ld), (4, 4, 4, 8));
        assert_eq!(
            s.weight_indices().take(6).collect::<Vec<_>>(),
            [4, 5, 6, 7, 12, 13]
        );
        // Rank 1 of 2, column-parallel layer 0 (6 -> 8): rows 4..8, contiguous.
        let s = Partition::Tensor { tp: 2 }.shard(&layers, 0, 1);
        assert_eq!((s.din, s.dout, s.first, s.bias), (6, 4, 24, 4..8));
    }

    #[test]
    fn partitions_that_do_not_fit_are_refused_by_name() {
        let layers = [64, 128, 128, 10];
        assert_eq!(Partition::Tensor { tp: 4 }.check(&layers), Ok(()));
        assert_eq!(Partition::Hybrid { tp: 2, dp: 2 }.check(&layers), Ok(()));
        assert_eq!(Partition::Data { dp: 1 }.check(&[3, 5]), Ok(()));
        // 10 classes are replicated, so they need not divide; 128 over 3 does not.
        assert_eq!(
            Partition::Tensor { tp: 3 }.check(&layers),
            Err(PartitionError::Indivisible {
                layer: 0,
                width: 128,
                tp: 3
            })
        );
        // With four layers the second pair's column layer is layer 2.
        let e = Partition::Tensor { tp: 4 }
            .check(&[64, 128, 6, 6, 10])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "layer 2 has 6 outputs, which do not split evenly over 4 tensor-parallel GPUs"
        );
        // A row-parallel layer's output is whole: 6 need not divide.
        assert!(Partition::Tensor { tp: 4 }
            .check(&[64, 128, 6, 8, 10])
            .is_ok());
        assert!(matches!(
            Partition::Tensor { tp: 2 }.check(&[64, 10]),
            Err(PartitionError::NothingToShard { depth: 1, .. })
        ));
        for bad in [
            Partition::Tensor { tp: 1 },
            Partition::Hybrid { tp: 1, dp: 2 },
            Partition::Hybrid { tp: 2, dp: 1 },
            Partition::Data { dp: 0 },
        ] {
            assert!(
                matches!(bad.check(&layers), Err(PartitionError::TooFewGpus { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_pair_all_reduces_twice_the_first_pair_once() {
        let t = Partition::Tensor { tp: 2 };
        // [in, h, h, c]: pair (0, 1), classifier replicated: the forward after layer 1 only.
        assert_eq!(t.tp_all_reduces(3), [(1, true)]);
        // Five layers: pairs (0, 1) and (2, 3): forward after 1 and 3, backward into layer 2.
        assert_eq!(t.tp_all_reduces(5), [(1, true), (3, true), (2, false)]);
        assert_eq!(t.tp_all_reduces(4), [(1, true), (3, true), (2, false)]);
        assert!(Partition::Data { dp: 8 }.tp_all_reduces(5).is_empty());
        let layers = [64, 128, 96, 32, 10];
        assert_eq!(Partition::tp_all_reduce_width(&layers, 3, true), 10);
        assert_eq!(Partition::tp_all_reduce_width(&layers, 2, false), 96);
    }
}
