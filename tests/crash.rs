//! Evidence is written after each check: a crash in the middle loses nothing already done.

use nodecert::backend::sim::{load_node, SimBackend};
use nodecert::backend::*;
use nodecert::error::HwError;
use nodecert::inventory::Inventory;
use nodecert::suite::{CollectiveOp, TrainingCheck};

/// The simulated node, except where a test makes it crash (as a driver bug might) or fail.
struct Faulty {
    inner: SimBackend,
    crash_on_peer_copy: bool,
    host_copy_times_out: bool,
    /// The child that measures without NVLS is killed at its deadline.
    no_nvls_times_out: bool,
    /// A job holds this GPU once the run has begun (the process lists read after a check).
    started_on: Option<usize>,
    /// Host copies fail at once (as when the device memory is taken), not by a timeout.
    host_copy_fails: bool,
    /// Every host and device copy's timer gives no number.
    copies_give_nan: bool,
    /// How often the XIDs raised since the last reading were read.
    xid_readings: u32,
}

/// Samples whose every value is not a number, as from a timer that gave no time.
fn nan(mut s: Samples) -> Samples {
    s.values.iter_mut().for_each(|v| *v = f64::NAN);
    s
}

impl Faulty {
    fn new(crash_on_peer_copy: bool, host_copy_times_out: bool) -> Self {
        let inner = SimBackend::new(load_node("h100-sxm-8").unwrap(), vec![], 1).unwrap();
        Faulty {
            inner,
            crash_on_peer_copy,
            host_copy_times_out,
            no_nvls_times_out: false,
            started_on: None,
            host_copy_fails: false,
            copies_give_nan: false,
            xid_readings: 0,
        }
    }
}

impl Backend for Faulty {
    fn info(&self) -> BackendInfo {
        self.inner.info()
    }
    fn inventory(&mut self) -> Result<Inventory, HwError> {
        self.inner.inventory()
    }
    fn host_copy(
        &mut self,
        g: usize,
        d: HostDir,
        b: u64,
        w: u32,
        i: u32,
    ) -> Result<Samples, HwError> {
        if self.host_copy_fails {
            return Err(HwError::Call {
                call: "cudaMallocHost".into(),
                detail: "out of memory".into(),
            });
        }
        if self.host_copy_times_out {
            return Err(HwError::Timeout {
                what: "cudaMemcpyAsync H2D on GPU 0".into(),
                seconds: 30.0,
            });
        }
        let s = self.inner.host_copy(g, d, b, w, i)?;
        Ok(if self.copies_give_nan { nan(s) } else { s })
    }
    fn host_copy_all(
        &mut self,
        d: HostDir,
        b: u64,
        w: u32,
        i: u32,
    ) -> Result<Vec<Samples>, HwError> {
        let all = self.inner.host_copy_all(d, b, w, i)?;
        Ok(match self.copies_give_nan {
            true => all.into_iter().map(nan).collect(),
            false => all,
        })
    }
    fn device_copy(&mut self, g: usize, b: u64, w: u32, i: u32) -> Result<Samples, HwError> {
        let s = self.inner.device_copy(g, b, w, i)?;
        Ok(if self.copies_give_nan { nan(s) } else { s })
    }
    fn p2p_copy(
        &mut self,
        s: usize,
        d: usize,
        m: P2pMode,
        b: u64,
        w: u32,
        i: u32,
    ) -> Result<P2pSample, HwError> {
        assert!(
            !self.crash_on_peer_copy,
            "simulated crash in the middle of a peer copy"
        );
        self.inner.p2p_copy(s, d, m, b, w, i)
    }
    fn p2p_latency(&mut self, s: usize, d: usize, i: u32) -> Result<Samples, HwError> {
        self.inner.p2p_latency(s, d, i)
    }
    fn collective(
        &mut self,
        op: CollectiveOp,
        b: u64,
        w: u32,
        i: u32,
    ) -> Result<CollectiveSample, HwError> {
        self.inner.collective(op, b, w, i)
    }
    fn collective_no_nvls(
        &mut self,
        op: CollectiveOp,
        sizes: &[u64],
        w: u32,
        i: u32,
    ) -> Result<Vec<CollectiveSample>, HwError> {
        if self.no_nvls_times_out {
            return Err(HwError::Timeout {
                what: "NCCL all_reduce with NVLS forced off (child process)".into(),
                seconds: 420.0,
            });
        }
        self.inner.collective_no_nvls(op, sizes, w, i)
    }
    fn training(&mut self, c: &TrainingCheck) -> Result<TrainingRun, HwError> {
        self.inner.training(c)
    }
    fn xids_since(&mut self) -> Result<Vec<Option<Vec<nodecert::inventory::XidEvent>>>, HwError> {
        self.xid_readings += 1;
        self.inner.xids_since()
    }
    fn error_counts(&mut self) -> Result<Vec<Option<nodecert::inventory::ErrorCounts>>, HwError> {
        self.inner.error_counts()
    }
    fn gpu_processes(
        &mut self,
    ) -> Result<Vec<Option<Vec<nodecert::inventory::GpuProcess>>>, HwError> {
        let Some(g) = self.started_on else {
            return Err(HwError::NotSupported("no process list".into()));
        };
        Ok((0..8)
            .map(|i| {
                Some(
                    (i == g)
                        .then(|| nodecert::inventory::GpuProcess {
                            pid: 6262,
                            name: Some("python3".into()),
                            memory_bytes: Some(70 << 30),
                        })
                        .into_iter()
                        .collect(),
                )
            })
            .collect())
    }
}

/// Run every check of `loaded` on `b`, keeping the evidence in memory only.
fn run_all(
    loaded: &nodecert::suite::load::LoadedSuite,
    b: &mut Faulty,
) -> nodecert::evidence::Evidence {
    let inv = b.inventory().unwrap();
    let ev = nodecert::runner::new_evidence(loaded, b, inv, None, Default::default());
    nodecert::runner::run(loaded, b, ev, None, &mut nodecert::runner::Silent).unwrap()
}

#[test]
fn a_crash_mid_run_leaves_the_finished_checks_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evidence.json");
    let loaded = nodecert::suite::load::load("h100-sxm-8").unwrap();
    let mut b = Faulty::new(true, false);
    let inv = b.inventory().unwrap();
    let ev = nodecert::runner::new_evidence(&loaded, &b, inv, None, Default::default());
    let d = nodecert::fsio::write::Dir::open(dir.path()).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        nodecert::runner::run(&loaded, &mut b, ev, Some(&d), &mut nodecert::runner::Silent)
    }));
    assert!(r.is_err(), "the backend was meant to crash");
    let saved =
        nodecert::evidence::Evidence::read(&path).expect("evidence readable after the crash");
    assert_eq!(saved.state, nodecert::evidence::RunState::Running);
    let ids: Vec<&str> = saved.checks.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        ["topology", "virtualization", "health", "host_bandwidth"]
    );
    assert!(saved
        .checks
        .iter()
        .all(|c| c.status == nodecert::evidence::Status::Pass));
    // Every check that ran passed, but the run did not finish: never a pass.
    assert_eq!(saved.verdict, nodecert::evidence::Verdict::Incomplete);
    assert_eq!(nodecert::cli::exit_for(&saved), 5);
    assert!(saved.never_ran.contains(&"p2p_bandwidth".to_string()));
    // No temp file left behind next to it.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["evidence.json"]);
}

/// A check that could not measure, on a node where a job started meanwhile, names the job
/// beside the error: it may be why (the memory it took).
#[test]
fn a_check_that_could_not_measure_names_a_job_that_started() {
    let loaded = nodecert::suite::load::load("h100-sxm-8").unwrap();
    let mut b = Faulty::new(false, false);
    b.host_copy_fails = true;
    b.started_on = Some(5);
    let ev = run_all(&loaded, &mut b);
    let hb = ev.check("host_bandwidth").unwrap();
    assert_eq!(hb.status, nodecert::evidence::Status::Error);
    assert!(
        hb.summary.starts_with("could not measure"),
        "{}",
        hb.summary
    );
    let started: Vec<_> = hb
        .findings
        .iter()
        .filter(|f| f.metric.as_deref() == Some("processes"))
        .collect();
    assert_eq!(started.len(), 1, "{started:#?}");
    assert!(started[0]
        .reason
        .starts_with("GPU 5: another process started on it during the run: pid 6262"));
    // After a timeout (a call that may be stuck in the driver, which NVML may wait behind) the
    // lists are not read: the check says only what timed out.
    let mut b = Faulty::new(false, true);
    b.started_on = Some(5);
    let ev2 = run_all(&loaded, &mut b);
    let hb2 = ev2.check("host_bandwidth").unwrap();
    assert!(
        hb2.summary.contains("did not finish within 30 s"),
        "{}",
        hb2.summary
    );
    assert!(hb2.findings.is_empty(), "{:#?}", hb2.findings);
    // A check whose every figure was not a number (refused, so none is left) still took its
    // figures on the GPUs: the lists are read again.
    let mut b = Faulty::new(false, false);
    b.copies_give_nan = true;
    b.started_on = Some(5);
    let ev3 = run_all(&loaded, &mut b);
    let hb3 = ev3.check("host_bandwidth").unwrap();
    assert_eq!(hb3.status, nodecert::evidence::Status::Error);
    assert!(hb3.metrics.is_empty(), "{:#?}", hb3.metrics);
    assert!(
        hb3.findings.iter().any(|f| f
            .reason
            .starts_with("GPU 5: another process started on it during the run")),
        "{:#?}",
        hb3.findings
    );
    // Checks that read what the node is do not say it: nothing of theirs ran on a GPU.
    for id in ["topology", "health", "virtualization"] {
        let c = ev.check(id).unwrap();
        assert!(
            c.findings
                .iter()
                .all(|f| !f.reason.contains("started on it during the run")),
            "{id}"
        );
    }
}

#[test]
fn a_hardware_error_in_one_check_is_reported_and_the_run_goes_on() {
    let loaded = nodecert::suite::load::load("h100-sxm-8").unwrap();
    let mut b = Faulty::new(false, true);
    let ev = run_all(&loaded, &mut b);
    let hb = ev.check("host_bandwidth").unwrap();
    assert_eq!(hb.status, nodecert::evidence::Status::Error);
    assert!(
        hb.summary.contains("did not finish within 30 s"),
        "{}",
        hb.summary
    );
    assert_eq!(
        ev.check("training").unwrap().status,
        nodecert::evidence::Status::Pass,
        "the run went on"
    );
    assert_eq!(
        nodecert::cli::exit_for(&ev),
        3,
        "an error means the node could not be tested"
    );
}

#[test]
fn a_hung_child_without_nvls_is_an_error_exit_3_never_a_slow_link() {
    let loaded = nodecert::suite::load::load("h100-sxm-8").unwrap();
    let mut b = Faulty::new(false, false);
    b.no_nvls_times_out = true;
    let ev = run_all(&loaded, &mut b);
    let ar = ev.check("collective.all_reduce").unwrap();
    assert_eq!(ar.status, nodecert::evidence::Status::Error);
    assert!(
        ar.summary.contains(
            "NCCL all_reduce with NVLS forced off (child process) did not finish within 420 s"
        ),
        "{}",
        ar.summary
    );
    assert_eq!(nodecert::cli::exit_for(&ev), 3);
}

/// After a call timed out (one that may be stuck in the driver, which NVML may wait behind),
/// the XIDs and counters are not read again at the end of the run either; otherwise they are,
/// once after the check on the GPUs and once after the last check.
#[test]
fn no_closing_reading_after_a_timeout() {
    let loaded = nodecert::suite::load::load_source(nodecert::config::Source {
        name: "t.toml".into(),
        text: "format_version = 1\nname = \"t\"\nextends = \"base\"\n[checks.topology]\n\
               enabled = false\n[checks.host_bandwidth]\n"
            .into(),
    })
    .unwrap();
    let mut b = Faulty::new(false, false);
    let ev = run_all(&loaded, &mut b);
    assert_eq!(
        ev.check("host_bandwidth").unwrap().status,
        nodecert::evidence::Status::Pass
    );
    assert_eq!(b.xid_readings, 2);
    let mut b = Faulty::new(false, true);
    let ev = run_all(&loaded, &mut b);
    assert_eq!(
        ev.check("host_bandwidth").unwrap().status,
        nodecert::evidence::Status::Error
    );
    assert_eq!(b.xid_readings, 0);
}
