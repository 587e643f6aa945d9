//! The reference data-parallel training run: the loss goes down, replicas stay bit-identical,
//! the first steps match the CPU golden trajectory, and throughput and scaling meet the floor.

use super::judge::{finding, fmt_num, judge};
use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::error::HwError;
use crate::evidence::{Fact, FactValue, Finding, Metric, Status, Subject};
use crate::suite::TrainingCheck;

pub mod methods;

/// How the data-parallel run's golden finding begins what it expected (the report finds it so;
/// its findings carry no metric, as evidence of every format has them).
pub const GOLDEN_EXPECTED: &str = "abs(node - cpu) <=";
/// What the data-parallel run's replica finding expected.
pub const REPLICAS_EXPECTED: &str = "identical parameters";

pub struct Training(pub TrainingCheck);

impl Check for Training {
    fn id(&self) -> String {
        "training".into()
    }
    fn kind(&self) -> &'static str {
        "training"
    }
    fn title(&self) -> String {
        "Reference training run".into()
    }

    fn plan(&self, ctx: &Ctx) -> Result<Vec<String>, String> {
        let n = ctx.inventory.gpus.len();
        if n == 0 {
            return Err("no GPUs".into());
        }
        let c = &self.0;
        let params = crate::training::plan::mlp_params(&c.layers);
        Ok([format!(
            "MLP {:?} ({:.1}M parameters, {:.0} MB of fp32 gradients a step), batch {} per GPU on {n} GPU{}, {} steps, {:?}; golden check: {} steps of {:?} against the CPU",
            c.layers,
            params as f64 / 1e6,
            params as f64 * 4.0 / 1e6,
            c.batch,
            if n == 1 { "" } else { "s" },
            c.steps,
            c.precision,
            c.golden_steps,
            c.golden_layers
        )]
        .into_iter()
        .chain(methods::compared(c, n).into_iter().map(|p| {
            format!(
                "the same model {} ({} x {} GPUs, tensor x data): golden check and {} steps",
                crate::training::fit::method_name(p),
                p.tp(),
                p.dp(),
                c.steps
            )
        }))
        .collect())
    }

    fn measure(
        &self,
        ctx: &Ctx,
        b: &mut dyn Backend,
        progress: Progress,
    ) -> Result<Measured, HwError> {
        let r = b.training(&self.0)?;
        super::positive_times("the training step", "ms", &r.step_ms)?;
        progress(1, 1);
        let mut m = Measured::default();
        super::nccl_env::record(
            &mut m,
            &b.nccl_settings(),
            super::nccl_env::Scope::Node,
            &ctx.suite.nccl.accept,
        );
        let node = Subject::node;
        push_computed(&mut m, "loss", node(), &r.losses);
        // The golden configuration: trained on the node (by the backend) and on the CPU (here).
        let golden = crate::training::golden_config(&self.0);
        let cpu = crate::training::cpu_losses(&golden, crate::training::reference::Flaw::None)
            .map_err(|e| HwError::Call {
                call: "golden training on the CPU".into(),
                detail: e.to_string(),
            })?;
        push_computed(&mut m, "golden_node_loss", node(), &r.golden_node_losses);
        m.metrics
            .push(Metric::new("golden_cpu_loss", node(), "", cpu));
        m.metrics
            .push(Metric::new("step_time", node(), "ms", r.step_ms.clone()));
        m.metrics
            .push(Metric::new("comm_time", node(), "ms", r.comm_ms.clone()));
        m.metrics.push(Metric::new(
            "exposed_comm_time",
            node(),
            "ms",
            r.exposed_comm_ms.clone(),
        ));
        let sps: Vec<f64> = r
            .step_ms
            .iter()
            .map(|ms| (r.batch_per_gpu * r.gpus) as f64 / (ms / 1e3))
            .collect();
        let med_sps = crate::evidence::median(&sps);
        m.metrics
            .push(Metric::new("samples_per_s", node(), "samples/s", sps));
        if let (Some(single), true) = (r.single_gpu_samples_per_s, r.gpus > 1) {
            m.metrics.push(Metric::new(
                "scaling_efficiency",
                node(),
                "",
                vec![med_sps / (r.gpus as f64 * single)],
            ));
        }
        let step = crate::evidence::median(&r.step_ms);
        let exposed = crate::evidence::median(&r.exposed_comm_ms);
        if step > 0.0 {
            m.metrics.push(Metric::new(
                "comm_fraction",
                node(),
                "",
                vec![exposed / step],
            ));
        }
        for (g, h) in r.replica_hashes.iter().enumerate() {
            // What the backend gave in place of a hash (a failed hashing thread's message) is
            // kept as words, and can never match a hash.
            let value = if is_sha256(h) {
                FactValue::Sha256(h.clone())
            } else {
                FactValue::Text(h.clone())
            };
            m.facts
                .push(Fact::new("params_sha256", Subject::gpu(g), value));
        }
        m.facts.push(Fact::new(
            "gradient_bytes",
            node(),
            FactValue::Count(r.gradient_bytes),
        ));
        // What the run trained in, as the backend reports it; the golden check is always fp32.
        m.facts.push(Fact::new(
            "precision",
            node(),
            FactValue::Text(r.precision.name().into()),
        ));
        m.facts.push(Fact::new(
            "golden_precision",
            node(),
            FactValue::Text(crate::suite::Precision::Fp32.name().into()),
        ));
        let gpus = ctx.inventory.gpus.len();
        methods::measure(&self.0, gpus, b, r.single_gpu_samples_per_s, &mut m)?;
        Ok(m)
    }

    fn samples(&self, gpus: usize) -> (u64, String) {
        // Loss, step, communication, exposed communication and throughput per step; the
        // golden losses twice (node and CPU); scaling efficiency and the communication share.
        let c = &self.0;
        (
            5 * c.steps as u64 + 2 * c.golden_steps as u64 + 2 + methods::samples(c, gpus),
            "checks.training.steps".into(),
        )
    }

    fn evaluate(&self, ctx: &Ctx, m: &Measured) -> Vec<Finding> {
        let c = &self.0;
        let mut out = Vec::new();
        // The data-parallel run's figures (the node's); the partitionings' are judged apart.
        let get = |n: &str| {
            m.metrics
                .iter()
                .find(|x| x.name == n && x.subject == Subject::node())
        };
        let losses = computed(m, "loss", &Subject::node(), 0);
        // Golden trajectory: the node computes right answers.
        let cpu_g: Vec<f32> = get("golden_cpu_loss")
            .map(|x| x.samples.iter().map(|v| *v as f32).collect())
            .unwrap_or_default();
        let node_g: Vec<f32> = computed(m, "golden_node_loss", &Subject::node(), cpu_g.len())
            .iter()
            .map(|v| *v as f32)
            .collect();
        out.push(golden_finding(c, Subject::node(), &node_g, &cpu_g));
        // The loss goes down and reaches the target.
        out.push(loss_finding(c.loss_target, &losses));
        // Replicas bit-identical.
        let hashes: Vec<&Fact> = m
            .facts
            .iter()
            .filter(|f| f.name == "params_sha256")
            .collect();
        out.push(replica_finding(&hashes, ctx.inventory.gpus.len()));
        // From here on the data-parallel run's speed, which its gradient exchange through NCCL
        // is part of.
        let figures_from = out.len();
        // A floor whose figure is missing was not judged: never silently dropped.
        let missing = |what: &str, key: &str| {
            finding(
                Status::Error,
                Subject::node(),
                "not measured",
                format!("a {what} to judge against checks.training.{key}"),
                format!("the training run's {what} was not measured, so its floor was not judged"),
            )
        };
        match get("samples_per_s") {
            Some(x) => out.extend(judge(
                &Subject::node(),
                "throughput",
                x.median,
                "samples/s",
                &c.samples_per_s,
            )),
            None if !c.samples_per_s.judging().is_empty() => {
                out.push(missing("throughput", "samples_per_s"))
            }
            None => {}
        }
        let gpus = ctx.inventory.gpus.len();
        match (get("scaling_efficiency"), c.min_scaling_efficiency) {
            // Against one GPU's run: a node of one GPU has nothing to scale to.
            (None, Some(_)) if gpus < 2 => out.push(finding(
                Status::Skip,
                Subject::node(),
                "not available here",
                "a scaling efficiency to judge against checks.training.min_scaling_efficiency",
                format!(
                    "not available here: scaling efficiency needs two GPUs or more; this node \
                     has {gpus}, so its floor was not judged"
                ),
            )),
            (None, Some(_)) => out.push(missing("scaling efficiency", "min_scaling_efficiency")),
            (_, None) => {}
            (Some(x), Some(min)) => {
                let e = x.median;
                out.push(finding(
                    if e >= min { Status::Pass } else { Status::Fail },
                    Subject::node(),
                    format!("{:.1}%", e * 100.0),
                    format!(">= {:.0}%", min * 100.0),
                    format!(
                        "scaling efficiency {:.1}% of linear (floor {:.0}%)",
                        e * 100.0,
                        min * 100.0
                    ),
                ));
            }
        }
        if let Some(x) = get("comm_fraction") {
            // Information about the node, not a judgement: no suite sets a limit on it.
            let f = x.median;
            out.push(
                finding(
                    Status::Pass,
                    Subject::node(),
                    format!("{:.1}% of step time in exposed communication", f * 100.0),
                    "-",
                    format!(
                        "{}% of each step waits on gradient exchange: this node makes such a job {}",
                        fmt_num(f * 100.0),
                        if f > 0.2 {
                            "communication-bound"
                        } else {
                            "compute-bound"
                        }
                    ),
                )
                .informational(),
            );
        }
        super::nccl_env::steer(m, &mut out[figures_from..]);
        out.extend(methods::evaluate(c, ctx.inventory.gpus.len(), m, &cpu_g));
        out.extend(super::nccl_env::note(m, "the training runs"));
        out
    }
}

/// The fact that says at which step (1-based, a count) a series the node computed stopped
/// being a finite number: `loss` + this suffix.
pub const NOT_FINITE_AT: &str = "_not_finite_at_step";

/// Record a series the node computed (its losses). A value that is not a finite number there is
/// a wrong answer, to be judged (FAIL), not a measurement that failed (which the runner makes an
/// ERROR of); but evidence holds only finite numbers. So the finite values before it are the
/// metric (none when the first is not finite) and the step where it stopped being finite is the
/// fact `{name}_not_finite_at_step`; [`computed`] reads the two back as the series judged.
pub(crate) fn push_computed(m: &mut Measured, name: &str, who: Subject, values: &[f64]) {
    let finite = values.iter().position(|v| !v.is_finite());
    let kept = &values[..finite.unwrap_or(values.len())];
    if !kept.is_empty() || finite.is_none() {
        m.metrics
            .push(Metric::new(name, who.clone(), "", kept.to_vec()));
    }
    if let Some(i) = finite {
        m.facts.push(Fact::new(
            format!("{name}{NOT_FINITE_AT}"),
            who,
            FactValue::Count(i as u64 + 1),
        ));
    }
}

/// Whether `facts` say that the series `name` of `who` stopped being a finite number (the fact
/// [`push_computed`] records).
pub(crate) fn stopped_being_finite(facts: &[Fact], name: &str, who: &Subject) -> bool {
    let at = format!("{name}{NOT_FINITE_AT}");
    facts.iter().any(|f| f.name == at && f.subject == *who)
}

/// The series [`push_computed`] recorded as `name` of `who`: its finite values, then NaNs from
/// where the node's stopped being finite, at least one and as many as make `len` values (the
/// length of the series it is compared with, step by step).
pub(crate) fn computed(m: &Measured, name: &str, who: &Subject, len: usize) -> Vec<f64> {
    let mut v = m
        .metrics
        .iter()
        .find(|x| x.name == name && x.subject == *who)
        .map(|x| x.samples.clone())
        .unwrap_or_default();
    if stopped_being_finite(&m.facts, name, who) {
        let to = len.max(v.len() + 1);
        v.resize(to, f64::NAN);
    }
    v
}

/// The losses of the golden configuration as `who` trained it on the node against the CPU's:
/// within tolerance a pass, a step outside it a wrong answer, too few losses to compare an
/// error (missing data, not a wrong answer).
pub(crate) fn golden_finding(
    c: &TrainingCheck,
    who: Subject,
    node_g: &[f32],
    cpu_g: &[f32],
) -> Finding {
    let expected = format!(
        "{GOLDEN_EXPECTED} {:.0e} + {:.0e} x abs(cpu) over {} steps of {:?}, batch {}",
        c.golden_abs_tol, c.golden_rel_tol, c.golden_steps, c.golden_layers, c.golden_batch
    );
    use crate::training::reference::{compare_trajectory, TrajectoryMismatch};
    let whose = if who == Subject::node() {
        "the node's".to_string()
    } else {
        format!("the {} run's", who.describe())
    };
    let found = match compare_trajectory(node_g, cpu_g, c.golden_rel_tol as f32, c.golden_abs_tol as f32) {
        Ok(d) => finding(
            Status::Pass,
            who.clone(),
            format!("max relative deviation {:.1e}", d.max_rel_diff),
            expected,
            format!("losses of the first {} golden steps match the CPU golden trajectory", cpu_g.len()),
        ),
        // Steps are said 1-based, as the not-finite facts count them.
        Err(TrajectoryMismatch::Diverged { step, gpu, cpu, rel_diff, .. }) => finding(
            Status::Fail,
            who.clone(),
            format!("step {}: {gpu:.6} vs {cpu:.6}", step + 1),
            expected,
            format!(
                "golden step {}: {whose} loss {gpu:.6} differs from the CPU golden {cpu:.6} by {rel_diff:.1e} (relative): this node computes wrong answers",
                step + 1
            ),
        ),
        // Too few losses to compare is missing data, not a wrong answer: an error.
        Err(e) => finding(Status::Error, who.clone(), "no comparable losses", expected, format!("golden trajectory: {e}")),
    };
    // The data-parallel run's findings keep the keys older evidence has them under (diff
    // matches them); a partitioning's are tagged with the metric they judge.
    if who == Subject::node() {
        found
    } else {
        found.on("golden_node_loss")
    }
}

/// The loss must go down and end below the suite's target. No loss at all proves nothing: an
/// error, not a pass. A loss that is not a finite number was computed, not missed: it did not go
/// down, a FAIL like any loss that does not fall, never "could not test". Whether the node's
/// arithmetic is wrong is the golden comparison's judgement (against the CPU); a suite whose
/// learning rate diverges on any hardware fails here as it fails a loss that rises.
fn loss_finding(target: Option<f64>, losses: &[f64]) -> Finding {
    let expected = match target {
        Some(t) => format!("decreasing, final < {t}"),
        None => "decreasing".into(),
    };
    let (Some(first), Some(last)) = (losses.first().copied(), losses.last().copied()) else {
        return finding(
            Status::Error,
            Subject::node(),
            "no losses",
            expected,
            "the training run reported no loss, so it cannot show that the model learns",
        );
    };
    if !(first.is_finite() && last.is_finite()) {
        return finding(
            Status::Fail,
            Subject::node(),
            format!("loss {first} -> {last}"),
            expected,
            format!(
                "the training run's loss is not a finite number ({first} -> {last}): the model did not learn (the golden steps judge whether the node's arithmetic is right)"
            ),
        );
    }
    let down = last < first;
    let target_ok = target.is_none_or(|t| last < t);
    finding(
        if down && target_ok {
            Status::Pass
        } else {
            Status::Fail
        },
        Subject::node(),
        format!("loss {first:.4} -> {last:.4}"),
        expected,
        if !down {
            format!("the loss did not decrease ({first:.4} -> {last:.4})")
        } else if !target_ok {
            format!(
                "final loss {last:.4} is not below the target {}",
                target.unwrap_or(0.0)
            )
        } else {
            format!("loss went down from {first:.4} to {last:.4}")
        },
    )
}

/// A SHA-256 as hex: what a replica's hash must look like to be compared at all.
fn is_sha256(v: &str) -> bool {
    v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A replica's parameter hash, when its fact holds one.
fn hash_of(f: &Fact) -> Option<&str> {
    match &f.value {
        FactValue::Sha256(h) if is_sha256(h) => Some(h),
        _ => None,
    }
}

/// Every GPU's replica must end with the same parameters. A hash that is missing, or is not a
/// hash (a hashing thread that failed), is an error: equal failure messages prove nothing.
fn replica_finding(hashes: &[&Fact], gpus: usize) -> Finding {
    let expected = REPLICAS_EXPECTED;
    let broken: Vec<String> = hashes
        .iter()
        .filter(|h| hash_of(h).is_none())
        .map(|h| format!("{} ({})", h.subject.describe(), h.value.describe()))
        .collect();
    if !broken.is_empty() {
        return finding(
            Status::Error,
            Subject::node(),
            "no parameter hash",
            expected,
            format!(
                "the parameters of {} could not be hashed, so the replicas were not compared",
                broken.join(", ")
            ),
        );
    }
    let missing_ids: Vec<usize> = (0..gpus)
        .filter(|g| !hashes.iter().any(|h| h.subject.gpu == Some(*g)))
        .collect();
    let missing: Vec<String> = missing_ids.iter().map(|g| format!("GPU {g}")).collect();
    if hashes.is_empty() || !missing.is_empty() {
        return finding(
            Status::Error,
            Subject::group(&missing_ids),
            "no parameter hash",
            expected,
            format!(
                "the training run reported no parameter hash for {}, so the replicas were not compared",
                if missing.is_empty() {
                    "any replica".to_string()
                } else {
                    missing.join(", ")
                }
            ),
        );
    }
    let first = hash_of(hashes[0]);
    let odd_facts: Vec<&&Fact> = hashes.iter().filter(|h| hash_of(h) != first).collect();
    let odd: Vec<String> = odd_facts.iter().map(|h| h.subject.describe()).collect();
    let odd_ids: Option<Vec<usize>> = odd_facts.iter().map(|h| h.subject.gpu).collect();
    if hashes.len() == 1 {
        // One replica agrees with itself: said, not counted as a judgement that held.
        finding(
            Status::Pass,
            Subject::node(),
            "1 replica",
            expected,
            "one replica: no other to compare its parameters with".to_string(),
        )
        .informational()
    } else if odd.is_empty() {
        finding(
            Status::Pass,
            Subject::node(),
            format!("{} identical replicas", hashes.len()),
            expected,
            format!(
                "all {} replicas hold bit-identical parameters",
                hashes.len()
            ),
        )
    } else {
        finding(
            Status::Fail,
            odd_ids.map_or_else(Subject::node, |ids| Subject::group(&ids)),
            "parameters differ",
            expected,
            format!(
                "replica mismatch: {} ended with parameters different from {} (silent data corruption or a broken all-reduce)",
                odd.join(", "),
                hashes[0].subject.describe()
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(values: &[&str]) -> Vec<Fact> {
        values
            .iter()
            .enumerate()
            .map(|(g, v)| {
                Fact::new(
                    "params_sha256",
                    Subject::gpu(g),
                    FactValue::from_legacy("params_sha256", v),
                )
            })
            .collect()
    }

    fn judge_replicas(values: &[&str], gpus: usize) -> Finding {
        let facts = hashes(values);
        let refs: Vec<&Fact> = facts.iter().collect();
        replica_finding(&refs, gpus)
    }

    const A: &str = "5f9c4ab08cac7457e9111a30e4664920607ea2c115a1433d7be98e97e64244ca";
    const B: &str = "7d865e959b2466918c9863afca942d0fb89d7c9ac0c99bafc3749504ded97730";

    #[test]
    fn identical_replicas_pass_and_a_different_one_fails_by_name() {
        assert_eq!(judge_replicas(&[A, A, A], 3).status, Status::Pass);
        let f = judge_replicas(&[A, A, B], 3);
        assert_eq!(f.status, Status::Fail);
        assert_eq!(f.subject.describe(), "GPU 2");
    }

    /// One replica has nothing to be compared with: said, never a judgement that held.
    #[test]
    fn one_replica_is_information_not_a_pass() {
        let f = judge_replicas(&[A], 1);
        assert!(!f.is_judgement(), "{f:?}");
        assert_eq!(f.status, Status::Pass);
        assert!(f.reason.contains("no other to compare"), "{}", f.reason);
        assert!(judge_replicas(&[A, A], 2).is_judgement());
    }

    #[test]
    fn hashes_that_all_failed_are_an_error_not_identical_replicas() {
        let f = judge_replicas(&["hashing failed"; 4], 4);
        assert_eq!(f.status, Status::Error, "{f:?}");
        assert!(f.reason.contains("GPU 3 (hashing failed)"), "{}", f.reason);
        assert_eq!(
            judge_replicas(&[A, "hashing failed"], 2).status,
            Status::Error
        );
        assert_eq!(judge_replicas(&[""], 1).status, Status::Error);
    }

    #[test]
    fn missing_hashes_are_an_error() {
        assert_eq!(judge_replicas(&[], 8).status, Status::Error);
        assert_eq!(judge_replicas(&[], 0).status, Status::Error);
        let f = judge_replicas(&[A, A], 4);
        assert_eq!(f.status, Status::Error);
        assert_eq!(f.subject.describe(), "GPUs 2, 3");
    }

    #[test]
    fn the_loss_must_fall_below_the_target() {
        assert_eq!(loss_finding(Some(2.0), &[2.7, 1.9]).status, Status::Pass);
        assert_eq!(loss_finding(None, &[2.7, 2.5]).status, Status::Pass);
        // Falls, but not below the target; ends exactly on it.
        assert_eq!(loss_finding(Some(2.0), &[2.7, 2.1]).status, Status::Fail);
        assert_eq!(loss_finding(Some(2.0), &[2.7, 2.0]).status, Status::Fail);
        // Does not fall.
        assert_eq!(loss_finding(None, &[2.7, 2.7]).status, Status::Fail);
        assert_eq!(loss_finding(Some(5.0), &[2.7, 2.8]).status, Status::Fail);
    }

    #[test]
    fn the_loss_finding_says_which_way_it_missed() {
        assert_eq!(
            loss_finding(Some(2.0), &[2.7, 2.8]).reason,
            "the loss did not decrease (2.7000 -> 2.8000)"
        );
        assert_eq!(
            loss_finding(Some(2.0), &[2.7, 2.1]).reason,
            "final loss 2.1000 is not below the target 2"
        );
        assert_eq!(
            loss_finding(Some(2.0), &[2.7, 1.9]).reason,
            "loss went down from 2.7000 to 1.9000"
        );
    }

    /// The training check judged on the records of a simulated run of the H200 VM suite.
    #[test]
    fn a_run_is_judged_on_its_own_figures_and_a_missing_one_is_an_error() {
        let ev = crate::testutil::simulated("h200-vm-1", &[]);
        let rec = ev.check("training").unwrap();
        let check = Training(ev.suite.resolved.checks.training.clone().unwrap());
        let ctx = crate::testutil::ctx(&ev.suite.resolved, &ev.node);
        let measured = Measured {
            metrics: rec.metrics.clone(),
            facts: rec.facts.clone(),
        };
        let f = check.evaluate(&ctx, &measured);
        assert_eq!(f, rec.findings, "the same figures, the same judgements");
        assert!(f.iter().filter(|x| !x.info).count() >= 3, "{f:#?}");
        assert!(f.iter().all(|x| x.status == Status::Pass), "{f:#?}");
        // Without its losses the run proves nothing about them: an error, not a pass.
        let mut no_loss = measured.clone();
        no_loss.metrics.retain(|m| m.name != "loss");
        let f = check.evaluate(&ctx, &no_loss);
        assert!(
            f.iter()
                .any(|x| x.status == Status::Error && x.reason.contains("loss")),
            "{f:#?}"
        );
    }

    /// The data-parallel run's speed under an NCCL setting: its missed scaling floor is not
    /// judged (an error naming the setting), while its wrong losses would still fail.
    #[test]
    fn a_missed_speed_floor_under_an_nccl_setting_is_not_judged() {
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let rec = ev.check("training").unwrap();
        let mut cfg = ev.suite.resolved.checks.training.clone().unwrap();
        cfg.min_scaling_efficiency = Some(1.0);
        let check = Training(cfg);
        let ctx = crate::testutil::ctx(&ev.suite.resolved, &ev.node);
        let mut m = Measured {
            metrics: rec.metrics.clone(),
            facts: rec.facts.clone(),
        };
        let scaling = |f: &[Finding]| {
            f.iter()
                .find(|x| {
                    x.subject == Subject::node() && x.reason.starts_with("scaling efficiency")
                })
                .map(|x| x.status)
        };
        assert_eq!(scaling(&check.evaluate(&ctx, &m)), Some(Status::Fail));
        crate::checks::nccl_env::record(
            &mut m,
            &[crate::backend::NcclSetting::env("NCCL_MAX_NCHANNELS", "1")],
            crate::checks::nccl_env::Scope::Node,
            &Default::default(),
        );
        let f = check.evaluate(&ctx, &m);
        assert_eq!(scaling(&f), Some(Status::Error), "{f:#?}");
        assert!(f.iter().any(|x| x.info
            && x.reason
                .starts_with("the training runs measured with NCCL_MAX_NCHANNELS=1")));
        // The golden comparison is the node's answer, not NCCL's pace.
        let golden = f.iter().find(|x| x.subject == Subject::node()).unwrap();
        assert_eq!(golden.status, Status::Pass);
        m.metrics
            .iter_mut()
            .filter(|x| x.name == "golden_node_loss")
            .for_each(|x| x.samples[0] += 1.0);
        let f = check.evaluate(&ctx, &m);
        assert_eq!(f[0].status, Status::Fail, "{:#?}", f[0]);
    }

    /// A speed floor whose figure is missing is never dropped in silence: on one GPU the
    /// scaling floor is "not available here" (a judgement not made, the run partial), on
    /// several a missing figure is an error, as is a missing throughput under its floor.
    #[test]
    fn a_speed_floor_without_its_figure_is_not_dropped() {
        let floored = |node: &str| {
            let ev = crate::testutil::simulated(node, &[]);
            let rec = ev.check("training").unwrap().clone();
            let mut cfg = ev.suite.resolved.checks.training.clone().unwrap();
            cfg.min_scaling_efficiency = Some(0.5);
            cfg.samples_per_s.fail_below = Some(1.0);
            (ev, rec, Training(cfg))
        };
        let about = |f: &[Finding], what: &str| -> Vec<(Status, bool, String)> {
            f.iter()
                .filter(|x| x.expected.contains(what) || x.reason.contains(what))
                .map(|x| (x.status, x.info, x.reason.clone()))
                .collect()
        };
        // One GPU: no scaling figure to judge.
        let (ev, rec, check) = floored("h200-vm-1");
        let ctx = crate::testutil::ctx(&ev.suite.resolved, &ev.node);
        let m = Measured {
            metrics: rec.metrics.clone(),
            facts: rec.facts.clone(),
        };
        assert!(!m.metrics.iter().any(|x| x.name == "scaling_efficiency"));
        let f = check.evaluate(&ctx, &m);
        assert_eq!(
            about(&f, "min_scaling_efficiency"),
            vec![(
                Status::Skip,
                false,
                "not available here: scaling efficiency needs two GPUs or more; this node has \
                 1, so its floor was not judged"
                    .to_string()
            )]
        );
        // Several GPUs: the figure is measured, so its absence is an error.
        let (ev, rec, check) = floored("h100-sxm-8");
        let ctx = crate::testutil::ctx(&ev.suite.resolved, &ev.node);
        let mut m = Measured {
            metrics: rec.metrics.clone(),
            facts: rec.facts.clone(),
        };
        assert!(about(&check.evaluate(&ctx, &m), "min_scaling_efficiency").is_empty());
        m.metrics
            .retain(|x| x.name != "scaling_efficiency" && x.name != "samples_per_s");
        let f = check.evaluate(&ctx, &m);
        let missing = about(&f, "was not measured");
        assert_eq!(
            missing
                .iter()
                .map(|(s, i, r)| (*s, *i, r.as_str()))
                .collect::<Vec<_>>(),
            vec![
                (
                    Status::Error,
                    false,
                    "the training run's throughput was not measured, so its floor was not judged"
                ),
                (
                    Status::Error,
                    false,
                    "the training run's scaling efficiency was not measured, so its floor was \
                     not judged"
                ),
            ]
        );
        // Two GPUs are several: a missing scaling figure there is an error too.
        let mut two = ev.node.clone();
        two.gpus.truncate(2);
        let ctx2 = crate::testutil::ctx(&ev.suite.resolved, &two);
        let f = check.evaluate(&ctx2, &m);
        assert!(
            about(&f, "scaling efficiency was not measured")
                .iter()
                .any(|x| x.0 == Status::Error),
            "{f:#?}"
        );
        // Without floors a missing figure is nothing to judge: no error.
        let mut cfg = check.0.clone();
        cfg.samples_per_s = Default::default();
        cfg.min_scaling_efficiency = None;
        let f = Training(cfg).evaluate(&ctx, &m);
        assert!(about(&f, "was not measured").is_empty(), "{f:#?}");
    }

    /// Losses the node computed as NaN or infinity, as the runner handles them: nothing is
    /// taken out as "could not be measured", and the loss, the golden trajectory and a
    /// partitioning's golden trajectory all fail (a wrong answer, exit 1, not exit 3).
    #[test]
    fn a_loss_the_node_computed_as_nan_fails_through_the_runners_path() {
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let rec = ev.check("training").unwrap();
        let check = Training(ev.suite.resolved.checks.training.clone().unwrap());
        let ctx = crate::testutil::ctx(&ev.suite.resolved, &ev.node);
        let series = |name: &str, who: &Subject| {
            rec.metrics
                .iter()
                .find(|x| x.name == name && x.subject == *who)
                .unwrap()
                .samples
                .clone()
        };
        let tp = rec
            .metrics
            .iter()
            .map(|x| x.subject.clone())
            .find(|s| s.method.is_some())
            .expect("a partitioning");
        let mut m = Measured {
            metrics: rec.metrics.clone(),
            facts: rec.facts.clone(),
        };
        let mut loss = series("loss", &Subject::node());
        let last = loss.len() - 1;
        loss[last] = f64::NAN;
        let mut golden = series("golden_node_loss", &Subject::node());
        golden[1] = f64::INFINITY;
        let mut tp_golden = series("golden_node_loss", &tp);
        tp_golden[0] = f64::NAN;
        m.metrics.retain(|x| {
            let replaced = [Subject::node(), tp.clone()].contains(&x.subject);
            !(replaced && (x.name == "loss" || x.name == "golden_node_loss"))
        });
        push_computed(&mut m, "loss", Subject::node(), &loss);
        push_computed(&mut m, "golden_node_loss", Subject::node(), &golden);
        push_computed(&mut m, "golden_node_loss", tp.clone(), &tp_golden);
        // Each fact names the step (1-based) where the series stopped being a number.
        let step = |name: &str, who: &Subject| {
            m.facts
                .iter()
                .find(|f| f.name == format!("{name}{NOT_FINITE_AT}") && f.subject == *who)
                .map(|f| f.value.clone())
        };
        assert_eq!(
            step("loss", &Subject::node()),
            Some(FactValue::Count(loss.len() as u64))
        );
        assert_eq!(
            step("golden_node_loss", &Subject::node()),
            Some(FactValue::Count(2))
        );
        assert_eq!(step("golden_node_loss", &tp), Some(FactValue::Count(1)));
        // The partitioning's series was NaN from its first step: no metric, only the fact.
        assert!(!m
            .metrics
            .iter()
            .any(|x| x.name == "golden_node_loss" && x.subject == tp));
        assert!(
            m.take_non_finite().is_empty(),
            "the evidence holds only finite numbers"
        );
        assert_eq!(computed(&m, "loss", &Subject::node(), 0).len(), loss.len());
        let f = check.evaluate(&ctx, &m);
        assert!(!f.iter().any(|x| x.status == Status::Error), "{f:#?}");
        let loss_f = f
            .iter()
            .find(|x| x.reason.contains("not a finite number"))
            .expect("the loss finding");
        assert_eq!(loss_f.status, Status::Fail);
        let golden_of = |who: &Subject| {
            f.iter()
                .find(|x| x.subject == *who && x.reason.contains("golden step"))
                .unwrap_or_else(|| panic!("golden of {who:?}: {f:#?}"))
        };
        assert_eq!(golden_of(&Subject::node()).status, Status::Fail);
        assert!(
            golden_of(&Subject::node())
                .reason
                .starts_with("golden step 2:"),
            "{:?}",
            golden_of(&Subject::node())
        );
        assert_eq!(golden_of(&tp).status, Status::Fail);
        // Both count steps from 1, as the facts do: the node's second, the partitioning's first.
        assert!(golden_of(&tp).reason.starts_with("golden step 1:"));
        assert!(golden_of(&tp).found.starts_with("step 1: NaN vs "));
        // Finite series stay as they were: a metric of every value and no fact.
        let mut plain = Measured::default();
        push_computed(&mut plain, "loss", Subject::node(), &[2.0, 1.0]);
        assert_eq!(plain.metrics[0].samples, [2.0, 1.0]);
        assert!(plain.facts.is_empty());
        assert_eq!(computed(&plain, "loss", &Subject::node(), 5), [2.0, 1.0]);
    }

    #[test]
    fn no_loss_is_an_error_and_a_loss_that_is_not_a_number_a_failure() {
        assert_eq!(loss_finding(Some(2.0), &[]).status, Status::Error);
        // Computed, and wrong: the node fails (exit 1), it is not "untestable" (exit 3).
        for losses in [
            [2.7, f64::NAN],
            [f64::NAN, 1.0],
            [2.7, f64::INFINITY],
            [f64::NEG_INFINITY, 1.0],
        ] {
            let f = loss_finding(Some(2.0), &losses);
            assert_eq!(f.status, Status::Fail, "{losses:?}");
            assert!(f.reason.contains("not a finite number"), "{}", f.reason);
        }
        // The finite case on either side of it still judges the descent.
        assert_eq!(loss_finding(Some(2.0), &[2.7, 1.0]).status, Status::Pass);
    }
}
