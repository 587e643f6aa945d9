//! Regression against an earlier run (`[baseline]` in the suite): every metric this run shares
//! with the baseline evidence must not be worse than it by more than `max_regression_pct`, even
//! when it is within its absolute floor. Runs last; measures nothing itself.
//!
//! A baseline from a simulated run judging a real one (or the reverse), or from another node
//! (its twin, say), is a warning that says what was compared with what: it never passes
//! silently.

use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::checks::judge::{finding, fmt_num};
use crate::diff::{condition_changes, metric_changes, GpuMap};
use crate::error::HwError;
use crate::evidence::{Evidence, Finding, Status, Subject};
use crate::inventory::Inventory;
use std::path::{Path, PathBuf};

pub struct BaselineCheck {
    pub path: PathBuf,
    pub evidence: Evidence,
    pub max_regression_pct: f64,
}

impl Check for BaselineCheck {
    fn runs_on_gpus(&self) -> bool {
        false
    }
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
        // A baseline without metrics is refused when the suite loads; were one to get here, the
        // evaluation finds no shared metric, a comparison promised and not made (partial).
        let b = &self.evidence;
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

    fn samples(&self, _gpus: usize) -> (u64, String) {
        // Reads the inventory (or earlier records): no samples of its own.
        (0, String::new())
    }

    fn evaluate(&self, ctx: &Ctx, _: &Measured) -> Vec<Finding> {
        let pct = self.max_regression_pct;
        let gpus = GpuMap::by_identity(&self.evidence.node, ctx.inventory);
        let changes = metric_changes(&self.evidence.checks, ctx.earlier, &gpus);
        let mut out = provenance(
            &self.path,
            &self.evidence,
            ctx.inventory,
            ctx.simulated,
            &gpus,
            changes.len(),
        );
        // A check measured under other conditions than the baseline's measured something else:
        // never compared as if it were the same figure, and a comparison promised and not made
        // (the pass is a partial one).
        for n in condition_changes(&self.evidence.checks, ctx.earlier) {
            out.push(finding(
                Status::Skip,
                Subject::node(),
                "not compared",
                "the baseline's conditions",
                format!(
                    "{}: measured under other conditions than the baseline ({} in the baseline, \
                     {} here); its figures are not compared",
                    n.check, n.old, n.new
                ),
            ));
        }
        if changes.is_empty() {
            out.push(finding(
                Status::Skip,
                Subject::node(),
                "no shared metric",
                "metrics to compare",
                "no metric of this run matches one of the baseline (check id, metric and subject)",
            ));
            return out;
        }
        let with_unit =
            |v: f64, unit: &str| format!("{} {unit}", fmt_num(v)).trim_end().to_string();
        let regressions: Vec<Finding> = changes
            .iter()
            .filter(|c| c.worse_pct > pct)
            .map(|c| {
                let (old, new) = (with_unit(c.old, &c.unit), with_unit(c.new, &c.unit));
                finding(
                    Status::Fail,
                    c.subject.of_metric(&c.metric),
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
        let within = changes.len() - regressions.len();
        out.extend(regressions);
        out.push(finding(
            Status::Pass,
            Subject::node(),
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

/// Where the baseline comes from, against this run: warnings when it is simulated and this run
/// is not (or the reverse), and when it was taken on another node (another hostname, or none
/// of its GPUs here by UUID or serial). `gpus`: the baseline's GPUs matched with this run's;
/// `compared`: the metrics the two runs share.
pub fn provenance(
    path: &Path,
    baseline: &Evidence,
    this: &Inventory,
    simulated: bool,
    gpus: &GpuMap,
    compared: usize,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let b = &baseline.node;
    let what = |sim: bool| if sim { "simulated" } else { "real hardware" };
    if baseline.simulated != simulated {
        let sim_desc = baseline.simulation.as_ref().map_or(String::new(), |s| {
            format!(", node {} seed {}", s.node, s.seed)
        });
        let reason = if baseline.simulated {
            format!(
                "the baseline {} is a simulated run ({}{sim_desc}) but this run is on real hardware ({}): its {compared} shared metrics were compared with computed figures, not measurements",
                path.display(),
                b.hostname,
                this.hostname,
            )
        } else {
            format!(
                "this run is simulated but the baseline {} is from real hardware ({}): its {compared} shared metrics were compared with computed figures, which says nothing about the hardware",
                path.display(),
                b.hostname,
            )
        };
        out.push(finding(
            Status::Warn,
            Subject::node(),
            format!("{} baseline", what(baseline.simulated)),
            format!("a {} baseline, like this run", what(simulated)),
            reason,
        ));
    }
    let matched = gpus.matched();
    let same_gpus = matched.iter().filter(|m| m.matched_by != "bus id").count();
    let by_bus = matched.len() - same_gpus;
    let no_gpu_in_common = !b.gpus.is_empty() && !this.gpus.is_empty() && same_gpus == 0;
    if b.hostname != this.hostname || no_gpu_in_common {
        let in_common = if same_gpus > 0 {
            format!(
                "{same_gpus} of its {} GPUs are in this node (same UUID or serial)",
                b.gpus.len()
            )
        } else if by_bus > 0 {
            format!(
                "none of its GPUs is in this node (no UUID or serial in common); {by_bus} GPUs compared by PCI bus id"
            )
        } else {
            "none of its GPUs is in this node (no UUID, serial or bus id in common): only node-wide figures compared".into()
        };
        let node = |inv: &Inventory| format!("{} ({})", inv.hostname, inv.summary());
        let reason = if b.hostname != this.hostname {
            format!(
                "the baseline {} was taken on another node: {}, this run is on {}; {in_common}. Comparing a node with its twin can be intended",
                path.display(),
                node(b),
                node(this),
            )
        } else {
            format!(
                "the baseline {} has this hostname ({}) but {in_common}: another machine, or every GPU replaced",
                path.display(),
                this.hostname,
            )
        };
        out.push(finding(
            Status::Warn,
            Subject::node(),
            format!("baseline from {}", node(b)),
            format!("a baseline of this node, {}", node(this)),
            reason,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::Ctx;
    use crate::testutil::simulated;

    /// The baseline check's findings for `run` judged against `baseline`; `real`: this run is
    /// on real hardware.
    fn judge(baseline: &Evidence, run: &Evidence, real: bool) -> Vec<Finding> {
        let check = BaselineCheck {
            path: "handover/evidence.json".into(),
            evidence: baseline.clone(),
            max_regression_pct: 10.0,
        };
        let ctx = Ctx {
            suite: &run.suite.resolved,
            inventory: &run.node,
            earlier: &run.checks,
            simulated: !real,
        };
        check.evaluate(&ctx, &Measured::default())
    }

    fn warnings(f: &[Finding]) -> Vec<&str> {
        f.iter()
            .filter(|f| f.status == Status::Warn)
            .map(|f| f.reason.as_str())
            .collect()
    }

    /// A metric of the baseline set to `old` and the same metric of this run to `new`.
    fn one_metric(old: f64, new: f64) -> (Evidence, Evidence) {
        let ev = simulated("h200-vm-1", &[]);
        let (mut base, mut run) = (ev.clone(), ev);
        for (e, v) in [(&mut base, old), (&mut run, new)] {
            let c = e
                .checks
                .iter_mut()
                .find(|c| c.id == "host_bandwidth")
                .unwrap();
            c.metrics.retain(|m| m.name == "h2d");
            c.metrics[0].median = v;
            e.checks.retain(|c| c.id == "host_bandwidth");
        }
        (base, run)
    }

    #[test]
    fn a_metric_worse_than_allowed_fails_and_one_at_the_limit_passes() {
        // 10% allowed. 80 -> 72 is exactly 10% worse: within; 80 -> 70 (12.5%) is not.
        let judged = |new: f64| {
            let (base, run) = one_metric(80.0, new);
            judge(&base, &run, false)
        };
        let at = judged(72.0);
        assert!(at.iter().all(|f| f.status == Status::Pass), "{at:#?}");
        assert_eq!(at.last().unwrap().found, "1 of 1 metrics");
        let worse = judged(70.0);
        let fails: Vec<&Finding> = worse.iter().filter(|f| f.status == Status::Fail).collect();
        assert_eq!(fails.len(), 1, "{worse:#?}");
        assert_eq!(fails[0].subject, Subject::gpu(0));
        assert!(
            fails[0]
                .reason
                .contains("70.0 GB/s is 12.5% worse than the baseline's 80.0 GB/s"),
            "{}",
            fails[0].reason
        );
        assert_eq!(worse.last().unwrap().found, "0 of 1 metrics");
        // Better is never a regression.
        assert!(judged(90.0).iter().all(|f| f.status == Status::Pass));
    }

    /// A baseline whose compute check multiplied other operands: its figures are not held
    /// against this run's (a warning says so), and the rest still is.
    #[test]
    fn a_check_measured_under_other_conditions_than_the_baseline_is_not_judged_and_the_pass_partial(
    ) {
        let ev = simulated("h200-vm-1", &[]);
        let mut base = ev.clone();
        let compute = base.checks.iter_mut().find(|c| c.id == "compute").unwrap();
        compute
            .facts
            .retain(|f| f.name != crate::checks::compute::OPERANDS);
        // Far better in the baseline: it would fail this run if it were compared.
        for m in &mut compute.metrics {
            m.median *= 10.0;
        }
        let f = judge(&base, &ev, false);
        assert!(!f.iter().any(|x| x.status == Status::Fail), "{f:#?}");
        let w: Vec<&Finding> = f.iter().filter(|x| x.status == Status::Skip).collect();
        assert_eq!(w.len(), 1, "{f:#?}");
        assert!(
            w[0].reason.starts_with("compute: measured under other conditions than the baseline (none recorded in the baseline, gemm_operands: integers"),
            "{}",
            w[0].reason
        );
        let (status, summary, cov) = crate::runner::summarize_with_coverage(&f);
        assert_eq!(status, Status::Pass);
        assert!(cov.is_some_and(|c| c.partial()), "{summary}");
        // Compared as before, the same change fails.
        let mut same = base.clone();
        let c = same.checks.iter_mut().find(|c| c.id == "compute").unwrap();
        c.facts = ev.check("compute").unwrap().facts.clone();
        assert!(judge(&same, &ev, false)
            .iter()
            .any(|x| x.status == Status::Fail));
    }

    #[test]
    fn the_same_node_and_kind_passes_quietly() {
        let ev = simulated("h200-vm-1", &[]);
        let f = judge(&ev, &ev, false);
        assert!(f.iter().all(|f| f.status == Status::Pass), "{f:?}");
    }

    #[test]
    fn a_simulated_baseline_for_a_real_run_warns_and_the_reverse_too() {
        let sim = simulated("h200-vm-1", &[]);
        let f = judge(&sim, &sim, true);
        let w = warnings(&f);
        assert_eq!(w.len(), 1, "{f:?}");
        assert!(
            w[0].starts_with("the baseline handover/evidence.json is a simulated run (sim-")
                && w[0].contains("node h200-vm-1 seed 1) but this run is on real hardware")
                && w[0].contains("shared metrics were compared with computed figures"),
            "{}",
            w[0]
        );
        let mut real = sim.clone();
        real.simulated = false;
        real.simulation = None;
        let w = warnings(&judge(&real, &sim, false)).join("\n");
        assert!(
            w.starts_with("this run is simulated but the baseline handover/evidence.json is from real hardware"),
            "{w}"
        );
        // The regression judgement still runs next to the warning.
        assert!(judge(&real, &sim, false)
            .iter()
            .any(|f| f.status == Status::Pass && f.reason.contains("within 10% of it")));
    }

    #[test]
    fn a_baseline_from_another_node_names_both() {
        let ev = simulated("h200-vm-1", &[]);
        let mut twin = ev.clone();
        twin.node.hostname = "twin-07".into();
        for g in &mut twin.node.gpus {
            g.uuid = format!("{}-twin", g.uuid);
            g.serial = g.serial.as_ref().map(|s| format!("{s}-twin"));
        }
        let f = judge(&twin, &ev, false);
        let w = warnings(&f);
        assert_eq!(w.len(), 1, "{f:?}");
        assert!(
            w[0].contains("was taken on another node: twin-07 (1x NVIDIA H200")
                && w[0].contains(&format!("this run is on {} (1x NVIDIA H200", ev.node.hostname))
                && w[0].contains("none of its GPUs is in this node (no UUID or serial in common); 1 GPUs compared by PCI bus id")
                && w[0].contains("twin can be intended"),
            "{}",
            w[0]
        );
        // Same hostname, other GPUs: another machine by the same name, or every GPU replaced.
        twin.node.hostname = ev.node.hostname.clone();
        let w = warnings(&judge(&twin, &ev, false)).join("\n");
        assert!(
            w.contains("has this hostname") && w.contains("every GPU replaced"),
            "{w}"
        );
        // No GPU in common by any identity, the bus id included: only node-wide figures.
        let mut other = twin.clone();
        other.node.hostname = "other-01".into();
        for g in &mut other.node.gpus {
            g.pci_bus_id = "0000:ff:1f.7".into();
        }
        let w = warnings(&judge(&other, &ev, false)).join("\n");
        assert!(
            w.contains(
                "none of its GPUs is in this node (no UUID, serial or bus id in common): only \
                 node-wide figures compared"
            ),
            "{w}"
        );
        // Another hostname, the same GPUs (a renamed host): still said.
        let mut renamed = ev.clone();
        renamed.node.hostname = "old-name".into();
        let w = warnings(&judge(&renamed, &ev, false)).join("\n");
        assert!(w.contains("1 of its 1 GPUs are in this node"), "{w}");
    }
}
