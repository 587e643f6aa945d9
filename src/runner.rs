//! Runs a suite's checks on a backend and keeps the evidence file current after each check.

use crate::backend::Backend;
use crate::checks::{self, Ctx};
use crate::evidence::*;
use crate::inventory::Inventory;
use crate::suite::load::LoadedSuite;
use chrono::Utc;
use std::path::Path;
use std::time::Instant;

/// Told about progress while checks run (the console, or nothing).
pub trait Observer {
    fn check_started(&mut self, _index: usize, _total: usize, _title: &str, _plan: &[String]) {}
    fn progress(&mut self, _done: usize, _total: usize) {}
    fn check_finished(&mut self, _record: &CheckRecord) {}
}

/// An observer that says nothing.
pub struct Silent;
impl Observer for Silent {}

/// Evidence for a run about to start.
pub fn new_evidence(
    suite: &LoadedSuite,
    backend: &dyn Backend,
    inventory: Inventory,
    simulation: Option<SimulationRecord>,
    environment: Environment,
) -> Evidence {
    let info = backend.info();
    Evidence {
        format: FORMAT_NAME.into(),
        format_version: FORMAT_VERSION,
        nodecert_version: env!("CARGO_PKG_VERSION").into(),
        simulated: info.simulated,
        simulation,
        backend: info,
        suite: SuiteRecord {
            name: suite.suite.name.clone(),
            description: suite.suite.description.clone(),
            origin: suite.origin.clone(),
            sha256: suite.sha256.clone(),
            chain: suite.chain.iter().map(|s| s.name.clone()).collect(),
            resolved: suite.suite.clone(),
        },
        node: inventory,
        environment,
        started_at: Utc::now(),
        finished_at: None,
        state: RunState::Running,
        verdict: Verdict::Incomplete,
        never_ran: suite.suite.promised_checks(),
        checks: vec![],
    }
}

/// Run every check of the suite. `evidence_path`, when given, is rewritten after each check.
pub fn run(
    suite: &LoadedSuite,
    backend: &mut dyn Backend,
    mut ev: Evidence,
    evidence_path: Option<&Path>,
    observer: &mut dyn Observer,
) -> std::io::Result<Evidence> {
    let list = checks::from_suite(suite);
    let total = list.len();
    if let Some(p) = evidence_path {
        ev.write(p)?;
    }
    for (i, check) in list.iter().enumerate() {
        let started_at = Utc::now();
        let t0 = Instant::now();
        let inventory = ev.node.clone();
        let ctx = Ctx {
            suite: &suite.suite,
            inventory: &inventory,
            earlier: &ev.checks,
            simulated: ev.simulated,
        };
        let planned = check.plan(&ctx);
        let plan_lines = planned.clone().unwrap_or_default();
        observer.check_started(i, total, &check.title(), &plan_lines);
        let (status, summary, metrics, facts, findings, coverage) = match planned {
            Err(reason) => (
                Status::Skip,
                format!("skipped: {reason}"),
                vec![],
                vec![],
                vec![],
                None,
            ),
            Ok(_) => {
                let mut prog = |d: usize, t: usize| observer.progress(d, t);
                match check.measure(&ctx, backend, &mut prog) {
                    Err(e) => (
                        Status::Error,
                        format!("could not measure: {e}"),
                        vec![],
                        vec![],
                        vec![],
                        None,
                    ),
                    Ok(mut m) => {
                        // Figures that are not numbers are refused here, at their source.
                        let mut findings = m.take_non_finite();
                        findings.extend(check.evaluate(&ctx, &m));
                        let (status, summary, coverage) = summarize_with_coverage(&findings);
                        (status, summary, m.metrics, m.facts, findings, coverage)
                    }
                }
            }
        };
        let record = CheckRecord {
            id: check.id(),
            kind: check.kind().into(),
            title: check.title(),
            status,
            summary,
            plan: plan_lines,
            metrics,
            facts,
            findings,
            coverage,
            started_at,
            duration_s: t0.elapsed().as_secs_f64(),
        };
        observer.check_finished(&record);
        ev.checks.push(record);
        ev.update_verdict();
        if let Some(p) = evidence_path {
            ev.write(p)?;
        }
    }
    ev.finished_at = Some(Utc::now());
    ev.state = RunState::Complete;
    ev.update_verdict();
    if let Some(p) = evidence_path {
        ev.write(p)?;
    }
    Ok(ev)
}

/// Status of a check from its findings, and the sentence that says why.
pub fn summarize(findings: &[Finding]) -> (Status, String) {
    let (status, summary, _) = summarize_with_coverage(findings);
    (status, summary)
}

/// [`summarize`], and the check's coverage: each judgement is a reading the platform gave, each
/// skip one it did not ("not available here"). Information is neither. A check that judged
/// something but missed a reading says so first: "partial: 4 of 7 readings available; ...".
pub fn summarize_with_coverage(findings: &[Finding]) -> (Status, String, Option<Coverage>) {
    let judged: Vec<&Finding> = findings.iter().filter(|f| f.is_judgement()).collect();
    let skipped = findings
        .iter()
        .filter(|f| !f.info && f.status == Status::Skip)
        .count();
    let Some(worst) = judged.iter().map(|f| f.status).max() else {
        let first = findings
            .iter()
            .find(|f| !f.info && f.status == Status::Skip)
            .or(findings.first());
        let coverage = (skipped > 0).then_some(Coverage {
            available: 0,
            total: skipped,
        });
        return match first {
            Some(f) => (Status::Skip, format!("skipped: {}", f.reason), coverage),
            None => (Status::Skip, "skipped: nothing to judge".into(), None),
        };
    };
    let coverage = Coverage {
        available: judged.len(),
        total: judged.len() + skipped,
    };
    let head = if coverage.partial() {
        format!(
            "partial: {} of {} readings available; ",
            coverage.available, coverage.total
        )
    } else {
        String::new()
    };
    let bad: Vec<&&Finding> = judged.iter().filter(|f| f.status == worst).collect();
    if worst == Status::Pass {
        return (
            worst,
            format!(
                "{head}{} of {} judgements within limits",
                judged.len(),
                judged.len()
            ),
            Some(coverage),
        );
    }
    let more = if bad.len() > 1 {
        format!(" (and {} more)", bad.len() - 1)
    } else {
        String::new()
    };
    (
        worst,
        format!("{head}{}{more}", bad[0].reason),
        Some(coverage),
    )
}

/// Run a suite on a simulated node in memory (no files): what tests and rehearsals use.
pub fn simulate(
    suite: &str,
    node: &str,
    faults: &[&str],
    seed: u64,
) -> Result<Evidence, crate::error::Error> {
    use crate::backend::sim::{load_node, Fault, SimBackend};
    use crate::error::{Error, InputError};
    let loaded = crate::suite::load::load(suite)?;
    let faults = faults
        .iter()
        .map(|f| Fault::parse(f).map_err(|e| Error::Input(InputError::Other(e))))
        .collect::<Result<Vec<_>, _>>()?;
    let mut b = SimBackend::new(load_node(node)?, faults, seed)?;
    let inv = b.inventory()?;
    crate::checks::check_evidence_size(&loaded, inv.gpus.len())?;
    let rec = SimulationRecord {
        node: b.node().name.clone(),
        seed,
        faults: b
            .faults()
            .iter()
            .map(crate::backend::sim::Fault::label)
            .collect(),
    };
    let ev = new_evidence(&loaded, &b, inv, Some(rec), Environment::default());
    run(&loaded, &mut b, ev, None, &mut Silent).map_err(|e| Error::Write {
        path: "memory".into(),
        source: e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::judge::finding;

    fn f(status: Status) -> Finding {
        finding(status, "GPU 0", "-", "-", format!("{status:?} reason"))
    }

    /// A backend whose figures are not numbers (a timer that gave no time, a node described
    /// without validation): the check errors naming the measurement, and the evidence written
    /// reads back.
    #[test]
    fn a_figure_that_is_not_a_number_is_an_error_and_the_evidence_reads_back() {
        use crate::backend::sim::{load_node, SimBackend};
        use crate::backend::Backend;
        let loaded = crate::suite::load::load("h200-vm-1").unwrap();
        let mut node = load_node("h200-vm-1").unwrap();
        node.perf.h2d_gbps = f64::NAN;
        node.perf.device_copy_gbps = f64::INFINITY;
        let mut b = SimBackend::new(node, vec![], 1).unwrap();
        let inv = b.inventory().unwrap();
        let ev = new_evidence(&loaded, &b, inv, None, Environment::default());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("evidence.json");
        let ev = run(&loaded, &mut b, ev, Some(&path), &mut Silent).unwrap();
        let host = ev.check("host_bandwidth").unwrap();
        assert_eq!(host.status, Status::Error);
        assert!(
            host.summary
                .contains("GPU 0: the h2d measurement gave NaN in sample 1"),
            "{}",
            host.summary
        );
        assert!(host
            .findings
            .iter()
            .any(|f| f.status == Status::Error
                && f.reason.contains("device_copy measurement gave inf")));
        assert!(host.metrics.iter().all(|m| m.median.is_finite()));
        assert_eq!(ev.verdict, Verdict::Error);
        let back = Evidence::read(&path).unwrap();
        assert_eq!(back.check("host_bandwidth").unwrap().status, Status::Error);
    }

    #[test]
    fn information_is_not_counted_as_a_judgement() {
        let all = [
            f(Status::Pass),
            f(Status::Pass),
            f(Status::Pass).informational(),
        ];
        let (st, summary, cov) = summarize_with_coverage(&all);
        assert_eq!(st, Status::Pass);
        assert_eq!(summary, "2 of 2 judgements within limits");
        assert_eq!(
            cov,
            Some(Coverage {
                available: 2,
                total: 2
            })
        );
        // Information cannot fail a check, whatever its status.
        let (st, _) = summarize(&[f(Status::Pass), f(Status::Fail).informational()]);
        assert_eq!(st, Status::Pass);
        // Information alone judges nothing.
        let (st, _) = summarize(&[f(Status::Pass).informational()]);
        assert_eq!(st, Status::Skip);
    }

    #[test]
    fn a_missing_reading_makes_a_pass_partial() {
        let all = [
            f(Status::Pass),
            f(Status::Skip),
            f(Status::Pass),
            f(Status::Skip),
        ];
        let (st, summary, cov) = summarize_with_coverage(&all);
        assert_eq!(st, Status::Pass);
        assert_eq!(
            summary,
            "partial: 2 of 4 readings available; 2 of 2 judgements within limits"
        );
        let cov = cov.unwrap();
        assert_eq!((cov.available, cov.total), (2, 4));
        assert!(cov.partial());
        let (st, summary) = summarize(&[f(Status::Fail), f(Status::Skip)]);
        assert_eq!(st, Status::Fail);
        assert_eq!(summary, "partial: 1 of 2 readings available; Fail reason");
    }

    #[test]
    fn nothing_available_is_a_skip_with_no_reading() {
        let (st, summary, cov) = summarize_with_coverage(&[f(Status::Skip), f(Status::Skip)]);
        assert_eq!(st, Status::Skip);
        assert_eq!(summary, "skipped: Skip reason");
        assert_eq!(
            cov,
            Some(Coverage {
                available: 0,
                total: 2
            })
        );
        assert_eq!(summarize_with_coverage(&[]).2, None);
    }

    #[test]
    fn the_worst_judgement_decides() {
        for worst in [Status::Warn, Status::Fail, Status::Error] {
            let (st, summary) = summarize(&[f(Status::Pass), f(worst), f(Status::Pass)]);
            assert_eq!(st, worst);
            assert_eq!(summary, format!("{worst:?} reason"));
        }
        let (_, summary) = summarize(&[f(Status::Fail), f(Status::Fail)]);
        assert_eq!(summary, "Fail reason (and 1 more)");
    }
}
