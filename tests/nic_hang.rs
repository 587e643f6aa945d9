//! A NIC whose firmware hangs blocks a read of its counters in the kernel for good. The NIC
//! reader gives up on it after its deadline, and the run goes on: the network check is an error
//! that names the read that did not answer (exit 3), never a hang and never a healthy NIC.

use nodecert::backend::sim::{load_node, SimBackend};
use nodecert::backend::*;
use nodecert::error::HwError;
use nodecert::evidence::Status;
use nodecert::inventory::{Gpu, Inventory};
use nodecert::network::Fabric;
use nodecert::platform::nic::{self, GpuAt, ReadFile};
use nodecert::suite::{CollectiveOp, TrainingCheck};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The simulated H100 node, with its NICs read from the HGX sysfs tree by a reader whose read of
/// mlx5_3's port 1 symbol_error blocks (until the test ends), at the inventory or after the run.
struct Hung {
    inner: SimBackend,
    at_inventory: bool,
    gate: Arc<Mutex<Receiver<()>>>,
    /// How many times the NICs were read.
    reads: Arc<AtomicUsize>,
}

const LIMIT: Duration = Duration::from_millis(300);

impl Hung {
    fn new(at_inventory: bool, reads: &Arc<AtomicUsize>) -> (Hung, Sender<()>) {
        let (release, gate) = channel();
        let inner = SimBackend::new(load_node("h100-sxm-8").unwrap(), vec![], 1).unwrap();
        let gate = Arc::new(Mutex::new(gate));
        (
            Hung {
                inner,
                at_inventory,
                gate,
                reads: Arc::clone(reads),
            },
            release,
        )
    }

    fn read(&self, gpus: &[Gpu]) -> Fabric {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let at: Vec<GpuAt> = gpus
            .iter()
            .map(|g| GpuAt {
                index: g.index,
                pci_bus_id: g.pci_bus_id.clone(),
                numa_node: g.numa_node,
            })
            .collect();
        let gate = Arc::clone(&self.gate);
        let read: ReadFile = Arc::new(move |p: &Path| {
            let s = p.to_string_lossy();
            if s.contains("/mlx5_3/ports/1/counters/symbol_error") {
                // Blocks as a hung firmware query does; released (the sender dropped) at the
                // end of the test.
                let _ = gate.lock().unwrap().recv();
            }
            std::fs::read(p).ok()
        });
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/hgx-h100-8nic");
        nic::read_within(&root, &at, LIMIT, read)
    }
}

impl Backend for Hung {
    fn info(&self) -> BackendInfo {
        self.inner.info()
    }
    fn inventory(&mut self) -> Result<Inventory, HwError> {
        let mut inv = self.inner.inventory()?;
        if self.at_inventory {
            inv.fabric = Some(self.read(&inv.gpus));
        }
        Ok(inv)
    }
    fn fabric(&mut self, gpus: &[Gpu]) -> Result<Option<Fabric>, HwError> {
        Ok(Some(self.read(gpus)))
    }
    fn host_copy(
        &mut self,
        g: usize,
        d: HostDir,
        b: u64,
        w: u32,
        i: u32,
    ) -> Result<Samples, HwError> {
        self.inner.host_copy(g, d, b, w, i)
    }
    fn host_copy_all(
        &mut self,
        d: HostDir,
        b: u64,
        w: u32,
        i: u32,
    ) -> Result<Vec<Samples>, HwError> {
        self.inner.host_copy_all(d, b, w, i)
    }
    fn device_copy(&mut self, g: usize, b: u64, w: u32, i: u32) -> Result<Samples, HwError> {
        self.inner.device_copy(g, b, w, i)
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
        self.inner.collective_no_nvls(op, sizes, w, i)
    }
    fn training(&mut self, c: &TrainingCheck) -> Result<TrainingRun, HwError> {
        self.inner.training(c)
    }
}

/// The network check of a full h100-sxm-8 run on `b`, and the run's exit code.
fn run(mut b: Hung) -> (nodecert::evidence::CheckRecord, u8) {
    let loaded = nodecert::suite::load::load("h100-sxm-8").unwrap();
    let inv = b.inventory().unwrap();
    let ev = nodecert::runner::new_evidence(&loaded, &b, inv, None, Default::default());
    let ev =
        nodecert::runner::run(&loaded, &mut b, ev, None, &mut nodecert::runner::Silent).unwrap();
    let code = nodecert::cli::exit_for(&ev);
    let net = ev.checks.into_iter().find(|c| c.id == "network").unwrap();
    (net, code)
}

#[test]
fn nic_counters_that_hang_after_the_run_are_an_error_naming_the_read() {
    let reads = Arc::new(AtomicUsize::new(0));
    let (b, _release) = Hung::new(false, &reads);
    let t0 = Instant::now();
    let (net, code) = run(b);
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
    assert_eq!(net.status, Status::Error, "{}", net.summary);
    assert_eq!(
        net.summary,
        "could not measure: reading the NICs after the run (mlx5_3 port 1: /sys/class/infiniband/mlx5_3/ports/1/counters/symbol_error) did not finish within 0.3 s"
    );
    assert!(net.findings.is_empty(), "{:#?}", net.findings);
    assert_eq!(code, 3);
    assert_eq!(reads.load(Ordering::SeqCst), 1);
}

#[test]
fn nics_that_hang_at_the_inventory_are_an_error_naming_the_read_and_are_not_read_again() {
    let reads = Arc::new(AtomicUsize::new(0));
    let (b, _release) = Hung::new(true, &reads);
    let (net, code) = run(b);
    assert_eq!(net.status, Status::Error, "{}", net.summary);
    assert_eq!(
        net.summary,
        "could not measure: reading the NICs for the inventory (mlx5_3 port 1: /sys/class/infiniband/mlx5_3/ports/1/counters/symbol_error) did not finish within 0.3 s"
    );
    assert_eq!(code, 3);
    // Read once, for the inventory: a NIC that hung is not asked again after the run.
    assert_eq!(reads.load(Ordering::SeqCst), 1);
}
