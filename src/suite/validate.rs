//! Semantic validation of a suite, once its types are known to be right: every problem is
//! collected with the key path it belongs to, so that load can name file, line and column.

use super::*;

impl Suite {
    /// Semantic validation, after the types are known to be right.
    pub fn validate(&self) -> Vec<Problem> {
        self.review().0
    }

    /// What a valid suite states that judges nothing (a floor of 0: no figure is below it), at
    /// the key that states it. Such a bound loads, so that suites users wrote keep loading, but
    /// it is not a judgement: [`crate::checks::judge::judge`] leaves it out, and `check` and
    /// `run` say so.
    pub fn cautions(&self) -> Vec<Problem> {
        self.review().1
    }

    /// Problems and cautions together.
    fn review(&self) -> (Vec<Problem>, Vec<Problem>) {
        let mut p = Problems(Vec::new(), Vec::new());
        self.validate_node(&mut p);
        self.validate_topology(&mut p);
        self.validate_transfers(&mut p);
        self.validate_compute(&mut p);
        self.validate_collectives(&mut p);
        self.validate_training(&mut p);
        self.validate_baseline(&mut p);
        self.validate_health(&mut p);
        self.validate_network(&mut p);
        // Last: a more specific problem of the same file is reported first.
        if self.promised_checks().is_empty() {
            p.bad(
                "checks",
                "the suite enables no check, so a run could judge nothing: add one under [checks] \
                 (topology, virtualization, health, host_bandwidth, p2p_bandwidth, p2p_latency, \
                 collective.<op>, compute, training, fabric, network) or re-enable an inherited one (enabled = true)"
                    .into(),
            );
        }
        (p.0, p.1)
    }

    /// The name, `[node]` and `[nccl]`.
    fn validate_node(&self, p: &mut Problems) {
        if self.name.trim().is_empty() {
            p.bad("name", "name must not be empty".into());
        }
        if let Some(n) = self.node.gpu_count {
            if n == 0 {
                p.bad("node.gpu_count", "gpu_count must be at least 1".into());
            }
            if n > MAX_GPUS {
                p.bad(
                    "node.gpu_count",
                    format!("gpu_count must be at most {MAX_GPUS}, got {n}"),
                );
            }
        }
        if let Some(m) = self.node.memory_gib_min {
            if m == 0.0 {
                p.floor_of_zero(key_path("node.memory_gib_min"));
            }
            if !(m.is_finite() && (0.0..=MAX_MEMORY_GIB).contains(&m)) {
                p.bad(
                    "node.memory_gib_min",
                    format!(
                        "memory_gib_min must be 0 to {MAX_MEMORY_GIB} GiB, got {}",
                        crate::units::exact(m)
                    ),
                );
            }
        }
        if let Some(v) = &self.node.driver_min {
            if parse_version(v).is_none() {
                p.bad(
                    "node.driver_min",
                    format!("'{v}' is not a version (expected e.g. \"535.104\")"),
                );
            }
        }
        for (name, value) in &self.nccl.accept {
            // The name is a key of its own (it may hold a '.').
            let mut path = key_path("nccl.accept");
            path.push(Seg::Key(name.clone()));
            let fabric = crate::checks::nccl_env::Scope::Fabric;
            let rest = name.strip_prefix("NCCL_").unwrap_or("");
            let word = |c: char| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_';
            if rest.is_empty() || !rest.chars().all(word) {
                let msg =
                    format!("'{name}' is not an NCCL setting (NCCL_ and capitals, digits, _)");
                p.bad_at(path, msg);
            } else if !crate::checks::nccl_env::steers(name, value, fabric) {
                let msg = format!("{name} = {value:?} changes no figure: nothing to accept");
                p.bad_at(path, msg);
            }
        }
    }

    /// `[topology]`, and its relations to `node.gpu_count`.
    fn validate_topology(&self, p: &mut Problems) {
        if let Some(g) = self.topology.pcie_gen {
            if !(1..=7).contains(&g) {
                p.bad(
                    "topology.pcie_gen",
                    format!("pcie_gen must be 1 to 7, got {g}"),
                );
            }
        }
        if let Some(w) = self.topology.pcie_width {
            if ![1, 2, 4, 8, 16, 32].contains(&w) {
                p.bad(
                    "topology.pcie_width",
                    format!("pcie_width must be 1, 2, 4, 8, 16 or 32, got {w}"),
                );
            }
        }
        if let Some(l) = self.topology.nvlinks_per_pair {
            p.links("topology.nvlinks_per_pair", l);
        }
        // A GPU count out of range is said above; the relations below are then not checked
        // against it (a table sized by it could not be allocated).
        let n = self.node.gpu_count.filter(|n| *n <= MAX_GPUS);
        let needs = |p: &mut Problems, path: &str, key: &str| {
            if self.node.gpu_count.is_none() {
                p.bad(path, format!("{key} needs node.gpu_count"));
            }
        };
        if self.topology.nvlink_pairs.len() > MAX_PAIRS {
            p.bad(
                "topology.nvlink_pairs",
                format!(
                    "nvlink_pairs lists {} pairs; a node of at most {MAX_GPUS} GPUs has at most {MAX_PAIRS}",
                    self.topology.nvlink_pairs.len()
                ),
            );
        }
        for (i, pl) in self.topology.nvlink_pairs.iter().enumerate() {
            let path = format!("topology.nvlink_pairs[{i}]");
            p.links(&format!("{path}.links"), pl.links);
            let same = |q: &PairLinks| (q.a, q.b) == (pl.a, pl.b) || (q.a, q.b) == (pl.b, pl.a);
            if self.topology.nvlink_pairs[..i].iter().any(same) {
                p.bad(
                    &path,
                    format!(
                        "the pair {}-{} is listed twice: one count per pair",
                        pl.a, pl.b
                    ),
                );
            }
            if pl.a == pl.b {
                p.bad(
                    &path,
                    format!("a pair needs two different GPUs, got {} and {}", pl.a, pl.b),
                );
            }
            match n {
                None => needs(p, &path, "nvlink_pairs"),
                Some(n) => {
                    for (k, v) in [("a", pl.a), ("b", pl.b)] {
                        if v >= n {
                            p.bad(
                                &format!("{path}.{k}"),
                                format!("GPU index {v} is out of range: the node has {n} GPUs (0 to {})", n - 1),
                            );
                        }
                    }
                }
            }
        }
        for (key, groups) in [
            ("socket_groups", &self.topology.socket_groups),
            ("numa_groups", &self.topology.numa_groups),
            ("cpu_affinity_groups", &self.topology.cpu_affinity_groups),
        ] {
            let Some(groups) = groups else { continue };
            let path = format!("topology.{key}");
            let Some(n) = n else {
                needs(p, &path, key);
                continue;
            };
            let mut seen = vec![false; n];
            for (i, g) in groups.iter().enumerate() {
                if g.is_empty() {
                    p.bad(
                        &format!("{path}[{i}]"),
                        "a group needs at least one GPU".into(),
                    );
                }
                for (j, &v) in g.iter().enumerate() {
                    let at = format!("{path}[{i}][{j}]");
                    if v >= n {
                        p.bad(
                            &at,
                            format!(
                                "GPU index {v} is out of range: the node has {n} GPUs (0 to {})",
                                n - 1
                            ),
                        );
                    } else if std::mem::replace(&mut seen[v], true) {
                        p.bad(&at, format!("GPU {v} is in more than one place of {key}"));
                    }
                }
            }
        }
        let mut pairs_seen = std::collections::BTreeSet::new();
        for (i, pp) in self.topology.pcie_paths.iter().enumerate() {
            let path = format!("topology.pcie_paths[{i}]");
            if pp.a == pp.b {
                p.bad(
                    &path,
                    format!("a pair needs two different GPUs, got {} and {}", pp.a, pp.b),
                );
            } else if !pairs_seen.insert((pp.a.min(pp.b), pp.a.max(pp.b))) {
                p.bad(&path, format!("the pair {}-{} is listed twice", pp.a, pp.b));
            }
            match n {
                None => needs(p, &path, "pcie_paths"),
                Some(n) => {
                    for (k, v) in [("a", pp.a), ("b", pp.b)] {
                        if v >= n {
                            p.bad(
                                &format!("{path}.{k}"),
                                format!("GPU index {v} is out of range: the node has {n} GPUs (0 to {})", n - 1),
                            );
                        }
                    }
                }
            }
        }
        for (i, v) in self.topology.numa_nodes.iter().flatten().enumerate() {
            if !(0..=MAX_NUMA_NODE).contains(v) {
                p.bad(
                    &format!("topology.numa_nodes[{i}]"),
                    format!("a NUMA node is 0 to {MAX_NUMA_NODE}, got {v}"),
                );
            }
        }
        if let (Some(numa), Some(n)) = (&self.topology.numa_nodes, n) {
            if numa.len() != n {
                p.bad(
                    "topology.numa_nodes",
                    format!(
                        "numa_nodes lists {} GPUs but node.gpu_count is {n}",
                        numa.len()
                    ),
                );
            }
        }
        if let Some(cpus) = &self.topology.cpu_affinity {
            for (i, v) in cpus.iter().enumerate() {
                if crate::platform::numa::parse_cpulist(v).is_none() {
                    p.bad(
                        &format!("topology.cpu_affinity[{i}]"),
                        format!("'{v}' is not a CPU list (expected e.g. \"0-55,112-167\")"),
                    );
                }
            }
            if let Some(n) = n.filter(|n| cpus.len() != *n) {
                p.bad(
                    "topology.cpu_affinity",
                    format!(
                        "cpu_affinity lists {} GPUs but node.gpu_count is {n}",
                        cpus.len()
                    ),
                );
            }
        }
    }

    /// `[checks.host_bandwidth]`, `[checks.p2p_bandwidth]` and `[checks.p2p_latency]`.
    fn validate_transfers(&self, p: &mut Problems) {
        let c = &self.checks;
        if let Some(h) = &c.host_bandwidth {
            for (k, l) in [
                ("h2d", &h.h2d),
                ("d2h", &h.d2h),
                ("bidir", &h.bidir),
                ("all_gpus_h2d", &h.all_gpus_h2d),
                ("device_copy", &h.device_copy),
            ] {
                p.limit(&format!("checks.host_bandwidth.{k}"), l, MAX_GBPS);
            }
            p.size("checks.host_bandwidth.size", h.size);
            p.iters("checks.host_bandwidth.iterations", h.iterations);
            p.warmup("checks.host_bandwidth.warmup", h.warmup);
            p.pct("checks.host_bandwidth.outlier_pct", h.outlier_pct);
            p.remeasure("checks.host_bandwidth.remeasure", h.remeasure);
        }
        if let Some(x) = &c.p2p_bandwidth {
            for (k, l) in [("read", &x.read), ("write", &x.write), ("bidir", &x.bidir)] {
                p.limit(&format!("checks.p2p_bandwidth.{k}"), l, MAX_GBPS);
            }
            for (class, pl) in &x.by_path {
                for (k, l) in [
                    ("read", &pl.read),
                    ("write", &pl.write),
                    ("bidir", &pl.bidir),
                ] {
                    if let Some(l) = l {
                        let path = format!("checks.p2p_bandwidth.by_path.{}.{k}", class.label());
                        p.limit(&path, l, MAX_GBPS);
                    }
                }
            }
            p.size("checks.p2p_bandwidth.size", x.size);
            p.iters("checks.p2p_bandwidth.iterations", x.iterations);
            p.warmup("checks.p2p_bandwidth.warmup", x.warmup);
            p.pct("checks.p2p_bandwidth.outlier_pct", x.outlier_pct);
            p.remeasure("checks.p2p_bandwidth.remeasure", x.remeasure);
        }
        if let Some(x) = &c.p2p_latency {
            p.limit(
                "checks.p2p_latency.latency_us",
                &x.latency_us,
                MAX_LATENCY_US,
            );
            p.iters("checks.p2p_latency.iterations", x.iterations);
            p.pct("checks.p2p_latency.outlier_pct", x.outlier_pct);
            p.remeasure("checks.p2p_latency.remeasure", x.remeasure);
        }
    }

    /// `[checks.compute]`.
    fn validate_compute(&self, p: &mut Problems) {
        let c = &self.checks;
        if let Some(x) = &c.compute {
            for prec in GemmPrecision::ALL {
                p.limit(
                    &format!("checks.compute.{}", prec.metric()),
                    x.limit(prec),
                    MAX_TFLOPS,
                );
            }
            if !(MIN_GEMM_SIZE..=MAX_GEMM_SIZE).contains(&x.size) || x.size % 16 != 0 {
                p.bad(
                    "checks.compute.size",
                    format!(
                        "size must be a multiple of 16 from {MIN_GEMM_SIZE} to {MAX_GEMM_SIZE}, got {}",
                        x.size
                    ),
                );
            }
            if x.precisions.is_empty() {
                p.bad(
                    "checks.compute.precisions",
                    "precisions must name at least one of fp32, tf32, bf16, fp8".into(),
                );
            }
            let mut seen = std::collections::BTreeSet::new();
            if let Some(d) = x.precisions.iter().find(|q| !seen.insert(**q)) {
                p.bad(
                    "checks.compute.precisions",
                    format!("precisions names {d} twice"),
                );
            }
            p.iters("checks.compute.iterations", x.iterations);
            p.warmup("checks.compute.warmup", x.warmup);
            if let Some(l) = &x.sustained {
                if !(l.seconds.is_finite() && (1.0..=MAX_SUSTAINED_S).contains(&l.seconds)) {
                    p.bad(
                        "checks.compute.sustained.seconds",
                        format!(
                            "seconds must be 1 to {MAX_SUSTAINED_S}, got {}",
                            crate::units::exact(l.seconds)
                        ),
                    );
                }
                if !(50..=60_000).contains(&l.sample_ms) {
                    p.bad(
                        "checks.compute.sustained.sample_ms",
                        format!("sample_ms must be 50 to 60000, got {}", l.sample_ms),
                    );
                } else if l.seconds * 1000.0 / f64::from(l.sample_ms) > 100_000.0 {
                    p.bad(
                        "checks.compute.sustained.sample_ms",
                        "more than 100000 samples: take fewer (a larger sample_ms)".into(),
                    );
                }
                if let Some(f) = l.min_power_fraction {
                    if !(f > 0.0 && f <= 1.0) {
                        p.bad(
                            "checks.compute.sustained.min_power_fraction",
                            format!("min_power_fraction must be above 0 and at most 1, got {f}"),
                        );
                    }
                }
                if !(l.max_rate_drop_pct > 0.0 && l.max_rate_drop_pct < 100.0) {
                    p.bad(
                        "checks.compute.sustained.max_rate_drop_pct",
                        format!(
                            "max_rate_drop_pct must be between 0 and 100, got {}",
                            l.max_rate_drop_pct
                        ),
                    );
                }
                if let Some(t) = l.max_temperature_c {
                    if !(t.is_finite() && t > 0.0 && t < 200.0) {
                        p.bad(
                            "checks.compute.sustained.max_temperature_c",
                            format!("max_temperature_c must be between 0 and 200, got {t}"),
                        );
                    }
                }
                if let Some(bad) = l
                    .fail_throttle
                    .iter()
                    .find(|r| !THROTTLE_REASONS.contains(&r.as_str()))
                {
                    p.bad(
                        "checks.compute.sustained.fail_throttle",
                        format!(
                            "unknown throttle reason '{bad}' (known: {})",
                            THROTTLE_REASONS.join(", ")
                        ),
                    );
                }
            }
            p.pct("checks.compute.outlier_pct", x.outlier_pct);
            // 0 turns the plateau off (a suite extending one that sets it cannot unset it).
            if let Some(v) = x.plateau_pct.filter(|v| !(*v >= 0.0 && *v < 100.0)) {
                p.bad(
                    "checks.compute.plateau_pct",
                    format!("plateau_pct must be from 0 (off) to below 100, got {v}"),
                );
            }
            p.remeasure("checks.compute.remeasure", x.remeasure);
        }
    }

    /// `[checks.collective.<op>]`.
    fn validate_collectives(&self, p: &mut Problems) {
        let c = &self.checks;
        for (op, cc) in &c.collective {
            let base = format!("checks.collective.{op}");
            p.iters(&format!("{base}.iterations"), cc.iterations);
            p.warmup(&format!("{base}.warmup"), cc.warmup);
            p.remeasure(&format!("{base}.remeasure"), cc.remeasure);
            if cc.min_size.0 == 0 {
                p.bad(
                    &format!("{base}.min_size"),
                    "min_size must be at least 1 byte".into(),
                );
            }
            p.size(&format!("{base}.max_size"), cc.max_size);
            if cc.min_size > cc.max_size {
                p.bad(
                    &format!("{base}.max_size"),
                    format!(
                        "max_size ({}) is smaller than min_size ({})",
                        cc.max_size, cc.min_size
                    ),
                );
            }
            if !(2..=MAX_SIZE_FACTOR).contains(&cc.factor) {
                p.bad(
                    &format!("{base}.factor"),
                    format!("factor must be 2 to {MAX_SIZE_FACTOR}, got {}", cc.factor),
                );
            }
            for (field, map) in [
                ("min_busbw_gbps", &cc.min_busbw_gbps),
                ("warn_busbw_gbps", &cc.warn_busbw_gbps),
                ("min_busbw_gbps_no_nvls", &cc.min_busbw_gbps_no_nvls),
            ] {
                for (k, v) in map {
                    let path = || level_path(&base, field, k);
                    match ByteSize::parse(k) {
                        Err(e) => p.bad_at(path(), format!("the key must be a message size: {e}")),
                        Ok(b) if b.0 > MAX_SIZE => p.bad_at(
                            path(),
                            format!(
                                "the message size {b} is over the largest a collective takes ({})",
                                ByteSize(MAX_SIZE)
                            ),
                        ),
                        Ok(_) => {}
                    }
                    if !(v.is_finite() && (0.0..=MAX_GBPS).contains(v)) {
                        p.bad_at(
                            path(),
                            format!(
                                "bus bandwidth must be 0 to {MAX_GBPS} GB/s, got {}",
                                crate::units::exact(*v)
                            ),
                        );
                    } else if *v == 0.0 {
                        p.floor_of_zero(path());
                    }
                }
            }
            if *op != CollectiveOp::AllReduce
                && (cc.nvls.is_some() || !cc.min_busbw_gbps_no_nvls.is_empty())
            {
                p.bad(
                    &format!("{base}.nvls"),
                    "nvls and min_busbw_gbps_no_nvls apply to all_reduce only".to_string(),
                );
            }
            // A floor above the sweep's largest message applies to no figure: it would pass
            // a node whose every figure is under it.
            let largest = match (2..=MAX_SIZE_FACTOR).contains(&cc.factor) {
                true => crate::units::size_sweep(cc.min_size.0, cc.max_size.0, cc.factor)
                    .last()
                    .copied(),
                false => None,
            };
            for (field, map) in [
                ("min_busbw_gbps", &cc.min_busbw_gbps),
                ("warn_busbw_gbps", &cc.warn_busbw_gbps),
                ("min_busbw_gbps_no_nvls", &cc.min_busbw_gbps_no_nvls),
            ] {
                for k in map.keys() {
                    let (Ok(b), Some(last)) = (ByteSize::parse(k), largest) else {
                        continue;
                    };
                    if b.0 > last && b.0 <= MAX_SIZE {
                        p.between_at(
                            level_path(&base, field, k),
                            &format!("{base}.max_size"),
                            format!(
                                "the level at {b} applies to no measured size: the largest \
                                 message the sweep measures is {} (raise max_size, or state the \
                                 level at a measured size)",
                                ByteSize(last)
                            ),
                        );
                    }
                }
            }
            if cc.nvls == Some(NvlsRequirement::IfAvailable)
                && !cc.min_busbw_gbps.is_empty()
                && cc.min_busbw_gbps_no_nvls.is_empty()
            {
                p.bad(
                    &format!("{base}.nvls"),
                    "nvls = \"if_available\" with floors needs min_busbw_gbps_no_nvls: on a node \
                     that cannot use NVLS no floor would apply"
                        .to_string(),
                );
            }
            if !cc.min_busbw_gbps_no_nvls.is_empty()
                && cc.nvls != Some(NvlsRequirement::IfAvailable)
            {
                p.bad(
                    &format!("{base}.min_busbw_gbps_no_nvls"),
                    "min_busbw_gbps_no_nvls needs nvls = \"if_available\"".to_string(),
                );
            }
            if let Some(f) = cc.min_fraction_of_p2p {
                if !(f > 0.0 && f <= 2.0) {
                    p.bad(
                        &format!("{base}.min_fraction_of_p2p"),
                        format!("min_fraction_of_p2p must be in (0, 2], got {f}"),
                    );
                }
            }
        }
    }

    /// `[checks.training]`.
    fn validate_training(&self, p: &mut Problems) {
        let c = &self.checks;
        if let Some(t) = &c.training {
            p.limit(
                "checks.training.samples_per_s",
                &t.samples_per_s,
                MAX_SAMPLES_PER_S,
            );
            p.layers(
                "checks.training.layers",
                &t.layers,
                MAX_TRAINING_WIDTH,
                MAX_TRAINING_PARAMS,
            );
            p.layers(
                "checks.training.golden_layers",
                &t.golden_layers,
                MAX_GOLDEN_WIDTH,
                MAX_GOLDEN_PARAMS,
            );
            for (k, v, max) in [
                ("batch", t.batch, MAX_BATCH),
                ("golden_batch", t.golden_batch, MAX_GOLDEN_BATCH),
            ] {
                if !(1..=max).contains(&v) {
                    p.bad(
                        &format!("checks.training.{k}"),
                        format!("{k} must be 1 to {max}, got {v}"),
                    );
                }
            }
            if t.steps > MAX_ITERATIONS as usize {
                p.bad(
                    "checks.training.steps",
                    format!("steps must be at most {MAX_ITERATIONS}, got {}", t.steps),
                );
            }
            if let Some(work) = golden_work(t) {
                if work > MAX_GOLDEN_WORK {
                    p.bad(
                        "checks.training.golden_layers",
                        format!(
                            "the golden configuration is trained on the CPU: its parameters x \
                             golden_batch x golden_steps ({work}) must be at most \
                             {MAX_GOLDEN_WORK} (minutes of CPU time); use smaller layers, batch \
                             or steps"
                        ),
                    );
                }
            }
            if !(t.golden_lr.is_finite() && t.golden_lr > 0.0 && (t.golden_lr as f32).is_finite()) {
                p.bad(
                    "checks.training.golden_lr",
                    format!(
                        "golden_lr must be a number > 0 (as fp32), got {}",
                        crate::units::exact(t.golden_lr)
                    ),
                );
            }
            if !(t.golden_abs_tol >= 0.0 && t.golden_abs_tol < 1.0) {
                p.bad(
                    "checks.training.golden_abs_tol",
                    format!(
                        "golden_abs_tol must be a number from 0 to below 1, got {}",
                        crate::units::exact(t.golden_abs_tol)
                    ),
                );
            }
            if let Some(l) = t.loss_target {
                if !(l.is_finite() && l > 0.0) {
                    p.bad(
                        "checks.training.loss_target",
                        format!(
                            "loss_target must be a number > 0 (a cross-entropy loss is never \
                             below 0), got {}",
                            crate::units::exact(l)
                        ),
                    );
                }
            }
            if t.steps == 0 || t.golden_steps > t.steps {
                p.bad(
                    "checks.training.steps",
                    format!(
                        "steps ({}) must be at least 1 and at least golden_steps ({})",
                        t.steps, t.golden_steps
                    ),
                );
            }
            if !(t.lr.is_finite() && t.lr > 0.0 && (t.lr as f32).is_finite()) {
                p.bad(
                    "checks.training.lr",
                    format!(
                        "lr must be a number > 0 (as fp32), got {}",
                        crate::units::exact(t.lr)
                    ),
                );
            }
            // A tolerance of 100% or more could never fail the golden check.
            if !(t.golden_rel_tol > 0.0 && t.golden_rel_tol < 1.0) {
                p.bad(
                    "checks.training.golden_rel_tol",
                    format!(
                        "golden_rel_tol must be above 0 and below 1 (relative), got {}",
                        crate::units::exact(t.golden_rel_tol)
                    ),
                );
            }
            if t.golden_steps == 0 {
                p.bad(
                    "checks.training.golden_steps",
                    "golden_steps must be at least 1: a golden check of no step checks nothing"
                        .into(),
                );
            }
            if let Some(e) = t.min_scaling_efficiency {
                if !(e > 0.0 && e <= 1.5) {
                    p.bad(
                        "checks.training.min_scaling_efficiency",
                        format!("min_scaling_efficiency must be in (0, 1.5], got {e}"),
                    );
                }
            }
            for (name, f) in [
                ("tensor_parallel", &t.tensor_parallel),
                ("hybrid", &t.hybrid),
            ] {
                let base = format!("checks.training.{name}");
                if let Some(e) = f.min_scaling_efficiency {
                    if !(e > 0.0 && e <= 1.5) {
                        p.bad(
                            &format!("{base}.min_scaling_efficiency"),
                            format!("min_scaling_efficiency must be in (0, 1.5], got {e}"),
                        );
                    }
                }
                if let Some(x) = f.max_comm_fraction {
                    if !(x > 0.0 && x < 1.0) {
                        p.bad(
                            &format!("{base}.max_comm_fraction"),
                            format!(
                                "max_comm_fraction must be above 0 and below 1 (a share of the \
                                 step), got {x}"
                            ),
                        );
                    }
                }
                if f.any() && !t.partitionings {
                    p.bad(
                        &base,
                        "floors for a partitioning that is not run: set partitionings = true, \
                         or drop them"
                            .into(),
                    );
                }
            }
        }
    }

    /// `[baseline]`.
    fn validate_baseline(&self, p: &mut Problems) {
        if let Some(b) = &self.baseline {
            if b.evidence.trim().is_empty() {
                p.bad(
                    "baseline.evidence",
                    "evidence must name an evidence.json or a report folder".into(),
                );
            }
            let v = b.max_regression_pct;
            if !(v > 0.0 && v < 100.0) {
                p.bad(
                    "baseline.max_regression_pct",
                    format!("max_regression_pct must be between 0 and 100, got {v}"),
                );
            }
        }
    }

    /// `[checks.health]`.
    fn validate_health(&self, p: &mut Problems) {
        let c = &self.checks;
        if let Some(h) = &c.health {
            if !(h.xid_lookback_h.is_finite() && (0.0..=24.0 * 3650.0).contains(&h.xid_lookback_h))
            {
                p.bad(
                    "checks.health.xid_lookback_h",
                    format!(
                        "xid_lookback_h must be 0 to 87600 hours (10 years), got {}",
                        h.xid_lookback_h
                    ),
                );
            }
            if let Some(t) = h.warn_temperature_c {
                if !(t.is_finite() && t > 0.0 && t <= MAX_TEMPERATURE_C) {
                    p.bad(
                        "checks.health.warn_temperature_c",
                        format!(
                            "warn_temperature_c must be above 0 and at most \
                             {MAX_TEMPERATURE_C} °C, got {}",
                            crate::units::exact(t)
                        ),
                    );
                }
            }
            for (i, r) in h.fail_throttle.iter().enumerate() {
                if !THROTTLE_REASONS.contains(&r.as_str()) {
                    p.bad(
                        &format!("checks.health.fail_throttle[{i}]"),
                        format!(
                            "unknown throttle reason '{r}' (known: {})",
                            THROTTLE_REASONS.join(", ")
                        ),
                    );
                }
            }
            if let Some(v) = &h.driver_min {
                if parse_version(v).is_none() {
                    p.bad(
                        "checks.health.driver_min",
                        format!("'{v}' is not a version (expected e.g. \"535.104\")"),
                    );
                }
            }
        }
    }
}

impl Suite {
    fn validate_network(&self, p: &mut Problems) {
        let n = &self.network;
        if let Some(c) = n.nic_count {
            if !(1..=256).contains(&c) {
                p.bad(
                    "network.nic_count",
                    format!("nic_count must be 1 to 256, got {c}"),
                );
            }
        }
        if let Some(r) = n.rate_gbps {
            if !(r.is_finite() && r > 0.0 && r <= 3200.0) {
                p.bad(
                    "network.rate_gbps",
                    format!(
                        "rate_gbps must be above 0 and at most 3200 Gb/s, got {}",
                        crate::units::exact(r)
                    ),
                );
            }
        }
        for (i, e) in n.exclude.iter().enumerate() {
            let name = e.strip_suffix('*').unwrap_or(e);
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            {
                p.bad(
                    &format!("network.exclude[{i}]"),
                    format!(
                        "{e:?} is not an RDMA device name (letters, digits, _ - .), or a prefix of one ending in *"
                    ),
                );
            }
        }
        if let Some(f) = &self.checks.fabric {
            p.limit(
                "checks.fabric.pair_busbw_gbps",
                &f.pair_busbw_gbps,
                MAX_FABRIC_GBPS,
            );
            p.limit("checks.fabric.busbw_gbps", &f.busbw_gbps, MAX_FABRIC_GBPS);
            if !(f.timeout_s.is_finite() && (1.0..=3600.0).contains(&f.timeout_s)) {
                p.bad(
                    "checks.fabric.timeout_s",
                    format!(
                        "timeout_s must be 1 to 3600 seconds, got {}",
                        crate::units::exact(f.timeout_s)
                    ),
                );
            }
            if f.size.0 == 0 || f.size.0 > 1 << 36 {
                p.bad(
                    "checks.fabric.size",
                    "size must be more than 0 and at most 64GiB".into(),
                );
            }
            if f.sizes.len() > MAX_FABRIC_SIZES {
                p.bad(
                    "checks.fabric.sizes",
                    format!("at most {MAX_FABRIC_SIZES} sizes, got {}", f.sizes.len()),
                );
            }
            if f.sizes.iter().any(|s| s.0 == 0 || s.0 > f.size.0) {
                p.bad(
                    "checks.fabric.sizes",
                    "each size must be more than 0 and at most `size` (the judged one)".into(),
                );
            }
            p.limit(
                "checks.fabric.all_gather_busbw_gbps",
                &f.all_gather_busbw_gbps,
                MAX_FABRIC_GBPS,
            );
        }
        if let Some(c) = self
            .checks
            .network
            .as_ref()
            .and_then(|c| c.counters.as_ref())
        {
            let known: Vec<&str> = crate::network::COUNTERS
                .iter()
                .copied()
                .chain([crate::network::CARRIER_CHANGES])
                .collect();
            for (i, name) in c.iter().enumerate() {
                if !known.contains(&name.as_str()) {
                    p.bad(
                        &format!("checks.network.counters[{i}]"),
                        format!("unknown counter {name:?} (known: {})", known.join(", ")),
                    );
                }
            }
        }
    }
}

/// Collects validation problems, and cautions (valid, but judging nothing).
struct Problems(Vec<Problem>, Vec<Problem>);

impl Problems {
    /// A floor of 0 at `path`: valid, but no figure could fall below it.
    fn floor_of_zero(&mut self, path: KeyPath) {
        self.1.push((
            path,
            "a floor of 0 cannot fail (no figure is below 0), so it judges nothing: set one \
             above 0 or drop it"
                .into(),
            None,
        ));
    }

    fn bad(&mut self, path: &str, msg: String) {
        self.bad_at(key_path(path), msg);
    }

    /// [`Problems::bad`] at a path built by hand (a key of its own may hold a '.').
    fn bad_at(&mut self, path: KeyPath, msg: String) {
        self.0.push((path, msg, None));
    }

    /// A problem between the keys `path` and `other`: either may be the one to change.
    fn between(&mut self, path: &str, other: &str, msg: String) {
        self.between_at(key_path(path), other, msg);
    }

    /// [`Problems::between`] at a path built by hand.
    fn between_at(&mut self, path: KeyPath, other: &str, msg: String) {
        self.0.push((path, msg, Some(key_path(other))));
    }

    /// A limit's values: numbers from 0 to `max` (in the figure's unit), in an order that lets
    /// a figure pass: fail_below <= warn_below <= warn_above <= fail_above.
    fn limit(&mut self, path: &str, l: &Limit, max: f64) {
        if let Some(t) = l.typical {
            if !(t.is_finite() && t > 0.0) {
                self.bad(
                    &format!("{path}.typical"),
                    format!("typical must be a number > 0, got {t}"),
                );
            }
        }
        if let Some(f) = l.typical_fraction {
            if !(f > 0.0 && f <= 1.0) {
                self.bad(
                    &format!("{path}.typical_fraction"),
                    format!("typical_fraction must be above 0 and at most 1, got {f}"),
                );
            } else if l.typical.is_none() {
                self.bad(
                    &format!("{path}.typical_fraction"),
                    "typical_fraction needs typical".into(),
                );
            }
        }
        let named = [
            ("fail_below", l.fail_below),
            ("warn_below", l.warn_below),
            ("warn_above", l.warn_above),
            ("fail_above", l.fail_above),
        ];
        for (k, v) in &named[..2] {
            if *v == Some(0.0) {
                self.floor_of_zero(key_path(&format!("{path}.{k}")));
            }
        }
        for (k, v) in named {
            if let Some(v) = v {
                if !(v.is_finite() && (0.0..=max).contains(&v)) {
                    self.bad(
                        &format!("{path}.{k}"),
                        format!(
                            "{k} must be a number from 0 to {max}, got {}",
                            crate::units::exact(v)
                        ),
                    );
                }
            }
        }
        if let (Some(f), Some(w)) = (l.fail_below, l.warn_below) {
            if w < f {
                self.between(
                    &format!("{path}.warn_below"),
                    &format!("{path}.fail_below"),
                    format!("warn_below ({w}) is below fail_below ({f}): a warning level must come before the failure"),
                );
            }
        }
        if let (Some(f), Some(w)) = (l.fail_above, l.warn_above) {
            if w > f {
                self.between(
                    &format!("{path}.warn_above"),
                    &format!("{path}.fail_above"),
                    format!("warn_above ({w}) is above fail_above ({f})"),
                );
            }
        }
        // A floor above a ceiling: no figure could pass (or, for a warning level, none could
        // pass without a warning).
        for (lk, lo) in &named[..2] {
            for (uk, hi) in &named[2..] {
                if let (Some(lo), Some(hi)) = (lo, hi) {
                    if lo > hi {
                        self.between(
                            &format!("{path}.{lk}"),
                            &format!("{path}.{uk}"),
                            format!("{lk} ({lo}) is above {uk} ({hi}): no figure could pass both"),
                        );
                    }
                }
            }
        }
    }

    /// A buffer or message size: at least 1 byte, at most [`MAX_SIZE`].
    fn size(&mut self, path: &str, v: ByteSize) {
        if v.0 == 0 {
            self.bad(path, "a size must be at least 1 byte".into());
        } else if v.0 > MAX_SIZE {
            self.bad(
                path,
                format!("a size must be at most {}, got {v}", ByteSize(MAX_SIZE)),
            );
        }
    }

    /// An NVLink count: at most [`MAX_NVLINKS_PER_GPU`].
    fn links(&mut self, path: &str, v: u32) {
        if v > MAX_NVLINKS_PER_GPU {
            self.bad(
                path,
                format!("a GPU has at most {MAX_NVLINKS_PER_GPU} NVLinks, got {v}"),
            );
        }
    }

    /// Layer widths of a model: input, hidden..., classes; none zero, each at most `width`,
    /// at most [`MAX_LAYERS`] of them, and at most `params` parameters in all.
    fn layers(&mut self, path: &str, layers: &[usize], width: usize, params: u64) {
        let name = path.rsplit('.').next().unwrap_or(path);
        if layers.len() < 2 || layers.contains(&0) {
            self.bad(
                path,
                format!("{name} needs at least an input and an output width, none zero"),
            );
            return;
        }
        if layers.len() > MAX_LAYERS {
            self.bad(
                path,
                format!("{name} lists {} widths; at most {MAX_LAYERS}", layers.len()),
            );
            return;
        }
        if let Some((i, w)) = layers.iter().enumerate().find(|(_, w)| **w > width) {
            self.bad(
                &format!("{path}[{i}]"),
                format!("a width in {name} must be at most {width}, got {w}"),
            );
            return;
        }
        match param_count(layers) {
            Some(n) if n <= params => {}
            n => self.bad(
                path,
                format!(
                    "{name} has {} parameters; at most {params}",
                    n.map_or("more than 2^64".to_string(), |n| n.to_string())
                ),
            ),
        }
    }

    fn pct(&mut self, path: &str, v: Option<f64>) {
        if let Some(v) = v {
            if !(v > 0.0 && v < 100.0) {
                let key = path.rsplit('.').next().unwrap_or(path);
                self.bad(path, format!("{key} must be between 0 and 100, got {v}"));
            }
        }
    }

    fn remeasure(&mut self, path: &str, v: u32) {
        if v > MAX_REMEASURE {
            self.bad(
                path,
                format!("remeasure must be 0 to {MAX_REMEASURE} more attempts, got {v}"),
            );
        }
    }

    fn iters(&mut self, path: &str, v: u32) {
        if v == 0 {
            self.bad(path, "iterations must be at least 1".into());
        }
        if v > MAX_ITERATIONS {
            self.bad(
                path,
                format!("iterations must be at most {MAX_ITERATIONS}, got {v}"),
            );
        }
    }

    fn warmup(&mut self, path: &str, v: u32) {
        if v > MAX_ITERATIONS {
            self.bad(
                path,
                format!("warmup must be at most {MAX_ITERATIONS}, got {v}"),
            );
        }
    }
}

/// The key path of a collective's level at message size `key` (a key of its own: "1.5GiB"
/// holds a '.').
fn level_path(base: &str, field: &str, key: &str) -> KeyPath {
    let mut path = key_path(&format!("{base}.{field}"));
    path.push(Seg::Key(key.to_string()));
    path
}
