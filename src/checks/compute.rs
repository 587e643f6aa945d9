//! What each GPU computes: a dense square GEMM per precision through cuBLAS (fp32 with TF32
//! off, TF32, bf16, fp8), timed by CUDA events, its product checked against the exact one
//! ([`crate::backend::gemm_data`]). Each GPU's median is judged against the suite's floor, against
//! the node's median (the slow but healthy-looking GPU: DCGM's longest level once passed a GPU
//! at a third of its peers' rate) and the node against its typical figure.
//!
//! A precision the GPU does not have (fp8 before compute capability 8.9), or that this backend
//! cannot run, is not measured: where the suite sets a limit or typical figure for it, that is
//! "not available here" and the pass is partial; where it does not, a note says so.

use super::judge::{finding, judge, outliers, typical};
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

/// The fact saying why a precision was not measured on one GPU.
pub fn unavailable_fact(p: GemmPrecision) -> String {
    format!("{}_unavailable", p.name())
}

impl Compute {
    /// Whether the suite promises a judgement of this precision's figure: a limit or a typical
    /// figure of its own. The check-wide outlier rule applies to whatever was measured; alone it
    /// promises no precision (an A100 has no fp8 to compare, and that is no missing reading).
    fn judged(&self, p: GemmPrecision) -> bool {
        let l = self.0.limit(p);
        !l.is_empty() || l.typical.is_some()
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
        Ok(vec![format!(
            "{n} GPUs x {} GEMM {s}x{s}x{s}: {} warm-up + {} timed, product checked",
            names.join(", "),
            c.warmup,
            c.iterations,
            s = c.size
        )])
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
        for g in 0..n {
            for (k, &p) in c.precisions.iter().enumerate() {
                match b.gemm(g, p, c.size, c.warmup, c.iterations) {
                    Ok(s) => {
                        m.metrics.push(
                            Metric::new(p.metric(), Subject::gpu(g), UNIT, s.tflops)
                                .timed(s.timing),
                        );
                        m.facts.push(Fact::new(
                            data_fact(p),
                            Subject::gpu(g),
                            FactValue::Elements {
                                wrong: s.wrong_elements,
                                checked: s.elements_checked,
                            },
                        ));
                    }
                    // The GPU or the backend has no such GEMM: said, never a silent gap.
                    Err(HwError::NotSupported(why)) => m.facts.push(Fact::new(
                        unavailable_fact(p),
                        Subject::gpu(g),
                        FactValue::Text(why),
                    )),
                    Err(e) => return Err(e),
                }
                progress(g * c.precisions.len() + k + 1, total);
            }
        }
        Ok(m)
    }

    fn samples(&self, gpus: usize) -> (u64, String) {
        (
            gpus as u64 * self.0.precisions.len() as u64 * u64::from(self.0.iterations),
            "checks.compute.iterations".into(),
        )
    }

    fn remeasure(&self) -> u32 {
        self.0.remeasure
    }

    fn evaluate(&self, ctx: &Ctx, m: &Measured) -> Vec<Finding> {
        let c = &self.0;
        let mut out = Vec::new();
        // A figure of no precision this check measures is a bug between measuring and judging.
        for x in &m.metrics {
            if !c.precisions.iter().any(|p| p.metric() == x.name) {
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
                    continue;
                };
                items.push((who.clone(), metric.median));
                // The product, on every GPU and precision: wrong data is a failure whether
                // or not the suite judges the figure.
                let fact = m
                    .facts
                    .iter()
                    .find(|f| f.name == data_fact(p) && f.subject == who);
                let bad = |status, found: String, reason: String| {
                    finding(status, who.clone(), found, "0 wrong elements", reason).on(p.metric())
                };
                match fact.map(|f| &f.value) {
                    Some(FactValue::Elements {
                        wrong: 0,
                        checked: t,
                    }) if *t > 0 => {
                        checked += t;
                        gemms += 1;
                    }
                    Some(FactValue::Elements { wrong, checked: t }) if *wrong > 0 => {
                        data_good = false;
                        out.push(bad(
                            Status::Fail,
                            format!("{wrong} wrong of {t}"),
                            format!(
                                "{}: {what}: {wrong} of {t} elements of the product wrong",
                                who.describe()
                            ),
                        ));
                    }
                    Some(FactValue::Elements { .. }) => {
                        data_good = false;
                        out.push(bad(
                            Status::Error,
                            "0 elements checked".into(),
                            format!(
                                "{}: {what}: no element of the product was checked",
                                who.describe()
                            ),
                        ));
                    }
                    Some(other) => {
                        data_good = false;
                        out.push(bad(
                            Status::Error,
                            format!("'{}'", other.describe()),
                            format!(
                                "{}: {what}: the data check's result '{}' is not an element count, so the product was not proven correct",
                                who.describe(),
                                other.describe()
                            ),
                        ));
                    }
                    None => {
                        data_good = false;
                        out.push(bad(
                            Status::Error,
                            "no data check".into(),
                            format!(
                                "{}: {what}: the product was not checked, so it was not proven correct",
                                who.describe()
                            ),
                        ));
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

#[cfg(test)]
mod tests;
