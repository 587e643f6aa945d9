//! Checks: one module per kind behind one trait, one registry.
//!
//! A check plans against the node (or says why it cannot run here), measures through a
//! [`Backend`], and evaluates its measurements against the suite's thresholds. Measuring and
//! evaluating are separate so that evaluation is a pure function of plain data.

pub mod arrivals;
pub mod baseline;
pub mod collective;
pub mod compute;
pub mod during;
pub mod fabric;
pub mod health;
pub mod host_bandwidth;
pub mod judge;
pub mod nccl_env;
pub mod network;
pub mod p2p_bandwidth;
pub mod p2p_latency;
pub mod topology;
pub mod training;
pub mod verify;
pub mod virtualization;

use crate::backend::Backend;
use crate::error::{HwError, InputError};
use crate::evidence::{CheckRecord, Fact, Finding, Metric};
use crate::inventory::Inventory;
use crate::suite::load::LoadedSuite;
use crate::suite::Suite;

/// What a check can see while it plans and evaluates.
pub struct Ctx<'a> {
    pub suite: &'a Suite,
    pub inventory: &'a Inventory,
    /// Records of the checks that ran before this one (collectives read the p2p results).
    pub earlier: &'a [CheckRecord],
    /// The node is a simulated one: its figures are computed, not measured.
    pub simulated: bool,
}

/// What a check measured.
#[derive(Debug, Default, Clone)]
pub struct Measured {
    pub metrics: Vec<Metric>,
    pub facts: Vec<Fact>,
}

impl Measured {
    /// Some copy or collective returned wrong data: a copy whose data check failed, or a
    /// collective size with a wrong element (or a count that cannot be read). Wrong data once is
    /// a failure, so such a measurement is never re-measured.
    pub fn wrong_data(&self) -> bool {
        use crate::evidence::{CopyData, FactValue};
        self.facts.iter().any(|f| match &f.value {
            FactValue::Copy(CopyData::Wrong) => true,
            FactValue::Elements { wrong, .. } => *wrong > 0,
            // A collective's count that is not a count proves nothing about the data.
            _ => f.name == "wrong_elements",
        })
    }

    /// Take out every figure that is not a measurement: a sample (or the median, min or max)
    /// that is NaN or infinite, or no sample at all. Each becomes an error finding that names
    /// the measurement (the node could not be measured there; a broken timer must not look like
    /// a slow link), so evidence never holds a number it could not read back.
    pub fn take_non_finite(&mut self) -> Vec<Finding> {
        let mut out = Vec::new();
        self.metrics.retain(|m| {
            let bad = m.samples.iter().position(|v| !v.is_finite());
            let what = match bad {
                Some(i) => format!(
                    "{} in sample {} of {}",
                    m.samples[i],
                    i + 1,
                    m.samples.len()
                ),
                None if m.samples.is_empty() => "no sample".to_string(),
                None if ![m.median, m.min, m.max].iter().all(|v| v.is_finite()) => {
                    "a median that is not a number".to_string()
                }
                None => return true,
            };
            let subject = m.subject.of_metric(&m.name).describe();
            out.push(
                judge::finding(
                    crate::evidence::Status::Error,
                    m.subject.of_metric(&m.name),
                    what.clone(),
                    "a finite number",
                    format!(
                        "{subject}: the {} measurement gave {what}, not a number: it could not \
                         be measured",
                        m.name
                    ),
                )
                .on(&m.name),
            );
            false
        });
        out
    }
}

/// Timings a backend returned for `what`: each must be a positive, finite time, or the figures
/// computed from them (bandwidth, throughput) would not be numbers. An error naming the
/// measurement and the sample otherwise.
pub fn positive_times(what: &str, unit: &str, times: &[f64]) -> Result<(), HwError> {
    match times.iter().position(|t| !(t.is_finite() && *t > 0.0)) {
        None => Ok(()),
        Some(i) => Err(HwError::Call {
            call: format!("timing {what}"),
            detail: format!(
                "sample {} of {} took {} {unit}, so no rate can be computed from it",
                i + 1,
                times.len(),
                times[i]
            ),
        }),
    }
}

/// Reports progress: (steps done, steps planned).
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize);

pub trait Check {
    /// Stable key, e.g. "host_bandwidth" or "collective.all_reduce".
    fn id(&self) -> String;
    /// The kind, e.g. "collective".
    fn kind(&self) -> &'static str;
    /// Human title.
    fn title(&self) -> String;
    /// Why the suite's settings for this check cannot run on a node of `gpus` GPUs (the key,
    /// and what to change): invalid input before the run. None for nearly every check.
    fn does_not_fit(&self, _gpus: usize) -> Option<(crate::config::KeyPath, String)> {
        None
    }
    /// What this check will do on this node, or why it cannot run here (a skip, not a failure).
    fn plan(&self, ctx: &Ctx) -> Result<Vec<String>, String>;
    /// Take the measurements. Hardware errors end this check (as an error), not the run.
    fn measure(
        &self,
        ctx: &Ctx,
        backend: &mut dyn Backend,
        progress: Progress,
    ) -> Result<Measured, HwError>;
    /// The most raw samples this check's measurements record on a node of `gpus` GPUs, and the
    /// suite key that sets how many (checks that record none: 0 and no key).
    fn samples(&self, gpus: usize) -> (u64, String);
    /// Judge the measurements against the suite's thresholds.
    fn evaluate(&self, ctx: &Ctx, m: &Measured) -> Vec<Finding>;
    /// How many more times the suite lets this check measure after a figure missed its floor
    /// (`remeasure`); 0 for checks that judge no noisy figure.
    fn remeasure(&self) -> u32 {
        0
    }
    /// Whether this check's skip leaves the suite's promise unkept (the run is then
    /// incomplete, never a pass): for a check asked for where it should be able to run (the
    /// fabric, asked with `--fabric` or enabled in the suite, but not measured because other
    /// nodes never came). Most checks' skips say "not here" of the node itself (no peer pairs
    /// on one GPU): kept.
    fn skip_is_unkept(&self) -> bool {
        false
    }
    /// Whether this check's measurements run on the GPUs, so that a process that started on
    /// one during the run would share what they measure ([`arrivals`]): every check but those
    /// that only read what the node is.
    fn runs_on_gpus(&self) -> bool {
        true
    }
}

/// The most raw samples a run records: each takes about 30 bytes of evidence, and the figures
/// and findings around them as much again on a large node, so that the evidence stays within
/// what `render`, `diff` and `[baseline]` read back (64 MiB).
pub const MAX_SAMPLES: u64 = 1_000_000;

/// Refuse, before anything runs, a suite whose evidence on a node of `gpus` GPUs could not be
/// read back: its iterations (or steps) times its GPUs, pairs or sizes record more than
/// [`MAX_SAMPLES`] samples. Located at the key that records the most.
pub fn check_evidence_size(loaded: &LoadedSuite, gpus: usize) -> Result<(), InputError> {
    // Each attempt a check may take records its samples again.
    let plan: Vec<(u64, String)> = from_suite(loaded)
        .iter()
        .map(|c| {
            let (n, key) = c.samples(gpus);
            (n.saturating_mul(1 + u64::from(c.remeasure())), key)
        })
        .collect();
    let total = plan.iter().fold(0u64, |t, (n, _)| t.saturating_add(*n));
    if total <= MAX_SAMPLES {
        return Ok(());
    }
    let (most, key) = plan
        .iter()
        .max_by_key(|(n, _)| *n)
        .cloned()
        .unwrap_or_default();
    Err(crate::config::error_at(
        &loaded.chain,
        &crate::config::key_path(&key),
        format!(
            "`{key}`: on this node of {gpus} GPUs the suite would record {total} samples \
             ({most} of them set by this key), more than the {MAX_SAMPLES} whose evidence \
             `render`, `diff` and `[baseline]` read back: lower it"
        ),
    ))
}

/// Refuse, before anything runs, a suite that cannot be run as stated on a node of `gpus`
/// GPUs: one whose evidence could not be read back ([`check_evidence_size`]), or a collective
/// whose whole sweep moves nothing over that many ranks (under 16 bytes a rank), which would
/// otherwise end the check as an error of the node (exit 3) for what is the suite's (exit 2).
pub fn check_suite_fits(loaded: &LoadedSuite, gpus: usize) -> Result<(), InputError> {
    check_evidence_size(loaded, gpus)?;
    for c in from_suite(loaded) {
        if let Some(why) = c.does_not_fit(gpus) {
            return Err(crate::config::error_at(&loaded.chain, &why.0, why.1));
        }
    }
    Ok(())
}

/// Peer checks need two GPUs: the GPU count, or why this node has no peer pairs to measure.
pub fn peer_pairs(ctx: &Ctx) -> Result<usize, String> {
    match ctx.inventory.gpus.len() {
        n if n >= 2 => Ok(n),
        n => Err(format!(
            "no peer pairs: the node has {n} GPU{}",
            if n == 1 { "" } else { "s" }
        )),
    }
}

/// What is read again after a check that ran on the GPUs, as findings of that check: the
/// processes that started on them ([`arrivals`]), and the XIDs they raised and the errors they
/// counted ([`during`], against the counters `watch` read last).
pub fn after_gpu_check(
    ctx: &Ctx,
    backend: &mut dyn Backend,
    watch: &mut during::Watch,
) -> Vec<Finding> {
    let mut out = arrivals::after_check(ctx, backend);
    out.extend(during::after_check(ctx, backend, watch));
    out
}

/// The plan of a check of peer pairs whose suite states bounds (`bounds`, as "read >= 335
/// GB/s", empty where it states none): the number of GPUs; on a node with fewer than two, a skip
/// of the plan where no bound is stated, and where one is, a plan that measures nothing and
/// then says, through [`no_peer_pairs`], that the bounds are not judged here (a promised
/// judgement that did not run: the run is partial, never a pass).
pub fn peer_plan(ctx: &Ctx, bounds: &[String]) -> Result<usize, String> {
    match peer_pairs(ctx) {
        Ok(n) => Ok(n),
        Err(why) if bounds.is_empty() => Err(why),
        Err(_) => Ok(ctx.inventory.gpus.len()),
    }
}

/// What a check of peer pairs says on a node with fewer than two GPUs whose suite states
/// `bounds` for them: not available here.
pub fn no_peer_pairs(ctx: &Ctx, bounds: &[String]) -> Vec<Finding> {
    let n = ctx.inventory.gpus.len();
    if n >= 2 || bounds.is_empty() {
        return vec![];
    }
    vec![judge::finding(
        crate::evidence::Status::Skip,
        crate::evidence::Subject::node(),
        "no peer pairs",
        bounds.join(", "),
        format!(
            "not available here: the node has {n} GPU{}, so no peer pair is held to the \
             suite's {}",
            if n == 1 { "" } else { "s" },
            bounds.join(", ")
        ),
    )]
}

/// The bounds a limit states, as "read >= 335 GB/s; read warns below 340 GB/s", for
/// [`peer_plan`].
pub fn stated_bounds(name: &str, unit: &str, l: &crate::suite::Limit) -> Vec<String> {
    let l = l.judging();
    let mut out = Vec::new();
    for (v, words) in [
        (l.fail_below, ">="),
        (l.warn_below, "warns below"),
        (l.fail_above, "<="),
        (l.warn_above, "warns above"),
    ] {
        if let Some(v) = v {
            out.push(format!("{name} {words} {} {unit}", crate::units::exact(v)));
        }
    }
    out
}

/// The checks a suite asks for, in the order they run: cheap reads first, then bandwidth,
/// collectives (which may compare with peer bandwidth), training, the network adapters (their
/// error counters read again after the traffic), and the comparison with the baseline last (it reads every check before it).
pub fn from_suite(loaded: &LoadedSuite) -> Vec<Box<dyn Check>> {
    let suite = &loaded.suite;
    let c = &suite.checks;
    let mut out: Vec<Box<dyn Check>> = Vec::new();
    // First: the nodes of a job start together, and meet before any of them is held up by
    // its own checks (a remeasure, a slow training run).
    if let Some(x) = c.fabric.as_ref().filter(|x| x.enabled) {
        out.push(Box::new(fabric::MultiNode(x.clone())));
    }
    if c.topology.as_ref().is_some_and(|x| x.enabled) {
        out.push(Box::new(topology::Topology));
    }
    if let Some(x) = c.virtualization.as_ref().filter(|x| x.enabled) {
        out.push(Box::new(virtualization::Virtualization(x.clone())));
    }
    if let Some(x) = c.health.as_ref().filter(|x| x.enabled) {
        out.push(Box::new(health::Health(x.clone())));
    }
    if let Some(x) = c.host_bandwidth.as_ref().filter(|x| x.enabled) {
        out.push(Box::new(host_bandwidth::HostBandwidth(x.clone())));
    }
    if let Some(x) = c.p2p_bandwidth.as_ref().filter(|x| x.enabled) {
        out.push(Box::new(p2p_bandwidth::P2pBandwidth(x.clone())));
    }
    if let Some(x) = c.p2p_latency.as_ref().filter(|x| x.enabled) {
        out.push(Box::new(p2p_latency::P2pLatency(x.clone())));
    }
    for op in crate::suite::CollectiveOp::ALL {
        if let Some(x) = c.collective.get(&op).filter(|x| x.enabled) {
            out.push(Box::new(collective::Collective { op, cfg: x.clone() }));
        }
    }
    if let Some(x) = c.compute.as_ref().filter(|x| x.enabled) {
        out.push(Box::new(compute::Compute(x.clone())));
    }
    if let Some(x) = c.training.as_ref().filter(|x| x.enabled) {
        out.push(Box::new(training::Training(x.clone())));
    }
    // After the traffic: its error counters are read again.
    if let Some(x) = c.network.as_ref().filter(|x| x.enabled) {
        out.push(Box::new(network::Network(x.clone())));
    }
    if let (Some(cfg), Some(b)) = (&suite.baseline, &loaded.baseline) {
        out.push(Box::new(baseline::BaselineCheck {
            path: b.path.clone(),
            evidence: b.evidence.clone(),
            max_regression_pct: cfg.max_regression_pct,
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{Status, Subject};

    #[test]
    fn a_time_that_is_not_positive_is_an_error_naming_the_measurement() {
        assert!(positive_times("x", "us", &[1.0, 2.5]).is_ok());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = positive_times("all_reduce at 8 B", "us", &[3.0, bad])
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("timing all_reduce at 8 B failed: sample 2 of 2 took"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_figure_that_is_not_a_number_becomes_an_error_finding() {
        let mut m = Measured::default();
        m.metrics.push(Metric::new(
            "h2d",
            Subject::gpu(0),
            "GB/s",
            vec![50.0, 51.0],
        ));
        m.metrics.push(Metric::new(
            "h2d",
            Subject::gpu(1),
            "GB/s",
            vec![50.0, f64::NAN],
        ));
        m.metrics
            .push(Metric::new("h2d", Subject::gpu(2), "GB/s", vec![]));
        // Finite samples whose stored median is not a number (an edited or damaged record).
        let mut odd = Metric::new("h2d", Subject::gpu(3), "GB/s", vec![50.0]);
        odd.median = f64::INFINITY;
        m.metrics.push(odd);
        let f = m.take_non_finite();
        let found: Vec<(Subject, &str)> = f
            .iter()
            .map(|x| (x.subject.clone(), x.found.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                (Subject::gpu(1), "NaN in sample 2 of 2"),
                (Subject::gpu(2), "no sample"),
                (Subject::gpu(3), "a median that is not a number"),
            ]
        );
        assert!(f.iter().all(|x| x.status == Status::Error));
        // Only the measurable figure is left to judge.
        assert_eq!(m.metrics.len(), 1);
        assert_eq!(m.metrics[0].subject, Subject::gpu(0));
    }

    #[test]
    fn peer_checks_need_two_gpus() {
        let suite = crate::suite::load::load("h100-sxm-8").unwrap().suite;
        let mut inv = crate::testutil::simulated("h100-sxm-8", &[]).node;
        let ctx = crate::testutil::ctx(&suite, &inv);
        assert_eq!(peer_pairs(&ctx), Ok(8));
        inv.gpus.truncate(2);
        assert_eq!(peer_pairs(&crate::testutil::ctx(&suite, &inv)), Ok(2));
        inv.gpus.truncate(1);
        assert_eq!(
            peer_pairs(&crate::testutil::ctx(&suite, &inv)),
            Err("no peer pairs: the node has 1 GPU".to_string())
        );
        inv.gpus.clear();
        assert_eq!(
            peer_pairs(&crate::testutil::ctx(&suite, &inv)),
            Err("no peer pairs: the node has 0 GPUs".to_string())
        );
    }

    #[test]
    fn every_shipped_suite_fits_the_evidence_limit_on_the_largest_node() {
        for (name, _) in crate::suite::load::EMBEDDED {
            let loaded = crate::suite::load::load(name).unwrap();
            check_evidence_size(&loaded, crate::suite::MAX_GPUS)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    /// A collective whose whole sweep moves nothing over the node's ranks is the suite's
    /// mistake, refused before the run at its key (exit 2), never the node's error (exit 3).
    #[test]
    fn a_sweep_that_moves_nothing_on_this_node_is_refused_at_its_key() {
        // The suite `name` whose all_to_all sweeps min..max.
        let sweep = |name: &str, min: &str, max: &str| {
            let src = crate::config::Source {
                name: format!("{name}.toml"),
                text: format!(
                    "format_version = 1\nname = \"{name}\"\n[checks.collective.all_to_all]\n\
                     min_size = \"{min}\"\nmax_size = \"{max}\"\n"
                ),
            };
            crate::suite::load::load_source(src).unwrap()
        };
        let loaded = sweep("tiny", "64B", "64B");
        // 64 bytes over 2 or 4 ranks moves 16 bytes a rank or more; over 8 ranks, 8.
        for gpus in [0, 1, 2, 4] {
            assert!(check_suite_fits(&loaded, gpus).is_ok(), "{gpus}");
        }
        // One rank's data check needs a size that moves something too: 8 B moves nothing.
        let one = sweep("one", "8B", "8B");
        let e = check_suite_fits(&one, 1).unwrap_err().to_string();
        assert!(e.contains("moves data over 1 rank (under"), "{e}");
        assert!(e.ends_with("raise max_size to at least 16 B"), "{e}");
        let e = check_suite_fits(&loaded, 8).unwrap_err().to_string();
        assert_eq!(
            crate::error::Error::Input(check_suite_fits(&loaded, 8).unwrap_err()).exit_code(),
            2
        );
        assert!(
            e.starts_with(
                "tiny.toml:5:1: checks.collective.all_to_all.max_size: no size of the sweep (64 B \
                 to 64 B) moves data over 8 ranks"
            ),
            "{e}"
        );
        assert!(e.ends_with("raise max_size to at least 128 B"), "{e}");
        // The size advised is one the sweep reaches (min_size x factor^k): from 3 B, 192 B.
        let loaded = sweep("odd", "3B", "100B");
        let e = check_suite_fits(&loaded, 8).unwrap_err().to_string();
        assert!(e.ends_with("raise max_size to at least 192 B"), "{e}");
        // Every shipped suite fits the node it is for.
        for (name, _) in crate::suite::load::EMBEDDED {
            let loaded = crate::suite::load::load(name).unwrap();
            let n = loaded.suite.node.gpu_count.unwrap_or(1);
            check_suite_fits(&loaded, n).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn a_suite_whose_evidence_could_not_be_read_back_is_refused_at_its_key() {
        let src = crate::config::Source {
            name: "big.toml".into(),
            text: "format_version = 1\nname = \"big\"\n[checks.p2p_latency]\niterations = 10\n\
                   [checks.p2p_bandwidth]\niterations = 100000\n"
                .into(),
        };
        let loaded = crate::suite::load::load_source(src).unwrap();
        // One GPU has no pairs: nothing is recorded.
        assert!(check_evidence_size(&loaded, 1).is_ok());
        // 8 GPUs: (56 ordered pairs x read and write + 28 pairs both ways) x 100,000 samples.
        let e = check_evidence_size(&loaded, 8).unwrap_err().to_string();
        assert!(
            e.starts_with("big.toml:6:1: `checks.p2p_bandwidth.iterations`"),
            "{e}"
        );
        assert!(e.contains("would record 14000560 samples"), "{e}");
    }

    #[test]
    fn the_evidence_limit_counts_every_attempt_a_check_may_take() {
        let load = |extra: &str| {
            crate::suite::load::load_source(crate::config::Source {
                name: "big.toml".into(),
                text: format!(
                    "format_version = 1\nname = \"big\"\n[checks.p2p_bandwidth]\n\
                     iterations = 4000\n{extra}"
                ),
            })
            .unwrap()
        };
        // 8 GPUs: (56 x 2 + 28) figures x 4,000 samples = 560,000: fits once.
        assert!(check_evidence_size(&load(""), 8).is_ok());
        let e = check_evidence_size(&load("remeasure = 1\n"), 8)
            .unwrap_err()
            .to_string();
        assert!(e.contains("would record 1120000 samples"), "{e}");
    }

    #[test]
    fn figures_that_are_not_numbers_become_errors_naming_the_measurement() {
        let mut m = Measured {
            metrics: vec![
                Metric::new("h2d", Subject::gpu(0), "GB/s", vec![55.0, 54.0]),
                Metric::new("h2d", Subject::gpu(1), "GB/s", vec![55.0, f64::NAN]),
                Metric::new("busbw", Subject::size(8), "GB/s", vec![f64::INFINITY]),
                Metric::new("loss", Subject::node(), "", vec![]),
            ],
            facts: vec![],
        };
        let found = m.take_non_finite();
        assert_eq!(m.metrics.len(), 1, "only the finite figure stays");
        assert_eq!(m.metrics[0].subject, Subject::gpu(0));
        let reasons: Vec<&str> = found.iter().map(|f| f.reason.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "GPU 1: the h2d measurement gave NaN in sample 2 of 2, not a number: it could not be measured",
                "8 B: the busbw measurement gave inf in sample 1 of 1, not a number: it could not be measured",
                "node: the loss measurement gave no sample, not a number: it could not be measured",
            ]
        );
        assert!(found.iter().all(|f| f.status == Status::Error));
        assert_eq!(found[0].metric.as_deref(), Some("h2d"));
    }

    /// The verdict counts the checks a suite promises from `Suite::promised_checks`; it must name
    /// exactly the checks that `from_suite` runs, in the same order.
    #[test]
    fn promised_checks_are_the_checks_that_run() {
        for (name, _) in crate::suite::load::EMBEDDED {
            let loaded = crate::suite::load::load(name).expect("embedded suite loads");
            let ran: Vec<String> = from_suite(&loaded).iter().map(|c| c.id()).collect();
            assert_eq!(ran, loaded.suite.promised_checks(), "suite {name}");
            assert!(!ran.is_empty(), "suite {name}");
        }
    }

    /// The stable key, kind and title of each check of a full suite, what its plan says, and the
    /// samples it records: the cap of `check_evidence_size` counts exactly what a simulated run
    /// of the suite records (the simulated node measures everything the suite asks for), and the
    /// checks that judge no noisy figure are never measured again.
    #[test]
    fn every_check_names_itself_says_what_it_will_do_and_counts_what_it_records() {
        let loaded = crate::suite::load::load("h100-sxm-8").unwrap();
        let ev = crate::testutil::simulated("h100-sxm-8", &[]);
        let checks = from_suite(&loaded);
        #[rustfmt::skip]
        let want: [(&str, &str, &str, &str, &str, u32); 14] = [
            ("topology", "topology", "Topology", "8 GPUs and 28 pairs", "", 0),
            ("virtualization", "virtualization", "Virtualization and peer access", "peer access of 28 pairs", "", 0),
            ("health", "health", "Node health", "throttling on 8 GPUs", "", 0),
            ("host_bandwidth", "host_bandwidth", "Host <-> device bandwidth", "H2D on all 8 GPUs", "checks.host_bandwidth.iterations", 0),
            ("p2p_bandwidth", "p2p_bandwidth", "Peer-to-peer bandwidth", "56 ordered pairs", "checks.p2p_bandwidth.iterations", 0),
            ("p2p_latency", "p2p_latency", "Peer-to-peer latency", "56 ordered pairs x 1000", "checks.p2p_latency.iterations", 0),
            ("collective.all_reduce", "collective", "NCCL all_reduce", "31 sizes", "checks.collective.all_reduce.iterations", 2),
            ("collective.all_gather", "collective", "NCCL all_gather", "31 sizes", "checks.collective.all_gather.iterations", 0),
            ("collective.reduce_scatter", "collective", "NCCL reduce_scatter", "31 sizes", "checks.collective.reduce_scatter.iterations", 0),
            ("collective.broadcast", "collective", "NCCL broadcast", "31 sizes", "checks.collective.broadcast.iterations", 0),
            ("collective.all_to_all", "collective", "NCCL all_to_all", "30 sizes", "checks.collective.all_to_all.iterations", 0),
            ("compute", "compute", "GPU compute (GEMM throughput)", "8 GPUs x fp32, tf32, bf16, fp8 GEMM 8192x8192x8192", "checks.compute.iterations", 0),
            ("training", "training", "Reference training run", "(75.6M parameters, 302 MB of fp32 gradients a step), batch 4096 per GPU on 8 GPUs, 100 steps", "checks.training.steps", 0),
            ("network", "network", "Network adapters (RDMA NICs, GPUDirect RDMA, error counters)", "8 RDMA NICs of the fabric", "", 0),
        ];
        assert_eq!(checks.len(), want.len());
        assert_eq!(ev.checks.len(), want.len());
        for ((c, rec), (id, kind, title, says, key, again)) in
            checks.iter().zip(&ev.checks).zip(want)
        {
            assert_eq!(
                (c.id().as_str(), c.kind(), c.title().as_str()),
                (id, kind, title)
            );
            assert_eq!((rec.id.as_str(), rec.kind.as_str()), (id, kind));
            assert!(
                rec.plan.iter().any(|l| l.contains(says)) && rec.plan.iter().all(|l| !l.is_empty()),
                "{id}: {:?}",
                rec.plan
            );
            let recorded: usize = rec.metrics.iter().map(|m| m.samples.len()).sum();
            assert_eq!(c.samples(8), (recorded as u64, key.to_string()), "{id}");
            assert_eq!(c.remeasure(), again, "{id}");
        }
        // The count follows the node: a 4-GPU box records 12 ordered pairs' worth. It has no
        // NVLS, so all_reduce is measured once, not twice as the cap allows for.
        // A one-GPU VM has no pair and no "all GPUs at once".
        for node in ["l40s-pcie-4", "h200-vm-1"] {
            let small = crate::testutil::simulated(node, &[]);
            let suite = crate::suite::load::load(node).unwrap();
            let gpus = small.node.gpus.len();
            for (c, rec) in from_suite(&suite).iter().zip(&small.checks) {
                let recorded: usize = rec.metrics.iter().map(|m| m.samples.len()).sum();
                let passes = if rec.id == "collective.all_reduce" {
                    2
                } else {
                    1
                };
                // One GPU has no scaling efficiency to record (the cap counts it).
                let unused = u64::from(rec.id == "training" && gpus == 1);
                assert_eq!(
                    c.samples(gpus).0,
                    passes * recorded as u64 + unused,
                    "{node} {}",
                    rec.id
                );
                if gpus == 1 {
                    assert!(
                        !rec.plan.iter().any(|l| l.contains("all 1 GPUs")),
                        "{node}: {:?}",
                        rec.plan
                    );
                    assert!(!rec.metrics.iter().any(|m| m.name == "all_gpus_h2d"));
                }
                if c.kind() == "collective" {
                    let one = rec.plan.iter().any(|l| l.starts_with("one rank"));
                    assert_eq!(one, gpus == 1, "{node}: {:?}", rec.plan);
                }
            }
        }
    }

    /// The checks that judge noisy figures are measured again as often as their suite says.
    #[test]
    fn the_noisy_checks_measure_again_as_often_as_the_suite_says() {
        let cfg = "remeasure = 3";
        assert_eq!(
            host_bandwidth::HostBandwidth(toml::from_str(cfg).unwrap()).remeasure(),
            3
        );
        assert_eq!(
            p2p_bandwidth::P2pBandwidth(toml::from_str(cfg).unwrap()).remeasure(),
            3
        );
        assert_eq!(
            p2p_latency::P2pLatency(toml::from_str(cfg).unwrap()).remeasure(),
            3
        );
        let c = collective::Collective {
            op: crate::suite::CollectiveOp::AllGather,
            cfg: toml::from_str(cfg).unwrap(),
        };
        assert_eq!(c.remeasure(), 3);
    }

    /// `[baseline]` plans only against a baseline that holds figures, and says which and how
    /// strictly it compares.
    #[test]
    fn the_baseline_check_says_what_it_compares_with_or_why_it_cannot() {
        let ev = crate::testutil::simulated("h200-vm-1", &[]);
        let check = baseline::BaselineCheck {
            path: "/srv/base/evidence.json".into(),
            evidence: ev.clone(),
            max_regression_pct: 7.5,
        };
        assert_eq!(
            (check.id().as_str(), check.kind(), check.title().as_str()),
            ("baseline", "baseline", "Regression against the baseline")
        );
        assert_eq!(
            (check.samples(8), check.remeasure()),
            ((0, String::new()), 0)
        );
        let suite = crate::suite::load::load("h200-vm-1").unwrap().suite;
        let ctx = crate::testutil::ctx(&suite, &ev.node);
        let plan = check.plan(&ctx).unwrap();
        assert_eq!(plan.len(), 2);
        assert!(
            plan[0].starts_with("baseline /srv/base/evidence.json: suite "),
            "{plan:?}"
        );
        assert!(plan[0].ends_with(" [SIMULATED]"), "{plan:?}");
        assert!(plan[1].contains("worse by more than 7.5%"), "{plan:?}");
        let mut empty = ev.clone();
        for c in &mut empty.checks {
            c.metrics.clear();
        }
        let none = baseline::BaselineCheck {
            evidence: empty,
            ..check
        };
        // (Refused at load; were one to get here, nothing compared is a promise not kept.)
        assert!(none.plan(&ctx).is_ok());
        let f = none.evaluate(&ctx, &Measured::default());
        assert!(
            f.iter()
                .any(|f| f.status == crate::evidence::Status::Skip && !f.info),
            "{f:?}"
        );
        assert!(
            f.iter().all(|f| f.status != crate::evidence::Status::Pass),
            "{f:?}"
        );
    }

    /// Each check reports its progress one step at a time, up to the total it announced, and
    /// a collective records its rank count once.
    #[test]
    fn every_check_reports_each_step_of_its_progress_once() {
        use crate::backend::sim::{self, SimBackend};
        for node in ["h100-sxm-8", "l40s-pcie-4", "h200-vm-1"] {
            let loaded = crate::suite::load::load(node).unwrap();
            let mut b = SimBackend::new(sim::load_node(node).unwrap(), vec![], 1).unwrap();
            let inv = b.inventory().unwrap();
            let ctx = crate::testutil::ctx(&loaded.suite, &inv);
            for c in from_suite(&loaded) {
                // A check that cannot run here (peer checks on one GPU) is never measured.
                if c.plan(&ctx).is_err() {
                    continue;
                }
                let mut seen = Vec::new();
                let m = c
                    .measure(&ctx, &mut b, &mut |d, t| seen.push((d, t)))
                    .unwrap();
                let total = seen.len();
                assert!(total > 0, "{node} {}", c.id());
                let want: Vec<(usize, usize)> = (1..=total).map(|d| (d, total)).collect();
                assert_eq!(seen, want, "{node} {}", c.id());
                if c.kind() == "collective" {
                    let ranks: Vec<&Fact> = m.facts.iter().filter(|f| f.name == "ranks").collect();
                    assert_eq!(ranks.len(), 1, "{node} {}", c.id());
                    assert_eq!(
                        ranks[0].value,
                        crate::evidence::FactValue::Count(inv.gpus.len() as u64)
                    );
                }
            }
        }
    }
}
