//! Workload fit: what bounds each way of spreading the reference MLP over this node's GPUs, and
//! how much of linear scaling each keeps, predicted from the node's own measured parts.
//!
//! Inputs are medians the run measured ([`NodeRates`]): the slowest GPU's GEMM rate in the
//! training precision (the compute check), the slowest GPU's device-memory bandwidth (the
//! device-local copy, bytes read plus written) and the time of an all-reduce over all GPUs at
//! each size (the all_reduce collective). For each method, one rank's step is split into:
//! - compute: its GEMM flops (from the plan's shapes: a tensor-parallel rank multiplies its
//!   shards, and the replicated classifier whole) at the GEMM rate;
//! - memory: the bytes its element-wise kernels and the update move ([`memory_bytes`]) at the
//!   device-memory bandwidth;
//! - communication: each all-reduce the plan issues ([`comm_per_step`]) at the measured time of
//!   an all-reduce of its size. A tensor-parallel all-reduce sits between a layer and the next
//!   and is exposed whole; the data-parallel gradient all-reduce overlaps the backward pass
//!   (about 60% of the compute, as PyTorch DDP's buckets do) and only the rest is exposed.
//!
//! The step is their sum; it is bound by the largest part. Scaling keeps
//! `samples per second on N GPUs / (N × samples per second on one)`, one GPU's step being its
//! compute and memory time. This is a model of measured parts, not a measurement: the report
//! says so, and shows the data-parallel run's measured step beside its prediction. Two
//! simplifications are stated with it: a group of fewer GPUs than the node is taken to
//! all-reduce as fast as all of them at the same size, and no per-pair slowness is seen beyond
//! what the all-GPU all-reduce already shows.

use super::partition::Partition;
use super::plan::sharded::comm_per_step;
use super::plan::Model;
use crate::suite::TrainingCheck;
use serde::Serialize;

/// What limits a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    Compute,
    Memory,
    Communication,
}

impl Bound {
    pub fn describe(self) -> &'static str {
        match self {
            Bound::Compute => "compute",
            Bound::Memory => "memory",
            Bound::Communication => "communication",
        }
    }
}

/// The node's measured parts.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRates {
    /// The slowest GPU's GEMM rate in the training precision, TFLOP/s.
    pub gemm_tflops: f64,
    /// The slowest GPU's device-local copy, bytes read plus written, GB/s.
    pub memory_gbps: f64,
    /// All-reduce over all GPUs: (bytes, median time in microseconds), by size.
    pub all_reduce_us: Vec<(u64, f64)>,
}

impl NodeRates {
    /// Time of an all-reduce of `bytes`, microseconds: linear between the measured sizes around
    /// it (an all-reduce's time is nearly affine in its size), the smallest size's time below
    /// them, and the largest size's rate above them.
    pub fn all_reduce_time_us(&self, bytes: u64) -> Option<f64> {
        let pts = &self.all_reduce_us;
        let (first, last) = (pts.first()?, pts.last()?);
        if bytes <= first.0 {
            return Some(first.1);
        }
        if bytes >= last.0 {
            return Some(last.1 * bytes as f64 / last.0 as f64);
        }
        let i = pts.iter().position(|p| p.0 >= bytes)?;
        let (a, b) = (pts[i - 1], pts[i]);
        let t = (bytes - a.0) as f64 / (b.0 - a.0) as f64;
        Some(a.1 + t * (b.1 - a.1))
    }
}

/// The parts a run measured, as the fit needs them: the slowest GPU's GEMM rate in `precision`
/// and device-local copy, and the all_reduce's median time per size; or what was not measured.
pub fn node_rates(
    ev: &crate::evidence::Evidence,
    precision: crate::suite::Precision,
) -> Result<NodeRates, Vec<String>> {
    use crate::suite::Precision;
    let slowest = |check: &str, metric: &str| -> Option<f64> {
        ev.check(check)?
            .metrics
            .iter()
            .filter(|m| m.name == metric)
            .map(|m| m.median)
            .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.min(v))))
    };
    let gemm_metric = match precision {
        Precision::Fp32 => "fp32_tflops",
        Precision::Tf32 => "tf32_tflops",
        Precision::Bf16 => "bf16_tflops",
    };
    let mut all_reduce_us: Vec<(u64, f64)> = ev
        .check("collective.all_reduce")
        .map(|c| {
            c.metrics
                .iter()
                .filter(|m| m.name == "time")
                .filter_map(|m| Some((m.subject.bytes?, m.median)))
                .collect()
        })
        .unwrap_or_default();
    all_reduce_us.sort_by_key(|p| p.0);
    let gemm = slowest("compute", gemm_metric);
    let memory = slowest("host_bandwidth", "device_copy");
    let missing: Vec<String> = [
        gemm.is_none()
            .then(|| format!("the compute check's {gemm_metric}")),
        memory
            .is_none()
            .then(|| "the device-local copy (host_bandwidth)".to_string()),
        (ev.node.gpus.len() > 1 && all_reduce_us.is_empty())
            .then(|| "the all_reduce collective".to_string()),
    ]
    .into_iter()
    .flatten()
    .collect();
    match (gemm, memory) {
        (Some(gemm_tflops), Some(memory_gbps)) if missing.is_empty() => Ok(NodeRates {
            gemm_tflops,
            memory_gbps,
            all_reduce_us,
        }),
        _ => Err(missing),
    }
}

/// One method's predicted step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MethodFit {
    /// "data-parallel", "tensor-parallel", "hybrid (tensor 2 x data 4)".
    pub method: String,
    pub gpus: usize,
    pub compute_ms: f64,
    pub memory_ms: f64,
    /// All-reduce time of a step, exposed or not.
    pub comm_ms: f64,
    /// The part of it the step waits for.
    pub exposed_comm_ms: f64,
    pub step_ms: f64,
    pub samples_per_s: f64,
    /// Of linear scaling from one GPU, 0 to 1.
    pub scaling: f64,
    /// Exposed communication over the step.
    pub comm_share: f64,
    pub bound: Bound,
}

impl MethodFit {
    /// "tensor-parallel over 8 GPUs keeps 71% of linear scaling here; communication is 24% of its
    /// step (bound by compute)".
    pub fn sentence(&self) -> String {
        format!(
            "{} over {} GPU{} keeps {:.0}% of linear scaling here; communication is {:.0}% of its \
             step (bound by {})",
            self.method,
            self.gpus,
            if self.gpus == 1 { "" } else { "s" },
            100.0 * self.scaling,
            100.0 * self.comm_share,
            self.bound.describe()
        )
    }
}

/// A method and its prediction, or why it does not apply to this model and node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitRow {
    pub method: String,
    pub fit: Option<MethodFit>,
    pub not_applicable: Option<String>,
}

/// The methods compared on a node of `gpus` GPUs: data-parallel, tensor-parallel over all of
/// them, and hybrids of tensor-parallel groups of 2 and of 4 (where they leave two groups).
pub fn methods(gpus: usize) -> Vec<Partition> {
    let mut out = vec![Partition::Data { dp: gpus }];
    if gpus >= 2 {
        out.push(Partition::Tensor { tp: gpus });
    }
    for tp in [2, 4] {
        if gpus % tp == 0 && gpus / tp >= 2 {
            out.push(Partition::Hybrid { tp, dp: gpus / tp });
        }
    }
    out
}

/// A method as people say it.
pub fn method_name(p: Partition) -> String {
    match p {
        Partition::Data { .. } => "data-parallel".into(),
        Partition::Tensor { .. } => "tensor-parallel".into(),
        Partition::Hybrid { tp, dp } => format!("hybrid (tensor {tp} x data {dp})"),
    }
}

/// GEMM flops of one rank's step with `layers` split as `p`, `bl` samples per tensor-parallel
/// group: forward and `dW` for every layer, `dX` below the first (as [`Model::step_flops`]).
pub fn rank_flops(layers: &[usize], p: Partition, bl: usize) -> f64 {
    let depth = layers.len() - 1;
    (0..depth)
        .map(|l| {
            let s = p.shard(layers, l, 0);
            let passes = if l > 0 { 3.0 } else { 2.0 };
            2.0 * bl as f64 * s.weights() as f64 * passes
        })
        .sum()
}

/// Bytes one rank's element-wise work moves in a step: each layer output it holds is written by
/// its GEMM, read and written by the bias and activation, and in the backward pass its gradient
/// read and written by the ReLU mask and read by the weight-gradient GEMM's neighbours (5 passes
/// of 4-byte words); the update reads parameters and gradients and writes parameters (3 passes).
pub fn memory_bytes(layers: &[usize], p: Partition, bl: usize) -> f64 {
    let depth = layers.len() - 1;
    let mut words = 0.0;
    for l in 0..depth {
        let s = p.shard(layers, l, 0);
        words += 5.0 * bl as f64 * s.dout as f64;
        // The rank's bias is as wide as its output: a column shard's, or the whole one a
        // row-parallel or replicated layer keeps on every rank.
        words += 3.0 * (s.weights() + s.dout) as f64;
    }
    4.0 * words
}

/// The share of the compute that the data-parallel gradient all-reduce can hide behind (the
/// backward pass, as the simulated node assumes too).
pub const OVERLAP: f64 = 0.6;

/// Predict each method of [`methods`] for the suite's training run on `gpus` GPUs.
pub fn analyse(cfg: &TrainingCheck, gpus: usize, rates: &NodeRates) -> Vec<FitRow> {
    let layers = &cfg.layers;
    let bl = cfg.batch;
    let single = step_parts(layers, Partition::Data { dp: 1 }, bl, rates).map(|(c, m, _, _)| c + m);
    methods(gpus)
        .into_iter()
        .map(|p| {
            let method = method_name(p);
            let fit = || -> Result<MethodFit, String> {
                p.check(layers).map_err(|e| e.to_string())?;
                let (compute_ms, memory_ms, comm_ms, exposed_comm_ms) =
                    step_parts(layers, p, bl, rates)?;
                let step_ms = compute_ms + memory_ms + exposed_comm_ms;
                // A tensor-parallel group trains on `bl` samples; data-parallel groups add up.
                let samples = (bl * p.dp()) as f64;
                let samples_per_s = samples / (step_ms / 1e3);
                let one = single.clone()?;
                let scaling = samples_per_s / (gpus as f64 * bl as f64 / (one / 1e3));
                let parts = [
                    (Bound::Compute, compute_ms),
                    (Bound::Memory, memory_ms),
                    (Bound::Communication, exposed_comm_ms),
                ];
                let bound = parts
                    .iter()
                    .fold(parts[0], |a, b| if b.1 > a.1 { *b } else { a })
                    .0;
                Ok(MethodFit {
                    method: method.clone(),
                    gpus,
                    compute_ms,
                    memory_ms,
                    comm_ms,
                    exposed_comm_ms,
                    step_ms,
                    samples_per_s,
                    scaling,
                    comm_share: exposed_comm_ms / step_ms,
                    bound,
                })
            };
            match fit() {
                Ok(f) => FitRow {
                    method,
                    fit: Some(f),
                    not_applicable: None,
                },
                Err(why) => FitRow {
                    method,
                    fit: None,
                    not_applicable: Some(why),
                },
            }
        })
        .collect()
}

/// (compute, memory, communication, exposed communication) of one rank's step, ms.
fn step_parts(
    layers: &[usize],
    p: Partition,
    bl: usize,
    rates: &NodeRates,
) -> Result<(f64, f64, f64, f64), String> {
    // The model comes from a suite, or from evidence read back, which nothing validated: the
    // sums below need what a suite's validation guarantees.
    use crate::suite::{
        param_count, MAX_BATCH, MAX_LAYERS, MAX_TRAINING_PARAMS, MAX_TRAINING_WIDTH,
    };
    let widths_ok = (2..=MAX_LAYERS).contains(&layers.len())
        && layers.iter().all(|w| (1..=MAX_TRAINING_WIDTH).contains(w));
    if !widths_ok
        || param_count(layers).is_none_or(|n| n > MAX_TRAINING_PARAMS)
        || !(1..=MAX_BATCH).contains(&bl)
    {
        return Err(format!(
            "the training model (layers {layers:?}, batch {bl}) is not one a suite may state"
        ));
    }
    if !(rates.gemm_tflops > 0.0 && rates.memory_gbps > 0.0) {
        return Err("no GEMM rate or memory bandwidth was measured".into());
    }
    let compute = rank_flops(layers, p, bl) / (rates.gemm_tflops * 1e12) * 1e3;
    let memory = memory_bytes(layers, p, bl) / (rates.memory_gbps * 1e9) * 1e3;
    let base = Model {
        layers: layers.to_vec(),
        local_batch: bl,
        replicas: p.dp(),
        lr: 0.01,
        seed: 0,
        math: super::plan::Math::Fp32,
    };
    let v = comm_per_step(&base, p).map_err(|e| e.to_string())?;
    let time = |t: &super::plan::sharded::Traffic| -> Result<f64, String> {
        if t.calls == 0 || t.ranks < 2 {
            return Ok(0.0);
        }
        let each = t.bytes / t.calls as u64;
        let us = rates
            .all_reduce_time_us(each)
            .ok_or("no all_reduce time was measured")?;
        Ok(t.calls as f64 * us / 1e3)
    };
    let tensor = time(&v.tensor)?;
    let data = time(&v.data)?;
    let exposed = tensor + (data - OVERLAP * compute).max(0.0);
    Ok((compute, memory, tensor + data, exposed))
}

#[cfg(test)]
mod tests;
