//! Each copy figure says how the GPU timed it (gated events, or plain events after a gate
//! stalled), from the backend's samples to the evidence file and back.

use nodecert::backend::sim::{load_node, SimBackend};
use nodecert::backend::*;
use nodecert::error::HwError;
use nodecert::inventory::Inventory;
use nodecert::suite::{CollectiveOp, TrainingCheck};

/// The simulated node, with the timing a real backend reports stamped on its copies: host
/// copies gated, device copies and peer copies ungated (as after a stall).
struct Stamped(SimBackend);

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
        Ok(stamp(self.0.host_copy(g, d, b, w, i)?, Timing::GatedEvents))
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
            .map(|s| stamp(s, Timing::GatedEvents))
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
        Some(&path),
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
