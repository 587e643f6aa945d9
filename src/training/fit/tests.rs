use super::*;

/// All-reduce over `n` GPUs at `busbw` GB/s with `lat_us` of fixed cost, 1 KiB to 8 GiB.
fn all_reduce(n: usize, busbw: f64, lat_us: f64) -> Vec<(u64, f64)> {
    let factor = 2.0 * (n - 1) as f64 / n as f64;
    (10..=33)
        .map(|k| {
            let bytes = 1u64 << k;
            (bytes, lat_us + bytes as f64 * factor / (busbw * 1e9) * 1e6)
        })
        .collect()
}

/// An 8-GPU H200 on NVSwitch, as the shipped suite's typical figures have it.
fn nvswitch() -> NodeRates {
    NodeRates {
        gemm_tflops: 51.0,
        memory_gbps: 4185.0,
        all_reduce_us: all_reduce(8, 480.0, 18.0),
    }
}

/// The same GPUs on PCIe: all-reduce at 20 GB/s of bus bandwidth.
fn pcie() -> NodeRates {
    NodeRates {
        all_reduce_us: all_reduce(8, 20.0, 40.0),
        ..nvswitch()
    }
}

fn cfg(layers: &[usize], batch: usize) -> TrainingCheck {
    let mut c: TrainingCheck = toml::from_str("").unwrap();
    c.layers = layers.to_vec();
    c.batch = batch;
    c
}

fn fit<'a>(rows: &'a [FitRow], method: &str) -> &'a MethodFit {
    rows.iter()
        .find(|r| r.method == method)
        .and_then(|r| r.fit.as_ref())
        .unwrap_or_else(|| panic!("{method}: {rows:#?}"))
}

#[test]
fn all_reduce_times_are_read_between_and_beyond_the_measured_sizes() {
    let r = NodeRates {
        gemm_tflops: 1.0,
        memory_gbps: 1.0,
        all_reduce_us: vec![(1000, 10.0), (2000, 30.0), (4000, 50.0)],
    };
    assert_eq!(r.all_reduce_time_us(10), Some(10.0));
    assert_eq!(r.all_reduce_time_us(1000), Some(10.0));
    assert_eq!(r.all_reduce_time_us(1500), Some(20.0));
    assert_eq!(r.all_reduce_time_us(3000), Some(40.0));
    assert_eq!(r.all_reduce_time_us(4000), Some(50.0));
    assert_eq!(r.all_reduce_time_us(8000), Some(100.0));
    let none = NodeRates {
        all_reduce_us: vec![],
        ..r
    };
    assert_eq!(none.all_reduce_time_us(1000), None);
}

#[test]
fn the_methods_compared_fit_the_gpu_count() {
    let names = |n| methods(n).into_iter().map(method_name).collect::<Vec<_>>();
    assert_eq!(
        names(8),
        [
            "data-parallel",
            "tensor-parallel",
            "hybrid (tensor 2 x data 4)",
            "hybrid (tensor 4 x data 2)"
        ]
    );
    assert_eq!(
        names(4),
        [
            "data-parallel",
            "tensor-parallel",
            "hybrid (tensor 2 x data 2)"
        ]
    );
    assert_eq!(names(2), ["data-parallel", "tensor-parallel"]);
    assert_eq!(names(1), ["data-parallel"]);
}

#[test]
fn a_rank_multiplies_its_shards_and_the_replicated_classifier_whole() {
    let layers = [1024, 4096, 4096, 10];
    let m = Model {
        layers: layers.to_vec(),
        local_batch: 512,
        replicas: 1,
        lr: 0.1,
        seed: 0,
        math: crate::training::plan::Math::Fp32,
    };
    assert_eq!(
        rank_flops(&layers, Partition::Data { dp: 8 }, 512),
        m.step_flops()
    );
    // Layers 0 and 1 split 8 ways, the classifier (layer 2) whole.
    let bl = 512.0;
    let want = 2.0 * bl * (1024.0 * 4096.0 / 8.0) * 2.0
        + 2.0 * bl * (4096.0 * 4096.0 / 8.0) * 3.0
        + 2.0 * bl * (4096.0 * 10.0) * 3.0;
    assert_eq!(rank_flops(&layers, Partition::Tensor { tp: 8 }, 512), want);
    // Memory: a tensor-parallel rank moves less than a whole replica.
    assert!(
        memory_bytes(&layers, Partition::Tensor { tp: 8 }, 512)
            < memory_bytes(&layers, Partition::Data { dp: 8 }, 512) / 4.0
    );
}

#[test]
fn nvswitch_keeps_tensor_parallelism_efficient_and_pcie_does_not() {
    let c = cfg(&[1024, 4096, 4096, 10], 4096);
    let fast = analyse(&c, 8, &nvswitch());
    let slow = analyse(&c, 8, &pcie());
    // Data-parallel: the gradient all-reduce hides behind the backward pass on NVSwitch.
    let dp = fit(&fast, "data-parallel");
    assert_eq!(dp.bound, Bound::Compute);
    assert!(dp.scaling > 0.9, "{dp:#?}");
    // Tensor-parallel all-reduces activations inside every step, exposed.
    let tp_fast = fit(&fast, "tensor-parallel");
    let tp_slow = fit(&slow, "tensor-parallel");
    assert!(
        tp_fast.comm_share > 0.0 && tp_fast.comm_share < 0.25,
        "{tp_fast:#?}"
    );
    assert!(tp_fast.scaling > 0.75, "{tp_fast:#?}");
    assert_eq!(tp_slow.bound, Bound::Communication, "{tp_slow:#?}");
    assert!(tp_slow.scaling < 0.5 * tp_fast.scaling, "{tp_slow:#?}");
    assert!(tp_slow.comm_share > 0.5);
    // On PCIe a hybrid of pairs keeps more than tensor parallelism over all eight.
    let hy = fit(&slow, "hybrid (tensor 2 x data 4)");
    assert!(hy.scaling > tp_slow.scaling, "{hy:#?}");
    // Every step is the sum of its parts, its share the exposed part.
    for r in fast.iter().chain(&slow) {
        let f = r.fit.as_ref().unwrap();
        assert!((f.step_ms - (f.compute_ms + f.memory_ms + f.exposed_comm_ms)).abs() < 1e-12);
        assert!(f.exposed_comm_ms <= f.comm_ms + 1e-12);
        assert!((f.comm_share - f.exposed_comm_ms / f.step_ms).abs() < 1e-12);
    }
}

#[test]
fn one_gpu_scales_perfectly_and_free_communication_keeps_data_parallel_linear() {
    let c = cfg(&[1024, 4096, 4096, 10], 4096);
    let one = analyse(&c, 1, &nvswitch());
    assert_eq!(one.len(), 1);
    let f = fit(&one, "data-parallel");
    assert!((f.scaling - 1.0).abs() < 1e-12, "{f:#?}");
    assert_eq!(f.comm_ms, 0.0);
    let free = NodeRates {
        all_reduce_us: vec![(1, 0.0), (1 << 40, 0.0)],
        ..nvswitch()
    };
    let f = analyse(&c, 8, &free);
    assert!((fit(&f, "data-parallel").scaling - 1.0).abs() < 1e-12);
}

#[test]
fn a_slower_gemm_rate_makes_a_step_compute_bound_and_slower_memory_memory_bound() {
    let c = cfg(&[1024, 4096, 4096, 10], 4096);
    let slow_gemm = NodeRates {
        gemm_tflops: 5.0,
        ..pcie()
    };
    let f = analyse(&c, 8, &slow_gemm);
    assert_eq!(fit(&f, "tensor-parallel").bound, Bound::Compute);
    let slow_memory = NodeRates {
        memory_gbps: 10.0,
        ..nvswitch()
    };
    let f = analyse(&c, 8, &slow_memory);
    assert_eq!(fit(&f, "data-parallel").bound, Bound::Memory);
}

#[test]
fn a_model_a_method_cannot_split_says_why_and_unmeasured_parts_are_said() {
    // 4100 outputs do not divide over 8 or 4 ranks (but over 2).
    let c = cfg(&[1024, 4100, 4100, 10], 1024);
    let rows = analyse(&c, 8, &nvswitch());
    let tp = rows.iter().find(|r| r.method == "tensor-parallel").unwrap();
    assert!(tp.fit.is_none());
    assert!(
        tp.not_applicable.as_ref().unwrap().contains("4100"),
        "{tp:#?}"
    );
    assert!(rows
        .iter()
        .find(|r| r.method == "hybrid (tensor 2 x data 4)")
        .unwrap()
        .fit
        .is_some());
    let nothing = NodeRates {
        all_reduce_us: vec![],
        ..nvswitch()
    };
    let rows = analyse(&c, 8, &nothing);
    let dp = &rows[0];
    assert_eq!(
        dp.not_applicable.as_deref(),
        Some("no all_reduce time was measured")
    );
    let rows = analyse(
        &c,
        8,
        &NodeRates {
            gemm_tflops: 0.0,
            ..nvswitch()
        },
    );
    assert!(rows.iter().all(|r| r.fit.is_none()));
}

#[test]
fn a_method_is_said_in_one_sentence() {
    let f = MethodFit {
        method: "tensor-parallel".into(),
        gpus: 8,
        compute_ms: 1.0,
        memory_ms: 0.0,
        comm_ms: 0.3,
        exposed_comm_ms: 0.3,
        step_ms: 1.3,
        samples_per_s: 1.0,
        scaling: 0.714,
        comm_share: 0.24,
        bound: Bound::Compute,
    };
    assert_eq!(
        f.sentence(),
        "tensor-parallel over 8 GPUs keeps 71% of linear scaling here; communication is 24% of \
         its step (bound by compute)"
    );
    let one = MethodFit { gpus: 1, ..f };
    assert!(one
        .sentence()
        .starts_with("tensor-parallel over 1 GPU keeps"));
}

/// The fit of a simulated run of `sku` with `faults`, from its evidence.
fn simulated(sku: &str, faults: &[&str]) -> Vec<FitRow> {
    let ev = crate::testutil::simulated(sku, faults);
    let cfg = ev.suite.resolved.checks.training.clone().unwrap();
    let rates = node_rates(&ev, cfg.precision).unwrap();
    analyse(&cfg, ev.node.gpus.len(), &rates)
}

#[test]
fn every_simulated_sku_predicts_every_method_from_its_measured_parts() {
    for (sku, gpus) in [
        ("h100-sxm-8", 8),
        ("h200-sxm-8", 8),
        ("a100-sxm-80gb-8", 8),
        ("l40s-pcie-4", 4),
        ("h200-vm-1", 1),
    ] {
        let rows = simulated(sku, &[]);
        assert_eq!(rows.len(), methods(gpus).len(), "{sku}");
        assert!(rows.iter().all(|r| r.fit.is_some()), "{sku}: {rows:#?}");
    }
    // An NVSwitch node keeps tensor parallelism efficient; a PCIe box does not.
    let nv = simulated("h200-sxm-8", &[]);
    let pcie = simulated("l40s-pcie-4", &[]);
    assert!(fit(&nv, "tensor-parallel").scaling > 0.8);
    assert_eq!(fit(&nv, "tensor-parallel").bound, Bound::Compute);
    assert_eq!(fit(&pcie, "tensor-parallel").bound, Bound::Communication);
    assert!(fit(&pcie, "tensor-parallel").scaling < 0.5);
}

#[test]
fn a_slow_all_reduce_hurts_tensor_parallelism_more_than_data_parallelism() {
    let healthy = simulated("h200-sxm-8", &[]);
    let slow = simulated("h200-sxm-8", &["slow-collective:factor=0.2"]);
    let loss = |m: &str| fit(&healthy, m).scaling - fit(&slow, m).scaling;
    assert!(loss("tensor-parallel") > 0.1, "{slow:#?}");
    assert!(
        loss("tensor-parallel") > 2.0 * loss("data-parallel"),
        "{slow:#?}"
    );
    // A slow GPU's GEMMs set every method's compute (the step waits for the slowest rank).
    let slow_gpu = simulated("h200-sxm-8", &["slow-compute:gpu=3,factor=0.5"]);
    for r in &slow_gpu {
        let (a, b) = (fit(&healthy, &r.method), r.fit.as_ref().unwrap());
        assert!(b.compute_ms > 1.9 * a.compute_ms, "{}", r.method);
    }
}

#[test]
fn what_a_run_did_not_measure_is_named() {
    let mut ev = crate::testutil::simulated("h200-sxm-8", &[]);
    ev.checks
        .retain(|c| c.id != "compute" && c.id != "collective.all_reduce");
    let missing = node_rates(&ev, crate::suite::Precision::Fp32).unwrap_err();
    assert_eq!(
        missing,
        [
            "the compute check's fp32_tflops",
            "the all_reduce collective"
        ]
    );
    let missing = node_rates(&ev, crate::suite::Precision::Bf16).unwrap_err();
    assert_eq!(missing[0], "the compute check's bf16_tflops");
}

/// The all_reduce is needed only where there is more than one GPU: missing alone, it still
/// makes the fit fail on eight GPUs, and is not asked for on one.
#[test]
fn a_missing_all_reduce_matters_only_where_gpus_talk() {
    let mut ev = crate::testutil::simulated("h200-sxm-8", &[]);
    ev.checks.retain(|c| c.id != "collective.all_reduce");
    assert_eq!(
        node_rates(&ev, crate::suite::Precision::Fp32).unwrap_err(),
        ["the all_reduce collective"]
    );
    let mut one = crate::testutil::simulated("h200-vm-1", &[]);
    one.checks.retain(|c| c.id != "collective.all_reduce");
    let r = node_rates(&one, crate::suite::Precision::Fp32).expect("one GPU needs no all_reduce");
    assert!(r.all_reduce_us.is_empty());
    assert!(r.gemm_tflops > 0.0 && r.memory_gbps > 0.0);
}

/// The element-wise bytes of a step, counted by hand: per layer the rank's output, five passes
/// of 4-byte words a sample, and its weights and bias, three passes.
#[test]
fn a_steps_memory_traffic_is_counted_layer_by_layer() {
    // [4, 8, 2], whole on one GPU, 10 samples: (5·10·8 + 3·(32 + 8)) + (5·10·2 + 3·(16 + 2))
    // words = 674.
    assert_eq!(
        memory_bytes(&[4, 8, 2], Partition::Data { dp: 1 }, 10),
        4.0 * 674.0
    );
    // Data parallelism does not change a rank's share.
    assert_eq!(
        memory_bytes(&[4, 8, 2], Partition::Data { dp: 8 }, 10),
        4.0 * 674.0
    );
    // [4, 8, 8, 2] over 2 tensor-parallel ranks: the column shard's output and bias halve (4),
    // the row shard keeps the whole output and bias (8) with half the weights (4 x 8), the last
    // layer is replicated: (200 + 3·(16 + 4)) + (400 + 3·(32 + 8)) + (100 + 3·(16 + 2)) = 934.
    let tp = memory_bytes(&[4, 8, 8, 2], Partition::Tensor { tp: 2 }, 10);
    assert_eq!(tp, 4.0 * 934.0);
    assert_eq!(
        memory_bytes(&[4, 8, 8, 2], Partition::Hybrid { tp: 2, dp: 4 }, 10),
        tp
    );
}

/// Every group of two or more GPUs all-reduces, so it spends time communicating; the tensor-
/// parallel all-reduces sit between layers, so a method with them always waits on some.
#[test]
fn every_group_of_two_or_more_gpus_communicates() {
    for sku in ["h200-sxm-8", "l40s-pcie-4"] {
        let rows = simulated(sku, &[]);
        for r in &rows {
            let f = r.fit.as_ref().unwrap();
            assert!(f.comm_ms > 0.0, "{sku} {}: {f:?}", r.method);
            if r.method != "data-parallel" {
                assert!(f.exposed_comm_ms > 0.0, "{sku} {}: {f:?}", r.method);
            }
        }
    }
}

/// A rate of zero is a rate not measured: no method is predicted from it (no infinite step).
#[test]
fn a_zero_gemm_rate_or_memory_bandwidth_predicts_nothing() {
    let c = cfg(&[1024, 4096, 4096, 10], 8192);
    for rates in [
        NodeRates {
            gemm_tflops: 0.0,
            ..nvswitch()
        },
        NodeRates {
            memory_gbps: 0.0,
            ..nvswitch()
        },
    ] {
        let rows = analyse(&c, 8, &rates);
        assert_eq!(rows.len(), methods(8).len());
        for r in &rows {
            assert!(r.fit.is_none(), "{r:?}");
            assert_eq!(
                r.not_applicable.as_deref(),
                Some("no GEMM rate or memory bandwidth was measured")
            );
        }
    }
    assert!(analyse(&c, 8, &nvswitch()).iter().all(|r| r.fit.is_some()));
}

/// One rank's step, counted by hand: layers [64, 128, 128, 128, 128, 10] over 2 tensor-parallel
/// ranks and 2 data-parallel groups, 16 samples, all-reduces costing 1 µs a KiB.
#[test]
fn a_steps_parts_add_up_as_counted_by_hand() {
    let layers = [64, 128, 128, 128, 128, 10];
    let rates = NodeRates {
        gemm_tflops: 0.1,
        memory_gbps: 1.0,
        all_reduce_us: vec![(1 << 10, 1.0), (1 << 20, 1024.0)],
    };
    let (compute, _, comm, exposed) =
        step_parts(&layers, Partition::Hybrid { tp: 2, dp: 2 }, 16, &rates).unwrap();
    // GEMM flops: 2 · 16 samples · the rank's weights · passes (2 for the first layer, 3 after):
    // 4096·2 + 8192·3 · 3 + 1280·3 shard elements.
    let flops = 2.0 * 16.0 * (4096.0 * 2.0 + 8192.0 * 3.0 * 3.0 + 1280.0 * 3.0);
    assert_eq!(compute, flops / 0.1e12 * 1e3);
    // Tensor-parallel: three all-reduces (after the row layers 1 and 3, and of layer 2's input
    // gradient) of 128 words a sample, 8 KiB each: 8 µs each.
    let tensor = 3.0 * 8.0 / 1e3;
    // Data-parallel: the rank's gradients as laid out in its flat buffer, each tensor padded to
    // 64 words: 30346 words (4160 + 8320 + 8256 + 8320 + 1290) and 54 of padding after the last
    // bias of 10.
    let data = (30346.0 + 54.0) * 4.0 / 1024.0 / 1e3;
    assert!(
        (comm - (tensor + data)).abs() < 1e-12,
        "{comm} {tensor} {data}"
    );
    // The tensor-parallel waits are whole; the data-parallel one beyond what 60% of the compute
    // hides.
    let want = tensor + (data - OVERLAP * compute);
    assert!(data > OVERLAP * compute);
    assert!((exposed - want).abs() < 1e-12, "{exposed} {want}");
}

#[test]
fn a_model_no_suite_may_state_is_said_not_panicked_on() {
    // Evidence read back is not validated as a suite is: its training model may be anything.
    for (layers, batch) in [
        (vec![], 64),
        (vec![1024], 64),
        (vec![1024, 0, 10], 64),
        (vec![usize::MAX, usize::MAX, 10], 64),
        (vec![1024, 1024, 10], 0),
    ] {
        let mut ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let t = ev.suite.resolved.checks.training.as_mut().unwrap();
        t.layers = layers.clone();
        t.batch = batch;
        let cfg = t.clone();
        let rates = node_rates(&ev, cfg.precision).unwrap();
        let rows = analyse(&cfg, 8, &rates);
        assert!(!rows.is_empty());
        for r in &rows {
            assert!(r.fit.is_none(), "{layers:?}: {r:?}");
            let why = r.not_applicable.as_deref().unwrap_or_default();
            assert!(
                why.contains("is not one a suite may state") || why.contains("layer"),
                "{layers:?} {batch}: {why}"
            );
        }
        let page = crate::report::render(&ev, None, &Default::default());
        assert!(page.is_ok(), "{layers:?}: {page:?}");
    }
}
