//! Helpers for unit tests.

use crate::backend::sim::{self, Fault, SimBackend};
use crate::backend::{Backend, MethodRun};
use crate::error::HwError;
use crate::evidence::{Environment, Evidence};
use crate::suite::load;
use crate::suite::GemmPrecision;
use crate::training::partition::Partition;

/// A simulated run of `node` with `faults`, as `nodecert run --simulate` makes it.
pub fn simulated(node: &str, faults: &[&str]) -> Evidence {
    simulated_under(node, faults, &[])
}

/// A simulated run of `node` with `faults`, its NCCL answering `nccl_env` as the settings in
/// effect.
pub fn simulated_under(node: &str, faults: &[&str], nccl_env: &[(&str, &str)]) -> Evidence {
    simulated_with(
        &load::load(node).expect("embedded suite"),
        node,
        faults,
        nccl_env,
    )
}

/// A run of `loaded` on a simulated `node` with `faults`, its NCCL answering `nccl_env` as the
/// settings in effect.
pub fn simulated_with(
    loaded: &load::LoadedSuite,
    node: &str,
    faults: &[&str],
    nccl_env: &[(&str, &str)],
) -> Evidence {
    let faults = faults
        .iter()
        .map(|f| Fault::parse(f).expect("fault"))
        .collect();
    let mut b = SimBackend::new(sim::load_node(node).expect("node"), faults, 1)
        .expect("sim")
        .with_nccl_env(nccl_env);
    let inv = b.inventory().expect("inventory");
    let rec = b.record();
    let ev = crate::runner::new_evidence(loaded, &b, inv, Some(rec), Environment::default());
    crate::runner::run(loaded, &mut b, ev, None, &mut crate::runner::Silent).expect("run")
}

/// A simulated run of `node` named `name` (one node of a simulated fleet) with `seed`.
pub fn simulated_named(node: &str, name: &str, seed: u64, faults: &[&str]) -> Evidence {
    let loaded = load::load(node).expect("embedded suite");
    let faults = faults
        .iter()
        .map(|f| Fault::parse(f).expect("fault"))
        .collect();
    let mut b = SimBackend::new(sim::load_node(node).expect("node"), faults, seed)
        .expect("sim")
        .named(name);
    let inv = b.inventory().expect("inventory");
    let rec = b.record();
    let ev = crate::runner::new_evidence(&loaded, &b, inv, Some(rec), Environment::default());
    crate::runner::run(&loaded, &mut b, ev, None, &mut crate::runner::Silent).expect("run")
}

/// A four-GPU PCIe box (the simulated l40s-pcie-4) with its suite, and every ordered pair's
/// `metric` measured at `value(a, b)` (in `unit`), its data verified. With `two_sockets`, pairs
/// 0-1 and 2-3 are near (NODE) and the rest across sockets (SYS), all over PCIe.
pub fn pcie_box(
    metric: &str,
    unit: &str,
    two_sockets: bool,
    value: impl Fn(usize, usize) -> f64,
) -> (
    crate::suite::Suite,
    crate::inventory::Inventory,
    crate::checks::Measured,
) {
    use crate::evidence::{Metric, Subject};
    let mut inv = simulated("l40s-pcie-4", &[]).node;
    if two_sockets {
        for p in &mut inv.pairs {
            p.nvlinks = 0;
            p.pcie_path = Some(if p.a / 2 == p.b / 2 { "NODE" } else { "SYS" }.into());
        }
    }
    let suite = load::load("l40s-pcie-4").expect("embedded suite").suite;
    let mut m = crate::checks::Measured::default();
    for (a, b) in inv.ordered_pairs() {
        let s = Subject::pair(a, b);
        m.metrics
            .push(Metric::new(metric, s.clone(), unit, vec![value(a, b); 3]));
        crate::checks::verify::record(&mut m, metric, s, Some(true));
    }
    (suite, inv, m)
}

/// What a check sees of a simulated node's `suite` and `inventory`, with no earlier checks.
pub fn ctx<'a>(
    suite: &'a crate::suite::Suite,
    inventory: &'a crate::inventory::Inventory,
) -> crate::checks::Ctx<'a> {
    crate::checks::Ctx {
        suite,
        inventory,
        earlier: &[],
        simulated: true,
    }
}

/// What a scripted backend's GEMMs answer, per GPU, precision and side.
pub type GemmScript =
    Box<dyn Fn(usize, GemmPrecision, u64) -> Result<crate::backend::GemmSample, HwError>>;
/// What a scripted backend's partitioned training runs answer.
pub type MethodScript = Box<dyn Fn(Partition) -> Result<MethodRun, HwError>>;

/// A backend for the tests of one check: the calls scripted here answer as told; any other is
/// a test that reached further than it meant to (a panic).
#[derive(Default)]
pub struct Scripted {
    pub gemm: Option<GemmScript>,
    pub training_method: Option<MethodScript>,
    /// What the sustained load answers (the precision asked).
    pub sustained: Option<SustainedScript>,
    /// What each GPU's process list reads now (None: the backend cannot read them again).
    pub processes: Option<Vec<Option<Vec<crate::inventory::GpuProcess>>>>,
}

/// What a scripted backend's sustained load answers.
pub type SustainedScript =
    Box<dyn Fn(GemmPrecision) -> Result<Vec<crate::backend::SustainedRun>, HwError>>;

impl Backend for Scripted {
    fn info(&self) -> crate::backend::BackendInfo {
        unimplemented!()
    }
    fn inventory(&mut self) -> Result<crate::inventory::Inventory, HwError> {
        unimplemented!()
    }
    fn host_copy(
        &mut self,
        _: usize,
        _: crate::backend::HostDir,
        _: u64,
        _: u32,
        _: u32,
    ) -> Result<crate::backend::Samples, HwError> {
        unimplemented!()
    }
    fn host_copy_all(
        &mut self,
        _: crate::backend::HostDir,
        _: u64,
        _: u32,
        _: u32,
    ) -> Result<Vec<crate::backend::Samples>, HwError> {
        unimplemented!()
    }
    fn device_copy(
        &mut self,
        _: usize,
        _: u64,
        _: u32,
        _: u32,
    ) -> Result<crate::backend::Samples, HwError> {
        unimplemented!()
    }
    fn p2p_copy(
        &mut self,
        _: usize,
        _: usize,
        _: crate::backend::P2pMode,
        _: u64,
        _: u32,
        _: u32,
    ) -> Result<crate::backend::P2pSample, HwError> {
        unimplemented!()
    }
    fn p2p_latency(
        &mut self,
        _: usize,
        _: usize,
        _: u32,
    ) -> Result<crate::backend::Samples, HwError> {
        unimplemented!()
    }
    fn collective(
        &mut self,
        _: crate::suite::CollectiveOp,
        _: u64,
        _: u32,
        _: u32,
    ) -> Result<crate::backend::CollectiveSample, HwError> {
        unimplemented!()
    }
    fn collective_no_nvls(
        &mut self,
        _: crate::suite::CollectiveOp,
        _: &[u64],
        _: u32,
        _: u32,
    ) -> Result<Vec<crate::backend::CollectiveSample>, HwError> {
        unimplemented!()
    }
    fn training(
        &mut self,
        _: &crate::suite::TrainingCheck,
    ) -> Result<crate::backend::TrainingRun, HwError> {
        unimplemented!()
    }
    fn gemm(
        &mut self,
        gpu: usize,
        p: GemmPrecision,
        n: u64,
        _: u32,
        _: u32,
    ) -> Result<crate::backend::GemmSample, HwError> {
        (self.gemm.as_ref().expect("a scripted gemm"))(gpu, p, n)
    }
    fn sustained_gemm(
        &mut self,
        p: GemmPrecision,
        _: u64,
        _: f64,
        _: u32,
    ) -> Result<Vec<crate::backend::SustainedRun>, HwError> {
        (self.sustained.as_ref().expect("a scripted sustained load"))(p)
    }
    fn training_method(
        &mut self,
        _: &crate::suite::TrainingCheck,
        p: Partition,
    ) -> Result<MethodRun, HwError> {
        (self
            .training_method
            .as_ref()
            .expect("a scripted training_method"))(p)
    }
    fn gpu_processes(&mut self) -> Result<Vec<Option<Vec<crate::inventory::GpuProcess>>>, HwError> {
        self.processes
            .clone()
            .ok_or_else(|| HwError::NotSupported("no scripted process list".into()))
    }
}

/// Make a FIFO at `p` (and the folders above it): what nodecert must refuse to read or write,
/// since opening one for reading waits for a writer.
pub fn mkfifo(p: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).expect("c string");
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// An environment of `pairs` for code that reads variables through a function, as
/// `std::env::var` would answer it.
pub fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: std::collections::HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k: &str| m.get(k).cloned()
}
