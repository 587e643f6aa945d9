use super::*;
use crate::backend::sim::{self, Fault, SimBackend};
use crate::evidence::Status;
use crate::inventory::Inventory;

/// A simulated `node` with `faults`, its inventory and suite.
fn node(name: &str, faults: &[&str]) -> (SimBackend, Inventory, crate::suite::Suite) {
    let faults = faults.iter().map(|f| Fault::parse(f).unwrap()).collect();
    let mut b = SimBackend::new(sim::load_node(name).unwrap(), faults, 1).unwrap();
    let inv = b.inventory().unwrap();
    let suite = crate::suite::load::load(name).unwrap().suite;
    (b, inv, suite)
}

fn cfg(text: &str) -> ComputeCheck {
    toml::from_str(text).unwrap()
}

/// Measure and judge `text`'s compute check on a simulated `name` with `faults`.
fn run(name: &str, faults: &[&str], text: &str) -> (Measured, Vec<Finding>) {
    let (mut b, inv, suite) = node(name, faults);
    let ctx = crate::testutil::ctx(&suite, &inv);
    let check = Compute(cfg(text));
    let m = check.measure(&ctx, &mut b, &mut |_, _| {}).unwrap();
    let f = check.evaluate(&ctx, &m);
    (m, f)
}

/// Measure and judge `text`'s compute check with backend `b` on simulated `name`'s GPUs and
/// suite.
fn run_with(name: &str, b: &mut dyn Backend, text: &str) -> (Measured, Vec<Finding>) {
    let (_, inv, suite) = node(name, &[]);
    let ctx = crate::testutil::ctx(&suite, &inv);
    let check = Compute(cfg(text));
    let m = check.measure(&ctx, b, &mut |_, _| {}).unwrap();
    let f = check.evaluate(&ctx, &m);
    (m, f)
}

/// The metric `name` of GPU `g`.
fn gpu_metric<'a>(m: &'a Measured, name: &str, g: usize) -> &'a crate::evidence::Metric {
    m.metrics
        .iter()
        .find(|x| x.name == name && x.subject == Subject::gpu(g))
        .unwrap_or_else(|| panic!("no {name} of GPU {g}"))
}

fn not_passing(f: &[Finding]) -> Vec<&Finding> {
    f.iter().filter(|x| x.status != Status::Pass).collect()
}

const FLOORS: &str = "size = 8192\noutlier_pct = 10.0\n\
    fp32_tflops = { fail_below = 38.0 }\ntf32_tflops = { fail_below = 280.0 }\n\
    bf16_tflops = { fail_below = 590.0 }\nfp8_tflops = { fail_below = 900.0 }";

#[test]
fn a_healthy_hopper_node_passes_every_precision_with_its_products_checked() {
    let (m, f) = run("h200-sxm-8", &[], FLOORS);
    assert!(not_passing(&f).is_empty(), "{:#?}", not_passing(&f));
    // Every GPU, every precision: a figure near the node's rate at 8192³, and a data check.
    for g in 0..8 {
        for (p, near) in [(GemmPrecision::Fp32, 51.0), (GemmPrecision::Bf16, 832.0)] {
            let x = gpu_metric(&m, p.metric(), g);
            assert_eq!(x.unit, "TFLOP/s");
            // The launch overhead costs under 1% at this size.
            assert!(
                (x.median / near - 1.0).abs() < 0.04,
                "{p} {g}: {}",
                x.median
            );
        }
    }
    assert_eq!(m.metrics.len(), 32);
    let data = f
        .iter()
        .find(|x| x.reason.starts_with("every product exact"))
        .unwrap();
    assert_eq!(
        data.reason,
        format!(
            "every product exact: {} elements checked over 32 GEMM measurements",
            32 * 8192 * 8192u64
        )
    );
    // Each judged figure is a judgement of its own: 8 GPUs x 4 precisions, floors.
    let floors = f
        .iter()
        .filter(|x| x.reason.contains("within limits"))
        .count();
    assert_eq!(floors, 32);
}

#[test]
fn small_gemms_fall_below_the_plateau() {
    let (m8, _) = run("h200-sxm-8", &[], "size = 8192\nprecisions = [\"bf16\"]");
    let (m1, _) = run("h200-sxm-8", &[], "size = 1024\nprecisions = [\"bf16\"]");
    let (a, b) = (m8.metrics[0].median, m1.metrics[0].median);
    // 1024³ in bf16 takes ~2.7 us of arithmetic (2·1024³ flops) beside 8 us of fixed cost:
    // about a quarter of the plateau's rate, never nothing.
    assert!((0.2..0.3).contains(&(b / a)), "{b} vs {a}");
}

#[test]
fn the_slow_but_healthy_gpu_is_failed_by_the_outlier_rule_not_the_floor() {
    // 12% slow: above every floor, outside the 10% rule.
    let (_, f) = run("h200-sxm-8", &["slow-compute:gpu=5,factor=0.88"], FLOORS);
    let bad = not_passing(&f);
    assert_eq!(bad.len(), 4, "{bad:#?}");
    for x in &bad {
        assert_eq!(
            (x.status, x.subject.clone()),
            (Status::Fail, Subject::gpu(5))
        );
        assert!(x.reason.contains("the node median"), "{}", x.reason);
    }
    let metrics: Vec<&str> = bad.iter().filter_map(|x| x.metric.as_deref()).collect();
    assert_eq!(
        metrics,
        ["fp32_tflops", "tf32_tflops", "bf16_tflops", "fp8_tflops"]
    );
    // The default slow-compute (a third of its rate) misses the floors too.
    let (_, f) = run("h200-sxm-8", &["slow-compute:gpu=2"], FLOORS);
    assert!(f.iter().any(|x| x.status == Status::Fail
        && x.reason.contains("below the floor")
        && x.subject == Subject::gpu(2)));
}

#[test]
fn a_thermally_slowed_gpu_computes_slower() {
    let (m, f) = run("h200-sxm-8", &["thermal-throttle:gpu=1"], FLOORS);
    let bf16 = |g| gpu_metric(&m, "bf16_tflops", g).median;
    assert!(bf16(1) < 0.75 * bf16(0), "{} vs {}", bf16(1), bf16(0));
    assert!(not_passing(&f).iter().all(|x| x.subject == Subject::gpu(1)));
    assert!(!not_passing(&f).is_empty());
}

#[test]
fn wrong_products_fail_the_gpu_even_where_no_figure_is_judged() {
    let (m, f) = run(
        "h200-sxm-8",
        &["compute-corrupt:gpu=6"],
        "precisions = [\"bf16\"]",
    );
    assert!(m.wrong_data(), "wrong data is never measured again");
    let bad = not_passing(&f);
    assert_eq!(bad.len(), 1, "{bad:#?}");
    assert_eq!(
        (
            bad[0].status,
            bad[0].subject.clone(),
            bad[0].reason.as_str()
        ),
        (
            Status::Fail,
            Subject::gpu(6),
            "GPU 6: bf16 GEMM: 8192 of 67108864 elements of the product wrong"
        )
    );
    assert!(!f
        .iter()
        .any(|x| x.reason.starts_with("every product exact")));
}

#[test]
fn fp8_on_an_ampere_gpu_is_not_available_here() {
    // Judged by the suite: a skip per GPU, so the pass is a partial one.
    let (m, f) = run(
        "a100-sxm-80gb-8",
        &[],
        "fp8_tflops = { fail_below = 900.0 }",
    );
    let skips: Vec<&Finding> = f.iter().filter(|x| x.status == Status::Skip).collect();
    assert_eq!(skips.len(), 8);
    assert!(skips.iter().all(|x| !x.info));
    assert_eq!(
        skips[0].reason,
        "not available here: fp8 GEMM on GPU 0: fp8 GEMMs need compute capability 8.9 or newer; \
         the NVIDIA A100-SXM4-80GB is 8.0"
    );
    assert!(m.metrics.iter().all(|x| x.name != "fp8_tflops"));
    let (status, _, coverage) = crate::runner::summarize_with_coverage(&f);
    assert_eq!(status, Status::Pass);
    assert!(coverage.unwrap().partial());
    // Not judged by the suite (the check-wide outlier rule promises no precision): a note, and
    // the pass is whole.
    let (_, f) = run(
        "a100-sxm-80gb-8",
        &[],
        "bf16_tflops = { fail_below = 200.0 }\noutlier_pct = 10.0",
    );
    let notes: Vec<&Finding> = f.iter().filter(|x| x.status == Status::Skip).collect();
    assert_eq!(notes.len(), 8);
    assert!(notes.iter().all(|x| x.info));
    let (status, _, coverage) = crate::runner::summarize_with_coverage(&f);
    assert_eq!(status, Status::Pass);
    assert!(!coverage.unwrap().partial());
}

#[test]
fn a_uniformly_slow_node_is_warned_about_against_its_typical_figure() {
    let slow: Vec<String> = (0..8)
        .map(|g| format!("slow-compute:gpu={g},factor=0.8"))
        .collect();
    let slow: Vec<&str> = slow.iter().map(|s| s.as_str()).collect();
    let text = "precisions = [\"bf16\"]\noutlier_pct = 10.0\n\
                bf16_tflops = { fail_below = 500.0, typical = 790.0 }";
    let (_, f) = run("h200-sxm-8", &slow, text);
    let bad = not_passing(&f);
    assert_eq!(bad.len(), 1, "{bad:#?}");
    assert_eq!(bad[0].status, Status::Warn);
    assert!(bad[0].reason.contains("typical"), "{}", bad[0].reason);
    let (_, f) = run("h200-sxm-8", &[], text);
    assert!(not_passing(&f).is_empty());
}

/// Judge hand-made measurements of two GPUs' bf16 figure.
fn judge_made(m: &Measured) -> Vec<Finding> {
    let (_, inv, suite) = node("h200-sxm-8", &[]);
    let mut inv = inv;
    inv.gpus.truncate(2);
    let ctx = crate::testutil::ctx(&suite, &inv);
    Compute(cfg("precisions = [\"bf16\"]")).evaluate(&ctx, m)
}

fn made(facts: [Option<FactValue>; 2]) -> Measured {
    let mut m = Measured::default();
    for (g, fact) in facts.into_iter().enumerate() {
        m.metrics.push(Metric::new(
            "bf16_tflops",
            Subject::gpu(g),
            UNIT,
            vec![790.0; 3],
        ));
        if let Some(v) = fact {
            m.facts
                .push(Fact::new("bf16_wrong_elements", Subject::gpu(g), v));
        }
    }
    m
}

#[test]
fn a_product_not_proven_right_is_an_error_never_a_pass() {
    let ok = FactValue::Elements {
        wrong: 0,
        checked: 64,
    };
    let f = judge_made(&made([Some(ok.clone()), Some(ok.clone())]));
    assert!(not_passing(&f).is_empty(), "{f:#?}");
    for (other, found) in [
        (None, "no data check"),
        (
            Some(FactValue::Elements {
                wrong: 0,
                checked: 0,
            }),
            "0 elements checked",
        ),
        (Some(FactValue::Text("7".into())), "'7'"),
    ] {
        let f = judge_made(&made([Some(ok.clone()), other]));
        let bad = not_passing(&f);
        assert_eq!(bad.len(), 1, "{found}: {f:#?}");
        assert_eq!(
            (bad[0].status, bad[0].subject.clone(), bad[0].found.as_str()),
            (Status::Error, Subject::gpu(1), found)
        );
        assert!(!f
            .iter()
            .any(|x| x.reason.starts_with("every product exact")));
    }
}

#[test]
fn a_missing_or_unknown_figure_is_an_error() {
    let ok = FactValue::Elements {
        wrong: 0,
        checked: 64,
    };
    let mut m = made([Some(ok.clone()), Some(ok)]);
    m.metrics.remove(1);
    let bad: Vec<Finding> = judge_made(&m)
        .into_iter()
        .filter(|x| x.status != Status::Pass)
        .collect();
    assert_eq!(bad.len(), 1, "{bad:#?}");
    assert_eq!(
        (bad[0].status, bad[0].reason.as_str()),
        (Status::Error, "GPU 1: bf16 GEMM was not measured")
    );
    let mut m = made([
        Some(FactValue::Elements {
            wrong: 0,
            checked: 64,
        }),
        Some(FactValue::Elements {
            wrong: 0,
            checked: 64,
        }),
    ]);
    m.metrics.push(Metric::new(
        "fp64_tflops",
        Subject::gpu(0),
        UNIT,
        vec![60.0],
    ));
    let bad: Vec<Finding> = judge_made(&m)
        .into_iter()
        .filter(|x| x.status != Status::Pass)
        .collect();
    assert_eq!(bad.len(), 1, "{bad:#?}");
    assert_eq!(bad[0].found, "unknown figure 'fp64_tflops'");
}

#[test]
fn a_failing_gemm_ends_the_check_as_an_error_not_a_skip() {
    // GEMMs that fail as a broken driver's do.
    let mut broken = crate::testutil::Scripted {
        gemm: Some(Box::new(|_, _, _| {
            Err(HwError::Call {
                call: "cublasGemmEx".into(),
                detail: "CUBLAS_STATUS_EXECUTION_FAILED".into(),
            })
        })),
        ..Default::default()
    };
    let (m, f) = run_with("h200-sxm-8", &mut broken, "precisions = [\"bf16\"]");
    assert!(m.metrics.is_empty());
    // One error a GPU, in the call's words; no "not measured" beside it, no skip, no pass.
    assert_eq!(f.len(), 8, "{f:#?}");
    for (g, x) in f.iter().enumerate() {
        assert_eq!(
            (x.status, x.subject.clone()),
            (Status::Error, Subject::gpu(g))
        );
        assert_eq!(x.found, "could not measure");
        assert_eq!(
            x.reason,
            format!(
                "GPU {g}: bf16 GEMM could not be measured: cublasGemmEx failed: \
                 CUBLAS_STATUS_EXECUTION_FAILED"
            )
        );
    }
    assert_eq!(crate::runner::summarize(&f).0, Status::Error);
}

/// A GEMM that misses its deadline leaves GPUs that cannot be used again in this process:
/// nothing more is asked of the backend (no GEMM, no sustained load), and each figure not
/// measured says why in one line, not in a copy of the backend's refusal.
#[test]
fn after_a_gemm_hangs_nothing_more_runs_and_each_gap_names_the_hang() {
    let calls = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let seen = calls.clone();
    let mut b = crate::testutil::Scripted {
        gemm: Some(Box::new(move |g, p, _| {
            seen.borrow_mut().push((g, p));
            if (g, p) == (1, GemmPrecision::Bf16) {
                Err(HwError::Timeout {
                    what: "bf16 GEMM of 8192 on GPU 1".into(),
                    seconds: 30.0,
                })
            } else {
                Ok(sample(800.0))
            }
        })),
        // No sustained script: asking for the load after the hang would panic.
        ..Default::default()
    };
    let (m, f) = run_with(
        "h200-sxm-8",
        &mut b,
        "precisions = [\"bf16\", \"fp32\"]\n[sustained]\nseconds = 10.0",
    );
    use GemmPrecision::{Bf16, Fp32};
    assert_eq!(*calls.borrow(), [(0, Bf16), (0, Fp32), (1, Bf16)]);
    assert_eq!(m.metrics.len(), 2, "GPU 0's figures stand");
    let errors: Vec<&Finding> = f.iter().filter(|x| x.status == Status::Error).collect();
    // GPU 1 bf16 (the hang), GPU 1 fp32, GPUs 2-7 both, and the sustained load.
    assert_eq!(errors.len(), 1 + 1 + 12 + 1, "{errors:#?}");
    let hang = "GPU 1: bf16 GEMM could not be measured: bf16 GEMM of 8192 on GPU 1 did not \
                finish within 30 s";
    let gap = "not run: an earlier GEMM did not finish (GPU 1, bf16 GEMM), and GPUs that may \
               still run it cannot be used again in this process";
    let (hung, gaps): (Vec<&&Finding>, Vec<&&Finding>) =
        errors.iter().partition(|x| x.reason == hang);
    assert_eq!(hung.len(), 1, "{errors:#?}");
    assert!(gaps.iter().all(|x| x.reason.ends_with(gap)), "{errors:#?}");
    assert!(gaps
        .iter()
        .any(|x| x.reason == format!("GPU 1: fp32 GEMM (TF32 off) could not be measured: {gap}")));
    assert_eq!(
        gaps.iter().filter(|x| x.subject == Subject::node()).count(),
        1,
        "the sustained load's"
    );
    assert_eq!(crate::runner::summarize(&f).0, Status::Error);
}

/// The same where the GEMM at twice the size (the plateau's) hangs: the figure at the size
/// itself stands, and nothing after it runs.
#[test]
fn a_hang_at_twice_the_size_stops_the_rest_too() {
    let calls = std::rc::Rc::new(std::cell::RefCell::new(0usize));
    let seen = calls.clone();
    let mut b = crate::testutil::Scripted {
        gemm: Some(Box::new(move |g, _, n| {
            *seen.borrow_mut() += 1;
            if (g, n) == (0, 16384) {
                Err(HwError::Timeout {
                    what: "bf16 GEMM of 16384 on GPU 0".into(),
                    seconds: 60.0,
                })
            } else {
                Ok(sample(800.0))
            }
        })),
        ..Default::default()
    };
    let (m, f) = run_with(
        "h200-sxm-8",
        &mut b,
        "precisions = [\"bf16\"]\nsize = 8192\nplateau_pct = 5.0",
    );
    assert_eq!(
        *calls.borrow(),
        2,
        "GPU 0 at 8192, then at 16384; nothing after"
    );
    assert_eq!(m.metrics.len(), 1, "GPU 0's figure at 8192 stands");
    let errors: Vec<&Finding> = f.iter().filter(|x| x.status == Status::Error).collect();
    assert!(errors.iter().any(|x| x.reason
        == "GPU 0: bf16 GEMM could not be measured: at 16384: bf16 GEMM of 16384 on GPU 0 did \
            not finish within 60 s"));
    assert_eq!(
        errors
            .iter()
            .filter(|x| x.reason.ends_with("cannot be used again in this process"))
            .count(),
        7,
        "GPUs 1-7: {errors:#?}"
    );
}

/// A GEMM sample of `tflops` with its product right.
fn sample(tflops: f64) -> crate::backend::GemmSample {
    crate::backend::GemmSample {
        tflops: vec![tflops; 3],
        elements_checked: 64,
        wrong_elements: 0,
        timing: None,
    }
}

/// A GEMM the backend cannot run at twice the size on one GPU (cuBLASLt offering no algorithm
/// there): that GPU's figure at the size stands and is checked, the plateau is judged on the
/// others and says so, and the GPU left out is named with the backend's reason.
#[test]
fn a_gpu_that_cannot_run_twice_the_size_is_named_and_the_plateau_judged_without_it() {
    let mut b = crate::testutil::Scripted {
        gemm: Some(Box::new(|g, _, n| {
            if (g, n) == (5, 16384) {
                Err(HwError::NotSupported("no algorithm for this shape".into()))
            } else {
                Ok(sample(800.0))
            }
        })),
        ..Default::default()
    };
    let (m, f) = run_with(
        "h200-sxm-8",
        &mut b,
        "size = 8192\nprecisions = [\"bf16\"]\nplateau_pct = 5.0",
    );
    assert_eq!(gpu_metric(&m, "bf16_tflops", 5).median, 800.0);
    let why = m
        .facts
        .iter()
        .find(|x| x.name == "bf16_double_size_unavailable")
        .expect("the reason is recorded");
    assert_eq!(why.subject, Subject::gpu(5));
    let notes: Vec<&Finding> = f.iter().filter(|x| x.status == Status::Skip).collect();
    assert_eq!(notes.len(), 1, "{f:#?}");
    assert!(notes[0].info);
    assert_eq!(
        notes[0].reason,
        "not available here: bf16 GEMM on GPU 5 at 16384: no algorithm for this shape; the \
         plateau is judged without it"
    );
    let plateau = f
        .iter()
        .find(|x| {
            x.metric.as_deref() == Some("bf16_tflops_double_size") && x.status == Status::Pass
        })
        .expect("the plateau is judged");
    assert!(
        plateau
            .reason
            .ends_with("on the median GPU of the 7 measured at both sizes)"),
        "{}",
        plateau.reason
    );
    assert_eq!(crate::runner::summarize(&f).0, Status::Pass, "{f:#?}");
}

#[test]
fn one_precisions_failure_leaves_the_others_measured_and_judged() {
    // fp8 fails (a library's fault), bf16 is slow: both must show.
    let mut b = crate::testutil::Scripted {
        gemm: Some(Box::new(|_, p, _| match p {
            GemmPrecision::Fp8 => Err(HwError::Call {
                call: "cublasLtMatmul".into(),
                detail: "CUBLAS_STATUS_INVALID_VALUE".into(),
            }),
            GemmPrecision::Bf16 => Ok(sample(500.0)),
            _ => Ok(sample(60.0)),
        })),
        ..Default::default()
    };
    let (m, f) = run_with(
        "h200-vm-1",
        &mut b,
        "precisions = [\"fp8\", \"bf16\", \"fp32\"]\nbf16_tflops = { fail_below = 590.0 }",
    );
    let names: Vec<&str> = m.metrics.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["bf16_tflops", "fp32_tflops"]);
    let error: Vec<&Finding> = f.iter().filter(|x| x.status == Status::Error).collect();
    assert_eq!(error.len(), 1, "{f:#?}");
    assert!(error[0]
        .reason
        .contains("fp8 GEMM could not be measured: cublasLtMatmul failed"));
    assert_eq!(error[0].metric.as_deref(), Some("fp8_tflops"));
    let fail: Vec<&Finding> = f.iter().filter(|x| x.status == Status::Fail).collect();
    assert_eq!(fail.len(), 1, "{f:#?}");
    assert_eq!(fail[0].metric.as_deref(), Some("bf16_tflops"));
    // The products that were computed are checked and said.
    assert!(f
        .iter()
        .any(|x| x.reason == "every product exact: 128 elements checked over 2 GEMM measurements"));
    assert_eq!(crate::runner::summarize(&f).0, Status::Error);
}

#[test]
fn a_sustained_load_that_fails_is_an_error_and_the_figures_before_it_stand() {
    let mut b = crate::testutil::Scripted {
        gemm: Some(Box::new(|_, _, _| Ok(sample(800.0)))),
        sustained: Some(Box::new(|p| {
            assert_eq!(p, GemmPrecision::Bf16);
            Err(HwError::Call {
                call: "cuStreamSynchronize".into(),
                detail: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
            })
        })),
        ..Default::default()
    };
    let (m, f) = run_with(
        "h200-vm-1",
        &mut b,
        "precisions = [\"bf16\"]\nbf16_tflops = { fail_below = 590.0 }\n\
         [sustained]\nseconds = 10.0",
    );
    assert_eq!(m.metrics.len(), 1, "the bf16 figure is kept");
    let errors: Vec<&Finding> = f.iter().filter(|x| x.status == Status::Error).collect();
    assert_eq!(
        errors.len(),
        1,
        "one error, not one 'no figure' a GPU: {f:#?}"
    );
    assert_eq!(errors[0].subject, Subject::node());
    assert_eq!(
        errors[0].reason,
        "sustained bf16 GEMMs could not be measured: cuStreamSynchronize failed: \
         CUDA_ERROR_ILLEGAL_ADDRESS"
    );
    assert_eq!(errors[0].metric.as_deref(), Some(sustained::RATE));
    assert!(f
        .iter()
        .any(|x| x.status == Status::Pass && x.metric.as_deref() == Some("bf16_tflops")));
    assert_eq!(crate::runner::summarize(&f).0, Status::Error);
}

#[test]
fn a_failure_at_twice_the_size_is_an_error_and_the_figure_at_size_stands() {
    let mut b = crate::testutil::Scripted {
        gemm: Some(Box::new(|_, _, n| {
            if n > 8192 {
                Err(HwError::Timeout {
                    what: format!("bf16 GEMMs of {n}x{n}x{n} on GPU 0"),
                    seconds: 90.0,
                })
            } else {
                Ok(sample(800.0))
            }
        })),
        ..Default::default()
    };
    let (m, f) = run_with(
        "h200-vm-1",
        &mut b,
        "precisions = [\"bf16\"]\nplateau_pct = 8.0\nbf16_tflops = { fail_below = 590.0 }",
    );
    assert_eq!(m.metrics.len(), 1);
    let errors: Vec<&str> = f
        .iter()
        .filter(|x| x.status == Status::Error)
        .map(|x| x.reason.as_str())
        .collect();
    assert_eq!(
        errors,
        [
            "GPU 0: bf16 GEMM could not be measured: at 16384: bf16 GEMMs of 16384x16384x16384 \
             on GPU 0 did not finish within 90 s",
            "bf16 GEMM: not measured at 16384, so 8192 was not shown to be its plateau"
        ],
        "{f:#?}"
    );
    // The figure at 8192 is still judged against its floor.
    assert!(f
        .iter()
        .any(|x| x.status == Status::Pass && x.metric.as_deref() == Some("bf16_tflops")));
}

#[test]
fn the_plan_and_the_evidence_say_what_the_gemms_multiplied() {
    let c = cfg("precisions = [\"fp32\", \"bf16\", \"fp8\"]");
    assert_eq!(
        operands(&c),
        "integers -45..45 for fp32, bf16 and -2..2 for fp8"
    );
    let c = cfg("size = 16384\nprecisions = [\"tf32\"]\n[sustained]\nprecision = \"bf16\"");
    assert_eq!(operands(&c), "integers -31..31 for tf32, bf16");
    let (m, _) = run("h100-sxm-8", &[], "precisions = [\"bf16\"]");
    let f = m
        .facts
        .iter()
        .find(|f| f.name == OPERANDS)
        .expect("recorded");
    assert_eq!(f.value, FactValue::Text("integers -45..45 for bf16".into()));
}

#[test]
fn samples_count_every_gpu_and_precision() {
    let c = Compute(cfg("iterations = 7\nprecisions = [\"fp32\", \"bf16\"]"));
    assert_eq!(
        c.samples(8),
        (8 * 2 * 7, "checks.compute.iterations".into())
    );
    assert_eq!(c.remeasure(), 0);
    assert_eq!(Compute(cfg("remeasure = 2")).remeasure(), 2);
}

const LOAD: &str = "precisions = [\"bf16\"]\noutlier_pct = 10.0\n\
    [sustained]\nseconds = 30.0\nsample_ms = 500\nmin_power_fraction = 0.9\nmax_temperature_c = 85.0";

fn gpu_findings(f: &[Finding], g: usize) -> Vec<&Finding> {
    f.iter()
        .filter(|x| x.status != Status::Pass && x.subject == Subject::gpu(g))
        .collect()
}

#[test]
fn a_healthy_node_holds_its_rate_power_and_temperature_under_load() {
    let (m, f) = run("h200-sxm-8", &[], LOAD);
    assert!(not_passing(&f).is_empty(), "{:#?}", not_passing(&f));
    let rate = gpu_metric(&m, sustained::RATE, 3);
    assert_eq!(rate.samples.len(), 60);
    // At its power cap, as a GPU at full load is: seen, not failed.
    assert!(m
        .facts
        .iter()
        .any(|x| x.name == sustained::throttle_fact("sw_power_cap")));
    // Per GPU: rate held, no failing throttle, power reached, temperature within.
    let passes = f
        .iter()
        .filter(|x| x.subject == Subject::gpu(3) && x.status == Status::Pass)
        .count();
    assert_eq!(passes, 4, "{f:#?}");
    // 0.85 of the simulated H200's 832 TFLOP/s at its power cap, as the lent one kept.
    let held = f
        .iter()
        .find_map(|x| {
            x.reason
                .strip_prefix("GPU 3: sustained bf16 GEMMs held over 30 s (")
        })
        .expect("the rate held");
    let first: f64 = held.split(' ').next().unwrap().parse().unwrap();
    assert!((680.0..=740.0).contains(&first), "{held}");
    assert!(f
        .iter()
        .any(|x| x.reason.starts_with("GPU 3: reached 6")
            && x.reason.ends_with("W under load (97%)")));
}

/// The simulated H200 under load as the lent one was (2026-12-04): at its power cap it keeps
/// 0.85 of its burst rate at a median SM clock of 1570 MHz; a node that states neither (the
/// A100 board) keeps its burst rate and clock.
#[test]
fn a_simulated_gpu_under_load_keeps_the_share_of_its_rate_and_clock_its_node_states() {
    let median = |m: &Measured, name: &str| gpu_metric(m, name, 3).median;
    let (m, f) = run("h200-sxm-8", &[], LOAD);
    assert!(not_passing(&f).is_empty(), "{:#?}", not_passing(&f));
    let (burst, load) = (median(&m, "bf16_tflops"), median(&m, sustained::RATE));
    assert!((load / burst - 0.85).abs() < 0.03, "{load} of {burst}");
    assert_eq!(median(&m, sustained::CLOCK), 1570.0);
    let (m, _) = run("a100-sxm-80gb-8", &[], LOAD);
    let (burst, load) = (median(&m, "bf16_tflops"), median(&m, sustained::RATE));
    assert!((load / burst - 1.0).abs() < 0.03, "{load} of {burst}");
    assert_eq!(median(&m, sustained::CLOCK), 1410.0);
}

/// The clock a simulated GPU reports under load follows what slows it: held to 60% of its
/// power it clocks at about 0.6 / 0.97 of its loaded clock; once hot, at 0.7 of it.
#[test]
fn a_simulated_gpu_clocks_down_in_proportion_to_what_holds_it_back() {
    let clocks = |m: &Measured, g: usize| gpu_metric(m, sustained::CLOCK, g).clone();
    let (m, _) = run("h200-sxm-8", &["power-limited:gpu=1,factor=0.6"], LOAD);
    assert_eq!(clocks(&m, 0).median, 1570.0);
    assert_eq!(clocks(&m, 1).median, (1570.0 * 0.6 / 0.97f64).floor());
    let (m, _) = run("h200-sxm-8", &["thermal-throttle:gpu=2"], LOAD);
    let hot = clocks(&m, 2);
    assert_eq!((hot.max, hot.min), (1570.0, (1570.0 * 0.7f64).floor()));
}

#[test]
fn a_gpu_that_overheats_under_load_is_named_for_each_thing_it_does_wrong() {
    let (_, f) = run("h200-sxm-8", &["thermal-throttle:gpu=2"], LOAD);
    let bad = gpu_findings(&f, 2);
    let reasons: Vec<&str> = bad.iter().map(|x| x.reason.as_str()).collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("GPU 2: sustained bf16 GEMMs fell 30% over 30 s")),
        "{reasons:#?}"
    );
    assert!(
        reasons.contains(&"GPU 2: throttled under load: hw_thermal_slowdown in 36 of 60 samples"),
        "{reasons:#?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("GPU 2: reached 9") && r.ends_with("under load, above 85 °C")),
        "{reasons:#?}"
    );
    assert!(bad.iter().all(|x| x.status == Status::Fail));
    // Its peers are healthy.
    for g in [0, 1, 3, 4, 5, 6, 7] {
        assert!(gpu_findings(&f, g).is_empty(), "GPU {g}");
    }
}

#[test]
fn a_gpu_that_cannot_reach_its_power_is_failed_by_the_power_rule_and_its_peers() {
    let (_, f) = run("h200-sxm-8", &["power-limited:gpu=4"], LOAD);
    let bad = gpu_findings(&f, 4);
    let reasons: Vec<&str> = bad.iter().map(|x| x.reason.as_str()).collect();
    assert!(
        reasons.iter().any(|r| r.starts_with("GPU 4: drew 4")
            && r.ends_with("of 700 W under load (60%), below 90% of its power limit")),
        "{reasons:#?}"
    );
    // Its rate is steady (no drop) but a third below its peers': the outlier rule.
    assert!(
        reasons.iter().any(|r| r.contains("the node median")),
        "{reasons:#?}"
    );
    assert!(!reasons.iter().any(|r| r.contains("fell")), "{reasons:#?}");
    // Without a power rule, power is shown, not judged.
    let (_, f) = run(
        "h200-sxm-8",
        &["power-limited:gpu=4"],
        "precisions = [\"bf16\"]\n[sustained]\nseconds = 10.0",
    );
    assert!(not_passing(&f).is_empty(), "{:#?}", not_passing(&f));
}

#[test]
fn wrong_products_under_load_fail_the_gpu() {
    let (m, f) = run("h200-sxm-8", &["compute-corrupt:gpu=1"], LOAD);
    assert!(m.wrong_data());
    assert!(gpu_findings(&f, 1).iter().any(|x| x.reason
        == "GPU 1: sustained bf16 GEMMs: 8192 of 67108864 elements of the product wrong"));
}

#[test]
fn a_backend_that_cannot_hold_the_load_says_so_and_unread_readings_are_not_healthy() {
    let c = cfg(LOAD);
    let l = c.sustained.clone().unwrap();
    let mut m = Measured::default();
    m.facts.push(Fact::new(
        sustained::UNAVAILABLE,
        Subject::node(),
        FactValue::Text("no cuBLAS here".into()),
    ));
    let f = evaluate_sustained(&l, None, 2, &m);
    assert_eq!(f.len(), 1);
    assert_eq!(
        (f[0].status, f[0].info, f[0].reason.as_str()),
        (
            Status::Skip,
            false,
            "not available here: sustained bf16 GEMMs: no cuBLAS here"
        )
    );
    // NVML gave no power and no throttle reasons: said, never taken for healthy.
    let sample = |t| crate::backend::LoadSample {
        t_s: t,
        sm_clock_mhz: Some(1980),
        power_w: None,
        temperature_c: Some(60.0),
        throttle: None,
    };
    let run = crate::backend::SustainedRun {
        tflops: vec![790.0; 10],
        samples: (0..10).map(|i| sample(i as f64)).collect(),
        power_limit_w: None,
        elements_checked: 64,
        wrong_elements: 0,
    };
    let mut m = Measured::default();
    record_sustained(&mut m, 0, run);
    let f = evaluate_sustained(&l, None, 1, &m);
    let skips: Vec<&str> = f
        .iter()
        .filter(|x| x.status == Status::Skip)
        .map(|x| x.reason.as_str())
        .collect();
    assert_eq!(
        skips,
        [
            "not available here: throttle reasons of GPU 0 under load",
            "not available here: power and its limit of GPU 0 under load"
        ]
    );
    assert!(f.iter().all(|x| x.status != Status::Fail));
}

/// Every reading given: no "readings not given" fact is written, not even one counting zero.
#[test]
fn a_run_whose_every_reading_was_given_records_no_unread_count() {
    let sample = |t| crate::backend::LoadSample {
        t_s: t,
        sm_clock_mhz: Some(1980),
        power_w: Some(690.0),
        temperature_c: Some(60.0),
        throttle: Some(vec![]),
    };
    let run = |samples: Vec<crate::backend::LoadSample>| crate::backend::SustainedRun {
        tflops: vec![790.0; samples.len()],
        samples,
        power_limit_w: Some(700.0),
        elements_checked: 64,
        wrong_elements: 0,
    };
    let mut m = Measured::default();
    record_sustained(&mut m, 0, run((0..10).map(|i| sample(i as f64)).collect()));
    let unread: Vec<&str> = m
        .facts
        .iter()
        .filter(|f| f.name.ends_with("_unread"))
        .map(|f| f.name.as_str())
        .collect();
    assert!(unread.is_empty(), "{unread:?}");
    // One sample without power or throttle reasons: counted, once each.
    let mut gaps: Vec<_> = (0..10).map(|i| sample(i as f64)).collect();
    gaps[4].power_w = None;
    gaps[4].throttle = None;
    let mut m = Measured::default();
    record_sustained(&mut m, 0, run(gaps));
    for name in [
        sustained::unread_fact("throttle"),
        sustained::unread_fact(sustained::POWER),
    ] {
        let f: Vec<_> = m.facts.iter().filter(|f| f.name == name).collect();
        assert_eq!(f.len(), 1, "{name}");
        assert_eq!(f[0].value, FactValue::Count(1), "{name}");
    }
    // The power limit is one reading, whatever the number of windows: not given, it is one
    // unread; a run of no windows with the limit read is nothing unread (and no underflow).
    let mut m = Measured::default();
    let mut no_limit = run((0..10).map(|i| sample(i as f64)).collect());
    no_limit.power_limit_w = None;
    record_sustained(&mut m, 0, no_limit);
    let f: Vec<_> = m
        .facts
        .iter()
        .filter(|f| f.name.ends_with("_unread"))
        .map(|f| (f.name.as_str(), f.value.clone()))
        .collect();
    assert_eq!(
        f,
        [(
            sustained::unread_fact(sustained::POWER_LIMIT).as_str(),
            FactValue::Count(1)
        )]
    );
    let mut m = Measured::default();
    record_sustained(&mut m, 0, run(vec![]));
    assert!(!m.facts.iter().any(|f| f.name.ends_with("_unread")));
    // No sample at all: no throttle reason was seen because none was read, which is not a pass.
    let c = cfg(LOAD);
    let f = evaluate_sustained(c.sustained.as_ref().unwrap(), None, 1, &m);
    let throttle: Vec<_> = f
        .iter()
        .filter(|x| x.reason.contains("throttl"))
        .map(|x| (x.status, x.reason.as_str()))
        .collect();
    assert_eq!(
        throttle,
        [(
            Status::Skip,
            "not available here: throttle reasons of GPU 0 under load"
        )]
    );
}

#[test]
fn the_first_and_last_tenth_of_a_run() {
    assert_eq!(first_and_last_tenth(&[]), None);
    assert_eq!(first_and_last_tenth(&[5.0]), Some((5.0, 5.0)));
    let v: Vec<f64> = (1..=20).map(f64::from).collect();
    assert_eq!(first_and_last_tenth(&v), Some((1.5, 19.5)));
    assert_eq!(first_and_last_tenth(&[1.0, 2.0, 3.0]), Some((1.0, 3.0)));
}

#[test]
fn a_sustained_load_counts_its_readings_against_the_evidence_limit() {
    let c = Compute(cfg(
        "iterations = 10\nprecisions = [\"bf16\"]\n[sustained]\nseconds = 60.0\nsample_ms = 100",
    ));
    // 8 x 10 burst samples, 8 GPUs x (4 readings x 600 windows and the power limit).
    assert_eq!(
        c.samples(8),
        (
            80 + 8 * (4 * 600 + 1),
            "checks.compute.sustained.sample_ms".into()
        )
    );
    // Fewer readings than burst samples: the burst's key is the one to lower.
    let c = Compute(cfg(
        "iterations = 1000\nprecisions = [\"bf16\"]\n[sustained]\nseconds = 1.0\nsample_ms = 1000",
    ));
    assert_eq!(
        c.samples(8),
        (8000 + 8 * 5, "checks.compute.iterations".into())
    );
    // As many of each: the burst's key is named (the first the suite states).
    let c = Compute(cfg(
        "iterations = 41\nprecisions = [\"bf16\"]\n[sustained]\nseconds = 10.0\nsample_ms = 1000",
    ));
    assert_eq!(c.samples(1), (82, "checks.compute.iterations".into()));
}

#[test]
fn a_precision_judged_only_by_its_typical_figure_is_not_available_here() {
    // No floor, but the suite still judges the figure against the node's typical one: a
    // missing fp8 is a gap in what the suite promised, not a note.
    let text = "precisions = [\"fp8\"]\nfp8_tflops = { typical = 1000.0 }";
    let (_, f) = run("a100-sxm-80gb-8", &[], text);
    let skips: Vec<&Finding> = f.iter().filter(|x| x.status == Status::Skip).collect();
    assert_eq!(skips.len(), 8, "{text}");
    assert!(skips.iter().all(|x| !x.info), "{text}: {skips:#?}");
    // Nothing was measured: the check is skipped with none of its 8 readings available,
    // never passed, and no product is said to be exact.
    let (status, _, coverage) = crate::runner::summarize_with_coverage(&f);
    assert_eq!(status, Status::Skip, "{text}");
    let coverage = coverage.expect("a gap in what the suite judges");
    assert_eq!((coverage.available, coverage.total), (0, 8), "{text}");
    assert!(
        !f.iter()
            .any(|x| x.reason.starts_with("every product exact")),
        "{text}"
    );
    // Nor does a floor of 0 (it bounds nothing): notes, as with no floor.
    let (_, f) = run(
        "a100-sxm-80gb-8",
        &[],
        "precisions = [\"fp8\"]\nfp8_tflops = { fail_below = 0.0 }",
    );
    assert!(
        f.iter().all(|x| x.status == Status::Skip && x.info),
        "{f:#?}"
    );
    // The check-wide outlier rule alone promises no precision: notes, nothing judged, and no
    // product said to be exact.
    let (_, f) = run(
        "a100-sxm-80gb-8",
        &[],
        "precisions = [\"fp8\"]\noutlier_pct = 10.0",
    );
    assert_eq!(f.len(), 8, "{f:#?}");
    assert!(
        f.iter().all(|x| x.status == Status::Skip && x.info),
        "{f:#?}"
    );
    let (status, _, coverage) = crate::runner::summarize_with_coverage(&f);
    assert_eq!((status, coverage), (Status::Skip, None));
}

#[test]
fn progress_counts_each_gpu_and_precision_once_up_to_the_total() {
    let (mut b, inv, suite) = node("h200-sxm-8", &[]);
    let ctx = crate::testutil::ctx(&suite, &inv);
    let check = Compute(cfg(
        "size = 1024\nprecisions = [\"fp32\", \"bf16\", \"fp8\"]",
    ));
    let mut seen = Vec::new();
    check
        .measure(&ctx, &mut b, &mut |done, total| seen.push((done, total)))
        .unwrap();
    let want: Vec<(usize, usize)> = (1..=24).map(|d| (d, 24)).collect();
    assert_eq!(seen, want);
}

#[test]
fn a_node_without_gpus_has_nothing_to_plan() {
    let (_, mut inv, suite) = node("h200-sxm-8", &[]);
    let check = Compute(cfg(""));
    let ctx = crate::testutil::ctx(&suite, &inv);
    assert!(check.plan(&ctx).is_ok());
    inv.gpus.clear();
    let ctx = crate::testutil::ctx(&suite, &inv);
    assert_eq!(check.plan(&ctx), Err("no GPUs".to_string()));
}

#[test]
fn a_precision_one_gpu_lacks_is_not_available_on_that_gpu_only() {
    // GPU 1's backend has no bf16 GEMM; GPU 0 measured it and its product is right.
    let mut m = made([
        Some(FactValue::Elements {
            wrong: 0,
            checked: 64,
        }),
        None,
    ]);
    m.metrics.truncate(1);
    m.facts.push(Fact::new(
        unavailable_fact(GemmPrecision::Bf16),
        Subject::gpu(1),
        FactValue::Text("no bf16 here".into()),
    ));
    let f = judge_made(&m);
    let skips: Vec<&Finding> = f.iter().filter(|x| x.status == Status::Skip).collect();
    assert_eq!(skips.len(), 1, "{f:#?}");
    assert_eq!(skips[0].subject, Subject::gpu(1));
    assert!(
        f.iter()
            .all(|x| x.status == Status::Pass || x.status == Status::Skip),
        "{f:#?}"
    );
    assert!(f
        .iter()
        .any(|x| x.reason == "every product exact: 64 elements checked over 1 GEMM measurements"));
}

/// A sustained run of `n` windows at 790 TFLOP/s whose readings `reading(i)` gives.
fn load_run(
    n: usize,
    power: impl Fn(usize) -> Option<f64>,
    temperature: impl Fn(usize) -> Option<f64>,
    limit: Option<f64>,
    wrong: u64,
) -> crate::backend::SustainedRun {
    crate::backend::SustainedRun {
        tflops: vec![790.0; n],
        samples: (0..n)
            .map(|i| crate::backend::LoadSample {
                t_s: i as f64,
                sm_clock_mhz: Some(1980),
                power_w: power(i),
                temperature_c: temperature(i),
                throttle: Some(vec![]),
            })
            .collect(),
        power_limit_w: limit,
        elements_checked: 64,
        wrong_elements: wrong,
    }
}

fn judge_loads(runs: Vec<crate::backend::SustainedRun>, extra: &[Fact]) -> Vec<Finding> {
    let l = cfg(LOAD).sustained.unwrap();
    let mut m = Measured::default();
    m.facts.extend(extra.iter().cloned());
    let n = runs.len();
    for (g, r) in runs.into_iter().enumerate() {
        record_sustained(&mut m, g, r);
    }
    evaluate_sustained(&l, None, n, &m)
}

#[test]
fn each_gpu_is_judged_on_its_own_product_under_load() {
    // GPU 1's burst product was right and comes first among its facts; its sustained one is
    // right too. GPU 0's sustained product is wrong.
    let clean = Fact::new(
        "bf16_wrong_elements",
        Subject::gpu(1),
        FactValue::Elements {
            wrong: 0,
            checked: 64,
        },
    );
    let ok = |_| Some(690.0);
    let cool = |_| Some(60.0);
    let f = judge_loads(
        vec![
            load_run(10, ok, cool, Some(700.0), 3),
            load_run(10, ok, cool, Some(700.0), 0),
        ],
        &[clean],
    );
    let bad: Vec<(&Subject, &str)> = f
        .iter()
        .filter(|x| x.status != Status::Pass)
        .map(|x| (&x.subject, x.reason.as_str()))
        .collect();
    assert_eq!(
        bad,
        [(
            &Subject::gpu(0),
            "GPU 0: sustained bf16 GEMMs: 3 of 64 elements of the product wrong"
        )]
    );
}

#[test]
fn power_is_judged_over_the_second_half_and_only_where_every_reading_was_given() {
    let cool = |_| Some(60.0);
    // Warming up at 300 W, then at 690 W of 700: the second half reached 99%.
    let warming = |i: usize| Some(if i < 5 { 300.0 } else { 690.0 });
    let f = judge_loads(vec![load_run(10, warming, cool, Some(700.0), 0)], &[]);
    assert!(
        f.iter().any(|x| x.status == Status::Pass
            && x.reason == "GPU 0: reached 690 W of 700 W under load (99%)"),
        "{f:#?}"
    );
    // One reading missing, a limit of 0 W, or no limit: not judged, said.
    for (power, limit) in [
        (
            Box::new(|i: usize| (i != 3).then_some(690.0)) as Box<dyn Fn(usize) -> Option<f64>>,
            Some(700.0),
        ),
        (Box::new(|_| Some(690.0)), Some(0.0)),
        (Box::new(|_| Some(690.0)), None),
    ] {
        let f = judge_loads(vec![load_run(10, power, cool, limit, 0)], &[]);
        let on_power: Vec<&Finding> = f
            .iter()
            .filter(|x| x.metric.as_deref() == Some(sustained::POWER))
            .collect();
        assert_eq!(on_power.len(), 1, "{limit:?}: {f:#?}");
        assert_eq!(
            (on_power[0].status, on_power[0].reason.as_str()),
            (
                Status::Skip,
                "not available here: power and its limit of GPU 0 under load"
            ),
            "{limit:?}"
        );
    }
}

#[test]
fn temperature_is_judged_only_where_every_reading_was_given() {
    let ok = |_| Some(690.0);
    // The one missing reading could have been the hottest.
    let f = judge_loads(
        vec![load_run(
            10,
            ok,
            |i| (i != 7).then_some(60.0),
            Some(700.0),
            0,
        )],
        &[],
    );
    let on_temp: Vec<&Finding> = f
        .iter()
        .filter(|x| x.metric.as_deref() == Some(sustained::TEMPERATURE))
        .collect();
    assert_eq!(on_temp.len(), 1, "{f:#?}");
    assert_eq!(
        (on_temp[0].status, on_temp[0].reason.as_str()),
        (
            Status::Skip,
            "not available here: temperature of GPU 0 under load"
        )
    );
    let f = judge_loads(vec![load_run(10, ok, |_| Some(60.0), Some(700.0), 0)], &[]);
    assert!(f
        .iter()
        .any(|x| x.status == Status::Pass && x.reason == "GPU 0: at most 60.0 °C under load"));
}

/// The plateau, measured on the simulated H200: at 8192 the rate at twice the size is within
/// 5% (a pass), at 1024 it is not (a warning that the figures are below the GPU's best); both
/// sizes' products are checked, and the samples count both.
#[test]
fn a_size_below_the_plateau_is_warned_about_and_the_plateau_passes() {
    let (m, f) = run(
        "h200-sxm-8",
        &[],
        "size = 8192\nprecisions = [\"bf16\"]\nplateau_pct = 5.0",
    );
    let at = |m: &Measured, name: &str, g: usize| gpu_metric(m, name, g).median;
    let double = double_size_metric(GemmPrecision::Bf16);
    assert!(at(&m, &double, 0) >= at(&m, "bf16_tflops", 0));
    let p: Vec<&Finding> = f
        .iter()
        .filter(|x| x.metric.as_deref() == Some(double.as_str()))
        .collect();
    assert_eq!(p.len(), 1, "{f:#?}");
    assert_eq!(p[0].status, Status::Pass);
    assert!(
        p[0].reason
            .starts_with("bf16 GEMM: 8192 is its plateau here (16384 runs 0."),
        "{}",
        p[0].reason
    );
    assert!(p[0].is_judgement());
    let data = f
        .iter()
        .find(|x| x.reason.starts_with("every product exact"))
        .unwrap();
    let per_gpu = 8192 * 8192 + 16384 * 16384u64;
    assert!(
        data.reason
            .contains(&format!("{} elements checked", 8 * per_gpu)),
        "{}",
        data.reason
    );
    let (_, f) = run(
        "h200-sxm-8",
        &[],
        "size = 1024\nprecisions = [\"bf16\"]\nplateau_pct = 5.0",
    );
    let w: Vec<&Finding> = not_passing(&f);
    assert_eq!(w.len(), 1, "{w:#?}");
    assert_eq!(w[0].status, Status::Warn);
    assert!(
        w[0].reason
            .starts_with("bf16 GEMM: the rate still rises with the size (2048 runs"),
        "{}",
        w[0].reason
    );
    let c = Compute(cfg(
        "iterations = 7\nprecisions = [\"bf16\"]\nplateau_pct = 5.0",
    ));
    assert_eq!(c.samples(8).0, 8 * 7 * 2);
}

/// The rule on the median GPU: at most `pct` faster at twice the size passes (slower too),
/// more warns; one GPU's odd figure does not decide; no figure at twice the size is an error.
#[test]
fn the_plateau_is_judged_on_the_median_gpu_at_its_edge() {
    let p = GemmPrecision::Bf16;
    let judged = |pairs: &[(f64, f64)]| {
        let mut m = Measured::default();
        let mut items = Vec::new();
        for (g, &(at, double)) in pairs.iter().enumerate() {
            items.push((Subject::gpu(g), at));
            if double > 0.0 {
                m.metrics.push(Metric::new(
                    &double_size_metric(p),
                    Subject::gpu(g),
                    UNIT,
                    vec![double],
                ));
            }
        }
        // Each GPU without a figure at twice the size is said to be so.
        m.facts.push(Fact::new(
            double_size_unavailable_fact(p),
            Subject::gpu(0),
            FactValue::Text("too large here".into()),
        ));
        plateau(p, 4096, 5.0, &items, &m).pop().unwrap()
    };
    assert_eq!(judged(&[(100.0, 105.0)]).status, Status::Pass);
    assert_eq!(judged(&[(100.0, 105.0)]).found, "+5.0%");
    assert_eq!(judged(&[(100.0, 105.1)]).status, Status::Warn);
    assert_eq!(judged(&[(100.0, 80.0)]).status, Status::Pass);
    assert!(judged(&[(100.0, 80.0)])
        .reason
        .contains("8192 runs 20.0% slower than 4096"));
    // The median of three GPUs: one rising GPU does not warn, two do.
    assert_eq!(
        judged(&[(100.0, 101.0), (100.0, 150.0), (100.0, 102.0)]).status,
        Status::Pass
    );
    assert_eq!(
        judged(&[(100.0, 110.0), (100.0, 150.0), (100.0, 102.0)]).status,
        Status::Warn
    );
    // A GPU without the figure, or with one that is no rate, is left out; none at all is an
    // error.
    assert_eq!(judged(&[(100.0, 0.0), (100.0, 120.0)]).status, Status::Warn);
    for odd in [
        (0.0, 1.0),
        (f64::NAN, 101.0),
        (f64::INFINITY, 101.0),
        (100.0, f64::NAN),
    ] {
        let j = judged(&[odd, (100.0, 120.0)]);
        assert_eq!(
            (j.status, j.found.as_str()),
            (Status::Warn, "+20.0%"),
            "{odd:?}"
        );
    }
    assert_eq!(double_size_metric(p), "bf16_tflops_double_size");
    let none = judged(&[(100.0, 0.0)]);
    assert_eq!(none.status, Status::Error);
    assert_eq!(none.found, "no figure at 8192");
    assert!(plateau(p, 4096, 5.0, &[], &Measured::default()).is_empty());
}

/// A GPU left out of the plateau is named: the backend's reason as a note, its GEMM's failure
/// by the error already said, and a gap with no word as an error; the plateau says on how
/// many GPUs it was judged.
#[test]
fn each_gpu_left_out_of_the_plateau_is_named() {
    let p = GemmPrecision::Bf16;
    let double = double_size_metric(p);
    let mut m = Measured::default();
    let items: Vec<(Subject, f64)> = (0..4).map(|g| (Subject::gpu(g), 100.0)).collect();
    for g in [0, 3] {
        m.metrics
            .push(Metric::new(&double, Subject::gpu(g), UNIT, vec![101.0]));
    }
    m.facts.push(Fact::new(
        double_size_unavailable_fact(p),
        Subject::gpu(1),
        FactValue::Text("no algorithm at this size".into()),
    ));
    // The fact's name is part of the evidence format.
    assert_eq!(
        double_size_unavailable_fact(p),
        "bf16_double_size_unavailable"
    );
    let all = plateau(p, 4096, 5.0, &items, &m);
    assert_eq!(all.len(), 3, "{all:#?}");
    let note = &all[0];
    assert_eq!(
        (note.status, &note.subject, note.info),
        (Status::Skip, &Subject::gpu(1), true)
    );
    assert_eq!(
        note.reason,
        "not available here: bf16 GEMM on GPU 1 at 8192: no algorithm at this size; the plateau \
         is judged without it"
    );
    assert_eq!(note.metric.as_deref(), Some(double.as_str()));
    let gap = &all[1];
    assert_eq!(
        (gap.status, &gap.subject),
        (Status::Error, &Subject::gpu(2))
    );
    assert_eq!(gap.reason, "GPU 2: bf16 GEMM was not measured at 8192");
    let judged = &all[2];
    assert_eq!(judged.status, Status::Pass);
    assert!(
        judged
            .reason
            .ends_with("on the median GPU of the 2 measured at both sizes)"),
        "{}",
        judged.reason
    );
    // A GPU whose GEMM at twice the size failed has its error said by the check already.
    m.facts.push(Fact::new(
        error_fact(p),
        Subject::gpu(2),
        FactValue::Text("at 8192: out of memory".into()),
    ));
    let all = plateau(p, 4096, 5.0, &items, &m);
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_eq!(all[1].status, Status::Pass);
    // Every GPU at both sizes: no count in the reason.
    let full: Vec<(Subject, f64)> = vec![items[0].clone(), items[3].clone()];
    let all = plateau(p, 4096, 5.0, &full, &m);
    assert_eq!(all.len(), 1);
    assert!(
        all[0].reason.ends_with("on the median GPU)"),
        "{}",
        all[0].reason
    );
}

/// A suite that extends one with the plateau and raises the size to the largest loads, and the
/// plateau is then a note, not a measurement; 0 turns it off.
#[test]
fn the_plateau_steps_aside_at_the_largest_size_and_at_zero() {
    let loaded = crate::suite::load::load_source(crate::config::Source {
        name: "big.toml".into(),
        text: "format_version = 1\nname = \"big\"\nextends = \"h100-sxm-8\"\n\
               [checks.compute]\nsize = 16384\n"
            .into(),
    })
    .expect("a suite that extends one with the plateau still loads at 16384");
    let c = loaded.suite.checks.compute.clone().unwrap();
    assert_eq!(
        (c.size, c.plateau_pct, c.plateau()),
        (16384, Some(8.0), None)
    );
    let (m, f) = run(
        "h100-sxm-8",
        &[],
        "size = 16384\nprecisions = [\"bf16\"]\nplateau_pct = 5.0",
    );
    assert!(!m.metrics.iter().any(|x| x.name.ends_with("_double_size")));
    let note: Vec<&Finding> = f.iter().filter(|x| x.found == "not shown").collect();
    assert_eq!(note.len(), 1, "{f:#?}");
    assert!(note[0].info && !note[0].is_judgement());
    assert!(note[0]
        .reason
        .starts_with("the plateau is not shown: size 16384 is the largest"));
    let (m, f) = run(
        "h100-sxm-8",
        &[],
        "size = 4096\nprecisions = [\"bf16\"]\nplateau_pct = 0",
    );
    assert!(!m.metrics.iter().any(|x| x.name.ends_with("_double_size")));
    assert!(!f.iter().any(|x| x.reason.contains("plateau")), "{f:#?}");
}
