//! What each GPU computes: a dense square GEMM per precision through cuBLAS (fp32 with TF32
//! off, TF32, bf16, fp8), timed by CUDA events, its product checked against the exact one
//! ([`crate::backend::gemm_data`]). Each GPU's median is judged against the suite's floor, against
//! the node's median (the slow but healthy-looking GPU: DCGM's longest level once passed a GPU
//! at a third of its peers' rate) and the node against its typical figure.
//!
//! A precision the GPU does not have (fp8 before compute capability 8.9), or that this backend
//! cannot run, is not measured: where the suite sets a limit or typical figure for it, that is
//! "not available here" and the pass is partial; where it does not, a note says so.
//!
//! A GEMM that fails (a driver or library error, a deadline missed) is an error of that GPU and
//! precision, with the call's words; the other precisions are still measured and shown (a
//! broken fp8 path must not erase the node's bf16 figures), and the check's status is an error.

use super::judge::{finding, fmt_num, judge, outliers, typical};
use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::error::HwError;
use crate::evidence::{Fact, FactValue, Finding, Metric, Status, Subject};
use crate::suite::{ComputeCheck, GemmPrecision};

pub struct Compute(pub ComputeCheck);

/// The unit of every figure of this check.
pub const UNIT: &str = "TFLOP/s";

/// "bf16 GEMM": a precision's figure, for people.
pub fn human(p: GemmPrecision) -> &'static str {
    match p {
        GemmPrecision::Fp32 => "fp32 GEMM (TF32 off)",
        GemmPrecision::Tf32 => "TF32 GEMM",
        GemmPrecision::Bf16 => "bf16 GEMM",
        GemmPrecision::Fp8 => "fp8 GEMM",
    }
}

/// The fact holding a precision's data check on one GPU.
pub fn data_fact(p: GemmPrecision) -> String {
    format!("{}_wrong_elements", p.name())
}

/// A precision's figure at twice the size, where the suite asks for the plateau to be shown.
pub fn double_size_metric(p: GemmPrecision) -> String {
    format!("{}_double_size", p.metric())
}

/// The fact saying why a precision was not measured at twice the size on one GPU, where it was
/// at the suite's size.
pub fn double_size_unavailable_fact(p: GemmPrecision) -> String {
    format!("{}_double_size_unavailable", p.name())
}

/// The fact saying why a precision was not measured on one GPU.
pub fn unavailable_fact(p: GemmPrecision) -> String {
    format!("{}_unavailable", p.name())
}

/// The fact holding the error of a precision's GEMM on one GPU.
pub fn error_fact(p: GemmPrecision) -> String {
    format!("{}_error", p.name())
}

/// Where a GEMM's error is a missed deadline: what the GEMMs after it say instead of running.
fn hang(e: &HwError, g: usize, p: GemmPrecision) -> Option<String> {
    matches!(e, HwError::Timeout { .. }).then(|| {
        format!(
            "not run: an earlier GEMM did not finish (GPU {g}, {}), and GPUs that may still run \
             it cannot be used again in this process",
            human(p)
        )
    })
}

impl Compute {
    /// Whether the suite promises a judgement of this precision's figure: a limit or a typical
    /// figure of its own. The check-wide outlier rule applies to whatever was measured; alone it
    /// promises no precision (an A100 has no fp8 to compare, and that is no missing reading).
    fn judged(&self, p: GemmPrecision) -> bool {
        let l = self.0.limit(p);
        !l.judging().is_empty() || l.typical.is_some()
    }
}

impl Check for Compute {
    fn id(&self) -> String {
        "compute".into()
    }
    fn kind(&self) -> &'static str {
        "compute"
    }
    fn title(&self) -> String {
        "GPU compute (GEMM throughput)".into()
    }

    fn plan(&self, ctx: &Ctx) -> Result<Vec<String>, String> {
        let n = ctx.inventory.gpus.len();
        if n == 0 {
            return Err("no GPUs".into());
        }
        let c = &self.0;
        let names: Vec<&str> = c.precisions.iter().map(|p| p.name()).collect();
        Ok([format!(
            "{n} GPUs x {} GEMM {s}x{s}x{s}: {} warm-up + {} timed, product checked \
             (operands: {})",
            names.join(", "),
            c.warmup,
            c.iterations,
            operands(c),
            s = c.size
        )]
        .into_iter()
        .chain(c.plateau().map(|pct| {
            format!(
                "each GEMM at {d}x{d}x{d} too, its product checked: at most {pct}% faster than \
                 at {s} (the plateau)",
                d = c.size * 2,
                s = c.size
            )
        }))
        .chain(c.sustained.as_ref().map(|l| {
            format!(
                "then every GPU at once under {} GEMMs for {} s, read every {} ms",
                l.precision, l.seconds, l.sample_ms
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
        let c = &self.0;
        let n = ctx.inventory.gpus.len();
        let total = n * c.precisions.len();
        let mut m = Measured::default();
        // Set once a GEMM missed its deadline: the GPUs cannot be used again in this process
        // (the backend refuses every later call), so nothing more is asked of them, and what
        // was not measured says so in a line, not in a copy of the backend's refusal each.
        let mut hung: Option<String> = None;
        for g in 0..n {
            for (k, &p) in c.precisions.iter().enumerate() {
                let step = g * c.precisions.len() + k + 1;
                if let Some(h) = &hung {
                    m.facts.push(Fact::new(
                        error_fact(p),
                        Subject::gpu(g),
                        FactValue::Text(h.clone()),
                    ));
                    progress(step, total);
                    continue;
                }
                match b.gemm(g, p, c.size, c.warmup, c.iterations) {
                    Ok(s) => {
                        m.metrics.push(
                            Metric::new(p.metric(), Subject::gpu(g), UNIT, s.tflops)
                                .timed(s.timing),
                        );
                        let (mut wrong, mut checked) = (s.wrong_elements, s.elements_checked);
                        if c.plateau().is_some() {
                            // The same GEMM at twice the size: where it is faster still, the
                            // figure above is not the GPU's plateau. Its product is checked as
                            // well, counted in the same data check.
                            // One the backend cannot run (no algorithm for the shape, too large
                            // for it) leaves this GPU out of the plateau, with the reason said,
                            // and the figures above stand.
                            match b.gemm(g, p, c.size * 2, c.warmup, c.iterations) {
                                Ok(h) => {
                                    m.metrics.push(
                                        Metric::new(
                                            &double_size_metric(p),
                                            Subject::gpu(g),
                                            UNIT,
                                            h.tflops,
                                        )
                                        .timed(h.timing),
                                    );
                                    wrong = wrong.saturating_add(h.wrong_elements);
                                    checked = checked.saturating_add(h.elements_checked);
                                }
                                // Said, so that the plateau names the GPU it went without.
                                Err(HwError::NotSupported(why)) => m.facts.push(Fact::new(
                                    double_size_unavailable_fact(p),
                                    Subject::gpu(g),
                                    FactValue::Text(why),
                                )),
                                Err(e) => {
                                    hung = hang(&e, g, p);
                                    m.facts.push(Fact::new(
                                        error_fact(p),
                                        Subject::gpu(g),
                                        FactValue::Text(format!("at {}: {e}", c.size * 2)),
                                    ))
                                }
                            }
                        }
                        m.facts.push(Fact::new(
                            data_fact(p),
                            Subject::gpu(g),
                            FactValue::Elements { wrong, checked },
                        ));
                    }
                    // The GPU or the backend has no such GEMM: said, never a silent gap.
                    Err(HwError::NotSupported(why)) => m.facts.push(Fact::new(
                        unavailable_fact(p),
                        Subject::gpu(g),
                        FactValue::Text(why),
                    )),
                    // This GPU and precision could not be measured: said as an error, and the
                    // rest measured (a GEMM that missed its deadline leaves the backend refusing
                    // at once, so nothing waits twice).
                    Err(e) => {
                        hung = hang(&e, g, p);
                        m.facts.push(Fact::new(
                            error_fact(p),
                            Subject::gpu(g),
                            FactValue::Text(e.to_string()),
                        ))
                    }
                }
                progress(step, total);
            }
        }
        // What the GEMMs multiplied: the rate depends on the data (gemm_data).
        m.facts.push(Fact::new(
            OPERANDS,
            Subject::node(),
            FactValue::Text(operands(c)),
        ));
        if let (Some(_), Some(h)) = (&c.sustained, &hung) {
            m.facts.push(Fact::new(
                sustained::ERROR,
                Subject::node(),
                FactValue::Text(h.clone()),
            ));
        } else if let Some(l) = &c.sustained {
            match b.sustained_gemm(l.precision, c.size, l.seconds, l.sample_ms) {
                Ok(runs) => {
                    for (g, run) in runs.into_iter().enumerate() {
                        record_sustained(&mut m, g, run);
                    }
                }
                Err(HwError::NotSupported(why)) => m.facts.push(Fact::new(
                    sustained::UNAVAILABLE,
                    Subject::node(),
                    FactValue::Text(why),
                )),
                // An error of the load (or of the GPU since an earlier GEMM failed): said as
                // such, and the figures above kept.
                Err(e) => m.facts.push(Fact::new(
                    sustained::ERROR,
                    Subject::node(),
                    FactValue::Text(e.to_string()),
                )),
            }
        }
        Ok(m)
    }

    fn samples(&self, gpus: usize) -> (u64, String) {
        let sizes = if self.0.plateau().is_some() { 2 } else { 1 };
        let burst =
            gpus as u64 * self.0.precisions.len() as u64 * u64::from(self.0.iterations) * sizes;
        // Four readings a window (rate, clock, power, temperature) and the power limit, on
        // every GPU.
        let load = self.0.sustained.as_ref().map_or(0, |l| {
            let windows = (l.seconds * 1000.0 / f64::from(l.sample_ms.max(1))).ceil() as u64;
            gpus as u64 * (4 * windows + 1)
        });
        if load > burst {
            (burst + load, "checks.compute.sustained.sample_ms".into())
        } else {
            (burst + load, "checks.compute.iterations".into())
        }
    }

    fn remeasure(&self) -> u32 {
        self.0.remeasure
    }

    fn evaluate(&self, ctx: &Ctx, m: &Measured) -> Vec<Finding> {
        let c = &self.0;
        let mut out = Vec::new();
        // A figure of no precision this check measures is a bug between measuring and judging.
        let sustained_figures = [
            sustained::RATE,
            sustained::CLOCK,
            sustained::POWER,
            sustained::TEMPERATURE,
            sustained::POWER_LIMIT,
        ];
        for x in &m.metrics {
            let known = c.precisions.iter().any(|p| {
                p.metric() == x.name || (c.plateau().is_some() && double_size_metric(*p) == x.name)
            }) || (c.sustained.is_some()
                && sustained_figures.contains(&x.name.as_str()));
            if !known {
                out.push(
                    finding(
                        Status::Error,
                        x.subject.clone(),
                        format!("unknown figure '{}'", x.name),
                        "a figure of this check",
                        format!(
                            "{}: compute figure '{}' is not one of the precisions this check measures",
                            x.subject.describe(),
                            x.name
                        ),
                    )
                    .on(&x.name),
                );
            }
        }
        let gpus = ctx.inventory.gpus.len();
        let mut checked = 0u64;
        let mut gemms = 0usize;
        let mut data_good = true;
        for &p in &c.precisions {
            let what = human(p);
            let mut items: Vec<(Subject, f64)> = Vec::new();
            for g in 0..gpus {
                let who = Subject::gpu(g);
                let failed = m
                    .facts
                    .iter()
                    .find(|f| f.name == error_fact(p) && f.subject == who);
                if let Some(f) = failed {
                    out.push(
                        finding(
                            Status::Error,
                            who.clone(),
                            "could not measure",
                            format!("a {what} figure"),
                            format!(
                                "{}: {what} could not be measured: {}",
                                who.describe(),
                                f.value.describe()
                            ),
                        )
                        .on(p.metric()),
                    );
                }
                if let Some(f) = m
                    .facts
                    .iter()
                    .find(|f| f.name == unavailable_fact(p) && f.subject == who)
                {
                    let why = f.value.describe();
                    let judged = self.judged(p);
                    let mut x = finding(
                        Status::Skip,
                        who.clone(),
                        "not available here",
                        if judged {
                            "a figure to judge"
                        } else {
                            "not judged by this suite"
                        },
                        format!("not available here: {what} on {}: {why}", who.describe()),
                    )
                    .on(p.metric());
                    // Not promised by the suite: a note, which no coverage counts.
                    x.info = !judged;
                    out.push(x);
                    continue;
                }
                let Some(metric) = m
                    .metrics
                    .iter()
                    .find(|x| x.name == p.metric() && x.subject == who)
                else {
                    // A GEMM that failed has said so above.
                    if failed.is_none() {
                        out.push(
                            finding(
                                Status::Error,
                                who.clone(),
                                "no figure",
                                format!("a {what} figure"),
                                format!("{}: {what} was not measured", who.describe()),
                            )
                            .on(p.metric()),
                        );
                    }
                    continue;
                };
                items.push((who.clone(), metric.median));
                // The product, on every GPU and precision: wrong data is a failure whether
                // or not the suite judges the figure.
                let fact = m
                    .facts
                    .iter()
                    .find(|f| f.name == data_fact(p) && f.subject == who);
                match data_check(&who, what, p.metric(), fact.map(|f| &f.value)) {
                    Ok(t) => {
                        checked += t;
                        // The data check covers the GEMM at twice the size too, where it ran.
                        let double = m
                            .metrics
                            .iter()
                            .any(|x| x.name == double_size_metric(p) && x.subject == who);
                        gemms += if double { 2 } else { 1 };
                    }
                    Err(f) => {
                        data_good = false;
                        out.push(*f);
                    }
                }
            }
            let limit = c.limit(p);
            for (who, v) in &items {
                if let Some(f) = judge(who, what, *v, UNIT, limit) {
                    out.push(f.on(p.metric()));
                }
            }
            if let Some(pct) = c.outlier_pct {
                out.extend(
                    outliers(&items, pct, true, what, UNIT)
                        .into_iter()
                        .map(|f| f.on(p.metric())),
                );
            }
            let values: Vec<f64> = items.iter().map(|x| x.1).collect();
            if let Some(f) = typical(&values, limit, true, what, UNIT) {
                out.push(f.on(p.metric()));
            }
            if let Some(pct) = c.plateau() {
                out.extend(plateau(p, c.size, pct, &items, m));
            }
        }
        if c.plateau_pct.is_some_and(|p| p > 0.0) && c.plateau().is_none() {
            out.push(
                finding(
                    Status::Skip,
                    Subject::node(),
                    "not shown",
                    "a larger size to compare",
                    format!(
                        "the plateau is not shown: size {} is the largest this check takes, so \
                         there is no larger GEMM to compare it with",
                        c.size
                    ),
                )
                .informational(),
            );
        }
        if let Some(l) = &c.sustained {
            out.extend(evaluate_sustained(l, c.outlier_pct, gpus, m));
        }
        if data_good && gemms > 0 {
            out.push(finding(
                Status::Pass,
                Subject::node(),
                "0 wrong elements",
                "0 wrong elements",
                format!(
                    "every product exact: {checked} elements checked over {gemms} GEMM measurements"
                ),
            ));
        }
        out
    }
}

/// Whether `size` is the plateau of precision `p`: the median GPU's rate at twice the size
/// against its rate at `size` (`items`: each GPU's rate at `size`). At most `pct` percent faster
/// there, a pass (slower too: a longer GEMM that heats or meets its power limit says nothing
/// against `size`); faster than that, a warning: the rate still rises with the size, and the
/// figures are below the GPU's best. GPUs without a figure at twice the size are left out, and
/// each is named: one the backend could not run there is "not available here" (a note: the
/// median GPU decides), one whose GEMM failed there has its error already, and one with no word
/// at all is an error. None at all is an error: the plateau the suite asked for was not shown.
fn plateau(
    p: GemmPrecision,
    size: u64,
    pct: f64,
    items: &[(Subject, f64)],
    m: &Measured,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if items.is_empty() {
        return out;
    }
    let what = human(p);
    let double = size * 2;
    let metric = double_size_metric(p);
    let fact = |name: &str, who: &Subject| {
        m.facts
            .iter()
            .find(|f| f.name == name && f.subject == *who)
            .map(|f| f.value.describe())
    };
    let mut ratios: Vec<f64> = Vec::new();
    for (who, at_size) in items {
        let Some(d) = m
            .metrics
            .iter()
            .find(|x| x.name == metric && x.subject == *who)
        else {
            if let Some(why) = fact(&double_size_unavailable_fact(p), who) {
                out.push(
                    finding(
                        Status::Skip,
                        who.clone(),
                        "not available here",
                        format!("a {what} figure at {double}"),
                        format!(
                            "not available here: {what} on {} at {double}: {why}; the plateau \
                             is judged without it",
                            who.describe()
                        ),
                    )
                    .on(&metric)
                    .informational(),
                );
            } else if fact(&error_fact(p), who).is_none() {
                out.push(
                    finding(
                        Status::Error,
                        who.clone(),
                        "no figure",
                        format!("a {what} figure at {double}"),
                        format!("{}: {what} was not measured at {double}", who.describe()),
                    )
                    .on(&metric),
                );
            }
            continue;
        };
        let d = d.median;
        if *at_size > 0.0 && at_size.is_finite() && d.is_finite() {
            ratios.push((d - at_size) / at_size * 100.0);
        }
    }
    let expected = format!("{double} at most {pct}% faster than {size}");
    if ratios.is_empty() {
        out.push(
            finding(
                Status::Error,
                Subject::node(),
                format!("no figure at {double}"),
                expected,
                format!(
                    "{what}: not measured at {double}, so {size} was not shown to be its plateau"
                ),
            )
            .on(&metric),
        );
        return out;
    }
    // Percent faster at twice the size, per GPU.
    let change = crate::evidence::median(&ratios);
    let rising = change > pct;
    let of = if ratios.len() < items.len() {
        format!(" of the {} measured at both sizes", ratios.len())
    } else {
        String::new()
    };
    let how = format!(
        "{double} runs {:.1}% {} than {size} on the median GPU{of}",
        change.abs(),
        if change >= 0.0 { "faster" } else { "slower" }
    );
    let reason = if rising {
        format!(
            "{what}: the rate still rises with the size ({how}): the figures at {size} are below \
             this GPU's best (raise checks.compute.size)"
        )
    } else {
        format!("{what}: {size} is its plateau here ({how})")
    };
    out.push(
        finding(
            if rising { Status::Warn } else { Status::Pass },
            Subject::node(),
            format!("{change:+.1}%"),
            expected,
            reason,
        )
        .on(&metric),
    );
    out
}

/// A product's data check on `who`: the elements checked, or the finding that says why the
/// product is wrong (a failure) or was not proven right (an error).
fn data_check(
    who: &Subject,
    what: &str,
    metric: &str,
    value: Option<&FactValue>,
) -> Result<u64, Box<Finding>> {
    let bad = |status, found: String, reason: String| {
        Err(Box::new(
            finding(status, who.clone(), found, "0 wrong elements", reason).on(metric),
        ))
    };
    let at = who.describe();
    match value {
        Some(FactValue::Elements { wrong: 0, checked }) if *checked > 0 => Ok(*checked),
        Some(FactValue::Elements { wrong, checked }) if *wrong > 0 => bad(
            Status::Fail,
            format!("{wrong} wrong of {checked}"),
            format!("{at}: {what}: {wrong} of {checked} elements of the product wrong"),
        ),
        Some(FactValue::Elements { .. }) => bad(
            Status::Error,
            "0 elements checked".into(),
            format!("{at}: {what}: no element of the product was checked"),
        ),
        Some(other) => bad(
            Status::Error,
            format!("'{}'", other.describe()),
            format!(
                "{at}: {what}: the data check's result '{}' is not an element count, so the product was not proven correct",
                other.describe()
            ),
        ),
        None => bad(
            Status::Error,
            "no data check".into(),
            format!("{at}: {what}: the product was not checked, so it was not proven correct"),
        ),
    }
}

/// The sustained load's figures and facts, per GPU ([`crate::backend::SustainedRun`]).
pub mod sustained {
    /// Each window's rate.
    pub const RATE: &str = "sustained_tflops";
    /// The readings, per sample: SM clock (MHz), power (W), temperature (°C).
    pub const CLOCK: &str = "sustained_sm_clock";
    pub const POWER: &str = "sustained_power";
    pub const TEMPERATURE: &str = "sustained_temperature";
    /// The GPU's enforced power limit (W), one reading.
    pub const POWER_LIMIT: &str = "power_limit";
    /// The last product's data check.
    pub const DATA: &str = "sustained_wrong_elements";
    /// Why the backend could not hold the GPUs under load (on the node).
    pub const UNAVAILABLE: &str = "sustained_unavailable";
    /// The fact holding the error that ended the sustained load.
    pub const ERROR: &str = "sustained_error";
    /// How many times NVML was read under load (each reading of a sample may still be missing).
    pub const READINGS: &str = "sustained_readings";

    /// The fact counting the samples that showed throttle reason `r`.
    pub fn throttle_fact(r: &str) -> String {
        format!("sustained_throttle_{r}")
    }
    /// The fact counting the samples where a reading (a metric above, or "throttle") was not
    /// given.
    pub fn unread_fact(reading: &str) -> String {
        format!("{reading}_unread")
    }
}

/// The fact saying what the GEMMs multiplied.
pub const OPERANDS: &str = "gemm_operands";

/// The operands of the check's GEMMs, by precision: "integers -45..45 for fp32, tf32, bf16".
pub fn operands(c: &ComputeCheck) -> String {
    let mut by_range: Vec<(i8, Vec<&str>)> = Vec::new();
    let mut all = c.precisions.clone();
    if let Some(l) = &c.sustained {
        all.push(l.precision);
    }
    for p in all {
        let r = crate::backend::gemm_data::range(c.size as usize, p);
        match by_range.iter_mut().find(|(x, _)| *x == r) {
            Some((_, names)) if !names.contains(&p.name()) => names.push(p.name()),
            Some(_) => {}
            None => by_range.push((r, vec![p.name()])),
        }
    }
    let parts: Vec<String> = by_range
        .iter()
        .map(|(r, names)| format!("-{r}..{r} for {}", names.join(", ")))
        .collect();
    format!("integers {}", parts.join(" and "))
}

/// Record one GPU's sustained run.
fn record_sustained(m: &mut Measured, g: usize, run: crate::backend::SustainedRun) {
    use sustained::*;
    let who = Subject::gpu(g);
    m.metrics
        .push(Metric::new(RATE, who.clone(), UNIT, run.tflops));
    // Each reading's own count: a window's reading, or the one power limit.
    let mut reading = |name: &str, unit: &str, values: Vec<Option<f64>>| {
        let read: Vec<f64> = values.iter().flatten().copied().collect();
        let unread = (values.len() - read.len()) as u64;
        if unread > 0 {
            m.facts.push(Fact::new(
                unread_fact(name),
                who.clone(),
                FactValue::Count(unread),
            ));
        }
        if !read.is_empty() {
            m.metrics.push(Metric::new(name, who.clone(), unit, read));
        }
    };
    reading(
        CLOCK,
        "MHz",
        run.samples
            .iter()
            .map(|s| s.sm_clock_mhz.map(f64::from))
            .collect(),
    );
    reading(POWER, "W", run.samples.iter().map(|s| s.power_w).collect());
    reading(
        TEMPERATURE,
        "°C",
        run.samples.iter().map(|s| s.temperature_c).collect(),
    );
    reading(POWER_LIMIT, "W", vec![run.power_limit_w]);
    m.facts.push(Fact::new(
        READINGS,
        who.clone(),
        FactValue::Count(run.samples.len() as u64),
    ));
    let unread = run.samples.iter().filter(|s| s.throttle.is_none()).count() as u64;
    if unread > 0 {
        m.facts.push(Fact::new(
            unread_fact("throttle"),
            who.clone(),
            FactValue::Count(unread),
        ));
    }
    let mut seen: std::collections::BTreeMap<&str, u64> = Default::default();
    for r in run.samples.iter().flat_map(|s| s.throttle.iter().flatten()) {
        *seen.entry(r.as_str()).or_default() += 1;
    }
    for (r, k) in seen {
        m.facts.push(Fact::new(
            throttle_fact(r),
            who.clone(),
            FactValue::Count(k),
        ));
    }
    m.facts.push(Fact::new(
        DATA,
        who,
        FactValue::Elements {
            wrong: run.wrong_elements,
            checked: run.elements_checked,
        },
    ));
}

/// The mean of the first and of the last tenth of `v` (at least one value each).
pub fn first_and_last_tenth(v: &[f64]) -> Option<(f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let k = (v.len() / 10).max(1);
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    Some((mean(&v[..k]), mean(&v[v.len() - k..])))
}

/// Judge the sustained load of every GPU.
fn evaluate_sustained(
    l: &crate::suite::SustainedLoad,
    outlier_pct: Option<f64>,
    gpus: usize,
    m: &Measured,
) -> Vec<Finding> {
    use sustained::*;
    let mut out = Vec::new();
    let what = format!("sustained {} GEMMs", l.precision);
    if let Some(f) = m.facts.iter().find(|f| f.name == UNAVAILABLE) {
        out.push(
            finding(
                Status::Skip,
                Subject::node(),
                "not available here",
                format!("every GPU under {what} for {} s", l.seconds),
                format!("not available here: {what}: {}", f.value.describe()),
            )
            .on(RATE),
        );
        return out;
    }
    if let Some(f) = m.facts.iter().find(|f| f.name == ERROR) {
        out.push(
            finding(
                Status::Error,
                Subject::node(),
                "could not measure",
                format!("every GPU under {what} for {} s", l.seconds),
                format!("{what} could not be measured: {}", f.value.describe()),
            )
            .on(RATE),
        );
        return out;
    }
    let metric = |name: &str, who: &Subject| {
        m.metrics
            .iter()
            .find(|x| x.name == name && &x.subject == who)
    };
    let count = |name: &str, who: &Subject| -> u64 {
        m.facts
            .iter()
            .find(|f| f.name == name && &f.subject == who)
            .map(|f| match f.value {
                FactValue::Count(k) => k,
                // Not a count: counted as seen, never as nothing.
                _ => u64::MAX,
            })
            .unwrap_or(0)
    };
    let na = |who: &Subject, reading: &str, on: &str| {
        finding(
            Status::Skip,
            who.clone(),
            "not available here",
            format!("{reading} under load"),
            format!(
                "not available here: {reading} of {} under load",
                who.describe()
            ),
        )
        .on(on)
    };
    let mut items = Vec::new();
    for g in 0..gpus {
        let who = Subject::gpu(g);
        let Some(rate) = metric(RATE, &who) else {
            out.push(
                finding(
                    Status::Error,
                    who.clone(),
                    "no figure",
                    "a rate per window",
                    format!("{}: {what} were not measured", who.describe()),
                )
                .on(RATE),
            );
            continue;
        };
        items.push((who.clone(), rate.median));
        let windows = rate.samples.len();
        let data = m.facts.iter().find(|f| f.name == DATA && f.subject == who);
        if let Err(f) = data_check(&who, &what, RATE, data.map(|f| &f.value)) {
            out.push(*f);
        }
        // The rate held from the first tenth of the run to the last.
        if let Some((first, last)) = first_and_last_tenth(&rate.samples) {
            let drop = 100.0 * (1.0 - last / first);
            let found = format!("{} -> {} {UNIT}", fmt_num(first), fmt_num(last));
            let expected = format!("a drop of at most {}%", l.max_rate_drop_pct);
            // A drop that is not a number (a window timed at nothing) holds nothing.
            let held = drop <= l.max_rate_drop_pct;
            let (status, reason) = if !held {
                (
                    Status::Fail,
                    format!(
                        "{}: {what} fell {:.0}% over {} s ({found}), more than {}%",
                        who.describe(),
                        drop,
                        l.seconds,
                        l.max_rate_drop_pct
                    ),
                )
            } else {
                (
                    Status::Pass,
                    format!(
                        "{}: {what} held over {} s ({found})",
                        who.describe(),
                        l.seconds
                    ),
                )
            };
            out.push(finding(status, who.clone(), found, expected, reason).on(RATE));
        }
        // Throttle reasons that fail, in any sample: not one sample read is not "none seen".
        if count(READINGS, &who) == 0 || count(&unread_fact("throttle"), &who) > 0 {
            out.push(na(&who, "throttle reasons", RATE));
        } else {
            let mut clean = true;
            for r in &l.fail_throttle {
                let k = count(&throttle_fact(r), &who);
                if k > 0 {
                    clean = false;
                    let seen = if k == u64::MAX {
                        "seen".to_string()
                    } else {
                        format!("in {k} of {windows} samples")
                    };
                    out.push(
                        finding(
                            Status::Fail,
                            who.clone(),
                            format!("{r} {seen}"),
                            format!("none of {}", l.fail_throttle.join(", ")),
                            format!("{}: throttled under load: {r} {seen}", who.describe()),
                        )
                        .on(RATE),
                    );
                }
            }
            if clean {
                out.push(
                    finding(
                        Status::Pass,
                        who.clone(),
                        "none",
                        format!("none of {}", l.fail_throttle.join(", ")),
                        format!("{}: no throttling that fails under load", who.describe()),
                    )
                    .on(RATE),
                );
            }
        }
        // Power reached: the median over the second half against the limit.
        if let Some(frac) = l.min_power_fraction {
            let power = metric(POWER, &who);
            let limit = metric(POWER_LIMIT, &who).map(|x| x.median);
            match (power, limit) {
                (Some(p), Some(lim)) if count(&unread_fact(POWER), &who) == 0 && lim > 0.0 => {
                    let half = &p.samples[p.samples.len() / 2..];
                    let med = crate::evidence::median(half);
                    let share = med / lim;
                    let found = format!("{} W of {} W", fmt_num(med), fmt_num(lim));
                    let expected = format!(">= {} of the limit", fmt_num(frac));
                    let reached = share >= frac;
                    let (status, reason) = if !reached {
                        (
                            Status::Fail,
                            format!(
                                "{}: drew {found} under load ({:.0}%), below {:.0}% of its power limit",
                                who.describe(),
                                100.0 * share,
                                100.0 * frac
                            ),
                        )
                    } else {
                        (
                            Status::Pass,
                            format!(
                                "{}: reached {found} under load ({:.0}%)",
                                who.describe(),
                                100.0 * share
                            ),
                        )
                    };
                    out.push(finding(status, who.clone(), found, expected, reason).on(POWER));
                }
                _ => out.push(na(&who, "power and its limit", POWER)),
            }
        }
        if let Some(max) = l.max_temperature_c {
            match metric(TEMPERATURE, &who) {
                Some(t) if count(&unread_fact(TEMPERATURE), &who) == 0 => {
                    let hottest = t.max;
                    let found = format!("{} °C", fmt_num(hottest));
                    let expected = format!("<= {max} °C");
                    let cool = hottest <= max;
                    let (status, reason) = if !cool {
                        (
                            Status::Fail,
                            format!(
                                "{}: reached {found} under load, above {max} °C",
                                who.describe()
                            ),
                        )
                    } else {
                        (
                            Status::Pass,
                            format!("{}: at most {found} under load", who.describe()),
                        )
                    };
                    out.push(finding(status, who.clone(), found, expected, reason).on(TEMPERATURE));
                }
                _ => out.push(na(&who, "temperature", TEMPERATURE)),
            }
        }
    }
    if let Some(pct) = outlier_pct {
        out.extend(
            outliers(&items, pct, true, &what, UNIT)
                .into_iter()
                .map(|f| f.on(RATE)),
        );
    }
    out
}

#[cfg(test)]
mod tests;
