//! Regression against an earlier run (`[baseline]` in the suite): every metric this run shares
//! with the baseline evidence must not be worse than it by more than `max_regression_pct`, even
//! when it is within its absolute floor. Runs last; measures nothing itself.

use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::checks::judge::{finding, fmt_num};
use crate::diff::{metric_changes, GpuMap};
use crate::error::HwError;
use crate::evidence::{Evidence, Finding, Status};
use std::path::PathBuf;

pub struct BaselineCheck {
    pub path: PathBuf,
    pub evidence: Evidence,
    pub max_regression_pct: f64,
}

impl Check for BaselineCheck {
    fn id(&self) -> String {
        "baseline".into()
    }
    fn kind(&self) -> &'static str {
        "baseline"
    }
    fn title(&self) -> String {
        "Regression against the baseline".into()
    }

    fn plan(&self, _: &Ctx) -> Result<Vec<String>, String> {
        let b = &self.evidence;
        if b.checks.iter().all(|c| c.metrics.is_empty()) {
            return Err(format!(
                "the baseline {} holds no metrics",
                self.path.display()
            ));
        }
        Ok(vec![
            format!(
                "baseline {}: suite {} on {}, {}{}",
                self.path.display(),
                b.suite.name,
                b.node.hostname,
                b.started_at.format("%Y-%m-%d %H:%M UTC"),
                if b.simulated { " [SIMULATED]" } else { "" }
            ),
            format!(
                "every metric of this run it shares: fail when worse by more than {}%",
                self.max_regression_pct
            ),
        ])
    }

    fn measure(&self, _: &Ctx, _: &mut dyn Backend, _: Progress) -> Result<Measured, HwError> {
        Ok(Measured::default())
    }

    fn evaluate(&self, ctx: &Ctx, _: &Measured) -> Vec<Finding> {
        let pct = self.max_regression_pct;
        let gpus = GpuMap::by_identity(&self.evidence.node, ctx.inventory);
        let changes = metric_changes(&self.evidence.checks, ctx.earlier, &gpus);
        if changes.is_empty() {
            return vec![finding(
                Status::Skip,
                "node",
                "no shared metric",
                "metrics to compare",
                "no metric of this run matches one of the baseline (check id, metric and subject)",
            )];
        }
        let with_unit =
            |v: f64, unit: &str| format!("{} {unit}", fmt_num(v)).trim_end().to_string();
        let mut out: Vec<Finding> = changes
            .iter()
            .filter(|c| c.worse_pct > pct)
            .map(|c| {
                let (old, new) = (with_unit(c.old, &c.unit), with_unit(c.new, &c.unit));
                finding(
                    Status::Fail,
                    c.subject_text.clone(),
                    new.clone(),
                    format!("within {}% of the baseline's {old}", pct),
                    format!(
                        "{} {} {}{}: {new} is {:.1}% worse than the baseline's {old} (at most {}% allowed)",
                        c.check,
                        c.metric,
                        c.subject_text,
                        c.old_subject_text
                            .as_ref()
                            .map_or(String::new(), |o| format!(" ({o} in the baseline)")),
                        c.worse_pct,
                        pct
                    ),
                )
                .on(&c.metric)
            })
            .collect();
        let within = changes.len() - out.len();
        out.push(finding(
            Status::Pass,
            "node",
            format!("{within} of {} metrics", changes.len()),
            format!("within {}% of the baseline", pct),
            format!(
                "{within} of {} metrics shared with the baseline are within {}% of it",
                changes.len(),
                pct
            ),
        ));
        out
    }
}
