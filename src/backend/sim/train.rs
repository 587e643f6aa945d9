//! The simulated node's training runs, modelled from its compute and link figures: the
//! data-parallel run, and the same model partitioned tensor-parallel or hybrid
//! ([`Partition`]). A step is the slowest GPU's GEMM time plus the communication it waits for:
//! a tensor-parallel all-reduce sits between two layers and is waited for whole, on its own
//! group's links; the data-parallel gradient all-reduce hides behind the backward pass
//! ([`fit::OVERLAP`] of the compute) and only the rest is waited for. The golden losses are
//! really trained, on the CPU, partitioned the same way ([`reference::sharded`]).

use super::*;
use crate::suite::{Precision, TrainingCheck};
use crate::training::fit;
use crate::training::partition::Partition;
use crate::training::plan::sharded::{Inconsistency, Sharded, Traffic};
use crate::training::plan::Model;
use crate::training::reference;

/// How many times the simulation may train the golden configuration on the CPU at the suite's
/// bound: once for the truth, once per partitioning (a node of 8 GPUs plans up to 4 of them).
const SIM_GOLDEN_COPIES: u64 = 8;

/// Whether the simulation trains the golden configuration of `cfg` again, sharded, for each
/// partitioning: while its work is at most an eighth of the suite's bound.
fn golden_sharded(cfg: &TrainingCheck) -> bool {
    crate::suite::golden_work(cfg)
        .is_some_and(|w| w <= crate::suite::MAX_GOLDEN_WORK / SIM_GOLDEN_COPIES)
}

impl SimBackend {
    /// The data-parallel run: every GPU a replica of the whole model, gradients all-reduced
    /// over all of them in buckets that overlap the backward pass. The step waits on the
    /// slowest GPU (slow-compute, thermal slowdown); the one-GPU baseline runs on GPU 0.
    pub(super) fn train_data_parallel(
        &mut self,
        cfg: &TrainingCheck,
    ) -> Result<TrainingRun, HwError> {
        // A transient fault shows on the measurements of its own figure only.
        self.nth = u32::MAX;
        let n = self.n();
        let params = crate::training::plan::mlp_params(&cfg.layers);
        let one_gpu_ms = self.one_gpu_compute_ms(cfg)?;
        let compute_ms = one_gpu_ms / self.slowest_compute();
        let grad_bytes = params * 4;
        let comm_ms = if n > 1 {
            self.coll_time_us(CollectiveOp::AllReduce, grad_bytes, false) / 1e3
        } else {
            0.0
        };
        // Bucketed all-reduce overlaps with the backward pass (about 2/3 of the compute).
        let exposed = (comm_ms - fit::OVERLAP * compute_ms).max(0.05 * comm_ms);
        let step = compute_ms + exposed;
        let steps = cfg.steps as u32;
        let step_ms = self.samples("train step", step, steps);
        let comm = self.samples("train comm", comm_ms, steps);
        let exposed_ms = self.samples("train exposed", exposed, steps);
        // Loss of the large run, modelled on the CPU reference's trajectories (computed with
        // ci/loss_trajectory.py): it starts above ln(classes) (the initial logits are wide) and
        // falls with lr x steps, faster for wider hidden layers. E.g. 1024-4096-4096-10 at lr 0.02:
        // 2.71 -> 1.90 in 150 steps; 1024-8192-8192-10 at lr 0.01: 2.54 -> 2.06 in 100.
        let classes = *cfg.layers.last().unwrap_or(&10) as f64;
        let start = classes.ln() + 0.4;
        let floor = 0.5 * classes.ln();
        let hidden = cfg
            .layers
            .get(1..cfg.layers.len().saturating_sub(1))
            .unwrap_or(&[])
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let kappa = 4.0 * 4096.0 / hidden;
        let mut rng = self.rng("train loss");
        let losses: Vec<f64> = (0..cfg.steps)
            .map(|t| floor + (start - floor) * (-cfg.lr * t as f64 / kappa).exp())
            .map(|l| l * (1.0 + 0.005 * rng.random_range(-1.0..1.0)))
            .collect();
        // The golden configuration really is trained, on the CPU: a healthy simulated GPU sums in
        // another order (as real ones do); `wrong-loss` runs a broken ReLU-backward kernel.
        let flaw = if self.faults_of(FaultKind::WrongLoss).next().is_some() {
            crate::training::reference::Flaw::ReluGradLeaks
        } else {
            crate::training::reference::Flaw::ReorderedSums
        };
        let golden_node_losses =
            crate::training::cpu_losses(&crate::training::golden_config(cfg), flaw).map_err(
                |e| HwError::Call {
                    call: "simulated golden training".into(),
                    detail: e.to_string(),
                },
            )?;
        let hash = hex::encode(Sha256::digest(format!(
            "{}-{}-{:?}",
            self.node.name, self.seed, cfg.layers
        )));
        let mut hashes = vec![hash.clone(); n];
        for f in self.faults_of(FaultKind::ReplicaMismatch) {
            let g = f.gpu.unwrap_or(n - 1).min(n - 1);
            hashes[g] = hex::encode(Sha256::digest(format!("{hash}-diverged")));
        }
        Ok(TrainingRun {
            golden_node_losses,
            losses,
            replica_hashes: hashes,
            step_ms,
            exposed_comm_ms: exposed_ms,
            comm_ms: comm,
            batch_per_gpu: cfg.batch,
            gpus: n,
            single_gpu_samples_per_s: Some(
                cfg.batch as f64 / (one_gpu_ms / self.compute_factor(0) / 1e3),
            ),
            gradient_bytes: grad_bytes,
            precision: cfg.precision,
        })
    }

    /// The training run's GEMM rate in its precision, TFLOP/s (a healthy GPU).
    fn train_tflops(&self, cfg: &TrainingCheck) -> Result<f64, HwError> {
        Ok(match cfg.precision {
            Precision::Fp32 => self.node.perf.fp32_tflops,
            Precision::Tf32 => self.node.perf.fp32_tflops * 4.0,
            Precision::Bf16 => self.bf16_step_tflops(cfg)?,
        })
    }

    /// One healthy GPU's compute time of a data-parallel step of `cfg`, ms: 6 flops per
    /// parameter and sample at the training precision's rate.
    fn one_gpu_compute_ms(&self, cfg: &TrainingCheck) -> Result<f64, HwError> {
        let params: f64 = cfg
            .layers
            .windows(2)
            .map(|w| (w[0] * w[1] + w[1]) as f64)
            .sum();
        Ok(cfg.batch as f64 * 6.0 * params / (self.train_tflops(cfg)? * 1e12) * 1e3)
    }

    /// The share of its rate the slowest GPU keeps: GPUs training in lockstep wait on it.
    fn slowest_compute(&self) -> f64 {
        (0..self.n())
            .map(|g| self.compute_factor(g))
            .fold(1.0, f64::min)
    }

    /// Milliseconds one rank of every group of a kind spends in that kind's all-reduces a step
    /// (`traffic`), the slowest group's: each group all-reduces over its own links.
    fn group_comm_ms(&self, traffic: &Traffic, groups: &[Vec<usize>]) -> f64 {
        if traffic.calls == 0 || traffic.ranks < 2 {
            return 0.0;
        }
        let each = traffic.bytes / traffic.calls as u64;
        groups
            .iter()
            .map(|ranks| {
                traffic.calls as f64
                    * self.coll_time_over_us(CollectiveOp::AllReduce, each, false, ranks)
                    / 1e3
            })
            .fold(0.0, f64::max)
    }

    /// The suite's model partitioned as `p` over every GPU (see the module documentation).
    pub(super) fn train_partitioned(
        &mut self,
        cfg: &TrainingCheck,
        p: Partition,
    ) -> Result<MethodRun, HwError> {
        self.nth = u32::MAX;
        let n = self.n();
        if p.gpus() != n {
            return Err(HwError::NotSupported(format!(
                "{p:?} needs {} GPUs; the node has {n}",
                p.gpus()
            )));
        }
        // What the GPU plan refuses (bf16, widths the groups do not divide), refused alike.
        let base = Model::main(cfg, p.dp())?;
        let sharded = Sharded::new(base, p)?;
        let golden = golden_partitioned(cfg, p)?;
        // The data-parallel model's step, scaled to the GEMM work one rank does.
        let one = Partition::Data { dp: 1 };
        let compute_ms = self.one_gpu_compute_ms(cfg)? * fit::rank_flops(&cfg.layers, p, cfg.batch)
            / fit::rank_flops(&cfg.layers, one, cfg.batch)
            / self.slowest_compute();
        let v = sharded.comm_per_step();
        let tp_groups: Vec<Vec<usize>> = (0..p.dp()).map(|g| p.tp_group(g)).collect();
        let dp_groups: Vec<Vec<usize>> = (0..p.tp()).map(|t| p.dp_group(t)).collect();
        let tensor_ms = self.group_comm_ms(&v.tensor, &tp_groups);
        let data_ms = self.group_comm_ms(&v.data, &dp_groups);
        let exposed = tensor_ms + (data_ms - fit::OVERLAP * compute_ms).max(0.05 * data_ms);
        let steps = cfg.steps as u32;
        let tag = format!("train {p:?}");
        let step_ms = self.samples(&format!("{tag} step"), compute_ms + exposed, steps);
        let comm_ms = self.samples(&format!("{tag} comm"), tensor_ms + data_ms, steps);
        let exposed_comm_ms = self.samples(&format!("{tag} exposed"), exposed, steps);
        // The golden configuration trained partitioned on the CPU sums in the order of the
        // shards, as GPUs would; `wrong-loss` is a broken kernel every partitioning runs.
        // A suite's golden work is bounded for one training (`MAX_GOLDEN_WORK`, minutes of CPU);
        // the simulation trains it again for each partitioning. Past an eighth of the bound,
        // the partitioned runs take the unsharded golden losses (only the order of the sums
        // differs), so that a rehearsal stays within minutes too.
        let wrong_loss = self.faults_of(FaultKind::WrongLoss).next().is_some();
        let golden_node_losses = if wrong_loss || !golden_sharded(cfg) {
            let flaw = match wrong_loss {
                true => reference::Flaw::ReluGradLeaks,
                false => reference::Flaw::None,
            };
            crate::training::cpu_losses(&golden, flaw)
                .map_err(|e| sim_call("simulated golden training", e))?
        } else {
            crate::training::sharded_cpu_losses(&golden, p)
                .map_err(|e| sim_call("simulated golden training", e))?
        };
        Ok(MethodRun {
            tp: p.tp(),
            dp: p.dp(),
            golden_node_losses,
            step_ms,
            comm_ms,
            exposed_comm_ms,
            samples_per_step: cfg.batch * p.dp(),
            inconsistency: self.inconsistency(p).map(|i| i.to_string()),
        })
    }

    /// What the faults make ranks of `p` disagree on: a replica that diverges (replica-mismatch)
    /// holds other shards than its data-parallel peers, or other replicated tensors; an
    /// all-reduce that corrupts (collective-corrupt on all_reduce) gives its tensor-parallel
    /// group different sums.
    fn inconsistency(&self, p: Partition) -> Option<Inconsistency> {
        let n = self.n();
        let on = |f: &Fault| f.gpu.unwrap_or(n - 1).min(n - 1);
        if let Some(f) = self
            .faults_of(FaultKind::CollectiveCorrupt)
            .find(|f| f.op.unwrap_or(CollectiveOp::AllReduce) == CollectiveOp::AllReduce)
        {
            let rank = on(f);
            let group = p.tp_group(p.rank(rank).0);
            // A rank alone in its group has no one to disagree with.
            if let Some(&other) = group.iter().find(|&&r| r != rank) {
                return Some(Inconsistency::LossSums {
                    rank: rank.max(other),
                    first: rank.min(other),
                    step: 0,
                });
            }
        }
        let f = self.faults_of(FaultKind::ReplicaMismatch).next()?;
        let rank = on(f);
        let peers = p.dp_group(p.rank(rank).1);
        Some(match peers.iter().find(|&&r| r != rank) {
            Some(&other) => Inconsistency::Shards {
                rank: rank.max(other),
                first: rank.min(other),
            },
            None => Inconsistency::Replicated {
                rank: if rank == 0 { 1 } else { rank },
            },
        })
    }
}

/// The golden configuration for a run partitioned as `p` (its global batch, split over the
/// groups), or why it cannot be so partitioned: as the GPU plan refuses it.
fn golden_partitioned(cfg: &TrainingCheck, p: Partition) -> Result<reference::MlpConfig, HwError> {
    Sharded::golden(cfg, p)?;
    Ok(crate::training::golden_config(cfg))
}

fn sim_call(call: &str, e: impl std::fmt::Display) -> HwError {
    HwError::Call {
        call: call.into(),
        detail: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(node: &str, faults: &[&str]) -> SimBackend {
        let faults = faults
            .iter()
            .map(|f| Fault::parse(f).expect("fault"))
            .collect();
        SimBackend::new(load_node(node).expect("node"), faults, 7).expect("sim")
    }

    fn cfg(extra: &str) -> TrainingCheck {
        toml::from_str(extra).expect("training table")
    }

    /// The default golden configuration is trained sharded for each partitioning; one whose
    /// work is past an eighth of the suite's bound is trained once (the simulation would
    /// otherwise take eight times the minutes the bound allows one training).
    #[test]
    fn a_heavy_golden_configuration_is_not_trained_again_for_each_partitioning() {
        assert!(golden_sharded(&cfg("")));
        let w = |c: &TrainingCheck| crate::suite::golden_work(c).unwrap();
        let heavy = cfg("golden_layers = [4000, 4000, 16]\ngolden_batch = 64\ngolden_steps = 40\n");
        assert!(w(&heavy) > crate::suite::MAX_GOLDEN_WORK / SIM_GOLDEN_COPIES);
        assert!(w(&heavy) <= crate::suite::MAX_GOLDEN_WORK);
        assert!(!golden_sharded(&heavy));
    }

    fn step(b: &mut SimBackend, p: Partition) -> f64 {
        crate::evidence::median(&b.train_partitioned(&cfg(""), p).expect("run").step_ms)
    }

    /// Of linear scaling from the one-GPU data-parallel run.
    fn scaling(node: &str, p: Partition) -> f64 {
        let mut b = backend(node, &[]);
        let c = cfg("");
        let single = b
            .train_data_parallel(&c)
            .unwrap()
            .single_gpu_samples_per_s
            .unwrap();
        let r = b.train_partitioned(&c, p).unwrap();
        let sps = r.samples_per_step as f64 / (crate::evidence::median(&r.step_ms) / 1e3);
        sps / (p.gpus() as f64 * single)
    }

    #[test]
    fn a_slow_pair_slows_the_groups_that_hold_it_and_no_other() {
        let (t8, h2, h4) = (
            Partition::Tensor { tp: 8 },
            Partition::Hybrid { tp: 2, dp: 4 },
            Partition::Hybrid { tp: 4, dp: 2 },
        );
        let healthy = backend("h100-sxm-8", &[]);
        let mut b = healthy;
        let base = [step(&mut b, t8), step(&mut b, h2), step(&mut b, h4)];
        let slowed = |pair: &str| {
            let mut b = backend("h100-sxm-8", &[&format!("slow-gpu-pair:{pair},factor=0.2")]);
            [step(&mut b, t8), step(&mut b, h2), step(&mut b, h4)]
        };
        // GPUs 0 and 1 share every tensor-parallel group: all three runs slow down, and the
        // groups of two (with the least compute to hide behind) not least.
        let near = slowed("gpu=0,peer=1");
        for (s, b) in near.iter().zip(base) {
            assert!(*s > 1.05 * b, "{near:?} against {base:?}");
        }
        // GPUs 0 and 7 share only the group of all eight: the hybrids do not notice.
        let far = slowed("gpu=0,peer=7");
        assert!(far[0] > 1.05 * base[0], "{far:?} against {base:?}");
        for i in [1, 2] {
            assert!(
                (far[i] / base[i] - 1.0).abs() < 0.03,
                "{far:?} against {base:?}"
            );
        }
    }

    #[test]
    fn nvswitch_keeps_tensor_parallelism_efficient_and_a_pcie_box_does_not() {
        let switched = scaling("h100-sxm-8", Partition::Tensor { tp: 8 });
        let pcie = scaling("l40s-pcie-4", Partition::Tensor { tp: 4 });
        assert!(switched > 0.8, "{switched}");
        assert!(pcie < 0.6, "{pcie}");
        // On the PCIe box the hybrid keeps more than tensor parallelism over all four.
        let hybrid = scaling("l40s-pcie-4", Partition::Hybrid { tp: 2, dp: 2 });
        assert!(hybrid > pcie, "{hybrid} vs {pcie}");
    }

    #[test]
    fn a_slow_gpu_holds_back_every_partitioning() {
        let p = Partition::Hybrid { tp: 4, dp: 2 };
        let healthy = step(&mut backend("h100-sxm-8", &[]), p);
        let slow = step(
            &mut backend("h100-sxm-8", &["slow-compute:gpu=5,factor=0.5"]),
            p,
        );
        assert!(slow > 1.6 * healthy, "{slow} vs {healthy}");
        let c = cfg("");
        let dp = |faults: &[&str]| {
            crate::evidence::median(
                &backend("h100-sxm-8", faults)
                    .train_data_parallel(&c)
                    .unwrap()
                    .step_ms,
            )
        };
        assert!(dp(&["slow-compute:gpu=5,factor=0.5"]) > 1.6 * dp(&[]));
    }

    #[test]
    fn the_golden_losses_are_trained_partitioned_and_track_the_cpu() {
        let c = cfg("");
        let cpu =
            crate::training::cpu_losses(&crate::training::golden_config(&c), reference::Flaw::None)
                .unwrap();
        for p in [
            Partition::Tensor { tp: 8 },
            Partition::Hybrid { tp: 2, dp: 4 },
        ] {
            let r = backend("h100-sxm-8", &[]).train_partitioned(&c, p).unwrap();
            assert_eq!(r.golden_node_losses.len(), c.golden_steps);
            for (n, g) in r.golden_node_losses.iter().zip(&cpu) {
                assert!((n - g).abs() <= 1e-5 * g.abs(), "{p:?}: {n} vs {g}");
            }
            assert_eq!(r.inconsistency, None);
            assert_eq!(
                (r.tp, r.dp, r.samples_per_step),
                (p.tp(), p.dp(), c.batch * p.dp())
            );
        }
        let r = backend("h100-sxm-8", &["wrong-loss"])
            .train_partitioned(&c, Partition::Tensor { tp: 8 })
            .unwrap();
        let off = r
            .golden_node_losses
            .iter()
            .zip(&cpu)
            .any(|(n, g)| (n - g).abs() > 1e-3 * g.abs());
        assert!(off, "{:?} vs {cpu:?}", r.golden_node_losses);
    }

    #[test]
    fn faults_make_the_ranks_disagree_as_they_would() {
        let t8 = Partition::Tensor { tp: 8 };
        let h2 = Partition::Hybrid { tp: 2, dp: 4 };
        let mut b = backend("h100-sxm-8", &["replica-mismatch:gpu=0"]);
        let c = cfg("");
        assert_eq!(
            b.train_partitioned(&c, t8).unwrap().inconsistency,
            Some(Inconsistency::Replicated { rank: 1 }.to_string())
        );
        assert_eq!(
            b.train_partitioned(&c, h2).unwrap().inconsistency,
            Some(Inconsistency::Shards { rank: 2, first: 0 }.to_string())
        );
        let mut b = backend("h100-sxm-8", &["collective-corrupt:gpu=5"]);
        assert_eq!(
            b.train_partitioned(&c, h2).unwrap().inconsistency,
            Some(
                Inconsistency::LossSums {
                    rank: 5,
                    first: 4,
                    step: 0
                }
                .to_string()
            )
        );
    }

    #[test]
    fn what_cannot_run_partitioned_says_why() {
        let mut b = backend("h100-sxm-8", &[]);
        let e = b
            .train_partitioned(&cfg("precision = \"bf16\""), Partition::Tensor { tp: 8 })
            .unwrap_err();
        assert!(
            matches!(&e, HwError::NotSupported(w) if w.contains("bf16")),
            "{e}"
        );
        let e = b
            .train_partitioned(&cfg(""), Partition::Tensor { tp: 4 })
            .unwrap_err();
        assert!(
            matches!(&e, HwError::NotSupported(w) if w.contains("needs 4 GPUs")),
            "{e}"
        );
        // A width a group of four cannot split.
        let e = b
            .train_partitioned(
                &cfg("golden_layers = [64, 102, 10]"),
                Partition::Hybrid { tp: 4, dp: 2 },
            )
            .unwrap_err();
        assert!(
            matches!(&e, HwError::NotSupported(w) if w.contains("golden configuration")),
            "{e}"
        );
    }
}
