//! What the real backend records beside each copy figure reaches the evidence: how the GPU timed
//! it (gated events, or plain events after a gate stalled), and where the pinned host buffers
//! were (a GPU whose buffers sat on the other socket is named).

use nodecert::backend::sim::{load_node, SimBackend};
use nodecert::backend::*;
use nodecert::error::HwError;
use nodecert::inventory::Inventory;
use nodecert::suite::{CollectiveOp, TrainingCheck};

/// The simulated node, with the timing a real backend reports stamped on its copies: host
/// copies gated, device copies and peer copies ungated (as after a stall). Host buffers sit on
/// the GPU's node (GPUs 0-3 on node 0, 4-7 on node 1), except GPU 6's, on node 0.
struct Stamped(SimBackend);

fn placed(g: usize) -> nodecert::platform::numa::HostPlacement {
    let gpu_node = (g / 4) as i32;
    nodecert::platform::numa::HostPlacement {
        gpu_node: Some(gpu_node),
        bound_cpus: Some(if g < 4 { "0-47" } else { "48-95" }.into()),
        pages_node: Some(if g == 6 { 0 } else { gpu_node }),
        ..Default::default()
    }
}

fn stamp(mut s: Samples, t: Timing) -> Samples {
    s.timing = Some(t);
    s
}

impl Backend for Stamped {
    fn info(&self) -> BackendInfo {
        self.0.info()
    }
    fn inventory(&mut self) -> Result<Inventory, HwError> {
        self.0.inventory()
    }
    fn host_copy(
        &mut self,
        g: usize,
        d: HostDir,
        b: u64,
        w: u32,
        i: u32,
    ) -> Result<Samples, HwError> {
        let mut s = stamp(self.0.host_copy(g, d, b, w, i)?, Timing::GatedEvents);
        s.host_memory = Some(placed(g));
        Ok(s)
    }
    fn host_copy_all(
        &mut self,
        d: HostDir,
        b: u64,
        w: u32,
        i: u32,
    ) -> Result<Vec<Samples>, HwError> {
        Ok(self
            .0
            .host_copy_all(d, b, w, i)?
            .into_iter()
            .enumerate()
            .map(|(g, s)| {
                let mut s = stamp(s, Timing::GatedEvents);
                s.host_memory = Some(placed(g));
                s
            })
            .collect())
    }
    fn device_copy(&mut self, g: usize, b: u64, w: u32, i: u32) -> Result<Samples, HwError> {
        Ok(stamp(self.0.device_copy(g, b, w, i)?, Timing::Events))
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
        let mut r = self.0.p2p_copy(s, d, m, b, w, i)?;
        r.gbps = stamp(r.gbps, Timing::Events);
        Ok(r)
    }
    fn p2p_latency(&mut self, s: usize, d: usize, i: u32) -> Result<Samples, HwError> {
        Ok(stamp(self.0.p2p_latency(s, d, i)?, Timing::Events))
    }
    fn collective(
        &mut self,
        op: CollectiveOp,
        b: u64,
        w: u32,
        i: u32,
    ) -> Result<CollectiveSample, HwError> {
        self.0.collective(op, b, w, i)
    }
    fn collective_no_nvls(
        &mut self,
        op: CollectiveOp,
        sizes: &[u64],
        w: u32,
        i: u32,
    ) -> Result<Vec<CollectiveSample>, HwError> {
        self.0.collective_no_nvls(op, sizes, w, i)
    }
    fn training(&mut self, c: &TrainingCheck) -> Result<TrainingRun, HwError> {
        self.0.training(c)
    }
}

#[test]
fn every_copy_figure_carries_its_timing_into_the_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evidence.json");
    let loaded = nodecert::suite::load::load("h100-sxm-8").unwrap();
    let mut b = Stamped(SimBackend::new(load_node("h100-sxm-8").unwrap(), vec![], 1).unwrap());
    let inv = b.inventory().unwrap();
    let ev = nodecert::runner::new_evidence(&loaded, &b, inv, None, Default::default());
    let ev = nodecert::runner::run(
        &loaded,
        &mut b,
        ev,
        Some(&nodecert::fsio::write::Dir::open(dir.path()).unwrap()),
        &mut nodecert::runner::Silent,
    )
    .unwrap();
    let read = nodecert::evidence::Evidence::read(&path).unwrap();
    assert_eq!(read.checks, ev.checks, "timing must survive the file");
    let timing_of = |check: &str, metric: &str| -> Vec<Option<Timing>> {
        read.check(check)
            .unwrap_or_else(|| panic!("no {check}"))
            .metrics
            .iter()
            .filter(|m| m.name == metric)
            .map(|m| m.timing)
            .collect()
    };
    for (check, metric, want) in [
        ("host_bandwidth", "h2d", Timing::GatedEvents),
        ("host_bandwidth", "all_gpus_h2d", Timing::GatedEvents),
        ("host_bandwidth", "device_copy", Timing::Events),
        ("p2p_bandwidth", "p2p_read", Timing::Events),
        ("p2p_bandwidth", "p2p_bidir", Timing::Events),
        ("p2p_latency", "latency", Timing::Events),
    ] {
        let t = timing_of(check, metric);
        assert!(!t.is_empty(), "{check}/{metric}: no figures");
        assert!(
            t.iter().all(|x| *x == Some(want)),
            "{check}/{metric}: {t:?}"
        );
    }
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"timing\": \"gated_events\""));
    assert!(text.contains("\"timing\": \"events\""));
}

#[test]
fn simulated_figures_claim_no_gpu_timing() {
    let ev = nodecert::runner::simulate("h100-sxm-8", "h100-sxm-8", &[], 1).unwrap();
    assert!(ev
        .checks
        .iter()
        .flat_map(|c| &c.metrics)
        .all(|m| m.timing.is_none()));
}

#[test]
fn host_buffers_on_the_far_socket_are_recorded_and_named() {
    use nodecert::evidence::{Status, Subject};
    let loaded = nodecert::suite::load::load("h100-sxm-8").unwrap();
    let mut b = Stamped(SimBackend::new(load_node("h100-sxm-8").unwrap(), vec![], 1).unwrap());
    let inv = b.inventory().unwrap();
    let ev = nodecert::runner::new_evidence(&loaded, &b, inv, None, Default::default());
    let ev =
        nodecert::runner::run(&loaded, &mut b, ev, None, &mut nodecert::runner::Silent).unwrap();
    let c = ev.check("host_bandwidth").unwrap();
    let fact = |name: &str, g: usize| c.fact(name, &Subject::gpu(g)).map(|f| f.value.describe());
    assert_eq!(
        fact("host_memory", 5).as_deref(),
        Some("NUMA node 1 (the GPU's), allocated on CPUs 48-95")
    );
    assert_eq!(
        fact("host_memory", 6).as_deref(),
        Some("NUMA node 0, not the GPU's node 1, allocated on CPUs 48-95")
    );
    assert!(fact("all_gpus_h2d_host_memory", 6).is_some());
    assert!(fact("host_memory_remote", 5).is_none());
    let warned: Vec<Subject> = c
        .findings
        .iter()
        .filter(|f| f.status == Status::Warn && f.reason.contains("socket link"))
        .map(|f| f.subject.clone())
        .collect();
    // Once for the GPU's own copies, once for the all-GPU copies; no other GPU.
    assert_eq!(warned, vec![Subject::gpu(6); 2], "{:#?}", c.findings);
    assert_eq!(c.status, Status::Warn);
}
