//! Runs a suite's checks on a backend and keeps the evidence file current after each check.

use crate::backend::Backend;
use crate::checks::{self, Ctx};
use crate::evidence::*;
use crate::inventory::Inventory;
use crate::suite::load::LoadedSuite;
use chrono::Utc;
use std::time::Instant;

/// Told about progress while checks run (the console, or nothing).
pub trait Observer {
    fn check_started(&mut self, _index: usize, _total: usize, _title: &str, _plan: &[String]) {}
    fn progress(&mut self, _done: usize, _total: usize) {}
    /// The attempt just judged missed (`missed`: its summary); attempt `attempt` of `allowed`
    /// starts now.
    fn remeasuring(&mut self, _attempt: u32, _allowed: u32, _missed: &str) {}
    fn check_finished(&mut self, _record: &CheckRecord) {}
    /// The closing reading found something ([`checks::during::closing_reading`]): its record.
    fn after_checks(&mut self, _record: &CheckRecord) {}
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
        format_version: BASE_FORMAT_VERSION,
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

/// Run every check of the suite. The evidence in `report`, when given (a folder this command
/// holds), is rewritten after each check.
pub fn run(
    suite: &LoadedSuite,
    backend: &mut dyn Backend,
    mut ev: Evidence,
    report: Option<&crate::fsio::write::Dir>,
    observer: &mut dyn Observer,
) -> std::io::Result<Evidence> {
    let list = checks::from_suite(suite);
    let total = list.len();
    // The error counters as the inventory read them: what grows under a check is its own.
    let mut watch = checks::during::Watch::start(&ev.node);
    // A call that timed out may still hold the driver: NVML is not read again after it.
    let mut timed_out = false;
    if let Some(d) = report {
        // Before any check: the inventory alone may need a newer version (xid_history).
        ev.settle_format_version();
        ev.write(d)?;
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
        let (status, summary, metrics, facts, findings, coverage, remeasure) = match planned {
            Err(reason) => (
                Status::Skip,
                format!("skipped: {reason}"),
                vec![],
                vec![],
                vec![],
                None,
                None,
            ),
            Ok(_) => {
                let allowed = 1 + check.remeasure();
                let mut earlier: Vec<Attempt> = Vec::new();
                loop {
                    let attempt = earlier.len() as u32 + 1;
                    let t_attempt = Instant::now();
                    let mut prog = |d: usize, t: usize| observer.progress(d, t);
                    let outcome = match check.measure(&ctx, backend, &mut prog) {
                        Err(e) => {
                            let timeout = matches!(e, crate::error::HwError::Timeout { .. });
                            timed_out |= timeout;
                            Outcome {
                                missed: false,
                                status: Status::Error,
                                summary: format!("could not measure: {e}"),
                                measured: checks::Measured::default(),
                                // A job that started on a GPU may be why (its memory taken);
                                // not after a timeout, whose stuck call NVML may wait behind.
                                findings: match check.runs_on_gpus() && !timeout {
                                    true => checks::after_gpu_check(&ctx, backend, &mut watch),
                                    false => vec![],
                                },
                                coverage: None,
                            }
                        }
                        Ok(mut m) => {
                            // Only where figures were taken on the GPUs (not a fabric check
                            // whose other nodes never came), numbers or not: a job that started
                            // may be why a timer gave none.
                            let took_figures = !m.metrics.is_empty();
                            // Figures that are not numbers are refused here, at their source.
                            let mut findings = m.take_non_finite();
                            findings.extend(check.evaluate(&ctx, &m));
                            if check.runs_on_gpus() && took_figures {
                                findings.extend(checks::after_gpu_check(&ctx, backend, &mut watch));
                            }
                            let (status, summary, coverage) = summarize_with_coverage(&findings);
                            let missed = status == Status::Fail
                                || (status == Status::Error
                                    && checks::nccl_env::any_steers(&m)
                                    && {
                                        // The same figures judged without the settings: a
                                        // failure there is a miss, measured again as any.
                                        let plain = checks::nccl_env::without_settings(&m);
                                        let again = check.evaluate(&ctx, &plain);
                                        summarize_with_coverage(&again).0 == Status::Fail
                                    });
                            Outcome {
                                missed,
                                status,
                                summary,
                                measured: m,
                                findings,
                                coverage,
                            }
                        }
                    };
                    let next = next_attempt(&outcome, attempt, allowed);
                    if next == Next::Again {
                        observer.remeasuring(attempt + 1, allowed, &outcome.summary);
                        earlier.push(Attempt {
                            attempt,
                            status: outcome.status,
                            summary: outcome.summary,
                            metrics: outcome.measured.metrics,
                            facts: outcome.measured.facts,
                            findings: outcome.findings,
                            duration_s: t_attempt.elapsed().as_secs_f64(),
                        });
                        continue;
                    }
                    let remeasure = (allowed > 1).then(|| Remeasure {
                        allowed,
                        decided_by: attempt,
                        stopped: match next {
                            Next::Stop(why) => Some(why.to_string()),
                            _ => None,
                        },
                        earlier,
                    });
                    let summary = match &remeasure {
                        Some(r) => attempts_summary(outcome.status, r, &outcome.summary),
                        None => outcome.summary,
                    };
                    break (
                        outcome.status,
                        summary,
                        outcome.measured.metrics,
                        outcome.measured.facts,
                        outcome.findings,
                        outcome.coverage,
                        remeasure,
                    );
                }
            }
        };
        // A skip of a check whose judgement the suite promised wherever it runs (the fabric
        // of a multi-node job) leaves the promise unkept.
        let unjudged = (status == Status::Skip && check.skip_is_unkept()).then(|| summary.clone());
        let record = CheckRecord {
            unjudged,
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
            remeasure,
        };
        observer.check_finished(&record);
        ev.checks.push(record);
        ev.update_verdict();
        if let Some(d) = report {
            ev.write(d)?;
        }
    }
    // What was raised or counted after the last reading: a record of its own, where it found
    // anything to judge.
    let closing = match timed_out {
        true => None,
        false => checks::during::closing_reading(&suite.suite.checks, backend, &mut watch),
    };
    if let Some(record) = closing {
        observer.after_checks(&record);
        ev.checks.push(record);
    }
    ev.finished_at = Some(Utc::now());
    ev.state = RunState::Complete;
    ev.update_verdict();
    if let Some(d) = report {
        ev.write(d)?;
    }
    Ok(ev)
}

/// One attempt of a check, measured and judged.
struct Outcome {
    status: Status,
    /// A figure missed its floor: the check failed, or its failure is not judged only because
    /// NCCL settings steered the figure ([`checks::nccl_env`]); either way, a miss to measure
    /// again.
    missed: bool,
    summary: String,
    measured: checks::Measured,
    findings: Vec<Finding>,
    coverage: Option<Coverage>,
}

/// What follows an attempt under the re-measure policy.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// The attempt decides: it held, or it was the last one allowed.
    Done,
    /// A figure missed: measure the check again.
    Again,
    /// It missed, attempts remain, and still it decides, for this reason.
    Stop(&'static str),
}

/// The re-measure policy: only a miss (a failure of a figure against its floor, judged or left
/// unjudged under NCCL settings) is measured again, while attempts remain. A pass and a warning
/// stand; an error (the node could not be measured, and a check with an error finding has the
/// status of its error) is never retried into a pass; wrong data once is a failure.
fn next_attempt(o: &Outcome, attempt: u32, allowed: u32) -> Next {
    if !o.missed || attempt >= allowed {
        return Next::Done;
    }
    if o.measured.wrong_data() {
        return Next::Stop("wrong data is never re-measured away");
    }
    if let Some(why) = checks::during::failed_under_load(&o.findings) {
        return Next::Stop(why);
    }
    Next::Again
}

/// The check's summary under the re-measure policy: which attempt decided and after how many
/// misses, then the deciding attempt's own summary.
fn attempts_summary(status: Status, r: &Remeasure, summary: &str) -> String {
    let (n, of) = (r.decided_by, r.allowed);
    let misses = r.earlier.len();
    let after = match misses {
        0 => String::new(),
        1 => ", after 1 miss".into(),
        m => format!(", after {m} misses"),
    };
    let head = match (status, &r.stopped) {
        (Status::Fail, Some(why)) => {
            format!("failed on attempt {n} of {of}{after} ({why})")
        }
        (Status::Fail, None) => format!("failed {n} of {of} attempts"),
        (Status::Pass, _) if misses == 0 => return summary.to_string(),
        (Status::Pass, _) => format!("passed on attempt {n} of {of}{after}"),
        (Status::Warn, _) => format!("warned on attempt {n} of {of}{after}"),
        // A measurement that failed, or a figure NCCL settings steered: the summary says which.
        (Status::Error, _) => format!("ended in error on attempt {n} of {of}{after}"),
        (Status::Skip, _) => format!("skipped on attempt {n} of {of}{after}"),
    };
    if misses == 0 && status != Status::Fail {
        return summary.to_string();
    }
    format!("{head}: {summary}")
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
    crate::checks::check_suite_fits(&loaded, inv.gpus.len())?;
    let rec = b.record();
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
    use crate::evidence::FactValue;

    fn f(status: Status) -> Finding {
        finding(
            status,
            Subject::gpu(0),
            "-",
            "-",
            format!("{status:?} reason"),
        )
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
        let d = crate::fsio::write::Dir::open(dir.path()).unwrap();
        let ev = run(&loaded, &mut b, ev, Some(&d), &mut Silent).unwrap();
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

    /// The evidence written before the first check already has the version its inventory
    /// needs: a GPU whose XID history could not be read is format 6 from the first byte on disk
    /// (a run killed during its first check leaves that file).
    #[test]
    fn the_first_evidence_written_has_the_version_its_inventory_needs() {
        use crate::backend::sim::{load_node, SimBackend};
        use crate::backend::Backend;
        struct FirstWrite(std::path::PathBuf, Option<u32>);
        impl Observer for FirstWrite {
            fn check_started(&mut self, index: usize, _: usize, _: &str, _: &[String]) {
                if index == 0 {
                    let v: serde_json::Value =
                        serde_json::from_str(&std::fs::read_to_string(&self.0).unwrap()).unwrap();
                    self.1 = v["format_version"].as_u64().map(|v| v as u32);
                }
            }
        }
        let loaded = crate::suite::load::load("h200-vm-1").unwrap();
        for (hidden, version) in [(false, BASE_FORMAT_VERSION), (true, PARTIAL_FORMAT_VERSION)] {
            let mut b = SimBackend::new(load_node("h200-vm-1").unwrap(), vec![], 1).unwrap();
            let mut inv = b.inventory().unwrap();
            if hidden {
                inv.gpus[0]
                    .unavailable
                    .push(crate::inventory::Reading::XidHistory);
            }
            let ev = new_evidence(&loaded, &b, inv, None, Environment::default());
            let dir = tempfile::tempdir().unwrap();
            let d = crate::fsio::write::Dir::open(dir.path()).unwrap();
            let mut first = FirstWrite(dir.path().join("evidence.json"), None);
            run(&loaded, &mut b, ev, Some(&d), &mut first).unwrap();
            assert_eq!(first.1, Some(version), "xid history hidden: {hidden}");
        }
    }

    /// Run `suite` (TOML text) on the simulated l40s-pcie-4 with `faults`.
    fn run_text(suite: &str, faults: &[&str]) -> Evidence {
        use crate::backend::sim::{load_node, Fault, SimBackend};
        use crate::backend::Backend;
        let loaded = crate::suite::load::load_source(crate::config::Source {
            name: "retry.toml".into(),
            text: format!(
                "format_version = 1\nname = \"retry\"\nextends = \"l40s-pcie-4\"\n{suite}"
            ),
        })
        .unwrap();
        let faults = faults.iter().map(|f| Fault::parse(f).unwrap()).collect();
        let mut b = SimBackend::new(load_node("l40s-pcie-4").unwrap(), faults, 1).unwrap();
        let inv = b.inventory().unwrap();
        let ev = new_evidence(&loaded, &b, inv, None, Environment::default());
        run(&loaded, &mut b, ev, None, &mut Silent).unwrap()
    }

    const TRANSIENT: &str = "slow-gpu-pair:gpu=0,peer=1,attempts=1";

    #[test]
    fn a_transient_miss_passes_on_the_next_attempt_and_the_miss_is_kept() {
        let ev = run_text("[checks.p2p_bandwidth]\nremeasure = 2\n", &[TRANSIENT]);
        let c = ev.check("p2p_bandwidth").unwrap();
        assert_eq!(c.status, Status::Pass, "{}", c.summary);
        assert!(
            c.summary
                .starts_with("passed on attempt 2 of 3, after 1 miss: "),
            "{}",
            c.summary
        );
        let r = c.remeasure.as_ref().unwrap();
        assert_eq!(
            (r.allowed, r.decided_by, r.stopped.as_deref()),
            (3, 2, None)
        );
        assert_eq!(r.earlier.len(), 1);
        let miss = &r.earlier[0];
        assert_eq!((miss.attempt, miss.status), (1, Status::Fail));
        assert!(miss.summary.contains("GPU 0 -> GPU 1"), "{}", miss.summary);
        // The miss keeps its figures; the deciding attempt measured the pair healthy.
        let read = |ms: &[Metric]| {
            ms.iter()
                .find(|m| m.name == "p2p_read" && m.subject == Subject::pair(0, 1))
                .unwrap()
                .median
        };
        assert!(read(&miss.metrics) < 0.7 * read(&c.metrics));
        assert_eq!(ev.verdict, Verdict::Pass);
    }

    #[test]
    fn a_collective_measures_again_only_under_its_own_key() {
        let slow = "slow-collective:op=all_reduce,factor=0.3,attempts=1";
        let ev = run_text("[checks.collective.all_reduce]\nremeasure = 1\n", &[slow]);
        let c = ev.check("collective.all_reduce").unwrap();
        assert_eq!(c.status, Status::Pass, "{}", c.summary);
        assert!(
            c.summary
                .starts_with("passed on attempt 2 of 2, after 1 miss"),
            "{}",
            c.summary
        );
        // all_gather has no remeasure of its own: judged on one attempt, no record.
        assert!(ev
            .check("collective.all_gather")
            .unwrap()
            .remeasure
            .is_none());
        let ev = run_text("", &[slow]);
        assert_eq!(
            ev.check("collective.all_reduce").unwrap().status,
            Status::Fail
        );
    }

    #[test]
    fn without_remeasure_the_transient_miss_fails_as_before() {
        let ev = run_text("", &[TRANSIENT]);
        let c = ev.check("p2p_bandwidth").unwrap();
        assert_eq!(c.status, Status::Fail);
        assert!(c.remeasure.is_none());
        assert!(
            c.summary.starts_with("GPU 0 -> GPU 1: peer read"),
            "{}",
            c.summary
        );
        assert_eq!(ev.verdict, Verdict::Fail);
    }

    #[test]
    fn a_persistent_miss_fails_after_every_attempt() {
        let ev = run_text(
            "[checks.p2p_bandwidth]\nremeasure = 2\n",
            &["slow-gpu-pair:gpu=0,peer=1"],
        );
        let c = ev.check("p2p_bandwidth").unwrap();
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.summary
                .starts_with("failed 3 of 3 attempts: GPU 0 -> GPU 1"),
            "{}",
            c.summary
        );
        let r = c.remeasure.as_ref().unwrap();
        assert_eq!((r.decided_by, r.earlier.len()), (3, 2));
        assert!(r.earlier.iter().all(|a| a.status == Status::Fail));
        assert_eq!(
            r.earlier.iter().map(|a| a.attempt).collect::<Vec<_>>(),
            [1, 2]
        );
    }

    #[test]
    fn wrong_data_is_never_re_measured() {
        let ev = run_text(
            "[checks.p2p_bandwidth]\nremeasure = 3\n",
            &["corrupt-copy:gpu=0,peer=1"],
        );
        let c = ev.check("p2p_bandwidth").unwrap();
        assert_eq!(c.status, Status::Fail);
        let r = c.remeasure.as_ref().unwrap();
        assert_eq!((r.decided_by, r.earlier.len()), (1, 0));
        assert_eq!(
            r.stopped.as_deref(),
            Some("wrong data is never re-measured away")
        );
        assert!(
            c.summary
                .starts_with("failed on attempt 1 of 4 (wrong data is never re-measured away): "),
            "{}",
            c.summary
        );
    }

    #[test]
    fn a_pass_at_the_first_attempt_reads_as_before() {
        let ev = run_text("[checks.host_bandwidth]\nremeasure = 1\n", &[]);
        let c = ev.check("host_bandwidth").unwrap();
        assert_eq!(c.status, Status::Pass);
        assert!(
            c.summary.ends_with("judgements within limits"),
            "{}",
            c.summary
        );
        assert!(!c.summary.contains("attempt"), "{}", c.summary);
        let r = c.remeasure.as_ref().unwrap();
        assert_eq!((r.allowed, r.decided_by, r.earlier.len()), (2, 1, 0));
    }

    /// A figure that is not a number is an error: never measured again into a pass.
    #[test]
    fn an_error_is_not_re_measured() {
        use crate::backend::sim::{load_node, SimBackend};
        use crate::backend::Backend;
        let loaded = crate::suite::load::load_source(crate::config::Source {
            name: "retry.toml".into(),
            text: "format_version = 1\nname = \"retry\"\nextends = \"h200-vm-1\"\n\
                   [checks.host_bandwidth]\nremeasure = 3\n"
                .into(),
        })
        .unwrap();
        let mut node = load_node("h200-vm-1").unwrap();
        node.perf.h2d_gbps = f64::NAN;
        let mut b = SimBackend::new(node, vec![], 1).unwrap();
        let inv = b.inventory().unwrap();
        let ev = new_evidence(&loaded, &b, inv, None, Environment::default());
        let ev = run(&loaded, &mut b, ev, None, &mut Silent).unwrap();
        let host = ev.check("host_bandwidth").unwrap();
        assert_eq!(host.status, Status::Error);
        let r = host.remeasure.as_ref().unwrap();
        assert_eq!((r.allowed, r.decided_by, r.earlier.len()), (4, 1, 0));
        assert!(host
            .summary
            .starts_with("GPU 0: the h2d measurement gave NaN"));
        assert_eq!(ev.verdict, Verdict::Error);
    }

    /// A transient miss under NCCL settings is still a miss: measured again, and the check
    /// passes on the next attempt instead of ending as an error on the first.
    #[test]
    fn a_miss_left_unjudged_under_nccl_settings_is_measured_again() {
        let fault = ["slow-collective:op=all_reduce,factor=0.7,attempts=1"];
        let set = [("NCCL_ALGO", "Ring")];
        let ev = crate::testutil::simulated_under("h100-sxm-8", &fault, &set);
        let ar = ev.check("collective.all_reduce").unwrap();
        assert_eq!(ar.status, Status::Pass, "{}", ar.summary);
        let r = ar.remeasure.as_ref().unwrap();
        assert_eq!((r.decided_by, r.earlier.len()), (2, 1));
        assert_eq!(r.earlier[0].status, Status::Error);
        assert!(
            ar.summary.starts_with("passed on attempt 2 of 3"),
            "{}",
            ar.summary
        );
        // A lasting one ends as the error that names the setting, after every attempt.
        let fault = ["slow-collective:op=all_reduce,factor=0.7"];
        let ev = crate::testutil::simulated_under("h100-sxm-8", &fault, &set);
        let ar = ev.check("collective.all_reduce").unwrap();
        assert_eq!(ar.status, Status::Error);
        assert_eq!(ar.remeasure.as_ref().unwrap().decided_by, 3);
    }

    fn outcome(status: Status, findings: Vec<Finding>, facts: Vec<Fact>) -> Outcome {
        Outcome {
            missed: status == Status::Fail,
            status,
            summary: String::new(),
            measured: checks::Measured {
                metrics: vec![],
                facts,
            },
            findings,
            coverage: None,
        }
    }

    #[test]
    fn only_a_miss_with_attempts_left_is_measured_again() {
        let miss = || outcome(Status::Fail, vec![f(Status::Fail)], vec![]);
        assert_eq!(next_attempt(&miss(), 1, 3), Next::Again);
        assert_eq!(next_attempt(&miss(), 2, 3), Next::Again);
        assert_eq!(next_attempt(&miss(), 3, 3), Next::Done);
        assert_eq!(next_attempt(&miss(), 1, 1), Next::Done);
        // A pass, a warning and an error stand.
        for st in [Status::Pass, Status::Warn, Status::Error, Status::Skip] {
            assert_eq!(
                next_attempt(&outcome(st, vec![f(st)], vec![]), 1, 3),
                Next::Done
            );
        }
        // A miss beside an error finding (a figure that was not a number): not retried.
        let o = outcome(
            Status::Error,
            vec![f(Status::Fail), f(Status::Error)],
            vec![],
        );
        assert_eq!(next_attempt(&o, 1, 3), Next::Done);
        // Wrong data from a copy, or from a collective, stops the attempts.
        for (name, value) in [
            ("p2p_read_data", "wrong data"),
            ("wrong_elements", "3/1024"),
            ("wrong_elements", "unreadable"),
        ] {
            let fact = Fact::new(name, Subject::node(), FactValue::from_legacy(name, value));
            let o = outcome(Status::Fail, vec![f(Status::Fail)], vec![fact]);
            assert_eq!(
                next_attempt(&o, 1, 3),
                Next::Stop("wrong data is never re-measured away"),
                "{name}={value}"
            );
        }
        let intact = Fact::new(
            "wrong_elements",
            Subject::node(),
            FactValue::Elements {
                wrong: 0,
                checked: 1024,
            },
        );
        let o = outcome(Status::Fail, vec![f(Status::Fail)], vec![intact]);
        assert_eq!(next_attempt(&o, 1, 3), Next::Again);
    }

    #[test]
    fn the_summary_says_which_attempt_decided() {
        let r = |decided_by: u32, misses: u32, stopped: Option<&str>| Remeasure {
            allowed: 3,
            decided_by,
            stopped: stopped.map(str::to_string),
            earlier: (1..=misses)
                .map(|attempt| Attempt {
                    attempt,
                    status: Status::Fail,
                    summary: String::new(),
                    metrics: vec![],
                    facts: vec![],
                    findings: vec![],
                    duration_s: 0.0,
                })
                .collect(),
        };
        let s = |st, r: Remeasure| attempts_summary(st, &r, "why");
        assert_eq!(
            s(Status::Fail, r(3, 2, None)),
            "failed 3 of 3 attempts: why"
        );
        assert_eq!(
            s(Status::Pass, r(3, 2, None)),
            "passed on attempt 3 of 3, after 2 misses: why"
        );
        assert_eq!(
            s(Status::Warn, r(2, 1, None)),
            "warned on attempt 2 of 3, after 1 miss: why"
        );
        assert_eq!(
            s(Status::Error, r(2, 1, None)),
            "ended in error on attempt 2 of 3, after 1 miss: why"
        );
        assert_eq!(
            s(Status::Fail, r(2, 1, Some("wrong data"))),
            "failed on attempt 2 of 3, after 1 miss (wrong data): why"
        );
        assert_eq!(s(Status::Pass, r(1, 0, None)), "why");
        assert_eq!(s(Status::Error, r(1, 0, None)), "why");
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
