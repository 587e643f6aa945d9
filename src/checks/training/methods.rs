//! The training run partitioned other ways than data-parallel, on every GPU: tensor-parallel
//! over all of them and hybrids (tensor-parallel groups of 2 and 4, data-parallel across the
//! groups; [`fit::methods`]). Each is judged as the data-parallel run is where it can go wrong
//! whatever the node's speed: its golden losses against the CPU's, and its ranks agreeing with
//! each other. Its speed (scaling, the share of the step spent waiting on communication) is
//! judged only against floors the suite sets; without them it is reported, because a node
//! without NVLink is no place for tensor parallelism and saying so is not a failure.

use super::golden_finding;
use crate::backend::{Backend, MethodRun};
use crate::checks::judge::{finding, fmt_num};
use crate::checks::Measured;
use crate::error::HwError;
use crate::evidence::{median, Fact, FactValue, Finding, Metric, Status, Subject};
use crate::suite::{MethodFloors, TrainingCheck};
use crate::training::fit;
use crate::training::partition::Partition;

/// Why the backend could not run a partitioning (its words).
pub const UNAVAILABLE: &str = "method_unavailable";
/// The ranks a partitioned run reported on: its record is there.
pub const RANKS: &str = "ranks";
/// What ranks of a partitioned run disagreed on, where they did.
pub const DISAGREEMENT: &str = "rank_disagreement";
/// Why a partitioned run could not be measured (a call that failed, a deadline passed): an
/// error of that partitioning, which leaves the data-parallel run's figures standing.
pub const FAILED: &str = "method_error";

/// The partitionings the check runs besides data-parallel on `gpus` GPUs.
pub fn compared(c: &TrainingCheck, gpus: usize) -> Vec<Partition> {
    if !c.partitionings || gpus < 2 {
        return Vec::new();
    }
    fit::methods(gpus)
        .into_iter()
        .filter(|p| !matches!(p, Partition::Data { .. }))
        .collect()
}

/// What the suite asks of `p`'s speed (nothing of the data-parallel run here: it has its own).
pub fn floors(c: &TrainingCheck, p: Partition) -> Option<&MethodFloors> {
    match p {
        Partition::Data { .. } => None,
        Partition::Tensor { .. } => Some(&c.tensor_parallel),
        Partition::Hybrid { .. } => Some(&c.hybrid),
    }
}

/// Run every compared partitioning and record it under its method's subject. A partitioning
/// the backend cannot run is recorded with why; one whose run failed is recorded with its error
/// (an error finding: the node was not fully tested, exit 3, as a failed measurement is), and
/// the others still run.
pub fn measure(
    c: &TrainingCheck,
    gpus: usize,
    b: &mut dyn Backend,
    single_samples_per_s: Option<f64>,
    m: &mut Measured,
) -> Result<(), HwError> {
    for p in compared(c, gpus) {
        let who = Subject::method(&fit::method_name(p));
        let run = b
            .training_method(c, p)
            .and_then(|r| record(m, &who, p, &r, single_samples_per_s));
        match run {
            Ok(()) => {}
            Err(HwError::NotSupported(why)) => {
                m.facts
                    .push(Fact::new(UNAVAILABLE, who, FactValue::Text(why)))
            }
            Err(e) => m
                .facts
                .push(Fact::new(FAILED, who, FactValue::Text(e.to_string()))),
        }
    }
    Ok(())
}

fn record(
    m: &mut Measured,
    who: &Subject,
    p: Partition,
    r: &MethodRun,
    single_samples_per_s: Option<f64>,
) -> Result<(), HwError> {
    let name = who.describe();
    if (r.tp, r.dp) != (p.tp(), p.dp()) {
        return Err(HwError::Call {
            call: format!("the {name} training run"),
            detail: format!(
                "it ran {} x {} GPUs (tensor x data) where {} x {} were asked for",
                r.tp,
                r.dp,
                p.tp(),
                p.dp()
            ),
        });
    }
    let timing = |what: &str, v: &[f64], positive: bool| -> Result<(), HwError> {
        let bad = v.len() != r.step_ms.len()
            || v.is_empty()
            || v.iter()
                .any(|t| !(t.is_finite() && (*t > 0.0 || (!positive && *t == 0.0))));
        if bad {
            return Err(HwError::Call {
                call: format!("timing the {name} training run"),
                detail: format!(
                    "its {what} are {v:?} for {} steps: not a time per step",
                    r.step_ms.len()
                ),
            });
        }
        Ok(())
    };
    timing("step times", &r.step_ms, true)?;
    timing("communication times", &r.comm_ms, false)?;
    timing("exposed communication times", &r.exposed_comm_ms, false)?;
    let metric = |n: &str, unit: &str, v: Vec<f64>| Metric::new(n, who.clone(), unit, v);
    super::push_computed(m, "golden_node_loss", who.clone(), &r.golden_node_losses);
    m.metrics.push(metric("step_time", "ms", r.step_ms.clone()));
    m.metrics.push(metric("comm_time", "ms", r.comm_ms.clone()));
    m.metrics
        .push(metric("exposed_comm_time", "ms", r.exposed_comm_ms.clone()));
    let sps: Vec<f64> = r
        .step_ms
        .iter()
        .map(|ms| r.samples_per_step as f64 / (ms / 1e3))
        .collect();
    let med = median(&sps);
    m.metrics.push(metric("samples_per_s", "samples/s", sps));
    if let Some(single) = single_samples_per_s.filter(|s| s.is_finite() && *s > 0.0) {
        m.metrics.push(metric(
            "scaling_efficiency",
            "",
            vec![med / (p.gpus() as f64 * single)],
        ));
    }
    m.metrics.push(metric(
        "comm_fraction",
        "",
        vec![median(&r.exposed_comm_ms) / median(&r.step_ms)],
    ));
    m.facts.push(Fact::new(
        RANKS,
        who.clone(),
        FactValue::Count(p.gpus() as u64),
    ));
    if let Some(d) = &r.inconsistency {
        m.facts.push(Fact::new(
            DISAGREEMENT,
            who.clone(),
            FactValue::Text(d.clone()),
        ));
    }
    Ok(())
}

/// Readings the partitioned runs record: step, communication, exposed communication and
/// throughput per step, the golden losses, scaling and the communication share.
pub fn samples(c: &TrainingCheck, gpus: usize) -> u64 {
    compared(c, gpus).len() as u64 * (4 * c.steps as u64 + c.golden_steps as u64 + 2)
}

/// Judge every compared partitioning (see the module documentation). `cpu_golden`: the CPU's
/// golden losses, which every partitioning must track.
pub fn evaluate(c: &TrainingCheck, gpus: usize, m: &Measured, cpu_golden: &[f32]) -> Vec<Finding> {
    let mut out = floors_without_a_run(c, gpus);
    for p in compared(c, gpus) {
        let name = fit::method_name(p);
        let who = Subject::method(&name);
        let floors = floors(c, p).cloned().unwrap_or_default();
        let fact = |n: &str| m.facts.iter().find(|f| f.name == n && f.subject == who);
        let metric = |n: &str| m.metrics.iter().find(|x| x.name == n && x.subject == who);
        if let Some(f) = fact(UNAVAILABLE) {
            let mut x = finding(
                Status::Skip,
                who.clone(),
                "not available here",
                if floors.any() {
                    "a run to judge"
                } else {
                    "a run to report"
                },
                format!(
                    "not available here: {name} training: {}",
                    f.value.describe()
                ),
            );
            // Unless the suite set floors for it, the comparison was offered, not promised.
            x.info = !floors.any();
            out.push(x);
            continue;
        }
        if let Some(f) = fact(FAILED) {
            out.push(finding(
                Status::Error,
                who.clone(),
                "not measured",
                "a partitioned run",
                format!(
                    "the {name} training run could not be measured: {}",
                    f.value.describe()
                ),
            ));
            continue;
        }
        if fact(RANKS).is_none() {
            out.push(finding(
                Status::Error,
                who.clone(),
                "no record",
                "a partitioned run",
                format!("the {name} training run left no record, so nothing of it was checked"),
            ));
            continue;
        }
        let node_g: Vec<f32> = super::computed(m, "golden_node_loss", &who, cpu_golden.len())
            .iter()
            .map(|v| *v as f32)
            .collect();
        out.push(golden_finding(c, who.clone(), &node_g, cpu_golden));
        out.push(
            match fact(DISAGREEMENT) {
                None => finding(
                    Status::Pass,
                    who.clone(),
                    format!("{} ranks agree", p.gpus()),
                    "ranks that agree",
                    format!(
                    "every rank of the {name} run agreed: loss sums within each tensor-parallel \
                     group, shards across groups, replicated tensors everywhere"
                ),
                ),
                Some(d) => finding(
                    Status::Fail,
                    who.clone(),
                    "ranks disagree",
                    "ranks that agree",
                    format!("the {name} run: {}", d.value.describe()),
                ),
            }
            .on(RANKS),
        );
        let mut figures = speed(
            &name,
            &who,
            gpus,
            &floors,
            metric("scaling_efficiency"),
            metric("comm_fraction"),
        );
        // Its speed is partly its all-reduces', which NCCL's settings steer.
        crate::checks::nccl_env::steer(m, &mut figures);
        out.extend(figures);
    }
    out
}

/// Floors the suite set for a kind of partitioning that this node has none of (tensor
/// parallelism on one GPU, a hybrid on two or three): judgements promised and not made.
fn floors_without_a_run(c: &TrainingCheck, gpus: usize) -> Vec<Finding> {
    let run = compared(c, gpus);
    let kinds = [
        (
            "tensor_parallel",
            "tensor-parallel",
            &c.tensor_parallel,
            "two GPUs or more",
        ),
        (
            "hybrid",
            "hybrid",
            &c.hybrid,
            "4 GPUs or more, in groups of 2 or 4",
        ),
    ];
    kinds
        .into_iter()
        .filter(|(_, _, floors, _)| floors.any())
        .filter(|(key, ..)| {
            !run.iter().any(|p| match p {
                Partition::Tensor { .. } => *key == "tensor_parallel",
                Partition::Hybrid { .. } => *key == "hybrid",
                Partition::Data { .. } => false,
            })
        })
        .map(|(key, name, _, needs)| {
            finding(
                Status::Skip,
                Subject::method(name),
                "not available here",
                format!("a run to judge against checks.training.{key}"),
                format!("not available here: {name} training needs {needs}; this node has {gpus}"),
            )
        })
        .collect()
}

/// The partitioning's speed: against the suite's floors where it sets them, else reported.
fn speed(
    name: &str,
    who: &Subject,
    gpus: usize,
    floors: &MethodFloors,
    scaling: Option<&Metric>,
    comm: Option<&Metric>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    // Whole percents in the sentence, as people say them; three figures where a floor is met
    // or missed, so that a miss never reads as the floor itself.
    let whole = |v: f64| format!("{:.0}", 100.0 * v);
    let pct = |v: f64| fmt_num(100.0 * v);
    let sentence = match (scaling, comm) {
        (Some(s), Some(x)) => format!(
            "{name} over {gpus} GPUs keeps {}% of linear scaling here; communication is {}% of \
             its step",
            whole(s.median),
            whole(x.median)
        ),
        (Some(s), None) => format!(
            "{name} over {gpus} GPUs keeps {}% of linear scaling here",
            whole(s.median)
        ),
        (None, Some(x)) => format!("communication is {}% of the {name} step", whole(x.median)),
        (None, None) => String::new(),
    };
    let missing = |what: &str| {
        finding(
            Status::Error,
            who.clone(),
            "not measured",
            format!("a {what} to judge"),
            format!("the {name} run's {what} was not measured, so its floor was not judged"),
        )
    };
    match (floors.min_scaling_efficiency, scaling) {
        (Some(min), Some(s)) => out.push(
            finding(
                if s.median >= min {
                    Status::Pass
                } else {
                    Status::Fail
                },
                who.clone(),
                format!("{}%", pct(s.median)),
                format!(">= {}%", pct(min)),
                format!("{sentence} (floor {}%)", pct(min)),
            )
            .on("scaling_efficiency"),
        ),
        (Some(_), None) => out.push(missing("scaling efficiency")),
        (None, _) => {}
    }
    match (floors.max_comm_fraction, comm) {
        (Some(max), Some(x)) => out.push(
            finding(
                if x.median <= max {
                    Status::Pass
                } else {
                    Status::Fail
                },
                who.clone(),
                format!("{}% of the step", pct(x.median)),
                format!("<= {}%", pct(max)),
                format!(
                    "{name}: {}% of each step waits on communication (at most {}%)",
                    pct(x.median),
                    pct(max)
                ),
            )
            .on("comm_fraction"),
        ),
        (Some(_), None) => out.push(missing("communication share")),
        (None, _) => {}
    }
    if floors.min_scaling_efficiency.is_none() && !sentence.is_empty() {
        out.push(
            finding(
                Status::Pass,
                who.clone(),
                match scaling {
                    Some(s) => format!("{}% of linear scaling", pct(s.median)),
                    None => "reported".into(),
                },
                "-",
                sentence,
            )
            .on("scaling_efficiency")
            .informational(),
        );
    }
    out
}

#[cfg(test)]
mod tests;
