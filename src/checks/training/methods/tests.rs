use super::*;
use crate::checks::Measured;

fn cfg(toml_text: &str) -> TrainingCheck {
    toml::from_str(toml_text).expect("training table")
}

/// A healthy run of `p`: `steps` steps of 10 ms with 2 ms waited on communication, golden
/// losses equal to `golden`.
fn run(p: Partition, steps: usize, golden: &[f32]) -> MethodRun {
    MethodRun {
        tp: p.tp(),
        dp: p.dp(),
        golden_node_losses: golden.iter().map(|v| f64::from(*v)).collect(),
        step_ms: vec![10.0; steps],
        comm_ms: vec![3.0; steps],
        exposed_comm_ms: vec![2.0; steps],
        samples_per_step: 1000 * p.dp(),
        inconsistency: None,
    }
}

const GOLDEN: [f32; 4] = [2.4, 2.3, 2.2, 2.1];

/// Every compared partitioning of `c` on `gpus` GPUs recorded from `make`, then judged.
fn judged(
    c: &TrainingCheck,
    gpus: usize,
    single: Option<f64>,
    make: impl Fn(Partition) -> MethodRun,
) -> Vec<Finding> {
    let mut m = Measured::default();
    for p in compared(c, gpus) {
        let who = Subject::method(&fit::method_name(p));
        record(&mut m, &who, p, &make(p), single).expect("recorded");
    }
    evaluate(c, gpus, &m, &GOLDEN)
}

fn of<'a>(f: &'a [Finding], method: &str) -> Vec<&'a Finding> {
    f.iter()
        .filter(|x| x.subject.method.as_deref() == Some(method))
        .collect()
}

#[test]
fn the_partitionings_compared_follow_the_gpu_count_and_the_switch() {
    let c = cfg("");
    assert!(compared(&c, 1).is_empty());
    assert_eq!(compared(&c, 2), [Partition::Tensor { tp: 2 }]);
    assert_eq!(
        compared(&c, 4),
        [
            Partition::Tensor { tp: 4 },
            Partition::Hybrid { tp: 2, dp: 2 }
        ]
    );
    assert_eq!(
        compared(&c, 6),
        [
            Partition::Tensor { tp: 6 },
            Partition::Hybrid { tp: 2, dp: 3 }
        ]
    );
    assert_eq!(
        compared(&c, 8),
        [
            Partition::Tensor { tp: 8 },
            Partition::Hybrid { tp: 2, dp: 4 },
            Partition::Hybrid { tp: 4, dp: 2 }
        ]
    );
    assert!(compared(&cfg("partitionings = false"), 8).is_empty());
    // Floors by kind; the data-parallel run has its own.
    let c =
        cfg("[tensor_parallel]\nmin_scaling_efficiency = 0.5\n[hybrid]\nmax_comm_fraction = 0.3");
    assert_eq!(
        floors(&c, Partition::Tensor { tp: 8 })
            .unwrap()
            .min_scaling_efficiency,
        Some(0.5)
    );
    assert_eq!(
        floors(&c, Partition::Hybrid { tp: 2, dp: 4 })
            .unwrap()
            .max_comm_fraction,
        Some(0.3)
    );
    assert!(floors(&c, Partition::Data { dp: 8 }).is_none());
}

#[test]
fn a_healthy_run_passes_its_golden_and_rank_checks_and_reports_its_speed() {
    let c = cfg("");
    let f = judged(&c, 8, Some(200.0), |p| run(p, 5, &GOLDEN));
    for method in [
        "tensor-parallel",
        "hybrid (tensor 2 x data 4)",
        "hybrid (tensor 4 x data 2)",
    ] {
        let mine = of(&f, method);
        let judgements: Vec<_> = mine.iter().filter(|x| !x.info).collect();
        assert_eq!(judgements.len(), 2, "golden and ranks: {mine:#?}");
        assert!(
            judgements.iter().all(|x| x.status == Status::Pass),
            "{mine:#?}"
        );
        // Speed without floors: a note, which no coverage counts.
        let note = mine.iter().find(|x| x.info).expect("a note");
        assert_eq!(note.metric.as_deref(), Some("scaling_efficiency"));
    }
    // 1000 x dp samples in 10 ms on 8 GPUs against 200 samples/s on one: 1e5 x dp / 1600.
    let tp = of(&f, "tensor-parallel");
    let note = tp.iter().find(|x| x.info).unwrap();
    assert_eq!(
        note.reason,
        "tensor-parallel over 8 GPUs keeps 6250% of linear scaling here; communication is 20% of \
         its step"
    );
}

#[test]
fn ranks_that_disagree_or_losses_off_the_cpu_fail_by_method() {
    let c = cfg("");
    let f = judged(&c, 4, Some(1e5), |p| {
        let mut r = run(p, 3, &GOLDEN);
        if p == (Partition::Hybrid { tp: 2, dp: 2 }) {
            r.inconsistency = Some("rank 3 ends with other parameters than rank 1".into());
        }
        if p == (Partition::Tensor { tp: 4 }) {
            r.golden_node_losses[2] *= 1.1;
        }
        r
    });
    let tp = of(&f, "tensor-parallel");
    let bad: Vec<_> = tp.iter().filter(|x| x.status == Status::Fail).collect();
    assert_eq!(bad.len(), 1, "{tp:#?}");
    assert_eq!(bad[0].metric.as_deref(), Some("golden_node_loss"));
    assert!(
        bad[0].reason.contains("the tensor-parallel run's loss"),
        "{}",
        bad[0].reason
    );
    let hy = of(&f, "hybrid (tensor 2 x data 2)");
    let bad: Vec<_> = hy.iter().filter(|x| x.status == Status::Fail).collect();
    assert_eq!(bad.len(), 1, "{hy:#?}");
    assert_eq!(bad[0].metric.as_deref(), Some(RANKS));
    assert!(
        bad[0].reason.contains("rank 3 ends with other parameters"),
        "{}",
        bad[0].reason
    );
    // Too few golden losses to compare: an error, not a pass.
    let f = judged(&c, 2, None, |p| run(p, 3, &GOLDEN[..1]));
    assert!(
        f.iter()
            .any(|x| x.status == Status::Error && x.metric.as_deref() == Some("golden_node_loss")),
        "{f:#?}"
    );
}

#[test]
fn a_partitioning_not_available_is_a_note_unless_the_suite_set_floors_for_it() {
    let unavailable = |c: &TrainingCheck| {
        let mut m = Measured::default();
        for p in compared(c, 2) {
            m.facts.push(Fact::new(
                UNAVAILABLE,
                Subject::method(&fit::method_name(p)),
                FactValue::Text("no NCCL here".into()),
            ));
        }
        evaluate(c, 2, &m, &GOLDEN)
    };
    let f = unavailable(&cfg(""));
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!((f[0].status, f[0].info), (Status::Skip, true));
    assert_eq!(
        f[0].reason,
        "not available here: tensor-parallel training: no NCCL here"
    );
    let f = unavailable(&cfg("[tensor_parallel]\nmax_comm_fraction = 0.5"));
    assert_eq!((f[0].status, f[0].info), (Status::Skip, false), "{f:#?}");
    // Neither a record nor a reason: an error.
    let f = evaluate(&cfg(""), 2, &Measured::default(), &GOLDEN);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].status, Status::Error);
    assert!(f[0].reason.contains("left no record"), "{}", f[0].reason);
}

#[test]
fn floors_judge_scaling_and_communication_at_their_edges() {
    // 1000 samples in 10 ms on 2 GPUs against 100000/s on one: exactly 50% of linear; 20% of
    // the step waited on communication.
    let at = |toml_text: &str, single: Option<f64>| {
        let f = judged(&cfg(toml_text), 2, single, |p| run(p, 4, &GOLDEN));
        f.into_iter()
            .filter(|x| !x.info && x.metric.as_deref() != Some("golden_node_loss"))
            .filter(|x| x.metric.as_deref() != Some(RANKS))
            .map(|x| x.status)
            .collect::<Vec<_>>()
    };
    let floor = |s: &str| format!("[tensor_parallel]\n{s}");
    assert_eq!(
        at(&floor("min_scaling_efficiency = 0.5"), Some(1e5)),
        [Status::Pass]
    );
    assert_eq!(
        at(&floor("min_scaling_efficiency = 0.51"), Some(1e5)),
        [Status::Fail]
    );
    assert_eq!(
        at(&floor("max_comm_fraction = 0.2"), Some(1e5)),
        [Status::Pass]
    );
    assert_eq!(
        at(&floor("max_comm_fraction = 0.19"), Some(1e5)),
        [Status::Fail]
    );
    // A hybrid floor says nothing about tensor parallelism; on two GPUs, where no hybrid
    // runs, it is a judgement not made.
    assert_eq!(
        at("[hybrid]\nmin_scaling_efficiency = 0.99", Some(1e5)),
        [Status::Skip]
    );
    // A floor on scaling with no one-GPU run to scale against: an error.
    assert_eq!(
        at(&floor("min_scaling_efficiency = 0.5"), None),
        [Status::Error]
    );
    let f = judged(
        &cfg(&floor("min_scaling_efficiency = 0.51")),
        2,
        Some(1e5),
        |p| run(p, 4, &GOLDEN),
    );
    let fail = f.iter().find(|x| x.status == Status::Fail).unwrap();
    assert_eq!(fail.found, "50.0%");
    assert_eq!(fail.expected, ">= 51.0%");
    // The floor's finding carries the sentence: no note repeats it.
    assert!(
        fail.reason
            .starts_with("tensor-parallel over 2 GPUs keeps 50%"),
        "{}",
        fail.reason
    );
    assert!(f.iter().all(|x| !x.info), "{f:#?}");
    // Nothing measured and no floor: no note without words.
    let mut m = Measured::default();
    let who = Subject::method("tensor-parallel");
    m.facts.push(Fact::new(RANKS, who, FactValue::Count(2)));
    let f = evaluate(&cfg(""), 2, &m, &GOLDEN);
    assert!(f.iter().all(|x| !x.info), "{f:#?}");
}

#[test]
fn a_run_of_another_shape_or_with_a_broken_timer_is_refused() {
    let who = Subject::method("tensor-parallel");
    let p = Partition::Tensor { tp: 4 };
    let mut m = Measured::default();
    let other = run(Partition::Hybrid { tp: 2, dp: 2 }, 3, &GOLDEN);
    let e = record(&mut m, &who, p, &other, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ran 2 x 2 GPUs"), "{e}");
    let mut broken = run(p, 3, &GOLDEN);
    broken.step_ms[1] = 0.0;
    assert!(record(&mut m, &who, p, &broken, None).is_err());
    assert!(m.metrics.is_empty() && m.facts.is_empty(), "{m:?}");
}

#[test]
fn the_sample_count_is_what_a_run_records() {
    let c = cfg("steps = 7\ngolden_steps = 3");
    let mut m = Measured::default();
    for p in compared(&c, 8) {
        let who = Subject::method(&fit::method_name(p));
        let golden = vec![2.0; c.golden_steps];
        record(&mut m, &who, p, &run(p, c.steps, &golden), Some(1.0)).unwrap();
    }
    let recorded: usize = m.metrics.iter().map(|x| x.samples.len()).sum();
    assert_eq!(recorded as u64, samples(&c, 8));
    assert_eq!(samples(&c, 1), 0);
}

fn scripted(
    run: impl Fn(Partition) -> Result<MethodRun, HwError> + 'static,
) -> crate::testutil::Scripted {
    crate::testutil::Scripted {
        training_method: Some(Box::new(run)),
        ..Default::default()
    }
}

#[test]
fn a_partitioning_that_fails_is_an_error_of_its_own_and_the_others_still_run() {
    let c = cfg("");
    let mut b = scripted(|p: Partition| match p {
        Partition::Tensor { .. } => Err(HwError::Call {
            call: "ncclCommInitAll over CUDA devices [0, 1, 2, 3]".into(),
            detail: "unhandled cuda error".into(),
        }),
        Partition::Hybrid { .. } => Ok(run(p, 3, &GOLDEN)),
        Partition::Data { .. } => unreachable!(),
    });
    let mut m = Measured::default();
    measure(&c, 4, &mut b, Some(1e5), &mut m).expect("the check's measurement stands");
    let f = evaluate(&c, 4, &m, &GOLDEN);
    let tp = of(&f, "tensor-parallel");
    assert_eq!(tp.len(), 1, "{tp:#?}");
    assert_eq!(tp[0].status, Status::Error);
    assert!(
        tp[0]
            .reason
            .contains("ncclCommInitAll over CUDA devices [0, 1, 2, 3] failed"),
        "{}",
        tp[0].reason
    );
    let hy = of(&f, "hybrid (tensor 2 x data 2)");
    assert!(
        hy.iter()
            .filter(|x| !x.info)
            .all(|x| x.status == Status::Pass),
        "{hy:#?}"
    );
    assert_eq!(hy.iter().filter(|x| !x.info).count(), 2);
    // A run that is not a time per step is a failed measurement, said as such.
    let mut b = scripted(|p: Partition| {
        let mut r = run(p, 3, &GOLDEN);
        r.exposed_comm_ms[1] = -0.5;
        Ok(r)
    });
    let mut m = Measured::default();
    measure(&c, 2, &mut b, None, &mut m).unwrap();
    assert!(m.metrics.is_empty(), "{:?}", m.metrics);
    let f = evaluate(&c, 2, &m, &GOLDEN);
    assert_eq!(f[0].status, Status::Error);
    assert!(
        f[0].reason.contains("exposed communication times"),
        "{}",
        f[0].reason
    );
    // Not available: a note, and the measurement goes on.
    let mut b = scripted(|_: Partition| {
        Err(HwError::NotSupported(
            "bf16 is planned data-parallel only".into(),
        ))
    });
    let mut m = Measured::default();
    measure(&c, 8, &mut b, None, &mut m).unwrap();
    let f = evaluate(&c, 8, &m, &GOLDEN);
    assert_eq!(f.len(), 3);
    assert!(
        f.iter().all(|x| x.status == Status::Skip && x.info),
        "{f:#?}"
    );
}

#[test]
fn floors_for_a_partitioning_this_node_cannot_run_are_judgements_not_made() {
    let c =
        cfg("[tensor_parallel]\nmin_scaling_efficiency = 0.5\n[hybrid]\nmax_comm_fraction = 0.4");
    let f = evaluate(&c, 1, &Measured::default(), &GOLDEN);
    assert_eq!(f.len(), 2, "{f:#?}");
    assert!(
        f.iter().all(|x| x.status == Status::Skip && !x.info),
        "{f:#?}"
    );
    assert!(
        f[0].reason
            .contains("tensor-parallel training needs two GPUs or more; this node has 1"),
        "{}",
        f[0].reason
    );
    // Two GPUs run tensor parallelism but no hybrid: only the hybrid floor is left unjudged.
    let f = judged(&c, 2, Some(1e5), |p| run(p, 3, &GOLDEN));
    let unjudged: Vec<_> = f.iter().filter(|x| x.status == Status::Skip).collect();
    assert_eq!(unjudged.len(), 1, "{f:#?}");
    assert_eq!(unjudged[0].subject.method.as_deref(), Some("hybrid"));
    assert!(!unjudged[0].info);
    // Four GPUs run both kinds: every floor is judged, none is left unjudged.
    let f = judged(&c, 4, Some(1e5), |p| run(p, 3, &GOLDEN));
    assert!(f.iter().all(|x| x.status != Status::Skip), "{f:#?}");
    // Without floors, nothing is said about what the node cannot run.
    assert!(evaluate(&cfg(""), 1, &Measured::default(), &GOLDEN).is_empty());
}

#[test]
fn timings_of_another_length_or_empty_are_refused() {
    let who = Subject::method("tensor-parallel");
    let p = Partition::Tensor { tp: 2 };
    for broken in [
        |r: &mut MethodRun| r.step_ms.clear(),
        |r: &mut MethodRun| {
            r.comm_ms.pop();
        },
        |r: &mut MethodRun| r.exposed_comm_ms[0] = f64::NAN,
        |r: &mut MethodRun| r.comm_ms[2] = f64::INFINITY,
    ] {
        let mut r = run(p, 3, &GOLDEN);
        broken(&mut r);
        let mut m = Measured::default();
        assert!(record(&mut m, &who, p, &r, Some(1.0)).is_err(), "{r:?}");
    }
    // No communication at all is a time like any other.
    let mut r = run(p, 3, &GOLDEN);
    r.exposed_comm_ms = vec![0.0; 3];
    r.comm_ms = vec![0.0; 3];
    assert!(record(&mut Measured::default(), &who, p, &r, Some(1.0)).is_ok());
}

#[test]
fn no_scaling_is_recorded_against_a_one_gpu_figure_that_is_not_a_rate() {
    let who = Subject::method("tensor-parallel");
    let p = Partition::Tensor { tp: 2 };
    let scaling = |single: Option<f64>| {
        let mut m = Measured::default();
        record(&mut m, &who, p, &run(p, 3, &GOLDEN), single).unwrap();
        m.metrics
            .iter()
            .find(|x| x.name == "scaling_efficiency")
            .map(|x| x.median)
    };
    for single in [
        None,
        Some(0.0),
        Some(-1.0),
        Some(f64::NAN),
        Some(f64::INFINITY),
    ] {
        assert_eq!(scaling(single), None, "{single:?}");
    }
    // 1000 samples in 10 ms on 2 GPUs against 1e5 samples/s on one.
    assert_eq!(scaling(Some(1e5)), Some(0.5));
}

/// A partitioning's speed is partly its all-reduces': under an NCCL setting
/// (`NCCL_PROTO=Simple`) a missed floor is not judged (an error naming it), while ranks that
/// disagree still fail whatever steered NCCL.
#[test]
fn a_missed_floor_under_an_nccl_setting_is_not_judged_but_disagreement_fails() {
    let c = cfg("[tensor_parallel]\nmin_scaling_efficiency = 0.51");
    let run_with = |disagree: bool, settings: &[crate::backend::NcclSetting]| {
        let mut m = Measured::default();
        for p in compared(&c, 2) {
            let who = Subject::method(&fit::method_name(p));
            let mut r = run(p, 4, &GOLDEN);
            if disagree {
                r.inconsistency = Some("rank 1's loss sum differs from rank 0's".into());
            }
            record(&mut m, &who, p, &r, Some(1e5)).expect("recorded");
        }
        crate::checks::nccl_env::record(
            &mut m,
            settings,
            crate::checks::nccl_env::Scope::Node,
            &Default::default(),
        );
        evaluate(&c, 2, &m, &GOLDEN)
    };
    let status = |f: &[Finding], metric: Option<&str>| {
        f.iter()
            .find(|x| !x.info && x.metric.as_deref() == metric)
            .map(|x| x.status)
    };
    let set = [crate::backend::NcclSetting::env("NCCL_PROTO", "Simple")];
    let plain = run_with(false, &[]);
    assert_eq!(
        status(&plain, Some("scaling_efficiency")),
        Some(Status::Fail)
    );
    let under = run_with(false, &set);
    assert_eq!(
        status(&under, Some("scaling_efficiency")),
        Some(Status::Error)
    );
    let miss = under.iter().find(|x| x.status == Status::Error).unwrap();
    assert!(
        miss.reason
            .contains("not judged: NCCL ran under NCCL_PROTO=Simple"),
        "{}",
        miss.reason
    );
    let wrong = run_with(true, &set);
    assert_eq!(status(&wrong, Some(RANKS)), Some(Status::Fail));
}
